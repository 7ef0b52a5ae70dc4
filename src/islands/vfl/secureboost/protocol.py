"""The roles of SecureBoost: the active party (labels) and the passive parties (features).

Cheng et al., "SecureBoost: A Lossless Federated Learning Framework" (IEEE Intelligent
Systems 2021, arXiv:1901.08755), Algorithms 1–3, with SecureBoost+'s engineering (Chen et
al., arXiv:2110.10927). Rows are already aligned (:mod:`islands.psi`); every party bins
its own features (:func:`~islands.vfl.secureboost.maths.bin_edges`, the missing bin
last). The active party runs :func:`~islands.vfl.secureboost.maths.boost`, so the trees
are the plaintext reference's (:mod:`~islands.vfl.secureboost.reference`) split for split.

Messages, in order (every one a wire message in the transcript):

=========  ================  ===============================================================
tag        sender → to       payload
=========  ================  ===============================================================
hello      passive → active  :class:`Hello`: rows and features (the active party checks rows)
setup      active → passive  :class:`Setup`: the OU public key (empty with ``he="none"``)
                             and the plan text, which each passive party compares with its
                             own (key size included) before anything else
           — per tree (one per output and round), on tag ``boost`` —
           active → passive  :class:`TreeStart`: the sampled rows, the party's columns for
                             this tree and ⟦g_i·2^53 + h_i⟧ per sampled row (packed; or ⟦g⟧,
                             ⟦h⟧ unpacked; the integers themselves with ``he="none"``)
           — per level —
           active → passive  :class:`Level`: the node of every row and the nodes whose
                             histograms are wanted (the smaller child of each split)
hist       passive → active  per wanted node, feature and bin, ⟦Σ g·2^53 + h⟧ over its
                             sampled rows; k bin sums per ciphertext with compression
           active → passive  :class:`Splits`: (node, feature, bin, missing left) of the
                             splits the party owns at this level
parted     passive → active  :class:`Parted`: a record number per split and which of the
                             node's rows go left
           active → passive  :class:`Finish`: training is over (rounds kept)
=========  ================  ===============================================================

A passive party not allowed to split at a level (the hardened modes,
``active_first_trees``, ``active_top_levels`` and ``mix``) gets a :class:`Level` without rows or
nodes, and a tree it may not split at all comes without gradients or rows. The first
level it takes part in still sends it every row's node, so the partition the top levels
made reaches it then; only a whole tree stays hidden (measured in
:mod:`~islands.vfl.secureboost.audit`).

What each party learns. The active party learns every bin's gradient and hessian sums of
every passive feature (that is what it chooses splits from), the feature and bin index of
a passive party's split (never its threshold) and the instance space of every node. A
passive party learns nothing from the ciphertexts (OU is semantically secure under the
p-subgroup assumption) but learns the instance space of every node it is shown (which
rows are together); leaves of a tree group rows of similar gradient, and so of similar
label: ``islands audit secureboost`` measures how much that gives away
(:mod:`~islands.vfl.secureboost.audit`). Honest-but-curious parties, as in the paper.

Inference (:func:`infer` and :func:`serve_inference`): the active party sends the row
positions to score; each passive party answers, for every record it owns, which of those
rows go left; the active party walks its trees. It learns those comparisons (a superset
of the paper's path queries), never a threshold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.config import check_same_plan
from islands.crypto import heu, paillier, paillier_ops
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party, wire
from islands.validation import as_float_array, check_values
from islands.vfl.keys import min_peer_key_bits
from islands.vfl.secureboost import packing
from islands.vfl.secureboost.config import BoostConfig
from islands.vfl.secureboost.maths import (
    Boosted,
    Hist,
    Ints,
    Split,
    TreeSource,
    apply_bins,
    bin_edges,
    boost,
    histogram,
)
from islands.vfl.secureboost.model import LookupTable, TreeModel, raw_scores

__all__ = [
    "ActiveOutcome",
    "Finish",
    "Hello",
    "Infer",
    "Level",
    "Parted",
    "PassiveOutcome",
    "Setup",
    "Splits",
    "TreeStart",
    "active",
    "binned",
    "check_features",
    "check_target_range",
    "holdout",
    "infer",
    "join_federation",
    "open_federation",
    "passive",
    "serve_inference",
]


# ---------------------------------------------------------------------------- messages


@wire.register(name="sboost.Hello")
@dataclass(frozen=True)
class Hello:
    """A passive party's row and feature counts."""

    rows: int = field(metadata={"ge": 1})
    features: int = field(metadata={"ge": 1})


@wire.register(name="sboost.Setup")
@dataclass(frozen=True)
class Setup:
    """The active party's public key (empty in the clear) and the plan text.

    With Paillier also the DJN base h_s (None: textbook randomness).
    """

    public_key: bytes
    plan: str
    djn_base: int | None = None


@wire.register(name="sboost.TreeStart")
@dataclass(frozen=True)
class TreeStart:
    """A tree begins: sampled rows, this party's columns and the encrypted gradients.

    ``values`` holds ciphertext blobs (one with packing, two without; none when the party
    may not split this tree) or, in the clear, the integer arrays g and h.
    """

    tree: int = field(metadata={"ge": 0})
    rows: NDArray[np.int64] = field(metadata={"ndim": 1})
    columns: NDArray[np.bool_] = field(metadata={"ndim": 1})
    values: list[Any]


@wire.register(name="sboost.Level")
@dataclass(frozen=True)
class Level:
    """A level of the tree.

    Each row's node (empty when the party sits the level out) and the nodes whose
    histograms are wanted.
    """

    depth: int = field(metadata={"ge": 0})
    node_of: NDArray[np.int32] = field(metadata={"ndim": 1})
    nodes: list[int]


@wire.register(name="sboost.Splits")
@dataclass(frozen=True)
class Splits:
    """The party's splits at this level: (node, feature, bin, missing left)."""

    items: list[tuple[int, int, int, bool]]


@wire.register(name="sboost.Parted")
@dataclass(frozen=True)
class Parted:
    """The answer to :class:`Splits`.

    Per split, in order, the new record number; and the concatenated goes-left flags of
    each split node's rows (ascending row order).
    """

    records: list[int]
    left: NDArray[np.bool_] = field(metadata={"ndim": 1})


@wire.register(name="sboost.Finish")
@dataclass(frozen=True)
class Finish:
    """Training is over; ``rounds`` boosting rounds were kept."""

    rounds: int = field(metadata={"ge": 0})


@wire.register(name="sboost.Infer")
@dataclass(frozen=True)
class Infer:
    """Rows to answer every record for.

    Positions in the passive party's data, or IDs (a deployed federation's inference
    stage sends them, as vertical regression's Table 2 does).
    """

    rows: NDArray[np.int64] = field(metadata={"ndim": 1})
    ids: list[Any] = field(default_factory=list)


# ---------------------------------------------------------------------------- Paillier


class PaillierCipher:
    """islands' DJN Paillier behind the calls the roles make of an OU cipher.

    :mod:`islands.crypto.paillier_ops` for ``he="paillier"``, in place of
    :class:`~islands.crypto.heu.OuCipher`. Plaintexts are residues modulo n read as
    signed below n/2, so a packed plaintext holds n's bits less two.
    """

    def __init__(self, vector: paillier_ops.VectorCipher) -> None:
        self.vector = vector
        self.plaintext_bits = vector.n.bit_length() - 2

    @classmethod
    def from_setup(cls, setup: Setup, owner: str, min_bits: int,
                   workers: int | None) -> PaillierCipher:
        """Check the key (and DJN base) a passive party received; return its cipher."""
        try:
            public_key = paillier.public_key_from_bytes(setup.public_key, min_bits=min_bits)
            base = (None if setup.djn_base is None
                    else int(paillier.check_djn_base(public_key, setup.djn_base, owner)))
        except ValidationError as exc:
            raise ValidationError(f"{owner}: {exc}") from None
        return cls(paillier_ops.VectorCipher(public_key, base, workers=workers))

    def encrypt(self, values: Sequence[int]) -> list[Any]:
        """Encrypt signed integers."""
        return self.vector.encrypt(values)

    def to_bytes(self, cts: Sequence[Any]) -> bytes:
        """Serialise ciphertexts (key fingerprint first)."""
        return self.vector.to_bytes(cts)

    def from_bytes(self, blob: Any, count: int, name: str, owner: str) -> list[Any]:
        """Parse and check exactly ``count`` ciphertexts."""
        return self.vector.from_bytes(blob, count, name, owner)

    def take(self, cts: Sequence[Any], indices: Sequence[int]) -> list[Any]:
        """Return the ciphertexts at ``indices``."""
        return [cts[i] for i in indices]

    def concat(self, parts: Sequence[Sequence[Any]]) -> list[Any]:
        """Return one list of the parts' ciphertexts, in order."""
        return [c for part in parts for c in part]

    def bucket_sums(self, cts: Sequence[Any], order: NDArray[np.int8],
                    groups: Sequence[NDArray[Any]], buckets: int, *, per: int = 1,
                    shift_bits: int = 0) -> list[list[Any]]:
        """:func:`islands.crypto.paillier_ops.bucket_sums`."""
        return paillier_ops.bucket_sums(self.vector, cts, order, groups, buckets, per=per,
                                        shift_bits=shift_bits)


class PaillierKey:
    """The active party's DJN Paillier key pair, with range-checked signed decryption."""

    def __init__(self, key_bits: int, *, workers: int | None = None) -> None:
        self.public, self.private, self.djn_base = paillier.generate_djn_keypair(key_bits)
        self.workers = workers

    def public_bytes(self) -> bytes:
        """Return the public key as sent."""
        return paillier.public_key_to_bytes(self.public)

    def cipher(self) -> PaillierCipher:
        """Return the key owner's own cipher."""
        return PaillierCipher(paillier_ops.VectorCipher(self.public, self.djn_base,
                                                        workers=self.workers))

    def decrypt(self, cts: Sequence[Any], range_bits: int, *, positive: bool, what: str,
                sender: str, party: str | None = None, step: str | None = None) -> list[int]:
        """Decrypt signed values that must lie in (−2^range_bits, 2^range_bits)."""
        n = int(self.public.n)
        values = [m - n if m > n // 2 else m
                  for m in paillier_ops.decrypt_many(self.private, cts, workers=self.workers)]
        bound = 1 << range_bits
        if any(not -bound < v < bound or (positive and v <= 0) for v in values):
            raise ProtocolError(f"{sender} sent {what} that decrypt outside the range the "
                                f"protocol allows (|v| < 2^{range_bits}); refused",
                                party=party, step=step)
        return values


# ---------------------------------------------------------------------------- inputs


def check_features(X: Any, name: str, owner: str) -> Array:
    """Return a party's features as float64: numbers, NaN for missing, no infinity.

    Raises
    ------
    ValidationError
        Naming ``name``: not a 2-D array of numbers, no rows or columns, or an infinite
        value (with its row and column).
    """
    arr = as_float_array(X, name, owner)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValidationError(f"The {name!r} parameter of {owner} must be a 2-D array with at "
                              f"least one row and one column. Got shape {arr.shape} instead.")
    check_values(np.where(np.isnan(arr), 0.0, arr), name, owner, max_abs=None)
    return arr


TARGET_SPAN = 2.0**48
"""Largest max|y − mean(y)| · rows a regression target may have: gradients are quantised
so that every sum of them stays below 2^52 (:func:`~islands.vfl.secureboost.maths.quantise`),
and a narrower span keeps at least 3 fraction bits."""


def check_target_range(y: Array, objective: str, owner: str) -> None:
    """Refuse a regression target too wide for exact integer histograms, naming ``y``."""
    if objective != "regression" or y.size == 0:
        return
    span = float(np.max(np.abs(y - y.mean()))) * y.size
    if span >= TARGET_SPAN:
        raise ValidationError(f"{owner}: y spans too wide a range for SecureBoost's exact "
                              f"histograms (max |y - mean| x rows = {span:.3g}; it must stay "
                              f"below 2^48 = {TARGET_SPAN:.3g}): scale y first")


def holdout(rows: int, fraction: float, seed: int) -> NDArray[np.bool_]:
    """Return the training mask when the active party holds out ``fraction`` of the rows."""
    rng = np.random.default_rng([seed, 1])
    train = np.ones(rows, dtype=bool)
    train[rng.choice(rows, size=max(1, math.ceil(fraction * rows)), replace=False)] = False
    return train


def binned(X: Array, max_bins: int) -> tuple[list[Array], NDArray[np.int8]]:
    """Return a party's bins: each feature's cut points and every value's bin (int8)."""
    edges = [bin_edges(X[:, j], max_bins) for j in range(X.shape[1])]
    return edges, apply_bins(X, edges, max_bins)


def open_federation(party: Party, rows: int, *, passive: Sequence[str], config: Any,
                    workers: int | None = None) -> tuple[list[Hello], Any]:
    """Start the active party's side: every passive party's hello, the key, the setup.

    Checks that each passive party holds ``rows`` aligned rows, makes the key ``config``
    asks for (OU, Paillier or none) and sends every passive party the public key and
    the plan text (``config.plan_text()``). Returns the hellos and the key (None in the
    clear).
    """
    hellos = []
    for name in passive:
        hello = party.recv(name, "hello")
        if not isinstance(hello, Hello) or hello.rows != rows:
            got = hello.rows if isinstance(hello, Hello) else type(hello).__name__
            raise ProtocolError(f"party {name!r} holds {got} aligned rows; {party.name!r} "
                                f"holds {rows}", party=party.name, step="hello")
        hellos.append(hello)
    key: Any = None
    if config.he == "ou":
        key = heu.OuKeyOwner(config.key_bits, workers=workers)
    elif config.he == "paillier":
        key = PaillierKey(config.key_bits, workers=workers)
    setup = Setup(key.public_bytes() if key is not None else b"", config.plan_text(),
                  getattr(key, "djn_base", None))
    for name in passive:
        party.send(name, "setup", setup)
    return hellos, key


def join_federation(party: Party, X: Any, *, active: str, config: Any,
                    workers: int | None = None
                    ) -> tuple[list[Array], NDArray[np.int8], Any]:
    """Start a passive party's side: bin its features, say hello, check the setup.

    The active party's plan must equal ``config``'s and its key must be of the scheme
    and at least the size this party's own ``config`` asks for (the active party may
    ask for more protection, never less). Returns the bins' cut points, every row's
    bins and the cipher (None in the clear).
    """
    owner = f"party {party.name!r}"
    x = check_features(X, "X", owner)
    edges, codes = binned(x, config.max_bins)
    party.send(active, "hello", Hello(*x.shape))
    setup = party.recv(active, "setup")
    if not isinstance(setup, Setup):
        raise ProtocolError(f"party {active!r} sent no setup", party=party.name, step="setup")
    check_same_plan(config.plan_text(), setup.plan, party=party.name, peer=active)
    min_bits = min_peer_key_bits(config.key_bits, config.insecure_keys)
    where = f"{owner} (from {active!r})"
    if config.he != "paillier" and setup.djn_base is not None:
        raise ProtocolError(f"party {active!r} sent a DJN base for a plan without Paillier",
                            party=party.name, step="setup")
    cipher: Any = None
    if config.he == "ou":
        cipher = heu.OuCipher.from_public_bytes(setup.public_key, owner=where,
                                                min_bits=min_bits, workers=workers)
    elif config.he == "paillier":
        cipher = PaillierCipher.from_setup(setup, where, min_bits, workers)
    elif setup.public_key:
        raise ProtocolError(f"party {active!r} sent a key for a plan in the clear",
                            party=party.name, step="setup")
    return edges, codes, cipher


# ---------------------------------------------------------------------------- the active party


@dataclass
class ActiveOutcome:
    """What the active party ends with.

    Attributes
    ----------
    model
        The trees (owners and record numbers only) and the starting scores.
    table
        Its own split records.
    boosted
        The boosting run: losses per round, rounds kept, the final training scores.
    train
        Which aligned rows trained (the rest validated).
    """

    model: TreeModel
    table: LookupTable
    boosted: Boosted
    train: NDArray[np.bool_]


class _Federation(TreeSource):
    """The active party's view of the federation, as :func:`boost` asks it."""

    def __init__(self, party: Party, names: Sequence[str], features: Sequence[int],
                 codes: NDArray[np.int8], edges: list[Array], config: BoostConfig,
                 key: Any) -> None:
        self.party, self.names, self.config, self.key = party, list(names), config, key
        self.codes, self.edges = codes, edges
        self.parties = 1 + len(names)
        self.features = [codes.shape[1], *features]
        self.buckets = config.max_bins + 1
        self.table = LookupTable()
        self.cipher = None if key is None else key.cipher()
        self.per = (packing.per_plaintext(self.cipher.plaintext_bits)
                    if self.cipher is not None and config.compression else 1)
        self._shown: set[int] = set()

    def allowed(self, tree: int, party: int, depth: int) -> bool:
        """Whether ``party`` may split at ``depth`` of ``tree`` (the hardened modes)."""
        return self.config.allowed(tree, party, depth, self.parties)

    # a tree ------------------------------------------------------------------
    def begin(self, tree: int, output: int, g: Ints, h: Ints, frac: int,
              sampled: NDArray[np.bool_], columns: Sequence[NDArray[np.bool_]]) -> None:
        self.tree, self._columns, self._sampled = tree, columns, sampled
        self._g, self._h = g.astype(np.float64), h.astype(np.float64)
        self._depth = 0
        rows = np.flatnonzero(sampled)
        takes_part = [any(self.allowed(tree, i, d) for d in range(self.config.max_depth))
                      for i in range(1, self.parties)]
        values: list[Any] = []
        if any(takes_part):
            if self.cipher is None:
                values = [g[rows], h[rows]]
            elif self.config.packing:
                values = [self.cipher.to_bytes(self.cipher.encrypt(packing.pack(g[rows], h[rows])))]
            else:
                values = [self.cipher.to_bytes(self.cipher.encrypt(g[rows].tolist())),
                          self.cipher.to_bytes(self.cipher.encrypt(h[rows].tolist()))]
        self._rows = rows
        for i, name in enumerate(self.names, start=1):
            shown = takes_part[i - 1]
            self.party.send(name, "boost", TreeStart(tree, rows if shown else rows[:0],
                                                     columns[i], values if shown else []))

    # a level -----------------------------------------------------------------
    def histograms(self, wanted: Mapping[int, Sequence[int]],
                   node_of: Ints) -> dict[int, dict[int, Hist]]:
        depth = self._depth
        self._depth += 1
        self._shown = {p for p in wanted if p > 0}
        nodes32 = node_of.astype(np.int32)
        for i, name in enumerate(self.names, start=1):
            if i in wanted:
                self.party.send(name, "boost", Level(depth, nodes32, list(wanted[i])))
            else:
                self.party.send(name, "boost", Level(depth, nodes32[:0], []))
        out: dict[int, dict[int, Hist]] = {}
        if 0 in wanted:
            out[0] = {}
            for node in wanted[0]:
                rows = np.flatnonzero((node_of == node) & self._sampled)
                hg, hh = histogram(self.codes[rows], self._g[rows], self._h[rows], self.buckets)
                hg[~self._columns[0]] = 0
                hh[~self._columns[0]] = 0
                out[0][node] = (hg, hh)
        for i, name in enumerate(self.names, start=1):
            nodes = list(wanted.get(i, []))
            if nodes:
                out[i] = self._receive(i, name, nodes, node_of)
        return out

    def _receive(self, i: int, name: str, nodes: list[int], node_of: Ints) -> dict[int, Hist]:
        columns = self._columns[i]
        selected = int(columns.sum())
        halves = 1 if (self.cipher is None or self.config.packing) else 2
        count = halves * len(nodes) * selected * self.buckets
        blob = self.party.recv(name, "hist")
        owner = f"party {self.party.name!r} (from {name!r})"
        if self.cipher is None:
            arr = np.asarray(blob, dtype=np.float64) if isinstance(blob, np.ndarray) else None
            if arr is None or arr.shape != (2, count) or not np.all(np.isfinite(arr)):
                raise ProtocolError(f"party {name!r} sent malformed histograms",
                                    party=self.party.name, step="hist")
            G, H = arr[0], arr[1]
        else:
            cts = self.cipher.from_bytes(blob, packing.blocks(count, self.per, self.buckets),
                                         "histograms", owner)
            assert self.key is not None
            plain = self.key.decrypt(cts, self.per * packing.SLOT_BITS - 1, positive=False,
                                     what="histograms", sender=repr(name),
                                     party=self.party.name, step="hist")
            try:
                digits = packing.unpack_digits(plain, self.per, count, self.buckets)
            except ValueError as exc:
                raise ProtocolError(f"party {name!r} sent histograms that do not decode ({exc})",
                                    party=self.party.name, step="hist") from None
            if halves == 1:
                G, H = packing.unpack(digits)
            else:
                G = np.array(digits[:count // 2], dtype=np.float64)
                H = np.array(digits[count // 2:], dtype=np.float64)
        out: dict[int, Hist] = {}
        shape = (len(nodes), selected, self.buckets)
        G, H = G.reshape(shape), H.reshape(shape)
        for k, node in enumerate(nodes):
            here = (node_of == node) & self._sampled
            total_g, total_h = self._g[here].sum(), self._h[here].sum()
            if selected and (np.any(G[k].sum(axis=1) != total_g)
                             or np.any(H[k].sum(axis=1) != total_h)):
                raise ProtocolError(f"party {name!r} sent histograms of node {node} whose bins do "
                                    "not add up to the node's sums", party=self.party.name,
                                    step="hist")
            hg = np.zeros((columns.size, self.buckets))
            hh = np.zeros((columns.size, self.buckets))
            hg[columns], hh[columns] = G[k], H[k]
            out[node] = (hg, hh)
        return out

    def partition(self, splits: Mapping[int, tuple[int, Split]],
                  node_of: Ints) -> dict[int, tuple[int, NDArray[np.bool_]]]:
        out: dict[int, tuple[int, NDArray[np.bool_]]] = {}
        mine: dict[int, list[tuple[int, Split]]] = {i: [] for i in self._shown}
        for node, (p, split) in splits.items():
            if p == 0:
                rows = np.flatnonzero(node_of == node)
                out[node] = (self.table.add(split, self.edges),
                             _goes_left(self.codes[rows, split.feature], split, self.buckets))
            else:
                mine[p].append((node, split))
        for i in sorted(mine):
            name = self.names[i - 1]
            items = mine[i]
            self.party.send(name, "boost", Splits([(node, s.feature, s.bin, s.missing_left)
                                                   for node, s in items]))
            answer = self.party.recv(name, "parted")
            sizes = [int(np.count_nonzero(node_of == node)) for node, _ in items]
            if (not isinstance(answer, Parted) or len(answer.records) != len(items)
                    or answer.left.size != sum(sizes)):
                raise ProtocolError(f"party {name!r} answered {len(items)} splits with a "
                                    "malformed partition", party=self.party.name, step="parted")
            at = 0
            for (node, _), record, size in zip(items, answer.records, sizes, strict=True):
                out[node] = (record, answer.left[at:at + size].copy())
                at += size
        return out


def _goes_left(codes: NDArray[np.int8], split: Split, buckets: int) -> NDArray[np.bool_]:
    left = codes <= split.bin
    left[codes == buckets - 1] = split.missing_left
    return left


def active(party: Party, X: Any, y: Any, *, passive: Sequence[str], config: BoostConfig,
           classes: int = 2, workers: int | None = None,
           on_round: Callable[[int, Boosted], None] | None = None) -> ActiveOutcome:
    """Play the active party: hold the labels and the key, grow every tree.

    Parameters
    ----------
    X
        The active party's features of the aligned rows (NaN: missing).
    y
        Labels: 0/1 (binary), class codes 0 … classes − 1 (multiclass) or values.
    passive
        The passive parties' names, in the order their features are numbered.
    config
        The plan, which every passive party compares with its own.
    classes
        Number of classes (multiclass).
    workers
        Worker processes for encryption.
    on_round
        Called after every round (progress).
    """
    owner = f"party {party.name!r}"
    x = check_features(X, "X", owner)
    labels = as_float_array(y, "y", owner).ravel()
    check_values(labels, "y", owner)
    if labels.size != x.shape[0]:
        raise ValidationError(f"{owner}: y holds {labels.size} labels for {x.shape[0]} rows")
    check_target_range(labels, config.objective, owner)
    hellos, key = open_federation(party, x.shape[0], passive=passive, config=config,
                                  workers=workers)
    edges, codes = binned(x, config.max_bins)
    source = _Federation(party, passive, [h.features for h in hellos], codes, edges, config, key)
    train = (holdout(x.shape[0], config.validation_fraction, config.seed)
             if config.early_stopping_rounds is not None else np.ones(x.shape[0], dtype=bool))
    objective = config.objective_for(classes)
    boosted = boost(source, labels, objective, config.params(), rounds=config.n_estimators,
                    train=train, sampling=config.sampling(),
                    rng=np.random.default_rng(config.seed),
                    early_stopping_rounds=config.early_stopping_rounds,
                    allowed=source.allowed if config.hardened() else None,
                    subtract=config.subtraction, on_round=on_round)
    for name in passive:
        party.send(name, "boost", Finish(len(boosted.trees)))
    model = TreeModel(objective, boosted.base, boosted.trees)
    return ActiveOutcome(model, source.table, boosted, train)


# ---------------------------------------------------------------------------- a passive party


@dataclass
class PassiveOutcome:
    """What a passive party ends with: its split records and its bins' cut points."""

    table: LookupTable
    edges: list[Array]


def passive(party: Party, X: Any, *, active: str, config: BoostConfig,
            workers: int | None = None) -> PassiveOutcome:
    """Play a passive party: sum the encrypted gradients per bin, keep its thresholds.

    Parameters
    ----------
    X
        This party's features of the aligned rows (NaN: missing).
    active
        The active party's name.
    config
        This party's own plan; the active party's must be equal.
    workers
        Worker processes for the encrypted histograms.
    """
    owner = f"party {party.name!r}"
    edges, codes, cipher = join_federation(party, X, active=active, config=config,
                                           workers=workers)
    rows = codes.shape[0]
    buckets = config.max_bins + 1
    per = packing.per_plaintext(cipher.plaintext_bits) if cipher and config.compression else 1
    table = LookupTable()
    state: dict[str, Any] = {}
    while True:
        msg = party.recv(active, "boost")
        if isinstance(msg, Finish):
            break
        if isinstance(msg, TreeStart):
            state = _start(msg, codes, cipher, config, owner, active, party.name)
        elif isinstance(msg, Level):
            state["node_of"] = _node_of(msg, rows, active, party.name)
            if msg.nodes:
                blob = _histograms(state, msg.nodes, buckets, cipher, per, config)
                party.send(active, "hist", blob)
        elif isinstance(msg, Splits):
            party.send(active, "parted", _parted(msg, state, codes, edges, table, buckets,
                                                 active, party.name))
        else:
            raise ProtocolError(f"party {active!r} sent an unexpected {type(msg).__name__}",
                                party=party.name, step="boost")
    return PassiveOutcome(table, edges)


def _start(msg: TreeStart, codes: NDArray[np.int8], cipher: Any,
           config: BoostConfig, owner: str, active: str, me: str) -> dict[str, Any]:
    rows, features = codes.shape
    sampled = msg.rows
    if (msg.columns.size != features or (sampled.size and (
            sampled[0] < 0 or sampled[-1] >= rows or np.any(np.diff(sampled) <= 0)))):
        raise ProtocolError(f"party {active!r} started tree {msg.tree} with rows or columns "
                            "that do not fit this party's data", party=me, step="boost")
    state: dict[str, Any] = {"rows": sampled, "columns": np.flatnonzero(msg.columns)}
    if sampled.size == 0:
        return state
    state["order"] = np.ascontiguousarray(codes[sampled][:, state["columns"]])
    halves = 1 if (cipher is None or config.packing) else 2
    if len(msg.values) != (2 if cipher is None else halves):
        raise ProtocolError(f"party {active!r} sent {len(msg.values)} gradient parts",
                            party=me, step="boost")
    if cipher is None:
        g, h = (np.asarray(v) for v in msg.values)
        if g.shape != sampled.shape or h.shape != sampled.shape or g.dtype != np.int64:
            raise ProtocolError(f"party {active!r} sent malformed gradients", party=me,
                                step="boost")
        state["values"] = (g.astype(np.float64), h.astype(np.float64))
    else:
        state["values"] = [cipher.from_bytes(v, sampled.size, "gradients",
                                             f"{owner} (from {active!r})") for v in msg.values]
    return state


def _node_of(msg: Level, rows: int, active: str, me: str) -> NDArray[np.int32]:
    node_of = msg.node_of
    if node_of.size not in (0, rows) or (msg.nodes and node_of.size == 0):
        raise ProtocolError(f"party {active!r} sent a level of {node_of.size} rows; this party "
                            f"holds {rows}", party=me, step="boost")
    return node_of


def _histograms(state: dict[str, Any], nodes: list[int], buckets: int,
                cipher: Any, per: int, config: BoostConfig) -> Any:
    sampled_nodes = state["node_of"][state["rows"]]
    order = state["order"]
    if cipher is None:
        g, h = state["values"]
        sums = [histogram(order[sampled_nodes == node], g[sampled_nodes == node],
                          h[sampled_nodes == node], buckets) for node in nodes]
        return np.stack([np.concatenate([s[0].ravel() for s in sums]),
                         np.concatenate([s[1].ravel() for s in sums])])
    # one node at a time on its own rows: HEU then walks only those rows
    columns = []
    for values in state["values"]:
        for node in nodes:
            here = np.flatnonzero(sampled_nodes == node)
            if here.size == 0:  # no sampled row: every sum is 0 (HEU refuses empty arrays)
                count = packing.blocks(order.shape[1] * buckets, per, buckets)
                columns.append(cipher.encrypt([0] * count))
                continue
            (sums,) = cipher.bucket_sums(cipher.take(values, here.tolist()), order[here],
                                         [np.ones(here.size, dtype=np.int8)], buckets, per=per,
                                         shift_bits=packing.SLOT_BITS)
            columns.append(sums)
    return cipher.to_bytes(cipher.concat(columns) if len(columns) > 1 else columns[0])


def _parted(msg: Splits, state: dict[str, Any], codes: NDArray[np.int8], edges: list[Array],
            table: LookupTable, buckets: int, active: str, me: str) -> Parted:
    node_of = state.get("node_of")
    records, left = [], []
    for node, feature, b, missing_left in msg.items:
        if node_of is None or not 0 <= feature < codes.shape[1] or not 0 <= b < buckets - 1:
            raise ProtocolError(f"party {active!r} asked for a split this party cannot make "
                                f"(node {node}, feature {feature}, bin {b})", party=me,
                                step="boost")
        split = Split(0.0, feature, b, missing_left)
        rows = np.flatnonzero(node_of == node)
        records.append(table.add(split, edges))
        left.append(_goes_left(codes[rows, feature], split, buckets))
    return Parted(records, np.concatenate(left) if left else np.zeros(0, dtype=bool))


# ---------------------------------------------------------------------------- inference


def serve_inference(party: Party, X: Any, table: LookupTable, *, active: str,
                    ids: Sequence[Any] | None = None) -> int:
    """Answer the active party's inference: for every record, which asked rows go left.

    With ``ids`` (the IDs of X's rows) the active party asks by ID, otherwise by
    position. Returns the number of rows answered.
    """
    x = check_features(X, "X", f"party {party.name!r}")
    ask = party.recv(active, "infer")
    if not isinstance(ask, Infer):
        raise ProtocolError(f"party {active!r} sent no inference request", party=party.name,
                            step="infer")
    if ids is not None:
        where = {v: i for i, v in enumerate(ids)}
        unknown = [v for v in ask.ids if v not in where]
        if unknown or ask.rows.size:
            raise ProtocolError(f"party {active!r} asked for IDs this party does not hold "
                                f"({unknown[:3]!r})", party=party.name, step="infer")
        positions = np.asarray([where[v] for v in ask.ids], dtype=np.int64)
    else:
        positions = ask.rows
        if ask.ids or (positions.size and (positions.min() < 0
                                           or positions.max() >= x.shape[0])):
            raise ProtocolError(f"party {active!r} asked for rows this party does not hold",
                                party=party.name, step="infer")
    rows = x[positions]
    bits = np.stack([table.goes_left(r, rows) for r in range(len(table.records))]) \
        if table.records else np.zeros((0, rows.shape[0]), dtype=bool)
    party.send(active, "decisions", bits)
    return int(positions.size)


def infer(party: Party, X: Any, model: TreeModel, table: LookupTable, *,
          passive: Sequence[str], rows: Mapping[str, Any] | None = None,
          ids: Sequence[Any] | None = None) -> Array:
    """Score rows across the parties; returns the raw scores (rows × outputs).

    ``rows[name]`` are the positions in passive party ``name``'s data of the rows of X
    (default: the same positions); or ``ids``, the rows' IDs, which every passive party
    looks up among its own.
    """
    x = (np.zeros((0, np.shape(X)[1])) if np.shape(X)[0] == 0   # nothing to score
         else check_features(X, "X", f"party {party.name!r}"))
    answers: dict[int, NDArray[np.bool_]] = {0: np.zeros(0, dtype=bool)}
    for name in passive:
        if ids is not None:
            party.send(name, "infer", Infer(np.zeros(0, dtype=np.int64), list(ids)))
            continue
        positions = np.arange(x.shape[0]) if rows is None else np.asarray(rows[name], np.int64)
        party.send(name, "infer", Infer(positions.astype(np.int64)))
    for i, name in enumerate(passive, start=1):
        bits = party.recv(name, "decisions")
        if not isinstance(bits, np.ndarray) or bits.dtype != np.bool_ or bits.ndim != 2 \
                or bits.shape[1] != x.shape[0]:
            raise ProtocolError(f"party {name!r} sent malformed decisions", party=party.name,
                                step="decisions")
        answers[i] = bits
    used = {(p, r) for built in model.trees for t in built
            for p, r in zip(t.party, t.record, strict=True) if p > 0}
    for p, r in used:
        if r >= answers[p].shape[0]:
            raise ProtocolError(f"party {passive[p - 1]!r} answered {answers[p].shape[0]} "
                                f"records; the trees use record {r}", party=party.name,
                                step="decisions")

    def goes_left(p: int, record: int) -> NDArray[np.bool_]:
        return table.goes_left(record, x) if p == 0 else answers[p][record]

    return raw_scores(model.trees, model.base, x.shape[0], goes_left)
