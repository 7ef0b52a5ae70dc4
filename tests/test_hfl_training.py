"""HFL local training: models, flat vectors, the module pool, batches, SGD, metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn.metrics import (  # noqa: E402
    confusion_matrix,
    mean_absolute_error,
    mean_squared_error,
    precision_recall_fscore_support,
    r2_score,
)

from islands.errors import ValidationError  # noqa: E402
from islands.hfl.metrics import classification_report, dev_avg, regression_report  # noqa: E402
from islands.hfl.torch.models import ModelSpec, ModulePool, flat_parameters, load_flat  # noqa: E402
from islands.hfl.torch.training import (  # noqa: E402
    Position,
    Trainer,
    batch_indices,
    steps_per_epoch,
    train_centralised,
)
from islands.validation import MAX_ABS_FLOAT32  # noqa: E402

SMALL_MLP = ModelSpec("mlp", (6,), 3, hidden=(8,))


def blobs(
    n: int = 40, d: int = 6, classes: int = 3, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    X = (rng.standard_normal((n, d)) + y[:, None]).astype(np.float32)
    return X, y


def regression_data(n: int = 20, d: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = (X @ rng.standard_normal(d) + 0.5 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    return X, y


# ---------------------------------------------------------------- models


def test_parameter_counts_and_descriptions() -> None:
    mlp = ModelSpec("mlp", (1, 28, 28), 10)
    cnn = ModelSpec("cnn", (1, 28, 28), 10)
    lin = ModelSpec("linear", (13,), 1)
    assert mlp.n_params() == 784 * 200 + 200 + 200 * 10 + 10 == 159_010
    assert cnn.n_params() == 416 + 12_832 + 1568 * 128 + 128 + 128 * 10 + 10 == 215_370
    assert lin.n_params() == 14
    for spec in (mlp, cnn, lin):
        assert spec.build(0)(torch.zeros(2, *spec.input_shape)).shape == (2, spec.n_outputs)
        assert f"{spec.n_params():,}" in spec.describe()
    assert mlp.describe().startswith("MLP 784-200-10")


def test_build_is_deterministic_and_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = flat_parameters(SMALL_MLP.build(7))
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(999)  # another global state: same model
    np.testing.assert_array_equal(flat_parameters(SMALL_MLP.build(7)), a)
    assert not np.array_equal(flat_parameters(SMALL_MLP.build(8)), a)
    np.testing.assert_array_equal(SMALL_MLP.initial_params(7), a)
    assert a.dtype == np.float32 and a.shape == (SMALL_MLP.n_params(),)
    # PyTorch's default bounds: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), here fan_in 6 then 8
    first = a[: 6 * 8 + 8]
    assert np.abs(first).max() <= 1 / np.sqrt(6) and np.abs(first).max() > 0.8 / np.sqrt(6)


def test_model_spec_validation() -> None:
    with pytest.raises(ValidationError, match=r"'kind' parameter of ModelSpec"):
        ModelSpec("rnn", (3,), 2)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"'input_shape'.*H, W >= 12"):
        ModelSpec("cnn", (1, 8, 8), 10)
    with pytest.raises(ValidationError, match=r"'n_outputs'"):
        ModelSpec("mlp", (3,), 0)
    with pytest.raises(ValidationError, match=r"'hidden'"):
        ModelSpec("mlp", (3,), 2, hidden=(0,))
    with pytest.raises(ValidationError, match=r"'channels'"):
        ModelSpec("cnn", (1, 28, 28), 2, channels=(4,))  # type: ignore[arg-type]
    assert ModelSpec("mlp", [3], 2, hidden=[4]).input_shape == (3,)  # type: ignore[arg-type]


def test_flat_round_trip_and_errors() -> None:
    module = SMALL_MLP.build(0)
    v = np.arange(SMALL_MLP.n_params(), dtype=np.float32) / 100
    load_flat(module, v)
    np.testing.assert_array_equal(flat_parameters(module), v)
    first = next(iter(module.parameters()))
    np.testing.assert_array_equal(first.detach().numpy().ravel(), v[: first.numel()])
    # any module works too (the per-parameter path), and read-only input is fine
    plain = torch.nn.Linear(3, 2)
    w = np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.float32)
    w.setflags(write=False)
    load_flat(plain, w)
    np.testing.assert_array_equal(flat_parameters(plain), w)
    with pytest.raises(ValidationError, match=r"length 8"):
        load_flat(plain, np.zeros(7))
    with pytest.raises(ValidationError, match=r"finite"):
        load_flat(plain, np.full(8, np.nan))
    with pytest.raises(ValidationError, match=r"finite"):
        load_flat(plain, np.full(8, 1e300))  # overflows float32


def test_pool_reuses_modules_and_clears_gradients() -> None:
    pool = ModulePool(SMALL_MLP)
    with pool.borrow() as m1:
        load_flat(m1, SMALL_MLP.initial_params(0))
        m1(torch.ones(2, 6)).sum().backward()  # a careless borrower leaves grads
        assert next(iter(m1.parameters())).grad is not None
    with pool.borrow() as m2:
        assert m2 is m1 and all(p.grad is None for p in m2.parameters())
        with pool.borrow() as m3:
            assert m3 is not m1
    assert pool.size == 2 and pool.idle == 2

    barrier = threading.Barrier(6)
    pool = ModulePool(SMALL_MLP)

    def hold() -> None:
        with pool.borrow():
            barrier.wait(timeout=10)

    threads = [threading.Thread(target=hold) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool.size == 6 and pool.idle == 6


# ---------------------------------------------------------------- batches and positions


def test_batch_indices_are_deterministic_disjoint_and_cover_the_epoch() -> None:
    n, b = 103, 10
    spe = steps_per_epoch(n, b)
    assert spe == 10
    batches = [batch_indices(n, b, 5, 2, s) for s in range(spe)]
    for s, batch in enumerate(batches):
        np.testing.assert_array_equal(batch, batch_indices(n, b, 5, 2, s))
        assert batch.dtype == np.int64 and batch.shape == (b,)
    seen = np.concatenate(batches)
    assert np.unique(seen).size == spe * b and seen.min() >= 0 and seen.max() < n
    perm = np.random.default_rng([5, 2]).permutation(n)
    np.testing.assert_array_equal(seen, perm[: spe * b])
    assert not np.array_equal(batch_indices(n, b, 5, 3, 0), batches[0])  # new epoch, new order
    with pytest.raises(ValidationError, match=r"'batch_size'.*\[1, 103\]"):
        batch_indices(n, 104, 0, 0, 0)
    with pytest.raises(ValidationError, match=r"'step'.*\[0, 9\]"):
        batch_indices(n, b, 0, 0, 10)


def test_position_advances_across_epochs() -> None:
    assert Position(0, 8).advance(5, 10) == Position(1, 3)
    assert Position(2, 0).advance(25, 10) == Position(4, 5)
    assert Position(1, 9).advance(1, 10) == Position(2, 0)
    assert Position(3, 4).advance(0, 10) == Position(3, 4)
    with pytest.raises(ValidationError, match=r"step in \[0, 10\)"):
        Position(0, 10).advance(1, 10)
    with pytest.raises(ValidationError, match=r"'epoch' parameter of Position"):
        Position(-1, 0)


# ---------------------------------------------------------------- the SGD update


def reference_least_squares(
    X: np.ndarray, y: np.ndarray, w0: np.ndarray, *, seed: int, start: Position, steps: int,
    b: int, lr: float, momentum: float, wd: float, mu: float,
) -> tuple[np.ndarray, np.ndarray | None, float]:
    """Hand-written SGD on mean squared error, float64, with the documented update."""
    n, d = X.shape
    spe = n // b
    w = w0.astype(np.float64)
    anchor = w.copy()
    buf = None
    pos = start
    losses = []
    for _ in range(steps):
        perm = np.random.default_rng([seed, pos.epoch]).permutation(n)
        idx = perm[pos.step * b:(pos.step + 1) * b]
        Xb, yb = X[idx].astype(np.float64), y[idx].astype(np.float64)
        r = Xb @ w[:d] + w[d] - yb
        losses.append(np.mean(r * r))
        g = np.concatenate([2 * Xb.T @ r / b, [2 * r.sum() / b]]) + wd * w + mu * (w - anchor)
        if momentum:
            buf = g if buf is None else momentum * buf + g
            g = buf
        w = w - lr * g
        pos = pos.advance(1, spe)
    return w, buf, float(np.mean(losses))


@pytest.mark.parametrize(
    ("momentum", "wd", "mu"), [(0.0, 0.0, 0.0), (0.9, 0.0, 0.0), (0.5, 0.01, 0.3)]
)
def test_train_equals_hand_written_sgd(momentum: float, wd: float, mu: float) -> None:
    X, y = regression_data(n=20, d=4)
    spec = ModelSpec("linear", (4,), 1)
    trainer = Trainer(spec, X, y, task="regression", seed=3)
    w0 = spec.initial_params(1)
    start = Position(0, 2)  # 7 steps of 3 per epoch: crosses two epoch ends
    out = trainer.train(w0, start=start, steps=7, batch_size=6, lr=0.05, momentum=momentum,
                        weight_decay=wd, prox_mu=mu)
    ref, ref_buf, ref_loss = reference_least_squares(
        X, y, w0, seed=3, start=start, steps=7, b=6, lr=0.05, momentum=momentum, wd=wd, mu=mu)
    # float32 (eps 6e-8) against float64 over 7 steps of 6-term sums: errors ~1e-6
    np.testing.assert_allclose(out.params, ref, rtol=1e-5, atol=1e-6)
    assert out.params.dtype == np.float32 and out.steps == 7
    assert out.end == Position(3, 0)
    assert out.loss == pytest.approx(ref_loss, rel=1e-5)
    if momentum:
        assert out.momentum is not None and out.momentum.dtype == np.float32
        np.testing.assert_allclose(out.momentum, ref_buf, rtol=1e-5, atol=1e-6)
    else:
        assert out.momentum is None


@pytest.mark.parametrize(("momentum", "wd"), [(0.9, 0.0), (0.0, 0.01), (0.5, 0.01)])
def test_train_matches_torch_sgd(momentum: float, wd: float) -> None:
    X, y = blobs(n=40)
    trainer = Trainer(SMALL_MLP, X, y, seed=2)
    w0 = SMALL_MLP.initial_params(4)
    out = trainer.train(w0, start=Position(0, 0), steps=9, batch_size=8, lr=0.1,
                        momentum=momentum, weight_decay=wd)

    model = SMALL_MLP.build(4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum, weight_decay=wd)
    pos, losses = Position(0, 0), []
    for _ in range(9):
        idx = batch_indices(40, 8, 2, pos.epoch, pos.step)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(X[idx])),
                                                 torch.from_numpy(y[idx]))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        pos = pos.advance(1, 5)
    # same float32 operations, possibly in another order/vectorisation: ~1 ulp per step
    np.testing.assert_allclose(out.params, flat_parameters(model), rtol=1e-6, atol=1e-7)
    assert out.loss == pytest.approx(np.mean(losses), rel=1e-6)
    if momentum:
        bufs = torch.cat([opt.state[p]["momentum_buffer"].reshape(-1)
                          for p in model.parameters()]).numpy()
        np.testing.assert_allclose(out.momentum, bufs, rtol=1e-6, atol=1e-7)


def test_momentum_buffer_carries_over_between_calls_exactly() -> None:
    X, y = blobs(n=40)
    trainer = Trainer(SMALL_MLP, X, y, seed=1)
    w0 = SMALL_MLP.initial_params(0)
    kw = {"batch_size": 8, "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3}
    whole = trainer.train(w0, start=Position(0, 3), steps=6, **kw)
    first = trainer.train(w0, start=Position(0, 3), steps=3, **kw)
    buf_before = first.momentum.copy()
    second = trainer.train(first.params, start=first.end, steps=3,
                           momentum_buffer=first.momentum, **kw)
    np.testing.assert_array_equal(second.params, whole.params)
    np.testing.assert_array_equal(second.momentum, whole.momentum)
    np.testing.assert_array_equal(first.momentum, buf_before)  # the caller's buffer is not modified
    assert first.end == Position(1, 1) and second.end == whole.end == Position(1, 4)
    # the same call twice gives the same bits (no state kept between calls)
    again = trainer.train(w0, start=Position(0, 3), steps=6, **kw)
    np.testing.assert_array_equal(again.params, whole.params)


def test_prox_term_pulls_towards_the_start() -> None:
    X, y = blobs(n=40)
    trainer = Trainer(SMALL_MLP, X, y)
    w0 = SMALL_MLP.initial_params(0)
    kw = {"start": Position(0, 0), "steps": 10, "batch_size": 4, "lr": 0.2}
    free = trainer.train(w0, **kw)
    prox = trainer.train(w0, prox_mu=1.0, **kw)
    assert np.linalg.norm(prox.params - w0) < 0.9 * np.linalg.norm(free.params - w0)
    # the first step starts at w0, where the proximal gradient μ(w − w0) is zero
    one = trainer.train(w0, start=Position(0, 0), steps=1, batch_size=4, lr=0.2, prox_mu=1.0)
    np.testing.assert_array_equal(
        one.params, trainer.train(w0, start=Position(0, 0), steps=1, batch_size=4, lr=0.2).params)


def test_client_average_of_split_batches_equals_the_union_step() -> None:
    """APFL eq. 29: with batches b/K that split the union batch, the mean of the K
    one-step updates is one step on the union batch (the mean gradient is linear)."""
    K, per = 3, 5
    X, y = blobs(n=K * per, seed=4)
    w0 = SMALL_MLP.initial_params(2)
    union = Trainer(SMALL_MLP, X, y, seed=0)  # b = n: the batch is every row
    clients = [Trainer(SMALL_MLP, X[k * per:(k + 1) * per], y[k * per:(k + 1) * per], seed=k)
               for k in range(K)]
    kw = {"batch_size": per, "lr": 0.3, "momentum": 0.9, "weight_decay": 1e-3}
    w, bufs = w0, [None] * K
    ref = union.train(w0, start=Position(0, 0), steps=3, **{**kw, "batch_size": K * per})
    for rnd in range(3):  # τ = 1, momentum buffers kept per client across rounds
        outs = [c.train(w, start=Position(rnd, 0), steps=1, momentum_buffer=bufs[k], **kw)
                for k, c in enumerate(clients)]
        w = np.mean([o.params for o in outs], axis=0, dtype=np.float64).astype(np.float32)
        bufs = [o.momentum for o in outs]
    # float32 sums in another order (per client, then averaged): ~1e-7 relative
    np.testing.assert_allclose(w, ref.params, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.mean(bufs, axis=0), ref.momentum, rtol=1e-5, atol=1e-6)


def test_concurrent_trainers_share_a_pool_and_give_sequential_results() -> None:
    pool = ModulePool(SMALL_MLP)
    data = [blobs(n=30, seed=s) for s in range(6)]
    trainers = [Trainer(SMALL_MLP, X, y, seed=s, pool=pool) for s, (X, y) in enumerate(data)]
    w0 = SMALL_MLP.initial_params(0)
    kw = {"start": Position(0, 0), "steps": 20, "batch_size": 5, "lr": 0.1, "momentum": 0.5}
    expected = [t.train(w0, **kw).params for t in trainers]
    got: list[np.ndarray | None] = [None] * 6

    def work(k: int) -> None:
        got[k] = trainers[k].train(w0, **kw).params

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(g, e)
    assert pool.size <= 6


def test_cnn_trains_one_step() -> None:
    spec = ModelSpec("cnn", (1, 12, 12), 4, channels=(2, 3))
    rng = np.random.default_rng(0)
    X = rng.random((8, 144), dtype=np.float32)  # flat rows are reshaped to (1, 12, 12)
    y = rng.integers(0, 4, 8)
    trainer = Trainer(spec, X, y)
    w0 = spec.initial_params(0)
    out = trainer.train(w0, start=Position(0, 0), steps=2, batch_size=4, lr=0.1)
    assert out.params.shape == w0.shape and not np.array_equal(out.params, w0)
    assert trainer.predict(out.params, X.reshape(8, 1, 12, 12)).shape == (8,)


# ---------------------------------------------------------------- data handling and errors


def test_trainer_shares_but_never_writes_the_callers_data() -> None:
    X, y = blobs(n=20)
    X_before, y_before = X.copy(), y.copy()
    trainer = Trainer(SMALL_MLP, X, y)
    assert np.shares_memory(trainer._X.numpy(), X)  # float32 C-contiguous: no copy
    trainer.train(SMALL_MLP.initial_params(0), start=Position(0, 0), steps=5, batch_size=4,
                  lr=0.5, momentum=0.9)
    np.testing.assert_array_equal(X, X_before)
    np.testing.assert_array_equal(y, y_before)
    frozen = X.copy()
    frozen.setflags(write=False)
    w0 = SMALL_MLP.initial_params(0)
    w0.setflags(write=False)
    out = Trainer(SMALL_MLP, frozen, y).train(w0, start=Position(0, 0), steps=1, batch_size=4,
                                              lr=0.1, prox_mu=0.1)
    assert out.params.flags.writeable


def _pixels(n: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 1, 12, 12), dtype=np.uint8), rng.integers(0, 3, n)


@pytest.mark.parametrize("kind", ["mlp", "cnn", "linear"])
def test_input_divisor_is_a_parameterless_first_layer(kind: str) -> None:
    plain = ModelSpec(kind, (1, 12, 12), 3, hidden=(8,), channels=(2, 4))
    scaled = ModelSpec(kind, (1, 12, 12), 3, hidden=(8,), channels=(2, 4), input_divisor=255)
    assert scaled.n_params() == plain.n_params()
    np.testing.assert_array_equal(scaled.initial_params(3), plain.initial_params(3))
    x = torch.rand(5, 1, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(scaled.build(3)(x * 255), plain.build(3)(x), rtol=1e-5,
                                   atol=1e-6)
    assert "inputs / 255 (" in scaled.describe()
    assert "inputs" not in plain.describe()
    assert len(plain.build(0)) == len(scaled.build(0)) - 1  # no layer when the divisor is 1
    # stored as its float32 value: a divisor float32 rounds to 1 is no layer, equal specs
    assert ModelSpec(kind, (1, 12, 12), 3, input_divisor=1 + 1e-12) == ModelSpec(
        kind, (1, 12, 12), 3)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), 1e300, 1e-50, 1e-45,
                                 "x", True])
def test_input_divisor_is_checked(bad: object) -> None:
    with pytest.raises(ValidationError, match="input_divisor"):
        ModelSpec("mlp", (4,), 2, input_divisor=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_uint8_rows_stay_compact_and_train_as_float32_pixels_do(kind: str) -> None:
    X8, y = _pixels()
    Xf = X8 / 255  # float64, as load_fashion_mnist(normalize=True); the trainer rounds it
    np.testing.assert_array_equal(Xf.astype(np.float32), X8.astype(np.float32) / np.float32(255))
    plain = ModelSpec(kind, (1, 12, 12), 3, hidden=(8,), channels=(2, 4))
    scaled = ModelSpec(kind, (1, 12, 12), 3, hidden=(8,), channels=(2, 4), input_divisor=255)
    ref, compact = Trainer(plain, Xf, y, seed=4), Trainer(scaled, X8, y, seed=4)
    assert compact.features.dtype == torch.uint8
    assert np.shares_memory(compact.features.numpy(), X8)  # kept as given: no copy
    w0 = plain.initial_params(0)
    kw = {"start": Position(0, 0), "steps": 9, "batch_size": 16, "lr": 0.3, "momentum": 0.5}
    a, b = ref.train(w0, **kw), compact.train(w0, **kw)
    np.testing.assert_array_equal(a.params, b.params)  # bit for bit
    np.testing.assert_array_equal(a.momentum, b.momentum)
    assert a.loss == b.loss
    for metric in ("accuracy", "loss"):
        assert ref.score_own(a.params, metric) == compact.score_own(b.params, metric)
    np.testing.assert_array_equal(ref.predict(a.params, Xf), compact.predict(b.params, X8))
    assert ref.evaluate(a.params, Xf, y) == compact.evaluate(b.params, X8, y)
    # int8 is kept as given too; other integer types become float32 as before
    assert Trainer(plain, X8.astype(np.int8) // 2, y).features.dtype == torch.int8
    assert Trainer(plain, X8.astype(np.int16), y).features.dtype == torch.float32


def test_trainer_rejects_bad_input() -> None:
    X, y = blobs(n=5)
    w0 = SMALL_MLP.initial_params(0)
    with pytest.raises(ValidationError, match=r"'X' parameter of Trainer.*no data"):
        Trainer(SMALL_MLP, np.zeros((0, 6), np.float32), np.zeros(0, np.int64))
    with pytest.raises(ValidationError, match=r"'X'.*shape \(n, 6\)"):
        Trainer(SMALL_MLP, np.zeros((5, 7)), y)
    with pytest.raises(ValidationError, match=r"'y'.*length 5"):
        Trainer(SMALL_MLP, X, y[:4])
    with pytest.raises(ValidationError, match=r"'y'.*labels in \[0, 3\).*Got 3"):
        Trainer(SMALL_MLP, X, np.array([0, 1, 2, 3, 0]))
    with pytest.raises(ValidationError, match=r"'y'"):
        Trainer(SMALL_MLP, X, y.astype(np.float64))
    bad = X.copy()
    bad[2, 3] = np.nan
    with pytest.raises(ValidationError, match=r"'X'.*finite.*nan at row 2, column 3"):
        Trainer(SMALL_MLP, bad, y)
    with pytest.raises(ValidationError, match=r"'y'.*finite"):
        Trainer(ModelSpec("linear", (6,), 1), X, np.array([0, 1, np.inf, 0, 1]),
                task="regression")
    with pytest.raises(ValidationError, match=r"n_outputs=1 for task='regression'"):
        Trainer(SMALL_MLP, X, y.astype(np.float32), task="regression")
    trainer = Trainer(SMALL_MLP, X, y)
    common = {"start": Position(0, 0), "steps": 1, "lr": 0.1}
    with pytest.raises(ValidationError,
                       match=r"'batch_size' parameter of Trainer.train.*\[1, 5\].*n=5.*Got 6"):
        trainer.train(w0, batch_size=6, **common)
    with pytest.raises(ValidationError, match=r"'params'.*length 83"):
        trainer.train(w0[:-1], batch_size=2, **common)
    with pytest.raises(ValidationError, match=r"'params'.*finite"):
        trainer.train(np.full_like(w0, np.nan), batch_size=2, **common)
    with pytest.raises(ValidationError, match=r"'start'.*step in \[0, 2\)"):
        trainer.train(w0, batch_size=2, start=Position(0, 2), steps=1, lr=0.1)
    with pytest.raises(ValidationError, match=r"'momentum_buffer'.*None when momentum is 0"):
        trainer.train(w0, batch_size=2, momentum_buffer=np.zeros_like(w0), **common)
    with pytest.raises(ValidationError, match=r"'momentum'.*\[0, 1\)"):
        trainer.train(w0, batch_size=2, momentum=1.0, **common)
    with pytest.raises(ValidationError, match=r"'lr'"):
        trainer.train(w0, batch_size=2, start=Position(0, 0), steps=1, lr=0.0)
    with pytest.raises(ValidationError, match=r"'steps'"):
        trainer.train(w0, batch_size=2, start=Position(0, 0), steps=0, lr=0.1)


def test_predict_and_evaluate() -> None:
    X, y = blobs(n=50)
    trainer = Trainer(SMALL_MLP, X, y)
    w = trainer.train(SMALL_MLP.initial_params(0), start=Position(0, 0), steps=30,
                      batch_size=10, lr=0.3, momentum=0.5).params
    module = SMALL_MLP.build(0)
    load_flat(module, w)
    with torch.no_grad():
        expected = module(torch.from_numpy(X)).argmax(1).numpy()
    pred = trainer.predict(w, X)
    np.testing.assert_array_equal(pred, expected)
    assert trainer.evaluate(w, X, y) == pytest.approx(np.mean(expected == y))
    assert trainer.evaluate(w, X, y) > 0.6

    Xr, yr = regression_data(n=30)
    spec = ModelSpec("linear", (4,), 1)
    reg = Trainer(spec, Xr, yr, task="regression")
    w = spec.initial_params(0)
    out = reg.predict(w, Xr)
    np.testing.assert_allclose(out, Xr @ w[:4] + w[4], rtol=1e-5, atol=1e-6)
    assert reg.evaluate(w, Xr, yr) == pytest.approx(np.mean((out - yr) ** 2), rel=1e-6)


def test_train_centralised_is_one_client_run() -> None:
    X, y = blobs(n=40)
    seen: list[int] = []
    params, history = train_centralised(SMALL_MLP, X, y, epochs=3, batch_size=8, lr=0.2,
                                        momentum=0.5, seed=4, init_seed=1,
                                        callback=lambda e, p: seen.append(e))
    assert seen == [0, 1, 2] and len(history) == 3 and history[-1] < history[0]
    trainer = Trainer(SMALL_MLP, X, y, seed=4)
    w, buf, pos = SMALL_MLP.initial_params(1), None, Position(0, 0)
    for _ in range(15):  # one step per call, as FedAvg with one client and τ = 1
        out = trainer.train(w, start=pos, steps=1, batch_size=8, lr=0.2, momentum=0.5,
                            momentum_buffer=buf)
        w, buf, pos = out.params, out.momentum, out.end
    np.testing.assert_array_equal(w, params)


# ---------------------------------------------------------------- metrics


def test_classification_report_matches_sklearn() -> None:
    rng = np.random.default_rng(0)
    for trial in range(5):
        k = 6
        y_true = rng.integers(0, 4, 60)  # classes 4, 5 absent from y_true
        y_pred = np.where(rng.random(60) < 0.6, y_true, rng.integers(0, 5, 60))
        if trial == 0:
            y_pred[y_pred == 2] = 1  # class 2 never predicted
        m = classification_report(y_true, y_pred, k)
        p, r, f, _ = precision_recall_fscore_support(
            y_true, y_pred, average="macro", zero_division=0, labels=range(k))
        assert m.precision == pytest.approx(p, abs=1e-12)
        assert m.recall == pytest.approx(r, abs=1e-12)
        assert m.f1 == pytest.approx(f, abs=1e-12)
        assert m.accuracy == pytest.approx(np.mean(y_true == y_pred))
        np.testing.assert_array_equal(m.confusion,
                                      confusion_matrix(y_true, y_pred, labels=range(k)))
        _, per_class, _, _ = precision_recall_fscore_support(
            y_true, y_pred, average=None, zero_division=0, labels=range(k))
        np.testing.assert_allclose(m.per_class_accuracy, per_class, atol=1e-12)
    doc = json.loads(json.dumps(m.to_dict()))
    assert doc["confusion"][0][0] == int(m.confusion[0, 0]) and len(doc["per_class_accuracy"]) == k


def test_classification_report_rejects_bad_labels() -> None:
    with pytest.raises(ValidationError, match=r"'y_true'.*\[0, 3\).*Got 3"):
        classification_report([0, 3], [0, 1], 3)
    with pytest.raises(ValidationError, match=r"'y_pred'.*same length"):
        classification_report([0, 1], [0], 3)
    with pytest.raises(ValidationError, match=r"'y_pred'"):
        classification_report([0, 1], [0.0, 1.0], 3)
    with pytest.raises(ValidationError, match=r"'n_classes'"):
        classification_report([0], [0], 0)


def test_dev_avg() -> None:
    assert dev_avg([0.9, 0.8, 1.0], [1.0, 0.6, 1.0]) == pytest.approx(0.1)
    assert dev_avg(np.ones(4), np.ones(4)) == 0.0
    with pytest.raises(ValidationError, match=r"'per_class_cl'.*length-3"):
        dev_avg([0.9, 0.8, 1.0], [1.0])


def test_regression_report_matches_sklearn() -> None:
    rng = np.random.default_rng(1)
    y = rng.standard_normal(50)
    pred = y + 0.3 * rng.standard_normal(50)
    m = regression_report(y, pred)
    assert m.mse == pytest.approx(mean_squared_error(y, pred), rel=1e-12)
    assert m.rmse == pytest.approx(np.sqrt(mean_squared_error(y, pred)), rel=1e-12)
    assert m.mae == pytest.approx(mean_absolute_error(y, pred), rel=1e-12)
    assert m.r2 == pytest.approx(r2_score(y, pred), rel=1e-12)
    assert json.loads(json.dumps(m.to_dict())) == m.to_dict()
    const = np.full(5, 2.0)
    assert regression_report(const, const).r2 == r2_score(const, const) == 1.0
    assert regression_report(const, const + 1).r2 == r2_score(const, const + 1) == 0.0
    with pytest.raises(ValidationError, match=r"'y_pred'.*length-5"):
        regression_report(const, const[:4])
    with pytest.raises(ValidationError, match=r"'y_true'.*finite"):
        regression_report([np.nan], [0.0])


def test_metrics_do_not_import_torch() -> None:
    code = "import sys, islands.hfl.metrics; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 2 * MAX_ABS_FLOAT32,
                                   -2 * MAX_ABS_FLOAT32])
def test_rows_beyond_the_float32_limit_are_refused_naming_the_cell(value: float) -> None:
    # the scan of the rows is a max and a min (no temporary |X|): NaN, ±inf and ±(beyond
    # the limit) must each still be refused, naming the row and column
    X = np.ones((5, 6), np.float32)
    X[3, 2] = value
    with pytest.raises(ValidationError, match=r"'X'.*row 3, column 2"):
        Trainer(SMALL_MLP, X, np.zeros(5, np.int64))


def test_rows_at_the_float32_limit_are_accepted() -> None:
    X = np.ones((5, 6), np.float32)
    X[1, 1], X[4, 5] = MAX_ABS_FLOAT32, -MAX_ABS_FLOAT32
    assert Trainer(SMALL_MLP, X, np.zeros(5, np.int64)).n == 5


def test_finite_params_skip_only_the_scan_of_values() -> None:
    X, y = blobs()
    trainer = Trainer(SMALL_MLP, X, y)
    p0 = SMALL_MLP.initial_params(0)
    kw = {"start": Position(0, 0), "steps": 2, "batch_size": 8, "lr": 0.1}
    # the same training whether the caller vouches for the values or they are scanned
    assert np.array_equal(trainer.train(p0, finite=True, **kw).params,
                          trainer.train(p0, **kw).params)
    # a vector of another type or length is still checked in full, values included
    with pytest.raises(ValidationError, match="params"):
        trainer.train(p0[:-1], finite=True, **kw)
    bad = p0.astype(np.float64)
    bad[0] = np.nan
    with pytest.raises(ValidationError, match="finite"):
        trainer.train(bad, finite=True, **kw)
    with pytest.raises(ValidationError, match="finite"):
        trainer.train(np.where(np.arange(p0.size) == 0, np.nan, p0).astype(np.float32), **kw)
