"""WOE and IV across parties (issue 39, part 5): exact under encryption, checked on receipt."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.crypto import heu
from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local
from islands.vfl.secureboost import packing, woe
from islands.vfl.secureboost.config import WoeConfig
from islands.vfl.secureboost.maths import bin_edges
from islands.vfl.secureboost.protocol import Setup
from islands.vfl.secureboost.woe import information_values, iv_strength, woe_iv

needs_heu = pytest.mark.skipif(not heu.available(), reason="sf-heu is not importable here")
ROOT = Path(__file__).resolve().parents[1]
OU: dict[str, Any] = {"he": "ou", "key_bits": 1024, "insecure_keys": True, "workers": 1}


def data(n: int = 300, seed: int = 0) -> tuple[list[Any], Any, Any]:
    """Two passive parties and B; some NaNs, one informative feature per party."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int64)
    a1 = rng.normal(size=(n, 3))
    a1[:, 0] += 1.5 * y
    a1[rng.random(n) < 0.1, 1] = np.nan
    a2 = np.column_stack([rng.integers(0, 4, n), rng.normal(size=n) - y])
    a2[rng.random(n) < 0.2, 1] = np.nan
    b = rng.normal(size=(n, 2))
    b[:, 1] += y
    return [a1, a2], b, y


def reference(column: Any, y: Any, max_bins: int) -> tuple[float, list[float], float]:
    """WOE and IV of one column by the formulas, bin by bin (no islands code but the cuts)."""
    edges = bin_edges(column, max_bins)
    bins = np.where(np.isnan(column), max_bins, np.searchsorted(edges, column, side="right"))
    E, N = int(y.sum()), int((1 - y).sum())
    iv, per_bin = 0.0, []
    for b in range(max_bins + 1):
        e = float(np.sum((bins == b) & (y == 1)))
        n = float(np.sum((bins == b) & (y == 0)))
        if e + n == 0:
            per_bin.append(math.nan)
            continue
        if e == 0 or n == 0:
            e, n = e + 0.5, n + 0.5
        w = math.log((e / E) / (n / N))
        per_bin.append(w)
        iv += (e / E - n / N) * w
    return iv, per_bin[:-1], per_bin[-1]


# ---------------------------------------------------------------- maths


def test_woe_and_iv_of_a_small_table_by_hand() -> None:
    events = np.array([[10, 30, 0, 0]])
    nonevents = np.array([[40, 20, 40, 0]])
    w, iv = woe_iv(events, nonevents)
    E, N = 40, 100
    want = [math.log((10 / E) / (40 / N)), math.log((30 / E) / (20 / N)),
            math.log((0.5 / E) / (40.5 / N))]  # empty cell: 0.5 added to both counts
    # rtol: the same formula in another order of operations
    np.testing.assert_allclose(w[0, :3], want, rtol=1e-12)
    assert math.isnan(w[0, 3])  # no row: no WOE
    terms = [(10 / E - 40 / N), (30 / E - 20 / N), (0.5 / E - 40.5 / N)]
    assert iv[0] == pytest.approx(sum(t * x for t, x in zip(terms, want, strict=True)),
                                  rel=1e-12)
    assert all(t * x >= 0 for t, x in zip(terms, want, strict=True))
    with pytest.raises(ValueError, match="both events and non-events"):
        woe_iv(np.array([[0, 0]]), np.array([[3, 4]]))


def test_iv_strength_reads_the_usual_bands() -> None:
    assert [iv_strength(v) for v in (0.0, 0.019, 0.02, 0.099, 0.1, 0.3, 0.5, 0.51)] == [
        "useless", "useless", "weak", "weak", "medium", "strong", "strong", "suspicious"]


# ---------------------------------------------------------------- the federation


@pytest.mark.parametrize("scheme", [pytest.param("ou", marks=needs_heu), "paillier"])
def test_encrypted_equals_the_clear_and_the_formulas_on_the_joined_data(scheme: str) -> None:
    blocks, b, y = data()
    clear = information_values(blocks, b, y, max_bins=8, he="none")
    with pytest.warns(UserWarning, match="insecure"):
        enc = information_values(blocks, b, y, max_bins=8, **{**OU, "he": scheme})
    assert enc.parties == clear.parties == ("B", "A1", "A2")
    assert (enc.events, enc.nonevents) == (int(y.sum()), int((1 - y).sum()))
    for fe, fc in zip(enc.features, clear.features, strict=True):
        assert (fe.party, fe.feature) == (fc.party, fc.feature)
        assert np.array_equal(fe.events, fc.events) and np.array_equal(fe.nonevents, fc.nonevents)
        assert (fe.events_missing, fe.nonevents_missing) == (fc.events_missing,
                                                             fc.nonevents_missing)
        assert fe.iv == fc.iv  # the same integers through the same function
    joined = {"B": b, "A1": blocks[0], "A2": blocks[1]}
    for f in enc.features:
        iv, per_bin, missing = reference(joined[f.party][:, f.feature], y, 8)
        # rtol: the same sums in another order
        assert f.iv == pytest.approx(iv, rel=1e-12)
        np.testing.assert_allclose(f.woe, per_bin, rtol=1e-12)
        assert (math.isnan(missing) and math.isnan(f.woe_missing)) or \
            f.woe_missing == pytest.approx(missing, rel=1e-12)
        assert f.edges is not None
        assert np.array_equal(f.edges, bin_edges(joined[f.party][:, f.feature], 8))
    # the informative features lead their parties
    ivs = enc.iv()
    assert int(np.argmax(ivs["A1"])) == 0 and int(np.argmax(ivs["B"])) == 1
    assert int(np.argmax(ivs["A2"])) == 1


def test_a_copy_of_the_label_is_suspicious_and_noise_is_useless() -> None:
    rng = np.random.default_rng(1)
    n = 4000
    y = rng.integers(0, 2, n)
    X_a = np.column_stack([y, rng.normal(size=n)])
    result = information_values(X_a, rng.normal(size=(n, 1)), y, max_bins=10, he="none")
    a = result.of("A")
    assert a[0].iv > 5 and a[0].strength == "suspicious"
    assert a[1].iv < 0.02 and a[1].strength == "useless"  # E[IV] ≈ 9·(1/E + 1/N) ≈ 0.009
    assert result.select(0.02) == {"B": [], "A": [0]}
    table = result.table()
    assert table["iv"] == sorted(table["iv"], reverse=True)
    assert (table["party"][0], table["feature"][0]) == ("A", 0)


def test_missing_values_have_their_own_bin() -> None:
    rng = np.random.default_rng(2)
    n = 200
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 2))
    gone = rng.random(n) < 0.25
    x[gone, 0] = np.nan
    x[:, 1] = np.nan  # every value missing: one bin, IV 0
    result = information_values(x, rng.normal(size=(n, 1)), y, max_bins=6, he="none")
    f0, f1 = result.of("A")
    assert (f0.events_missing, f0.nonevents_missing) == (int(y[gone].sum()),
                                                         int((1 - y[gone]).sum()))
    assert f0.events.sum() + f0.events_missing == y.sum()
    assert f1.events.sum() == 0 and f1.iv == 0.0
    assert f1.edges is not None and f1.edges.size == 0
    assert result.table()["missing"][-1] == 1.0
    assert math.isnan(result.of("B")[0].woe_missing)


def test_two_classes_of_any_kind_map_the_larger_to_the_event() -> None:
    blocks, b, y = data(120)
    words = np.where(y == 1, "yes", "no")
    by_words = information_values(blocks[0], b, words, he="none")
    by_ints = information_values(blocks[0], b, y, he="none")
    assert by_words.event_label == "yes" and by_ints.event_label == 1
    assert [f.iv for f in by_words.features] == [f.iv for f in by_ints.features]


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(("change", "said"), [
    (lambda xa, xb, y: (np.where(xa == xa[0, 0], np.inf, xa), xb, y), "finite"),
    (lambda xa, xb, y: (xa, xb, np.zeros_like(y)), "2 classes"),
    (lambda xa, xb, y: (xa, xb, np.r_[y[:-1], 2]), "2 classes"),
    (lambda xa, xb, y: (xa, xb, np.r_[y[:-1], np.nan].astype(float)), "finite"),
    (lambda xa, xb, y: (xa[:-1], xb, y), "rows"),
    (lambda xa, xb, y: (xa, xb, y[:-1]), "one label per row"),
    (lambda xa, xb, y: ([], xb, y), "at least one passive"),
], ids=["inf", "one-class", "three-classes", "nan-label", "rows", "labels", "no-passive"])
def test_bad_input_is_refused_before_any_message(monkeypatch: pytest.MonkeyPatch,
                                                 change: Any, said: str) -> None:
    monkeypatch.setattr(woe, "run_local", lambda *a, **k: pytest.fail("a message was sent"))
    blocks, b, y = data(50)
    xa, xb, target = change(blocks[0], b, y)
    with pytest.raises(ValidationError, match=said):
        information_values(xa, xb, target, he="none")


def test_bad_settings_name_the_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(woe, "run_local", lambda *a, **k: pytest.fail("a message was sent"))
    blocks, b, y = data(50)
    for settings, said in (({"max_bins": 200}, "max_bins"), ({"max_bins": 1}, "max_bins"),
                           ({"key_bits": 1024}, "key_bits"), ({"he": "rsa"}, "'he'"),
                           ({"workers": 0}, "workers"), ({"timeout": -1}, "timeout")):
        with pytest.raises(ValidationError, match=said):
            information_values(blocks, b, y, **settings)
    monkeypatch.undo()
    result = information_values(blocks, b, y, he="none")
    with pytest.raises(ValidationError, match="threshold"):
        result.select(math.nan)
    with pytest.raises(ValidationError, match="no party"):
        result.of("C")


# ---------------------------------------------------------------- what each party checks


def roles(blocks: list[Any], b: Any, y: Any, plan: WoeConfig,
          theirs: WoeConfig | None = None) -> dict[str, Any]:
    names = [f"A{i + 1}" for i in range(len(blocks))]
    out: dict[str, Any] = {"B": lambda p: woe.active(p, b, y, passive=names, config=plan,
                                                     workers=1)}
    for name, x in zip(names, blocks, strict=True):
        out[name] = (lambda p, x=x: woe.passive(p, x, active="B", config=theirs or plan,
                                                workers=1))
    return out


def test_a_passive_party_refuses_a_different_plan() -> None:
    blocks, b, y = data(60)
    run = roles(blocks[:1], b, y, WoeConfig.build(None, he="none"),
                WoeConfig.build(None, he="none", max_bins=16))
    result = run_local(run, timeout=30, tolerate=list(run))
    assert "max_bins" in str(result.failures["A1"])


def tamper_counts(monkeypatch: pytest.MonkeyPatch, encrypted: bool) -> None:
    honest = woe._bin_sums

    def tampered(codes: Any, received: Any, buckets: int, cipher: Any, per: int) -> Any:
        (value,) = honest(codes, received, buckets, cipher, per)
        if cipher is None:  # one more event in feature 0's first bin
            value = value.copy()
            value[0, 0] += 1
            return [value]
        cts = cipher.from_bytes(value, packing.blocks(codes.shape[1] * buckets, per, buckets),
                                "c", "t")
        one = cipher.encrypt([1 << packing.PAIR_SHIFT])  # the lowest digit: bin 0's events
        return [cipher.to_bytes(cipher.concat([cipher.add(cipher.take(cts, [0]), one),
                                               cipher.take(cts, range(1, cts.rows))]))]

    monkeypatch.setattr(woe, "_bin_sums", tampered)


@pytest.mark.parametrize("encrypted", [
    False, pytest.param(True, marks=needs_heu)], ids=["clear", "ou"])
def test_the_active_party_refuses_counts_that_do_not_add_up(
        monkeypatch: pytest.MonkeyPatch, encrypted: bool) -> None:
    blocks, b, y = data(120)
    tamper_counts(monkeypatch, encrypted)
    plan = WoeConfig.build(None, he="ou" if encrypted else "none", key_bits=1024,
                           insecure_keys=True)
    run = roles(blocks[:1], b, y, plan)
    result = run_local(run, timeout=60, tolerate=list(run))
    failure = result.failures["B"]
    assert isinstance(failure, ProtocolError) and failure.step == "counts"
    assert "'A1'" in str(failure) and "do not add up" in str(failure)


def test_a_passive_party_refuses_malformed_labels() -> None:
    blocks = data(60)[0]
    plan = WoeConfig.build(None, he="none")

    def rogue(party: Any) -> None:
        party.recv("A1", "hello")
        party.send("A1", "setup", Setup(b"", plan.plan_text()))
        party.send("A1", "labels", woe.Labels([np.full(60, 2, np.int64),
                                               np.full(60, -1, np.int64)]))

    run = {"B": rogue, "A1": lambda p: woe.passive(p, blocks[0], active="B", config=plan)}
    result = run_local(run, timeout=30, tolerate=list(run))
    failure = result.failures["A1"]
    assert isinstance(failure, ProtocolError) and failure.step == "labels"


def test_the_active_party_refuses_rows_that_do_not_match() -> None:
    blocks, b, y = data(60)
    run = roles([blocks[0][:-1]], b, y, WoeConfig.build(None, he="none"))
    result = run_local(run, timeout=30, tolerate=list(run))
    assert isinstance(result.failures["B"], ProtocolError)
    assert "59 aligned rows" in str(result.failures["B"])


# ---------------------------------------------------------------- the docs


@needs_heu
def test_the_docs_example_runs() -> None:
    text = (ROOT / "docs" / "vfl.md").read_text(encoding="utf-8")
    section = text.split("## Feature statistics (WOE and IV)", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/vfl.md", "exec"), namespace)
    result = namespace["result"]
    assert len(result.features) == 30 and set(namespace["keep"]) == {"B", "A"}
    assert namespace["woe"].shape == (10,)
    assert max(result.table()["iv"]) > 0.5  # breast cancer: a few features separate well
