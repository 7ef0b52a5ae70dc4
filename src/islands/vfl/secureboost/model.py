"""What each party keeps of a SecureBoost model: trees at the active party, lookup tables.

SecureBoost (Cheng et al. 2021, §4, "Federated inference") keeps a split's threshold with
the party that owns the feature: the active party's trees name, at every split, only the
owning party and a record number, and the owner's :class:`LookupTable` maps the record to
(feature, threshold, where missing values go). Predicting a row walks each tree, asking
the owner of each split on its path which way the row goes
(:func:`~islands.vfl.secureboost.protocol.serve_inference`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.vfl.secureboost.maths import Objective, Split, Tree

__all__ = ["LookupTable", "Record", "TreeModel", "raw_scores"]


@dataclass(frozen=True)
class Record:
    """One split a party owns: rows with x[feature] < threshold go left, NaN as told."""

    feature: int
    threshold: float
    missing_left: bool


@dataclass
class LookupTable:
    """A party's split records, numbered in the order they were made."""

    records: list[Record] = field(default_factory=list)

    def add(self, split: Split, edges: Sequence[Array]) -> int:
        """Record ``split`` of this party's binned features; return its number.

        A split after the last cut sends every non-missing value left (threshold +inf).
        """
        cuts = edges[split.feature]
        threshold = float(cuts[split.bin]) if split.bin < cuts.size else math.inf
        self.records.append(Record(split.feature, threshold, split.missing_left))
        return len(self.records) - 1

    def goes_left(self, record: int, X: Array) -> NDArray[np.bool_]:
        """Return which rows of X go left at ``record``."""
        rec = self.records[record]
        column = X[:, rec.feature]
        missing = np.isnan(column)
        with np.errstate(invalid="ignore"):
            left = column < rec.threshold
        left[missing] = rec.missing_left
        return left

    def to_dict(self) -> dict[str, Any]:
        """Return the table JSON-ready: [feature, threshold, missing_left] per record."""
        return {"records": [[r.feature, "inf" if math.isinf(r.threshold) else r.threshold,
                             r.missing_left] for r in self.records]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LookupTable:
        """Inverse of :meth:`to_dict`."""
        return cls([Record(int(f), math.inf if t == "inf" else float(t), bool(m))
                    for f, t, m in data["records"]])


def raw_scores(trees: Sequence[Sequence[Tree]], base: Array, rows: int,
               goes_left: Callable[[int, int], NDArray[np.bool_]]) -> Array:
    """Return the scores of ``rows`` rows: base plus every tree's leaf (rows × outputs)."""
    raw = np.tile(np.asarray(base, dtype=np.float64), (rows, 1))
    for built in trees:
        for k, tree in enumerate(built):
            raw[:, k] += np.asarray(tree.value)[tree.leaves(goes_left, rows)]
    return raw


@dataclass
class TreeModel:
    """The active party's model: the objective, the starting scores and the trees."""

    objective: Objective
    base: Array
    trees: list[list[Tree]]

    def to_dict(self) -> dict[str, Any]:
        """Return the model JSON-ready."""
        return {"objective": self.objective.kind, "classes": self.objective.classes,
                "base": [float(b) for b in self.base],
                "trees": [[t.to_dict() for t in built] for built in self.trees]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TreeModel:
        """Inverse of :meth:`to_dict`."""
        return cls(Objective(data["objective"], int(data["classes"])),
                   np.asarray(data["base"], dtype=np.float64),
                   [[Tree.from_dict(t) for t in built] for built in data["trees"]])
