"""Faulty copies of islands' Gaussian mechanism, for the privacy-audit tests.

Each function is a copy of :func:`islands.privacy.audit.gaussian_releases` with one line
changed (marked ``# FAULT``), called through the same harness
(``audit_gaussian(..., mechanism=...)``). The real mechanism is never patched: the tests
show that the audit catches each fault in a copy and stays quiet on the original.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from islands.crypto.prg import csprng_uniform
from islands.privacy import clip_l2, gaussian_noise
from islands.privacy.audit import DiracCanaries


def releases_without_clip(canaries: DiracCanaries, included: NDArray[np.bool_], *,
                          noise_multiplier: float, clip: float, rounds: int,
                          sampling_rate: float, canary_norm: float) -> NDArray[np.float64]:
    """The updates are summed unclipped: sensitivity M instead of S."""
    clipped = np.array([canary_norm])  # FAULT: clip_l2 not called
    m, coords, signs = canaries.m, canaries.coordinates, canaries.signs
    releases = np.empty((rounds, canaries.dim))
    for t in range(rounds):
        sampled = included & (csprng_uniform(m) < sampling_rate)
        release = gaussian_noise(canaries.dim, noise_multiplier * clip)
        release[coords[sampled]] += clipped[0] * signs[sampled]
        releases[t] = release
    return releases


def releases_first_round_noiseless(canaries: DiracCanaries, included: NDArray[np.bool_], *,
                                   noise_multiplier: float, clip: float, rounds: int,
                                   sampling_rate: float, canary_norm: float
                                   ) -> NDArray[np.float64]:
    """Round 0 releases its sum without noise (a forgotten noise call)."""
    clipped, _ = clip_l2(np.array([canary_norm]), clip)
    m, coords, signs = canaries.m, canaries.coordinates, canaries.signs
    releases = np.empty((rounds, canaries.dim))
    for t in range(rounds):
        sampled = included & (csprng_uniform(m) < sampling_rate)
        release = gaussian_noise(canaries.dim, noise_multiplier * clip if t else 0.0)  # FAULT
        release[coords[sampled]] += clipped[0] * signs[sampled]
        releases[t] = release
    return releases


def releases_unsampled(canaries: DiracCanaries, included: NDArray[np.bool_], *,
                       noise_multiplier: float, clip: float, rounds: int,
                       sampling_rate: float, canary_norm: float) -> NDArray[np.float64]:
    """Every included canary takes part in every round, whatever rate is accounted."""
    clipped, _ = clip_l2(np.array([canary_norm]), clip)
    coords, signs = canaries.coordinates, canaries.signs
    releases = np.empty((rounds, canaries.dim))
    for t in range(rounds):
        sampled = included.copy()  # FAULT: no Poisson sampling
        release = gaussian_noise(canaries.dim, noise_multiplier * clip)
        release[coords[sampled]] += clipped[0] * signs[sampled]
        releases[t] = release
    return releases


def releases_noise_halved(canaries: DiracCanaries, included: NDArray[np.bool_], *,
                          noise_multiplier: float, clip: float, rounds: int,
                          sampling_rate: float, canary_norm: float) -> NDArray[np.float64]:
    """The noise has half the s.d. the accountant is told (e.g. σ²S² confused with σS/2)."""
    clipped, _ = clip_l2(np.array([canary_norm]), clip)
    m, coords, signs = canaries.m, canaries.coordinates, canaries.signs
    releases = np.empty((rounds, canaries.dim))
    for t in range(rounds):
        sampled = included & (csprng_uniform(m) < sampling_rate)
        release = gaussian_noise(canaries.dim, noise_multiplier * clip / 2)  # FAULT
        release[coords[sampled]] += clipped[0] * signs[sampled]
        releases[t] = release
    return releases
