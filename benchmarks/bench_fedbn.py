"""FedBN against FedAvg on clients whose features are shifted (issue 38, FedBN).

Li et al. (ICLR 2021) claim that keeping batch norm local beats FedAvg when the clients'
feature distributions differ (another scanner, another contrast). Here both train the
same federation, side by side in one run:

- data: ``--rows`` Fashion-MNIST training rows (a subset drawn from the seed) split IID
  over 4 clients, each of which sees its images through its own "scanner": client 1 as
  they are, client 2 at 40 % contrast and brightened (0.4·x + 0.5), client 3 at 2.5×
  contrast and darkened (2.5·x − 0.8), client 4 rotated by 90°; each client's test rows
  (1,000 test images) go through the same transform;
- model: a small CNN with batch norm (conv 3×3 16 → BN → ReLU → 2×2 pool → conv 3×3 32 →
  BN → ReLU → 2×2 pool → linear), the same initial model for both methods;
- training: local SGD τ = 10 steps of batch 32, lr 0.05, momentum 0.9, ``--epochs``;
- score: each client's test accuracy on its own shifted test rows, with its own model
  (FedBN: the shared weights under the client's batch norm; FedAvg: the global model),
  averaged over the clients; ``--seeds`` seeds (subset, initial model, batches).

Target (issue 38): FedBN's mean accuracy above FedAvg's over the 3 seeds.

    python benchmarks/bench_fedbn.py [--epochs 3] [--rows 8000] [--seeds 0,1,2] [--json OUT]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from common import finish, limit_threads, source_digest, verdict
from islands.data.datasets import load_fashion_mnist
from islands.hfl import FedAvg, FederatedModel
from islands.hfl.strategy import FedBN

CLIENTS, TEST = 4, 1_000
LOCAL = {"local_steps": 10, "batch_size": 32, "lr": 0.05, "momentum": 0.9}


def scanner(X: np.ndarray, k: int) -> np.ndarray:
    """Client ``k``'s view of images ``X`` (n, 1, 28, 28) in [0, 1]."""
    if k == 1:
        return (0.4 * X + 0.5).astype(np.float32)
    if k == 2:
        return (2.5 * X - 0.8).astype(np.float32)
    if k == 3:
        return np.ascontiguousarray(np.rot90(X, 1, axes=(2, 3)))
    return X


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def run(method: str, seed: int, rows: int, epochs: int, data: tuple[Any, ...]
        ) -> dict[str, Any]:
    X, y, X_test, y_test = data
    rng = np.random.default_rng(seed)
    subset = rng.choice(len(y), size=rows, replace=False)
    parts = [(scanner(X[idx], k), y[idx])
             for k, idx in enumerate(np.array_split(subset, CLIENTS))]
    tests = [(scanner(X_test, k), y_test) for k in range(CLIENTS)]
    torch.manual_seed(seed)
    initial = cnn()
    strategy = FedBN(**LOCAL) if method == "fedbn" else FedAvg(**LOCAL)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    fm = FederatedModel(initial, strategy, epochs=epochs, random_state=seed, eval_fraction=0.0)
    fm.fit(parts)
    accs = []
    for k, (Xk, yk) in enumerate(tests):
        client = f"client-{k + 1}" if method == "fedbn" else None
        accs.append(float(np.mean(fm.predict(Xk, client=client) == yk)))
    return {"method": method, "seed": seed, "clients": accs, "accuracy": statistics.fmean(accs),
            "rounds": fm.aggregations_, "seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=8_000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--quick", action="store_true", help="1 epoch, 4,000 rows, 1 seed")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--blas-threads", type=int, default=0)
    args = parser.parse_args()
    limit_threads(args.blas_threads)
    epochs, rows = (1, 4_000) if args.quick else (args.epochs, args.rows)
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",")]
    digests = {source_digest(["hfl", "aggregation"])}
    train = load_fashion_mnist(split="train", normalize=True)
    test = load_fashion_mnist(split="test", normalize=True)
    data = (train.X.reshape(-1, 1, 28, 28).astype(np.float32), train.y,
            test.X[:TEST].reshape(-1, 1, 28, 28).astype(np.float32), test.y[:TEST])
    t_start = time.perf_counter()
    print(f"FedBN vs FedAvg: Fashion-MNIST, {CLIENTS} clients with shifted features, "
          f"{rows} rows, {epochs} epochs, seeds {seeds}")
    results = [run(method, seed, rows, epochs, data)
               for seed in seeds for method in ("fedavg", "fedbn")]
    digests.add(source_digest(["hfl", "aggregation"]))
    summary: dict[str, Any] = {}
    print(f"\n  {'method':<8}{'mean':>8}  {'min–max':>15}  {'std':>6}  per client (mean over "
          "seeds: as is, low contrast, high contrast, rotated)")
    for method in ("fedavg", "fedbn"):
        runs = [r for r in results if r["method"] == method]
        accs = [r["accuracy"] for r in runs]
        per_client = np.mean([r["clients"] for r in runs], axis=0).tolist()
        summary[method] = {"mean": statistics.fmean(accs), "min": min(accs), "max": max(accs),
                           "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                           "accuracies": accs, "per_client": per_client}
        s = summary[method]
        print(f"  {method:<8}{s['mean']:8.4f}  {s['min']:.4f}–{s['max']:.4f}  {s['std']:6.4f}  "
              + " ".join(f"{a:.3f}" for a in per_client))
    paired = [b["accuracy"] - a["accuracy"] for a, b in zip(results[::2], results[1::2],
                                                            strict=True)]
    met = summary["fedbn"]["mean"] > summary["fedavg"]["mean"]
    print(f"\nFedBN − FedAvg per seed: {' '.join(f'{d:+.4f}' for d in paired)}")
    print(f"target FedBN mean > FedAvg mean: {summary['fedbn']['mean']:.4f} vs "
          f"{summary['fedavg']['mean']:.4f} ({verdict(met)})")
    print(f"wall time {time.perf_counter() - t_start:.0f} s")
    finish("fedbn", argparse.Namespace(**vars(args)), digests,
           {"epochs": epochs, "rows": rows, "seeds": seeds, "runs": results,
            "summary": summary, "paired": paired, "target_met": met}, {})


if __name__ == "__main__":
    main()
