"""Fixed-point ring encoding and additive secret sharing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from islands.crypto import (
    additive_shares,
    decode_fixed,
    encode_fixed,
    max_abs_value,
    random_ring_elements,
    reconstruct,
)
from islands.crypto.sharing import share_among
from islands.errors import ValidationError

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, st.integers(0, 20), elements=finite), st.integers(8, 40))
def test_fixed_point_round_trip_within_half_a_step(x: np.ndarray, f: int) -> None:
    out = decode_fixed(encode_fixed(x, frac_bits=f), frac_bits=f)
    # rounding to the nearest multiple of 2^-f, plus float64 representation of the scaled value
    atol = 2.0 ** -(f + 1) + 1e-9 * np.abs(x).max(initial=0)
    np.testing.assert_allclose(out, x, rtol=0, atol=atol)


@settings(max_examples=200, deadline=None)
@given(st.lists(hnp.arrays(np.float64, 5, elements=finite), min_size=2, max_size=6))
def test_sums_of_encodings_decode_to_sums(xs: list[np.ndarray]) -> None:
    f = 24
    total = reconstruct([encode_fixed(x, frac_bits=f, headroom=len(xs)) for x in xs])
    np.testing.assert_allclose(decode_fixed(total, frac_bits=f), np.sum(xs, axis=0),
                               rtol=0, atol=len(xs) * 2.0 ** -(f + 1) + 1e-9)


def test_negative_values_wrap_as_twos_complement() -> None:
    enc = encode_fixed([-1.0], frac_bits=0)
    assert enc[0] == np.uint64(2**64 - 1)


@pytest.mark.parametrize("bad", [[np.nan], [np.inf], [max_abs_value(24, 3) * 1.000001]])
def test_encode_rejects_non_finite_and_overflowing_values(bad: list[float]) -> None:
    with pytest.raises(ValidationError):
        encode_fixed(bad, frac_bits=24, headroom=3)


@pytest.mark.parametrize("kwargs", [{"frac_bits": 60}, {"frac_bits": -1}, {"headroom": 0}])
def test_encode_rejects_bad_parameters(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValidationError, match="parameter of encode_fixed"):
        encode_fixed([1.0], **kwargs)


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.uint64, st.integers(0, 30)), st.integers(2, 7))
def test_shares_reconstruct_the_secret(secret: np.ndarray, n: int) -> None:
    shares = additive_shares(secret, n)
    assert len(shares) == n
    np.testing.assert_array_equal(reconstruct(shares), secret)


def test_shares_do_not_reveal_the_secret() -> None:
    # Each single share is uniform on Z_2^64 whatever the secret: the top bit of share 0
    # over many sharings of the same all-zero secret must be a fair coin.
    secret = np.zeros(20_000, dtype=np.uint64)
    share = additive_shares(secret, 3)[0]
    top = (share >> np.uint64(63)).astype(np.float64)
    assert abs(top.mean() - 0.5) < 0.02  # 0.02 is > 5 standard errors (0.0035)
    assert not np.array_equal(additive_shares(secret, 3)[0], share)


def test_random_ring_elements_are_fresh_and_shaped() -> None:
    a, b = random_ring_elements((3, 4)), random_ring_elements((3, 4))
    assert a.shape == (3, 4) and a.dtype == np.uint64 and not np.array_equal(a, b)


def test_sharing_rejects_bad_input() -> None:
    with pytest.raises(ValidationError, match="'n' parameter"):
        additive_shares(np.zeros(2, dtype=np.uint64), 1)
    with pytest.raises(ValidationError, match="uint64"):
        additive_shares(np.zeros(2), 2)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="shape"):
        reconstruct([np.zeros(2, dtype=np.uint64), np.zeros(3, dtype=np.uint64)])


def test_zero_dimensional_input_encodes_to_an_array() -> None:
    enc = encode_fixed(1.5)
    assert isinstance(enc, np.ndarray) and enc.shape == ()
    assert decode_fixed(enc) == 1.5


def test_bound_is_checked_after_rounding() -> None:
    # with 2048 parties and 52 fractional bits the bound is below 2^53: rounding up to it
    # must be refused, or the sum over all parties would wrap
    x = np.nextafter(max_abs_value(52, 2048), 0)
    with pytest.raises(ValidationError):
        encode_fixed([x], frac_bits=52, headroom=2048)


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.uint64, st.integers(0, 30)),
       st.lists(st.text(min_size=1, max_size=5), min_size=2, max_size=7, unique=True))
def test_share_among_deals_one_share_per_holder_that_sum_to_the_secret(
        secret: np.ndarray, names: list[str]) -> None:
    dealt = share_among(secret, names)
    assert list(dealt) == names
    assert all(s.dtype == np.uint64 and s.shape == secret.shape for s in dealt.values())
    np.testing.assert_array_equal(reconstruct(list(dealt.values())), secret)


def test_share_among_refuses_repeated_or_too_few_holders() -> None:
    secret = np.arange(3, dtype=np.uint64)
    with pytest.raises(ValidationError, match="distinct holders"):
        share_among(secret, ["a", "b", "a"])
    with pytest.raises(ValidationError, match="'n' parameter of additive_shares"):
        share_among(secret, ["a"])


def test_reconstruct_refuses_what_is_not_a_ring_element() -> None:
    with pytest.raises(ValidationError, match=r"uint64 of shape \(3,\); got float64\(3,\)"):
        reconstruct([np.zeros(3, np.uint64), np.zeros(3)])
