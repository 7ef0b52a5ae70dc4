"""SecureBoost as one federation: private alignment, training, inference.

Each organisation runs one role on its own premises, in stages of one run:

1. **Alignment** (when the parties give ID columns): the active party runs PSI with each
   passive party in turn (:func:`islands.vfl.federation.align_active`, the same stage as
   vertical regression's), so every party holds the shared rows in one agreed order.
2. **Training**: :func:`~islands.vfl.secureboost.protocol.active` and
   :func:`~islands.vfl.secureboost.protocol.passive` on the aligned rows.
3. **Inference** (``query`` given): the active party asks for the rows of the IDs it
   wants scored; each passive party answers its records for them
   (:func:`~islands.vfl.secureboost.protocol.serve_inference`), after the active party
   sent the queried IDs' positions in the shared ID order of that passive party.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.errors import ProtocolError
from islands.runtime import Party
from islands.vfl.federation import PsiSettings, align_active, align_passive
from islands.vfl.secureboost.config import BoostConfig
from islands.vfl.secureboost.maths import Boosted
from islands.vfl.secureboost.protocol import (
    ActiveOutcome,
    PassiveOutcome,
    active,
    infer,
    passive,
    serve_inference,
)

__all__ = ["ActiveResult", "PassiveResult", "active_party", "passive_party"]


@dataclass
class ActiveResult:
    """The active party's outcome, its aligned IDs and rows, and the scores it asked for."""

    outcome: ActiveOutcome
    ids: list[Any] | None
    rows: NDArray[np.int64]
    scores: Array


@dataclass
class PassiveResult:
    """A passive party's outcome, its aligned IDs and rows, and how many rows it scored."""

    outcome: PassiveOutcome
    ids: list[Any] | None
    rows: NDArray[np.int64]
    scored: int = 0


def active_party(party: Party, X: Any, y: Any, ids: Sequence[Any] | None, *,
                 passive: Sequence[str], config: BoostConfig, psi: PsiSettings | None,
                 classes: int = 2, query: Sequence[int] | None = None,
                 workers: int | None = None,
                 on_round: Callable[[int, Boosted], None] | None = None) -> ActiveResult:
    """Play the active party: align, train, then score ``query`` (positions in X).

    Parameters
    ----------
    X, y
        All of this party's rows and their labels (encoded: 0/1, class codes, values).
    ids
        The IDs of X's rows; None with ``psi`` None: rows already aligned.
    query
        Positions in X of rows to score after training: IDs aligned with every passive
        party only (each must be among the shared IDs), or any row when rows are aligned.
    """
    x, target = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if psi is None:
        order, rows = None, np.arange(x.shape[0], dtype=np.int64)
    else:
        order, rows = align_active(party, list(ids or []), passive=passive, psi=psi,
                                   workers=workers)
    outcome = active(party, x[rows], target[rows], passive=passive, config=config,
                     classes=classes, workers=workers, on_round=on_round)
    scores = np.zeros((0, outcome.model.objective.outputs))
    if query is not None:
        asked = np.asarray(query, dtype=np.int64)
        if psi is None:
            where = asked
        else:
            position = {int(r): i for i, r in enumerate(rows)}
            missing = [int(q) for q in asked if int(q) not in position]
            if missing:
                raise ProtocolError(f"party {party.name!r}: rows {missing[:5]} to score are not "
                                    "shared with every passive party", party=party.name,
                                    step="infer")
            where = np.asarray([position[int(q)] for q in asked], dtype=np.int64)
        scores = infer(party, x[asked], outcome.model, outcome.table, passive=passive,
                       rows={name: where for name in passive})
    return ActiveResult(outcome, order, rows, scores)


def passive_party(party: Party, X: Any, ids: Sequence[Any] | None, *, active: str,
                  config: BoostConfig, psi: PsiSettings | None, serve: bool = False,
                  workers: int | None = None) -> PassiveResult:
    """Play a passive party: align, train, then (``serve``) answer the inference stage.

    In inference, the positions the active party sends index the shared rows, in the
    agreed order.
    """
    x = np.asarray(X, dtype=np.float64)
    if psi is None:
        aligned, rows = None, np.arange(x.shape[0], dtype=np.int64)
    else:
        aligned, rows = align_passive(party, list(ids or []), active=active, psi=psi,
                                      workers=workers)
    outcome = passive(party, x[rows], active=active, config=config, workers=workers)
    scored = serve_inference(party, x[rows], outcome.table, active=active) if serve else 0
    return PassiveResult(outcome, aligned, rows, scored)
