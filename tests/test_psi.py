"""Private set intersection: the result equals the plain intersection, both parties agree on
the order, the curve arithmetic is right, what travels is blinded, bad input is refused."""

from __future__ import annotations

import inspect
import secrets
import unicodedata
from functools import partial

import numpy as np
import pytest

pytest.importorskip("cryptography")

from islands.crypto import psi
from islands.errors import ProtocolError, ValidationError
from islands.psi import PsiConfig, align, initiator, intersect, responder
from islands.psi.protocol import Hello, _order
from islands.runtime import Party, run_local
from islands.runtime.transcript import Transcript

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
    # A counts B's blinded IDs before its own leave (its size limit)
    assert tags[2:] == [("b", "blinded"), ("a", "blinded"), ("b", "double"), ("a", "matches")]


COMPOSED, DECOMPOSED = "Jos\u00e9", "Jose\u0301"  # one "José" typed two ways


def test_ids_that_look_the_same_match_under_nfc_and_keep_their_own_spelling() -> None:
    assert COMPOSED != DECOMPOSED
    a, b = align([DECOMPOSED, "Ann", "Zo\u00eb"], ["Zoe\u0308", COMPOSED, "Bob"], workers=1)
    # each party gets back its own values, so its rows map back to its own table
    assert a.ids == [DECOMPOSED, "Zo\u00eb"] and b.ids == [COMPOSED, "Zoe\u0308"]
    assert a.rows.tolist() == [0, 2] and b.rows.tolist() == [1, 0]
    assert intersect([COMPOSED], [DECOMPOSED], normalize="NFD") == [COMPOSED]
    # NFKC also folds compatibility forms: a full-width "ＩＤ１" is "ID1"
    assert intersect(["\uff29\uff24\uff11"], ["ID1"], normalize="NFKC") == ["\uff29\uff24\uff11"]


def test_without_normalisation_the_two_spellings_do_not_match() -> None:
    with pytest.raises(ValidationError, match="share no IDs"):
        intersect([COMPOSED], [DECOMPOSED], normalize=None)
    assert intersect([COMPOSED, "x"], [DECOMPOSED, "x"], normalize=None) == ["x"]
    assert intersect(["\uff29\uff24\uff11", "x"], ["ID1", "x"]) == ["x"]  # NFC keeps width


def test_two_ids_of_one_party_that_normalise_alike_are_refused_naming_both() -> None:
    with pytest.raises(ValidationError, match=r"'ids_b' parameter of intersect holds the IDs "
                       r"'Jos\\xe9' and 'Jose\\u0301'.*NFC"):
        intersect(["a"], [COMPOSED, "b", DECOMPOSED])
    # a role refuses them before it sends anything
    with pytest.raises(ValidationError, match=r"PSI party 'b'.*'Jos\\xe9' and 'Jose\\u0301'"):
        run_local({"a": partial(initiator, peer="b", ids=["a"], workers=1),
                   "b": partial(responder, peer="a", ids=[COMPOSED, DECOMPOSED],
                                workers=1)}, timeout=30)
    # with no normalisation they are two distinct IDs
    assert intersect([COMPOSED, DECOMPOSED], [DECOMPOSED], normalize=None) == [DECOMPOSED]


@pytest.mark.parametrize("bad", ["nfc", "NFX", 1, b"NFC"])
def test_an_unknown_normalisation_is_refused(bad: object) -> None:
    with pytest.raises(ValidationError, match="'normalize' parameter of intersect must be "
                       "one of 'NFC', 'NFKC', 'NFD', 'NFKD' or None"):
        intersect(["a"], ["a"], normalize=bad)  # type: ignore[arg-type]


def test_the_roles_refuse_different_normalisations_naming_both_settings() -> None:
    run = partial(run_local, timeout=30)
    with pytest.raises(ValidationError, match=r"party '[ab]' normalises string IDs with "
                       r"normalize=('NFC'|None) but party '[ab]' with normalize=('NFC'|None)"):
        run({"a": partial(initiator, peer="b", ids=[COMPOSED], workers=1),
             "b": partial(responder, peer="a", ids=[DECOMPOSED], workers=1, normalize=None)})
    with pytest.raises(ValidationError, match=r"normalize='(NFKC|NFD)' but party '[ab]' "
                       r"with normalize='(NFKC|NFD)'"):
        run({"a": partial(initiator, peer="b", ids=["x"], workers=1, normalize="NFKC"),
             "b": partial(responder, peer="a", ids=["x"], workers=1, normalize="NFD")})
    # the setting only touches strings: ints run whatever each party chose
    ok = run({"a": partial(initiator, peer="b", ids=[1, 2], workers=1, normalize=None),
              "b": partial(responder, peer="a", ids=[2], workers=1)})
    assert ok.results["a"].ids == ok.results["b"].ids == [2]


def test_both_parties_agree_on_the_order_whatever_the_spelling() -> None:
    # "é" (U+00E9) sorts after "z" but "e" + U+0301 before it: sorting the raw strings
    # would give the parties two different orders
    ids_a = ["z", COMPOSED, "Jose", "a\u0301"]
    ids_b = ["\u00e1", DECOMPOSED, "z", "Jose"]
    a, b = align(ids_a, ids_b, workers=1)
    assert [unicodedata.normalize("NFC", v) for v in a.ids] == \
        [unicodedata.normalize("NFC", v) for v in b.ids]
    assert [ids_a[r] for r in a.rows] == a.ids and [ids_b[r] for r in b.rows] == b.ids
    assert len(a.ids) == 4


def test_numpy_scalars_in_a_list_count_as_their_python_kind() -> None:
    # a list made from an array holds numpy scalars; each party keeps its own values
    assert intersect(list(np.arange(5)), [3, 4, 9]) == [3, 4]
    assert intersect(list(np.array(["a", "b"])), ["b", "c"]) == ["b"]
    assert intersect(list(np.array([b"a", b"b"])), [b"b"]) == [b"b"]


@pytest.mark.parametrize(("ids", "message"), [
    ([1, "bob", 3], r"all of one kind \(int.*Got a str at position 1"),
    (["a", "b", None], r"all of one kind \(str.*Got a NoneType at position 2"),
    ([1, True], "Got a bool at position 1"),
    ([None, "a"], "ints, strings or bytes. Got a NoneType at position 0"),
])
def test_mixed_ids_name_the_first_offending_position(ids: list[object], message: str) -> None:
    with pytest.raises(ValidationError, match=r"'ids_a' parameter of intersect.*" + message):
        intersect(ids, ["a"])


@pytest.mark.parametrize("normalize", ["NFC", None])
def test_a_lone_surrogate_is_named_with_its_position(normalize: psi.Normalization) -> None:
    # what reading a non-UTF-8 file with errors="surrogateescape" gives
    ids = ["ann", b"x\xff".decode("utf-8", "surrogateescape")]
    with pytest.raises(ValidationError, match=r"'ids_b' .* position 1.*pass IDs .* as bytes"):
        intersect(["ann"], ids, normalize=normalize)


@pytest.mark.parametrize("func", [intersect, align])
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"workers": 0}, "'workers'"), ({"workers": -1}, "'workers'"),
    ({"workers": 1.5}, "'workers'"), ({"workers": "2"}, "'workers'"),
    ({"workers": True}, "'workers'"), ({"timeout": 0}, "'timeout'"),
    ({"timeout": float("nan")}, "'timeout'"),
])
def test_workers_and_timeout_are_checked_before_any_message(
        func: object, kwargs: dict[str, object], message: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import islands.runtime

    def no_run(*args: object, **kw: object) -> None:
        raise AssertionError("a run started")

    monkeypatch.setattr(islands.runtime, "run_local", no_run)
    name = func.__name__  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match=f"{message} parameter of {name} must be"):
        func(["a"], ["a"], **kwargs)  # type: ignore[operator]


def test_a_role_checks_workers_before_its_hello() -> None:
    roles = {"a": partial(initiator, peer="b", ids=["x"], workers=0),
             "b": partial(responder, peer="a", ids=["x"])}
    with pytest.raises(ValidationError, match="'workers' parameter of PSI party 'a'") as info:
        run_local(roles, timeout=10)
    assert "hash_to_curve" not in str(info.value)


# --- a party bounds the other's set size (issue 22, finding 11) -----------------------
# A party that enters guesses learns which of them the victim holds: PSI cannot tell a
# guess from a real ID. The victim's only defence is to refuse a set far larger than its
# own before anything derived from its IDs leaves.

VICTIM = [f"patient-{i}" for i in range(1000)]
GUESSES = [f"patient-{i}" for i in range(0, 60_000, 2)]  # 30,000 guesses, 500 of them hits


def _sent_by(transcript: Transcript, name: str) -> list[str]:
    return [m.tag for m in transcript.records if m.sender == name]


@pytest.mark.parametrize("victim", ["a", "b"])
def test_a_peer_inflating_its_set_with_guesses_is_refused(victim: str) -> None:
    attacker = "b" if victim == "a" else "a"
    roles = {victim: (initiator if victim == "a" else responder),
             attacker: (initiator if attacker == "a" else responder)}
    log = Transcript(keep_payloads=True)
    with pytest.raises(ProtocolError, match=rf"PSI party '{victim}' refuses party "
                       rf"'{attacker}': it announced 30000 IDs.*max_peer_size = 10000 "
                       r"\(max_peer_ratio 10\.0 × this party's 1000 IDs\)") as info:
        run_local({victim: partial(roles[victim], peer=attacker, ids=VICTIM, workers=1),
                   attacker: partial(roles[attacker], peer=victim, ids=GUESSES, workers=1)},
                  timeout=60, transcript=log)
    assert info.value.party == victim and info.value.step == "hello"
    # the default refused it; the victim sent its size at most, nothing derived from an ID
    assert _sent_by(log, victim) in ([], ["hello"])
    assert not any(b"patient" in (m.data or b"") for m in log.records)


def _points_for(ids: list[str], salt: bytes) -> np.ndarray:
    encoded, _ = psi.encode_ids(ids, "ids", "test")
    return psi.blind(psi.new_key(), psi.hash_to_curve(encoded, salt, workers=1), workers=1)


def test_an_initiator_refuses_more_blinded_ids_than_the_responder_announced() -> None:
    # B announces 1,000 IDs in its hello, then sends 30,000 blinded guesses
    def liar(party: Party) -> None:
        hello = party.recv("a", "hello")
        party.send("a", "hello", Hello("str", len(VICTIM), "NFC"))
        party.send("a", "blinded", _points_for(GUESSES, hello.salt))
        party.recv("a", "blinded")  # would double A's values and learn the hits from matches

    log = Transcript(keep_payloads=True)
    with pytest.raises(ProtocolError, match=r"PSI party 'a' refuses party 'b': it sent 30000 "
                       r"blinded IDs.*max_peer_size = 10000") as info:
        run_local({"a": partial(initiator, peer="b", ids=VICTIM, workers=1), "b": liar},
                  timeout=60, transcript=log)
    assert info.value.party == "a" and info.value.step == "blinded"
    assert _sent_by(log, "a") == ["hello"]  # A's blinded set never left


def test_a_responder_refuses_more_blinded_ids_than_the_initiator_announced() -> None:
    # A announces 1,000 IDs, then sends 30,000 blinded guesses for B to raise to its key
    salt = secrets.token_bytes(32)

    def liar(party: Party) -> None:
        party.send("b", "hello", Hello("str", len(VICTIM), "NFC", salt))
        party.recv("b", "hello")
        party.send("b", "blinded", _points_for(GUESSES, salt))
        party.recv("b", "blinded")
        party.recv("b", "double")  # would match and learn which guesses B holds

    log = Transcript(keep_payloads=True)
    with pytest.raises(ProtocolError, match=r"PSI party 'b' refuses party 'a': it sent 30000 "
                       r"blinded IDs.*max_peer_size = 10000") as info:
        run_local({"a": liar, "b": partial(responder, peer="a", ids=VICTIM, workers=1)},
                  timeout=60, transcript=log)
    assert info.value.party == "b" and info.value.step == "blinded"
    # B's own blinded set went out before A's arrived (the two cross in flight); without
    # B's doubling of A's values it lets A test nothing, and no "double" left
    assert _sent_by(log, "b") == ["hello", "blinded"]


def test_a_party_that_raises_its_limit_runs_unbalanced_psi() -> None:
    small, large = VICTIM[:100], GUESSES[:5000]  # 50 times as many
    with pytest.raises(ProtocolError, match="max_peer_size = 1000"):
        intersect(small, large, workers=1)
    want = sorted(set(small) & set(large))
    assert intersect(small, large, workers=1, max_peer_ratio=50) == want
    assert intersect(large, small, workers=1, max_peer_size=5000, max_peer_ratio=1.0) == want
    assert intersect(small, large, workers=1, max_peer_ratio=None) == want
    # the ratio as written: 0.29 × 100 IDs allows 29 (not the 28 of 0.29 * 100 in floats)
    for n_b in (29, 30):
        roles = {"a": partial(initiator, peer="b", ids=small, workers=1, max_peer_ratio=0.29),
                 "b": partial(responder, peer="a", ids=small[:n_b], workers=1)}
        if n_b == 29:
            assert run_local(roles, timeout=60).results["a"].ids == sorted(small[:29])
            continue
        with pytest.raises(ProtocolError, match=r"announced 30 IDs.*max_peer_size = 29 "
                           r"\(max_peer_ratio 0\.29 × this party's 100 IDs\)"):
            run_local(roles, timeout=60)
    # the limit each role sets is its own: the large party accepts the small one anyway
    run = run_local({"a": partial(initiator, peer="b", ids=large, workers=1),
                     "b": partial(responder, peer="a", ids=small, workers=1,
                                  max_peer_size=5000)}, timeout=60)
    assert run.results["a"].ids == run.results["b"].ids == want
    with pytest.raises(ProtocolError, match=r"PSI party 'b' refuses party 'a': it announced "
                       r"5000 IDs.*max_peer_size = 4999\b"):
        run_local({"a": partial(initiator, peer="b", ids=large, workers=1),
                   "b": partial(responder, peer="a", ids=small, workers=1,
                                max_peer_size=4999)}, timeout=60)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_peer_size": 0}, "'max_peer_size' parameter of intersect must be an int >= 1 or "
                           "None. Got 0"),
    ({"max_peer_size": 2.5}, "'max_peer_size'"), ({"max_peer_size": True}, "'max_peer_size'"),
    ({"max_peer_ratio": 0}, "'max_peer_ratio' parameter of intersect must be a number > 0 "
                            "and finite, or None. Got 0"),
    ({"max_peer_ratio": -1.0}, "'max_peer_ratio'"),
    ({"max_peer_ratio": float("inf")}, "'max_peer_ratio'"),
    ({"max_peer_ratio": float("nan")}, "'max_peer_ratio'"),
    ({"max_peer_ratio": "10"}, "'max_peer_ratio'"),
])
def test_the_limit_is_checked_before_any_message(
        kwargs: dict[str, object], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import islands.runtime

    def no_run(*args: object, **kw: object) -> None:
        raise AssertionError("a run started")

    monkeypatch.setattr(islands.runtime, "run_local", no_run)
    with pytest.raises(ValidationError, match=message):
        intersect(["a"], ["a"], **kwargs)  # type: ignore[arg-type]


def test_a_role_checks_its_limit_before_its_hello() -> None:
    log = Transcript()
    with pytest.raises(ValidationError, match="'max_peer_ratio' parameter of PSI party 'b'"):
        run_local({"a": partial(initiator, peer="b", ids=["x"]),
                   "b": partial(responder, peer="a", ids=["x"], max_peer_ratio=-2)},
                  timeout=10, transcript=log)
    assert _sent_by(log, "b") == []


def test_align_intersect_and_the_roles_share_psi_configs_defaults() -> None:
    for func in (align, intersect, initiator, responder):
        params = inspect.signature(func).parameters
        for name, field in PsiConfig.model_fields.items():
            if name in params:
                assert params[name].default == field.default, (func.__name__, name)
    assert set(PsiConfig.model_fields) - {"timeout"} <= set(
        inspect.signature(initiator).parameters)
    # a configuration's values are the roles' keyword arguments (as a VFL federation passes them)
    config = PsiConfig.build(None, normalize="NFKC", max_peer_size=5)
    got = run_local({"a": partial(initiator, peer="b", ids=["\u2460", "x"],
                                  **config.model_dump(exclude={"timeout"})),
                     "b": partial(responder, peer="a", ids=["1", "y"],
                                  **config.model_dump(exclude={"timeout"}))}, timeout=30)
    assert got.results["a"].ids == ["\u2460"] and got.results["b"].ids == ["1"]


@pytest.mark.parametrize("normalize", ["NFC", "NFKC", "NFD", "NFKD", None])
def test_the_bulk_encoding_is_the_id_by_id_encoding(normalize: psi.Normalization) -> None:
    # composing, decomposing and compatibility characters, combining marks first in an ID,
    # Hangul jamo, NUL, CR and the separators the bulk path splits on must not move
    rng = np.random.default_rng(3)
    alphabet = [chr(c) for c in (*range(32, 127), 0x0, 0xD, 0x85, 0x2028, 0x301, 0x308,
                                 0x327, 0xE9, 0x1E9B, 0xFB01, 0x2126, 0x212B, 0x1100,
                                 0x1161, 0x11A8, 0xAC00, 0x344, 0xF73, 0x2460, 0x3000,
                                 0xFF21, 0x1D400)]
    for _ in range(100):
        ids = list({"".join(rng.choice(alphabet, size=rng.integers(0, 7)))
                    for _ in range(40)})
        slow = [psi._encode_one(v, "str", normalize, "ids", "t", i) for i, v in enumerate(ids)]
        assert psi._encode_bulk(ids, "str", normalize) == slow
    ints = [int(x) for x in rng.integers(-2**62, 2**62, size=500)] + [10**40, -10**40, 0]
    assert psi._encode_bulk(ints, "int", None) == [b"i%d" % v for v in ints]
    # what the bulk path leaves to the ID-by-ID one (and its errors)
    assert psi._encode_bulk(["a\nb", "c"], "str", normalize) is None
    assert psi._encode_bulk(["a", "\ud800"], "str", normalize) is None
    assert psi._encode_bulk(["a", np.str_("b")], "str", normalize) is None
    assert psi.encode_ids(["a\nb", "c"], "ids", "t") == ([b"sa\nb", b"sc"], "str")


def test_the_aligned_order_is_the_same_in_numpy_and_python() -> None:
    rng = np.random.default_rng(5)
    for keys, kind in (([int(x) for x in rng.permutation(1000) - 500], "int"),
                       ([10**30, -1, 5], "int"),
                       ([b"sb", b"sa", b"sab", b"s"], "str"),
                       ([b"ba\x00", b"ba", b"b\x00", b"b"], "bytes")):
        assert [keys[i] for i in _order(keys, kind)] == sorted(keys)
