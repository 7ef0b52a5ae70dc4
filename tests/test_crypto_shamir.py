"""t-of-n Shamir secret sharing over GF(2^31 − 1).

Arithmetic is checked against direct big-integer evaluation; statistical checks use
tolerances a correct implementation fails with negligible probability.
"""

from __future__ import annotations

import random
import secrets

import numpy as np
import pytest

from islands.crypto import shamir
from islands.crypto.shamir import (
    PRIME,
    Share,
    chunk_count,
    combine,
    combine_many,
    lagrange_at_zero,
    split,
)
from islands.errors import ValidationError


def _combine_or_none(shares: list[Share], length: int) -> bytes | None:
    """Combine, mapping the 'not a secret' detection of too few shares to None."""
    try:
        return combine(shares, length)
    except ValidationError as err:
        assert "not a" in str(err)
        return None


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(
    ("n", "t"), [(1, 1), (5, 1), (5, 5), (7, 3), (40, 17), (300, 257), (600, 520)]
)
def test_any_t_shares_give_the_secret_back(n: int, t: int) -> None:
    rng = random.Random(n * 1000 + t)
    secret = secrets.token_bytes(32)
    shares = split(secret, n, t)
    assert [s.x for s in shares] == list(range(1, n + 1))
    assert all(s.y.dtype == np.uint32 and s.y.shape == (chunk_count(32),) for s in shares)
    for _ in range(3):
        subset = rng.sample(shares, t)
        assert combine(subset, 32) == secret
    assert combine(shares, 32) == secret  # more than t shares work too


@pytest.mark.parametrize("length", [1, 3, 4, 15, 16, 30, 31, 32, 33, 64, 257])
def test_secret_lengths_round_trip(length: int) -> None:
    for secret in (bytes(length), b"\xff" * length, secrets.token_bytes(length)):
        shares = split(secret, 6, 4)
        assert shares[0].y.size == -(-8 * length // 30)
        assert combine(shares[2:], length) == secret


def test_threshold_one_hands_out_the_chunks_themselves() -> None:
    secret = secrets.token_bytes(32)
    shares = split(secret, 4, 1)
    assert all(np.array_equal(s.y, shares[0].y) for s in shares)
    assert combine([shares[3]], 32) == secret


def test_fewer_than_t_shares_do_not_give_the_secret() -> None:
    for n, t in [(5, 2), (9, 5), (300, 251)]:
        secret = secrets.token_bytes(32)
        shares = split(secret, n, t)
        for subset in (shares[: t - 1], shares[-(t - 1) :]):
            assert _combine_or_none(subset, 32) != secret


def test_too_few_shares_are_mostly_detected_but_a_short_secret_can_slip_through() -> None:
    # a 1-byte secret is one chunk: a wrong interpolation fits in 8 bits with
    # probability 2^8 / p, so almost always detected; the API promises nothing more
    outcomes = [_combine_or_none(split(b"\x07", 3, 3)[:2], 1) for _ in range(200)]
    assert sum(out is None for out in outcomes) >= 190


# --------------------------------------------------------------------------- arithmetic


def _poly_at(coefficients: np.ndarray, x: int) -> int:
    return sum(int(a) * pow(x, k, PRIME) for k, a in enumerate(coefficients)) % PRIME


@pytest.mark.parametrize(
    ("t", "n"), [(1, 3), (2, 5), (255, 300), (256, 300), (257, 300), (700, 750)]
)
def test_evaluation_matches_big_integer_polynomials(t: int, n: int) -> None:
    rng = np.random.default_rng(t)
    coefficients = rng.integers(0, PRIME, size=(t, 3), dtype=np.int64)
    coefficients[:, 0] = PRIME - 1  # the largest values stress the exactness bounds
    values = shamir._evaluate(coefficients, n)
    assert values.shape == (n, 3)
    for x in (1, 2, n // 2, n):
        for j in range(3):
            assert int(values[x - 1, j]) == _poly_at(coefficients[:, j], x)


def test_lagrange_coefficients_match_a_big_integer_reference() -> None:
    rng = random.Random(5)
    for k in (1, 2, 3, 50, 300):
        xs = rng.sample(range(1, PRIME), k)
        expected = []
        for i, xi in enumerate(xs):
            num = den = 1
            for j, xj in enumerate(xs):
                if j != i:
                    num = num * xj % PRIME
                    den = den * (xj - xi) % PRIME
            expected.append(num * pow(den, -1, PRIME) % PRIME)
        assert lagrange_at_zero(xs).tolist() == expected
        assert lagrange_at_zero(xs).dtype == np.int64


def test_precomputed_coefficients_are_reused() -> None:
    secrets_ = [secrets.token_bytes(32) for _ in range(5)]
    splits = [split(s, 20, 8) for s in secrets_]
    holders = [3, 17, 5, 8, 11, 20, 1, 9]
    lam = lagrange_at_zero(holders)
    for secret, shares in zip(secrets_, splits, strict=True):
        chosen = [shares[x - 1] for x in holders]
        assert combine(chosen, 32, coefficients=lam) == secret


def test_combine_many_equals_combine_per_set() -> None:
    holders = random.Random(1).sample(range(1, 51), 30)
    secrets_ = [secrets.token_bytes(32) for _ in range(12)]
    sets = [[shares[x - 1] for x in holders] for shares in (split(s, 50, 30) for s in secrets_)]
    sets[4] = sets[4][::-1]  # same points, another order: matched by point
    out = combine_many(sets, 32)
    assert out == secrets_
    assert out == [combine(s, 32) for s in sets]


# --------------------------------------------------------------------------- randomness


def test_a_single_share_is_uniform_whatever_the_secret() -> None:
    # with t = 2 one share is one uniform field element per chunk; bin the top 4 of its
    # 31 bits (16 bins, 15 degrees of freedom: P(chi2 > 60) ≈ 2e-7)
    for secret in (bytes(32), b"\xff" * 32):
        values = np.concatenate([split(secret, 3, 2)[1].y for _ in range(2000)])
        counts = np.bincount(values >> 27, minlength=16)
        expected = values.size / 16
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < 60, (secret[:1], counts)


def test_rejection_sampling_redraws_the_value_p(monkeypatch: pytest.MonkeyPatch) -> None:
    real = secrets.token_bytes
    draws: list[int] = []

    def fake(count: int) -> bytes:
        draws.append(count)
        if len(draws) == 1:  # first draw: every word is 0xFFFFFFFF -> 31 bits = p
            return b"\xff" * count
        return real(count)

    monkeypatch.setattr(shamir._secrets, "token_bytes", fake)
    out = shamir._random_field_elements(10)
    assert draws[0] == 40 and sum(draws[1:]) == 40
    assert out.dtype == np.int64 and int(out.max()) < PRIME and int(out.min()) >= 0


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"secret": b"", "n": 3, "t": 2}, "secret"),
        ({"secret": "text", "n": 3, "t": 2}, "secret"),
        ({"secret": b"k", "n": 0, "t": 1}, "n"),
        ({"secret": b"k", "n": PRIME, "t": 1}, "n"),
        ({"secret": b"k", "n": True, "t": 1}, "n"),
        ({"secret": b"k", "n": 3.0, "t": 1}, "n"),
        ({"secret": b"k", "n": 3, "t": 0}, "t"),
        ({"secret": b"k", "n": 3, "t": 4}, "t"),
    ],
)
def test_split_validation_names_the_parameter(kwargs: dict, name: str) -> None:
    with pytest.raises(ValidationError, match=f"'{name}' parameter of split"):
        split(**kwargs)


def test_split_errors_do_not_print_the_secret() -> None:
    with pytest.raises(ValidationError) as err:
        split(bytearray(b"top secret"), 3, 2)  # type: ignore[arg-type]
    assert "top secret" not in str(err.value)


@pytest.mark.parametrize("xs", [[], [0], [PRIME], [1, -2], [1.0], [True], [1, 2, 1], 5])
def test_lagrange_rejects_bad_points(xs: object) -> None:
    with pytest.raises(ValidationError, match="'xs' parameter of lagrange_at_zero"):
        lagrange_at_zero(xs)  # type: ignore[arg-type]


def test_combine_rejects_bad_share_sets() -> None:
    shares = split(secrets.token_bytes(32), 5, 3)
    with pytest.raises(ValidationError, match=r"'shares' parameter of combine.*distinct"):
        combine([shares[0], shares[1], shares[0]], 32)
    with pytest.raises(ValidationError, match="'shares' parameter of combine"):
        combine([], 32)
    with pytest.raises(ValidationError, match="'shares' parameter of combine"):
        combine([shares[0], (2, shares[1].y)], 32)  # type: ignore[list-item]
    with pytest.raises(
        ValidationError, match=r"'shares' parameter of combine.*5 chunks.*16-byte.*9"
    ):
        combine(shares[:3], 16)
    with pytest.raises(ValidationError, match="'length' parameter of combine"):
        combine(shares[:3], 0)
    forged = Share(9, np.full(9, PRIME, dtype=np.uint32))  # uint32 is range-checked late
    with pytest.raises(ValidationError, match=r"'shares' parameter of combine.*below"):
        combine([shares[0], forged], 32)


def test_combine_checks_the_coefficients_it_is_given() -> None:
    secret = secrets.token_bytes(32)
    shares = split(secret, 6, 3)[:3]
    lam = lagrange_at_zero([s.x for s in shares])
    assert combine(shares, 32, coefficients=lam) == secret
    for bad in (
        lam[::-1].copy(),
        lam[:2],
        lagrange_at_zero([1, 2, 4]),
        lam.astype(float),
        lam + PRIME,
    ):
        with pytest.raises(ValidationError, match="'coefficients' parameter of combine"):
            combine(shares, 32, coefficients=bad)


def test_combine_many_rejects_sets_at_other_points() -> None:
    a = split(secrets.token_bytes(32), 6, 3)
    b = split(secrets.token_bytes(32), 6, 3)
    with pytest.raises(ValidationError, match=r"'share_sets\[1\]' parameter of combine_many"):
        combine_many([a[:3], b[1:4]], 32)
    with pytest.raises(ValidationError, match=r"'share_sets\[0\]' parameter of combine_many"):
        combine_many([[]], 32)
    with pytest.raises(ValidationError, match="'share_sets' parameter of combine_many"):
        combine_many([], 32)
    with pytest.raises(ValidationError, match=r"combine_many \(share_sets\[1\]\)"):
        combine_many([a[:3], [a[0], a[1], b[2]]], 32)  # mixed splits: wrong value, caught


def test_share_checks_and_converts_its_fields() -> None:
    share = Share(np.int64(3), [1, 2, PRIME - 1])  # type: ignore[arg-type]
    assert share.x == 3 and type(share.x) is int
    assert share.y.dtype == np.uint32 and share.y.tolist() == [1, 2, PRIME - 1]
    for x in (0, PRIME, -1, 1.5, True):
        with pytest.raises(ValidationError, match="'x' parameter of Share"):
            Share(x, np.zeros(3, dtype=np.uint32))  # type: ignore[arg-type]
    for y in ([], [[1, 2]], [PRIME], [-1], [0.5]):
        with pytest.raises(ValidationError, match="'y' parameter of Share"):
            Share(1, y)  # type: ignore[arg-type]


def test_share_equality_hash_and_a_repr_without_values() -> None:
    shares = split(b"\x01" * 32, 4, 2)
    copy = Share(shares[1].x, shares[1].y.copy())
    assert copy == shares[1] and hash(copy) == hash(shares[1])
    assert shares[1] != shares[2] and shares[1] != "share"
    assert repr(shares[1]) == "Share(x=2, chunks=9)"
    assert not shares[1].y.flags.writeable
