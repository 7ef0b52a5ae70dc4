"""Contribution by retraining: train the federation again on coalitions of clients.

The definition the reconstruction methods approximate: v(S) is the utility of the model
a federation of S alone would have trained (v(∅): the initial model). Exact Shapley
values need all 2ⁿ coalitions trained, leave-one-out n + 1. It works under every
protection — secure aggregation, CKKS, Paillier, the chaos permutation, DP — because each
training is an ordinary protected run and only its final model is scored; it is the
ground truth on small federations (``islands reproduce contribution`` compares the
reconstruction methods with it) and the only way here to value clients whose updates the
aggregator hides.

A coalition's clients keep their names and data, but a client's mini-batch seed follows
its position in the list (:func:`~islands.hfl.estimator.client_seed`), so a retrained
coalition's batch orders differ from the full run's: retraining values carry that
training noise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.hfl.config import resolve_seed
from islands.hfl.contribution.maths import MAX_EXACT_PLAYERS, exact_shapley, leave_one_out
from islands.validation import check_int, describe

__all__ = ["RetrainResult", "coalition_trainer", "retrain_contributions"]

Train = Callable[[tuple[int, ...]], float]
"""Trains a coalition (client indices, increasing) and returns its model's utility."""


@dataclass(frozen=True)
class RetrainResult:
    """Scores from retraining.

    Attributes
    ----------
    method
        ``"exact"`` (Shapley) or ``"loo"``.
    scores
        φ_k per client.
    values
        v(S) of every coalition trained, by its members (as a comma-joined string of
        indices, ``""`` for ∅).
    trainings
        Coalitions trained (∅ is scored, not trained).
    seconds
        Wall time of all trainings.
    """

    method: str
    scores: list[float]
    values: dict[str, float]
    trainings: int
    seconds: float

    def value(self, members: Sequence[int]) -> float:
        """v(S) for the coalition of these client indices."""
        return self.values[",".join(str(k) for k in sorted(members))]


def retrain_contributions(train: Train, n: int, *, method: str = "exact",
                          progress: Callable[[int, int], None] | None = None
                          ) -> RetrainResult:
    """Value ``n`` clients by training every coalition ``method`` needs.

    Parameters
    ----------
    train
        ``train(members)`` → the utility of the model that coalition trains (called
        once per coalition; ``()`` for the initial model).
    n
        Clients (at most :data:`~.maths.MAX_EXACT_PLAYERS` for ``"exact"``).
    method
        ``"exact"``: Shapley values over all 2ⁿ coalitions; ``"loo"``: leave-one-out
        from the n + 1 coalitions N and N∖{k}.
    progress
        Called as ``(done, total)`` after each coalition.

    Returns
    -------
    RetrainResult
    """
    owner = "retrain_contributions"
    n = check_int(n, "n", owner, low=1)
    if method not in ("exact", "loo"):
        raise invalid_parameter("method", owner, "'exact' or 'loo'", describe(method))
    if method == "exact" and n > MAX_EXACT_PLAYERS:
        raise invalid_parameter("n", owner, f"at most {MAX_EXACT_PLAYERS} clients for "
                                "'exact' (2^n trainings)", n)
    full = (1 << n) - 1
    masks = (list(range(1 << n)) if method == "exact"
             else [full, *(full & ~(1 << k) for k in range(n))])
    values: dict[int, float] = {}
    t0 = time.perf_counter()
    for done, mask in enumerate(masks, 1):
        members = tuple(k for k in range(n) if mask >> k & 1)
        value = float(train(members))
        if not np.isfinite(value):
            raise ValidationError(f"coalition {list(members)} has utility {value}")
        values[mask] = value
        if progress is not None:
            progress(done, len(masks))
    game = values.__getitem__
    scores = exact_shapley(game, n) if method == "exact" else leave_one_out(game, n)
    named = {",".join(str(k) for k in range(n) if m >> k & 1): v for m, v in values.items()}
    return RetrainResult(method=method, scores=[float(v) for v in scores], values=named,
                         trainings=sum(1 for m in masks if m),
                         seconds=time.perf_counter() - t0)


def coalition_trainer(make_model: Callable[[], Any], parts: Sequence[tuple[Any, Any]],
                      utility: Callable[[NDArray[np.float32]], float], *,
                      names: Sequence[str] | None = None,
                      behaviour: Mapping[str, Callable[[Any], Any]] | None = None) -> Train:
    """Return ``train(members)`` for :func:`retrain_contributions` over FederatedModels.

    Parameters
    ----------
    make_model
        Makes a fresh, unfitted :class:`~islands.hfl.FederatedModel` (the same
        settings and int ``random_state`` for every coalition, any protection).
    parts
        Every client's ``(X, y)``.
    utility
        Scores a model vector (e.g. a
        :class:`~islands.hfl.contribution.ServerValidation`).
    names
        Client names (default ``client-1``, ...), kept in every coalition.
    behaviour
        As :meth:`FederatedModel.fit`'s, for the clients in each coalition.
    """
    names = [f"client-{k + 1}" for k in range(len(parts))] if names is None else list(names)
    if len(names) != len(parts):
        raise ValidationError(f"{len(names)} names for {len(parts)} parts")
    behaviour = dict(behaviour or {})

    def train(members: tuple[int, ...]) -> float:
        model = make_model()
        if not members:
            seed = resolve_seed(model.random_state, "coalition_trainer's make_model")
            return float(utility(model.model.initial_params(seed)))
        chosen = [names[k] for k in members]
        model.fit([parts[k] for k in members], names=chosen,
                  behaviour={c: f for c, f in behaviour.items() if c in chosen})
        return float(utility(model.params_))

    return train
