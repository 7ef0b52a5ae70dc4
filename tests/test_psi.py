"""Private set intersection: the result equals the plain intersection, both parties agree on
the order, the curve arithmetic is right, what travels is blinded, bad input is refused."""

from __future__ import annotations

import secrets
from functools import partial

import numpy as np
import pytest

pytest.importorskip("cryptography")

from islands.crypto import psi
from islands.errors import ValidationError
from islands.psi import align, initiator, intersect, responder
from islands.runtime import run_local

P = 2**255 - 19


@pytest.mark.parametrize("overlap", [0.01, 0.5, 1.0])
def test_psi_equals_the_plain_intersection(overlap: float) -> None:
    rng = np.random.default_rng(int(overlap * 100))
    universe = rng.choice(10**9, size=3000, replace=False)
    n_a, n_b = 1000, 1400
    common = round(overlap * n_a)
    a = universe[:n_a]
    b = np.concatenate([a[:common], universe[n_a:n_a + n_b - common]])
    rng.shuffle(b)
    got_a, got_b = align(a.tolist(), b.tolist(), workers=1)
    want = set(a.tolist()) & set(b.tolist())
    assert set(got_a.ids) == want and len(got_a.ids) == len(want)
    assert got_a.ids == got_b.ids  # one aligned order for both
    assert [a[r] for r in got_a.rows] == got_a.ids and [b[r] for r in got_b.rows] == got_b.ids
    assert got_a.peer_size == n_b and got_b.peer_size == n_a


def test_no_overlap_is_a_clear_error_for_both_parties() -> None:
    with pytest.raises(ValidationError, match="share no IDs"):
        intersect(["a", "b"], ["c", "d"])


def test_small_examples_and_kinds() -> None:
    assert intersect(["ann", "bob", "eve"], ["eve", "ann", "zoe"]) == ["ann", "eve"]
    assert intersect([b"\x00\x01", b"\x02"], [b"\x02"]) == [b"\x02"]
    assert intersect(np.array([5, 3, 9]), [9, 5]) == [5, 9]
    assert intersect([10, 9, 100], [100, 9, 10]) == [9, 10, 100]  # by value, not as text
    with pytest.raises(ValidationError, match="ids_a holds int IDs but ids_b holds str"):
        intersect([1, 2], ["1", "2"])


@pytest.mark.parametrize(("ids", "match"), [
    ([], "is empty"),
    (["a", "b", "a"], "repeats the ID 'a'"),
    (["a", 1], "all of one kind"),
    ([1.5, 2.5], "ints, strings or bytes"),
    ("abc", "a sequence of IDs"),
])
def test_bad_ids_are_refused_before_anything_runs(ids: object, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        intersect(ids, ["a"])


def test_the_roles_refuse_a_kind_mismatch_naming_both_parties() -> None:
    with pytest.raises(ValidationError, match=r"party '[ab]' holds (int|str) IDs but party"):
        run_local({"a": partial(initiator, peer="b", ids=[1, 2]),
                   "b": partial(responder, peer="a", ids=["1"])}, timeout=30)


def test_blinding_commutes_and_hashes_land_on_the_curve() -> None:
    enc, kind = psi.encode_ids([f"id-{i}" for i in range(200)], "ids", "t")
    assert kind == "str" and enc[0] == b"sid-0"
    salt = secrets.token_bytes(32)
    pts = psi.hash_to_curve(enc, salt, workers=1)
    for row in pts[:50]:
        u = int.from_bytes(row.tobytes(), "little")
        assert u < P and pow((u**3 + 486662 * u**2 + u) % P, (P - 1) // 2, P) == 1
    assert not np.array_equal(psi.hash_to_curve(enc, secrets.token_bytes(32), workers=1),
                              pts)  # a fresh salt, fresh images
    a, b = psi.new_key(), psi.new_key()
    ab = psi.blind(b, psi.blind(a, pts, workers=1), workers=1)
    ba = psi.blind(a, psi.blind(b, pts, workers=1), workers=1)
    assert np.array_equal(ab, ba)
    assert len({r.tobytes() for r in ab}) == len(enc)


def test_the_pool_gives_the_same_points_as_one_process() -> None:
    enc, _ = psi.encode_ids(list(range(25_000)), "ids", "t")  # above the parallel cut-off
    salt, key = secrets.token_bytes(32), psi.new_key()
    one = psi.blind(key, psi.hash_to_curve(enc, salt, workers=1), workers=1)
    two = psi.blind(key, psi.hash_to_curve(enc, salt, workers=2), workers=2)
    assert np.array_equal(one, two)


def test_blind_refuses_malformed_points_and_keys() -> None:
    key = psi.new_key()
    with pytest.raises(ValidationError, match="shape"):
        psi.blind(key, np.zeros((3, 31), dtype=np.uint8))
    with pytest.raises(ValidationError, match="invalid point"):
        psi.blind(key, np.zeros((1, 32), dtype=np.uint8))  # u = 0 has order 1
    with pytest.raises(ValidationError, match="'key'"):
        psi.blind(b"short", np.zeros((1, 32), dtype=np.uint8))


def test_nothing_sent_holds_an_id_or_its_plain_hash() -> None:
    ids_a = [f"patient-{i}" for i in range(100)]
    ids_b = [f"patient-{i}" for i in range(50, 150)]
    run = run_local({"a": partial(initiator, peer="b", ids=ids_a, workers=1),
                     "b": partial(responder, peer="a", ids=ids_b, workers=1)},
                    timeout=30, keep_payloads=True)
    wire = b"".join(m.data or b"" for m in run.transcript)
    assert wire and b"patient" not in wire
    assert run.results["a"].ids == run.results["b"].ids == sorted(set(ids_a) & set(ids_b))
    tags = [(m.sender, m.tag) for m in run.transcript]
    assert sorted(tags[:2]) == [("a", "hello"), ("b", "hello")]
    assert sorted(tags[2:5]) == [("a", "blinded"), ("b", "blinded"), ("b", "double")]
    assert tags[5] == ("a", "matches") and tags.index(("b", "blinded")) < tags.index(
        ("b", "double"))
