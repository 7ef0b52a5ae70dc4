"""Secure Swarm CCA: each peer learns its canonical vectors and the correlations, and no more.

The published protocol (:mod:`islands.cca.protocol`) lets S1 rebuild the projector onto
span(Y) (:mod:`islands.cca.audit`). This protocol keeps the paper's setting (two peers,
rows aligned, each whitens its own block: X_c = Q_x R_x, Y_c = Q_y R_y) and its output,
but the two peers meet only in a secret-shared product:

1. S2 draws a Haar-random orthogonal O (q×q) from the OS CSPRNG and sets Z = Q_y·O, an
   orthonormal basis of span(Y) that S1 cannot relate to Q_y.
2. S1 learns M' = Q_xᵀZ = M·O (M = Q_xᵀQ_y) from a two-party product over the ring
   Z_P of :mod:`islands.crypto.rns` (P ≈ 2^63, fixed point with 2^29), with
   correlated randomness from a dealer (Du and Atallah's commodity model [2]_): each peer
   draws a seed from the OS CSPRNG and tells it to the dealer only; the seeds expand into
   uniform masks R_a (n×p, S1's) and R_b (n×q) and r_b (p×q, S2's), and the dealer gives
   S1 r_a = R_aᵀR_b − r_b. S1 sends X̂ = Q̃_x + R_a, S2 sends Ẑ = Z̃ + R_b and
   T = X̂ᵀZ̃ + r_b, and S1 computes T − R_aᵀẐ + r_a = Q̃_xᵀZ̃ exactly. The peers mask and
   multiply without waiting for the dealer, whose product runs beside theirs; only S1's
   last step needs r_a.
3. S1 takes the SVD M' = U·Σ·Wᵀ: its canonical vectors are A = R_x⁻¹U, the canonical
   correlations Σ. It sends Σ and W (top d columns) to S2, whose vectors are
   B = R_y⁻¹·O·W.

What each party learns (honest-but-curious, the dealer colluding with neither peer):

* S1 sees its own seed, r_a and Ẑ: uniform ring elements. With T they give it
  M·O, up to the fixed point's rounding (about 2^-30 per entry). Given M, M·O is
  uniform over {M·O : O orthogonal}, a set determined by M·Mᵀ = Q_xᵀ·P_Y·Q_x
  (P_Y the orthogonal projector onto span(Y_c)): S1 learns M·Mᵀ = U·Σ²·Uᵀ and nothing
  else, **whatever d is**. When d = min(p, q) its output (A, ρ) implies M·Mᵀ. When
  d < min(p, q), S1 also learns the other min(p, q) − d correlations and its own
  remaining canonical directions: all of U and Σ.
* M·Mᵀ = Q_xᵀ·P_Y·Q_x gives S1 the projection of span(Y) onto span(X). If X spans the
  whole centred space (rank X_c = n − 1, e.g. p ≥ n − 1 with ``rank_tol`` or ``reg``),
  that is P_Y itself, and with it Y from q + 1 known rows, as in the paper's protocol; CCA
  is degenerate there anyway (every correlation is 1, and the full output reveals the
  same). Both peers therefore refuse a run in which either block spans n − 1 dimensions.
* S2 sees X̂, uniform, and then Σ_d and W_d = OᵀV_d, which its output implies.
* Against a malicious S1 (outside this model) that pads its block with random columns
  up to n − 2, M·Mᵀ approaches P_Y; S2 sees only the column count.
* The dealer sees the sizes n, p, q, which peer plays S1, and the peers' seeds, which are
  fresh randomness; it sends only r_a (:func:`dealer` returns what it saw: the sizes).
  The same holds when the dealer draws the seeds itself, as in Du and Atallah's
  description; letting each peer draw its own lets the peers start at once.
* The masks hide perfectly (uniform modulo P), not statistically. If the dealer colludes
  with S1, S1 removes R_b and reads Z, hence the projector onto span(Y); with S2, S2 reads
  Q_x. A run with no third organisation cannot use this protocol.

Why a dealer and not homomorphic encryption or oblivious transfer between the peers: the
product has n·p·q terms (n = 60,000 and p = q = 392 for the Fashion-MNIST halves: 9·10^9),
and every known two-party way to make its correlated randomness without a third party
costs public-key or OT work per term or per row (HEU's OU at about 20 µs per encryption
would take 20 minutes to encrypt one n×p matrix; SPU's OT-based triples need numpy < 2 and
its own runtime). The dealer's work is one ring product like the peers', and it runs
while they mask and multiply theirs.

Cost: three ring products of n×p by n×q (each three float64 products of :mod:`rns`: the
dealer's R_aᵀR_b, S1's R_aᵀẐ and S2's X̂ᵀZ̃, all three at the same time); on the wire
n·p + n·q + 2·p·q words of 8 bytes, two seeds and d·(q + 1) floats.

References
----------
.. [1] Li, Du. "Swarm canonical correlation analysis". Acta Automatica Sinica 50(9),
   2024 (the paper protocol and its output).
.. [2] W. Du, M. J. Atallah. "Protocols for secure remote database access with approximate
   matching." In Advances in Information Security 2, 2001 (the commodity-server scalar
   and matrix products); D. Beaver, "Commodity-based cryptography", STOC 1997.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Array
from islands.cca import maths
from islands.cca.config import SccaConfig
from islands.cca.protocol import Dims, SccaResult, _Block, _check_block, _handshake, peer
from islands.crypto import rns
from islands.crypto.prg import SEED_BYTES, csprng_normal
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party, wire

__all__ = ["FRAC_BITS", "MASK_LABELS", "DealRequest", "DealS1", "DealerRecord",
           "dealer", "haar_orthogonal", "peer_role", "secure_peer"]

FRAC_BITS = 29
"""Fixed-point bits of Q̃_x and Z̃: |Q̃_xᵀZ̃| ≤ (2^29 + √n/2)² < P/2 for n < 2^35, rounding
error about 2^-30."""

_BOUND = 1.0 + 1e-9  # entries of a matrix with orthonormal columns (ridge: norm ≤ 1)
_TOL = 1e-6  # an honest σ_1 ≤ 1 + √q·2^-29; W's columns orthonormal to rounding
MASK_LABELS = {"Ra": b"scca secure Ra", "Rb": b"scca secure Rb", "rb": b"scca secure rb"}
"""The PRG labels of the masks R_a, R_b and r_b (:func:`islands.crypto.rns.uniform`)."""


@wire.register(name="scca.DealRequest")
@dataclass(frozen=True)
class DealRequest:
    """A peer tells the dealer its part, the sizes (n, S1's p, S2's q) and its masks' seed."""

    role: str
    n: int = field(metadata={"ge": 2})
    p: int = field(metadata={"ge": 1})
    q: int = field(metadata={"ge": 1})
    seed: bytes


@wire.register(name="scca.DealS1")
@dataclass(frozen=True)
class DealS1:
    """S1's correlated randomness: r_a = R_aᵀR_b − r_b (packed)."""

    ra: NDArray[np.uint64] = field(metadata={"ndim": 2})


@dataclass(frozen=True)
class DealerRecord:
    """What the dealer saw: the sizes, and which peer played S1."""

    n: int
    p: int
    q: int
    s1: str
    s2: str


def haar_orthogonal(size: int) -> Array:
    """Draw a Haar-random orthogonal matrix from the OS CSPRNG (QR of a Gaussian, signs fixed).

    Mezzadri, "How to generate random matrices from the classical compact groups", Notices
    of the AMS 54(5), 2007: Q·diag(sign(diag R)) of G = QR with G standard Gaussian.
    """
    q, r = np.linalg.qr(csprng_normal((size, size), 1.0))
    out: Array = q * np.where(np.diag(r) < 0, -1.0, 1.0)
    return out


def _take_deal(party: Party, dealer_name: str, p: int, q: int) -> rns.Residues:
    """Return r_a from the dealer's deal, checked."""
    deal = party.recv(dealer_name, "randomness")
    if not isinstance(deal, DealS1):
        raise ProtocolError(f"dealer {dealer_name!r} sent a malformed deal", party=party.name,
                            step="randomness")
    try:
        return rns.unpack(deal.ra, (p, q), "r_a", f"party {party.name!r}")
    except ValidationError as exc:
        raise ProtocolError(f"dealer {dealer_name!r} sent a malformed deal: {exc}",
                            party=party.name, step="randomness") from None


def _received(party: Party, frm: str, tag: str, shape: tuple[int, ...]) -> rns.Residues:
    try:
        return rns.unpack(party.recv(frm, tag), shape, tag, f"party {party.name!r}")
    except ValidationError as exc:
        raise ProtocolError(f"{frm!r} sent a malformed {tag!r}: {exc}", party=party.name,
                            step=tag) from None


def _check_output(rho: Any, wf: Any, q: int, most: int, sender: str, owner: str) -> None:
    """S2's check of ρ and W: float64, 0 ≤ ρ ≤ 1 non-increasing, W's columns orthonormal."""
    ok = (isinstance(rho, np.ndarray) and isinstance(wf, np.ndarray)
          and rho.dtype == np.float64 and wf.dtype == np.float64 and wf.ndim == 2
          and wf.shape[0] == q and rho.shape == (wf.shape[1],) and 1 <= rho.size <= most
          and bool(np.all(np.isfinite(rho))) and bool(np.all(np.isfinite(wf))))
    if ok:
        ok = (bool(np.all(rho >= 0)) and bool(rho[0] <= 1.0 + _TOL)
              and bool(np.all(np.diff(rho) <= _TOL))
              and float(np.abs(wf.T @ wf - np.eye(wf.shape[1])).max()) <= _TOL)
    if not ok:
        raise ProtocolError(f"peer {sender!r} sent malformed rho/Wf (they must be float64, "
                            f"0 <= rho <= 1 non-increasing, Wf {q}×d with orthonormal "
                            "columns)", party=owner, step="Wf")


def _s1(party: Party, other: str, dealer_name: str, w: _Block, theirs: Dims, *,
        n_components: int | None, threshold: float | None) -> SccaResult:
    n, p, q = w.n, w.rank, theirs.rank
    if n_components is not None and n_components > min(p, q):
        raise ValidationError(
            f"n_components={n_components} exceeds min(p, q) = {min(p, q)} "
            f"(columns used: {party.name!r} {p}, {other!r} {q})")
    seed = secrets.token_bytes(SEED_BYTES)
    party.send(dealer_name, "deal", DealRequest("s1", n, p, q, seed))
    mask = rns.uniform(seed, (n, p), label=MASK_LABELS["Ra"])
    party.send(other, "xhat", rns.pack(rns.encode(w.take_basis(), FRAC_BITS, bound=_BOUND,
                                                  what="Q_x"), plus=mask))
    z_hat = _received(party, other, "zhat", (n, q))
    mine = rns.product(mask, z_hat)  # while S2 computes X̂ᵀZ̃ and the dealer R_aᵀR_b
    del mask, z_hat
    t = _received(party, other, "T", (p, q))
    ra = _take_deal(party, dealer_name, p, q)
    m_rotated = rns.decode(rns.add(rns.sub(t, mine), ra), 2 * FRAC_BITS)
    with party.alone():  # S2 waits for ρ and W
        u, sigma, wf = maths.product_svd(np.asfortranarray(m_rotated))
    if not sigma.size or not sigma[0] <= 1.0 + _TOL:
        raise ProtocolError(f"the product of {other!r} and dealer {dealer_name!r} is not a "
                            f"product of two orthonormal bases (largest singular value "
                            f"{sigma[0] if sigma.size else None!r} > 1): one of them deviated",
                            party=party.name, step="T")
    ratios = maths.ratios_of(sigma)
    d = maths.select_components(ratios, n_components, threshold)
    a = maths.canonical_from_svd(w.r, u[:, :d])
    signs = maths.sign_flip(a)
    party.send(other, "rho", sigma[:d])
    party.send(other, "Wf", np.ascontiguousarray(wf[:, :d] * signs))
    return SccaResult(role="s1", weights=maths.embed(a * signs, w.kept, w.n_features),
                      mean=w.mean, correlations=np.clip(sigma[:d], 0.0, 1.0),
                      ratios=ratios[:d], exact=True, rank=p, scale=1.0)


def _s2(party: Party, other: str, dealer_name: str, w: _Block, theirs: Dims) -> SccaResult:
    n, p, q = w.n, theirs.rank, w.rank
    seed = secrets.token_bytes(SEED_BYTES)
    party.send(dealer_name, "deal", DealRequest("s2", n, p, q, seed))
    rotation = haar_orthogonal(q)
    z = rns.encode(w.take_basis() @ rotation, FRAC_BITS, bound=_BOUND, what="Q_y·O")
    mask = rns.uniform(seed, (n, q), label=MASK_LABELS["Rb"])
    party.send(other, "zhat", rns.pack(z, plus=mask))
    del mask
    x_hat = _received(party, other, "xhat", (n, p))
    t = rns.add(rns.product(x_hat, z), rns.uniform(seed, (p, q), label=MASK_LABELS["rb"]))
    del x_hat, z
    party.send(other, "T", rns.pack(t))
    rho = party.recv(other, "rho")
    wf = party.recv(other, "Wf")
    _check_output(rho, wf, q, min(p, q), other, party.name)
    b = maths.canonical_from_svd(w.r, rotation @ wf)
    return SccaResult(role="s2", weights=maths.embed(b, w.kept, w.n_features), mean=w.mean,
                      correlations=np.clip(rho, 0.0, 1.0), ratios=maths.ratios_of(rho),
                      exact=True, rank=q, scale=1.0)


def secure_peer(party: Party, Z: Any, *, other: str, dealer: str,
                n_components: int | None = None, threshold: float | None = None,
                reg: float = 0.0, rank_tol: float | None = None) -> SccaResult:
    """Either peer of the secure protocol; the paper's swap rule picks S1 and S2.

    Parameters
    ----------
    party
        This party's context.
    Z
        Its n×p block, rows aligned with the other peer's.
    other, dealer
        The other peer's and the dealer's names.
    n_components, threshold, reg, rank_tol
        As for :func:`islands.cca.protocol.peer`.
    """
    if dealer == other or dealer == party.name:
        raise ValidationError(f"party {party.name!r}: the dealer {dealer!r} must be a third "
                              "party, neither peer")
    w = _Block(maths.whiten(_check_block(Z, "data"), reg=reg, rank_tol=rank_tol,
                            name=f"the data of {party.name!r}"))
    theirs = _handshake(party, other, w, False, "secure")
    if theirs.rank < 1:  # an honest peer's whitening refuses a block with no column left
        raise ProtocolError(f"peer {other!r} announced {theirs.rank} columns for {w.n} rows",
                            party=party.name, step="dims")
    for name, rank in ((party.name, w.rank), (other, theirs.rank)):
        if rank >= w.n - 1:
            raise ValidationError(
                f"party {party.name!r}: {name!r}'s block spans all n - 1 = {w.n - 1} centred "
                f"dimensions ({rank} columns used): CCA is degenerate there (every correlation "
                "is 1) and its output would reveal the other block's column space; use fewer "
                "columns (rank_tol, or a feature selection) or more rows")
    plays_s1 = w.rank > theirs.rank or (w.rank == theirs.rank and party.name < other)
    if plays_s1:
        return _s1(party, other, dealer, w, theirs, n_components=n_components,
                   threshold=threshold)
    return _s2(party, other, dealer, w, theirs)


def dealer(party: Party, *, peers: Sequence[str]) -> DealerRecord:
    """Play the dealer: r_a = R_aᵀR_b − r_b for S1, from the seeds the peers drew.

    It never sees data: only the sizes each peer announces, which must agree, and the
    peers' seeds.
    """
    if len(peers) != 2 or party.name in peers or peers[0] == peers[1]:
        raise ValidationError(f"dealer {party.name!r}: peers must be two other parties; "
                              f"got {list(peers)}")
    asks = {}
    for name in peers:
        ask = party.recv(name, "deal")
        if not isinstance(ask, DealRequest) or ask.role not in ("s1", "s2") or not (
                isinstance(ask.seed, bytes) and len(ask.seed) == SEED_BYTES):
            raise ProtocolError(f"peer {name!r} sent a malformed deal request",
                                party=party.name, step="deal")
        asks[name] = ask
    first, second = (asks[name] for name in peers)
    if {first.role, second.role} != {"s1", "s2"} or (first.n, first.p, first.q) != (
            second.n, second.p, second.q):
        raise ProtocolError(f"the peers disagree: {dict(asks)}", party=party.name,
                            step="deal")
    s1_name = next(name for name in peers if asks[name].role == "s1")
    s2_name = next(name for name in peers if asks[name].role == "s2")
    n, p, q = first.n, first.p, first.q
    seed_a, seed_b = asks[s1_name].seed, asks[s2_name].seed
    joint = rns.product(rns.uniform(seed_a, (n, p), label=MASK_LABELS["Ra"]),
                        rns.uniform(seed_b, (n, q), label=MASK_LABELS["Rb"]))
    ra = rns.sub(joint, rns.uniform(seed_b, (p, q), label=MASK_LABELS["rb"]))
    party.send(s1_name, "randomness", DealS1(rns.pack(ra)))
    return DealerRecord(n, p, q, s1_name, s2_name)


def peer_role(config: SccaConfig, other: str) -> Callable[..., SccaResult]:
    """Return the role of ``config.protocol`` with its settings, to call as ``(party, Z=...)``."""
    common: dict[str, Any] = {"other": other, "n_components": config.n_components,
                              "threshold": config.threshold, "reg": config.reg,
                              "rank_tol": config.rank_tol}
    if config.protocol == "secure":
        return partial(secure_peer, dealer=config.dealer, **common)
    return partial(peer, perturb=config.perturbs, **common)
