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

On the secure protocol (:mod:`islands.cca.secure`, ``protocol="secure"``) the same
attacks run on the messages that take R2's place: S1 reads the ring elements Ẑ it
receives as if they were a basis of span(Y). They are uniform modulo P, so the basis is
a random subspace and Y's reconstruction no better than guessing; there is no k1 or k2
to recover (those keys are None). :func:`simulation_check` adds the converse: S1's view
of a run on Y and of a run on a different Y′ with the same outputs cannot be told apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.cca import maths
from islands.cca.estimator import SwarmCCA
from islands.cca.secure import FRAC_BITS
from islands.crypto import rns
from islands.errors import ValidationError
from islands.runtime import Record, Transcript

__all__ = [
    "SccaAuditReport",
    "SimulationCheck",
    "audit_scca",
    "equivalent_view",
    "reconstruct_rows",
    "recover_k1",
    "recover_k2_and_span",
    "simulation_check",
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


def span_from_ring_message(received_by_s1: list[Record], n: int, q: int) -> Array:
    """S1's attack on the secure protocol: read Ẑ (R2's place) as a basis of span(Y)."""
    z = rns.decode(rns.unpack(_payload(received_by_s1, "zhat"), (n, q), "zhat", "S1"),
                   FRAC_BITS)
    basis: Array = np.linalg.qr(z)[0]
    return basis


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
        |k̂ − k| / k for S2's and S1's recovery of the other's secret factor (None for
        the secure protocol, which has none).
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
    protocol
        ``"paper"`` or ``"secure"``.
    simulation
        The secure protocol's :func:`simulation_check` (None for the paper's).
    """

    k1_rel_error: float | None
    k2_rel_error: float | None
    projector_error: float
    y_reconstruction_rel_error: float
    y_raw_reconstruction_rel_error: float
    y_reconstruction_rel_error_extra_rows: float
    n: int
    p: int
    q: int
    known_rows: int
    extra_rows: int
    protocol: str = "paper"
    simulation: SimulationCheck | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready values."""
        return asdict(self)


@dataclass(frozen=True)
class SimulationCheck:
    """S1's view of a run on Y against a run on Y′ with the same outputs (secure protocol).

    For each ring message S1 receives (``zhat``, ``T`` and the dealer's ``r_a``), its
    residues are scaled to [0, 1) by their prime and compared between the two runs with a
    two-sample Kolmogorov–Smirnov test, and each against the uniform distribution; a
    p-value below ``alpha`` (Bonferroni-corrected over the tests) would tell the runs, or
    the message and uniform noise, apart.

    Attributes
    ----------
    pvalues
        ``{"zhat/two-sample": p, "zhat/uniform": p, ...}``.
    alpha
        The family-wise level.
    indistinguishable
        Every p-value is at least alpha / (number of tests).
    same_outputs
        Largest difference of the canonical correlations between the two runs.
    """

    pvalues: dict[str, float]
    alpha: float
    indistinguishable: bool
    same_outputs: float


def equivalent_view(X: Array, Y: Array, random_state: int | np.random.Generator | None = 0,
                    *, reg: float = 0.0, rank_tol: float | None = None) -> Array:
    """Return a Y′ ≠ Y that gives both peers the same outputs as Y.

    With Q_y = Q_x·M + E (E orthogonal to span(X)), Y′ = (Q_x·M + W·(EᵀE)^(1/2))·R_y + ȳ
    for a random orthonormal W in the complement of span(X) ∪ span(Y): the same
    M = Q_xᵀQ_y′ and the same R_y, hence the same ρ, A and B, but a different column
    space. Columns dropped by ``rank_tol`` (constant ones, say) are kept as they are.
    """
    Y = np.asarray(Y, dtype=np.float64)
    wx = maths.whiten(np.asarray(X, dtype=np.float64), reg=reg, rank_tol=rank_tol)
    wy = maths.whiten(Y, reg=reg, rank_tol=rank_tol)
    m = wx.basis.T @ wy.basis
    e = wy.basis - wx.basis @ m
    rng = np.random.default_rng(random_state)
    g = rng.normal(size=(wy.basis.shape[0], wy.basis.shape[1]))
    both = np.hstack([wx.basis, np.linalg.qr(e)[0], np.ones((g.shape[0], 1))
                      / np.sqrt(g.shape[0])])
    for _ in range(2):  # project out twice: orthogonal to working precision
        g -= both @ np.linalg.lstsq(both, g, rcond=None)[0]
    w = np.linalg.qr(g)[0]
    evals, evecs = np.linalg.eigh(e.T @ e)
    root = (evecs * np.sqrt(np.clip(evals, 0.0, None))) @ evecs.T
    out: Array = Y.copy()
    out[:, wy.kept] = (wx.basis @ m + w @ root) @ wy.r + wy.mean[wy.kept]
    return out


def simulation_check(X: Array, Y: Array, *, alpha: float = 0.01, reg: float = 0.0,
                     rank_tol: float | None = None,
                     random_state: int | np.random.Generator | None = 0) -> SimulationCheck:
    """Run the secure protocol on Y and on :func:`equivalent_view`'s Y′; compare S1's views."""
    from scipy import stats

    y_other = equivalent_view(X, Y, random_state, reg=reg, rank_tol=rank_tol)
    runs = [SwarmCCA(protocol="secure", keep_payloads=True, reg=reg, rank_tol=rank_tol)
            .fit(X, v) for v in (Y, y_other)]
    s1 = "x" if runs[0].roles_["x"] == "s1" else "y"
    seen = []
    for run in runs:
        got = run.transcript_.received_by(s1)
        n, p, q = X.shape[0], runs[0].x_rank_, runs[0].y_rank_
        if s1 == "y":
            p, q = q, p
        messages = {"zhat": rns.unpack(_payload(got, "zhat"), (n, q), "zhat", "S1"),
                    "T": rns.unpack(_payload(got, "T"), (p, q), "T", "S1"),
                    "r_a": rns.unpack(_payload(got, "randomness").ra, (p, q), "r_a", "S1")}
        scaled = {k: np.concatenate([v[i].ravel() / prime
                                     for i, prime in enumerate(rns.PRIMES)])
                  for k, v in messages.items()}
        seen.append(scaled)
    pvalues: dict[str, float] = {}
    for key in seen[0]:
        pvalues[f"{key}/two-sample"] = float(stats.ks_2samp(seen[0][key], seen[1][key]).pvalue)
        pvalues[f"{key}/uniform"] = float(stats.kstest(seen[1][key], "uniform").pvalue)
    same = float(np.abs(np.asarray(runs[0].canonical_correlations_)
                        - np.asarray(runs[1].canonical_correlations_)).max())
    return SimulationCheck(pvalues=pvalues, alpha=alpha,
                           indistinguishable=min(pvalues.values()) >= alpha / len(pvalues),
                           same_outputs=same)


def audit_scca(
    X: Array, Y: Array, *, rank_tol: float | None = 1e-10, reg: float = 0.0,
    random_state: int | np.random.Generator | None = 0, extra_rows: int = 10,
    protocol: str = "paper",
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
    protocol
        ``"paper"`` (perturbed) or ``"secure"``: the same attacks on the messages in the
        same places, and :func:`simulation_check`.
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if protocol not in ("paper", "secure"):
        raise ValidationError(f"audit_scca: protocol must be 'paper' or 'secure'; got "
                              f"{protocol!r}")
    secure = protocol == "secure"
    cca = SwarmCCA(protocol=protocol, perturb=None if secure else True, rank_tol=rank_tol,
                   reg=reg, keep_payloads=True).fit(X, Y)
    s1_name = "x" if cca.roles_["x"] == "s1" else "y"
    s2_name = "y" if s1_name == "x" else "x"
    s1_data, s2_data = (X, Y) if s1_name == "x" else (Y, X)
    truth_s1, truth_s2 = cca.results_[s1_name], cca.results_[s2_name]
    t: Transcript = cca.transcript_

    w2 = maths.whiten(s2_data, reg=reg, rank_tol=rank_tol)  # ground truth only
    q = w2.rank
    k1_error: float | None = None
    k2_error: float | None = None
    if secure:
        basis = span_from_ring_message(t.received_by(s1_name), s1_data.shape[0], q)
    else:
        k1_hat = recover_k1(t.received_by(s2_name))
        # S1 recomputes its own Δx from its own data with its own settings
        w1 = maths.whiten(s1_data, reg=reg, rank_tol=rank_tol)
        k2_hat, basis = recover_k2_and_span(t.received_by(s1_name), t.sent_by(s1_name),
                                            maths.leverage_norms(w1.basis))
        k1_error = abs(k1_hat - truth_s1.scale) / truth_s1.scale
        k2_error = abs(k2_hat - truth_s2.scale) / truth_s2.scale
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
        k1_rel_error=k1_error, k2_rel_error=k2_error,
        projector_error=projector_error,
        y_reconstruction_rel_error=float(np.linalg.norm(y_hat - centred)
                                         / np.linalg.norm(centred)),
        y_raw_reconstruction_rel_error=float(np.linalg.norm(y_raw - s2_data)
                                             / np.linalg.norm(s2_data)),
        y_reconstruction_rel_error_extra_rows=float(np.linalg.norm(y_more - centred)
                                                    / np.linalg.norm(centred)),
        n=n, p=truth_s1.weights.shape[0], q=s2_data.shape[1], known_rows=q,
        extra_rows=extra_rows, protocol=protocol,
        simulation=simulation_check(s1_data, s2_data, reg=reg, rank_tol=rank_tol,
                                    random_state=random_state) if secure else None,
    )
