"""Simulate thousands of horizontal-FL clients with their local training on Ray.

Why
---
The in-process simulator (:class:`~islands.hfl.estimator.FederatedModel` with
``backend="local"``) runs every client's torch work in threads of one process. That
process is the limit: one machine's cores, and one address space for every client's
rows and every model in flight. Ray, an existing distributed engine, runs Python work
in a pool of worker processes, on this machine or over a cluster; this module hands it
the heavy part of a simulation, the clients' local training and evaluation, and
nothing else.

How
---
The protocol does not change. The server and the client roles
(:mod:`islands.hfl.protocol`) run in threads of the driver exactly as in the
in-process simulator, every message goes through the wire codec (so byte counts,
transcripts, dropouts and checkpoints are the same), and the server still takes
updates in a fixed order. The only difference is the learner each client role is
given: a :class:`RayLearner` satisfies the :class:`~islands.hfl.protocol.Learner`
protocol, but its ``train`` and ``evaluate`` run in a Ray actor. The client role
threads are light (they wait); the torch work happens in the workers.

* **Workers.** :class:`RayWorkerPool` starts W actors of :class:`HFLWorker`, one CPU
  each, W = min(free CPUs of the Ray cluster, clients training at once, clients). Each
  worker sets its torch intra-op threads once. Client k is pinned to worker k mod W,
  which builds the client's :class:`~islands.hfl.torch.learner.TorchLearner` at its first
  call and keeps it: a client's rows live in exactly one worker, and only one module
  per worker exists (a worker runs one call at a time).
* **Data.** Each client's checked training and evaluation rows are put in Ray's object
  store once (``ray.put``). The learner passes the reference with every call, nested
  in a list so that Ray does not fetch it; the worker fetches it only when it has not
  cached the client (the first call, or after the worker restarted).
* **Models.** A round's global model is the same for every client, so the pool puts it
  in the object store once (compared bit for bit with the last one put) and every call
  passes the reference. The trained model, the learner's state (its momentum buffer)
  and the loss come back as the call's result; the state stays with the client role,
  as in the in-process simulator (where it is checkpointed).
* **Identical results.** A worker runs the same :class:`TorchLearner` code on the
  same rows with the same seeds, and a :class:`~islands.hfl.torch.training.Trainer`'s batch
  order depends only on (seed, epoch, step), so a learner rebuilt in a worker (or
  rebuilt again after a restart) draws the same batches. With the same number of
  torch intra-op threads as the in-process run (``threads``), the final model is
  bitwise equal (tested).
* **Failures.** Every ``ray.get`` has a timeout (the estimator's ``timeout``). A
  worker that raises, dies or does not answer in time makes that client's call raise
  :class:`WorkerError` (:class:`WorkerTimeoutError`) in the client's role; the role
  fails and the server leaves that client out (a
  :class:`~islands.hfl.protocol.DropoutEvent`), as for any client that fails. A dead
  worker is restarted by Ray (``max_restarts``); the call in flight is not retried,
  and later calls rebuild the worker's cache from the object store. ``ray.cancel``
  cannot stop an actor call already running, so a worker whose call timed out is
  killed and restarted the same way (bounded wait): otherwise the other clients
  pinned to it would queue behind the abandoned call and time out in turn.
* **DP-SGD.** The privacy accountant stays in the driver-side learner
  (:class:`~islands.aggregation.protect.SampleAccount`): the budget is checked before a call
  and accounted after it returned; only the steps run in the worker.

Trust. Ray moves Python objects between the driver and its workers with pickle. That
is traffic inside one operator's simulation (the driver, the workers it started or the
cluster it was pointed at), never bytes from another party: the protocol's messages
still go through the wire codec only. Point ``ray_address`` only at a cluster you run.

``import islands.hfl.ray_backend`` imports neither Ray nor torch; the functions that
need them import them.

References
----------
.. [1] Moritz et al. "Ray: A Distributed Framework for Emerging AI Applications".
   OSDI 2018.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.aggregation.protect import SampleAccount, SampleDP
from islands.arrays import Vector
from islands.cores import usable_cores
from islands.errors import ProtocolError, ValidationError
from islands.hfl.protocol import LocalOutcome
from islands.hfl.strategy import LocalConfig

__all__ = [
    "HFLWorker",
    "RayLearner",
    "RayWorkerPool",
    "WorkerError",
    "WorkerTimeoutError",
    "check_client_data",
    "import_ray",
    "ray_session",
]

log = logging.getLogger(__name__)

ClientData = tuple[NDArray[Any], NDArray[Any], NDArray[Any] | None, NDArray[Any] | None]
MAX_RESTARTS = 8  # a worker is also restarted after each timed-out call
RESTART_TIMEOUT_S = 120.0
"""Seconds to wait for a worker restarted after a timeout (it re-imports torch)."""
"""How often Ray restarts a worker that died (the call in flight fails either way)."""
PROBE_TIMEOUT_S = 10.0
"""Seconds to wait for a TCP connection to ``ray_address`` before refusing it."""


class WorkerError(ProtocolError):
    """A Ray worker failed to train or evaluate for a client (raised in its role)."""


class WorkerTimeoutError(WorkerError, TimeoutError):
    """A Ray worker did not answer a client's call within the timeout."""


def import_ray() -> Any:
    """Import and return :mod:`ray`, explaining how to install it if missing.

    Raises
    ------
    ImportError
        If Ray is not installed.
    """
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "backend='ray' needs Ray, which is not installed: pip install 'islands[ray]'"
        ) from exc
    return ray


@contextlib.contextmanager
def ray_session(address: str | None = None, *, num_cpus: int | None = None) -> Iterator[bool]:
    """Make sure Ray is initialised for the duration; shut down only what was started.

    Parameters
    ----------
    address
        None: start a local Ray instance (``num_cpus`` CPUs, no dashboard, warnings
        and worker logs kept quiet). Otherwise the address of a running cluster,
        passed to ``ray.init(address=...)`` (``"auto"``, ``"host:6379"`` or a Ray
        Client address ``"ray://host:10001"``). If Ray is already initialised in this
        process, that instance is used as it is and left running.
    num_cpus
        CPUs of a local instance (default: the usable cores).

    Yields
    ------
    bool
        Whether this call started (and will shut down) the Ray instance.

    Raises
    ------
    ValidationError
        If no Ray cluster answers at ``address``.
    """
    ray = import_ray()
    if ray.is_initialized():
        if address is not None:
            log.info("Ray is already initialised in this process: using that instance, "
                     "not ray_address=%r", address)
        yield False
        return
    quiet: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address is None:
        # address="local": a new instance here, even where RAY_ADDRESS or a `ray start`
        # cluster on this machine would otherwise be joined
        ray.init(address="local", num_cpus=num_cpus or usable_cores(),
                 include_dashboard=False, **quiet)
    else:
        try:
            # ray.init retries a silent address for minutes: ask the port first
            _probe(address)
            ray.init(address=address, **quiet)
        except (OSError, RuntimeError, ValueError) as exc:  # ConnectionError is an OSError
            raise ValidationError(
                f"The 'ray_address' parameter of FederatedModel must name a running Ray "
                f"cluster. Got {address!r}, where none answered: {exc}") from exc
    try:
        yield True
    finally:
        ray.shutdown()


def _probe(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Open (and close) a TCP connection to a ``host:port`` or ``ray://host:port`` address.

    ``"auto"`` and ``"local"`` are Ray's own business (it answers at once).

    Raises
    ------
    OSError
        If nothing accepts the connection within ``timeout`` seconds.
    """
    target = address.removeprefix("ray://")
    if target in ("auto", "local") or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"no port number in {address!r}")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
        pass


def check_client_data(spec: Any, task: str, X: Any, y: Any, X_eval: Any = None,
                      y_eval: Any = None) -> ClientData:
    """Check a client's training rows as its :class:`Trainer` would, in the driver.

    The in-process simulator builds every client's trainer (and so checks its rows)
    before the run starts; the Ray backend builds them in the workers, so the driver
    checks them first: bad input is an error before any message is sent, never a
    dropout. Evaluation rows are checked the same way (a NaN there would otherwise make
    the client an APFL dropout).

    Returns
    -------
    tuple
        ``(X, y, X_eval, y_eval)``: features as C-contiguous float32 (or uint8/int8 as
        given) in the model's input shape, labels as int64 (or targets as float32), the
        evaluation rows converted the same way (None when there are none).

    Raises
    ------
    ValidationError
        Naming ``X`` or ``y`` and what is wrong (as :class:`Trainer` does).
    """
    from islands.hfl.torch.training import _as_features, _as_targets

    features = _as_features(X, spec, "X", "Trainer")
    targets = _as_targets(y, features.shape[0], task, spec.n_outputs, "y", "Trainer")
    if X_eval is None or y_eval is None or len(y_eval) == 0:
        return features, targets, None, None
    eval_features = _as_features(X_eval, spec, "X_eval", "Trainer")
    return features, targets, eval_features, _as_targets(
        y_eval, eval_features.shape[0], task, spec.n_outputs, "y_eval", "Trainer")


class HFLWorker:
    """A Ray actor's state: the modules and the learners of the clients pinned to it.

    Made a Ray actor class by :class:`RayWorkerPool` (``ray.remote(HFLWorker)``); the
    class itself imports neither Ray nor torch.

    Parameters
    ----------
    spec
        The model (:class:`~islands.hfl.torch.models.ModelSpec`).
    task
        ``"classification"`` or ``"regression"``.
    threads
        torch intra-op threads of this worker (None: leave Ray's setting).
    dp
        DP-SGD settings: train through a :class:`~islands.hfl.torch.dpsgd.PrivateTrainer`.
    fetch_timeout
        Seconds to wait for a client's rows from the object store.
    loss
        The user's loss (a checked :class:`~islands.hfl.torch.loss.UserLoss`), or None.
    """

    def __init__(self, spec: Any, task: str, threads: int | None, dp: SampleDP | None,
                 fetch_timeout: float, loss: Any = None) -> None:
        import torch

        from islands.hfl.torch.models import ModulePool

        if threads is not None:
            torch.set_num_threads(int(threads))
        self.spec = spec
        self.task = task
        self.dp = dp
        self.loss = loss
        self.fetch_timeout = float(fetch_timeout)
        self.pool = ModulePool(spec)
        self.clients: dict[int, tuple[Any, Any]] = {}

    def ready(self) -> dict[str, int]:
        """Return this worker's process id and torch threads (a start-up check)."""
        import torch

        return {"pid": os.getpid(), "threads": int(torch.get_num_threads())}

    def _client(self, key: int, data: list[Any], seed: int) -> tuple[Any, Any]:
        entry = self.clients.get(key)
        if entry is None:
            import ray

            from islands.hfl.torch.learner import TorchLearner

            X, y, X_eval, y_eval = ray.get(data[0], timeout=self.fetch_timeout)
            # private writable copies: the object store's arrays are read-only views
            # (torch would copy the features on every evaluation otherwise)
            learner = TorchLearner(
                self.spec, np.array(X), np.array(y),
                None if X_eval is None else np.array(X_eval),
                None if y_eval is None else np.array(y_eval),
                task=self.task, seed=seed, pool=self.pool, loss=self.loss)
            private = None
            if self.dp is not None:
                from islands.hfl.torch.dpsgd import PrivateTrainer

                private = PrivateTrainer(learner.trainer, self.dp)
            entry = (learner, private)
            self.clients[key] = entry
        return entry

    def train(self, key: int, data: list[Any], seed: int, params: Vector, epoch: int,
              step: int, steps: int, batch_size: int, config: LocalConfig,
              state: Vector | None) -> tuple[Vector, Vector | None, float]:
        """Run a client's local steps; return (model, its state for the next call, loss)."""
        from islands.hfl.torch.training import Position

        learner, private = self._client(key, data, seed)
        if private is None:
            out = learner.train(params, epoch=epoch, step=step, steps=steps,
                                batch_size=batch_size, config=config, state=state)
            return out.params, out.state, float(out.loss)
        dp_out = private.train(
            params, start=Position(epoch=epoch, step=step), steps=steps,
            batch_size=batch_size, lr=config.lr, momentum=config.momentum,
            weight_decay=config.weight_decay, prox_mu=config.prox_mu,
            momentum_buffer=state, correction=config.correction)
        return dp_out.params, dp_out.momentum, float(dp_out.loss)

    def evaluate(self, key: int, data: list[Any], seed: int, params: Vector) -> float:
        """Score ``params`` on a client's local evaluation rows."""
        learner, _ = self._client(key, data, seed)
        return float(learner.evaluate(params))

    def forget(self) -> int:
        """Drop every cached client (as a restart would); return how many there were."""
        count = len(self.clients)
        self.clients.clear()
        return count


_REMOTE: Any = None
_REMOTE_LOCK = threading.Lock()
_SETTLE_S = 10.0


def _free_cpus(wanted: int) -> int:
    """Return the cluster's free CPUs, waiting up to 10 s for ``wanted`` of them.

    Ray reports the CPUs of actors just killed (a previous pool's) as free only a
    moment later.
    """
    ray = import_ray()
    deadline = time.monotonic() + _SETTLE_S
    while True:
        free = int(ray.available_resources().get("CPU", 0))
        if free >= wanted or time.monotonic() > deadline:
            return free
        time.sleep(0.05)


def _remote_worker_class() -> Any:
    global _REMOTE
    with _REMOTE_LOCK:
        if _REMOTE is None:
            _REMOTE = import_ray().remote(HFLWorker)
        return _REMOTE


class RayWorkerPool:
    """A fixed pool of :class:`HFLWorker` actors and the learners that use them.

    Use as a context manager (the actors are killed on exit) inside a
    :func:`ray_session`.

    Parameters
    ----------
    spec
        The model.
    workers
        Actors wanted; fewer are started if the cluster has fewer free CPUs (one CPU
        each).
    task
        ``"classification"`` or ``"regression"``.
    threads
        torch intra-op threads in each worker (None: Ray's default for a one-CPU
        actor, 1).
    dp
        DP-SGD settings for every client, or None.
    timeout
        Seconds any ``ray.get`` waits: a worker's start, a client's call.
    loss
        The user's loss (a checked :class:`~islands.hfl.torch.loss.UserLoss`, sent to the
        workers with the model), or None for the task's.

    Raises
    ------
    ValidationError
        If the cluster has no free CPU.
    WorkerError
        If the workers cannot start (e.g. islands is not importable on a node), or do
        not start within ``timeout`` (:class:`WorkerTimeoutError`).
    """

    def __init__(self, spec: Any, *, workers: int, task: str = "classification",
                 threads: int | None = 1, dp: SampleDP | None = None,
                 timeout: float = 600.0, loss: Any = None) -> None:
        ray = import_ray()
        self.spec = spec
        self.task = task
        self.dp = dp
        self.timeout = float(timeout)
        free = _free_cpus(min(int(workers), int(ray.cluster_resources().get("CPU", 0))))
        if free < 1:
            raise ValidationError(
                "backend='ray': the Ray cluster has no free CPU for the training workers "
                f"(resources: {ray.cluster_resources()})")
        count = max(1, min(int(workers), free))
        cls = _remote_worker_class()
        self.actors: list[Any] = [
            cls.options(num_cpus=1, max_restarts=MAX_RESTARTS, max_task_retries=0).remote(
                spec, task, threads, dp, self.timeout, loss)
            for _ in range(count)]
        self._lock = threading.Lock()
        self._shared: tuple[Vector, Any] | None = None
        self._keys = 0
        try:
            info = self.wait([a.ready.remote() for a in self.actors], "start-up", "ray")
        except WorkerError:
            self.close()
            raise
        self.pids: list[int] = [int(i["pid"]) for i in info]
        self.threads: list[int] = [int(i["threads"]) for i in info]

    def __enter__(self) -> RayWorkerPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def size(self) -> int:
        """The number of workers."""
        return len(self.actors)

    def close(self) -> None:
        """Kill the workers and wait (briefly) until they are gone and their CPUs free."""
        ray = import_ray()
        actors, self.actors, self._shared = self.actors, [], None
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        for actor in actors:  # a dead actor's call fails at once
            with contextlib.suppress(Exception):
                ray.get(actor.ready.remote(), timeout=_SETTLE_S)

    def learner(self, name: str, X: Any, y: Any, X_eval: Any = None, y_eval: Any = None,
                *, seed: int, checked: bool = False) -> RayLearner:
        """Put a client's rows in the object store and return its learner.

        Parameters
        ----------
        name
            The client's party name (for error messages).
        X, y, X_eval, y_eval
            Its training and local evaluation rows (as for
            :class:`~islands.hfl.torch.learner.TorchLearner`).
        seed
            The seed of its batch order.
        checked
            The rows already come from :func:`check_client_data`.

        Returns
        -------
        RayLearner
            Pinned to worker ``k mod size`` for the k-th learner made.
        """
        ray = import_ray()
        data = ((X, y, X_eval, y_eval) if checked
                else check_client_data(self.spec, self.task, X, y, X_eval, y_eval))
        with self._lock:
            key = self._keys
            self._keys += 1
        ref = ray.put(data)
        n_eval = 0 if data[3] is None else len(data[3])
        return RayLearner(self, name=name, key=key, slot=key % self.size, data=ref,
                          seed=seed, n_train=len(data[1]), n_eval=n_eval, dp=self.dp)

    def share(self, params: Vector) -> Any:
        """Return an object-store reference to ``params``, put once per distinct model."""
        ray = import_ray()
        vec = np.ascontiguousarray(params, dtype=np.float32)
        bits = vec.view(np.uint32)
        with self._lock:
            last = self._shared
            if last is not None and last[0].shape == bits.shape and np.array_equal(
                    last[0], bits):
                return last[1]
            ref = ray.put(vec)
            self._shared = (bits.copy(), ref)
            return ref

    def _restart(self, actor: Any) -> None:
        """Kill ``actor`` so that Ray restarts it; wait (bounded) until it answers again."""
        ray = import_ray()
        slot = next((i for i, a in enumerate(self.actors) if a is actor), None)
        old = None if slot is None else self.pids[slot]
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=False)
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                info = ray.get(actor.ready.remote(),
                               timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # restarting (ActorUnavailableError) or gone for good
                time.sleep(0.2)
                continue
            if slot is None or int(info["pid"]) != old:  # the new process, not the old
                if slot is not None:
                    self.pids[slot] = int(info["pid"])
                return
            time.sleep(0.2)
        log.warning("a Ray worker killed after a timeout did not come back within %.0f s",
                    RESTART_TIMEOUT_S)

    def wait(self, ref: Any, what: str, client: str, actor: Any = None) -> Any:
        """``ray.get(ref)`` with the pool's timeout; Ray's errors become WorkerErrors.

        ``ray.cancel`` does not stop an actor call that is already running, so on a
        timeout the call's ``actor`` is killed and restarted by Ray (it rebuilds its
        clients from the object store): otherwise every other client pinned to it
        would queue behind the abandoned call.

        Raises
        ------
        WorkerTimeoutError
            If nothing came back within ``timeout`` (the call is cancelled and its
            worker restarted).
        WorkerError
            If the worker raised or died.
        """
        ray = import_ray()
        from ray.exceptions import GetTimeoutError, RayError

        try:
            return ray.get(ref, timeout=self.timeout)
        except GetTimeoutError as exc:
            refs = ref if isinstance(ref, list) else [ref]
            for r in refs:
                with contextlib.suppress(Exception):
                    ray.cancel(r)
            if actor is not None:
                self._restart(actor)
            raise WorkerTimeoutError(
                f"client {client!r}: the Ray worker did not finish {what} within "
                f"{self.timeout:g} s", party=client, step=what) from exc
        except RayError as exc:
            cause = getattr(exc, "cause", None)
            detail = (f"{type(cause).__name__}: {cause}" if cause is not None
                      else f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            hint = (" (islands must be importable on every Ray node)"
                    if "No module named 'islands" in str(exc) else "")
            raise WorkerError(f"client {client!r}: the Ray worker failed during {what}: "
                              f"{detail}{hint}", party=client, step=what) from exc


class RayLearner:
    """A client's learner whose training and evaluation run in a Ray worker.

    Satisfies :class:`~islands.hfl.protocol.Learner`; made by
    :meth:`RayWorkerPool.learner`.

    Parameters
    ----------
    pool
        The worker pool.
    name
        The client's party name.
    key
        The client's key in its worker's cache.
    slot
        Index of the worker the client is pinned to.
    data
        Object-store reference to ``(X, y, X_eval, y_eval)``.
    seed
        The seed of the client's batch order.
    n_train, n_eval
        The client's sample counts.
    dp
        DP-SGD settings: the budget is accounted here, in the driver.
    """

    def __init__(self, pool: RayWorkerPool, *, name: str, key: int, slot: int, data: Any,
                 seed: int, n_train: int, n_eval: int, dp: SampleDP | None = None) -> None:
        self.pool = pool
        self.name = name
        self.key = key
        self.slot = slot
        self.data = data
        self.seed = int(seed)
        self._n_train = int(n_train)
        self._n_eval = int(n_eval)
        self._account = None if dp is None else SampleAccount(dp, n_train)
        initial_local = getattr(pool.spec, "initial_local", None)
        self._n_local = 0 if initial_local is None else int(initial_local().size)
        self.local_state: Any = None  # FedBN: the client's local layers after its last call

    @property
    def n_train(self) -> int:
        """Training samples."""
        return self._n_train

    @property
    def n_eval(self) -> int:
        """Local evaluation samples."""
        return self._n_eval

    def _actor(self) -> Any:
        actors = self.pool.actors
        if not actors:
            raise WorkerError(f"client {self.name!r}: the Ray worker pool is closed",
                              party=self.name, step="train")
        return actors[self.slot]

    def train(self, params: Vector, *, epoch: int, step: int, steps: int, batch_size: int,
              config: LocalConfig, state: Vector | None) -> LocalOutcome:
        """Run the local steps in the client's worker (see :meth:`TorchLearner.train`).

        Raises
        ------
        ValidationError
            Under DP-SGD, if the steps would exceed the client's budget (before any
            call).
        WorkerError
            If the worker failed or timed out.
        """
        if self._account is not None:
            self._account.check(batch_size, steps)
        actor = self._actor()
        ref = actor.train.remote(
            self.key, [self.data], self.seed, self.pool.share(params), epoch, step, steps,
            batch_size, config, state)
        new, buf, loss = self.pool.wait(ref, "train", self.name, actor)
        if self._account is not None:
            self._account.step(steps)
        if self._n_local and buf is not None:  # the state leads with the local layers
            self.local_state = np.array(buf[: self._n_local], dtype=np.float32)
        # copies: what ray.get returns are read-only views of the object store
        return LocalOutcome(params=np.array(new, dtype=np.float32),
                            state=None if buf is None else np.array(buf, dtype=np.float32),
                            loss=float(loss))

    def evaluate(self, params: Vector) -> float:
        """Score ``params`` on the client's evaluation rows, in its worker."""
        if self._n_eval == 0:
            return float("nan")
        actor = self._actor()
        ref = actor.evaluate.remote(self.key, [self.data], self.seed, self.pool.share(params))
        return float(self.pool.wait(ref, "evaluate", self.name, actor))

    def spent(self) -> tuple[float, float] | None:
        """Return the client's sample-level (ε, δ) so far, or None without DP-SGD."""
        return None if self._account is None else self._account.spent()
