"""PCA benchmark: FederatedPCA against scikit-learn PCA on the pooled data, and its scaling.

Two benchmarks (federated PCA issue), each baseline measured in the same run:

1. Fashion-MNIST train (n = 60000, d = 784), split IID over s = 10 sites, k = 50,
   ε = 0.5, δ = 1e-5. ``FederatedPCA(50, mode="elfedpca").fit(parts)`` against
   ``sklearn.decomposition.PCA(50, random_state=0).fit(pooled)`` on the rows stacked
   beforehand (the stacking is not timed; the solver scikit-learn chose,
   ``_fit_svd_solver``, is reported). Targets: elfedpca / sklearn <= 1.5 and
   secure / elfedpca <= 1.5. Modes ``plain``, ``dpdispca`` and ``central`` are timed
   for the record, and the subspace agreement of ``plain`` with scikit-learn is
   reported as the largest principal angle (``scipy.linalg.subspace_angles``; the DP
   modes unit-normalise rows, so their subspace differs from sklearn's by design).
2. Scaling with the number of sites, s in {2, 5, 10, 20, 50, 100} (--quick: {2, 5, 10})
   on the same data, for ``elfedpca`` and ``secure``: fit time, total bytes sent
   (``transcript_.total_bytes``), messages, and bytes sent per site (mean, and the
   largest: site 1, the aggregator). No target; ``--plot PATH`` saves a PNG (needs
   matplotlib).

Times are the median of ``--repeats`` runs (default 3 for benchmark 1, 1 for the
sweep), every mode and the baseline interleaved so drifts of the machine hit all alike;
one warm-up fit of each precedes the timing.

BLAS threads: by default (``--blas-threads 0``) every library keeps its own default:
scikit-learn's BLAS uses every core, and FederatedPCA's runner shares the cores out
between its s + 1 parties itself (``run_local(blas_threads="auto")``). ``--blas-threads
N`` caps every BLAS/OpenMP pool at N for both sides.

    python benchmarks/bench_pca.py [--json OUT] [--repeats N] [--quick] [--only 1,2]
                                   [--sites 2,5,10,...] [--plot PNG] [--blas-threads N]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.linalg import subspace_angles

from common import (
    finish,
    fmt_bytes,
    fmt_s,
    limit_threads,
    median,
    once,
    source_digest,
    verdict,
)
from islands.pca import FederatedPCA

TARGET_SKLEARN_RATIO = 1.5  # elfedpca / sklearn PCA
TARGET_SECURE_RATIO = 1.5  # secure / elfedpca
K = 50
EPSILON, DELTA = 0.5, 1e-5
SPLIT_SEED = 0
FIT_SEED = 0
MODES = ("elfedpca", "secure", "plain", "dpdispca", "central")
SWEEP_MODES = ("elfedpca", "secure")

FULL = {"n": 60000, "sites": 10, "sweep": (2, 5, 10, 20, 50, 100)}
QUICK = {"n": 6000, "sites": 10, "sweep": (2, 5, 10)}


# ---------------------------------------------------------------------------- helpers














def load_parts(n: int, sites: int) -> list[np.ndarray]:
    """The first n rows of Fashion-MNIST train, split IID (seeded) over ``sites`` sites."""
    from islands.data import load_fashion_mnist, partition_iid

    X = load_fashion_mnist(split="train").X[:n]
    return [np.ascontiguousarray(X[idx], dtype=np.float64)
            for idx in partition_iid(X.shape[0], sites, random_state=SPLIT_SEED)]


def federated(mode: str) -> FederatedPCA:
    if mode == "plain":
        return FederatedPCA(K, mode=mode)
    return FederatedPCA(K, epsilon=EPSILON, delta=DELTA, mode=mode, random_state=FIT_SEED)


def max_angle_deg(a: np.ndarray, b: np.ndarray) -> float:
    """Largest principal angle (degrees) between the row spaces of two k×d matrices."""
    return math.degrees(float(np.max(subspace_angles(a.T, b.T))))


def traffic(model: FederatedPCA, sites: int) -> dict[str, Any]:
    t = model.transcript_
    by_sender = t.totals("sender")
    sent = [by_sender[f"site{i + 1}"].nbytes if f"site{i + 1}" in by_sender else 0
            for i in range(sites)]
    return {
        "total_bytes": int(t.total_bytes), "messages": len(t),
        "bytes_per_site_mean": float(np.mean(sent)), "bytes_per_site_max": int(max(sent)),
        "bytes_site1": int(sent[0]),
        "bytes_other_sites_mean": float(np.mean(sent[1:])),
        "by_tag": {k: {"messages": v.messages, "nbytes": v.nbytes}
                   for k, v in t.totals("tag").items()},
    }


# ---------------------------------------------------------------------------- 1
def bench_sklearn(n: int, sites: int, repeats: int) -> dict[str, Any]:
    import sklearn
    from sklearn.decomposition import PCA

    limit_threads(BLAS_THREADS[0])  # again: sklearn may have loaded an OpenMP runtime
    parts = load_parts(n, sites)
    pooled = np.vstack(parts)  # the pooled data, built before timing

    def sk_fit() -> Any:
        return PCA(K, random_state=0).fit(pooled)

    # warm-up of every contender at full size (first touch, thread start-up, imports)
    sk_fit()
    for mode in MODES:
        federated(mode).fit(parts)
    times: dict[str, list[float]] = {"sklearn": [], **{m: [] for m in MODES}}
    models: dict[str, Any] = {}
    for rep in range(repeats):
        order = ["sklearn", *MODES]
        if rep % 2:  # alternate the order so no contender always runs first
            order.reverse()
        for name in order:
            if name == "sklearn":
                t, models[name] = once(sk_fit)
            else:
                t, models[name] = once(lambda m=name: federated(m).fit(parts))
            times[name].append(t)
    med = {name: median(ts) for name, ts in times.items()}
    sk = models["sklearn"]
    r_sk = med["elfedpca"] / med["sklearn"]
    r_sec = med["secure"] / med["elfedpca"]
    return {
        "n": pooled.shape[0], "d": pooled.shape[1], "sites": sites, "k": K,
        "epsilon": EPSILON, "delta": DELTA, "repeats": repeats,
        "sklearn_version": sklearn.__version__, "sklearn_solver": sk._fit_svd_solver,
        "median_s": med, "times": times,
        "ratio_elfedpca_sklearn": r_sk, "target_elfedpca_sklearn": TARGET_SKLEARN_RATIO,
        "met_elfedpca_sklearn": r_sk <= TARGET_SKLEARN_RATIO,
        "ratio_secure_elfedpca": r_sec, "target_secure_elfedpca": TARGET_SECURE_RATIO,
        "met_secure_elfedpca": r_sec <= TARGET_SECURE_RATIO,
        "ratios_to_sklearn": {m: med[m] / med["sklearn"] for m in MODES},
        "max_angle_deg_vs_sklearn": {m: max_angle_deg(models[m].components_, sk.components_)
                                     for m in MODES},
        "max_angle_deg_top10_vs_sklearn": {
            m: max_angle_deg(models[m].components_[:10], sk.components_[:10]) for m in MODES},
        "n_samples": {m: int(models[m].n_samples_) for m in MODES},
        "traffic": {m: traffic(models[m], sites) for m in MODES},
    }


# ---------------------------------------------------------------------------- 2
def bench_sweep(n: int, site_counts: tuple[int, ...], repeats: int) -> dict[str, Any]:
    from islands.data import load_fashion_mnist, partition_iid

    X = load_fashion_mnist(split="train").X[:n]
    federated("elfedpca").fit(np.array_split(X[:2000], 2))  # warm-up (imports, threads)
    rows = []
    for s in site_counts:
        parts = [np.ascontiguousarray(X[idx], dtype=np.float64)
                 for idx in partition_iid(X.shape[0], s, random_state=SPLIT_SEED)]
        times: dict[str, list[float]] = {m: [] for m in SWEEP_MODES}
        models: dict[str, FederatedPCA] = {}
        for _ in range(repeats):
            for mode in SWEEP_MODES:
                t, models[mode] = once(lambda m=mode, p=parts: federated(m).fit(p))
                times[mode].append(t)
        for mode in SWEEP_MODES:
            rows.append({"sites": s, "mode": mode, "seconds": median(times[mode]),
                         "times": times[mode], **traffic(models[mode], s)})
            r = rows[-1]
            print(f"    s={s:<4d} {mode:<9s} {fmt_s(r['seconds']):>10s} "
                  f"{fmt_bytes(r['total_bytes']):>10s} {r['messages']:>6d} msgs",
                  file=sys.stderr, flush=True)
        del parts, models
    return {"n": X.shape[0], "d": X.shape[1], "k": K, "epsilon": EPSILON, "delta": DELTA,
            "repeats": repeats, "site_counts": list(site_counts), "rows": rows}


def plot(sweep: dict[str, Any], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed: no plot"
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, color in zip(SWEEP_MODES, ("tab:blue", "tab:orange"), strict=False):
        rows = [r for r in sweep["rows"] if r["mode"] == mode]
        s = [r["sites"] for r in rows]
        ax_t.plot(s, [r["seconds"] for r in rows], "o-", color=color, label=mode)
        ax_b.plot(s, [r["total_bytes"] for r in rows], "o-", color=color,
                  label=f"{mode}: total")
        ax_b.plot(s, [r["bytes_per_site_mean"] for r in rows], "s--", color=color,
                  label=f"{mode}: per site (mean)")
    for ax, ylabel in ((ax_t, "fit time (s)"), (ax_b, "bytes sent")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sites s")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"FederatedPCA, Fashion-MNIST n={sweep['n']} d={sweep['d']} k={sweep['k']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot saved to {path}"


# ---------------------------------------------------------------------------- report
def table(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    if "sklearn" in results:
        r = results["sklearn"]
        med = r["median_s"]
        size = f"n={r['n']} d={r['d']} s={r['sites']} k={r['k']}"
        rows.append([f"1. elfedpca vs sklearn PCA, pooled ({size})", fmt_s(med["elfedpca"]),
                     fmt_s(med["sklearn"]), f"{r['ratio_elfedpca_sklearn']:.2f}",
                     f"<= {r['target_elfedpca_sklearn']}", verdict(r["met_elfedpca_sklearn"]),
                     f"{r['repeats']} reps; sklearn {r['sklearn_version']} solver "
                     f"{r['sklearn_solver']!r}"])
        rows.append([f"1. secure vs elfedpca ({size})", fmt_s(med["secure"]),
                     fmt_s(med["elfedpca"]), f"{r['ratio_secure_elfedpca']:.2f}",
                     f"<= {r['target_secure_elfedpca']}", verdict(r["met_secure_elfedpca"]),
                     f"secure/sklearn {r['ratios_to_sklearn']['secure']:.2f}"])
        for mode in ("plain", "dpdispca", "central"):
            note = f"max angle vs sklearn {r['max_angle_deg_vs_sklearn'][mode]:.2e} deg"
            rows.append([f"1. {mode} vs sklearn PCA ({size})", fmt_s(med[mode]),
                         fmt_s(med["sklearn"]), f"{r['ratios_to_sklearn'][mode]:.2f}",
                         "(reported)", verdict(None), note])
    return rows


def sweep_table(sweep: dict[str, Any]) -> list[str]:
    header = (f"{'sites':>5}  {'mode':<9} {'fit time':>10} {'total sent':>11} "
              f"{'messages':>8} {'per site':>10} {'site 1':>10} {'site >1':>10} {'t/t0':>6}")
    lines = [header]
    first = {m: next(r["seconds"] for r in sweep["rows"] if r["mode"] == m)
             for m in SWEEP_MODES}
    for r in sweep["rows"]:
        lines.append(f"{r['sites']:>5}  {r['mode']:<9} {fmt_s(r['seconds']):>10} "
                     f"{fmt_bytes(r['total_bytes']):>11} {r['messages']:>8} "
                     f"{fmt_bytes(r['bytes_per_site_mean']):>10} "
                     f"{fmt_bytes(r['bytes_site1']):>10} "
                     f"{fmt_bytes(r['bytes_other_sites_mean']):>10} "
                     f"{r['seconds'] / first[r['mode']]:>6.2f}")
    return lines




BLAS_THREADS = [0]  # set from --blas-threads in main()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--repeats", type=int, default=0,
                        help="repeats per measurement (default 3 for 1, 1 for 2; --quick: 1)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (n=6000, s in 2,5,10): a smoke test")
    parser.add_argument("--only", default="1,2", help="comma-separated subset of 1,2")
    parser.add_argument("--sites", default="",
                        help="site counts of the sweep (default 2,5,10,20,50,100; quick 2,5,10)")
    parser.add_argument("--plot", type=Path, help="save the sweep's plot (PNG) here")
    parser.add_argument("--blas-threads", type=int, default=0,
                        help="cap BLAS/OpenMP threads (default 0: the libraries' defaults)")
    args = parser.parse_args()
    BLAS_THREADS[0] = args.blas_threads
    limit_threads(args.blas_threads)
    sizes = QUICK if args.quick else FULL
    only = {int(s) for s in args.only.split(",") if s.strip()}
    if not only <= {1, 2}:
        parser.error(f"--only takes a subset of 1,2; got {args.only!r}")
    site_counts = (tuple(int(s) for s in args.sites.split(",") if s.strip()) if args.sites
                   else sizes["sweep"])
    if any(s < 2 for s in site_counts):
        parser.error("--sites: every site count must be >= 2")
    repeats = args.repeats or (1 if args.quick else 3)
    sweep_repeats = args.repeats or 1
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    digest = source_digest()
    started = time.perf_counter()
    from islands.errors import DataNotFoundError

    for key, number, run in (
        ("sklearn", 1, lambda: bench_sklearn(sizes["n"], sizes["sites"], repeats)),
        ("sweep", 2, lambda: bench_sweep(sizes["n"], site_counts, sweep_repeats)),
    ):
        if number not in only:
            continue
        print(f"[{time.perf_counter() - started:7.1f} s] benchmark {number} ({key})...",
              file=sys.stderr, flush=True)
        try:
            results[key] = run()
        except DataNotFoundError as exc:
            skipped[key] = str(exc)
    print(f"PCA benchmark{' (--quick)' if args.quick else ''}: median of repeats, "
          f"Python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
          f"BLAS threads {args.blas_threads or 'default'}, "
          f"{time.perf_counter() - started:.0f} s in all")
    rows = table(results)
    if rows:
        header = ["benchmark", "islands", "baseline", "ratio", "target", "result", "notes"]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(6)]
        print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + "  notes")
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[6])
        r1 = results["sklearn"]
        print("subspace: max principal angle vs sklearn (deg): "
              + ", ".join(f"{m} {a:.2e}" for m, a in r1["max_angle_deg_vs_sklearn"].items())
              + "; top 10 only: "
              + ", ".join(f"{m} {a:.2e}"
                          for m, a in r1["max_angle_deg_top10_vs_sklearn"].items())
              + " (DP modes unit-normalise rows: a different matrix, not an error)")
    if "sweep" in results:
        sw = results["sweep"]
        print(f"2. scaling with sites (n={sw['n']} d={sw['d']} k={sw['k']}, "
              f"{sw['repeats']} rep; 'per site' = mean bytes a site sends, 'site 1' = "
              "the aggregator's, 'site >1' = mean of the others; t/t0 = time / first row's):")
        for line in sweep_table(sw):
            print("   " + line)
        if args.plot:
            print(plot(sw, args.plot))
    for key, reason in skipped.items():
        print(f"skipped {key}: {reason}")
    finish("pca", args, {digest, source_digest()}, results, skipped)


if __name__ == "__main__":
    main()
