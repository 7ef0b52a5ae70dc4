"""Federated transfer learning under HEU's Okamoto–Uchiyama (he="ou"): the models of the
clear run, each party's key checked by the other, statistical masks, range-checked
decryption, and deviating peers refused by name."""

from __future__ import annotations

from dataclasses import replace
from functools import cache, partial
from typing import Any

import msgpack
import numpy as np
import pytest

from islands.crypto import heu

if not heu.available():
    pytest.skip("sf-heu is not importable here (pip install 'islands[heu]'; wheels exist for "
                "CPython 3.9-3.11 on Linux x86_64/aarch64 and macOS arm64)",
                allow_module_level=True)
pytest.importorskip("torch")

from islands.errors import JobError, ProtocolError, ValidationError
from islands.runtime import run_local
from islands.vfl import FederatedTransferLearner
from islands.vfl.ftl import FtlConfig, maths
from islands.vfl.ftl.protocol import (
    Hello,
    Pair,
    Plan,
    infer_source,
    infer_target,
    source,
    target,
)
from islands.vfl.ftl.spec import SPEC


@cache
def owner() -> heu.OuKeyOwner:
    """A's key in the deviating-peer tests (OU key generation takes seconds)."""
    return heu.OuKeyOwner(1024, workers=1)


def data(classes: int, n_b: int = 60, n_o: int = 20) -> tuple[Any, Any, Any, Any]:
    rng = np.random.default_rng(1)
    z = rng.normal(size=(n_b, 3))
    labels = (z[:, 0] > 0).astype(np.int64) + (z[:, 1] > 0.5 if classes == 3 else 0)
    x_b = np.hstack([z @ rng.normal(size=(3, 5)), rng.normal(size=(n_b, 1))])
    x_a = np.hstack([z[:n_o] @ rng.normal(size=(3, 4)), rng.normal(size=(n_o, 2))])
    return x_a, x_b, labels, np.arange(n_o)


def train(plan: Plan, classes: int, *, keep_payloads: bool = False) -> Any:
    x_a, x_b, labels, overlap = data(classes)
    return run_local({"A": partial(target, X=x_a, plan=plan, init_seed=1),
                      "B": partial(source, X=x_b, labels=labels, overlap=overlap,
                                   n_classes=classes, plan=plan, init_seed=2)},
                     timeout=300, keep_payloads=keep_payloads, blas_threads=None)


def scores(run: Any, x: Any, plan: Plan) -> Any:
    a, b = run.results["A"], run.results["B"]
    return run_local({"A": partial(infer_target, net=a.net, X=x, plan=plan),
                      "B": partial(infer_source, phi=b.phi, plan=plan)},
                     timeout=300, blas_threads=None).results["A"]


# ---------------------------------------------------------------- same model as in the clear


@pytest.mark.parametrize(("alignment", "loss", "classes"), [("anchored", "softmax", 3),
                                                            ("symmetric", "logistic", 2)])
def test_an_ou_run_trains_the_paillier_model_and_the_clear_one(alignment: str, loss: str,
                                                                classes: int) -> None:
    common = dict(dim=3, hidden=(6,), epochs=2, batch_size=10, pretrain_epochs=1,
                  alignment=alignment, loss=loss, key_bits=1024, insecure_keys=True, seed=5)
    plans = {he: Plan(engine="he", he=he, **common) for he in ("none", "paillier", "ou")}  # type: ignore[arg-type]
    runs = {he: train(plan, classes, keep_payloads=he == "ou") for he, plan in plans.items()}
    x_new = data(classes)[0][:6]
    got = {he: scores(runs[he], x_new, plans[he]) for he in plans}
    ou, pa, clear = (runs[he].results for he in ("ou", "paillier", "none"))
    # OU and Paillier carry the same fixed-point integers: equal bit for bit
    assert ou["B"].epoch_losses == pa["B"].epoch_losses
    np.testing.assert_array_equal(ou["B"].phi, pa["B"].phi)
    np.testing.assert_array_equal(got["ou"], got["paillier"])
    # and the clear run's floats to the fixed-point precision (2^-24 per value)
    np.testing.assert_allclose(ou["B"].epoch_losses, clear["B"].epoch_losses, rtol=1e-6)
    np.testing.assert_allclose(ou["B"].phi, clear["B"].phi, atol=1e-5)
    np.testing.assert_allclose(got["ou"], got["none"], atol=1e-5)
    assert ou["A"].clock.he > 0 and clear["A"].clock.he == 0
    # what each key owner decrypted: every masked value in (0, 2^(k+σ+1)), 128 bits above G
    plan, b, d = plans["ou"], 10, 3
    for sender, k in (("A", maths.value_bits(d, 24)),
                      ("B", maths.value_bits(b * d + d * d, 24))):
        opened = [v for r in runs["ou"].transcript.with_tag("opened") if r.receiver == sender
                  for v in r.payload]
        assert opened and all(0 < v < 2 ** (k + heu.MASK_BITS + 1) for v in opened)
        assert max(opened) > 2 ** (k + heu.MASK_BITS - 8)
    hello = runs["ou"].transcript.with_tag("hello")[0].payload
    assert hello.djn_base is None and plan.he == "ou"
    assert heu.OuCipher.from_public_bytes(hello.public_key, owner="t", min_bits=1024)


def test_the_estimator_under_ou_equals_the_clear_run() -> None:
    x_a, x_b, labels, _ = data(2, n_b=80, n_o=40)
    ids_b = [f"id{i}" for i in range(x_b.shape[0])]
    kw = dict(dim=3, hidden=(6,), epochs=2, batch_size=12, pretrain_epochs=1, key_bits=1024,
              insecure_keys=True, random_state=4)
    fits = {he: FederatedTransferLearner(engine="he", he=he, **kw).fit(  # type: ignore[arg-type]
        x_a, x_b, labels, ids_b[:40], ids_b) for he in ("none", "ou")}
    np.testing.assert_allclose(fits["ou"].loss_history_, fits["none"].loss_history_,
                               rtol=1e-6)
    np.testing.assert_allclose(fits["ou"].decision_function(x_a[:8]),
                               fits["none"].decision_function(x_a[:8]), atol=1e-5)
    assert fits["ou"].plan_.he == "ou" and "he='ou'" in repr(fits["ou"])


# ---------------------------------------------------------------- the rename


def test_encryption_was_renamed_to_he_everywhere() -> None:
    said = r"'encryption' was renamed to 'he' \('ou', 'paillier' or 'none'"
    with pytest.raises(ValidationError, match=rf"^FederatedTransferLearner: {said}"):
        FederatedTransferLearner(encryption="none")
    with pytest.raises(ValidationError, match=rf"^FederatedTransferLearner: {said}"):
        FederatedTransferLearner().set_params(encryption="paillier")
    with pytest.raises(JobError, match=rf"^federation file f.toml \[ftl\]: {said}"):
        SPEC.settings({"source": "B", "encryption": "none"}, "federation file f.toml [ftl]",
                      ("A", "B"))
    fed = SPEC.settings({"source": "B", "engine": "he", "he": "ou", "key_bits": 3072},
                        "federation file f.toml [ftl]", ("A", "B"))
    assert fed.plan.he == "ou" and fed.scheme == "3072-bit Okamoto-Uchiyama (HEU)"
    with pytest.raises(ValidationError, match=r"'he' parameter .* must be None, 'ou', "
                       r"'paillier' or 'none'. Got 'rsa'"):
        FtlConfig.build(None, he="rsa")
    assert FtlConfig().he is None and FtlConfig(engine="he").he == "ou"  # OU: the fastest HE


# ---------------------------------------------------------------- deviating peers

PLAN = Plan(engine="he", he="ou", dim=2, hidden=(4,), epochs=1, batch_size=10, pretrain_epochs=0,
            key_bits=1024, insecure_keys=True, seed=3)
ROWS, B_ROWS, FEATURES = 20, 10, 6  # the first batch of the plan has 10 rows


def ou_key_fields() -> tuple[list[Any], bytes]:
    raw = owner().public_bytes()
    unpacker = msgpack.Unpacker(raw=True)
    unpacker.feed(raw)
    return next(unpacker), raw[unpacker.tell():]


def deviating_target(party: Any, *, key: bytes | None = None, djn_base: int | None = None,
                     reps: Any = None, masked: list[int] | None = None,
                     opened: Any = None) -> None:
    """A that plays its first step with the given deviation (None: honest values)."""
    mine = owner().cipher()
    party.send("B", "hello", Hello(ROWS, FEATURES, PLAN.text(),
                                   owner().public_bytes() if key is None else key, djn_base, 0))
    hello = party.recv("B", "hello")
    theirs = heu.OuCipher.from_public_bytes(hello.public_key, owner="A", min_bits=1024)
    b, d, k = B_ROWS, PLAN.dim, hello.scores
    if reps is None:
        reps = Pair(mine.to_bytes(mine.encrypt([1] * (b * d))),
                    mine.to_bytes(mine.encrypt([1] * (d * d))))
    party.send("B", "reps", reps)
    party.recv("B", "terms")
    values = [1] * (b * d) if masked is None else masked
    party.send("B", "masked", theirs.to_bytes(theirs.encrypt(values)))
    party.recv("B", "masked")
    party.send("B", "opened", [1] * (k * d + 1) if opened is None else opened)
    party.recv("B", "opened")


def play_source(deviation: dict[str, Any]) -> None:
    _, x_b, labels, _ = data(2)
    run_local({"A": partial(deviating_target, **deviation),
               "B": partial(source, X=x_b, labels=labels, overlap=np.arange(ROWS),
                            n_classes=2, plan=PLAN, init_seed=2)}, timeout=300)


def test_a_peer_key_shorter_than_the_plan_is_refused_at_hello() -> None:
    plan = replace(PLAN, key_bits=1280, insecure_keys=True)
    x_a = data(2)[0]

    def source_with_short_key(party: Any) -> None:
        party.recv("A", "hello")
        party.send("A", "hello", Hello(ROWS, FEATURES, plan.text(), owner().public_bytes(),
                                       None, 2))

    with pytest.raises(ProtocolError, match=r"hello from 'B'.*at least 1280 bits; got 10"):
        run_local({"A": partial(target, X=x_a, plan=plan), "B": source_with_short_key},
                  timeout=300)


@pytest.mark.parametrize(("deviation", "said"), [
    ({"djn_base": 5}, r"peer 'A' sent a DJN base with an OU key"),
    ({"key": b"\xc1garbage"}, r"hello from 'A'.*malformed OU public key"),
    ({"key": b""}, r"hello from 'A'.*the OU public key holds 0 bytes"),
])
def test_a_bad_peer_key_is_refused_at_hello(deviation: dict[str, Any], said: str) -> None:
    with pytest.raises((ProtocolError, ValidationError), match=said):
        play_source(deviation)


def test_a_peer_key_whose_plaintexts_cannot_hold_the_masks_is_refused() -> None:
    fields, trailer = ou_key_fields()
    small = bytes(msgpack.packb([*fields[:3], 200], use_bin_type=False)) + trailer
    with pytest.raises(ProtocolError, match=r"need \d+ bits but the OU key's plaintexts hold "
                       r"200.*hello from 'A'"):
        play_source({"key": small})


@pytest.mark.parametrize(("reps", "said"), [
    (Pair(b"garbage", b""), r"reps was encrypted under another public key"),
    (Pair("text", b""), r"reps is not a ciphertext blob"),
    ("not a pair", r"peer 'A' sent malformed representations"),
])
def test_malformed_ciphertexts_are_refused_and_named(reps: Any, said: str) -> None:
    with pytest.raises(ProtocolError, match=said):
        play_source({"reps": reps})


def test_wrong_counts_and_non_units_are_refused() -> None:
    mine = owner().cipher()
    short = Pair(mine.to_bytes(mine.encrypt([1] * 3)), mine.to_bytes(mine.encrypt([1] * 4)))
    with pytest.raises(ProtocolError, match=r"reps must hold 20 ciphertexts"):
        play_source({"reps": short})
    blob = mine.to_bytes(mine.encrypt([1] * 20))
    head = msgpack.unpackb(blob[32:], raw=True)
    n = mine.n
    head[3][4] = bytes(msgpack.packb([n.to_bytes(n.bit_length() // 8 + 1, "little")],
                                     use_bin_type=False)) + head[3][4][-8:]
    bad = Pair(blob[:32] + bytes(msgpack.packb(head, use_bin_type=False)),
               mine.to_bytes(mine.encrypt([1] * 4)))
    with pytest.raises(ProtocolError, match=r"reps\[4\] is not a unit in \(0, n\)"):
        play_source({"reps": bad})


@pytest.mark.parametrize(("masked", "said"), [
    ([1] * 19 + [1 << 300], r"peer 'A' sent masked values that decrypt outside the range"),
    ([1] * 19 + [0], r"peer 'A' sent masked values that decrypt outside the range"),
    ([-5] * 20, r"peer 'A' sent masked values that decrypt outside the range"),
])
def test_out_of_range_decryptions_are_refused(masked: list[int], said: str) -> None:
    """B, the key owner, decrypts nothing for A beyond the masks' range (OU's CCA, HEU)."""
    with pytest.raises(ProtocolError, match=said) as info:
        play_source({"masked": masked})
    assert info.value.step == "masked"


@pytest.mark.parametrize("opened", [[1 << 400] * 5, [0] * 5, "text", [1] * 4])
def test_out_of_range_returned_values_are_refused(opened: Any) -> None:
    """B refuses masked values A returns that no honest decryption gives (K·d + 1 = 5)."""
    with pytest.raises(ProtocolError, match=r"peer 'A' returned malformed opened"):
        play_source({"opened": opened})


# ---------------------------------------------------------------- the matrix operations


@pytest.mark.parametrize(("rows", "cols", "k", "bits"), [(1, 1, 1, 1), (3, 2, 5, 3),
                                                         (12, 4, 7, 30), (40, 3, 2, 61)])
def test_matrix_products_are_exact(rows: int, cols: int, k: int, bits: int) -> None:
    """Wᵀ X under OU equals the integer product, signs, zeros and 61-bit weights included."""
    c, rng = owner().cipher(), np.random.default_rng(bits)
    x = rng.integers(-2**40, 2**40, size=(rows, cols))
    w = rng.integers(-2**bits, 2**bits, size=(rows, k), dtype=np.int64)
    w[0, 0] = 0
    column = c.encrypt(x.ravel().tolist())
    got = c.as_column(c.products(c.as_matrix(column, rows, cols), w))
    expected = (w.T.astype(object) @ x.astype(object)).ravel().tolist()
    assert owner().decrypt(got, 120, positive=False, what="t", sender="t") == expected
    # gathers and concatenations keep the order
    both = c.concat([column, c.take(column, [rows * cols - 1, 0])])
    assert owner().decrypt(both, 64, positive=False, what="t", sender="t") == [
        *x.ravel().tolist(), int(x.ravel()[-1]), int(x.ravel()[0])]


def test_matrix_products_refuse_bad_weights() -> None:
    c = owner().cipher()
    m = c.as_matrix(c.encrypt([1, 2, 3, 4]), 2, 2)
    with pytest.raises(ValidationError, match=r"shape \(2, k\)"):
        c.products(m, np.ones((3, 1), dtype=np.int64))
    with pytest.raises(ValidationError, match="int64"):
        c.products(m, np.ones((2, 1)))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="below 2\\^62"):
        c.products(m, np.full((2, 1), 1 << 62, dtype=np.int64))
    with pytest.raises(ValidationError, match=r"3 ciphertexts for a \(2, 2\) matrix"):
        c.as_matrix(c.encrypt([1, 2, 3]), 2, 2)
