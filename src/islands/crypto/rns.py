"""Exact matrix products over a ring of about 2^63, in three residues computed with BLAS.

Secret-shared linear algebra needs exact arithmetic in a finite ring: masks that hide a
matrix must be uniform, and products of masked matrices must cancel exactly. A product
of two n×p and n×q ring matrices, done with integer loops, is hundreds of times slower
than a float product. This module keeps the ring Z_P with P = P1·P2·P3, three primes just
below 2^21 (the residue number system, residues stored as float32), and computes each
residue's product with float64 BLAS, exactly: residues are below 2^21, so every product
is below 2^42 and a sum of 2^11 of them below 2^53, the float64 integer range; the rows
are summed in blocks of 2^11 and reduced modulo the prime between blocks. A product costs
three float products.

* Fixed point: a real x is round(x·2^f) (:func:`islands.crypto.fixedpoint.quantize`), its
  residues taken modulo each prime; :func:`decode` undoes it by Garner's mixed-radix
  reconstruction into (−P/2, P/2), in int64, and divides by 2^f.
* Masks: :func:`uniform` draws residues exactly uniform modulo each prime, by rejection
  from the ChaCha20 stream of :func:`islands.crypto.prg.expand` (a seed expands to the
  same mask on both sides that hold it).
* Wire: :func:`pack` puts the three 21-bit residues of an element into one uint64, and
  :func:`unpack` checks every residue is below its prime.

Written here because no maintained Python library offers exact modular matrix products
at BLAS speed; ``numpy`` integer matmul has no BLAS path, and the primes, the blocking
bound and the reconstruction are a few lines.

References
----------
.. [1] H. L. Garner. "The residue number system." IRE Transactions on Electronic
   Computers EC-8(2), 1959, 140–147 (mixed-radix reconstruction).
.. [2] D. E. Knuth. The Art of Computer Programming, vol. 2, §4.3.2 (modular arithmetic).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.crypto.fixedpoint import quantize
from islands.crypto.prg import expand
from islands.errors import ValidationError

__all__ = ["BLOCK_ROWS", "MODULUS", "PRIMES", "Residues", "add", "decode", "encode",
           "max_frac_bits", "pack", "product", "sub", "uniform", "unpack"]

PRIMES = (2097143, 2097133, 2097131)
"""The three largest primes below 2^21."""

MODULUS = PRIMES[0] * PRIMES[1] * PRIMES[2]
"""P = P1·P2·P3, about 2^63 − 2^46."""

BLOCK_ROWS = 1 << 11
"""Rows summed in float64 before a reduction: 2^11 products below 2^42 stay below 2^53."""

_BITS = 21
_FIELD = (1 << _BITS) - 1
_PRIME_COLUMN = np.array(PRIMES, dtype=np.float32).reshape(3, 1, 1)

Residues = NDArray[np.float32]
"""A ring matrix as its residues: shape (3, rows, cols), residue k in [0, PRIMES[k]).

Stored as float32 (exact below 2^24: sums and differences of two residues stay below
2^22) to halve the memory; :func:`product` widens each block of rows to float64."""


def max_frac_bits(terms_bound: float) -> int:
    """Return the largest f with ``terms_bound``·2^(2f) inside (−P/2, P/2)."""
    f = 0
    while terms_bound * 2.0 ** (2 * (f + 1)) < MODULUS // 2 - 1:
        f += 1
    return f


def encode(x: NDArray[np.float64], frac_bits: int, *, bound: float, what: str) -> Residues:
    """Return the residues of round(x·2^f), |x| ≤ ``bound`` (else an error naming ``what``)."""
    def fail(index: int, value: float) -> ValidationError:  # the value may be secret
        return ValidationError(f"{what}: entry {index} is beyond ±{bound}")

    q = quantize(np.asarray(x, dtype=np.float64), frac_bits, bound=bound, fail=fail)
    out = np.empty((3, *q.shape), dtype=np.float32)
    for k, p in enumerate(PRIMES):
        out[k] = np.mod(q, p)
    return out


def add(a: Residues, b: Residues) -> Residues:
    """Return a + b in the ring."""
    out: Residues = np.fmod(a + b, _PRIME_COLUMN)
    return out


def sub(a: Residues, b: Residues) -> Residues:
    """Return a − b in the ring."""
    out: Residues = np.fmod(a - b + _PRIME_COLUMN, _PRIME_COLUMN)
    return out


def product(a: Residues, b: Residues) -> Residues:
    """Return aᵀb in the ring, exactly: a is (3, n, p), b is (3, n, q); the result (3, p, q)."""
    if a.shape[0] != 3 or b.shape[0] != 3 or a.shape[1] != b.shape[1]:
        raise ValidationError(f"rns.product: shapes {a.shape} and {b.shape} do not match")
    n = a.shape[1]
    acc = np.zeros((a.shape[2], b.shape[2]))
    out = np.empty((3, a.shape[2], b.shape[2]), dtype=np.float32)
    for k, p in enumerate(PRIMES):
        acc[:] = 0.0
        for start in range(0, n, BLOCK_ROWS):
            block_a = a[k, start:start + BLOCK_ROWS].astype(np.float64)
            block_b = b[k, start:start + BLOCK_ROWS].astype(np.float64)
            acc += block_a.T @ block_b
            np.fmod(acc, p, out=acc)
        out[k] = acc
    return out


def uniform(seed: bytes, shape: tuple[int, ...], *, label: bytes) -> Residues:
    """Draw ring elements uniform modulo P from a 32-byte seed, the same wherever it is expanded.

    Each residue takes 21-bit fields of the ChaCha20 stream of
    :func:`~islands.crypto.prg.expand` (three per 64-bit word, label ``label + k``) and
    keeps those below its prime: exactly uniform, rejecting about 6e-6 of the fields.
    """
    count = int(np.prod(shape))
    out = np.empty((3, count), dtype=np.float32)
    for k, p in enumerate(PRIMES):
        want = count + count // 4096 + 64
        while True:
            words = expand(seed, -(-want // 3), label=label + bytes([k]))
            fields = np.stack([(words >> np.uint64(_BITS * j)) & np.uint64(_FIELD)
                               for j in range(3)], axis=1).reshape(-1)
            kept = fields[fields < p]
            if kept.size >= count:
                break
            want *= 2  # a prefix of the same stream: both holders draw the same values
        out[k] = kept[:count]
    return out.reshape(3, *shape)


def decode(r: Residues, frac_bits: int) -> NDArray[np.float64]:
    """Reconstruct the signed values in (−P/2, P/2) (Garner) and divide by 2^(frac_bits)."""
    p1, p2, p3 = PRIMES
    r1, r2, r3 = (np.asarray(r[k], dtype=np.int64) for k in range(3))
    inv12 = pow(p1, -1, p2)
    inv3 = pow(p1 * p2 % p3, -1, p3)
    t2 = (r2 - r1) % p2 * inv12 % p2
    t3 = (r3 - r1 - p1 * t2) % p3 * inv3 % p3
    x = r1 + p1 * t2 + (p1 * p2) * t3  # < P < 2^63: no int64 overflow
    x = np.where(x > MODULUS // 2, x - MODULUS, x)
    out: NDArray[np.float64] = x.astype(np.float64) / 2.0 ** frac_bits
    return out


def pack(r: Residues) -> NDArray[np.uint64]:
    """Pack one uint64 per element: residue k in bits 21k to 21k + 20."""
    out = np.zeros(r.shape[1:], dtype=np.uint64)
    for k in range(3):
        out |= r[k].astype(np.uint64) << np.uint64(_BITS * k)
    return out


def unpack(packed: Any, shape: tuple[int, ...], name: str, owner: str) -> Residues:
    """Read :func:`pack`'s output; refuse a wrong shape or a residue not below its prime."""
    if not (isinstance(packed, np.ndarray) and packed.dtype == np.uint64
            and packed.shape == shape):
        got = (f"{packed.dtype} {packed.shape}" if isinstance(packed, np.ndarray)
               else type(packed).__name__)
        raise ValidationError(f"{owner}: {name} must be a uint64 array of shape {shape}; "
                              f"got {got}")
    if np.any(packed >> np.uint64(3 * _BITS)):
        raise ValidationError(f"{owner}: {name} has bits above the three residues")
    out = np.empty((3, *shape), dtype=np.float32)
    for k, p in enumerate(PRIMES):
        field = (packed >> np.uint64(_BITS * k)) & np.uint64(_FIELD)
        if np.any(field >= p):
            raise ValidationError(f"{owner}: {name} has a residue not below {p}")
        out[k] = field
    return out
