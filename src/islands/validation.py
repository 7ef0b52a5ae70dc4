"""Argument checks shared across islands: ints, floats, seeds, labels, data arrays.

Every check raises :class:`~islands.errors.ValidationError` built with
:func:`~islands.errors.invalid_parameter`, so the message names the parameter, the
function it belongs to, what was expected and what was got.
"""

from __future__ import annotations

import copy
import math
import numbers
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from islands.errors import DataNotFoundError, JobError, ValidationError, invalid_parameter

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "FLOAT32_LIMIT_REASON",
    "MAX_ABS_FLOAT",
    "MAX_ABS_FLOAT32",
    "RandomState",
    "apply_overrides",
    "as_float_array",
    "check_array",
    "check_float",
    "check_int",
    "check_labels",
    "check_random_state",
    "check_values",
    "describe",
    "file_section",
    "is_int",
    "read_job",
    "read_toml",
    "table_value",
    "unique_labels",
]

_J = TypeVar("_J")

RandomState = int | np.random.Generator | None
"""What ``random_state`` parameters accept: a seed, a generator, or ``None`` (fresh entropy)."""

MAX_ABS_FLOAT = math.sqrt(float(np.finfo(np.float64).max) / 2.0**40) / 2.0
"""Largest magnitude :func:`check_array` accepts by default (about 6.7e147).

Moments, Gram and covariance matrices add up products of two centred values; a centred
value is at most twice the largest input, so with inputs below this bound a sum of up to
2^40 such products stays finite in float64."""

FLOAT_LIMIT_REASON = "so that sums of up to 2^40 products of centred values stay finite in float64"
"""Why :data:`MAX_ABS_FLOAT` is the limit, for error messages."""

MAX_ABS_FLOAT32 = math.sqrt(float(np.finfo(np.float32).max) / 2.0**40) / 2.0
"""Largest magnitude accepted for data that models compute on in float32 (about 8.8e12).

Derived as :data:`MAX_ABS_FLOAT` is, from the float32 maximum: a layer's first matrix
product and a squared-error loss add products of two such values."""

FLOAT32_LIMIT_REASON = ("the model computes in float32, where sums of up to 2^40 products "
                        "of centred values must stay finite")
"""Why :data:`MAX_ABS_FLOAT32` is the limit, for error messages."""


def read_toml(path: Any, *, what: str = "job file") -> dict[str, Any]:
    """Read a job file (or the file ``what`` names, e.g. ``"federation file"``) as TOML.

    Raises
    ------
    DataNotFoundError
        If the file does not exist.
    JobError
        If it is not valid TOML.
    """
    source = Path(path)
    if not source.is_file():
        raise DataNotFoundError(f"no {what} at {source}")
    try:
        raw: dict[str, Any] = tomllib.loads(source.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise JobError(f"{what} {source} is not valid TOML: {exc}") from exc
    return raw


def apply_overrides(raw: Mapping[str, Any], overrides: Sequence[str], where: str
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Apply ``KEY=VALUE`` overrides (``islands run --set``) to a parsed file.

    ``KEY`` is a dotted path into the file's tables (``strategy.tau``, ``epochs``);
    ``VALUE`` is read as a TOML value (``4``, ``0.5``, ``true``, ``"text"``, ``[1, 2]``),
    and a bare word that is not one (``digits``) is taken as text. The result is checked
    afterwards exactly as the file is.

    Returns
    -------
    tuple
        The file with the overrides applied (a copy) and the overrides as path → value,
        in the order given (a later one for the same path wins).

    Raises
    ------
    JobError
        Naming the override: no ``=``, an empty key part, a path through a value that is
        not a table.
    """
    out = copy.deepcopy(dict(raw))
    applied: dict[str, Any] = {}
    for text in overrides:
        key, sep, value_text = str(text).partition("=")
        parts = key.strip().split(".")
        if not sep or not all(p.strip() for p in parts):
            raise JobError(f"{where}: --set {text!r} must be KEY=VALUE, KEY a dotted path "
                           "such as strategy.tau")
        parts = [p.strip() for p in parts]
        try:
            value = tomllib.loads(f"v = {value_text.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = value_text.strip()
            if not value:
                raise JobError(f"{where}: --set {text!r} gives no value") from None
        table = out
        for depth, part in enumerate(parts[:-1]):
            node = table.setdefault(part, {})
            if not isinstance(node, dict):
                raise JobError(f"{where}: --set {text!r}: '{'.'.join(parts[:depth + 1])}' is "
                               f"not a section (it holds {node!r})")
            table = node
        table[parts[-1]] = value
        applied[".".join(parts)] = value
    return out, applied


def read_job(path: Any, overrides: Sequence[str], parse: Callable[[dict[str, Any], str], _J]
             ) -> tuple[_J, dict[str, Any]]:
    """Read a job file, apply ``overrides`` (:func:`apply_overrides`), check it with ``parse``.

    ``parse(raw, source)`` checks the table; an error it raises after overrides were
    applied says which ones.

    Returns
    -------
    tuple
        What ``parse`` returned and the overrides applied (path → value).
    """
    raw, applied = apply_overrides(read_toml(path), overrides, f"job file {path}")
    try:
        return parse(raw, str(path)), applied
    except JobError as exc:
        if not applied:
            raise
        raise JobError(f"{exc} (with --set {' '.join(overrides)})") from exc


def file_section(raw: Any, name: str, allowed: set[str], where: str, *,
                 required: bool = True,
                 renamed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return the section ``[name]`` of a parsed file, refusing keys not in ``allowed``.

    A key of ``renamed`` (a key files used to accept) gets its message saying what changed.

    Raises
    ------
    JobError
        ``"<where>: missing section [name]"`` (when ``required``), ``"<where>: [name] must
        be a table"``, or ``"<where> [name]: unknown key(s) [...]; allowed: [...]"``.
    """
    if name not in raw and required:
        raise JobError(f"{where}: missing section [{name}]")
    table = raw.get(name, {})
    if not isinstance(table, dict):
        raise JobError(f"{where}: [{name}] must be a table")
    for key, why in (renamed or {}).items():
        if key in table:
            raise JobError(f"{where} [{name}]: {key!r} {why}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise JobError(f"{where} [{name}]: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    return dict(table)


def table_value(table: Any, key: str, kinds: tuple[type, ...], where: str,
                default: Any = ..., check: Any = None, expected: str = "") -> Any:
    """Return ``table[key]`` of a parsed job or configuration file, checked.

    Parameters
    ----------
    table
        The (sub)table, a mapping.
    key
        The key to read.
    kinds
        Accepted types (a bool is accepted only if ``bool`` is listed).
    where
        File and section, for the message.
    default
        Returned when the key is absent; without it, an absent key is an error.
    check
        A further test of the value (a callable returning bool).
    expected
        What to call the accepted values in the message (default: the type names).

    Raises
    ------
    JobError
        ``"<where>: '<key>' must be <expected>; got <value>"``, or a missing key.
    """
    if key not in table:
        if default is ...:
            raise JobError(f"{where}: missing key {key!r}")
        return default
    value = table[key]
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if ok and check is not None:
        ok = check(value)
    if not ok:
        what = expected or " or ".join(k.__name__ for k in kinds)
        raise JobError(f"{where}: {key!r} must be {what}; got {value!r}")
    return value


def describe(value: Any) -> Any:
    """Return a short stand-in for ``value`` to put in an error message.

    Arrays are summarised by shape and dtype instead of being printed in full, also
    inside a tuple or list (which is then summarised item by item, up to five items).
    """
    if isinstance(value, np.ndarray):
        return _Summary(f"array(shape={value.shape}, dtype={value.dtype})")
    if isinstance(value, tuple | list) and any(isinstance(v, np.ndarray) for v in value):
        items = ", ".join(repr(describe(v)) for v in value[:5])
        more = f", ... ({len(value)} items)" if len(value) > 5 else ""
        close = ")" if isinstance(value, tuple) else "]"
        return _Summary(("(" if isinstance(value, tuple) else "[") + items + more + close)
    return value


class _Summary(str):
    """A string whose ``repr`` is the string itself (so messages do not quote it)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def is_int(value: Any) -> bool:
    """Tell whether ``value`` is an integer (Python or numpy), bools excluded."""
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(
        value, (bool, np.bool_)
    )


def check_int(
    value: Any, name: str, owner: str, *, low: int | None = None, high: int | None = None
) -> int:
    """Return ``value`` as an ``int`` after checking it is an integer in ``[low, high]``."""
    if (
        not is_int(value)
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        lo = "-inf" if low is None else str(low)
        expected = f"an int in [{lo}, inf)" if high is None else f"an int in [{lo}, {high}]"
        raise invalid_parameter(name, owner, expected, describe(value))
    return int(value)


def check_float(
    value: Any,
    name: str,
    owner: str,
    *,
    low: float = -math.inf,
    low_inclusive: bool = True,
    high: float = math.inf,
    high_inclusive: bool = True,
) -> float:
    """Return ``value`` as a finite ``float`` after checking it lies in [low, high]."""
    ok = isinstance(value, (numbers.Real, np.floating, np.integer)) and not isinstance(
        value, (bool, np.bool_)
    )
    if ok:
        as_float = float(value)
        ok = (math.isfinite(as_float)
              and (as_float >= low if low_inclusive else as_float > low)
              and (as_float <= high if high_inclusive else as_float < high))
    if not ok:
        bracket = "[" if low_inclusive else "("
        close = "]" if high_inclusive and math.isfinite(high) else ")"
        raise invalid_parameter(name, owner, f"a float in {bracket}{low:g}, {high:g}{close}",
                                describe(value))
    return float(value)


def check_random_state(random_state: Any, owner: str) -> np.random.Generator:
    """Return a :class:`numpy.random.Generator` for ``random_state``.

    A generator is used as is (so the caller's stream advances); an int seeds a new one;
    ``None`` draws fresh entropy from the operating system.
    """
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None:
        return np.random.default_rng()
    if is_int(random_state) and random_state >= 0:
        return np.random.default_rng(int(random_state))
    raise invalid_parameter(
        "random_state",
        owner,
        "a non-negative int, a numpy.random.Generator or None",
        describe(random_state),
    )


def check_labels(y: Any, name: str, owner: str) -> NDArray[np.int64]:
    """Return ``y`` as a fresh 1-D ``int64`` array of class labels (at least one)."""
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
        raise invalid_parameter(
            name, owner, "a non-empty 1-D array of integer class labels", describe(arr)
        )
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise invalid_parameter(name, owner, "labels that fit in int64", int(arr.max()))
    return arr.astype(np.int64, copy=True)


def unique_labels(y: NDArray[Any], name: str, owner: str) -> NDArray[Any]:
    """Return the sorted distinct labels of ``y`` (1-D), refusing labels that cannot be sorted.

    Labels may be numbers or strings, but all of one kind and none missing: a NaN, a
    ``None`` or a mix of numbers and strings raises instead of numpy's ``TypeError``.

    Raises
    ------
    ValidationError
        Naming ``name``, the first offending label and its row.
    """
    if y.dtype.kind == "f":
        check_values(y, name, owner, max_abs=None)
    elif y.dtype.kind == "O":
        first: tuple[type, int, Any] | None = None
        for row, item in enumerate(y):
            missing = item is None or (isinstance(item, (float, np.floating))
                                       and not math.isfinite(item))
            kind = (str if isinstance(item, (str, np.str_))
                    else bytes if isinstance(item, (bytes, np.bytes_))
                    else numbers.Real if isinstance(item, (numbers.Real, np.bool_))
                    else None)
            if first is None and kind is not None and not missing:
                first = (kind, row, item)
            if missing or kind is None or kind is not first[0]:  # type: ignore[index]
                after = "" if first is None or missing or kind is None else (
                    f" after {first[2]!r} at row {first[1]}")
                raise invalid_parameter(
                    name, owner, "labels all of one kind (numbers or strings), none missing",
                    _Summary(f"{item!r} at row {row}{after}"))
    try:
        return np.unique(y)
    except TypeError:  # e.g. objects that cannot be compared with each other
        raise invalid_parameter(name, owner, "labels that can be sorted (numbers or strings)",
                                describe(y)) from None


def as_float_array(X: Any, name: str, owner: str) -> NDArray[np.float64]:
    """Return ``X`` as a ``float64`` array, never writing to the caller's array.

    Bool, integer and float arrays are converted (no copy for ``float64``); an object
    array is converted when every item is a real number. Text, complex, dates, ragged
    nesting and objects that are not numbers raise.

    Raises
    ------
    ValidationError
        Naming ``name`` and ``owner``, and the first item that is not a number.
    """
    try:
        arr = np.asarray(X)
    except (ValueError, TypeError):  # ragged nesting
        raise invalid_parameter(name, owner, "a rectangular array of numbers",
                                _Summary("a ragged sequence (rows of different lengths)")
                                ) from None
    kind = arr.dtype.kind
    if kind in "biuf":
        return np.asarray(arr, dtype=np.float64)
    if kind == "O":
        for index, item in np.ndenumerate(arr):
            if not isinstance(item, (numbers.Real, np.bool_)):
                at = ", ".join(map(str, index))
                raise invalid_parameter(name, owner, "an array of numbers",
                                        _Summary(f"{item!r} at index ({at})"))
        return np.asarray(arr, dtype=np.float64)
    raise invalid_parameter(name, owner, "an array of numbers (bool, int or float)",
                            describe(arr))


def check_values(arr: NDArray[np.float64], name: str, owner: str | None, *,
                 max_abs: float | None = MAX_ABS_FLOAT, why: str = FLOAT_LIMIT_REASON,
                 first_row: int = 0) -> None:
    """Raise unless every value of ``arr`` is finite and at most ``max_abs`` in magnitude.

    Parameters
    ----------
    arr
        The values (float64).
    name, owner
        The parameter and what it belongs to, for the message; with ``owner`` None,
        ``name`` is the subject of the message as is (e.g. ``"site1"``).
    max_abs
        Largest magnitude accepted (None: any finite value).
    why
        Why ``max_abs`` is the limit (the encoding or arithmetic that needs it).
    first_row
        Row number of ``arr``'s first row (for data read in blocks).

    Raises
    ------
    ValidationError
        Naming the parameter, the first offending value and its index (row, column),
        and for a range error the limit and why.
    """
    finite = np.isfinite(arr)
    bad = ~finite
    if max_abs is not None:
        with np.errstate(invalid="ignore"):
            bad |= finite & (np.abs(arr) > max_abs)
    if not bad.any():
        return
    index = np.unravel_index(int(np.flatnonzero(bad)[0]), arr.shape)
    value = float(arr[index])
    if len(index) == 0:
        where = ""
    elif len(index) == 1:
        where = f" at row {int(index[0]) + first_row}"
    else:
        where = (f" at row {int(index[0]) + first_row}, column "
                 f"{', '.join(str(int(i)) for i in index[1:])}")
    if not math.isfinite(value):
        expected = "finite numbers (no NaN or infinity; remove or impute missing values first)"
        got = f"{value}{where}"
    else:
        expected = f"numbers of magnitude at most {max_abs:.3g} ({why})"
        got = f"{value:.3g}{where}"
    if owner is None:
        raise ValidationError(f"{name} must hold {expected}. Got {got} instead.")
    raise invalid_parameter(name, owner, expected, _Summary(got))


def check_array(X: Any, name: str, owner: str, *, ndim: int | None = 2, min_rows: int = 1,
                min_cols: int = 1, max_abs: float | None = MAX_ABS_FLOAT,
                why: str = FLOAT_LIMIT_REASON) -> NDArray[np.float64]:
    """Return a party's data as a checked ``float64`` array (the caller's is never written).

    Parameters
    ----------
    X
        The data: an array or nested sequence of numbers.
    name, owner
        The parameter and the estimator or function it belongs to, for messages.
    ndim
        Required number of dimensions (None: any; then ``min_rows``/``min_cols`` apply
        only to arrays with at least one and two dimensions).
    min_rows, min_cols
        Fewest rows (axis 0) and columns (axis 1) accepted.
    max_abs, why
        Largest magnitude accepted and the reason for it (see :func:`check_values`):
        the limit of the fixed-point or homomorphic encoding the values go into, or of
        the float arithmetic they go through (:data:`MAX_ABS_FLOAT`).

    Raises
    ------
    ValidationError
        Naming ``name``: values that are not numbers, the wrong number of dimensions,
        too few rows or columns, NaN or infinity (with its row and column), or a value
        above ``max_abs`` (with its row and column, the limit and why).
    """
    arr = as_float_array(X, name, owner)
    if ndim is not None and arr.ndim != ndim:
        shape = {1: "a 1-D array (one value per row)",
                 2: "a 2-D array (rows x columns; reshape one column with x.reshape(-1, 1))"}
        raise invalid_parameter(name, owner, shape.get(ndim, f"a {ndim}-D array"),
                                describe(arr))
    if arr.ndim >= 1 and arr.shape[0] < min_rows:
        raise invalid_parameter(name, owner, f"an array with at least {min_rows} row(s)",
                                describe(arr))
    if arr.ndim >= 2 and arr.shape[1] < min_cols:
        raise invalid_parameter(name, owner, f"an array with at least {min_cols} column(s)",
                                describe(arr))
    check_values(arr, name, owner, max_abs=max_abs, why=why)
    return arr
