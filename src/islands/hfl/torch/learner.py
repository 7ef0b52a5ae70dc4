"""The PyTorch learner a client role trains with: its data, its model, its evaluation.

Binds a :class:`~islands.hfl.torch.training.Trainer` (the client's training data) to the
client's local evaluation data, behind the :class:`~islands.hfl.protocol.Learner`
interface the client role uses, so that the roles themselves never import torch.

Two small pieces compose with it:

* :class:`~islands.aggregation.protect.SampleAccount` keeps one client's DP-SGD budget (the
  checks before a call and the accounting after it), whoever runs the steps:
  :class:`TorchLearner` here, or the driver-side learner of the Ray backend
  (:mod:`islands.hfl.ray_backend`) whose steps run in a Ray worker.
* :class:`PooledLearner` runs another learner's calls on a small shared thread pool. An
  in-process simulation runs one thread per client role, and every OS thread that calls
  torch keeps about 0.6 MB of per-thread state (allocator and BLAS/OpenMP scratch) for
  as long as it lives: 1000 clients of the 784-200-10 MLP peaked at 2.4 GB over three
  rounds with each client thread training itself, 0.93 GB through a pool of as many
  threads as clients train at once. Only the pool's threads then call torch; the client
  roles stay light threads that wait.
"""

from __future__ import annotations

from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.aggregation.protect import SampleAccount, SampleDP
from islands.arrays import Vector
from islands.errors import invalid_parameter
from islands.hfl.protocol import LocalOutcome, WrappedLearner
from islands.hfl.strategy import LocalConfig
from islands.hfl.torch.batched import ClientBatcher
from islands.hfl.torch.dpsgd import PrivateTrainer
from islands.hfl.torch.loss import UserLoss
from islands.hfl.torch.models import ModelSpec, ModulePool
from islands.hfl.torch.training import Position, Trainer, _as_features, _as_targets

__all__ = ["FreeRider", "PooledLearner", "TorchLearner"]



class TorchLearner:
    """A client's local training (torch) and local evaluation.

    Parameters
    ----------
    spec
        The model architecture (shared by the federation).
    X, y
        The client's training data.
    X_eval, y_eval
        Its local evaluation data (may be empty: the client then reports no accuracy).
    task
        ``"classification"`` or ``"regression"``.
    seed
        Seed of the client's mini-batch order.
    pool
        Modules shared with other clients of this process (simulations).
    dp
        Train with DP-SGD (:mod:`islands.hfl.torch.dpsgd`) under these settings; the learner
        accounts its own budget and refuses a call that would exceed ``target_epsilon``.
    loss
        The user's loss (:mod:`islands.hfl.torch.loss`), None for the task's.
    batcher
        Train together with the other clients of this process that hand their calls
        to the same :class:`~islands.hfl.torch.batched.ClientBatcher` (simulations);
        None: alone. Not used under DP-SGD.
    """

    def __init__(self, spec: ModelSpec, X: NDArray[Any], y: NDArray[Any],
                 X_eval: NDArray[Any] | None = None, y_eval: NDArray[Any] | None = None, *,
                 task: str = "classification", seed: int = 0,
                 pool: ModulePool | None = None, dp: SampleDP | None = None,
                 loss: UserLoss | None = None, batcher: ClientBatcher | None = None) -> None:
        self.trainer = Trainer(spec, X, y, task=task, seed=seed, pool=pool,  # type: ignore[arg-type]
                               loss=loss)
        self.dp = dp
        self.batcher = batcher
        self._private: Any = None
        self._account: SampleAccount | None = None
        if dp is not None:
            self._private = PrivateTrainer(self.trainer, dp)
            self._account = SampleAccount(dp, len(y))
        self._n_train = len(y)
        initial_local = getattr(spec, "initial_local", None)
        self._n_local = 0 if initial_local is None else int(initial_local().size)
        self.local_state: Any = None  # the client's local layers after its last call
        self._eval = None
        if X_eval is not None and y_eval is not None and len(y_eval) > 0:
            # checked like the training rows: a NaN here must not turn into a dropout later
            x_eval = _as_features(X_eval, spec, "X_eval", "TorchLearner")
            self._eval = (x_eval, _as_targets(y_eval, len(x_eval), task, spec.n_outputs,
                                              "y_eval", "TorchLearner"))

    @property
    def n_train(self) -> int:
        """Training samples."""
        return self._n_train

    @property
    def n_eval(self) -> int:
        """Local evaluation samples."""
        return 0 if self._eval is None else len(self._eval[1])

    def train(self, params: Vector, *, epoch: int, step: int, steps: int, batch_size: int,
              config: LocalConfig, state: Vector | None) -> LocalOutcome:
        """Run the local steps (see :meth:`~islands.hfl.torch.training.Trainer.train`).

        ``state``: the previous call's, the local layers (FedBN) then the momentum buffer.

        Raises
        ------
        ValidationError
            Under DP-SGD, if the steps would take this client past its target ε, or
            the batch size changed (the accountant's sampling rate would be wrong).
        """
        if self._private is not None:
            return self._train_private(params, epoch=epoch, step=step, steps=steps,
                                       batch_size=batch_size, config=config,
                                       buffer=state)
        local, buffer = self._unpack(state)
        run = self.trainer.train if self.batcher is None else partial(self.batcher.train,
                                                                       self.trainer)
        out = run(
            params, start=Position(epoch=epoch, step=step), steps=steps,
            batch_size=batch_size, lr=config.lr, momentum=config.momentum,
            weight_decay=config.weight_decay, prox_mu=config.prox_mu,
            momentum_buffer=buffer, local=local, correction=config.correction)
        carried = out.momentum
        if self._n_local:
            self.local_state = out.local
            carried = out.local if out.momentum is None else np.concatenate(
                [out.local, out.momentum])
        return LocalOutcome(params=out.params, state=carried, loss=float(out.loss))

    def _unpack(self, carried: Vector | None) -> tuple[Vector | None, Vector | None]:
        """Split what the client role carries between calls: local layers, momentum buffer.

        With local layers (FedBN) the role's per-client vector holds them first, then the
        momentum buffer if any: it is checkpointed and handed back as the buffer is.
        """
        if not self._n_local or carried is None:
            return None, carried
        rest = carried[self._n_local:]
        return carried[: self._n_local], (rest if rest.size else None)

    def _train_private(self, params: Vector, *, epoch: int, step: int, steps: int,
                       batch_size: int, config: LocalConfig,
                       buffer: Vector | None) -> LocalOutcome:
        assert self._account is not None
        self._account.check(batch_size, steps)
        out = self._private.train(
            params, start=Position(epoch=epoch, step=step), steps=steps,
            batch_size=batch_size, lr=config.lr, momentum=config.momentum,
            weight_decay=config.weight_decay, prox_mu=config.prox_mu,
            momentum_buffer=buffer, correction=config.correction)
        self._account.step(steps)
        return LocalOutcome(params=out.params, state=out.momentum, loss=float(out.loss))

    def spent(self) -> tuple[float, float] | None:
        """Return this client's sample-level (ε, δ) so far, or None without DP-SGD."""
        return None if self._account is None else self._account.spent()

    def evaluate(self, params: Vector) -> float:
        """Score ``params`` on the local evaluation data (higher is better).

        Accuracy for classification; R² = 1 − MSE/Var(y) for regression (so that
        APFL's "new best" means the same thing for both tasks).
        """
        if self._eval is None:
            return float("nan")
        X, y = self._eval
        value = float(self.trainer.evaluate(params, X, y, self.local_state))
        if self.trainer.task == "regression":
            var = float(np.var(np.asarray(y, dtype=np.float64)))
            return 1.0 - value / var if var > 0 else -value
        return value


class PooledLearner(WrappedLearner):
    """Run another learner's calls on a shared, bounded thread pool (composition).

    The client role's thread hands each ``train``/``evaluate`` call to ``executor`` and
    waits for it, so only the pool's threads ever run torch (see the module docstring
    for why that matters with a thousand client threads). Results are those of
    ``inner``: the same calls run, on another thread.

    Parameters
    ----------
    inner
        The learner that does the work (e.g. a :class:`TorchLearner`).
    executor
        The pool, shared by every client of the simulation; size it above the clients
        that train at once, so that a call the server gave up on (still running on its
        thread) does not hold up the next client's.
    timeout
        Seconds to wait for one call (None: no limit).
    """

    def __init__(self, inner: Any, executor: Executor, timeout: float | None = None) -> None:
        self.inner = inner
        self.executor = executor
        self.timeout = timeout

    def _result(self, future: Any, what: str) -> Any:
        try:
            return future.result(timeout=self.timeout)
        except FutureTimeout:
            future.cancel()  # if it has not started; a running call finishes on its thread
            raise TimeoutError(f"local {what} did not finish within {self.timeout:g} s") \
                from None

    def train(self, params: Vector, *, epoch: int, step: int, steps: int, batch_size: int,
              config: LocalConfig, state: Vector | None) -> LocalOutcome:
        """Run ``inner.train`` on the pool and return its outcome (or raise its error)."""
        future = self.executor.submit(self.inner.train, params, epoch=epoch, step=step,
                                      steps=steps, batch_size=batch_size, config=config,
                                      state=state)
        outcome: LocalOutcome = self._result(future, "training")
        return outcome

    def evaluate(self, params: Vector) -> float:
        """Run ``inner.evaluate`` on the pool."""
        return float(self._result(self.executor.submit(self.inner.evaluate, params),
                                  "evaluation"))

    def spent(self) -> tuple[float, float] | None:
        """Return the inner learner's sample-level (ε, δ), or None."""
        spent = getattr(self.inner, "spent", None)
        return None if spent is None else spent()


class FreeRider(WrappedLearner):
    """A client that trains nothing: it uploads the global model it was sent.

    For simulations of contribution measurement (:mod:`islands.hfl.contribution`): it
    joins with ``inner``'s sample counts (so it claims its aggregation weight) and
    evaluates honestly, but its update w − w_global is zero, or, with ``noise`` > 0,
    Gaussian noise of that standard deviation per parameter (a free-rider disguising
    itself; Lin et al. 2019, "Free-riders in Federated Learning").

    Parameters
    ----------
    inner
        The learner whose counts and evaluation it reports.
    noise
        Standard deviation of the noise added to every parameter (0: the global model
        unchanged).
    seed
        Seeds the noise (a simulated behaviour, not a protection: numpy's generator).
    """

    def __init__(self, inner: Any, noise: float = 0.0, seed: int = 0) -> None:
        if not (np.isfinite(noise) and noise >= 0):
            raise invalid_parameter("noise", "FreeRider", "a float in [0, inf)", noise)
        self.inner = inner
        self.noise = float(noise)
        self._rng = np.random.default_rng(seed)

    def train(self, params: Vector, *, epoch: int, step: int, steps: int, batch_size: int,
              config: LocalConfig, state: Vector | None) -> LocalOutcome:
        """Return ``params`` (plus the noise; loss reported as NaN: nothing was trained)."""
        out = np.array(params, dtype=np.float32)
        if self.noise > 0:
            out += self._rng.normal(0.0, self.noise, out.shape).astype(np.float32)
        return LocalOutcome(params=out, state=state, loss=float("nan"))

    def evaluate(self, params: Vector) -> float:
        """Return the inner learner's evaluation."""
        return float(self.inner.evaluate(params))

