"""The mathematics of Swarm CCA (SCCA), as pure functions with no I/O.

SCCA (Li & Du 2024) computes the canonical correlations and vectors of centralised CCA
between X (n×p, held by S1) and Y (n×q, held by S2) through the product SVD of
P = M_xᵀ M_y, with M_x = X (XᵀX)^(-1/2). The paper forms M_x with a matrix square root;
we use the equivalent identities of ALGORITHMS.md §1, which need none:

* M_x = Q_x O_x with O_x = R_x (R_xᵀR_x)^(-1/2) orthogonal, so the row norms of M_x (the
  message Δx) are the row norms of Q_x;
* S2's R2, the R factor of H2ᵀ = (Δx M_y)ᵀ = O_yᵀ (Δx Q_y)ᵀ, is the R factor of
  (Δx Q_y)ᵀ (QR is unique up to row signs);
* S1's SVD of F = M_xᵀ Δx† R2ᵀ equals, up to the rotation O_x, the SVD of
  F'' = Q_xᵀ Δx† R2ᵀ, and A = C11^(-1/2) U = R_x⁻¹ U'', B = C22^(-1/2) Q_2 W_f = R_y⁻¹ Q_w W_f.

C11 = XᵀX of the centred data, as in the paper (eq. 1 and §2.1): the canonical variates
XA have unit norm, not unit variance.

The wide QR of the q×n matrix (Δx Q_y)ᵀ is computed as the QR of its leading q×q block
followed by one matrix product (R = Q_wᵀ M): an exact QR factorisation of the whole
matrix (Q_w orthogonal, R upper trapezoidal) at matrix-multiply speed.

Rank deficiency (constant pixels, p ≥ n) is handled explicitly: a ridge term ``reg``
(C11 + reg·I, computed as the QR of [X; sqrt(reg)·I]) or a rank-revealing (pivoted) QR
with tolerance ``rank_tol`` that keeps a maximal set of independent columns (the others
get zero weights). With neither, a rank-deficient block raises an error naming both.

References
----------
.. [1] Li, Du. "Swarm canonical correlation analysis" (SCCA). Acta Automatica Sinica
   50(9), 2024. ``papers/scca-swarm-cca-li-du-2024.zh.txt``, Algorithms 1-2, Theorems 1-3.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

from islands.arrays import Array
from islands.errors import ValidationError

__all__ = [
    "Whitening",
    "canonical_from_svd",
    "embed",
    "leverage_norms",
    "pooled_cca",
    "product_svd",
    "random_scale",
    "ratios_of",
    "s1_product",
    "s2_rotation",
    "select_components",
    "sign_flip",
    "whiten",
]



@dataclass(frozen=True)
class Whitening:
    """A party's centred, whitened block: Z[:, kept] − mean = basis @ r (ridge: on [Z; √reg·I]).

    Attributes
    ----------
    basis
        n×r matrix with orthonormal columns (ridge: the first n rows of such a matrix).
    r
        r×r upper-triangular factor, rᵀr = Z_cᵀZ_c (+ reg·I) on the kept columns.
    kept
        Indices of the columns used (all of them unless dropped by ``rank_tol``).
    mean
        Column means (length p), which stay with the party.
    n_features
        p, the number of columns of the input.
    """

    basis: Array
    r: Array
    kept: NDArray[np.intp]
    mean: Array
    n_features: int

    @property
    def rank(self) -> int:
        """Number of columns actually used."""
        return int(self.kept.size)


def whiten(
    Z: Array, *, reg: float = 0.0, rank_tol: float | None = None, name: str = "X"
) -> Whitening:
    """Centre a block and factor it for SCCA.

    Parameters
    ----------
    Z
        n×p data, rows aligned with the peer's.
    reg
        Ridge term added to C11 = Z_cᵀZ_c (0 for none).
    rank_tol
        If given, use a pivoted QR and drop columns whose diagonal entry of R falls below
        ``rank_tol`` times the largest; if None, a numerically rank-deficient block is an
        error (detected at the tolerance ``max(n, p)·eps``).
    name
        How errors refer to this block.

    Raises
    ------
    ValidationError
        If the block is rank deficient and neither ``reg`` nor ``rank_tol`` is set.
    """
    n, p = Z.shape
    mean = Z.mean(axis=0)
    # one n×p working copy in Fortran order, factored in place (Q overwrites it): the
    # caller's array is never modified and no other n×p temporary is made
    rows = n + p if reg > 0 else n
    centred = np.empty((rows, p), order="F")
    np.subtract(Z, mean, out=centred[:n])
    if reg > 0:
        centred[n:] = np.sqrt(reg) * np.eye(p)
        q, r = scipy.linalg.qr(centred, mode="economic", overwrite_a=True, check_finite=False)
        return Whitening(basis=q[:n], r=r, kept=np.arange(p, dtype=np.intp), mean=mean,
                         n_features=p)
    if rank_tol is None:
        if p > n - 1:
            raise _rank_error(name, f"p = {p} columns but only n - 1 = {n - 1} dimensions "
                                    "after centring")
        q, r = scipy.linalg.qr(centred, mode="economic", overwrite_a=True, check_finite=False)
        diag = np.abs(np.diag(r))
        rel = max(n, p) * np.finfo(np.float64).eps
        tol = rel * diag.max()
        if diag.min() <= tol:
            _refuse_scale(Z, mean, r, diag, rel, name)
            raise _rank_error(name, f"about {int(np.sum(diag > tol))} independent columns "
                                    f"of {p}")
        return Whitening(basis=q, r=r, kept=np.arange(p, dtype=np.intp), mean=mean,
                         n_features=p)
    q, r, piv = scipy.linalg.qr(centred, mode="economic", pivoting=True, overwrite_a=True,
                                check_finite=False)
    diag = np.abs(np.diag(r))
    rank = int(np.sum(diag > rank_tol * diag[0])) if diag.size and diag[0] > 0 else 0
    rank = min(rank, n - 1)  # centring removes one dimension
    if rank == 0:
        raise ValidationError(f"{name} is constant after centring: nothing to correlate")
    return Whitening(basis=np.ascontiguousarray(q[:, :rank]), r=r[:rank, :rank],
                     kept=np.asarray(piv[:rank], dtype=np.intp), mean=mean, n_features=p)


def _refuse_scale(Z: Array, mean: Array, r: Array, diag: Array, rel: float,
                  name: str) -> None:
    """Name the value behind a failed rank test when the columns are independent at scale.

    The rank test compares every diagonal entry of R with ``rel`` (max(n, p)·eps) times the
    largest, so a column more than 1/rel times smaller than another (one huge cell in it,
    or a column in other units) fails it although it is no combination of the others.
    Column j is independent at its own scale when ``diag[j]`` exceeds ``rel`` times its
    norm (‖R[:, j]‖, the norm of the centred column). When every column is, raise an
    error naming the largest centred value, the column it dwarfs and the limit; otherwise
    return (a real dependence: :func:`_rank_error`).
    """
    norms = np.linalg.norm(r, axis=0)
    if np.any(diag <= rel * norms):
        return
    small = int(np.flatnonzero(diag <= rel * diag.max())[0])
    flat = int(np.argmax(np.abs(Z - mean)))  # on this error path only: an n×p temporary
    row, col = divmod(flat, Z.shape[1])
    raise ValidationError(
        f"{name} holds {float(Z[row, col]):.3g} at row {row}, column {col}, which makes "
        f"column {col} {norms[col] / norms[small]:.2g} times larger than column {small} "
        f"after centring; float64 factors the columns together only up to a ratio of "
        f"1/(max(n, p)·eps) = {1.0 / rel:.3g}, beyond which column {small} cannot be "
        "told from zero. Check that value, or rescale the columns (e.g. standardise them)."
    )


def _rank_error(name: str, detail: str) -> ValidationError:
    return ValidationError(
        f"{name} is rank deficient after centring ({detail}): constant or collinear "
        "columns, or p >= n. Pass reg > 0 (ridge on C11) or rank_tol (e.g. 1e-10: drop "
        "dependent columns by rank-revealing QR)."
    )


def leverage_norms(basis: Array) -> Array:
    """Δx: the L2 norms of the rows of M_x, equal to those of its orthonormal basis Q_x."""
    norms: Array = np.sqrt(np.einsum("ij,ij->i", basis, basis))
    return norms


def random_scale() -> float:
    """Draw a perturbation factor k > 0, log-uniform on [1e-2, 1e2], from the OS CSPRNG.

    The paper (§3.3) only asks for "a random positive real"; any such k cancels out of
    the canonical vectors (Theorem 3), so the range only matters for floating point.
    """
    u = secrets.randbits(53) / float(1 << 53)
    return float(10.0 ** (4.0 * u - 2.0))


def s2_rotation(basis_y: Array, delta: Array, *, overwrite: bool = False) -> tuple[Array, Array]:
    """S2's step: the QR of H2ᵀ ∝ (Δx Q_y)ᵀ, returning (Q_w, R2) with R2 q×n.

    R2 is what S2 sends (times its own k2); Q_w (q×q, orthogonal) stays with S2. With
    ``overwrite`` the basis is scaled in place (S2 needs it no more), saving an n×q copy.
    """
    scaled = basis_y if overwrite else basis_y.copy()
    scaled *= delta[:, None]
    m = scaled.T  # q×n view
    q_w, _ = np.linalg.qr(m[:, : m.shape[0]])
    r2: Array = q_w.T @ m
    return q_w, r2


def s1_product(basis_x: Array, delta: Array, r2: Array, *, overwrite: bool = False) -> Array:
    """S1's product F'' = Q_xᵀ Δx† R2ᵀ (p×q, Fortran order so the SVD can work in place).

    With ``overwrite`` the received R2 is scaled in place (S1 owns that buffer).
    """
    inv = np.zeros_like(delta)
    np.divide(1.0, delta, out=inv, where=delta > 0)  # Moore-Penrose inverse of diag(Δx)
    scaled = r2 if overwrite else r2.copy()
    scaled *= inv[None, :]
    f: Array = (scaled @ basis_x).T
    return f


def product_svd(f: Array) -> tuple[Array, Array, Array]:
    """Thin SVD of F'' (destroying it): (U'', Σ, W_f) with F'' = U''·diag(Σ)·W_fᵀ."""
    u, s, wt = scipy.linalg.svd(f, full_matrices=False, overwrite_a=True, check_finite=False)
    return u, s, wt.T


def canonical_from_svd(r: Array, u: Array) -> Array:
    """Canonical vectors on the kept columns: A = R⁻¹ U (= C11^(-1/2) U of the paper)."""
    out: Array = scipy.linalg.solve_triangular(r, u, lower=False, check_finite=False)
    return out


def sign_flip(a: Array) -> NDArray[np.float64]:
    """Signs (±1 per column) that make each column's largest-magnitude entry positive."""
    if a.size == 0:
        return np.ones(a.shape[1])
    idx = np.argmax(np.abs(a), axis=0)
    signs: NDArray[np.float64] = np.sign(a[idx, np.arange(a.shape[1])])
    signs[signs == 0] = 1.0
    return signs


def embed(weights: Array, kept: NDArray[np.intp], n_features: int) -> Array:
    """Place weights for the kept columns into a full n_features×d matrix (zeros elsewhere)."""
    full = np.zeros((n_features, weights.shape[1]))
    full[kept] = weights
    return full


def pooled_cca(
    X: Array, Y: Array, n_components: int | None = None, *, reg: float = 0.0,
    rank_tol: float | None = None,
) -> tuple[Array, Array, Array]:
    """Centralised CCA on pooled data (the reference SCCA must reproduce), by QR + SVD.

    Returns
    -------
    correlations, x_weights, y_weights
        ρ (d,), A (p×d) and B (q×d) with AᵀC11A = BᵀC22B = I, signs as SCCA chooses.
    """
    wx = whiten(X, reg=reg, rank_tol=rank_tol, name="X")
    wy = whiten(Y, reg=reg, rank_tol=rank_tol, name="Y")
    u, s, v = product_svd((wy.basis.T @ wx.basis).T)
    d = s.size if n_components is None else min(n_components, s.size)
    a = canonical_from_svd(wx.r, u[:, :d])
    b = canonical_from_svd(wy.r, v[:, :d])
    signs = sign_flip(a)
    return (np.clip(s[:d], 0.0, 1.0), embed(a * signs, wx.kept, wx.n_features),
            embed(b * signs, wy.kept, wy.n_features))


def select_components(
    ratios: Array, n_components: int | None, threshold: float | None
) -> int:
    """How many components to keep: the top ``n_components`` and those with ratio ≥ threshold.

    At least one component is always kept.
    """
    d = ratios.size if n_components is None else min(n_components, ratios.size)
    if threshold is not None:
        d = min(d, int(np.sum(ratios >= threshold)))
    return max(d, 1)


def ratios_of(correlations: Array) -> Array:
    """ρ_i/ρ_1, the scale-free correlation structure that survives perturbation (0 if ρ_1 = 0)."""
    if correlations.size == 0 or correlations[0] <= 0:
        return np.zeros_like(correlations)
    out: Array = correlations / correlations[0]
    return out
