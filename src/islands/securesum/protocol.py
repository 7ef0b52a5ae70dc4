"""Secure sum by additive secret sharing among equal parties (no server).

Each party i holds a real vector x_i. The protocol (the tutorial's §3.2 scheme, with
every party acting as an aggregator of one share column):

1. ``"spec"``: every party broadcasts a :class:`SumSpec` (the shape of its vector and its
   precision), so that a mismatch is caught before any share leaves.
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

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.crypto import decode_fixed, encode_fixed
from islands.crypto.fixedpoint import DEFAULT_FRAC_BITS, max_abs_value
from islands.crypto.sharing import reconstruct, share_among
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party, wire
from islands.securesum.config import SecureSumConfig
from islands.validation import check_array

__all__ = ["SumSpec", "check_values", "secure_sum_party"]


@wire.register(name="securesum.Spec")
@dataclass(frozen=True)
class SumSpec:
    """What every party announces before any share leaves: its vector's shape and precision."""

    shape: tuple[int, ...]
    frac_bits: int = field(metadata={"ge": 0, "le": 52})


def check_values(x: ArrayLike, name: str, frac_bits: int, parties: int) -> NDArray[np.float64]:
    """Return one party's vector as float64, checked against the ring's range.

    Raises
    ------
    ValidationError
        Naming ``frac_bits`` out of [0, 52], or ``name`` for values that are not finite
        numbers within what ``parties`` sums of 64-bit fixed point hold.
    """
    f = SecureSumConfig.build(None, frac_bits=frac_bits).frac_bits
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

    Raises
    ------
    ValidationError
        For bad input (before anything is sent), or when another party announces another
        shape or precision (before any share leaves).
    ProtocolError
        When another party's announcement is not a :class:`SumSpec`.
    """
    n = len(party.parties)
    if n < 2:
        raise ValidationError("a secure sum needs at least two parties")
    values = check_values(x, f"x of party {party.name}", frac_bits, n)
    ring = encode_fixed(values, frac_bits=frac_bits, headroom=n)

    mine = SumSpec(tuple(int(d) for d in values.shape), frac_bits)
    party.broadcast("spec", mine)
    for peer, spec in party.gather("spec").items():
        if not isinstance(spec, SumSpec):
            raise ProtocolError(f"party {peer!r} sent a malformed 'spec'", party=party.name,
                                step="spec")
        if spec != mine:
            raise ValidationError(
                f"party {peer!r} holds shape {spec.shape} with frac_bits={spec.frac_bits}, "
                f"but {party.name!r} holds {values.shape} with frac_bits={frac_bits}"
            )

    shares = share_among(ring, party.parties)
    for peer in party.peers:
        party.send(peer, "share", shares[peer])
    held = [shares[party.name], *party.gather("share").values()]

    partial_sum = reconstruct(held)
    party.broadcast("partial", partial_sum)
    total = reconstruct([partial_sum, *party.gather("partial").values()])
    return decode_fixed(total, frac_bits=frac_bits)
