"""Horizontal partitions: the rows (samples) of one data set divided between parties.

Every partitioner returns one ``intp`` array of row indices per party. The arrays are
sorted, pairwise disjoint, and together cover every row the scheme assigns (all rows,
except for :func:`partition_by_class` when some labels are in no group). Randomness
comes only from the ``random_state`` argument: an int seed, a
:class:`numpy.random.Generator`, or ``None`` for fresh entropy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.validation import (
    RandomState,
    check_float,
    check_int,
    check_labels,
    check_random_state,
    describe,
)

__all__ = [
    "parse_class_groups",
    "partition_by_class",
    "partition_dirichlet",
    "partition_iid",
    "partition_shards",
    "partition_summary",
    "partition_unbalanced",
]

_LABEL_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def _sorted_parts(chunks: Sequence[NDArray[Any]]) -> list[NDArray[np.intp]]:
    return [np.sort(np.asarray(c, dtype=np.intp)) for c in chunks]


def _check_n_parties(n_parties: Any, n_samples: int, owner: str) -> int:
    return check_int(n_parties, "n_parties", owner, low=1, high=n_samples)


def _apportion(total: int, weights: NDArray[np.float64]) -> NDArray[np.int64]:
    """Split ``total`` into integers proportional to ``weights`` (largest remainders)."""
    quotas = total * (weights / weights.sum())
    counts: NDArray[np.int64] = np.floor(quotas).astype(np.int64)
    short = total - int(counts.sum())
    if short > 0:
        order = np.argsort(-(quotas - counts), kind="stable")
        counts[order[:short]] += 1
    return counts


# ----------------------------------------------------------------------------------- IID


def partition_iid(
    n_samples: int, n_parties: int, *, random_state: RandomState = None
) -> list[NDArray[np.intp]]:
    """Divide rows uniformly at random into parties of (almost) equal size.

    Parameters
    ----------
    n_samples
        Number of rows to divide.
    n_parties
        Number of parties, in ``[1, n_samples]``.
    random_state
        Seed or generator for the random permutation.

    Returns
    -------
    list of numpy.ndarray
        ``n_parties`` sorted, disjoint ``intp`` index arrays covering ``range(n_samples)``;
        sizes differ by at most one.

    Raises
    ------
    ValidationError
        If ``n_samples`` is not a positive int or ``n_parties`` is outside
        ``[1, n_samples]``.
    """
    owner = "partition_iid"
    n_samples = check_int(n_samples, "n_samples", owner, low=1)
    n_parties = _check_n_parties(n_parties, n_samples, owner)
    rng = check_random_state(random_state, owner)
    return _sorted_parts(np.array_split(rng.permutation(n_samples), n_parties))


# ------------------------------------------------------------------------------ by class


def parse_class_groups(spec: str) -> list[list[int]]:
    """Parse a class-group specification such as ``"0-3,4-6,7-9"``.

    Parameters
    ----------
    spec
        Groups separated by commas, one group per party. Within a group, ``a-b`` is the
        inclusive range of labels ``a..b``, a single number is one label, and ``+``
        joins several items into one group: ``"0+2,1+3"`` gives ``[[0, 2], [1, 3]]``
        and ``"0-2+7,3-6"`` gives ``[[0, 1, 2, 7], [3, 4, 5, 6]]``. Labels are
        non-negative; whitespace is ignored.

    Returns
    -------
    list of list of int
        The labels of each group, in the order written.

    Raises
    ------
    ValidationError
        If ``spec`` is not a string, a group or item is empty or malformed, a range
        runs backwards, or a label appears more than once.

    Examples
    --------
    >>> parse_class_groups("0-3,4-6,7-9")
    [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    """
    owner = "parse_class_groups"
    if not isinstance(spec, str) or not spec.strip():
        raise invalid_parameter(
            "spec", owner, "a non-empty string such as '0-3,4-6,7-9'", describe(spec)
        )
    groups: list[list[int]] = []
    seen: dict[int, int] = {}
    for k, group_text in enumerate(spec.split(",")):
        group: list[int] = []
        for item in group_text.split("+"):
            match = _LABEL_ITEM.match(item)
            if match is None:
                raise invalid_parameter(
                    "spec",
                    owner,
                    "comma-separated groups of labels 'a' or ranges 'a-b' joined by '+', "
                    f"but group {k} has the item {item.strip()!r}",
                    spec,
                )
            low = int(match.group(1))
            high = int(match.group(2)) if match.group(2) is not None else low
            if high < low:
                raise invalid_parameter(
                    "spec",
                    owner,
                    f"ranges 'a-b' with a <= b, but group {k} has {low}-{high}",
                    spec,
                )
            for label in range(low, high + 1):
                if label in seen:
                    raise invalid_parameter(
                        "spec",
                        owner,
                        f"each label in one group only, but label {label} is in group "
                        f"{seen[label]} and group {k}",
                        spec,
                    )
                seen[label] = k
                group.append(label)
        groups.append(group)
    return groups


def _check_groups(groups: Any, owner: str) -> list[list[int]]:
    if isinstance(groups, str):
        return parse_class_groups(groups)
    if not isinstance(groups, Sequence) or not groups:
        raise invalid_parameter(
            "groups",
            owner,
            "a spec string such as '0-3,4-6,7-9' or a sequence of label sequences",
            describe(groups),
        )
    result: list[list[int]] = []
    seen: dict[int, int] = {}
    for k, group in enumerate(groups):
        if (
            isinstance(group, (str, bytes))
            or not isinstance(group, (Sequence, np.ndarray))
            or len(group) == 0
        ):
            raise invalid_parameter(
                f"groups[{k}]", owner, "a non-empty sequence of labels", describe(group)
            )
        labels: list[int] = []
        for label in group:
            if not isinstance(label, (int, np.integer)) or isinstance(label, (bool, np.bool_)):
                raise invalid_parameter(f"groups[{k}]", owner, "integer labels", label)
            if int(label) in seen:
                raise invalid_parameter(
                    f"groups[{k}]",
                    owner,
                    f"labels in no other group, but label {int(label)} is also in "
                    f"groups[{seen[int(label)]}]",
                    int(label),
                )
            seen[int(label)] = k
            labels.append(int(label))
        result.append(labels)
    return result


def partition_by_class(
    y: ArrayLike,
    groups: str | Sequence[Sequence[int]],
    *,
    random_state: RandomState = None,
) -> list[NDArray[np.intp]]:
    """Give each party every sample whose label is in that party's group of classes.

    This is the most extreme label skew: parties share no class at all.

    Parameters
    ----------
    y
        1-D integer class labels, one per row.
    groups
        One group of labels per party, either as a spec string parsed by
        :func:`parse_class_groups` (``"0-3,4-6,7-9"``, ``"0+2,1+3"``) or as a sequence
        of label sequences (``[[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]``). Party ``k`` gets
        the rows whose label is in group ``k``.
    random_state
        Accepted (and checked) for a signature uniform with the other partitioners;
        the result is deterministic and does not use it.

    Returns
    -------
    list of numpy.ndarray
        One sorted ``intp`` index array per group. Rows whose label is in no group are
        in no party: they are left unassigned.

    Raises
    ------
    ValidationError
        If ``y`` is not 1-D integer labels, ``groups`` is malformed or names a label in
        more than one group, or a group names a label that does not occur in ``y``.
    """
    owner = "partition_by_class"
    labels = check_labels(y, "y", owner)
    label_groups = _check_groups(groups, owner)
    check_random_state(random_state, owner)
    present = set(np.unique(labels).tolist())
    for k, group in enumerate(label_groups):
        missing = sorted(set(group) - present)
        if missing:
            raise invalid_parameter(
                "groups",
                owner,
                f"labels that occur in y, but group {k} names {missing}, which do not",
                describe(groups) if not isinstance(groups, str) else groups,
            )
    return [
        np.flatnonzero(np.isin(labels, np.asarray(group, dtype=np.int64))).astype(np.intp)
        for group in label_groups
    ]


# ----------------------------------------------------------------------------- Dirichlet


def partition_dirichlet(
    y: ArrayLike,
    n_parties: int,
    alpha: float,
    *,
    min_size: int = 10,
    max_tries: int = 100,
    random_state: RandomState = None,
) -> list[NDArray[np.intp]]:
    """Divide rows with label skew drawn from a Dirichlet distribution.

    For each class, the proportions of its samples that go to each party are drawn
    from ``Dir(alpha, ..., alpha)``, and the class's shuffled rows are cut accordingly.
    Small ``alpha`` (e.g. 0.1) gives each party few classes; large ``alpha`` (e.g. 100)
    approaches an IID split. The whole draw is repeated until every party has at
    least ``min_size`` rows.

    Parameters
    ----------
    y
        1-D integer class labels, one per row.
    n_parties
        Number of parties, in ``[1, len(y)]``.
    alpha
        Concentration of the Dirichlet distribution, a float in ``(0, inf)``.
    min_size
        Smallest number of rows any party may get; ``n_parties * min_size`` must not
        exceed ``len(y)``.
    max_tries
        How many draws to make before giving up.
    random_state
        Seed or generator for the draws and shuffles.

    Returns
    -------
    list of numpy.ndarray
        ``n_parties`` sorted, disjoint ``intp`` index arrays covering every row.

    Raises
    ------
    ValidationError
        If an argument is invalid, or no draw within ``max_tries`` gave every party
        ``min_size`` rows (the message names ``alpha``, ``min_size`` and
        ``max_tries``).

    References
    ----------
    .. [1] T.-M. H. Hsu, H. Qi and M. Brown, "Measuring the Effects of Non-Identical
       Data Distribution for Federated Visual Classification", arXiv:1909.06335, 2019.
    """
    owner = "partition_dirichlet"
    labels = check_labels(y, "y", owner)
    n = labels.size
    n_parties = _check_n_parties(n_parties, n, owner)
    alpha = check_float(alpha, "alpha", owner, low=0.0, low_inclusive=False)
    min_size = check_int(min_size, "min_size", owner, low=0, high=n // n_parties)
    max_tries = check_int(max_tries, "max_tries", owner, low=1)
    rng = check_random_state(random_state, owner)

    class_rows = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    concentration = np.full(n_parties, alpha)
    smallest = 0
    for _ in range(max_tries):
        chunks: list[list[NDArray[np.intp]]] = [[] for _ in range(n_parties)]
        for rows in class_rows:
            shuffled = rng.permutation(rows)
            proportions = rng.dirichlet(concentration)
            if not np.isfinite(proportions).all():  # alpha so small the draw underflowed
                proportions = np.zeros(n_parties)
                proportions[rng.integers(n_parties)] = 1.0
            cuts = np.rint(np.cumsum(proportions)[:-1] * shuffled.size).astype(np.intp)
            for k, piece in enumerate(np.split(shuffled, cuts)):
                chunks[k].append(piece)
        parts = _sorted_parts([np.concatenate(c) for c in chunks])
        smallest = min(p.size for p in parts)
        if smallest >= min_size:
            return parts
    raise ValidationError(
        f"partition_dirichlet could not give each of the {n_parties} parties at least "
        f"min_size={min_size} rows in max_tries={max_tries} draws with alpha={alpha} "
        f"(the smallest party of the last draw had {smallest}). Raise alpha, lower "
        "min_size or raise max_tries."
    )


# -------------------------------------------------------------------------------- shards


def partition_shards(
    y: ArrayLike,
    n_parties: int,
    shards_per_party: int = 2,
    *,
    random_state: RandomState = None,
) -> list[NDArray[np.intp]]:
    """Divide rows label-sorted into shards and deal each party a few random shards.

    The rows are sorted by label (in random order within each label), cut into
    ``n_parties * shards_per_party`` contiguous shards of near-equal size, and each
    party gets ``shards_per_party`` shards chosen at random, so it sees only a few
    classes. With 100 parties and 2 shards each this is the pathological non-IID
    MNIST split of McMahan et al.

    Parameters
    ----------
    y
        1-D integer class labels, one per row.
    n_parties
        Number of parties, at least 1.
    shards_per_party
        Shards each party gets, at least 1; ``n_parties * shards_per_party`` must not
        exceed ``len(y)``.
    random_state
        Seed or generator for the within-label order and the dealing of shards.

    Returns
    -------
    list of numpy.ndarray
        ``n_parties`` sorted, disjoint ``intp`` index arrays covering every row.

    Raises
    ------
    ValidationError
        If ``y`` is not 1-D integer labels or there are more shards than rows.

    References
    ----------
    .. [1] H. B. McMahan, E. Moore, D. Ramage, S. Hampson and B. Agüera y Arcas,
       "Communication-Efficient Learning of Deep Networks from Decentralized Data",
       AISTATS 2017.
    """
    owner = "partition_shards"
    labels = check_labels(y, "y", owner)
    n = labels.size
    n_parties = _check_n_parties(n_parties, n, owner)
    shards_per_party = check_int(
        shards_per_party, "shards_per_party", owner, low=1, high=n // n_parties
    )
    rng = check_random_state(random_state, owner)
    shuffled = rng.permutation(n)
    order = shuffled[np.argsort(labels[shuffled], kind="stable")]
    n_shards = n_parties * shards_per_party
    shards = np.array_split(order, n_shards)
    dealt = rng.permutation(n_shards).reshape(n_parties, shards_per_party)
    return _sorted_parts([np.concatenate([shards[s] for s in row]) for row in dealt])


# ---------------------------------------------------------------------------- unbalanced


def partition_unbalanced(
    n_samples: int,
    n_parties: int,
    *,
    sizes: Sequence[float] | NDArray[Any] | None = None,
    sigma: float = 1.0,
    min_size: int = 1,
    random_state: RandomState = None,
) -> list[NDArray[np.intp]]:
    """Divide rows at random into parties of unequal sizes (quantity skew).

    Parameters
    ----------
    n_samples
        Number of rows to divide.
    n_parties
        Number of parties, in ``[1, n_samples]``.
    sizes
        Relative party sizes, one non-negative number per party (fractions or counts:
        only the ratios matter). They are scaled to ``n_samples`` and rounded by
        largest remainders, so counts that already sum to ``n_samples`` are used
        exactly. When ``None``, sizes are drawn as ``lognormal(0, sigma)``.
    sigma
        Spread of the log-normal sizes, a float in ``[0, inf)``; 0 gives equal sizes.
        Ignored when ``sizes`` is given.
    min_size
        Smallest number of rows a party may get. Drawn sizes are made to honour it:
        each party gets ``min_size`` rows, and the rest are shared in proportion to the
        draw. Explicit ``sizes`` that round below it raise an error.
    random_state
        Seed or generator for the size draw and the assignment of rows.

    Returns
    -------
    list of numpy.ndarray
        ``n_parties`` sorted, disjoint ``intp`` index arrays covering
        ``range(n_samples)``; rows are assigned IID given the sizes.

    Raises
    ------
    ValidationError
        If an argument is invalid, ``n_parties * min_size > n_samples``, ``sizes``
        has the wrong length, a negative or non-finite entry or a zero sum, or an
        explicit size rounds below ``min_size``.
    """
    owner = "partition_unbalanced"
    n_samples = check_int(n_samples, "n_samples", owner, low=1)
    n_parties = _check_n_parties(n_parties, n_samples, owner)
    min_size = check_int(min_size, "min_size", owner, low=0, high=n_samples // n_parties)
    sigma = check_float(sigma, "sigma", owner, low=0.0)
    rng = check_random_state(random_state, owner)

    if sizes is not None:
        weights = np.asarray(sizes)
        if (
            weights.shape != (n_parties,)
            or weights.dtype.kind not in "iuf"
            or not np.isfinite(weights).all()
            or (weights < 0).any()
            or weights.sum() <= 0
        ):
            raise invalid_parameter(
                "sizes",
                owner,
                f"{n_parties} finite, non-negative relative sizes (one per party) with a "
                "positive sum",
                describe(weights) if weights.size > 20 else weights.tolist(),
            )
        counts = _apportion(n_samples, weights.astype(np.float64))
        if counts.min() < min_size:
            raise invalid_parameter(
                "sizes",
                owner,
                f"sizes giving every party at least min_size={min_size} of the "
                f"{n_samples} rows, but they give {counts.tolist()}",
                weights.tolist() if weights.size <= 20 else describe(weights),
            )
    else:
        drawn = rng.lognormal(mean=0.0, sigma=sigma, size=n_parties)
        counts = min_size + _apportion(n_samples - n_parties * min_size, drawn)
    bounds = np.cumsum(counts)[:-1]
    return _sorted_parts(np.split(rng.permutation(n_samples), bounds))


# ------------------------------------------------------------------------------- summary


def partition_summary(
    y: ArrayLike, parts: Sequence[ArrayLike], *, n_classes: int | None = None
) -> NDArray[np.int64]:
    """Count the samples of each class each party holds.

    Parameters
    ----------
    y
        1-D non-negative integer class labels, one per row.
    parts
        One array of row indices per party, as returned by the partitioners.
    n_classes
        Number of columns of the table; defaults to ``max(y) + 1``. Must exceed every
        label.

    Returns
    -------
    numpy.ndarray
        ``n_parties x n_classes`` ``int64`` table: entry ``[k, c]`` is the number of
        rows of party ``k`` with label ``c``.

    Raises
    ------
    ValidationError
        If ``y`` is not 1-D non-negative integer labels, ``n_classes`` does not exceed
        every label, or a part is not a 1-D array of integer indices into ``y``.
    """
    owner = "partition_summary"
    labels = check_labels(y, "y", owner)
    if labels.min() < 0:
        raise invalid_parameter("y", owner, "non-negative class labels", int(labels.min()))
    top = int(labels.max()) + 1
    n_cols = top if n_classes is None else check_int(n_classes, "n_classes", owner, low=top)
    if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence):
        raise invalid_parameter("parts", owner, "a sequence of index arrays", describe(parts))
    table = np.zeros((len(parts), n_cols), dtype=np.int64)
    for k, part in enumerate(parts):
        rows = np.asarray(part)
        if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
            raise invalid_parameter(
                f"parts[{k}]", owner, "a 1-D array of integer row indices", describe(rows)
            )
        if rows.size and (rows.min() < 0 or rows.max() >= labels.size):
            raise invalid_parameter(
                f"parts[{k}]",
                owner,
                f"row indices in [0, {labels.size})",
                int(rows.min()) if rows.min() < 0 else int(rows.max()),
            )
        table[k] = np.bincount(labels[rows.astype(np.intp)], minlength=n_cols)
    return table
