"""Vertical logistic regression under secret sharing: the Taylor loss against poly5 (issue 41).

1. Breast cancer (scikit-learn, stratified 80/20 split, standardised; B holds the first 10
   features and the labels, A the other 20), lr 0.3, batches of 256, 20 epochs: seconds per
   epoch (median of epochs 2 … 20, from the transcript) of ``engine="ss"`` with
   ``sigmoid="taylor"`` and ``"poly5"`` and of ``he="none"`` (the HE flow's messages in
   the clear), ``--repeats`` fits each, interleaved; then test accuracy, ROC AUC and
   log-loss (the true sigmoid of the final scores) of both sigmoids.
2. Synthetic 100k × 40 (``make_classification``: 20 informative, class_sep 1.5, flip_y
   0.01, seed 0; B 20 features, A 20), 5 epochs, batches of 1024: the same table, with the
   epoch seconds of both sigmoids.

    python benchmarks/bench_vfl_sigmoid.py [--rows 100000] [--repeats 3] [--skip-large]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from sklearn.datasets import load_breast_cancer, make_classification
from sklearn.metrics import accuracy_score, log_loss, roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from islands.vfl import VerticalLogisticRegression, maths


def split(X: Any, y: Any) -> tuple[Any, ...]:
    x_tr, x_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    return scaler.transform(x_tr), scaler.transform(x_te), y_tr, y_te


def fit(data: tuple[Any, ...], b: int, **settings: Any) -> tuple[VerticalLogisticRegression,
                                                                  dict[str, float]]:
    x_tr, x_te, y_tr, y_te = data
    model = VerticalLogisticRegression(tol=None, random_state=0, learning_rate=0.3,
                                       **settings)
    model.fit(x_tr[:, b:], x_tr[:, :b], y_tr)
    z = model.decision_function(x_te[:, b:], x_te[:, :b])
    return model, {"accuracy": accuracy_score(y_te, z > 0), "auc": roc_auc_score(y_te, z),
                   "logloss": log_loss(y_te, maths.sigmoid(z))}


def steady(model: VerticalLogisticRegression) -> float:
    return statistics.median(model.epoch_seconds_[1:] or model.epoch_seconds_)


def report(name: str, scores: dict[str, dict[str, float]]) -> None:
    print(f"\n{name}: accuracy / AUC / log-loss (true sigmoid of the final scores)")
    for sigmoid, s in scores.items():
        print(f"  {sigmoid:7s} {s['accuracy']:.4f} / {s['auc']:.4f} / {s['logloss']:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-large", action="store_true")
    args = parser.parse_args()

    X, y = load_breast_cancer(return_X_y=True)
    data = split(X, y)
    runs: dict[str, list[float]] = {"taylor": [], "poly5": [], "clear": []}
    scores = {}
    for _ in range(args.repeats):
        for name, settings in (("taylor", {}), ("poly5", {"sigmoid": "poly5"}),
                               ("clear", {"he": "none"})):
            model, score = fit(data, 10, batch_size=256, epochs=20, **settings)
            runs[name].append(steady(model))
            if name != "clear":
                scores[name] = score
    print("breast cancer (455 × (10 + 20)), batches of 256: seconds per epoch, median of "
          f"epochs 2-20, best of {args.repeats} fits")
    clear = min(runs["clear"])
    for name, times in runs.items():
        print(f"  {name:7s} {min(times) * 1e3:7.2f} ms  ({min(times) / clear:.2f}× clear)  "
              f"all: {', '.join(f'{t * 1e3:.2f}' for t in times)}")
    report("breast cancer", scores)
    if args.skip_large:
        return
    Xs, ys = make_classification(n_samples=args.rows, n_features=40, n_informative=20,
                                 class_sep=1.5, flip_y=0.01, random_state=0)
    data = split(Xs, ys)
    scores = {}
    print(f"\nsynthetic {args.rows} × (20 + 20), batches of 1024, 5 epochs: seconds per "
          "epoch (median of epochs 2-5)")
    for name, settings in (("taylor", {}), ("poly5", {"sigmoid": "poly5"})):
        model, scores[name] = fit(data, 20, batch_size=1024, epochs=5, **settings)
        print(f"  {name:7s} {steady(model):.3f} s  (epochs: "
              f"{', '.join(f'{t:.3f}' for t in model.epoch_seconds_)})")
    report(f"synthetic {args.rows} × 40", scores)


if __name__ == "__main__":
    main()
