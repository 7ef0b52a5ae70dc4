"""The PyTorch learner a client role trains with: its data, its model, its evaluation.

Binds a :class:`~islands.hfl.training.Trainer` (the client's training data) to the
client's local evaluation data, behind the :class:`~islands.hfl.protocol.Learner`
interface the client role uses, so that the roles themselves never import torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.hfl.models import ModelSpec, ModulePool
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
    """

    def __init__(self, spec: ModelSpec, X: NDArray[Any], y: NDArray[Any],
                 X_eval: NDArray[Any] | None = None, y_eval: NDArray[Any] | None = None, *,
                 task: str = "classification", seed: int = 0,
                 pool: ModulePool | None = None) -> None:
        self.trainer = Trainer(spec, X, y, task=task, seed=seed, pool=pool)  # type: ignore[arg-type]
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
        """Run the local steps (see :meth:`~islands.hfl.training.Trainer.train`)."""
        out = self.trainer.train(
            params, start=Position(epoch=epoch, step=step), steps=steps,
            batch_size=batch_size, lr=config.lr, momentum=config.momentum,
            weight_decay=config.weight_decay, prox_mu=config.prox_mu,
            momentum_buffer=momentum)
        return LocalOutcome(params=out.params, momentum=out.momentum, loss=float(out.loss))

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
