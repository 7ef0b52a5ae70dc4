"""Robust aggregation against poisoning clients: final accuracy under attack, per rule.

Ten clients (IID parts), two of them poisoning every round; a linear softmax model
(FedAvg, 2 local steps of batch 16, lr 0.3) on digits, or on a Fashion-MNIST subset with
``--data fashion_mnist``. The baseline in the same run is clean FedAvg (plain mean, no
attacker). Rows, each the mean test accuracy over ``--seeds`` seeds:

* clean FedAvg; then for each attack (sign flipping ×10, scaling ×10, "a little is
  enough" with the paper's z_max for n = 10, f = 2 and the benign updates watched), the
  plain mean and every rule: median (f = 2), trimmed mean (β = 0.2), Krum (f = 2),
  Multi-Krum (f = 2, m = 4), norm bounding (M = the median L2 norm of the benign updates
  of the clean run, measured in the same run).

Targets: under sign flipping, the median and the trimmed mean within 3 points of clean;
the plain mean's collapse shown (reported, no target).

    python benchmarks/bench_robust.py [--data digits|fashion_mnist] [--epochs 15]
        [--seeds 3] [--attacks sign-flip,...] [--rules mean,median,...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import limit_threads, verdict
from islands.aggregation import (
    KrumAggregator,
    MedianAggregator,
    NormBoundAggregator,
    TrimmedMeanAggregator,
)
from islands.data import load
from islands.hfl import FedAvg, FederatedModel, ModelSpec
from islands.hfl.poisoning import LittleIsEnough, Scaling, SignFlipping

CLIENTS, ATTACKERS = 10, ("client-1", "client-2")


def data(name: str, seed: int = 0) -> dict[str, Any]:
    if name == "fashion_mnist":
        tr = load("fashion_mnist", split="train", n_samples=6000)
        te = load("fashion_mnist", split="test", n_samples=2000)
        X, y = tr.X.astype(np.float32), tr.y
        test = (te.X.astype(np.float32), te.y)
    else:
        d = load("digits")
        X, y = (d.X / 16).astype(np.float32), d.y
        idx = np.random.default_rng(seed).permutation(len(y))
        test = (X[idx[:400]], y[idx[:400]])
        X, y = X[idx[400:]], y[idx[400:]]
    parts = [(X[p], y[p]) for p in np.array_split(np.arange(len(y)), CLIENTS)]
    return {"parts": parts, "test": test, "features": X.shape[1]}


class _Norms:
    """Records the L2 norm of every honest update (the clean run's scale for M)."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def wrap(self, inner: Any) -> Any:
        norms = self.norms

        class Recorded:
            n_train, n_eval = inner.n_train, inner.n_eval

            def train(self, params: Any, **kw: Any) -> Any:
                out = inner.train(params, **kw)
                norms.append(float(np.linalg.norm(np.asarray(out.params, np.float64)
                                                  - np.asarray(params, np.float64))))
                return out

            def evaluate(self, params: Any) -> float:
                return float(inner.evaluate(params))

        return Recorded()


def accuracy(d: dict[str, Any], aggregator: Any, behaviour: dict[str, Any] | None,
             epochs: int, seed: int) -> float:
    fl = FederatedModel(ModelSpec("linear", (d["features"],), 10),
                        FedAvg(local_steps=2, batch_size=16, lr=0.3, aggregator=aggregator),
                        epochs=epochs, random_state=seed, concurrency=None)
    fl.fit(d["parts"], behaviour=behaviour)
    X, y = d["test"]
    return float(np.mean(fl.predict(X) == y))


def attacks() -> dict[str, Any]:
    def alie() -> dict[str, Any]:
        coalition = LittleIsEnough(clients=CLIENTS, colluders=len(ATTACKERS))
        names = [f"client-{k + 1}" for k in range(CLIENTS)]
        return {n: coalition.wrap if n in ATTACKERS else coalition.watch for n in names}

    return {"sign-flip x10": lambda: dict.fromkeys(ATTACKERS, SignFlipping),
            "scaling x10": lambda: dict.fromkeys(ATTACKERS, Scaling),
            "little is enough": alie}


def run(args: argparse.Namespace) -> dict[str, Any]:
    d = data(args.data)
    seeds = list(range(args.seeds))
    t0 = time.perf_counter()
    clean, norms = [], _Norms()
    for s in seeds:
        names = [f"client-{k + 1}" for k in range(CLIENTS)]
        clean.append(accuracy(d, None, dict.fromkeys(names, norms.wrap), args.epochs, s))
    max_norm = float(np.median(norms.norms))
    rules: dict[str, Any] = {
        "mean": lambda: None,
        "median f=2": lambda: MedianAggregator(f=2),
        "trimmed mean b=0.2": lambda: TrimmedMeanAggregator(beta=0.2),
        "krum f=2": lambda: KrumAggregator(f=2),
        "multi-krum f=2 m=4": lambda: KrumAggregator(f=2, m=4),
        f"norm bound M={max_norm:.3g}": lambda: NormBoundAggregator(max_norm=max_norm),
    }
    rows = [{"attack": "none", "rule": "mean", "accuracy": float(np.mean(clean)),
             "accuracies": clean}]
    for attack, behaviour in attacks().items():
        if args.attacks and not attack.startswith(tuple(args.attacks)):
            continue
        for rule, make in rules.items():
            if args.rules and not rule.startswith(tuple(args.rules)):
                continue
            accs = [accuracy(d, make(), behaviour(), args.epochs, s) for s in seeds]
            rows.append({"attack": attack, "rule": rule, "accuracy": float(np.mean(accs)),
                         "accuracies": accs})
    return {"rows": rows, "clean": float(np.mean(clean)), "max_norm": max_norm,
            "seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=("digits", "fashion_mnist"), default="digits")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--attacks", type=lambda v: v.split(","), default=None,
                        help="only these attacks (prefixes: sign-flip,scaling,little)")
    parser.add_argument("--rules", type=lambda v: v.split(","), default=None,
                        help="only these rules (prefixes: mean,median,trimmed,krum,multi,norm)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    limit_threads(1)
    logging.getLogger("islands").setLevel(logging.ERROR)
    out = run(args)
    clean = out["clean"]
    print(f"Robust aggregation: {args.data}, {CLIENTS} clients, {len(ATTACKERS)} attackers, "
          f"linear model, {args.epochs} epochs, mean of {args.seeds} seeds "
          f"({out['seconds']:.0f} s)")
    print(f"{'attack':<18} {'rule':<24} {'accuracy':>8} {'vs clean':>9}  target")
    for row in out["rows"]:
        gap = row["accuracy"] - clean
        target = None
        if row["attack"] == "sign-flip x10" and row["rule"].startswith(("median", "trimmed")):
            target = gap >= -0.03
        row["target"] = verdict(target)
        spread = ""
        if len(row["accuracies"]) > 1:
            spread = f"  ({min(row['accuracies']):.3f}–{max(row['accuracies']):.3f})"
        print(f"{row['attack']:<18} {row['rule']:<24} {row['accuracy']:8.3f} {gap:+9.3f}  "
              f"{row['target']}{spread}")
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "robust", "argv": sys.argv[1:], **out},
                                        indent=2))


if __name__ == "__main__":
    main()
