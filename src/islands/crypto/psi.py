"""Diffie–Hellman private set intersection on Curve25519: hashing IDs to the curve, blinding.

The two-party protocol of Meadows (1986) and Huberman–Franklin–Hogg (1999), as used for
entity alignment in vertical FL (Yang et al. 2019, §2.4.2; FATE's ECDH PSI): with H a
hash onto a group where Diffie–Hellman is hard, party A sends H(x)^a for its IDs x, B
raises them to b and sends H(y)^b for its IDs y; A raises those to a, and the IDs whose
H(·)^(ab) agree are the intersection. Neither party can test an ID of the other without
the other's secret exponent. This module holds the arithmetic; the roles are in
:mod:`islands.psi`.

The group. Scalar multiplication is X25519 (RFC 7748) through ``cryptography``
(OpenSSL): the fastest well-kept curve arithmetic reachable from Python here (about
30 µs per multiplication, against 118 µs for libsodium's Ed25519 ``noclamp`` scalar
multiplication through PyNaCl, measured on this machine). X25519 works on Montgomery
u-coordinates, so a group element is a 32-byte u, and ``X25519(k, u)`` is [clamp(k)]P
for either point ±P with that u; multiplication commutes
(``X25519(a, X25519(b, u)) == X25519(b, X25519(a, u))``), which is all the protocol needs.
Clamping makes every scalar a multiple of the cofactor 8, so any small-order component
of a point is cleared.

Hashing to the curve. Every u in GF(2^255 − 19) lies either on Curve25519 or on its
quadratic twist. Hashing straight to a u (as a bare X25519 "public key" would) is *not*
enough: the twist is a different group, and whether H(x) falls on it is a public bit of
x that survives blinding (a blinded twist point stays on the twist), so the other party
could split its guesses of every ID in two. :func:`hash_to_curve` therefore uses
try-and-increment: u_j = BLAKE2b-256 keyed with the salt of (j ‖ id) with the top bit cleared, for
j = 0, 1, ... until u³ + 486662·u² + u is a non-zero square mod p (u is then the
u-coordinate of a curve point; 2 tries on average, at most 64 before the
negligible-probability error). The salt is fresh per run, so images cannot be
precomputed across runs. The number of tries leaks through timing only on the party's
own machine. (RFC 9380's Elligator 2 map is constant time but costs a field
exponentiation per ID in Python, more than the scalar multiplication itself.)

ID encoding. IDs are ints, strings or bytes, all of one kind per party: an int becomes
``b"i" + decimal``, a string ``b"s" + UTF-8``, bytes ``b"b" + bytes``, so ``1`` and
``"1"`` never collide and never match. Strings are first brought to one Unicode
normalisation form (NFC by default, :data:`NORMALIZATIONS`), so "José" typed with a
composed é and with e + combining accent encode alike; without it they are different
bytes and the row would silently drop out of the intersection.

Speed. Blinding is embarrassingly parallel and OpenSSL holds the GIL, so large batches go
to a pool of worker processes (``workers``, default: the usable cores); the secret
scalar travels to them over a local pipe and never leaves the machine.

References
----------
.. [1] C. Meadows. "A More Efficient Cryptographic Matchmaking Protocol for Use in the
   Absence of a Continuously Available Third Party." IEEE S&P 1986.
.. [2] B. A. Huberman, M. Franklin, T. Hogg. "Enhancing Privacy and Trust in Electronic
   Communities." ACM EC 1999.
.. [3] D. J. Bernstein. "Curve25519: new Diffie-Hellman speed records." PKC 2006; RFC 7748.
.. [4] Q. Yang, Y. Liu, T. Chen, Y. Tong. "Federated Machine Learning: Concept and
   Applications." ACM TIST 10(2), 2019, §2.4.2 (``papers/fml-concepts-yang-2019.vi.txt``).
"""

from __future__ import annotations

import hashlib
import secrets
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from islands.crypto.processes import check_workers, chunks, run_in_workers, usable_cores
from islands.errors import ValidationError, invalid_parameter
from islands.validation import describe

__all__ = [
    "NORMALIZATIONS",
    "POINT_BYTES",
    "blind",
    "encode_ids",
    "hash_to_curve",
    "new_key",
    "normalization_name",
    "usable_cores",
]

Normalization = Literal["NFC", "NFKC", "NFD", "NFKD"] | None
NORMALIZATIONS: tuple[str | None, ...] = ("NFC", "NFKC", "NFD", "NFKD", None)
"""The Unicode normalisation forms string IDs can be brought to (None: none, raw UTF-8)."""

POINT_BYTES = 32
"""Bytes of a group element (an X25519 u-coordinate)."""

_P = 2**255 - 19
_A = 486662
_MAX_TRIES = 64
_PARALLEL_MIN = 20_000  # below this, a pool costs more than it saves
_KINDS = {int: "int", str: "str", bytes: "bytes"}


def normalization_name(normalize: Any, owner: str) -> str:
    """Return ``normalize`` as it travels in a hello: the form's name, or ``"none"``.

    Raises
    ------
    ValidationError
        If ``normalize`` is not one of :data:`NORMALIZATIONS`.
    """
    if normalize is not None and (type(normalize) is not str
                                  or normalize not in NORMALIZATIONS):
        raise invalid_parameter("normalize", owner,
                                "one of 'NFC', 'NFKC', 'NFD', 'NFKD' or None", normalize)
    return "none" if normalize is None else normalize


def encode_ids(ids: Any, name: str, owner: str, *,
               normalize: Normalization = "NFC") -> tuple[list[bytes], str]:
    """Return the canonical byte encodings of ``ids`` and their kind.

    Parameters
    ----------
    ids
        A sequence (or 1-D array) of ints, strings or bytes, all of one kind.
    name, owner
        Named in error messages (the parameter and the party or function).
    normalize
        The Unicode normalisation form strings are brought to before encoding, or None
        to encode them as given. Ints and bytes are never changed.

    Returns
    -------
    encoded : list of bytes
        ``b"i" + decimal``, ``b"s" + UTF-8`` or ``b"b" + raw``, in the input order.
    kind : {"int", "str", "bytes"}

    Raises
    ------
    ValidationError
        If ``ids`` is empty, mixes kinds, holds another type or repeats an ID, if two
        different strings normalise to the same one (naming both), or if ``normalize``
        is not a known form.
    """
    normalization_name(normalize, owner)
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise invalid_parameter(name, owner, "a 1-D sequence of IDs", describe(ids))
        values = ids.tolist()
    elif isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise invalid_parameter(name, owner, "a sequence of IDs (ints, strings or bytes)",
                                describe(ids))
    else:
        values = list(ids)
    if not values:
        raise ValidationError(f"The {name!r} parameter of {owner} is empty: a party with no "
                              "IDs has nothing to align")
    kind = _kind_of(values[0])
    if kind is None:
        raise ValidationError(
            f"The {name!r} parameter of {owner} must hold IDs that are ints, strings or "
            f"bytes. Got a {type(values[0]).__name__} at position 0 instead.")
    encoded = _encode_bulk(values, kind, normalize)
    if encoded is None:  # ID by ID, naming the first that does not pass
        encoded = []
        for i, v in enumerate(values):
            if _kind_of(v) != kind:
                raise ValidationError(
                    f"The {name!r} parameter of {owner} must hold IDs all of one kind "
                    f"({kind}, from position 0). Got a {type(v).__name__} at position {i} "
                    "instead.")
            encoded.append(_encode_one(v, kind, normalize, name, owner, i))
    if len(set(encoded)) != len(encoded):
        seen: dict[bytes, Any] = {}
        for v, e in zip(values, encoded, strict=True):
            if e in seen:
                if seen[e] == v:
                    raise ValidationError(
                        f"The {name!r} parameter of {owner} repeats the ID {v!r}: IDs must "
                        "be unique within a party (deduplicate, or join the rows first)")
                # ascii() shows the code points that make the two look alike
                raise ValidationError(
                    f"The {name!r} parameter of {owner} holds the IDs {seen[e]!a} and "
                    f"{v!a}, which are the same string under Unicode {normalize} "
                    "normalisation and would collide: make them one ID, or choose another "
                    "'normalize' (None compares the code points as given)")
            seen[e] = v
    return encoded, kind


def _encode_bulk(values: list[Any], kind: str, normalize: Normalization) -> list[bytes] | None:
    """Return the encodings of ``values`` made in a few passes over one joined string.

    Taken when every ID is exactly an ``int``, ``str`` or ``bytes`` (the usual list or
    array); the result is what :func:`_encode_one` gives ID by ID, about ten times
    faster at a million IDs. Returns None, for the ID-by-ID path and its errors, when the
    types differ, a string holds a newline (the separator) or a lone surrogate, or an
    int is too long to print.
    """
    types = set(map(type, values))
    if len(types) != 1 or _KINDS.get(types.pop()) != kind:
        return None
    if kind == "bytes":
        return [b"b" + v for v in values]
    try:
        text = "\n".join(map(str, values) if kind == "int" else values)
        if kind == "str" and normalize is not None and not text.isascii():
            # "\n" is a starter that composes with nothing: normalising the joined text
            # normalises each ID (ASCII is unchanged by every form)
            text = unicodedata.normalize(normalize, text)
        if text.count("\n") != len(values) - 1:
            return None
        data = text.encode("utf-8")
    except (UnicodeEncodeError, ValueError):  # a lone surrogate; an int of > 4300 digits
        return None
    prefix = b"i" if kind == "int" else b"s"
    return (prefix + data.replace(b"\n", b"\n" + prefix)).split(b"\n")


def _kind_of(value: Any) -> str | None:
    """Return the ID kind of ``value`` ("int", "str", "bytes"), or None for another type.

    NumPy scalars count as their Python kind (a list made from an array holds them).
    """
    kind = _KINDS.get(type(value))
    if kind is not None:
        return kind
    if isinstance(value, np.integer):
        return "int"
    if isinstance(value, np.str_):
        return "str"
    if isinstance(value, np.bytes_):
        return "bytes"
    return None


def _encode_one(value: Any, kind: str, normalize: Normalization, name: str, owner: str,
                position: int) -> bytes:
    if kind == "int":
        return b"i%d" % int(value)
    if kind == "bytes":
        return b"b" + bytes(value)
    text = str(value)
    try:
        return b"s" + (unicodedata.normalize(normalize, text) if normalize else
                       text).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(
            f"The {name!r} parameter of {owner} holds the ID {text!a} at position "
            f"{position}, which is not valid Unicode text (it has the lone surrogate "
            f"{text[exc.start]!a}, as decoding non-UTF-8 bytes with 'surrogateescape' "
            "gives): pass IDs that are not text as bytes") from None


def _hash_chunk(salt: bytes, items: list[bytes]) -> bytes:
    try:
        import gmpy2
    except ImportError:  # pragma: no cover - gmpy2 comes with islands[crypto]
        gmpy2 = None
    base = hashlib.blake2b(digest_size=32, key=salt, person=b"islands-psi-h2c")
    p, a, mask = _P, _A, (1 << 255) - 1
    if gmpy2 is not None:
        p, a = gmpy2.mpz(_P), gmpy2.mpz(_A)
    out = []
    for item in items:
        for j in range(_MAX_TRIES):
            h = base.copy()
            h.update(j.to_bytes(1, "little"))
            h.update(item)
            u = int.from_bytes(h.digest(), "little") & mask
            if u >= _P:
                continue
            # u is a curve point's u-coordinate iff u³ + A·u² + u is a non-zero square
            if gmpy2 is not None:
                x = gmpy2.mpz(u)
                square = gmpy2.legendre((x * x + a * x + 1) * x % p, p) == 1
            else:  # Euler's criterion
                square = pow((u * u + _A * u + 1) * u % _P, (_P - 1) // 2, _P) == 1
            if square:
                out.append(u.to_bytes(32, "little"))
                break
        else:  # pragma: no cover - probability 2^-64 per ID
            raise ValidationError("hash_to_curve: no curve point after 64 tries")
    return b"".join(out)


def _blind_chunk(key: bytes, points: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.x25519 import (
        X25519PrivateKey,
        X25519PublicKey,
    )

    private = X25519PrivateKey.from_private_bytes(key)
    load = X25519PublicKey.from_public_bytes
    out = []
    for i in range(0, len(points), POINT_BYTES):
        try:
            out.append(private.exchange(load(points[i : i + POINT_BYTES])))
        except ValueError as exc:  # OpenSSL refuses a low-order point (all-zero result)
            raise ValueError(f"element {i // POINT_BYTES} is a low-order point") from exc
    return b"".join(out)


def _chunked(n: int, workers: int) -> list[tuple[int, int]]:
    return chunks(n, max(1, min(workers * 4, n // 5000)))


def hash_to_curve(encoded: Sequence[bytes], salt: bytes, *,
                  workers: int | None = None) -> NDArray[np.uint8]:
    """Hash encoded IDs to Curve25519 points (u-coordinates), try-and-increment.

    Parameters
    ----------
    encoded
        Output of :func:`encode_ids`.
    salt
        16 to 64 bytes, fresh per run and shared by both parties.
    workers
        Processes for large inputs (default: the usable cores).

    Returns
    -------
    ndarray of uint8, shape (n, 32)
    """
    owner = "hash_to_curve"
    if not isinstance(salt, bytes) or not 16 <= len(salt) <= 64:
        raise invalid_parameter("salt", owner, "16 to 64 bytes", describe(salt))
    workers = check_workers(workers, owner)
    items = list(encoded)
    if workers == 1 or len(items) < _PARALLEL_MIN:
        raw = _hash_chunk(salt, items)
    else:
        raw = b"".join(run_in_workers(
            _hash_chunk, [(salt, items[lo:hi]) for lo, hi in _chunked(len(items), workers)],
            workers, owner=owner))
    points: NDArray[np.uint8] = np.frombuffer(raw, dtype=np.uint8).reshape(
        len(items), POINT_BYTES).copy()
    return points


def new_key() -> bytes:
    """Return a fresh secret scalar: 32 bytes from the operating system's CSPRNG."""
    return secrets.token_bytes(32)


def blind(key: bytes, points: Any, *, workers: int | None = None,
          name: str = "points", owner: str = "blind") -> NDArray[np.uint8]:
    """Multiply every point by the secret scalar ``key`` (X25519).

    Parameters
    ----------
    key
        32 secret bytes from :func:`new_key`.
    points
        A uint8 array of shape (n, 32): u-coordinates.
    workers
        Processes for large inputs (default: the usable cores).
    name, owner
        Named in errors (what the points are and who sent them).

    Returns
    -------
    ndarray of uint8, shape (n, 32)

    Raises
    ------
    ValidationError
        If ``points`` has another shape or dtype, or holds a low-order point (which no
        honest party sends).
    """
    if not isinstance(key, bytes) or len(key) != 32:
        # the key is secret: only its type and length go into the message
        got = f"bytes of length {len(key)}" if isinstance(key, bytes) else type(key).__name__
        raise invalid_parameter("key", owner, "32 bytes", got)
    arr = np.asarray(points)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != POINT_BYTES:
        raise invalid_parameter(name, owner, "a uint8 array of shape (n, 32)", describe(arr))
    workers = check_workers(workers, owner)
    raw = np.ascontiguousarray(arr).tobytes()
    n = arr.shape[0]
    try:
        if workers == 1 or n < _PARALLEL_MIN:
            out = _blind_chunk(key, raw)
        else:
            step = POINT_BYTES
            calls = [(key, raw[lo * step : hi * step]) for lo, hi in _chunked(n, workers)]
            out = b"".join(run_in_workers(_blind_chunk, calls, workers, owner=owner))
    except ValueError as exc:
        raise ValidationError(f"{owner}: the {name} hold an invalid point ({exc})") from exc
    blinded: NDArray[np.uint8] = np.frombuffer(out, dtype=np.uint8).reshape(
        n, POINT_BYTES).copy()
    return blinded
