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

Where a target is missed, the table also prints a floor measured in the same run, below
which nothing built this way can go on this machine:

* ``secure``: the cryptography every SecAgg+ client does at the round's (k, t) (2k X25519
  agreements, k + t Ed25519 checks, k + 1 ChaCha20 streams of the model), each operation
  timed now, summed over the 1,000 clients and divided by the cores (perfect parallelism);
* the server's CPU slope: the growth of the mask streams the SecAgg+ server expands,
  (1 − δ)n self masks and δn·k(1 − δ) pairwise masks of dropped clients, with k = k(n)
  from the paper's bounds (56 at 300 clients, 78 at 1,000);
* ``fedavg``: the three batched products a plain SGD step of the 100 clients cannot skip
  (forward ``bmm``, weight-gradient ``bmm``, the update), timed now on every core, times
  the steps of a round;
* ``tau1``: the same 625 rounds as a bare torch FedAvg on one thread: three modules, each
  round the global model copied into each, one step each, a float32 mean; no protocol,
  messages or checks.

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

from common import finish, median, source_digest, timed, verdict

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

    def bare() -> tuple[float, float]:
        """The same rounds as a bare torch FedAvg: load, one step each, a float32 mean."""
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            nets = [spec.export(spec.initial_params(0)).train() for _ in parts]
            opts = [torch.optim.SGD(m.parameters(), lr=TAU1_LR) for m in nets]
            params = [list(m.parameters()) for m in nets]
            mean = [p.detach().clone() for p in params[0]]
            data = [(torch.from_numpy(np.ascontiguousarray(Xk)),
                     torch.from_numpy(yk.astype(np.int64)),
                     torch.from_numpy(np.random.default_rng(k).permutation(len(yk))))
                    for k, (Xk, yk) in enumerate(parts)]
            t0 = time.perf_counter()
            for r in range(steps // TAU1_CLIENTS):
                for net, opt, ps, (Xk, yk, order) in zip(nets, opts, params, data,
                                                     strict=True):
                    with torch.no_grad():
                        torch._foreach_copy_(ps, mean)
                    idx = order[r * TAU1_BATCH:(r + 1) * TAU1_BATCH]
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(net(Xk[idx]), yk[idx]).backward()
                    opt.step()
                with torch.no_grad():
                    torch._foreach_copy_(mean, params[0])
                    for ps in params[1:]:
                        torch._foreach_add_(mean, ps)
                    torch._foreach_div_(mean, float(len(params)))
            seconds = time.perf_counter() - t0
            with torch.no_grad():
                acc = float((nets[0](torch.from_numpy(X[:10000])).argmax(1)
                             == torch.from_numpy(y[:10000])).float().mean())
            return seconds, acc
        finally:
            torch.set_num_threads(before)

    small = [(Xk[:320], yk[:320]) for Xk, yk in parts]  # warm-up: imports, pools, kernels
    FederatedModel(spec, FedAvg(local_steps=1, batch_size=TAU1_BATCH, lr=TAU1_LR),
                   epochs=1, random_state=0, eval_fraction=0.0).fit(small)
    runs: dict[str, list[float]] = {"fl": [], "loop": [], "bare": []}
    accuracy: dict[str, float] = {}
    jobs = {"fl": federated, "loop": loop, "bare": bare}
    for r in range(repeats):
        names = list(jobs) if r % 2 == 0 else list(reversed(jobs))
        for name in names:
            seconds, accuracy[name] = jobs[name]()
            runs[name].append(seconds)
        print(f"    tau1 repeat {r + 1}: FL {runs['fl'][-1]:.2f} s, loop "
              f"{runs['loop'][-1]:.2f} s, bare {runs['bare'][-1]:.2f} s",
              file=sys.stderr, flush=True)
    loop_s = median(runs["loop"])
    return {"clients": TAU1_CLIENTS, "rounds": steps // TAU1_CLIENTS, "steps": steps,
            "fl_s": runs["fl"], "loop_s": runs["loop"], "bare_s": runs["bare"],
            "fl_median_s": median(runs["fl"]), "loop_median_s": loop_s,
            "bare_median_s": median(runs["bare"]),
            "ratio": median(runs["fl"]) / loop_s, "bare_ratio": median(runs["bare"]) / loop_s,
            "accuracy_fl": accuracy["fl"], "accuracy_loop": accuracy["loop"],
            "accuracy_bare": accuracy["bare"]}


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
    res["floor"] = secure_floor(max(SECURE_CLIENTS))
    res["streams"] = {n: server_streams(n) for n in (300, 1000)}
    if flower:
        res["flower_100"] = flower_secaggplus_round(flower, 100, SECURE_DIM, SECURE_DROPOUT)
    return res


def bench_fedavg(flower: str | None) -> dict[str, Any]:
    """Benchmark 4 of bench_hfl at 100 clients, with Flower's round measured now."""
    from bench_hfl import ROUND_BATCH, bench_fedavg_round
    from flower import flower_fedavg

    measured = {100: float(flower_fedavg(flower, 100)["per_round_s"])} if flower else None
    res: dict[str, Any] = bench_fedavg_round((100,), measured)
    res["floor"] = fedavg_floor(100, res["rows"][0]["steps"], ROUND_BATCH)
    return res


def bench_noop_slope() -> dict[str, Any]:
    """Benchmark 3 of bench_hfl at 100 and 1,000 clients (no Flower)."""
    from bench_hfl import bench_noop

    res: dict[str, Any] = bench_noop((100, 1000), None, Path("unused"), set())
    return res


def _plus_parameters(n: int) -> tuple[int, int]:
    """SecAgg+'s (k, t) at islands' defaults for a round of n (the bench's dropout)."""
    from islands.aggregation.secaggplus import SecureAggregationPlus, client_parameters

    params = client_parameters(SecureAggregationPlus(dropout=SECURE_DROPOUT).config, n, n)
    assert params is not None
    return params.neighbours, params.threshold


def secure_floor(n: int) -> dict[str, Any]:
    """The cryptography of one SecAgg+ client at n clients' (k, t), timed now (seconds)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import (
        X25519PrivateKey,
        X25519PublicKey,
    )

    from islands.crypto.prg import add_expanded

    k, t = _plus_parameters(n)
    own, peer = X25519PrivateKey.generate(), X25519PrivateKey.generate().public_key()
    peer_raw = peer.public_bytes_raw()
    signer = Ed25519PrivateKey.generate()
    message = os.urandom(96)
    signature, public = signer.sign(message), signer.public_key()
    out, seed = np.zeros(SECURE_DIM, dtype=np.uint64), os.urandom(32)
    x25519 = timed(lambda: own.exchange(X25519PublicKey.from_public_bytes(peer_raw)),
                      2000)
    verify = timed(lambda: public.verify(signature, message), 1000)
    stream = timed(lambda: add_expanded(seed, out, label=b"floor"), 200)
    client = 2 * k * x25519 + (k + t) * verify + (k + 1) * stream
    return {"k": k, "t": t, "x25519_s": x25519, "verify_s": verify, "stream_s": stream,
            "client_s": client, "wall_s": n * client / (os.cpu_count() or 1)}


def server_streams(n: int) -> float:
    """The PRG streams a SecAgg+ server expands in a round of n at the bench's dropout.

    |U3| self masks plus, for each dropped client, its pairwise masks with its surviving
    neighbours: (1 − δ)n + δn·k(1 − δ) in expectation (Bell et al. 2020, §3).
    """
    live = 1.0 - SECURE_DROPOUT
    return live * n + SECURE_DROPOUT * n * _plus_parameters(n)[0] * live


def fedavg_floor(clients: int, steps: int, batch: int) -> dict[str, Any]:
    """The batched products of one plain SGD step of ``clients`` MLPs, timed now (seconds)."""
    import torch

    w = torch.randn(clients, 784, 200)
    x, dy = torch.randn(clients, batch, 784), torch.randn(clients, batch, 200)
    grad = torch.empty_like(w)
    forward = timed(lambda: torch.bmm(x, w), 10)
    weight_grad = timed(lambda: torch.bmm(x.transpose(1, 2), dy, out=grad), 10)
    update = timed(lambda: w.add_(grad, alpha=-1e-9), 10)
    step = forward + weight_grad + update
    return {"forward_s": forward, "weight_grad_s": weight_grad, "update_s": update,
            "round_s": steps * step, "steps": steps, "torch_threads": torch.get_num_threads()}


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
        fl = r["floor"]
        print(f"    floor: at k = {fl['k']}, t = {fl['t']} a client's cryptography alone (2k "
              f"X25519 {fl['x25519_s'] * 1e6:.0f} µs, k + t Ed25519 checks "
              f"{fl['verify_s'] * 1e6:.0f} µs, k + 1 streams {fl['stream_s'] * 1e6:.0f} µs) "
              f"is {fl['client_s'] * 1e3:.0f} ms: >= {fl['wall_s']:.1f} s for 1,000 clients "
              f"on {os.cpu_count()} cores")
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
        a, b = r["streams"][300], r["streams"][1000]
        print(f"    the protocol's own growth: the server's mask streams, (1 − δ)n + δn·k(1 − δ),"
              f" go from {a:.0f} to {b:.0f}: slope {math.log(b / a) / math.log(1000 / 300):.2f}")
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
        fl = results["fedavg"]["floor"]
        print(f"    floor: {fl['steps']} batched SGD steps of 100 MLPs on "
              f"{fl['torch_threads']} threads (forward {fl['forward_s'] * 1e3:.1f} ms, "
              f"weight gradient {fl['weight_grad_s'] * 1e3:.1f} ms, update "
              f"{fl['update_s'] * 1e3:.1f} ms a step) take {fl['round_s']:.2f} s a round"
              + (f"; 10× Flower is {f / TARGET_FLOWER:.2f} s" if measured else ""))
    if "tau1" in results:
        r = results["tau1"]
        _line("3 clients, τ = 1, one epoch, against a one-thread torch loop",
              f"{r['ratio']:.2f}× ({r['fl_median_s']:.2f} / {r['loop_median_s']:.2f} s)",
              "<= 1.2×", r["ratio"] <= TARGET_TAU1)
        print(f"    floor: a bare torch FedAvg of the same rounds on one thread (no protocol, "
              f"float32 mean) takes {r['bare_ratio']:.2f}× the loop "
              f"({r['bare_median_s']:.2f} s)")
        print(f"    accuracy on 10,000 training rows after the epoch: FL "
              f"{r['accuracy_fl']:.3f}, loop {r['accuracy_loop']:.3f}, bare "
              f"{r['accuracy_bare']:.3f}")
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
