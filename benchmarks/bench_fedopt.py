"""Server optimisers and SCAFFOLD against FedAvg on label-skewed Fashion-MNIST (issue 38).

FedAvg, FedAvgM, FedAdam, FedYogi and FedAdagrad (:mod:`islands.hfl.server_opt`, Reddi
et al. 2021, Algorithm 2) and SCAFFOLD (:mod:`islands.hfl.scaffold`, Karimireddy et al.
2020, option II, global step 1) train the same federation, measured side by side in one
run:

- data: 10,000 Fashion-MNIST training rows (a random subset drawn from the seed) split
  over 10 clients with a Dirichlet(α = 0.1) label skew (``partition_dirichlet``, each
  client at least 100 rows); 2,000 test rows; every client trains on all its rows
  (``eval_fraction=0``);
- model: MLP 784-64-10; clients: FedAvg's local SGD, τ = 10 steps of batch 10 at lr 0.05,
  no momentum, the same for every method (the server optimisers differ only at the
  server; SCAFFOLD adds its control variates to the same local steps, no tuning);
- time: ``--epochs`` epochs (an epoch is S = min_k ⌊n_k/10⌋ local steps, so about three
  rounds an epoch at this skew), the same rounds for every method;
- server learning rate: as the paper does, each optimiser's η is picked from a small
  grid (``GRIDS``; β1 = 0.9, β2 = 0.99, τ = 10^-3, FedAvgM β = 0.9, FedAdagrad β1 = 0),
  on a separate tuning seed and on 2,000 validation rows drawn from the training rows
  outside the subset, never the test rows;
- then ``--seeds`` seeds (data subset, partition, initial model and batches all from the
  seed), the final test accuracy of each method: mean, min–max, standard deviation, and
  each optimiser's difference to FedAvg paired by seed.

Target (issue 38): FedAdam's and SCAFFOLD's mean test accuracy above FedAvg's over the 3
seeds.

    python benchmarks/bench_fedopt.py [--epochs 15] [--seeds 0,1,2] [--quick] [--json OUT]
                                      [--blas-threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from common import finish, limit_threads, source_digest, verdict
from islands.data.datasets import load_fashion_mnist
from islands.data.partition import partition_dirichlet
from islands.hfl import FedAvg, FederatedModel, ModelSpec, Scaffold
from islands.hfl.server_opt import server_optimizer

CLIENTS, ALPHA, TRAIN, TEST, VALIDATION = 10, 0.1, 10_000, 2_000, 2_000
LOCAL = {"local_steps": 10, "batch_size": 10, "lr": 0.05}
TUNING_SEED = 100
GRIDS: dict[str, list[float]] = {  # half decades, as the paper's grid
    "fedavgm": [0.1, 0.3, 1.0, 3.0],
    "fedadam": [0.003, 0.01, 0.03, 0.1],
    "fedyogi": [0.003, 0.01, 0.03, 0.1],
    "fedadagrad": [0.01, 0.03, 0.1, 0.3],
}
FIXED: dict[str, dict[str, float]] = {"fedavgm": {"momentum": 0.9}, "fedadagrad": {"beta1": 0.0}}
METHODS = ["fedavg", *GRIDS, "scaffold"]


def load() -> tuple[Any, Any, Any, Any]:
    train = load_fashion_mnist(split="train")
    test = load_fashion_mnist(split="test")
    return (train.X.astype(np.float32), train.y, test.X[:TEST].astype(np.float32),
            test.y[:TEST])


def run(name: str, lr: float | None, seed: int, data: tuple[Any, ...], epochs: int,
        validation: bool) -> dict[str, Any]:
    """Train one federation; return the final accuracy on the test (or validation) rows."""
    X, y, Xt, yt = data
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    rows, held = order[:TRAIN], order[TRAIN:TRAIN + VALIDATION]
    parts = [(X[rows[p]], y[rows[p]])
             for p in partition_dirichlet(y[rows], CLIENTS, ALPHA, min_size=100,
                                          random_state=seed)]
    if name == "scaffold":
        strategy: FedAvg = Scaffold(**LOCAL)
    else:
        opt = None if name == "fedavg" else server_optimizer(name, lr=lr,
                                                              **FIXED.get(name, {}))
        strategy = FedAvg(**LOCAL, server_optimizer=opt)
    spec = ModelSpec("mlp", (784,), 10, hidden=(64,))
    evaluation = (X[held], y[held]) if validation else (Xt, yt)
    t0 = time.perf_counter()
    fm = FederatedModel(spec, strategy, epochs=epochs,
                        random_state=seed, eval_fraction=0).fit(parts, test=evaluation)
    curve = [float(h.test["accuracy"]) for h in fm.history_]
    return {"method": name, "lr": lr, "seed": seed, "accuracy": curve[-1], "curve": curve,
            "rounds": fm.aggregations_, "seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--quick", action="store_true", help="5 epochs, no grid (defaults)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--blas-threads", type=int, default=0)
    args = parser.parse_args()
    limit_threads(args.blas_threads)
    epochs = 5 if args.quick else args.epochs
    seeds = [int(s) for s in args.seeds.split(",")]
    digests = {source_digest(["hfl", "aggregation", "data"])}
    data = load()
    t_start = time.perf_counter()

    chosen: dict[str, float] = {}
    tuning: list[dict[str, Any]] = []
    print(f"FedOpt and SCAFFOLD on Fashion-MNIST, Dirichlet α={ALPHA}, {CLIENTS} clients, "
          f"{epochs} epochs")
    for name, grid in GRIDS.items():
        if args.quick:
            chosen[name] = server_optimizer(name).lr  # type: ignore[attr-defined]
            continue
        rows = [run(name, lr, TUNING_SEED, data, epochs, validation=True) for lr in grid]
        tuning += rows
        best = max(rows, key=lambda r: r["accuracy"])
        chosen[name] = best["lr"]
        print(f"  tuning {name:<10} η ∈ {grid}: validation accuracy "
              + ", ".join(f"{r['accuracy']:.4f}" for r in rows) + f" → η = {best['lr']}")

    results: list[dict[str, Any]] = []
    for seed in seeds:
        for name in METHODS:
            results.append(run(name, chosen.get(name), seed, data, epochs, validation=False))
    digests.add(source_digest(["hfl", "aggregation", "data"]))

    base = {r["seed"]: r["accuracy"] for r in results if r["method"] == "fedavg"}
    summary: dict[str, Any] = {}
    print(f"\ntest accuracy after {epochs} epochs ({results[0]['rounds']} rounds), "
          f"seeds {seeds}:")
    print(f"  {'method':<11}{'η':>7}  {'mean':>7}  {'min–max':>15}  {'std':>6}  "
          f"{'Δ vs FedAvg (per seed)':>28}")
    for name in METHODS:
        accs = [r["accuracy"] for r in results if r["method"] == name]
        diffs = [r["accuracy"] - base[r["seed"]] for r in results if r["method"] == name]
        summary[name] = {"lr": chosen.get(name), "mean": statistics.fmean(accs),
                         "min": min(accs), "max": max(accs),
                         "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                         "accuracies": accs, "minus_fedavg": diffs}
        s = summary[name]
        lr = "-" if s["lr"] is None else f"{s['lr']:g}"
        print(f"  {name:<11}{lr:>7}  {s['mean']:7.4f}  {s['min']:.4f}–{s['max']:.4f}  "
              f"{s['std']:6.4f}  " + ("" if name == "fedavg" else
                                      " ".join(f"{d:+.4f}" for d in diffs)))
    met = True
    for name, label in (("fedadam", "FedAdam"), ("scaffold", "SCAFFOLD")):
        ok = summary[name]["mean"] > summary["fedavg"]["mean"]
        met = met and ok
        print(f"\ntarget {label} mean > FedAvg mean: {summary[name]['mean']:.4f} vs "
              f"{summary['fedavg']['mean']:.4f} ({verdict(ok)})", end="")
    print()
    print(f"wall time {time.perf_counter() - t_start:.0f} s")
    finish("fedopt", argparse.Namespace(**vars(args)), digests,
           {"epochs": epochs, "seeds": seeds, "chosen_lr": chosen, "tuning": tuning,
            "runs": results, "summary": summary, "target_met": met}, {})


if __name__ == "__main__":
    main()
