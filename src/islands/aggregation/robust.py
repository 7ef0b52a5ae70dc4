"""Robust aggregation rules against poisoning clients: median, trimmed mean, Krum, norm bound.

A poisoning client uploads whatever it likes (within the upload checks of
:func:`~islands.aggregation.base.check_update_vector`). The plain mean lets one such
client move the global model anywhere; the rules here bound what f of n clients can do:

=================  =============================  ===============================================
rule               round size needed              what it tolerates
=================  =============================  ===============================================
``median``         n ≥ 2f + 1                     f < n/2 arbitrary updates (each coordinate's
                                                  median lies between benign values)
``trimmed-mean``   ⌊βn⌋ ≥ 1                       up to ⌊βn⌋ arbitrary values per coordinate
``krum``           n ≥ 2f + 3, m ≤ n − f          f arbitrary updates (the selected ones are
                                                  close to n − f − 2 others)
``norm-bound``     n ≥ 1                          any update, whose effect is capped at M/n
=================  =============================  ===============================================

Every rule needs each client's update on its own, so it is a *base* aggregator that shows
the server single updates, like the plain mean: it cannot run under secure aggregation,
additive sharing, CKKS, Paillier or the chaos permutation, which exist so that the
server never sees them (:func:`~islands.aggregation.protect.build_aggregator` refuses
those stacks before anything runs). Client-level DP with local noise composes: each
client clips and noises its own update, and the rule post-processes the noised updates
(module :mod:`islands.aggregation.protect`).

Weights: the published rules are unweighted, and they are kept so. A client's sample
count is its own claim, and a weight would let one client that claims most of the data
carry the round whatever the rule; each rule here treats every survivor's update as one
vote. The server still sends each client its FedAvg weight n_k/n (the clients ignore it).

The maths is in pure functions over an (n, d) array of updates, accumulated in float64;
the aggregators compose them with the server's round (:mod:`islands.aggregation.base`).
A round smaller than a rule needs is refused with a :class:`RoundTooSmallError` naming
the sizes: at the set-up (the federation), at the round's start (its cohort) and when it
finishes (its survivors), never silently replaced by the mean.

References
----------
.. [1] D. Yin, Y. Chen, K. Ramchandran, P. Bartlett. "Byzantine-Robust Distributed
   Learning: Towards Optimal Statistical Rates". ICML 2018 (coordinate-wise median and
   trimmed mean).
.. [2] P. Blanchard, E. M. El Mhamdi, R. Guerraoui, J. Stainer. "Machine Learning with
   Adversaries: Byzantine Tolerant Gradient Descent". NeurIPS 2017 (Krum, Multi-Krum).
.. [3] Z. Sun, P. Kairouz, A. T. Suresh, H. B. McMahan. "Can You Really Backdoor
   Federated Learning?". arXiv:1911.07963, 2019 (norm bounding).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.aggregation.base import (
    PlainClientHalf,
    PlainServerHalf,
    ServerLink,
    StreamingRound,
    check_update_vector,
)
from islands.aggregation.config import (
    MAX_ABS,
    KrumConfig,
    MedianConfig,
    NormBoundConfig,
    TrimmedMeanConfig,
)
from islands.errors import ProtocolError, ValidationError

__all__ = [
    "KrumAggregator",
    "MedianAggregator",
    "NormBoundAggregator",
    "RoundTooSmallError",
    "TrimmedMeanAggregator",
    "clip_to_norm",
    "coordinate_median",
    "krum_scores",
    "multi_krum",
    "norm_bounded_mean",
    "trim_count",
    "trimmed_mean",
]

Vector = NDArray[np.float32]
F64 = NDArray[np.float64]


class RoundTooSmallError(ProtocolError):
    """A round with fewer updates than a robust rule needs; ``needed`` and ``got`` say how many."""

    def __init__(self, message: str, *, party: str, step: str, needed: int, got: int) -> None:
        super().__init__(message, party=party, step=step)
        self.needed, self.got = needed, got


# --------------------------------------------------------------------------- maths
def _stack(updates: ArrayLike, what: str) -> F64:
    arr = np.asarray(updates, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValidationError(f"{what} needs an (n, d) array of n >= 1 updates; got shape "
                              f"{arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValidationError(f"{what}: the updates hold NaN or infinite values")
    return arr


def coordinate_median(updates: ArrayLike) -> F64:
    """Return the coordinate-wise median of n updates (Yin et al. 2018, Option I).

    Parameters
    ----------
    updates : array of shape (n, d)
        One update (or model) per row. For even n a coordinate's median is the mean of
        its two middle values.

    Returns
    -------
    ndarray of shape (d,), float64

    Notes
    -----
    Unweighted. With f < n/2 arbitrary rows, every coordinate of the result lies within
    the range of the benign rows' values of that coordinate.

    References
    ----------
    .. [1] Yin et al., ICML 2018, Definition 1 and Algorithm 1.
    """
    return np.asarray(np.median(_stack(updates, "coordinate_median"), axis=0), np.float64)


def trim_count(n: int, beta: float) -> int:
    """Return k = ⌊βn⌋, the values :func:`trimmed_mean` removes at each end."""
    if not 0 < beta < 0.5:
        raise ValidationError(f"The 'beta' parameter must be a float in (0, 0.5). Got {beta!r} "
                              "instead.")
    return math.floor(beta * n)


def trimmed_mean(updates: ArrayLike, beta: float) -> F64:
    """Return the coordinate-wise β-trimmed mean of n updates (Yin et al. 2018, Option II).

    For every coordinate, the ⌊βn⌋ largest and ⌊βn⌋ smallest values are removed and the
    remaining n − 2⌊βn⌋ are averaged.

    Parameters
    ----------
    updates : array of shape (n, d)
        One update (or model) per row.
    beta : float in (0, 0.5)
        β; it tolerates up to ⌊βn⌋ arbitrary values in every coordinate.

    Returns
    -------
    ndarray of shape (d,), float64

    Raises
    ------
    ValidationError
        If ⌊βn⌋ = 0: nothing would be trimmed, which is the plain mean.

    Notes
    -----
    Unweighted, as published.

    References
    ----------
    .. [1] Yin et al., ICML 2018, Definition 2 and Algorithm 1.
    """
    arr = _stack(updates, "trimmed_mean")
    n = arr.shape[0]
    k = trim_count(n, beta)
    if k == 0:
        raise ValidationError(f"trimmed_mean with beta={beta} of {n} updates trims none "
                              f"(⌊βn⌋ = 0): it needs at least {math.ceil(1 / beta)} updates")
    ordered = np.sort(arr, axis=0)
    return np.asarray(ordered[k:n - k].mean(axis=0), np.float64)


def _pairwise_sq_distances(arr: F64) -> F64:
    # the models w_k share the global model's large part; distances are translation-
    # invariant, so centring first keeps the Gram matrix's cancellation at the scale of
    # the updates' differences instead of the models' norms
    centred = arr - arr.mean(axis=0)
    sq = np.einsum("ij,ij->i", centred, centred)
    dist = sq[:, None] + sq[None, :] - 2.0 * (centred @ centred.T)
    np.fill_diagonal(dist, 0.0)
    return np.asarray(np.maximum(dist, 0.0), np.float64)


def krum_scores(updates: ArrayLike, f: int) -> F64:
    """Return Krum's score of every update (Blanchard et al. 2017).

    s(i) = Σ_{j ∈ N_i} ‖V_i − V_j‖², N_i the n − f − 2 updates closest to V_i (j ≠ i).

    Parameters
    ----------
    updates : array of shape (n, d)
        One update per row; n ≥ 2f + 3.
    f : int
        The Byzantine updates tolerated (≥ 0).

    Returns
    -------
    ndarray of shape (n,), float64

    References
    ----------
    .. [1] Blanchard et al., NeurIPS 2017, §4 (the Krum function).
    """
    arr = _stack(updates, "krum_scores")
    n = arr.shape[0]
    if isinstance(f, bool) or not isinstance(f, (int, np.integer)) or f < 0:
        raise ValidationError(f"The 'f' parameter of krum_scores must be an int >= 0. Got "
                              f"{f!r} instead.")
    if n < 2 * f + 3:
        raise ValidationError(f"Krum with f={f} needs n >= 2f+3 = {2 * f + 3} updates; "
                              f"got {n}")
    dist = _pairwise_sq_distances(arr)
    neighbours = n - int(f) - 2
    # row i, without its own zero distance, smallest n − f − 2 first
    others = np.sort(dist + np.diag(np.full(n, np.inf)), axis=1)[:, :neighbours]
    return np.asarray(others.sum(axis=1), np.float64)


def multi_krum(updates: ArrayLike, f: int, m: int = 1) -> tuple[F64, NDArray[np.int64]]:
    """Return Multi-Krum's aggregate and the rows it selected (Blanchard et al. 2017).

    The m updates with the smallest :func:`krum_scores` are averaged (m = 1 is Krum,
    which returns the selected update itself). Ties go to the earlier row.

    Parameters
    ----------
    updates : array of shape (n, d)
        One update per row; n ≥ 2f + 3.
    f : int
        The Byzantine updates tolerated.
    m : int, default=1
        Updates selected, 1 ≤ m ≤ n − f.

    Returns
    -------
    aggregate : ndarray of shape (d,), float64
        The unweighted mean of the selected rows.
    selected : ndarray of int64
        Their row indices, best score first.

    References
    ----------
    .. [1] Blanchard et al., NeurIPS 2017, §4 (Krum) and §5 (Multi-Krum).
    """
    arr = _stack(updates, "multi_krum")
    n = arr.shape[0]
    scores = krum_scores(arr, f)
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 1 <= m <= n - f:
        raise ValidationError(f"Multi-Krum with f={f} of {n} updates needs m in [1, "
                              f"n - f = {n - f}]; got m={m!r}")
    selected = np.argsort(scores, kind="stable")[: int(m)].astype(np.int64)
    return np.asarray(arr[selected].mean(axis=0), np.float64), selected


def clip_to_norm(updates: ArrayLike, max_norm: float) -> F64:
    """Scale every row Δ to Δ·min(1, M/‖Δ‖₂) (Sun et al. 2019's norm bound).

    Parameters
    ----------
    updates : array of shape (n, d)
        Updates Δ_k = w_k − w_global, one per row.
    max_norm : float
        M > 0.

    Returns
    -------
    ndarray of shape (n, d), float64
        A new array; rows within the bound unchanged.
    """
    arr = _stack(updates, "clip_to_norm")
    if not (isinstance(max_norm, (int, float, np.floating)) and not isinstance(max_norm, bool)
            and math.isfinite(max_norm) and max_norm > 0):
        raise ValidationError(f"The 'max_norm' parameter of clip_to_norm must be a float in "
                              f"(0, inf). Got {max_norm!r} instead.")
    norms = np.linalg.norm(arr, axis=1)
    scale = np.minimum(1.0, float(max_norm) / np.maximum(norms, np.finfo(np.float64).tiny))
    return np.asarray(arr * scale[:, None], np.float64)


def norm_bounded_mean(models: ArrayLike, base: ArrayLike, max_norm: float) -> F64:
    """Return w_global + (1/n)·Σ_k clip(w_k − w_global, M) (Sun et al. 2019).

    Parameters
    ----------
    models : array of shape (n, d)
        The clients' new models w_k.
    base : array of shape (d,)
        The round's global model w_global.
    max_norm : float
        M, the L2 bound of each update.

    Returns
    -------
    ndarray of shape (d,), float64

    Notes
    -----
    Unweighted: each update moves the model by at most M/n, whatever sample count its
    client claims.

    References
    ----------
    .. [1] Sun et al., "Can You Really Backdoor Federated Learning?", 2019, §3 (norm
       thresholding of updates).
    """
    arr = _stack(models, "norm_bounded_mean")
    ref = np.asarray(base, dtype=np.float64)
    if ref.shape != (arr.shape[1],):
        raise ValidationError(f"norm_bounded_mean: the base has shape {ref.shape}, the "
                              f"models {arr.shape[1]} values each")
    clipped = clip_to_norm(arr - ref, max_norm)
    return np.asarray(ref + clipped.mean(axis=0), np.float64)


# --------------------------------------------------------------------------- aggregators
class _RobustRule:
    """What the aggregators share: the halves, the round size check, the upload check."""

    name: str
    max_abs: float
    config: Any

    @property
    def min_clients(self) -> int:
        """The fewest updates a round of this rule aggregates."""
        raise NotImplementedError

    def _needs(self) -> str:
        raise NotImplementedError

    def check_round(self, n: int, *, party: str, step: str, what: str) -> None:
        """Refuse ``n`` updates when the rule needs more (:class:`RoundTooSmallError`)."""
        if n < self.min_clients:
            raise RoundTooSmallError(
                f"{what}: {n} client{'s' if n != 1 else ''}, but the {self.name!r} rule "
                f"needs {self._needs()}, i.e. at least {self.min_clients}; refused (a "
                f"robust rule is never replaced by the plain mean)",
                party=party, step=step, needed=self.min_clients, got=n)

    def combine(self, models: F64, base: Vector | None, server: str) -> F64:
        """Return the rule's aggregate of ``models`` (rows), ``base`` the round's model."""
        raise NotImplementedError

    def client_half(self) -> PlainClientHalf:
        """Make a client half that uploads the model itself (as the plain mean's)."""
        return PlainClientHalf(self.max_abs, self.name)

    def server_half(self) -> _RobustServer:
        """Make a server half that keeps every update of the round, then applies the rule."""
        return _RobustServer(self)

    def __repr__(self) -> str:
        given = {k: v for k, v in self.config.model_dump().items()
                 if not (k == "max_abs" and v == MAX_ABS)}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in given.items())})"


class MedianAggregator(_RobustRule):
    """Coordinate-wise median of the survivors' models (Yin et al. 2018).

    Unweighted (every survivor one vote; the FedAvg weights n_k are ignored). Tolerates
    f < n/2 arbitrary updates: a round needs n ≥ 2f + 1.

    Parameters
    ----------
    f : int, default=1
        The Byzantine clients a round must tolerate; a smaller round is refused.
    max_abs : float, default=1e6
        As :class:`~islands.aggregation.base.MeanAggregator`'s.

    References
    ----------
    .. [1] Yin et al., ICML 2018 (:func:`coordinate_median`).
    """

    name = "median"

    def __init__(self, f: int = 1, *, max_abs: float = MAX_ABS) -> None:
        self.config = MedianConfig.build(None, f=f, max_abs=max_abs)
        self.f: int = int(self.config.f)
        self.max_abs = float(self.config.max_abs)

    @property
    def min_clients(self) -> int:
        """2f + 1."""
        return 2 * self.f + 1

    def _needs(self) -> str:
        return f"n >= 2f+1 with f={self.f}"

    def combine(self, models: F64, base: Vector | None, server: str) -> F64:
        """Return the coordinate-wise median of ``models`` (translation-equivariant)."""
        return coordinate_median(models)


class TrimmedMeanAggregator(_RobustRule):
    """Coordinate-wise β-trimmed mean of the survivors' models (Yin et al. 2018).

    Unweighted. Removes ⌊βn⌋ values at each end of every coordinate, so it tolerates
    up to ⌊βn⌋ arbitrary updates; a round where ⌊βn⌋ = 0 (fewer than ⌈1/β⌉ clients)
    is refused rather than averaged untrimmed.

    Parameters
    ----------
    beta : float in (0, 0.5), default=0.1
        β.
    max_abs : float, default=1e6
        As :class:`~islands.aggregation.base.MeanAggregator`'s.

    References
    ----------
    .. [1] Yin et al., ICML 2018 (:func:`trimmed_mean`).
    """

    name = "trimmed-mean"

    def __init__(self, beta: float = 0.1, *, max_abs: float = MAX_ABS) -> None:
        self.config = TrimmedMeanConfig.build(None, beta=beta, max_abs=max_abs)
        self.beta: float = float(self.config.beta)
        self.max_abs = float(self.config.max_abs)

    @property
    def min_clients(self) -> int:
        """The smallest n with ⌊βn⌋ ≥ 1."""
        n = math.ceil(1 / self.beta)
        return n if math.floor(self.beta * n) >= 1 else n + 1

    def _needs(self) -> str:
        return f"⌊βn⌋ >= 1 with beta={self.beta} to trim anything"

    def combine(self, models: F64, base: Vector | None, server: str) -> F64:
        """Return the β-trimmed mean of ``models``."""
        return trimmed_mean(models, self.beta)


class KrumAggregator(_RobustRule):
    """Krum (m = 1) or Multi-Krum (m > 1) over the survivors' models (Blanchard et al. 2017).

    Unweighted: the m models with the smallest Krum scores are averaged with equal
    weights. Tolerates f arbitrary updates; a round needs n ≥ 2f + 3 and m ≤ n − f.

    Parameters
    ----------
    f : int, default=1
        The Byzantine clients a round must tolerate.
    m : int, default=1
        Models selected and averaged.
    max_abs : float, default=1e6
        As :class:`~islands.aggregation.base.MeanAggregator`'s.

    References
    ----------
    .. [1] Blanchard et al., NeurIPS 2017 (:func:`multi_krum`).
    """

    name = "krum"

    def __init__(self, f: int = 1, m: int = 1, *, max_abs: float = MAX_ABS) -> None:
        self.config = KrumConfig.build(None, f=f, m=m, max_abs=max_abs)
        self.f: int = int(self.config.f)
        self.m: int = int(self.config.m)
        self.max_abs = float(self.config.max_abs)

    @property
    def min_clients(self) -> int:
        """max(2f + 3, m + f)."""
        return max(2 * self.f + 3, self.m + self.f)

    def _needs(self) -> str:
        return f"n >= 2f+3 and m <= n-f with f={self.f}, m={self.m}"

    def combine(self, models: F64, base: Vector | None, server: str) -> F64:
        """Return Multi-Krum's mean of the m best-scored models."""
        return multi_krum(models, self.f, self.m)[0]


class NormBoundAggregator(_RobustRule):
    """Mean of the survivors' updates, each clipped to L2 norm ≤ M (Sun et al. 2019).

    The server clips Δ_k = w_k − w_global against the global model it sent, so a client
    cannot choose the reference. Unweighted: each update moves the model by at most M/n
    (a weight would let a client claiming most samples move it by up to M).

    Parameters
    ----------
    max_norm : float
        M > 0, required (no default: pick it above the benign updates' norms, which depend on the
        model, the learning rate and the local steps).
    max_abs : float, default=1e6
        As :class:`~islands.aggregation.base.MeanAggregator`'s.

    References
    ----------
    .. [1] Sun et al. 2019 (:func:`norm_bounded_mean`).
    """

    name = "norm-bound"

    def __init__(self, max_norm: float | None = None, *, max_abs: float = MAX_ABS) -> None:
        given = {} if max_norm is None else {"max_norm": max_norm}
        self.config = NormBoundConfig.build(None, **given, max_abs=max_abs)
        self.max_norm: float = float(self.config.max_norm)
        self.max_abs = float(self.config.max_abs)

    @property
    def min_clients(self) -> int:
        """1: the bound holds for any round."""
        return 1

    def _needs(self) -> str:
        return "one update"

    def combine(self, models: F64, base: Vector | None, server: str) -> F64:
        """Return the clipped mean around ``base``, the round's global model."""
        if base is None:
            raise ProtocolError(
                f"server {server!r}: norm bounding needs the round's global model, which "
                "the server did not give its aggregator", party=server, step="aggregate")
        return norm_bounded_mean(models, base, self.max_norm)


class _RobustServer(PlainServerHalf):
    def __init__(self, rule: _RobustRule) -> None:
        self.rule = rule
        self.base: Vector | None = None

    def setup(self, link: ServerLink, clients: Sequence[str]) -> list[str]:
        self.rule.check_round(len(clients), party=link.name, step="setup",
                              what="the federation")
        return list(clients)

    def set_global(self, params: Vector | None) -> None:
        """Take the global model the next round starts from (the server role calls it)."""
        self.base = None if params is None else np.array(params, dtype=np.float32)

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> _RobustRound:
        self.rule.check_round(len(clients), party=link.name, step="task",
                              what=f"round {round}")
        base = self.base
        self.base = None  # one round per global model: a stale base is never reused
        return _RobustRound(link.name, round, clients, weights, dim, self.rule, base)

    def reveal(self, payload: Any) -> Vector:
        return np.asarray(payload)


class _RobustRound(StreamingRound):
    def __init__(self, server: str, round: int, clients: Sequence[str],
                 weights: Mapping[str, float], dim: int, rule: _RobustRule,
                 base: Vector | None) -> None:
        super().__init__(server, clients, weights)
        self._round, self._rule, self._base = round, rule, base
        self._rows = np.empty((len(self.participants), dim), dtype=np.float32)
        self._dim = dim

    def add(self, client: str, payload: Any) -> None:
        self.expect(client)
        vec = check_update_vector(payload, self._dim, client, server=self.server,
                                  max_abs=self._rule.max_abs)
        self._rows[len(self.added)] = vec
        self.admit(client)

    def finish(self, survivors: Sequence[str]) -> Vector:
        self.check_survivors(survivors)
        k = len(self.added)
        self._rule.check_round(k, party=self.server, step="aggregate",
                               what=f"round {self._round}'s survivors")
        out = self._rule.combine(self._rows[:k].astype(np.float64), self._base, self.server)
        return out.astype(np.float32)
