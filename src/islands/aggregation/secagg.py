r"""Secure aggregation with dropout recovery (Bonawitz et al., CCS 2017), as an aggregator.

The server learns Σ_k p_k·w_k over the clients whose update it received, and no
client's update on its own, even when up to n − t clients drop out during the round.
One round is an explicit state machine on both sides: the protocol of [1]_ Fig. 4 in
its version for an active server, with signed keys and the consistency-check round
(the loss each client reports with its update travels beside it, in the clear):

=====  ===============  ====================================================================
stage  phase            what happens
=====  ===============  ====================================================================
0      ``advertise``    server → U0: a fresh session id and t. Each client makes two X25519
                        key pairs (c: envelopes, s: masks) and replies with both public
                        keys, signed with its identity (:mod:`islands.runtime.identity`).
                        U1 = who answered; |U1| ≥ t or the round fails.
1      ``share-keys``   server → U1: everyone's signed public keys. Each client checks
                        every signature, that every name is a client of its federation,
                        and |U1| and t against its own threshold and round size
                        (:func:`round_threshold`, below); then draws a self-mask
                        seed b_u, Shamir-shares b_u and its mask private key s_u
                        into |U1| shares (t-of-|U1|), and seals share v
                        for each v with AES-GCM under the c-agreement
                        (:mod:`islands.crypto.envelope`). U2 = who answered; |U2| ≥ t.
1b     ``deliver``      server → U2: the list U2 and the envelopes addressed to each (no
                        reply). Then the round's training tasks go to U2.
2      masked input     each client uploads y_u = x_u + PRG(b_u) + Σ_{v∈U2} ±PRG(s_uv)
                        mod 2^64, x_u the fixed-point encoding of p_u·w_u. U3 = the
                        clients whose update arrived; |U3| ≥ t.
3      ``consistency``  server → U3: U3. Each client signs (session, round, U3), once per
                        round. U4 = who signed; |U4| ≥ t.
4      ``unmask``       server → U4: U3, the dropped U2 \ U3 and the signatures of U4.
                        Each client checks that U3 is the set it signed and that at least
                        t survivors signed it, opens the envelopes it holds and returns
                        the b-shares of U3 and the s-shares of the dropped, never both for
                        one client. U5 = who answered; |U5| ≥ t. The server rebuilds
                        every b_u (u ∈ U3) and
                        every dropped s_v, removes the self masks and the dropped clients'
                        pairwise masks, and decodes Σ_{U3} x_u.
=====  ===============  ====================================================================

Dropout handling, stage by stage: a client lost at stage 0 or 1 is simply not in the
round (it does not train); lost during training (between 1b and 2) its pairwise masks
are removed with its reconstructed s key; lost at stage 3 its update still counts (its
b is rebuilt from the others' shares). Fewer than t at any stage is a
:class:`~islands.errors.ProtocolError` naming the round and stage.

Encoding and range: x = round(p·w·2^f) in Z_2^64 with f = ``frac_bits`` (default 32),
checked so that the sum over |U2| clients cannot wrap: |p·w| < 2^(63−f)/|U2|
(2^31/|U2| with the default: 4.3·10^6 for 500 clients). A value outside the range is a
:class:`~islands.errors.ValidationError` at the client, never a silent wrap-around. A
client also refuses to upload a parameter beyond ``max_abs`` (1e6 by default, as the plain
mean). A client that skips those checks can upload anything; the server refuses (a
:class:`~islands.errors.ProtocolError` naming the coordinate and the bound) a decoded
sum beyond |U3|·2^(63−f)/|U2|, which no |U3| in-range uploads reach, and a decoded mean
beyond ``max_abs`` (plus the rounding), which no weighted mean of in-range uploads
reaches, whether or not every upload arrived.
Precision: each client's rounding is ≤ 2^-(f+1), so the mean is within
|U3|·2^-(f+1)/Σ_{U3} p of the exact weighted mean (1.2·10^-7 for 1000 clients).

Security: any t − 1 shares of b_u or s_u are independent of them (Shamir,
:mod:`islands.crypto.shamir`), so an honest-but-curious server with fewer than t
colluding clients sees each y_u masked by PRG outputs it cannot compute ([1]_ Thm.
6.2). Against an active server, the signatures stop it from putting its own keys in a
client's place or posing as a client, and an honest client reveals one kind of share per
client and signs one survivor set per round; the server then unmasks a client of a round
of n = |U1| only if t ≤ (n + n_C)/2 with n_C colluding clients (:func:`least_threshold`).

The server chooses n (it may leave clients out at ``advertise``), so no client takes t
from the round. Each client sets its threshold against m clients it knows itself: the
clients of its federation (``party.parties`` but the server), or its ``min_clients``
when the strategy samples cohorts (``FedAvg(fraction=...)``): t_m =
:func:`threshold_for` (threshold, m). It refuses, before any share leaves, a round of
fewer than t_m clients (``min_clients`` unset: up to m − t_m clients may be missing, as
at every later stage) or fewer than ``min_clients``, and a t below
max(t_m, ⌊(n + c)/2⌋ + 1) (and below ⌊φn⌋ + 1 for a fraction φ), with
c = 2·t_m − m − 1 (:func:`colluder_bound`). Every round it accepts therefore has
t > (n + c)/2: **an active server colluding with up to c = 2·t_m − m − 1 clients
unmasks nobody**, whatever round it shapes; the default φ = 1/2 gives c = 1 for m even
and 0 for m odd, φ = 2/3 about m/3 (c = 3 for m = 10). What the round's sum reveals is
another matter: with n_C colluders among n, the server learns the sum of the n − n_C
honest survivors' updates, so a round of one honest client and colluders gives that
client's update away; a round holds at least t_m clients (``min_clients`` if set), so
this takes at least t_m − 1 colluders: 1 in a federation of 3 at the default (t_m = 2),
2 in one of 4 or 5.
``tests/test_hfl_attacks_secagg.py`` plays each attack; ``islands audit server``.
Keys, seeds and session ids come from OpenSSL's and the OS's CSPRNG, never numpy;
masks are ChaCha20 streams (:mod:`islands.crypto.prg`). Fresh keys every round, so a
dropped client's reconstructed s key reveals nothing about other rounds.

Cost: per client, two key pairs, |U1| envelopes and |U2| PRG streams of the model's
length; per server, |U3| self-mask streams plus |U3|·|U2 \ U3| pairwise streams for
the dropped (the quadratic term [1]_ §7 measures; ``benchmarks/bench_protect.py``).

References
----------
.. [1] K. Bonawitz, V. Ivanov, B. Kreuter, A. Marcedone, H. B. McMahan, S. Patel,
   D. Ramage, A. Segal, K. Seth. "Practical Secure Aggregation for Privacy-Preserving
   Machine Learning." ACM CCS 2017.
"""

from __future__ import annotations

import enum
import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from numpy.typing import NDArray

from islands.aggregation.base import (
    AggStep,
    MalformedUpdateError,
    PlainServerHalf,
    ServerLink,
    StreamingRound,
    ring_encode,
    ring_mean,
    unexpected_step,
)
from islands.aggregation.config import MAX_ABS, SecAggConfig
from islands.crypto import shamir
from islands.crypto.envelope import envelope_key, open_with, pair_context, seal_with
from islands.crypto.masking import MaskingKey, generate_key, pairwise_mask
from islands.crypto.prg import add_expanded
from islands.errors import ProtocolError, ValidationError, invalid_parameter
from islands.runtime import Party, wire
from islands.validation import is_int

__all__ = [
    "SecAggAdvertise",
    "SecAggDelivery",
    "SecAggEnvelopes",
    "SecAggKeyList",
    "SecAggKeys",
    "SecAggShares",
    "SecAggSignature",
    "SecAggSurvivors",
    "SecAggUnmask",
    "SecureAggregation",
    "colluder_bound",
    "least_threshold",
    "mask_upload",
    "round_threshold",
    "threshold_for",
]

Vector = NDArray[np.float32]
KEY_BYTES = 32
_CONTEXT = b"islands secagg v1"
_ENVELOPE = b"islands secagg shares v1"


# --------------------------------------------------------------------------- messages
# The bodies of the phases (AggStep/AggReply.body); the codec checks their field types
# on decode, each receiver checks the class for the phase and the values.
@wire.register(name="hfl.SecAggAdvertise")
@dataclass(frozen=True)
class SecAggAdvertise:
    """Stage 0, server → client: the round's session id and t."""

    session: bytes
    threshold: int


@wire.register(name="hfl.SecAggKeys")
@dataclass(frozen=True)
class SecAggKeys:
    """Stage 0, client → server: the client's two public keys, signed."""

    c: bytes
    s: bytes
    sig: bytes


@wire.register(name="hfl.SecAggKeyList")
@dataclass(frozen=True)
class SecAggKeyList:
    """Stage 1, server → client: every client's signed keys, by name."""

    keys: dict[str, SecAggKeys]


@wire.register(name="hfl.SecAggEnvelopes")
@dataclass(frozen=True)
class SecAggEnvelopes:
    """Stage 1, client → server: one sealed pair of shares per other client."""

    shares: dict[str, bytes]


@wire.register(name="hfl.SecAggDelivery")
@dataclass(frozen=True)
class SecAggDelivery:
    """Stage 1b, server → client: U2 and the envelopes addressed to the client."""

    u2: list[str]
    shares: dict[str, bytes]


@wire.register(name="hfl.SecAggSurvivors")
@dataclass(frozen=True)
class SecAggSurvivors:
    """Stage 3, server → client: U3, for the client to sign."""

    survivors: list[str]


@wire.register(name="hfl.SecAggSignature")
@dataclass(frozen=True)
class SecAggSignature:
    """Stage 3, client → server: the client's signature on U3."""

    sig: bytes


@wire.register(name="hfl.SecAggUnmask")
@dataclass(frozen=True)
class SecAggUnmask:
    """Stage 4, server → client: U3, the dropped clients and the signatures on U3."""

    survivors: list[str]
    dropped: list[str]
    signatures: dict[str, bytes]


@wire.register(name="hfl.SecAggShares")
@dataclass(frozen=True)
class SecAggShares:
    """Stage 4, client → server: b-shares of the survivors, s-shares of the dropped."""

    b: dict[str, bytes]
    s: dict[str, bytes]


def threshold_for(threshold: float | int, n: int) -> int:
    """T for ``n`` clients: an int is t itself; a fraction φ ∈ [1/2, 1) gives ⌊φ·n⌋ + 1.

    Raises
    ------
    ValidationError
        If t exceeds ``n`` (the round cannot finish), or t ≤ n/2 or t < 2 (see
        :func:`least_threshold`: such a t protects nobody against an active server).
    """
    if is_int(threshold):
        t = int(threshold)
        if t > n:
            raise ValidationError(
                f"secure aggregation: threshold t={t} exceeds the {n} clients of the round")
    else:
        t = min(n, math.floor(float(threshold) * n) + 1)
    least = least_threshold(n)
    if t < least:
        raise ValidationError(
            f"secure aggregation: threshold t={t} for a round of {n} clients; it must be at "
            f"least {least} (more than half the round's clients, and 2), or a server that "
            "tells clients different survivor sets rebuilds both masks of one client")
    return t


def round_threshold(threshold: float | int, n: int, *, federation: int,
                    min_clients: int | None = None) -> int:
    """Return the least t a party accepts for a round of ``n`` clients, or refuse the round.

    The threshold is set against m clients: ``min_clients`` if given, else the
    ``federation``'s clients (those the party knows), never against the round the server
    announces. With t_m = :func:`threshold_for` (threshold, m), the round is refused
    below m clients (``min_clients`` given) or below t_m (unset: the federation may miss
    up to m − t_m clients, as at every later stage), and its t must reach
    max(t_m, ⌊(n + c)/2⌋ + 1), c = :func:`colluder_bound` (threshold, m), and for a
    fractional threshold also :func:`threshold_for` (threshold, n). Then every accepted
    round keeps t > (n + c)/2: the server unmasks nobody with c colluding clients
    (:func:`least_threshold`), however it shapes the round.

    Raises
    ------
    ValidationError
        Naming the round's size and the limit, if the round is smaller than the party
        accepts; or if ``threshold`` does not fit m clients (see :func:`threshold_for`).
    """
    m = federation if min_clients is None else min_clients
    try:
        t_m = threshold_for(threshold, m)
    except ValidationError as exc:
        raise ValidationError(
            f"{str(exc).removeprefix('secure aggregation: ')} (threshold={threshold!r} "
            f"against {_reference(federation, min_clients)})") from None
    smallest = t_m if min_clients is None else m
    if n < smallest:
        why = (f"parameter 'min_clients'={min_clients}" if min_clients is not None else
               f"t={t_m} of {_reference(federation, None)}, parameter 'min_clients' unset")
        raise ValidationError(
            f"a round of {n} clients, fewer than the {smallest} accepted ({why})")
    t = max(t_m, (n + colluder_bound(threshold, m)) // 2 + 1)
    if not is_int(threshold):
        t = max(t, threshold_for(threshold, n))
    if t > n:
        raise ValidationError(
            f"a round of {n} clients cannot reach the t={t} needed against "
            f"{_reference(federation, min_clients)}")
    return t


def colluder_bound(threshold: float | int, m: int) -> int:
    """Return c = 2·t − m − 1 for t = :func:`threshold_for` (threshold, m).

    The number of colluding clients a party's threshold protects against when it is set
    against m clients (:func:`round_threshold`): 0 for the default 0.5 with m odd, 1
    with m even; about m/3 for 2/3.
    """
    return 2 * threshold_for(threshold, m) - m - 1


def _reference(federation: int, min_clients: int | None) -> str:
    if min_clients is not None:
        return f"min_clients={min_clients}"
    return f"its federation of {federation} clients"


def least_threshold(n: int) -> int:
    """Return the smallest t that protects a round of ``n`` clients: ⌊n/2⌋ + 1, at least 2.

    Against an active server colluding with n_C clients, each honest client reveals for
    a client v either its self-mask share or its key share, never both, so the server
    unmasks v only if t ≤ (n + n_C)/2 ([1]_ §6, the bound behind its consistency round):
    t > n/2 holds against the server alone, and t protects against up to 2t − n − 1
    colluding clients (t = ⌊2n/3⌋ + 1 against fewer than n/3). t = 1 is a sum of one.
    """
    return max(2, n // 2 + 1)


def _round_context(session: bytes, rnd: int) -> bytes:
    return _CONTEXT + session + rnd.to_bytes(8, "big")


def _aad(session: bytes, rnd: int, sender: str, receiver: str) -> bytes:
    return pair_context(b"aad", session + rnd.to_bytes(8, "big"), sender, receiver) + (
        b"\x00" if sender < receiver else b"\x01")


def _share_bytes(share: shamir.Share) -> bytes:
    return np.asarray(share.y, dtype="<u4").tobytes()


def _share_from(x: int, data: Any, who: str) -> shamir.Share:
    if not isinstance(data, bytes) or len(data) != 4 * shamir.chunk_count(KEY_BYTES):
        raise ProtocolError(f"secure aggregation: a malformed share from {who}")
    return shamir.Share(x=x, y=np.frombuffer(data, dtype="<u4").astype(np.uint32))


class SecureAggregation:
    """Bonawitz et al.'s secure aggregation with t-of-n dropout recovery.

    Parameters
    ----------
    threshold : float or int, default=0.5
        t, the clients that must survive every stage: a fraction φ ∈ [1/2, 1) of m
        clients (t = ⌊φ·m⌋ + 1, a strict majority by default) or an int, at least
        ⌊m/2⌋ + 1 and 2, where m is the federation's clients or ``min_clients``
        (:func:`round_threshold`). Up to n − t of a round's n clients may drop out; an
        active server colluding with up to 2t − m − 1 clients unmasks nobody. A client
        holds its own threshold and refuses a round whose server asks for a smaller t.
    frac_bits : int, default=32
        Fractional bits f of the fixed-point encoding over Z_2^64 (see the module
        docstring for the range and the rounding bound).
    max_abs : float, default=1e6
        The largest magnitude of a model parameter in an upload: a client refuses to
        upload beyond it, and the server refuses a decoded mean beyond it.
    min_clients : int, optional
        The smallest round a client joins, and the m its threshold and colluder bound
        are set against. Unset (the default), m is the federation's clients, and a
        round needs t of them. Set it when the strategy samples cohorts: to the
        smallest cohort every client accepts (for ``FedAvg(fraction=q)`` over N
        clients, at most ⌈qN⌉ with ``sampling="fixed"``, well below qN with
        ``"poisson"``, whose smaller draws stop the run). The server refuses a
        cohort below it before advertising.

    Notes
    -----
    Composes with FedAvg and APFL (any strategy), the chaos permutation and
    client-level DP (:mod:`islands.aggregation.protect`). The server learns the weighted mean
    of the survivors: :meth:`ServerHalf.reveal` returns it.
    """

    name = "secagg"

    def __init__(self, threshold: float | int = 0.5, frac_bits: int = 32,
                 min_clients: int | None = None, max_abs: float = MAX_ABS) -> None:
        config = SecAggConfig.build(None, threshold=threshold, frac_bits=frac_bits,
                                    min_clients=min_clients, max_abs=max_abs)
        self.threshold, self.frac_bits = config.threshold, config.frac_bits
        self.min_clients, self.max_abs = config.min_clients, config.max_abs
        if self.min_clients is not None:
            try:
                threshold_for(self.threshold, self.min_clients)
            except ValidationError as exc:
                raise invalid_parameter(
                    "threshold", "SecureAggregation",
                    f"a threshold that fits min_clients={self.min_clients} ({exc})",
                    self.threshold) from None

    def client_half(self) -> SecAggClient:
        """Make a client's state machine."""
        return SecAggClient(self.threshold, self.frac_bits, min_clients=self.min_clients,
                            max_abs=self.max_abs)

    def server_half(self) -> SecAggServer:
        """Make the server's state machine."""
        return SecAggServer(self.threshold, self.frac_bits, min_clients=self.min_clients,
                            max_abs=self.max_abs)

    def __repr__(self) -> str:
        extra = "" if self.min_clients is None else f", min_clients={self.min_clients}"
        return (f"SecureAggregation(threshold={self.threshold!r}, "
                f"frac_bits={self.frac_bits}{extra})")


# --------------------------------------------------------------------------- client
class ClientStage(enum.Enum):
    """Where a client is in one round."""

    IDLE = "idle"
    ADVERTISED = "advertised"
    SHARED = "shared"
    DELIVERED = "delivered"
    MASKED = "masked"
    SIGNED = "signed"
    UNMASKED = "unmasked"


def _names(names: Sequence[str]) -> bytes:
    # party names never contain NUL (runtime.check_party_names): the join is unambiguous
    return b"\x00".join(n.encode("utf-8") for n in sorted(names))


def _keys_message(session: bytes, rnd: int, client: str, c: bytes, s: bytes) -> bytes:
    return session + rnd.to_bytes(8, "big") + c + s + client.encode("utf-8")


def _survivors_message(session: bytes, rnd: int, survivors: Sequence[str]) -> bytes:
    return session + rnd.to_bytes(8, "big") + _names(survivors)


class SecAggClient:
    """One client's side: keys, shares and masks of the current round.

    The client holds its own threshold (from the configuration it was given) and checks
    everything the server sends against it and against the federation it knows, before
    anything secret leaves: the server may ask for a larger t, never a smaller one.
    """

    def __init__(self, threshold: float | int, frac_bits: int, *,
                 min_clients: int | None = None, max_abs: float = MAX_ABS) -> None:
        self.threshold = threshold
        self.frac_bits = frac_bits
        self.min_clients, self.max_abs = min_clients, max_abs
        self.stage = ClientStage.IDLE
        self.round = 0
        self._c: MaskingKey | None = None
        self._s: MaskingKey | None = None
        self._b: bytes | None = None
        self._session = b""
        self._t = 0
        self._u1: list[str] = []
        self._keys: dict[str, tuple[bytes, bytes]] = {}
        self._u2: list[str] = []
        self._u3: list[str] = []
        self._envelopes: dict[str, bytes] = {}
        self._sealing: dict[str, bytes] = {}  # envelope keys: secret, dropped after stage 4

    @property
    def round_threshold(self) -> int:
        """The t this client accepted for :attr:`round` (0 before its set-up)."""
        return self._t

    @property
    def round_guaranteed(self) -> int:
        """The fewest survivors of a sum the server can unmask this round: t (0 before)."""
        return self._t

    def _expect(self, party: Party, step: AggStep, *stages: ClientStage) -> None:
        if step.round != self.round or self.stage not in stages:
            raise ProtocolError(
                f"secure aggregation: client {party.name!r} got {step.phase!r} of round "
                f"{step.round} while at stage {self.stage.value!r} of round {self.round}",
                party=party.name, step=step.phase)

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        """Run one stage of the client's state machine; return the reply."""
        if step.phase == "advertise":
            return self._advertise(party, step)
        if step.phase == "share-keys":
            self._expect(party, step, ClientStage.ADVERTISED)
            return self._share_keys(party, server, step)
        if step.phase == "deliver":
            self._expect(party, step, ClientStage.SHARED)
            return self._deliver(party, step)
        if step.phase == "consistency":
            self._expect(party, step, ClientStage.MASKED)
            return self._consistency(party, server, step)
        if step.phase == "unmask":
            self._expect(party, step, ClientStage.SIGNED)
            return self._unmask(party, server, step)
        raise unexpected_step(party, step, "secure")

    def _advertise(self, party: Party, step: AggStep) -> SecAggKeys:
        body = step.body
        if step.round <= self.round and self.stage is not ClientStage.IDLE:
            raise ProtocolError(
                f"secure aggregation: client {party.name!r} was asked to advertise keys for "
                f"round {step.round} again", party=party.name, step="advertise")
        if (not isinstance(body, SecAggAdvertise) or not isinstance(body.session, bytes)
                or len(body.session) != 16 or not is_int(body.threshold)
                or body.threshold < 1):
            raise ProtocolError("secure aggregation: malformed advertise request",
                                party=party.name, step="advertise")
        session = body.session
        self.round, self._session, self._t = step.round, session, int(body.threshold)
        self._c, self._s = generate_key(), generate_key()
        self._b = None
        self._envelopes, self._sealing = {}, {}
        self.stage = ClientStage.ADVERTISED
        # signed with the client's identity, so a server cannot put its own keys in
        # another client's place ([1]_ §6, the active-server variant)
        sig = party.identity.sign("secagg keys", _keys_message(
            session, step.round, party.name, self._c.public, self._s.public))
        return SecAggKeys(c=self._c.public, s=self._s.public, sig=sig)

    def _refuse(self, party: Party, server: str, step: str, what: str) -> ProtocolError:
        return ProtocolError(
            f"secure aggregation round {self.round}: client {party.name!r} refuses "
            f"{server!r}'s {step!r} message: {what}", party=party.name, step=step)

    def _share_keys(self, party: Party, server: str, step: AggStep) -> SecAggEnvelopes:
        assert self._c is not None and self._s is not None
        keys = step.body.keys if isinstance(step.body, SecAggKeyList) else None
        if not isinstance(keys, dict) or party.name not in keys or not all(
                isinstance(k, SecAggKeys) for k in keys.values()):
            raise ProtocolError("secure aggregation: malformed key list",
                                party=party.name, step="share-keys")
        mine = keys[party.name]
        if [mine.c, mine.s] != [self._c.public, self._s.public]:
            raise ProtocolError(
                f"secure aggregation: the key list gives client {party.name!r} keys that "
                "are not its own", party=party.name, step="share-keys")
        clients = set(party.parties) - {server}
        strangers = sorted(set(keys) - clients)
        if strangers:
            raise self._refuse(party, server, "share-keys",
                               f"{strangers} are not clients of this federation")
        n = len(keys)
        # t from the federation this client knows (or its min_clients), never from the
        # round: a server that leaves clients out must not lower t with them
        federation = len(clients)
        try:
            least = round_threshold(self.threshold, n, federation=federation,
                                    min_clients=self.min_clients)
        except ValidationError as exc:
            raise self._refuse(party, server, "share-keys", str(exc)) from None
        if self._t < least:
            raise self._refuse(
                party, server, "share-keys",
                f"parameter 'threshold' must be at least {least} for a round of {n} clients "
                f"(this client's threshold={self.threshold!r} against "
                f"{_reference(federation, self.min_clients)}), got t={self._t}")
        if n < self._t:
            raise ProtocolError(
                f"secure aggregation round {self.round}: {n} clients advertised "
                f"keys, below the threshold t={self._t}", party=party.name, step="share-keys")
        flat = [bytes(k) for v in keys.values() for k in (v.c, v.s)]
        if len(set(flat)) != len(flat):
            raise ProtocolError("secure aggregation: two clients present the same key",
                                party=party.name, step="share-keys")
        for v, entry in keys.items():
            party.identity.verify(v, "secagg keys", _keys_message(
                self._session, self.round, v, bytes(entry.c), bytes(entry.s)), entry.sig)
        self._u1 = sorted(keys)
        self._keys = {v: (bytes(k.c), bytes(k.s)) for v, k in keys.items()}
        self._b = secrets.token_bytes(KEY_BYTES)
        s_shares = shamir.split(self._s.private.private_bytes_raw(), n, self._t)
        b_shares = shamir.split(self._b, n, self._t)
        out: dict[str, bytes] = {}
        for i, v in enumerate(self._u1):
            plain = _pack_pair(_share_bytes(s_shares[i]), _share_bytes(b_shares[i]))
            if v == party.name:
                self._envelopes[v] = plain  # its own shares stay with it, unsealed
                continue
            # kept for stage 4: v's envelope to this client opens under the same key
            key = self._sealing[v] = envelope_key(
                self._c, self._keys[v][0],
                context=pair_context(_ENVELOPE, self._session, party.name, v))
            out[v] = seal_with(key, plain, aad=_aad(self._session, self.round, party.name, v))
        self.stage = ClientStage.SHARED
        return SecAggEnvelopes(shares=out)

    def _deliver(self, party: Party, step: AggStep) -> None:
        body = step.body
        u2, envelopes = ((body.u2, body.shares) if isinstance(body, SecAggDelivery)
                         else (None, None))
        if (not isinstance(u2, list) or party.name not in u2 or not set(u2) <= set(self._u1)
                or len(set(u2)) != len(u2) or not isinstance(envelopes, dict)
                or set(envelopes) != set(u2) - {party.name}):
            raise ProtocolError("secure aggregation: malformed share delivery",
                                party=party.name, step="deliver")
        if len(u2) < self._t:
            raise ProtocolError(
                f"secure aggregation round {self.round}: {len(u2)} clients shared keys, "
                f"below the threshold t={self._t}", party=party.name, step="deliver")
        self._u2 = sorted(u2)
        self._envelopes.update({v: bytes(e) for v, e in envelopes.items()})
        self.stage = ClientStage.DELIVERED
        return None

    def open(self, payload: Any) -> Vector:
        """Return the mean the server sent (it is plain: nothing to open)."""
        return np.asarray(payload)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> NDArray[np.uint64]:
        """Mask the fixed-point encoding of p·w (stage 2)."""
        if round != self.round or self.stage is not ClientStage.DELIVERED:
            raise ProtocolError(
                f"secure aggregation: client {party.name!r} has no keys for round {round} "
                f"(stage {self.stage.value!r} of round {self.round})", party=party.name,
                step="update")
        assert self._s is not None and self._b is not None
        x = ring_encode(params, weight, frac_bits=self.frac_bits, headroom=len(self._u2),
                        max_abs=self.max_abs,
                        who=f"secure aggregation: client {party.name!r}")
        mask_upload(x, name=party.name, own=self._s, self_seed=self._b,
                    peers={v: self._keys[v][1] for v in self._u2 if v != party.name},
                    context=_round_context(self._session, self.round),
                    self_label=b"secagg self", pair_label=b"secagg input")
        self.stage = ClientStage.MASKED
        return x

    def _consistency(self, party: Party, server: str, step: AggStep) -> SecAggSignature:
        """Sign the survivor set the server announced (the consistency check of [1]_)."""
        survivors = step.body.survivors if isinstance(step.body, SecAggSurvivors) else None
        if not isinstance(survivors, list) or party.name not in survivors:
            raise ProtocolError("secure aggregation: malformed consistency request",
                                party=party.name, step="consistency")
        if not set(survivors) <= set(self._u2) or len(set(survivors)) != len(survivors):
            raise self._refuse(party, server, "consistency",
                               "the survivors are not clients that shared keys this round")
        if len(survivors) < self._t:
            raise ProtocolError(
                f"secure aggregation round {self.round}: {len(survivors)} survivors, below "
                f"the threshold t={self._t}", party=party.name, step="consistency")
        self._u3 = sorted(survivors)
        self.stage = ClientStage.SIGNED
        return SecAggSignature(sig=party.identity.sign("secagg survivors", _survivors_message(
            self._session, self.round, self._u3)))

    def _unmask(self, party: Party, server: str, step: AggStep) -> SecAggShares:
        assert self._c is not None
        body = step.body
        survivors, dropped, signatures = ((body.survivors, body.dropped, body.signatures)
                                          if isinstance(body, SecAggUnmask)
                                          else (None, None, None))
        if (not isinstance(survivors, list) or not isinstance(dropped, list)
                or not isinstance(signatures, dict) or party.name not in survivors):
            raise ProtocolError("secure aggregation: malformed unmask request",
                                party=party.name, step="unmask")
        if sorted(survivors) != self._u3:
            raise self._refuse(party, server, "unmask",
                               "its survivors are not the set this client signed")
        # the check that protects every client: never reveal both shares of one client
        if set(survivors) & set(dropped) or set(survivors) | set(dropped) != set(self._u2):
            raise self._refuse(party, server, "unmask", "survivors and dropped clients must "
                               "split the round's clients exactly")
        # at least t survivors signed this very set: a server that showed other clients
        # another set cannot collect t signatures on both (t > n/2)
        signers = sorted(signatures)
        if not set(signers) <= set(self._u3) or len(signers) < self._t:
            raise self._refuse(
                party, server, "unmask",
                f"{len(signers)} signatures of survivors on the survivor set, below the "
                f"threshold t={self._t}")
        message = _survivors_message(self._session, self.round, self._u3)
        for v in signers:
            party.identity.verify(v, "secagg survivors", message, signatures[v])
        b_out: dict[str, bytes] = {}
        s_out: dict[str, bytes] = {}
        for v in self._u2:
            plain = self._envelopes[v]
            if v != party.name:
                plain = open_with(self._sealing[v], plain,
                                  aad=_aad(self._session, self.round, v, party.name),
                                  sender=repr(v))
            s_share, b_share = _unpack_pair(plain)
            if v in survivors:
                b_out[v] = b_share
            else:
                s_out[v] = s_share
        self.stage = ClientStage.UNMASKED
        self._envelopes, self._sealing = {}, {}
        return SecAggShares(b=b_out, s=s_out)


def mask_upload(x: NDArray[np.uint64], *, name: str, own: MaskingKey, self_seed: bytes,
                peers: Mapping[str, bytes], context: bytes, self_label: bytes,
                pair_label: bytes) -> None:
    """Add the self mask PRG(b_u) and the pairwise masks ±PRG(s_uv) into ``x`` (mod 2^64).

    The masked input of both secure aggregations (Bonawitz et al. 2017; Bell et al. 2020,
    whose ``peers`` are the neighbours only): in place, a block of each stream at a time,
    so no mask-sized array exists besides ``x``.
    """
    add_expanded(self_seed, x, label=self_label)
    if peers:
        pairwise_mask(name, own, peers, x.size, context=context, label=pair_label, out=x)


def _pack_pair(a: bytes, b: bytes) -> bytes:
    return len(a).to_bytes(4, "big") + a + b


def _unpack_pair(data: bytes) -> tuple[bytes, bytes]:
    k = int.from_bytes(data[:4], "big")
    return data[4:4 + k], data[4 + k:]


# --------------------------------------------------------------------------- server
class SecAggServer(PlainServerHalf):
    """The server's side; one :class:`SecAggRound` per round."""

    def __init__(self, threshold: float | int, frac_bits: int, *,
                 min_clients: int | None = None, max_abs: float = MAX_ABS) -> None:
        self.threshold = threshold
        self.frac_bits = frac_bits
        self.min_clients, self.max_abs = min_clients, max_abs
        self.federation: int | None = None

    def round_threshold(self, link: ServerLink, n: int, *, round: int) -> int:
        """Return the t that honest clients of this configuration accept for ``n`` clients.

        The federation is the server's parties but itself, as each client counts its own.

        Raises
        ------
        ProtocolError
            If the round is smaller than they accept (:func:`round_threshold`).
        """
        self.federation = len(set(link.party.parties) - {link.name})
        try:
            return round_threshold(self.threshold, n, federation=self.federation,
                                   min_clients=self.min_clients)
        except ValidationError as exc:
            raise ProtocolError(
                f"secure aggregation round {round}: {exc}; with cohorts "
                "(FedAvg(fraction=...)) set secure aggregation's min_clients to the "
                "smallest cohort every client accepts", party=link.name,
                step="advertise") from None

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> SecAggRound:
        """Run stages 0, 1 and 1b; the round's participants are U2."""
        t = self.round_threshold(link, len(clients), round=round)
        return SecAggRound(link, round, list(clients), weights, dim, t, self.frac_bits,
                           self.max_abs)

    def reveal(self, payload: Any) -> Vector:
        """Return the mean: the server learns it."""
        return np.asarray(payload)


class ServerStage(enum.Enum):
    """Where the server is in one round."""

    KEYS = "keys"
    COLLECTING = "collecting"
    DONE = "done"


class SecAggRound(StreamingRound):
    """One round on the server: set-up in the constructor, unmasking in :meth:`finish`."""

    def __init__(self, link: ServerLink, rnd: int, clients: list[str],
                 weights: Mapping[str, float], dim: int, t: int, frac_bits: int,
                 max_abs: float) -> None:
        self.link, self.round, self.t, self.frac_bits, self.dim = link, rnd, t, frac_bits, dim
        self.max_abs = max_abs
        self.stage = ServerStage.KEYS
        self.session = secrets.token_bytes(16)
        adverts = link.exchange(rnd, "advertise", {
            c: SecAggAdvertise(session=self.session, threshold=t) for c in clients})
        u1 = [c for c in clients if c in adverts]
        self._require(len(u1), "advertise")
        keys: dict[str, SecAggKeys] = {}
        for c in u1:
            a = adverts[c]
            if not isinstance(a, SecAggKeys) or not all(
                    isinstance(k, bytes) and len(k) == KEY_BYTES for k in (a.c, a.s)
            ) or not isinstance(a.sig, bytes):
                raise ProtocolError(f"client {c!r} advertised malformed keys",
                                    party=link.name, step="advertise")
            keys[c] = a
        self.keys = {c: (a.c, a.s) for c, a in keys.items()}
        envelopes = link.exchange(rnd, "share-keys", {c: SecAggKeyList(keys=keys) for c in u1})
        u2 = [c for c in u1 if c in envelopes]
        self._require(len(u2), "share-keys")
        sealed: dict[str, dict[str, bytes]] = {}
        for c in u2:
            env = envelopes[c]
            if not isinstance(env, SecAggEnvelopes) or set(env.shares) != set(u1) - {c}:
                raise ProtocolError(f"client {c!r} sent shares for the wrong clients",
                                    party=link.name, step="share-keys")
            sealed[c] = env.shares
        link.send(rnd, "deliver", {
            u: SecAggDelivery(u2=u2, shares={v: sealed[v][u] for v in u2 if v != u})
            for u in u2})
        super().__init__(link.name, u2, {c: weights[c] for c in u2})
        self.u1 = sorted(u1)
        self._total = np.zeros(dim, dtype=np.uint64)
        self.stage = ServerStage.COLLECTING

    def _require(self, count: int, stage: str) -> None:
        if count < self.t:
            raise ProtocolError(
                f"secure aggregation round {self.round}: only {count} clients left at stage "
                f"{stage!r}, below the threshold t={self.t}; the round cannot be finished",
                party=self.link.name, step=stage)

    def add(self, client: str, payload: Any) -> None:
        """Add one masked input y_u (mod 2^64)."""
        if self.stage is not ServerStage.COLLECTING:
            raise ProtocolError("secure aggregation: an update after the unmasking",
                                party=self.server, step="update")
        y = np.asarray(payload)
        if y.shape != (self.dim,) or y.dtype != np.uint64:
            raise MalformedUpdateError(
                f"server {self.server!r} got a malformed masked update from {client!r}: "
                f"expected {self.dim} uint64 ring elements, got {y.dtype} {y.shape}",
                party=self.server, client=client)
        self.admit(client)
        self._total += y

    def finish(self, survivors: Sequence[str]) -> Vector:
        """Stages 3 and 4: the consistency check, then shares; decode the weighted mean."""
        weight = self.check_survivors(survivors)
        u3 = [c for c in self.participants if c in survivors]
        self._require(len(u3), "masked input")
        dropped = [c for c in self.participants if c not in survivors]
        signed = self.link.exchange(self.round, "consistency", {
            c: SecAggSurvivors(survivors=u3) for c in u3})
        u4 = [c for c in u3 if isinstance(signed.get(c), SecAggSignature)]
        self._require(len(u4), "consistency")
        signatures = {c: signed[c].sig for c in u4}
        answers = self.link.exchange(self.round, "unmask", {
            c: SecAggUnmask(survivors=u3, dropped=dropped, signatures=signatures)
            for c in u4})
        responders = [c for c in u4 if c in answers]
        self._require(len(responders), "unmask")
        holders = responders[:self.t]
        xs = [self.u1.index(c) + 1 for c in holders]
        coefficients = shamir.lagrange_at_zero(xs)
        for c in holders:
            a = answers[c]
            if (not isinstance(a, SecAggShares) or not isinstance(a.b, dict)
                    or not isinstance(a.s, dict) or set(a.b) != set(u3)
                    or set(a.s) != set(dropped)):
                raise ProtocolError(f"client {c!r} sent a malformed unmask answer",
                                    party=self.server, step="unmask")
        total = self._total
        for u in u3:
            shares = [_share_from(x, answers[c].b[u], repr(c)) for x, c in zip(xs, holders,
                                                                                strict=True)]
            b = shamir.combine(shares, KEY_BYTES, coefficients=coefficients)
            add_expanded(b, total, label=b"secagg self", subtract=True)
        context = _round_context(self.session, self.round)
        for v in dropped:
            shares = [_share_from(x, answers[c].s[v], repr(c)) for x, c in zip(xs, holders,
                                                                                strict=True)]
            raw = shamir.combine(shares, KEY_BYTES, coefficients=coefficients)
            private = X25519PrivateKey.from_private_bytes(raw)
            key = MaskingKey(private=private, public=private.public_key().public_bytes_raw())
            if key.public != self.keys[v][1]:
                raise ProtocolError(
                    f"secure aggregation round {self.round}: the mask key rebuilt for dropped "
                    f"client {v!r} does not match its public key (inconsistent shares)",
                    party=self.server, step="unmask")
            # v's mask restricted to the survivors is exactly minus the survivors' terms
            # for their pairs with v: adding it back removes them
            pairwise_mask(v, key, {u: self.keys[u][1] for u in u3}, self.dim,
                          context=context, label=b"secagg input", out=total)
        self.stage = ServerStage.DONE
        return ring_mean(total, frac_bits=self.frac_bits, weight=weight, uploads=len(u3),
                         max_abs=self.max_abs,
                         headroom=len(self.participants),
                         where=f"secure aggregation round {self.round}",
                         party=self.server, step="unmask")
