"""Exact matrix products over a ring of about 2^63, in three residues computed with BLAS.

Secret-shared linear algebra needs exact arithmetic in a finite ring: masks that hide a
matrix must be uniform, and products of masked matrices must cancel exactly. A product
of two n×p and n×q ring matrices, done with integer loops, is hundreds of times slower
than a float product. This module keeps the ring Z_P with P = P1·P2·P3, three primes just
below 2^21 (the residue number system, residues stored as uint32), and computes each
residue's product with float64 BLAS, exactly: residues are below 2^21, so every product
is below 2^42 and a sum of 2^11 − 1 of them below 2^53, the float64 integer range; the
rows are summed in such blocks and reduced modulo the prime between blocks. A product
costs three float products.

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

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.crypto.fixedpoint import round_scaled
from islands.crypto.prg import expand
from islands.errors import ValidationError

__all__ = ["BLOCK_ROWS", "MODULUS", "PRIMES", "Residues", "add", "decode", "encode",
           "max_frac_bits", "pack", "product", "sub", "uniform", "unpack"]

PRIMES = (2097143, 2097133, 2097131)
"""The three largest primes below 2^21."""

MODULUS = PRIMES[0] * PRIMES[1] * PRIMES[2]
"""P = P1·P2·P3, about 2^63 − 2^46."""

BLOCK_ROWS = (1 << 11) - 1
"""Rows summed in float64 before a reduction: 2^11 − 1 products below 2^42, plus the
reduced sum so far (below 2^21), stay below 2^53."""

_BITS = 21
_FIELD = (1 << _BITS) - 1
_PRIME_COLUMN = np.array(PRIMES, dtype=np.uint32).reshape(3, 1, 1)
_CHUNK = 1 << 15  # elements per pass of an element-wise loop: its temporaries stay in cache

Residues = NDArray[np.uint32]
"""A ring matrix as its residues: shape (3, rows, cols), residue k in [0, PRIMES[k]).

Residues are uint32: sums stay below 2^22, and a reduction is one subtraction and a
minimum (x − P wraps around when x < P); :func:`product` widens blocks to float64."""


def _reduce(x: NDArray[np.uint32]) -> NDArray[np.uint32]:
    """Bring x in [0, 2P_k) to [0, P_k), in place, prime by prime along axis 0."""
    np.minimum(x, x - _PRIME_COLUMN.reshape((3,) + (1,) * (x.ndim - 1)), out=x)
    return x


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

    arr = np.ascontiguousarray(x, dtype=np.float64)
    flat = arr.reshape(-1)
    limit = 1 << 52  # numerators below 2^52 are exact floats, reduced without int64
    if flat.size:
        top, low = flat.max(), flat.min()  # NaN propagates; a bad entry takes the slow path
        if not (np.isfinite(top) and np.isfinite(low) and max(top, -low) <= bound):
            round_scaled(flat, frac_bits, bound=bound, limit=limit, fail=fail)  # raises
    out = np.empty((3, flat.size), dtype=np.uint32)
    tmp = np.empty(min(_CHUNK, flat.size))
    for start in range(0, flat.size, _CHUNK):
        q = round_scaled(flat[start:start + _CHUNK], frac_bits, bound=bound, limit=limit,
                         fail=partial(_shifted, fail, start))
        for k, p in enumerate(PRIMES):
            _residues(q, p, tmp[:q.size], out[k, start:start + q.size])
    return out.reshape(3, *arr.shape)


def _shifted(fail: Callable[[int, float], ValidationError], offset: int, index: int,
             value: float) -> ValidationError:
    return fail(offset + index, value)


def _residues(q: NDArray[np.float64], p: int, t: NDArray[np.float64],
              out: NDArray[np.uint32]) -> None:
    """Write q mod p into ``out`` (``t`` a scratch buffer), for integral floats |q| < 2^52.

    The quotient ⌊q/p⌋ computed in float64 may be one off; q − ⌊q/p⌋·p is then exact and in
    [−p, 2p), and one correction each way brings it into [0, p).
    """
    np.multiply(q, 1.0 / p, out=t)
    np.floor(t, out=t)
    t *= p
    np.subtract(q, t, out=t)
    np.add(t, p, out=t, where=t < 0)
    np.subtract(t, p, out=t, where=t >= p)
    out[:] = t


def add(a: Residues, b: Residues, *, out: Residues | None = None) -> Residues:
    """Return a + b in the ring (into ``out``, which may be ``a`` or ``b``, if given)."""
    return _reduce(np.add(a, b, out=out))


def sub(a: Residues, b: Residues) -> Residues:
    """Return a − b in the ring."""
    return _reduce(a + (_PRIME_COLUMN.reshape((3,) + (1,) * (b.ndim - 1)) - b))


def product(a: Residues, b: Residues) -> Residues:
    """Return aᵀb in the ring, exactly: a is (3, n, p), b is (3, n, q); the result (3, p, q)."""
    if a.shape[0] != 3 or b.shape[0] != 3 or a.shape[1] != b.shape[1]:
        raise ValidationError(f"rns.product: shapes {a.shape} and {b.shape} do not match")
    n = a.shape[1]
    acc = np.empty((a.shape[2], b.shape[2]))
    step = np.empty_like(acc)
    # one float64 buffer per operand, reused block after block (fresh ones cost page faults)
    block_a = np.empty((min(n, BLOCK_ROWS), a.shape[2]))
    block_b = np.empty((min(n, BLOCK_ROWS), b.shape[2]))
    out = np.empty((3, a.shape[2], b.shape[2]), dtype=np.uint32)
    for k, p in enumerate(PRIMES):
        acc[:] = 0.0
        for start in range(0, n, BLOCK_ROWS):
            rows = min(BLOCK_ROWS, n - start)
            left, right = block_a[:rows], block_b[:rows]
            np.copyto(left, a[k, start:start + rows])
            np.copyto(right, b[k, start:start + rows])
            np.matmul(left.T, right, out=step)
            acc += step
            _reduce_float(acc, p)
        out[k] = acc
    return out


def _reduce_float(acc: NDArray[np.float64], p: int) -> None:
    """Reduce acc mod p in place, for integers 0 ≤ acc < 2^53 (``np.fmod`` is slow there).

    ⌊acc/p⌋ may be off by one after rounding; every product and difference is an exact
    integer below 2^53, and the two corrections bring the result into [0, p).
    """
    acc -= np.floor(acc / p) * p
    acc[acc < 0] += p
    acc[acc >= p] -= p


def uniform(seed: bytes, shape: tuple[int, ...], *, label: bytes) -> Residues:
    """Draw ring elements uniform modulo P from a 32-byte seed, the same wherever it is expanded.

    Residue k reads the ChaCha20 stream of :func:`~islands.crypto.prg.expand` (label
    ``label + k``) as 32-bit words, keeps their low 21 bits and drops the values not below
    its prime: exactly uniform, rejecting about 1e-5 of them.
    """
    count = int(np.prod(shape))
    out = np.empty((3, count), dtype=np.uint32)
    for k, p in enumerate(PRIMES):
        want = count + count // 4096 + 64
        while True:
            words = expand(seed, -(-want // 2), label=label + bytes([k])).view(np.uint32)
            np.bitwise_and(words, np.uint32(_FIELD), out=words)
            bad = np.flatnonzero(words >= p)
            if words.size - bad.size >= count:
                break
            want *= 2  # a prefix of the same stream: both holders draw the same values
        _kept_prefix(words, bad, out[k])
    return out.reshape(3, *shape)


def _kept_prefix(words: NDArray[np.uint32], bad: NDArray[np.intp],
                 out: NDArray[np.uint32]) -> None:
    """Fill ``out`` with the first values of ``words`` whose index is not in ``bad`` (sorted)."""
    filled, start = 0, 0
    for stop in (*bad.tolist(), words.size):
        take = min(stop - start, out.size - filled)
        out[filled:filled + take] = words[start:start + take]
        filled += take
        if filled == out.size:
            return
        start = stop + 1


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


def pack(r: Residues, *, plus: Residues | None = None) -> NDArray[np.uint64]:
    """Pack one uint64 per element: residue k in bits 21k to 21k + 20.

    With ``plus``, pack r + plus (in the ring) without materialising the sum.
    """
    shape = r.shape[1:]
    flat = r.reshape(3, -1)
    other = None if plus is None else plus.reshape(3, -1)
    size = flat.shape[1]
    halves = np.empty((size, 2), dtype=np.uint32)  # little-endian: (low, high)
    total = np.empty((3, min(_CHUNK, size)), dtype=np.uint32)
    shifted = np.empty(min(_CHUNK, size), dtype=np.uint32)
    for start in range(0, size, _CHUNK):
        stop = min(start + _CHUNK, size)
        part = flat[:, start:stop]
        if other is not None:
            part = add(part, other[:, start:stop], out=total[:, :stop - start])
        high = shifted[:stop - start]
        np.left_shift(part[1], np.uint32(_BITS), out=high)
        np.bitwise_or(part[0], high, out=halves[start:stop, 0])
        np.right_shift(part[1], np.uint32(32 - _BITS), out=high)
        np.bitwise_or(high, part[2] << np.uint32(2 * _BITS - 32), out=halves[start:stop, 1])
    return halves.view("<u8").reshape(shape).astype(np.uint64, copy=False)


def unpack(packed: Any, shape: tuple[int, ...], name: str, owner: str) -> Residues:
    """Read :func:`pack`'s output; refuse a wrong shape or a residue not below its prime."""
    if not (isinstance(packed, np.ndarray) and packed.dtype == np.uint64
            and packed.shape == shape):
        got = (f"{packed.dtype} {packed.shape}" if isinstance(packed, np.ndarray)
               else type(packed).__name__)
        raise ValidationError(f"{owner}: {name} must be a uint64 array of shape {shape}; "
                              f"got {got}")
    halves = np.ascontiguousarray(packed, dtype="<u8").view(np.uint32).reshape(*shape, 2)
    low, high = halves[..., 0], halves[..., 1]
    out = np.empty((3, *shape), dtype=np.uint32)
    field = np.uint32(_FIELD)
    np.bitwise_and(low, field, out=out[0])
    np.bitwise_or(low >> np.uint32(_BITS),
                  (high & np.uint32((1 << (2 * _BITS - 32)) - 1)) << np.uint32(32 - _BITS),
                  out=out[1])
    np.right_shift(high, np.uint32(2 * _BITS - 32), out=out[2])  # 22 bits: bit 63 included
    for k, p in enumerate(PRIMES):
        if np.any(out[k] >= p):
            raise ValidationError(f"{owner}: {name} has a residue not below {p} (or bits "
                                  "above the three residues)")
    return out
