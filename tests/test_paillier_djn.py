"""Tests for the DJN encryption optimisation in islands.crypto.paillier.

Damgård-Jurik-Nielsen keys (admissible n, public base h_s), the fixed-base engine that
computes h_s^α mod n², check_djn_base, and RandomnessPool(djn_base=...). Keys are
1024-bit for speed; no test depends on wall time.
"""

from __future__ import annotations

import secrets
import threading

import gmpy2
import numpy as np
import pytest

from islands.crypto import paillier as P
from islands.errors import ValidationError


@pytest.fixture(scope="module")
def djn():
    return P.generate_djn_keypair(1024)


@pytest.fixture(scope="module")
def engine(djn):
    pk, _, hs = djn
    return P.FixedBaseEngine(pk, hs)


# ---------------------------------------------------------------------------- keys


def test_keypair_is_admissible(djn):
    pk, sk, hs = djn
    p, q = sk.p, sk.q
    assert p % 4 == 3 and q % 4 == 3
    assert gmpy2.gcd(p - 1, q - 1) == 2
    assert p != q and p * q == pk.n
    assert gmpy2.is_prime(p) and gmpy2.is_prime(q)
    assert pk.n.bit_length() == 1024
    assert p.bit_length() == q.bit_length() == 512
    assert isinstance(hs, int) and 1 < hs < pk.nsquare
    assert gmpy2.gcd(hs, pk.n) == 1
    # h_s = h^n with h = -x^2: an n-th residue (encrypts 0) whose residue mod n has
    # Jacobi symbol (-1/n)(x/n)^2 = 1 (as p ≡ q ≡ 3 mod 4)
    assert P.decrypt(sk, [hs]) == [0]
    assert gmpy2.jacobi(hs % pk.n, pk.n) == 1
    assert P.check_djn_base(pk, hs, private_key=sk) == hs


def test_keypair_validates_bits():
    for bits in (512, 1000, 2048.0, True, "2048"):
        with pytest.raises(ValidationError, match="'bits' parameter of generate_djn_keypair"):
            P.generate_djn_keypair(bits)


# ---------------------------------------------------------------------------- encryption


def test_djn_encrypt_decrypt_round_trip(djn):
    pk, sk, hs = djn
    n = pk.n
    ms = [0, 1, n - 1, n // 2] + [secrets.randbelow(n) for _ in range(12)]
    with P.RandomnessPool(pk, 4, djn_base=hs) as pool:
        assert pool.djn and len(pool) == 4
        cs = P.encrypt(pk, ms, pool=pool)  # 4 from the pool, 12 computed on the spot
        assert len(pool) == 0
    assert all(0 < c < pk.nsquare for c in cs)
    assert P.decrypt(sk, cs) == ms


def test_djn_ciphertext_is_the_djn_formula(djn, engine):
    pk, _, hs = djn
    n, n2 = gmpy2.mpz(pk.n), gmpy2.mpz(pk.nsquare)
    pool = P.RandomnessPool(pk, djn_base=hs)
    alpha = secrets.randbits(512)
    pool._state.items.append(engine.powers([alpha])[0])
    m = secrets.randbelow(pk.n)
    assert P.encrypt(pk, [m], pool=pool) == [(1 + m * n) * gmpy2.powmod(hs, alpha, n2) % n2]


def test_djn_and_plain_ciphertexts_add(djn):
    pk, sk, hs = djn
    a, b = secrets.randbelow(pk.n), secrets.randbelow(pk.n)
    c_djn = P.encrypt(pk, [a], pool=P.RandomnessPool(pk, djn_base=hs))
    c_plain = P.encrypt(pk, [b])  # r^n
    c_crt = P.encrypt(pk, [b], pool=P.RandomnessPool(pk, private_key=sk))
    assert P.decrypt(sk, P.add(pk, c_djn, c_plain)) == [(a + b) % pk.n]
    assert P.decrypt(sk, P.add(pk, c_crt, c_djn)) == [(a + b) % pk.n]


def test_same_plaintext_encrypts_differently(djn):
    pk, sk, hs = djn
    pool = P.RandomnessPool(pk, 2, djn_base=hs)
    cs = P.encrypt(pk, [7, 7, 7, 7], pool=pool)
    assert len(set(cs)) == 4
    assert P.decrypt(sk, cs) == [7, 7, 7, 7]


def test_djn_vector_helpers(djn):
    pk, sk, hs = djn
    spec = P.packing_spec(1024)
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-5, 5, 45) for _ in range(3)]
    with P.RandomnessPool(pk, djn_base=hs) as pool:
        blobs = [P.encrypt_vector(pk, x, spec, pool=pool) for x in xs]
    total = P.decrypt_vector(sk, P.sum_encrypted(pk, blobs), 45, spec, terms=3)
    assert np.max(np.abs(total - sum(xs))) <= 3 * 2.0**-33


# ---------------------------------------------------------------------------- engine


def test_table_power_equals_powmod(djn, engine):
    pk, _, hs = djn
    n2 = gmpy2.mpz(pk.nsquare)
    assert engine.exponent_bits == 512 and engine.window == P.DJN_WINDOW_BITS
    top = (1 << 512) - 1
    alphas = [0, 1, 2, 255, 256, 1 << 511, top, top - (1 << 200)]
    alphas += [secrets.randbits(512) for _ in range(8)]
    alphas += [secrets.randbits(b) for b in (7, 8, 9, 100, 300)]
    expected = [gmpy2.powmod(hs, a, n2) for a in alphas]
    assert engine.powers(alphas) == expected
    assert P.FixedBaseEngine(pk, hs, method="powmod").powers(alphas) == expected
    for w in (1, 3, 5):  # windows that do not divide 512, incl. a short last row
        assert P.FixedBaseEngine(pk, hs, window=w).powers(alphas) == expected
    assert engine.powers([]) == [] and engine.compute(0) == []


def test_table_shape_and_memory_estimate(djn):
    pk, _, hs = djn
    e = P.FixedBaseEngine(pk, hs, window=6)
    assert e.rows == 86  # ceil(512 / 6)
    assert e.table_bytes == 86 * 63 * 256
    table = e._get_table()
    assert len(table) == 86 and all(len(row) == 63 for row in table)
    n2 = gmpy2.mpz(pk.nsquare)
    assert table[3][4] == gmpy2.powmod(hs, 5 << 18, n2)


def test_engine_compute_draws_fresh_exponents(djn, engine):
    _, sk, _ = djn
    values = engine.compute(6)
    assert len(values) == len(set(values)) == 6
    assert P.decrypt(sk, values) == [0] * 6  # each h_s^α is an n-th residue


def test_engine_table_built_once_under_concurrency(djn):
    pk, _, hs = djn
    e = P.FixedBaseEngine(pk, hs, window=4)
    tables = []
    threads = [threading.Thread(target=lambda: tables.append(e._get_table())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(tables) == 4 and all(t is tables[0] for t in tables)


def test_engine_validation(djn, engine):
    pk, _, hs = djn
    with pytest.raises(ValidationError, match="'method' parameter of FixedBaseEngine"):
        P.FixedBaseEngine(pk, hs, method="comb")
    for w in (0, 13, 2.0):
        with pytest.raises(ValidationError, match="'window' parameter of FixedBaseEngine"):
            P.FixedBaseEngine(pk, hs, window=w)
    with pytest.raises(ValidationError, match="'hs' parameter of FixedBaseEngine"):
        P.FixedBaseEngine(pk, 1)
    with pytest.raises(ValidationError, match="public_key"):
        P.FixedBaseEngine(pk.n, hs)
    for bad in (-1, 1 << 512, 1.0, None):
        with pytest.raises(ValidationError, match=r"alphas\[1\]"):
            engine.powers([3, bad])


# ---------------------------------------------------------------------------- check_djn_base


def test_check_djn_base_rejects_bad_values(djn):
    pk, sk, hs = djn
    n2 = pk.nsquare
    for bad in (0, 1, n2, n2 - 1, n2 + 5, -hs, sk.p, sk.p * 12345, sk.q * (hs // sk.q)):
        with pytest.raises(ValidationError, match="'hs' parameter of check_djn_base"):
            P.check_djn_base(pk, bad)
    for bad in ("12", 2.5, None, b"\x05"):
        with pytest.raises(ValidationError, match="'hs'"):
            P.check_djn_base(pk, bad)
    with pytest.raises(ValidationError, match="'hs' parameter of MyRole"):
        P.check_djn_base(pk, 0, "MyRole")


def test_check_djn_base_error_message_is_short(djn):
    pk, sk, _ = djn
    with pytest.raises(ValidationError, match="unit modulo n") as info:
        P.check_djn_base(pk, sk.p * 3)
    assert "an int of" in str(info.value) and len(str(info.value)) < 200


def test_check_djn_base_accepts_and_converts(djn):
    pk, _, hs = djn
    for value in (hs, gmpy2.mpz(hs)):
        out = P.check_djn_base(pk, value)
        assert out == hs and isinstance(out, type(gmpy2.mpz(0)))
    assert P.check_djn_base(pk, np.int64(3)) == 3  # in range and a unit: passes publicly


def test_check_djn_base_with_private_key_needs_nth_residue(djn):
    pk, sk, hs = djn
    n2 = pk.nsquare
    not_residue = hs * (1 + pk.n) % n2  # encrypts 1, not 0
    P.check_djn_base(pk, not_residue)  # public checks cannot tell
    with pytest.raises(ValidationError, match="n-th residue"):
        P.check_djn_base(pk, not_residue, private_key=sk)
    _, other_sk, _ = P.generate_djn_keypair(1024)
    with pytest.raises(ValidationError, match="does not match"):
        P.check_djn_base(pk, hs, private_key=other_sk)


# ---------------------------------------------------------------------------- pool


def test_pool_with_djn_base_and_private_key(djn):
    pk, sk, hs = djn
    pool = P.RandomnessPool(pk, 2, private_key=sk, djn_base=hs)
    assert pool.djn and isinstance(pool._state.engine, P.FixedBaseEngine)
    assert P.decrypt(sk, P.encrypt(pk, [5, 6, 7], pool=pool)) == [5, 6, 7]
    with pytest.raises(ValidationError, match="n-th residue"):
        P.RandomnessPool(pk, private_key=sk, djn_base=hs * (1 + pk.n) % pk.nsquare)
    assert not P.RandomnessPool(pk).djn


def test_pool_djn_validation(djn):
    pk, _, _ = djn
    for bad in (0, 1, pk.nsquare, "hs"):
        with pytest.raises(ValidationError, match="'hs' parameter of RandomnessPool"):
            P.RandomnessPool(pk, djn_base=bad)
    other_pk, _, other_hs = P.generate_djn_keypair(1024)
    with pytest.raises(ValidationError, match="another public key"):
        P.encrypt(pk, [1], pool=P.RandomnessPool(other_pk, djn_base=other_hs))


def test_pool_values_are_never_reused(djn):
    pk, _, hs = djn
    pool = P.RandomnessPool(pk, 3, djn_base=hs)
    taken = [pool.take() for _ in range(5)]
    assert len(pool) == 0 and len(set(taken)) == 5
    pool.fill(2)
    assert len(pool) == 2 and pool.take() not in taken


def test_pool_background_fills_and_closes(djn):
    pk, sk, hs = djn
    pool = P.RandomnessPool(pk, 4, background=True, djn_base=hs)
    try:
        # the pool's thread notifies after each batch; the timeout only turns a hung
        # thread into a failure instead of a stuck run
        with pool._state.cond:
            assert pool._state.cond.wait_for(lambda: len(pool._state.items) >= 4, timeout=120)
        assert len(pool) == 4
        ms = [secrets.randbelow(pk.n) for _ in range(6)]
        assert P.decrypt(sk, P.encrypt(pk, ms, pool=pool)) == ms
        thread = pool._thread
        assert thread is not None and thread.is_alive()
    finally:
        pool.close()
    assert pool._thread is None and not thread.is_alive()
    assert P.decrypt(sk, P.encrypt(pk, [9], pool=pool)) == [9]  # usable after close
    with P.RandomnessPool(pk, 2, background=True, djn_base=hs) as ctx_pool:
        thread = ctx_pool._thread
        assert thread is not None
    assert ctx_pool._thread is None and not thread.is_alive()
