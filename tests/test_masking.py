"""ChaCha20 seed expansion, CSPRNG noise and pairwise masks that cancel in the sum.

Statistical tolerances are chosen so that a correct implementation fails with negligible
probability; where the input is a fixed seed the test is fully deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given, settings
from hypothesis import strategies as st

from islands.crypto import (
    MaskingKey,
    csprng_normal,
    csprng_uniform,
    decode_fixed,
    encode_fixed,
    expand,
    generate_key,
    pair_seed,
    pairwise_mask,
    reconstruct,
)
from islands.crypto.prg import _keystream
from islands.errors import ValidationError

SEED = bytes(range(32))
CONTEXT = b"run-0001"
LABELS = [b"sums", b"counts", b"second-moment"]


def _top_bit_fraction(v: np.ndarray) -> float:
    return float(np.mean(v >> np.uint64(63)))


def _masks(names: list[str], n: int, label: bytes) -> dict[str, np.ndarray]:
    keys = {name: generate_key() for name in names}
    return {
        name: pairwise_mask(
            name,
            keys[name],
            {peer: keys[peer].public for peer in names if peer != name},
            n,
            context=CONTEXT,
            label=label,
        )
        for name in names
    }


# --------------------------------------------------------------------------- expand


def test_keystream_matches_rfc8439_all_zero_vector() -> None:
    # RFC 8439 Appendix A.1, test vector #1: key 0, nonce 0, counter 0, first 16 bytes
    expected = bytes.fromhex("76b8e0ada0f13d90405d6ae55386bd28")
    assert _keystream(bytes(32), 2).astype("<u8").tobytes() == expected


def test_expand_is_hkdf_then_chacha20_of_zeros() -> None:
    key = HKDF(hashes.SHA256(), 32, salt=None, info=b"islands prg v1" + b"sums").derive(SEED)
    enc = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    reference = np.frombuffer(enc.update(bytes(8 * 3000)), dtype="<u8")
    np.testing.assert_array_equal(expand(SEED, 3000, label=b"sums"), reference)


def test_expand_is_deterministic_and_prefix_consistent() -> None:
    a = expand(SEED, 200_000, label=b"sums")
    b = expand(SEED, 200_000, label=b"sums")
    assert a.dtype == np.uint64 and a.shape == (200_000,)
    np.testing.assert_array_equal(a, b)
    # chunk boundaries (1 MiB = 131072 words) do not change the stream
    np.testing.assert_array_equal(expand(SEED, 131_073, label=b"sums"), a[:131_073])


def test_expand_labels_and_seeds_give_different_streams() -> None:
    streams = [expand(SEED, 64, label=label) for label in [*LABELS, b""]]
    streams.append(expand(bytes(32), 64, label=b"sums"))
    for i in range(len(streams)):
        for j in range(i + 1, len(streams)):
            assert not np.any(streams[i] == streams[j])  # equal words: p ≈ 64·2^-64


def test_expand_length_zero() -> None:
    out = expand(SEED, 0, label=b"sums")
    assert out.dtype == np.uint64 and out.shape == (0,)


def test_expand_top_bit_is_balanced() -> None:
    # fixed seed, so deterministic; for a uniform stream the fraction of set top bits over
    # 100k words has standard error 0.5/sqrt(1e5) ≈ 0.0016, and 0.01 is > 6 standard errors
    v = expand(SEED, 100_000, label=b"uniformity")
    assert abs(_top_bit_fraction(v) - 0.5) < 0.01
    # every byte value appears about 800k/256 = 3125 times (sd ≈ 56); 500 is ~9 sd
    counts = np.bincount(v.view(np.uint8), minlength=256)
    assert np.all(np.abs(counts - 3125) < 500)


@pytest.mark.parametrize(
    ("seed", "n", "label"),
    [
        (bytes(31), 1, b"x"),
        (bytes(33), 1, b"x"),
        ("0" * 32, 1, b"x"),
        (SEED, -1, b"x"),
        (SEED, 1.0, b"x"),
        (SEED, True, b"x"),
        (SEED, 2**35, b"x"),
        (SEED, 1, "x"),
    ],
)
def test_expand_rejects_bad_input(seed: object, n: object, label: object) -> None:
    with pytest.raises(ValidationError):
        expand(seed, n, label=label)  # type: ignore[arg-type]


def test_expand_error_does_not_echo_the_seed() -> None:
    secret = b"\xab" * 31
    with pytest.raises(ValidationError) as info:
        expand(secret, 1, label=b"x")
    assert "ab" * 4 not in str(info.value) and "\\xab" not in str(info.value)


# --------------------------------------------------------------------------- CSPRNG


def test_csprng_uniform_range_shape_and_balance() -> None:
    u = csprng_uniform((400, 250))
    assert u.shape == (400, 250) and u.dtype == np.float64
    assert u.min() >= 0.0 and u.max() < 1.0
    # 53-bit grid: u·2^53 is an integer
    assert np.all(u * 2.0**53 == np.floor(u * 2.0**53))
    # mean of 100k U(0,1) has sd sqrt(1/12/1e5) ≈ 0.00091; 0.006 is > 6 sd
    assert abs(u.mean() - 0.5) < 0.006
    assert csprng_uniform(0).shape == (0,)
    assert not np.array_equal(csprng_uniform(16), csprng_uniform(16))


@pytest.mark.parametrize("sigma", [1.0, 3.5])
def test_csprng_normal_moments(sigma: float) -> None:
    n = 200_000
    z = csprng_normal(n, sigma)
    assert z.shape == (n,) and np.all(np.isfinite(z))
    # the sample mean has standard error sigma/sqrt(n); 5 SE fails with p ≈ 6e-7
    assert abs(z.mean()) < 5 * sigma / math.sqrt(n)
    # the sample sd has standard error ≈ sigma/sqrt(2n) ≈ 0.0016·sigma, so 1% is > 6 SE
    # (p < 1e-9); it would also catch a Box–Muller slip such as a missing factor 2
    assert abs(z.std() / sigma - 1) < 0.01


def test_csprng_normal_odd_sizes_shapes_and_zero_sigma() -> None:
    assert csprng_normal((3, 5), 2.0).shape == (3, 5)
    assert csprng_normal(7, 1.0).shape == (7,)
    assert csprng_normal(0, 1.0).shape == (0,)
    np.testing.assert_array_equal(csprng_normal((4, 2), 0.0), np.zeros((4, 2)))
    np.testing.assert_array_equal(csprng_normal(3, 0), np.zeros(3))


@pytest.mark.parametrize("sigma", [-1.0, math.nan, math.inf, -math.inf, True, "1", None])
def test_csprng_normal_rejects_bad_sigma(sigma: object) -> None:
    with pytest.raises(ValidationError):
        csprng_normal(10, sigma)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [-1, (2, -1), 2.5, [3], (True,)])
def test_csprng_rejects_bad_shape(shape: object) -> None:
    with pytest.raises(ValidationError):
        csprng_uniform(shape)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        csprng_normal(shape, 1.0)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- keys


def test_masking_key_repr_hides_private_key() -> None:
    key = generate_key()
    private_raw = key.private.private_bytes_raw()
    text = repr(key) + str(key)
    assert private_raw.hex() not in text and repr(private_raw) not in text
    assert "private" not in text and "X25519PrivateKey" not in text
    assert len(key.public) == 32


def test_masking_key_checks_consistency_and_compares_by_public() -> None:
    a, b = generate_key(), generate_key()
    with pytest.raises(ValidationError):
        MaskingKey(private=a.private, public=b.public)
    with pytest.raises(ValidationError):
        MaskingKey(private=b"\x00" * 32, public=a.public)  # type: ignore[arg-type]
    assert MaskingKey(private=a.private, public=a.public) == a and a != b
    assert len({a, MaskingKey(private=a.private, public=a.public)}) == 1


def test_pair_seed_is_symmetric_and_context_bound() -> None:
    a, b = generate_key(), generate_key()
    s_ab = pair_seed(a, b.public, context=CONTEXT)
    assert s_ab == pair_seed(b, a.public, context=CONTEXT) and len(s_ab) == 32
    assert s_ab != pair_seed(a, b.public, context=CONTEXT + b"x")


@pytest.mark.parametrize(
    "bad_public",
    [bytes(31), bytes(33), bytes(32), (1).to_bytes(32, "little"), "k" * 32],
    ids=["31-bytes", "33-bytes", "all-zero-point", "order-1-point", "str"],
)
def test_bad_peer_keys_are_rejected(bad_public: object) -> None:
    own = generate_key()
    with pytest.raises(ValidationError):
        pair_seed(own, bad_public, context=CONTEXT)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="'bob'"):
        pairwise_mask("alice", own, {"bob": bad_public}, 4, context=CONTEXT, label=b"s")  # type: ignore[dict-item]


def test_own_public_key_as_peer_is_rejected() -> None:
    own = generate_key()
    with pytest.raises(ValidationError, match="own public key"):
        pairwise_mask("alice", own, {"bob": own.public}, 4, context=CONTEXT, label=b"s")


# --------------------------------------------------------------------------- masks


@pytest.mark.parametrize("parties", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("label", LABELS)
def test_pairwise_masks_sum_to_zero(parties: int, label: bytes) -> None:
    names = [f"island-{k}" for k in range(parties)]
    masks = _masks(names, 1000, label)
    assert all(m.dtype == np.uint64 and m.shape == (1000,) for m in masks.values())
    np.testing.assert_array_equal(reconstruct(list(masks.values())), np.zeros(1000, np.uint64))
    # ... while no single mask is zero
    assert all(np.count_nonzero(m) > 990 for m in masks.values())


def test_labels_give_unrelated_masks() -> None:
    names = ["a", "b", "c"]
    keys = {name: generate_key() for name in names}
    publics = {"b": keys["b"].public, "c": keys["c"].public}
    m1 = pairwise_mask("a", keys["a"], publics, 256, context=CONTEXT, label=b"sums")
    m2 = pairwise_mask("a", keys["a"], publics, 256, context=CONTEXT, label=b"counts")
    m3 = pairwise_mask("a", keys["a"], publics, 256, context=b"run-0002", label=b"sums")
    assert not np.any(m1 == m2) and not np.any(m1 == m3)
    np.testing.assert_array_equal(
        m1, pairwise_mask("a", keys["a"], publics, 256, context=CONTEXT, label=b"sums")
    )


def test_wrong_peer_key_breaks_cancellation() -> None:
    names = ["a", "b", "c", "d"]
    keys = {name: generate_key() for name in names}
    masks = []
    for name in names:
        publics = {peer: keys[peer].public for peer in names if peer != name}
        if name == "c":
            publics["a"] = generate_key().public  # c was handed a forged key for a
        masks.append(pairwise_mask(name, keys[name], publics, 500, context=CONTEXT, label=b"s"))
    assert np.count_nonzero(reconstruct(masks)) > 490


def test_masked_fixed_point_inputs_sum_exactly() -> None:
    rng = np.random.default_rng(7)  # test data only; masks come from the CSPRNG
    names = ["hospital-a", "hospital-b", "hospital-c", "hospital-d", "hospital-e"]
    xs = {name: rng.normal(scale=100.0, size=(30, 20)) for name in names}
    n = 600
    masks = _masks(names, n, b"sums")
    encoded = {name: encode_fixed(xs[name].ravel(), headroom=len(names)) for name in names}
    masked = [encoded[name] + masks[name] for name in names]
    total = reconstruct(masked)
    np.testing.assert_array_equal(total, reconstruct(list(encoded.values())))
    got = decode_fixed(total).reshape(30, 20)
    np.testing.assert_allclose(got, sum(xs.values()), rtol=0, atol=len(names) * 2.0**-25 + 1e-9)


def test_single_masked_vector_looks_independent_of_input() -> None:
    # a party masks all-zeros, then all-ones (fresh keys each time, as in a fresh run);
    # both masked vectors have top-bit fractions within 0.01 (> 6 SE) of 1/2
    n = 100_000
    for x in (np.zeros(n), np.ones(n)):
        mask = _masks(["a", "b", "c"], n, b"sums")["b"]
        masked = encode_fixed(x) + mask
        assert abs(_top_bit_fraction(masked) - 0.5) < 0.01
        assert np.count_nonzero(masked == encode_fixed(x)) == 0


@pytest.mark.parametrize(
    ("own_name", "peers", "n"),
    [
        ("a", {"a": None, "b": None}, 4),
        ("", {"b": None}, 4),
        (3, {"b": None}, 4),
        ("a", {"": None}, 4),
        ("a", {1: None}, 4),
        ("a", {}, 4),
        ("a", {"b": None}, -1),
        ("a", {"b": None}, True),
    ],
)
def test_pairwise_mask_rejects_bad_arguments(
    own_name: object, peers: dict[object, None], n: object
) -> None:
    own = generate_key()
    publics = {name: generate_key().public for name in peers}
    with pytest.raises(ValidationError):
        pairwise_mask(own_name, own, publics, n, context=CONTEXT, label=b"s")  # type: ignore[arg-type]


def test_pairwise_mask_rejects_non_bytes_context_and_label() -> None:
    own, peer = generate_key(), generate_key()
    with pytest.raises(ValidationError):
        pairwise_mask("a", own, {"b": peer.public}, 1, context="run", label=b"s")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        pairwise_mask("a", own, {"b": peer.public}, 1, context=CONTEXT, label="s")  # type: ignore[arg-type]


def test_length_zero_mask() -> None:
    masks = _masks(["a", "b"], 0, b"sums")
    assert all(m.shape == (0,) and m.dtype == np.uint64 for m in masks.values())


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=6), min_size=2, max_size=5, unique=True),
    st.integers(0, 17),
    st.binary(max_size=8),
)
def test_cancellation_for_arbitrary_names(names: list[str], n: int, label: bytes) -> None:
    masks = _masks(names, n, label)
    np.testing.assert_array_equal(reconstruct(list(masks.values())), np.zeros(n, np.uint64))


def test_envelope_key_serves_both_directions_and_seal_and_open_agree() -> None:
    from islands.crypto.envelope import (
        envelope_key,
        open_sealed,
        open_with,
        pair_context,
        seal,
        seal_with,
    )

    a, b = generate_key(), generate_key()
    context = pair_context(b"env", b"session", "alice", "bob")
    key = envelope_key(a, b.public, context=context)
    # one key per unordered pair: what a sealed with it b opens with its own derivation
    assert key == envelope_key(b, a.public, context=pair_context(b"env", b"session", "bob",
                                                                   "alice"))
    sealed = seal_with(key, b"shares", aad=b"a->b")
    assert open_sealed(b, a.public, sealed, context=context, aad=b"a->b") == b"shares"
    back = seal(b, a.public, b"reply", context=context, aad=b"b->a")
    assert open_with(key, back, aad=b"b->a") == b"reply"
    with pytest.raises(ValidationError, match="does not authenticate"):
        open_with(key, sealed, aad=b"b->a", sender="'alice'")
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(ValidationError, match="from 'alice' does not authenticate"):
        open_with(key, tampered, aad=b"a->b", sender="'alice'")
    with pytest.raises(ValidationError, match="malformed"):
        open_with(key, b"short", aad=b"a->b")
    other = envelope_key(a, generate_key().public, context=context)
    with pytest.raises(ValidationError, match="does not authenticate"):
        open_with(other, sealed, aad=b"a->b")
