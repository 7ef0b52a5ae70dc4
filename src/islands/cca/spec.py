"""Swarm CCA as ``islands party`` runs it: two peers, each with its own block of columns."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from islands.cca.config import SccaConfig
from islands.cca.protocol import SccaResult, peer
from islands.errors import JobError
from islands.protocols import Deployment, Prepared, ProtocolSpec, RoleSpec, load_table, save_json

__all__ = ["SPEC"]


def _settings(options: Mapping[str, Any], where: str, parties: tuple[str, ...]) -> SccaConfig:
    settings = SccaConfig.from_table(options, where)
    if len(parties) != 2:
        raise JobError(f"{where}: Swarm CCA runs between exactly two parties; "
                       f"[parties] names {len(parties)}")
    return settings


def _bind_peer(dep: Deployment, settings: SccaConfig) -> Prepared:
    Z = load_table(dep.need("data", "cca"), what=f"the data of party {dep.party!r}")
    k = settings.n_components
    if k is not None and k > Z.shape[1]:
        raise JobError(f"{dep.where}: n_components = {k} exceeds the {Z.shape[1]} "
                       f"columns of party {dep.party!r}'s data")

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

    return Prepared(role=partial(peer, Z=Z, **dict(settings)), write=write,
                    description=f"Swarm CCA on {Z.shape[0]} rows × {Z.shape[1]} columns")


SPEC = ProtocolSpec(
    name="cca", title="Swarm CCA between two peers (no server)",
    settings=_settings, assign=lambda settings, parties: {p: "peer" for p in parties},
    roles={"peer": RoleSpec("peer", _bind_peer,
                            "Holds one block of columns (data: one row per sample, rows "
                            "aligned with the other peer's).")})
