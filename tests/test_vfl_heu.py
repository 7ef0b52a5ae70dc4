"""Vertical regression under HEU's Okamoto–Uchiyama (he="ou"): the same model as in the clear,
every received key and ciphertext checked, range-checked decryption, long randomness."""

from __future__ import annotations

from functools import cache, partial
from typing import Any

import msgpack
import numpy as np
import pytest

from islands.crypto import heu

if not heu.available():
    pytest.skip("sf-heu is not importable here (pip install 'islands[heu]'; wheels exist for "
                "CPython 3.9-3.11 on Linux x86_64/aarch64 and macOS arm64)",
                allow_module_level=True)

from heu import numpy as hnp
from heu import phe

from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local
from islands.vfl import VerticalLinearRegression, VerticalLogisticRegression, maths
from islands.vfl.config import VflConfig
from islands.vfl.protocol import Hello, Plan, Setup, active, coordinator, passive


@cache
def owner() -> heu.OuKeyOwner:
    return heu.OuKeyOwner(1024, workers=1)


def cipher() -> heu.OuCipher:
    return owner().cipher()


def make_plan(objective: str, **settings: Any) -> Plan:
    settings = {"tol": None, "key_bits": 1024, "insecure_keys": True, **settings}
    return VflConfig.build(None, objective=objective, **settings).plan()


def data(n: int, widths: tuple[int, ...], seed: int = 0) -> tuple[list[Any], Any]:
    rng = np.random.default_rng(seed)
    blocks = [rng.normal(size=(n, w)) for w in widths]
    y = np.hstack(blocks) @ rng.normal(size=sum(widths)) + 0.5 + 0.1 * rng.normal(size=n)
    return blocks, y


# ---------------------------------------------------------------- same model as in the clear


@pytest.mark.parametrize("widths", [(2, 3), (2, 1, 3)], ids=["one-passive", "two-passive"])
@pytest.mark.parametrize("cls", [VerticalLinearRegression, VerticalLogisticRegression])
def test_an_ou_run_trains_the_clear_runs_model(cls: Any, widths: tuple[int, ...]) -> None:
    blocks, y = data(70, widths)
    if cls is VerticalLogisticRegression:
        y = (y > np.median(y)).astype(int)
    x_a = blocks[0] if len(blocks) == 2 else blocks[:-1]
    fits = {he: cls(he=he, key_bits=1024, insecure_keys=True, epochs=2, batch_size=30,
                    lam=0.01, tol=None, random_state=3).fit(x_a, blocks[-1], y)
            for he in ("none", "ou")}
    clear, ou = fits["none"], fits["ou"]
    # the same integer arithmetic: equal bit for bit, which is within the fixed-point step
    np.testing.assert_array_equal(np.hstack(clear.coef_a_), np.hstack(ou.coef_a_))
    np.testing.assert_array_equal(clear.coef_b_, ou.coef_b_)
    assert clear.intercept_ == ou.intercept_
    assert clear.loss_history_ == ou.loss_history_
    assert ou.config_.he == "ou" and ou.plan_.he == "ou"


def test_the_masked_gradients_c_decrypts_are_in_the_statistical_range() -> None:
    blocks, y = data(60, (2, 2))
    plan = make_plan("linear", epochs=1, batch_size=30, he="ou")
    roles: dict[str, Any] = {"C": partial(coordinator, plan=plan, keys=owner()),
                             "B": partial(active, X=blocks[1], y=y, plan=plan),
                             "A": partial(passive, X=blocks[0], plan=plan)}
    run = run_local(roles, timeout=120, keep_payloads=True, blas_threads=None)
    k = maths.value_bounds(plan.precision, plan.batch_size, 1).gradient_bits
    masked = [v for r in run.transcript.with_tag("masked") for v in r.payload]
    assert masked and all(0 < v < 2 ** (k + heu.MASK_BITS + 1) for v in masked)
    assert max(masked) > 2 ** (k + heu.MASK_BITS - 8)  # the pads are 128 bits above G
    setup = run.transcript.with_tag("setup")[0].payload
    assert setup.djn_base is None
    assert heu.OuCipher.from_public_bytes(setup.public_key, owner="t", min_bits=1024).n == (
        cipher().n)


# ---------------------------------------------------------------- receipt checks


def ou_key_fields() -> tuple[list[Any], bytes]:
    raw = owner().public_bytes()
    unpacker = msgpack.Unpacker(raw=True)
    unpacker.feed(raw)
    fields = next(unpacker)
    return fields, raw[unpacker.tell():]


def key_with(fields: list[Any], trailer: bytes) -> bytes:
    return bytes(msgpack.packb(fields, use_bin_type=False)) + trailer


def mpint(value: int) -> bytes:
    return value.to_bytes(value.bit_length() // 8 + 1, "little")


def test_the_unchanged_key_rebuilt_is_accepted() -> None:
    fields, trailer = ou_key_fields()
    assert heu.OuCipher.from_public_bytes(key_with(fields, trailer), owner="A",
                                          min_bits=1024).n == cipher().n


@pytest.mark.parametrize(("change", "said"), [
    (lambda f, t: key_with(f, t)[:100], "malformed OU public key"),
    (lambda f, t: b"\xc1garbage", "malformed OU public key"),
    (lambda f, t: b"", "holds 0 bytes"),
    (lambda f, t: b"\x00" * 20000, "holds 20000 bytes"),
    (lambda f, t: key_with(f[:3], t), "malformed OU public key"),
    (lambda f, t: key_with(f, (4).to_bytes(8, "little")), "not an OU key .schema id 4"),
    (lambda f, t: key_with(f, b""), "not an OU key"),
    (lambda f, t: key_with([mpint(heu_n(f) + 1), *f[1:]], t), "must be odd"),
    (lambda f, t: key_with([mpint((1 << 1000) + 1), *f[1:]], t), "at least 1024 bits"),
    (lambda f, t: key_with([f[0], mpint(1), *f[2:]], t), "G must be a unit"),
    (lambda f, t: key_with([f[0], f[1], f[0], f[3]], t), "H must be a unit"),
    (lambda f, t: key_with([f[0], f[1], f[2], 600], t), "plaintext bound"),
    (lambda f, t: key_with([f[0][:-1] + bytes([f[0][-1] | 0x80]), *f[1:]], t),
     "malformed OU public key"),
])
def test_every_public_key_check_refuses(change: Any, said: str) -> None:
    fields, trailer = ou_key_fields()
    with pytest.raises(ValidationError, match=rf"party 'A': .*{said}"):
        heu.OuCipher.from_public_bytes(change(fields, trailer), owner="party 'A'",
                                       min_bits=1024)


def heu_n(fields: list[Any]) -> int:
    return int.from_bytes(fields[0], "little")


def test_a_paillier_key_from_heu_is_not_an_ou_key() -> None:
    paillier_key = hnp.setup(phe.SchemaType.ZPaillier, 1024).public_key().serialize()
    with pytest.raises(ValidationError, match="malformed OU public key"):
        heu.OuCipher.from_public_bytes(paillier_key, owner="party 'A'", min_bits=1024)


def blob_elements(blob: bytes) -> tuple[bytes, list[Any]]:
    head = msgpack.unpackb(blob[32:], raw=True)
    return blob[:32], head


def rebuilt(fp: bytes, head: list[Any]) -> bytes:
    return fp + bytes(msgpack.packb(head, use_bin_type=False))


def element(value: int, schema: int = 1) -> bytes:
    return bytes(msgpack.packb([mpint(value)], use_bin_type=False)) + schema.to_bytes(8, "little")


def test_well_formed_ciphertexts_pass_and_round_trip() -> None:
    c = cipher()
    blob = c.to_bytes(c.encrypt([5, -7, 11]))
    fp, head = blob_elements(blob)
    for raw in (blob, rebuilt(fp, head)):  # HEU's bytes, and as msgpack-python packs them
        assert owner().decrypt(c.from_bytes(raw, 3, "u", "party 'B'"), 8, positive=False,
                               what="u", sender="x") == [5, -7, 11]


@pytest.mark.parametrize(("change", "said"), [
    (lambda c, fp, h: rebuilt(b"\x00" * 32, h), "another public key"),
    (lambda c, fp, h: rebuilt(fp, [4, 1, 2, h[3]]), r"must hold 3 ciphertexts as a \(3, 1\) "
                                                    r"array; got \[4, 1, 2\]"),
    (lambda c, fp, h: rebuilt(fp, [3, 1, 2, h[3][:2]]), "must hold 3 ciphertexts"),
    (lambda c, fp, h: rebuilt(fp, [3, 1, 1, h[3]]), "must hold 3 ciphertexts"),
    (lambda c, fp, h: rebuilt(fp, [3, 1, 2, [h[3][0], element(c.n), h[3][2]]]),
     r"u\[1\] is not a unit in \(0, n\)"),
    (lambda c, fp, h: rebuilt(fp, [3, 1, 2, [h[3][0], h[3][1], element(c.n + 5)]]),
     r"u\[2\] is not a unit"),
    (lambda c, fp, h: rebuilt(fp, [3, 1, 2, [element(0), h[3][1], h[3][2]]]),
     r"u\[0\] is not a unit"),
    (lambda c, fp, h: rebuilt(fp, [3, 1, 2, [element(5, schema=4), h[3][1], h[3][2]]]),
     r"u\[0\] is malformed \(not an OU ciphertext\)"),
    (lambda c, fp, h: rebuilt(fp, [3, 1, 2, [b"\x92\x01\x02" + h[3][0][-8:], h[3][1],
                                             h[3][2]]]), r"u\[0\] is malformed"),
    (lambda c, fp, h: fp + b"\xc1\xc1", "not a ciphertext array"),
    (lambda c, fp, h: fp + b"\x00" * 100000, "too long for 3 ciphertexts"),
    (lambda c, fp, h: "text", "The 'u' parameter of party 'B' must be bytes"),
])
def test_every_ciphertext_check_refuses(change: Any, said: str) -> None:
    c = cipher()
    fp, head = blob_elements(c.to_bytes(c.encrypt([5, -7, 11])))
    with pytest.raises(ValidationError, match=said):
        c.from_bytes(change(c, fp, head), 3, "u", "party 'B'")


def secret_p() -> int:
    fields = msgpack.unpackb(owner().secret_bytes()[:-8], raw=True)
    return int.from_bytes(fields[0], "little")


@pytest.mark.parametrize("where", [0, 1, 2])
def test_a_ciphertext_sharing_a_factor_with_n_is_refused_by_its_index(where: int) -> None:
    """In range but not a unit: p·k < n. The check is one gcd of the product; the index
    named is still the offending one."""
    c = cipher()
    fp, head = blob_elements(c.to_bytes(c.encrypt([5, -7, 11])))
    items = list(head[3])
    items[where] = element(secret_p() * 12345)
    with pytest.raises(ValidationError, match=rf"u\[{where}\] is not a unit in \(0, n\)"):
        c.from_bytes(rebuilt(fp, [3, 1, 2, items]), 3, "u", "party 'B'")


def _deviating_passive(party: Any, plan: Plan, value: int) -> None:
    """A passive party that sends C a 'gradient' encrypting ``value``."""
    party.send("C", "hello", Hello(60, 2))
    setup = party.recv("C", "setup")
    c = heu.OuCipher.from_public_bytes(setup.public_key, owner="A", min_bits=1024)
    party.send("B", "u", c.to_bytes(c.encrypt([0] * 30)))
    party.recv("B", "residual")
    party.send("C", "gradient", c.to_bytes(c.encrypt([value, 1])))
    party.send("B", "share", c.to_bytes(c.encrypt([0])))


@pytest.mark.parametrize("value", [1 << 300, -5, 0], ids=["beyond-range", "negative", "zero"])
def test_c_refuses_a_value_out_of_range_naming_the_sender(value: int) -> None:
    """OU's overflow attack needs C to decrypt a value beyond the masks' range: refused."""
    blocks, y = data(60, (2, 2))
    plan = make_plan("linear", epochs=1, batch_size=30, he="ou")
    roles: dict[str, Any] = {"C": partial(coordinator, plan=plan, keys=owner()),
                             "B": partial(active, X=blocks[1], y=y, plan=plan),
                             "A": partial(_deviating_passive, plan=plan, value=value)}
    with pytest.raises(ProtocolError, match=r"party 'A' sent masked gradients that decrypt "
                                            r"outside the range the protocol allows") as info:
        run_local(roles, timeout=60)
    assert info.value.party == "C"


def _lying_coordinator(party: Any, plan: Plan, public_key: bytes) -> None:
    for name in ("A", "B"):
        party.recv(name, "hello")
    party.broadcast("setup", Setup(public_key, None, plan.text(), {"A": 2, "B": 2}),
                    to=["A", "B"])


def test_a_party_refuses_a_malformed_key_in_the_setup() -> None:
    blocks, y = data(60, (2, 2))
    plan = make_plan("linear", epochs=1, batch_size=30, he="ou")
    fields, _ = ou_key_fields()
    roles: dict[str, Any] = {"C": partial(_lying_coordinator, plan=plan,
                                          public_key=key_with(fields, (4).to_bytes(8, "little"))),
                             "B": partial(active, X=blocks[1], y=y, plan=plan),
                             "A": partial(passive, X=blocks[0], plan=plan)}
    with pytest.raises(ProtocolError, match=r"party '[AB]' \(setup from 'C'\): the public key "
                                            r"is not an OU key"):
        run_local(roles, timeout=60)


def test_a_plan_the_key_cannot_hold_is_refused() -> None:
    c = cipher()
    with pytest.raises(ValidationError, match=r"masked values need 401 bits but the OU key's "
                                              rf"plaintexts hold {c.plaintext_bits}"):
        c.masks(1, 272)
    bounds = maths.value_bounds(maths.Precision(), 256, 1)
    assert bounds.gradient_bits + heu.MASK_BITS + 1 < c.plaintext_bits  # 1024 bits suffice
    with pytest.raises(ValidationError, match="too large for the key"):
        c.encrypt([1 << 400])


def test_the_coordinator_refuses_a_plan_its_key_cannot_hold_before_the_setup() -> None:
    """|G| < 2^k grows with the batch size: a 2^110-row batch needs k + 129 > 341 bits."""
    blocks, y = data(60, (2, 2))
    plan = make_plan("linear", epochs=1, batch_size=2**110, he="ou")
    roles: dict[str, Any] = {"C": partial(coordinator, plan=plan, keys=owner()),
                             "B": partial(active, X=blocks[1], y=y, plan=plan),
                             "A": partial(passive, X=blocks[0], plan=plan)}
    with pytest.raises(ValidationError, match=r"coordinator 'C': the masked gradients need "
                                              r"3\d\d bits but the OU key's plaintexts hold "
                                              r"34\d \(use a larger key_bits") as info:
        run_local(roles, timeout=60)
    assert info.value.party == "C"  # type: ignore[attr-defined]


def test_unmask_checks_what_c_returned() -> None:
    c = cipher()
    masks = c.masks(2, 60)
    assert c.unmask([r + g for r, g in zip(masks, [7, -9], strict=True)], masks, 60) == [7, -9]
    with pytest.raises(ValidationError, match="expected 2 ints"):
        c.unmask([0, masks[1]], masks, 60)
    with pytest.raises(ValidationError, match="not below 2"):
        c.unmask([masks[0] + (1 << 61), masks[1]], masks, 60)


# ---------------------------------------------------------------- weighted sums


@pytest.mark.parametrize("bits", [1, 20, 46, 61])
def test_weighted_sums_are_exact(bits: int) -> None:
    rng = np.random.default_rng(bits)
    m = rng.integers(-2**62, 2**62, size=33)
    w = rng.integers(-2**bits, 2**bits, size=(33, 4))
    w[:, 1] = 0  # an all-zero column
    w[:, 2] = rng.integers(-3, 4, size=33)  # a narrow column in its own window group
    c = cipher()
    got = owner().decrypt(c.weighted(c.encrypt(m), w), 200, positive=False, what="w",
                          sender="x")
    assert got == [int(v) for v in m.astype(object) @ w.astype(object)]


# ---------------------------------------------------------------- long randomness


def test_two_encryptions_of_one_value_differ_and_decrypt_equal() -> None:
    c = cipher()
    a, b = c.encrypt([42, -42]), c.encrypt([42, -42])
    assert c.stored(a) != c.stored(b)
    for ct in (a, b):
        assert owner().decrypt(ct, 8, positive=False, what="x", sender="x") == [42, -42]


def test_lengthen_multiplies_heus_ciphertext_by_a_long_power_of_h() -> None:
    c = cipher()
    raw = c._encryptor.encrypt(c._plain([3, -4]))  # HEU's own ciphertexts, short r
    r = [(1 << 223) + 12345, (1 << 223) + 999]
    longer = heu.lengthen(c, raw, r)
    assert c.stored(longer) == [s * pow(c.H, e, c.n) % c.n
                                for s, e in zip(c.stored(raw), r, strict=True)]
    assert owner().decrypt(longer, 8, positive=False, what="x", sender="x") == [3, -4]
    with pytest.raises(ValidationError, match="outside"):
        heu.lengthen(c, raw, [1 << 224, 1])


def test_encrypt_goes_through_lengthen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fresh ciphertext carries 224-bit randomness: encrypt returns lengthen's output."""
    c = cipher()
    seen: list[tuple[list[int], list[int]]] = []
    real = heu.lengthen

    def spy(cipher: heu.OuCipher, cts: Any, exponents: Any = None) -> Any:
        out = real(cipher, cts, exponents)
        seen.append((cipher.stored(cts), cipher.stored(out)))
        return out

    monkeypatch.setattr(heu, "lengthen", spy)
    ct = c.encrypt([1, 2, 3])
    assert len(seen) == 1 and seen[0][1] == c.stored(ct) and seen[0][0] != seen[0][1]


# ---------------------------------------------------------------- worker processes


def test_large_calls_split_over_worker_processes_give_the_same_ciphertexts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """workers=2: encrypt, weighted and products go to two processes, with the in-process
    results (a product of ciphertexts is one group element, however it is split)."""
    from islands.crypto import processes

    calls: list[str] = []
    real = processes.run_in_workers

    def spy(fn: Any, jobs: Any, workers: int, **kw: Any) -> Any:
        calls.append(f"{fn.__name__}x{len(jobs)}")
        return real(fn, jobs, workers, **kw)

    monkeypatch.setattr(heu, "run_in_workers", spy)
    one = cipher()
    two = heu.OuCipher.from_public_bytes(owner().public_bytes(), owner="t", min_bits=1024,
                                         workers=2)
    rng = np.random.default_rng(5)
    m = rng.integers(-2**40, 2**40, size=heu.PARALLEL_ENCRYPT * 2 + 3)
    ct = two.encrypt(m)
    assert owner().decrypt(ct, 41, positive=False, what="x", sender="x") == m.tolist()
    w = rng.integers(-2**20, 2**20, size=(m.size, 17))
    assert two.stored(two.weighted(ct, w)) == one.stored(one.weighted(ct, w))
    matrix = one.as_matrix(one.encrypt(rng.integers(-2**30, 2**30, size=40 * 6)), 40, 6)
    v = rng.integers(-2**12, 2**12, size=(40, 9))
    assert (one.stored(one.as_column(two.products(matrix, v)))
            == one.stored(one.as_column(one.products(matrix, v))))
    assert calls == ["_encrypt_partx2", "_weighted_partx2", "_products_partx2"]
    # small calls stay in this process; a value too large is refused before any worker
    calls.clear()
    two.weighted(two.encrypt(m[:5]), w[:5, :3])
    with pytest.raises(ValidationError, match="too large for the key"):
        two.encrypt([*m.tolist(), 1 << 700])
    assert calls == []
    with pytest.raises(ValidationError, match="nothing to encrypt"):
        two.encrypt([])  # HEU crashes the interpreter on an empty array: refused first


def test_every_worker_encryption_has_fresh_randomness(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two encryptions of the same values on two workers differ in every ciphertext, and
    the workers' code path (``_encrypt_part``, run here) encrypts through lengthen."""
    two = heu.OuCipher.from_public_bytes(owner().public_bytes(), owner="t", min_bits=1024,
                                         workers=2)
    values = [7] * (heu.PARALLEL_ENCRYPT * 2)
    a, b = two.stored(two.encrypt(values)), two.stored(two.encrypt(values))
    assert len(set(a)) == len(a) and not set(a) & set(b)
    seen: list[int] = []
    real = heu.lengthen

    def spy(cipher_: Any, cts: Any, exponents: Any = None) -> Any:
        seen.append(len(cipher_.stored(cts)))
        return real(cipher_, cts, exponents)

    monkeypatch.setattr(heu, "lengthen", spy)
    blob = heu._encrypt_part(owner().public_bytes(), [7, 8, 9])
    assert seen == [3] and len(two.stored(hnp.CiphertextArray.load_from(blob))) == 3
