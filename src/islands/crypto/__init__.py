"""Cryptographic building blocks: fixed-point ring encoding and secret sharing.

Randomness for keys, masks and shares always comes from the operating system's CSPRNG
(:mod:`secrets`) or a cryptographic library, never from numpy.
"""

from islands.crypto.fixedpoint import DEFAULT_FRAC_BITS, decode_fixed, encode_fixed, max_abs_value
from islands.crypto.sharing import additive_shares, random_ring_elements, reconstruct

__all__ = [
    "DEFAULT_FRAC_BITS",
    "additive_shares",
    "decode_fixed",
    "encode_fixed",
    "max_abs_value",
    "random_ring_elements",
    "reconstruct",
]
