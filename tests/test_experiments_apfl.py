"""The APFL reproduction (islands.experiments.apfl), run once in quick mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from islands.data import find_fashion_mnist

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(find_fashion_mnist() is None,
                                reason="Fashion-MNIST files not found")

from islands.experiments.apfl import PAPER, reproduce_apfl  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], list[str]]:
    out = tmp_path_factory.mktemp("apfl_quick")
    messages: list[str] = []
    return out, reproduce_apfl(out, quick=True, progress=messages.append), messages


def test_report_files_and_rows(run: tuple[Path, dict[str, Any], list[str]]) -> None:
    out, results, messages = run
    for name in ("report.md", "results.json", "accuracy.png", "accuracy_vs_aggregations.png",
                 "tau.png"):
        assert (out / name).is_file(), name
    assert list(results["rows"]) == list(PAPER)
    assert json.loads((out / "results.json").read_text())["settings"]["epochs"] == 2
    assert any(m.startswith("APFL:") for m in messages)
    report = (out / "report.md").read_text()
    assert "not the paper's 50" in report and "| APFL |" in report


def test_rows_follow_their_schedules(run: tuple[Path, dict[str, Any], list[str]]) -> None:
    _, results, _ = run
    rows = results["rows"]
    spe = rows["FL τ=1"]["steps_per_epoch"]
    assert rows["FL τ=1"]["aggregations"] == 2 * spe
    assert rows["FL τ=15"]["aggregations"] == 2 * -(-spe // 15)
    assert rows["APFL"]["batch_sizes"] != rows["APFL (no mbs)"]["batch_sizes"]
    assert len(set(rows["APFL (no mbs)"]["batch_sizes"].values())) == 1
    assert max(rows["APFL"]["tau"]) == 15 and all(t >= 1 for t in rows["APFL"]["tau"])
    for name, row in rows.items():
        assert 0.1 < row["accuracy"] <= 1, name
    assert {c["verdict"] for c in results["agreement"]} <= {"agrees", "partly", "differs"}
