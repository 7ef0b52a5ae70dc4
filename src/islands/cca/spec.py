"""Swarm CCA as ``islands party`` runs it: two peers, each with its own block of columns."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from islands.cca.config import SccaConfig
from islands.cca.protocol import SccaResult
from islands.cca.secure import DealerRecord, dealer, peer_role
from islands.errors import JobError
from islands.protocols import Deployment, Prepared, ProtocolSpec, RoleSpec, load_table, save_json

__all__ = ["SPEC"]


def _settings(options: Mapping[str, Any], where: str, parties: tuple[str, ...]) -> SccaConfig:
    settings = SccaConfig.from_table(options, where)
    if settings.protocol == "paper" and len(parties) != 2:
        raise JobError(f"{where}: Swarm CCA runs between exactly two parties; "
                       f"[parties] names {len(parties)}")
    if settings.protocol == "secure" and (len(parties) != 3
                                          or settings.dealer not in parties):
        raise JobError(f"{where}: secure Swarm CCA (protocol = 'secure', the default) runs "
                       f"between two peers and a dealer: [parties] must name three, the "
                       f"dealer {settings.dealer!r} among them; it names {list(parties)}. "
                       "Two peers alone can run Li and Du's published protocol, which lets "
                       "each rebuild the other's column space: set protocol = 'paper' in "
                       "[cca]")
    return settings


def _assign(settings: SccaConfig, parties: tuple[str, ...]) -> dict[str, str]:
    return {p: "dealer" if settings.protocol == "secure" and p == settings.dealer else "peer"
            for p in parties}


def _peers(dep: Deployment, settings: SccaConfig) -> list[str]:
    return [p for p in dep.parties if settings.protocol == "paper" or p != settings.dealer]


def _bind_peer(dep: Deployment, settings: SccaConfig) -> Prepared:
    Z = load_table(dep.need("data", "cca"), what=f"the data of party {dep.party!r}")
    k = settings.n_components
    if k is not None and k > Z.shape[1]:
        raise JobError(f"{dep.where}: n_components = {k} exceeds the {Z.shape[1]} "
                       f"columns of party {dep.party!r}'s data")
    other = next(p for p in _peers(dep, settings) if p != dep.party)

    def write(result: SccaResult, out: Path) -> dict[str, Any]:
        np.save(out / "weights.npy", result.weights)
        np.save(out / "mean.npy", result.mean)
        summary = {"role": result.role, "rank": result.rank,
                   "n_components": int(result.ratios.size),
                   "correlation_ratios": result.ratios.tolist(),
                   "canonical_correlations": (result.correlations.tolist() if result.exact
                                              else None)}
        save_json(out / "result.json", summary)
        return summary

    return Prepared(role=partial(peer_role(settings, other), Z=Z), write=write,
                    description=f"Swarm CCA ({settings.protocol} protocol) on {Z.shape[0]} "
                                f"rows × {Z.shape[1]} columns")


def _bind_dealer(dep: Deployment, settings: SccaConfig) -> Prepared:
    def write(result: DealerRecord, out: Path) -> dict[str, Any]:
        summary = {"role": "dealer", "rows": result.n, "s1": result.s1, "s2": result.s2,
                   "s1_columns": result.p, "s2_columns": result.q}
        save_json(out / "result.json", summary)
        return summary

    return Prepared(role=partial(dealer, peers=_peers(dep, settings)), write=write,
                    description="secure Swarm CCA dealer (randomness only; sees the sizes)")


SPEC = ProtocolSpec(
    name="cca", title="Swarm CCA between two peers (no server)",
    settings=_settings, assign=_assign,
    roles={"peer": RoleSpec("peer", _bind_peer,
                            "Holds one block of columns (data: one row per sample, rows "
                            "aligned with the other peer's)."),
           "dealer": RoleSpec("dealer", _bind_dealer,
                              "protocol = 'secure' only: deals correlated randomness; no "
                              "data, sees only the sizes.")})
