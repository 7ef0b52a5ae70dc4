"""Protections of horizontal FL: every aggregator against the plain weighted mean, secure
aggregation stage by stage with dropouts, additive sharing, client-level DP."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from islands.aggregation.additive import AdditiveSharing
from islands.aggregation.base import AggStep, MeanAggregator
from islands.aggregation.protect import ChaosPermutation, ClientDP, build_aggregator
from islands.aggregation.secagg import (
    SecAggAdvertise,
    SecAggClient,
    SecAggUnmask,
    SecureAggregation,
    threshold_for,
)
from islands.errors import ProtocolError, ValidationError
from islands.hfl import FedAvg
from islands.hfl.protocol import client, server
from islands.runtime import Transcript, run_local
from scripted import ScriptedLearner

DIM = 257


def federation(k: int, seed: int = 0) -> tuple[list[int], list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    counts = [int(c) for c in rng.integers(20, 200, size=k)]
    vs = [rng.normal(size=DIM).astype(np.float32) for _ in range(k)]
    w0 = rng.normal(size=DIM).astype(np.float32)
    return counts, vs, w0


def expected_mean(w: np.ndarray, counts: list[int], vs: list[np.ndarray],
                  survivors: list[int]) -> np.ndarray:
    p = np.array([counts[i] for i in survivors], dtype=np.float64)
    p /= p.sum()
    return sum(pk * (0.5 * w.astype(np.float64) + vs[i]) for pk, i in zip(p, survivors,
                                                                          strict=True))


def run(aggregator: Any, k: int = 3, epochs: int = 2, halves: dict[str, Any] | None = None,
        timeout: float = 20.0, transcript: Transcript | None = None,
        min_clients: int = 1) -> tuple[Any, dict[str, Any], list[int], list[np.ndarray],
                                        np.ndarray]:
    counts, vs, w0 = federation(k)
    names = [f"c{i}" for i in range(k)]
    strategy = FedAvg(local_steps=1, batch_size=None, aggregator=aggregator,
                      min_clients=min_clients)
    roles: dict[str, Any] = {"server": partial(server, clients=names, strategy=strategy,
                                               initial=w0, epochs=epochs,
                                               client_timeout=timeout)}
    for i, name in enumerate(names):
        roles[name] = partial(client, server="server",
                              learner=ScriptedLearner(counts[i], vs[i]),
                              aggregator=aggregator, half=(halves or {}).get(name),
                              task_timeout=timeout)
    result = run_local(roles, timeout=timeout * 4, tolerate=names, transcript=transcript)
    return result, result.results, counts, vs, w0


def final_model(results: dict[str, Any]) -> np.ndarray:
    srv = results["server"]
    if srv.params is not None:
        return np.asarray(srv.params, dtype=np.float64)
    opened = [r.params for name, r in results.items() if name != "server" and r.params is not None]
    assert opened, "no client opened the final model"
    for other in opened[1:]:
        np.testing.assert_array_equal(other, opened[0])
    return np.asarray(opened[0], dtype=np.float64)


# --------------------------------------------------------------------------- contract
# tolerance each encoding implies on the mean of 3 clients over 2 rounds (values ~N(0,1)):
# float32 output rounding (≈ 6e-8·|w|) dominates the ring encodings' 3·2^-33; CKKS adds
# its ~1e-7 approximation error; Paillier 3·2^-33.
CONTRACT = [
    ("mean", lambda: MeanAggregator(), 1e-6),
    ("secagg", lambda: SecureAggregation(), 1e-6),
    ("additive", lambda: AdditiveSharing(), 1e-6),
    ("chaos+secagg", lambda: ChaosPermutation(SecureAggregation()), 1e-6),
    ("ckks", lambda: build_aggregator(["ckks"]), 5e-6),
    ("ckks+chaos", lambda: build_aggregator(["ckks", "chaos"]), 5e-6),
    ("paillier", lambda: build_aggregator(["paillier"]),
     1e-6),
]


@pytest.mark.parametrize(("name", "make", "tol"), CONTRACT, ids=[c[0] for c in CONTRACT])
def test_every_aggregator_equals_the_plain_weighted_mean(name: str, make: Any,
                                                         tol: float) -> None:
    if name.startswith("ckks"):
        pytest.importorskip("tenseal")
    _, results, counts, vs, w0 = run(make(), k=3, epochs=2)
    w1 = expected_mean(w0, counts, vs, [0, 1, 2])
    w2 = expected_mean(w1.astype(np.float32), counts, vs, [0, 1, 2])
    np.testing.assert_allclose(final_model(results), w2, atol=tol, rtol=0)


def test_opaque_aggregators_hide_the_model_from_the_server() -> None:
    pytest.importorskip("tenseal")
    for agg in (build_aggregator(["ckks"]), ChaosPermutation(SecureAggregation())):
        _, results, *_ = run(agg, k=2, epochs=1)
        assert results["server"].params is None
        assert results["server"].payload is not None


# --------------------------------------------------------------------------- secagg
class FailingHalf:
    """A secure-aggregation client that dies at one stage."""

    def __init__(self, stage: str) -> None:
        self.inner = SecAggClient(0.5, frac_bits=32)
        self.stage = stage

    def on_step(self, party: Any, *, server: str, step: AggStep) -> Any:
        if step.phase == self.stage:
            raise RuntimeError(f"dies at {self.stage}")
        return self.inner.on_step(party, server=server, step=step)

    def open(self, payload: Any) -> Any:
        return self.inner.open(payload)

    def payload(self, party: Any, **kw: Any) -> Any:
        if self.stage == "masked input":
            raise RuntimeError("dies before uploading")
        return self.inner.payload(party, **kw)


@pytest.mark.parametrize(("stage", "counted"), [
    ("advertise", False), ("share-keys", False), ("deliver", False),
    ("masked input", False), ("consistency", True), ("unmask", True),
])
def test_secure_aggregation_recovers_from_a_dropout_at_every_stage(stage: str,
                                                                   counted: bool) -> None:
    agg = SecureAggregation(threshold=0.5)  # 5 clients: t = 3
    _, results, counts, vs, w0 = run(agg, k=5, epochs=1, halves={"c2": FailingHalf(stage)})
    survivors = [0, 1, 2, 3, 4] if counted else [0, 1, 3, 4]
    np.testing.assert_allclose(final_model(results), expected_mean(w0, counts, vs, survivors),
                               atol=1e-6, rtol=0)
    lost = [d for d in results["server"].dropouts if d.client == "c2"]
    assert lost and lost[0].reason == "failed"
    assert lost[0].stage == ("update" if stage in ("deliver", "masked input") else stage)
    assert results["server"].rounds[0].survivors == (5 if counted else 4)


def test_secure_aggregation_fails_clearly_below_the_threshold() -> None:
    agg = SecureAggregation(threshold=4)  # t = 4 of 5: two dropouts are too many
    halves = {"c1": FailingHalf("masked input"), "c3": FailingHalf("masked input")}
    with pytest.raises(ProtocolError, match="below the threshold t=4"):
        run(agg, k=5, epochs=1, halves=halves, min_clients=1)


def test_the_servers_view_of_one_client_is_uniformly_masked() -> None:
    transcript = Transcript(keep_payloads=True)
    run(SecureAggregation(), k=3, epochs=1, transcript=transcript)
    ups = [m for m in transcript.with_tag("update") if m.receiver == "server"]
    assert len(ups) == 3
    for m in ups:
        y = np.asarray(m.payload.payload)
        assert y.dtype == np.uint64
        # a fixed-point encoding of values ~N(0, 1) has its top 30 bits all 0 or all 1;
        # a masked one looks uniform: every byte value about equally often
        counts = np.bincount(np.frombuffer(y.tobytes(), dtype=np.uint8), minlength=256)
        expected = y.size * 8 / 256
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < 400  # 255 degrees of freedom: p < 1e-6 beyond ~370
        top = (y >> np.uint64(40)).astype(np.int64)
        assert len(np.unique(top)) > DIM // 2


def test_secure_aggregation_client_refuses_to_reveal_both_shares() -> None:
    from islands.runtime.identity import make_identities

    class P:
        name = "a"
        identity = make_identities(["a"])["a"]

    half = SecAggClient(0.5, frac_bits=32)
    half.on_step(P(), server="s", step=AggStep(  # type: ignore[arg-type]
        1, "advertise", SecAggAdvertise(session=b"0" * 16, threshold=1)))
    with pytest.raises(ProtocolError, match="stage 'advertised'"):
        half.on_step(P(), server="s", step=AggStep(  # type: ignore[arg-type]
            1, "unmask", SecAggUnmask(survivors=["a"], dropped=[], signatures={})))


def test_values_outside_the_fixed_point_range_are_an_error_not_a_wrap() -> None:
    agg = SecureAggregation(frac_bits=48)  # |p·w| < 2^15 / clients
    counts, vs, w0 = federation(3)
    vs[1][0] = 1e5  # within max_abs (1e6), beyond the ring's range
    names = ["c0", "c1", "c2"]
    roles: dict[str, Any] = {"server": partial(server, clients=names, strategy=FedAvg(
        local_steps=1, batch_size=None, aggregator=agg), initial=w0, epochs=1,
        client_timeout=20.0)}
    for i, n in enumerate(names):
        roles[n] = partial(client, server="server", learner=ScriptedLearner(counts[i], vs[i]),
                           aggregator=agg)
    result = run_local(roles, timeout=60, tolerate=names)
    assert isinstance(result.failures["c1"], ValidationError)
    assert "outside the fixed-point range" in str(result.failures["c1"])


def test_threshold_rule() -> None:
    assert threshold_for(0.5, 5) == 3
    assert threshold_for(0.5, 3) == 2
    assert threshold_for(0.5, 4) == 3
    assert threshold_for(3, 5) == 3
    assert threshold_for(2 / 3, 6) == 5  # ⌊2n/3⌋ + 1: holds against 2t − n − 1 = 3 colluders
    with pytest.raises(ValidationError, match="exceeds"):
        threshold_for(6, 5)
    # t ≤ n/2 (or t = 1) lets an active server unmask a client: refused for every n
    for t, n in [(2, 5), (2, 4), (1, 1), (5, 10)]:
        with pytest.raises(ValidationError, match=f"t={t} for a round of {n} clients"):
            threshold_for(t, n)
    with pytest.raises(ValidationError, match="must be at least 2"):
        threshold_for(0.5, 1)
    for bad in (1.5, 0.4, 1, 0):
        with pytest.raises(ValidationError, match="'threshold'"):
            SecureAggregation(threshold=bad)


# --------------------------------------------------------------------------- additive
def test_additive_sharing_fails_clearly_when_a_client_drops() -> None:
    class Dies:
        def __init__(self) -> None:
            self.inner = AdditiveSharing().client_half()

        def on_step(self, party: Any, **kw: Any) -> Any:
            return self.inner.on_step(party, **kw)

        def open(self, payload: Any) -> Any:
            return self.inner.open(payload)

        def payload(self, party: Any, **kw: Any) -> Any:
            raise RuntimeError("dies")

    with pytest.raises(ProtocolError, match="cannot recover"):
        run(AdditiveSharing(timeout=5.0), k=3, epochs=1, halves={"c1": Dies()})


# --------------------------------------------------------------------------- DP
def test_client_dp_noise_is_calibrated() -> None:
    pytest.importorskip("dp_accounting")
    sigma, clip = 0.5, 2.0
    agg = ClientDP(clip=clip, noise_multiplier=sigma, noise="local")
    counts, _, w0 = federation(1)
    big = np.full(20000, 10.0, dtype=np.float32)  # Δ = 0.5·w0... clipped to norm 2
    w0 = np.zeros(20000, dtype=np.float32)
    roles: dict[str, Any] = {
        "server": partial(server, clients=["c0"], strategy=FedAvg(
            local_steps=1, batch_size=None, aggregator=agg), initial=w0, epochs=1),
        "c0": partial(client, server="server", learner=ScriptedLearner(counts[0], big),
                      aggregator=agg)}
    res = run_local(roles, timeout=60).results["server"]
    out = np.asarray(res.params, dtype=np.float64)
    clipped = big / np.linalg.norm(big.astype(np.float64)) * clip
    noise = out - clipped
    assert abs(noise.std() / (sigma * clip) - 1) < 0.03
    assert abs(noise.mean()) < 4 * sigma * clip / np.sqrt(noise.size)
    eps, delta = res.privacy
    assert delta == 1e-5 and eps > 0
    assert res.rounds[0].epsilon == pytest.approx(eps)


def test_distributed_noise_is_split_across_the_guaranteed_survivors() -> None:
    pytest.importorskip("dp_accounting")
    sigma, clip, k = 1.0, 1.0, 4
    agg = ClientDP(SecureAggregation(threshold=3), clip=clip, noise_multiplier=sigma,
                   noise="distributed")
    w0 = np.zeros(30000, dtype=np.float32)
    names = [f"c{i}" for i in range(k)]
    roles: dict[str, Any] = {"server": partial(server, clients=names, strategy=FedAvg(
        local_steps=1, batch_size=None, aggregator=agg), initial=w0, epochs=1)}
    for n in names:
        roles[n] = partial(client, server="server",
                           learner=ScriptedLearner(100, np.zeros(30000, np.float32)),
                           aggregator=agg)
    res = run_local(roles, timeout=60).results["server"]
    mean = np.asarray(res.params, dtype=np.float64)
    # each adds N(0, σ²S²/t), t = 3; the mean of k has std σS·sqrt(k/t)/k
    want = sigma * clip * np.sqrt(k / 3) / k
    assert abs(mean.std() / want - 1) < 0.03


def test_a_run_stops_before_exceeding_the_target_epsilon() -> None:
    pytest.importorskip("dp_accounting")
    from islands.privacy import PrivacyAccountant

    acct = PrivacyAccountant(1.0, delta=1e-5)
    acct.step(2)
    eps2 = acct.epsilon()
    acct.step(1)
    target = (eps2 + acct.epsilon()) / 2  # allows 2 rounds, not 3
    agg = ClientDP(clip=1.0, noise_multiplier=1.0, target_epsilon=target)
    _, results, *_ = run(agg, k=2, epochs=5)
    srv = results["server"]
    assert srv.aggregations == 2 and srv.stopped == "privacy budget"
    assert srv.privacy[0] == pytest.approx(eps2) and srv.privacy[0] <= target


def test_build_aggregator_checks_its_input() -> None:
    with pytest.raises(ValidationError, match="unknown protection"):
        build_aggregator(["rot13"])
    with pytest.raises(ValidationError, match="two base aggregators"):
        build_aggregator(["ckks", "secagg"])
    with pytest.raises(ValidationError, match="not in protect"):
        build_aggregator(["secagg"], {"dp": {"clip": 1.0}})
    with pytest.raises(ValidationError, match="'clip'"):
        build_aggregator(["dp"], {"dp": {"clip": -1.0}})
    stack = build_aggregator(["dp", "chaos", "secagg"])
    assert stack.name == "dp+chaos+secagg"


# --------------------------------------------------------------------------- bad input
def test_mismatched_vector_lengths_are_refused() -> None:
    class Short:
        def __init__(self) -> None:
            self.inner = SecAggClient(0.5, frac_bits=32)

        def on_step(self, party: Any, **kw: Any) -> Any:
            return self.inner.on_step(party, **kw)

        def open(self, payload: Any) -> Any:
            return self.inner.open(payload)

        def payload(self, party: Any, **kw: Any) -> Any:
            return self.inner.payload(party, **kw)[:-1]

    # refused on arrival: c1 is that round's dropout, the others' masks are removed
    _, results, *_ = run(SecureAggregation(), k=3, epochs=1, halves={"c1": Short()})
    (drop,) = results["server"].dropouts
    assert (drop.client, drop.reason) == ("c1", "malformed update")
    assert "malformed masked update from 'c1'" in drop.detail


def test_homomorphic_rounds_refuse_other_lengths_and_keys() -> None:
    pytest.importorskip("tenseal")
    from islands.aggregation.base import ServerLink
    from islands.aggregation.homomorphic import CKKSAggregator, PaillierAggregator
    from islands.crypto import ckks, mac, paillier

    class P:
        name = "server"

    link = ServerLink(P(), 1.0)  # type: ignore[arg-type]
    ctx, other = ckks.make_context(), ckks.make_context()
    half = CKKSAggregator().server_half()
    half.context = ckks.load_context(ckks.public_context_bytes(ctx), secret=False)
    rnd = half.start(link, round=1, clients=["a", "b"], weights={"a": 1.0, "b": 1.0}, dim=10)
    with pytest.raises(ProtocolError, match="'a'"):
        rnd.add("a", ckks.encrypt_vector(ctx, np.zeros(9000)))
    with pytest.raises(ProtocolError, match="another key"):
        rnd.add("b", ckks.encrypt_vector(other, np.zeros(10)))

    pk, _ = paillier.generate_keypair(2048)  # the smallest size PaillierAggregator takes
    pk2, _ = paillier.generate_keypair(2048)
    agg = PaillierAggregator()
    phalf = agg.server_half()
    phalf.public_key = pk
    prnd = phalf.start(link, round=1, clients=["a", "b"], weights={"a": 1.0, "b": 1.0}, dim=50)

    def upload(key: object, n: int) -> dict[str, object]:  # packed values, then the MAC
        return {"blob": paillier.encrypt_blob(key, [*paillier.pack(np.zeros(n), agg.spec), 1]),
                "counter": 0}

    prnd.add("a", upload(pk, 50))
    with pytest.raises(ProtocolError, match="'b'"):
        prnd.add("b", upload(pk, 500))
    with pytest.raises(ProtocolError, match="'b'"):
        prnd.add("b", upload(pk2, 50))
    with pytest.raises(ProtocolError, match=r"'b'.*MAC counter"):
        prnd.add("b", dict(upload(pk, 50), counter=mac.MAX_COUNTER))
