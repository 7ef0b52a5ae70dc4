"""Clients of one process that train the same model, trained together (simulation only).

A simulation runs every client's :meth:`~islands.hfl.torch.training.Trainer.train` in
the same process. When K clients share the model, the batch size, the task and the
loss, :func:`train_together` runs their steps as one computation: the K flat parameter
vectors stacked into a (K, P) tensor, and each local step one
``torch.func.vmap(grad_and_value(loss ∘ functional_call))`` over the K clients'
mini-batches (K·b rows, one batched product per layer where each client alone would
pay torch's per-call cost b rows at a time). Everything else is each client's own:

* **Batches.** Client k's step j uses the rows :meth:`Trainer.train` would
  (``Trainer._epoch_order`` from its own seed, epoch and step; each client's own n and
  so its own ⌊n/b⌋ steps per epoch and epoch boundaries).
* **Update.** Client k's gradient row goes through its own
  :meth:`~islands.hfl.torch.training.StepSettings.apply` (its lr, momentum and buffer,
  weight decay, FedProx anchor, SCAFFOLD correction): the arithmetic of its own call.
* **Masks.** A client asked for fewer steps than the longest in the batch drops out
  when its steps are done: its later gradients are computed with the others' and
  discarded, its parameters, buffer and mean loss stop where its own call stops.

The result equals each client's own call within float32 rounding, not bit for bit:
a batched product sums in another order than K separate ones
(``benchmarks/bench_hfl_batching.py`` shows the last bits differ). The tests hold every
client's parameters within ``rtol=1e-4, atol=1e-5`` of its own training after several
rounds.

:class:`ClientBatcher` gathers the calls: each client's learner hands it its call from
its own thread, the calls that arrive together (same model, batch size, task and loss)
train as one batch, and each caller gets its own :class:`TrainOutcome` back. What a
client does with its update afterwards (clipping, noise, masking, encryption, its
checks) is unchanged: the batch ends where the update leaves the client. Models the
batch cannot run (local layers, buffers) and calls that arrive alone train as before;
a batch that fails (a user's module that ``vmap`` cannot run: data-dependent control
flow, randomness) is trained again one client at a time, and batching is off for the
rest of the run, logged once.

This module imports torch; ``import islands.hfl`` does not import it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.func import functional_call, grad_and_value, vmap

from islands.hfl.torch.models import _params_of
from islands.hfl.torch.training import (
    Position,
    StepSettings,
    Trainer,
    TrainOutcome,
    _as_float,
)
from islands.runtime.allocator import release_arena, reuse_buffers
from islands.validation import check_float, check_int

__all__ = ["BatchJob", "ClientBatcher", "batch_refusal", "train_together"]

log = logging.getLogger(__name__)

_CHUNK_BYTES = 32 << 20
"""The most stacked parameters one vmap pass holds (K·P·4 bytes); more clients go in chunks.

glibc serves a free()d block below 32 MiB from its heap next time, and maps anything
larger afresh from the kernel at every step: a (100, 159010) float32 gradient, 64 MB,
costs ~25 ms of page faults per step, more than the product that fills it. Chunks also
bound the batch's memory whatever the number of clients."""


@dataclass(frozen=True)
class BatchJob:
    """One client's call in a batch: its trainer, its checked settings, its first batch."""

    trainer: Trainer
    settings: StepSettings
    start: Position


def batch_refusal(model: Any) -> str | None:
    """Return why clients of ``model`` cannot train in a batch, or None if they can.

    A batch keeps only the trainable parameters per client: a model with local layers
    (FedBN) or with buffers (batch norm's running statistics, which a training forward
    updates) trains one client at a time.

    Parameters
    ----------
    model : ModelSpec or TorchModel
        The clients' model.
    """
    initial_local = getattr(model, "initial_local", None)
    if initial_local is not None and initial_local().size:
        return "the model has local layers (FedBN), which stay per client"
    module = model.empty()
    if next(module.buffers(), None) is not None:
        return ("the model has buffers (e.g. batch norm's running statistics), which a "
                "batched forward cannot keep per client")
    if model.n_params() != sum(p.numel() for p in _params_of(module)):
        return "the model's travelling vector is not its trainable parameters"
    return None


def _chunks(jobs: Sequence[BatchJob], limit: int) -> list[Sequence[BatchJob]]:
    """Split ``jobs`` into near-equal runs of at most ``limit``."""
    n = math.ceil(len(jobs) / max(1, limit))
    size = math.ceil(len(jobs) / n)
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


def train_together(jobs: Sequence[BatchJob], *, executor: Executor | None = None,
                   parts: int = 1, timeout: float | None = None) -> list[TrainOutcome]:
    """Train every job's client as one batch; return each client's outcome, in order.

    Parameters
    ----------
    jobs : sequence of BatchJob
        At least one; every trainer of the same pool (model), task and loss, every
        settings of the same batch size, no model :func:`batch_refusal` refuses.
    executor : Executor or None, default=None
        Runs the chunks in parallel (None: one after the other in this thread).
    parts : int, default=1
        Split the batch into at least this many chunks (one per thread of
        ``executor``, each on one torch thread: on a shared machine, one torch thread
        per core beats torch's own threads, whose barriers stall when another process
        holds a core).
    timeout : float or None, default=None
        Seconds to wait for a chunk on ``executor`` (None: no limit).

    Returns
    -------
    list of TrainOutcome
        What each client's :meth:`Trainer.train` returns, within float32 rounding.
    """
    if not jobs:
        return []
    first = jobs[0]
    b = first.settings.batch_size
    for job in jobs:
        tr = job.trainer
        if (tr.pool is not first.trainer.pool or tr.task != first.trainer.task
                or tr.user_loss is not first.trainer.user_loss
                or job.settings.batch_size != b):
            raise ValueError("train_together: every job must share the model (pool), "
                             "task, loss and batch size")
    limit = min(max(1, _CHUNK_BYTES // (4 * first.trainer.n_params)),
                math.ceil(len(jobs) / max(1, parts)))
    chunks = _chunks(jobs, limit)
    if executor is None or len(chunks) == 1:
        return [out for chunk in chunks for out in _train_chunk(chunk)]
    futures = [executor.submit(_train_chunk, chunk) for chunk in chunks]
    deadline = None if timeout is None else time.monotonic() + timeout  # for all chunks
    return [out for future in futures for out in future.result(
        timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))]


def _uniform(settings: Sequence[StepSettings]) -> bool:
    """Whether one update serves every client: same steps and optimiser, no correction.

    Then each parameter's (K, ...) block is updated by one call of
    :meth:`StepSettings.apply` (the same arithmetic per value as K calls), with no copy
    of the gradients into flat rows.
    """
    first = settings[0]
    key = (first.steps, first.lr, first.momentum, first.weight_decay, first.prox_mu,
           first.momentum_buffer is None)
    return all(st.correction is None and key == (
        st.steps, st.lr, st.momentum, st.weight_decay, st.prox_mu, st.momentum_buffer is None)
        for st in settings)


def _train_chunk(jobs: Sequence[BatchJob]) -> list[TrainOutcome]:
    """Train one chunk of clients (see :func:`train_together`)."""
    first = jobs[0].trainer
    k_all = len(jobs)
    b = jobs[0].settings.batch_size
    settings = [job.settings for job in jobs]
    uniform = _uniform(settings)
    with first.pool.borrow() as module:
        names = {id(p): name for name, p in module.named_parameters()}
        layout = []
        offset = 0
        for p in _params_of(module):
            layout.append((names[id(p)], offset, p.numel(), p.shape))
            offset += p.numel()
        module.train()

        def blocks(flat: torch.Tensor) -> dict[str, torch.Tensor]:
            """Each parameter's (K, *shape) view into a (K, P) tensor."""
            return {name: flat[:, off:off + n].view(k_all, *shape)
                    for name, off, n, shape in layout}

        w = torch.from_numpy(np.stack([st.params for st in settings]))  # (K, P), own copy
        anchors = w.clone() if any(st.prox_mu > 0.0 for st in settings) else None
        bufs: list[torch.Tensor | None] = [st.momentum_buffer for st in settings]
        # uniform: the buffers as (K, *shape) blocks, one per parameter
        held = None if not uniform or bufs[0] is None else blocks(torch.stack(
            [buf for buf in bufs if buf is not None]))
        block_bufs: dict[str, torch.Tensor | None] = {
            name: None if held is None else held[name] for name, _, _, _ in layout}
        grads = None if uniform else torch.empty_like(w)

        def loss_of(params: dict[str, torch.Tensor], xb: torch.Tensor,
                    yb: torch.Tensor) -> torch.Tensor:
            return first.output_loss(functional_call(module, params, (xb,)), yb)

        step_fn = vmap(grad_and_value(loss_of))
        totals = [0.0] * k_all
        counters = [job.start.epoch * st.steps_per_epoch + job.start.step
                    for job, st in zip(jobs, settings, strict=True)]
        for j in range(max(st.steps for st in settings)):
            rows, targets = [], []
            for job, st, count in zip(jobs, settings, counters, strict=True):
                epoch, step = divmod(count + j, st.steps_per_epoch)
                idx = torch.from_numpy(job.trainer._epoch_order(epoch)[step * b:(step + 1) * b])
                rows.append(job.trainer.features.index_select(0, idx))
                targets.append(job.trainer.targets.index_select(0, idx))
            same = all(r.dtype == rows[0].dtype for r in rows)
            xb = _as_float(torch.stack(rows)) if same else torch.stack(
                [_as_float(r) for r in rows])
            g, losses = step_fn(blocks(w), xb, torch.stack(targets))
            values = losses.tolist()
            with torch.no_grad():
                if grads is None:  # uniform: one update per parameter block
                    st = settings[0]
                    w_blocks = blocks(w)
                    a_blocks = None if anchors is None else blocks(anchors)
                    for name, _, _, _ in layout:
                        block_bufs[name] = st.apply(
                            w_blocks[name], g[name], block_bufs[name],
                            None if a_blocks is None else a_blocks[name])
                    for k in range(k_all):
                        totals[k] += float(values[k])
                    continue
                for name, off, n, _ in layout:
                    grads[:, off:off + n].copy_(g[name].reshape(k_all, n))
                del g
                for k, st in enumerate(settings):
                    if j >= st.steps:  # done: this gradient is discarded
                        continue
                    row = grads[k]
                    anchor = anchors[k] if anchors is not None and st.prox_mu > 0.0 else None
                    buf = st.apply(w[k], row, bufs[k], anchor)
                    # the first momentum step keeps the gradient as its buffer: a row of
                    # ``grads`` is overwritten next step, so the buffer is a copy
                    bufs[k] = row.clone() if buf is row else buf
                    totals[k] += float(values[k])
    if uniform and block_bufs[layout[0][0]] is not None:
        stacked = torch.cat([block.reshape(k_all, -1) for block in block_bufs.values()
                             if block is not None], dim=1)
        bufs = list(stacked)
    out = []
    for k, (job, st) in enumerate(zip(jobs, settings, strict=True)):
        end = job.start.advance(st.steps, st.steps_per_epoch)
        buf = bufs[k]
        out.append(TrainOutcome(w[k].numpy().copy(),
                                None if buf is None else buf.numpy().copy(),
                                totals[k] / st.steps, st.steps, end))
    return out


@dataclass
class _Call:
    """A call waiting in a group: what it asks, and what it gets (or whether to run alone)."""

    job: BatchJob
    outcome: TrainOutcome | None = None


@dataclass
class _Group:
    """Calls gathered for one batch."""

    opened: float
    last: float
    calls: list[_Call] = field(default_factory=list)
    closed: bool = False
    done: threading.Event = field(default_factory=threading.Event)


_RELEASE_WAIT = 5.0
"""Seconds a worker waits for the others to take their share of the release."""

_warmed: list[bool] = []


def _warm_up() -> None:
    """Pay ``torch.func``'s one-off imports (sympy, torch.distributed: about 1 s) now.

    Its first ``vmap`` imports them; a batcher is made before the first round, so the
    rounds' clock does not count them.
    """
    if not _warmed:
        vmap(grad_and_value(lambda w: (w * w).sum()))(torch.zeros(2, 1))
        _warmed.append(True)


class ClientBatcher:
    """Gather the training calls of a simulation's clients and train them as batches.

    Each client's learner calls :meth:`train` from its own thread, with
    :meth:`Trainer.train`'s arguments. Calls of the same model (pool), task, loss and
    batch size join one group; a group closes when ``expected`` calls are in it, when
    ``window`` seconds pass without another call, or ``max_wait`` seconds after it
    opened. The caller that closes it trains the group (:func:`train_together`, one
    group at a time: a batch uses every core) and every caller returns its own outcome.
    A group of one, a model :func:`batch_refusal` refuses, a call with local layers,
    and every call after a batch failed, run :meth:`Trainer.train` in the caller's
    thread, as without a batcher.

    Parameters
    ----------
    expected : int
        The calls that arrive together (the clients training at once), at least 1.
    window : float, default=0.1
        Seconds without a new call after which a group closes.
    max_wait : float, default=2.0
        Seconds after its first call at which a group closes whatever arrives.
    timeout : float, default=600.0
        Seconds a caller waits for its group's batch before raising ``TimeoutError``.
    workers : int, default=1
        Threads that train a batch's chunks in parallel (:func:`train_together`'s
        ``parts``); give each one torch thread. :meth:`close` stops them.
    """

    def __init__(self, expected: int, *, window: float = 0.1, max_wait: float = 2.0,
                 timeout: float = 600.0, workers: int = 1) -> None:
        owner = "ClientBatcher"
        self.expected = check_int(expected, "expected", owner, low=1)
        self.workers = check_int(workers, "workers", owner, low=1)
        self._executor = (None if self.workers == 1 else ThreadPoolExecutor(
            self.workers, thread_name_prefix="islands-batch"))
        self.window = check_float(window, "window", owner, low=0.0)
        self.max_wait = check_float(max_wait, "max_wait", owner, low=0.0)
        self.timeout = check_float(timeout, "timeout", owner, low=0.0, low_inclusive=False)
        self._cond = threading.Condition()
        self._run_lock = threading.Lock()
        self._open: dict[tuple[int, int, str, int], _Group] = {}
        self._refused: dict[int, str | None] = {}  # per pool: why its model cannot batch
        self.failure: str | None = None
        """Why batching stopped in this run (a batch that failed), or None."""
        self.batches: list[int] = []
        """The size of every batch trained, in order (calls that ran alone excluded)."""
        _warm_up()


    def _release(self) -> None:
        """Return the memory each thread that trained the batch keeps (release_arena)."""
        release_arena()  # this thread: the chunks ran here without an executor
        if self._executor is None:
            return
        # one call on each worker: the barrier keeps a worker from taking two
        barrier = threading.Barrier(self.workers)

        def release() -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=_RELEASE_WAIT)
            release_arena()

        for future in [self._executor.submit(release) for _ in range(self.workers)]:
            future.result(timeout=2 * _RELEASE_WAIT)

    def close(self) -> None:
        """Stop the worker threads (a batch still running finishes on its thread)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _refusal(self, trainer: Trainer) -> str | None:
        key = id(trainer.pool)
        with self._cond:
            if key in self._refused:
                return self._refused[key]
        reason = batch_refusal(trainer.spec)
        with self._cond:
            if key not in self._refused:
                self._refused[key] = reason
                if reason is not None:
                    log.info("clients train one at a time: %s", reason)
        return reason

    def train(self, trainer: Trainer, params: Any, *, start: Position, steps: int,
              batch_size: int, lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
              prox_mu: float = 0.0, momentum_buffer: Any = None, local: Any = None,
              correction: Any = None, finite: bool = False) -> TrainOutcome:
        """Train as ``trainer.train`` would, batched with the calls that arrive with it.

        Raises
        ------
        ValidationError
            As :meth:`Trainer.train`, in the caller's thread, before joining a group.
        TimeoutError
            If the group's batch did not finish within ``timeout`` seconds.
        """
        kwargs: dict[str, Any] = dict(
            start=start, steps=steps, batch_size=batch_size, lr=lr, momentum=momentum,
            weight_decay=weight_decay, prox_mu=prox_mu, momentum_buffer=momentum_buffer,
            correction=correction, finite=finite)
        if self.failure is not None or local is not None or self._refusal(trainer):
            return trainer.train(params, local=local, **kwargs)
        st = trainer.settings(params, owner="Trainer.train", **kwargs)
        call = _Call(BatchJob(trainer, st, start))
        group, lead = self._join(call, (id(trainer.pool), st.batch_size, trainer.task,
                                        id(trainer.user_loss)))
        if lead:
            self._run(group)
        elif not group.done.wait(self.timeout):
            raise TimeoutError(f"a batch of {len(group.calls)} clients did not finish "
                               f"training within {self.timeout:g} s")
        if call.outcome is None:  # alone: a group of one, or after a failed batch
            return trainer.train(params, **kwargs)
        return call.outcome

    def _join(self, call: _Call, key: tuple[int, int, str, int]) -> tuple[_Group, bool]:
        """Add ``call`` to its open group; return the group and whether this call trains it."""
        with self._cond:
            now = time.monotonic()
            group = self._open.get(key)
            if group is None:
                group = self._open[key] = _Group(opened=now, last=now)
            group.calls.append(call)
            group.last = now
            self._cond.notify_all()
            while not group.closed:
                if len(group.calls) >= self.expected:
                    break
                wait = min(group.last + self.window, group.opened + self.max_wait) - now
                if wait <= 0:
                    break
                self._cond.wait(wait)
                now = time.monotonic()
            if group.closed:
                return group, False
            group.closed = True
            del self._open[key]
            return group, True

    def _run(self, group: _Group) -> None:
        """Train a closed group; its callers read their outcomes (None: train alone)."""
        try:
            if len(group.calls) < 2:
                return
            with self._run_lock:
                if self.failure is not None:
                    return
                try:
                    # a step's stacked gradients are tens of MB, made anew at every step:
                    # kept in the arenas, not mapped and faulted in each time
                    with reuse_buffers():
                        outcomes = train_together([c.job for c in group.calls],
                                                  executor=self._executor,
                                                  parts=self.workers, timeout=self.timeout)
                    self._release()
                except Exception as exc:  # any failure: train them one at a time
                    self.failure = f"{type(exc).__name__}: {exc}"
                    log.warning("a batch of %d clients failed (%s); they and every later "
                                "call train one at a time", len(group.calls), self.failure)
                    return
                self.batches.append(len(group.calls))
            for c, outcome in zip(group.calls, outcomes, strict=True):
                c.outcome = outcome
        finally:
            group.done.set()
