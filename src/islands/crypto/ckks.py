"""CKKS over TenSEAL for federated averaging: the server sums ciphertexts it cannot read.

APFL [1]_ (§3.1) protects model uploads with CKKS [2]_: the clients share one CKKS key
pair that the server never sees; each uploads ``Enc(w_k)``; the server holds only the
public context (parameters and public key, no secret key) and computes
``Σ_k p_k · Enc(w_k)`` on ciphertexts; the clients decrypt the result. This module is
the thin layer that does that quickly and refuses the usual mistakes::

    ctx = make_context()                         # key dealer (a client)
    secret = secret_context_bytes(ctx)           # -> the other clients, never the server
    public = public_context_bytes(ctx)           # -> the server
    chunks = encrypt_vector(ctx, w)              # each client, every round
    agg = EncryptedSum(load_context(public, secret=False), len(w))   # server
    agg.add(chunks, weight=n_k / n)              # once per client
    mean = decrypt_vector(ctx, agg.result(), len(w))                  # each client

Wire format. :func:`encrypt_vector` cuts a vector into ``ceil(len / slots)`` chunks of
``slots = N/2`` values, one CKKS ciphertext each, and prefixes every serialised
ciphertext with a 54-byte header: magic ``b"ISCK"``, version, kind (client upload or
aggregate), the 32-byte key :func:`fingerprint`, the chunk's index, the chunk count and
the vector length. SEAL ciphertexts do not identify their key (only the parameter set),
so without the fingerprint a ciphertext under another key would be summed silently into
garbage; with it :meth:`EncryptedSum.add` raises ``... was encrypted under another key``.
The header is not authenticated: it catches mistakes (a stale or foreign context, chunks
out of order, a vector of the wrong length), not a malicious client, who can always
upload a well-formed encryption of garbage.

Parameters (:class:`CKKSParams`): ``N = 8192``, coefficient modulus primes of
``(60, 40, 60)`` bits, scale ``2^40``. The last prime is SEAL's special prime (used only
to cut the noise of public-key encryption here); the data modulus is the first two,
100 bits. **The weighted sum is never rescaled.** Multiplying a ciphertext at scale
``2^40`` by the plaintext scalar ``p_k`` (encoded at ``2^40``) gives scale ``2^80``, and
every product has that same scale, so they add; the result decrypts at ``2^80`` while
``|Σ p_k w_k| < 2^(100 − 80 − 2) = 262,144`` (:attr:`CKKSParams.max_abs_sum`). This
costs no level, so one data prime fewer than the usual ``(60, 40, 40, 60)``, and avoids
an accuracy trap: TenSEAL's automatic rescale divides by the 40-bit prime
``q = 1,099,511,480,321`` but then *overwrites* the scale with the nominal ``2^40``, a
relative error of ``1 − q/2^40 = 1.3e-7`` on every value (6.4e-7 absolute at |w| = 5,
measured), which alone breaks a 1e-6 budget for weights near 10.

Security: SEAL's default table (HomomorphicEncryption.org standard, 128-bit classical
security, ternary secret) allows at most 218 bits of total coefficient modulus at
``N = 8192`` (438 at 16384, 881 at 32768, 109 at 4096); the default uses 160. SEAL
itself refuses parameters above the table when TenSEAL creates the context.

Accuracy (defaults, measured): 54,000 values in [-5, 5] round-trip with max error 7e-10
when a client encrypts (symmetric encryption, see below) and 1e-8 when the public key
does; the weighted mean of 3 clients × 54,000 values in [-10, 10] came back within
5e-10 of the exact ``Σ p_k w_k``, of 100 clients × 8,192 values within 1.2e-10. Fresh
encryption noise is a few hundred units at scale ``2^40``; multiplying by ``p_k``
scales noise and message alike and ``Σ p_k = 1``, so the sum's error stays at the
level of one ciphertext's; the weights themselves are rounded to multiples of
``2^-40`` (an error of at most ``|w|·2^-41``).

Who can read what: the server sees ciphertexts only. Every client holds the one secret
key, so a client that colludes with the server (or leaks the secret context) exposes
every other client's upload; that is the APFL design, not something this module fixes.

Speed. Clients share the secret key, so they encrypt with it (SEAL's symmetric
encryption, a plain RLWE sample: as secure as public-key encryption, about 1.75× faster
and with less noise). TenSEAL only offers that for contexts created *without* a public
key, so :func:`encrypt_vector` derives a private twin of a private context flagged
symmetric (TenSEAL's own serialisation with its ``encryption_type`` field set to 1),
checks once that the original context decrypts what the twin encrypts, and falls back
to public-key encryption if that ever fails. Measured on the development machine
(2-core AMD EPYC VM shared with other jobs, Python 3.11, TenSEAL 0.3.18, best of 5):

=========================  ==========  ==========  ==========
values per client           500         2,000       54,000
=========================  ==========  ==========  ==========
chunks (ciphertexts)        1           1           14
encrypt (one client)        2.3 ms      2.4 ms      35 ms
weighted sum, 3 clients     2.4 ms      2.2 ms      32 ms
decrypt (the sum)           1.3 ms      1.3 ms      19 ms
bytes per client upload     235 kB      235 kB      3.29 MB
=========================  ==========  ==========  ==========

A full round of 3 clients × 54,000 parameters (3 encryptions, the server's weighted
sum, one decryption) takes 0.15–0.17 s (target: 0.3 s). Per ciphertext the server
spends 0.34 ms deserialising (SEAL's zstd decompression), 0.15 ms on ``ct * p_k``
without rescaling, 0.05 ms on ``ct + ct`` and 0.39 ms serialising the result; with
TenSEAL's automatic rescale ``ct * p_k`` costs 0.56 ms. Encrypting with the public key
takes 61–65 ms for 54,000 values. The public context is 364 kB and the secret context
543 kB (neither carries relinearisation or Galois keys: nothing here multiplies two
ciphertexts or rotates); creating a key pair takes 12 ms, loading a context 7 ms, and
the first encryption under a context 12 ms more (the twin). Alternatives measured:
TenSEAL's usual ``(60, 40, 40, 60)`` with rescaling and public-key encryption took
92 ms to encrypt 54,000 values, 4.6 MB per upload and 0.36 s per round (error 6.4e-7,
see above); primes ``(60, 60, 60)`` deserialise faster (round 0.14 s) but upload
3.67 MB; ``N = 16384`` with ``(60, 40, 60)`` took 47 ms to encrypt and 0.21 s per round,
and needs a 16,384-value ciphertext (and a 723 kB public context) even for 500 values.

Threads: TenSEAL 0.3.18 holds the GIL while it encrypts (its bindings never release
it): two encryptions of 54,000 values in two threads took 75 ms against 70 ms one after
the other (90 against 95 ms in another run: no overlap either way). Parallelism across
clients needs processes.

Why hand-written: TenSEAL has no notion of key identity, of a vector longer than one
ciphertext that can be streamed, or of a server that must refuse the secret key; those
checks are the point of this module. The public key is reachable only inside TenSEAL's
protobuf serialisation of the context, so :func:`fingerprint` reads two fields of that
protobuf with a small wire-format reader instead of depending on generated code.

References
----------
.. [1] Zhang Y., et al. "Adaptive privacy-preserving federated learning" (APFL), Acta
   Automatica Sinica, 2023 (in Chinese). §1.1 (CKKS), §3.1 (protection scheme).
.. [2] J. H. Cheon, A. Kim, M. Kim, Y. Song. "Homomorphic Encryption for Arithmetic of
   Approximate Numbers." ASIACRYPT 2017.
.. [3] A. Benaissa, B. Retiat, B. Cebere, A. E. Belfedhal. "TenSEAL: A Library for
   Encrypted Tensor Operations Using Homomorphic Encryption." ICLR 2021 workshop.
.. [4] M. Albrecht et al. "Homomorphic Encryption Standard." HomomorphicEncryption.org,
   2018 (the 128-bit parameter table SEAL enforces).
"""

from __future__ import annotations

import hashlib
import math
import struct
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_int, describe, is_int

if TYPE_CHECKING:
    import tenseal

__all__ = [
    "DEFAULT_PARAMS",
    "FINGERPRINT_BYTES",
    "CKKSParams",
    "EncryptedSum",
    "decrypt_vector",
    "encrypt_vector",
    "fingerprint",
    "load_context",
    "make_context",
    "public_context_bytes",
    "secret_context_bytes",
]

FINGERPRINT_BYTES = 32
"""Length of a key :func:`fingerprint` (SHA-256)."""

# SEAL's default (128-bit classical security) bound on the total coefficient modulus bits
_MAX_COEFF_BITS = {4096: 109, 8192: 218, 16384: 438, 32768: 881}
_MIN_HEADROOM_BITS = 4  # the weighted sum must at least hold magnitudes up to 2^4
_WEIGHT_TOLERANCE = 1e-9  # slack on Σ|p_k| <= 1 for floating-point n_k / n

_MAGIC = b"ISCK"
_VERSION = 1
_KIND_CLIENT = 0  # a fresh encryption from encrypt_vector, scale 2^s
_KIND_SUM = 1  # an EncryptedSum result, scale 2^(2s)
_HEADER = struct.Struct("<4sBB32sIIQ")  # magic, version, kind, fingerprint, index, count, length
_FINGERPRINT_LABEL = b"islands ckks public key v1\x00"


@dataclass(frozen=True)
class CKKSParams:
    """CKKS parameters for encrypted weighted sums without rescaling.

    Parameters
    ----------
    poly_modulus_degree
        Ring dimension N: 4096, 8192, 16384 or 32768. A ciphertext packs N/2 values.
    coeff_mod_bit_sizes
        Bit sizes of the coefficient modulus primes, each in [20, 60]: the data primes
        then SEAL's special prime (last). Their total must respect SEAL's 128-bit
        security table: 109 bits at N = 4096, 218 at 8192, 438 at 16384, 881 at 32768.
    scale_bits
        log2 of the CKKS scale, in [20, 60]; precision is about ``2^-(scale_bits-10)``.
        The weighted sum lives at scale ``2^(2·scale_bits)``, so the data primes need
        at least ``2·scale_bits + 6`` bits in total.

    Raises
    ------
    ValidationError
        If a parameter is outside these constraints.
    """

    poly_modulus_degree: int = 8192
    coeff_mod_bit_sizes: tuple[int, ...] = (60, 40, 60)
    scale_bits: int = 40

    def __post_init__(self) -> None:
        owner = "CKKSParams"
        n = self.poly_modulus_degree
        if not is_int(n) or int(n) not in _MAX_COEFF_BITS:
            raise invalid_parameter(
                "poly_modulus_degree", owner, "one of 4096, 8192, 16384, 32768", describe(n)
            )
        bits = self.coeff_mod_bit_sizes
        if (
            not isinstance(bits, (tuple, list))
            or len(bits) < 2
            or not all(is_int(b) and 20 <= b <= 60 for b in bits)
        ):
            raise invalid_parameter(
                "coeff_mod_bit_sizes",
                owner,
                "a tuple of at least two ints in [20, 60] (data primes, then the special prime)",
                describe(bits),
            )
        bits = tuple(int(b) for b in bits)
        limit = _MAX_COEFF_BITS[int(n)]
        if sum(bits) > limit:
            raise invalid_parameter(
                "coeff_mod_bit_sizes",
                owner,
                f"at most {limit} bits in total for poly_modulus_degree={n} "
                f"(SEAL's 128-bit security table)",
                bits,
            )
        s = self.scale_bits
        if not is_int(s) or not 20 <= s <= 60:
            raise invalid_parameter("scale_bits", owner, "an int in [20, 60]", describe(s))
        data_bits = sum(bits[:-1])
        if data_bits - 2 * int(s) - 2 < _MIN_HEADROOM_BITS:
            raise invalid_parameter(
                "coeff_mod_bit_sizes",
                owner,
                f"data primes (all but the last) of at least 2·scale_bits + 6 = "
                f"{2 * int(s) + 6} bits in total, since weighted sums are kept at scale "
                f"2^{2 * int(s)} without rescaling",
                bits,
            )
        object.__setattr__(self, "poly_modulus_degree", int(n))
        object.__setattr__(self, "coeff_mod_bit_sizes", bits)
        object.__setattr__(self, "scale_bits", int(s))

    @property
    def slots(self) -> int:
        """Values per ciphertext, N/2."""
        return self.poly_modulus_degree // 2

    @property
    def data_bits(self) -> int:
        """Bits of the data modulus (every prime but the special one)."""
        return sum(self.coeff_mod_bit_sizes[:-1])

    @property
    def max_abs_sum(self) -> float:
        """Largest magnitude a value or a weighted sum may reach and still decrypt.

        ``2^(data_bits − 2·scale_bits − 2)``: 262,144 for the defaults. Beyond it a sum
        wraps modulo the data modulus and decrypts to garbage, silently.
        """
        return float(2.0 ** (self.data_bits - 2 * self.scale_bits - 2))


DEFAULT_PARAMS = CKKSParams()
"""The defaults: N = 8192, primes (60, 40, 60), scale 2^40 (see the module docstring)."""


def _tenseal() -> Any:
    """Import TenSEAL lazily, so that ``import islands.crypto`` never needs it."""
    try:
        import tenseal as ts
        import tenseal.sealapi  # registers seal::Modulus, to read the primes' sizes
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "islands.crypto.ckks needs TenSEAL: pip install 'islands[crypto]'"
        ) from exc
    return ts


def _params_of(ctx: Any, owner: str, name: str = "ctx") -> CKKSParams:
    """Check ``ctx`` is a usable TenSEAL CKKS context and return its parameters."""
    ts = _tenseal()
    if not isinstance(ctx, ts.Context):
        raise invalid_parameter(
            name, owner, "a tenseal.Context from make_context or load_context", type(ctx).__name__
        )
    parms = ctx.seal_context().data.key_context_data().parms()
    if parms.scheme() != ts.SCHEME_TYPE.CKKS.value:
        raise ValidationError(f"{owner}: the {name!r} context is not a CKKS context")
    try:
        scale = float(ctx.global_scale)
    except ValueError as exc:
        raise ValidationError(f"{owner}: the {name!r} context has no global scale") from exc
    scale_bits = round(math.log2(scale)) if scale > 0 else 0
    if scale != 2.0**scale_bits:
        raise ValidationError(
            f"{owner}: the {name!r} context's scale {scale!r} is not a power of two"
        )
    try:
        return CKKSParams(
            int(parms.poly_modulus_degree()),
            tuple(int(m.bit_count()) for m in parms.coeff_modulus()),
            scale_bits,
        )
    except ValidationError as exc:
        raise ValidationError(f"{owner}: the {name!r} context is not usable here: {exc}") from exc


def _has_public_key(ctx: Any) -> bool:
    try:
        return bool(ctx.has_public_key())
    except ValueError:  # a context created for symmetric encryption only
        return False


# Per-context derived data: the fingerprint and the symmetric-encryption twin. Keyed on
# the Context object (weakly), so an entry lives exactly as long as the context it came
# from; the twin holds the same secret key as that context, nothing more.
_DERIVED: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def make_context(params: CKKSParams = DEFAULT_PARAMS) -> tenseal.Context:
    """Create a fresh CKKS key pair: the *secret* context, held by clients only.

    Parameters
    ----------
    params
        The parameter set; the defaults suit federated averaging of model weights.

    Returns
    -------
    tenseal.Context
        A private context (secret and public key) with the global scale set to
        ``2^scale_bits`` and automatic rescaling off. Give the other clients
        :func:`secret_context_bytes` and the server :func:`public_context_bytes`.

    Raises
    ------
    ValidationError
        If ``params`` is not a :class:`CKKSParams` or SEAL rejects it.
    """
    if not isinstance(params, CKKSParams):
        raise invalid_parameter("params", "make_context", "a CKKSParams", type(params).__name__)
    ts = _tenseal()
    try:
        ctx = ts.context(
            ts.SCHEME_TYPE.CKKS,
            poly_modulus_degree=params.poly_modulus_degree,
            coeff_mod_bit_sizes=list(params.coeff_mod_bit_sizes),
            n_threads=1,  # TenSEAL's thread pool serves CKKSTensor only; keep it small
        )
    except (ValueError, RuntimeError) as exc:
        raise ValidationError(f"make_context: SEAL rejected {params}: {exc}") from exc
    ctx.global_scale = 2.0**params.scale_bits
    ctx.auto_rescale = False
    return ctx


def public_context_bytes(ctx: tenseal.Context) -> bytes:
    """Serialise the public half of a context: what the server receives.

    Holds the parameters and the public key; no secret key, no relinearisation or
    Galois keys (nothing here needs them). 364 kB for the defaults.

    Raises
    ------
    ValidationError
        If ``ctx`` is not a CKKS context with a public key.
    """
    _params_of(ctx, "public_context_bytes")
    if not _has_public_key(ctx):
        raise ValidationError("public_context_bytes: the context has no public key")
    data: bytes = ctx.serialize(
        save_public_key=True, save_secret_key=False, save_galois_keys=False, save_relin_keys=False
    )
    return data


def secret_context_bytes(ctx: tenseal.Context) -> bytes:
    """Serialise the whole key pair: what the key dealer sends to the other clients.

    Send it over an authenticated, encrypted channel between clients only; anyone who
    holds these bytes decrypts every upload. 544 kB for the defaults.

    Raises
    ------
    ValidationError
        If ``ctx`` holds no secret key.
    """
    _params_of(ctx, "secret_context_bytes")
    if not ctx.is_private():
        raise ValidationError("secret_context_bytes: the context holds no secret key")
    data: bytes = ctx.serialize(
        save_public_key=True, save_secret_key=True, save_galois_keys=False, save_relin_keys=False
    )
    return data


def load_context(data: bytes, *, secret: bool | None = None) -> tenseal.Context:
    """Load a context serialised by :func:`public_context_bytes` or :func:`secret_context_bytes`.

    Parameters
    ----------
    data
        The serialised context.
    secret
        ``True``: require the secret key (a client); ``False``: require its absence
        (the server, which must never hold it); ``None``: accept either.

    Returns
    -------
    tenseal.Context
        A CKKS context with automatic rescaling off.

    Raises
    ------
    ValidationError
        If the bytes are not a CKKS context usable here, or ``secret`` is not met.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise invalid_parameter("data", "load_context", "bytes", type(data).__name__)
    if secret is not None and not isinstance(secret, bool):
        raise invalid_parameter("secret", "load_context", "True, False or None", secret)
    ts = _tenseal()
    try:
        ctx = ts.context_from(bytes(data), n_threads=1)
    except (ValueError, RuntimeError, TypeError) as exc:
        raise ValidationError(
            f"load_context: the bytes are not a serialised TenSEAL context ({exc})"
        ) from exc
    _params_of(ctx, "load_context", "data")
    if not _has_public_key(ctx):
        raise ValidationError(
            "load_context: the context has no public key (islands contexts always carry one)"
        )
    if secret is True and not ctx.is_private():
        raise ValidationError(
            "load_context: expected a secret context (with the secret key), got a public one"
        )
    if secret is False and ctx.is_private():
        raise ValidationError(
            "load_context: expected a public context, but these bytes hold the secret key; "
            "the server must never receive it (send public_context_bytes(ctx) instead)"
        )
    ctx.auto_rescale = False
    return ctx


def _proto_field(buf: bytes, number: int) -> bytes | None:
    """Return the last length-delimited field ``number`` of a protobuf message, or None."""
    found: bytes | None = None
    pos, end = 0, len(buf)

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            if pos >= end or shift > 63:
                raise ValueError("truncated varint")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while pos < end:
        key = varint()
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            varint()
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            size = varint()
            if pos + size > end:
                raise ValueError("truncated field")
            if field == number:
                found = buf[pos : pos + size]
            pos += size
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
    return found


def _derived(ctx: Any) -> dict[str, Any]:
    entry = _DERIVED.get(ctx)
    if entry is None:
        entry = {}
        _DERIVED[ctx] = entry
    return entry


def fingerprint(ctx: tenseal.Context) -> bytes:
    """Identify a key pair: SHA-256 of a label and SEAL's serialisation of the public key.

    The secret context and the public context of one key pair have the same
    fingerprint; contexts of different keys (or different parameters: a SEAL public
    key names its parameter set) have different ones. Every ciphertext chunk carries
    the fingerprint of the context that encrypted it. Cached per context object.

    Returns
    -------
    bytes
        32 bytes.

    Raises
    ------
    ValidationError
        If ``ctx`` is not a CKKS context with a public key.
    """
    _params_of(ctx, "fingerprint")
    entry = _derived(ctx)
    cached = entry.get("fingerprint")
    if cached is not None:
        return bytes(cached)
    if not _has_public_key(ctx):
        raise ValidationError("fingerprint: the context has no public key")
    raw = ctx.serialize(
        save_public_key=True, save_secret_key=False, save_galois_keys=False, save_relin_keys=False
    )
    try:
        public = _proto_field(raw, 2)  # TenSEALContextProto.public_context
        key = _proto_field(public, 1) if public is not None else None  # .public_key
    except ValueError as exc:  # pragma: no cover - TenSEAL wrote it
        raise ValidationError(f"fingerprint: cannot read TenSEAL's serialisation ({exc})") from exc
    if not key:  # pragma: no cover - has_public_key() said there is one
        raise ValidationError("fingerprint: the serialised context carries no public key")
    digest = hashlib.sha256(_FINGERPRINT_LABEL + key).digest()
    entry["fingerprint"] = digest
    return digest


def _encryptor(ts: Any, ctx: Any) -> Any:
    """Pick the context to encrypt with: a symmetric twin of a private ``ctx``, else ``ctx``."""
    if not ctx.is_private():
        return ctx
    entry = _derived(ctx)
    twin = entry.get("twin")
    if twin is False:  # a twin could not be built for this context: public-key encryption
        return ctx
    if twin is not None and twin.global_scale == ctx.global_scale:
        return twin
    raw = ctx.serialize(
        save_public_key=False, save_secret_key=True, save_galois_keys=False, save_relin_keys=False
    )
    entry["twin"] = False  # never ctx itself: a value referring to its weak key never dies
    try:
        # TenSEALContextProto field 4 (encryption_type) = 1 (symmetric); protobuf keeps
        # the last value of a repeated scalar field, so appending it overrides the flag
        candidate = ts.context_from(raw + b"\x20\x01", n_threads=1)
        probe = [0.25, -1.5, 3.0]
        back = ts.ckks_vector_from(ctx, ts.ckks_vector(candidate, probe).serialize()).decrypt()
    except (ValueError, RuntimeError, TypeError):  # pragma: no cover - TenSEAL changed
        return ctx
    if not (candidate.is_private() and np.allclose(back, probe, rtol=0, atol=1e-6)):
        return ctx  # pragma: no cover - TenSEAL changed
    entry["twin"] = candidate
    return candidate


def encrypt_vector(ctx: tenseal.Context, values: ArrayLike) -> list[bytes]:
    """Encrypt a float vector as ``ceil(len / slots)`` serialised CKKS ciphertexts.

    Chunk ``i`` packs ``values[i·slots : (i+1)·slots]`` (the last one may be shorter)
    behind a header naming the key (:func:`fingerprint`), the chunk's position and the
    vector length. A private context encrypts with the secret key (faster, see the
    module docstring); a public one with the public key.

    Parameters
    ----------
    ctx
        A CKKS context from :func:`make_context` or :func:`load_context`.
    values
        A non-empty 1-D array of finite reals with ``|v| <= params.max_abs_sum``.

    Returns
    -------
    list of bytes
        The chunks, in order, for :meth:`EncryptedSum.add` or :func:`decrypt_vector`.

    Raises
    ------
    ValidationError
        If ``values`` is not a non-empty 1-D array of finite reals within range, or
        ``ctx`` is not usable.
    """
    params = _params_of(ctx, "encrypt_vector")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise invalid_parameter(
            "values", "encrypt_vector", "a 1-D array of reals", type(values).__name__
        ) from exc
    if arr.ndim != 1 or arr.size == 0:
        raise invalid_parameter(
            "values", "encrypt_vector", "a non-empty 1-D array of reals", describe(arr)
        )
    if not np.all(np.isfinite(arr)):
        raise ValidationError("encrypt_vector: values hold NaN or infinite entries")
    peak = float(np.max(np.abs(arr)))
    if peak > params.max_abs_sum:
        raise ValidationError(
            f"encrypt_vector: |values| reaches {peak:.3g}, above {params.max_abs_sum:.3g}, "
            "the largest magnitude these CKKS parameters decrypt"
        )
    ts = _tenseal()
    fp = fingerprint(ctx)
    encryptor = _encryptor(ts, ctx)
    slots, length = params.slots, int(arr.size)
    count = -(-length // slots)
    chunks = []
    for i in range(count):
        body = ts.ckks_vector(encryptor, arr[i * slots : (i + 1) * slots].tolist()).serialize()
        chunks.append(_HEADER.pack(_MAGIC, _VERSION, _KIND_CLIENT, fp, i, count, length) + body)
    return chunks


def _split_chunks(
    chunks: Any, fp: bytes, length: int, slots: int, owner: str, kinds: tuple[int, ...]
) -> list[tuple[int, bytes]]:
    """Check the headers of ``chunks``; return ``(kind, ciphertext bytes)`` per chunk."""
    if isinstance(chunks, (bytes, bytearray, str)) or not isinstance(chunks, Sequence):
        raise invalid_parameter(
            "chunks", owner, "a sequence of bytes from encrypt_vector", type(chunks).__name__
        )
    count = -(-length // slots)
    if len(chunks) != count:
        raise ValidationError(
            f"{owner}: expected {count} ciphertext chunk(s) for a vector of {length} values "
            f"({slots} per chunk), got {len(chunks)}"
        )
    out = []
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, (bytes, bytearray, memoryview)) or len(chunk) <= _HEADER.size:
            raise ValidationError(
                f"{owner}: chunk {i} is not an islands CKKS ciphertext (not bytes, or too short)"
            )
        magic, version, kind, key, index, total, size = _HEADER.unpack_from(chunk)
        if magic != _MAGIC or version != _VERSION:
            raise ValidationError(
                f"{owner}: chunk {i} is not an islands CKKS ciphertext (magic {magic!r}, "
                f"version {version}; expected {_MAGIC!r}, {_VERSION})"
            )
        if key != fp:
            raise ValidationError(
                f"{owner}: chunk {i} was encrypted under another key (fingerprint "
                f"{key.hex()[:16]}…, expected {fp.hex()[:16]}…): the sender's context does "
                "not belong to this key pair"
            )
        if kind not in kinds:
            what = "an aggregate (EncryptedSum.result)" if kind == _KIND_SUM else f"kind {kind}"
            raise ValidationError(f"{owner}: chunk {i} is {what}, not a client upload")
        if index != i or total != count:
            raise ValidationError(
                f"{owner}: chunk {i} is chunk {index} of {total}; pass all {count} chunks "
                "of one vector, in order"
            )
        if size != length:
            raise ValidationError(
                f"{owner}: chunk {i} belongs to a vector of {size} values, expected {length}"
            )
        out.append((kind, bytes(memoryview(chunk)[_HEADER.size :])))
    return out


def _load_chunk(
    ts: Any, ctx: Any, body: bytes, i: int, size: int, scale: float, n_data: int, owner: str
) -> Any:
    """Deserialise one ciphertext chunk under ``ctx`` and check its shape and scale."""
    try:
        vec = ts.ckks_vector_from(ctx, body)
        cts = vec.ciphertext()
        ok = (
            vec.size() == size
            and len(cts) == 1
            and cts[0].size() == 2
            and cts[0].coeff_modulus_size() == n_data
            and cts[0].scale == scale
        )
    except (ValueError, RuntimeError, TypeError) as exc:
        raise ValidationError(
            f"{owner}: chunk {i} does not deserialise as a CKKS ciphertext of this context ({exc})"
        ) from exc
    if not ok:
        raise ValidationError(
            f"{owner}: chunk {i} is not a {size}-value CKKS ciphertext at scale "
            f"2^{round(math.log2(scale))} of this context"
        )
    return vec


def _check_length(length: Any, owner: str) -> int:
    return check_int(length, "length", owner, low=1, high=2**32 - 1)


class EncryptedSum:
    """The server's streaming weighted sum ``Σ_k p_k · Enc(w_k)`` over CKKS ciphertexts.

    Holds one running ciphertext per chunk; :meth:`add` multiplies a client's
    ciphertexts by its plaintext weight (no rescale, see the module docstring) and adds
    them in. The server holds only the public context and so learns nothing about the
    ``w_k``; it can neither decrypt nor check what a client encrypted.

    Parameters
    ----------
    public_ctx
        The server's context, from ``load_context(public_bytes, secret=False)``. A
        context holding the secret key is refused.
    length
        Length of the (plain) vectors being summed.

    Raises
    ------
    ValidationError
        If ``public_ctx`` holds the secret key, rescales automatically or is not a CKKS
        context, or ``length`` is not a positive int.

    Notes
    -----
    Weights must satisfy ``Σ|p_k| <= 1`` (federated averaging: ``p_k = n_k / n``), which
    keeps the sum within :attr:`CKKSParams.max_abs_sum` whenever every client's values
    are; to sum with larger weights, scale them down and scale the decrypted result
    back up. Not thread-safe (TenSEAL holds the GIL anyway).
    """

    def __init__(self, public_ctx: tenseal.Context, length: int) -> None:
        owner = "EncryptedSum"
        self._params = _params_of(public_ctx, owner, "public_ctx")
        if public_ctx.is_private():
            raise ValidationError(
                "EncryptedSum: public_ctx holds the secret key; the server must never hold "
                "it: give the server load_context(public_context_bytes(ctx), secret=False)"
            )
        if public_ctx.auto_rescale:
            raise ValidationError(
                "EncryptedSum: public_ctx rescales after every multiplication "
                "(auto_rescale=True), which costs a level and 1e-7 relative accuracy; "
                "load it with load_context"
            )
        self._ctx = public_ctx
        self._length = _check_length(length, owner)
        self._fingerprint = fingerprint(public_ctx)
        self._acc: list[Any | None] | None = None
        self._clients = 0
        self._weight_total: float | NDArray[np.float64] = 0.0  # per slot once a vector came

    @property
    def length(self) -> int:
        """Length of the vectors being summed."""
        return self._length

    @property
    def clients(self) -> int:
        """How many uploads have been added (zero weights included)."""
        return self._clients

    @property
    def weight_total(self) -> float:
        """``Σ|p_k|`` over the uploads added so far (the largest over the slots)."""
        return float(np.max(self._weight_total))

    def add(self, chunks: Sequence[bytes], weight: float | NDArray[np.float64]) -> None:
        """Add ``weight · Enc(w)`` for one client's upload ``chunks``.

        Every chunk is checked (key fingerprint, position, length, deserialisation,
        scale) before anything is added, so a rejected upload leaves the sum untouched.

        Parameters
        ----------
        chunks
            The client's :func:`encrypt_vector` output.
        weight
            The client's weight ``p_k``, a finite real; ``Σ|p_k|`` over all uploads may
            not exceed 1. A weight below ``2^-(scale_bits+1)`` in magnitude contributes
            nothing (its encoding rounds to 0). Or one weight per value (a float64 array
            of the sum's length): the slot-wise product, the most a holder of the public
            context can compute (the audit's forgeries use it); its magnitudes
            count towards ``Σ|p_k|`` slot by slot.

        Raises
        ------
        ValidationError
            If the chunks were encrypted under another key, are not this sum's length,
            are missing, out of order, aggregates or undeserialisable bytes, or the
            weight is not finite or pushes ``Σ|p_k|`` above 1.
        """
        owner = "EncryptedSum.add"
        if isinstance(weight, np.ndarray):
            if (weight.dtype != np.float64 or weight.shape != (self._length,)
                    or not np.all(np.isfinite(weight))):
                raise invalid_parameter("weight", owner, f"a finite float64 array of shape "
                                        f"({self._length},)", describe(weight))
            per_value: NDArray[np.float64] | None = weight
            p = float(np.max(np.abs(weight)))
            grown: float | NDArray[np.float64] = self._weight_total + np.abs(weight)
        elif (
            isinstance(weight, (bool, np.bool_))
            or not isinstance(weight, (int, float, np.integer, np.floating))
            or not math.isfinite(weight)
        ):
            raise invalid_parameter("weight", owner, "a finite real", describe(weight))
        else:
            per_value, p = None, float(weight)
            grown = self._weight_total + abs(p)
        total = float(np.max(grown))
        if total > 1.0 + _WEIGHT_TOLERANCE:
            raise ValidationError(
                f"{owner}: the weights' absolute values would sum to {total:.6g} > 1; "
                "use normalised weights p_k = n_k / n (the sum must stay within "
                "max_abs_sum to decrypt)"
            )
        params = self._params
        ts = _tenseal()
        parts = _split_chunks(
            chunks, self._fingerprint, self._length, params.slots, owner, (_KIND_CLIENT,)
        )
        scale = 2.0**params.scale_bits
        n_data = len(params.coeff_mod_bit_sizes) - 1
        vectors = [
            _load_chunk(ts, self._ctx, body, i, self._chunk_size(i), scale, n_data, owner)
            for i, (_, body) in enumerate(parts)
        ]
        slots = params.slots
        factors: list[Any] = []  # per chunk: the weight(s) to multiply by, None if all 0
        for i in range(len(vectors)):
            if per_value is None:
                factors.append(p if abs(p) * scale >= 0.5 else None)  # else encoded as 0
            else:
                part = per_value[i * slots:i * slots + self._chunk_size(i)]
                factors.append(part.tolist() if np.max(np.abs(part)) * scale >= 0.5 else None)
        for i, (vec, factor) in enumerate(zip(vectors, factors, strict=True)):
            if factor is None:
                continue
            vec.mul_(factor)
            if vec.ciphertext()[0].scale != scale * scale:
                raise ValidationError(  # a chunk whose recorded scale lies
                    f"{owner}: chunk {i} does not carry the context's scale "
                    f"2^{params.scale_bits}"
                )
        if self._acc is None:
            self._acc = [None] * len(vectors)
        for i, (vec, factor) in enumerate(zip(vectors, factors, strict=True)):
            acc = self._acc[i]
            if factor is not None:
                if acc is None:
                    self._acc[i] = vec
                else:
                    acc.add_(vec)
        self._clients += 1
        self._weight_total = grown

    def _chunk_size(self, i: int) -> int:
        slots = self._params.slots
        return min(slots, self._length - i * slots)

    def result(self) -> list[bytes]:
        """Return the encrypted weighted sum, as chunks for :func:`decrypt_vector` (clients).

        Raises
        ------
        ValidationError
            If no upload with a non-zero weight has been added.
        """
        if self._acc is None or any(acc is None for acc in self._acc):
            raise ValidationError(
                "EncryptedSum.result: no upload with a non-zero weight has been added"
                + ("" if self._acc is None else
                   f" to chunk {[acc is None for acc in self._acc].index(True)}")
            )
        count = len(self._acc)
        head = [
            _HEADER.pack(_MAGIC, _VERSION, _KIND_SUM, self._fingerprint, i, count, self._length)
            for i in range(count)
        ]
        return [h + acc.serialize() for h, acc in zip(head, self._acc, strict=True)
                if acc is not None]


def decrypt_vector(
    secret_ctx: tenseal.Context, chunks: Sequence[bytes], length: int
) -> NDArray[np.float64]:
    """Decrypt chunks from :func:`encrypt_vector` or :meth:`EncryptedSum.result`.

    Parameters
    ----------
    secret_ctx
        A context holding the secret key of the key pair the chunks were made under.
    chunks
        All chunks of one vector, in order.
    length
        The vector's length.

    Returns
    -------
    ndarray of float64, shape (length,)
        The plain vector (for a sum: ``Σ p_k w_k``), to about 1e-9 for the defaults.

    Raises
    ------
    ValidationError
        If ``secret_ctx`` holds no secret key, the chunks come from another key, are
        incomplete, out of order or of another length, or do not deserialise.
    """
    owner = "decrypt_vector"
    params = _params_of(secret_ctx, owner, "secret_ctx")
    if not secret_ctx.is_private():
        raise ValidationError(
            "decrypt_vector: secret_ctx holds no secret key (a public context cannot decrypt)"
        )
    n = _check_length(length, owner)
    ts = _tenseal()
    parts = _split_chunks(
        chunks, fingerprint(secret_ctx), n, params.slots, owner, (_KIND_CLIENT, _KIND_SUM)
    )
    scale = 2.0**params.scale_bits
    n_data = len(params.coeff_mod_bit_sizes) - 1
    slots = params.slots
    out = np.empty(n, dtype=np.float64)
    for i, (kind, body) in enumerate(parts):
        size = min(slots, n - i * slots)
        expected = scale * scale if kind == _KIND_SUM else scale
        vec = _load_chunk(ts, secret_ctx, body, i, size, expected, n_data, owner)
        out[i * slots : i * slots + size] = vec.decrypt()
    return out
