"""A user's loss function and extra metrics in horizontal FL (issue 38).

The clients minimise the task's loss unless given ``FederatedModel(loss=fn)`` or a file's
``[model] loss = "package.module:function"``; ``extra_metrics`` (``[model] metrics``) add
scikit-learn's or the user's metrics to every test report. Each test trains tiny models
on digits or diabetes for a few rounds.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from sklearn import metrics as skm  # noqa: E402
from torch import nn  # noqa: E402

from islands.aggregation.protect import SampleDP  # noqa: E402
from islands.errors import JobError, ValidationError  # noqa: E402
from islands.hfl import FedAvg, FederatedModel, ModelSpec  # noqa: E402
from islands.hfl.checkpoint import shaping_settings  # noqa: E402
from islands.hfl.torch.dpsgd import PrivateTrainer  # noqa: E402
from islands.hfl.torch.loss import bind_loss  # noqa: E402
from islands.hfl.torch.models import _load_checked, load_flat  # noqa: E402
from islands.hfl.torch.training import Position, Trainer, batch_indices  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MLP = ModelSpec("mlp", (64,), 10, hidden=(16,))


def _digits(n_parts: int = 3) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray,
                                         np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32)
    return [(X[k::n_parts], y[k::n_parts]) for k in range(n_parts)], X, y


def _diabetes() -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray, np.ndarray]:
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X = ((X - X.mean(axis=0)) / X.std(axis=0)).astype(np.float32)
    y = ((y - y.mean()) / y.std()).astype(np.float32)
    return [(X[k::2], y[k::2]) for k in range(2)], X, y


def _strategy() -> FedAvg:
    return FedAvg(local_steps=4, batch_size=16, lr=0.1, momentum=0.5)


def smoothed(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, targets, label_smoothing=0.2)


# ------------------------------------------------------------------ the loss trains
@pytest.mark.parametrize(("task", "fn"), [("classification", F.cross_entropy),
                                          ("regression", F.mse_loss)])
def test_the_built_in_function_as_the_users_loss_trains_bit_for_bit(task: str, fn: Any) -> None:
    parts, _, _ = _digits() if task == "classification" else _diabetes()
    spec = MLP if task == "classification" else ModelSpec("mlp", (10,), 1, hidden=(8,))
    built_in = FederatedModel(spec, _strategy(), task=task, epochs=2).fit(parts)
    own = FederatedModel(spec, _strategy(), task=task, epochs=2, loss=fn).fit(parts)
    np.testing.assert_array_equal(own.params_, built_in.params_)
    assert [r.loss for r in own.rounds_] == [r.loss for r in built_in.rounds_]
    assert built_in.loss_ is None
    assert own.loss_ is not None and own.loss_.name == f"torch.nn.functional:{fn.__name__}"


def test_one_step_follows_the_gradient_of_the_users_loss() -> None:
    _, X, y = _digits()
    trainer = Trainer(MLP, X, y, loss=smoothed)
    w = MLP.initial_params(0)
    out = trainer.train(w, start=Position(0, 3), steps=1, batch_size=32, lr=0.5)
    # the step by hand: the same batch, torch's gradient of the same loss
    module = MLP.build(0)
    load_flat(module, w)
    rows = torch.from_numpy(batch_indices(len(y), 32, 0, 0, 3))
    loss = smoothed(module(torch.from_numpy(X)[rows]), torch.from_numpy(y)[rows])
    grads = torch.autograd.grad(loss, list(module.parameters()))
    want = w - 0.5 * torch.cat([g.reshape(-1) for g in grads]).numpy()
    np.testing.assert_allclose(out.params, want, rtol=0, atol=1e-6)  # float32 rounding only
    assert out.loss == pytest.approx(float(loss.detach()), rel=1e-6)
    plain = Trainer(MLP, X, y).train(w, start=Position(0, 3), steps=1, batch_size=32, lr=0.5)
    assert np.abs(plain.params - out.params).max() > 1e-4  # smoothing moved the step


def test_another_loss_changes_training_and_still_learns() -> None:
    parts, X, y = _digits()
    plain = FederatedModel(MLP, _strategy(), epochs=3).fit(parts)
    weights = torch.ones(10)
    weights[3] = 5.0  # class 3 counts five times
    weighted = functools.partial(F.cross_entropy, weight=weights)
    runs = {name: FederatedModel(MLP, _strategy(), epochs=3, loss=loss).fit(parts)
            for name, loss in (("smoothed", nn.CrossEntropyLoss(label_smoothing=0.2)),
                               ("weighted", weighted))}
    for fm in runs.values():
        assert np.abs(fm.params_ - plain.params_).max() > 1e-3
        assert fm.score(X, y) > 0.8
    assert "label_smoothing=0.2" in runs["smoothed"].loss_.name
    assert runs["weighted"].loss_.name.startswith("torch.nn.functional:cross_entropy(weight=")
    # the weighted class is recalled at least as well as without the weight
    recall = [skm.recall_score(y, fm.predict(X), labels=[3], average="macro")
              for fm in (plain, runs["weighted"])]
    assert recall[1] >= recall[0]


def test_a_regression_loss_sees_flat_outputs_and_targets() -> None:
    parts, X, y = _diabetes()
    seen: list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]] = []

    def huber(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        seen.append((tuple(outputs.shape), tuple(targets.shape), targets.dtype))
        return F.huber_loss(outputs, targets, delta=0.5)

    net = nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 1))  # outputs (b, 1)
    fm = FederatedModel(net, _strategy(), task="regression", epochs=2, loss=huber).fit(parts)
    assert set(seen) == {((2,), (2,), torch.float32), ((16,), (16,), torch.float32)}
    assert fm.score(X, y) > 0.2


def test_the_contribution_loss_is_the_users_loss() -> None:
    from islands.hfl.contribution import ServerValidation

    def doubled(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return 2 * F.cross_entropy(outputs, targets)

    _, X, y = _digits()
    w = MLP.initial_params(1)
    module = MLP.build(0)
    load_flat(module, w)
    with torch.no_grad():
        want = -float(F.cross_entropy(module(torch.from_numpy(X)), torch.from_numpy(y)))
    # minus the mean loss, in chunks: float32 sums in another order than torch's one call
    assert ServerValidation(MLP, X, y, metric="loss")(w) == pytest.approx(want, rel=1e-6)
    assert ServerValidation(MLP, X, y, metric="loss", loss=doubled)(w) == pytest.approx(
        2 * want, rel=1e-6)


# ------------------------------------------------------------------ DP-SGD
def test_dp_sgd_calls_the_loss_row_by_row() -> None:
    _, X, y = _digits()
    rows = np.array([0, 5, 17, 301, 900])
    sums = []
    for loss in (None, F.cross_entropy, smoothed):
        private = PrivateTrainer(Trainer(MLP, X, y, loss=loss), SampleDP(clip=0.05))
        _load_checked(private._module, MLP.initial_params(0))
        sums.append(private.clipped_sum(rows))
    # per-row calls of the same function: the built-in's per-sample losses (float rounding)
    assert torch.allclose(sums[1][0], sums[0][0], atol=1e-7)
    assert sums[1][1] == pytest.approx(sums[0][1], rel=1e-6)
    assert not torch.allclose(sums[2][0], sums[0][0], atol=1e-4)
    parts, X, y = _digits()
    dp = SampleDP(clip=1.0, noise_multiplier=0.5, target_epsilon=50.0)
    fm = FederatedModel(MLP, FedAvg(local_steps=10, batch_size=32, lr=0.5), epochs=2,
                        sample_dp=dp, loss=smoothed).fit(parts)
    assert fm.score(X, y) > 0.5 and fm.sample_privacy_ is not None


def test_dp_sgd_refuses_a_loss_that_needs_two_rows_naming_it() -> None:
    def pairwise(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs, targets) + (outputs[0] - outputs[1]).pow(2).mean()

    parts, _, _ = _digits()
    FederatedModel(MLP, _strategy(), loss=pairwise)._validate()  # fine without DP-SGD
    with pytest.raises(ValidationError, match=r"'loss' parameter of FederatedModel .*pairwise"
                                              r".* fails on one row \(DP-SGD"):
        FederatedModel(MLP, _strategy(), loss=pairwise, sample_dp=SampleDP()).fit(parts)


# ------------------------------------------------------------------ bad losses
def _nan(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, targets) * float("nan")


def _detached(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.tensor(F.cross_entropy(outputs.detach(), targets).item())


@pytest.mark.parametrize(("loss", "message"), [
    (42, r"'loss' parameter of FederatedModel must be None, a callable"),
    (nn.CrossEntropyLoss(reduction="none"), r"0-dimensional float tensor .* shape \(2,\)"),
    (lambda o, t: F.cross_entropy(o, t).detach().item(), r"must return a torch tensor"),
    (lambda o, t: F.cross_entropy(o, t).to(torch.int64), r"dtype torch\.int64"),
    (_nan, r"\(tests?\.?[\w.]*:_nan\) must return a finite value; it returned nan"),
    (_detached, r"differentiable with respect to the outputs"),
    (lambda o, t: F.cross_entropy(o, t.float()), r"fails on a batch of two rows, outputs of "
                                                 r"shape \(2, 10\) and targets of dtype "
                                                 r"torch\.int64"),
    ("no_such_module_x:loss", r"'loss' parameter of FederatedModel names "
                              r"'no_such_module_x:loss'.* cannot be imported"),
    ("not a name", r"'loss' parameter of FederatedModel must be a name "
                   r"'package\.module:function'"),
])
def test_a_bad_loss_is_refused_before_any_message_naming_loss(loss: Any, message: str) -> None:
    parts, _, _ = _digits()
    with pytest.raises(ValidationError, match=message):
        FederatedModel(MLP, _strategy(), loss=loss).fit(parts)


def test_a_loss_refused_by_the_trainer_too() -> None:
    _, X, y = _digits()
    with pytest.raises(ValidationError, match=r"'loss' parameter of Trainer"):
        Trainer(MLP, X, y, loss=lambda o, t: o.sum(dim=1))
    assert bind_loss(None, MLP, "classification") is None


# ------------------------------------------------------------------ resume
def test_a_resume_with_another_loss_is_refused(tmp_path: Path) -> None:
    parts, _, _ = _digits()
    whole = FederatedModel(MLP, _strategy(), epochs=2, loss=smoothed).fit(parts)
    FederatedModel(MLP, _strategy(), epochs=1, loss=smoothed, checkpoint=tmp_path).fit(parts)
    with pytest.raises(ValidationError, match=r"loss: \"tests?\.?[\w.]*:smoothed\" → "
                                              r"\"torch\.nn\.functional:cross_entropy\""):
        FederatedModel(MLP, _strategy(), epochs=2, loss=F.cross_entropy, checkpoint=tmp_path,
                       resume=True).fit(parts)
    with pytest.raises(ValidationError, match=r"loss: \"tests?\.?[\w.]*:smoothed\" → \(none\)"):
        FederatedModel(MLP, _strategy(), epochs=2, checkpoint=tmp_path, resume=True).fit(parts)
    resumed = FederatedModel(MLP, _strategy(), epochs=2, loss=smoothed, checkpoint=tmp_path,
                             resume=True).fit(parts)
    np.testing.assert_array_equal(resumed.params_, whole.params_)
    # the task's loss adds no setting: checkpoints made before losses stay resumable
    assert "loss" not in shaping_settings(seed=0, task="classification", eval_fraction=0.1,
                                          strategy=_strategy())


# ------------------------------------------------------------------ metrics
def gini(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """A user's metric: 2·AUC − 1 of the predictions as scores (regression)."""
    return float(2 * skm.roc_auc_score(y_true > 0, y_pred) - 1)


def test_classification_metrics_match_scikit_learn() -> None:
    parts, X, y = _digits()
    names = ["balanced_accuracy", "f1_macro", "f1_micro", "f1_weighted", "precision_weighted",
             "recall_weighted", "cohen_kappa", "matthews_corrcoef", "accuracy"]
    fm = FederatedModel(MLP, _strategy(), epochs=2, extra_metrics=names).fit(
        parts, test=(X, y))
    got, pred = fm.metrics(X, y), fm.predict(X)
    want = {"balanced_accuracy": skm.balanced_accuracy_score(y, pred),
            "f1_macro": skm.f1_score(y, pred, average="macro"),
            "f1_micro": skm.f1_score(y, pred, average="micro"),
            "f1_weighted": skm.f1_score(y, pred, average="weighted"),
            "precision_weighted": skm.precision_score(y, pred, average="weighted"),
            "recall_weighted": skm.recall_score(y, pred, average="weighted"),
            "cohen_kappa": skm.cohen_kappa_score(y, pred),
            "matthews_corrcoef": skm.matthews_corrcoef(y, pred),
            "accuracy": skm.accuracy_score(y, pred)}
    for name, value in want.items():  # the same scikit-learn calls: equal
        assert got[name] == value, name
    assert fm.history_[-1].test == got  # each epoch's test report has them too
    assert fm.score(X, y) == got["accuracy"]


def test_regression_metrics_and_a_users_function_match_scikit_learn() -> None:
    parts, X, y = _diabetes()
    spec = ModelSpec("mlp", (10,), 1, hidden=(8,))
    fm = FederatedModel(spec, _strategy(), task="regression", epochs=2,
                        extra_metrics={"gini": gini, "mape": "mape"}).fit(parts)
    named = FederatedModel(spec, _strategy(), task="regression", epochs=2,
                           extra_metrics=["r2", "mae", "median_ae", "max_error",
                                          "explained_variance"]).fit(parts)
    pred = fm.predict(X)
    got = fm.metrics(X, y)
    assert got["gini"] == gini(y, pred)
    assert got["mape"] == skm.mean_absolute_percentage_error(y, pred)
    got = named.metrics(X, y)
    pred = named.predict(X)
    # r2 and mae are the report's own, in float64 (sklearn keeps float32 inputs float32)
    y64, pred64 = y.astype(np.float64), pred.astype(np.float64)
    assert got["r2"] == pytest.approx(skm.r2_score(y64, pred64), rel=1e-12)
    assert got["mae"] == pytest.approx(skm.mean_absolute_error(y64, pred64), rel=1e-12)
    assert got["median_ae"] == skm.median_absolute_error(y, pred)
    assert got["max_error"] == skm.max_error(y, pred)
    assert got["explained_variance"] == skm.explained_variance_score(y, pred)
    assert named.score(X, y) == got["r2"]


@pytest.mark.parametrize(("metrics", "message"), [
    (["roc_auc"], r"'extra_metrics' parameter of FederatedModel must be names among "
             r"\['balanced_accuracy', .*\] for a classification"),
    (["r2"], r"\('r2' is a metric of a regression\)"),
    (["f1_macro", "f1_macro"], r"names each metric once"),
    ("f1_macro", r"a list of metric names or a mapping"),
    ({"accuracy": gini}, r"keys are new names \(not among the report's own"),
    ({"mine": 3}, r"a mapping of names to callables"),
    ({"mine": lambda t, p: "high"}, r"The metric 'mine' must return a real number"),
    ({"mine": lambda t: 1.0}, r"The metric 'mine' failed on 64 rows"),
])
def test_bad_metrics_are_refused_before_any_message(metrics: Any, message: str) -> None:
    parts, _, _ = _digits()
    fm = FederatedModel(MLP, _strategy(), extra_metrics=metrics)
    with pytest.raises(ValidationError, match=message):
        fm.fit(parts)
    assert not hasattr(fm, "params_")


# ------------------------------------------------------------------ job files
USER_CODE = '''
import torch.nn.functional as F

def smoothed(outputs, targets):
    return F.cross_entropy(outputs, targets, label_smoothing=0.1)

def plain(outputs, targets):
    return F.cross_entropy(outputs, targets)

def error_rate(y_true, y_pred):
    return float((y_true != y_pred).mean())
'''

JOB = '''
name = "own-loss"
epochs = {epochs}
seed = 3
baseline = {baseline}
output = "{out}"
[data]
name = "digits"
standardize = true
[partition]
kind = "iid"
clients = 2
[model]
kind = "mlp"
hidden = [16]
{model}
[strategy]
name = "fedavg"
batch_size = 32
local_steps = 5
lr = 0.2
'''


def _job(tmp_path: Path, model: str, epochs: int = 1, baseline: str = "false") -> Path:
    (tmp_path / "user_losses.py").write_text(USER_CODE)
    job = tmp_path / "job.toml"
    job.write_text(JOB.format(out=tmp_path / "out", model=model, epochs=epochs,
                              baseline=baseline))
    return job


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    # the job file's folder is not on PYTHONPATH: the loss is found beside the job file
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "islands.cli", "run", *args], env=env,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=600, check=False)


def test_a_job_file_names_its_loss_and_metrics_end_to_end(tmp_path: Path) -> None:
    from islands.hfl.checkpoint import SERVER_FILE, load_checkpoint

    model = ('loss = "user_losses:smoothed"\n'
             'metrics = ["f1_macro", "balanced_accuracy", "user_losses:error_rate"]')
    job = _job(tmp_path, model, baseline="true")
    run = _cli(str(job))
    assert run.returncode == 0, run.stdout[-3000:]
    assert "f1_macro" in run.stdout  # the summary's table has a column for each
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["job"]["model"]["loss"] == "user_losses:smoothed"
    assert results["user_losses:error_rate"] == pytest.approx(1 - results["accuracy"],
                                                              abs=1e-12)
    assert 0.5 < results["f1_macro"] <= 1 and 0.5 < results["balanced_accuracy"] <= 1
    assert set(results["history"][-1]["test"]) >= {"f1_macro", "user_losses:error_rate"}
    baseline = results["baseline"]
    assert baseline["user_losses:error_rate"] == pytest.approx(1 - baseline["accuracy"],
                                                               abs=1e-12)
    saved = load_checkpoint(tmp_path / "out" / "checkpoints" / SERVER_FILE)
    assert saved["settings"]["loss"] == "user_losses:smoothed"
    # resuming under another loss is refused before the data is loaded, naming it
    refused = _cli(str(_job(tmp_path, 'loss = "user_losses:plain"', epochs=2)), "--resume")
    assert refused.returncode != 0 and "Traceback" not in refused.stdout
    assert 'loss: "user_losses:smoothed" → "user_losses:plain"' in " ".join(
        refused.stdout.split()), refused.stdout[-3000:]


def test_the_same_loss_by_name_trains_the_model_of_the_built_in(tmp_path: Path,
                                                                monkeypatch: Any) -> None:
    from islands.hfl.job import load_job, prepare, run_job

    monkeypatch.delitem(sys.modules, "user_losses", raising=False)
    runs = []
    for model in ("", 'loss = "user_losses:plain"'):
        job = load_job(_job(tmp_path, model))
        runs.append(run_job(job, output=tmp_path / f"out{len(runs)}"))
    assert prepare(job).loss.name == "user_losses:plain"
    assert runs[1].metrics == runs[0].metrics
    assert runs[1].history == [{**h, "seconds": r["seconds"]}
                               for h, r in zip(runs[0].history, runs[1].history, strict=True)]


@pytest.mark.parametrize(("model", "message"), [
    ('loss = "user_losses:missing"', r"'loss' parameter of .* names 'user_losses:missing', "
                                     r"but 'user_losses' has no attribute 'missing'"),
    ('loss = "user_losses:error_rate"', r"'loss' parameter of .* \(user_losses:error_rate\) "
                                        r"fails on a batch of two rows"),
    ('loss = "bad name"', r"\[model\].*'loss' must be a name 'package\.module:function'"),
    ('metrics = ["r2"]', r"\[model\]: The 'metrics' parameter of .* \('r2' is a metric of a "
                         r"regression\)"),
    ('metrics = ["user_losses:nothing"]', r"'metrics' parameter of .* names "
                                          r"'user_losses:nothing'"),
])
def test_a_job_files_bad_loss_or_metric_is_named_before_training(
        tmp_path: Path, monkeypatch: Any, model: str, message: str) -> None:
    from islands.hfl.job import load_job, prepare

    monkeypatch.delitem(sys.modules, "user_losses", raising=False)
    with pytest.raises(JobError, match=message):
        prepare(load_job(_job(tmp_path, model)))


def test_a_federation_file_takes_a_loss_and_refuses_metrics() -> None:
    from islands.hfl.spec import hfl_training

    options: dict[str, Any] = {
        "server": "s", "features": 64, "classes": 10, "epochs": 1,
        "model": {"kind": "mlp", "loss": "user_losses:smoothed"},
        "strategy": {"name": "fedavg"}}
    training, _ = hfl_training(options, "federation file f.toml", ("s", "a", "b"))
    assert training.model.loss == "user_losses:smoothed"
    options["model"] = {**options["model"], "metrics": ["f1_macro"]}
    with pytest.raises(JobError, match=r"\[hfl\.model\]: 'metrics' are test metrics of a job "
                                       r"run"):
        hfl_training(options, "federation file f.toml", ("s", "a", "b"))


DEPLOYED_LOSS = '''
import torch.nn.functional as F

def smoothed(outputs, targets):
    return F.cross_entropy(outputs, targets, label_smoothing=0.1)
'''


def test_deployed_clients_import_the_loss_and_the_server_never_does(tmp_path: Path) -> None:
    pytest.importorskip("grpc")
    from islands.deploy.config import load_party_config
    from islands.deploy.launch import run_configured
    from islands.deploy.local import start_parties, wait_parties, write_federation

    parts, _, _ = _digits(2)
    parts = [(X[:300], y[:300]) for X, y in parts]
    for k, (X, y) in enumerate(parts):
        np.save(tmp_path / f"c{k}.npy", np.column_stack([X, y]))
    code = tmp_path / "code"  # not the parties' working folder, which -m puts on sys.path
    code.mkdir()
    (code / "deployed_losses.py").write_text(DEPLOYED_LOSS)
    options = {"server": "server", "features": 64, "classes": 10, "seed": 3, "epochs": 1,
               "model": {"kind": "mlp", "hidden": [16], "loss": "deployed_losses:smoothed"},
               "strategy": {"name": "fedavg", "local_steps": 4, "batch_size": 32, "lr": 0.1}}
    files = write_federation(tmp_path, "hfl", {"server": {"threads": 1},
                                               **{f"c{k}": {"data": f"c{k}.npy", "threads": 1}
                                                  for k in range(2)}},
                             options=options, settings={"connect_timeout": 20.0})
    # a client without the loss's code refuses itself before connecting, naming it
    with pytest.raises(JobError, match=r"\[hfl\.model\]: The 'loss' parameter of .* names "
                                       r"'deployed_losses:smoothed', but module "
                                       r"'deployed_losses' cannot be imported"):
        run_configured(load_party_config(files["c1"]), tell_peers=False)
    src = str(ROOT / "src")
    procs = start_parties(files, env={"PYTHONPATH": src}, only=["server"])
    procs.update(start_parties(files, env={"PYTHONPATH": os.pathsep.join([str(code), src])},
                               only=["c0", "c1"]))
    done = wait_parties(procs, files, 180)
    assert all(f.returncode == 0 for f in done.values()), {n: f.log[-2000:]
                                                           for n, f in done.items()}
    sys.path.insert(0, str(code))
    try:
        import deployed_losses  # type: ignore[import-not-found]

        fm = FederatedModel(MLP, FedAvg(local_steps=4, batch_size=32, lr=0.1, seed=3),
                            epochs=1, random_state=3, threads=1, loss=deployed_losses.smoothed)
        fm.fit(parts, names=["c0", "c1"])
    finally:
        sys.path.remove(str(code))
        sys.modules.pop("deployed_losses", None)
    np.testing.assert_array_equal(np.load(tmp_path / "out/server/params.npy"), fm.params_)
