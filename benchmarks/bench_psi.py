"""PSI benchmark: Diffie–Hellman PSI on Curve25519 (islands.psi) at up to 1M × 1M IDs.

Two simulated parties in one process (their curve arithmetic on a pool of worker
processes, one per usable core, shared by both), n IDs each, a given share of them
common. Reported: seconds end to end (hashing to the curve, the four blindings, the
matching, the messages), IDs per second (2n / seconds, to compare with FATE 2.0's
published ≈32.7k IDs/s on 16 cores per party), bytes exchanged, and the ratio to the
baseline measured in the same run: a plain, non-private intersection of the same IDs
(Python sets), which is what PSI costs over doing nothing. Target (issue 7): 1M × 1M
with 50% overlap in ≤ 90 s on 2 cores.

    python benchmarks/bench_psi.py [--n 1000000] [--overlap 0.5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import fmt_bytes, fmt_s


def ids_for(n: int, overlap: float) -> tuple[list[str], list[str]]:
    common = int(n * overlap)
    a = [f"user-{i:09d}" for i in range(n)]
    b = [f"user-{i:09d}" for i in range(n - common, 2 * n - common)]
    return a, b


def run(n: int, overlap: float, workers: int | None) -> dict[str, Any]:
    from islands.crypto.psi import usable_cores
    from islands.psi import initiator, responder
    from islands.runtime import run_local

    a, b = ids_for(n, overlap)
    t0 = time.perf_counter()
    plain = set(a).intersection(b)
    plain_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = run_local({"a": partial(initiator, peer="b", ids=a, workers=workers),
                        "b": partial(responder, peer="a", ids=b, workers=workers)},
                       timeout=3600, blas_threads=None)
    seconds = time.perf_counter() - t0
    got = result.results["a"].ids
    assert got == sorted(plain) and result.results["b"].ids == got, "PSI result is wrong"
    return {"n": n, "overlap": overlap, "common": len(got),
            "workers": workers or usable_cores(), "seconds": seconds,
            "ids_per_s": 2 * n / seconds, "bytes": result.transcript.total_bytes,
            "plain_s": plain_s, "ratio": seconds / max(plain_s, 1e-9)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    r = run(args.n, args.overlap, args.workers)
    verdict = "met" if args.n < 1_000_000 or r["seconds"] <= 90 else "MISSED"
    print(f"PSI {r['n']:,} × {r['n']:,} IDs, {r['overlap']:.0%} common ({r['common']:,}), "
          f"{r['workers']} worker process(es)")
    print(f"  private (DH on Curve25519): {fmt_s(r['seconds'])}, {r['ids_per_s']:,.0f} IDs/s, "
          f"{fmt_bytes(r['bytes'])} exchanged")
    print(f"  plain set intersection:     {fmt_s(r['plain_s'])}  (PSI × {r['ratio']:,.0f})")
    print(f"  target 1M × 1M ≤ 90 s: {verdict if args.n >= 1_000_000 else 'n/a below 1M'}")
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
