"""Horizontal FL at scale (issue 40): the issue's table, each figure against its baseline.

Rows (each baseline measured in the same run, interleaved where both are short):

* ``secure``: one secure-aggregation round of 100,000 float32 parameters, no-op training,
  10% of the clients dropping out after sharing their keys, all clients in this process
  (``bench_protect.secagg_round``): SecAgg+ at islands' defaults (γ = 0.05 colluders,
  δ = 0.10 dropout, σ = 40, η = 20: k = 28 at 100 clients, 78 at 1,000) for 100, 300
  and 1,000 clients; the wall time, the server's CPU (log-log slope 300 → 1,000: target
  <= 1.2) and a client's CPU; with ``--flower-python`` Flower 1.42's SecAgg+ for the 100
  clients in its own venv (``flower.flower_secaggplus``: k = 10 neighbours, threshold 7,
  seconds per completed round after the first). Targets: 1,000 clients <= 15 s; 100
  clients faster than Flower.
* ``fedavg``: a real-compute FedAvg round of 100 clients (``bench_hfl`` benchmark 4:
  MLP 784-200-10, IID Fashion-MNIST shards, one local epoch at batch 32, lr 0.05),
  batched (``batch_clients=True``, ``concurrency=None``) and unbatched; with
  ``--flower-python`` Flower 1.42 on the same work (``flower.flower_fedavg``).
  Target: Flower / islands >= 10.
* ``tau1``: three clients syncing every step. FedAvg of the MLP 784-200-10 on the 60,000
  Fashion-MNIST training rows split IID over 3 clients, one local step of batch 32 a
  round (τ = 1), lr 0.05, one epoch (625 rounds, 1,875 steps), through
  ``FederatedModel.fit`` with its defaults (``threads="auto"``: one torch thread per
  client, the clients in parallel threads); against a one-thread torch loop over the same
  1,875 steps of batch 32 (``torch.optim.SGD``, the same initial model). Median of
  ``--repeats``, the two interleaved. Target: FL / loop <= 1.2.
* ``noop``: a no-compute round (100,000 float32, concurrency 8) of 100 and 1,000 clients,
  each in a fresh process (``bench_hfl`` benchmark 3); log-log slope of the seconds per
  round. Target: <= 1.1.

    python benchmarks/bench_scale.py [--only secure,fedavg,tau1,noop] [--repeats 3]
                                     [--flower-python PATH] [--json OUT]
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

from common import finish, median, source_digest, verdict

TARGET_TAU1 = 1.2
TARGET_SECURE_S, TARGET_SLOPE_SERVER, TARGET_FLOWER, TARGET_NOOP_SLOPE = 15.0, 1.2, 10.0, 1.1
SECURE_CLIENTS, SECURE_DIM, SECURE_DROPOUT = (100, 300, 1000), 100_000, 0.1
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


def bench_secure(flower: str | None) -> dict[str, Any]:
    """SecAgg+ rounds of 100, 300 and 1,000 clients, and Flower's SecAgg+ at 100."""
    from bench_protect import flower_secaggplus_round, secagg_round

    rows = {}
    for n in SECURE_CLIENTS:
        rows[n] = secagg_round(n, SECURE_DIM, SECURE_DROPOUT, secure="plus")
        print(f"    SecAgg+ N={n}: wall {rows[n]['wall_s']:.2f} s, server CPU "
              f"{rows[n]['server_cpu_s']:.2f} s", file=sys.stderr, flush=True)
    res: dict[str, Any] = {"rows": rows, "slope": math.log(
        rows[1000]["server_cpu_s"] / rows[300]["server_cpu_s"]) / math.log(1000 / 300)}
    if flower:
        res["flower_100"] = flower_secaggplus_round(flower, 100, SECURE_DIM, SECURE_DROPOUT)
    return res


def bench_fedavg(flower: str | None) -> dict[str, Any]:
    """Benchmark 4 of bench_hfl at 100 clients, with Flower's round measured now."""
    from bench_hfl import bench_fedavg_round
    from flower import flower_fedavg

    measured = {100: float(flower_fedavg(flower, 100)["per_round_s"])} if flower else None
    res: dict[str, Any] = bench_fedavg_round((100,), measured)
    return res


def bench_noop_slope() -> dict[str, Any]:
    """Benchmark 3 of bench_hfl at 100 and 1,000 clients (no Flower)."""
    from bench_hfl import bench_noop

    res: dict[str, Any] = bench_noop((100, 1000), None, Path("unused"), set())
    return res


def _line(figure: str, measured: str, target: str, ok: bool | str | None) -> None:
    print(f"{figure:<62} {measured:>30} {target:>12} "
          f"{ok if isinstance(ok, str) else verdict(ok)}")


def print_table(results: dict[str, Any]) -> None:
    _line("figure", "measured", "target", "verdict")
    if "secure" in results:
        r = results["secure"]
        big, small = r["rows"][1000], r["rows"][100]
        _line("secure round, 1,000 clients × 100k, 10% dropout, wall",
              f"{big['wall_s']:.1f} s", "<= 15 s", big["wall_s"] <= TARGET_SECURE_S)
        print(f"    all 1,000 clients in this process: {big['client_cpu_s'] * 1000:.0f} s of "
              f"client CPU ({big['client_cpu_s'] * 1e3:.0f} ms each) on "
              f"{os.cpu_count()} cores; the server's own CPU {big['server_cpu_s']:.2f} s")
        f = r.get("flower_100")
        if f and "wall_s" in f:
            _line("secure round, 100 clients × 100k, against Flower SecAgg+ (k=10)",
                  f"{small['wall_s']:.2f} s vs {f['wall_s']:.2f} s", "faster",
                  small["wall_s"] < f["wall_s"])
        else:
            _line("secure round, 100 clients × 100k (Flower: --flower-python)",
                  f"{small['wall_s']:.2f} s" + (f" (Flower: {f['error'][:40]})" if f else ""),
                  "faster", None)
        _line("server CPU growth, 300 → 1,000 clients (log-log slope)",
              f"{r['slope']:.2f}", "<= 1.2", r["slope"] <= TARGET_SLOPE_SERVER)
    if "fedavg" in results:
        row = results["fedavg"]["rows"][0]
        bat = row["batched"]["per_round"]
        f = row["flower_per_round"]
        measured = results["fedavg"]["flower_measured"]
        _line("real-compute FedAvg round, 100 clients, against Flower 1.42"
              + ("" if measured else " (earlier)"),
              f"{f / bat:.2f}× faster ({bat:.2f} vs {f:.2f} s)", ">= 10×",
              f / bat >= TARGET_FLOWER if measured else None)
        print(f"    unbatched {row['unbatched']['per_round']:.2f} s, one-thread torch loop "
              f"{row['torch_loop']['per_round']:.2f} s a round")
    if "tau1" in results:
        r = results["tau1"]
        _line("3 clients, τ = 1, one epoch, against a one-thread torch loop",
              f"{r['ratio']:.2f}× ({r['fl_median_s']:.2f} / {r['loop_median_s']:.2f} s)",
              "<= 1.2×", r["ratio"] <= TARGET_TAU1)
        print(f"    accuracy on 10,000 training rows after the epoch: FL "
              f"{r['accuracy_fl']:.3f}, loop {r['accuracy_loop']:.3f}")
    if "noop" in results:
        r = results["noop"]
        a, b = r["rows"][0], r["rows"][-1]
        _line("no-compute round, 100 → 1,000 clients (log-log slope)",
              f"{r['slope']:.2f} ({a['per_round_s']:.3f} → {b['per_round_s']:.3f} s)",
              "<= 1.1", r["slope"] <= TARGET_NOOP_SLOPE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="secure,fedavg,tau1,noop")
    ap.add_argument("--flower-python", default=None,
                    help="Python of Flower 1.42's venv (benchmarks/peers/README.md)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--blas-threads", type=int, default=None)
    args = ap.parse_args()
    only = set(args.only.split(","))
    digests = {source_digest(DIGEST_PARTS)}
    results: dict[str, Any] = {}
    started = time.perf_counter()
    jobs = {"secure": lambda: bench_secure(args.flower_python),
            "fedavg": lambda: bench_fedavg(args.flower_python),
            "tau1": lambda: bench_tau1(args.repeats), "noop": bench_noop_slope}
    for key, job in jobs.items():
        if key in only:
            print(f"[{time.perf_counter() - started:6.0f} s] {key} ...", file=sys.stderr,
                  flush=True)
            results[key] = job()
    print(f"Scale benchmark: Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{time.perf_counter() - started:.0f} s in all; load average "
          f"{os.getloadavg()[0]:.1f}")
    print_table(results)
    digests.add(source_digest(DIGEST_PARTS))
    finish("scale", args, digests, results, {})


if __name__ == "__main__":
    main()
