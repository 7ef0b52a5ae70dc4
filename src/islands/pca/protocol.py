"""Roles of federated PCA: s sites (the first also aggregates) and a publisher.

Every mode runs three passes over each site's data (streamed in blocks, O(d²) memory
per site): column sums for joint centring, the second moment of the centred rows, and
the projection the site publishes. Messages by mode (site 1 is the aggregator; ``mask``,
``mean``, ``noise`` and ``components`` are the registered :class:`Mask`, :class:`Mean`,
:class:`Noise` and :class:`Components`, the others arrays or bytes):

=============  ===========================================================================
mode           messages
=============  ===========================================================================
``plain``      ``stats`` (Σx, N_i) → site 1; ``mean`` ← site 1; ``moment`` A_i → site 1;
               ``components`` ← site 1; ``projection`` Y_i → publisher. No noise.
``elfedpca``   As published: ``mask`` (a_i, b_i) from site 2 to sites 3..s; ``stats``
               (Σx + a_i, N_i + b_i); ``mean`` (the exact joint mean, no noise);
               ``noise`` (a fresh 32-byte seed, ε, δ) ← site 1; ``moment`` A_i + E/s
               with the same E at every site, τ for the whole budget; ``components``;
               ``projection``. No (ε, δ) guarantee (:mod:`islands.pca.maths`).
``secure``     ``session`` (16 random bytes) ← site 1; ``pubkey`` between every two
               sites; ``stats`` and ``moment`` as fixed-point ring elements under pairwise
               masks that cancel in the sum, each site adding its own share of the
               noise (variance σ_μ²/(s − 1) on its sum of unit rows, (nτ)²/(s − 1) on
               its Σ x̃x̃ᵀ, neither depending on n); ``mean`` (site 1 divides by n);
               ``components``; ``projection``.
``dpdispca``   ``stats`` with the site's own N(0, σ_μ²) on its sum; ``mean``; ``moment``
               X̃_iᵀX̃_i/N_i + E_i with the site's own τ_i (N_i in place of n);
               ``components``; ``projection``.
``central``    ``rows`` (every raw row) → site 1, the trusted curator, which adds the
               mean's noise and one E ~ τ; ``mean``; ``components``; ``projection``.
=============  ===========================================================================

Trust and collusion, by mode:

* ``elfedpca`` (faithful): every site knows E, so site 1 recovers each A_i exactly (the
  source notes say so themselves; :mod:`islands.pca.audit` does it); site 2 knows every
  centring mask, so site 1 colluding with site 2 learns every site's sum.
* ``secure`` (hardened): site 1 sees only totals of sums, counts and second moments (the
  pairwise masks hide each input unless all s − 1 other sites collude against it). The
  noise is the sum of s independent shares drawn from each site's CSPRNG, each of
  variance τ²/(s − 1) (σ_μ²/(s − 1) for the mean; :func:`islands.pca.maths.share_sigma`),
  so the noise no single site knows, site 1 included, still has the full variance τ²:
  the (ε, δ) guarantee holds against site 1 and against any one other site. It costs
  total noise of s.d. τ·sqrt(s/(s − 1)) (1.41τ for s = 2). Site 1 with c colluding sites
  removes c + 1 shares and faces τ²(s − 1 − c)/(s − 1), i.e. the guarantee of
  τ·sqrt((s − 1 − c)/(s − 1)); all of them together face none. ``secure`` needs at least
  two sites. All sites must finish: there is no dropout recovery.
* Site 1 sends every site the total row count n. Only the scale of A depends on it
  (:mod:`islands.pca.maths`): no site sets its noise from it (``secure`` adds its shares
  to Σ x̃x̃ᵀ before site 1 divides by n; ``dpdispca`` uses its own N_i; ``elfedpca`` and
  the ``central`` curator divide the matrix and τ by the same n), so a wrong n cannot
  shrink anyone's noise. A site still refuses an n below its own N_i + (s − 1).
* In every mode the published projections Y_i = X̃_i V' are raw projections of each
  site's rows, **not** differentially private; only the mean μ̂ and the components V'
  are, in the modes that carry a guarantee.

Randomness: every mask, seed and noise draw comes from the operating system's CSPRNG
(:mod:`islands.crypto.prg`), never from a configured seed (ELFedPCA's published seed
negotiation included). ``PcaConfig.noise_seed``
makes the noise reproducible on purpose (to redraw a paper's figure); anyone who knows
it can subtract the noise, so the run then carries no DP guarantee and says so
(``SiteResult.dp_guarantee``). Calibration: :mod:`islands.pca.maths`.

References
----------
.. [1] ELFedPCA notes (``papers/elfedpca-notes.zh.txt``), steps 1-6.
.. [2] Bonawitz et al. "Practical Secure Aggregation for Privacy-Preserving Machine
   Learning". CCS 2017 (pairwise masking).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.crypto import decode_fixed, encode_fixed
from islands.crypto.fixedpoint import max_abs_value
from islands.crypto.masking import generate_key, pairwise_mask
from islands.crypto.prg import SEED_BYTES, csprng_normal, keyed_normal
from islands.crypto.sharing import reconstruct
from islands.data.sources import BlockSource
from islands.errors import ProtocolError, ValidationError, invalid_parameter
from islands.pca import maths
from islands.runtime import Party, wire

__all__ = ["MODES", "Components", "Mask", "Mean", "Noise", "PcaConfig", "PublisherResult",
           "SiteResult", "centring_of", "check_ring_range", "elfedpca_noise", "publisher",
           "site"]

Mode = Literal["plain", "elfedpca", "secure", "dpdispca", "central"]
MODES: tuple[Mode, ...] = ("plain", "elfedpca", "secure", "dpdispca", "central")
STATS_FRAC_BITS = 24
MOMENT_FRAC_BITS = 20
"""Fixed-point bits of Σ x̃x̃ᵀ in ``secure`` (entries ≤ N_i; noise s.d. ≥ 1 ≫ 2^-20)."""


# ------------------------------------------------------------------ messages
# The codec checks each field's type and bounds on arrival; a receiver still checks what
# depends on its own state (the shapes d and k, its row count, its configuration).


@wire.register(name="pca.Mask")
@dataclass(frozen=True)
class Mask:
    """``mask``, site 2 → site i ≥ 3 (``elfedpca``): the centring masks (a_i, b_i)."""

    a: NDArray[np.float64] = field(metadata={"ndim": 1})
    b: int


@wire.register(name="pca.Mean")
@dataclass(frozen=True)
class Mean:
    """``mean``, site 1 → sites: the joint mean and the total row count n."""

    mean: NDArray[np.float64] = field(metadata={"ndim": 1})
    n: int = field(metadata={"ge": 1})


@wire.register(name="pca.Noise")
@dataclass(frozen=True)
class Noise:
    """``noise``, site 1 → sites (``elfedpca``): the seed of E and the budget it is for."""

    seed: bytes = field(metadata={"max_len": SEED_BYTES})
    epsilon: float = field(metadata={"gt": 0.0})
    delta: float = field(metadata={"gt": 0.0, "lt": 1.0})


@wire.register(name="pca.Components")
@dataclass(frozen=True)
class Components:
    """``components``, site 1 → sites: V'ᵀ (k×d) and its eigenvalues (k)."""

    components: NDArray[np.float64] = field(metadata={"ndim": 2})
    eigenvalues: NDArray[np.float64] = field(metadata={"ndim": 1})


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
        The privacy target (None for ``plain``): split evenly between the mean and the
        second moment (:func:`islands.pca.maths.split_budget`), except in ``elfedpca``,
        which spends it all on the second moment as published.
    noise_seed
        None (the default): every noise draw and ELFedPCA's shared seed come from the
        CSPRNG. An int makes the DP noise reproducible, which **voids the guarantee**
        (anyone who knows the int subtracts the noise); for reproducing figures only.
    """

    mode: Mode
    n_components: int
    sites: tuple[str, ...]
    publisher: str
    epsilon: float | None = None
    delta: float | None = None
    noise_seed: int | None = None

    def __post_init__(self) -> None:
        if self.mode == "secure" and len(self.sites) < 2:
            raise invalid_parameter(
                "sites", "PcaConfig",
                "at least 2 sites for mode='secure' (its noise shares and masks hide each "
                "site among the others; with one site use mode='central', where that site "
                "is the curator)", self.sites)

    @property
    def aggregator(self) -> str:
        """Site 1, which also aggregates."""
        return self.sites[0]

    @property
    def centring(self) -> maths.Centring:
        """How this mode centres rows (:data:`islands.pca.maths.Centring`)."""
        return centring_of(self.mode)

    @property
    def dp_void_reason(self) -> str | None:
        """Why this run carries no (ε, δ) guarantee, or None when it does."""
        reasons = []
        if self.mode == "plain":
            reasons.append("mode='plain' adds no noise")
        if self.mode == "elfedpca":
            reasons.append(
                "ELFedPCA as published centres rows on the exact joint mean, which is "
                "released without noise and moves every centred row when one record "
                "changes (sensitivity about sqrt(2), not the 1/n its noise is calibrated "
                "for); every site also knows the noise E")
        if self.noise_seed is not None:
            reasons.append(f"noise_seed={self.noise_seed} makes the noise reproducible: "
                           "anyone who knows the seed subtracts it")
        return "; ".join(reasons) or None


def centring_of(mode: str) -> maths.Centring:
    """Return the centring ``mode`` uses: raw, published (elfedpca) or on the released mean."""
    return "raw" if mode == "plain" else "published" if mode == "elfedpca" else "released"


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
        τ, the s.d. of the noise on A that the (ε, δ) calibration requires (DPdisPCA:
        this site's τ_i on its own A_i; None for plain). In ``secure`` it is what is
        left against site 1 once it removes its own share.
    noise_std
        S.d. of each upper-triangle entry of the total noise actually on A': τ, except
        τ·sqrt(s/(s − 1)) in ``secure`` and sqrt(s)·τ(n) in ``dpdispca`` (None for plain).
    mean_noise_std
        S.d. of each entry of the noise on the released sum of unit rows n·μ̂: σ_μ in
        ``central``, σ_μ·sqrt(s/(s − 1)) in ``secure``, σ_μ·sqrt(s) in ``dpdispca``
        (None for ``plain`` and ``elfedpca``, whose mean is exact).
    noisy_moment
        A' (d×d), the matrix decomposed; only site 1 has it (None elsewhere).
    dp_guarantee
        Whether the run carries its (ε, δ) guarantee: False for ``plain``, for
        ``elfedpca`` (as published) and whenever ``noise_seed`` made the noise
        reproducible.
    dp_void_reason
        Why not (:attr:`PcaConfig.dp_void_reason`), or None.
    """

    mean: Array
    components: Array
    eigenvalues: Array
    n_rows: int
    n_total: int
    tau: float | None
    noise_std: float | None
    mean_noise_std: float | None
    noisy_moment: Array | None
    dp_guarantee: bool
    dp_void_reason: str | None


@dataclass(frozen=True)
class PublisherResult:
    """The published data: every site's projection, stacked in site order."""

    projection: Array
    rows_per_site: dict[str, int]


# ------------------------------------------------------------------ helpers


def _sums(source: BlockSource, *, normalize: bool) -> tuple[Array, int]:
    total = np.zeros(source.n_features)
    rows = 0
    for block in source.blocks():
        total += (maths.normalize_rows(block) if normalize else block).sum(axis=0)
        rows += block.shape[0]
    if rows == 0:
        raise ValidationError(f"{source.name} has no rows")
    return total, rows


def _reproducible_key(noise_seed: int, label: str) -> bytes:
    """Return the 32-byte key ``noise_seed`` stands for, one per use (voids the guarantee)."""
    return hashlib.sha256(f"islands pca noise_seed {noise_seed} {label}".encode()).digest()


def _noise(config: PcaConfig, label: str) -> maths.NormalSource:
    """DP noise for one use (``label``): the CSPRNG, or the explicit ``noise_seed``."""
    if config.noise_seed is None:
        return lambda count, sigma: csprng_normal((count,), sigma)
    key = _reproducible_key(config.noise_seed, label)
    return lambda count, sigma: keyed_normal(key, (count,), sigma, label=b"pca")


def elfedpca_noise(seed: bytes) -> maths.NormalSource:
    """ELFedPCA's E, drawn alike by every site from the negotiated 32-byte seed."""
    return lambda count, sigma: keyed_normal(seed, (count,), sigma, label=b"elfedpca E")


def _mask_draws(config: PcaConfig, count: int, d: int) -> tuple[Array, NDArray[np.int64]]:
    """Site 2's raw centring-mask draws: CSPRNG, or from ``noise_seed`` (then not secret)."""
    if config.noise_seed is None:
        ints = [secrets.randbelow(2001) - 1000 for _ in range(count)]
        return csprng_normal((count, d), 1.0), np.array(ints, dtype=np.int64)
    draws = _noise(config, "masks")(count * (d + 1), 1.0)
    return draws[: count * d].reshape(count, d), np.round(300.0 * draws[count * d:]).astype(
        np.int64)


def _expect(frm: str, name: str, expected: object, got: object, step: str,
            me: str) -> None:
    if got != expected:
        raise ProtocolError(
            f"{me}: {frm!r} sent {name} = {got!r}, but this party's configuration says "
            f"{expected!r}; stopping before anything more is sent", party=me, step=step)


def _check_n(n: int, frm: str, me: str, rows: int, sites: int) -> int:
    """Return the total row count ``frm`` sent; refuse one below own rows + one per other site."""
    low = rows + sites - 1
    if n < low:
        raise ProtocolError(
            f"{me}: {frm!r} sent n = {n!r} rows in all, but this site holds {rows} and each "
            f"of the other {sites - 1} at least 1, so n must be an int >= {low}",
            party=me, step="mean")
    return n


def _moment_tau(config: PcaConfig, n: int) -> float:
    """τ of E on A: the whole budget in ``elfedpca`` (as published), half elsewhere."""
    assert config.epsilon is not None and config.delta is not None
    if config.mode == "elfedpca":
        return maths.gaussian_tau(config.epsilon, config.delta, n)
    return maths.moment_tau(config.epsilon, config.delta, n)


def _noise_stds(config: PcaConfig, n: int) -> tuple[float | None, float | None]:
    """S.d. of the total noise on A' and on n·μ̂ in this mode (:class:`SiteResult`)."""
    if config.mode == "plain":
        return None, None
    s = len(config.sites)
    assert config.epsilon is not None and config.delta is not None
    tau, sigma_mu = _moment_tau(config, n), maths.mean_sigma(config.epsilon, config.delta)
    if config.mode == "elfedpca":
        return tau, None
    if config.mode == "secure":
        return maths.secure_total_sigma(tau, s), maths.secure_total_sigma(sigma_mu, s)
    if config.mode == "dpdispca":  # each site's (N_i/n)·τ_i is τ(n), whatever N_i
        return tau * np.sqrt(s), sigma_mu * np.sqrt(s)
    return tau, sigma_mu


def _add_up(parts: list[Array]) -> Array:
    """Sum same-shaped arrays in place (np.sum over a list would stack them all first)."""
    total = np.array(parts[0], dtype=np.float64)
    for part in parts[1:]:
        total += part
    return total


def _check(value: Any, shape: tuple[int, ...], what: str, frm: str,
           dtype: type[np.generic] | None = None) -> Any:
    if not (isinstance(value, np.ndarray) and value.shape == shape
            and (dtype is None or value.dtype == dtype)):
        got = (type(value).__name__ if not isinstance(value, np.ndarray) else value.shape
               if dtype is None else f"{value.dtype}{value.shape}")
        want = shape if dtype is None else f"{np.dtype(dtype)}{shape}"
        raise ValidationError(f"{frm!r} sent {what} of shape {got}, expected {want}")
    return value


_M = TypeVar("_M")


def _receive(party: Party, frm: str, tag: str, kind: type[_M]) -> _M:
    """Receive ``tag`` from ``frm``, refusing anything but a ``kind`` message."""
    got = party.recv(frm, tag)
    if not isinstance(got, kind):
        raise ProtocolError(f"{party.name}: {frm!r} sent a malformed {tag!r} message",
                            party=party.name, step=tag)
    return got


def _receive_mean(party: Party, agg: str, d: int, rows: int, sites: int) -> tuple[Array, int]:
    """Receive site 1's joint mean and total row count (checked against this site's own)."""
    got = _receive(party, agg, "mean", Mean)
    return (_check(got.mean, (d,), "the mean", agg),
            _check_n(got.n, agg, party.name, rows, sites))


def _receive_components(party: Party, agg: str, k: int, d: int) -> tuple[Array, Array]:
    """Receive site 1's components (k×d) and their eigenvalues (k)."""
    got = _receive(party, agg, "components", Components)
    return (_check(got.components, (k, d), "components", agg),
            _check(got.eigenvalues, (k,), "eigenvalues", agg))


# ------------------------------------------------------------------ roles


RING_TAIL = 10.0
"""Standard deviations of a site's noise share the secure mode's ring must hold.

A normal draw beyond 10 s.d. has probability about 1.5e-23."""


def check_ring_range(rows: int, name: str, config: PcaConfig) -> None:
    """Refuse, before anything is sent, a site whose values the secure mode's ring cannot add.

    Each site encodes its column sums of unit rows plus its share of the mean's noise and
    its row count (24 fractional bits), then Σ x̃x̃ᵀ of unit rows plus its share of the
    moment's noise (20 fractional bits), and the s sites' values are added modulo 2^64
    (:func:`~islands.crypto.fixedpoint.max_abs_value`). Rows are scaled to unit norm
    first, so no cell's magnitude reaches the ring (1e30 is encoded as its row's
    direction): every sum is at most the row count, and what must fit is that count and
    :data:`RING_TAIL` standard deviations of the noise share, which a tiny epsilon makes
    large.
    """
    assert config.epsilon is not None and config.delta is not None
    s = len(config.sites)
    shares = {"column sums": (STATS_FRAC_BITS,
                              maths.share_sigma(maths.mean_sigma(config.epsilon,
                                                                 config.delta), s)),
              "second moment": (MOMENT_FRAC_BITS,
                                maths.share_sigma(_moment_tau(config, 1), s))}
    for what, (frac, sigma) in shares.items():
        bound = max_abs_value(frac, s)
        ring = (f"the secure mode adds each site's {what} in 64-bit fixed point with {frac} "
                f"fractional bits over {s} sites, so each must be at most {bound:.3g}")
        if rows > bound:
            raise ValidationError(f"{name}: {rows} rows make its {what} up to {rows}, but "
                                  f"{ring}; split the site's rows")
        if rows + RING_TAIL * sigma > bound:
            raise ValidationError(
                f"{name}: epsilon={config.epsilon} gives its share of the noise on the "
                f"{what} a standard deviation of {sigma:.3g}, but {ring} ({RING_TAIL:g} "
                "standard deviations included); choose a larger epsilon")


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
    sums, rows = _sums(source, normalize=config.centring == "released")
    sigma_mu = (maths.mean_sigma(config.epsilon, config.delta)
                if config.centring == "released" and config.epsilon is not None
                and config.delta is not None else None)
    if config.mode == "secure":
        check_ring_range(rows, party.name, config)

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

    if config.mode == "secure":
        assert sigma_mu is not None
        sums = sums + _noise(config, f"mean {party.name}")(d, maths.share_sigma(sigma_mu, s))
    elif config.mode == "dpdispca":
        assert sigma_mu is not None
        sums = sums + _noise(config, f"mean {party.name}")(d, sigma_mu)
    stats = np.append(sums, float(rows))
    if config.mode == "elfedpca" and s > 2:
        # site 2 draws zero-sum masks for sites 2..s and keeps its own (paper step 1)
        second = config.sites[1]
        if party.name == second:
            real, ints = maths.zero_sum_masks(*_mask_draws(config, s - 1, d))
            for i, peer in enumerate(config.sites[2:], start=1):
                party.send(peer, "mask", Mask(real[i], int(ints[i])))
            mask_a, mask_b = real[0], int(ints[0])
        elif not is_agg:
            mask = _receive(party, second, "mask", Mask)
            mask_a, mask_b = _check(mask.a, (d,), "a mask", second), mask.b
        if not is_agg:
            stats = np.append(sums + mask_a, float(rows + mask_b))

    # secure: every site sends ring elements, which the aggregator adds modulo 2^64
    ring = np.uint64 if config.mode == "secure" else None
    if config.mode == "secure":
        assert key is not None
        masked = encode_fixed(stats, frac_bits=STATS_FRAC_BITS, headroom=s)
        masked += pairwise_mask(party.name, key, publics, d + 1, context=session,
                                label=b"stats")
        outgoing: Any = masked
    else:
        outgoing = stats

    if is_agg:
        parts = [outgoing] + [_check(party.recv(p, "stats"), (d + 1,), "stats", p, ring)
                              for p in others]
        if config.mode == "secure":
            total = decode_fixed(reconstruct(parts), frac_bits=STATS_FRAC_BITS)
        else:
            total = _add_up(parts)
        n_total = round(float(total[-1]))
        mean = total[:-1] / n_total
        party.broadcast("mean", Mean(mean, n_total), to=others)
    else:
        party.send(agg, "stats", outgoing)
        mean, n_total = _receive_mean(party, agg, d, rows, s)

    # ---- pass 2: second moment, with each scheme's noise
    outer, _ = maths.moment(source.blocks(), mean, centring=config.centring)
    tau: float | None = None
    if config.mode == "plain":
        local = outer / n_total
    elif config.mode == "dpdispca":
        assert config.epsilon is not None and config.delta is not None
        tau = maths.moment_tau(config.epsilon, config.delta, rows)
        own = maths.symmetric_noise(d, tau, _noise(config, f"moment {party.name}"))
        local = (outer / rows + own) * (rows / n_total)  # site 1 forms Σ (N_i/n)(A_i + E_i)
    elif config.mode == "elfedpca":
        assert config.epsilon is not None and config.delta is not None
        # paper step 4: site 1 negotiates the seed of E with the sites (never the
        # publisher) from fresh CSPRNG bytes; every site knows E, the published weakness
        if is_agg:
            seed = (secrets.token_bytes(SEED_BYTES) if config.noise_seed is None
                    else _reproducible_key(config.noise_seed, "elfedpca E"))
            party.broadcast("noise", Noise(seed, config.epsilon, config.delta), to=others)
        else:
            noise = _receive(party, agg, "noise", Noise)
            _expect(agg, "epsilon", config.epsilon, noise.epsilon, "noise", party.name)
            _expect(agg, "delta", config.delta, noise.delta, "noise", party.name)
            seed = noise.seed
            if len(seed) != SEED_BYTES:
                raise ProtocolError(
                    f"{party.name}: {agg!r} sent a noise seed that is not {SEED_BYTES} "
                    "random bytes", party=party.name, step="noise")
        tau = _moment_tau(config, n_total)
        shared = maths.symmetric_noise(d, tau, elfedpca_noise(seed))
        local = outer / n_total + shared / s
    else:  # secure
        assert config.epsilon is not None and config.delta is not None and key is not None
        tau = _moment_tau(config, n_total)
        # the share goes on Σ x̃x̃ᵀ (sensitivity 1, s.d. nτ/√(s-1) = τ(1)/√(s-1)): no n in
        # it, so no other party's word on n sets it; site 1 divides the sum by n
        own_noise = maths.symmetric_noise(d, maths.share_sigma(_moment_tau(config, 1), s),
                                          _noise(config, f"moment {party.name}"))
        local = outer + own_noise

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
        parts = [outgoing] + [_check(party.recv(p, "moment"), shape, "a moment", p, ring)
                              for p in others]
        if config.mode == "secure":
            noisy = maths.symmetric_from_upper(
                decode_fixed(reconstruct(parts), frac_bits=MOMENT_FRAC_BITS), d) / n_total
        else:
            noisy = _add_up(parts)
        values, comps = maths.top_components(noisy, k)
        party.broadcast("components", Components(comps, values), to=others)
    else:
        party.send(agg, "moment", outgoing)
        comps, values = _receive_components(party, agg, k, d)

    return _publish(party, source, config, mean, comps, values, rows, n_total, tau, noisy)


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
        mean, n_total = _receive_mean(party, agg, d, rows, len(config.sites))
        comps, values = _receive_components(party, agg, k, d)
        tau = maths.moment_tau(config.epsilon, config.delta, n_total)
        return _publish(party, source, config, mean, comps, values, rows, n_total, tau,
                        None)

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
    unit_sum = np.sum([maths.normalize_rows(b).sum(axis=0) for b in pooled], axis=0)
    sigma_mu = maths.mean_sigma(config.epsilon, config.delta)
    mean = (unit_sum + _noise(config, "mean")(d, sigma_mu)) / n_total
    outer, _ = maths.moment(pooled, mean, centring="released")
    del pooled
    tau = maths.moment_tau(config.epsilon, config.delta, n_total)
    noisy = outer / n_total + maths.symmetric_noise(d, tau, _noise(config, "moment"))
    values, comps = maths.top_components(noisy, k)
    party.broadcast("mean", Mean(mean, n_total), to=others)
    party.broadcast("components", Components(comps, values), to=others)
    return _publish(party, source, config, mean, comps, values, rows, n_total, tau, noisy)


def _publish(party: Party, source: BlockSource, config: PcaConfig, mean: Array,
             comps: Array, values: Array, rows: int, n_total: int, tau: float | None,
             noisy: Array | None) -> SiteResult:
    """Send the site's projection to the publisher and return the site's result."""
    blocks = []
    for block in source.blocks():
        blocks.append(maths.centre_rows(block, mean, centring=config.centring) @ comps.T)
    party.send(config.publisher, "projection", np.vstack(blocks))
    noise_std, mean_noise_std = _noise_stds(config, n_total)
    return SiteResult(mean=mean, components=comps, eigenvalues=values, n_rows=rows,
                      n_total=n_total, tau=tau, noisy_moment=noisy,
                      dp_guarantee=config.dp_void_reason is None,
                      dp_void_reason=config.dp_void_reason, noise_std=noise_std,
                      mean_noise_std=mean_noise_std)


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
