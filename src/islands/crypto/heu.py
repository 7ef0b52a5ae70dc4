"""Okamoto–Uchiyama encryption on HEU, with the checks and randomness islands needs.

HEU (``sf-heu``, SecretFlow's homomorphic encryption library, ``heu.phe`` and
``heu.numpy``) encrypts, adds and decrypts vectors in C++ on its own thread pool; its
Okamoto–Uchiyama (OU) scheme encrypts about 30× faster than islands' own DJN Paillier
and decrypts about 20× faster (issue 24). :class:`OuCipher` puts it behind the interface
of :class:`~islands.crypto.paillier_ops.VectorCipher` (``encrypt``, ``add``,
``weighted``, ``to_bytes``, ``from_bytes``, ``masks``, ``unmask``) and
:class:`OuKeyOwner` is the key owner's side (key generation, range-checked decryption).

Why this module is hand-written around HEU rather than HEU used as is (every call
checked against Python integers on ``sf-heu`` 0.5.2b0; sources cited from
``secretflow/heu`` v0.5.2b0):

- **Weighted sums.** Σ_i m_i·w_ij through ``Evaluator.matmul`` costs one scalar
  exponentiation per entry. :meth:`OuCipher.weighted` is a bucket (Pippenger) method
  built on HEU's ``feature_wise_bucket_sum``: per window of w ≤ 7 bits of the offset
  weights, one addition per row and column plus 2·2^w: at 1024 rows × 20 columns,
  about 18 times faster than ``matmul``.
- **Receipt checks.** HEU parses keys and ciphertexts without checking them (no
  0 < c < n test; malformed bytes raise deep in C++). Every byte string from another
  party is parsed here first with ``msgpack`` under size limits and checked: the public
  key's schema id, n odd and long enough, G and H units in (1, n); a ciphertext array's
  shape, count, schema ids and 0 < c < n with gcd(c, n) = 1 (one gcd of the product
  modulo n for the whole array, then one per value only to name a bad one: a gcd per
  value cost 19 ms of the 22 ms that checking 1024 ciphertexts took). A key pair dealt to
  several parties (horizontal FL's clients) is checked whole, the secret key against the
  public one and OU's relations (:meth:`OuKeyOwner.from_key_bytes`).
- **Randomness.** HEU's OU encrypts c = G^m·H^r mod n with r of only 110 bits at 2048
  bits (``ou/public_key.h`` lines 28–32, ``ou/encryptor.cc`` line 47). Every fresh
  ciphertext is multiplied here by H^r' with r' of 224 bits from :mod:`secrets`
  (:meth:`OuCipher.lengthen`; HEU stores c in Montgomery form c·R, and
  (c·R)·H^r' = (c·H^r')·R, so a plain product keeps the form).
- **Masks.** OU's plaintext modulus p is secret, so a pad uniform modulo the plaintext
  space cannot be drawn: masks are statistical, R = 2^k + U with U uniform in
  [0, 2^(k+128)) for |G| < 2^k, and the key owner decrypts in range k + 129 bits
  (HEU's documented defence against OU's plaintext-overflow attack, caveat 2 below).

Security. OU (Okamoto and Uchiyama, EUROCRYPT 1998, LNCS 1403, 308–318) is one-way if
factoring n = p²q is hard and semantically secure under the p-subgroup assumption; HEU
implements the Coron–Naccache–Paillier acceleration (p − 1 has a 224-bit prime factor
t at 2048 bits). ``key_bits`` is the approximate size of n (2048 gives n of 2050–2053
bits and p of about 685 bits); the best known attack factors n with the number field
sieve, about 112 bits of security at 2048 and 128 at 3072 (NIST SP 800-57 Part 1
Rev. 5, Table 2). HEU's own guidance rates OU's strength at equal n "the same as or
slightly below" Paillier's and suggests a larger key when security matters most
(HEU ``docs/getting_started/algo_choice.rst``). Two caveats:

1. HEU's short encryption randomness (above) would leave a plaintext-guess test at about
   2^56 group operations (Pollard's kangaroo over a 2^110-wide exponent interval); the
   224-bit r' added here restores 2^112.
2. OU falls to a chosen-ciphertext attack: a decrypted ciphertext of a value m ≥ p gives
   m mod p and so p (HEU's "plaintext overflow attack"). The key owner therefore decrypts
   only with ``decrypt_in_range`` and refuses, naming the sender, any value outside the
   range the protocol allows (:meth:`OuKeyOwner.decrypt`). Neither scheme is
   IND-CCA, and nothing here defends against a dishonest key owner.

HEU's thread pool reads ``YACL_NUM_THREADS`` once, when first used; a cipher or key
owner sets it from ``workers`` unless it is already set, so the first one built in a
process decides.

Worker processes. HEU holds the interpreter lock during its calls, so parties simulated
as threads of one process (:func:`~islands.runtime.run_local`) take turns even where
the protocol lets them compute at once (vertical regression's A and B encrypt their
scores, then form their gradient sums, at the same time). With ``workers`` > 1 an
:class:`OuCipher` therefore cuts a large call — :meth:`~OuCipher.encrypt` of at least
:data:`PARALLEL_ENCRYPT` values, :meth:`~OuCipher.weighted` and
:meth:`~OuCipher.products` of at least :data:`PARALLEL_ENTRIES` multiply-accumulates —
into one part per worker and runs the parts on islands' shared pool of worker processes
(:mod:`islands.crypto.processes`, HEU on one thread each). Only the public key, this
party's own values and weights and its ciphertexts cross, as bytes and arrays; each
worker checks the public key as any receiver does. A product of ciphertexts is one
element of the group however it is split, so the results are the in-process ones.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
from collections.abc import Sequence
from typing import Any

import gmpy2
import msgpack
import numpy as np
from numpy.typing import NDArray

from islands.crypto.processes import check_workers, chunks, run_in_workers
from islands.errors import ProtocolError, ValidationError, invalid_parameter
from islands.progress import ProgressOption, task
from islands.validation import describe

try:
    from heu import numpy as hnp
    from heu import phe
except (ImportError, OSError) as exc:  # no wheel for this platform, or the extra is absent
    hnp = phe = None
    _MISSING: str | None = str(exc)
else:
    _MISSING = None

__all__ = ["LONG_RANDOM_BITS", "MASK_BITS", "MAX_KEY_BITS", "MIN_KEY_BITS",
           "PARALLEL_ENCRYPT", "PARALLEL_ENTRIES", "OuCipher", "OuKeyOwner", "available",
           "lengthen", "min_plaintext_bits", "require"]

MIN_KEY_BITS = 1024
"""Smallest key size (bits of n) accepted; 1024 is for tests, use 2048 or more."""

MAX_KEY_BITS = 16384
"""Largest key size generated or accepted."""

MASK_BITS = 128
"""σ: a mask R = 2^k + U with U < 2^(k+σ) hides |G| < 2^k to within 2^-σ."""

LONG_RANDOM_BITS = 224
"""Bits of the exponent r' of the extra randomness H^r' (2κ for κ = 112)."""

_OU_SCHEMA = 1  # phe.SchemaType.OU, the 8-byte little-endian trailer of keys and ciphertexts
_TRAILER = _OU_SCHEMA.to_bytes(8, "little")
_FINGERPRINT = 32
_WINDOW = 8  # fixed-base table window for H^r'
_MAX_KEY_BYTES = 3 * (MAX_KEY_BITS // 8 + 16) + 64  # n, G, H of a 16384-bit key and headers
_MAX_SECRET_BYTES = 7 * (MAX_KEY_BITS // 8 + 16) + 64  # p, q, t, gp_inv, p², p/2, n and headers


def min_plaintext_bits(key_bits: int) -> int:
    """Return the fewest plaintext bits k (|m| < 2^k) HEU's OU gives a key of ``key_bits``.

    HEU draws p = t·u + 1 with t a prime of at least 160 bits and u of exactly
    s − bits(t) + 2 bits, s = ⌈key_bits/3⌉ (``ou/key_generator.cc``), so p > 2^s, and
    sets the plaintext bound to 2^(bits(p/2) − 1) ≥ 2^(s − 1). Every key HEU makes at
    ``key_bits`` holds plaintexts of k = ⌈key_bits/3⌉ − 1 bits (682 at 2048).
    """
    return (key_bits + 2) // 3 - 1


def available() -> bool:
    """Whether ``sf-heu`` imports on this machine."""
    return _MISSING is None


def require(owner: str) -> None:
    """Raise a ValidationError naming ``owner`` when ``sf-heu`` cannot be imported."""
    if _MISSING is not None:
        raise ValidationError(
            f"{owner}: he='ou' needs sf-heu (pip install 'islands[heu]'; wheels exist for "
            f"Python 3.9-3.11 on Linux x86_64/aarch64 and macOS arm64): {_MISSING}")


def _threads(workers: int | None, owner: str) -> int:
    count = check_workers(workers, owner)
    os.environ.setdefault("YACL_NUM_THREADS", str(count))
    return count


def _mpint(raw: Any) -> int:
    """Read a yacl MPInt (LE magnitude, sign in the last byte's top bit); refuse one < 0."""
    if not isinstance(raw, bytes) or not raw or raw[-1] & 0x80:
        raise ValueError("not a non-negative integer")
    return int.from_bytes(raw, "little")


def _mpint_bytes(value: int) -> bytes:
    return value.to_bytes(value.bit_length() // 8 + 1, "little")


def _element(value: int) -> bytes:
    return msgpack.packb([_mpint_bytes(value)], use_bin_type=False) + _TRAILER  # type: ignore[no-any-return]


def _pack(values: Sequence[int]) -> bytes:
    """HEU's serialisation of a (len, 1) ciphertext array holding ``values``."""
    return msgpack.packb([len(values), 1, 2, [_element(int(c)) for c in values]],  # type: ignore[no-any-return]
                         use_bin_type=False)


class OuCipher:
    """A party's public-key OU work under another party's key (no decryption).

    Ciphertext vectors (``Ct``) are ``heu.numpy.CiphertextArray`` columns of shape
    (count, 1). Build one with :meth:`from_public_bytes` from the key owner's
    :meth:`OuKeyOwner.public_bytes`.

    Attributes
    ----------
    n, G, H
        The public key's integers (n = p²q).
    plaintext_bits
        Every plaintext has |m| < 2^plaintext_bits (HEU's plaintext bound).
    fingerprint
        SHA-256 of the public key bytes; prefixes every ciphertext blob.
    """

    def __init__(self, public_key: bytes, n: int, G: int, H: int, *,
                 workers: int | None = None) -> None:
        self.workers = _threads(workers, "OuCipher")
        self.public_key = public_key
        self.n, self.G, self.H = n, G, H
        self.n_bits = n.bit_length()
        self.fingerprint = hashlib.sha256(public_key).digest()
        try:
            kit = hnp.setup(phe.PublicKey.load_from(public_key))
        except Exception as exc:  # HEU's own parser refused what islands' checks passed
            raise ValidationError(f"OuCipher: HEU refused the public key: {exc}") from None
        self._kit = kit
        self._encryptor = kit.encryptor()
        self._ev = kit.evaluator()
        bound = int(kit.public_key().plaintext_bound())
        self.plaintext_bits = bound.bit_length() - 1
        self._bound = bound
        self._table: list[list[Any]] | None = None
        self._max_ct = self.n_bits // 8 + 1  # bytes of one MPInt below n

    # ------------------------------------------------------------------ key receipt
    @classmethod
    def from_public_bytes(cls, public_key: Any, *, owner: str, min_bits: int,
                          workers: int | None = None) -> OuCipher:
        """Check a received OU public key and return the cipher for it.

        Parameters
        ----------
        public_key
            ``heu.phe.PublicKey.serialize()`` bytes: msgpack [n, G, H, log2 bound]
            followed by the 8-byte schema id.
        owner
            Who received it (named in errors, with the sender).
        min_bits
            The smallest bit length of n this party accepts.

        Raises
        ------
        ValidationError
            If sf-heu is missing, or the bytes are not an OU public key with n odd and
            of at least ``min_bits`` bits, G and H units in (1, n) and a plaintext bound
            below n^(1/3); checked before HEU parses them.
        """
        require(owner)
        if not isinstance(public_key, (bytes, bytearray, memoryview)):
            raise invalid_parameter("public_key", owner, "bytes", describe(public_key))
        raw = bytes(public_key)
        if not 0 < len(raw) <= _MAX_KEY_BYTES:
            raise ValidationError(f"{owner}: the OU public key holds {len(raw)} bytes; "
                                  f"expected 1 to {_MAX_KEY_BYTES}")
        try:
            unpacker = msgpack.Unpacker(raw=True, max_buffer_size=len(raw), max_array_len=4,
                                        max_str_len=len(raw), max_bin_len=len(raw),
                                        max_map_len=0, max_ext_len=0)
            unpacker.feed(raw)
            fields = next(unpacker)
            trailer = raw[unpacker.tell():]
            if not isinstance(fields, list) or len(fields) != 4:
                raise ValueError("not [n, G, H, bound bits]")
            n, G, H = (_mpint(f) for f in fields[:3])
            bound_bits = fields[3]
        except (ValueError, StopIteration, msgpack.ExtraData, msgpack.FormatError,
                msgpack.StackError) as exc:
            raise ValidationError(f"{owner}: malformed OU public key ({exc})") from None
        if trailer != _TRAILER:
            raise ValidationError(f"{owner}: the public key is not an OU key (schema id "
                                  f"{int.from_bytes(trailer[:8], 'little') if trailer else None};"
                                  f" expected {_OU_SCHEMA})")
        if n % 2 == 0 or n.bit_length() < min_bits:
            raise ValidationError(f"{owner}: the OU modulus n must be odd with at least "
                                  f"{min_bits} bits; got {n.bit_length()} bits"
                                  f"{' (even)' if n % 2 == 0 else ''}")
        for name, value in (("G", G), ("H", H)):
            if not 1 < value < n or math.gcd(value, n) != 1:
                raise ValidationError(f"{owner}: the OU public key's {name} must be a unit "
                                      "modulo n in (1, n)")
        if (isinstance(bound_bits, bool) or not isinstance(bound_bits, int)
                or not 1 <= bound_bits <= n.bit_length() // 3):
            raise ValidationError(f"{owner}: the OU plaintext bound 2^{bound_bits!r} must be "
                                  f"below n^(1/3) (2^{n.bit_length() // 3})")
        return cls(raw, n, G, H, workers=workers)

    # ------------------------------------------------------------------ encryption

    def encrypt(self, values: Sequence[int] | NDArray[np.int64]) -> Any:
        """Encrypt signed integers, each with fresh long randomness (:meth:`lengthen`).

        With ``workers`` > 1, at least :data:`PARALLEL_ENCRYPT` values are split over that
        many worker processes (module docstring, "Worker processes").
        """
        ints = [int(v) for v in (values.tolist() if isinstance(values, np.ndarray) else values)]
        if not ints:  # HEU's serialisation of an empty array crashes the interpreter
            raise ValidationError("OuCipher.encrypt: nothing to encrypt (no values)")
        if any(abs(v) > self._bound for v in ints):
            raise ValidationError(f"OuCipher: a value is too large for the key (|m| must be "
                                  f"at most 2^{self.plaintext_bits})")
        parts = chunks(len(ints), min(self.workers, len(ints) // PARALLEL_ENCRYPT))
        if len(parts) > 1:
            return self.concat(self._remote(_encrypt_part, [(ints[a:b],) for a, b in parts]))
        return lengthen(self, self._encryptor.encrypt(self._plain(ints)))

    def _plain(self, ints: list[int]) -> Any:
        """HEU's plaintext column of ``ints`` (already range-checked)."""
        return self._kit.array(np.array([[v] for v in ints], dtype=object).reshape(-1, 1))

    def _remote(self, fn: Any, calls: list[tuple[Any, ...]]) -> list[Any]:
        """Run ``fn(public_key, *args)`` for each call on the worker processes; load results."""
        out = run_in_workers(fn, [(self.public_key, *args) for args in calls], self.workers,
                             owner="OuCipher")
        return [hnp.CiphertextArray.load_from(blob) for blob in out]

    def _h_table(self) -> list[list[Any]]:
        if self._table is None:
            n, base, table = gmpy2.mpz(self.n), gmpy2.mpz(self.H), []
            for _ in range(-(-LONG_RANDOM_BITS // _WINDOW)):
                row = [gmpy2.mpz(1), base]
                for _ in range((1 << _WINDOW) - 2):
                    row.append(row[-1] * base % n)
                table.append(row)
                base = row[-1] * base % n  # H^(2^(w·(i+1)))
            self._table = table
        return self._table

    def h_powers(self, exponents: Sequence[int]) -> list[Any]:
        """H^r mod n for each r in [0, 2^LONG_RANDOM_BITS) (fixed-base table, built once)."""
        table, n, mask = self._h_table(), gmpy2.mpz(self.n), (1 << _WINDOW) - 1
        out = []
        for r in exponents:
            if not 0 <= r < 1 << LONG_RANDOM_BITS:
                raise ValidationError(f"OuCipher.h_powers: an exponent is outside "
                                      f"[0, 2^{LONG_RANDOM_BITS})")
            acc, i = gmpy2.mpz(1), 0
            while r:
                d = r & mask
                if d:
                    acc = acc * table[i][d] % n
                r >>= _WINDOW
                i += 1
            out.append(acc)
        return out

    def stored(self, cts: Any) -> list[int]:
        """Return the integers HEU stores for a ciphertext column (Montgomery form c·R mod n).

        For this party's own ciphertexts (no range or unit checks: :meth:`from_bytes`
        checks what arrives from another party).
        """
        return self._parse(cts.serialize(), cts.rows, "ciphertexts", "OuCipher", check=False)

    # ------------------------------------------------------------------ arithmetic
    def add(self, a: Any, b: Any) -> Any:
        """Elementwise homomorphic sum of two ciphertext columns."""
        if (a.rows, a.cols) != (b.rows, b.cols):
            raise ValidationError(f"OuCipher.add: {a.rows} and {b.rows} ciphertexts")
        return self._ev.add(a, b)

    def weighted(self, cts: Any, weights: NDArray[np.int64]) -> Any:
        """Enc(Σ_i m_i·weights[i, j]) for every column j, a column of ``weights.shape[1]``.

        Bucket method on HEU's ``feature_wise_bucket_sum``: the weights are offset to
        U = W + 2^(E−1) ≥ 0 (E bits of the largest |w|, per group of columns of equal
        window count) and cut into windows of w ≤ 7 bits; a window's buckets, summed in
        reversed digit order with prefix sums, give Σ_i d_ij·m_i; windows combine by
        Horner's rule; Σ_i m_i·2^(E−1) is subtracted at the end.
        """
        w = np.asarray(weights)
        if w.dtype != np.int64 or w.ndim != 2 or w.shape[0] != cts.rows or cts.cols != 1:
            raise ValidationError(f"OuCipher.weighted: weights must be an int64 array of shape "
                                  f"({cts.rows}, k); got {w.dtype} {w.shape}")
        if np.any(np.abs(w) >= 1 << 62):
            raise ValidationError("OuCipher.weighted: weights must be below 2^62 in magnitude")
        b, p = w.shape
        parts = chunks(p, self.workers) if b * p >= PARALLEL_ENTRIES else [(0, p)]
        if len(parts) > 1:
            body = bytes(cts.serialize())
            return self.concat(self._remote(_weighted_part,
                                            [(body, w[:, a:c]) for a, c in parts]))
        largest = np.abs(w).max(axis=0) if b else np.zeros(p, dtype=np.int64)
        bits = [int(v).bit_length() + 1 for v in largest]
        groups: dict[int, list[int]] = {}  # columns by their number of windows: one call each
        for j, e in enumerate(bits):
            groups.setdefault(-(-e // _best_window(b, e)), []).append(j)
        results: list[Any] = [None] * p
        total = self._ev.sum(cts)
        for count, cols in groups.items():
            e = max(bits[j] for j in cols)
            window = -(-e // count)  # the narrowest window that covers e bits in count steps
            for j, ct in zip(cols, self._bucket(cts, total, w[:, cols], e, window, count),
                             strict=True):
                results[j] = ct
        return hnp.CiphertextArray.load_from(msgpack.packb(
            [p, 1, 2, [ct.serialize() for ct in results]], use_bin_type=False))

    def _bucket(self, cts: Any, total: Any, w: NDArray[np.int64], e: int, window: int,
                count: int) -> list[Any]:
        b, p = w.shape
        off = 1 << (e - 1)
        u = w + np.int64(off)  # 0 <= u < 2^e <= 2^63
        size = 1 << window
        ones = np.ones((1, b), dtype=np.int8)
        pe = self._ev.phe
        acc: list[Any] | None = None
        for k in reversed(range(count)):
            digits = (u >> np.int64(k * window)) & np.int64(size - 1)
            order = np.ascontiguousarray((size - 1 - digits).astype(np.int8))
            prefix = self._ev.feature_wise_bucket_sum(cts, ones, order, size, True)
            wins = [self._ev.sum(prefix[j * size: j * size + size - 1]) for j in range(p)]
            acc = wins if acc is None else [pe.add(pe.mul(a, size), s)
                                           for a, s in zip(acc, wins, strict=True)]
        assert acc is not None
        correction = pe.mul(total, -off)
        return [pe.add(a, correction) for a in acc]

    def linear(self, cts: Any, terms: Sequence[Sequence[tuple[int, int]]]) -> Any:
        """Return a column of Enc(Σ_(i, w) w·m_i), one per entry of ``terms``.

        A sparse linear map of ciphertexts, ``terms[j]`` the (input index, integer
        weight) pairs of output j (an empty one encrypts 0): what any holder of the public
        key can compute from ciphertexts (the aggregation audit's forgeries use it).
        """
        pe = self._ev.phe
        zero = None
        out = []
        for pairs in terms:
            acc = None
            for i, w in pairs:
                term = pe.mul(cts[int(i), 0], int(w))
                acc = term if acc is None else pe.add(acc, term)
            if acc is None:
                zero = zero if zero is not None else self.encrypt([0])[0, 0]
                acc = zero
            out.append(acc.serialize())
        return hnp.CiphertextArray.load_from(msgpack.packb([len(out), 1, 2, out],
                                                           use_bin_type=False))

    def take(self, cts: Any, indices: Sequence[int]) -> Any:
        """Return the ciphertexts at ``indices`` of a column, in that order (a gather)."""
        return cts[[int(i) for i in indices]]

    def concat(self, parts: Sequence[Any]) -> Any:
        """Return one column of the ciphertexts of ``parts``, in order (local data, unchecked)."""
        elems: list[Any] = []
        for part in parts:
            elems.extend(msgpack.unpackb(part.serialize(), raw=True)[3])
        return hnp.CiphertextArray.load_from(msgpack.packb([len(elems), 1, 2, elems],
                                                           use_bin_type=False))

    def as_matrix(self, cts: Any, rows: int, cols: int) -> Any:
        """Return a column of rows·cols ciphertexts (row-major) as a (rows, cols) array."""
        if cts.rows != rows * cols or cts.cols != 1:
            raise ValidationError(f"OuCipher.as_matrix: {cts.rows} ciphertexts for a "
                                  f"({rows}, {cols}) matrix")
        elems = msgpack.unpackb(cts.serialize(), raw=True)[3]
        # HEU stores matrices column-major: the row-major values are the transpose's layout
        return hnp.CiphertextArray.load_from(msgpack.packb(
            [cols, rows, 2, elems], use_bin_type=False)).transpose()

    def as_column(self, matrix: Any) -> Any:
        """Return a (rows, cols) array's ciphertexts as one row-major column."""
        elems = msgpack.unpackb(matrix.transpose().serialize(), raw=True)[3]
        return hnp.CiphertextArray.load_from(msgpack.packb(
            [len(elems), 1, 2, elems], use_bin_type=False))

    def products(self, matrix: Any, weights: NDArray[np.int64]) -> Any:
        """Return Enc(Wᵀ X), (k, cols), for X a (rows, cols) ciphertext array and W (rows, k).

        The bucket method of :meth:`weighted` on a whole matrix: HEU's
        ``feature_wise_bucket_sum`` adds rows of X (all their columns at once) into the
        buckets of every output row, so a product of a plaintext and an encrypted matrix
        costs one call per window of the offset weights (and 2^w gathers and additions of
        k × cols arrays), not one per output entry.
        """
        w = np.asarray(weights)
        rows, cols = matrix.rows, matrix.cols
        if w.dtype != np.int64 or w.ndim != 2 or w.shape[0] != rows or w.shape[1] == 0:
            raise ValidationError(f"OuCipher.products: weights must be an int64 array of "
                                  f"shape ({rows}, k); got {w.dtype} {w.shape}")
        if np.any(np.abs(w) >= 1 << 62):
            raise ValidationError("OuCipher.products: weights must be below 2^62 in magnitude")
        k = w.shape[1]
        parts = chunks(k, self.workers) if rows * k * cols >= PARALLEL_ENTRIES else [(0, k)]
        if len(parts) > 1:
            body = bytes(self.as_column(matrix).serialize())
            out = self._remote(_products_part, [(body, rows, cols, w[:, a:c]) for a, c in parts])
            return self.as_matrix(self.concat(out), k, cols)
        e = int(np.abs(w).max()).bit_length() + 1
        window = _best_window(rows, e)
        count = -(-e // window)
        window = -(-e // count)
        off = 1 << (e - 1)
        u = w + np.int64(off)  # 0 <= u < 2^e <= 2^63
        size = 1 << window
        ones = np.ones((1, rows), dtype=np.int8)
        ev = self._ev
        acc: Any = None
        for step in reversed(range(count)):
            digits = (u >> np.int64(step * window)) & np.int64(size - 1)
            order = np.ascontiguousarray((size - 1 - digits).astype(np.int8))
            prefix = ev.feature_wise_bucket_sum(matrix, ones, order, size, True)
            # reversed digits: Σ_{t < size-1} prefix_t = Σ_r digit_rf · X_r for output row f
            win = prefix[[f * size for f in range(k)]]
            for t in range(1, size - 1):
                win = ev.add(win, prefix[[f * size + t for f in range(k)]])
            if acc is not None:
                for _ in range(window):  # acc·2^w by doublings: HEU's mul costs ~50 adds
                    acc = ev.add(acc, acc)
                win = ev.add(acc, win)
            acc = win
        total = ev.feature_wise_bucket_sum(matrix, ones, np.zeros((rows, 1), dtype=np.int8),
                                           1, False)  # (1, cols): Σ_r X_r
        correction = ev.mul(total, self._kit.array(np.full((1, cols), -off, dtype=object)))
        return ev.add(acc, correction[[0] * k])

    # ------------------------------------------------------------------ masks
    def masks(self, count: int, value_bits: int) -> list[int]:
        """Statistical masks R = 2^k + U, U uniform in [0, 2^(k+128)), k = ``value_bits``."""
        self.check_room(value_bits + MASK_BITS + 1, "masked values", "OuCipher.masks")
        base = 1 << value_bits
        return [base + secrets.randbits(value_bits + MASK_BITS) for _ in range(count)]

    def unmask(self, masked: Any, masks: list[int], value_bits: int) -> list[int]:
        """G = masked − R, checking 0 < masked < 2^(k+129) and |G| < 2^k."""
        top = 1 << (value_bits + MASK_BITS + 1)
        if (not isinstance(masked, list) or len(masked) != len(masks) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 < v < top
                for v in masked)):
            raise ValidationError(f"expected {len(masks)} ints in (0, 2^{value_bits + 129})")
        out = [v - r for v, r in zip(masked, masks, strict=True)]
        if any(abs(g) >= 1 << value_bits for g in out):
            raise ValidationError(f"an unmasked value is not below 2^{value_bits}")
        return out

    def check_room(self, bits: int, what: str, owner: str) -> None:
        """Refuse values of ``bits`` bits that the key's plaintext space cannot hold."""
        if bits > self.plaintext_bits:
            raise ValidationError(
                f"{owner}: {what} need {bits} bits but the OU key's plaintexts hold "
                f"{self.plaintext_bits} (use a larger key_bits, a smaller batch_size or "
                "fewer fixed-point bits)")

    # ------------------------------------------------------------------ wire
    def bucket_sums(self, cts: Any, order: NDArray[np.int8], groups: Sequence[NDArray[np.int8]],
                    buckets: int, *, per: int = 1, shift_bits: int = 0) -> list[Any]:
        """Per group of rows, per column of ``order`` and bucket, the sum of the ciphertexts.

        ``order[i, j]`` is the bucket (0 … ``buckets`` − 1) of row i in column j and each
        group a 0/1 row mask; returns one column of ``buckets``·columns ciphertexts per
        group, column-major (bucket b of column j at j·buckets + b).

        Built on HEU's ``batch_feature_wise_bucket_sum`` (one addition per row, column and
        group), with two columns at a time when the rows outnumber the buckets' pairs
        (:data:`PAIR_ROWS`): the rows of each bucket of the first column form the groups of
        a sum over the second, so one addition per row gives the joint sums of both, and
        each column's own sums follow from buckets² more additions. That halves the work
        of wide matrices; a product of ciphertexts is one group element however it is
        formed, so the result is the same. With ``per`` > 1 each column's buckets are
        compressed (:meth:`compress`, blocks of ``buckets``) into ⌈buckets/per⌉
        ciphertexts. With ``workers`` > 1 the columns are split over the worker processes
        (module docstring).
        """
        rows, cols = order.shape
        if cts.rows != rows or cts.cols != 1 or order.dtype != np.int8 or not 1 <= buckets <= 127:
            raise ValidationError(f"OuCipher.bucket_sums: {cts.rows} ciphertexts for an order "
                                  f"map of shape {order.shape} ({order.dtype}), {buckets} buckets")
        masks = [np.ascontiguousarray(g, dtype=np.int8).reshape(1, rows) for g in groups]
        if not masks:
            return []
        pairs = rows >= PAIR_ROWS * buckets * buckets
        step = 2 if pairs else 1
        units = -(-cols // step)
        parts = [(a * step, min(cols, b * step))
                 for a, b in chunks(units, min(self.workers, rows * cols // PARALLEL_ENTRIES))]
        if len(parts) == 1:
            return _bucket_sums(self, cts, np.ascontiguousarray(order), masks, buckets, pairs,
                                per, shift_bits)
        blob = bytes(cts.serialize())
        out = run_in_workers(_bucket_part, [
            (self.public_key, blob, np.ascontiguousarray(order[:, a:b]), masks, buckets, pairs,
             per, shift_bits) for a, b in parts], self.workers, owner="OuCipher")
        return [self.concat([hnp.CiphertextArray.load_from(part[k]) for part in out])
                for k in range(len(masks))]

    def compress(self, cts: Any, per: int, shift_bits: int, block: int | None = None) -> Any:
        """Pack runs of ``per`` ciphertexts into one: Enc(Σ_j m_j·2^(j·shift_bits)).

        Runs stay within blocks of ``block`` consecutive ciphertexts (None: one block), the
        last run of a block shorter when ``per`` does not divide it, so a block of b
        values becomes ⌈b/per⌉ ciphertexts. Horner's rule: one scalar multiplication by
        2^shift_bits per ciphertext (SecureBoost+'s cipher compression). The caller keeps
        every packed plaintext within the key's bound.
        """
        count = cts.rows
        if per == 1:
            return cts
        if (per * shift_bits) - 1 > self.plaintext_bits:
            raise ValidationError(f"OuCipher.compress: {per} values of {shift_bits} bits exceed "
                                  f"the key's {self.plaintext_bits}-bit plaintexts")
        size = count if block is None else block
        if size < 1 or count % size:
            raise ValidationError(f"OuCipher.compress: {count} ciphertexts in blocks of {size}")
        runs = -(-size // per)
        starts = [b * size + r * per for b in range(count // size) for r in range(runs)]
        ends = [min(st + per, (st // size + 1) * size) for st in starts]
        if any(en - st < per for st, en in zip(starts, ends, strict=True)):
            # a short run's missing digits are 0: index ``count`` is an encryption of 0
            cts = self.concat([cts, self._encryptor.encrypt(self._plain([0]))])
        factor = self._kit.array(np.array([[1 << shift_bits]] * len(starts), dtype=object))
        acc = None
        for j in reversed(range(per)):
            column = self.take(cts, [st + j if st + j < en else count
                                     for st, en in zip(starts, ends, strict=True)])
            acc = column if acc is None else self._ev.add(self._ev.mul(acc, factor), column)
        return acc

    def to_bytes(self, cts: Any) -> bytes:
        """Key fingerprint followed by HEU's serialisation of the column."""
        return self.fingerprint + bytes(cts.serialize())

    def _parse(self, body: bytes, count: int, name: str, owner: str, *,
               check: bool = True) -> list[int]:
        limit = self._max_ct + 16
        if len(body) > 16 + count * (limit + 8):
            raise ValidationError(f"{owner}: {name} is too long for {count} ciphertexts")
        try:
            head = msgpack.unpackb(body, raw=True, max_array_len=max(count, 4),
                                   max_str_len=limit, max_bin_len=limit, max_map_len=0,
                                   max_ext_len=0)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError,
                msgpack.StackError) as exc:
            raise ValidationError(f"{owner}: {name} is not a ciphertext array ({exc})") from None
        if (not isinstance(head, list) or len(head) != 4 or head[:3] != [count, 1, 2]
                or not isinstance(head[3], list) or len(head[3]) != count):
            shape = head[:3] if isinstance(head, list) else type(head).__name__
            raise ValidationError(f"{owner}: {name} must hold {count} ciphertexts as a "
                                  f"({count}, 1) array; got {shape}")
        n, out = self.n, []
        for i, elem in enumerate(head[3]):
            try:
                if not isinstance(elem, bytes) or elem[-8:] != _TRAILER:
                    raise ValueError("not an OU ciphertext")
                inner = msgpack.unpackb(elem[:-8], raw=True, max_array_len=1,
                                        max_str_len=self._max_ct, max_bin_len=self._max_ct,
                                        max_map_len=0, max_ext_len=0)
                if not isinstance(inner, list) or len(inner) != 1:
                    raise ValueError("not one integer")
                c = _mpint(inner[0])
            except (ValueError, msgpack.ExtraData, msgpack.FormatError,
                    msgpack.StackError) as exc:
                raise ValidationError(f"{owner}: {name}[{i}] is malformed ({exc})") from None
            if check and not 0 < c < n:
                raise ValidationError(f"{owner}: {name}[{i}] is not a unit in (0, n)")
            out.append(c)
        if check:
            _check_units(out, n, name, owner)
        return out

    def from_bytes(self, blob: Any, count: int, name: str, owner: str) -> Any:
        """Parse :meth:`to_bytes` output holding exactly ``count`` ciphertexts.

        Raises
        ------
        ValidationError
            Naming ``owner``, ``name`` (and the index) for a wrong fingerprint, size,
            shape or count, a wrong schema id, or a c outside (0, n) or sharing a factor
            with n; all checked before HEU parses the bytes.
        """
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise invalid_parameter(name, owner, "bytes from OuCipher.to_bytes",
                                    describe(blob))
        raw = bytes(blob)
        if raw[:_FINGERPRINT] != self.fingerprint:
            raise ValidationError(f"{owner}: {name} was encrypted under another public key "
                                  "(fingerprint mismatch)")
        body = raw[_FINGERPRINT:]
        self._parse(body, count, name, owner)
        return hnp.CiphertextArray.load_from(body)


def _check_units(values: list[int], n: int, name: str, owner: str) -> None:
    """Refuse any value sharing a factor with n, naming the first such index.

    One gcd of the product modulo n instead of one per value: a prime factor of n
    divides some value exactly when it divides the product (n = p²q; p, q prime).
    """
    mod, acc = gmpy2.mpz(n), gmpy2.mpz(1)
    for c in values:
        acc = acc * c % mod
    if gmpy2.gcd(acc, mod) == 1:
        return
    first = next(i for i, c in enumerate(values) if gmpy2.gcd(c, mod) != 1)
    raise ValidationError(f"{owner}: {name}[{first}] is not a unit in (0, n)")


def lengthen(cipher: OuCipher, cts: Any, exponents: Sequence[int] | None = None) -> Any:
    """Multiply every ciphertext of a column by H^r' mod n (r' of 224 bits, or ``exponents``).

    The value is unchanged; the randomness exponent grows from HEU's 110 bits to at least
    224 (module docstring). ``exponents`` (tests) fixes r'; None draws them from
    :mod:`secrets`.
    """
    stored = cipher.stored(cts)
    if exponents is None:
        exponents = [secrets.randbits(LONG_RANDOM_BITS) for _ in stored]
    if len(exponents) != len(stored):
        raise ValidationError(f"lengthen: {len(exponents)} exponents for {len(stored)} "
                              "ciphertexts")
    n = gmpy2.mpz(cipher.n)
    out = [c * h % n for c, h in zip(stored, cipher.h_powers(exponents), strict=True)]
    return hnp.CiphertextArray.load_from(_pack(out))


PARALLEL_ENCRYPT = 64
"""Fewest values an :meth:`OuCipher.encrypt` call splits over worker processes."""

PAIR_ROWS = 2
"""Rows per pair of buckets from which :meth:`OuCipher.bucket_sums` sums two columns at once."""

PARALLEL_ENTRIES = 2048
"""Fewest ciphertext multiply-accumulates a weighted sum (rows × columns of weights) or a
product (rows × columns of weights × columns of the matrix) splits over workers."""

_WORKER_CIPHERS: dict[bytes, OuCipher] = {}  # in a worker process: ciphers by key


def _worker_cipher(public_key: bytes) -> OuCipher:
    """Return the worker process's cipher for ``public_key`` (checked once, one HEU thread)."""
    fingerprint = hashlib.sha256(public_key).digest()
    cipher = _WORKER_CIPHERS.get(fingerprint)
    if cipher is None:
        cipher = OuCipher.from_public_bytes(public_key, owner="OuCipher worker",
                                            min_bits=MIN_KEY_BITS, workers=1)
        if len(_WORKER_CIPHERS) >= 8:
            _WORKER_CIPHERS.pop(next(iter(_WORKER_CIPHERS)))
        _WORKER_CIPHERS[fingerprint] = cipher
    return cipher


def _encrypt_part(public_key: bytes, values: list[int]) -> bytes:
    """Worker side of :meth:`OuCipher.encrypt`: a serialised column."""
    return bytes(_worker_cipher(public_key).encrypt(values).serialize())


def _weighted_part(public_key: bytes, cts: bytes, weights: NDArray[np.int64]) -> bytes:
    """Worker side of :meth:`OuCipher.weighted` for some columns of the weights."""
    cipher = _worker_cipher(public_key)
    return bytes(cipher.weighted(hnp.CiphertextArray.load_from(cts), weights).serialize())


def _products_part(public_key: bytes, column: bytes, rows: int, cols: int,
                   weights: NDArray[np.int64]) -> bytes:
    """Worker side of :meth:`OuCipher.products` for some output rows, as a row-major column."""
    cipher = _worker_cipher(public_key)
    matrix = cipher.as_matrix(hnp.CiphertextArray.load_from(column), rows, cols)
    return bytes(cipher.as_column(cipher.products(matrix, weights)).serialize())


def _bucket_sums(cipher: OuCipher, cts: Any, order: NDArray[np.int8],
                 masks: list[NDArray[np.int8]], buckets: int, pairs: bool, per: int = 1,
                 shift_bits: int = 0) -> list[Any]:
    """:meth:`OuCipher.bucket_sums` in this process (``pairs``: two columns at a time)."""
    ev = cipher._ev
    rows, cols = order.shape
    if not pairs or cols < 2:
        sums = list(ev.batch_feature_wise_bucket_sum(cts, masks, order, buckets, False))
        return [cipher.compress(x, per, shift_bits, buckets) for x in sums]
    # the flattened joint sums (bucket a of the first column, b of the second) at
    # a·buckets + b: their marginals are one more bucket sum over two index columns
    cells = np.arange(buckets * buckets)
    marginal = np.ascontiguousarray(np.stack([cells // buckets, cells % buckets], axis=1)
                                    .astype(np.int8))
    one = [np.ones((1, buckets * buckets), dtype=np.int8)]
    per_group: list[list[Any]] = [[] for _ in masks]
    for a in range(0, cols - 1, 2):
        first = order[:, a]
        inside = [first == b for b in range(buckets)]
        sub = [np.ascontiguousarray((mask[0] & side).astype(np.int8).reshape(1, rows))
               for mask in masks for side in inside]
        joint = ev.batch_feature_wise_bucket_sum(
            cts, sub, np.ascontiguousarray(order[:, a + 1:a + 2]), buckets, False)
        for k in range(len(masks)):
            flat = cipher.concat(joint[k * buckets:(k + 1) * buckets])
            per_group[k].append(ev.batch_feature_wise_bucket_sum(flat, one, marginal,
                                                                 buckets, False)[0])
    if cols % 2:
        last = ev.batch_feature_wise_bucket_sum(cts, masks, np.ascontiguousarray(order[:, -1:]),
                                                buckets, False)
        for k in range(len(masks)):
            per_group[k].append(last[k])
    return [cipher.compress(cipher.concat(parts), per, shift_bits, buckets)
            for parts in per_group]


def _bucket_part(public_key: bytes, cts: bytes, order: NDArray[np.int8],
                 masks: list[NDArray[np.int8]], buckets: int, pairs: bool, per: int,
                 shift_bits: int) -> list[bytes]:
    """Worker side of :meth:`OuCipher.bucket_sums` for some columns of the order map."""
    cipher = _worker_cipher(public_key)
    sums = _bucket_sums(cipher, hnp.CiphertextArray.load_from(cts), order, masks, buckets, pairs,
                        per, shift_bits)
    return [bytes(s.serialize()) for s in sums]


def _best_window(rows: int, bits: int) -> int:
    """Window w ≤ 7 (HEU's int8 bucket index) minimising ⌈bits/w⌉·(rows + 2·2^w)."""
    costs = {w: -(-bits // w) * (rows + 2 ** (w + 1)) for w in range(1, 8)}
    return min(costs, key=lambda w: costs[w])


class OuKeyOwner:
    """The key owner's side: an OU key pair and range-checked decryption.

    Parameters
    ----------
    key_bits
        HEU's key size, the approximate bits of n = p²q (2048: about 112-bit security).
    workers
        HEU threads when this is the process's first HEU object (None: the usable cores).
    progress
        Key generation's progress: False/None (default), True for a bar, or a callable
        receiving each :class:`~islands.progress.ProgressUpdate`.
    """

    def __init__(self, key_bits: int, *, workers: int | None = None,
                 progress: ProgressOption = None) -> None:
        require("OuKeyOwner")
        self.workers = _threads(workers, "OuKeyOwner")
        if (isinstance(key_bits, bool) or not isinstance(key_bits, int)
                or not MIN_KEY_BITS <= key_bits <= MAX_KEY_BITS):
            raise invalid_parameter("key_bits", "OuKeyOwner",
                                    f"an int in [{MIN_KEY_BITS}, {MAX_KEY_BITS}]",
                                    describe(key_bits))
        self.key_bits = key_bits
        with task(progress, f"OU keys ({key_bits} bits)", 1, owner="OuKeyOwner"):
            self._kit = hnp.setup(phe.SchemaType.OU, key_bits)
        self._decryptor = self._kit.decryptor()
        self._public = bytes(self._kit.public_key().serialize())
        self._cipher: OuCipher | None = None
        self._prime: int | None = None

    def public_bytes(self) -> bytes:
        """Return the public key as :meth:`OuCipher.from_public_bytes` reads it."""
        return self._public

    def secret_bytes(self) -> bytes:
        """Return the secret key as :meth:`from_key_bytes` reads it (never log or store it)."""
        return bytes(self._kit.secret_key().serialize())

    @classmethod
    def from_key_bytes(cls, public_key: Any, secret_key: Any, *, owner: str, min_bits: int,
                       workers: int | None = None) -> OuKeyOwner:
        """Check a key pair received from another party and return its key owner.

        For keys shared by several parties (horizontal FL's clients): the public key is
        checked by :meth:`OuCipher.from_public_bytes`, then the secret key, before HEU
        parses it, against it and against OU's relations (``ou/secret_key.h``,
        ``ou/key_generator.cc``): msgpack [p, q, t, gp_inv, p², p/2, n] and the OU
        schema id; p ≠ q probable primes, n = p²·q equal to the public n, t a probable
        prime dividing p − 1, H^t ≡ 1 and gp_inv·L(G^t mod p²) ≡ 1 mod p (so every
        ciphertext decrypts), and a plaintext bound below p/2.

        Raises
        ------
        ValidationError
            If sf-heu is missing, or either key fails a check (the message names
            ``owner`` and the check).
        """
        cipher = OuCipher.from_public_bytes(public_key, owner=owner, min_bits=min_bits,
                                            workers=workers)
        if not isinstance(secret_key, (bytes, bytearray, memoryview)):
            raise invalid_parameter("secret_key", owner, "bytes", describe(secret_key))
        raw = bytes(secret_key)
        if not 8 < len(raw) <= _MAX_SECRET_BYTES:
            raise ValidationError(f"{owner}: the OU secret key holds {len(raw)} bytes; "
                                  f"expected 9 to {_MAX_SECRET_BYTES}")
        if raw[-8:] != _TRAILER:
            raise ValidationError(f"{owner}: the secret key is not an OU key (schema id "
                                  f"{int.from_bytes(raw[-8:], 'little')}; expected "
                                  f"{_OU_SCHEMA})")
        try:
            fields = msgpack.unpackb(raw[:-8], raw=True, max_array_len=7,
                                     max_str_len=len(raw), max_bin_len=len(raw),
                                     max_map_len=0, max_ext_len=0)
            if not isinstance(fields, list) or len(fields) != 7:
                raise ValueError("not [p, q, t, gp_inv, p², p/2, n]")
            p, q, t, gp_inv, p2, p_half, n = (gmpy2.mpz(_mpint(f)) for f in fields)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError,
                msgpack.StackError) as exc:
            raise ValidationError(f"{owner}: malformed OU secret key ({exc})") from None
        G, H = gmpy2.mpz(cipher.G), gmpy2.mpz(cipher.H)

        def fails() -> str | None:
            if n != cipher.n or p2 != p * p or n != p2 * q or p_half != p // 2:
                return "its p, q, p², p/2 and n do not match the public key"
            if p == q or not gmpy2.is_prime(p, 40) or not gmpy2.is_prime(q, 40):
                return "p and q are not distinct primes"
            if t < 2 or (p - 1) % t or not gmpy2.is_prime(t, 40):
                return "t is not a prime factor of p - 1"
            if gmpy2.powmod(H, t, p2) != 1:
                return "H^t is not 1 modulo p²"
            gt = gmpy2.powmod(G, t, p2)
            if (gt - 1) % p or not 0 < gp_inv < p or gp_inv * ((gt - 1) // p) % p != 1:
                return "gp_inv is not the inverse of L(G^t mod p²) modulo p"
            if cipher.plaintext_bits > p_half.bit_length() - 1:
                return "its plaintext bound is not below p/2"
            return None

        why = fails()
        if why is not None:
            raise ValidationError(f"{owner}: the OU secret key does not fit its public key: "
                                  f"{why}")
        self = cls.__new__(cls)
        self.workers = _threads(workers, owner)
        self.key_bits = cipher.n_bits
        try:
            self._kit = hnp.HeKit(phe.setup(phe.PublicKey.load_from(cipher.public_key),
                                            phe.SecretKey.load_from(raw)))
        except Exception as exc:  # HEU's own parser refused what islands' checks passed
            raise ValidationError(f"{owner}: HEU refused the OU key pair: {exc}") from None
        self._decryptor = self._kit.decryptor()
        self._public = cipher.public_key
        self._cipher = cipher
        self._prime = int(p)
        return self

    def cipher(self) -> OuCipher:
        """Return the public operations under this key (checked like any received key)."""
        if self._cipher is not None:  # the one a received key pair was checked with
            return self._cipher
        return OuCipher.from_public_bytes(self._public, owner="OuKeyOwner",
                                          min_bits=MIN_KEY_BITS, workers=self.workers)

    def secret_prime(self) -> int:
        """Return p, OU's plaintext modulus: secret, never to be logged or sent."""
        if self._prime is None:
            fields = msgpack.unpackb(self.secret_bytes()[:-8], raw=True)
            self._prime = _mpint(fields[0])
        return self._prime

    def decrypt_residues(self, cts: Any) -> list[int]:
        """Decrypt to residues modulo p, with no range check.

        Only for values this party compares and never shows anyone (an aggregate's MAC
        tag, :mod:`islands.crypto.mac`): the plaintext-overflow attack (module docstring,
        caveat 2) needs the decrypted value back, and a failed comparison stops the party.
        """
        p = self.secret_prime()
        return [int(v) % p for v in self._decryptor.decrypt(cts).to_numpy().ravel()]

    def decrypt(self, cts: Any, range_bits: int, *, positive: bool, what: str, sender: str,
                party: str | None = None, step: str | None = None) -> list[int]:
        """Decrypt values that must lie in (−2^range_bits, 2^range_bits), or (0, …) if ``positive``.

        Raises
        ------
        ProtocolError
            Naming ``sender`` and ``what`` for any value outside the range: a
            ciphertext of a value beyond the plaintext space would otherwise reveal the
            key (module docstring, caveat 2). Nothing is decrypted for the caller then.
        """
        try:
            plain = self._decryptor.decrypt_in_range(cts, range_bits)
        except phe.PheRuntimeError:
            values = None
        else:
            values = [int(v) for v in plain.to_numpy().ravel()]
        if values is None or (positive and any(v <= 0 for v in values)):
            span = f"0 < v < 2^{range_bits}" if positive else f"|v| < 2^{range_bits}"
            raise ProtocolError(
                f"{sender} sent {what} that decrypt outside the range the protocol allows "
                f"({span}); refused (a value beyond it could reveal the key)", party=party,
                step=step)
        return values
