"""Weight of evidence and information value across vertically partitioned parties.

The feature-selection step credit federations run before a scorecard or a SecureBoost
model: every feature is cut into quantile bins (SecureBoost's own,
:func:`~islands.vfl.secureboost.maths.bin_edges`, missing values in a bin of their own)
and, with e_b and n_b the events (y = 1) and non-events (y = 0) of bin b, E and N their
totals (Siddiqi, *Credit Risk Scorecards*, Wiley 2006),

    WOE_b = ln((e_b/E) / (n_b/N)),    IV = Σ_b (e_b/E − n_b/N)·WOE_b,

the sum running over every bin that holds a row, the missing bin included (its WOE is
reported on its own). A bin with no event or no non-event has an infinite WOE; such a
bin gets 0.5 added to both of its counts (the Haldane–Anscombe correction of a log odds
ratio with an empty cell: Haldane, *Annals of Human Genetics* 20, 1956), in its WOE and
in its IV term alike, so every term is (p − q)·ln(p/q) ≥ 0. Bins with no row at all
have no WOE (NaN) and add nothing. IV strength, as scorecard practice reads it
(:func:`iv_strength`): below 0.02 useless, to 0.1 weak, to 0.3 medium, to 0.5 strong,
above 0.5 suspicious (too good: check for a leak of the label).

The protocol, on SecureBoost's machinery (:mod:`~islands.vfl.secureboost.protocol`):

=======  ================  =================================================================
tag      sender → to       payload
=======  ================  =================================================================
hello    passive → active  :class:`~islands.vfl.secureboost.protocol.Hello`: rows, features
setup    active → passive  :class:`~islands.vfl.secureboost.protocol.Setup`: the OU public
                           key (empty with ``he="none"``) and the plan text
                           (:class:`~islands.vfl.secureboost.config.WoeConfig`), which each
                           passive party compares with its own before anything else
labels   active → passive  :class:`Labels`: ⟦y_i·2^53 + (1 − y_i)⟧ per row, packed as
                           SecureBoost packs (g, h) (:func:`~.packing.pack`, g = y,
                           h = 1 − y); y and 1 − y themselves with ``he="none"``
counts   passive → active  :class:`Counts`: per feature and bin (missing last),
                           ⟦Σ y·2^53 + (1 − y)⟧ = ⟦e_b·2^53 + n_b⟧ by
                           :meth:`~islands.crypto.heu.OuCipher.bucket_sums`, k bins per
                           ciphertext (cipher compression)
=======  ================  =================================================================

The active party decrypts in range (:meth:`~islands.crypto.heu.OuKeyOwner.decrypt`),
refuses counts that are negative or whose bins do not add up to its own E and N for
every feature, and computes every WOE and IV; its own features' it computes in the clear.

What each party learns (honest-but-curious parties, as SecureBoost assumes). A passive
party learns nothing of the labels: it sees only ciphertexts (OU is semantically secure
under the p-subgroup assumption) and sends nothing else back. The active party learns,
for every passive feature, the event and non-event counts of each bin: that is the
statistic itself. It does not learn the bins' thresholds (they stay with the passive
party), only how many rows, and how many events, fall in the k-th bin of feature j
(and so how many bins the feature uses, how many of its values are missing and, with
quantile bins, roughly the shape of its relation to the label). The checks catch
counts that do not add up, not a passive party that bins its own data dishonestly; and
nothing stops a dishonest active party from encrypting chosen values (powers of two)
instead of labels to read each row's bin, as in SecureBoost's training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.config import RunSettings
from islands.crypto import heu
from islands.crypto.processes import check_workers
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party, Transcript, run_local, wire
from islands.validation import as_float_array, check_values
from islands.vfl.estimator import passive_names
from islands.vfl.keys import warn_insecure_keys
from islands.vfl.secureboost import packing
from islands.vfl.secureboost.config import WoeConfig
from islands.vfl.secureboost.estimator import party_blocks
from islands.vfl.secureboost.maths import Ints
from islands.vfl.secureboost.protocol import (
    binned,
    check_features,
    join_federation,
    open_federation,
)

__all__ = [
    "SMOOTHING",
    "ActiveStats",
    "Counts",
    "FeatureStats",
    "InformationValues",
    "Labels",
    "PassiveStats",
    "active",
    "bin_counts",
    "information_values",
    "iv_strength",
    "passive",
    "woe_iv",
]

SMOOTHING = 0.5
"""Added to both counts of a bin with no event or no non-event (Haldane–Anscombe)."""


# ---------------------------------------------------------------------------- maths


def bin_counts(codes: NDArray[np.int8], y: Ints, buckets: int) -> tuple[Ints, Ints]:
    """Return the events (y = 1) and non-events (y = 0) of every feature's bins.

    ``codes`` are the bins (rows × features, :func:`~.maths.apply_bins`), ``y`` 0/1;
    returns two int64 arrays of shape (features, ``buckets``).
    """
    features = codes.shape[1]
    flat = (codes.astype(np.int64) + np.arange(features) * buckets).ravel()
    size = features * buckets
    total = np.bincount(flat, minlength=size)
    events = np.bincount(flat[np.repeat(y == 1, features)], minlength=size)
    shape = (features, buckets)
    return events.reshape(shape).astype(np.int64), (total - events).reshape(shape).astype(np.int64)


def woe_iv(events: Ints, nonevents: Ints, *, smoothing: float = SMOOTHING
           ) -> tuple[Array, Array]:
    """Return every bin's WOE and every feature's IV (module docstring).

    Parameters
    ----------
    events, nonevents
        Counts per feature and bin, (features, bins); each row's sums are E and N.
    smoothing
        Added to both counts of a bin with a zero count (> 0).

    Returns
    -------
    woe, iv
        (features, bins), NaN for a bin without rows; and (features,).

    Raises
    ------
    ValueError
        If a feature's counts hold no event or no non-event, or ``smoothing`` ≤ 0.
    """
    if not smoothing > 0:
        raise ValueError(f"smoothing must be > 0; got {smoothing}")
    e, n = np.asarray(events, np.float64), np.asarray(nonevents, np.float64)
    E, N = e.sum(axis=1, keepdims=True), n.sum(axis=1, keepdims=True)
    if np.any(E == 0) or np.any(N == 0):
        raise ValueError("WOE needs both events and non-events")
    filled = (e + n) > 0
    extra = np.where(filled & ((e == 0) | (n == 0)), smoothing, 0.0)
    p, q = (e + extra) / E, (n + extra) / N
    with np.errstate(divide="ignore", invalid="ignore"):
        woe = np.where(filled, np.log(p / q), np.nan)
    iv = np.where(filled, (p - q) * np.nan_to_num(woe), 0.0).sum(axis=1)
    return woe, iv


def iv_strength(iv: float) -> str:
    """Return the usual reading of an IV: useless, weak, medium, strong or suspicious.

    Below 0.02, 0.1, 0.3 and up to 0.5 inclusive; above 0.5 suspicious.
    """
    if iv < 0.02:
        return "useless"
    if iv < 0.1:
        return "weak"
    if iv < 0.3:
        return "medium"
    return "strong" if iv <= 0.5 else "suspicious"


# ---------------------------------------------------------------------------- results


@dataclass(frozen=True)
class FeatureStats:
    """One feature's bins, WOE and IV.

    Everything but ``edges`` is what the active party knows; ``edges`` (the cut points,
    bin b holding ``edges[b-1] ≤ x < edges[b]``) are known only to ``party``, the
    feature's holder: the active party's protocol result leaves them None for a passive
    party's feature, and :func:`information_values`, which plays every party, fills them
    in.

    Attributes
    ----------
    party, feature
        The holder and the column in its matrix.
    iv
        The information value, the missing bin included.
    woe, events, nonevents
        Per value bin (``max_bins`` of them, empty ones last with WOE NaN).
    woe_missing, events_missing, nonevents_missing
        The missing bin (WOE NaN when no value is missing).
    edges
        The cut points, or None where the party holding the result does not know them.
    """

    party: str
    feature: int
    iv: float
    woe: Array
    events: Ints
    nonevents: Ints
    woe_missing: float
    events_missing: int
    nonevents_missing: int
    edges: Array | None

    @property
    def strength(self) -> str:
        """Return :func:`iv_strength` of the IV."""
        return iv_strength(self.iv)


def _features(party: str, events: Ints, nonevents: Ints,
              edges: Sequence[Array] | None) -> list[FeatureStats]:
    woe, iv = woe_iv(events, nonevents)
    return [FeatureStats(party, j, float(iv[j]), woe[j, :-1], events[j, :-1], nonevents[j, :-1],
                         float(woe[j, -1]), int(events[j, -1]), int(nonevents[j, -1]),
                         None if edges is None else edges[j])
            for j in range(events.shape[0])]


@dataclass(frozen=True)
class ActiveStats:
    """What the active party ends with: every feature's statistics and its totals E, N."""

    features: list[FeatureStats]
    events: int
    nonevents: int


@dataclass(frozen=True)
class PassiveStats:
    """What a passive party ends with: its bins' cut points (its own, never sent)."""

    edges: list[Array]


@dataclass(frozen=True)
class InformationValues:
    """WOE and IV of every party's features (:func:`information_values`).

    Attributes
    ----------
    features
        The active party's features, then each passive party's, in column order.
    parties
        The party names, active first ("B", then "A" or "A1" … "Ak").
    events, nonevents
        E and N.
    event_label
        The class counted as the event (the larger of the two).
    max_bins
        Value bins per feature.
    transcript
        Every message of the run.
    """

    features: tuple[FeatureStats, ...]
    parties: tuple[str, ...]
    events: int
    nonevents: int
    event_label: Any
    max_bins: int
    transcript: Transcript | None = field(default=None, repr=False, compare=False)

    def of(self, party: str) -> list[FeatureStats]:
        """Return one party's features, in column order."""
        if party not in self.parties:
            raise ValidationError(f"no party {party!r}; parties: {list(self.parties)}")
        return [f for f in self.features if f.party == party]

    def iv(self) -> dict[str, Array]:
        """Return each party's IVs, one per column."""
        return {p: np.array([f.iv for f in self.of(p)]) for p in self.parties}

    def table(self) -> dict[str, list[Any]]:
        """Return party, feature, IV, strength and missing share as columns, by IV descending.

        A plain dict of lists (``pandas.DataFrame(result.table())`` makes a frame of it);
        ties keep party and column order.
        """
        rows = sorted(self.features, key=lambda f: -f.iv)
        total = self.events + self.nonevents
        return {"party": [f.party for f in rows], "feature": [f.feature for f in rows],
                "iv": [f.iv for f in rows], "strength": [f.strength for f in rows],
                "missing": [(f.events_missing + f.nonevents_missing) / total for f in rows]}

    def select(self, threshold: float) -> dict[str, list[int]]:
        """Return, per party, the columns whose IV is at least ``threshold``."""
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
                or not math.isfinite(threshold):
            raise ValidationError(f"threshold must be a finite number; got {threshold!r}")
        return {p: [f.feature for f in self.of(p) if f.iv >= threshold] for p in self.parties}


# ---------------------------------------------------------------------------- messages


@wire.register(name="woe.Labels")
@dataclass(frozen=True)
class Labels:
    """Each row's (y, 1 − y): one packed ciphertext blob, or two int64 arrays in the clear."""

    values: list[Any]


@wire.register(name="woe.Counts")
@dataclass(frozen=True)
class Counts:
    """Per feature and bin (e, n): one compressed ciphertext blob, or an int64 (2, k) array."""

    values: list[Any]


# ---------------------------------------------------------------------------- the active party


def _labels(y: Any, rows: int, owner: str) -> Ints:
    labels = as_float_array(y, "y", owner)
    if labels.ndim != 1 or labels.size != rows:
        raise ValidationError(f"{owner}: y must be 1-D with one label per row ({rows}); got "
                              f"shape {labels.shape}")
    check_values(labels, "y", owner)
    if not np.all((labels == 0) | (labels == 1)) or np.unique(labels).size != 2:
        raise ValidationError(f"{owner}: y must hold both 0 and 1 and nothing else; got "
                              f"{np.unique(labels)[:5].tolist()}")
    return labels.astype(np.int64)


def active(party: Party, X: Any, y: Any, *, passive: Sequence[str], config: WoeConfig,
           workers: int | None = None) -> ActiveStats:
    """Play the active party: hold the labels and the key, compute every WOE and IV.

    Parameters
    ----------
    X
        The active party's features of the aligned rows (NaN: missing).
    y
        The labels, 0 or 1, both present.
    passive
        The passive parties' names.
    config
        The plan, which every passive party compares with its own.
    workers
        Worker processes for encryption.
    """
    me, owner = party.name, f"party {party.name!r}"
    x = check_features(X, "X", owner)
    labels = _labels(y, x.shape[0], owner)
    E, N = int(labels.sum()), int(labels.size - labels.sum())
    hellos, key = open_federation(party, x.shape[0], passive=passive, config=config,
                                  workers=workers)
    cipher = None if key is None else key.cipher()
    if cipher is None:
        values: list[Any] = [labels, 1 - labels]
    else:
        values = [cipher.to_bytes(cipher.encrypt(packing.pack(labels, 1 - labels)))]
    for name in passive:
        party.send(name, "labels", Labels(values))
    buckets = config.max_bins + 1
    edges, codes = binned(x, config.max_bins)
    out = _features(me, *bin_counts(codes, labels, buckets), edges)
    per = packing.per_plaintext(cipher.plaintext_bits) if cipher is not None else 1
    for name, hello in zip(passive, hellos, strict=True):
        msg = party.recv(name, "counts")
        events, nonevents = _read_counts(msg, hello.features * buckets, buckets, key, cipher,
                                         per, name, me)
        shape = (hello.features, buckets)
        events, nonevents = events.reshape(shape), nonevents.reshape(shape)
        if np.any(events.sum(axis=1) != E) or np.any(nonevents.sum(axis=1) != N):
            raise ProtocolError(f"party {name!r} sent bin counts that do not add up to the "
                                f"{E} events and {N} non-events", party=me, step="counts")
        out += _features(name, events, nonevents, None)
    return ActiveStats(out, E, N)


def _read_counts(msg: Any, count: int, buckets: int, key: heu.OuKeyOwner | None,
                 cipher: heu.OuCipher | None, per: int, name: str, me: str
                 ) -> tuple[Ints, Ints]:
    """Check and decode a passive party's :class:`Counts` into (events, non-events)."""
    if not isinstance(msg, Counts) or len(msg.values) != 1:
        raise ProtocolError(f"party {name!r} sent no bin counts", party=me, step="counts")
    (blob,) = msg.values
    if key is None or cipher is None:
        arr = blob if isinstance(blob, np.ndarray) else None
        if arr is None or arr.dtype != np.int64 or arr.shape != (2, count) or np.any(arr < 0):
            raise ProtocolError(f"party {name!r} sent malformed bin counts (expected int64 "
                                f"counts of shape (2, {count}))", party=me, step="counts")
        return arr[0].copy(), arr[1].copy()
    try:
        cts = cipher.from_bytes(blob, packing.blocks(count, per, buckets), "bin counts",
                                f"party {me!r} (from {name!r})")
    except ValidationError as exc:
        raise ProtocolError(str(exc), party=me, step="counts") from None
    plain = key.decrypt(cts, per * packing.SLOT_BITS - 1, positive=False, what="bin counts",
                        sender=repr(name), party=me, step="counts")
    try:
        digits = packing.unpack_digits(plain, per, count, buckets)
    except ValueError as exc:
        raise ProtocolError(f"party {name!r} sent bin counts that do not decode ({exc})",
                            party=me, step="counts") from None
    events, nonevents = packing.unpack(digits)  # exact integers below 2^53
    if np.any(events < 0):
        raise ProtocolError(f"party {name!r} sent negative bin counts", party=me, step="counts")
    return events.astype(np.int64), nonevents.astype(np.int64)


# ---------------------------------------------------------------------------- a passive party


def passive(party: Party, X: Any, *, active: str, config: WoeConfig,
            workers: int | None = None) -> PassiveStats:
    """Play a passive party: bin its features, sum the encrypted labels per bin.

    Parameters
    ----------
    X
        This party's features of the aligned rows (NaN: missing).
    active
        The active party's name.
    config
        This party's own plan; the active party's must be equal.
    workers
        Worker processes for the encrypted sums.
    """
    me, owner = party.name, f"party {party.name!r}"
    edges, codes, cipher = join_federation(party, X, active=active, config=config,
                                           workers=workers)
    rows = codes.shape[0]
    msg = party.recv(active, "labels")
    received = _read_labels(msg, rows, cipher, f"{owner} (from {active!r})", active, me)
    per = packing.per_plaintext(cipher.plaintext_bits) if cipher is not None else 1
    party.send(active, "counts", Counts(_bin_sums(codes, received, config.max_bins + 1,
                                                  cipher, per)))
    return PassiveStats(edges)


def _read_labels(msg: Any, rows: int, cipher: heu.OuCipher | None, owner: str, active: str,
                 me: str) -> Any:
    """Check the :class:`Labels`: the ciphertext column, or y in the clear."""
    parts = 2 if cipher is None else 1
    if not isinstance(msg, Labels) or len(msg.values) != parts:
        raise ProtocolError(f"party {active!r} sent no labels", party=me, step="labels")
    if cipher is not None:
        try:
            return cipher.from_bytes(msg.values[0], rows, "labels", owner)
        except ValidationError as exc:
            raise ProtocolError(str(exc), party=me, step="labels") from None
    y, other = msg.values
    if (not all(isinstance(v, np.ndarray) and v.dtype == np.int64 and v.shape == (rows,)
                for v in (y, other)) or np.any((y != 0) & (y != 1)) or np.any(y + other != 1)):
        raise ProtocolError(f"party {active!r} sent malformed labels (expected {rows} pairs "
                            "(y, 1 - y) of 0/1)", party=me, step="labels")
    return y


def _bin_sums(codes: NDArray[np.int8], received: Any, buckets: int,
              cipher: heu.OuCipher | None, per: int) -> list[Any]:
    """Return the :class:`Counts` values: per feature and bin, (e, n) encrypted or clear."""
    if cipher is None:
        events, nonevents = bin_counts(codes, received, buckets)
        return [np.stack([events.ravel(), nonevents.ravel()])]
    (sums,) = cipher.bucket_sums(received, codes, [np.ones(codes.shape[0], dtype=np.int8)],
                                 buckets, per=per, shift_bits=packing.SLOT_BITS)
    return [cipher.to_bytes(sums)]


# ---------------------------------------------------------------------------- the user API


def _binary(y: Any, rows: int, owner: str) -> tuple[Ints, Any]:
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.shape[0] != rows:
        raise ValidationError(f"{owner}: y must be 1-D with one label per row of X_b ({rows}); "
                              f"got shape {arr.shape}")
    if arr.dtype.kind in "fc":
        check_values(as_float_array(arr, "y", owner), "y", owner)
    classes = np.unique(arr)
    if classes.size != 2:
        raise ValidationError(f"{owner}: y must hold exactly 2 classes; got {classes.size}")
    return (arr == classes[1]).astype(np.int64), classes[1].item()


def information_values(X_a: Any, X_b: Any, y: Any, *, max_bins: int = 32, he: str = "ou",
                       key_bits: int = 2048, insecure_keys: bool = False,
                       workers: int | None = None, timeout: float = 600.0
                       ) -> InformationValues:
    """Compute every party's WOE and IV, the passive parties' under encryption.

    Simulates the federation in this process (:func:`~islands.runtime.run_local`, every
    message encoded to bytes): the active party B (``X_b`` and ``y``) and one passive
    party per matrix of ``X_a`` run :func:`active` and :func:`passive`.

    Parameters
    ----------
    X_a
        The passive party's features (NaN: missing), or a list of matrices, one per
        passive party A1 … Ak; rows aligned with X_b's.
    X_b, y
        The active party's features and labels (two classes; the larger is the event).
    max_bins, he, key_bits, insecure_keys
        :class:`~islands.vfl.secureboost.config.WoeConfig`'s settings.
    workers
        Worker processes for encryption and the encrypted sums.
    timeout
        Seconds a party waits for one message.

    Raises
    ------
    ValidationError
        For bad settings or data (infinite values, labels not of two classes,
        mismatched rows), before any message is sent.

    Examples
    --------
    >>> result = information_values(X_a, X_b, y)                  # doctest: +SKIP
    >>> result.table()["iv"][:3], result.select(0.02)             # doctest: +SKIP
    """
    owner = "information_values"
    blocks = party_blocks(X_a, "X_a", owner)
    (x_b,) = party_blocks([X_b], "X_b", owner)
    for i, x in enumerate(blocks):
        if x.shape[0] != x_b.shape[0]:
            label = "X_a" if len(blocks) == 1 else f"X_a[{i}]"
            raise ValidationError(f"{label} has {x.shape[0]} rows but X_b has {x_b.shape[0]}; "
                                  "the rows must be aligned already")
    labels, event = _binary(y, x_b.shape[0], owner)
    config = WoeConfig.build(owner, max_bins=max_bins, he=he, key_bits=key_bits,
                             insecure_keys=insecure_keys)
    run_settings = RunSettings.build(owner, timeout=timeout)
    check_workers(workers, owner)
    warn_insecure_keys(config.he, config.key_bits, owner)
    if config.he == "ou":
        heu.require(owner)
    names = passive_names(len(blocks))
    roles: dict[str, Any] = {"B": partial(active, X=x_b, y=labels, passive=names,
                                          config=config, workers=workers)}
    for name, x in zip(names, blocks, strict=True):
        roles[name] = partial(passive, X=x, active="B", config=config, workers=workers)
    run = run_local(roles, timeout=run_settings.timeout, blas_threads=None)
    stats: ActiveStats = run.results["B"]
    features = tuple(f if f.edges is not None else
                     replace(f, edges=run.results[f.party].edges[f.feature])
                     for f in stats.features)
    return InformationValues(features, ("B", *names), stats.events, stats.nonevents, event,
                             config.max_bins, run.transcript)
