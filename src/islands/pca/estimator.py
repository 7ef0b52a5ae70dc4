"""``FederatedPCA``: the scikit-learn-style estimator over the federated PCA roles.

``fit(parts)`` runs one site per part plus a publisher in this process (one thread
each, every message through the wire codec). Each part may be an in-memory array, a
list of row blocks, a function returning an iterator of blocks, or a file path (NPY via
memory map, Parquet, CSV); sites stream their data in blocks, so fitting needs O(d²)
memory per site whatever its number of rows (three passes: sums for centring, the
second moment, the published projection).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from islands.arrays import Array
from islands.data.sources import RowSource, open_source
from islands.errors import ValidationError, invalid_parameter
from islands.estimator import FederatedEstimator
from islands.pca import maths
from islands.pca.config import PcaSettings
from islands.pca.protocol import (
    PcaConfig,
    PublisherResult,
    SiteResult,
    centring_of,
    check_ring_range,
    publisher,
    site,
)
from islands.runtime import Role, Transcript, run_local
from islands.validation import check_array, check_random_state

__all__ = ["FederatedPCA"]



class FederatedPCA(FederatedEstimator[PcaSettings]):
    """PCA over sites that each hold some rows, with differential privacy.

    The protocol's settings are those of :class:`~islands.pca.config.PcaSettings` (the
    federation file's ``[pca]`` section takes the same ones); ``timeout``,
    ``keep_payloads`` and ``random_state`` only say how this process runs the parties.

    Parameters
    ----------
    n_components : int
        k, the number of components.
    epsilon, delta : float or None
        The (ε, δ) target of the DP modes, ε and δ in (0, 1): the classic Gaussian
        mechanism is only proven for ε < 1, so larger ε is refused. Half of it pays for
        the released mean, half for the second moment (τ = sqrt(2 ln(2.5/δ))/(n ε/2)),
        except in ``elfedpca``, which calibrates τ = sqrt(2 ln(1.25/δ))/(n ε) as published
        and carries no guarantee; see :mod:`islands.pca.maths`. Must be None for
        ``mode="plain"``.
    mode : {"plain", "elfedpca", "secure", "dpdispca", "central"}, default="plain"
        ``plain``: exact federated PCA, no noise. ``elfedpca``: the published scheme,
        kept for reproduction (zero-sum centring masks from site 2, the exact joint mean,
        a negotiated noise seed, E/s per site): site 1 can recover every site's matrix,
        and the calibration does not cover the centring, so it claims no (ε, δ).
        ``secure``: pairwise-masked sums, counts and second moments (site 1 sees only
        totals) and independent CSPRNG noise shares N(0, τ²/(s − 1)) per site, so the
        noise site 1 (or any one site) does not know still has variance τ²: the
        guarantee holds against site 1 and any single site; site 1 with c colluding
        sites faces τ²(s − 1 − c)/(s − 1). The price is total noise of s.d.
        τ·sqrt(s/(s − 1)).
        ``dpdispca``: each site adds its own noise for its own N_i (a local-noise
        baseline). ``central``: one noise draw on the pooled data held by a trusted
        curator (the reference). See :mod:`islands.pca.protocol`.
    random_state : int, Generator or None
        Checked and kept for the scikit-learn API; no mode draws anything private from
        it. Every mask, seed and noise draw comes from the OS CSPRNG.
    noise_seed : int or None, default=None
        Makes the DP noise reproducible (to redraw a paper's figure). Anyone who knows
        it can subtract the noise, so the fit then **carries no DP guarantee**.
        Whenever a DP mode's guarantee is void (this, or ``mode="elfedpca"``), ``fit``
        warns, ``dp_guarantee_`` is False, ``epsilon_`` is ``inf`` and
        ``dp_void_reason_`` says why.
    block_size : int, default=8192
        Rows per block when sites stream their data.
    timeout : float, default=600.0
        Seconds a party waits for one message.
    keep_payloads : bool, default=False
        Keep every message in ``transcript_`` (for :mod:`islands.pca.audit`).

    Attributes
    ----------
    components_ : ndarray of shape (k, d)
        Principal axes (rows), as in scikit-learn.
    mean_ : ndarray of shape (d,)
        The exact joint mean (``plain``, ``elfedpca``), or the released noisy mean of
        the unit-normalised rows (the other DP modes; it costs half of ε).
    explained_variance_ : ndarray of shape (k,)
        Eigenvalues of the matrix site 1 decomposed, A' = Σ X̃ᵀX̃ / n (+ noise), with X̃
        the centred rows (:func:`islands.pca.maths.centre_rows`).
    noisy_moment_ : ndarray of shape (d, d)
        A' itself.
    published_ : ndarray of shape (n, k)
        The projections every site published, stacked in site order. Not
        differentially private: raw projections of each site's rows.
    epsilon_, delta_ : float or None
        The guarantee the result carries: the target, or ``inf`` for ``epsilon_`` when
        it is void (None for ``plain``).
    dp_guarantee_ : bool
        True when the result is (``epsilon``, ``delta``)-DP; False for ``plain``,
        ``elfedpca`` and with ``noise_seed``.
    dp_void_reason_ : str or None
        Why the guarantee is void, or None when it holds.
    tau_ : float, dict or None
        τ, the s.d. of the noise on A that the (ε, δ) calibration requires: one τ, or
        each site's τ_i on its own A_i for ``dpdispca``. In ``secure`` it is the noise
        left against site 1 after it removes its own share, not the total.
    noise_std_ : float or None
        S.d. of each upper-triangle entry of the total noise actually on A': ``tau_``
        in ``central`` and ``elfedpca``, τ·sqrt(s/(s − 1)) in ``secure``, sqrt(s)·τ in
        ``dpdispca`` (None for ``plain``).
    mean_noise_std_ : float or None
        S.d. of each entry of the noise on n·``mean_`` (the released sum of unit rows):
        σ_μ in ``central``, σ_μ·sqrt(s/(s − 1)) in ``secure``, σ_μ·sqrt(s) in
        ``dpdispca`` (None for ``plain`` and ``elfedpca``, whose mean is exact).
    n_samples_, n_features_in_, n_sites_ : int
    transcript_ : Transcript

    References
    ----------
    .. [1] ELFedPCA notes (``papers/elfedpca-notes.zh.txt``).
    .. [2] Dwork, Talwar, Thakurta, Zhang. "Analyze Gauss". STOC 2014.
    """

    Config = PcaSettings
    runtime = ("random_state", "timeout", "keep_payloads")

    def __init__(
        self,
        n_components: int,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        mode: str = "plain",
        random_state: int | np.random.Generator | None = None,
        noise_seed: int | None = None,
        block_size: int = 8192,
        timeout: float = 600.0,
        keep_payloads: bool = False,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.mode = mode
        self.random_state = random_state
        self.noise_seed = noise_seed
        self.block_size = block_size
        self.timeout = timeout
        self.keep_payloads = keep_payloads

    def fit(self, parts: Sequence[RowSource]) -> FederatedPCA:
        """Run federated PCA over one site per part.

        Raises
        ------
        ValidationError
            For bad parameters or data, before any message is sent.
        """
        settings = self._config()
        run_settings = self._run_settings()
        check_random_state(self.random_state, "FederatedPCA")
        if isinstance(parts, np.ndarray) or not isinstance(parts, Sequence) or len(parts) < 2:
            raise ValidationError(
                "parts must be a list of at least two sites' data (arrays, lists of blocks, "
                "functions returning block iterators, or file paths)"
            )
        names = tuple(f"site{i + 1}" for i in range(len(parts)))
        sources = [open_source(part, block_size=settings.block_size, name=name)
                   for name, part in zip(names, parts, strict=True)]
        d = sources[0].n_features
        for src in sources[1:]:
            if src.n_features != d:
                raise ValidationError(
                    f"sites hold different numbers of features: {sources[0].name} has {d}, "
                    f"{src.name} has {src.n_features}"
                )
        for src in sources:
            if src.n_rows == 0:
                raise ValidationError(f"{src.name} has no rows")
        if settings.n_components > d:
            raise invalid_parameter("n_components", "FederatedPCA",
                                    f"an int in [1, d] = [1, {d}]", self.n_components)
        config = PcaConfig(
            mode=settings.mode, n_components=settings.n_components, sites=names,
            publisher="publisher", epsilon=settings.epsilon, delta=settings.delta,
            noise_seed=settings.noise_seed,
        )
        if settings.mode != "plain" and config.dp_void_reason is not None:
            warnings.warn(
                f"FederatedPCA(mode={settings.mode!r}) carries no differential-privacy "
                f"guarantee (epsilon_ = inf): {config.dp_void_reason}. Use it only to "
                "reproduce published results; mode='secure' keeps the guarantee.",
                UserWarning, stacklevel=2)
        if config.mode == "secure":  # each site checks its own too; here in order, site1 first
            for src in sources:
                if src.n_rows is not None:  # known before a pass (arrays, NPY, Parquet)
                    check_ring_range(src.n_rows, src.name, config)
        roles: dict[str, Role] = {
            name: partial(site, source=src, config=config)
            for name, src in zip(names, sources, strict=True)
        }
        roles["publisher"] = partial(publisher, config=config)
        run = run_local(roles, timeout=run_settings.timeout,
                        keep_payloads=run_settings.keep_payloads)
        first: SiteResult = run.results[names[0]]
        published: PublisherResult = run.results["publisher"]
        self.components_ = first.components
        self.mean_ = first.mean
        self.explained_variance_ = first.eigenvalues
        self.noisy_moment_ = first.noisy_moment
        self.published_ = published.projection
        self.dp_guarantee_ = bool(first.dp_guarantee)
        self.dp_void_reason_ = first.dp_void_reason
        self.epsilon_ = (config.epsilon if self.dp_guarantee_ or config.epsilon is None
                         else math.inf)
        self.delta_ = config.delta
        if settings.mode == "dpdispca":
            self.tau_: float | dict[str, float] | None = {
                n: float(run.results[n].tau) for n in names}
        else:
            self.tau_ = first.tau
        self.noise_std_ = first.noise_std
        self.mean_noise_std_ = first.mean_noise_std
        self.n_samples_ = first.n_total
        self.n_features_in_ = d
        self.n_sites_ = len(names)
        self.transcript_: Transcript = run.transcript
        self.results_: dict[str, Any] = run.results
        return self

    def transform(self, X: ArrayLike) -> Array:
        """Project rows as the sites did (:func:`islands.pca.maths.centre_rows`)."""
        if not hasattr(self, "components_"):
            raise RuntimeError("This FederatedPCA instance is not fitted yet; call fit first.")
        x = check_array(X, "X", "FederatedPCA.transform")
        if x.shape[1] != self.n_features_in_:
            raise ValidationError(f"X must have shape (n, {self.n_features_in_}); got {x.shape}")
        centred = maths.centre_rows(x, self.mean_, centring=centring_of(self.mode))
        out: Array = centred @ self.components_.T
        return out
