"""What SCCA really reveals: attacks on the exact messages each peer received.

The paper (§3.3) claims that multiplying the shared parameters by secret random k1, k2
protects them. It does not (ALGORITHMS.md §1, verified here on every run):

1. **S2 recovers k1.** M_x = X(XᵀX)^(-1/2) has orthonormal columns, so
   Σᵢ‖row_i(M_x)‖² = ‖M_x‖_F² = rank X = p, which S2 learnt in the handshake. From the
   message k1·Δx: k1 = sqrt(Σ(k1Δx)²/p). S2 then holds Δx, the leverage of every row
   of X (which rows are outliers).
2. **S1 recovers k2 and span(Y).** R2ᵀR2 = H2H2ᵀ = k1²·Δx Q_yQ_yᵀ Δx. S1 knows Δx and
   k1 (its own), so Z = R2'·Δx⁻¹/k1 satisfies ZZᵀ = k2²·I and ZᵀZ = k2²·Q_yQ_yᵀ: every
   non-zero singular value of Z is k2, and Zᵀ/k2 is an orthonormal basis of span(Y).
3. **S1 reconstructs Y.** The centred Y is E·M for the basis E and an unknown q×q M;
   q rows of Y known to S1 (public records, a few shared customers) give M, hence all
   of Y. With q+1 known rows of the raw Y the column means come out too.

Nothing here uses anything but the transcript's payloads as one peer received or sent
them, and that peer's own data. Ground truth is used only to score the attacks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.cca import maths
from islands.cca.estimator import SwarmCCA
from islands.errors import ValidationError
from islands.runtime import Record, Transcript

__all__ = [
    "SccaAuditReport",
    "audit_scca",
    "reconstruct_rows",
    "recover_k1",
    "recover_k2_and_span",
]



def _payload(records: list[Record], tag: str) -> Any:
    for record in records:
        if record.tag == tag:
            return record.payload
    raise ValidationError(f"the transcript holds no {tag!r} message for this peer; was the "
                          "fit run with keep_payloads=True?")


def recover_k1(received_by_s2: list[Record]) -> float:
    """S2's attack: k1 from the perturbed Δx and S1's rank from the handshake.

    Parameters
    ----------
    received_by_s2
        The records of the messages S2 received (``transcript.received_by(s2)``).
    """
    delta = np.asarray(_payload(received_by_s2, "delta"), dtype=np.float64)
    rank = _payload(received_by_s2, "dims").rank
    return float(np.sqrt(np.sum(delta**2) / rank))


def recover_k2_and_span(
    received_by_s1: list[Record], sent_by_s1: list[Record], own_delta: Array
) -> tuple[float, Array]:
    """S1's attack: k2 and an orthonormal basis of span(Y) (n×q) from R2.

    Parameters
    ----------
    received_by_s1, sent_by_s1
        The records of the messages S1 received and sent.
    own_delta
        S1's own Δx (the row norms of its whitened X), which S1 computed itself.

    Returns
    -------
    k2, basis
        The recovered factor and E (n×q, orthonormal columns) with EEᵀ = Q_yQ_yᵀ.
    """
    sent = np.asarray(_payload(sent_by_s1, "delta"), dtype=np.float64)
    r2 = np.asarray(_payload(received_by_s1, "R2"), dtype=np.float64)
    live = own_delta > 0
    k1 = float(np.median(sent[live] / own_delta[live]))  # S1 knows k1; this re-derives it
    inv = np.zeros_like(own_delta)
    inv[live] = 1.0 / (k1 * own_delta[live])
    z = r2 * inv[None, :]  # q×n, ZZᵀ = k2²·I
    singular = np.linalg.svd(z, compute_uv=False)
    k2 = float(np.median(singular))
    basis: Array = z.T / k2
    return k2, basis


def reconstruct_rows(
    basis: Array, known_index: NDArray[np.intp], known_rows: Array, *, with_mean: bool = False
) -> Array:
    """Rebuild a whole block from a basis of its column span and a few known rows.

    Solves known_rows = basis[known_index]·M (least squares) and returns basis·M. With
    ``with_mean`` the all-ones vector joins the basis, so raw (uncentred) rows can be
    given: one extra known row pays for the unknown column means.
    """
    b = np.hstack([basis, np.ones((basis.shape[0], 1))]) if with_mean else basis
    coef, *_ = np.linalg.lstsq(b[known_index], known_rows, rcond=None)
    out: Array = b @ coef
    return out


@dataclass(frozen=True)
class SccaAuditReport:
    """Recovery errors of the attacks on one SCCA run (all relative, 0 = exact recovery).

    Attributes
    ----------
    k1_rel_error, k2_rel_error
        |k̂ − k| / k for S2's and S1's recovery of the other's secret factor.
    projector_error
        ‖Ê Êᵀ − Q_yQ_yᵀ‖_F / ‖Q_yQ_yᵀ‖_F: S1's knowledge of span(Y).
    y_reconstruction_rel_error
        ‖Ŷ − Y‖_F / ‖Y‖_F for the centred Y rebuilt from q known rows.
    y_raw_reconstruction_rel_error
        The same for the raw Y from q+1 known raw rows.
    y_reconstruction_rel_error_extra_rows
        The centred Y rebuilt from q + ``extra_rows`` known rows. Exactly q rows drawn at
        random can be degenerate on sparse data (a pixel that is zero in all of them);
        a few more rows make the system well posed and the recovery exact.
    n, p, q, known_rows, extra_rows
        Problem size and how many rows of Y S1 was assumed to know.
    """

    k1_rel_error: float
    k2_rel_error: float
    projector_error: float
    y_reconstruction_rel_error: float
    y_raw_reconstruction_rel_error: float
    y_reconstruction_rel_error_extra_rows: float
    n: int
    p: int
    q: int
    known_rows: int
    extra_rows: int

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready values."""
        return asdict(self)


def audit_scca(
    X: Array, Y: Array, *, rank_tol: float | None = 1e-10, reg: float = 0.0,
    random_state: int | np.random.Generator | None = 0, extra_rows: int = 10,
) -> SccaAuditReport:
    """Fit SCCA (perturbed, as the paper recommends) and run every attack on it.

    X is given to the peer with the larger dimension so that it plays S1 and Y's holder
    plays S2, as the swap rule makes them. The known rows of Y are drawn at random.

    Parameters
    ----------
    X, Y
        The two views, rows aligned.
    rank_tol, reg
        Rank-deficiency handling for both peers (see :class:`SwarmCCA`).
    random_state
        Chooses which rows of Y the attacker is assumed to know.
    extra_rows
        Also report the reconstruction from this many rows beyond q.
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    cca = SwarmCCA(perturb=True, rank_tol=rank_tol, reg=reg, keep_payloads=True).fit(X, Y)
    s1_name = "x" if cca.roles_["x"] == "s1" else "y"
    s2_name = "y" if s1_name == "x" else "x"
    s1_data, s2_data = (X, Y) if s1_name == "x" else (Y, X)
    truth_s1, truth_s2 = cca.results_[s1_name], cca.results_[s2_name]
    t: Transcript = cca.transcript_

    k1_hat = recover_k1(t.received_by(s2_name))
    # S1 recomputes its own Δx from its own data with its own settings
    w1 = maths.whiten(s1_data, reg=reg, rank_tol=rank_tol)
    k2_hat, basis = recover_k2_and_span(t.received_by(s1_name), t.sent_by(s1_name),
                                        maths.leverage_norms(w1.basis))

    w2 = maths.whiten(s2_data, reg=reg, rank_tol=rank_tol)  # ground truth only
    q = w2.rank
    # ‖EEᵀ − QQᵀ‖_F = √2·‖(I − QQᵀ)E‖_F for orthonormal n×q bases: no cancellation
    residual = basis - w2.basis @ (w2.basis.T @ basis)
    projector_error = float(np.sqrt(2.0) * np.linalg.norm(residual) / np.sqrt(q))

    rng = np.random.default_rng(random_state)
    n = s2_data.shape[0]
    order = rng.permutation(n).astype(np.intp)
    known = np.sort(order[:q])
    known_raw = np.sort(order[:q + 1])
    known_more = np.sort(order[:min(q + extra_rows, n)])
    centred = s2_data - s2_data.mean(axis=0)
    y_hat = reconstruct_rows(basis, known, centred[known])
    y_raw = reconstruct_rows(basis, known_raw, s2_data[known_raw], with_mean=True)
    y_more = reconstruct_rows(basis, known_more, centred[known_more])
    return SccaAuditReport(
        k1_rel_error=abs(k1_hat - truth_s1.scale) / truth_s1.scale,
        k2_rel_error=abs(k2_hat - truth_s2.scale) / truth_s2.scale,
        projector_error=projector_error,
        y_reconstruction_rel_error=float(np.linalg.norm(y_hat - centred)
                                         / np.linalg.norm(centred)),
        y_raw_reconstruction_rel_error=float(np.linalg.norm(y_raw - s2_data)
                                             / np.linalg.norm(s2_data)),
        y_reconstruction_rel_error_extra_rows=float(np.linalg.norm(y_more - centred)
                                                    / np.linalg.norm(centred)),
        n=n, p=truth_s1.weights.shape[0], q=s2_data.shape[1], known_rows=q,
        extra_rows=extra_rows,
    )
