"""Coalition games built from one round's recorded updates, and the utilities that score them.

A round of FedAvg starts from the global model w and ends with
w' = Σ_{k∈N} p_k·w_k over its survivors N (p_k the aggregation weights, Σ p_k = 1). The
model a coalition S ⊆ N would have produced that round is rebuilt from the same uploads,
without retraining (the "gradient-based reconstruction" of Song et al. 2019 and
GTG-Shapley):

* ``weighting="renormalised"`` (the papers'): FedAvg over S alone,
  w_S = Σ_{k∈S} p_k·w_k / Σ_{k∈S} p_k;
* ``weighting="fixed"``: each client's share of the actual step,
  w_S = w + Σ_{k∈S} p_k·(w_k − w).

Both give w_∅ = w and w_N = w'. They differ for a client whose update is zero (a
free-rider uploading the global model): under ``"fixed"`` it changes no coalition's model
(a null player, value exactly 0); under ``"renormalised"`` it takes weight from the
others, diluting their step as it does in the real aggregate, which lowers good
coalitions' values and raises harmful ones'. On digits with a label-noise client, a
free-rider's summed renormalised score came out as high as an honest small client's
(``tests/test_contribution.py`` checks the fixed game's null player): ``"fixed"`` is the
default here, ``"renormalised"`` reproduces the papers.

The value of S is a :class:`Utility` of w_S: accuracy or minus the loss on validation rows
held by the server (:class:`ServerValidation`) or, in a simulation, on every client's own
evaluation rows (:class:`ClientValidation`).

References
----------
.. [1] T. Song, Y. Tong, S. Wei. "Profit Allocation for Federated Learning". IEEE Big
   Data 2019 (one-round and multi-round reconstruction).
.. [2] Z. Liu et al. "GTG-Shapley: Efficient and Accurate Participant Contribution
   Evaluation in Federated Learning". ACM TIST 13(4), 2022.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.validation import describe

__all__ = [
    "WEIGHTINGS",
    "ClientValidation",
    "RoundGame",
    "ServerValidation",
    "Utility",
    "coalition_coefficients",
]

Vector = NDArray[np.float32]
Weighting = Literal["renormalised", "fixed"]
WEIGHTINGS: tuple[str, ...] = ("fixed", "renormalised")


class Utility(Protocol):
    """Scores a flat model vector; higher is better."""

    def __call__(self, params: Vector) -> float:
        """Return the score of ``params``."""


class ServerValidation:
    """Validation rows the server holds: accuracy, or minus the mean loss.

    Parameters
    ----------
    spec
        The federation's :class:`~islands.hfl.torch.models.ModelSpec`.
    X, y
        The validation rows (never trained on).
    task
        ``"classification"`` or ``"regression"``.
    metric
        ``"accuracy"`` (classification only) or ``"loss"`` (minus cross-entropy, minus
        the mean squared error, or minus the user's ``loss``).
    pool
        A :class:`~islands.hfl.torch.models.ModulePool` of ``spec`` to borrow modules from.
    loss
        The user's loss the clients train with (:mod:`islands.hfl.torch.loss`), which
        ``"loss"`` then is; None: the task's.
    """

    def __init__(self, spec: Any, X: Any, y: Any, *, task: str = "classification",
                 metric: str = "accuracy", pool: Any = None, loss: Any = None) -> None:
        from islands.hfl.torch.training import Trainer

        if len(np.asarray(y)) == 0:
            raise ValidationError("the contribution's validation set is empty")
        self.trainer = Trainer(spec, X, y, task=task, pool=pool,  # type: ignore[arg-type]
                               loss=loss)
        if metric not in ("accuracy", "loss") or (metric == "accuracy"
                                                  and task != "classification"):
            raise invalid_parameter("metric", "ServerValidation",
                                    "'accuracy' or 'loss' ('loss' for a regression)",
                                    describe(metric))
        self.metric: Literal["accuracy", "loss"] = metric  # type: ignore[assignment]
        self.rows = self.trainer.n

    def __call__(self, params: Vector) -> float:
        """Score ``params`` on the validation rows."""
        return self.trainer.score_own(params, self.metric)


class ClientValidation:
    """Every client's own evaluation rows: Σ_k n_k·score_k / Σ_k n_k (a simulation only).

    In one process the coalition models are scored by each client's learner, on the
    rows it keeps back for evaluation, weighted by their number (as APFL's eq. 30). In
    a deployment this would mean sending every coalition model, including each
    single client's update, to every other client: use it only where the clients
    already trust each other with their updates.

    Parameters
    ----------
    scorers
        One ``(score, n_eval)`` per client: ``score(params)`` its local accuracy (or
        R²), ``n_eval`` its evaluation rows; clients with none are left out.
    """

    def __init__(self, scorers: Sequence[tuple[Callable[[Vector], float], int]]) -> None:
        self.scorers = [(f, int(n)) for f, n in scorers if int(n) > 0]
        if not self.scorers:
            raise ValidationError("validation='clients' needs clients with local evaluation "
                                  "rows (eval_fraction > 0)")
        self.rows = sum(n for _, n in self.scorers)

    def __call__(self, params: Vector) -> float:
        """Return the clients' evaluation-row-weighted mean score of ``params``."""
        return sum(n * float(f(params)) for f, n in self.scorers) / self.rows


def coalition_coefficients(mask: int, weights: NDArray[np.float64],
                           weighting: str) -> NDArray[np.float64]:
    """Return c with w_S = w + Σ_k c_k·(w_k − w) for the coalition ``mask``.

    ``weights`` are the round's p_k (summing to 1 over the players).
    """
    inside = np.array([(mask >> k) & 1 for k in range(len(weights))], dtype=np.float64)
    return member_coefficients(inside, weights, weighting)


def member_coefficients(inside: NDArray[np.float64], weights: NDArray[np.float64],
                        weighting: str) -> NDArray[np.float64]:
    """Return the coefficients c of coalitions given as 0/1 membership rows.

    ``inside`` has shape (..., m): one row per coalition, 1 for each member. ``"fixed"``:
    c_k = p_k for members; ``"renormalised"``: those divided by the members' Σ p_k (an
    empty coalition gets all zeros).
    """
    coef = inside * weights
    if weighting == "renormalised":
        total = coef.sum(axis=-1, keepdims=True)
        coef = np.divide(coef, total, out=np.zeros_like(coef), where=total > 0)
    return coef


class RoundGame:
    """The coalition game of one round: v(S) = utility(w_S), each value computed once.

    Parameters
    ----------
    base
        w, the global model the round started from.
    params
        The survivors' uploaded models w_k, one row each (players in this order); the
        game keeps their updates w_k − w (:attr:`deltas`).
    weights
        Their aggregation weights (renormalised here to sum to 1).
    utility
        Scores a model.
    weighting
        ``"fixed"`` or ``"renormalised"`` (module docstring).
    """

    def __init__(self, base: Vector, params: Sequence[Vector] | NDArray[np.float32],
                 weights: Sequence[float], utility: Utility,
                 weighting: str = "fixed") -> None:
        if weighting not in WEIGHTINGS:
            raise invalid_parameter("weighting", "RoundGame", f"one of {WEIGHTINGS}",
                                    describe(weighting))
        self.base = np.asarray(base, dtype=np.float32)
        # the updates w_k − w, not the models: a zero update (a free-rider's) is then
        # exactly 0 and leaves every coalition's model bit for bit unchanged
        rows = [np.asarray(p, np.float32) for p in params]
        if self.base.ndim != 1 or not rows or any(r.shape != self.base.shape for r in rows):
            raise ValidationError(f"round updates of shapes {sorted({r.shape for r in rows})} "
                                  f"do not match a model of {self.base.size} parameters")
        self.deltas = np.ascontiguousarray(np.stack([r - self.base for r in rows]))
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (len(self.deltas),) or not np.all(np.isfinite(w)) or w.min() <= 0:
            raise ValidationError(f"round weights must be {len(self.deltas)} finite values "
                                  f"> 0; got {w}")
        self.weights = w / w.sum()
        self.players = len(self.deltas)
        self.utility = utility
        self.weighting = weighting
        self.evaluations = 0
        self._cache: dict[int, float] = {}

    def model(self, mask: int) -> Vector:
        """Return w_S = w + Σ_k c_k·(w_k − w) for the coalition ``mask``."""
        coef = coalition_coefficients(mask, self.weights, self.weighting)
        step: Vector = coef.astype(np.float32) @ self.deltas
        return self.base + step

    def __call__(self, mask: int) -> float:
        """v(mask), from the cache when this coalition was valued before."""
        if mask not in self._cache:
            self._cache[mask] = float(self.utility(self.model(mask)))
            self.evaluations += 1
        return self._cache[mask]

    def null_players(self) -> NDArray[np.bool_]:
        """Players known to add nothing to any coalition: a zero update, fixed weighting.

        Under ``"fixed"`` weighting a zero update leaves every coalition's model bit for
        bit unchanged; under ``"renormalised"`` it still takes weight from the others.
        """
        if self.weighting != "fixed":
            return np.zeros(self.players, dtype=bool)
        return np.asarray(~np.any(self.deltas, axis=1))

    def known(self) -> Mapping[int, float]:
        """Return the coalitions valued so far."""
        return dict(self._cache)
