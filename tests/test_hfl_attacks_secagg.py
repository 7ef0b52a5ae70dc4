"""A deviating server against secure aggregation: each attack of issues 22 and 37, played
on the exact messages honest clients exchange.

The server only relays, so these tests play it directly: honest client halves, each
with its own configuration and identity, answer the steps a deviating server sends.
Before issue 22 a server that advertised t = 2 and showed two pairs of clients different
survivor sets rebuilt both masks of one client and read its update. Before issue 37 each
client took t from the round the server announced, so a server that left clients out of
the round lowered t with them and played the same split view with a colluding client
(:class:`Colluding`); and a round of the victim and one colluder was accepted.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from islands.aggregation import secagg
from islands.aggregation.base import AggStep, ring_encode
from islands.aggregation.secagg import (
    KEY_BYTES,
    SecAggAdvertise,
    SecAggDelivery,
    SecAggKeyList,
    SecAggKeys,
    SecAggSurvivors,
    SecAggUnmask,
    SecureAggregation,
    _share_from,
)
from islands.crypto import shamir
from islands.crypto.masking import MaskingKey, pairwise_mask
from islands.crypto.prg import expand
from islands.errors import ProtocolError, ValidationError
from islands.hfl import FedAvg
from islands.hfl.protocol import client, server
from islands.hfl.server_audit import (
    Colluding,
    SecAggFederation,
    round_of_two,
    split_view,
    split_view_with_colluders,
)
from islands.runtime import run_local
from scripted import ScriptedLearner

NAMES = ["v", "a1", "a2", "b1", "b2"]  # v: the victim
DIM = 6


def federation(threshold: float | int = 0.5) -> SecAggFederation:
    return SecAggFederation(NAMES, threshold=threshold, dim=DIM)


def test_a_server_that_lowers_the_threshold_is_refused_before_any_share_leaves() -> None:
    fed = federation()  # t = 3 of 5
    session = bytes(16)
    keys = {c: fed.step(c, "advertise", SecAggAdvertise(session=session, threshold=2))
            for c in NAMES}
    for c in NAMES:
        with pytest.raises(ProtocolError, match=r"refuses 'server'.s 'share-keys' message: "
                           r"parameter 'threshold' must be at least 3 .*got t=2"):
            fed.step(c, "share-keys", SecAggKeyList(keys=keys))
        assert fed.halves[c].stage.value == "advertised"  # no share was made


def test_a_split_view_of_the_survivors_is_refused() -> None:
    # with the honest t = 3 the server gets three b-shares of v, but the second group
    # holds only two signatures on its survivor set: it refuses to unmask
    with pytest.raises(ProtocolError, match=r"2 signatures of survivors on the survivor "
                       r"set, below the threshold t=3"):
        split_view(federation(), t=3)


def test_without_the_threshold_bound_the_split_view_reads_the_update(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the attack is real: clients that accepted t = 2 of 5 (as before this change) sign
    # both views (each has 2 signers), and the server rebuilds both masks of v


    monkeypatch.setattr(secagg, "least_threshold", lambda n: 1)
    fed = federation(threshold=2)
    got = split_view(fed, t=2)
    order = sorted(NAMES)

    def rebuild(shares: dict[str, bytes]) -> bytes:
        held = list(shares)[:2]
        return shamir.combine([_share_from(order.index(c) + 1, shares[c], c) for c in held],
                              KEY_BYTES)

    b_v, s_v = rebuild(got["b"]), rebuild(got["s"])
    private = X25519PrivateKey.from_private_bytes(s_v)
    key = MaskingKey(private=private, public=private.public_key().public_bytes_raw())
    half = fed.halves["v"]
    others = {u: half._keys[u][1] for u in NAMES if u != "v"}
    y = got["upload"] - expand(b_v, DIM, label=b"secagg self")
    y -= pairwise_mask("v", key, others, DIM,
                       context=secagg._round_context(half._session, 1), label=b"secagg input")
    read = y.view(np.int64).astype(np.float64) / 2.0**32
    np.testing.assert_allclose(read, fed.updates["v"], atol=1e-8)


@pytest.mark.parametrize("u2", [
    ["v", "a1", "a1"],          # a colluder counted twice to reach t = 3
    ["v", "v", "a1"],           # the victim itself counted twice
    ["v", "a1", "a1", "a1"],    # padded past t
    ["v", "a1", "zz"],          # a name outside the round
    ["v", "a1"],                # honest count, below t
])
def test_a_delivery_that_counts_fewer_than_t_clients_is_refused(u2: list[str]) -> None:
    # two of five shared keys: however the server lists them, fewer than t = 3 clients
    fed = federation()
    keys = fed.advertise(3)
    envelopes = {c: fed.step(c, "share-keys", SecAggKeyList(keys=keys)) for c in ("v", "a1")}
    with pytest.raises(ProtocolError, match=r"malformed share delivery|below the threshold t=3"):
        fed.step("v", "deliver", SecAggDelivery(u2=u2, shares={"a1": envelopes["a1"].shares["v"]}))
    assert fed.halves["v"].stage.value == "shared"


def test_a_client_refuses_keys_the_server_put_in_another_clients_place() -> None:
    from islands.crypto.masking import generate_key

    fed = federation()
    session = bytes(16)
    keys = {c: fed.step(c, "advertise", SecAggAdvertise(session=session, threshold=3))
            for c in NAMES}
    fake = generate_key()  # the server's own envelope key, claimed as b1's
    forged = dict(keys, b1=SecAggKeys(c=fake.public, s=keys["b1"].s, sig=keys["b1"].sig))
    with pytest.raises(ProtocolError, match="'secagg keys' signature of 'b1' does not verify"):
        fed.step("v", "share-keys", SecAggKeyList(keys=forged))
    # and a server that lists itself as a client
    own = fed.ids["server"]
    sybil = dict(keys, server=SecAggKeys(c=fake.public, s=generate_key().public,
                                         sig=own.sign("secagg keys", b"")))
    with pytest.raises(ProtocolError, match=r"\['server'\] are not clients"):
        fed.step("a1", "share-keys", SecAggKeyList(keys=sybil))


def test_unmasking_needs_the_set_the_client_signed() -> None:
    fed = federation()
    fed.setup(3)
    sigs = {c: fed.step(c, "consistency", SecAggSurvivors(survivors=NAMES)).sig
            for c in NAMES}
    with pytest.raises(ProtocolError, match="not the set this client signed"):
        fed.step("a1", "unmask", SecAggUnmask(survivors=["v", "a1", "a2"],
                                              dropped=["b1", "b2"], signatures=sigs))
    # a signature of another client's on a set it did not sign does not count
    forged = dict(sigs, b2=sigs["b1"])
    with pytest.raises(ProtocolError, match="signature of 'b2' does not verify"):
        fed.step("a2", "unmask", SecAggUnmask(survivors=NAMES, dropped=[], signatures=forged))


def test_an_honest_round_unmasks_exactly_the_sum() -> None:
    fed = federation()
    uploads = fed.setup(3)
    sigs = {c: fed.step(c, "consistency", SecAggSurvivors(survivors=NAMES)).sig
            for c in NAMES}
    answers = {c: fed.step(c, "unmask", SecAggUnmask(survivors=NAMES, dropped=[],
                                                     signatures=sigs)) for c in NAMES[:3]}
    total = sum(uploads.values(), np.zeros(DIM, dtype=np.uint64))
    holders = NAMES[:3]
    xs = [sorted(NAMES).index(c) + 1 for c in holders]
    for u in NAMES:
        b = shamir.combine([_share_from(x, answers[c].b[u], c)
                            for x, c in zip(xs, holders, strict=True)], KEY_BYTES)
        total -= expand(b, DIM, label=b"secagg self")
    got = total.view(np.int64).astype(np.float64) / 2.0**32
    np.testing.assert_allclose(got, sum(u.astype(np.float64) for u in fed.updates.values()),
                               atol=1e-8)


# --------------------------------------------------------------------------- issue 37
FRAC = 2.0**32  # the default fixed point: values are read back to 2^-32


def _refusals_at_share_keys(fed: Colluding, u1: list[str], t: int) -> list[str]:
    """Advertise ``t`` to the round ``u1``; return each honest client's refusal."""
    keys = {c: fed.step(c, "advertise", SecAggAdvertise(session=fed.session, threshold=t))
            for c in u1}
    refusals = []
    for c in u1:
        if c in fed.colluders:
            continue
        with pytest.raises(ProtocolError) as exc:
            fed.step(c, "share-keys", SecAggKeyList(keys=keys))
        assert fed.halves[c].stage.value == "advertised"  # no share was made
        refusals.append(str(exc.value))
    return refusals


TEN = ["v", "m", *[f"h{i}" for i in range(1, 9)]]  # victim, colluder, eight honest


def test_the_bound_is_tight_one_colluder_more_reads_the_update() -> None:
    # a federation of 9 at the default threshold: t = 5 protects against 2t − n − 1 = 0
    # colluders, and with one the split view reads the victim's update exactly: the
    # play below is the real attack
    fed = Colluding(TEN[:9], ["m"])
    read = split_view_with_colluders(fed, TEN[:9], 5, ["h1", "h2", "h3"],
                                     ["h4", "h5", "h6", "h7"])
    np.testing.assert_allclose(read, fed.updates["v"], atol=2.0**-32)


def test_leaving_a_client_out_does_not_lower_t_for_one_colluder() -> None:
    # a federation of 10 at the default threshold: t = 6, against 2·6 − 10 − 1 = 1
    # colluder. The server leaves h8 out and advertises the t = ⌊9/2⌋ + 1 = 5 that
    # clients took from the round before: with one colluder it read the victim exactly
    fed = Colluding(TEN, ["m"])
    u1 = TEN[:9]
    for text in _refusals_at_share_keys(fed, u1, 5):
        assert "refuses 'server'" in text and "'share-keys'" in text
        assert ("parameter 'threshold' must be at least 6 for a round of 9 clients "
                "(this client's threshold=0.5 against its federation of 10 clients), "
                "got t=5") in text
    # at the t they accept, the two views cannot both hold six clients: 1 + 1 + 4 and
    # 1 + 5 would need nine honest clients besides the victim, the round has seven
    fed = Colluding(TEN, ["m"])
    with pytest.raises(ProtocolError, match=r"below the threshold t=6"):
        split_view_with_colluders(fed, u1, 6, ["h1", "h2", "h3", "h4"], ["h5", "h6", "h7"])


def test_three_colluders_at_two_thirds_stay_within_the_bound() -> None:
    # threshold 2/3 in a federation of 10: t = 7, against 2·7 − 10 − 1 = 3 colluders
    # (the docs' "up to a third"). The server leaves three honest clients out, so the
    # round's 7 would give t = ⌊14/3⌋ + 1 = 5, against 2·5 − 7 − 1 = 2 colluders only
    names = ["v", "m1", "m2", "m3", *[f"h{i}" for i in range(1, 7)]]
    fed = Colluding(names, ["m1", "m2", "m3"], threshold=2 / 3)
    u1 = names[:7]
    for text in _refusals_at_share_keys(fed, u1, 5):
        assert "parameter 'threshold' must be at least 7 for a round of 7 clients" in text
        assert "against its federation of 10 clients), got t=5" in text
    fed = Colluding(names, ["m1", "m2", "m3"], threshold=2 / 3)
    with pytest.raises(ProtocolError, match="below the threshold t=7"):
        split_view_with_colluders(fed, u1, 7, ["h1"], ["h2", "h3"])


def test_a_round_of_the_victim_and_one_colluder_is_refused() -> None:
    # five clients: the server runs a round of v and its colluder m alone (t = 2 of 2
    # before); the sum minus m's update is v's update. Now t = 3 of the federation of
    # 5 is also the smallest round a client joins
    names = ["v", "m", "h1", "h2", "h3"]
    fed = Colluding(names, ["m"])
    (text,) = _refusals_at_share_keys(fed, ["v", "m"], 2)
    assert "client 'v' refuses 'server'" in text
    assert ("a round of 2 clients, fewer than the 3 accepted (t=3 of its federation of 5 "
            "clients, parameter 'min_clients' unset)") in text
    # the attack it stops: in a federation of 3 (t = 2, 0 colluders) the round is legal
    fed = Colluding(names[:3], ["m"])
    np.testing.assert_allclose(round_of_two(fed, "m"), fed.updates["v"], atol=2.0**-31)


THRESHOLDS = [0.5, 0.55, 0.6, 2 / 3, 0.75, 0.9, 2, 3, 5, 8]


def test_every_round_a_client_accepts_keeps_its_colluder_bound() -> None:
    # exhaustive over references m and rounds n: whatever round the server shapes, the
    # t a client accepts leaves c = colluder_bound(threshold, m) colluders short of
    # unmasking anyone (t > (n + c)/2), and the round can finish (t <= n)
    from islands.aggregation.secagg import colluder_bound, round_threshold, threshold_for
    from islands.errors import ValidationError

    for threshold in THRESHOLDS:
        for m in range(2, 41):
            try:
                threshold_for(threshold, m)
            except ValidationError:
                continue  # this threshold does not fit m clients: refused when built
            c = colluder_bound(threshold, m)
            assert c >= 0
            for n in range(1, 61):
                # unset, m is the federation (a round never exceeds it); set, a cohort's
                # min_clients in a federation of 60
                cases = [(m, None, threshold_for(threshold, m))] if n <= m else []
                cases.append((60, m, m))
                for federation, min_clients, smallest in cases:
                    try:
                        t = round_threshold(threshold, n, federation=federation,
                                            min_clients=min_clients)
                    except ValidationError:
                        assert n < smallest, (threshold, m, n, min_clients)
                        continue
                    assert n >= smallest and 2 * t > n + c and t <= n, (threshold, m, n, t)


def test_a_client_holds_its_own_min_clients() -> None:
    from islands.aggregation.secagg import round_threshold

    # a cohort client: threshold 0.5 against min_clients = 4 (t = 3, one colluder)
    assert round_threshold(0.5, 4, federation=100, min_clients=4) == 3
    # a larger round keeps the bound: t > (9 + 1)/2
    assert round_threshold(0.5, 9, federation=100, min_clients=4) == 6
    with pytest.raises(ValueError, match=r"a round of 3 clients, fewer than the 4 accepted "
                       r"\(parameter 'min_clients'=4\)"):
        round_threshold(0.5, 3, federation=100, min_clients=4)
    # played: a client refuses a round below its min_clients, before any share
    names = [f"c{i}" for i in range(8)]
    fed = SecAggFederation(names, threshold=0.5)
    fed.halves = {c: SecureAggregation(min_clients=4).client_half() for c in names}
    keys = {c: fed.step(c, "advertise", SecAggAdvertise(session=bytes(16), threshold=2))
            for c in names[:3]}
    with pytest.raises(ProtocolError, match=r"client 'c0' refuses 'server'.s 'share-keys' "
                       r"message: a round of 3 clients, fewer than the 4 accepted"):
        fed.step("c0", "share-keys", SecAggKeyList(keys=keys))
    with pytest.raises(ValueError, match="'threshold' parameter of SecureAggregation"):
        SecureAggregation(threshold=5, min_clients=4)  # t = 5 of a round of 4


def _protocol(aggregator: Any, k: int, *, halves: dict[str, Any] | None = None,
              **strategy: Any) -> Any:
    rng = np.random.default_rng(3)
    names = [f"c{i}" for i in range(k)]
    w0 = rng.normal(size=DIM).astype(np.float32)
    fedavg = FedAvg(local_steps=1, batch_size=None, aggregator=aggregator, **strategy)
    roles: dict[str, Any] = {"server": partial(server, clients=names, strategy=fedavg,
                                               initial=w0, epochs=1, client_timeout=20.0)}
    for name in names:
        roles[name] = partial(client, server="server",
                              learner=ScriptedLearner(50, rng.normal(size=DIM).astype(
                                  np.float32)),
                              aggregator=aggregator, half=(halves or {}).get(name),
                              task_timeout=20.0)
    return run_local(roles, timeout=80, tolerate=[*names, "server"])


def test_cohorts_need_min_clients_and_run_with_it() -> None:
    # 6 clients, cohorts of 3: t = 4 of the federation cannot be reached by a cohort;
    # the server says so before advertising, and names the setting
    run = _protocol(SecureAggregation(), 6, fraction=0.5, seed=3)
    exc = run.failures.get("server")
    assert isinstance(exc, ProtocolError), run.failures
    assert "a round of 3 clients, fewer than the 4 accepted (t=4 of its federation of 6 " \
           "clients, parameter 'min_clients' unset)" in str(exc)
    assert "min_clients" in str(exc).split(";")[-1]
    run = _protocol(SecureAggregation(min_clients=3), 6, fraction=0.5, seed=3)
    assert not run.failures
    assert [r.clients for r in run.results["server"].rounds] == [3]


class PushesItsUpload:
    """A client that skips its encoder's range check: p·w = 0.95·2^31 in every coordinate."""

    def __init__(self) -> None:
        self.inner = SecureAggregation().client_half()

    def on_step(self, party: Any, *, server: str, step: AggStep) -> Any:
        return self.inner.on_step(party, server=server, step=step)

    def open(self, payload: Any) -> Any:
        return self.inner.open(payload)

    def payload(self, party: Any, **kw: Any) -> Any:
        masked = self.inner.payload(party, **dict(kw, params=np.zeros_like(kw["params"])))
        return masked + np.uint64(int(0.95 * 2**31 * FRAC))


class DiesBeforeUpload(PushesItsUpload):
    """A client lost between its keys and its upload."""

    def payload(self, party: Any, **kw: Any) -> Any:
        raise RuntimeError("dies before uploading")


def test_a_sum_no_in_range_uploads_can_make_is_not_released() -> None:
    # 5 clients (t = 3), two lost before uploading: 3 in-range uploads, each
    # |p·w| < 2^31/5, sum to less than 1.29e9, but c0's pushed 2.04e9 reaches the sum
    halves = {"c0": PushesItsUpload(), "c3": DiesBeforeUpload(), "c4": DiesBeforeUpload()}
    run = _protocol(SecureAggregation(), 5, halves=halves)
    exc = run.failures.get("server")
    assert isinstance(exc, ProtocolError), run.failures
    assert exc.party == "server" and exc.step == "unmask"
    assert "secure aggregation round 1: the decoded sum reaches |Σ p·w| = 2.04e+09" in str(exc)
    assert "beyond the 1.288e+09 that 3 in-range uploads can sum to (each |p·w| < 2^31/5)" \
        in str(exc)
    assert "server" not in run.results  # no mean was released


class PushesTo(PushesItsUpload):
    """A client that skips its encoder's checks and adds ``value`` to every p·w."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def payload(self, party: Any, **kw: Any) -> Any:
        masked = self.inner.payload(party, **kw)
        return masked + np.uint64(int(self.value * FRAC))


def test_a_mean_beyond_max_abs_is_not_released_even_with_every_upload_in() -> None:
    # issue 37: one client pushed every coordinate to 1.07e9 in a round where every upload
    # arrived, so the in-range sums fill the ring; the mean of uploads within max_abs
    # (the clients' own bound, 1e6 by default) stays within it, and this one does not
    run = _protocol(SecureAggregation(), 3, halves={"c0": PushesTo(2.0**30)})
    exc = run.failures.get("server")
    assert isinstance(exc, ProtocolError), run.failures
    assert exc.party == "server" and exc.step == "unmask"
    assert "secure aggregation round 1: the decoded mean reaches |w| = 1.074e+09" in str(exc)
    assert "beyond the aggregator's max_abs=1e+06 that a mean of in-range uploads stays " \
           "within" in str(exc)
    assert "server" not in run.results
    honest = _protocol(SecureAggregation(), 3)
    assert not honest.failures and "server" in honest.results
    # an honest client refuses to upload beyond its max_abs, naming itself and the bound
    with pytest.raises(ValidationError, match=r"secure aggregation: client 'c0''s update "
                       r"reaches \|value\| 20, above the aggregator's max_abs=10"):
        ring_encode(np.full(4, 20.0, np.float32), 0.5, frac_bits=32, headroom=3,
                    who="secure aggregation: client 'c0'", max_abs=10.0)
