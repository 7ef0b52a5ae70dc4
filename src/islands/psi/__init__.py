"""Private set intersection: find the IDs two parties share, and nothing else.

:func:`intersect` runs the two-party Diffie–Hellman protocol of
:mod:`islands.psi.protocol` (on Curve25519, :mod:`islands.crypto.psi`) in this process;
the roles :func:`initiator` and :func:`responder` run the same protocol between
organisations. Vertical learning uses it to align rows before training.

Each party learns the intersection and the other's set size. PSI cannot tell a guessed
ID from a real one, so each party bounds the set it accepts from the other
(``max_peer_size``, or ``max_peer_ratio`` times its own size, ten by default).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import islands.runtime as runtime
from islands.crypto.processes import check_workers
from islands.crypto.psi import Normalization, encode_ids
from islands.errors import ValidationError
from islands.psi.config import DEFAULT_NORMALIZE, DEFAULT_TIMEOUT, PsiConfig
from islands.psi.protocol import (
    DEFAULT_MAX_PEER_RATIO,
    Alignment,
    check_peer_limit,
    initiator,
    responder,
)

__all__ = ["DEFAULT_MAX_PEER_RATIO", "Alignment", "PsiConfig", "align", "check_peer_limit",
           "initiator", "intersect", "responder"]


def align(ids_a: Any, ids_b: Any, *, workers: int | None = None,
          timeout: float = DEFAULT_TIMEOUT, normalize: Normalization = DEFAULT_NORMALIZE,
          max_peer_size: int | None = None,
          max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO,
          names: tuple[str, str] = ("a", "b"), labels: tuple[str, str] = ("ids_a", "ids_b"),
          owner: str = "align") -> tuple[Alignment, Alignment]:
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
        before any message); or when the sets do not intersect.
    ProtocolError
        When one party's set is larger than the other accepts, naming both parties, the
        limit and the size, before anything that tests an ID leaves.
    """
    return _align(ids_a, ids_b, workers=workers, timeout=timeout, normalize=normalize,
                  max_peer_size=max_peer_size, max_peer_ratio=max_peer_ratio, owner=owner,
                  names=names, labels=labels)


def _align(ids_a: Any, ids_b: Any, *, workers: int | None, timeout: float,
           normalize: Normalization, max_peer_size: int | None,
           max_peer_ratio: float | None, owner: str, names: tuple[str, str] = ("a", "b"),
           labels: tuple[str, str] = ("ids_a", "ids_b")) -> tuple[Alignment, Alignment]:
    # clear errors before any run
    check_workers(workers, owner)
    config = PsiConfig.build(owner, normalize=normalize, max_peer_size=max_peer_size,
                             max_peer_ratio=max_peer_ratio, timeout=timeout)
    _, kind_a = encode_ids(ids_a, labels[0], owner, normalize=config.normalize)
    _, kind_b = encode_ids(ids_b, labels[1], owner, normalize=config.normalize)
    if kind_a != kind_b:
        raise ValidationError(f"{owner}: {labels[0]} holds {kind_a} IDs but {labels[1]} "
                              f"holds {kind_b} IDs; use one kind (1 and '1' never match)")
    a, b = names
    settings = config.model_dump(exclude={"timeout"})
    run = runtime.run_local({a: partial(initiator, peer=b, ids=ids_a, workers=workers,
                                        **settings),
                             b: partial(responder, peer=a, ids=ids_b, workers=workers,
                                        **settings)},
                            timeout=config.timeout, blas_threads=None)
    return run.results[a], run.results[b]


def intersect(ids_a: Any, ids_b: Any, *, workers: int | None = None,
              timeout: float = DEFAULT_TIMEOUT, normalize: Normalization = DEFAULT_NORMALIZE,
              max_peer_size: int | None = None,
              max_peer_ratio: float | None = DEFAULT_MAX_PEER_RATIO) -> list[Any]:
    """Return the IDs ``ids_a`` and ``ids_b`` share, found by a two-party PSI protocol.

    The IDs are ``ids_a``'s own values. The order is the aligned order both parties agree
    on: sorted (ints by value, strings by their normalised form, bytes lexicographically).
    Strings are compared after Unicode ``normalize`` (NFC by default), so a composed "é"
    matches "e" + combining accent. See :func:`align` for the parameters and errors.

    Examples
    --------
    >>> intersect(["ann", "bob", "eve"], ["eve", "ann", "zoe"])
    ['ann', 'eve']
    """
    a, _ = _align(ids_a, ids_b, workers=workers, timeout=timeout, normalize=normalize,
                  max_peer_size=max_peer_size, max_peer_ratio=max_peer_ratio,
                  owner="intersect")
    return a.ids
