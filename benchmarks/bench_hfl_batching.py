"""Would training the clients of one process as one batched computation pay? (issue 24, item 3)

The issue's diagnosis of the HFL overhead (3-client FedAvg epoch / centralised, MLP
784-200-10, τ = 1) was that each 510-row step is split into three 170-row steps that each
pay torch's fixed per-call cost, and its suggested cure was to train the clients as one
batched computation while keeping every client's result bit for bit what it trains alone.
This benchmark measures both halves of that, side by side in one run:

1. Exactness. For the MLP's products (forward ``addmm``, weight gradient ``gᵀ·a``, input
   gradient ``g·W``) of K clients, is the batched product (``baddbmm``/``bmm`` over the
   stacked (K, out, in) weights) bit-identical to each client's own ``mm``, on one torch
   thread and on ``T``; and does ``torch.func.vmap(grad(functional_call))`` give each
   client's gradients bit for bit (MLP and CNN)?
2. Cost. CPU seconds (``time.thread_time``, one torch thread, so other work on the
   machine barely moves it) of one SGD step with momentum: centralised on 510 rows; three
   clients of 170 rows, each alone (``Trainer.train``); the same three batched
   (:func:`train_together`, below: batched products, everything else per client, whose
   results the run checks equal to the clients' own). And the forward product alone,
   one 510-row ``addmm`` against three 170-row ones.

Reading (2): if ``batched / alone`` is near 1 the per-call cost is not what separates
the federation from centralised training on this machine, and batching cannot close the
gap. The minimum over ``--repeats`` of ``--calls`` calls each is reported.

    python benchmarks/bench_hfl_batching.py [--repeats 15] [--calls 10] [--threads T]
                                            [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from islands.hfl.torch.models import ModelSpec, _load_checked, _params_of
from islands.hfl.torch.training import Position, StepSettings, Trainer, TrainOutcome

K, B, CL_B, LR, MOMENTUM = 3, 170, 510, 0.1, 0.5


def mlp() -> ModelSpec:
    return ModelSpec("mlp", (784,), 10, hidden=(200,))


def train_together(jobs: Sequence[tuple[Trainer, StepSettings, Position]]
                   ) -> list[TrainOutcome]:
    """One SGD step of each job's MLP, the linear layers' products batched over clients.

    Products: ``baddbmm``/``bmm`` over the stacked weights; loss, bias sums and the SGD
    update (momentum, weight decay, proximal term) per client, on the same 1-D views and
    calls as :meth:`Trainer.train`. One step, shared batch size (enough for this test).
    """
    spec, b = jobs[0][0].spec, jobs[0][1].batch_size
    widths = [spec.input_size, *spec.hidden, spec.n_outputs]
    layers, off = [], 0
    for n_in, n_out in itertools.pairwise(widths):
        layers.append((off, n_out, n_in))
        off += n_out * n_in + n_out
    n = len(jobs)
    flat = torch.from_numpy(np.stack([st.params for _, st, _ in jobs]))
    batches = [tr.features.index_select(0, torch.from_numpy(
        tr._epoch_order(pos.epoch)[pos.step * b:(pos.step + 1) * b])) for tr, _, pos in jobs]
    idx = [torch.from_numpy(tr._epoch_order(pos.epoch)[pos.step * b:(pos.step + 1) * b])
           for tr, _, pos in jobs]
    targets = [tr.targets.index_select(0, i) for (tr, _, _), i in zip(jobs, idx, strict=True)]
    h = torch.stack([x.reshape(b, -1) for x in batches])
    acts, weights = [], []
    with torch.no_grad():
        for j, (o, n_out, n_in) in enumerate(layers):
            W = flat[:, o:o + n_out * n_in].view(n, n_out, n_in)
            bias = flat[:, o + n_out * n_in:o + n_out * n_in + n_out]
            acts.append(h)
            weights.append(W)
            z = torch.baddbmm(bias.unsqueeze(1), h, W.transpose(1, 2))
            h = torch.relu(z) if j < len(layers) - 1 else z
    outs = [h[k].detach().requires_grad_(True) for k in range(n)]
    with torch.enable_grad():
        losses = [F.cross_entropy(outs[k], targets[k]) for k in range(n)]
        grads = torch.autograd.grad(losses, outs)
    out = []
    with torch.no_grad():
        g = torch.stack(grads)
        G = torch.empty_like(flat)
        for j in range(len(layers) - 1, -1, -1):
            o, n_out, n_in = layers[j]
            G[:, o:o + n_out * n_in].view(n, n_out, n_in).copy_(
                torch.bmm(g.transpose(1, 2), acts[j]))
            for k in range(n):
                G[k, o + n_out * n_in:o + n_out * n_in + n_out] = g[k].sum(0)
            if j > 0:
                g = torch.bmm(g, weights[j]).masked_fill_(acts[j] <= 0, 0.0)
        for k, (_, st, pos) in enumerate(jobs):
            buf = st.apply(flat[k], G[k], st.momentum_buffer, None)
            out.append(TrainOutcome(flat[k].numpy().copy(),
                                    None if buf is None else buf.numpy().copy(),
                                    float(losses[k].item()), 1, Position(pos.epoch,
                                                                         pos.step + 1)))
    return out


def with_threads(n: int, fn: Callable[[], Any]) -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def exactness(threads: int) -> dict[str, Any]:
    """Batched products and vmap gradients against each client's own, bit for bit."""
    gen = torch.Generator().manual_seed(0)
    out: dict[str, Any] = {"products": []}
    for b, n_in, n_out in [(170, 784, 200), (170, 200, 10), (32, 784, 200), (7, 784, 200)]:
        X = torch.rand(K, b, n_in, generator=gen)
        W = torch.randn(K, n_out, n_in, generator=gen)
        bias = torch.randn(K, n_out, generator=gen)
        G = torch.randn(K, b, n_out, generator=gen)

        def alone(X: torch.Tensor = X, W: torch.Tensor = W, bias: torch.Tensor = bias,
                  G: torch.Tensor = G) -> list[tuple[torch.Tensor, ...]]:
            return [(torch.addmm(bias[k], X[k], W[k].t()), G[k].t().mm(X[k]),
                     G[k].mm(W[k])) for k in range(K)]

        one, many = with_threads(1, alone), with_threads(threads, alone)
        batched = with_threads(threads, lambda X=X, W=W, bias=bias, G=G: (
            torch.baddbmm(bias.unsqueeze(1), X, W.transpose(1, 2)),
            torch.bmm(G.transpose(1, 2), X), torch.bmm(G, W)))
        row = {"shape": f"K={K} b={b} {n_in}->{n_out}"}
        for j, name in enumerate(("forward", "grad_weight", "grad_input")):
            row[f"{name}_vs_1_thread"] = all(torch.equal(batched[j][k], one[k][j])
                                             for k in range(K))
            row[f"{name}_vs_{threads}_threads"] = all(torch.equal(batched[j][k], many[k][j])
                                                      for k in range(K))
        out["products"].append(row)
    out["vmap"] = {}
    for spec in (mlp(), ModelSpec("cnn", (1, 28, 28), 10)):
        module = spec.build(0)
        names = [name for name, _ in module.named_parameters()]
        rng = np.random.default_rng(0)
        xs = torch.from_numpy(rng.random((K, 32, *spec.input_shape), dtype=np.float32))
        ys = torch.from_numpy(rng.integers(0, 10, (K, 32)))
        params = [spec.initial_params(s) for s in range(K)]

        def solo(module: Any = module, xs: torch.Tensor = xs, ys: torch.Tensor = ys,
                 params: list[Any] = params) -> list[tuple[torch.Tensor, ...]]:
            res = []
            for k in range(K):
                _load_checked(module, params[k])
                loss = F.cross_entropy(module(xs[k]), ys[k])
                res.append(torch.autograd.grad(loss, _params_of(module)))
            return res

        ref = with_threads(1, solo)
        stacked: dict[str, torch.Tensor] = {}
        flat = torch.stack([torch.from_numpy(p) for p in params])
        off = 0
        for name, p in module.named_parameters():
            stacked[name] = flat[:, off:off + p.numel()].reshape(K, *p.shape)
            off += p.numel()

        def loss_of(pd: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                    module: Any = module) -> torch.Tensor:
            return F.cross_entropy(functional_call(module, pd, (x,)), y)

        got = with_threads(1, lambda stacked=stacked, xs=xs, ys=ys: vmap(grad(loss_of))(
            stacked, xs, ys))
        out["vmap"][spec.kind] = all(torch.equal(got[name][k], ref[k][i])
                                     for k in range(K) for i, name in enumerate(names))
    return out


def cost(repeats: int, calls: int) -> dict[str, Any]:
    """CPU ms of one step: centralised 510 rows, 3 clients alone, 3 clients batched."""
    spec = mlp()
    rng = np.random.default_rng(0)
    X = rng.random((K * 4000, 784), dtype=np.float32)
    y = rng.integers(0, 10, K * 4000)
    p = spec.initial_params(0)
    trainers = [Trainer(spec, X[k * 4000:(k + 1) * 4000], y[k * 4000:(k + 1) * 4000], seed=k)
                for k in range(K)]
    pooled = Trainer(spec, X, y)
    kw: dict[str, Any] = {"start": Position(0, 0), "steps": 1, "lr": LR, "momentum": MOMENTUM}
    jobs = lambda: [(t, t.settings(p, batch_size=B, **kw), kw["start"])  # noqa: E731
                    for t in trainers]
    alone = [t.train(p, batch_size=B, **kw) for t in trainers]
    together = train_together(jobs())
    same = all(np.array_equal(a.params, b.params) and np.array_equal(a.momentum, b.momentum)
               and a.loss == b.loss for a, b in zip(alone, together, strict=True))
    Xf = torch.from_numpy(X[:CL_B])
    W, bias = torch.randn(200, 784), torch.randn(200)
    fns: dict[str, Callable[[], Any]] = {
        "centralised_510": lambda: pooled.train(p, batch_size=CL_B, **kw),
        "clients_alone_3x170": lambda: [t.train(p, batch_size=B, **kw) for t in trainers],
        "clients_batched_3x170": lambda: train_together(jobs()),
        "addmm_510": lambda: torch.addmm(bias, Xf, W.t()),
        "addmm_3x170": lambda: [torch.addmm(bias, Xf[k * B:(k + 1) * B], W.t())
                                for k in range(K)],
    }
    best = {name: float("inf") for name in fns}
    for fn in fns.values():  # warm-up
        for _ in range(3):
            fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.thread_time()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.thread_time() - t0) / calls * 1e3)
    return {"cpu_ms": best, "batched_equals_alone": same,
            "batched_over_alone": best["clients_batched_3x170"] / best["clients_alone_3x170"],
            "alone_over_centralised": best["clients_alone_3x170"] / best["centralised_510"],
            "addmm_3x170_over_510": best["addmm_3x170"] / best["addmm_510"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads of the multi-threaded comparison (default 2)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    ex = exactness(args.threads)
    c = with_threads(1, lambda: cost(args.repeats, args.calls))
    print(f"HFL batching: Python {platform.python_version()}, torch {torch.__version__}")
    print(f"1. exactness, batched over K={K} clients against each client's own product:")
    for row in ex["products"]:
        print("   " + row["shape"] + ": " + ", ".join(
            f"{k} {'==' if v else '!='}" for k, v in row.items() if k != "shape"))
    print("   torch.func.vmap gradients == each client's own (1 thread): "
          + ", ".join(f"{k} {v}" for k, v in ex["vmap"].items()))
    print("2. CPU ms per SGD step (1 torch thread, min of "
          f"{args.repeats} × {args.calls}):")
    for name, ms in c["cpu_ms"].items():
        print(f"   {name:<24} {ms:7.2f}")
    print(f"   batched / alone {c['batched_over_alone']:.2f} (results equal: "
          f"{c['batched_equals_alone']}); alone / centralised "
          f"{c['alone_over_centralised']:.2f}; addmm 3×170 / 510 "
          f"{c['addmm_3x170_over_510']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "hfl_batching", "argv": sys.argv[1:],
                                         "exactness": ex, "cost": c}, indent=2))


if __name__ == "__main__":
    main()
