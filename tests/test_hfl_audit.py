"""Gradient leakage (APFL §2.1): the attack on one sample's update, and the audit of every
protection on a real federation (digits, to stay fast)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from islands.errors import ValidationError
from islands.hfl.audit import (
    GradientAudit,
    audit_gradients,
    first_layer_update,
    recover_input,
    relative_error,
)
from islands.hfl.torch.models import ModelSpec, flat_parameters

HAS_TENSEAL = importlib.util.find_spec("tenseal") is not None


def one_sample_gradient(d: int = 12, hidden: int = 16, dead: int = 0,
                        seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Autograd of a small ReLU MLP on one random input: (∂L/∂W₁, ∂L/∂b₁, x)."""
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, 3)).double()
    x = torch.randn(1, d, generator=gen, dtype=torch.float64)
    if dead:
        with torch.no_grad():  # these neurons stay below zero on x: ReLU-dead
            pre = model[0](x)[0]
            model[0].bias[:dead] -= pre[:dead] + 1.0
            model[0].bias[-1] += 1.0 - pre[-1]  # and the last one live
    loss = nn.functional.cross_entropy(model(x), torch.tensor([1]))
    loss.backward()
    assert model[0].weight.grad is not None and model[0].bias.grad is not None
    return (model[0].weight.grad.numpy().copy(), model[0].bias.grad.numpy().copy(),
            x[0].numpy().copy())


@pytest.mark.parametrize("dead", [0, 5, 15])
def test_recover_input_is_exact_on_a_single_sample_gradient(dead: int) -> None:
    gw, gb, x = one_sample_gradient(dead=dead)
    assert np.count_nonzero(gb == 0) >= dead  # the dead neurons carry no gradient
    for lr in (1.0, 0.1):  # an SGD update −lr·g: the ratio is the same
        np.testing.assert_allclose(recover_input(-lr * gw, -lr * gb), x, rtol=1e-10,
                                   atol=1e-12)


def test_recover_input_refuses_an_update_without_live_neurons() -> None:
    with pytest.raises(ValidationError, match="no live neuron"):
        recover_input(np.zeros((4, 3)), np.zeros(4))
    with pytest.raises(ValidationError, match="delta_b1"):
        recover_input(np.ones((4, 3)), np.ones(3))
    with pytest.raises(ValidationError, match="finite"):
        recover_input(np.full((2, 3), np.nan), np.ones(2))


def test_first_layer_update_slices_the_first_dense_layer() -> None:
    spec = ModelSpec("mlp", (2, 3), 4, hidden=(5, 7))
    before = flat_parameters(spec.build(0)).astype(np.float64)
    after = before + np.arange(before.size) * 1e-3
    w, b = first_layer_update(spec, before, after)
    assert w.shape == (5, 6) and b.shape == (5,)
    np.testing.assert_allclose(w.ravel(), np.arange(30) * 1e-3, atol=1e-9)
    np.testing.assert_allclose(b, (30 + np.arange(5)) * 1e-3, atol=1e-9)
    with pytest.raises(ValidationError, match="dense"):
        first_layer_update(ModelSpec("cnn", (1, 12, 12), 2), before, after)
    with pytest.raises(ValidationError, match="length"):
        first_layer_update(spec, before[:-1], after)


def test_the_attack_on_a_real_sgd_step_of_the_engine() -> None:
    """The engine's own trainer, one sample: the float32 update reveals it to ~1e-6."""
    from islands.hfl.torch.training import Position, Trainer

    spec = ModelSpec("mlp", (20,), 3, hidden=(30,))
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, size=(1, 20)).astype(np.float32)
    before = spec.initial_params(3)
    out = Trainer(spec, x, np.array([2])).train(before, start=Position(epoch=0, step=0),
                                                steps=1, batch_size=1, lr=0.1)
    w, b = first_layer_update(spec, before, out.params)
    assert relative_error(recover_input(w, b), x[0]) < 1e-5


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> GradientAudit:
    names = ["plain", "secagg", "ckks", "dp"] if HAS_TENSEAL else ["plain", "secagg", "dp"]
    out = tmp_path_factory.mktemp("audit")
    return audit_gradients(out, protections=names, dataset="digits", seed=0,
                           dp_clip=1.0, dp_noise=1.0)


def test_plain_mean_leaks_the_image_exactly(report: GradientAudit) -> None:
    assert report.dataset == "digits" and report.image_shape == [8, 8]
    assert report.setting["rows"] == [1, 32, 32]
    assert report.errors["plain"] < 1e-4


def test_secure_aggregation_hides_the_single_upload(report: GradientAudit) -> None:
    views = report.views["secagg"]
    assert views["single_upload"] > 0.5
    # the mean mixes the round's 65 samples: an average digit, not client 1's
    assert views["aggregate"] > 0.3
    assert report.errors["secagg"] == min(views.values())


def test_dp_noise_drowns_the_gradient(report: GradientAudit) -> None:
    assert report.errors["dp"] > 0.1


def test_ckks_hides_the_update_unless_a_client_colludes(report: GradientAudit) -> None:
    if not HAS_TENSEAL:
        pytest.skip("tenseal is not installed")
    assert report.errors["ckks"] == 1.0
    assert "public context" in report.notes["ckks"]
    assert report.errors["ckks+collusion"] < 1e-3


def test_audit_writes_figure_and_json(report: GradientAudit) -> None:
    assert report.json is not None
    saved = json.loads(Path(report.json).read_text())
    assert saved["errors"] == pytest.approx(report.errors)
    # audit.json is the result's to_json, key for key and in order, as it always was
    assert list(saved) == ["errors", "views", "notes", "dataset", "sample_index", "label",
                           "image_shape", "skipped", "reference", "setting", "figure", "json"]
    assert saved == json.loads(json.dumps(report.to_json()))
    with pytest.raises(TypeError, match=r"GradientAudit now: read \.errors"):
        report["errors"]  # it was a dict: the message says what changed
    if report.figure is not None:
        assert Path(report.figure).read_bytes()[:4] == b"\x89PNG"


def test_audit_gradients_validates_its_arguments() -> None:
    with pytest.raises(ValidationError, match="protections"):
        audit_gradients(protections=["paillier"], dataset="digits")
    with pytest.raises(ValidationError, match="clients"):
        audit_gradients(clients=2, dataset="digits")


def test_cli_audit_gradients_writes_the_errors(tmp_path: Path) -> None:
    from islands.cli import app

    path = tmp_path / "errors.json"
    result = CliRunner().invoke(app, ["audit", "gradients", "--dataset", "digits",
                                      "--protections", "plain,dp", "--seed", "1",
                                      "--json", str(path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(path.read_text())
    assert set(doc["errors"]) == {"plain", "dp"}
    assert doc["errors"]["plain"] < 1e-4
    bad = CliRunner().invoke(app, ["audit", "gradients", "--protections", "rot13"])
    assert bad.exit_code != 0
