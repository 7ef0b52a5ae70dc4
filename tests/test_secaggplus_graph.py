"""SecAgg+'s graph and parameters (islands.aggregation.harary): FCP's test vectors, the
draw, the neighbourhoods, and an exhaustive check that adaptive dropping and split views
cannot unmask an honest client at the accepted (k, t)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from islands.aggregation import harary
from islands.aggregation.secagg import colluder_bound, round_threshold
from islands.crypto import shamir
from islands.errors import ValidationError


def _counts(n: int, gamma: float, delta: float) -> tuple[int, int]:
    return math.floor(gamma * n + 1e-9), math.floor(delta * n + 1e-9)


# FCP's graph_parameter_finder_test vectors: (N, γ, δ, active, k, t)
FCP = [(1000, .05, .33, False, 72, 24), (1000, .05, .33, True, 398, 223),
       (1000, .33, .05, False, 78, 60), (1000, .33, .05, True, 132, 109),
       (100, .05, .33, False, 28, 6), (10000, .05, .33, False, 86, 29),
       (1000, .33, .33, False, 286, 150), (100, .45, .45, False, 92, 46),
       (10000, .05, .33, True, 746, 420)]


@pytest.mark.parametrize(("n", "gamma", "delta", "active", "k", "t"), FCP)
def test_parameters_match_fcp_vectors(n: int, gamma: float, delta: float, active: bool,
                                      k: int, t: int) -> None:
    got = harary.find_parameters(n, *_counts(n, gamma, delta), active=active)
    assert got is not None and not got.complete
    if not active:
        assert (got.neighbours, got.threshold) == (k, t)
        return
    # islands' active rule is 2t > k + 1 + x₀ (derived in harary's docstring); FCP's
    # ⌈(x₀ + k − 1.25)/2⌉ + 1 is one lower when x₀ + k is odd, so islands' pair is FCP's
    # or a slightly denser one, never a weaker one
    x0 = harary.privacy_bound(n, _counts(n, gamma, delta)[0], k, 40)
    fcp_t = math.ceil((x0 + k - 1.25) / 2) + 1
    assert fcp_t == t  # the vector is FCP's rule
    assert got.neighbours >= k and got.threshold >= t
    if (x0 + k) % 2 == 0:
        assert (got.neighbours, got.threshold) == (k, t)


def test_the_default_table() -> None:
    # γ = .05 of m, δ = .10 of n, σ = 40, η = 20: the docs' table
    assert harary.find_parameters(1000, 50, 100) == harary.GraphParameters(78, 52, False)
    assert harary.find_parameters(100, 5, 10) == harary.GraphParameters(28, 18, False)


def test_complete_graph_case_equals_the_full_graph_rule() -> None:
    # with k + 1 = n every colluder is a neighbour: t > (n + C)/2, the full graph's rule
    for n in range(3, 40):
        for c in range(0, n // 2):
            assert harary.least_threshold(n, c, n - 1) == max(2, (n + c) // 2 + 1)
    # and secagg's round_threshold at its colluder bound agrees
    for m in range(3, 30):
        c = colluder_bound(0.5, m)
        assert round_threshold(0.5, m, federation=m) == harary.least_threshold(m, c, m - 1)


def test_permutation_is_uniform_and_reproducible() -> None:
    seeds = [bytes([i % 256, i // 256]) + bytes(30) for i in range(4800)]
    draws = Counter(tuple(harary.permutation(s, 4)) for s in seeds)
    assert len(draws) == 24 and harary.permutation(seeds[0], 4) == harary.permutation(
        seeds[0], 4)
    # χ² with 23 degrees of freedom: P[χ² > 60] < 1e-4 (a failure is a real bias)
    expected = 4800 / 24
    assert sum((c - expected) ** 2 / expected for c in draws.values()) < 60
    assert sorted(harary.permutation(seeds[1], 1000)) == list(range(1000))


def test_the_seed_needs_every_reveal_and_binds_the_round() -> None:
    reveals = [bytes([i]) * 32 for i in range(5)]
    base = harary.graph_seed(bytes(16), 1, bytes(32), reveals)
    assert harary.graph_seed(bytes(16), 2, bytes(32), reveals) != base
    assert harary.graph_seed(bytes(16), 1, bytes(32), reveals[::-1]) != base
    with pytest.raises(ValueError, match="'reveals' parameter of graph_seed"):
        harary.graph_seed(bytes(16), 1, bytes(32), [*reveals[:4], b"short"])


@pytest.mark.parametrize(("n", "k"), [(10, 4), (11, 6), (12, 11), (9, 8), (30, 12)])
def test_graph_is_symmetric_k_regular_and_points_are_distinct(n: int, k: int) -> None:
    size = n if k >= n - 1 else k + 1
    for u in range(n):
        near = harary.neighbourhood(u, n, k)
        assert len(set(near)) == size and u in near
        points = [harary.share_point(u, v, n, k) for v in near]
        assert sorted(points) == list(range(1, size + 1))
        for v in near:
            assert u in harary.neighbourhood(v, n, k)


def test_combine_arrays_equals_combine() -> None:
    secrets_ = [bytes([i]) * 32 for i in range(1, 7)]
    rows, pts = [], []
    for i, s in enumerate(secrets_):
        shares = shamir.split(s, 7, 4)
        chosen = shares[i % 3: i % 3 + 4]
        pts.append([sh.x for sh in chosen])
        rows.append(np.stack([sh.y for sh in chosen]))
    got = shamir.combine_arrays(np.array(pts), np.stack(rows), 32)
    assert got == secrets_
    with pytest.raises(ValueError, match="distinct points"):
        shamir.combine_arrays(np.array([[1, 1, 2, 3]]), np.stack(rows[:1]), 32)


# --------------------------------------------------------------------------- exhaustive
def _leaks(n: int, k: int, t: int, floor: int, colluders: int) -> tuple[int, ...] | None:
    """Search every colluder set, pair of survivor views and view assignment; return a
    case where the server unmasks client 0's input, or None.

    Model of the protocol's checks (secaggplus.py): an honest holder h shown view V
    answers only if h ∈ V, |V| ≥ floor, |N[h] ∩ V| ≥ t and at least t members of
    N[h] ∩ V signed V (colluders sign anything; an honest client signs the one view it
    is shown); it reveals the b-share of each w ∈ N[h] ∩ V and the s-share of each
    w ∈ N[h] \\ V. The server rebuilds a secret from t shares (colluders give both).
    Client 0's input reads out iff its b and, for each honest neighbour w, s_w or its
    own s are rebuilt.
    """
    full = (1 << n) - 1
    near = [sum(1 << p for p in harary.neighbourhood(u, n, k)) for u in range(n)]
    views = [v for v in range(full + 1) if v.bit_count() >= floor and v & 1]
    views += [v for v in range(full + 1) if v.bit_count() >= floor and not v & 1]
    for col in itertools.combinations(range(1, n), colluders):
        cm = sum(1 << c for c in col)
        honest = [h for h in range(n) if not cm >> h & 1]
        for va, vb in itertools.combinations_with_replacement(views, 2):
            pair = (va, vb)
            for assign in range(1 << len(honest)):
                signers = [cm, cm]
                for i, h in enumerate(honest):
                    side = assign >> i & 1
                    v = pair[side]
                    if v >> h & 1 and (near[h] & v).bit_count() >= t:
                        signers[side] |= 1 << h
                b = [0] * n
                s = [0] * n
                for i, h in enumerate(honest):
                    side = assign >> i & 1
                    v = pair[side]
                    if not signers[side] >> h & 1:
                        continue
                    if (near[h] & v & signers[side]).bit_count() < t:
                        continue
                    for w in range(n):
                        if near[h] >> w & 1:
                            if v >> w & 1:
                                b[w] += 1
                            else:
                                s[w] += 1
                for w in range(n):
                    extra = (near[w] & cm).bit_count()
                    b[w] += extra
                    s[w] += extra
                if b[0] < t:
                    continue
                if s[0] >= t or all(s[w] >= t or cm >> w & 1
                                    for w in range(1, n) if near[0] >> w & 1):
                    return (*col, va, vb, assign)
    return None


@pytest.mark.parametrize(("n", "colluders", "dropouts"), [(8, 1, 1), (9, 1, 1), (9, 2, 1)])
def test_adaptive_dropping_and_split_views_never_unmask_a_client(
        n: int, colluders: int, dropouts: int) -> None:
    # every (k, t) a client accepts for these counts, sparse or complete; the victim is
    # position 0 (H(n, k) is vertex-transitive)
    floor = n - dropouts
    accepted = [(k, harary.least_threshold(n, colluders, k)) for k in range(2, n - 1, 2)
                if harary.check_parameters(n, colluders, dropouts, k,
                                           harary.least_threshold(n, colluders, k)) is None]
    accepted.append((n - 1, harary.least_threshold(n, colluders, n - 1)))
    for k, t in accepted:
        if t > floor:
            continue
        assert _leaks(n, k, t, floor, colluders) is None, (n, k, t)


def test_the_exhaustive_search_finds_the_attack_below_the_bound() -> None:
    # it can fail: one t below the bound, the search unmasks client 0
    k, t = 4, harary.least_threshold(8, 1, 4)
    assert _leaks(8, k, t - 1, 7, 1) is not None


def test_combine_arrays_refuses_malicious_points_and_values() -> None:
    shares = shamir.split(b"\x07" * 32, 5, 3)
    xs = np.array([[s.x for s in shares[:3]]])
    ys = np.stack([s.y for s in shares[:3]])[None].astype(np.int64)
    assert shamir.combine_arrays(xs, ys, 32) == [b"\x07" * 32]
    bad_points = {"x = 0": [[0, 2, 3]], "x = p": [[1, 2, shamir.PRIME]], "x < 0": [[-1, 2, 3]],
                  "a repeated x": [[1, 1, 3]]}
    for points in bad_points.values():
        with pytest.raises(ValidationError, match="'points' parameter"):
            shamir.combine_arrays(np.array(points), ys, 32)
    for values in (np.where(ys == ys.max(), shamir.PRIME, ys), -ys, ys[:, :2],
                   ys.astype(np.float64)):
        with pytest.raises(ValidationError, match="'values' parameter"):
            shamir.combine_arrays(xs, values, 32)
    with pytest.raises(ValidationError, match="'values' parameter"):
        shamir.combine_arrays(xs, ys[..., :-1], 32)  # chunks of a shorter secret


def test_commitments_of_a_roster_equal_each_commitment() -> None:
    import hashlib
    import os

    session = os.urandom(16)
    names = ["c0", "c1", "ü-2", "c" * 40]
    nonces = [os.urandom(harary.NONCE_BYTES) for _ in names]
    batch = harary.commitments(session, 7, names, nonces)
    assert batch == [harary.commitment(session, 7, v, r) for v, r in zip(names, nonces,
                                                                         strict=True)]
    assert len(set(batch)) == len(names)
    # SHA-256 over the five length-prefixed parts, as the module states
    parts = [harary._COMMIT, session, (7).to_bytes(8, "big"), "ü-2".encode(), nonces[2]]
    framed = b"".join(len(p).to_bytes(4, "big") + p for p in parts)
    assert batch[2] == hashlib.sha256(framed).digest()
    # bound to the round, the session and the name
    assert harary.commitments(session, 8, names, nonces) != batch
    assert harary.commitments(os.urandom(16), 7, names, nonces)[0] != batch[0]
    assert harary.commitment(session, 7, "c1", nonces[0]) != batch[0]
    with pytest.raises(ValueError):
        harary.commitments(session, 7, names, nonces[:-1])
