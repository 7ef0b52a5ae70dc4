"""Secure sum as ``islands party`` runs it: every party brings a vector, all learn the sum."""

from __future__ import annotations

from collections.abc import Mapping
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
    load_array,
    save_json,
)
from islands.securesum.config import SecureSumConfig
from islands.securesum.protocol import check_values, secure_sum_party

__all__ = ["SPEC"]


def _settings(options: Mapping[str, Any], where: str,
              parties: tuple[str, ...]) -> SecureSumConfig:
    check_section(options, where, set(SecureSumConfig.model_fields) - {"timeout"})
    if len(parties) < 2:
        raise JobError(f"{where}: a secure sum needs at least two parties; [parties] names "
                       f"{len(parties)}")
    return SecureSumConfig.from_table(options, where)


def _vector(table: NDArray[np.float64]) -> NDArray[np.float64]:
    """One row or one column becomes a vector; a matrix is summed as a matrix."""
    return table.reshape(-1) if 1 in table.shape else table


def _bind_party(dep: Deployment, settings: SecureSumConfig) -> Prepared:
    path = dep.need("data", "securesum")
    what = f"the data of party {dep.party!r}"
    try:
        values = check_values(_vector(load_array(path, what=what)), what, settings.frac_bits,
                              len(dep.parties))
    except ValidationError as exc:
        raise JobError(f"party file {dep.source}: its 'data' file {path}: {exc}") from None

    def write(total: NDArray[np.float64], out: Path) -> dict[str, Any]:
        np.save(out / "total.npy", total)
        summary = {"role": "party", "parties": len(dep.parties), "shape": list(total.shape),
                   "frac_bits": settings.frac_bits}
        save_json(out / "result.json", summary)
        return summary

    return Prepared(role=partial(secure_sum_party, x=values, frac_bits=settings.frac_bits),
                    write=write, description=f"secure sum of a {values.shape} array over "
                    f"{len(dep.parties)} parties")


SPEC = ProtocolSpec(
    name="securesum", title="Secure sum by additive secret sharing (no server)",
    settings=_settings, assign=lambda settings, parties: {p: "party" for p in parties},
    roles={"party": RoleSpec("party", _bind_party,
                             "Brings one vector (data: one row or one column; every party "
                             "the same length) and learns the sum of all of them.")})
