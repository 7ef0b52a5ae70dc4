"""Worker processes for the pure-Python parts of the cryptography.

Curve arithmetic through ``cryptography`` (PSI) and modular multiplication chains on
``gmpy2`` integers (Paillier) hold the GIL, so threads do not spread them over cores;
worker processes do. The pools come from ``loky`` (joblib's process executor) rather than
:mod:`multiprocessing`, for three reasons a user meets on the first run:

- its workers start as fresh interpreters (fork + exec) that never re-import the user's
  ``__main__``: a script without an ``if __name__ == "__main__":`` guard, code read from
  standard input (``python - <<EOF``), ``python -c`` and a Jupyter kernel all work, where
  the standard library's ``spawn``/``forkserver`` re-run the script in every worker (or fail
  to find ``<stdin>``) and break the pool;
- no fork of the running process: the parties of an in-process run are threads, and forking
  a threaded process can copy a held lock into the child;
- a pool whose worker died reports it as :class:`~concurrent.futures.process.BrokenProcessPool`
  and is replaced here by a fresh one, so one killed worker never breaks later runs.

Only islands' own module-level functions and values cross to the workers (never bytes
received from another party without parsing them first). One pool per worker count is kept
for the life of the process and shut down at exit; idle workers exit after
:data:`IDLE_SECONDS` and are started again on demand.
"""

from __future__ import annotations

import atexit
import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

import numpy as np

from islands.cores import usable_cores
from islands.errors import ProtocolError, invalid_parameter
from islands.validation import describe

__all__ = [
    "IDLE_SECONDS",
    "TASK_TIMEOUT",
    "check_workers",
    "chunks",
    "process_pool",
    "run_in_workers",
    "usable_cores",
]

R = TypeVar("R")

TASK_TIMEOUT = 3600.0
"""Seconds one worker task may take before the caller gives up with an error."""

IDLE_SECONDS = 300
"""Seconds an idle worker waits for work before it exits (a new one starts on demand)."""

# The workers do big-integer and curve arithmetic; one BLAS/OpenMP/HEU thread each
# keeps them from oversubscribing the cores that the pool already fills.
_WORKER_ENV = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                      "MKL_NUM_THREADS", "YACL_NUM_THREADS")}

_POOLS: dict[int, Executor] = {}
_POOL_LOCK = threading.Lock()


def process_pool(workers: int) -> Executor:
    """Return the shared pool of ``workers`` processes, starting it on first use.

    A pool found broken (one of its workers died) is replaced by a fresh one.
    """
    from loky import ProcessPoolExecutor

    with _POOL_LOCK:
        pool = _POOLS.get(workers)
        if pool is None or _is_broken(pool):
            if pool is not None:
                pool.shutdown(wait=False, kill_workers=True)  # type: ignore[call-arg]
            pool = ProcessPoolExecutor(workers, timeout=IDLE_SECONDS, env=_WORKER_ENV)
            _POOLS[workers] = pool
        return pool


def _is_broken(pool: Executor) -> bool:
    flags = getattr(pool, "_flags", None)
    return flags is not None and (flags.broken is not None or flags.shutdown)


def _discard(workers: int, pool: Executor) -> None:
    with _POOL_LOCK:
        if _POOLS.get(workers) is pool:
            del _POOLS[workers]
    pool.shutdown(wait=False, kill_workers=True)  # type: ignore[call-arg]


def run_in_workers(fn: Callable[..., R], calls: Sequence[tuple[Any, ...]], workers: int,
                   *, timeout: float = TASK_TIMEOUT, owner: str = "worker pool") -> list[R]:
    """Run ``fn(*args)`` for each ``args`` in ``calls`` on ``workers`` processes, in order.

    ``fn`` must be a module-level function of islands (the workers import it by name). If
    a worker dies (killed, out of memory), the pool is replaced and the calls run once
    more; a second death, or a call running past ``timeout`` seconds, is a
    :class:`~islands.errors.ProtocolError` naming ``owner``.
    """
    for attempt in (1, 2):
        pool = process_pool(workers)
        futures = []
        try:
            futures = [pool.submit(fn, *args) for args in calls]
            return [f.result(timeout=timeout) for f in futures]
        except BrokenProcessPool as exc:
            _discard(workers, pool)
            if attempt == 2:
                raise ProtocolError(
                    f"{owner}: a worker process died twice while running {fn.__name__} "
                    f"({type(exc).__name__}: {exc})") from exc
        except FutureTimeout as exc:
            for f in futures:
                f.cancel()
            _discard(workers, pool)  # its workers may still be busy with the late call
            raise ProtocolError(
                f"{owner}: {fn.__name__} did not finish within {timeout:g} s in a worker "
                "process") from exc
    raise AssertionError("unreachable")  # pragma: no cover


@atexit.register
def _shutdown_pools() -> None:
    with _POOL_LOCK:
        for pool in _POOLS.values():
            pool.shutdown(wait=False, kill_workers=True)  # type: ignore[call-arg]
        _POOLS.clear()


def check_workers(workers: int | None, owner: str) -> int:
    """Return ``workers`` (None: the usable cores) after checking it is an int ≥ 1."""
    if workers is None:
        return usable_cores()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise invalid_parameter("workers", owner, "None or an int >= 1", describe(workers))
    return workers


def chunks(n: int, parts: int) -> list[tuple[int, int]]:
    """Split range(n) into at most ``parts`` contiguous, non-empty (lo, hi) pieces."""
    parts = max(1, min(parts, n))
    bounds = np.linspace(0, n, parts + 1).astype(int)
    return [(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds) if hi > lo]
