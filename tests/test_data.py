"""Tests for islands.data: IDX reading, loaders, vertical views and horizontal partitions."""

from __future__ import annotations

import dataclasses
import gzip
import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import islands.data as data
from islands.data import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_DEFAULT,
    Dataset,
    find_fashion_mnist,
    load,
    load_fashion_mnist,
    load_sklearn,
    parse_class_groups,
    partition_by_class,
    partition_dirichlet,
    partition_iid,
    partition_shards,
    partition_summary,
    partition_unbalanced,
    read_idx,
    split_image_views,
    vertical_split,
    vertical_split_indices,
)
from islands.errors import DataNotFoundError, ValidationError

FAST = settings(max_examples=50, deadline=None)

# ------------------------------------------------------------------------------ helpers

IDX_CODES = {
    np.dtype(np.uint8): 0x08,
    np.dtype(np.int8): 0x09,
    np.dtype(np.int16): 0x0B,
    np.dtype(np.int32): 0x0C,
    np.dtype(np.float32): 0x0D,
    np.dtype(np.float64): 0x0E,
}


def idx_bytes(
    arr: np.ndarray,
    *,
    code: int | None = None,
    dims: tuple[int, ...] | None = None,
    magic: bytes = b"\x00\x00",
) -> bytes:
    """Encode ``arr`` as IDX independently of the reader under test."""
    code = IDX_CODES[arr.dtype] if code is None else code
    dims = arr.shape if dims is None else dims
    header = magic + bytes([code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def write_idx(path: Path, arr: np.ndarray, *, gz: bool = False, **kwargs: Any) -> Path:
    payload = idx_bytes(arr, **kwargs)
    path.write_bytes(gzip.compress(payload) if gz else payload)
    return path


def assert_partition(parts: list[np.ndarray], n: int, *, covers: bool = True) -> None:
    for p in parts:
        assert p.dtype == np.intp
        assert p.ndim == 1
        assert np.all(np.diff(p) > 0), "each party's indices are sorted and unique"
    joined = np.concatenate(parts) if parts else np.array([], dtype=np.intp)
    assert np.unique(joined).size == joined.size, "parties are disjoint"
    if joined.size:
        assert joined.min() >= 0 and joined.max() < n
    if covers:
        assert joined.size == n


def same_parts(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def labels_10(per_class: int = 50, seed: int = 0) -> np.ndarray:
    y = np.repeat(np.arange(10), per_class)
    return np.random.default_rng(seed).permutation(y)


# ---------------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("dtype", list(IDX_CODES))
def test_read_idx_round_trip_every_dtype(tmp_path: Path, dtype: np.dtype, gz: bool) -> None:
    rng = np.random.default_rng(1)
    if dtype.kind == "f":
        arr = rng.standard_normal((3, 4, 5)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        arr = rng.integers(info.min, info.max, size=(3, 4, 5), endpoint=True).astype(dtype)
    path = write_idx(tmp_path / ("a.idx.gz" if gz else "a.idx"), arr, gz=gz)
    out = read_idx(path)
    assert out.dtype == dtype and out.dtype.isnative
    assert out.shape == (3, 4, 5)
    np.testing.assert_array_equal(out, arr)
    assert out.flags.writeable
    out[0, 0, 0] = 0  # a real, writable array, not a view of a bytes object


@pytest.mark.parametrize("shape", [(7,), (2, 3), (0,), (1, 1, 1, 2)])
def test_read_idx_shapes(tmp_path: Path, shape: tuple[int, ...]) -> None:
    arr = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    np.testing.assert_array_equal(read_idx(write_idx(tmp_path / "s", arr)), arr)


def test_read_idx_detects_gzip_by_content_not_name(tmp_path: Path) -> None:
    arr = np.arange(6, dtype=np.uint8).reshape(2, 3)
    plain_named_gz = write_idx(tmp_path / "plain.gz", arr)
    gz_named_plain = write_idx(tmp_path / "packed-ubyte", arr, gz=True)
    np.testing.assert_array_equal(read_idx(plain_named_gz), arr)
    np.testing.assert_array_equal(read_idx(str(gz_named_plain)), arr)


def test_read_idx_known_bytes(tmp_path: Path) -> None:
    # int16 big-endian 0x0102 = 258 and 0xFFFE = -2
    raw = b"\x00\x00\x0b\x01" + struct.pack(">I", 2) + b"\x01\x02\xff\xfe"
    (tmp_path / "k").write_bytes(raw)
    np.testing.assert_array_equal(read_idx(tmp_path / "k"), np.array([258, -2], np.int16))


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"", "fewer than the 4-byte magic"),
        (b"\x00\x00", "fewer than the 4-byte magic"),
        (b"\x00\x01\x08\x01" + struct.pack(">I", 1) + b"\x05", "two zero bytes"),
        (b"\x12\x34\x08\x01" + struct.pack(">I", 1) + b"\x05", "two zero bytes"),
        (b"\x00\x00\x0a\x01" + struct.pack(">I", 1) + b"\x05", "unknown IDX data type code 0x0A"),
        (b"\x00\x00\x08\x00", "0 dimensions"),
        (b"\x00\x00\x08\x03" + struct.pack(">I", 1), "truncated IDX header"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 5) + b"\x01\x02", "need 5 data bytes"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 2) + b"\x01\x02\x03", "more than 2"),
        (b"\x00\x00\x0c\x01" + struct.pack(">I", 2) + b"\x00" * 7, "need 8 data bytes"),
    ],
)
def test_read_idx_rejects_corrupt_files(
    tmp_path: Path, payload: bytes, fragment: str, gz: bool
) -> None:
    path = tmp_path / "bad-ubyte"
    path.write_bytes(gzip.compress(payload) if gz else payload)
    with pytest.raises(ValidationError, match="bad-ubyte") as info:
        read_idx(path)
    assert fragment in str(info.value)


def test_read_idx_lying_dims_do_not_allocate(tmp_path: Path) -> None:
    # Header claims 2**32-1 cubed float64 values; the file holds 16 bytes.
    big = 2**32 - 1
    raw = b"\x00\x00\x0e\x03" + struct.pack(">3I", big, big, big) + b"\x00" * 16
    for name, payload in [("lie", raw), ("lie.gz", gzip.compress(raw))]:
        (tmp_path / name).write_bytes(payload)
        with pytest.raises(ValidationError, match="but the file holds 16"):
            read_idx(tmp_path / name)


def test_read_idx_truncated_gzip(tmp_path: Path) -> None:
    arr = np.arange(1000, dtype=np.int32)
    packed = gzip.compress(idx_bytes(arr))
    (tmp_path / "cut.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ValidationError, match=r"cut\.gz"):
        read_idx(tmp_path / "cut.gz")


def test_read_idx_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="nothing-here"):
        read_idx(tmp_path / "nothing-here")


# ------------------------------------------------------------------------------ Dataset


def test_dataset_properties_and_frozen() -> None:
    ds = Dataset(X=np.zeros((5, 3)), y=np.arange(5, dtype=np.int64), name="t")
    assert (ds.n_samples, ds.n_features) == (5, 3)
    assert ds.image_shape is None and ds.classes is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds.name = "u"  # type: ignore[misc]
    img = Dataset(X=np.zeros((2, 4, 3)), y=np.zeros(2, np.int64), name="i", image_shape=(4, 3))
    assert img.n_features == 12


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"X": np.zeros(5), "y": np.zeros(5)}, "'X'"),
        ({"X": np.zeros((5, 2)), "y": np.zeros(4)}, "'y'"),
        ({"X": np.zeros((5, 2)), "y": np.zeros((5, 1))}, "'y'"),
        ({"X": np.zeros((5, 6)), "y": np.zeros(5), "image_shape": (2, 2)}, "'image_shape'"),
    ],
)
def test_dataset_validates(kwargs: dict[str, Any], param: str) -> None:
    with pytest.raises(ValidationError, match=param):
        Dataset(name="bad", **kwargs)


# ------------------------------------------------------------------------ Fashion-MNIST

FAKE_N = {"train": 20, "test": 12}


@pytest.fixture
def fake_fashion(tmp_path: Path) -> tuple[Path, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """A directory with small IDX files under the real Fashion-MNIST names (gzipped)."""
    rng = np.random.default_rng(7)
    raw: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split, prefix in [("train", "train"), ("test", "t10k")]:
        n = FAKE_N[split]
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        images[0, 0, 0], images[0, 0, 1] = 0, 255
        labels = (np.arange(n) % 10).astype(np.uint8)
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", images, gz=True)
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", labels, gz=True)
        raw[split] = (images, labels)
    return tmp_path, raw


def test_fashion_mnist_from_fake_files(fake_fashion: Any) -> None:
    directory, raw = fake_fashion
    for split in ("train", "test"):
        ds = load_fashion_mnist(directory, split=split)
        images, labels = raw[split]
        assert ds.X.shape == (FAKE_N[split], 784) and ds.X.dtype == np.float64
        np.testing.assert_allclose(ds.X, images.reshape(-1, 784) / 255.0)
        assert ds.X.min() == 0.0 and ds.X.max() == 1.0
        assert ds.y.dtype == np.int64
        np.testing.assert_array_equal(ds.y, labels)
        assert ds.image_shape == (28, 28)
        assert ds.classes == FASHION_MNIST_CLASSES and len(ds.classes) == 10
        assert ds.classes[0] == "T-shirt/top" and ds.classes[9] == "Ankle boot"
        assert ds.name == "fashion_mnist"


def test_fashion_mnist_options(fake_fashion: Any) -> None:
    directory, raw = fake_fashion
    images, labels = raw["train"]
    unflat = load_fashion_mnist(directory, flatten=False)
    assert unflat.X.shape == (20, 28, 28)
    assert unflat.n_features == 784
    rawds = load_fashion_mnist(directory, normalize=False)
    assert rawds.X.dtype == np.uint8
    np.testing.assert_array_equal(rawds.X, images.reshape(20, 784))
    first = load_fashion_mnist(directory, n_samples=5)
    assert first.X.shape == (5, 784)
    np.testing.assert_array_equal(first.y, labels[:5])
    np.testing.assert_allclose(first.X, images[:5].reshape(5, 784) / 255.0)
    np.testing.assert_array_equal(
        load(name="fashion_mnist", path=directory, split="test").y, raw["test"][1]
    )


def test_fashion_mnist_uncompressed_names(tmp_path: Path) -> None:
    images = np.full((3, 28, 28), 51, dtype=np.uint8)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", images)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([1, 2, 3], np.uint8))
    ds = load_fashion_mnist(tmp_path, split="test")
    np.testing.assert_allclose(ds.X, 0.2)
    np.testing.assert_array_equal(ds.y, [1, 2, 3])
    # only the test split is there: load of train fails and find says "not complete"
    assert find_fashion_mnist(tmp_path) is None
    with pytest.raises(DataNotFoundError):
        load_fashion_mnist(tmp_path, split="train")


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"split": "validation"}, "'split'"),
        ({"n_samples": 0}, "'n_samples'"),
        ({"n_samples": 21}, r"'n_samples'.*\[1, 20\]"),
        ({"n_samples": 2.5}, "'n_samples'"),
        ({"n_samples": True}, "'n_samples'"),
    ],
)
def test_fashion_mnist_bad_arguments(fake_fashion: Any, kwargs: dict[str, Any], param: str) -> None:
    with pytest.raises(ValidationError, match=param):
        load_fashion_mnist(fake_fashion[0], **kwargs)


def test_fashion_mnist_inconsistent_files(tmp_path: Path) -> None:
    write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((3, 28, 28), np.uint8))
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(4, np.uint8))
    with pytest.raises(ValidationError, match="t10k-labels-idx1-ubyte"):
        load_fashion_mnist(tmp_path, split="test")
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([0, 1, 10], np.uint8))
    with pytest.raises(ValidationError, match="label 10"):
        load_fashion_mnist(tmp_path, split="test")
    write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((3, 27, 28), np.uint8))
    with pytest.raises(ValidationError, match="28 x 28"):
        load_fashion_mnist(tmp_path, split="test")
    write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((3, 28, 28), np.float32))
    with pytest.raises(ValidationError, match="uint8"):
        load_fashion_mnist(tmp_path, split="test")


def test_fashion_mnist_not_found_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    with pytest.raises(DataNotFoundError) as info:
        load_fashion_mnist(empty)
    message = str(info.value)
    assert str(empty) in message
    assert "dataset-fashion-mnist" in message
    assert "apt-get install dataset-fashion-mnist" in message
    assert "path=" in message and "ISLANDS_FASHION_MNIST" in message
    assert isinstance(info.value, FileNotFoundError)
    # with no path, the environment variable is the directory reported
    monkeypatch.setenv("ISLANDS_FASHION_MNIST", str(empty))
    with pytest.raises(DataNotFoundError, match="empty-dir"):
        load_fashion_mnist()


def test_find_fashion_mnist_and_env(
    fake_fashion: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = fake_fashion[0]
    assert find_fashion_mnist(directory) == directory
    assert find_fashion_mnist(str(directory)) == directory
    assert find_fashion_mnist(tmp_path / "missing") is None
    monkeypatch.setenv("ISLANDS_FASHION_MNIST", str(directory))
    assert find_fashion_mnist() == directory
    assert load_fashion_mnist(split="test").n_samples == FAKE_N["test"]
    # an explicit path wins over the environment
    assert find_fashion_mnist(tmp_path / "missing") is None
    monkeypatch.setenv("ISLANDS_FASHION_MNIST", "")
    assert find_fashion_mnist() == find_fashion_mnist(FASHION_MNIST_DEFAULT)


def test_fashion_mnist_default_path() -> None:
    assert Path("/usr/share/datasets/fashion-mnist") == FASHION_MNIST_DEFAULT


@pytest.mark.skipif(
    find_fashion_mnist(FASHION_MNIST_DEFAULT) is None,
    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)",
)
def test_real_fashion_mnist_test_split() -> None:
    ds = load_fashion_mnist(FASHION_MNIST_DEFAULT, split="test")
    assert ds.X.shape == (10000, 784) and ds.X.dtype == np.float64
    assert ds.X.min() >= 0.0 and ds.X.max() <= 1.0 and ds.X.max() == 1.0
    assert set(np.unique(ds.y).tolist()) == set(range(10))
    assert np.all(np.bincount(ds.y) == 1000)
    assert ds.y[0] == 9  # the first test image is an ankle boot
    left, right = split_image_views(ds.X[:100], ds.image_shape or (0, 0))
    assert left.shape == (100, 392) and right.shape == (100, 392)


# ------------------------------------------------------------------------- scikit-learn


@pytest.mark.parametrize(
    ("name", "shape", "n_classes"),
    [
        ("digits", (1797, 64), 10),
        ("breast_cancer", (569, 30), 2),
        ("wine", (178, 13), 3),
        ("diabetes", (442, 10), None),
    ],
)
def test_load_sklearn_shapes(name: str, shape: tuple[int, int], n_classes: int | None) -> None:
    ds = load_sklearn(name)
    assert ds.X.shape == shape and ds.X.dtype == np.float64
    assert ds.name == name
    assert ds.y.shape == (shape[0],)
    if n_classes is None:
        assert ds.y.dtype == np.float64 and ds.classes is None
    else:
        assert ds.y.dtype == np.int64
        assert ds.classes is not None and len(ds.classes) == n_classes
        assert set(np.unique(ds.y).tolist()) == set(range(n_classes))
    assert ds.image_shape == ((8, 8) if name == "digits" else None)
    assert load(name).X.shape == shape


def test_load_sklearn_class_names() -> None:
    assert load_sklearn("digits").classes == tuple(str(i) for i in range(10))
    assert load_sklearn("breast_cancer").classes == ("malignant", "benign")


def test_load_unknown_names() -> None:
    with pytest.raises(ValidationError, match=r"'name' parameter of load_sklearn.*'wine'"):
        load_sklearn("iris")
    with pytest.raises(ValidationError, match=r"'name' parameter of load.*fashion_mnist"):
        load("mnist")
    with pytest.raises(ValidationError, match="no keyword arguments"):
        load("wine", split="test")


def test_import_is_light() -> None:
    code = (
        "import sys, islands.data\n"
        "heavy = {'torch', 'tenseal', 'grpc', 'ray', 'pyarrow', 'sklearn'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    src = str(Path(data.__file__).parents[2])
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": src},
    )
    assert out.stdout.strip() == "[]"


def test_all_is_sorted_and_complete() -> None:
    def isort_key(name: str) -> tuple[int, str]:  # constants, classes, then the rest
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert list(data.__all__) == sorted(data.__all__, key=isort_key)
    for name in data.__all__:
        assert hasattr(data, name)


# -------------------------------------------------------------------------------- views


def test_split_image_views_fashion_sizes_and_pixels() -> None:
    image = np.arange(784, dtype=np.float64).reshape(28, 28)
    X = np.stack([image.ravel(), -image.ravel()])
    left, right = split_image_views(X, (28, 28))
    assert left.shape == (2, 392) and right.shape == (2, 392)
    np.testing.assert_array_equal(left[0], image[:, :14].ravel())
    np.testing.assert_array_equal(right[0], image[:, 14:].ravel())
    np.testing.assert_array_equal(left[1], -image[:, :14].ravel())
    assert left[0, :3].tolist() == [0, 1, 2] and left[0, 14] == 28  # row 1 starts at pixel 28
    assert right[0, 0] == 14
    top, bottom = split_image_views(X, (28, 28), how="top-bottom")
    np.testing.assert_array_equal(top[0], np.arange(392))
    np.testing.assert_array_equal(bottom[0], np.arange(392, 784))


def test_split_image_views_odd_sizes_and_copies() -> None:
    X = np.arange(2 * 15, dtype=np.int32).reshape(2, 15)  # two 3 x 5 images
    left, right = split_image_views(X, (3, 5))
    assert left.shape == (2, 6) and right.shape == (2, 9)
    np.testing.assert_array_equal(left[0], [0, 1, 5, 6, 10, 11])
    assert left.dtype == np.int32
    top, bottom = split_image_views(X, (3, 5), how="top-bottom")
    assert top.shape == (2, 5) and bottom.shape == (2, 10)
    before = X.copy()
    for view in (left, right, top, bottom):
        assert not np.shares_memory(view, X)
        view[...] = -1
    np.testing.assert_array_equal(X, before)


@pytest.mark.parametrize(
    ("X", "shape", "how", "param"),
    [
        (np.zeros((2, 783)), (28, 28), "left-right", "'X'"),
        (np.zeros(784), (28, 28), "left-right", "'X'"),
        (np.zeros((2, 784)), (28,), "left-right", "'image_shape'"),
        (np.zeros((2, 784)), (0, 28), "left-right", "'image_shape'"),
        (np.zeros((2, 784)), (28, 28), "diagonal", "'how'"),
        (np.zeros((2, 4)), (4, 1), "left-right", "'image_shape'"),
        (np.zeros((2, 4)), (1, 4), "top-bottom", "'image_shape'"),
    ],
)
def test_split_image_views_errors(X: np.ndarray, shape: Any, how: Any, param: str) -> None:
    with pytest.raises(ValidationError, match=param):
        split_image_views(X, shape, how=how)


def test_vertical_split_blocks() -> None:
    X = np.arange(30, dtype=np.float64).reshape(3, 10)
    blocks = vertical_split(X, 3)
    assert [b.shape[1] for b in blocks] == [4, 3, 3]
    np.testing.assert_array_equal(np.hstack(blocks), X)
    idx = vertical_split_indices(10, 3)
    assert [i.tolist() for i in idx] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert all(i.dtype == np.intp for i in idx)
    assert len(vertical_split(X, 10)) == 10 and len(vertical_split(X, 1)) == 1


def test_vertical_split_explicit_parts() -> None:
    X = np.arange(12).reshape(2, 6)
    a, b = vertical_split(X, [[4, 0], np.array([5])])
    np.testing.assert_array_equal(a, X[:, [4, 0]])
    np.testing.assert_array_equal(b, X[:, [5]])
    assert not np.shares_memory(a, X)
    assert [i.tolist() for i in vertical_split_indices(6, [(1,), [3, 2]])] == [[1], [3, 2]]


@pytest.mark.parametrize(
    ("parts", "param"),
    [
        (0, "'parts'"),
        (7, r"'parts'.*\[1, 6\]"),
        (True, "'parts'"),
        ([], "'parts'"),
        ("01", "'parts'"),
        ([[0, 1], []], r"'parts\[1\]'"),
        ([[0, 1], [1, 2]], r"'parts\[1\]'.*already in parts\[0\]"),
        ([[0, 0]], r"'parts\[0\]'.*already"),
        ([[0, 6]], r"'parts\[0\]'.*\[0, 6\)"),
        ([[-1]], r"'parts\[0\]'"),
        ([[0.5]], r"'parts\[0\]'"),
    ],
)
def test_vertical_split_errors(parts: Any, param: str) -> None:
    with pytest.raises(ValidationError, match=param):
        vertical_split(np.zeros((2, 6)), parts)


def test_vertical_split_bad_input() -> None:
    with pytest.raises(ValidationError, match="'X'"):
        vertical_split(np.zeros(6), 2)
    with pytest.raises(ValidationError, match="'n_features'"):
        vertical_split_indices(0, 1)


# ---------------------------------------------------------------------------- IID split


def test_partition_iid() -> None:
    parts = partition_iid(103, 4, random_state=0)
    assert_partition(parts, 103)
    assert sorted(p.size for p in parts) == [25, 26, 26, 26]
    assert same_parts(parts, partition_iid(103, 4, random_state=0))
    assert not same_parts(parts, partition_iid(103, 4, random_state=1))
    gen = np.random.default_rng(5)
    first, second = partition_iid(50, 2, random_state=gen), partition_iid(50, 2, random_state=gen)
    assert not same_parts(first, second)  # the caller's generator advances
    assert same_parts(first, partition_iid(50, 2, random_state=np.random.default_rng(5)))
    assert_partition(partition_iid(5, 5), 5)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((10, 0), {}, "'n_parties' parameter of partition_iid must be an int in \\[1, 10\\]"),
        ((10, 11), {}, "'n_parties'"),
        ((10, True), {}, "'n_parties'"),
        ((0, 1), {}, "'n_samples'"),
        ((10, 2), {"random_state": -1}, "'random_state'"),
        ((10, 2), {"random_state": "seed"}, "'random_state'"),
        ((10, 2), {"random_state": 1.5}, "'random_state'"),
    ],
)
def test_partition_iid_errors(args: tuple[Any, ...], kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        partition_iid(*args, **kwargs)


@FAST
@given(n=st.integers(1, 200), data_=st.data(), seed=st.integers(0, 2**32 - 1))
def test_partition_iid_property(n: int, data_: st.DataObject, seed: int) -> None:
    k = data_.draw(st.integers(1, n))
    parts = partition_iid(n, k, random_state=seed)
    assert len(parts) == k
    assert_partition(parts, n)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1


# ----------------------------------------------------------------------------- by class


def test_parse_class_groups() -> None:
    assert parse_class_groups("0-3,4-6,7-9") == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert parse_class_groups("0+2,1+3") == [[0, 2], [1, 3]]
    assert parse_class_groups(" 0 - 2 + 7 , 3-6 ") == [[0, 1, 2, 7], [3, 4, 5, 6]]
    assert parse_class_groups("5") == [[5]]
    assert parse_class_groups("10-12,3") == [[10, 11, 12], [3]]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("", "'spec'"),
        ("   ", "'spec'"),
        ("0-3,,4", "group 1"),
        ("0-3,4+", "group 1"),
        ("3-1", "a <= b"),
        ("0-3,3-5", "label 3 is in group 0 and group 1"),
        ("1+1", "label 1"),
        ("a", "'a'"),
        ("-1", "'-1'"),
        ("0;1", "'0;1'"),
        ("1-2-3", "'1-2-3'"),
    ],
)
def test_parse_class_groups_errors(spec: str, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        parse_class_groups(spec)


def test_parse_class_groups_not_string() -> None:
    with pytest.raises(ValidationError, match="'spec'"):
        parse_class_groups([[0, 1]])  # type: ignore[arg-type]


@FAST
@given(
    st.lists(
        st.lists(st.integers(0, 40), min_size=1, max_size=5, unique=True), min_size=1, max_size=6
    )
)
def test_parse_class_groups_round_trip(groups: list[list[int]]) -> None:
    seen: set[int] = set()
    disjoint = []
    for g in groups:
        g = [x for x in g if x not in seen]
        seen.update(g)
        if g:
            disjoint.append(g)
    spec = ",".join("+".join(str(x) for x in g) for g in disjoint)
    assert parse_class_groups(spec) == disjoint


def test_partition_by_class_matches_spec_exactly() -> None:
    y = labels_10(per_class=7, seed=3)
    y_before = y.copy()
    parts = partition_by_class(y, "0-3,4-6,7-9", random_state=0)
    assert_partition(parts, y.size)
    groups = [{0, 1, 2, 3}, {4, 5, 6}, {7, 8, 9}]
    for part, group in zip(parts, groups, strict=True):
        expected = np.flatnonzero([label in group for label in y])
        np.testing.assert_array_equal(part, expected)
        assert set(y[part].tolist()) == group
    assert [p.size for p in parts] == [28, 21, 21]
    np.testing.assert_array_equal(y, y_before)
    as_lists = partition_by_class(y, [[0, 1, 2, 3], (4, 5, 6), np.array([7, 8, 9])])
    assert same_parts(parts, as_lists)
    plus = partition_by_class(y, "0+2,1+3")
    assert [set(y[p].tolist()) for p in plus] == [{0, 2}, {1, 3}]


def test_partition_by_class_unassigned_labels() -> None:
    y = labels_10(per_class=3)
    parts = partition_by_class(y, "0-3,4-6")
    assert_partition(parts, y.size, covers=False)
    assert sum(p.size for p in parts) == 21  # labels 7, 8, 9 are in no party
    assert not np.isin(y[np.concatenate(parts)], [7, 8, 9]).any()


@pytest.mark.parametrize(
    ("y", "groups", "match"),
    [
        (labels_10(2), "0-3,4-10", r"'groups'.*group 1 names \[10\]"),
        (labels_10(2), [[0, 1], [1, 2]], r"'groups\[1\]'.*label 1"),
        (labels_10(2), [[0, 1], []], r"'groups\[1\]'"),
        (labels_10(2), [[0, 1.0]], r"'groups\[0\]'"),
        (labels_10(2), [], "'groups'"),
        (labels_10(2), "0-3,3", "label 3"),
        (labels_10(2).astype(float), "0-3", "'y'"),
        (labels_10(2).reshape(4, 5), "0-3", "'y'"),
        (np.array([], dtype=int), "0", "'y'"),
    ],
)
def test_partition_by_class_errors(y: np.ndarray, groups: Any, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        partition_by_class(y, groups)


# ---------------------------------------------------------------------------- Dirichlet


def mean_label_entropy(y: np.ndarray, parts: list[np.ndarray]) -> float:
    table = partition_summary(y, parts).astype(float)
    probs = table / table.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.nansum(np.where(probs > 0, probs * np.log(probs), 0.0), axis=1)
    return float(ent.mean())


def test_partition_dirichlet_basic_and_reproducible() -> None:
    y = labels_10(per_class=100)
    y_before = y.copy()
    parts = partition_dirichlet(y, 8, 0.5, random_state=11)
    assert len(parts) == 8
    assert_partition(parts, y.size)
    assert min(p.size for p in parts) >= 10
    assert same_parts(parts, partition_dirichlet(y, 8, 0.5, random_state=11))
    assert not same_parts(parts, partition_dirichlet(y, 8, 0.5, random_state=12))
    np.testing.assert_array_equal(y, y_before)
    readonly = y.copy()
    readonly.setflags(write=False)
    assert same_parts(parts, partition_dirichlet(readonly, 8, 0.5, random_state=11))


def test_partition_dirichlet_skew_depends_on_alpha() -> None:
    y = labels_10(per_class=200)
    small = [
        mean_label_entropy(y, partition_dirichlet(y, 10, 0.05, min_size=0, random_state=s))
        for s in range(3)
    ]
    large = [
        mean_label_entropy(y, partition_dirichlet(y, 10, 100.0, random_state=s)) for s in range(3)
    ]
    assert np.mean(large) > math.log(10) - 0.05  # close to uniform over 10 classes
    assert np.mean(small) < 1.3  # a handful of dominant classes per party
    assert np.mean(small) + 1.0 < np.mean(large)


def test_partition_dirichlet_min_size_honoured() -> None:
    y = labels_10(per_class=100)
    for seed in range(5):
        parts = partition_dirichlet(y, 10, 0.1, min_size=30, max_tries=1000, random_state=seed)
        assert_partition(parts, y.size)
        assert min(p.size for p in parts) >= 30


def test_partition_dirichlet_gives_up_clearly() -> None:
    y = labels_10(per_class=20)
    with pytest.raises(ValidationError) as info:
        partition_dirichlet(y, 10, 0.001, min_size=20, max_tries=3, random_state=0)
    message = str(info.value)
    assert "alpha=0.001" in message and "min_size=20" in message and "max_tries=3" in message


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (
            (10, -1),
            {},
            r"^The 'alpha' parameter of partition_dirichlet must be a float in "
            r"\(0, inf\)\. Got -1 instead\.$",
        ),
        ((10, 0.0), {}, "'alpha'"),
        ((10, float("nan")), {}, "'alpha'"),
        ((10, float("inf")), {}, "'alpha'"),
        ((10, "1"), {}, "'alpha'"),
        ((0, 1.0), {}, "'n_parties'"),
        ((101, 1.0), {}, "'n_parties'"),
        ((10, 1.0), {"min_size": 11}, r"'min_size'.*\[0, 10\]"),
        ((10, 1.0), {"min_size": -1}, "'min_size'"),
        ((10, 1.0), {"max_tries": 0}, "'max_tries'"),
    ],
)
def test_partition_dirichlet_errors(
    args: tuple[Any, ...], kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValidationError, match=match):
        partition_dirichlet(labels_10(per_class=10), *args, **kwargs)


@FAST
@given(
    labels=st.lists(st.integers(0, 4), min_size=1, max_size=120),
    data_=st.data(),
    alpha=st.floats(0.01, 100.0),
    seed=st.integers(0, 1000),
)
def test_partition_dirichlet_property(
    labels: list[int], data_: st.DataObject, alpha: float, seed: int
) -> None:
    y = np.array(labels)
    k = data_.draw(st.integers(1, min(8, y.size)))
    parts = partition_dirichlet(y, k, alpha, min_size=0, random_state=seed)
    assert len(parts) == k
    assert_partition(parts, y.size)


# ------------------------------------------------------------------------------- shards


def test_partition_shards_pathological_split() -> None:
    y = labels_10(per_class=100)
    parts = partition_shards(y, 10, 2, random_state=4)
    assert_partition(parts, y.size)
    assert all(p.size == 100 for p in parts)
    for p in parts:  # shards of 50 never straddle a class: at most 2 classes per party
        assert len(np.unique(y[p])) <= 2
    table = partition_summary(y, parts)
    assert np.all(table.sum(axis=0) == 100)
    assert same_parts(parts, partition_shards(y, 10, 2, random_state=4))
    assert not same_parts(parts, partition_shards(y, 10, 2, random_state=5))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0,), "'n_parties'"),
        ((10, 11), r"'shards_per_party'.*\[1, 10\]"),
        ((10, 0), "'shards_per_party'"),
        ((101,), "'n_parties'"),
    ],
)
def test_partition_shards_errors(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        partition_shards(labels_10(per_class=10), *args)


@FAST
@given(
    labels=st.lists(st.integers(0, 5), min_size=1, max_size=200),
    data_=st.data(),
    seed=st.integers(0, 1000),
)
def test_partition_shards_property(labels: list[int], data_: st.DataObject, seed: int) -> None:
    y = np.array(labels)
    k = data_.draw(st.integers(1, y.size))
    spp = data_.draw(st.integers(1, y.size // k))
    parts = partition_shards(y, k, spp, random_state=seed)
    assert len(parts) == k
    assert_partition(parts, y.size)
    sizes = [p.size for p in parts]
    # each party holds spp shards whose sizes differ by at most one
    assert max(sizes) - min(sizes) <= spp
    assert same_parts(parts, partition_shards(y, k, spp, random_state=seed))


# --------------------------------------------------------------------------- unbalanced


def test_partition_unbalanced_explicit_sizes() -> None:
    for sizes in ([10, 30, 60], [0.1, 0.3, 0.6], np.array([1, 3, 6])):
        parts = partition_unbalanced(100, 3, sizes=sizes, random_state=0)
        assert_partition(parts, 100)
        assert [p.size for p in parts] == [10, 30, 60]
    parts = partition_unbalanced(10, 3, sizes=[1, 1, 1], random_state=0)
    assert sorted(p.size for p in parts) == [3, 3, 4]
    zero = partition_unbalanced(10, 2, sizes=[0, 5], min_size=0, random_state=0)
    assert [p.size for p in zero] == [0, 10]


def test_partition_unbalanced_lognormal() -> None:
    parts = partition_unbalanced(1000, 20, sigma=1.5, min_size=5, random_state=3)
    assert_partition(parts, 1000)
    sizes = np.array([p.size for p in parts])
    assert sizes.min() >= 5
    assert same_parts(parts, partition_unbalanced(1000, 20, sigma=1.5, min_size=5, random_state=3))
    assert not same_parts(
        parts, partition_unbalanced(1000, 20, sigma=1.5, min_size=5, random_state=4)
    )
    equal = [p.size for p in partition_unbalanced(1000, 20, sigma=0.0, random_state=3)]
    assert equal == [50] * 20

    def spread(sigma: float) -> float:
        s = np.array([p.size for p in partition_unbalanced(2000, 20, sigma=sigma, random_state=9)])
        return float(s.std() / s.mean())

    assert spread(2.0) > spread(0.2) + 0.3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sizes": [1, 2]}, "'sizes'"),
        ({"sizes": [1, -1, 2]}, "'sizes'"),
        ({"sizes": [0, 0, 0]}, "'sizes'"),
        ({"sizes": [1, float("nan"), 1]}, "'sizes'"),
        ({"sizes": ["a", "b", "c"]}, "'sizes'"),
        ({"sizes": [0, 1, 1]}, r"'sizes'.*min_size=1"),
        ({"sizes": [1, 1, 1], "min_size": 4}, "'min_size'"),
        ({"sigma": -0.5}, r"'sigma'.*\[0, inf\)"),
        ({"min_size": -1}, "'min_size'"),
    ],
)
def test_partition_unbalanced_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        partition_unbalanced(10, 3, **kwargs)


@FAST
@given(n=st.integers(1, 300), data_=st.data(), sigma=st.floats(0.0, 3.0), seed=st.integers(0, 1000))
def test_partition_unbalanced_property(
    n: int, data_: st.DataObject, sigma: float, seed: int
) -> None:
    k = data_.draw(st.integers(1, min(n, 30)))
    min_size = data_.draw(st.integers(0, n // k))
    parts = partition_unbalanced(n, k, sigma=sigma, min_size=min_size, random_state=seed)
    assert len(parts) == k
    assert_partition(parts, n)
    assert min(p.size for p in parts) >= min_size


# ------------------------------------------------------------------------------ summary


def test_partition_summary() -> None:
    y = np.array([0, 1, 1, 2, 2, 2])
    table = partition_summary(y, [np.array([0, 1]), np.array([2, 3, 4, 5])])
    assert table.dtype == np.int64
    np.testing.assert_array_equal(table, [[1, 1, 0], [0, 1, 3]])
    wide = partition_summary(y, [np.array([], dtype=np.intp)], n_classes=5)
    np.testing.assert_array_equal(wide, [[0, 0, 0, 0, 0]])
    with pytest.raises(ValidationError, match="'n_classes'"):
        partition_summary(y, [np.array([0])], n_classes=2)
    with pytest.raises(ValidationError, match=r"'parts\[0\]'.*\[0, 6\)"):
        partition_summary(y, [np.array([6])])
    with pytest.raises(ValidationError, match=r"'parts\[0\]'"):
        partition_summary(y, [np.array([0.5])])
    with pytest.raises(ValidationError, match="'y'"):
        partition_summary(np.array([-1, 0]), [np.array([0])])
