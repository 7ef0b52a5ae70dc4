"""The Gaussian mechanism's pieces: L2 clipping, cryptographic noise, distributed noise.

Client-level differential privacy in federated learning (DP-FedAvg, McMahan et al. [1]_;
the FL tutorial §3.3) releases, each round, the sum of the clients' updates after each
is clipped to L2 norm ≤ S (:func:`clip_l2`), plus Gaussian noise N(0, σ²S²·I): the
Gaussian mechanism with sensitivity S for adding or removing one client, and noise
multiplier σ. :class:`~islands.privacy.PrivacyAccountant` turns σ and the number of
rounds into (ε, δ).

Who adds the noise
------------------
* **Locally**: every client adds N(0, σ²S²) itself, so its upload alone is already
  protected; the sum then carries m times the variance it needs.
* **Distributed** (with secure aggregation, which shows the server only the sum): each
  client adds N(0, σ²S²/t), where t is the number of surviving clients the protocol
  *guarantees* (:func:`distributed_noise_std`). Any k ≥ t survivors' noises sum to
  N(0, k·σ²S²/t), at least the N(0, σ²S²) the accountant assumes. If fewer than t
  survive, the sum is under-noised: its actual multiplier is
  :func:`effective_noise_multiplier` (MEASURED.md: 30% dropout from t = all clients
  turns σ = 1.0 into 0.837), and the round must be accounted with that value or
  discarded. Calibrating to the guaranteed survivors rather than to the clients that
  start the round is what keeps dropouts from silently weakening the guarantee.

Caveats, stated plainly
-----------------------
* **Collusion.** Distributed noise protects against the server. Clients who collude
  with it know their own noise shares and can subtract them: with c colluding
  survivors out of k, the noise left is N(0, (k − c)·σ²S²/t). The trust assumption
  therefore includes a bound on colluding clients, and t should be the guaranteed
  number of *honest* survivors if the claim is to hold against them.
* **Floating point.** The noise is a float64 Gaussian from a CSPRNG
  (:func:`islands.crypto.prg.csprng_normal`, Box–Muller on 53-bit uniforms); the
  floating-point caveats of Mironov [2]_ apply. With secure aggregation each noisy
  update is then rounded to fixed point (2^−24 by default) before summation; the
  rounding error depends on the update, so the released sum is not exactly the sum of
  Gaussians, only within m·2^−25 of it per coordinate. The rigorous alternative is the
  distributed discrete Gaussian of Kairouz et al. [3]_, not implemented here.
* **Fixed-point range.** Noise widens the values that must fit the fixed-point range
  of :func:`islands.crypto.fixedpoint.encode_fixed`; its bound is far above realistic
  σS, but a noisy update is checked like any other.

References
----------
.. [1] H. B. McMahan, D. Ramage, K. Talwar, L. Zhang. "Learning Differentially Private
   Recurrent Language Models." ICLR 2018.
.. [2] I. Mironov. "On Significance of the Least Significant Bits for Differential
   Privacy." ACM CCS 2012.
.. [3] P. Kairouz, Z. Liu, T. Steinke. "The Distributed Discrete Gaussian Mechanism
   for Federated Learning with Secure Aggregation." ICML 2021.
.. [4] C. Dwork, A. Roth. "The Algorithmic Foundations of Differential Privacy."
   Foundations and Trends in Theoretical Computer Science 9(3–4), 2014 (§3.5.3 and
   Appendix A: the Gaussian mechanism).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.crypto.prg import csprng_normal
from islands.errors import invalid_parameter
from islands.validation import check_float, check_int, describe

__all__ = [
    "clip_l2",
    "distributed_noise_std",
    "effective_noise_multiplier",
    "gaussian_noise",
]


def clip_l2(vector: ArrayLike, bound: float) -> tuple[NDArray[np.float64], float]:
    """Scale ``vector`` down so that its L2 norm is at most ``bound``.

    The clipped vector is v · min(1, S/‖v‖₂): its direction is kept and vectors already
    inside the ball are returned unchanged (as a copy). This bounds the sensitivity of a
    sum of clipped vectors to S when one contributor is added or removed.

    Parameters
    ----------
    vector
        Finite real values of any shape (the norm is over all of them).
    bound
        The clipping norm S, a finite float > 0.

    Returns
    -------
    clipped : ndarray of float64
        A new array shaped like ``vector``, with ‖clipped‖₂ ≤ S up to float64 rounding
        (a relative 1e-15).
    factor : float
        The scale applied, min(1, S/‖v‖₂), in (0, 1]; below 1 means the vector was
        clipped (the fraction of clipped updates is a useful diagnostic for choosing S).

    Raises
    ------
    ValidationError
        If ``bound`` is not a finite float > 0 or ``vector`` holds NaN or infinity.
    """
    bound = check_float(bound, "bound", "clip_l2", low=0.0, low_inclusive=False)
    arr = np.array(vector, dtype=np.float64)  # always a copy
    if not np.all(np.isfinite(arr)):
        raise invalid_parameter("vector", "clip_l2", "finite values", describe(arr))
    factor = _clip_factor(arr, bound)
    if factor < 1.0:
        arr *= factor
    return arr, factor


def _clip_factor(arr: NDArray[np.float64], bound: float) -> float:
    """Return min(1, bound/‖arr‖₂), without overflow for entries near the float64 maximum."""
    flat = arr.ravel()
    with np.errstate(over="ignore"):
        norm = float(np.linalg.norm(flat))
    if math.isfinite(norm):
        return 1.0 if norm <= bound else bound / norm
    scale = float(np.max(np.abs(flat)))  # finite, so the scaled norm is at most √size
    scaled_norm = float(np.linalg.norm(flat / scale))
    return min(1.0, (bound / scale) / scaled_norm)


def gaussian_noise(shape: int | tuple[int, ...], sigma: float) -> NDArray[np.float64]:
    """Independent N(0, sigma²) noise from a cryptographic generator.

    Draws from :func:`islands.crypto.prg.csprng_normal` (ChaCha20 keyed by the
    operating system's CSPRNG, then Box–Muller), never from numpy's generators, whose
    state can be recovered from outputs or guessed from a logged seed, after which the
    noise can be subtracted. Not reproducible, on purpose.

    Parameters
    ----------
    shape
        Output shape: an int or a tuple of ints, each >= 0.
    sigma
        Standard deviation, a finite float >= 0 (0 gives zeros: no privacy).

    Returns
    -------
    ndarray of float64
        The noise.

    Raises
    ------
    ValidationError
        If ``sigma`` is negative or not finite, or ``shape`` is not a shape.
    """
    sigma = check_float(sigma, "sigma", "gaussian_noise", low=0.0)
    return csprng_normal(shape, sigma)


def distributed_noise_std(noise_multiplier: float, clip: float, guaranteed: int) -> float:
    """Return the std of the noise each client adds when the noise is distributed.

    Each client adds N(0, (σS)²/t), t = ``guaranteed``, so that the noises of any
    k ≥ t surviving clients sum to N(0, (k/t)·σ²S²), which is at least the N(0, σ²S²)
    of the Gaussian mechanism with noise multiplier σ and sensitivity S. With t = 1
    this is local noise: every client adds the full N(0, σ²S²).

    Parameters
    ----------
    noise_multiplier
        σ, the multiplier the accountant is told about, a finite float >= 0.
    clip
        S, the L2 clipping norm of each client's contribution, a finite float > 0.
    guaranteed
        t, the number of clients whose contributions are guaranteed to reach the sum
        (secure aggregation's reconstruction threshold, for example), an int >= 1.

    Returns
    -------
    float
        σ·S/√t.

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    Notes
    -----
    Only the *sum* carries enough noise; a single client's contribution carries
    N(0, σ²S²/t). Use distributed noise only where single contributions are hidden
    (secure aggregation, additive secret sharing), and see the module docstring for
    colluding clients.
    """
    sigma = check_float(noise_multiplier, "noise_multiplier", "distributed_noise_std", low=0.0)
    clip = check_float(clip, "clip", "distributed_noise_std", low=0.0, low_inclusive=False)
    t = check_int(guaranteed, "guaranteed", "distributed_noise_std", low=1)
    return sigma * clip / math.sqrt(t)


def effective_noise_multiplier(noise_multiplier: float, guaranteed: int, survivors: int) -> float:
    """Return the noise multiplier a sum actually got: √(survivors / guaranteed) · σ.

    When every client added N(0, σ²S²/t) (:func:`distributed_noise_std`) and k of them
    reached the sum, the sum carries N(0, (k/t)·σ²S²), i.e. multiplier σ·√(k/t).
    k ≥ t gives at least σ; k < t gives less, and the round is then weaker than the
    accountant assumed (account it with the returned value, or do not release it).

    Parameters
    ----------
    noise_multiplier
        σ the noise was calibrated for, a finite float >= 0.
    guaranteed
        t the noise was calibrated for, an int >= 1.
    survivors
        k, the clients whose noisy contributions are in the sum, an int >= 0.

    Returns
    -------
    float
        σ·√(k/t).

    Raises
    ------
    ValidationError
        If a parameter is out of range.

    Examples
    --------
    >>> round(effective_noise_multiplier(1.0, 100, 70), 3)  # 30% dropped, t = all
    0.837
    """
    owner = "effective_noise_multiplier"
    sigma = check_float(noise_multiplier, "noise_multiplier", owner, low=0.0)
    t = check_int(guaranteed, "guaranteed", owner, low=1)
    k = check_int(survivors, "survivors", owner, low=0)
    return sigma * math.sqrt(k / t)
