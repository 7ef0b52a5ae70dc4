"""Faulty copies of islands' DP mechanisms, for the privacy-audit tests.

Each function is a copy of :func:`islands.privacy.audit.gaussian_releases` with one line
changed (marked ``# FAULT``), called through the same harness
(``audit_gaussian(..., mechanism=...)``); the client-level copies replace
``_DPClient.payload`` behind a ClientDP run through the real protocol
(``audit_client_dp(aggregator=...)``), and the DP-SGD copies replace
``PrivateTrainer.train``'s pieces (``audit_dpsgd(train=...)``). The real mechanism is
never patched: the tests show that the audit catches each fault in a copy and stays quiet
on the original.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.aggregation.protect import ClientDP, _DPClient
from islands.arrays import Vector
from islands.crypto.prg import csprng_uniform
from islands.errors import ProtocolError
from islands.privacy import clip_l2, gaussian_noise
from islands.privacy.audit import DiracCanaries
from islands.runtime import Party


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


# --------------------------------------------------------------------------- client-level DP
# Copies of islands.aggregation.protect._DPClient.payload with one line changed, behind a
# ClientDP whose client half is the copy; the server half, the accountant and every check
# are the real ones. They run through the real protocol roles (audit_client_dp).


class _DPClientWithoutClip(_DPClient):
    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> Any:
        if self.round != round or self.std is None:
            raise ProtocolError(f"client {party.name!r}: no noise request for round {round}",
                                party=party.name, step="update")
        delta = np.asarray(params, np.float64) - np.asarray(base, np.float64)
        clipped = delta  # FAULT: clip_l2 not called
        noised = clipped + gaussian_noise(delta.shape, self.std)
        self.std = None
        private = (np.asarray(base, np.float64) + noised).astype(np.float32)
        return self.inner.payload(party, server=server, round=round, params=private,
                                  base=base, weight=weight)


class _DPClientFirstRoundNoiseless(_DPClient):
    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> Any:
        if self.round != round or self.std is None:
            raise ProtocolError(f"client {party.name!r}: no noise request for round {round}",
                                party=party.name, step="update")
        delta = np.asarray(params, np.float64) - np.asarray(base, np.float64)
        clipped, _ = clip_l2(delta, self.clip)
        noised = clipped + (gaussian_noise(delta.shape, self.std) if round != 1 else 0.0)  # FAULT
        self.std = None
        private = (np.asarray(base, np.float64) + noised).astype(np.float32)
        return self.inner.payload(party, server=server, round=round, params=private,
                                  base=base, weight=weight)


class ClientDPWithoutClip(ClientDP):
    """Client-level DP whose clients add the noise to their update unclipped."""

    def client_half(self) -> _DPClient:
        return _DPClientWithoutClip(self.inner.client_half(), self)


class ClientDPFirstRoundNoiseless(ClientDP):
    """Client-level DP whose clients forget the noise in round 1."""

    def client_half(self) -> _DPClient:
        return _DPClientFirstRoundNoiseless(self.inner.client_half(), self)


# --------------------------------------------------------------------------- DP-SGD
# A copy of islands.hfl.torch.dpsgd.PrivateTrainer.train whose pieces (the Poisson sample,
# the clipped sum, the noise of each call) are parameters, and faulty copies of those
# pieces, each with one line changed. torch is imported inside them (this module is also
# loaded by tests that need no torch).


def clipped_sum_without_clip(trainer: Any, rows: NDArray[np.int64]) -> tuple[Any, float]:
    """Copy of ``PrivateTrainer.clipped_sum`` that sums the per-sample gradients unclipped."""
    import torch

    from islands.hfl.torch.models import _params_of
    from islands.hfl.torch.training import _as_float

    tensors = _params_of(trainer._module)
    if rows.size == 0:
        return torch.zeros(sum(t.numel() for t in tensors)), float("nan")
    idx = torch.from_numpy(rows)
    xb = _as_float(trainer.trainer.features.index_select(0, idx))
    yb = trainer.trainer.targets.index_select(0, idx)
    with torch.enable_grad():
        losses = trainer.trainer.loss(trainer._wrapped, xb, yb, reduction="none")
        torch.autograd.grad(losses.sum(), tensors, retain_graph=True)
        coef = torch.ones_like(trainer._wrapped.get_clipping_coef())  # FAULT: no clip
        trainer._wrapped.disable_hooks()
        try:
            grads = torch.autograd.grad((coef * losses).sum(), tensors)
        finally:
            trainer._wrapped.enable_hooks()
    summed = torch.cat([g.reshape(-1) for g in grads])
    return summed, float(losses.detach().mean())


def poisson_sample_four_times(n: int, rate: float) -> NDArray[np.int64]:
    """Copy of ``poisson_sample`` that keeps each row with 4× the rate accounted."""
    out: NDArray[np.int64] = np.flatnonzero(
        csprng_uniform(int(n)) < min(1.0, 4.0 * rate)).astype(np.int64)  # FAULT
    return out


class FirstCallNoiseless:
    """True on its first call only: the step that forgets its noise."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls == 1


def dpsgd_train(trainer: Any, params: Any, *, start: Any, steps: int, batch_size: int,
                lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
                prox_mu: float = 0.0, momentum_buffer: Any = None, correction: Any = None,
                sample: Any = None, clipped_sum: Any = None, noiseless: Any = None,
                noise_scale: float = 1.0) -> Any:
    """Copy of ``PrivateTrainer.train`` with its pieces as parameters.

    ``noise_scale`` multiplies the noise's s.d. (0.5: the noise halved, 0: removed);
    ``noiseless``, called once per step, drops the step's noise when it returns True.
    """
    import torch

    from islands.crypto.prg import csprng_normal
    from islands.hfl.torch.dpsgd import poisson_sample
    from islands.hfl.torch.models import _flat_tensor, _load_checked, flat_parameters
    from islands.hfl.torch.training import TrainOutcome

    sample = poisson_sample if sample is None else sample
    summing = type(trainer).clipped_sum if clipped_sum is None else clipped_sum
    st = trainer.trainer.settings(params, start=start, steps=steps, batch_size=batch_size,
                                  lr=lr, momentum=momentum, weight_decay=weight_decay,
                                  prox_mu=prox_mu, momentum_buffer=momentum_buffer,
                                  correction=correction, owner="dpsgd_train")
    rate = trainer.dp.sampling_rate(st.batch_size, trainer.trainer.n)
    std = trainer.dp.noise_multiplier * trainer.dp.clip
    buf = st.momentum_buffer
    with trainer._lock:
        _load_checked(trainer._module, st.params)
        flat = _flat_tensor(trainer._module)
        anchor = flat.clone() if st.prox_mu > 0.0 else None
        for _ in range(st.steps):
            summed, _ = summing(trainer, sample(trainer.trainer.n, rate))
            with torch.no_grad():
                scale = 0.0 if noiseless is not None and noiseless() else noise_scale
                noise = torch.from_numpy(csprng_normal(summed.numel(), std) * scale).to(
                    summed.dtype)
                g = (summed + noise) / st.batch_size
                buf = st.apply(flat, g, buf, anchor)
        out = flat_parameters(trainer._module)
    end = start.advance(st.steps, st.steps_per_epoch)
    return TrainOutcome(out, None if buf is None else buf.numpy(), float("nan"), st.steps, end)
