"""The contribution experiment (islands.experiments.contribution), run once in quick mode."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.data import find_fashion_mnist
from islands.errors import ValidationError
from islands.experiments.report import to_jsonable
from islands.hfl.contribution import reward_shares
from progress_steps import collect_steps

pytest.importorskip("torch")
scipy_stats = pytest.importorskip("scipy.stats")
pytestmark = pytest.mark.skipif(find_fashion_mnist() is None,
                                reason="Fashion-MNIST files not found")

from islands.experiments import contribution  # noqa: E402
from islands.experiments.contribution import (  # noqa: E402
    METHODS,
    ROLES,
    ContributionClient,
    RetrainScores,
    reproduce_contribution,
)
from islands.experiments.report import ReproductionResult  # noqa: E402
from islands.hfl.contribution import ContributionReport  # noqa: E402

KEYS = {"settings", "clients", "federation", "contribution", "renormalised", "retrain",
        "comparison", "ranking", "gtg_check", "costs", "agreement", "figures",
        "wall_time_s"}
FIGURES = ("contribution.png", "rounds.png", "agreement.png", "ranking.png")

Run = tuple[Path, dict[str, Any], list[str]]


# the quick settings with half the rows (each client's, validation and test): the same
# seven roles, rounds of ten steps and 127 retrained coalitions, in about half the time
_QUICK = contribution._settings(True, 0, None)
SMALL = dataclasses.replace(_QUICK, sizes=tuple(n // 2 for n in _QUICK.sizes),
                            validation_rows=_QUICK.validation_rows // 2,
                            test_rows=(_QUICK.test_rows or 0) // 2)


@pytest.fixture(scope="module")
def run_result(tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Path, ReproductionResult, list[str]]:
    out = tmp_path_factory.mktemp("contribution_quick")
    messages: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(contribution, "_settings", lambda quick, seed, n_threads: dataclasses.replace(
            SMALL, seed=seed, n_threads=n_threads))
        result = reproduce_contribution(out, quick=True, random_state=0,
                                        progress=collect_steps(messages))
    return out, result, messages


@pytest.fixture(scope="module")
def run(run_result: tuple[Path, ReproductionResult, list[str]]) -> Run:
    out, result, messages = run_result
    return out, result.to_json(), messages


def test_sections_are_typed_and_the_cli_table_reads_them(
        run_result: tuple[Path, ReproductionResult, list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from islands.cli.common import console
    from islands.cli.reproduce import REPRODUCTIONS

    out, result, _ = run_result
    report, retrain = result.sections["contribution"], result.sections["retrain"]
    clients = result.sections["clients"]
    assert isinstance(report, ContributionReport)
    assert isinstance(result.sections["renormalised"], ContributionReport)
    assert isinstance(retrain, RetrainScores)
    assert all(isinstance(c, ContributionClient) for c in clients)
    doc = json.loads((out / "results.json").read_text())
    assert doc == to_jsonable(result.to_json())
    assert list(doc["clients"][0]) == ["name", "role", "rows", "aggregation_weight",
                                       "batch_size", "noise", "wrong_labels", "free_rider",
                                       "twin_of", "shuffled"]
    assert list(doc["retrain"]) == ["scores", "loo", "values", "trainings", "seconds",
                                    "coalition_seconds", "alone", "without", "full", "empty"]
    assert doc["contribution"] == to_jsonable(report.to_dict())
    monkeypatch.setattr(console, "_width", 200)  # restored to None (a live width)
    with console.capture() as printed:
        tables = next(e for e in REPRODUCTIONS if e.name == "contribution").tables
        assert tables is not None
        tables(result)
    lines = printed.get().splitlines()
    for k, c in enumerate(clients):
        line = next(ln for ln in lines if c.name in ln)
        assert c.role in line and f"{retrain.scores[k]:+.4f}" in line
        assert f"{100 * report.shares[k]:.1f}%" in line


def test_files_and_json(run: Run) -> None:
    out, results, messages = run
    for name in ("report.md", "results.json", *FIGURES):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for name in FIGURES:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert results["figures"] == list(FIGURES)
    doc = json.loads((out / "results.json").read_text())
    assert set(doc) == KEYS
    assert doc == to_jsonable(results)
    assert doc["settings"]["quick"] is True and doc["settings"]["seed"] == 0
    assert doc["settings"]["contribution"]["weighting"] == "fixed"
    assert doc["settings"]["contribution"]["methods"] == list(METHODS)
    assert messages[0] == "loading Fashion-MNIST" and messages[-1].startswith("done")
    assert any(m.startswith("retraining coalitions: 128/128") for m in messages)
    report = (out / "report.md").read_text()
    assert "Quick settings" in report
    assert "| client-7 | medium, free-rider |" in report
    assert "## Each method's ranking against retraining (issue 27)" in report
    for name in FIGURES:
        assert f"]({name})" in report, name
    verdicts = [c["verdict"] for c in results["agreement"]]
    assert set(verdicts) <= {"agrees", "partly", "differs"}
    assert f"Summary: {verdicts.count('agrees')} agree" in report


def test_clients_are_what_the_roles_say(run: Run) -> None:
    _, results, _ = run
    s, clients = results["settings"], results["clients"]
    assert [c["role"] for c in clients] == list(ROLES)
    assert [c["rows"] for c in clients] == list(s["sizes"])
    assert sum(c["aggregation_weight"] for c in clients) == pytest.approx(1.0)
    noisy = clients[s["noisy"]]
    # 70% replaced, a tenth of those by the true label again: about 63% wrong
    assert 0.5 < noisy["wrong_labels"] / noisy["rows"] < 0.75
    # shuffled: a permutation of ten roughly balanced classes leaves about 90% wrong
    assert 0.8 < clients[s["shuffled"]]["wrong_labels"] / clients[s["shuffled"]]["rows"] < 1
    assert all(c["wrong_labels"] == 0 for k, c in enumerate(clients)
               if k not in (s["noisy"], s["shuffled"]))
    assert [c["shuffled"] for c in clients] == [k == s["shuffled"] for k in range(len(clients))]
    assert [c["twin_of"] for c in clients] == [
        f"client-{k}" if k == s["twin"] else None for k in range(len(clients))]
    assert [c["free_rider"] for c in clients] == [k == s["free_rider"]
                                                  for k in range(len(clients))]
    fed = results["federation"]
    assert 0.3 < fed["test_accuracy"] <= 1
    assert fed["validation_final"] > fed["validation_initial"]
    assert fed["same_model_both_runs"] is True  # valuing does not change the training


def test_free_rider_is_a_null_player(run: Run) -> None:
    _, results, _ = run
    fr = results["settings"]["free_rider"]
    report, renorm = results["contribution"], results["renormalised"]
    for method in METHODS:
        assert report["scores"][method][fr] == 0.0, method
        for entry in report["rounds"]:
            if method != "or":
                assert entry[method][entry["clients"].index(fr)] == 0.0
    assert report["shares"][fr] == 0.0
    assert report["halfwidth"]["gtg"][fr] == 0.0
    # renormalised weighting lets the zero update dilute the others': not a null player
    assert renorm["scores"]["exact"][fr] != 0.0
    assert results["agreement"][0]["verdict"] == "agrees"


def test_efficiency_and_shares(run: Run) -> None:
    _, results, _ = run
    report = results["contribution"]
    n = len(report["clients"])
    assert report["gain"] > 0
    assert sum(report["shares"]) == pytest.approx(1.0)
    assert all(s >= 0 for s in report["shares"])
    assert sum(report["scores"]["exact"]) == pytest.approx(report["gain"], abs=1e-9)
    assert sum(report["scores"]["gtg"]) == pytest.approx(report["gain"], abs=1e-9)
    assert sum(report["scores"]["or"]) == pytest.approx(
        report["utility_final"] - report["utility_initial"], abs=1e-9)
    assert len(report["rounds"]) == results["federation"]["rounds"]
    for entry in report["rounds"]:
        assert sorted(entry["clients"]) == list(range(n))
        assert sum(entry["exact"]) == pytest.approx(entry["gain"], abs=1e-9)
    assert report["gain"] == pytest.approx(sum(e["gain"] for e in report["rounds"]))
    # a round of n clients has 2^n coalitions; OR scores 2^n models more at the end
    assert report["evaluations"] <= 2**n * len(report["rounds"]) + 2**n
    check = results["gtg_check"]
    diff = np.abs(np.subtract(report["scores"]["gtg"], report["scores"]["exact"]))
    np.testing.assert_allclose(check["abs_diff"], diff)
    assert check["within"] == [bool(d <= h) for d, h in zip(diff, check["halfwidth"],
                                                            strict=True)]


def test_retraining_ground_truth(run: Run) -> None:
    _, results, _ = run
    report, retrain = results["contribution"], results["retrain"]
    n = len(report["clients"])
    assert retrain["trainings"] == 2**n - 1 and len(retrain["values"]) == 2**n
    assert len(retrain["coalition_seconds"]) == 2**n
    # the grand coalition retrained is the valued run; the empty one its initial model
    assert retrain["full"] == report["utility_final"]
    assert retrain["empty"] == report["utility_initial"]
    assert sum(retrain["scores"]) == pytest.approx(retrain["full"] - retrain["empty"])
    everyone = ",".join(str(k) for k in range(n))
    assert retrain["values"][everyone] == retrain["full"] and retrain["values"][""] == (
        retrain["empty"])
    for k in range(n):
        without = ",".join(str(j) for j in range(n) if j != k)
        assert retrain["loo"][k] == pytest.approx(retrain["full"] - retrain["values"][without])
        assert retrain["alone"][k] == retrain["values"][str(k)]
    fr = results["settings"]["free_rider"]
    # alone, the free-rider never changes the initial model
    assert retrain["alone"][fr] == retrain["empty"]
    costs = results["costs"]
    assert costs["retrain_trainings"] == 2**n - 1 and costs["retrain_s"] > 0
    assert costs["evaluations"] == report["evaluations"]
    compared = {(c["method"], c["reference"]) for c in results["comparison"]}
    assert compared == {*((m, "retrain") for m in METHODS), ("loo", "retrain_loo")}
    for c in results["comparison"]:
        rho = c["spearman"]
        assert np.isnan(rho) or -1 <= rho <= 1


def test_ranking_against_retraining(run: Run) -> None:
    # issue 27: each method and weighting judged against retraining Shapley
    _, results, _ = run
    s, report, renorm, retrain = (results[k] for k in ("settings", "contribution",
                                                       "renormalised", "retrain"))
    rows = {(r["method"], r["weighting"]): r for r in results["ranking"]}
    assert set(rows) == {*((m, w) for m in METHODS for w in ("fixed", "renormalised")),
                         ("retrain", None), ("retrain_loo", None)}
    twin, shuffled, fr = s["twin"], s["shuffled"], s["free_rider"]
    for (method, weighting), r in rows.items():
        phi = (retrain["scores"] if method == "retrain" else retrain["loo"]
               if method == "retrain_loo" else
               (report if weighting == "fixed" else renorm)["scores"][method])
        np.testing.assert_allclose(r["shares"], reward_shares(phi))
        tau = scipy_stats.kendalltau(phi, retrain["scores"]).statistic
        assert r["tau"] == pytest.approx(tau, nan_ok=True)
        assert r["no_info_share"] == pytest.approx(r["shares"][shuffled] + r["shares"][fr])
        assert r["twin_shares"] == [r["shares"][twin - 1], r["shares"][twin]]
    assert rows[("retrain", None)]["tau"] == pytest.approx(1.0)
    assert rows[("gtg", "fixed")]["shares"] == pytest.approx(report["shares"])
    # the free-rider is a null player of the fixed-weighting game: never paid there
    assert all(rows[(m, "fixed")]["free_rider_share"] == 0.0 for m in METHODS)


def test_bad_arguments() -> None:
    with pytest.raises(ValidationError, match="random_state"):
        reproduce_contribution("unused", quick=True, random_state=-1)
    with pytest.raises(ValidationError, match="n_threads"):
        reproduce_contribution("unused", quick=True, n_threads=0)


def test_the_command_prints_the_scores_and_the_claims(
        run_result: tuple[Path, ReproductionResult, list[str]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from islands.cli import app

    # the command around the module's quick run (the same call, already made once)
    out, result, _ = run_result
    calls: list[dict[str, Any]] = []

    def fake(out_dir: Path, **kwargs: Any) -> ReproductionResult:
        calls.append({"out": out_dir, **{k: v for k, v in kwargs.items() if k != "progress"}})
        return result

    monkeypatch.setattr(contribution, "reproduce_contribution", fake)
    res = CliRunner().invoke(app, ["reproduce", "contribution", "--quick", "--out",
                                   str(out), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert calls == [{"out": out, "quick": True, "random_state": 0}]
    results = json.loads((tmp_path / "r.json").read_text())
    assert results == json.loads((out / "results.json").read_text())
    assert "retrained Shapley" in res.output and "free-rider" in res.output
    share = results["contribution"]["shares"][0]
    assert f"{100 * share:.1f}%" in res.output
    assert "report:" in res.output and (out / "report.md").is_file()
