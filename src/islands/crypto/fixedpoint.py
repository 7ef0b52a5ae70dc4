"""Fixed-point encoding of real numbers into the ring Z_{2^64}.

Secret sharing and masking must work over a finite ring, not over floats: float shares
leak magnitudes (ALGORITHMS.md §3). A real x is encoded as round(x·2^f) taken modulo
2^64 (two's complement), so sums of encodings are encodings of sums as long as the true
sum stays inside the representable range.

Range and precision, with f fractional bits: values up to 2^(63-f) in magnitude, in steps
of 2^-f (rounding error at most 2^-(f+1) per value). Summing n encodings is exact while
|Σx| < 2^(63-f); :func:`encode_fixed` checks |x| ≤ 2^(63-f)/headroom so that a sum over
``headroom`` parties cannot wrap.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_array

__all__ = ["DEFAULT_FRAC_BITS", "decode_fixed", "encode_fixed", "max_abs_value"]

DEFAULT_FRAC_BITS = 24
"""Default fractional bits: steps of 6e-8, magnitudes up to 5.5e11 before headroom."""


def _check_frac_bits(frac_bits: Any, owner: str) -> int:
    if isinstance(frac_bits, bool) or not isinstance(frac_bits, (int, np.integer)) or not (
        0 <= frac_bits <= 52
    ):
        raise invalid_parameter("frac_bits", owner, "an int in [0, 52]", frac_bits)
    return int(frac_bits)


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
    scaled = np.asarray(np.rint(arr * float(2**f)))
    # checked after rounding, in exact integers: headroom·|round(x·2^f)| < 2^63
    if scaled.size and int(np.max(np.abs(scaled))) * headroom >= 2**63:
        raise ValidationError(
            f"encode_fixed: |x| reaches {float(np.max(np.abs(arr))):.3g}, but with "
            f"frac_bits={f} and headroom={headroom} values must stay below {bound:.3g}"
        )
    # |scaled| < 2^63 here, so the int64 cast is exact; the view wraps negatives mod 2^64
    encoded: NDArray[np.uint64] = scaled.astype(np.int64).view(np.uint64)
    return encoded


def decode_fixed(v: ArrayLike, *, frac_bits: int = DEFAULT_FRAC_BITS) -> NDArray[np.float64]:
    """Decode ring elements (two's complement) back to reals."""
    f = _check_frac_bits(frac_bits, "decode_fixed")
    arr = np.asarray(v)
    if arr.dtype != np.uint64:
        raise ValidationError(f"decode_fixed expects uint64 ring elements, got {arr.dtype}")
    return arr.view(np.int64).astype(np.float64) / float(2**f)
