"""Vertical jobs (islands run, kind = "vertical") and the quick vfl reproduction."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("phe")

from islands.progress import ProgressUpdate
from islands.runs import Reproduction, load_run
from islands.vfl.job import (
    JobError,
    VerticalJobResult,
    load_vertical_job,
    parse_vertical_job,
    run_vertical,
)
from islands.vfl.keys import InsecureKeyWarning

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# results.json's keys, in order, as every release has written them
VERTICAL_KEYS = ["job", "settings", "rows", "features", "loss_history", "batch_losses",
                 "epochs_run", "converged", "metrics", "epoch_seconds", "per_epoch_split",
                 "bytes", "bytes_by_tag", "aligned_ids", "max_abs_diff_to_centralised_gd",
                 "wall_time_s"]
INSECURE_KEYS = [*VERTICAL_KEYS[:2], "security_warning", *VERTICAL_KEYS[2:]]
"""The keys of a run with keys below the 2048-bit floor: the warning follows the settings."""
WARNING = "1024-bit keys are below islands' 2048-bit floor (insecure_keys)"


def test_the_examples_parse() -> None:
    for path in EXAMPLES.glob("vfl-*.toml"):
        job = load_vertical_job(path)
        assert job.model["key_bits"] >= 2048 and job.name == path.stem


@pytest.mark.parametrize(("raw", "message"), [
    ({"name": "x", "kind": "vertical", "colour": 1}, "unknown key"),
    ({"name": "x", "kind": "vertical", "model": {"kind": "tree"}}, "'kind' must be"),
    ({"name": "x", "kind": "vertical", "model": {"epochs": 0}}, "'epochs' must be"),
    ({"name": "x", "kind": "vertical", "data": {"name": "mnist"}}, "'name' must be one of"),
    ({"name": "x", "kind": "vertical", "parties": {"psi": "yes"}}, "'psi' must be bool"),
    *[({"name": "x", "kind": "vertical", "parties": {"psi": True, key: value}},
       rf"\[parties\]: '{key}' must be")
      for key, value in [("max_peer_size", 0), ("max_peer_size", -3), ("max_peer_size", "100"),
                         ("max_peer_size", 2.5), ("max_peer_size", True),
                         ("max_peer_ratio", 0), ("max_peer_ratio", -1.5),
                         ("max_peer_ratio", "10"), ("max_peer_ratio", float("inf")),
                         ("max_peer_ratio", float("nan")), ("max_peer_ratio", False)]],
    ({"name": "x", "kind": "vertical", "parties": {"max_peer_ratio": 20}},
     "'max_peer_ratio' applies only with psi = true"),
    ({"name": "x", "kind": "vertical", "parties": {"psi": True, "psi_engine": "ecdh"}},
     r"\[parties\]: 'psi_engine' must be 'dh' or 'spu'; got 'ecdh'"),
    ({"name": "x", "kind": "vertical", "parties": {"psi_engine": "spu"}},
     "'psi_engine' applies only with psi = true"),
    ({"name": "x", "kind": "vertical", "model": {"psi_engine": "spu"}},
     r"\[model\]: unknown key\(s\) \['psi_engine'\]"),
])
def test_bad_jobs_name_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(JobError, match=message):
        parse_vertical_job(raw)


def test_a_two_passive_linear_job_runs_and_matches_scikit_learn() -> None:
    job = parse_vertical_job({"name": "t", "kind": "vertical", "data": {"name": "diabetes"},
                              "parties": {"b_features": 4, "passive": 2},
                              "model": {"kind": "linear", "key_bits": 1024, "he": "paillier",
                                        "insecure_keys": True, "epochs": 30,
                                        "batch_size": 64}})
    r = run_vertical(job)
    assert (r.passive_features, r.active_features) == ([3, 3], 4)
    assert abs(r.metrics["r2"] - r.metrics["sklearn_r2"]) < 0.02
    assert r.max_abs_diff_to_centralised_gd is not None
    assert r.max_abs_diff_to_centralised_gd < 1e-4
    assert len(r.epoch_seconds) == r.epochs_run == len(r.loss_history)
    assert set(r.per_epoch_split) == {"A1", "A2", "B", "C"}
    # results.json: the keys and nesting it has always had, and the opt-in to 1024-bit keys
    doc = r.to_json()
    assert list(doc) == INSECURE_KEYS and doc["security_warning"].startswith(WARNING)
    assert doc["settings"]["insecure_keys"] is True and doc["job"]["model"]["insecure_keys"]
    assert doc["rows"] == {"train_aligned": r.train_rows, "test": r.test_rows}
    assert doc["features"] == {"passive": [3, 3], "active": 4}
    assert doc["settings"]["objective"] == "linear" and doc["job"]["name"] == "t"
    assert doc["aligned_ids"] is None


def test_cli_runs_a_vertical_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from islands.cli import main

    job = tmp_path / "job.toml"
    job.write_text('name = "bc"\nkind = "vertical"\n[data]\nname = "breast_cancer"\n'
                   '[parties]\nb_features = 10\npsi = true\nmax_peer_size = 500\n'
                   '[model]\nkind = "logistic"\nkey_bits = 1024\ninsecure_keys = true\n'
                   'epochs = 3\nhe = "paillier"\n')
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["islands", "run", str(job), "--output", str(out)])
    with pytest.warns(InsecureKeyWarning, match=re.escape(WARNING)), \
            pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None)
    result = json.loads((out / "results.json").read_text())
    assert result["aligned_ids"] < 455 and result["metrics"]["auc"] > 0.95
    assert result["security_warning"].startswith(WARNING)
    assert list(result) == INSECURE_KEYS and result["rows"]["train_aligned"] == result[
        "aligned_ids"]
    assert list(result["metrics"]) == ["accuracy", "auc", "sklearn_accuracy", "sklearn_auc"]
    assert (out / "loss.png").stat().st_size > 1000


def test_cli_refuses_resume_for_a_vertical_job(tmp_path: Path) -> None:
    """--resume continues a horizontal job; a vertical job has no checkpoints to use."""
    from typer.testing import CliRunner

    from islands.cli import app

    job = tmp_path / "job.toml"
    job.write_text('name = "bc"\nkind = "vertical"\n[data]\nname = "breast_cancer"\n')
    result = CliRunner().invoke(app, ["run", str(job), "--resume", "--output",
                                      str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert " ".join(result.output.split()).startswith("error: --resume continues a horizontal")
    assert not (tmp_path / "out").exists()


def test_quick_reproduction(tmp_path: Path) -> None:
    from islands.experiments.vfl import reproduce_vfl

    updates: list[ProgressUpdate] = []
    results = reproduce_vfl(tmp_path, quick=True, progress=updates.append)
    # one task, announced at 0, one unit per step message, finished once at the end
    assert {u.task for u in updates} == {"reproduce vfl"}
    assert (updates[0].done, updates[0].info, updates[0].finished) == (0, "starting", False)
    assert [u.done for u in updates[1:-1]] == list(range(1, len(updates) - 1))
    assert (updates[-1].finished, updates[-1].info) == (True, "done")
    assert [u.finished for u in updates].count(True) == 1
    messages = [u.info for u in updates[1:-1]]
    assert set(results.sections["runs"]) == {"diabetes", "breast_cancer", "synthetic"}
    assert all(isinstance(r, VerticalJobResult) for r in results.sections["runs"].values())
    assert all(c["verdict"] != "differs" for c in results.agreement)
    assert sum(results.verdicts.values()) == len(results.agreement)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert list(doc) == ["settings", "runs", "agreement", "figures", "wall_time_s"]
    assert doc == json.loads(json.dumps(results.to_json()))
    # quick runs opt into 1024-bit keys, and each run's results say so
    assert all(list(r) == INSECURE_KEYS for r in doc["runs"].values())
    assert "1024-bit keys, below the 2048-bit floor" in (tmp_path / "report.md").read_text()
    report = (tmp_path / "report.md").read_text()
    assert "Cost per epoch" in report and (tmp_path / "loss_curves.png").exists()
    assert any("[breast_cancer]" in m for m in messages)
    # load_run reads it back: one history row per vertical job, with its test metrics
    run = load_run(tmp_path)
    assert isinstance(run, Reproduction) and run.name == tmp_path.name
    assert [h["name"] for h in run.history] == ["diabetes", "breast_cancer", "synthetic"]
    for row in run.history:
        assert row["metrics_" + ("r2" if row["name"] == "diabetes" else "auc")] == doc[
            "runs"][row["name"]]["metrics"]["r2" if row["name"] == "diabetes" else "auc"]
        assert row["bytes"] == doc["runs"][row["name"]]["bytes"]
    # the CLI's table reads the typed runs
    from islands.cli.common import console
    from islands.cli.reproduce import REPRODUCTIONS

    tables = next(e for e in REPRODUCTIONS if e.name == "vfl").tables
    assert tables is not None
    with console.capture() as printed:
        tables(results)
    text = printed.get()
    for r in results.sections["runs"].values():
        key = "auc" if "auc" in r.metrics else "r2"
        assert f"{r.metrics[key]:.4f}" in text and f"{r.metrics['sklearn_' + key]:.4f}" in text


def test_the_psi_limit_of_a_job_file() -> None:
    from islands.psi import DEFAULT_MAX_PEER_RATIO

    base = {"name": "x", "kind": "vertical"}
    default = parse_vertical_job({**base, "parties": {"psi": True}}).parties
    assert default["max_peer_size"] is None
    assert default["max_peer_ratio"] == DEFAULT_MAX_PEER_RATIO
    job = parse_vertical_job({**base, "parties": {"psi": True, "max_peer_ratio": 20,
                                                  "max_peer_size": 5000}})
    assert job.parties["max_peer_ratio"] == 20.0 and job.parties["max_peer_size"] == 5000
    assert default["psi_engine"] == "dh" and job.config().psi_engine == "dh"
    spu = parse_vertical_job({**base, "parties": {"psi": True, "psi_engine": "spu"}})
    assert spu.parties["psi_engine"] == spu.config().psi_engine == "spu"


def test_a_job_files_psi_limit_reaches_the_parties(tmp_path: Path) -> None:
    """A user runs ``islands run`` on a job whose PSI limit (half a party's own IDs) the
    other party's set exceeds: the run stops at PSI, naming the real parties and the limit."""
    job = tmp_path / "job.toml"
    job.write_text('name = "bc"\nkind = "vertical"\n[data]\nname = "breast_cancer"\n'
                   '[parties]\nb_features = 10\npsi = true\nmax_peer_ratio = 0.5\n'
                   '[model]\nkind = "logistic"\nkey_bits = 1024\ninsecure_keys = true\n'
                   'epochs = 1\n')
    done = subprocess.run([sys.executable, "-c", "from islands.cli import main; main()",
                           "run", str(job), "--output", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "COLUMNS": "400"})
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1, said
    # 455 training rows, each party keeps 95%: 433 IDs, limit 0.5 x 433 = 216
    assert "PSI party 'B' refuses party 'A': it announced 433 IDs" in said, said
    assert "max_peer_size = 216 (max_peer_ratio 0.5" in said, said
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_bad_progress_value_is_named_before_anything_runs(tmp_path: Path) -> None:
    from islands.errors import ValidationError
    from islands.experiments.vfl import reproduce_vfl

    with pytest.raises(ValidationError, match="'progress' parameter of reproduce_vfl"):
        reproduce_vfl(tmp_path / "out", quick=True, progress="yes")
    assert not (tmp_path / "out").exists()


def test_cli_reproduce_shows_each_step(tmp_path: Path) -> None:
    """Off a terminal (a pipe, a CI log) ``islands reproduce`` prints one line per step."""
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES.parent / "src"), "COLUMNS": "200"}
    # the command in a process of its own, its quick jobs cut to 2 epochs and 1,500
    # synthetic rows (test_quick_reproduction runs them whole)
    smaller = ("import dataclasses\n"
               "from islands.experiments import vfl\n"
               "quick_jobs = vfl._jobs\n"
               "vfl._jobs = lambda quick, seed: [dataclasses.replace(\n"
               "    j, model={**j.model, 'epochs': 2},\n"
               "    data={**j.data, 'rows': min(j.data['rows'], 1500) if j.data['rows'] else 0})\n"
               "    for j in quick_jobs(quick, seed)]\n"
               "from islands.cli import main\n"
               "main()\n")
    proc = subprocess.run([sys.executable, "-c", smaller, "reproduce", "vfl", "--quick",
                           "--out", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = [line for line in proc.stdout.splitlines() if line.startswith("reproduce vfl: ")]
    assert any("[breast_cancer]" in line and "private set intersection" in line
               for line in steps), proc.stdout
    assert steps[-1] == "reproduce vfl: done"
    assert "Agreement with the paper" in proc.stdout
    assert len(load_run(tmp_path / "out").history) == 3
