"""Transports move encoded messages between parties.

A transport only ever carries encoded messages from :mod:`islands.runtime.wire`; it
never sees Python objects, so whatever runs over it (threads in one process, processes over
gRPC) has the same semantics: messages are queued per (sender, receiver, tag) in FIFO
order and a receiver waits for a given sender and tag with a timeout.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Literal, Protocol

from islands.errors import DeadlockError, PeerFailedError, PeerTimeoutError, ProtocolError

DERIVED_SUFFIX = " (built here)"
"""Ends the hello keys a party derived from the federation file on its own machine (a
model factory's initial state): a deployed transport names them apart when they differ."""

__all__ = ["DERIVED_SUFFIX", "MemoryTransport", "RunCancelled", "Transport"]


class RunCancelled(ProtocolError):
    """Raised inside a role when the run was stopped because another party failed."""


class Transport(Protocol):
    """What a :class:`~islands.runtime.party.Party` needs from the network."""

    def send(self, sender: str, receiver: str, tag: str, data: bytes | bytearray) -> None:
        """Queue ``data`` for ``receiver``; returns once the transport has taken it.

        A ``bytearray`` is handed over: the sender must not touch it afterwards, and the
        receiver may decode it in place.
        """

    def recv(self, receiver: str, sender: str, tag: str, timeout: float) -> bytes | bytearray:
        """Wait at most ``timeout`` seconds for the next ``tag`` message from ``sender``."""


_State = Literal["running", "done", "failed"]


class MemoryTransport:
    """In-process transport: one mailbox per (receiver, sender, tag), shared by threads.

    Beyond plain queues it knows each party's state, so that a receiver waiting on a peer
    that has already finished or failed stops at once with :class:`PeerFailedError`
    instead of waiting out its timeout, and a run where every live party waits on another
    for a message nobody will send stops with :class:`DeadlockError`.

    It scales to thousands of parties: one lock guards the state, but each receiver waits
    on its own condition, so a message wakes only its receiver, and the deadlock check
    costs O(1) unless every running party is waiting.

    Parameters
    ----------
    parties
        Names of every party on this transport.
    """

    def __init__(self, parties: Iterable[str]) -> None:
        self._parties = tuple(parties)
        self._lock = threading.Lock()
        # one condition per receiver, all on the one lock: a send wakes only its receiver
        self._conds: dict[str, threading.Condition] = {
            p: threading.Condition(self._lock) for p in self._parties
        }
        self._mail: dict[tuple[str, str, str], deque[bytes | bytearray]] = {}
        self._state: dict[str, _State] = {p: "running" for p in self._parties}
        self._running = len(self._state)  # parties whose state is "running"
        self._waiting: dict[str, tuple[str, str]] = {}  # receiver -> (sender, tag)
        self._waiting_on: dict[str, set[str]] = {}  # sender -> receivers waiting on it
        self._cancelled: str | None = None

    @property
    def parties(self) -> tuple[str, ...]:
        """The names of the parties on this transport."""
        return self._parties

    def _cond(self, receiver: str) -> threading.Condition:
        cond = self._conds.get(receiver)
        if cond is None:  # a receiver the transport was not told about
            cond = self._conds[receiver] = threading.Condition(self._lock)
        return cond

    def send(self, sender: str, receiver: str, tag: str, data: bytes | bytearray) -> None:
        """Queue a message; raises :class:`RunCancelled` once the run is stopping."""
        with self._lock:
            if self._cancelled is not None:
                raise RunCancelled(self._cancelled, party=sender, step=tag)
            self._mail.setdefault((receiver, sender, tag), deque()).append(data)
            if self._waiting.get(receiver) == (sender, tag):  # wake only whom it concerns
                self._conds[receiver].notify_all()

    def recv(self, receiver: str, sender: str, tag: str, timeout: float) -> bytes | bytearray:
        """Wait for the next ``tag`` message from ``sender``; never longer than ``timeout``."""
        deadline = time.monotonic() + timeout
        key = (receiver, sender, tag)
        with self._lock:
            if receiver in self._waiting:
                raise ProtocolError(
                    f"party {receiver!r} is already waiting for {self._waiting[receiver][1]!r};"
                    " one party receives from one thread at a time",
                    party=receiver, step=tag,
                )
            cond = self._cond(receiver)
            self._waiting[receiver] = (sender, tag)
            self._waiting_on.setdefault(sender, set()).add(receiver)
            try:
                while True:
                    box = self._mail.get(key)
                    if box:
                        return box.popleft()
                    if self._cancelled is not None:
                        raise RunCancelled(self._cancelled, party=receiver, step=tag)
                    state = self._state.get(sender, "running")
                    if state != "running":
                        what = "failed" if state == "failed" else "finished"
                        raise PeerFailedError(
                            f"party {receiver!r} was waiting for {tag!r} from {sender!r}, "
                            f"but {sender!r} {what} without sending it",
                            party=receiver, peer=sender, tag=tag,
                        )
                    if self._deadlocked():
                        waits = ", ".join(f"{r!r} waits for {t!r} from {s!r}"
                                          for r, (s, t) in sorted(self._waiting.items()))
                        raise DeadlockError(
                            f"deadlock: every running party is waiting ({waits})",
                            party=receiver, step=tag,
                        )
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise PeerTimeoutError(
                            f"party {receiver!r} timed out after {timeout:g} s waiting for "
                            f"{tag!r} from {sender!r}",
                            party=receiver, peer=sender, tag=tag, timeout=timeout,
                        )
                    cond.wait(min(remaining, threading.TIMEOUT_MAX))
            finally:
                del self._waiting[receiver]
                waiters = self._waiting_on[sender]
                waiters.discard(receiver)
                if not waiters:
                    del self._waiting_on[sender]

    def _deadlocked(self) -> bool:
        """Whether every running party waits for a message that nobody can still send.

        O(1) unless at least as many parties wait as run; only then are the waits read.
        """
        if self._running == 0 or len(self._waiting) < self._running:
            return False
        blocked = 0
        for p, (sender, tag) in self._waiting.items():
            if self._state.get(p) != "running":
                continue
            if self._mail.get((p, sender, tag)) or self._state.get(sender) != "running":
                return False
            blocked += 1
        return blocked == self._running

    def _wake_all(self) -> None:
        for receiver in self._waiting:
            self._conds[receiver].notify_all()

    def finish(self, party: str, *, failed: bool) -> None:
        """Mark a party's role as returned (or raised); wakes anyone waiting on it."""
        with self._lock:
            if self._state.get(party) == "running":
                self._running -= 1
            self._state[party] = "failed" if failed else "done"
            if self._deadlocked():  # the last party not waiting just stopped
                self._wake_all()
            else:
                for receiver in self._waiting_on.get(party, ()):
                    self._conds[receiver].notify_all()

    def cancel(self, reason: str) -> None:
        """Stop the run: every pending and future send/recv raises :class:`RunCancelled`."""
        with self._lock:
            if self._cancelled is None:
                self._cancelled = reason
            self._wake_all()

    def undelivered(self) -> dict[tuple[str, str, str], int]:
        """Messages sent but never received, by (receiver, sender, tag)."""
        with self._lock:
            return {k: len(v) for k, v in self._mail.items() if v}
