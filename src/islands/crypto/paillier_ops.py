"""Paillier arithmetic on vectors of signed integers, spread over worker processes.

Vertical regression (:mod:`islands.vfl`) needs, for every mini-batch, one ciphertext per
row (each row's residual is multiplied by that row's own features, which packing
several values into one plaintext cannot serve) and, for every feature j, the encryption
of Σ_i m_i·w_ij from the row ciphertexts c_i = Enc(m_i) and the party's integer
features w_ij:

    Π_i c_i^(w_ij) mod n²  =  Enc(Σ_i m_i·w_ij mod n)

a multi-exponentiation. It is computed here by Pippenger's bucket method: the weights
are cut into windows of ``w`` bits; in each window every row's ciphertext is multiplied
into the bucket of its digit, and Σ_d d·bucket_d is formed with 2·2^w multiplications by
running products, so a column of b rows with E-bit weights costs about
⌈E/w⌉·(b + 2^(w+1)) multiplications modulo n² instead of b·1.5·E for one
exponentiation per entry. Negative weights go to a second set of buckets whose product
is inverted once per column. Signed plaintexts are the residues m mod n, read back as
m − n when above n/2 (:func:`decrypt_signed`); every caller keeps |m| far below n/2.

Why hand-written: ``phe`` works one ``EncryptedNumber`` at a time (a Python object and
an exponentiation per entry, with the exponent sent in the clear) and no maintained
Python library offers Paillier multi-exponentiation. SecretFlow's HEU, islands' engine
for ``he="ou"`` (:mod:`islands.crypto.heu`), has Paillier too, but it does not do this
job better: on the 2-core development machine its fastest CPU variant (``ZPaillier``)
took 1.1–1.7× this module's time to encrypt, 1.4–1.9× to decrypt and 1.4–1.7× for a
256 × 20 weighted sum, one core each, in the same runs
(``benchmarks/bench_he_engines.py``), and its wheels stop at CPython 3.11, where
islands installs on 3.10–3.13. So ``he="paillier"`` stays here. The arithmetic is ``gmpy2``'s; the
bucket loops are Python, which holds the GIL, so rows are split over worker processes
(:mod:`islands.crypto.processes`) once a batch is large enough to pay for the transfer.
Encryption uses :class:`~islands.crypto.paillier.RandomnessPool`, with the DJN fixed
base when the key owner published one (``djn_base``).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from typing import Any

import gmpy2
import numpy as np
from numpy.typing import NDArray
from phe import paillier as phe_paillier

from islands.crypto import paillier
from islands.crypto.processes import check_workers, chunks, run_in_workers
from islands.errors import ValidationError

__all__ = ["VectorCipher", "bucket_sums", "decrypt_many", "decrypt_signed", "modular_masks",
           "modular_unmask", "weighted_products"]

_PARALLEL_ENCRYPT = 64  # encryptions below which a pool costs more than it saves
_PARALLEL_ENTRIES = 4096  # multi-exponentiation entries (rows × columns), likewise

_WORKER_POOLS: dict[tuple[int, int | None], paillier.RandomnessPool] = {}


def _pool_for(n: int, djn_base: int | None) -> paillier.RandomnessPool:
    """Return this process's randomness pool for (n, h_s); DJN tables are built once."""
    key = (n, djn_base)
    pool = _WORKER_POOLS.get(key)
    if pool is None:
        public_key = phe_paillier.PaillierPublicKey(n)
        if djn_base is None:
            pool = paillier.RandomnessPool(public_key)
        else:
            pool = paillier.RandomnessPool(public_key, djn_base=djn_base)
        while len(_WORKER_POOLS) >= 2:  # a DJN table is 16 MiB at 2048 bits: keep two keys
            _WORKER_POOLS.pop(next(iter(_WORKER_POOLS)))
        _WORKER_POOLS[key] = pool
    return pool


def _encrypt_chunk(n: int, djn_base: int | None, residues: list[int]) -> list[Any]:
    pool = _pool_for(n, djn_base)
    return paillier.encrypt(pool.public_key, residues, pool=pool)


def _best_window(rows: int, bits: int) -> int:
    costs = {w: math.ceil(bits / w) * (rows + 2 ** (w + 1)) for w in range(1, 13)}
    return min(costs, key=lambda w: costs[w])


def _bucket_product(bases: Sequence[Any], exps: Sequence[int], n2: Any) -> Any:
    """Π bases[i]^exps[i] mod n² for exps ≥ 0 (Pippenger's bucket method)."""
    pairs = [(c, e) for c, e in zip(bases, exps, strict=True) if e]
    if not pairs:  # Enc(0) with no randomness: every caller multiplies in a fresh encryption
        return gmpy2.mpz(1)
    bits = max(e for _, e in pairs).bit_length()
    w = _best_window(len(pairs), bits)
    mask = (1 << w) - 1
    acc = None
    for k in reversed(range(math.ceil(bits / w))):
        if acc is not None:
            acc = gmpy2.powmod(acc, 1 << w, n2)
        shift = k * w
        buckets: list[Any] = [None] * (mask + 1)
        for c, e in pairs:
            d = (e >> shift) & mask
            if d:
                b = buckets[d]
                buckets[d] = c if b is None else b * c % n2
        running = total = None
        for d in range(mask, 0, -1):
            b = buckets[d]
            if b is not None:
                running = b if running is None else running * b % n2
            if running is not None:
                total = running if total is None else total * running % n2
        if total is not None:
            acc = total if acc is None else acc * total % n2
    return gmpy2.mpz(1) if acc is None else acc


def _products_chunk(n: int, cts: list[Any], weights: NDArray[np.int64]) -> list[tuple[Any, Any]]:
    """Per column: (Π over positive weights, Π over negative weights of c^|w|)."""
    n2 = gmpy2.mpz(n) * gmpy2.mpz(n)
    out = []
    for col in weights.T.tolist():
        pos = [e if e > 0 else 0 for e in col]
        neg = [-e if e < 0 else 0 for e in col]
        out.append((_bucket_product(cts, pos, n2), _bucket_product(cts, neg, n2)))
    return out


def weighted_products(public_key: phe_paillier.PaillierPublicKey, cts: Sequence[Any],
                      weights: NDArray[np.int64], *, workers: int = 1) -> list[Any]:
    """Return, for each column j of ``weights``, Π_i cts[i]^weights[i, j] mod n².

    That is Enc(Σ_i m_i·w_ij mod n) for cts[i] = Enc(m_i). ``weights`` is an int64 array
    of shape (len(cts), columns); negative entries are handled by one inversion per
    column.
    """
    w = np.asarray(weights)
    if w.dtype != np.int64 or w.ndim != 2 or w.shape[0] != len(cts):
        raise ValidationError(
            f"weighted_products: weights must be an int64 array of shape ({len(cts)}, k); "
            f"got {w.dtype} {w.shape}")
    n = int(public_key.n)
    n2 = gmpy2.mpz(n) ** 2
    if workers > 1 and w.size >= _PARALLEL_ENTRIES and len(cts) >= 2 * workers:
        parts = run_in_workers(_products_chunk, [(n, list(cts[lo:hi]), w[lo:hi])
                                                 for lo, hi in chunks(len(cts), workers)],
                               workers, owner="weighted_products")
    else:
        parts = [_products_chunk(n, list(cts), w)]
    out = []
    for j in range(w.shape[1]):
        pos, neg = gmpy2.mpz(1), gmpy2.mpz(1)
        for part in parts:
            pos = pos * part[j][0] % n2
            neg = neg * part[j][1] % n2
        out.append(pos if neg == 1 else pos * gmpy2.invert(neg, n2) % n2)
    return out


def _bucket_chunk(n: int, cts: list[Any], order: NDArray[np.int8],
                  groups: list[NDArray[np.bool_]], buckets: int, per: int,
                  shift_bits: int) -> list[list[Any]]:
    """Bucket products of some columns (worker side of :func:`bucket_sums`)."""
    n2 = gmpy2.mpz(n) ** 2
    shift = gmpy2.mpz(1) << shift_bits
    runs = -(-buckets // per)
    out: list[list[Any]] = []
    for group in groups:
        rows = np.flatnonzero(group)
        column: list[Any] = []
        for j in range(order.shape[1]):
            acc = [gmpy2.mpz(1)] * buckets
            for r, b in zip(rows.tolist(), order[rows, j].tolist(), strict=True):
                acc[b] = acc[b] * cts[r] % n2
            for k in range(runs):  # Horner: Enc(Σ_t m_t·2^(t·shift_bits)) per run
                part = acc[k * per:(k + 1) * per]
                value = part[-1]
                for c in reversed(part[:-1]):
                    value = gmpy2.powmod(value, shift, n2) * c % n2
                column.append(value)
        out.append(column)
    return out


def bucket_sums(cipher: VectorCipher, cts: Sequence[Any], order: NDArray[np.int8],
                groups: Sequence[NDArray[Any]], buckets: int, *, per: int = 1,
                shift_bits: int = 0) -> list[list[Any]]:
    """Per group of rows, per column of ``order`` and bucket, Enc(Σ m) of the rows there.

    The Paillier counterpart of :meth:`islands.crypto.heu.OuCipher.bucket_sums`: one
    multiplication modulo n² per row, column and group, and with ``per`` > 1 each
    column's buckets packed ``per`` to a ciphertext (Horner's rule, a power 2^shift_bits
    per bucket: SecureBoost+'s cipher compression). Returns one list per group, column
    by column. Columns are split over the worker processes (the loops hold the GIL).
    """
    rows, cols = order.shape
    if len(cts) != rows or order.dtype != np.int8 or not 1 <= buckets <= 127:
        raise ValidationError(f"bucket_sums: {len(cts)} ciphertexts for an order map of "
                              f"shape {order.shape} ({order.dtype}), {buckets} buckets")
    masks = [np.asarray(g, dtype=bool).reshape(rows) for g in groups]
    parts = chunks(cols, min(cipher.workers, rows * cols // _PARALLEL_ENTRIES))
    calls = [(cipher.n, list(cts), np.ascontiguousarray(order[:, lo:hi]), masks, buckets, per,
              shift_bits) for lo, hi in parts]
    if len(calls) == 1:
        results = [_bucket_chunk(*calls[0])]
    else:
        results = run_in_workers(_bucket_chunk, calls, cipher.workers, owner="bucket_sums")
    return [[c for part in results for c in part[k]] for k in range(len(masks))]


def _decrypt_chunk(n: int, p: int, q: int, cts: list[Any]) -> list[int]:
    key = phe_paillier.PaillierPrivateKey(phe_paillier.PaillierPublicKey(n), p, q)
    return paillier.decrypt(key, cts)


def decrypt_many(private_key: phe_paillier.PaillierPrivateKey, cts: Sequence[Any], *,
                 workers: int | None = None) -> list[int]:
    """:func:`islands.crypto.paillier.decrypt` spread over this party's worker processes.

    The factors p and q go to the party's own worker processes (never to another party)
    once a batch is large enough to pay for the transfer.
    """
    count = check_workers(workers, "decrypt_many")
    if count > 1 and len(cts) >= _PARALLEL_ENCRYPT:
        n = int(private_key.public_key.n)
        p, q = int(private_key.p), int(private_key.q)
        parts = run_in_workers(_decrypt_chunk, [(n, p, q, list(cts[lo:hi]))
                                                for lo, hi in chunks(len(cts), count)],
                               count, owner="decrypt_many")
        return [m for part in parts for m in part]
    return paillier.decrypt(private_key, cts)


def decrypt_signed(private_key: phe_paillier.PaillierPrivateKey,
                   cts: Sequence[Any]) -> list[int]:
    """Decrypt and read each residue m as the signed integer in (−n/2, n/2]."""
    n = int(private_key.public_key.n)
    half = n // 2
    return [m - n if m > half else m for m in paillier.decrypt(private_key, cts)]


def modular_masks(n: int, count: int) -> list[int]:
    """One-time pads uniform modulo n from :mod:`secrets`, as signed representatives."""
    half = n // 2
    return [secrets.randbelow(n) - half for _ in range(count)]


def modular_unmask(n: int, masked: Any, masks: list[int]) -> list[int]:
    """G = masked − R mod n read as signed in (−n/2, n/2], after checking 0 ≤ masked < n.

    Raises
    ------
    ValidationError
        If ``masked`` is not a list of len(masks) ints in [0, n).
    """
    if (not isinstance(masked, list) or len(masked) != len(masks)
            or not all(isinstance(v, int) and 0 <= v < n for v in masked)):
        raise ValidationError(f"expected {len(masks)} ints in [0, n)")
    half = n // 2
    out = []
    for v, r in zip(masked, masks, strict=True):
        g = (v - r) % n
        out.append(g - n if g > half else g)
    return out


class VectorCipher:
    """One party's public-key Paillier work: encrypt signed ints, serialise, combine.

    Parameters
    ----------
    public_key
        The key owner's public key.
    djn_base
        h_s of the key owner's DJN key (see :func:`islands.crypto.paillier.generate_djn_keypair`),
        or None for textbook randomness r^n.
    workers
        Processes for large batches (None: the usable cores).
    """

    def __init__(self, public_key: phe_paillier.PaillierPublicKey,
                 djn_base: int | None = None, *, workers: int | None = None) -> None:
        self.public_key = public_key
        self.n = int(public_key.n)
        self.n2 = gmpy2.mpz(self.n) ** 2
        self.half = self.n // 2
        self.djn_base = None if djn_base is None else int(djn_base)
        self.workers = check_workers(workers, "VectorCipher")
        self.fingerprint = paillier.fingerprint(public_key)

    def residues(self, values: Sequence[int] | NDArray[np.int64]) -> list[int]:
        """Map signed ints (|v| < n/2) to residues modulo n."""
        n, half = self.n, self.half
        out = []
        for v in (values.tolist() if isinstance(values, np.ndarray) else values):
            v = int(v)
            if not -half <= v <= half:
                raise ValidationError("VectorCipher: a value is too large for the key")
            out.append(v % n)
        return out

    def encrypt(self, values: Sequence[int] | NDArray[np.int64]) -> list[Any]:
        """Encrypt signed integers, one fresh ciphertext each."""
        res = self.residues(values)
        if self.workers > 1 and len(res) >= _PARALLEL_ENCRYPT:
            parts = run_in_workers(_encrypt_chunk, [(self.n, self.djn_base, res[lo:hi])
                                                    for lo, hi in chunks(len(res), self.workers)],
                                   self.workers, owner="VectorCipher.encrypt")
            return [c for part in parts for c in part]
        return _encrypt_chunk(self.n, self.djn_base, res)

    def add(self, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
        """Elementwise homomorphic sum of two ciphertext lists."""
        if len(a) != len(b):
            raise ValidationError(f"VectorCipher.add: {len(a)} and {len(b)} ciphertexts")
        n2 = self.n2
        return [x * y % n2 for x, y in zip(a, b, strict=True)]

    def weighted(self, cts: Sequence[Any], weights: NDArray[np.int64]) -> list[Any]:
        """:func:`weighted_products` with this party's workers."""
        return weighted_products(self.public_key, cts, weights, workers=self.workers)

    def masks(self, count: int, value_bits: int) -> list[int]:
        """:func:`modular_masks`: perfect one-time pads (``value_bits`` is not needed)."""
        return modular_masks(self.n, count)

    def unmask(self, masked: Any, masks: list[int], value_bits: int) -> list[int]:
        """:func:`modular_unmask` of the key owner's decryptions."""
        return modular_unmask(self.n, masked, masks)

    def to_bytes(self, cts: Sequence[Any]) -> bytes:
        """Key fingerprint followed by the ciphertexts (2·⌈bits/8⌉ bytes each)."""
        return self.fingerprint + paillier.ciphertexts_to_bytes(self.public_key, cts)

    def from_bytes(self, blob: Any, count: int, name: str, owner: str) -> list[Any]:
        """Parse :meth:`to_bytes` output holding exactly ``count`` ciphertexts."""
        cts = paillier._split_blob(self.public_key, blob, owner, name)
        if len(cts) != count:
            raise ValidationError(f"{owner}: {name} holds {len(cts)} ciphertexts, expected "
                                  f"{count}")
        return cts
