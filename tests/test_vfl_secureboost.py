"""SecureBoost (issue 39): XGBoost's maths, lossless under encryption, what each party checks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.crypto import heu
from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local
from islands.vfl import SecureBoostClassifier, SecureBoostRegressor
from islands.vfl.secureboost import packing, protocol
from islands.vfl.secureboost.config import BoostConfig
from islands.vfl.secureboost.maths import (
    Objective,
    Params,
    apply_bins,
    bin_edges,
    quantise,
)
from islands.vfl.secureboost.reference import fit_reference

needs_heu = pytest.mark.skipif(not heu.available(), reason="sf-heu is not importable here")


def data(n: int, widths: tuple[int, ...], kind: str = "binary", seed: int = 0,
         missing: float = 0.05) -> tuple[list[Any], Any]:
    rng = np.random.default_rng(seed)
    blocks = [rng.normal(size=(n, w)) for w in widths]
    for b in blocks:
        b[rng.random(b.shape) < missing] = np.nan
    full = np.nan_to_num(np.hstack(blocks))
    z = full @ rng.normal(size=full.shape[1]) + 0.5 * np.sin(3 * full[:, 0])
    if kind == "binary":
        return blocks, (z + 0.3 * rng.normal(size=n) > 0).astype(float)
    if kind == "multiclass":
        return blocks, np.digitize(z, np.quantile(z, [0.33, 0.66])).astype(float)
    return blocks, 10 * z + rng.normal(size=n)


def federate(blocks: list[Any], y: Any, config: BoostConfig, classes: int = 2,
             workers: int = 1) -> protocol.ActiveOutcome:
    names = [f"A{i}" for i in range(1, len(blocks))]
    roles: dict[str, Any] = {"B": lambda p: protocol.active(
        p, blocks[0], y, passive=names, config=config, classes=classes, workers=workers)}
    for name, x in zip(names, blocks[1:], strict=True):
        roles[name] = (lambda p, x=x: protocol.passive(p, x, active="B", config=config,
                                                       workers=workers))
    return run_local(roles, timeout=300).results["B"]


def reference(blocks: list[Any], y: Any, config: BoostConfig, classes: int = 2,
              train: Any = None) -> Any:
    return fit_reference(blocks, y, config.objective_for(classes), config.params(),
                         rounds=config.n_estimators, max_bins=config.max_bins,
                         seed=config.seed, sampling=config.sampling(), train=train,
                         early_stopping_rounds=config.early_stopping_rounds,
                         allowed=(partial(config.allowed, parties=len(blocks))
                                  if config.hardened() else None),
                         subtract=config.subtraction)


def config(**settings: Any) -> BoostConfig:
    values = {"objective": "binary", "n_estimators": 3, "he": "ou", "key_bits": 1024,
              "insecure_keys": True, **settings}
    return BoostConfig.build(None, **values)


def same_trees(a: Any, b: Any) -> None:
    assert len(a) == len(b)
    for built_a, built_b in zip(a, b, strict=True):
        for ta, tb in zip(built_a, built_b, strict=True):
            assert ta.party == tb.party and ta.record == tb.record
            assert ta.left == tb.left and ta.value == tb.value


# ---------------------------------------------------------------- the maths is XGBoost's


@pytest.mark.parametrize("kind", ["binary", "regression", "multiclass"])
def test_the_reference_equals_xgboost_hist_on_the_same_bins(kind: str) -> None:
    xgb = pytest.importorskip("xgboost")
    blocks, y = data(600, (4, 5), kind, missing=0.0)
    X = np.hstack(blocks)
    classes = 3 if kind == "multiclass" else 2
    objective = Objective(kind, classes if kind == "multiclass" else 1)
    params = Params(max_depth=3, learning_rate=0.3)
    ref = fit_reference(blocks, y, objective, params, rounds=8, max_bins=16, seed=0)
    raw = ref.raw(blocks)
    edges = [bin_edges(X[:, j], 16) for j in range(X.shape[1])]
    codes = apply_bins(X, edges, 16).astype(np.float64)
    base = np.tile(ref.boosted.base, (len(y), 1))
    settings = {"n_estimators": 8, "max_depth": 3, "learning_rate": 0.3, "max_bin": 64,
                "tree_method": "hist", "n_jobs": 1}
    if kind == "regression":
        model = xgb.XGBRegressor(**settings).fit(codes, y, base_margin=base[:, 0])
        theirs = model.predict(codes, output_margin=True, base_margin=base[:, 0])
    elif kind == "binary":
        model = xgb.XGBClassifier(**settings).fit(codes, y, base_margin=base[:, 0])
        theirs = model.predict(codes, output_margin=True, base_margin=base[:, 0])
    else:
        model = xgb.XGBClassifier(objective="multi:softprob", **settings).fit(
            codes, y, base_margin=base)
        theirs = model.predict(codes, output_margin=True, base_margin=base)
    scale = max(1.0, float(np.abs(raw).max()))
    assert np.max(np.abs(np.reshape(theirs, raw.shape) - raw)) < 1e-5 * scale


def test_quantised_sums_are_exact_below_two_to_the_52() -> None:
    rng = np.random.default_rng(1)
    g, h = rng.normal(size=10_000), rng.random(10_000)
    gi, hi, frac = quantise(g, h)
    assert frac <= 52
    assert int(np.abs(gi).sum()) < 2**52 and int(hi.sum()) < 2**52
    assert np.max(np.abs(gi / 2.0**frac - g)) <= 2.0**-frac


def test_a_target_too_large_to_quantise_is_refused() -> None:
    with pytest.raises(ValueError, match="scale the target"):
        quantise(np.full(10, 1e300), np.ones(10))


def test_missing_values_learn_their_direction() -> None:
    blocks, y = data(400, (2, 2), missing=0.0)
    blocks[1][:, 0] = np.where(y > 0, np.nan, blocks[1][:, 0])  # missing means positive
    ref = reference(blocks, y, config(he="none", n_estimators=1, max_depth=1))
    (tree,) = ref.boosted.trees[0]
    assert tree.party[0] == 1
    record = ref.tables[1].records[tree.record[0]]
    assert record.feature == 0
    leaf = tree.left[0] if record.missing_left else tree.right[0]
    assert tree.value[leaf] > 0


# ---------------------------------------------------------------- packing


def test_packed_pairs_and_compressed_digits_round_trip_at_the_extremes() -> None:
    top = 2**52 - 1
    g = np.array([top, -top, 0, -1, 1], dtype=np.int64)
    h = np.array([top, 0, top, 1, 0], dtype=np.int64)
    G, H = packing.unpack(packing.pack(g, h))
    assert G.tolist() == g.tolist() and H.tolist() == h.tolist()
    values = packing.pack(g, h)
    per = 3
    compressed = [sum(v << (j * packing.SLOT_BITS) for j, v in enumerate(values[k:k + per]))
                  for k in range(0, len(values), per)]
    assert packing.unpack_digits(compressed, per, len(values)) == values
    with pytest.raises(ValueError):
        packing.unpack_digits(compressed, per, len(values) - 1)


@needs_heu
@pytest.mark.parametrize("rows", [300, 2400], ids=["single", "pairs"])
@pytest.mark.parametrize("workers", [1, 2])
def test_encrypted_bucket_sums_equal_the_clear_sums(rows: int, workers: int) -> None:
    key = owner()
    cipher = heu.OuCipher.from_public_bytes(key.public_bytes(), owner="t", min_bits=1024,
                                            workers=workers)
    rng = np.random.default_rng(2)
    g = rng.integers(-2**40, 2**40, rows)
    h = rng.integers(0, 2**40, rows)
    cts = cipher.encrypt(packing.pack(g, h))
    buckets, cols = 33, 5
    order = np.ascontiguousarray(rng.integers(0, buckets, (rows, cols)).astype(np.int8))
    masks = [(rng.random(rows) < 0.4).astype(np.int8), np.ones(rows, np.int8)]
    per = packing.per_plaintext(cipher.plaintext_bits)
    sums = cipher.bucket_sums(cts, order, masks, buckets, per=per,
                              shift_bits=packing.SLOT_BITS)
    for mask, column in zip(masks, sums, strict=True):
        count = cols * buckets
        plain = key.decrypt(column, per * packing.SLOT_BITS - 1, positive=False, what="t",
                            sender="t")
        G, H = packing.unpack(packing.unpack_digits(plain, per, count, buckets))
        for j in range(cols):
            want_g = np.bincount(order[:, j], weights=g * mask, minlength=buckets)
            want_h = np.bincount(order[:, j], weights=h * mask, minlength=buckets)
            assert np.array_equal(G[j * buckets:(j + 1) * buckets], want_g)
            assert np.array_equal(H[j * buckets:(j + 1) * buckets], want_h)


@cache
def owner() -> heu.OuKeyOwner:
    return heu.OuKeyOwner(1024, workers=1)


# ---------------------------------------------------------------- lossless


LOSSLESS = {
    "default": {},
    "unpacked-uncompressed-no-subtraction": {"packing": False, "compression": False,
                                             "subtraction": False},
    "sampled": {"subsample": 0.7, "colsample_bytree": 0.6, "seed": 5},
    "goss": {"goss": True, "top_rate": 0.3, "other_rate": 0.2},
    "hardened": {"active_first_trees": 1, "active_top_levels": 1},
    "mix": {"mix": True, "n_estimators": 4},
    "paillier": {"he": "paillier", "n_estimators": 2},
    "early-stopping": {"n_estimators": 6, "early_stopping_rounds": 1,
                       "validation_fraction": 0.3, "learning_rate": 1.0},
}


@needs_heu
@pytest.mark.parametrize("settings", LOSSLESS.values(), ids=LOSSLESS.keys())
def test_the_encrypted_federation_grows_the_references_trees(settings: dict[str, Any]) -> None:
    blocks, y = data(2400, (2, 3, 2))
    plan = config(**settings)
    out = federate(blocks, y, plan)
    ref = reference(blocks, y, plan, train=out.train)
    same_trees(out.model.trees, ref.boosted.trees)
    assert np.array_equal(out.boosted.raw, ref.boosted.raw)
    assert any(p > 0 for built in out.model.trees for t in built for p in t.party)


@needs_heu
@pytest.mark.parametrize("kind", ["regression", "multiclass"])
def test_regression_and_multiclass_are_lossless_too(kind: str) -> None:
    blocks, y = data(500, (2, 3), kind)
    classes = 3 if kind == "multiclass" else 2
    plan = config(objective=kind, n_estimators=2)
    out = federate(blocks, y, plan, classes)
    ref = reference(blocks, y, plan, classes)
    same_trees(out.model.trees, ref.boosted.trees)
    assert np.array_equal(out.boosted.raw, ref.boosted.raw)


def test_in_the_clear_the_same_messages_give_the_same_trees() -> None:
    blocks, y = data(300, (2, 2, 2))
    plan = config(he="none")
    out = federate(blocks, y, plan)
    same_trees(out.model.trees, reference(blocks, y, plan).boosted.trees)


# ---------------------------------------------------------------- the estimators


def test_the_classifier_predicts_as_the_reference_and_aligns_by_ids() -> None:
    blocks, y = data(300, (3, 2))
    model = SecureBoostClassifier(n_estimators=4, he="none", random_state=0)
    model.fit(blocks[1], blocks[0], y)
    plan = model.config_
    ref = reference(blocks, y, plan)
    proba = model.predict_proba(blocks[1], blocks[0])
    assert np.allclose(proba[:, 1], 1 / (1 + np.exp(-ref.raw(blocks)[:, 0])), atol=1e-12)
    assert set(model.predict(blocks[1], blocks[0])) <= {0.0, 1.0}
    assert model.score(blocks[1], blocks[0], y) > 0.8
    ids = [f"p{i}" for i in range(300)]
    aligned = SecureBoostClassifier(n_estimators=2, he="none", random_state=0).fit(
        blocks[1][:250], blocks[0][40:], y[40:], ids_a=ids[:250], ids_b=ids[40:])
    assert sorted(aligned.ids_) == sorted(ids[40:250])
    importance = model.feature_importances()
    assert set(importance) == {"A", "B"} and importance["B"].shape == (3,)


def test_the_regressor_stops_early_and_keeps_the_best_rounds() -> None:
    blocks, y = data(400, (2, 2), "regression")
    model = SecureBoostRegressor(n_estimators=40, learning_rate=1.0, max_depth=4,
                                 early_stopping_rounds=2, validation_fraction=0.3,
                                 he="none", random_state=0).fit(blocks[1], blocks[0], y)
    assert model.n_estimators_ < 40
    best = int(np.argmin(model.validation_loss_)) + 1
    assert model.n_estimators_ == best
    assert model.score(blocks[1], blocks[0], y) > 0.5


def test_estimators_follow_scikit_learns_conventions() -> None:
    from sklearn.base import clone

    model = SecureBoostClassifier(max_depth=4, he="none")
    twin = clone(model)
    assert twin.get_params() == model.get_params()
    assert "max_depth=4" in repr(model)
    with pytest.raises(RuntimeError, match="not fitted"):
        model.predict(np.zeros((2, 2)), np.zeros((2, 2)))


@pytest.mark.parametrize(("change", "said"), [
    (lambda xa, xb, y: (np.where(xa == xa[0, 0], np.inf, xa), xb, y), "inf"),
    (lambda xa, xb, y: (xa.astype(str), xb, y), "numbers"),
    (lambda xa, xb, y: (xa[:-1], xb, y), "rows"),
    (lambda xa, xb, y: (xa, xb, np.zeros_like(y)), "2 classes"),
    (lambda xa, xb, y: (xa, xb, np.r_[y[:-1], np.nan]), "finite"),
    (lambda xa, xb, y: (np.zeros((len(y), 0)), xb, y), "column"),
])
def test_bad_input_is_refused_before_any_message(change: Any, said: str) -> None:
    blocks, y = data(50, (2, 2), missing=0.0)
    xa, xb, target = change(blocks[1], blocks[0], y)
    with pytest.raises(ValidationError, match=said):
        SecureBoostClassifier(n_estimators=1, he="none").fit(xa, xb, target)


def test_bad_settings_name_the_parameter() -> None:
    blocks, y = data(50, (2, 2))
    for settings, said in (({"max_bins": 200}, "max_bins"), ({"learning_rate": 0}, "learning_rate"),
                           ({"key_bits": 1024}, "key_bits"), ({"he": "rsa"}, "'he'"),
                           ({"goss": True, "top_rate": 0.8, "other_rate": 0.5}, "top_rate")):
        with pytest.raises(ValidationError, match=said):
            SecureBoostClassifier(**settings).fit(blocks[1], blocks[0], y)


# ---------------------------------------------------------------- what each party checks


def test_a_passive_party_refuses_a_different_plan() -> None:
    blocks, y = data(60, (2, 2))
    mine, theirs = config(he="none"), config(he="none", max_depth=5)
    roles = {"B": lambda p: protocol.active(p, blocks[0], y, passive=["A"], config=theirs),
             "A": lambda p: protocol.passive(p, blocks[1], active="B", config=mine)}
    result = run_local(roles, timeout=30, tolerate=list(roles))
    assert "max_depth" in str(result.failures["A"])


@needs_heu
def test_a_passive_party_refuses_a_key_below_its_own_size() -> None:
    blocks, y = data(60, (2, 2))
    small = config()
    large = config(key_bits=2048, insecure_keys=False)
    roles = {"B": lambda p: protocol.active(p, blocks[0], y, passive=["A"], config=small),
             "A": lambda p: protocol.passive(p, blocks[1], active="B", config=large)}
    result = run_local(roles, timeout=60, tolerate=list(roles))
    assert "key_bits" in str(result.failures["A"])


@needs_heu
def test_a_passive_party_refuses_a_paillier_key_below_its_floor_and_a_stray_djn_base() -> None:
    blocks, y = data(60, (2, 2))
    mine = config(he="paillier", key_bits=2048, insecure_keys=False)
    theirs = config(he="paillier")
    roles = {"B": lambda p: protocol.active(p, blocks[0], y, passive=["A"], config=theirs),
             "A": lambda p: protocol.passive(p, blocks[1], active="B", config=mine)}
    result = run_local(roles, timeout=60, tolerate=list(roles))
    assert "key_bits" in str(result.failures["A"])
    plan = config(he="none")

    def rogue(party: Any) -> None:
        party.recv("A", "hello")
        party.send("A", "setup", protocol.Setup(b"", plan.plan_text(), 7))

    roles = {"B": rogue, "A": lambda p: protocol.passive(p, blocks[1], active="B", config=plan)}
    result = run_local(roles, timeout=30, tolerate=list(roles))
    assert "DJN base" in str(result.failures["A"])


def _one_more(cts: Any, cipher: Any, value: int, at: int = 0) -> Any:
    """The column with Enc(value) added to ciphertext ``at``."""
    changed = cipher.add(cipher.take(cts, [at]), cipher.encrypt([value]))
    parts = [cipher.take(cts, range(at)), changed, cipher.take(cts, range(at + 1, cts.rows))]
    return cipher.concat([part for part in parts if part is changed or part.rows])


def _forge(kind: str, cts: Any, cipher: Any) -> Any:
    """A passive party's forgeries of its histogram column (2·buckets per node)."""
    if kind == "one bin":
        return _one_more(cts, cipher, 1 << packing.PAIR_SHIFT)
    if kind == "gradient moved across features":  # the node's g total is kept per node
        moved = _one_more(cts, cipher, 1 << packing.PAIR_SHIFT)
        return _one_more(moved, cipher, -(1 << packing.PAIR_SHIFT), at=cts.rows - 1)
    if kind == "hessian only":
        return _one_more(cts, cipher, 1)
    if kind == "beyond the range":  # OU's plaintext-overflow probe
        return _one_more(cts, cipher, 1 << (cipher.plaintext_bits - 2))
    if kind == "a ciphertext short":
        return cipher.take(cts, range(cts.rows - 1))
    if kind == "bins of another node":  # a splice: every bin summed twice
        return cipher.add(cts, cts)
    raise AssertionError(kind)


FORGERIES = {"one bin": "do not add up", "gradient moved across features": "do not add up",
             "hessian only": "do not add up", "beyond the range": "outside the range",
             "a ciphertext short": "histograms must hold", "bins of another node": "do not add up"}


@needs_heu
@pytest.mark.parametrize(("kind", "said"), FORGERIES.items(), ids=FORGERIES.keys())
def test_the_active_party_refuses_forged_histograms(
        monkeypatch: pytest.MonkeyPatch, kind: str, said: str) -> None:
    blocks, y = data(200, (2, 2))
    plan = config(compression=False)
    honest = protocol._histograms

    def forged(state: Any, nodes: Any, buckets: int, cipher: Any, per: int,
               cfg: Any) -> Any:
        blob = honest(state, nodes, buckets, cipher, per, cfg)
        cts = cipher.from_bytes(blob, len(nodes) * 2 * buckets, "h", "t")
        return cipher.to_bytes(_forge(kind, cts, cipher))

    monkeypatch.setattr(protocol, "_histograms", forged)
    roles = {"B": lambda p: protocol.active(p, blocks[0], y, passive=["A"], config=plan),
             "A": lambda p: protocol.passive(p, blocks[1], active="B", config=plan)}
    result = run_local(roles, timeout=60, tolerate=list(roles))
    assert said in str(result.failures["B"])


@needs_heu
def test_the_active_party_refuses_histograms_under_another_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    blocks, y = data(200, (2, 2))
    plan = config(compression=False)
    other = heu.OuKeyOwner(1024, workers=1).cipher()

    def foreign(state: Any, nodes: Any, buckets: int, cipher: Any, per: int,
                cfg: Any) -> Any:  # as many ciphertexts (2 features), under another key
        return other.to_bytes(other.encrypt([0] * (len(nodes) * 2 * buckets)))

    monkeypatch.setattr(protocol, "_histograms", foreign)
    roles = {"B": lambda p: protocol.active(p, blocks[0], y, passive=["A"], config=plan),
             "A": lambda p: protocol.passive(p, blocks[1], active="B", config=plan)}
    result = run_local(roles, timeout=60, tolerate=list(roles))
    assert "another public key" in str(result.failures["B"])


_ROWS = np.arange(60)
_VALUES = [np.zeros(60, np.int64)] * 2
ROGUE_ACTIVE = {
    "rows outside its data": ([protocol.TreeStart(0, np.array([5, 900]), np.ones(2, bool),
                                                  _VALUES[:1] * 2)], "do not fit"),
    "rows not ascending": ([protocol.TreeStart(0, np.array([7, 3]), np.ones(2, bool),
                                               [np.zeros(2, np.int64)] * 2)], "do not fit"),
    "columns of another width": ([protocol.TreeStart(0, _ROWS, np.ones(3, bool), _VALUES)],
                                 "do not fit"),
    "one gradient part": ([protocol.TreeStart(0, _ROWS, np.ones(2, bool), _VALUES[:1])],
                          "gradient parts"),
    "a level of other rows": ([protocol.TreeStart(0, _ROWS, np.ones(2, bool), _VALUES),
                               protocol.Level(0, np.zeros(59, np.int32), [0])], "a level of"),
    "a split on a feature it lacks": ([
        protocol.TreeStart(0, _ROWS, np.ones(2, bool), _VALUES),
        protocol.Level(0, np.zeros(60, np.int32), []), protocol.Splits([(0, 5, 1, False)])],
        "cannot make"),
    "a split on the missing bin": ([
        protocol.TreeStart(0, _ROWS, np.ones(2, bool), _VALUES),
        protocol.Level(0, np.zeros(60, np.int32), []), protocol.Splits([(0, 0, 32, False)])],
        "cannot make"),
    "a split before any level": ([protocol.Splits([(0, 0, 1, False)])], "cannot make"),
}


@pytest.mark.parametrize(("messages", "said"), ROGUE_ACTIVE.values(), ids=ROGUE_ACTIVE.keys())
def test_a_passive_party_refuses_what_a_deviating_active_party_sends(
        messages: list[Any], said: str) -> None:
    blocks, _ = data(60, (2, 2))
    plan = config(he="none")

    def rogue(party: Any) -> None:
        party.recv("A", "hello")
        party.send("A", "setup", protocol.Setup(b"", plan.plan_text()))
        for message in messages:
            party.send("A", "boost", message)

    roles = {"B": rogue, "A": lambda p: protocol.passive(p, blocks[1], active="B", config=plan)}
    result = run_local(roles, timeout=30, tolerate=list(roles))
    assert isinstance(result.failures["A"], ProtocolError)
    assert said in str(result.failures["A"])


# ---------------------------------------------------------------- as a user runs it


@needs_heu
def test_a_script_without_a_main_guard_trains_on_worker_processes(tmp_path: Path) -> None:
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        from islands.vfl import SecureBoostClassifier
        rng = np.random.default_rng(0)
        xa, xb = rng.normal(size=(2500, 4)), rng.normal(size=(2500, 2))
        y = (xa[:, 0] + xb[:, 0] > 0).astype(int)
        model = SecureBoostClassifier(n_estimators=2, key_bits=1024, insecure_keys=True,
                                      workers=2, random_state=0).fit(xa, xb, y)
        print("accuracy", round(model.score(xa, xb, y), 3))
    """))
    done = subprocess.run([sys.executable, "-W", "ignore", str(script)], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    accuracy = float(done.stdout.split("accuracy")[-1])
    assert accuracy > 0.8


@needs_heu
def test_the_docs_example_runs_as_a_user_runs_it(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "vfl.md").read_text(encoding="utf-8")
    section = text.split("## Gradient-boosted trees: SecureBoost", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "example.py"
    script.write_text(code + "\nprint('auc-proxy', round(float(((proba[:, 1] > 0.5) == y)"
                             ".mean()), 3))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split("auc-proxy")[-1]) > 0.95


def test_a_regression_target_too_wide_for_exact_histograms_is_refused_before_any_message(
) -> None:
    blocks, y = data(100, (2, 2), "regression")
    with pytest.raises(ValidationError, match="y spans too wide a range"):
        SecureBoostRegressor(n_estimators=1, he="none").fit(blocks[1], blocks[0], y * 1e13)
    model = SecureBoostRegressor(n_estimators=2, he="none").fit(blocks[1], blocks[0], y * 1e9)
    assert model.score(blocks[1], blocks[0], y * 1e9) > 0.3


def test_ids_are_checked_as_psi_will_before_any_message() -> None:
    blocks, y = data(40, (2, 2))
    model = SecureBoostClassifier(n_estimators=1, he="none")
    with pytest.raises(ValidationError, match="1 and '1' never match"):
        model.fit(blocks[1], blocks[0], y, ids_a=list(range(40)), ids_b=[str(i) for i in range(40)])
    with pytest.raises(ValidationError, match="ids_a has 39 IDs for 40 rows"):
        model.fit(blocks[1], blocks[0], y, ids_a=list(range(39)), ids_b=list(range(40)))
