"""``islands run JOB.toml --set KEY=VALUE``: one setting changed from the command line.

An override is checked exactly as the file's own value, says so when refused, is echoed
in ``results.json``, and trains exactly what the file with that value written in it trains.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from islands.cli import app
from islands.errors import JobError
from islands.hfl.job import load_job
from islands.validation import apply_overrides
from islands.vfl.job import load_vertical_job

ROOT = Path(__file__).resolve().parents[1]

JOB = """
name = "quick"
epochs = 1
seed = 3
baseline = false
eval_fraction = 0.0

[data]
name = "digits"

[partition]
kind = "iid"
clients = 3

[model]
kind = "linear"

[strategy]
name = "fedavg"
local_steps = 1
lr = 0.1
"""


def test_values_are_read_as_toml_and_bare_words_as_text() -> None:
    raw = {"epochs": 1, "strategy": {"name": "fedavg"}, "data": {"name": "wine"}}
    out, applied = apply_overrides(raw, [
        "epochs=5", "strategy.lr=0.05", "strategy.momentum = 0.5", "baseline=false",
        "data.name=digits", 'name="a b"', "protect=[\"secagg\", \"dp\"]", "dp.clip=2",
        "epochs=6"], "job file j.toml")
    assert out == {"epochs": 6, "strategy": {"name": "fedavg", "lr": 0.05, "momentum": 0.5},
                   "data": {"name": "digits"}, "baseline": False, "name": "a b",
                   "protect": ["secagg", "dp"], "dp": {"clip": 2}}
    assert applied == {"epochs": 6, "strategy.lr": 0.05, "strategy.momentum": 0.5,
                       "baseline": False, "data.name": "digits", "name": "a b",
                       "protect": ["secagg", "dp"], "dp.clip": 2}
    assert next(iter(applied)) == "epochs"
    assert raw["epochs"] == 1 and "lr" not in raw["strategy"]  # the file's table is kept


@pytest.mark.parametrize(("text", "message"), [
    ("epochs", "must be KEY=VALUE"),
    ("=3", "must be KEY=VALUE"),
    ("strategy..lr=1", "must be KEY=VALUE"),
    ("epochs=", "gives no value"),
    ("data.name.kind=1", "'data.name' is not a section"),
])
def test_a_malformed_override_is_named(text: str, message: str) -> None:
    with pytest.raises(JobError, match=message) as info:
        apply_overrides({"data": {"name": "wine"}}, [text], "job file j.toml")
    assert "job file j.toml: --set" in str(info.value)


def test_an_override_is_checked_as_the_files_own_value(tmp_path: Path) -> None:
    path = tmp_path / "quick.toml"
    path.write_text(JOB, encoding="utf-8")
    job = load_job(path, ["strategy.local_steps=4", "epochs=2"])
    assert job.epochs == 2 and job.strategy["local_steps"] == 4
    assert job.overrides == {"strategy.local_steps": 4, "epochs": 2}
    assert load_job(path).to_dict() == {k: v for k, v in job.to_dict().items()
                                        if k != "overrides"} | {
        "epochs": 1, "strategy": {"name": "fedavg", "local_steps": 1, "lr": 0.1}}
    with pytest.raises(JobError, match=r"\[strategy\]: 'local_steps' must be an int >= 1; "
                                       r"got 0 \(with --set strategy.local_steps=0\)"):
        load_job(path, ["strategy.local_steps=0"])
    with pytest.raises(JobError, match=r"unknown key\(s\) \['epoch'\].*with --set epoch=2"):
        load_job(path, ["epoch=2"])
    vertical = ROOT / "examples" / "vfl-breast-cancer.toml"
    vjob = load_vertical_job(vertical, ["model.epochs=3"])
    assert vjob.model["epochs"] == 3 and vjob.overrides == {"model.epochs": 3}
    assert "overrides" not in load_vertical_job(vertical).to_dict()
    with pytest.raises(JobError, match=r"'key_bits'.*with --set model\.key_bits=100"):
        load_vertical_job(vertical, ["model.key_bits=100"]).config()


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from islands.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


def test_the_command_line_trains_what_the_edited_file_trains(tmp_path: Path) -> None:
    (tmp_path / "quick.toml").write_text(JOB, encoding="utf-8")
    edited = JOB.replace("local_steps = 1", "local_steps = 3").replace("lr = 0.1", "lr = 0.2")
    (tmp_path / "edited.toml").write_text(edited, encoding="utf-8")
    done = run_cli("run", "quick.toml", "--set", "strategy.local_steps=3", "--set",
                   "strategy.lr=0.2", "--output", "a", "--json", "a.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "with strategy.local_steps = 3, strategy.lr = 0.2" in done.stdout
    # the reference and the refused value need no process of their own: the same
    # command, in this one
    ref = CliRunner().invoke(app, ["run", str(tmp_path / "edited.toml"), "--output",
                                   str(tmp_path / "b"), "--json", str(tmp_path / "b.json")])
    assert ref.exit_code == 0, ref.output
    a: dict[str, Any] = json.loads((tmp_path / "a.json").read_text())
    b: dict[str, Any] = json.loads((tmp_path / "b.json").read_text())
    assert a["job"]["overrides"] == {"strategy.local_steps": 3, "strategy.lr": 0.2}
    assert a["job"]["strategy"] == b["job"]["strategy"]
    assert "overrides" not in b["job"]
    # the same model: the same test metrics after every epoch (the timings differ)
    assert [h["test"] for h in a["history"]] == [h["test"] for h in b["history"]]
    assert a["accuracy"] == b["accuracy"]
    bad = CliRunner().invoke(app, ["run", str(tmp_path / "quick.toml"), "--set",
                                   "strategy.lr=-1"])
    assert bad.exit_code == 2
    assert "(with --set strategy.lr=-1)" in " ".join(bad.output.split())
