"""Gradient–hessian packing and cipher compression (SecureBoost+, Chen et al. 2021, §3.1 and §3.3).

Both are integers at 2^-f below 2^52 in every sum (:func:`~islands.vfl.secureboost.maths.quantise`).
A row's pair is one plaintext,

    m = g·2^S + h,   S = 53, 0 ≤ h, Σh < 2^S, |Σg| < 2^52,

so a bin's sum Σm = G·2^S + H gives H = Σm mod 2^S and G = (Σm − H)/2^S exactly,
negative G included (no offset, hence no need to know how many rows a bin holds). One
ciphertext per row instead of two halves the active party's encryption and every passive
party's histogram work.

Cipher compression packs ``k`` bin sums, each |v| < 2^(W−1) with W = 107, into one
plaintext V = Σ_j v_j·2^(jW) (Horner's rule on ciphertexts, one scalar multiplication by
2^W per bin), so the active party decrypts one ciphertext per k bins; V's base-2^W
digits, read as balanced (centred) residues, give back each v_j. k = ⌊(P + 1)/W⌋ for
plaintexts |m| < 2^P (6 for 2048-bit Okamoto–Uchiyama, P = 682).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from islands.vfl.secureboost.maths import SUM_BITS, Ints

__all__ = ["PAIR_SHIFT", "SLOT_BITS", "blocks", "pack", "per_plaintext", "unpack", "unpack_digits"]

PAIR_SHIFT = SUM_BITS + 1
"""S: the hessian's bits in a packed pair."""

SLOT_BITS = 2 * SUM_BITS + 3
"""W: the bits of one packed bin sum as a balanced digit (|v| < 2^(W−1))."""


def per_plaintext(plaintext_bits: int) -> int:
    """Bin sums one plaintext holds: the largest k with k·W − 1 ≤ ``plaintext_bits``."""
    return max(1, (plaintext_bits + 1) // SLOT_BITS)


def pack(g: Ints, h: Ints) -> list[int]:
    """One plaintext per row, g·2^S + h (Python integers, exact)."""
    return [gi * (1 << PAIR_SHIFT) + hi for gi, hi in zip(g.tolist(), h.tolist(), strict=True)]


def unpack(values: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Bin sums Σm back to (G, H), as float64 arrays of exact integers."""
    mask = (1 << PAIR_SHIFT) - 1
    H = [v & mask for v in values]
    G = [(v - hv) >> PAIR_SHIFT for v, hv in zip(values, H, strict=True)]
    return np.array(G, dtype=np.float64), np.array(H, dtype=np.float64)


def unpack_digits(values: Sequence[int], per: int, count: int,
                  block: int | None = None) -> list[int]:
    """Compressed plaintexts back to ``count`` bin sums (``per`` balanced digits each).

    With ``block``, runs never cross a block of that many sums (each block of b sums
    took ⌈b/per⌉ plaintexts, :meth:`~islands.crypto.heu.OuCipher.compress`).
    """
    if block is not None:
        if count % block:
            raise ValueError(f"{count} sums do not form blocks of {block}")
        runs = -(-block // per)
        if len(values) != runs * (count // block):
            raise ValueError(f"{len(values)} plaintexts for {count // block} blocks of {runs}")
        out: list[int] = []
        for b in range(count // block):
            out += unpack_digits(values[b * runs:(b + 1) * runs], per, block)
        return out
    full, half = 1 << SLOT_BITS, 1 << (SLOT_BITS - 1)
    out = []
    for v in values:
        for _ in range(per):
            digit = v & (full - 1)
            if digit >= half:
                digit -= full
            out.append(digit)
            v = (v - digit) >> SLOT_BITS
    if len(out) < count or any(out[count:]):
        raise ValueError("compressed sums do not hold the expected digits")
    return out[:count]


def blocks(count: int, per: int, block: int) -> int:
    """Plaintexts of ``count`` sums compressed ``per`` to one within blocks of ``block``."""
    return (count // block) * -(-block // per)
