"""Federated PCA as ``islands party`` runs it: one publisher, the other parties sites."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from islands.data.sources import open_source
from islands.errors import JobError
from islands.pca.config import PcaSettings
from islands.pca.protocol import PcaConfig, publisher, site
from islands.protocols import Deployment, Prepared, ProtocolSpec, RoleSpec, party_key, save_json

__all__ = ["SPEC"]

_REMOVED = {"seed": "no longer seeds the DP noise (a shared seed lets anyone who reads this "
                    "file subtract it); remove it, or set 'noise_seed' to make the noise "
                    "reproducible, which voids the DP guarantee"}


@dataclass(frozen=True)
class _Federated:
    settings: PcaSettings
    run: PcaConfig


def _settings(options: Mapping[str, Any], where: str, parties: tuple[str, ...]) -> _Federated:
    for key, why in _REMOVED.items():
        if key in options:
            raise JobError(f"{where}: {key!r} {why}")
    allowed = {"publisher", *PcaSettings.model_fields}
    extra = sorted(set(options) - allowed)
    if extra:
        raise JobError(f"{where}: unknown key(s) {extra}; allowed: {sorted(allowed)}")
    pub = party_key(options, "publisher", parties, where)
    if "mode" not in options:
        # files defaulted to "secure", FederatedPCA to "plain": never drop DP silently
        raise JobError(f"{where}: missing key 'mode'; federation files used to default to "
                       "'secure', FederatedPCA defaults to 'plain' (no noise): set mode = "
                       "\"secure\" to keep the old behaviour, or choose another mode")
    settings = PcaSettings.from_table({k: v for k, v in options.items() if k != "publisher"},
                                      where)
    run = PcaConfig(mode=settings.mode, n_components=settings.n_components,
                    sites=tuple(p for p in parties if p != pub), publisher=pub,
                    epsilon=settings.epsilon, delta=settings.delta,
                    noise_seed=settings.noise_seed)
    return _Federated(settings, run)


def _bind_publisher(dep: Deployment, fed: _Federated) -> Prepared:
    def write(result: Any, out: Path) -> dict[str, Any]:
        np.save(out / "projection.npy", result.projection)
        summary = {"role": "publisher", "rows_per_site": result.rows_per_site,
                   "shape": list(result.projection.shape)}
        save_json(out / "result.json", summary)
        return summary

    return Prepared(role=partial(publisher, config=fed.run), write=write,
                    description=f"federated PCA publisher for {len(fed.run.sites)} sites")


def _bind_site(dep: Deployment, fed: _Federated) -> Prepared:
    settings = fed.settings
    source = open_source(str(dep.need("data", "pca")), block_size=settings.block_size,
                         name=f"the data of party {dep.party!r}")
    k = settings.n_components
    if k > source.n_features:
        raise JobError(f"{dep.where}: n_components = {k} exceeds the {source.n_features} "
                       f"columns of party {dep.party!r}'s data")

    def write(result: Any, out: Path) -> dict[str, Any]:
        np.save(out / "components.npy", result.components)
        np.save(out / "mean.npy", result.mean)
        np.save(out / "eigenvalues.npy", result.eigenvalues)
        summary = {"role": "site", "mode": settings.mode, "n_rows": result.n_rows,
                   "n_total": result.n_total, "tau": result.tau,
                   "noise_std": result.noise_std, "mean_noise_std": result.mean_noise_std,
                   "dp_guarantee": result.dp_guarantee,
                   "dp_void_reason": result.dp_void_reason,
                   "eigenvalues": result.eigenvalues.tolist()}
        save_json(out / "result.json", summary)
        return summary

    return Prepared(role=partial(site, source=source, config=fed.run), write=write,
                    description=f"federated PCA ({settings.mode}) site with "
                                f"{source.n_features} columns")


SPEC = ProtocolSpec(
    name="pca", title="Federated PCA with differential privacy (one publisher, many sites)",
    settings=_settings,
    assign=lambda fed, parties: {p: "publisher" if p == fed.run.publisher else "site"
                                 for p in parties},
    roles={"publisher": RoleSpec("publisher", _bind_publisher,
                                 "Receives the sites' noisy results and publishes the "
                                 "projection (no data file)."),
           "site": RoleSpec("site", _bind_site,
                            "Holds rows (data: CSV, NPY or Parquet, read in blocks).")})
