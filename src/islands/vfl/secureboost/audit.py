"""What a passive SecureBoost party learns about the labels, measured on its transcript.

SecureBoost (Cheng et al. 2021, arXiv:1901.08755) encrypts the gradients, but every
passive party is told, level by level, the node of every row (:class:`~islands.vfl.
secureboost.protocol.Level`): the *instance spaces*. It also knows where its own splits
send its rows (:class:`~islands.vfl.secureboost.protocol.Splits`, applied to its own
features). That is a partition of the rows that the active party chose to separate the
gradients, and in the first tree the gradients are the labels: every row starts from the
same base score p0, so with logistic loss g_i = p0 − y_i takes two values, and the best
splits put rows of the same label together (FATE issue #1171; Takahashi et al., "Eliminating
Label Leakage in Tree-based Vertical Federated Learning", arXiv:2307.10318, who call it
ID2Graph). Later trees separate residuals, which still follow the labels.

The attacks here read only what the passive party received in a real run, decoded from
the transcript (:func:`passive_view`): the sampled rows of each tree, every ``Level``'s
node of every row, its own ``Splits``, and its own features. They never read a
``TreeStart``'s gradients: under encryption those are ciphertexts. The audit runs the
protocol with ``he="none"`` for speed; the ``Level`` and ``Splits`` messages are the same
under Okamoto–Uchiyama, because the active party chooses the same splits from the same
exact integer sums (lossless; ``tests/test_vfl_secureboost_audit.py`` checks it).

Attacks (each a pure function; the data are used only to score them):

* :func:`co_membership_scores`, with a few known labels (the attacker is assumed to know
  the labels of a small random share of the rows: its own customers whose outcome it
  learnt another way). Each tree names each of its parts by the part's known labels;
  a row scores the mean over the trees seen, a vote of the known rows weighted by how
  often they share a part with it. :func:`label_by_rate` turns scores into labels.
* :func:`name_by_prior`, with no known label: the attacker knows only the positive rate
  (a public statistic) and names as positive the parts of the first split it sees
  whose sizes add up closest to it. :func:`best_naming_accuracy` is the upper bound of
  any naming of those parts (a genie names each part by its true majority).

The hardened settings, ``active_first_trees`` (FATE's complete secure tree),
``active_top_levels`` and ``mix`` (FATE's mix mode: each tree from one party's
features), are audited the same way, with the model's test AUC for their accuracy cost.
A tree kept from the passive party shows it nothing; top levels kept from it still show
their partition in the next level's nodes; under ``mix`` it is shown only its own trees,
whose partitions follow its own features.

References
----------
.. [1] K. Cheng, T. Fan, Y. Jin, Y. Liu, T. Chen, D. Papadopoulos and Q. Yang,
   "SecureBoost: A Lossless Federated Learning Framework", IEEE Intelligent Systems
   36(6), 2021; arXiv:1901.08755.
.. [2] Takahashi, Liu and Liu, "Eliminating Label Leakage in Tree-based
   Vertical Federated Learning", arXiv:2307.10318, 2023.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import rankdata

from islands.arrays import Array
from islands.data import load_fashion_mnist, load_sklearn, split_image_views
from islands.errors import ValidationError, invalid_parameter
from islands.progress import ProgressOption, check_progress, task
from islands.runtime import Record, run_local
from islands.validation import check_float, check_int
from islands.vfl.secureboost import protocol
from islands.vfl.secureboost.config import BoostConfig
from islands.vfl.secureboost.maths import apply_bins, bin_edges
from islands.vfl.secureboost.model import raw_scores

__all__ = [
    "DATASETS",
    "AttackPoint",
    "AuditData",
    "PassiveView",
    "SecureBoostAuditReport",
    "SettingReport",
    "TreeView",
    "auc",
    "audit_data",
    "audit_secureboost",
    "best_naming_accuracy",
    "co_membership_scores",
    "finest_partition",
    "first_split_partition",
    "label_by_rate",
    "name_by_prior",
    "passive_view",
]

DATASETS = ("breast_cancer", "synthetic", "fashion_mnist")
OWNER = "audit_secureboost"
PASSIVE, ACTIVE = "A", "B"
_EXHAUSTIVE = 16  # name_by_prior tries every subset of at most this many parts


# ---------------------------------------------------------------------------- the view


@dataclass(frozen=True)
class TreeView:
    """What a passive party received about one tree.

    Attributes
    ----------
    index
        The tree's number (from 0).
    sampled
        The rows of the tree's sample it was told (empty when it sits the tree out).
    levels
        (depth, node of every row) of every ``Level`` that came with rows.
    hidden_levels
        Depths of the ``Level`` messages that came without rows.
    splits
        (depth, node, feature, bin, missing left) of its own splits.
    """

    index: int
    sampled: NDArray[np.int64]
    levels: tuple[tuple[int, NDArray[np.int64]], ...]
    hidden_levels: tuple[int, ...]
    splits: tuple[tuple[int, int, int, int, bool], ...]

    @property
    def shown(self) -> bool:
        """Whether the party received any node of this tree."""
        return bool(self.levels)


@dataclass(frozen=True)
class PassiveView:
    """Everything of a run's training that one passive party received, tree by tree."""

    party: str
    rows: int
    trees: tuple[TreeView, ...]


def passive_view(received: Sequence[Record], party: str, rows: int) -> PassiveView:
    """Decode what ``party`` received (``transcript.received_by(party)``) into trees.

    Reads the ``TreeStart`` (sampled rows only, never the gradients), ``Level`` and
    ``Splits`` messages on tag ``boost``, in order.

    Raises
    ------
    ValidationError
        If the records hold no tree (a run without ``keep_payloads``, another party) or
        a level of another row count.
    """
    trees: list[TreeView] = []
    current: dict[str, Any] | None = None
    depth = -1

    def close() -> None:
        if current is not None:
            trees.append(TreeView(current["index"], current["sampled"],
                                  tuple(current["levels"]), tuple(current["hidden"]),
                                  tuple(current["splits"])))

    for record in received:
        if record.tag != "boost":
            continue
        msg = record.payload
        if isinstance(msg, protocol.TreeStart):
            close()
            current = {"index": msg.tree, "sampled": np.asarray(msg.rows, dtype=np.int64),
                       "levels": [], "hidden": [], "splits": []}
        elif isinstance(msg, protocol.Level) and current is not None:
            depth = msg.depth
            if msg.node_of.size == 0:
                current["hidden"].append(depth)
            elif msg.node_of.size != rows:
                raise ValidationError(f"party {party!r} received a level of "
                                      f"{msg.node_of.size} rows; it holds {rows}")
            else:
                current["levels"].append((depth, np.asarray(msg.node_of, dtype=np.int64)))
        elif isinstance(msg, protocol.Splits) and current is not None:
            current["splits"] += [(depth, *item) for item in msg.items]
    close()
    if not trees:
        raise ValidationError(f"the records hold no tree sent to party {party!r}; run the "
                              "protocol with keep_payloads=True and pass what a passive "
                              "party received")
    return PassiveView(party, rows, tuple(trees))


def finest_partition(tree: TreeView, codes: NDArray[np.int8],
                     missing: int) -> NDArray[np.int64] | None:
    """Return the finest partition of the rows the party knows for ``tree`` (None: none).

    The last ``Level`` it received gives every row's node; its own splits at that level
    (which it made on its own binned features ``codes``, ``missing`` the missing bin)
    divide those nodes further. Part numbers are ``2·node`` and ``2·node + 1``.
    """
    if not tree.shown:
        return None
    depth, node_of = tree.levels[-1]
    parts = 2 * node_of
    for d, node, feature, b, missing_left in tree.splits:
        if d != depth:
            continue
        here = node_of == node
        column = codes[:, feature]
        left = np.where(column == missing, missing_left, column <= b)
        parts[here & ~left] += 1
    return np.asarray(parts, dtype=np.int64)


def first_split_partition(view: PassiveView) -> tuple[int, NDArray[np.int64]] | None:
    """Return (tree, nodes) of the first level the party saw with more than one node."""
    for tree in view.trees:
        for _, node_of in tree.levels:
            if np.unique(node_of).size > 1:
                return tree.index, node_of
    return None


# ---------------------------------------------------------------------------- attacks


def co_membership_scores(partitions: Sequence[NDArray[np.int64] | None],
                         known: NDArray[np.bool_], y: Array, *, prior: float,
                         smoothing: float = 1.0) -> Array:
    """Score every row by the known labels of the rows it shares parts with, tree by tree.

    Each tree t the party saw names each part P of its partition by the smoothed positive
    rate of the part's known rows, q_t(P) = (Σ_{j ∈ P known} y_j + α·π) / (#(P known) + α);
    a row's score after T trees is the mean over the m_T trees t ≤ T the party saw,

        p̂_T(i) = (1/m_T) Σ_t q_t(part_t(i)).

    That is a vote of the known rows j weighted by the row similarity
    Σ_t s_t(i, j) / (#(part_t(i) known) + α), s_t(i, j) = 1 when i and j share a part of
    tree t: rows that share parts in many trees are alike, and every tree counts once (a
    large part with many known rows weighs no more than a small one). With nothing seen
    every row scores π. O(rows) per tree.

    Parameters
    ----------
    partitions
        One partition per tree (part number of every row), None for a tree the party
        saw nothing of.
    known
        Which rows' labels the attacker knows.
    y
        Labels 0/1; only ``y[known]`` is read.
    prior
        π, the positive rate the part rates shrink towards.
    smoothing
        α > 0.

    Returns
    -------
    scores
        (trees × rows): row T − 1 holds p̂_T.
    """
    rows = known.shape[0]
    total, seen = np.zeros(rows), 0
    out = np.empty((len(partitions), rows))
    labels = np.where(known, y, 0.0)
    for t, parts in enumerate(partitions):
        if parts is not None:
            _, inverse = np.unique(parts, return_inverse=True)
            positives = np.bincount(inverse, weights=labels)
            counted = np.bincount(inverse, weights=known.astype(np.float64))
            total += ((positives + smoothing * prior) / (counted + smoothing))[inverse]
            seen += 1
        out[t] = total / seen if seen else prior
    return out


def label_by_rate(scores: Array, positive_rate: float) -> NDArray[np.int64]:
    """Label 1 the best-scoring rows, whole ties at a time, as many as come nearest π·n.

    The attacker knows the positive rate π (the same assumption as :func:`name_by_prior`)
    and names that share of its best-scoring rows positive: later trees shift every
    score alike (their parts follow residuals, not labels) without changing the order,
    which a fixed threshold of ½ would mistake for a change of class. Rows of equal score
    get the same label; constant scores (nothing seen) give every row the majority class.
    """
    values, counts = np.unique(scores, return_counts=True)
    top = np.concatenate([[0], np.cumsum(counts[::-1])])  # rows at or above each cut
    k = int(np.argmin(np.abs(top - positive_rate * scores.size)))
    if k == 0:
        return np.zeros(scores.size, dtype=np.int64)
    return np.asarray(scores >= values[::-1][k - 1], dtype=np.int64)


def name_by_prior(parts: NDArray[np.int64], positive_rate: float) -> NDArray[np.int64]:
    """Label rows with no known label: the parts whose sizes add up closest to π·n are 1.

    Exhaustive over the proper, non-empty subsets of at most 16 parts (for two parts:
    the one whose size is nearer π·n is positive); with more parts, the largest parts
    first while the total gets closer. Ties go to the first subset tried.
    """
    names, inverse, sizes = np.unique(parts, return_inverse=True, return_counts=True)
    target = positive_rate * parts.size
    chosen: tuple[int, ...] = ()
    if names.size <= _EXHAUSTIVE:
        best = math.inf
        for k in range(1, names.size):
            for subset in itertools.combinations(range(names.size), k):
                gap = abs(float(sizes[list(subset)].sum()) - target)
                if gap < best:
                    best, chosen = gap, subset
    else:
        total = 0.0
        for i in np.argsort(-sizes, kind="stable"):
            if abs(total + sizes[i] - target) < abs(total - target):
                total += float(sizes[i])
                chosen += (int(i),)
    positive = np.zeros(names.size, dtype=np.int64)
    positive[list(chosen)] = 1
    return np.asarray(positive[inverse], dtype=np.int64)


def best_naming_accuracy(parts: NDArray[np.int64], y: Array) -> float:
    """Return the accuracy of naming each part by its true majority: no naming does better."""
    _, inverse = np.unique(parts, return_inverse=True)
    positives = np.bincount(inverse, weights=y)
    sizes = np.bincount(inverse)
    return float(np.maximum(positives, sizes - positives).sum() / parts.size)


def auc(scores: Array, y: Array) -> float:
    """Return the area under the ROC curve (Mann–Whitney, ties counted half); 0.5 if one class."""
    positive = y == 1
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return 0.5
    ranks = rankdata(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _own_features_baseline(x: Array, known: NDArray[np.bool_], y: Array,
                           attacked: NDArray[np.bool_]) -> tuple[float, float]:
    """Accuracy and AUC of a logistic regression on the party's own features, known labels."""
    from sklearn.linear_model import LogisticRegression

    z = np.nan_to_num(x)
    spread = z.std(axis=0)
    z = (z - z.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    if np.unique(y[known]).size < 2:
        guess = np.full(int(attacked.sum()), float(y[known][0]))
        return float(np.mean(guess == y[attacked])), 0.5
    model = LogisticRegression(max_iter=1000).fit(z[known], y[known])
    p = model.predict_proba(z[attacked])[:, 1]
    return float(np.mean((p >= 0.5) == y[attacked])), auc(p, y[attacked])


# ---------------------------------------------------------------------------- data


@dataclass(frozen=True)
class AuditData:
    """A binary task split between a passive party (features only) and the active party."""

    name: str
    passive: Array
    active: Array
    y: NDArray[np.int64]
    description: str


def audit_data(name: str, *, n_samples: int = 5000, seed: int = 0) -> AuditData:
    """Return the ``name`` task: ``breast_cancer``, ``synthetic`` or ``fashion_mnist``.

    ``breast_cancer``: 569 rows; the passive party holds the first 15 columns, the
    active party the last 15 and the diagnosis (1 = benign). ``synthetic``: ``n_samples``
    rows of 10 + 10 Gaussian features, the label a noisy threshold of a linear function
    of all 20 plus a sine of one. ``fashion_mnist``: the first ``n_samples`` training
    images, the passive party holding the left half of each and the active party the
    right half, labelled 1 for upper-body garments (T-shirt/top, pullover, coat, shirt).
    """
    if name == "breast_cancer":
        ds = load_sklearn("breast_cancer")
        return AuditData(name, ds.X[:, :15], ds.X[:, 15:], ds.y.astype(np.int64),
                         "breast cancer, 569 rows; passive party: columns 1-15, active "
                         "party: columns 16-30 and the diagnosis")
    n = check_int(n_samples, "n_samples", OWNER, low=20)
    if name == "synthetic":
        rng = np.random.default_rng([seed, 7])
        x = rng.normal(size=(n, 20))
        z = x @ rng.normal(size=20) + 0.5 * np.sin(3 * x[:, 0])
        y = (z + 0.3 * rng.normal(size=n) > 0).astype(np.int64)
        return AuditData(name, x[:, :10], x[:, 10:], y,
                         f"synthetic, {n} rows, 10 + 10 Gaussian features")
    if name == "fashion_mnist":
        ds = load_fashion_mnist(split="train", n_samples=n)
        assert ds.image_shape is not None
        left, right = split_image_views(ds.X, ds.image_shape)
        y = np.isin(ds.y, (0, 2, 4, 6)).astype(np.int64)
        return AuditData(name, left, right, y,
                         f"Fashion-MNIST, {n} rows; passive party: left half of each "
                         "image, active party: right half; 1 = upper-body garment")
    raise invalid_parameter("name", "audit_data", f"one of {DATASETS}", name)


# ---------------------------------------------------------------------------- the audit


@dataclass(frozen=True)
class AttackPoint:
    """The known-labels attack after the passive party saw ``trees`` trees."""

    trees: int
    accuracy: float
    auc: float


@dataclass(frozen=True)
class SettingReport:
    """One setting of the protocol: what its passive party infers, what the model scores.

    Attributes
    ----------
    name
        ``"faithful"``, ``"first tree active-only"``, ...
    active_first_trees, active_top_levels, mix
        The hardening.
    curve
        :func:`co_membership_scores` on the rows whose label the attacker does not know,
        after 1, 2, 5, ... trees.
    zero_knowledge_accuracy
        :func:`name_by_prior` on :func:`first_split_partition` (None: no split seen).
    naming_upper_bound
        :func:`best_naming_accuracy` of the same partition.
    zero_knowledge_tree
        The tree that partition came from (from 0).
    trees_hidden
        Trees the passive party received no node of.
    levels_hidden
        ``Level`` messages it received without rows, over all trees.
    hidden_as_planned
        Every tree and level the settings keep from the passive party came without rows,
        and every other with them.
    test_auc, test_accuracy
        The model on the held-out rows.
    """

    name: str
    active_first_trees: int
    active_top_levels: int
    mix: bool
    curve: tuple[AttackPoint, ...]
    zero_knowledge_accuracy: float | None
    naming_upper_bound: float | None
    zero_knowledge_tree: int | None
    trees_hidden: int
    levels_hidden: int
    hidden_as_planned: bool
    test_auc: float
    test_accuracy: float


@dataclass(frozen=True)
class SecureBoostAuditReport:
    """Label leakage to a passive SecureBoost party, per setting, with the baselines.

    Attributes
    ----------
    dataset
        What the data are.
    train_rows, test_rows
        Rows the federation trains on (all attacked but the known ones) and holds out.
    known_labels, known_fraction
        Training rows whose label the attacker is assumed to know.
    positive_rate
        π among the training rows (what :func:`name_by_prior` assumes known).
    prior_accuracy
        Baseline: predicting the majority class on the attacked rows (AUC 0.5).
    own_features_accuracy, own_features_auc
        Baseline: a logistic regression on the passive party's own features, trained on
        the known labels: what it infers without the protocol.
    n_estimators, max_depth, seed
        The run.
    settings
        One report per setting, the faithful protocol first.
    """

    dataset: str
    train_rows: int
    test_rows: int
    known_labels: int
    known_fraction: float
    positive_rate: float
    prior_accuracy: float
    own_features_accuracy: float
    own_features_auc: float
    n_estimators: int
    max_depth: int
    seed: int
    settings: tuple[SettingReport, ...]

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready values."""
        return asdict(self)


def _checkpoints(trees: int) -> list[int]:
    marks = [t for t in (1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
             if t < trees]
    return [*marks, trees]


def _hidden_as_planned(view: PassiveView, config: BoostConfig) -> bool:
    for tree in view.trees:
        shown = {d for d, _ in tree.levels}
        for d in (*shown, *tree.hidden_levels):
            if (d in shown) != config.allowed(tree.index, 1, d):
                return False
        if tree.sampled.size and not any(config.allowed(tree.index, 1, d)
                                         for d in range(config.max_depth)):
            return False
    return True


def _run(passive_x: Array, active_x: Array, y: Array,
         config: BoostConfig) -> tuple[protocol.ActiveOutcome, protocol.PassiveOutcome,
                                       list[Record]]:
    roles = {ACTIVE: lambda p: protocol.active(p, active_x, y, passive=[PASSIVE],
                                               config=config),
             PASSIVE: lambda p: protocol.passive(p, passive_x, active=ACTIVE, config=config)}
    run = run_local(roles, keep_payloads=True, blas_threads=None)
    return run.results[ACTIVE], run.results[PASSIVE], run.transcript.received_by(PASSIVE)


def _scores(act: protocol.ActiveOutcome, pas: protocol.PassiveOutcome, active_x: Array,
            passive_x: Array) -> Array:
    """Return the model's raw scores of new rows (each party's table answers its splits)."""
    def goes_left(p: int, record: int) -> NDArray[np.bool_]:
        return (act.table.goes_left(record, active_x) if p == 0
                else pas.table.goes_left(record, passive_x))

    raw: Array = raw_scores(act.model.trees, act.model.base, active_x.shape[0], goes_left)
    return raw[:, 0]


def _setting_name(first: int, top: int, mix: bool = False) -> str:
    names = ["trees by party (mix)"] if mix else []
    if first:
        names.append(f"first {'tree' if first == 1 else f'{first} trees'} active-only")
    if top:
        names.append(f"top {'level' if top == 1 else f'{top} levels'} active-only")
    return " + ".join(names) or "faithful"


def audit_secureboost(
    passive_x: ArrayLike, active_x: ArrayLike, y: ArrayLike, *, n_estimators: int = 50,
    max_depth: int = 3, known_fraction: float = 0.02, top_levels: int = 1,
    test_fraction: float = 0.3, seed: int = 0, dataset: str = "custom",
    progress: ProgressOption = None,
) -> SecureBoostAuditReport:
    """Train SecureBoost five ways and attack the labels from the passive party's view.

    The settings are the faithful protocol, ``active_first_trees=1`` (FATE's complete
    secure tree), ``active_top_levels=top_levels``, both, and ``mix`` (each tree from
    one party's features, FATE's mix mode). Each runs the real roles
    (``he="none"``: the same ``Level`` and ``Splits`` as under encryption) on the same
    training rows; the passive party's received messages are decoded
    (:func:`passive_view`) and attacked, and the model is scored on the held-out rows.

    Parameters
    ----------
    passive_x, active_x
        The passive and the active party's features of the same rows.
    y
        Labels 0/1 (the active party's).
    n_estimators, max_depth
        The boosting (other settings are :class:`BoostConfig`'s defaults).
    known_fraction
        Share of the training rows whose labels the attacker knows, in (0, 0.5].
    top_levels
        ``active_top_levels`` of the hardened settings, in [1, max_depth].
    test_fraction
        Share of the rows held out to score the model, in (0, 0.5].
    seed
        Seeds the split, the known rows and the boosting.
    progress
        One step per setting.

    Raises
    ------
    ValidationError
        Naming the parameter: labels not 0/1 of both classes, mismatched rows, a setting
        out of range.
    """
    owner = OWNER
    progress = check_progress(progress, owner)
    xp = protocol.check_features(passive_x, "passive_x", owner)
    xa = protocol.check_features(active_x, "active_x", owner)
    labels = np.asarray(y)
    if labels.ndim != 1 or labels.shape[0] != xp.shape[0] or xa.shape[0] != xp.shape[0]:
        raise ValidationError(f"passive_x, active_x and y must have the same rows; got "
                              f"{xp.shape[0]}, {xa.shape[0]} and {labels.shape}")
    if not np.isin(labels, (0, 1)).all() or np.unique(labels).size != 2:
        raise invalid_parameter("y", owner, "labels 0 and 1, both present",
                                f"values {np.unique(labels)[:5].tolist()}")
    n_estimators = check_int(n_estimators, "n_estimators", owner, low=1, high=10000)
    max_depth = check_int(max_depth, "max_depth", owner, low=1, high=16)
    top_levels = check_int(top_levels, "top_levels", owner, low=1, high=max_depth)
    seed = check_int(seed, "seed", owner, low=0)
    known_fraction = check_float(known_fraction, "known_fraction", owner, low=0,
                                 low_inclusive=False)
    if known_fraction > 0.5:
        raise invalid_parameter("known_fraction", owner, "a float in (0, 0.5]", known_fraction)
    test_fraction = check_float(test_fraction, "test_fraction", owner, low=0,
                                low_inclusive=False)
    if test_fraction > 0.5:
        raise invalid_parameter("test_fraction", owner, "a float in (0, 0.5]", test_fraction)

    rng = np.random.default_rng(seed)
    order = rng.permutation(labels.size)
    n_test = max(1, round(test_fraction * labels.size))
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
    y_train = labels[train].astype(np.float64)
    rows = train.size
    known = np.zeros(rows, dtype=bool)
    known[rng.choice(rows, size=max(1, math.ceil(known_fraction * rows)), replace=False)] = True
    attacked = ~known
    prior = float(y_train.mean())
    majority = float(prior >= 0.5)
    prior_accuracy = float(np.mean(y_train[attacked] == majority))
    own_acc, own_auc = _own_features_baseline(xp[train], known, y_train, attacked)

    base = BoostConfig.build(owner, objective="binary", he="none", n_estimators=n_estimators,
                             max_depth=max_depth, seed=seed)
    edges = [bin_edges(xp[train][:, j], base.max_bins) for j in range(xp.shape[1])]
    codes = apply_bins(xp[train], edges, base.max_bins)
    marks = _checkpoints(n_estimators)
    reports = []
    plans = [(0, 0, False), (1, 0, False), (0, top_levels, False), (1, top_levels, False),
             (0, 0, True)]
    with task(progress, "audit secureboost", len(plans), owner=owner) as running:
        for done, (first, top, mix) in enumerate(plans):
            name = _setting_name(first, top, mix)
            running.update(done, f"training and attacking: {name}")
            config = base.replace(active_first_trees=first, active_top_levels=top, mix=mix)
            act, pas, received = _run(xp[train], xa[train], y_train, config)
            view = passive_view(received, PASSIVE, rows)
            parts = [finest_partition(t, codes, base.max_bins) for t in view.trees]
            scores = co_membership_scores(parts, known, y_train, prior=prior)
            curve = tuple(AttackPoint(
                t, float(np.mean(label_by_rate(scores[t - 1, attacked], prior)
                                 == y_train[attacked])),
                auc(scores[t - 1, attacked], y_train[attacked]))
                for t in marks if t <= len(parts))
            split = first_split_partition(view)
            zk = bound = None
            if split is not None:
                zk = float(np.mean(name_by_prior(split[1], prior)[attacked]
                                   == y_train[attacked]))
                bound = best_naming_accuracy(split[1][attacked], y_train[attacked])
            raw = _scores(act, pas, xa[test], xp[test])
            y_test = labels[test]
            reports.append(SettingReport(
                name=name, active_first_trees=first, active_top_levels=top, mix=mix,
                curve=curve,
                zero_knowledge_accuracy=zk, naming_upper_bound=bound,
                zero_knowledge_tree=None if split is None else split[0],
                trees_hidden=sum(not t.shown for t in view.trees),
                levels_hidden=sum(len(t.hidden_levels) for t in view.trees),
                hidden_as_planned=_hidden_as_planned(view, config),
                test_auc=auc(raw, y_test),
                test_accuracy=float(np.mean((raw > 0) == (y_test == 1)))))
    return SecureBoostAuditReport(
        dataset=dataset, train_rows=rows, test_rows=int(test.size),
        known_labels=int(known.sum()), known_fraction=known_fraction, positive_rate=prior,
        prior_accuracy=prior_accuracy, own_features_accuracy=own_acc,
        own_features_auc=own_auc, n_estimators=n_estimators, max_depth=max_depth, seed=seed,
        settings=tuple(reports))
