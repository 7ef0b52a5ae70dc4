"""Federated transfer learning as ``islands party`` runs it: PSI, training, inference.

Two data parties, and under ``engine = "ss"`` (the default) a third, the dealer. The
federation file's ``[ftl]`` section names the ``source`` party (the one with labels; the
other data party is the target), the ``dealer`` (``engine = "ss"``: a third organisation
that colludes with neither data party; it holds no data and deals correlated randomness,
:mod:`islands.vfl.ftl.ss`) and holds :class:`~islands.vfl.ftl.config.FtlConfig`'s settings
and ``seed`` (the public batch order, default 0)::

    [ftl]
    source = "bank"
    dealer = "notary"  # engine = "ss" (the default): the dealer, a third party
    dim = 16
    hidden = [32]
    epochs = 20
    # engine = "he"    # Liu et al.'s two-party flow instead (no dealer), with:
    # he = "ou"        # or "paillier", "none" (in the clear); and key_bits = 2048
    # psi_engine = "spu"   # SecretFlow SPU's RR22 for the PSI (`make spu`), with:
    # [ftl.spu]            # each data party's SPU address, where its SPU listens
    # bank = "10.0.0.1:9447"
    # shop = "10.0.0.2:9447"

Each data party's file gives ``data`` (its features, standardised, one row per ID) and ``ids``
(one ID per line); the source gives its labels in ``labels`` or as the last column of
``data``; the target may give ``predict``, the IDs of its rows to score (default: every
row). The run is :mod:`islands.vfl.ftl.federation`: PSI on the ID files, training on the
shared rows, then the target's rows scored by federated inference. The target writes
``predictions.csv`` (``id``, ``label`` and one probability column per class), both write
``result.json`` and ``aligned-ids.txt``, the source its class directions ``phi.npy``. The
dealer's file names no data; it writes ``result.json`` with the sizes it saw.

Each party draws its network's initial weights from its CSPRNG. ``random_state`` (an int,
instead of ``seed``) derives the public seed and both parties' initial weights as
:class:`~islands.vfl.ftl.FederatedTransferLearner` does with the same ``random_state``,
so the deployed parties train the estimator's model on the same data; it lets each party
rebuild the other's initial network, so it is for reproducing a run, not for production.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

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
    save_json,
)
from islands.psi.spec import spu_addresses
from islands.validation import check_array
from islands.vfl.config import describe_he
from islands.vfl.ftl import maths
from islands.vfl.ftl.config import RENAMED, FtlSettings, Plan, draw_seeds
from islands.vfl.ftl.federation import (
    DealerOutcome,
    SourceOutcome,
    TargetOutcome,
    dealer_party,
    source_party,
    target_party,
)
from islands.vfl.keys import party_security

__all__ = ["SPEC"]


@dataclass(frozen=True)
class _Federated:
    source: str
    target: str
    config: FtlSettings
    init_seeds: Mapping[str, int | None]
    dealer: str | None = None
    """The dealer (``engine = "ss"``)."""
    spu: tuple[str, str] | None = None
    """The target's and the source's SPU addresses (``psi_engine = "spu"``)."""

    @property
    def plan(self) -> Plan:
        return self.config.plan(self.config.seed)

    @property
    def scheme(self) -> str:
        """The engine in words (the dealer, or ``he``, ``key_bits``, ``djn``)."""
        if self.config.he is None:
            return f"secret sharing with dealer {self.dealer!r}"
        return describe_he(self.config.he, self.config.key_bits, self.config.djn)

    @property
    def engine(self) -> str:
        """``", PSI on SPU RR22"`` with ``psi_engine = "spu"``, else nothing."""
        return ", PSI on SPU RR22" if self.spu is not None else ""

    def security(self, party: str) -> dict[str, str]:
        """Warn below the key floor; return what the party's result records then."""
        if self.config.he is None:  # engine="ss": no key
            return {}
        return party_security(self.config.he, self.config.key_bits, party)

    def limits(self) -> dict[str, Any]:
        return {"max_peer_size": self.config.max_peer_size,
                "max_peer_ratio": self.config.max_peer_ratio,
                "psi_engine": self.config.psi_engine, "spu": self.spu}


def _settings(options: Mapping[str, Any], where: str, parties: tuple[str, ...]) -> _Federated:
    check_section(options, where,
                  {"source", "dealer", "random_state", "spu", *FtlSettings.model_fields},
                  renamed=RENAMED)
    table = {k: v for k, v in options.items()
             if k not in ("source", "dealer", "random_state", "spu")}
    engine = FtlSettings.from_table(table, where).engine  # every setting checked first
    dealer = None
    if engine == "ss":
        if "dealer" not in options:
            raise JobError(f"{where}: engine = 'ss' (the default) needs a third party to deal "
                           "its correlated randomness: name a dealer that colludes with "
                           "neither party (dealer = \"<party>\"), or set engine = 'he'")
        dealer = party_key(options, "dealer", parties, where)
    elif "dealer" in options:
        raise JobError(f"{where}: 'dealer' applies only with engine = 'ss'; engine = 'he' is "
                       "the two-party flow")
    data_parties = [p for p in parties if p != dealer]
    if len(data_parties) != 2:
        raise JobError(f"{where}: federated transfer learning runs between exactly two data "
                       f"parties{' and the dealer' if dealer else ''}; [parties] names "
                       f"{len(parties)}")
    src = party_key(options, "source", parties, where)
    if src == dealer:
        raise JobError(f"{where}: the dealer {dealer!r} cannot be the source: it must "
                       "collude with neither data party")
    tgt = next(p for p in data_parties if p != src)
    seeds: dict[str, int | None] = {src: None, tgt: None}
    if "random_state" in options:
        state = options["random_state"]
        if isinstance(state, bool) or not isinstance(state, int) or state < 0:
            raise JobError(f"{where}: 'random_state' must be an int in [0, inf); got "
                           f"{state!r}")
        if "seed" in options:
            raise JobError(f"{where}: give 'seed' or 'random_state', not both "
                           "('random_state' derives the seed)")
        seeds[tgt], seeds[src], table["seed"] = draw_seeds(state)
    config = FtlSettings.from_table(table, where)
    if config.psi_engine != "spu":
        if "spu" in options:
            raise JobError(f"{where}: [ftl.spu] applies only with psi_engine = 'spu'")
        return _Federated(src, tgt, config, seeds, dealer)
    hosts = spu_addresses(options.get("spu"), [src, tgt], where, "ftl.spu",
                          "psi_engine = 'spu'")
    return _Federated(src, tgt, config, seeds, dealer, (hosts[tgt], hosts[src]))


def _assign(fed: _Federated, parties: tuple[str, ...]) -> dict[str, str]:
    return {p: "dealer" if p == fed.dealer else "source" if p == fed.source else "target"
            for p in parties}


def _read(dep: Deployment, *, labelled: bool
          ) -> tuple[NDArray[np.float64], list[str], NDArray[np.float64] | None]:
    """Read and check the party's rows, IDs (and labels), every error before connecting."""
    name = dep.party
    X = load_table(dep.need("data", "ftl"), what=f"the data of party {name!r}")
    y = None
    if labelled:
        if dep.labels is not None:
            y = load_column(dep.labels, what=f"the labels of party {name!r}")
        else:
            X, y = X[:, :-1], X[:, -1]
    elif dep.labels is not None:
        raise JobError(f"party file {dep.source}: party {name!r} is the target of {dep.where}"
                       "; it holds no labels (the source is the labelled party)")
    try:
        X = check_array(X, "data", f"party {name!r}", max_abs=maths.MAX_ABS_VALUE,
                        why="the networks' representations are encoded in fixed point "
                        "below 2^30; standardise the features")
    except ValidationError as exc:
        raise JobError(f"party file {dep.source}: {exc}") from None
    ids = party_ids(dep, "ftl", rows=X.shape[0])
    if y is not None and (y.shape[0] != X.shape[0] or not np.all(np.isfinite(y))):
        raise JobError(f"party {name!r}: {X.shape[0]} rows of features need as many finite "
                       f"labels; got {y.shape[0]}")
    return X, ids, y


def _write_common(out: Path, role: str, ids: list[Any], model: Any,
                  extra: Mapping[str, Any]) -> dict[str, Any]:
    (out / "aligned-ids.txt").write_text("".join(f"{v}\n" for v in ids), encoding="utf-8")
    summary = {"role": role, "aligned_rows": len(ids), "epochs": model.epochs,
               "epoch_losses": list(model.epoch_losses), **extra}
    save_json(out / "result.json", summary)
    return summary


def _label(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _bind_target(dep: Deployment, fed: _Federated) -> Prepared:
    X, ids, _ = _read(dep, labelled=False)
    rows = None
    if dep.predict is not None:
        query = read_ids(dep.predict, what=f"the IDs party {dep.party!r} asks to predict")
        row_of = {v: i for i, v in enumerate(ids)}
        unknown = [v for v in query if v not in row_of]
        if unknown:
            raise JobError(f"party {dep.party!r}: its predict file names IDs its ids file "
                           f"does not hold: {unknown[:5]!r}")
        rows = [row_of[v] for v in query]
    security = fed.security(dep.party)

    def write(result: TargetOutcome, out: Path) -> dict[str, Any]:
        head = ",".join(["id", "label", *(f"p_{_label(c)}" for c in result.classes)])
        lines = [head] + [
            ",".join([ids[int(r)], _label(label), *(repr(float(p)) for p in proba)])
            for r, label, proba in zip(result.rows, result.labels, result.proba, strict=True)]
        (out / "predictions.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return _write_common(out, "target", result.ids, result.model,
                             {"predicted": int(result.rows.size), **security})

    role = partial(target_party, X=X, ids=ids, peer=fed.source, plan=fed.plan, rows=rows,
                   init_seed=fed.init_seeds[dep.party], dealer=fed.dealer, **fed.limits())
    scored = X.shape[0] if rows is None else len(rows)
    return Prepared(role=role, write=write,
                    description=f"federated transfer learning, target, {X.shape[1]} columns, "
                                f"{scored} rows to predict, {fed.scheme}{fed.engine}")


def _bind_source(dep: Deployment, fed: _Federated) -> Prepared:
    X, ids, y = _read(dep, labelled=True)
    assert y is not None
    classes = np.unique(y)
    if classes.size < 2:
        raise JobError(f"party {dep.party!r}: the labels must hold at least 2 classes; got "
                       f"{classes.tolist()}")
    codes = np.searchsorted(classes, y).astype(np.int64)
    security = fed.security(dep.party)

    def write(result: SourceOutcome, out: Path) -> dict[str, Any]:
        np.save(out / "phi.npy", result.model.phi)
        return _write_common(out, "source", result.ids, result.model,
                             {"converged": result.model.converged,
                              "classes": classes.tolist(), "scored": result.scored,
                              **security})

    role = partial(source_party, X=X, labels=codes, ids=ids, peer=fed.target, plan=fed.plan,
                   classes=classes, init_seed=fed.init_seeds[dep.party], dealer=fed.dealer,
                   **fed.limits())
    return Prepared(role=role, write=write,
                    description=f"federated transfer learning, source, {X.shape[1]} columns, "
                                f"{classes.size} classes, {fed.scheme}{fed.engine}")


def _bind_dealer(dep: Deployment, fed: _Federated) -> Prepared:
    def write(result: DealerOutcome, out: Path) -> dict[str, Any]:
        summary = {"role": "dealer", "target": result.training.target,
                   "source": result.training.source,
                   "aligned_rows": result.training.rows, "scores": result.training.scores,
                   "epochs_dealt": result.training.epochs_dealt,
                   "scored_rows": result.inference.rows}
        save_json(out / "result.json", summary)
        return summary

    role = partial(dealer_party, target=fed.target, source=fed.source, plan=fed.plan)
    return Prepared(role=role, write=write,
                    description="federated transfer learning, dealer (correlated randomness "
                                "only: no data; sees the seeds and the sizes)")


SPEC = ProtocolSpec(
    name="ftl",
    title="Federated transfer learning: PSI, secret-shared or encrypted training of two "
          "networks, inference",
    settings=_settings, assign=_assign,
    roles={"source": RoleSpec("source", _bind_source,
                              "Holds labelled rows (data, ids; labels or the last column)."),
           "target": RoleSpec("target", _bind_target,
                              "Holds unlabelled rows with other features (data, ids; "
                              "predict: optional IDs to score)."),
           "dealer": RoleSpec("dealer", _bind_dealer,
                              "engine = 'ss' only: deals correlated randomness; no data, "
                              "sees only seeds and sizes; colludes with neither party."),
           })
