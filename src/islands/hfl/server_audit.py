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
import secrets
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np

from islands.aggregation.additive import (
    AdditiveRoster,
    AdditiveSharing,
    AdditiveSumRequest,
)
from islands.aggregation.base import AggStep, MeanAggregator
from islands.aggregation.homomorphic import CKKSAggregator, PaillierAggregator
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
    SecAggAdvertise,
    SecAggDelivery,
    SecAggKeyList,
    SecAggKeys,
    SecAggSurvivors,
    SecAggUnmask,
    SecureAggregation,
)
from islands.crypto import ckks
from islands.crypto.envelope import pair_context, seal
from islands.crypto.masking import generate_key
from islands.errors import IslandsError, ProtocolError, ValidationError
from islands.hfl.protocol import LocalOutcome, client, server
from islands.hfl.strategy import FedAvg
from islands.runtime import Transcript, run_local
from islands.runtime.identity import Identity, make_identities
from islands.runtime.progress import ProgressOption, check_progress, task

__all__ = [
    "AttackResult",
    "ClientView",
    "Dealing",
    "DiesAtUpload",
    "HEFederation",
    "SecAggFederation",
    "audit_server",
    "dp_uploads",
    "forwarded",
    "he_aggregator",
    "play",
    "split_view",
]


@dataclass(frozen=True)
class AttackResult:
    """One attack and what came of it."""

    protection: str
    attack: str
    adversary: str
    check: str  # the check that should stop it
    outcome: str  # "refused", "charged honestly", or "LEAKS"
    detail: str  # the refusal as the party gave it, or what leaked

    @property
    def stopped(self) -> bool:
        """Whether the protection held."""
        return self.outcome != "LEAKS"

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {**asdict(self), "stopped": self.stopped}


class ClientView:
    """What a client half sees of its runtime: its name, the federation, its identity."""

    def __init__(self, name: str, parties: Sequence[str], identity: Identity) -> None:
        self.name, self.parties, self.identity = name, tuple(parties), identity


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300]


def _refused(run: Callable[[], Any]) -> tuple[str, str]:
    """Run an attack that should end in a refusal; report the refusal or the leak."""
    try:
        run()
    except (ProtocolError, ValidationError) as exc:
        return "refused", f"{type(exc).__name__}: {_first_line(exc)}"
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

    def uploads(self, rnd: int, clients: Sequence[str] | None = None
                ) -> tuple[Any, dict[str, Any]]:
        """Round ``rnd``: the server opens it, each client of it uploads."""
        clients = list(clients or self.clients)
        agg = self.server_half().start(_Link(), round=rnd, clients=clients,
                                       weights={c: self.n_train[c] for c in clients},
                                       dim=self.dim)
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
    the scheme) and every client's upload, for the played server to sum as it likes.
    """
    fed = HEFederation(scheme)
    dp = ClientDP(he_aggregator(scheme), noise="distributed", guaranteed=t)
    fed.halves = {c: dp.client_half() for c in fed.clients}
    fed.deal()
    for c in fed.clients:
        fed.halves[c].on_step(fed.views[c], server="server", step=AggStep(
            1, "dp-noise", DPNoiseRequest(noise_multiplier=1.0, clip=1.0, guaranteed=t)))
    return fed, fed.uploads(1)[1]


def _he_dp_short_sum(scheme: str) -> None:
    fed, ups = dp_uploads(scheme)
    agg = fed.server_half().start(_Link(), round=1, clients=list(fed.clients),
                                  weights=fed.n_train, dim=fed.dim)
    fed.halves["c0"].open(fed.aggregate(agg, ups, ["c1", "c2"]))


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
        return LocalOutcome(params=np.asarray(params, np.float32).copy(), momentum=None,
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


def _chaos_alone() -> None:
    ChaosPermutation()


def _ddp_over_mean() -> None:
    ClientDP(noise="distributed")


def _paillier_1024() -> None:
    PaillierAggregator(key_bits=1024)


# --------------------------------------------------------------------------- the table
_SERVER = "active server"
ATTACKS: list[tuple[str, str, str, str, Callable[[], Any]]] = [
    ("secagg", "advertise t = 2 to 5 clients configured for t = 3", _SERVER,
     "each client's own threshold, and t > n/2", lambda: _refused(_secagg_lower_t)),
    ("secagg", "skip it: run the plain mean and ask for the update", _SERVER,
     "the client's own configuration", lambda: _refused(partial(_downgrade, "secagg"))),
    ("dp (local)", "skip it: ask for the update with no noise request", _SERVER,
     "the client's own configuration", lambda: _refused(partial(_downgrade, "dp"))),
    ("secagg", "tell {v, a1, a2} that v survived and {a1, b1, b2} that it dropped",
     _SERVER, "consistency round: t signatures on one survivor set",
     lambda: _refused(partial(split_view, SecAggFederation(), 3))),
    ("secagg", "put its own envelope key in a client's place", _SERVER,
     "keys signed with the client's identity", lambda: _refused(_secagg_substituted_key)),
    ("secagg", "list itself as one of the round's clients", _SERVER,
     "clients of the federation only", lambda: _refused(_secagg_sybil)),
    ("ckks / paillier / chaos key", "seal a key it made for every client", _SERVER,
     "the dealer's envelope key signed with its identity",
     lambda: _refused(_keys_server_made)),
    ("ckks / paillier / chaos key", "name itself the dealer", _SERVER,
     "dealers are clients of the federation", lambda: _refused(_keys_server_deals)),
    ("ckks / paillier / chaos key", "ask the dealer to seal the key for the server",
     _SERVER, "sealed only for the federation's clients",
     lambda: _refused(_keys_sealed_for_the_server)),
    ("ckks", "relay a dealer's context of N = 4096 at scale 2^20", "dealer or server",
     "each client's own CKKS parameters", lambda: _refused(partial(_he_weak_key, "ckks"))),
    ("paillier", "relay a dealer's 1024-bit key to clients configured for 2048",
     "dealer or server", "each client's own key_bits",
     lambda: _refused(partial(_he_weak_key, "paillier"))),
    ("ckks / paillier", "send one client's upload as the aggregate", _SERVER,
     "every upload's keyed tags, checked for the round and contributors",
     lambda: _refused(partial(_each_scheme, _he_forwarded))),
    ("ckks / paillier", "send an earlier round's aggregate again", _SERVER,
     "tags bound to the round", lambda: _refused(partial(_each_scheme, _he_replayed))),
    ("dp (distributed) + ckks / paillier", "open a sum of 2 uploads whose noise is "
     "calibrated for 3", _SERVER, "each client's own t, checked on the aggregate's tags",
     lambda: _refused(partial(_each_scheme, _he_dp_short_sum))),
    ("additive", "give the victim a roster of one", _SERVER, "each client's min_clients",
     lambda: _refused(partial(_additive_run, {"v": ["v"], "a": ["a", "b"],
                                              "b": ["a", "b"]}))),
    ("additive", "show clients different rosters", _SERVER,
     "a roster digest on every share",
     lambda: _refused(partial(_additive_run, {"v": ["v", "a"], "a": ["v", "a", "b"],
                                              "b": ["a", "b"]}))),
    ("dp (local)", "send sigma = 1e-300 to clients configured for sigma = 1", _SERVER,
     "each client's own sigma and clip", lambda: _refused(_ldp_less_noise)),
    ("dp (distributed) + secagg", "calibrate noise shares for all 4 clients, not t = 3",
     _SERVER, "each client's own t", lambda: _refused(_ddp_calibrated_for_all)),
    ("dp (distributed) + paillier", "finish a round with fewer survivors than the noise "
     "was calibrated for", "dropouts", "survivors checked before the sum is opened",
     _ddp_too_few_survivors),
    ("dp (distributed)", "noise shares over the plain mean (each update seen with a "
     "fraction of the noise)", "configuration", "refused when built",
     lambda: _refused(_ddp_over_mean)),
    ("dp (client sampling)", "claim amplification for a cohort drawn from the public seed",
     "accounting", "q = 1 unless the cohort is a secret Poisson draw", _fixed_cohort),
    ("chaos", "use the permutation alone (known pairs place the other coordinates)",
     "configuration", "only over a value-hiding protection",
     lambda: _refused(_chaos_alone)),
    ("paillier", "use a 1024-bit modulus", "configuration", "key_bits >= 2048",
     lambda: _refused(_paillier_1024)),
]


def audit_server(progress: ProgressOption = None) -> list[AttackResult]:
    """Play every attack of :data:`ATTACKS`; return what came of each.

    An attack whose own machinery fails (not a refusal by the protection) is reported as
    a leak with the error, so a broken audit never reads as a protection holding.
    ``progress`` reports one step per attack (``True``: a bar; a callable gets each
    :class:`~islands.runtime.progress.ProgressUpdate`).
    """
    sink = check_progress(progress, "audit_server")
    out = []
    quiet = logging.getLogger("islands")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the honest parties' dropout warnings are expected here
    try:
        with task(sink, "audit server", len(ATTACKS), owner="audit_server") as running:
            for done, (protection, attack, adversary, check, run) in enumerate(ATTACKS):
                running.update(done, f"{protection}: {attack}")
                try:
                    outcome, detail = run()
                except (IslandsError, RuntimeError, KeyError, TypeError, ValueError) as exc:
                    outcome = "LEAKS"
                    detail = f"the audit itself failed: {type(exc).__name__}: {exc}"
                out.append(AttackResult(protection, attack, adversary, check, outcome,
                                        detail))
    finally:
        quiet.setLevel(level)
    return out
