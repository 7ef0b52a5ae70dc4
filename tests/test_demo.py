"""``islands demo``: the parts at tiny sizes, and the command as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from islands.data import find_fashion_mnist
from islands.errors import ValidationError
from islands.experiments import demo
from islands.experiments.demo import PARTS, MissingDependency, Settings, check_parts, run_demo

SRC = Path(__file__).resolve().parents[1] / "src"
needs_fashion = pytest.mark.skipif(find_fashion_mnist() is None,
                                   reason="Fashion-MNIST not installed "
                                          "(apt-get install dataset-fashion-mnist)")


def _islands(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": path}  # no wrapped error lines
    return subprocess.run([sys.executable, "-m", "islands.cli", "demo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_demo_command_runs_parts_and_writes_the_folder(tmp_path: Path) -> None:
    run = _islands("--part", "pca,vfl", "--quick", "--out", "out", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[pca" in run.stdout and "[vfl" in run.stdout  # progress, one line per step
    assert "islands demo: 2 parts" in run.stdout  # the summary table
    out = tmp_path / "out"
    doc = json.loads((out / "results.json").read_text())
    assert list(doc["parts"]) == ["pca", "vfl"]
    for part in doc["parts"].values():
        assert part["skipped"] is None, part
        assert part["bytes_exchanged"] > 0 and part["seconds"] > 0
        for figure in part["figures"]:
            assert (out / figure).stat().st_size > 1000, figure
    # ELFedPCA leaks site matrices exactly; the secure mode's reading is far off
    pca = doc["parts"]["pca"]["figures_of_merit"]
    assert pca["elfedpca_recovery_rel_error"] < 1e-6 < 1.0 < pca["secure_recovery_rel_error"]
    assert doc["parts"]["vfl"]["figures_of_merit"]["auc_new_ids"] > 0.9
    # a masked reading's relative error (~1e12) is said in words, not printed as a number
    assert "over 1000× (secure)" in doc["parts"]["pca"]["key_figure"]
    assert "e+" not in doc["parts"]["pca"]["key_figure"]
    assert "What leaks" in doc["parts"]["vfl"]["summary"]
    # the default engine: secret shares, no keys (so no key-size warning)
    assert doc["parts"]["vfl"]["details"]["engine"] == "ss"
    assert "security_warning" not in doc["parts"]["vfl"]["details"]
    report = (out / "report.md").read_text()
    assert "| part |" in report and "## pca" in report and "![pca](pca.png)" in report
    page = (out / "report.html").read_text()  # islands.run_report, written by the demo
    assert "demo (islands demo)" in page and page.count("<img") >= 2
    assert "Figures drawn from results.json" not in page  # the parts draw their own


def test_demo_command_names_the_parts_for_an_unknown_one(tmp_path: Path) -> None:
    run = _islands("--part", "pca,nope", cwd=tmp_path)
    assert run.returncode == 2
    said = " ".join((run.stdout + run.stderr).split())
    assert "'nope'" in said and "scca, pca, hfl, vfl, secureboost, ftl" in said
    assert not (tmp_path / "runs").exists()


def test_check_parts() -> None:
    assert check_parts(None) == list(PARTS)
    assert check_parts(["vfl,scca", "vfl"]) == ["vfl", "scca"]
    with pytest.raises(ValidationError, match="unknown demo part 'x'"):
        check_parts(["x"])


def test_a_part_missing_its_dependency_is_a_row_and_the_others_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(s: Settings) -> demo.PartResult:
        raise MissingDependency("needs tenseal (not installed)")

    monkeypatch.setitem(demo.PARTS, "hfl", missing)
    result = run_demo(tmp_path, parts=["hfl", "pca"], quick=True)
    hfl, pca = result.parts
    assert hfl.skipped == "skipped: needs tenseal (not installed)" and hfl.figures == []
    assert pca.skipped is None and pca.figures == ["pca.png"]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["parts"]["hfl"]["skipped"].startswith("skipped")
    assert "needs tenseal" in (tmp_path / "report.md").read_text()


def test_scca_part_quick(tmp_path: Path) -> None:
    r = demo.scca_part(Settings(out=tmp_path, quick=True))
    f = r.figures_of_merit
    assert f["max_abs_rho_diff"] < 1e-6  # secure SCCA equals pooled CCA
    assert f["y_error_paper"] < 0.5 < 1.0 < f["y_error_secure"]
    assert r.bytes_exchanged > 0 and (tmp_path / "scca.png").exists()


@needs_fashion
def test_hfl_part_quick(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tenseal")
    r = demo.hfl_part(Settings(out=tmp_path, quick=True))
    f = r.figures_of_merit
    assert f["leak_error_plain"] < 1e-3 and f["leak_error_ckks"] > 0.5
    # each run's bytes, so the page can say what encryption costs; and CKKS's shared key
    by_run = r.details["bytes_by_run"]
    assert by_run["APFL + CKKS + chaos"] > by_run["FedAvg (plain)"] > 0
    assert sum(by_run.values()) == r.bytes_exchanged
    assert "same CKKS secret key" in r.summary
    assert 0.0 < f["accuracy_apfl_ckks_chaos"] <= 1.0
    assert all((tmp_path / name).exists() for name in r.figures)


def test_ftl_part_quick(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    r = demo.ftl_part(Settings(out=tmp_path, quick=True))
    shares = r.details["shares"]
    assert sum(shares.values()) == pytest.approx(1.0)
    assert r.figures_of_merit["overlap"] == 60
    assert r.bytes_exchanged > 0 and (tmp_path / "ftl.png").exists()
