"""Worker processes for the pure-Python parts of the cryptography.

Curve arithmetic through ``cryptography`` (PSI) and modular multiplication chains on
``gmpy2`` integers (Paillier) hold the GIL, so threads do not spread them over cores;
worker processes do. One pool per worker count is kept for the life of the process and
shut down at exit. The pools use the ``forkserver`` start method where available: the
parties of an in-process run are threads, and forking a threaded process can copy a
held lock into the child. Only our own functions and values cross to the workers (never
bytes received from another party without parsing them first).
"""

from __future__ import annotations

import atexit
import itertools
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from islands.errors import invalid_parameter
from islands.validation import describe

__all__ = ["check_workers", "chunks", "process_pool", "usable_cores"]

_POOLS: dict[int, ProcessPoolExecutor] = {}
_POOL_LOCK = threading.Lock()


def usable_cores() -> int:
    """Return the CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def process_pool(workers: int) -> ProcessPoolExecutor:
    """Return the shared pool of ``workers`` processes, starting it on first use."""
    with _POOL_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            method = ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                      else "spawn")
            pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method))
            _POOLS[workers] = pool
        return pool


@atexit.register
def _shutdown_pools() -> None:
    with _POOL_LOCK:
        for pool in _POOLS.values():
            pool.shutdown(wait=False, cancel_futures=True)
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
