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

__all__ = ["MemoryTransport", "RunCancelled", "Transport"]


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

    Parameters
    ----------
    parties
        Names of every party on this transport.
    """

    def __init__(self, parties: Iterable[str]) -> None:
        self._parties = tuple(parties)
        self._cond = threading.Condition()
        self._mail: dict[tuple[str, str, str], deque[bytes | bytearray]] = {}
        self._state: dict[str, _State] = {p: "running" for p in self._parties}
        self._waiting: dict[str, tuple[str, str]] = {}
        self._cancelled: str | None = None

    @property
    def parties(self) -> tuple[str, ...]:
        """The names of the parties on this transport."""
        return self._parties

    def send(self, sender: str, receiver: str, tag: str, data: bytes | bytearray) -> None:
        """Queue a message; raises :class:`RunCancelled` once the run is stopping."""
        with self._cond:
            if self._cancelled is not None:
                raise RunCancelled(self._cancelled, party=sender, step=tag)
            self._mail.setdefault((receiver, sender, tag), deque()).append(data)
            self._cond.notify_all()

    def recv(self, receiver: str, sender: str, tag: str, timeout: float) -> bytes | bytearray:
        """Wait for the next ``tag`` message from ``sender``; never longer than ``timeout``."""
        deadline = time.monotonic() + timeout
        key = (receiver, sender, tag)
        with self._cond:
            if receiver in self._waiting:
                raise ProtocolError(
                    f"party {receiver!r} is already waiting for {self._waiting[receiver][1]!r};"
                    " one party receives from one thread at a time",
                    party=receiver, step=tag,
                )
            self._waiting[receiver] = (sender, tag)
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
                    self._cond.wait(min(remaining, threading.TIMEOUT_MAX))
            finally:
                del self._waiting[receiver]

    def _deadlocked(self) -> bool:
        running = [p for p, s in self._state.items() if s == "running"]
        if not running or any(p not in self._waiting for p in running):
            return False
        return all(
            not self._mail.get((p, *self._waiting[p])) and self._state.get(self._waiting[p][0])
            == "running" for p in running
        )

    def finish(self, party: str, *, failed: bool) -> None:
        """Mark a party's role as returned (or raised); wakes anyone waiting on it."""
        with self._cond:
            self._state[party] = "failed" if failed else "done"
            self._cond.notify_all()

    def cancel(self, reason: str) -> None:
        """Stop the run: every pending and future send/recv raises :class:`RunCancelled`."""
        with self._cond:
            if self._cancelled is None:
                self._cancelled = reason
            self._cond.notify_all()

    def undelivered(self) -> dict[tuple[str, str, str], int]:
        """Messages sent but never received, by (receiver, sender, tag)."""
        with self._cond:
            return {k: len(v) for k, v in self._mail.items() if v}
