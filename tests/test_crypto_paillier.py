"""Tests for islands.crypto.paillier: packing, encryption, serialisation, vector helpers.

Keys are 1024-bit for speed, except one 2048-bit round trip.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

from islands.crypto import paillier as P
from islands.errors import ValidationError


@pytest.fixture(scope="module")
def keys():
    return P.generate_keypair(1024)


@pytest.fixture(scope="module")
def other_keys():
    return P.generate_keypair(1024)


@pytest.fixture(scope="module")
def spec():
    return P.packing_spec(1024)


# ---------------------------------------------------------------------------- spec


def test_spec_arithmetic_2048_defaults():
    s = P.packing_spec(2048)
    assert (s.key_bits, s.frac_bits, s.int_bits, s.max_terms) == (2048, 32, 8, 1024)
    assert s.value_bits == 41
    assert s.slot_bits == 51
    assert s.slots == 40  # floor(2047 / 51); 40 * 51 = 2040 < 2047
    assert s.resolution == 2.0**-32
    assert s.offset == 2**40
    assert s.ciphertexts_for(0) == 0
    assert s.ciphertexts_for(1) == 1
    assert s.ciphertexts_for(40) == 1
    assert s.ciphertexts_for(41) == 2
    assert s.ciphertexts_for(2000) == 50
    assert s.ciphertexts_for(54000) == 1350


def test_spec_arithmetic_other_parameters():
    s = P.packing_spec(1024)
    assert (s.slot_bits, s.slots) == (51, 20)  # floor(1023 / 51)
    s = P.packing_spec(2048, frac_bits=16, int_bits=4, max_terms=10)
    assert (s.value_bits, s.slot_bits, s.slots) == (21, 25, 81)  # ceil(log2 10) = 4
    s = P.packing_spec(2048, max_terms=1)
    assert s.slot_bits == s.value_bits == 41
    s = P.packing_spec(2048, max_terms=1025)
    assert s.slot_bits == 52


def test_spec_accepts_numpy_integers_and_stores_ints():
    s = P.packing_spec(np.int64(2048), frac_bits=np.int32(32), max_terms=np.int64(1024))
    assert s == P.packing_spec(2048)
    assert type(s.key_bits) is int and type(s.max_terms) is int and s.slot_bits == 51


def test_unpacked_spec_has_one_slot():
    u = P.unpacked_spec(2048)
    assert u.slots == 1
    assert u.ciphertexts_for(2000) == 2000
    assert P.packing_spec(2048, slots=7).slots == 7


@pytest.mark.parametrize(
    "kwargs",
    [
        {"frac_bits": -1},
        {"frac_bits": 1.5},
        {"int_bits": True},
        {"int_bits": 40, "frac_bits": 23},  # 63 > 62
        {"max_terms": 0},
        {"frac_bits": 40, "int_bits": 20, "max_terms": 2**10},  # slot_bits 71 > 64
        {"slots": 0},
        {"slots": 41},  # capacity is 40
    ],
)
def test_spec_rejects_bad_parameters(kwargs):
    with pytest.raises(ValidationError):
        P.packing_spec(2048, **kwargs)


def test_spec_rejects_key_too_small_for_one_slot():
    with pytest.raises(ValidationError, match="key_bits"):
        P.packing_spec(51)
    assert P.packing_spec(52).slots == 1


# ---------------------------------------------------------------------------- pack


def test_pack_layout_is_offset_binary_little_endian_slots():
    s = P.PackingSpec(key_bits=128, frac_bits=4, int_bits=3, max_terms=2)
    assert (s.value_bits, s.slot_bits, s.slots) == (8, 9, 14)
    (m,) = P.pack([0.0, 1.0, -0.5], s)
    # offset 2^7 = 128; 1.0 -> 16 + 128; -0.5 -> -8 + 128
    assert m == 128 + (144 << 9) + (120 << 18)


def test_pack_unpack_round_trip_with_bounds(spec):
    bound = 2.0**spec.int_bits - spec.resolution
    grid = np.arange(-1000, 1000) * spec.resolution * 12345.0  # multiples of 2^-f
    x = np.concatenate([[0.0, -0.0, bound, -bound, spec.resolution, -spec.resolution], grid])
    plain = P.pack(x, spec)
    assert len(plain) == spec.ciphertexts_for(x.size)
    assert all(0 <= m < 2 ** (spec.key_bits - 1) for m in plain)
    y = P.unpack(plain, x.size, spec, terms=1)
    np.testing.assert_array_equal(y, x)  # exact on the 2^-f grid


def test_pack_rounding_error_is_half_a_step(spec):
    x = np.random.default_rng(0).uniform(-255.9, 255.9, 500)
    y = P.unpack(P.pack(x, spec), x.size, spec, terms=1)
    assert np.max(np.abs(y - x)) <= 2.0 ** -(spec.frac_bits + 1)


def test_pack_empty(spec):
    assert P.pack([], spec) == []
    assert P.unpack([], 0, spec, terms=1).shape == (0,)


@pytest.mark.parametrize("bad", [256.0, -256.0, 1e6, -1e300])
def test_pack_rejects_magnitude_at_or_above_bound(spec, bad):
    with pytest.raises(ValidationError, match="not below 2\\*\\*int_bits") as info:
        P.pack([0.5, bad, 1.0], spec)
    assert "values[1]" in str(info.value)
    assert repr(abs(bad)) in str(info.value)


def test_pack_rejects_value_that_rounds_up_to_bound(spec):
    just_below = 256.0 - 2.0**-38  # < 2^8 but rounds to 2^8 on the 2^-32 grid
    assert just_below < 256.0
    with pytest.raises(ValidationError):
        P.pack([just_below], spec)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_pack_rejects_non_finite(spec, bad):
    with pytest.raises(ValidationError, match="finite"):
        P.pack([1.0, bad], spec)


def test_pack_rejects_non_vectors(spec):
    with pytest.raises(ValidationError):
        P.pack([[1.0, 2.0]], spec)
    with pytest.raises(ValidationError):
        P.pack(1.0, spec)
    with pytest.raises(ValidationError):
        P.pack(["a"], spec)
    with pytest.raises(ValidationError):
        P.pack([1.0], "spec")


def test_unpack_checks_terms_and_counts(spec):
    plain = P.pack([1.0, 2.0], spec)
    with pytest.raises(ValidationError, match="terms"):
        P.unpack(plain, 2, spec, terms=spec.max_terms + 1)
    with pytest.raises(ValidationError, match="terms"):
        P.unpack(plain, 2, spec, terms=0)
    with pytest.raises(ValidationError, match="plaintexts"):
        P.unpack(plain, 21, spec, terms=1)  # 21 values need 2 plaintexts
    with pytest.raises(ValidationError, match="unused slots"):
        P.unpack(plain, 1, spec, terms=1)  # slot 1 is not padding
    three = [3 * m for m in plain]  # the sum of 3 packings, passed as if 1 term
    with pytest.raises(ValidationError, match="outside"):
        P.unpack(three, 2, spec, terms=1)
    with pytest.raises(ValidationError):
        P.unpack([2**1023], 2, spec, terms=1)
    with pytest.raises(ValidationError):
        P.unpack([-1], 2, spec, terms=1)


def test_unpack_sum_of_plaintexts_without_encryption(spec):
    rng = np.random.default_rng(1)
    xs = rng.uniform(-200, 200, (4, 45))
    total = [sum(col) for col in zip(*(P.pack(x, spec) for x in xs), strict=True)]
    y = P.unpack(total, 45, spec, terms=4)
    assert np.max(np.abs(y - xs.sum(axis=0))) <= 4 * 2.0 ** -(spec.frac_bits + 1) + 1e-12


def test_headroom_worst_case_no_carry():
    # max_terms copies of the extreme values: every slot sum reaches its largest value
    s = P.packing_spec(1024, frac_bits=4, int_bits=3, max_terms=5)
    step = s.resolution
    x = np.array([8 - step, -(8 - step), 0.0] * 5)
    plain = P.pack(x, s)
    total = [m * s.max_terms for m in plain]
    y = P.unpack(total, x.size, s, terms=s.max_terms)
    np.testing.assert_array_equal(y, x * s.max_terms)


# ---------------------------------------------------------------------------- keys


@pytest.mark.parametrize("bits", [512, 1000, 1100, 2048.0, True, 32768])
def test_generate_keypair_validates_bits(bits):
    with pytest.raises(ValidationError, match="bits"):
        P.generate_keypair(bits)


def test_public_key_bytes_and_fingerprint(keys, other_keys):
    pk, _ = keys
    data = P.public_key_to_bytes(pk)
    assert len(data) == 128
    assert P.public_key_from_bytes(data) == pk
    assert P.fingerprint(pk) == P.fingerprint(P.public_key_from_bytes(data))
    assert len(P.fingerprint(pk)) == P.FINGERPRINT_BYTES == 32
    assert P.fingerprint(pk) != P.fingerprint(other_keys[0])


@pytest.mark.parametrize(
    "data", [b"", b"\x00" + b"\xff" * 128, b"\xff" * 64, b"\xff" * 127 + b"\xfe", "ab"]
)
def test_public_key_from_bytes_rejects_malformed(data):
    with pytest.raises(ValidationError):
        P.public_key_from_bytes(data)


# ---------------------------------------------------------------------------- encrypt


def test_encrypt_decrypt_integers(keys):
    pk, sk = keys
    n = pk.n
    ms = [0, 1, 12345, n - 1, np.int64(7), gmpy2.mpz(99)]
    cs = P.encrypt(pk, ms)
    assert P.decrypt(sk, cs) == [int(m) for m in ms]
    assert P.decrypt(sk, []) == []


def test_encrypt_matches_phe(keys):
    pk, sk = keys
    (c,) = P.encrypt(pk, [424242])
    assert sk.raw_decrypt(int(c)) == 424242
    assert P.decrypt(sk, [pk.raw_encrypt(31337)]) == [31337]


def test_encrypt_rejects_out_of_range_plaintexts(keys):
    pk, _ = keys
    for bad in ([pk.n], [-1], [1.5], [True]):
        with pytest.raises(ValidationError, match="plaintexts"):
            P.encrypt(pk, bad)
    with pytest.raises(ValidationError):
        P.encrypt("not a key", [1])
    with pytest.raises(ValidationError):
        P.encrypt(pk, b"\x01")


def test_same_plaintext_encrypts_differently(keys):
    pk, sk = keys
    a, b = P.encrypt(pk, [5, 5])
    assert a != b
    with P.RandomnessPool(pk, 2) as pool:
        c, d = P.encrypt(pk, [5, 5], pool=pool)
    assert c != d and len({a, b, c, d}) == 4
    assert P.decrypt(sk, [a, b, c, d]) == [5] * 4


def test_add_is_homomorphic(keys):
    pk, sk = keys
    a = P.encrypt(pk, [1, 2, 3])
    b = P.encrypt(pk, [10, 20, pk.n - 3])
    assert P.decrypt(sk, P.add(pk, a, b)) == [11, 22, 0]  # mod n
    with pytest.raises(ValidationError, match="ciphertexts"):
        P.add(pk, a, b[:2])
    with pytest.raises(ValidationError):
        P.add(pk, a, [0, 1, 2])


def test_decrypt_rejects_invalid_ciphertexts(keys):
    pk, sk = keys
    n2 = pk.nsquare
    for bad in ([n2], [n2 + 5], [0], [-3], [1.0]):
        with pytest.raises(ValidationError, match="not a ciphertext"):
            P.decrypt(sk, bad)
    with pytest.raises(ValidationError, match="unit"):
        P.decrypt(sk, [pk.n])  # shares the factors of n
    with pytest.raises(ValidationError):
        P.decrypt(pk, [1])


# ---------------------------------------------------------------------------- pool


def test_pool_values_are_never_reused(keys):
    pk, _ = keys
    pool = P.RandomnessPool(pk, 3)
    assert len(pool) == 3
    taken = [pool.take() for _ in range(5)]  # the last two are computed on the spot
    assert len(pool) == 0
    assert len(set(taken)) == 5
    pool.fill(2)
    assert len(pool) == 2
    assert pool.take() not in taken


def test_pool_values_are_nth_residues(keys):
    pk, sk = keys
    n, n2 = gmpy2.mpz(pk.n), gmpy2.mpz(pk.nsquare)
    for private_key in (None, sk):
        pool = P.RandomnessPool(pk, 2, private_key=private_key)
        for _ in range(2):
            # r^n encrypts 0 (c = 1 · r^n); a valid n-th residue decrypts to 0
            assert P.decrypt(sk, [pool.take()]) == [0]
    assert n2 == n * n


def test_pool_crt_path_equals_public_computation(keys):
    pk, sk = keys
    n = gmpy2.mpz(pk.n)
    public, crt = P._RnEngine(n, None), P._RnEngine(n, sk)
    r = P._random_units(n, 4)
    assert crt.powers(r) == public.powers(r) == [gmpy2.powmod(x, n, n * n) for x in r]
    assert public.compute(0) == [] and crt.compute(0) == []


def test_pool_background_fills_and_closes(keys):
    pk, sk = keys
    pool = P.RandomnessPool(pk, 4, background=True, private_key=sk)
    try:
        deadline = time.monotonic() + 5.0
        while len(pool) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(pool) == 4
        spec = P.packing_spec(1024)
        x = np.linspace(-3, 3, 30)
        blob = P.encrypt_vector(pk, x, spec, pool=pool)
        assert np.max(np.abs(P.decrypt_vector(sk, blob, 30, spec, terms=1) - x)) <= 2.0**-33
    finally:
        pool.close()
    assert pool._thread is None
    pool.take()  # still usable after close


def test_pool_validation(keys, other_keys):
    pk, _ = keys
    with pytest.raises(ValidationError, match="size"):
        P.RandomnessPool(pk, 0, background=True)
    with pytest.raises(ValidationError, match="size"):
        P.RandomnessPool(pk, -1)
    with pytest.raises(ValidationError, match="does not match"):
        P.RandomnessPool(pk, private_key=other_keys[1])
    with pytest.raises(ValidationError, match="another public key"):
        P.encrypt(pk, [1], pool=P.RandomnessPool(other_keys[0]))


# ---------------------------------------------------------------------------- bytes


def test_ciphertext_bytes_round_trip(keys):
    pk, _ = keys
    cs = P.encrypt(pk, [0, 1, 2])
    data = P.ciphertexts_to_bytes(pk, cs)
    assert len(data) == 3 * 256  # 2 * ceil(1024 / 8) bytes each
    assert P.ciphertexts_from_bytes(pk, data) == cs
    assert P.ciphertexts_from_bytes(pk, b"") == []


def test_ciphertext_bytes_malformed(keys):
    pk, _ = keys
    data = P.ciphertexts_to_bytes(pk, P.encrypt(pk, [1]))
    with pytest.raises(ValidationError, match="multiple"):
        P.ciphertexts_from_bytes(pk, data[:-1])
    with pytest.raises(ValidationError, match=r"not in \(0, n\*\*2\)"):
        P.ciphertexts_from_bytes(pk, b"\xff" * 256)  # c >= n^2
    with pytest.raises(ValidationError, match=r"not in \(0, n\*\*2\)"):
        P.ciphertexts_from_bytes(pk, bytes(256))  # c = 0
    with pytest.raises(ValidationError):
        P.ciphertexts_from_bytes(pk, "text")
    with pytest.raises(ValidationError, match="not a ciphertext"):
        P.ciphertexts_to_bytes(pk, [pk.nsquare])


# ---------------------------------------------------------------------------- vectors


def test_sum_of_encrypted_vectors(keys, spec):
    """k packed vectors sum to within k·2^-(f+1) of the exact sum (checked with Fractions)."""
    pk, sk = keys
    k, length = 5, 60
    rng = np.random.default_rng(2)
    xs = rng.uniform(-50, 50, (k, length)) * rng.dirichlet(np.ones(k))[:, None]
    with P.RandomnessPool(pk, k * spec.ciphertexts_for(length), private_key=sk) as pool:
        blobs = [P.encrypt_vector(pk, x, spec, pool=pool) for x in xs]
    total = P.sum_encrypted(pk, blobs)
    assert len(total) == len(blobs[0]) == 32 + 3 * 256
    got = P.decrypt_vector(sk, total, length, spec, terms=k)
    tol = Fraction(k, 2 ** (spec.frac_bits + 1))
    for j in range(length):
        exact = sum(Fraction(float(v)) for v in xs[:, j])
        assert abs(Fraction(float(got[j])) - exact) <= tol
    assert P.decrypt_vector(sk, P.sum_encrypted(pk, blobs[:1]), length, spec, terms=1).shape == (
        length,
    )


def test_vector_helpers_detect_another_key(keys, other_keys, spec):
    pk, sk = keys
    opk, osk = other_keys
    mine = P.encrypt_vector(pk, [1.0, 2.0], spec)
    theirs = P.encrypt_vector(opk, [1.0, 2.0], spec)
    with pytest.raises(ValidationError, match="another public key"):
        P.sum_encrypted(pk, [mine, theirs])
    with pytest.raises(ValidationError, match="another public key"):
        P.decrypt_vector(sk, theirs, 2, spec, terms=1)
    with pytest.raises(ValidationError, match="another public key"):
        P.decrypt_vector(osk, mine, 2, spec, terms=1)


def test_vector_helpers_reject_malformed(keys, spec):
    pk, sk = keys
    blob = P.encrypt_vector(pk, np.ones(25), spec)  # 2 ciphertexts
    for bad in (blob[:10], blob[:-1], blob[:32] + b"\xff" * 256, "x"):
        with pytest.raises(ValidationError):
            P.decrypt_vector(sk, bad, 25, spec, terms=1)
    with pytest.raises(ValidationError, match="ciphertexts"):
        P.decrypt_vector(sk, blob, 60, spec, terms=1)
    with pytest.raises(ValidationError, match="ciphertexts"):
        P.sum_encrypted(pk, [blob, P.encrypt_vector(pk, np.ones(3), spec)])
    with pytest.raises(ValidationError):
        P.sum_encrypted(pk, [])
    with pytest.raises(ValidationError, match="terms"):
        P.decrypt_vector(sk, blob, 25, spec, terms=spec.max_terms + 1)
    with pytest.raises(ValidationError, match="2048-bit"):
        P.encrypt_vector(pk, [1.0], P.packing_spec(2048))


def test_unpacked_mode_round_trip(keys):
    pk, sk = keys
    u = P.unpacked_spec(1024)
    x = np.array([-1.5, 0.0, 3.25])
    blob = P.encrypt_vector(pk, x, u)
    assert len(blob) == 32 + 3 * 256
    np.testing.assert_array_equal(P.decrypt_vector(sk, blob, 3, u, terms=1), x)


def test_round_trip_2048_bits():
    pk, sk = P.generate_keypair(2048)
    assert int(pk.n).bit_length() == 2048
    spec = P.packing_spec(2048)
    x = np.random.default_rng(3).uniform(-1, 1, 90)  # 3 ciphertexts
    blob = P.sum_encrypted(pk, [P.encrypt_vector(pk, x, spec), P.encrypt_vector(pk, -x, spec)])
    assert len(blob) == 32 + 3 * 512
    got = P.decrypt_vector(sk, blob, x.size, spec, terms=2)
    assert np.max(np.abs(got)) <= 2 * 2.0**-33
    assert math.isclose(spec.resolution, 2.0**-32)
