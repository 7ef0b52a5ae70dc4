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
``concurrency=1`` (92–96·M at 8) against 13.8·M with a fixed threshold and the same
code. :func:`large_buffers_to_os` fixes the threshold (``mallopt``, ``M_MMAP_THRESHOLD``),
which also switches off glibc's dynamic adjustment: every buffer of 1 MiB or more is
mapped on its own and unmapped when freed, whichever thread freed it.

Each such buffer costs a page fault per 4 KiB page, about 1.3 µs each on this kind of
VM: 0.2 ms for a 0.64 MB vector, ten times the copy that fills it. The threshold is
therefore 1 MiB, not glibc's initial 128 KiB: the model-sized vectors of a small model
(the 784-200-10 MLP's 0.64 MB, its 0.63 MB layer gradient, made anew at every step)
are reused from the arenas. And the *trim threshold* (``M_TRIM_THRESHOLD``, which a
fixed mmap threshold leaves at 128 KiB) is raised to 4 MiB, so that an arena keeps
that much free memory at its top instead of returning it and faulting it in again at
the next step. Issue 40 measured a 3-client FedAvg epoch with one step a round (625
rounds of that MLP): system CPU 3.1–3.5 s with 128 KiB and no trim setting, 0.7–1.0 s
with these two, and the ResNet-18 round's peak within its target (``bench_resnet.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import platform
import threading
from collections.abc import Iterator

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "large_buffers_to_os", "release_arena",
           "reuse_buffers"]

MMAP_THRESHOLD = 1 << 20
"""Bytes from which a ``malloc`` block is mapped on its own."""

TRIM_THRESHOLD = 4 << 20
"""Free bytes at the top of an arena from which glibc returns them to the OS."""

# from glibc's malloc.h: each option and the environment variable that overrides it
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_ENV = {_M_MMAP_THRESHOLD: "MALLOC_MMAP_THRESHOLD_", _M_TRIM_THRESHOLD: "MALLOC_TRIM_THRESHOLD_"}
_lock = threading.Lock()
_done: list[bool] = []
_reusing: list[int] = [0]  # blocks of reuse_buffers open now

REUSE_LIMIT = 32 << 20
"""glibc's largest mmap threshold on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``)."""


def large_buffers_to_os(threshold: int = MMAP_THRESHOLD, trim: int = TRIM_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes and its trim threshold at ``trim``.

    Once per process. Returns whether the mmap threshold is now fixed by this call or an
    earlier one (False off glibc, when ``mallopt`` refuses, or when the user's
    ``MALLOC_MMAP_THRESHOLD_`` governs).
    """
    with _lock:
        if _done:
            return _done[0]
        _done.append(_set(_M_MMAP_THRESHOLD, threshold))
        _set(_M_TRIM_THRESHOLD, trim)
        return _done[0]


def _set(option: int, value: int) -> bool:
    if os.environ.get(_ENV[option]) is not None or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.restype, mallopt.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(option, int(value)))


@contextlib.contextmanager
def reuse_buffers(up_to: int = REUSE_LIMIT) -> Iterator[None]:
    """Inside the block, serve buffers below ``up_to`` bytes from the arenas and keep them.

    For a computation that makes buffers of tens of MB anew at every step, such as the
    batched training of many clients (:mod:`islands.hfl.torch.batched`: a 50-client chunk
    of the 784-200-10 MLP makes a 31 MB weight gradient a step), each of which would
    otherwise be mapped and faulted in page by page. The thresholds of
    :func:`large_buffers_to_os` come back when the last open block ends, and the main
    arena's free top and every arena's free chunks are returned (``malloc_trim``). The
    free top of another thread's arena is returned only at that thread's next large free:
    each thread that allocated inside the block calls :func:`release_arena` after it.
    Process-wide, like the thresholds: keep the block around the computation itself.
    """
    fixed = large_buffers_to_os()
    if not fixed:
        yield
        return
    with _lock:
        _reusing[0] += 1
        if _reusing[0] == 1:
            _set(_M_MMAP_THRESHOLD, min(up_to, REUSE_LIMIT))
            _set(_M_TRIM_THRESHOLD, 2 * REUSE_LIMIT)
    try:
        yield
    finally:
        with _lock:
            _reusing[0] -= 1
            if _reusing[0] == 0:
                _set(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                _set(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
                _trim()


_RELEASE_BYTES = 1 << 17


def release_arena() -> None:
    """Return the free top of the calling thread's arena to the OS (glibc).

    Freeing a block of 128 KiB (above glibc's consolidation threshold, below the mmap
    threshold) makes glibc trim the top of the freeing thread's heap beyond the trim
    threshold; nothing else frees it once the thread goes idle.
    """
    block = bytearray(_RELEASE_BYTES)
    del block


def _trim() -> None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(ctypes.c_size_t(0))
    except (OSError, AttributeError):
        pass
