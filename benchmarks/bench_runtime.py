"""Runtime benchmark: one float64 array through the wire codec and the in-memory transport.

Measures encode + transfer + decode of 1 MB and 100 MB float64 arrays (``Party.send``
then ``Party.recv`` over :class:`MemoryTransport`, the transcript recording as in a real
run) against a plain ``numpy`` copy of the same array, measured in the same run, and
reports the ratio. Targets (foundation issue): codec throughput >= 1 GB/s and within 4x
of the copy.

    python benchmarks/bench_runtime.py [--json OUT] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from islands.runtime import MemoryTransport, Party, Transcript

TARGET_GBPS = 1.0
TARGET_RATIO = 4.0


def timed(fn: Callable[[], Any], repeats: int) -> list[float]:
    times = []
    fn()  # warm-up: first touch of fresh pages, imports
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        del out
    return times


def bench(nbytes: int, repeats: int) -> dict[str, Any]:
    x = np.random.default_rng(0).standard_normal(nbytes // 8)
    transport = MemoryTransport(["a", "b"])
    transcript = Transcript()
    a = Party("a", ["a", "b"], transport, transcript)
    b = Party("b", ["a", "b"], transport, transcript)

    def through_runtime() -> np.ndarray:
        a.send("b", "x", x)
        return b.recv("a", "x")

    got = through_runtime()
    assert np.array_equal(got, x) and got is not x
    copy = statistics.median(timed(x.copy, repeats))
    ours = statistics.median(timed(through_runtime, repeats))
    return {
        "nbytes": x.nbytes,
        "numpy_copy_s": copy,
        "runtime_s": ours,
        "ratio_to_copy": ours / copy,
        "runtime_GBps": x.nbytes / ours / 1e9,
        "copy_GBps": x.nbytes / copy / 1e9,
        "wire_bytes": transcript.records[-1].nbytes,
        "meets_targets": x.nbytes / ours / 1e9 >= TARGET_GBPS and ours / copy <= TARGET_RATIO,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--repeats", type=int, default=0, help="override repeats per size")
    args = parser.parse_args()
    rows = []
    for nbytes, repeats in ((1_000_000, 300), (100_000_000, 9)):
        rows.append(bench(nbytes, args.repeats or repeats))
    print(f"runtime benchmark (median of repeats), Python {platform.python_version()}, "
          f"numpy {np.__version__}")
    print(f"{'size':>8} {'numpy copy':>12} {'islands':>12} {'ratio':>7} {'GB/s':>7}  targets")
    for r in rows:
        print(f"{r['nbytes'] / 1e6:>6.0f}MB {r['numpy_copy_s'] * 1e3:>10.3f}ms "
              f"{r['runtime_s'] * 1e3:>10.3f}ms {r['ratio_to_copy']:>7.2f} "
              f"{r['runtime_GBps']:>7.2f}  {'met' if r['meets_targets'] else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "runtime", "results": rows}, indent=2))


if __name__ == "__main__":
    main()
