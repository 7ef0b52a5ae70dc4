"""SecureBoost's mathematics: bins, losses, exact histograms, split gains and tree growth.

Cheng et al., "SecureBoost: A Lossless Federated Learning Framework" (IEEE Intelligent
Systems 36(6), 2021; arXiv:1901.08755), Algorithms 1–2, which follow XGBoost (Chen and
Guestrin, KDD 2016, eqs. 6–7): for a node with gradient and hessian sums G, H and a
candidate split into (G_L, H_L) and (G_R, H_R),

    gain = ½ [G_L²/(H_L + λ) + G_R²/(H_R + λ) − G²/(H + λ)] − γ,
    leaf weight w = −η·G/(H + λ),

a split being allowed only when both children hold a hessian sum of at least
``min_child_weight``. Missing values form their own bin; every candidate is tried with
that bin on the left and on the right and the better direction is kept (XGBoost's
sparsity-aware split finding, Chen and Guestrin, Algorithm 3).

**Exact arithmetic, hence lossless.** Gradients and hessians are quantised once per tree
to integers at 2^-f (:func:`quantise`, f the largest that keeps every possible sum below
2^52 in magnitude), so every histogram sum is an integer held exactly in a float64 and
the same whether a passive party sums ciphertexts or a central reference sums floats, in
any order, with or without histogram subtraction. :func:`grow_tree` is the one tree
builder: the federation's active party runs it with histograms that arrive encrypted
(:mod:`islands.vfl.secureboost.protocol`), :func:`fit_reference` with histograms of one
central matrix, so the federated trees equal the reference's split for split.

Why hand-written rather than XGBoost's or LightGBM's tree builder: neither lets a caller
supply the histograms of some features (computed elsewhere, under encryption) while it
chooses the splits, and neither can keep a split's threshold away from the party that
chooses it (``docs/vfl.md``, "SecureBoost").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array

__all__ = [
    "MAX_BINS",
    "Objective",
    "Params",
    "Split",
    "Tree",
    "apply_bins",
    "best_split",
    "bin_edges",
    "goss_sample",
    "grow_tree",
    "histogram",
    "leaf_weight",
    "quantise",
]

MAX_BINS = 126
"""Most value bins of one feature; with the missing bin at most 127, HEU's int8 bucket index."""

SUM_BITS = 52
"""Every histogram sum of quantised values stays below 2^SUM_BITS in magnitude."""

MIN_HESSIAN = 1e-16  # XGBoost's floor on the logistic and softmax hessians

Kind = Literal["binary", "regression", "multiclass"]
Ints = NDArray[np.int64]


# ---------------------------------------------------------------------------- bins


def bin_edges(x: Array, max_bins: int) -> Array:
    """Return the ascending cut points of one feature (NaN is missing).

    With at most ``max_bins`` distinct values the cuts are the midpoints between
    neighbours, otherwise the distinct interior quantiles at levels k/max_bins. A value v
    falls in bin ``#(cuts ≤ v)``, so bin ≤ b means v < cuts[b].
    """
    values = x[~np.isnan(x)]
    if values.size == 0:
        return np.empty(0)
    distinct = np.unique(values)
    if distinct.size <= max_bins:
        return np.asarray(distinct[:-1] / 2 + distinct[1:] / 2)  # no overflow near the limit
    levels = np.arange(1, max_bins) / max_bins
    cuts = np.unique(np.quantile(values, levels))
    return np.asarray(cuts[cuts > distinct[0]], dtype=np.float64)


def apply_bins(X: Array, edges: Sequence[Array], missing: int) -> NDArray[np.int8]:
    """Return every value's bin (``missing`` for NaN) as a C-ordered int8 matrix."""
    codes = np.empty(X.shape, dtype=np.int8)
    for j, cuts in enumerate(edges):
        column = X[:, j]
        codes[:, j] = np.searchsorted(cuts, column, side="right")
        codes[np.isnan(column), j] = missing
    return codes


# ---------------------------------------------------------------------------- losses


@dataclass(frozen=True)
class Objective:
    """A loss with its gradients.

    ``binary`` (logistic), ``regression`` (squared error) or ``multiclass`` (softmax over
    ``classes`` scores, XGBoost's ``multi:softprob``).
    """

    kind: Kind
    classes: int = 1

    @property
    def outputs(self) -> int:
        """Return the scores per row: one tree per output in every boosting round."""
        return self.classes if self.kind == "multiclass" else 1

    def base_score(self, y: Array) -> Array:
        """Return the starting scores: the positive rate's log-odds, the mean, the log priors."""
        if self.kind == "regression":
            return np.array([float(np.mean(y))])
        if self.kind == "binary":
            rate = min(max(float(np.mean(y)), 1e-6), 1 - 1e-6)
            return np.array([math.log(rate / (1 - rate))])
        prior = np.bincount(y.astype(np.int64), minlength=self.classes) / y.size
        return np.log(np.clip(prior, 1e-6, None))

    def proba(self, raw: Array) -> Array:
        """Return the predictions of scores: P(y = 1), the value, or the softmax per row."""
        if self.kind == "binary":
            return 1 / (1 + np.exp(-raw[:, 0]))
        if self.kind == "regression":
            return raw[:, 0]
        z = raw - raw.max(axis=1, keepdims=True)
        e = np.exp(z)
        return np.asarray(e / e.sum(axis=1, keepdims=True), dtype=np.float64)

    def gradients(self, y: Array, raw: Array) -> tuple[Array, Array]:
        """Return per-row gradients and hessians of the loss, each (rows, outputs)."""
        if self.kind == "regression":
            return raw - y[:, None], np.ones_like(raw)
        if self.kind == "binary":
            p = 1 / (1 + np.exp(-raw))
            return p - y[:, None], np.maximum(p * (1 - p), MIN_HESSIAN)
        p = self.proba(raw)
        onehot = np.zeros_like(p)
        onehot[np.arange(y.size), y.astype(np.int64)] = 1
        return p - onehot, np.maximum(2 * p * (1 - p), MIN_HESSIAN)

    def loss(self, y: Array, raw: Array) -> float:
        """Return the mean log-loss, or mean squared error, of raw scores."""
        if self.kind == "regression":
            return float(np.mean((raw[:, 0] - y) ** 2))
        if self.kind == "binary":
            z = raw[:, 0]
            return float(np.mean(np.logaddexp(0, z) - y * z))
        z = raw - raw.max(axis=1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return float(-np.mean(log_p[np.arange(y.size), y.astype(np.int64)]))


def quantise(g: Array, h: Array) -> tuple[Ints, Ints, int]:
    """Return g and h as integers at 2^-f, and f.

    f is the largest number of fraction bits (at most 52) for which the sum of any subset
    of the rows stays below 2^52 in magnitude, so that histograms are exact in float64 and
    fit :mod:`~islands.vfl.secureboost.packing`'s slots.
    """
    top = max(float(np.max(np.abs(g), initial=0.0)), float(np.max(h, initial=0.0)))
    total = g.size * top
    frac = SUM_BITS if total == 0 else SUM_BITS - 1 - math.frexp(total)[1]
    frac = min(frac, SUM_BITS)
    if frac < 1:
        raise ValueError(f"the gradients are too large to quantise (|g| up to {top:.3g} over "
                         f"{g.size} rows); scale the target")
    scale = math.ldexp(1.0, frac)
    return np.rint(g * scale).astype(np.int64), np.rint(h * scale).astype(np.int64), frac


def goss_sample(g: Array, top_rate: float, other_rate: float,
                rng: np.random.Generator) -> tuple[NDArray[np.int64], Array]:
    """Gradient-based one-side sampling (Ke et al., NeurIPS 2017, Algorithm 2).

    Keeps the ⌈a·n⌉ rows of largest |g| (summed over outputs), draws ⌈b·n⌉ of the rest
    uniformly and weights those by (1 − a)/b. Returns the kept rows (ascending) and their
    weights.
    """
    n = g.shape[0]
    size = np.abs(g).sum(axis=1)
    top = max(1, math.ceil(top_rate * n))
    order = np.argsort(-size, kind="stable")
    rest = order[top:]
    drawn = rng.choice(rest, size=min(rest.size, math.ceil(other_rate * n)), replace=False)
    rows = np.concatenate([order[:top], drawn])
    weight = np.ones(n)
    weight[drawn] = (1 - top_rate) / other_rate
    keep = np.sort(rows)
    return keep, weight[keep]


# ---------------------------------------------------------------------------- histograms


def histogram(codes: NDArray[np.int8], g: Array, h: Array, buckets: int) -> tuple[Array, Array]:
    """Per feature and bin, the sums of g and of h over the rows of ``codes``.

    Returns two (features, buckets) float64 arrays. With quantised inputs every sum is an
    integer below 2^52, so the result is exact whatever the order of addition.
    """
    features = codes.shape[1]
    flat = (codes.astype(np.int64) + np.arange(features) * buckets).ravel()
    size = features * buckets
    hg = np.bincount(flat, weights=np.repeat(g, features), minlength=size).astype(np.float64)
    hh = np.bincount(flat, weights=np.repeat(h, features), minlength=size).astype(np.float64)
    return hg.reshape(features, buckets), hh.reshape(features, buckets)


# ---------------------------------------------------------------------------- splits


@dataclass(frozen=True)
class Params:
    """A tree's regularisation: λ, γ, the minimum child hessian, depth and step η."""

    reg_lambda: float = 1.0
    gamma: float = 0.0
    min_child_weight: float = 1.0
    max_depth: int = 3
    learning_rate: float = 0.3


@dataclass(frozen=True)
class Split:
    """The best split of one party's features for a node.

    ``bin``: rows whose bin is ≤ bin go left; ``missing_left``: where the missing bin goes.
    """

    gain: float
    feature: int
    bin: int
    missing_left: bool


def leaf_weight(G: float, H: float, params: Params) -> float:
    """W = −η·G/(H + λ)."""
    return -params.learning_rate * G / (H + params.reg_lambda)


def best_split(hg: Array, hh: Array, G: float, H: float, params: Params) -> Split | None:
    """Return the split of largest gain over one party's histograms (last column: missing).

    Ties go to the lowest feature, then the lowest bin, then missing to the right; None
    when no split has a positive gain with both children of hessian sum at least
    ``min_child_weight``.
    """
    if hg.shape[0] == 0:
        return None
    lam, mcw = params.reg_lambda, params.min_child_weight
    left_g = np.cumsum(hg[:, :-1], axis=1)
    left_h = np.cumsum(hh[:, :-1], axis=1)
    miss_g, miss_h = hg[:, -1:], hh[:, -1:]
    parent = G * G / (H + lam)
    best: tuple[float, int, int, bool] | None = None
    for missing_left in (False, True):
        gl = left_g + miss_g if missing_left else left_g
        hl = left_h + miss_h if missing_left else left_h
        gr, hr = G - gl, H - hl
        gain = 0.5 * (gl * gl / (hl + lam) + gr * gr / (hr + lam) - parent) - params.gamma
        gain = np.where((hl >= mcw) & (hr >= mcw) & (hl > 0) & (hr > 0), gain, -np.inf)
        at = int(np.argmax(gain))
        value = float(gain.flat[at])
        if value > 0 and (best is None or value > best[0]
                          or (value == best[0] and at < best[1] * gain.shape[1] + best[2])):
            best = (value, at // gain.shape[1], at % gain.shape[1], missing_left)
    return None if best is None else Split(*best)


# ---------------------------------------------------------------------------- trees


@dataclass
class Tree:
    """One tree as the active party holds it: structure and leaf weights, no thresholds.

    Node 0 is the root; ``party[i]`` is the index of the party owning split i (−1 for a
    leaf), ``record[i]`` the key of that split in its owner's lookup table, ``left`` and
    ``right`` the children, ``value`` a leaf's weight (η included), ``gain`` a split's
    gain and ``cover`` the node's hessian sum.
    """

    party: list[int] = field(default_factory=list)
    record: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    gain: list[float] = field(default_factory=list)
    cover: list[float] = field(default_factory=list)

    def add(self, cover: float) -> int:
        """Append a leaf of weight 0 and return its index."""
        for column, item in ((self.party, -1), (self.record, -1), (self.left, -1),
                             (self.right, -1), (self.value, 0.0), (self.gain, 0.0),
                             (self.cover, cover)):
            column.append(item)  # type: ignore[arg-type]
        return len(self.party) - 1

    @property
    def size(self) -> int:
        """Return the number of nodes."""
        return len(self.party)

    def to_dict(self) -> dict[str, list[int] | list[float]]:
        """Return the tree as JSON-ready lists."""
        return {"party": self.party, "record": self.record, "left": self.left,
                "right": self.right, "value": self.value, "gain": self.gain,
                "cover": self.cover}

    @classmethod
    def from_dict(cls, data: Mapping[str, Sequence[float]]) -> Tree:
        """Inverse of :meth:`to_dict`."""
        ints = {k: [int(v) for v in data[k]] for k in ("party", "record", "left", "right")}
        floats = {k: [float(v) for v in data[k]] for k in ("value", "gain", "cover")}
        return cls(**ints, **floats)  # type: ignore[arg-type]

    def leaves(self, goes_left: Callable[[int, int], NDArray[np.bool_]], rows: int) -> Ints:
        """Return the leaf of each row; ``goes_left(party, record)`` answers a split."""
        node = np.zeros(rows, dtype=np.int64)
        for i in range(self.size):  # parents come before children
            if self.party[i] < 0:
                continue
            here = node == i
            if not here.any():
                continue
            left = goes_left(self.party[i], self.record[i])
            node[here & left] = self.left[i]
            node[here & ~left] = self.right[i]
        return node


Hist = tuple[Array, Array]
"""One party's histograms of one node: (hg, hh), feature × bucket arrays (last: missing)."""


class TreeSource:
    """How :func:`grow_tree` learns about the parties' features.

    Parties are numbered 0 (the active party) to ``parties − 1``. The federation's active
    party answers from its own features and the passive parties' decrypted histograms;
    :func:`fit_reference` from one central matrix.
    """

    parties: int = 1
    features: Sequence[int] = (0,)

    def begin(self, tree: int, output: int, g: Ints, h: Ints, frac: int,
              sampled: NDArray[np.bool_], columns: Sequence[NDArray[np.bool_]]) -> None:
        """Start a tree: the quantised gradients, the sample and each party's columns."""

    def histograms(self, wanted: Mapping[int, Sequence[int]],
                   node_of: Ints) -> dict[int, dict[int, Hist]]:
        """Return each party's histograms of the nodes it is asked for.

        The rows of a node are those where node_of == node; the result is party → node
        → (hg, hh).

        ``wanted`` names every party allowed at this level, with no nodes when all of its
        histograms follow by subtraction; the others sit the level out.
        """
        raise NotImplementedError

    def partition(self, splits: Mapping[int, tuple[int, Split]],
                  node_of: Ints) -> dict[int, tuple[int, NDArray[np.bool_]]]:
        """Apply the chosen splits, node → (party, split).

        Returns node → (the owner's record, goes-left of each of the node's rows in
        ascending row order).
        """
        raise NotImplementedError


def grow_tree(source: TreeSource, g: Ints, h: Ints, frac: int, sampled: NDArray[np.bool_],
              params: Params, *, allowed: Callable[[int, int], bool] | None = None,
              subtract: bool = True) -> tuple[Tree, Ints]:
    """Grow one tree level by level (SecureBoost Algorithm 2 on binned features).

    Histograms are asked only for the smaller child of each split (by sampled rows); the
    larger is its parent's minus the smaller's (SecureBoost+, Chen et al. 2021, §3.2),
    exact because every sum is an integer below 2^52.

    Parameters
    ----------
    source
        Histograms and partitions of every party.
    g, h
        Quantised gradients and hessians (:func:`quantise`) of every row, zero outside
        the sample.
    frac
        Their fraction bits.
    sampled
        Which rows count in the histograms (row subsampling or GOSS).
    params
        Regularisation, depth and step.
    allowed
        ``allowed(party, depth)``: whether that party's features may split nodes at that
        depth (the hardened modes; a party not allowed is asked nothing); None allows all.
    subtract
        Histogram subtraction; False asks every node's histograms.

    Returns
    -------
    tree, leaf
        The tree and the leaf every row (sampled or not) ends in.
    """
    unit = math.ldexp(1.0, -frac)
    rows = g.shape[0]
    tree = Tree()
    node_of = np.zeros(rows, dtype=np.int64)
    tree.add(float(h[sampled].sum()) * unit)
    level = [0]
    derive: dict[int, tuple[int, int]] = {}  # larger child → (parent, smaller child)
    previous: dict[int, dict[int, Hist]] = {}
    for depth in range(params.max_depth):
        parties = [p for p in range(source.parties) if allowed is None or allowed(p, depth)]
        wanted: dict[int, list[int]] = {p: [] for p in parties}
        for node in level:
            for p in parties:
                link = derive.get(node)
                if link is None or p not in previous[link[0]]:
                    wanted[p].append(node)
        got = source.histograms(wanted, node_of)
        hist: dict[int, dict[int, Hist]] = {node: {} for node in level}
        for p in parties:
            for node in level:
                if node in got.get(p, {}):
                    hist[node][p] = got[p][node]
        for node, (parent, small) in derive.items():
            for p in parties:
                if p not in hist[node]:
                    (pg, ph), (sg, sh) = previous[parent][p], hist[small][p]
                    hist[node][p] = (pg - sg, ph - sh)
        splits: dict[int, tuple[int, Split]] = {}
        for node in level:
            here = (node_of == node) & sampled
            Gn, Hn = float(g[here].sum()) * unit, float(h[here].sum()) * unit
            best: tuple[int, Split] | None = None
            for p in parties:
                hg, hh = hist[node][p]
                split = best_split(hg * unit, hh * unit, Gn, Hn, params)
                if split is not None and (best is None or split.gain > best[1].gain):
                    best = (p, split)
            if best is not None:
                splits[node] = best
        if not splits:
            break
        answers = source.partition(splits, node_of)
        children: list[int] = []
        derive = {}
        for node in level:
            if node not in splits:
                continue
            party, split = splits[node]
            record, goes_left = answers[node]
            here = np.flatnonzero(node_of == node)
            if goes_left.shape != here.shape:
                raise ValueError(f"the partition of node {node} has {goes_left.size} rows; "
                                 f"the node holds {here.size}")
            side = {}
            for name, chosen in (("left", here[goes_left]), ("right", here[~goes_left])):
                kept = chosen[sampled[chosen]]
                side[name] = (tree.add(float(h[kept].sum()) * unit), kept.size)
                node_of[chosen] = side[name][0]
            (left, n_left), (right, n_right) = side["left"], side["right"]
            tree.party[node], tree.record[node] = party, record
            tree.left[node], tree.right[node], tree.gain[node] = left, right, split.gain
            children += [left, right]
            small, large = (left, right) if n_left <= n_right else (right, left)
            if subtract:
                derive[large] = (node, small)
        previous = hist
        level = children
    for node in range(tree.size):
        if tree.party[node] < 0:
            here = (node_of == node) & sampled
            tree.value[node] = leaf_weight(float(g[here].sum()) * unit,
                                           float(h[here].sum()) * unit, params)
    return tree, node_of


@dataclass(frozen=True)
class Sampling:
    """Row and column subsampling, per tree.

    ``subsample`` of the rows (without replacement) or GOSS with ``goss = (a, b)``, and
    ``colsample`` of each party's features.
    """

    subsample: float = 1.0
    colsample: float = 1.0
    goss: tuple[float, float] | None = None


@dataclass
class Boosted:
    """What :func:`boost` returns.

    Attributes
    ----------
    trees
        ``trees[r][k]``: round r's tree for output k.
    base
        The starting score of each output.
    train_loss, valid_loss
        The mean loss after each round (``valid_loss`` empty without validation rows).
    best_round
        Rounds kept (early stopping keeps those up to the best validation loss).
    raw
        The final scores of every row (rows × outputs).
    """

    trees: list[list[Tree]]
    base: Array
    train_loss: list[float]
    valid_loss: list[float]
    best_round: int
    raw: Array


def _columns(count: int, rate: float, rng: np.random.Generator) -> NDArray[np.bool_]:
    mask = np.ones(count, dtype=bool)
    if rate < 1 and count > 0:
        mask[:] = False
        mask[rng.choice(count, size=max(1, math.ceil(rate * count)), replace=False)] = True
    return mask


def _for_tree(allowed: Callable[[int, int, int], bool] | None,
              tree: int) -> Callable[[int, int], bool] | None:
    if allowed is None:
        return None
    return lambda party, depth: allowed(tree, party, depth)


def boost(source: TreeSource, y: Array, objective: Objective, params: Params, *,
          rounds: int, train: NDArray[np.bool_], sampling: Sampling = Sampling(),
          rng: np.random.Generator, early_stopping_rounds: int | None = None,
          allowed: Callable[[int, int, int], bool] | None = None, subtract: bool = True,
          on_round: Callable[[int, Boosted], None] | None = None) -> Boosted:
    """Boost ``rounds`` rounds of trees over ``source`` (XGBoost's second-order boosting).

    Parameters
    ----------
    y
        Labels of every row (0/1, values, or class codes); only training rows are used
        for gradients.
    train
        Which rows train; the others are validation rows, scored after every round.
    rng
        Draws the row sample and the columns of every tree (the active party's).
    early_stopping_rounds
        Stop once the validation loss has not improved for this many rounds and keep
        the rounds up to its best (needs validation rows).
    allowed
        ``allowed(tree, party, depth)`` for the hardened modes (:func:`grow_tree`).
    subtract
        Histogram subtraction (:func:`grow_tree`).
    on_round
        Called after each round with its number and the state so far (progress).
    """
    rows = y.shape[0]
    base = objective.base_score(y[train])
    raw = np.tile(base, (rows, 1))
    out = Boosted([], base, [], [], 0, raw)
    best, since = math.inf, 0
    valid = ~train
    best_raw = raw
    for r in range(rounds):
        g_all, h_all = objective.gradients(y, raw)
        if sampling.goss is not None:
            kept, weight = goss_sample(g_all[train], *sampling.goss, rng)
            sample = np.flatnonzero(train)[kept]
        elif sampling.subsample < 1:
            pool = np.flatnonzero(train)
            sample = np.sort(rng.choice(pool, size=max(1, math.ceil(sampling.subsample
                                                                      * pool.size)),
                                        replace=False))
            weight = np.ones(sample.size)
        else:
            sample, weight = np.flatnonzero(train), np.ones(int(train.sum()))
        sampled = np.zeros(rows, dtype=bool)
        sampled[sample] = True
        built: list[Tree] = []
        for k in range(objective.outputs):
            g, h = np.zeros(rows), np.zeros(rows)
            g[sample], h[sample] = g_all[sample, k] * weight, h_all[sample, k] * weight
            gi, hi, frac = quantise(g, h)
            columns = [_columns(f, sampling.colsample, rng) for f in source.features]
            index = r * objective.outputs + k
            source.begin(index, k, gi, hi, frac, sampled, columns)
            tree, leaf = grow_tree(source, gi, hi, frac, sampled, params,
                                   allowed=_for_tree(allowed, index), subtract=subtract)
            raw[:, k] += np.asarray(tree.value)[leaf]
            built.append(tree)
        out.trees.append(built)
        out.train_loss.append(objective.loss(y[train], raw[train]))
        if valid.any():
            loss = objective.loss(y[valid], raw[valid])
            out.valid_loss.append(loss)
            if loss < best:
                best, since, out.best_round = loss, 0, r + 1
                best_raw = raw.copy()
            else:
                since += 1
        else:
            out.best_round = r + 1
        if on_round is not None:
            on_round(r, out)
        if early_stopping_rounds is not None and valid.any() and since >= early_stopping_rounds:
            break
    if out.best_round < len(out.trees):
        del out.trees[out.best_round:]
        out.raw = best_raw
    return out
