"""The mathematics of federated transfer learning (FTL), with no I/O.

Party ``B`` (the source) holds features X_B and labels for its N_B rows; party ``A``
(the target) holds features X_A and no labels; they share N_AB rows (the overlap, found
by private set intersection). Each maps its features into a common d-dimensional space
with its own network, u^A = Net_A(x^A), u^B = Net_B(x^B) [1]_. B's labelled
representations define K class directions (the paper's Φ^A, here B is the labelled
side)

    Φ = Wᵀ U_B            (K × d),   W (N_B × K) fixed by B's labels,

and every sample x^A of A is scored by φ = Φ u^A (K scores). On a mini-batch I of b
overlap rows the objective is

    L = (α/b) Σ_i ℓ(φ_i, t_i) + (γ/b) Σ_i ‖u_i^A − u_i^B‖² + β·L_source,

with ℓ the second-order Taylor expansion of a classification loss at φ = 0, which is
what lets the parties compute it under additive homomorphic encryption [1]_:

    ℓ(φ, t) = c0 + tᵀφ + ½ φᵀ M φ.

``loss="logistic"`` is the paper's: log(1 + e^(−yφ)) ≈ log 2 − yφ/2 + φ²/8 with y = ±1,
so t = −y/2, M = 1/4, and Φ = (1/N_B) Σ_k y_k u_k^B; with K > 2 classes one score per
class, one-vs-rest. ``loss="softmax"`` (an extension) expands the K-class cross-entropy,
log Σ_c e^(φ_c) − φ_y ≈ log K + (1/K − e_y)ᵀφ + ½ φᵀ (I − 11ᵀ/K)/K φ, with Φ the K class
means of B's representations. Its minimiser is a margin of K between the true class
and the others, where the one-vs-rest expansion pulls every score towards ±2.

Gradients, with p_i = Φᵀ t_i, Q = Φᵀ M Φ and S = Σ_i u_i^A u_i^Aᵀ:

    ∂L/∂u_i^A = (α/b)(p_i + Q u_i^A) + (2γ/b)(u_i^A − u_i^B)
    ∂L/∂Φ     = (α/b) G,   G = Σ_i t_i u_i^Aᵀ + M Φ S    (K × d)
    ∂L/∂U_B   = (α/b) W G + (2γ/b)(u_i^B − u_i^A on the rows of I)   (symmetric)

A's gradient needs B's p_i (labels and Φ) and Q; B's needs A's u_i and S. Each term is
linear in the other party's quantities, so it can be formed under the other party's key
(:mod:`islands.vfl.ftl.protocol`). ``alignment="anchored"`` (an extension) leaves out
the last term: B's representation is the fixed target of the alignment, so only A moves
towards it and B's gradient needs only the batch aggregate G, not A's rows.

``L_source`` (an extension; β = 0 is the paper) is the same Taylor loss on all of B's
own labelled rows, scored by Φ u_k^B: B-local, it keeps B's representation
discriminative while A aligns to it, and B may pre-train with it alone before the
federation starts (``pretrain_epochs``).

Fixed point. Under Paillier every value is an integer: A's representations and B's Φ
terms are rounded to multiples of 2^-``frac_bits``; products of two such values are
exact at scale 2^(2·frac_bits) (:func:`encode`, :func:`decode`).

References
----------
.. [1] Y. Liu, Y. Kang, C. Xing, T. Chen, Q. Yang. "A Secure Federated Transfer Learning
   Framework." IEEE Intelligent Systems 35(4), 2020 (arXiv:1812.03337), §3–4.
.. [2] Q. Yang, Y. Liu, T. Chen, Y. Tong. "Federated Machine Learning: Concept and
   Applications." ACM TIST 10(2), 2019, §2.3.3, §2.4.3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.arrays import Array
from islands.crypto.fixedpoint import round_scaled
from islands.errors import ValidationError

__all__ = [
    "LOSSES",
    "MAX_ABS_VALUE",
    "TaylorLoss",
    "a_gradient",
    "batch_loss",
    "decode",
    "encode",
    "encode_array",
    "phi_gradient",
    "prototypes",
    "target_terms",
    "value_bits",
]


LOSSES = ("softmax", "logistic")

MAX_ABS_VALUE = float(2**30)
"""Largest magnitude a representation or a Φ term may take before encoding."""


@dataclass(frozen=True)
class TaylorLoss:
    """ℓ(φ, t) = c0 + tᵀφ + ½ φᵀMφ for one of :data:`LOSSES` and ``n_classes`` classes.

    Binary logistic uses one score (K = 1, y = ±1 for the second class); every other
    case uses one score per class (K = ``n_classes``).
    """

    kind: str
    n_classes: int

    def __post_init__(self) -> None:
        if self.kind not in LOSSES:
            raise ValidationError(f"loss must be one of {list(LOSSES)}; got {self.kind!r}")
        if self.n_classes < 2:
            raise ValidationError(f"FTL needs at least 2 classes; got {self.n_classes}")

    @property
    def scores(self) -> int:
        """K, the number of scores per sample."""
        return 1 if self.kind == "logistic" and self.n_classes == 2 else self.n_classes

    @property
    def constant(self) -> float:
        """c0: K·log 2 (logistic) or log K (softmax)."""
        return self.scores * math.log(2) if self.kind == "logistic" else math.log(self.scores)

    def curvature(self) -> Array:
        """M (K × K)."""
        k = self.scores
        if self.kind == "logistic":
            return np.asarray(np.eye(k) / 4)
        return np.asarray(np.eye(k) - np.full((k, k), 1.0 / k)) / k

    def signs(self, labels: NDArray[np.int64]) -> Array:
        """Return y (n × K): ±1 per score (logistic) or the one-hot e_y (softmax)."""
        labels = np.asarray(labels, dtype=np.int64)
        if self.scores == 1:
            return np.where(labels == 1, 1.0, -1.0)[:, None]
        onehot = np.eye(self.n_classes)[labels]
        return 2 * onehot - 1 if self.kind == "logistic" else onehot

    def targets(self, labels: NDArray[np.int64]) -> Array:
        """Return t (n × K): −y/2 (logistic) or 1/K − e_y (softmax)."""
        y = self.signs(labels)
        return np.asarray(-y / 2 if self.kind == "logistic" else 1.0 / self.scores - y)

    def value(self, phi: Array, t: Array) -> Array:
        """ℓ for every row of φ (n × K) with targets t (n × K)."""
        m = self.curvature()
        return np.asarray(self.constant + np.sum(t * phi, axis=1)
                          + 0.5 * np.sum((phi @ m) * phi, axis=1))

    def proba(self, phi: Array) -> Array:
        """Class probabilities (n × n_classes) from the scores."""
        phi = np.asarray(phi, dtype=np.float64)
        if self.kind == "softmax":
            z = phi - phi.max(axis=1, keepdims=True)
            e = np.exp(z)
            return np.asarray(e / e.sum(axis=1, keepdims=True))
        p = 1.0 / (1.0 + np.exp(-np.clip(phi, -500, 500)))
        if self.scores == 1:
            return np.hstack([1 - p, p])
        return np.asarray(p / np.maximum(p.sum(axis=1, keepdims=True), 1e-300))


def prototypes(loss: TaylorLoss, labels: NDArray[np.int64]) -> Array:
    """W (N_B × K) with Φ = Wᵀ U_B: y/N_B (logistic, [1]_) or class means (softmax).

    Raises
    ------
    ValidationError
        If a class has no labelled row (its mean is undefined).
    """
    y = loss.signs(labels)
    if loss.kind == "logistic":
        return np.asarray(y / y.shape[0])
    counts = y.sum(axis=0)
    if np.any(counts == 0):
        missing = [int(c) for c in np.flatnonzero(counts == 0)]
        raise ValidationError(f"classes {missing} have no labelled row in y_b")
    return np.asarray(y / counts)


def target_terms(phi: Array, t: Array, m: Array) -> tuple[Array, Array]:
    """B's terms of A's gradient: P = T Φ (b × d, rows p_i = Φᵀt_i) and Q = ΦᵀMΦ (d × d)."""
    return t @ phi, phi.T @ m @ phi


def a_gradient(p: Array, q: Array, u_a: Array, u_b: Array, *, alpha: float,
               gamma: float) -> Array:
    """∂L/∂u_i^A for the batch rows (b × d); see the module docstring."""
    b = u_a.shape[0]
    return np.asarray((alpha * (p + u_a @ q.T) + 2 * gamma * (u_a - u_b)) / b)


def phi_gradient(t: Array, u_a: Array, phi: Array, m: Array) -> Array:
    """G = Σ_i t_i u_iᵀ + M Φ S (K × d), so that ∂L/∂Φ = (α/b)·G."""
    return np.asarray(t.T @ u_a + m @ phi @ (u_a.T @ u_a))


def batch_loss(loss: TaylorLoss, phi: Array, t: Array, u_a: Array, u_b: Array, *,
               alpha: float, gamma: float) -> float:
    """Return the federated part of L on one batch: (α/b)Σℓ + (γ/b)Σ‖u^A − u^B‖²."""
    b = u_a.shape[0]
    scores = u_a @ phi.T
    return float((alpha * loss.value(scores, t).sum()
                  + gamma * np.sum((u_a - u_b) ** 2)) / b)


def encode_array(values: ArrayLike, frac_bits: int, what: str, owner: str) -> Array:
    """Round to multiples of 2^-frac_bits; return the numerators as exact integral floats.

    The one rounding of every FTL engine: :func:`encode` (Python ints, for the HE flows)
    and the secret-sharing engine's ring encoding (:mod:`islands.vfl.ftl.ss`) both read
    it, so they carry the same integers. The shape is kept.

    Raises
    ------
    ValidationError
        If a value is not finite or above :data:`MAX_ABS_VALUE` (training diverged).
    """
    arr = np.asarray(values, dtype=np.float64)

    def diverged(_index: int, _value: float) -> ValidationError:
        return ValidationError(f"{owner}: {what} is not finite or above 2^30 in magnitude; "
                               "training has diverged (lower the learning rate)")

    # floats, not int64: at scale 2^(2f) the numerators can pass 2^63, and each is exact
    return round_scaled(arr, frac_bits, bound=MAX_ABS_VALUE, fail=diverged)


def encode(values: ArrayLike, frac_bits: int, what: str, owner: str) -> list[int]:
    """Round to multiples of 2^-frac_bits and return the integer numerators.

    Python ints, so that numerators at scale 2^(2·frac_bits) are exact too
    (:func:`encode_array`).

    Raises
    ------
    ValidationError
        If a value is not finite or above :data:`MAX_ABS_VALUE` (training diverged).
    """
    return [int(v) for v in encode_array(values, frac_bits, what, owner).ravel()]


def value_bits(terms: int, frac_bits: int) -> int:
    """Return k with |v| < 2^k for v a sum of ``terms`` products of encoded values, plus one.

    The one is a value at scale 2^(2·frac_bits). Each encoded value is at most 2^(30+f)
    in magnitude (:data:`MAX_ABS_VALUE`), a product at most 2^(60+2f), so
    |v| < (terms + 1)·2^(60+2f) ≤ 2^k. This public bound sizes the statistical masks
    under OU (:mod:`islands.vfl.ftl.protocol`).
    """
    return 60 + 2 * frac_bits + max(int(terms), 1).bit_length()


def decode(values: list[int], frac_bits: int, shape: tuple[int, ...]) -> Array:
    """Inverse of :func:`encode` at scale 2^-frac_bits."""
    scale = float(2**frac_bits)
    return np.array([v / scale for v in values], dtype=np.float64).reshape(shape)
