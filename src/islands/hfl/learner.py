"""The PyTorch learner a client role trains with: its data, its model, its evaluation.

Binds a :class:`~islands.hfl.training.Trainer` (the client's training data) to the
client's local evaluation data, behind the :class:`~islands.hfl.protocol.Learner`
interface the client role uses, so that the roles themselves never import torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.errors import ValidationError
from islands.hfl.models import ModelSpec, ModulePool
from islands.hfl.protect import SampleDP
from islands.hfl.protocol import LocalOutcome
from islands.hfl.strategy import LocalConfig
from islands.hfl.training import Position, Trainer

__all__ = ["TorchLearner"]

Vector = NDArray[np.float32]


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
        Train with DP-SGD (:mod:`islands.hfl.dpsgd`) under these settings; the learner
        accounts its own budget and refuses a call that would exceed ``target_epsilon``.
    """

    def __init__(self, spec: ModelSpec, X: NDArray[Any], y: NDArray[Any],
                 X_eval: NDArray[Any] | None = None, y_eval: NDArray[Any] | None = None, *,
                 task: str = "classification", seed: int = 0,
                 pool: ModulePool | None = None, dp: SampleDP | None = None) -> None:
        self.trainer = Trainer(spec, X, y, task=task, seed=seed, pool=pool)  # type: ignore[arg-type]
        self.dp = dp
        self._private: Any = None
        self._accountant: Any = None
        self._batch_size: int | None = None
        if dp is not None:
            from islands.hfl.dpsgd import PrivateTrainer

            self._private = PrivateTrainer(self.trainer, dp)
        self._n_train = len(y)
        self._eval = None
        if X_eval is not None and y_eval is not None and len(y_eval) > 0:
            self._eval = (X_eval, y_eval)

    @property
    def n_train(self) -> int:
        """Training samples."""
        return self._n_train

    @property
    def n_eval(self) -> int:
        """Local evaluation samples."""
        return 0 if self._eval is None else len(self._eval[1])

    def train(self, params: Vector, *, epoch: int, step: int, steps: int, batch_size: int,
              config: LocalConfig, momentum: Vector | None) -> LocalOutcome:
        """Run the local steps (see :meth:`~islands.hfl.training.Trainer.train`).

        Raises
        ------
        ValidationError
            Under DP-SGD, if the steps would take this client past its target ε, or
            the batch size changed (the accountant's sampling rate would be wrong).
        """
        if self._private is not None:
            return self._train_private(params, epoch=epoch, step=step, steps=steps,
                                       batch_size=batch_size, config=config,
                                       momentum=momentum)
        out = self.trainer.train(
            params, start=Position(epoch=epoch, step=step), steps=steps,
            batch_size=batch_size, lr=config.lr, momentum=config.momentum,
            weight_decay=config.weight_decay, prox_mu=config.prox_mu,
            momentum_buffer=momentum)
        return LocalOutcome(params=out.params, momentum=out.momentum, loss=float(out.loss))

    def _train_private(self, params: Vector, *, epoch: int, step: int, steps: int,
                       batch_size: int, config: LocalConfig,
                       momentum: Vector | None) -> LocalOutcome:
        assert self.dp is not None
        if self._accountant is None:
            self._accountant = self.dp.new_accountant(batch_size, self._n_train)
            self._batch_size = batch_size
        elif batch_size != self._batch_size:
            raise ValidationError(
                f"DP-SGD: the batch size changed from {self._batch_size} to {batch_size}; "
                "the privacy accountant assumes one sampling rate")
        target = self.dp.target_epsilon
        if target is not None and self._accountant.would_exceed(target, steps):
            raise ValidationError(
                f"DP-SGD: {steps} more steps would take this client past its target "
                f"epsilon {target} (spent {self._accountant.epsilon():.3g})")
        out = self._private.train(
            params, start=Position(epoch=epoch, step=step), steps=steps,
            batch_size=batch_size, lr=config.lr, momentum=config.momentum,
            weight_decay=config.weight_decay, prox_mu=config.prox_mu,
            momentum_buffer=momentum)
        self._accountant.step(steps)
        return LocalOutcome(params=out.params, momentum=out.momentum, loss=float(out.loss))

    def spent(self) -> tuple[float, float] | None:
        """Return this client's sample-level (ε, δ) so far, or None without DP-SGD."""
        if self.dp is None:
            return None
        return (0.0, self.dp.delta) if self._accountant is None else self._accountant.spent()

    def evaluate(self, params: Vector) -> float:
        """Score ``params`` on the local evaluation data (higher is better).

        Accuracy for classification; R² = 1 − MSE/Var(y) for regression (so that
        APFL's "new best" means the same thing for both tasks).
        """
        if self._eval is None:
            return float("nan")
        X, y = self._eval
        value = float(self.trainer.evaluate(params, X, y))
        if self.trainer.task == "regression":
            var = float(np.var(np.asarray(y, dtype=np.float64)))
            return 1.0 - value / var if var > 0 else -value
        return value
