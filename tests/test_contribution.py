"""Contribution measurement in horizontal FL: Shapley maths, the round game, the tracker in
FederatedModel runs (GTG-Shapley, exact, one-round reconstruction, leave-one-out),
checkpoints, retraining and the report helpers."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from itertools import pairwise, permutations
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from islands.aggregation.additive import AdditiveSharing
from islands.aggregation.base import MeanAggregator
from islands.aggregation.homomorphic import CKKSAggregator, PaillierAggregator
from islands.aggregation.protect import ChaosPermutation, ClientDP
from islands.aggregation.secagg import SecureAggregation
from islands.errors import DataNotFoundError, ProtocolError, ValidationError
from islands.hfl import FedAvg, FederatedModel
from islands.hfl.checkpoint import load_checkpoint, save_checkpoint
from islands.hfl.contribution import (
    METHODS,
    ClientValidation,
    Contribution,
    ContributionReport,
    ContributionTracker,
    IncompatibleAggregatorError,
    RoundGame,
    ServerValidation,
    check_compatible,
    exact_shapley,
    hoeffding_halfwidth,
    leave_one_out,
    permutation_shapley,
    reward_shares,
)
from islands.hfl.contribution.game import coalition_coefficients
from islands.hfl.contribution.maths import (
    MAX_EXACT_PLAYERS,
    combined_halfwidth,
    members,
    shapley_weights,
    student_quantile,
)
from islands.hfl.contribution.report import (
    contribution_rows,
    load_contribution,
    plot_contribution,
    text_bars,
)
from islands.hfl.contribution.retrain import coalition_trainer, retrain_contributions
from islands.hfl.contribution.tracker import MAX_OR_CLIENTS, MAX_ROUND_EXACT
from islands.runtime import wire

torch = pytest.importorskip("torch")
scipy_stats = pytest.importorskip("scipy.stats")

from islands.data import load  # noqa: E402
from islands.hfl.torch.learner import FreeRider  # noqa: E402
from islands.hfl.torch.models import ModelSpec  # noqa: E402

SPEC = ModelSpec("mlp", (64,), 10, hidden=(16,))
ALL = ("gtg", "exact", "or", "loo")
# a GTG halfwidth is t·stderr with t ≥ 1.96 (95 %, T − 1 df, per client): 3 halfwidths are ~6
# standard errors, so a correct estimator breaks the bound with negligible probability
# (and the guided first positions make the iid stderr conservative)
K_HALFWIDTH = 3.0


def _assert_names(exc: pytest.ExceptionInfo[Exception], name: str) -> None:
    assert f"'{name}'" in str(exc.value), str(exc.value)


# =============================================================================== maths
def _weight_game(w: np.ndarray, f: Any) -> Any:
    """v(S) = f(Σ_{k∈S} w_k): symmetric in players of equal weight, nonlinear in f."""

    def value(mask: int) -> float:
        return float(f(sum(w[k] for k in range(len(w)) if mask >> k & 1)))

    return value


def _brute_shapley(value: Any, n: int) -> np.ndarray:
    """Shapley values from the definition over all n! orders (tiny n only)."""
    phi = np.zeros(n)
    count = 0
    for order in permutations(range(n)):
        mask = 0
        for k in order:
            phi[k] += value(mask | 1 << k) - value(mask)
            mask |= 1 << k
        count += 1
    return phi / count


def test_members_lists_the_bits_of_a_mask() -> None:
    assert members(0, 4) == []
    assert members(0b1011, 4) == [0, 1, 3]
    assert members(0b1011, 2) == [0, 1]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 30, 200])
def test_shapley_weights_sum_to_one_over_coalition_sizes(n: int) -> None:
    w = shapley_weights(n)
    assert w.shape == (n,) and np.all(np.isfinite(w)) and np.all(w > 0)
    # Σ_s C(n−1, s)·w[s] = Σ_s 1/n = 1: every size gets weight 1/n
    total = math.fsum(math.comb(n - 1, s) * float(w[s]) for s in range(n))
    assert total == pytest.approx(1.0, abs=1e-9)
    assert w[0] == pytest.approx(1 / n, rel=1e-12)
    if n <= 10:
        exact = [math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n)
                 for s in range(n)]
        np.testing.assert_allclose(w, exact, rtol=1e-12)


def test_exact_shapley_matches_the_definition_over_orders() -> None:
    rng = np.random.default_rng(3)
    table = rng.normal(size=1 << 5)
    phi = exact_shapley(table.__getitem__, 5)
    np.testing.assert_allclose(phi, _brute_shapley(table.__getitem__, 5), atol=1e-12)


def test_exact_shapley_of_an_additive_game_is_each_players_value() -> None:
    a = np.array([0.3, -1.2, 2.5, 0.0, 0.7])

    def value(mask: int) -> float:
        return 4.0 + sum(a[k] for k in members(mask, 5))

    np.testing.assert_allclose(exact_shapley(value, 5), a, atol=1e-12)
    # leave-one-out is also exact on an additive game
    np.testing.assert_allclose(leave_one_out(value, 5), a, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_exact_shapley_is_efficient_on_random_games(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    table = rng.normal(size=1 << n) * 10
    phi = exact_shapley(table.__getitem__, n)
    assert phi.sum() == pytest.approx(table[-1] - table[0], abs=1e-9)


def test_exact_shapley_gives_symmetric_players_the_same_value() -> None:
    # players 1 and 3 have equal weight: every coalition values them alike
    w = np.array([0.5, 1.7, 0.2, 1.7, 3.0])
    phi = exact_shapley(_weight_game(w, lambda x: math.tanh(x / 2) + 0.1 * x * x), 5)
    assert abs(phi[1] - phi[3]) <= 1e-12
    assert abs(phi[1] - phi[0]) > 1e-3  # and different players do differ


def test_exact_shapley_of_a_null_player_is_zero() -> None:
    w = np.array([0.5, 0.0, 1.2, 2.0])
    phi = exact_shapley(_weight_game(w, lambda x: x**3 - x), 4)
    assert phi[1] == 0.0
    assert np.all(np.abs(phi[[0, 2, 3]]) > 1e-3)


def test_leave_one_out_on_a_known_game() -> None:
    # v(S) = |S|²: v(N) − v(N∖{k}) = n² − (n−1)² for every k, n + 1 evaluations
    calls: list[int] = []

    def value(mask: int) -> float:
        calls.append(mask)
        return float(bin(mask).count("1") ** 2)

    np.testing.assert_array_equal(leave_one_out(value, 4), [7.0] * 4)
    assert sorted(calls) == sorted([0b1111, 0b1110, 0b1101, 0b1011, 0b0111])
    # a glove game: players 0, 1 hold left gloves, 2 a right one; v = pairs made
    # v(S) = 1 iff 2 ∈ S and S holds a left glove
    glove = [float(m & 0b100 != 0 and m & 0b011 != 0) for m in range(8)]
    np.testing.assert_array_equal(leave_one_out(glove.__getitem__, 3), [0.0, 0.0, 1.0])
    np.testing.assert_allclose(exact_shapley(glove.__getitem__, 3), [1 / 6, 1 / 6, 2 / 3])


def test_exact_shapley_refuses_too_many_players_before_any_evaluation() -> None:
    def never(mask: int) -> float:
        raise AssertionError("evaluated")

    with pytest.raises(ValidationError) as exc:
        exact_shapley(never, MAX_EXACT_PLAYERS + 1)
    _assert_names(exc, "n")
    with pytest.raises(ValidationError) as exc:
        exact_shapley(never, 0)
    _assert_names(exc, "n")


def test_non_finite_values_are_refused() -> None:
    with pytest.raises(ValidationError, match="finite"):
        exact_shapley(lambda m: math.nan if m == 3 else 0.0, 2)
    with pytest.raises(ValidationError, match="finite"):
        permutation_shapley(lambda m: math.inf if m == 1 else 0.0, 3,
                            rng=np.random.default_rng(0))


@pytest.mark.parametrize("seed", range(5))
def test_permutation_estimate_lies_within_its_halfwidths_of_the_exact_values(
        seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = 6
    w = rng.uniform(0.1, 2.0, size=n)
    fs = [math.sqrt, lambda x: math.tanh(x - 2), lambda x: x * x / 10, math.log1p,
          lambda x: min(x, 3.0)]
    game = _weight_game(w, fs[seed])
    exact = exact_shapley(game, n)
    tol = 0.01 * abs(game((1 << n) - 1) - game(0))  # 1 % of the value to share
    est = permutation_shapley(game, n, rng=np.random.default_rng(seed), tolerance=tol,
                              min_permutations=20, max_permutations=20_000)
    assert est.converged and est.permutations < 20_000
    assert np.all(est.halfwidth <= tol)
    t_quantile = scipy_stats.t.ppf(0.975, est.permutations - 1)  # Student t, T − 1 df
    np.testing.assert_allclose(est.halfwidth, t_quantile * est.stderr, rtol=1e-12)
    assert np.all(est.halfwidth > 0)  # every player's marginals varied: the bound is real
    assert np.all(np.abs(est.values - exact) <= K_HALFWIDTH * est.halfwidth), (
        est.values - exact, est.halfwidth)
    # without truncation every order's marginals sum to v(N) − v(∅): exactly efficient
    assert est.values.sum() == pytest.approx(game((1 << n) - 1) - game(0), abs=1e-9)
    assert est.truncated == 0 and est.confidence == 0.95
    # every player came first in some order: its singleton marginal is among those seen
    assert est.value_range >= max(abs(game(1 << k) - game(0)) for k in range(n))


def test_permutation_shapley_is_exact_and_stops_early_on_an_additive_game() -> None:
    a = np.array([0.1, 0.4, -0.3, 0.8])

    def value(mask: int) -> float:
        return sum(a[k] for k in members(mask, 4))

    est = permutation_shapley(value, 4, rng=np.random.default_rng(1), min_permutations=7)
    # constant marginals: zero variance, so it stops at min_permutations, converged
    assert est.converged and est.permutations == 7
    np.testing.assert_allclose(est.values, a, atol=1e-12)
    assert est.value_range == pytest.approx(0.8)
    # every player's seven marginals are equal (up to float sums' last bits): no spread
    # seen, so each half-width is the floor for the orders not drawn, (1 − 0.05^(1/7))·0.8
    floor = (1 - 0.05 ** (1 / 7)) * 0.8
    np.testing.assert_allclose(est.halfwidth, floor, rtol=1e-6)
    np.testing.assert_allclose(est.stderr, floor / student_quantile(0.95, 6), rtol=1e-6)
    known = permutation_shapley(value, 4, rng=np.random.default_rng(1), min_permutations=7,
                                null=np.array([True, False, False, False]))
    assert known.halfwidth[0] < 1e-7  # a player known to be null needs no floor
    with pytest.raises(ValidationError, match="'null'"):
        permutation_shapley(value, 4, rng=np.random.default_rng(1), null=np.ones(3, bool))


def test_a_player_whose_sampled_marginals_never_vary_keeps_a_nonzero_halfwidth() -> None:
    # issue 27: on accuracy a noisy free-rider's ten sampled marginals were often all 0
    # while its exact per-round value was not, and its interval had zero width. Here
    # player 0 adds 0.02 only when it joins {1, 2} (1 order in 12) and nothing otherwise;
    # in 10 orders it often never shows that, and the floor still covers its value
    n, bonus = 4, 0b0111

    def value(mask: int) -> float:
        return 0.02 * bin(mask & 0b1110).count("1") + (0.02 if mask == bonus else 0.0)

    exact = exact_shapley(value, n)
    assert exact[0] == pytest.approx(0.02 / 12)
    covered = np.zeros(n)
    unseen = 0
    for rep in range(400):
        est = permutation_shapley(value, n, rng=np.random.default_rng(rep),
                                  min_permutations=10, max_permutations=10)
        covered += np.abs(est.values - exact) <= est.halfwidth + 1e-15
        unseen += int(est.values[0] == 0.0)
    assert unseen > 100  # the case the floor is for happened often
    assert np.all(covered / 400 >= 0.95)


def test_permutation_shapley_guides_the_first_position_and_counts_evaluations() -> None:
    n, T = 4, 12
    calls: list[int] = []

    def value(mask: int) -> float:
        calls.append(mask)
        return math.sqrt(bin(mask).count("1")) + 0.1 * (mask & 1)

    est = permutation_shapley(value, n, rng=np.random.default_rng(0), tolerance=1e-9,
                              min_permutations=2, max_permutations=T)
    assert not est.converged and est.permutations == T
    # v(∅) and v(N) once, then the n − 1 proper prefixes of every order
    assert calls[:2] == [0, (1 << n) - 1]
    assert est.evaluations == len(calls) == 2 + T * (n - 1)
    firsts = calls[2::n - 1]
    # every cycle of n orders puts each player first once, in a random order per cycle
    for c in range(T // n):
        assert sorted(firsts[c * n:(c + 1) * n]) == [1 << k for k in range(n)]
    assert firsts[:n] != firsts[n:2 * n] or firsts[n:2 * n] != firsts[2 * n:]
    prefixes = [calls[2 + t * (n - 1): 2 + (t + 1) * (n - 1)] for t in range(T)]
    for p in prefixes:  # every order's prefixes grow by one player at a time
        assert [bin(m).count("1") for m in p] == list(range(1, n))
        assert all(a & b == a for a, b in pairwise(p))


def test_permutation_shapley_is_reproducible_from_its_generator() -> None:
    game = _weight_game(np.array([0.3, 1.0, 2.0, 0.5, 1.5]), math.sqrt)
    a = permutation_shapley(game, 5, rng=np.random.default_rng(7), max_permutations=40)
    b = permutation_shapley(game, 5, rng=np.random.default_rng(7), max_permutations=40)
    c = permutation_shapley(game, 5, rng=np.random.default_rng(8), max_permutations=40)
    np.testing.assert_array_equal(a.values, b.values)
    assert a.permutations == b.permutations
    assert not np.array_equal(a.values, c.values)


def test_truncation_skips_saturated_tails_within_the_threshold() -> None:
    # v(S) = 1 − 2^(−Σw): a couple of heavy players saturate it
    n = 8
    w = np.array([6.0, 5.0, 4.0, 0.5, 0.5, 0.4, 0.3, 0.2])
    game = _weight_game(w, lambda x: 1 - 2.0 ** (-x))
    gain = game((1 << n) - 1) - game(0)
    trunc = 0.02
    plain = permutation_shapley(game, n, rng=np.random.default_rng(0), tolerance=1e-6,
                                min_permutations=40, max_permutations=40)
    cut = permutation_shapley(game, n, rng=np.random.default_rng(0), tolerance=1e-6,
                              min_permutations=40, max_permutations=40, truncation=trunc)
    assert plain.truncated == 0 and cut.truncated > 0
    assert cut.evaluations < plain.evaluations
    assert abs(cut.values.sum() - gain) <= trunc
    assert cut.values.sum() != pytest.approx(gain, abs=1e-12)  # it did truncate a tail
    # each φ̂_k is biased by at most the threshold (same orders, same rng stream)
    assert np.all(np.abs(cut.values - plain.values) <= trunc + 1e-12)
    # a whole game below the threshold truncates every order at its start
    flat = permutation_shapley(lambda m: 0.001 * bin(m).count("1"), 3,
                               rng=np.random.default_rng(0), truncation=0.1)
    assert flat.truncated == 3 * flat.permutations
    np.testing.assert_array_equal(flat.values, 0.0)


@pytest.mark.parametrize(("kw", "name"), [
    ({"tolerance": 0.0}, "tolerance"),
    ({"tolerance": -1.0}, "tolerance"),
    ({"confidence": 0.0}, "confidence"),
    ({"confidence": 1.0}, "confidence"),
    ({"confidence": 1.5}, "confidence"),
    ({"min_permutations": 1}, "min_permutations"),
    ({"min_permutations": 10, "max_permutations": 9}, "max_permutations"),
    ({"truncation": -0.1}, "truncation"),
    ({"rng": 0}, "rng"),
    ({"rng": np.random.RandomState(0)}, "rng"),
    ({"n": 0}, "n"),
])
def test_permutation_shapley_validates_its_parameters(kw: dict[str, Any], name: str) -> None:
    args: dict[str, Any] = {"rng": np.random.default_rng(0), "n": 3, **kw}
    n = args.pop("n")
    with pytest.raises(ValidationError) as exc:
        permutation_shapley(lambda m: 0.0, n, **args)
    _assert_names(exc, name)


def _coverage(games: list[Callable[[int], float]], n: int, repeats: int
              ) -> tuple[float, float]:
    """Coverage of exact Shapley by GTG's half-widths, per round and for the rounds' sum.

    Ten orders a round, the minimum most rounds stop at; rounds combined as the tracker
    combines them (:func:`combined_halfwidth`).
    """
    exact = [exact_shapley(g, n) for g in games]
    per_round = summed = 0
    for rep in range(repeats):
        values, var, var_df = np.zeros(n), np.zeros(n), np.zeros(n)
        for r, g in enumerate(games):
            est = permutation_shapley(g, n, rng=np.random.default_rng([rep, r]),
                                      min_permutations=10, max_permutations=10)
            per_round += int(np.sum(np.abs(est.values - exact[r]) <= est.halfwidth))
            values += est.values
            var += est.stderr**2
            var_df += est.stderr**4 / (est.permutations - 1)
        width = combined_halfwidth(var, var_df, 0.95)
        summed += int(np.sum(np.abs(values - np.sum(exact, axis=0)) <= width))
    return per_round / (repeats * len(games) * n), summed / (repeats * n)


def _table_game(values: NDArray[np.float64]) -> Callable[[int], float]:
    return lambda mask: float(values[mask])


def test_gtg_interval_covers_exact_shapley_at_its_nominal_level() -> None:
    # issue 27: games whose marginals are far from normal (every coalition's value an
    # independent N(0, 1) draw, v(∅) = 0), sampled with the 10 orders most rounds stop
    # at. Over these five games the normal quantile (1.96) covered 93% of the Shapley
    # values, Student's t₉ (2.26) 96% (0.944 to 0.973 game by game). 5 games × 600
    # revaluations × 6 players: the coverage's standard error is about 0.002, so the
    # bounds below separate the two intervals by several of them.
    n, repeats = 6, 600
    covered = normal = 0
    for seed in range(5):
        table = np.random.default_rng(seed).normal(0, 1, 1 << n)
        table[0] = 0.0
        game = _table_game(table)
        exact = exact_shapley(game, n)
        for rep in range(repeats):
            est = permutation_shapley(game, n, rng=np.random.default_rng([rep, 0]),
                                      min_permutations=10, max_permutations=10)
            error = np.abs(est.values - exact)
            covered += int(np.sum(error <= est.halfwidth))
            normal += int(np.sum(error <= 1.959963984540054 * est.stderr))
    total = 5 * repeats * n
    assert covered / total >= 0.95
    assert normal / total < 0.945  # the interval it replaced: the check can fail


def test_gtg_interval_of_a_sum_of_rounds_covers_at_its_nominal_level() -> None:
    # five rounds of independent random games combined by Welch–Satterthwaite: the
    # reported half-width of a client's total covers the total of exact Shapley values
    n, rounds = 6, 5
    rng = np.random.default_rng(1)
    tables = [rng.normal(0, 1, 1 << n) for _ in range(rounds)]
    for table in tables:
        table[0] = 0.0
    _, summed = _coverage([_table_game(t) for t in tables], n, repeats=400)
    assert summed >= 0.945


def test_combined_halfwidth_is_welch_satterthwaite() -> None:
    # R equal rounds of T orders: ν = R(T − 1), half-width t_ν·√(R·v)
    v, rounds, orders = 0.04, 5, 10
    var = np.array([rounds * v, 0.0])
    var_df = np.array([rounds * v * v / (orders - 1), 0.0])
    h = combined_halfwidth(var, var_df, 0.95)
    assert h[0] == pytest.approx(scipy_stats.t.ppf(0.975, rounds * (orders - 1))
                                 * math.sqrt(rounds * v), rel=1e-12)
    assert h[1] == 0.0  # a null player: nothing varied
    # no degrees of freedom kept (an old checkpoint): the normal quantile
    assert combined_halfwidth(var, np.zeros(2), 0.95)[0] == pytest.approx(
        1.959963984540054 * math.sqrt(rounds * v), rel=1e-12)
    assert student_quantile(0.95, math.inf) == pytest.approx(1.959963984540054)
    with pytest.raises(ValidationError, match="confidence"):
        student_quantile(1.0, 5)


def test_hoeffding_halfwidth_formula_and_monotonicity() -> None:
    r, t, c, n = 0.3, 50, 0.95, 4
    expected = r * math.sqrt(2 * math.log(2 * n / (1 - c)) / t)
    assert hoeffding_halfwidth(r, t, c, n) == pytest.approx(expected, rel=1e-12)
    widths = [hoeffding_halfwidth(r, t, c, n) for t in (1, 2, 10, 100, 1000)]
    assert all(a > b for a, b in pairwise(widths))
    # ∝ 1/√T, ∝ r, and wider for more players or more confidence
    assert hoeffding_halfwidth(r, 4 * t, c, n) == pytest.approx(expected / 2, rel=1e-12)
    assert hoeffding_halfwidth(2 * r, t, c, n) == pytest.approx(2 * expected, rel=1e-12)
    assert hoeffding_halfwidth(r, t, c, 2 * n) > expected
    assert hoeffding_halfwidth(r, t, 0.99, n) > expected
    assert hoeffding_halfwidth(0.0, t, c, n) == 0.0
    for kw, name in [({"confidence": 1.0}, "confidence"), ({"permutations": 0},
                     "permutations"), ({"value_range": -1.0}, "value_range"),
                     ({"players": 0}, "players")]:
        args = {"value_range": r, "permutations": t, "confidence": c, "players": n, **kw}
        with pytest.raises(ValidationError) as exc:
            hoeffding_halfwidth(**args)
        _assert_names(exc, name)


def test_reward_shares() -> None:
    np.testing.assert_allclose(reward_shares([0.2, -0.1, 0.6, 0.0]), [0.25, 0, 0.75, 0])
    shares = reward_shares(np.random.default_rng(0).normal(size=9))
    assert np.all(shares >= 0) and shares.sum() == pytest.approx(1.0)
    assert np.all(shares[np.random.default_rng(0).normal(size=9) <= 0] == 0)
    np.testing.assert_array_equal(reward_shares([-1.0, 0.0, -0.5]), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(reward_shares([0.0, 0.0]), [0.0, 0.0])
    np.testing.assert_allclose(reward_shares([3.0]), [1.0])
    for bad in ([0.1, math.nan], [math.inf, 0.2], [[0.1, 0.2]]):
        with pytest.raises(ValidationError):
            reward_shares(bad)


# =============================================================================== game
def _round(rng: np.random.Generator, k: int, dim: int = 7) -> tuple[np.ndarray, list[Any]]:
    base = rng.normal(size=dim).astype(np.float32)
    return base, [(base + rng.normal(size=dim)).astype(np.float32) for _ in range(k)]


def test_coalition_coefficients_by_hand() -> None:
    p = np.array([0.25, 0.5, 0.25])  # weights 1, 2, 1
    np.testing.assert_allclose(coalition_coefficients(0b011, p, "fixed"), [0.25, 0.5, 0])
    np.testing.assert_allclose(coalition_coefficients(0b011, p, "renormalised"),
                               [1 / 3, 2 / 3, 0])
    np.testing.assert_allclose(coalition_coefficients(0b100, p, "fixed"), [0, 0, 0.25])
    np.testing.assert_allclose(coalition_coefficients(0b100, p, "renormalised"), [0, 0, 1])
    np.testing.assert_allclose(coalition_coefficients(0b101, p, "renormalised"),
                               [0.5, 0, 0.5])
    for weighting in ("fixed", "renormalised"):
        np.testing.assert_array_equal(coalition_coefficients(0, p, weighting), [0, 0, 0])
        np.testing.assert_allclose(coalition_coefficients(0b111, p, weighting), p)


@pytest.mark.parametrize("weighting", ["fixed", "renormalised"])
def test_round_game_models_by_hand(weighting: str) -> None:
    base, ups = _round(np.random.default_rng(0), 3)
    game = RoundGame(base, ups, [10, 20, 10], lambda w: 0.0, weighting)
    np.testing.assert_allclose(game.weights, [0.25, 0.5, 0.25])
    np.testing.assert_array_equal(game.model(0), base)  # w_∅ = w exactly
    b, u = base.astype(np.float64), [v.astype(np.float64) for v in ups]
    mean = 0.25 * u[0] + 0.5 * u[1] + 0.25 * u[2]
    np.testing.assert_allclose(game.model(0b111), mean, atol=1e-5)  # w_N = FedAvg
    if weighting == "fixed":  # each member's share of the actual step
        expect = {0b011: b + 0.25 * (u[0] - b) + 0.5 * (u[1] - b),
                  0b100: b + 0.25 * (u[2] - b),
                  0b101: b + 0.25 * (u[0] - b) + 0.25 * (u[2] - b)}
    else:  # FedAvg over the coalition alone
        expect = {0b011: (u[0] + 2 * u[1]) / 3, 0b100: u[2], 0b101: (u[0] + u[2]) / 2}
    for mask, want in expect.items():
        np.testing.assert_allclose(game.model(mask), want, atol=1e-5)
        assert game.model(mask).dtype == np.float32


def test_round_game_caches_every_coalition_value() -> None:
    base, ups = _round(np.random.default_rng(1), 3)
    calls: list[float] = []

    def utility(w: np.ndarray) -> float:
        calls.append(float(w.sum()))
        return float(w.sum())

    game = RoundGame(base, ups, [1, 1, 1], utility)
    first = [game(m) for m in (0, 0b101, 0b111)]
    assert game.evaluations == 3 and len(calls) == 3
    again = [game(m) for m in (0b111, 0, 0b101, 0b101)]
    assert again == [first[2], first[0], first[1], first[1]]
    assert game.evaluations == 3 and len(calls) == 3  # nothing re-scored
    assert game.known() == {0: first[0], 0b101: first[1], 0b111: first[2]}
    exact_shapley(game, 3)
    assert game.evaluations == 8 and len(calls) == 8


def test_round_game_of_two_identical_uploads_gives_them_equal_shapley_values() -> None:
    base, ups = _round(np.random.default_rng(2), 3, dim=50)
    ups = [ups[0], ups[1], ups[0].copy(), ups[2]]

    def utility(w: np.ndarray) -> float:
        return -float(np.sum((w.astype(np.float64) - 1.0) ** 2))

    for weighting in ("fixed", "renormalised"):
        game = RoundGame(base, ups, [3, 5, 3, 4], utility, weighting)
        phi = exact_shapley(game, 4)
        # the coalition models are float32 sums whose rounding depends on the rows'
        # positions, so the twins agree to float32 precision (~1e-7 relative), not
        # bit for bit; an asymmetric game would differ at the 1e-1 scale
        scale = float(np.max(np.abs(phi)))
        assert abs(phi[0] - phi[2]) <= 1e-6 * scale, phi
        assert abs(phi[0] - phi[1]) > 1e-2 * scale
        # the twins' coalition models themselves agree to float32 rounding
        for rest in (0, 0b0010, 0b1000, 0b1010):
            np.testing.assert_allclose(game.model(rest | 0b0001), game.model(rest | 0b0100),
                                       rtol=1e-6, atol=1e-6)


def test_round_game_validates_its_inputs() -> None:
    base, ups = _round(np.random.default_rng(3), 2)
    with pytest.raises(ValidationError) as exc:
        RoundGame(base, ups, [1, 1], lambda w: 0.0, "uniform")
    _assert_names(exc, "weighting")
    with pytest.raises(ValidationError, match="do not match"):
        RoundGame(base, [u[:-1] for u in ups], [1, 1], lambda w: 0.0)
    for bad in ([1], [1, 0], [1, -2], [1, math.nan]):
        with pytest.raises(ValidationError, match="weights"):
            RoundGame(base, ups, bad, lambda w: 0.0)


def test_fixed_game_free_rider_is_exactly_null_for_a_continuous_utility() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(size=1000).astype(np.float32)
    ups = [(base + 0.1 * rng.normal(size=1000)).astype(np.float32) for _ in range(2)]
    ups.append(base.copy())  # the free-rider uploads the global model unchanged

    def utility(w: np.ndarray) -> float:
        return float(np.sum(w.astype(np.float64) ** 2))

    game = RoundGame(base, ups, [120, 200, 170], utility, "fixed")
    assert exact_shapley(game, 3)[2] == 0.0
    for mask in range(4):
        np.testing.assert_array_equal(game.model(mask | 0b100), game.model(mask))


def test_server_and_client_validation_utilities() -> None:
    data = load("digits")
    X, y = (data.X / 16).astype(np.float32)[:200], data.y[:200]
    w = SPEC.initial_params(0)
    acc = ServerValidation(SPEC, X, y)
    loss = ServerValidation(SPEC, X, y, metric="loss")
    assert acc.rows == 200 and 0.0 <= acc(w) <= 1.0
    logits = SPEC.build(0)(torch.as_tensor(X)).detach()
    assert acc(w) == pytest.approx(float((logits.argmax(1).numpy() == y).mean()))
    ce = float(torch.nn.functional.cross_entropy(logits, torch.as_tensor(y)))
    assert loss(w) == pytest.approx(-ce, rel=1e-5)
    regression = ModelSpec("mlp", (64,), 1, hidden=(4,))
    yr = y.astype(np.float64)
    assert ServerValidation(regression, X, yr, task="regression", metric="loss")(
        regression.initial_params(0)) < 0  # minus the mean squared error
    with pytest.raises(ValidationError) as exc:
        ServerValidation(regression, X, yr, task="regression", metric="accuracy")
    _assert_names(exc, "metric")
    with pytest.raises(ValidationError) as exc:
        ServerValidation(SPEC, X, y, metric="f1")
    _assert_names(exc, "metric")
    with pytest.raises(ValidationError, match="empty"):
        ServerValidation(SPEC, X[:0], y[:0])
    cv = ClientValidation([(lambda p: 0.5, 10), (lambda p: 1.0, 30), (lambda p: 9.0, 0)])
    assert cv.rows == 40 and cv(w) == pytest.approx((5 + 30) / 40)
    with pytest.raises(ValidationError, match="eval_fraction"):
        ClientValidation([(lambda p: 0.5, 0)])


# =============================================================================== tracker
CKKS_OK = True
try:  # constructing the aggregator only builds its parameters (no keys)
    CKKSAggregator()
except ImportError:  # pragma: no cover - tenseal missing
    CKKS_OK = False

INCOMPATIBLE = [
    ("secagg", lambda: SecureAggregation(), "secure aggregation"),
    ("additive", lambda: AdditiveSharing(), "additive sharing"),
    ("chaos+secagg", lambda: ChaosPermutation(SecureAggregation()), "chaos permutation"),
    ("paillier", lambda: PaillierAggregator(), "Paillier"),
    ("ckks", lambda: CKKSAggregator(), "CKKS"),
    ("dp+secagg", lambda: ClientDP(SecureAggregation()), "secure aggregation"),
    ("dp+chaos", lambda: ClientDP(ChaosPermutation(SecureAggregation())),
     "chaos permutation"),
]


@pytest.mark.parametrize(("name", "make", "why"), INCOMPATIBLE,
                         ids=[c[0] for c in INCOMPATIBLE])
def test_aggregators_hiding_single_updates_are_refused(name: str, make: Any,
                                                       why: str) -> None:
    if name == "ckks" and not CKKS_OK:
        pytest.skip("tenseal is not installed")
    with pytest.raises(IncompatibleAggregatorError) as exc:
        check_compatible(make())
    assert isinstance(exc.value, ValidationError)
    assert why in str(exc.value) and "retrain" in str(exc.value)


def test_plain_mean_and_client_dp_are_compatible() -> None:
    check_compatible(MeanAggregator())
    check_compatible(ClientDP(MeanAggregator()))
    check_compatible(ClientDP(ClientDP()))

    class Custom:
        name = "custom"

    with pytest.raises(IncompatibleAggregatorError, match="'custom' aggregator is not known"):
        check_compatible(Custom())


def _val() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((3, 64), np.float32), np.zeros(3, np.int64)


@pytest.mark.parametrize(("kw", "name"), [
    ({"methods": ("shapley",)}, "methods"),
    ({"methods": ("gtg", "gtg")}, "methods"),
    ({"methods": ()}, "methods"),
    ({"methods": "exactly"}, "methods"),
    ({"validation": "server"}, "validation"),
    ({"validation": (np.zeros((3, 64)),)}, "validation"),
    ({"validation": None}, "validation"),
    ({"metric": "f1"}, "metric"),
    ({"weighting": "uniform"}, "weighting"),
    ({"tolerance": 0.0}, "tolerance"),
    ({"confidence": 1.0}, "confidence"),
    ({"confidence": 0.0}, "confidence"),
    ({"min_permutations": 1}, "min_permutations"),
    ({"min_permutations": 20, "max_permutations": 10}, "max_permutations"),
    ({"truncation": -1.0}, "truncation"),
    ({"round_truncation": -1.0}, "round_truncation"),
    ({"seed": -1}, "seed"),
])
def test_contribution_settings_are_validated(kw: dict[str, Any], name: str) -> None:
    args: dict[str, Any] = {"validation": _val(), **kw}
    with pytest.raises(ValidationError) as exc:
        Contribution(**args)
    _assert_names(exc, name)


def test_contribution_settings_normalise_methods_and_describe_themselves() -> None:
    assert Contribution(_val(), methods="exact").methods == ("exact",)
    cfg = Contribution(_val(), methods=["or", "gtg"])
    assert cfg.methods == ("or", "gtg")
    settings = cfg.settings()
    assert settings["methods"] == ["or", "gtg"] and settings["validation"] == "server (3 rows)"
    assert settings["weighting"] == "fixed"
    assert set(settings) == {"validation", "methods", "metric", "weighting", "tolerance",
                             "confidence", "min_permutations", "max_permutations",
                             "truncation", "round_truncation", "seed"}
    json.dumps(settings)  # the rows themselves are left out
    assert Contribution("clients").settings()["validation"] == "clients"
    assert set(METHODS) == {*ALL, "retrain"}  # retrain: the estimator, after the run


def test_tracker_refuses_federations_too_large_for_exact_or_or() -> None:
    val = Contribution(_val(), methods=("exact",))
    w0 = np.zeros(4, np.float32)

    def names(n: int) -> list[str]:
        return [f"c{k}" for k in range(n)]

    ContributionTracker(val, names(MAX_ROUND_EXACT), lambda w: 0.0, w0)
    with pytest.raises(ValidationError) as exc:
        ContributionTracker(val, names(MAX_ROUND_EXACT + 1), lambda w: 0.0, w0)
    _assert_names(exc, "methods")
    assert "'exact'" in str(exc.value)
    orc = Contribution(_val(), methods=("or",))
    ContributionTracker(orc, names(MAX_OR_CLIENTS), lambda w: 0.0, w0)
    with pytest.raises(ValidationError) as exc:
        ContributionTracker(orc, names(MAX_OR_CLIENTS + 1), lambda w: 0.0, w0)
    _assert_names(exc, "methods")
    assert "'or'" in str(exc.value)
    # 2^16 models of 20 000 parameters are 4.9 GiB: refused before allocating them
    with pytest.raises(ValidationError, match="4 GiB"):
        ContributionTracker(orc, names(16), lambda w: 0.0, np.zeros(20_000, np.float32))
    # gtg and loo have no such limit
    ContributionTracker(Contribution(_val()), names(40), lambda w: 0.0, w0)
    with pytest.raises(ValidationError) as exc:
        ContributionTracker({"methods": ("gtg",)}, names(3), lambda w: 0.0,  # type: ignore[arg-type]
                            w0)
    _assert_names(exc, "contribution")


def _linear_run(methods: tuple[str, ...] = ALL, rounds: int = 4, **kw: Any
                ) -> tuple[ContributionTracker, list[Any], np.ndarray, Any]:
    """A tracker fed synthetic rounds scored by a linear utility u(w) = a·w.

    Under the fixed weighting the round game is additive: client k's value in round r
    is p_k·a·(w_k − w), whatever the method. Client c2 drops out of round 2.
    """
    rng = np.random.default_rng(5)
    dim, names = 6, ["c0", "c1", "c2", "c3"]
    a = rng.normal(size=dim)

    def utility(w: np.ndarray) -> float:
        return float(a @ w.astype(np.float64))

    w = rng.normal(size=dim).astype(np.float32)
    tracker = ContributionTracker(Contribution(_val(), methods=methods, **kw), names,
                                  utility, w, seed=3)
    feed = []
    expected = np.zeros(4)
    for r in range(1, rounds + 1):
        here = [c for c in names if not (r == 2 and c == "c2")]
        ups = {c: (w + rng.normal(size=dim)).astype(np.float32) for c in here}
        counts = {c: float(rng.integers(10, 100)) for c in here}
        total = sum(counts.values())
        for c in here:
            expected[names.index(c)] += counts[c] / total * float(
                a @ (ups[c].astype(np.float64) - w.astype(np.float64)))
        feed.append((r, w.copy(), ups, counts))
        tracker.observe(r, w, ups, counts)
        w = sum(counts[c] / total * ups[c].astype(np.float64) for c in here).astype(
            np.float32)
    return tracker, feed, expected, utility


def test_tracker_values_an_additive_run_exactly_with_every_method() -> None:
    tracker, feed, expected, utility = _linear_run()
    rep = tracker.report()
    assert rep.clients == ["c0", "c1", "c2", "c3"] and list(rep.scores) == list(ALL)
    for m in ALL:
        np.testing.assert_allclose(rep.scores[m], expected, atol=1e-5, err_msg=m)
    # constant marginals: every round converges at once, and no spread seen is not no
    # spread, so each half-width is the rounds' floors for unseen orders combined
    # ((1 − 0.05^(1/10))·R_r each, R_r the round's largest marginal), not 0
    floors = [(1 - 0.05 ** 0.1) * max(abs(v) for v in e["exact"]) for e in rep.rounds]
    assert max(rep.halfwidth["gtg"]) <= 2.0 * math.sqrt(sum(f * f for f in floors))
    assert min(rep.halfwidth["gtg"]) >= math.sqrt(sum(f * f for f in floors[:1]))
    assert rep.unconverged == 0 and rep.permutations == 4 * 10 and rep.skipped == 0
    assert [e["round"] for e in rep.rounds] == [1, 2, 3, 4]
    assert rep.rounds[1]["clients"] == [0, 1, 3]  # c2 missed round 2
    assert len(rep.rounds[1]["exact"]) == 3
    assert rep.utility_initial == pytest.approx(utility(feed[0][1]), abs=1e-12)
    assert rep.gain == pytest.approx(sum(rep.scores["exact"]), abs=1e-9)
    assert rep.primary == "gtg" and rep.shares == pytest.approx(
        list(reward_shares(rep.scores["gtg"])))
    json.dumps(rep.to_dict())  # plain values only
    with pytest.raises(ValidationError, match="not clients"):
        tracker.observe(5, feed[0][1], {"stranger": feed[0][2]["c0"]}, {"stranger": 1.0})


def test_round_truncation_skips_rounds_with_little_gain() -> None:
    tracker, _, _, _ = _linear_run(methods=("gtg", "exact"), round_truncation=1e6)
    rep = tracker.report()
    assert rep.skipped == 4 and rep.permutations == 0 and rep.hoeffding is None
    np.testing.assert_array_equal(rep.scores["gtg"], 0.0)
    assert any(abs(v) > 1e-3 for v in rep.scores["exact"])


def test_tracker_state_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    tracker, feed, _, utility = _linear_run(rounds=2)
    state = tracker.get_state()
    save_checkpoint(tmp_path / "c.ckpt", {"contribution": state})
    restored_state = load_checkpoint(tmp_path / "c.ckpt")["contribution"]
    twice = wire.decode(wire.encode(state))
    fresh = ContributionTracker(tracker.config, tracker.clients, utility, feed[0][1], seed=3)
    fresh.set_state(restored_state)
    other = ContributionTracker(tracker.config, tracker.clients, utility, feed[0][1], seed=3)
    other.set_state(twice)

    def plain(report: Any) -> dict[str, Any]:
        out = report.to_dict()
        out.pop("seconds")
        return out

    assert plain(fresh.report()) == plain(tracker.report()) == plain(other.report())
    # and both go on as one: round 3 observed by the original and by the restored one
    rng = np.random.default_rng(9)
    w = feed[-1][1]
    ups = {c: (w + rng.normal(size=w.size)).astype(np.float32) for c in tracker.clients}
    counts = {c: 10.0 + k for k, c in enumerate(tracker.clients)}
    tracker.observe(3, w, ups, counts)
    fresh.observe(3, w, ups, counts)
    assert plain(fresh.report()) == plain(tracker.report())
    # a checkpoint without contribution, or valued otherwise, is refused
    blank = ContributionTracker(tracker.config, tracker.clients, utility, feed[0][1])
    with pytest.raises(ValidationError, match="holds no contribution valuation"):
        blank.set_state({})
    other_cfg = Contribution(tracker.config.validation, methods=("loo",))
    other = ContributionTracker(other_cfg, tracker.clients, utility, feed[0][1])
    with pytest.raises(ValidationError, match="other contribution settings"):
        other.set_state(restored_state)


def test_few_orders_favour_no_client_over_many_rounds() -> None:
    # 30 identical players, 10 orders a round (fewer than the players), 60 rounds: the
    # guided first positions must not go to the same low-index players every round
    n, rounds = 30, 60
    total = np.zeros(n)
    for r in range(rounds):
        est = permutation_shapley(_weight_game(np.ones(n), math.sqrt), n,
                                  rng=np.random.default_rng([3, r]), tolerance=1.0,
                                  min_permutations=10, max_permutations=10)
        total += est.values
    exact = math.sqrt(n) / n * rounds
    assert abs(total[:10].mean() - total[10:].mean()) < 0.05 * exact
    np.testing.assert_allclose(total.sum(), math.sqrt(n) * rounds, rtol=1e-9)


# =========================================================================== federations
@pytest.fixture(scope="module")
def digits() -> dict[str, Any]:
    data = load("digits")
    X, y = (data.X / 16).astype(np.float32), data.y
    idx = np.random.default_rng(0).permutation(len(y))
    val, train = idx[:300], idx[300:]
    return {"val": (X[val], y[val]),
            "parts": [(X[p], y[p]) for p in np.array_split(train[:1000], 5)]}


def _fit(digits: dict[str, Any], contribution: Contribution, *, clients: int = 4,
         parts: list[Any] | None = None, behaviour: dict[str, Any] | None = None,
         strategy: Any = None, seed: int = 1, epochs: int = 2,
         **kw: Any) -> FederatedModel:
    strategy = strategy or FedAvg(local_steps=2, batch_size=32, lr=0.2)
    fl = FederatedModel(SPEC, strategy, epochs=epochs, random_state=seed, contribution=contribution,
                        concurrency=None, **kw)
    return fl.fit(parts or digits["parts"][:clients], behaviour=behaviour)


@pytest.fixture(scope="module")
def loss_run(digits: dict[str, Any]) -> FederatedModel:
    """Five honest clients, every method, minus the validation loss (continuous)."""
    return _fit(digits, Contribution(digits["val"], methods=ALL, metric="loss",
                                     tolerance=1e-3, min_permutations=20,
                                     max_permutations=1000), clients=5)


@pytest.fixture(scope="module")
def rider_run(digits: dict[str, Any]) -> FederatedModel:
    """Four clients, client-3 a free-rider, validation accuracy, fixed weighting."""
    return _fit(digits, Contribution(digits["val"], methods=ALL, metric="accuracy"),
                behaviour={"client-3": FreeRider})


def test_gtg_lies_within_its_halfwidths_of_exact_shapley(loss_run: FederatedModel) -> None:
    rep = loss_run.contribution_
    assert rep is not None and len(rep.clients) == 5
    gtg, exact = np.array(rep.scores["gtg"]), np.array(rep.scores["exact"])
    hw = np.array(rep.halfwidth["gtg"])
    assert rep.unconverged == 0 and rep.permutations >= 20 * loss_run.aggregations_
    assert np.all(hw > 0) and np.all(hw <= 1e-3 * math.sqrt(loss_run.aggregations_) + 1e-12)
    assert np.all(np.abs(gtg - exact) <= K_HALFWIDTH * hw), (gtg - exact, hw)
    assert np.max(np.abs(gtg - exact)) <= rep.hoeffding  # the all-clients bound holds too
    # per round, too: each round's estimate against that round's exact values
    for entry in rep.rounds:
        assert entry["clients"] == [0, 1, 2, 3, 4]
        assert sum(entry["exact"]) == pytest.approx(entry["gain"], abs=1e-9)
    assert np.all(exact > 0)  # every honest client helped
    assert rep.evaluations >= loss_run.aggregations_ * 32  # every coalition, every round


def test_efficiency_under_a_continuous_utility(loss_run: FederatedModel,
                                               digits: dict[str, Any]) -> None:
    rep = loss_run.contribution_
    assert rep is not None
    assert sum(rep.scores["exact"]) == pytest.approx(rep.gain, abs=1e-9)
    assert sum(rep.scores["gtg"]) == pytest.approx(rep.gain, abs=1e-9)
    # the reported end points are the reconstructed w_N of the last round and the
    # initial model; the aggregator's float64 mean and the float32 reconstruction of
    # the same model differ in the last bits, which the float32 loss can show (~1e-7)
    utility = ServerValidation(SPEC, *digits["val"], metric="loss")
    assert rep.utility_initial == utility(SPEC.initial_params(1))
    assert rep.utility_final == pytest.approx(utility(loss_run.params_), abs=1e-5)
    assert rep.gain == pytest.approx(rep.utility_final - rep.utility_initial, abs=1e-5)
    assert sum(rep.scores["or"]) == pytest.approx(rep.utility_final - rep.utility_initial,
                                                  abs=1e-5)
    assert rep.gain > 0.05  # the run learned: the checks above are not vacuous


def test_efficiency_exact_gtg_and_or_sum_to_the_gain(rider_run: FederatedModel,
                                                     digits: dict[str, Any]) -> None:
    rep = rider_run.contribution_
    assert rep is not None
    utility = ServerValidation(SPEC, *digits["val"])
    assert rep.utility_initial == pytest.approx(utility(SPEC.initial_params(1)), abs=1e-12)
    assert rep.utility_final == pytest.approx(utility(rider_run.params_), abs=1e-12)
    change = rep.utility_final - rep.utility_initial
    assert change > 0.1
    assert rep.gain == pytest.approx(change, abs=1e-9)
    for m in ("exact", "gtg", "or"):
        assert sum(rep.scores[m]) == pytest.approx(change, abs=1e-9), m
    assert rep.gain == pytest.approx(sum(e["gain"] for e in rep.rounds), abs=1e-12)
    # leave-one-out is not efficient: it is checked against its definition instead
    assert len(rep.rounds) == rider_run.aggregations_
    for e in rep.rounds:
        assert sum(e["gtg"]) == pytest.approx(e["gain"], abs=1e-9)


def test_free_rider_is_a_null_player_under_fixed_weighting(
        rider_run: FederatedModel) -> None:
    rep = rider_run.contribution_
    assert rep is not None and rep.clients[2] == "client-3"
    assert rep.settings["weighting"] == "fixed"
    for m in ALL:
        assert abs(rep.scores[m][2]) <= 1e-12, (m, rep.scores[m])
        assert all(abs(rep.scores[m][k]) > 1e-3 for k in (0, 1, 3)), (m, rep.scores[m])
    for e in rep.rounds:
        assert all(abs(e[m][2]) <= 1e-12 for m in ("gtg", "exact", "loo"))
    assert rep.halfwidth["gtg"][2] <= 1e-12
    assert rep.shares[2] == 0.0 and sum(rep.shares) == pytest.approx(1.0)
    assert rep.primary == "gtg"


def test_a_free_riders_missing_loss_is_warned_once_per_run(
        digits: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    import logging

    with caplog.at_level(logging.DEBUG, logger="islands.hfl.protocol"):
        fl = _fit(digits, Contribution(digits["val"], methods=("loo",)),
                  behaviour={"client-3": FreeRider})
    said = [r for r in caplog.records if "reported a loss of nan" in r.getMessage()]
    assert fl.aggregations_ >= 3 and len(said) == fl.aggregations_  # every round, once
    assert [r.levelno for r in said] == [logging.WARNING] + [logging.DEBUG] * (len(said) - 1)
    assert all("'client-3'" in r.getMessage() for r in said)


def test_free_rider_is_not_null_under_renormalised_weighting(
        digits: dict[str, Any]) -> None:
    # documented behaviour: FedAvg over a coalition alone lets a zero update dilute the
    # others' step, so the free-rider changes coalition models and gets a nonzero score
    fl = _fit(digits, Contribution(digits["val"], methods=("exact", "gtg", "or"),
                                   weighting="renormalised"),
              behaviour={"client-3": FreeRider})
    rep = fl.contribution_
    assert rep is not None and rep.settings["weighting"] == "renormalised"
    for m in ("exact", "gtg", "or"):
        assert abs(rep.scores[m][2]) > 1e-3, (m, rep.scores[m])
    # still efficient
    assert sum(rep.scores["exact"]) == pytest.approx(rep.gain, abs=1e-9)


def test_free_rider_is_a_null_player_under_a_continuous_utility(
        digits: dict[str, Any]) -> None:
    fl = _fit(digits, Contribution(digits["val"], methods=ALL, metric="loss"),
              behaviour={"client-3": FreeRider})
    rep = fl.contribution_
    assert rep is not None
    assert abs(rep.scores["or"][2]) <= 1e-12  # OR carries deltas: exactly null already
    for m in ("gtg", "exact", "loo"):
        assert abs(rep.scores[m][2]) <= 1e-12, (m, rep.scores[m])
    assert rep.shares[2] == 0.0


def test_duplicated_client_scores_as_its_twin(digits: dict[str, Any]) -> None:
    # full batch, no momentum, no local evaluation split: a client holding exactly the
    # rows of client-1 computes the same update every round
    parts = [*digits["parts"][:3], digits["parts"][0]]
    strategy = FedAvg(local_steps=2, batch_size=None, lr=0.5, momentum=0.0)
    fl = _fit(digits, Contribution(digits["val"], methods=ALL, metric="loss",
                                   tolerance=1e-3, min_permutations=20),
              parts=parts, strategy=strategy, epochs=4, seed=0, eval_fraction=0.0)
    rep = fl.contribution_
    assert rep is not None and fl.aggregations_ == 4
    # the twins' uploads are identical; their coalition models are float32 sums whose
    # rounding may depend on the rows' positions (FMA order), which the float32 loss can
    # show at ~2e-7: 1e-6 is tight next to the 1e-4 differences between distinct clients
    for m in ("exact", "or", "loo"):
        s = rep.scores[m]
        assert abs(s[0] - s[3]) <= 1e-6, (m, s)
        assert abs(s[0] - s[1]) > 1e-4, (m, s)  # the others differ: not all alike
    gtg, exact, hw = (np.array(rep.scores["gtg"]), np.array(rep.scores["exact"]),
                      np.array(rep.halfwidth["gtg"]))
    assert np.all(np.abs(gtg - exact) <= K_HALFWIDTH * hw)
    assert abs(gtg[0] - gtg[3]) <= K_HALFWIDTH * (hw[0] + hw[3])
    for e in rep.rounds:
        assert abs(e["exact"][0] - e["exact"][3]) <= 1e-6


def test_client_validation_gives_efficient_exact_scores(digits: dict[str, Any]) -> None:
    fl = _fit(digits, Contribution("clients", methods=("exact", "loo")), clients=3,
              eval_fraction=0.2)
    rep = fl.contribution_
    assert rep is not None and rep.settings["validation"] == "clients"
    assert sum(rep.scores["exact"]) == pytest.approx(rep.gain, abs=1e-9)
    assert rep.gain == pytest.approx(rep.utility_final - rep.utility_initial, abs=1e-9)
    assert rep.gain > 0.1 and 0.0 <= rep.utility_final <= 1.0
    assert rep.primary == "exact" and rep.halfwidth == {} and rep.hoeffding is None
    with pytest.raises(ValidationError) as exc:
        _fit(digits, Contribution("clients"), clients=2, eval_fraction=0.0)
    _assert_names(exc, "eval_fraction")


def test_contribution_refuses_secure_aggregation_before_training(
        digits: dict[str, Any]) -> None:
    rounds: list[Any] = []
    fl = FederatedModel(SPEC, FedAvg(batch_size=32, aggregator=SecureAggregation()),
                        contribution=Contribution(digits["val"]),
                        callback=lambda rec, ep: rounds.append(rec))
    with pytest.raises(IncompatibleAggregatorError, match="secure aggregation"):
        fl.fit(digits["parts"][:3])
    assert rounds == [] and not hasattr(fl, "params_")
    with pytest.raises(ValidationError) as exc:
        FederatedModel(SPEC, contribution={"methods": "gtg"}).fit(digits["parts"][:2])
    _assert_names(exc, "contribution")
    with pytest.raises(ValidationError) as exc:
        FederatedModel(SPEC).fit(digits["parts"][:2], behaviour={"client-9": FreeRider})
    _assert_names(exc, "behaviour")


def test_client_dp_run_is_valued_from_the_noised_updates(digits: dict[str, Any]) -> None:
    strategy = FedAvg(local_steps=2, batch_size=32, lr=0.2,
                      aggregator=ClientDP(MeanAggregator(), clip=5.0, noise_multiplier=0.05))
    # accuracy: the telescoping identity below is exact on it (on the loss it holds to
    # float32 rounding of the rebuilt aggregate)
    fl = _fit(digits, Contribution(digits["val"], methods=("exact", "or"), metric="accuracy"),
              clients=3, strategy=strategy, epochs=1)
    rep = fl.contribution_
    assert rep is not None and fl.privacy_ is not None
    change = rep.utility_final - rep.utility_initial
    assert sum(rep.scores["exact"]) == pytest.approx(change, abs=1e-9)
    assert sum(rep.scores["or"]) == pytest.approx(change, abs=1e-9)


def test_resumed_run_reports_the_contribution_of_an_uninterrupted_one(
        digits: dict[str, Any], tmp_path: Path) -> None:
    parts = [(X[:120], y[:120]) for X, y in digits["parts"][:3]]

    def model(**kw: Any) -> FederatedModel:
        return FederatedModel(SPEC, FedAvg(local_steps=1, batch_size=30, lr=0.2), epochs=1,
                              random_state=2, contribution=Contribution(
                                  digits["val"], methods=ALL, metric="loss",
                                  min_permutations=5, max_permutations=20), **kw)

    whole = model().fit(parts)
    assert whole.aggregations_ == 3

    class Killed(Exception):
        pass

    def kill_at_round_3(record: Any, epoch: Any) -> None:
        if record.round == 3:  # runs before round 3's checkpoint: round 2 is the last
            raise Killed

    with pytest.raises(ProtocolError, match="Killed"):
        model(checkpoint=tmp_path, callback=kill_at_round_3).fit(parts)
    saved = load_checkpoint(tmp_path / "server.ckpt")
    assert saved["round"] == 2 and len(saved["contribution"]["rounds"]) == 2
    resumed = model(checkpoint=tmp_path, resume=True).fit(parts)
    np.testing.assert_array_equal(resumed.params_, whole.params_)
    a, b = whole.contribution_.to_dict(), resumed.contribution_.to_dict()  # type: ignore[union-attr]
    a.pop("seconds"), b.pop("seconds")
    assert a == b


# ============================================================================= retrain
def test_retrain_exact_and_loo_on_a_known_game() -> None:
    w = np.array([0.4, 1.0, 2.2, 0.7])
    game = _weight_game(w, lambda x: math.log1p(x) + 0.2)
    seen: list[tuple[int, ...]] = []
    progress: list[tuple[int, int]] = []

    def train(members_: tuple[int, ...]) -> float:
        seen.append(members_)
        return game(sum(1 << k for k in members_))

    res = retrain_contributions(train, 4, method="exact",
                                progress=lambda d, t: progress.append((d, t)))
    assert res.method == "exact" and res.trainings == 2**4 - 1
    assert len(seen) == 16 and len(set(seen)) == 16 and seen[0] == ()
    assert all(list(s) == sorted(s) for s in seen)
    assert progress == [(d, 16) for d in range(1, 17)]
    np.testing.assert_allclose(res.scores, exact_shapley(game, 4), atol=1e-12)
    assert res.value([2, 0]) == game(0b101) and res.value([]) == game(0)
    assert res.values["0,1,2,3"] == game(0b1111) and res.seconds >= 0

    seen.clear()
    progress.clear()
    loo = retrain_contributions(train, 4, method="loo",
                                progress=lambda d, t: progress.append((d, t)))
    assert loo.method == "loo" and loo.trainings == 4 + 1
    # leave-one-out never needs the empty coalition: it is not trained nor scored
    assert set(seen) == {(0, 1, 2, 3), (1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2)}
    assert progress[-1] == (len(seen), len(seen))
    np.testing.assert_allclose(loo.scores, leave_one_out(game, 4), atol=1e-12)


def test_retrain_validates_its_inputs() -> None:
    with pytest.raises(ValidationError) as exc:
        retrain_contributions(lambda s: 0.0, 3, method="gtg")
    _assert_names(exc, "method")
    with pytest.raises(ValidationError) as exc:
        retrain_contributions(lambda s: 0.0, MAX_EXACT_PLAYERS + 1)
    _assert_names(exc, "n")
    with pytest.raises(ValidationError) as exc:
        retrain_contributions(lambda s: 0.0, 0)
    _assert_names(exc, "n")
    with pytest.raises(ValidationError, match="utility nan"):
        retrain_contributions(lambda s: math.nan if len(s) == 2 else 0.0, 3)
    with pytest.raises(ValidationError, match="2 names for 3 parts"):
        coalition_trainer(lambda: None, [(0, 0)] * 3, lambda w: 0.0, names=["a", "b"])


def test_coalition_trainer_trains_coalitions_of_a_federation(
        digits: dict[str, Any]) -> None:
    parts = [(X[:100], y[:100]) for X, y in digits["parts"][:3]]
    utility = ServerValidation(SPEC, *digits["val"], metric="loss")

    def make() -> FederatedModel:
        return FederatedModel(SPEC, FedAvg(local_steps=1, batch_size=25, lr=0.3), epochs=1,
                              random_state=4)

    train = coalition_trainer(make, parts, utility, behaviour={"client-3": FreeRider})
    v0 = train(())
    assert v0 == utility(SPEC.initial_params(4))
    # a coalition of the free-rider alone trains nothing: the initial model
    assert train((2,)) == v0
    # the grand coalition is an ordinary run of the three clients
    whole = make().fit(parts, behaviour={"client-3": FreeRider})
    assert train((0, 1, 2)) == utility(whole.params_)
    assert train((0, 1)) > v0 + 0.05  # the honest ones do learn
    res = retrain_contributions(train, 3, method="loo")
    assert res.trainings == 4 and "" not in res.values
    # retraining is deterministic: the scores are the definition, coalition by coalition
    full = train((0, 1, 2))
    assert res.value((0, 1, 2)) == full
    assert res.scores == [full - train((1, 2)), full - train((0, 2)), full - train((0, 1))]
    # unlike the fixed reconstruction game, retraining does not make the free-rider a
    # null player: it takes aggregation weight, so its removal changes the model
    assert res.scores[2] != 0.0


# ============================================================================== report
def test_report_rows_and_text_bars(loss_run: FederatedModel) -> None:
    rep = loss_run.contribution_
    assert rep is not None
    data = ContributionReport.from_dict(json.loads(json.dumps(rep.to_dict())))  # as read back
    assert data == rep
    headers, rows = contribution_rows(data)
    assert headers == ["client", "GTG-Shapley", "exact Shapley (per round)",
                       "one-round reconstruction", "leave-one-out", "share"]
    assert [r[0] for r in rows] == rep.clients
    for k, row in enumerate(rows):
        assert row[1] == f"{rep.scores['gtg'][k]:+.4f} ± {rep.halfwidth['gtg'][k]:.4f}"
        assert row[2] == f"{rep.scores['exact'][k]:+.4f}" and "±" not in row[3]
        assert row[5] == f"{100 * rep.shares[k]:.1f}%"
    lines = text_bars(data, width=20)
    assert len(lines) == 5 and all("│" in ln for ln in lines)
    top = int(np.argmax(np.abs(rep.scores["gtg"])))
    assert lines[top].count("█") == 10

    signed = ContributionReport.from_dict({
        "clients": ["a", "bb", "c"], "scores": {"exact": [0.2, -0.1, 0.0]},
        "primary": "exact", "shares": [1.0, 0.0, 0.0], "utility_initial": 0.0,
        "utility_final": 0.1, "gain": 0.1, "evaluations": 8, "seconds": 0.0})
    bars = text_bars(signed, width=20)
    left, right = zip(*(ln.split("│") for ln in bars), strict=True)
    assert right[0].count("█") == 10 and left[0].count("█") == 0
    assert left[1].count("█") == 5 and right[1].count("█") == 0
    assert bars[1].endswith("-0.1000") and bars[2].count("█") == 0
    assert [ln.index("│") for ln in bars] == [bars[0].index("│")] * 3  # aligned names


def test_plot_and_load_contribution(loss_run: FederatedModel, tmp_path: Path) -> None:
    rep = loss_run.contribution_
    assert rep is not None
    data = rep.to_dict()
    out = plot_contribution(rep, tmp_path / "contribution.png")
    assert Path(out).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(DataNotFoundError, match=r"results\.json"):
        load_contribution(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"accuracy": 0.9}))
    with pytest.raises(ValidationError, match="no contribution"):
        load_contribution(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"contribution": data}))
    loaded = load_contribution(tmp_path)
    assert loaded == rep and loaded.to_dict() == data
    assert contribution_rows(loaded) == contribution_rows(rep)
    with pytest.raises(TypeError, match=r"ContributionReport: read \.scores"):
        loaded["scores"]  # it was a dict: the message says what changed
    incomplete = {k: v for k, v in data.items() if k != "seconds"}
    (tmp_path / "results.json").write_text(json.dumps({"contribution": incomplete}))
    with pytest.raises(ValidationError, match=r"results in .*results\.json are incomplete "
                                              r"\(missing \['seconds'\]\)"):
        load_contribution(tmp_path)



@pytest.mark.parametrize("weighting", ["fixed", "renormalised"])
def test_client_sampling_keeps_every_method_efficient(digits: dict[str, Any],
                                                      weighting: str) -> None:
    strategy = FedAvg(local_steps=2, batch_size=32, lr=0.2, fraction=0.6, seed=3)
    fl = _fit(digits, Contribution(digits["val"], methods=ALL, metric="loss",
                                   weighting=weighting), clients=5, strategy=strategy)
    rep = fl.contribution_
    assert rep is not None
    assert any(len(e["clients"]) < 5 for e in rep.rounds)  # rounds of 3 of the 5
    for m in ("gtg", "exact"):
        assert sum(rep.scores[m]) == pytest.approx(rep.gain, abs=1e-9)
    assert sum(rep.scores["or"]) == pytest.approx(rep.utility_final - rep.utility_initial,
                                                  abs=1e-9)
    for e in rep.rounds:  # a client that did not take part gets nothing that round
        assert len(e["exact"]) == len(e["clients"])
