"""The model leaves the federation (issue 38, part 4): model.onnx, ``islands export``.

ONNX files are checked with onnxruntime against the PyTorch model they came from (1e-5):
the built-in mlp (with its input divisor) and cnn, and a user's module with batch norm in
eval mode; a run writes model.onnx in its set of files, or says why not; ``islands export``
rebuilds the model the job named from a run folder and refuses what it cannot use.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from islands.cli import app  # noqa: E402
from islands.errors import DataNotFoundError, ValidationError  # noqa: E402
from islands.hfl import FedAvg, FederatedModel, load_model  # noqa: E402
from islands.hfl.export import export_run, load_run_model  # noqa: E402
from islands.hfl.job import load_job, run_job, write_outputs  # noqa: E402
from islands.hfl.torch import onnx_export  # noqa: E402
from islands.hfl.torch.models import ModelSpec  # noqa: E402
from islands.hfl.torch.onnx_export import ModelExportError, onnx_bytes  # noqa: E402

needs_onnx = pytest.mark.skipif(
    bool(onnx_export.missing_packages()) or importlib.util.find_spec("onnxruntime") is None,
    reason="the 'export' extra (onnx, onnxscript, onnxruntime) is not installed")


def _ort(data: bytes, X: np.ndarray) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (out,) = session.run(["output"], {"input": X.astype(np.float32)})
    return np.asarray(out)


def _torch(module: nn.Module, X: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module.eval()(torch.from_numpy(X.astype(np.float32))).numpy()


class BatchNormNet(nn.Module):
    """linear → batch norm → relu → linear: running statistics matter in eval mode."""

    def __init__(self, features: int = 6, classes: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.head = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class DataDependent(nn.Module):
    """A branch on the data's values: torch.export cannot trace it."""

    def __init__(self, features: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.linear = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        return out if float(x.sum()) >= 0 else -out


def _trained_bn() -> BatchNormNet:
    torch.manual_seed(0)
    net = BatchNormNet()
    net.train()
    with torch.no_grad():
        for _ in range(5):  # running statistics far from the initial (0, 1)
            net(torch.randn(32, 6) * 3 + 2)
    return net.eval()


@needs_onnx
@pytest.mark.parametrize("case", ["mlp", "cnn", "batch_norm"])
def test_onnx_predictions_equal_the_torch_models(case: str) -> None:
    rng = np.random.default_rng(0)
    if case == "batch_norm":
        module, shape = _trained_bn(), (6,)
        X = rng.normal(2, 3, size=(7, 6))
        assert module.body[1].running_mean.abs().max() > 0.5
    else:
        # pixels as uint8 values: the mlp divides them by 255 inside the graph
        spec = (ModelSpec("mlp", (1, 12, 12), 10, hidden=(16,), input_divisor=255.0)
                if case == "mlp" else ModelSpec("cnn", (1, 12, 12), 10, channels=(2, 4)))
        module, shape = spec.export(spec.initial_params(3)), spec.input_shape
        X = rng.integers(0, 256, size=(7, *shape)).astype(np.float32)
        if case == "cnn":
            X /= 255
    data = onnx_bytes(module, shape)
    got, want = _ort(data, X), _torch(module, X)
    assert got.shape == want.shape == (7, 3 if case == "batch_norm" else 10)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # any number of rows: the batch size stays free
    assert _ort(data, X[:1]).shape[0] == 1
    assert module.training is False  # exported from a copy; the module is unchanged


def test_a_model_torch_cannot_export_is_named_with_its_reason(
        capfd: pytest.CaptureFixture[str]) -> None:
    if onnx_export.missing_packages():
        pytest.skip("onnx/onnxscript not installed")
    with pytest.raises(ModelExportError, match=r"torch cannot export DataDependent to ONNX "
                                                r"\(GuardOnDataDependentSymNode: .*\)"):
        onnx_bytes(DataDependent(), (64,))
    out, err = capfd.readouterr()  # torch's log lines and printed graphs stay quiet
    assert "def forward" not in out + err and "torch" not in err, (out + err)[:500]


def test_onnx_export_without_its_packages_names_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_export, "missing_packages", lambda: ["onnxscript"])
    with pytest.raises(ImportError, match=r"needs onnxscript: pip install 'islands\[export\]'"):
        onnx_bytes(_trained_bn(), (6,))


def _digits(n_parts: int = 2) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray,
                                         np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32)
    return [(X[k::n_parts], y[k::n_parts]) for k in range(n_parts)], X, y


def _bn_for_digits() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))


@needs_onnx
def test_federated_model_saves_onnx_and_torch(tmp_path: Path) -> None:
    parts, X, _ = _digits()
    fm = FederatedModel(_bn_for_digits(), FedAvg(local_steps=3, batch_size=32, lr=0.1),
                        epochs=1, random_state=0)
    fm.fit(parts)
    fm.save(tmp_path / "m.onnx", format="onnx")
    fm.save(tmp_path / "m.pt")
    trained = load_model(tmp_path / "m.pt", _bn_for_digits())
    assert trained[1].running_var.sub(1).abs().max() > 0  # the averaged statistics
    got = _ort((tmp_path / "m.onnx").read_bytes(), X[:50])
    np.testing.assert_allclose(got, _torch(fm.export(), X[:50]), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got.argmax(1), fm.predict(X[:50]))
    with pytest.raises(ValidationError, match=r"'format' parameter of FederatedModel\.save "
                                              r"must be 'torch' or 'onnx'"):
        fm.save(tmp_path / "m.x", format="keras")


# ------------------------------------------------------------------ job runs
JOB = '''
name = "export me"
epochs = 1
baseline = false
[data]
name = "digits"
[partition]
kind = "iid"
clients = 2
[model]
{model}
[strategy]
name = "fedavg"
batch_size = 32
local_steps = 3
lr = 0.1
'''

FACTORIES = '''
import torch
from torch import nn


def bn_net(hidden=16):  # digits as images: (n, 1, 8, 8)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 10)

    def forward(self, x):
        out = self.linear(x.flatten(1))
        return out if float(x.sum()) >= 0 else -out


def branchy():
    return Branchy()
'''


def _job(tmp_path: Path, model: str, name: str = "run") -> Path:
    """Run a job in-process into ``tmp_path/name`` and return the folder."""
    (tmp_path / "export_factories.py").write_text(FACTORIES)
    job_file = tmp_path / f"{name}.toml"
    job_file.write_text(JOB.format(model=model))
    out = tmp_path / name
    write_outputs(run_job(load_job(job_file), output=out), out)
    return out


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delitem(sys.modules, "export_factories", raising=False)
    yield tmp_path
    sys.modules.pop("export_factories", None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


@needs_onnx
def test_a_run_writes_model_onnx_in_its_set_and_export_rebuilds_the_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _job(tmp_path, 'kind = "mlp"\nhidden = [8]')
    manifest = json.loads((out / "manifest.json").read_text())
    assert {"model.pt", "model.onnx"} <= set(manifest["files"]) and manifest["complete"]
    results = json.loads((out / "results.json").read_text())
    assert results["data"]["input_shape"] == [64] and results["data"]["n_outputs"] == 10
    assert "onnx_skipped" not in results
    _, X, _ = _digits()
    module, shape = load_run_model(out)
    assert shape == (64,)
    want = _torch(module, X[:40])
    np.testing.assert_allclose(_ort((out / "model.onnx").read_bytes(), X[:40]), want,
                               rtol=1e-5, atol=1e-5)
    monkeypatch.chdir(tmp_path)
    written = export_run(out, "onnx")  # default: <job name>.onnx here
    assert written == Path("export_me.onnx")
    np.testing.assert_allclose(_ort(written.read_bytes(), X[:40]), want, rtol=1e-5, atol=1e-5)
    pt = export_run(out, "torch", tmp_path / "sub" / "m.pt")
    spec = ModelSpec("mlp", (64,), 10, hidden=(8,))
    np.testing.assert_array_equal(_torch(load_model(pt, spec), X[:40]), want)


@needs_onnx
def test_a_users_factory_run_exports_and_a_model_torch_cannot_export_is_said(
        factories: Path) -> None:
    out = _job(factories, 'factory = "export_factories:bn_net"\nargs = { hidden = 12 }')
    assert (out / "model.onnx").is_file()
    _, X, _ = _digits()
    module, shape = load_run_model(out)
    assert shape == (1, 8, 8) and module[2].num_features == 12
    assert module[2].running_mean.abs().max() > 0  # the averaged statistics, in eval mode
    images = X[:30].reshape(-1, 1, 8, 8)
    np.testing.assert_allclose(_ort((out / "model.onnx").read_bytes(), images),
                               _torch(module, images), rtol=1e-5, atol=1e-5)
    # a module torch cannot export: the run completes without model.onnx, saying why
    bad = _job(factories, 'factory = "export_factories:branchy"', name="branchy")
    results = json.loads((bad / "results.json").read_text())
    assert not (bad / "model.onnx").exists() and (bad / "model.pt").is_file()
    assert results["onnx_skipped"].startswith("torch cannot export Branchy to ONNX (")
    assert "model.onnx" not in json.loads((bad / "manifest.json").read_text())["files"]
    with pytest.raises(ModelExportError, match="torch cannot export Branchy"):
        export_run(bad, "onnx", factories / "b.onnx")
    assert export_run(bad, "torch", factories / "b.pt").is_file()


def test_a_run_without_the_export_extra_writes_model_pt_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_export, "missing_packages", lambda: ["onnx", "onnxscript"])
    out = _job(tmp_path, 'kind = "linear"')
    results = json.loads((out / "results.json").read_text())
    assert results["onnx_skipped"] == ("ONNX export needs onnx and onnxscript: pip install "
                                       "'islands[export]'")
    assert (out / "model.pt").is_file() and not (out / "model.onnx").exists()


def test_the_run_command_warns_when_model_onnx_is_absent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_export, "missing_packages", lambda: ["onnxscript"])
    job = tmp_path / "job.toml"
    job.write_text(JOB.format(model='kind = "linear"'))
    res = CliRunner().invoke(app, ["run", str(job), "--output", str(tmp_path / "out")],
                             env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert ("warning: model.onnx not written: ONNX export needs onnxscript: pip install "
            "'islands[export]'") in " ".join(res.output.split())


# ------------------------------------------------------------------ islands export refusals
@pytest.fixture(scope="module")
def linear_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _job(tmp_path_factory.mktemp("linear"), 'kind = "linear"')


def _export(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["export", *args], env={"COLUMNS": "300"})
    return res.exit_code, " ".join(res.output.split())


def test_export_command_writes_the_torch_format(linear_run: Path, tmp_path: Path) -> None:
    code, text = _export(str(linear_run), "--format", "torch", "--output",
                         str(tmp_path / "m.pt"))
    assert code == 0 and f"wrote {tmp_path / 'm.pt'} (torch" in text, text
    state = torch.load(tmp_path / "m.pt", weights_only=True)
    assert set(state) == {"1.weight", "1.bias"} and state["1.weight"].shape == (10, 64)


def test_export_refuses_what_is_not_a_complete_horizontal_run(linear_run: Path,
                                                              tmp_path: Path) -> None:
    code, text = _export(str(tmp_path / "nowhere"), "--output", str(tmp_path / "m.onnx"))
    assert code == 2 and "is not a folder: name the output folder of an 'islands run'" in text
    (tmp_path / "empty").mkdir()
    code, text = _export(str(tmp_path / "empty"))
    assert code == 2 and "no results.json in" in text
    # a vertical run: each party keeps its part
    vertical = tmp_path / "vertical"
    vertical.mkdir()
    (vertical / "results.json").write_text(json.dumps(
        {"job": {"kind": "vertical", "name": "v"}, "loss_history": [0.5]}))
    code, text = _export(str(vertical))
    assert code == 2 and "is a vertical run" in text and "party-<name>.json" in text
    # an incomplete set, as load_run refuses it
    cut = tmp_path / "cut"
    shutil.copytree(linear_run, cut)
    manifest = json.loads((cut / "manifest.json").read_text())
    (cut / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))
    code, text = _export(str(cut))
    assert code == 2 and "are incomplete" in text
    # an older run: no manifest, no model.pt
    old = tmp_path / "old"
    shutil.copytree(linear_run, old)
    (old / "manifest.json").unlink()
    (old / "model.pt").unlink()
    with pytest.raises(DataNotFoundError, match=r"no model\.pt in .*old"):
        load_run_model(old)
    # a run whose results.json predates the recorded shape
    (old / "model.pt").write_bytes((linear_run / "model.pt").read_bytes())
    doc = json.loads((old / "results.json").read_text())
    del doc["data"]["input_shape"]
    (old / "results.json").write_text(json.dumps(doc))
    with pytest.raises(ValidationError, match=r"does not record the data's shape"):
        load_run_model(old)


def test_export_refuses_outputs_it_must_not_write(linear_run: Path, tmp_path: Path) -> None:
    code, text = _export(str(linear_run), "--output", str(tmp_path))
    assert code == 2 and "is a folder, not a file" in text
    code, text = _export(str(linear_run), "--format", "onnx", "--output",
                         str(tmp_path / "m.pt"))
    assert code == 2 and "ends in .pt, but the format writes a .onnx file" in text
    code, text = _export(str(linear_run), "--format", "torch", "--output",
                         str(linear_run / "model.pt"))
    assert code == 2 and "is one of the run's own files" in text
    (tmp_path / "file").write_text("x")
    code, text = _export(str(linear_run), "--output", str(tmp_path / "file" / "m.onnx"))
    assert code == 2 and "cannot be created" in text


def test_export_names_a_factory_this_machine_cannot_import(factories: Path) -> None:
    out = _job(factories, 'factory = "export_factories:bn_net"')
    (factories / "export_factories.py").rename(factories / "elsewhere.py")
    sys.modules.pop("export_factories", None)
    importlib.invalidate_caches()
    if str(factories) in sys.path:
        sys.path.remove(str(factories))
    code, text = _export(str(out), "--format", "torch", "--output", str(factories / "m.pt"))
    assert code == 2, text
    assert "'export_factories:bn_net'" in text and "cannot be imported on this machine" in text
