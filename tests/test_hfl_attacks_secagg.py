"""A deviating server against secure aggregation: each attack of issue 22, played on the
exact messages honest clients exchange.

The server only relays, so these tests play it directly: five honest client halves,
each with its own configuration and identity, answer the steps a deviating server
sends. Before the change a server that advertised t = 2 and showed two pairs of
clients different survivor sets rebuilt both masks of one client and read its update.
"""

from __future__ import annotations

import numpy as np
import pytest

from islands.aggregation.secagg import (
    KEY_BYTES,
    SecAggAdvertise,
    SecAggKeyList,
    SecAggKeys,
    SecAggSurvivors,
    SecAggUnmask,
    _share_from,
)
from islands.crypto import shamir
from islands.crypto.prg import expand
from islands.errors import ProtocolError
from islands.hfl.server_audit import SecAggFederation, split_view

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
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from islands.aggregation import secagg
    from islands.crypto.masking import MaskingKey, pairwise_mask

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
