"""SecureBoost as one federation: private alignment, training, inference.

Each organisation runs one role on its own premises, in stages of one run:

1. **Alignment** (when the parties give ID columns): the active party runs PSI with each
   passive party in turn (:func:`islands.vfl.federation.align_active`, the same stage as
   vertical regression's), so every party holds the shared rows in one agreed order.
2. **Training**: :func:`~islands.vfl.secureboost.protocol.active` and
   :func:`~islands.vfl.secureboost.protocol.passive` on the aligned rows.
3. **Inference** (``query`` given): the active party sends the IDs it wants scored; each
   passive party looks them up among its own rows and answers its records for them
   (:func:`~islands.vfl.secureboost.protocol.serve_inference`). Passive parties see
   the queried IDs, as in vertical regression's inference (Yang et al. 2019, Table 2).
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
                 classes: int = 2, query: Sequence[Any] | None = None,
                 workers: int | None = None,
                 on_round: Callable[[int, Boosted], None] | None = None) -> ActiveResult:
    """Play the active party: align, train, then score ``query``.

    Parameters
    ----------
    X, y
        All of this party's rows and their labels (encoded: 0/1, class codes, values);
        with ``psi``, NaN marks a row with no label, which enters neither PSI nor
        training (it may still be scored).
    ids
        The IDs of X's rows; None with ``psi`` None: rows already aligned.
    query
        Rows to score after training: IDs among ``ids`` (with ``psi``; every passive
        party looks them up among its own IDs, so it sees them, as in vertical
        regression's Table 2), or positions in X when the rows are aligned already.
    """
    x, target = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if psi is None:
        order, rows = None, np.arange(x.shape[0], dtype=np.int64)
    else:
        order, rows = align_active(party, list(ids or []), passive=passive, psi=psi,
                                   entered=np.flatnonzero(np.isfinite(target)),
                                   workers=workers)
    outcome = active(party, x[rows], target[rows], passive=passive, config=config,
                     classes=classes, workers=workers, on_round=on_round)
    scores = np.zeros((0, outcome.model.objective.outputs))
    if query is not None:
        if psi is None:
            asked = np.asarray(query, dtype=np.int64)
            scores = infer(party, x[asked], outcome.model, outcome.table, passive=passive,
                           rows={name: asked for name in passive})
        else:
            lookup = psi.lookup(list(ids or []))
            position = {v: i for i, v in enumerate(lookup)}
            wanted = psi.lookup(list(query))
            unknown = [v for v in wanted if v not in position]
            if unknown:
                raise ProtocolError(f"party {party.name!r}: IDs to score that its own IDs do "
                                    f"not hold: {unknown[:5]!r}", party=party.name,
                                    step="infer")
            asked = np.asarray([position[v] for v in wanted], dtype=np.int64)
            scores = infer(party, x[asked], outcome.model, outcome.table, passive=passive,
                           ids=wanted)
    return ActiveResult(outcome, order, rows, scores)


def passive_party(party: Party, X: Any, ids: Sequence[Any] | None, *, active: str,
                  config: BoostConfig, psi: PsiSettings | None, serve: bool = False,
                  workers: int | None = None) -> PassiveResult:
    """Play a passive party: align, train, then (``serve``) answer the inference stage.

    With ``psi`` the active party asks by ID (any of this party's rows); otherwise by
    position among the aligned rows.
    """
    x = np.asarray(X, dtype=np.float64)
    if psi is None:
        aligned, rows = None, np.arange(x.shape[0], dtype=np.int64)
    else:
        aligned, rows = align_passive(party, list(ids or []), active=active, psi=psi,
                                      workers=workers)
    outcome = passive(party, x[rows], active=active, config=config, workers=workers)
    scored = 0
    if serve:
        scored = (serve_inference(party, x, outcome.table, active=active)
                  if psi is None else
                  serve_inference(party, x, outcome.table, active=active,
                                  ids=psi.lookup(list(ids or []))))
    return PassiveResult(outcome, aligned, rows, scored)
