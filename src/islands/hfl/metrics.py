"""Evaluation metrics of horizontal federated learning, as pure numpy functions.

Classification: accuracy, macro precision / recall / F1 and per-class accuracy (the
per-class recall), following scikit-learn's ``zero_division=0`` convention for classes
that are never predicted or never present; the APFL paper's fairness measure
:func:`dev_avg`. Regression: MSE, RMSE, MAE and R² (scikit-learn's conventions).

References
----------
.. [1] Zhang Ze-Hui et al. "Adaptive privacy-preserving federated learning" (APFL),
   Acta Automatica Sinica 2023 (``papers/apfl-adaptive-fl-zhang-2023.zh.txt``): the
   evaluation metrics and Dev_avg, eq. 33.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_int, check_labels, describe

__all__ = [
    "ClassificationMetrics",
    "RegressionMetrics",
    "classification_report",
    "dev_avg",
    "regression_report",
]


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
