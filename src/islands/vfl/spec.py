"""Vertical regression as ``islands party`` runs it: alignment, training and inference.

The federation file's ``[vfl]`` section names the ``coordinator`` and the ``active``
party (the others are passive, in file order), the model's settings, and ``psi``: with
``psi = true`` every data party gives its ``ids`` file (one ID per row of its data), the
parties align their rows by private set intersection, train, and the active party's
``predict`` file (optional) lists IDs whose outcome it asks for after training
(:mod:`islands.vfl.federation`); with ``psi = false`` (the default) the rows must
already be aligned. The active party's file holds the label in its last column (or
``labels``); for the logistic model, of exactly two classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from islands.errors import JobError, ValidationError
from islands.protocols import (
    Deployment,
    Prepared,
    ProtocolSpec,
    RoleSpec,
    check_section,
    load_column,
    load_table,
    party_ids,
    party_key,
    read_ids,
    read_labels,
    save_json,
)
from islands.psi.spec import spu_addresses
from islands.validation import table_value
from islands.vfl import maths
from islands.vfl.config import RENAMED, VflConfig
from islands.vfl.federation import (
    ActiveResult,
    CoordinatorOutcome,
    PassiveResult,
    PsiSettings,
    active_party,
    coordinator_party,
    passive_party,
)
from islands.vfl.keys import party_security
from islands.vfl.parts import ModelPart
from islands.vfl.protocol import Plan

__all__ = ["SPEC", "is_number", "label_classes", "label_text", "psi_settings",
           "read_label_values", "read_party_data"]

_PARTY_KEYS = ("coordinator", "active")
_ALIGNMENT_KEYS = ("psi", "normalize", "spu")
_FORMS = ("NFC", "NFKC", "NFD", "NFKD", "none")


@dataclass(frozen=True)
class _Federated:
    coordinator: str
    active: str
    passive: tuple[str, ...]
    config: VflConfig
    psi: PsiSettings | None

    @property
    def model(self) -> str:
        return self.config.objective

    @property
    def plan(self) -> Plan:
        return self.config.plan()

    def security(self, party: str) -> dict[str, str]:
        """Warn below the key floor; return what the party's result records then."""
        return party_security(self.config.he, self.config.key_bits, party)


def psi_settings(options: Mapping[str, Any], config: Any, where: str,
                 data_parties: tuple[str, ...], section: str = "vfl") -> PsiSettings | None:
    """Read a vertical section's alignment keys (``psi``, ``normalize``, ``spu``).

    ``config`` holds the PSI limits and engine (``max_peer_size``, ``max_peer_ratio``,
    ``psi_engine``); ``section`` names the section in messages. None without ``psi``.
    """
    if not table_value(options, "psi", (bool,), where, False):
        for key in ("normalize", "max_peer_size", "max_peer_ratio", "psi_engine", "spu"):
            if key in options:
                raise JobError(f"{where}: {key!r} applies only with psi = true")
        return None
    form = options.get("normalize", "NFC")
    if form not in _FORMS:
        raise JobError(f"{where}: 'normalize' must be one of {list(_FORMS)}; got {form!r}")
    engine = config.psi_engine
    hosts = options.get("spu")
    if engine == "dh" and hosts is not None:
        raise JobError(f"{where}: [{section}.spu] applies only with psi_engine = 'spu'")
    if engine == "spu":
        hosts = spu_addresses(hosts, sorted(data_parties), where, f"{section}.spu",
                              "psi_engine = 'spu'")
    return PsiSettings(normalize=None if form == "none" else form,
                       max_peer_size=config.max_peer_size,
                       max_peer_ratio=config.max_peer_ratio, engine=engine,
                       spu=None if hosts is None else dict(hosts))


def _engine(fed: _Federated) -> str:
    return ", PSI on SPU RR22" if fed.psi is not None and fed.psi.engine == "spu" else ""


def _settings(options: Mapping[str, Any], where: str, parties: tuple[str, ...]) -> _Federated:
    check_section(options, where,
                  {*_PARTY_KEYS, *_ALIGNMENT_KEYS, "model", *VflConfig.model_fields}
                  - {"objective"}, renamed=RENAMED)
    c_name, b_name = (party_key(options, key, parties, where) for key in _PARTY_KEYS)
    if c_name == b_name:
        raise JobError(f"{where}: the coordinator and the active party must differ")
    passives = tuple(p for p in parties if p not in (c_name, b_name))
    if not passives:
        raise JobError(f"{where}: vertical FL needs at least one passive party besides the "
                       "coordinator and the active party")
    config = VflConfig.from_federation(
        {k: v for k, v in options.items() if k not in (*_PARTY_KEYS, *_ALIGNMENT_KEYS)},
        where)
    return _Federated(c_name, b_name, passives, config,
                      psi_settings(options, config, where, (b_name, *passives)))


def read_party_data(dep: Deployment, protocol: str, psi: PsiSettings | None, *,
                    missing: bool = False) -> tuple[np.ndarray, list[str] | None]:
    """Read a vertical party's rows and, with ``psi``, its IDs (one per row).

    ``missing``: empty CSV cells read as NaN (:func:`~islands.protocols.load_table`).
    Without ``psi`` the party file may give neither ``ids`` nor ``predict``.
    """
    X = load_table(dep.need("data", protocol), what=f"the data of party {dep.party!r}",
                   missing=missing)
    ids = None
    if psi is not None:
        ids = party_ids(dep, protocol, rows=X.shape[0], normalize=psi.normalize)
    elif dep.ids is not None or dep.predict is not None:
        raise JobError(f"party file {dep.source}: 'ids' and 'predict' need psi = true in "
                       f"{dep.where}")
    return X, ids


def read_label_values(dep: Deployment, X: np.ndarray, psi: PsiSettings | None
                      ) -> tuple[np.ndarray, list[Any]]:
    """Return the active party's features and one label per row (None: unknown).

    Labels come from the last column of ``data`` (NaN: unknown), from an
    NPY/CSV/Parquet ``labels`` file (every row labelled), or from a ``.txt`` labels file:
    one label per line, numbers or class names, an empty line for a row whose outcome is
    unknown (with ``psi = true``: not trained on, and it may be predicted).
    """
    name = dep.party
    text: list[str | None] | None = None
    if dep.labels is None:
        X, raw = X[:, :-1], X[:, -1]
    elif dep.labels.suffix == ".txt":
        text = read_labels(dep.labels, what=f"the labels of party {name!r}")
        raw = np.zeros(len(text))
    else:
        raw = load_column(dep.labels, what=f"the labels of party {name!r}")
    if len(raw) != len(X):
        raise JobError(f"party {name!r}: {len(X)} rows of features but {len(raw)} labels")
    values: list[Any] = ([None if np.isnan(v) else v for v in raw.tolist()] if text is None
                         else list(text))
    if None in values and psi is None:
        raise JobError(f"party {name!r}: every row needs a label when the rows are aligned "
                       "already (psi = false); rows without one need psi = true")
    return X, values


def label_classes(known: list[Any]) -> tuple[bool, list[Any]]:
    """Return whether the labels are all numbers, and the sorted classes they hold."""
    numeric = all(is_number(v) for v in known)
    return numeric, sorted({float(v) for v in known} if numeric else {str(v) for v in known})


def is_number(value: Any) -> bool:
    """Return whether ``value`` reads as a float."""
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def label_text(value: Any) -> str:
    """Return a class label as a predictions file writes it (1.0 as 1)."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _features(dep: Deployment, fed: _Federated) -> tuple[np.ndarray, list[str] | None]:
    return read_party_data(dep, "vfl", fed.psi)


def _check_range(dep: Deployment, X: np.ndarray, fed: _Federated) -> None:
    try:  # the fixed-point range, checked before anything is sent
        maths.encode(X, fed.plan.feature_bits, maths.MAX_ABS_FEATURE,
                     f"the data of party {dep.party!r}", "islands party")
    except ValidationError as exc:
        raise JobError(str(exc)) from None


def _write_model(dep: Deployment, role: str, model: Any, ids: list[Any] | None,
                 out: Path, extra: Mapping[str, Any], *, objective: str,
                 classes: list[Any] | None = None) -> dict[str, Any]:
    """Write the party's weights (``theta.npy``) and its model part (``party-<name>.json``).

    The part (:class:`~islands.vfl.parts.ModelPart`) is what the inference flow of
    ``docs/vfl.md`` reads: a deployed party trains on its columns as given (no
    standardisation: mean 0, scale 1), the active party's last weight is its intercept.
    """
    np.save(out / "theta.npy", model.theta)
    theta = np.asarray(model.theta, dtype=np.float64)
    weights = theta[:-1] if role == "active" else theta
    ModelPart(party=dep.party, role=role, objective=objective, weights=weights,
              mean=np.zeros(weights.size), scale=np.ones(weights.size),
              columns=list(range(weights.size)),
              intercept=float(theta[-1]) if role == "active" else 0.0,
              classes=classes if role == "active" and objective == "logistic" else None,
              ).save(out / f"party-{dep.party}.json")
    summary: dict[str, Any] = {
        "role": role, "epochs": model.epochs,
        "features": int(model.theta.size) - (role == "active"),
        "note": "the active party's last weight is the intercept"}
    if ids is not None:
        (out / "aligned-ids.txt").write_text("".join(f"{v}\n" for v in ids), encoding="utf-8")
        summary["aligned_rows"] = len(ids)
    summary.update(extra)
    save_json(out / "result.json", summary)
    return summary


def _bind_coordinator(dep: Deployment, fed: _Federated) -> Prepared:
    security = fed.security(dep.party)

    def write(result: CoordinatorOutcome, out: Path) -> dict[str, Any]:
        t = result.training
        summary = {"role": "coordinator", "epochs": t.epochs, "epoch_losses": t.epoch_losses,
                   "converged": t.converged, "key_bits": t.key_bits, "scored": result.scored,
                   **security}
        save_json(out / "result.json", summary)
        return summary

    role = partial(coordinator_party, active=fed.active, passive=list(fed.passive),
                   plan=fed.plan, psi=fed.psi)
    return Prepared(role=role, write=write,
                    description=f"vertical {fed.model} regression coordinator"
                                f"{' (PSI, training, inference)' if fed.psi else ''}")


def _bind_passive(dep: Deployment, fed: _Federated) -> Prepared:
    X, ids = _features(dep, fed)
    _check_range(dep, X, fed)
    security = fed.security(dep.party)

    def write(result: PassiveResult, out: Path) -> dict[str, Any]:
        return _write_model(dep, "passive", result.model, result.ids, out,
                            {**({"scored": result.scored} if fed.psi else {}), **security},
                            objective=fed.model)

    role = partial(passive_party, X=X, ids=ids, coordinator=fed.coordinator,
                   active=fed.active, plan=fed.plan, psi=fed.psi)
    return Prepared(role=role, write=write,
                    description=f"vertical {fed.model} regression, passive, {X.shape[1]} "
                                f"columns{_engine(fed)}")


def _targets(dep: Deployment, X: np.ndarray, fed: _Federated
             ) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """Return (features, targets, classes); a row with no label has target NaN.

    The labels are read by :func:`read_label_values`.
    """
    name = dep.party
    X, values = read_label_values(dep, X, fed.psi)
    known = [v for v in values if v is not None]
    if fed.model == "linear":
        try:
            y = np.asarray([np.nan if v is None else float(v) for v in values])
        except ValueError:
            raise JobError(f"party {name!r}: linear regression needs numeric labels; "
                           f"{dep.labels} holds {next(v for v in known if not is_number(v))!r}"
                           ) from None
        return X, y, []
    numeric, classes = label_classes(known)
    if len(classes) != 2:
        raise JobError(f"party {name!r}: logistic regression needs exactly two classes in "
                       f"the labels; got {len(classes)}")
    positive = classes[1]
    y = np.asarray([np.nan if v is None else
                    (1.0 if (float(v) if numeric else str(v)) == positive else -1.0)
                    for v in values])
    return X, y, classes


def _bind_active(dep: Deployment, fed: _Federated) -> Prepared:
    X, ids = _features(dep, fed)
    name = dep.party
    X, y, classes = _targets(dep, X, fed)
    _check_range(dep, X, fed)
    query: list[str] = []
    if dep.predict is not None:
        query = read_ids(dep.predict, what=f"the IDs party {name!r} asks to predict")
        unknown = sorted(set(query) - set(ids or []))
        if unknown:
            raise JobError(f"party {name!r}: its predict file names IDs its ids file does not "
                           f"hold: {unknown[:5]!r}")

    security = fed.security(dep.party)

    def write(result: ActiveResult, out: Path) -> dict[str, Any]:
        extra: dict[str, Any] = dict(security)
        if result.query:
            extra["predicted"] = len(result.query)
            _write_predictions(out / "predictions.csv", result, fed.model, classes)
        return _write_model(dep, "active", result.model, result.ids, out, extra,
                            objective=fed.model, classes=classes)

    role = partial(active_party, X=X, y=y, ids=ids, coordinator=fed.coordinator,
                   passive=list(fed.passive), plan=fed.plan, psi=fed.psi, query=query)
    return Prepared(role=role, write=write,
                    description=f"vertical {fed.model} regression, active, {X.shape[1]} "
                                f"columns{f', {len(query)} IDs to predict' if query else ''}"
                                f"{_engine(fed)}")


def _write_predictions(path: Path, result: ActiveResult, model: str,
                       classes: list[Any]) -> None:
    """Write ``id,score`` (linear) or ``id,score,probability,label`` (logistic) rows."""
    if model == "linear":
        lines = ["id,prediction"] + [f"{i},{z!r}" for i, z in
                                     zip(result.query, result.scores.tolist(), strict=True)]
    else:
        z = result.scores
        p = 1.0 / (1.0 + np.exp(-z))
        lines = ["id,decision,probability,label"] + [
            f"{i},{zi!r},{pi!r},{label_text(classes[1] if zi > 0 else classes[0])}"
            for i, zi, pi in zip(result.query, z.tolist(), p.tolist(), strict=True)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


SPEC = ProtocolSpec(
    name="vfl",
    title="Vertical linear/logistic regression: PSI, training on secret shares (or under "
          "OU or Paillier) with a coordinator, inference",
    settings=_settings,
    assign=lambda fed, parties: {p: ("coordinator" if p == fed.coordinator else
                                     "active" if p == fed.active else "passive")
                                 for p in parties},
    roles={
        "coordinator": RoleSpec("coordinator", _bind_coordinator,
                                "Deals the masks (engine = 'ss') or holds the private "
                                "key (engine = 'he'); no data file."),
        "active": RoleSpec("active", _bind_active,
                           "Holds features and the labels (data, labels; ids and predict "
                           "with psi)."),
        "passive": RoleSpec("passive", _bind_passive,
                            "Holds features only (data; ids with psi)."),
    })
