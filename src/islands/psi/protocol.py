"""The two roles of PSI: the initiator (A) and the responder (B).

With ``engine="spu"`` the roles exchange :class:`SpuHello` and run SecretFlow SPU's RR22
between the two parties' SPU processes (:func:`_spu`); what follows is the default,
Diffie–Hellman PSI.

Messages, in order (every one a real wire message, recorded in the transcript):

============  ========  ===============================================================
tag           sender    payload
============  ========  ===============================================================
``hello``     A         :class:`Hello`: A's ID kind, its string normalisation, its set
                        size, the run's fresh salt
``hello``     B         :class:`Hello`: B's ID kind, normalisation and set size (no salt)
``blinded``   B         H(y)^b for B's IDs, n_B × 32 bytes, in a random order
``blinded``   A         H(x)^a for A's IDs, n_A × 32 bytes, in a random order
``double``    B         (H(x)^a)^b, the rows of A's ``blinded`` in the same order
``matches``   A         the positions in B's ``blinded`` list that are in the
                        intersection, ascending
============  ========  ===============================================================

The two parties hash and blind their own IDs at the same time, then each blinds the
other's at the same time, so between two machines PSI takes two rounds of curve
arithmetic, not four. A holds its blinded IDs back until B's have arrived, so that it
can count them first (below).

**The size limit.** PSI cannot tell a guessed ID from a real one: a party that enters
guesses learns which of them the other holds. Each party therefore refuses a peer whose
set is larger than its own limit (``max_peer_size``, or ``max_peer_ratio`` times its own
size), with a :class:`~islands.errors.ProtocolError` naming the peer, the limit and the
size seen, before it sends anything that lets the peer test an ID: B checks A's announced
size before its hello and the number of blinded IDs A actually sent before ``double``; A
checks B's announced size and the number B actually sent before its own ``blinded``. Only
B's ``blinded`` leaves before the count it answers can be checked (the two cross in
flight): H(y)^b under B's secret scalar, which lets A test nothing without B's ``double``.

A matches (H(x)^a)^b against (H(y)^b)^a; both then know the common IDs and each sorts
them (ints by value, strings by their normalised form and bytes lexicographically; both
parties hold IDs of one kind and, for strings, use one normalisation, which the hellos
check), so both end with one aligned list, each in its own original spelling. What each
learns (semi-honest parties): the other's set size and the intersection, nothing else; the
random orders keep A's and B's input orders from leaking, and the ascending ``matches``
carry no order either. The intersection is with the set the other party entered, which
may be guesses: that is what the size limit bounds. A party that lies about ``matches``
or its blinded values changes the result; the protocol does not defend against that
(malicious PSI needs more, e.g. zero-knowledge proofs).
"""

from __future__ import annotations

import math
import secrets
import tempfile
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.crypto import psi
from islands.crypto.prg import csprng_uniform
from islands.crypto.processes import check_workers
from islands.crypto.psi import Normalization
from islands.errors import ProtocolError, ValidationError
from islands.progress import ProgressOption, task
from islands.psi.config import (
    DEFAULT_ENGINE,
    DEFAULT_MAX_PEER_RATIO,
    DEFAULT_NORMALIZE,
    Engine,
    PsiConfig,
)
from islands.psi.spu_engine import (
    SPU_PROTOCOL,
    SpuLink,
    SpuParty,
    check_run_certificate,
    new_link_id,
    pinned_tls,
    run_certificate,
)
from islands.runtime import Party, wire
from islands.runtime.grpc_transport import check_address

__all__ = ["DEFAULT_MAX_PEER_RATIO", "Alignment", "Hello", "SpuHello", "check_peer_limit",
           "initiator", "responder"]

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


_LINK_ID = 12 + 16  # "islands-psi-" and 16 hex digits (spu_engine.new_link_id)


@wire.register(name="psi.SpuHello")
@dataclass(frozen=True)
class SpuHello:
    """engine='spu': a party's ID kind, normalisation and set size, and its SPU settings.

    ``link_id`` is the initiator's fresh name for the run (the responder repeats it),
    ``hosts`` the two SPU addresses (initiator's, responder's) as this party's
    configuration has them, ``cert`` the self-signed certificate its SPU will present
    for this run only (:func:`islands.psi.spu_engine.run_certificate`).
    """

    kind: str
    n: int = field(metadata={"ge": 1})
    normalize: str = "NFC"
    protocol: str = SPU_PROTOCOL
    link_id: str = field(default="", metadata={"max_len": _LINK_ID})
    hosts: tuple[str, str] = ("", "")
    cert: bytes = field(default=b"", metadata={"max_len": 4096})


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


def check_peer_limit(max_peer_size: Any, max_peer_ratio: Any,
                     owner: str) -> tuple[int | None, float | None]:
    """Validate a party's limit on the other's set size; return it as (int, float).

    Raises
    ------
    ValidationError
        Naming ``max_peer_size`` unless it is an int >= 1 or None, or
        ``max_peer_ratio`` unless it is a finite number > 0 or None.
    """
    config = PsiConfig.build(owner, max_peer_size=max_peer_size, max_peer_ratio=max_peer_ratio)
    return config.max_peer_size, config.max_peer_ratio


@dataclass(frozen=True)
class _Limit:
    """The largest peer set a party accepts (None: any), and how it was set."""

    value: int | None
    source: str

    @classmethod
    def of(cls, n: int, max_peer_size: int | None, max_peer_ratio: float | None) -> _Limit:
        if max_peer_size is not None:
            return cls(max_peer_size, "")
        if max_peer_ratio is None:
            return cls(None, "")
        # the ratio as written (0.29 × 100 is 29, not 28.999...)
        value = max(1, math.floor(Decimal(repr(max_peer_ratio)) * n))
        return cls(value, f" (max_peer_ratio {max_peer_ratio!r} × this party's {n} IDs)")

    def check(self, name: str, peer: str, seen: int, how: str, step: str) -> None:
        """Refuse a peer whose set (announced or actually sent) is above the limit.

        ``how`` says what the peer did, with ``{n}`` for the size seen.
        """
        if self.value is None or seen <= self.value:
            return
        raise ProtocolError(
            f"PSI party {name!r} refuses party {peer!r}: it {how.format(n=seen)}, more "
            f"than this party's limit max_peer_size = {self.value}{self.source}. PSI "
            f"cannot tell a guessed ID from a real one, so {peer!r} would learn which of "
            f"its {seen} entries this party holds; nothing that tests an ID against this "
            "party's set was sent. Raise max_peer_size or max_peer_ratio only for a peer "
            "you trust with that many guesses.", party=name, step=step)


def _hello(party: Party, peer: str, mine: Hello, first: bool, limit: _Limit) -> Hello:
    if first:
        party.send(peer, "hello", mine)
    theirs = party.recv(peer, "hello")
    if not isinstance(theirs, Hello) or not isinstance(theirs.n, int) or theirs.n < 1:
        raise ProtocolError(f"party {peer!r} sent a malformed hello", party=party.name,
                            step="hello")
    limit.check(party.name, peer, theirs.n, "announced {n} IDs", "hello")  # before B's hello leaves
    if not first:
        party.send(peer, "hello", mine)
    _check_same_ids(party.name, peer, mine, theirs)
    return theirs


def _check_same_ids(name: str, peer: str, mine: Hello | SpuHello,
                    theirs: Hello | SpuHello) -> None:
    """Refuse a peer whose IDs are of another kind or normalised otherwise (either hello)."""
    if theirs.kind != mine.kind:
        raise ValidationError(
            f"PSI: party {name!r} holds {mine.kind} IDs but party {peer!r} holds "
            f"{theirs.kind} IDs; both must use the same kind (1 and '1' never match)")
    if mine.kind == "str" and theirs.normalize != mine.normalize:
        raise ValidationError(
            f"PSI: party {name!r} normalises string IDs with normalize="
            f"{_shown(mine.normalize)} but party {peer!r} with normalize="
            f"{_shown(theirs.normalize)}; both must use the same 'normalize' (IDs that "
            "look alike would not match)")


def _shown(normalize: object) -> str:
    return "None" if normalize == "none" else repr(normalize)


def _prepare(party: Party, ids: Any, normalize: Normalization, workers: int | None,
             max_peer_size: Any, max_peer_ratio: Any, engine: Any, spu: Any
             ) -> tuple[list[Any], list[bytes], str, str, _Limit]:
    """Validate and encode this party's IDs (and check its settings) before anything is sent."""
    owner = f"PSI party {party.name!r}"
    check_workers(workers, owner)
    config = PsiConfig.build(owner, normalize=normalize, max_peer_size=max_peer_size,
                             max_peer_ratio=max_peer_ratio, engine=engine)
    if config.engine == "spu":
        if not isinstance(spu, tuple) or len(spu) != 2:
            raise ValidationError(
                f"{owner}: engine='spu' needs spu = (initiator's SPU 'host:port', "
                f"responder's SPU 'host:port'); got {spu!r}")
        for who, address in zip(("initiator", "responder"), spu, strict=True):
            check_address(address, f"{owner}: the {who}'s SPU address (spu)")
    elif spu is not None:
        raise ValidationError(f"{owner}: spu (SPU's addresses) applies only with "
                              f"engine='spu'; got engine={config.engine!r}")
    form = "none" if config.normalize is None else config.normalize
    values = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    encoded, kind = psi.encode_ids(values, "ids", owner, normalize=config.normalize)
    return values, encoded, kind, form, _Limit.of(len(encoded), config.max_peer_size,
                                                  config.max_peer_ratio)


def _points(value: Any, n: int, peer: str, tag: str, party: Party,
            limit: _Limit | None = None) -> NDArray[np.uint8]:
    arr = np.asarray(value)
    if limit is not None and arr.ndim >= 1:  # what arrived, whatever the hello said
        limit.check(party.name, peer, int(arr.shape[0]), "sent {n} blinded IDs", tag)
    if arr.dtype != np.uint8 or arr.shape != (n, psi.POINT_BYTES):
        raise ProtocolError(f"party {peer!r} sent {tag!r} of shape {arr.shape} {arr.dtype}, "
                            f"expected ({n}, 32) uint8", party=party.name, step=tag)
    return arr


def _aligned(rows: NDArray[np.int64], ids: list[Any], encoded: list[bytes],
             kind: str) -> tuple[list[Any], NDArray[np.int64]]:
    # strings sort by their normalised UTF-8 (the same order as their code points), so
    # two parties that spell an ID differently still agree on the order
    keys: list[Any] = ids if kind == "int" else encoded
    picked = [keys[r] for r in rows.tolist()]
    order = _order(picked, kind)
    out_rows = rows[order] if order.size else rows
    return [ids[r] for r in out_rows.tolist()], out_rows.astype(np.int64)


def _order(keys: list[Any], kind: str) -> NDArray[np.intp]:
    """Return the positions of ``keys`` (distinct ints, or distinct bytes) in sorted order.

    NumPy sorts int64 values, and bytes without a NUL byte (a fixed-width bytes array
    pads with NULs, so a key ending in NUL would tie with the key without it); anything else
    sorts in Python.
    """
    if kind == "int":
        try:
            values = np.array(keys, dtype=np.int64)
        except (OverflowError, TypeError, ValueError):
            values = None
        if values is not None and values.tolist() == keys:
            return np.argsort(values, kind="stable")
    elif b"\0" not in b"".join(keys):
        return np.argsort(np.array(keys, dtype="S"), kind="stable")
    return np.asarray(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.intp)


def _empty(name: str, peer: str) -> ValidationError:
    return ValidationError(
        f"PSI: parties {name!r} and {peer!r} share no IDs; there is nothing to align "
        "(check that both use the same ID column and format)")


def _spu(party: Party, peer: str, values: list[Any], encoded: list[bytes], kind: str,
         form: str, limit: _Limit, hosts: tuple[str, str], first: bool,
         progress: ProgressOption) -> Alignment:
    """Run SPU's RR22 with ``peer`` after agreeing on its settings over ``party``'s channel.

    Messages over islands' channel: ``hello`` both ways (:class:`SpuHello`: A's first,
    B's after B has checked A's announced size against its limit), then ``done``, the
    number of common IDs each SPU found, both ways. Before this party's SPU gets an ID,
    it checks the peer's hello: the set size against its limit, the ID kind, the
    normalisation, SPU's protocol, both SPU addresses and the run's link ID must be its
    own, and the peer's run certificate must be a valid self-signed P-256 certificate.
    Its SPU then presents its own run certificate and accepts only the peer's
    (:func:`islands.psi.spu_engine.pinned_tls`), so SPU's link reaches the party that
    islands' mutually authenticated channel named, not any holder of a federation
    certificate. The whole SPU run is bounded by the party's timeout.

    What each learns is what SPU's RR22 (semi-honest) reveals with ``broadcast_result``:
    the intersection and the peer's set size. The size limit is checked on the size the
    peer announces; SPU 0.9.5 reports no count of what the peer actually entered.
    """
    name = party.name
    owner = f"PSI party {name!r}"
    with task(progress, f"PSI {name}", 3, owner=owner) as running:
        own_cert = run_certificate(name)
        mine = SpuHello(kind, len(encoded), form, SPU_PROTOCOL,
                        new_link_id() if first else "", hosts, own_cert.cert)
        if first:
            party.send(peer, "hello", mine)
        theirs = party.recv(peer, "hello")
        if isinstance(theirs, Hello):
            raise ValidationError(
                f"PSI: party {name!r} runs engine='spu' but party {peer!r} runs "
                "engine='dh'; both must use the same 'engine'")
        if not isinstance(theirs, SpuHello):
            raise ProtocolError(f"party {peer!r} sent a malformed hello", party=name,
                                step="hello")
        limit.check(name, peer, theirs.n, "announced {n} IDs", "hello")
        if not first:
            mine = replace(mine, link_id=theirs.link_id)
            party.send(peer, "hello", mine)
        _check_spu_hello(name, peer, mine, theirs)
        check_run_certificate(theirs.cert, peer, name)
        running.advance(info=f"{len(encoded)} IDs here, {theirs.n} at {peer}")
        with tempfile.TemporaryDirectory(prefix="islands-spu-tls-") as folder:
            tls = pinned_tls(Path(folder), own_cert, theirs.cert)
            engine = SpuParty(name, peer, SpuLink(mine.link_id, hosts, 0 if first else 1, tls),
                              timeout=party.timeout)
            try:
                engine.start(encoded)
                rows = engine.finish()
                running.advance(info=f"{rows.size} common IDs")
                # the peer's word that its SPU has the result: only then is this party's
                # SPU stopped (SpuParty.finish)
                party.send(peer, "done", int(rows.size))
                count = party.recv(peer, "done")
            finally:
                engine.close()
        running.advance()
    if type(count) is not int or count != rows.size:
        raise ProtocolError(f"PSI party {name!r}: SPU found {rows.size} common IDs here but "
                            f"party {peer!r} reports {count!r}", party=name, step="done")
    if rows.size == 0:
        raise _empty(name, peer)
    common, rows = _aligned(rows, values, encoded, kind)
    return Alignment(common, rows, theirs.n)


def _check_spu_hello(name: str, peer: str, mine: SpuHello, theirs: SpuHello) -> None:
    """Refuse a peer whose hello differs from this party's, naming the setting."""
    _check_same_ids(name, peer, mine, theirs)
    for setting, here, there in (("SPU protocol", mine.protocol, theirs.protocol),
                                 ("spu (SPU addresses)", mine.hosts, theirs.hosts),
                                 ("SPU link ID", mine.link_id, theirs.link_id)):
        if here != there:
            raise ValidationError(
                f"PSI: party {name!r} runs engine='spu' with {setting} {here!r} but party "
                f"{peer!r} with {there!r}; both must use the same, so neither SPU starts")
    if not (len(mine.link_id) == _LINK_ID and mine.link_id.startswith("islands-psi-")):
        raise ProtocolError(f"party {peer!r} sent a malformed SPU link ID", party=name,
                            step="hello")


def initiator(party: Party, *, peer: str, ids: Any, workers: int | None = None,
              normalize: Normalization = DEFAULT_NORMALIZE, max_peer_size: int | None = None,
              max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO,
              engine: Engine = DEFAULT_ENGINE, spu: tuple[str, str] | None = None,
              progress: ProgressOption = None) -> Alignment:
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
    max_peer_size
        The largest set this party lets B enter, an int >= 1; when given, it replaces
        ``max_peer_ratio``. Every ID B enters may be a guess, and B learns which of them
        A holds.
    max_peer_ratio
        Without ``max_peer_size``, the limit is ``max_peer_ratio`` times A's own number
        of IDs (at least 1): a finite number > 0, default
        :data:`DEFAULT_MAX_PEER_RATIO` (10, see there why); None with no
        ``max_peer_size`` accepts any size.
    engine
        ``"dh"`` (default) or ``"spu"``: SecretFlow SPU's RR22 between this party's SPU
        and the peer's, over SPU's own link (see :func:`_spu`); needs ``spu``.
    spu
        With ``engine="spu"``: the ``host:port`` of the initiator's SPU and of the
        responder's (each listens on its own); both parties must give the same.
    progress
        False/None (default), True for a bar, or a callable receiving each
        :class:`~islands.progress.ProgressUpdate`: four steps (hello, own IDs
        blinded, the peer's IDs blinded, matched), with counts only.

    Returns
    -------
    Alignment

    Raises
    ------
    ValidationError
        For empty, mixed or repeated IDs, two IDs that normalise alike, or a limit out
        of range (before anything is sent), IDs of another kind or another
        normalisation than B's, or an empty intersection.
    ProtocolError
        When B announces, or sends, more IDs than the limit: before A's blinded IDs
        leave.
    """
    values, encoded, kind, form, limit = _prepare(party, ids, normalize, workers,
                                                  max_peer_size, max_peer_ratio, engine, spu)
    if spu is not None:
        return _spu(party, peer, values, encoded, kind, form, limit, spu, True, progress)
    with task(progress, f"PSI {party.name}", 4, owner=f"PSI party {party.name!r}") as running:
        salt = secrets.token_bytes(_SALT_BYTES)
        theirs = _hello(party, peer, Hello(kind, len(encoded), form, salt), first=True,
                        limit=limit)
        running.advance(info=f"{len(encoded)} IDs here, {theirs.n} at {peer}")
        key = psi.new_key()
        perm = _shuffle(len(encoded))
        mine = psi.blind(key, psi.hash_to_curve(encoded, salt, workers=workers),
                         workers=workers)
        running.advance(info=f"{len(encoded)} own IDs blinded")
        # B's blinded IDs are counted before A's leave; the two parties still blind at once
        theirs_b = _points(party.recv(peer, "blinded"), theirs.n, peer, "blinded", party,
                           limit)
        party.send(peer, "blinded", mine[perm])
        del mine
        theirs_ab = psi.blind(key, theirs_b, workers=workers, name="blinded IDs",
                              owner=f"PSI party {party.name!r} (from {peer!r})")
        running.advance(info=f"{theirs.n} IDs of {peer} blinded")
        double = _points(party.recv(peer, "double"), len(encoded), peer, "double", party)
        index = {row.tobytes(): int(perm[i]) for i, row in enumerate(double)}
        hits = [(j, index[row.tobytes()]) for j, row in enumerate(theirs_ab)
                if row.tobytes() in index]
        positions = np.asarray(sorted(j for j, _ in hits), dtype=np.int64)
        party.send(peer, "matches", positions)
        running.advance(info=f"{len(hits)} common IDs")
    if not hits:
        raise _empty(party.name, peer)
    rows = np.asarray([r for _, r in hits], dtype=np.int64)
    common, rows = _aligned(rows, values, encoded, kind)
    return Alignment(common, rows, theirs.n)


def responder(party: Party, *, peer: str, ids: Any, workers: int | None = None,
              normalize: Normalization = DEFAULT_NORMALIZE, max_peer_size: int | None = None,
              max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO,
              engine: Engine = DEFAULT_ENGINE, spu: tuple[str, str] | None = None,
              progress: ProgressOption = None) -> Alignment:
    """Play B: blind A's values and its own, and learn the common IDs from A.

    Parameters and errors as :func:`initiator`, with the roles swapped: B refuses an A
    whose announced size is above its limit before B's hello, and one that sends more
    blinded IDs than that before B's ``double`` (B's own blinded IDs have left by then;
    they let A test nothing without ``double``).
    """
    values, encoded, kind, form, limit = _prepare(party, ids, normalize, workers,
                                                  max_peer_size, max_peer_ratio, engine, spu)
    if spu is not None:
        return _spu(party, peer, values, encoded, kind, form, limit, spu, False, progress)
    with task(progress, f"PSI {party.name}", 4, owner=f"PSI party {party.name!r}") as running:
        theirs = _hello(party, peer, Hello(kind, len(encoded), form), first=False,
                        limit=limit)
        if not isinstance(theirs.salt, bytes) or len(theirs.salt) != _SALT_BYTES:
            raise ProtocolError(f"party {peer!r} sent no valid salt", party=party.name,
                                step="hello")
        running.advance(info=f"{len(encoded)} IDs here, {theirs.n} at {peer}")
        key = psi.new_key()
        perm = _shuffle(len(encoded))
        mine = psi.blind(key, psi.hash_to_curve(encoded, theirs.salt, workers=workers),
                         workers=workers)
        party.send(peer, "blinded", mine[perm])
        del mine
        running.advance(info=f"{len(encoded)} own IDs blinded")
        theirs_a = _points(party.recv(peer, "blinded"), theirs.n, peer, "blinded", party,
                           limit)
        party.send(peer, "double", psi.blind(key, theirs_a, workers=workers,
                                             name="blinded IDs",
                                             owner=f"PSI party {party.name!r} (from {peer!r})"))
        running.advance(info=f"{theirs.n} IDs of {peer} blinded")
        positions = np.asarray(party.recv(peer, "matches"))
        running.advance(info=f"{positions.size} common IDs")
    if (positions.dtype.kind not in "iu" or positions.ndim != 1
            or (positions.size and (positions.min() < 0 or positions.max() >= len(encoded)))
            or np.unique(positions).size != positions.size):
        raise ProtocolError(f"party {peer!r} sent malformed matches", party=party.name,
                            step="matches")
    if positions.size == 0:
        raise _empty(party.name, peer)
    rows = perm[positions.astype(np.int64)]
    common, rows = _aligned(rows, values, encoded, kind)
    return Alignment(common, rows, theirs.n)
