"""Experiment trackers: a job's [tracking] and FederatedModel(tracking=...) to TensorBoard/MLflow.

The values the trackers hold are read back with the tools' own readers (TensorBoard's
EventAccumulator, MlflowClient) and compared with results.json.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.errors import JobError, ValidationError
from islands.hfl.job import load_job, run_job
from islands.tracking import Tracker, TrackingConfig

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]

JOB = """
name = "tiny"
seed = 0
epochs = 2
output = "{output}"
baseline = false

[data]
name = "digits"
standardize = true

[partition]
kind = "iid"
clients = 2

[model]
kind = "mlp"
hidden = [16]

[strategy]
name = "apfl"
tau = 4
phi = 2
batch_size = 48
lr = 0.05
{tracking}
"""


def _job(tmp_path: Path, tracking: str = "") -> Path:
    path = tmp_path / "job.toml"
    path.write_text(JOB.format(output=tmp_path / "out", tracking=tracking))
    return path


def _scalars(folder: Path, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


# ------------------------------------------------------------------------ settings
@pytest.mark.parametrize(("table", "message"), [
    ('tensorboard = 1', "'tensorboard' must be a bool or a folder path; got 1"),
    ('tensorboard = ""', "'tensorboard' must be a bool or a folder path; got ''"),
    ('mlflow = "yes"', "'mlflow' must be a bool; got 'yes'"),
    ('mlflow_uri = "file:/tmp/x"', "'mlflow_uri' is only used with mlflow = true"),
    ('experiment = ""', "'experiment' must be a non-empty string; got ''"),
    ('tensorbord = true', "unknown key(s) ['tensorbord']"),
])
def test_a_bad_tracking_value_is_named(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(JobError, match="tracking") as err:
        load_job(_job(tmp_path, "\n[tracking]\n" + table))
    assert message in str(err.value)


def test_the_estimator_names_a_bad_tracking_argument() -> None:
    from islands.hfl import FederatedModel
    from islands.hfl.torch.models import ModelSpec

    spec = ModelSpec("mlp", (4,), 2, hidden=(3,))
    parts = [(np.zeros((4, 4), np.float32), np.array([0, 1, 0, 1]))] * 2
    with pytest.raises(ValidationError, match="'tracking' parameter of FederatedModel"):
        FederatedModel(spec, tracking="tensorboard").fit(parts)
    with pytest.raises(ValidationError, match="'mlflow' parameter of FederatedModel's "
                                              "'tracking' must be a bool"):
        FederatedModel(spec, tracking={"mlflow": 1}).fit(parts)


def test_a_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import islands.tracking as tracking

    real = tracking.importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ImportError, match=r"mlflow-skinny.*pip install 'islands\[tracking\]'"):
        Tracker(TrackingConfig(mlflow=True), tmp_path, "run")


def test_set_override_echoes_in_the_job(tmp_path: Path) -> None:
    job = load_job(_job(tmp_path), ["tracking.tensorboard=true", "tracking.experiment=abc"])
    assert job.tracking == {**dict(TrackingConfig()), "tensorboard": True, "experiment": "abc"}
    assert job.to_dict()["tracking"]["tensorboard"] is True
    assert job.overrides == {"tracking.tensorboard": True, "tracking.experiment": "abc"}
    assert "tracking" not in load_job(_job(tmp_path)).to_dict()


# ------------------------------------------------------------------------ end to end
def test_a_job_logs_its_history_to_both_trackers(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    job = load_job(_job(tmp_path, '\n[tracking]\ntensorboard = true\nmlflow = true\n'
                                  'run_name = "r1"'))
    result = run_job(job)
    out = result.to_json()
    info = out["tracking"]
    assert info["errors"] == [] and info["run_name"] == "r1"
    tb = Path(info["tensorboard"])
    assert tb == tmp_path / "out" / "tensorboard" / "r1"
    acc = _scalars(tb, "test/accuracy")
    # TensorBoard keeps float32: equal to results.json's float64 within float32's rounding
    np.testing.assert_allclose([acc[h["epoch"]] for h in out["history"]],
                               [h["test"]["accuracy"] for h in out["history"]], rtol=1e-6)
    assert sorted(acc) == [1, 2]
    assert [_scalars(tb, "round/tau")[r] for r in range(1, out["rounds"] + 1)] == out["tau"]
    # bytes so far after each round (the closing messages come after the last round)
    so_far = [_scalars(tb, "round/bytes")[r] for r in range(1, out["rounds"] + 1)]
    assert so_far == sorted(so_far) and 0 < so_far[-1] <= out["bytes"]["total"]
    assert _scalars(tb, "final/bytes")[0] == pytest.approx(out["bytes"]["total"], rel=1e-6)
    assert _scalars(tb, "final/accuracy")[0] == pytest.approx(out["accuracy"], rel=1e-6)

    client = MlflowClient(tracking_uri=info["mlflow"]["uri"])
    assert info["mlflow"]["uri"] == (tmp_path / "out" / "mlruns").resolve().as_uri()
    run = client.get_run(info["mlflow"]["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "r1"
    # MLflow keeps float64: exactly results.json's values
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id,
                                                                  "test/accuracy")}
    assert history == {h["epoch"]: h["test"]["accuracy"] for h in out["history"]}
    taus = client.get_metric_history(run.info.run_id, "round/tau")
    assert [m.value for m in sorted(taus, key=lambda m: m.step)] == out["tau"]
    assert run.data.metrics["final/accuracy"] == out["accuracy"]
    assert run.data.metrics["final/bytes"] == out["bytes"]["total"]
    assert run.data.params["strategy.tau"] == "4" and run.data.params["data.name"] == "digits"
    # settings and metrics only: no parameter or metric carries the model's weights
    assert not any("param" in k and k != "final/parameters" for k in run.data.metrics)


def _estimator_run(tracking: Any) -> Any:
    from sklearn.datasets import load_digits

    from islands.hfl import FederatedModel
    from islands.hfl.torch.models import ModelSpec

    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32)
    parts = [(X[:300], y[:300]), (X[300:600], y[300:600])]
    spec = ModelSpec("mlp", (64,), 10, hidden=(8,))
    return FederatedModel(spec, epochs=1, random_state=1, threads=1, concurrency=1,
                          tracking=tracking).fit(parts, test=(X[1500:], y[1500:]))


def test_a_tracker_that_fails_warns_and_leaves_the_result_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    calls = {"n": 0}
    real = SummaryWriter.add_scalar

    def fail_later(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > 5:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    plain = _estimator_run(None)
    monkeypatch.setattr(SummaryWriter, "add_scalar", fail_later)
    with pytest.warns(UserWarning, match="TensorBoard failed while logging step .*No space "
                                         "left on device.*results go on unchanged"):
        tracked = _estimator_run({"tensorboard": str(tmp_path / "tb")})
    np.testing.assert_array_equal(tracked.params_, plain.params_)
    assert [h.test for h in tracked.history_] == [h.test for h in plain.history_]
    assert len(tracked.tracking_["errors"]) == 1
    assert plain.tracking_ is None


def test_an_unusable_mlflow_store_stops_the_run_before_training(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    from islands.errors import TrackingError

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(TrackingError, match="MLflow cannot start a run at 'file:"):
        _estimator_run({"mlflow": True, "mlflow_uri": (blocker / "store").as_uri()})


def test_islands_run_with_set_tracking_writes_event_files(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "islands.cli", "run", str(_job(tmp_path)),
         "--set", "tracking.tensorboard=true", "--set", "strategy.tau=3"],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads((tmp_path / "out" / "results.json").read_text())
    assert out["job"]["overrides"] == {"tracking.tensorboard": True, "strategy.tau": 3}
    assert out["job"]["tracking"]["tensorboard"] is True
    run_dir = Path(out["tracking"]["tensorboard"])
    assert run_dir.parent == tmp_path / "out" / "tensorboard"
    assert re.fullmatch(r"tiny_strategy.tau=3_\d{8}-\d{6}", run_dir.name), run_dir.name
    assert out["tau"][0] == 3
    acc = _scalars(run_dir, "test/accuracy")
    np.testing.assert_allclose([acc[h["epoch"]] for h in out["history"]],
                               [h["test"]["accuracy"] for h in out["history"]], rtol=1e-6)
    assert f"tensorboard --logdir {tmp_path / 'out' / 'tensorboard'}" in " ".join(
        proc.stdout.split())
    assert out["tracking"]["errors"] == []


# ------------------------------------------------------------------ the vertical job
VERTICAL_JOB = """
name = "bc"
kind = "vertical"
output = "{output}"
[data]
name = "breast_cancer"
[parties]
b_features = 10
[model]
kind = "logistic"
key_bits = 1024
insecure_keys = true
epochs = 3
tol = "none"
"""


def test_islands_run_of_a_vertical_job_logs_its_losses_to_tensorboard(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    job = tmp_path / "vertical.toml"
    job.write_text(VERTICAL_JOB.format(output=tmp_path / "out"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "islands.cli", "run", str(job),
         "--set", "tracking.tensorboard=true", "--set", "model.learning_rate=0.2"],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads((tmp_path / "out" / "results.json").read_text())
    assert out["job"]["tracking"]["tensorboard"] is True
    run_dir = Path(out["tracking"]["tensorboard"])
    assert run_dir.parent == tmp_path / "out" / "tensorboard"
    assert re.fullmatch(r"bc_model.learning_rate=0.2_\d{8}-\d{6}", run_dir.name), run_dir.name
    assert len(out["loss_history"]) == 3
    loss = _scalars(run_dir, "train/loss")
    assert sorted(loss) == [1, 2, 3]
    np.testing.assert_allclose([loss[e] for e in (1, 2, 3)], out["loss_history"], rtol=1e-6)
    for key in ("accuracy", "auc", "sklearn_auc"):
        final = _scalars(run_dir, f"final/{key}")
        np.testing.assert_allclose(final[0], out["metrics"][key], rtol=1e-6)
    assert _scalars(run_dir, "final/bytes")[0] == pytest.approx(out["bytes"], rel=1e-6)
    assert f"tensorboard --logdir {tmp_path / 'out' / 'tensorboard'}" in " ".join(
        proc.stdout.split())
    assert out["tracking"]["errors"] == []
    assert list(out)[-2:] == ["tracking", "wall_time_s"]


def test_a_vertical_job_without_tracking_writes_the_same_keys(tmp_path: Path) -> None:
    from islands.validation import read_toml
    from islands.vfl.job import parse_vertical_job

    job = tmp_path / "vertical.toml"
    job.write_text(VERTICAL_JOB.format(output=tmp_path / "out"))
    parsed = parse_vertical_job(read_toml(job))
    assert parsed.tracking is None and "tracking" not in parsed.to_dict()
    with_tracking = parse_vertical_job({**read_toml(job), "tracking": {"tensorboard": True}})
    assert with_tracking.to_dict()["tracking"]["tensorboard"] is True
    with pytest.raises(JobError, match=r"\[tracking\]: unknown key\(s\) \['tensorbord'\]"):
        parse_vertical_job({**read_toml(job), "tracking": {"tensorbord": True}})
