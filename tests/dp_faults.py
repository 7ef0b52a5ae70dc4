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


# --- PCA ---
# Faulty copies of federated DP-PCA's noise source, :func:`islands.pca.protocol._noise`
# (each site's and the curator's draws go through it, one label per use: "mean <site>",
# "moment <site>"; "mean", "moment" at the central curator), and of its row sums,
# :func:`islands.pca.protocol._sums`. A test installs a copy with pytest's ``monkeypatch``
# for the duration of one audit (``audit_pca_dp``); the real functions are never edited.

from collections.abc import Callable  # noqa: E402

from islands.crypto.prg import csprng_normal, keyed_normal  # noqa: E402
from islands.data.sources import BlockSource  # noqa: E402
from islands.pca import maths as pca_maths  # noqa: E402
from islands.pca.protocol import PcaConfig, _reproducible_key  # noqa: E402

PcaNoise = Callable[[PcaConfig, str], pca_maths.NormalSource]


def pca_noise_without(kind: str) -> PcaNoise:
    """``_noise`` whose draws for one release (labels starting with ``kind``) are zero."""

    def _noise(config: PcaConfig, label: str) -> pca_maths.NormalSource:
        if label.startswith(kind):  # FAULT: this release's noise is forgotten
            return lambda count, sigma: np.zeros(count)
        if config.noise_seed is None:
            return lambda count, sigma: csprng_normal((count,), sigma)
        key = _reproducible_key(config.noise_seed, label)
        return lambda count, sigma: keyed_normal(key, (count,), sigma, label=b"pca")

    return _noise


def pca_noise_scaled(factor: float) -> PcaNoise:
    """``_noise`` drawing ``factor`` times the s.d. it is asked for (e.g. ½: noise halved)."""

    def _noise(config: PcaConfig, label: str) -> pca_maths.NormalSource:
        if config.noise_seed is None:
            return lambda count, sigma: csprng_normal((count,), factor * sigma)  # FAULT
        key = _reproducible_key(config.noise_seed, label)
        return lambda count, sigma: keyed_normal(key, (count,), factor * sigma, label=b"pca")

    return _noise


def pca_sums_unnormalized(source: BlockSource, *, normalize: bool) -> tuple[np.ndarray, int]:
    """``_sums`` that forgets to scale rows to unit norm: the mean's sensitivity is unbounded."""
    total = np.zeros(source.n_features)
    rows = 0
    for block in source.blocks():
        total += block.sum(axis=0)  # FAULT: normalize ignored
        rows += block.shape[0]
    return total, rows
