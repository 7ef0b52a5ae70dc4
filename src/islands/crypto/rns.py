"""Exact matrix products over rings of 2^63 to 2^189, in residues computed with BLAS.

Secret-shared linear algebra needs exact arithmetic in a finite ring: masks that hide a
matrix must be uniform, and products of masked matrices must cancel exactly. A product
of two n×p and n×q ring matrices, done with integer loops, is hundreds of times slower
than a float product. This module keeps rings Z_P with P = P_1⋯P_K, K primes just below
2^21 (the residue number system, residues stored as uint32), and computes each residue's
product with float64 BLAS, exactly: residues are below 2^21, so every product is below
2^42 and a sum of 2^11 − 1 of them below 2^53, the float64 integer range; the rows are
summed in such blocks and reduced modulo the prime between blocks. A product costs K
float products.

:class:`RnsRing` is a ring of K primes. Two are used:

* the module-level functions are the three-prime ring (P ≈ 2^63) of secure Swarm CCA
  (:mod:`islands.cca.secure`);
* :data:`SS_RING`, nine primes (P ≈ 2^189), holds the exact integers of the vertical
  secret-sharing engines (:mod:`islands.vfl.ss`, :mod:`islands.vfl.ftl.ss`): the Taylor
  flow's sums need up to about 140 bits (:func:`islands.vfl.maths.value_bounds`), the
  poly5 sigmoid's up to 187 (:func:`islands.vfl.maths.poly5_bounds`).

* Fixed point: a real x is round(x·2^f) (:func:`islands.crypto.fixedpoint.quantize`), its
  residues taken modulo each prime (:meth:`RnsRing.encode`); integers come in as int64
  (:meth:`RnsRing.encode_int`). :meth:`RnsRing.decode` undoes a three-prime encoding by
  Garner's mixed-radix reconstruction into (−P/2, P/2) in int64;
  :meth:`RnsRing.decode_int` reconstructs Python integers for any K.
* Masks: :meth:`RnsRing.uniform` draws residues exactly uniform modulo each prime, by
  rejection from the ChaCha20 stream of :func:`islands.crypto.prg.expand` (a seed expands
  to the same mask on both sides that hold it).
* Wire: :meth:`RnsRing.pack` puts the K 21-bit residues of an element into ⌈21K/64⌉
  uint64 words (one for K = 3, three for K = 9), and :meth:`RnsRing.unpack` checks every
  residue is below its prime and no stray bit is set.

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

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.crypto.fixedpoint import round_scaled
from islands.crypto.prg import expand
from islands.errors import ValidationError

__all__ = ["BLOCK_ROWS", "MODULUS", "PRIMES", "SS_RING", "Residues", "RnsRing", "add",
           "decode", "encode", "max_frac_bits", "pack", "product", "sub", "uniform",
           "unpack"]

BLOCK_ROWS = (1 << 11) - 1
"""Rows summed in float64 before a reduction: 2^11 − 1 products below 2^42, plus the
reduced sum so far (below 2^21), stay below 2^53."""

_BITS = 21
_FIELD = (1 << _BITS) - 1
_CHUNK = 1 << 15  # elements per pass of an element-wise loop: its temporaries stay in cache

Residues = NDArray[np.uint32]
"""A ring matrix as its residues: shape (K, rows, cols), residue k in [0, primes[k]).

Residues are uint32: sums stay below 2^22, and a reduction is one subtraction and a
minimum (x − P wraps around when x < P); products widen blocks to float64."""


def _primes_below(limit: int, count: int) -> tuple[int, ...]:
    """Return the ``count`` largest primes below ``limit`` (trial division: it is 2^21)."""
    out: list[int] = []
    c = limit - 1
    while len(out) < count:
        if c % 2 and all(c % d for d in range(3, int(c**0.5) + 1, 2)):
            out.append(c)
        c -= 1
    return tuple(out)


class RnsRing:
    """The ring Z_P, P the product of ``primes`` (distinct primes below 2^21).

    Parameters
    ----------
    primes
        The moduli, each below 2^21 (products of two residues stay below 2^42).
    """

    def __init__(self, primes: Sequence[int]) -> None:
        if not primes or len(set(primes)) != len(primes) or not all(
                2 < p < (1 << _BITS) for p in primes):
            raise ValidationError(f"RnsRing: primes must be distinct and below 2^21; got "
                                  f"{primes!r}")
        self.primes = tuple(int(p) for p in primes)
        self.k = len(self.primes)
        self.modulus = 1
        for p in self.primes:
            self.modulus *= p
        self.words = -(-_BITS * self.k // 64)
        """uint64 words per element on the wire."""
        self._column = np.array(self.primes, dtype=np.uint32)
        self._garner = [pow(int(np.prod(self.primes[:i], dtype=object)) % p, -1, p)
                        for i, p in enumerate(self.primes)]
        self._radix = [int(np.prod(self.primes[:i], dtype=object)) for i in range(self.k)]
        # x = Σ r_k·c_k mod P, c_k = (P/p_k)·((P/p_k)^-1 mod p_k)
        self._crt = [self.modulus // p * pow(self.modulus // p % p, -1, p)
                     for p in self.primes]

    def __repr__(self) -> str:
        return f"RnsRing({self.k} primes, P ≈ 2^{self.modulus.bit_length()})"

    def _col(self, ndim: int) -> NDArray[np.uint32]:
        return self._column.reshape((self.k,) + (1,) * (ndim - 1))

    def _reduce(self, x: NDArray[np.uint32]) -> NDArray[np.uint32]:
        """Bring x in [0, 2P_k) to [0, P_k), in place, prime by prime along axis 0."""
        np.minimum(x, x - self._col(x.ndim), out=x)
        return x

    # ------------------------------------------------------------------ encoding

    def encode(self, x: NDArray[np.float64], frac_bits: int, *, bound: float,
               what: str) -> Residues:
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
        out = np.empty((self.k, flat.size), dtype=np.uint32)
        tmp = np.empty(min(_CHUNK, flat.size))
        for start in range(0, flat.size, _CHUNK):
            q = round_scaled(flat[start:start + _CHUNK], frac_bits, bound=bound, limit=limit,
                             fail=partial(_shifted, fail, start))
            for k, p in enumerate(self.primes):
                _residues(q, p, tmp[:q.size], out[k, start:start + q.size])
        return out.reshape(self.k, *arr.shape)

    def encode_int(self, q: Any) -> Residues:
        """Return the residues of integers: an int64 array, or Python ints of any size."""
        arr = np.asarray(q)
        if arr.dtype == object:
            flat = [int(v) for v in arr.reshape(-1)]
            out = np.array([[v % p for v in flat] for p in self.primes], dtype=np.uint32)
            return out.reshape(self.k, *arr.shape)
        if arr.dtype.kind not in "iu":
            raise ValidationError(f"RnsRing.encode_int: integers expected; got {arr.dtype}")
        wide = arr.astype(np.int64, copy=False)
        out = np.empty((self.k, *arr.shape), dtype=np.uint32)
        for k, p in enumerate(self.primes):
            np.remainder(wide, p, out=out[k], casting="unsafe")
        return out

    # -------------------------------------------------------------- arithmetic

    def add(self, a: Residues, b: Residues, *, out: Residues | None = None) -> Residues:
        """Return a + b in the ring (into ``out``, which may be ``a`` or ``b``, if given)."""
        return self._reduce(np.add(a, b, out=out))

    def sub(self, a: Residues, b: Residues) -> Residues:
        """Return a − b in the ring."""
        return self._reduce(a + (self._col(b.ndim) - b))

    def neg(self, a: Residues) -> Residues:
        """Return −a in the ring."""
        return self._reduce(self._col(a.ndim) - a)

    def mul(self, a: Residues, b: Residues) -> Residues:
        """Return the element-wise product a·b in the ring."""
        wide = a.astype(np.uint64) * b.astype(np.uint64)  # below 2^42
        wide %= self._col(wide.ndim).astype(np.uint64)
        return wide.astype(np.uint32)

    def scale(self, a: Residues, c: int) -> Residues:
        """Return c·a in the ring for a Python integer c (any size, any sign)."""
        factors = np.array([c % p for p in self.primes], dtype=np.uint64)
        wide = a.astype(np.uint64) * factors.reshape((self.k,) + (1,) * (a.ndim - 1))
        wide %= self._col(wide.ndim).astype(np.uint64)
        return wide.astype(np.uint32)

    def product(self, a: Residues, b: Residues) -> Residues:
        """Return aᵀb in the ring, exactly: a is (K, n, p), b is (K, n, q); the result (K, p, q)."""
        if a.ndim != 3 or b.ndim != 3 or a.shape[0] != self.k or b.shape[0] != self.k or (
                a.shape[1] != b.shape[1]):
            raise ValidationError(f"rns.product: shapes {a.shape} and {b.shape} do not match")
        n = a.shape[1]
        acc = np.empty((a.shape[2], b.shape[2]))
        step = np.empty_like(acc)
        # one float64 buffer per operand, reused block after block (fresh ones cost page faults)
        block_a = np.empty((min(n, BLOCK_ROWS), a.shape[2]))
        block_b = np.empty((min(n, BLOCK_ROWS), b.shape[2]))
        out = np.empty((self.k, a.shape[2], b.shape[2]), dtype=np.uint32)
        for k, p in enumerate(self.primes):
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

    def matvec(self, a: Residues, v: Residues) -> Residues:
        """Return aᵀv: a is (K, n, p), v is (K, n); the result (K, p)."""
        if a.ndim != 3 or v.shape != a.shape[:2] or a.shape[0] != self.k:
            raise ValidationError(f"rns.matvec: shapes {a.shape} and {v.shape} do not match")
        if a.shape[1] > BLOCK_ROWS:
            out: Residues = self.product(a, v[:, :, None])[:, :, 0]
            return out
        # one float block for every prime at once: a batch's products are small
        acc = np.matmul(v.astype(np.float64)[:, None, :], a.astype(np.float64))[:, 0, :]
        primes = self._column.astype(np.float64).reshape(self.k, 1)
        acc -= np.floor(acc / primes) * primes
        acc += np.where(acc < 0, primes, 0.0)
        acc -= np.where(acc >= primes, primes, 0.0)
        reduced: Residues = acc.astype(np.uint32)
        return reduced

    def dot(self, a: Residues, b: Residues) -> Residues:
        """Return the inner product of two (K, n) vectors: shape (K,)."""
        out: Residues = self.matvec(a[:, :, None], b)[:, 0]
        return out

    # ------------------------------------------------------------------- masks

    def uniform(self, seed: bytes, shape: tuple[int, ...], *, label: bytes) -> Residues:
        """Draw ring elements uniform modulo P from a 32-byte seed, the same wherever expanded.

        Residue k reads the ChaCha20 stream of :func:`~islands.crypto.prg.expand` (label
        ``label``, the shape and ``k``) as 32-bit words, keeps their low 21 bits and drops
        the values not below its prime: exactly uniform, rejecting at most 6e-5 of them
        (primes just below 2^21). The shape is part of the label, so two draws of one
        label with different shapes share no values.
        """
        count = int(np.prod(shape))
        label = label + b"/" + ",".join(str(int(d)) for d in shape).encode() + b"/"
        out = np.empty((self.k, count), dtype=np.uint32)
        for k, p in enumerate(self.primes):
            want = count + count // 4096 + 64
            while True:
                words = expand(seed, -(-want // 2), label=label + bytes([k])).view(np.uint32)
                np.bitwise_and(words, np.uint32(_FIELD), out=words)
                bad = np.flatnonzero(words >= p)
                if words.size - bad.size >= count:
                    break
                want *= 2  # a prefix of the same stream: both holders draw the same values
            _kept_prefix(words, bad, out[k])
        return out.reshape(self.k, *shape)

    # ---------------------------------------------------------------- decoding

    def decode(self, r: Residues, frac_bits: int) -> NDArray[np.float64]:
        """Reconstruct signed values in (−P/2, P/2) in int64 and divide by 2^(frac_bits).

        Only for rings with P < 2^63 (three primes); :meth:`decode_int` serves any ring.
        """
        if self.modulus >= 1 << 63:
            raise ValidationError(f"{self!r}: decode needs P < 2^63; use decode_int")
        digits = self._digits(r)
        x = np.zeros(digits.shape[1:], dtype=np.int64)
        for k in range(self.k):
            x += digits[k] * self._radix[k]  # < P < 2^63: no int64 overflow
        x = np.where(x > self.modulus // 2, x - self.modulus, x)
        out: NDArray[np.float64] = x.astype(np.float64) / 2.0 ** frac_bits
        return out

    def decode_int(self, r: Residues) -> list[int]:
        """Reconstruct the signed integers in (−P/2, P/2) of a ring vector, as Python ints."""
        flat = np.asarray(r).reshape(self.k, -1)
        half, modulus = self.modulus // 2, self.modulus
        if flat.shape[1] <= 256:  # a few values: the Chinese remainder sum in Python ints
            values = [sum(c * v for c, v in zip(self._crt, column, strict=True)) % modulus
                      for column in flat.T.tolist()]
        else:
            values = [sum(d * w for d, w in zip(row, self._radix, strict=True))
                      for row in self._digits(flat).T.tolist()]
        return [x - modulus if x > half else x for x in values]

    def _digits(self, r: Residues) -> NDArray[np.int64]:
        """Garner's mixed-radix digits d_k (x = Σ d_k·P_1⋯P_(k−1)), each below its prime."""
        res = np.asarray(r, dtype=np.int64)
        digits = np.empty_like(res)
        for k, p in enumerate(self.primes):
            # t = (r_k − (d_0 + d_1·P_0 + …)) · (P_0⋯P_(k−1))^-1 mod p, in int64 (< 2^42)
            t = res[k] % p
            for i in range(k):
                t = (t - digits[i] * (self._radix[i] % p)) % p
            digits[k] = t * self._garner[k] % p
        return digits

    def max_frac_bits(self, terms_bound: float) -> int:
        """Return the largest f with ``terms_bound``·2^(2f) inside (−P/2, P/2)."""
        f = 0
        while terms_bound * 2.0 ** (2 * (f + 1)) < self.modulus // 2 - 1:
            f += 1
        return f

    # -------------------------------------------------------------------- wire

    def pack(self, r: Residues, *, plus: Residues | None = None) -> NDArray[np.uint64]:
        """Pack each element's residues into uint64 words: residue k in bits 21k to 21k + 20.

        The result has r's shape without the residue axis, plus a last axis of
        :attr:`words` when that is more than one. With ``plus``, pack r + plus (in the ring)
        without materialising the sum.
        """
        shape = r.shape[1:]
        flat = r.reshape(self.k, -1)
        other = None if plus is None else plus.reshape(self.k, -1)
        size = flat.shape[1]
        out = np.zeros((size, self.words), dtype=np.uint64)
        total = np.empty((self.k, min(_CHUNK, size)), dtype=np.uint32)
        value = np.empty(min(_CHUNK, size), dtype=np.uint64)
        for start in range(0, size, _CHUNK):  # chunks: the temporaries stay in cache
            stop = min(start + _CHUNK, size)
            part = flat[:, start:stop]
            if other is not None:
                part = self.add(part, other[:, start:stop], out=total[:, :stop - start])
            words, v = out[start:stop], value[:stop - start]
            for k in range(self.k):
                word, shift = divmod(_BITS * k, 64)
                v[:] = part[k]
                if shift + _BITS > 64:
                    words[:, word + 1] |= v >> np.uint64(64 - shift)
                np.left_shift(v, np.uint64(shift), out=v)
                words[:, word] |= v
        return out.reshape(*shape, self.words) if self.words > 1 else out.reshape(shape)

    def unpack(self, packed: Any, shape: tuple[int, ...], name: str, owner: str) -> Residues:
        """Read :meth:`pack`'s output.

        Refuse a wrong shape or dtype, a residue not below its prime, or bits above the K
        residues.
        """
        wire_shape = (*shape, self.words) if self.words > 1 else shape
        if not (isinstance(packed, np.ndarray) and packed.dtype == np.uint64
                and packed.shape == wire_shape):
            got = (f"{packed.dtype} {packed.shape}" if isinstance(packed, np.ndarray)
                   else type(packed).__name__)
            raise ValidationError(f"{owner}: {name} must be a uint64 array of shape "
                                  f"{wire_shape}; got {got}")
        words = packed.reshape(-1, self.words)
        size = words.shape[0]
        out = np.empty((self.k, size), dtype=np.uint32)
        value = np.empty(min(_CHUNK, size), dtype=np.uint64)
        spill = np.empty_like(value)
        field = np.uint64(_FIELD)
        top = _BITS * self.k - 64 * (self.words - 1)  # bits used in the last word
        bad: set[int] = set()
        for start in range(0, size, _CHUNK):  # chunks: the temporaries stay in cache
            chunk = words[start:start + _CHUNK]
            v, s = value[:chunk.shape[0]], spill[:chunk.shape[0]]
            for k, p in enumerate(self.primes):
                word, shift = divmod(_BITS * k, 64)
                np.right_shift(chunk[:, word], np.uint64(shift), out=v)
                if shift + _BITS > 64:
                    np.left_shift(chunk[:, word + 1], np.uint64(64 - shift), out=s)
                    np.bitwise_or(v, s, out=v)
                np.bitwise_and(v, field, out=v)
                residues = out[k, start:start + chunk.shape[0]]
                residues[:] = v
                if (residues >= p).any():
                    bad.add(p)
            if top < 64 and (chunk[:, -1] >> np.uint64(top)).any():
                bad.add(0)
        if bad - {0}:
            raise ValidationError(f"{owner}: {name} has a residue not below "
                                  f"{max(bad - {0})}")
        if bad:
            raise ValidationError(f"{owner}: {name} has bits above its {self.k} residues")
        return out.reshape(self.k, *shape)


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


def _reduce_float(acc: NDArray[np.float64], p: int) -> None:
    """Reduce acc mod p in place, for integers 0 ≤ acc < 2^53 (``np.fmod`` is slow there).

    ⌊acc/p⌋ may be off by one after rounding; every product and difference is an exact
    integer below 2^53, and the two corrections bring the result into [0, p).
    """
    acc -= np.floor(acc / p) * p
    acc[acc < 0] += p
    acc[acc >= p] -= p


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


PRIMES = (2097143, 2097133, 2097131)
"""The three largest primes below 2^21."""

MODULUS = PRIMES[0] * PRIMES[1] * PRIMES[2]
"""P = P1·P2·P3, about 2^63 − 2^46."""

_RING3 = RnsRing(PRIMES)

SS_RING = RnsRing(_primes_below(1 << _BITS, 9))
"""Nine primes below 2^21 (P ≈ 2^189, three wire words): vertical regression's SS engine."""

encode = _RING3.encode
add = _RING3.add
sub = _RING3.sub
product = _RING3.product
uniform = _RING3.uniform
decode = _RING3.decode
pack = _RING3.pack
unpack = _RING3.unpack
max_frac_bits = _RING3.max_frac_bits
