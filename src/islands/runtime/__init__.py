"""The party runtime: roles, messages, the wire codec, transports, runner and transcript.

A protocol is a set of roles, plain functions ``role(party, *inputs, **options)`` that
only talk through ``party.send``/``party.recv``. :func:`run_local` runs them in threads
of one process over :class:`MemoryTransport`, encoding every message with
:mod:`islands.runtime.wire` and recording it in a :class:`Transcript`.

Examples
--------
>>> from functools import partial
>>> def ping(party, n):
...     party.send("b", "ping", n)
...     return party.recv("b", "pong")
>>> def pong(party):
...     party.send("a", "pong", party.recv("a", "ping") + 1)
>>> run = run_local({"a": partial(ping, n=41), "b": pong})
>>> run.results["a"], len(run.transcript)
(42, 2)
"""

from islands.runtime import wire
from islands.runtime.party import DEFAULT_TIMEOUT, Party, check_party_names
from islands.runtime.runner import PartyInputError, Role, RunResult, run_local
from islands.runtime.transcript import Record, Totals, Transcript
from islands.runtime.transport import MemoryTransport, RunCancelled, Transport

__all__ = [
    "DEFAULT_TIMEOUT",
    "MemoryTransport",
    "Party",
    "PartyInputError",
    "Record",
    "Role",
    "RunCancelled",
    "RunResult",
    "Totals",
    "Transcript",
    "Transport",
    "check_party_names",
    "run_local",
    "wire",
]
