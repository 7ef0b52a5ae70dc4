"""The local runner: every role of a protocol in its own thread, in one process.

This is the embedded default that the estimators and the tests use. Messages still go
through the wire codec and an in-memory transport, so byte counts are real and nothing is
shared by reference between parties.

If a role raises, the runner cancels the others (their next send or receive raises
:class:`~islands.runtime.transport.RunCancelled`) and raises one error naming the party
and the step where the failure began. A role waiting on a peer that returned or failed
stops at once; a peer that goes silent is caught by the receive timeout.

Parties named in ``tolerate`` may fail without stopping the run (a federated-learning
client that crashes): their exception is recorded in :attr:`RunResult.failures`, and a
peer waiting on them gets :class:`~islands.errors.PeerFailedError` at once, which it may
catch and carry on.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

from islands.cores import CoreShare, usable_cores
from islands.errors import PeerFailedError, ProtocolError, ValidationError
from islands.runtime.allocator import large_buffers_to_os
from islands.runtime.identity import make_identities
from islands.runtime.party import DEFAULT_TIMEOUT, Party, check_party_names
from islands.runtime.transcript import Transcript
from islands.runtime.transport import MemoryTransport, RunCancelled

__all__ = ["PartyInputError", "Role", "RunResult", "run_local", "running_roles"]

Role = Callable[[Party], Any]
"""A role bound to its inputs: called with the party context, returns the party's result.

Bind inputs with :func:`functools.partial`, e.g. ``partial(s1, X=x, perturb=True)``.
"""

CANCEL_GRACE = 10.0
"""Seconds the runner waits for the other roles to stop after one failed or Ctrl-C."""


class PartyInputError(ValidationError):
    """A role rejected its own input (a ``ValueError`` inside the role)."""

    def __init__(self, message: str, *, party: str, step: str) -> None:
        super().__init__(message)
        self.party = party
        self.step = step


@dataclass(frozen=True)
class RunResult:
    """What a run returns.

    Attributes
    ----------
    results
        Each party's role return value, by party name; a tolerated party that failed
        has none.
    transcript
        Every message sent during the run.
    wall_time
        Seconds from the first role starting to the last returning.
    failures
        The exception of each tolerated party (see ``tolerate`` of :func:`run_local`)
        whose role raised, by party name in the run's party order; empty when none did.
    """

    results: dict[str, Any]
    transcript: Transcript
    wall_time: float
    failures: dict[str, BaseException] = field(default_factory=dict)

    def __getitem__(self, party: str) -> Any:
        return self.results[party]


def run_local(
    roles: Mapping[str, Role] | Sequence[tuple[str, Role]],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    keep_payloads: bool = False,
    transcript: Transcript | None = None,
    blas_threads: int | Literal["auto"] | None = "auto",
    tolerate: Iterable[str] = (),
) -> RunResult:
    """Run a protocol's roles in threads of this process and wait for all of them.

    The first run fixes the C allocator's mmap threshold for the process (glibc only),
    so that the buffers the role threads free go back to the OS instead of staying in
    each thread's arena (:mod:`islands.runtime.allocator`).

    Parameters
    ----------
    roles
        Party name → role, as a mapping or a sequence of ``(name, role)`` pairs (where a
        duplicate name is an error).
    timeout
        Seconds any party waits for one message before giving up on its sender.
    keep_payloads
        Keep every message's bytes in the transcript, for audits.
    transcript
        Record into this transcript instead of a new one.
    blas_threads
        Threads each BLAS/OpenMP library may use while the roles run (process-wide,
        through ``threadpoolctl``). ``"auto"`` shares the cores out: usable cores divided
        by the number of parties, at least 1, because roles that all call multi-threaded
        BLAS at once oversubscribe the cores (Swarm CCA at n = 60000 measured 7.4 s with
        the library default against 4.0 s so limited, on 2 cores); a step a role runs
        under :meth:`Party.alone <islands.runtime.Party.alone>` while the others wait gets
        every core. ``None`` leaves the libraries alone.
    tolerate
        Names of parties whose failure does not stop the run, e.g. the clients of a
        federated-learning server that must survive one crashing. When such a party's
        role raises an ``Exception``, the others go on: the party counts as failed, so a
        peer waiting on it gets :class:`~islands.errors.PeerFailedError` at once (which
        it may catch), and its exception is recorded in :attr:`RunResult.failures`
        instead of a result. Other exceptions (``KeyboardInterrupt``, ``SystemExit``)
        still stop the run and pass through.

    Returns
    -------
    RunResult
        Returned once every role has returned or, if tolerated, failed.

    Raises
    ------
    ValidationError
        Bad roles or options, e.g. a name in ``tolerate`` that is not a party of the run.
    PartyInputError
        A role not tolerated raised ``ValueError`` (bad input); names the party and step.
    ProtocolError
        Any other failure of a role not tolerated: names the party and step; the
        original exception is chained. Timeouts are
        :class:`~islands.errors.PeerTimeoutError` (also a ``TimeoutError``).
    """
    pairs = list(roles.items()) if isinstance(roles, Mapping) else list(roles)
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise ValidationError(f"roles must be (name, role) pairs; got {item!r}")
    names = check_party_names(name for name, _ in pairs)
    for name, role in pairs:
        if not callable(role):
            raise ValidationError(f"the role of party {name!r} is not callable: {role!r}")
    tolerated = _check_tolerate(tolerate, names)
    if transcript is None:
        transcript = Transcript(keep_payloads=keep_payloads)
    elif keep_payloads and not transcript.keep_payloads:
        raise ValidationError(
            "keep_payloads=True, but the transcript given was made with keep_payloads=False"
        )

    # every role a thread with its own malloc arena: large buffers must not stay in them
    large_buffers_to_os()
    transport = MemoryTransport(names)
    identities = make_identities(names)
    limit = _blas_threads(blas_threads, len(names))
    cores = (CoreShare(names, usable_cores(), limit)
             if blas_threads == "auto" and limit is not None else None)
    members = frozenset(names)
    contexts = {n: Party(n, names, transport, transcript, timeout=timeout,
                         identity=identities[n], cores=cores, members=members) for n in names}
    results: dict[str, Any] = {}
    failures: list[tuple[str, BaseException]] = []
    tolerated_failures: dict[str, BaseException] = {}
    lock = threading.Lock()
    finished = threading.Event()
    remaining = [len(names)]

    def body(name: str, role: Role) -> None:
        failed = fatal = False
        try:
            value = role(contexts[name])
            with lock:
                results[name] = value
        except Exception as exc:  # reported to the caller below, with context
            failed = True
            if name in tolerated:  # the run goes on; peers waiting on it stop at once
                with lock:
                    tolerated_failures[name] = exc
            else:
                fatal = True
                with lock:
                    failures.append((name, exc))
                transport.cancel(f"stopped because party {name!r} failed")
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: never tolerated
            failed = fatal = True
            with lock:
                failures.append((name, exc))
            transport.cancel(f"stopped because party {name!r} failed")
        finally:
            transport.finish(name, failed=failed)
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0 or fatal:
                    finished.set()

    threads = [
        threading.Thread(target=body, args=(name, role), name=f"islands-{name}", daemon=True)
        for name, role in pairs
    ]
    _ROLE_THREADS.update(threads)
    t0 = time.monotonic()
    with _blas_limit(limit):
        for thread in threads:
            thread.start()
        try:
            finished.wait()
        except BaseException:
            transport.cancel("interrupted")
            # a role thread still inside native code (PyTorch, BLAS) when the interpreter
            # exits is ended by pthread_exit, which aborts the process from C++ frames
            # ("terminate called without an active exception"); the roles stop at their
            # next message once cancelled, so wait for them as after a failure
            _join(threads)
            raise
    if failures:
        _join(threads)
        raise _with_tolerated(_root_error(failures, contexts), tolerated_failures)
    for thread in threads:
        thread.join()
    return RunResult(
        results=results, transcript=transcript, wall_time=time.monotonic() - t0,
        failures={n: tolerated_failures[n] for n in names if n in tolerated_failures},
    )


_ROLE_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def running_roles() -> list[str]:
    """Names of the threads of :func:`run_local` roles still running in this process.

    After Ctrl-C, a role left running past :data:`CANCEL_GRACE` is still in its own
    computation; an interpreter exit then ends its (daemon) thread with pthread_exit,
    which C++ frames of PyTorch turn into an abort. A command line may exit at once.
    """
    return sorted(t.name for t in list(_ROLE_THREADS) if t.is_alive())


def _join(threads: list[threading.Thread]) -> None:
    """Wait at most :data:`CANCEL_GRACE` seconds in all for cancelled role threads."""
    deadline = time.monotonic() + CANCEL_GRACE
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _check_tolerate(tolerate: Iterable[str], names: tuple[str, ...]) -> frozenset[str]:
    if isinstance(tolerate, str):
        raise ValidationError(
            "The 'tolerate' parameter of run_local must be an iterable of party names, "
            f"not a str. Got {tolerate!r}; write [{tolerate!r}] for one party."
        )
    try:
        given = list(tolerate)
    except TypeError:
        raise ValidationError(
            "The 'tolerate' parameter of run_local must be an iterable of party names. "
            f"Got {tolerate!r} instead."
        ) from None
    known = set(names)
    for name in given:
        if not (isinstance(name, str) and name in known):
            parties = repr(list(names)) if len(names) <= 10 else f"{len(names)} of them"
            raise ValidationError(
                f"cannot tolerate the failure of {name!r}: not a party of this run "
                f"(parties: {parties})"
            )
    return frozenset(given)


def _blas_threads(setting: int | Literal["auto"] | None, n_parties: int) -> int | None:
    """Return the BLAS threads each party may use, or None to leave the libraries alone."""
    if setting is None:
        return None
    if setting == "auto":
        return max(1, usable_cores() // n_parties)
    if isinstance(setting, int) and not isinstance(setting, bool) and setting >= 1:
        return setting
    raise ValidationError(
        "The 'blas_threads' parameter of run_local must be 'auto', None or an int >= 1. "
        f"Got {setting!r} instead."
    )


def _blas_limit(limit: int | None) -> AbstractContextManager[Any]:
    if limit is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    limiter: AbstractContextManager[Any] = threadpool_limits(limits=limit)
    return limiter


def _with_tolerated(error: Exception, tolerated: dict[str, BaseException]) -> Exception:
    """Add the tolerated parties' own errors to ``error``'s message.

    A run that stops because too many tolerated parties failed (say, every client of a
    horizontal-FL round) would otherwise name only the party that gave up, and the
    failures that caused it would be lost. They are also kept as ``error.tolerated``.
    """
    if not tolerated or not error.args or not isinstance(error.args[0], str):
        return error
    shown = [f"{name!r}: {type(exc).__name__}: {str(exc)[:300]}"
             for name, exc in list(tolerated.items())[:5]]
    more = f"; and {len(tolerated) - 5} more" if len(tolerated) > 5 else ""
    error.args = (f"{error.args[0]} [the failed parties' own errors: "
                  f"{'; '.join(shown)}{more}]", *error.args[1:])
    error.tolerated = dict(tolerated)  # type: ignore[attr-defined]
    return error


def _root_error(failures: list[tuple[str, BaseException]], contexts: dict[str, Party]) -> Exception:
    """Pick the error that began the failure and name its party and step.

    Failures are recorded in the order they happened; cancellations and "peer stopped"
    errors are consequences of an earlier failure, so the first other one is the cause.
    """
    def consequence(exc: BaseException) -> bool:
        return isinstance(exc, (RunCancelled, PeerFailedError))

    name, exc = next(((n, e) for n, e in failures if not consequence(e)), failures[0])
    if isinstance(exc, ProtocolError):
        return exc
    if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: pass through as is
        raise exc
    step = contexts[name].step
    message = f"party {name!r} failed at step {step!r}: {type(exc).__name__}: {exc}"
    error: Exception
    if isinstance(exc, ValueError):
        error = PartyInputError(message, party=name, step=step)
    else:
        error = ProtocolError(message, party=name, step=step)
    error.__cause__ = exc
    return error
