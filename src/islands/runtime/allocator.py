"""The C allocator of a process that hosts many parties: large buffers go back to the OS.

glibc's ``malloc`` gives every thread that allocates an arena of its own (up to eight
per core) and serves a request from the arena's heap unless it is at least the *mmap
threshold*, which starts at 128 KiB but rises to the size of any mmapped block freed,
up to 32 MiB. A freed heap block stays with its arena for the next request of that
thread; only the free top of a heap is returned. In a simulation every party is a thread,
and numpy and torch buffers (a layer's weights, gradients, activations, a block of a
model vector) are all allocated through ``malloc``: after the first few model-sized
arrays are freed, every buffer below 32 MiB lands in some thread's arena, and each
client thread (and each training thread) keeps the peak of what it once held, mixed
with the small objects that pin the heap.

Measured with ``benchmarks/bench_resnet.py`` (ResNet-18, M = 44.7 MB, 10 clients,
secure aggregation, one local step), the peak resident memory of a round grew by about
0.75·M with every client that had taken its turn, and reached 23–26·M at
``concurrency=1`` (92–96·M at 8) against 13.8·M with a fixed threshold of 128 KiB and
the same code. :func:`large_buffers_to_os` fixes the threshold (``mallopt``,
``M_MMAP_THRESHOLD``), which also switches off glibc's dynamic adjustment: every buffer
of 128 KiB or more is mapped on its own and unmapped when freed, whichever thread
freed it. The cost is a page fault per 4 KiB page of each such buffer (a few per cent
of a ResNet-18 step on a CPU, within the noise of the benchmark).

It is process-wide and stays set: :func:`islands.runtime.run_local` calls it when it
starts its role threads. Elsewhere than glibc (musl, macOS, Windows) it does nothing;
the environment variable ``MALLOC_MMAP_THRESHOLD_`` set by the user takes precedence
(glibc reads it at start-up, and then this module leaves the threshold alone).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import threading

__all__ = ["MMAP_THRESHOLD", "large_buffers_to_os"]

MMAP_THRESHOLD = 128 * 1024
"""Bytes from which a ``malloc`` block is mapped on its own (glibc's initial default)."""

_M_MMAP_THRESHOLD = -3  # from glibc's malloc.h
_ENV = "MALLOC_MMAP_THRESHOLD_"
_lock = threading.Lock()
_done: list[bool] = []


def large_buffers_to_os(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes, once per process.

    Returns whether the threshold is now fixed by this call or an earlier one (False
    off glibc, when ``mallopt`` refuses, or when the user's ``MALLOC_MMAP_THRESHOLD_``
    governs).
    """
    with _lock:
        if _done:
            return _done[0]
        _done.append(_set_threshold(threshold))
        return _done[0]


def _set_threshold(threshold: int) -> bool:
    if os.environ.get(_ENV) is not None or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.restype, mallopt.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, int(threshold)))
