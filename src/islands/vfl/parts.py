"""Each party's part of a trained vertical model, as a plain JSON file, and inference with it.

No one holds a vertical model whole: after training, each party keeps the weights of its
own columns (:class:`ModelPart`), written by ``islands run`` of a vertical job as
``party-<name>.json`` (numbers and names only: no pickle, nothing runs when read). With
them the parties score new rows the way the inference protocol (Table 2) does: each
computes its partial score on its own features (:meth:`ModelPart.partial_score`), and the
active party B, which holds the intercept and the target's scale, combines them
(:func:`combine`). Each part records how its party standardised its columns (its own
training statistics), so raw features go in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.errors import DataNotFoundError, ValidationError
from islands.reporting import write_json
from islands.validation import check_array

__all__ = ["ModelPart", "combine"]

_ROLES = ("active", "passive")
_OBJECTIVES = ("linear", "logistic")


@dataclass(frozen=True)
class ModelPart:
    """One party's part of a trained vertical linear or logistic regression.

    Attributes
    ----------
    party : str
        The party (``"A_1"`` … ``"A_k"``, ``"B"``).
    role : {"active", "passive"}
        The active party B holds the labels, the intercept and the target's scale.
    objective : {"linear", "logistic"}
        The model.
    weights : ndarray
        One weight per column the party holds.
    mean, scale : ndarray
        The party's standardisation of its columns: ``(x - mean) / scale``.
    columns : list of int
        Where the party's columns are in the job's data set (for a job's simulation).
    intercept : float
        B's intercept (0 for a passive party).
    target_mean, target_scale : float
        A linear model's predictions are ``z · target_scale + target_mean`` (B's).
    classes : list
        A logistic model's two classes; ``classes[1]`` is the positive one (B's).
    """

    party: str
    role: str
    objective: str
    weights: NDArray[np.float64]
    mean: NDArray[np.float64]
    scale: NDArray[np.float64]
    columns: list[int]
    intercept: float = 0.0
    target_mean: float = 0.0
    target_scale: float = 1.0
    classes: list[Any] | None = None

    def partial_score(self, X: ArrayLike) -> NDArray[np.float64]:
        """Return this party's partial scores of the rows ``X`` (its own raw columns)."""
        x = check_array(X, "X", f"party {self.party!r}", ndim=2)
        if x.shape[1] != self.weights.size:
            raise ValidationError(f"party {self.party!r} holds {self.weights.size} columns; "
                                  f"X has {x.shape[1]}")
        out: NDArray[np.float64] = ((x - self.mean) / self.scale) @ self.weights
        return out + self.intercept

    def to_json(self) -> dict[str, Any]:
        """Return the part as plain values (the file's content)."""
        out: dict[str, Any] = {"party": self.party, "role": self.role,
                               "objective": self.objective, "columns": self.columns,
                               "weights": self.weights.tolist(), "mean": self.mean.tolist(),
                               "scale": self.scale.tolist()}
        if self.role == "active":
            out["intercept"] = self.intercept
            if self.objective == "linear":
                out.update(target_mean=self.target_mean, target_scale=self.target_scale)
            else:
                out["classes"] = self.classes
        return out

    def save(self, path: str | Path) -> Path:
        """Write the part to ``path`` as JSON, whole."""
        return write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> ModelPart:
        """Read a part written by :meth:`save` (``party-<name>.json``).

        Raises
        ------
        DataNotFoundError
            If the file does not exist.
        ValidationError
            If it is not a party's part, naming the file and what is wrong.
        """
        file = Path(path)
        if not file.is_file():
            raise DataNotFoundError(f"no model part {file}")
        try:
            doc = json.loads(file.read_text(encoding="utf-8"))
            part = cls(party=str(doc["party"]), role=doc["role"], objective=doc["objective"],
                       weights=np.asarray(doc["weights"], dtype=np.float64),
                       mean=np.asarray(doc["mean"], dtype=np.float64),
                       scale=np.asarray(doc["scale"], dtype=np.float64),
                       columns=[int(c) for c in doc["columns"]],
                       intercept=float(doc.get("intercept", 0.0)),
                       target_mean=float(doc.get("target_mean", 0.0)),
                       target_scale=float(doc.get("target_scale", 1.0)),
                       classes=doc.get("classes"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValidationError(f"{file} is not a vertical model's part ({exc!r})") from None
        n = part.weights.size
        if (part.role not in _ROLES or part.objective not in _OBJECTIVES
                or part.weights.ndim != 1 or part.mean.shape != (n,)
                or part.scale.shape != (n,) or not np.all(part.scale > 0)
                or (part.role == "active" and part.objective == "logistic"
                    and (not isinstance(part.classes, list) or len(part.classes) != 2))):
            raise ValidationError(f"{file} is not a vertical model's part: role, objective, "
                                  "weights, mean and scale (> 0) of one length, and a "
                                  "logistic B's two classes")
        return part


def combine(scores: Sequence[ArrayLike], active: ModelPart) -> NDArray[np.float64]:
    """Add every party's partial scores and finish the prediction, as B does.

    Parameters
    ----------
    scores : sequence of array-like
        Each party's :meth:`ModelPart.partial_score` of the same rows, B's included.
    active : ModelPart
        B's part (the target's scale, or the classes).

    Returns
    -------
    ndarray
        A linear model's predictions in the target's units; a logistic model's
        probabilities of ``active.classes[1]`` (its label where > 0.5).
    """
    if active.role != "active":
        raise ValidationError(f"combine needs the active party's part; got party "
                              f"{active.party!r} ({active.role})")
    parts = [np.asarray(s, dtype=np.float64) for s in scores]
    if not parts or any(p.shape != parts[0].shape or p.ndim != 1 for p in parts):
        raise ValidationError("combine needs one 1-D array of partial scores per party, all "
                              f"of the same rows; got shapes {[p.shape for p in parts]}")
    z = np.sum(parts, axis=0)
    if active.objective == "linear":
        out: NDArray[np.float64] = z * active.target_scale + active.target_mean
        return out
    # a stable sigmoid: exp of a non-positive number only
    e = np.exp(-np.abs(z))
    prob: NDArray[np.float64] = np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return prob
