"""The exceptions islands raises.

Every error names the parameter, party or step it is about, what was expected and what
was got. The hierarchy is small and rooted at the built-in exceptions callers already
catch: bad input is a :class:`ValueError`, a protocol that cannot finish is a
:class:`RuntimeError` (or a :class:`TimeoutError` when a peer went silent).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DataNotFoundError",
    "DeadlockError",
    "IslandsError",
    "JobError",
    "OutputError",
    "PeerFailedError",
    "PeerTimeoutError",
    "ProtocolError",
    "TrackingError",
    "ValidationError",
    "WireError",
    "invalid_parameter",
]


class IslandsError(Exception):
    """Base class of every exception raised by islands itself."""


class ValidationError(IslandsError, ValueError):
    """An argument or a party's input is not acceptable; raised before anything is sent."""


class WireError(IslandsError, ValueError):
    """Bytes are not a valid islands wire message, or a value cannot be encoded."""


class DataNotFoundError(IslandsError, FileNotFoundError):
    """A data set is not where it was looked for; the message says how to get it."""


class ProtocolError(IslandsError, RuntimeError):
    """A protocol run failed; names the party and the step (message tag) where it failed.

    Parameters
    ----------
    message
        Human-readable description.
    party
        The party whose role failed (or that observed the failure).
    step
        The step where it failed: the tag of the message being sent or awaited, or the
        last tag that party handled.
    """

    def __init__(self, message: str, *, party: str | None = None, step: str | None = None):
        super().__init__(message)
        self.party = party
        self.step = step


class PeerTimeoutError(ProtocolError, TimeoutError):
    """A party waited longer than its timeout for a message from ``peer``."""

    def __init__(self, message: str, *, party: str, peer: str, tag: str, timeout: float):
        super().__init__(message, party=party, step=tag)
        self.peer = peer
        self.tag = tag
        self.timeout = timeout


class PeerFailedError(ProtocolError):
    """A peer stopped (raised, or finished) without sending a message this party awaits."""

    def __init__(self, message: str, *, party: str, peer: str, tag: str):
        super().__init__(message, party=party, step=tag)
        self.peer = peer
        self.tag = tag


class DeadlockError(ProtocolError):
    """Every running party is waiting for a message that no party will send."""


class JobError(ValidationError):
    """A job file that cannot run: names the file, section and key."""


class OutputError(IslandsError, OSError):
    """A result that cannot be written (disk full, no permission): names the path and why.

    ``errno`` and ``filename`` are the system's; the message is the one given.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else super().__str__()


class TrackingError(IslandsError, RuntimeError):
    """An experiment tracker (TensorBoard, MLflow) that cannot start: names it and where."""


def invalid_parameter(name: str, owner: str, expected: str, got: Any) -> ValidationError:
    """Build the standard error for a parameter outside its constraints.

    Examples
    --------
    >>> str(invalid_parameter("epsilon", "FederatedPCA", "a float in (0, inf)", -1))
    "The 'epsilon' parameter of FederatedPCA must be a float in (0, inf). Got -1 instead."
    """
    return ValidationError(
        f"The {name!r} parameter of {owner} must be {expected}. Got {got!r} instead."
    )
