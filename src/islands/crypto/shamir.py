"""t-of-n Shamir secret sharing of short byte strings, vectorised with numpy.

Secure aggregation with dropouts (Bonawitz et al. [1]_, §4, "double masking") has every
client t-of-n share two 32-byte secrets per round, its X25519 masking key and its
self-mask PRG seed; the server later reconstructs, from the same set of responding
clients, one secret per surviving or dropped client. This module does both halves for
n up to a few thousand holders.

Construction (Shamir [2]_)
--------------------------
* **Field.** GF(p) with the Mersenne prime ``p = 2^31 − 1`` (:data:`PRIME`): field
  elements fit in 31 bits, so a product of two is below 2^62 and fits in int64 before it
  is reduced.
* **Chunks.** A secret of B bytes is read as one little-endian integer and cut into
  ``ceil(8B/30)`` chunks of 30 bits (:func:`chunk_count`; 9 for a 32-byte key). Every
  chunk is below 2^30 < p, hence a field element, and chunk j is shared with its own
  random polynomial f_j(x) = chunk_j + a_{j,1}·x + … + a_{j,t−1}·x^{t−1}.
* **Randomness.** The coefficients a_{j,k} are uniform in GF(p), drawn from
  :func:`secrets.token_bytes` (the operating system's CSPRNG, never numpy's generators):
  31 random bits give a uniform integer in [0, 2^31) = [0, p], and the single value p is
  rejected and redrawn (probability 2^−31 per draw). Reducing the 31 bits modulo p
  instead would make 0 twice as likely as any other element, a bias of 2^−31 that would
  already break the *exact* independence below; rejection costs nothing measurable.
* **Shares.** Holder i (``i = 1..n``) gets ``Share(x=i, y=[f_0(i), …, f_{c−1}(i)])``.
  Evaluation is Horner's rule on blocks of 256 coefficients: a cached table of
  x^0 … x^255 mod p for every holder turns all blocks into one matrix product
  (holders × 256) @ (256 × 3·blocks·chunks), done *exactly* in float64 BLAS by cutting
  the coefficients into three 11-bit limbs (each product < 2^31·2^11 = 2^42, each sum of
  256 of them < 2^50 < 2^53, so no rounding occurs); the limbs are recombined and the
  blocks joined by Horner's rule in x^256 over int64, reducing modulo p at every step.
  Plain per-coefficient Horner vectorised over (holders × chunks) gives the same values
  but costs t numpy calls: 9.2 ms instead of 1.0 ms for t = 251 of n = 500, 47 ms
  instead of 4.0 ms for t = 667 of n = 1000.
* **Reconstruction.** For holders at distinct points x_1 … x_k the Lagrange coefficients
  at zero are λ_i = Π_{j≠i} x_j / (x_j − x_i) (mod p) (:func:`lagrange_at_zero`), and
  f(0) = Σ λ_i·f(x_i). They depend only on the holders' points, so the server computes
  them once per set of responders and reuses them for every secret those responders
  hold shares of (:func:`combine` with ``coefficients=``, or :func:`combine_many`).

Security and correctness
------------------------
* **Privacy (information-theoretic).** For any t − 1 distinct non-zero points, the
  values of a degree-(t − 1) polynomial with a fixed constant term and uniform other
  coefficients are uniform on GF(p)^(t−1) (the Vandermonde system is invertible), so any
  t − 1 shares are independent of the secret, chunk by chunk and hence jointly (the
  chunks use independent polynomials). No computational assumption is involved; the
  only requirement is that the coefficients are uniform and secret, which the
  operating system's CSPRNG and the rejection step provide.
* **Correctness.** Any k ≥ t shares of one split interpolate the same polynomial and
  give back the secret exactly (k > t works too, it is only slower).
* **Fewer than t shares give a wrong answer, not an error.** Interpolating k < t
  points yields the constant term of some *other* polynomial. This module cannot count
  for the caller: the protocol layer must check that it holds at least t shares. As a
  side effect of the 30-bit chunks, a wrong reconstruction usually lands on a chunk
  ≥ 2^30 (or on bits above the secret's length) and :func:`combine` then raises
  :class:`~islands.errors.ValidationError`; for a 32-byte secret the chance that a wrong
  result slips through is about 2^−23, but this is a sanity check, not an integrity
  guarantee: it is no defence against a malicious holder who chooses its share (that
  needs the authenticated or verifiable sharing of [1]_, §6).
* **Shares are secret material** (t of them reveal the secret): :class:`Share` hides
  ``y`` from its ``repr``.
* **Threshold 1** makes every share equal to the secret's chunks: allowed, because it
  is the definition, but it offers no secrecy.

Speed (2-core AMD EPYC VM shared with other jobs, numpy 2.4 with OpenBLAS limited to one
thread, one 32-byte secret = 9 chunks, medians of 10 to 50 runs):

* t = 251 of n = 500: :func:`split` 1.0 ms; :func:`combine` of t shares 1.7 ms (0.14 ms
  with the coefficients given); :func:`combine_many` of 300 secrets 32 ms.
* t = 667 of n = 1000: :func:`split` 4.0 ms; :func:`combine` 9.0 ms (0.29 ms with the
  coefficients given); :func:`combine_many` of 300 secrets 79 ms.

:func:`lagrange_at_zero` takes 1.6 ms for 251 points and 8.3 ms for 667 (O(k²)); the
first :func:`split` for a new n also builds the power table (3.5 ms for n = 500, 5 ms
for n = 1000, 2 MB). In :func:`combine` with given coefficients and in
:func:`combine_many`, most of the time is Python walking the :class:`Share` objects
(300 × 667 of them) into one array; the interpolation itself is one integer matrix
product (4 ms for 300 × 667). With OpenBLAS's default two threads on a busy machine the
small matrix products of :func:`split` can be several times slower (thread hand-off);
a one-thread limit (threadpoolctl, as the runtime's runner can set) avoids that. For
comparison, pure-Python Shamir at t = 251 took 34 ms to share a key and 48 ms to
reconstruct one (``shared/MEASURED.md``).

Why hand-written: no maintained Python library does Shamir sharing vectorised over
hundreds of holders. What was checked: PyCryptodome's ``Crypto.Protocol.SecretSharing``
works in GF(2^128) on 16-byte secrets in pure Python, and is not installed here (``pip
show pycryptodome pycryptodomex`` finds neither); ``shamir-mnemonic`` (SLIP-39) and the
GF(256) ports (``pyshamir``, ``pygfssss``) allow at most 16 or 255 holders; the other
PyPI packages found by name (``secretsharing``, ``sslib``, ``shamirs``, ...) describe
themselves as small Python implementations, none vectorised, none installed here.
``galois`` has fast GF(p) arrays but brings numba in for what is here one matrix
product and a short loop.
The arithmetic is a few lines of modular numpy; the tests check it against direct
big-integer evaluation and interpolation, and the shares' distribution for uniformity.

References
----------
.. [1] K. Bonawitz, V. Ivanov, B. Kreuter, A. Marcedone, H. B. McMahan, S. Patel,
   D. Ramage, A. Segal, K. Seth. "Practical Secure Aggregation for Privacy-Preserving
   Machine Learning." ACM CCS 2017.
.. [2] A. Shamir. "How to Share a Secret." Communications of the ACM 22(11), 1979.
"""

from __future__ import annotations

import functools
import secrets as _secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_int, describe, is_int

__all__ = [
    "CHUNK_BITS",
    "PRIME",
    "Share",
    "chunk_count",
    "combine",
    "combine_arrays",
    "combine_many",
    "lagrange_at_zero",
    "split",
]

PRIME = 2**31 - 1
"""The field modulus: the Mersenne prime 2^31 − 1."""

CHUNK_BITS = 30
"""Bits of secret per field element (2^30 < PRIME, so every chunk is a field element)."""

_CHUNK_MASK = (1 << CHUNK_BITS) - 1
_BLOCK = 256  # coefficients per matrix-product block in split (see the module docstring)
_LIMB = 11  # coefficients are split into 11-bit limbs for exact float64 products
_LIMB_MASK = (1 << _LIMB) - 1
_HALF = 16  # Lagrange coefficients are split into 16-bit halves for exact int64 sums
_SUM_ROWS = 1 << 15  # int64 interpolation sums at most this many products < 2^47 at once
_LAGRANGE_ROWS = 256  # rows of the (k × k) difference matrix held at once


def chunk_count(length: int) -> int:
    """Return the number of 30-bit chunks (field elements per share) of a ``length``-byte secret."""
    length = check_int(length, "length", "chunk_count", low=1)
    return -(-8 * length // CHUNK_BITS)


@dataclass(frozen=True, eq=False)
class Share:
    """One holder's share of a secret.

    Parameters
    ----------
    x
        The evaluation point, the holder's index: an int in ``[1, PRIME − 1]``
        (:func:`split` uses ``1..n``).
    y
        One field element per 30-bit chunk of the secret: a 1-D array of integers in
        ``[0, PRIME)``. Stored as ``uint32`` (4 bytes per chunk on the wire; 36 bytes
        for a 32-byte secret); other integer dtypes are checked and converted. Values of
        a ``uint32`` array are range-checked by :func:`combine`, not here, to keep
        constructing many shares cheap.

    Notes
    -----
    Two shares are equal when their points and values are; ``repr`` shows the point and
    the number of chunks but never the values (shares are secret material).
    """

    x: int
    y: NDArray[np.uint32]

    def __post_init__(self) -> None:
        if not is_int(self.x) or not 1 <= self.x < PRIME:
            raise invalid_parameter("x", "Share", f"an int in [1, {PRIME - 1}]", describe(self.x))
        object.__setattr__(self, "x", int(self.x))
        y = self.y
        if isinstance(y, np.ndarray) and y.dtype == np.uint32 and y.ndim == 1 and y.size:
            return
        arr = np.asarray(y)
        if (
            arr.ndim != 1
            or arr.size == 0
            or arr.dtype.kind not in "iu"
            or int(arr.min()) < 0
            or int(arr.max()) >= PRIME
        ):
            raise invalid_parameter(
                "y", "Share", f"a non-empty 1-D array of integers in [0, {PRIME})", describe(y)
            )
        object.__setattr__(self, "y", arr.astype(np.uint32))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Share):
            return NotImplemented
        return self.x == other.x and bool(np.array_equal(self.y, other.y))

    def __hash__(self) -> int:
        return hash((self.x, self.y.tobytes()))

    def __repr__(self) -> str:
        return f"Share(x={self.x}, chunks={self.y.size})"


def _trusted_share(x: int, y: NDArray[np.uint32]) -> Share:
    """Build a share from values this module produced, skipping the checks."""
    share = object.__new__(Share)
    object.__setattr__(share, "x", x)
    object.__setattr__(share, "y", y)
    return share


# --------------------------------------------------------------------------- arithmetic


def _random_field_elements(count: int) -> NDArray[np.int64]:
    """``count`` independent uniform elements of GF(p) from the OS CSPRNG.

    31 random bits are uniform on [0, 2^31) = [0, p]; the value p is rejected and
    redrawn, which leaves every element of [0, p) with probability exactly 1/p.
    """
    out = np.frombuffer(_secrets.token_bytes(4 * count), dtype="<u4").astype(np.int64)
    out &= PRIME  # keep 31 bits (PRIME = 2^31 − 1 is the all-ones mask)
    bad = np.flatnonzero(out == PRIME)
    while bad.size:
        fresh = np.frombuffer(_secrets.token_bytes(4 * bad.size), dtype="<u4").astype(np.int64)
        out[bad] = fresh & PRIME
        bad = bad[out[bad] == PRIME]
    return out


@functools.lru_cache(maxsize=4)
def _power_table(n: int) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """x^0 … x^255 (mod p) for x = 1..n as float64 (exact: < 2^31), and x^256 (mod p)."""
    x = np.arange(1, n + 1, dtype=np.int64)
    powers = np.empty((n, _BLOCK), dtype=np.int64)
    powers[:, 0] = 1
    for j in range(1, _BLOCK):
        powers[:, j] = powers[:, j - 1] * x % PRIME
    x_block = powers[:, _BLOCK - 1] * x % PRIME
    table = powers.astype(np.float64)
    table.flags.writeable = False
    x_block.flags.writeable = False
    return table, x_block


def _evaluate(coefficients: NDArray[np.int64], n: int) -> NDArray[np.int64]:
    """Evaluate polynomials at x = 1..n: ``coefficients[k, j]`` is a_k of chunk j.

    Returns an (n, chunks) int64 array of values in [0, p).
    """
    degree_bound, chunks = coefficients.shape
    blocks = -(-degree_bound // _BLOCK)
    rows = min(degree_bound, _BLOCK)
    padded = np.zeros((blocks * rows, chunks), dtype=np.int64)
    padded[:degree_bound] = coefficients
    # m[j, b·c + k] = a_{b·256 + j, k}: one column per (block, chunk)
    m = padded.reshape(blocks, rows, chunks).transpose(1, 0, 2).reshape(rows, -1)
    # 11-bit limbs side by side, so one float64 matrix product does all three; it is
    # exact: powers < 2^31, limbs < 2^11, and 256 products of < 2^42 sum to < 2^50
    limbs = np.concatenate(
        [m & _LIMB_MASK, (m >> _LIMB) & _LIMB_MASK, m >> (2 * _LIMB)], axis=1
    ).astype(np.float64)
    table, x_block = _power_table(n)
    partial = (table[:, :rows] @ limbs).astype(np.int64) % PRIME
    width = blocks * chunks
    per_block = (
        partial[:, :width]
        + (partial[:, width : 2 * width] << _LIMB)
        + (partial[:, 2 * width :] << (2 * _LIMB))
    ) % PRIME  # < 2^31 + 2^42 + 2^53 before reducing
    per_block = per_block.reshape(n, blocks, chunks)
    # Horner's rule over blocks in x^256: acc < p and x^256 < p, so acc·x^256 + v < 2^63
    acc: NDArray[np.int64] = per_block[:, blocks - 1].copy()
    step = x_block[:, None]
    for b in range(blocks - 2, -1, -1):
        acc *= step
        acc += per_block[:, b]
        acc %= PRIME
    return acc


def _pow_mod(base: NDArray[np.int64], exponent: int) -> NDArray[np.int64]:
    """Element-wise base^exponent mod p by square-and-multiply (base in [0, p))."""
    result = np.ones_like(base)
    square = base.copy()
    while exponent:
        if exponent & 1:
            result = result * square % PRIME
        square = square * square % PRIME
        exponent >>= 1
    return result


def _prod_mod(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """Product modulo p along the last axis, by pairwise halving (values in [0, p))."""
    while values.shape[-1] > 1:
        if values.shape[-1] % 2:
            values = np.concatenate([values, np.ones_like(values[..., :1])], axis=-1)
        values = values[..., 0::2] * values[..., 1::2] % PRIME
    return values[..., 0]


def _check_points(xs: Any, name: str, owner: str) -> NDArray[np.int64]:
    """Return ``xs`` as distinct int64 points in [1, p − 1], or raise naming ``name``."""
    try:
        as_list = list(xs)
    except TypeError:
        raise invalid_parameter(name, owner, "a sequence of ints", describe(xs)) from None
    if not as_list or not all(is_int(v) and 1 <= v < PRIME for v in as_list):
        raise invalid_parameter(
            name, owner, f"a non-empty sequence of ints in [1, {PRIME - 1}]", describe(xs)
        )
    arr = np.array([int(v) for v in as_list], dtype=np.int64)
    if np.unique(arr).size != arr.size:
        values, counts = np.unique(arr, return_counts=True)
        raise invalid_parameter(
            name, owner, "distinct points", f"repeated x {values[counts > 1].tolist()}"
        )
    return arr


def lagrange_at_zero(xs: Sequence[int]) -> NDArray[np.int64]:
    """Lagrange coefficients for interpolating at zero from the points ``xs``.

    For distinct non-zero points x_1 … x_k, λ_i = Π_{j≠i} x_j / (x_j − x_i) mod p, so
    that f(0) = Σ λ_i·f(x_i) for every polynomial f of degree < k. They depend only on
    the points: compute them once per set of holders and pass them to :func:`combine`
    for every secret the same holders (in the same order) reconstruct.

    Parameters
    ----------
    xs
        The holders' points, distinct ints in ``[1, PRIME − 1]``, at least one.

    Returns
    -------
    ndarray of int64, shape (k,)
        λ_1 … λ_k in ``[0, PRIME)``, in the order of ``xs``.

    Raises
    ------
    ValidationError
        If ``xs`` is empty, holds a non-int or a point outside ``[1, PRIME − 1]``, or
        repeats a point.

    Notes
    -----
    O(k²) work, vectorised: the differences x_j − x_i are multiplied out by pairwise
    halving, 256 rows at a time, and the k denominators are inverted together by
    Fermat's little theorem (a^(p−2) = a^−1 mod p). 1.6 ms for k = 251, 8.3 ms for 667.
    """
    points = _check_points(xs, "xs", "lagrange_at_zero")
    k = points.size
    denominators = np.empty(k, dtype=np.int64)
    for start in range(0, k, _LAGRANGE_ROWS):
        rows = points[start : start + _LAGRANGE_ROWS]
        diff = (points[None, :] - rows[:, None]) % PRIME  # x_j − x_i, in [0, p)
        diff[np.arange(rows.size), np.arange(start, start + rows.size)] = 1  # skip j = i
        denominators[start : start + rows.size] = _prod_mod(diff)
    numerator = int(_prod_mod(points))  # Π_j x_j; λ_i = Π_j x_j / (x_i · d_i)
    inverses = _pow_mod(points * denominators % PRIME, PRIME - 2)
    coefficients: NDArray[np.int64] = inverses * numerator % PRIME
    return coefficients


# --------------------------------------------------------------------------- bytes <-> chunks


def _to_chunks(secret: bytes) -> NDArray[np.int64]:
    value = int.from_bytes(secret, "little")
    count = chunk_count(len(secret))
    return np.array(
        [(value >> (CHUNK_BITS * j)) & _CHUNK_MASK for j in range(count)], dtype=np.int64
    )


def _from_chunks(chunks: NDArray[np.int64], length: int, where: str) -> bytes:
    top_bits = 8 * length - CHUNK_BITS * (chunks.size - 1)
    if int(chunks.max()) > _CHUNK_MASK or int(chunks[-1]) >> top_bits:
        raise ValidationError(
            f"{where}: the interpolated value is not a {length}-byte secret. The shares are "
            "fewer than the threshold t, come from different secrets or splits, or were "
            "corrupted (this check catches most such cases, not all)."
        )
    value = 0
    for j in range(chunks.size - 1, -1, -1):
        value = (value << CHUNK_BITS) | int(chunks[j])
    return value.to_bytes(length, "little")


# --------------------------------------------------------------------------- public API


def split(secret: bytes, n: int, t: int) -> list[Share]:
    """Split ``secret`` into ``n`` shares, any ``t`` of which reconstruct it.

    Each 30-bit chunk of the secret is the constant term of its own random polynomial
    of degree t − 1 over GF(2^31 − 1), with coefficients from the operating system's
    CSPRNG; holder i gets the values at x = i (see the module docstring).

    Parameters
    ----------
    secret
        The secret, non-empty ``bytes`` (e.g. a 32-byte X25519 private key or PRG seed).
    n
        Number of holders, ``1 <= n < PRIME``.
    t
        Threshold, ``1 <= t <= n``: any t shares give the secret back and any t − 1
        are independent of it. ``t = 1`` gives every holder the secret itself.

    Returns
    -------
    list of Share
        ``n`` shares, the i-th (0-based) at point ``x = i + 1``, each with
        ``chunk_count(len(secret))`` uint32 values. The values of all shares are rows
        of one read-only array.

    Raises
    ------
    ValidationError
        If ``secret`` is not non-empty bytes, or ``n`` or ``t`` is out of range.

    References
    ----------
    .. [1] A. Shamir. "How to Share a Secret." Commun. ACM 22(11), 1979.
    """
    if not isinstance(secret, bytes) or not secret:
        got = f"bytes of length {len(secret)}" if isinstance(secret, bytes) else type(secret)
        # the secret itself never goes into the message
        raise invalid_parameter("secret", "split", "non-empty bytes", describe(got))
    n = check_int(n, "n", "split", low=1, high=PRIME - 1)
    t = check_int(t, "t", "split", low=1, high=n)
    chunks = _to_chunks(secret)
    coefficients = np.empty((t, chunks.size), dtype=np.int64)
    coefficients[0] = chunks
    coefficients[1:] = _random_field_elements((t - 1) * chunks.size).reshape(t - 1, chunks.size)
    values = _evaluate(coefficients, n).astype(np.uint32)
    values.flags.writeable = False
    return [_trusted_share(i + 1, values[i]) for i in range(n)]


def _gather(
    share_sets: Sequence[Sequence[Share]], length: int, name: str, owner: str
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Stack share sets at common points into ((k,) points, (m, k, chunks) values)."""
    chunks = chunk_count(length)
    xs: list[int] | None = None
    rows: list[NDArray[np.uint32]] = []
    for index, shares in enumerate(share_sets):
        where = name if owner == "combine" else f"{name}[{index}]"
        if isinstance(shares, (str, bytes)) or not isinstance(shares, Sequence) or not shares:
            raise invalid_parameter(where, owner, "a non-empty sequence of Share", describe(shares))
        # C-level passes over the shares: this loop runs once per share on the server
        if set(map(type, shares)) != {Share}:
            bad = next(s for s in shares if type(s) is not Share)
            raise invalid_parameter(where, owner, "a sequence of Share", type(bad).__name__)
        points = [s.x for s in shares]
        ys = [s.y for s in shares]
        if xs is None:
            if len(set(points)) != len(points):  # Share checked each x is in [1, p − 1]
                _check_points(points, where, owner)  # raises, naming the repeated points
            xs = points
        elif points != xs:
            if len(set(points)) != len(points) or sorted(points) != sorted(xs):
                raise invalid_parameter(
                    where, owner, f"shares at the same points as {name}[0]", "other points"
                )
            by_point = dict(zip(points, ys, strict=True))
            ys = [by_point[x] for x in xs]
        sizes = set(map(len, ys))
        if sizes != {chunks}:
            raise invalid_parameter(
                where,
                owner,
                f"shares of {chunks} chunks each (a {length}-byte secret)",
                f"shares of {sorted(sizes)} chunks",
            )
        rows.append(np.concatenate(ys))
    if xs is None:
        raise invalid_parameter(name, owner, "at least one set of shares", "none")
    values = np.concatenate(rows).reshape(len(rows), len(xs), chunks)
    if int(values.max()) >= PRIME:
        raise invalid_parameter(name, owner, f"share values below {PRIME}", int(values.max()))
    return np.array(xs, dtype=np.int64), values.astype(np.int64)


def _check_coefficients(coefficients: Any, points: NDArray[np.int64]) -> NDArray[np.int64]:
    arr = np.asarray(coefficients)
    expected = f"lagrange_at_zero(xs) for the {points.size} shares' points, in their order"
    if (
        arr.shape != points.shape
        or arr.dtype.kind not in "iu"
        or int(arr.min()) < 0
        or int(arr.max()) >= PRIME
    ):
        raise invalid_parameter("coefficients", "combine", expected, describe(arr))
    lam = arr.astype(np.int64)
    # cheap consistency checks: interpolating f = 1 gives 1, and f = x gives 0 (k >= 2)
    if int(lam.sum()) % PRIME != 1 or (
        points.size > 1 and int((lam * points % PRIME).sum()) % PRIME != 0
    ):
        raise invalid_parameter("coefficients", "combine", expected, "other coefficients")
    return lam


def _interpolate(lam: NDArray[np.int64], values: NDArray[np.int64]) -> NDArray[np.int64]:
    """Σ_i λ_i·values[:, i, :] mod p, exactly in int64: (k,), (m, k, c) -> (m, c)."""
    low = lam & ((1 << _HALF) - 1)
    high = lam >> _HALF
    total = np.zeros((values.shape[0], values.shape[2]), dtype=np.int64)
    for start in range(0, lam.size, _SUM_ROWS):
        block = values[:, start : start + _SUM_ROWS]
        # products < 2^16 · 2^31 = 2^47; at most 2^15 of them sum to < 2^62
        part_low = (low[start : start + _SUM_ROWS] @ block) % PRIME
        part_high = (high[start : start + _SUM_ROWS] @ block) % PRIME
        total = (total + (part_high << _HALF) + part_low) % PRIME
    return total


def combine(
    shares: Sequence[Share], length: int, *, coefficients: NDArray[np.int64] | None = None
) -> bytes:
    """Reconstruct a ``length``-byte secret from its shares by interpolation at zero.

    Uses exactly the shares given. With at least t shares of one :func:`split` the
    result is the secret; with fewer it is some other value (usually detected and
    raised, see below) — the caller must make sure it passes at least t.

    Parameters
    ----------
    shares
        Shares of one secret at distinct points, at least one.
    length
        Length of the secret in bytes (fixes the number of chunks per share).
    coefficients
        Optional ``lagrange_at_zero([s.x for s in shares])``, in the same order as
        ``shares``: pass it when many secrets are reconstructed from the same holders.
        Checked cheaply (Σλ_i = 1 and Σλ_i·x_i = 0 mod p), which catches a wrong set or
        order of points in practice.

    Returns
    -------
    bytes
        The secret, ``length`` bytes.

    Raises
    ------
    ValidationError
        If ``shares`` is empty, holds something other than :class:`Share`, repeats a
        point, has the wrong number of chunks for ``length`` or values ``>= PRIME``; if
        ``coefficients`` does not fit the points; or if the interpolated value is not a
        ``length``-byte secret (fewer than t shares, shares of different splits, or
        corrupted shares — caught with probability about 1 − 2^−23 for 32 bytes).

    Examples
    --------
    >>> shares = split(b"a 32-byte key, or any other one!", n=5, t=3)
    >>> combine(shares[1:4], 32)
    b'a 32-byte key, or any other one!'
    """
    length = check_int(length, "length", "combine", low=1)
    points, values = _gather([shares], length, "shares", "combine")
    if coefficients is None:
        lam = lagrange_at_zero(points.tolist())
    else:
        lam = _check_coefficients(coefficients, points)
    return _from_chunks(_interpolate(lam, values)[0], length, "combine")


def combine_many(share_sets: Sequence[Sequence[Share]], length: int) -> list[bytes]:
    """Reconstruct many ``length``-byte secrets whose shares come from the same holders.

    The situation of the secure-aggregation server: the same responders each return
    one share per secret to recover. The Lagrange coefficients are computed once, and
    all secrets are interpolated by one integer matrix product.

    Parameters
    ----------
    share_sets
        One sequence of shares per secret, at least one. Every set must hold shares at
        the same points (in any order; they are matched by point).
    length
        Length of every secret in bytes.

    Returns
    -------
    list of bytes
        The secrets, in the order of ``share_sets``; ``combine_many(sets, L)[i] ==
        combine(sets[i], L)``.

    Raises
    ------
    ValidationError
        As :func:`combine`, naming the offending set (``share_sets[i]``), and if the
        sets are not all at the same points.
    """
    length = check_int(length, "length", "combine_many", low=1)
    if isinstance(share_sets, (str, bytes)) or not isinstance(share_sets, Sequence):
        raise invalid_parameter(
            "share_sets", "combine_many", "a sequence of sequences of Share", describe(share_sets)
        )
    points, values = _gather(share_sets, length, "share_sets", "combine_many")
    lam = lagrange_at_zero(points.tolist())
    chunks = _interpolate(lam, values)
    return [
        _from_chunks(chunks[i], length, f"combine_many (share_sets[{i}])")
        for i in range(chunks.shape[0])
    ]


@functools.lru_cache(maxsize=256)
def _cached_lagrange(points: tuple[int, ...]) -> NDArray[np.int64]:
    lam = lagrange_at_zero(points)
    lam.flags.writeable = False
    return lam


def combine_arrays(points: Any, values: Any, length: int) -> list[bytes]:
    """Reconstruct many ``length``-byte secrets, each from its own holders, in one pass.

    The SecAgg+ server's case: every secret has its own t holders (its neighbourhood),
    so :func:`combine_many`'s shared points do not apply, but most rows repeat the same
    point tuple (the first t holders in offset order of a neighbourhood with nobody
    missing). Rows are grouped by point tuple; each group's Lagrange coefficients are
    computed once (and cached across calls) and the group is interpolated by one
    integer matrix product. No :class:`Share` objects are built.

    Parameters
    ----------
    points
        ``(m, k)`` ints: row i holds the distinct points of secret i's shares.
    values
        ``(m, k, chunk_count(length))`` share values below :data:`PRIME`, in the order
        of ``points``.
    length
        Length of every secret in bytes.

    Returns
    -------
    list of bytes
        The m secrets, in row order (with at least t shares per row; see :func:`combine`
        for what fewer give).

    Raises
    ------
    ValidationError
        If the shapes disagree, a point is outside [1, p − 1] or repeated in a row, a
        value is not below :data:`PRIME`, or a result is not a ``length``-byte secret
        (naming the row).
    """
    length = check_int(length, "length", "combine_arrays", low=1)
    xs = np.asarray(points)
    ys = np.asarray(values)
    chunks = chunk_count(length)
    if (xs.ndim != 2 or xs.dtype.kind not in "iu" or ys.dtype.kind not in "iu"
            or ys.shape != (*xs.shape, chunks) or xs.shape[1] < 1):
        raise invalid_parameter(
            "values", "combine_arrays",
            f"an (m, k, {chunks}) int array matching points of shape (m, k)",
            f"points {xs.shape}, values {ys.shape}")
    if xs.size and (int(xs.min()) < 1 or int(xs.max()) >= PRIME):
        raise invalid_parameter("points", "combine_arrays", f"ints in [1, {PRIME - 1}]",
                                f"values in [{int(xs.min())}, {int(xs.max())}]")
    if ys.size and (int(ys.max()) >= PRIME or int(ys.min()) < 0):
        raise invalid_parameter("values", "combine_arrays", f"share values in [0, {PRIME})",
                                f"values in [{int(ys.min())}, {int(ys.max())}]")
    xs = xs.astype(np.int64)
    ys = ys.astype(np.int64)
    out: list[bytes] = [b""] * xs.shape[0]
    groups, inverse = np.unique(xs, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    for g, row in enumerate(groups):
        members = np.flatnonzero(inverse == g)
        key = tuple(int(v) for v in row)
        if len(set(key)) != len(key):
            raise invalid_parameter("points", "combine_arrays", "distinct points per row",
                                    f"row {int(members[0])} repeats a point")
        result = _interpolate(_cached_lagrange(key), ys[members])
        for i, m in enumerate(members.tolist()):
            out[m] = _from_chunks(result[i], length, f"combine_arrays (row {m})")
    return out
