"""The two SCCA roles, S1 and S2, and a peer role that picks its part by the swap rule.

Messages, in order (every one a real wire message, recorded in the transcript):

=========  ==========  ==================================================================
tag        direction   payload
=========  ==========  ==================================================================
``dims``   both ways   {"n": rows, "rank": columns used, "perturb": bool, "protocol"}
``delta``  S1 → S2     k1·Δx, n values: the row norms of M_x (Algorithm 1, step 5)
``R2``     S2 → S1     k2·R2, q×n: the R factor of H2ᵀ = (Δx M_y)ᵀ (Algorithm 2, step 7)
``rho``    S1 → S2     ρ' = k1·k2·ρ, d values (Algorithm 1, step 12)
``Wf``     S1 → S2     W_f, q×d: the right singular vectors of R_f (Algorithm 1, step 12)
=========  ==========  ==================================================================

Data sent after the handshake: n + q·n + d + q·d numbers. Before it, the peers exchange
their dimensions and the one with the **smaller** one plays S2 (its R2 is the big
message), the paper's role-swap rule; :func:`peer` applies it, :func:`s1` and :func:`s2`
play a fixed part.

What SCCA protects, and what it does not
----------------------------------------
No raw row of X or Y is sent. But the multiplicative perturbation k1, k2 (paper §3.3)
protects nothing: S2 recovers k1 exactly from Δx (Σ‖row_i M_x‖² = rank X), and S1, who
knows Δx and k1, recovers k2 and the orthogonal projector onto span(Y) from R2ᵀR2 =
k1²k2²·Δx Q_yQ_yᵀ Δx, hence Y up to an invertible q×q map, hence all of Y from q known
rows. See :mod:`islands.cca.audit`, which runs these attacks on the transcript.

References
----------
.. [1] Li, Du. "Swarm canonical correlation analysis". Acta Automatica Sinica 50(9),
   2024, Algorithms 1 and 2 (``papers/scca-swarm-cca-li-du-2024.zh.txt``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from islands.arrays import Array
from islands.cca import maths
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party, wire
from islands.validation import check_array

__all__ = ["SccaResult", "peer", "s1", "s2"]



@wire.register(name="scca.Dims")
@dataclass(frozen=True)
class Dims:
    """The handshake: rows, columns used, whether k is applied, and the protocol.

    ``protocol`` is ``"paper"`` or ``"secure"`` (:mod:`islands.cca.secure`).
    """

    n: int = field(metadata={"ge": 1})
    rank: int = field(metadata={"ge": 0})
    perturb: bool
    protocol: str


@dataclass(frozen=True)
class SccaResult:
    """What one SCCA peer ends with. Nothing here is sent except as listed in the module doc.

    Attributes
    ----------
    role
        ``"s1"`` or ``"s2"``.
    weights
        This party's canonical vectors, p×d (zero rows for columns dropped by ``rank_tol``).
    mean
        This party's column means (to centre new data in ``transform``).
    correlations
        ρ as this party knows it: S1 knows k2·ρ and S2 knows k1·ρ (its peer's factor
        remains), so they are exact when the peer does not perturb.
    ratios
        ρ_i/ρ_1, exact either way.
    exact
        Whether ``correlations`` are the true canonical correlations (the peer did not
        perturb).
    rank
        Columns of this party's block actually used.
    scale
        This party's own perturbation factor (k1 or k2; 1.0 when not perturbing). It
        never leaves the party; it is returned so the audit can score its recovery.
    """

    role: Literal["s1", "s2"]
    weights: Array
    mean: Array
    correlations: Array
    ratios: Array
    exact: bool
    rank: int
    scale: float


class _Block:
    """A party's whitened block while the protocol runs (mutable, so S2 can drop its basis)."""

    def __init__(self, w: maths.Whitening) -> None:
        self.basis: Array | None = w.basis
        self.r, self.kept, self.mean, self.n_features = w.r, w.kept, w.mean, w.n_features
        self.rank, self.n = w.rank, w.basis.shape[0]

    def take_basis(self) -> Array:
        """Hand the n×rank basis over; the block no longer holds it."""
        basis, self.basis = self.basis, None
        if basis is None:
            raise RuntimeError("the basis was already used")
        return basis


def _check_block(Z: Any, name: str) -> Array:
    return check_array(Z, name, "SwarmCCA", min_rows=2)


def _other(party: Party, other: str | None) -> str:
    if other is not None:
        return other
    if len(party.peers) != 1:
        raise ValidationError(
            f"SCCA runs between two peers; {party.name!r} sees {list(party.peers)}: name "
            "the other peer"
        )
    return party.peers[0]


def _handshake(party: Party, other: str, w: _Block, perturb: bool,
               protocol: str = "paper") -> Dims:
    n = w.n
    party.send(other, "dims", Dims(n=n, rank=w.rank, perturb=perturb, protocol=protocol))
    theirs = party.recv(other, "dims")
    if not isinstance(theirs, Dims):
        raise ProtocolError(f"peer {other!r} sent a malformed handshake", party=party.name,
                            step="dims")
    if theirs.protocol != protocol:
        raise ValidationError(f"party {party.name!r} runs protocol={protocol!r} but peer "
                              f"{other!r} runs protocol={theirs.protocol!r}; both peers "
                              "must run the same protocol")
    if theirs.n != n:
        raise ValidationError(
            f"rows differ: {party.name!r} has n={n}, {other!r} has n={theirs.n}; SCCA needs "
            "the same aligned samples on both sides"
        )
    return theirs


def _s1_body(
    party: Party, other: str, w: _Block, theirs: Dims, *, perturb: bool,
    n_components: int | None, threshold: float | None,
) -> SccaResult:
    k1 = maths.random_scale() if perturb else 1.0
    if n_components is not None and n_components > min(w.rank, theirs.rank):
        raise ValidationError(
            f"n_components={n_components} exceeds min(p, q) = {min(w.rank, theirs.rank)} "
            f"(columns used: {party.name!r} {w.rank}, {other!r} {theirs.rank})"
        )
    basis = w.take_basis()
    delta = maths.leverage_norms(basis)
    party.send(other, "delta", k1 * delta)
    r2 = party.recv(other, "R2")
    if not (isinstance(r2, np.ndarray) and r2.shape == (theirs.rank, delta.size)):
        raise ValidationError(f"peer {other!r} sent R2 of the wrong shape")
    with party.alone():  # S2 waits for ρ' and W_f
        f = maths.s1_product(basis, delta, r2, overwrite=True)  # S1 owns the received buffer
        del r2, basis  # n-sized arrays are not needed for the SVD
        # singular values of F'' are the paper's Σ' = k1·k2·Σ (Theorem 3)
        u, sigma_p, wf = maths.product_svd(f)
        del f
    ratios = maths.ratios_of(sigma_p)
    d = maths.select_components(ratios, n_components, threshold)
    a = maths.canonical_from_svd(w.r, u[:, :d])
    signs = maths.sign_flip(a)
    party.send(other, "rho", sigma_p[:d])
    party.send(other, "Wf", np.ascontiguousarray(wf[:, :d] * signs))
    known = sigma_p[:d] / k1  # S1 knows k2·ρ: exact when S2 does not perturb
    exact = not theirs.perturb
    return SccaResult(
        role="s1", weights=maths.embed(a * signs, w.kept, w.n_features), mean=w.mean,
        correlations=np.clip(known, 0.0, 1.0) if exact else known, ratios=ratios[:d],
        exact=exact, rank=w.rank, scale=k1,
    )


def _s2_body(
    party: Party, other: str, w: _Block, theirs: Dims, *, perturb: bool
) -> SccaResult:
    k2 = maths.random_scale() if perturb else 1.0
    delta = party.recv(other, "delta")
    if not (isinstance(delta, np.ndarray) and delta.shape == (w.n,) and np.all(delta >= 0)):
        raise ValidationError(f"peer {other!r} sent a malformed delta")
    with party.alone():  # S1 waits for R2
        q_w, r2 = maths.s2_rotation(w.take_basis(), delta, overwrite=True)
    r2 *= k2
    party.send(other, "R2", r2)
    del r2
    rho = party.recv(other, "rho")
    wf = party.recv(other, "Wf")
    if not (isinstance(wf, np.ndarray) and wf.ndim == 2 and wf.shape[0] == w.rank
            and isinstance(rho, np.ndarray) and rho.shape == (wf.shape[1],)):
        raise ValidationError(f"peer {other!r} sent malformed rho/Wf")
    b = maths.canonical_from_svd(w.r, q_w @ wf)
    known = rho / k2  # S2 knows k1·ρ: exact when S1 does not perturb
    exact = not theirs.perturb
    return SccaResult(
        role="s2", weights=maths.embed(b, w.kept, w.n_features), mean=w.mean,
        correlations=np.clip(known, 0.0, 1.0) if exact else known,
        ratios=maths.ratios_of(rho), exact=exact, rank=w.rank, scale=k2,
    )


def s1(
    party: Party, X: Any, *, other: str | None = None, perturb: bool = True,
    n_components: int | None = None, threshold: float | None = None, reg: float = 0.0,
    rank_tol: float | None = None,
) -> SccaResult:
    """Role S1 (Algorithm 1): holds X (n×p), computes ρ and its canonical vectors A.

    Parameters
    ----------
    party
        This party's context.
    X
        n×p data, rows aligned with the peer's.
    other
        The peer's name (default: the only peer).
    perturb
        Multiply Δx by a secret k1 > 0 from a CSPRNG (paper §3.3; see the module doc for
        why it protects nothing).
    n_components, threshold
        Keep the top ``n_components`` components, and only those whose correlation ratio
        ρ_i/ρ_1 is at least ``threshold``.
    reg, rank_tol
        Rank-deficiency handling, see :func:`islands.cca.maths.whiten`.
    """
    other = _other(party, other)
    w = _Block(maths.whiten(_check_block(X, "X"), reg=reg, rank_tol=rank_tol, name="X"))
    theirs = _handshake(party, other, w, perturb)
    return _s1_body(party, other, w, theirs, perturb=perturb, n_components=n_components,
                    threshold=threshold)


def s2(
    party: Party, Y: Any, *, other: str | None = None, perturb: bool = True,
    reg: float = 0.0, rank_tol: float | None = None,
) -> SccaResult:
    """Role S2 (Algorithm 2): holds Y (n×q), computes its canonical vectors B.

    Parameters are as for :func:`s1`; the number of components is S1's choice.
    """
    other = _other(party, other)
    w = _Block(maths.whiten(_check_block(Y, "Y"), reg=reg, rank_tol=rank_tol, name="Y"))
    theirs = _handshake(party, other, w, perturb)
    return _s2_body(party, other, w, theirs, perturb=perturb)


def peer(
    party: Party, Z: Any, *, other: str | None = None, perturb: bool = True,
    n_components: int | None = None, threshold: float | None = None, reg: float = 0.0,
    rank_tol: float | None = None,
) -> SccaResult:
    """Either role, chosen by the paper's swap rule: the smaller dimension plays S2.

    After the ``dims`` handshake, the peer whose block has fewer columns (after rank
    handling) plays S2; on a tie, the peer whose name sorts first plays S1. Both peers
    must pass the same ``n_components`` and ``threshold`` (only S1 uses them).
    """
    other = _other(party, other)
    w = _Block(maths.whiten(_check_block(Z, "data"), reg=reg, rank_tol=rank_tol,
                            name=f"the data of {party.name!r}"))
    theirs = _handshake(party, other, w, perturb)
    plays_s1 = w.rank > theirs.rank or (w.rank == theirs.rank and party.name < other)
    if plays_s1:
        return _s1_body(party, other, w, theirs, perturb=perturb,
                        n_components=n_components, threshold=threshold)
    return _s2_body(party, other, w, theirs, perturb=perturb)
