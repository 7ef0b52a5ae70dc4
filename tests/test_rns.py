"""The residue-number rings: exact products, masks and the wire format, for 3 and 9 primes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from islands.crypto import rns
from islands.crypto.rns import SS_RING, RnsRing
from islands.errors import ValidationError

RINGS = [pytest.param(rns.RnsRing(rns.PRIMES), id="3 primes"),
         pytest.param(SS_RING, id="9 primes")]
_int64 = st.integers(-(2**62), 2**62)


@pytest.mark.parametrize("ring", RINGS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_products_and_element_wise_arithmetic_equal_python_integers(ring: RnsRing,
                                                                    data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 6))
    p = data.draw(st.integers(1, 4))
    a = data.draw(st.lists(st.lists(_int64, min_size=p, max_size=p), min_size=n, max_size=n))
    v = data.draw(st.lists(_int64, min_size=n, max_size=n))
    c = data.draw(st.integers(-(2**200), 2**200))
    P = ring.modulus
    ra, rv = ring.encode_int(np.array(a, dtype=np.int64)), ring.encode_int(np.array(v))

    def signed(x: int) -> int:
        x %= P
        return x - P if x > P // 2 else x

    want = [signed(sum(a[i][j] * v[i] for i in range(n))) for j in range(p)]
    assert ring.decode_int(ring.matvec(ra, rv)) == want
    assert ring.decode_int(ring.dot(rv, rv)) == [signed(sum(x * x for x in v))]
    col = [row[0] for row in a]
    rc = ring.encode_int(np.array(col))
    assert ring.decode_int(ring.mul(rc, rv)) == [signed(x * y) for x, y in zip(col, v, strict=True)]
    assert ring.decode_int(ring.add(rc, rv)) == [signed(x + y) for x, y in zip(col, v, strict=True)]
    assert ring.decode_int(ring.sub(rc, rv)) == [signed(x - y) for x, y in zip(col, v, strict=True)]
    assert ring.decode_int(ring.neg(rv)) == [signed(-x) for x in v]
    assert ring.decode_int(ring.scale(rv, c)) == [signed(c * x) for x in v]
    big = np.array([c, -c, P // 2 - 1, -(P // 2 - 1)], dtype=object)
    assert ring.decode_int(ring.encode_int(big)) == [signed(int(x)) for x in big]


def test_products_stay_exact_beyond_one_float_block() -> None:
    n = 3 * rns.BLOCK_ROWS + 5  # several float64 blocks, each reduced before the next
    a = SS_RING.uniform(b"a" * 32, (n, 3), label=b"a")
    v = SS_RING.uniform(b"v" * 32, (n,), label=b"v")
    got = SS_RING.decode_int(SS_RING.matvec(a, v))
    ia, iv = SS_RING.decode_int(a), SS_RING.decode_int(v)
    P = SS_RING.modulus
    for j in range(3):
        x = sum(ia[i * 3 + j] * iv[i] for i in range(n)) % P
        assert got[j] == (x - P if x > P // 2 else x)


@pytest.mark.parametrize("ring", RINGS)
def test_pack_round_trips_and_refuses_bad_residues_and_stray_bits(ring: RnsRing) -> None:
    r = ring.uniform(b"s" * 32, (50, 7), label=b"x")
    packed = ring.pack(r)
    assert packed.dtype == np.uint64
    assert packed.shape == ((50, 7) if ring.words == 1 else (50, 7, ring.words))
    assert np.array_equal(ring.unpack(packed, (50, 7), "x", "tester"), r)
    other = ring.uniform(b"t" * 32, (50, 7), label=b"x")
    assert np.array_equal(ring.unpack(ring.pack(r, plus=other), (50, 7), "x", "tester"),
                          ring.add(r, other))
    bad = r.copy()
    bad[ring.k - 1, 3, 2] = ring.primes[-1]  # one residue equal to its prime
    with pytest.raises(ValidationError, match=f"tester: x has a residue not below "
                                              f"{ring.primes[-1]}"):
        ring.unpack(ring.pack(bad), (50, 7), "x", "tester")
    stray = packed.copy()
    stray.reshape(-1, ring.words)[5, -1] |= np.uint64(1) << np.uint64(63)
    with pytest.raises(ValidationError, match=r"tester: x has (bits above|a residue)"):
        ring.unpack(stray, (50, 7), "x", "tester")
    with pytest.raises(ValidationError, match="x must be a uint64 array of shape"):
        ring.unpack(packed.astype(np.int64), (50, 7), "x", "tester")
    with pytest.raises(ValidationError, match="x must be a uint64 array of shape"):
        ring.unpack(packed, (50, 6), "x", "tester")


def test_masks_are_the_same_for_both_holders_uniform_and_label_separated() -> None:
    seed = b"k" * 32
    a = SS_RING.uniform(seed, (4000,), label=b"mask")
    assert np.array_equal(a, SS_RING.uniform(seed, (4000,), label=b"mask"))
    assert not np.array_equal(a, SS_RING.uniform(seed, (4000,), label=b"other"))
    for k, p in enumerate(SS_RING.primes):
        assert a[k].max() < p
        assert stats.kstest(a[k] / p, "uniform").pvalue > 1e-6


def test_signed_decode_at_the_edges_of_the_range() -> None:
    half = SS_RING.modulus // 2
    values = np.array([half, -half, 0, 1, -1], dtype=object)
    assert SS_RING.decode_int(SS_RING.encode_int(values)) == [half, -half, 0, 1, -1]
    assert rns.decode(rns.encode(np.array([-0.5, 0.25]), 20, bound=1.0, what="x"),
                      20).tolist() == [-0.5, 0.25]
    with pytest.raises(ValidationError, match="decode needs P < 2"):
        SS_RING.decode(SS_RING.encode_int(np.array([1])), 0)


def test_a_ring_refuses_primes_it_cannot_multiply_exactly() -> None:
    with pytest.raises(ValidationError, match="below 2"):
        RnsRing((2**21 + 23,))
    with pytest.raises(ValidationError, match="distinct"):
        RnsRing((2097143, 2097143))
