"""The mathematics of federated DP-PCA, as pure functions with no I/O.

Two centrings, one per kind of mode (:data:`Centring`):

* ``"published"`` (``elfedpca``, as ALGORITHMS.md §2 and the source notes give it): every
  row is centred on the *exact* joint mean μ = Σx/n and scaled to unit L2 norm,
  x̃ = (x − μ)/‖x − μ‖, and A = Σ x̃x̃ᵀ/n gets symmetric noise E with
  τ = sqrt(2 ln(1.25/δ))/(n ε) (:func:`gaussian_tau`, the whole budget). That τ assumes
  that one record changes A by at most 1/n, but μ is a function of every record, so one
  record moves every centred row and the change of A is bounded only by about √2; μ
  itself is released without noise. The scheme is kept as published, for reproduction,
  and **carries no (ε, δ) guarantee**.
* ``"released"`` (``secure``, ``dpdispca``, ``central``): two Gaussian mechanisms, each
  with half the budget (ε', δ') = (ε/2, δ/2) (:func:`split_budget`), composed (basic
  composition: (ε, δ) in all):

  1. every row is first scaled to unit norm, x̂ = x/‖x‖, so the sum Σx̂ has L2
     sensitivity 1; it is released with noise N(0, σ_μ² I), σ_μ = sqrt(2 ln(1.25/δ'))/ε'
     (:func:`mean_sigma`), and μ̂ = (Σx̂ + e)/n;
  2. rows are centred on the released μ̂ and scaled to unit norm again,
     x̃ = (x̂ − μ̂)/‖x̂ − μ̂‖ (:func:`centre_rows`). Given μ̂, each x̃ depends on its own
     record only, so Σ x̃x̃ᵀ changes by at most ‖x̃x̃ᵀ‖_F = 1, and A = Σ x̃x̃ᵀ/n by 1/n;
     symmetric noise E (upper triangle i.i.d. N(0, τ²), mirrored),
     τ = sqrt(2 ln(1.25/δ'))/(n ε') (:func:`moment_tau`), makes A' = A + E (ε', δ')-DP.

The row count n is treated as public, as in the source notes and Analyze Gauss. Only the
scale of A depends on it: noise of s.d. n·τ on Σ x̃x̃ᵀ, then division by n, is the same
mechanism, which is how the secure mode adds its shares (so that no site's noise depends
on an n another party sends).

In ``secure`` each of the s sites adds one share of the noise, and site 1, which decodes
the total, knows its own share. Each share therefore has variance σ²/(s − 1)
(:func:`share_sigma`), not σ²/s: the s − 1 shares site 1 does not know add up to the full
σ² the guarantee needs. The total is σ²·s/(s − 1) (:func:`secure_total_sigma`), s.d.
sqrt(s/(s − 1)) times σ (1.41 for s = 2, 1.05 for s = 10): that is what the guarantee
against site 1 costs in utility.

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
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.errors import invalid_parameter

__all__ = [
    "Centring",
    "captured_variance",
    "centre_rows",
    "check_privacy",
    "gaussian_tau",
    "mean_sigma",
    "moment",
    "moment_tau",
    "normalize_rows",
    "secure_total_sigma",
    "share_sigma",
    "split_budget",
    "symmetric_from_upper",
    "symmetric_noise",
    "top_components",
    "upper_of",
    "zero_sum_masks",
]

NormalSource = Callable[[int, float], Array]
"""Draws ``count`` i.i.d. N(0, sigma²) values: ``draw(count, sigma)``."""
Centring = Literal["raw", "published", "released"]
"""How rows are centred: ``raw`` x − μ (plain), ``published`` (x − μ)/‖x − μ‖ on the exact
mean (ELFedPCA), ``released`` (x̂ − μ̂)/‖x̂ − μ̂‖ on the noisy mean of unit rows."""


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


def split_budget(epsilon: float, delta: float) -> tuple[float, float]:
    """Return the (ε', δ') of each of the two releases (mean, second moment): (ε/2, δ/2)."""
    return epsilon / 2.0, delta / 2.0


def mean_sigma(epsilon: float, delta: float) -> float:
    """σ_μ of the noise on Σx̂, a sum of unit rows (sensitivity 1), for half the budget."""
    return gaussian_tau(*split_budget(epsilon, delta), 1)


def moment_tau(epsilon: float, delta: float, n: int) -> float:
    """τ of the noise on A = Σx̃x̃ᵀ/n (sensitivity 1/n), for half the budget."""
    return gaussian_tau(*split_budget(epsilon, delta), n)


def share_sigma(sigma: float, sites: int) -> float:
    """S.d. of one site's share of ``secure`` noise: σ/sqrt(s − 1), s >= 2 sites.

    Site 1 decodes the sum of the s shares and knows its own; the other s − 1 shares,
    each of variance σ²/(s − 1), leave it the full σ². The same holds against any other
    single site. Site 1 with c colluding sites removes c more shares and faces
    σ²(s − 1 − c)/(s − 1).
    """
    if isinstance(sites, bool) or not isinstance(sites, int) or sites < 2:
        raise invalid_parameter("sites", "share_sigma",
                                "an int >= 2 (shares need a site besides site 1)", sites)
    return sigma / math.sqrt(sites - 1)


def secure_total_sigma(sigma: float, sites: int) -> float:
    """S.d. of the sum of s :func:`share_sigma` shares: σ·sqrt(s/(s − 1))."""
    return share_sigma(sigma, sites) * math.sqrt(sites)


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


def centre_rows(block: Array, mean: Array, *, centring: Centring) -> Array:
    """Return the rows a mode decomposes (see :data:`Centring`); returns a new array.

    ``mean`` is the exact mean of the raw rows for ``raw`` and ``published``, the
    released mean of the unit rows for ``released``.
    """
    if centring == "raw":
        out: Array = block - mean
        return out
    if centring == "published":
        return normalize_rows(block - mean)
    return normalize_rows(normalize_rows(block) - mean)


def moment(blocks: Iterable[Array], mean: Array, *, centring: Centring) -> tuple[Array, int]:
    """Σ x̃x̃ᵀ over all rows, x̃ = :func:`centre_rows`, in one pass.

    Memory is O(d²) plus one block, whatever the number of rows.

    Returns
    -------
    sum_of_outer_products, rows
    """
    d = mean.shape[0]
    total = np.zeros((d, d))
    rows = 0
    for block in blocks:
        centred = centre_rows(block, mean, centring=centring)
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


def zero_sum_masks(real: Array, ints: NDArray[np.int64]) -> tuple[Array, NDArray[np.int64]]:
    """ELFedPCA's centring masks: shift random draws so that each kind sums to 0.

    Site 2 draws ``real`` (count×d) and ``ints`` (count) from its CSPRNG and sends pair i
    to site i (paper step 1); they hide single sums from site 1 only while site 2 does
    not collude. Returns new arrays.
    """
    real_out: Array = real - real.mean(axis=0)
    ints_out = np.array(ints, dtype=np.int64)
    ints_out[-1] -= ints_out.sum()
    return real_out, ints_out
