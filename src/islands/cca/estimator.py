"""``SwarmCCA``: the scikit-learn-style estimator over the two SCCA peers.

``fit(X, Y)`` runs both peers (and, for the secure protocol, the dealer) in this process
(one thread each, every message through the wire codec) and keeps what each peer ended with. In a
real deployment each organisation runs only its own peer and gets only its own weights;
the estimator holds both because it simulates both.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from islands.arrays import Array
from islands.cca.config import SccaConfig
from islands.cca.protocol import SccaResult
from islands.cca.secure import dealer, peer_role
from islands.errors import ValidationError, invalid_parameter
from islands.estimator import FederatedEstimator
from islands.runtime import Transcript, run_local
from islands.validation import check_array, check_random_state

__all__ = ["SwarmCCA"]



class SwarmCCA(FederatedEstimator[SccaConfig]):
    """Canonical correlation analysis between two peers with no server (SCCA).

    The protocol's settings are those of :class:`~islands.cca.config.SccaConfig` (the
    federation file's ``[cca]`` section takes the same ones); ``timeout``,
    ``keep_payloads`` and ``random_state`` only say how this process runs the two peers.

    Parameters
    ----------
    n_components : int or None, default=None
        Number of canonical pairs to keep (the top ones); None keeps all min(p, q).
    protocol : {"secure", "paper"}, default="secure"
        ``"secure"``: each peer learns its canonical vectors and the correlations and
        nothing more, with a third party (``dealer``) that deals randomness and sees only
        the sizes (:mod:`islands.cca.secure`; about 2.4× pooled CCA's time at
        n = 60,000, p = q = 392). ``"paper"``: Li and Du's published protocol between the
        two peers alone, exact but not private (a peer rebuilds the other's column space,
        :mod:`islands.cca.audit`); for reproducing the paper.
    perturb : bool or None, default=None
        ``protocol="paper"``: apply the paper's multiplicative perturbation (secret
        k1, k2 > 0 from a CSPRNG; None applies it). The canonical vectors are unchanged;
        only the ratios ρ_i/ρ_1 remain known, so ``canonical_correlations_`` is None.
        **It does not protect the data**: see :mod:`islands.cca.audit`. The secure
        protocol has no perturbation (leave it None).
    threshold : float in (0, 1] or None, default=None
        Keep only the components whose correlation ratio ρ_i/ρ_1 is at least this.
    reg : float, default=0.0
        Ridge term added to C11 and C22 (regularised CCA), for rank-deficient data.
    rank_tol : float in (0, 1) or None, default=None
        Rank-revealing QR: drop columns whose pivot falls below ``rank_tol`` times the
        largest (their weights are zero). With neither ``reg`` nor ``rank_tol``, a
        rank-deficient X or Y raises an error naming both options.
    dealer : str, default="dealer"
        ``protocol="secure"``: the name of the dealing party (this process runs it too).
    timeout : float, default=600.0
        Seconds a peer waits for one message.
    keep_payloads : bool, default=False
        Keep every message in ``transcript_`` (for :mod:`islands.cca.audit`).
    random_state : int, Generator or None, default=None
        Accepted for a uniform API. SCCA's results do not depend on it: its randomness
        (the secure protocol's masks and rotation, the paper's perturbation) comes from the
        OS CSPRNG and cancels out of the outputs.

    Attributes
    ----------
    x_weights_, y_weights_ : ndarray of shape (p, d), (q, d)
        Canonical vectors A and B, with AᵀC11A = BᵀC22B = I, C11 = X_cᵀX_c (paper eq. 1).
    x_mean_, y_mean_ : ndarray
        Column means used for centring.
    correlation_ratios_ : ndarray of shape (d,)
        ρ_i/ρ_1.
    canonical_correlations_ : ndarray of shape (d,) or None
        Exact ρ (the secure protocol, or the paper's with ``perturb=False``); None when
        perturbed.
    n_components_ : int
        d, the number of pairs kept.
    roles_ : dict
        Which part each view played (``{"x": "s1", "y": "s2"}`` when p ≥ q).
    x_rank_, y_rank_ : int
        Columns used after rank handling.
    transcript_ : Transcript
        Every message of the fit.

    References
    ----------
    .. [1] Li, Du. "Swarm canonical correlation analysis". Acta Automatica Sinica
       50(9), 2024.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(200, 2))
    >>> X = np.hstack([z, rng.normal(size=(200, 3))])
    >>> Y = np.hstack([z + 0.1 * rng.normal(size=(200, 2)), rng.normal(size=(200, 2))])
    >>> cca = SwarmCCA(n_components=2).fit(X, Y)
    >>> np.round(cca.canonical_correlations_, 2)
    array([1.  , 0.99])
    """

    Config = SccaConfig
    runtime = ("timeout", "keep_payloads", "random_state")

    def __init__(
        self,
        n_components: int | None = None,
        *,
        protocol: str = "secure",
        perturb: bool | None = None,
        threshold: float | None = None,
        reg: float = 0.0,
        rank_tol: float | None = None,
        dealer: str = "dealer",
        timeout: float = 600.0,
        keep_payloads: bool = False,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        self.n_components = n_components
        self.protocol = protocol
        self.perturb = perturb
        self.threshold = threshold
        self.reg = reg
        self.rank_tol = rank_tol
        self.dealer = dealer
        self.timeout = timeout
        self.keep_payloads = keep_payloads
        self.random_state = random_state

    @staticmethod
    def _validate_data(X: ArrayLike, Y: ArrayLike) -> tuple[Array, Array]:
        blocks = [check_array(Z, name, "SwarmCCA") for name, Z in (("X", X), ("Y", Y))]
        x, y = blocks
        if x.shape[0] != y.shape[0]:
            raise ValidationError(
                f"X and Y must have the same rows (aligned samples); got {x.shape[0]} and "
                f"{y.shape[0]}"
            )
        if x.shape[0] < 2:
            raise ValidationError(f"SCCA needs at least 2 samples; got {x.shape[0]}")
        return x, y

    # ------------------------------------------------------------------ API
    def fit(self, X: ArrayLike, Y: ArrayLike) -> SwarmCCA:
        """Run SCCA between a peer holding X (n×p) and a peer holding Y (n×q).

        Raises
        ------
        ValidationError
            For bad parameters or data, before any message is sent.
        """
        config = self._config()
        run_settings = self._run_settings()
        check_random_state(self.random_state, "SwarmCCA")
        x, y = self._validate_data(X, Y)
        limit = min(x.shape[1], y.shape[1])
        if config.n_components is not None and config.n_components > limit:
            raise invalid_parameter("n_components", "SwarmCCA",
                                    f"an int in [1, min(p, q)] = [1, {limit}]",
                                    self.n_components)
        roles: dict[str, Any] = {"x": partial(peer_role(config, "y"), Z=x),
                                 "y": partial(peer_role(config, "x"), Z=y)}
        if config.protocol == "secure":
            if config.dealer in roles:
                raise invalid_parameter("dealer", "SwarmCCA", "a name other than 'x' and 'y' "
                                        "(the peers)", self.dealer)
            roles[config.dealer] = partial(dealer, peers=["x", "y"])
        run = run_local(roles, timeout=run_settings.timeout,
                        keep_payloads=run_settings.keep_payloads)
        rx: SccaResult = run.results["x"]
        ry: SccaResult = run.results["y"]
        self.x_weights_ = rx.weights
        self.y_weights_ = ry.weights
        self.x_mean_ = rx.mean
        self.y_mean_ = ry.mean
        s1_result = rx if rx.role == "s1" else ry
        self.correlation_ratios_ = s1_result.ratios
        self.canonical_correlations_ = (
            s1_result.correlations if rx.exact and ry.exact else None
        )
        self.n_components_ = int(s1_result.ratios.size)
        self.roles_ = {"x": rx.role, "y": ry.role}
        self.x_rank_, self.y_rank_ = rx.rank, ry.rank
        self.transcript_: Transcript = run.transcript
        self.results_ = {"x": rx, "y": ry}
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "x_weights_"):
            raise RuntimeError("This SwarmCCA instance is not fitted yet; call fit(X, Y) first.")

    def transform(
        self, X: ArrayLike, Y: ArrayLike | None = None
    ) -> Array | tuple[Array, Array]:
        """Project onto the canonical vectors: (X − mean)·A, and (Y − mean)·B if Y is given."""
        self._check_fitted()
        x = check_array(X, "X", "SwarmCCA.transform")
        if x.shape[1] != self.x_weights_.shape[0]:
            raise ValidationError(
                f"X must have shape (n, {self.x_weights_.shape[0]}); got {x.shape}"
            )
        x_scores: Array = (x - self.x_mean_) @ self.x_weights_
        if Y is None:
            return x_scores
        y = check_array(Y, "Y", "SwarmCCA.transform")
        if y.shape[1] != self.y_weights_.shape[0]:
            raise ValidationError(
                f"Y must have shape (n, {self.y_weights_.shape[0]}); got {y.shape}"
            )
        y_scores: Array = (y - self.y_mean_) @ self.y_weights_
        return x_scores, y_scores

    def fit_transform(self, X: ArrayLike, Y: ArrayLike) -> tuple[Array, Array]:
        """Fit, then return both views' canonical scores."""
        out = self.fit(X, Y).transform(X, Y)
        assert isinstance(out, tuple)
        return out
