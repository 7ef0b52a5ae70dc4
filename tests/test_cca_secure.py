"""Secure Swarm CCA (islands.cca.secure) and its exact ring (islands.crypto.rns)."""

from __future__ import annotations

import secrets
from functools import partial
from typing import Any

import numpy as np
import pytest

from islands.cca import SwarmCCA
from islands.cca.maths import pooled_cca
from islands.cca.secure import (
    DealerRecord,
    DealS1,
    dealer,
    haar_orthogonal,
    secure_peer,
)
from islands.crypto import rns
from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local


def views(n: int, p: int, q: int, seed: int = 0) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3))
    X = np.hstack([z, rng.normal(size=(n, p - 3))]) @ rng.normal(size=(p, p))
    Y = np.hstack([z + 0.5 * rng.normal(size=(n, 3)), rng.normal(size=(n, q - 3))])
    return X, Y @ rng.normal(size=(q, q))


# ------------------------------------------------------------------ the ring
def test_the_ring_product_is_exact_against_python_integers() -> None:
    rng = np.random.default_rng(3)
    n, p, q = 5000, 4, 3  # more rows than one block of 2^11
    a = rns.uniform(secrets.token_bytes(32), (n, p), label=b"a")
    b = rns.uniform(secrets.token_bytes(32), (n, q), label=b"b")
    got = rns.product(a, b)
    for k, prime in enumerate(rns.PRIMES):
        ints_a = a[k].astype(np.int64).astype(object)
        ints_b = b[k].astype(np.int64).astype(object)
        want = (ints_a.T @ ints_b) % prime
        assert np.array_equal(got[k].astype(np.int64), want.astype(np.int64))
    small = rng.integers(-(2**52), 2**52, size=(6, 4)).astype(np.float64)
    assert np.array_equal(rns.decode(rns.encode(small, 0, bound=2.0**52, what="x"), 0), small)
    with pytest.raises(ValidationError, match="x: entry"):
        rns.encode(np.array([1.0, 3.0]), 10, bound=2.0, what="x")


def test_masks_are_uniform_deterministic_and_below_each_prime() -> None:
    seed = secrets.token_bytes(32)
    a = rns.uniform(seed, (200, 50), label=b"x")
    assert np.array_equal(a, rns.uniform(seed, (200, 50), label=b"x"))
    assert not np.array_equal(a, rns.uniform(seed, (200, 50), label=b"y"))
    for k, prime in enumerate(rns.PRIMES):
        assert a[k].min() >= 0 and a[k].max() < prime
        # 10,000 residues in 10 equal bins: a chi-square far beyond 40 would mean bias
        counts = np.bincount((a[k].ravel() * 10 // prime).astype(int), minlength=10)
        chi2 = float(((counts - 1000.0) ** 2 / 1000.0).sum())
        assert chi2 < 40, chi2


def test_encode_in_chunks_equals_the_integer_reference_and_names_the_global_entry() -> None:
    from islands.crypto.fixedpoint import quantize

    rng = np.random.default_rng(3)
    x = rng.uniform(-1.0, 1.0, size=(700, 150))  # 105,000 entries: several chunks
    x[0, :4] = [1.0, -1.0, 0.5 / 2**29, -1.5 / 2**29]  # the bound, and ties to even
    got = rns.encode(x, 29, bound=1.0, what="x")
    ints = quantize(x, 29, bound=1.0, fail=lambda i, v: ValueError(i))
    for k, prime in enumerate(rns.PRIMES):
        assert np.array_equal(got[k].astype(np.int64), np.remainder(ints, prime))
    for bad, match in ((np.nan, "entry 100005 is beyond"), (1.5, "entry 100005 is beyond")):
        y = x.copy()
        y.flat[100005] = bad
        with pytest.raises(ValidationError, match=match):
            rns.encode(y, 29, bound=1.0, what="x")


def test_both_holders_of_a_seed_draw_one_mask_and_shapes_share_no_values() -> None:
    """Rejected words are skipped in stream order: both holders of a seed agree; the
    shape is part of the label, so a draw of another shape shares no values with it."""
    seed = secrets.token_bytes(32)
    short = rns.uniform(seed, (400_000,), label=b"x")
    assert np.array_equal(short, rns.uniform(seed, (400_000,), label=b"x"))
    longer = rns.uniform(seed, (1_000_000,), label=b"x")
    assert not np.array_equal(longer[:, :400_000], short)
    assert np.mean(longer[:, :400_000] == short) < 1e-3


def test_pack_with_plus_packs_the_ring_sum() -> None:
    a = rns.uniform(secrets.token_bytes(32), (300, 170), label=b"a")  # several chunks
    b = rns.uniform(secrets.token_bytes(32), (300, 170), label=b"b")
    packed = rns.pack(a, plus=b)
    assert np.array_equal(packed, rns.pack(rns.add(a, b)))
    assert np.array_equal(rns.unpack(packed, (300, 170), "m", "t"), rns.add(a, b))


def test_unpack_refuses_a_residue_not_below_its_prime_and_wrong_shapes() -> None:
    r = rns.uniform(secrets.token_bytes(32), (3, 2), label=b"x")
    packed = rns.pack(r)
    assert np.array_equal(rns.unpack(packed, (3, 2), "m", "t"), r)
    bad = packed.copy()
    bad[0, 0] = (bad[0, 0] & ~np.uint64((1 << 21) - 1)) | np.uint64(rns.PRIMES[0])
    with pytest.raises(ValidationError, match="residue not below 2097143"):
        rns.unpack(bad, (3, 2), "m", "t")
    with pytest.raises(ValidationError, match=r"shape \(2, 3\)"):
        rns.unpack(packed, (2, 3), "m", "t")
    with pytest.raises(ValidationError, match="bits above"):
        rns.unpack(packed | np.uint64(1 << 63), (3, 2), "m", "t")


def test_haar_rotations_are_orthogonal_and_fresh() -> None:
    o1, o2 = haar_orthogonal(6), haar_orthogonal(6)
    np.testing.assert_allclose(o1.T @ o1, np.eye(6), atol=1e-12)
    assert not np.allclose(o1, o2)


# ------------------------------------------------------------------ exactness
@pytest.mark.parametrize(("n", "p", "q", "extra"), [
    (400, 12, 8, {}), (400, 8, 12, {}), (300, 10, 10, {}),
    (300, 10, 7, {"reg": 0.5}), (300, 10, 7, {"rank_tol": 1e-8}),
])
def test_the_secure_protocol_matches_pooled_cca(n: int, p: int, q: int,
                                                extra: dict[str, Any]) -> None:
    X, Y = views(n, p, q)
    if "rank_tol" in extra:
        X[:, 4] = X[:, 0] - 2 * X[:, 1]  # a dependent column to drop
    rho, a, b = pooled_cca(X, Y, 3, **extra)
    model = SwarmCCA(3, protocol="secure", **extra).fit(X, Y)
    assert np.abs(model.canonical_correlations_ - rho).max() < 1e-6
    # the larger view plays S1 and fixes the signs; a pair's two signs flip together
    signs = np.sign(np.sum(model.x_weights_ * a, axis=0))
    np.testing.assert_allclose(model.x_weights_ * signs, a, rtol=1e-5,
                               atol=1e-5 * np.abs(a).max())
    np.testing.assert_allclose(model.y_weights_ * signs, b, rtol=1e-5,
                               atol=1e-5 * np.abs(b).max())
    paper = SwarmCCA(3, perturb=False, **extra).fit(X, Y)
    np.testing.assert_allclose(model.canonical_correlations_, paper.canonical_correlations_,
                               atol=1e-6)


def test_the_dealer_sees_only_the_sizes() -> None:
    X, Y = views(200, 6, 5)
    model = SwarmCCA(protocol="secure", keep_payloads=True).fit(X, Y)
    to_dealer = [r for r in model.transcript_ if r.receiver == "dealer"]
    assert sorted(r.tag for r in to_dealer) == ["deal", "deal"]
    assert all(r.nbytes < 120 for r in to_dealer)  # a role, three sizes and a seed
    assert not any(r.sender == "dealer" and r.receiver == "y" for r in model.transcript_)
    run = run_local({"x": partial(secure_peer, Z=X, other="y", dealer="d"),
                     "y": partial(secure_peer, Z=Y, other="x", dealer="d"),
                     "d": partial(dealer, peers=["x", "y"])}, timeout=60)
    assert run.results["d"] == DealerRecord(200, 6, 5, "x", "y")


def test_settings_that_do_not_fit_the_secure_protocol_are_refused() -> None:
    X, Y = views(100, 5, 4)
    with pytest.raises(ValidationError, match="perturb applies to protocol='paper' only"):
        SwarmCCA(protocol="secure", perturb=True).fit(X, Y)
    with pytest.raises(ValidationError, match="'dealer'"):
        SwarmCCA(protocol="secure", dealer="x").fit(X, Y)
    with pytest.raises(ValidationError, match=r"'protocol'.*'paper' or 'secure'"):
        SwarmCCA(protocol="private").fit(X, Y)


def test_peers_running_different_protocols_are_told_so() -> None:
    from islands.cca.protocol import peer

    X, Y = views(100, 5, 4)
    roles = {"x": partial(peer, Z=X, other="y"),
             "y": partial(secure_peer, Z=Y, other="x", dealer="d"),
             "d": partial(dealer, peers=["x", "y"])}
    with pytest.raises(ValidationError, match=r"protocol='paper' but peer 'y' runs "
                                              r"protocol='secure'|protocol='secure' but peer "
                                              r"'x' runs protocol='paper'"):
        run_local(roles, timeout=30)


@pytest.mark.parametrize("deal", ["not a deal", DealS1(np.zeros((4, 4), np.uint64)),
                                  DealS1(np.full((5, 4), 2**63, np.uint64))])
def test_a_deviating_dealer_is_named(deal: Any) -> None:
    X, Y = views(100, 5, 4)

    def bad_dealer(party: Any) -> None:
        party.recv("x", "deal")
        party.recv("y", "deal")
        party.send("x", "randomness", deal)

    roles = {"x": partial(secure_peer, Z=X, other="y", dealer="d"),
             "y": partial(secure_peer, Z=Y, other="x", dealer="d"), "d": bad_dealer}
    with pytest.raises(ProtocolError, match=r"dealer 'd' sent a malformed|r_a must be"):
        run_local(roles, timeout=30)


# ------------------------------------------------------------------ the audit
def digits_halves() -> tuple[Any, Any]:
    from islands.data import load_sklearn, split_image_views

    ds = load_sklearn("digits")
    assert ds.image_shape is not None
    return split_image_views(ds.X, ds.image_shape)


def test_the_audit_cli_shows_the_attacks_failing_on_the_secure_protocol(tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from islands.cli import app

    out = tmp_path / "secure.json"
    # the masks come from the CSPRNG: at the default family-wise 0.01 a correct run is
    # flagged about once in a hundred (measured: 1 of 60), so the test asks for 1e-5; a
    # leak gives p-values far below it (the control below)
    result = CliRunner().invoke(app, ["audit", "scca", "--dataset", "digits", "--protocol",
                                      "secure", "--alpha", "1e-5", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert {"k1_rel_error", "k2_rel_error", "projector_error",
            "y_reconstruction_rel_error"} <= set(report)
    assert report["k1_rel_error"] is None and report["k2_rel_error"] is None
    assert report["projector_error"] > 0.5  # a random subspace, not span(Y)
    assert report["y_reconstruction_rel_error"] >= 1.0  # no better than the column means
    assert report["simulation"]["alpha"] == 1e-5
    assert report["simulation"]["indistinguishable"] is True
    assert report["simulation"]["same_outputs"] < 1e-6
    assert "cannot be told apart" in " ".join(result.output.split())


@pytest.mark.parametrize("extra", [{}, {"reg": 5.0}, {"rank_tol": 1e-8}])
def test_the_equivalent_view_has_the_same_outputs_and_another_column_space(
        extra: dict[str, Any]) -> None:
    from islands.cca.audit import equivalent_view

    X, Y = views(300, 8, 6)
    Y[:, 5] = Y[:, 0] - Y[:, 1]  # a dependent column, dropped by rank_tol
    if "rank_tol" not in extra:
        Y[:, 5] += np.random.default_rng(2).normal(size=300)
    other = equivalent_view(X, Y, 1)
    rho, a, b = pooled_cca(X, Y, **extra)
    rho2, a2, b2 = pooled_cca(X, other, **extra)
    np.testing.assert_allclose(rho2, rho, atol=1e-10)
    np.testing.assert_allclose(a2, a, atol=1e-8)
    np.testing.assert_allclose(b2, b, atol=1e-8)
    qy, qo = np.linalg.qr(Y - Y.mean(0))[0], np.linalg.qr(other - other.mean(0))[0]
    assert np.linalg.norm(qo - qy @ (qy.T @ qo)) > 0.5  # a different span(Y)


def test_the_audit_refuses_an_alpha_out_of_range() -> None:
    from islands.cca.audit import audit_scca

    X, Y = views(60, 6, 4)
    for alpha in (0.0, 0.6, float("nan")):
        with pytest.raises(ValidationError, match="alpha"):
            audit_scca(X, Y, protocol="secure", alpha=alpha)


def test_the_equivalent_view_refuses_when_there_is_no_room() -> None:
    from islands.cca.audit import equivalent_view

    X, Y = views(30, 20, 6)
    with pytest.raises(ValidationError, match="no room"):
        equivalent_view(X, Y)


def test_the_simulation_check_tells_unmasked_messages_apart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A negative control: with every mask zero, S1's views of Y and Y′ differ."""
    import islands.cca.secure as secure
    from islands.cca.audit import simulation_check

    X, Y = digits_halves()
    honest = simulation_check(X, Y, rank_tol=1e-10, alpha=1e-5)  # as the CLI test above
    assert honest.indistinguishable
    monkeypatch.setattr(secure.rns, "uniform",
                        lambda seed, shape, *, label: np.zeros((3, *shape), np.uint32))
    leaky = simulation_check(X, Y, rank_tol=1e-10, alpha=1e-5)
    assert not leaky.indistinguishable
    assert min(leaky.pvalues.values()) < 1e-10
    assert leaky.same_outputs < 1e-6  # still correct: the masks cancel either way


# ------------------------------------------------------------------ the review's findings
@pytest.mark.parametrize("extra", [{"rank_tol": 1e-10}, {"reg": 0.5}])
def test_a_block_that_spans_the_centred_space_is_refused(extra: dict[str, Any]) -> None:
    """With rank X_c = n − 1, S1 would read P_Y from M·Mᵀ (and CCA is degenerate)."""
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(50, 60)), rng.normal(size=(50, 5))
    with pytest.raises(ValidationError, match=r"spans all n - 1 = 49 centred dimensions"):
        SwarmCCA(1, protocol="secure", **extra).fit(X, Y)


def test_a_dealer_or_peer_whose_product_is_not_of_orthonormal_bases_is_named() -> None:
    X, Y = views(200, 6, 4)

    def random_dealer(party: Any) -> None:
        party.recv("x", "deal")
        party.recv("y", "deal")
        party.send("x", "randomness", DealS1(rns.pack(
            rns.uniform(secrets.token_bytes(32), (6, 4), label=b"junk"))))

    roles = {"x": partial(secure_peer, Z=X, other="y", dealer="d"),
             "y": partial(secure_peer, Z=Y, other="x", dealer="d"), "d": random_dealer}
    with pytest.raises(ProtocolError, match=r"product of 'y' and dealer 'd' is not a product "
                                            r"of two orthonormal bases"):
        run_local(roles, timeout=30)


@pytest.mark.parametrize("tamper", ["complex", "beyond one", "increasing", "not orthonormal",
                                    "int64"])
def test_s2_refuses_a_malformed_rho_or_w(tamper: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import islands.cca.secure as secure

    X, Y = views(200, 6, 4)
    real = secure._s1

    def deviating_s1(party: Any, other: str, *args: Any, **kwargs: Any) -> Any:
        sent = party.send

        def send(to: str, tag: str, payload: Any) -> int:
            if tag == "rho":
                payload = {"beyond one": payload * 7, "increasing": payload[::-1],
                           "int64": np.ones(payload.size, dtype=np.int64)}.get(tamper, payload)
            if tag == "Wf":
                payload = {"complex": payload.astype(complex),
                           "not orthonormal": payload * 1e6}.get(tamper, payload)
            return sent(to, tag, payload)

        party.send = send
        return real(party, other, *args, **kwargs)

    monkeypatch.setattr(secure, "_s1", deviating_s1)
    with pytest.raises(ProtocolError, match=r"peer 'x' sent malformed rho/Wf"):
        SwarmCCA(3, protocol="secure").fit(X, Y)


def test_a_peer_announcing_no_columns_is_named() -> None:
    from islands.cca.protocol import Dims

    X, _ = views(100, 5, 4)

    def liar(party: Any) -> None:
        party.recv("x", "dims")
        party.send("x", "dims", Dims(n=100, rank=0, perturb=False, protocol="secure"))

    roles = {"x": partial(secure_peer, Z=X, other="y", dealer="d"), "y": liar,
             "d": lambda party: None}
    with pytest.raises(ProtocolError, match=r"peer 'y' announced 0 columns for 100 rows"):
        run_local(roles, timeout=30)
