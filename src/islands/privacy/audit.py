"""Empirical privacy audit in one run: a lower bound on ε from canaries' membership guesses.

The accountant (:mod:`islands.privacy.accountant`) gives an *upper* bound on ε, valid if the
mechanism is implemented as analysed. An audit gives a *lower* bound measured on the
implementation itself: m canaries are each included with probability ½ (coins from the
CSPRNG, :func:`draw_membership`), the mechanism runs **once**, an attacker scores every
canary from what was released and guesses "in" for the k₊ highest scores, "out" for the
k₋ lowest, and abstains on the rest. Steinke, Nasr and Jagielski [1]_ (their main theorem,
and the p-value procedure of their Appendix D) show that if the mechanism is (ε, δ)-DP, the
number W of correct guesses out of r = k₊ + k₋ satisfies, for every v,

    P[W ≥ v] ≤ f_ε(v) + 2mδ · max_{1 ≤ i ≤ v} (f_ε(v − i) − f_ε(v)) / i,
    f_ε(u) = P[Binomial(r, e^ε / (1 + e^ε)) ≥ u],

whatever the mechanism, score or data, as long as r is fixed before the run
(:class:`GuessPlan`, Bonferroni-corrected over several plans). The right-hand side is the
p-value of the claim "(ε, δ)-DP" (:func:`one_run_p_value`); the lower bound
(:func:`one_run_lower_bound`) is the smallest ε no longer rejected at level β = 1 − confidence.

Where the claim is a composition of Gaussian releases, its whole trade-off curve is known,
and the one-run test of Mahloujifar, Melis and Chaudhuri [2]_ against that curve
(:class:`CurveClaim`, :func:`curve_lower_bound`) is much tighter: the Gaussian curve G_μ
for unsampled releases (:func:`gaussian_curve_lower_bound`), and for Poisson-sampled ones
(DP-SGD) the curve of the accountant's own privacy profile (dp-accounting's PLD, every
(ε, δ(ε)) it guarantees), searched over the noise multiplier. The latter is what detects a
noise multiplier halved in DP-SGD, which (ε, δ) bounds alone miss. Andrew et al.'s
two-Gaussian fit [3]_ (:func:`andrew_estimate`) is printed beside the bounds as an
*estimate*: it has no confidence level and is never used to decide anything.

What a bound means
------------------
With probability at least 1 − β over the canaries' coins and the mechanism's randomness, a
mechanism that really were (ε, δ)-DP would not have produced that many correct guesses, for
every ε below the bound. A bound above the accountant's ε (at the same δ) therefore means
that the implementation or its accounting is wrong, or that an event of probability ≤ β
happened.

What it does not mean
---------------------
A bound below the accountant's ε certifies nothing: it is not an estimate of the "true" ε,
and weak attacks give low bounds. A one-run bound cannot exceed a ceiling that depends only
on m, δ and β (:func:`ceiling`: 5.78 at m = 1,000 and 8.2 for m ≥ 20,000 at δ = 1e-5,
β = 0.05), so a claim above the ceiling cannot be contradicted. The δ term 2mδ does not
shrink with the level, so a single run cannot be made arbitrarily confident (at
δ = 1e-5 no ε is ever rejected at β = 1e-6). A curve bound is valid only for the curve
the mechanism claims: the Gaussian one for unsampled Gaussian compositions, the
subsampled one (with the run's q and T) for Poisson-sampled releases. Each bound is one
test at level β; an audit that reports several (views, the (ε, δ) and the curve bound)
makes several tests, and its verdict says so.

Why written here
----------------
The statistics are a few formulas, re-derived here from the papers: the one maintained
implementation, ``jax_privacy.auditing``, ships inside a JAX training framework that
islands does not otherwise need, and none works on islands' mechanisms and canaries.
scipy is imported on first use, as :mod:`islands.privacy.accountant` does.

The Gaussian reference harness (:func:`audit_gaussian`) runs the audit on islands' own
Gaussian mechanism (:func:`~islands.privacy.clip_l2`, :func:`~islands.privacy.gaussian_noise`,
Poisson sampling from :func:`~islands.crypto.prg.csprng_uniform`) with Dirac canaries
(:func:`dirac_canaries`, as in Nasr et al. [4]_): each canary's update lies on a coordinate
only it owns, so the canaries do not interfere and the white-box score is one lookup.

References
----------
.. [1] T. Steinke, M. Nasr, M. Jagielski. "Privacy Auditing with One (1) Training Run."
   NeurIPS 2023, arXiv:2305.08846.
.. [2] S. Mahloujifar, L. Melis, K. Chaudhuri. "Auditing f-Differential Privacy in One
   Run." ICML 2025, arXiv:2410.22235.
.. [3] G. Andrew, P. Kairouz, S. Oh, A. Oprea, H. B. McMahan, V. Suriyakumar. "One-shot
   Empirical Privacy Estimation for Federated Learning." ICLR 2024, arXiv:2302.03098.
.. [4] M. Nasr, J. Hayes, T. Steinke, B. Balle, F. Tramèr, M. Jagielski, N. Carlini,
   A. Terzis. "Tight Auditing of Differentially Private Machine Learning." USENIX Security
   2023, arXiv:2302.07956.
.. [5] J. Dong, A. Roth, W. J. Su. "Gaussian Differential Privacy." JRSS B 84(1), 2022
   (Corollary 2.13: the (ε, δ) profile of μ-GDP).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.crypto.prg import csprng_normal, csprng_uniform
from islands.errors import invalid_parameter
from islands.privacy.accountant import PrivacyAccountant, privacy_profile
from islands.privacy.mechanisms import clip_l2, gaussian_noise
from islands.validation import check_float, check_int, describe

__all__ = [
    "EPSILON_CAP",
    "CurveClaim",
    "DiracCanaries",
    "GaussianMechanism",
    "GuessPlan",
    "OneRunAudit",
    "andrew_estimate",
    "audit_gaussian",
    "audit_prefix",
    "audit_scores",
    "bonferroni_plans",
    "ceiling",
    "check_confidence",
    "curve_lower_bound",
    "curve_plan_for_gaussian",
    "default_plans",
    "dirac_canaries",
    "draw_membership",
    "gaussian_curve_lower_bound",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "gaussian_releases",
    "isotropic_canaries",
    "one_run_lower_bound",
    "one_run_p_value",
    "plan_for_gaussian",
    "sampled_curve_plans",
    "white_box_scores",
]

EPSILON_CAP = 64.0
"""Largest ε the searches consider: a bound or estimate equal to it means "at least 64"."""

_TOL = 1e-6  # ε resolution of every bound
_PLAN_TOL = 1e-3  # coarser resolution while searching plans (only the argmax matters)
_MAD_TO_SD = 1.482602218505602  # 1 / Φ⁻¹(3/4): the median |N(0, σ²)| is σ / 1.4826
_SPARE_COORDINATES = 1024  # canary-free coordinates from which each release's noise s.d. is read
_NORMAL = NormalDist()


def _special() -> Any:
    """Import ``scipy.special`` on first use (scipy is heavy; ``import islands`` stays light)."""
    return importlib.import_module("scipy.special")


def _optimize() -> Any:
    return importlib.import_module("scipy.optimize")


# --------------------------------------------------------------------------- checks


def _check_delta(delta: Any, owner: str, *, zero: bool = True) -> float:
    return check_float(delta, "delta", owner, low=0.0, low_inclusive=zero, high=1.0,
                       high_inclusive=False)


def check_confidence(confidence: Any, owner: str) -> float:
    """Return a confidence 1 − β in (0, 1), or raise an error naming ``owner``."""
    return check_float(confidence, "confidence", owner, low=0.0, low_inclusive=False,
                       high=1.0, high_inclusive=False)


def _check_counts(m: Any, r: Any, v: Any, owner: str) -> tuple[int, int, int]:
    m = check_int(m, "m", owner, low=1)
    r = check_int(r, "r", owner, low=0, high=m)
    v = check_int(v, "v", owner, low=0, high=r)
    return m, r, v


# ------------------------------------------------------- Steinke, Nasr, Jagielski


def _p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Return the p-value of "(ε, δ)-DP" for v correct out of r guesses on m canaries."""
    if v == 0:
        return 1.0
    survival = _special().bdtrc  # bdtrc(k, r, q) = P[Binomial(r, q) > k], from the tail
    q = 1.0 / (1.0 + math.exp(-epsilon))  # accuracy of ε-randomised response
    f_v = float(survival(v - 1, r, q))  # P[W ≥ v]
    if delta == 0.0:
        return min(1.0, f_v)
    # α = max_{1≤i≤v} P[v − i ≤ W < v] / i. Terms with v − i far below the binomial's bulk
    # have P[W ≥ v − i] = 1 to double precision, and then (1 − f_v)/i only decreases: the
    # sum stops at i_max, and (1 − f_v)/(i_max + 1) bounds every later term, so the α used
    # is never below the exact one (the p-value only errs upwards).
    spread = 40.0 * math.sqrt(r * q * (1.0 - q)) + 40.0
    i_max = int(min(v, max(1.0, v - (r * q - spread))))
    i = np.arange(1, i_max + 1)
    tail = survival(v - 1 - i, r, q)  # P[W ≥ v − i]; 1 when v − i ≤ 0
    alpha = float(np.max((tail - f_v) / i))
    if i_max < v:
        alpha = max(alpha, (1.0 - f_v) / (i_max + 1))
    return min(1.0, f_v + 2.0 * m * delta * alpha)


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Return the p-value of the claim "(ε, δ)-DP" after v correct guesses out of r.

    The right-hand side of Steinke, Nasr and Jagielski's bound [1]_ (see the module
    docstring): the largest probability that an (ε, δ)-DP mechanism lets an attacker make
    at least v correct guesses out of r fixed in advance, on m canaries each included with
    probability ½. A p-value ≤ β rejects the claim at confidence 1 − β.

    Parameters
    ----------
    m
        Canaries, an int >= 1.
    r
        Guesses (canaries not abstained on), an int in [0, m], fixed before the run.
    v
        Correct guesses, an int in [0, r].
    epsilon
        ε of the claim, a float >= 0.
    delta
        δ of the claim, a float in [0, 1); the accountant's δ.

    Returns
    -------
    float
        The p-value, in (0, 1].

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    Examples
    --------
    Ten guesses, all right, against pure ε-DP: the p-value is q_ε^10.

    >>> round(one_run_p_value(10, 10, 10, 1.0, 0.0), 4)
    0.0436

    References
    ----------
    .. [1] T. Steinke, M. Nasr, M. Jagielski. "Privacy Auditing with One (1) Training Run."
       NeurIPS 2023, arXiv:2305.08846 (main theorem; Appendix D's procedure).
    """
    owner = "one_run_p_value"
    m, r, v = _check_counts(m, r, v, owner)
    eps = check_float(epsilon, "epsilon", owner, low=0.0)
    return _p_value(m, r, v, eps, _check_delta(delta, owner))


def _first_crossing(excess: Callable[[float], float], tol: float = _TOL) -> float:
    """Return the smallest ε ≥ 0 at which ``excess`` is ≤ 0 (the claim no longer rejected).

    ``excess(ε) > 0`` means "(ε, ·) is rejected". The bound is the *first* ε not rejected,
    not the last one rejected: if the truth is ε₀ and the bound came out above it, then ε₀
    itself was rejected, an event of probability ≤ β. That keeps the bound valid even where
    the test is not monotone in ε. A doubling bracket (0, ½, 1, 2, …, 64), Brent's method
    in the first bracket that crosses, then a check of 16 points below the root; the
    result errs low by at most ``tol``.
    """
    if excess(0.0) <= 0.0:
        return 0.0
    lo, hi = 0.0, 0.5
    while excess(hi) > 0.0:
        if hi >= EPSILON_CAP:
            return EPSILON_CAP
        lo, hi = hi, 2.0 * hi
    root = float(_optimize().brentq(excess, lo, hi, xtol=tol / 4))
    if excess(root) <= 0.0:
        root = max(lo, root - tol)
    for point in np.linspace(0.0, root, 18)[1:-1]:
        if excess(float(point)) <= 0.0:  # a crossing the bracket missed: stop below it
            return float(point)
    return root


@functools.lru_cache(maxsize=4096)
def _lower_bound(m: int, r: int, v: int, delta: float, beta: float, tol: float = _TOL) -> float:
    if v == 0:
        return 0.0
    if _p_value(m, r, v, 0.0, 0.0) > beta:  # not even rejected without the δ term
        return 0.0
    return _first_crossing(lambda eps: beta - _p_value(m, r, v, eps, delta), tol)


def one_run_lower_bound(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """Return the one-run lower bound on ε: the smallest ε not rejected at 1 − ``confidence``.

    Every ε below the returned value is rejected by :func:`one_run_p_value` at level
    β = 1 − confidence. If the mechanism is (ε₀, δ)-DP, the bound exceeds ε₀ with
    probability at most β (Steinke, Nasr and Jagielski [1]_), for any score and any r
    fixed before the run.

    Parameters
    ----------
    m, r, v
        Canaries, guesses and correct guesses, as in :func:`one_run_p_value`.
    delta
        δ, a float in [0, 1): compare the bound only with an ε reported at this δ.
    confidence
        1 − β, a float in (0, 1); 0.95 by default.

    Returns
    -------
    float
        The bound, in [0, :data:`EPSILON_CAP`], accurate to 1e-6 and never above the exact
        first crossing by more than that.

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    Examples
    --------
    Ten canaries, ten right guesses, δ = 0: the bound is logit(β^{1/10}).

    >>> round(one_run_lower_bound(10, 10, 10, 0.0, 0.95), 4)
    1.0519

    References
    ----------
    .. [1] T. Steinke, M. Nasr, M. Jagielski. "Privacy Auditing with One (1) Training Run."
       NeurIPS 2023, arXiv:2305.08846.
    """
    owner = "one_run_lower_bound"
    m, r, v = _check_counts(m, r, v, owner)
    delta = _check_delta(delta, owner)
    beta = 1.0 - check_confidence(confidence, owner)
    return _lower_bound(m, r, v, delta, beta)


@functools.lru_cache(maxsize=128)
def _ceiling(m: int, delta: float, beta: float) -> float:
    def best(r: int) -> float:
        return _lower_bound(m, r, r, delta, beta, _PLAN_TOL)

    # the bound for r right guesses out of r rises with r until the 2mδ term takes over;
    # a geometric grid finds the peak's neighbourhood, a ternary search on integers the peak
    grid = sorted({max(1, round(m ** (j / 24))) for j in range(25)})
    values = [best(r) for r in grid]
    j = int(np.argmax(values))
    lo, hi = grid[max(0, j - 1)], grid[min(len(grid) - 1, j + 1)]
    seen = dict(zip(grid, values, strict=True))
    while hi - lo > 2:
        a, b = lo + (hi - lo) // 3, hi - (hi - lo) // 3
        fa = seen.setdefault(a, best(a))
        fb = seen.setdefault(b, best(b))
        if fa < fb:
            lo = a
        else:
            hi = b
    top = max(range(lo, hi + 1), key=lambda r: seen.setdefault(r, best(r)))
    return _lower_bound(m, top, top, delta, beta)


def ceiling(m: int, delta: float, confidence: float = 0.95) -> float:
    """Return the largest one-run lower bound m canaries can give: every guess right.

    The maximum over r of :func:`one_run_lower_bound` (m, r, r, δ, confidence): no attack
    can do better, so a claim above it cannot be contradicted by one run with m canaries.
    About logit(β^{1/m}) ≈ ln(m / ln(1/β)) while 2mδ is small; the δ term then stops the
    growth (δ = 1e-5, β = 0.05: 3.49 at m = 100, 5.78 at 1,000, 7.83 at 10,000, 8.20 at
    20,000, near the peak; 8.13 at 100,000).

    Parameters
    ----------
    m
        Canaries, an int >= 1.
    delta
        δ, a float in [0, 1).
    confidence
        1 − β, a float in (0, 1).

    Returns
    -------
    float
        The ceiling (the peak over r is found by a search on integers, to about 1e-3).

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    owner = "ceiling"
    m = check_int(m, "m", owner, low=1)
    delta = _check_delta(delta, owner)
    return _ceiling(m, delta, 1.0 - check_confidence(confidence, owner))


# ------------------------------------------------------------ Gaussian DP profile


def _log_gaussian_delta(mu: float, epsilon: float) -> float:
    """Return ln δ(ε) of μ-GDP, δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), in log space."""
    if mu <= 0.0:
        return -math.inf
    log_ndtr = _special().log_ndtr
    a = float(log_ndtr(-epsilon / mu + mu / 2.0))
    b = epsilon + float(log_ndtr(-epsilon / mu - mu / 2.0))
    if b >= a:
        return -math.inf
    return a + math.log1p(-math.exp(b - a))


def gaussian_delta(mu: float, epsilon: float) -> float:
    """Return δ(ε) of μ-Gaussian DP: the exact privacy profile of the Gaussian mechanism.

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth and Su [1]_, Corollary 2.13;
    Balle and Wang's analytic Gaussian mechanism), computed in log space so that it stays
    accurate for large ε. T releases of the Gaussian mechanism with noise multiplier σ are
    exactly μ-GDP with μ = √T/σ.

    Parameters
    ----------
    mu
        μ, a float >= 0 (0 gives 0).
    epsilon
        ε, a float >= 0.

    Returns
    -------
    float
        δ(ε), in [0, 1).

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    References
    ----------
    .. [1] J. Dong, A. Roth, W. J. Su. "Gaussian Differential Privacy." JRSS B 84(1), 2022.
    """
    mu = check_float(mu, "mu", "gaussian_delta", low=0.0)
    eps = check_float(epsilon, "epsilon", "gaussian_delta", low=0.0)
    return math.exp(_log_gaussian_delta(mu, eps))


def _gaussian_epsilon(mu: float, delta: float) -> float:
    log_delta = math.log(delta)

    def excess(eps: float) -> float:
        return max(_log_gaussian_delta(mu, eps), -1e4) - log_delta

    if excess(0.0) <= 0.0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0.0:
        hi *= 2.0
    return float(_optimize().brentq(excess, 0.0, hi, xtol=1e-12))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Return the ε of μ-GDP at ``delta``: the smallest ε with δ(ε) ≤ δ.

    Parameters
    ----------
    mu
        μ, a float >= 0.
    delta
        δ, a float in (0, 1).

    Returns
    -------
    float
        ε, to 1e-12 (0 when δ(0) ≤ δ already).

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    Examples
    --------
    >>> round(gaussian_epsilon(0.268, 1e-5), 2), round(gaussian_epsilon(1.666, 1e-5), 2)
    (1.0, 8.0)
    """
    owner = "gaussian_epsilon"
    mu = check_float(mu, "mu", owner, low=0.0)
    return _gaussian_epsilon(mu, _check_delta(delta, owner, zero=False))


@functools.lru_cache(maxsize=4096)
def _gaussian_mu(epsilon: float, delta: float) -> float:
    log_delta = math.log(delta)

    def excess(mu: float) -> float:  # increasing in μ
        return max(_log_gaussian_delta(mu, epsilon), -1e4) - log_delta

    lo, hi = 1.0, 1.0
    while excess(lo) > 0.0:
        lo /= 2.0
    while excess(hi) < 0.0:
        hi *= 2.0
    if lo == hi:
        return lo
    return float(_optimize().brentq(excess, lo, hi, xtol=1e-12))


def gaussian_mu(epsilon: float, delta: float) -> float:
    """Return the μ whose Gaussian-DP profile passes through (ε, δ): δ_μ(ε) = δ.

    The inverse of :func:`gaussian_epsilon` in μ: the noise 1/μ (per unit of sensitivity)
    of the one Gaussian mechanism that is exactly (ε, δ)-DP.

    Parameters
    ----------
    epsilon
        ε, a float >= 0.
    delta
        δ, a float in (0, 1).

    Returns
    -------
    float
        μ > 0, to 1e-12.

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    Examples
    --------
    >>> round(gaussian_mu(1.0, 1e-5), 3), round(gaussian_mu(8.0, 1e-5), 3)
    (0.268, 1.666)
    """
    owner = "gaussian_mu"
    eps = check_float(epsilon, "epsilon", owner, low=0.0)
    return _gaussian_mu(eps, _check_delta(delta, owner, zero=False))


# --------------------------------------------------- Mahloujifar, Melis, Chaudhuri


def _recursion_excess(m: int, r: int, v: int, beta: float,
                      forced: Callable[[float], float]) -> float:
    """Mahloujifar et al.'s recursion for a claimed trade-off curve; > 0 rejects the claim.

    ``forced(x)`` is the least mass the "out" world must put on a set of outputs the "in"
    world puts mass x on, under the claim. Starting from the masses that v correct and
    r − v wrong guesses carry if they happen with probability β, the recursion (their
    "audit with cap") walks down the number of correct guesses and accumulates the least
    mass the curve then forces on the guesses; more than the r/m the attacker actually
    spends is impossible for a mechanism with that curve, i.e. the claim is rejected.
    """
    correct = beta * v / m
    wrong = beta * (r - v) / m
    for i in range(v - 1, -1, -1):
        least = 1.0 if correct >= 1.0 else forced(correct)
        if least <= wrong:  # nothing changes from here on
            break
        correct = min(1.0, correct + i / (r - i) * (least - wrong))
        wrong = least
    return correct + wrong - r / m


def _curve_excess(m: int, r: int, v: int, mu: float, beta: float) -> float:
    """Run the recursion for the Gaussian curve G_μ; > 0 rejects the claim.

    Under G_μ a set the "in" world puts mass x on gets mass at least Φ(Φ⁻¹(x) − μ) from
    the "out" world (the Neyman–Pearson region of N(μ, 1) against N(0, 1)).
    """
    return _recursion_excess(m, r, v, beta,
                             lambda x: _NORMAL.cdf(_NORMAL.inv_cdf(x) - mu) if x > 0 else 0.0)


@functools.lru_cache(maxsize=4096)
def _curve_bound(m: int, r: int, v: int, delta: float, beta: float, tol: float = _TOL) -> float:
    if v == 0:
        return 0.0
    return _first_crossing(lambda eps: _curve_excess(m, r, v, _gaussian_mu(eps, delta), beta),
                           tol)


def gaussian_curve_lower_bound(m: int, r: int, v: int, delta: float,
                               confidence: float = 0.95) -> float:
    """Return the one-run lower bound on ε against the Gaussian trade-off curve.

    The null hypothesis for each ε is "the mechanism is G_μ-DP (Dong, Roth and Su's
    Gaussian trade-off curve) with μ = :func:`gaussian_mu` (ε, δ)", the one curve through
    (ε, δ); Mahloujifar, Melis and Chaudhuri's one-run test [1]_ rejects it from v correct
    out of r "in" guesses on m canaries. The bound is the smallest ε not rejected at level
    β = 1 − confidence (first crossing, as :func:`one_run_lower_bound`).

    Valid only where the claim is an unsampled Gaussian composition (T releases with
    noise multiplier σ are exactly G_{√T/σ}, and an accountant's (ε, δ) for them is at
    least that curve's): then a bound above the accountant's ε contradicts the accountant
    with probability ≤ β. For Poisson-sampled mechanisms the true curve is not Gaussian
    and this number must not be reported.

    Parameters
    ----------
    m
        Canaries, an int >= 1.
    r
        "In" guesses (one-sided: the r highest scores), an int in [0, m], fixed before
        the run.
    v
        Correct guesses (canaries among them that were included), an int in [0, r].
    delta
        δ of the claims, a float in (0, 1).
    confidence
        1 − β, a float in (0, 1).

    Returns
    -------
    float
        The bound, in [0, :data:`EPSILON_CAP`], to 1e-6.

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    Notes
    -----
    Cost: one O(v) loop per ε probed, some 40 probes (tens of milliseconds for v in the
    hundreds).

    References
    ----------
    .. [1] S. Mahloujifar, L. Melis, K. Chaudhuri. "Auditing f-Differential Privacy in
       One Run." ICML 2025, arXiv:2410.22235.
    """
    owner = "gaussian_curve_lower_bound"
    m, r, v = _check_counts(m, r, v, owner)
    delta = _check_delta(delta, owner, zero=False)
    beta = 1.0 - check_confidence(confidence, owner)
    return _curve_bound(m, r, v, delta, beta)


# ------------------------------------------------------------ the claim's whole curve

_PROFILE_EPSILONS = np.concatenate([np.linspace(0.0, 4.0, 801),
                                    np.geomspace(4.005, 4 * EPSILON_CAP, 1200)])
_PROFILE_GROW, _PROFILE_SHRINK = np.exp(_PROFILE_EPSILONS), np.exp(-_PROFILE_EPSILONS)
_SIGMA_TOP = 256.0  # the most private claim of the sampled family the search probes
_SIGMA_RATIO = 1.005  # the family's grid: σ_i = 256 / 1.005^i; a bound errs low by one step
_SIGMA_OCTAVE = round(math.log(2.0) / math.log(_SIGMA_RATIO))  # grid steps per halving of σ
_SIGMA_LAST = round(math.log(_SIGMA_TOP * 16) / math.log(_SIGMA_RATIO))  # σ = 1/16


@dataclasses.dataclass(frozen=True)
class CurveClaim:
    """A claim as a whole trade-off curve: T Gaussian releases, each on a Poisson sample.

    The accountant's (ε, δ) summarises this curve at one δ; the one-run test of
    Mahloujifar, Melis and Chaudhuri uses all of it. ``noise_multiplier`` is relative to
    what one canary can contribute (σ·S/min(M, S) for a canary of norm M under clip S),
    so that the curve is the canary's own. With q = 1 the curve is G_μ, μ = √T/σ (Dong,
    Roth and Su); with q < 1 it is the Poisson-subsampled Gaussian's, computed from its
    privacy profile (:func:`~islands.privacy.accountant.privacy_profile`).

    Parameters
    ----------
    noise_multiplier
        σ, a float > 0.
    steps
        T, an int >= 1.
    sampling_rate
        q in (0, 1].
    """

    noise_multiplier: float
    steps: int = 1
    sampling_rate: float = 1.0

    def __post_init__(self) -> None:
        owner = "CurveClaim"
        check_float(self.noise_multiplier, "noise_multiplier", owner, low=0.0,
                    low_inclusive=False)
        check_int(self.steps, "steps", owner, low=1)
        check_float(self.sampling_rate, "sampling_rate", owner, low=0.0, low_inclusive=False,
                    high=1.0)

    @classmethod
    def gaussian(cls, mu: float) -> CurveClaim:
        """Return the claim "G_μ-DP": one unsampled release with σ = 1/μ."""
        return cls(1.0 / check_float(mu, "mu", "CurveClaim.gaussian", low=0.0,
                                     low_inclusive=False))

    @property
    def sampled(self) -> bool:
        """Whether releases are Poisson-sampled (q < 1): the curve is then not Gaussian."""
        return self.sampling_rate < 1.0

    @property
    def mu(self) -> float:
        """√T/σ: the curve's μ when unsampled (for q < 1, the μ of T unsampled releases)."""
        return math.sqrt(self.steps) / self.noise_multiplier

    @property
    def name(self) -> str:
        """What the curve is, for reports."""
        return "Poisson-subsampled Gaussian (PLD)" if self.sampled else "Gaussian"


@functools.lru_cache(maxsize=1024)
def _family_member(index: int, rate: float, steps: int, delta: float
                   ) -> tuple[NDArray[np.float64], float]:
    """δ(ε) on :data:`_PROFILE_EPSILONS`, and ε at δ, of the family's member σ_index."""
    return privacy_profile(_SIGMA_TOP * _SIGMA_RATIO ** -index, rate, steps,
                           _PROFILE_EPSILONS, delta)


def _profile_forced(deltas: NDArray[np.float64]) -> Callable[[float], float]:
    """Return x ↦ the least "out" mass every (ε, δ(ε)) of a profile forces on "in" mass x.

    In both directions, P_in(S) ≤ e^ε P_out(S) + δ(ε) and 1 − P_out(S) ≤
    e^ε (1 − P_in(S)) + δ(ε); the profile is sampled on finitely many ε, which only
    drops constraints (the forced mass errs low, the test towards not rejecting).
    """
    rest = 1.0 - deltas

    def forced(x: float) -> float:
        return max(0.0, float(np.max((x - deltas) * _PROFILE_SHRINK)),
                   float(np.max(rest - _PROFILE_GROW * (1.0 - x))))

    return forced


@functools.lru_cache(maxsize=4096)
def _sampled_curve_bound(m: int, r: int, v: int, rate: float, steps: int, delta: float,
                         beta: float) -> float:
    """First crossing over the family σ_i = 256/1.005^i of (q, T) sampled Gaussian claims.

    Claims are tested from the most private (σ = 256) towards less private ones: the
    bracket halves σ until a claim is not rejected (or its ε reaches the cap), bisection
    finds the first member not rejected, eight members below it are checked, and the
    bound is the ε (at δ, PLD) of the member just before the first one not rejected.
    """
    if v == 0 or _recursion_excess(m, r, v, beta, lambda x: x) <= 0.0:
        return 0.0  # not even "no information at all" is rejected

    def rejected(i: int) -> bool:
        return _recursion_excess(m, r, v, beta,
                                 _profile_forced(_family_member(i, rate, steps, delta)[0])) > 0

    def epsilon(i: int) -> float:
        return 0.0 if i < 0 else min(EPSILON_CAP, _family_member(i, rate, steps, delta)[1])

    lo, hi = -1, 0
    while rejected(hi):
        if epsilon(hi) >= EPSILON_CAP or hi == _SIGMA_LAST:
            return epsilon(hi)
        lo, hi = hi, min(_SIGMA_LAST, hi + _SIGMA_OCTAVE)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
    for point in np.unique(np.linspace(0, hi, 10).astype(int))[:-1]:
        if not rejected(int(point)):  # a crossing the bracket missed: stop below it
            return epsilon(int(point) - 1)
    return epsilon(hi - 1)


def curve_lower_bound(m: int, r: int, v: int, claim: CurveClaim, delta: float,
                      confidence: float = 0.95) -> float:
    """Return the one-run lower bound on ε against a family of curves like the claim's.

    With q = 1 this is :func:`gaussian_curve_lower_bound` (the family G_μ). With q < 1
    the null hypothesis for member σ' is "the mechanism is as private as T releases of the
    Poisson-subsampled Gaussian at rate q with noise σ'": its whole trade-off curve, from
    the privacy profile (:func:`~islands.privacy.accountant.privacy_profile`), tested by
    Mahloujifar, Melis and Chaudhuri's recursion [1]_. Members from σ' = 256 down (a grid
    of ratio 1.005) are rejected until the first one that is not; the bound is the ε, at
    δ, of the last member rejected before it (PLD), so it errs low by one grid step.
    If the mechanism is as the claim says, a bound above the claim's ε means a member at
    least as private as the claim was rejected: probability ≤ β. Where one-run bounds
    built on (ε, δ) alone stay far below the ε of sampled mechanisms (DP-SGD), this one
    detects a noise multiplier halved.

    Parameters
    ----------
    m, r, v
        Canaries, "in" guesses (one-sided, fixed before the run) and correct guesses.
    claim
        The claimed curve: T and q are kept, σ varies over the family.
    delta
        δ, a float in (0, 1), at which members are expressed as ε.
    confidence
        1 − β, a float in (0, 1).

    Returns
    -------
    float
        The bound, in [0, :data:`EPSILON_CAP`].

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    Notes
    -----
    Cost: some 25 privacy profiles (dp-accounting PLDs, cached per (σ', q, T): 0.05–0.2 s
    each for hundreds of steps with σ' ≥ 1) and one O(v) recursion per member probed.

    References
    ----------
    .. [1] S. Mahloujifar, L. Melis, K. Chaudhuri. "Auditing f-Differential Privacy in
       One Run." ICML 2025, arXiv:2410.22235.
    """
    owner = "curve_lower_bound"
    m, r, v = _check_counts(m, r, v, owner)
    if not isinstance(claim, CurveClaim):
        raise invalid_parameter("claim", owner, "a CurveClaim", describe(claim))
    delta = _check_delta(delta, owner, zero=False)
    beta = 1.0 - check_confidence(confidence, owner)
    return _claim_bound(m, r, v, claim, delta, beta)


def _claim_bound(m: int, r: int, v: int, claim: CurveClaim, delta: float, beta: float
                 ) -> float:
    if claim.sampled:
        return _sampled_curve_bound(m, r, v, claim.sampling_rate, claim.steps, delta, beta)
    return _curve_bound(m, r, v, delta, beta)


def _check_fractions(m: Any, fractions: Sequence[float], owner: str) -> int:
    """Check a plan maker's m (an int >= 2) and fractions (each in (0, 1]); return m."""
    count: int = check_int(m, "m", owner, low=2)
    if len(fractions) == 0 or not all(
            isinstance(f, (int, float)) and 0.0 < f <= 1.0 for f in fractions):
        raise invalid_parameter("fractions", owner, "a non-empty sequence of floats in (0, 1]",
                                fractions)
    return count


def sampled_curve_plans(m: int, fractions: Sequence[float] = (0.01, 0.02, 0.05)
                        ) -> tuple[GuessPlan, ...]:
    """Return one-sided plans for a sampled curve: "in" guesses on fractions of the m canaries.

    The audit Bonferroni-corrects over them. Fixed fractions, not a plan from expected
    scores: a sampled claim's scores are not Gaussian. Measured on the Gaussian harness
    (q = 0.05, T = 200, m = 5,000 to 10,000): with σ halved, every plan from 1% to 10%
    rejects the claim.

    Parameters
    ----------
    m
        Canaries, an int >= 2.
    fractions
        Fractions of m, each in (0, 1].

    Returns
    -------
    tuple of GuessPlan
        (k, 0) with k = max(1, round(f·m)), duplicates removed.

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    m = _check_fractions(m, fractions, "sampled_curve_plans")
    ks = sorted({max(1, round(f * m)) for f in fractions})
    return tuple(GuessPlan(k, 0, f"one-sided, {k} of {m} (sampled curve)") for k in ks)


# ------------------------------------------------------------------ the estimate


def _two_gaussian_delta(eps: float, m1: float, s1: float, m0: float, s0: float) -> float:
    """sup_S P(S) − e^ε Q(S) for P = N(m1, s1²), Q = N(m0, s0²).

    S = {x : ln p(x) − ln q(x) > ε} = {A x² + B x + C > 0}: a half-line when the variances
    are equal, otherwise an interval or the complement of one.
    """
    ndtr = _special().ndtr

    def mass(mean: float, sd: float, lo: float, hi: float) -> float:
        # P[lo < X < hi] for X ~ N(mean, sd²), accurate in both tails
        a, b = (lo - mean) / sd, (hi - mean) / sd
        if a > 0.0:
            return float(ndtr(-a) - ndtr(-b))
        return float(ndtr(b) - ndtr(a))

    big = math.inf
    a_ = 0.5 / s0**2 - 0.5 / s1**2
    b_ = m1 / s1**2 - m0 / s0**2
    c_ = m0**2 / (2 * s0**2) - m1**2 / (2 * s1**2) + math.log(s0 / s1) - eps
    pieces: list[tuple[float, float]]
    if abs(a_) < 1e-12 * (0.5 / s0**2 + 0.5 / s1**2):
        if b_ == 0.0:
            pieces = [(-big, big)] if c_ > 0.0 else []
        else:
            cut = -c_ / b_
            pieces = [(cut, big)] if b_ > 0.0 else [(-big, cut)]
    else:
        disc = b_ * b_ - 4.0 * a_ * c_
        if disc <= 0.0:
            pieces = [(-big, big)] if a_ > 0.0 else []
        else:
            root = math.sqrt(disc)
            x1, x2 = sorted(((-b_ - root) / (2 * a_), (-b_ + root) / (2 * a_)))
            pieces = [(-big, x1), (x2, big)] if a_ > 0.0 else [(x1, x2)]
    p = sum(mass(m1, s1, lo, hi) for lo, hi in pieces)
    q = sum(mass(m0, s0, lo, hi) for lo, hi in pieces)
    return max(0.0, p - math.exp(eps) * q)


def _two_gaussian_epsilon(m1: float, s1: float, m0: float, s0: float, delta: float) -> float:
    def profile(eps: float) -> float:  # both directions: DP bounds either world against the other
        return max(_two_gaussian_delta(eps, m1, s1, m0, s0),
                   _two_gaussian_delta(eps, m0, s0, m1, s1))

    if profile(0.0) <= delta:
        return 0.0
    hi = 1.0
    while profile(hi) > delta:
        if hi >= EPSILON_CAP:
            return EPSILON_CAP
        hi *= 2.0
    return float(_optimize().brentq(lambda e: profile(e) - delta, 0.0, hi, xtol=1e-9))


def _scores(values: Any, name: str, owner: str, min_size: int) -> NDArray[np.float64]:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise invalid_parameter(name, owner, "a 1-D array of finite values",
                                describe(values)) from None
    if arr.ndim != 1 or arr.size < min_size or not np.all(np.isfinite(arr)):
        raise invalid_parameter(name, owner, f"a 1-D array of at least {min_size} finite "
                                "values", describe(values))
    return arr


def _fit_estimate(ins: NDArray[np.float64], outs: NDArray[np.float64] | None, delta: float, *,
                  pooled: bool, null_sd: float = 1.0) -> float:
    """ε of the Gaussians fitted to ``ins`` and ``outs`` (or N(0, null_sd²) when None)."""
    m1, s1 = float(np.mean(ins)), float(np.std(ins, ddof=1))
    if outs is None:
        m0, s0 = 0.0, null_sd
    else:
        m0, s0 = float(np.mean(outs)), float(np.std(outs, ddof=1))
    if pooled and outs is not None:
        n1, n0 = ins.size, outs.size
        s1 = s0 = math.sqrt(((n1 - 1) * s1 * s1 + (n0 - 1) * s0 * s0) / (n1 + n0 - 2))
    if s1 == 0.0 or s0 == 0.0:  # a point mass: distinguishable unless both are the same point
        return 0.0 if (m1 == m0 and s1 == s0) else EPSILON_CAP
    if pooled:
        return min(EPSILON_CAP, _gaussian_epsilon(abs(m1 - m0) / s1, delta))
    return _two_gaussian_epsilon(m1, s1, m0, s0, delta)


def andrew_estimate(in_scores: ArrayLike, out_scores: ArrayLike, delta: float,
                    dim: int | None = None, *, pooled: bool = False) -> float:
    """Return Andrew et al.'s one-shot ε *estimate* from in- and out-canaries' scores.

    Fits N(μ̂₁, σ̂₁²) to the included canaries' scores and N(μ̂₀, σ̂₀²) to the excluded
    ones' (or, with ``dim``, takes the null N(0, 1/dim) of the cosine between a random
    unit vector and a fixed one, as Andrew et al. [1]_ do for unseen canaries), and
    returns the ε at which the exact privacy profile of that pair of Gaussians (either
    direction, unequal variances allowed) falls to δ. With ``pooled`` the two fits share
    one variance and the estimate is the Gaussian-DP ε of μ̂ = |μ̂₁ − μ̂₀|/σ̂: right for
    white-box scores of a Gaussian mechanism, where the noise is the only spread, and much
    less variable (20,000 ideal scores at ε = 1, δ = 1e-5: relative s.d. 5.5 % pooled,
    11 % with a bias of +13 % unpooled, because a small error in σ̂₁/σ̂₀ adds privacy loss
    in the far tails where δ = 1e-5 is decided).

    This is an **estimate, not a bound**: it carries no confidence level and no validity
    guarantee (it is consistent for the Gaussian mechanism with isotropic canaries in high
    dimension). It is printed beside the bounds and never decides anything.

    Parameters
    ----------
    in_scores, out_scores
        Scores of included and excluded canaries, 1-D, at least 2 finite values each
        (``out_scores`` is not used when ``dim`` is given, but is still checked).
    delta
        δ, a float in (0, 1).
    dim
        Model dimension for the N(0, 1/dim) null of cosine scores, an int >= 1, or None
        to use the measured out-canaries.
    pooled
        Fit one variance to both groups (not with ``dim``).

    Returns
    -------
    float
        ε̂ in [0, :data:`EPSILON_CAP`].

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    References
    ----------
    .. [1] G. Andrew, P. Kairouz, S. Oh, A. Oprea, H. B. McMahan, V. Suriyakumar.
       "One-shot Empirical Privacy Estimation for Federated Learning." ICLR 2024.
    """
    owner = "andrew_estimate"
    ins = _scores(in_scores, "in_scores", owner, 2)
    outs = _scores(out_scores, "out_scores", owner, 2)
    delta = _check_delta(delta, owner, zero=False)
    if dim is None:
        return _fit_estimate(ins, outs, delta, pooled=bool(pooled))
    dim = check_int(dim, "dim", owner, low=1)
    if pooled:
        raise invalid_parameter("pooled", owner, "False when dim is given (the null's "
                                "variance is then 1/dim)", pooled)
    return _fit_estimate(ins, None, delta, pooled=False, null_sd=1.0 / math.sqrt(dim))


# ------------------------------------------------------------------ guess plans


@dataclasses.dataclass(frozen=True)
class GuessPlan:
    """How many canaries to guess on, fixed before the run.

    The ``k_pos`` highest scores are guessed "in", the ``k_neg`` lowest "out", the rest
    abstained on; r = k_pos + k_neg guesses. Choosing k after seeing the scores voids the
    bound; several plans are allowed only with a Bonferroni correction (each at level
    β/G), which :func:`audit_scores` applies.

    Parameters
    ----------
    k_pos
        "In" guesses, an int >= 0.
    k_neg
        "Out" guesses, an int >= 0; k_pos + k_neg >= 1.
    label
        What the plan is for, shown in reports.
    """

    k_pos: int
    k_neg: int = 0
    label: str = ""

    def __post_init__(self) -> None:
        owner = "GuessPlan"
        check_int(self.k_pos, "k_pos", owner, low=0)
        check_int(self.k_neg, "k_neg", owner, low=0)
        if self.k_pos + self.k_neg < 1:
            raise invalid_parameter("k_pos", owner, "such that k_pos + k_neg >= 1",
                                    (self.k_pos, self.k_neg))

    @property
    def guesses(self) -> int:
        """The number of guesses r = k_pos + k_neg."""
        return self.k_pos + self.k_neg


def _gaussian_counts(mu: float, m: int, k: NDArray[np.float64], two_sided: bool
                     ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Return the expected (r, v) when the top (and bottom) k of m N(μ·[in], 1) are guessed.

    The threshold t solves (m/2)(Q(t − μ) + Q(t)) = k (Q the normal tail), by bisection on
    all k at once; the top k then holds (m/2)·Q(t − μ) included canaries on average, and
    by symmetry the bottom k as many excluded ones.
    """
    ndtr = _special().ndtr
    lo, hi = np.full(k.shape, -40.0), np.full(k.shape, 40.0 + mu)
    for _ in range(100):
        t = (lo + hi) / 2
        above = (m / 2) * (ndtr(mu - t) + ndtr(-t)) > k
        lo, hi = np.where(above, t, lo), np.where(above, hi, t)
    v = (m / 2) * ndtr(mu - (lo + hi) / 2)
    return (2 * k, 2 * v) if two_sided else (k, v)


@functools.lru_cache(maxsize=256)
def _plan_for_gaussian(mu: float, m: int, delta: float, beta: float, two_sided: bool,
                       curve: bool) -> int:
    top = m // 2 if two_sided else m
    ks = np.unique(np.round(np.geomspace(1, max(1, top), 48)))
    if curve:  # the Gaussian-curve test peaks at a few percent of m: search there only
        ks = np.unique(np.round(np.geomspace(max(1, m // 400), max(1, m // 8), 16)))
    r, v = _gaussian_counts(mu, m, ks, two_sided)
    best, best_k = -1.0, 1
    for k, ri, vi in zip(ks, r, v, strict=True):
        ri_, vi_ = int(ri), min(int(ri), round(float(vi)))
        bound = (_curve_bound(m, ri_, vi_, delta, beta, _PLAN_TOL) if curve
                 else _lower_bound(m, ri_, vi_, delta, beta, _PLAN_TOL))
        if bound > best:
            best, best_k = bound, int(k)
    return best_k


def _check_plan_args(mu: Any, m: Any, delta: Any, confidence: Any, plans: Any, owner: str,
                     zero: bool = True) -> tuple[float, int, float, float]:
    mu = check_float(mu, "mu", owner, low=0.0)
    m = check_int(m, "m", owner, low=2)
    delta = _check_delta(delta, owner, zero=zero)
    beta = (1.0 - check_confidence(confidence, owner)) / check_int(plans, "plans", owner,
                                                                     low=1)
    return mu, m, delta, beta


def plan_for_gaussian(mu: float, m: int, delta: float, confidence: float = 0.95, *,
                      plans: int = 1, two_sided: bool = True, label: str = "") -> GuessPlan:
    """Plan k before the run: the k that maximises the bound expected under N(μ, 1) scores.

    For scores N(μ·[in], 1) (the white-box score of a μ-GDP mechanism), the expected
    numbers of guesses and correct guesses are computed for 48 values of k (no simulation,
    so the plan is a deterministic function of public parameters) and the k whose
    :func:`one_run_lower_bound` is largest at level β/``plans`` is returned.

    Parameters
    ----------
    mu
        The per-canary μ of the claimed (or an alternative) mechanism, a float >= 0.
    m
        Canaries, an int >= 2.
    delta
        δ, a float in [0, 1).
    confidence
        1 − β, a float in (0, 1).
    plans
        G, the number of plans the audit will Bonferroni-correct over, an int >= 1.
    two_sided
        Guess k "in" and k "out" (True), or k "in" only.
    label
        The plan's label.

    Returns
    -------
    GuessPlan
        (k, k) or (k, 0).

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    mu, m, delta, beta = _check_plan_args(mu, m, delta, confidence, plans, "plan_for_gaussian")
    k = _plan_for_gaussian(mu, m, delta, beta, bool(two_sided), False)
    return GuessPlan(k, k if two_sided else 0, label or
                     f"{'two' if two_sided else 'one'}-sided k planned for μ = {mu:.3g}")


def curve_plan_for_gaussian(mu: float, m: int, delta: float,
                            confidence: float = 0.95) -> GuessPlan:
    """Plan the one-sided k of :func:`gaussian_curve_lower_bound` for N(μ, 1) scores.

    As :func:`plan_for_gaussian`, with the Gaussian-curve bound at the expected counts,
    over k from m/400 to m/8 (the bound peaks at a few percent of m).

    Parameters
    ----------
    mu
        The claimed per-canary μ, a float >= 0.
    m
        Canaries, an int >= 2.
    delta
        δ, a float in (0, 1).
    confidence
        1 − β, a float in (0, 1).

    Returns
    -------
    GuessPlan
        (k, 0).

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    mu, m, delta, beta = _check_plan_args(mu, m, delta, confidence, 1,
                                          "curve_plan_for_gaussian", zero=False)
    k = _plan_for_gaussian(mu, m, delta, beta, False, True)
    return GuessPlan(k, 0, f"one-sided k planned for the Gaussian curve, μ = {mu:.3g}")


def default_plans(mu: float, m: int, delta: float, confidence: float = 0.95, *,
                  sampling_rate: float = 1.0) -> tuple[GuessPlan, GuessPlan, GuessPlan]:
    """Return the three plans an audit uses by default (G = 3), from public parameters.

    (a) two-sided k planned for the claimed μ; (b) two-sided k planned for 2μ (noise
    halved); (c) one-sided k = ⌊q·m/4⌋ (m/20 when q = 1): the canaries one release without
    noise would expose. Few plans on purpose: the δ term 2mδ does not shrink with the
    level β/G, so many plans cost more than they find (at m = 5,000, δ = 1e-5, 100 right
    guesses give 3.35 with G = 1, 2.89 with G = 3 and 0.98 with G = 18).

    Parameters
    ----------
    mu
        The claimed per-canary μ, a float >= 0.
    m
        Canaries, an int >= 2.
    delta
        δ, a float in [0, 1).
    confidence
        1 − β, a float in (0, 1).
    sampling_rate
        q, the Poisson rate of each release, in (0, 1].

    Returns
    -------
    tuple of GuessPlan
        The plans (a), (b), (c).

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    owner = "default_plans"
    q = check_float(sampling_rate, "sampling_rate", owner, low=0.0, low_inclusive=False,
                    high=1.0)
    mu, m, delta, _ = _check_plan_args(mu, m, delta, confidence, 1, owner)
    k_one = max(1, math.floor(q * m / 4) if q < 1.0 else m // 20)
    return (plan_for_gaussian(mu, m, delta, confidence, plans=3, label="(a) planned for the claim"),
            plan_for_gaussian(2 * mu, m, delta, confidence, plans=3,
                              label="(b) planned for noise halved"),
            GuessPlan(k_one, 0, "(c) one-sided, one noiseless release"))


def bonferroni_plans(m: int, fractions: Sequence[float] = (0.01, 0.05, 0.2)
                     ) -> tuple[GuessPlan, ...]:
    """Return two-sided plans guessing on the given fractions of the m canaries.

    For scores whose distribution is unknown in advance (black-box audits): one plan per
    fraction f, k = max(1, round(f·m/2)) "in" and as many "out" guesses; the audit corrects
    for their number.

    Parameters
    ----------
    m
        Canaries, an int >= 2.
    fractions
        Fractions of m to guess on, each in (0, 1].

    Returns
    -------
    tuple of GuessPlan
        One plan per fraction.

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    m = _check_fractions(m, fractions, "bonferroni_plans")
    return tuple(GuessPlan(max(1, round(f * m / 2)), max(1, round(f * m / 2)),
                           f"two-sided, {f:g} of the canaries") for f in fractions)


# ------------------------------------------------------------------ the audit


@dataclasses.dataclass(frozen=True)
class _Evidence:
    """What :func:`audit_scores` was given: enough to audit a prefix of the canaries."""

    scores: NDArray[np.float64]
    included: NDArray[np.bool_]
    plans: tuple[GuessPlan, ...]
    curve: CurveClaim | None
    curve_plans: tuple[GuessPlan, ...]


@dataclasses.dataclass(frozen=True)
class OneRunAudit:
    """The outcome of one audit: bounds, the guesses behind them, and what they compare with.

    Attributes
    ----------
    canaries
        m.
    delta, confidence
        δ of every bound and claim; 1 − β.
    lower_bound
        Steinke et al.'s bound, the best over the plans at level β/G each: the number
        that decides :attr:`contradicted`.
    guesses, correct, k_pos, k_neg, plan
        r, v and the plan that gave :attr:`lower_bound`.
    plans
        G, the number of plans corrected for.
    claimed_epsilon
        The accountant's ε at δ, or None.
    p_value_at_claim
        Bonferroni-adjusted p-value of "(claimed ε, δ)-DP" (the smallest level at which
        this audit rejects the accountant), or None.
    curve_bound
        Mahloujifar et al.'s bound against the claim's whole trade-off curve
        (:class:`CurveClaim`: Gaussian, or Poisson-subsampled Gaussian), at level β over
        its own one-sided plans, or None where no curve was claimed.
    curve
        Which curve that was (:attr:`CurveClaim.name`), or None.
    curve_guesses, curve_correct
        r and v of that bound, or None.
    estimate, estimate_method
        Andrew et al.'s estimate (no confidence; never a bound) and how it was fitted
        (variances pooled for a Gaussian claim), or None.
    ceiling
        The most any plan could give with m canaries (:func:`ceiling`).
    plan_ceiling
        The most *these* plans could give (every guess right).
    evidence
        The scores, membership bits, plans and curve this audit rests on (not in
        :meth:`to_dict`: the bits are the audit's secret); :func:`audit_prefix` re-audits
        the first canaries from them.
    """

    canaries: int
    delta: float
    confidence: float
    lower_bound: float
    guesses: int
    correct: int
    k_pos: int
    k_neg: int
    plan: str
    plans: int
    claimed_epsilon: float | None
    p_value_at_claim: float | None
    curve_bound: float | None
    curve: str | None
    curve_guesses: int | None
    curve_correct: int | None
    estimate: float | None
    estimate_method: str | None
    ceiling: float
    plan_ceiling: float
    evidence: _Evidence | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def contradicted(self) -> bool:
        """Whether Steinke et al.'s bound exceeds the claimed ε (False without a claim)."""
        return self.claimed_epsilon is not None and self.lower_bound > self.claimed_epsilon

    @property
    def curve_contradicted(self) -> bool:
        """Whether the curve bound exceeds the claimed ε (False where not computed)."""
        return (self.claimed_epsilon is not None and self.curve_bound is not None
                and self.curve_bound > self.claimed_epsilon)

    def to_dict(self) -> dict[str, Any]:
        """Return the fields and both verdicts as plain JSON-ready values (no scores)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "evidence"}
        out["contradicted"] = self.contradicted
        out["curve_contradicted"] = self.curve_contradicted
        return out


def _guess_counts(order: NDArray[np.intp], included: NDArray[np.bool_], plan: GuessPlan
                  ) -> tuple[int, int]:
    top = order[:plan.k_pos]
    bottom = order[order.size - plan.k_neg:] if plan.k_neg else order[:0]
    return plan.guesses, int(included[top].sum()) + int((~included[bottom]).sum())


def audit_scores(scores: ArrayLike, included: ArrayLike, *, delta: float,
                 plans: Sequence[GuessPlan], confidence: float = 0.95,
                 claimed_epsilon: float | None = None, curve: CurveClaim | None = None,
                 curve_plans: Sequence[GuessPlan] | None = None) -> OneRunAudit:
    """Audit one run from the canaries' scores and their (secret) membership bits.

    Higher scores mean "more likely included". For each plan the top ``k_pos`` are
    guessed in and the bottom ``k_neg`` out (ties broken by canary index, which is
    independent of membership); each plan's bound is taken at level β/G and the largest
    is reported (Bonferroni). With a ``curve`` the curve bound (:func:`curve_lower_bound`)
    is added, over ``curve_plans`` at level β/G': a separate test, reported beside the
    first.

    Parameters
    ----------
    scores
        One finite score per canary, 1-D, m >= 2 values.
    included
        Membership bits (True: included), same shape; from :func:`draw_membership`.
    delta
        δ, a float in [0, 1) (in (0, 1) with a ``curve``): the accountant's δ.
    plans
        The G plans fixed before the run, each with k_pos + k_neg <= m.
    confidence
        1 − β, a float in (0, 1).
    claimed_epsilon
        The accountant's ε at ``delta``, a float >= 0, or None.
    curve
        The claim's whole curve (:class:`CurveClaim`), where it is known, or None.
    curve_plans
        One-sided plans (k_neg = 0) for the curve bound, fixed before the run; by default
        :func:`curve_plan_for_gaussian` for the curve's μ when unsampled,
        :func:`sampled_curve_plans` otherwise.

    Returns
    -------
    OneRunAudit
        The bounds and what they rest on.

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    owner = "audit_scores"
    values = _scores(scores, "scores", owner, 2)
    bits = np.asarray(included)
    if bits.shape != values.shape or bits.dtype != np.bool_:
        raise invalid_parameter("included", owner, f"a bool array of shape {values.shape}",
                                describe(included))
    m = values.size
    if curve is not None and not isinstance(curve, CurveClaim):
        raise invalid_parameter("curve", owner, "a CurveClaim or None", describe(curve))
    delta = _check_delta(delta, owner, zero=curve is None)
    conf = check_confidence(confidence, owner)
    beta = 1.0 - conf
    plan_list = list(plans) if isinstance(plans, Sequence) else []
    if not plan_list or not all(isinstance(p, GuessPlan) and p.guesses <= m for p in plan_list):
        raise invalid_parameter("plans", owner, f"a non-empty sequence of GuessPlan with "
                                f"k_pos + k_neg <= {m}", describe(plans))
    claim = (None if claimed_epsilon is None
             else check_float(claimed_epsilon, "claimed_epsilon", owner, low=0.0))
    order = np.argsort(-values, kind="stable")
    level = beta / len(plan_list)

    best: tuple[float, int, int, GuessPlan] | None = None
    p_claim: float | None = None
    for plan in plan_list:
        r, v = _guess_counts(order, bits, plan)
        bound = _lower_bound(m, r, v, delta, level)
        if best is None or bound > best[0]:
            best = (bound, r, v, plan)
        if claim is not None:
            p = min(1.0, len(plan_list) * _p_value(m, r, v, claim, delta))
            p_claim = p if p_claim is None else min(p_claim, p)
    assert best is not None  # plan_list is not empty

    curve_bound = curve_r = curve_v = None
    chosen: list[GuessPlan] = []
    if curve is not None:
        if curve_plans is None:
            curve_plans = (sampled_curve_plans(m) if curve.sampled
                           else (curve_plan_for_gaussian(curve.mu, m, delta, conf),))
        chosen = list(curve_plans) if isinstance(curve_plans, Sequence) else []
        if not chosen or not all(isinstance(p, GuessPlan) and not p.k_neg and p.k_pos <= m
                                 for p in chosen):
            raise invalid_parameter("curve_plans", owner, f"a non-empty sequence of one-sided "
                                    f"GuessPlan (k_neg = 0) with k_pos <= {m}",
                                    describe(curve_plans))
        for plan in chosen:
            r, v = _guess_counts(order, bits, plan)
            bound = _claim_bound(m, r, v, curve, delta, beta / len(chosen))
            if curve_bound is None or bound > curve_bound:
                curve_bound, curve_r, curve_v = bound, r, v

    gaussian = curve is not None and not curve.sampled
    estimate = method = None
    if delta > 0.0 and 2 <= int(bits.sum()) <= m - 2:
        # a Gaussian claim says both groups have the noise's spread: pool it (less variance)
        estimate = _fit_estimate(values[bits], values[~bits], delta, pooled=gaussian)
        method = ("two Gaussians, pooled variance" if gaussian
                  else "two Gaussians (Andrew et al.)")
    plan_ceiling = max(_lower_bound(m, p.guesses, p.guesses, delta, level) for p in plan_list)
    bound, r, v, plan = best
    return OneRunAudit(
        canaries=m, delta=delta, confidence=conf, lower_bound=bound, guesses=r, correct=v,
        k_pos=plan.k_pos, k_neg=plan.k_neg, plan=plan.label, plans=len(plan_list),
        claimed_epsilon=claim, p_value_at_claim=p_claim, curve_bound=curve_bound,
        curve=None if curve is None else curve.name, curve_guesses=curve_r,
        curve_correct=curve_v, estimate=estimate, estimate_method=method,
        ceiling=_ceiling(m, delta, beta), plan_ceiling=plan_ceiling,
        evidence=_Evidence(values, bits, tuple(plan_list), curve, tuple(chosen)))


def _scaled(plan: GuessPlan, m: int, total: int) -> GuessPlan:
    k_pos = min(m, round(plan.k_pos * m / total))
    k_neg = min(m - k_pos, round(plan.k_neg * m / total))  # 1.5 + 1.5 rounds to 4 > 3
    if k_pos + k_neg == 0:
        k_pos, k_neg = (1, 0) if plan.k_pos else (0, 1)
    return GuessPlan(k_pos, k_neg, plan.label)


def audit_prefix(audit: OneRunAudit, m: int) -> OneRunAudit:
    """Audit the first m canaries of a finished audit: a point of a nested sweep over m.

    The canaries beyond the first m stay in the run, as data whose membership is drawn
    independently of the audited ones (Steinke et al.'s theorem holds whatever the rest
    of the input is); every plan's k is scaled by m/M, still a function of public
    parameters only. One run thus gives the bound against m, as nested subsets of its
    canaries, instead of one run per point.

    Parameters
    ----------
    audit
        An audit made by :func:`audit_scores` (it keeps its evidence).
    m
        Canaries to keep, an int in [2, audit.canaries].

    Returns
    -------
    OneRunAudit
        The audit of those m canaries, with the same δ, confidence, claim and curve.

    Raises
    ------
    ValidationError
        If ``audit`` kept no evidence or ``m`` is out of range.
    """
    owner = "audit_prefix"
    if not isinstance(audit, OneRunAudit) or audit.evidence is None:
        raise invalid_parameter("audit", owner, "a OneRunAudit made by audit_scores",
                                describe(audit))
    m = check_int(m, "m", owner, low=2, high=audit.canaries)
    ev, total = audit.evidence, audit.canaries
    return audit_scores(
        ev.scores[:m], ev.included[:m], delta=audit.delta,
        plans=[_scaled(p, m, total) for p in ev.plans], confidence=audit.confidence,
        claimed_epsilon=audit.claimed_epsilon, curve=ev.curve,
        curve_plans=[_scaled(p, m, total) for p in ev.curve_plans] if ev.curve else None)


# ------------------------------------------------------------------ canaries


def draw_membership(m: int) -> NDArray[np.bool_]:
    """Draw the canaries' membership bits: each True with probability ½, from the CSPRNG.

    The bits are the audit's secret: they come from :func:`~islands.crypto.prg.csprng_uniform`
    (ChaCha20 keyed by the operating system), never from a job's seed, which the mechanism
    or the attacker could know.

    Parameters
    ----------
    m
        Canaries, an int >= 1.

    Returns
    -------
    ndarray of bool, shape (m,)
        True: the canary is included.

    Raises
    ------
    ValidationError
        If ``m`` is out of range.
    """
    m = check_int(m, "m", "draw_membership", low=1)
    bits: NDArray[np.bool_] = csprng_uniform(m) < 0.5
    return bits


@dataclasses.dataclass(frozen=True, eq=False)
class DiracCanaries:
    """m canaries u_i = signs[i]·e_{coordinates[i]} in R^dim, each on a coordinate of its own.

    Attributes
    ----------
    dim
        Dimension of the released vectors.
    coordinates
        The m distinct coordinates, int64.
    signs
        ±1.0 per canary.
    """

    dim: int
    coordinates: NDArray[np.int64]
    signs: NDArray[np.float64]

    @property
    def m(self) -> int:
        """Number of canaries."""
        return int(self.coordinates.size)


def dirac_canaries(dim: int, m: int) -> DiracCanaries:
    """Draw m Dirac canaries in R^dim: distinct random coordinates, random signs (CSPRNG).

    With a coordinate each, canaries do not interfere (the barrier to one-run tightness
    that Keinan, Shenfeld and Ligett identify), and the white-box score of a canary is one
    coordinate of each release (Nasr et al.'s Dirac canaries [1]_).

    Parameters
    ----------
    dim
        Dimension, an int >= 1.
    m
        Canaries, an int in [1, dim].

    Returns
    -------
    DiracCanaries
        The coordinates (a uniformly random m-subset, in random order) and signs.

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    References
    ----------
    .. [1] M. Nasr et al. "Tight Auditing of Differentially Private Machine Learning."
       USENIX Security 2023.
    """
    owner = "dirac_canaries"
    dim = check_int(dim, "dim", owner, low=1)
    m = check_int(m, "m", owner, low=1, high=dim)
    coordinates = np.argsort(csprng_uniform(dim), kind="stable")[:m].astype(np.int64)
    signs = np.where(csprng_uniform(m) < 0.5, -1.0, 1.0)
    return DiracCanaries(dim, coordinates, signs)


def isotropic_canaries(dim: int, m: int) -> NDArray[np.float64]:
    """Draw m independent uniformly random unit vectors in R^dim (CSPRNG), one per row.

    Andrew et al.'s canaries; they overlap (cosines about ±1/√dim), so in one run they
    interfere where Dirac canaries (:func:`dirac_canaries`) do not.

    Parameters
    ----------
    dim
        Dimension, an int >= 1.
    m
        Canaries, an int >= 1.

    Returns
    -------
    ndarray of float64, shape (m, dim)
        Unit rows.

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    owner = "isotropic_canaries"
    dim = check_int(dim, "dim", owner, low=1)
    m = check_int(m, "m", owner, low=1)
    rows = csprng_normal((m, dim), 1.0)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    while np.any(norms == 0.0):  # probability ~2^-53·dim: redraw such rows
        bad = norms[:, 0] == 0.0
        rows[bad] = csprng_normal((int(bad.sum()), dim), 1.0)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
    unit: NDArray[np.float64] = rows / norms
    return unit


# --------------------------------------------------- the Gaussian reference harness


def _check_harness(canaries: Any, included: Any, clip: Any, rate: Any, norm: Any,
                   owner: str) -> None:
    if not isinstance(canaries, DiracCanaries) or canaries.dim - canaries.m < 64:
        raise invalid_parameter("canaries", owner, "DiracCanaries leaving >= 64 coordinates "
                                "free (to read the noise from)", describe(canaries))
    if included is not None and not (isinstance(included, np.ndarray)
                                     and included.dtype == np.bool_
                                     and included.shape == (canaries.m,)):
        raise invalid_parameter("included", owner, f"a bool array of shape ({canaries.m},)",
                                describe(included))
    check_float(clip, "clip", owner, low=0.0, low_inclusive=False)
    check_float(norm, "canary_norm", owner, low=0.0, low_inclusive=False)
    if check_float(rate, "sampling_rate", owner, low=0.0, low_inclusive=False) > 1.0:
        raise invalid_parameter("sampling_rate", owner, "a float in (0, 1]", rate)


class GaussianMechanism(Protocol):
    """An implementation of T releases of the (subsampled) Gaussian mechanism on canaries.

    Given the canaries and their membership, returns the T released vectors (T, dim): in
    each, every included canary is sampled with probability ``sampling_rate``, its update
    ``canary_norm``·u_i is clipped to ``clip``, the sampled updates are summed and
    N(0, (noise_multiplier·clip)²) noise is added to every coordinate.
    """

    def __call__(self, canaries: DiracCanaries, included: NDArray[np.bool_], *,
                 noise_multiplier: float, clip: float, rounds: int, sampling_rate: float,
                 canary_norm: float) -> NDArray[np.float64]:
        """Return the (rounds, dim) releases; see :func:`gaussian_releases`."""
        ...


def gaussian_releases(canaries: DiracCanaries, included: NDArray[np.bool_], *,
                      noise_multiplier: float, clip: float, rounds: int, sampling_rate: float,
                      canary_norm: float) -> NDArray[np.float64]:
    """Run islands' Gaussian mechanism on Dirac canaries: T noisy sums, one per round.

    Each round Poisson-samples the included canaries (each with probability q, from
    :func:`~islands.crypto.prg.csprng_uniform`), clips every sampled update
    ``canary_norm``·u_i with :func:`~islands.privacy.clip_l2` and adds
    :func:`~islands.privacy.gaussian_noise` of s.d. σ·S to the sum. Every canary's update
    has the same norm, so clipping one clips them all: :func:`clip_l2` is called once.

    Parameters
    ----------
    canaries
        From :func:`dirac_canaries`.
    included
        Membership bits, shape (m,).
    noise_multiplier, clip, rounds, sampling_rate, canary_norm
        σ (> 0), S (> 0), T (>= 1), q (in (0, 1]) and the canaries' norm M before clipping.

    Returns
    -------
    ndarray of float64, shape (rounds, dim)
        The released sums (the white-box view: what the server sees every round).
    """
    _check_harness(canaries, included, clip, sampling_rate, canary_norm, "gaussian_releases")
    clipped, _ = clip_l2(np.array([canary_norm]), clip)  # the norm of every clipped update
    m, coords, signs = canaries.m, canaries.coordinates, canaries.signs
    releases = np.empty((rounds, canaries.dim))
    for t in range(rounds):
        sampled = included & (csprng_uniform(m) < sampling_rate)
        release = gaussian_noise(canaries.dim, noise_multiplier * clip)
        release[coords[sampled]] += clipped[0] * signs[sampled]
        releases[t] = release
    return releases


def white_box_scores(releases: NDArray[np.float64], canaries: DiracCanaries, *, clip: float,
                     sampling_rate: float, canary_norm: float) -> NDArray[np.float64]:
    """Score every canary from all T releases: the log-likelihood ratio of the claim.

    x_t = ⟨o_t, u_i⟩ is N(c·[sampled], σ̂_t²) under the claim, with c = min(M, S) the
    clipped contribution and σ̂_t the noise s.d. of release t, read from the coordinates no
    canary owns (1.4826 × their median absolute value). The score is
    Σ_t ln(1 − q + q·exp((c·x_t − c²/2)/σ̂_t²)), the Neyman–Pearson statistic of the
    claimed mechanism (for q = 1 the inverse-variance weighted sum Σ_t c·x_t/σ̂_t²). Reading
    σ̂_t per release, rather than trusting the claimed σ, is what makes a release without
    noise stand out (it gets the weight it deserves).

    Parameters
    ----------
    releases
        (T, dim) released vectors.
    canaries
        The canaries.
    clip, sampling_rate, canary_norm
        S, q and M as claimed.

    Returns
    -------
    ndarray of float64, shape (m,)
        Scores, higher for canaries more likely included.
    """
    owner = "white_box_scores"
    _check_harness(canaries, None, clip, sampling_rate, canary_norm, owner)
    if not (isinstance(releases, np.ndarray) and releases.ndim == 2
            and releases.shape[1] == canaries.dim and releases.shape[0] >= 1
            and np.all(np.isfinite(releases))):
        raise invalid_parameter("releases", owner, f"a finite (T, {canaries.dim}) array",
                                describe(releases))
    spare = np.ones(canaries.dim, dtype=bool)
    spare[canaries.coordinates] = False
    noise_sd = _MAD_TO_SD * np.median(np.abs(releases[:, spare]), axis=1)
    noise_sd = np.maximum(noise_sd, 1e-12 * clip)  # a noiseless release: all its weight
    c = min(canary_norm, clip)
    x = releases[:, canaries.coordinates] * canaries.signs
    z = (c * x - c * c / 2) / (noise_sd[:, None] ** 2)
    if sampling_rate >= 1.0:
        total: NDArray[np.float64] = z.sum(axis=0)
        return total
    mixed: NDArray[np.float64] = np.logaddexp(math.log1p(-sampling_rate),
                                              math.log(sampling_rate) + z).sum(axis=0)
    return mixed


@functools.lru_cache(maxsize=64)
def _accountant_epsilon(sigma: float, rate: float, delta: float, steps: int, method: str
                        ) -> float:
    """ε the accountant reports after ``steps`` releases (cached: PLD takes tens of ms)."""
    accountant = PrivacyAccountant(sigma, sampling_rate=rate, delta=delta, method=method)
    accountant.step(steps)
    return accountant.epsilon()


def audit_gaussian(*, noise_multiplier: float, rounds: int, canaries: int, clip: float = 1.0,
                   sampling_rate: float = 1.0, delta: float = 1e-5, accountant: str = "rdp",
                   confidence: float = 0.95, canary_norm: float | None = None,
                   plans: Sequence[GuessPlan] | None = None,
                   mechanism: GaussianMechanism | None = None) -> OneRunAudit:
    """Audit islands' Gaussian mechanism (or ``mechanism``) once, white-box, with m canaries.

    Draws m Dirac canaries in R^(m + 1024) and their membership bits (CSPRNG), runs T
    releases of the mechanism (:func:`gaussian_releases`), scores every canary from all
    releases (:func:`white_box_scores`), and compares the bounds with the ε that
    :class:`~islands.privacy.PrivacyAccountant` reports for σ, q, T at δ, and the curve
    bound with the same: against G_μ when q = 1, against the subsampled curve otherwise.

    Parameters
    ----------
    noise_multiplier
        σ, a float > 0.
    rounds
        T, an int >= 1.
    canaries
        m, an int >= 2.
    clip
        S, a float > 0.
    sampling_rate
        q, the Poisson rate per release, in (0, 1].
    delta
        δ, a float in (0, 1).
    accountant
        ``"rdp"`` or ``"pld"``.
    confidence
        1 − β, a float in (0, 1).
    canary_norm
        M, each canary's update norm before clipping, a float > 0 (default S).
    plans
        Guess plans fixed in advance; default :func:`default_plans` for the claimed μ
        (√T·min(M, S)/(σS) when q = 1, otherwise the μ of the Gaussian through the
        accountant's (ε, δ), a planning heuristic only).
    mechanism
        The implementation audited, called as :func:`gaussian_releases`; default islands'
        own. (Tests pass faulty copies.)

    Returns
    -------
    OneRunAudit
        With ``claimed_epsilon`` the accountant's ε.

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    owner = "audit_gaussian"
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0,
                        low_inclusive=False)
    rounds = check_int(rounds, "rounds", owner, low=1)
    m = check_int(canaries, "canaries", owner, low=2)
    clip = check_float(clip, "clip", owner, low=0.0, low_inclusive=False)
    q = check_float(sampling_rate, "sampling_rate", owner, low=0.0, low_inclusive=False,
                    high=1.0)
    delta = _check_delta(delta, owner, zero=False)
    conf = check_confidence(confidence, owner)
    norm = clip if canary_norm is None else check_float(canary_norm, "canary_norm", owner,
                                                        low=0.0, low_inclusive=False)
    claim = _accountant_epsilon(sigma, q, delta, rounds, accountant)
    mu = math.sqrt(rounds) * min(norm, clip) / (sigma * clip)
    if q < 1.0:
        mu = _gaussian_mu(claim, delta)
    chosen = tuple(plans) if plans is not None else default_plans(
        mu, m, delta, conf, sampling_rate=q)

    dirac = dirac_canaries(m + _SPARE_COORDINATES, m)
    included = draw_membership(m)
    run = gaussian_releases if mechanism is None else mechanism
    releases = run(dirac, included, noise_multiplier=sigma, clip=clip, rounds=rounds,
                   sampling_rate=q, canary_norm=norm)
    scores = white_box_scores(releases, dirac, clip=clip, sampling_rate=q, canary_norm=norm)
    curve = CurveClaim(sigma * clip / min(norm, clip), rounds, q)
    return audit_scores(scores, included, delta=delta, plans=chosen, confidence=conf,
                        claimed_epsilon=claim, curve=curve)
