"""Issue 22, findings 4, 5, 6, 8 (key size) and 10: a deviating server against DP and chaos.

Each test plays the attack with a real deviating server (its own aggregator
configuration) against honest clients, and shows the clients refuse before their update
leaves, or that the reported ε is the one the noise and the survivors really give.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from islands.aggregation.base import AggStep, MeanAggregator
from islands.aggregation.protect import (
    ChaosPermutation,
    ClientDP,
    DPNoiseRequest,
    build_aggregator,
)
from islands.aggregation.secagg import SecureAggregation
from islands.errors import ProtocolError, ValidationError
from islands.hfl import FedAvg
from islands.hfl.server_audit import DiesAtUpload, play
from islands.runtime import Transcript


def uploads_from(transcript: Transcript, name: str) -> list[Any]:
    return [r for r in transcript.sent_by(name) if r.tag == "update"]


# --------------------------------------------------------------------------- finding 4
@pytest.mark.parametrize(("evil", "parameter", "received"), [
    (ClientDP(clip=1.0, noise_multiplier=1e-300), "noise_multiplier", "1e-300"),
    (ClientDP(clip=1e6, noise_multiplier=1.0), "clip", "1000000.0"),
], ids=["tiny-sigma", "large-clip"])
def test_local_dp_client_refuses_a_server_that_asks_for_less_noise(
        evil: ClientDP, parameter: str, received: str) -> None:
    honest = ClientDP(clip=1.0, noise_multiplier=1.0)
    result, transcript = play(evil, honest)
    exc = result.failures.get("c0")
    assert isinstance(exc, ProtocolError), exc
    text = str(exc)
    assert "'server'" in text and parameter in text and received in text
    assert "1.0" in text  # the value the client expected
    assert uploads_from(transcript, "c0") == []  # nothing left the client
    assert result.results.get("server") is None


class InflatingServer(ClientDP):
    """A server that calibrates the noise for every client of the round, not for t."""

    def server_half(self) -> Any:
        half = super().server_half()
        half._guaranteed = lambda round_clients: round_clients
        return half


def test_distributed_dp_client_refuses_a_server_that_inflates_the_guaranteed_survivors(
) -> None:
    # each client's share is calibrated for 4 survivors; secure aggregation finishes
    # with the clients' own t = 3, whose sum would then carry √(3/4)·σ
    honest = ClientDP(SecureAggregation(threshold=3), noise="distributed")
    evil = InflatingServer(SecureAggregation(threshold=3), noise="distributed")
    result, transcript = play(evil, honest, k=4)
    for name in ("c0", "c1", "c2", "c3"):
        exc = result.failures.get(name)
        assert isinstance(exc, ProtocolError), exc
        assert "guaranteed=4" in str(exc) and "'server'" in str(exc) and "[1, 3]" in str(exc)
        assert uploads_from(transcript, name) == []


def test_a_server_may_ask_for_more_noise() -> None:
    honest = ClientDP(clip=1.0, noise_multiplier=1.0)
    stricter = ClientDP(clip=0.5, noise_multiplier=4.0)
    result, _ = play(stricter, honest, dim=20000)
    assert not result.failures
    noise = np.asarray(result.results["server"].params, np.float64)
    # the client adds N(0, (σS)²) with the server's σ = 4 and S = 0.5; the std of 20000
    # draws is within 3% with overwhelming probability (its relative error is ~0.5%)
    assert abs(noise.std() / 2.0 - 1) < 0.03


# --------------------------------------------------------------------------- finding 5
def test_distributed_noise_under_chaos_is_calibrated_for_the_secagg_threshold() -> None:
    pytest.importorskip("dp_accounting")
    from islands.privacy import PrivacyAccountant

    sigma, clip, k, t, dim = 1.0, 1.0, 10, 6, 30000
    agg = build_aggregator(["secagg", "chaos", "dp"], {
        "secagg": {"threshold": t},
        "dp": {"clip": clip, "noise_multiplier": sigma, "noise": "distributed"}})
    dying = {f"c{i}": DiesAtUpload(agg.client_half()) for i in range(k - t)}
    result, _ = play(agg, agg, k=k, dim=dim, halves=dying)
    srv = result.results["server"]
    assert srv.rounds[0].survivors == t
    final = [r.params for n, r in result.results.items() if n != "server"]
    assert len(final) == t
    mean = np.asarray(final[0], np.float64)
    # the mean of t survivors' noise; calibrated for t it sums to N(0, σ²S²) exactly
    # (calibrated for all k it would be √(t/k)·σ = 0.775σ); std of 30000 draws: ±0.4%
    assert abs(mean.std() * t / (sigma * clip) - 1) < 0.03
    acct = PrivacyAccountant(sigma, sampling_rate=1.0, delta=1e-5)
    acct.step(1)
    assert srv.privacy[0] == pytest.approx(acct.epsilon(), rel=1e-9)


def test_a_round_with_fewer_survivors_than_the_noise_needs_is_not_released() -> None:
    # noise calibrated for 3 guaranteed survivors of 4; Paillier can sum the 2 that
    # upload, whose sum carries √(2/3)·σ: the DP round refuses before the sum
    from islands.aggregation.homomorphic import PaillierAggregator

    agg = ClientDP(PaillierAggregator(), noise="distributed", guaranteed=3)
    dying = {f"c{i}": DiesAtUpload(agg.client_half()) for i in range(2)}
    result, _ = play(agg, agg, k=4, halves=dying)
    exc = result.failures.get("server")
    assert isinstance(exc, ProtocolError), exc
    assert "only 2 clients survived" in str(exc) and "t=3" in str(exc)
    assert "0.8165" in str(exc)  # √(2/3)


@pytest.mark.parametrize("make", [
    lambda: ClientDP(noise="distributed"),
    lambda: ClientDP(MeanAggregator(), noise="distributed"),
    lambda: build_aggregator(["dp"], {"dp": {"noise": "distributed"}}),
    lambda: ClientDP(ClientDP(), noise="distributed"),
], ids=["default", "mean", "job", "dp-over-mean"])
def test_distributed_noise_over_the_plain_mean_is_refused(make: Any) -> None:
    with pytest.raises(ValidationError, match="protects only their sum"):
        make()


def test_distributed_noise_without_a_threshold_needs_guaranteed() -> None:
    from islands.aggregation.additive import AdditiveSharing

    with pytest.raises(ValidationError, match="guaranteed"):
        ClientDP(AdditiveSharing(), noise="distributed")
    ClientDP(AdditiveSharing(), noise="distributed", guaranteed=2)


# --------------------------------------------------------------------------- finding 6
def test_a_seeded_cohort_is_charged_without_amplification() -> None:
    pytest.importorskip("dp_accounting")
    from islands.privacy import PrivacyAccountant

    agg = ClientDP(clip=1.0, noise_multiplier=1.0)
    strategy = FedAvg(local_steps=1, batch_size=None, aggregator=agg, fraction=0.5, seed=3)
    # the attacker knows the job's seed: it predicts every cohort
    picks = [strategy.select(r, [f"c{i}" for i in range(4)]) for r in (1, 2)]
    assert picks == [strategy.select(r, [f"c{i}" for i in range(4)]) for r in (1, 2)]
    result, _ = play(agg, agg, k=4, strategy=strategy, epochs=2)
    srv = result.results["server"]
    acct = PrivacyAccountant(1.0, sampling_rate=1.0, delta=1e-5)
    acct.step(srv.aggregations)
    assert srv.privacy[0] == pytest.approx(acct.epsilon(), rel=1e-9)


def test_a_secret_poisson_cohort_claims_amplification() -> None:
    pytest.importorskip("dp_accounting")
    from islands.privacy import PrivacyAccountant

    agg = ClientDP(clip=1.0, noise_multiplier=1.0)
    names = [f"c{i}" for i in range(40)]
    strategy = FedAvg(local_steps=1, batch_size=None, aggregator=agg, fraction=0.5,
                      sampling="poisson", seed=3)
    twin = FedAvg(local_steps=1, batch_size=None, aggregator=agg, fraction=0.5,
                  sampling="poisson", seed=3)
    draws = [strategy.select(r, names) for r in range(1, 21)]
    # the same seed does not give the same cohorts: they come from the CSPRNG
    assert draws != [twin.select(r, names) for r in range(1, 21)]
    assert len({len(d) for d in draws}) > 1  # Poisson: the size varies
    # 6 clients at q = 0.9: a round with no client at all has probability 1e-6
    result, _ = play(agg, agg, k=6, strategy=FedAvg(
        local_steps=1, batch_size=None, aggregator=agg, fraction=0.9, sampling="poisson"),
        epochs=2)
    srv = result.results["server"]
    acct = PrivacyAccountant(1.0, sampling_rate=0.9, delta=1e-5)
    acct.step(srv.aggregations)
    assert srv.privacy[0] == pytest.approx(acct.epsilon(), rel=1e-9)
    assert strategy.secret_sampling_rate == 0.5
    assert FedAvg(fraction=0.5).secret_sampling_rate is None


# --------------------------------------------------------------------------- issue 37
def test_a_client_in_every_round_is_charged_unamplified_against_the_server(
        tmp_path: Any) -> None:
    # five rounds of a secret Poisson cohort at q = 0.5, σ = 1: the run's ε is amplified
    # (8.23), but the server drew the cohorts and knows c0 was in all five: against it
    # c0 spent the unamplified 12.30. Before, the run record showed only the first
    pytest.importorskip("dp_accounting")
    from islands.hfl.checkpoint import load_checkpoint, save_checkpoint

    half = ClientDP(clip=1.0, noise_multiplier=1.0).server_half()
    half.set_sampling_rate(0.5)
    for cohort in (["c0", "c1"], ["c0", "c2"], ["c0"], ["c0", "c1", "c3"], ["c0", "c2"]):
        half.account(cohort)
    assert half.spent() == pytest.approx((8.2307, 1e-5), abs=1e-4)
    assert half.spent_against_server() == pytest.approx((12.3017, 1e-5), abs=1e-4)
    # a resume keeps each client's count
    save_checkpoint(tmp_path / "server.ckpt", {"aggregator": half.get_state()})
    again = ClientDP(clip=1.0, noise_multiplier=1.0).server_half()
    again.set_sampling_rate(0.5)
    again.set_state(load_checkpoint(tmp_path / "server.ckpt")["aggregator"])
    again.account(["c1"])
    assert again.rounds_in == {"c0": 5, "c1": 3, "c2": 2, "c3": 1}
    # a checkpoint without the counts charges every client every round it holds
    old = ClientDP(clip=1.0, noise_multiplier=1.0).server_half()
    old.set_state({k: v for k, v in half.get_state().items()
                   if k not in ("rounds_in", "rounds_unknown")})
    old.account(["c1"])
    expected = ClientDP(clip=1.0, noise_multiplier=1.0).server_half()
    for _ in range(6):
        expected.account(["c1"])
    assert old.spent_against_server() == expected.spent_against_server()


def test_the_run_record_shows_epsilon_against_the_server_beside_the_amplified_one() -> None:
    pytest.importorskip("dp_accounting")
    from islands.privacy import PrivacyAccountant

    agg = ClientDP(clip=1.0, noise_multiplier=1.0)
    strategy = FedAvg(local_steps=1, batch_size=None, aggregator=agg, fraction=0.9,
                      sampling="poisson")
    result, _ = play(agg, agg, k=6, strategy=strategy, epochs=3)
    srv = result.results["server"]
    amplified = PrivacyAccountant(1.0, sampling_rate=0.9, delta=1e-5)
    amplified.step(srv.aggregations)
    assert srv.privacy == pytest.approx((amplified.epsilon(), 1e-5), rel=1e-9)
    # the client asked to train in the most rounds, at q = 1
    most = max(r.rounds_trained for name, r in result.results.items() if name != "server")
    against = PrivacyAccountant(1.0, sampling_rate=1.0, delta=1e-5)
    against.step(most)
    assert srv.privacy_against_server == pytest.approx((against.epsilon(), 1e-5), rel=1e-9)
    assert srv.rounds[-1].epsilon_against_server == srv.privacy_against_server[0]
    assert srv.rounds[-1].epsilon == srv.privacy[0]
    # without DP neither is reported
    plain, _ = play(MeanAggregator(), MeanAggregator(), k=2)
    assert plain.results["server"].privacy_against_server is None
    assert plain.results["server"].rounds[0].epsilon_against_server is None


# --------------------------------------------------------------------------- finding 10
@pytest.mark.parametrize("make", [
    lambda: ChaosPermutation(),
    lambda: ChaosPermutation(MeanAggregator()),
    lambda: build_aggregator(["chaos"]),
    lambda: build_aggregator(["chaos", "dp"]),
    lambda: ChaosPermutation(ClientDP()),
], ids=["default", "mean", "job", "job-dp", "dp-over-mean"])
def test_chaos_alone_is_refused(make: Any) -> None:
    with pytest.raises(ValidationError, match="does not hide"):
        make()


def test_chaos_over_a_value_hiding_protection_is_accepted() -> None:
    assert build_aggregator(["secagg", "chaos"]).name == "chaos+secagg"
    assert build_aggregator(["additive", "chaos", "dp"], {"dp": {"guaranteed": 2}}).name == (
        "dp+chaos+additive")


def test_a_job_with_chaos_alone_is_refused() -> None:
    from islands.hfl.job import JobError, parse_job

    raw = {"data": {"name": "digits"}, "partition": {"kind": "iid", "clients": 2},
           "model": {"kind": "linear"}, "strategy": {"name": "fedavg"},
           "protect": ["chaos"]}
    with pytest.raises(JobError, match="does not hide"):
        parse_job(raw)


# --------------------------------------------------------------------------- finding 8
def test_paillier_keys_below_2048_bits_are_refused() -> None:
    from islands.aggregation.homomorphic import PaillierAggregator

    with pytest.raises(ValidationError, match=r"key_bits.*2048"):
        PaillierAggregator(key_bits=1024)
    with pytest.raises(ValidationError, match=r"key_bits.*2048"):
        build_aggregator(["paillier"], {"paillier": {"key_bits": 1536}})


@pytest.mark.parametrize("scheme", ["ckks", "paillier"])
def test_under_distributed_noise_clients_refuse_unequal_weights(scheme: str) -> None:
    # issue 37 review: the server gives every contributor but c1 a tiny weight at task time
    # and sums all four: t = 3 names, but the mean is c1's update with its noise share
    # alone. Client-level DP weights every upload equally, so the clients refuse it
    pytest.importorskip("tenseal" if scheme == "ckks" else "phe")
    from islands.hfl.server_audit import EQUAL, _Link, dp_uploads

    fed, _ = dp_uploads(scheme, t=3)
    skewed = {"c0": 1.0, "c1": 1000.0, "c2": 1.0, "c3": 1.0}
    for c in fed.clients:  # the DP noise request of round 2
        fed.halves[c].on_step(fed.views[c], server="server", step=AggStep(
            2, "dp-noise", DPNoiseRequest(noise_multiplier=1.0, clip=1.0, guaranteed=3)))
    agg, ups = fed.uploads(2, weights=skewed)
    forged = dict(fed.aggregate(agg, ups, list(fed.clients)), guaranteed=3)
    for c in fed.clients:
        with pytest.raises(ProtocolError, match=rf"client {c!r} refuses .*round 2: its weights "
                           r"range from 0.000997 to 0.997, where client-level DP weights every "
                           r"upload equally"):
            fed.halves[c].open(forged)
    honest = fed.server_half().start(_Link(), round=2, clients=list(fed.clients),
                                     weights=EQUAL, dim=fed.dim)
    assert honest.weights == dict.fromkeys(fed.clients, 0.25)  # what the DP server gives


@pytest.mark.parametrize("scheme", ["ckks", "paillier"])
def test_a_client_outside_the_round_refuses_a_short_or_skewed_dp_aggregate(scheme: str) -> None:
    # issue 37 review: round 1's cohort is c0, c1, c2 (c3 not drawn). The server sums c1
    # and c2 only and sends it to c3 with its task of round 2: c3 held no t for round 1,
    # and would open c1's update with sigma/sqrt(3) of noise. Under distributed noise every
    # aggregate claims its t, the MAC binds it to the t of each contributor's noise, and
    # every client checks the claim, whether or not it took part in the round
    pytest.importorskip("tenseal" if scheme == "ckks" else "phe")
    from islands.hfl.server_audit import HEFederation, he_aggregator

    fed = HEFederation(scheme)
    dp = ClientDP(he_aggregator(scheme), noise="distributed", guaranteed=3)
    fed.halves = {c: dp.client_half() for c in fed.clients}
    fed.deal()
    cohort = ["c0", "c1", "c2"]
    for c in cohort:
        fed.halves[c].on_step(fed.views[c], server="server", step=AggStep(
            1, "dp-noise", DPNoiseRequest(noise_multiplier=1.0, clip=1.0, guaranteed=3)))
    fed.halves["c3"].on_step(fed.views["c3"], server="server", step=AggStep(
        2, "dp-noise", DPNoiseRequest(noise_multiplier=1.0, clip=1.0, guaranteed=3)))
    agg, ups = fed.uploads(1, cohort, weights=dict.fromkeys(cohort, 1.0))
    pair = fed.aggregate(agg, ups, ["c1", "c2"])
    refusals = {
        "no t claimed": (pair, r"it claims no t for its distributed DP noise"),
        "t = 3 claimed": (dict(pair, guaranteed=3), r"it sums 2 uploads, fewer than the 3"),
        # the pair claimed as a round of t = 2: c0 knows its own t, and c3 finds the MAC's
        # pads drawn for t = 3
        "t = 2 claimed": (dict(pair, guaranteed=2), r"(it claims t=2, where|its MAC)"),
    }
    for payload, why in refusals.values():
        for c in ("c0", "c3"):  # in the round, and outside it
            with pytest.raises(ProtocolError, match=rf"client {c!r} refuses .*round 1: .*{why}"):
                fed.halves[c].open(payload)

    def round_of(rnd: int, weights: dict[str, float]) -> Any:
        for c in cohort:
            fed.halves[c].on_step(fed.views[c], server="server", step=AggStep(
                rnd, "dp-noise", DPNoiseRequest(noise_multiplier=1.0, clip=1.0,
                                                guaranteed=3)))
        agg, ups = fed.uploads(rnd, cohort, weights=weights)
        return dict(fed.aggregate(agg, ups, cohort), guaranteed=3)

    # c2 given a tiny weight: three names, two models
    skewed = round_of(2, {"c0": 1.0, "c1": 1.0, "c2": 1e-3})
    with pytest.raises(ProtocolError, match=r"client 'c3' refuses .*its weights range"):
        fed.halves["c3"].open(skewed)
    honest = round_of(3, dict.fromkeys(cohort, 1.0))
    assert np.all(np.isfinite(fed.halves["c3"].open(honest)))


def test_clients_refuse_an_encrypted_sum_of_fewer_uploads_than_their_noise_needs() -> None:
    # each upload carries noise calibrated for t = 3 survivors; a server that opens a sum
    # of 2 for the clients (the DP check is the server's own, so a deviating server skips
    # it) would show them the pair with √(2/3) of the noise: every client refuses it
    pytest.importorskip("phe")
    from islands.hfl.server_audit import EQUAL, _Link, dp_uploads

    fed, ups = dp_uploads("paillier", t=3)
    agg = fed.server_half().start(_Link(), round=1, clients=list(fed.clients),
                                  weights=EQUAL, dim=fed.dim)
    pair = dict(fed.aggregate(agg, ups, ["c1", "c2"]), guaranteed=3)
    for c in fed.clients:
        with pytest.raises(ProtocolError, match=rf"client {c!r} refuses .*round 1: it sums "
                           r"2 uploads, fewer than the 3"):
            fed.halves[c].open(pair)
    again = fed.server_half().start(_Link(), round=1, clients=list(fed.clients),
                                    weights=EQUAL, dim=fed.dim)
    three = dict(fed.aggregate(again, ups, ["c0", "c1", "c2"]), guaranteed=3)
    for c in fed.clients:
        assert np.all(np.isfinite(fed.halves[c].open(three)))
