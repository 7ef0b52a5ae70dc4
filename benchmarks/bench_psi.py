"""PSI benchmark: islands' two engines side by side with raw SecretFlow SPU, up to 1M × 1M.

n IDs per party, a given share of them common, both parties on this machine:

- ``dh``: Diffie–Hellman PSI on Curve25519 (islands.psi), two simulated parties in one
  process, their curve arithmetic on a pool of worker processes, one per usable core.
  Seconds end to end (hashing to the curve, the four blindings, the matching, the
  messages), IDs per second (2n / seconds; FATE 2.0 publishes ≈32.7k IDs/s on 16 cores
  per party) and bytes exchanged.
- ``spu``: ``islands.psi.align(..., engine="spu")``, SPU's RR22 driven by islands: from
  the call to both parties' alignments (validating and encoding the IDs, the CSV files,
  two SPU processes over loopback, reading and checking the result, the aligned order).
- ``raw``: SPU's RR22 alone (benchmarks/spu_raw.py in SPU's environment): two processes,
  CSV in (written before the clock starts) and out, as the issue measured it.

Baselines measured in the same run: a plain, non-private intersection (Python sets), and
raw SPU for the ``spu`` engine. Targets: 1M × 1M with 50 % overlap, DH ≤ 90 s (issue 7);
the fast engine ≤ 10 s and ≤ 2× raw SPU (issue 24). ``--repeat`` runs spu and raw
alternately that many times and reports the medians.

    python benchmarks/bench_psi.py [--n 1000000] [--overlap 0.5] [--engines dh,spu]
                                   [--repeat 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
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


def run_dh(n: int, overlap: float, workers: int | None) -> dict[str, Any]:
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


def run_spu(n: int, overlap: float) -> tuple[float, float]:
    """Return (seconds of islands' engine='spu', seconds of a plain set intersection)."""
    from islands.psi import align

    a, b = ids_for(n, overlap)
    t0 = time.perf_counter()
    plain = set(a).intersection(b)
    plain_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ra, rb = align(a, b, engine="spu", timeout=3600)
    seconds = time.perf_counter() - t0
    assert ra.ids == sorted(plain) and rb.ids == ra.ids, "SPU PSI result is wrong"
    assert [a[i] for i in ra.rows] == ra.ids and [b[i] for i in rb.rows] == rb.ids
    return seconds, plain_s


def run_raw(n: int, overlap: float) -> tuple[float, float]:
    """Return the seconds of raw SPU RR22 (benchmarks/spu_raw.py in SPU's Python).

    (wall seconds of the two processes, seconds of ``psi_execute`` alone)
    """
    from islands.psi.spu_engine import spu_python

    out = subprocess.run([str(spu_python()), str(Path(__file__).with_name("spu_raw.py")),
                          str(n), str(overlap)], capture_output=True, text=True,
                         timeout=3600, check=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("{")][-1]
    r = json.loads(line)
    assert r["ok"] and r["common"] == int(n * overlap), f"raw SPU failed: {r}"
    return float(r["seconds"]), float(r["psi_execute_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--engines", default="dh,spu",
                    help="comma-separated: dh, spu (spu also runs raw SPU)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    full = args.n >= 1_000_000
    out: dict[str, Any] = {"n": args.n, "overlap": args.overlap}
    print(f"PSI {args.n:,} × {args.n:,} IDs, {args.overlap:.0%} common "
          f"({int(args.n * args.overlap):,})")
    if "spu" in engines:
        spu_s, raw_s, exec_s, plain = [], [], [], []
        for _ in range(args.repeat):
            wall, execute = run_raw(args.n, args.overlap)
            raw_s.append(wall)
            exec_s.append(execute)
            s, p = run_spu(args.n, args.overlap)
            spu_s.append(s)
            plain.append(p)
        spu, raw = statistics.median(spu_s), statistics.median(raw_s)
        execute = statistics.median(exec_s)
        out["spu"] = {"seconds": spu_s, "raw_seconds": raw_s, "raw_psi_execute_s": exec_s,
                      "plain_s": plain, "median_s": spu, "raw_median_s": raw,
                      "ratio_to_raw": spu / raw, "ratio_to_psi_execute": spu / execute}
        print(f"  islands engine='spu' (RR22): {fmt_s(spu)} median of {len(spu_s)} "
              f"[{', '.join(f'{x:.2f}' for x in spu_s)}], {2 * args.n / spu:,.0f} IDs/s")
        print(f"  raw SPU RR22 (same run):     {fmt_s(raw)} "
              f"[{', '.join(f'{x:.2f}' for x in raw_s)}]  → islands/raw × {spu / raw:.2f}")
        print(f"  raw SPU, psi_execute alone:  {fmt_s(execute)} "
              f"[{', '.join(f'{x:.2f}' for x in exec_s)}]  → islands/psi_execute "
              f"× {spu / execute:.2f}")
        print(f"  plain set intersection:      {fmt_s(statistics.median(plain))}")
        if full:
            ok = spu <= 10 and spu / raw <= 2
            print(f"  target 1M × 1M ≤ 10 s and ≤ 2× raw SPU: {'met' if ok else 'MISSED'}")
    if "dh" in engines:
        r = run_dh(args.n, args.overlap, args.workers)
        out["dh"] = r
        print(f"  islands engine='dh' (Curve25519, {r['workers']} worker process(es)): "
              f"{fmt_s(r['seconds'])}, {r['ids_per_s']:,.0f} IDs/s, "
              f"{fmt_bytes(r['bytes'])} exchanged")
        print(f"  plain set intersection:      {fmt_s(r['plain_s'])}  (PSI × {r['ratio']:,.0f})")
        if "spu" in out:
            print(f"  dh / islands spu: × {r['seconds'] / out['spu']['median_s']:.1f}")
        if full:
            print(f"  target 1M × 1M ≤ 90 s (dh): {'met' if r['seconds'] <= 90 else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
