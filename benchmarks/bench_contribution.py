"""Contribution benchmark: what valuing the clients costs against the training run itself.

The benchmark of the contribution issue: "cost of the estimate vs the training run
itself (ratio, same run), for 5, 20 and 100 clients". No numeric target was set: the
figures are reported.

Setting. Fashion-MNIST train rows as float32 in [0, 1]: the first ``--val`` rows (1,000;
``--quick``: 500) are the server's validation set, never trained on; the next ``--rows``
(9,000; ``--quick``: 3,000) are split IID (seed 0) over N clients, N in ``--clients``
(5, 20, 100; ``--quick``: 5, 20). The MLP 784-200-10 (``ModelSpec("mlp", (784,), 10,
hidden=(200,))``, 159,010 parameters), FedAvg with τ = 10 local steps, batch 32, lr 0.05,
momentum 0.5, ``eval_fraction=0`` (every client row trains), ``--epochs`` epochs (2;
``--quick``: 1) through ``FederatedModel.fit`` with its defaults otherwise (seed 0,
concurrency 8, ``threads="auto"``: max(1, cores // min(N, 8)) torch threads, which is
also what the server's valuation runs under). An epoch is S = ⌊n_k/32⌋ steps, so the
rounds are ⌈S/10⌉ an epoch: with 9,000 rows and 2 epochs, 12 rounds at N = 5
(1,800 rows a client), 4 at N = 20 (450), 2 rounds of 2 steps at N = 100 (90): the same
rows and epochs, so the same training work, whatever N; more clients, fewer and
shorter rounds.

Measured, for each N, in one process, after one warm-up fit:

* the training run alone (``contribution=None``): seconds of ``fit`` (learners built,
  rounds run), the median of ``--repeats`` runs (3; ``--quick``: 2) interleaved with
  the valued runs below: the baseline;
* the same run valued by ``Contribution((X_val, y_val), methods=(m,))``, one run per
  method so each method's cost stands alone: ``gtg`` (defaults: tolerance 0.005,
  confidence 0.95, 10..200 orders a round, no truncation), ``loo``, and a truncated
  GTG (``gtg_trunc``: ``truncation=0.01``, ``round_truncation=0.001``); at N <= 8 also
  ``exact`` (2^N coalitions a round) and ``or`` (one-round reconstruction).
  For each: ``contribution_.seconds`` (time spent valuing on the server, between
  rounds), the **ratio** valuation seconds / baseline seconds, the run's overhead
  (fit with − baseline) / baseline, coalition models scored (``evaluations``), seconds
  per evaluation, GTG orders per valued round and rounds that hit 200 orders
  (``unconverged``), and where the valuation time went: building coalition models
  (``RoundGame.model``: w + Σ c_k·(w_k − w), a (1×m)·(m×159,010) numpy product) vs
  scoring them (``ServerValidation``: vector checks, loading into a torch module and
  the forward pass over the validation rows), timed by wrapping those two methods;
  the rest is the sampler's bookkeeping (and ``or``'s carrying of 2^N models).
* agreement: max |φ_gtg_trunc − φ_gtg| over clients (what the truncations change; the
  training runs are the same, so both value the same uploads), and at N <= 8 max
  |φ_gtg − φ_exact| and max |φ_loo − φ_exact|, next to GTG's largest confidence
  half-width and the total gain Σ_r (v_r(N) − v_r(∅)).
* per-evaluation micro-benchmark (outside any run): scoring one model on the
  validation rows at 1 torch thread and at all usable cores, and building one
  coalition model of m = N players (each build after a 1-thread scoring call, as in a
  valuation) with BLAS at its default threads and at 1, the mean of 30 calls each:
  which of the two dominates at each N, and what the valuation would gain from the
  idle cores (the clients do not train while the server values a round) or from a
  single-threaded product.

With ``--profile``, one more GTG run at the largest N is profiled (cProfile, the
server's valuation calls only) and its top functions printed.

Other work on the machine skews every figure: the share of the CPU other processes used
during each N is printed at the end; only figures taken near 0% are trustworthy.

    python benchmarks/bench_contribution.py [--json OUT] [--quick] [--clients 5,20,100]
                                            [--rows 9000] [--val 1000] [--epochs 2]
                                            [--repeats 3] [--profile] [--blas-threads N]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np

from common import finish, fmt_s, limit_threads, median, once, source_digest

FULL: dict[str, Any] = {"rows": 9000, "val": 1000, "epochs": 2, "clients": (5, 20, 100),
                        "repeats": 3}
QUICK: dict[str, Any] = {"rows": 3000, "val": 500, "epochs": 1, "clients": (5, 20),
                         "repeats": 2}
TAU, BATCH, LR, MOMENTUM, SEED = 10, 32, 0.05, 0.5, 0
SMALL_N = 8  # exact and or at N <= this (2^N coalitions a round)
MICRO_CALLS = 30
DIGEST_PARTS = ("hfl", "runtime", "data")
RUNS: dict[str, dict[str, Any]] = {
    "gtg": {"methods": ("gtg",)},
    "loo": {"methods": ("loo",)},
    "gtg_trunc": {"methods": ("gtg",), "truncation": 0.01, "round_truncation": 0.001},
    "exact": {"methods": ("exact",)},
    "or": {"methods": ("or",)},
}


# ---------------------------------------------------------------------------- helpers
def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def cpu_seconds() -> tuple[float, float]:
    """(busy core-seconds of the machine, CPU seconds of this process and its children)."""
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:9]]
    busy = (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle, iowait
    ours = sum(getattr(resource.getrusage(who), f) for who in
               (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
    return busy, ours


def mlp_spec() -> Any:
    from islands.hfl.torch.models import ModelSpec

    return ModelSpec("mlp", (784,), 10, hidden=(200,))


def load_data(rows: int, val: int) -> tuple[tuple[np.ndarray, np.ndarray],
                                            tuple[np.ndarray, np.ndarray]]:
    """(validation, training) rows of Fashion-MNIST train as float32 in [0, 1]."""
    from islands.data import load
    from islands.errors import DataNotFoundError

    try:
        ds = load("fashion_mnist", split="train", normalize=False)
    except DataNotFoundError as exc:
        raise SystemExit(f"bench_contribution needs Fashion-MNIST: {exc}") from None
    if val + rows > len(ds.y):
        raise SystemExit(f"--val + --rows = {val + rows} exceeds the {len(ds.y)} rows")
    X = ds.X[: val + rows].astype(np.float32)
    X *= np.float32(1 / 255)
    y = np.asarray(ds.y[: val + rows], dtype=np.int64)
    return (X[:val], y[:val]), (X[val:], y[val:])


def split(X: np.ndarray, y: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from islands.data import partition_iid

    return [(X[idx], y[idx]) for idx in partition_iid(len(y), k, random_state=SEED)]


def fit(parts: list[tuple[np.ndarray, np.ndarray]], epochs: int,
        contribution: Any = None) -> tuple[float, Any]:
    """One FederatedModel.fit; returns (seconds, the fitted model)."""
    from islands.hfl import FedAvg
    from islands.hfl.estimator import FederatedModel

    fl = FederatedModel(mlp_spec(), FedAvg(local_steps=TAU, batch_size=BATCH, lr=LR,
                                           momentum=MOMENTUM),
                        epochs=epochs, eval_fraction=0.0, random_state=SEED,
                        contribution=contribution)
    seconds, _ = once(lambda: fl.fit(parts))
    return seconds, fl


@dataclass
class Split:
    """Seconds of the valuation spent building coalition models and scoring them."""

    build_s: float = 0.0
    builds: int = 0
    score_s: float = 0.0
    scores: int = 0
    torch_threads: int = 0


@contextmanager
def instrumented(acc: Split) -> Iterator[None]:
    """Time ``RoundGame.model`` and ``ServerValidation.__call__`` into ``acc``."""
    import torch

    from islands.hfl.contribution import game

    build0, score0 = game.RoundGame.model, game.ServerValidation.__call__

    def build(self: Any, mask: int) -> Any:
        t0 = time.perf_counter()
        try:
            return build0(self, mask)
        finally:
            acc.build_s += time.perf_counter() - t0
            acc.builds += 1

    def score(self: Any, params: Any) -> float:
        if not acc.scores:
            acc.torch_threads = torch.get_num_threads()
        t0 = time.perf_counter()
        try:
            return score0(self, params)
        finally:
            acc.score_s += time.perf_counter() - t0
            acc.scores += 1

    with mock.patch.object(game.RoundGame, "model", build), \
            mock.patch.object(game.ServerValidation, "__call__", score):
        yield


@contextmanager
def profiled(prof: cProfile.Profile) -> Iterator[None]:
    """Profile the server's ``ContributionTracker.observe`` and ``report`` calls only."""
    from islands.hfl.contribution import tracker

    observe0 = tracker.ContributionTracker.observe

    def observe(self: Any, *a: Any, **k: Any) -> None:
        prof.enable()
        try:
            observe0(self, *a, **k)
        finally:
            prof.disable()

    with mock.patch.object(tracker.ContributionTracker, "observe", observe):
        yield


# ---------------------------------------------------------------------------- one N
def valued(parts: list[tuple[np.ndarray, np.ndarray]], epochs: int,
           val: tuple[np.ndarray, np.ndarray], name: str) -> dict[str, Any]:
    """One run valued by the method ``name`` of RUNS."""
    from islands.hfl.contribution import Contribution

    acc = Split()
    with instrumented(acc):
        seconds, fl = fit(parts, epochs, Contribution(val, **RUNS[name]))
    r = fl.contribution_
    method = RUNS[name]["methods"][0]
    valued_rounds = len(r.rounds) - r.skipped
    return {"method": name, "settings": r.settings, "fit_s": seconds,
            "wall_time_s": fl.wall_time_, "valuation_s": r.seconds,
            "evaluations": r.evaluations, "s_per_evaluation": r.seconds / max(r.evaluations, 1),
            "permutations": r.permutations, "rounds": len(r.rounds),
            "valued_rounds": valued_rounds, "skipped": r.skipped,
            "permutations_per_round": (r.permutations / valued_rounds
                                       if method == "gtg" and valued_rounds else None),
            "unconverged": r.unconverged, "build_s": acc.build_s, "builds": acc.builds,
            "score_s": acc.score_s, "scores": acc.scores,
            "valuation_torch_threads": acc.torch_threads,
            "scores_phi": r.scores[method],
            "halfwidth": r.halfwidth.get(method), "gain": r.gain,
            "utility_initial": r.utility_initial, "utility_final": r.utility_final,
            "params": fl.params_}


def bench_n(n: int, train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray],
            epochs: int, repeats: int, log: Any) -> dict[str, Any]:
    parts = split(*train, n)
    sizes = [len(p[1]) for p in parts]
    steps = min(sizes) // BATCH
    methods = ["gtg", "loo", "gtg_trunc"] + (["exact", "or"] if n <= SMALL_N else [])
    # baselines interleaved with the valued runs: b, m1, b, m2, ..., the rest of b at the end
    order: list[str] = []
    base_left = repeats
    for m in methods:
        if base_left:
            order.append("base")
            base_left -= 1
        order.append(m)
    order += ["base"] * base_left
    base: list[dict[str, Any]] = []
    runs: dict[str, dict[str, Any]] = {}
    for item in order:
        if item == "base":
            seconds, fl = fit(parts, epochs)
            base.append({"fit_s": seconds, "wall_time_s": fl.wall_time_,
                         "rounds": len(fl.rounds_), "params": fl.params_})
            log(f"    N={n:<3d} training alone {fmt_s(seconds)} ({len(fl.rounds_)} rounds)")
        else:
            runs[item] = valued(parts, epochs, val, item)
            r = runs[item]
            log(f"    N={n:<3d} {item:<9s} fit {fmt_s(r['fit_s'])}, valuation "
                f"{fmt_s(r['valuation_s'])}, {r['evaluations']} evaluations")
    base_s = median([b["fit_s"] for b in base])
    ref = base[0]["params"]
    for r in runs.values():
        r["ratio"] = r["valuation_s"] / base_s
        r["overhead"] = (r["fit_s"] - base_s) / base_s
        # the valuation must leave training alone: same uploads, same final model
        r["model_max_abs_diff"] = float(np.max(np.abs(r.pop("params") - ref)))
    for b in base:
        b.pop("params")
    out: dict[str, Any] = {
        "clients": n, "rows_per_client": [min(sizes), max(sizes)], "steps_per_epoch": steps,
        "tau": min(TAU, steps), "rounds": base[0]["rounds"], "baseline_runs": base,
        "baseline_s": base_s, "baseline_s_per_round": base_s / base[0]["rounds"],
        "runs": runs}
    g = runs["gtg"]
    hw = g["halfwidth"] or [0.0]
    agree: dict[str, Any] = {"gtg_max_halfwidth": float(max(hw)), "gain": g["gain"],
                             "trunc_vs_gtg_max_abs": float(np.max(np.abs(
                                 np.subtract(runs["gtg_trunc"]["scores_phi"],
                                             g["scores_phi"]))))}
    if "exact" in runs:
        ex = np.asarray(runs["exact"]["scores_phi"])
        agree["gtg_vs_exact_max_abs"] = float(np.max(np.abs(np.subtract(g["scores_phi"], ex))))
        agree["loo_vs_exact_max_abs"] = float(np.max(np.abs(
            np.subtract(runs["loo"]["scores_phi"], ex))))
        agree["or_vs_exact_max_abs"] = float(np.max(np.abs(
            np.subtract(runs["or"]["scores_phi"], ex))))
    out["agreement"] = agree
    return out


# ---------------------------------------------------------------------------- micro
def bench_micro(counts: tuple[int, ...], val: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """Mean seconds of scoring one model (1 and all torch threads) and of building one
    (BLAS at its default threads and at 1, each build after a scoring call as in a run)."""
    from threadpoolctl import threadpool_limits

    from islands.hfl.contribution import RoundGame, ServerValidation
    from islands.hfl.estimator import torch_threads
    from islands.hfl.torch.models import ModulePool, flat_parameters

    spec = mlp_spec()
    utility = ServerValidation(spec, val[0], val[1], pool=ModulePool(spec))
    w = flat_parameters(spec.build(SEED))
    rng = np.random.default_rng(SEED)
    out: dict[str, Any] = {"calls": MICRO_CALLS, "val_rows": len(val[1]),
                           "params": int(w.size)}
    score: dict[str, float] = {}
    for t in sorted({1, cores()}):
        with torch_threads(t):
            utility(w)  # warm-up
            t0 = time.perf_counter()
            for _ in range(MICRO_CALLS):
                utility(w)
            score[str(t)] = (time.perf_counter() - t0) / MICRO_CALLS
    out["score_s"] = score
    build: dict[str, dict[str, float]] = {}
    for m in counts:
        params = w[None, :] + rng.normal(0, 1e-3, (m, w.size)).astype(np.float32)
        g = RoundGame(w, params, np.ones(m), utility)
        masks = rng.integers(1, 1 << min(m, 62), size=MICRO_CALLS)
        build[str(m)] = {}
        for label, limit in (("blas_default", None), ("blas_1", 1)):
            with torch_threads(1), threadpool_limits(limits=limit, user_api="blas"):
                g.model(int(masks[0]))
                spent = 0.0
                for mask in masks:
                    utility(w)  # a forward pass between builds, as in a valuation
                    t0 = time.perf_counter()
                    g.model(int(mask))
                    spent += time.perf_counter() - t0
            build[str(m)][label] = spent / MICRO_CALLS
        del params, g
    out["build_s"] = build
    return out


def bench_profile(n: int, train: tuple[np.ndarray, np.ndarray],
                  val: tuple[np.ndarray, np.ndarray], epochs: int,
                  top: int = 14) -> dict[str, Any]:
    """cProfile of the server's GTG valuation at N = n (top functions by own time)."""
    from islands.hfl.contribution import Contribution

    prof = cProfile.Profile()
    with profiled(prof):
        _, fl = fit(split(*train, n), epochs, Contribution(val, **RUNS["gtg"]))
    stream = io.StringIO()
    stats = pstats.Stats(prof, stream=stream)
    stats.sort_stats("tottime").print_stats(top)
    total = float(stats.total_tt)  # type: ignore[attr-defined]
    return {"clients": n, "valuation_s": fl.contribution_.seconds, "profiled_s": total,
            "text": stream.getvalue()}


# ---------------------------------------------------------------------------- report
def print_table(rows: list[dict[str, Any]]) -> None:
    header = ["N", "rows/cl", "rounds", "tau", "train", "method", "evals", "ord/rnd",
              "unconv", "valuation", "ms/eval", "build", "score", "ratio", "overhead"]
    lines = []
    for row in rows:
        first = True
        for name, r in row["runs"].items():
            lo, hi = row["rows_per_client"]
            lines.append([
                str(row["clients"]) if first else "",
                (f"{lo}" if lo == hi else f"{lo}-{hi}") if first else "",
                str(row["rounds"]) if first else "", str(row["tau"]) if first else "",
                fmt_s(row["baseline_s"]) if first else "", name, str(r["evaluations"]),
                "-" if r["permutations_per_round"] is None
                else f"{r['permutations_per_round']:.1f}",
                str(r["unconverged"]) if r["method"].startswith("gtg") else "-",
                fmt_s(r["valuation_s"]), f"{r['s_per_evaluation'] * 1e3:.1f}",
                f"{r['build_s'] / max(r['valuation_s'], 1e-12):.0%}",
                f"{r['score_s'] / max(r['valuation_s'], 1e-12):.0%}",
                f"{r['ratio']:.2f}", f"{r['overhead']:+.0%}"])
            first = False
    widths = [max(len(x[i]) for x in [header, *lines]) for i in range(len(header))]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for x in lines:
        print("  ".join(c.rjust(w) for c, w in zip(x, widths, strict=True)))


def print_agreement(rows: list[dict[str, Any]]) -> None:
    print("agreement (utility units = validation accuracy; the runs train the same model, "
          "so every method values the same uploads):")
    for row in rows:
        a = row["agreement"]
        tr, g = row["runs"]["gtg_trunc"], row["runs"]["gtg"]
        msg = (f"   N={row['clients']:<3d} gain {a['gain']:+.4f}; gtg max half-width "
               f"{a['gtg_max_halfwidth']:.4f}; gtg_trunc vs gtg max |Δφ| "
               f"{a['trunc_vs_gtg_max_abs']:.4f} ({tr['evaluations']} vs {g['evaluations']} "
               f"evaluations, {tr['skipped']} rounds skipped)")
        if "gtg_vs_exact_max_abs" in a:
            msg += (f"; vs exact: gtg {a['gtg_vs_exact_max_abs']:.4f}, loo "
                    f"{a['loo_vs_exact_max_abs']:.4f}, or {a['or_vs_exact_max_abs']:.4f}")
        drift = max(r["model_max_abs_diff"] for r in row["runs"].values())
        if drift > 0:
            msg += f"; NOTE final models differ from the baseline's by up to {drift:.2e}"
        print(msg)


def print_micro(mi: dict[str, Any]) -> None:
    sc = ", ".join(f"{t} torch thread{'s' if t != '1' else ''} {v * 1e3:.1f} ms"
                   for t, v in mi["score_s"].items())
    bd = ", ".join(f"m={m} {v['blas_default'] * 1e3:.2f} ms ({v['blas_1'] * 1e3:.2f} ms at "
                   "1 BLAS thread)" for m, v in mi["build_s"].items())
    print(f"per evaluation (mean of {mi['calls']} calls, outside any run): scoring one "
          f"model on {mi['val_rows']} validation rows: {sc}; building one coalition model "
          f"of m players ({mi['params']:,} parameters, after a 1-thread forward pass as in "
          f"a valuation): {bd}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--quick", action="store_true",
                        help="3,000 rows, 500 validation rows, 1 epoch, N in 5,20")
    parser.add_argument("--clients", default="", help="client counts (5,20,100)")
    parser.add_argument("--rows", type=int, default=0, help="training rows (9000)")
    parser.add_argument("--val", type=int, default=0, help="validation rows (1000)")
    parser.add_argument("--epochs", type=int, default=0, help="epochs of each run (2)")
    parser.add_argument("--repeats", type=int, default=0,
                        help="training-alone runs per N, median taken (3; --quick 2)")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile one GTG run's valuation at the largest N")
    parser.add_argument("--blas-threads", type=int, default=0,
                        help="cap BLAS/OpenMP threads (default 0: the libraries' defaults)")
    args = parser.parse_args()
    limit_threads(args.blas_threads)
    sizes = QUICK if args.quick else FULL
    try:
        counts = (tuple(sorted({int(s) for s in args.clients.split(",") if s.strip()}))
                  if args.clients else sizes["clients"])
    except ValueError:
        parser.error(f"--clients: comma-separated integers; got {args.clients!r}")
    rows = args.rows or sizes["rows"]
    val_rows = args.val or sizes["val"]
    epochs = args.epochs or sizes["epochs"]
    repeats = args.repeats or sizes["repeats"]
    if not counts or min(counts) < 2 or rows // max(counts) < BATCH:
        parser.error(f"--clients: each count >= 2 and every client needs >= {BATCH} rows "
                     f"({rows} rows)")
    if min(epochs, repeats, val_rows) < 1:
        parser.error("--epochs, --repeats and --val must be >= 1")

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {msg}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    digests = {source_digest(DIGEST_PARTS)}
    val, train = load_data(rows, val_rows)
    log(f"data: {rows} training rows, {val_rows} validation rows; warm-up fit")
    fit(split(train[0][:1000], train[1][:1000], 2), 1)  # torch, pools: out of the figures
    results: dict[str, Any] = {
        "settings": {"rows": rows, "val_rows": val_rows, "epochs": epochs,
                     "repeats": repeats, "tau": TAU, "batch": BATCH, "lr": LR,
                     "momentum": MOMENTUM, "seed": SEED, "model": "mlp 784-200-10",
                     "eval_fraction": 0.0, "runs": {k: {kk: list(vv) if isinstance(
                         vv, tuple) else vv for kk, vv in v.items()} for k, v in RUNS.items()}}}
    other: dict[str, float] = {}
    table: list[dict[str, Any]] = []
    for n in counts:
        log(f"N = {n}")
        busy0, ours0 = cpu_seconds()
        t0 = time.perf_counter()
        table.append(bench_n(n, train, val, epochs, repeats, log))
        busy1, ours1 = cpu_seconds()
        other[str(n)] = max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (
            cores() * (time.perf_counter() - t0))
    results["by_clients"] = table
    log("per-evaluation micro-benchmark")
    results["micro"] = bench_micro(counts, val)
    if args.profile:
        log(f"profiling a GTG run at N = {max(counts)}")
        results["profile"] = bench_profile(max(counts), train, val, epochs)
    results["other_cpu_share"] = other
    results["total_s"] = time.perf_counter() - started
    import torch

    print(f"Contribution benchmark{' (--quick)' if args.quick else ''}: Python "
          f"{platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
          f"{cores()} CPUs, {results['total_s']:.0f} s in all")
    print(f"Fashion-MNIST: {rows} training rows split IID over N clients, {val_rows} "
          f"validation rows (the server's); MLP 784-200-10, FedAvg τ={TAU} (cut at the "
          f"epoch's end), batch {BATCH}, lr {LR}, momentum {MOMENTUM}, {epochs} epoch(s), "
          "eval_fraction 0, threads 'auto'")
    print("train = fit without contribution (median of "
          f"{repeats}); valuation = contribution_.seconds; ratio = valuation / train; "
          "overhead = (fit with − train) / train; ord/rnd = GTG orders per valued round; "
          "unconv = rounds at 200 orders; build / score = share of the valuation spent "
          "building coalition models (numpy) / scoring them (torch forward on the "
          "validation rows); gtg_trunc = truncation 0.01, round_truncation 0.001")
    print_table(table)
    threads = sorted({r["valuation_torch_threads"] for row in table
                      for r in row["runs"].values()})
    print(f"the valuation ran at {', '.join(map(str, threads))} torch thread(s) (FederatedModel"
          f" threads='auto' during the run) on a {cores()}-core machine")
    print_agreement(table)
    print_micro(results["micro"])
    if "profile" in results:
        p = results["profile"]
        print(f"cProfile of a GTG valuation at N={p['clients']} ({fmt_s(p['profiled_s'])} "
              "profiled), top functions by own time:")
        print("\n".join("   " + line for line in p["text"].strip().splitlines()
                        if line.strip()))
    print("share of the machine's CPU other processes used meanwhile (figures are only "
          "trustworthy near 0%): " + ", ".join(f"N={k} {v:.0%}" for k, v in other.items()))
    digests.add(source_digest(DIGEST_PARTS))
    finish("contribution", args, digests, results, {})


if __name__ == "__main__":
    main()
