"""The Swarm CCA paper reproduction (islands.experiments.scca), run once in quick mode."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.data import find_fashion_mnist
from islands.experiments import scca
from islands.experiments.report import markdown_table, to_jsonable, write_json
from islands.experiments.scca import (
    CLASSIFIERS,
    FEATURE_SETS,
    METHODS,
    THRESHOLDS,
    reproduce_scca,
)
from progress_steps import collect_steps

FIGURES = ("fig3_relative_accuracy.png", "fig4_data_size.png",
           "fig5_classifier_accuracy.png", "fig6_training_time.png", "fig7_methods.png")
HAVE_FASHION = find_fashion_mnist() is not None
DATASETS = ["digits", pytest.param("fashion_mnist", marks=pytest.mark.skipif(
    not HAVE_FASHION, reason="Fashion-MNIST files not found"))]


# the quick settings with half the Fashion-MNIST rows (fit, test and comparison): the
# same thresholds, classifiers and five repetitions on both data sets
_QUICK = scca._settings(True, 0, None)
SMALL = dataclasses.replace(_QUICK, fashion_train=_QUICK.fashion_train // 2,
                            fashion_test=_QUICK.fashion_test // 2,
                            compare_sizes={**_QUICK.compare_sizes, "fashion_mnist": tuple(
                                n // 2 for n in _QUICK.compare_sizes["fashion_mnist"])})


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], list[str]]:
    out = tmp_path_factory.mktemp("scca_quick")
    messages: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scca, "_settings", lambda quick, random_state, n_threads: dataclasses.replace(
            SMALL, random_state=random_state, n_threads=n_threads))
        result = reproduce_scca(out, quick=True, random_state=0,
                                progress=collect_steps(messages))
    return out, result.to_json(), messages


def test_files_are_written(run: tuple[Path, dict[str, Any], list[str]]) -> None:
    out, results, messages = run
    for name in ("report.md", "results.json", *FIGURES):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for name in FIGURES:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert messages and messages[-1].startswith("done")
    assert sorted(results["figures"].values()) == sorted(FIGURES)


def test_json_matches_returned_results(run: tuple[Path, dict[str, Any], list[str]]) -> None:
    out, results, _ = run
    doc = json.loads((out / "results.json").read_text())
    assert set(doc) == {"settings", "datasets", "agreement", "skipped", "figures",
                        "wall_time_s"}
    assert doc == to_jsonable(results)
    assert doc["settings"]["quick"] is True and doc["settings"]["perturb"] is True
    assert set(doc["datasets"]) == ({"digits", "fashion_mnist"} if HAVE_FASHION
                                    else {"digits"})
    assert ("fashion_mnist" in doc["skipped"]) is not HAVE_FASHION


@pytest.mark.parametrize("name", DATASETS)
def test_threshold_sweep(run: tuple[Path, dict[str, Any], list[str]], name: str) -> None:
    _, results, _ = run
    a = results["datasets"][name]["threshold"]
    t = np.asarray(a["thresholds"])
    assert set(t) <= set(THRESHOLDS) and t[0] == 0.95 and t[-1] == 0.15
    assert np.all(np.diff(t) < 0)
    assert np.array_equal(t, results["settings"]["thresholds"])
    d = np.asarray(a["d"])
    assert d.shape == t.shape and d[0] >= 1 and np.all(np.diff(d) >= 0)
    ratios = np.asarray(a["ratios"])
    assert ratios[0] == pytest.approx(1.0) and np.all(np.diff(ratios) <= 1e-12)
    for view in ("x", "y", "concat"):
        rel = np.asarray(a["relative_accuracy"][view])
        assert rel.shape == t.shape and np.all(np.isfinite(rel)) and np.all(rel > 0)
        acc = np.asarray(a["accuracy"][view])
        np.testing.assert_allclose(rel, 100 * acc / a["raw_accuracy"][view])
        size = np.asarray(a["size_ratio"][view])
        # a lower threshold keeps more pairs: the data-size ratio never shrinks
        assert size.shape == t.shape and np.all(np.diff(size) >= 0)
        assert np.all((size > 0) & (size <= 1))
        shape = a["shape"][view]
        assert shape["peak_value"] == pytest.approx(rel.max())
        assert isinstance(shape["bell_shaped"], bool)
    res = results["datasets"][name]
    np.testing.assert_allclose(a["size_ratio"]["x"], d / res["p"])
    np.testing.assert_allclose(a["size_ratio"]["concat"], 2 * d / (res["p"] + res["q"]))


@pytest.mark.parametrize("name", DATASETS)
def test_classifiers(run: tuple[Path, dict[str, Any], list[str]], name: str) -> None:
    _, results, _ = run
    b = results["datasets"][name]["classifiers"]
    assert set(b["accuracy"]) == set(CLASSIFIERS) == set(b["fit_time_s"])
    n_pairs = results["datasets"][name]["threshold"]["n_pairs"]
    assert b["d"] == pytest.approx(0.35 * n_pairs, abs=2)
    assert b["n_features"]["scca_xy"] == 2 * b["d"] == 2 * b["n_features"]["scca_x"]
    for clf in CLASSIFIERS:
        assert set(b["accuracy"][clf]) == set(FEATURE_SETS)
        for fs in FEATURE_SETS:
            assert 0.0 <= b["accuracy"][clf][fs] <= 1.0
            assert b["fit_time_s"][clf][fs] >= 0.0
        assert b["accuracy"][clf]["raw"] > 0.1  # above chance (10 classes)


@pytest.mark.parametrize("name", DATASETS)
def test_method_comparison(run: tuple[Path, dict[str, Any], list[str]], name: str) -> None:
    _, results, _ = run
    c = results["datasets"][name]["methods"]
    assert c["n_repeats"] == results["settings"]["n_repeats"] == 5
    for m in METHODS:
        acc = np.asarray(c["accuracy"][m])
        assert acc.shape == (5,) and np.all((acc > 0.1) & (acc <= 1.0))
        assert len(c["n_features"][m]) == 5 and min(c["n_features"][m]) >= 1
        assert c["summary"][m]["median"] == pytest.approx(np.median(acc))
    p, q = results["datasets"][name]["p"], results["datasets"][name]["q"]
    assert set(c["n_features"]["CCA"]) == {2 * math.ceil(0.15 * min(p, q))}


def test_report_has_agreement_section(run: tuple[Path, dict[str, Any], list[str]]) -> None:
    out, results, _ = run
    text = (out / "report.md").read_text()
    assert "## Agreement with the paper" in text
    assert "only the ratios" in text  # perturbation: ρ itself is unknown
    for name in FIGURES:
        assert f"]({name})" in text
    verdicts = {c["verdict"] for c in results["agreement"]}
    assert verdicts <= {"agrees", "partly", "differs"}
    figures = {c["figure"] for c in results["agreement"]}
    assert {"Fig. 3", "Fig. 4", "Fig. 5", "Fig. 6", "Fig. 7"} <= figures
    assert all(c["dataset"] in results["datasets"] for c in results["agreement"])


def test_random_state_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="random_state"):
        reproduce_scca(tmp_path, quick=True, random_state=-1)


def test_report_helpers(tmp_path: Path) -> None:
    table = markdown_table(["a", "b"], [["x", 1.23456], ["y|z", float("nan")]])
    assert table.splitlines() == ["| a | b |", "|:--|--:|", "| x | 1.235 |",
                                  "| y\\|z | – |"]
    with pytest.raises(ValueError):
        markdown_table(["a"], [[1, 2]])
    path = write_json(tmp_path / "r.json", {"a": np.arange(3), "b": np.float32(0.5),
                                            "c": (np.nan, np.int64(2)), "d": tmp_path})
    assert json.loads(path.read_text()) == {"a": [0, 1, 2], "b": 0.5, "c": [None, 2],
                                            "d": str(tmp_path)}
    with pytest.raises(TypeError):
        to_jsonable(object())


def test_import_stays_light() -> None:
    code = ("import sys, islands, islands.experiments, islands.experiments.report, "
            "islands.experiments.scca; "
            "print([m for m in ('matplotlib', 'sklearn') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout
