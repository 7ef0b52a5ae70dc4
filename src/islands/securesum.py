"""Secure sum by additive secret sharing among equal parties (no server).

Each party i holds a real vector x_i. The protocol (the tutorial's §3.2 scheme, with
every party acting as an aggregator of one share column):

1. ``"spec"``: every party broadcasts the shape of its vector, so that a mismatch is
   caught before any share leaves.
2. ``"share"``: party i encodes x_i in fixed point over Z_{2^64}, splits it into n
   additive shares with a CSPRNG, keeps share i and sends share j to party j.
3. ``"partial"``: party j adds the shares it holds (one from every party) and broadcasts
   that partial sum.
4. Everyone adds the n partial sums and decodes: Σ_i x_i.

What each party learns: its own input and the sum. Every share a party receives is
uniform and independent of the sender's input; the partial sums reveal nothing beyond
the total as long as fewer than n−1 parties collude (a coalition of n−1 learns the last
party's input from the sum, which no sum protocol can prevent). Honest-but-curious
parties are assumed: a party that lies about its share corrupts the sum undetected.

References
----------
.. [1] The FL privacy-computing tutorial, §3.2 (``papers/fl-privacy-computing-tutorial``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.crypto import additive_shares, decode_fixed, encode_fixed, reconstruct
from islands.crypto.fixedpoint import DEFAULT_FRAC_BITS, max_abs_value
from islands.errors import ValidationError, invalid_parameter
from islands.runtime import DEFAULT_TIMEOUT, Party, Transcript, run_local
from islands.validation import check_array, check_int, describe

__all__ = ["SecureSumResult", "secure_sum", "secure_sum_party"]


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


def _check_values(x: ArrayLike, name: str, frac_bits: int, parties: int) -> NDArray[np.float64]:
    """Return one party's vector as float64, checked against the ring's range."""
    f = check_int(frac_bits, "frac_bits", "secure_sum", low=0, high=52)
    return check_array(x, name, "secure_sum", ndim=None, min_rows=0,
                       max_abs=max_abs_value(f, parties),
                       why=f"64-bit fixed point with frac_bits={f}, summed over {parties} "
                       "parties without wrapping")


def secure_sum_party(
    party: Party, x: ArrayLike, *, frac_bits: int = DEFAULT_FRAC_BITS
) -> NDArray[np.float64]:
    """Role of one party in the secure sum; returns the sum of every party's vector.

    Parameters
    ----------
    party
        This party's context.
    x
        This party's private real vector (any shape; all parties must agree).
    frac_bits
        Fixed-point precision: the sum is exact to about 2^-frac_bits per input.
    """
    n = len(party.parties)
    if n < 2:
        raise ValidationError("a secure sum needs at least two parties")
    values = _check_values(x, f"x of party {party.name}", frac_bits, n)
    ring = encode_fixed(values, frac_bits=frac_bits, headroom=n)

    party.broadcast("spec", {"shape": list(values.shape), "frac_bits": frac_bits})
    for peer, spec in party.gather("spec").items():
        if spec != {"shape": list(values.shape), "frac_bits": frac_bits}:
            raise ValidationError(
                f"party {peer!r} holds shape {tuple(spec['shape'])} with frac_bits="
                f"{spec['frac_bits']}, but {party.name!r} holds {values.shape} with "
                f"frac_bits={frac_bits}"
            )

    shares = dict(zip(party.parties, additive_shares(ring, n), strict=True))
    for peer in party.peers:
        party.send(peer, "share", shares[peer])
    held = [shares[party.name], *party.gather("share").values()]

    mine = reconstruct(held)
    party.broadcast("partial", mine)
    total = reconstruct([mine, *party.gather("partial").values()])
    return decode_fixed(total, frac_bits=frac_bits)


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
        Fixed-point precision.
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
    if not isinstance(values, Mapping) or len(values) < 2:
        raise invalid_parameter(
            "values", "secure_sum", "a mapping of party name to that party's values, with "
            "at least two parties (e.g. {'a': [1.0], 'b': [2.0]})", describe(values))
    # every party's vector is checked here first, so bad input fails before the run
    checked = {name: _check_values(x, f"values[{name}]", frac_bits, len(values))
               for name, x in values.items()}
    shapes = {name: x.shape for name, x in checked.items()}
    if len(set(shapes.values())) > 1:
        raise ValidationError(f"every party of secure_sum must hold the same shape; got {shapes}")
    roles = {name: partial(secure_sum_party, x=x, frac_bits=frac_bits)
             for name, x in checked.items()}
    run = run_local(roles, keep_payloads=keep_payloads, timeout=timeout)
    totals = list(run.results.values())
    return SecureSumResult(total=totals[0], transcript=run.transcript)
