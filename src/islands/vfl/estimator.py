"""``VerticalLinearRegression`` and ``VerticalLogisticRegression``: the user API.

``fit(X_a, X_b, y, ids_a=None, ids_b=None)`` simulates the whole federation in this
process: the coordinator C and the data parties run the roles of
:mod:`islands.vfl.federation`, each in its own thread, every message encoded to bytes, in
one run: with IDs, private set intersection (:mod:`islands.psi.protocol`) between B and
each passive party first, then training (:mod:`islands.vfl.protocol`). PSI runs on
``psi_engine``: ``"dh"`` (Diffie–Hellman, in islands) or ``"spu"`` (SecretFlow SPU's
RR22, :mod:`islands.psi.spu_engine`: each data party starts its own SPU process, the
SPUs talking over loopback, as deployed parties' SPUs talk between organisations). A deployed
federation runs the same roles, one party per organisation, which keeps only its own
weights; the estimator holds all of them because it plays every party.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.arrays import Array
from islands.config import RunSettings
from islands.crypto import heu, paillier
from islands.crypto.psi import encode_ids
from islands.errors import ValidationError
from islands.estimator import FederatedEstimator
from islands.psi.config import DEFAULT_ENGINE, DEFAULT_MAX_PEER_RATIO, DEFAULT_NORMALIZE
from islands.psi.spu_engine import free_loopback_hosts, spu_python
from islands.runtime import Transcript, run_local
from islands.validation import check_array, unique_labels
from islands.vfl import maths
from islands.vfl.config import RENAMED, VflConfig, draw_seed
from islands.vfl.federation import (
    ActiveResult,
    CoordinatorOutcome,
    PassiveResult,
    PsiSettings,
    active_party,
    coordinator_party,
    passive_party,
)
from islands.vfl.keys import warn_insecure_keys
from islands.vfl.protocol import (
    Clock,
    PartyModel,
    epoch_seconds,
    inference_coordinator,
    inference_party,
)

__all__ = ["VerticalLinearRegression", "VerticalLogisticRegression", "check_aligned_rows",
           "check_party_ids", "passive_names"]


def _blocks(X_a: Any, name: str, owner: str) -> list[Array]:
    """One passive party's matrix, or a list of them, as checked float arrays.

    Features are encoded in fixed point with ``feature_bits`` fractional bits and must
    stay within :data:`~islands.vfl.maths.MAX_ABS_FEATURE`.
    """
    items = list(X_a) if isinstance(X_a, (list, tuple)) else [X_a]
    if not items:
        raise ValidationError(f"{name} must hold at least one passive party's features")
    return [check_array(x, name if len(items) == 1 else f"{name}[{i}]", owner,
                        max_abs=maths.MAX_ABS_FEATURE, why=_FEATURE_WHY)
            for i, x in enumerate(items)]


_FEATURE_WHY = ("features are encoded in fixed point below 2^30 before encryption; "
                "standardise them first")


def _refuse_renamed(owner: str, params: dict[str, Any]) -> None:
    """Name a renamed parameter (:data:`~islands.vfl.config.RENAMED`); refuse any other."""
    for key in params:
        if key in RENAMED:
            raise ValidationError(f"{owner}: {key!r} {RENAMED[key]}")
        raise TypeError(f"{owner}.__init__() got an unexpected keyword argument {key!r}")


def check_aligned_rows(blocks: list[Array], x_b: Array) -> None:
    """Refuse passive matrices whose row counts differ from X_b's (no IDs to align by)."""
    for i, x in enumerate(blocks):
        if x.shape[0] != x_b.shape[0]:
            label = "X_a" if len(blocks) == 1 else f"X_a[{i}]"
            raise ValidationError(f"{label} has {x.shape[0]} rows but X_b has "
                                  f"{x_b.shape[0]}; without IDs the rows must be "
                                  "aligned already (pass ids_a and ids_b to align)")


def check_party_ids(blocks: list[Array], x_b: Array, ids_a: Any, ids_b: Any,
                    owner: str) -> list[Any]:
    """Check every party's IDs as PSI will, before any message; return A's ID lists."""
    lists = list(ids_a) if len(blocks) > 1 else [ids_a]
    if len(lists) != len(blocks):
        raise ValidationError(f"ids_a must hold one ID list per passive party "
                              f"({len(blocks)}); got {len(lists)}")
    for i, (ids, x) in enumerate(zip(lists, blocks, strict=True)):
        if len(ids) != x.shape[0]:
            raise ValidationError(f"ids_a{'' if len(blocks) == 1 else f'[{i}]'} has "
                                  f"{len(ids)} IDs for {x.shape[0]} rows")
    if len(ids_b) != x_b.shape[0]:
        raise ValidationError(f"ids_b has {len(ids_b)} IDs for {x_b.shape[0]} rows of X_b")
    kind_b = None
    for i, ids in enumerate(lists):
        label = "ids_a" if len(lists) == 1 else f"ids_a[{i}]"
        _, kind = encode_ids(ids, label, owner, normalize=DEFAULT_NORMALIZE)
        if kind_b is None:
            _, kind_b = encode_ids(ids_b, "ids_b", owner, normalize=DEFAULT_NORMALIZE)
        if kind != kind_b:
            raise ValidationError(f"{owner}: {label} holds {kind} IDs but ids_b holds "
                                  f"{kind_b} IDs; use one kind (1 and '1' never match)")
    return lists


def passive_names(k: int) -> list[str]:
    """Return the names an estimator gives k passive parties: A, or A1 … Ak."""
    return ["A"] if k == 1 else [f"A{i + 1}" for i in range(k)]


class _VerticalModel(FederatedEstimator[VflConfig]):
    """Shared machinery of the two estimators (fit, alignment, inference).

    The parameters are :class:`~islands.vfl.config.VflConfig`'s fields, except
    ``objective`` (the class) and ``seed`` (drawn from ``random_state``), and the runtime
    ones ``timeout``, ``keep_payloads`` and ``random_state``.
    """

    Config = VflConfig
    runtime = ("timeout", "keep_payloads", "random_state")
    _objective = "linear"

    def __init__(
        self,
        *,
        learning_rate: float | None = None,
        lam: float = 0.0,
        epochs: int = 20,
        batch_size: int = 256,
        tol: float | None = 1e-4,
        key_bits: int = paillier.DEFAULT_KEY_BITS,
        insecure_keys: bool = False,
        djn: bool = True,
        feature_bits: int = 16,
        score_bits: int = 32,
        engine: str | None = None,
        he: str | None = None,
        sigmoid: str = "taylor",
        max_peer_size: int | None = None,
        max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO,
        psi_engine: str = DEFAULT_ENGINE,
        timeout: float = 600.0,
        keep_payloads: bool = False,
        random_state: int | np.random.Generator | None = None,
        **renamed: Any,
    ) -> None:
        _refuse_renamed(type(self).__name__, renamed)
        self.learning_rate = learning_rate
        self.lam = lam
        self.epochs = epochs
        self.batch_size = batch_size
        self.tol = tol
        self.key_bits = key_bits
        self.insecure_keys = insecure_keys
        self.djn = djn
        self.feature_bits = feature_bits
        self.score_bits = score_bits
        self.engine = engine
        self.he = he
        self.sigmoid = sigmoid
        self.max_peer_size = max_peer_size
        self.max_peer_ratio = max_peer_ratio
        self.psi_engine = psi_engine
        self.timeout = timeout
        self.keep_payloads = keep_payloads
        self.random_state = random_state

    def set_params(self, **params: Any) -> Any:
        """Set constructor parameters (scikit-learn convention); they are checked at fit."""
        _refuse_renamed(type(self).__name__, {k: v for k, v in params.items()
                                              if k in RENAMED})
        return super().set_params(**params)

    # ------------------------------------------------------------ validation
    def _config(self) -> VflConfig:
        """Return the checked settings, the seed drawn from ``random_state`` (:func:`draw_seed`).

        The message for a refused value names this estimator.
        """
        owner = type(self).__name__
        values = {name: getattr(self, name) for name in self._param_names()
                  if name in VflConfig.model_fields}
        config = VflConfig.build(owner, objective=self._objective, **values)
        warn_insecure_keys(config.he, config.key_bits, owner, stacklevel=4)
        if config.he == "ou":
            heu.require(owner)
        self._run_settings()
        return config.replace(seed=draw_seed(self.random_state, owner))

    def _spu(self, config: VflConfig, parties: list[str]) -> dict[str, Any]:
        """Return PsiSettings' engine and, for SPU, each data party's loopback SPU address.

        With ``psi_engine="spu"`` every data party's SPU listens on a port of 127.0.0.1;
        SPU's environment is checked here, before any message.
        """
        if config.psi_engine == "dh":
            return {}
        spu_python(f"{type(self).__name__} (psi_engine='spu')", "psi_engine")
        hosts = free_loopback_hosts(len(parties))
        return {"engine": config.psi_engine, "spu": dict(zip(parties, hosts, strict=True))}

    # ------------------------------------------------------------ API
    def fit(self, X_a: Any, X_b: ArrayLike, y: ArrayLike, ids_a: Any = None,
            ids_b: Any = None) -> Any:
        """Train by the encrypted protocol of Yang et al. (2019), Table 1.

        Parameters
        ----------
        X_a
            The passive party's features (n_a × p_a), or a list with one matrix per
            passive party A_1 … A_k.
        X_b
            The active party's features (n_b × p_b); B also holds ``y``.
        y
            Targets for X_b's rows.
        ids_a, ids_b
            Row IDs (a list per passive party when there are several). Given, the rows
            are aligned by private set intersection between B and each passive party,
            in the same run as training (:mod:`islands.vfl.federation`); None: the rows
            are already aligned (same count, same order).

        Raises
        ------
        ValidationError
            For bad parameters or data, before any message is sent (with IDs and
            ``psi_engine="spu"``, when SPU's environment is missing, saying how to build
            it); after alignment,
            when the parties share no ID or too few rows for one batch (naming the party
            that refused).
        ProtocolError
            When a party's ID set is larger than the other's PSI limit
            (``max_peer_size``, ``max_peer_ratio``), naming both parties and the limit.
        """
        config = self._config()
        run_settings: RunSettings = self._run_settings()
        plan = config.plan()
        owner = type(self).__name__
        blocks = _blocks(X_a, "X_a", owner)
        (x_b,) = _blocks([X_b], "X_b", owner)
        if (ids_a is None) != (ids_b is None):
            raise ValidationError("give both ids_a and ids_b (private alignment) or neither")
        if ids_a is None:  # the parties' rows against each other first, then y against X_b
            check_aligned_rows(blocks, x_b)
        targets = self._encode_targets(y, x_b.shape[0])
        names = passive_names(len(blocks))
        # every party runs this check on its own too (islands.vfl.protocol); here it
        # comes first, with every party's count, before PSI
        features = {**{n: x.shape[1] for n, x in zip(names, blocks, strict=True)},
                    "B": x_b.shape[1]}
        maths.check_batch_rows(plan.batch_size, features, "B", owner)
        # with IDs, the aligned rows are checked by every party after PSI
        psi: PsiSettings | None = None
        lists: list[Any] = [None] * len(blocks)
        if ids_a is None:
            maths.check_batch_rows(plan.batch_size, features, "B", owner, x_b.shape[0])
        else:
            lists = check_party_ids(blocks, x_b, ids_a, ids_b, owner)
            psi = PsiSettings(normalize=DEFAULT_NORMALIZE, max_peer_size=config.max_peer_size,
                              max_peer_ratio=config.max_peer_ratio,
                              timeout=run_settings.timeout, inference=False,
                              **self._spu(config, [*names, "B"]))
        roles: dict[str, Any] = {
            "C": partial(coordinator_party, active="B", passive=names, plan=plan, psi=psi),
            "B": partial(active_party, X=x_b, y=targets, ids=ids_b, coordinator="C",
                         passive=names, plan=plan, psi=psi),
        }
        for name, x, own in zip(names, blocks, lists, strict=True):
            roles[name] = partial(passive_party, X=x, ids=own, coordinator="C", active="B",
                                  plan=plan, psi=psi)
        run = run_local(roles, timeout=run_settings.timeout,
                        keep_payloads=run_settings.keep_payloads, blas_threads=None)
        outcome: CoordinatorOutcome = run.results["C"]
        result_b: ActiveResult = run.results["B"]
        passives: list[PassiveResult] = [run.results[n] for n in names]
        self.ids_ = result_b.ids
        result_c = outcome.training
        models: dict[str, PartyModel] = {**{n: r.model for n, r in
                                            zip(names, passives, strict=True)},
                                         "B": result_b.model}
        coefs = [models[n].theta for n in names]
        self.coef_a_ = coefs[0] if len(coefs) == 1 else coefs
        self.coef_b_ = models["B"].theta[:-1]
        self.intercept_ = float(models["B"].theta[-1])
        self.loss_history_ = list(result_c.epoch_losses)
        self.batch_losses_ = list(result_c.batch_losses)
        self.n_epochs_ = result_c.epochs
        self.converged_ = result_c.converged
        self.key_bits_ = result_c.key_bits
        self.plan_ = plan
        self.config_ = config
        self.timing_: dict[str, Clock] = {"C": result_c.clock,
                                          **{n: m.clock for n, m in models.items()}}
        self.transcript_: Transcript = run.transcript
        self.epoch_seconds_ = epoch_seconds(run.transcript)
        self.n_passive_ = len(blocks)
        return self

    def _encode_targets(self, y: Any, n: int) -> Array:
        # the first residual is -y, encoded at score_bits below MAX_ABS_SCORE
        arr = check_array(y, "y", type(self).__name__, ndim=1, max_abs=maths.MAX_ABS_SCORE,
                          why="residuals are encoded in fixed point below 2^28")
        if arr.shape[0] != n:
            raise ValidationError(f"y must be 1-D with one value per row of X_b ({n}); got "
                                  f"shape {arr.shape}")
        return arr

    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_b_"):
            raise RuntimeError(f"This {type(self).__name__} instance is not fitted yet; call "
                               "fit(X_a, X_b, y) first.")

    def _scores(self, X_a: Any, X_b: ArrayLike) -> Array:
        """Return z for every row, by the inference protocol of Table 2 (C adds partial scores)."""
        self._check_fitted()
        owner = type(self).__name__
        blocks = _blocks(X_a, "X_a", owner)
        (x_b,) = _blocks([X_b], "X_b", owner)
        coefs: list[Array] = ([self.coef_a_] if isinstance(self.coef_a_, np.ndarray)
                              else list(self.coef_a_))
        if len(blocks) != len(coefs):
            raise ValidationError(f"X_a must hold {len(coefs)} passive parties' features; "
                                  f"got {len(blocks)}")
        for i, (x, c) in enumerate(zip([*blocks, x_b], [*coefs, self.coef_b_], strict=True)):
            label = "X_b" if i == len(blocks) else ("X_a" if len(blocks) == 1 else f"X_a[{i}]")
            if x.shape[1] != c.size or x.shape[0] != x_b.shape[0]:
                raise ValidationError(f"{label} must have shape ({x_b.shape[0]}, {c.size}); "
                                      f"got {x.shape}")
        names = passive_names(len(blocks))
        roles: dict[str, Any] = {
            "C": partial(inference_coordinator, query=np.arange(x_b.shape[0]),
                         parties=[*names, "B"]),
            "B": partial(inference_party, X=x_b, theta=np.append(self.coef_b_, self.intercept_),
                         coordinator="C", intercept=True),
        }
        for name, x, c in zip(names, blocks, coefs, strict=True):
            roles[name] = partial(inference_party, X=x, theta=c, coordinator="C")
        run = run_local(roles, timeout=self._run_settings().timeout, blas_threads=None)
        self.inference_transcript_ = run.transcript
        scores: Array = run.results["C"]
        return scores


class VerticalLinearRegression(_VerticalModel):
    """Least-squares regression over features split between organisations, protected.

    Passive parties A_1 … A_k hold features, the active party B holds features and the
    target, and a coordinator C, who sees no data, helps; training follows Yang et al.
    (2019), Table 1 (see :mod:`islands.vfl.protocol`). By default (``engine="ss"``) the
    parties exchange additively masked values and C deals the correlated randomness
    (:mod:`islands.vfl.ss`); with ``engine="he"`` C holds the private key of the paper's
    homomorphic encryption and only ever decrypts gradients masked with one-time pads.
    Either way C learns the loss, and the iterates are those of centralised
    mini-batch gradient descent on L = (1/b)·Σ(z − y)² + (λ/2)‖θ‖² with the features
    rounded to 2^-feature_bits and scores to 2^-score_bits
    (:func:`islands.vfl.maths.fixed_point_gd`).

    Parameters
    ----------
    learning_rate : float or None, default=None
        Step size η (None: 0.05, which converges on standardised features whose
        correlation matrix has largest eigenvalue below 20).
    lam : float, default=0.0
        L2 penalty λ (the intercept is not penalised).
    epochs : int, default=20
        Most passes over the aligned rows.
    batch_size : int, default=256
        Rows per mini-batch; more than any passive party's features and than B's
        features plus one, else a party could solve a batch's gradient for the labels
        or the other's scores (:func:`islands.vfl.maths.min_batch_rows`). A shorter
        last batch joins the one before.
    tol : float or None, default=1e-4
        Stop when an epoch's mean loss changes by less than ``tol`` (relative).
    key_bits : int, default=2048
        With ``engine="he"``: modulus size (under OU the approximate bits of n = p²q); at
        least 2048 (about 112-bit security) unless ``insecure_keys``.
    insecure_keys : bool, default=False
        Allow ``key_bits`` from 1024 to 1792: insecure, for tests and quick reproductions
        only; ``fit`` warns (:class:`~islands.vfl.keys.InsecureKeyWarning`) and
        ``config_`` records it (:mod:`islands.vfl.keys`).
    djn : bool, default=True
        With ``he="paillier"``: DJN key with short fixed-base randomness (faster
        encryption; see :mod:`islands.crypto.paillier`); False for textbook Paillier.
    feature_bits, score_bits : int, default=16, 32
        Fixed-point precision of features ([1, 22]) and of scores/residuals ([1, 32]).
    engine : {"ss", "he"} or None, default=None
        None: "he" when ``he`` is given, else "ss". "ss": additive secret sharing over an
        exact 189-bit ring, C dealing correlated randomness (:mod:`islands.vfl.ss`): the
        same model bit for bit, an epoch within a small factor of training in the clear.
        C must collude with no data party, as
        under HE; a coalition of C and one data party would read the other data
        parties' features and B's labels (under HE, residuals and scores;
        ``docs/threat-model.md``). "he": the paper's homomorphic
        encryption, scheme ``he``.
    he : {"ou", "paillier", "none"} or None, default=None
        The homomorphic scheme (None: "ou" under ``engine="he"``; given alone, it
        selects ``engine="he"``): "ou", Okamoto–Uchiyama on HEU
        (needs ``sf-heu``; security rests on factoring n = p²q, about 112 bits at 2048,
        see :mod:`islands.crypto.heu`); "paillier", islands' DJN Paillier (decisional
        composite residuosity, about 112 bits at 2048); "none" sends the same messages
        in the clear (no key): a baseline for benchmarks only, it protects nothing.
        Given with ``engine="ss"``, it is refused. (Formerly ``encryption``, which is
        refused with a message saying so.)
    sigmoid : {"taylor", "poly5"}, default="taylor"
        The logistic model's loss (:class:`VerticalLogisticRegression` with ``engine="ss"``
        only; refused otherwise). "taylor": the paper's second-order Taylor expansion,
        residual z − 2y. "poly5": s(z) = ½ + c1·z + c3·z³ + c5·z⁵, the degree-5
        least-squares fit of the sigmoid on [−8, 8] (Kim et al. 2018;
        :data:`islands.vfl.maths.POLY5`), residual s(z) − y01: accuracy as the Taylor
        loss's, far better calibrated probabilities (log-loss 0.14 against 0.27 on breast
        cancer, ``docs/vfl.md``), for one more round between the data parties per batch.
        Every partial score must stay below 2^5 in magnitude (a party refuses one above,
        naming itself and the limit); scores are rounded to 2^-16 (``score_bits`` applies
        to the Taylor loss).
    max_peer_size : int or None, default=None
        With IDs, the largest ID set each party accepts from the other in private set
        intersection; PSI cannot tell a guessed ID from a real one, so each ID the other
        enters is a test of this party's set. Given, it replaces ``max_peer_ratio``.
    max_peer_ratio : float or None, default=10.0
        Without ``max_peer_size``, the limit is this times the party's own number of IDs
        (:data:`islands.psi.DEFAULT_MAX_PEER_RATIO`); both None accept any size. A
        larger set stops ``fit`` with a ``ProtocolError`` naming both parties.
    psi_engine : {"dh", "spu"}, default="dh"
        With IDs, the PSI engine: "dh", Diffie–Hellman PSI on Curve25519 in islands
        (:mod:`islands.psi.protocol`); "spu", SecretFlow SPU's RR22 (about twenty times
        faster at a million IDs), one SPU process per data party over loopback, in the
        environment ``make spu`` builds (:mod:`islands.psi.spu_engine`). Both find the
        same rows in the same order, so the model is the same.
    timeout : float, default=600.0
        Seconds a party waits for one message.
    keep_payloads : bool, default=False
        Keep every message in ``transcript_`` (audits).
    random_state : int, Generator or None
        Draws the public mini-batch order's seed (:func:`islands.vfl.config.draw_seed`):
        ``random_state=r`` trains as a federation file's ``seed = draw_seed(r)``.

    The settings are those of :class:`~islands.vfl.config.VflConfig` (job files and the
    federation file's ``[vfl]`` section take the same ones); ``learning_rate`` and
    ``lam`` are at most 1e6, ``key_bits`` is a multiple of 256 in [2048, 16384] (from 1024
    with ``insecure_keys``).

    Attributes
    ----------
    coef_a_ : ndarray or list of ndarray
        The passive party's weights (a list with several passive parties).
    coef_b_ : ndarray
        The active party's weights.
    intercept_ : float
    config_ : VflConfig
        The settings the fit ran with (its ``seed`` drawn from ``random_state``).
    plan_ : Plan
        ``config_.plan()``, what every party checked.
    loss_history_ : list of float
        Mean loss of every epoch, as C decrypted it.
    batch_losses_ : list of float
    n_epochs_ : int
    timing_ : dict of party name to Clock
        Seconds of homomorphic work, plain compute and messaging (incl. waiting).
    transcript_ : Transcript
        Every message of the fit (with IDs, PSI's first).
    ids_ : list or None
        The aligned IDs (as B gave them, in PSI's order) when the fit aligned them.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 4)); y = X @ [1.0, -2.0, 0.5, 3.0] + 1.0
    >>> model = VerticalLinearRegression(epochs=60, learning_rate=0.1, tol=None,
    ...                                  key_bits=1024, insecure_keys=True,  # tests only
    ...                                  ).fit(X[:, :2], X[:, 2:], y)
    >>> np.round(model.coef_a_, 2), np.round(model.coef_b_, 2), round(model.intercept_, 2)
    (array([ 1., -2.]), array([0.5, 3. ]), 1.0)
    """

    _objective = "linear"

    def predict(self, X_a: Any, X_b: ArrayLike) -> Array:
        """Predict by the inference protocol (Table 2): C adds the parties' partial scores."""
        return self._scores(X_a, X_b)


class VerticalLogisticRegression(_VerticalModel):
    """Logistic regression over features split between organisations, encrypted.

    As :class:`VerticalLinearRegression`, with the second-order Taylor expansion of the
    logistic loss, log 2 − yz/2 + z²/8 for labels y = ±1 (Hardy et al. 2017), so that the
    residual e = z − 2y is linear in the encrypted scores. Labels may be any two classes
    (as scikit-learn accepts them): ``classes_[1]`` becomes +1. The default step is 0.3
    (the Taylor loss's curvature is ¼ of the feature covariance).

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        The two labels, sorted.

    See :class:`VerticalLinearRegression` for the parameters and the other attributes.
    """

    _objective = "logistic"

    def _encode_targets(self, y: Any, n: int) -> Array:
        arr = np.asarray(y)
        if arr.ndim != 1 or arr.shape[0] != n:
            raise ValidationError(f"y must be 1-D with one label per row of X_b ({n}); got "
                                  f"shape {arr.shape}")
        classes = unique_labels(arr, "y", type(self).__name__)
        if classes.size != 2:
            raise ValidationError(f"VerticalLogisticRegression needs exactly two classes in "
                                  f"y; got {classes.size}: {classes[:5].tolist()}")
        self.classes_ = classes
        return np.where(arr == classes[1], 1.0, -1.0)

    def decision_function(self, X_a: Any, X_b: ArrayLike) -> Array:
        """Return z = Σ partial scores, by the inference protocol (positive: ``classes_[1]``)."""
        return self._scores(X_a, X_b)

    def predict_proba(self, X_a: Any, X_b: ArrayLike) -> Array:
        """Probabilities of ``classes_[0]`` and ``classes_[1]``, σ(z) for the latter."""
        p = maths.sigmoid(self._scores(X_a, X_b))
        out: Array = np.column_stack([1.0 - p, p])
        return out

    def predict(self, X_a: Any, X_b: ArrayLike) -> NDArray[Any]:
        """Return the more probable class of every row."""
        z = self._scores(X_a, X_b)
        out: NDArray[Any] = np.where(z > 0, self.classes_[1], self.classes_[0])
        return out
