"""The Ray backend of the HFL simulation: same results as in-process, errors, failures."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from islands.cli import app
from islands.errors import JobError, ValidationError
from islands.hfl import FedAvg, FederatedModel
from islands.hfl.estimator import client_seed, split_local_eval, torch_threads
from islands.hfl.job import load_job, parse_job, run_job
from islands.hfl.protocol import client, server
from islands.runtime import run_local

ray = pytest.importorskip("ray")
pytest.importorskip("torch")

from islands.aggregation.protect import SampleDP  # noqa: E402
from islands.hfl.ray_backend import (  # noqa: E402
    RayWorkerPool,
    WorkerError,
    WorkerTimeoutError,
)
from islands.hfl.strategy import LocalConfig  # noqa: E402
from islands.hfl.torch.learner import TorchLearner  # noqa: E402
from islands.hfl.torch.models import ModelSpec, flat_parameters  # noqa: E402

SPEC = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(16,))


@pytest.fixture(scope="module", autouse=True)
def ray_instance() -> Any:
    """One local Ray for the module (2 CPUs); fits find it running and leave it so."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def _digits(clients: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32)
    return [(X[k::clients], y[k::clients]) for k in range(clients)]


def _fit(backend: str, parts: list[tuple[np.ndarray, np.ndarray]], **kw: Any) -> FederatedModel:
    test = kw.pop("test", None)
    strategy = FedAvg(local_steps=3, batch_size=16, lr=0.1, momentum=0.5, evaluate=True)
    # the same torch threads on both sides: the arithmetic is then the same
    return FederatedModel(SPEC, strategy, epochs=1, random_state=4, threads=1, backend=backend,
                          **kw).fit(parts, test=test)


def test_ray_run_equals_the_in_process_run_bit_for_bit() -> None:
    parts = _digits(8)
    test = (np.concatenate([p[0][:10] for p in parts]),
            np.concatenate([p[1][:10] for p in parts]))
    local = _fit("local", parts, test=test)
    remote = _fit("ray", parts, test=test)
    assert ray.is_initialized()  # a Ray the fit did not start is left running
    assert remote.workers_ == 2 and len(remote.rounds_) >= 2
    np.testing.assert_array_equal(remote.params_, local.params_)
    assert [r.loss for r in remote.rounds_] == [r.loss for r in local.rounds_]
    assert [r.accuracy for r in remote.rounds_] == [r.accuracy for r in local.rounds_]
    assert remote.history_[-1].test == local.history_[-1].test
    assert remote.transcript_.total_bytes == local.transcript_.total_bytes
    assert remote.dropouts_ == [] and remote.client_failures_ == {}


def test_a_users_module_with_batch_norm_on_ray_equals_the_in_process_run() -> None:
    import torch
    from torch import nn

    parts = [(X.reshape(len(X), 1, 8, 8), y) for X, y in _digits(4)]
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                        nn.Flatten(), nn.Linear(256, 10))
    strategy = FedAvg(local_steps=3, batch_size=16, lr=0.1, momentum=0.5)
    runs = [FederatedModel(net, strategy, epochs=1, random_state=4, threads=1, backend=backend)
            .fit(parts) for backend in ("local", "ray")]
    assert runs[0].params_.size == runs[0].model_.n_trainable() + 8  # with BN's statistics
    np.testing.assert_array_equal(runs[1].params_, runs[0].params_)


def test_a_users_loss_trains_in_the_workers_as_in_process() -> None:
    import torch

    parts = _digits(4)
    loss = torch.nn.CrossEntropyLoss(label_smoothing=0.2)
    local = _fit("local", parts, loss=loss)
    remote = _fit("ray", parts, loss=loss)
    np.testing.assert_array_equal(remote.params_, local.params_)
    assert np.abs(remote.params_ - _fit("local", parts).params_).max() > 1e-4  # it counted


def test_uint8_rows_on_ray_train_the_model_of_float_rows() -> None:
    # digits' pixels are the integers 0..16: kept as uint8 with input_divisor=16 in the Ray
    # workers, the same model bit for bit as float32 rows divided beforehand, in-process
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X8 = X.astype(np.uint8)
    compact = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(16,),
                        input_divisor=16)
    strategy = FedAvg(local_steps=3, batch_size=16, lr=0.1, momentum=0.5, evaluate=True)
    local = FederatedModel(SPEC, strategy, epochs=1, random_state=4, threads=1).fit(
        [((X[k::4] / 16).astype(np.float32), y[k::4]) for k in range(4)])
    remote = FederatedModel(compact, strategy, epochs=1, random_state=4, threads=1,
                            backend="ray").fit([(X8[k::4], y[k::4]) for k in range(4)])
    np.testing.assert_array_equal(remote.params_, local.params_)
    assert [r.accuracy for r in remote.rounds_] == [r.accuracy for r in local.rounds_]


@pytest.mark.parametrize(("kw", "message"), [
    ({"backend": "spark"}, r"'backend' parameter of FederatedModel must be 'local' or 'ray'"),
    ({"backend": "ray", "ray_address": ""}, r"'ray_address' parameter .* Ray address"),
    ({"backend": "ray", "ray_address": "host 6379"}, r"'ray_address' parameter"),
    ({"backend": "ray", "ray_address": 6379}, r"'ray_address' parameter"),
    ({"ray_address": "auto"}, r"'ray_address' parameter .* None unless backend='ray'"),
])
def test_bad_backend_and_address_are_named(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        FederatedModel(SPEC, **kw).fit(_digits(2))


def test_bad_rows_are_refused_before_ray_is_asked() -> None:
    parts = _digits(3)
    X = parts[1][0].copy()
    X[5, 3] = np.inf
    parts[1] = (X, parts[1][1])
    with pytest.raises(ValidationError, match=r"'parts\[1\]\[0\]' parameter of "
                       r"FederatedModel.fit must be finite.*inf at row 5, column 3"):
        _fit("ray", parts)


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_nan_in_local_eval_rows_is_refused_not_a_dropout(backend: str) -> None:
    # it used to pass the checks and make client 2 a dropout when it evaluated (issue 21)
    parts = _digits(4)
    X, y = parts[1]
    _, ev = split_local_eval(len(y), 0.1, client_seed(4, 1))
    X = X.copy()
    X[ev[0], 0] = np.nan
    parts[1] = (X, y)
    with pytest.raises(ValidationError, match=rf"'parts\[1\]\[0\]'.*nan at row {ev[0]}, "):
        _fit(backend, parts)


class _Failing(TorchLearner):
    """In-process reference: fails from round ``fail_from`` on, as a dead worker's clients."""

    def __init__(self, *args: Any, fail_from: int | None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.fail_from = fail_from
        self.calls = 0

    def train(self, params: Any, **kw: Any) -> Any:
        self.calls += 1
        if self.fail_from is not None and self.calls >= self.fail_from:
            raise RuntimeError("worker gone")
        return super().train(params, **kw)


def _roles(learners: list[Any], on_round: Any = None) -> dict[str, Any]:
    strategy = FedAvg(local_steps=2, batch_size=64, lr=0.1)
    names = [f"c{k}" for k in range(len(learners))]
    roles: dict[str, Any] = {"server": partial(
        server, clients=names, strategy=strategy, initial=flat_parameters(SPEC.build(0)),
        epochs=1, client_timeout=120, on_round=on_round)}
    for name, learner in zip(names, learners, strict=True):
        roles[name] = partial(client, server="server", learner=learner,
                              aggregator=strategy.aggregator)
    return roles


def _restarted(actor: Any, old_pid: int) -> None:
    """Wait until ``actor`` answers from a new process (calls in flight may fail)."""
    for _ in range(300):
        try:
            if ray.get(actor.ready.remote(), timeout=60)["pid"] != old_pid:
                return
        except ray.exceptions.RayError:
            pass
    raise AssertionError("the worker did not restart")


def test_a_dead_worker_drops_its_clients_and_a_restarted_one_recovers() -> None:
    parts = _digits(4)
    with RayWorkerPool(SPEC, workers=2, threads=1, timeout=120) as pool:
        learners = [pool.learner(f"c{k}", X, y, seed=k) for k, (X, y) in enumerate(parts)]
        assert [lr.slot for lr in learners] == [0, 1, 0, 1]

        def on_round(record: Any, payload: Any) -> None:
            if record.round == 1:  # between rounds 1 and 2
                ray.kill(pool.actors[0], no_restart=True)  # c0, c2: gone for good
                ray.kill(pool.actors[1], no_restart=False)  # c1, c3: rebuilt from the store
                _restarted(pool.actors[1], pool.pids[1])

        run = run_local(_roles(learners, on_round), tolerate=[f"c{k}" for k in range(4)],
                        timeout=120, blas_threads=None)
    res = run.results["server"]
    assert {(d.round, d.client, d.reason) for d in res.dropouts} == {
        (2, "c0", "failed"), (2, "c2", "failed")}
    assert isinstance(run.failures["c0"], WorkerError)
    assert "failed during train" in str(run.failures["c0"])
    assert len(res.rounds) >= 3 and res.rounds[-1].survivors == 2
    # the same run in-process, c0 and c2 failing in round 2: the same model, bit for bit,
    # with the workers' torch threads (1) here too, whatever this machine's default is
    reference = [_Failing(SPEC, X, y, seed=k, fail_from=2 if k in (0, 2) else None)
                 for k, (X, y) in enumerate(parts)]
    with torch_threads(1):
        ref = run_local(_roles(reference), tolerate=[f"c{k}" for k in range(4)], timeout=120,
                        blas_threads=None).results["server"]
    assert ref.dropouts == res.dropouts
    np.testing.assert_array_equal(res.params, ref.params)


def test_a_worker_that_does_not_answer_in_time_is_a_timeout() -> None:
    X, y = _digits(1)[0]
    with RayWorkerPool(SPEC, workers=1, threads=1, timeout=120) as pool:
        learner = pool.learner("c0", X, y, seed=0)
        pool.timeout = 1e-4  # no call comes back that fast
        with pytest.raises(WorkerTimeoutError, match=r"client 'c0'.* within"):
            learner.train(SPEC.initial_params(0), epoch=0, step=0, steps=1, batch_size=8,
                          config=LocalConfig(lr=0.1), state=None)


def test_a_timed_out_call_does_not_hold_up_the_next_client() -> None:
    """ray.cancel cannot stop a running actor call: the worker is restarted instead."""
    X, y = _digits(1)[0]
    with RayWorkerPool(SPEC, workers=1, threads=1, timeout=120) as pool:
        slow = pool.learner("c0", X, y, seed=0)
        other = pool.learner("c1", X[:64], y[:64], seed=1)
        p0 = SPEC.initial_params(0)
        other.train(p0, epoch=0, step=0, steps=1, batch_size=8, config=LocalConfig(lr=0.1),
                    state=None)  # the worker is warm
        pool.timeout = 1.0
        with pytest.raises(WorkerTimeoutError):
            slow.train(p0, epoch=0, step=0, steps=200_000, batch_size=16,
                       config=LocalConfig(lr=0.1), state=None)
        pool.timeout = 60
        t0 = time.monotonic()
        out = other.train(p0, epoch=0, step=0, steps=1, batch_size=8,
                          config=LocalConfig(lr=0.1), state=None)
        # the abandoned call alone would run for minutes; a restarted worker takes seconds
        assert time.monotonic() - t0 < 30
        assert np.all(np.isfinite(out.params))


def test_dp_sgd_keeps_the_budget_in_the_driver() -> None:
    X, y = _digits(1)[0]
    dp = SampleDP(clip=1.0, noise_multiplier=1.1, target_epsilon=2.0)
    with RayWorkerPool(SPEC, workers=1, threads=1, dp=dp, timeout=120) as pool:
        learner = pool.learner("c0", X, y, seed=0)
        out = learner.train(SPEC.initial_params(0), epoch=0, step=0, steps=2, batch_size=32,
                            config=LocalConfig(lr=0.1), state=None)
        assert np.all(np.isfinite(out.params))
        local = TorchLearner(SPEC, X, y, seed=0, dp=dp)
        local.train(SPEC.initial_params(0), epoch=0, step=0, steps=2, batch_size=32,
                    config=LocalConfig(lr=0.1), state=None)
        assert learner.spent() == local.spent() and learner.spent()[0] > 0
        with pytest.raises(ValidationError, match="past its target epsilon"):
            learner.train(out.params, epoch=0, step=2, steps=100_000, batch_size=32,
                          config=LocalConfig(lr=0.1), state=None)


JOB = """
name = "ray-job"
seed = 1
epochs = 1
output = "{output}"
baseline = false
backend = "{backend}"

[data]
name = "digits"
standardize = true

[partition]
kind = "iid"
clients = 6

[model]
kind = "mlp"
hidden = [16]

[strategy]
name = "fedavg"
local_steps = 4
batch_size = 32
lr = 0.1
"""


def test_a_job_file_with_backend_ray_runs_and_matches_local(tmp_path: Path) -> None:
    path = tmp_path / "ray.toml"
    path.write_text(JOB.format(output=tmp_path / "out", backend="ray"))
    result = CliRunner().invoke(app, ["run", str(path), "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["job"]["backend"] == "ray" and doc["backend"] == "ray"
    assert doc["ray_address"] is None and doc["workers"] == 2
    local_path = tmp_path / "local.toml"
    local_path.write_text(JOB.format(output=tmp_path / "out-local", backend="local"))
    local = run_job(load_job(local_path)).to_json()
    assert local["backend"] == "local"
    assert doc["accuracy"] == local["accuracy"] and doc["bytes"] == local["bytes"]


def read_toml_text(text: str) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads(text)


@pytest.mark.parametrize(("patch", "message"), [
    ({"backend": "spark"}, r"'backend' must be 'local' or 'ray'; got 'spark'"),
    ({"backend": 1}, r"'backend' must be"),
    ({"ray_address": "auto"}, r"'ray_address' is only used with backend = \"ray\""),
    ({"backend": "ray", "ray_address": ""}, r"'ray_address' must be a Ray address"),
    ({"backend": "ray", "ray_address": 6379}, r"'ray_address' must be a Ray address"),
])
def test_bad_backend_keys_in_a_job_are_named(patch: dict[str, Any], message: str) -> None:
    raw = dict(read_toml_text(JOB.format(output="out", backend="local")))
    raw.update(patch)
    with pytest.raises(JobError, match=message):
        parse_job(raw)


def test_importing_the_backend_loads_neither_ray_nor_torch() -> None:
    code = ("import sys, islands.hfl, islands.hfl.ray_backend, islands.hfl.job;"
            "print([m for m in ('ray', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_an_address_where_no_ray_answers_is_refused_at_once() -> None:
    # in a fresh process: here, a Ray is running, and fit would use it
    code = (
        "import numpy as np\n"
        "from islands.errors import ValidationError\n"
        "from islands.hfl import FederatedModel, ModelSpec\n"
        "X = np.zeros((80, 4), np.float32); y = np.arange(80) % 2\n"  # a batch of 64
        "fm = FederatedModel(ModelSpec('linear', (4,), 2), backend='ray',"
        " ray_address='127.0.0.1:1')\n"
        "try:\n"
        "    fm.fit([(X, y)])\n"
        "except ValidationError as exc:\n"
        "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert "'ray_address' parameter of FederatedModel must name a running Ray cluster" in (
        out.stdout), out.stdout + out.stderr
