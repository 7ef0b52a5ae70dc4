"""The party context: everything a role may do to talk to its peers.

A role is a plain function ``role(party, *inputs, **options)``. It never touches another
role's memory; it calls :meth:`Party.send`, :meth:`Party.recv`, :meth:`Party.broadcast`
and :meth:`Party.gather`. Every payload is encoded to bytes by the wire codec before it
leaves (so an unsupported payload fails at the sender, before anything is sent) and
decoded afresh on receipt.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from islands.cores import SETTLE, CoreShare
from islands.errors import ProtocolError, ValidationError, WireError
from islands.runtime import wire
from islands.runtime.identity import Identity
from islands.runtime.transcript import Transcript
from islands.runtime.transport import Transport

__all__ = ["DEFAULT_TIMEOUT", "Party", "check_party_names"]

DEFAULT_TIMEOUT = 120.0
"""Seconds a party waits for one message before it gives up on the sender."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_MAX_TAG = 200


def check_party_names(names: Iterable[Any]) -> tuple[str, ...]:
    """Validate party names: unique str matching ``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}``.

    Raises
    ------
    ValidationError
        Naming the offending name.
    """
    seen: dict[str, None] = {}
    for name in names:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValidationError(
                f"party names must be str of letters, digits, '_', '.', '-' (1-64 chars, "
                f"starting with a letter or digit); got {name!r}"
            )
        if name in seen:
            raise ValidationError(f"duplicate party name {name!r}")
        seen[name] = None
    if not seen:
        raise ValidationError("a run needs at least one party")
    return tuple(seen)


class Party:
    """One organisation's handle on the federation, given to its role function.

    Parameters
    ----------
    name
        This party's name.
    parties
        All party names in the federation, this one included.
    transport
        Carries encoded messages.
    transcript
        Where sent messages are recorded.
    timeout
        Default seconds :meth:`recv` waits for a message.
    identity
        This party's signing key and its peers' public keys
        (:mod:`islands.runtime.identity`); the runners always give one.
    cores
        The cores this process shares among the parties it hosts (``run_local``);
        None when the party has its process to itself.
    members
        ``frozenset(parties)``, made once for all the parties a runner hosts (None: made
        here).
    """

    def __init__(
        self,
        name: str,
        parties: Sequence[str],
        transport: Transport,
        transcript: Transcript,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        identity: Identity | None = None,
        cores: CoreShare | None = None,
        members: frozenset[str] | None = None,
    ) -> None:
        self._parties = tuple(parties)
        if not isinstance(name, str) or not all(isinstance(p, str) for p in self._parties):
            raise ValidationError(f"party names must be str; got {name!r} in {self._parties!r}")
        # a party checks each peer it addresses against the set of names, and lists its
        # peers only when asked: run_local hosts a thousand parties and hands them one set
        self._members = frozenset(self._parties) if members is None else members
        if len(self._members) != len(self._parties):
            raise ValidationError(f"the parties must be distinct; got {list(self._parties)}")
        if not self._members.issuperset(self._parties):
            raise ValidationError("Party: members must be the set of the parties")
        if name not in self._members:
            raise ValidationError(f"party {name!r} is not in the federation {list(parties)}")
        self._name = name
        self._peer_list: tuple[str, ...] | None = None
        self._transport = transport
        self._transcript = transcript
        self._timeout = _check_timeout(timeout)
        self._t0 = time.monotonic()
        self._step = "start"
        self._identity = identity
        self._cores = cores

    @property
    def name(self) -> str:
        """Name of this party."""
        return self._name

    @property
    def peers(self) -> tuple[str, ...]:
        """The other parties' names, in federation order."""
        return self._peers

    @property
    def _peers(self) -> tuple[str, ...]:
        if self._peer_list is None:
            self._peer_list = tuple(p for p in self._parties if p != self._name)
        return self._peer_list

    @property
    def parties(self) -> tuple[str, ...]:
        """All parties' names, this one included."""
        return self._parties

    @property
    def timeout(self) -> float:
        """Default seconds :meth:`recv` waits for a message (the run's timeout)."""
        return self._timeout

    @property
    def identity(self) -> Identity:
        """The signing identity: sign, and verify what a peer signed."""
        if self._identity is None:
            raise ProtocolError(f"party {self._name!r} has no signing identity in this run "
                                "(run it with run_local or run_party)", party=self._name)
        return self._identity

    @property
    def step(self) -> str:
        """Where this party is: the message being sent or awaited, or the last one handled."""
        return self._step

    def __repr__(self) -> str:
        return f"Party({self._name!r}, peers={list(self._peers)})"

    # ----------------------------------------------------------------- validation
    def _check_peer(self, peer: Any, what: str) -> str:
        if peer == self._name:
            raise ValidationError(f"party {self._name!r} cannot {what} itself")
        if not isinstance(peer, str) or peer not in self._members:
            raise ValidationError(
                f"party {self._name!r} cannot {what} {peer!r}: unknown party "
                f"(peers: {list(self._peers)})"
            )
        return peer

    def _check_tag(self, tag: Any) -> str:
        if not isinstance(tag, str) or not tag or len(tag) > _MAX_TAG:
            raise ValidationError(
                f"message tags must be non-empty str of at most {_MAX_TAG} characters; "
                f"party {self._name!r} used {tag!r}"
            )
        return tag

    # ----------------------------------------------------------------- messaging
    def send(self, to: str, tag: str, payload: Any) -> int:
        """Encode ``payload`` and send it to peer ``to`` under ``tag``.

        Returns
        -------
        int
            Bytes sent.

        Raises
        ------
        ValidationError
            Unknown peer, sending to oneself, or a bad tag.
        WireError
            The payload holds something the wire format does not carry.
        """
        to = self._check_peer(to, "send to")
        tag = self._check_tag(tag)
        self._step = tag
        data = self._encode(payload, tag, [to])
        self._deliver(to, tag, data, wire.summarize(payload))
        return len(data)

    def _encode(self, payload: Any, tag: str, receivers: Sequence[str]) -> bytearray:
        try:
            return wire.encode_buffer(payload)
        except WireError as exc:
            raise WireError(
                f"party {self._name!r} cannot send {tag!r} to {', '.join(map(repr, receivers))}:"
                f" {exc}"
            ) from exc

    def _deliver(self, to: str, tag: str, data: bytearray, summary: str) -> None:
        # snapshot first: the receiver owns ``data`` once the transport has it; record
        # only what was actually handed over
        nbytes = len(data)
        snapshot = bytes(data) if self._transcript.keep_payloads else None
        sent_at = time.monotonic() - self._t0
        self._transport.send(self._name, to, tag, data)
        self._transcript.add(sender=self._name, receiver=to, tag=tag, nbytes=nbytes,
                             data=snapshot, summary=summary, time=sent_at)

    def recv(self, frm: str, tag: str, timeout: float | None = None) -> Any:
        """Wait for the next ``tag`` message from ``frm`` and return its decoded payload.

        Raises
        ------
        PeerTimeoutError
            If nothing arrives within ``timeout`` seconds (default: the run's timeout).
        PeerFailedError
            If ``frm`` stopped without sending it (detected at once where the transport can).
        """
        frm = self._check_peer(frm, "receive from")
        tag = self._check_tag(tag)
        wait = self._timeout if timeout is None else _check_timeout(timeout)
        self._step = tag
        with self._cores.waiting(self._name) if self._cores else contextlib.nullcontext():
            data = self._transport.recv(self._name, frm, tag, wait)
        try:
            # a bytearray is this party's own copy: large arrays become views into it
            return wire.decode_buffer(data) if type(data) is bytearray else wire.decode(data)
        except WireError as exc:
            raise ProtocolError(
                f"party {self._name!r} received a malformed {tag!r} message from {frm!r}: {exc}",
                party=self._name, step=tag,
            ) from exc

    @contextlib.contextmanager
    def alone(self, settle: float = SETTLE) -> Iterator[bool]:
        """Compute a step with every core while the other parties wait for this one.

        A role wraps a step its protocol runs while every other party waits for its next
        message, and sends that message after the block. Where ``run_local`` hosts
        several parties in one process and shares the cores out (``blas_threads=
        "auto"``), the block gets all of them once the others are inside :meth:`recv`,
        waiting up to ``settle`` seconds for them to get there
        (:class:`islands.cores.CoreShare`); elsewhere it changes nothing. Yields
        whether the cores were lent.
        """
        if self._cores is None:
            yield False
            return
        with self._cores.alone(self._name, settle) as lent:
            yield lent

    def broadcast(self, tag: str, payload: Any, to: Iterable[str] | None = None) -> int:
        """Send the same payload to several peers (all by default); encodes it once.

        Returns
        -------
        int
            Bytes sent in total.
        """
        targets = self._peers if to is None else tuple(self._check_peer(p, "send to") for p in to)
        tag = self._check_tag(tag)
        self._step = tag
        if not targets:
            return 0
        data = self._encode(payload, tag, targets)
        summary = wire.summarize(payload)
        # every receiver owns its buffer: copy before the first one can write into it
        copies = [data] + [bytearray(data) for _ in targets[1:]]
        for peer, buf in zip(targets, copies, strict=True):
            self._deliver(peer, tag, buf, summary)
        return len(data) * len(targets)

    def gather(
        self, tag: str, frm: Iterable[str] | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Receive one ``tag`` message from each of several peers (all by default).

        ``timeout`` bounds the whole gather, not each message.

        Returns
        -------
        dict
            Payloads by sender, in the order the senders were given.
        """
        sources = self._peers if frm is None else tuple(
            self._check_peer(p, "receive from") for p in frm
        )
        wait = self._timeout if timeout is None else _check_timeout(timeout)
        deadline = time.monotonic() + wait
        out: dict[str, Any] = {}
        for peer in sources:
            out[peer] = self.recv(peer, tag, timeout=max(deadline - time.monotonic(), 1e-3))
        return out


def _check_timeout(timeout: Any) -> float:
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not 0 < timeout < math.inf):
        raise ValidationError(
            "The 'timeout' parameter must be a positive, finite number of seconds. "
            f"Got {timeout!r} instead."
        )
    return float(timeout)
