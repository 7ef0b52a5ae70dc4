"""Secure sum's settings, declared once for ``secure_sum`` and the ``[securesum]`` section."""

from __future__ import annotations

from typing import ClassVar

from islands.config import ProtocolConfig, setting
from islands.crypto.fixedpoint import DEFAULT_FRAC_BITS
from islands.runtime import DEFAULT_TIMEOUT

__all__ = ["SecureSumConfig"]


class SecureSumConfig(ProtocolConfig):
    """The settings every party of a secure sum runs with.

    :func:`~islands.securesum.secure_sum` builds it from its arguments; ``islands party``
    builds it from the federation file's ``[securesum]`` section, whose per-message
    ``timeout`` is the federation file's own top-level setting.
    """

    OWNER: ClassVar[str] = "secure_sum"

    frac_bits: int = setting(
        DEFAULT_FRAC_BITS, "an int in [0, 52]",
        "Fixed-point precision: the sum is exact to about 2^-frac_bits per input.", ge=0, le=52)
    timeout: float = setting(float(DEFAULT_TIMEOUT), "a float in (0, inf)",
                             "Seconds a party waits for one message.", gt=0)
