"""A deviating server against secure aggregation: each attack of issue 22, played on the
exact messages honest clients exchange.

The server only relays, so these tests play it directly: five honest client halves,
each with its own configuration and identity, answer the steps a deviating server
sends. Before the change a server that advertised t = 2 and showed two pairs of
clients different survivor sets rebuilt both masks of one client and read its update.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest

from islands.crypto import shamir
from islands.crypto.prg import expand
from islands.errors import ProtocolError
from islands.hfl.aggregate import AggStep
from islands.hfl.secagg import KEY_BYTES, SecureAggregation, _share_from
from islands.runtime.identity import make_identities

NAMES = ["v", "a1", "a2", "b1", "b2"]  # v: the victim
DIM = 6


class ClientView:
    """What a client half sees of its runtime: its name, the federation, its identity."""

    def __init__(self, name: str, parties: list[str], identity: Any) -> None:
        self.name, self.parties, self.identity = name, tuple(parties), identity


class Federation:
    """Five honest clients (threshold 0.5: t = 3 of 5) and a server played by the test."""

    def __init__(self, threshold: float | int = 0.5) -> None:
        parties = ["server", *NAMES]
        self.ids = make_identities(parties)
        self.views = {n: ClientView(n, parties, self.ids[n]) for n in NAMES}
        self.halves = {n: SecureAggregation(threshold=threshold).client_half() for n in NAMES}
        rng = np.random.default_rng(0)
        self.updates = {n: rng.normal(size=DIM).astype(np.float32) for n in NAMES}

    def step(self, client: str, phase: str, body: Any, rnd: int = 1) -> Any:
        return self.halves[client].on_step(self.views[client], server="server",
                                           step=AggStep(rnd, phase, body))

    def setup(self, t: int) -> tuple[bytes, dict[str, list[bytes]], dict[str, Any]]:
        """Stages 0 to 2 as an honest server runs them, advertising ``t``."""
        session = bytes(16)
        keys = {}
        for c in NAMES:
            a = self.step(c, "advertise", {"session": session, "threshold": t})
            keys[c] = [a["c"], a["s"], a["sig"]]
        envelopes = {c: self.step(c, "share-keys", {"keys": keys}) for c in NAMES}
        for u in NAMES:
            self.step(u, "deliver", {"u2": NAMES, "shares": {
                v: envelopes[v][u] for v in NAMES if v != u}})
        uploads = {c: self.halves[c].payload(self.views[c], server="server", round=1,
                                             params=self.updates[c], base=np.zeros(DIM),
                                             weight=1.0) for c in NAMES}
        return session, keys, uploads


def split_view(fed: Federation, t: int) -> dict[str, Any]:
    """The attack: tell {v, a1, a2} that v survived and {b1, b2, a1} that it dropped.

    Returns what the server collects: v's self-mask shares from the first group and its
    mask-key shares from the second.
    """
    _, _, uploads = fed.setup(t)
    view_a, view_b = ["v", "a1", "a2"], ["a1", "b1", "b2"]
    got: dict[str, Any] = {"upload": uploads["v"], "b": {}, "s": {}}
    sigs_a = {c: fed.step(c, "consistency", {"survivors": view_a}) for c in view_a}
    sigs_b = {}
    for c in view_b:
        # a1 signed the first view already: it answers no second one
        with contextlib.suppress(ProtocolError):
            sigs_b[c] = fed.step(c, "consistency", {"survivors": view_b})
    for c in view_a:
        answer = fed.step(c, "unmask", {"survivors": view_a, "dropped": ["b1", "b2"],
                                        "signatures": sigs_a})
        got["b"][c] = answer["b"]["v"]
    for c in ["b1", "b2"]:
        answer = fed.step(c, "unmask", {"survivors": view_b, "dropped": ["v", "a2"],
                                        "signatures": sigs_b})
        got["s"][c] = answer["s"]["v"]
    return got


def test_a_server_that_lowers_the_threshold_is_refused_before_any_share_leaves() -> None:
    fed = Federation()  # t = 3 of 5
    session = bytes(16)
    keys = {}
    for c in NAMES:
        a = fed.step(c, "advertise", {"session": session, "threshold": 2})
        keys[c] = [a["c"], a["s"], a["sig"]]
    for c in NAMES:
        with pytest.raises(ProtocolError, match=r"refuses 'server'.s 'share-keys' message: "
                           r"parameter 'threshold' must be at least 3 .*got t=2"):
            fed.step(c, "share-keys", {"keys": keys})
        assert fed.halves[c].stage.value == "advertised"  # no share was made


def test_a_split_view_of_the_survivors_is_refused() -> None:
    # with the honest t = 3 the server gets three b-shares of v, but the second group
    # holds only two signatures on its survivor set: it refuses to unmask
    with pytest.raises(ProtocolError, match=r"2 signatures of survivors on the survivor "
                       r"set, below the threshold t=3"):
        split_view(Federation(), t=3)


def test_without_the_threshold_bound_the_split_view_reads_the_update(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the attack is real: clients that accepted t = 2 of 5 (as before this change) sign
    # both views (each has 2 signers), and the server rebuilds both masks of v
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from islands.crypto.masking import MaskingKey, pairwise_mask
    from islands.hfl import secagg

    monkeypatch.setattr(secagg, "least_threshold", lambda n: 1)
    fed = Federation(threshold=2)
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

    fed = Federation()
    session = bytes(16)
    keys = {}
    for c in NAMES:
        a = fed.step(c, "advertise", {"session": session, "threshold": 3})
        keys[c] = [a["c"], a["s"], a["sig"]]
    fake = generate_key()  # the server's own envelope key, claimed as b1's
    forged = dict(keys, b1=[fake.public, keys["b1"][1], keys["b1"][2]])
    with pytest.raises(ProtocolError, match="'secagg keys' signature of 'b1' does not verify"):
        fed.step("v", "share-keys", {"keys": forged})
    # and a server that lists itself as a client
    own = fed.ids["server"]
    sybil = dict(keys, server=[fake.public, generate_key().public,
                               own.sign("secagg keys", b"")])
    with pytest.raises(ProtocolError, match=r"\['server'\] are not clients"):
        fed.step("a1", "share-keys", {"keys": sybil})


def test_unmasking_needs_the_set_the_client_signed() -> None:
    fed = Federation()
    fed.setup(3)
    sigs = {c: fed.step(c, "consistency", {"survivors": NAMES}) for c in NAMES}
    with pytest.raises(ProtocolError, match="not the set this client signed"):
        fed.step("a1", "unmask", {"survivors": ["v", "a1", "a2"],
                                  "dropped": ["b1", "b2"], "signatures": sigs})
    # a signature of another client's on a set it did not sign does not count
    forged = dict(sigs, b2=sigs["b1"])
    with pytest.raises(ProtocolError, match="signature of 'b2' does not verify"):
        fed.step("a2", "unmask", {"survivors": NAMES, "dropped": [], "signatures": forged})


def test_an_honest_round_unmasks_exactly_the_sum() -> None:
    fed = Federation()
    *_, uploads = fed.setup(3)
    sigs = {c: fed.step(c, "consistency", {"survivors": NAMES}) for c in NAMES}
    answers = {c: fed.step(c, "unmask", {"survivors": NAMES, "dropped": [],
                                         "signatures": sigs}) for c in NAMES[:3]}
    total = sum(uploads.values(), np.zeros(DIM, dtype=np.uint64))
    holders = NAMES[:3]
    xs = [sorted(NAMES).index(c) + 1 for c in holders]
    for u in NAMES:
        b = shamir.combine([_share_from(x, answers[c]["b"][u], c)
                            for x, c in zip(xs, holders, strict=True)], KEY_BYTES)
        total -= expand(b, DIM, label=b"secagg self")
    got = total.view(np.int64).astype(np.float64) / 2.0**32
    np.testing.assert_allclose(got, sum(u.astype(np.float64) for u in fed.updates.values()),
                               atol=1e-8)
