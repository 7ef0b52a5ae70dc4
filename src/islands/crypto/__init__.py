"""Cryptographic building blocks: fixed-point ring encoding and secret sharing.

Randomness for keys, masks and shares always comes from the operating system's CSPRNG
(:mod:`secrets`) or a cryptographic library, never from numpy.
"""

from islands.crypto.fixedpoint import DEFAULT_FRAC_BITS, decode_fixed, encode_fixed, max_abs_value
from islands.crypto.masking import (
    PUBLIC_KEY_BYTES,
    MaskingKey,
    generate_key,
    pair_seed,
    pairwise_mask,
)
from islands.crypto.prg import SEED_BYTES, csprng_normal, csprng_uniform, expand
from islands.crypto.sharing import additive_shares, random_ring_elements, reconstruct

__all__ = [
    "DEFAULT_FRAC_BITS",
    "PUBLIC_KEY_BYTES",
    "SEED_BYTES",
    "MaskingKey",
    "additive_shares",
    "csprng_normal",
    "csprng_uniform",
    "decode_fixed",
    "encode_fixed",
    "expand",
    "generate_key",
    "max_abs_value",
    "pair_seed",
    "pairwise_mask",
    "random_ring_elements",
    "reconstruct",
]
