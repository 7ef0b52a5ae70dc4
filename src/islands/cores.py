"""The cores one process shares among the parties it hosts (:func:`islands.runtime.run_local`).

Roles that all call multi-threaded BLAS at once oversubscribe the cores, so
``run_local(blas_threads="auto")`` limits every BLAS/OpenMP pool to cores // parties. In
a protocol whose steps alternate (one party computes while the others wait for its
message), that limit leaves cores idle. :meth:`CoreShare.alone` lends them back: a role
wraps a step that the protocol runs while every other party waits, and the step gets
every core. OpenBLAS's thread count is process-wide, so it changes only when every other
hosted party is inside :meth:`islands.runtime.Party.recv`, never under another party's
BLAS call.

Written here because no library shares a process's BLAS threads among cooperating Python
threads; ``threadpoolctl`` finds the loaded OpenBLAS libraries and sets the shared limit.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

__all__ = ["CoreShare", "usable_cores"]

SETTLE = 0.2
"""Seconds :meth:`CoreShare.alone` waits for the other parties to reach their ``recv``."""


def usable_cores() -> int:
    """Return the CPU cores this process may run on (its affinity mask where there is one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


class CoreShare:
    """Track which hosted parties wait for a message; lend their cores to the one computing.

    Parameters
    ----------
    names
        The parties this process hosts.
    cores
        The usable cores.
    shared
        The BLAS threads each party gets while several may compute (cores // parties).
    """

    def __init__(self, names: Sequence[str], cores: int, shared: int) -> None:
        self._names = frozenset(names)
        self._cores = cores
        self._shared = shared
        self._waiting: set[str] = set()
        self._cond = threading.Condition()

    @contextmanager
    def waiting(self, name: str) -> Iterator[None]:
        """Mark ``name`` as waiting for a message for the duration of the block."""
        with self._cond:
            self._waiting.add(name)
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._waiting.discard(name)

    def _others_wait(self, name: str) -> bool:
        return self._waiting >= self._names - {name}

    @contextmanager
    def alone(self, name: str, settle: float = SETTLE) -> Iterator[bool]:
        """Give ``name`` every core for the block if the other parties all wait.

        Yields whether it did. The others are given ``settle`` seconds to reach their
        ``recv`` (a peer that has just sent this party its message is on its way there);
        otherwise the block runs with the shared limit.
        """
        if self._cores <= self._shared:
            yield False
            return
        with self._cond:
            idle = self._cond.wait_for(lambda: self._others_wait(name), timeout=settle)
        setters = _local_setters() if idle else []
        if not setters:
            yield False
            return
        previous = [setter(self._cores) for setter in setters]
        try:
            yield True
        finally:
            for setter, count in zip(setters, previous, strict=True):
                setter(count)


def _local_setters() -> list[Callable[[int], int]]:
    """``openblas_set_num_threads_local`` of every OpenBLAS loaded (OpenBLAS >= 0.3.27).

    It returns the previous count, and it takes effect when called from any thread;
    ``openblas_set_num_threads`` called from a thread other than the main one does not
    raise the count again (OpenBLAS 0.3.31, as bundled with numpy 2.4 and scipy 1.16).
    Other BLAS libraries keep the shared limit.
    """
    from threadpoolctl import threadpool_info

    found: list[Callable[[int], int]] = []
    for lib in threadpool_info():
        if lib.get("internal_api") != "openblas":
            continue
        try:
            setter = ctypes.CDLL(lib["filepath"]).openblas_set_num_threads_local
        except (OSError, AttributeError):
            continue
        setter.restype, setter.argtypes = ctypes.c_int, [ctypes.c_int]
        found.append(setter)
    return found
