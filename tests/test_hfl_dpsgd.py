"""Sample-level DP: DP-SGD's per-sample clipping (Opacus), its noise, Poisson sampling,
the budget the clients and the server account, and the job-file option."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("opacus")
pytest.importorskip("dp_accounting")

import torch
from sklearn.datasets import load_digits

from islands.aggregation.protect import SampleBudget, SampleDP, build_sample_dp
from islands.errors import ValidationError
from islands.hfl import FedAvg, FederatedModel
from islands.hfl.strategy import LocalConfig
from islands.hfl.torch.dpsgd import PrivateTrainer, poisson_sample
from islands.hfl.torch.learner import TorchLearner
from islands.hfl.torch.models import ModelSpec, _load_checked
from islands.hfl.torch.training import Position, Trainer
from islands.privacy import PrivacyAccountant


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    X, y = load_digits(return_X_y=True)
    return (X / 16).astype(np.float32), y.astype(np.int64)


def per_sample_reference(spec: ModelSpec, X: np.ndarray, y: np.ndarray, rows: np.ndarray,
                         clip: float) -> torch.Tensor:
    """Σᵢ clip(∇ℓᵢ) one row at a time with plain autograd."""
    module = spec.build(0)
    total = None
    for i in rows:
        out = module(torch.from_numpy(X[i:i + 1]))
        loss = torch.nn.functional.cross_entropy(out, torch.tensor([y[i]]))
        g = torch.cat([p.reshape(-1) for p in torch.autograd.grad(loss, list(
            module.parameters()))])
        g = g * min(1.0, clip / float(g.norm()))
        total = g if total is None else total + g
    assert total is not None
    return total


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_clipped_sum_matches_per_sample_autograd(digits, kind: str) -> None:
    X, y = digits
    if kind == "cnn":
        X = np.repeat(np.repeat(X.reshape(-1, 1, 8, 8), 2, axis=2), 2, axis=3)  # 16×16
        spec = ModelSpec(kind="cnn", input_shape=(1, 16, 16), n_outputs=10, channels=(2, 4))
    else:
        spec = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(16,))
    private = PrivateTrainer(Trainer(spec, X, y), SampleDP(clip=0.05))
    _load_checked(private._module, spec.initial_params(0))
    rows = np.array([0, 5, 17, 301, 900])
    got, loss = private.clipped_sum(rows)
    want = per_sample_reference(spec, X, y, rows, 0.05)
    assert torch.allclose(got, want, atol=1e-6)
    assert np.isfinite(loss)
    assert float(got.norm()) <= 0.05 * rows.size + 1e-6  # every term clipped to C
    empty, nan_loss = private.clipped_sum(np.array([], dtype=np.int64))
    assert float(empty.abs().max()) == 0.0 and np.isnan(nan_loss)


def test_clipped_sum_of_uint8_rows_equals_that_of_the_float32_rows(digits) -> None:
    X, y = digits
    X8 = np.rint(X * 16).astype(np.uint8)  # digits' pixels are the integers 0..16
    spec = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(16,))
    scaled = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(16,),
                       input_divisor=16)
    rows = np.array([0, 5, 17, 301, 900])
    sums = []
    for s, data in ((spec, X), (scaled, X8)):
        private = PrivateTrainer(Trainer(s, data, y), SampleDP(clip=0.05))
        _load_checked(private._module, spec.initial_params(0))
        sums.append(private.clipped_sum(rows))
    assert torch.equal(sums[0][0], sums[1][0]) and sums[0][1] == sums[1][1]


def test_noise_has_the_calibrated_scale(digits) -> None:
    X, y = digits
    spec = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(64,))
    clip, sigma, b, lr = 1e-4, 1e4, 32, 1.0  # σC = 1; the clipped sum is ≤ b·C = 3.2e-3
    private = PrivateTrainer(Trainer(spec, X, y), SampleDP(clip=clip, noise_multiplier=sigma))
    w = spec.initial_params(0)
    out = private.train(w, start=Position(0, 0), steps=1, batch_size=b, lr=lr)
    noise = (w.astype(np.float64) - out.params) * b / lr  # = Σ ḡᵢ + N(0, σ²C²)
    assert noise.size > 4000
    assert abs(noise.std() / (sigma * clip) - 1) < 0.05
    assert abs(noise.mean()) < 0.05
    assert np.isnan(out.loss)  # not covered by the guarantee, so not reported
    again = private.train(w, start=Position(0, 0), steps=1, batch_size=b, lr=lr)
    assert not np.array_equal(again.params, out.params)  # not seedable, by design


def test_poisson_sample_keeps_each_row_with_the_rate() -> None:
    sizes = [poisson_sample(2000, 0.05).size for _ in range(200)]
    assert abs(np.mean(sizes) - 100) < 3  # std of the mean ≈ 0.69
    assert len({tuple(poisson_sample(50, 0.5)) for _ in range(5)}) > 1
    with pytest.raises(ValidationError, match="'rate'"):
        poisson_sample(10, 0.0)


def test_dpsgd_learns_and_keeps_the_trainer_arguments_checked(digits) -> None:
    X, y = digits
    spec = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(32,))
    trainer = Trainer(spec, X, y)
    private = PrivateTrainer(trainer, SampleDP(clip=1.0, noise_multiplier=1.0))
    w = spec.initial_params(0)
    out = private.train(w, start=Position(0, 0), steps=150, batch_size=64, lr=0.5,
                        momentum=0.5)
    assert trainer.evaluate(out.params, X, y) > 0.8
    assert out.end == Position(0, 0).advance(150, trainer.steps_per_epoch(64))
    assert out.momentum is not None
    with pytest.raises(ValidationError, match="'lr'"):
        private.train(w, start=Position(0, 0), steps=1, batch_size=64, lr=-1.0)
    with pytest.raises(ValidationError, match="'batch_size'"):
        private.train(w, start=Position(0, 0), steps=1, batch_size=0, lr=0.1)


def test_sample_dp_checks_its_settings() -> None:
    with pytest.raises(ValidationError, match="'clip'"):
        SampleDP(clip=0.0)
    with pytest.raises(ValidationError, match="'noise_multiplier'"):
        SampleDP(noise_multiplier=-1.0)
    with pytest.raises(ValidationError, match="'delta'"):
        SampleDP(delta=1.0)
    with pytest.raises(ValidationError, match="'accountant'"):
        SampleDP(accountant="moments")
    assert build_sample_dp(["secagg"]) is None
    assert build_sample_dp(["dp-sgd"], {"dp-sgd": {"clip": 2.0}}).clip == 2.0


def test_the_accountant_agrees_with_opacus() -> None:
    from opacus.accountants import RDPAccountant

    reference = RDPAccountant()
    reference.history = [(1.1, 256 / 60000, 14062)]
    ours = PrivacyAccountant(1.1, sampling_rate=256 / 60000, delta=1e-5)
    ours.step(14062)
    assert ours.epsilon() == pytest.approx(reference.get_epsilon(1e-5), rel=1e-6)


def test_the_learner_refuses_to_overspend(digits) -> None:
    X, y = digits
    spec = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(8,))
    dp = SampleDP(clip=1.0, noise_multiplier=1.0, target_epsilon=3.0)
    learner = TorchLearner(spec, X[:500], y[:500], dp=dp)
    config = LocalConfig(lr=0.1)
    w = spec.initial_params(0)
    learner.train(w, epoch=0, step=0, steps=5, batch_size=10, config=config, state=None)
    eps, delta = learner.spent()
    want = PrivacyAccountant(1.0, sampling_rate=10 / 500, delta=1e-5)
    want.step(5)
    assert eps == pytest.approx(want.epsilon()) and delta == 1e-5
    with pytest.raises(ValidationError, match="batch size changed"):
        learner.train(w, epoch=0, step=0, steps=1, batch_size=20, config=config,
                      state=None)
    with pytest.raises(ValidationError, match="past its target epsilon"):
        learner.train(w, epoch=0, step=0, steps=10_000, batch_size=10, config=config,
                      state=None)
    assert TorchLearner(spec, X[:50], y[:50]).spent() is None


def test_sample_budget_round_trips_its_state() -> None:
    dp = SampleDP(noise_multiplier=1.2, target_epsilon=5.0)
    budget = SampleBudget(dp, {"a": 100, "b": 400}, {"a": 10, "b": 10})
    budget.step(["a", "b"], 30)
    other = SampleBudget(dp, {"a": 100, "b": 400}, {"a": 10, "b": 10})
    other.set_state(budget.get_state())
    assert other.spent() == budget.spent()
    # the client with the fewest rows has the largest sampling rate, hence the largest ε
    assert budget.spent()[0] == budget.accountants["a"].epsilon()
    assert budget.would_exceed(["a"], 10_000) and not budget.would_exceed(["a"], 0)


def test_a_federation_trains_with_dpsgd_and_stops_at_the_target(digits) -> None:
    X, y = digits
    parts = [(X[i::3][:500], y[i::3][:500]) for i in range(3)]
    spec = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(32,))
    target = 4.0
    dp = SampleDP(clip=1.0, noise_multiplier=1.0, target_epsilon=target)
    fl = FederatedModel(spec, FedAvg(local_steps=10, batch_size=25, lr=0.5), epochs=20,
                        sample_dp=dp, eval_fraction=0.0, random_state=0)
    fl.fit(parts, test=(X[1500:], y[1500:]))
    assert fl.stopped_ == "privacy budget"
    eps = [r.sample_epsilon for r in fl.rounds_]
    assert all(a < b for a, b in itertools.pairwise(eps))
    steps = sum(r.steps for r in fl.rounds_)
    want = PrivacyAccountant(1.0, sampling_rate=25 / 500, delta=1e-5)
    want.step(steps)
    assert fl.sample_privacy_[0] == pytest.approx(want.epsilon())
    assert fl.sample_privacy_[0] <= target
    want.step(10)
    assert want.epsilon() > target  # one more round would have overspent
    assert fl.privacy_ is None
    assert fl.score(X[1500:], y[1500:]) > 0.6


def test_a_job_file_takes_dp_sgd(tmp_path: Path) -> None:
    from islands.hfl.job import JobError, load_job, run_job

    text = textwrap.dedent("""
        seed = 0
        epochs = 1
        baseline = false
        protect = ["secagg", "dp-sgd"]
        [dp-sgd]
        clip = 1.0
        noise_multiplier = 1.5
        [data]
        name = "digits"
        [partition]
        kind = "iid"
        clients = 3
        [model]
        kind = "mlp"
        hidden = [16]
        [strategy]
        name = "fedavg"
        local_steps = 10
        batch_size = 32
        lr = 0.5
    """)
    path = tmp_path / "job.toml"
    path.write_text(text)
    result = run_job(load_job(path), output=tmp_path / "out")
    assert result.sample_privacy is not None and result.sample_privacy.epsilon > 0
    assert len(result.sample_epsilon) == result.rounds
    path.write_text(text.replace("clip = 1.0", "clip = 1.0\nsigma = 2"))
    with pytest.raises(JobError, match="sigma"):
        load_job(path)
    path.write_text(text.replace("clip = 1.0", "clip = -1.0"))
    with pytest.raises(JobError, match="'clip'"):
        load_job(path)
