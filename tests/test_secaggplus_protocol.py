"""SecAgg+ client state machine (one test per transition, every out-of-order message refused
naming the stage) and its composition with the public estimator, a job file, chaos and
distributed DP (the twins of ``secagg``'s in ``test_hfl_protect.py``, ``test_hfl_job.py``
and ``test_hfl_attacks_dp.py``)."""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
import pytest

from islands.aggregation import secaggplus as sp
from islands.aggregation.base import AggStep
from islands.errors import ProtocolError
from islands.hfl.secaggplus_audit import TEN, SecAggPlusFederation

Stage = sp.ClientStage
PHASES = ("roster", "share-keys", "deliver", "consistency", "unmask")
ORDER = [Stage.IDLE, Stage.ADVERTISED, Stage.ROSTERED, Stage.SHARED, Stage.DELIVERED,
         Stage.MASKED, Stage.SIGNED, Stage.UNMASKED]
EXPECTS = {"roster": Stage.ADVERTISED, "share-keys": Stage.ROSTERED,
           "deliver": Stage.SHARED, "consistency": Stage.MASKED, "unmask": Stage.SIGNED}


class _Driver:
    """Ten honest clients driven stage by stage; the messages of the honest server kept."""

    def __init__(self) -> None:
        self.f = SecAggPlusFederation(TEN, corrupt_fraction=0.2)
        self.msgs: dict[str, dict[str, Any]] = {}
        self.stage = Stage.IDLE

    def to(self, stage: Stage) -> _Driver:
        f = self.f
        while ORDER.index(self.stage) < ORDER.index(stage):
            nxt = ORDER[ORDER.index(self.stage) + 1]
            if nxt is Stage.ADVERTISED:
                self.keys = f.advertise()
                self.roster = f.roster(self.keys)
                self.msgs["roster"] = {c: self.roster for c in TEN}
            elif nxt is Stage.ROSTERED:
                reveals = {c: f.step(c, "roster", self.roster) for c in TEN}
                everyone = f.draw(self.roster, reveals)
                self.msgs["share-keys"] = {c: f.neighbours_sigs(everyone, c) for c in TEN}
            elif nxt is Stage.SHARED:
                env = {c: f.step(c, "share-keys", self.msgs["share-keys"][c]) for c in TEN}
                self.msgs["deliver"] = {c: sp.SecAggPlusDelivery(shared=f.closed[c], shares={
                    v: env[v].shares[c] for v in f.closed[c] if v != c}) for c in TEN}
            elif nxt is Stage.DELIVERED:
                for c in TEN:
                    assert f.step(c, "deliver", self.msgs["deliver"][c]) is None
            elif nxt is Stage.MASKED:
                self.uploads = {c: self.upload(c) for c in TEN}
                self.bits = f.bits(TEN)
                self.msgs["consistency"] = {c: sp.SecAggPlusSurvivors(bitmap=self.bits)
                                            for c in TEN}
            elif nxt is Stage.SIGNED:
                sigs = {c: f.step(c, "consistency", self.msgs["consistency"][c]).sig
                        for c in TEN}
                self.msgs["unmask"] = {c: f.unmask_body(c, self.bits, sigs) for c in TEN}
            elif nxt is Stage.UNMASKED:
                self.answers = {c: f.step(c, "unmask", self.msgs["unmask"][c]) for c in TEN}
            self.stage = nxt
            assert all(f.halves[c].stage is nxt for c in TEN), nxt
        return self

    def upload(self, c: str) -> Any:
        f = self.f
        return f.halves[c].payload(f.views[c], server="server", round=1,
                                   params=f.updates[c], base=np.zeros(f.dim, np.float32),
                                   weight=1.0)

    def any_body(self, phase: str) -> Any:
        """A well-formed body of ``phase`` (from this round if sent, else a fresh one)."""
        if phase in self.msgs:
            return self.msgs[phase]["c0"]
        other = _Driver().to(EXPECTS[phase])
        return other.msgs[phase]["c0"]


# --------------------------------------------------------------------------- transitions
def test_idle_to_advertised_makes_fresh_keys_and_a_commitment() -> None:
    d = _Driver().to(Stage.ADVERTISED)
    k0 = d.keys["c0"]
    assert d.f.halves["c0"].setups == 1
    assert len({k0.c, k0.s}) == 2 and all(len(x) == 32 for x in (k0.c, k0.s, k0.commit))
    assert len({d.keys[c].commit for c in TEN}) == 10


def test_advertised_to_rostered_reveals_the_nonce_and_signs_the_roster() -> None:
    d = _Driver().to(Stage.ADVERTISED)
    f = d.f
    reveal = f.step("c0", "roster", d.roster)
    half = f.halves["c0"]
    assert half.stage is Stage.ROSTERED
    from islands.aggregation import harary
    assert harary.commitment(f.session, 1, "c0", reveal.nonce) == d.keys["c0"].commit
    digest = sp._roster_digest(f.session, 1, d.roster.names, d.roster.entries,
                               d.roster.neighbours, d.roster.threshold)
    f.ids["c1"].verify("c0", sp.ROSTER_PURPOSE, digest, reveal.sig)
    assert half.round_floor == 9 and half.round_threshold == d.roster.threshold


def test_rostered_to_shared_seals_one_envelope_per_neighbour() -> None:
    d = _Driver().to(Stage.ROSTERED)
    env = d.f.step("c0", "share-keys", d.msgs["share-keys"]["c0"])
    assert d.f.halves["c0"].stage is Stage.SHARED
    assert set(env.shares) == set(d.f.closed["c0"]) - {"c0"}
    assert env.seed_hash == sp.seed_commitment(d.f.session, 1, "c0", d.f.halves["c0"]._b)


def test_shared_to_delivered_keeps_the_neighbours_that_shared() -> None:
    d = _Driver().to(Stage.SHARED)
    d.f.step("c0", "deliver", d.msgs["deliver"]["c0"])
    half = d.f.halves["c0"]
    assert half.stage is Stage.DELIVERED and half._shared == d.f.closed["c0"]


def test_delivered_to_masked_uploads_once() -> None:
    d = _Driver().to(Stage.DELIVERED)
    y = d.upload("c0")
    assert y.dtype == np.uint64 and d.f.halves["c0"].stage is Stage.MASKED
    with pytest.raises(ProtocolError, match=r"has no keys for round 1 \(stage 'masked' of "
                       r"round 1\)"):
        d.upload("c0")


def test_masked_to_signed_signs_the_bitmap_once() -> None:
    d = _Driver().to(Stage.MASKED)
    sig = d.f.step("c0", "consistency", d.msgs["consistency"]["c0"]).sig
    d.f.ids["c1"].verify("c0", sp.SURVIVORS_PURPOSE, sp._survivors_message(
        d.f.session, 1, d.f.digest, d.bits), sig)
    assert d.f.halves["c0"].stage is Stage.SIGNED


def test_signed_to_unmasked_reveals_one_kind_per_neighbour_and_forgets() -> None:
    d = _Driver().to(Stage.SIGNED)
    out = d.f.step("c0", "unmask", d.msgs["unmask"]["c0"])
    half = d.f.halves["c0"]
    assert half.stage is Stage.UNMASKED
    assert set(out.b) == set(d.f.closed["c0"]) and out.s == {}
    assert half._envelopes == {}


@pytest.mark.parametrize("stage", [Stage.ADVERTISED, Stage.ROSTERED, Stage.SHARED,
                                   Stage.DELIVERED])
def test_a_second_setup_before_the_upload_starts_over_with_fresh_keys(stage: Stage) -> None:
    d = _Driver().to(stage)
    half = d.f.halves["c0"]
    old = half._s
    d.f.step("c0", "advertise", sp.SecAggPlusAdvertise(session=secrets.token_bytes(16)))
    assert half.stage is Stage.ADVERTISED and half.setups == 2 and half._s is not old
    assert half._b is None and half._graph is None and half._envelopes == {}


@pytest.mark.parametrize("stage", [Stage.MASKED, Stage.SIGNED, Stage.UNMASKED])
def test_no_setup_after_the_upload(stage: Stage) -> None:
    d = _Driver().to(stage)
    with pytest.raises(ProtocolError, match="a new set-up of a round this client already "
                       "uploaded in"):
        d.f.step("c0", "advertise", sp.SecAggPlusAdvertise(session=secrets.token_bytes(16)))
    assert d.f.halves["c0"].stage is stage


def test_an_older_round_is_refused_and_a_newer_one_starts_over() -> None:
    d = _Driver().to(Stage.UNMASKED)
    half = d.f.halves["c0"]
    with pytest.raises(ProtocolError, match="round 0 is older than round 1"):
        d.f.step("c0", "advertise", sp.SecAggPlusAdvertise(session=d.f.session), rnd=0)
    d.f.step("c0", "advertise", sp.SecAggPlusAdvertise(session=d.f.session), rnd=2)
    assert half.round == 2 and half.stage is Stage.ADVERTISED and half.setups == 1
    with pytest.raises(ProtocolError, match=r"got 'roster' of round 1 while at stage "
                       r"'advertised' of round 2"):
        d.f.step("c0", "roster", d.roster, rnd=1)


# --------------------------------------------------------------------------- out of order
@pytest.mark.parametrize("stage", ORDER)
def test_every_out_of_order_message_is_refused_naming_the_stage(stage: Stage) -> None:
    d = _Driver().to(stage)
    half = d.f.halves["c0"]
    for phase in PHASES:
        if EXPECTS[phase] is stage:
            continue
        with pytest.raises(ProtocolError, match=rf"got '{phase}' of round 1 while at stage "
                           rf"'{stage.value}' of round [01]") as info:
            d.f.step("c0", phase, d.any_body(phase))
        assert info.value.step == phase
        assert half.stage is stage  # nothing moved
    if stage is not Stage.DELIVERED:
        with pytest.raises(ProtocolError, match=rf"has no keys for round 1 \(stage "
                           rf"'{stage.value}' of round \d\)"):
            d.upload("c0")
    with pytest.raises(ProtocolError, match="does not have"):
        d.f.step("c0", "bogus", None)


def test_a_refused_message_leaves_the_stage_and_the_honest_one_still_works() -> None:
    d = _Driver().to(Stage.MASKED)
    with pytest.raises(ProtocolError, match="malformed survivor bitmap"):
        d.f.step("c0", "consistency", sp.SecAggPlusSurvivors(bitmap=b"\x00"))
    assert d.f.halves["c0"].stage is Stage.MASKED
    assert isinstance(d.f.step("c0", "consistency", d.msgs["consistency"]["c0"]),
                      sp.SecAggPlusSignature)


def test_step_bodies_of_the_wrong_type_are_refused_at_every_stage() -> None:
    for phase, stage in EXPECTS.items():
        d = _Driver().to(stage)
        with pytest.raises(ProtocolError, match="malformed") as info:
            d.f.halves["c0"].on_step(d.f.views["c0"], server="server",
                                     step=AggStep(1, phase, {"not": "a message"}))
        assert info.value.step == phase


# --------------------------------------------------------------------------- composition
def _blobs(n: int, d: int = 6, classes: int = 3, seed: int = 0) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    centres = rng.normal(size=(classes, d)) * 2
    X = (centres[y] + rng.normal(size=(n, d))).astype(np.float32)
    return X, y.astype(np.int64)


def test_the_estimator_under_secaggplus_equals_the_plain_mean_run() -> None:
    # 16 clients at γ = 0.1 (one colluder) and δ = 0.1: a sparse graph, (k, t) = (6, 5)
    pytest.importorskip("torch")
    from islands.aggregation import harary
    from islands.aggregation.protect import build_aggregator
    from islands.aggregation.secaggplus import SecureAggregationPlus
    from islands.hfl import FedAvg, FederatedModel
    from islands.hfl.torch.models import ModelSpec

    spec = ModelSpec(kind="mlp", input_shape=(6,), n_outputs=3, hidden=(8,))
    X, y = _blobs(16 * 30)
    parts = [(X[30 * i:30 * (i + 1)], y[30 * i:30 * (i + 1)]) for i in range(16)]
    assert harary.find_parameters(16, 1, 1) == harary.GraphParameters(6, 5, False)

    def fit(aggregator: Any) -> Any:
        strategy = FedAvg(local_steps=2, batch_size=10, lr=0.2, aggregator=aggregator)
        return FederatedModel(spec, strategy, epochs=2, random_state=3).fit(parts)

    plain = FederatedModel(spec, FedAvg(local_steps=2, batch_size=10, lr=0.2), epochs=2,
                           random_state=3).fit(parts)
    plus = fit(SecureAggregationPlus(corrupt_fraction=0.1, dropout=0.1))
    built = fit(build_aggregator(["secaggplus"], {"secaggplus": {"corrupt_fraction": 0.1}}))
    assert plus.aggregations_ == plain.aggregations_ > 0
    # each upload rounds to 2^-33 per coordinate: the models stay within ~1e-8 per round
    np.testing.assert_allclose(plus.params_, plain.params_, atol=1e-5)
    np.testing.assert_allclose(built.params_, plain.params_, atol=1e-5)
    tags = plus.transcript_.totals("tag")
    assert tags != plain.transcript_.totals("tag")
    assert plus.transcript_.totals("sender")["server"].messages > (
        plain.transcript_.totals("sender")["server"].messages)  # the set-up's stages


SECAGGPLUS_JOB = """
name = "secaggplus-job"
seed = 0
epochs = 2
output = "{output}"
protect = {protect}
{extra}
[data]
name = "digits"
standardize = true

[partition]
kind = "iid"
clients = 12

[model]
kind = "mlp"
hidden = [16]

[strategy]
name = "fedavg"
local_steps = 2
batch_size = 16
lr = 0.05
"""


def test_a_job_file_with_secaggplus_runs_and_matches_the_plain_run(tmp_path: Any) -> None:
    pytest.importorskip("torch")
    import json

    from typer.testing import CliRunner

    from islands.cli import app
    from islands.hfl.job import load_job, run_job

    plain_path = tmp_path / "plain.toml"
    plain_path.write_text(SECAGGPLUS_JOB.format(output=tmp_path / "plain", protect="[]",
                                                extra=""))
    plain = run_job(load_job(plain_path))
    path = tmp_path / "plus.toml"
    path.write_text(SECAGGPLUS_JOB.format(
        output=tmp_path / "plus", protect='["secaggplus"]',
        extra="\n[secaggplus]\ncorrupt_fraction = 0.1\ndropout = 0.1\n"))
    res = CliRunner().invoke(app, ["run", str(path), "--output", str(tmp_path / "p"),
                                   "--json", str(tmp_path / "p.json")])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "p.json").read_text())
    assert out["protect"] == ["secaggplus"]
    assert out["aggregations"] == plain.aggregations
    assert abs(out["accuracy"] - plain.metrics["accuracy"]) <= 0.005
    assert "protected by secaggplus" in " ".join(res.output.split())


def _dp_chaos_round(n: int, dies: int, plus: dict[str, Any], dim: int) -> tuple[Any, Any]:
    from islands.aggregation.protect import build_aggregator
    from islands.hfl.server_audit import DiesAtUpload, play

    agg = build_aggregator(["secaggplus", "chaos", "dp"], {
        "secaggplus": plus,
        "dp": {"clip": 1.0, "noise_multiplier": 1.0, "noise": "distributed"}})
    assert agg.name == "dp+chaos+secaggplus"
    dying = {f"c{i}": DiesAtUpload(agg.client_half()) for i in range(dies)}
    result, _ = play(agg, agg, k=n, dim=dim, halves=dying)
    assert not result.failures.get("server"), result.failures
    srv = result.results["server"]
    assert srv.rounds[0].survivors == n - dies
    final = [r.params for name, r in result.results.items() if name != "server"]
    return srv, np.asarray(final[0], np.float64)


def test_distributed_noise_under_chaos_is_calibrated_for_the_secaggplus_floor() -> None:
    # 20 clients, C = 2, D = 2, (k, t) = (8, 6): C + D < k, no cut exists, so the noise is
    # calibrated for the floor n − ⌊δn⌋ = 18 (not t = 6); 2 drop, the 18 survivors' noise
    # sums to N(0, σ²S²) exactly
    pytest.importorskip("dp_accounting")
    from islands.privacy import PrivacyAccountant

    srv, mean = _dp_chaos_round(20, 2, {"corrupt_fraction": 0.1, "dropout": 0.1}, 30000)
    assert abs(mean.std() * 18 - 1) < 0.03
    acct = PrivacyAccountant(1.0, sampling_rate=1.0, delta=1e-5)
    acct.step(1)
    assert srv.privacy[0] == pytest.approx(acct.epsilon(), rel=1e-9)


def test_distributed_noise_under_chaos_is_calibrated_for_t_when_an_arc_can_be_cut() -> None:
    # 100 clients, no colluders, δ = 0.2, (k, t) = (18, 10): C + D = 20 >= k, an arc of 10
    # can be unmasked (test_hfl_attacks_secaggplus), so each client's share is for t = 10:
    # with 95 survivors the mean's noise is √(95/10)·σS/95, more than the floor's σS/95
    pytest.importorskip("dp_accounting")
    _, mean = _dp_chaos_round(100, 5, {"corrupt_fraction": 0.0, "dropout": 0.2,
                                       "neighbours": 18, "threshold": 10}, 10000)
    assert abs(mean.std() * 95 / np.sqrt(9.5) - 1) < 0.04
