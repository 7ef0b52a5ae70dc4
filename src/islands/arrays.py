"""The array types islands' modules annotate with, named once.

``Array`` is a float64 matrix or vector (the dimensionality-reduction and vertical
protocols compute in float64); ``IntArray`` holds fixed-point encodings and labels;
``Vector`` is a float32 flat model (horizontal FL's parameters travel as float32).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

__all__ = ["Array", "IntArray", "Vector", "peak_abs"]

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]
Vector = NDArray[np.float32]


def peak_abs(arr: NDArray[np.floating]) -> float:
    """Return max |x| over a float array: inf if it holds ±inf, NaN if a NaN, 0 if empty.

    A maximum and a minimum, with no temporary the size of the array (``np.abs`` would
    make one, ``np.isfinite`` another): the checks on every model a federation moves.
    """
    if arr.size == 0:
        return 0.0
    hi, lo = float(arr.max()), float(arr.min())  # a NaN anywhere makes both NaN
    return math.nan if math.isnan(hi) or math.isnan(lo) else max(hi, -lo)
