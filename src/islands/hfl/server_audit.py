"""What a deviating server can do to each protection, played against honest clients.

Secure aggregation, key dealing, additive sharing, local and distributed DP exist to
protect clients from the server, so each is audited against a server that sends other
numbers than the protocol says. :func:`audit_server` plays every such attack found by
the review of issue 22 against real client halves, each holding its own configuration
and its own identity (:mod:`islands.runtime.identity`), on the exact messages the
protocol exchanges, and reports who stopped it and how. ``islands audit server`` prints
the table; the test suite asserts every row (``tests/test_hfl_attacks_*.py``).

Two ways of playing the server are used. Where the attack is a message no honest server
sends (a split view of the survivors, a key in another client's place) the audit drives
the clients' halves step by step (:class:`ClientView`); where it is an honest protocol
run with other numbers (less noise, another calibration) a real server role runs with
a deviating configuration against clients holding the honest one (:func:`play`).

No peer framework ships this table; ``docs/threat-model.md`` states, per protection, the
adversary it holds against and points here.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from numpy.typing import NDArray

from islands.aggregation import secagg
from islands.aggregation.additive import (
    AdditiveRoster,
    AdditiveSharing,
    AdditiveSumRequest,
)
from islands.aggregation.base import AggStep, MeanAggregator
from islands.aggregation.homomorphic import CKKSAggregator, PaillierAggregator, _CKKSServer
from islands.aggregation.keys import (
    _ENVELOPE,
    KeyDealRequest,
    KeyDelivery,
    KeyHello,
    KeyOffer,
    KeyReceiver,
    _aad,
)
from islands.aggregation.protect import (
    ChaosPermutation,
    ClientDP,
    DPNoiseRequest,
    build_aggregator,
)
from islands.aggregation.secagg import (
    _ENVELOPE as _SECAGG_ENVELOPE,
)
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
    _survivors_message,
    _unpack_pair,
)
from islands.aggregation.secagg import _aad as _secagg_aad
from islands.crypto import ckks, mac, shamir
from islands.crypto.envelope import open_sealed, pair_context, seal
from islands.crypto.masking import MaskingKey, generate_key, pairwise_mask
from islands.crypto.prg import expand
from islands.errors import IslandsError, ProtocolError, ValidationError
from islands.hfl import secaggplus_audit as plus
from islands.hfl.protocol import Finish, LocalOutcome, Start, Task, client, server
from islands.hfl.strategy import FedAvg
from islands.privacy import PrivacyAccountant
from islands.progress import ProgressOption, check_progress, task
from islands.runtime import Transcript, run_local
from islands.runtime.identity import Identity, make_identities

__all__ = [
    "Attack",
    "AttackResult",
    "ClientView",
    "Colluding",
    "Dealing",
    "DiesAtUpload",
    "HEFederation",
    "SecAggFederation",
    "audit_server",
    "dp_uploads",
    "forwarded",
    "he_aggregator",
    "play",
    "round_of_two",
    "split_view",
    "split_view_with_colluders",
]


@dataclass(frozen=True)
class AttackResult:
    """One attack and what came of it."""

    protection: str
    attack: str
    adversary: str
    check: str  # the check that should stop it
    outcome: str  # "refused", "charged honestly", "OTHER CHECK" or "LEAKS"
    detail: str  # the refusal as the party gave it, or what leaked
    kind: str = "message"  # "message": a deviating party's messages; "configuration"

    @property
    def stopped(self) -> bool:
        """Whether the named check held (a refusal by another check does not count)."""
        return self.outcome in ("refused", "charged honestly")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {**asdict(self), "stopped": self.stopped}


class ClientView:
    """What a client half sees of its runtime: its name, the federation, its identity."""

    def __init__(self, name: str, parties: Sequence[str], identity: Identity) -> None:
        self.name, self.parties, self.identity = name, tuple(parties), identity


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300]


def _refused(run: Callable[[], Any], expect: str) -> tuple[str, str]:
    """Run an attack that should end in a refusal matching ``expect`` (a regex).

    A refusal whose message does not match is reported as ``"OTHER CHECK"``: the attack
    was stopped, but not by the check the row names, so the row does not hold.
    """
    try:
        run()
    except (ProtocolError, ValidationError) as exc:
        detail = f"{type(exc).__name__}: {_first_line(exc)}"
        if re.search(expect, str(exc)):
            return "refused", detail
        return "OTHER CHECK", f"{detail} (expected a refusal matching {expect!r})"
    return "LEAKS", "nothing refused it"


# --------------------------------------------------------------------------- secagg
class SecAggFederation:
    """Honest secure-aggregation clients (t = ⌊n/2⌋ + 1 of theirs) and a played server."""

    def __init__(self, names: Sequence[str] = ("v", "a1", "a2", "b1", "b2"), *,
                 threshold: float | int = 0.5, dim: int = 6) -> None:
        self.names = list(names)
        parties = ["server", *self.names]
        self.ids = make_identities(parties)
        self.views: dict[str, Any] = {n: ClientView(n, parties, self.ids[n])
                                      for n in self.names}
        self.halves = {n: SecureAggregation(threshold=threshold).client_half()
                       for n in self.names}
        rng = np.random.default_rng(0)
        self.dim = dim
        self.updates = {n: rng.normal(size=dim).astype(np.float32) for n in self.names}

    def step(self, client: str, phase: str, body: Any, rnd: int = 1) -> Any:
        """Send one step to one client; return its answer."""
        return self.halves[client].on_step(self.views[client], server="server",
                                           step=AggStep(rnd, phase, body))

    def advertise(self, t: int, session: bytes = bytes(16)) -> dict[str, SecAggKeys]:
        """Stage 0, advertising ``t``; return the signed key list."""
        return {c: self.step(c, "advertise", SecAggAdvertise(session=session, threshold=t))
                for c in self.names}

    def setup(self, t: int) -> dict[str, Any]:
        """Stages 0 to 2 as an honest server runs them; return the masked uploads."""
        keys = self.advertise(t)
        envelopes = {c: self.step(c, "share-keys", SecAggKeyList(keys=keys))
                     for c in self.names}
        for u in self.names:
            self.step(u, "deliver", SecAggDelivery(u2=self.names, shares={
                v: envelopes[v].shares[u] for v in self.names if v != u}))
        return {c: self.halves[c].payload(self.views[c], server="server", round=1,
                                          params=self.updates[c],
                                          base=np.zeros(self.dim, np.float32), weight=1.0)
                for c in self.names}


def split_view(fed: SecAggFederation, t: int) -> dict[str, Any]:
    """Tell {v, a1, a2} that v survived and {a1, b1, b2} that it dropped.

    Returns what the server collects: v's masked upload, its self-mask shares from the
    first group and its mask-key shares from the second.
    """
    uploads = fed.setup(t)
    view_a, view_b = ["v", "a1", "a2"], ["a1", "b1", "b2"]
    got: dict[str, Any] = {"upload": uploads["v"], "b": {}, "s": {}}
    sigs_a = {c: fed.step(c, "consistency", SecAggSurvivors(survivors=view_a)).sig
              for c in view_a}
    sigs_b = {}
    for c in view_b:
        # a1 signed the first view already: it answers no second one
        with contextlib.suppress(ProtocolError):
            sigs_b[c] = fed.step(c, "consistency", SecAggSurvivors(survivors=view_b)).sig
    for c in view_a:
        answer = fed.step(c, "unmask", SecAggUnmask(survivors=view_a, dropped=["b1", "b2"],
                                                    signatures=sigs_a))
        got["b"][c] = answer.b["v"]
    for c in ["b1", "b2"]:
        answer = fed.step(c, "unmask", SecAggUnmask(survivors=view_b, dropped=["v", "a2"],
                                                    signatures=sigs_b))
        got["s"][c] = answer.s["v"]
    return got


def _secagg_lower_t() -> None:
    fed = SecAggFederation()
    keys = fed.advertise(2)
    for c in fed.names:
        fed.step(c, "share-keys", SecAggKeyList(keys=keys))


def _secagg_substituted_key() -> None:
    fed = SecAggFederation()
    keys = fed.advertise(3)
    keys["b1"] = SecAggKeys(c=generate_key().public, s=keys["b1"].s, sig=keys["b1"].sig)
    fed.step("v", "share-keys", SecAggKeyList(keys=keys))


def _secagg_sybil() -> None:
    fed = SecAggFederation()
    keys = fed.advertise(3)
    keys["server"] = SecAggKeys(c=generate_key().public, s=generate_key().public,
                                sig=fed.ids["server"].sign("secagg keys", b""))
    fed.step("v", "share-keys", SecAggKeyList(keys=keys))


class Colluding:
    """A federation of secure-aggregation clients, some colluding with a played server.

    Every client runs the honest client half with its own configuration; a colluder's
    half is honest too, but the server reads what it holds (its envelopes and envelope
    key) and signs with its identity whatever set it likes.
    """

    def __init__(self, names: list[str], colluders: list[str], *, victim: str = "v",
                 threshold: float | int = 0.5, dim: int = 6) -> None:
        parties = ["server", *names]
        self.names, self.colluders, self.victim = names, colluders, victim
        self.ids = make_identities(parties)
        self.views: dict[str, Any] = {n: ClientView(n, parties, self.ids[n]) for n in names}
        agg = SecureAggregation(threshold=threshold)
        self.halves = {n: agg.client_half() for n in names}
        rng = np.random.default_rng(7)
        self.dim = dim
        self.updates = {n: rng.normal(size=dim).astype(np.float32) for n in names}
        self.session = secrets.token_bytes(16)
        self.u1: list[str] = []

    def step(self, c: str, phase: str, body: Any) -> Any:
        """Send one step of round 1 to client ``c``; return its answer."""
        return self.halves[c].on_step(self.views[c], server="server",
                                      step=AggStep(1, phase, body))

    def open_round(self, u1: list[str], t: int) -> dict[str, Any]:
        """Stages 0 to 2 over the round ``u1``, advertising ``t``; return the uploads."""
        self.u1 = sorted(u1)
        keys = {c: self.step(c, "advertise", SecAggAdvertise(session=self.session,
                                                             threshold=t)) for c in u1}
        envelopes = {c: self.step(c, "share-keys", SecAggKeyList(keys=keys)) for c in u1}
        for c in u1:
            self.step(c, "deliver", SecAggDelivery(u2=list(u1), shares={
                v: envelopes[v].shares[c] for v in u1 if v != c}))
        return {c: self.halves[c].payload(self.views[c], server="server", round=1,
                                          params=self.updates[c],
                                          base=np.zeros(self.dim, np.float32), weight=1.0)
                for c in u1}

    def held(self, colluder: str, owner: str) -> tuple[bytes, bytes]:
        """Return the (s, b) shares of ``owner`` that ``colluder`` holds: both, opened."""
        half = self.halves[colluder]
        if half._c is None:
            raise RuntimeError(f"{colluder!r} holds no envelope key")
        plain = open_sealed(half._c, half._keys[owner][0], half._envelopes[owner],
                            context=pair_context(_SECAGG_ENVELOPE, self.session, colluder,
                                                 owner),
                            aad=_secagg_aad(self.session, 1, owner, colluder))
        return _unpack_pair(plain)

    def sign(self, colluder: str, survivors: list[str]) -> bytes:
        """Sign any survivor set the server likes, as ``colluder``."""
        return self.ids[colluder].sign("secagg survivors",
                                       _survivors_message(self.session, 1, survivors))

    def rebuild(self, shares: dict[str, bytes], t: int) -> bytes:
        """Combine ``t`` shares (by holder) of one secret."""
        held = list(shares)[:t]
        if len(held) < t:
            raise RuntimeError(f"the server holds {len(held)} shares, t = {t}")
        return shamir.combine([_share_from(self.u1.index(c) + 1, shares[c], c)
                               for c in held], KEY_BYTES)

    def unmask_victim(self, upload: Any, b: bytes, s: bytes) -> Any:
        """Remove the victim's self mask and pairwise masks from its upload; decode it."""
        private = X25519PrivateKey.from_private_bytes(s)
        key = MaskingKey(private=private, public=private.public_key().public_bytes_raw())
        half = self.halves[self.victim]
        others = {u: half._keys[u][1] for u in self.u1 if u != self.victim}
        y = upload - expand(b, self.dim, label=b"secagg self")
        y -= pairwise_mask(self.victim, key, others, self.dim,
                           context=secagg._round_context(self.session, 1),
                           label=b"secagg input")
        return y.view(np.int64).astype(np.float64) / 2.0**32


def split_view_with_colluders(fed: Colluding, u1: list[str], t: int, group_a: list[str],
                              group_b: list[str]) -> Any:
    """Leave the federation's other clients out, advertise ``t`` and split the survivors.

    ``group_a`` (with the victim and the colluders) is told the victim survived and
    returns its self-mask shares; ``group_b`` (with the colluders) is told it dropped
    and returns its mask-key shares; each colluder gives both of its own. Returns the
    victim's update as the server reads it.
    """
    v, col = fed.victim, fed.colluders
    uploads = fed.open_round(u1, t)
    views = {"a": sorted([v, *group_a, *col]), "b": sorted([*group_b, *col])}
    got: dict[str, dict[str, bytes]] = {"a": {}, "b": {}}
    for side, honest in (("a", [v, *group_a]), ("b", list(group_b))):
        view = views[side]
        sigs = {c: fed.step(c, "consistency", SecAggSurvivors(survivors=view)).sig
                for c in honest}
        sigs.update({c: fed.sign(c, view) for c in col})
        dropped = [c for c in fed.u1 if c not in view]
        for c in honest:
            answer = fed.step(c, "unmask", SecAggUnmask(survivors=view, dropped=dropped,
                                                        signatures=sigs))
            got[side][c] = answer.b[v] if side == "a" else answer.s[v]
    for c in col:
        s_share, b_share = fed.held(c, v)
        got["a"][c], got["b"][c] = b_share, s_share
    return fed.unmask_victim(uploads[v], fed.rebuild(got["a"], t), fed.rebuild(got["b"], t))


def round_of_two(fed: Colluding, colluder: str) -> Any:
    """Run an honest round of the victim and ``colluder`` alone; subtract the colluder's.

    Returns the victim's update as the server reads it from the round's sum.
    """
    v = fed.victim
    uploads = fed.open_round([v, colluder], 2)
    pair = sorted([v, colluder])
    sigs = {c: fed.step(c, "consistency", SecAggSurvivors(survivors=pair)).sig
            for c in pair}
    answers = {c: fed.step(c, "unmask", SecAggUnmask(survivors=pair, dropped=[],
                                                     signatures=sigs)) for c in pair}
    total = uploads[v] + uploads[colluder]
    for u in pair:
        total -= expand(fed.rebuild({c: answers[c].b[u] for c in pair}, 2), fed.dim,
                        label=b"secagg self")
    own = np.rint(fed.updates[colluder].astype(np.float64) * 2.0**32)
    return (total.view(np.int64).astype(np.float64) - own) / 2.0**32


TEN = ["v", "m", *[f"h{i}" for i in range(1, 9)]]
"""A federation of ten: the victim, one colluder, eight honest clients."""


def _secagg_leave_one_out() -> None:
    fed = Colluding(TEN, ["m"])  # t = 6 of 10 protects against 1 colluder
    split_view_with_colluders(fed, TEN[:9], 5, ["h1", "h2", "h3"], ["h4", "h5", "h6", "h7"])


def _secagg_three_colluders() -> None:
    names = ["v", "m1", "m2", "m3", *[f"h{i}" for i in range(1, 7)]]
    fed = Colluding(names, ["m1", "m2", "m3"], threshold=2 / 3)  # t = 7: c = 3
    split_view_with_colluders(fed, names[:7], 5, ["h1"], ["h2", "h3"])


def _secagg_round_of_two() -> None:
    round_of_two(Colluding(["v", "m", "h1", "h2", "h3"], ["m"]), "m")


# --------------------------------------------------------------------------- key dealing
class Dealing:
    """Clients receiving a dealt key (as CKKS, Paillier and chaos do) and a played server."""

    def __init__(self, clients: Sequence[str] = ("c0", "c1", "c2"), *,
                 purpose: str = "ckks") -> None:
        self.clients, self.purpose = list(clients), purpose
        parties = ["server", *self.clients]
        self.ids = make_identities(parties)
        self.views: dict[str, Any] = {c: ClientView(c, parties, self.ids[c])
                                      for c in self.clients}
        self.installed: dict[str, bytes] = {}
        self.receivers = {c: KeyReceiver(purpose, self._generate, partial(self._install, c))
                          for c in self.clients}
        self.session = secrets.token_bytes(16)

    @staticmethod
    def _generate() -> tuple[bytes, bytes]:
        return secrets.token_bytes(32), b"public part"

    def _install(self, client: str, secret: bytes) -> None:
        self.installed[client] = secret

    def step(self, client: str, phase: str, body: Any) -> Any:
        """Send one key-dealing phase to one client; return its answer."""
        return self.receivers[client].on_step(
            self.views[client], AggStep(0, f"{self.purpose}-{phase}", body), server="server")

    def hello(self, dealer: str = "c0") -> dict[str, Any]:
        """Run the hello phase; return every client's signed envelope key."""
        return {c: self.step(c, "hello", KeyHello(dealer=dealer, session=self.session))
                for c in self.clients}


def _keys_server_made() -> None:
    d = Dealing()
    keys = d.hello()
    d.step("c0", "deal", KeyDealRequest(keys=keys))
    own, secret = generate_key(), secrets.token_bytes(32)
    sealed = seal(own, keys["c1"].key, secret,
                  context=pair_context(_ENVELOPE, d.session, "c0", "c1"),
                  aad=_aad(d.purpose, d.session, "c1"))
    d.step("c1", "deliver", KeyDelivery(
        dealer_key=own.public, sealed=sealed,
        dealer_sig=d.ids["server"].sign("ckks dealer", own.public)))


def _keys_server_deals() -> None:
    d = Dealing()
    d.step("c1", "hello", KeyHello(dealer="server", session=d.session))


def _keys_sealed_for_the_server() -> None:
    d = Dealing()
    keys = d.hello()
    keys["server"] = KeyOffer(key=generate_key().public, sig=bytes(64))
    d.step("c0", "deal", KeyDealRequest(keys=keys))


# --------------------------------------------------------------------------- CKKS, Paillier
class _Link:
    name = "server"


def he_aggregator(scheme: str, **kw: Any) -> Any:
    """Make a :class:`CKKSAggregator` or :class:`PaillierAggregator` configuration."""
    return CKKSAggregator(**kw) if scheme == "ckks" else PaillierAggregator(**kw)


class HEFederation:
    """Four clients of a homomorphic aggregator (c0 deals the key), a played server."""

    clients = ("c0", "c1", "c2", "c3")
    n_train: ClassVar[dict[str, int]] = {"c0": 10, "c1": 30, "c2": 20, "c3": 40}

    def __init__(self, scheme: str, dealer: Any = None, *, dim: int = 7,
                 options: dict[str, Any] | None = None) -> None:
        parties = ["server", *self.clients]
        self.scheme, self.dim = scheme, dim
        self.ids = make_identities(parties)
        self.views: dict[str, Any] = {c: ClientView(c, parties, self.ids[c])
                                      for c in self.clients}
        self.agg = he_aggregator(scheme, **(options or {}))  # e.g. {"he": "ou"}
        self.halves = {c: self.agg.client_half() for c in self.clients}
        if dealer is not None:
            self.halves["c0"] = dealer.client_half()
        rng = np.random.default_rng(0)
        self.models = {r: {c: rng.normal(size=dim).astype(np.float32) for c in self.clients}
                       for r in (1, 2, 3)}
        self.public = b""

    def step(self, c: str, phase: str, body: Any) -> Any:
        """Send one key-dealing phase to one client; return its answer."""
        return self.halves[c].on_step(self.views[c], server="server",
                                      step=AggStep(0, f"{self.scheme}-{phase}", body))

    def deal(self) -> dict[str, Any]:
        """Deal the key as an honest server relays it; return each client's answer."""
        session = bytes(16)
        keys = {c: self.step(c, "hello", KeyHello(dealer="c0", session=session))
                for c in self.clients}
        dealt = self.step("c0", "deal", KeyDealRequest(keys=keys))
        self.public = dealt.public
        acks: dict[str, Any] = {}
        for c in self.clients[1:]:
            try:
                acks[c] = self.step(c, "deliver", KeyDelivery(
                    dealer_key=keys["c0"].key, dealer_sig=dealt.sig,
                    sealed=dealt.sealed[c]))
            except ProtocolError as exc:
                acks[c] = exc
        return acks

    def server_half(self) -> Any:
        """Make the server's half, holding the public part the dealer sent."""
        half = self.agg.server_half()
        if self.scheme == "ckks":
            half.context = ckks.load_context(self.public, secret=False)
        else:
            half.load_public(self.public)
        return half

    def uploads(self, rnd: int, clients: Sequence[str] | None = None, *,
                weights: Mapping[str, float] | None = None) -> tuple[Any, dict[str, Any]]:
        """Round ``rnd``: the server opens it, each client of it uploads.

        The weights are the clients' sample counts (FedAvg), or ``weights``.
        """
        clients = list(clients or self.clients)
        given = self.n_train if weights is None else weights
        agg = self.server_half().start(_Link(), round=rnd, clients=clients,
                                       weights={c: given[c] for c in clients}, dim=self.dim)
        ups = {c: self.halves[c].payload(self.views[c], server="server", round=rnd,
                                         params=self.models[rnd][c],
                                         base=np.zeros(self.dim), weight=agg.weights[c])
               for c in clients}
        return agg, ups

    def aggregate(self, agg: Any, ups: dict[str, Any], survivors: Sequence[str]) -> Any:
        """Add the survivors' uploads and finish the round."""
        for c in survivors:
            agg.add(c, ups[c])
        return agg.finish(list(survivors))

    def mean(self, rnd: int, survivors: Sequence[str]) -> Any:
        """Return the weighted mean the survivors' aggregate must open to."""
        w = np.array([self.n_train[c] for c in survivors], dtype=np.float64)
        return sum(wi * self.models[rnd][c] for wi, c in zip(w / w.sum(), survivors,
                                                             strict=True))


def forwarded(fed: HEFederation, ups: dict[str, Any], honest: Any) -> list[Any]:
    """Return c1's upload as "the aggregate", with every claim a server can make."""
    alone = fed.server_half().start(_Link(), round=1, clients=["c1"],
                                    weights={"c1": 1.0}, dim=fed.dim)
    alone.add("c1", ups["c1"])
    forged = [alone.finish(["c1"])]  # a "round" of the victim alone
    body = "chunks" if fed.scheme == "ckks" else "blob"
    # the victim's ciphertext under the honest aggregate's claims
    forged.append(dict(honest, **{body: forged[0][body]}))
    return forged


# ----------------------------------------------------------------- forged combinations
Coefficient = float | int | NDArray[Any]


def positions(half: Any, dim: int) -> int:
    """Return how many positions a server combines per upload of ``dim`` values.

    CKKS: slots (the values and their MAC tags); Paillier and OU: ciphertexts (the
    packed values and the MAC's).
    """
    if isinstance(half, _CKKSServer):
        return dim + mac.real_tag_count(dim)
    return int(half.config.spec.ciphertexts_for(dim)) + 1


def combine(half: Any, uploads: Mapping[str, Any], coefficients: Mapping[str, Coefficient],
            claims: Mapping[str, Any], *, offsets: Mapping[int, int] | None = None) -> Any:
    """Compute what a server holding only the public key can: a combination of uploads.

    Parameters
    ----------
    half
        The server's half of a CKKS or Paillier (OU) aggregator, holding the public key.
    uploads
        Each client's upload of the round (or of another round), as it arrived.
    coefficients
        Per client: under CKKS a real, or one real per slot (slot-wise products: without
        Galois keys the server can do nothing else); under Paillier/OU an integer, one
        integer per ciphertext, or an integer matrix [input, output] that may also move a
        ciphertext to another position.
    claims
        What the server says the result is: the round, contributors, weights, length and
        (Paillier/OU) counters, as an honest aggregate carries them.
    offsets
        Paillier/OU: a known plaintext to add at a ciphertext position (a fresh
        encryption under the public key).

    Returns
    -------
    dict
        The forged aggregate, as the server would send it.
    """
    dim = int(claims["length"])
    count = positions(half, dim)
    if isinstance(half, _CKKSServer):
        total = ckks.EncryptedSum(half.context, count)
        for c, coef in coefficients.items():
            total.add(uploads[c], float(coef) if isinstance(coef, (int, float))
                      else np.asarray(coef, dtype=np.float64))
        return dict(claims, chunks=total.result())

    def matrix(coef: Coefficient) -> NDArray[Any]:
        w = np.asarray(coef, dtype=object)
        if w.ndim == 0:
            w = np.full(count, coef, dtype=object)
        return np.diag(w) if w.ndim == 1 else w

    weights = {c: matrix(coef) for c, coef in coefficients.items()}
    blobs = {c: uploads[c]["blob"] for c in coefficients}
    offsets = dict(offsets or {})
    if half.config.he == "ou":
        cipher = half.cipher
        column = cipher.concat([cipher.from_bytes(blobs[c], count, "an upload", "the audit")
                                for c in weights])
        stacked = np.vstack([weights[c] for c in weights])
        out = cipher.linear(column, [[(i, int(w)) for i, w in enumerate(stacked[:, j]) if w]
                                     for j in range(count)])
        if offsets:
            out = cipher.add(out, cipher.encrypt([offsets.get(j, 0) for j in range(count)]))
        return dict(claims, blob=cipher.to_bytes(out))
    import gmpy2

    from islands.crypto import paillier

    pk = half.public_key
    n2 = gmpy2.mpz(pk.nsquare)
    cts = {c: paillier.ciphertexts_from_bytes(pk, memoryview(b)[paillier.FINGERPRINT_BYTES:])
           for c, b in blobs.items()}
    result = []
    for j in range(count):
        acc = (paillier.encrypt(pk, [offsets[j] % pk.n])[0] if j in offsets
               else gmpy2.mpz(1))  # 1 encrypts 0
        for c, w in weights.items():
            for i in range(count):
                if int(w[i, j]):
                    acc = acc * gmpy2.powmod(cts[c][i], int(w[i, j]), n2) % n2
        result.append(acc)
    return dict(claims, blob=paillier.fingerprint(pk)
                + paillier.ciphertexts_to_bytes(pk, result))


def honest_coefficients(half: Any, clients: Sequence[str],
                        weights: Mapping[str, float]) -> dict[str, Coefficient]:
    """Return the honest sum's coefficients: p_k (CKKS), 1 (Paillier/OU: p_k is inside)."""
    ckks_half = isinstance(half, _CKKSServer)
    return {c: (float(weights[c]) if ckks_half else 1) for c in clients}


def _layout(half: Any, honest: Mapping[str, Any]
            ) -> tuple[int, int, list[str], dict[str, Coefficient]]:
    """Return an honest aggregate's length, positions, contributors and coefficients."""
    dim = int(honest["length"])
    names = list(honest["contributors"])
    weights = dict(zip(names, honest["weights"], strict=True))
    return dim, positions(half, dim), names, honest_coefficients(half, names, weights)


def masked(half: Any, uploads: Mapping[str, Any], honest: Mapping[str, Any],
           victim: str) -> Any:
    """Forge the victim's values alone, under the honest aggregate's claims and MAC.

    CKKS: each upload times a 0/1 plaintext vector, the victim's over the values and
    everyone's (times its weight) over the tags. Paillier/OU: the victim's packed
    ciphertexts, everyone's MAC ciphertext.
    """
    dim, count, names, honest_coef = _layout(half, honest)
    coefficients: dict[str, Coefficient] = {}
    is_ckks = isinstance(half, _CKKSServer)
    for c in names:
        coef = np.full(count, 1 if c == victim else 0,
                       dtype=np.float64 if is_ckks else object)
        coef[dim if is_ckks else count - 1:] = honest_coef[c]  # the MAC's positions
        coefficients[c] = coef
    return combine(half, uploads, coefficients, honest)


def spliced(half: Any, uploads: Mapping[str, Any], honest: Mapping[str, Any],
            victim: str) -> Any:
    """Forge the victim's first ciphertexts (CKKS chunks) onto the honest aggregate's last."""
    dim, count, names, honest_coef = _layout(half, honest)
    coefficients: dict[str, Coefficient] = {}
    if isinstance(half, _CKKSServer):
        slots = ckks._params_of(half.context, "the audit").slots
        cut = (count - 1) // slots * slots  # the last chunk starts here
        if cut == 0:
            raise ValidationError(f"a splice needs more than one chunk; {dim} values fit one")
        for c in names:
            coef = np.full(count, honest_coef[c], dtype=np.float64)
            coef[:cut] = 1.0 if c == victim else 0.0
            coefficients[c] = coef
    else:
        cut = count - 2  # the victim's packed ciphertexts but the last; the honest rest
        if cut < 1:
            raise ValidationError(f"a splice needs more than one packed ciphertext; {dim} "
                                  "values fit one")
        for c in names:
            coef = np.full(count, 1, dtype=object)
            coef[:cut] = 1 if c == victim else 0
            coefficients[c] = coef
    return combine(half, uploads, coefficients, honest)


def scaled(half: Any, uploads: Mapping[str, Any], honest: Mapping[str, Any]) -> Any:
    """Forge the honest sum scaled (1/2 under CKKS, 2 under Paillier/OU), claims unchanged."""
    names = list(honest["contributors"])
    weights = dict(zip(names, honest["weights"], strict=True))
    factor: Any = 0.5 if isinstance(half, _CKKSServer) else 2
    return combine(half, uploads, {c: factor * coef for c, coef in honest_coefficients(
        half, names, weights).items()}, honest)


def _he_weak_key(scheme: str) -> None:
    if scheme == "ckks":
        dealer = he_aggregator("ckks", poly_modulus_degree=4096,
                               coeff_mod_bit_sizes=(40, 20, 40), scale_bits=20)
    else:
        dealer = he_aggregator("paillier")
        dealer.key_bits = 1024  # a dealer patched below the clients' size
    acks = HEFederation(scheme, dealer=dealer).deal()
    refusals = [a for a in acks.values() if isinstance(a, ProtocolError)]
    if len(refusals) == len(acks):
        raise refusals[0]


def _he_forwarded(scheme: str) -> None:
    fed = HEFederation(scheme)
    fed.deal()
    agg, ups = fed.uploads(1)
    honest = fed.aggregate(agg, ups, fed.clients)
    opened = 0
    for payload in forwarded(fed, ups, honest):
        for c in ("c0", "c2", "c3"):
            with contextlib.suppress(ProtocolError):
                fed.halves[c].open(payload)
                opened += 1
    if not opened:
        fed.halves["c0"].open(forwarded(fed, ups, honest)[0])


def dp_uploads(scheme: str, t: int = 3) -> tuple[HEFederation, dict[str, Any]]:
    """Round 1 of distributed DP over CKKS or Paillier, noise calibrated for ``t``.

    Returns the federation (its halves are :class:`~islands.aggregation.protect.ClientDP` over
    the scheme) and every client's upload, for the played server to sum as it likes. The
    weights are equal, as client-level DP's server gives them (:data:`EQUAL`).
    """
    fed = HEFederation(scheme)
    dp = ClientDP(he_aggregator(scheme), noise="distributed", guaranteed=t)
    fed.halves = {c: dp.client_half() for c in fed.clients}
    fed.deal()
    for c in fed.clients:
        fed.halves[c].on_step(fed.views[c], server="server", step=AggStep(
            1, "dp-noise", DPNoiseRequest(noise_multiplier=1.0, clip=1.0, guaranteed=t)))
    return fed, fed.uploads(1, weights=EQUAL)[1]


EQUAL = dict.fromkeys(HEFederation.clients, 1.0)
"""The weights client-level DP's server gives every client of :class:`HEFederation`."""


def _he_dp_short_sum(scheme: str) -> None:
    fed, ups = dp_uploads(scheme)
    agg = fed.server_half().start(_Link(), round=1, clients=list(fed.clients),
                                  weights=EQUAL, dim=fed.dim)
    # claimed with the t every upload's noise was calibrated for, as the DP round claims it
    fed.halves["c0"].open(dict(fed.aggregate(agg, ups, ["c1", "c2"]), guaranteed=3))


def _each_scheme(attack: Callable[[str], None]) -> None:
    """Play ``attack`` with CKKS and with Paillier; raise only if both refused it."""
    refusals = []
    for scheme in ("ckks", "paillier"):
        try:
            attack(scheme)
        except ProtocolError as exc:
            refusals.append(exc)
    if len(refusals) == 2:
        raise refusals[0]


def _he_replayed(scheme: str) -> None:
    fed = HEFederation(scheme)
    fed.deal()
    agg, ups = fed.uploads(1)
    first = fed.aggregate(agg, ups, fed.clients)
    for c in fed.clients:
        fed.halves[c].open(first)
    fed.uploads(2)
    fed.halves["c2"].open(first)


# --------------------------------------------------------------------------- additive
def _additive_run(rosters: dict[str, list[str]]) -> None:
    def role(party: Any, roster: list[str]) -> Any:
        half = AdditiveSharing().client_half()
        half.on_step(party, server="server", step=AggStep(1, "ss-roster", AdditiveRoster(roster)))
        half.payload(party, server="server", round=1, params=np.ones(4, np.float32),
                     base=np.zeros(4, np.float32), weight=1.0)
        answer = half.on_step(party, server="server",
                             step=AggStep(1, "ss-sum", AdditiveSumRequest()))
        return answer.total

    roles: dict[str, Any] = {"server": lambda party: None}
    roles.update({n: partial(role, roster=r) for n, r in rosters.items()})
    run = run_local(roles, tolerate=list(rosters), timeout=20)
    if run.failures:
        raise next(iter(run.failures.values()))


# --------------------------------------------------------------------------- DP
class _Zero:
    """A learner whose update is zero: what reaches the server is the noise alone."""

    n_train, n_eval = 100, 0

    def train(self, params: Any, **kw: Any) -> Any:
        return LocalOutcome(params=np.asarray(params, np.float32).copy(), state=None,
                            loss=0.0)

    def evaluate(self, params: Any) -> float:
        return 0.0


def play(server_agg: Any, client_agg: Any, *, k: int = 1, dim: int = 257,
         strategy: Any = None, halves: dict[str, Any] | None = None, epochs: int = 1,
         learner: Callable[[], Any] = _Zero) -> tuple[Any, Transcript]:
    """Run a server holding ``server_agg`` against ``k`` clients holding ``client_agg``.

    Returns
    -------
    RunResult, Transcript
        Every party tolerated: failures are in ``result.failures``.
    """
    names = [f"c{i}" for i in range(k)]
    strategy = strategy or FedAvg(local_steps=1, batch_size=None, aggregator=server_agg)
    transcript = Transcript()
    roles: dict[str, Any] = {"server": partial(
        server, clients=names, strategy=strategy, initial=np.zeros(dim, np.float32),
        epochs=epochs, client_timeout=20.0)}
    for name in names:
        roles[name] = partial(client, server="server", learner=learner(),
                              aggregator=client_agg, half=(halves or {}).get(name),
                              task_timeout=20.0)
    result = run_local(roles, timeout=120, tolerate=[*names, "server"], transcript=transcript)
    return result, transcript


def _clients_refuse(server_agg: Any, client_agg: Any, k: int) -> None:
    result, transcript = play(server_agg, client_agg, k=k)
    names = [f"c{i}" for i in range(k)]
    leaked = [n for n in names if any(r.tag == "update" for r in transcript.sent_by(n))]
    if leaked or not all(isinstance(result.failures.get(n), ProtocolError) for n in names):
        return
    raise result.failures["c0"]


def _downgrade(protection: str) -> None:
    _clients_refuse(MeanAggregator(), build_aggregator([protection]), k=3)


def _ldp_less_noise() -> None:
    _clients_refuse(ClientDP(clip=1.0, noise_multiplier=1e-300),
                    ClientDP(clip=1.0, noise_multiplier=1.0), k=1)


def _ddp_calibrated_for_all() -> None:
    class Inflating(ClientDP):
        def server_half(self) -> Any:
            half = super().server_half()
            setattr(half, "_guaranteed", lambda round_clients: round_clients)  # noqa: B010
            return half

    _clients_refuse(Inflating(SecureAggregation(threshold=3), noise="distributed"),
                    ClientDP(SecureAggregation(threshold=3), noise="distributed"), k=4)


class DiesAtUpload:
    """A client half that drops out when it should upload (after the round's set-up)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def on_step(self, party: Any, **kw: Any) -> Any:
        """Answer the set-up steps as the wrapped half does."""
        return self.inner.on_step(party, **kw)

    def open(self, payload: Any) -> Any:
        """Open as the wrapped half does."""
        return self.inner.open(payload)

    def payload(self, party: Any, **kw: Any) -> Any:
        """Drop out."""
        raise RuntimeError("dropped out")


def _ddp_too_few_survivors() -> tuple[str, str]:
    agg = ClientDP(PaillierAggregator(), noise="distributed", guaranteed=3)
    dying = {f"c{i}": DiesAtUpload(agg.client_half()) for i in range(2)}
    result, _ = play(agg, agg, k=4, halves=dying)
    exc = result.failures.get("server")
    if isinstance(exc, ProtocolError):
        return "refused", f"the server's own DP round: {_first_line(exc)}"
    return "LEAKS", "a sum of 2 released with noise calibrated for 3"


def _fixed_cohort() -> tuple[str, str]:
    agg = ClientDP(clip=1.0, noise_multiplier=1.0)
    strategy = FedAvg(local_steps=1, batch_size=None, aggregator=agg, fraction=0.5, seed=3)
    if strategy.secret_sampling_rate is None:
        return "charged honestly", ("the accountant charges q = 1 for a cohort drawn from "
                                    "the public seed (amplification only for "
                                    "sampling='poisson', drawn from the CSPRNG)")
    return "LEAKS", "amplification claimed for a predictable cohort"


def _epsilon_against_server() -> tuple[str, str]:
    agg = ClientDP(clip=1.0, noise_multiplier=1.0)
    strategy = FedAvg(local_steps=1, batch_size=None, aggregator=agg, fraction=0.5,
                      sampling="poisson", seed=3)
    # 20 clients: an empty Poisson cohort (which stops a run) has probability 2^-20 a round
    result, _ = play(agg, agg, k=20, strategy=strategy, epochs=5)
    run = result.results.get("server")
    if run is None:
        raise RuntimeError(f"the run failed: {result.failures}")
    against, amplified = run.privacy_against_server, run.privacy
    charged = {}  # ε at q = 1 for the rounds the busiest client may have been in
    for rounds in range(1, len(run.rounds) + 1):
        accountant = PrivacyAccountant(1.0, sampling_rate=1.0, delta=1e-5)
        accountant.step(rounds)
        charged[rounds] = accountant.epsilon()
    if against is not None and amplified is not None and against[0] >= amplified[0]:
        busiest = [k for k, e in charged.items() if abs(e - against[0]) <= 1e-9 * e]
        if busiest:
            return "charged honestly", (
                f"amplified ε = {amplified[0]:.3g} for who sees the models; ε = "
                f"{against[0]:.3g} against the server ({busiest[0]} rounds of the busiest "
                "client at q = 1)")
    return "LEAKS", f"only the amplified ε is reported ({amplified}; against: {against})"


def _chaos_alone() -> None:
    ChaosPermutation()


def _ddp_over_mean() -> None:
    ClientDP(noise="distributed")


def _paillier_1024() -> None:
    PaillierAggregator(key_bits=1024)


# ---------------------------------------------------------- forgeries at real sizes
REAL_DIMS = {"ckks": 159_010, "paillier": 7_850, "ou": 7_850}
"""Model sizes of the audit's forgeries: Fashion-MNIST's 784-200-10 MLP under CKKS and
its linear model (784·10 + 10) under Paillier and OU, whose encryption costs more."""

RANDOM_TRIALS = 20
"""Random combinations the audit's randomised attacker tries per scheme."""


def random_combination(rng: np.random.Generator, half: Any, honest: Mapping[str, Any]
                       ) -> tuple[dict[str, Any], dict[int, int]]:
    """Draw a random non-honest combination of a round's uploads, and offsets.

    CKKS: per-slot coefficients in [0, p_k] (1 to 3 moves: a few slots at another
    weight, a client left out of the values or of the tags, one block at random).
    Paillier/OU: integer matrices [input, output] per client (1 to 3 moves: one
    coefficient changed, a ciphertext copied to another position — MAC ciphertexts
    included —, a client left out at one position, a known plaintext added).
    """
    dim = int(honest["length"])
    count = positions(half, dim)
    names = list(honest["contributors"])
    weights = dict(zip(names, honest["weights"], strict=True))
    moves = int(rng.integers(1, 4))
    if isinstance(half, _CKKSServer):
        coef = {c: np.full(count, p) for c, p in weights.items()}
        for _ in range(moves):
            c = names[int(rng.integers(len(names)))]
            move = int(rng.integers(4))
            if move == 0:
                where = rng.choice(count, size=int(rng.integers(1, 20)), replace=False)
                coef[c][where] = weights[c] * rng.choice([0.0, 0.3, 0.5, 0.9], size=where.size)
            elif move == 1:
                coef[c][:dim] = 0.0
            elif move == 2:
                coef[c][dim:] = 0.0
            else:
                lo = int(rng.integers(0, -(-count // mac.BLOCK))) * mac.BLOCK
                coef[c][lo:lo + mac.BLOCK] = weights[c] * rng.random(
                    min(mac.BLOCK, count - lo))
        return dict(coef), {}
    eye = np.eye(count, dtype=np.int64).astype(object)
    matrices = {c: eye.copy() for c in names}
    offsets: dict[int, int] = {}
    for _ in range(moves):
        c = names[int(rng.integers(len(names)))]
        i, j = (int(v) for v in rng.integers(count, size=2))
        move = int(rng.integers(4))
        if move == 0:
            matrices[c][i, j] += int(rng.choice([-2, -1, 1, 2, 3]))
        elif move == 1:
            matrices[c][i, (i + 1 + int(rng.integers(max(count - 1, 1)))) % count] += 1
        elif move == 2:
            matrices[c][j, j] = 0
        else:
            offsets[j] = int(rng.integers(1, 2**40))
    if not offsets and all((m == eye).all() for m in matrices.values()):
        matrices[names[0]][0, 0] = 2
    return dict(matrices), offsets


class _Forgeries:
    """One honest federation per scheme at a real model size, shared by its audit rows.

    Its clients hold ``min_clients = 3``; rounds 1 and 2 are uploaded, round 2 summed
    honestly, and every row plays one forgery of round 2 against all four clients.
    """

    def __init__(self) -> None:
        self.cache: dict[str, tuple[HEFederation, dict[str, Any], dict[str, Any], Any]] = {}

    def get(self, scheme: str) -> tuple[HEFederation, dict[str, Any], dict[str, Any], Any]:
        if scheme not in self.cache:
            name = "ckks" if scheme == "ckks" else "paillier"
            options: dict[str, Any] = {"min_clients": 3}
            if scheme == "ou":
                options["he"] = "ou"
            fed = HEFederation(name, dim=REAL_DIMS[scheme], options=options)
            fed.deal()
            _, first = fed.uploads(1)
            agg, second = fed.uploads(2)
            self.cache[scheme] = (fed, first, second, fed.aggregate(agg, second, fed.clients))
        return self.cache[scheme]

    def play(self, scheme: str, attack: str) -> None:
        """Build the forgery; raise the first refusal if every client refused it."""
        fed, first, second, honest = self.get(scheme)
        half = fed.server_half()
        if attack == "random":
            self._random(fed, half, second, honest)
            return
        if attack == "masked":
            forged = masked(half, second, honest, "c1")
        elif attack == "spliced":
            forged = spliced(half, second, honest, "c1")
        elif attack == "scaled":
            forged = scaled(half, second, honest)
        elif attack == "replay":
            forged = _replay_mix(half, first, second, honest)
        elif attack == "fewer":  # two uploads, claimed as the round's three
            claims = fed.aggregate(fed.server_half().start(
                _Link(), round=2, clients=["c1", "c2", "c3"], weights=fed.n_train,
                dim=fed.dim), second, ["c1", "c2", "c3"])
            w = dict(zip(claims["contributors"], claims["weights"], strict=True))
            forged = combine(half, second, {c: honest_coefficients(half, ["c1", "c2"], w)[c]
                                            for c in ["c1", "c2"]}, claims)
        elif attack == "never-given":  # c2 and c3 claimed at weights they were never given
            w = dict(zip(honest["contributors"], honest["weights"], strict=True))
            small = 2.0**-15
            claims = dict(honest, contributors=["c1", "c2", "c3"],
                          weights=[w["c1"], small, small],
                          **({} if scheme == "ckks" else {"counters": [
                              honest["counters"][honest["contributors"].index(c)]
                              for c in ("c1", "c2", "c3")]}))
            forged = combine(half, second, {"c1": honest_coefficients(half, ["c1"], w)["c1"]},
                             claims)
        else:  # "second": c1 asked for a second upload of the round, to mix the two
            fed.halves["c1"].payload(fed.views["c1"], server="server", round=2,
                                     params=fed.models[2]["c1"] + 0.5,
                                     base=np.zeros(fed.dim), weight=1.0 / 4)
            return
        refusals = []
        for c in fed.clients:
            try:
                fed.halves[c].open(forged)
            except ProtocolError as exc:
                refusals.append(exc)
        if len(refusals) == len(fed.clients):
            raise refusals[0]

    @staticmethod
    def _random(fed: HEFederation, half: Any, uploads: dict[str, Any], honest: Any) -> None:
        rng = np.random.default_rng(37)
        last: ProtocolError | None = None
        for _ in range(RANDOM_TRIALS):
            coef, offsets = random_combination(rng, half, honest)
            forged = combine(half, uploads, coef, honest, offsets=offsets)
            try:
                fed.halves["c2"].open(forged)
            except ProtocolError as exc:
                last = exc
            else:
                return  # accepted: the row leaks
        assert last is not None
        raise last


def _replay_mix(half: Any, first: Mapping[str, Any], second: Mapping[str, Any],
                honest: Mapping[str, Any]) -> Any:
    """Round 1's values under round 2's MAC and claims."""
    dim = int(honest["length"])
    count = positions(half, dim)
    is_ckks = isinstance(half, _CKKSServer)
    cut = dim if is_ckks else count - 1
    names = list(honest["contributors"])
    w = dict(zip(names, honest["weights"], strict=True))
    uploads = {**{f"{c}@1": first[c] for c in names}, **second}
    coefficients: dict[str, Any] = {}
    for c, p in honest_coefficients(half, names, w).items():
        old = np.zeros(count, dtype=np.float64 if is_ckks else object)
        new = old.copy()
        old[:cut], new[cut:] = p, p
        coefficients[f"{c}@1"], coefficients[c] = old, new
    return combine(half, uploads, coefficients, honest)


_FORGERIES = _Forgeries()
_MAC_CHECK = "the MAC of the values, round, length and given weights (crypto/mac.py)"
_FORGERY_CHECKS = {"fewer": _MAC_CHECK + ", or the client's min_clients",
                   "second": "one upload per round"}
_FORGERY_EXPECT = {"random": r"its MAC|does not decrypt", "second": r"one upload per round"}


def _ckks_tiny_weights() -> None:
    fed = HEFederation("ckks", dim=5000)
    fed.deal()
    fed.uploads(1)
    half = fed.server_half()
    count = positions(half, fed.dim)
    model = np.random.default_rng(5).uniform(-10, 10, fed.dim)
    big, small = 1000.0, 2.0**-40  # the server's encryption at 2^40, times 2^-40
    own = ckks.encrypt_vector(half.context, np.concatenate([big * model,
                                                            np.zeros(count - fed.dim)]))
    total = ckks.EncryptedSum(half.context, count)
    total.add(own, small)
    claims = {"round": 1, "contributors": ["c1", "c2", "c3"], "weights": [big * small / 3] * 3,
              "length": fed.dim, "chunks": total.result()}
    fed.halves["c0"].open(claims)


def _plain_model_later() -> None:
    def task(rnd: int, params: Any) -> Task:
        return Task(round=rnd, params=params, epoch=0, step=0, steps=1, batch_size=1,
                    lr=0.1, momentum=0.0, weight_decay=0.0, prox_mu=0.0, evaluate=True,
                    weight=0.5, initial=True)

    class Scripted:  # the server's messages to c0, as a deviating server sends them
        name, parties = "c0", ("server", "c0")

        def __init__(self) -> None:
            self.inbox = [Start(resumed_from=0), task(1, np.zeros(7, np.float32)),
                          task(2, np.full(7, 7.0, np.float32)), Finish(params=None, rounds=2)]

        def send(self, to: str, tag: str, msg: Any) -> None:
            pass

        def recv(self, sender: str, tag: str, timeout: float | None = None) -> Any:
            return self.inbox.pop(0)

    class Uploads:  # a client half whose uploads the server keeps (no key needed here)
        def on_step(self, party: Any, **kw: Any) -> None:
            return None

        def open(self, payload: Any) -> Any:
            raise ProtocolError("open() refused it")

        def payload(self, party: Any, **kw: Any) -> Any:
            return {"upload": True}

    client(Scripted(), server="server", learner=_Zero(),  # type: ignore[arg-type]
           aggregator=MeanAggregator(),
           half=Uploads())


def _he_dp_outside(scheme: str) -> None:
    fed = HEFederation(scheme)
    dp = ClientDP(he_aggregator(scheme), noise="distributed", guaranteed=3)
    fed.halves = {c: dp.client_half() for c in fed.clients}
    fed.deal()
    cohort = ["c0", "c1", "c2"]  # round 1's cohort: c3 holds no t for it
    for c in cohort:
        fed.halves[c].on_step(fed.views[c], server="server", step=AggStep(
            1, "dp-noise", DPNoiseRequest(noise_multiplier=1.0, clip=1.0, guaranteed=3)))
    agg, ups = fed.uploads(1, cohort, weights=dict.fromkeys(cohort, 1.0))
    fed.halves["c3"].on_step(fed.views["c3"], server="server", step=AggStep(
        2, "dp-noise", DPNoiseRequest(noise_multiplier=1.0, clip=1.0, guaranteed=3)))
    fed.halves["c3"].open(dict(fed.aggregate(agg, ups, ["c1", "c2"]), guaranteed=3))


def _he_dp_skewed(scheme: str) -> None:
    fed, _ = dp_uploads(scheme)
    for c in fed.clients:
        fed.halves[c].on_step(fed.views[c], server="server", step=AggStep(
            2, "dp-noise", DPNoiseRequest(noise_multiplier=1.0, clip=1.0, guaranteed=3)))
    agg, ups = fed.uploads(2, weights={"c0": 1.0, "c1": 1000.0, "c2": 1.0, "c3": 1.0})
    fed.halves["c0"].open(dict(fed.aggregate(agg, ups, list(fed.clients)), guaranteed=3))


@dataclass(frozen=True)
class Attack:
    """One row of the audit: who attacks, how, the check that must stop it, and the play.

    ``expect`` is a regular expression the refusal must match: a refusal by another
    check is reported as such, not as this check holding. ``kind`` is ``"message"`` for a
    deviating party's messages, ``"configuration"`` for a setting refused when it is
    built, or charged honestly by the accountant.
    """

    protection: str
    attack: str
    adversary: str
    check: str
    expect: str
    play: Callable[[], Any]
    kind: str = "message"

    def run(self) -> tuple[str, str]:
        """Play the attack; return the outcome and its detail."""
        if self.expect:
            return _refused(self.play, self.expect)
        outcome: tuple[str, str] = self.play()
        return outcome


_SERVER = "active server"
_FORGERY_ROWS = [
    ("masked", "send the victim's values alone (0/1 plaintext masks) under the honest MAC"),
    ("spliced", "splice the victim's ciphertexts onto the honest aggregate's last"),
    ("scaled", "scale the honest sum (claims unchanged)"),
    ("replay", "send round 1's values under round 2's MAC"),
    ("fewer", "sum 2 uploads and claim the round's 3 (clients accept 3 or more)"),
    ("never-given", "sum the victim's upload alone and claim 2 more contributors at weights "
     "it never gave them (2^-15)"),
    ("second", "ask a client for a second upload of the round (to combine the two)"),
    ("random", f"try {RANDOM_TRIALS} random combinations of the round's ciphertexts"),
]
ATTACKS: list[Attack] = [
    Attack("secagg", "advertise t = 2 to 5 clients configured for t = 3", _SERVER,
           "each client's own threshold, and t > n/2", r"parameter 'threshold' must be",
           _secagg_lower_t),
    Attack("secagg", "skip it: run the plain mean and ask for the update", _SERVER,
           "the client's own configuration", r"has no keys for round",
           partial(_downgrade, "secagg")),
    Attack("dp (local)", "skip it: ask for the update with no noise request", _SERVER,
           "the client's own configuration", r"sent no noise request",
           partial(_downgrade, "dp")),
    Attack("secagg", "tell {v, a1, a2} that v survived and {a1, b1, b2} that it dropped",
           _SERVER, "consistency round: t signatures on one survivor set",
           r"signatures of survivors on the survivor set, below the threshold",
           partial(split_view, SecAggFederation(), 3)),
    Attack("secagg", "leave 1 of 10 clients out (t = 5 of 9) and split the survivors, with "
           "1 colluder", _SERVER, "t from the federation the client knows, not the round",
           r"parameter 'threshold' must be at least 6 for a round of 9", _secagg_leave_one_out),
    Attack("secagg", "threshold 2/3: leave 3 of 10 out (t = 5 of 7) and split the survivors, "
           "with 3 colluders", _SERVER, "t from the federation the client knows",
           r"parameter 'threshold' must be at least 7 for a round of 7",
           _secagg_three_colluders),
    Attack("secagg", "run a round of the victim and one colluder (federation of 5)", _SERVER,
           "the smallest round a client joins", r"a round of 2 clients, fewer than the 3 "
           r"accepted", _secagg_round_of_two),
    Attack("secagg", "put its own envelope key in a client's place", _SERVER,
           "keys signed with the client's identity", r"'secagg keys' signature of .* does "
           r"not verify", _secagg_substituted_key),
    Attack("secagg", "list itself as one of the round's clients", _SERVER,
           "clients of the federation only", r"\['server'\] are not clients of this "
           r"federation", _secagg_sybil),
    Attack("secaggplus", "propose k = 2, t = 2 to 10 clients configured against 2 colluders",
           _SERVER, "each client's own (k, t) rule", r"do not protect a round of 10",
           plus.weaker_parameters),
    Attack("secaggplus", "leave 2 of 20 out and propose the (k, t) of 15% of the round",
           _SERVER, "colluders counted against the federation, not the round",
           r"against 3 colluders .*accepts k >= 8", plus.shrunk_round),
    Attack("secaggplus", "put its own keys and nonce in a client's roster entry", _SERVER,
           "neighbours verify the entry's roster signature",
           r"'secagg\+ roster' signature of 'c1' does not verify", plus.forged_entry),
    Attack("secaggplus", "reveal another nonce than a client committed to (steer the graph)",
           _SERVER, "commit-then-reveal graph seed", r"does not open its commitment",
           plus.bad_reveal),
    Attack("secaggplus", "claim another graph (other neighbours' signatures)", _SERVER,
           "each client draws the graph itself", r"not of this client's .* neighbours",
           plus.other_graph),
    Attack("secaggplus", "advertise a third set-up in one round", _SERVER,
           "each client's max_setups", r"parameter 'max_setups' is 2", plus.third_setup),
    Attack("secaggplus", "split a victim's holders between 'survived' and 'dropped', with 2 "
           "colluding neighbours", _SERVER, "2t > k + 1 + colluders, t signatures per "
           "neighbourhood", r"below the threshold t=|holds \d shares", plus.split_view),
    Attack("secaggplus", "ask for shares on a survivor set the client did not sign", _SERVER,
           "the signed survivor bitmap", r"not the set this client signed",
           plus.unsigned_survivors),
    Attack("secaggplus", "pass one neighbour's survivor signature off as another's", _SERVER,
           "survivor signatures verified", r"signature of .* does not verify",
           plus.replayed_signatures),
    Attack("ckks / paillier / chaos key", "seal a key it made for every client", _SERVER,
           "the dealer's envelope key signed with its identity",
           r"'ckks dealer' signature of 'c0' does not verify", _keys_server_made),
    Attack("ckks / paillier / chaos key", "name itself the dealer", _SERVER,
           "dealers are clients of the federation", r"the dealer 'server' is not a client",
           _keys_server_deals),
    Attack("ckks / paillier / chaos key", "ask the dealer to seal the key for the server",
           _SERVER, "sealed only for the federation's clients",
           r"key is sealed only for its clients", _keys_sealed_for_the_server),
    Attack("ckks", "relay a dealer's context of N = 4096 at scale 2^20", "dealer or server",
           "each client's own CKKS parameters", r"parameter 'poly_modulus_degree' must be "
           r"at least 8192", partial(_he_weak_key, "ckks")),
    Attack("paillier", "relay a dealer's 1024-bit key to clients configured for 2048",
           "dealer or server", "each client's own key_bits",
           r"parameter 'key_bits' must be at least 2048", partial(_he_weak_key, "paillier")),
    Attack("ckks / paillier", "send one client's upload as the aggregate (7 values)", _SERVER,
           "a single other client's upload is refused",
           r"claims the upload of 'c1' alone", partial(_each_scheme, _he_forwarded)),
    Attack("ckks / paillier", "send an earlier round's aggregate again", _SERVER,
           "the round the client last uploaded in", r"a replayed aggregate",
           partial(_each_scheme, _he_replayed)),
    *[Attack(scheme, f"{what} ({REAL_DIMS[scheme]:,} values)", _SERVER,
             _FORGERY_CHECKS.get(attack, _MAC_CHECK), _FORGERY_EXPECT.get(attack, r"its MAC"),
             partial(_FORGERIES.play, scheme, attack))
      for scheme in ("ckks", "paillier", "ou") for attack, what in _FORGERY_ROWS],
    Attack("ckks", "claim tiny weights (3e-10) over its own encryption of a model it "
           "chose", _SERVER, "claimed CKKS weights of at least 2^-16",
           r"claims a weight below", _ckks_tiny_weights),
    Attack("ckks / paillier / ou", "send a plain 'initial' model after the first task (no "
           "aggregate to check)", _SERVER, "a plain model only with a client's first task",
           r"got a plain initial model", _plain_model_later),
    Attack("dp (distributed) + ckks / paillier", "open a sum of 2 uploads whose noise is "
           "calibrated for 3", _SERVER, "each client's own t",
           r"fewer than the 3 this client's distributed DP noise is calibrated for",
           partial(_each_scheme, _he_dp_short_sum)),
    Attack("dp (distributed) + ckks / paillier", "send a sum of 2 to a client that was not "
           "in the round (it holds no t for it)", _SERVER, "the t every aggregate claims, "
           "bound by the MAC", r"it sums 2 uploads, fewer than the 3",
           partial(_each_scheme, _he_dp_outside)),
    Attack("dp (distributed) + ckks / paillier", "give all but one contributor a tiny "
           "weight (t names, one model)", _SERVER, "equal weights, as client-level DP's",
           r"where client-level DP weights every upload equally",
           partial(_each_scheme, _he_dp_skewed)),
    Attack("additive", "give the victim a roster of one", _SERVER, "each client's min_clients",
           r"parameter 'min_clients' is 2, got a roster of 1",
           partial(_additive_run, {"v": ["v"], "a": ["a", "b"], "b": ["a", "b"]})),
    Attack("additive", "show clients different rosters", _SERVER,
           "a roster digest on every share", r"was shown another roster by the server",
           partial(_additive_run, {"v": ["v", "a"], "a": ["v", "a", "b"], "b": ["a", "b"]})),
    Attack("dp (local)", "send sigma = 1e-300 to clients configured for sigma = 1", _SERVER,
           "each client's own sigma and clip", r"asks for noise_multiplier=1e-300, less "
           r"protection", _ldp_less_noise),
    Attack("dp (distributed) + secagg", "calibrate noise shares for all 4 clients, not t = 3",
           _SERVER, "each client's own t", r"asks for guaranteed=4, less protection",
           _ddp_calibrated_for_all),
    Attack("dp (distributed) + paillier", "finish a round with fewer survivors than the "
           "noise was calibrated for", "dropouts", "survivors checked before the sum is "
           "opened", "", _ddp_too_few_survivors, kind="configuration"),
    Attack("dp (distributed)", "noise shares over the plain mean (each update seen with a "
           "fraction of the noise)", "configuration", "refused when built",
           r"noise='distributed' adds only a share", _ddp_over_mean, kind="configuration"),
    Attack("dp (client sampling)", "claim amplification for a cohort drawn from the public "
           "seed", "accounting", "q = 1 unless the cohort is a secret Poisson draw", "",
           _fixed_cohort, kind="configuration"),
    Attack("dp (client sampling)", "report only the amplified ε of a Poisson cohort the "
           "server itself draws", "accounting", "ε against the server (q = 1, the busiest "
           "client's rounds) reported beside it", "", _epsilon_against_server,
           kind="configuration"),
    Attack("chaos", "use the permutation alone (known pairs place the other coordinates)",
           "configuration", "only over a value-hiding protection",
           r"chaos permutation does not hide the coordinates", _chaos_alone,
           kind="configuration"),
    Attack("paillier", "use a 1024-bit modulus", "configuration", "key_bits >= 2048",
           r"'key_bits' parameter of PaillierAggregator must be an int >= 2048",
           _paillier_1024, kind="configuration"),
]


def audit_server(progress: ProgressOption = None, *, only: str | None = None
                 ) -> list[AttackResult]:
    """Play every attack of :data:`ATTACKS`; return what came of each.

    An attack whose own machinery fails (not a refusal by the protection) is reported as
    a leak with the error, so a broken audit never reads as a protection holding; a
    refusal by another check than the row names is reported as ``"OTHER CHECK"``.
    ``progress`` reports one step per attack (``True``: a bar; a callable gets each
    :class:`~islands.progress.ProgressUpdate`). ``only`` keeps the rows whose
    protection contains it (e.g. ``"ckks"``).
    """
    sink = check_progress(progress, "audit_server")
    rows = [a for a in ATTACKS if only is None or only in a.protection]
    out = []
    quiet = logging.getLogger("islands")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the honest parties' dropout warnings are expected here
    try:
        with task(sink, "audit server", len(rows), owner="audit_server") as running:
            for done, row in enumerate(rows):
                running.update(done, f"{row.protection}: {row.attack}")
                try:
                    outcome, detail = row.run()
                except (IslandsError, RuntimeError, KeyError, TypeError, ValueError,
                        AssertionError) as exc:
                    outcome = "LEAKS"
                    detail = f"the audit itself failed: {type(exc).__name__}: {exc}"
                out.append(AttackResult(row.protection, row.attack, row.adversary, row.check,
                                        outcome, detail, row.kind))
    finally:
        quiet.setLevel(level)
        _FORGERIES.cache.clear()
    return out
