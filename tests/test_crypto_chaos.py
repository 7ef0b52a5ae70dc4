"""APFL's chaos permutation: key validation, bijection, determinism, exact aggregation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from islands.crypto.chaos import (
    ChaosKey,
    clear_permutation_cache,
    generate_chaos_key,
    logistic_sequence,
    permutation,
    permute,
    unpermute,
)
from islands.errors import ValidationError

KEY = ChaosKey(0.123456789, 3.987654321)


@pytest.mark.parametrize(
    ("x0", "lam", "name"),
    [
        (0.0, 3.9, "x0"),
        (1.0, 3.9, "x0"),
        (1.5, 3.9, "x0"),
        (-0.1, 3.9, "x0"),
        (math.nan, 3.9, "x0"),
        (True, 3.9, "x0"),
        ("0.3", 3.9, "x0"),
        (0.3, 3.5, "lam"),
        (0.3, 3.56994, "lam"),
        (0.3, 4.1, "lam"),
        (0.3, math.nan, "lam"),
        (0.3, math.inf, "lam"),
    ],
)
def test_key_validation_names_the_parameter(x0: Any, lam: Any, name: str) -> None:
    with pytest.raises(ValidationError, match=f"'{name}' parameter of ChaosKey"):
        ChaosKey(x0, lam)


def test_key_accepts_its_bounds_and_hides_its_values() -> None:
    ChaosKey(1e-300, 4)  # λ = 4 is allowed, ints are converted
    key = ChaosKey(np.float64(0.25), 3.56995)
    assert isinstance(key.x0, float) and key.lam == 3.56995
    for text in (repr(KEY), str(KEY), f"{KEY}"):
        assert "0.1234" not in text and "3.98" not in text
    assert ChaosKey.from_bytes(KEY.to_bytes()) == KEY and len(KEY.to_bytes()) == 16
    with pytest.raises(ValidationError, match="'data'"):
        ChaosKey.from_bytes(b"short")
    with pytest.raises(ValidationError, match="'lam'"):
        ChaosKey.from_bytes(ChaosKey(0.5, 4.0).to_bytes()[:8] + np.float64(5.0).tobytes())


def test_logistic_sequence_follows_the_recurrence_without_x0() -> None:
    seq = logistic_sequence(KEY, 21)
    x, expected = KEY.x0, []
    for _ in range(21):
        x = KEY.lam * x * (1.0 - x)
        expected.append(x)
    assert seq.dtype == np.float64 and seq.tolist() == expected  # bit-exact
    assert logistic_sequence(KEY, 0).shape == (0,)
    with pytest.raises(ValidationError, match="'n'"):
        logistic_sequence(KEY, -1)
    with pytest.raises(ValidationError, match="'key'"):
        logistic_sequence((0.3, 3.9), 5)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [1, 2, 17, 500, 54_000])
def test_permutation_is_a_bijection_and_the_sort_of_the_sequence(n: int) -> None:
    idx = permutation(KEY, n)
    assert idx.dtype == np.int64 and idx.shape == (n,)
    assert np.array_equal(np.sort(idx), np.arange(n))
    assert np.array_equal(idx, np.argsort(logistic_sequence(KEY, n), kind="stable"))


def test_permutation_is_deterministic_and_key_dependent() -> None:
    clear_permutation_cache()
    first = permutation(KEY, 2000)
    clear_permutation_cache()
    again = permutation(ChaosKey(0.123456789, 3.987654321), 2000)
    assert np.array_equal(first, again)
    assert not first.flags.writeable  # shared through the cache: read-only
    others = [permutation(generate_chaos_key(), 2000) for _ in range(3)]
    others.append(permutation(ChaosKey(0.123456789 + 1e-12, 3.987654321), 2000))
    for idx in others:
        assert not np.array_equal(idx, first)
        assert np.mean(idx == first) < 0.05


def test_generated_keys_are_fresh_and_usable() -> None:
    a, b = generate_chaos_key(), generate_chaos_key()
    assert a != b
    for key in (a, b):
        assert 0.0 < key.x0 < 1.0 and 3.57 < key.lam <= 4.0
        assert permutation(key, 65_536).shape == (65_536,)


@pytest.mark.parametrize(
    ("key", "n"),
    [
        (ChaosKey(0.5, 4.0), 2),  # 1.0, then 0.0 forever
        (ChaosKey(0.5, 4.0), 3),
        (ChaosKey(0.75, 4.0), 2),  # fixed point
        (ChaosKey(0.3, 3.83), 54_000),  # period-3 window: the float orbit cycles exactly
    ],
)
def test_degenerate_orbits_ask_for_another_key(key: ChaosKey, n: int) -> None:
    with pytest.raises(ValidationError, match="choose another key"):
        permutation(key, n)


def test_permute_round_trips() -> None:
    rng = np.random.default_rng(7)
    idx = permutation(KEY, 300)
    for values in (rng.standard_normal(300).astype(np.float32), rng.integers(0, 9, (300, 4))):
        scrambled = permute(values, idx)
        assert scrambled.dtype == values.dtype and not np.array_equal(scrambled, values)
        assert np.array_equal(scrambled, values[idx])
        assert np.array_equal(unpermute(scrambled, idx), values)
        assert np.array_equal(permute(unpermute(values, idx), idx), values)


def test_permute_checks_the_index() -> None:
    values = np.arange(5.0)
    for bad in ([0, 1, 2, 3], [0, 1, 2, 3, 3], [0, 1, 2, 3, 5], [-1, 1, 2, 3, 4], [0.0] * 5):
        for fn in (permute, unpermute):
            with pytest.raises(ValidationError, match="'index'"):
                fn(values, bad)
    with pytest.raises(ValidationError, match="'values'"):
        permute(3.0, [0])


def test_weighted_mean_commutes_with_the_permutation_exactly() -> None:
    rng = np.random.default_rng(11)
    n = 54_000
    ws = [rng.standard_normal(n) for _ in range(3)]
    p = [0.4, 0.35, 0.25]
    idx = permutation(KEY, n)
    plain = p[0] * ws[0] + p[1] * ws[1] + p[2] * ws[2]
    scrambled = [permute(w, idx) for w in ws]
    aggregated = p[0] * scrambled[0] + p[1] * scrambled[1] + p[2] * scrambled[2]
    assert np.array_equal(unpermute(aggregated, idx), plain)  # exact in float64
