"""PSI as ``islands party`` runs it: two parties, each with its ID file, learn the common IDs.

A party that also brings data (one row per ID) gets its rows in the aligned order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.errors import JobError
from islands.protocols import (
    Deployment,
    Prepared,
    ProtocolSpec,
    RoleSpec,
    check_section,
    load_table,
    party_ids,
    party_key,
    save_json,
)
from islands.psi.config import PsiConfig
from islands.psi.protocol import Alignment, initiator, responder

__all__ = ["SPEC"]


@dataclass(frozen=True)
class _Federated:
    initiator: str
    config: PsiConfig


def _settings(options: Mapping[str, Any], where: str, parties: tuple[str, ...]) -> _Federated:
    check_section(options, where, {"initiator", *PsiConfig.model_fields} - {"timeout"})
    if len(parties) != 2:
        raise JobError(f"{where}: PSI runs between exactly two parties; [parties] names "
                       f"{len(parties)}")
    first = party_key(options, "initiator", parties, where)
    table = {k: v for k, v in options.items() if k != "initiator"}
    if table.get("normalize") == "none":  # TOML has no None
        table["normalize"] = None
    config = PsiConfig.from_table(table, where)
    if config.engine != "dh":
        raise JobError(f"{where}: engine = {config.engine!r} is not yet available to "
                       "`islands party` (SPU's link between two hosts is not wired into the "
                       "federation); use engine = 'dh' here, or islands.psi.align(..., "
                       "engine='spu') within one machine")
    return _Federated(first, config)


def _assign(fed: _Federated, parties: tuple[str, ...]) -> dict[str, str]:
    return {p: "initiator" if p == fed.initiator else "responder" for p in parties}


def _read(dep: Deployment, fed: _Federated) -> tuple[list[str], NDArray[np.float64] | None]:
    """Read and check the party's IDs (and rows), every error before connecting."""
    if dep.data is None:
        return party_ids(dep, "psi", normalize=fed.config.normalize), None
    rows = load_table(dep.data, what=f"the data of party {dep.party!r}")
    return party_ids(dep, "psi", rows=rows.shape[0], normalize=fed.config.normalize), rows


def _bind(role: str, dep: Deployment, fed: _Federated) -> Prepared:
    ids, rows = _read(dep, fed)
    peer = next(p for p in dep.parties if p != dep.party)
    run = initiator if role == "initiator" else responder
    settings = fed.config.model_dump(exclude={"timeout", "engine"})

    def write(result: Alignment, out: Path) -> dict[str, Any]:
        (out / "common.txt").write_text("".join(f"{i}\n" for i in result.ids),
                                        encoding="utf-8")
        np.save(out / "rows.npy", result.rows)
        if rows is not None:
            np.save(out / "aligned.npy", rows[result.rows])
        summary = {"role": role, "n_own": len(ids), "n_peer": result.peer_size,
                   "n_common": len(result.ids)}
        save_json(out / "result.json", summary)
        return summary

    return Prepared(role=partial(run, peer=peer, ids=ids, **settings), write=write,
                    description=f"PSI {role} with {len(ids)} IDs"
                    + ("" if rows is None else f" and {rows.shape[1]} data columns"))


SPEC = ProtocolSpec(
    name="psi", title="Private set intersection of two parties' ID files",
    settings=_settings, assign=_assign,
    roles={"initiator": RoleSpec("initiator", partial(_bind, "initiator"),
                                 "Starts the run and matches (ids: one ID per line; data: "
                                 "optional, one row per ID)."),
           "responder": RoleSpec("responder", partial(_bind, "responder"),
                                 "Answers the initiator (ids, and optional data, as the "
                                 "initiator's).")})
