"""Private set intersection: find the IDs two parties share, and nothing else.

:func:`intersect` runs the two-party Diffie–Hellman protocol of
:mod:`islands.psi.protocol` (on Curve25519, :mod:`islands.crypto.psi`) in this process;
the roles :func:`initiator` and :func:`responder` run the same protocol between
organisations. Vertical learning uses it to align rows before training.

``engine="spu"`` runs SecretFlow SPU's RR22 PSI instead (:mod:`islands.psi.spu_engine`): two
SPU processes, one per party, in the separate environment ``make spu`` builds, talking
over loopback; same result, same checks, about twenty times faster at a million IDs. The
roles run it between organisations too (``engine="spu"`` with ``spu``, the two SPU
addresses), after a hello over islands' channel that also pins each SPU's certificate.

Each party learns the intersection and the other's set size. PSI cannot tell a guessed
ID from a real one, so each party bounds the set it accepts from the other
(``max_peer_size``, or ``max_peer_ratio`` times its own size, ten by default).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import numpy as np

import islands.runtime as runtime
from islands.crypto.processes import check_workers
from islands.crypto.psi import Normalization, encode_ids
from islands.errors import ProtocolError, ValidationError
from islands.progress import ProgressOption, check_progress, task
from islands.psi.config import (
    DEFAULT_ENGINE,
    DEFAULT_NORMALIZE,
    DEFAULT_TIMEOUT,
    Engine,
    PsiConfig,
)
from islands.psi.protocol import (
    DEFAULT_MAX_PEER_RATIO,
    Alignment,
    _aligned,
    _empty,
    _Limit,
    check_peer_limit,
    initiator,
    responder,
)
from islands.psi.spu_engine import (
    SpuAddressInUse,
    SpuLink,
    SpuParty,
    finish_all,
    free_loopback_hosts,
    new_link_id,
)

__all__ = ["DEFAULT_MAX_PEER_RATIO", "Alignment", "Engine", "PsiConfig", "align",
           "check_peer_limit", "initiator", "intersect", "responder"]


def align(ids_a: Any, ids_b: Any, *, workers: int | None = None,
          timeout: float = DEFAULT_TIMEOUT, normalize: Normalization = DEFAULT_NORMALIZE,
          max_peer_size: int | None = None,
          max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO,
          names: tuple[str, str] = ("a", "b"), labels: tuple[str, str] = ("ids_a", "ids_b"),
          owner: str = "align", engine: Engine = DEFAULT_ENGINE,
          progress: ProgressOption = None) -> tuple[Alignment, Alignment]:
    """Run PSI between two simulated parties (A initiates, B responds); return both sides.

    Parameters
    ----------
    ids_a, ids_b
        Each party's IDs: ints, strings or bytes (one kind for both; NumPy integer,
        string and bytes scalars count as such), unique, non-empty.
    workers
        Processes each party uses for the curve arithmetic (default: the usable cores),
        None or an int >= 1.
    timeout
        Seconds a party waits for one message, > 0 and finite.
    normalize
        The Unicode normalisation form both parties bring string IDs to before hashing:
        ``"NFC"`` (default), ``"NFKC"``, ``"NFD"``, ``"NFKD"``, or None to compare the
        code points as given. Ints and bytes are never changed.
    max_peer_size, max_peer_ratio
        The largest set each party accepts from the other: ``max_peer_size`` (an int
        >= 1) when given, else ``max_peer_ratio`` (a finite number > 0, default 10)
        times the party's own number of IDs; both None accept any size. Each party
        applies it to the other's set (see :func:`islands.psi.initiator`).
    names, labels, owner
        The two parties' names (errors during the run name them), what errors call the
        two ID lists, and who is calling (an estimator names itself).
    engine
        ``"dh"`` (default): Diffie–Hellman PSI in islands, ``workers`` processes per
        party. ``"spu"``: SecretFlow SPU's RR22, one SPU process per party over loopback
        in the environment ``make spu`` builds (``workers`` is not used); ``timeout`` then
        bounds the whole run.
    progress
        False/None (default), True for one bar per party, or a callable receiving each
        :class:`~islands.progress.ProgressUpdate` (step names and counts only).

    Returns
    -------
    (Alignment, Alignment)
        A's and B's: the same common IDs in the same order, each as its party gave them
        (they may differ in Unicode form), and each party's rows.

    Raises
    ------
    ValidationError
        Naming ``ids_a`` or ``ids_b`` for empty, mixed-kind or repeated IDs (with the
        first offending position), for a string that is not valid Unicode (a lone
        surrogate: pass such IDs as bytes), for two IDs that normalise to the same
        string, for IDs of two different kinds; naming ``normalize``, ``workers`` or
        ``timeout`` when out of range, or ``max_peer_size`` or ``max_peer_ratio`` (all
        before any message); or when the sets do not intersect; for ``engine="spu"``
        when SPU's environment is missing (saying how to build it).
    ProtocolError
        When one party's set is larger than the other accepts, naming both parties, the
        limit and the size, before anything that tests an ID leaves; for
        ``engine="spu"``, when SPU fails or its result does not check out
        (:class:`~islands.errors.PeerTimeoutError` when it runs past ``timeout``).
    """
    return _align(ids_a, ids_b, workers=workers, timeout=timeout, normalize=normalize,
                  max_peer_size=max_peer_size, max_peer_ratio=max_peer_ratio, owner=owner,
                  names=names, labels=labels, engine=engine, progress=progress)


def _align(ids_a: Any, ids_b: Any, *, workers: int | None, timeout: float,
           normalize: Normalization, max_peer_size: int | None,
           max_peer_ratio: float | None, owner: str, names: tuple[str, str] = ("a", "b"),
           labels: tuple[str, str] = ("ids_a", "ids_b"), engine: Engine = DEFAULT_ENGINE,
           progress: ProgressOption = None) -> tuple[Alignment, Alignment]:
    # clear errors before any run
    check_workers(workers, owner)
    report = check_progress(progress, owner)
    config = PsiConfig.build(owner, normalize=normalize, max_peer_size=max_peer_size,
                             max_peer_ratio=max_peer_ratio, timeout=timeout, engine=engine)
    if config.engine == "spu":
        with task(report, "PSI (SPU)", 1, owner=owner):
            return _align_spu(ids_a, ids_b, config, names, labels, owner)
    _check_ids(ids_a, ids_b, config, labels, owner)
    a, b = names
    settings = config.model_dump(exclude={"timeout", "engine"})
    run = runtime.run_local({a: partial(initiator, peer=b, ids=ids_a, workers=workers,
                                        progress=report, **settings),
                             b: partial(responder, peer=a, ids=ids_b, workers=workers,
                                        progress=report, **settings)},
                            timeout=config.timeout, blas_threads=None)
    return run.results[a], run.results[b]


def _check_ids(ids_a: Any, ids_b: Any, config: PsiConfig, labels: tuple[str, str],
               owner: str) -> tuple[list[bytes], list[bytes], str]:
    """Encode both parties' IDs (every error before a run); return them and their kind."""
    enc_a, kind_a = encode_ids(ids_a, labels[0], owner, normalize=config.normalize)
    enc_b, kind_b = encode_ids(ids_b, labels[1], owner, normalize=config.normalize)
    if kind_a != kind_b:
        raise ValidationError(f"{owner}: {labels[0]} holds {kind_a} IDs but {labels[1]} "
                              f"holds {kind_b} IDs; use one kind (1 and '1' never match)")
    return enc_a, enc_b, kind_a


def _values(ids: Any) -> list[Any]:
    return ids.tolist() if isinstance(ids, np.ndarray) else list(ids)


_SPU_TRIES = 3
"""Runs of a local SPU PSI that may start, each on fresh ports, when a port was taken."""
_SPU_MIN_LEFT = 5.0
"""Seconds of the timeout a new start needs (SPU's import and link take about two)."""


def _align_spu(ids_a: Any, ids_b: Any, config: PsiConfig, names: tuple[str, str],
               labels: tuple[str, str], owner: str) -> tuple[Alignment, Alignment]:
    """Run SPU's PSI between two local SPU processes; return both parties' alignments.

    The two workers start first (importing SPU takes about a second) and wait while the
    IDs are checked; they get the IDs, and open their link, only when every check passed.
    Their ports were free when chosen, but SPU listens on them only seconds later; when
    another process took one meanwhile (its worker says so at once), the run starts
    again on fresh ports, at most :data:`_SPU_TRIES` times within the timeout.
    """
    a, b = names
    deadline = time.monotonic() + config.timeout
    checked: tuple[list[bytes], list[bytes], str] | None = None
    for attempt in range(1, _SPU_TRIES + 1):
        hosts = free_loopback_hosts(2)
        link = new_link_id()
        left = deadline - time.monotonic() if attempt > 1 else config.timeout
        parties = [SpuParty(a, b, SpuLink(link, (hosts[0], hosts[1]), 0), timeout=left),
                   SpuParty(b, a, SpuLink(link, (hosts[0], hosts[1]), 1), timeout=left)]
        try:
            for p in parties:
                p.launch()
            if checked is None:
                checked = _check_ids(ids_a, ids_b, config, labels, owner)
                sizes = (len(checked[0]), len(checked[1]))
                # each party's limit on the other's set, as the roles apply it, before SPU
                for me, peer, own, seen in ((a, b, sizes[0], sizes[1]),
                                            (b, a, sizes[1], sizes[0])):
                    _Limit.of(own, config.max_peer_size, config.max_peer_ratio).check(
                        me, peer, seen, "announced {n} IDs", "hello")
            enc_a, enc_b, kind = checked
            parties[0].submit(enc_a)
            parties[1].submit(enc_b)
            for p in parties:
                p.wait_ready()
            for p in parties:
                p.go()
            rows = finish_all(parties)
            break
        except SpuAddressInUse:
            if attempt == _SPU_TRIES or deadline - time.monotonic() < _SPU_MIN_LEFT:
                raise
        finally:
            for p in parties:
                p.close()
    if rows[0].size == 0 and rows[1].size == 0:
        raise _empty(a, b)
    (ids_ra, rows_a), (ids_rb, rows_b) = (_aligned(rows[0], _values(ids_a), enc_a, kind),
                                          _aligned(rows[1], _values(ids_b), enc_b, kind))
    if [enc_a[i] for i in rows_a.tolist()] != [enc_b[i] for i in rows_b.tolist()]:
        raise ProtocolError(f"PSI parties {a!r} and {b!r}: SPU gave the two parties "
                            "different intersections", party=a, step="spu")
    return (Alignment(ids_ra, rows_a, len(enc_b)),
            Alignment(ids_rb, rows_b, len(enc_a)))


def intersect(ids_a: Any, ids_b: Any, *, workers: int | None = None,
              timeout: float = DEFAULT_TIMEOUT, normalize: Normalization = DEFAULT_NORMALIZE,
              max_peer_size: int | None = None,
              max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO,
              engine: Engine = DEFAULT_ENGINE, progress: ProgressOption = None) -> list[Any]:
    """Return the IDs ``ids_a`` and ``ids_b`` share, found by a two-party PSI protocol.

    The IDs are ``ids_a``'s own values. The order is the aligned order both parties agree
    on: sorted (ints by value, strings by their normalised form, bytes lexicographically).
    Strings are compared after Unicode ``normalize`` (NFC by default), so a composed "é"
    matches "e" + combining accent. ``engine="spu"`` finds the same IDs with SecretFlow
    SPU's RR22 (needs ``make spu``). See :func:`align` for the parameters and errors.

    Examples
    --------
    >>> intersect(["ann", "bob", "eve"], ["eve", "ann", "zoe"])
    ['ann', 'eve']
    """
    a, _ = _align(ids_a, ids_b, workers=workers, timeout=timeout, normalize=normalize,
                  max_peer_size=max_peer_size, max_peer_ratio=max_peer_ratio,
                  owner="intersect", engine=engine, progress=progress)
    return a.ids
