"""One-run empirical privacy audit of federated DP-PCA: canary rows in one site.

m canary rows are drawn (unit directions from the CSPRNG, orthonormal while m ≤ d,
:func:`canary_directions`), each included in one
site's data with probability ½ (:func:`~islands.privacy.audit.draw_membership`), and
:class:`~islands.pca.FederatedPCA` runs **once**. An auditor who knows every other row
(the adversary of differential privacy) then scores each canary from what was released,
and :func:`~islands.privacy.audit.audit_scores` turns the scores into Steinke, Nasr and
Jagielski's lower bound on ε [1]_, compared with the configured ε (basic composition of
the two halves, the mean and the second moment [3]_), and Mahloujifar, Melis and Chaudhuri's
bound against the Gaussian curve through (ε, δ) [2]_: every mode is an unsampled
composition of two Gaussian releases, whose true curve is at least that one.

The two views
-------------
* **White-box** (what site 1 decodes: the noisy sum of unit rows n·μ̂ and the noisy
  second moment n·A'; in ``secure`` site 1 also knows its own noise share, which the
  audit does not remove: the guarantee holds against both). Knowing the other rows, the
  auditor forms the residuals R_μ = n·μ̂ − Σ_other x̂ = Σ_in x̂_c + e and
  R_A = n·A' − Σ_other x̃x̃ᵀ = Σ_in x̃_c x̃_cᵀ + nE (x̃ recomputed on the released mean
  with :func:`~islands.pca.maths.centre_rows`). That is a linear model in the membership
  bits b: R = M b + noise, with the noise s.d. of each release. The score is the linear
  MMSE estimate of b under the prior b_c = ½ ± ½ (ridge 4I), each release weighted by its
  noise variance **read from the release** (the residual of the second moment's fit,
  d(d+1)/2 − m degrees of freedom; the mean's when m ≤ d − 8, else the claimed one).
  With the claimed noise it is close to the matched filter
  ⟨x̂_c, R_μ⟩/σ_μ² + ⟨x̃_c x̃_cᵀ, R_A⟩/(nτ)²; a release without noise gets all the weight
  and its canaries are decoded exactly, where a matched filter would drown in the other
  canaries' cross terms (m random directions in d dimensions interfere). In
  ``elfedpca`` site 1 knows E (it drew the seed, :mod:`islands.pca.audit`), so the
  auditor subtracts it, as it does all the noise when ``noise_seed`` is known.
* **Black-box** (what every site and the publisher get: the components V'):
  s_c = ‖V' x̃_c‖², the canary's variance captured by the released subspace.

Canaries and modes
------------------
Canary rows are unit vectors u_c for the modes that scale rows to unit norm first
(``secure``, ``central``, ``dpdispca``); in ``elfedpca``, which centres raw rows on the
exact mean, a unit row would point along −μ whatever its direction, so its canaries are
c̄ + ρ·u_c (c̄ the other rows' mean, ρ their RMS distance to it). The canaries go to one
site other than site 1, which aggregates (the observer). The row count n is public in
islands' PCA; the scores use it only as the scale of the releases.

What one run can and cannot show (β = 0.05, δ = 1e-5, digits, 3 sites)
----------------------------------------------------------------------
The correct mechanisms' bounds sit near 0: the classic Gaussian calibration has slack (the
true per-canary μ is about 0.13 at ε = 0.9, a GDP ε of about 0.44), so the audit can only
show them consistent (at m = 1,000, 20 runs a mode: every bound ≤ 0.34, medians 0). A
release without noise (either half), known noise (``noise_seed``), the rows' unit scaling
skipped (canaries of norm 100) and ``elfedpca`` give perfect guesses: the bound is the
plans' ceiling (5.50 at m = 1,000; 2.33 at m = 56), far above ε < 1. A noiseless *mean*
is decoded only while m ≤ d − 8: d numbers cannot carry more canaries' bits to a linear
decoder. Noise halved is **not** detectable. Its true ε (tight, μ = 0.255) is 0.95, about
the configured 0.9; against the curve of the noise actually configured (μ = 0.128, ε 0.44)
it would be a violation, but a one-run curve bound reaches 0.44 for a μ = 0.255 mechanism
only with about 10⁴ canaries that do not interfere, and the second moment holds at most
d(d + 1)/2 numbers that rank-one canary rows share (2,080 for digits).

References
----------
.. [1] T. Steinke, M. Nasr, M. Jagielski. "Privacy Auditing with One (1) Training Run."
   NeurIPS 2023, arXiv:2305.08846.
.. [2] S. Mahloujifar, L. Melis, K. Chaudhuri. "Auditing f-Differential Privacy in One
   Run." ICML 2025, arXiv:2410.22235.
.. [3] C. Dwork, K. Talwar, A. Thakurta, L. Zhang. "Analyze Gauss: optimal bounds for
   privacy-preserving principal component analysis." STOC 2014.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.arrays import Array
from islands.crypto.prg import csprng_normal
from islands.errors import invalid_parameter
from islands.pca import maths
from islands.pca.estimator import FederatedPCA
from islands.pca.protocol import (
    Noise,
    PcaConfig,
    _moment_tau,  # the calibration the protocol uses, to regenerate a known noise_seed's draws
    _noise,
    centring_of,
    elfedpca_noise,
)
from islands.privacy.audit import (
    CurveClaim,
    GuessPlan,
    OneRunAudit,
    audit_scores,
    bonferroni_plans,
    check_confidence,
    draw_membership,
    gaussian_mu,
    isotropic_canaries,
    plan_for_gaussian,
)
from islands.validation import check_float, check_int, describe

__all__ = ["AUDITED_MODES", "PcaDpAudit", "audit_pca_dp", "canary_directions", "canary_rows",
           "noiseless_plan", "pca_plans", "white_box_scores"]

AUDITED_MODES = ("secure", "central", "dpdispca", "elfedpca")
"""The DP modes an audit runs (``plain`` adds no noise and claims nothing)."""

_SPARE_DOF = 8  # residual degrees of freedom needed to read a release's noise from it
_FLOOR = 1e-4  # smallest noise s.d. a release is weighted with, relative to the claimed one
_PRIOR_PRECISION = 4.0  # 1/Var(b_c) for b_c ∈ {0, 1} with probability ½ each


@dataclasses.dataclass(frozen=True)
class PcaDpAudit:
    """The outcome of :func:`audit_pca_dp`: one :class:`OneRunAudit` per view.

    Attributes
    ----------
    mode, epsilon, delta
        The mode audited and its configured (ε, δ): the claim both views compare with.
    dp_guarantee
        Whether the fit itself claims the guarantee (False for ``elfedpca`` and with
        ``noise_seed``; the audit then shows what the configured ε is worth).
    canaries, site, canary_design
        m, the index of the part that held the canaries, and how they were built.
    n, d, sites
        Rows released over (with the included canaries), features, sites.
    noise
        S.d. of each release's noise: ``claimed`` (the fit's ``mean_noise_std_`` and
        n·``noise_std_``), ``weighted`` (what the white-box score weighted each release
        with: read from it, or the claim) and ``removed``
        (what the auditor subtracted as known: ``elfedpca``'s E, a known ``noise_seed``).
    white_box, black_box
        The audits of the white-box (noisy moments) and black-box (components) scores.
    seconds
        Wall time of the fit and of the whole audit.
    """

    mode: str
    epsilon: float
    delta: float
    dp_guarantee: bool
    canaries: int
    site: int
    canary_design: str
    n: int
    d: int
    sites: int
    noise: dict[str, dict[str, float | None]]
    white_box: OneRunAudit
    black_box: OneRunAudit
    seconds: dict[str, float]

    @property
    def contradicted(self) -> bool:
        """Whether a view's Steinke bound exceeds the configured ε."""
        return self.white_box.contradicted or self.black_box.contradicted

    def to_dict(self) -> dict[str, Any]:
        """Return everything as JSON-ready values (the views under ``views``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("white_box", "black_box")}
        out["mechanism"] = "pca"
        out["views"] = {"white-box": self.white_box.to_dict(),
                        "black-box": self.black_box.to_dict()}
        out["contradicted"] = self.contradicted
        return out


# ------------------------------------------------------------------ pure maths


def canary_rows(directions: Array, others: Array, *, centring: maths.Centring,
                norm: float = 1.0) -> Array:
    """Return the canary rows for unit ``directions`` (m×d) given the other rows.

    ``released`` centring scales rows to unit norm first: the rows are ``norm``·u_c
    (``norm`` ≠ 1 exercises that scaling, the mechanism's bound). ``published`` centring
    centres raw rows on the exact mean, so a unit row next to data of norm ≫ 1 would point
    along −μ whatever its direction: the rows are c̄ + ``norm``·ρ·u_c, with c̄ the other
    rows' mean and ρ their RMS distance to it.
    """
    if centring != "published":
        return norm * np.array(directions, dtype=np.float64)
    centre = others.mean(axis=0)
    spread = math.sqrt(float(np.mean(np.sum((others - centre) ** 2, axis=1)))) or 1.0
    out: Array = centre + norm * spread * directions
    return out


def _upper_outer(rows: Array) -> Array:
    """Upper triangles (with the diagonal) of every row's x xᵀ, one per row: m × d(d+1)/2."""
    i, j = np.triu_indices(rows.shape[1])
    out: Array = rows[:, i] * rows[:, j]
    return out


def _residual_sd(design: Array, gram: Array, y: Array) -> float | None:
    """Noise s.d. left by the least-squares fit of y on the rows of ``design`` (m × N).

    ``gram`` is design·designᵀ. None when fewer than :data:`_SPARE_DOF` degrees of freedom
    remain (N − m).
    """
    m, size = design.shape
    if size - m < _SPARE_DOF:
        return None
    try:
        coef = np.linalg.solve(gram, design @ y)
    except np.linalg.LinAlgError:  # canaries in a degenerate position: the slow, safe way
        coef = np.linalg.lstsq(design.T, y, rcond=None)[0]
    residual = y - design.T @ coef
    return math.sqrt(float(residual @ residual) / (size - m))


def white_box_scores(releases: Sequence[tuple[Array, Array, float | None, float]]
                     ) -> tuple[NDArray[np.float64], list[float]]:
    """Score m canaries from linear releases R_j = M_jᵀ b + N(0, σ_j² I), b ∈ {0, 1}^m.

    Each release is (M_j (m × N_j), R_j (N_j), claimed σ_j or None, floor_j). σ_j is read
    from the release's own least-squares residual when N_j − m ≥ 8 (a release without
    noise then gets all the weight), else the claimed value is used; either is raised to
    at least ``floor_j``. The score is the linear MMSE estimate of b − ½ under the prior
    Var(b_c) = ¼: (Σ_j M_j M_jᵀ/σ_j² + 4I)⁻¹ Σ_j M_j (R_j − M_jᵀ ½)/σ_j². With the claimed
    noise and m ≪ d it is the matched filter, the Neyman–Pearson statistic of one canary;
    the inverse removes the other canaries' cross terms.

    Parameters
    ----------
    releases
        The releases, as above.

    Returns
    -------
    scores, sds
        One score per canary (higher: more likely included) and the σ_j used.
    """
    m = releases[0][0].shape[0]
    hessian = _PRIOR_PRECISION * np.eye(m)
    gradient = np.zeros(m)
    sds = []
    for design, y, claimed, floor in releases:
        gram = design @ design.T
        measured = _residual_sd(design, gram, y)
        sd = max(floor, measured if measured is not None else (claimed or 0.0))
        sds.append(sd)
        hessian += gram / sd**2
        gradient += design @ (y - design.T @ np.full(m, 0.5)) / sd**2
    scores: NDArray[np.float64] = np.asarray(np.linalg.solve(hessian, gradient),
                                             dtype=np.float64)
    return scores, sds


# ------------------------------------------------------------------ the audit


def _check_parts(parts: Any, owner: str) -> list[Array]:
    ok = isinstance(parts, Sequence) and not isinstance(parts, np.ndarray) and len(parts) >= 2
    arrays = []
    if ok:
        for part in parts:
            arr = np.asarray(part, dtype=np.float64) if isinstance(
                part, (np.ndarray, list, tuple)) else None
            if arr is None or arr.ndim != 2 or arr.shape[0] < 1 or not np.all(np.isfinite(arr)):
                ok = False
                break
            arrays.append(arr)
    if not ok or len({a.shape[1] for a in arrays}) != 1:
        raise invalid_parameter("parts", owner, "a list of >= 2 finite 2-D arrays (one per "
                                "site) with the same number of columns", describe(parts))
    return arrays


def _known_noise(model: FederatedPCA, config: PcaConfig, rows: Sequence[int], d: int
                 ) -> tuple[Array, Array]:
    """Noise the observer knows, on n·μ̂ (d) and on the upper triangle of n·A'.

    ``elfedpca``: E, from the seed site 1 sent. With ``noise_seed``: every draw, redrawn
    with the protocol's own keyed streams. Otherwise nothing.
    """
    n = model.n_samples_
    mean = np.zeros(d)
    moment = np.zeros((d, d))
    if config.mode == "elfedpca":
        sent = [r.payload for r in model.transcript_.sent_by(config.aggregator)
                if r.tag == "noise"]
        seed = sent[0]
        assert isinstance(seed, Noise)
        tau = maths.gaussian_tau(seed.epsilon, seed.delta, n)
        moment = n * maths.symmetric_noise(d, tau, elfedpca_noise(seed.seed))
    elif config.noise_seed is not None:
        assert config.epsilon is not None and config.delta is not None
        sigma_mu = maths.mean_sigma(config.epsilon, config.delta)
        s = len(config.sites)
        if config.mode == "central":
            mean = _noise(config, "mean")(d, sigma_mu)
            moment = n * maths.symmetric_noise(d, _moment_tau(config, n),
                                               _noise(config, "moment"))
        for name, count in zip(config.sites, rows, strict=True):
            if config.mode == "secure":
                mean = mean + _noise(config, f"mean {name}")(d, maths.share_sigma(sigma_mu, s))
                moment = moment + maths.symmetric_noise(
                    d, maths.share_sigma(_moment_tau(config, 1), s),
                    _noise(config, f"moment {name}"))
            elif config.mode == "dpdispca":  # n·(N_i/n)·E_i, E_i of s.d. τ(N_i)
                mean = mean + _noise(config, f"mean {name}")(d, sigma_mu)
                moment = moment + count * maths.symmetric_noise(
                    d, maths.moment_tau(config.epsilon, config.delta, count),
                    _noise(config, f"moment {name}"))
    return mean, maths.upper_of(moment)


def noiseless_plan(m: int) -> GuessPlan:
    """Plan for scores that separate the canaries perfectly (a release without noise).

    Two-sided, k = ⌊(m − 2√m)/2⌋ each way: as many guesses as possible, leaving two
    standard deviations of the included count (Binomial(m, ½)) so that the k highest are
    all included and the k lowest all excluded in about 95 % of runs (guessing k = m/2
    each way would make |K − m/2| guesses wrong in every run).

    Parameters
    ----------
    m
        Canaries, an int >= 2.

    Returns
    -------
    GuessPlan
        (k, k).

    Raises
    ------
    ValidationError
        If ``m`` is out of range.
    """
    m = check_int(m, "m", "noiseless_plan", low=2)
    k = max(1, math.floor((m - 2 * math.sqrt(m)) / 2))
    return GuessPlan(k, k, "(b) a release without noise: about every canary")


def canary_directions(d: int, m: int) -> Array:
    """Draw m unit canary directions in R^d from the CSPRNG: orthonormal while m <= d.

    Orthonormal directions (the Q of a Gaussian matrix's QR) do not interfere in the
    released mean at all; beyond d they cannot be, and are drawn independently
    (:func:`~islands.privacy.audit.isotropic_canaries`).

    Parameters
    ----------
    d
        Dimension, an int >= 1.
    m
        Canaries, an int >= 1.

    Returns
    -------
    ndarray of float64, shape (m, d)
        Unit rows.

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    d = check_int(d, "d", "canary_directions", low=1)
    m = check_int(m, "m", "canary_directions", low=1)
    if m > d:
        return isotropic_canaries(d, m)
    q, r = np.linalg.qr(csprng_normal((d, m), 1.0))
    out: Array = (q * np.where(np.diag(r) < 0, -1.0, 1.0)).T  # Haar: signs from R's diagonal
    return np.ascontiguousarray(out)


def pca_plans(epsilon: float, delta: float, m: int, confidence: float = 0.95, *,
              black_box: bool = False) -> tuple[GuessPlan, ...]:
    """Return the guess plans of a PCA audit, fixed before the run from public parameters.

    (a) two-sided k planned for the claim (scores N(μ·[in], 1), μ of the Gaussian through
    (ε, δ)); (b) :func:`noiseless_plan`, for a release without noise (every canary
    decoded: about all of them guessed, the plan that nears the ceiling). The Gaussian harness's
    third plan (one-sided, for one noiseless release among T sampled ones) has nothing to
    find in PCA's two unsampled releases, and each plan costs level (β/G). The black box,
    whose score distribution is unknown, adds :func:`~islands.privacy.audit.bonferroni_plans`
    (1 %, 5 %, 20 % of the canaries): G = 5.

    Parameters
    ----------
    epsilon, delta
        The configured (ε, δ), each in (0, 1).
    m
        Canaries, an int >= 2.
    confidence
        1 − β, in (0, 1).
    black_box
        Add the three fractions.

    Returns
    -------
    tuple of GuessPlan
        G = 2 plans, or 5 with ``black_box``.

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    eps, delta = maths.check_privacy(epsilon, delta, "pca_plans")
    extra = bonferroni_plans(m) if black_box else ()
    g = 2 + len(extra)
    return (plan_for_gaussian(gaussian_mu(eps, delta), m, delta, confidence, plans=g,
                              label="(a) planned for the claim"),
            noiseless_plan(m), *extra)


def audit_pca_dp(parts: Sequence[ArrayLike], *, mode: str = "secure", epsilon: float = 0.5,
                 delta: float = 1e-5, canaries: int = 1000, site: int = 1,
                 n_components: int = 5, confidence: float = 0.95, canary_norm: float = 1.0,
                 noise_seed: int | None = None) -> PcaDpAudit:
    """Audit federated DP-PCA once: m canary rows in one site, white- and black-box.

    Draws m canary directions and their membership bits from the CSPRNG, appends the
    included canary rows (:func:`canary_rows`) to ``parts[site]``, fits
    :class:`~islands.pca.FederatedPCA` once, scores every canary from the noisy moments
    site 1 decodes (:func:`white_box_scores`) and from the released components
    (‖V' x̃_c‖²), and compares the bounds of :func:`~islands.privacy.audit.audit_scores`
    with the configured ε (the two halves' basic composition). Plans are fixed before the
    run from public parameters (:func:`pca_plans`: G = 2 white-box, 5 black-box).

    Parameters
    ----------
    parts
        The sites' rows without canaries: a list of >= 2 finite (N_i × d) arrays.
    mode
        One of :data:`AUDITED_MODES`. ``elfedpca`` claims no guarantee; its configured ε
        (the one its noise is calibrated for) is what the audit compares with.
    epsilon, delta
        The configured (ε, δ), each in (0, 1) (the classic Gaussian mechanism).
    canaries
        m, an int in [2, d(d+1)/2 − 8]. A noiseless mean is decoded only for m ≤ d − 8.
    site
        Index into ``parts`` (0-based) of the site given the canaries, in [1, s − 1]:
        never 0, site 1, which aggregates and is the observer.
    n_components
        k, in [1, d]: the released subspace the black-box score reads.
    confidence
        1 − β, in (0, 1).
    canary_norm
        Scale of the canary rows (:func:`canary_rows`), a float > 0; the modes that scale
        rows to unit norm make it irrelevant, unless that scaling is skipped.
    noise_seed
        Passed to the fit: the noise becomes reproducible, the fit claims no guarantee,
        and the auditor, who knows the seed, subtracts every draw.

    Returns
    -------
    PcaDpAudit
        Both views' audits; ``to_dict()`` gives JSON-ready values.

    Raises
    ------
    ValidationError
        If a parameter is out of range (before anything runs).
    """
    owner = "audit_pca_dp"
    started = time.perf_counter()
    arrays = _check_parts(parts, owner)
    if mode not in AUDITED_MODES:
        raise invalid_parameter("mode", owner, f"one of {list(AUDITED_MODES)}", mode)
    eps, delta = maths.check_privacy(epsilon, delta, owner)
    d, s = arrays[0].shape[1], len(arrays)
    m = check_int(canaries, "canaries", owner, low=2, high=d * (d + 1) // 2 - _SPARE_DOF)
    site = check_int(site, "site", owner, low=1, high=s - 1)
    k = check_int(n_components, "n_components", owner, low=1, high=d)
    conf = check_confidence(confidence, owner)
    norm = check_float(canary_norm, "canary_norm", owner, low=0.0, low_inclusive=False)
    if noise_seed is not None:
        check_int(noise_seed, "noise_seed", owner, low=0)
    centring = centring_of(mode)
    white_plans = pca_plans(eps, delta, m, conf)
    black_plans = pca_plans(eps, delta, m, conf, black_box=True)

    others = np.vstack(arrays)
    rows = canary_rows(canary_directions(d, m), others, centring=centring, norm=norm)
    included = draw_membership(m)
    audited = [a if i != site else np.vstack([a, rows[included]]) for i, a in enumerate(arrays)]
    model = FederatedPCA(k, epsilon=eps, delta=delta, mode=mode, noise_seed=noise_seed,
                         keep_payloads=mode == "elfedpca")
    fit_started = time.perf_counter()
    with warnings.catch_warnings():  # a void guarantee is what such an audit measures
        warnings.simplefilter("ignore", UserWarning)
        model.fit(audited)
    fit_seconds = time.perf_counter() - fit_started
    config = PcaConfig(mode=mode, n_components=k,  # type: ignore[arg-type]
                       sites=tuple(f"site{i + 1}" for i in range(s)), publisher="publisher",
                       epsilon=eps, delta=delta, noise_seed=noise_seed)

    # white box: residuals of what site 1 decodes, once every other row is subtracted
    n = model.n_samples_
    known_mean, known_moment = _known_noise(model, config, [a.shape[0] for a in audited], d)
    if centring == "published":
        other_sum, canary_sum_rows = others.sum(axis=0), rows
    else:
        other_sum = maths.normalize_rows(others).sum(axis=0)
        canary_sum_rows = maths.normalize_rows(rows)
    other_centred = maths.centre_rows(others, model.mean_, centring=centring)
    canary_centred = maths.centre_rows(rows, model.mean_, centring=centring)
    r_mean = n * model.mean_ - other_sum - known_mean
    decoded = model.noisy_moment_  # what site 1 decomposed: A'
    assert decoded is not None
    r_moment = maths.upper_of(n * decoded - other_centred.T @ other_centred) - known_moment
    ref_mean = maths.mean_sigma(eps, delta)
    ref_moment = (maths.gaussian_tau(eps, delta, 1) if mode == "elfedpca"
                  else maths.moment_tau(eps, delta, 1))
    claimed_mean = model.mean_noise_std_  # None in elfedpca: its mean is exact
    claimed_moment = None if model.noise_std_ is None else n * model.noise_std_
    if mode == "elfedpca" or noise_seed is not None:  # the noise the observer knows is gone
        claimed_moment = 0.0
        if noise_seed is not None:
            claimed_mean = 0.0
    scores, sds = white_box_scores([
        (canary_sum_rows, r_mean, claimed_mean, _FLOOR * ref_mean),
        (_upper_outer(canary_centred), r_moment, claimed_moment, _FLOOR * ref_moment)])
    curve = CurveClaim.gaussian(gaussian_mu(eps, delta))  # the curve through (ε, δ)
    white = audit_scores(scores, included, delta=delta, plans=white_plans, confidence=conf,
                         claimed_epsilon=eps, curve=curve)

    # black box: the canary's variance in the released subspace
    captured = np.sum((canary_centred @ model.components_.T) ** 2, axis=1)
    black = audit_scores(captured, included, delta=delta, plans=black_plans, confidence=conf,
                         claimed_epsilon=eps, curve=curve)
    return PcaDpAudit(
        mode=mode, epsilon=eps, delta=delta, dp_guarantee=bool(model.dp_guarantee_),
        canaries=m, site=site,
        canary_design=(("orthonormal" if m <= d else "isotropic") + " directions; " +
                       (f"rows of norm {norm:g}" if centring == "released" else
                        f"rows at the other rows' mean + {norm:g} × their RMS spread")),
        n=n, d=d, sites=s,
        noise={"claimed": {"mean": (None if model.mean_noise_std_ is None
                                    else float(model.mean_noise_std_)),
                           "moment": (None if model.noise_std_ is None
                                      else float(n * model.noise_std_))},
               "weighted": {"mean": sds[0], "moment": sds[1]},
               "removed": {"mean": float(np.std(known_mean)) if known_mean.any() else None,
                           "moment": (float(np.std(known_moment)) if known_moment.any()
                                      else None)}},
        white_box=white, black_box=black,
        seconds={"fit": fit_seconds, "total": time.perf_counter() - started})
