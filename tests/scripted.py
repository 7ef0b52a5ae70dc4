"""A client learner whose local training is a known map, for protocol tests without torch."""

from __future__ import annotations

from typing import Any

import numpy as np

from islands.hfl.protocol import LocalOutcome


class ScriptedLearner:
    """Local training replaced by a known map: w ↦ 0.5·w + v_k (no torch needed)."""

    def __init__(self, n: int, v: np.ndarray) -> None:
        self.n, self.v = n, v

    @property
    def n_train(self) -> int:
        return self.n

    @property
    def n_eval(self) -> int:
        return 0

    def train(self, params: Any, **kw: Any) -> LocalOutcome:
        return LocalOutcome(params=(0.5 * params + self.v).astype(np.float32), state=None,
                            loss=0.0)

    def evaluate(self, params: Any) -> float:  # pragma: no cover - n_eval = 0
        return 0.0
