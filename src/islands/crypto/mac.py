r"""Linear MACs that bind a homomorphic aggregate to the uploads it sums.

Horizontal FL's CKKS and Paillier/OU aggregation (:mod:`islands.aggregation.homomorphic`)
give the server only the public key: it adds ciphertexts it cannot read. Nothing in the
encryption stops it from sending back another combination than the honest sum — one
client's upload, a splice of several, a slot-wise mask, an old round — which every
client would decrypt, train on and evaluate. The clients share a key the server never
holds, so each upload carries a tag, a linear function of the upload under that key;
the server's combination acts on tags and values alike, and a client refuses an
aggregate whose decrypted tag is not the tag of the honest sum of the claimed uploads.
No maintained library offers MACs that survive homomorphic addition (SPDZ-style linear
MACs exist only inside MPC engines), so this module writes the two constructions out;
the randomness comes from :func:`islands.crypto.prg.expand` (ChaCha20 under HKDF).

**Exact: Paillier and Okamoto–Uchiyama** (:func:`modular_tag`, :func:`modular_expected`).
The plaintexts are integers modulo P (Paillier: P = n; OU: P = p, the secret prime the
clients hold), and everything the server can compute from ciphertexts and the public key
is a combination Σ e·c + Enc(E) whose plaintext is a Z_P-linear combination of the
uploads' plaintexts plus values it knows. Client k of round r with packed plaintexts
M_{k,1..C} and weight code w_k (:func:`weight_code`, never 0) sends in one more
ciphertext

    T_k = Σ_c a^(C+1-c)·M_{k,c} + w_k·β_k  (mod P),

a polynomial MAC at a secret point a (uniform in Z_P, one per round and count C) with a
one-time pad β_k (uniform in Z_P, per round, client, weight, attempt and, under
distributed DP, the t its noise was calibrated for; one upload per round). A client
accepts an aggregate with plaintexts M', tag T' and claimed contributors S only if
T' ≡ Σ_c a^(C+1-c)·M'_c + Σ_{j∈S} w_j·β_j (mod P). A forged aggregate makes T' −
(that) a non-zero polynomial of degree at most C + 1 in the secret variables (a, and the
tags T_j, which are uniform over at least P/2 residues and independent of a), also when
the server moves a tag ciphertext into a model position, so by the Schwartz–Zippel lemma
[1]_ it vanishes with probability at most 2(C + 1)/P: below 2^-600 for every key islands
accepts. (β depends on the weight: with a pad alone, client k's whole upload times e =
w'_k/w_k mod P, claimed at weight w'_k, would satisfy the equation identically; under
Paillier the server can compute e, and only unpacking's range check refused the result.)
It is zero only for the exact sum of the claimed uploads with the weights each client was
given, in this round. (For Paillier the lemma is applied modulo a prime factor of n; a
forgery that agrees with the honest sum modulo that factor only would reveal the factor.)
OU's encryption takes only |m| ≤ its plaintext bound, between P/4 and P/2, so a client
draws β_k again (``counter`` = 0, 1, …) until T_k has a representative in range; the
counter travels in the clear and is independent of every secret (each attempt's T_k is
uniform), and the verifier derives β from it.

**Approximate: CKKS** (:func:`real_tags`, :func:`real_deviation`). CKKS decrypts to about
2^-(scale−10), so the MAC is over the reals and checked to a tolerance. The values are cut
into blocks of :data:`BLOCK` (the last may be shorter, m values); for each block the
upload of client k, given weight p_k, carries :data:`TAG_SLOTS` tags t_j = α_j·x/√m +
β_{k,j}/p_k with α_j ∈ [-1, 1)^m secret per round and length n, and β_{k,j} ∈ [-1, 1) per
round, length, client and weight. The server multiplies each upload by the claimed weight
p̃_k (p_k as CKKS encodes it at 2^scale), so the honest sum's tags carry the pads Σ_k
(p̃_k/p_k)·β_{k,j}: a claimed contributor weighs one unit of pad whatever its weight, and
is missing from the tags, summed with another weight than it was given, or claimed at
another weight (another β), by a whole β. A client accepts when every tag is within τ·P of
the claimed sum's, P = Σ p_k the claimed weights, i.e. within τ on the scale of the model
it uses (Σ p_k·x_k / P); weights below :data:`MIN_WEIGHT` are refused (their pads would
vanish in the encoding).

Without Galois keys (islands never gives the server any) the server can only combine
uploads slot by slot (a plaintext polynomial multiplies each complex slot by a number;
the clients' values are real) and move whole chunks (their headers are its to write,
which is why n is in the labels). Per tag j, (tag − expected)/P is then a linear form in
the independent uniforms α_{j,i} and β_{k,j}; if the forgery moves value i of the model
by δ, the coefficient of α_{j,i} is at least δ/(2√m) or that of some β_{k,j} at least
δ/(2X), X = Σ_k p_k·|x_{k,i}| ≤ max_k |x_{k,i}| when Σ p_k ≤ 1 (the server may scale
one client's values and tags alike: then only its pad sees it). Each tag lands within τ with
probability at most 2τ·max(√m, X)/δ, independently over the 16 tags:
(2τ·max(√m, X)/δ)^16, below 10^-20 for δ ≥ 10^-4 with |x| ≤ 32 at the defaults
(τ = 2^-24, m = 1024), and (2τ·|x|/δ)^16 beyond: a relative change of 10^-6 of values
near 8,000 passes with probability below 10^-14, one of 10^-7 may pass. An
honest aggregate is off by the encryption noise times the weights (about 10^-9·P, far
inside τ·P): the clients replay the server's encoding of the weights.

**Both.** A client uploads once per round, never for a round whose aggregate it opened:
two uploads under the same pads would let any combination of the two whose coefficients
sum to 1 pass as its upload. What stays the server's (the weights it gives, the uploads it
leaves out) is stated in :mod:`islands.aggregation.homomorphic`.

References
----------
.. [1] J. T. Schwartz, "Fast probabilistic algorithms for verification of polynomial
   identities", J. ACM 27(4), 1980; R. Zippel, EUROSAM 1979.
.. [2] I. Damgård, V. Pastro, N. Smart, S. Zakarias, "Multiparty Computation from
   Somewhat Homomorphic Encryption" (SPDZ), CRYPTO 2012: linear MACs under a shared key.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import struct
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from islands.crypto.prg import expand
from islands.errors import ValidationError

__all__ = [
    "BLOCK",
    "MAX_COUNTER",
    "MIN_WEIGHT",
    "TAG_SLOTS",
    "derive_key",
    "modular_expected",
    "modular_tag",
    "real_deviation",
    "real_tag_count",
    "real_tags",
    "weight_code",
]

TAG_SLOTS = 16
"""Tags per block of a CKKS upload."""

BLOCK = 1024
"""Values per block of a CKKS upload's MAC (the last block may be shorter)."""

MAX_COUNTER = 128
"""Attempts at an OU tag in range; each succeeds with probability ≥ 1/2."""

MIN_WEIGHT = 2.0**-16
"""Smallest weight a CKKS upload is made with or an aggregate may claim (module docstring)."""

_EXTRA_BITS = 128  # a uniform value mod P from bits(P) + 128 bits: within 2^-128


def derive_key(secret: bytes, purpose: str) -> bytes:
    """Return the MAC key for ``purpose`` from a secret the server never holds."""
    label = b"islands aggregate mac v2\x00" + purpose.encode("utf-8")
    return hmac.new(secret, label, hashlib.sha256).digest()


def _label(kind: bytes, round: int, *fields: int | str) -> bytes:
    out = kind + b"\x00" + round.to_bytes(8, "big")
    for f in fields:  # fixed width ints; a client's name goes last (so labels stay injective)
        out += f.to_bytes(8, "big") if isinstance(f, int) else f.encode("utf-8")
    return out


def _code_field(code: int) -> str:
    """Return a weight code (< 2^65) as a label field of fixed width, 18 hex digits."""
    return code.to_bytes(9, "big").hex()


def _check_guaranteed(guaranteed: int) -> int:
    if (isinstance(guaranteed, bool) or not isinstance(guaranteed, int)
            or not 0 <= guaranteed < 2**32):
        raise ValidationError(f"MAC guaranteed must be an int in [0, 2^32), got {guaranteed!r}")
    return guaranteed


def _check_round(round: int) -> int:
    if isinstance(round, bool) or not isinstance(round, int) or not 0 <= round < 2**63:
        raise ValidationError(f"MAC round must be an int in [0, 2^63), got {round!r}")
    return round


def _check_weight(weight: float) -> float:
    p = float(weight)
    if not math.isfinite(p) or not MIN_WEIGHT <= p <= 1.0:
        raise ValidationError(f"a CKKS MAC weight must be in [{MIN_WEIGHT:g}, 1], got {p!r}")
    return p


# --------------------------------------------------------------------------- CKKS
def real_tag_count(n: int) -> int:
    """Return how many tags a vector of ``n`` values carries: 16 per block."""
    return TAG_SLOTS * -(-int(n) // BLOCK)


def _uniform(key: bytes, n: int, label: bytes) -> NDArray[np.float64]:
    """``n`` values uniform in [-1, 1) (53 bits each) from the keyed stream."""
    bits = expand(key, n, label=label) >> np.uint64(11)
    out: NDArray[np.float64] = bits.astype(np.float64) * 2.0**-52 - 1.0
    return out


def _blocks(n: int) -> list[tuple[int, int]]:
    return [(b, min(b + BLOCK, n)) for b in range(0, n, BLOCK)]


def _alpha_dot(key: bytes, round: int, n: int, b: int,
               block: NDArray[np.float64]) -> NDArray[np.float64]:
    m = block.size
    alpha = _uniform(key, TAG_SLOTS * m, _label(b"alpha", round, n, b)).reshape(TAG_SLOTS, m)
    out: NDArray[np.float64] = alpha @ block / math.sqrt(m)
    return out


def _betas(key: bytes, round: int, client: str, n: int, weight: float,
           guaranteed: int) -> NDArray[np.float64]:
    """``client``'s pads β for every block of ``n`` values given ``weight``, a row a block."""
    blocks = -(-n // BLOCK)
    label = _label(b"beta", round, n, guaranteed, _code_field(weight_code(weight)), client)
    return _uniform(key, TAG_SLOTS * blocks, label).reshape(blocks, TAG_SLOTS)


def real_tags(key: bytes, round: int, client: str, values: NDArray[np.float64],
              weight: float, *, guaranteed: int = 0) -> NDArray[np.float64]:
    """Return ``client``'s tags of ``values`` for ``round``: 16 per block, block after block.

    Each tag is α_j·x/√m + β_j/p: the pad is divided by the weight p the client was
    given, so that the server's product by p restores it to β_j (module docstring).

    Parameters
    ----------
    key
        The MAC key (:func:`derive_key`).
    round
        The round the upload belongs to.
    client
        The uploading client's name.
    values
        The upload's values (float64, 1-D); each tag is at most √m·max|x| + 1/p in size.
    weight
        The weight p the client was given, at least :data:`MIN_WEIGHT`.
    guaranteed
        Under distributed DP, the t the client's noise was calibrated for (0 without):
        in the pads' labels, so an aggregate claimed for another t does not verify.
    """
    round = _check_round(round)
    p = _check_weight(weight)
    x = np.asarray(values, dtype=np.float64)
    out = _betas(key, round, client, x.size, p, _check_guaranteed(guaranteed)) / p
    for i, (lo, hi) in enumerate(_blocks(x.size)):
        out[i] += _alpha_dot(key, round, x.size, lo, x[lo:hi])
    return out.reshape(-1)


def real_deviation(key: bytes, round: int, contributors: Sequence[str],
                   weights: Sequence[float] | NDArray[np.float64],
                   values: NDArray[np.float64], tags: NDArray[np.float64],
                   applied: Sequence[float] | NDArray[np.float64] | None = None, *,
                   guaranteed: int = 0) -> float:
    """Return max |tags − tags of the claimed weighted sum| over every tag of ``values``.

    ``values`` and ``tags`` are a decrypted aggregate: Σ_k p̃_k·x_k and Σ_k p̃_k·t_k for the
    honest sum over ``contributors`` given ``weights`` p_k, which the server multiplied
    by ``applied`` p̃_k (the p_k as CKKS encodes them; default: p_k exactly). Client k's
    pad enters as (p̃_k/p_k)·β_k. The caller compares the result with its tolerance
    (module docstring).
    """
    round = _check_round(round)
    x = np.asarray(values, dtype=np.float64)
    t = np.asarray(tags, dtype=np.float64)
    if t.shape != (real_tag_count(x.size),):
        raise ValidationError(f"expected {real_tag_count(x.size)} tags for {x.size} values, "
                              f"got {t.shape}")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(contributors),) or not np.all(w >= MIN_WEIGHT):
        raise ValidationError(f"expected one weight >= {MIN_WEIGHT:g} per contributor")
    ratio = np.ones_like(w) if applied is None else np.asarray(applied, np.float64) / w
    noise_for = _check_guaranteed(guaranteed)
    pads = sum((r * _betas(key, round, c, x.size, float(wk), noise_for)
                for r, wk, c in zip(ratio, w, contributors, strict=True)),
               np.zeros((len(_blocks(x.size)), TAG_SLOTS)))
    worst = 0.0
    for i, (lo, hi) in enumerate(_blocks(x.size)):
        want = _alpha_dot(key, round, x.size, lo, x[lo:hi]) + pads[i]
        off = float(np.max(np.abs(t[i * TAG_SLOTS:(i + 1) * TAG_SLOTS] - want)))
        if not np.isfinite(off):
            return math.inf
        worst = max(worst, off)
    return worst


# --------------------------------------------------------------------------- Paillier, OU
def weight_code(weight: float) -> int:
    """Return a non-zero integer below 2^65 naming ``weight`` exactly (its float64 bits)."""
    return int.from_bytes(struct.pack("<d", float(weight)), "little") | (1 << 64)


def _mod_uniform(key: bytes, label: bytes, modulus: int) -> int:
    words = -(-(int(modulus).bit_length() + _EXTRA_BITS) // 64)
    raw = expand(key, words, label=label).tobytes()
    return int.from_bytes(raw, "little") % int(modulus)


def _point(key: bytes, round: int, count: int, modulus: int) -> int:
    return _mod_uniform(key, _label(b"point", round, count), modulus)


def _pad(key: bytes, round: int, client: str, counter: int, code: int, guaranteed: int,
         modulus: int) -> int:
    label = _label(b"pad", round, counter, guaranteed, _code_field(code), client)
    return _mod_uniform(key, label, modulus)


def _polynomial(point: int, plaintexts: Sequence[int], modulus: int) -> int:
    """Σ_c point^(C+1-c)·M_c mod P for c = 1..C (Horner)."""
    import gmpy2  # here, so that importing islands stays light (tests/test_package.py)

    a, P = gmpy2.mpz(point), gmpy2.mpz(modulus)
    h = gmpy2.mpz(0)
    for m in plaintexts:
        h = (h + m) * a % P
    return int(h)


def modular_tag(key: bytes, round: int, client: str, weight: float,
                plaintexts: Sequence[int], modulus: int,
                represent: Callable[[int], int | None], *,
                guaranteed: int = 0) -> tuple[int, int]:
    """Return ``client``'s tag of its packed ``plaintexts`` for ``round``, and its counter.

    Parameters
    ----------
    key
        The MAC key (:func:`derive_key`).
    round, client, weight
        The upload's round, the client's name and the weight it was given.
    plaintexts
        The upload's packed plaintexts, in order (as encrypted).
    modulus
        P: n for Paillier, the secret prime p for OU.
    represent
        Maps a residue modulo P to the integer the engine encrypts, or None if the
        engine cannot encrypt it (OU's bound): then the next counter is tried.
    guaranteed
        Under distributed DP, the t the client's noise was calibrated for (0 without),
        in the pad's label.

    Raises
    ------
    ValidationError
        If no attempt of :data:`MAX_COUNTER` gives an encryptable tag (probability
        below 2^-128 with OU's bound ≥ P/4).
    """
    round = _check_round(round)
    t = _check_guaranteed(guaranteed)
    base = _polynomial(_point(key, round, len(plaintexts), modulus), plaintexts, modulus)
    w = weight_code(weight)
    for counter in range(MAX_COUNTER):
        value = represent((base + w * _pad(key, round, client, counter, w, t, modulus))
                          % modulus)
        if value is not None:
            return value, counter
    raise ValidationError(f"no tag in the engine's plaintext range after {MAX_COUNTER} "
                          "attempts (the key's plaintext bound is below P/4?)")


def modular_expected(key: bytes, round: int, contributors: Sequence[str],
                     weights: Sequence[float], counters: Sequence[int],
                     plaintexts: Sequence[int], modulus: int, *, guaranteed: int = 0) -> int:
    """Return, mod P, the tag an honest sum of the claimed uploads decrypts to."""
    round = _check_round(round)
    t = _check_guaranteed(guaranteed)
    total = _polynomial(_point(key, round, len(plaintexts), modulus), plaintexts, modulus)
    for c, w, k in zip(contributors, weights, counters, strict=True):
        code = weight_code(w)
        total += code * _pad(key, round, c, int(k), code, t, modulus)
    return total % int(modulus)
