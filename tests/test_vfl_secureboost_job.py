"""SecureBoost jobs (islands run, kind = "secureboost"), staged scores and the demo part."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("sklearn")

from islands.crypto import heu
from islands.data import find_fashion_mnist
from islands.errors import DataNotFoundError, JobError
from islands.runs import SecureBoostRun, load_run
from islands.vfl import SecureBoostClassifier, SecureBoostRegressor
from islands.vfl.job import FASHION_TOPS, load_dataset
from islands.vfl.keys import InsecureKeyWarning
from islands.vfl.secureboost.job import load_secureboost_job, parse_secureboost_job

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
QUICK = ["model.key_bits=1024", "model.insecure_keys=true", "model.n_estimators=3"]
needs_heu = pytest.mark.skipif(not heu.available(), reason="sf-heu is not importable here")
has_xgboost = importlib.util.find_spec("xgboost") is not None


def test_the_examples_parse() -> None:
    paths = sorted(EXAMPLES.glob("secureboost-*.toml"))
    assert [p.stem for p in paths] == ["secureboost-breast-cancer", "secureboost-fashion-mnist"]
    for path in paths:
        job = load_secureboost_job(path)
        assert job.name == path.stem and job.parties["psi"]
        assert job.model["key_bits"] >= 2048 and job.model["he"] == "ou"
        assert job.model["objective"] == "binary" and job.model["max_depth"] == 3
        assert 10 <= job.model["n_estimators"] <= 20


def _job(**sections: Any) -> dict[str, Any]:
    return {"name": "x", "kind": "secureboost", **sections}


@pytest.mark.parametrize(("raw", "message"), [
    (_job(colour=1), r"unknown key\(s\) \['colour'\]"),
    ({"name": "x", "kind": "boost"}, "kind must be 'secureboost'"),
    (_job(data={"name": "mnist"}), r"\[data\]: 'name' must be one of"),
    (_job(data={"rows": 100}), r"\[data\]: 'rows' applies only to synthetic and fashion_mnist"),
    (_job(data={"name": "diabetes", "features": 4}), r"\[data\]: 'features' applies only"),
    (_job(data={"name": "fashion_mnist", "rows": 70_000}),
     r"\[data\]: 'rows' must be an int in \[10, 60000\]"),
    (_job(data={"test_fraction": 1.5}), r"\[data\]: 'test_fraction' must be a number in"),
    (_job(parties={"b_features": 30}),
     r"\[parties\]: 'b_features' must be an int in \[1, 29\] for breast_cancer"),
    (_job(data={"name": "diabetes"}, parties={"b_features": 8, "passive": 3}),
     r"\[parties\]: 'passive' must be at most 2"),
    (_job(parties={"psi": "yes"}), r"\[parties\]: 'psi' must be bool"),
    (_job(parties={"max_peer_ratio": 20}), "'max_peer_ratio' applies only with psi = true"),
    (_job(parties={"psi": True, "max_peer_size": 0}), r"\[parties\]: 'max_peer_size' must be"),
    (_job(parties={"psi": True, "psi_engine": "ecdh"}), r"\[parties\]: 'psi_engine' must be"),
    (_job(model={"n_estimators": 0}), r"\[model\]: 'n_estimators' must be"),
    (_job(model={"max_bins": 500}), r"\[model\]: 'max_bins' must be"),
    (_job(model={"objective": "regression"}),
     r"\[model\]: 'objective' must be 'binary' for the data set 'breast_cancer'"),
    (_job(data={"name": "synthetic"}, model={"objective": "multiclass"}),
     r"\[model\]: 'objective' must be 'binary' or 'regression'"),
    (_job(model={"seed": 3}), r"\[model\]: unknown key\(s\) \['seed'\]"),
    (_job(model={"max_peer_size": 3}), r"\[model\]: unknown key\(s\) \['max_peer_size'\]"),
    (_job(model={"key_bits": 1024}), r"\[model\]: 'key_bits'"),
])
def test_bad_jobs_name_the_section_and_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(JobError, match=message):
        parse_secureboost_job(raw)


def test_an_override_is_checked_and_named(tmp_path: Path) -> None:
    with pytest.raises(JobError, match=r"\[model\]: 'max_depth' must be .*with --set "
                                       r"model.max_depth=0"):
        load_secureboost_job(EXAMPLES / "secureboost-breast-cancer.toml", ["model.max_depth=0"])


def test_the_objective_follows_the_data() -> None:
    assert parse_secureboost_job(_job(data={"name": "diabetes"})).model["objective"] == \
        "regression"
    job = parse_secureboost_job(_job(data={"name": "synthetic", "rows": 50},
                                     model={"objective": "regression"}))
    assert job.model["objective"] == "regression" and job.data["features"] == 30


@pytest.mark.parametrize("kind", ["binary", "regression", "multiclass"])
def test_staged_scores_end_at_the_decision_function(kind: str) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 6))
    X[rng.random(X.shape) < 0.05] = np.nan
    z = np.nan_to_num(X) @ rng.normal(size=6)
    y = {"binary": z > 0, "regression": z,
         "multiclass": np.digitize(z, [-0.5, 0.5])}[kind]
    kind_class = SecureBoostRegressor if kind == "regression" else SecureBoostClassifier
    model = kind_class(n_estimators=4, he="none", random_state=0).fit(X[:200, 3:],
                                                                      X[:200, :3], y[:200])
    staged = list(model.staged_decision_function(X[200:, 3:], X[200:, :3]))
    assert len(staged) == model.n_estimators_ == 4
    final = model.decision_function(X[200:, 3:], X[200:, :3])
    # the same additions in the same order: equal to the last bit
    assert staged[-1].shape == final.shape and np.array_equal(staged[-1], final)
    assert not np.array_equal(staged[0], staged[-1])


@needs_heu
def test_the_example_runs_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from islands.cli import main
    from islands.run_report import render_html

    out = tmp_path / "out"
    argv = ["islands", "run", str(EXAMPLES / "secureboost-breast-cancer.toml"), "--output",
            str(out), *[a for s in QUICK for a in ("--set", s)]]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.warns(InsecureKeyWarning), pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None)
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps at the console's width
    assert "SecureBoost vs XGBoost (same bins)" in printed and "s per tree" in printed
    doc = json.loads((out / "results.json").read_text())
    assert doc["job"]["kind"] == "secureboost"
    assert doc["job"]["overrides"] == {"model.key_bits": 1024, "model.insecure_keys": True,
                                       "model.n_estimators": 3}
    assert doc["settings"]["n_estimators"] == 3 and "security_warning" in doc
    assert doc["metric"] == "auc" and doc["trees_kept"] == 3
    assert doc["aligned_ids"] == doc["rows"]["train_aligned"] < 455
    assert [r["tree"] for r in doc["per_tree"]] == [1, 2, 3]
    losses = [r["train_loss"] for r in doc["per_tree"]]
    assert losses == sorted(losses, reverse=True)
    assert all(r["seconds"] > 0 for r in doc["per_tree"]) and doc["seconds_per_tree"] > 0
    assert doc["per_tree"][-1]["test_auc"] == doc["metrics"]["auc"] > 0.95
    assert set(doc["gain_by_party"]) == {"A", "B"} and doc["bytes"] > 0
    assert doc["importance"]["B"]["columns"] == list(range(10))
    assert doc["importance"]["A"]["columns"] == list(range(10, 30))
    assert sum(doc["importance"]["A"]["gain"]) == pytest.approx(doc["gain_by_party"]["A"])
    if has_xgboost:
        # the same trees: XGBoost's hist on the same bins differs only by float rounding
        assert abs(doc["metrics"]["auc"] - doc["metrics"]["xgboost_auc"]) <= 0.005
        assert doc["xgboost"]["same_trees_expected"]
        assert doc["xgboost"]["max_abs_margin_diff"] < 1e-5
        for r in doc["per_tree"]:
            assert abs(r["test_auc"] - r["xgboost_test_auc"]) <= 0.005
    else:
        assert "not importable" in doc["xgboost"]["skipped"]
    for name in ("report.png", "trees.txt", "party-A.json", "party-B.json"):
        assert (out / name).stat().st_size > 100, name
    trees = (out / "trees.txt").read_text()
    assert trees.count("\ntree ") == 3 and re.search(r"\[[AB]\] x\d+ < ", trees)
    b_part = json.loads((out / "party-B.json").read_text())
    assert b_part["role"] == "active" and len(b_part["model"]["trees"]) == 3
    a_part = json.loads((out / "party-A.json").read_text())
    assert a_part["role"] == "passive" and "model" not in a_part and a_part["records"]
    run = load_run(out)
    assert isinstance(run, SecureBoostRun) and len(run.history) == 3
    assert run.metrics["trees_kept"] == 3
    assert "SecureBoost job (islands run)" in render_html(out)


def test_resume_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from islands.cli import main

    monkeypatch.setattr(sys, "argv", ["islands", "run", str(EXAMPLES /
                                      "secureboost-breast-cancer.toml"), "--resume"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2


def test_missing_fashion_mnist_is_said_before_anything_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISLANDS_FASHION_MNIST", str(tmp_path))
    job = load_secureboost_job(EXAMPLES / "secureboost-fashion-mnist.toml")
    with pytest.raises(DataNotFoundError, match="apt-get install dataset-fashion-mnist"):
        job.check_data()


@pytest.mark.skipif(find_fashion_mnist() is None, reason="Fashion-MNIST not installed")
def test_fashion_mnist_is_the_halves_and_tops_task() -> None:
    from islands.data import load_fashion_mnist

    X, y, b = load_dataset("fashion_mnist", regression=False, seed=0, rows=50,
                           b_features=None)
    images = load_fashion_mnist(split="train", n_samples=50, flatten=False).X
    assert X.shape == (50, 784) and b == 392
    assert np.array_equal(X[:, :392].reshape(50, 28, 14), images[:, :, :14])
    assert np.array_equal(X[:, 392:].reshape(50, 28, 14), images[:, :, 14:])
    labels = load_fashion_mnist(split="train", n_samples=50).y
    assert np.array_equal(y, np.isin(labels, FASHION_TOPS))


@needs_heu
def test_the_demo_part_runs(tmp_path: Path) -> None:
    from islands.experiments import demo

    with pytest.warns(InsecureKeyWarning):
        r = demo.secureboost_part(demo.Settings(out=tmp_path, quick=True))
    assert r.name == "secureboost" and r.skipped is None
    assert r.figures_of_merit["auc"] > 0.95 and r.bytes_exchanged > 0
    if has_xgboost:
        assert abs(r.figures_of_merit["auc"] - r.figures_of_merit["xgboost_auc"]) <= 0.005
    assert (tmp_path / "secureboost.png").stat().st_size > 1000
    assert "AUC" in r.key_figure and r.details["security_warning"]
