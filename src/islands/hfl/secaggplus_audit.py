"""A deviating server against SecAgg+, played on the exact messages honest clients exchange.

:class:`SecAggPlusFederation` drives honest SecAgg+ client halves
(:mod:`islands.aggregation.secaggplus`) step by step, each with its own configuration and
identity, the way :class:`~islands.hfl.server_audit.SecAggFederation` does for the full
graph; some clients may collude (the server reads what they hold and signs as them). The
attacks below are rows of ``islands audit server`` (:data:`ATTACKS`) and are asserted in
``tests/test_hfl_attacks_secaggplus.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from numpy.typing import NDArray

from islands.aggregation import harary
from islands.aggregation import secaggplus as sp
from islands.aggregation.base import AggStep
from islands.aggregation.secagg import KEY_BYTES, _aad, _unpack_pair
from islands.crypto import shamir
from islands.crypto.envelope import open_sealed, pair_context
from islands.crypto.masking import MaskingKey, generate_key, pairwise_mask
from islands.crypto.prg import expand
from islands.errors import ProtocolError
from islands.runtime.identity import make_identities

__all__ = ["SecAggPlusFederation", "plus_split_view"]


class _View:
    def __init__(self, name: str, parties: Sequence[str], identity: Any) -> None:
        self.name, self.parties, self.identity = name, tuple(parties), identity


class SecAggPlusFederation:
    """Honest SecAgg+ clients of one configuration, and a played server.

    Parameters
    ----------
    names
        The federation's clients.
    colluders
        Clients whose envelopes and identity the server uses (their halves stay honest).
    config
        Keyword arguments of :class:`~islands.aggregation.secaggplus.SecureAggregationPlus`.
    """

    def __init__(self, names: Sequence[str], colluders: Sequence[str] = (), *, dim: int = 6,
                 **config: Any) -> None:
        self.names = list(names)
        self.colluders = list(colluders)
        parties = ["server", *self.names]
        self.ids = make_identities(parties)
        self.views: dict[str, Any] = {n: _View(n, parties, self.ids[n]) for n in self.names}
        self.agg = sp.SecureAggregationPlus(**config)
        self.halves = {n: self.agg.client_half() for n in self.names}
        rng = np.random.default_rng(11)
        self.dim = dim
        self.updates = {n: rng.normal(size=dim).astype(np.float32) for n in self.names}
        self.session = secrets.token_bytes(16)
        self.u1: list[str] = []
        self.digest = b""
        self.closed: dict[str, list[str]] = {}
        self.graph: Any = None
        self.k = self.t = 0

    def step(self, client: str, phase: str, body: Any, rnd: int = 1) -> Any:
        """Send one step to one client; return its answer."""
        return self.halves[client].on_step(self.views[client], server="server",
                                           step=AggStep(rnd, phase, body))

    def advertise(self, clients: Sequence[str] | None = None) -> dict[str, sp.SecAggPlusKeys]:
        """Stage 0 to ``clients`` (all by default)."""
        return {c: self.step(c, "advertise", sp.SecAggPlusAdvertise(session=self.session))
                for c in (clients or self.names)}

    def honest_parameters(self, n: int) -> tuple[int, int]:
        """Return the (k, t) honest clients of this federation propose for a round of n."""
        m = self.agg.config.min_clients or len(self.names)
        params = sp.client_parameters(self.agg.config, n, m)
        assert params is not None
        return params.neighbours, params.threshold

    def roster(self, keys: dict[str, sp.SecAggPlusKeys], k: int | None = None,
               t: int | None = None) -> sp.SecAggPlusRoster:
        """Return the roster of ``keys`` (sorted), proposing (k, t) (honest by default)."""
        names = sorted(keys)
        if k is None or t is None:
            k, t = self.honest_parameters(len(names))
        entries = b"".join(keys[c].c + keys[c].s + keys[c].commit for c in names)
        return sp.SecAggPlusRoster(names=names, entries=entries, neighbours=k, threshold=t)

    def draw(self, roster: sp.SecAggPlusRoster, reveals: dict[str, sp.SecAggPlusReveal]
             ) -> sp.SecAggPlusReveals:
        """Draw the graph as clients will; return the honest reveals message (all signatures)."""
        self.u1 = list(roster.names)
        self.k, self.t = min(roster.neighbours, len(self.u1) - 1), roster.threshold
        self.digest = sp._roster_digest(self.session, 1, self.u1, roster.entries,
                                        roster.neighbours, roster.threshold)
        nonces = [reveals[c].nonce for c in self.u1]
        self.graph = sp._draw(self.session, 1, self.digest, self.u1, nonces, self.k)
        self.closed = {c: self.graph.closed(c) for c in self.u1}
        return sp.SecAggPlusReveals(nonces=b"".join(nonces),
                                    signatures={c: reveals[c].sig for c in self.u1})

    def neighbours_sigs(self, everyone: sp.SecAggPlusReveals, c: str) -> sp.SecAggPlusReveals:
        """Return the reveals message for ``c``: every nonce, its neighbours' roster signatures."""
        return sp.SecAggPlusReveals(nonces=everyone.nonces, signatures={
            v: everyone.signatures[v] for v in self.closed[c] if v != c})

    def open_round(self, u1: Sequence[str] | None = None) -> dict[str, NDArray[np.uint64]]:
        """Stages 0 to 3 as an honest server runs them over ``u1``; return the uploads."""
        keys = self.advertise(u1)
        roster = self.roster(keys)
        reveals = {c: self.step(c, "roster", roster) for c in roster.names}
        everyone = self.draw(roster, reveals)
        envelopes = {c: self.step(c, "share-keys", self.neighbours_sigs(everyone, c))
                     for c in self.u1}
        for c in self.u1:
            self.step(c, "deliver", sp.SecAggPlusDelivery(shared=self.closed[c], shares={
                v: envelopes[v].shares[c] for v in self.closed[c] if v != c}))
        return {c: self.halves[c].payload(self.views[c], server="server", round=1,
                                          params=self.updates[c],
                                          base=np.zeros(self.dim, np.float32), weight=1.0)
                for c in self.u1}

    def bits(self, survivors: Sequence[str]) -> bytes:
        """Return the bitmap of ``survivors`` over the roster."""
        return sp.bitmap([self.u1.index(c) for c in survivors], len(self.u1))

    def sign_as(self, colluder: str, bits: bytes) -> bytes:
        """Return a colluder's signature on any bitmap the server likes."""
        return self.ids[colluder].sign(sp.SURVIVORS_PURPOSE, sp._survivors_message(
            self.session, 1, self.digest, bits))

    def unmask_body(self, c: str, bits: bytes, sigs: dict[str, bytes]) -> sp.SecAggPlusUnmask:
        """Return the unmask request for ``c``: the bitmap and its neighbourhood's signatures."""
        return sp.SecAggPlusUnmask(bitmap=bits, signatures={
            v: s for v, s in sigs.items() if v in self.closed[c]})

    def held(self, colluder: str, owner: str) -> tuple[bytes, bytes]:
        """Return the (s, b) shares of ``owner`` that ``colluder`` holds, opened."""
        half = self.halves[colluder]
        assert half._c is not None
        plain = half._envelopes[owner]
        if owner != colluder:
            plain = open_sealed(half._c, half._keys[owner][0], plain,
                                context=pair_context(sp._ENVELOPE, self.session, colluder,
                                                     owner),
                                aad=_aad(self.session, 1, owner, colluder))
        return _unpack_pair(plain)

    def rebuild(self, owner: str, shares: dict[str, bytes]) -> bytes:
        """Combine t shares of ``owner``'s secret, by holder; raise if fewer than t."""
        held = list(shares)[:self.t]
        if len(held) < self.t:
            raise ProtocolError(f"the server holds {len(held)} shares of {owner!r}'s secret, "
                                f"t = {self.t}", party="server", step="unmask")
        points = np.array([[self.graph.point(owner, h) for h in held]])
        values = np.stack([np.frombuffer(shares[h], dtype="<u4") for h in held])[None]
        return shamir.combine_arrays(points, values, KEY_BYTES)[0]

    def read(self, victim: str, upload: NDArray[np.uint64], b: bytes, s: bytes) -> Any:
        """Remove the victim's masks with its b and s; return its update as read."""
        private = X25519PrivateKey.from_private_bytes(s)
        key = MaskingKey(private=private, public=private.public_key().public_bytes_raw())
        half = self.halves[victim]
        peers = {u: half._keys[u][1] for u in self.closed[victim] if u != victim}
        y = upload - expand(b, self.dim, label=sp._SELF)
        y -= pairwise_mask(victim, key, peers, self.dim,
                           context=sp._round_context(self.session, 1), label=sp._INPUT)
        return y.view(np.int64).astype(np.float64) / 2.0**32


def plus_split_view(fed: SecAggPlusFederation, victim: str,
                    uploads: dict[str, NDArray[np.uint64]]) -> Any:
    """Split the victim's honest holders: some told it survived, the others it dropped.

    The colluders (the federation's) give both of their shares and sign both views.
    Returns the victim's update as the server reads it, or raises the refusal (or the
    server's shortfall of shares).
    """
    col = [c for c in fed.colluders if c != victim]
    holders = [h for h in fed.closed[victim] if h != victim and h not in col]
    half = (len(holders) + 1) // 2
    group_b = holders[half:]
    view_a = fed.bits(fed.u1)  # the victim survived
    view_b = fed.bits([c for c in fed.u1 if c != victim])
    sigs: dict[bytes, dict[str, bytes]] = {view_a: {}, view_b: {}}
    for c in fed.u1:  # the victim's other clients sign the second view: more signers
        if c in col:
            continue
        bits = view_b if c in group_b or c not in fed.closed[victim] else view_a
        sigs[bits][c] = fed.step(c, "consistency", sp.SecAggPlusSurvivors(bitmap=bits)).sig
    for bits in (view_a, view_b):
        sigs[bits].update({c: fed.sign_as(c, bits) for c in col})
    b_shares: dict[str, bytes] = {}
    s_shares: dict[str, bytes] = {}
    for c in col:
        if c in fed.closed[victim]:
            s_shares[c], b_shares[c] = fed.held(c, victim)
    for h in [victim, *holders]:
        bits = view_b if h in group_b else view_a
        answer = fed.step(h, "unmask", fed.unmask_body(h, bits, sigs[bits]))
        if bits == view_a:
            b_shares[h] = answer.b[victim]
        else:
            s_shares[h] = answer.s[victim]
    return fed.read(victim, uploads[victim], fed.rebuild(victim, b_shares),
                    fed.rebuild(victim, s_shares))


TEN = [f"c{i}" for i in range(10)]
"""A federation of ten; with corrupt_fraction=0.2 each client protects against 2 colluders."""


def forged_entry() -> None:
    """Put the server's own keys and nonce in c1's roster entry, and sign for it."""
    fed = SecAggPlusFederation(TEN, corrupt_fraction=0.2)
    keys = fed.advertise()
    nonce = secrets.token_bytes(32)
    keys["c1"] = sp.SecAggPlusKeys(c=generate_key().public, s=generate_key().public,
                                   commit=harary.commitment(fed.session, 1, "c1", nonce))
    roster = fed.roster(keys)
    reveals = {c: fed.step(c, "roster", roster) for c in TEN if c != "c1"}
    reveals["c1"] = sp.SecAggPlusReveal(nonce=nonce, sig=fed.ids["server"].sign(
        sp.ROSTER_PURPOSE, b"any"))
    everyone = fed.draw(roster, reveals)
    for c in fed.closed["c1"]:
        if c != "c1":
            fed.step(c, "share-keys", fed.neighbours_sigs(everyone, c))


def weaker_parameters() -> None:
    """Propose k = 2, t = 2 to clients configured against 2 colluders of 10."""
    fed = SecAggPlusFederation(TEN, corrupt_fraction=0.2)
    roster = fed.roster(fed.advertise(), 2, 2)
    for c in TEN:
        fed.step(c, "roster", roster)


TWENTY = [f"c{i:02d}" for i in range(20)]


def shrunk_round() -> None:
    """Leave 2 of 20 out; propose the (6, 5) that 15% colluders of the round (2) would get.

    The clients count 15% of their federation of 20: 3 colluders, hence (8, 7).
    """
    fed = SecAggPlusFederation(TWENTY, corrupt_fraction=0.15)
    roster = fed.roster(fed.advertise(TWENTY[:18]), 6, 5)
    fed.step("c00", "roster", roster)


def other_graph() -> None:
    """Send a client the roster signatures of neighbours of another graph than the drawn one."""
    fed = SecAggPlusFederation(TEN, corrupt_fraction=0.2)
    roster = fed.roster(fed.advertise())
    reveals = {c: fed.step(c, "roster", roster) for c in TEN}
    everyone = fed.draw(roster, reveals)
    others = [c for c in TEN if c not in fed.closed["c0"]][:fed.k]
    fed.step("c0", "share-keys", sp.SecAggPlusReveals(nonces=everyone.nonces, signatures={
        v: everyone.signatures[v] for v in others}))


def bad_reveal() -> None:
    """Reveal another nonce for c3 than it committed to (to steer the graph)."""
    fed = SecAggPlusFederation(TEN, corrupt_fraction=0.2)
    roster = fed.roster(fed.advertise())
    reveals = {c: fed.step(c, "roster", roster) for c in TEN}
    everyone = fed.draw(roster, reveals)
    i = fed.u1.index("c3")
    nonces = everyone.nonces[:32 * i] + bytes(32) + everyone.nonces[32 * (i + 1):]
    fed.step("c0", "share-keys", sp.SecAggPlusReveals(
        nonces=nonces, signatures=fed.neighbours_sigs(everyone, "c0").signatures))


def third_setup() -> None:
    """Advertise a third set-up in one round (max_setups = 2)."""
    fed = SecAggPlusFederation(TEN, corrupt_fraction=0.2)
    for _ in range(3):
        fed.step("c0", "advertise", sp.SecAggPlusAdvertise(session=secrets.token_bytes(16)))


def split_view() -> None:
    """Tell half the victim's holders it survived and half it dropped, with 2 colluders."""
    fed = SecAggPlusFederation(TEN, corrupt_fraction=0.2)
    uploads = fed.open_round()
    victim = fed.u1[0]
    fed.colluders = [c for c in fed.closed[victim] if c != victim][:2]
    plus_split_view(fed, victim, uploads)


def _signed_round() -> tuple[SecAggPlusFederation, bytes, dict[str, bytes]]:
    """Run an honest round of TEN up to every client's signature on all of them."""
    fed = SecAggPlusFederation(TEN, corrupt_fraction=0.2)
    fed.open_round()
    bits = fed.bits(TEN)
    sigs = {c: fed.step(c, "consistency", sp.SecAggPlusSurvivors(bitmap=bits)).sig
            for c in TEN}
    return fed, bits, sigs


def unsigned_survivors() -> None:
    """Ask for shares on a survivor set the client did not sign."""
    fed, _, sigs = _signed_round()
    fed.step("c0", "unmask", fed.unmask_body("c0", fed.bits(TEN[:9]), sigs))


def replayed_signatures() -> None:
    """Pass one neighbour's survivor signature off as another's."""
    fed, bits, sigs = _signed_round()
    near = [v for v in fed.closed["c0"] if v != "c0"]
    sigs[near[0]] = sigs[near[1]]
    fed.step("c0", "unmask", fed.unmask_body("c0", bits, sigs))
