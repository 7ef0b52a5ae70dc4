"""SecureBoost as ``islands party`` runs it: alignment, training and inference.

The federation file's ``[secureboost]`` section names the ``active`` party (labels; the
others are passive, in file order), ``objective`` (``"binary"``, the default,
``"multiclass"`` or ``"regression"``), the settings of
:class:`~islands.vfl.secureboost.config.BoostConfig` and ``psi``: with ``psi = true``
every party gives its ``ids`` file, the parties align their rows by private set
intersection, train, and the active party's ``predict`` file (optional) lists IDs to
score afterwards (:mod:`islands.vfl.secureboost.federation`); with ``psi = false`` (the
default) the rows must already be aligned. The active party's file holds the label in
its last column (or ``labels``). A missing feature value is an empty CSV cell or NaN.

Each party writes its own model part, ``party-<name>.json``: the active party its trees
(each split named only by its owner and a record number), the starting scores, the
class labels and its own lookup table; a passive party its lookup table (feature,
threshold, direction of missing values per record), which never leaves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from islands.errors import JobError
from islands.protocols import (
    Deployment,
    Prepared,
    ProtocolSpec,
    RoleSpec,
    check_section,
    party_key,
    read_ids,
    save_json,
)
from islands.vfl.federation import PsiSettings
from islands.vfl.keys import party_security
from islands.vfl.secureboost.config import BoostConfig
from islands.vfl.secureboost.federation import (
    ActiveResult,
    PassiveResult,
    active_party,
    passive_party,
)
from islands.vfl.spec import (
    label_classes,
    label_text,
    psi_settings,
    read_label_values,
    read_party_data,
)

__all__ = ["SPEC"]

_ALIGNMENT_KEYS = ("psi", "normalize", "spu")


@dataclass(frozen=True)
class _Federated:
    active: str
    passive: tuple[str, ...]
    config: BoostConfig
    psi: PsiSettings | None

    def security(self, party: str) -> dict[str, str]:
        return party_security(self.config.he, self.config.key_bits, party)


def _settings(options: Mapping[str, Any], where: str, parties: tuple[str, ...]) -> _Federated:
    check_section(options, where, {"active", *_ALIGNMENT_KEYS, *BoostConfig.model_fields})
    active = party_key(options, "active", parties, where)
    passives = tuple(p for p in parties if p != active)
    if not passives:
        raise JobError(f"{where}: SecureBoost needs at least one passive party besides the "
                       "active party")
    values = {k: v for k, v in options.items() if k not in ("active", *_ALIGNMENT_KEYS)}
    values.setdefault("objective", "binary")
    config = BoostConfig.from_table(values, where)
    return _Federated(active, passives, config,
                      psi_settings(options, config, where, (active, *passives), "secureboost"))


def _features(dep: Deployment, fed: _Federated) -> tuple[np.ndarray, list[str] | None]:
    X, ids = read_party_data(dep, "secureboost", fed.psi, missing=True)
    if np.isinf(X).any():
        row, col = np.argwhere(np.isinf(X))[0]
        raise JobError(f"the data of party {dep.party!r} holds an infinite value at row {row}, "
                       f"column {col}; SecureBoost takes numbers, empty cells or NaN "
                       "(missing)")
    return X, ids


def _labels(dep: Deployment, X: np.ndarray, fed: _Federated
            ) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """Return (features, targets, classes); NaN marks a row without a label.

    The labels are read by :func:`~islands.vfl.spec.read_label_values`.
    """
    name, objective = dep.party, fed.config.objective
    X, values = read_label_values(dep, X, fed.psi)
    known = [v for v in values if v is not None]
    if objective == "regression":
        try:
            y = np.asarray([np.nan if v is None else float(v) for v in values])
        except ValueError:
            raise JobError(f"party {name!r}: regression needs numeric labels") from None
        return X, y, []
    numeric, classes = label_classes(known)
    expected = "exactly 2" if objective == "binary" else "at least 3"
    if (objective == "binary") != (len(classes) == 2) or len(classes) < 2:
        raise JobError(f"party {name!r}: objective {objective!r} needs {expected} classes in "
                       f"the labels; got {len(classes)}")
    code = {c: i for i, c in enumerate(classes)}
    y = np.asarray([np.nan if v is None else code[float(v) if numeric else str(v)]
                    for v in values], dtype=np.float64)
    return X, y, classes


def _bind_passive(dep: Deployment, fed: _Federated) -> Prepared:
    X, ids = _features(dep, fed)
    security = fed.security(dep.party)
    serve = fed.psi is not None

    def write(result: PassiveResult, out: Path) -> dict[str, Any]:
        table = result.outcome.table
        save_json(out / f"party-{dep.party}.json",
                  {"party": dep.party, "role": "passive", "protocol": "secureboost",
                   "features": int(X.shape[1]), **table.to_dict()})
        summary: dict[str, Any] = {"role": "passive", "records": len(table.records),
                                   "features": int(X.shape[1]), **security}
        if result.ids is not None:
            (out / "aligned-ids.txt").write_text("".join(f"{v}\n" for v in result.ids),
                                                 encoding="utf-8")
            summary["aligned_rows"] = len(result.ids)
            summary["scored"] = result.scored
        save_json(out / "result.json", summary)
        return summary

    role = partial(passive_party, X=X, ids=ids, active=fed.active, config=fed.config,
                   psi=fed.psi, serve=serve)
    return Prepared(role=role, write=write,
                    description=f"SecureBoost, passive, {X.shape[1]} columns")


def _bind_active(dep: Deployment, fed: _Federated) -> Prepared:
    X, ids = _features(dep, fed)
    name = dep.party
    X, y, classes = _labels(dep, X, fed)
    query: list[str] | None = None
    if dep.predict is not None:
        query = read_ids(dep.predict, what=f"the IDs party {name!r} asks to predict")
        unknown = sorted(set(query) - set(ids or []))
        if unknown:
            raise JobError(f"party {name!r}: its predict file names IDs its ids file does not "
                           f"hold: {unknown[:5]!r}")
    elif fed.psi is not None:
        query = []  # the passive parties serve an inference stage in every PSI run
    security = fed.security(dep.party)
    objective = fed.config.objective

    def write(result: ActiveResult, out: Path) -> dict[str, Any]:
        outcome = result.outcome
        save_json(out / f"party-{name}.json",
                  {"party": name, "role": "active", "protocol": "secureboost",
                   "passive": list(fed.passive), "classes": classes,
                   "features": int(X.shape[1]), "model": outcome.model.to_dict(),
                   **outcome.table.to_dict()})
        gains: dict[str, float] = {}
        parties = [name, *fed.passive]
        for built in outcome.model.trees:
            for tree in built:
                for p, g in zip(tree.party, tree.gain, strict=True):
                    if p >= 0:
                        gains[parties[p]] = gains.get(parties[p], 0.0) + g
        summary: dict[str, Any] = {
            "role": "active", "objective": objective, "rounds": len(outcome.model.trees),
            "train_loss": outcome.boosted.train_loss,
            "validation_loss": outcome.boosted.valid_loss, "gain_by_party": gains,
            **security}
        if result.ids is not None:
            (out / "aligned-ids.txt").write_text("".join(f"{v}\n" for v in result.ids),
                                                 encoding="utf-8")
            summary["aligned_rows"] = len(result.ids)
        if query:
            summary["predicted"] = len(query)
            _write_predictions(out / "predictions.csv", query, result.scores,
                               outcome.model.objective.proba(result.scores), objective,
                               classes)
        save_json(out / "result.json", summary)
        return summary

    role = partial(active_party, X=X, y=y, ids=ids, passive=list(fed.passive),
                   config=fed.config, psi=fed.psi,
                   classes=max(len(classes), 2), query=query)
    return Prepared(role=role, write=write,
                    description=f"SecureBoost ({objective}), active, {X.shape[1]} columns"
                                f"{f', {len(query)} IDs to predict' if query else ''}")


def _write_predictions(path: Path, ids: list[str], raw: np.ndarray, proba: np.ndarray,
                       objective: str, classes: list[Any]) -> None:
    if objective == "regression":
        lines = ["id,prediction"] + [f"{i},{v!r}" for i, v in
                                     zip(ids, raw[:, 0].tolist(), strict=True)]
    elif objective == "binary":
        lines = [f"id,p_{label_text(classes[1])},label"] + [
            f"{i},{p!r},{label_text(classes[1] if p > 0.5 else classes[0])}"
            for i, p in zip(ids, proba.tolist(), strict=True)]
    else:
        head = ",".join(f"p_{label_text(c)}" for c in classes)
        lines = [f"id,{head},label"] + [
            f"{i},{','.join(repr(v) for v in row)},{label_text(classes[int(np.argmax(row))])}"
            for i, row in zip(ids, proba.tolist(), strict=True)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


SPEC = ProtocolSpec(
    name="secureboost",
    title="SecureBoost: gradient-boosted trees across vertical parties, gradients under "
          "OU, thresholds kept by their owners; PSI and inference",
    settings=_settings,
    assign=lambda fed, parties: {p: ("active" if p == fed.active else "passive")
                                 for p in parties},
    roles={
        "active": RoleSpec("active", _bind_active,
                           "Holds features and the labels, and the key (data, labels; ids "
                           "and predict with psi)."),
        "passive": RoleSpec("passive", _bind_passive,
                            "Holds features only (data; ids with psi)."),
    })
