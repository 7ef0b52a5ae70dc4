"""Aggregators: how client updates become the next global model.

An aggregator is an object a strategy is given (composition, not a strategy subclass per
protection). It is configuration plus two factories, one per side, so that a protection
that changes what a client uploads (masking, encryption, permutation, noise) and what the
server can do with it fits the same interface:

* :meth:`Aggregator.client_half` makes the state one client keeps for the whole run
  (its keys, its shares): a :class:`ClientHalf`;
* :meth:`Aggregator.server_half` makes the server's: a :class:`ServerHalf`.

A round, as the server role (:func:`islands.hfl.protocol.server`) drives it::

    half.setup(link, clients)               once per run: key agreement, key dealing
    agg = half.start(link, round, ...)      set-up phases of the round (SecAgg keys)
    ... tasks to agg.participants, each with its weight agg.weights[c]
    ... client: half.payload(...) -> upload; server: agg.add(client, upload), in order
    payload = agg.finish(survivors)         unmasking phases; the new global payload
    half.reveal(payload)                    the plain model, if the server may see it

The global *payload* is what the server sends back in the next task: the plain vector
for the plain mean and secure aggregation (the server learns the mean, nothing else), a
ciphertext for CKKS and Paillier, a permuted vector under the chaos permutation. A client
turns it into its model with :meth:`ClientHalf.open`; :meth:`ServerHalf.reveal` returns
None where the server cannot.

Phases of an aggregator's own protocol travel as :class:`AggStep` messages on the
client's ``task`` tag and :class:`AggReply` answers on ``agg``; :class:`ServerLink`
sends and gathers them with a deadline and reports who failed or timed out at which
stage, so that every stage of every protection handles dropouts the same way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from islands.aggregation.config import MAX_ABS
from islands.arrays import peak_abs
from islands.crypto.fixedpoint import decode_fixed, encode_fixed
from islands.errors import (
    PeerFailedError,
    PeerTimeoutError,
    ProtocolError,
    ValidationError,
    WireError,
    invalid_parameter,
)
from islands.runtime import Party, wire

__all__ = [
    "AggReply",
    "AggStep",
    "Aggregator",
    "ClientHalf",
    "MalformedUpdateError",
    "MeanAggregator",
    "PlainClientHalf",
    "RoundAggregation",
    "ServerHalf",
    "ServerLink",
    "StageDropout",
    "check_update_vector",
    "normalised_weights_of",
]

Vector = NDArray[np.float32]


# --------------------------------------------------------------------------- messages
@wire.register(name="hfl.AggStep")
@dataclass(frozen=True)
class AggStep:
    """One phase message of an aggregator's protocol, server → client (``task`` tag).

    ``body`` is the phase's registered message (defined beside its aggregator), whose
    fields the codec checks on decode; the receiver checks its class for the phase.
    ``Any`` here because the body classes live in the modules above this one.
    """

    round: int
    phase: str
    body: Any


@wire.register(name="hfl.AggReply")
@dataclass(frozen=True)
class AggReply:
    """A client's answer to an :class:`AggStep` (``agg`` tag); ``body`` as in AggStep."""

    round: int
    phase: str
    body: Any


class MalformedUpdateError(ProtocolError):
    """A client's upload the server refuses on arrival (not finite, wrong shape, too large).

    The server leaves that client out of the round as a dropout (reason ``"malformed
    update"``) instead of stopping the run; ``client`` names it.
    """

    def __init__(self, message: str, *, party: str, client: str) -> None:
        super().__init__(message, party=party, step="update")
        self.client = client


@dataclass(frozen=True)
class StageDropout:
    """A client lost at one stage of an aggregator's protocol."""

    round: int
    client: str
    reason: str  # "failed" or "timeout"
    stage: str


class ServerLink:
    """The server's side of the aggregator phases: send steps, gather replies.

    Parameters
    ----------
    party
        The server's party context.
    timeout
        Seconds a gather waits in all (the server's ``client_timeout``).
    """

    def __init__(self, party: Party, timeout: float) -> None:
        self.party = party
        self.timeout = timeout
        self.dropouts: list[StageDropout] = []

    @property
    def name(self) -> str:
        """The server's name."""
        return self.party.name

    def send(self, round: int, phase: str, bodies: Mapping[str, Any]) -> None:
        """Send ``AggStep(round, phase, bodies[c])`` to every client ``c`` in ``bodies``."""
        for client, body in bodies.items():
            self.party.send(client, "task", AggStep(round=round, phase=phase, body=body))

    def gather(self, round: int, phase: str, clients: Sequence[str]) -> dict[str, Any]:
        """Collect each client's reply to ``phase``; failures become :class:`StageDropout`.

        Replies of earlier rounds or other phases (late answers of a client that timed
        out before) are skipped. Returns the replies of the clients that answered, in
        the order given.
        """
        deadline = time.monotonic() + self.timeout
        out: dict[str, Any] = {}
        for client in clients:
            try:
                while True:
                    msg = self.party.recv(client, "agg",
                                          timeout=max(deadline - time.monotonic(), 1e-3))
                    if isinstance(msg, AggReply) and (
                        msg.round < round or (msg.round == round and msg.phase != phase)
                    ):
                        continue
                    break
            except PeerFailedError:
                self.dropouts.append(StageDropout(round, client, "failed", phase))
                continue
            except PeerTimeoutError:
                self.dropouts.append(StageDropout(round, client, "timeout", phase))
                continue
            except ProtocolError as exc:
                if not isinstance(exc.__cause__, WireError):
                    raise
                # the codec refused the reply (e.g. a body field of the wrong type)
                raise ProtocolError(
                    f"client {client!r} sent a malformed reply to {phase!r} in round {round}: "
                    f"{exc}", party=self.party.name, step=phase) from exc
            if not isinstance(msg, AggReply) or msg.round != round:
                raise ProtocolError(
                    f"client {client!r} sent a malformed reply to {phase!r} in round {round}",
                    party=self.party.name, step=phase)
            out[client] = msg.body
        return out

    def exchange(self, round: int, phase: str, bodies: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`send` then :meth:`gather` from the same clients."""
        self.send(round, phase, bodies)
        return self.gather(round, phase, list(bodies))


# --------------------------------------------------------------------------- protocols
class RoundAggregation(Protocol):
    """One round's aggregation on the server.

    ``participants`` are the clients that train this round (the round's set-up phases
    may have lost some) and ``weights`` their aggregation weights p_k, which sum to 1
    over the participants and are sent to each in its task.
    """

    participants: list[str]
    weights: dict[str, float]

    def add(self, client: str, payload: Any) -> None:
        """Take one client's upload (called in a fixed client order, for determinism)."""

    def finish(self, survivors: Sequence[str]) -> Any:
        """Return the new global payload from the survivors' uploads."""


class ServerHalf(Protocol):
    """The server's state for one run."""

    def setup(self, link: ServerLink, clients: Sequence[str]) -> list[str]:
        """Run-level set-up (key dealing); return the clients still in."""

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> RoundAggregation:
        """Open the aggregation of ``round`` over ``clients`` (``weights``: n_k)."""

    def reveal(self, payload: Any) -> Vector | None:
        """Return the plain global model in ``payload``, or None if the server cannot see it."""

    def get_state(self) -> dict[str, Any]:
        """Return what a checkpoint must hold to resume."""

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state`."""

    def set_global(self, params: Vector | None) -> None:
        """Take the global model a round starts from (None where the server cannot see it)."""

    def set_sampling_rate(self, rate: float | None) -> None:
        """Take the strategy's secret sampling rate q (None: the cohort is not secret)."""

    def spent(self) -> tuple[float, float] | None:
        """Return the client-level (ε, δ) spent so far, or None without client-level DP."""

    def spent_against_server(self) -> tuple[float, float] | None:
        """Return the client-level (ε, δ) against the server, or None without it."""

    def exhausted(self) -> bool:
        """Whether another round would exceed a privacy budget."""


class ClientHalf(Protocol):
    """A client's state for one run."""

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        """Handle one phase message; the return value is the reply (None: no reply)."""

    def open(self, payload: Any) -> Vector:
        """Turn a global payload from :meth:`RoundAggregation.finish` into the model."""

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> Any:
        """Return the upload for ``params`` (the new local model; ``base``: the round's start)."""


class Aggregator(Protocol):
    """What a strategy needs to combine client updates; see the module docstring."""

    name: str

    def client_half(self) -> ClientHalf:
        """Make a fresh client half (one per client party)."""

    def server_half(self) -> ServerHalf:
        """Make a fresh server half."""


# --------------------------------------------------------------------------- helpers
def normalised_weights_of(clients: Sequence[str], weights: Mapping[str, float]) -> dict[str, float]:
    """p_k = w_k / Σ w over ``clients`` (each weight finite and > 0)."""
    values = [float(weights[c]) for c in clients]
    if not values or not all(np.isfinite(values)) or min(values) <= 0:
        raise ValidationError(f"aggregation weights must be finite and > 0; got {values}")
    total = sum(values)
    return {c: v / total for c, v in zip(clients, values, strict=True)}


def check_update_vector(vec: Any, dim: int, who: str, *, server: str,
                        max_abs: float | None = None) -> NDArray[Any]:
    """Check a client's plain upload: ``dim`` finite floats, each within ``max_abs``.

    Raises
    ------
    MalformedUpdateError
        Naming ``who``, before anything of the upload is used.
    """
    arr = np.asarray(vec)
    peak = peak_abs(arr) if arr.shape == (dim,) and arr.dtype.kind == "f" else math.nan
    if not math.isfinite(peak):
        raise MalformedUpdateError(
            f"server {server!r} got a malformed update from {who!r}: expected {dim} finite "
            f"floats, got {_describe(arr)}", party=server, client=who)
    if max_abs is not None and peak > max_abs:
        raise MalformedUpdateError(
            f"server {server!r} got a malformed update from {who!r}: |value| reaches "
            f"{peak:.3g}, above the aggregator's max_abs={max_abs:.3g}",
            party=server, client=who)
    return arr


def _describe(arr: NDArray[Any]) -> str:
    if arr.dtype.kind == "f" and arr.size and not np.all(np.isfinite(arr)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        return f"{arr.dtype} array of shape {arr.shape} with {bad} NaN or infinite values"
    return f"{arr.dtype} array of shape {arr.shape}"


class StreamingRound:
    """Book-keeping shared by the round aggregations: who is in, who was added.

    Checks that every upload comes from a participant, once, and that ``finish`` is
    given exactly the clients added.
    """

    def __init__(self, server: str, clients: Sequence[str], weights: Mapping[str, float]):
        self.server = server
        self.participants = list(clients)
        self.weights = normalised_weights_of(self.participants, weights)
        self.added: list[str] = []

    def expect(self, client: str) -> float:
        """Check ``client`` may upload now (without recording it); return its weight p_k."""
        if client not in self.weights:
            raise ProtocolError(
                f"server {self.server!r} got an update from {client!r}, which is not in "
                "this round", party=self.server, step="update")
        if client in self.added:
            raise ProtocolError(
                f"server {self.server!r} got two updates from {client!r} in one round",
                party=self.server, step="update")
        return self.weights[client]

    def admit(self, client: str) -> float:
        """Record ``client``'s upload; return its weight p_k."""
        weight = self.expect(client)
        self.added.append(client)
        return weight

    def check_survivors(self, survivors: Sequence[str]) -> float:
        """Check ``survivors`` are the clients added; return Σ p_k over them."""
        if sorted(survivors) != sorted(self.added):
            raise ValidationError(
                f"survivors {list(survivors)} differ from the clients added {self.added}")
        if not self.added:
            raise ProtocolError("no client update to aggregate", party=self.server,
                                step="aggregate")
        return sum(self.weights[c] for c in self.added)


class PlainServerHalf:
    """Defaults for a server half: no set-up, nothing to checkpoint, no privacy budget."""

    def setup(self, link: ServerLink, clients: Sequence[str]) -> list[str]:
        """No run-level set-up."""
        return list(clients)

    def get_state(self) -> dict[str, Any]:
        """Nothing to keep."""
        return {}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore."""

    def set_global(self, params: Vector | None) -> None:
        """Ignore the global model: this half does not need it."""

    def set_sampling_rate(self, rate: float | None) -> None:
        """No accountant to tell."""

    def spent(self) -> tuple[float, float] | None:
        """No client-level DP: None."""
        return None

    def spent_against_server(self) -> tuple[float, float] | None:
        """No client-level DP: None."""
        return None

    def exhausted(self) -> bool:
        """No budget: never."""
        return False


def ring_encode(params: Vector, weight: float, *, frac_bits: int, headroom: int,
                who: str, max_abs: float) -> NDArray[np.uint64]:
    """Encode p·w in Z_2^64 so that ``headroom`` uploads sum without wrapping.

    A parameter beyond ``max_abs``, or a value outside the ring's range, is a
    ValidationError naming ``who`` (never a wrap-around).
    """
    peak = peak_abs(params)
    if not peak <= max_abs:
        raise ValidationError(f"{who}'s update reaches |value| {peak:.3g}, above the "
                              f"aggregator's max_abs={max_abs:.3g}")
    values = np.asarray(params)
    w = float(weight)
    try:
        # rounding is monotone, so the largest |p·w| is the product of the largest |p| and
        # |w|: if that one encodes, every value does, and the vector is encoded a block
        # at a time (no model-sized float64 products, scaled values or int64 numerators);
        # otherwise the whole vector is, for the error that names the offending value
        encode_fixed(np.multiply(np.array([peak], dtype=values.dtype), abs(w),
                                 dtype=np.float64), frac_bits=frac_bits, headroom=headroom)
    except ValidationError:
        scaled = np.multiply(values, w, dtype=np.float64)
        try:
            return encode_fixed(scaled, frac_bits=frac_bits, headroom=headroom)
        except ValidationError as exc:
            raise ValidationError(
                f"{who}'s update is outside the fixed-point range ({exc})") from exc
    flat = values.reshape(-1)
    out = np.empty(flat.size, dtype=np.uint64)
    term = np.empty(min(flat.size, _TERM), dtype=np.float64)
    for lo in range(0, flat.size, _TERM):
        hi = min(lo + _TERM, flat.size)
        # float64 products of the float32 values (exact conversions), as whole-vector ones
        np.multiply(flat[lo:hi], w, out=term[:hi - lo], dtype=np.float64)
        out[lo:hi] = encode_fixed(term[:hi - lo], frac_bits=frac_bits, headroom=headroom)
    return out.reshape(values.shape)


def ring_limit(uploads: int, headroom: int) -> int:
    """Return the largest |Σ| (in units of 2^-f) that ``uploads`` in-range encodings reach.

    :func:`ring_encode` with ``headroom`` h keeps each numerator below ⌈2^63/h⌉ in
    magnitude, so k ≤ h of them sum to at most k·(⌈2^63/h⌉ − 1) < 2^63.
    """
    return uploads * (-(-(2**63) // headroom) - 1)


def ring_mean(total: NDArray[np.uint64], *, frac_bits: int, weight: float, uploads: int,
              headroom: int, max_abs: float, where: str, party: str, step: str) -> Vector:
    """Decode Σ p_k·w_k from the ring and divide by the survivors' Σ p_k.

    Parameters
    ----------
    total
        The sum of ``uploads`` encodings, each made by :func:`ring_encode` with
        ``headroom``.
    frac_bits, weight
        The encoding's f, and Σ p_k over the uploads summed.
    uploads, headroom
        k, the uploads summed, and h, the headroom each was encoded for (k ≤ h).
    max_abs
        The largest magnitude of a parameter in an in-range upload: their weighted mean
        stays within it (up to the encoding's rounding).
    where, party, step
        The round, the party decoding and its step, for the error.

    Raises
    ------
    ProtocolError
        If a coordinate of the sum exceeds what k in-range uploads can sum to
        (:func:`ring_limit`), or a coordinate of the mean exceeds ``max_abs``: an upload
        was outside the range (a client that skipped its encoder's checks), so the mean
        is refused, not released.
    """
    limit = ring_limit(uploads, headroom)
    signed = np.asarray(total).view(np.int64)
    # a maximum and a minimum first: no mask the size of the model unless one is outside
    if signed.size and (int(signed.max()) > limit or int(signed.min()) < -limit):
        i = int(np.argmax((signed > limit) | (signed < -limit)))
        scale = float(2**frac_bits)
        raise ProtocolError(
            f"{where}: the decoded sum reaches |Σ p·w| = {abs(float(signed[i])) / scale:.4g} "
            f"at coordinate {i}, beyond the {limit / scale:.4g} that {uploads} in-range "
            f"uploads can sum to (each |p·w| < 2^{63 - frac_bits}/{headroom}): an upload "
            f"was outside the encoding's range, and the mean is not released",
            party=party, step=step)
    mean = decode_fixed(total, frac_bits=frac_bits)
    mean /= weight  # in place: decode_fixed's array is ours
    # each upload's rounding is at most 2^-(f+1), so in-range uploads stay within this
    room = max_abs + uploads * 2.0 ** -(frac_bits + 1) / weight
    peak = peak_abs(mean)
    if not peak <= room:
        i = int(np.argmax(np.abs(mean)))
        raise ProtocolError(
            f"{where}: the decoded mean reaches |w| = {abs(float(mean[i])):.4g} at coordinate "
            f"{i}, beyond the aggregator's max_abs={max_abs:.4g} that a mean of in-range "
            f"uploads stays within: an upload was outside the range, and the mean is not "
            f"released", party=party, step=step)
    return mean.astype(np.float32)


def unexpected_step(party: Party, step: AggStep, aggregator: str) -> ProtocolError:
    """Make the error for a phase message an aggregator does not know."""
    return ProtocolError(
        f"client {party.name!r} got phase {step.phase!r} of round {step.round}, which the "
        f"{aggregator} aggregator does not have", party=party.name, step=step.phase)


# --------------------------------------------------------------------------- plain mean
class MeanAggregator:
    """The plain weighted mean of FedAvg, Σ_k (n_k/n_S)·w_k over the survivors S.

    The server sees every client's model in the clear: protection comes from the
    aggregators in :mod:`islands.aggregation.protect` that replace or wrap this one.

    Parameters
    ----------
    max_abs : float, default=1e6
        The largest magnitude of a model parameter in an upload. A client refuses to
        upload beyond it and the server leaves out any upload beyond it as malformed:
        one client's 1e30 would otherwise become the next global model of every client.
        Far above the weights of any trained network; raise it for a model whose
        parameters are legitimately larger.
    """

    name = "mean"

    def __init__(self, max_abs: float = MAX_ABS) -> None:
        if (isinstance(max_abs, bool) or not isinstance(max_abs, (int, float, np.floating))
                or not np.isfinite(max_abs) or max_abs <= 0):
            raise invalid_parameter("max_abs", "MeanAggregator", "a finite float > 0",
                                    max_abs)
        self.max_abs = float(max_abs)

    def client_half(self) -> PlainClientHalf:
        """Make a client half that uploads the model itself."""
        return PlainClientHalf(self.max_abs)

    def server_half(self) -> _MeanServer:
        """Make a server half that sums the uploads, streaming."""
        return _MeanServer(self.max_abs)

    def __repr__(self) -> str:
        return ("MeanAggregator()" if self.max_abs == MAX_ABS
                else f"MeanAggregator(max_abs={self.max_abs!r})")


class PlainClientHalf:
    """A client half that uploads its plain model, checked against ``max_abs`` first.

    ``name`` is the aggregator's, for messages (``"mean"``, ``"median"``, ...).
    """

    checks_values = True
    """:meth:`payload` refuses a NaN, an infinity and a value beyond ``max_abs`` itself, in
    its one pass over the upload: the client role need not scan it first."""

    def __init__(self, max_abs: float, name: str = "mean") -> None:
        self.max_abs, self.name = max_abs, name

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        """Refuse any phase message: a plain upload has no phases."""
        raise unexpected_step(party, step, self.name)

    def open(self, payload: Any) -> Vector:
        """Return the global model the server sent (plain)."""
        return np.asarray(payload)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> Vector:
        """Return ``params`` as the upload, refused beyond ``max_abs``."""
        peak = peak_abs(params)
        if not math.isfinite(peak):
            raise ValidationError(f"the update of client {party.name!r} holds NaN or "
                                  "infinite values")
        if not peak <= self.max_abs:
            raise ValidationError(
                f"the update of client {party.name!r} reaches |value| {peak:.3g}, above the "
                f"{self.name} aggregator's max_abs={self.max_abs:.3g}")
        return params


class _MeanServer(PlainServerHalf):
    def __init__(self, max_abs: float) -> None:
        self.max_abs = max_abs
        # the float64 sum and the block of products, kept for the next round: a fresh
        # model-sized buffer costs a page fault per 4 KiB page every round
        # (islands.runtime.allocator), as much as the additions themselves
        self._spare: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> _MeanRound:
        spare, self._spare = self._spare, None
        if spare is None or spare[0].size != dim:
            spare = (np.zeros(dim), np.empty(min(dim, _TERM)))
        else:
            spare[0].fill(0.0)
        return _MeanRound(link.name, clients, weights, dim, self.max_abs, spare,
                          lambda: setattr(self, "_spare", spare))

    def reveal(self, payload: Any) -> Vector:
        return np.asarray(payload)


_TERM = 1 << 16
"""Values per block of the plain mean's products (a 512 kB buffer, whatever the model)."""


class _MeanRound(StreamingRound):
    def __init__(self, server: str, clients: Sequence[str], weights: Mapping[str, float],
                 dim: int, max_abs: float,
                 buffers: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
                 release: Callable[[], None] | None = None) -> None:
        super().__init__(server, clients, weights)
        self._dim = dim
        self._max_abs = max_abs
        # the zeroed float64 sum and a block of _TERM values through which the products
        # p·w go (not a model-sized buffer), given by the server half to reuse
        self._total, self._term = buffers or (np.zeros(dim), np.empty(min(dim, _TERM)))
        self._release = release

    def add(self, client: str, payload: Any) -> None:
        self.expect(client)
        vec = check_update_vector(payload, self._dim, client, server=self.server,
                                  max_abs=self._max_abs)
        w = self.admit(client)
        # in float64: a Python float times a float32 array would round to float32
        for lo in range(0, self._dim, _TERM):
            hi = min(lo + _TERM, self._dim)
            term = self._term[:hi - lo]
            np.multiply(vec[lo:hi], w, out=term, dtype=np.float64)
            self._total[lo:hi] += term

    def finish(self, survivors: Sequence[str]) -> Vector:
        weight = self.check_survivors(survivors)
        # the float64 quotients block by block, each rounded to float32 as it comes: the
        # same values as (total / weight).astype(float32), without a model-sized float64
        out = np.empty(self._dim, dtype=np.float32)
        for lo in range(0, self._dim, _TERM):
            hi = min(lo + _TERM, self._dim)
            term = self._term[:hi - lo]
            np.divide(self._total[lo:hi], weight, out=term)
            out[lo:hi] = term
        if self._release is not None:
            self._release()
        return out
