"""Job files and ``islands run``: parsing, errors, outputs, resume after a kill."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from islands.cli import app
from islands.hfl.job import JobError, load_job, parse_job, run_job

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]

DIGITS_JOB = """
name = "tiny"
seed = 0
epochs = {epochs}
output = "{output}"
baseline = {baseline}

[data]
name = "digits"
standardize = true

[partition]
kind = "classes"
clients = 3
groups = "{groups}"

[model]
kind = "mlp"
hidden = [16]

[strategy]
name = "apfl"
tau = 4
phi = 2
batch_size = 48
lr = 0.05
"""


# results.json's keys, in order, as every release has written them (the metrics after
# "workers"; "contribution", "baseline" and "dev_avg" only when the job has them)
RESULT_KEYS = ["job", "data", "strategy", "backend", "ray_address", "workers", "{metrics}",
               "aggregations", "rounds", "steps_per_epoch", "batch_sizes", "dropouts",
               "client_failures", "bytes", "seconds_per_round", "history", "resumed_from",
               "protect", "privacy", "sample_privacy", "stopped", "epsilon", "sample_epsilon",
               "tau", "local_accuracy", "federated_seconds", "contribution", "baseline",
               "dev_avg", "wall_time_s"]
CLASSIFICATION = ["accuracy", "precision", "recall", "f1", "per_class_accuracy", "confusion"]
REGRESSION = ["mse", "rmse", "mae", "r2"]


def _result_keys(metrics: list[str], *absent: str) -> list[str]:
    keys = [k for k in RESULT_KEYS if k not in absent]
    i = keys.index("{metrics}")
    return keys[:i] + metrics + keys[i + 1:]


def _job(tmp_path: Path, *, epochs: int = 2, baseline: str = "true",
         groups: str = "0-3,4-6,7-9", name: str = "job.toml") -> Path:
    path = tmp_path / name
    path.write_text(DIGITS_JOB.format(epochs=epochs, output=tmp_path / "out",
                                      baseline=baseline, groups=groups))
    return path


def test_every_example_job_parses() -> None:
    examples = sorted((ROOT / "examples").glob("*.toml"))
    assert {p.name for p in examples} >= {"apfl-quick.toml", "linear-regression.toml"}
    for path in examples:
        if path.name.startswith(("vfl-", "secureboost-")):  # tests/test_vfl_job.py and
            continue                                         # test_vfl_secureboost_job.py
        job = load_job(path)
        assert job.epochs >= 1 and job.strategy["name"] in ("fedavg", "apfl", "fedprox")


@pytest.mark.parametrize(("patch", "message"), [
    ({"epochs": 0}, "'epochs' must be an int >= 1"),
    ({"colour": "red"}, r"unknown key\(s\) \['colour'\]"),
    ({"strategy": {"name": "apfl", "tau": 0}}, r"\[strategy\]: 'tau' must be an int >= 1"),
    ({"strategy": {"name": "sgd"}}, "'name' must be one of|'fedavg', 'apfl' or 'fedprox'"),
    ({"strategy": {"name": "apfl", "batch_size": -1}}, "'batch_size' must be"),
    ({"partition": {"kind": "classes"}}, "missing key 'groups'"),
    ({"data": {"name": "imagenet"}}, "'name' must be one of"),
    ({"model": {"kind": "mlp", "hidden": [0]}}, "'hidden' must be a list of ints >= 1"),
    ({"strategy": {"name": "fedavg", "sampling": "random"}}, "'sampling' must be"),
    ({"strategy": {"name": "apfl", "sampling": "poisson"}}, r"\['sampling'\] do not apply"),
    ({"batch_clients": "sometimes"}, "'batch_clients' must be True, False or 'auto'"),
    ({"batch_clients": True, "backend": "ray"}, "'batch_clients'"),
])
def test_bad_job_keys_are_named(patch: dict[str, object], message: str) -> None:
    raw: dict[str, object] = {
        "epochs": 1, "data": {"name": "digits"},
        "partition": {"kind": "iid", "clients": 2}, "model": {"kind": "mlp"},
        "strategy": {"name": "fedavg"},
    }
    raw.update(patch)
    with pytest.raises(JobError, match=message):
        parse_job(raw)


def test_a_job_sets_batch_clients_as_the_estimator_does() -> None:
    raw: dict[str, object] = {"data": {"name": "digits"}, "partition": {"kind": "iid",
                              "clients": 2}, "model": {"kind": "mlp"},
                              "strategy": {"name": "fedavg"}}
    assert parse_job(raw).batch_clients == "auto"  # FederatedModel's default
    raw["batch_clients"] = False
    assert parse_job(raw).batch_clients is False


def test_a_job_can_ask_for_a_secret_poisson_cohort() -> None:
    from islands.hfl.job import build_strategy

    raw = {"data": {"name": "digits"}, "partition": {"kind": "iid", "clients": 4},
           "model": {"kind": "mlp"}, "protect": ["secagg", "dp"],
           "strategy": {"name": "fedavg", "fraction": 0.5, "sampling": "poisson"}}
    strategy = build_strategy(parse_job(raw))
    assert strategy.sampling == "poisson" and strategy.secret_sampling_rate == 0.5
    raw["strategy"] = {"name": "fedavg", "fraction": 0.5}
    assert build_strategy(parse_job(raw)).secret_sampling_rate is None  # charged q = 1


def test_strategy_keys_that_do_not_apply_are_refused(tmp_path: Path) -> None:
    with pytest.raises(JobError, match=r"\[strategy\] \['phi'\] do not apply to 'fedavg'"):
        parse_job({"data": {"name": "digits"}, "partition": {"kind": "iid", "clients": 2},
                   "model": {"kind": "mlp"}, "strategy": {"name": "fedavg", "phi": 3}})


@pytest.mark.parametrize(("strategy", "message"), [
    ({"name": "fedavg", "lr": 0}, r"'lr' parameter of LocalConfig must be a float in \(0, "),
    ({"name": "fedavg", "lr": float("inf")}, r"'lr' parameter .* Got inf"),
    # every float32 client would fail its first step (torch cannot convert the step size)
    ({"name": "fedavg", "lr": 1e300}, r"'lr' parameter .*finite in float32"),
    ({"name": "apfl", "lr": 0.0}, "'lr' parameter"),
    ({"name": "fedavg", "fraction": 2.0}, r"'fraction' parameter of FedAvg .* \(0, 1\]"),
    ({"name": "fedavg", "momentum": 1.0}, r"'momentum' parameter .* \[0, 1\)"),
    ({"name": "fedprox", "mu": 1e39}, "'mu' parameter of FedProx"),
])
def test_strategy_ranges_are_the_strategys_own(strategy: dict[str, object],
                                               message: str) -> None:
    raw = {"data": {"name": "digits"}, "partition": {"kind": "iid", "clients": 2},
           "model": {"kind": "mlp"}, "strategy": strategy}
    with pytest.raises(JobError, match=r"job file <job> \[strategy\]: .*" + message):
        parse_job(raw)


def test_too_many_clients_names_the_partition_key(tmp_path: Path) -> None:
    path = _job(tmp_path)
    path.write_text(path.read_text().replace('kind = "classes"\nclients = 3\ngroups = '
                                             '"0-3,4-6,7-9"', 'kind = "iid"\nclients = 10000'))
    result = CliRunner().invoke(app, ["run", str(path)])
    assert result.exit_code == 1
    assert "[partition] clients = 10000" in result.output
    assert "training rows" in result.output and "Traceback" not in result.output


def test_unknown_labels_in_a_partition_spec_fail_clearly(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(_job(tmp_path, groups="0-3,4-6,7-12"))])
    assert result.exit_code == 1
    assert "groups" in result.output and "[10, 11, 12]" in result.output


def test_missing_job_file_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(tmp_path / "nope.toml")])
    assert result.exit_code == 2 and "no job file" in result.output


def test_run_writes_json_and_curves(tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["run", str(_job(tmp_path)), "--json", str(out_json)])
    assert result.exit_code == 0, result.output
    res = json.loads(out_json.read_text())
    for key in ("accuracy", "precision", "recall", "f1", "dev_avg", "aggregations"):
        assert key in res, key
    assert 0 <= res["accuracy"] <= 1 and res["aggregations"] == len(res["tau"])
    assert res["baseline"]["kind"] == "centralised" and len(res["history"]) == 2
    assert res["bytes"]["sent"]["server"] > 0
    assert res["data"]["client_classes"] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    for name in ("results.json", "accuracy.png", "tau.png"):
        assert (tmp_path / "out" / name).is_file()
    assert "test metrics" in result.output and "Dev_avg" in result.output
    assert list(res) == _result_keys(CLASSIFICATION, "contribution")
    assert list(res["baseline"]) == [*CLASSIFICATION, "kind", "batch_size", "history", "losses",
                                     "seconds"]
    assert json.loads((tmp_path / "out" / "results.json").read_text()) == res
    assert res["bytes"]["total"] == sum(res["bytes"]["sent"].values())
    assert res["seconds_per_round"]["max"] >= res["seconds_per_round"]["mean"] > 0


def test_linear_regression_job_reaches_the_closed_form(tmp_path: Path) -> None:
    raw = load_job(ROOT / "examples" / "linear-regression.toml").to_dict()
    raw.pop("source")
    # 800 full-batch steps at lr 0.15 land as close to the ridge solution as the
    # example's 1200 at 0.1 (relative difference 1e-7; lr 0.25 diverges)
    raw["epochs"] = 800
    raw["strategy"] = {**raw["strategy"], "lr": 0.15}
    from islands.hfl.job import run_job

    res = run_job(parse_job(raw), output=tmp_path / "lr")
    doc = res.to_json()
    assert list(doc) == _result_keys(REGRESSION, "contribution", "dev_avg")
    assert list(doc["baseline"]) == [*REGRESSION, "kind", "batch_size", "history", "losses",
                                     "seconds", "closed_form"]
    assert list(doc["baseline"]["closed_form"]) == [
        "coef", "intercept", "federated_coef", "federated_intercept", "max_abs_difference",
        "relative_difference", "test", "lambda"]
    assert doc["job"]["task"] == res.task == "regression" and doc["backend"] == "local"
    assert res.baseline is not None and res.baseline.closed_form is not None
    closed = res.baseline.closed_form
    # one full-batch step per round on the same objective is gradient descent itself:
    # after 800 steps it sits on the ridge solution up to float32 rounding
    assert closed.relative_difference < 1e-4
    assert res.metrics["mse"] == pytest.approx(closed.test["mse"], rel=1e-4)


def _ckpt_params(folder: Path) -> np.ndarray:
    from islands.hfl.checkpoint import load_checkpoint

    return np.asarray(load_checkpoint(folder / "checkpoints" / "server.ckpt")["params"])


def test_killed_run_resumes_to_the_uninterrupted_model(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "islands.cli", "run"]
    # 8 epochs are about 190 rounds: the run is killed a few rounds after its first
    # checkpoint, far from its end. The uninterrupted run is the reference, in-process.
    epochs = 8
    (tmp_path / "a").mkdir()
    run_job(load_job(_job(tmp_path / "a", epochs=epochs, baseline="false")))

    killed_dir = tmp_path / "b"
    killed_dir.mkdir()
    job = _job(killed_dir, epochs=epochs, baseline="false")
    proc = subprocess.Popen([*cmd, str(job)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    ckpt = killed_dir / "out" / "checkpoints" / "server.ckpt"
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if ckpt.is_file():
                time.sleep(0.3)  # a few more rounds, then kill it mid-run
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    from islands.hfl.checkpoint import load_checkpoint

    stopped_at = load_checkpoint(ckpt)["round"]
    subprocess.run([*cmd, str(job), "--resume"], env=env, check=True, capture_output=True,
                   timeout=600)
    res = json.loads((killed_dir / "out" / "results.json").read_text())
    assert res["aggregations"] > stopped_at
    np.testing.assert_array_equal(_ckpt_params(killed_dir / "out"),
                                  _ckpt_params(tmp_path / "a" / "out"))


def _protected(tmp_path: Path, protect: str, extra: str = "", epochs: int = 4) -> Path:
    text = DIGITS_JOB.format(epochs=epochs, output=tmp_path / "out", baseline="false",
                             groups="0-3,4-6,7-9")
    text = text.replace('name = "tiny"\n', f'name = "tiny"\nprotect = {protect}\n') + extra
    path = tmp_path / f"job-{abs(hash(protect + extra))}.toml"
    path.write_text(text)
    return path


def test_ckks_over_chaos_matches_the_unprotected_run(tmp_path: Path) -> None:
    pytest.importorskip("tenseal")
    from islands.hfl.job import run_job

    plain = run_job(load_job(_protected(tmp_path, "[]")))
    runner = CliRunner()
    path = _protected(tmp_path, '["ckks", "chaos"]')
    res = runner.invoke(app, ["run", str(path), "--output", str(tmp_path / "p"), "--json",
                              str(tmp_path / "p.json")])
    assert res.exit_code == 0, res.output
    protected = json.loads((tmp_path / "p.json").read_text())
    assert protected["protect"] == ["ckks", "chaos"]
    assert abs(protected["accuracy"] - plain.metrics["accuracy"]) <= 0.005
    assert protected["aggregations"] == plain.aggregations
    assert "protected by ckks + chaos" in res.output


def test_secagg_with_dp_job_reports_the_budget(tmp_path: Path) -> None:
    pytest.importorskip("dp_accounting")
    extra = ('\n[secagg]\nthreshold = 2\n\n[dp]\nclip = 5.0\nnoise_multiplier = 0.5\n'
             'noise = "distributed"\n')
    path = _protected(tmp_path, '["secagg", "dp"]', extra, epochs=1)
    res = CliRunner().invoke(app, ["run", str(path), "--output", str(tmp_path / "o"),
                                   "--json", str(tmp_path / "o.json")])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "o.json").read_text())
    assert out["privacy"]["delta"] == 1e-5 and out["privacy"]["epsilon"] > 0
    eps = out["epsilon"]
    assert all(b > a for a, b in itertools.pairwise(eps))
    assert "privacy spent ε" in res.output
    # ε against the server, labelled, beside it: every client trained every round and no
    # cohort was sampled, so the two are equal here
    keys = list(out)
    assert keys[keys.index("privacy") + 1] == "privacy_against_server"
    assert keys[keys.index("epsilon") + 1] == "epsilon_against_server"
    assert out["privacy_against_server"] == out["privacy"]
    assert out["epsilon_against_server"] == eps
    said = " ".join(res.output.split())  # the console wraps lines
    assert "(against who sees the models)" in said
    assert f"against the server ε = {out['privacy']['epsilon']:.3f}" in said


def test_protection_options_are_checked(tmp_path: Path) -> None:
    bad = [
        ('["rot13"]', "", "a list of names among"),
        ('["secagg"]', "\n[dp]\nclip = 1.0\n", "does not use 'dp'"),
        ('["dp"]', "\n[dp]\nclipp = 1.0\n", "unknown key"),
        ('["dp"]', "\n[dp]\nclip = -1.0\n", "'clip'"),
        ('["ckks", "paillier"]', "", "two base aggregators"),
    ]
    for protect, extra, message in bad:
        with pytest.raises(JobError, match=message):
            load_job(_protected(tmp_path, protect, extra))


CONTRIBUTION = """
[contribution]
methods = ["gtg", "exact", "loo"]
metric = "accuracy"
validation_samples = 150
tolerance = 0.01
"""


@pytest.mark.parametrize(("section", "message"), [
    ({"methods": ["shap"]}, "'methods' must be a list of distinct names"),
    ({"methods": ["gtg", "gtg"]}, "'methods' must be a list of distinct names"),
    ({"validation": "oracle"}, "'validation' must be 'server' or 'clients'"),
    ({"weighting": "equal"}, "'weighting' must be 'fixed' or 'renormalised'"),
    ({"max_permutations": 1}, "'max_permutations' must be an int >= 2"),
    ({"confidence": 1.5}, "confidence"),
    ({"colour": 1}, r"\[contribution\]: unknown key\(s\) \['colour'\]"),
])
def test_bad_contribution_sections_are_named(section: dict[str, object], message: str) -> None:
    raw: dict[str, object] = {
        "data": {"name": "digits"}, "partition": {"kind": "iid", "clients": 2},
        "model": {"kind": "mlp"}, "strategy": {"name": "fedavg"}, "contribution": section}
    with pytest.raises(JobError, match=message):
        parse_job(raw)


def test_contribution_is_refused_under_protections_that_hide_updates() -> None:
    raw: dict[str, object] = {
        "data": {"name": "digits"}, "partition": {"kind": "iid", "clients": 3},
        "model": {"kind": "mlp"}, "strategy": {"name": "fedavg"}, "protect": ["secagg"],
        "contribution": {"methods": ["gtg", "loo"]}}
    with pytest.raises(JobError, match="secure aggregation shows the server only the sum"):
        parse_job(raw)
    # the default is decided for the run: retraining, which needs only final models
    raw["contribution"] = {}
    assert parse_job(raw).contribution["methods"] is None
    raw["contribution"] = {"methods": ["gtg", "loo"]}
    raw["protect"] = ["dp"]  # client-level DP over the plain mean: updates are visible
    assert parse_job(raw).contribution == {"methods": ["gtg", "loo"], "validation": "server",
                                           "validation_samples": 1000, "weighting": "fixed"}


def test_contribution_job_writes_scores_and_the_command_shows_them(tmp_path: Path) -> None:
    path = _protected(tmp_path, "[]", CONTRIBUTION)
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 0, res.output
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert list(result) == _result_keys(CLASSIFICATION, "baseline", "dev_avg")
    report = result["contribution"]
    assert report["clients"] == ["client-1", "client-2", "client-3"]
    assert report["settings"]["validation"] == "server (150 rows)"
    exact = report["scores"]["exact"]
    # efficiency: the exact per-round values add up to the run's gain in utility
    assert sum(exact) == pytest.approx(report["gain"], abs=1e-9)
    assert report["gain"] == pytest.approx(report["utility_final"] - report["utility_initial"],
                                           abs=1e-9)
    assert sum(report["shares"]) == pytest.approx(1.0)
    assert (tmp_path / "out" / "contribution.png").is_file()
    assert "leave-one-out" in res.output  # the run's summary shows the scores too

    chart = tmp_path / "chart.png"
    shown = runner.invoke(app, ["contribution", str(tmp_path / "out"), "--chart", str(chart)])
    assert shown.exit_code == 0, shown.output
    assert chart.is_file()
    for name in report["clients"]:
        assert name in shown.output
    assert f"{100 * report['shares'][0]:.1f}%" in shown.output
    assert "GTG-Shapley" in shown.output and "█" in shown.output


def test_contribution_command_on_a_run_without_scores_is_a_clear_error(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["contribution", str(tmp_path)])
    assert missing.exit_code == 2 and "no results.json" in missing.output
    (tmp_path / "results.json").write_text("{}")
    plain = runner.invoke(app, ["contribution", str(tmp_path)])
    assert plain.exit_code == 2 and "measured no contribution" in plain.output


def test_resumed_run_values_clients_as_the_uninterrupted_one(tmp_path: Path) -> None:
    from islands.data import load
    from islands.hfl import FedAvg, FederatedModel, ModelSpec
    from islands.hfl.contribution import Contribution

    d = load("digits")
    X = (d.X.reshape(len(d.y), -1) / 16).astype(np.float32)
    parts = [(X[k:600:3], d.y[k:600:3]) for k in range(3)]
    val = (X[1500:], d.y[1500:])
    spec = ModelSpec("mlp", (64,), 10, hidden=(16,))

    def model(epochs: int, checkpoint: Path | None, resume: bool = False) -> FederatedModel:
        return FederatedModel(spec, FedAvg(local_steps=3, batch_size=32, lr=0.1,
                                           momentum=0.5), epochs=epochs, random_state=1,
                              checkpoint=checkpoint, resume=resume,
                              contribution=Contribution(val, methods=("gtg", "or", "loo")))

    whole = model(4, None).fit(parts)
    model(2, tmp_path).fit(parts)
    resumed = model(4, tmp_path, resume=True).fit(parts)
    np.testing.assert_array_equal(resumed.params_, whole.params_)
    a, b = whole.contribution_, resumed.contribution_
    assert a is not None and b is not None
    for method in ("gtg", "or", "loo"):
        np.testing.assert_allclose(b.scores[method], a.scores[method], atol=1e-12)
    assert len(b.rounds) == len(a.rounds) == whole.aggregations_


def test_contribution_checks_that_need_the_task_or_the_data_come_first(tmp_path: Path) -> None:
    base: dict[str, object] = {
        "data": {"name": "diabetes"}, "partition": {"kind": "iid", "clients": 2},
        "model": {"kind": "linear"}, "strategy": {"name": "fedavg"}}
    with pytest.raises(JobError, match="'metric' must be 'loss' for a regression"):
        parse_job({**base, "contribution": {"metric": "accuracy"}})
    with pytest.raises(JobError, match="needs eval_fraction > 0"):
        parse_job({**base, "eval_fraction": 0.0, "contribution": {"validation": "clients"}})
    raw = {**base, "protect": ["dp"], "dp": {"noise": "distributed"}, "contribution": {}}
    with pytest.raises(JobError, match="protects only their sum"):
        parse_job(raw)
    from islands.hfl.job import run_job

    job = parse_job({**base, "contribution": {"validation_samples": 10_000}})
    with pytest.raises(JobError, match="only 88 test rows"):
        run_job(job, output=tmp_path / "o")


def test_contribution_command_refuses_malformed_results(tmp_path: Path) -> None:
    runner = CliRunner()
    (tmp_path / "results.json").write_text("{not json")
    res = runner.invoke(app, ["contribution", str(tmp_path)])
    assert res.exit_code == 2 and "not valid JSON" in res.output
    (tmp_path / "results.json").write_text('{"contribution": {"clients": []}}')
    res = runner.invoke(app, ["contribution", str(tmp_path)])
    assert res.exit_code == 2 and "incomplete" in res.output


def test_resuming_with_other_contribution_settings_is_refused(tmp_path: Path) -> None:
    from islands.data import load
    from islands.errors import ValidationError
    from islands.hfl import FedAvg, FederatedModel, ModelSpec
    from islands.hfl.contribution import Contribution

    d = load("digits")
    X = (d.X.reshape(len(d.y), -1) / 16).astype(np.float32)
    parts = [(X[k:400:2], d.y[k:400:2]) for k in range(2)]
    spec = ModelSpec("mlp", (64,), 10, hidden=(8,))

    def model(epochs: int, resume: bool, contribution: object) -> FederatedModel:
        return FederatedModel(spec, FedAvg(local_steps=3, batch_size=32, lr=0.1),
                              epochs=epochs, checkpoint=tmp_path, resume=resume,
                              contribution=contribution)

    val = (X[1500:], d.y[1500:])
    model(1, False, None).fit(parts)
    with pytest.raises(ValidationError, match="holds no contribution valuation"):
        model(2, True, Contribution(val, methods=("gtg", "loo"))).fit(parts)
    model(1, False, Contribution(val, methods=("gtg",))).fit(parts)
    with pytest.raises(ValidationError, match="other contribution settings"):
        model(2, True, Contribution(val, methods=("gtg", "loo"))).fit(parts)


@pytest.mark.parametrize("standardize", [False, True])
def test_a_fashion_job_keeps_its_pixels_as_uint8_and_the_model_divides(
        standardize: bool) -> None:
    from islands.data import load_fashion_mnist
    from islands.hfl.job import prepare

    job = parse_job({"name": "px", "seed": 3, "epochs": 1,
                     "data": {"name": "fashion_mnist", "train_samples": 300,
                              "test_samples": 50, "standardize": standardize},
                     "partition": {"kind": "iid", "clients": 3},
                     "model": {"kind": "mlp", "hidden": [8]},
                     "strategy": {"name": "fedavg", "batch_size": 10}})
    prep = prepare(job)
    rows = np.concatenate([X for X, _ in prep.parts])
    if standardize:  # standardised rows are float32, from the loader's normalised pixels
        assert rows.dtype == np.float32 and prep.spec.input_divisor == 1.0
        return
    assert rows.dtype == np.uint8 and prep.test[0].dtype == np.uint8
    assert prep.spec.input_divisor == 255.0 and "inputs / 255" in prep.spec.describe()
    # what the model sees: the loader's normalised float64 pixels rounded to float32
    normalised = load_fashion_mnist(split="train").X.astype(np.float32)
    raw = load_fashion_mnist(split="train", normalize=False).X
    first = np.flatnonzero((raw == prep.parts[0][0][0]).all(axis=1))[0]
    import torch

    seen = prep.spec.build(0)[0](torch.from_numpy(prep.parts[0][0][:1]).float()).numpy()
    np.testing.assert_array_equal(seen[0], normalised[first])
