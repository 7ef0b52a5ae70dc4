"""Vertical FL as one federation: entity alignment, training, then inference.

The system of Yang et al. (2019, §4.2) in three stages, each party on its own premises and
every stage a run of the same role functions the estimators use:

1. **Alignment** (when the parties give ID columns): the active party B runs
   Diffie–Hellman PSI (:mod:`islands.psi.protocol`) with each passive party A_k in turn
   (B says whose ``turn`` it is; A_k initiates). B keeps the IDs every party shares and
   tells each A_k which of its pairwise-common IDs survive (``keep``: positions into
   their common, sorted list, so no ID is sent in the clear). B then tells the
   coordinator C how many rows are aligned (``aligned``).
2. **Training**: :func:`islands.vfl.protocol.passive`, :func:`~islands.vfl.protocol.active`
   and :func:`~islands.vfl.protocol.coordinator` on the aligned rows (Table 1).
3. **Inference** (after alignment by IDs, unless ``PsiSettings.inference`` is off): B
   sends C the IDs it wants scored (``predict``; possibly none), C asks every data party
   for its partial scores of those IDs (Table 2,
   :func:`~islands.vfl.protocol.inference_party`), adds them and returns the decision
   values to B (``scores``).

What each party learns beyond what the stages document (:mod:`islands.psi.protocol`,
:mod:`islands.vfl.protocol`): with several passive parties, each A_k learns how many of its
common IDs are shared by every party (the length of ``keep``) and which; in inference, C
and every data party see the queried IDs, and C sees their decision values, as in the
paper's Table 2.

The in-process estimators run these roles:
:meth:`islands.vfl.estimator.VerticalLinearRegression.fit` with IDs runs alignment and
training as one run of them (without the inference stage), so a deployed federation and
the estimator give the same model on the same data and plan.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.errors import ProtocolError, ValidationError
from islands.psi.protocol import Alignment, initiator, responder
from islands.runtime import Party
from islands.vfl.protocol import (
    CoordinatorResult,
    PartyModel,
    Plan,
    active,
    coordinator,
    inference_coordinator,
    inference_party,
    passive,
)

__all__ = ["ActiveResult", "Alignment", "CoordinatorOutcome", "PassiveResult", "PsiSettings",
           "active_party", "align_active", "align_passive", "coordinator_party",
           "passive_party"]



@dataclass(frozen=True)
class PsiSettings:
    """The PSI settings every party of the federation shares (their limits and form)."""

    normalize: Any = "NFC"
    max_peer_size: int | None = None
    max_peer_ratio: float | None = 10.0
    timeout: float = 600.0
    """Seconds a party waits while the others align (PSI takes minutes at 10^6 IDs)."""
    inference: bool = True
    """Run the inference stage after training (the estimators' ``fit`` runs none)."""
    engine: str = "dh"
    """PSI's engine, ``"dh"`` or ``"spu"`` (:mod:`islands.psi.spu_engine`)."""
    spu: Mapping[str, str] | None = None
    """With ``engine="spu"``: each data party's SPU address, ``"host:port"``."""

    def roles(self, passive: str, active: str) -> dict[str, Any]:
        """Return the keyword arguments of the PSI roles between ``passive`` and ``active``.

        The passive party initiates, the active party responds.
        """
        out: dict[str, Any] = {"normalize": self.normalize,
                               "max_peer_size": self.max_peer_size,
                               "max_peer_ratio": self.max_peer_ratio}
        if self.engine != "dh":
            hosts = self.spu or {}
            out.update(engine=self.engine, spu=(hosts.get(passive), hosts.get(active)))
        return out

    def lookup(self, ids: Sequence[Any]) -> list[Any]:
        """Return IDs as inference looks them up (strings in PSI's normalisation)."""
        form = self.normalize
        return [unicodedata.normalize(form, v) if form and isinstance(v, str) else v
                for v in ids]


@dataclass
class PassiveResult:
    """A passive party's model and, after alignment, its aligned IDs."""

    model: PartyModel
    ids: list[Any] | None
    scored: int = 0


@dataclass
class ActiveResult:
    """The active party's model, aligned IDs and the decision values it asked for."""

    model: PartyModel
    ids: list[Any] | None
    query: list[Any]
    scores: Array


@dataclass
class CoordinatorOutcome:
    """The coordinator's training record and the number of rows it had scored."""

    training: CoordinatorResult
    scored: int


def _id_list(ids: Sequence[Any] | None) -> list[Any]:
    # an array's IDs as Python scalars, as PSI returns them
    return [] if ids is None else ids.tolist() if isinstance(ids, np.ndarray) else list(ids)


def _keep(party: Party, frm: str, size: int, timeout: float) -> NDArray[np.int64]:
    value = np.asarray(party.recv(frm, "keep", timeout=timeout))
    if (value.dtype.kind not in "iu" or value.ndim != 1 or value.size == 0
            or value.min() < 0 or value.max() >= size or np.any(np.diff(value) <= 0)):
        raise ProtocolError(f"party {frm!r} sent a malformed 'keep' list (ascending "
                            f"positions below {size} expected)", party=party.name, step="keep")
    return value.astype(np.int64)


def passive_party(party: Party, X: Any, ids: Sequence[Any] | None, *, coordinator: str,
                  active: str, plan: Plan, psi: PsiSettings | None,
                  workers: int | None = None) -> PassiveResult:
    """Play a passive party A_k through alignment (when ``psi``), training and inference.

    Parameters
    ----------
    X
        All of this party's rows (one per ID when ``ids`` are given).
    ids
        The IDs of X's rows; None with ``psi`` None: rows already aligned.
    """
    x = np.asarray(X, dtype=np.float64)
    if psi is None:
        return PassiveResult(passive(party, x, coordinator=coordinator, active=active,
                                     plan=plan), None)
    own = _id_list(ids)
    aligned, rows = align_passive(party, own, active=active, psi=psi, workers=workers)
    model = passive(party, x[rows], coordinator=coordinator, active=active, plan=plan)
    scored = (inference_party(party, x, model.theta, coordinator=coordinator,
                              ids=psi.lookup(own)) if psi.inference else 0)
    return PassiveResult(model, aligned, scored)


def align_passive(party: Party, ids: list[Any], *, active: str, psi: PsiSettings,
                  workers: int | None = None) -> tuple[list[Any], NDArray[np.int64]]:
    """Run a passive party's side of alignment.

    Returns the IDs every party shares, in the agreed order, and the positions of their
    rows in this party's data.
    """
    party.recv(active, "turn", timeout=psi.timeout)
    pair: Alignment = initiator(party, peer=active, ids=ids, workers=workers,
                                **psi.roles(party.name, active))
    keep = _keep(party, active, len(pair.ids), psi.timeout)
    return [pair.ids[int(i)] for i in keep], pair.rows[keep]


def align_active(party: Party, ids: list[Any], *, passive: Sequence[str], psi: PsiSettings,
                 entered: NDArray[np.int64] | None = None, workers: int | None = None
                 ) -> tuple[list[Any], NDArray[np.int64]]:
    """Run the active party's side of alignment, with every passive party in turn.

    ``entered``: positions of the rows whose IDs enter PSI (None: all). Returns the IDs
    every party shares, in the agreed order, and the positions of their rows here.

    Raises
    ------
    ValidationError
        When the parties share no ID across all of them.
    """
    labelled = np.arange(len(ids)) if entered is None else entered
    own = [ids[int(i)] for i in labelled]
    pairs = []
    for turn, name in enumerate(passive):
        party.send(name, "turn", turn)
        pairs.append(responder(party, peer=name, ids=own, workers=workers,
                               **psi.roles(name, party.name)))
    common = set(pairs[0].ids)
    for pair in pairs[1:]:
        common &= set(pair.ids)
    if not common:  # the data's fault, as PSI's own empty intersection
        raise ValidationError("the parties share no ID across all of them")
    # every pairwise list is sorted by the same rule, so each keeps the common IDs in
    # the same order as the first
    for name, pair in zip(passive, pairs, strict=True):
        party.send(name, "keep", np.asarray([i for i, v in enumerate(pair.ids) if v in common],
                                            dtype=np.int64))
    order = [v for v in pairs[0].ids if v in common]
    row_of = {v: int(labelled[r]) for v, r in zip(pairs[0].ids, pairs[0].rows, strict=True)}
    return order, np.asarray([row_of[v] for v in order], dtype=np.int64)


def active_party(party: Party, X: Any, y: Any, ids: Sequence[Any] | None, *,
                 coordinator: str, passive: Sequence[str], plan: Plan,
                 psi: PsiSettings | None, query: Sequence[Any] = (),
                 workers: int | None = None) -> ActiveResult:
    """Play the active party B: align with every passive party, train, ask for scores.

    Parameters
    ----------
    X, y
        All of B's rows and their targets (already encoded: ±1 for the logistic model);
        NaN marks a row with no label, which B neither enters into PSI nor trains on (it
        may still be predicted).
    ids
        The IDs of X's rows; None with ``psi`` None: rows already aligned.
    query
        IDs whose decision values B asks for after training (alignment by IDs with the
        inference stage only).
    """
    x, target = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    asked = list(query)
    if asked and psi is not None and not psi.inference:
        raise ValidationError(f"party {party.name!r}: IDs to predict need the inference "
                              "stage (PsiSettings.inference)")
    if psi is None:
        model = active(party, x, target, coordinator=coordinator, passive=passive, plan=plan)
        return ActiveResult(model, None, [], np.zeros(0))
    own = _id_list(ids)
    order, rows = align_active(party, own, passive=passive, psi=psi,
                               entered=np.flatnonzero(np.isfinite(target)), workers=workers)
    party.send(coordinator, "aligned", len(order))
    model = active(party, x[rows], target[rows], coordinator=coordinator, passive=passive,
                   plan=plan)
    if not psi.inference:
        return ActiveResult(model, order, [], np.zeros(0))
    party.send(coordinator, "predict", psi.lookup(asked))
    inference_party(party, x, np.asarray(model.theta), coordinator=coordinator,
                    ids=psi.lookup(own), intercept=True)
    scores = np.asarray(party.recv(coordinator, "scores"), dtype=np.float64)
    if scores.shape != (len(asked),):
        raise ProtocolError(f"coordinator {coordinator!r} returned {scores.shape} scores for "
                            f"{len(asked)} IDs", party=party.name, step="scores")
    return ActiveResult(model, order, asked, scores)


def coordinator_party(party: Party, *, active: str, passive: Sequence[str], plan: Plan,
                      psi: PsiSettings | None) -> CoordinatorOutcome:
    """Play the coordinator C: wait for the alignment, run training, then the inference."""
    if psi is not None:
        aligned = party.recv(active, "aligned", timeout=psi.timeout * max(len(passive), 1))
        if not isinstance(aligned, int) or aligned < 1:
            raise ProtocolError(f"party {active!r} sent a malformed 'aligned' count",
                                party=party.name, step="aligned")
    training = coordinator(party, active=active, passive=passive, plan=plan)
    if psi is None or not psi.inference:
        return CoordinatorOutcome(training, 0)
    query = party.recv(active, "predict")
    if not isinstance(query, list):
        raise ProtocolError(f"party {active!r} sent a malformed 'predict' list",
                            party=party.name, step="predict")
    total = inference_coordinator(party, query, parties=[*passive, active])
    party.send(active, "scores", total)
    return CoordinatorOutcome(training, len(query))

