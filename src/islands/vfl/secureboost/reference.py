"""The plaintext reference: the same boosting on one central matrix, for tests and benchmarks.

:func:`fit_reference` runs :func:`~islands.vfl.secureboost.maths.boost` with histograms
computed in the clear from every party's binned features at once. With the same bins,
settings and seed, the federation (under any encryption) must produce the same trees and
predictions: that is what "lossless" means here (Cheng et al. 2021, Theorem 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.vfl.secureboost.maths import (
    Boosted,
    Hist,
    Ints,
    Objective,
    Params,
    Sampling,
    Split,
    TreeSource,
    apply_bins,
    bin_edges,
    boost,
    histogram,
)
from islands.vfl.secureboost.model import LookupTable, raw_scores

__all__ = ["CentralSource", "Reference", "fit_reference"]


class CentralSource(TreeSource):
    """Every party's binned features in one place (party 0 is the active party)."""

    def __init__(self, X: Sequence[Array], max_bins: int) -> None:
        self.edges = [[bin_edges(x[:, j], max_bins) for j in range(x.shape[1])] for x in X]
        self.buckets = max_bins + 1
        self.codes = [apply_bins(x, e, max_bins) for x, e in zip(X, self.edges, strict=True)]
        self.tables = [LookupTable() for _ in X]
        self.parties = len(X)
        self.features = [x.shape[1] for x in X]

    def begin(self, tree: int, output: int, g: Ints, h: Ints, frac: int,
              sampled: NDArray[np.bool_], columns: Sequence[NDArray[np.bool_]]) -> None:
        """Keep the tree's gradients, sample and columns."""
        self._g, self._h = g.astype(np.float64), h.astype(np.float64)
        self._sampled, self._columns = sampled, columns

    def histograms(self, wanted: Mapping[int, Sequence[int]],
                   node_of: Ints) -> dict[int, dict[int, Hist]]:
        """Histograms in the clear, from the central binned matrices."""
        out: dict[int, dict[int, Hist]] = {}
        for p, nodes in wanted.items():
            out[p] = {}
            for node in nodes:
                rows = np.flatnonzero((node_of == node) & self._sampled)
                hg, hh = histogram(self.codes[p][rows], self._g[rows], self._h[rows],
                                   self.buckets)
                hg[~self._columns[p]] = 0
                hh[~self._columns[p]] = 0
                out[p][node] = (hg, hh)
        return out

    def partition(self, splits: Mapping[int, tuple[int, Split]],
                  node_of: Ints) -> dict[int, tuple[int, NDArray[np.bool_]]]:
        """Split in the clear, recording each split in its owner's table."""
        out = {}
        for node, (p, split) in splits.items():
            rows = np.flatnonzero(node_of == node)
            codes = self.codes[p][rows, split.feature]
            left = codes <= split.bin
            left[codes == self.buckets - 1] = split.missing_left
            out[node] = (self.tables[p].add(split, self.edges[p]), left)
        return out


@dataclass
class Reference:
    """A reference fit: the boosting result and every party's lookup table."""

    boosted: Boosted
    tables: list[LookupTable]
    objective: Objective

    def raw(self, X: Sequence[Array]) -> Array:
        """Scores of new rows, X split by party as in the fit."""
        rows = X[0].shape[0]
        return raw_scores(self.boosted.trees, self.boosted.base, rows,
                          lambda p, r: self.tables[p].goes_left(r, X[p]))


def fit_reference(X: Sequence[Array], y: Array, objective: Objective, params: Params, *,
                  rounds: int, max_bins: int, seed: int, train: NDArray[np.bool_] | None = None,
                  sampling: Sampling | None = None,
                  early_stopping_rounds: int | None = None,
                  allowed: Callable[[int, int, int], bool] | None = None,
                  subtract: bool = True) -> Reference:
    """Fit on the parties' features in one place (X[0] the active party's).

    The arguments are :func:`~islands.vfl.secureboost.maths.boost`'s; ``seed`` seeds its
    generator as the active party's ``seed`` does.
    """
    source = CentralSource(X, max_bins)
    mask = np.ones(y.shape[0], dtype=bool) if train is None else train
    boosted = boost(source, y, objective, params, rounds=rounds, train=mask,
                    sampling=sampling or Sampling(), rng=np.random.default_rng(seed),
                    early_stopping_rounds=early_stopping_rounds, allowed=allowed,
                    subtract=subtract)
    return Reference(boosted, source.tables, objective)
