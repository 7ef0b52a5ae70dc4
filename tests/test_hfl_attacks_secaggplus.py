"""A deviating server against SecAgg+ (issue 40): every attack the full graph refuses
(``tests/test_hfl_attacks_secagg.py``), carried over, and SecAgg+'s own (the graph draw,
the reveals, a neighbourhood shrunk below t), played on the exact messages honest
clients exchange (:mod:`islands.hfl.secaggplus_audit`)."""

from __future__ import annotations

import re
import secrets
from functools import partial
from typing import Any

import numpy as np
import pytest

from islands.aggregation import harary
from islands.aggregation import secaggplus as sp
from islands.aggregation.base import MeanAggregator
from islands.aggregation.secaggplus import SecureAggregationPlus
from islands.crypto import shamir
from islands.crypto.prg import expand
from islands.errors import ProtocolError, ValidationError
from islands.hfl import FedAvg
from islands.hfl.protocol import client, server
from islands.hfl.secaggplus_audit import (
    TEN,
    SecAggPlusFederation,
    bad_reveal,
    forged_entry,
    other_graph,
    plus_split_view,
    replayed_signatures,
    shrunk_round,
    split_view,
    third_setup,
    unsigned_survivors,
    weaker_parameters,
)
from islands.hfl.server_audit import DiesAtUpload
from islands.runtime import run_local
from scripted import ScriptedLearner

DIM = 6


def fed(**config: Any) -> SecAggPlusFederation:
    return SecAggPlusFederation(TEN, corrupt_fraction=0.2, **config)


# --------------------------------------------------------------------------- (k, t), round
def test_weaker_parameters_are_refused_before_any_share_leaves() -> None:
    with pytest.raises(ProtocolError, match=r"refuses 'server'.s 'roster' message: parameters "
                       r"'neighbours'/'threshold' \(k=2, t=2\) do not protect a round of 10 "
                       r"clients against 2 colluders .*this client accepts k >= 6 with its "
                       r"t >= 5"):
        weaker_parameters()
    f = fed()
    k, t = f.honest_parameters(10)
    roster = f.roster(f.advertise(), k, t - 1)  # the honest k, one t less
    with pytest.raises(ProtocolError, match=rf"t={t - 1} for k={k} neighbours; at least {t}"):
        f.step("c0", "roster", roster)
    assert f.halves["c0"].stage.value == "advertised"  # nothing left it
    # more protection is accepted: a larger k with its larger t
    roster = f.roster(f.advertise(), 8, 6)
    assert isinstance(f.step("c0", "roster", roster), sp.SecAggPlusReveal)


def test_shrinking_the_round_raises_k_and_t() -> None:
    # a federation of 20 at γ = 0.15: C = 3 colluders, counted against the 20 the client
    # knows. A server that leaves 2 out and proposes what ⌊0.15 · 18⌋ = 2 colluders would
    # need, (6, 5), is refused, and the refusal names the pair for 3: (8, 7)
    assert harary.find_parameters(18, 2, 1) == harary.GraphParameters(6, 5, False)
    with pytest.raises(ProtocolError, match=r"\(k=6, t=5\) do not protect a round of 18 "
                       r"clients against 3 colluders \(corrupt_fraction=0.15 of its "
                       r"federation of 20 clients\) .*accepts k >= 8 with its t >= 7"):
        shrunk_round()


def test_a_round_below_the_smallest_is_refused() -> None:
    f = fed()  # δ = 0.1 of 10: a round needs 9
    roster = f.roster(f.advertise(TEN[:8]), 7, 6)
    with pytest.raises(ProtocolError, match=r"a round of 8 clients, fewer than the 9 accepted "
                       r"\(its federation of 10 clients less its dropout=0.1"):
        f.step("c0", "roster", roster)
    g = SecAggPlusFederation(TEN, corrupt_fraction=0.2, min_clients=10)
    roster = g.roster(g.advertise(TEN[:9]), 8, 7)
    with pytest.raises(ProtocolError, match=r"fewer than the 10 accepted \(parameter "
                       r"'min_clients'=10\)"):
        g.step("c0", "roster", roster)


def test_colluders_count_against_m_never_the_round() -> None:
    # every round a client accepts meets (C) and (S) for C = ⌊γm⌋, whatever n the
    # server shapes (exhaustive over m ≤ 60 and n ≤ m)
    cfg = SecureAggregationPlus(corrupt_fraction=0.1, dropout=0.1).config
    for m in range(4, 61, 4):
        corrupt = sp._colluders(0.1, m)
        for n in range(2, m + 1):
            params = sp.client_parameters(cfg, n, m)
            if params is None:
                continue
            k, t = params.neighbours, params.threshold
            drops = sp._dropouts(0.1, n)
            assert harary.check_parameters(n, corrupt, drops, k, t) is None, (m, n)
            assert 2 * t > min(k + 1, n) + min(corrupt, k), (m, n, k, t)


# --------------------------------------------------------------------------- roster
def test_a_client_refuses_a_roster_with_other_keys_or_strangers() -> None:
    f = fed()
    keys = f.advertise()
    mine = keys["c0"]
    keys["c0"] = sp.SecAggPlusKeys(c=sp.generate_key().public, s=mine.s, commit=mine.commit)
    with pytest.raises(ProtocolError, match="keys or a commitment that are not its own"):
        f.step("c0", "roster", f.roster(keys))
    f = fed()
    keys = f.advertise()
    keys["server"] = sp.SecAggPlusKeys(c=sp.generate_key().public,
                                       s=sp.generate_key().public, commit=bytes(32))
    with pytest.raises(ProtocolError, match=r"\['server'\] are not clients"):
        f.step("c1", "roster", f.roster(keys))
    f = fed()
    keys = f.advertise()
    keys["c2"] = sp.SecAggPlusKeys(c=keys["c3"].c, s=keys["c2"].s, commit=keys["c2"].commit)
    with pytest.raises(ProtocolError, match="two clients present the same key"):
        f.step("c1", "roster", f.roster(keys))


def test_a_forged_roster_entry_is_refused_by_its_neighbours() -> None:
    with pytest.raises(ProtocolError, match="'secagg\\+ roster' signature of 'c1' does not "
                       "verify"):
        forged_entry()


def test_a_server_claiming_another_graph_is_refused() -> None:
    with pytest.raises(ProtocolError, match="not of this client's 6 neighbours in the drawn "
                       "graph"):
        other_graph()


def test_a_reveal_that_does_not_open_its_commitment_is_refused() -> None:
    with pytest.raises(ProtocolError, match="the nonce of 'c3' does not open its commitment"):
        bad_reveal()


def test_a_missing_reveal_stops_the_roster_not_the_seed() -> None:
    f = fed()
    roster = f.roster(f.advertise())
    reveals = {c: f.step(c, "roster", roster) for c in TEN}
    everyone = f.draw(roster, reveals)
    short = sp.SecAggPlusReveals(nonces=everyone.nonces[:-32],
                                 signatures=f.neighbours_sigs(everyone, "c0").signatures)
    with pytest.raises(ProtocolError, match="9 nonces for a roster of 10: the graph needs "
                       "every client's"):
        f.step("c0", "share-keys", short)


def test_a_third_setup_in_one_round_is_refused() -> None:
    with pytest.raises(ProtocolError, match="set-up 3 of one round; parameter 'max_setups' "
                       "is 2"):
        third_setup()
    f = fed()
    f.open_round()
    with pytest.raises(ProtocolError, match="a new set-up of a round this client already "
                       "uploaded in"):
        f.step("c0", "advertise", sp.SecAggPlusAdvertise(session=secrets.token_bytes(16)))


def test_the_graph_is_the_same_at_every_client_and_the_server() -> None:
    f = fed()
    f.open_round()
    for c in TEN:
        assert f.halves[c]._closed == f.closed[c]
    # symmetric and k-regular
    for c in TEN:
        assert len(f.closed[c]) == f.k + 1
        for v in f.closed[c]:
            assert c in f.closed[v]


# --------------------------------------------------------------------------- deliver
def test_shrinking_a_neighbourhood_is_refused() -> None:
    f = fed()
    roster = f.roster(f.advertise())
    reveals = {c: f.step(c, "roster", roster) for c in TEN}
    everyone = f.draw(roster, reveals)
    env = {c: f.step(c, "share-keys", f.neighbours_sigs(everyone, c)) for c in TEN}
    near = f.closed["c0"]
    few = [v for v in near if v == "c0"] + [v for v in near if v != "c0"][:f.t - 2]
    with pytest.raises(ProtocolError, match=rf"{len(few)} of this client's neighbourhood "
                       rf"shared keys, below the threshold t={f.t}"):
        f.step("c0", "deliver", sp.SecAggPlusDelivery(shared=few, shares={
            v: env[v].shares["c0"] for v in few if v != "c0"}))
    outsider = next(c for c in TEN if c not in near)
    with pytest.raises(ProtocolError, match="not inside this client's neighbourhood"):
        f.step("c0", "deliver", sp.SecAggPlusDelivery(shared=[*near, outsider], shares={}))


# --------------------------------------------------------------------------- survivors
def test_a_survivor_set_below_the_floor_or_t_is_refused() -> None:
    f = fed()
    f.open_round()
    two_gone = [c for c in f.u1 if c not in ("c8", "c9")]  # floor 9 of 10
    with pytest.raises(ProtocolError, match=r"8 survivors of 10, below this client's floor 9"):
        f.step("c0", "consistency", sp.SecAggPlusSurvivors(bitmap=f.bits(two_gone)))
    with pytest.raises(ProtocolError, match="malformed survivor bitmap"):
        f.step("c1", "consistency", sp.SecAggPlusSurvivors(bitmap=b"\xff\xff"))


def test_unmasking_needs_the_set_the_client_signed() -> None:
    with pytest.raises(ProtocolError, match="not the set this client signed"):
        unsigned_survivors()
    with pytest.raises(ProtocolError, match=r"signature of '.*' does not verify"):
        replayed_signatures()


def test_a_full_graph_signature_does_not_count_here() -> None:
    # the purposes differ: a 'secagg survivors' signature on the same bytes is refused
    f = fed()
    f.open_round()
    bits = f.bits(TEN)
    sigs = {c: f.step(c, "consistency", sp.SecAggPlusSurvivors(bitmap=bits)).sig for c in TEN}
    v = next(c for c in f.closed["c0"] if c != "c0")
    sigs[v] = f.ids[v].sign("secagg survivors", sp._survivors_message(
        f.session, 1, f.digest, bits))
    with pytest.raises(ProtocolError, match=f"signature of '{v}' does not verify"):
        f.step("c0", "unmask", f.unmask_body("c0", bits, sigs))


def test_a_client_never_answers_unmask_twice() -> None:
    f = fed()
    f.open_round()
    bits = f.bits(TEN)
    sigs = {c: f.step(c, "consistency", sp.SecAggPlusSurvivors(bitmap=bits)).sig for c in TEN}
    f.step("c0", "unmask", f.unmask_body("c0", bits, sigs))
    with pytest.raises(ProtocolError, match="got 'unmask' of round 1 while at stage "
                       "'unmasked'"):
        f.step("c0", "unmask", f.unmask_body("c0", bits, sigs))


def test_a_split_view_inside_one_neighbourhood_is_refused() -> None:
    # two colluders next to the victim; its honest holders split between "survived" and
    # "dropped": one side stays short of t signatures or of t shares
    with pytest.raises(ProtocolError, match=r"below the threshold t=5|holds \d shares"):
        split_view()


def test_without_the_threshold_bound_the_split_view_reads_the_update(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the attack is real: clients that accept t = 3 for k = 6 with 2 colluders in the
    # victim's neighbourhood (2t = 6 <= k + 1 + X = 9) let the server read its update
    monkeypatch.setattr(harary, "least_threshold", lambda *a, **k: 3)
    f = fed(neighbours=6, threshold=3)
    uploads = f.open_round()
    assert (f.k, f.t) == (6, 3)
    victim = f.u1[0]
    f.colluders = [c for c in f.closed[victim] if c != victim][:2]
    read = plus_split_view(f, victim, uploads)
    np.testing.assert_allclose(read, f.updates[victim], atol=2.0**-31)


def test_an_honest_round_unmasks_exactly_the_sum() -> None:
    f = fed()
    uploads = f.open_round()
    bits = f.bits(TEN)
    sigs = {c: f.step(c, "consistency", sp.SecAggPlusSurvivors(bitmap=bits)).sig for c in TEN}
    answers = {c: f.step(c, "unmask", f.unmask_body(c, bits, sigs)) for c in TEN}
    total = sum(uploads.values(), np.zeros(DIM, dtype=np.uint64))
    for u in TEN:
        b = f.rebuild(u, {h: answers[h].b[u] for h in f.closed[u]})
        total -= expand(b, DIM, label=sp._SELF)
    got = total.view(np.int64).astype(np.float64) / 2.0**32
    np.testing.assert_allclose(got, sum(u.astype(np.float64) for u in f.updates.values()),
                               atol=1e-8)


# --------------------------------------------------------------------------- runner
def _protocol(aggregator: Any, k: int, *, dies: set[str] | frozenset[str] = frozenset(),
              rounds: int = 1, halves: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
    rng = np.random.default_rng(5)
    names = [f"c{i:02d}" for i in range(k)]
    w0 = np.zeros(DIM, dtype=np.float32)
    fedavg = FedAvg(local_steps=1, batch_size=None, aggregator=aggregator)
    roles: dict[str, Any] = {"server": partial(server, clients=names, strategy=fedavg,
                                               initial=w0, epochs=rounds,
                                               client_timeout=30.0)}
    ups = {}
    for name in names:
        ups[name] = rng.normal(size=DIM).astype(np.float32)
        half = _Dies(aggregator.client_half()) if name in dies else (halves or {}).get(name)
        roles[name] = partial(client, server="server", learner=ScriptedLearner(50, ups[name]),
                              aggregator=aggregator, half=half, task_timeout=30.0)
    return run_local(roles, timeout=120, tolerate=[*names, "server"]), ups


_Dies = DiesAtUpload  # a client lost between its keys and its upload


@pytest.mark.parametrize("dropout", [0.0, 0.1, 0.3])
def test_the_mean_equals_the_plain_mean(dropout: float) -> None:
    n = 30
    names = [f"c{i:02d}" for i in range(n)]
    dies = set(names[1::max(1, round(1 / dropout))][:round(dropout * n)]) if dropout else set()
    agg = SecureAggregationPlus(corrupt_fraction=0.05, dropout=max(dropout, 0.1))
    run, _ = _protocol(agg, n, dies=dies)
    plain, _ = _protocol(MeanAggregator(), n, dies=dies)
    assert not run.failures.get("server"), run.failures
    got, want = run.results["server"], plain.results["server"]
    assert got.rounds[0].survivors == n - len(dies)
    # each upload rounds to 2^-33: the mean is within 30 · 2^-33 of the exact one
    np.testing.assert_allclose(got.params, want.params, atol=1e-6)


class _DiesInARun(_Dies):
    """A client that drops out if its position in the drawn graph is below ``run``."""

    run = 6

    def payload(self, party: Any, **kw: Any) -> Any:
        if self.inner._graph.position[party.name] < self.run:
            raise RuntimeError("dies before uploading")
        return self.inner.payload(party, **kw)


def test_dropping_below_t_in_one_neighbourhood_fails_clearly() -> None:
    # k = 20, t = 16 (more than the rule asks) of 30 clients, up to 9 dropouts: 6
    # dropouts in a run of the ring leave the clients there 15 holders of 21. The
    # server names the client, its count and t, and releases no mean
    agg = SecureAggregationPlus(corrupt_fraction=0.0, dropout=0.3, neighbours=20,
                                threshold=16)
    names = [f"c{i:02d}" for i in range(30)]
    halves = {c: _DiesInARun(agg.client_half()) for c in names}
    run, _ = _protocol(agg, 30, halves=halves)
    exc = run.failures.get("server")
    assert isinstance(exc, ProtocolError), run.failures
    assert exc.step == "unmask"
    assert re.search(r"(survivor|dropped client) 'c\d\d' has 15 surviving holders of its "
                     r"shares in its neighbourhood, below the threshold t=16", str(exc)), exc
    assert "server" not in run.results


def test_a_too_small_federation_falls_back_to_the_complete_graph() -> None:
    run, _ = _protocol(SecureAggregationPlus(), 3)
    assert not run.failures
    with pytest.raises(ValidationError, match="'corrupt_fraction' parameter"):
        SecureAggregationPlus(corrupt_fraction=0.45, dropout=0.45, min_clients=3)


# --------------------------------------------------------------------------- review: bounds
@pytest.mark.parametrize("k", [10, 11, 2**32, 2**40])
def test_a_neighbour_count_beyond_the_round_is_refused_not_a_crash(k: int) -> None:
    # the complete graph of 10 is k = 9; a larger k (or one too wide for the roster
    # digest's 4 bytes) is a named refusal before the nonce leaves, never an OverflowError
    f = fed()
    roster = f.roster(f.advertise(), k, 8)
    with pytest.raises(ProtocolError, match=rf"k={k} neighbours in a round of 10 clients; "
                       r"at most 9 \(the complete graph\)"):
        f.step("c0", "roster", roster)
    assert f.halves["c0"].stage.value == "advertised"
    assert isinstance(f.step("c0", "roster", f.roster(f.advertise(), 9, 8)),
                      sp.SecAggPlusReveal)


def test_a_share_value_outside_the_field_names_its_holder() -> None:
    bad = np.full(shamir.chunk_count(32), shamir.PRIME, dtype="<u4").tobytes()
    with pytest.raises(ProtocolError, match=r"a malformed share from 'c3': values not below "
                       rf"the field prime {shamir.PRIME}"):
        sp._share_from_bytes(bad, "'c3'")
    with pytest.raises(ProtocolError, match="a malformed share from 'c3'"):
        sp._share_from_bytes(bad[:-4], "'c3'")


class _WrongSelfShare(_Dies):
    """A colluding holder: at unmask it shifts its b-share of one survivor it holds early
    (among the first t points, which the server interpolates from)."""

    victim: str | None = None

    def payload(self, party: Any, **kw: Any) -> Any:
        return self.inner.payload(party, **kw)

    def on_step(self, party: Any, **kw: Any) -> Any:
        out = self.inner.on_step(party, **kw)
        if kw["step"].phase == "unmask":
            inner = self.inner
            victim = next(v for v in out.b if v != party.name
                          and inner._graph.point(v, party.name) <= inner._t)
            share = bytearray(out.b[victim])
            share[0] ^= 1
            type(self).victim = victim
            out = sp.SecAggPlusShares(b={**out.b, victim: bytes(share)}, s=out.s)
        return out


def test_a_wrong_self_mask_share_fails_the_round_named_never_a_wrong_mean() -> None:
    # one colluding holder flips a bit of its b-share of a survivor. The server rebuilt a
    # wrong b_u and subtracted the wrong stream: a uniformly wrong sum, which the range
    # checks of ring_mean cannot always see (with max_abs large, or a small model, it was
    # released as the mean). Each client now sends H(b_u) with its envelopes; the rebuilt
    # b_u must open it, or the round fails naming u
    agg = SecureAggregationPlus(corrupt_fraction=0.05, dropout=0.1, max_abs=1e12)
    names = [f"c{i:02d}" for i in range(12)]
    halves = {"c03": _WrongSelfShare(agg.client_half())}
    run, _ = _protocol(agg, 12, halves=halves)
    exc = run.failures.get("server")
    assert isinstance(exc, ProtocolError), (run.failures, run.results.get("server"))
    assert exc.step == "unmask"
    assert (f"the self-mask seed rebuilt for survivor {_WrongSelfShare.victim!r} does not "
            "open its commitment") in str(exc), exc
    assert "server" not in run.results
    assert names


# --------------------------------------------------------------------------- review: arcs
def _arc_sum(n: int, dropout: float, k: int, t: int) -> tuple[list[str], Any, Any, int]:
    """Play a server that declares two runs of k/2 honest clients dropped around an arc of
    k/2 + 1 and reads the arc's sum: (the arc, the sum read, the true sum, the floor)."""
    names = [f"c{i:03d}" for i in range(n)]
    f = SecAggPlusFederation(names, corrupt_fraction=0.0, dropout=dropout)
    keys = f.advertise()
    roster = f.roster(keys, k, t)
    reveals = {c: f.step(c, "roster", roster) for c in names}
    everyone = f.draw(roster, reveals)
    env = {c: f.step(c, "share-keys", f.neighbours_sigs(everyone, c)) for c in names}
    for c in names:
        f.step(c, "deliver", sp.SecAggPlusDelivery(shared=f.closed[c], shares={
            v: env[v].shares[c] for v in f.closed[c] if v != c}))
    uploads = {c: f.halves[c].payload(f.views[c], server="server", round=1,
                                      params=f.updates[c], base=np.zeros(DIM, np.float32),
                                      weight=1.0) for c in names}
    order, half = f.graph.order, k // 2
    arc = order[half:2 * half + 1]  # k/2 + 1 clients between two runs of k/2
    cut = set(order[:half]) | set(order[2 * half + 1:3 * half + 1])
    survivors = [c for c in f.u1 if c not in cut]
    bits = f.bits(survivors)
    sigs = {c: f.step(c, "consistency", sp.SecAggPlusSurvivors(bitmap=bits)).sig
            for c in survivors}
    answers = {c: f.step(c, "unmask", f.unmask_body(c, bits, sigs)) for c in survivors}
    total = sum((uploads[u] for u in arc), np.zeros(DIM, dtype=np.uint64))
    context = sp._round_context(f.session, 1)
    for u in arc:
        b = f.rebuild(u, {h: answers[h].b[u] for h in f.closed[u] if h in answers})
        total -= expand(b, DIM, label=sp._SELF)
        for v in f.closed[u]:
            if v in cut:  # the arc's only masks with the rest: its dropped neighbours'
                raw = f.rebuild(v, {h: answers[h].s[v] for h in f.closed[v] if h in answers})
                from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

                from islands.crypto.masking import MaskingKey, pairwise_mask
                private = X25519PrivateKey.from_private_bytes(raw)
                key = MaskingKey(private=private,
                                 public=private.public_key().public_bytes_raw())
                pairwise_mask(v, key, {u: f.halves[u]._keys[u][1]}, DIM, context=context,
                              label=sp._INPUT, out=total)
    read = total.view(np.int64).astype(np.float64) / 2.0**32
    true = sum(f.updates[u].astype(np.float64) for u in arc)
    return arc, read, true, f.halves[names[0]].round_floor


def test_declared_dropouts_read_the_sum_of_an_arc_of_t_clients() -> None:
    # the documented arc leak, played: 100 honest clients (no colluders), δ = 0.2. The
    # clients accept (k, t) = (18, 10); the server declares 2 × 9 clients dropped (18 of
    # the 20 allowed), every check passes, and it reads the sum of 10 = t clients, not of
    # the 80 of the round's floor: distributed DP must be calibrated for t, not the floor
    arc, read, true, floor = _arc_sum(100, 0.2, 18, 10)
    assert len(arc) == 10 and floor == 80
    np.testing.assert_allclose(read, true, atol=1e-6)


def test_distributed_noise_is_calibrated_for_what_an_arc_can_hold() -> None:
    # H(n, k) is k-connected: fewer than k colluders and dropouts cannot cut it, and the
    # server learns only the sum of all survivors (>= the floor). With C + D >= k it can
    # cut out an arc of t (above): the noise must then be calibrated for t
    cfg = SecureAggregationPlus(corrupt_fraction=0.0, dropout=0.2).config
    assert sp.dp_guaranteed(cfg, n=100, m=100, k=18, t=10) == 10  # 0 + 20 >= 18
    assert sp.dp_guaranteed(cfg, n=100, m=100, k=24, t=13) == 80  # 0 + 20 < 24: the floor
    cfg = SecureAggregationPlus(corrupt_fraction=0.05, dropout=0.1).config
    assert sp.dp_guaranteed(cfg, n=1000, m=1000, k=78, t=52) == 52  # 50 + 100 >= 78
    # the client holds it: a server asking for the floor under distributed noise is refused
    from islands.aggregation.protect import ClientDP, DPNoiseRequest
    names = [f"c{i:03d}" for i in range(100)]
    f = SecAggPlusFederation(names, corrupt_fraction=0.0, dropout=0.2)
    dp = ClientDP(f.agg, clip=1.0, noise_multiplier=1.0, noise="distributed")
    half = dp.client_half()
    view = f.views["c000"]
    keys = {c: f.step(c, "advertise", sp.SecAggPlusAdvertise(session=f.session))
            for c in names if c != "c000"}
    keys["c000"] = half.on_step(view, server="server", step=sp.AggStep(
        1, "advertise", sp.SecAggPlusAdvertise(session=f.session)))
    half.on_step(view, server="server", step=sp.AggStep(1, "roster", f.roster(keys, 18, 10)))
    request = DPNoiseRequest(noise_multiplier=1.0, clip=1.0, guaranteed=80)
    with pytest.raises(ProtocolError, match=r"guaranteed=80.*expected an int in \[1, 10\]"):
        half.on_step(view, server="server", step=sp.AggStep(1, "dp-noise", request))
    half.on_step(view, server="server", step=sp.AggStep(
        1, "dp-noise", DPNoiseRequest(noise_multiplier=1.0, clip=1.0, guaranteed=10)))


# --------------------------------------------------------------------------- review: binding
def test_the_roster_digest_binds_session_round_n_k_t_names_and_entries() -> None:
    names, entries = ["a", "b", "c"], bytes(range(96)) * 3
    base = (b"s" * 16, 1, names, entries, 2, 2)
    digest = sp._roster_digest(*base)
    changed = [(b"t" * 16, 1, names, entries, 2, 2), (b"s" * 16, 2, names, entries, 2, 2),
               (b"s" * 16, 1, ["a", "b", "d"], entries, 2, 2),
               (b"s" * 16, 1, names, entries[:-1] + b"\x01", 2, 2),
               (b"s" * 16, 1, names, entries, 4, 2), (b"s" * 16, 1, names, entries, 2, 3),
               (b"s" * 16, 1, names[:2], entries[:192], 2, 2)]
    assert len({digest, *(sp._roster_digest(*c) for c in changed)}) == len(changed) + 1


def test_two_groups_shown_different_parameters_are_refused_by_their_neighbours() -> None:
    # the same names and keys, but the server proposes (6, 5) to some clients and a larger
    # (8, 7) to the others: the roster signatures bind (k, t), so a client whose drawn
    # neighbour saw the other pair refuses before any share leaves
    f = fed()
    keys = f.advertise()
    low, high = f.roster(keys, 6, 5), f.roster(keys, 8, 7)
    group = {c: (low if i % 2 else high) for i, c in enumerate(TEN)}
    reveals = {c: f.step(c, "roster", group[c]) for c in TEN}
    everyone = f.draw(low, reveals)
    victim = next(c for c in TEN if group[c] is low
                  and any(group[v] is high for v in f.closed[c]))
    with pytest.raises(ProtocolError, match=r"'secagg\+ roster' signature of 'c\d' does "
                       "not verify"):
        f.step(victim, "share-keys", f.neighbours_sigs(everyone, victim))
    assert f.halves[victim].stage.value == "rostered"
