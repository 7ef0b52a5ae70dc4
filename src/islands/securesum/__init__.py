"""Secure sum by additive secret sharing among equal parties (no server).

:func:`secure_sum` runs the role :func:`secure_sum_party` (:mod:`islands.securesum.protocol`)
for every party in this process; ``islands party`` runs the same role between
organisations (:mod:`islands.securesum.spec`). Each party learns its own input and the
sum, nothing else (see :mod:`islands.securesum.protocol`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.crypto.fixedpoint import DEFAULT_FRAC_BITS
from islands.errors import ValidationError, invalid_parameter
from islands.runtime import DEFAULT_TIMEOUT, Transcript, run_local
from islands.securesum.config import SecureSumConfig
from islands.securesum.protocol import SumSpec, check_values, secure_sum_party
from islands.validation import describe

__all__ = ["SecureSumConfig", "SecureSumResult", "SumSpec", "secure_sum", "secure_sum_party"]


@dataclass(frozen=True)
class SecureSumResult:
    """What :func:`secure_sum` returns.

    Attributes
    ----------
    total
        Σ_i x_i, as every party computed it.
    transcript
        Every message of the run.
    """

    total: NDArray[np.float64]
    transcript: Transcript


def secure_sum(
    values: Mapping[str, ArrayLike],
    *,
    frac_bits: int = DEFAULT_FRAC_BITS,
    keep_payloads: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> SecureSumResult:
    """Run the secure sum in this process, one thread per party.

    Parameters
    ----------
    values
        Party name → that party's private vector.
    frac_bits
        Fixed-point precision, an int in [0, 52].
    keep_payloads
        Keep message payloads in the transcript (for audits).
    timeout
        Seconds a party waits for any one message.

    Examples
    --------
    >>> r = secure_sum({"a": [1.0, 2.0], "b": [10.0, 20.0], "c": [100.0, 200.0]})
    >>> r.total.tolist(), len(r.transcript)
    ([111.0, 222.0], 18)
    """
    config = SecureSumConfig.build(None, frac_bits=frac_bits, timeout=timeout)
    if not isinstance(values, Mapping) or len(values) < 2:
        raise invalid_parameter(
            "values", "secure_sum", "a mapping of party name to that party's values, with "
            "at least two parties (e.g. {'a': [1.0], 'b': [2.0]})", describe(values))
    # every party's vector is checked here first, so bad input fails before the run
    checked = {name: check_values(x, f"values[{name}]", config.frac_bits, len(values))
               for name, x in values.items()}
    shapes = {name: x.shape for name, x in checked.items()}
    if len(set(shapes.values())) > 1:
        raise ValidationError(f"every party of secure_sum must hold the same shape; got {shapes}")
    roles = {name: partial(secure_sum_party, x=x, frac_bits=config.frac_bits)
             for name, x in checked.items()}
    run = run_local(roles, keep_payloads=keep_payloads, timeout=config.timeout)
    totals = list(run.results.values())
    return SecureSumResult(total=totals[0], transcript=run.transcript)
