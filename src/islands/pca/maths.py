"""The mathematics of federated DP-PCA, as pure functions with no I/O.

Normalisation (ALGORITHMS.md §2): after joint centring every row is scaled to unit L2
norm, so ‖x‖ ≤ 1, and the second-moment matrix is A = Σ_i X_iᵀX_i / n. Adding or
removing one row changes A by at most 1/n in Frobenius norm, so the Gaussian mechanism
with symmetric noise E (upper triangle i.i.d. N(0, τ²), mirrored) and
τ = sqrt(2 ln(1.25/δ)) / (n ε) makes A' = A + E (ε, δ)-differentially private.

That τ is the *classic* Gaussian mechanism (Dwork & Roth 2014, Thm A.1), which is only
proven for ε < 1: :func:`gaussian_tau` refuses ε ≥ 1 rather than claim a guarantee it
does not give. (The analytic Gaussian mechanism of Balle & Wang 2018 would allow any ε
with less noise; it is not used here so that results match the paper's calibration.)

References
----------
.. [1] ELFedPCA notes (``papers/elfedpca-notes.zh.txt``): horizontal federated PCA with
   a jointly negotiated noise seed and noise split evenly over sites.
.. [2] Dwork, Talwar, Thakurta, Zhang. "Analyze Gauss: optimal bounds for
   privacy-preserving principal component analysis". STOC 2014.
.. [3] Dwork, Roth. "The Algorithmic Foundations of Differential Privacy", 2014.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
from numpy.typing import NDArray

from islands.errors import invalid_parameter

__all__ = [
    "captured_variance",
    "check_privacy",
    "gaussian_tau",
    "moment",
    "normalize_rows",
    "symmetric_from_upper",
    "symmetric_noise",
    "top_components",
    "upper_of",
    "zero_sum_masks",
]

Array = NDArray[np.float64]
NormalSource = Callable[[int, float], Array]
"""Draws ``count`` i.i.d. N(0, sigma²) values: ``draw(count, sigma)``."""


def check_privacy(epsilon: object, delta: object, owner: str) -> tuple[float, float]:
    """Validate (ε, δ) for the classic Gaussian mechanism: ε in (0, 1), δ in (0, 1)."""
    ok_eps = isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool)
    if not ok_eps or not 0.0 < float(epsilon) < 1.0:  # type: ignore[arg-type]
        raise invalid_parameter(
            "epsilon", owner,
            "a float in (0, 1) (the classic Gaussian mechanism is proven only for ε < 1)",
            epsilon,
        )
    ok_delta = isinstance(delta, (int, float)) and not isinstance(delta, bool)
    if not ok_delta or not 0.0 < float(delta) < 1.0:  # type: ignore[arg-type]
        raise invalid_parameter("delta", owner, "a float in (0, 1)", delta)
    return float(epsilon), float(delta)  # type: ignore[arg-type]


def gaussian_tau(epsilon: float, delta: float, n: int) -> float:
    """Noise scale τ = sqrt(2 ln(1.25/δ)) / (n ε) for sensitivity 1/n (classic mechanism)."""
    check_privacy(epsilon, delta, "gaussian_tau")
    if n < 1:
        raise invalid_parameter("n", "gaussian_tau", "an int >= 1", n)
    return math.sqrt(2.0 * math.log(1.25 / delta)) / (n * epsilon)


def upper_of(matrix: Array) -> Array:
    """Return the upper triangle (with the diagonal) of a d×d matrix, row by row: d(d+1)/2."""
    rows, cols = np.triu_indices(matrix.shape[0])
    out: Array = matrix[rows, cols]
    return out


def symmetric_from_upper(values: Array, d: int) -> Array:
    """Inverse of :func:`upper_of`: the symmetric matrix with that upper triangle."""
    if values.shape != (d * (d + 1) // 2,):
        raise ValueError(f"expected {d * (d + 1) // 2} values for d={d}, got {values.shape}")
    out = np.zeros((d, d))
    rows, cols = np.triu_indices(d)
    out[rows, cols] = values
    out[cols, rows] = values
    return out


def symmetric_noise(d: int, sigma: float, draw: NormalSource) -> Array:
    """Symmetric d×d Gaussian noise: upper triangle i.i.d. N(0, σ²), mirrored."""
    return symmetric_from_upper(draw(d * (d + 1) // 2, sigma), d)


def normalize_rows(block: Array) -> Array:
    """Scale every row to unit L2 norm (zero rows stay zero); returns a new array."""
    norms = np.linalg.norm(block, axis=1, keepdims=True)
    out: Array = np.divide(block, norms, out=np.zeros_like(block), where=norms > 0)
    return out


def moment(blocks: Iterable[Array], mean: Array, *, normalize: bool) -> tuple[Array, int]:
    """Σ x̃x̃ᵀ over all rows, x̃ = x − mean (unit-normalised if asked), in one pass.

    Memory is O(d²) plus one block, whatever the number of rows.

    Returns
    -------
    sum_of_outer_products, rows
    """
    d = mean.shape[0]
    total = np.zeros((d, d))
    rows = 0
    for block in blocks:
        centred = block - mean
        if normalize:
            centred = normalize_rows(centred)
        total += centred.T @ centred
        rows += block.shape[0]
    return total, rows


def top_components(matrix: Array, k: int) -> tuple[Array, Array]:
    """Top-k eigenpairs of a symmetric matrix: (eigenvalues desc., components k×d).

    Each component's largest-magnitude entry is made positive, for reproducible signs.
    """
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2.0)
    order = np.argsort(values)[::-1][:k]
    comps = vectors[:, order].T
    idx = np.argmax(np.abs(comps), axis=1)
    signs = np.sign(comps[np.arange(k), idx])
    signs[signs == 0] = 1.0
    return values[order], comps * signs[:, None]


def captured_variance(components: Array, reference: Array, matrix: Array) -> float:
    """Q = tr(V'ᵀAV') / tr(V*ᵀAV*): the variance the (noisy) components capture."""
    got = float(np.trace(components @ matrix @ components.T))
    best = float(np.trace(reference @ matrix @ reference.T))
    return got / best if best > 0 else 0.0


def zero_sum_masks(
    count: int, d: int, rng: np.random.Generator, *, scale: float = 1.0
) -> tuple[Array, NDArray[np.int64]]:
    """ELFedPCA's centring masks: ``count`` real d-vectors and integers that each sum to 0.

    Site 2 draws them and sends pair i to site i (paper step 1). Drawn from ``rng`` as
    published; they hide single sums from site 1 only while site 2 does not collude.
    """
    real = rng.normal(0.0, scale, size=(count, d))
    real -= real.mean(axis=0)
    ints = rng.integers(-1000, 1001, size=count).astype(np.int64)
    ints[-1] -= ints.sum()
    return real, ints
