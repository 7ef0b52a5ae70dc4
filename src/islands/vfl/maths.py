"""The mathematics of vertical linear and logistic regression, with no I/O.

Parties ``A_1 … A_k`` hold features X_k (with weights θ_k); party ``B`` holds features
X_B, the labels y and the intercept. For a mini-batch of b aligned rows, with partial
scores u_k = X_k θ_k and u_B = X_B θ_B + θ_0, both models of Yang et al. [1]_ (Table 1)
reduce to one residual

    e_i = Σ_k u_{k,i} + v_i,   v_i = u_{B,i} − y_i            (linear; d_i of Table 1)
                               v_i = u_{B,i} − 2·y_i, y = ±1  (logistic, Taylor loss)

and the objective, gradient and loss are

    L = c0 + (c2/b)·Σ_i e_i² + (λ/2)·(Σ_k ‖θ_k‖² + ‖θ_B‖²)
    ∂L/∂θ_k = (c1/b)·X_kᵀ e + λ·θ_k,   ∂L/∂θ_0 = (c1/b)·Σ_i e_i (no penalty)

with (c0, c1, c2) = (0, 2, 1) for least squares, L = (1/b)Σ(z_i − y_i)² + penalty (Table 1's
sum, divided by b so that the learning rate does not depend on the batch size), and
(log 2 − 1/2, 1/4, 1/8) for the second-order Taylor expansion of the logistic loss at
z = 0, log(1 + e^(−yz)) ≈ log 2 − yz/2 + z²/8 [2]_, which equals
log 2 − 1/2 + (z − 2y)²/8 because y² = 1. So the loss of both models is a sum of squared
residuals, which the parties can compute under additive homomorphic encryption.

Fixed point. Under Paillier every value is an integer modulo n. Features are rounded to
multiples of 2^-``feature_bits`` (default 16: an error of at most 7.6e-6 per entry) and
partial scores and residuals to multiples of 2^-``score_bits`` (default 32). The
encrypted gradient sum G = Σ_i ẽ_i·x̃_ij is then exact in integers, at scale
2^(score_bits + feature_bits), and the encrypted protocol computes exactly
:func:`fixed_point_step`: bit for bit the same iterates as this module's centralised
reference on the same rounded data (tests check both this and the distance to float
gradient descent). Magnitudes are bounded so that no sum can approach n/2 (2048-bit n):
|x| < 2^30, |score| < 2^28, b < 2^31.

``sigmoid="poly5"`` (secret sharing only) replaces the Taylor loss by the degree-5
least-squares approximation s(z) = ½ + c1·z + c3·z³ + c5·z⁵ of σ on [−8, 8] [3]_
(:data:`POLY5`): the residual is r = s(z) − y01 with y01 = (y + 1)/2, the gradient
(1/b)·Xᵀr + λθ and the loss its antiderivative ℓ(z) = log 2 + (½ − y01)·z + c1z²/2 +
c3z⁴/4 + c5z⁶/6, so that the loss falls along the gradient. Partial scores are rounded to
2^-16 and bounded by 2^5 per party; the integers r̃ = 2^108·r and 12·2^124·(ℓ − log 2)
are exact (:func:`fixed_point_step_poly`), and :func:`poly5_bounds` keeps the gradient sums
and the loss inside the 189-bit ring of :mod:`islands.vfl.ss`.

References
----------
.. [1] Q. Yang, Y. Liu, T. Chen, Y. Tong. "Federated Machine Learning: Concept and
   Applications." ACM TIST 10(2), 2019, §2.4.2, Tables 1–2.
.. [2] S. Hardy, W. Henecka, H. Ivey-Law, R. Nock, G. Patrini, G. Smith, B. Thorne.
   "Private federated learning on vertically partitioned data via entity resolution and
   additively homomorphic encryption." arXiv:1711.10677, 2017, §3.
.. [3] A. Kim, Y. Song, M. Kim, K. Lee, J. H. Cheon. "Logistic regression model training
   based on the approximate homomorphic encryption." BMC Medical Genomics 11(4):83, 2018
   (least-squares polynomials of degree 3, 5 and 7 for σ on [−8, 8]).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.arrays import Array, IntArray
from islands.crypto.fixedpoint import quantize
from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_array

__all__ = [
    "LINEAR",
    "LOGISTIC",
    "MAX_ABS_FEATURE",
    "MAX_ABS_SCORE",
    "POLY5",
    "POLY5_COEF_BITS",
    "POLY5_LOSS_SCALE",
    "POLY5_MAX_SCORE",
    "POLY5_RESIDUAL_SCALE",
    "POLY5_SCORE_BITS",
    "Objective",
    "Precision",
    "ValueBounds",
    "batch_plan",
    "centralised_gd",
    "centralised_gd_poly",
    "check_batch_rows",
    "encode",
    "encode_features",
    "fixed_point_gd",
    "fixed_point_gd_poly",
    "fixed_point_step_poly",
    "min_batch_rows",
    "poly5",
    "poly5_bounds",
    "poly5_decode_loss",
    "poly5_gradient_from_sum",
    "poly5_loss",
    "poly5_loss_sum",
    "poly5_penalty_units",
    "poly5_residual",
    "poly5_scores",
    "sigmoid",
    "value_bounds",
]


MAX_ABS_FEATURE = float(2**30)
"""Largest feature magnitude accepted (standardise the data first)."""

MAX_ABS_SCORE = float(2**28)
"""Largest partial score |x·θ| accepted; beyond it training has diverged."""


@dataclass(frozen=True)
class Objective:
    """One model's constants in L = c0 + (c2/b)·Σe² + penalty and ∂L/∂z = c1·e.

    Attributes
    ----------
    name
        ``"linear"`` or ``"logistic"``.
    c0, c1, c2
        The constants of the module docstring.
    label_factor
        v = u_B − label_factor·y: 1 for least squares, 2 for the Taylor loss.
    """

    name: str
    c0: float
    c1: float
    c2: float
    label_factor: float


LINEAR = Objective("linear", 0.0, 2.0, 1.0, 1.0)
LOGISTIC = Objective("logistic", math.log(2.0) - 0.5, 0.25, 0.125, 2.0)


@dataclass(frozen=True)
class Precision:
    """Fixed-point fractional bits for features and for scores/residuals."""

    feature_bits: int = 16
    score_bits: int = 32

    def __post_init__(self) -> None:
        # features: |x| < 2^30 so numerators stay exact in float64 (< 2^52); scores:
        # |v| < 2^30 so numerators fit in int64 (< 2^62)
        for name, value, high in (("feature_bits", self.feature_bits, 22),
                                  ("score_bits", self.score_bits, 32)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ValidationError(f"Precision: {name} must be an int in [1, {high}]; "
                                      f"got {value!r}")

    @property
    def gradient_scale(self) -> int:
        """2^(score_bits + feature_bits): the scale of the integer gradient sum G."""
        return 1 << (self.score_bits + self.feature_bits)

    @property
    def loss_scale(self) -> int:
        """2^(2·score_bits): the scale of the integer Σẽ²."""
        return 1 << (2 * self.score_bits)


@dataclass(frozen=True)
class ValueBounds:
    """Bit bounds of the integers the key owner decrypts, from the plan alone.

    Attributes
    ----------
    gradient_bits
        |G_j| < 2^gradient_bits for every gradient sum G_j = Σ_i ẽ_i·x̃_ij.
    penalty_bits
        A party's penalty (:func:`penalty_units`) must stay below 2^penalty_bits.
    loss_bits
        0 ≤ Σ_i ẽ_i² + penalties < 2^loss_bits.
    """

    gradient_bits: int
    penalty_bits: int
    loss_bits: int


def value_bounds(precision: Precision, batch_size: int, passive: int) -> ValueBounds:
    """Return the :class:`ValueBounds` of a plan with ``passive`` passive parties.

    A batch holds fewer than 2·``batch_size`` rows (:func:`batch_plan` folds a short last
    batch into the one before), |ũ_k| ≤ 2^(28+s), |ṽ| ≤ 2^(30+s) (:func:`encode`'s
    bounds, s = score_bits), so |ẽ| ≤ (k+4)·2^(28+s), and |x̃| ≤ 2^(30+f) (f =
    feature_bits). A penalty above Σẽ²'s own bound means λ‖θ‖² beyond 2^60: a
    diverged run.
    """
    rows = (2 * batch_size - 1).bit_length()
    e_bits = 28 + precision.score_bits + (passive + 4).bit_length()
    square = rows + 2 * e_bits
    return ValueBounds(gradient_bits=rows + e_bits + 31 + precision.feature_bits,
                       penalty_bits=square, loss_bits=square + (passive + 2).bit_length())


def encode(values: ArrayLike, frac_bits: int, bound: float, name: str, owner: str) -> IntArray:
    """Round ``values`` to multiples of 2^-frac_bits and return the int64 numerators.

    Raises
    ------
    ValidationError
        Naming ``name`` and ``owner`` when a value is NaN, infinite or above ``bound``
        in magnitude.
    """
    arr = np.asarray(values, dtype=np.float64)
    if bound * 2.0**frac_bits > 2.0**62:
        raise ValidationError(f"{owner}: {name} at {frac_bits} fractional bits with bound "
                              f"{bound:.3g} would overflow int64")

    def out_of_range(_index: int, value: float) -> ValidationError:
        if not math.isfinite(value):
            return ValidationError(f"{owner}: {name} holds NaN or infinite values")
        return ValidationError(
            f"{owner}: {name} holds a value of magnitude {abs(value):.3g}, "
            f"above the fixed-point bound {bound:.3g}; standardise the features or "
            "lower the learning rate (training may have diverged)")

    return quantize(arr, frac_bits, bound=bound, fail=out_of_range)


def encode_features(X: ArrayLike, precision: Precision, *, intercept: bool,
                    name: str = "X", owner: str = "encode_features") -> IntArray:
    """Encode a feature block; with ``intercept`` append the all-ones column (2^feature_bits).

    Raises
    ------
    ValidationError
        Naming ``name`` and ``owner`` for a block that is not 2-D with a row, or holds a
        value that :func:`encode` refuses.
    """
    x = check_array(X, name, owner, max_abs=MAX_ABS_FEATURE,
                    why="features are encoded in fixed point below 2^30")
    enc = encode(x, precision.feature_bits, MAX_ABS_FEATURE, name, owner)
    if intercept:
        ones = np.full((x.shape[0], 1), 1 << precision.feature_bits, dtype=np.int64)
        enc = np.hstack([enc, ones])
    return enc


def sigmoid(z: ArrayLike) -> Array:
    """Return the logistic function of ``z``, computed without overflow."""
    z = np.asarray(z, dtype=np.float64)
    out: Array = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def min_batch_rows(passive_features: Sequence[int], active_features: int) -> int:
    """Return the fewest rows a mini-batch may hold: one more than any party can solve for.

    After removing its pad, passive party A_k holds G_k = X_kᵀe for the batch residual
    e (b unknowns): p_k linear equations, so for b ≤ p_k it solves for e, and in the
    first batch, where every weight is zero, e = −c·y is the labels. B holds X_Bᵀe and
    Σ_i e_i (the intercept) with e = Σ_k u_k + v and v its own: p_B + 1 equations in the
    b unknowns Σ_k u_k, solved for b ≤ p_B + 1. So no batch may hold fewer than
    max(p_1, …, p_k, p_B + 1) + 1 rows. That stops the exact solve from one batch only:
    see ``docs/vfl.md`` for what a party still learns.
    """
    return max([*(int(p) for p in passive_features), int(active_features) + 1]) + 1


def batch_plan(n_rows: int, batch_size: int, epoch: int, seed: int,
               min_rows: int = 1) -> list[IntArray]:
    """Return the mini-batches of one epoch: a permutation of the rows cut into batches.

    Every party derives the same plan from the public ``seed`` the coordinator sends; the
    order of rows is not secret (all parties know the aligned rows). ``seed`` 0 … and
    epoch e give ``numpy.random.default_rng([seed, e])``. A last batch of fewer than
    ``min_rows`` rows joins the one before (:func:`min_batch_rows`; a party that drops
    some of its IDs before alignment would otherwise choose its size).
    """
    order = np.random.default_rng([seed, epoch]).permutation(n_rows).astype(np.int64)
    batches = [order[s: s + batch_size] for s in range(0, n_rows, batch_size)]
    if len(batches) > 1 and batches[-1].size < min_rows:
        batches[-2:] = [np.concatenate(batches[-2:])]
    return batches


def check_batch_rows(batch_size: int, features: Mapping[str, int], active: str, owner: str,
                     rows: int | None = None) -> int:
    """Refuse a batch size, or an aligned row count, that lets a party solve a batch.

    Parameters
    ----------
    batch_size
        The plan's rows per mini-batch.
    features
        Feature count of every data party named (B's without the intercept); a party
        that knows only its own count checks that alone.
    active
        B's name (B's equations include the intercept's).
    owner
        Who checks (named in the error).
    rows
        The aligned rows, when known.

    Returns
    -------
    int
        :func:`min_batch_rows` over the parties named: the fold threshold for
        :func:`batch_plan` once every party is named.

    Raises
    ------
    ValidationError
        Naming ``batch_size`` (or the rows), the party whose equations would solve a
        batch, its feature count and the minimum.
    """
    # equations per batch of every party named: p_k for A_k, p_B + 1 for B
    equations = {k: int(v) + (k == active) for k, v in features.items()}
    name, count = max(equations.items(), key=lambda item: item[1])
    need = count + 1
    what = (f"party {name!r} holds {count - 1} features and the intercept, so from a batch "
            f"of at most {count} rows it solves for the passive parties' scores"
            if name == active else
            f"passive party {name!r} holds {count} features, so from a batch of at most "
            f"{count} rows it solves for the residual (the labels, in the first batch)")
    if batch_size < need:
        raise invalid_parameter("batch_size", owner, f"an int >= {need} ({what})", batch_size)
    if rows is not None and rows < need:
        raise ValidationError(f"{owner}: the {rows} aligned rows make a single batch, but "
                              f"every batch needs more than {need - 1} rows ({what})")
    return need


def settled(epoch_losses: Sequence[float], tol: float | None) -> bool:
    """Whether the last epoch's mean loss moved by at most ``tol`` (relative) from the one before.

    The coordinator's stopping rule (``tol`` None: never).
    """
    if tol is None or len(epoch_losses) < 2:
        return False
    prev, cur = epoch_losses[-2], epoch_losses[-1]
    return abs(prev - cur) <= tol * abs(prev)


def penalty_units(theta: Array, lam: float, batch: int, objective: Objective,
                  precision: Precision) -> int:
    """Integer to add to Σẽ² so that the decoded loss includes (λ/2)‖θ‖².

    The coordinator decodes L = c0 + c2·T/(b·2^(2·score_bits)), so a party adds
    round(b·λ‖θ‖²/(2·c2)·2^(2·score_bits)).
    """
    value = batch * lam * float(theta @ theta) / (2.0 * objective.c2)
    return round(value * precision.loss_scale)


def decode_loss(total: int, batch: int, objective: Objective, precision: Precision) -> float:
    """L from the integer T = Σẽ² + penalties (the coordinator's decryption)."""
    return objective.c0 + objective.c2 * total / (batch * precision.loss_scale)


def gradient_from_sum(g_sum: IntArray | list[int], theta: Array, lam: float, batch: int,
                      objective: Objective, precision: Precision,
                      intercept: bool = False) -> Array:
    """∂L/∂θ from the unmasked integer sums G_j = Σ_i ẽ_i·x̃_ij.

    With ``intercept`` the last coordinate is θ_0 (its column is all ones and it is not
    penalised).
    """
    g = np.asarray([float(v) for v in g_sum], dtype=np.float64)
    grad: Array = objective.c1 * g / (batch * precision.gradient_scale) + lam * theta
    if intercept:
        grad[-1] -= lam * theta[-1]
    return grad


def fixed_point_step(xs: list[IntArray], thetas: list[Array], y: Array, lam: float,
                     objective: Objective, precision: Precision) -> tuple[list[Array], float]:
    """One gradient step's gradients and loss, computed as the encrypted protocol does.

    Parameters
    ----------
    xs
        Encoded feature blocks of the batch, ``[x̃_1, …, x̃_k, x̃_B]``; the last is B's,
        whose last column is the intercept's (all 2^feature_bits).
    thetas
        The matching weights (B's last entry is θ_0).
    y
        Labels of the batch (±1 for the logistic model).

    Returns
    -------
    (gradients, loss)
    """
    f_bits = precision.feature_bits
    scale = float(2**f_bits)
    scores = [(x.astype(np.float64) / scale) @ th for x, th in zip(xs, thetas, strict=True)]
    u = [encode(s, precision.score_bits, MAX_ABS_SCORE, "scores", "fixed_point_step")
         for s in scores[:-1]]
    v = encode(scores[-1] - objective.label_factor * y, precision.score_bits,
               MAX_ABS_SCORE * 4, "scores", "fixed_point_step")
    e = sum((x.astype(object) for x in u), start=v.astype(object))  # exact Python ints
    batch = int(y.size)
    grads = []
    for i, (x, th) in enumerate(zip(xs, thetas, strict=True)):
        sums = [int(s) for s in x.astype(object).T @ e]
        grads.append(gradient_from_sum(sums, th, lam, batch, objective, precision,
                                       intercept=i == len(xs) - 1))
    total = int(e @ e)
    for i, th in enumerate(thetas):
        weights = th[:-1] if i == len(thetas) - 1 else th
        total += penalty_units(weights, lam, batch, objective, precision)
    return grads, decode_loss(total, batch, objective, precision)


def fixed_point_gd(blocks: list[Array], y: Array, *, objective: Objective, lam: float,
                   learning_rate: float, epochs: int, batch_size: int, seed: int,
                   precision: Precision) -> tuple[list[Array], list[float]]:
    """Centralised mini-batch gradient descent with the protocol's exact arithmetic.

    ``blocks`` are the raw feature blocks ``[X_1, …, X_k, X_B]`` (no intercept column).
    Returns the final weights (B's with θ_0 last) and the loss of every batch.
    """
    n = int(y.size)
    xs = [encode_features(b, precision, intercept=i == len(blocks) - 1, owner="fixed_point_gd")
          for i, b in enumerate(blocks)]
    thetas = [np.zeros(x.shape[1]) for x in xs]
    min_rows = min_batch_rows([b.shape[1] for b in blocks[:-1]], blocks[-1].shape[1])
    losses = []
    for epoch in range(epochs):
        for rows in batch_plan(n, batch_size, epoch, seed, min_rows):
            grads, loss = fixed_point_step([x[rows] for x in xs], thetas, y[rows], lam,
                                           objective, precision)
            losses.append(loss)
            thetas = [th - learning_rate * g for th, g in zip(thetas, grads, strict=True)]
    return thetas, losses


def centralised_gd(blocks: list[Array], y: Array, *, objective: Objective, lam: float,
                   learning_rate: float, epochs: int, batch_size: int,
                   seed: int) -> tuple[list[Array], list[float]]:
    """Run the same mini-batch gradient descent in float64 on the joined data, unrounded."""
    n = int(y.size)
    blocks = [np.asarray(b, dtype=np.float64) for b in blocks]
    min_rows = min_batch_rows([b.shape[1] for b in blocks[:-1]], blocks[-1].shape[1])
    blocks[-1] = np.hstack([blocks[-1], np.ones((n, 1))])
    thetas = [np.zeros(b.shape[1]) for b in blocks]
    losses = []
    for epoch in range(epochs):
        for rows in batch_plan(n, batch_size, epoch, seed, min_rows):
            z = sum(b[rows] @ th for b, th in zip(blocks, thetas, strict=True))
            e = z - objective.label_factor * y[rows]
            b_n = rows.size
            penalty = sum(float(th @ th) for th in thetas[:-1]) + float(
                thetas[-1][:-1] @ thetas[-1][:-1])
            losses.append(objective.c0 + objective.c2 * float(e @ e) / b_n + lam / 2 * penalty)
            new = []
            for i, (b, th) in enumerate(zip(blocks, thetas, strict=True)):
                g = objective.c1 * (b[rows].T @ e) / b_n + lam * th
                if i == len(blocks) - 1:
                    g[-1] -= lam * th[-1]
                new.append(th - learning_rate * g)
            thetas = new
    return thetas, losses


# ------------------------------------------------------------------- sigmoid="poly5"

POLY5_COEF_BITS = 28
"""Fractional bits of the poly5 coefficients: s(z) = ½ + Σ_m (K_m/2^28)·z^m."""

POLY5 = (49599933, -1095985, 9289)
"""(K1, K3, K5): c1 = 0.184774, c3 = −0.004083, c5 = 3.46e−5 rounded to multiples of 2^-28.

The odd least-squares fit of σ(z) − ½ by c1·z + c3·z³ + c5·z⁵ at the 4000 Chebyshev
nodes 8·cos(π(k + ½)/4000) of [−8, 8] (``numpy.linalg.lstsq``; a test recomputes it). Its
largest error on [−8, 8] is 0.055. Stored as integers so that every party computes the
same polynomial on any platform. The leading coefficient is positive: beyond the fitted
interval s(z) − y01 keeps the sign of z − y, so gradient descent pulls z back, where a
cubic fit or an unclamped degree-7 fit (negative leading term) diverges.
"""

POLY5_SCORE_BITS = 16
"""Fractional bits of the partial scores under poly5 (``score_bits`` applies to the Taylor loss)."""

POLY5_MAX_SCORE = 32.0
"""|x·θ| < 2^5 for every party's partial score under poly5: the powers z⁵, z⁶ stay in the ring."""

POLY5_RESIDUAL_SCALE = 1 << (POLY5_COEF_BITS + 5 * POLY5_SCORE_BITS)
"""2^108: the scale of the integer residual r̃ (coefficients at 2^28 times z⁵ at 2^80)."""

POLY5_LOSS_SCALE = 12 << (POLY5_COEF_BITS + 6 * POLY5_SCORE_BITS)
"""12·2^124: the scale of the integer loss (12 clears the antiderivative's ½, ¼ and ⅙)."""


def poly5(z: ArrayLike) -> Array:
    """Return s(z) = ½ + c1·z + c3·z³ + c5·z⁵ with the coefficients of :data:`POLY5`."""
    z = np.asarray(z, dtype=np.float64)
    k1, k3, k5 = (k / 2.0**POLY5_COEF_BITS for k in POLY5)
    out: Array = 0.5 + z * (k1 + z * z * (k3 + z * z * k5))
    return out


def poly5_loss(z: ArrayLike, y: ArrayLike) -> Array:
    """Return ℓ(z) = log 2 + (½ − y01)·z + c1z²/2 + c3z⁴/4 + c5z⁶/6 for labels y = ±1.

    ℓ' = s(z) − y01 with y01 = (y + 1)/2: the loss whose gradient poly5 descends, equal to
    log(1 + e^(−yz)) at z = 0 with the same slope.
    """
    z = np.asarray(z, dtype=np.float64)
    k1, k3, k5 = (k / 2.0**POLY5_COEF_BITS for k in POLY5)
    z2 = z * z
    out: Array = (math.log(2.0) - 0.5 * np.asarray(y, dtype=np.float64) * z
                  + z2 * (k1 / 2 + z2 * (k3 / 4 + z2 * k5 / 6)))
    return out


def poly5_scores(values: ArrayLike, owner: str) -> IntArray:
    """Encode a party's partial scores for poly5: numerators at 2^-16, refused from 2^5 on.

    Raises
    ------
    ValidationError
        Naming ``owner`` and the limit when |x·θ| ≥ 2^5 (or a score is not finite).
    """
    arr = np.asarray(values, dtype=np.float64)

    def beyond(_index: int, value: float) -> ValidationError:
        if not math.isfinite(value):
            return ValidationError(f"{owner}: the partial scores hold NaN or infinite values "
                                   "(training diverged); lower learning_rate")
        return ValidationError(
            f"{owner}: a partial score |x·θ| = {abs(value):.3g} reaches sigmoid='poly5''s "
            f"limit 2^5 = {POLY5_MAX_SCORE:g} per party (the powers z⁵ and z⁶ must stay "
            "inside the ring); lower learning_rate, raise lam or standardise the features")

    return quantize(arr, POLY5_SCORE_BITS, bound=POLY5_MAX_SCORE, inclusive=False,
                    fail=beyond)


def poly5_residual(z: NDArray[np.object_], y: Array) -> NDArray[np.object_]:
    """Return r̃ = 2^108·(s(z) − y01) exactly, from the integer sum z̃ = 2^16·z (Python ints).

    Each term at the common scale: K1·z̃·2^64 + K3·z̃³·2^32 + K5·z̃⁵ + (½ − y01)·2^108,
    with (½ − y01) = −y/2.
    """
    k1, k3, k5 = POLY5
    f = POLY5_SCORE_BITS
    z3 = z * z * z
    labels = np.asarray([int(v) for v in y], dtype=object)
    out: NDArray[np.object_] = (k1 * z * (1 << 4 * f) + k3 * z3 * (1 << 2 * f)
                                + k5 * z3 * z * z - labels * (POLY5_RESIDUAL_SCALE // 2))
    return out


def poly5_loss_sum(z: NDArray[np.object_], y: Array) -> int:
    """Return Σ_i 12·2^124·(ℓ(z_i) − log 2) exactly, from the integers z̃ = 2^16·z.

    Per row 6K1·z̃²·2^64 + 3K3·z̃⁴·2^32 + 2K5·z̃⁶ − 6·y·z̃·2^108.
    """
    k1, k3, k5 = POLY5
    f = POLY5_SCORE_BITS
    z2 = z * z
    labels = np.asarray([int(v) for v in y], dtype=object)
    terms = (6 * k1 * z2 * (1 << 4 * f) + 3 * k3 * z2 * z2 * (1 << 2 * f)
             + 2 * k5 * z2 * z2 * z2 - 6 * labels * z * POLY5_RESIDUAL_SCALE)
    return int(sum(terms.tolist()))


def poly5_bounds(precision: Precision, batch_size: int, passive: int) -> ValueBounds:
    """Return the :class:`ValueBounds` of a poly5 plan with ``passive`` passive parties.

    Every party's |ũ_j| ≤ 2^21 (:func:`poly5_scores`), so |z̃| ≤ m·2^21 for m = passive
    + 1 data parties; then |r̃| ≤ K1·|z̃|·2^64 + |K3|·|z̃|³·2^32 + K5·|z̃|⁵ + 2^107, the
    gradient sums |G| ≤ rows·2^(30+f)·|r̃| (rows < 2·batch_size, |x̃| ≤ 2^(30+f)), and the
    loss |T| ≤ rows·(6K1·z̃²·2^64 + 3|K3|·z̃⁴·2^32 + 2K5·z̃⁶ + 6·|z̃|·2^108). For two data
    parties, f = 16 and batches of 256 the gradient needs 179 bits (the ring holds 187).
    """
    k1, k3, k5 = (abs(k) for k in POLY5)
    f = POLY5_SCORE_BITS
    z = (passive + 1) << (5 + f)
    rows = 2 * batch_size - 1
    residual = k1 * z * (1 << 4 * f) + k3 * z**3 * (1 << 2 * f) + k5 * z**5 \
        + POLY5_RESIDUAL_SCALE // 2
    gradient = rows * (1 << (30 + precision.feature_bits)) * residual
    loss = rows * (6 * k1 * z**2 * (1 << 4 * f) + 3 * k3 * z**4 * (1 << 2 * f)
                   + 2 * k5 * z**6 + 6 * z * POLY5_RESIDUAL_SCALE)
    bits = loss.bit_length()
    return ValueBounds(gradient_bits=gradient.bit_length(), penalty_bits=bits,
                       loss_bits=bits + (passive + 2).bit_length())


def poly5_penalty_units(theta: Array, lam: float, batch: int) -> int:
    """Integer to add to the poly5 loss sum so that the decoded loss includes (λ/2)‖θ‖²."""
    return round(batch * lam * float(theta @ theta) / 2.0 * POLY5_LOSS_SCALE)


def poly5_decode_loss(total: int, batch: int) -> float:
    """L = log 2 + T/(b·12·2^124) from the integer T (loss sums and penalties)."""
    return math.log(2.0) + total / (batch * POLY5_LOSS_SCALE)


def poly5_gradient_from_sum(g_sum: IntArray | list[int], theta: Array, lam: float,
                            batch: int, precision: Precision,
                            intercept: bool = False) -> Array:
    """∂L/∂θ = (1/b)·Xᵀ(s(z) − y01) + λθ from the integer sums G_j = Σ_i r̃_i·x̃_ij."""
    g = np.asarray([float(v) for v in g_sum], dtype=np.float64)
    scale = float(batch) * float(POLY5_RESIDUAL_SCALE << precision.feature_bits)
    grad: Array = g / scale + lam * theta
    if intercept:
        grad[-1] -= lam * theta[-1]
    return grad


def fixed_point_step_poly(xs: list[IntArray], thetas: list[Array], y: Array, lam: float,
                          precision: Precision) -> tuple[list[Array], float]:
    """One poly5 gradient step's gradients and loss, in the integers the SS flow computes.

    As :func:`fixed_point_step`: ``xs`` the encoded blocks ``[x̃_1, …, x̃_k, x̃_B]`` (B's
    with the intercept column), ``thetas`` the weights, ``y`` the labels (±1).
    """
    scale = float(2**precision.feature_bits)
    owner = "fixed_point_step_poly"
    u = [poly5_scores((x.astype(np.float64) / scale) @ th, owner)
         for x, th in zip(xs, thetas, strict=True)]
    z = sum((v.astype(object) for v in u[1:]), start=u[0].astype(object))
    r = poly5_residual(z, y)
    batch = int(y.size)
    grads = []
    for i, (x, th) in enumerate(zip(xs, thetas, strict=True)):
        sums = [int(s) for s in x.astype(object).T @ r]
        grads.append(poly5_gradient_from_sum(sums, th, lam, batch, precision,
                                             intercept=i == len(xs) - 1))
    total = poly5_loss_sum(z, y)
    for i, th in enumerate(thetas):
        total += poly5_penalty_units(th[:-1] if i == len(thetas) - 1 else th, lam, batch)
    return grads, poly5_decode_loss(total, batch)


def fixed_point_gd_poly(blocks: list[Array], y: Array, *, lam: float, learning_rate: float,
                        epochs: int, batch_size: int, seed: int,
                        precision: Precision) -> tuple[list[Array], list[float]]:
    """Centralised mini-batch gradient descent on the poly5 loss with the SS flow's integers.

    As :func:`fixed_point_gd` (logistic, labels ±1), with :func:`fixed_point_step_poly`.
    """
    n = int(y.size)
    xs = [encode_features(b, precision, intercept=i == len(blocks) - 1,
                          owner="fixed_point_gd_poly") for i, b in enumerate(blocks)]
    thetas = [np.zeros(x.shape[1]) for x in xs]
    min_rows = min_batch_rows([b.shape[1] for b in blocks[:-1]], blocks[-1].shape[1])
    losses = []
    for epoch in range(epochs):
        for rows in batch_plan(n, batch_size, epoch, seed, min_rows):
            grads, loss = fixed_point_step_poly([x[rows] for x in xs], thetas, y[rows], lam,
                                                precision)
            losses.append(loss)
            thetas = [th - learning_rate * g for th, g in zip(thetas, grads, strict=True)]
    return thetas, losses


def centralised_gd_poly(blocks: list[Array], y: Array, *, lam: float, learning_rate: float,
                        epochs: int, batch_size: int,
                        seed: int) -> tuple[list[Array], list[float]]:
    """Run the same poly5 mini-batch gradient descent in float64 on the joined data, unrounded."""
    n = int(y.size)
    blocks = [np.asarray(b, dtype=np.float64) for b in blocks]
    min_rows = min_batch_rows([b.shape[1] for b in blocks[:-1]], blocks[-1].shape[1])
    blocks[-1] = np.hstack([blocks[-1], np.ones((n, 1))])
    thetas = [np.zeros(b.shape[1]) for b in blocks]
    y01 = (np.asarray(y, dtype=np.float64) + 1.0) / 2.0
    losses = []
    for epoch in range(epochs):
        for rows in batch_plan(n, batch_size, epoch, seed, min_rows):
            z = sum(b[rows] @ th for b, th in zip(blocks, thetas, strict=True))
            r = poly5(z) - y01[rows]
            b_n = rows.size
            penalty = sum(float(th @ th) for th in thetas[:-1]) + float(
                thetas[-1][:-1] @ thetas[-1][:-1])
            losses.append(float(poly5_loss(z, y[rows]).mean()) + lam / 2 * penalty)
            new = []
            for i, (b, th) in enumerate(zip(blocks, thetas, strict=True)):
                g = (b[rows].T @ r) / b_n + lam * th
                if i == len(blocks) - 1:
                    g[-1] -= lam * th[-1]
                new.append(th - learning_rate * g)
            thetas = new
    return thetas, losses
