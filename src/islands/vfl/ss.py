"""Vertical regression on secret shares: the coordinator deals correlated randomness.

``engine="ss"`` runs Yang et al.'s vertical linear and logistic regression [1]_ (the
maths of :mod:`islands.vfl.maths`, unchanged) with additive masks over the exact ring
Z_P of :data:`islands.crypto.rns.SS_RING` (nine primes below 2^21, P ≈ 2^189) instead of
homomorphic encryption. The coordinator C, whom the paper already trusts not to collude
with a data party, becomes the *dealer* of Du and Atallah's commodity model [3]_ (as in
secure Swarm CCA, :mod:`islands.cca.secure`): each data party tells C a 32-byte seed, and
C returns only corrections built from everyone's masks. Every product the Taylor loss
needs is "party j's plaintext times party k's plaintext, output to one party", so no
multiplication of two shared values and no truncation is needed: the parties compute
the same integers as the encrypted protocol and as :func:`islands.vfl.maths.fixed_point_gd`,
bit for bit. SecureML [2]_ masks the fixed data matrix once and reuses it; so does this.

Notation: data parties j ∈ {A_1 … A_k, B} in the canonical order (passive names sorted,
then B); X̃_j party j's encoded block (B's carries the intercept column); ũ_j its encoded
partial scores of a batch I (B's is ṽ = ũ_B − label_factor·y), ẽ = Σ_j ũ_j. From party
j's seed C and j derive R_j (n × p_j), and per epoch e and batch t ρ_j (b) and
σ_{j→k} (p_k) for every other k; from a pair seed j and l derive zero-sum loss masks.

==========  ================  ==============================================================
tag         sender → to       payload (every ring element packed, 3 words)
==========  ================  ==============================================================
hello       A_k, B → C        rows and features, as under HE
setup       C → all           :class:`~islands.vfl.protocol.Setup` with no key
roster      B → every A_k     the data parties' names, which A_k compares with C's setup
seed        A_k, B → C        32 bytes from the CSPRNG
pair        j → l (j < l)     32 bytes from the CSPRNG: the pair's zero-sum loss masks
xhat        j → every k       X̂_j = X̃_j + R_j (n × p_j), once
deal        C → k             per epoch, for every batch r_k = Σ_{j≠k} (R_k[I]ᵀρ_j − σ_{j→k})
m           j → every k       per batch: û_j = ũ_j + ρ_j (b) and
                              T_{k←j} = X̂_k[I]ᵀũ_j + σ_{j→k} (p_k)
lossshare   A_k, B → C        per epoch, for every batch λ_k (below)
status      C → all           :class:`~islands.vfl.protocol.Status`, as under HE
— with ``sigmoid="poly5"`` also —
yhat        B → every A_k     ŷ = y + R_y (n): B's labels ±1, masked once (R_y from B's seed)
powers      C → B             per epoch, B's shares of a², …, a⁶ (5 × n, below)
open        j → every k       per batch, before ``m``: d_j = ũ_j − a_j (b)
==========  ================  ==============================================================

Party k then holds G_k = X̃_k[I]ᵀũ_k + Σ_{j≠k} (T_{k←j} − R_k[I]ᵀû_j) + r_k = X̃_k[I]ᵀẽ
exactly, the sum the HE flow decrypts, and steps with
:func:`~islands.vfl.maths.gradient_from_sum`. For the loss, ũ_j·ũ_l = û_j·ũ_l − ρ_j·û_l
+ ρ_j·ρ_l: for each pair j < l, l adds 2û_j·ũ_l and j adds −2ρ_j·û_l to its share
λ = ‖ũ‖² + penalty + …, plus or minus the pair's mask; C adds 2ρ_j·ρ_l and reads Σẽ² +
penalties, from which it decodes the batch loss as under HE (Table 1 reveals it to C).

``sigmoid="poly5"`` (:data:`islands.vfl.maths.POLY5`) replaces the Taylor residual by
r = s(z) − y01, s(z) = ½ + c1·z + c3·z³ + c5·z⁵, whose powers of z = Σ_j u_j are products
of shared values. The ũ_j (x·θ at 2^-16, |u_j| < 2^5; B's without the labels) are
already additive shares of z̃. The dealer hands out a *power tuple* per row (Beaver's
circuit randomisation [4]_): every party draws its share a_j of a = Σ_j a_j and, except
B, its shares of a², …, a⁶ from its seed; C sends B the rest of each power, a^i − Σ_{j≠B}
(the others' shares). The data parties open d = z̃ − a among themselves (``open``,
uniform: C never sees it) and form [z̃^m] = Σ_i C(m, i)·d^(m−i)·[a^i], B adding d^m. Each
then holds its share r_j = K1·2^64·ũ_j + K3·2^32·[z̃³] + K5·[z̃⁵] (B minus y·2^107), r̃ =
Σ_j r_j = 2^108·r, and r_j goes through the ``m`` exchange above in place of ũ_j: G_k =
X̃_kᵀr̃, decoded and stepped with :func:`~islands.vfl.maths.poly5_gradient_from_sum`. The
loss share is λ_k = Σ_i (6K1·2^64·[z̃²] + 3K3·2^32·[z̃⁴] + 2K5·[z̃⁶]) − 6·2^108·t_k +
penalty ± the pairs' masks, where t_B = y·(d + a_B) and t_k = ŷ·a_k: C adds
6·2^108·Σ_k R_y·a_k (it knows both) and reads 12·2^124·Σ(ℓ − log 2) + penalties. These are
exactly the integers of :func:`~islands.vfl.maths.fixed_point_step_poly`; every value
decoded stays inside ±P/2 (:func:`~islands.vfl.maths.poly5_bounds`, checked by every party).
The cost: one more exchange of b elements between every ordered pair of data parties per
batch, 5n elements from C to B per epoch, n from B to every A_k once.

What each party sees (honest-but-curious, as the HE flow): A_k and B receive only ring
elements masked by values drawn from another party's seed (X̂_j, û_j, T and r_k are
uniform in Z_P to them), and learn what the HE flow gives them: X_kᵀe (and Σe for B).
Under poly5 the ``open`` values d_j and ŷ are masked the same way (a_j, R_y from the
sender's seed), and B's ``powers`` by the other parties' seeded shares.
C receives seeds and loss shares masked by the pairs' zero-sum masks, and learns the
batch losses; it never receives a data share (tests check the transcript). Secrecy is
that of the ChaCha20 stream the masks are drawn from. Who must not collude: C with any
data party, as under HE, but the coalition gains more here: C and any one data party
remove the masks from the blocks that party received and read **every other data
party's features**, and B's labels (from ŷ, or from û_B in the first batch), where
under HE they read residuals and scores. Data parties colluding without C gain nothing
from C's side. A passive party learns the data parties' names from C's setup and sends
its masked block to each: it first checks them against the roster B sends it
(``roster``, :func:`islands.vfl.protocol._confirm_roster`), so C cannot add a name of
its own. Nothing defends against a party
that deviates (a wrong correction corrupts a step; values outside the plan's bounds are
refused, naming the step).

Why by hand on :mod:`islands.crypto.rns` and not on SecretFlow's SPU: SPU's SEMI2K with
a trusted third party needs a Beaver server that its pip wheel does not ship (only the
client stub), SPU pins numpy < 2 and runs its own link outside islands' transport
(no transcript, no named refusals), and its SS-LR shares the weights, where Yang et
al.'s flow keeps each party's θ in the clear for Table 2 inference. The ring products are
float64 BLAS (:class:`~islands.crypto.rns.RnsRing`), and the protocol is the commodity
product already used for secure CCA.

References
----------
.. [1] Q. Yang, Y. Liu, T. Chen, Y. Tong. "Federated Machine Learning: Concept and
   Applications." ACM TIST 10(2), 2019, §2.4.2, Tables 1–2.
.. [2] P. Mohassel, Y. Zhang. "SecureML: A System for Scalable Privacy-Preserving Machine
   Learning." IEEE S&P 2017 (masking the data matrix once, a dealer of correlations).
.. [3] W. Du, M. J. Atallah. "Protocols for secure remote database access with approximate
   matching." Advances in Information Security 2, 2001; D. Beaver, "Commodity-based
   cryptography", STOC 1997.
.. [4] D. Beaver. "Efficient multiparty protocols using circuit randomization." CRYPTO
   1991 (open a masked value against dealt correlated randomness).
"""

from __future__ import annotations

import itertools
import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array, IntArray
from islands.crypto.prg import SEED_BYTES
from islands.crypto.rns import SS_RING, Residues
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party
from islands.vfl import maths

__all__ = ["RING", "check_fits", "order", "plan_bounds", "run_coordinator", "run_data_party"]

RING = SS_RING
"""The ring of every share: nine primes, P ≈ 2^189."""

_LABEL = b"islands vfl ss "


def _label(what: str, *parts: object) -> bytes:
    return _LABEL + what.encode() + b"".join(b"/" + str(p).encode() for p in parts)


def order(parties: Sequence[str], active: str) -> list[str]:
    """Return the data parties in the canonical order: passive names sorted, then B."""
    return [*sorted(p for p in parties if p != active), active]


def plan_bounds(plan: Any, passive: int) -> maths.ValueBounds:
    """Return the plan's :class:`~islands.vfl.maths.ValueBounds`: the Taylor loss's or poly5's."""
    if plan.sigmoid == "poly5":
        return maths.poly5_bounds(plan.precision, plan.batch_size, passive)
    return maths.value_bounds(plan.precision, plan.batch_size, passive)


def check_fits(bounds: maths.ValueBounds, owner: str) -> None:
    """Refuse a plan whose gradient sums or loss could wrap around the ring's ±P/2."""
    room = RING.modulus.bit_length() - 2
    worst = max(bounds.gradient_bits, bounds.loss_bits)
    if worst > room:
        raise ValidationError(f"{owner}: the plan's sums need {worst} bits, beyond the ring's "
                              f"{room} (engine='ss'); lower batch_size or score_bits")


def _offsets(batches: Sequence[IntArray]) -> list[int]:
    return _starts([int(b.size) for b in batches])


def _starts(sizes: Sequence[int]) -> list[int]:
    return [0, *itertools.accumulate(sizes)]


@dataclass
class _Masks:
    """One epoch's masks drawn from one party's seed (ρ for every row position, σ per peer)."""

    rho: Residues
    sigma: dict[str, Residues]


def _epoch_masks(seed: bytes, epoch: int, n: int, batches: int,
                 widths: dict[str, int]) -> _Masks:
    """ρ_j for the epoch's n row positions and σ_{j→k} (batches × p_k) for every other k."""
    return _Masks(RING.uniform(seed, (n,), label=_label("rho", epoch)),
                  {k: RING.uniform(seed, (batches, w), label=_label("sigma", k, epoch))
                   for k, w in widths.items()})


def _own_powers(seed: bytes, epoch: int, n: int, higher: bool) -> Residues:
    """Draw a party's shares of a (and, if ``higher``, of a², …, a⁶): (K, 1 or 6, n)."""
    first = RING.uniform(seed, (1, n), label=_label("a", epoch))
    if not higher:
        return first
    return np.concatenate([first, RING.uniform(seed, (5, n), label=_label("pow", epoch))],
                          axis=1)


def _ring_constants(values: Sequence[int]) -> NDArray[np.float64]:
    """Residues of Python integers (any size, any sign), as floats: shape (K, len(values), 1)."""
    return np.array([[[v % p] for v in values] for p in RING.primes], dtype=np.float64)


_PRIMES = np.array(RING.primes, dtype=np.float64).reshape(RING.k, 1, 1)
_INVERSES = 1.0 / _PRIMES


def _reduce(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """X mod p in place, for integral floats |x| < 2^52 (x of shape (K, …, ≥1)).

    ⌊x/p⌋ computed in float64 may be one off; x − ⌊x/p⌋·p is then exact and within one
    prime of [0, p), and the two corrections bring it there (as :class:`RnsRing` does).
    """
    shape = (RING.k,) + (1,) * (x.ndim - 1)
    p, inv = _PRIMES.reshape(shape), _INVERSES.reshape(shape)
    t = x * inv
    np.floor(t, out=t)
    t *= p
    x -= t
    np.add(x, p, out=x, where=x < 0)
    np.subtract(x, p, out=x, where=x >= p)
    return x


# z^m = Σ_{i=0}^{m} C(m, i)·d^(m−i)·a^i: for m = 2 … 6 the 15 terms with 0 < i < m, grouped by m
_TERMS = [(m, i) for m in range(2, 7) for i in range(1, m)]
_D_POWER = [m - i - 1 for m, i in _TERMS]  # index of d^(m−i) in [d, d², …]
_A_POWER = [i - 1 for _, i in _TERMS]  # index of a^i in [a, a², …]
_GROUPS = [0, 1, 3, 6, 10]  # where each m's terms start
_BINOMIALS = np.array([math.comb(m, i) for m, i in _TERMS], dtype=np.float64).reshape(1, -1, 1)
_K1, _K3, _K5 = maths.POLY5
_F = maths.POLY5_SCORE_BITS
_RESIDUAL = _ring_constants([_K1 << 4 * _F, _K3 << 2 * _F, _K5, -maths.POLY5_RESIDUAL_SCALE // 2])
_LOSS = _ring_constants([6 * _K1 << 4 * _F, 3 * _K3 << 2 * _F, 2 * _K5,
                         -6 * maths.POLY5_RESIDUAL_SCALE])


def _power_shares(d: Residues, a: Residues, lead: bool) -> NDArray[np.float64]:
    """Shares of z², …, z⁶ (K, 5, b) from the opened d = z − a and shares ``a`` (K, 6, b) of a … a⁶.

    z^m = Σ_i C(m, i)·d^(m−i)·a^i, where the i = 0 term d^m is added by one party (``lead``).
    In float64: every product of residues is below 2^42 and every sum below 2^28, exact.
    """
    powers = np.empty((RING.k, 6, d.shape[-1]))
    powers[:, 0] = d
    for j in range(1, 6):
        np.multiply(powers[:, j - 1], powers[:, 0], out=powers[:, j])
        _reduce(powers[:, j])
    wide = a.astype(np.float64)
    terms = _reduce(powers[:, _D_POWER] * wide[:, _A_POWER])
    terms *= _BINOMIALS  # C(m, i) ≤ 20
    out: NDArray[np.float64] = np.add.reduceat(terms, _GROUPS, axis=1)
    out += wide[:, 1:]
    if lead:
        out += powers[:, 1:]
    return _reduce(out)


def _poly5_shares(q: Residues, z: NDArray[np.float64], label: Residues | None,
                  label_term: Residues) -> tuple[Residues, Residues]:
    """Return a party's shares of r̃ (b) and of the batch's poly5 loss sum (one element).

    ``q`` its share of z̃ (its own partial scores), ``z`` its shares of z̃², …, z̃⁶;
    ``label`` B's labels ±1 (None elsewhere) and ``label_term`` this party's share of
    Σ y·z̃. r̃ = K1·2^64·z̃ + K3·2^32·z̃³ + K5·z̃⁵ − y·2^107 and the loss sum
    Σ (6K1·2^64·z̃² + 3K3·2^32·z̃⁴ + 2K5·z̃⁶) − 6·2^108·Σ y·z̃: the integers of
    :func:`~islands.vfl.maths.poly5_residual` and :func:`~islands.vfl.maths.poly5_loss_sum`.
    """
    parts: list[NDArray[Any]] = [q, z[:, 1], z[:, 3]]
    if label is not None:
        parts.append(label)
    stacked = np.stack(parts, axis=1).astype(np.float64)
    # four products below 2^42 each: their sum is exact
    r = _reduce((stacked * _RESIDUAL[:, :len(parts)]).sum(axis=1))
    per_row = _reduce(z[:, 0::2] * _LOSS[:, :3])
    loss = per_row.sum(axis=(1, 2)) + label_term * _LOSS[:, 3, 0]
    return r.astype(np.uint32), _reduce(loss).astype(np.uint32)


def _pair_masks(seed: bytes, epoch: int, batches: int) -> Residues:
    return RING.uniform(seed, (batches,), label=_label("z", epoch))


def _seed(value: Any, sender: str, party: Party, step: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != SEED_BYTES:
        raise ProtocolError(f"party {sender!r} sent a {step} that is not {SEED_BYTES} bytes",
                            party=party.name, step=step)
    return value


def _unpack(party: Party, value: Any, shape: tuple[int, ...], tag: str,
            sender: str) -> Residues:
    try:
        return RING.unpack(value, shape, tag, f"party {party.name!r} (from {sender!r})")
    except ValidationError as exc:
        raise ProtocolError(str(exc), party=party.name, step=tag) from None


# --------------------------------------------------------------------------- dealer


def run_coordinator(party: Party, clock: Any, plan: Any, widths: dict[str, int],
                    active: str, n: int, min_rows: int,
                    announce: Callable[[int, bool], Any]) -> tuple[list[float], list[float],
                                                                  int, bool]:
    """C under ``engine="ss"``, after the setup: deal every epoch, decode every batch loss.

    Parameters
    ----------
    widths
        Every data party's encoded width (B's includes the intercept).
    announce
        ``announce(epoch, go_on)`` sends C's end-of-epoch status to every data party.

    Returns
    -------
    (batch losses, epoch losses, epochs run, converged)
    """
    names = order(list(widths), active)
    bounds = plan_bounds(plan, len(names) - 1)
    poly = plan.sigmoid == "poly5"
    seeds = {}
    for name in names:
        with clock.timing("messaging"):
            got = party.recv(name, "seed")
        seeds[name] = _seed(got, name, party, "seed")
    with clock.timing("ring"):
        masks_r = {k: RING.uniform(seeds[k], (n, widths[k]), label=_label("R"))
                   for k in names}
        mask_y = RING.uniform(seeds[active], (n,), label=_label("y")) if poly else None

    def deal(epoch: int) -> tuple[list[IntArray], dict[str, Residues], Residues,
                                  Residues | None]:
        batches = maths.batch_plan(n, plan.batch_size, epoch, plan.seed, min_rows)
        at = _offsets(batches)
        drawn = {j: _epoch_masks(seeds[j], epoch, n, len(batches),
                                 {k: widths[k] for k in names if k != j}) for j in names}
        rho_sum = drawn[names[0]].rho.copy()
        for j in names[1:]:
            RING.add(rho_sum, drawn[j].rho, out=rho_sum)
        out = {}
        for k in names:
            others = RING.sub(rho_sum, drawn[k].rho)
            r = np.empty((RING.k, len(batches), widths[k]), dtype=np.uint32)
            for t, rows in enumerate(batches):
                r[:, t] = RING.matvec(masks_r[k][:, rows], others[:, at[t]:at[t + 1]])
            for j in names:
                if j != k:
                    r = RING.sub(r, drawn[j].sigma[k])
            out[k] = r
        if mask_y is not None:
            return (batches, out, *_deal_powers(seeds, names, active, epoch, n, batches,
                                                mask_y))
        cross = np.zeros((RING.k, len(batches)), dtype=np.uint32)
        for first, second in itertools.combinations(names, 2):
            for t in range(len(batches)):
                s = slice(at[t], at[t + 1])
                cross[:, t] = RING.add(cross[:, t], RING.dot(drawn[first].rho[:, s],
                                                             drawn[second].rho[:, s]))
        return batches, out, RING.scale(cross, 2), None

    def send_deal(dealt: dict[str, Residues], powers: Residues | None) -> None:
        for k in names:
            with clock.timing("messaging"):
                party.send(k, "deal", RING.pack(dealt[k]))
        if powers is not None:
            with clock.timing("messaging"):
                party.send(active, "powers", RING.pack(powers))

    with clock.timing("ring"):
        pending = deal(0)
    send_deal(pending[1], pending[3])
    batch_losses: list[float] = []
    epoch_losses: list[float] = []
    epochs_run, converged = 0, False
    for epoch in range(plan.epochs):
        batches, _, cross, _ = pending
        if epoch + 1 < plan.epochs:  # while the parties train this epoch
            with clock.timing("ring"):
                pending = deal(epoch + 1)
        total = cross
        for name in names:
            with clock.timing("messaging"):
                got = party.recv(name, "lossshare")
            total = RING.add(total, _unpack(party, got, (len(batches),), "lossshare", name))
        with clock.timing("compute"):
            values = RING.decode_int(total)
        weighted = 0.0
        for rows, value in zip(batches, values, strict=True):
            if not (-1 << bounds.loss_bits if poly else 0) <= value < 1 << bounds.loss_bits:
                raise ProtocolError(f"the loss shares of {names} add up to a value outside "
                                    f"{'(-' if poly else '['}2^{bounds.loss_bits}, "
                                    f"2^{bounds.loss_bits}) (a malformed share)",
                                    party=party.name, step="lossshare")
            loss = (maths.poly5_decode_loss(value, rows.size) if poly else
                    maths.decode_loss(value, rows.size, plan.loss, plan.precision))
            batch_losses.append(loss)
            weighted += loss * rows.size
        epoch_losses.append(weighted / n)
        epochs_run = epoch + 1
        converged = maths.settled(epoch_losses, plan.tol)
        go_on = epoch + 1 < plan.epochs and not converged
        with clock.timing("messaging"):
            announce(epoch, go_on)
        if not go_on:
            break
        send_deal(pending[1], pending[3])
    return batch_losses, epoch_losses, epochs_run, converged


def _deal_powers(seeds: dict[str, bytes], names: list[str], active: str, epoch: int, n: int,
                 batches: Sequence[IntArray], mask_y: Residues) -> tuple[Residues, Residues]:
    """poly5: C's part of every batch's loss sum and B's shares of a², …, a⁶ (5 × n).

    a = Σ_j a_j over every data party's seeded share; the other parties' shares of the
    higher powers come from their seeds, so B's are a^i − Σ_{j≠B} (their shares). C's loss
    part is 6·2^108·R_y·Σ_{j≠B} a_j per batch: the passive parties' products with the
    masked labels ŷ = y + R_y carry −6·2^108·R_y·a_j (:func:`_poly5_shares`).
    """
    drawn = {j: _own_powers(seeds[j], epoch, n, j != active) for j in names}
    others = [j for j in names if j != active]
    share_b = np.empty((RING.k, 5, n), dtype=np.uint32)
    cross = np.empty((RING.k, len(batches)), dtype=np.uint32)
    at = _offsets(batches)
    for t, rows in enumerate(batches):  # a batch at a time: small arrays stay in cache
        s = slice(at[t], at[t + 1])
        theirs = sum((drawn[j][:, :, s].astype(np.float64) for j in others),
                     start=np.zeros((RING.k, 6, rows.size)))
        a = _reduce(theirs[:, 0] + drawn[active][:, 0, s])
        powers = np.empty((RING.k, 5, rows.size))
        previous = a
        for i in range(5):
            np.multiply(previous, a, out=powers[:, i])
            previous = _reduce(powers[:, i])
        share_b[:, :, s] = _reduce(powers - theirs[:, 1:])
        products = _reduce(mask_y[:, rows] * _reduce(theirs[:, 0]))
        cross[:, t] = _reduce(products.sum(axis=1))
    return RING.scale(cross, 6 * maths.POLY5_RESIDUAL_SCALE), share_b


# ----------------------------------------------------------------------- data party


def run_data_party(party: Party, clock: Any, plan: Any, x_enc: IntArray, x_float: Array,
                   scores: Any, widths: dict[str, int], active: str, coordinator: str,
                   min_rows: int, status: Any, labels: Array | None = None,
                   ) -> tuple[Array, int]:
    """Play a data party under ``engine="ss"`` after the setup; return (θ, epochs run).

    Parameters
    ----------
    x_enc, x_float
        The party's encoded block and its float value (B's with the intercept column).
    scores
        ``scores(rows, theta)``: the party's encoded partial scores of a batch (B's minus
        label_factor·y under the Taylor loss; under poly5 x·θ alone,
        :func:`~islands.vfl.maths.poly5_scores`), int64.
    widths
        Every data party's encoded width, as C relayed them.
    status
        ``status(epoch)``: read C's end-of-epoch message; False stops.
    labels
        B's labels ±1, under poly5 (None otherwise and for the passive parties).
    """
    me = party.name
    owner = f"party {me!r}"
    names = order(list(widths), active)
    others = [k for k in names if k != me]
    n, width = x_enc.shape
    bounds = plan_bounds(plan, len(names) - 1)
    check_fits(bounds, owner)
    poly = plan.sigmoid == "poly5"
    lead = me == active

    def send(to: str, tag: str, payload: Any) -> None:
        with clock.timing("messaging"):
            party.send(to, tag, payload)

    def recv(frm: str, tag: str) -> Any:
        with clock.timing("messaging"):
            return party.recv(frm, tag)

    seed = secrets.token_bytes(SEED_BYTES)
    send(coordinator, "seed", seed)
    pair_seeds: dict[str, bytes] = {}
    for k in names[names.index(me) + 1:]:
        pair_seeds[k] = secrets.token_bytes(SEED_BYTES)
        send(k, "pair", pair_seeds[k])
    for k in names[:names.index(me)]:
        pair_seeds[k] = _seed(recv(k, "pair"), k, party, "pair")
    with clock.timing("ring"):
        own = RING.encode_int(x_enc)
        mask = RING.uniform(seed, (n, width), label=_label("R"))
        hat = RING.pack(own, plus=mask)
    for k in others:
        send(k, "xhat", hat)
    del hat
    label: Residues | None = None  # poly5: B's labels ±1 in the ring; ŷ = y + R_y elsewhere
    if poly and lead:
        if labels is None:
            raise ValidationError(f"{owner}: sigmoid='poly5' needs the active party's labels")
        with clock.timing("ring"):
            label = RING.encode_int(np.asarray(labels).astype(np.int64))
            masked_y = RING.pack(label, plus=RING.uniform(seed, (n,), label=_label("y")))
        for k in others:
            send(k, "yhat", masked_y)
    blocks = [own]
    for k in others:
        blocks.append(_unpack(party, recv(k, "xhat"), (n, widths[k]), "xhat", k))
    if poly and not lead:
        label = _unpack(party, recv(active, "yhat"), (n,), "yhat", active)
    with clock.timing("ring"):
        # [X̃_me | X̂_k …]: one product per batch gives X̃ᵀũ and every T_{k←me}
        joint = np.concatenate(blocks, axis=2)
    del blocks, own
    cols = _starts([widths[k] for k in others])
    before = names[:names.index(me)]
    theta = np.zeros(width)
    epochs_run = 0
    for epoch in range(plan.epochs):
        batches = maths.batch_plan(n, plan.batch_size, epoch, plan.seed, min_rows)
        at = _offsets(batches)
        dealt = _unpack(party, recv(coordinator, "deal"), (len(batches), width), "deal",
                        coordinator)
        powers = None
        if poly:
            dealt_powers = (_unpack(party, recv(coordinator, "powers"), (5, n), "powers",
                                    coordinator) if lead else None)
            with clock.timing("ring"):
                powers = _own_powers(seed, epoch, n, not lead)  # (K, 6, n): a … a⁶
                if dealt_powers is not None:
                    powers = np.concatenate([powers, dealt_powers], axis=1)
        with clock.timing("ring"):
            drawn = _epoch_masks(seed, epoch, n, len(batches),
                                 {k: widths[k] for k in others})
            zeros = {k: _pair_masks(pair_seeds[k], epoch, len(batches)) for k in others}
        shares = np.empty((RING.k, len(batches)), dtype=np.uint32)
        for t, rows in enumerate(batches):
            with clock.timing("compute"):
                u = scores(rows, theta)
            with clock.timing("ring"):
                q = RING.encode_int(u)
            if powers is not None:
                q, poly_loss = _poly5_round(party, clock, q, powers[:, :, at[t]:at[t + 1]],
                                            label, rows, others, lead)
            with clock.timing("ring"):
                rho = drawn.rho[:, at[t]:at[t + 1]]
                u_hat = RING.add(q, rho)
                products = RING.matvec(joint[:, rows], q)
                for i, k in enumerate(others):
                    t_k = RING.add(products[:, width + cols[i]:width + cols[i + 1]],
                                   drawn.sigma[k][:, t])
                    msg = RING.pack(np.concatenate([u_hat, t_k], axis=1))
                    send(k, "m", msg)
            got = {k: _unpack(party, recv(k, "m"), (rows.size + width,), "m", k)
                   for k in others}
            with clock.timing("ring"):
                g = RING.add(products[:, :width], dealt[:, t])
                hat_sum = np.zeros((RING.k, rows.size), dtype=np.uint32)
                for k in others:
                    g = RING.add(g, got[k][:, rows.size:])
                    RING.add(hat_sum, got[k][:, :rows.size], out=hat_sum)
                g = RING.sub(g, RING.matvec(mask[:, rows], hat_sum))
                g_int = RING.decode_int(g)
                shares[:, t] = _pair_masked(
                    poly_loss if powers is not None else
                    _loss_share(q, rho, got, before, others, rows.size), before, others,
                    zeros, t)
            with clock.timing("compute"):
                if max(abs(v) for v in g_int) >= 1 << bounds.gradient_bits:
                    raise ProtocolError(f"{owner}: the gradient sums of batch {t} are beyond "
                                        f"2^{bounds.gradient_bits}: C's correction or a "
                                        f"peer's message {others} is malformed",
                                        party=me, step="m")
                weights = theta[:-1] if me == active else theta
                penalty = (maths.poly5_penalty_units(weights, plan.lam, rows.size) if poly
                           else maths.penalty_units(weights, plan.lam, rows.size, plan.loss,
                                                    plan.precision))
                if abs(penalty) >= 1 << bounds.penalty_bits:
                    raise ValidationError(f"{owner}: the L2 penalty λ‖θ‖² has grown beyond "
                                          "the loss's fixed-point range (training "
                                          "diverged); lower learning_rate or lam")
                shares[:, t] = RING.add(shares[:, t], RING.encode_int(
                    np.array([penalty], dtype=object))[:, 0])
                grad = (maths.poly5_gradient_from_sum(g_int, theta, plan.lam, rows.size,
                                                      plan.precision, intercept=lead) if poly
                        else maths.gradient_from_sum(g_int, theta, plan.lam, rows.size,
                                                     plan.loss, plan.precision,
                                                     intercept=lead))
                theta = theta - plan.learning_rate * grad
        send(coordinator, "lossshare", RING.pack(shares))
        epochs_run = epoch + 1
        if not status(epoch):
            break
    return theta, epochs_run


def _loss_share(q: Residues, rho: Residues, got: dict[str, Residues], before: list[str],
                others: list[str], b: int) -> Residues:
    """λ = ‖ũ‖² + 2Σ_{j<me} û_j·ũ − 2Σ_{l>me} ρ·û_l (the pairs' masks and penalty added later)."""
    share = RING.dot(q, q)
    for k in others:
        u_hat = got[k][:, :b]
        if k in before:
            share = RING.add(share, RING.scale(RING.dot(u_hat, q), 2))
        else:
            share = RING.sub(share, RING.scale(RING.dot(rho, u_hat), 2))
    return share


def _pair_masked(share: Residues, before: list[str], others: list[str],
                 zeros: dict[str, Residues], t: int) -> Residues:
    """Add the zero-sum masks of every pair: −z_{j,me} for j before me, +z_{me,l} after."""
    for k in others:
        share = (RING.sub if k in before else RING.add)(share, zeros[k][:, t])
    return share


def _poly5_round(party: Party, clock: Any, q: Residues, a: Residues, label: Residues | None,
                 rows: IntArray, others: list[str], lead: bool) -> tuple[Residues, Residues]:
    """poly5's opening round: return this party's shares of r̃ (b) and of the loss sum.

    Every data party sends d_j = ũ_j − a_j to every other (``open``: uniform, a_j drawn
    from its seed or dealt); d = Σ_j d_j = z̃ − a. With ``a`` its shares (K, 6, b) of
    a … a⁶ it forms shares of z̃² … z̃⁶ (:func:`_power_shares`) and then r̃ and ℓ
    (:func:`_poly5_shares`). ``label``: B's labels ±1 (``lead``), else ŷ[all rows].
    """
    with clock.timing("ring"):
        d = RING.sub(q, a[:, 0])
        packed = RING.pack(d)
    for k in others:
        with clock.timing("messaging"):
            party.send(k, "open", packed)
    for k in others:
        with clock.timing("messaging"):
            got = party.recv(k, "open")
        d = RING.add(d, _unpack(party, got, (rows.size,), "open", k))
    with clock.timing("ring"):
        z = _power_shares(d, a, lead)
        assert label is not None
        y = label[:, rows]
        # this party's share of Σ y·z̃: B has y·(d + a_B), A_k ŷ·a_k (C removes R_y·a_k)
        label_term = RING.dot(y, RING.add(d, a[:, 0]) if lead else a[:, 0])
        return _poly5_shares(q, z, y if lead else None, label_term)
