"""Coverage of GTG-Shapley's confidence interval: how often it holds exact per-round Shapley.

GTG (``Contribution(methods=("gtg", ...))``) reports, per client, a half-width h_k at
``confidence`` (0.95) around its score φ̂_k = Σ_r φ̂_{r,k}, the sum over rounds of a
Monte-Carlo Shapley estimate of each round's coalition game. Its target is exact
per-round Shapley, φ_k = Σ_r φ_{r,k} (``exact``; Song et al. 2019's MR). This benchmark
measures P(|φ̂_k − φ_k| ≤ h_k) over many revaluations of the same recorded rounds.

How. Each federation of ``benchmarks/bench_contribution_truth.py`` (digits by default:
cheap to score) is trained once with the tracker valuing every round exactly, and every
round's 2^m coalition values are kept (a recording subclass of
:class:`~islands.hfl.contribution.game.RoundGame`). Then
:func:`~islands.hfl.contribution.maths.permutation_shapley`, GTG's sampler, is rerun
``--repeats`` times on those tables with fresh order seeds and the tracker's defaults
(tolerance 0.005, confidence 0.95, 10–200 orders), each client's rounds combined as the
tracker combines them (scores summed, variances added). Coverage is counted over
revaluations × clients, leaving out null players (a client whose every marginal is 0,
such as a free-rider under fixed weighting: its interval [0, 0] always holds), and per
round as well.

    python benchmarks/bench_gtg_coverage.py [--repeats 200] [--cases issue,noise50,noniid]
        [--seeds 0,1] [--datasets digits] [--rounds 30] [--lr 0.5] [--metric accuracy]
        [--json OUT]

The training is the matrix's at lr 0.5 for 30 rounds (that benchmark's first setting, at
which the coverage in ``docs/contribution.md`` was measured), unless ``--lr``/``--rounds``
say otherwise.

Nothing is timed: the figure is a coverage, not a speed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_contribution_truth as matrix
import islands.hfl.contribution.tracker as tracker_module
from bench_contribution_truth import _model, build
from islands.hfl.contribution import Contribution
from islands.hfl.contribution.game import RoundGame
from islands.hfl.contribution.maths import (
    combined_halfwidth,
    exact_shapley,
    permutation_shapley,
)

Table = NDArray[np.float64]


def record_rounds(dataset: str, case: str, seed: int, rounds: int, metric: str,
                  weighting: str) -> list[Table]:
    """Train one federation and return every round's table of 2^m coalition values."""
    games: list[RoundGame] = []

    class Recording(RoundGame):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            games.append(self)

    fed = build(dataset, case, seed, 1e-3)
    contribution = Contribution(fed.validation, methods=("exact",), metric=metric,
                                weighting=weighting, seed=seed)
    original = tracker_module.RoundGame  # type: ignore[attr-defined]
    tracker_module.RoundGame = Recording  # type: ignore[attr-defined]
    try:
        _model(fed, rounds, contribution).fit(fed.parts, behaviour=fed.behaviour)
    finally:
        tracker_module.RoundGame = original  # type: ignore[attr-defined]
    tables = []
    for game in games:
        known = game.known()
        tables.append(np.array([known[m] for m in range(1 << game.players)]))
    return tables


def _game(table: Table) -> Callable[[int], float]:
    return lambda mask: float(table[mask])


def coverage(tables: list[Table], repeats: int, seed: int, **settings: Any) -> dict[str, Any]:
    """Rerun GTG's sampler ``repeats`` times on the recorded rounds; count coverage."""
    n = int(np.log2(len(tables[0])))
    exact = np.array([exact_shapley(_game(t), n) for t in tables])
    null = np.all(np.abs(exact) == 0, axis=0) & np.array(
        [all(t[m | 1 << k] == t[m] for t in tables for m in range(1 << n)) for k in range(n)])
    total = exact.sum(axis=0)
    hits = np.zeros(n)
    round_hits = np.zeros(n)
    round_count = 0
    widths = []
    perms = []
    for rep in range(repeats):
        est_sum = np.zeros(n)
        var_sum = np.zeros(n)
        var_df = np.zeros(n)
        for r, t in enumerate(tables):
            est = permutation_shapley(_game(t), n,
                                      rng=np.random.default_rng([seed, rep, r]), **settings)
            est_sum += est.values
            var_sum += est.stderr**2
            var_df += est.stderr**4 / (est.permutations - 1)
            round_hits += np.abs(est.values - exact[r]) <= est.halfwidth + 1e-12
            round_count += 1
            perms.append(est.permutations)
        # the tracker's combination of the rounds (Welch–Satterthwaite)
        width = combined_halfwidth(var_sum, var_df, settings["confidence"])
        hits += np.abs(est_sum - total) <= width + 1e-12
        widths.append(width)
    live = ~null
    return {"clients": n, "rounds": len(tables), "null_players": np.flatnonzero(null).tolist(),
            "coverage": float(hits[live].sum() / (repeats * live.sum())),
            "coverage_by_client": (hits / repeats).tolist(),
            "round_coverage": float(round_hits[live].sum() / (round_count * live.sum())),
            "median_halfwidth": float(np.median(np.array(widths)[:, live])),
            "median_permutations": float(np.median(perms)),
            "exact": total.tolist()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--datasets", default="digits")
    ap.add_argument("--cases", default="issue,noise50,noniid")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.5, help="FedAvg's learning rate")
    ap.add_argument("--metric", default="accuracy")
    ap.add_argument("--weighting", default="fixed")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    matrix.LR = args.lr
    logging.getLogger("islands").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    rows = []
    settings = {"tolerance": 0.005, "confidence": 0.95, "min_permutations": 10,
                "max_permutations": 200}
    for dataset in args.datasets.split(","):
        for case in args.cases.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                tables = record_rounds(dataset, case, seed, args.rounds, args.metric,
                                       args.weighting)
                row = coverage(tables, args.repeats, seed, **settings)
                row |= {"dataset": dataset, "case": case, "seed": seed}
                rows.append(row)
                print(f"{dataset:<8} {case:<8} seed {seed}: coverage {row['coverage']:.3f} "
                      f"(per round {row['round_coverage']:.3f}), median half-width "
                      f"{row['median_halfwidth']:.4f}, median orders a round "
                      f"{row['median_permutations']:.0f}", flush=True)
    cov = float(np.mean([r["coverage"] for r in rows]))
    low = min(r["coverage"] for r in rows)
    print(f"\nnominal {settings['confidence']:.2f}: mean coverage {cov:.3f}, lowest {low:.3f}"
          f" over {len(rows)} federations × {args.repeats} revaluations "
          f"({time.perf_counter() - t0:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                         "sampler": settings, "federations": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
