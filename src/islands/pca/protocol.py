"""Roles of federated PCA: s sites (the first also aggregates) and a publisher.

Every mode runs three passes over each site's data (streamed in blocks, O(d²) memory
per site): column sums for joint centring, the second moment of the centred rows, and
the projection the site publishes. Messages by mode (site 1 is the aggregator):

=============  ===========================================================================
mode           messages
=============  ===========================================================================
``plain``      ``stats`` (Σx, N_i) → site 1; ``mean`` ← site 1; ``moment`` A_i → site 1;
               ``components`` ← site 1; ``projection`` Y_i → publisher. No noise.
``elfedpca``   ``mask`` (a_i, b_i) from site 2 to sites 3..s; ``stats`` (Σx + a_i,
               N_i + b_i); ``mean``; ``noise`` (seed, ε, δ) ← site 1; ``moment``
               A_i + E/s with the same E at every site; ``components``; ``projection``.
``secure``     ``session`` (16 random bytes) ← site 1; ``pubkey`` between every two
               sites; ``stats`` and ``moment`` as fixed-point ring elements under pairwise
               masks that cancel in the sum, each site adding its own N(0, τ²/s) noise;
               ``mean``; ``components``; ``projection``.
``dpdispca``   ``stats``; ``mean``; ``moment`` X_iᵀX_i/N_i + E_i with the site's own
               τ_i = sqrt(2 ln(1.25/δ))/(N_i ε); ``components``; ``projection``.
``central``    ``rows`` (every raw row) → site 1, the trusted curator, which adds one
               E ~ τ; ``mean``; ``components``; ``projection``.
=============  ===========================================================================

Trust and collusion, by mode:

* ``elfedpca`` (faithful): every site knows E, so site 1 recovers each A_i exactly (the
  source notes say so themselves; :mod:`islands.pca.audit` does it); site 2 knows every
  centring mask, so site 1 colluding with site 2 learns every site's sum.
* ``secure`` (hardened): site 1 sees only totals of sums, counts and second moments (the
  pairwise masks hide each input unless all s − 1 other sites collude against it). The
  noise is the sum of s independent shares of variance τ²/s drawn from each site's
  CSPRNG: no single party knows it. The (ε, δ) guarantee assumes **no site colludes with
  site 1**; a coalition of t sites that pools its noise shares leaves noise of variance
  τ²(s − t)/s, i.e. the guarantee of τ·sqrt((s − t)/s). All sites must finish: there is
  no dropout recovery.
* In every mode the published projections Y_i = X̃_i V' are raw projections of each
  site's rows, **not** differentially private; only the components V' are.

References
----------
.. [1] ELFedPCA notes (``papers/elfedpca-notes.zh.txt``), steps 1-6.
.. [2] Bonawitz et al. "Practical Secure Aggregation for Privacy-Preserving Machine
   Learning". CCS 2017 (pairwise masking).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from islands.crypto import decode_fixed, encode_fixed
from islands.crypto.fixedpoint import max_abs_value
from islands.crypto.masking import generate_key, pairwise_mask
from islands.crypto.prg import csprng_normal
from islands.data.sources import BlockSource
from islands.errors import ValidationError
from islands.pca import maths
from islands.runtime import Party

__all__ = ["MODES", "PcaConfig", "PublisherResult", "SiteResult", "publisher", "site"]

Array = NDArray[np.float64]
Mode = Literal["plain", "elfedpca", "secure", "dpdispca", "central"]
MODES: tuple[Mode, ...] = ("plain", "elfedpca", "secure", "dpdispca", "central")
STATS_FRAC_BITS = 24
MOMENT_FRAC_BITS = 40


@dataclass(frozen=True)
class PcaConfig:
    """What every party agrees on before the run (the federation's job description).

    Attributes
    ----------
    mode
        One of :data:`MODES`.
    n_components
        k.
    sites
        Site names in order; the first aggregates.
    publisher
        The publisher's name.
    epsilon, delta
        The privacy target (None for ``plain``).
    seed
        Seed of the statistical randomness of the published schemes (ELFedPCA's masks
        and shared noise seed, DPdisPCA's and central's noise). Secure mode ignores it:
        its masks and noise come from each site's CSPRNG.
    """

    mode: Mode
    n_components: int
    sites: tuple[str, ...]
    publisher: str
    epsilon: float | None = None
    delta: float | None = None
    seed: int = 0

    @property
    def aggregator(self) -> str:
        """Site 1, which also aggregates."""
        return self.sites[0]

    @property
    def normalizes(self) -> bool:
        """Whether rows are scaled to unit norm (every DP mode: sensitivity needs ‖x‖ ≤ 1)."""
        return self.mode != "plain"


@dataclass(frozen=True)
class SiteResult:
    """What a site ends with.

    Attributes
    ----------
    mean, components, eigenvalues
        The joint mean, the k×d components V'ᵀ and their eigenvalues in A'.
    n_rows, n_total
        This site's rows and all sites' rows.
    tau
        The noise scale this site's scheme used (DPdisPCA: this site's τ_i; None for
        plain).
    noisy_moment
        A' (d×d), the matrix decomposed; only site 1 has it (None elsewhere).
    """

    mean: Array
    components: Array
    eigenvalues: Array
    n_rows: int
    n_total: int
    tau: float | None
    noisy_moment: Array | None


@dataclass(frozen=True)
class PublisherResult:
    """The published data: every site's projection, stacked in site order."""

    projection: Array
    rows_per_site: dict[str, int]


# ------------------------------------------------------------------ helpers


def _sums(source: BlockSource) -> tuple[Array, int]:
    total = np.zeros(source.n_features)
    rows = 0
    for block in source.blocks():
        total += block.sum(axis=0)
        rows += block.shape[0]
    if rows == 0:
        raise ValidationError(f"{source.name} has no rows")
    return total, rows


def _statistical_normal(rng: np.random.Generator) -> maths.NormalSource:
    def draw(count: int, sigma: float) -> Array:
        return rng.normal(0.0, sigma, size=count)
    return draw


def _secure_normal(count: int, sigma: float) -> Array:
    return csprng_normal((count,), sigma)


def _add_up(parts: list[Array]) -> Array:
    """Sum same-shaped arrays in place (np.sum over a list would stack them all first)."""
    total = np.array(parts[0], dtype=np.float64)
    for part in parts[1:]:
        total += part
    return total


def _check(value: Any, shape: tuple[int, ...], what: str, frm: str) -> Any:
    if not (isinstance(value, np.ndarray) and value.shape == shape):
        got = value.shape if isinstance(value, np.ndarray) else type(value).__name__
        raise ValidationError(f"{frm!r} sent {what} of shape {got}, expected {shape}")
    return value


# ------------------------------------------------------------------ roles


def _check_ring_range(sums: Array, name: str, sites: int) -> None:
    """Refuse, before anything is sent, column sums the secure mode's ring cannot add up."""
    bound = max_abs_value(STATS_FRAC_BITS, sites)
    big = np.flatnonzero(np.abs(sums) > bound)
    if big.size:
        col = int(big[0])
        raise ValidationError(
            f"{name}: the sum of column {col} is {float(sums[col]):.3g}, but the secure mode "
            f"adds column sums in 64-bit fixed point with {STATS_FRAC_BITS} fractional bits "
            f"over {sites} sites, so each must be at most {bound:.3g}; rescale the data "
            "(e.g. standardise it) before the run"
        )


def site(party: Party, source: BlockSource, *, config: PcaConfig) -> SiteResult:
    """Role of one site; site 1 (``config.sites[0]``) also aggregates.

    Parameters
    ----------
    party
        This site's context.
    source
        This site's rows, streamed in blocks (see :func:`islands.data.open_source`).
    config
        The federation's shared settings.
    """
    d, k, s = source.n_features, config.n_components, len(config.sites)
    agg = config.aggregator
    is_agg = party.name == agg
    others = [p for p in config.sites if p != party.name]
    sums, rows = _sums(source)
    if config.mode == "secure":
        _check_ring_range(sums, party.name, s)

    # ---- pass 1: joint centring
    session = b""
    key = None
    publics: dict[str, bytes] = {}
    if config.mode == "secure":
        if is_agg:
            session = secrets.token_bytes(16)
            party.broadcast("session", session, to=others)
        else:
            session = party.recv(agg, "session")
        key = generate_key()
        party.broadcast("pubkey", key.public, to=others)
        publics = {p: party.recv(p, "pubkey") for p in others}

    if config.mode == "central":
        return _central(party, source, config, rows)

    stats = np.append(sums, float(rows))
    if config.mode == "elfedpca" and s > 2:
        # site 2 draws zero-sum masks for sites 2..s and keeps its own (paper step 1)
        second = config.sites[1]
        if party.name == second:
            real, ints = maths.zero_sum_masks(s - 1, d, np.random.default_rng(config.seed))
            for i, peer in enumerate(config.sites[2:], start=1):
                party.send(peer, "mask", {"a": real[i], "b": int(ints[i])})
            mask_a, mask_b = real[0], int(ints[0])
        elif not is_agg:
            got = party.recv(second, "mask")
            mask_a, mask_b = _check(got["a"], (d,), "a mask", second), int(got["b"])
        if not is_agg:
            stats = np.append(sums + mask_a, float(rows + mask_b))

    if config.mode == "secure":
        assert key is not None
        ring = encode_fixed(stats, frac_bits=STATS_FRAC_BITS, headroom=s)
        ring += pairwise_mask(party.name, key, publics, d + 1, context=session, label=b"stats")
        outgoing: Any = ring
    else:
        outgoing = stats

    if is_agg:
        parts = [outgoing] + [_check(party.recv(p, "stats"), (d + 1,), "stats", p)
                              for p in others]
        if config.mode == "secure":
            total_ring = np.zeros(d + 1, dtype=np.uint64)
            for part in parts:
                total_ring += part
            total = decode_fixed(total_ring, frac_bits=STATS_FRAC_BITS)
        else:
            total = _add_up(parts)
        n_total = round(float(total[-1]))
        mean = total[:-1] / n_total
        party.broadcast("mean", {"mean": mean, "n": n_total}, to=others)
    else:
        party.send(agg, "stats", outgoing)
        got = party.recv(agg, "mean")
        mean, n_total = _check(got["mean"], (d,), "the mean", agg), int(got["n"])

    # ---- pass 2: second moment, with each scheme's noise
    outer, _ = maths.moment(source.blocks(), mean, normalize=config.normalizes)
    tau: float | None = None
    if config.mode == "plain":
        local = outer / n_total
    elif config.mode == "dpdispca":
        assert config.epsilon is not None and config.delta is not None
        tau = maths.gaussian_tau(config.epsilon, config.delta, rows)
        rng = np.random.default_rng([config.seed, config.sites.index(party.name)])
        noisy_local = outer / rows + maths.symmetric_noise(d, tau, _statistical_normal(rng))
        local = noisy_local * (rows / n_total)  # site 1 forms Σ (N_i/n)(A_i + E_i)
    elif config.mode == "elfedpca":
        assert config.epsilon is not None and config.delta is not None
        if is_agg:
            seed = int(np.random.default_rng(config.seed).integers(0, 2**63 - 1))
            party.broadcast("noise", {"seed": seed, "epsilon": config.epsilon,
                                      "delta": config.delta}, to=others)
        else:
            got = party.recv(agg, "noise")
            seed = int(got["seed"])
        tau = maths.gaussian_tau(config.epsilon, config.delta, n_total)
        shared = maths.symmetric_noise(d, tau, _statistical_normal(np.random.default_rng(seed)))
        local = outer / n_total + shared / s
    else:  # secure
        assert config.epsilon is not None and config.delta is not None and key is not None
        tau = maths.gaussian_tau(config.epsilon, config.delta, n_total)
        own_noise = maths.symmetric_noise(d, tau / np.sqrt(s), _secure_normal)
        local = outer / n_total + own_noise

    if config.mode == "secure":
        assert key is not None
        upper = encode_fixed(maths.upper_of(local), frac_bits=MOMENT_FRAC_BITS, headroom=s)
        upper += pairwise_mask(party.name, key, publics, upper.size, context=session,
                               label=b"moment")
        outgoing = upper
        shape: tuple[int, ...] = (d * (d + 1) // 2,)
    else:
        outgoing = local
        shape = (d, d)

    noisy: Array | None = None
    if is_agg:
        parts = [outgoing] + [_check(party.recv(p, "moment"), shape, "a moment", p)
                              for p in others]
        if config.mode == "secure":
            ring_total = np.zeros(shape, dtype=np.uint64)
            for part in parts:
                ring_total += part
            noisy = maths.symmetric_from_upper(
                decode_fixed(ring_total, frac_bits=MOMENT_FRAC_BITS), d)
        else:
            noisy = _add_up(parts)
        values, comps = maths.top_components(noisy, k)
        party.broadcast("components", {"components": comps, "eigenvalues": values},
                        to=others)
    else:
        party.send(agg, "moment", outgoing)
        got = party.recv(agg, "components")
        comps = _check(got["components"], (k, d), "components", agg)
        values = got["eigenvalues"]

    _publish(party, source, config, mean, comps)
    return SiteResult(mean=mean, components=comps, eigenvalues=values, n_rows=rows,
                      n_total=n_total, tau=tau, noisy_moment=noisy)


def _central(party: Party, source: BlockSource, config: PcaConfig, rows: int) -> SiteResult:
    """Run the centralised reference: raw rows go to site 1, which adds one noise draw.

    Rows travel as a stream of ``rows`` messages closed by an empty block.
    """
    agg = config.aggregator
    others = [p for p in config.sites if p != party.name]
    d, k = source.n_features, config.n_components
    assert config.epsilon is not None and config.delta is not None
    if party.name != agg:
        for block in source.blocks():
            if block.shape[0]:
                party.send(agg, "rows", np.ascontiguousarray(block))
        party.send(agg, "rows", np.zeros((0, d)))
        got = party.recv(agg, "mean")
        mean, n_total = _check(got["mean"], (d,), "the mean", agg), int(got["n"])
        got = party.recv(agg, "components")
        comps = _check(got["components"], (k, d), "components", agg)
        tau = maths.gaussian_tau(config.epsilon, config.delta, n_total)
        _publish(party, source, config, mean, comps)
        return SiteResult(mean=mean, components=comps, eigenvalues=got["eigenvalues"],
                          n_rows=rows, n_total=n_total, tau=tau, noisy_moment=None)

    pooled = [np.array(block) for block in source.blocks()]
    for peer in others:
        while True:
            block = party.recv(peer, "rows")
            if not (isinstance(block, np.ndarray) and block.ndim == 2 and block.shape[1] == d):
                raise ValidationError(f"{peer!r} sent rows that are not n×{d}")
            if block.shape[0] == 0:
                break
            pooled.append(block)
    n_total = sum(b.shape[0] for b in pooled)
    mean = np.sum([b.sum(axis=0) for b in pooled], axis=0) / n_total
    outer, _ = maths.moment(pooled, mean, normalize=True)
    del pooled
    tau = maths.gaussian_tau(config.epsilon, config.delta, n_total)
    rng = np.random.default_rng(config.seed)
    noisy = outer / n_total + maths.symmetric_noise(d, tau, _statistical_normal(rng))
    values, comps = maths.top_components(noisy, k)
    party.broadcast("mean", {"mean": mean, "n": n_total}, to=others)
    party.broadcast("components", {"components": comps, "eigenvalues": values}, to=others)
    _publish(party, source, config, mean, comps)
    return SiteResult(mean=mean, components=comps, eigenvalues=values, n_rows=rows,
                      n_total=n_total, tau=tau, noisy_moment=noisy)


def _publish(party: Party, source: BlockSource, config: PcaConfig, mean: Array,
             comps: Array) -> None:
    blocks = []
    for block in source.blocks():
        centred = block - mean
        if config.normalizes:
            centred = maths.normalize_rows(centred)
        blocks.append(centred @ comps.T)
    party.send(config.publisher, "projection", np.vstack(blocks))


def publisher(party: Party, *, config: PcaConfig) -> PublisherResult:
    """Role of the publisher: collects every site's projection and stacks them."""
    k = config.n_components
    parts = []
    rows: dict[str, int] = {}
    for name in config.sites:
        y = party.recv(name, "projection")
        if not (isinstance(y, np.ndarray) and y.ndim == 2 and y.shape[1] == k):
            raise ValidationError(f"{name!r} published a projection that is not n×{k}")
        parts.append(y)
        rows[name] = y.shape[0]
    return PublisherResult(projection=np.vstack(parts), rows_per_site=rows)
