"""Ray benchmark: a 1000-client FedAvg federation on Ray against the in-process simulator.

The same federation runs twice in one invocation, each time in a fresh subprocess (this
script with ``--child``), first in-process (``FederatedModel(backend="local")``), then
with its local training on Ray (``backend="ray"``, a local Ray started by the child
with one worker per usable core):

* Data: Fashion-MNIST's 60,000 training rows as float32 in [0, 1] (read from
  ``/usr/share/datasets/fashion-mnist``), or with ``--pixels uint8`` as stored, the
  model dividing them by 255 (``ModelSpec(input_divisor=255)``: the same models);
  without it, scikit-learn's digits (1797 rows, 64 features) through the project's
  loader. Split IID over N clients (default 1000:
  60 Fashion-MNIST rows a client), ``eval_fraction=0``.
* Model and rounds: the 784-200-10 MLP (159,010 parameters; 64-200-10 on digits),
  FedAvg with batch b = min(20, n_min) and τ ≥ the steps of an epoch, so each round is
  one local epoch of every client (3 steps of 20 rows on Fashion-MNIST) and the run
  has ``--rounds`` rounds (default 3). Concurrency 8 (the estimator's default),
  ``threads="auto"``: 1 torch thread per training thread in-process (2 cores / 8
  clients at once) and 1 in each Ray worker, so both sides do the same arithmetic and
  the final models are compared bit for bit (SHA-256 of the parameter vector).

Reported per contender: seconds of each round (``RoundRecord.seconds``, the server's
wall time from sending the first task to aggregating the last update; round 1 includes
building the clients' learners in the Ray workers), the seconds of ``fit`` (with the
Ray backend: starting the worker pool and putting every client's rows in the object
store), of starting Ray (``ray.init``, outside ``fit``) and of the whole child process.
Memory, from ``/proc`` (psutil is not used), sampled every 0.25 s by a thread of the
child:

* driver peak RSS: ``VmHWM`` of the process that runs the roles, reset (through
  ``/proc/self/clear_refs``) once the data are loaded, so the loading transient is not
  counted; the RSS after loading is printed beside it. Object-store pages the driver
  wrote (``ray.put``) count in its RSS too: they are shared memory.
* Ray workers: the peak of the summed RSS of the training workers (the processes
  named ``ray::HFLWorker``), and of the other Ray processes (GCS, raylet, agents,
  idle workers). RSS counts shared pages (the object store, shared libraries) in
  every process that maps them, so these sums overstate;
* the peak PSS of the whole process tree (driver and every Ray process), which splits
  shared pages between the processes that map them: the honest total.

Other work on the machine skews every figure: the share of the CPU other processes
used during each child is printed (from ``/proc/stat`` and the tree's CPU times).

    python benchmarks/bench_ray.py [--json OUT] [--quick] [--clients N] [--rounds R]
                                   [--backends local,ray] [--blas-threads N]
                                   [--pixels float32|uint8]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from common import (
    finish,
    fmt_bytes,
    fmt_s,
    limit_threads,
    proc_kb,
    process_tree,
    reset_peak,
    source_digest,
    status_kb,
)
from islands.crypto.processes import usable_cores

CLIENTS, QUICK_CLIENTS = 1000, 100
ROUNDS = 3
MAX_BATCH = 20
HIDDEN = 200
LR = 0.1
CONCURRENCY = 8
SAMPLE_EVERY = 0.25
CHILD_TIMEOUT = 1800.0
DIGEST_PARTS = ("hfl", "runtime", "data")


# ---------------------------------------------------------------------------- /proc
def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def cpu_s(pid: int | str = "self") -> float:
    """utime + stime of one process, seconds."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def machine_busy_s() -> float:
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


class Sampler:
    """Peak memory of this process's tree, sampled every 0.25 s in a thread."""

    def __init__(self) -> None:
        self.me = os.getpid()
        self.peak = {"workers_rss_kb": 0, "ray_other_rss_kb": 0, "tree_pss_kb": 0}
        self.max_workers = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        workers = other = pss = n_workers = 0
        for pid in process_tree(self.me):
            pss += proc_kb("smaps_rollup", "Pss", pid)
            if pid == self.me:
                continue
            rss = status_kb("VmRSS", pid)
            if comm(pid).startswith("ray::HFLWorker"):
                workers += rss
                n_workers += 1
            else:
                other += rss
        for key, value in (("workers_rss_kb", workers), ("ray_other_rss_kb", other),
                           ("tree_pss_kb", pss)):
            self.peak[key] = max(self.peak[key], value)
        self.max_workers = max(self.max_workers, n_workers)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.sample()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def tree_cpu_s(self) -> float:
        return sum(cpu_s(pid) for pid in process_tree(self.me))



# ---------------------------------------------------------------------------- child
def load_data(pixels: str = "float32") -> tuple[np.ndarray, np.ndarray, str]:
    """Fashion-MNIST train rows as float32 in [0, 1] (or as stored: uint8), or digits
    if it is not installed."""
    from islands.data import load, load_fashion_mnist
    from islands.errors import DataNotFoundError

    try:
        ds = load_fashion_mnist(split="train", normalize=False)
        X = np.ascontiguousarray(ds.X.reshape(len(ds.y), -1))
        if pixels == "float32":
            X = X.astype(np.float32)
            X /= np.float32(255)  # as the model's input_divisor=255 does to uint8 rows
        return X, np.asarray(ds.y), "fashion_mnist"
    except DataNotFoundError:
        full = load("digits")
        X = full.X.reshape(full.n_samples, -1).astype(np.float32) / np.float32(16)
        return X, np.asarray(full.y), "digits"


def child(backend: str, n_clients: int, rounds: int, pixels: str = "float32"
          ) -> dict[str, Any]:
    import torch

    from islands.data import partition_iid
    from islands.hfl import FedAvg, FederatedModel
    from islands.hfl.torch.models import ModelSpec
    from islands.hfl.torch.training import train_centralised

    X, y, dataset = load_data(pixels)
    parts = [(X[idx], y[idx]) for idx in partition_iid(len(y), n_clients, random_state=0)]
    del X, y
    divisor = 255.0 if parts[0][0].dtype == np.uint8 else 1.0
    spec = ModelSpec("mlp", (parts[0][0].shape[1],), 10, hidden=(HIDDEN,),
                     input_divisor=divisor)
    n_min = min(len(p[1]) for p in parts)
    batch = min(MAX_BATCH, n_min)
    # warm torch up (its pools are not the federation's); 1 thread as in the run
    torch.set_num_threads(1)
    train_centralised(spec, parts[0][0], parts[0][1], epochs=1, batch_size=batch, lr=LR)
    gc.collect()
    rss_data = status_kb("VmRSS") * 1024
    was_reset = reset_peak()
    busy0, t_busy0 = machine_busy_s(), time.perf_counter()
    with Sampler() as sampler, contextlib.ExitStack() as stack:
        mine0 = sampler.tree_cpu_s()
        ray_init_s = 0.0
        if backend == "ray":
            from islands.hfl.ray_backend import ray_session

            t0 = time.perf_counter()
            stack.enter_context(ray_session())  # the fit then finds Ray running
            ray_init_s = time.perf_counter() - t0
        strategy = FedAvg(local_steps=n_min // batch, batch_size=batch, lr=LR)
        fm = FederatedModel(spec, strategy, epochs=rounds, random_state=0, eval_fraction=0.0,
                            concurrency=CONCURRENCY, threads="auto", backend=backend)
        t0 = time.perf_counter()
        fm.fit(parts)
        fit_s = time.perf_counter() - t0
        sampler.sample()
        tree_cpu = sampler.tree_cpu_s() - mine0  # before the Ray daemons go away
    busy = machine_busy_s() - busy0
    span = time.perf_counter() - t_busy0
    assert len(fm.rounds_) == rounds and not fm.dropouts_, (fm.rounds_, fm.dropouts_)
    return {
        "backend": backend, "dataset": dataset, "pixels": str(parts[0][0].dtype),
        "clients": n_clients,
        "rows_per_client": [n_min, max(len(p[1]) for p in parts)], "batch": batch,
        "steps_per_round": fm.rounds_[0].steps, "model": spec.describe(),
        "concurrency": CONCURRENCY, "workers": fm.workers_,
        "rounds_s": [r.seconds for r in fm.rounds_], "fit_s": fit_s, "ray_init_s": ray_init_s,
        "loss": [r.loss for r in fm.rounds_],
        "params_sha256": hashlib.sha256(fm.params_.tobytes()).hexdigest(),
        "rss_after_data_bytes": rss_data, "peak_reset": was_reset,
        "driver_peak_bytes": status_kb("VmHWM") * 1024,
        "workers_rss_peak_bytes": sampler.peak["workers_rss_kb"] * 1024,
        "ray_other_rss_peak_bytes": sampler.peak["ray_other_rss_kb"] * 1024,
        "tree_pss_peak_bytes": sampler.peak["tree_pss_kb"] * 1024,
        "ray_workers_seen": sampler.max_workers, "samples": sampler.samples,
        "other_cpu_share": max(0.0, busy - tree_cpu) / (usable_cores() * span),
        "wire_bytes": int(fm.transcript_.total_bytes),
    }


def spawn(backend: str, n_clients: int, rounds: int, pixels: str) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child",
           f"{backend}:{n_clients}:{rounds}:{pixels}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT,
                          check=False)
    wall = time.perf_counter() - t0
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("CHILD "):
            out: dict[str, Any] = json.loads(line[len("CHILD "):])
            out["process_wall_s"] = wall
            return out
    raise RuntimeError(f"child {backend} N={n_clients} failed (rc {proc.returncode}): "
                       f"{(proc.stderr or proc.stdout)[-3000:]}")


# ---------------------------------------------------------------------------- report
def print_table(rows: list[dict[str, Any]]) -> None:
    first = rows[0]
    print(f"{first['clients']} clients, {first['dataset']} ({first['rows_per_client'][0]}-"
          f"{first['rows_per_client'][1]} rows each), {first['model']}, FedAvg: "
          f"{first['steps_per_round']} steps of {first['batch']} rows a round, "
          f"concurrency {first['concurrency']}")
    n = max(len(r["rounds_s"]) for r in rows)
    head = (f"{'backend':8s} {'workers':>7s} " + " ".join(f"{'round ' + str(i + 1):>9s}"
                                                          for i in range(n))
            + f" {'fit':>9s} {'ray.init':>9s} {'process':>9s} {'driver peak':>12s} "
            f"{'workers RSS':>12s} {'Ray other RSS':>13s} {'tree PSS':>10s} {'other CPU':>9s}")
    print(head)
    print("-" * len(head))
    for r in rows:
        ray = r["backend"] == "ray"
        workers = fmt_bytes(r["workers_rss_peak_bytes"]) if ray else "-"
        other = fmt_bytes(r["ray_other_rss_peak_bytes"]) if ray else "-"
        init = fmt_s(r["ray_init_s"]) if ray else "-"
        print(f"{r['backend']:8s} {r['workers']:>7d} "
              + " ".join(f"{fmt_s(s):>9s}" for s in r["rounds_s"])
              + f" {fmt_s(r['fit_s']):>9s} {init:>9s} "
              f"{fmt_s(r['process_wall_s']):>9s} {fmt_bytes(r['driver_peak_bytes']):>12s} "
              f"{workers:>12s} {other:>13s} "
              f"{fmt_bytes(r['tree_pss_peak_bytes']):>10s} {r['other_cpu_share']:>8.0%}")
    print("workers: training threads (local) or Ray workers (ray)")
    print("driver peak: VmHWM of the process running the roles, from the RSS after loading "
          "(" + ", ".join(f"{r['backend']} {fmt_bytes(r['rss_after_data_bytes'])}"
                          for r in rows) + "); RSS sums from /proc count shared pages "
          "(object store, libraries) in every process: tree PSS is the total")
    by = {r["backend"]: r for r in rows}
    if "local" in by and "ray" in by:
        a, b = by["local"], by["ray"]
        later = slice(1, None) if len(a["rounds_s"]) > 1 else slice(None)
        ra, rb = float(np.mean(a["rounds_s"][later])), float(np.mean(b["rounds_s"][later]))
        same = a["params_sha256"] == b["params_sha256"]
        print(f"rounds 2..: ray {fmt_s(rb)} / local {fmt_s(ra)} per round = {rb / ra:.2f}x; "
              f"tree PSS ray / local = {b['tree_pss_peak_bytes'] / a['tree_pss_peak_bytes']:.2f}x;"
              f" final models {'bitwise identical' if same else 'DIFFER'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_CLIENTS} clients, 2 rounds: a smoke test")
    parser.add_argument("--clients", type=int, default=0,
                        help=f"simulated clients (default {CLIENTS}; --quick {QUICK_CLIENTS})")
    parser.add_argument("--rounds", type=int, default=0,
                        help=f"rounds (default {ROUNDS}; --quick 2)")
    parser.add_argument("--backends", default="local,ray", help="which of local,ray to run")
    parser.add_argument("--blas-threads", type=int, default=0,
                        help="cap BLAS/OpenMP threads (default 0: the libraries' defaults)")
    parser.add_argument("--pixels", choices=("float32", "uint8"), default="float32",
                        help="the clients' Fashion-MNIST rows: float32 in [0, 1], or as "
                             "stored (uint8, the model divides by 255)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        backend, n, r, pixels = args.child.split(":")
        out = child(backend, int(n), int(r), pixels)
        out["digest"] = source_digest(DIGEST_PARTS)
        print("CHILD " + json.dumps(out), flush=True)
        return
    limit_threads(args.blas_threads)
    n_clients = args.clients or (QUICK_CLIENTS if args.quick else CLIENTS)
    rounds = args.rounds or (2 if args.quick else ROUNDS)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or not set(backends) <= {"local", "ray"}:
        parser.error(f"--backends takes local and/or ray; got {args.backends!r}")
    if n_clients < 1 or rounds < 1:
        parser.error("--clients and --rounds must be >= 1")
    digests = {source_digest(DIGEST_PARTS)}
    started = time.perf_counter()
    rows = []
    for backend in backends:
        print(f"[{time.perf_counter() - started:7.1f} s] {backend}: {n_clients} clients, "
              f"{rounds} rounds...", file=sys.stderr, flush=True)
        row = spawn(backend, n_clients, rounds, args.pixels)
        digests.add(row.pop("digest"))
        rows.append(row)
        print("    rounds " + ", ".join(fmt_s(s) for s in row["rounds_s"])
              + f"; tree PSS {fmt_bytes(row['tree_pss_peak_bytes'])}",
              file=sys.stderr, flush=True)
    import ray
    import torch

    print(f"Ray benchmark{' (--quick)' if args.quick else ''}: Python "
          f"{platform.python_version()}, torch {torch.__version__}, Ray {ray.__version__}, "
          f"{usable_cores()} CPUs, {time.perf_counter() - started:.0f} s in all")
    print_table(rows)
    finish("bench_ray", args, digests, {"runs": rows}, {})


if __name__ == "__main__":
    main()
