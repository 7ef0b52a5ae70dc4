"""``FederatedTransferLearner``: the user API of federated transfer learning.

``fit(X_a, X_b, y_b, ids_a, ids_b)`` simulates the parties in this process: private set
intersection (:func:`islands.psi.align`, on ``psi_engine``) finds the shared rows, then
B (labels) and A run the roles of :mod:`islands.vfl.ftl.protocol` in threads, every
message encoded to bytes; under ``engine="ss"`` (the default) a third role, the dealer
"D" of :mod:`islands.vfl.ftl.ss`, runs beside them. ``predict_proba(X_a)`` runs
federated inference: A's rows are scored against B's class directions (a commodity
product with D, or under B's key). In a deployment each organisation runs only its own
role and keeps only its own network; the estimator holds both because it plays every
party.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.arrays import Array
from islands.crypto import paillier
from islands.errors import ValidationError
from islands.estimator import FederatedEstimator
from islands.psi import DEFAULT_MAX_PEER_RATIO, align
from islands.psi.config import DEFAULT_ENGINE
from islands.psi.spu_engine import spu_python
from islands.runtime import Transcript, run_local
from islands.validation import check_array, unique_labels
from islands.vfl.ftl import maths, ss
from islands.vfl.ftl.config import RENAMED, FtlConfig, Plan, draw_seeds
from islands.vfl.ftl.protocol import (
    SourceModel,
    TargetModel,
    infer_source,
    infer_target,
    source,
    target,
)
from islands.vfl.keys import warn_insecure_keys

__all__ = ["FederatedTransferLearner"]


OWNER = "FederatedTransferLearner"


def _matrix(x: Any, name: str) -> Array:
    # a feature above 2^30 makes the representations leave FTL's fixed-point range
    return check_array(x, name, "FederatedTransferLearner", max_abs=maths.MAX_ABS_VALUE,
                       why="the networks' representations are encoded in fixed point below "
                       "2^30; standardise the features")


def _refuse_renamed(params: dict[str, Any]) -> None:
    """Name a renamed parameter (:data:`~islands.vfl.config.RENAMED`); refuse any other."""
    for key in params:
        if key in RENAMED:
            raise ValidationError(f"{OWNER}: {key!r} {RENAMED[key]}")
        raise TypeError(f"{OWNER}.__init__() got an unexpected keyword argument {key!r}")


class FederatedTransferLearner(FederatedEstimator[FtlConfig]):
    """Label A's rows with B's labels, across different features and few shared rows.

    Federated transfer learning (Liu et al. 2020; Yang et al. 2019, §2.3.3): B holds
    labelled rows, A unlabelled rows with other features, and a few rows are held by
    both. Each party trains a network into a common ``dim``-dimensional space; B's
    labelled representations give one direction per class, Φ; A's rows are scored by
    Φ·Net_A(x). By default (``engine="ss"``) every product of A's and B's terms is
    secret-shared over an exact ring with correlated randomness from a dealer
    (:mod:`islands.vfl.ftl.ss`): two round trips per batch, the same integers as the HE
    flow. This estimator plays the dealer "D" in-process; a deployment needs a third
    organisation as the dealer, one that colludes with neither party (``[ftl] dealer``).
    ``engine="he"`` runs Liu et al.'s two-party flow instead, each party's gradient terms
    under the other's homomorphic key with one-time pads
    (:mod:`islands.vfl.ftl.protocol`, which also lists what each party learns).

    The protocol's settings are :class:`~islands.vfl.ftl.config.FtlConfig`'s (the
    federation file's ``[ftl]`` section takes the same ones); ``classes``, ``timeout``,
    ``verbose`` and ``random_state`` only say how this process runs the two parties.

    Parameters
    ----------
    dim
        Dimension d of the common representation.
    hidden
        Hidden layer widths of both networks.
    loss
        ``"softmax"``: second-order Taylor expansion of the K-class cross-entropy (an
        extension, the default); ``"logistic"``: the paper's Taylor logistic loss, one
        score per class beyond two classes.
    alignment
        ``"anchored"`` (default, an extension): B's representation is the fixed target
        of the alignment, so B learns only batch aggregates; ``"symmetric"``: the paper's
        ‖u^A − u^B‖² moves both networks, and reveals A's overlap representations to B.
    alpha, gamma, source_weight
        Weights of the label loss, the alignment and B's local loss on its own labels
        (``source_weight=0`` is the paper).
    pretrain_epochs
        Epochs B trains on its own labels before the federation (0 is the paper).
    epochs, batch_size, learning_rate, weight_decay
        Passes over the overlap, overlap rows per step, Adam's step and L2 penalty.
    tol
        Stop when an epoch's loss improves by less than ``tol`` (relative); None: run
        every epoch.
    engine
        ``"ss"`` (what None means unless ``he`` is given): secret sharing with a dealer
        (:mod:`islands.vfl.ftl.ss`), which adds the assumption that the dealer colludes
        with neither party; ``"he"`` (what None means when ``he`` is given): the
        two-party homomorphic flow, which needs no third party.
    he
        With ``engine="he"``, the homomorphic scheme of each party's key: ``"ou"`` (what
        None means: Okamoto–Uchiyama on HEU, needs ``sf-heu``), ``"paillier"`` (islands'
        DJN Paillier, about five times slower) or ``"none"``: the same terms in the
        clear, as the baseline for measurements only. Refused with ``engine="ss"``.
        (``encryption`` was its old name.)
    key_bits, djn
        Modulus size of each party's key (a multiple of 256 in [2048, 16384]; under OU
        the approximate bits of n = p²q); DJN fixed-base encryption (Paillier only).
        Unused under ``engine="ss"``.
    insecure_keys
        Allow ``key_bits`` from 1024 to 1792: insecure, for tests and quick reproductions
        only; ``fit`` warns (:class:`~islands.vfl.keys.InsecureKeyWarning`) and ``plan_``
        records it (:mod:`islands.vfl.keys`).
    frac_bits
        Fixed-point fraction bits; the SS and encrypted runs compute the same integers,
        and agree with the clear run (``he="none"``) to about 2^-frac_bits.
    classes
        The classes to expect (None: those of ``y_b``); a listed class with no
        labelled row is an error.
    max_peer_size, max_peer_ratio
        The largest ID set each party accepts from the other in private set
        intersection: ``max_peer_size`` (an int >= 1) when given, else ``max_peer_ratio``
        (default :data:`islands.psi.DEFAULT_MAX_PEER_RATIO`, 10) times the party's own
        number of IDs; both None accept any size. PSI cannot tell a guessed ID from a
        real one, so every ID the other enters tests this party's set; a larger set
        stops ``fit`` with a ``ProtocolError`` naming both parties and the limit.
    psi_engine
        The PSI engine: ``"dh"`` (default), Diffie–Hellman PSI on Curve25519 in islands;
        ``"spu"``, SecretFlow SPU's RR22 (one SPU process per party over loopback, in the
        environment ``make spu`` builds; :mod:`islands.psi.spu_engine`). Both find the
        same rows in the same order, so the model is the same.
    timeout
        Seconds a party waits for one message.
    verbose
        Print the loss after every epoch.
    random_state
        Seed of the batch order and of both networks' initial weights
        (:func:`~islands.vfl.ftl.config.draw_seeds`; ``plan_.seed`` is the batch order's).

    Attributes
    ----------
    classes_ : ndarray
        The class labels, in the order of ``predict_proba``'s columns.
    overlap_ids_ : list
        The shared IDs found by PSI, in the parties' agreed order.
    n_overlap_ : int
        Their number.
    loss_history_ : list of float
        Mean federated loss of every epoch.
    epoch_seconds_ : list of float
        Wall time of every epoch.
    timing_ : dict
        Each data party's :class:`~islands.vfl.protocol.Clock` (homomorphic or ring work
        in ``he``, plain compute, messaging).
    net_a_ : torch.nn.Module
        A's network (what A keeps).
    phi_ : ndarray
        B's class directions Φ (K × d; what B keeps).
    transcript_ : Transcript
        Every training message.

    Examples
    --------
    >>> ftl = FederatedTransferLearner(epochs=5)  # doctest: +SKIP
    >>> ftl.fit(X_a, X_b, y_b, ids_a, ids_b).predict(X_a_new)        # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        dim: int = 32,
        hidden: tuple[int, ...] = (128,),
        loss: str = "softmax",
        alignment: str = "anchored",
        alpha: float = 1.0,
        gamma: float = 1.0,
        source_weight: float = 1.0,
        pretrain_epochs: int = 5,
        epochs: int = 30,
        batch_size: int = 64,
        learning_rate: float = 1e-3,
        weight_decay: float = 1e-4,
        tol: float | None = None,
        engine: str | None = None,
        he: str | None = None,
        key_bits: int = paillier.DEFAULT_KEY_BITS,
        insecure_keys: bool = False,
        djn: bool = True,
        frac_bits: int = 24,
        classes: ArrayLike | None = None,
        max_peer_size: int | None = None,
        max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO,
        psi_engine: str = DEFAULT_ENGINE,
        timeout: float = 3600.0,
        verbose: bool = False,
        random_state: int | np.random.Generator | None = None,
        **renamed: Any,
    ) -> None:
        _refuse_renamed(renamed)
        self.dim = dim
        self.hidden = hidden
        self.loss = loss
        self.alignment = alignment
        self.alpha = alpha
        self.gamma = gamma
        self.source_weight = source_weight
        self.pretrain_epochs = pretrain_epochs
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.tol = tol
        self.engine = engine
        self.he = he
        self.key_bits = key_bits
        self.insecure_keys = insecure_keys
        self.djn = djn
        self.frac_bits = frac_bits
        self.classes = classes
        self.max_peer_size = max_peer_size
        self.max_peer_ratio = max_peer_ratio
        self.psi_engine = psi_engine
        self.timeout = timeout
        self.verbose = verbose
        self.random_state = random_state

    Config = FtlConfig
    runtime = ("classes", "timeout", "verbose", "random_state")

    def set_params(self, **params: Any) -> Any:
        """Set constructor parameters (scikit-learn convention); they are checked at fit."""
        _refuse_renamed({k: v for k, v in params.items() if k in RENAMED})
        return super().set_params(**params)

    def _plan(self) -> tuple[FtlConfig, Plan, tuple[int, int]]:
        """Return the settings, the shared plan and each party's private weights seed."""
        config = self._config()
        if config.engine == "he":
            assert config.he is not None
            warn_insecure_keys(config.he, config.key_bits, OWNER, stacklevel=4)
        self._run_settings()
        seed_a, seed_b, seed = draw_seeds(self.random_state)
        return config, config.plan(seed), (seed_a, seed_b)

    def _labels(self, y_b: Any, n: int) -> tuple[NDArray[np.int64], Array]:
        y = np.asarray(y_b)
        if y.ndim != 1 or y.shape[0] != n:
            raise ValidationError(f"y_b must be 1-D with one label per row of X_b ({n}); got "
                                  f"shape {y.shape}")
        present = unique_labels(y, "y_b", "FederatedTransferLearner")
        if self.classes is None:
            classes = present
        else:
            classes = unique_labels(np.asarray(self.classes), "classes",
                                    "FederatedTransferLearner")
            unknown = np.setdiff1d(present, classes)
            if unknown.size:
                raise ValidationError(f"y_b holds labels {unknown.tolist()} not in classes")
            missing = np.setdiff1d(classes, present)
            if missing.size:
                raise ValidationError(f"classes {missing.tolist()} have no labelled row in "
                                      "y_b: B cannot teach a class it has never seen")
        if classes.size < 2:
            raise ValidationError(f"y_b must hold at least 2 classes; got {classes.tolist()}")
        return np.searchsorted(classes, y).astype(np.int64), classes

    # ------------------------------------------------------------ API
    def fit(self, X_a: ArrayLike, X_b: ArrayLike, y_b: ArrayLike, ids_a: Any,
            ids_b: Any) -> FederatedTransferLearner:
        """Find the shared rows by PSI, then train both networks (Liu et al. 2020, §4).

        Parameters
        ----------
        X_a
            A's features (n_a × p_a), standardised; A has no labels.
        X_b
            B's features (n_b × p_b), standardised.
        y_b
            B's labels, one per row of ``X_b``.
        ids_a, ids_b
            Row IDs of each side (ints, strings or bytes, unique); the rows both hold
            are found by private set intersection.

        Raises
        ------
        ValidationError
            For bad parameters or data (naming them), or when the two sides share no
            ID, before any training message is sent; with ``psi_engine="spu"``, when
            SPU's environment is missing (saying how to build it), before PSI.
        ProtocolError
            When one side's ID set is larger than the other's PSI limit
            (``max_peer_size``, ``max_peer_ratio``), naming both parties and the limit.
        """
        config, plan, seeds = self._plan()
        x_a = _matrix(X_a, "X_a")
        x_b = _matrix(X_b, "X_b")
        codes, classes = self._labels(y_b, x_b.shape[0])
        for name, ids, x in (("ids_a", ids_a, x_a), ("ids_b", ids_b, x_b)):
            if ids is None or len(ids) != x.shape[0]:
                raise ValidationError(f"{name} must hold one ID per row ({x.shape[0]}); got "
                                      f"{'None' if ids is None else len(ids)}")
        if config.psi_engine == "spu":
            spu_python(f"{OWNER} (psi_engine='spu')", "psi_engine")
        side_a, side_b = align(ids_a, ids_b, names=("A", "B"), owner=OWNER,
                               timeout=float(self.timeout),
                               max_peer_size=config.max_peer_size,
                               max_peer_ratio=config.max_peer_ratio,
                               engine=config.psi_engine)
        overlap_a = np.asarray(side_a.rows, dtype=np.int64)
        overlap_b = np.asarray(side_b.rows, dtype=np.int64)
        loss = maths.TaylorLoss(plan.loss, classes.size)

        def progress(epoch: int, epochs: int, value: float) -> None:
            if self.verbose:
                print(f"epoch {epoch}/{epochs}: loss {value:.6f}", flush=True)

        dealer = "D" if plan.engine == "ss" else None
        roles: dict[str, Any] = {
            "A": partial(target, X=x_a[overlap_a], peer="B", plan=plan, init_seed=seeds[0],
                         dealer=dealer),
            "B": partial(source, X=x_b, labels=codes, overlap=overlap_b,
                         n_classes=classes.size, peer="A", plan=plan, progress=progress,
                         init_seed=seeds[1], dealer=dealer),
        }
        if dealer is not None:
            roles[dealer] = partial(ss.dealer, target="A", source="B", plan=plan)
        run = run_local(roles, timeout=float(self.timeout), blas_threads=None)
        model_a: TargetModel = run.results["A"]
        model_b: SourceModel = run.results["B"]
        self.plan_ = plan
        self.loss_ = loss
        self.classes_ = classes
        self.overlap_ids_ = list(side_a.ids)
        self.n_overlap_ = len(self.overlap_ids_)
        self.n_features_a_ = x_a.shape[1]
        self.net_a_ = model_a.net
        self.net_b_ = model_b.net
        self.phi_ = model_b.phi
        self.loss_history_ = list(model_b.epoch_losses)
        self.batch_losses_ = list(model_b.batch_losses)
        self.n_epochs_ = model_b.epochs
        self.converged_ = model_b.converged
        self.timing_ = {"A": model_a.clock, "B": model_b.clock}
        self.transcript_: Transcript = run.transcript
        marks = [r.time for r in run.transcript if r.tag == "status"]
        # training starts once both hellos are out (B's follows its local pre-training)
        start = max((r.time for r in run.transcript if r.tag == "hello"), default=None)
        self.epoch_seconds_ = ([] if start is None else
                               [b - a for a, b in zip([start, *marks[:-1]], marks, strict=True)])
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "net_a_"):
            raise RuntimeError("This FederatedTransferLearner instance is not fitted yet; "
                               "call fit(X_a, X_b, y_b, ids_a, ids_b) first.")

    def _scores(self, X_a: ArrayLike) -> Array:
        """Return Φ·Net_A(x) (n × K) for A's rows, by federated inference."""
        self._check_fitted()
        x = _matrix(X_a, "X_a")
        if x.shape[1] != self.n_features_a_:
            raise ValidationError(f"X_a must have {self.n_features_a_} features, as in fit; "
                                  f"got {x.shape[1]}")
        dealer = "D" if self.plan_.engine == "ss" else None
        roles: dict[str, Any] = {
            "A": partial(infer_target, net=self.net_a_, X=x, peer="B", plan=self.plan_,
                         dealer=dealer),
            "B": partial(infer_source, phi=self.phi_, peer="A", plan=self.plan_,
                         dealer=dealer)}
        if dealer is not None:
            roles[dealer] = partial(ss.infer_dealer, target="A", source="B", plan=self.plan_)
        run = run_local(roles, timeout=float(self.timeout), blas_threads=None)
        self.inference_transcript_ = run.transcript
        scores: Array = run.results["A"]
        return scores

    def decision_function(self, X_a: ArrayLike) -> Array:
        """Scores Φ·Net_A(x) for A's rows, by federated inference (SS or under B's key).

        Shape (n,) for the paper's binary logistic loss (one score), else (n, K).
        """
        scores = self._scores(X_a)
        return np.asarray(scores[:, 0]) if scores.shape[1] == 1 else scores

    def predict_proba(self, X_a: ArrayLike) -> Array:
        """Class probabilities (n × classes) for A's rows, columns in ``classes_`` order."""
        self._check_fitted()
        return self.loss_.proba(self._scores(X_a))

    def predict(self, X_a: ArrayLike) -> NDArray[Any]:
        """Return the most probable class of each of A's rows."""
        self._check_fitted()
        return np.asarray(self.classes_[np.argmax(self.predict_proba(X_a), axis=1)])

    def score(self, X_a: ArrayLike, y: ArrayLike) -> float:
        """Accuracy of :meth:`predict` on A's rows against true labels ``y``."""
        return float(np.mean(self.predict(X_a) == np.asarray(y)))
