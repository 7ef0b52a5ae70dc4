"""The small transfer-learning data set the FTL tests share (helper, like tests/scripted.py)."""

from __future__ import annotations

import numpy as np


def overlap_data(n_b: int = 120, n_o: int = 24, classes: int = 2
                 ) -> tuple[np.ndarray, ...]:
    """Return (x_a, x_b, labels, overlap): A's rows are B's first n_o people, other features."""
    rng = np.random.default_rng(1)
    z = rng.normal(size=(n_b, 3))
    labels = (np.argmax(z @ rng.normal(size=(3, classes)), axis=1)).astype(np.int64)
    x_b = np.hstack([z, rng.normal(size=(n_b, 2))]) + 0.1 * rng.normal(size=(n_b, 5))
    x_a = np.hstack([z[:n_o] @ rng.normal(size=(3, 4)), rng.normal(size=(n_o, 2))])
    return x_a, x_b, labels, np.arange(n_o)
