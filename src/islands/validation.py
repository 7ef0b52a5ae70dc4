"""Argument checks shared across islands: ints, floats, seeds, labels.

Every check raises :class:`~islands.errors.ValidationError` built with
:func:`~islands.errors.invalid_parameter`, so the message names the parameter, the
function it belongs to, what was expected and what was got.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.errors import invalid_parameter

__all__ = [
    "RandomState",
    "check_float",
    "check_int",
    "check_labels",
    "check_random_state",
    "describe",
    "is_int",
    "read_toml",
    "table_value",
]

RandomState = int | np.random.Generator | None
"""What ``random_state`` parameters accept: a seed, a generator, or ``None`` (fresh entropy)."""


def read_toml(path: Any) -> dict[str, Any]:
    """Read a job file as TOML.

    Raises
    ------
    DataNotFoundError
        If the file does not exist.
    JobError
        If it is not valid TOML.
    """
    import sys
    from pathlib import Path

    from islands.errors import DataNotFoundError, JobError

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    source = Path(path)
    if not source.is_file():
        raise DataNotFoundError(f"no job file at {source}")
    try:
        raw: dict[str, Any] = tomllib.loads(source.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise JobError(f"job file {source} is not valid TOML: {exc}") from exc
    return raw


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
    from islands.errors import JobError

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

    Arrays are summarised by shape and dtype instead of being printed in full.
    """
    if isinstance(value, np.ndarray):
        return _Summary(f"array(shape={value.shape}, dtype={value.dtype})")
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
) -> float:
    """Return ``value`` as a finite ``float`` after checking it lies above ``low``."""
    ok = isinstance(value, (numbers.Real, np.floating, np.integer)) and not isinstance(
        value, (bool, np.bool_)
    )
    if ok:
        as_float = float(value)
        ok = math.isfinite(as_float) and (as_float >= low if low_inclusive else as_float > low)
    if not ok:
        bracket = "[" if low_inclusive else "("
        raise invalid_parameter(name, owner, f"a float in {bracket}{low:g}, inf)", describe(value))
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
