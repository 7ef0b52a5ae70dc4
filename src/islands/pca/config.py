"""Federated PCA's settings, declared once for the estimator and the federation file's ``[pca]``."""

from __future__ import annotations

from typing import ClassVar

from pydantic import model_validator

from islands.config import ProtocolConfig, setting
from islands.errors import ValidationError, invalid_parameter
from islands.pca.protocol import MODES, Mode

__all__ = ["PcaSettings"]

_EPSILON = "a float in (0, 1) (the classic Gaussian mechanism is proven only for ε < 1)"
_DELTA = "a float in (0, 1)"


class PcaSettings(ProtocolConfig):
    """The settings every party of a federated PCA runs with.

    :class:`~islands.pca.FederatedPCA` builds it from its parameters at ``fit``;
    ``islands party`` builds it from the federation file's ``[pca]`` section (whose
    ``publisher`` key, and the sites' names, go into :class:`~islands.pca.PcaConfig`).
    """

    OWNER: ClassVar[str] = "FederatedPCA"

    mode: Mode = setting("plain", f"one of {list(MODES)}",
                         "Which protocol runs: no noise, the published scheme, the hardened "
                         "one, or a baseline (see islands.pca.protocol).")
    n_components: int = setting(..., "an int in [1, inf)", "k, the number of components.",
                                ge=1)
    epsilon: float | None = setting(
        None, _EPSILON, "ε of the DP modes' (ε, δ) target; None for mode='plain'.", gt=0, lt=1)
    delta: float | None = setting(
        None, _DELTA, "δ of the DP modes' (ε, δ) target; None for mode='plain'.", gt=0, lt=1)
    block_size: int = setting(8192, "an int in [1, inf)",
                              "Rows per block when sites stream their data.", ge=1)
    noise_seed: int | None = setting(
        None, "an int in [0, inf)",
        "Makes the DP noise reproducible, which voids the DP guarantee.", ge=0)

    @model_validator(mode="after")
    def _privacy_fits_the_mode(self) -> PcaSettings:
        if self.mode == "plain":
            if self.epsilon is not None or self.delta is not None:
                raise ValidationError("mode='plain' adds no noise: leave epsilon and delta as "
                                      "None, or choose a DP mode")
            if self.noise_seed is not None:
                raise invalid_parameter("noise_seed", self.OWNER,
                                        "None for mode='plain' (no noise)", self.noise_seed)
        elif self.epsilon is None:
            raise invalid_parameter("epsilon", self.OWNER, _EPSILON, None)
        elif self.delta is None:
            raise invalid_parameter("delta", self.OWNER, _DELTA, None)
        return self
