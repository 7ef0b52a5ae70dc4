"""Horizontal FL at scale (issue 40): the issue's table, each figure against its baseline.

Rows (each baseline measured in the same run, interleaved where both are short):

* ``tau1``: three clients syncing every step. FedAvg of the MLP 784-200-10 on the 60,000
  Fashion-MNIST training rows split IID over 3 clients, one local step of batch 32 a
  round (τ = 1), lr 0.05, one epoch (625 rounds, 1,875 steps), through
  ``FederatedModel.fit`` with its defaults (``threads="auto"``: one torch thread per
  client, the clients in parallel threads); against a one-thread torch loop over the same
  1,875 steps of batch 32 (``torch.optim.SGD``, the same initial model). Median of
  ``--repeats``, the two interleaved. Target: FL / loop <= 1.2.

    python benchmarks/bench_scale.py [--only tau1] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from common import finish, median, source_digest, verdict

TARGET_TAU1 = 1.2
TAU1_CLIENTS, TAU1_BATCH, TAU1_LR = 3, 32, 0.05
DIGEST_PARTS = ("hfl", "runtime", "aggregation", "crypto")


def _fashion() -> tuple[np.ndarray, np.ndarray]:
    from islands.data import load_fashion_mnist

    ds = load_fashion_mnist(split="train")
    return np.asarray(ds.X, dtype=np.float32), np.asarray(ds.y)


def bench_tau1(repeats: int) -> dict[str, Any]:
    """One epoch of 3-client FedAvg at τ = 1 against a one-thread torch loop."""
    import torch

    from islands.hfl import FedAvg, FederatedModel, ModelSpec

    X, y = _fashion()
    n = (len(y) // (TAU1_CLIENTS * TAU1_BATCH)) * TAU1_CLIENTS * TAU1_BATCH
    X, y = X[:n], y[:n]
    parts = [(X[k::TAU1_CLIENTS], y[k::TAU1_CLIENTS]) for k in range(TAU1_CLIENTS)]
    spec = ModelSpec("mlp", (784,), 10, hidden=(200,))
    steps = n // TAU1_BATCH

    def federated() -> tuple[float, float]:
        fm = FederatedModel(spec, FedAvg(local_steps=1, batch_size=TAU1_BATCH, lr=TAU1_LR),
                            epochs=1, random_state=0, eval_fraction=0.0)
        t0 = time.perf_counter()
        fm.fit(parts)
        seconds = time.perf_counter() - t0
        return seconds, float(np.mean(fm.predict(X[:10000]) == y[:10000]))

    def loop() -> tuple[float, float]:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            net = spec.export(spec.initial_params(0)).train()  # FL's initial model
            opt = torch.optim.SGD(net.parameters(), lr=TAU1_LR)
            Xt, yt = torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))
            order = torch.from_numpy(np.random.default_rng(0).permutation(n))
            t0 = time.perf_counter()
            for s in range(steps):
                idx = order[s * TAU1_BATCH:(s + 1) * TAU1_BATCH]
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(net(Xt[idx]), yt[idx])
                loss.backward()
                opt.step()
            seconds = time.perf_counter() - t0
            with torch.no_grad():
                acc = float((net(Xt[:10000]).argmax(1) == yt[:10000]).float().mean())
            return seconds, acc
        finally:
            torch.set_num_threads(before)

    small = [(Xk[:320], yk[:320]) for Xk, yk in parts]  # warm-up: imports, pools, kernels
    FederatedModel(spec, FedAvg(local_steps=1, batch_size=TAU1_BATCH, lr=TAU1_LR),
                   epochs=1, random_state=0, eval_fraction=0.0).fit(small)
    fl, cl, acc_fl, acc_cl = [], [], 0.0, 0.0
    for r in range(repeats):
        order = (federated, loop) if r % 2 == 0 else (loop, federated)
        for fn in order:
            seconds, acc = fn()
            if fn is federated:
                fl.append(seconds)
                acc_fl = acc
            else:
                cl.append(seconds)
                acc_cl = acc
        print(f"    tau1 repeat {r + 1}: FL {fl[-1]:.2f} s, loop {cl[-1]:.2f} s",
              file=sys.stderr, flush=True)
    return {"clients": TAU1_CLIENTS, "rounds": steps // TAU1_CLIENTS, "steps": steps,
            "fl_s": fl, "loop_s": cl, "fl_median_s": median(fl), "loop_median_s": median(cl),
            "ratio": median(fl) / median(cl), "accuracy_fl": acc_fl, "accuracy_loop": acc_cl}


def print_table(results: dict[str, Any]) -> None:
    print(f"{'figure':<58} {'measured':>22} {'target':>10} verdict")
    if "tau1" in results:
        r = results["tau1"]
        print(f"{'3 clients, τ = 1, one epoch, against a one-thread torch loop':<58} "
              f"{r['ratio']:>5.2f}× ({r['fl_median_s']:.2f} / {r['loop_median_s']:.2f} s)"
              f" {'<= 1.2×':>10} {verdict(r['ratio'] <= TARGET_TAU1)}")
        print(f"    accuracy on 10,000 training rows after the epoch: FL "
              f"{r['accuracy_fl']:.3f}, loop {r['accuracy_loop']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="tau1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--blas-threads", type=int, default=None)
    args = ap.parse_args()
    only = set(args.only.split(","))
    digests = {source_digest(DIGEST_PARTS)}
    results: dict[str, Any] = {}
    started = time.perf_counter()
    if "tau1" in only:
        print("benchmark tau1 ...", file=sys.stderr, flush=True)
        results["tau1"] = bench_tau1(args.repeats)
    print(f"Scale benchmark: Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{time.perf_counter() - started:.0f} s in all; load average "
          f"{os.getloadavg()[0]:.1f}")
    print_table(results)
    digests.add(source_digest(DIGEST_PARTS))
    finish("scale", args, digests, results, {})


if __name__ == "__main__":
    main()
