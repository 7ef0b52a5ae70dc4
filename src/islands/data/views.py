"""Vertical splits: the columns (features) of one data set divided between parties.

Two-view splits of images feed canonical correlation analysis (each party holds one
half of every image); :func:`vertical_split` divides arbitrary feature columns for
vertical federated learning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.errors import invalid_parameter
from islands.validation import check_int, describe, is_int

__all__ = ["split_image_views", "vertical_split", "vertical_split_indices"]

_HOWS = ("left-right", "top-bottom")


def split_image_views(
    X: ArrayLike,
    image_shape: tuple[int, int],
    *,
    how: Literal["left-right", "top-bottom"] = "left-right",
) -> tuple[NDArray[Any], NDArray[Any]]:
    """Split flattened images into two views, one half of each image per view.

    Parameters
    ----------
    X
        ``n x (h * w)`` array, each row an ``h x w`` image flattened in row-major order.
    image_shape
        ``(h, w)``, the height and width of each image.
    how
        ``"left-right"``: the first view holds columns ``< w // 2`` of each image, the
        second the remaining columns. ``"top-bottom"``: the first view holds rows
        ``< h // 2``, the second the remaining rows.

    Returns
    -------
    tuple of numpy.ndarray
        The two views, each flattened row-major: ``n x (h * (w // 2))`` and
        ``n x (h * (w - w // 2))`` for left-right (392 and 392 for 28 x 28 images), or
        ``n x ((h // 2) * w)`` and ``n x ((h - h // 2) * w)`` for top-bottom. Both are
        new arrays with ``X``'s dtype; ``X`` is not modified.

    Raises
    ------
    ValidationError
        If ``X`` is not 2-D, ``image_shape`` is not two positive ints, ``X.shape[1]``
        is not ``h * w``, the split dimension is shorter than 2, or ``how`` is unknown.
    """
    owner = "split_image_views"
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise invalid_parameter("X", owner, "a 2-D array of flattened images", describe(arr))
    if (
        not isinstance(image_shape, (tuple, list))
        or len(image_shape) != 2
        or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1
            for d in image_shape
        )
    ):
        raise invalid_parameter(
            "image_shape", owner, "a (height, width) of positive ints", image_shape
        )
    h, w = int(image_shape[0]), int(image_shape[1])
    if arr.shape[1] != h * w:
        raise invalid_parameter(
            "X",
            owner,
            f"an array with h * w = {h * w} columns for image_shape {(h, w)}",
            describe(arr),
        )
    if how not in _HOWS:
        raise invalid_parameter("how", owner, f"one of {_HOWS}", how)
    split_len = w if how == "left-right" else h
    if split_len < 2:
        raise invalid_parameter(
            "image_shape",
            owner,
            f"a {'width' if how == 'left-right' else 'height'} of at least 2 for how={how!r}",
            (h, w),
        )
    n = arr.shape[0]
    images = arr.reshape(n, h, w)
    if how == "left-right":
        first, second = images[:, :, : w // 2], images[:, :, w // 2 :]
    else:
        first, second = images[:, : h // 2, :], images[:, h // 2 :, :]
    # .copy() gives C-contiguous data, so the reshape is a view of the copy, never of X.
    return first.copy().reshape(n, -1), second.copy().reshape(n, -1)


def vertical_split_indices(
    n_features: int, parts: int | Sequence[Sequence[int]]
) -> list[NDArray[np.intp]]:
    """Return the column indices each party holds in a vertical split.

    Parameters
    ----------
    n_features
        Number of columns to divide.
    parts
        Either the number of parties, each then getting a contiguous block of columns
        (block sizes differ by at most one, larger blocks first), or one sequence of
        column indices per party. Explicit parts must be non-empty, in
        ``[0, n_features)`` and disjoint; they need not cover every column (columns in
        no part are held by no party), and each keeps the order given.

    Returns
    -------
    list of numpy.ndarray
        One ``intp`` array of column indices per party.

    Raises
    ------
    ValidationError
        If ``n_features`` is not a positive int, ``parts`` is an int outside
        ``[1, n_features]``, or an explicit part is empty, holds a non-integer, an
        index out of range, or an index already in another part (or twice in its own).
    """
    return _split_indices(n_features, parts, "vertical_split_indices")


def _split_indices(
    n_features: int, parts: int | Sequence[Sequence[int]], owner: str
) -> list[NDArray[np.intp]]:
    n_features = check_int(n_features, "n_features", owner, low=1)
    if is_int(parts):
        n_parts = check_int(parts, "parts", owner, low=1, high=n_features)
        return [
            block.astype(np.intp)
            for block in np.array_split(np.arange(n_features, dtype=np.intp), n_parts)
        ]
    if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence) or not parts:
        raise invalid_parameter(
            "parts",
            owner,
            "a positive int or a non-empty sequence of column-index sequences",
            describe(parts),
        )
    owner_of: dict[int, int] = {}
    result: list[NDArray[np.intp]] = []
    for k, part in enumerate(parts):
        items = list(part) if isinstance(part, (Sequence, np.ndarray)) else None
        if not items or isinstance(part, (str, bytes)):
            raise invalid_parameter(
                f"parts[{k}]", owner, "a non-empty sequence of column indices", describe(part)
            )
        for col in items:
            if not is_int(col) or not 0 <= col < n_features:
                raise invalid_parameter(
                    f"parts[{k}]",
                    owner,
                    f"column indices that are ints in [0, {n_features})",
                    col,
                )
            if int(col) in owner_of:
                raise invalid_parameter(
                    f"parts[{k}]",
                    owner,
                    f"disjoint from the other parts and free of repeats, but column {int(col)}"
                    f" is already in parts[{owner_of[int(col)]}]",
                    int(col),
                )
            owner_of[int(col)] = k
        result.append(np.array([int(c) for c in items], dtype=np.intp))
    return result


def vertical_split(X: ArrayLike, parts: int | Sequence[Sequence[int]]) -> list[NDArray[Any]]:
    """Divide the columns of ``X`` between parties.

    Parameters
    ----------
    X
        ``n_samples x n_features`` array.
    parts
        The number of parties (contiguous, near-equal blocks of columns) or one
        sequence of column indices per party; see :func:`vertical_split_indices`.

    Returns
    -------
    list of numpy.ndarray
        One new array per party, ``X[:, columns]`` for that party's columns. ``X`` is
        not modified.

    Raises
    ------
    ValidationError
        If ``X`` is not 2-D with at least one column, or ``parts`` is invalid (see
        :func:`vertical_split_indices`).
    """
    arr = np.asarray(X)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise invalid_parameter(
            "X", "vertical_split", "a 2-D array with at least one column", describe(arr)
        )
    return [arr[:, cols] for cols in _split_indices(arr.shape[1], parts, "vertical_split")]
