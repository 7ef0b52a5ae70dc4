"""HFL benchmark: federated training against centralised training, scaling, and Flower.

Four benchmarks (horizontal FL issue), each baseline measured in the same run:

1. Federation overhead. One epoch of 3-client FedAvg through ``FederatedModel.fit``
   (τ = 1, the Fashion-MNIST train rows as float32 split IID over 3 clients, b_k = 170
   each ≈ 512 a step in all, lr 0.1, momentum 0.5, ``eval_fraction=0``) against
   ``train_centralised`` for one epoch of the same rows at batch 510 (both S = 117 steps
   at n = 60000), same model, same initial parameters. For the MLP 784-200-10 and the
   CNN (both on 60000 rows; ``--quick``: 12000). Target: FL / CL <= 1.3.
   Torch threads: both sides run with the same torch intra-op thread count, by default
   the usable cores (``--torch-threads``; torch's own default here), so the ratio is
   the federation's cost and not a change of thread setting: CL under
   ``torch.set_num_threads(T)``, FL with ``FederatedModel(threads=T)``, which sets the
   same process-wide value while its 3 client threads train. The variant
   ``threads="auto"`` (FederatedModel's default: cores // active clients, here 1 torch
   thread per client, the 3 clients in parallel threads) is reported beside it.
   Reported: seconds of ``fit`` (learners built, run, results) and of CL, ratio,
   rounds, seconds per round (mean ``RoundRecord.seconds``) against CL's per step.
   And a floor, interleaved with them: the same three clients' ``Trainer.train`` calls
   (one step each a round, 1 torch thread each in 3 threads, as ``"auto"``) and the
   server's float64 mean, with no protocol, no messages and no set-up (trainers built
   before the clock): what any federation of per-client models pays here before
   islands adds anything, against the same CL.
2. Scale. N in {10, 100, 1000} simulated clients (``--quick``: 10, 100), the MLP on the
   60000 rows split IID, one FedAvg round of τ = 1 with batch min(32, n_k), plain roles
   through ``run_local`` with concurrency 8, and 32 too at the largest N; the clients'
   torch work runs on a pool of 2 × min(N, concurrency) threads (``PooledLearner``), as
   ``FederatedModel`` runs it (a thread that has called torch keeps ~1 MB). Each N runs in
   a fresh subprocess (this script, ``--child``): RSS right after the data is loaded
   and torch warmed up (baseline), the peak RSS of the federation (VmHWM at the end:
   ``ru_maxrss`` of the image, but a forked child's ``ru_maxrss`` starts at its parent's
   RSS; the peak is reset through ``/proc/self/clear_refs`` once the data is loaded so the
   loading transient is not counted), the increment, MB per client, and the increment
   counted in model vectors (159,010 float32 = 0.64 MB) against the models that must
   exist at once (min(N, concurrency)). An epoch is S = min_k ⌊n_k/b⌋ rounds, so each
   client's learner reports n_train = b (S = 1: one round); it still holds and samples
   all its n_k rows. Momentum 0 (FedAvg's default), so no client keeps a buffer.
   The clients hold the pixels as stored, uint8, and the model scales them by 1/255
   (``ModelSpec(input_divisor=255)``: training identical to float32 pixels in [0, 1],
   47 MB of rows instead of 188 MB); ``--pixels float32`` converts them beforehand.
   Targets: at most 0.5 GB in all at 1000 clients, data included (the peak RSS or the
   PSS of the process, whichever is larger, at concurrency 8); and memory must not
   grow faster than the models that must exist at once (min(N, concurrency) of them,
   whatever N): the memory each extra client adds
   between the two largest N at concurrency 8, (increment(N2) − increment(N1)) /
   (N2 − N1), must stay <= 0.25 model vector (an idle client holds its thread and
   queue, not a model).
3. Orchestration cost against Flower. A no-compute round (each client adds 0.001 to a
   100,000-value float32 vector; FedAvg, every client every round, concurrency 8) with
   N in {10, 100, 1000} (``--quick``: 10, 100), 3 rounds in a fresh subprocess per N:
   seconds per round (mean of rounds 2..3), round 1, start-up + teardown (process wall
   time minus the rounds), peak memory (VmHWM, as in 2, and PSS summed over the process
   tree sampled every 0.5 s, as for Flower; n/a for a process gone before 3 samples).
   Targets at 1000 clients: <= 3 s per round, <= 0.5 GB, linear growth (log-log slope
   of s/round between the two largest N <= 1.1).
   With ``--flower-python PATH`` the Flower peer (``benchmarks/peers/flower_noop_round.py``
   through ``benchmarks/flower.py``, Flower 1.42 simulation on Ray, in its own venv:
   ``benchmarks/peers/README.md``) runs for the same N in the same run, with
   ``FLWR_TELEMETRY_ENABLED=0`` and a 900 s limit, its memory the peak PSS summed over
   its process tree (Ray spawns workers); the table gives Flower / islands per round.
   Without it, Flower's published figures (2-core machine of this kind: 0.21, 1.33,
   31.9 s per round, ~7 s start-up, ~1.4 GB at 1000) are printed as a reference, not
   measured in this run.

4. Real-compute FedAvg round against Flower (issue 40, item 2). FedAvg of the MLP
   784-200-10 on IID Fashion-MNIST shards (N in {10, 100}: 6000 or 600 uint8 rows each,
   the model dividing by 255), one local epoch a round (τ = ⌊n_k/32⌋ steps of batch 32),
   lr 0.05, no momentum, ``eval_fraction=0``, 3 rounds; seconds per round are the mean
   of rounds 2..3 (``RoundRecord.seconds``), in one process, one after the other:
   ``FederatedModel(batch_clients=True, concurrency=None)`` (every client in one batch,
   ``threads="auto"``: every core), the same with ``batch_clients=False`` and the
   default concurrency 8 (islands before batching), and a plain one-thread torch loop
   over the same steps (``nn.Sequential`` + ``torch.optim.SGD``, each client's shard
   in its own shuffled order, the clients one after the other, then the mean). Test
   accuracy after the last round is printed for the three. Flower's seconds per round
   (same setup, ``num_cpus=1`` per client) come through :func:`flower_fedavg_seconds`:
   ``--flower-fedavg 10=S,100=S`` gives figures measured in this run by the Flower
   peer; without it, the figures of ``MEASURED.md`` are printed as a reference, not
   measured in this run. Target: Flower / batched >= 10 at 100 clients.

Times in benchmark 1 are the median of ``--repeats`` runs (default 3 for the MLP, 1 for
the CNN; --quick 1), contenders interleaved (order reversed every other repeat) after
one small warm-up of each. Benchmarks 2 and 3 run once per N. Other work on the machine
skews every figure (two torch threads on two busy cores run many times slower): the
share of the CPU other processes used during each benchmark is printed at the end.

    python benchmarks/bench_hfl.py [--json OUT] [--quick] [--only 1,2,3] [--repeats N]
                                   [--clients 10,100,1000] [--torch-threads T]
                                   [--flower-python PATH] [--flower-script PATH]
                                   [--blas-threads N] [--flower-fedavg 10=S,100=S]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from common import (
    finish,
    fmt_bytes,
    fmt_s,
    limit_threads,
    median,
    once,
    reset_peak,
    source_digest,
    status_kb,
    verdict,
)
from flower import NOOP_SCRIPT, PeerError, flower_noop, parse_line, run_sampled
from islands.hfl.estimator import torch_threads

TARGET_FL_CL = 1.3  # FL / CL, one epoch
TARGET_NOOP_S = 3.0  # s per round at 1000 clients
TARGET_NOOP_BYTES = 0.5e9  # peak memory at 1000 clients
TARGET_SLOPE = 1.1  # log-log slope of s/round between the two largest N (1 = linear)
TARGET_MARGINAL = 0.25  # model vectors of memory per extra (idle) client, benchmark 2
NOOP_DIM = 100_000
NOOP_ROUNDS = 3
FL_CLIENTS, FL_BATCH, CL_BATCH, LR, MOMENTUM = 3, 170, 510, 0.1, 0.5
SCALE_BATCH = 32
CONCURRENCY = 8
SPLIT_SEED = 0
CHILD_TIMEOUT = 900.0
SAMPLE_EVERY = 0.5
FLOWER_PUBLISHED = {"per_round": {10: 0.21, 100: 1.33, 1000: 31.9}, "startup_s": 7.0,
                    "pss_bytes": {1000: 1.4e9}}
DIGEST_PARTS = ("hfl", "runtime", "data")
ROUND_CLIENTS, ROUND_BATCH, ROUND_LR, ROUND_ROUNDS = (10, 100), 32, 0.05, 3
TARGET_FLOWER_RATIO = 10.0  # Flower s/round over batched islands', 100 clients
FLOWER_FEDAVG_EARLIER = {10: 2.68, 100: 4.33}  # MEASURED.md, Flower 1.42, 1 CPU per client

FULL = {"mlp_rows": 60000, "cnn_rows": 60000, "clients": (10, 100, 1000)}
QUICK = {"mlp_rows": 12000, "cnn_rows": 12000, "clients": (10, 100)}


# ---------------------------------------------------------------------------- helpers
def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def mlp_spec(input_divisor: float = 1.0) -> Any:
    from islands.hfl.torch.models import ModelSpec

    return ModelSpec(kind="mlp", input_shape=(784,), n_outputs=10, hidden=(200,),
                     input_divisor=input_divisor)


def cnn_spec() -> Any:
    from islands.hfl.torch.models import ModelSpec

    return ModelSpec(kind="cnn", input_shape=(1, 28, 28), n_outputs=10)


def load_uint8() -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST train as stored, uint8 pixels (divided by the model: input_divisor)."""
    from islands.data import load_fashion_mnist

    ds = load_fashion_mnist(split="train", normalize=False)
    return np.ascontiguousarray(ds.X), np.asarray(ds.y)


def load_float32(n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST train as float32 in [0, 1], read as uint8 (a small loading peak)."""
    from islands.data import load_fashion_mnist

    ds = load_fashion_mnist(split="train", normalize=False)
    X8, y = ds.X[:n], np.asarray(ds.y[:n])
    X = X8.astype(np.float32)
    X /= np.float32(255)  # as load_fashion_mnist(normalize=True), bit for bit
    return X, y


def split(X: np.ndarray, y: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from islands.data import partition_iid

    return [(X[idx], y[idx]) for idx in partition_iid(len(y), k, random_state=SPLIT_SEED)]


def peak_bytes() -> int:
    """Peak RSS of this process image: VmHWM, as ``ru_maxrss`` but without what a child
    inherits from its parent (``ru_maxrss`` keeps the larger of the pre-exec copy of the
    parent and this image, so a child of a 1 GB parent reads >= 1 GB)."""
    return status_kb("VmHWM") * 1024


def cpu_seconds() -> tuple[float, float]:
    """(busy core-seconds of the machine, CPU seconds of this process and its children).

    The difference over a stretch is what other processes used meanwhile (approximately:
    children count once waited for; Ray's daemons may land on either side).
    """
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:9]]
    busy = (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle, iowait
    ours = sum(getattr(resource.getrusage(who), f) for who in
               (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
    return busy, ours



def fmt_mem(n: float | None) -> str:
    """Bytes, or 'n/a' where the process ended before 3 samples."""
    return "n/a" if n is None else fmt_bytes(n)


# ---------------------------------------------------------------------------- 1
def bench_overhead(kind: str, rows: int, threads: int, repeats: int) -> dict[str, Any]:
    from islands.hfl import FedAvg, FederatedModel
    from islands.hfl.torch.models import ModulePool
    from islands.hfl.torch.training import Position, Trainer, train_centralised

    spec = mlp_spec() if kind == "mlp" else cnn_spec()
    X, y = load_float32(rows)
    parts = split(X, y, FL_CLIENTS)

    def fl(th: int | str, data: list[tuple[np.ndarray, np.ndarray]]) -> Any:
        strategy = FedAvg(local_steps=1, batch_size=FL_BATCH, lr=LR, momentum=MOMENTUM)
        return FederatedModel(spec, strategy, epochs=1, random_state=0, eval_fraction=0.0,
                              threads=th).fit(data)  # type: ignore[arg-type]

    def cl(Xc: np.ndarray, yc: np.ndarray) -> Any:
        with torch_threads(threads):
            return train_centralised(spec, Xc, yc, epochs=1, batch_size=CL_BATCH, lr=LR,
                                     momentum=MOMENTUM, seed=0, init_seed=0)

    def alone(trainers: list[Any]) -> Any:
        """The clients' steps and the server's float64 mean, with no protocol around them."""
        steps = min(t.steps_per_epoch(FL_BATCH) for t in trainers)
        params, buffers = spec.initial_params(0), [None] * len(trainers)
        with torch_threads(1), ThreadPoolExecutor(len(trainers)) as pool:
            for step in range(steps):
                def one(k: int, w: np.ndarray = params, step: int = step,
                        bufs: list[Any] = buffers) -> Any:
                    return trainers[k].train(w, start=Position(0, step), steps=1,
                                             batch_size=FL_BATCH, lr=LR, momentum=MOMENTUM,
                                             momentum_buffer=bufs[k])
                outs = list(pool.map(one, range(len(trainers))))
                buffers = [o.momentum for o in outs]
                total = np.zeros(params.size)
                for o in outs:
                    total += o.params.astype(np.float64)
                params = (total / len(outs)).astype(np.float32)
        return params

    def trainers_of(data: list[tuple[np.ndarray, np.ndarray]]) -> list[Any]:
        shared = ModulePool(spec)  # as FederatedModel: one pool of modules for its clients
        return [Trainer(spec, Xk, yk, seed=k, pool=shared) for k, (Xk, yk) in enumerate(data)]

    # warm-up: torch's first calls, thread pools, allocator
    small = 4 * CL_BATCH
    cl(X[:small], y[:small])
    fl(threads, split(X[:small], y[:small], FL_CLIENTS))
    fl("auto", split(X[:small], y[:small], FL_CLIENTS))
    alone(trainers_of(split(X[:small], y[:small], FL_CLIENTS)))
    trainers = trainers_of(parts)  # built outside the clock: the floor leaves set-up out
    names = ("cl", "fl", "fl_auto", "alone")
    times: dict[str, list[float]] = {k: [] for k in names}
    out: dict[str, Any] = {}
    for rep in range(repeats):
        order = list(names) if rep % 2 == 0 else list(reversed(names))
        for name in order:
            if name == "cl":
                t, out[name] = once(lambda: cl(X, y))
            elif name == "alone":
                t, out[name] = once(lambda: alone(trainers))
            else:
                th: int | str = threads if name == "fl" else "auto"
                t, out[name] = once(lambda th=th: fl(th, parts))
            times[name].append(t)
        print(f"    {kind} rep {rep + 1}: " + ", ".join(f"{k} {fmt_s(v[-1])}"
                                                       for k, v in times.items()),
              file=sys.stderr, flush=True)
    med = {k: median(v) for k, v in times.items()}
    steps = rows // CL_BATCH
    res: dict[str, Any] = {"kind": kind, "model": spec.describe(), "rows": len(y),
                           "torch_threads": threads, "repeats": repeats,
                           "cl_steps": steps, "cl_s": med["cl"],
                           "cl_s_per_step": med["cl"] / steps,
                           "cl_loss": float(out["cl"][1][0]), "times": times,
                           "target": TARGET_FL_CL, "alone_s": med["alone"],
                           "alone_ratio": med["alone"] / med["cl"]}
    for name in ("fl", "fl_auto"):
        model = out[name]
        rounds = model.rounds_
        res[name] = {
            "seconds": med[name], "ratio": med[name] / med["cl"],
            "met": med[name] / med["cl"] <= TARGET_FL_CL, "rounds": len(rounds),
            "run_wall_s": float(model.wall_time_),
            "s_per_round": float(np.mean([r.seconds for r in rounds])),
            "loss_last_round": float(rounds[-1].loss),
            "steps_per_epoch": int(model.steps_per_epoch_),
            "threads": threads if name == "fl" else max(1, cores() // FL_CLIENTS),
        }
    return res


# ---------------------------------------------------------------------------- children
class OneRound:
    """A learner that reports n_train = b, so that an epoch (S = min ⌊n_k/b⌋) is one round.

    Training still draws its batch from all of the inner learner's rows.
    """

    def __init__(self, inner: Any, batch: int) -> None:
        self.inner = inner
        self.batch = batch

    @property
    def n_train(self) -> int:
        return self.batch

    @property
    def n_eval(self) -> int:
        return int(self.inner.n_eval)

    def train(self, params: Any, **kw: Any) -> Any:
        return self.inner.train(params, **kw)

    def evaluate(self, params: Any) -> float:
        return float(self.inner.evaluate(params))


class NoopLearner:
    """No compute: the new local model is the global one plus 0.001."""

    n_train = 1
    n_eval = 0

    def train(self, params: Any, *, epoch: int, step: int, steps: int, batch_size: int,
              config: Any, state: Any) -> Any:
        from islands.hfl.protocol import LocalOutcome

        return LocalOutcome(params=params + np.float32(0.001), state=None, loss=0.0)

    def evaluate(self, params: Any) -> float:
        return float("nan")


def child_scale(n_clients: int, concurrency: int, pixels: str = "uint8") -> dict[str, Any]:
    import torch

    from islands.hfl import FedAvg, client, server
    from islands.hfl.estimator import client_seed
    from islands.hfl.torch.learner import PooledLearner, TorchLearner
    from islands.hfl.torch.models import ModulePool, flat_parameters
    from islands.hfl.torch.training import train_centralised
    from islands.runtime import run_local

    # uint8 pixels with the model's input_divisor train exactly as float32 pixels in [0, 1]
    spec = mlp_spec(255.0 if pixels == "uint8" else 1.0)
    active = min(n_clients, concurrency)
    threads = max(1, cores() // active)  # as FederatedModel(threads="auto")
    torch.set_num_threads(threads)
    X, y = load_uint8() if pixels == "uint8" else load_float32()
    parts = split(X, y, n_clients)
    del X, y
    batch = min(SCALE_BATCH, min(len(p[1]) for p in parts))
    train_centralised(spec, parts[0][0][:64], parts[0][1][:64], epochs=1, batch_size=32,
                      lr=LR)  # warm torch up: its pools do not count as the federation's
    gc.collect()
    rss_data = status_kb("VmRSS") * 1024
    peak_loading = peak_bytes()
    was_reset = reset_peak()

    pool = ModulePool(spec)
    # the torch work on a pool of 2 × active threads, as FederatedModel runs it
    # (PooledLearner): a thread that has called torch keeps ~1 MB of per-thread state
    executor = ThreadPoolExecutor(max_workers=2 * active, thread_name_prefix="train")
    names = [f"c{k}" for k in range(n_clients)]
    strategy = FedAvg(local_steps=1, batch_size=batch, lr=LR)
    roles: dict[str, Any] = {"server": partial(
        server, clients=names, strategy=strategy, initial=flat_parameters(spec.build(0)),
        epochs=1, concurrency=concurrency, send_final=False)}
    for k, (name, (Xk, yk)) in enumerate(zip(names, parts, strict=True)):
        learner = PooledLearner(TorchLearner(spec, Xk, yk, seed=client_seed(0, k), pool=pool),
                                executor, timeout=CHILD_TIMEOUT)
        roles[name] = partial(client, server="server", learner=OneRound(learner, batch),
                              aggregator=strategy.aggregator)
    t0 = time.perf_counter()
    with executor:
        run = run_local(roles, tolerate=names, timeout=CHILD_TIMEOUT, blas_threads=None)
    wall = time.perf_counter() - t0
    rss_end = status_kb("VmRSS") * 1024
    peak = peak_bytes()
    res = run.results["server"]
    assert len(res.rounds) == 1 and not run.failures, (res.rounds, run.failures)
    model_bytes = spec.n_params() * 4
    inc = peak - rss_data
    return {"clients": n_clients, "concurrency": concurrency, "torch_threads": threads,
            "pixels": pixels, "data_bytes": int(sum(p[0].nbytes + p[1].nbytes for p in parts)),
            "batch": batch, "rows_per_client": [len(parts[0][1]), len(parts[-1][1])],
            "round_s": res.rounds[0].seconds, "run_wall_s": wall,
            "rss_after_data_bytes": rss_data, "peak_loading_bytes": peak_loading,
            "peak_reset": was_reset, "peak_bytes": peak, "rss_end_bytes": rss_end,
            "increment_bytes": inc, "increment_per_client_bytes": inc / n_clients,
            "model_bytes": model_bytes, "active": active,
            "increment_models": inc / model_bytes,
            "modules_created": pool.size, "messages": len(run.transcript),
            "wire_bytes": int(run.transcript.total_bytes)}


def child_noop(n_clients: int, concurrency: int) -> dict[str, Any]:
    from islands.hfl import FedAvg, client, server
    from islands.runtime import run_local

    gc.collect()
    rss_setup = status_kb("VmRSS") * 1024
    names = [f"c{k}" for k in range(n_clients)]
    strategy = FedAvg(batch_size=None)  # full batch of n_k = 1 row: S = 1, a round an epoch
    roles: dict[str, Any] = {"server": partial(
        server, clients=names, strategy=strategy, initial=np.zeros(NOOP_DIM, np.float32),
        epochs=NOOP_ROUNDS, concurrency=concurrency, send_final=False)}
    for name in names:
        roles[name] = partial(client, server="server", learner=NoopLearner(),
                              aggregator=strategy.aggregator)
    t0 = time.perf_counter()
    run = run_local(roles, tolerate=names, timeout=CHILD_TIMEOUT, blas_threads=None)
    wall = time.perf_counter() - t0
    res = run.results["server"]
    assert len(res.rounds) == NOOP_ROUNDS and not run.failures, (res.rounds, run.failures)
    expect = np.float32(0.001) * NOOP_ROUNDS
    assert np.allclose(res.params, expect, rtol=1e-4), res.params[:3]
    rounds = [r.seconds for r in res.rounds]
    peak = peak_bytes()
    return {"clients": n_clients, "concurrency": concurrency, "rounds_s": rounds,
            "per_round_s": float(np.mean(rounds[1:])), "run_wall_s": wall,
            "rss_setup_bytes": rss_setup, "peak_bytes": peak,
            "increment_bytes": peak - rss_setup, "messages": len(run.transcript),
            "wire_bytes": int(run.transcript.total_bytes)}


def run_child(spec: str) -> None:
    kind, n, conc, *pixels = spec.split(":")
    out = (child_scale(int(n), int(conc), *pixels) if kind == "scale"
           else child_noop(int(n), int(conc)))
    out["digest"] = source_digest(DIGEST_PARTS)
    out["ru_maxrss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("CHILD " + json.dumps(out), flush=True)


def spawn_child(kind: str, n: int, conc: int, *extra: str) -> dict[str, Any]:
    child = ":".join((kind, str(n), str(conc), *extra))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", child]
    proc = run_sampled(cmd, dict(os.environ), CHILD_TIMEOUT)
    out = parse_line(proc["stdout"], "CHILD ")
    if proc["rc"] != 0 or out is None:
        raise RuntimeError(f"child {kind} N={n} failed (rc {proc['rc']}): "
                           f"{proc['stderr'][-2000:]}")
    out.update(process_wall_s=proc["wall_s"], pss_peak_bytes=proc["pss_peak_bytes"])
    return out


# ---------------------------------------------------------------------------- 2
def bench_scale(counts: tuple[int, ...], digests: set[str], pixels: str = "uint8"
                ) -> dict[str, Any]:
    runs = [(n, CONCURRENCY) for n in counts] + [(max(counts), 32)]
    rows = []
    for n, conc in runs:
        r = spawn_child("scale", n, conc, pixels)
        digests.add(r.pop("digest"))
        rows.append(r)
        print(f"    scale N={n:<5d} conc={conc:<3d} round {fmt_s(r['round_s'])}, "
              f"peak {fmt_bytes(r['peak_bytes'])} (+{fmt_bytes(r['increment_bytes'])})",
              file=sys.stderr, flush=True)
    out: dict[str, Any] = {"rows": rows, "target_marginal_models": TARGET_MARGINAL,
                           "pixels": pixels}
    base = [r for r in rows if r["concurrency"] == CONCURRENCY]
    if len(base) >= 2:
        a, b = base[-2], base[-1]
        marginal = (b["increment_bytes"] - a["increment_bytes"]) / (b["clients"] - a["clients"])
        out["marginal_bytes_per_client"] = marginal
        out["marginal_models_per_client"] = marginal / b["model_bytes"]
        out["met"] = marginal / b["model_bytes"] <= TARGET_MARGINAL
    top = base[-1]
    out["total_bytes"] = max(top["peak_bytes"], top["pss_peak_bytes"] or 0)
    out["met_total"] = out["total_bytes"] <= TARGET_NOOP_BYTES
    return out


# ---------------------------------------------------------------------------- 3
def run_flower(python: str, script: Path, n: int) -> dict[str, Any]:
    try:
        f = flower_noop(python, n, NOOP_ROUNDS, script=script, timeout=CHILD_TIMEOUT)
    except PeerError as exc:
        return {"clients": n, "error": str(exc)[-1500:]}
    per = f["rounds_s"]
    return {"clients": n, "rounds_s": per, "per_round_s": float(np.mean(per[1:])),
            "script_s": float(f["script_seconds"]), "process_wall_s": f["process_wall_s"],
            "overhead_s": f["process_wall_s"] - sum(per),
            "pss_peak_bytes": f["pss_peak_bytes"], "max_processes": f["max_processes"]}


def bench_noop(counts: tuple[int, ...], flower: str | None, script: Path,
               digests: set[str]) -> dict[str, Any]:
    rows = []
    for n in counts:
        r = spawn_child("noop", n, CONCURRENCY)
        digests.add(r.pop("digest"))
        r["overhead_s"] = r["process_wall_s"] - sum(r["rounds_s"])
        print(f"    noop N={n:<5d} islands {fmt_s(r['per_round_s'])}/round, "
              f"peak {fmt_bytes(r['peak_bytes'])}", file=sys.stderr, flush=True)
        if flower:
            f = run_flower(flower, script, n)
            r["flower"] = f
            msg = (f"{fmt_s(f['per_round_s'])}/round, PSS {fmt_mem(f['pss_peak_bytes'])}"
                   if "error" not in f else f["error"][-300:])
            print(f"    noop N={n:<5d} Flower  {msg}", file=sys.stderr, flush=True)
        rows.append(r)
    top = rows[-1]
    res: dict[str, Any] = {"rows": rows, "dim": NOOP_DIM, "rounds": NOOP_ROUNDS,
                           "concurrency": CONCURRENCY, "flower_measured": bool(flower),
                           "flower_published": FLOWER_PUBLISHED}
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        res["slope"] = (math.log(b["per_round_s"] / a["per_round_s"])
                        / math.log(b["clients"] / a["clients"]))
    if top["clients"] >= 1000:
        res["met_time"] = top["per_round_s"] <= TARGET_NOOP_S
        res["met_memory"] = max(top["peak_bytes"], top["pss_peak_bytes"] or 0) <= TARGET_NOOP_BYTES
    if "slope" in res:
        res["met_linear"] = res["slope"] <= TARGET_SLOPE
    return res


# ---------------------------------------------------------------------------- report
def torch_loop_round(parts: list[tuple[np.ndarray, np.ndarray]], steps: int,
                     state: dict[str, Any], rnd: int) -> dict[str, Any]:
    """One FedAvg round as a plain one-thread torch loop: every client's steps, then the mean."""
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 10))
    total = {k: torch.zeros_like(v) for k, v in state.items()}
    for k, (X, y) in enumerate(parts):
        model.load_state_dict(state)
        opt = torch.optim.SGD(model.parameters(), lr=ROUND_LR)
        order = np.random.default_rng([k, rnd]).permutation(len(y))
        Xt, yt = torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))
        for j in range(steps):
            idx = torch.from_numpy(order[j * ROUND_BATCH:(j + 1) * ROUND_BATCH])
            loss = nn.functional.cross_entropy(model(Xt[idx].float() / 255), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        for name, v in model.state_dict().items():
            total[name] += v
    return {name: v / len(parts) for name, v in total.items()}


def flower_fedavg_seconds(measured: dict[int, float] | None) -> tuple[dict[int, float], bool]:
    """Return Flower's seconds per real-compute FedAvg round by N, and whether measured now.

    ``measured``: the figures the Flower peer (``benchmarks/peers/flower_fedavg_round.py``,
    same setup, ``num_cpus=1`` per client) measured in this run, by client count; None:
    ``MEASURED.md``'s figures, a reference only.
    """
    return (dict(measured), True) if measured else (dict(FLOWER_FEDAVG_EARLIER), False)


def bench_fedavg_round(counts: tuple[int, ...], flower: dict[int, float] | None
                       ) -> dict[str, Any]:
    """Benchmark 4: seconds per real-compute FedAvg round, batched, unbatched, torch loop."""
    import torch

    from islands.data import load_fashion_mnist
    from islands.hfl import FedAvg, FederatedModel
    from islands.hfl.torch.training import Trainer

    X, y = load_uint8()
    test = load_fashion_mnist(split="test", normalize=False)
    X_test, y_test = np.ascontiguousarray(test.X).reshape(-1, 784), np.asarray(test.y)
    spec = mlp_spec(255.0)
    scorer = Trainer(spec, X_test, y_test)
    rows = []
    for n in counts:
        parts = [(Xk.reshape(len(Xk), 784), yk) for Xk, yk in split(X, y, n)]
        steps = min(len(yk) for _, yk in parts) // ROUND_BATCH
        row: dict[str, Any] = {"clients": n, "steps": steps}
        for name, batch, conc in (("batched", True, None), ("unbatched", False, CONCURRENCY)):
            seconds: list[float] = []
            fm = FederatedModel(spec, FedAvg(local_steps=steps, batch_size=ROUND_BATCH,
                                             lr=ROUND_LR), epochs=ROUND_ROUNDS,
                                concurrency=conc, eval_fraction=0, batch_clients=batch,
                                callback=lambda r, _e, s=seconds: s.append(r.seconds))
            fm.fit(parts)
            row[name] = {"per_round": float(np.mean(seconds[1:])), "rounds": seconds,
                         "accuracy": float(scorer.evaluate(fm.params_, X_test, y_test)),
                         "batches": fm.batches_}
            print(f"    round N={n:<4d} {name:<9s} {row[name]['per_round']:.3f} s/round",
                  file=sys.stderr, flush=True)
        model = torch.nn.Sequential(torch.nn.Linear(784, 200), torch.nn.ReLU(),
                                    torch.nn.Linear(200, 10))
        state = {k: v.clone() for k, v in model.state_dict().items()}
        seconds = []
        with torch_threads(1):
            for rnd in range(ROUND_ROUNDS):
                t0 = time.perf_counter()
                state = torch_loop_round(parts, steps, state, rnd)
                seconds.append(time.perf_counter() - t0)
            model.load_state_dict(state)
            with torch.no_grad():
                pred = model(torch.from_numpy(X_test).float() / 255).argmax(1).numpy()
        row["torch_loop"] = {"per_round": float(np.mean(seconds[1:])), "rounds": seconds,
                             "accuracy": float(np.mean(pred == y_test))}
        rows.append(row)
    flower_s, measured = flower_fedavg_seconds(flower)
    for row in rows:
        f = flower_s.get(row["clients"])
        row["flower_per_round"] = f
        row["flower_over_batched"] = None if f is None else f / row["batched"]["per_round"]
    return {"rows": rows, "flower_measured": measured, "target": TARGET_FLOWER_RATIO}


def print_fedavg_round(res: dict[str, Any]) -> None:
    print("4. Real-compute FedAvg round (MLP 784-200-10, IID Fashion-MNIST shards, 1 local "
          f"epoch at batch {ROUND_BATCH}, lr {ROUND_LR}), s/round (mean of rounds "
          f"2..{ROUND_ROUNDS}); test accuracy after {ROUND_ROUNDS} rounds:")
    star = "" if res["flower_measured"] else "*"
    print(f"   {'N':>4} {'steps':>5} | {'batched':>9} {'unbatched':>9} {'torch loop':>10} | "
          f"{'unb./bat.':>9} {'loop/bat.':>9} | {'Flower':>8} {'Fl./bat.':>8} {'target':>7} | "
          "accuracy bat. / unb. / loop")
    for row in res["rows"]:
        bat, unb, loop = (row[k]["per_round"] for k in ("batched", "unbatched", "torch_loop"))
        f, ratio = row["flower_per_round"], row["flower_over_batched"]
        ok = None if ratio is None or row["clients"] != 100 else ratio >= res["target"]
        print(f"   {row['clients']:>4} {row['steps']:>5} | {bat:>7.3f} s {unb:>7.3f} s "
              f"{loop:>8.3f} s | {unb / bat:>8.2f}x {loop / bat:>8.2f}x | "
              + (f"{f:>6.2f} s{star} {ratio:>7.2f}x" if f is not None else f"{'n/a':>17}")
              + f" {verdict(ok):>7} | " + " / ".join(
                  f"{row[k]['accuracy']:.3f}" for k in ("batched", "unbatched", "torch_loop")))
    if not res["flower_measured"]:
        print("   * Flower 1.42 as measured earlier on this machine (MEASURED.md), not in "
              "this run: pass --flower-fedavg 10=S,100=S from the Flower peer")


def print_overhead(results: dict[str, Any]) -> None:
    header = ["benchmark", "islands", "baseline", "ratio", "target", "result", "notes"]
    rows = []
    for kind in ("mlp", "cnn"):
        r = results.get(f"overhead_{kind}")
        if r is None:
            continue
        for name, label in (("fl", f"T={r['torch_threads']}"), ("fl_auto", "auto")):
            f = r[name]
            rows.append([f"1. FL/CL {kind.upper()} n={r['rows']} ({label}, "
                         f"{f['threads']} torch thr)", fmt_s(f["seconds"]), fmt_s(r["cl_s"]),
                         f"{f['ratio']:.2f}", f"<= {TARGET_FL_CL}", verdict(f["met"]),
                         f"{f['rounds']} rounds, {f['s_per_round'] * 1e3:.1f} ms/round vs CL "
                         f"{r['cl_s_per_step'] * 1e3:.1f} ms/step; {r['repeats']} rep"])
        rows.append([f"   floor: the 3 clients' training alone ({kind.upper()})",
                     fmt_s(r["alone_s"]), fmt_s(r["cl_s"]), f"{r['alone_ratio']:.2f}", "-", "-",
                     "Trainer.train per client per round and the float64 mean, 1 torch thread "
                     "each in 3 threads, no protocol, no set-up"])
    if not rows:
        return
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(6)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + "  notes")
    for x in rows:
        print("  ".join(c.ljust(w) for c, w in zip(x, widths, strict=False)) + "  " + x[6])


def print_scale(sc: dict[str, Any]) -> None:
    data = sc["rows"][0].get("data_bytes")
    print("2. scale, MLP one round (τ=1, batch b): fresh process per row; increment = peak "
          "RSS of the federation − RSS after data + torch warm-up; 'models' = increment / "
          f"{fmt_bytes(sc['rows'][0]['model_bytes'])} model, 'active' = min(N, concurrency); "
          f"pixels {sc.get('pixels', 'float32')}"
          + (f" ({fmt_bytes(data)} of client data)" if data else "") + ":")
    print(f"   {'N':>5} {'conc':>4} {'b':>3} {'round':>9} {'run':>9} {'after data':>10} "
          f"{'peak':>9} {'increment':>10} {'per client':>10} {'models':>7} {'active':>6}")
    for r in sc["rows"]:
        print(f"   {r['clients']:>5} {r['concurrency']:>4} {r['batch']:>3} "
              f"{fmt_s(r['round_s']):>9} {fmt_s(r['run_wall_s']):>9} "
              f"{fmt_bytes(r['rss_after_data_bytes']):>10} {fmt_bytes(r['peak_bytes']):>9} "
              f"{fmt_bytes(r['increment_bytes']):>10} "
              f"{fmt_bytes(r['increment_per_client_bytes']):>10} "
              f"{r['increment_models']:>7.1f} {r['active']:>6}")
    if "met" in sc:
        print(f"   memory per extra client between the two largest N (concurrency "
              f"{CONCURRENCY}): {fmt_bytes(sc['marginal_bytes_per_client'])} = "
              f"{sc['marginal_models_per_client']:.2f} models (target <= {TARGET_MARGINAL}: "
              f"idle clients hold no model): {verdict(sc['met'])}")
    if "met_total" in sc:
        top = max(r["clients"] for r in sc["rows"])
        print(f"   in all at N={top} (concurrency {CONCURRENCY}), data and torch included: "
              f"{fmt_bytes(sc['total_bytes'])} (target <= {fmt_bytes(TARGET_NOOP_BYTES)}): "
              f"{verdict(sc['met_total'])}")


def print_noop(nr: dict[str, Any]) -> None:
    measured = nr["flower_measured"]
    print(f"3. no-compute round, {nr['dim']:,} float32, {nr['rounds']} rounds, concurrency "
          f"{nr['concurrency']}; s/round = mean of rounds 2..{nr['rounds']}; 'start' = process "
          "wall − rounds (start-up + teardown); Flower "
          + ("measured in this run:" if measured else
             "= published figures (reference, not measured in this run):"))
    print(f"   {'N':>5} {'islands':>9} {'round 1':>9} {'start':>8} {'peak RSS':>9} "
          f"{'PSS':>9} | {'Flower':>9} {'round 1':>9} {'start':>8} {'PSS':>9} "
          f"{'Flower/islands':>14}")
    for r in nr["rows"]:
        n = r["clients"]
        f = r.get("flower")
        if f is not None and "error" not in f:
            fl = (f"{fmt_s(f['per_round_s']):>9} {fmt_s(f['rounds_s'][0]):>9} "
                  f"{fmt_s(f['overhead_s']):>8} {fmt_mem(f['pss_peak_bytes']):>9}")
            ratio = f"{f['per_round_s'] / r['per_round_s']:>13.1f}x"
        elif f is not None:
            fl, ratio = f"{'failed: ' + f['error'][:40]:>40}", ""
        else:
            pub = FLOWER_PUBLISHED["per_round"].get(n)
            mem = FLOWER_PUBLISHED["pss_bytes"].get(n)
            fl = (f"{(fmt_s(pub) + '*') if pub else '-':>9} {'-':>9} "
                  f"{'~7 s*':>8} {(fmt_bytes(mem) + '*') if mem else '-':>9}")
            ratio = f"{pub / r['per_round_s']:>13.1f}x*" if pub else ""
        print(f"   {n:>5} {fmt_s(r['per_round_s']):>9} {fmt_s(r['rounds_s'][0]):>9} "
              f"{fmt_s(r['overhead_s']):>8} {fmt_bytes(r['peak_bytes']):>9} "
              f"{fmt_mem(r['pss_peak_bytes']):>9} | {fl} {ratio}")
    if not measured:
        print("   * reference, not measured in this run (Flower 1.41, Ray, 2-core machine)")
    if "met_time" in nr:
        top = nr["rows"][-1]
        print(f"   targets at N={top['clients']}: <= {TARGET_NOOP_S} s/round "
              f"{verdict(nr['met_time'])} ({fmt_s(top['per_round_s'])}); <= "
              f"{fmt_bytes(TARGET_NOOP_BYTES)} {verdict(nr['met_memory'])} "
              f"({fmt_bytes(max(top['peak_bytes'], top['pss_peak_bytes'] or 0))})")
    if "slope" in nr:
        print(f"   growth: log-log slope of s/round between the two largest N = "
              f"{nr['slope']:.2f} (target <= {TARGET_SLOPE}: {verdict(nr['met_linear'])})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (12000 rows, N in 10,100): a smoke test")
    parser.add_argument("--only", default="1,2,3,4",
                        help="comma-separated subset of 1,2,3,4")
    parser.add_argument("--repeats", type=int, default=0,
                        help="repeats of benchmark 1 (default 3 MLP, 1 CNN; --quick 1)")
    parser.add_argument("--clients", default="",
                        help="client counts of 2 and 3 (default 10,100,1000; quick 10,100)")
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch threads of both sides in 1 (default: usable cores)")
    parser.add_argument("--flower-python", help="Python of Flower's venv (benchmarks/peers/"
                        "README.md): run the Flower peer")
    parser.add_argument("--flower-script", type=Path, default=NOOP_SCRIPT,
                        help="the Flower no-compute peer script")
    parser.add_argument("--blas-threads", type=int, default=0,
                        help="cap BLAS/OpenMP threads (default 0: the libraries' defaults)")
    parser.add_argument("--pixels", choices=("uint8", "float32"), default="uint8",
                        help="2: the clients' pixels as stored (uint8, the model scales by "
                             "1/255) or converted to float32 in [0, 1] beforehand")
    parser.add_argument("--flower-fedavg", default="",
                        help="4: Flower's s/round measured in this run, e.g. 10=2.68,100=4.33")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child)
        return
    limit_threads(args.blas_threads)
    sizes = QUICK if args.quick else FULL
    only = {int(s) for s in args.only.split(",") if s.strip()}
    if not only <= {1, 2, 3, 4}:
        parser.error(f"--only takes a subset of 1,2,3,4; got {args.only!r}")
    try:
        flower_fedavg = {int(n): float(v) for n, v in (
            item.split("=") for item in args.flower_fedavg.split(",") if item.strip())}
    except ValueError:
        parser.error(f"--flower-fedavg takes N=S,N=S; got {args.flower_fedavg!r}")
    counts = (tuple(sorted(int(s) for s in args.clients.split(",") if s.strip()))
              if args.clients else sizes["clients"])
    if any(n < 1 or n > 60000 for n in counts):
        parser.error("--clients: every count must be in [1, 60000]")
    if args.flower_python and not args.flower_script.is_file():
        parser.error(f"--flower-script: {args.flower_script} not found")
    threads = args.torch_threads or cores()
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    other: dict[str, float] = {}  # share of the machine other processes used, per job
    results["other_cpu_share"] = other
    digests = {source_digest(DIGEST_PARTS)}
    started = time.perf_counter()
    from islands.errors import DataNotFoundError

    jobs = [
        ("overhead_mlp", 1, lambda: bench_overhead("mlp", sizes["mlp_rows"], threads,
                                                   args.repeats or (1 if args.quick else 3))),
        ("overhead_cnn", 1, lambda: bench_overhead("cnn", sizes["cnn_rows"], threads,
                                                   args.repeats or 1)),
        ("scale", 2, lambda: bench_scale(counts, digests, args.pixels)),
        ("noop", 3, lambda: bench_noop(counts, args.flower_python, args.flower_script,
                                       digests)),
        ("fedavg_round", 4, lambda: bench_fedavg_round(ROUND_CLIENTS, flower_fedavg or None)),
    ]
    for key, number, job in jobs:
        if number not in only:
            continue
        print(f"[{time.perf_counter() - started:7.1f} s] benchmark {number} ({key})...",
              file=sys.stderr, flush=True)
        busy0, ours0 = cpu_seconds()
        t0 = time.perf_counter()
        try:
            results[key] = job()
        except DataNotFoundError as exc:
            skipped[key] = str(exc)
        busy1, ours1 = cpu_seconds()
        other[key] = max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (
            cores() * (time.perf_counter() - t0))
    import torch

    print(f"HFL benchmark{' (--quick)' if args.quick else ''}: Python "
          f"{platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
          f"{cores()} CPUs, torch threads {threads} in 1, "
          f"{time.perf_counter() - started:.0f} s in all")
    print_overhead(results)
    if "scale" in results:
        print_scale(results["scale"])
    if "noop" in results:
        print_noop(results["noop"])
    if "fedavg_round" in results:
        print_fedavg_round(results["fedavg_round"])
    for key, reason in skipped.items():
        print(f"skipped {key}: {reason}")
    print("share of the machine's CPU other processes used meanwhile (figures are only "
          "trustworthy near 0%; Ray daemons the Flower peer leaves unreaped count here): "
          + ", ".join(f"{k} {v:.0%}" for k, v in other.items()))
    digests.add(source_digest(DIGEST_PARTS))
    finish("hfl", args, digests, results, skipped)


if __name__ == "__main__":
    main()
