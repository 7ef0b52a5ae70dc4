"""A practitioner's own PyTorch model in horizontal FL (issue 38, part 1).

Before: ``FederatedModel(model=<nn.Module>)`` was refused ("must be an
islands.hfl.ModelSpec"). Each test trains a user's module as a user would: a small CNN with
batch norm, a frozen backbone with a trainable head, a factory; under every protection;
with DP-SGD's up-front refusals; through a checkpoint and a resume.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from islands.aggregation.additive import AdditiveSharing  # noqa: E402
from islands.aggregation.base import MeanAggregator  # noqa: E402
from islands.aggregation.homomorphic import CKKSAggregator, PaillierAggregator  # noqa: E402
from islands.aggregation.protect import ChaosPermutation, ClientDP, SampleDP  # noqa: E402
from islands.aggregation.secagg import SecureAggregation  # noqa: E402
from islands.errors import ValidationError  # noqa: E402
from islands.hfl import FedAvg, FederatedModel  # noqa: E402
from islands.hfl.torch.models import flat_parameters, load_flat  # noqa: E402
from islands.hfl.torch.user import TorchModel  # noqa: E402


def _digits(n_parts: int = 3) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray,
                                         np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32).reshape(-1, 1, 8, 8)
    return [(X[k::n_parts], y[k::n_parts]) for k in range(n_parts)], X, y


class SmallCNN(nn.Module):
    """conv → batch norm → relu → linear: trainable weights, float and integer buffers."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.head = nn.Linear(channels * 64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.bn(self.conv(x))).flatten(1))


def _cnn(seed: int = 0) -> SmallCNN:
    torch.manual_seed(seed)
    return SmallCNN()


def _strategy(aggregator: object = None) -> FedAvg:
    return FedAvg(local_steps=4, batch_size=32, lr=0.1,
                  **({} if aggregator is None else {"aggregator": aggregator}))


def test_a_users_module_trains_and_its_batch_norm_statistics_travel() -> None:
    parts, X, y = _digits()
    net = _cnn()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    fm = FederatedModel(net, _strategy(), epochs=3, random_state=0).fit(parts, test=(X, y))
    model = fm.model_
    assert isinstance(model, TorchModel)
    trainable = sum(p.numel() for p in net.parameters())
    assert model.n_trainable() == trainable
    assert model.travelling_buffers() == ("bn.running_mean", "bn.running_var")
    assert fm.params_.shape == (trainable + 8,)
    assert fm.history_[-1].test["accuracy"] > 0.8
    # the user's module is never trained in place
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
    exported = fm.export()
    assert isinstance(exported, SmallCNN) and not exported.training
    # the averaged running statistics moved from their initial (0, 1); the integer
    # counter is never averaged: it keeps the initial model's value
    assert not torch.equal(exported.bn.running_mean, torch.zeros(4))
    assert int(exported.bn.num_batches_tracked) == 0
    with torch.no_grad():
        pred = exported(torch.from_numpy(X)).argmax(1).numpy()
    np.testing.assert_array_equal(pred, fm.predict(X))


def test_a_frozen_backbone_stays_home_and_only_the_head_travels() -> None:
    parts, _, _ = _digits()
    torch.manual_seed(1)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    for p in net[1].parameters():
        p.requires_grad_(False)
    fm = FederatedModel(net, _strategy(), epochs=2).fit(parts)
    assert fm.params_.shape == (32 * 10 + 10,)
    assert "2,080 frozen" in fm.model_.describe()
    exported = fm.export()
    assert torch.equal(exported[1].weight, net[1].weight)  # the backbone as it was
    assert not torch.equal(exported[3].weight, net[3].weight)  # the head trained
    # an upload carries the head only: 330 float32 values, not the backbone's 2,080 more
    uploads = [r for r in fm.transcript_ if r.sender != "server" and r.tag == "update"]
    assert uploads and all(330 * 4 < r.nbytes < 330 * 4 + 512 for r in uploads)


def test_a_factory_is_called_with_the_seed_and_gives_the_same_model_for_the_same_seed(
        ) -> None:
    parts, _, _ = _digits()

    def factory() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))

    a = FederatedModel(factory, _strategy(), random_state=3).fit(parts)
    b = FederatedModel(factory, _strategy(), random_state=3).fit(parts)
    c = FederatedModel(factory, _strategy(), random_state=4).fit(parts)
    np.testing.assert_array_equal(a.params_, b.params_)
    assert a.model_.digest == b.model_.digest != c.model_.digest


PROTECTIONS = [
    ("secagg", SecureAggregation, 1e-3),
    ("additive", AdditiveSharing, 1e-3),
    ("ckks", CKKSAggregator, 1e-3),
    ("paillier", PaillierAggregator, 1e-3),
    ("chaos", lambda: ChaosPermutation(SecureAggregation()), 1e-3),
]


@pytest.fixture(scope="module")
def plain_run() -> FederatedModel:
    parts, _, _ = _digits()
    return FederatedModel(_cnn(), _strategy(), epochs=1, random_state=0).fit(parts)


@pytest.mark.parametrize(("name", "make", "atol"), PROTECTIONS, ids=[p[0] for p in PROTECTIONS])
def test_every_protection_covers_a_users_module(name: str, make: object, atol: float,
                                                plain_run: FederatedModel) -> None:
    parts, _, _ = _digits()
    fm = FederatedModel(_cnn(), _strategy(make()), epochs=1, random_state=0).fit(parts)  # type: ignore[operator]
    # the protected sum is the plain mean up to fixed-point or CKKS rounding: parameters
    # and batch-norm statistics alike travel under the protection
    assert fm.params_.shape == plain_run.params_.shape
    np.testing.assert_allclose(fm.params_, plain_run.params_, atol=atol)


def test_client_level_dp_covers_a_users_module() -> None:
    parts, _, _ = _digits()
    fm = FederatedModel(_cnn(), _strategy(ClientDP(MeanAggregator(), clip=5.0,
                                                   noise_multiplier=0.5)),
                        epochs=1, random_state=0).fit(parts)
    assert fm.privacy_ is not None and np.isfinite(fm.privacy_[0])
    assert np.isfinite(fm.params_).all()


def test_dp_sgd_refuses_batch_norm_and_travelling_buffers_naming_them() -> None:
    parts, _, _ = _digits()
    dp = SampleDP(clip=1.0, noise_multiplier=1.0, target_epsilon=50.0)
    with pytest.raises(ValidationError, match=r"layer 'bn' \(BatchNorm2d\).*GroupNorm"):
        FederatedModel(_cnn(), _strategy(), sample_dp=dp).fit(parts)

    class Centred(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(64, 10)
            self.register_buffer("centre", torch.zeros(64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(x.flatten(1) - self.centre)

    with pytest.raises(ValidationError, match=r"buffers travel \(centre\).*persistent=False"):
        FederatedModel(Centred(), _strategy(), sample_dp=dp).fit(parts)
    torch.manual_seed(0)
    grouped = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU(),
                            nn.Flatten(), nn.Linear(256, 10))
    fm = FederatedModel(grouped, _strategy(), epochs=1, sample_dp=dp).fit(parts)
    assert fm.sample_privacy_ is not None and np.isfinite(fm.sample_privacy_[0])
    assert not np.array_equal(fm.params_, fm.model_.initial_params())


@pytest.mark.parametrize(("model", "message"), [
    (3, r"'model' parameter of FederatedModel must be a ModelSpec, a torch\.nn\.Module"),
    ("pkg.mod:fn", r"a job file names 'package\.module:function'"),
    (lambda: 3, r"must return a torch\.nn\.Module; it returned 3"),
    (lambda: nn.Linear(5, 3), r"fails on a batch of shape \(2, 1, 8, 8\)"),
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 1)), r"classes >= 2"),
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).double(), r"dtype torch\.float64"),
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).requires_grad_(False),
     r"no trainable parameter"),
])
def test_a_model_that_cannot_train_is_refused_before_any_message(model: object,
                                                                  message: str) -> None:
    parts, _, _ = _digits()
    with pytest.raises(ValidationError, match=message):
        FederatedModel(model, _strategy()).fit(parts)


def test_labels_beyond_the_models_outputs_are_refused() -> None:
    parts, _, _ = _digits()
    narrow = nn.Sequential(nn.Flatten(), nn.Linear(64, 5))
    with pytest.raises(ValidationError, match=r"outside the model's 5 classes"):
        FederatedModel(narrow, _strategy()).fit(parts)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_a_users_module_trains_exactly_as_the_same_built_in_model(task: str) -> None:
    from islands.hfl import ModelSpec

    if task == "regression":
        from sklearn.datasets import load_diabetes

        X, y = load_diabetes(return_X_y=True)
        X, y = X.astype(np.float32), ((y - y.mean()) / y.std()).astype(np.float32)
        parts, outputs = [(X[k::2], y[k::2]) for k in range(2)], 1
    else:
        parts, X, y = _digits()
        X = X.reshape(len(X), -1)
        parts, outputs = [(Xk.reshape(len(Xk), -1), yk) for Xk, yk in parts], 10
    spec = ModelSpec("mlp", (X[0].size,), outputs, hidden=(16,))
    user = nn.Sequential(nn.Flatten(), nn.Linear(X[0].size, 16), nn.ReLU(),
                         nn.Linear(16, outputs))
    user.load_state_dict(spec.build(5).state_dict())  # the built-in's initial model
    strategy = FedAvg(local_steps=3, batch_size=16, lr=0.05, momentum=0.9)
    built_in = FederatedModel(spec, strategy, epochs=2, random_state=5, task=task).fit(parts)
    own = FederatedModel(user, strategy, epochs=2, random_state=5, task=task).fit(parts)
    np.testing.assert_array_equal(own.params_, built_in.params_)
    np.testing.assert_array_equal(own.predict(X), built_in.predict(X))


def test_resume_of_a_users_module_ends_where_the_whole_run_ends_and_another_is_refused(
        tmp_path: Path) -> None:
    parts, _, _ = _digits()
    whole = FederatedModel(_cnn(), _strategy(), epochs=2, random_state=0).fit(parts)
    FederatedModel(_cnn(), _strategy(), epochs=1, random_state=0, checkpoint=tmp_path).fit(parts)
    with pytest.raises(ValidationError, match=r"model\.digest"):
        FederatedModel(_cnn(seed=1), _strategy(), epochs=2, random_state=0, checkpoint=tmp_path,
                       resume=True).fit(parts)
    resumed = FederatedModel(_cnn(), _strategy(), epochs=2, random_state=0, checkpoint=tmp_path,
                             resume=True).fit(parts)
    np.testing.assert_array_equal(resumed.params_, whole.params_)


def test_travelling_vector_round_trips_through_a_laid_out_module() -> None:
    model = TorchModel.bind(_cnn(), (1, 8, 8))
    module = model.empty()
    values = np.random.default_rng(0).normal(size=model.n_params()).astype(np.float32)
    load_flat(module, values)
    np.testing.assert_array_equal(flat_parameters(module), values)
    assert int(module.bn.num_batches_tracked) == 0
    with pytest.raises(ValidationError, match=f"length {model.n_params()}"):
        load_flat(module, values[:-1])


def test_a_script_that_defines_its_model_trains_it_without_a_main_guard(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, torch
        from torch import nn
        from sklearn.datasets import load_digits
        from islands.hfl import FedAvg, FederatedModel

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32),
                                          nn.ReLU(), nn.Linear(32, 10))
            def forward(self, x):
                return self.body(x)

        X, y = load_digits(return_X_y=True)
        X = (X / 16).astype(np.float32)
        parts = [(X[k::4], y[k::4]) for k in range(4)]
        torch.manual_seed(0)
        fm = FederatedModel(Net(), FedAvg(local_steps=5, batch_size=32, lr=0.1), epochs=3)
        fm.fit(parts)
        fm.save("model.pt")
        net = Net()
        net.load_state_dict(torch.load("model.pt", weights_only=True))
        net.eval()
        pred = net(torch.from_numpy(X)).argmax(1).numpy()
        assert (pred == fm.predict(X)).all()
        print("accuracy", round(float((pred == y).mean()), 3))
    """))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) > 0.8


# ------------------------------------------------------------------ job files
FACTORY_MODULE = '''
from torch import nn

def small_cnn(channels=4, classes=10):
    return nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels),
                         nn.ReLU(), nn.Flatten(), nn.Linear(channels * 64, classes))
'''

JOB = '''
name = "own-model"
epochs = 2
baseline = false
output = "{out}"
[data]
name = "digits"
[partition]
kind = "iid"
clients = 3
[model]
{model}
[strategy]
name = "fedavg"
batch_size = 32
local_steps = 5
lr = 0.1
'''


def _run_job(tmp_path: Path, model: str) -> subprocess.CompletedProcess[str]:
    import os

    (tmp_path / "user_models.py").write_text(FACTORY_MODULE)
    job = tmp_path / "job.toml"
    job.write_text(JOB.format(out=tmp_path / "out", model=model))
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{tmp_path}", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "islands.cli", "run", str(job)], env=env,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=600, check=False)


def test_a_job_file_trains_a_factory_model_and_writes_model_pt(tmp_path: Path) -> None:
    import json
    import sys as _sys

    out = _run_job(tmp_path, 'factory = "user_models:small_cnn"\nargs = { channels = 6 }')
    assert out.returncode == 0, out.stdout[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "user model from user_models:small_cnn" in results["data"]["model"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "model.pt" in json.dumps(manifest)
    _sys.path.insert(0, str(tmp_path))
    try:
        import user_models  # type: ignore[import-not-found]

        from islands.hfl import load_model

        module = load_model(tmp_path / "out" / "model.pt",
                            lambda: user_models.small_cnn(channels=6))
        with pytest.raises(ValidationError, match="does not fit the model"):
            load_model(tmp_path / "out" / "model.pt", user_models.small_cnn)
    finally:
        _sys.path.remove(str(tmp_path))
        sys.modules.pop("user_models", None)
    assert isinstance(module, nn.Sequential) and module[1].running_mean.abs().sum() > 0
    assert results["accuracy"] > 0.8


def test_a_job_file_naming_a_factory_missing_here_is_refused_without_a_traceback(
        tmp_path: Path) -> None:
    out = _run_job(tmp_path, 'factory = "no_such_package.models:net"')
    assert out.returncode != 0 and "Traceback" not in out.stdout
    assert re_search(r"'no_such_package\.models' cannot be imported on this machine.*"
                     r"PYTHONPATH at every party", " ".join(out.stdout.split())), out.stdout


@pytest.mark.parametrize(("model", "message"), [
    ('factory = "user_models_t:missing"', r"has no attribute 'missing'"),
    ('kind = "mlp"\nfactory = "user_models_t:small_cnn"', r"exactly one of 'kind'"),
    ('factory = "user_models_t:small_cnn"\nhidden = [8]', r"'hidden' and 'channels' size a "
     r"built-in 'kind'"),
    ('kind = "mlp"\nargs = { a = 1 }', r"'args' are a factory's keyword arguments"),
    ('factory = "user_models_t:small_cnn"\nargs = { classes = 5 }', r"outputs 5 values per "
     r"row, but the data needs 10"),
    ('factory = "user_models_t:small_cnn"\nargs = { width = 5 }', r"unexpected keyword "
     r"argument 'width'"),
    ('factory = "not a name"', r"'factory' must be a name 'package\.module:function'"),
])
def test_a_job_files_bad_factory_is_named_before_training(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, message: str) -> None:
    import tomllib

    from islands.errors import JobError
    from islands.hfl.job import parse_job, prepare

    (tmp_path / "user_models_t.py").write_text(FACTORY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_models_t", raising=False)
    raw = tomllib.loads(JOB.format(out=tmp_path / "out", model=model))
    with pytest.raises(JobError, match=message):
        prepare(parse_job(raw, source="job.toml"))


def re_search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


# ------------------------------------------------------------------ the examples
ROOT = Path(__file__).resolve().parents[1]


def _example_env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}


def test_the_frozen_backbone_example_runs_from_the_repository(tmp_path: Path) -> None:
    root, env = ROOT, _example_env()
    script = root / "examples" / "own-model" / "train_head.py"
    head = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=600)
    assert head.returncode == 0, head.stderr[-3000:]
    assert "1,290 trained parameters, 1,320 frozen; 1,290 values travel" in head.stdout
    assert "the same predictions" in head.stdout


def _has_fashion() -> bool:
    from islands.data import find_fashion_mnist

    return find_fashion_mnist() is not None


def _run_own_model_example(name: str, tmp_path: Path) -> None:
    """Run ``examples/own-model/<name>`` shortened, from ``tmp_path`` (another folder)."""
    job = subprocess.run([sys.executable, "-m", "islands.cli", "run",
                          str(ROOT / "examples" / "own-model" / name),
                          "--output", str(tmp_path / "out"), "--set", "epochs=1",
                          "--set", "baseline=false", "--set", "data.train_samples=800"],
                         cwd=tmp_path, env=_example_env(), text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=600)
    assert job.returncode == 0, job.stdout[-3000:]


@pytest.mark.skipif(not _has_fashion(), reason="dataset-fashion-mnist not installed")
def test_the_resnet_job_example_runs_from_another_folder(tmp_path: Path) -> None:
    root = ROOT
    # from another folder: the job file's own folder holds the factory's module
    _run_own_model_example("resnet.toml", tmp_path)
    from islands.hfl import load_model

    sys.path.insert(0, str(root / "examples" / "own-model"))
    try:
        module = load_model(tmp_path / "out" / "model.pt", "models:small_resnet")
    finally:
        sys.path.remove(str(root / "examples" / "own-model"))
        sys.modules.pop("models", None)
    assert module.head.out_features == 10


@pytest.mark.skipif(not _has_fashion(), reason="dataset-fashion-mnist not installed")
def test_the_resnet_fedbn_job_example_writes_each_clients_model(tmp_path: Path) -> None:
    _run_own_model_example("resnet-fedbn.toml", tmp_path)
    import json

    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["strategy"].startswith("FedBN(")
    assert results["history"][-1]["test"]["clients_averaged"] == 4
    assert {p.name for p in (tmp_path / "out").glob("model.*.pt")} == {
        f"model.client-{k}.pt" for k in range(1, 5)}


def test_contribution_and_tracking_take_a_users_module(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from islands.hfl.contribution import Contribution

    parts, X, y = _digits()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(),
                        nn.Linear(16, 10))
    behaviour = {"client-3": lambda learner: __import__(
        "islands.hfl.torch.learner", fromlist=["FreeRider"]).FreeRider(learner)}
    fm = FederatedModel(net, _strategy(), epochs=2,
                        contribution=Contribution(validation=(X[:300], y[:300]),
                                                  methods=("retrain", "loo")),
                        tracking={"tensorboard": str(tmp_path / "tb")})
    fm.fit(parts, behaviour=behaviour)
    report = fm.contribution_
    assert report is not None
    # the free-rider contributes least (retraining with it adds nothing)
    assert report.trainings == 6 and report.primary == "retrain"
    assert report.clients[int(np.argmin(report.shares))] == "client-3"
    assert fm.tracking_ is not None and Path(fm.tracking_["tensorboard"]).is_dir()


# ------------------------------------------------------------------ FedBN
def _shifted(n_clients: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    """Digits under each client's own contrast and brightness (features shifted)."""
    parts, _, _ = _digits(n_clients)
    gains, offsets = [1.0, 0.4, 2.5, 1.5], [0.0, 0.5, -0.8, 0.2]
    return [((X * gains[k] + offsets[k]).astype(np.float32), y)
            for k, (X, y) in enumerate(parts)]


def _fedbn(**kw: object) -> object:
    from islands.hfl.strategy import FedBN

    return FedBN(local_steps=4, batch_size=32, lr=0.05, momentum=0.9, **kw)  # type: ignore[arg-type]


def test_fedbn_keeps_each_clients_batch_norm_at_home() -> None:
    parts = _shifted()
    fm = FederatedModel(_cnn(), _fedbn(), epochs=2, random_state=0).fit(parts)
    trainable = sum(p.numel() for p in _cnn().parameters())
    # BN's weight and bias (4 + 4) and running statistics (4 + 4) never travel
    assert fm.params_.shape == (trainable - 8,)
    assert "16 values of local batchnorm layers stay" in fm.model_.describe()
    states = fm.local_states_
    assert sorted(states) == ["client-1", "client-2", "client-3"]
    assert all(v.shape == (16,) for v in states.values())
    assert not np.array_equal(states["client-1"], states["client-2"])
    # each client's model is the shared weights under its own batch norm
    own = fm.export(client="client-2")
    np.testing.assert_array_equal(own.bn.running_mean.numpy(), states["client-2"][8:12])
    with torch.no_grad():
        pred = own(torch.from_numpy(parts[1][0])).argmax(1).numpy()
    np.testing.assert_array_equal(pred, fm.predict(parts[1][0], client="client-2"))
    with pytest.raises(ValidationError, match=r"'client' parameter of FederatedModel\.predict "
                                              r"must be one of \['client-1'"):
        fm.predict(parts[0][0])
    plain = FederatedModel(_cnn(), _strategy(), epochs=1).fit(parts)
    with pytest.raises(ValidationError, match="no layer stays local"):
        plain.export(client="client-1")


def test_fedbn_on_ray_equals_in_process() -> None:
    pytest.importorskip("ray")
    parts = _shifted()

    def net() -> nn.Module:  # of torch's classes only: a Ray worker cannot import this file
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                             nn.Flatten(), nn.Linear(256, 10))

    local = FederatedModel(net(), _fedbn(evaluate=True), epochs=2, random_state=0,
                           eval_fraction=0.2).fit(parts)
    ray = FederatedModel(net(), _fedbn(evaluate=True), epochs=2, random_state=0,
                         eval_fraction=0.2, backend="ray").fit(parts)
    np.testing.assert_array_equal(ray.params_, local.params_)
    assert sorted(ray.local_states_) == sorted(local.local_states_)
    for name, state in local.local_states_.items():
        np.testing.assert_array_equal(ray.local_states_[name], state)
    # each client evaluated its own model in its worker, as in process
    assert [r.accuracy for r in ray.rounds_] == [r.accuracy for r in local.rounds_]
    np.testing.assert_array_equal(ray.predict(parts[2][0], client="client-3"),
                                  local.predict(parts[2][0], client="client-3"))


def test_fedbn_with_one_client_is_fedavg() -> None:
    parts = _shifted(1)
    bn = FederatedModel(_cnn(), _fedbn(), epochs=2, random_state=1).fit(parts)
    avg = FederatedModel(_cnn(), FedAvg(local_steps=4, batch_size=32, lr=0.05, momentum=0.9),
                         epochs=2, random_state=1).fit(parts)
    np.testing.assert_array_equal(bn.predict(parts[0][0], client="client-1"),
                                  avg.predict(parts[0][0]))
    np.testing.assert_array_equal(bn.export(client="client-1").bn.running_var.numpy(),
                                  avg.export().bn.running_var.numpy())


def test_fedbn_resumes_with_each_clients_own_layers(tmp_path: Path) -> None:
    parts = _shifted()
    whole = FederatedModel(_cnn(), _fedbn(), epochs=2, random_state=0).fit(parts)
    FederatedModel(_cnn(), _fedbn(), epochs=1, random_state=0, checkpoint=tmp_path).fit(parts)
    resumed = FederatedModel(_cnn(), _fedbn(), epochs=2, random_state=0, checkpoint=tmp_path,
                             resume=True).fit(parts)
    np.testing.assert_array_equal(resumed.params_, whole.params_)
    for name, state in whole.local_states_.items():
        np.testing.assert_array_equal(resumed.local_states_[name], state)


@pytest.mark.parametrize(("model", "kw", "message"), [
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), {},
     r"FedBN keeps every batch-norm layer local, but the 'model' of FederatedModel has none"),
    ("spec", {}, r"a torch\.nn\.Module with batch norm for FedBN"),
])
def test_fedbn_refuses_what_it_cannot_train(model: object, kw: dict[str, object],
                                            message: str) -> None:
    from islands.hfl import ModelSpec

    parts = _shifted()
    if model == "spec":
        model = ModelSpec("cnn", (1, 12, 12), 10)
    with pytest.raises(ValidationError, match=message):
        FederatedModel(model, _fedbn(), **kw).fit(parts)  # type: ignore[arg-type]


def test_a_fedbn_job_file(tmp_path: Path) -> None:
    out = _run_job(tmp_path, 'factory = "user_models:small_cnn"').args  # write the module
    del out
    job = (tmp_path / "job.toml").read_text().replace('name = "fedavg"', 'name = "fedbn"')
    (tmp_path / "job.toml").write_text(job)
    import json
    import os

    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{tmp_path}", "COLUMNS": "200"}
    run = subprocess.run([sys.executable, "-m", "islands.cli", "run", str(tmp_path / "job.toml"),
                          "--overwrite"], env=env, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["strategy"].startswith("FedBN(")
    assert "local batchnorm layers stay" in results["data"]["model"]
    assert results["history"][-1]["test"]["clients_averaged"] == 3
    assert {p.name for p in (tmp_path / "out").glob("model*.pt")} == {
        "model.client-1.pt", "model.client-2.pt", "model.client-3.pt"}
    bad = job.replace('factory = "user_models:small_cnn"', 'kind = "mlp"')
    (tmp_path / "job.toml").write_text(bad)
    run = subprocess.run([sys.executable, "-m", "islands.cli", "run", str(tmp_path / "job.toml"),
                          "--overwrite"], env=env, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=600, check=False)
    assert run.returncode != 0 and "FedBN keeps batch-norm layers local; the built-in 'mlp' " \
        "has none" in " ".join(run.stdout.split())
