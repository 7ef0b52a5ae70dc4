"""Additive secret sharing of the updates (the FL privacy tutorial, §3.2), as an aggregator.

Each of the m clients of a round encodes x_k = round(p_k·w_k·2^f) in Z_2^64
(:mod:`islands.crypto.fixedpoint`), splits it into m additive shares with a
cryptographic generator (:func:`islands.crypto.sharing.share_among`), keeps one and
sends share j straight to client j (tag ``ss-share``, a :class:`Share`). Once every
update is in, the
server asks each client for the sum of the shares it holds (phase ``ss-sum``) and adds
the m partial sums: Σ_k x_k, the weighted mean. The server sees only partial sums, each
a uniformly random ring element unless it colludes with all but one client.

Against a deviating server, each client holds its own bounds: it accepts a roster only
of its federation's clients, with at least ``min_clients`` of them (a roster of one
would make its partial sum its update), and every share carries a digest of the
sender's roster, so a client whose peers were shown another roster refuses to send its
partial sum.

This is the simpler, cheaper alternative to :mod:`islands.aggregation.secagg` for a small
federation whose clients can reach one another; it has **no dropout recovery**: a
client that drops after shares were sent takes other clients' shares with it, and the
round fails with an error that says so (use secure aggregation where clients drop).
Shares are sent over the runtime's channels, which must be confidential (mutual TLS in
a deployment). Encoding, range and rounding are those of secure aggregation:
|p·w| < 2^(63−f)/m, error ≤ m·2^-(f+1) on the mean.

References
----------
.. [1] The FL privacy-computing tutorial, §3.2 (``papers/fl-privacy-computing-tutorial``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.aggregation.base import (
    AggStep,
    PlainServerHalf,
    ServerLink,
    StreamingRound,
    ring_encode,
    ring_mean,
    unexpected_step,
)
from islands.aggregation.config import MAX_ABS, AdditiveConfig
from islands.crypto.sharing import reconstruct, share_among
from islands.errors import ProtocolError
from islands.runtime import Party, wire
from islands.validation import check_float

__all__ = ["AdditivePartialSum", "AdditiveRoster", "AdditiveSharing", "AdditiveSumRequest",
           "Share"]

Vector = NDArray[np.float32]
_DIGEST_BYTES = 32


@wire.register(name="hfl.AdditiveShare")
@dataclass(frozen=True)
class Share:
    """One client's share of its update for one peer (tag ``ss-share``, client → client).

    ``roster`` is the SHA-256 digest of the round and the roster the sender was shown.
    """

    round: int = field(metadata={"ge": 1})
    share: NDArray[np.uint64] = field(metadata={"ndim": 1})
    roster: bytes = field(metadata={"max_len": _DIGEST_BYTES})


@wire.register(name="hfl.AdditiveRoster")
@dataclass(frozen=True)
class AdditiveRoster:
    """``ss-roster``, server → client: the round's clients, among whom updates are shared."""

    clients: list[str]


@wire.register(name="hfl.AdditiveSumRequest")
@dataclass(frozen=True)
class AdditiveSumRequest:
    """``ss-sum``, server → client: send the sum of the shares held."""


@wire.register(name="hfl.AdditivePartialSum")
@dataclass(frozen=True)
class AdditivePartialSum:
    """``ss-sum``, client → server: the sum of the shares the client holds."""

    total: NDArray[np.uint64] = field(metadata={"ndim": 1})


class AdditiveSharing:
    """Additive secret sharing over Z_2^64 between the clients of each round.

    Parameters
    ----------
    frac_bits : int, default=32
        Fractional bits of the fixed-point encoding.
    timeout : float, default=600
        Seconds a client waits for the other clients' shares.
    min_clients : int, default=2
        The smallest roster a client accepts; the server learns a client's update only
        with all the other m − 1 clients of its roster colluding.
    max_abs : float, default=1e6
        The largest magnitude of a model parameter in an upload: a client refuses to
        share beyond it, and the server refuses a decoded mean beyond it.
    """

    name = "additive"

    def __init__(self, frac_bits: int = 32, timeout: float = 600.0,
                 min_clients: int = 2, max_abs: float = MAX_ABS) -> None:
        config = AdditiveConfig.build(None, frac_bits=frac_bits, min_clients=min_clients,
                                      max_abs=max_abs)
        self.frac_bits, self.min_clients = config.frac_bits, config.min_clients
        self.max_abs = config.max_abs
        self.timeout = check_float(timeout, "timeout", "AdditiveSharing", low=0.0,
                                   low_inclusive=False)

    def client_half(self) -> _Client:
        """Make a client's half: splits its update, sums the shares it holds."""
        return _Client(self.frac_bits, self.timeout, self.min_clients, self.max_abs)

    def server_half(self) -> _Server:
        """Make the server's half: adds the clients' partial sums."""
        return _Server(self.frac_bits, self.max_abs)

    def __repr__(self) -> str:
        return (f"AdditiveSharing(frac_bits={self.frac_bits}, "
                f"min_clients={self.min_clients})")


def _roster_digest(rnd: int, roster: Sequence[str]) -> bytes:
    return hashlib.sha256(rnd.to_bytes(8, "big") + b"\x00".join(
        n.encode("utf-8") for n in sorted(roster))).digest()


class _Client:
    def __init__(self, frac_bits: int, timeout: float, min_clients: int,
                 max_abs: float) -> None:
        self.frac_bits, self.timeout, self.min_clients = frac_bits, timeout, min_clients
        self.max_abs = max_abs
        self.round = 0
        self.roster: list[str] = []
        self.own: NDArray[np.uint64] | None = None

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        if step.phase == "ss-roster":
            roster = step.body.clients if isinstance(step.body, AdditiveRoster) else None
            if (not isinstance(roster, list) or party.name not in roster
                    or len(set(roster)) != len(roster)):
                raise ProtocolError("additive sharing: malformed roster", party=party.name,
                                    step="ss-roster")
            strangers = sorted(str(c)[:100] for c in set(roster) - (set(party.parties)
                                                                    - {server}))
            if strangers or len(roster) < self.min_clients:
                what = (f"{strangers} are not clients of this federation" if strangers else
                        f"parameter 'min_clients' is {self.min_clients}, got a roster of "
                        f"{len(roster)}")
                raise ProtocolError(f"additive sharing round {step.round}: client "
                                    f"{party.name!r} refuses {server!r}'s roster: {what}",
                                    party=party.name, step="ss-roster")
            self.round, self.roster, self.own = step.round, list(roster), None
            return None
        if step.phase == "ss-sum":
            return self._sum(party, step)
        raise unexpected_step(party, step, "additive sharing")

    def open(self, payload: Any) -> Vector:
        return np.asarray(payload)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> NDArray[np.uint64]:
        if round != self.round or not self.roster:
            raise ProtocolError(f"additive sharing: client {party.name!r} has no roster for "
                                f"round {round}", party=party.name, step="update")
        m = len(self.roster)
        x = ring_encode(params, weight, frac_bits=self.frac_bits, headroom=m,
                        max_abs=self.max_abs,
                        who=f"additive sharing: client {party.name!r}")
        if m == 1:
            self.own = x
        else:
            shares = share_among(x, self.roster)
            digest = _roster_digest(round, self.roster)
            for peer, share in shares.items():
                if peer == party.name:
                    self.own = share
                else:
                    party.send(peer, "ss-share", Share(round, share, digest))
        return np.zeros(0, dtype=np.uint64)  # the update itself travels as shares

    def _sum(self, party: Party, step: AggStep) -> AdditivePartialSum:
        if not isinstance(step.body, AdditiveSumRequest):
            raise ProtocolError("additive sharing: malformed partial-sum request",
                                party=party.name, step="ss-sum")
        if step.round != self.round or self.own is None:
            raise ProtocolError(f"additive sharing: client {party.name!r} holds no shares for "
                                f"round {step.round}", party=party.name, step="ss-sum")
        held = [self.own]
        digest = _roster_digest(self.round, self.roster)
        for peer in self.roster:
            if peer == party.name:
                continue
            while True:  # skip shares of a failed earlier round
                msg = party.recv(peer, "ss-share", timeout=self.timeout)
                if not isinstance(msg, Share):
                    raise ProtocolError(f"additive sharing: a malformed share from {peer!r}",
                                        party=party.name, step="ss-sum")
                if msg.round >= self.round:
                    break
            if msg.round != self.round or msg.share.shape != self.own.shape:
                raise ProtocolError(f"additive sharing: a malformed share from {peer!r}",
                                    party=party.name, step="ss-sum")
            if msg.roster != digest:
                raise ProtocolError(
                    f"additive sharing round {self.round}: client {party.name!r} refuses to "
                    f"send its partial sum: {peer!r} was shown another roster by the server",
                    party=party.name, step="ss-sum")
            held.append(msg.share)
        self.own = None
        return AdditivePartialSum(total=reconstruct(held))


class _Server(PlainServerHalf):
    def __init__(self, frac_bits: int, max_abs: float) -> None:
        self.frac_bits, self.max_abs = frac_bits, max_abs

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> _Round:
        link.send(round, "ss-roster", {c: AdditiveRoster(clients=list(clients))
                                       for c in clients})
        return _Round(link, round, clients, weights, dim, self.frac_bits, self.max_abs)

    def reveal(self, payload: Any) -> Vector:
        return np.asarray(payload)


class _Round(StreamingRound):
    def __init__(self, link: ServerLink, rnd: int, clients: Sequence[str],
                 weights: Mapping[str, float], dim: int, frac_bits: int,
                 max_abs: float) -> None:
        super().__init__(link.name, clients, weights)
        self.link, self.round, self.dim, self.frac_bits = link, rnd, dim, frac_bits
        self.max_abs = max_abs

    def add(self, client: str, payload: Any) -> None:
        self.admit(client)

    def finish(self, survivors: Sequence[str]) -> Vector:
        weight = self.check_survivors(survivors)
        lost = [c for c in self.participants if c not in survivors]
        if lost:
            raise ProtocolError(
                f"additive sharing round {self.round}: clients {lost} dropped after the "
                "shares were sent, taking shares of the others' updates with them; this "
                "aggregator cannot recover (use secure aggregation, protect = ['secagg'])",
                party=self.server, step="ss-sum")
        sums = self.link.exchange(self.round, "ss-sum",
                                  {c: AdditiveSumRequest() for c in self.participants})
        missing = [c for c in self.participants if c not in sums]
        if missing:
            raise ProtocolError(
                f"additive sharing round {self.round}: no partial sum from {missing}; the "
                "round cannot be finished", party=self.server, step="ss-sum")
        parts = [np.asarray(s.total if isinstance(s, AdditivePartialSum) else None)
                 for s in (sums[c] for c in self.participants)]
        for c, part in zip(self.participants, parts, strict=True):
            if part.shape != (self.dim,) or part.dtype != np.uint64:
                raise ProtocolError(f"client {c!r} sent a malformed partial sum",
                                    party=self.server, step="ss-sum")
        m = len(self.participants)  # every client's shares are in: k = h = m
        return ring_mean(reconstruct([np.zeros(self.dim, dtype=np.uint64), *parts]),
                         frac_bits=self.frac_bits, weight=weight, uploads=m, headroom=m,
                         max_abs=self.max_abs,
                         where=f"additive sharing round {self.round}", party=self.server,
                         step="ss-sum")
