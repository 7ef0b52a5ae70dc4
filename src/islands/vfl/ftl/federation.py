"""Federated transfer learning as one federation: entity alignment, training, inference.

The flow of Liu et al. (2020) with each organisation on its own premises, in three stages
of one run, each a call of the role functions the estimator uses:

1. **Alignment**: PSI (:mod:`islands.psi.protocol`: Diffie–Hellman, or SecretFlow SPU's
   RR22 with ``psi_engine="spu"``) on the two parties' ID columns; the target A
   initiates, as in
   :meth:`~islands.vfl.ftl.FederatedTransferLearner.fit`.
2. **Training**: :func:`~islands.vfl.ftl.protocol.target` and
   :func:`~islands.vfl.ftl.protocol.source` on the overlap rows, in PSI's agreed order.
3. **Inference**: the source B sends its class labels (``classes``), then A's chosen rows
   are scored by :func:`~islands.vfl.ftl.protocol.infer_target` against B's class
   directions (:func:`~islands.vfl.ftl.protocol.infer_source`): a commodity product
   with the dealer under ``engine="ss"``, under B's key under ``engine="he"``.

Under ``engine="ss"`` a third party, the dealer D (:func:`dealer_party`), deals the
correlated randomness of training and inference (:mod:`islands.vfl.ftl.ss`); it takes
no part in PSI and holds no data.

What each party learns beyond what those stages document: A learns B's class labels
(what its predictions are worth nothing without), B and D the number of rows A scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.errors import ProtocolError
from islands.psi import DEFAULT_MAX_PEER_RATIO
from islands.psi.config import DEFAULT_ENGINE, Engine
from islands.psi.protocol import initiator, responder
from islands.runtime import Party
from islands.vfl.ftl import ss
from islands.vfl.ftl.config import Plan
from islands.vfl.ftl.maths import TaylorLoss
from islands.vfl.ftl.protocol import (
    SourceModel,
    TargetModel,
    infer_source,
    infer_target,
    source,
    target,
)

__all__ = ["DealerOutcome", "SourceOutcome", "TargetOutcome", "dealer_party", "source_party",
           "target_party"]



@dataclass
class TargetOutcome:
    """What A ends with: its network, the aligned IDs and its scored rows.

    Attributes
    ----------
    model
        A's network and the epoch losses.
    ids
        The overlap IDs, in the agreed order.
    rows
        The positions (in A's data) of the rows scored.
    classes
        B's class labels, in the order of ``proba``'s columns.
    proba
        Class probabilities of the scored rows (rows × classes).
    """

    model: TargetModel
    ids: list[Any]
    rows: NDArray[np.int64]
    classes: Array
    proba: Array

    @property
    def labels(self) -> Array:
        """The most probable class of every scored row."""
        return np.asarray(self.classes[np.argmax(self.proba, axis=1)])


@dataclass
class SourceOutcome:
    """What B ends with: its network and Φ, the aligned IDs and the rows it helped score."""

    model: SourceModel
    ids: list[Any]
    scored: int


@dataclass
class DealerOutcome:
    """What D ends with: what it saw in training and in inference (sizes only)."""

    training: ss.DealerRecord
    inference: ss.DealerRecord


def _classes(value: Any, peer: str, party: Party) -> Array:
    classes = np.asarray(value)
    if (classes.ndim != 1 or classes.size < 2 or classes.dtype.kind not in "iuf"
            or not np.all(np.isfinite(classes)) or np.any(np.diff(classes) <= 0)):
        raise ProtocolError(f"party {peer!r} sent malformed class labels (at least 2 "
                            "finite numbers, ascending, expected)", party=party.name,
                            step="classes")
    return classes.astype(np.float64)


def target_party(party: Party, X: Any, ids: Sequence[Any], *, peer: str, plan: Plan,
                 rows: Sequence[int] | None = None, init_seed: int | None = None,
                 max_peer_size: int | None = None,
                 max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO,
                 psi_engine: Engine = DEFAULT_ENGINE, spu: tuple[str, str] | None = None,
                 workers: int | None = None, dealer: str | None = None) -> TargetOutcome:
    """Play A (no labels): align with B, train, then score ``rows`` of X by inference.

    Parameters
    ----------
    X
        All of A's rows, standardised, one per ID.
    ids
        The IDs of X's rows.
    peer
        B's name.
    plan
        The shared plan.
    rows
        Positions of the rows to score (None: every row).
    init_seed
        A's private seed for its initial weights (None: fresh random bits).
    max_peer_size, max_peer_ratio
        A's limit on B's ID set in PSI.
    psi_engine, spu
        PSI's engine and, for ``"spu"``, the SPU addresses of A (the initiator) and B
        (:func:`islands.psi.initiator`'s ``engine`` and ``spu``).
    dealer
        D's name (``engine="ss"``).
    """
    x = np.asarray(X, dtype=np.float64)
    pair = initiator(party, peer=peer, ids=list(ids), workers=workers,
                     max_peer_size=max_peer_size, max_peer_ratio=max_peer_ratio,
                     engine=psi_engine, spu=spu)
    model = target(party, X=x[pair.rows], peer=peer, plan=plan, init_seed=init_seed,
                   dealer=dealer)
    classes = _classes(party.recv(peer, "classes"), peer, party)
    chosen = (np.arange(x.shape[0], dtype=np.int64) if rows is None
              else np.asarray(rows, dtype=np.int64))
    scores = infer_target(party, model.net, x[chosen], peer=peer, plan=plan, dealer=dealer)
    loss = TaylorLoss(plan.loss, classes.size)
    if scores.shape != (chosen.size, loss.scores):
        raise ProtocolError(f"party {peer!r} holds {scores.shape[1]} class directions for "
                            f"{classes.size} classes", party=party.name, step="phi")
    return TargetOutcome(model, list(pair.ids), chosen, classes, loss.proba(scores))


def source_party(party: Party, X: Any, labels: Any, ids: Sequence[Any], *, peer: str,
                 plan: Plan, classes: Any, init_seed: int | None = None,
                 max_peer_size: int | None = None,
                 max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO,
                 psi_engine: Engine = DEFAULT_ENGINE, spu: tuple[str, str] | None = None,
                 workers: int | None = None, dealer: str | None = None) -> SourceOutcome:
    """Play B (labels): align with A, train, then serve A's inference.

    Parameters
    ----------
    X
        All of B's rows, standardised, one per ID.
    labels
        Class codes 0 … K − 1 of every row.
    ids
        The IDs of X's rows.
    classes
        The K class labels (numbers, ascending) the codes stand for; A gets them.
    init_seed, max_peer_size, max_peer_ratio, psi_engine, spu, workers, dealer
        As for :func:`target_party`.
    """
    x = np.asarray(X, dtype=np.float64)
    names = np.asarray(classes, dtype=np.float64)
    pair = responder(party, peer=peer, ids=list(ids), workers=workers,
                     max_peer_size=max_peer_size, max_peer_ratio=max_peer_ratio,
                     engine=psi_engine, spu=spu)
    model = source(party, X=x, labels=labels, overlap=pair.rows, n_classes=names.size,
                   peer=peer, plan=plan, init_seed=init_seed, dealer=dealer)
    party.send(peer, "classes", names)
    scored = infer_source(party, model.phi, peer=peer, plan=plan, dealer=dealer)
    return SourceOutcome(model, list(pair.ids), scored)


def dealer_party(party: Party, *, target: str, source: str, plan: Plan) -> DealerOutcome:
    """Play D (``engine="ss"``): deal training's randomness, then inference's.

    D holds no data and sees only the seeds, the plan, the overlap and scored row counts
    and K (:mod:`islands.vfl.ftl.ss`).
    """
    training = ss.dealer(party, target=target, source=source, plan=plan)
    inference = ss.infer_dealer(party, target=target, source=source, plan=plan)
    return DealerOutcome(training, inference)
