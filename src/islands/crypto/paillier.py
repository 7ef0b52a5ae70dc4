"""Packed Paillier encryption of real vectors, for additively homomorphic aggregation.

In federated averaging under Paillier, each client uploads Enc(pack(p_k·w_k)) (w_k its
model vector, p_k its weight, Σp_k = 1); the server multiplies the ciphertexts, which
adds the plaintexts, and the clients, who hold the private key, decrypt the weighted
mean. The scheme is Paillier's [1]_ with g = n + 1, so (1 + n)^m = 1 + n·m mod n² and

    Enc(m) = (1 + n·m) · r^n mod n²,    Enc(a) · Enc(b) mod n² = Enc(a + b mod n),

with r uniform in Z_n^*, fresh for every ciphertext. It is semantically secure under the
decisional composite residuosity assumption; a 2048-bit n (the default) gives about 112
bits of security (NIST SP 800-57), 1024 bits is for tests only. Ciphertexts are
malleable and unauthenticated: the server can add anything to them, and nothing here
detects it. The key :func:`fingerprint` carried by the vector helpers detects
ciphertexts made under *another key* (a configuration mistake), not tampering.

Packing layout. A real x becomes the offset-binary fixed-point integer

    v = round(x·2^f) + 2^(b-1),    b = value_bits = int_bits + f + 1,

which lies in [1, 2^b - 1] for |x| < 2^int_bits (values at or beyond the bound are
rejected, never wrapped). Slot i of a plaintext occupies bits [i·s, (i+1)·s), where
s = slot_bits = b + ceil(log2(max_terms)); values fill the slots in order (value j goes
to plaintext j // slots, slot j % slots) and unused slots of the last plaintext are 0.

Headroom: a sum of T ≤ max_terms packed plaintexts has, in every slot, a value at most
T·(2^b - 1) < 2^b·2^ceil(log2(max_terms)) = 2^s, so no carry ever crosses into the next
slot, and :func:`unpack` recovers each slot sum exactly and subtracts T·2^(b-1). With
slots = floor((key_bits - 1)/s), every plaintext and every such sum is below
2^(key_bits-1) ≤ n, so the sum modulo n is the true sum. Default parameters at 2048 bits
(f = 32, int_bits = 8, max_terms = 1024): b = 41, s = 51, 40 values per ciphertext,
2000 values in 50 ciphertexts, 54,000 in 1,350.

Precision: rounding to the 2^-f grid costs at most 2^-(f+1) per value, so the decrypted
sum of T terms is within T·2^-(f+1) of the exact sum of the inputs (plus the float64
rounding of the final result, relative 2^-53, which only matters once the sum exceeds
2^(53-f)). Slot integers are exact in int64/uint64, hence int_bits + f ≤ 62 and
s ≤ 64.

Unpacked mode: ``packing_spec(..., slots=1)`` (or :func:`unpacked_spec`) puts one value
per ciphertext, like the baseline that encrypts parameters one by one, for comparisons.

Why hand-written, and why not phe's ``EncryptedNumber``. python-paillier (``phe``) [2]_
supplies key generation (primes from ``random.SystemRandom``, i.e. the OS CSPRNG, and
``gmpy2.next_prime``) and is used for that. Its ``EncryptedNumber`` encodes a float as
mantissa·BASE^exponent and sends the *exponent in the clear*, which leaks the order of
magnitude of every value, and it holds one value per ciphertext, each needing one
2048-bit r^n mod n² (≈ 9 ms). Packing several fixed-point values per plaintext, as in
BatchCrypt [3]_, divides the number of ciphertexts (and of exponentiations) by the slot
count. phe's ``raw_decrypt`` does use CRT with gmpy2, but accepts only Python ints and
converts every intermediate back to ``int``; decryption here is the same CRT
(m_p = L_p(c^(p-1) mod p²)·h_p mod p, likewise for q, recombined, [1]_ §7) written on
``gmpy2.mpz`` with the exponentiations batched in ``gmpy2.powmod_base_list``.

Randomness: r is drawn with :mod:`secrets` (the OS CSPRNG) uniformly in [1, n) and
redrawn unless gcd(r, n) = 1 (DJN's α, below, with ``secrets.randbits``); numpy's
generators are never used. Each r^n mod n² (or h_s^α) is used for exactly one
ciphertext: :class:`RandomnessPool` pops it before use, and a pool is never refilled
with old values.

Speeding up r^n mod n². At 2048 bits about 99% of encryption is this exponentiation,
and it does not depend on the message, so :class:`RandomnessPool` precomputes it
(online encryption is then one multiplication modulo n²). A party that also holds the
private key (the clients, here) can compute the same value ≈ 2.7× faster by CRT:
r^n mod p² depends only on r mod p (because p | n), and equals (r^(q mod (p-1)) mod p)^p
mod p² (because (a + kp)^p ≡ a^p mod p²); likewise modulo q², and the two are combined
by CRT. The result is bit-for-bit r^n mod n² for the same r, so the ciphertext
distribution is unchanged; pass ``private_key=`` to :class:`RandomnessPool` to use it.
``gmpy2.powmod`` holds the GIL for the whole exponentiation, but
``gmpy2.powmod_base_list`` releases it (documented by gmpy2 as experimental since 2.1);
all exponentiations here go through the latter, in batches, so a ``background=True``
pool computes on another core while the caller's thread keeps running Python code.
Whether that helps depends on a core being free. Measured on the 2-core development VM
with the second core idle: two threads computing 2048-bit r^n took 4.3-4.5 ms per value
against 8.5 ms on one (two threads calling ``gmpy2.powmod`` instead: 8.8 ms, no gain),
and a background pool of 64 values filled in 0.58 s while a pure-Python loop ran
undisturbed next to it (0.15-0.17 s, as alone), against 0.69-0.72 s for the two one
after the other. While another job kept the second core busy, the same two threads took
8.6 ms per value and the pool-plus-loop run took as long as the sequential one (0.71 s
vs 0.72 s), the loop itself taking 0.29 s instead of 0.16 s. So a background pool is
worth it when the client has an idle core or idle time before it must encrypt (waiting
on the network, or training in torch, which releases the GIL); on a saturated machine
it only moves the same work earlier.

DJN randomness. Damgård, Jurik and Nielsen [5]_ (§4.2) replace the fresh r^n by a power
of one fixed n-th residue. The key owner takes an *admissible* n = p·q (p ≡ q ≡ 3 mod 4,
gcd(p - 1, q - 1) = 2), x uniform in Z_n^*, h = -x² mod n, and publishes
h_s = h^n mod n² beside n (:func:`generate_djn_keypair`); an encrypting party draws α
uniformly in [0, 2^ceil(k/2)), k the bits of n, and computes

    Enc(m) = (1 + n·m) · h_s^α mod n²

(``encrypt(pk, ms, pool=RandomnessPool(pk, djn_base=hs))``). h_s^α is an n-th residue,
so this is an ordinary Paillier ciphertext of m under the same key: :func:`decrypt`,
:func:`add` and the vector helpers are unchanged, and DJN and plain ciphertexts add
together. The short exponent is DJN's choice and the randomness is no longer uniform
over the n-th residues, so Paillier's own proof does not cover it; DJN argue that the
scheme is still semantically secure under the decisional composite residuosity
assumption, and this module relies on their argument (it is also the default
encryption of Intel's IPCL and SecretFlow's HEU). h_s is public but must be authentic,
like n: an h_s of small order would leave m readable (h_s = -1 gives c = ±(1 + n·m)),
and one that is not an n-th residue breaks decryption. :func:`check_djn_base` checks
what can be checked without the factors (range, a unit, not ±1) and, given the private
key, that h_s is an n-th residue.

As h_s is fixed, :class:`FixedBaseEngine` precomputes h_s^(d·2^(w·i)) mod n² for every
window digit d and position i (w = 8: 128 rows of 255 residues at 2048 bits), after
which one value costs at most 128 multiplications modulo n² instead of a 2048-bit
exponentiation. Measured on the development VM (2048-bit key, Python 3.11.7, gmpy2
2.3.2 / GMP 6.3.0, one thread; ``compute(200)`` timed with ``time.perf_counter``,
median of 5 runs (3 for w = 4 / 6 / 10), runs within 1% of each other; a range spans
medians from separate sessions)::

    randomness factor, per value                           ms      vs r^n
    r^n mod n², public (``powmod_base_list``)               8.57    1.0×
    r^n mod n², CRT with the private key                    3.15    2.7×
    DJN h_s^α, α of 1024 bits, ``powmod_exp_list``          4.36    2.0×
    DJN h_s^α, fixed-base table, w = 8 (default)            0.69-0.74  12×
    DJN table with w = 4 / 6 / 10                          1.33 / 0.95 / 0.61

The w = 8 table took 0.17-0.24 s to build (once, on first use) and added 18 MiB to the
process (16 MiB of residue data: 32,640 residues of 512 bytes); w = 4 / 6 / 10 hold 2 /
5 / 51 MiB and take 0.02 / 0.06 / 0.58 s. Pack + encrypt of 2,000 values (50
ciphertexts) computing the factors on the spot took 38 ms with the table built and
0.22 s with a new pool (table included), against 0.43-0.54 s with r^n; 54,000 values
took 1.0 s against 13 s. The table's multiplications hold the GIL (a few µs each): in a
background thread, 512 values filled in 0.64 s while a pure-Python loop next to it
slowed from 0.28 s to 0.46 s (together 0.64 s, as one after the other), whereas
``powmod_exp_list`` left the loop at 0.27 s but filled only 64 values in 0.39 s. The
table is therefore the default; ``FixedBaseEngine(method="powmod")`` is the comparison.

Throughput (2048-bit key, default spec: 40 values per ciphertext; measured on the
development machine, a 2-core AMD EPYC VM shared with other jobs, Python 3.11.7, gmpy2
2.3.2 / GMP 6.3.0, one thread; best of 3 for 2,000 values, one run for 54,000; where two
sessions disagreed, both figures are given, the higher one under contention)::

    operation                                  2,000 values (50 ct)  54,000 values (1,350 ct)
    pack                                       0.1-0.4 ms            4.6-5.0 ms
    pack + encrypt, r^n computed now (public)  0.43-0.54 s           13.0-13.2 s
                                               (3.7k-4.7k/s)         (4.1k-4.2k/s)
    pack + encrypt, r^n now by CRT (private)   0.16 s  (12.7k/s)     4.3-4.6 s (12k/s)
    pack + encrypt, pool already filled        0.8-0.9 ms (2.4M/s)   18 ms   (3.0M/s)
    fill the pool, per ciphertext              8.6 ms public (up to 13 under load), 3.2 ms CRT
    add two vectors (``add`` on ciphertexts)   0.28 ms (7.1M/s)      7.7 ms  (7.0M/s)
    ``sum_encrypted`` of 2 blobs (parse+add)   0.49 ms (4.1M/s)      13.4-13.7 ms (4.0M/s)
    ``sum_encrypted`` of 10 blobs              3.3 ms                90 ms
    decrypt + unpack                           0.12 s  (16k/s)       3.3-3.4 s (16k/s)
    blob size (32-byte header + 512 B per ct)  25,632 B              691,232 B

The issue's target, 2,000 parameters encrypted in at most 1 s at 2048 bits, is met
without a pool (0.43-0.54 s) and without the private key; the unpacked baseline
(:func:`unpacked_spec`, one value per ciphertext, as the source paper's 14.61 s) took
18.0 s (111 values/s) to encrypt and 6.3 s to decrypt 2,000 values here, in 1,024,032
bytes. Decryption is the same cost per ciphertext as phe's ``raw_decrypt`` (2.4 ms);
packing is what makes it 40× cheaper per value.

References
----------
.. [1] P. Paillier. "Public-Key Cryptosystems Based on Composite Degree Residuosity
   Classes." EUROCRYPT 1999, LNCS 1592, pp. 223-238.
.. [2] CSIRO's Data61. "python-paillier" (``phe``) 1.5,
   https://github.com/data61/python-paillier.
.. [3] C. Zhang, S. Li, J. Xia, W. Wang, F. Yan, Y. Liu. "BatchCrypt: Efficient
   Homomorphic Encryption for Cross-Silo Federated Learning." USENIX ATC 2020.
.. [4] E. Barker. "Recommendation for Key Management, Part 1: General." NIST SP 800-57
   Part 1 Rev. 5, 2020.
.. [5] I. Damgård, M. Jurik, J. B. Nielsen. "A generalization of Paillier's public-key
   system with applications to electronic voting." International Journal of
   Information Security 9(6), pp. 371-385, 2010.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gmpy2
import numpy as np
from numpy.typing import ArrayLike, NDArray
from phe import paillier

from islands.crypto.fixedpoint import dequantize, quantize
from islands.errors import ValidationError, invalid_parameter
from islands.progress import ProgressOption, task
from islands.validation import check_int, describe, is_int

__all__ = [
    "DEFAULT_KEY_BITS",
    "DJN_WINDOW_BITS",
    "FINGERPRINT_BYTES",
    "FixedBaseEngine",
    "PackingSpec",
    "RandomnessPool",
    "add",
    "check_djn_base",
    "ciphertexts_from_bytes",
    "ciphertexts_to_bytes",
    "decrypt",
    "decrypt_blob",
    "decrypt_vector",
    "encrypt",
    "encrypt_blob",
    "encrypt_vector",
    "fingerprint",
    "generate_djn_keypair",
    "generate_keypair",
    "pack",
    "packing_spec",
    "public_key_from_bytes",
    "public_key_to_bytes",
    "sum_encrypted",
    "unpack",
    "unpacked_spec",
]

DEFAULT_KEY_BITS = 2048
"""Default modulus size: about 112-bit security (NIST SP 800-57)."""

MIN_KEY_BITS = 1024
"""Smallest modulus accepted anywhere (1024 bits is for tests; use 2048 or more)."""

MAX_KEY_BITS = 16384
"""Largest modulus :func:`generate_keypair` accepts."""

FINGERPRINT_BYTES = 32
"""Length of a key fingerprint (SHA-256), which prefixes every vector blob."""

DJN_WINDOW_BITS = 8
"""Default window w of :class:`FixedBaseEngine`'s table (about 16 MiB at 2048 bits)."""

_MPZ = type(gmpy2.mpz(0))
_POOL_BATCH = 8  # r^n values computed per GIL-free powmod_base_list call in the background
_CHUNK_VALUES = 1 << 18  # pack/unpack this many slots at a time (64 bytes of bits each)


# --------------------------------------------------------------------------------------
# keys
# --------------------------------------------------------------------------------------


def generate_keypair(
    bits: int = DEFAULT_KEY_BITS, *, progress: ProgressOption = None,
) -> tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey]:
    """Generate a Paillier key pair with an n of exactly ``bits`` bits.

    Key generation is phe's ``generate_paillier_keypair`` [2]_: two primes of ``bits/2``
    bits from the OS CSPRNG (``random.SystemRandom``) and ``gmpy2.next_prime``, redrawn
    until n = p·q has exactly ``bits`` bits.

    Parameters
    ----------
    bits
        Size of n: an int in [1024, 16384] and a multiple of 256. 2048 (about 112-bit
        security, [4]_) is the default and the recommended minimum; 1024 is for tests.
    progress
        False/None (default), True for a progress bar, or a callable receiving each
        :class:`~islands.progress.ProgressUpdate` (it sees the key size only).

    Returns
    -------
    tuple
        ``(public_key, private_key)``.
    """
    bits = _check_key_bits(bits, "generate_keypair")
    with task(progress, f"Paillier keys ({bits} bits)", 1, owner="generate_keypair"):
        public_key, private_key = paillier.generate_paillier_keypair(n_length=bits)
    return public_key, private_key


def _check_key_bits(bits: Any, owner: str) -> int:
    if not is_int(bits) or not MIN_KEY_BITS <= bits <= MAX_KEY_BITS or bits % 256 != 0:
        raise invalid_parameter(
            "bits",
            owner,
            f"an int in [{MIN_KEY_BITS}, {MAX_KEY_BITS}] and a multiple of 256",
            describe(bits),
        )
    return int(bits)


def _djn_prime(bits: int) -> Any:
    """Draw a prime p ≡ 3 (mod 4) of exactly ``bits`` bits (next_prime of a CSPRNG draw)."""
    while True:
        start = gmpy2.bit_set(gmpy2.mpz(secrets.randbits(bits)), bits - 1)
        p = gmpy2.next_prime(start)
        if p % 4 == 3 and p.bit_length() == bits:
            return p


def generate_djn_keypair(
    bits: int = DEFAULT_KEY_BITS, *, progress: ProgressOption = None,
) -> tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey, int]:
    """Generate a Paillier key pair on an admissible modulus, and its DJN base h_s.

    Damgård, Jurik and Nielsen [5]_ (§4.2) call n = p·q *admissible* when
    p ≡ q ≡ 3 (mod 4) and gcd(p - 1, q - 1) = 2. Here p and q are drawn as in
    :func:`generate_keypair` (``bits/2``-bit starting points from the OS CSPRNG,
    :mod:`secrets`, then ``gmpy2.next_prime``), each redrawn until it is ≡ 3 (mod 4),
    and the pair redrawn until p ≠ q, gcd(p - 1, q - 1) = 2 and n has exactly ``bits``
    bits. Then x is drawn uniformly in Z_n^*, h = -x² mod n and h_s = h^n mod n²
    (computed by CRT with the factors). The keys are ordinary phe keys: every function of
    this module takes them, and ciphertexts made with or without h_s decrypt alike.

    Parameters
    ----------
    bits
        Size of n, as for :func:`generate_keypair`: an int in [1024, 16384] and a
        multiple of 256.
    progress
        As for :func:`generate_keypair`: one step per prime pair drawn, then h_s.

    Returns
    -------
    tuple
        ``(public_key, private_key, hs)``: phe keys and h_s, an int in (1, n²), which is
        public. Give it to encrypting parties alongside the public key (it needs the same
        authenticity: see :func:`check_djn_base`) and pass it as
        ``RandomnessPool(public_key, djn_base=hs)``.

    Examples
    --------
    >>> pk, sk, hs = generate_djn_keypair(1024)
    >>> c = encrypt(pk, [42], pool=RandomnessPool(pk, djn_base=hs))
    >>> decrypt(sk, c)
    [42]
    """
    bits = _check_key_bits(bits, "generate_djn_keypair")
    half = bits // 2
    with task(progress, f"Paillier DJN keys ({bits} bits)", None,
              owner="generate_djn_keypair") as running:
        while True:
            p, q = _djn_prime(half), _djn_prime(half)
            running.advance(info="prime pair drawn")
            if p != q and gmpy2.gcd(p - 1, q - 1) == 2 and (p * q).bit_length() == bits:
                break
        n = p * q
        public_key = paillier.PaillierPublicKey(int(n))
        private_key = paillier.PaillierPrivateKey(public_key, int(p), int(q))
        x = _random_units(n, 1)[0]
        h = (-x * x) % n
        hs = _RnEngine(n, private_key).powers([h])[0]  # h^n mod n², by CRT
        running.advance(info="DJN base h_s")
    return public_key, private_key, int(hs)


def _modulus(public_key: Any, owner: str) -> tuple[Any, Any]:
    """Return (n, n²) as mpz after checking ``public_key`` is a phe public key."""
    if not isinstance(public_key, paillier.PaillierPublicKey):
        raise invalid_parameter(
            "public_key", owner, "a phe.paillier.PaillierPublicKey", describe(public_key)
        )
    n = gmpy2.mpz(public_key.n)
    return n, n * n


def _check_private_key(private_key: Any, owner: str) -> Any:
    if not isinstance(private_key, paillier.PaillierPrivateKey):
        raise invalid_parameter(
            "private_key", owner, "a phe.paillier.PaillierPrivateKey", describe(private_key)
        )
    return private_key


def _int_summary(value: Any) -> str:
    """Describe ``value`` briefly for an error message (big ints by their bit length)."""
    v = _as_mpz(value)
    if v is None:
        return repr(describe(value))
    return str(v) if v.bit_length() <= 64 else f"an int of {v.bit_length()} bits"


def check_djn_base(
    public_key: paillier.PaillierPublicKey,
    hs: Any,
    owner: str = "check_djn_base",
    *,
    private_key: paillier.PaillierPrivateKey | None = None,
) -> Any:
    """Check a DJN base h_s received from another party; return it as an mpz.

    Public checks: h_s must be an int in [2, n² - 2] that is a unit modulo n
    (gcd(h_s, n) = 1). 1 and n² - 1 (≡ -1) are rejected because their powers are ±1,
    which would leave the plaintext readable in (1 + n·m)·h_s^α. These checks cannot tell
    whether h_s is an n-th residue of large order, as :func:`generate_djn_keypair` makes
    it; a wrong h_s breaks decryption (h_s not an n-th residue) or hides nothing (h_s of
    small order), so h_s must reach the encrypting party as authenticated as the public
    key itself. A party holding ``private_key`` can also check that h_s is an n-th
    residue (it decrypts to 0).

    Parameters
    ----------
    public_key
        The key h_s belongs to.
    hs
        The candidate h_s (int, numpy integer or gmpy2.mpz).
    owner
        Name of the calling function or class, for error messages.
    private_key
        Optional matching private key: also check that h_s is an n-th residue modulo n².

    Returns
    -------
    gmpy2.mpz
        ``hs``.

    Raises
    ------
    ValidationError
        If ``hs`` fails a check (the message names ``hs`` and ``owner``), or
        ``private_key`` does not match ``public_key``.
    """
    n, n2 = _modulus(public_key, owner)
    v = _as_mpz(hs)
    if v is None or not 2 <= v <= n2 - 2:
        raise ValidationError(
            f"The 'hs' parameter of {owner} must be an int in [2, n**2 - 2]. Got "
            f"{_int_summary(hs)} instead."
        )
    if gmpy2.gcd(v, n) != 1:
        raise ValidationError(
            f"The 'hs' parameter of {owner} must be a unit modulo n (gcd(hs, n) = 1). Got "
            f"{_int_summary(hs)} that shares a factor with n instead."
        )
    if private_key is not None:
        _check_private_key(private_key, owner)
        if int(private_key.public_key.n) != int(n):
            raise ValidationError(f"{owner}: private_key does not match public_key")
        if decrypt(private_key, [v]) != [0]:
            raise ValidationError(
                f"The 'hs' parameter of {owner} must be an n-th residue modulo n**2 "
                "(h^n mod n**2, which encrypts 0). Got one that decrypts to a non-zero "
                "value instead."
            )
    return v


def _key_bytes(n: Any) -> int:
    return (int(n).bit_length() + 7) // 8


def public_key_to_bytes(public_key: paillier.PaillierPublicKey) -> bytes:
    """Serialise a public key: n, big-endian, in ceil(bits/8) bytes (g = n + 1 implied)."""
    n, _ = _modulus(public_key, "public_key_to_bytes")
    out: bytes = n.to_bytes(_key_bytes(n), "big")
    return out


def public_key_from_bytes(data: bytes, *, min_bits: int = MIN_KEY_BITS,
                          ) -> paillier.PaillierPublicKey:
    """Parse :func:`public_key_to_bytes` output.

    ``min_bits`` is the receiving party's own ``key_bits``: a peer may send a larger key,
    never a smaller one (at least 1024 bits in any case).

    Raises
    ------
    ValidationError
        If ``data`` is not bytes, has a leading zero byte (not canonical), or encodes an
        even n or one shorter than ``min_bits``.
    """
    min_bits = max(int(min_bits), MIN_KEY_BITS)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise invalid_parameter("data", "public_key_from_bytes", "bytes", describe(data))
    raw = bytes(data)
    if not raw or raw[0] == 0:
        raise ValidationError(
            "public_key_from_bytes: data must be n in big-endian without leading zero bytes"
        )
    n = int.from_bytes(raw, "big")
    if n.bit_length() < min_bits or n % 2 == 0:
        parity = "even" if n % 2 == 0 else "odd"
        raise ValidationError(
            f"public_key_from_bytes: n must be odd with at least {min_bits} bits; got an "
            f"{parity} n of {n.bit_length()} bits"
        )
    return paillier.PaillierPublicKey(n)


def fingerprint(public_key: paillier.PaillierPublicKey) -> bytes:
    """SHA-256 of :func:`public_key_to_bytes`: 32 bytes that identify the key."""
    return hashlib.sha256(public_key_to_bytes(public_key)).digest()


# --------------------------------------------------------------------------------------
# packing
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackingSpec:
    """How reals are packed into one Paillier plaintext.

    Parameters
    ----------
    key_bits
        Bits of n. Packed plaintexts (and sums of up to ``max_terms`` of them) stay below
        2^(key_bits-1), so any key whose n has at least ``key_bits`` bits can carry them.
    frac_bits
        Fixed-point fractional bits f: values are rounded to multiples of 2^-f.
    int_bits
        Magnitude bound: every packed value must satisfy |x| < 2^int_bits.
    max_terms
        How many packed plaintexts may be added together (clients) without a carry
        between slots.
    slot_limit
        At most this many values per plaintext (``None``: as many as fit). ``1`` is the
        unpacked mode, one value per ciphertext.

    Raises
    ------
    ValidationError
        If a field is out of range: ``frac_bits`` and ``int_bits`` are ints ≥ 0 with
        ``int_bits + frac_bits ≤ 62``; ``max_terms`` ≥ 1 with ``slot_bits ≤ 64``;
        ``key_bits`` > ``slot_bits``; ``slot_limit`` in [1, capacity].
    """

    key_bits: int
    frac_bits: int = 32
    int_bits: int = 8
    max_terms: int = 1024
    slot_limit: int | None = None

    def __post_init__(self) -> None:
        owner = "PackingSpec"
        # fields are stored as plain ints (numpy integers are accepted and converted)
        object.__setattr__(
            self, "frac_bits", check_int(self.frac_bits, "frac_bits", owner, low=0, high=62)
        )
        object.__setattr__(
            self, "int_bits", check_int(self.int_bits, "int_bits", owner, low=0, high=62)
        )
        if self.int_bits + self.frac_bits > 62:
            raise invalid_parameter(
                "int_bits",
                owner,
                f"at most 62 - frac_bits = {62 - self.frac_bits}",
                self.int_bits,
            )
        object.__setattr__(self, "max_terms", check_int(self.max_terms, "max_terms", owner, low=1))
        if self.slot_bits > 64:
            raise invalid_parameter(
                "max_terms",
                owner,
                f"small enough that slot_bits = value_bits + ceil(log2(max_terms)) <= 64 "
                f"(value_bits = {self.value_bits})",
                self.max_terms,
            )
        object.__setattr__(
            self, "key_bits", check_int(self.key_bits, "key_bits", owner, low=self.slot_bits + 1)
        )
        if self.slot_limit is not None:
            limit = check_int(self.slot_limit, "slot_limit", owner, low=1, high=self.capacity)
            object.__setattr__(self, "slot_limit", limit)

    @property
    def value_bits(self) -> int:
        """Bits of one offset-binary value: int_bits + frac_bits + 1."""
        return self.int_bits + self.frac_bits + 1

    @property
    def slot_bits(self) -> int:
        """Bits per slot: value_bits + ceil(log2(max_terms)) (headroom for the sum)."""
        return self.value_bits + (self.max_terms - 1).bit_length()

    @property
    def capacity(self) -> int:
        """How many slots fit below 2^(key_bits-1): floor((key_bits - 1) / slot_bits)."""
        return (self.key_bits - 1) // self.slot_bits

    @property
    def slots(self) -> int:
        """Values per plaintext: the capacity, or ``slot_limit`` if set."""
        return self.capacity if self.slot_limit is None else min(self.slot_limit, self.capacity)

    @property
    def resolution(self) -> float:
        """Fixed-point step 2^-frac_bits."""
        return 2.0**-self.frac_bits

    @property
    def max_abs(self) -> float:
        """Packed values must satisfy |x| < max_abs = 2^int_bits."""
        return 2.0**self.int_bits

    @property
    def offset(self) -> int:
        """Offset added to round(x·2^f): 2^(value_bits-1)."""
        return 1 << (self.value_bits - 1)

    def ciphertexts_for(self, length: int) -> int:
        """Return how many plaintexts (ciphertexts) hold ``length`` values: ceil(length/slots)."""
        n = check_int(length, "length", "PackingSpec.ciphertexts_for", low=0)
        return -(-n // self.slots)


def packing_spec(
    key_bits: int = DEFAULT_KEY_BITS,
    *,
    frac_bits: int = 32,
    int_bits: int = 8,
    max_terms: int = 1024,
    slots: int | None = None,
) -> PackingSpec:
    """Build a validated :class:`PackingSpec`.

    Parameters
    ----------
    key_bits
        Bits of the Paillier modulus n the plaintexts are meant for.
    frac_bits, int_bits, max_terms
        See :class:`PackingSpec`.
    slots
        Values per plaintext; ``None`` packs as many as fit, ``1`` is unpacked mode.

    Examples
    --------
    >>> spec = packing_spec(2048)
    >>> spec.value_bits, spec.slot_bits, spec.slots, spec.ciphertexts_for(2000)
    (41, 51, 40, 50)
    """
    return PackingSpec(key_bits, frac_bits, int_bits, max_terms, slots)


def unpacked_spec(
    key_bits: int = DEFAULT_KEY_BITS,
    *,
    frac_bits: int = 32,
    int_bits: int = 8,
    max_terms: int = 1024,
) -> PackingSpec:
    """Like :func:`packing_spec` with ``slots=1``: one value per ciphertext (baseline)."""
    return packing_spec(
        key_bits, frac_bits=frac_bits, int_bits=int_bits, max_terms=max_terms, slots=1
    )


def _check_spec(spec: Any, owner: str) -> PackingSpec:
    if not isinstance(spec, PackingSpec):
        raise invalid_parameter("spec", owner, "a PackingSpec", describe(spec))
    return spec


def _as_mpz(value: Any) -> Any:
    """``value`` as an mpz if it is an integer (int, numpy integer, mpz), else ``None``."""
    if isinstance(value, _MPZ):
        return value
    if is_int(value):
        return gmpy2.mpz(int(value))
    return None


def _slots_to_ints(slot_values: NDArray[np.uint64], spec: PackingSpec) -> list[int]:
    """Lay ``slots`` slot integers per plaintext out as little-endian bits; read big ints."""
    slots, s = spec.slots, spec.slot_bits
    count = -(-slot_values.size // slots)
    padded = np.zeros(count * slots, dtype="<u8")
    padded[: slot_values.size] = slot_values
    row_bytes = -(-(slots * s) // 8)
    out: list[int] = []
    rows_per_chunk = max(1, _CHUNK_VALUES // slots)
    for start in range(0, count, rows_per_chunk):
        block = padded[start * slots : (start + rows_per_chunk) * slots]
        rows = block.size // slots
        bits = np.unpackbits(block.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        # each value is < 2^slot_bits, so the dropped high bits are zeros
        bits = bits[:, :s].reshape(rows, slots * s)
        data = np.packbits(bits, axis=1, bitorder="little").tobytes()
        out.extend(
            int.from_bytes(data[i * row_bytes : (i + 1) * row_bytes], "little") for i in range(rows)
        )
    return out


def _ints_to_slots(plaintexts: Sequence[Any], spec: PackingSpec) -> NDArray[np.uint64]:
    """Inverse of :func:`_slots_to_ints`; checks each int is below 2^(slots·slot_bits)."""
    slots, s = spec.slots, spec.slot_bits
    total_bits = slots * s
    row_bytes = -(-total_bits // 8)
    raw = bytearray()
    for i, m in enumerate(plaintexts):
        v = _as_mpz(m)
        if v is None or v < 0 or v.bit_length() > total_bits:
            raise ValidationError(
                f"unpack: plaintext {i} is not an int in [0, 2**{total_bits}) (slots x "
                "slot_bits): wrong key, spec or corrupted ciphertext"
            )
        raw += v.to_bytes(row_bytes, "little")
    rows = len(plaintexts)
    out = np.empty(rows * slots, dtype="<u8")
    rows_per_chunk = max(1, _CHUNK_VALUES // slots)
    for start in range(0, rows, rows_per_chunk):
        stop = min(rows, start + rows_per_chunk)
        block = np.frombuffer(
            raw, dtype=np.uint8, count=(stop - start) * row_bytes, offset=start * row_bytes
        ).reshape(stop - start, row_bytes)
        bits = np.unpackbits(block, axis=1, bitorder="little")[:, :total_bits]
        bits = bits.reshape((stop - start) * slots, s)
        wide = np.zeros((bits.shape[0], 64), dtype=np.uint8)
        wide[:, :s] = bits
        words = np.packbits(wide, axis=1, bitorder="little").reshape(-1).view("<u8")
        out[start * slots : stop * slots] = words
    return out.astype(np.uint64, copy=False)


def pack(values: ArrayLike, spec: PackingSpec) -> list[int]:
    """Encode a real vector as offset-binary fixed point and pack it into plaintexts.

    Value j becomes round(x_j·2^f) + 2^(value_bits-1) in bits
    [(j mod slots)·slot_bits, (j mod slots + 1)·slot_bits) of plaintext j // slots (see
    the module docstring for the layout and the headroom bound).

    Parameters
    ----------
    values
        A 1-D array-like of finite reals with |x| < 2^int_bits.
    spec
        The packing layout.

    Returns
    -------
    list of int
        ``spec.ciphertexts_for(len(values))`` non-negative plaintexts, each below
        2^(slots·slot_bits) ≤ 2^(key_bits-1).

    Raises
    ------
    ValidationError
        If ``values`` is not 1-D, holds NaN/inf, or a value whose magnitude reaches
        2^int_bits (after rounding to the 2^-f grid): no silent wrap-around.
    """
    spec = _check_spec(spec, "pack")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise invalid_parameter("values", "pack", "a 1-D array of reals", describe(values)) from exc
    if arr.ndim != 1:
        raise invalid_parameter("values", "pack", "a 1-D array of reals", describe(arr))
    if arr.size == 0:
        return []
    limit = 2.0**spec.int_bits

    def out_of_range(index: int, value: float) -> ValidationError:
        if not np.isfinite(value):
            return ValidationError(f"pack: values[{index}] is {value!r}; values must be finite")
        return ValidationError(
            f"pack: |values[{index}]| = {abs(value)!r} is not below 2**int_bits = "
            f"{limit:g} (after rounding to multiples of 2**-{spec.frac_bits}); raise "
            "int_bits or scale the values down"
        )

    scaled = quantize(arr, spec.frac_bits, bound=limit, inclusive=False,
                      limit=1 << (spec.int_bits + spec.frac_bits), fail=out_of_range)
    # |scaled| < 2^(value_bits-1) <= 2^62; the offset makes it positive
    encoded = (scaled + np.int64(spec.offset)).astype(np.uint64)
    return _slots_to_ints(encoded, spec)


def unpack(
    plaintexts: Sequence[int], length: int, spec: PackingSpec, *, terms: int
) -> NDArray[np.float64]:
    """Decode the sum of ``terms`` packed plaintexts back to ``length`` reals.

    Each slot holds Σ_t (round(x_t·2^f) + 2^(value_bits-1)); subtracting
    terms·2^(value_bits-1) and dividing by 2^f gives Σ_t x_t within terms·2^-(f+1).

    Parameters
    ----------
    plaintexts
        Decrypted plaintexts: exactly ``spec.ciphertexts_for(length)`` of them.
    length
        Number of values packed.
    spec
        The layout they were packed with.
    terms
        How many packed plaintexts were added (1 for a single :func:`pack`), in
        [1, spec.max_terms].

    Raises
    ------
    ValidationError
        If ``terms`` is out of range, the count of plaintexts does not match ``length``,
        or a slot holds a value no sum of ``terms`` packed values can hold (wrong key,
        wrong ``terms``, wrong spec, or a corrupted ciphertext).
    """
    spec = _check_spec(spec, "unpack")
    length = check_int(length, "length", "unpack", low=0)
    terms = check_int(terms, "terms", "unpack", low=1, high=spec.max_terms)
    expected = spec.ciphertexts_for(length)
    if isinstance(plaintexts, (str, bytes)) or len(plaintexts) != expected:
        raise ValidationError(
            f"unpack: {length} values with {spec.slots} slots need {expected} plaintexts, "
            f"got {len(plaintexts)}"
        )
    if length == 0:
        return np.zeros(0, dtype=np.float64)
    sums = _ints_to_slots(plaintexts, spec)
    if np.any(sums[length:]):
        raise ValidationError(
            "unpack: unused slots after the last value are not zero: wrong length, spec or "
            "key, or a corrupted ciphertext"
        )
    sums = sums[:length]
    low, high = terms, terms * ((1 << spec.value_bits) - 1)
    if np.any(sums < np.uint64(low)) or np.any(sums > np.uint64(high)):
        raise ValidationError(
            f"unpack: a slot holds a value outside [{low}, {high}], which no sum of "
            f"terms={terms} packed values can: wrong terms, spec or key, or a corrupted "
            "ciphertext"
        )
    # the true difference is below terms·2^(value_bits-1) <= 2^63 in magnitude, so the
    # wrapping uint64 subtraction read as int64 is exact
    diff = (sums - np.uint64(terms * spec.offset)).view(np.int64)
    return dequantize(diff, spec.frac_bits)


# --------------------------------------------------------------------------------------
# randomness: r^n mod n^2
# --------------------------------------------------------------------------------------


def _random_units(n: Any, count: int) -> list[Any]:
    """``count`` values uniform in Z_n^* from the OS CSPRNG (:mod:`secrets`)."""
    n_int = int(n)
    out: list[Any] = []
    while len(out) < count:
        r = gmpy2.mpz(secrets.randbelow(n_int - 1) + 1)
        if gmpy2.gcd(r, n) == 1:  # fails with probability ~2^-(bits/2): n's factor found
            out.append(r)
    return out


class _RnEngine:
    """Computes r^n mod n² for fresh r: directly, or by CRT when p and q are known."""

    def __init__(self, n: Any, private_key: Any | None) -> None:
        self.n = n
        self.n2 = n * n
        self.crt = private_key is not None
        if private_key is not None:
            p, q = gmpy2.mpz(private_key.p), gmpy2.mpz(private_key.q)
            self.p, self.q = p, q
            self.p2, self.q2 = p * p, q * q
            self.q_mod_pm1 = q % (p - 1)
            self.p_mod_qm1 = p % (q - 1)
            self.q2_inv = gmpy2.invert(self.q2, self.p2)  # (q²)^-1 mod p²

    def compute(self, count: int) -> list[Any]:
        """Return r^n mod n² for ``count`` fresh r drawn with :mod:`secrets`."""
        return self.powers(_random_units(self.n, count)) if count > 0 else []

    def powers(self, rs: list[Any]) -> list[Any]:
        """Return [r^n mod n² for r in rs], by CRT if the factors are known."""
        if not self.crt:
            values: list[Any] = gmpy2.powmod_base_list(rs, self.n, self.n2)
            return values
        # r^n mod p² = (r^(q mod p-1) mod p)^p mod p², since p | n; likewise for q
        a = gmpy2.powmod_base_list(
            gmpy2.powmod_base_list(rs, self.q_mod_pm1, self.p), self.p, self.p2
        )
        b = gmpy2.powmod_base_list(
            gmpy2.powmod_base_list(rs, self.p_mod_qm1, self.q), self.q, self.q2
        )
        p2, q2, q2_inv = self.p2, self.q2, self.q2_inv
        return [bq + q2 * ((ap - bq) * q2_inv % p2) for ap, bq in zip(a, b, strict=True)]


class FixedBaseEngine:
    """Computes DJN randomness factors h_s^α mod n² for fresh short exponents α.

    Each value uses a fresh α = ``secrets.randbits(ceil(k/2))`` (k the bit length of n),
    uniform in [0, 2^ceil(k/2)) as in DJN [5]_ §4.2. The engine has the interface
    :class:`RandomnessPool` uses (``n``, ``n2``, ``compute(count)``); build the pool with
    ``RandomnessPool(public_key, djn_base=hs)`` rather than using the engine directly.

    Parameters
    ----------
    public_key
        The Paillier public key.
    hs
        Its DJN base h_s (from :func:`generate_djn_keypair`); checked with
        :func:`check_djn_base`.
    method
        ``"table"`` (default): fixed-base windowed exponentiation with a precomputed
        table, row i holding h_s^(d·2^(w·i)) mod n² for d = 1 … 2^w - 1, so one value
        costs at most ceil(ceil(k/2)/w) multiplications modulo n² (128 at 2048 bits
        with w = 8). ``"powmod"``: ``gmpy2.powmod_exp_list(hs, alphas, n²)``, a
        square-and-multiply in C per value that releases the GIL. At 2048 bits on the
        development VM the table took 0.69-0.74 ms per value and powmod 4.3 ms (module
        docstring), so the table is the default; powmod needs no table and leaves the GIL
        free, which only matters for a background pool on an otherwise idle core.
    window
        Window w of the table, an int in [1, 12]. The table has ceil(ceil(k/2)/w) rows of
        2^w - 1 residues of 2·ceil(k/8) bytes: 128 × 255 × 512 B ≈ 16 MiB at 2048 bits
        with w = 8 (18 MiB of process memory measured), built once in about 0.2 s on first
        use (:attr:`table_bytes`). w = 10 saves a fifth of the multiplications for
        3.2× the memory.

    Raises
    ------
    ValidationError
        If ``public_key``, ``hs``, ``method`` or ``window`` is invalid.
    """

    METHODS = ("table", "powmod")

    def __init__(
        self,
        public_key: paillier.PaillierPublicKey,
        hs: Any,
        *,
        method: str = "table",
        window: int = DJN_WINDOW_BITS,
    ) -> None:
        owner = "FixedBaseEngine"
        self.n, self.n2 = _modulus(public_key, owner)
        self.hs = check_djn_base(public_key, hs, owner)
        if method not in self.METHODS:
            raise invalid_parameter("method", owner, "'table' or 'powmod'", describe(method))
        self.method = method
        self.window = check_int(window, "window", owner, low=1, high=12)
        self.exponent_bits = (int(self.n).bit_length() + 1) // 2  # ceil(k/2)
        self.rows = -(-self.exponent_bits // self.window)
        self._table: list[list[Any]] | None = None
        self._lock = threading.Lock()

    @property
    def table_bytes(self) -> int:
        """Bytes of residue data in the table: rows × (2^w - 1) × 2·ceil(k/8)."""
        return self.rows * ((1 << self.window) - 1) * _ciphertext_width(self.n)

    def _get_table(self) -> list[list[Any]]:
        table = self._table
        if table is None:
            with self._lock:  # the pool's thread and its caller may both get here first
                if self._table is None:
                    self._table = self._build_table()
                table = self._table
        return table

    def _build_table(self) -> list[list[Any]]:
        n2, size = self.n2, (1 << self.window) - 1
        table: list[list[Any]] = []
        base = self.hs  # h_s^(2^(w·i)) for row i
        for _ in range(self.rows):
            row = [base]
            for _ in range(size - 1):
                row.append(row[-1] * base % n2)
            table.append(row)
            base = row[-1] * base % n2  # h_s^((2^w - 1 + 1)·2^(w·i))
        return table

    def compute(self, count: int) -> list[Any]:
        """Return h_s^α mod n² for ``count`` fresh α drawn with :mod:`secrets`."""
        if count <= 0:
            return []
        bits = self.exponent_bits
        return self.powers([secrets.randbits(bits) for _ in range(count)])

    def powers(self, alphas: Sequence[int]) -> list[Any]:
        """Return [h_s^α mod n² for α in alphas], each α an int in [0, 2^ceil(k/2)).

        Raises
        ------
        ValidationError
            If an α is not an int in that range (the table covers no larger exponent).
        """
        limit = 1 << self.exponent_bits
        exps: list[int] = []
        for i, a in enumerate(alphas):
            if not is_int(a) or not 0 <= a < limit:
                raise ValidationError(
                    f"FixedBaseEngine.powers: alphas[{i}] must be an int in "
                    f"[0, 2**{self.exponent_bits})"
                )
            exps.append(int(a))
        if not exps:
            return []
        if self.method == "powmod":
            values: list[Any] = gmpy2.powmod_exp_list(self.hs, exps, self.n2)
            return values
        table, n2 = self._get_table(), self.n2
        w, mask = self.window, (1 << self.window) - 1
        out = []
        for a in exps:
            acc = None
            for row in table:  # row i: digit i of α in base 2^w
                d = a & mask
                a >>= w
                if d:
                    acc = row[d - 1] if acc is None else acc * row[d - 1] % n2
                if not a:
                    break
            out.append(gmpy2.mpz(1) if acc is None else acc)
        return out


_Engine = _RnEngine | FixedBaseEngine


class _PoolState:
    """What a pool and its background thread share (the thread never holds the pool)."""

    def __init__(self, engine: _Engine, size: int) -> None:
        self.engine = engine
        self.size = size
        self.items: deque[Any] = deque()
        self.cond = threading.Condition()
        self.closed = False

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def run(self) -> None:
        while True:
            with self.cond:
                while not self.closed and len(self.items) >= self.size:
                    self.cond.wait()
                if self.closed:
                    return
                need = min(self.size - len(self.items), _POOL_BATCH)
            batch = self.engine.compute(need)  # GIL released inside powmod_base_list
            with self.cond:
                if self.closed:
                    return
                self.items.extend(batch)
                self.cond.notify_all()  # for anyone waiting for the pool to fill


class RandomnessPool:
    """Precomputed randomness factors for one public key, each used once and discarded.

    The factors are r^n mod n² with a fresh r drawn with :mod:`secrets` uniformly in
    Z_n^*, or, with ``djn_base``, h_s^α mod n² with a fresh α drawn with :mod:`secrets`
    uniformly in [0, 2^ceil(k/2)) (DJN, module docstring). :meth:`take` removes the
    value it returns, and :meth:`take` on an empty pool computes a new one on the spot,
    so no value is ever used for two ciphertexts.

    Parameters
    ----------
    public_key
        The key the values are for.
    size
        Values to precompute now (or, with ``background=True``, the level a background
        thread keeps the pool topped up to).
    background
        Start a daemon thread that refills the pool to ``size`` whenever values are
        taken. Its exponentiations run in ``gmpy2.powmod_base_list``, which releases the
        GIL, so it uses an otherwise idle core: with the second core of the 2-core
        development VM idle, two such threads took 4.3-4.5 ms per 2048-bit value against
        8.5 ms on one; with that core busy, nothing was gained (module docstring). Call
        :meth:`close` (or use ``with``) to stop it.
    private_key
        Optional matching private key: values are then computed by CRT modulo p² and q²
        (≈ 2.7× faster at 2048 bits, same values; see the module docstring). Together
        with ``djn_base`` it is not used for computing (the DJN table is faster still)
        but to check that ``djn_base`` is an n-th residue (:func:`check_djn_base`).
    djn_base
        Optional DJN base h_s of ``public_key`` (from :func:`generate_djn_keypair`): the
        values are then h_s^α mod n², computed by a :class:`FixedBaseEngine` with its
        fixed-base table (built on first use, ≈ 0.2 s and 16 MiB at 2048 bits, in the
        background thread if there is one), ≈ 12× faster than r^n at 2048 bits. The
        ciphertexts are ordinary Paillier ciphertexts (:func:`decrypt` is unchanged).
        Background pools: the table's multiplications hold the GIL (a few µs each, so
        the caller's thread is not blocked for long, but it shares one core's worth of
        Python with the pool while the pool fills).

    Examples
    --------
    >>> pk, sk = generate_keypair(1024)
    >>> with RandomnessPool(pk, 4, private_key=sk) as pool:
    ...     blob = encrypt_vector(pk, [0.5, -1.25], packing_spec(1024), pool=pool)
    >>> pk, sk, hs = generate_djn_keypair(1024)
    >>> with RandomnessPool(pk, 4, djn_base=hs) as pool:
    ...     blob = encrypt_vector(pk, [0.5, -1.25], packing_spec(1024), pool=pool)
    """

    def __init__(
        self,
        public_key: paillier.PaillierPublicKey,
        size: int = 0,
        *,
        background: bool = False,
        private_key: paillier.PaillierPrivateKey | None = None,
        djn_base: int | None = None,
    ) -> None:
        owner = "RandomnessPool"
        n, _ = _modulus(public_key, owner)
        size = check_int(size, "size", owner, low=0)
        if not isinstance(background, bool):
            raise invalid_parameter("background", owner, "a bool", describe(background))
        if background and size < 1:
            raise invalid_parameter("size", owner, "an int >= 1 when background=True", size)
        if private_key is not None:
            _check_private_key(private_key, owner)
            if int(private_key.public_key.n) != int(n):
                raise ValidationError("RandomnessPool: private_key does not match public_key")
        engine: _Engine
        if djn_base is not None:
            check_djn_base(public_key, djn_base, owner, private_key=private_key)
            engine = FixedBaseEngine(public_key, djn_base)
        else:
            engine = _RnEngine(n, private_key)
        self.public_key = public_key
        self._state = _PoolState(engine, size)
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(
                target=self._state.run, name="islands-paillier-pool", daemon=True
            )
            self._thread.start()
            self._finalizer = weakref.finalize(self, self._state.close)
        elif size:
            self.fill(size)

    @property
    def n(self) -> Any:
        """The modulus n the values belong to."""
        return self._state.engine.n

    def fill(self, count: int) -> None:
        """Compute ``count`` more values (in the calling thread) and add them."""
        count = check_int(count, "count", "RandomnessPool.fill", low=0)
        batch = self._state.engine.compute(count)
        with self._state.cond:
            self._state.items.extend(batch)

    @property
    def djn(self) -> bool:
        """Whether the values are DJN factors h_s^α (``djn_base`` was given)."""
        return isinstance(self._state.engine, FixedBaseEngine)

    def take(self) -> Any:
        """Remove and return one r^n (or h_s^α) mod n², computed now if the pool is empty."""
        return self._take(1)[0]

    def _take(self, count: int) -> list[Any]:
        state = self._state
        with state.cond:
            got = [state.items.popleft() for _ in range(min(count, len(state.items)))]
            if got:
                state.cond.notify_all()
        return got + state.engine.compute(count - len(got))

    def __len__(self) -> int:
        return len(self._state.items)

    def close(self) -> None:
        """Stop the background thread (if any) and wait for it; values stay usable."""
        self._state.close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> RandomnessPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------
# encryption, addition, decryption
# --------------------------------------------------------------------------------------


def _check_ciphertexts(values: Any, n2: Any, name: str, owner: str) -> list[Any]:
    if isinstance(values, (str, bytes, bytearray)) or not isinstance(values, Sequence):
        raise invalid_parameter(name, owner, "a sequence of ints", describe(values))
    out = []
    for i, c in enumerate(values):
        v = _as_mpz(c)
        if v is None or not 0 < v < n2:
            raise ValidationError(
                f"{owner}: {name}[{i}] is not a ciphertext: it must be an int in (0, n**2)"
            )
        out.append(v)
    return out


def encrypt(
    public_key: paillier.PaillierPublicKey,
    plaintexts: Sequence[int],
    *,
    pool: RandomnessPool | None = None,
) -> list[Any]:
    """Encrypt integers: c = (1 + n·m) · r^n mod n² (g = n + 1).

    Parameters
    ----------
    public_key
        The Paillier public key.
    plaintexts
        Integers m with 0 ≤ m < n (e.g. from :func:`pack`).
    pool
        Precomputed r^n values for this key; each is used once. Without a pool (or once
        it runs dry) r^n is computed on the spot. A pool built with ``djn_base`` supplies
        h_s^α instead of r^n (DJN, module docstring), computed on the spot by its table
        once it runs dry: ``encrypt(pk, ms, pool=RandomnessPool(pk, djn_base=hs))`` is
        DJN encryption.

    Returns
    -------
    list of gmpy2.mpz
        One ciphertext per plaintext.
    """
    owner = "encrypt"
    n, n2 = _modulus(public_key, owner)
    if isinstance(plaintexts, (str, bytes, bytearray)) or not isinstance(plaintexts, Sequence):
        raise invalid_parameter("plaintexts", owner, "a sequence of ints", describe(plaintexts))
    ms = []
    for i, m in enumerate(plaintexts):
        v = _as_mpz(m)
        if v is None or not 0 <= v < n:
            raise ValidationError(f"encrypt: plaintexts[{i}] must be an int in [0, n)")
        ms.append(v)
    if pool is None:
        rns = _RnEngine(n, None).compute(len(ms))
    else:
        if not isinstance(pool, RandomnessPool):
            raise invalid_parameter("pool", owner, "a RandomnessPool or None", describe(pool))
        if pool.n != n:
            raise ValidationError("encrypt: pool was built for another public key")
        rns = pool._take(len(ms))
    return [(n * m + 1) * rn % n2 for m, rn in zip(ms, rns, strict=True)]


def add(public_key: paillier.PaillierPublicKey, a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """Homomorphic addition: elementwise a_i · b_i mod n² encrypts m_a,i + m_b,i mod n."""
    owner = "add"
    _, n2 = _modulus(public_key, owner)
    ca = _check_ciphertexts(a, n2, "a", owner)
    cb = _check_ciphertexts(b, n2, "b", owner)
    if len(ca) != len(cb):
        raise ValidationError(f"add: a has {len(ca)} ciphertexts but b has {len(cb)}")
    return [x * y % n2 for x, y in zip(ca, cb, strict=True)]


def decrypt(private_key: paillier.PaillierPrivateKey, ciphertexts: Sequence[Any]) -> list[int]:
    """Decrypt by CRT: m mod p and m mod q from half-size exponentiations, recombined.

    m_p = L_p(c^(p-1) mod p²)·h_p mod p with L_p(x) = (x - 1)/p and h_p the inverse of
    L_p(g^(p-1) mod p²) (phe's precomputed ``hp``), likewise for q; then
    m = m_p + p·((m_q - m_p)·p^-1 mod q) ([1]_ §7).

    Raises
    ------
    ValidationError
        If a ciphertext is not an int in (0, n²) or shares a factor with n.
    """
    owner = "decrypt"
    _check_private_key(private_key, owner)
    n, n2 = _modulus(private_key.public_key, owner)
    cs = _check_ciphertexts(ciphertexts, n2, "ciphertexts", owner)
    for i, c in enumerate(cs):
        if gmpy2.gcd(c, n) != 1:
            raise ValidationError(f"decrypt: ciphertexts[{i}] is not a unit modulo n")
    if not cs:
        return []
    p, q = gmpy2.mpz(private_key.p), gmpy2.mpz(private_key.q)
    p2, q2 = p * p, q * q
    hp, hq = gmpy2.mpz(private_key.hp), gmpy2.mpz(private_key.hq)
    p_inv = gmpy2.mpz(private_key.p_inverse)
    xp = gmpy2.powmod_base_list([c % p2 for c in cs], p - 1, p2)
    xq = gmpy2.powmod_base_list([c % q2 for c in cs], q - 1, q2)
    out = []
    for a, b in zip(xp, xq, strict=True):
        mp = (a - 1) // p * hp % p
        mq = (b - 1) // q * hq % q
        out.append(int(mp + p * ((mq - mp) * p_inv % q)))
    return out


# --------------------------------------------------------------------------------------
# bytes
# --------------------------------------------------------------------------------------


def _ciphertext_width(n: Any) -> int:
    return 2 * _key_bytes(n)


def ciphertexts_to_bytes(
    public_key: paillier.PaillierPublicKey, ciphertexts: Sequence[Any]
) -> bytes:
    """Serialise ciphertexts: 2·ceil(bits/8) bytes each, big-endian, concatenated."""
    owner = "ciphertexts_to_bytes"
    n, n2 = _modulus(public_key, owner)
    width = _ciphertext_width(n)
    cs = _check_ciphertexts(ciphertexts, n2, "ciphertexts", owner)
    return b"".join(c.to_bytes(width, "big") for c in cs)


def ciphertexts_from_bytes(
    public_key: paillier.PaillierPublicKey, data: bytes | bytearray | memoryview
) -> list[Any]:
    """Parse :func:`ciphertexts_to_bytes` output.

    Raises
    ------
    ValidationError
        If the length is not a multiple of the ciphertext width or a value is not in
        (0, n²).
    """
    owner = "ciphertexts_from_bytes"
    n, n2 = _modulus(public_key, owner)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise invalid_parameter("data", owner, "bytes", describe(data))
    view = memoryview(data).cast("B")
    width = _ciphertext_width(n)
    if len(view) % width:
        raise ValidationError(
            f"{owner}: {len(view)} bytes is not a multiple of the {width}-byte ciphertext "
            "width of this key"
        )
    out = []
    for i in range(len(view) // width):
        c = gmpy2.mpz.from_bytes(view[i * width : (i + 1) * width], "big")
        if not 0 < c < n2:
            raise ValidationError(f"{owner}: ciphertext {i} is not in (0, n**2)")
        out.append(c)
    return out


# --------------------------------------------------------------------------------------
# vector helpers: blob = fingerprint(public_key) || ciphertexts_to_bytes(...)
# --------------------------------------------------------------------------------------


def _split_blob(public_key: Any, blob: Any, owner: str, name: str) -> list[Any]:
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise invalid_parameter(name, owner, "bytes from encrypt_vector", describe(blob))
    raw = memoryview(blob).cast("B")
    if len(raw) < FINGERPRINT_BYTES:
        raise ValidationError(f"{owner}: {name} is too short to hold a key fingerprint")
    if bytes(raw[:FINGERPRINT_BYTES]) != fingerprint(public_key):
        raise ValidationError(
            f"{owner}: {name} was encrypted under another public key (fingerprint mismatch)"
        )
    return ciphertexts_from_bytes(public_key, raw[FINGERPRINT_BYTES:])


def _check_spec_fits(public_key: Any, spec: PackingSpec, owner: str) -> None:
    bits = int(public_key.n).bit_length()
    if spec.key_bits > bits:
        raise ValidationError(
            f"{owner}: spec is for {spec.key_bits}-bit keys but n has {bits} bits; packed "
            "sums could wrap modulo n"
        )


def encrypt_vector(
    public_key: paillier.PaillierPublicKey,
    values: ArrayLike,
    spec: PackingSpec,
    *,
    pool: RandomnessPool | None = None,
) -> bytes:
    """Pack, encrypt and serialise a real vector.

    Returns
    -------
    bytes
        ``fingerprint(public_key)`` (32 bytes) followed by
        ``spec.ciphertexts_for(len(values))`` ciphertexts of 2·ceil(bits/8) bytes.
    """
    owner = "encrypt_vector"
    _modulus(public_key, owner)
    spec = _check_spec(spec, owner)
    _check_spec_fits(public_key, spec, owner)
    return encrypt_blob(public_key, pack(values, spec), pool=pool)


def encrypt_blob(
    public_key: paillier.PaillierPublicKey,
    plaintexts: Sequence[int],
    *,
    pool: RandomnessPool | None = None,
) -> bytes:
    """Encrypt integers in [0, n) and serialise them as a blob (fingerprint, ciphertexts)."""
    ciphertexts = encrypt(public_key, plaintexts, pool=pool)
    return fingerprint(public_key) + ciphertexts_to_bytes(public_key, ciphertexts)


def decrypt_blob(private_key: paillier.PaillierPrivateKey, blob: bytes, count: int) -> list[int]:
    """Check a blob's key fingerprint and that it holds ``count`` ciphertexts; decrypt them.

    Raises
    ------
    ValidationError
        If ``blob`` was made under another key, is malformed or holds another count.
    """
    owner = "decrypt_blob"
    _check_private_key(private_key, owner)
    count = check_int(count, "count", owner, low=0)
    ciphertexts = _split_blob(private_key.public_key, blob, owner, "blob")
    if len(ciphertexts) != count:
        raise ValidationError(f"{owner}: blob holds {len(ciphertexts)} ciphertexts, "
                              f"expected {count}")
    return decrypt(private_key, ciphertexts)


def sum_encrypted(public_key: paillier.PaillierPublicKey, blobs: Sequence[bytes]) -> bytes:
    """Homomorphically add several :func:`encrypt_vector` outputs (same key and length).

    The result decrypts, with ``terms=len(blobs)``, to the sum of the packed vectors.
    """
    owner = "sum_encrypted"
    _, n2 = _modulus(public_key, owner)
    if isinstance(blobs, (bytes, bytearray)) or not isinstance(blobs, Sequence) or not blobs:
        raise invalid_parameter("blobs", owner, "a non-empty sequence of bytes", describe(blobs))
    total = _split_blob(public_key, blobs[0], owner, "blobs[0]")
    for i in range(1, len(blobs)):
        cs = _split_blob(public_key, blobs[i], owner, f"blobs[{i}]")
        if len(cs) != len(total):
            raise ValidationError(
                f"{owner}: blobs[{i}] holds {len(cs)} ciphertexts, blobs[0] {len(total)}"
            )
        total = [x * y % n2 for x, y in zip(total, cs, strict=True)]
    return fingerprint(public_key) + ciphertexts_to_bytes(public_key, total)


def decrypt_vector(
    private_key: paillier.PaillierPrivateKey,
    blob: bytes,
    length: int,
    spec: PackingSpec,
    *,
    terms: int,
) -> NDArray[np.float64]:
    """Check the key fingerprint, decrypt and unpack a (summed) vector blob.

    Parameters
    ----------
    private_key
        The private key.
    blob
        An :func:`encrypt_vector` or :func:`sum_encrypted` output.
    length
        Number of values in the vector.
    spec
        The packing layout every term used.
    terms
        How many vectors were summed into ``blob`` (1 for a single encryption).

    Raises
    ------
    ValidationError
        If ``blob`` was made under another key, is malformed, holds the wrong number of
        ciphertexts for ``length``, or decodes to slots outside the range of ``terms``
        packed values.
    """
    owner = "decrypt_vector"
    _check_private_key(private_key, owner)
    spec = _check_spec(spec, owner)
    public_key = private_key.public_key
    _check_spec_fits(public_key, spec, owner)
    length = check_int(length, "length", owner, low=0)
    ciphertexts = _split_blob(public_key, blob, owner, "blob")
    if len(ciphertexts) != spec.ciphertexts_for(length):
        raise ValidationError(
            f"{owner}: blob holds {len(ciphertexts)} ciphertexts but {length} values need "
            f"{spec.ciphertexts_for(length)}"
        )
    return unpack(decrypt(private_key, ciphertexts), length, spec, terms=terms)
