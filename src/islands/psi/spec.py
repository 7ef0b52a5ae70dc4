"""PSI as ``islands party`` runs it: two parties, each with its ID file, learn the common IDs.

A party that also brings data (one row per ID) gets its rows in the aligned order.

The ``[psi]`` section holds :class:`~islands.psi.config.PsiConfig`'s keys (but
``timeout``, the file's own), ``initiator`` and, with ``engine = "spu"``, the table
``[psi.spu]``: each party's SPU address, ``name = "host:port"``, where its SPU listens and
the other's SPU connects (a port of its own, not the party's islands port).
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
    load_table,
    party_ids,
    party_key,
    save_json,
)
from islands.psi.config import PsiConfig
from islands.psi.protocol import Alignment, initiator, responder
from islands.runtime.grpc_transport import check_address

__all__ = ["SPEC"]


@dataclass(frozen=True)
class _Federated:
    initiator: str
    config: PsiConfig
    spu: tuple[str, str] | None = None
    """The initiator's and the responder's SPU addresses (engine = "spu")."""


def spu_addresses(hosts: Any, parties: list[str], where: str, section: str,
                  setting: str) -> dict[str, str]:
    """Return a federation file's SPU addresses, checked: one per party, distinct host:port."""
    if not isinstance(hosts, Mapping) or set(hosts) != set(parties):
        raise JobError(f"{where}: {setting} needs a [{section}] table giving each party's "
                       f"SPU address, name = \"host:port\", for exactly {parties}; "
                       f"got {dict(hosts) if isinstance(hosts, Mapping) else hosts!r}")
    try:
        for name, address in hosts.items():
            check_address(address, f"{where} [{section}] {name}")
    except ValidationError as exc:
        raise JobError(str(exc)) from None
    if len(set(hosts.values())) != len(hosts):
        raise JobError(f"{where} [{section}]: the parties' SPU addresses must differ")
    return dict(hosts)


def _settings(options: Mapping[str, Any], where: str, parties: tuple[str, ...]) -> _Federated:
    check_section(options, where, {"initiator", "spu", *PsiConfig.model_fields} - {"timeout"})
    if len(parties) != 2:
        raise JobError(f"{where}: PSI runs between exactly two parties; [parties] names "
                       f"{len(parties)}")
    first = party_key(options, "initiator", parties, where)
    table = {k: v for k, v in options.items() if k not in ("initiator", "spu")}
    if table.get("normalize") == "none":  # TOML has no None
        table["normalize"] = None
    config = PsiConfig.from_table(table, where)
    if config.engine != "spu":
        if "spu" in options:
            raise JobError(f"{where}: [psi.spu] applies only with engine = 'spu'")
        return _Federated(first, config)
    hosts = spu_addresses(options.get("spu"), list(parties), where, "psi.spu",
                          "engine = 'spu'")
    second = next(p for p in parties if p != first)
    return _Federated(first, config, (hosts[first], hosts[second]))


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
    settings = fed.config.model_dump(exclude={"timeout"})

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

    return Prepared(role=partial(run, peer=peer, ids=ids, spu=fed.spu, **settings), write=write,
                    description=f"PSI {role} with {len(ids)} IDs"
                    + ("" if fed.spu is None else " (SPU RR22)")
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
