"""Data sets and the ways to divide them between parties.

:mod:`islands.data.datasets`
    :class:`Dataset` and loaders that read files already on disk, never downloading:
    Fashion-MNIST from its IDX files (:func:`load_fashion_mnist`, :func:`read_idx`)
    and the small sets bundled with scikit-learn (:func:`load_sklearn`).
:mod:`islands.data.views`
    Vertical splits, each party holding some columns: two image halves for CCA
    (:func:`split_image_views`) or arbitrary column blocks (:func:`vertical_split`).
:mod:`islands.data.partition`
    Horizontal splits, each party holding some rows: IID, by class, Dirichlet label
    skew, label-sorted shards and unbalanced sizes, plus :func:`partition_summary`.
:mod:`islands.data.sources`
    A party's rows read in blocks, pass after pass, from an array, a list of blocks, a
    function or iterator of blocks, or a ``.npy``, Parquet or CSV file
    (:func:`open_source`, :class:`BlockSource`).

Importing this package loads only NumPy; scikit-learn is imported when a scikit-learn
data set is loaded, and pyarrow when a Parquet file is opened.
"""

from __future__ import annotations

from islands.data.datasets import (
    DATASET_NAMES,
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_DEFAULT,
    FASHION_MNIST_ENV,
    SKLEARN_DATASETS,
    Dataset,
    find_fashion_mnist,
    load,
    load_fashion_mnist,
    load_sklearn,
    read_idx,
)
from islands.data.partition import (
    parse_class_groups,
    partition_by_class,
    partition_dirichlet,
    partition_iid,
    partition_shards,
    partition_summary,
    partition_unbalanced,
)
from islands.data.sources import SOURCE_EXTENSIONS, BlockSource, RowSource, open_source
from islands.data.views import split_image_views, vertical_split, vertical_split_indices

__all__ = [
    "DATASET_NAMES",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_DEFAULT",
    "FASHION_MNIST_ENV",
    "SKLEARN_DATASETS",
    "SOURCE_EXTENSIONS",
    "BlockSource",
    "Dataset",
    "RowSource",
    "find_fashion_mnist",
    "load",
    "load_fashion_mnist",
    "load_sklearn",
    "open_source",
    "parse_class_groups",
    "partition_by_class",
    "partition_dirichlet",
    "partition_iid",
    "partition_shards",
    "partition_summary",
    "partition_unbalanced",
    "read_idx",
    "split_image_views",
    "vertical_split",
    "vertical_split_indices",
]
