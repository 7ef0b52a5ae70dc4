"""The training plan: what every party of a horizontal federation trains, built once.

A :class:`TrainingPlan` holds the built pieces that shape the model: the model (a
:class:`~islands.hfl.torch.models.ModelSpec` or the user's
:class:`~islands.hfl.torch.user.TorchModel`), the strategy with its aggregator (the
resolved protections) and server optimiser, DP-SGD's settings, the loss, the task and
the seed. The estimator (:class:`~islands.hfl.FederatedModel`), a job file
(:mod:`islands.hfl.job`) and a federation file (:mod:`islands.hfl.spec`) each build one
and hand it down unchanged; the roles' inputs come from it: the first global vector
(:meth:`TrainingPlan.initial`), each client's learner (:meth:`TrainingPlan.learner`,
:meth:`TrainingPlan.client`), the model in a global vector
(:meth:`TrainingPlan.model_part`) and the settings a checkpoint records
(:meth:`TrainingPlan.settings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from numpy.typing import NDArray

from islands.aggregation.base import Aggregator
from islands.aggregation.protect import SampleDP
from islands.arrays import Vector
from islands.hfl.checkpoint import shaping_settings
from islands.hfl.protocol import Learner
from islands.hfl.scaffold import client_learner, global_vector, model_part
from islands.hfl.strategy import Strategy

__all__ = ["TrainingPlan"]


@dataclass(frozen=True)
class TrainingPlan:
    """The built pieces every party trains with (see the module docstring).

    Attributes
    ----------
    model
        The model: a ``ModelSpec`` or a bound ``TorchModel``.
    strategy
        The strategy, with its aggregator and server optimiser.
    task
        ``"classification"`` or ``"regression"``.
    seed
        The run's seed (the initial model, each client's batches).
    sample_dp
        DP-SGD's settings, or None.
    loss
        The user's loss bound to the model (:class:`~islands.hfl.torch.loss.UserLoss`),
        or None: the task's own (or, at a party that does not train, not bound).
    loss_name
        The loss's name as the settings record it; taken from ``loss`` when bound.
    """

    model: Any
    strategy: Strategy
    task: str
    seed: int
    sample_dp: SampleDP | None = None
    loss: Any = None
    loss_name: str | None = None

    def __post_init__(self) -> None:
        if self.loss is not None and self.loss_name is None:
            object.__setattr__(self, "loss_name", self.loss.name)

    @property
    def aggregator(self) -> Aggregator:
        """The strategy's aggregator: the run's protections."""
        return self.strategy.aggregator

    def initial(self) -> Vector:
        """Return the first global vector: the seeded model (then SCAFFOLD's c = 0)."""
        from islands.hfl.torch.models import flat_parameters  # torch

        return global_vector(self.strategy, flat_parameters(self.model.build(self.seed)),
                             self.model.n_trainable())

    def model_part(self, vector: Vector) -> Vector:
        """Return the model of a global vector (without a control variate)."""
        return model_part(self.strategy, vector, self.model.n_params())

    def learner(self, X: NDArray[Any], y: NDArray[Any], X_eval: NDArray[Any] | None = None,
                y_eval: NDArray[Any] | None = None, *, seed: int, pool: Any = None,
                batcher: Any = None) -> Any:
        """Return a client's :class:`~islands.hfl.torch.learner.TorchLearner` on its rows.

        ``batcher``: the simulation's :class:`~islands.hfl.torch.batched.ClientBatcher`
        (its clients train together), or None.
        """
        from islands.hfl.torch.learner import TorchLearner  # torch

        return TorchLearner(self.model, X, y, X_eval, y_eval, task=self.task, seed=seed,
                            pool=pool, dp=self.sample_dp, loss=self.loss, batcher=batcher)

    def client(self, learner: Learner) -> Learner:
        """Return what a client role runs around ``learner`` (SCAFFOLD's step, or as is)."""
        return client_learner(self.strategy, learner, self.model.n_params(),
                              self.model.n_trainable())

    def settings(self, *, eval_fraction: float, rows: Mapping[str, str] | None = None,
                 extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Return the settings that shape the model, as checkpoints record them."""
        return shaping_settings(seed=self.seed, task=self.task, eval_fraction=eval_fraction,
                                strategy=self.strategy, model=self.model,
                                sample_dp=self.sample_dp, loss=self.loss_name, rows=rows,
                                extra=extra)
