"""The vertical protocol's arithmetic without encryption: a baseline, never a protection.

:class:`ClearCipher` has the interface of
:class:`~islands.crypto.paillier_ops.VectorCipher` but "encrypts" a signed integer as its
residue modulo M = 2^256 and adds, multiplies and masks in that ring, so a run with
``Plan(he="none")`` sends the same messages, in the same order, with the same
masking, as the Paillier run, only in the clear (32 bytes per value instead of 512). It
exists to measure what Paillier costs (``benchmarks/bench_vfl.py``): every party sees
every value, B sees A's partial scores, C sees nothing masked by a key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.crypto.paillier_ops import modular_masks, modular_unmask
from islands.errors import ValidationError

__all__ = ["ClearCipher"]

_BYTES = 32


class ClearCipher:
    """Residues modulo 2^256 standing in for Paillier ciphertexts (no secrecy at all)."""

    n = 1 << (8 * _BYTES)
    half = n // 2

    def encrypt(self, values: Sequence[int] | NDArray[np.int64]) -> list[int]:
        """Return the residues of signed integers (no encryption)."""
        n = self.n
        return [int(v) % n for v in (values.tolist() if isinstance(values, np.ndarray)
                                     else values)]

    def add(self, a: Sequence[int], b: Sequence[int]) -> list[int]:
        """Elementwise sum modulo 2^256."""
        if len(a) != len(b):
            raise ValidationError(f"ClearCipher.add: {len(a)} and {len(b)} values")
        n = self.n
        return [(x + y) % n for x, y in zip(a, b, strict=True)]

    def weighted(self, values: Sequence[int], weights: NDArray[np.int64]) -> list[int]:
        """Σ_i values[i]·weights[i, j] modulo 2^256 for every column j."""
        sums = np.asarray(list(values), dtype=object) @ np.asarray(weights).astype(object)
        n = self.n
        return [int(s) % n for s in sums]

    def decrypt(self, values: Sequence[int]) -> list[int]:
        """Return the residues themselves (the coordinator's "decryption")."""
        return list(values)

    def decrypt_signed(self, values: Sequence[int]) -> list[int]:
        """Read residues as signed integers in (−2^255, 2^255]."""
        n, half = self.n, self.half
        return [v - n if v > half else v for v in values]

    def masks(self, count: int, value_bits: int) -> list[int]:
        """Draw pads uniform modulo 2^256, as the Paillier run draws them modulo n."""
        return modular_masks(self.n, count)

    def unmask(self, masked: Any, masks: list[int], value_bits: int) -> list[int]:
        """Remove the pads modulo 2^256 and read the result as signed."""
        return modular_unmask(self.n, masked, masks)

    def to_bytes(self, values: Sequence[int]) -> bytes:
        """32 little-endian bytes per residue."""
        return b"".join(int(v).to_bytes(_BYTES, "little") for v in values)

    def from_bytes(self, blob: Any, count: int, name: str, owner: str) -> list[int]:
        """Parse :meth:`to_bytes` output holding exactly ``count`` values."""
        if not isinstance(blob, (bytes, bytearray, memoryview)) or len(blob) != count * _BYTES:
            raise ValidationError(f"{owner}: {name} must hold {count} values of {_BYTES} bytes")
        raw = bytes(blob)
        return [int.from_bytes(raw[i:i + _BYTES], "little") for i in range(0, len(raw), _BYTES)]
