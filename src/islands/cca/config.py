"""Swarm CCA's settings, declared once for the estimator and the federation file's ``[cca]``."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import model_validator

from islands.config import ProtocolConfig, setting
from islands.errors import ValidationError

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
    protocol: Literal["paper", "secure"] = setting(
        "secure", "'paper' or 'secure'",
        "'secure' (the default): the peers learn only their outputs, with a third party "
        "dealing randomness (islands.cca.secure); 'paper': Li and Du's published protocol "
        "between the two peers alone (a peer can rebuild the other's column space).")
    perturb: bool | None = setting(
        None, "a bool or None",
        "protocol='paper': apply the paper's multiplicative perturbation (it does not "
        "protect the data); None applies it. The secure protocol has none.")
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
    dealer: str = setting(
        "dealer", "a party name",
        "protocol='secure': the party that deals the correlated randomness, a third "
        "organisation that sees only the sizes (the estimator names it 'dealer').",
        min_length=1)

    @model_validator(mode="after")
    def _perturb_is_the_papers(self) -> SccaConfig:
        if self.protocol == "secure" and self.perturb:
            raise ValidationError("perturb applies to protocol='paper' only: the secure "
                                  "protocol (the default) sends no perturbed values; leave "
                                  "perturb as None, or set protocol='paper' for the paper's "
                                  "perturbation")
        return self

    @property
    def perturbs(self) -> bool:
        """Whether the paper's perturbation is applied."""
        return self.protocol == "paper" and self.perturb is not False
