"""Privacy accounting for repeated, optionally subsampled, Gaussian mechanisms.

A thin layer over Google's ``dp-accounting`` [1]_: :class:`PrivacyAccountant` counts
releases of the Gaussian mechanism with noise multiplier σ (noise std / L2
sensitivity), each on a Poisson subsample of rate q, and reports the (ε, δ) spent;
:func:`calibrate_noise` finds the smallest σ that meets a target ε after a given number
of releases.

Two accountants are offered, both from ``dp-accounting``:

* ``"rdp"`` (default): Rényi DP [2]_ with the exact RDP of the sampled Gaussian
  mechanism [3]_, composed over the steps, converted to (ε, δ) with the improved
  conversion of Canonne, Kamath and Steinke [7]_ (Proposition 12) that the library
  implements. Orders (:data:`RDP_ORDERS`): 1.1, 1.2, …, 10.9, then 11 … 63,
  then 128, 256, 512, 1024 (``dp_accounting``'s own default list, written out so
  that the numbers here do not move if the library's default does).
* ``"pld"``: privacy loss distributions [4]_, numerically tighter. Pessimistic
  discretisation of the privacy loss with interval :data:`PLD_DISCRETIZATION` = 1e-3,
  so the reported ε is an upper bound (1e-4 tightens DP-SGD's 2.391 below to 2.382 at
  eight times the cost).

Reference values (``shared/MEASURED.md``, dp-accounting 0.6), which the tests
reproduce: one Gaussian release at ε = 1, δ = 1e-5 needs σ = 3.731 (PLD) or 4.045
(RDP); DP-SGD with q = 256/60000, σ = 1.1, 14,062 steps, δ = 1e-5 spends ε = 2.597 (RDP,
Opacus agrees) or 2.391 (PLD).

Cost. Each distinct step count is one ``dp-accounting`` computation, cached, so calling
:meth:`PrivacyAccountant.epsilon` after every round costs one computation per round
(and :meth:`~PrivacyAccountant.would_exceed` computes the next round's value, which the
next :meth:`~PrivacyAccountant.epsilon` then reuses). On the development machine
(2-core AMD EPYC VM): RDP 40 ms with subsampling (the per-order series of [3]_), under
1 ms without; PLD about 60 ms for DP-SGD's 14,062 subsampled steps and 10 to 30 ms
for unsampled releases. :func:`calibrate_noise` is some ten such computations. Importing
``dp_accounting`` (with scipy) takes about 1.7 s, so it is imported on first use, never
by ``import islands.privacy``.

Client-level DP in federated learning
-------------------------------------
Each round of DP-FedAvg [5]_ is one release of the Gaussian mechanism: the sum of the
clients' updates, each clipped to L2 ≤ S, plus N(0, σ²S²·I) (added by the server, by
each client, or spread over the clients, :mod:`islands.privacy.mechanisms`). The
neighbouring relation is adding or removing one *client* (all of its data), the
sensitivity of the sum is S, and σ is the noise std divided by S. One accountant step
per round.

* **Sampling rate.** When each round trains a random subset of clients, q = clients
  per round / total clients. The RDP and PLD analyses assume *Poisson* sampling: every
  client joins each round independently with probability q, so the round size varies.
  Choosing exactly m clients uniformly at random instead is sampling without
  replacement; accounting for it as Poisson with q = m/N is the common practice of
  DP-SGD libraries but is an approximation, not a proven bound: Lebeda et al. [6]_
  give realistic DP-SGD parameters where Poisson sampling has ε ≈ 1 and sampling
  without replacement ε > 10. For a rigorous claim, sample clients by Poisson, or use
  q = 1 (no amplification) when all clients train every round.
* **Averaging.** Dividing the noisy sum by a public constant (the expected number of
  clients, qN) is post-processing; weighting clients by their data sizes changes the
  sensitivity and must be folded into the clip.
* **Distributed noise and dropouts.** If fewer clients than guaranteed survive, the
  round's real multiplier is lower (:func:`~islands.privacy.effective_noise_multiplier`)
  and this accountant, which assumes one σ for every step, overstates the privacy.

References
----------
.. [1] Google differential privacy team. ``dp-accounting`` (Python package, v0.6),
   https://github.com/google/differential-privacy/tree/main/python.
.. [2] I. Mironov. "Rényi Differential Privacy." IEEE CSF 2017.
.. [3] I. Mironov, K. Talwar, L. Zhang. "Rényi Differential Privacy of the Sampled
   Gaussian Mechanism." arXiv:1908.10530, 2019.
.. [4] S. Meiser, E. Mohammadi. "Tight on Budget? Tight Bounds for r-Fold Approximate
   Differential Privacy." ACM CCS 2018; and A. Koskela, J. Jälkö, A. Honkela.
   "Computing Tight Differential Privacy Guarantees Using FFT." AISTATS 2020.
.. [5] H. B. McMahan, D. Ramage, K. Talwar, L. Zhang. "Learning Differentially Private
   Recurrent Language Models." ICLR 2018.
.. [6] C. J. Lebeda, M. Regehr, G. Kamath, T. Steinke. "Avoiding Pitfalls for Privacy
   Accounting of Subsampled Mechanisms under Composition." arXiv:2405.20769, 2024.
.. [7] C. L. Canonne, G. Kamath, T. Steinke. "The Discrete Gaussian for Differential
   Privacy." NeurIPS 2020 (arXiv:2004.00010).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_float, check_int, describe

__all__ = [
    "METHODS",
    "PLD_DISCRETIZATION",
    "RDP_ORDERS",
    "PrivacyAccountant",
    "calibrate_noise",
    "privacy_profile",
]

RDP_ORDERS: tuple[float, ...] = (
    tuple(1 + x / 10 for x in range(1, 100)) + tuple(range(11, 64)) + (128, 256, 512, 1024)
)
"""Rényi orders the RDP accountant optimises over."""

PLD_DISCRETIZATION = 1e-3
"""Value discretisation interval of the PLD accountant (pessimistic)."""

METHODS = ("rdp", "pld")
"""Accountants :class:`PrivacyAccountant` and :func:`calibrate_noise` accept."""

_STATE_VERSION = 1
_MIN_SIGMA = 1 / 16  # calibrate_noise's search floor: there one release already has ε > 130


def _dp() -> Any:
    """Import ``dp_accounting`` on first use (it pulls in scipy: about 1.7 s)."""
    return importlib.import_module("dp_accounting")


def _check_method(method: Any, owner: str) -> str:
    if not isinstance(method, str) or method not in METHODS:
        raise invalid_parameter("method", owner, "'rdp' or 'pld'", describe(method))
    return method


def _check_rate(rate: Any, owner: str) -> float:
    return check_float(rate, "sampling_rate", owner, low=0.0, low_inclusive=False, high=1.0)


def _check_delta(delta: Any, owner: str) -> float:
    return check_float(delta, "delta", owner, low=0.0, low_inclusive=False, high=1.0,
                       high_inclusive=False)


def _event(sigma: float, rate: float, steps: int) -> Any:
    """Build the dp-accounting event for ``steps`` releases of the (subsampled) Gaussian."""
    dp = _dp()
    release = dp.GaussianDpEvent(sigma)
    if rate < 1.0:
        release = dp.PoissonSampledDpEvent(rate, release)
    return dp.SelfComposedDpEvent(release, steps)


def _fresh_accountant(method: str) -> Any:
    dp = _dp()
    if method == "rdp":
        return dp.rdp.RdpAccountant(list(RDP_ORDERS))
    return dp.pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)


@functools.lru_cache(maxsize=256)
def _rdp_per_release(sigma: float, rate: float) -> tuple[float, ...]:
    """RDP of one release at every order of :data:`RDP_ORDERS` (dp-accounting's values)."""
    accountant = _fresh_accountant("rdp")
    accountant.compose(_event(sigma, rate, 1))
    return tuple(float(v) for v in accountant.rdp)


def _epsilon(sigma: float, rate: float, delta: float, steps: int, method: str) -> float:
    """ε spent at ``delta`` after ``steps`` releases (0.0 for none)."""
    if steps == 0:
        return 0.0
    if method == "rdp":
        # RDP composes additively: k releases have k times one release's RDP at every
        # order, so the costly subsampled-Gaussian RDP is computed once per (σ, q), not
        # once per query (0.1 s each with the orders above, too slow to ask every round)
        rdp = steps * np.asarray(_rdp_per_release(sigma, rate))
        epsilon, _ = _dp().rdp.rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, rdp, delta)
        return float(epsilon)
    accountant = _fresh_accountant(method)
    accountant.compose(_event(sigma, rate, steps))
    return float(accountant.get_epsilon(delta))


@functools.lru_cache(maxsize=512)
def _composed_pld(sigma: float, rate: float, steps: int) -> Any:
    """dp-accounting's PLD of ``steps`` (subsampled) Gaussian releases, add or remove one."""
    pld = _dp().pld.privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=1.0, sampling_prob=rate,
        value_discretization_interval=PLD_DISCRETIZATION, pessimistic_estimate=True)
    return pld.self_compose(steps) if steps > 1 else pld


def privacy_profile(noise_multiplier: float, sampling_rate: float, steps: int,
                    epsilons: Any, delta: float) -> tuple[np.ndarray, float]:
    """Return δ(ε) at every ε given, and ε at ``delta``, of T (subsampled) Gaussian releases.

    The privacy profile [4]_ of the composition, from ``dp-accounting``'s privacy loss
    distribution (pessimistic discretisation, :data:`PLD_DISCRETIZATION`; the larger of
    the add and remove directions), so every δ(ε) returned is at least the true one:
    each (ε, δ(ε)) is a guarantee the mechanism has, and together they give its trade-off
    curve, which :mod:`islands.privacy.audit` tests in one run. Cached per (σ, q, T):
    tens of milliseconds for hundreds of steps, seconds for σ < 0.3 (ε in the hundreds).

    Parameters
    ----------
    noise_multiplier
        σ, a float > 0.
    sampling_rate
        q in (0, 1].
    steps
        T, an int >= 1.
    epsilons
        1-D finite ε values >= 0.
    delta
        δ in (0, 1) at which ε is returned.

    Returns
    -------
    tuple
        δ(ε) as float64 (same length as ``epsilons``), and ε at ``delta`` (the PLD's
        value, at most the RDP accountant's).

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """
    owner = "privacy_profile"
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0,
                        low_inclusive=False)
    rate = _check_rate(sampling_rate, owner)
    steps = check_int(steps, "steps", owner, low=1)
    dlt = _check_delta(delta, owner)
    eps = np.asarray(epsilons, dtype=np.float64)
    if eps.ndim != 1 or eps.size == 0 or not np.all(np.isfinite(eps)) or np.any(eps < 0):
        raise invalid_parameter("epsilons", owner, "a non-empty 1-D array of finite floats "
                                ">= 0", describe(epsilons))
    pld = _composed_pld(sigma, rate, steps)
    deltas = np.asarray(pld.get_delta_for_epsilon(eps), dtype=np.float64)
    return np.clip(deltas, 0.0, 1.0), float(pld.get_epsilon_for_delta(dlt))


class PrivacyAccountant:
    """Running (ε, δ) of repeated releases of a (Poisson-subsampled) Gaussian mechanism.

    Parameters
    ----------
    noise_multiplier
        σ: the noise std divided by the L2 sensitivity, a finite float > 0.
    sampling_rate
        q, the probability that each individual (example, or client for client-level
        DP) takes part in a release, in (0, 1]; 1 means no subsampling. Poisson
        sampling is assumed (see the module docstring for fixed-size samples).
    delta
        δ at which ε is reported, in (0, 1). Pick it well below 1/N for N individuals.
    method
        ``"rdp"`` (Rényi DP, the default) or ``"pld"`` (privacy loss distributions,
        tighter). See the module docstring for the orders and the discretisation.

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    Examples
    --------
    >>> acct = PrivacyAccountant(1.1, sampling_rate=256 / 60000, delta=1e-5)
    >>> acct.step(14062)
    >>> round(acct.epsilon(), 3)
    2.597
    """

    def __init__(
        self,
        noise_multiplier: float,
        *,
        sampling_rate: float = 1.0,
        delta: float = 1e-5,
        method: str = "rdp",
    ) -> None:
        owner = "PrivacyAccountant"
        self._sigma = check_float(
            noise_multiplier, "noise_multiplier", owner, low=0.0, low_inclusive=False
        )
        self._rate = _check_rate(sampling_rate, owner)
        self._delta = _check_delta(delta, owner)
        self._method = _check_method(method, owner)
        self._steps = 0
        self._cache: dict[int, float] = {0: 0.0}

    def __repr__(self) -> str:
        return (
            f"PrivacyAccountant(noise_multiplier={self._sigma}, sampling_rate={self._rate}, "
            f"delta={self._delta}, method={self._method!r}, steps={self._steps})"
        )

    @property
    def noise_multiplier(self) -> float:
        """σ, the noise multiplier of every release."""
        return self._sigma

    @property
    def sampling_rate(self) -> float:
        """q, the Poisson sampling rate of every release."""
        return self._rate

    @property
    def delta(self) -> float:
        """δ at which ε is reported."""
        return self._delta

    @property
    def method(self) -> str:
        """``"rdp"`` or ``"pld"``."""
        return self._method

    @property
    def steps(self) -> int:
        """Releases composed so far."""
        return self._steps

    def step(self, count: int = 1) -> None:
        """Compose ``count`` more releases (an int >= 0)."""
        self._steps += check_int(count, "count", "PrivacyAccountant.step", low=0)

    def _epsilon_after(self, steps: int) -> float:
        eps = self._cache.get(steps)
        if eps is None:
            eps = _epsilon(self._sigma, self._rate, self._delta, steps, self._method)
            self._cache[steps] = eps
        return eps

    def epsilon(self) -> float:
        """ε spent so far at :attr:`delta`: 0.0 before any step, ``inf`` if unbounded."""
        return self._epsilon_after(self._steps)

    def spent(self) -> tuple[float, float]:
        """Return the privacy spent so far, ``(ε, δ)``."""
        return self.epsilon(), self._delta

    def would_exceed(self, target_epsilon: float, count: int = 1) -> bool:
        """Tell whether ``count`` more releases would take ε above ``target_epsilon``.

        Ask before a round, and stop if the answer is True: the run then ends with
        ε ≤ target instead of just past it.

        Parameters
        ----------
        target_epsilon
            The budget, a finite float >= 0.
        count
            Releases about to be made, an int >= 0.
        """
        owner = "PrivacyAccountant.would_exceed"
        target = check_float(target_epsilon, "target_epsilon", owner, low=0.0)
        count = check_int(count, "count", owner, low=0)
        return self._epsilon_after(self._steps + count) > target

    def get_state(self) -> dict[str, Any]:
        """Return the step count and the configuration it belongs to, for checkpoints.

        Plain ints, floats and strings only (JSON- and msgpack-friendly).
        """
        return {
            "version": _STATE_VERSION,
            "steps": self._steps,
            "noise_multiplier": self._sigma,
            "sampling_rate": self._rate,
            "delta": self._delta,
            "method": self._method,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore the step count saved by :meth:`get_state`.

        Raises
        ------
        ValidationError
            If ``state`` is not such a mapping, or was saved by an accountant with
            another σ, sampling rate, δ or method (resuming a run under other
            parameters would misreport its privacy).
        """
        owner = "PrivacyAccountant.set_state"
        if not isinstance(state, Mapping) or state.get("version") != _STATE_VERSION:
            raise invalid_parameter(
                "state",
                owner,
                f"a mapping from get_state() (version {_STATE_VERSION})",
                describe(state),
            )
        steps = check_int(state.get("steps"), "state['steps']", owner, low=0)
        mine = self.get_state()
        for key in ("noise_multiplier", "sampling_rate", "delta", "method"):
            if state.get(key) != mine[key]:
                raise ValidationError(
                    f"{owner}: the state was saved with {key}={state.get(key)!r}, but this "
                    f"accountant has {key}={mine[key]!r}; resuming under another "
                    "configuration would misreport the privacy spent"
                )
        self._steps = steps


def calibrate_noise(
    target_epsilon: float,
    delta: float,
    steps: int,
    *,
    sampling_rate: float = 1.0,
    method: str = "rdp",
    tol: float = 1e-3,
) -> float:
    """Find the smallest noise multiplier σ keeping ε ≤ ``target_epsilon`` after ``steps``.

    ε(σ) decreases in σ. A bracket [σ_lo, σ_hi] with ε(σ_lo) > target ≥ ε(σ_hi) is
    found by doubling or halving from σ = 1, then narrowed by
    ``dp_accounting.mechanism_calibration.calibrate_dp_mechanism`` (Brent's method on
    σ, with a bisection fallback that guarantees the returned σ meets the target). The
    accountant is the one :class:`PrivacyAccountant` uses for ``method``, so
    ``PrivacyAccountant(σ, ...)`` after ``steps`` steps reports ε ≤ target.

    Parameters
    ----------
    target_epsilon
        The budget ε, a finite float > 0.
    delta
        δ, in (0, 1).
    steps
        Number of releases, an int >= 1.
    sampling_rate
        Poisson sampling rate q of every release, in (0, 1].
    method
        ``"rdp"`` or ``"pld"``.
    tol
        Tolerance on σ, a float > 0: the result is at most ``tol`` above the exact
        smallest σ (for this accountant).

    Returns
    -------
    float
        σ, with ε(σ) ≤ ``target_epsilon``.

    Raises
    ------
    ValidationError
        If a parameter is out of range, or the target is so loose that σ below 1/16
        would meet it (one release at σ = 1/16 has ε ≈ 140 to 200 at δ = 1e-5,
        whatever q), or so tight that σ would exceed 2^20.

    Examples
    --------
    >>> round(calibrate_noise(1.0, 1e-5, 1, method="pld"), 2)
    3.73
    """
    owner = "calibrate_noise"
    target = check_float(target_epsilon, "target_epsilon", owner, low=0.0, low_inclusive=False)
    delta = _check_delta(delta, owner)
    steps = check_int(steps, "steps", owner, low=1)
    rate = _check_rate(sampling_rate, owner)
    method = _check_method(method, owner)
    tol = check_float(tol, "tol", owner, low=0.0, low_inclusive=False)

    seen: dict[float, float] = {}

    def epsilon(sigma: float) -> float:
        if sigma not in seen:
            seen[sigma] = _epsilon(sigma, rate, delta, steps, method)
        return seen[sigma]

    low, high = 1.0, 1.0
    if epsilon(1.0) > target:
        while epsilon(high) > target:
            low, high = high, 2.0 * high
            if high > 2.0**20:
                raise invalid_parameter(
                    "target_epsilon",
                    owner,
                    "reachable with a noise multiplier below 2^20",
                    target,
                )
    else:
        while epsilon(low) <= target:
            low, high = low / 2.0, low
            if low < _MIN_SIGMA:
                raise invalid_parameter(
                    "target_epsilon",
                    owner,
                    f"tight enough to need a noise multiplier of at least {_MIN_SIGMA}",
                    target,
                )
    if high - low <= tol:
        return high
    dp = _dp()
    sigma = dp.calibrate_dp_mechanism(
        lambda: _fresh_accountant(method),
        lambda s: _event(s, rate, steps),
        target,
        delta,
        dp.ExplicitBracketInterval(low, high),
        tol=tol,
    )
    return float(sigma)
