"""Helpers shared by the benchmark scripts: timing, formatting, provenance, environment.

Benchmarks run as scripts (``python benchmarks/bench_x.py``), so this module is imported
from the scripts' own folder.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy

import islands


def limit_threads(n: int) -> None:
    """Cap every loaded BLAS/OpenMP pool at n threads (n = 0: leave them alone)."""
    if n > 0:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n)


def source_digest(subpackages: Sequence[str] | None = None) -> str:
    """SHA-256 (first 16 hex) of the islands sources measured: which code ran.

    With ``subpackages``, only the top-level modules and those subpackages count, so
    edits elsewhere in the package do not change the digest.
    """
    root = Path(islands.__file__).parent
    if subpackages is None:
        paths = list(root.rglob("*.py"))
    else:
        paths = [*root.glob("*.py"),
                 *(f for sub in subpackages for f in (root / sub).rglob("*.py"))]
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants, from ``/proc`` (Linux)."""
    from collections import defaultdict

    kids: dict[int, list[int]] = defaultdict(list)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        kids[int(stat.rsplit(")", 1)[1].split()[1])].append(int(entry.name))
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(kids.get(pid, ()))
    return out


def proc_kb(name: str, field: str, pid: int | str = "self") -> int:
    """A kB field of ``/proc/<pid>/<name>`` (``status``: VmRSS, VmHWM; ``smaps_rollup``:
    Pss); 0 if the process is gone."""
    try:
        with open(f"/proc/{pid}/{name}") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def status_kb(field: str, pid: int | str = "self") -> int:
    """A field of ``/proc/<pid>/status`` in kB (VmRSS, VmHWM); 0 if the process is gone."""
    return proc_kb("status", field, pid)


def reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM): Linux >= 4.0."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def median(xs: list[float]) -> float:
    """Median of timings."""
    return float(statistics.median(xs))


def once(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Time one call (after a garbage collection); returns (seconds, result)."""
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def timed(fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn``, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return median(times)


def fmt_s(seconds: float) -> str:
    """Seconds for a table."""
    return f"{seconds:.3f} s" if seconds < 100 else f"{seconds:.1f} s"


def fmt_bytes(n: float) -> str:
    """Bytes for a table."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def verdict(ok: bool | None) -> str:
    """'met', 'MISSED' or '-' (no target)."""
    return "-" if ok is None else ("met" if ok else "MISSED")


def environment() -> dict[str, Any]:
    """Versions, CPUs and BLAS pools of the machine the benchmark ran on."""
    env: dict[str, Any] = {"python": platform.python_version(), "numpy": np.__version__,
                           "scipy": scipy.__version__, "cpus": os.cpu_count(),
                           "machine": platform.machine(), "platform": platform.platform()}
    try:
        import sklearn

        env["sklearn"] = sklearn.__version__
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_info

        env["blas"] = [{k: i.get(k) for k in ("internal_api", "version", "num_threads",
                                              "architecture")} for i in threadpool_info()]
    except ImportError:
        pass
    return env


def finish(name: str, args: Any, digests: set[str], results: dict[str, Any],
           skipped: dict[str, str]) -> None:
    """Print provenance (warning if the sources changed mid-run) and write ``--json``."""
    first = sorted(digests)[0] if len(digests) == 1 else "several"
    print(f"islands sources: {first}" + ("" if len(digests) == 1 else
          f"; WARNING: they changed during the run ({sorted(digests)}): figures mix versions"))
    if args.json:
        args.json.write_text(json.dumps({"benchmark": name, "quick": args.quick,
                                         "blas_threads": args.blas_threads,
                                         "argv": sys.argv[1:],
                                         "source_digests": sorted(digests),
                                         "environment": environment(), "results": results,
                                         "skipped": skipped}, indent=2))
