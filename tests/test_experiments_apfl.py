"""The APFL reproduction (islands.experiments.apfl): its schedule (without training), and
one run in quick mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from islands.data import find_fashion_mnist
from islands.experiments.apfl import (
    PAPER,
    SENSITIVITY_LRS,
    ApflRow,
    _local_train_rows,
    reproduce_apfl,
    schedule,
    tau_trajectory,
)
from islands.experiments.report import ReproductionResult, to_jsonable
from islands.hfl.maths import TauState, update_tau
from progress_steps import collect_steps

needs_data = pytest.mark.skipif(find_fashion_mnist() is None,
                                reason="Fashion-MNIST files not found")


def test_the_fl_rows_run_the_papers_105_steps_an_epoch() -> None:
    # the clients after each keeps 10% for local evaluation: 90% of 24,000 / 18,000 / 18,000
    plan = schedule([21600, 16200, 16200], 512)
    assert plan.cl_steps == 105 and plan.even_steps == 105 and plan.mbs_steps == 105
    assert plan.mbs_batches == (204, 153, 153)  # the paper's own example (§5.2)
    # the paper's Table 5 counts, and so the paper's denominator for APFL's 2,339
    assert [plan.aggregations(t, 50) for t in (1, 4, 15)] == [5250, 1350, 350]
    assert plan.aggregations(4, 50, mbs=True) == 1350
    # the batch is the largest that keeps 105 steps: one more would drop to 104
    assert min(n // (plan.even_batch + 1) for n in (21600, 16200, 16200)) < 105


@needs_data
def test_the_reproductions_own_clients_give_105_steps() -> None:
    from islands.data import load, partition_by_class

    y = load("fashion_mnist", split="train").y
    sizes = [len(r) for r in partition_by_class(y, "0-3,4-6,7-9")]
    kept = [len(k) for k in _local_train_rows(sizes, 0)]
    assert kept == [21600, 16200, 16200]
    assert schedule(kept, 512).aggregations(1, 50) == 5250


def test_tau_trajectory_splits_rounds_into_stretches() -> None:
    got = tau_trajectory([15, 15, 14, 14, 14, 1], [1, 1, 1, 2, 2, 3])
    assert got == [
        {"tau": 15, "rounds": 2, "first_round": 1, "last_round": 2, "first_epoch": 1,
         "last_epoch": 1},
        {"tau": 14, "rounds": 3, "first_round": 3, "last_round": 5, "first_epoch": 1,
         "last_epoch": 2},
        {"tau": 1, "rounds": 1, "first_round": 6, "last_round": 6, "first_epoch": 3,
         "last_epoch": 3}]
    assert tau_trajectory([], []) == []


def test_the_documented_choices_of_the_tau_rule() -> None:
    # the report and docs/hfl.md state these; a change to eq. 31's code must change them
    state = TauState(tau=5)
    state = update_tau(state, 0.8, phi=2)
    for acc in (0.8, 0.8):  # ties do not reach the best: two of them lower τ
        state = update_tau(state, acc, phi=2)
    assert (state.tau, state.best, state.stale) == (4, 0.8, 0)  # count restarts, best kept
    state = update_tau(state, 0.7, phi=2)
    assert (state.tau, state.stale) == (4, 1)


@pytest.fixture(scope="module")
def run_result(tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Path, ReproductionResult, list[str]]:
    pytest.importorskip("torch")
    if find_fashion_mnist() is None:
        pytest.skip("Fashion-MNIST files not found")
    out = tmp_path_factory.mktemp("apfl_quick")
    messages: list[str] = []
    result = reproduce_apfl(out, quick=True, progress=collect_steps(messages))
    return out, result, messages


@pytest.fixture(scope="module")
def run(run_result: tuple[Path, ReproductionResult, list[str]]
        ) -> tuple[Path, dict[str, Any], list[str]]:
    out, result, messages = run_result
    return out, result.to_json(), messages


def test_rows_are_typed_and_the_cli_table_reads_them(
        run_result: tuple[Path, ReproductionResult, list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from islands.cli.common import console
    from islands.cli.reproduce import REPRODUCTIONS

    out, result, _ = run_result
    rows = result.sections["rows"]
    assert all(isinstance(r, ApflRow) for r in rows.values())
    assert rows["CL"].dev_avg is None and rows["APFL"].dev_avg is not None
    doc = json.loads((out / "results.json").read_text())
    assert doc == to_jsonable(result.to_json())
    # a row keeps the keys and order results.json always had
    assert list(doc["rows"]["CL"])[-5:] == ["aggregations", "bytes", "seconds", "history",
                                            "tau"]
    assert list(doc["rows"]["APFL"])[-9:] == [
        "dev_avg", "aggregations", "bytes", "seconds", "batch_sizes", "steps_per_epoch",
        "history", "tau", "tau_trajectory"]
    assert "tau" not in doc["sensitivity"]["0.1"]
    monkeypatch.setattr(console, "_width", 200)  # restored to None (a live width)
    with console.capture() as printed:
        tables = next(e for e in REPRODUCTIONS if e.name == "apfl").tables
        assert tables is not None
        tables(result)
    text = printed.get()
    for name, r in rows.items():
        assert f"{100 * r.accuracy:.2f}" in text, name
        if r.dev_avg is not None:
            assert f"{100 * r.dev_avg:.2f}" in text and str(r.aggregations) in text


def test_report_files_and_rows(run: tuple[Path, dict[str, Any], list[str]]) -> None:
    out, results, messages = run
    for name in ("report.md", "results.json", "accuracy.png", "accuracy_vs_aggregations.png",
                 "tau.png", "tau_lr.png"):
        assert (out / name).is_file(), name
    assert list(results["rows"]) == list(PAPER)
    assert json.loads((out / "results.json").read_text())["settings"]["epochs"] == 2
    assert any(m.startswith("APFL:") for m in messages)
    report = (out / "report.md").read_text()
    assert "not the paper's 50" in report and "| APFL |" in report
    for section in ("## APFL's τ over the run", "## Sensitivity to the learning rate",
                    "## Choices the paper leaves open", "## What is not reproduced",
                    "## Inconsistencies in the paper"):
        assert section in report, section
    assert "Not measured" in report  # 2 epochs say nothing about the paper's 0.45


def test_rows_follow_their_schedules(run: tuple[Path, dict[str, Any], list[str]]) -> None:
    _, results, _ = run
    rows, plan = results["rows"], results["schedule"]
    spe = rows["FL τ=1"]["steps_per_epoch"]
    # the schedule computed before training is the one the runs followed
    assert spe == plan["even_steps"] and rows["APFL"]["steps_per_epoch"] == plan["mbs_steps"]
    assert abs(plan["even_steps"] - plan["cl_steps"]) <= 1
    for name in ("FL τ=15", "FL τ=4", "FL τ=1", "APFL (no mbs)"):
        assert set(rows[name]["batch_sizes"].values()) == {plan["even_batch"]}, name
    assert tuple(rows["APFL"]["batch_sizes"].values()) == tuple(plan["mbs_batches"])
    assert rows["FL τ=1"]["aggregations"] == 2 * spe
    assert rows["FL τ=15"]["aggregations"] == 2 * -(-spe // 15)
    assert rows["APFL"]["batch_sizes"] != rows["APFL (no mbs)"]["batch_sizes"]
    assert len(set(rows["APFL (no mbs)"]["batch_sizes"].values())) == 1
    assert max(rows["APFL"]["tau"]) == 15 and all(t >= 1 for t in rows["APFL"]["tau"])
    for name, row in rows.items():
        assert 0.1 < row["accuracy"] <= 1, name
    assert {c["verdict"] for c in results["agreement"]} <= {"agrees", "partly", "differs"}
    for name in ("APFL", "APFL (no mbs)"):
        stretches = rows[name]["tau_trajectory"]
        assert sum(t["rounds"] for t in stretches) == rows[name]["aggregations"]
        assert [t["tau"] for t in stretches] == sorted({*rows[name]["tau"]}, reverse=True)
    sens = results["sensitivity"]
    assert set(sens) == {f"{lr:g}" for lr in (*SENSITIVITY_LRS, 0.1)}
    assert sens["0.1"]["aggregations"] == rows["APFL"]["aggregations"]
    assert all(r["batch_sizes"] == rows["APFL"]["batch_sizes"] for r in sens.values())
