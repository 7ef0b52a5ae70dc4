"""Fixed-point encoding of real numbers into the ring Z_{2^64}.

Secret sharing and masking must work over a finite ring, not over floats: float shares
leak magnitudes (ALGORITHMS.md §3). A real x is encoded as round(x·2^f) taken modulo
2^64 (two's complement), so sums of encodings are encodings of sums as long as the true
sum stays inside the representable range.

Range and precision, with f fractional bits: values up to 2^(63-f) in magnitude, in steps
of 2^-f (rounding error at most 2^-(f+1) per value). Summing n encodings is exact while
|Σx| < 2^(63-f); :func:`encode_fixed` checks |x| ≤ 2^(63-f)/headroom so that a sum over
``headroom`` parties cannot wrap.

:func:`quantize` (and :func:`round_scaled` for numerators beyond int64) is the one
rounding rule of every fixed-point encoding in islands: this ring, the vertical
protocols' Paillier numerators (:mod:`islands.vfl.maths`, :mod:`islands.vfl.ftl.maths`)
and packed Paillier plaintexts (:func:`islands.crypto.paillier.pack`). Each caller keeps
its bound, its messages and its representation of negative numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_array

__all__ = [
    "DEFAULT_FRAC_BITS",
    "decode_fixed",
    "dequantize",
    "encode_fixed",
    "max_abs_value",
    "quantize",
    "round_scaled",
]

DEFAULT_FRAC_BITS = 24
"""Default fractional bits: steps of 6e-8, magnitudes up to 5.5e11 before headroom."""


def _check_frac_bits(frac_bits: Any, owner: str) -> int:
    if isinstance(frac_bits, bool) or not isinstance(frac_bits, (int, np.integer)) or not (
        0 <= frac_bits <= 52
    ):
        raise invalid_parameter("frac_bits", owner, "an int in [0, 52]", frac_bits)
    return int(frac_bits)


def round_scaled(
    x: ArrayLike,
    frac_bits: int,
    *,
    bound: float | None,
    inclusive: bool = True,
    limit: int | None = None,
    fail: Callable[[int, float], Exception],
) -> NDArray[np.float64]:
    """Return rint(x·2^f) (ties to even) as exact integral floats, after range checks.

    This is the one rounding rule of every fixed-point encoding in islands; each caller
    keeps its own representation of the numerators (two's complement, signed int64,
    offset binary, Python ints) and its own messages. Use :func:`quantize` unless the
    numerators may exceed int64 (products at scale 2^(2f)).

    Parameters
    ----------
    x
        Reals; the shape is kept.
    frac_bits
        Fractional bits f.
    bound
        Largest magnitude accepted before rounding (``None``: no such bound).
    inclusive
        Whether |x| = ``bound`` is accepted.
    limit
        If given, every |rint(x·2^f)| must be below this integer (checked exactly).
    fail
        Builds the caller's error from the flat index and value of the offending entry:
        the first non-finite one, else the largest in magnitude (first of equals).

    Raises
    ------
    Exception
        Whatever ``fail`` returns, before anything is rounded.
    """
    arr = np.asarray(x, dtype=np.float64)
    scale = float(2 ** int(frac_bits))
    if arr.size:
        finite = np.isfinite(arr)
        if not finite.all():
            bad = int(np.argmin(finite))
            raise fail(bad, float(arr.flat[bad]))
        worst = int(np.argmax(np.abs(arr)))
        top = abs(float(arr.flat[worst]))
        # rint is monotone in |x| and odd, so the largest |x| gives the largest |numerator|
        if bound is not None and (top > bound if inclusive else top >= bound):
            raise fail(worst, float(arr.flat[worst]))
        if limit is not None and int(np.rint(top * scale)) >= limit:
            raise fail(worst, float(arr.flat[worst]))
    out: NDArray[np.float64] = arr * scale
    if isinstance(out, np.ndarray):
        np.rint(out, out=out)  # in place: the product is ours, and one temporary less
    else:  # a 0-d input gives a numpy scalar, rounded as such
        out = np.rint(out)
    return out


def quantize(
    x: ArrayLike,
    frac_bits: int,
    *,
    bound: float | None,
    inclusive: bool = True,
    limit: int = 2**63,
    fail: Callable[[int, float], Exception],
) -> NDArray[np.int64]:
    """Return the int64 numerators rint(x·2^f), checked as in :func:`round_scaled`.

    ``limit`` is at most 2^63 (its default), so a numerator never wraps int64.

    Examples
    --------
    >>> quantize([0.5, 1.5, -2.5], 0, bound=4.0, fail=lambda i, v: ValueError(i)).tolist()
    [0, 2, -2]
    """
    if not 0 < limit <= 2**63:
        raise ValueError(f"quantize: limit must be in (0, 2**63]; got {limit}")
    return round_scaled(x, frac_bits, bound=bound, inclusive=inclusive, limit=limit,
                        fail=fail).astype(np.int64)


def dequantize(q: ArrayLike, frac_bits: int) -> NDArray[np.float64]:
    """Return q·2^-f as float64 (exact up to float64's 53-bit significand)."""
    out: NDArray[np.float64] = np.asarray(q).astype(np.float64)
    out /= float(2 ** int(frac_bits))  # in place: one temporary the size of q less
    return out


def max_abs_value(frac_bits: int = DEFAULT_FRAC_BITS, headroom: int = 1) -> float:
    """Largest magnitude :func:`encode_fixed` accepts for a sum over ``headroom`` values."""
    return float(2 ** (63 - frac_bits)) / headroom


def encode_fixed(
    x: ArrayLike, *, frac_bits: int = DEFAULT_FRAC_BITS, headroom: int = 1
) -> NDArray[np.uint64]:
    """Encode reals as ring elements round(x·2^f) mod 2^64.

    Parameters
    ----------
    x
        Finite real values.
    frac_bits
        Fractional bits f.
    headroom
        How many encodings will be added together; the magnitude bound is divided by it.

    Raises
    ------
    ValidationError
        If x holds NaN/inf or a value whose sum over ``headroom`` parties could wrap.
    """
    f = _check_frac_bits(frac_bits, "encode_fixed")
    if isinstance(headroom, bool) or not isinstance(headroom, int) or headroom < 1:
        raise invalid_parameter("headroom", "encode_fixed", "an int >= 1", headroom)
    bound = max_abs_value(f, headroom)
    arr = check_array(x, "x", "encode_fixed", ndim=None, min_rows=0, max_abs=bound,
                      why=f"frac_bits={f}: a sum over headroom={headroom} values must not "
                      "wrap the 64-bit ring")

    def wraps(_index: int, value: float) -> ValidationError:
        return ValidationError(
            f"encode_fixed: |x| reaches {abs(value):.3g}, but with "
            f"frac_bits={f} and headroom={headroom} values must stay below {bound:.3g}"
        )

    # headroom·|round(x·2^f)| < 2^63 ⟺ |round(x·2^f)| < ceil(2^63/headroom), in exact ints
    scaled = quantize(arr, f, bound=None, limit=-(-(2**63) // headroom), fail=wraps)
    # the view wraps negatives mod 2^64 (two's complement)
    encoded: NDArray[np.uint64] = np.asarray(scaled).view(np.uint64)
    return encoded


def decode_fixed(v: ArrayLike, *, frac_bits: int = DEFAULT_FRAC_BITS) -> NDArray[np.float64]:
    """Decode ring elements (two's complement) back to reals."""
    f = _check_frac_bits(frac_bits, "decode_fixed")
    arr = np.asarray(v)
    if arr.dtype != np.uint64:
        raise ValidationError(f"decode_fixed expects uint64 ring elements, got {arr.dtype}")
    return dequantize(arr.view(np.int64), f)
