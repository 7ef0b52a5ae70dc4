"""Memory and time of a large user model: ResNet-18 under secure aggregation and CKKS.

Issue 38 ("Memory"): a model is not copied more than the protocol needs. A ResNet-18
written here (basic blocks, CIFAR stem: 3×3 convolution, no max-pool; 11,173,962
trainable parameters for 10 classes, plus 9,600 batch-norm running statistics that
travel with them: 11,183,562 float32 values, 44.7 MB; no torchvision, no weight
download) trains through ``FederatedModel(model=<nn.Module>, FedAvg(aggregator=...))``
with 10 clients of 8 random 3×32×32 rows each (one local step of batch 8 a round: the
point is the protocol's memory, not accuracy), for ``--rounds`` rounds, under:

* ``mean``: the plain weighted mean (the baseline, in the same run);
* ``secagg``: secure aggregation (Bonawitz et al.), :class:`SecureAggregation`;
* ``ckks``: CKKS (TenSEAL), :class:`CKKSAggregator` (``--ckks-clients`` clients).

Each configuration runs in a fresh subprocess (this script, ``--child``), so no peak
carries over. Per round: wall seconds (the server's :class:`RoundRecord.seconds`), and
the peak resident memory of the process during the round (VmHWM, reset at every round's
end through ``/proc/self/clear_refs``; round 1 includes the run's set-up: key agreement,
CKKS key dealing, thread pools), reported as the growth over the RSS just before
``fit`` (torch, the model and the rows loaded) in multiples of the model's size M, against
the target of ≤ (clients + 3)·M under secure aggregation.

    python benchmarks/bench_resnet.py [--only mean,secagg,ckks] [--clients 10]
        [--ckks-clients 10] [--rounds 2] [--concurrency 8] [--json OUT]

Measured (2-core VM, ``--only mean,secagg --rounds 2``; peak/M of rounds 1 and 2):

==============  ===========  ===========  ===========  ===========
change          mean, c=1    secagg, c=1  mean, c=8    secagg, c=8
==============  ===========  ===========  ===========  ===========
before          11.8, 12.8   23.1, 25.9   49.1, 52.9   91.9, 95.5
after           9.1, 10.1    10.9, 11.9   35.6, 37.0   44.2, 45.3
issue 40        9.3, 10.5    11.6, 12.6   36.1, 39.5   46.2, 48.4
==============  ===========  ===========  ===========  ===========

Issue 40 raised the mmap threshold to 1 MiB and the trim threshold to 4 MiB (a small
model's vectors reused from the arenas, not faulted in anew at every step: see
:mod:`islands.runtime.allocator`); the row above was measured on a loaded machine.

What changed: glibc's mmap threshold fixed at 128 KiB by ``run_local``
(:mod:`islands.runtime.allocator`; every client thread's arena had kept ~0.75·M after
its turn); the masks added into the upload a 1 MiB block of each stream at a time
(:func:`islands.crypto.prg.add_expanded`, at the clients and in the server's
unmasking); the fixed-point encoding a block at a time (no float64 products, scaled
values or int64 numerators as large as the upload: 6·M less per encoding client); the
local step's gradient accumulated by backpropagation into one flat tensor (the
per-layer gradients and their concatenation were 2·M) and freed before the trained
parameters are copied out. Results unchanged bit for bit.

What remains at ``--concurrency 1`` (secure aggregation, ~11·M): the server's global
model and initial vector (2·M), its ring sum (uint64: 2·M), the pooled module (1·M);
the client's received model (1·M), its trained copy (1·M) until its upload (2·M) is
encoded, the upload's wire copy (2·M) and the server's received copy (2·M) while it
is added. At ``--concurrency 8`` each of the 8 clients in flight holds its received
model, a pooled module and a gradient or its upload and wire copy (4–5·M each): the
target of (clients + 3)·M holds for clients that take their turns one at a time.

Seconds a round (``--only mean,secagg --rounds 2 --concurrency 1``): the mean 5.6 and
4.4 s, secure aggregation 10.3 and 13.2 s (1.9× and 3.0×).

CKKS (``--only mean,ckks --rounds 1 --concurrency 1``, 10 clients, round 1 with the
key dealing): 245 s a round against the plain mean's 4.9 s in the same run (50×), peak
3.13 GB = 70·M. A CKKS ciphertext of 8,192 slots carries 8,192 values in about 12 times
their float32 size, so the server's encrypted running sum, the upload being added and
its wire copy are each of the order of 12·M (no target was set for CKKS).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import fmt_bytes, fmt_s, reset_peak, source_digest, status_kb, verdict

ROWS = 8  # per client: one step of batch 8 a round
PREFIX = "RESULT "


# ---------------------------------------------------------------------------- the model
def resnet18(classes: int = 10) -> Any:
    """ResNet-18 (He et al. 2016) with basic blocks and the CIFAR stem (3×3, no pool)."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.short = nn.Sequential()
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                           nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            out = self.bn1(self.conv1(x)).relu()
            return (self.bn2(self.conv2(out)) + self.short(x)).relu()

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False),
                                      nn.BatchNorm2d(64), nn.ReLU())
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, classes)

        def forward(self, x: Any) -> Any:
            out = self.layers(self.stem(x))
            return self.fc(out.mean(dim=(2, 3)))

    return ResNet18()


# ---------------------------------------------------------------------------- one run
def child(config: str, clients: int, rounds: int, concurrency: int) -> dict[str, Any]:
    """Train one configuration in this (fresh) process; return its figures."""
    import numpy as np
    import torch

    from islands.aggregation.base import MeanAggregator
    from islands.aggregation.homomorphic import CKKSAggregator
    from islands.aggregation.secagg import SecureAggregation
    from islands.hfl import FedAvg, FederatedModel

    torch.manual_seed(0)
    net = resnet18()
    rng = np.random.default_rng(0)
    parts = [(rng.standard_normal((ROWS, 3, 32, 32), dtype=np.float32),
              rng.integers(0, 10, ROWS)) for _ in range(clients)]
    aggregator: Any = {"mean": MeanAggregator, "secagg": SecureAggregation,
                       "ckks": CKKSAggregator}[config]()
    rows: list[dict[str, Any]] = []
    marks = {"t": 0.0}

    def on_round(record: Any, _epoch: Any) -> None:
        # the server's thread, after the round's aggregation: the round's peak so far
        peak = status_kb("VmHWM") * 1024
        rows.append({"round": record.round, "seconds": record.seconds,
                     "wall_s": time.perf_counter() - marks["t"], "peak_bytes": peak,
                     "rss_after_bytes": status_kb("VmRSS") * 1024})
        reset_peak()
        marks["t"] = time.perf_counter()

    fm = FederatedModel(net, FedAvg(aggregator=aggregator, local_steps=1, batch_size=ROWS,
                                    lr=0.01),
                        epochs=rounds, eval_fraction=0.0, random_state=0, concurrency=concurrency,
                        timeout=3600.0, callback=on_round)
    import gc

    gc.collect()
    base = status_kb("VmRSS") * 1024
    can_reset = reset_peak()
    marks["t"] = time.perf_counter()
    fm.fit(parts)
    model_bytes = fm.model_.n_params() * 4
    return {"config": config, "clients": clients, "concurrency": concurrency,
            "n_params": fm.model_.n_params(), "n_trainable": fm.model_.n_trainable(),
            "model_bytes": model_bytes, "base_rss_bytes": base, "peak_reset": can_reset,
            "rounds": rows, "bytes_sent": fm.transcript_.total_bytes,
            "describe": fm.model_.describe()}


def run_child(config: str, clients: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", config, "--clients", str(clients),
           "--rounds", str(args.rounds), "--concurrency", str(args.concurrency)]
    env = dict(os.environ)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          timeout=args.timeout)
    wall = time.perf_counter() - t0
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(PREFIX):
            out: dict[str, Any] = json.loads(line[len(PREFIX):])
            out["process_wall_s"] = wall
            return out
    raise RuntimeError(f"{config} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")


def table(results: list[dict[str, Any]]) -> None:
    m = results[0]["model_bytes"]
    print(f"\n{results[0]['describe']}; M = {fmt_bytes(m)} (float32 values that travel)")
    print("peak = growth of the process's peak RSS over its RSS before fit, in the round "
          "(round 1: with the run's set-up)")
    base = {r["round"]: r for r in next((x for x in results if x["config"] == "mean"),
                                        {"rounds": []})["rounds"]}
    head = (f"{'config':8} {'clients':>7} {'round':>5} {'seconds':>10} {'x mean':>7} "
            f"{'peak':>10} {'peak/M':>7} {'target':>12} {'verdict':>7}")
    print(head)
    print("-" * len(head))
    for res in results:
        n = res["clients"]
        for r in res["rounds"]:
            grown = r["peak_bytes"] - res["base_rss_bytes"]
            ratio = grown / m
            target = n + 3 if res["config"] == "secagg" else None
            ref = base.get(r["round"])
            vs = (f"{r['seconds'] / ref['seconds']:.1f}x"
                  if ref is not None and res["config"] != "mean" else "-")
            print(f"{res['config']:8} {n:>7} {r['round']:>5} {fmt_s(r['seconds']):>10} "
                  f"{vs:>7} {fmt_bytes(grown):>10} {ratio:>6.1f}M "
                  f"{'-' if target is None else f'<= {target}M':>12} "
                  f"{verdict(None if target is None else ratio <= target):>7}")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="mean,secagg,ckks")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--ckks-clients", type=int, default=None,
                    help="clients of the CKKS run (default: --clients)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        res = child(args.child, args.clients, args.rounds, args.concurrency)
        print(PREFIX + json.dumps(res), flush=True)
        return
    results = []
    for config in args.only.split(","):
        n = args.ckks_clients if config == "ckks" and args.ckks_clients else args.clients
        print(f"running {config} with {n} clients ...", flush=True)
        results.append(run_child(config, n, args))
        table(results)
    print(f"islands sources: {source_digest(['hfl', 'aggregation', 'crypto', 'runtime'])}")
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "resnet", "argv": sys.argv[1:],
                                         "results": results}, indent=2))


if __name__ == "__main__":
    main()
