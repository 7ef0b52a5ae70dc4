r"""The SecAgg+ communication graph and its parameters (Bell et al., CCS 2020), as pure maths.

SecAgg+ [1]_ replaces the complete graph of Bonawitz et al.'s secure aggregation with a
Harary graph H(n, k) on a random permutation of the round's n clients: client u agrees
pairwise masks with, and Shamir-shares its two secrets among, its k neighbours only,
t-of-(k + 1) (u keeps one share itself). This module holds what every party computes
alike, with no I/O:

* **The graph draw.** :func:`graph_seed` hashes the round (session, round, the roster's
  digest) and every client's revealed nonce, each committed (:func:`commitment`) before
  any was revealed; :func:`permutation` is a Fisher–Yates shuffle driven by a ChaCha20
  stream of that seed (:func:`islands.crypto.prg.expand`), with rejection sampling so
  every index is exactly uniform. Nobody (the server included) chooses the graph: a
  client's own nonce is uniform from its view, and no colluder can adapt its nonce to the
  others'. islands' own construction (FCP and Flower let the server shuffle); see
  ``docs/threat-model.md``.
* **The neighbourhoods.** Position i of the permutation is joined to positions
  i ± 1 … i ± k/2 (mod n), k even (:func:`neighbourhood`); when k ≥ n − 1 the graph is
  complete (the full protocol's). Holder v of u's shares gets the point
  x = ((pos(v) − pos(u) + ⌊k/2⌋) mod n) + 1 ∈ [1, k + 1] (:func:`share_point`), so
  every client splits with the same ``shamir.split(secret, k + 1, t)``.
* **The parameters.** For n clients of which A are corrupt (colluding with the server)
  and up to D drop out, the conditions of [1]_ as FCP's ``graph_parameter_finder``
  states them [2]_ (re-derived, not copied), each a union bound over the uniform
  placement of the A + D bad clients on the ring:

  - (C) connectivity: H(n, k) minus B = A + D nodes stays connected unless two
    separated runs of k/2 consecutive nodes are bad:
    n(n − k − 1)/2 · B!/(B − k)! · (n − k)!/n! < 2^-(σ+1);
  - (S) privacy: X_u ~ Hypergeometric(n, A, k), u's corrupt neighbours; x₀ = the least x
    with P[X_u > x] < 2^-(σ+1)/n. Against an active server each honest holder reveals
    one kind of share per client and the consistency round needs t signatures, so u is
    safe iff 2t > k + 1 + X_u; hence t ≥ ⌊(k + 1 + x₀)/2⌋ + 1 (:func:`least_threshold`).
    With k + 1 = n and X_u = A this is the full graph's t > (n + c)/2. FCP's active rule,
    ⌈(x₀ + k − 1.25)/2⌉ + 1, is one lower when x₀ + k is odd; islands keeps the
    derived bound (its exhaustive test, ``tests/test_secaggplus_graph.py``, plays it);
  - (R) correctness: Y_u ~ Hyp(n, n − D, k), u's surviving neighbours;
    P[Y_u ≤ t − 1] < 2^-η/n, so that no neighbourhood falls below t.

  :func:`find_parameters` takes the smallest even k meeting all three; if none below
  n − 1 does, the complete graph (deterministic: X_u = A, Y_u ≥ n − D).
  :func:`check_parameters` is what a client runs on the (k, t) the server proposes:
  (C) and (S) must hold (the server may ask for more protection, never less); (R) is
  the server's concern (a too-large t only makes its round fail).

References
----------
.. [1] J. H. Bell, K. A. Bonawitz, A. Gascón, T. Lepoint, M. Raykova. "Secure
   Single-Server Aggregation with (Poly)Logarithmic Overhead." ACM CCS 2020
   (ePrint 2020/704).
.. [2] google-parfait/federated-compute, ``fcp/secagg/server/graph_parameter_finder.cc``.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from islands.crypto.prg import expand
from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_int

__all__ = [
    "NONCE_BYTES",
    "GraphParameters",
    "check_parameters",
    "commitment",
    "commitments",
    "connectivity_holds",
    "correctness_holds",
    "find_parameters",
    "graph_seed",
    "least_threshold",
    "neighbourhood",
    "permutation",
    "privacy_bound",
    "share_point",
]

NONCE_BYTES = 32
_COMMIT = b"islands secagg+ commit v1"
_SEED = b"islands secagg+ graph v1"
_LN2 = math.log(2.0)


# --------------------------------------------------------------------------- the draw
def _framed(*parts: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def commitment(session: bytes, rnd: int, name: str, nonce: bytes) -> bytes:
    """Return SHA-256 of (domain, session, round, name, nonce): a client's commitment."""
    return commitments(session, rnd, [name], [nonce])[0]


def commitments(session: bytes, rnd: int, names: Sequence[str],
                nonces: Sequence[bytes]) -> list[bytes]:
    """Return :func:`commitment` of each (name, nonce) pair of one round.

    Every client opens the whole roster's commitments, n a round: the framed round prefix
    is hashed once and each pair continues a copy of that state.
    """
    prefix = hashlib.sha256(_framed(_COMMIT, session, rnd.to_bytes(8, "big")))
    out = []
    for name, nonce in zip(names, nonces, strict=True):
        h = prefix.copy()
        h.update(_framed(name.encode("utf-8"), nonce))
        out.append(h.digest())
    return out


def graph_seed(session: bytes, rnd: int, roster_digest: bytes,
               reveals: Sequence[bytes]) -> bytes:
    """Return the 32-byte graph seed: HKDF-SHA256 over the round and every revealed nonce.

    ``reveals`` are the roster's nonces in its (sorted-name) order; all of them, since a
    seed over a subset would let the server pick which colluders' nonces count.
    """
    if not reveals or any(len(r) != NONCE_BYTES for r in reveals):
        raise invalid_parameter("reveals", "graph_seed",
                                f"a non-empty sequence of {NONCE_BYTES}-byte nonces",
                                f"{len(reveals)} values")
    material = b"".join(reveals)
    kdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
               info=_framed(_SEED, session, rnd.to_bytes(8, "big"), roster_digest))
    return kdf.derive(material)


def permutation(seed: bytes, n: int) -> list[int]:
    """Return a uniform permutation of range(n) drawn by Fisher–Yates from ``seed``.

    Index j ∈ [0, i] is a 64-bit word w of the ChaCha20 stream (label ``secagg+ graph``)
    accepted only below the largest multiple of i + 1 (then j = w mod (i + 1)), so every j
    is exactly uniform; a rejected word (probability < i/2^64) draws the next one.
    """
    n = check_int(n, "n", "permutation", low=1)
    words = expand(seed, n + 8, label=b"secagg+ graph").tolist()
    order = list(range(n))
    next_word = 0
    for i in range(n - 1, 0, -1):
        bound = i + 1
        limit = (1 << 64) - ((1 << 64) % bound)
        while True:
            if next_word == len(words):  # a prefix of a longer stream: the same words
                words = expand(seed, 2 * len(words), label=b"secagg+ graph").tolist()
            w = words[next_word]
            next_word += 1
            if w < limit:
                break
        j = w % bound
        order[i], order[j] = order[j], order[i]
    return order


def neighbourhood(pos: int, n: int, k: int) -> list[int]:
    """Return the closed neighbourhood N[pos] of H(n, k), as positions in offset order.

    Offsets −⌊k/2⌋ … ⌊k/2⌋ from ``pos`` (itself at the middle); with k ≥ n − 1 the graph
    is complete and the list holds every position, from offset −⌊k/2⌋ on.
    """
    half = k // 2
    size = n if k >= n - 1 else k + 1
    return [(pos - half + j) % n for j in range(size)]


def share_point(owner: int, holder: int, n: int, k: int) -> int:
    """Return the Shamir point x ∈ [1, k + 1] at which ``holder`` holds ``owner``'s share."""
    return (holder - owner + k // 2) % n + 1


# --------------------------------------------------------------------------- maths
def _log_pmf(total: int, marked: int, draws: int) -> list[float]:
    """Log P[X = x], x = 0..draws, for X ~ Hypergeometric(total, marked, draws)."""
    lg = math.lgamma
    base = (lg(marked + 1) + lg(total - marked + 1) + lg(draws + 1) + lg(total - draws + 1)
            - lg(total + 1))
    out = []
    for x in range(draws + 1):
        if x > marked or draws - x > total - marked:
            out.append(-math.inf)
            continue
        out.append(base - lg(x + 1) - lg(marked - x + 1) - lg(draws - x + 1)
                   - lg(total - marked - draws + x + 1))
    return out


def _log_sum(values: Sequence[float]) -> float:
    top = max(values, default=-math.inf)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


@functools.lru_cache(maxsize=4096)
def privacy_bound(n: int, corrupt: int, k: int, sigma: float) -> int:
    """Return x₀: the least x with P[X > x] < 2^-(σ+1)/n, X ~ Hyp(n, corrupt, k).

    Every client's corrupt neighbours stay at most x₀ except with probability
    2^-(σ+1) over the graph draw (a union bound over the n clients).
    """
    if k >= n - 1:  # complete: every colluder is a neighbour of an honest client
        return min(corrupt, n - 1)
    log_q = -(sigma + 1) * _LN2 - math.log(n)
    pmf = _log_pmf(n, corrupt, k)
    return next(x for x in range(k + 1) if _log_sum(pmf[x + 1:]) < log_q)


def least_threshold(n: int, corrupt: int, k: int, *, sigma: float = 40,
                    active: bool = True) -> int:
    """Return the least t that keeps every client's two secrets apart (condition (S)).

    Active server: ⌊(k + 1 + x₀)/2⌋ + 1 (2t > k + 1 + X_u); semi-honest: x₀ + 1; at
    least 2 either way. x₀ is :func:`privacy_bound`.
    """
    x0 = privacy_bound(n, corrupt, k, sigma)
    t = (k + 1 + x0) // 2 + 1 if active else x0 + 1
    return max(t, 2)


def connectivity_holds(n: int, bad: int, k: int, *, sigma: float = 40) -> bool:
    """Whether H(n, k) minus ``bad`` uniformly placed nodes stays connected whp (C)."""
    if k >= n - 1 or k > bad:
        return True
    log_p = (math.log(n) + math.log(n - k - 1) - _LN2 + math.lgamma(bad + 1)
             + math.lgamma(n - k + 1) - math.lgamma(n + 1) - math.lgamma(bad - k + 1))
    return log_p < -(sigma + 1) * _LN2


def correctness_holds(n: int, dropouts: int, k: int, t: int, *, eta: float = 20) -> bool:
    """Whether every neighbourhood keeps t survivors whp: P[Y ≤ t − 1] < 2^-η/n (R)."""
    if k >= n - 1:
        return t <= n - dropouts
    pmf = _log_pmf(n, n - dropouts, k)
    return _log_sum(pmf[:t]) < -eta * _LN2 - math.log(n)


@dataclass(frozen=True)
class GraphParameters:
    """A round's graph: k neighbours per client (k + 1 shares), threshold t."""

    neighbours: int
    threshold: int
    complete: bool

    @property
    def shares(self) -> int:
        """K + 1: the holders of each client's shares, itself included."""
        return self.neighbours + 1


def _check_counts(n: int, corrupt: int, dropouts: int, owner: str) -> None:
    check_int(n, "n", owner, low=2)
    check_int(corrupt, "corrupt", owner, low=0, high=n - 1)
    check_int(dropouts, "dropouts", owner, low=0, high=n - 1)


@functools.lru_cache(maxsize=1024)
def find_parameters(n: int, corrupt: int, dropouts: int, *, sigma: float = 40,
                    eta: float = 20, active: bool = True) -> GraphParameters | None:
    """Return the sparsest (k, t) meeting (C), (S) and (R) for this round, or None.

    Parameters
    ----------
    n
        The round's clients.
    corrupt
        A, the colluding clients to protect against (islands counts them against the
        client's own reference m, never against n).
    dropouts
        D, the clients that may drop out of the round.
    sigma, eta
        Privacy fails with probability ≤ 2^-σ, correctness with ≤ 2^-η, over the draw.
    active
        The active-server rule for t (islands' model); False is the semi-honest one.

    Returns
    -------
    GraphParameters or None
        The smallest even k < n − 1 that meets all three, with its least t; else the
        complete graph (k = n − 1) if its t fits the survivors; else None (no graph
        protects this round: fewer colluders or dropouts, or a larger round, needed).
    """
    _check_counts(n, corrupt, dropouts, "find_parameters")
    bad = corrupt + dropouts
    for k in range(2, n - 1, 2):
        if not connectivity_holds(n, bad, k, sigma=sigma):
            continue
        t = least_threshold(n, corrupt, k, sigma=sigma, active=active)
        if t <= k + 1 and correctness_holds(n, dropouts, k, t, eta=eta):
            return GraphParameters(k, t, complete=False)
    t = least_threshold(n, corrupt, n - 1, sigma=sigma, active=active)
    if t <= n - dropouts:
        return GraphParameters(n - 1, t, complete=True)
    return None


def check_parameters(n: int, corrupt: int, dropouts: int, k: int, t: int, *,
                     sigma: float = 40, active: bool = True) -> str | None:
    """Return why a proposed (k, t) does not protect this round, or None if it does.

    A client's check of the server's proposal: k even (or the complete graph,
    k ≥ n − 1), t ≤ k + 1, connectivity (C) for A + D bad clients, and
    t ≥ :func:`least_threshold`. Correctness is not checked: a larger t than the
    survivors allow only fails the round.
    """
    _check_counts(n, corrupt, dropouts, "check_parameters")
    if isinstance(k, bool) or not isinstance(k, int) or isinstance(t, bool) \
            or not isinstance(t, int):
        raise ValidationError("check_parameters: k and t must be ints")
    complete = k >= n - 1
    if complete:
        k = n - 1
    elif k < 2:
        return f"k={k} neighbours; at least 2"
    elif k % 2:
        return f"k={k} neighbours is odd; a Harary graph below the complete one needs k even"
    if t > k + 1:
        return f"t={t} exceeds the k+1={k + 1} holders of each client's shares"
    if not connectivity_holds(n, corrupt + dropouts, k, sigma=sigma):
        return (f"k={k} neighbours leave the honest survivors of {n} clients disconnected "
                f"with probability above 2^-{sigma:g} ({corrupt} colluders, {dropouts} "
                "dropouts)")
    least = least_threshold(n, corrupt, k, sigma=sigma, active=active)
    if t < least:
        return (f"t={t} for k={k} neighbours; at least {least} against {corrupt} "
                f"colluders in a round of {n} (2^-{sigma:g})")
    return None
