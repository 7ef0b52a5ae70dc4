"""Clients trained together (islands.hfl.torch.batched) against each client's own training.

Tolerance: a batched product sums in another order than each client's own, so results
agree to float32 rounding, not bit for bit. Over a few dozen SGD steps of these small
models the parameters differ by ~1e-8 (observed); ``rtol=1e-4, atol=1e-5`` leaves room
for other BLAS builds while still failing on any wrong batch, step or update (those move
parameters by ~lr·|g| ≥ 1e-3).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from islands.aggregation.protect import SampleDP  # noqa: E402
from islands.errors import ValidationError  # noqa: E402
from islands.hfl import FedAvg, FederatedModel  # noqa: E402
from islands.hfl.torch import batched  # noqa: E402
from islands.hfl.torch.batched import (  # noqa: E402
    BatchJob,
    ClientBatcher,
    batch_refusal,
    train_together,
)
from islands.hfl.torch.models import ModelSpec, ModulePool  # noqa: E402
from islands.hfl.torch.training import Position, Trainer, TrainOutcome  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
ROOT = Path(__file__).resolve().parents[1]
SPECS = {
    "mlp": ModelSpec("mlp", (1, 12, 12), 4, hidden=(16,), input_divisor=255.0),
    "cnn": ModelSpec("cnn", (1, 12, 12), 4, channels=(3, 4), input_divisor=255.0),
}


def _trainers(spec: ModelSpec, sizes: list[int], seed: int = 0) -> list[Trainer]:
    rng = np.random.default_rng(seed)
    pool = ModulePool(spec)
    return [Trainer(spec, rng.integers(0, 256, (n, *spec.input_shape), dtype=np.uint8),
                    rng.integers(0, spec.n_outputs, n), seed=k, pool=pool)
            for k, n in enumerate(sizes)]


def _close(alone: TrainOutcome, together: TrainOutcome) -> None:
    np.testing.assert_allclose(together.params, alone.params, rtol=RTOL, atol=ATOL)
    assert (together.momentum is None) == (alone.momentum is None)
    if alone.momentum is not None:
        np.testing.assert_allclose(together.momentum, alone.momentum, rtol=RTOL, atol=ATOL)
    assert together.loss == pytest.approx(alone.loss, rel=RTOL, abs=ATOL)
    assert (together.steps, together.end) == (alone.steps, alone.end)


def _rounds(trainers: list[Trainer], kws: list[dict[str, Any]], rounds: int,
            *, together: bool) -> list[list[TrainOutcome]]:
    """Train every client ``rounds`` times, each round from the mean of the last."""
    params = trainers[0].spec.initial_params(0)
    bufs: list[Any] = [None] * len(trainers)
    starts = [kw.pop("start") for kw in kws]
    history = []
    for _ in range(rounds):
        if together:
            jobs = [BatchJob(t, t.settings(params, start=s, momentum_buffer=buf, **kw), s)
                    for t, s, buf, kw in zip(trainers, starts, bufs, kws, strict=True)]
            outs = train_together(jobs)
        else:
            outs = [t.train(params, start=s, momentum_buffer=buf, **kw)
                    for t, s, buf, kw in zip(trainers, starts, bufs, kws, strict=True)]
        history.append(outs)
        params = np.mean([o.params for o in outs], axis=0).astype(np.float32)
        bufs = [o.momentum for o in outs]
        starts = [o.end for o in outs]
    for kw, s in zip(kws, starts, strict=True):
        kw["start"] = s
    return history


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("uniform", [True, False], ids=["same-optimiser", "own-optimiser"])
def test_each_client_in_a_batch_trains_as_it_does_alone(kind: str, uniform: bool) -> None:
    sizes = [40, 75, 33, 120]  # unequal: own steps per epoch, own epoch boundaries
    trainers = _trainers(SPECS[kind], sizes)

    def kws() -> list[dict[str, Any]]:
        if uniform:  # one update over every client's block (FedAvg with momentum, FedProx)
            return [dict(start=Position(0, 0), steps=5, batch_size=8, lr=0.05, momentum=0.9,
                         weight_decay=1e-3, prox_mu=0.01) for _ in sizes]
        # each client its own: lr, momentum or none, weight decay, proximal term, steps
        return [dict(start=Position(1, k), steps=3 + 2 * k, batch_size=8, lr=0.05 + 0.01 * k,
                     momentum=0.5 * (k % 2), weight_decay=1e-3 * k, prox_mu=0.02 * (k % 3))
                for k in range(len(sizes))]

    alone = _rounds(trainers, kws(), 3, together=False)
    together = _rounds(trainers, kws(), 3, together=True)
    for outs_a, outs_t in zip(alone, together, strict=True):
        for a, t in zip(outs_a, outs_t, strict=True):
            _close(a, t)
    # the batch really trained: parameters moved from the start
    assert not np.allclose(together[0][0].params, SPECS[kind].initial_params(0), atol=1e-3)


def test_a_scaffold_correction_is_applied_per_client() -> None:
    trainers = _trainers(SPECS["mlp"], [50, 64, 70])
    params = SPECS["mlp"].initial_params(1)
    rng = np.random.default_rng(3)
    kws = [dict(start=Position(0, 0), steps=4, batch_size=10, lr=0.1,
                correction=rng.normal(0, 0.01, trainers[0].n_trainable).astype(np.float32))
           for _ in trainers]
    alone = [t.train(params, **kw) for t, kw in zip(trainers, kws, strict=True)]
    jobs = [BatchJob(t, t.settings(params, **kw), kw["start"])
            for t, kw in zip(trainers, kws, strict=True)]
    for a, t in zip(alone, train_together(jobs), strict=True):
        _close(a, t)


def test_clients_beyond_a_chunk_train_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    trainers = _trainers(SPECS["mlp"], [30] * 5)
    params = SPECS["mlp"].initial_params(0)
    kw = dict(start=Position(0, 0), steps=3, batch_size=10, lr=0.05)
    sizes: list[int] = []
    real = batched._train_chunk
    monkeypatch.setattr(batched, "_CHUNK_BYTES", 2 * 4 * trainers[0].n_params)
    monkeypatch.setattr(batched, "_train_chunk",
                        lambda jobs: (sizes.append(len(jobs)), real(jobs))[1])
    out = train_together([BatchJob(t, t.settings(params, **kw), kw["start"])  # type: ignore[arg-type]
                          for t in trainers])
    assert sizes == [2, 2, 1]
    for t, o in zip(trainers, out, strict=True):
        _close(t.train(params, **kw), o)  # type: ignore[arg-type]


def test_jobs_that_differ_in_batch_size_are_refused() -> None:
    trainers = _trainers(SPECS["mlp"], [30, 30])
    params = SPECS["mlp"].initial_params(0)
    jobs = [BatchJob(t, t.settings(params, start=Position(0, 0), steps=1, batch_size=b,
                                   lr=0.1), Position(0, 0))
            for t, b in zip(trainers, (5, 6), strict=True)]
    with pytest.raises(ValueError, match="batch size"):
        train_together(jobs)


def _in_threads(batcher: ClientBatcher, trainers: list[Trainer], params: Any,
                kw: dict[str, Any]) -> list[TrainOutcome]:
    out: list[Any] = [None] * len(trainers)

    def run(k: int) -> None:
        out[k] = batcher.train(trainers[k], params, **kw)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(trainers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return out


def test_the_batcher_gathers_the_calls_of_client_threads() -> None:
    trainers = _trainers(SPECS["mlp"], [40, 50, 60, 70, 80])
    params = SPECS["mlp"].initial_params(0)
    kw = dict(start=Position(0, 1), steps=4, batch_size=8, lr=0.05, momentum=0.9)
    # generous waits: on a busy machine the five threads may take seconds to arrive
    batcher = ClientBatcher(expected=5, window=60.0, max_wait=60.0, timeout=120)
    out = _in_threads(batcher, trainers, params, kw)
    assert batcher.batches == [5]
    for t, o in zip(trainers, out, strict=True):
        _close(t.train(params, **kw), o)  # type: ignore[arg-type]


def test_a_lone_call_and_a_failed_batch_train_exactly_as_alone(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    trainers = _trainers(SPECS["mlp"], [40, 50, 60])
    params = SPECS["mlp"].initial_params(0)
    kw = dict(start=Position(0, 0), steps=3, batch_size=8, lr=0.05)
    lone = ClientBatcher(expected=3, window=0.01, max_wait=0.05)
    # fewer calls than expected: the group closes after the window, a group of one
    assert np.array_equal(lone.train(trainers[0], params, **kw).params,  # type: ignore[arg-type]
                          trainers[0].train(params, **kw).params)  # type: ignore[arg-type]
    assert lone.batches == []

    def broken(jobs: Any, **kw: Any) -> Any:
        raise RuntimeError("vmap: data-dependent control flow")

    monkeypatch.setattr(batched, "train_together", broken)
    failing = ClientBatcher(expected=3, window=5.0)
    with caplog.at_level(logging.WARNING, logger="islands.hfl.torch.batched"):
        out = _in_threads(failing, trainers, params, kw)
    assert "data-dependent control flow" in caplog.text and failing.batches == []
    assert failing.failure is not None
    for t, o in zip(trainers, out, strict=True):
        assert np.array_equal(o.params, t.train(params, **kw).params)  # type: ignore[arg-type]


class _Branchy(nn.Module):
    """A user's module whose forward branches on the data: vmap cannot run it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        return self.fc(x if float(x.sum()) > 0 else -x)


class _Normed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(64)
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(x.flatten(1)))


def _digits(n_parts: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32)
    return [(X[k::n_parts], y[k::n_parts]) for k in range(n_parts)], X, y


def _fit(model: Any, parts: Any, **kw: Any) -> FederatedModel:
    torch.manual_seed(0)
    strategy = FedAvg(local_steps=3, batch_size=16, lr=0.1, momentum=0.5)
    return FederatedModel(model, strategy, epochs=2, concurrency=None, eval_fraction=0,
                          random_state=0, **kw).fit(parts)


def test_fit_with_24_clients_batched_matches_one_at_a_time() -> None:
    parts, X, y = _digits(24)
    spec = ModelSpec("mlp", (64,), 10, hidden=(32,))
    on = _fit(spec, parts, batch_clients=True)
    off = _fit(spec, parts, batch_clients=False)
    # batched, though on a busy machine a client that arrives after the gathering window
    # trains alone (not counted in batches_)
    assert on.batches_ and max(on.batches_) >= 2 and off.batches_ == []
    assert sum(on.batches_) <= 24 * on.aggregations_
    np.testing.assert_allclose(on.params_, off.params_, rtol=RTOL, atol=ATOL)
    assert on.score(X, y) == pytest.approx(off.score(X, y), abs=2 / len(y))


@pytest.mark.parametrize("case", ["sample_dp", "batch_norm", "branchy"])
def test_what_cannot_batch_trains_exactly_as_before(case: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    parts, _, _ = _digits(12)  # "auto" batches 10 or more clients training at once
    kw: dict[str, Any] = {}
    model: Any = ModelSpec("mlp", (64,), 10, hidden=(8,))
    if case == "sample_dp":
        kw["sample_dp"] = SampleDP(clip=1.0, noise_multiplier=1.0)
    elif case == "batch_norm":
        model = _Normed()
    else:
        model = _Branchy()
    with caplog.at_level(logging.INFO, logger="islands"):
        auto = _fit(model, parts, **kw)
    assert auto.batches_ == []
    assert {"sample_dp": "DP-SGD", "batch_norm": "buffers",
            "branchy": "batch of 12 clients failed"}[case] in caplog.text
    if case != "sample_dp":  # DP-SGD's noise comes from the CSPRNG: no two runs agree
        plain = _fit(model, parts, batch_clients=False, **kw)
        np.testing.assert_array_equal(auto.params_, plain.params_)
    if case != "branchy":  # known before training: refused when asked for
        with pytest.raises(ValidationError, match="batch_clients"):
            _fit(model, parts, batch_clients=True, **kw)


def test_batch_refusal_names_local_layers_and_buffers() -> None:
    assert batch_refusal(SPECS["cnn"]) is None
    from islands.hfl.torch.user import TorchModel

    assert "buffers" in str(batch_refusal(TorchModel.bind(_Normed(), (64,))))
    fedbn = TorchModel.bind(_Normed(), (64,), local_layers="batchnorm")
    assert "local layers" in str(batch_refusal(fedbn))


def test_a_users_script_with_batched_clients_runs(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        from islands.hfl import FedAvg, FederatedModel
        from islands.hfl.torch import ModelSpec

        rng = np.random.default_rng(0)
        X = rng.normal(size=(1200, 20)).astype(np.float32)
        y = (X[:, 0] > 0).astype(np.int64)
        parts = [(X[k::30], y[k::30]) for k in range(30)]
        fm = FederatedModel(ModelSpec("mlp", (20,), 2, hidden=(8,)),
                            FedAvg(local_steps=2, batch_size=8, lr=0.2), epochs=3,
                            concurrency=None, eval_fraction=0).fit(parts)
        print("batches", fm.batches_, "accuracy", fm.score(X, y))
    """))
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    # batched (a busy machine may split a round's 30 calls across the gathering window)
    assert line.startswith("batches [") and not line.startswith("batches []")
    assert float(line.split()[-1]) > 0.7  # chance: 0.5
