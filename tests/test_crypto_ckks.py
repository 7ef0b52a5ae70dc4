"""CKKS weighted sums over TenSEAL: accuracy, key separation and the server's refusals."""

from __future__ import annotations

import gc
import math
import subprocess
import sys
import weakref
from typing import Any

import numpy as np
import pytest

from islands.crypto import ckks
from islands.crypto.ckks import (
    DEFAULT_PARAMS,
    CKKSParams,
    EncryptedSum,
    decrypt_vector,
    encrypt_vector,
    fingerprint,
    load_context,
    make_context,
    public_context_bytes,
    secret_context_bytes,
)
from islands.errors import ValidationError

ts = pytest.importorskip("tenseal")  # the optional "crypto" extra

SLOTS = DEFAULT_PARAMS.slots


@pytest.fixture(scope="module")
def ctx() -> Any:
    return make_context()


@pytest.fixture(scope="module")
def pub(ctx: Any) -> Any:
    return load_context(public_context_bytes(ctx), secret=False)


@pytest.fixture(scope="module")
def sec(ctx: Any) -> Any:
    return load_context(secret_context_bytes(ctx), secret=True)


@pytest.fixture(scope="module")
def other() -> Any:
    return make_context()


@pytest.fixture(scope="module")
def rng() -> np.random.Generator:
    return np.random.default_rng(20231)


def test_importing_the_package_does_not_import_tenseal() -> None:
    code = (
        "import sys, islands.crypto, islands.crypto.ckks, islands.crypto.chaos\n"
        "assert 'tenseal' not in sys.modules, 'tenseal imported eagerly'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_round_trip_54000_values_within_1e6(ctx: Any, sec: Any, rng: np.random.Generator) -> None:
    w = rng.uniform(-5, 5, 54_000)
    chunks = encrypt_vector(sec, w)  # a client that loaded the dealt secret context
    assert len(chunks) == math.ceil(54_000 / SLOTS) == 14
    out = decrypt_vector(ctx, chunks, w.size)  # the dealer decrypts: same key
    assert out.dtype == np.float64 and out.shape == w.shape
    assert np.max(np.abs(out - w)) <= 1e-6


def test_clients_encrypt_with_the_secret_key_and_contexts_can_die() -> None:
    fresh = make_context()
    encrypt_vector(fresh, [1.0])
    twin = ckks._DERIVED[fresh]["twin"]  # the fast path is on (TenSEAL still supports it)
    assert twin is not False and twin.is_private()
    with pytest.raises(ValueError, match="symmetric"):
        twin.has_public_key()  # a symmetric-only context
    ref = weakref.ref(fresh)
    del fresh, twin
    gc.collect()
    assert ref() is None  # the per-context cache does not keep the secret key alive


def test_public_key_encryption_round_trips(ctx: Any, pub: Any, rng: np.random.Generator) -> None:
    w = rng.uniform(-10, 10, 3000)
    out = decrypt_vector(ctx, encrypt_vector(pub, w), w.size)
    assert np.max(np.abs(out - w)) <= 1e-6


@pytest.mark.parametrize(("clients", "length"), [(3, 54_000), (10, 10_000)])
def test_weighted_sum_equals_plain_weighted_mean(
    ctx: Any, sec: Any, pub: Any, rng: np.random.Generator, clients: int, length: int
) -> None:
    ws = rng.uniform(-10, 10, (clients, length))
    counts = rng.integers(50, 5000, clients)
    p = counts / counts.sum()
    agg = EncryptedSum(pub, length)
    for k in range(clients):
        agg.add(encrypt_vector(sec if k % 2 else ctx, ws[k]), float(p[k]))
    assert agg.clients == clients and agg.weight_total == pytest.approx(1.0)
    out = decrypt_vector(sec, agg.result(), length)
    assert np.max(np.abs(out - p @ ws)) <= 1e-6


def test_public_context_cannot_decrypt(ctx: Any, pub: Any) -> None:
    assert ctx.is_private() and not pub.is_private()
    chunks = encrypt_vector(ctx, [1.0, 2.0, 3.0])
    with pytest.raises(ValidationError, match="no secret key"):
        decrypt_vector(pub, chunks, 3)
    with pytest.raises(ValueError):  # TenSEAL itself refuses too
        ts.ckks_vector_from(pub, chunks[0][54:]).decrypt()
    with pytest.raises(ValidationError, match="no secret key"):
        secret_context_bytes(pub)


def test_server_refuses_the_secret_context(ctx: Any, sec: Any) -> None:
    for private in (ctx, sec):
        with pytest.raises(ValidationError, match="must never hold"):
            EncryptedSum(private, 10)


def test_load_context_checks_which_half(ctx: Any) -> None:
    with pytest.raises(ValidationError, match="secret key"):
        load_context(secret_context_bytes(ctx), secret=False)
    with pytest.raises(ValidationError, match="expected a secret context"):
        load_context(public_context_bytes(ctx), secret=True)
    assert load_context(public_context_bytes(ctx)).is_private() is False
    with pytest.raises(ValidationError, match="not a serialised TenSEAL context"):
        load_context(b"not a context")
    with pytest.raises(ValidationError, match="'data'"):
        load_context("text")  # type: ignore[arg-type]
    bfv = ts.context(ts.SCHEME_TYPE.BFV, 4096, plain_modulus=1032193, n_threads=1)
    with pytest.raises(ValidationError, match="not a CKKS context"):
        load_context(bfv.serialize())


def test_server_context_must_not_rescale(ctx: Any) -> None:
    raw = load_context(public_context_bytes(ctx))
    raw.auto_rescale = True
    with pytest.raises(ValidationError, match="auto_rescale"):
        EncryptedSum(raw, 10)


def test_fingerprints_identify_the_key(ctx: Any, pub: Any, sec: Any, other: Any) -> None:
    fp = fingerprint(ctx)
    assert isinstance(fp, bytes) and len(fp) == 32
    assert fingerprint(pub) == fp == fingerprint(sec)
    assert fingerprint(load_context(public_context_bytes(sec))) == fp
    assert fingerprint(other) != fp


def test_ciphertexts_under_another_key_are_rejected(ctx: Any, pub: Any, other: Any) -> None:
    w = np.linspace(-1, 1, 100)
    agg = EncryptedSum(pub, 100)
    agg.add(encrypt_vector(ctx, w), 0.5)
    with pytest.raises(ValidationError, match="was encrypted under another key"):
        agg.add(encrypt_vector(other, w), 0.5)
    other_pub = load_context(public_context_bytes(other), secret=False)
    with pytest.raises(ValidationError, match="was encrypted under another key"):
        agg.add(encrypt_vector(other_pub, w), 0.5)
    with pytest.raises(ValidationError, match="was encrypted under another key"):
        decrypt_vector(other, encrypt_vector(ctx, w), 100)
    # the rejected uploads left the sum alone
    assert agg.clients == 1
    np.testing.assert_allclose(decrypt_vector(ctx, agg.result(), 100), 0.5 * w, atol=1e-6)


@pytest.mark.parametrize("length", [1, SLOTS, SLOTS + 1, 3 * SLOTS - 5])
def test_chunk_count_is_ceil_of_length_over_slots(ctx: Any, length: int) -> None:
    w = np.arange(length, dtype=np.float64) / length
    chunks = encrypt_vector(ctx, w)
    assert len(chunks) == math.ceil(length / SLOTS)
    np.testing.assert_allclose(decrypt_vector(ctx, chunks, length), w, atol=1e-6)


def test_malformed_uploads_are_rejected_and_leave_the_sum_untouched(
    ctx: Any, pub: Any, rng: np.random.Generator
) -> None:
    n = 2 * SLOTS + 10
    w = rng.uniform(-3, 3, n)
    good = encrypt_vector(ctx, w)
    agg = EncryptedSum(pub, n)
    agg.add(good, 0.25)
    cases: list[tuple[Any, str]] = [
        (good[:2], "expected 3 ciphertext chunk"),
        ([*good, good[0]], "expected 3 ciphertext chunk"),
        ([good[1], good[0], good[2]], "in order"),
        ([*good[:2], good[2][:54] + b"garbage" * 10], "does not deserialise"),
        ([*good[:2], good[2][:-100]], "does not deserialise"),
        ([*good[:2], b"ISCK"], "not an islands CKKS ciphertext"),
        ([*good[:2], b"X" * len(good[2])], "not an islands CKKS ciphertext"),
        ([*good[:2], "text"], "not an islands CKKS ciphertext"),
        (good[0], "a sequence of bytes"),
        (encrypt_vector(ctx, w[:-1]), "belongs to a vector of"),
    ]
    for chunks, message in cases:
        with pytest.raises(ValidationError, match=message):
            agg.add(chunks, 0.25)
    # a server's result is not a client upload
    with pytest.raises(ValidationError, match="not a client upload"):
        agg.add(agg.result(), 0.25)
    assert agg.clients == 1 and agg.weight_total == 0.25
    np.testing.assert_allclose(decrypt_vector(ctx, agg.result(), n), 0.25 * w, atol=1e-6)
    with pytest.raises(ValidationError, match="belongs to a vector of"):
        decrypt_vector(ctx, good, n + 1)


def test_weights_are_checked(ctx: Any, pub: Any) -> None:
    w = np.ones(10)
    chunks = encrypt_vector(ctx, w)
    agg = EncryptedSum(pub, 10)
    for bad in (math.nan, math.inf, True, "0.5", None):
        with pytest.raises(ValidationError, match="'weight'"):
            agg.add(chunks, bad)  # type: ignore[arg-type]
    agg.add(chunks, 0.0)  # a client with no data: counted, adds nothing
    with pytest.raises(ValidationError, match="no upload with a non-zero weight"):
        agg.result()
    agg.add(chunks, 0.75)
    with pytest.raises(ValidationError, match=r"sum to 1\.25"):
        agg.add(chunks, -0.5)
    agg.add(chunks, -0.25)
    np.testing.assert_allclose(decrypt_vector(ctx, agg.result(), 10), 0.5 * w, atol=1e-6)


def test_values_are_checked(ctx: Any) -> None:
    for bad in ([], [[1.0, 2.0]], [1.0, math.nan], [math.inf], "abc"):
        with pytest.raises(ValidationError):
            encrypt_vector(ctx, bad)
    with pytest.raises(ValidationError, match="largest magnitude"):
        encrypt_vector(ctx, [DEFAULT_PARAMS.max_abs_sum * 2])
    with pytest.raises(ValidationError, match="'ctx'"):
        encrypt_vector(object(), [1.0])
    with pytest.raises(ValidationError, match="'length'"):
        EncryptedSum(load_context(public_context_bytes(ctx)), 0)


def test_default_params() -> None:
    p = CKKSParams()
    assert p == DEFAULT_PARAMS
    assert p.slots == 4096 and p.data_bits == 100 and p.max_abs_sum == 2.0**18
    assert sum(p.coeff_mod_bit_sizes) <= 218  # SEAL's 128-bit bound at N = 8192
    assert CKKSParams(16384, [60, 60, 60], 40).coeff_mod_bit_sizes == (60, 60, 60)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"poly_modulus_degree": 2048}, "poly_modulus_degree"),
        ({"poly_modulus_degree": 5000}, "poly_modulus_degree"),
        ({"poly_modulus_degree": 8192.0}, "poly_modulus_degree"),
        ({"coeff_mod_bit_sizes": (60, 60, 60, 60)}, "coeff_mod_bit_sizes"),  # 240 > 218
        ({"coeff_mod_bit_sizes": (61, 40, 60)}, "coeff_mod_bit_sizes"),
        ({"coeff_mod_bit_sizes": (60,)}, "coeff_mod_bit_sizes"),
        ({"coeff_mod_bit_sizes": "60,40,60"}, "coeff_mod_bit_sizes"),
        ({"coeff_mod_bit_sizes": (40, 40, 60)}, "coeff_mod_bit_sizes"),  # 80 < 2·40 + 6
        ({"scale_bits": 10}, "scale_bits"),
        ({"scale_bits": 40.0}, "scale_bits"),
        ({"scale_bits": 61}, "scale_bits"),
    ],
)
def test_bad_params_are_rejected(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValidationError, match=repr(name)):
        CKKSParams(**kwargs)


def test_make_context_checks_its_argument() -> None:
    with pytest.raises(ValidationError, match="'params'"):
        make_context({"poly_modulus_degree": 8192})  # type: ignore[arg-type]
    small = make_context(CKKSParams(16384, (60, 40, 60), 40))
    assert len(encrypt_vector(small, np.zeros(8193))) == 2
