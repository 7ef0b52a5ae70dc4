"""Swarm CCA's settings, declared once for the estimator and the federation file's ``[cca]``."""

from __future__ import annotations

from typing import ClassVar

from islands.config import ProtocolConfig, setting

__all__ = ["SccaConfig"]


class SccaConfig(ProtocolConfig):
    """The settings both SCCA peers run with (the keyword arguments of :func:`~islands.cca.peer`).

    :class:`~islands.cca.SwarmCCA` builds it from its parameters at ``fit``; ``islands
    party`` builds it from the federation file's ``[cca]`` section.
    """

    OWNER: ClassVar[str] = "SwarmCCA"

    n_components: int | None = setting(
        None, "an int in [1, inf)",
        "Number of canonical pairs to keep (the top ones); None keeps all min(p, q).", ge=1)
    perturb: bool = setting(
        True, "a bool",
        "Apply the paper's multiplicative perturbation (it does not protect the data).")
    threshold: float | None = setting(
        None, "a float in (0, 1]",
        "Keep only the components whose correlation ratio is at least this.", gt=0, le=1,
        changed="federation files accepted 0 before; 0 kept every component, as leaving "
                "'threshold' out does, so remove it")
    reg: float = setting(0.0, "a float in [0, inf)",
                         "Ridge term added to C11 and C22 (regularised CCA).", ge=0)
    rank_tol: float | None = setting(
        None, "a float in (0, 1)",
        "Rank-revealing QR: drop columns whose pivot falls below this times the largest.",
        gt=0, lt=1,
        changed="federation files accepted values >= 1 before; they dropped every column")
