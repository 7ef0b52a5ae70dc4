"""The arithmetic of horizontal FL: weighted means, APFL's batch rule and interval rule.

Pure functions on numbers and arrays, no I/O and no torch, so that the strategies, the
server role and the tests share one definition of each formula.

References
----------
.. [1] McMahan et al. "Communication-Efficient Learning of Deep Networks from
   Decentralized Data". AISTATS 2017 (FedAvg: w ← Σ_k (n_k/n)·w_k).
.. [2] Zhang Ze-Hui et al. "Adaptive privacy-preserving federated learning" (APFL),
   Acta Automatica Sinica 2023 (``papers/apfl-adaptive-fl-zhang-2023.zh.txt``):
   eq. 26 (mini-batch sizing), eq. 30 (weighted accuracy), eq. 31 (interval rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Vector
from islands.errors import ValidationError

__all__ = [
    "TauState",
    "apfl_batch_sizes",
    "normalised_weights",
    "round_steps",
    "update_tau",
    "weighted_accuracy",
    "weighted_mean",
]



def normalised_weights(counts: Sequence[float]) -> NDArray[np.float64]:
    """Return ``counts / sum(counts)``: the FedAvg weights n_k/n.

    Raises
    ------
    ValidationError
        If a count is negative or not finite, or they sum to zero.
    """
    w = np.asarray(counts, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValidationError(f"weights must be finite, non-negative numbers; got {counts!r}")
    total = float(w.sum())
    if total <= 0:
        raise ValidationError(f"weights must not all be zero; got {counts!r}")
    return w / total


def weighted_mean(vectors: Sequence[NDArray[np.floating]], weights: Sequence[float]) -> Vector:
    """FedAvg's aggregate Σ_k (w_k / Σw) · x_k, accumulated in float64, returned as float32.

    Parameters
    ----------
    vectors
        One flat parameter vector per client, all the same length.
    weights
        One non-negative weight per vector (e.g. its client's sample count n_k).

    Returns
    -------
    numpy.ndarray
        The weighted mean, float32.
    """
    if len(vectors) != len(weights):
        raise ValidationError(
            f"weighted_mean needs one weight per vector; got {len(vectors)} vectors and "
            f"{len(weights)} weights"
        )
    w = normalised_weights(weights)
    shape = np.shape(vectors[0])
    total = np.zeros(shape, dtype=np.float64)
    for vec, wk in zip(vectors, w, strict=True):
        if np.shape(vec) != shape:
            raise ValidationError(
                f"weighted_mean needs vectors of one shape; got {np.shape(vec)} and {shape}"
            )
        total += wk * np.asarray(vec, dtype=np.float64)
    return total.astype(np.float32)


def apfl_batch_sizes(batch_size: int, counts: Sequence[int],
                     names: Sequence[str] | None = None) -> list[int]:
    """APFL's per-client mini-batch sizes, eq. 26: b_k = int(b_CL · n_k / Σ n).

    With these sizes the clients' batches together hold (about) ``batch_size`` samples,
    drawn in proportion to their data, so one aggregation at τ = 1 is one centralised
    SGD step on the union (eq. 29).

    Parameters
    ----------
    batch_size
        b_CL, the centralised mini-batch size.
    counts
        n_k, the training samples of each client.
    names
        The clients' names, for the message (default: their positions).

    Returns
    -------
    list of int
        b_k for each client, in the order given.

    Raises
    ------
    ValidationError
        If some b_k would be 0 (the client holds too small a share for ``batch_size``).

    Examples
    --------
    >>> apfl_batch_sizes(512, [24000, 18000, 18000])
    [204, 153, 153]
    """
    if batch_size < 1:
        raise ValidationError(f"The 'batch_size' parameter must be >= 1. Got {batch_size}.")
    total = sum(counts)
    if total <= 0 or any(c < 1 for c in counts):
        raise ValidationError(f"every client needs at least one sample; got counts {counts!r}")
    # exact integer arithmetic: int(b · n_k / n) with floats can land one below at ties
    sizes = [batch_size * c // total for c in counts]
    for k, (size, count) in enumerate(zip(sizes, counts, strict=True)):
        if size < 1:
            who = f"client {names[k]!r}" if names is not None else f"client {k}"
            raise ValidationError(
                f"{who} holds {count} of {total} samples, so its APFL mini-batch "
                f"int({batch_size}·{count}/{total}) is 0; raise 'batch_size' or turn the "
                "batch rule off"
            )
    return sizes


def weighted_accuracy(accuracies: Sequence[float], counts: Sequence[float]) -> float:
    """Return the server's view of accuracy, APFL eq. 30: acc = Σ_k (n_k/n) · acc_k."""
    w = normalised_weights(counts)
    acc = np.asarray(accuracies, dtype=np.float64)
    if acc.shape != w.shape:
        raise ValidationError(
            f"weighted_accuracy needs one accuracy per count; got {acc.size} and {w.size}"
        )
    return float(acc @ w)


@dataclass(frozen=True)
class TauState:
    """The adaptive interval's state (APFL §3.3).

    Attributes
    ----------
    tau
        Local mini-batch steps between two aggregations.
    best
        The best weighted accuracy seen so far (``-inf`` before the first).
    stale
        Evaluations in a row that did not beat ``best``.
    """

    tau: int
    best: float = -math.inf
    stale: int = 0


def update_tau(state: TauState, accuracy: float, *, phi: int, minimum: int = 1) -> TauState:
    """Apply APFL's interval rule (eq. 31) after one evaluation.

    A new best resets the count of stale evaluations. After ``phi`` evaluations in a row
    without a new best, τ ← max(τ − 1, minimum) and the count starts again (as a
    learning-rate scheduler on a plateau does, which the paper cites as its model).

    Parameters
    ----------
    state
        The state before this evaluation.
    accuracy
        The weighted accuracy of this evaluation (eq. 30).
    phi
        Φ, evaluations without improvement that trigger a decrease (paper: 5).
    minimum
        The smallest τ (paper: 1).

    Returns
    -------
    TauState
        The state after it.
    """
    if phi < 1:
        raise ValidationError(f"The 'phi' parameter must be an int >= 1. Got {phi}.")
    if accuracy > state.best:
        return TauState(tau=state.tau, best=accuracy, stale=0)
    stale = state.stale + 1
    if stale >= phi:
        return TauState(tau=max(state.tau - 1, minimum), best=state.best, stale=0)
    return TauState(tau=state.tau, best=state.best, stale=stale)


def round_steps(tau: int, step: int, steps_per_epoch: int) -> int:
    """Local steps of the next round: τ, cut short at the end of the epoch.

    Every epoch ends with an aggregation, so an epoch of S steps has ⌈S/τ⌉ rounds at a
    fixed τ (the APFL paper's counts: S = 105, τ = 4 → 27 rounds an epoch, 1350 in 50).
    """
    if not 0 <= step < steps_per_epoch:
        raise ValidationError(f"step {step} is outside the epoch of {steps_per_epoch} steps")
    return min(tau, steps_per_epoch - step)
