"""The transcript: a record of every message a protocol run sent.

The transcript is how islands measures communication (bytes per sender, receiver and
tag, to compare with a paper's cost formulas) and what the audits attack: with
``keep_payloads=True`` each record keeps the exact encoded bytes, and
:meth:`Transcript.received_by` hands an audit precisely what one party received, decoded
afresh from those bytes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from islands.runtime import wire

__all__ = ["Record", "Totals", "Transcript"]

GroupBy = Literal["sender", "receiver", "tag", "pair"]


@dataclass(frozen=True)
class Record:
    """One message as it crossed the wire.

    Attributes
    ----------
    seq
        Position in the run, from 0, in the order messages were sent.
    sender, receiver, tag
        Who sent it to whom, and the protocol step it belongs to.
    nbytes
        Size of the encoded message in bytes (what a network would carry).
    summary
        Structure, dtypes and shapes of the payload; never its values.
    time
        Seconds since the run started when the message was sent.
    data
        The encoded bytes, kept only when the run was asked to keep payloads.
    """

    seq: int
    sender: str
    receiver: str
    tag: str
    nbytes: int
    summary: str
    time: float
    data: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def payload(self) -> Any:
        """The payload exactly as the receiver decoded it (a fresh, independent copy).

        Raises
        ------
        LookupError
            If the run did not keep payloads.
        """
        if self.data is None:
            raise LookupError(
                f"message #{self.seq} ({self.tag!r}) was recorded without its payload; "
                "run the protocol with keep_payloads=True"
            )
        return wire.decode(self.data)

    def to_dict(self) -> dict[str, Any]:
        """Everything but the payload, as JSON-ready values."""
        return {
            "seq": self.seq, "sender": self.sender, "receiver": self.receiver, "tag": self.tag,
            "nbytes": self.nbytes, "summary": self.summary, "time": round(self.time, 6),
        }


@dataclass(frozen=True)
class Totals:
    """Message count and bytes of a group of records."""

    messages: int
    nbytes: int


class Transcript:
    """A thread-safe, append-only log of the messages of one run.

    Parameters
    ----------
    keep_payloads
        Keep each message's encoded bytes so that audits can replay what a party received.
        Costs memory equal to the traffic; off by default.
    """

    def __init__(self, *, keep_payloads: bool = False) -> None:
        self.keep_payloads = keep_payloads
        self._records: list[Record] = []
        self._lock = threading.Lock()

    def add(
        self, *, sender: str, receiver: str, tag: str, nbytes: int, data: bytes | None,
        summary: str, time: float,
    ) -> Record:
        """Append a message and return its record (with the next sequence number).

        ``data`` (the encoded message) is kept only when the transcript keeps payloads.
        """
        with self._lock:
            record = Record(
                seq=len(self._records), sender=sender, receiver=receiver, tag=tag,
                nbytes=nbytes, summary=summary, time=time,
                data=data if self.keep_payloads else None,
            )
            self._records.append(record)
        return record

    @property
    def records(self) -> tuple[Record, ...]:
        """All records, in sending order."""
        with self._lock:
            return tuple(self._records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __repr__(self) -> str:
        return f"Transcript({len(self)} messages, {self.total_bytes} bytes)"

    @property
    def total_bytes(self) -> int:
        """Bytes of all messages together."""
        return sum(r.nbytes for r in self.records)

    def received_by(self, party: str) -> list[Record]:
        """Return the records of the messages ``party`` received, in order: what it saw."""
        return [r for r in self.records if r.receiver == party]

    def sent_by(self, party: str) -> list[Record]:
        """Return the records of the messages ``party`` sent, in order."""
        return [r for r in self.records if r.sender == party]

    def with_tag(self, tag: str) -> list[Record]:
        """Return the records of the messages with this tag, in order."""
        return [r for r in self.records if r.tag == tag]

    def totals(self, by: GroupBy = "sender") -> dict[str, Totals]:
        """Messages and bytes grouped by sender, receiver, tag, or ``"sender->receiver"``."""
        if by not in ("sender", "receiver", "tag", "pair"):
            raise ValueError(
                f"The 'by' parameter of Transcript.totals must be one of 'sender', "
                f"'receiver', 'tag', 'pair'. Got {by!r} instead."
            )
        counts: dict[str, list[int]] = {}
        for r in self.records:
            key = f"{r.sender}->{r.receiver}" if by == "pair" else getattr(r, by)
            acc = counts.setdefault(key, [0, 0])
            acc[0] += 1
            acc[1] += r.nbytes
        return {k: Totals(messages=m, nbytes=b) for k, (m, b) in counts.items()}

    def to_dict(self) -> dict[str, Any]:
        """Return the records (without payloads) and totals as JSON-ready values."""
        def group(by: GroupBy) -> dict[str, dict[str, int]]:
            return {k: {"messages": t.messages, "nbytes": t.nbytes}
                    for k, t in self.totals(by).items()}

        return {
            "messages": len(self),
            "nbytes": self.total_bytes,
            "by_sender": group("sender"),
            "by_receiver": group("receiver"),
            "by_tag": group("tag"),
            "records": [r.to_dict() for r in self.records],
        }

    def to_json(self, *, indent: int | None = None) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent)
