"""Evaluation metrics of horizontal federated learning, as pure numpy functions.

Classification: accuracy, macro precision / recall / F1 and per-class accuracy (the
per-class recall), following scikit-learn's ``zero_division=0`` convention for classes
that are never predicted or never present; the APFL paper's fairness measure
:func:`dev_avg`. Regression: MSE, RMSE, MAE and R² (scikit-learn's conventions).

A user's extra metrics (``FederatedModel(extra_metrics=...)``, a file's ``[model]
metrics``): :func:`resolve_metrics` turns names of scikit-learn metrics
(:data:`CLASSIFICATION_METRICS`, :data:`REGRESSION_METRICS`), names
``"package.module:function"`` and the user's own functions into callables
``fn(y_true, y_pred) -> float`` on numpy arrays (class labels, or real values);
:func:`extra_metrics` computes them.

References
----------
.. [1] Zhang Ze-Hui et al. "Adaptive privacy-preserving federated learning" (APFL),
   Acta Automatica Sinica 2023 (``papers/apfl-adaptive-fl-zhang-2023.zh.txt``): the
   evaluation metrics and Dev_avg, eq. 33.
"""

from __future__ import annotations

import functools
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.hfl.named import import_callable, is_name
from islands.validation import check_int, check_labels, describe

__all__ = [
    "CLASSIFICATION_METRICS",
    "REGRESSION_METRICS",
    "REPORTED",
    "ClassificationMetrics",
    "RegressionMetrics",
    "classification_report",
    "dev_avg",
    "extra_metrics",
    "regression_report",
    "resolve_metrics",
]

Metric = Callable[[NDArray[Any], NDArray[Any]], Any]
"""``fn(y_true, y_pred)``: a real number from the true and the predicted targets."""

CLASSIFICATION_METRICS: Mapping[str, tuple[str, Mapping[str, Any]]] = {
    "balanced_accuracy": ("balanced_accuracy_score", {}),
    "f1_macro": ("f1_score", {"average": "macro", "zero_division": 0}),
    "f1_micro": ("f1_score", {"average": "micro", "zero_division": 0}),
    "f1_weighted": ("f1_score", {"average": "weighted", "zero_division": 0}),
    "precision_weighted": ("precision_score", {"average": "weighted", "zero_division": 0}),
    "recall_weighted": ("recall_score", {"average": "weighted", "zero_division": 0}),
    "cohen_kappa": ("cohen_kappa_score", {}),
    "matthews_corrcoef": ("matthews_corrcoef", {}),
}
"""The named extra metrics of a classification: ``sklearn.metrics`` function and arguments.

On the predicted labels. scikit-learn's averages run over the labels present in
``y_true`` or ``y_pred``; the report's own ``precision``, ``recall`` and ``f1`` over
every class of the model.
"""

REGRESSION_METRICS: Mapping[str, tuple[str, Mapping[str, Any]]] = {
    "median_ae": ("median_absolute_error", {}),
    "max_error": ("max_error", {}),
    "explained_variance": ("explained_variance_score", {}),
    "mape": ("mean_absolute_percentage_error", {}),
}
"""The named extra metrics of a regression: ``sklearn.metrics`` function and arguments."""

REPORTED: Mapping[str, tuple[str, ...]] = {
    "classification": ("accuracy", "precision", "recall", "f1", "per_class_accuracy",
                       "confusion"),
    "regression": ("mse", "rmse", "mae", "r2"),
}
"""The metrics every report has, by task: asked for by name, they are simply kept."""

_RESERVED = ("clients_averaged",)  # FedBN's averaged report adds it


@dataclass(frozen=True)
class ClassificationMetrics:
    """The metrics of one set of class predictions.

    Attributes
    ----------
    accuracy : float
        The fraction of correct predictions.
    precision, recall, f1 : float
        Macro averages over all ``n_classes`` classes; a class whose precision, recall
        or F1 has a zero denominator counts as 0 (scikit-learn's ``zero_division=0``).
    per_class_accuracy : ndarray of shape (n_classes,), float64
        The accuracy on the examples of each class, i.e. the per-class recall (0 for a
        class absent from ``y_true``).
    confusion : ndarray of shape (n_classes, n_classes), int64
        ``confusion[i, j]``: examples of true class i predicted as j.
    """

    accuracy: float
    precision: float
    recall: float
    f1: float
    per_class_accuracy: NDArray[np.float64] = field(repr=False)
    confusion: NDArray[np.int64] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Return the metrics as JSON-friendly floats and (nested) lists."""
        return {
            "accuracy": float(self.accuracy),
            "precision": float(self.precision),
            "recall": float(self.recall),
            "f1": float(self.f1),
            "per_class_accuracy": [float(v) for v in self.per_class_accuracy],
            "confusion": [[int(v) for v in row] for row in self.confusion],
        }


@dataclass(frozen=True)
class RegressionMetrics:
    """The metrics of one set of real-valued predictions.

    Attributes
    ----------
    mse, rmse, mae : float
        Mean squared error, its square root, mean absolute error.
    r2 : float
        The coefficient of determination 1 − SS_res/SS_tot; when the targets are
        constant (SS_tot = 0) it is 1.0 for a perfect fit and 0.0 otherwise, as in
        scikit-learn.
    """

    mse: float
    rmse: float
    mae: float
    r2: float

    def to_dict(self) -> dict[str, float]:
        """Return the metrics as JSON-friendly floats."""
        return {"mse": self.mse, "rmse": self.rmse, "mae": self.mae, "r2": self.r2}


def _safe_ratio(num: NDArray[Any], den: NDArray[Any]) -> NDArray[np.float64]:
    """Return num/den elementwise, 0 where den is 0."""
    num64 = num.astype(np.float64)
    den64 = den.astype(np.float64)
    out: NDArray[np.float64] = np.divide(
        num64, den64, out=np.zeros_like(num64), where=den64 != 0
    )
    return out


def classification_report(y_true: Any, y_pred: Any, n_classes: int) -> ClassificationMetrics:
    """Compute accuracy, macro precision / recall / F1, per-class accuracy and confusion.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n,)
        Integer class labels in [0, n_classes), n ≥ 1.
    n_classes : int
        The number of classes; every class counts in the macro averages, present or not.

    Returns
    -------
    ClassificationMetrics

    Examples
    --------
    >>> m = classification_report([0, 1, 1, 2], [0, 1, 2, 2], n_classes=4)
    >>> m.accuracy, m.per_class_accuracy.tolist()
    (0.75, [1.0, 0.5, 1.0, 0.0])
    """
    owner = "classification_report"
    k = check_int(n_classes, "n_classes", owner, low=1)
    truth = check_labels(y_true, "y_true", owner)
    pred = check_labels(y_pred, "y_pred", owner)
    if pred.shape != truth.shape:
        raise invalid_parameter(
            "y_pred", owner, f"labels of the same length as y_true ({truth.size})", describe(pred)
        )
    for name, labels in (("y_true", truth), ("y_pred", pred)):
        bad = (labels < 0) | (labels >= k)
        if bad.any():
            raise invalid_parameter(
                name, owner, f"class labels in [0, {k}) (n_classes={k})", int(labels[bad][0])
            )
    confusion = np.bincount(truth * k + pred, minlength=k * k).reshape(k, k).astype(np.int64)
    tp = np.diag(confusion)
    support = confusion.sum(axis=1)
    predicted = confusion.sum(axis=0)
    precision = _safe_ratio(tp, predicted)
    recall = _safe_ratio(tp, support)
    f1 = _safe_ratio(2 * tp, support + predicted)  # 2tp / (2tp + fp + fn)
    return ClassificationMetrics(
        accuracy=float(tp.sum() / truth.size),
        precision=float(precision.mean()),
        recall=float(recall.mean()),
        f1=float(f1.mean()),
        per_class_accuracy=recall,
        confusion=confusion,
    )


def _as_vector(value: Any, name: str, owner: str, length: int | None = None) -> NDArray[np.float64]:
    """Return ``value`` as a finite, non-empty 1-D float64 array (of ``length`` if given)."""
    arr = np.asarray(value)
    ok = arr.ndim == 1 and arr.size > 0 and arr.dtype.kind in "fiu"
    if ok and length is not None:
        ok = arr.size == length
    if not ok:
        size = "non-empty" if length is None else f"length-{length}"
        raise invalid_parameter(name, owner, f"a {size} 1-D array of real numbers", describe(arr))
    out = arr.astype(np.float64)
    if not np.isfinite(out).all():
        raise ValidationError(
            f"The {name!r} parameter of {owner} must hold finite values only. Got "
            f"{int(np.count_nonzero(~np.isfinite(out)))} non-finite value(s) instead."
        )
    return out


def dev_avg(per_class_fl: Any, per_class_cl: Any) -> float:
    """Return Dev_avg, the mean absolute per-class accuracy gap between FL and CL.

    Dev_avg = (1/C) Σ_c |acc_FL,c − acc_CL,c|: how far, on average over the C classes,
    the federated model's accuracy on each class is from the centralised model's. 0
    means the federated model is as good as the centralised one on every class.

    Parameters
    ----------
    per_class_fl, per_class_cl : array-like of shape (C,)
        Per-class accuracies (e.g. :attr:`ClassificationMetrics.per_class_accuracy`) of
        the federated and the centralised model on the same test set.

    Returns
    -------
    float

    References
    ----------
    .. [1] Zhang Ze-Hui et al. "Adaptive privacy-preserving federated learning" (APFL),
       Acta Automatica Sinica 2023, eq. 33: Dev_avg = (1/cn) Σ_{i=1}^{cn}
       |acc_FL,i − acc_CL,i| over the cn classes.

    Examples
    --------
    >>> dev_avg([0.9, 0.8], [1.0, 0.6])
    0.15000000000000002
    """
    owner = "dev_avg"
    fl = _as_vector(per_class_fl, "per_class_fl", owner)
    cl = _as_vector(per_class_cl, "per_class_cl", owner, length=fl.size)
    return float(np.mean(np.abs(fl - cl)))


def regression_report(y_true: Any, y_pred: Any) -> RegressionMetrics:
    """Compute MSE, RMSE, MAE and R² of real-valued predictions (in float64).

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n,)
        Finite targets and predictions, n ≥ 1.

    Returns
    -------
    RegressionMetrics
    """
    owner = "regression_report"
    truth = _as_vector(y_true, "y_true", owner)
    pred = _as_vector(y_pred, "y_pred", owner, length=truth.size)
    residual = truth - pred
    mse = float(np.mean(residual * residual))
    ss_res = float(np.sum(residual * residual))
    centred = truth - truth.mean()
    ss_tot = float(np.sum(centred * centred))
    # constant targets: 1 for a perfect fit, else 0 (scikit-learn's force_finite)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0.0 else float(ss_res == 0.0)
    return RegressionMetrics(
        mse=mse, rmse=float(np.sqrt(mse)), mae=float(np.mean(np.abs(residual))), r2=r2
    )


def _sklearn_metric(function: str, kwargs: Mapping[str, Any],
                    y_true: NDArray[Any], y_pred: NDArray[Any]) -> Any:
    from sklearn import metrics  # imported on first use: import islands stays light

    return getattr(metrics, function)(y_true, y_pred, **kwargs)


def resolve_metrics(metrics: Any, task: str, *, owner: str = "FederatedModel",
                    param: str = "extra_metrics",
                    folder: str | os.PathLike[str] | None = None) -> dict[str, Metric]:
    """Return the extra metrics asked for, by name, as callables ``fn(y_true, y_pred)``.

    Parameters
    ----------
    metrics : sequence of str, mapping or None
        Names: one of the task's :data:`CLASSIFICATION_METRICS` or
        :data:`REGRESSION_METRICS` (computed by ``sklearn.metrics``), one the report
        already has (:data:`REPORTED`: kept, nothing added) or ``"package.module:function"``
        (imported here; the name is the key). A mapping gives each of the user's own
        functions its name (a value may also be one of those names).
    task : {"classification", "regression"}
        Which named metrics apply.
    owner, param : str
        Who asks and the parameter, for the messages.
    folder : path or None
        A job file's folder, searched for a named function's module.

    Returns
    -------
    dict
        Name → callable; empty for None.

    Raises
    ------
    ValidationError
        Naming ``param`` and the entry: an unknown name (the known ones listed), a name
        of the other task, a duplicate, a value that is not callable, or a key that
        would replace one of the report's own metrics.
    """
    if metrics is None:
        return {}
    other_task = "regression" if task == "classification" else "classification"
    named = CLASSIFICATION_METRICS if task == "classification" else REGRESSION_METRICS
    other = {**(REGRESSION_METRICS if task == "classification" else CLASSIFICATION_METRICS),
             **dict.fromkeys(REPORTED[other_task])}
    reported = REPORTED[task]
    known = sorted(named) + list(reported)

    def lookup(name: str) -> Metric | None:
        if name in named:
            function, kwargs = named[name]
            return functools.partial(_sklearn_metric, function, dict(kwargs))
        if name in reported:
            return None
        if is_name(name):
            return import_callable(name, param=param, owner=owner, folder=folder)
        why = f" ({name!r} is a metric of a {other_task})" if name in other else ""
        raise invalid_parameter(param, owner, f"names among {known} for a {task}, or "
                                f"'package.module:function'{why}", name)

    out: dict[str, Metric] = {}
    if isinstance(metrics, Mapping):
        for key, value in metrics.items():
            if not isinstance(key, str) or not key or key in reported or key in _RESERVED:
                raise invalid_parameter(
                    param, owner, f"a mapping whose keys are new names (not among the "
                    f"report's own {list(reported)})", describe(key))
            if isinstance(value, str):
                fn = lookup(value)
                if fn is None:
                    raise invalid_parameter(param, owner, f"values other than the report's "
                                            f"own {list(reported)} under a new name", value)
            elif callable(value):
                fn = value
            else:
                raise invalid_parameter(param, owner, "a mapping of names to callables "
                                        "fn(y_true, y_pred) or metric names",
                                        f"{key!r}: {describe(value)!r}")
            out[key] = fn
        return out
    if isinstance(metrics, str) or not isinstance(metrics, Sequence):
        raise invalid_parameter(param, owner, "None, a list of metric names or a mapping "
                                "of names to callables fn(y_true, y_pred)", describe(metrics))
    seen: set[str] = set()
    for name in metrics:
        if not isinstance(name, str):
            raise invalid_parameter(param, owner, "a list of metric names (strings)",
                                    describe(name))
        if name in seen:
            raise invalid_parameter(param, owner, "a list that names each metric once", name)
        seen.add(name)
        fn = lookup(name)
        if fn is not None:
            out[name] = fn
    return out


def extra_metrics(metrics: Mapping[str, Metric], y_true: Any, y_pred: Any) -> dict[str, float]:
    """Compute each metric on ``(y_true, y_pred)`` (numpy arrays) as a float, by name.

    Raises
    ------
    ValidationError
        Naming the metric that fails or returns other than a real number.
    """
    truth, pred = np.asarray(y_true), np.asarray(y_pred)
    out: dict[str, float] = {}
    for name, fn in metrics.items():
        try:
            value = fn(truth, pred)
        except Exception as exc:
            raise ValidationError(f"The metric {name!r} failed on {truth.size} rows: "
                                  f"{exc!r}") from exc
        scalar = value.item() if isinstance(value, np.ndarray | np.generic) and np.ndim(
            value) == 0 else value
        if isinstance(scalar, bool) or not isinstance(scalar, numbers.Real):
            raise ValidationError(f"The metric {name!r} must return a real number; it "
                                  f"returned {describe(value)!r}")
        out[name] = float(scalar)
    return out
