r"""SecAgg+: secure aggregation on a sparse random graph (Bell et al., CCS 2020).

The server learns Σ_k p_k·w_k over the survivors and no client's update on its own, as
with :mod:`islands.aggregation.secagg`, but each client agrees masks with and shares its
secrets among its k neighbours of a Harary graph H(n, k) (:mod:`~islands.aggregation.harary`)
instead of all n − 1 others: k = O(log n) (78 for n = 1000 at the defaults), so a
client's work is O(k) and the server's unmasking O(n·k) instead of O(n²). The active-
server form, an explicit state machine on both sides:

=====  ===============  ====================================================================
stage  phase            what happens
=====  ===============  ====================================================================
0      ``advertise``    server → U0: a fresh session id. Each client makes two X25519 key
                        pairs (c: envelopes, s: masks) and a 32-byte nonce r_u, and replies
                        with both public keys and a commitment h_u = SHA-256(session,
                        round, name, r_u). At most ``max_setups`` advertisements per round.
1      ``roster``       server → U1: the roster D (every name, keys and commitment) and the
                        proposed (k, t). Each client checks its own entry, that every name
                        is a client of its federation, that keys are distinct, n = |U1|
                        against its own smallest round, and (k, t) against its own
                        configuration (:func:`client_parameters`): the server may ask for
                        more protection, never less. It replies r_u and its signature on
                        (session, round, n, k, t, H(D)).
2      ``share-keys``   server → U1: every r_v, and the roster signatures of the client's
                        neighbours. Each client checks every r_v opens h_v (all of them: a
                        seed over a subset would let the server choose), draws the graph
                        itself (seed = HKDF over all r_v, Fisher–Yates), verifies its k
                        neighbours' roster signatures (they saw the same D, (k, t)), draws
                        b_u, splits s_u and b_u t-of-(k + 1) and seals one envelope per
                        neighbour (AES-GCM, :mod:`islands.crypto.envelope`), with
                        H(b_u) (:func:`seed_commitment`), against which the server checks
                        the b_u it rebuilds. U2 = who answered.
2b     ``deliver``      server → U2: U2 ∩ N[u] and the envelopes addressed to u. The client
                        checks the set is inside its own neighbourhood and holds ≥ t.
3      masked input     y_u = x_u + PRG(b_u) + Σ_{v∈N(u)∩U2} ±PRG(s_uv) mod 2^64.
4      ``consistency``  server → U3: U3 as a bitmap over the sorted roster. Each client
                        checks it is in U3, its neighbours in U3 shared keys, |U3| ≥ its
                        floor n − ⌊δn⌋ and |N[u] ∩ U3| ≥ t; signs it once per round.
5      ``unmask``       server → U4: the same bitmap and the signatures of u's neighbours
                        on it. The client checks it is the bitmap it signed and that ≥ t of
                        its neighbourhood signed it, and returns the b-shares of N[u] ∩ U3
                        and the s-shares of its dropped neighbours, never both for one
                        client. The server rebuilds each b_u (u ∈ U3) and each dropped s_v
                        from t holders in their neighbourhoods, removes the self masks and
                        the dropped clients' pairwise masks with their surviving
                        neighbours, and decodes the sum.
=====  ===============  ====================================================================

A client lost at stage 0 or 1 is not in the round: a missing reveal restarts the set-up
without it under a fresh session (at most ``max_setups`` set-ups per round; each one is
a new draw, so the failure probabilities below multiply by ``max_setups``). A
neighbourhood left with fewer than t holders makes the round fail with a
:class:`~islands.errors.ProtocolError` naming that client, its count and t; no mean is
released.

Parameters, held by each client (:func:`client_parameters`). A client counts colluders
against its own reference m (its federation's clients, or ``min_clients``), never the
round: C = ⌊γ·m⌋ for ``corrupt_fraction`` γ, and up to D = ⌊δ·n⌋ dropouts for
``dropout`` δ. It accepts (k, t) only if :func:`~islands.aggregation.harary.check_parameters`
(n, C, D, k, t) holds at its own σ: the honest survivors stay connected and 2t > k + 1 +
X_u for every client's corrupt neighbours X_u, except with probability 2^-σ over the
draw, which nobody chooses. A server that shrinks the round raises (k, t) (m = 1000,
γ = .05, δ = .1: n = 1000 → (78, 52); n = 500 → (82, 57)). When no sparse k fits (small
federations), the same code runs the complete graph (k = n − 1), whose rule is the full
protocol's t > (n + C)/2; when not even that fits, the server says so and names
``protect = ["secagg"]``'s threshold rule as the alternative.

What it does not hide: the server learns the sum of a connected set of honest survivors;
by declaring chosen clients dropped (at most ⌊δn⌋ in all) it can cut the ring into arcs,
each of which it unmasks only if all its clients keep t holders, so it learns sums over
arcs of at least t − C honest clients, not over all (1 − δ)n (``docs/threat-model.md``).

Cost per client: 2k X25519 agreements, k envelopes, k + t Ed25519 verifications, k + 1
PRG streams of the model's length, n SHA-256 (the reveals) and one Fisher–Yates draw of
n; per server: |U3| self-mask streams plus Σ_{v dropped} |N(v) ∩ U3| pairwise streams,
spread over a thread pool (ChaCha20 releases the GIL), and one batched interpolation
(:func:`islands.crypto.shamir.combine_arrays`).

References
----------
.. [1] J. H. Bell, K. A. Bonawitz, A. Gascón, T. Lepoint, M. Raykova. "Secure
   Single-Server Aggregation with (Poly)Logarithmic Overhead." ACM CCS 2020.
.. [2] K. Bonawitz et al. "Practical Secure Aggregation for Privacy-Preserving Machine
   Learning." ACM CCS 2017.
"""

from __future__ import annotations

import enum
import hashlib
import math
import secrets
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from numpy.typing import NDArray

from islands.aggregation import harary
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
from islands.aggregation.config import MAX_ABS, SecAggPlusConfig
from islands.aggregation.secagg import (
    KEY_BYTES,
    _aad,
    _pack_pair,
    _share_bytes,
    _unpack_pair,
    mask_upload,
)
from islands.cores import usable_cores
from islands.crypto import shamir
from islands.crypto.envelope import envelope_key, open_with, pair_context, seal_with
from islands.crypto.masking import MaskingKey, generate_key, pairwise_mask
from islands.crypto.prg import add_expanded
from islands.errors import ProtocolError, ValidationError, invalid_parameter
from islands.runtime import Party, wire
from islands.validation import is_int

__all__ = [
    "ClientStage",
    "SecAggPlusAdvertise",
    "SecAggPlusDelivery",
    "SecAggPlusEnvelopes",
    "SecAggPlusKeys",
    "SecAggPlusReveal",
    "SecAggPlusReveals",
    "SecAggPlusRoster",
    "SecAggPlusShares",
    "SecAggPlusSignature",
    "SecAggPlusSurvivors",
    "SecAggPlusUnmask",
    "SecureAggregationPlus",
    "client_parameters",
    "dp_guaranteed",
    "seed_commitment",
]

Vector = NDArray[np.float32]
ENTRY_BYTES = 3 * KEY_BYTES  # c ‖ s ‖ commitment
_CONTEXT = b"islands secagg+ v1"
_ENVELOPE = b"islands secagg+ shares v1"
_ROSTER = b"islands secagg+ roster v1"
_SELF = b"secagg+ self"
_SEED_COMMIT = b"islands secagg+ self-mask seed v1"
_INPUT = b"secagg+ input"
ROSTER_PURPOSE = "secagg+ roster"
SURVIVORS_PURPOSE = "secagg+ survivors"


# --------------------------------------------------------------------------- messages
@wire.register(name="hfl.SecAggPlusAdvertise")
@dataclass(frozen=True)
class SecAggPlusAdvertise:
    """Stage 0, server → client: the set-up's session id."""

    session: bytes


@wire.register(name="hfl.SecAggPlusKeys")
@dataclass(frozen=True)
class SecAggPlusKeys:
    """Stage 0, client → server: two public keys and the commitment to a nonce."""

    c: bytes
    s: bytes
    commit: bytes


@wire.register(name="hfl.SecAggPlusRoster")
@dataclass(frozen=True)
class SecAggPlusRoster:
    """Stage 1, server → client: sorted names, their c ‖ s ‖ commitment, and (k, t)."""

    names: list[str]
    entries: bytes
    neighbours: int
    threshold: int


@wire.register(name="hfl.SecAggPlusReveal")
@dataclass(frozen=True)
class SecAggPlusReveal:
    """Stage 1, client → server: the nonce and the signature on the roster."""

    nonce: bytes
    sig: bytes


@wire.register(name="hfl.SecAggPlusReveals")
@dataclass(frozen=True)
class SecAggPlusReveals:
    """Stage 2, server → client: every nonce (roster order), neighbours' roster signatures."""

    nonces: bytes
    signatures: dict[str, bytes]


@wire.register(name="hfl.SecAggPlusEnvelopes")
@dataclass(frozen=True)
class SecAggPlusEnvelopes:
    """Stage 2, client → server: one sealed pair of shares per neighbour, and H(b_u).

    ``seed_hash`` commits the client to its self-mask seed b_u (:func:`seed_commitment`):
    the server checks the b_u it rebuilds against it, so a wrong share (from a colluding
    holder, or dealt by a colluding owner) fails the round by name instead of leaving a
    uniformly wrong sum that the range checks may not see.
    """

    shares: dict[str, bytes]
    seed_hash: bytes


@wire.register(name="hfl.SecAggPlusDelivery")
@dataclass(frozen=True)
class SecAggPlusDelivery:
    """Stage 2b, server → client: U2 ∩ N[u] and the envelopes addressed to u."""

    shared: list[str]
    shares: dict[str, bytes]


@wire.register(name="hfl.SecAggPlusSurvivors")
@dataclass(frozen=True)
class SecAggPlusSurvivors:
    """Stage 4, server → client: U3 as a bitmap over the sorted roster."""

    bitmap: bytes


@wire.register(name="hfl.SecAggPlusSignature")
@dataclass(frozen=True)
class SecAggPlusSignature:
    """Stage 4, client → server: the signature on U3."""

    sig: bytes


@wire.register(name="hfl.SecAggPlusUnmask")
@dataclass(frozen=True)
class SecAggPlusUnmask:
    """Stage 5, server → client: the bitmap and the neighbours' signatures on it."""

    bitmap: bytes
    signatures: dict[str, bytes]


@wire.register(name="hfl.SecAggPlusShares")
@dataclass(frozen=True)
class SecAggPlusShares:
    """Stage 5, client → server: b-shares of surviving, s-shares of dropped neighbours."""

    b: dict[str, bytes]
    s: dict[str, bytes]


# --------------------------------------------------------------------------- helpers
def _colluders(fraction: float, m: int) -> int:
    return math.floor(fraction * m + 1e-9)


def _dropouts(fraction: float, n: int) -> int:
    return math.floor(fraction * n + 1e-9)


def round_floor(dropout: float, n: int) -> int:
    """Return the survivors a client requires of a round of n: n − ⌊δn⌋."""
    return n - _dropouts(dropout, n)


def smallest_round(dropout: float, m: int, min_clients: int | None) -> int:
    """Return the smallest round a client joins: ``min_clients``, else m − ⌊δm⌋."""
    return min_clients if min_clients is not None else round_floor(dropout, m)


def dp_guaranteed(config: SecAggPlusConfig, *, n: int, m: int, k: int, t: int) -> int:
    """Return the fewest survivors of any sum the server can unmask in a round of n at (k, t).

    H(n, k) is k-connected, so fewer than k colluders and dropouts together (C = ⌊γm⌋,
    D = ⌊δn⌋) cannot cut it: the server unmasks only the sum of all survivors, at least
    the round's floor n − D. With C + D ≥ k it can declare runs of k/2 clients dropped
    (colluders count too: their masks are known) and unmask an arc on its own; each
    client of an arc keeps t survivors around it, so an arc holds at least t (played in
    ``tests/test_hfl_attacks_secaggplus.py``). Distributed DP noise is calibrated for this
    number, never for the floor alone. t is a lower bound: most draws allow no arc that
    small, so the noise is conservative there.
    """
    corrupt, drops = _colluders(config.corrupt_fraction, m), _dropouts(config.dropout, n)
    floor = n - drops
    if k < n - 1 and corrupt + drops >= k:
        return min(t, floor)
    return floor


def client_parameters(config: SecAggPlusConfig, n: int, m: int
                      ) -> harary.GraphParameters | None:
    """Return the (k, t) a party of ``config`` proposes for n clients (reference m), or None.

    The overrides ``neighbours`` (and ``threshold``) if set, else the sparsest graph of
    :func:`~islands.aggregation.harary.find_parameters` for C = ⌊γm⌋ colluders and
    ⌊δn⌋ dropouts. None when no graph protects the round.
    """
    corrupt = _colluders(config.corrupt_fraction, m)
    if corrupt >= n:
        return None
    drops = _dropouts(config.dropout, n)
    if config.neighbours is not None:
        k = min(config.neighbours, n - 1)
        t = harary.least_threshold(n, corrupt, k, sigma=config.sigma)
        if config.threshold is not None:
            t = max(t, config.threshold)
        return harary.GraphParameters(k, t, complete=k >= n - 1)
    return harary.find_parameters(n, corrupt, drops, sigma=config.sigma, eta=config.eta)


def _roster_digest(session: bytes, rnd: int, names: Sequence[str], entries: bytes,
                   k: int, t: int) -> bytes:
    h = hashlib.sha256(_ROSTER)
    for part in (session, rnd.to_bytes(8, "big"), len(names).to_bytes(4, "big"),
                 k.to_bytes(4, "big"), t.to_bytes(4, "big"),
                 b"\x00".join(n.encode("utf-8") for n in names), entries):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def seed_commitment(session: bytes, rnd: int, name: str, seed: bytes) -> bytes:
    """Return SHA-256 over (domain, session, round, name, b_u): a client's self-mask commitment.

    b_u is 32 uniform bytes, so its hash shows nothing of it (nor of the mask it expands to).
    """
    h = hashlib.sha256()
    for part in (_SEED_COMMIT, session, rnd.to_bytes(8, "big"), name.encode("utf-8"), seed):
        h.update(len(part).to_bytes(4, "big"))
        h.update(part)
    return h.digest()


def _round_context(session: bytes, rnd: int) -> bytes:
    return _CONTEXT + session + rnd.to_bytes(8, "big")


def bitmap(members: Sequence[int], n: int) -> bytes:
    """Return the bitmap of ``members`` (indices into the sorted roster of n)."""
    out = bytearray((n + 7) // 8)
    for i in members:
        out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def members(data: Any, n: int) -> list[int] | None:
    """Return the indices a bitmap of n holds, or None if it is not a canonical one."""
    if not isinstance(data, bytes) or len(data) != (n + 7) // 8:
        return None
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    if bits[n:].any():
        return None
    index: list[int] = np.flatnonzero(bits[:n]).tolist()
    return index


@dataclass(frozen=True)
class _Graph:
    """A round's drawn graph: each name's position and closed neighbourhood."""

    names: list[str]
    k: int
    position: dict[str, int]
    order: list[str]  # order[position] = name

    def closed(self, name: str) -> list[str]:
        n = len(self.names)
        return [self.order[p] for p in harary.neighbourhood(self.position[name], n, self.k)]

    def point(self, owner: str, holder: str) -> int:
        return harary.share_point(self.position[owner], self.position[holder],
                                  len(self.names), self.k)


def _draw(session: bytes, rnd: int, digest: bytes, names: list[str], nonces: list[bytes],
          k: int) -> _Graph:
    seed = harary.graph_seed(session, rnd, digest, nonces)
    perm = harary.permutation(seed, len(names))
    order = [names[i] for i in perm]
    return _Graph(names, k, {v: p for p, v in enumerate(order)}, order)


def _survivors_message(session: bytes, rnd: int, digest: bytes, bits: bytes) -> bytes:
    return session + rnd.to_bytes(8, "big") + digest + bits


def _share_from_bytes(data: Any, who: str) -> NDArray[np.uint32]:
    if not isinstance(data, bytes) or len(data) != 4 * shamir.chunk_count(KEY_BYTES):
        raise ProtocolError(f"secure aggregation+: a malformed share from {who}")
    values = np.frombuffer(data, dtype="<u4").astype(np.uint32)
    if int(values.max()) >= shamir.PRIME:  # else combine_arrays refuses without a name
        raise ProtocolError(f"secure aggregation+: a malformed share from {who}: values not "
                            f"below the field prime {shamir.PRIME}")
    return values


# --------------------------------------------------------------------------- aggregator
class SecureAggregationPlus:
    """SecAgg+ (Bell et al. 2020): secure aggregation over a sparse random graph.

    Parameters
    ----------
    corrupt_fraction : float, default=0.05
        γ: the colluding clients a client protects against, as a fraction of its
        reference m (the federation's clients, or ``min_clients``): C = ⌊γm⌋.
    dropout : float, default=0.10
        δ: the dropouts a round may have, as a fraction of its n clients; a client
        refuses to unmask a round with fewer than n − ⌊δn⌋ survivors.
    sigma : float, default=40
        Privacy fails with probability at most 2^-σ over the graph draw.
    eta : float, default=20
        A round fails for lack of holders with probability at most 2^-η.
    min_clients : int, optional
        The smallest round a client joins and its reference m; unset, m is its
        federation and the smallest round m − ⌊δm⌋. Set it with cohorts.
    max_abs, frac_bits
        As :class:`~islands.aggregation.secagg.SecureAggregation`.
    neighbours, threshold : int, optional
        Override the (k, t) the server proposes (more protection or a fixed graph);
        every client still checks them against its own rule.
    max_setups : int, default=2
        Set-ups (advertisements) a client accepts in one round: a missing reveal
        restarts the set-up once by default.

    Notes
    -----
    Composes like ``"secagg"`` (any strategy, chaos, client-level DP; distributed DP is
    calibrated for :func:`dp_guaranteed`: the round's floor n − ⌊δn⌋ when C + D < k,
    else t, the smallest arc a server that declares dropouts can unmask). See the module
    docstring and ``docs/threat-model.md``.
    """

    name = "secaggplus"

    def __init__(self, corrupt_fraction: float = 0.05, dropout: float = 0.10,
                 sigma: float = 40.0, eta: float = 20.0, min_clients: int | None = None,
                 max_abs: float = MAX_ABS, frac_bits: int = 32,
                 neighbours: int | None = None, threshold: int | None = None,
                 max_setups: int = 2) -> None:
        self.config = SecAggPlusConfig.build(
            None, corrupt_fraction=corrupt_fraction, dropout=dropout, sigma=sigma, eta=eta,
            min_clients=min_clients, max_abs=max_abs, frac_bits=frac_bits,
            neighbours=neighbours, threshold=threshold, max_setups=max_setups)
        cfg = self.config
        self.min_clients, self.max_abs, self.frac_bits = (cfg.min_clients, cfg.max_abs,
                                                          cfg.frac_bits)
        if cfg.min_clients is not None:
            self._check_reference(cfg.min_clients)

    def _check_reference(self, m: int) -> None:
        cfg = self.config
        params = client_parameters(cfg, m, m)
        if params is None:
            raise invalid_parameter(
                "corrupt_fraction", "SecureAggregationPlus",
                f"a fraction whose colluders and dropouts a round of min_clients={m} can "
                f"protect against (dropout={cfg.dropout})", cfg.corrupt_fraction)
        reason = harary.check_parameters(
            m, _colluders(cfg.corrupt_fraction, m), _dropouts(cfg.dropout, m),
            params.neighbours, params.threshold, sigma=cfg.sigma)
        if reason is not None:
            raise invalid_parameter("neighbours", "SecureAggregationPlus",
                                    f"(k, t) that protect a round of min_clients={m}",
                                    f"{reason}")

    def client_half(self) -> SecAggPlusClient:
        """Make a client's state machine."""
        return SecAggPlusClient(self.config)

    def server_half(self) -> SecAggPlusServer:
        """Make the server's state machine."""
        return SecAggPlusServer(self.config)

    def __repr__(self) -> str:
        cfg = self.config
        return (f"SecureAggregationPlus(corrupt_fraction={cfg.corrupt_fraction!r}, "
                f"dropout={cfg.dropout!r})")


# --------------------------------------------------------------------------- client
class ClientStage(enum.Enum):
    """Where a client is in one round."""

    IDLE = "idle"
    ADVERTISED = "advertised"
    ROSTERED = "rostered"
    SHARED = "shared"
    DELIVERED = "delivered"
    MASKED = "masked"
    SIGNED = "signed"
    UNMASKED = "unmasked"


_BEFORE_UPLOAD = (ClientStage.ADVERTISED, ClientStage.ROSTERED, ClientStage.SHARED,
                  ClientStage.DELIVERED)


class SecAggPlusClient:
    """One client's side: it holds its own γ, δ, σ and min_clients and checks the server's.

    Everything the server sends is checked before anything secret leaves: the roster
    against the federation, (k, t) against :func:`client_parameters`' rule, the graph
    drawn by the client itself, the neighbours' signatures, the survivor set.
    """

    def __init__(self, config: SecAggPlusConfig) -> None:
        self.config = config
        self.stage = ClientStage.IDLE
        self.round = 0
        self.setups = 0
        self._reset()

    def _reset(self) -> None:
        self._c: MaskingKey | None = None
        self._s: MaskingKey | None = None
        self._b: bytes | None = None
        self._nonce = b""
        self._commit = b""
        self._session = b""
        self._k = self._t = self._n = self._floor = self._guaranteed = 0
        self._names: list[str] = []
        self._keys: dict[str, tuple[bytes, bytes]] = {}
        self._commits: dict[str, bytes] = {}
        self._digest = b""
        self._graph: _Graph | None = None
        self._closed: list[str] = []
        self._shared: list[str] = []
        self._envelopes: dict[str, bytes] = {}
        self._sealing: dict[str, bytes] = {}  # envelope keys: secret, dropped after stage 4
        self._signed = b""

    @property
    def round_floor(self) -> int:
        """The survivors this client requires of :attr:`round` (0 before its roster)."""
        return self._floor

    @property
    def round_guaranteed(self) -> int:
        """The fewest survivors of a sum the server can unmask this round (0 before its roster).

        :func:`dp_guaranteed`: the floor when colluders and dropouts cannot cut the graph,
        else t. Distributed DP calibrates its noise share for this.
        """
        return self._guaranteed

    @property
    def round_threshold(self) -> int:
        """The t this client accepted for :attr:`round` (0 before its roster)."""
        return self._t

    def _expect(self, party: Party, step: AggStep, *stages: ClientStage) -> None:
        if step.round != self.round or self.stage not in stages:
            raise ProtocolError(
                f"secure aggregation+: client {party.name!r} got {step.phase!r} of round "
                f"{step.round} while at stage {self.stage.value!r} of round {self.round}",
                party=party.name, step=step.phase)

    def _refuse(self, party: Party, server: str, step: str, what: str) -> ProtocolError:
        return ProtocolError(
            f"secure aggregation+ round {self.round}: client {party.name!r} refuses "
            f"{server!r}'s {step!r} message: {what}", party=party.name, step=step)

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        """Run one stage of the client's state machine; return the reply."""
        if step.phase == "advertise":
            return self._advertise(party, server, step)
        if step.phase == "roster":
            self._expect(party, step, ClientStage.ADVERTISED)
            return self._roster(party, server, step)
        if step.phase == "share-keys":
            self._expect(party, step, ClientStage.ROSTERED)
            return self._share_keys(party, server, step)
        if step.phase == "deliver":
            self._expect(party, step, ClientStage.SHARED)
            return self._deliver(party, server, step)
        if step.phase == "consistency":
            self._expect(party, step, ClientStage.MASKED)
            return self._consistency(party, server, step)
        if step.phase == "unmask":
            self._expect(party, step, ClientStage.SIGNED)
            return self._unmask(party, server, step)
        raise unexpected_step(party, step, "secure+")

    # ------------------------------------------------------------------ stage 0
    def _advertise(self, party: Party, server: str, step: AggStep) -> SecAggPlusKeys:
        body = step.body
        if step.round < self.round:
            raise self._refuse(party, server, "advertise",
                               f"round {step.round} is older than round {self.round}")
        if step.round == self.round and self.stage is not ClientStage.IDLE:
            if self.stage not in _BEFORE_UPLOAD:
                raise self._refuse(party, server, "advertise",
                                   "a new set-up of a round this client already uploaded in")
            if self.setups >= self.config.max_setups:
                raise self._refuse(
                    party, server, "advertise",
                    f"set-up {self.setups + 1} of one round; parameter 'max_setups' is "
                    f"{self.config.max_setups}")
        else:
            self.setups = 0
        if (not isinstance(body, SecAggPlusAdvertise) or not isinstance(body.session, bytes)
                or len(body.session) != 16):
            raise ProtocolError("secure aggregation+: malformed advertise request",
                                party=party.name, step="advertise")
        self._reset()
        self.round, self._session = step.round, body.session
        self.setups += 1
        self._c, self._s = generate_key(), generate_key()
        self._nonce = secrets.token_bytes(harary.NONCE_BYTES)
        self._commit = harary.commitment(self._session, self.round, party.name, self._nonce)
        self.stage = ClientStage.ADVERTISED
        return SecAggPlusKeys(c=self._c.public, s=self._s.public, commit=self._commit)

    # ------------------------------------------------------------------ stage 1
    def _reference(self, party: Party, server: str) -> tuple[int, str]:
        federation = len(set(party.parties) - {server})
        if self.config.min_clients is not None:
            return self.config.min_clients, f"min_clients={self.config.min_clients}"
        return federation, f"its federation of {federation} clients"

    def _roster(self, party: Party, server: str, step: AggStep) -> SecAggPlusReveal:
        assert self._c is not None and self._s is not None
        body = step.body
        if (not isinstance(body, SecAggPlusRoster) or not isinstance(body.names, list)
                or not all(isinstance(v, str) for v in body.names)
                or not isinstance(body.entries, bytes) or not is_int(body.neighbours)
                or not is_int(body.threshold)
                or len(body.entries) != ENTRY_BYTES * len(body.names)):
            raise ProtocolError("secure aggregation+: malformed roster", party=party.name,
                                step="roster")
        names = list(body.names)
        if names != sorted(set(names)):
            raise self._refuse(party, server, "roster", "its names are not sorted and distinct")
        strangers = sorted(set(names) - (set(party.parties) - {server}))
        if strangers:
            raise self._refuse(party, server, "roster",
                               f"{strangers} are not clients of this federation")
        if party.name not in names:
            raise self._refuse(party, server, "roster", "this client is not in it")
        entries = body.entries
        i = names.index(party.name)
        own = entries[ENTRY_BYTES * i:ENTRY_BYTES * (i + 1)]
        if own != self._c.public + self._s.public + self._commit:
            raise self._refuse(party, server, "roster",
                               f"it gives client {party.name!r} keys or a commitment that "
                               "are not its own")
        keys = [entries[j:j + KEY_BYTES] for j in range(0, len(entries), KEY_BYTES)]
        flat = [key for j, key in enumerate(keys) if j % 3 != 2]
        if len(set(flat)) != len(flat):
            raise self._refuse(party, server, "roster", "two clients present the same key")
        n, k, t = len(names), int(body.neighbours), int(body.threshold)
        if not 0 <= k <= n - 1 or not 0 <= t <= n:
            # the complete graph is k = n − 1; anything wider is no graph of this roster
            # (and would not fit the roster digest's 4-byte fields)
            raise self._refuse(party, server, "roster",
                               f"parameters 'neighbours'/'threshold' (k={k}, t={t}): k={k} "
                               f"neighbours in a round of {n} clients; at most {n - 1} (the "
                               f"complete graph), and 0 <= t <= {n}")
        cfg = self.config
        m, reference = self._reference(party, server)
        smallest = smallest_round(cfg.dropout, m, cfg.min_clients)
        if n < smallest:
            why = (f"parameter 'min_clients'={cfg.min_clients}" if cfg.min_clients is not None
                   else f"{reference} less its dropout={cfg.dropout}, parameter "
                   "'min_clients' unset")
            raise self._refuse(party, server, "roster",
                               f"a round of {n} clients, fewer than the {smallest} accepted "
                               f"({why})")
        corrupt, drops = _colluders(cfg.corrupt_fraction, m), _dropouts(cfg.dropout, n)
        reason = (f"{corrupt} colluders of {n} clients" if corrupt >= n else
                  harary.check_parameters(n, corrupt, drops, k, t, sigma=cfg.sigma))
        if reason is not None:
            own_pick = client_parameters(cfg, n, m)
            accepts = ("no graph" if own_pick is None else
                       f"k >= {own_pick.neighbours} with its t >= {own_pick.threshold}")
            raise self._refuse(
                party, server, "roster",
                f"parameters 'neighbours'/'threshold' (k={k}, t={t}) do not protect a round "
                f"of {n} clients against {corrupt} colluders (corrupt_fraction="
                f"{cfg.corrupt_fraction} of {reference}) and {drops} dropouts "
                f"(dropout={cfg.dropout}): {reason}; this client accepts {accepts}")
        self._names, self._n = names, n
        self._k, self._t = k, t
        self._floor = round_floor(cfg.dropout, n)
        self._guaranteed = dp_guaranteed(cfg, n=n, m=m, k=k, t=t)
        self._keys = {v: (keys[3 * j], keys[3 * j + 1]) for j, v in enumerate(names)}
        self._commits = {v: keys[3 * j + 2] for j, v in enumerate(names)}
        self._digest = _roster_digest(self._session, self.round, names, entries, k, t)
        self.stage = ClientStage.ROSTERED
        return SecAggPlusReveal(nonce=self._nonce,
                                sig=party.identity.sign(ROSTER_PURPOSE, self._digest))

    # ------------------------------------------------------------------ stage 2
    def _share_keys(self, party: Party, server: str, step: AggStep) -> SecAggPlusEnvelopes:
        assert self._c is not None and self._s is not None
        body = step.body
        if (not isinstance(body, SecAggPlusReveals) or not isinstance(body.nonces, bytes)
                or not isinstance(body.signatures, dict)):
            raise ProtocolError("secure aggregation+: malformed reveals", party=party.name,
                                step="share-keys")
        size = harary.NONCE_BYTES
        if len(body.nonces) != size * self._n:
            raise self._refuse(party, server, "share-keys",
                               f"{len(body.nonces) // size} nonces for a roster of "
                               f"{self._n}: the graph needs every client's")
        nonces = [body.nonces[size * j:size * (j + 1)] for j in range(self._n)]
        opened = harary.commitments(self._session, self.round, self._names, nonces)
        for v, c in zip(self._names, opened, strict=True):
            if c != self._commits[v]:
                raise self._refuse(party, server, "share-keys",
                                   f"the nonce of {v!r} does not open its commitment")
        graph = _draw(self._session, self.round, self._digest, self._names, nonces, self._k)
        closed = graph.closed(party.name)
        peers = [v for v in closed if v != party.name]
        if set(body.signatures) != set(peers):
            raise self._refuse(
                party, server, "share-keys",
                f"roster signatures of {sorted(body.signatures)}, not of this client's "
                f"{len(peers)} neighbours in the drawn graph")
        for v in peers:
            party.identity.verify(v, ROSTER_PURPOSE, self._digest, body.signatures[v])
        self._graph, self._closed = graph, closed
        self._b = secrets.token_bytes(KEY_BYTES)
        s_shares = shamir.split(self._s.private.private_bytes_raw(), len(closed), self._t)
        b_shares = shamir.split(self._b, len(closed), self._t)
        out: dict[str, bytes] = {}
        for v in closed:
            x = graph.point(party.name, v)
            plain = _pack_pair(_share_bytes(s_shares[x - 1]), _share_bytes(b_shares[x - 1]))
            if v == party.name:
                self._envelopes[v] = plain
                continue
            # kept for stage 4: v's envelope to this client opens under the same key
            key = self._sealing[v] = envelope_key(
                self._c, self._keys[v][0],
                context=pair_context(_ENVELOPE, self._session, party.name, v))
            out[v] = seal_with(key, plain, aad=_aad(self._session, self.round, party.name, v))
        self.stage = ClientStage.SHARED
        return SecAggPlusEnvelopes(shares=out, seed_hash=seed_commitment(
            self._session, self.round, party.name, self._b))

    def _deliver(self, party: Party, server: str, step: AggStep) -> None:
        body = step.body
        if (not isinstance(body, SecAggPlusDelivery) or not isinstance(body.shared, list)
                or not isinstance(body.shares, dict)):
            raise ProtocolError("secure aggregation+: malformed share delivery",
                                party=party.name, step="deliver")
        shared = list(body.shared)
        if (party.name not in shared or len(set(shared)) != len(shared)
                or not set(shared) <= set(self._closed)):
            raise self._refuse(party, server, "deliver",
                               "its clients that shared keys are not inside this client's "
                               "neighbourhood (or leave it out)")
        if set(body.shares) != set(shared) - {party.name} or not all(
                isinstance(e, bytes) for e in body.shares.values()):
            raise self._refuse(party, server, "deliver",
                               "envelopes from other clients than those it lists")
        if len(shared) < self._t:
            raise self._refuse(
                party, server, "deliver",
                f"{len(shared)} of this client's neighbourhood shared keys, below the "
                f"threshold t={self._t}")
        self._shared = [v for v in self._closed if v in set(shared)]
        self._envelopes.update(body.shares)
        self.stage = ClientStage.DELIVERED
        return None

    # ------------------------------------------------------------------ stage 3
    def open(self, payload: Any) -> Vector:
        """Return the mean the server sent (it is plain: nothing to open)."""
        return np.asarray(payload)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> NDArray[np.uint64]:
        """Mask the fixed-point encoding of p·w (stage 3)."""
        if round != self.round or self.stage is not ClientStage.DELIVERED:
            raise ProtocolError(
                f"secure aggregation+: client {party.name!r} has no keys for round {round} "
                f"(stage {self.stage.value!r} of round {self.round})", party=party.name,
                step="update")
        assert self._s is not None and self._b is not None
        x = ring_encode(params, weight, frac_bits=self.config.frac_bits, headroom=self._n,
                        max_abs=self.config.max_abs,
                        who=f"secure aggregation+: client {party.name!r}")
        mask_upload(x, name=party.name, own=self._s, self_seed=self._b,
                    peers={v: self._keys[v][1] for v in self._shared if v != party.name},
                    context=_round_context(self._session, self.round),
                    self_label=_SELF, pair_label=_INPUT)
        self.stage = ClientStage.MASKED
        return x

    # ------------------------------------------------------------------ stage 4
    def _survivors(self, party: Party, server: str, step: str, bits: Any) -> set[str]:
        index = members(bits, self._n)
        if index is None:
            raise ProtocolError(f"secure aggregation+: malformed survivor bitmap at {step!r}",
                                party=party.name, step=step)
        return {self._names[i] for i in index}

    def _consistency(self, party: Party, server: str, step: AggStep) -> SecAggPlusSignature:
        body = step.body
        if not isinstance(body, SecAggPlusSurvivors):
            raise ProtocolError("secure aggregation+: malformed consistency request",
                                party=party.name, step="consistency")
        u3 = self._survivors(party, server, "consistency", body.bitmap)
        near = u3 & set(self._closed)
        if party.name not in u3:
            raise self._refuse(party, server, "consistency", "this client is not a survivor")
        if not near <= set(self._shared):
            raise self._refuse(party, server, "consistency",
                               f"survivors {sorted(near - set(self._shared))} of its "
                               "neighbourhood did not share keys this round")
        if len(u3) < self._floor:
            raise self._refuse(
                party, server, "consistency",
                f"{len(u3)} survivors of {self._n}, below this client's floor "
                f"{self._floor} (dropout={self.config.dropout})")
        if len(near) < self._t:
            raise self._refuse(party, server, "consistency",
                               f"{len(near)} survivors in this client's neighbourhood, below "
                               f"the threshold t={self._t}")
        self._signed = body.bitmap
        self.stage = ClientStage.SIGNED
        return SecAggPlusSignature(sig=party.identity.sign(SURVIVORS_PURPOSE, _survivors_message(
            self._session, self.round, self._digest, body.bitmap)))

    # ------------------------------------------------------------------ stage 5
    def _unmask(self, party: Party, server: str, step: AggStep) -> SecAggPlusShares:
        assert self._c is not None
        body = step.body
        if not isinstance(body, SecAggPlusUnmask) or not isinstance(body.signatures, dict):
            raise ProtocolError("secure aggregation+: malformed unmask request",
                                party=party.name, step="unmask")
        if body.bitmap != self._signed:
            raise self._refuse(party, server, "unmask",
                               "its survivors are not the set this client signed")
        u3 = self._survivors(party, server, "unmask", body.bitmap)
        near = u3 & set(self._closed)
        signers = sorted(body.signatures)
        if not set(signers) <= near or len(signers) < self._t:
            raise self._refuse(
                party, server, "unmask",
                f"{len(set(signers) & near)} signatures of survivors of its neighbourhood "
                f"on the survivor set, below the threshold t={self._t}")
        message = _survivors_message(self._session, self.round, self._digest, self._signed)
        for v in signers:
            party.identity.verify(v, SURVIVORS_PURPOSE, message, body.signatures[v])
        b_out: dict[str, bytes] = {}
        s_out: dict[str, bytes] = {}
        for v in self._shared:  # one kind of share per client: v survived or it did not
            plain = self._envelopes[v]
            if v != party.name:
                plain = open_with(self._sealing[v], plain,
                                  aad=_aad(self._session, self.round, v, party.name),
                                  sender=repr(v))
            s_share, b_share = _unpack_pair(plain)
            if v in u3:
                b_out[v] = b_share
            else:
                s_out[v] = s_share
        self.stage = ClientStage.UNMASKED
        self._envelopes, self._sealing = {}, {}
        return SecAggPlusShares(b=b_out, s=s_out)


# --------------------------------------------------------------------------- server
class SecAggPlusServer(PlainServerHalf):
    """The server's side; one :class:`SecAggPlusRound` per round."""

    def __init__(self, config: SecAggPlusConfig) -> None:
        self.config = config
        self.federation: int | None = None
        self.floor = 0  # the survivors the last round's clients require
        self.guaranteed = 0  # the fewest survivors of a sum it can unmask (dp_guaranteed)

    def reference(self, link: ServerLink) -> int:
        """Return m, as every client counts it (min_clients, else the federation)."""
        self.federation = len(set(link.party.parties) - {link.name})
        return (self.config.min_clients if self.config.min_clients is not None
                else self.federation)

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> SecAggPlusRound:
        """Run stages 0 to 2b (restarting a set-up that lost a reveal); U2 takes part."""
        agg = SecAggPlusRound(link, self, round, list(clients), weights, dim,
                              self.reference(link))
        self.floor = agg.floor
        self.guaranteed = dp_guaranteed(self.config, n=len(agg.names), m=agg.m, k=agg.k,
                                        t=agg.t)
        return agg

    def reveal(self, payload: Any) -> Vector:
        """Return the mean: the server learns it."""
        return np.asarray(payload)


class SecAggPlusRound(StreamingRound):
    """One round on the server: set-up in the constructor, unmasking in :meth:`finish`."""

    def __init__(self, link: ServerLink, half: SecAggPlusServer, rnd: int,
                 clients: list[str], weights: Mapping[str, float], dim: int, m: int) -> None:
        self.link, self.round, self.dim, self.config = link, rnd, dim, half.config
        self.m = m
        cfg = self.config
        self.smallest = smallest_round(cfg.dropout, m, cfg.min_clients)
        candidates = sorted(clients)
        for attempt in range(1, cfg.max_setups + 1):
            missing = self._setup(candidates, m)
            if not missing:
                break
            candidates = [c for c in candidates if c not in missing]
            if attempt == cfg.max_setups:
                raise ProtocolError(
                    f"secure aggregation+ round {rnd}: {sorted(missing)} revealed no nonce "
                    f"in set-up {attempt}, and clients accept at most max_setups="
                    f"{cfg.max_setups} set-ups per round", party=link.name, step="roster")
        u2 = self._share(link)
        super().__init__(link.name, u2, {c: weights[c] for c in u2})
        self._total = np.zeros(dim, dtype=np.uint64)
        self.done = False

    # ------------------------------------------------------------------ set-up
    def _fail(self, stage: str, what: str) -> ProtocolError:
        return ProtocolError(f"secure aggregation+ round {self.round}: {what}",
                             party=self.link.name, step=stage)

    def _setup(self, clients: list[str], m: int) -> list[str]:
        """Stages 0 and 1; return the clients whose reveal is missing (restart without them)."""
        link, rnd, cfg = self.link, self.round, self.config
        if len(clients) < self.smallest:
            raise self._fail("advertise", f"a round of {len(clients)} clients, fewer than the "
                             f"{self.smallest} its clients accept; with cohorts set "
                             "secaggplus's min_clients to the smallest cohort")
        self.session = secrets.token_bytes(16)
        adverts = link.exchange(rnd, "advertise",
                                {c: SecAggPlusAdvertise(session=self.session) for c in clients})
        u1 = []
        for c in clients:
            a = adverts.get(c)
            if a is None:
                continue
            if not isinstance(a, SecAggPlusKeys) or not all(
                    isinstance(key, bytes) and len(key) == KEY_BYTES
                    for key in (a.c, a.s, a.commit)):
                raise self._fail("advertise", f"client {c!r} advertised malformed keys")
            u1.append(c)
        n = len(u1)
        if n < self.smallest:
            raise self._fail("advertise", f"only {n} clients advertised keys, fewer than the "
                             f"{self.smallest} its clients accept")
        params = client_parameters(cfg, n, m)
        if params is None:
            raise self._fail(
                "roster",
                f"no graph protects a round of {n} clients against "
                f"{_colluders(cfg.corrupt_fraction, m)} colluders (corrupt_fraction="
                f"{cfg.corrupt_fraction} of {m}) with dropout={cfg.dropout}, not even the "
                "complete one; lower them, or use protect = ['secagg'] and its threshold")
        corrupt, drops = _colluders(cfg.corrupt_fraction, m), _dropouts(cfg.dropout, n)
        reason = harary.check_parameters(n, corrupt, drops, params.neighbours,
                                         params.threshold, sigma=cfg.sigma)
        if reason is not None:  # the overrides: its own clients would refuse them
            raise self._fail("roster", f"parameters 'neighbours'/'threshold' do not protect "
                             f"a round of {n} clients: {reason}")
        self.params = params
        self.names = u1
        self.index = {c: i for i, c in enumerate(u1)}
        entries = b"".join(adverts[c].c + adverts[c].s + adverts[c].commit for c in u1)
        self.keys = {c: (adverts[c].c, adverts[c].s) for c in u1}
        k, t = params.neighbours, params.threshold
        self.k, self.t = k, t
        self.floor = round_floor(cfg.dropout, n)
        digest = _roster_digest(self.session, rnd, u1, entries, k, t)
        roster = SecAggPlusRoster(names=u1, entries=entries, neighbours=k, threshold=t)
        reveals = link.exchange(rnd, "roster", {c: roster for c in u1})
        missing = []
        self.nonces: list[bytes] = []
        self.roster_sigs: dict[str, bytes] = {}
        for c in u1:
            r = reveals.get(c)
            if (not isinstance(r, SecAggPlusReveal) or not isinstance(r.nonce, bytes)
                    or not isinstance(r.sig, bytes) or harary.commitment(
                        self.session, rnd, c, r.nonce) != adverts[c].commit):
                missing.append(c)
                continue
            self.nonces.append(r.nonce)
            self.roster_sigs[c] = r.sig
        if len(missing) == len(u1):
            raise self._fail("roster", f"none of the {n} clients accepted the roster")
        if not missing:
            self.graph = _draw(self.session, rnd, digest, u1, self.nonces, self.k)
        return missing

    def _share(self, link: ServerLink) -> list[str]:
        """Stages 2 and 2b; return U2 (clients whose neighbourhood keeps t holders)."""
        rnd, graph = self.round, self.graph
        nonces = b"".join(self.nonces)
        self.closed = {c: graph.closed(c) for c in self.names}
        bodies = {c: SecAggPlusReveals(nonces=nonces, signatures={
            v: self.roster_sigs[v] for v in self.closed[c] if v != c}) for c in self.names}
        envelopes = link.exchange(rnd, "share-keys", bodies)
        sealed: dict[str, dict[str, bytes]] = {}
        self.seed_hashes: dict[str, bytes] = {}
        for c in self.names:
            env = envelopes.get(c)
            if env is None:
                continue
            if (not isinstance(env, SecAggPlusEnvelopes) or not isinstance(env.shares, dict)
                    or set(env.shares) != set(self.closed[c]) - {c}
                    or not isinstance(env.seed_hash, bytes) or len(env.seed_hash) != 32):
                raise self._fail("share-keys", f"client {c!r} sent shares for other clients "
                                 "than its neighbours, or no 32-byte self-mask commitment")
            sealed[c] = env.shares
            self.seed_hashes[c] = env.seed_hash
        u2 = set(sealed)
        while True:  # a client whose neighbourhood keeps fewer than t holders cannot finish
            short = {c for c in u2 if sum(v in u2 for v in self.closed[c]) < self.t}
            if not short:
                break
            u2 -= short
        if len(u2) < self.floor:
            raise self._fail("share-keys", f"only {len(u2)} clients shared keys with t={self.t} "
                             f"holders around them, below the round's floor {self.floor}")
        order = [c for c in self.names if c in u2]
        self.shared = {c: [v for v in self.closed[c] if v in u2] for c in order}
        link.send(rnd, "deliver", {c: SecAggPlusDelivery(
            shared=self.shared[c], shares={v: sealed[v][c] for v in self.shared[c] if v != c})
            for c in order})
        return order

    # ------------------------------------------------------------------ uploads
    def add(self, client: str, payload: Any) -> None:
        """Add one masked input y_u (mod 2^64)."""
        if self.done:
            raise ProtocolError("secure aggregation+: an update after the unmasking",
                                party=self.server, step="update")
        y = np.asarray(payload)
        if y.shape != (self.dim,) or y.dtype != np.uint64:
            raise MalformedUpdateError(
                f"server {self.server!r} got a malformed masked update from {client!r}: "
                f"expected {self.dim} uint64 ring elements, got {y.dtype} {y.shape}",
                party=self.server, client=client)
        self.admit(client)
        self._total += y

    # ------------------------------------------------------------------ unmasking
    def _check_holders(self, u3: set[str]) -> None:
        for c in self.participants:
            near = sum(v in u3 for v in self.shared[c])
            if near < self.t:
                what = "survivor" if c in u3 else "dropped client"
                raise self._fail(
                    "unmask",
                    f"{what} {c!r} has {near} surviving holders of its shares in its "
                    f"neighbourhood, below the threshold t={self.t}: the dropouts are "
                    f"concentrated around it and the round cannot be unmasked")

    def finish(self, survivors: Sequence[str]) -> Vector:
        """Stages 4 and 5: the consistency check, then shares; decode the weighted mean."""
        weight = self.check_survivors(survivors)
        u3 = [c for c in self.participants if c in survivors]
        if len(u3) < self.floor:
            raise self._fail("masked input", f"{len(u3)} survivors, below the round's floor "
                             f"{self.floor} (dropout={self.config.dropout})")
        u3_set = set(u3)
        dropped = [c for c in self.participants if c not in u3_set]
        self._check_holders(u3_set)
        bits = bitmap([self.index[c] for c in u3], len(self.names))
        signed = self.link.exchange(self.round, "consistency",
                                    {c: SecAggPlusSurvivors(bitmap=bits) for c in u3})
        u4 = {c for c in u3 if isinstance(signed.get(c), SecAggPlusSignature)
              and isinstance(signed[c].sig, bytes)}
        answers = self.link.exchange(self.round, "unmask", {
            c: SecAggPlusUnmask(bitmap=bits, signatures={
                v: signed[v].sig for v in self.shared[c] if v in u4}) for c in sorted(u4)})
        for c, a in answers.items():
            if (not isinstance(a, SecAggPlusShares) or not isinstance(a.b, dict)
                    or not isinstance(a.s, dict)):
                raise self._fail("unmask", f"client {c!r} sent a malformed unmask answer")
        self.used: dict[str, list[str]] = {}
        secrets_b = self._rebuild(u3, "b", answers)
        secrets_s = self._rebuild(dropped, "s", answers)
        total = self._total
        self._unmask(total, u3, dropped, secrets_b, secrets_s)
        self.done = True
        return ring_mean(total, frac_bits=self.config.frac_bits, weight=weight,
                         uploads=len(u3), max_abs=self.config.max_abs,
                         headroom=len(self.names),
                         where=f"secure aggregation+ round {self.round}",
                         party=self.server, step="unmask")

    def _rebuild(self, owners: list[str], kind: str,
                 answers: Mapping[str, Any]) -> list[bytes]:
        """Interpolate each owner's ``kind`` secret from t holders of its neighbourhood."""
        if not owners:
            return []
        chunks = shamir.chunk_count(KEY_BYTES)
        points = np.empty((len(owners), self.t), dtype=np.int64)
        values = np.empty((len(owners), self.t, chunks), dtype=np.uint32)
        for i, owner in enumerate(owners):
            held = 0
            for h in self.shared[owner]:
                a = answers.get(h)
                share = None if a is None else getattr(a, kind).get(owner)
                if share is None:
                    continue
                points[i, held] = self.graph.point(owner, h)
                try:
                    values[i, held] = _share_from_bytes(share, repr(h))
                except ProtocolError as exc:
                    raise self._fail("unmask", f"{exc} (of {owner!r}'s {kind}-share); no "
                                     "mean is released") from None
                held += 1
                if held == self.t:
                    break
            self.used[owner] = [h for h in self.shared[owner]
                                if (a := answers.get(h)) is not None
                                and getattr(a, kind).get(owner) is not None][:held]
            if held < self.t:
                what = "self-mask seed" if kind == "b" else "mask key"
                raise self._fail(
                    "unmask", f"only {held} holders returned {owner!r}'s {what} share, "
                    f"below the threshold t={self.t}; no mean is released")
        try:
            return shamir.combine_arrays(points, values, KEY_BYTES)
        except ValidationError as exc:
            raise self._fail("unmask", f"inconsistent shares ({exc})") from None

    def _unmask(self, total: NDArray[np.uint64], u3: list[str], dropped: list[str],
                secrets_b: list[bytes], secrets_s: list[bytes]) -> None:
        """Remove the self masks and the dropped clients' masks, over a thread pool."""
        context = _round_context(self.session, self.round)
        for u, b in zip(u3, secrets_b, strict=True):
            if seed_commitment(self.session, self.round, u, b) != self.seed_hashes[u]:
                raise self._fail(
                    "unmask", f"the self-mask seed rebuilt for survivor {u!r} does not open "
                    f"its commitment: a holder among {self.used[u]} returned a wrong share, "
                    f"or {u!r} dealt inconsistent ones; no mean is released")
        tasks: list[tuple[str, Any]] = [("b", b) for b in secrets_b]
        for v, raw in zip(dropped, secrets_s, strict=True):
            private = X25519PrivateKey.from_private_bytes(raw)
            key = MaskingKey(private=private, public=private.public_key().public_bytes_raw())
            if key.public != self.keys[v][1]:
                raise self._fail("unmask", f"the mask key rebuilt for dropped client {v!r} "
                                 "does not match its public key: a holder among "
                                 f"{self.used[v]} returned a wrong share, or {v!r} dealt "
                                 "inconsistent ones; no mean is released")
            peers = {u: self.keys[u][1] for u in self.shared[v] if u != v and u in u3}
            # v's mask over its surviving neighbours is minus theirs for their pairs with v
            tasks.extend(("s", (v, key, {u: pub})) for u, pub in peers.items())
        workers = max(1, min(usable_cores(), len(tasks)))
        if workers == 1:
            self._run(tasks, total, context)
            return
        parts = [tasks[i::workers] for i in range(workers)]
        accs = [total] + [np.zeros_like(total) for _ in range(workers - 1)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda i: self._run(parts[i], accs[i], context), range(workers)))
        for acc in accs[1:]:
            total += acc

    def _run(self, tasks: list[tuple[str, Any]], acc: NDArray[np.uint64],
             context: bytes) -> None:
        for kind, item in tasks:
            if kind == "b":
                add_expanded(item, acc, label=_SELF, subtract=True)
            else:
                v, key, peer = item
                pairwise_mask(v, key, peer, self.dim, context=context, label=_INPUT, out=acc)
