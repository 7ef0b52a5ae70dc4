"""The array types islands' modules annotate with, named once.

``Array`` is a float64 matrix or vector (the dimensionality-reduction and vertical
protocols compute in float64); ``IntArray`` holds fixed-point encodings and labels;
``Vector`` is a float32 flat model (horizontal FL's parameters travel as float32).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["Array", "IntArray", "Vector"]

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]
Vector = NDArray[np.float32]
