"""``SecureBoostClassifier`` and ``SecureBoostRegressor``: the user API.

``fit(X_a, X_b, y, ids_a=None, ids_b=None)`` simulates the whole federation in this
process: the active party B (features ``X_b`` and the labels) and one passive party per
matrix of ``X_a`` run the roles of :mod:`islands.vfl.secureboost.federation`, each in its
own thread, every message encoded to bytes: with IDs, private set intersection first,
then training. ``predict`` runs the inference protocol over the same parties. A deployed
federation runs the same roles, one party per organisation, each keeping only its part;
the estimator holds every part because it plays every party.

Why not a maintained engine. XGBoost's vertical federated mode relays every collective
through its own central gRPC server and, in its released wheels, broadcasts the
gradients in the clear (its encrypted variant needs a processor plugin that the pip wheel
does not ship, and column-split training left XGBoost in 3.4); SecretFlow's SGB needs the
secretflow package (Python 3.10–3.11, numpy < 2, SPU, Ray) and its own links. Neither
runs over islands' transport with islands' keys, so the protocol is written here, on
HEU's encrypted bucket sums (:meth:`islands.crypto.heu.OuCipher.bucket_sums`).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from islands.arrays import Array
from islands.config import RunSettings
from islands.crypto import heu
from islands.errors import ValidationError
from islands.estimator import FederatedEstimator
from islands.progress import ProgressOption, check_progress, task
from islands.psi.config import DEFAULT_ENGINE, DEFAULT_MAX_PEER_RATIO, DEFAULT_NORMALIZE
from islands.runtime import Transcript, run_local
from islands.validation import as_float_array, check_values
from islands.vfl.config import draw_seed
from islands.vfl.estimator import check_aligned_rows, check_party_ids, passive_names
from islands.vfl.federation import PsiSettings
from islands.vfl.keys import warn_insecure_keys
from islands.vfl.secureboost.config import BoostConfig
from islands.vfl.secureboost.federation import ActiveResult, active_party, passive_party
from islands.vfl.secureboost.maths import Boosted
from islands.vfl.secureboost.model import LookupTable, TreeModel
from islands.vfl.secureboost.protocol import (
    check_features,
    check_target_range,
    infer,
    serve_inference,
)

__all__ = ["SecureBoostClassifier", "SecureBoostRegressor", "party_blocks"]


def party_blocks(X_a: Any, name: str, owner: str) -> list[Array]:
    """Return one passive party's matrix, or a list of them, checked (NaN: missing)."""
    items = list(X_a) if isinstance(X_a, (list, tuple)) else [X_a]
    if not items:
        raise ValidationError(f"{name} must hold at least one passive party's features")
    return [check_features(x, name if len(items) == 1 else f"{name}[{i}]", owner)
            for i, x in enumerate(items)]


class _SecureBoost(FederatedEstimator[BoostConfig]):
    """Shared machinery of the two estimators.

    The parameters are :class:`~islands.vfl.secureboost.config.BoostConfig`'s fields,
    except ``objective`` (the class and the labels) and ``seed`` (drawn from
    ``random_state``), and the runtime ones ``workers``, ``progress``, ``timeout``,
    ``keep_payloads`` and ``random_state``.
    """

    Config = BoostConfig
    runtime = ("workers", "progress", "timeout", "keep_payloads", "random_state")

    def __init__(
        self,
        *,
        n_estimators: int = 50,
        max_depth: int = 3,
        learning_rate: float = 0.3,
        max_bins: int = 32,
        min_child_weight: float = 1.0,
        reg_lambda: float = 1.0,
        gamma: float = 0.0,
        subsample: float = 1.0,
        colsample_bytree: float = 1.0,
        goss: bool = False,
        top_rate: float = 0.2,
        other_rate: float = 0.1,
        early_stopping_rounds: int | None = None,
        validation_fraction: float = 0.1,
        he: str = "ou",
        insecure_keys: bool = False,
        key_bits: int = 2048,
        packing: bool = True,
        compression: bool = True,
        subtraction: bool = True,
        active_first_trees: int = 0,
        active_top_levels: int = 0,
        max_peer_size: int | None = None,
        max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO,
        psi_engine: str = DEFAULT_ENGINE,
        workers: int | None = None,
        progress: ProgressOption = False,
        timeout: float = 600.0,
        keep_payloads: bool = False,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.max_bins = max_bins
        self.min_child_weight = min_child_weight
        self.reg_lambda = reg_lambda
        self.gamma = gamma
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.goss = goss
        self.top_rate = top_rate
        self.other_rate = other_rate
        self.early_stopping_rounds = early_stopping_rounds
        self.validation_fraction = validation_fraction
        self.he = he
        self.insecure_keys = insecure_keys
        self.key_bits = key_bits
        self.packing = packing
        self.compression = compression
        self.subtraction = subtraction
        self.active_first_trees = active_first_trees
        self.active_top_levels = active_top_levels
        self.max_peer_size = max_peer_size
        self.max_peer_ratio = max_peer_ratio
        self.psi_engine = psi_engine
        self.workers = workers
        self.progress = progress
        self.timeout = timeout
        self.keep_payloads = keep_payloads
        self.random_state = random_state

    # ------------------------------------------------------------ hooks
    def _encode(self, y: Any, rows: int) -> tuple[Array, str, int]:
        """Encode the labels; return (codes or values, objective, classes)."""
        raise NotImplementedError

    def _config_for(self, objective: str) -> BoostConfig:
        owner = type(self).__name__
        values = {name: getattr(self, name) for name in self._param_names()
                  if name in BoostConfig.model_fields}
        config = BoostConfig.build(owner, objective=objective, **values)
        warn_insecure_keys(config.he, config.key_bits, owner, stacklevel=4)
        if config.he == "ou":
            heu.require(owner)
        check_progress(self.progress, owner)
        return config.replace(seed=draw_seed(self.random_state, owner))

    # ------------------------------------------------------------ fit
    def fit(self, X_a: Any, X_b: ArrayLike, y: ArrayLike, ids_a: Any = None,
            ids_b: Any = None) -> Any:
        """Train SecureBoost (Cheng et al. 2021, Algorithms 1–2) across the parties.

        Parameters
        ----------
        X_a
            The passive party's features (n_a × p_a; NaN marks a missing value), or a
            list with one matrix per passive party A_1 … A_k.
        X_b
            The active party's features (n_b × p_b); B also holds ``y``.
        y
            Labels of X_b's rows.
        ids_a, ids_b
            Row IDs (a list per passive party when there are several). Given, the rows
            are aligned by private set intersection first, in the same run; None: the
            rows are already aligned (same count, same order).

        Raises
        ------
        ValidationError
            For bad parameters or data (infinite values, strings, mismatched rows),
            before any message is sent.
        """
        owner = type(self).__name__
        blocks = party_blocks(X_a, "X_a", owner)
        (x_b,) = party_blocks([X_b], "X_b", owner)
        targets, objective, classes = self._encode(y, x_b.shape[0])
        config = self._config_for(objective)
        run_settings: RunSettings = RunSettings.build(owner, timeout=self.timeout,
                                                      keep_payloads=self.keep_payloads)
        if (ids_a is None) != (ids_b is None):
            raise ValidationError("give both ids_a and ids_b (private alignment) or neither")
        names = passive_names(len(blocks))
        lists: list[Any] = [None] * len(blocks)
        psi: PsiSettings | None = None
        if ids_a is None:
            check_aligned_rows(blocks, x_b)
        else:
            lists = check_party_ids(blocks, x_b, ids_a, ids_b, owner)
            psi = PsiSettings(normalize=DEFAULT_NORMALIZE, max_peer_size=config.max_peer_size,
                              max_peer_ratio=config.max_peer_ratio,
                              timeout=run_settings.timeout, inference=False,
                              engine=config.psi_engine)
        with task(self.progress, "SecureBoost", config.n_estimators, owner=owner) as bar:
            def on_round(r: int, state: Boosted) -> None:
                loss = state.valid_loss[-1] if state.valid_loss else state.train_loss[-1]
                bar.update(r + 1, f"loss {loss:.4f}")

            roles: dict[str, Any] = {"B": partial(
                active_party, X=x_b, y=targets, ids=ids_b, passive=names, config=config,
                psi=psi, classes=classes, workers=self.workers, on_round=on_round)}
            for name, x, own in zip(names, blocks, lists, strict=True):
                roles[name] = partial(passive_party, X=x, ids=own, active="B", config=config,
                                      psi=psi, workers=self.workers)
            run = run_local(roles, timeout=run_settings.timeout,
                            keep_payloads=run_settings.keep_payloads, blas_threads=None)
        result: ActiveResult = run.results["B"]
        outcome = result.outcome
        self.config_ = config
        self.model_: TreeModel = outcome.model
        self.tables_: dict[str, LookupTable] = {
            "B": outcome.table, **{n: run.results[n].outcome.table for n in names}}
        self.n_features_: dict[str, int] = {"B": x_b.shape[1],
                                            **{n: x.shape[1] for n, x in
                                               zip(names, blocks, strict=True)}}
        self.ids_ = result.ids
        self.train_loss_ = list(outcome.boosted.train_loss)
        self.validation_loss_ = list(outcome.boosted.valid_loss)
        self.n_estimators_ = len(outcome.model.trees)
        self.transcript_: Transcript = run.transcript
        self.n_passive_ = len(blocks)
        return self

    # ------------------------------------------------------------ inference
    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise RuntimeError(f"This {type(self).__name__} instance is not fitted yet; call "
                               "fit(X_a, X_b, y) first.")

    def decision_function(self, X_a: Any, X_b: ArrayLike) -> Array:
        """Return the raw scores (margins) of aligned rows, by the inference protocol."""
        raw = self._infer(X_a, X_b)
        return raw[:, 0] if raw.shape[1] == 1 else raw

    def staged_decision_function(self, X_a: Any, X_b: ArrayLike) -> Iterator[Array]:
        """Return the raw scores after each round, from one run of the inference protocol.

        The passive parties answer once, as for :meth:`decision_function`, and each
        tree's leaf of every row is found once; the scores after round r are the
        starting scores plus rounds 1 … r's leaves, added in the order
        :meth:`decision_function` adds them, so the last equals it exactly. The same as
        XGBoost's ``predict(..., output_margin=True, iteration_range=(0, r))``.

        Returns
        -------
        Iterator
            One array per round kept (:attr:`n_estimators_`): rows, or rows × classes
            for more than two classes. The inference runs when this method is called.
        """
        self._check_fitted()
        model = self.model_
        outputs = model.base.size
        if not model.trees:
            return iter(())
        # every tree scored into its own column: one "round" of all the trees, base 0
        flat = TreeModel(model.objective, np.zeros(len(model.trees) * outputs),
                         [[tree for built in model.trees for tree in built]])
        leaves = self._infer(X_a, X_b, flat).reshape(-1, len(model.trees), outputs)

        def stages() -> Iterator[Array]:
            raw = np.tile(np.asarray(model.base, dtype=np.float64), (leaves.shape[0], 1))
            for r in range(leaves.shape[1]):
                raw = raw + leaves[:, r, :]
                yield raw[:, 0].copy() if outputs == 1 else raw.copy()

        return stages()

    def _infer(self, X_a: Any, X_b: ArrayLike, model: TreeModel | None = None) -> Array:
        """Score rows by the protocol with ``model`` (default: the fitted one); rows × outputs."""
        self._check_fitted()
        model = self.model_ if model is None else model
        owner = type(self).__name__
        blocks = party_blocks(X_a, "X_a", owner)
        (x_b,) = party_blocks([X_b], "X_b", owner)
        names = passive_names(len(blocks))
        if len(blocks) != self.n_passive_:
            raise ValidationError(f"X_a must hold {self.n_passive_} passive parties' features; "
                                  f"got {len(blocks)}")
        for label, x, name in [("X_b", x_b, "B"), *[
                ("X_a" if len(blocks) == 1 else f"X_a[{i}]", x, n)
                for i, (x, n) in enumerate(zip(blocks, names, strict=True))]]:
            if x.shape != (x_b.shape[0], self.n_features_[name]):
                raise ValidationError(f"{label} must have shape ({x_b.shape[0]}, "
                                      f"{self.n_features_[name]}); got {x.shape}")
        roles: dict[str, Any] = {"B": partial(infer, X=x_b, model=model,
                                              table=self.tables_["B"], passive=names)}
        for name, x in zip(names, blocks, strict=True):
            roles[name] = partial(serve_inference, X=x, table=self.tables_[name], active="B")
        run = run_local(roles, timeout=self.timeout, blas_threads=None)
        raw: Array = run.results["B"]
        return raw

    def feature_importances(self, kind: str = "gain") -> dict[str, Array]:
        """Return each party's feature importances: total split gain or split count.

        ``kind`` is ``"gain"`` or ``"split"``; read from the trees and the parties' tables
        (the estimator holds all of them).
        """
        self._check_fitted()
        if kind not in ("gain", "split"):
            raise ValidationError(f"kind must be 'gain' or 'split'; got {kind!r}")
        names = ["B", *passive_names(self.n_passive_)]
        out = {n: np.zeros(self.n_features_[n]) for n in names}
        for built in self.model_.trees:
            for tree in built:
                for p, r, g in zip(tree.party, tree.record, tree.gain, strict=True):
                    if p >= 0:
                        feature = self.tables_[names[p]].records[r].feature
                        out[names[p]][feature] += g if kind == "gain" else 1
        return out


class SecureBoostClassifier(_SecureBoost):
    """SecureBoost for classification: logistic loss for two classes, softmax beyond.

    The parameters are :class:`~islands.vfl.secureboost.config.BoostConfig`'s.

    Attributes
    ----------
    classes_
        The class labels, sorted.
    model_, tables_
        The active party's trees and every party's lookup table (by party name).
    train_loss_, validation_loss_
        Mean log-loss after each round (validation only with early stopping).
    n_estimators_
        Rounds kept.
    transcript_
        Every message of the run.
    """

    def _encode(self, y: Any, rows: int) -> tuple[Array, str, int]:
        owner = type(self).__name__
        arr = np.asarray(y)
        if arr.ndim != 1 or arr.shape[0] != rows:
            raise ValidationError(f"y must be 1-D with one label per row of X_b ({rows}); got "
                                  f"shape {arr.shape}")
        if arr.dtype.kind == "f":
            check_values(arr, "y", owner)
        classes, codes = np.unique(arr, return_inverse=True)
        if classes.size < 2:
            raise ValidationError(f"y must hold at least 2 classes; got {classes.size}")
        self.classes_ = classes
        objective = "binary" if classes.size == 2 else "multiclass"
        return codes.astype(np.float64), objective, int(classes.size)

    def predict_proba(self, X_a: Any, X_b: ArrayLike) -> Array:
        """Return the class probabilities (rows × classes)."""
        raw = self.decision_function(X_a, X_b)
        proba = self.model_.objective.proba(raw.reshape(raw.shape[0], -1))
        return np.column_stack([1 - proba, proba]) if proba.ndim == 1 else proba

    def predict(self, X_a: Any, X_b: ArrayLike) -> Array:
        """Return the most probable class of each row."""
        proba = self.predict_proba(X_a, X_b)
        return np.asarray(self.classes_[np.argmax(proba, axis=1)])

    def score(self, X_a: Any, X_b: ArrayLike, y: ArrayLike) -> float:
        """Return the accuracy."""
        return float(np.mean(self.predict(X_a, X_b) == np.asarray(y)))


class SecureBoostRegressor(_SecureBoost):
    """SecureBoost for regression (squared error).

    See :class:`SecureBoostClassifier` for the attributes (no ``classes_``).
    """

    def _encode(self, y: Any, rows: int) -> tuple[Array, str, int]:
        owner = type(self).__name__
        arr = as_float_array(y, "y", owner)
        check_values(arr, "y", owner)
        if arr.ndim != 1 or arr.shape[0] != rows:
            raise ValidationError(f"y must be 1-D with one value per row of X_b ({rows}); got "
                                  f"shape {arr.shape}")
        check_target_range(arr, "regression", owner)
        return arr, "regression", 1

    def predict(self, X_a: Any, X_b: ArrayLike) -> Array:
        """Return the predicted values."""
        return self.decision_function(X_a, X_b)

    def score(self, X_a: Any, X_b: ArrayLike, y: ArrayLike) -> float:
        """Return R²."""
        truth = np.asarray(y, dtype=np.float64)
        pred = self.predict(X_a, X_b)
        total = float(np.sum((truth - truth.mean()) ** 2))
        return 1.0 - float(np.sum((truth - pred) ** 2)) / total if total > 0 else 0.0
