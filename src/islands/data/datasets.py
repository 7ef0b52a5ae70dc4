"""Data sets the examples and experiments run on, read from files already on disk.

Nothing here downloads anything. Fashion-MNIST is read from the original IDX files
(Debian's ``dataset-fashion-mnist`` package installs them under
``/usr/share/datasets/fashion-mnist``); the small scikit-learn sets come from the copies
bundled inside scikit-learn itself.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from islands.errors import DataNotFoundError, ValidationError, invalid_parameter
from islands.validation import check_int, describe

__all__ = [
    "DATASET_NAMES",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_DEFAULT",
    "FASHION_MNIST_ENV",
    "SKLEARN_DATASETS",
    "Dataset",
    "find_fashion_mnist",
    "load",
    "load_fashion_mnist",
    "load_sklearn",
    "read_idx",
]

FASHION_MNIST_DEFAULT = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package installs the Fashion-MNIST files."""

FASHION_MNIST_ENV = "ISLANDS_FASHION_MNIST"
"""Environment variable naming the Fashion-MNIST directory when no ``path`` is given."""

FASHION_MNIST_CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
"""Names of the ten Fashion-MNIST classes, indexed by label."""

SKLEARN_DATASETS: tuple[str, ...] = ("breast_cancer", "diabetes", "digits", "wine")
"""Names accepted by :func:`load_sklearn`."""

DATASET_NAMES: tuple[str, ...] = ("fashion_mnist", *SKLEARN_DATASETS)
"""Names accepted by :func:`load`."""

_FASHION_FILES: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_FASHION_IMAGE_SHAPE = (28, 28)

# IDX data type codes and the big-endian dtypes they stand for.
_IDX_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CHUNK = 1 << 20


@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled data set held in memory.

    Parameters
    ----------
    X
        Features, one row per sample: ``n_samples x n_features`` (``float64`` unless
        the loader says otherwise), or ``n_samples x h x w`` for unflattened images.
    y
        Targets, one per sample: ``int64`` class labels, or ``float64`` values for a
        regression set.
    name
        Name of the data set, e.g. ``"fashion_mnist"``.
    image_shape
        ``(height, width)`` when each row is an image, else ``None``.
    classes
        Class names indexed by label, or ``None`` for a regression set.

    Raises
    ------
    ValidationError
        If ``X`` is not at least 2-D, ``y`` is not 1-D with one entry per row of ``X``,
        or ``image_shape`` does not match the shape of ``X``.
    """

    X: NDArray[Any]
    y: NDArray[np.int64] | NDArray[np.float64]
    name: str
    image_shape: tuple[int, int] | None = None
    classes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.X, np.ndarray) or self.X.ndim < 2:
            raise invalid_parameter(
                "X", "Dataset", "an array with at least 2 dimensions", describe(self.X)
            )
        if not isinstance(self.y, np.ndarray) or self.y.shape != (self.X.shape[0],):
            raise invalid_parameter(
                "y",
                "Dataset",
                f"a 1-D array of length {self.X.shape[0]} (rows of X)",
                describe(self.y),
            )
        if self.image_shape is not None:
            h, w = self.image_shape
            if self.X.shape[1:] not in ((h * w,), (h, w)):
                raise invalid_parameter(
                    "image_shape",
                    "Dataset",
                    f"a (height, width) matching X's shape {self.X.shape}",
                    self.image_shape,
                )

    @property
    def n_samples(self) -> int:
        """Number of samples (rows of ``X``)."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Number of features per sample (pixels, for unflattened images)."""
        return math.prod(int(d) for d in self.X.shape[1:])


# ---------------------------------------------------------------------------- IDX files


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


def _read_at_most(stream: _Readable, limit: int) -> bytes:
    """Read up to ``limit`` bytes in bounded chunks, so memory follows the real file size."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = stream.read(min(remaining, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _parse_idx(stream: _Readable, path: Path) -> NDArray[Any]:
    header = _read_at_most(stream, 4)
    if len(header) < 4:
        raise ValidationError(
            f"{path} is not an IDX file: it holds {len(header)} bytes, fewer than the "
            "4-byte magic number."
        )
    if header[:2] != b"\x00\x00":
        raise ValidationError(
            f"{path} is not an IDX file: its magic number must start with two zero bytes, "
            f"got 0x{header[:2].hex()}."
        )
    code, ndim = header[2], header[3]
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise ValidationError(
            f"{path} has an unknown IDX data type code 0x{code:02X}; expected one of {known}."
        )
    if ndim == 0:
        raise ValidationError(f"{path} declares 0 dimensions; an IDX file needs at least 1.")
    dim_bytes = _read_at_most(stream, 4 * ndim)
    if len(dim_bytes) < 4 * ndim:
        raise ValidationError(
            f"{path} has a truncated IDX header: {ndim} dimensions need {4 * ndim} bytes, "
            f"got {len(dim_bytes)}."
        )
    dims = struct.unpack(f">{ndim}I", dim_bytes)
    dtype = _IDX_DTYPES[code]
    expected = dtype.itemsize * math.prod(dims)  # Python int: cannot overflow
    # Never allocate from the header's word: read at most one byte past what it promises.
    data = _read_at_most(stream, expected + 1)
    if len(data) != expected:
        held = f"more than {expected}" if len(data) > expected else str(len(data))
        raise ValidationError(
            f"{path} has dimensions {dims} of {dtype.name} that need {expected} data bytes, "
            f"but the file holds {held}."
        )
    big_endian = np.frombuffer(data, dtype=dtype)
    return big_endian.astype(dtype.newbyteorder("="), copy=True).reshape(dims)


def read_idx(path: str | os.PathLike[str]) -> NDArray[Any]:
    """Read an array stored in the IDX format of the original MNIST files.

    An IDX file starts with a big-endian magic number (two zero bytes, a data type code
    and the number of dimensions), then each dimension as a big-endian ``uint32``, then
    the values in row-major order. Gzip-compressed files (as distributed) are
    recognised by their content and decompressed on the fly.

    Parameters
    ----------
    path
        The file to read, plain or gzip-compressed.

    Returns
    -------
    numpy.ndarray
        A new, writable, native-endian array of the declared shape, with dtype
        ``uint8`` (code 0x08), ``int8`` (0x09), ``int16`` (0x0B), ``int32`` (0x0C),
        ``float32`` (0x0D) or ``float64`` (0x0E).

    Raises
    ------
    DataNotFoundError
        If ``path`` does not exist.
    ValidationError
        If the file is not valid IDX: a bad magic number, an unknown data type code, a
        truncated header, or a data length that does not match the dimensions (too
        short or too long), or a corrupt gzip stream. The message names the file.

    Notes
    -----
    The dimensions in the header are not trusted: the data are read in bounded chunks
    and at most one byte beyond the declared length, so a header that lies about its
    size cannot make the reader allocate more than the file really holds.

    References
    ----------
    .. [1] Y. LeCun, C. Cortes and C. J. C. Burges, "The MNIST database of handwritten
       digits", file format section, http://yann.lecun.com/exdb/mnist/.
    """
    file = Path(path)
    try:
        with file.open("rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            if not compressed:
                return _parse_idx(raw, file)
            with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                return _parse_idx(unzipped, file)
    except FileNotFoundError:
        raise DataNotFoundError(f"IDX file {file} does not exist.") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise ValidationError(f"{file} is not a valid gzip-compressed IDX file: {exc}") from exc


# ------------------------------------------------------------------------ Fashion-MNIST


def _fashion_directory(path: str | os.PathLike[str] | None) -> Path:
    if path is not None:
        return Path(path)
    from_env = os.environ.get(FASHION_MNIST_ENV)
    return Path(from_env) if from_env else FASHION_MNIST_DEFAULT


def _find_file(directory: Path, stem: str) -> Path | None:
    for name in (f"{stem}.gz", stem):
        candidate = directory / name
        if candidate.is_file():
            return candidate
    return None


def _split_files(directory: Path, split: str) -> tuple[Path, Path] | None:
    images, labels = (_find_file(directory, stem) for stem in _FASHION_FILES[split])
    if images is None or labels is None:
        return None
    return images, labels


def find_fashion_mnist(path: str | os.PathLike[str] | None = None) -> Path | None:
    """Return the directory holding Fashion-MNIST, or ``None`` when it is not there.

    Parameters
    ----------
    path
        Directory to look in. When ``None``, the directory named by the environment
        variable ``ISLANDS_FASHION_MNIST`` is used if set, else
        :data:`FASHION_MNIST_DEFAULT` (``/usr/share/datasets/fashion-mnist``).

    Returns
    -------
    pathlib.Path or None
        The directory, when it holds the images and labels of both the train and test
        splits (each gzip-compressed, ``*-ubyte.gz``, or plain, ``*-ubyte``); otherwise
        ``None``. The files' contents are not checked.
    """
    directory = _fashion_directory(path)
    if all(_split_files(directory, split) is not None for split in _FASHION_FILES):
        return directory
    return None


def _not_found(directory: Path, split: str) -> DataNotFoundError:
    images, labels = _FASHION_FILES[split]
    return DataNotFoundError(
        f"Fashion-MNIST {split} files not found in {directory} (looked for {images}[.gz] "
        f"and {labels}[.gz]). On Debian or Ubuntu install the package "
        f"dataset-fashion-mnist (`apt-get install dataset-fashion-mnist`), which puts them "
        f"in {FASHION_MNIST_DEFAULT}; or pass path= the directory that holds them, or set "
        f"the {FASHION_MNIST_ENV} environment variable to it."
    )


def load_fashion_mnist(
    path: str | os.PathLike[str] | None = None,
    *,
    split: Literal["train", "test"] = "train",
    flatten: bool = True,
    normalize: bool = True,
    n_samples: int | None = None,
) -> Dataset:
    """Load Fashion-MNIST from its original IDX files.

    Parameters
    ----------
    path
        Directory holding ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
        ``t10k-images-idx3-ubyte.gz`` and ``t10k-labels-idx1-ubyte.gz`` (or the same
        names without ``.gz``). When ``None``: the environment variable
        ``ISLANDS_FASHION_MNIST`` if set, else ``/usr/share/datasets/fashion-mnist``.
    split
        ``"train"`` (60,000 images) or ``"test"`` (10,000 images).
    flatten
        If true, ``X`` is ``n x 784`` (each image in row-major order); else ``n x 28 x 28``.
    normalize
        If true, ``X`` is ``float64`` with pixel values scaled to ``[0, 1]``; if false,
        ``X`` holds the raw pixel values as ``uint8`` in ``[0, 255]``.
    n_samples
        Keep only the first ``n_samples`` images of the split (deterministic); ``None``
        keeps them all.

    Returns
    -------
    Dataset
        ``name="fashion_mnist"``, ``y`` the ``int64`` labels 0-9,
        ``image_shape=(28, 28)`` and the ten class names in ``classes``.

    Raises
    ------
    DataNotFoundError
        If the split's files are not in the directory; the message names the directory,
        the Debian package ``dataset-fashion-mnist``, ``path=`` and the environment
        variable.
    ValidationError
        If an argument is invalid, or the files are not the IDX arrays expected
        (``uint8`` images of 28 x 28, one ``uint8`` label in 0-9 per image).

    References
    ----------
    .. [1] H. Xiao, K. Rasul and R. Vollgraf, "Fashion-MNIST: a Novel Image Dataset for
       Benchmarking Machine Learning Algorithms", arXiv:1708.07747, 2017.
    """
    owner = "load_fashion_mnist"
    if split not in _FASHION_FILES:
        raise invalid_parameter("split", owner, "'train' or 'test'", split)
    if n_samples is not None:
        n_samples = check_int(n_samples, "n_samples", owner, low=1)
    directory = _fashion_directory(path)
    files = _split_files(directory, split)
    if files is None:
        raise _not_found(directory, split)
    image_file, label_file = files
    images = read_idx(image_file)
    labels = read_idx(label_file)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != _FASHION_IMAGE_SHAPE:
        raise ValidationError(
            f"{image_file} must hold uint8 images of shape n x 28 x 28; it holds "
            f"{images.dtype} of shape {images.shape}."
        )
    if labels.dtype != np.uint8 or labels.shape != (images.shape[0],):
        raise ValidationError(
            f"{label_file} must hold {images.shape[0]} uint8 labels, one per image in "
            f"{image_file.name}; it holds {labels.dtype} of shape {labels.shape}."
        )
    if labels.size and int(labels.max()) >= len(FASHION_MNIST_CLASSES):
        raise ValidationError(
            f"{label_file} holds label {int(labels.max())}; Fashion-MNIST labels are 0-9."
        )
    if n_samples is not None:
        if n_samples > images.shape[0]:
            raise invalid_parameter(
                "n_samples", owner, f"an int in [1, {images.shape[0]}] or None", n_samples
            )
        images, labels = images[:n_samples], labels[:n_samples]
    X: NDArray[Any] = images.astype(np.float64) / 255.0 if normalize else images.copy()
    if flatten:
        X = X.reshape(X.shape[0], -1)
    return Dataset(
        X=X,
        y=labels.astype(np.int64),
        name="fashion_mnist",
        image_shape=_FASHION_IMAGE_SHAPE,
        classes=FASHION_MNIST_CLASSES,
    )


# ------------------------------------------------------------------ scikit-learn bundled


def load_sklearn(name: str) -> Dataset:
    """Load one of the small data sets bundled with scikit-learn (no download).

    Parameters
    ----------
    name
        ``"digits"`` (1797 x 64 images of 8 x 8, 10 classes), ``"breast_cancer"``
        (569 x 30, 2 classes), ``"wine"`` (178 x 13, 3 classes) or ``"diabetes"``
        (442 x 10, regression).

    Returns
    -------
    Dataset
        ``X`` as ``float64``; ``y`` as ``int64`` labels with the class names in
        ``classes``, except for ``"diabetes"`` whose ``y`` is the ``float64`` target
        and ``classes`` is ``None``. ``image_shape`` is ``(8, 8)`` for ``"digits"``.

    Raises
    ------
    ValidationError
        If ``name`` is not one of the names above; the message lists them.

    Notes
    -----
    scikit-learn is imported only when this function is called, so that importing
    :mod:`islands.data` stays light.
    """
    if name not in SKLEARN_DATASETS:
        raise invalid_parameter("name", "load_sklearn", f"one of {SKLEARN_DATASETS}", name)
    from sklearn import datasets as skd

    loaders: dict[str, Callable[[], Any]] = {
        "breast_cancer": skd.load_breast_cancer,
        "diabetes": skd.load_diabetes,
        "digits": skd.load_digits,
        "wine": skd.load_wine,
    }
    bunch = loaders[name]()
    X = np.array(bunch.data, dtype=np.float64, copy=True)
    if name == "diabetes":
        return Dataset(X=X, y=np.array(bunch.target, dtype=np.float64, copy=True), name=name)
    return Dataset(
        X=X,
        y=np.array(bunch.target, dtype=np.int64, copy=True),
        name=name,
        image_shape=(8, 8) if name == "digits" else None,
        classes=tuple(str(c) for c in bunch.target_names),
    )


def load(name: str, **kwargs: Any) -> Dataset:
    """Load a data set by name.

    Parameters
    ----------
    name
        ``"fashion_mnist"`` (see :func:`load_fashion_mnist`) or one of
        :data:`SKLEARN_DATASETS` (see :func:`load_sklearn`).
    **kwargs
        Keyword arguments for :func:`load_fashion_mnist` (``path``, ``split``,
        ``flatten``, ``normalize``, ``n_samples``). The scikit-learn sets take none.

    Returns
    -------
    Dataset
        The loaded data set.

    Raises
    ------
    ValidationError
        If ``name`` is unknown (the message lists the valid names) or keyword
        arguments are given for a scikit-learn set.
    DataNotFoundError
        If Fashion-MNIST is asked for and its files are not found.
    """
    if name == "fashion_mnist":
        return load_fashion_mnist(**kwargs)
    if name in SKLEARN_DATASETS:
        if kwargs:
            raise invalid_parameter(
                "kwargs", "load", f"no keyword arguments for {name!r}", sorted(kwargs)
            )
        return load_sklearn(name)
    raise invalid_parameter("name", "load", f"one of {DATASET_NAMES}", name)
