"""The two roles of Diffie–Hellman PSI: the initiator (A) and the responder (B).

Messages, in order (every one a real wire message, recorded in the transcript):

============  ========  ===============================================================
tag           sender    payload
============  ========  ===============================================================
``hello``     A         :class:`Hello`: A's ID kind, its string normalisation, its set
                        size, the run's fresh salt
``hello``     B         :class:`Hello`: B's ID kind, normalisation and set size (no salt)
``blinded``   A         H(x)^a for A's IDs, n_A × 32 bytes, in a random order
``blinded``   B         H(y)^b for B's IDs, n_B × 32 bytes, in a random order
``double``    B         (H(x)^a)^b, the rows of A's ``blinded`` in the same order
``matches``   A         the positions in B's ``blinded`` list that are in the
                        intersection, ascending
============  ========  ===============================================================

The two parties hash and blind their own IDs at the same time, then each blinds the
other's at the same time, so between two machines PSI takes two rounds of curve
arithmetic, not four.

A matches (H(x)^a)^b against (H(y)^b)^a; both then know the common IDs and each sorts
them (ints by value, strings by their normalised form and bytes lexicographically; both
parties hold IDs of one kind and, for strings, use one normalisation, which the hellos
check), so both end with one aligned list, each in its own original spelling. What each
learns (semi-honest parties): the other's set size and the intersection, nothing else; the
random orders keep A's and B's input orders from leaking, and the ascending ``matches``
carry no order either. A party that lies about ``matches`` or its blinded values changes
the result; the protocol does not defend against that (malicious PSI needs more, e.g.
zero-knowledge proofs).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.crypto import psi
from islands.crypto.prg import csprng_uniform
from islands.crypto.processes import check_workers
from islands.crypto.psi import Normalization
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party, wire

__all__ = ["Alignment", "Hello", "initiator", "responder"]

_SALT_BYTES = 32


@wire.register(name="psi.Hello")
@dataclass(frozen=True)
class Hello:
    """A party's ID kind, string normalisation and set size; A adds the run's salt.

    ``normalize`` is the Unicode form (``"NFC"``, ...) or ``"none"``.
    """

    kind: str
    n: int = field(metadata={"ge": 1})
    normalize: str = "NFC"
    salt: bytes = b""


@dataclass(frozen=True)
class Alignment:
    """What one party ends with.

    Attributes
    ----------
    ids
        The common IDs in the aligned order, as this party gave them (its own ID
        objects, not their normalised form).
    rows
        ``rows[i]`` is the position of ``ids[i]`` in this party's input, so
        ``X[alignment.rows]`` lines this party's rows up with the other's.
    peer_size
        The other party's number of IDs: the one thing PSI reveals beyond the result.
    """

    ids: list[Any]
    rows: NDArray[np.int64]
    peer_size: int


def _shuffle(n: int) -> NDArray[np.int64]:
    """Return a random permutation: the order of n uniforms from the CSPRNG.

    Ties (probability about n²·2^-54) would only bias the order negligibly.
    """
    perm: NDArray[np.int64] = np.argsort(csprng_uniform(n), kind="stable").astype(np.int64)
    return perm


def _hello(party: Party, peer: str, mine: Hello, first: bool) -> Hello:
    if first:
        party.send(peer, "hello", mine)
    theirs = party.recv(peer, "hello")
    if not first:
        party.send(peer, "hello", mine)
    if not isinstance(theirs, Hello) or not isinstance(theirs.n, int) or theirs.n < 1:
        raise ProtocolError(f"party {peer!r} sent a malformed hello", party=party.name,
                            step="hello")
    if theirs.kind != mine.kind:
        raise ValidationError(
            f"PSI: party {party.name!r} holds {mine.kind} IDs but party {peer!r} holds "
            f"{theirs.kind} IDs; both must use the same kind (1 and '1' never match)")
    if mine.kind == "str" and theirs.normalize != mine.normalize:
        raise ValidationError(
            f"PSI: party {party.name!r} normalises string IDs with normalize="
            f"{_shown(mine.normalize)} but party {peer!r} with normalize="
            f"{_shown(theirs.normalize)}; both must use the same 'normalize' (IDs that "
            "look alike would not match)")
    return theirs


def _shown(normalize: object) -> str:
    return "None" if normalize == "none" else repr(normalize)


def _prepare(party: Party, ids: Any, normalize: Normalization,
             workers: int | None) -> tuple[list[Any], list[bytes], str, str]:
    """Validate and encode this party's IDs (and check ``workers``) before anything is sent."""
    owner = f"PSI party {party.name!r}"
    check_workers(workers, owner)
    form = psi.normalization_name(normalize, owner)
    values = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    encoded, kind = psi.encode_ids(values, "ids", owner, normalize=normalize)
    return values, encoded, kind, form


def _points(value: Any, n: int, peer: str, tag: str, me: str) -> NDArray[np.uint8]:
    arr = np.asarray(value)
    if arr.dtype != np.uint8 or arr.shape != (n, psi.POINT_BYTES):
        raise ProtocolError(f"party {peer!r} sent {tag!r} of shape {arr.shape} {arr.dtype}, "
                            f"expected ({n}, 32) uint8", party=me, step=tag)
    return arr


def _aligned(rows: NDArray[np.int64], ids: list[Any], encoded: list[bytes],
             kind: str) -> tuple[list[Any], NDArray[np.int64]]:
    # strings sort by their normalised UTF-8 (the same order as their code points), so
    # two parties that spell an ID differently still agree on the order
    keys: list[Any] = ids if kind == "int" else encoded
    order = sorted(range(rows.size), key=lambda i: keys[int(rows[i])])
    out_rows = rows[np.asarray(order, dtype=np.int64)] if order else rows
    return [ids[int(r)] for r in out_rows], out_rows.astype(np.int64)


def _empty(party: Party, peer: str) -> ValidationError:
    return ValidationError(
        f"PSI: parties {party.name!r} and {peer!r} share no IDs; there is nothing to align "
        "(check that both use the same ID column and format)")


def initiator(party: Party, *, peer: str, ids: Any, workers: int | None = None,
              normalize: Normalization = "NFC") -> Alignment:
    """Play A: start the run, match, and tell B which of its IDs are common.

    Parameters
    ----------
    party
        A's party context.
    peer
        B's party name.
    ids
        A's IDs: ints, strings or bytes, all of one kind, unique.
    workers
        Processes for the curve arithmetic (default: the usable cores).
    normalize
        Unicode form string IDs are brought to before hashing: ``"NFC"`` (default),
        ``"NFKC"``, ``"NFD"``, ``"NFKD"``, or None for the code points as given. B must
        use the same.

    Returns
    -------
    Alignment

    Raises
    ------
    ValidationError
        For empty, mixed or repeated IDs, or two IDs that normalise alike (before
        anything is sent), IDs of another kind or another normalisation than B's, or an
        empty intersection.
    """
    values, encoded, kind, form = _prepare(party, ids, normalize, workers)
    salt = secrets.token_bytes(_SALT_BYTES)
    theirs = _hello(party, peer, Hello(kind, len(encoded), form, salt), first=True)
    key = psi.new_key()
    perm = _shuffle(len(encoded))
    mine = psi.blind(key, psi.hash_to_curve(encoded, salt, workers=workers), workers=workers)
    party.send(peer, "blinded", mine[perm])
    del mine
    theirs_b = _points(party.recv(peer, "blinded"), theirs.n, peer, "blinded", party.name)
    theirs_ab = psi.blind(key, theirs_b, workers=workers, name="blinded IDs",
                          owner=f"PSI party {party.name!r} (from {peer!r})")
    double = _points(party.recv(peer, "double"), len(encoded), peer, "double", party.name)
    index = {row.tobytes(): int(perm[i]) for i, row in enumerate(double)}
    hits = [(j, index[row.tobytes()]) for j, row in enumerate(theirs_ab)
            if row.tobytes() in index]
    positions = np.asarray(sorted(j for j, _ in hits), dtype=np.int64)
    party.send(peer, "matches", positions)
    if not hits:
        raise _empty(party, peer)
    rows = np.asarray([r for _, r in hits], dtype=np.int64)
    common, rows = _aligned(rows, values, encoded, kind)
    return Alignment(common, rows, theirs.n)


def responder(party: Party, *, peer: str, ids: Any, workers: int | None = None,
              normalize: Normalization = "NFC") -> Alignment:
    """Play B: blind A's values and its own, and learn the common IDs from A.

    Parameters and errors as :func:`initiator`.
    """
    values, encoded, kind, form = _prepare(party, ids, normalize, workers)
    theirs = _hello(party, peer, Hello(kind, len(encoded), form), first=False)
    if not isinstance(theirs.salt, bytes) or len(theirs.salt) != _SALT_BYTES:
        raise ProtocolError(f"party {peer!r} sent no valid salt", party=party.name,
                            step="hello")
    key = psi.new_key()
    perm = _shuffle(len(encoded))
    mine = psi.blind(key, psi.hash_to_curve(encoded, theirs.salt, workers=workers),
                     workers=workers)
    party.send(peer, "blinded", mine[perm])
    del mine
    theirs_a = _points(party.recv(peer, "blinded"), theirs.n, peer, "blinded", party.name)
    party.send(peer, "double", psi.blind(key, theirs_a, workers=workers, name="blinded IDs",
                                         owner=f"PSI party {party.name!r} (from {peer!r})"))
    positions = np.asarray(party.recv(peer, "matches"))
    if (positions.dtype.kind not in "iu" or positions.ndim != 1
            or (positions.size and (positions.min() < 0 or positions.max() >= len(encoded)))
            or np.unique(positions).size != positions.size):
        raise ProtocolError(f"party {peer!r} sent malformed matches", party=party.name,
                            step="matches")
    if positions.size == 0:
        raise _empty(party, peer)
    rows = perm[positions.astype(np.int64)]
    common, rows = _aligned(rows, values, encoded, kind)
    return Alignment(common, rows, theirs.n)
