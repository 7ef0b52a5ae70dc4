"""Row sources read in blocks, so that a party's data never has to fit in memory at once.

A federated PCA site fits in ``O(d²)`` memory whatever its number of rows by streaming
its data: one pass for the column sums (centring), a second for the second moment and a
third for the projection. :func:`open_source` turns whatever a site holds into a
:class:`BlockSource` that can be read that way, pass after pass:

* a 2-D numeric array (including a :class:`numpy.memmap`);
* a list or tuple of 2-D arrays (large items are cut into blocks);
* a function returning a fresh iterable of 2-D arrays each time it is called;
* an iterator or generator of 2-D arrays (one pass only);
* the path of a ``.npy`` file (memory-mapped), a ``.parquet`` / ``.pq`` file (read by
  pyarrow, from the ``islands[data]`` extra) or a ``.csv`` / ``.txt`` file of
  comma-separated numbers.

Every block is checked as it is read: two dimensions, numbers, the same columns as the
first block, no NaN or infinity and no magnitude above
:data:`~islands.validation.MAX_ABS_FLOAT` (about 6.4e147, beyond which sums of squares
overflow float64). Importing this module loads only NumPy; pyarrow is
imported when a Parquet file is opened.
"""

from __future__ import annotations

import csv
import itertools
import os
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from islands.errors import DataNotFoundError, ValidationError, invalid_parameter
from islands.validation import check_int, check_values, describe

__all__ = ["SOURCE_EXTENSIONS", "BlockSource", "RowSource", "open_source"]

RowSource: TypeAlias = (
    NDArray[Any]
    | Sequence[NDArray[Any]]
    | Callable[[], Iterable[NDArray[Any]]]
    | Iterator[NDArray[Any]]
    | str
    | os.PathLike[str]
)
"""What :func:`open_source` accepts: an array, blocks, a block factory, an iterator or a path."""

SOURCE_EXTENSIONS: tuple[str, ...] = (".npy", ".parquet", ".pq", ".csv", ".txt")
"""File name extensions :func:`open_source` can read (compared case-insensitively)."""

_NUMERIC_KINDS = "biuf"
_CSV_OPTIONS: dict[str, Any] = {
    "delimiter": ",",
    "dtype": np.float64,
    "ndmin": 2,
    "comments": None,
    "quotechar": '"',
}
_SHOWN_CHARS = 80

_RawReader: TypeAlias = Callable[[], Iterable[Any]]


class BlockSource:
    """Rows read block by block, in one or several passes.

    Usually made by :func:`open_source`. Each call of :meth:`blocks` is a new pass over
    all the rows, in the same order, except for a one-shot source (made from an iterator
    or a generator), which can be read only once.

    Parameters
    ----------
    name
        What to call the source in error messages, e.g. ``"site 3"``.
    n_features
        Number of columns of every block (at least 1).
    n_rows
        Number of rows, or ``None`` when it is not known before reading (CSV files,
        iterables); it is filled in when a pass has read every row.
    block_size
        Largest number of rows in one block (at least 1).
    reader
        Function called at each pass, returning an iterable of raw blocks: 2-D
        array-likes with ``n_features`` columns and any number of rows. Blocks larger
        than ``block_size`` are cut; every block is checked and converted by
        :meth:`blocks`.
    one_shot
        Whether ``reader`` can be called only once (its data is consumed by reading).

    Raises
    ------
    ValidationError
        If a parameter is out of range.
    """

    __slots__ = ("_block_size", "_n_features", "_n_rows", "_name", "_one_shot", "_reader", "_spent")

    def __init__(
        self,
        name: str,
        n_features: int,
        n_rows: int | None,
        block_size: int,
        reader: _RawReader,
        *,
        one_shot: bool = False,
    ):
        if not isinstance(name, str):
            raise invalid_parameter("name", "BlockSource", "a str", describe(name))
        self._name = name
        self._n_features = check_int(n_features, "n_features", "BlockSource", low=1)
        self._n_rows = None if n_rows is None else check_int(n_rows, "n_rows", "BlockSource", low=0)
        self._block_size = check_int(block_size, "block_size", "BlockSource", low=1)
        if not callable(reader):
            raise invalid_parameter("reader", "BlockSource", "a callable", describe(reader))
        self._reader = reader
        self._one_shot = bool(one_shot)
        self._spent = False

    @property
    def name(self) -> str:
        """What the source is called in error messages."""
        return self._name

    @property
    def n_features(self) -> int:
        """Number of columns of every block."""
        return self._n_features

    @property
    def n_rows(self) -> int | None:
        """Number of rows, or ``None`` until a pass has read them all when not known before."""
        return self._n_rows

    @property
    def block_size(self) -> int:
        """Largest number of rows in one block."""
        return self._block_size

    @property
    def reusable(self) -> bool:
        """Whether :meth:`blocks` can be called several times (``False`` for a one-shot source)."""
        return not self._one_shot

    def __repr__(self) -> str:
        return (
            f"BlockSource(name={self._name!r}, n_features={self._n_features}, "
            f"n_rows={self._n_rows}, block_size={self._block_size}, "
            f"reusable={self.reusable})"
        )

    def blocks(self) -> Iterator[NDArray[np.float64]]:
        """Start a pass over the rows and return an iterator over their blocks.

        Each block is a C-contiguous 2-D ``float64`` array of at most
        :attr:`block_size` rows and :attr:`n_features` columns. A block is either a
        fresh array, which nothing else refers to, or a **read-only** view: of the data
        given to :func:`open_source` (an array, a memory-mapped file, or a block from a
        list, function or iterator that already was C-contiguous ``float64``) or of a
        larger block read from a file. The data given is never modified; copy a block
        before changing it in place.

        Returns
        -------
        Iterator[NDArray[np.float64]]
            The blocks of this pass, in row order.

        Raises
        ------
        ValidationError
            Immediately, if the source is one-shot and a pass was already started. While
            iterating, if a block is not 2-D, does not hold numbers, does not have
            :attr:`n_features` columns or contains NaN, infinity or a magnitude above
            :data:`~islands.validation.MAX_ABS_FLOAT` (the message names the source,
            the row, counted from 0 over the whole pass, and the column), or if the pass
            does not give as many rows as an earlier one.
        """
        if self._one_shot:
            if self._spent:
                raise ValidationError(
                    f"{self._name} is an iterator, which can be read only once; pass a list "
                    "of blocks or a function returning a fresh iterator to read it several "
                    "times."
                )
            self._spent = True
        return self._pass()

    def _pass(self) -> Iterator[NDArray[np.float64]]:
        raw_blocks = iter(self._reader())
        size = self._block_size
        row = 0
        try:
            for index, raw in enumerate(raw_blocks):
                arr = _check_raw_block(raw, index, self._name, self._n_features)
                for start in range(0, arr.shape[0], size):
                    block = _float_block(arr[start : start + size])
                    check_values(block, self._name, None, first_row=row)
                    row += block.shape[0]
                    yield block
        finally:
            close = getattr(raw_blocks, "close", None)
            if callable(close):
                close()
        if self._n_rows is None:
            self._n_rows = row
        elif row != self._n_rows:
            raise ValidationError(
                f"{self._name} gave {row} rows on this pass but {self._n_rows} before; a "
                "source read several times must give the same rows each time."
            )


def open_source(source: RowSource, *, block_size: int = 8192, name: str = "data") -> BlockSource:
    """Open rows held in memory, produced by code or stored in a file, to read in blocks.

    Parameters
    ----------
    source
        The rows, one of:

        * a 2-D numeric array; blocks are slices of it (read-only views when it is
          already C-contiguous ``float64``, converted copies otherwise);
        * a list or tuple of 2-D numeric arrays with the same number of columns; items
          with more than ``block_size`` rows are cut into blocks;
        * a function taking no argument and returning an iterable of 2-D arrays; it is
          called once here (to learn the number of columns) and once at each pass, and
          must give the same rows every time;
        * an iterator or generator of 2-D arrays, which can be read only once: its first
          block is read here, the rest by the single pass;
        * the path of a file: ``.npy`` (memory-mapped, so only the blocks being read
          are loaded), ``.parquet`` or ``.pq`` (every column numeric; needs pyarrow, from
          the ``islands[data]`` extra) or ``.csv`` or ``.txt`` (see Notes).
    block_size
        Largest number of rows in one block.
    name
        What to call the source in error messages, e.g. ``"site 3"``.

    Returns
    -------
    BlockSource
        The opened source. Its ``n_rows`` is known for arrays, lists, ``.npy`` and
        Parquet files, and ``None`` for CSV files, functions and iterators until a pass
        has read every row.

    Raises
    ------
    ValidationError
        If ``block_size`` is not an int of at least 1, ``source`` is of an unsupported
        type or file extension, or the data (as far as read here) is not 2-D numbers
        with at least one column.
    DataNotFoundError
        If ``source`` is the path of a file that does not exist.
    ImportError
        If ``source`` is a Parquet file and pyarrow is not installed.

    Notes
    -----
    A CSV file holds one row per line, its numbers separated by commas. Blank lines and
    lines starting with ``#`` are skipped. When the first other line is not all numbers
    it is a header, and is skipped too. The file is read ``block_size`` lines at a time,
    never all at once; a cell that is not a number is reported with its line number
    (counted from 1, as in an editor) when the pass reaches it.

    Examples
    --------
    >>> import numpy as np
    >>> src = open_source(np.arange(10.0).reshape(5, 2), block_size=2, name="site 1")
    >>> [block.shape for block in src.blocks()]
    [(2, 2), (2, 2), (1, 2)]
    >>> sum(block.sum(axis=0) for block in src.blocks())
    array([20., 25.])
    """
    block_size = check_int(block_size, "block_size", "open_source", low=1)
    if not isinstance(name, str):
        raise invalid_parameter("name", "open_source", "a str", describe(name))
    if isinstance(source, np.ndarray):
        return _open_array(source, block_size, name)
    if isinstance(source, (str, os.PathLike)):
        return _open_path(Path(os.fspath(source)), block_size, name)
    if isinstance(source, Iterator):
        return _open_iterator(source, block_size, name)
    if isinstance(source, Sequence) and not isinstance(source, (bytes, bytearray)):
        return _open_sequence(source, block_size, name)
    if callable(source):
        return _open_callable(source, block_size, name)
    raise invalid_parameter(
        "source",
        "open_source",
        "a 2-D array, a list of 2-D arrays, a function returning an iterable of 2-D "
        "arrays, an iterator of 2-D arrays or the path of a "
        f"{', '.join(SOURCE_EXTENSIONS)} file",
        describe(source),
    )


# ---------------------------------------------------------------------------- checks


def _check_array(arr: NDArray[Any], what: str) -> None:
    """Check ``arr`` is 2-D, numeric and has at least one column; ``what`` names it."""
    if arr.ndim != 2:
        raise ValidationError(
            f"{what} is {arr.ndim}-D with shape {arr.shape}; it must be a 2-D array of "
            "rows x columns (reshape a single row with x.reshape(1, -1) or a single "
            "column with x.reshape(-1, 1))."
        )
    if arr.dtype.kind not in _NUMERIC_KINDS:
        raise ValidationError(
            f"{what} has dtype {arr.dtype}; it must hold numbers (bool, integer or float)."
        )
    if arr.shape[1] == 0:
        raise ValidationError(f"{what} has no columns; it must have at least one.")


def _as_array(raw: Any, what: str) -> NDArray[Any]:
    """Return ``raw`` as an array (no copy for an array), wrapping conversion errors."""
    try:
        return np.asarray(raw)
    except (ValueError, TypeError) as exc:
        raise ValidationError(f"{what} cannot be read as an array: {exc}") from exc


def _check_raw_block(raw: Any, index: int, name: str, n_features: int) -> NDArray[Any]:
    """Return raw block ``index`` of source ``name`` as a checked 2-D numeric array."""
    what = f"Block {index} of {name}"
    arr = _as_array(raw, what)
    _check_array(arr, what)
    if arr.shape[1] != n_features:
        raise ValidationError(
            f"{what} has {arr.shape[1]} columns, but the first block has {n_features}; "
            "every block must have the same columns."
        )
    return arr


def _float_block(part: NDArray[Any]) -> NDArray[np.float64]:
    """Return ``part`` as C-contiguous ``float64``: a fresh array or a read-only view."""
    out = np.ascontiguousarray(part, dtype=np.float64)
    if np.may_share_memory(out, part):
        out = out.view()
        out.flags.writeable = False
    return out


# ---------------------------------------------------------------- in-memory sources


def _open_array(arr: NDArray[Any], block_size: int, name: str) -> BlockSource:
    _check_array(arr, f"The array given for {name}")
    return BlockSource(name, arr.shape[1], arr.shape[0], block_size, lambda: (arr,))


def _open_sequence(items: Sequence[Any], block_size: int, name: str) -> BlockSource:
    if len(items) == 0:
        raise ValidationError(
            f"The list of blocks given for {name} is empty; it needs at least one block "
            "to know the number of columns."
        )
    arrays: list[NDArray[Any]] = []
    for index, item in enumerate(items):
        what = f"Item {index} of the blocks given for {name}"
        arr = _as_array(item, what)
        _check_array(arr, what)
        if arrays and arr.shape[1] != arrays[0].shape[1]:
            raise ValidationError(
                f"{what} has {arr.shape[1]} columns, but item 0 has {arrays[0].shape[1]}; "
                "every block must have the same columns."
            )
        arrays.append(arr)
    blocks = tuple(arrays)
    n_rows = sum(arr.shape[0] for arr in blocks)
    return BlockSource(name, blocks[0].shape[1], n_rows, block_size, lambda: blocks)


def _first_block(blocks: Iterator[Any], name: str) -> NDArray[Any]:
    """Read and check the first block of ``blocks``, which must not be empty."""
    try:
        raw = next(blocks)
    except StopIteration:
        raise ValidationError(
            f"{name} gave no blocks; it needs at least one block to know the number of columns."
        ) from None
    what = f"Block 0 of {name}"
    arr = _as_array(raw, what)
    _check_array(arr, what)
    return arr


def _open_iterator(blocks: Iterator[Any], block_size: int, name: str) -> BlockSource:
    first = _first_block(blocks, name)
    return BlockSource(
        name,
        first.shape[1],
        None,
        block_size,
        lambda: itertools.chain((first,), blocks),
        one_shot=True,
    )


def _open_callable(factory: Callable[[], Iterable[Any]], block_size: int, name: str) -> BlockSource:
    last: list[Any] = []

    def fresh() -> Iterator[Any]:
        result = factory()
        if isinstance(result, np.ndarray) or not isinstance(result, Iterable):
            raise ValidationError(
                f"The function given for {name} must return an iterable of 2-D arrays "
                f"(e.g. a list or a generator); it returned {describe(result)!r}."
            )
        if isinstance(result, Iterator):
            if last and last[0] is result:
                raise ValidationError(
                    f"The function given for {name} returned the same iterator twice; it "
                    "must return a fresh iterator each time it is called."
                )
            last[:] = [result]
        return iter(result)

    probe = fresh()
    try:
        first = _first_block(probe, name)
    finally:
        close = getattr(probe, "close", None)
        if callable(close):
            close()
    return BlockSource(name, first.shape[1], None, block_size, fresh)


# -------------------------------------------------------------------------- files


def _open_path(path: Path, block_size: int, name: str) -> BlockSource:
    suffix = path.suffix.lower()
    if suffix not in SOURCE_EXTENSIONS:
        raise ValidationError(
            f"Cannot read {str(path)!r} for {name}: unsupported file extension "
            f"{path.suffix!r}. Supported extensions: {', '.join(SOURCE_EXTENSIONS)}."
        )
    if not path.exists():
        raise DataNotFoundError(f"The data file {str(path)!r} for {name} does not exist.")
    if not path.is_file():
        raise ValidationError(f"The data path {str(path)!r} for {name} is not a file.")
    if suffix == ".npy":
        return _open_npy(path, block_size, name)
    if suffix in (".parquet", ".pq"):
        return _open_parquet(path, block_size, name)
    return _open_csv(path, block_size, name)


def _load_npy(path: Path, name: str) -> NDArray[Any]:
    """Memory-map the array in ``path`` and check it is 2-D numbers."""
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValidationError(f"Cannot read {str(path)!r} ({name}) as a .npy file: {exc}") from exc
    if not isinstance(arr, np.ndarray):
        raise ValidationError(
            f"{str(path)!r} ({name}) does not hold a single array (is it a .npz archive?)."
        )
    _check_array(arr, f"The array in {str(path)!r} ({name})")
    return arr


def _open_npy(path: Path, block_size: int, name: str) -> BlockSource:
    opened = _load_npy(path, name)
    shape, dtype = opened.shape, opened.dtype
    del opened

    def read() -> tuple[NDArray[Any]]:
        arr = _load_npy(path, name)
        if arr.shape != shape or arr.dtype != dtype:
            raise ValidationError(
                f"{str(path)!r} ({name}) changed since it was opened: it held a {shape} "
                f"{dtype} array and now holds a {arr.shape} {arr.dtype} array."
            )
        return (arr,)

    return BlockSource(name, shape[1], shape[0], block_size, read)


def _import_parquet() -> Any:
    """Import and return :mod:`pyarrow.parquet`, explaining how to install it if missing."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError(
            "Reading Parquet files needs pyarrow, which is not installed; install the "
            "'islands[data]' extra (pip install 'islands[data]') or pyarrow itself."
        ) from exc
    return pq


def _open_parquet(path: Path, block_size: int, name: str) -> BlockSource:
    pq = _import_parquet()
    import pyarrow as pa

    where = f"{str(path)!r} ({name})"
    try:
        with pq.ParquetFile(path) as handle:
            schema = handle.schema_arrow
            n_rows = int(handle.metadata.num_rows)
    except (pa.ArrowException, OSError) as exc:
        raise ValidationError(f"Cannot read {where} as a Parquet file: {exc}") from exc
    columns: list[str] = list(schema.names)
    for field in schema:
        kind = field.type
        if not (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
        ):
            raise ValidationError(
                f"Column {field.name!r} of {where} has type {kind}; every column must be "
                "numeric (integer, float or bool)."
            )
    if not columns:
        raise ValidationError(f"{where} has no columns; it must have at least one.")

    def read() -> Iterator[NDArray[np.float64]]:
        row = 0
        with pq.ParquetFile(path) as handle:
            if list(handle.schema_arrow.names) != columns:
                raise ValidationError(f"The columns of {where} changed since it was opened.")
            for batch in handle.iter_batches(batch_size=block_size):
                block = np.empty((batch.num_rows, len(columns)), dtype=np.float64)
                for j, column in enumerate(batch.columns):
                    if column.null_count:
                        first = int(
                            np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0]
                        )
                        raise ValidationError(
                            f"Column {columns[j]!r} of {where} has a missing value in row "
                            f"{row + first} (counting rows from 0); remove or impute missing "
                            "values first."
                        )
                    block[:, j] = column.to_numpy(zero_copy_only=False)
                row += batch.num_rows
                yield block

    return BlockSource(name, len(columns), n_rows, block_size, read)


def _csv_lines(path: Path, where: str) -> Generator[tuple[int, str], None, None]:
    """Yield ``(line number, text)`` for each line of ``path`` holding data (or a header)."""
    number = 0
    with path.open(encoding="utf-8-sig") as handle:
        try:
            for number, line in enumerate(handle, start=1):
                text = line.strip()
                if text and not text.startswith("#"):
                    yield number, text
        except UnicodeDecodeError as exc:
            raise ValidationError(
                f"{where} is not UTF-8 text (after line {number}): {exc}"
            ) from exc


def _parse_csv_line(text: str) -> NDArray[np.float64] | None:
    """Return one line as a ``1 x k`` array, or ``None`` if it is not all numbers."""
    try:
        row: NDArray[np.float64] = np.loadtxt([text], **_CSV_OPTIONS)
    except ValueError:
        return None
    return row


def _csv_line_error(path: Path, name: str, number: int, text: str) -> ValidationError:
    """Build the error for line ``number`` of a CSV file, naming its first bad cell."""
    shown = text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."
    where = f"Line {number} of {str(path)!r} ({name})"
    for column, cell in enumerate(next(csv.reader([text])), start=1):
        try:
            float(cell)
        except ValueError:
            return ValidationError(
                f"{where}: cell {column} is {cell.strip()!r}, which is not a number "
                f"(line: {shown!r})."
            )
    return ValidationError(f"{where} is not a row of comma-separated numbers: {shown!r}.")


def _parse_csv_chunk(
    chunk: list[tuple[int, str]], path: Path, name: str, n_features: int
) -> NDArray[np.float64]:
    """Parse a list of ``(line number, text)`` into a block, reporting the first bad line."""
    try:
        block: NDArray[np.float64] = np.loadtxt([text for _, text in chunk], **_CSV_OPTIONS)
    except ValueError:
        pass
    else:
        if block.shape == (len(chunk), n_features):
            return block
    for number, text in chunk:
        row = _parse_csv_line(text)
        if row is None:
            raise _csv_line_error(path, name, number, text)
        if row.shape[1] != n_features:
            raise ValidationError(
                f"Line {number} of {str(path)!r} ({name}) has {row.shape[1]} values, but "
                f"the rows before it have {n_features}."
            )
    first, last = chunk[0][0], chunk[-1][0]  # numpy rejects the chunk but no single line
    raise ValidationError(
        f"Lines {first} to {last} of {str(path)!r} ({name}) cannot be read as rows of "
        f"{n_features} comma-separated numbers."
    )


def _open_csv(path: Path, block_size: int, name: str) -> BlockSource:
    where = f"{str(path)!r} ({name})"
    lines = _csv_lines(path, where)
    try:
        first = next(lines, None)
        if first is None:
            raise ValidationError(f"{where} holds no rows.")
        header: tuple[int, str] | None = None
        if _parse_csv_line(first[1]) is None:
            header, first = first, next(lines, None)
    finally:
        lines.close()
    names = None if header is None else len(next(csv.reader([header[1]])))
    if first is None:  # a header and no rows
        return BlockSource(name, names or 1, 0, block_size, lambda: ())
    row = _parse_csv_line(first[1])
    if row is None:
        raise _csv_line_error(path, name, *first)
    n_features = row.shape[1]
    if header is not None and names != n_features:
        raise ValidationError(
            f"The header of {where} (line {header[0]}) names {names} columns, but line "
            f"{first[0]} has {n_features} values."
        )

    def read() -> Iterator[NDArray[np.float64]]:
        rows = _csv_lines(path, where)
        try:
            if header is not None:
                next(rows, None)
            while chunk := list(itertools.islice(rows, block_size)):
                yield _parse_csv_chunk(chunk, path, name, n_features)
        finally:
            rows.close()

    return BlockSource(name, n_features, None, block_size, read)
