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
from islands.cca.secure import FRAC_BITS, MASK_LABELS
from islands.crypto import rns
from islands.errors import ValidationError
from islands.progress import ProgressOption, check_progress, task
from islands.runtime import Record, Transcript
from islands.validation import check_float

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
    projector_error_from_product
        Secure protocol: S1's best use of what it decodes, M·O = Q_xᵀQ_y·O: the span of
        Q_x·M·O (the projection of span(Y) onto span(X)) taken for span(Y). It is 0 only
        when span(Y_c) lies in span(X_c), where CCA's own output reveals it too.
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
    projector_error_from_product: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready values."""
        return asdict(self)


@dataclass(frozen=True)
class SimulationCheck:
    """S1's view of a run on Y against a run on Y′ with the same outputs (secure protocol).

    S1's view is its own seed, the dealer's r_a, Ẑ, T, and what it decodes from them, M·O.
    The simulation argument (:mod:`islands.cca.secure`) says the ring messages are uniform
    whatever the data, and M·O is U·Σ·Wᵀ with W a Haar-random frame: a function of
    M·Mᵀ (the same for Y and Y′) and of fresh randomness. The check tests these
    consequences, not the argument itself:

    * every ring message's residues, scaled to [0, 1) by their prime, against the other
      run's (two-sample Kolmogorov–Smirnov) and against the uniform distribution;
    * the entries of the right factor W of the decoded M·O against the other run's (both
      Haar frames);
    * the decoded Gram matrix (M·O)(M·O)ᵀ, and both peers' outputs, between the runs.

    A p-value below ``alpha`` / (number of tests) (Bonferroni) would tell the runs, or a
    message and uniform noise, apart. A leak that keeps every marginal uniform (say, a
    dealer that tells S1 the seed of R_b) is not caught by such tests: they are
    necessary conditions, checked on the real messages; the argument is the proof.

    Attributes
    ----------
    pvalues
        ``{"zhat/two-sample": p, "zhat/uniform": p, ..., "W/two-sample": p}``.
    alpha
        The family-wise level.
    indistinguishable
        Every p-value is at least alpha / (number of tests), ``same_outputs`` is below
        1e-5 and ``gram_difference`` below 1e-6.
    same_outputs
        Largest difference between the runs of ρ and of the top ten pairs of canonical
        vectors (relative to their largest entry); below 1e-5 for "the same outputs".
    gram_difference
        Largest difference of the decoded (M·O)(M·O)ᵀ between the runs.
    """

    pvalues: dict[str, float]
    alpha: float
    indistinguishable: bool
    same_outputs: float
    gram_difference: float


_COMPARED = 10


def _centred_span(Z: Array, tol: float = 1e-10) -> Array:
    """Return an orthonormal basis of the centred Z's column span (singular values > tol)."""
    u, s, _ = np.linalg.svd(Z - Z.mean(axis=0), full_matrices=False)
    basis: Array = u[:, s > tol * (s[0] if s.size else 0.0)]
    return basis


def equivalent_view(X: Array, Y: Array, random_state: int | np.random.Generator | None = 0,
                    ) -> Array:
    """Return a Y′ with another column space that gives both peers the same outputs as Y.

    With P_X the projector onto span(X_c) and G = Y_cᵀ(I − P_X)Y_c:
    Y′ = P_X·Y_c + W·G^(1/2) + ȳ, for W a random orthonormal n×q frame orthogonal to
    span(X_c), to span(Y_c) and to the constant vector. Then X_cᵀY′_c = X_cᵀY_c and
    Y′_cᵀY′_c = Y_cᵀY_c: every second moment CCA uses (ridge included) is Y's, the null
    space of G^(1/2) is G's (columns dropped by ``rank_tol`` stay dependent), and the part
    of Y outside span(X) is replaced.

    Raises
    ------
    ValidationError
        If the centred space has no room for W (n − 1 − rank X_c − rank Y_c < q).
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    n, q = Y.shape
    px, py = _centred_span(X), _centred_span(Y)
    if n - 1 - px.shape[1] - py.shape[1] < q:
        raise ValidationError(f"equivalent_view: the centred space (n - 1 = {n - 1}) leaves "
                              f"no room beside span(X) ({px.shape[1]}) and span(Y) "
                              f"({py.shape[1]}) for another {q} dimensions")
    yc = Y - Y.mean(axis=0)
    inside = px @ (px.T @ yc)
    outside = yc - inside
    evals, evecs = np.linalg.eigh(outside.T @ outside)
    # a rounding-level eigenvalue would become √ε-sized: keep G's null space exact
    evals[evals <= 1e-12 * max(float(evals.max()), 0.0)] = 0.0
    root = (evecs * np.sqrt(evals)) @ evecs.T
    rng = np.random.default_rng(random_state)
    g = rng.normal(size=(n, q))
    taken = np.linalg.qr(np.hstack([px, py, np.full((n, 1), 1.0 / np.sqrt(n))]))[0]
    for _ in range(2):  # project out twice: orthogonal to working precision
        g -= taken @ (taken.T @ g)
    w = np.linalg.qr(g)[0]
    out: Array = inside + w @ root + Y.mean(axis=0)
    return out


def _decoded_product(run: SwarmCCA, s1: str, n: int, p: int, q: int) -> Array:
    """Return what S1 decodes from its messages: M·O (secure protocol)."""
    got = run.transcript_.received_by(s1)
    own_seed = _payload(run.transcript_.sent_by(s1), "deal").seed
    mask = rns.uniform(own_seed, (n, p), label=MASK_LABELS["Ra"])
    z_hat = rns.unpack(_payload(got, "zhat"), (n, q), "zhat", "S1")
    t = rns.unpack(_payload(got, "T"), (p, q), "T", "S1")
    ra = rns.unpack(_payload(got, "randomness").ra, (p, q), "r_a", "S1")
    return rns.decode(rns.add(rns.sub(t, rns.product(mask, z_hat)), ra), 2 * FRAC_BITS)


def simulation_check(X: Array, Y: Array, *, alpha: float = 0.01, reg: float = 0.0,
                     rank_tol: float | None = None,
                     random_state: int | np.random.Generator | None = 0) -> SimulationCheck:
    """Run the secure protocol twice, S2's block replaced by :func:`equivalent_view`'s.

    Whichever of X and Y plays S2 (the swap rule) is the one replaced; S1's views of the
    two runs are compared.
    """
    from scipy import stats

    def fit(x: Array, y: Array) -> SwarmCCA:
        return SwarmCCA(protocol="secure", keep_payloads=True, reg=reg,
                        rank_tol=rank_tol).fit(x, y)

    first = fit(X, Y)
    s1 = "x" if first.roles_["x"] == "s1" else "y"
    second = (fit(X, equivalent_view(X, Y, random_state)) if s1 == "x"
              else fit(equivalent_view(Y, X, random_state), Y))
    runs = [first, second]
    n, p, q = X.shape[0], first.x_rank_, first.y_rank_
    if s1 == "y":
        p, q = q, p
    seen, grams, frames = [], [], []
    for run in runs:
        got = run.transcript_.received_by(s1)
        messages = {"zhat": rns.unpack(_payload(got, "zhat"), (n, q), "zhat", "S1"),
                    "T": rns.unpack(_payload(got, "T"), (p, q), "T", "S1"),
                    "r_a": rns.unpack(_payload(got, "randomness").ra, (p, q), "r_a", "S1")}
        seen.append({k: np.concatenate([v[i].ravel() / prime
                                        for i, prime in enumerate(rns.PRIMES)])
                     for k, v in messages.items()})
        product = _decoded_product(run, s1, n, p, q)
        grams.append(product @ product.T)
        _, sigma, wt = np.linalg.svd(product, full_matrices=False)
        frames.append(wt[sigma > 1e-6 * sigma[0]].ravel())
    pvalues: dict[str, float] = {}
    for key in seen[0]:
        pvalues[f"{key}/two-sample"] = float(stats.ks_2samp(seen[0][key], seen[1][key]).pvalue)
        pvalues[f"{key}/uniform"] = float(stats.kstest(seen[1][key], "uniform").pvalue)
    pvalues["W/two-sample"] = float(stats.ks_2samp(frames[0], frames[1]).pvalue)

    def gap(a: Any, b: Any) -> float:
        a, b = np.asarray(a), np.asarray(b)
        return float(np.abs(a - b).max() / max(float(np.abs(a).max()), 1e-300))

    top = slice(0, _COMPARED)  # trailing components are near-degenerate: ill-conditioned
    same = max(gap(first.canonical_correlations_, second.canonical_correlations_),
               gap(first.x_weights_[:, top], second.x_weights_[:, top]),
               gap(first.y_weights_[:, top], second.y_weights_[:, top]))
    gram = float(np.abs(grams[0] - grams[1]).max())
    return SimulationCheck(
        pvalues=pvalues, alpha=alpha,
        indistinguishable=(min(pvalues.values()) >= alpha / len(pvalues) and same < 1e-5
                           and gram < 1e-6),
        same_outputs=same, gram_difference=gram)


def audit_scca(
    X: Array, Y: Array, *, rank_tol: float | None = 1e-10, reg: float = 0.0,
    random_state: int | np.random.Generator | None = 0, extra_rows: int = 10,
    protocol: str = "paper", alpha: float = 0.01, progress: ProgressOption = None,
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
    alpha
        The simulation check's family-wise level, a float in (0, 0.5] (secure protocol).
    progress
        One step per stage (``True``: a bar; a callable gets each
        :class:`~islands.progress.ProgressUpdate`).
    """
    sink = check_progress(progress, "audit_scca")
    alpha = check_float(alpha, "alpha", "audit_scca", low=0.0, low_inclusive=False, high=0.5)
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if protocol not in ("paper", "secure"):
        raise ValidationError(f"audit_scca: protocol must be 'paper' or 'secure'; got "
                              f"{protocol!r}")
    secure = protocol == "secure"
    with task(sink, "audit scca", 3 if secure else 2, owner="audit_scca") as running:
        running.update(0, f"fitting SCCA (protocol={protocol!r})")
        cca = SwarmCCA(protocol=protocol, perturb=None if secure else True, rank_tol=rank_tol,
                       reg=reg, keep_payloads=True).fit(X, Y)
        s1_name = "x" if cca.roles_["x"] == "s1" else "y"
        s2_name = "y" if s1_name == "x" else "x"
        s1_data, s2_data = (X, Y) if s1_name == "x" else (Y, X)
        truth_s1, truth_s2 = cca.results_[s1_name], cca.results_[s2_name]
        t: Transcript = cca.transcript_

        running.update(1, "the attacks on the transcript")
        w2 = maths.whiten(s2_data, reg=reg, rank_tol=rank_tol)  # ground truth only
        q = w2.rank
        k1_error: float | None = None
        k2_error: float | None = None
        product_attack: float | None = None
        if secure:
            basis = span_from_ring_message(t.received_by(s1_name), s1_data.shape[0], q)
            w1 = maths.whiten(s1_data, reg=reg, rank_tol=rank_tol)
            product = _decoded_product(cca, s1_name, s1_data.shape[0], w1.rank, q)
            guess = np.linalg.qr(w1.basis @ product)[0]
            off = guess - w2.basis @ (w2.basis.T @ guess)
            product_attack = float(np.sqrt(2.0) * np.linalg.norm(off) / np.sqrt(q))
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

        simulation = None
        if secure:
            running.update(2, "the simulation check: the protocol twice more, on Y and on a Y′")
            simulation = simulation_check(s1_data, s2_data, alpha=alpha, reg=reg,
                                          rank_tol=rank_tol, random_state=random_state)
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
            extra_rows=extra_rows, protocol=protocol, simulation=simulation,
            projector_error_from_product=product_attack,
        )
