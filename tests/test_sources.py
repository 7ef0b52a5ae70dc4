"""Tests for islands.data.sources: block-wise, multi-pass reading of a party's rows."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from islands.data import SOURCE_EXTENSIONS, BlockSource, open_source
from islands.errors import DataNotFoundError, ValidationError

FAST = settings(max_examples=40, deadline=None)

# ------------------------------------------------------------------------------ helpers


def data(n: int = 23, d: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


def read_all(src: BlockSource) -> tuple[np.ndarray, list[np.ndarray]]:
    """Read one pass, checking the promises every block makes."""
    blocks = list(src.blocks())
    for block in blocks:
        assert isinstance(block, np.ndarray)
        assert block.dtype == np.float64
        assert block.ndim == 2
        assert block.flags.c_contiguous
        assert 1 <= block.shape[0] <= src.block_size
        assert block.shape[1] == src.n_features
    rows = np.concatenate(blocks) if blocks else np.empty((0, src.n_features))
    return rows, blocks


def write_csv(path: Path, x: np.ndarray, *, header: str | None = None) -> Path:
    lines = [] if header is None else [header]
    lines += [",".join(repr(float(v)) for v in row) for row in x]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_parquet(path: Path, columns: dict[str, Any]) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table(columns), path, row_group_size=7)
    return path


def make_source(kind: str, x: np.ndarray, tmp_path: Path) -> Any:
    """Return ``x`` in the form of source ``kind``."""
    if kind == "array":
        return x
    if kind == "list":
        return [x[:5], x[5:6], x[6:]]
    if kind == "tuple":
        return (x[:11], x[11:])
    if kind == "callable":
        return lambda: (x[i : i + 4] for i in range(0, len(x), 4))
    if kind == "npy":
        np.save(tmp_path / "x.npy", x)
        return tmp_path / "x.npy"
    if kind == "npy-str":
        np.save(tmp_path / "x.npy", x)
        return str(tmp_path / "x.npy")
    if kind == "parquet":
        return write_parquet(tmp_path / "x.parquet", {f"c{j}": x[:, j] for j in range(x.shape[1])})
    if kind == "csv":
        return write_csv(tmp_path / "x.csv", x)
    if kind == "csv-header":
        return write_csv(tmp_path / "x.txt", x, header="a,b,c,d")
    raise AssertionError(kind)


REUSABLE = ["array", "list", "tuple", "callable", "npy", "npy-str", "parquet", "csv", "csv-header"]

# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("kind", REUSABLE)
@pytest.mark.parametrize("block_size", [1, 3, 8192])
def test_round_trip_and_several_passes(kind: str, block_size: int, tmp_path: Path) -> None:
    x = data()
    src = open_source(make_source(kind, x, tmp_path), block_size=block_size, name="site 3")
    assert src.name == "site 3"
    assert src.n_features == 4
    assert src.block_size == block_size
    assert src.reusable
    known = kind not in ("callable", "csv", "csv-header")
    assert src.n_rows == (23 if known else None)
    first, _ = read_all(src)
    np.testing.assert_array_equal(first, x)
    assert src.n_rows == 23  # learnt from the first pass when not known before
    for _ in range(2):
        again, _ = read_all(src)
        np.testing.assert_array_equal(again, x)


@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.uint8, np.bool_, ">f8"])
def test_array_of_any_numeric_dtype(dtype: Any) -> None:
    x = (np.arange(30).reshape(10, 3) % 7).astype(dtype)
    rows, blocks = read_all(open_source(x, block_size=4))
    np.testing.assert_array_equal(rows, x.astype(np.float64))
    assert [b.shape[0] for b in blocks] == [4, 4, 2]


def test_fortran_order_and_strided_arrays() -> None:
    x = np.asfortranarray(data())
    np.testing.assert_array_equal(read_all(open_source(x, block_size=5))[0], x)
    y = data(40, 6)[::2, ::3]
    np.testing.assert_array_equal(read_all(open_source(y, block_size=5))[0], y)


def test_empty_array_has_no_blocks() -> None:
    src = open_source(np.empty((0, 3)))
    assert src.n_rows == 0
    assert list(src.blocks()) == []


def test_list_items_larger_than_block_size_are_cut() -> None:
    x = data(30, 2)
    items = [x[:5], x[5:6], x[6:18], x[18:18], x[18:]]
    src = open_source(items, block_size=4)
    rows, blocks = read_all(src)
    np.testing.assert_array_equal(rows, x)
    assert [b.shape[0] for b in blocks] == [4, 1, 1, 4, 4, 4, 4, 4, 4]
    assert src.n_rows == 30


def test_repr_names_the_source() -> None:
    text = repr(open_source(data(), name="site 7", block_size=5))
    assert "site 7" in text
    assert "n_features=4" in text


@FAST
@given(
    n=st.integers(0, 40),
    d=st.integers(1, 5),
    block_size=st.integers(1, 50),
    cuts=st.lists(st.integers(0, 40), max_size=4),
)
def test_blocks_cover_rows_in_order(n: int, d: int, block_size: int, cuts: list[int]) -> None:
    x = np.arange(n * d, dtype=np.float64).reshape(n, d)
    bounds = sorted({0, n, *(c for c in cuts if c <= n)})
    items = [x[a:b] for a, b in itertools.pairwise(bounds)] or [x]
    for source in (x, items, lambda: iter(items)):
        src = open_source(source, block_size=block_size)
        rows, blocks = read_all(src)
        np.testing.assert_array_equal(rows, x)
        assert sum(b.shape[0] for b in blocks) == n


# ----------------------------------------------------------------- caller's data is safe


def test_views_of_callers_array_are_read_only() -> None:
    x = data()
    before = x.copy()
    src = open_source(x, block_size=5)
    for block in src.blocks():
        assert not block.flags.writeable
        assert np.shares_memory(block, x)  # no copy for float64 C-contiguous data
        with pytest.raises(ValueError, match="read-only"):
            block[0, 0] = 99.0
    np.testing.assert_array_equal(x, before)
    assert x.flags.writeable  # the caller's own array is untouched


@pytest.mark.parametrize("kind", ["list", "callable", "iterator"])
def test_views_of_callers_blocks_are_read_only(kind: str) -> None:
    x = data()
    items = [x[:10], x[10:]]
    source: Any = {
        "list": items,
        "callable": lambda: items,
        "iterator": iter(items),
    }[kind]
    for block in open_source(source, block_size=4).blocks():
        assert not block.flags.writeable
    np.testing.assert_array_equal(np.concatenate(items), data())


def test_converted_blocks_are_fresh_copies() -> None:
    x = data().astype(np.float32)
    before = x.copy()
    for block in open_source(x, block_size=5).blocks():
        assert not np.shares_memory(block, x)
        block[:] = 0.0  # a fresh array: the caller may modify it
    np.testing.assert_array_equal(x, before)


# ------------------------------------------------------------------ one-shot iterators


@pytest.mark.parametrize("as_generator", [False, True])
def test_iterator_is_read_once(as_generator: bool) -> None:
    x = data()
    parts = [x[:10], x[10:]]
    source = (p for p in parts) if as_generator else iter(parts)
    src = open_source(source, block_size=4, name="site 2")
    assert not src.reusable
    assert src.n_rows is None
    rows, _ = read_all(src)
    np.testing.assert_array_equal(rows, x)
    assert src.n_rows == 23
    with pytest.raises(ValidationError, match=r"site 2.*can be read only once; pass a list"):
        src.blocks()


def test_iterator_consumed_once_even_if_first_pass_stops_early() -> None:
    src = open_source(iter([data()]), block_size=2)
    next(src.blocks())
    with pytest.raises(ValidationError, match="only once"):
        src.blocks()


def test_empty_iterator_and_callable_are_errors() -> None:
    with pytest.raises(ValidationError, match="site 1 gave no blocks"):
        open_source(iter([]), name="site 1")
    with pytest.raises(ValidationError, match="site 1 gave no blocks"):
        open_source(lambda: [], name="site 1")
    with pytest.raises(ValidationError, match="list of blocks given for site 1 is empty"):
        open_source([], name="site 1")


# --------------------------------------------------------------------- callables


def test_callable_is_called_at_each_pass() -> None:
    x = data()
    calls: list[int] = []

    def blocks() -> Iterator[np.ndarray]:
        calls.append(1)
        yield from (x[i : i + 6] for i in range(0, len(x), 6))

    src = open_source(blocks, block_size=4)
    assert len(calls) == 1  # probed once for the number of columns
    for n in range(2, 5):
        np.testing.assert_array_equal(read_all(src)[0], x)
        assert len(calls) == n


def test_callable_returning_the_same_iterator_is_an_error() -> None:
    it = iter([data()])
    src_factory: Callable[[], Iterator[np.ndarray]] = lambda: it  # noqa: E731
    with pytest.raises(ValidationError, match="same iterator twice"):
        list(open_source(src_factory, name="s").blocks())


def test_callable_must_return_an_iterable_of_blocks() -> None:
    with pytest.raises(ValidationError, match="must return an iterable of 2-D arrays"):
        open_source(lambda: data(), name="s")
    with pytest.raises(ValidationError, match="must return an iterable of 2-D arrays"):
        open_source(lambda: 3, name="s")  # type: ignore[arg-type,return-value]


def test_callable_giving_different_row_counts_is_an_error() -> None:
    sizes = iter([5, 5, 7])
    src = open_source(lambda: [np.ones((next(sizes), 2))], name="site 4")
    assert read_all(src)[0].shape == (5, 2)
    with pytest.raises(ValidationError, match="site 4 gave 7 rows on this pass but 5 before"):
        read_all(src)


# -------------------------------------------------------------------- block checks


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("kind", ["array", "list", "callable", "npy", "csv"])
def test_non_finite_value_names_absolute_row(kind: str, bad: float, tmp_path: Path) -> None:
    x = data(20, 3)
    x[13, 1] = bad
    x[17, 0] = bad
    src = open_source(make_source(kind, x, tmp_path), block_size=4, name="site 5")
    seen = 0
    with pytest.raises(ValidationError, match=r"site 5 must hold finite numbers.* at row 13, "
                       r"column 1 instead"):
        for block in src.blocks():
            seen += block.shape[0]
    assert 10 <= seen <= 13  # the blocks before the one holding row 13 were given


def test_parquet_null_names_column_and_row(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "n.parquet", {"a": [1.0, 2.0, 3.0] * 5, "b": [1] * 14 + [None]})
    src = open_source(path, block_size=4, name="site 6")
    with pytest.raises(ValidationError, match=r"Column 'b' .* missing value in row 14\b"):
        list(src.blocks())


def test_one_dimensional_array_is_an_error() -> None:
    with pytest.raises(ValidationError, match="given for site 9 is 1-D"):
        open_source(np.arange(5.0), name="site 9")
    with pytest.raises(ValidationError, match="site 9 is 0-D"):
        open_source(np.array(3.0), name="site 9")


def test_one_dimensional_block_is_an_error() -> None:
    with pytest.raises(ValidationError, match="Item 1 of the blocks given for site 9 is 1-D"):
        open_source([np.ones((2, 3)), np.ones(3)], name="site 9")
    src = open_source(iter([np.ones((2, 3)), np.ones(3)]), name="site 9")
    with pytest.raises(ValidationError, match="Block 1 of site 9 is 1-D"):
        list(src.blocks())


def test_inconsistent_columns_across_list_items() -> None:
    with pytest.raises(ValidationError, match=r"Item 2 .* has 4 columns, but item 0 has 3"):
        open_source([np.ones((2, 3)), np.ones((1, 3)), np.ones((2, 4))], name="site 1")


def test_inconsistent_columns_across_iterator_blocks() -> None:
    src = open_source(lambda: [np.ones((2, 3)), np.ones((2, 2))], name="site 1")
    with pytest.raises(ValidationError, match="Block 1 of site 1 has 2 columns, but the first"):
        list(src.blocks())


@pytest.mark.parametrize(
    "bad",
    [
        np.array([["a", "b"], ["c", "d"]]),
        np.array([[1 + 2j, 3]]),
        np.array([[1, 2]], dtype=object),
        np.empty((4, 0)),
    ],
)
def test_non_numeric_or_columnless_arrays_are_errors(bad: np.ndarray) -> None:
    with pytest.raises(ValidationError, match="site 8"):
        open_source(bad, name="site 8")
    with pytest.raises(ValidationError, match="site 8"):
        open_source([bad], name="site 8")


def test_ragged_block_is_an_error() -> None:
    with pytest.raises(ValidationError, match="cannot be read as an array"):
        open_source([[[1.0, 2.0], [3.0]]], name="site 8")  # type: ignore[list-item]


def test_nested_lists_as_blocks_are_accepted() -> None:
    rows, _ = read_all(open_source([[[1, 2], [3, 4]], [[5, 6]]], block_size=1))  # type: ignore[list-item]
    np.testing.assert_array_equal(rows, [[1, 2], [3, 4], [5, 6]])


# ------------------------------------------------------------------------ .npy files


def test_large_npy_is_memory_mapped_and_streamed(tmp_path: Path) -> None:
    x = np.random.default_rng(1).normal(size=(10_000, 7))
    np.save(tmp_path / "big.npy", x)
    src = open_source(tmp_path / "big.npy", block_size=512, name="site 1")
    assert (src.n_rows, src.n_features) == (10_000, 7)
    for _ in range(2):
        rows, blocks = read_all(src)
        np.testing.assert_array_equal(rows, x)
        assert len(blocks) == 20  # 19 x 512 + 272
        assert blocks[-1].shape == (10_000 - 19 * 512, 7)
        for block in blocks:
            assert not block.flags.writeable
            assert not isinstance(block, np.memmap)
        with pytest.raises(ValueError, match="read-only"):
            blocks[0][0, 0] = 1.0
    np.testing.assert_array_equal(np.load(tmp_path / "big.npy"), x)


def test_npy_of_other_dtype_is_converted(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.int32).reshape(4, 3)
    np.save(tmp_path / "i.npy", x)
    np.testing.assert_array_equal(read_all(open_source(tmp_path / "i.npy"))[0], x)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (np.arange(5.0), "is 1-D"),
        (np.array([["a"]]), "must hold numbers"),
        (np.array([[1, None]], dtype=object), r"Cannot read .* as a \.npy file"),
    ],
)
def test_bad_npy_is_an_error(content: np.ndarray, match: str, tmp_path: Path) -> None:
    np.save(tmp_path / "bad.npy", content, allow_pickle=True)
    with pytest.raises(ValidationError, match=match):
        open_source(tmp_path / "bad.npy", name="site 2")


def test_corrupt_npy_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "bad.npy").write_bytes(b"not an npy file at all")
    with pytest.raises(ValidationError, match=r"as a \.npy file"):
        open_source(tmp_path / "bad.npy")


def test_npy_changed_between_passes_is_an_error(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", data())
    src = open_source(tmp_path / "x.npy")
    np.save(tmp_path / "x.npy", data(5, 2))
    with pytest.raises(ValidationError, match="changed since it was opened"):
        list(src.blocks())


# --------------------------------------------------------------------- Parquet files


def test_parquet_of_mixed_numeric_columns(tmp_path: Path) -> None:
    n = 30
    cols = {
        "f": np.linspace(0, 1, n),
        "i": np.arange(n, dtype=np.int64),
        "s": np.arange(n, dtype=np.float32),
        "b": np.arange(n) % 2 == 0,
    }
    path = write_parquet(tmp_path / "m.pq", cols)
    src = open_source(path, block_size=4)
    assert (src.n_rows, src.n_features) == (n, 4)
    rows, _ = read_all(src)
    np.testing.assert_array_equal(
        rows, np.column_stack([c.astype(np.float64) for c in cols.values()])
    )


def test_parquet_non_numeric_column_is_an_error(tmp_path: Path) -> None:
    path = write_parquet(
        tmp_path / "s.parquet", {"x": [1.0, 2.0], "label": ["a", "b"], "when": ["c", "d"]}
    )
    with pytest.raises(
        ValidationError, match=r"Column 'label' .*\(site 4\) has type string.* must be numeric"
    ):
        open_source(path, name="site 4")


def test_corrupt_parquet_is_an_error(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValidationError, match="as a Parquet file"):
        open_source(tmp_path / "bad.parquet")


def test_parquet_without_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "x.parquet").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"pyarrow.*islands\[data\]"):
        open_source(tmp_path / "x.parquet")


def test_importing_islands_data_does_not_import_pyarrow() -> None:
    code = (
        "import sys, islands.data, islands.data.sources; "
        "assert 'pyarrow' not in sys.modules, 'pyarrow imported'"
    )
    src_dir = Path(__file__).resolve().parents[1] / "src"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(src_dir)},
        check=False,
    )
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------------- CSV files


def test_csv_with_header_blank_lines_comments_and_spaces(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("\n# written by hand\nx, y ,z\n\n1, 2, 3\n   \n4.5,-5e-1,6\r\n\n7,8,9\n\n")
    src = open_source(path, block_size=2)
    assert src.n_features == 3
    assert src.n_rows is None
    rows, blocks = read_all(src)
    np.testing.assert_array_equal(rows, [[1, 2, 3], [4.5, -0.5, 6], [7, 8, 9]])
    assert [b.shape[0] for b in blocks] == [2, 1]
    assert src.n_rows == 3


def test_csv_from_savetxt_round_trips(tmp_path: Path) -> None:
    x = data(50, 3)
    np.savetxt(tmp_path / "s.csv", x, delimiter=",", header="a,b,c")
    np.testing.assert_array_equal(read_all(open_source(tmp_path / "s.csv", block_size=7))[0], x)


def test_csv_header_only_has_no_rows(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text("a,b\n")
    src = open_source(tmp_path / "h.csv")
    assert (src.n_rows, src.n_features) == (0, 2)
    assert list(src.blocks()) == []


def test_empty_csv_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text("\n\n")
    with pytest.raises(ValidationError, match="holds no rows"):
        open_source(tmp_path / "e.csv")


def test_csv_bad_cell_names_file_and_line_when_reached(tmp_path: Path) -> None:
    lines = ["a,b"] + [f"{i},{i}" for i in range(10)]
    lines[8] = "7,oops"  # line 9 of the file
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    src = open_source(path, block_size=3, name="site 2")  # the bad line is not read yet
    blocks = src.blocks()
    np.testing.assert_array_equal(next(blocks), [[0, 0], [1, 1], [2, 2]])
    np.testing.assert_array_equal(next(blocks), [[3, 3], [4, 4], [5, 5]])
    with pytest.raises(ValidationError, match=r"Line 9 of .*bad\.csv.*site 2.*cell 2 is 'oops'"):
        next(blocks)


def test_csv_bad_first_data_line(tmp_path: Path) -> None:
    (tmp_path / "b.csv").write_text("a,b\n1,\n")
    with pytest.raises(ValidationError, match=r"Line 2 of .*cell 2 is ''"):
        open_source(tmp_path / "b.csv")


def test_csv_changing_column_count_names_line(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text("1,2\n3,4\n\n5,6,7\n")
    with pytest.raises(ValidationError, match=r"Line 4 of .* has 3 values, but the rows before"):
        list(open_source(tmp_path / "c.csv").blocks())


def test_csv_header_with_wrong_number_of_names(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text("a,b,c\n1,2\n")
    with pytest.raises(ValidationError, match="names 3 columns, but line 2 has 2 values"):
        open_source(tmp_path / "c.csv")


def test_csv_single_column(tmp_path: Path) -> None:
    (tmp_path / "one.csv").write_text("v\n1\n2\n3\n")
    rows, _ = read_all(open_source(tmp_path / "one.csv", block_size=2))
    np.testing.assert_array_equal(rows, [[1], [2], [3]])


def test_non_utf8_csv_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "l.csv").write_bytes(b"1,2\n\xff\xfe,3\n")
    with pytest.raises(ValidationError, match="not UTF-8"):
        open_source(tmp_path / "l.csv")


# -------------------------------------------------------------- paths and arguments


def test_missing_file_is_data_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.npy"
    with pytest.raises(DataNotFoundError, match=r"nowhere\.npy.*site 1"):
        open_source(missing, name="site 1")
    with pytest.raises(FileNotFoundError):
        open_source(str(tmp_path / "nowhere.csv"))


def test_unknown_extension_lists_supported_ones(tmp_path: Path) -> None:
    (tmp_path / "x.xlsx").write_bytes(b"")
    with pytest.raises(ValidationError, match=r"'\.xlsx'.*\.npy, \.parquet, \.pq, \.csv, \.txt"):
        open_source(tmp_path / "x.xlsx")
    assert ".npy" in SOURCE_EXTENSIONS


def test_extension_is_case_insensitive(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", data())
    (tmp_path / "x.npy").rename(tmp_path / "X.NPY")
    np.testing.assert_array_equal(read_all(open_source(tmp_path / "X.NPY"))[0], data())


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    (tmp_path / "d.parquet").mkdir()
    with pytest.raises(ValidationError, match="not a file"):
        open_source(tmp_path / "d.parquet")


@pytest.mark.parametrize("block_size", [0, -3, 2.5, True, "8", None, np.float64(4)])
def test_block_size_must_be_a_positive_int(block_size: Any) -> None:
    with pytest.raises(ValidationError, match="'block_size' parameter of open_source"):
        open_source(data(), block_size=block_size)


def test_numpy_int_block_size_is_accepted() -> None:
    assert open_source(data(), block_size=np.int64(5)).block_size == 5


@pytest.mark.parametrize("source", [42, 3.5, b"x.npy", {1, 2}, None])
def test_unsupported_source_type(source: Any) -> None:
    with pytest.raises(ValidationError, match="'source' parameter of open_source"):
        open_source(source)


def test_name_must_be_a_string() -> None:
    with pytest.raises(ValidationError, match="'name' parameter"):
        open_source(data(), name=3)  # type: ignore[arg-type]


def test_block_source_checks_its_parameters() -> None:
    with pytest.raises(ValidationError, match="n_features"):
        BlockSource("s", 0, None, 4, lambda: ())
    with pytest.raises(ValidationError, match="reader"):
        BlockSource("s", 2, None, 4, "not callable")  # type: ignore[arg-type]
