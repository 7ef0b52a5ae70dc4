"""Federated transfer learning on secret shares: a dealer D, two round trips per batch.

``engine="ss"`` trains the networks of Liu et al.'s FTL [1]_ (the maths of
:mod:`islands.vfl.ftl.maths`, unchanged) with additive masks over the exact ring Z_P of
:data:`islands.crypto.rns.SS_RING` (nine primes below 2^21, P ≈ 2^189) instead of each
party's homomorphic key. Every product the Taylor loss needs pairs a plaintext of A with
a plaintext of B, with its output to one party, so each is a *commodity* product of Du
and Atallah [2]_, as in secure Swarm CCA (:mod:`islands.cca.secure`): a third party D
deals correlated randomness derived from 32-byte seeds the parties tell it, and returns
only correction terms. No product of two shared values and no truncation is needed: the
parties compute the very integers of the HE flow (:func:`~islands.vfl.ftl.maths.encode`
at f = ``frac_bits``), and train the same networks bit for bit.

Per batch I of b overlap rows (d = ``dim``, K scores; the same operands as
:func:`~islands.vfl.ftl.protocol._source_encrypted` and ``_target_encrypted``):

- A holds Y = [U; S] ((b + d) × d, scale 2^f), U its representations, S = UᵀU.
- B holds Q̃ᵀ (d × d, scale 2^f), P̃ (b × d, scale 2^(2f)), W = [T; (MΦ)ᵀ]
  ((b + d) × K, the targets and MΦ) and w_L = [P̃; Q̃/2 + γI] ((b + d) × d, scale 2^f).
- A's output: g = P̃ + UQ̃ᵀ (its gradient at the representation, as HE decrypts it).
- B's outputs: G = WᵀY (K × d) and b·L − constant = ⟨w_L, Y⟩ (the batch loss); with
  symmetric alignment also U, which the HE flow reveals to B too.

From A's seed come R_Y, r'_A and r''_A; from B's R_Q, R_W, R_L and r_B (fresh for every
epoch and batch, :func:`target_masks`, :func:`source_masks`). D, which expands both
seeds, deals r_a = R_Y[:b]R_Q − r_B to A and r'_a = R_WᵀR_Y − r'_A,
r''_a = ⟨R_L, R_Y⟩ − r''_A to B (:func:`deal`), one epoch ahead of the parties.

=========  =========  =========================================================  ==========
tag        from → to  payload (ring elements packed, 3 uint64 words each)        when
=========  =========  =========================================================  ==========
hello      A ↔ B      :class:`~islands.vfl.ftl.protocol.Hello` (no key)          once
seed       A, B → D   :class:`Seed`: 32 CSPRNG bytes, the plan, rows and K       once
deal       D → A      :class:`TargetDeal`: r_a of every batch of the epoch       per epoch
deal       D → B      :class:`SourceDeal`: r'_a and r''_a of every batch         per epoch
reps       A → B      :class:`MaskedReps`: Ŷ = Y + R_Y                           per batch
terms      B → A      :class:`MaskedTerms`: Q̂ = Q̃ᵀ + R_Q, Ŵ = W + R_W,          per batch
                      ŵ_L = w_L + R_L
products   A → B      :class:`TargetProducts`: T_G = ŴᵀY + r'_A,                 per batch
                      t_L = ⟨ŵ_L, Y⟩ + r''_A (and U with symmetric alignment)
products   B → A      :class:`SourceProducts`: T_A = Ŷ[:b]Q̃ᵀ + P̃ + r_B         per batch
status     B → A      :class:`~islands.vfl.ftl.protocol.Status`, as under HE     per epoch
proceed    B → D      :class:`Proceed`: whether training goes on                 per epoch
=========  =========  =========================================================  ==========

Then A computes g = T_A − R_Y[:b]Q̂ + r_a and B computes G = T_G − R_WᵀŶ + r'_a and
⟨w_L, Y⟩ = t_L − ⟨R_L, Ŷ⟩ + r''_a, exactly (:func:`target_output`, :func:`source_output`).
The reps/terms exchange is one round trip, the products exchange a second: two per batch
against three under HE. Inference (:func:`infer_target`, :func:`infer_source`) is one
commodity product, A's scores UΦᵀ: A sends Û = U + R_U (``reps``), B returns
Φ̂ = Φᵀ + R_Φ and T = ÛΦᵀ + r_B (``products``), D deals r_a = R_UR_Φ − r_B
(``infer-deal``).

What each party learns (honest-but-curious, as the HE flows, and D colluding with
neither A nor B):

- A receives Q̂, Ŵ, ŵ_L (masked by B's seed), T_A and r_a: uniform in Z_P but for
  their sum, its output g = P̃ + UQ̃ᵀ, the same per-row gradient the HE flow decrypts
  (with its leak of B's labels, :mod:`islands.vfl.ftl.protocol`).
- B receives Ŷ (masked by A's seed), T_G, t_L, r'_a and r''_a: uniform but for its
  outputs G and the loss, as under HE; with symmetric alignment it also receives U, as
  under HE.
- D receives only the two seeds, the plan text, the row count and K (every epoch,
  whether training goes on), never a data share: Ŷ, Q̂, Ŵ, ŵ_L and the products travel
  only between A and B (``tests/test_ftl_ss.py`` reads the transcript).
- **Added assumption**: D must collude with neither party. D and A together expand B's
  masks and read P̃, Q̃, W (B's targets, hence its overlap labels, and MΦ) and Φ; D and
  B read U and S. The two-party HE flow has no third party and needs no such assumption.
- Secrecy is that of the ChaCha20 stream the masks are expanded from
  (:func:`islands.crypto.rns.RnsRing.uniform`); there is no key size. Deviations are
  not defended, as under HE: a wrong correction from D corrupts a step. Every ring
  message is checked (shape, dtype, every residue below its prime) and refused naming
  its sender and step.

Why a dealer, and why by hand. Liu et al.'s secret-sharing variant [1]_ multiplies with
Beaver triples and Sharma et al. [3]_ build on SPDZ (a preprocessing phase, then an
online phase); their abstracts do not say who makes the triples, and islands makes no
claim about it. Here the dealer *is* the preprocessing, made per batch from seeds.
SecretFlow's SPU offers a trusted-party Beaver provider only through a server its pip
wheel does not ship (only the client stub), and pins numpy < 2; triples made between the
two parties under HE (or OT) would cost public-key work per product term, what this
engine exists to avoid. The ring products run in float64 BLAS, exactly
(:class:`~islands.crypto.rns.RnsRing`).

Cost per batch: the products are (b × d)(d × d) and ((b + d) × K)ᵀ((b + d) × d) per
prime, well under a millisecond; on the wire (b + d)(2d + K) + d² + (b + K)d + 1 ring
elements of 24 bytes, and D's corrections (b + K)d + 1.

References
----------
.. [1] Y. Liu, Y. Kang, C. Xing, T. Chen, Q. Yang. "A Secure Federated Transfer Learning
   Framework." IEEE Intelligent Systems 35(4), 2020 (arXiv:1812.03337).
.. [2] W. Du, M. J. Atallah. "Protocols for secure remote database access with
   approximate matching." Advances in Information Security 2, 2001; D. Beaver,
   "Commodity-based cryptography", STOC 1997.
.. [3] S. Sharma, C. Xing, Y. Liu, Y. Kang. "Secure and Efficient Federated Transfer
   Learning." IEEE BigData 2019 (arXiv:1910.13271).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array, IntArray
from islands.config import check_same_plan
from islands.crypto.prg import SEED_BYTES
from islands.crypto.rns import SS_RING, Residues
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party, wire
from islands.vfl.ftl import maths
from islands.vfl.ftl.config import Plan, batch_order, check_plan
from islands.vfl.protocol import Clock

__all__ = [
    "DEALER_TAGS",
    "DealerRecord",
    "MaskedReps",
    "MaskedTerms",
    "Proceed",
    "Seed",
    "SourceDeal",
    "SourceProducts",
    "TargetDeal",
    "TargetProducts",
    "check_capacity",
    "deal",
    "dealer",
    "infer_dealer",
    "ring_encode",
    "source_masks",
    "source_output",
    "target_masks",
    "target_output",
]

RING = SS_RING
DEALER_TAGS = frozenset({"seed", "proceed"})
"""Every tag D receives: seeds (training and inference) and whether training goes on."""

_LABELS = {"target": b"ftl ss target", "source": b"ftl ss source",
           "infer-target": b"ftl ss infer target", "infer-source": b"ftl ss infer source"}
_SPLIT = float(2**32)


# ------------------------------------------------------------------ messages
@wire.register(name="ftl.SsSeed")
@dataclass(frozen=True)
class Seed:
    """A party tells D its masks' seed, the plan text, the rows and K (``stage``: which run)."""

    seed: bytes
    plan: str
    rows: int = field(metadata={"ge": 0})
    scores: int = field(metadata={"ge": 0})
    stage: Literal["train", "infer"]


@wire.register(name="ftl.SsProceed")
@dataclass(frozen=True)
class Proceed:
    """B tells D at the end of an epoch whether training goes on (no loss)."""

    epoch: int = field(metadata={"ge": 0})
    go_on: bool


@wire.register(name="ftl.SsTargetDeal")
@dataclass(frozen=True)
class TargetDeal:
    """A's corrections for one epoch: r_a of every batch, rows stacked (rows × d, packed)."""

    epoch: int = field(metadata={"ge": 0})
    ra: NDArray[np.uint64]


@wire.register(name="ftl.SsSourceDeal")
@dataclass(frozen=True)
class SourceDeal:
    """B's corrections for one epoch: r'_a (batches × K × d) and r''_a (batches), packed."""

    epoch: int = field(metadata={"ge": 0})
    rg: NDArray[np.uint64]
    rl: NDArray[np.uint64]


@wire.register(name="ftl.SsMaskedReps")
@dataclass(frozen=True)
class MaskedReps:
    """A's masked operand: Ŷ = [U; S] + R_Y (training) or Û = U + R_U (inference)."""

    y: NDArray[np.uint64]


@wire.register(name="ftl.SsMaskedTerms")
@dataclass(frozen=True)
class MaskedTerms:
    """B's masked operands: Q̂ = Q̃ᵀ + R_Q, Ŵ = W + R_W, ŵ_L = w_L + R_L."""

    q: NDArray[np.uint64]
    w: NDArray[np.uint64]
    wl: NDArray[np.uint64]


@wire.register(name="ftl.SsTargetProducts")
@dataclass(frozen=True)
class TargetProducts:
    """A's products: T_G = ŴᵀY + r'_A, t_L = ⟨ŵ_L, Y⟩ + r''_A; U (int64) if symmetric."""

    g: NDArray[np.uint64]
    loss: NDArray[np.uint64]
    u: NDArray[np.int64] | None


@wire.register(name="ftl.SsSourceProducts")
@dataclass(frozen=True)
class SourceProducts:
    """B's products: T_A = Ŷ[:b]Q̃ᵀ + P̃ + r_B; at inference also Φ̂ = Φᵀ + R_Φ."""

    t: NDArray[np.uint64]
    phi: NDArray[np.uint64] | None


@dataclass(frozen=True)
class DealerRecord:
    """What D saw: the parties, the rows, K and the batches it dealt for."""

    target: str
    source: str
    rows: int
    scores: int
    epochs_dealt: int
    stage: str


# ------------------------------------------------------------------ ring maths
def ring_encode(values: Any, frac_bits: int, what: str, owner: str) -> Residues:
    """Return the residues of :func:`~islands.vfl.ftl.maths.encode_array`'s integers.

    The same rounding and refusal as the HE flows. Numerators at scale 2^(2f) can pass
    2^63, so each integral float v is split as v = h·2^32 + l (h = ⌊v/2^32⌋, exact in
    float64) and its residue taken as h·2^32 + l in the ring.
    """
    scaled = maths.encode_array(values, frac_bits, what, owner)
    high = np.floor(scaled / _SPLIT)
    low = scaled - high * _SPLIT  # exact: an integer in [0, 2^32)
    if not high.any():
        return RING.encode_int(low.astype(np.int64))
    return RING.add(RING.scale(RING.encode_int(high.astype(np.int64)), 1 << 32),
                    RING.encode_int(low.astype(np.int64)))


class _Garner:
    """Garner's reconstruction for :data:`RING`, vectorised in three int64 chunks.

    :meth:`islands.crypto.rns.RnsRing.decode_int` loops in Python over every element;
    here the mixed-radix digits are numpy arrays, digits 3j … 3j + 2 combine exactly in
    int64 (three primes below 2^21: below 2^63), and only the three chunks meet in
    Python integers (numpy object arrays). The integers are the same.
    """

    def __init__(self) -> None:
        primes = RING.primes
        self.radix_mod = [[int(np.prod(primes[:i], dtype=object)) % p for i in range(k)]
                          for k, p in enumerate(primes)]
        self.inverse = [pow(int(np.prod(primes[:k], dtype=object)) % p, -1, p)
                        for k, p in enumerate(primes)]
        self.chunks = [(primes[i], primes[i + 1]) for i in range(0, RING.k, 3)]
        self.weights = [int(np.prod(primes[:i], dtype=object)) for i in range(0, RING.k, 3)]
        self.half = RING.modulus // 2

    def __call__(self, r: Residues) -> list[int]:
        res = np.asarray(r, dtype=np.int64).reshape(RING.k, -1)
        digits = np.empty_like(res)
        for k, p in enumerate(RING.primes):
            t = res[k] % p
            for i, w in enumerate(self.radix_mod[k]):
                t = (t - digits[i] * w) % p
            digits[k] = t * self.inverse[k] % p
        total = np.zeros(res.shape[1], dtype=object)
        for j, ((p0, p1), weight) in enumerate(zip(self.chunks, self.weights, strict=True)):
            chunk = digits[3 * j] + p0 * (digits[3 * j + 1] + p1 * digits[3 * j + 2])
            total = total + chunk.astype(object) * weight
        signed = np.where(total > self.half, total - RING.modulus, total)
        return signed.tolist()  # type: ignore[no-any-return]


decode_ints = _Garner()
"""The signed integers in (−P/2, P/2) of ring elements, flattened: Python ints."""


def check_capacity(plan: Plan, rows: int, scores: int, owner: str) -> None:
    """Refuse a plan whose values could wrap around P/2 (never at sizes FTL can train).

    Every value is a sum of at most (b + d)·d products of two encoded values plus one
    at scale 2^(2f), b ≤ batch_size + K (:func:`~islands.vfl.ftl.maths.value_bits`).
    """
    largest = min(max(rows, 1), plan.batch_size + scores)
    bits = maths.value_bits((largest + plan.dim) * plan.dim + scores, plan.frac_bits)
    room = RING.modulus.bit_length() - 2
    if bits > room:
        raise ValidationError(f"{owner}: engine='ss' holds values below 2^{room}, but this "
                              f"plan's may reach 2^{bits}; lower frac_bits or batch_size")


def _take(draw: Residues, start: int, shape: tuple[int, ...]) -> tuple[Residues, int]:
    size = int(np.prod(shape))
    part = np.ascontiguousarray(draw[:, start:start + size]).reshape(RING.k, *shape)
    return part, start + size


def _label(kind: str, epoch: int, batch: int) -> bytes:
    return _LABELS[kind] + epoch.to_bytes(4, "little") + batch.to_bytes(4, "little")


def target_masks(seed: bytes, epoch: int, batch: int, b: int, d: int, k: int
                 ) -> tuple[Residues, Residues, Residues]:
    """A's masks of one batch: R_Y ((b + d) × d), r'_A (K × d), r''_A (a scalar)."""
    draw = RING.uniform(seed, ((b + d) * d + k * d + 1,), label=_label("target", epoch, batch))
    r_y, at = _take(draw, 0, (b + d, d))
    r_g, at = _take(draw, at, (k, d))
    r_l, _ = _take(draw, at, ())
    return r_y, r_g, r_l


def source_masks(seed: bytes, epoch: int, batch: int, b: int, d: int, k: int
                 ) -> tuple[Residues, Residues, Residues, Residues]:
    """B's masks of one batch: R_Q (d × d), R_W ((b + d) × K), R_L ((b + d) × d), r_B (b × d)."""
    draw = RING.uniform(seed, (d * d + (b + d) * k + (b + d) * d + b * d,),
                        label=_label("source", epoch, batch))
    r_q, at = _take(draw, 0, (d, d))
    r_w, at = _take(draw, at, (b + d, k))
    r_l, at = _take(draw, at, (b + d, d))
    r_b, _ = _take(draw, at, (b, d))
    return r_q, r_w, r_l, r_b


def _t(a: Residues) -> Residues:
    """Return every residue matrix transposed: (K, n, p) → (K, p, n)."""
    return np.swapaxes(a, 1, 2)


def _dot(a: Residues, b: Residues) -> Residues:
    """Return ⟨a, b⟩ over all entries: shape (K,)."""
    return RING.dot(a.reshape(RING.k, -1), b.reshape(RING.k, -1))


def deal(target: tuple[Residues, Residues, Residues],
         source: tuple[Residues, Residues, Residues, Residues], b: int
         ) -> tuple[Residues, Residues, Residues]:
    """D's corrections of one batch: r_a = R_Y[:b]R_Q − r_B, r'_a = R_WᵀR_Y − r'_A, r''_a."""
    r_y, r_g, r_l = target
    r_q, r_w, r_lw, r_b = source
    ra = RING.sub(RING.product(_t(r_y[:, :b]), r_q), r_b)
    rg = RING.sub(RING.product(r_w, r_y), r_g)
    rl = RING.sub(_dot(r_lw, r_y), r_l)
    return ra, rg, rl


def target_products(w_hat: Residues, wl_hat: Residues, y: Residues, r_g: Residues,
                    r_l: Residues) -> tuple[Residues, Residues]:
    """A's second message: T_G = ŴᵀY + r'_A (K × d) and t_L = ⟨ŵ_L, Y⟩ + r''_A."""
    return RING.add(RING.product(w_hat, y), r_g), RING.add(_dot(wl_hat, y), r_l)


def source_products(y_hat: Residues, q_t: Residues, p_tilde: Residues, r_b: Residues,
                    ) -> Residues:
    """B's second message: T_A = Ŷ[:b]Q̃ᵀ + P̃ + r_B (b × d)."""
    b = p_tilde.shape[1]
    return RING.add(RING.add(RING.product(_t(y_hat[:, :b]), q_t), p_tilde), r_b)


def target_output(t_a: Residues, r_y: Residues, q_hat: Residues, ra: Residues) -> Residues:
    """A's output g = T_A − R_Y[:b]Q̂ + r_a = P̃ + UQ̃ᵀ (b × d, scale 2^(2f))."""
    b = t_a.shape[1]
    return RING.add(RING.sub(t_a, RING.product(_t(r_y[:, :b]), q_hat)), ra)


def source_output(t_g: Residues, t_l: Residues, r_w: Residues, r_lw: Residues,
                  y_hat: Residues, rg: Residues, rl: Residues) -> tuple[Residues, Residues]:
    """B's outputs G = T_G − R_WᵀŶ + r'_a = WᵀY and ⟨w_L, Y⟩ = t_L − ⟨R_L, Ŷ⟩ + r''_a."""
    g = RING.add(RING.sub(t_g, RING.product(r_w, y_hat)), rg)
    loss = RING.add(RING.sub(t_l, _dot(r_lw, y_hat)), rl)
    return g, loss


# ------------------------------------------------------------------ checks
def _unpack(value: Any, shape: tuple[int, ...], what: str, sender: str, me: str,
            step: str) -> Residues:
    try:
        return RING.unpack(value, shape, what, f"party {me!r}")
    except ValidationError as exc:
        raise ProtocolError(f"party {me!r}: {sender} sent a malformed {what} ({exc})",
                            party=me, step=step) from None


def _expect(value: Any, kind: type, sender: str, me: str, step: str) -> Any:
    if not isinstance(value, kind):
        raise ProtocolError(f"party {me!r}: {sender} sent a malformed {step} message (a "
                            f"{kind.__name__} expected; got {type(value).__name__})",
                            party=me, step=step)
    return value


def _check_ints(value: Any, shape: tuple[int, ...], bound: int, what: str, sender: str,
                me: str, step: str) -> IntArray:
    if not (isinstance(value, np.ndarray) and value.dtype == np.int64
            and value.shape == shape) or (value.size and int(np.abs(value).max()) > bound):
        got = (f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray)
               else type(value).__name__)
        raise ProtocolError(f"party {me!r}: {sender} sent a malformed {what} (int64 of shape "
                            f"{shape} below 2^{bound.bit_length()} expected; got {got})",
                            party=me, step=step)
    return value


# ------------------------------------------------------------------ the parties' side
def new_seed() -> bytes:
    """Return a fresh seed for a party's masks (the OS CSPRNG)."""
    return secrets.token_bytes(SEED_BYTES)


class TargetSession:
    """A's training state under ``engine="ss"``: its seed, the dealer, the epoch's deal.

    Ring work is timed as ``clock.he`` (the bucket of cryptographic work), sends and
    receives as ``clock.messaging``.
    """

    def __init__(self, party: Party, peer: str, dealer: str, plan: Plan, rows: int,
                 scores: int, clock: Clock) -> None:
        self.party, self.peer, self.dealer, self.plan = party, peer, dealer, plan
        self.rows, self.k, self.clock = rows, scores, clock
        self.seed = new_seed()
        self.ra: Residues | None = None
        self.offset = 0
        check_capacity(plan, rows, scores, f"party {party.name!r}")
        with clock.timing("messaging"):
            party.send(dealer, "seed", Seed(self.seed, plan.text(), rows, scores, "train"))

    def start_epoch(self, epoch: int) -> None:
        """Receive and check D's corrections for ``epoch``."""
        me, who = self.party.name, f"dealer {self.dealer!r}"
        with self.clock.timing("messaging"):
            got = _expect(self.party.recv(self.dealer, "deal"), TargetDeal, who, me, "deal")
        if got.epoch != epoch:
            raise ProtocolError(f"party {me!r}: {who} dealt epoch {got.epoch} for epoch "
                                f"{epoch}", party=me, step="deal")
        with self.clock.timing("he"):
            self.ra = _unpack(got.ra, (self.rows, self.plan.dim), "deal (r_a)", who, me,
                              "deal")
        self.offset = 0

    def step(self, u: Array, epoch: int, batch: int) -> Array:
        """One batch: return g = P̃ + UQ̃ᵀ (b × d) in floats, as the HE flow decodes it."""
        party, peer, plan, me, clock = (self.party, self.peer, self.plan, self.party.name,
                                        self.clock)
        b, d, k, f = u.shape[0], plan.dim, self.k, plan.frac_bits
        owner, who = f"party {me!r}", f"peer {peer!r}"
        with clock.timing("he"):
            u_num = maths.encode_array(u, f, "A's representation", owner)
            s_num = maths.encode_array(u.T @ u, f, "A's S", owner)
            y = RING.encode_int(np.vstack([u_num, s_num]).astype(np.int64))
            r_y, r_g, r_l = target_masks(self.seed, epoch, batch, b, d, k)
            reps = MaskedReps(RING.pack(y, plus=r_y))
        with clock.timing("messaging"):
            party.send(peer, "reps", reps)
            terms = _expect(party.recv(peer, "terms"), MaskedTerms, who, me, "terms")
        with clock.timing("he"):
            q_hat = _unpack(terms.q, (d, d), "Q̂", who, me, "terms")
            w_hat = _unpack(terms.w, (b + d, k), "Ŵ", who, me, "terms")
            wl_hat = _unpack(terms.wl, (b + d, d), "ŵ_L", who, me, "terms")
            t_g, t_l = target_products(w_hat, wl_hat, y, r_g, r_l)
            u_open = u_num.astype(np.int64) if plan.alignment == "symmetric" else None
            mine = TargetProducts(RING.pack(t_g), RING.pack(t_l), u_open)
        with clock.timing("messaging"):
            party.send(peer, "products", mine)
            got = _expect(party.recv(peer, "products"), SourceProducts, who, me, "products")
        if got.phi is not None:
            raise ProtocolError(f"party {me!r}: {who} sent a malformed products message "
                                "(Φ̂ outside inference)", party=me, step="products")
        assert self.ra is not None
        ra = self.ra[:, self.offset:self.offset + b]
        if ra.shape[1] != b:
            raise ProtocolError(f"party {me!r}: dealer {self.dealer!r} dealt fewer rows "
                                "than the epoch's batches hold", party=me, step="deal")
        self.offset += b
        with clock.timing("he"):
            t_a = _unpack(got.t, (b, d), "T_A", who, me, "products")
            g = target_output(t_a, r_y, q_hat, ra)
            return maths.decode(decode_ints(g), 2 * f, (b, d))


class SourceSession:
    """B's training state under ``engine="ss"``: its seed, the dealer, the epoch's deal.

    Ring work is timed as ``clock.he``, sends and receives as ``clock.messaging``.
    """

    def __init__(self, party: Party, peer: str, dealer: str, plan: Plan, rows: int,
                 scores: int, clock: Clock) -> None:
        self.party, self.peer, self.dealer, self.plan = party, peer, dealer, plan
        self.rows, self.k, self.clock = rows, scores, clock
        self.seed = new_seed()
        self.rg: Residues | None = None
        self.rl: Residues | None = None
        self.batches = 0
        check_capacity(plan, rows, scores, f"party {party.name!r}")
        with clock.timing("messaging"):
            party.send(dealer, "seed", Seed(self.seed, plan.text(), rows, scores, "train"))

    def start_epoch(self, epoch: int, batches: int) -> None:
        """Receive and check D's corrections for ``epoch`` (``batches`` batches)."""
        me, who = self.party.name, f"dealer {self.dealer!r}"
        with self.clock.timing("messaging"):
            got = _expect(self.party.recv(self.dealer, "deal"), SourceDeal, who, me, "deal")
        if got.epoch != epoch:
            raise ProtocolError(f"party {me!r}: {who} dealt epoch {got.epoch} for epoch "
                                f"{epoch}", party=me, step="deal")
        with self.clock.timing("he"):
            self.rg = _unpack(got.rg, (batches, self.k, self.plan.dim), "deal (r'_a)", who,
                              me, "deal")
            self.rl = _unpack(got.rl, (batches,), "deal (r''_a)", who, me, "deal")
        self.batches = 0

    def end_epoch(self, epoch: int, go_on: bool) -> None:
        """Tell D whether training goes on."""
        with self.clock.timing("messaging"):
            self.party.send(self.dealer, "proceed", Proceed(epoch, go_on))

    def step(self, p_tilde: Array, q_tilde: Array, phi: Array, t: Array, m: Array,
             u_b: Array, c0: float, epoch: int, batch: int
             ) -> tuple[Array, Array | None, float]:
        """One batch; returns G (K × d), A's rows (symmetric only) and the batch loss."""
        party, peer, plan, me, clock = (self.party, self.peer, self.plan, self.party.name,
                                        self.clock)
        owner, who = f"party {me!r}", f"peer {peer!r}"
        b, d, k, f = u_b.shape[0], plan.dim, self.k, plan.frac_bits
        with clock.timing("he"):
            q_t = ring_encode(q_tilde.T, f, "B's terms", owner)
            p_2f = ring_encode(p_tilde, 2 * f, "B's terms", owner)
            w = RING.encode_int(np.vstack([
                maths.encode_array(t, f, "targets", owner),
                maths.encode_array((m @ phi).T, f, "MΦ", owner)]).astype(np.int64))
            w_l = RING.encode_int(np.vstack([
                maths.encode_array(p_tilde, f, "B's terms", owner),
                maths.encode_array(q_tilde / 2 + plan.gamma * np.eye(d), f, "B's terms",
                                   owner)]).astype(np.int64))
            constant = plan.alpha * b * c0 + plan.gamma * float(np.sum(u_b ** 2))
            (constant_int,) = maths.encode([constant], 2 * f, "the loss", owner)
            r_q, r_w, r_lw, r_b = source_masks(self.seed, epoch, batch, b, d, k)
            terms = MaskedTerms(RING.pack(q_t, plus=r_q), RING.pack(w, plus=r_w),
                                RING.pack(w_l, plus=r_lw))
        with clock.timing("messaging"):
            party.send(peer, "terms", terms)
            reps = _expect(party.recv(peer, "reps"), MaskedReps, who, me, "reps")
        with clock.timing("he"):
            y_hat = _unpack(reps.y, (b + d, d), "Ŷ", who, me, "reps")
            mine = SourceProducts(RING.pack(source_products(y_hat, q_t, p_2f, r_b)), None)
        with clock.timing("messaging"):
            party.send(peer, "products", mine)
            got = _expect(party.recv(peer, "products"), TargetProducts, who, me, "products")
        u_a: Array | None = None
        if plan.alignment == "symmetric":
            u_int = _check_ints(got.u, (b, d), 1 << (30 + f), "U", who, me, "products")
            u_a = maths.decode(u_int.ravel().tolist(), f, (b, d))
        elif got.u is not None:
            raise ProtocolError(f"party {me!r}: {who} sent U under anchored alignment",
                                party=me, step="products")
        assert self.rg is not None and self.rl is not None
        if self.batches >= self.rg.shape[1]:
            raise ProtocolError(f"party {me!r}: dealer {self.dealer!r} dealt fewer batches "
                                "than the epoch holds", party=me, step="deal")
        i = self.batches
        self.batches += 1
        with clock.timing("he"):
            t_g = _unpack(got.g, (k, d), "T_G", who, me, "products")
            t_l = _unpack(got.loss, (), "t_L", who, me, "products")
            g, loss = source_output(t_g, t_l, r_w, r_lw, y_hat, self.rg[:, i], self.rl[:, i])
            g_float = maths.decode(decode_ints(g), 2 * f, (k, d))
            fed = (decode_ints(loss)[0] + constant_int) / float(2 ** (2 * f)) / b
        return g_float, u_a, float(fed)


# ------------------------------------------------------------------ the dealer
def _seeds(party: Party, target: str, source: str, plan: Plan, stage: str
           ) -> tuple[bytes, bytes, int, int]:
    """Receive both seeds; check the plan, the stage, the rows and K agree."""
    me = party.name
    got: dict[str, Seed] = {}
    for name in (target, source):
        ask = _expect(party.recv(name, "seed"), Seed, f"party {name!r}", me, "seed")
        if not isinstance(ask.seed, bytes) or len(ask.seed) != SEED_BYTES:
            raise ProtocolError(f"dealer {me!r}: party {name!r} sent a seed of "
                                f"{len(ask.seed)} bytes; {SEED_BYTES} expected", party=me,
                                step="seed")
        if ask.stage != stage:
            raise ProtocolError(f"dealer {me!r}: party {name!r} asks for {ask.stage!r} "
                                f"randomness during {stage!r}", party=me, step="seed")
        check_same_plan(plan.text(), ask.plan, party=me, peer=name)
        got[name] = ask
    a, b = got[target], got[source]
    if a.rows != b.rows or (stage == "train" and a.scores != b.scores):
        raise ProtocolError(f"dealer {me!r}: the parties disagree: {target!r} announced "
                            f"{a.rows} rows and K = {a.scores}, {source!r} {b.rows} rows and "
                            f"K = {b.scores}", party=me, step="seed")
    return a.seed, b.seed, a.rows, b.scores


def _check_dealer(party: Party, target: str, source: str) -> None:
    if len({party.name, target, source}) != 3:
        raise ValidationError(f"dealer {party.name!r}: the target {target!r} and the source "
                              f"{source!r} must be two other parties")


def dealer(party: Party, *, target: str = "A", source: str = "B", plan: Plan
           ) -> DealerRecord:
    """Play D in training: from the parties' seeds, deal every epoch's corrections.

    D deals an epoch ahead: epoch e + 1 while the parties run epoch e, and stops when B
    says training is over (an epoch dealt beyond an early stop is never used). It never
    receives a data share: only the seeds, the plan text, the rows, K and B's go-on.

    Parameters
    ----------
    party
        D's context.
    target, source
        A's and B's names.
    plan
        The plan D expects the parties to hold (their texts must equal its own).

    Every wait is the run's timeout (:meth:`islands.runtime.Party.recv`).
    """
    plan = check_plan(plan, f"dealer {party.name!r}")
    _check_dealer(party, target, source)
    if plan.engine != "ss":
        raise ValidationError(f"dealer {party.name!r}: the plan says engine="
                              f"{plan.engine!r}; a dealer serves engine='ss' only")
    seed_a, seed_b, rows, k = _seeds(party, target, source, plan, "train")
    d = plan.dim

    def deal_epoch(epoch: int) -> None:
        ras, rgs, rls = [], [], []
        for i, batch in enumerate(batch_order(rows, plan, epoch, k)):
            b = batch.size
            ra, rg, rl = deal(target_masks(seed_a, epoch, i, b, d, k),
                              source_masks(seed_b, epoch, i, b, d, k), b)
            ras.append(ra)
            rgs.append(rg)
            rls.append(rl)
        party.send(target, "deal", TargetDeal(epoch, RING.pack(np.concatenate(ras, axis=1))))
        party.send(source, "deal", SourceDeal(epoch, RING.pack(np.stack(rgs, axis=1)),
                                              RING.pack(np.stack(rls, axis=1))))

    deal_epoch(0)
    dealt = 1
    for epoch in range(plan.epochs):
        if epoch + 1 < plan.epochs:
            deal_epoch(epoch + 1)
            dealt += 1
        said = _expect(party.recv(source, "proceed"), Proceed,
                       f"party {source!r}", party.name, "proceed")
        if said.epoch != epoch:
            raise ProtocolError(f"dealer {party.name!r}: party {source!r} ended epoch "
                                f"{said.epoch} during epoch {epoch}", party=party.name,
                                step="proceed")
        if not said.go_on:
            break
    return DealerRecord(target, source, rows, k, dealt, "train")


# ------------------------------------------------------------------ inference
def infer_masks_target(seed: bytes, rows: int, d: int) -> Residues:
    """A's inference mask R_U (rows × d)."""
    return RING.uniform(seed, (rows, d), label=_label("infer-target", 0, 0))


def infer_masks_source(seed: bytes, rows: int, d: int, k: int) -> tuple[Residues, Residues]:
    """B's inference masks R_Φ (d × K) and r_B (rows × K)."""
    draw = RING.uniform(seed, (d * k + rows * k,), label=_label("infer-source", 0, 0))
    r_phi, at = _take(draw, 0, (d, k))
    r_b, _ = _take(draw, at, (rows, k))
    return r_phi, r_b


def infer_dealer(party: Party, *, target: str = "A", source: str = "B", plan: Plan
                 ) -> DealerRecord:
    """Play D in inference: deal A r_a = R_UR_Φ − r_B for its scores UΦᵀ."""
    plan = check_plan(plan, f"dealer {party.name!r}")
    _check_dealer(party, target, source)
    seed_a, seed_b, rows, k = _seeds(party, target, source, plan, "infer")
    d = plan.dim
    r_u = infer_masks_target(seed_a, rows, d)
    r_phi, r_b = infer_masks_source(seed_b, rows, d, k)
    ra = RING.sub(RING.product(_t(r_u), r_phi), r_b)
    party.send(target, "infer-deal", TargetDeal(0, RING.pack(ra)))
    return DealerRecord(target, source, rows, k, 0, "infer")


def infer_target(party: Party, u: Array, *, peer: str, dealer: str, plan: Plan,
                 scores: int) -> Array:
    """A's side of SS inference (after the hellos): its scores UΦᵀ (rows × K)."""
    me, who = party.name, f"peer {peer!r}"
    rows, d, f = u.shape[0], plan.dim, plan.frac_bits
    seed = new_seed()
    check_capacity(plan, rows, scores, f"party {me!r}")
    party.send(dealer, "seed", Seed(seed, plan.text(), rows, 0, "infer"))
    u_ring = ring_encode(u, f, "A's representation", f"party {me!r}")
    r_u = infer_masks_target(seed, rows, d)
    party.send(peer, "reps", MaskedReps(RING.pack(u_ring, plus=r_u)))
    got = _expect(party.recv(peer, "products"), SourceProducts, who, me, "products")
    t = _unpack(got.t, (rows, scores), "T", who, me, "products")
    phi_hat = _unpack(got.phi, (d, scores), "Φ̂", who, me, "products")
    dealt = _expect(party.recv(dealer, "infer-deal"), TargetDeal, f"dealer {dealer!r}", me,
                    "infer-deal")
    ra = _unpack(dealt.ra, (rows, scores), "deal (r_a)", f"dealer {dealer!r}", me,
                 "infer-deal")
    out = RING.add(RING.sub(t, RING.product(_t(r_u), phi_hat)), ra)
    return maths.decode(decode_ints(out), 2 * f, (rows, scores))


def infer_source(party: Party, phi: Array, *, peer: str, dealer: str, plan: Plan,
                 rows: int) -> None:
    """B's side of SS inference (after the hellos): serve A's ``rows`` scores."""
    me, who = party.name, f"peer {peer!r}"
    k, d = phi.shape
    seed = new_seed()
    party.send(dealer, "seed", Seed(seed, plan.text(), rows, k, "infer"))
    phi_t = ring_encode(phi.T, plan.frac_bits, "Φ", f"party {me!r}")
    r_phi, r_b = infer_masks_source(seed, rows, d, k)
    reps = _expect(party.recv(peer, "reps"), MaskedReps, who, me, "reps")
    u_hat = _unpack(reps.y, (rows, d), "Û", who, me, "reps")
    t = RING.add(RING.product(_t(u_hat), phi_t), r_b)
    party.send(peer, "products", SourceProducts(RING.pack(t), RING.pack(phi_t, plus=r_phi)))

