"""Horizontal FL: maths, strategies, the server/client roles end to end, checkpoints."""

from __future__ import annotations

import gc
import math
import threading
import time
import weakref
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.aggregation.base import MeanAggregator as Mean
from islands.aggregation.base import ServerLink
from islands.errors import ProtocolError, ValidationError
from islands.hfl import APFL, FedAvg, FederatedModel, FedProx, LocalConfig, MeanAggregator
from islands.hfl.checkpoint import load_checkpoint, save_checkpoint
from islands.hfl.maths import (
    TauState,
    apfl_batch_sizes,
    round_steps,
    update_tau,
    weighted_accuracy,
    weighted_mean,
)
from islands.hfl.protocol import LocalOutcome, client, server
from islands.runtime import run_local
from islands.threads import torch_threads

# ----------------------------------------------------------------------------- maths


def test_apfl_batch_rule_matches_the_paper() -> None:
    # §5.2: shares 4/10, 3/10, 3/10 of b_CL = 512 → 204, 153, 153
    assert apfl_batch_sizes(512, [24000, 18000, 18000]) == [204, 153, 153]
    assert apfl_batch_sizes(9, [3, 3, 3]) == [3, 3, 3]


def test_apfl_batch_rule_rejects_a_zero_batch() -> None:
    with pytest.raises(ValidationError, match="client 1 holds 1 of 1001"):
        apfl_batch_sizes(512, [1000, 1])


def test_weighted_mean_and_accuracy() -> None:
    a = np.array([1.0, 2.0], np.float32)
    b = np.array([3.0, 6.0], np.float32)
    np.testing.assert_allclose(weighted_mean([a, b], [1, 3]), [2.5, 5.0])
    assert weighted_accuracy([0.5, 1.0], [1, 1]) == pytest.approx(0.75)
    with pytest.raises(ValidationError):
        weighted_mean([a, b], [1])
    with pytest.raises(ValidationError):
        weighted_mean([a, b], [0, 0])


def test_tau_schedule_follows_eq_31_on_a_scripted_sequence() -> None:
    accs = [0.5, 0.6, 0.6, 0.55, 0.59, 0.6, 0.58,  # 5 without a new best → τ 4 → 3
            0.7, 0.69, 0.69, 0.69, 0.69, 0.69,     # new best, then 5 stale → 2
            0.1, 0.1, 0.1, 0.1, 0.1,               # 5 stale → 1
            0.1, 0.1, 0.1, 0.1, 0.1]               # stays at the minimum
    state = TauState(tau=4)
    taus = []
    for acc in accs:
        state = update_tau(state, acc, phi=5)
        taus.append(state.tau)
    assert taus == [4, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1]
    strategy = APFL(tau=4, phi=5)
    for acc in accs:
        strategy.observe(1, acc)
    assert strategy.local_steps() == 1
    with pytest.raises(ValidationError):
        update_tau(state, 0.5, phi=0)


def test_aggregation_counts_of_the_paper() -> None:
    # 54 000 training rows / 512 = 105 steps an epoch; 50 epochs (Table 5)
    def count(tau: int) -> int:
        n = 0
        for _ in range(50):
            step = 0
            while step < 105:
                step += round_steps(tau, step, 105)
                n += 1
        return n

    assert (count(1), count(4), count(15)) == (5250, 1350, 350)


def test_strategy_parameters_are_checked() -> None:
    with pytest.raises(ValidationError, match="'tau' parameter of APFL"):
        APFL(tau=0)
    with pytest.raises(ValidationError, match="'local_steps' parameter of FedAvg"):
        FedAvg(local_steps=0)
    with pytest.raises(ValidationError, match="'fraction'"):
        FedAvg(fraction=1.5)
    with pytest.raises(ValidationError, match="'momentum'"):
        LocalConfig(lr=0.1, momentum=1.0)
    with pytest.raises(ValidationError, match="larger than the 10 training samples of client"):
        FedAvg(batch_size=32).setup({"a": 100, "b": 10})


def test_client_sampling_is_seeded_per_round() -> None:
    s = FedAvg(fraction=0.3, seed=7)
    clients = [f"c{i}" for i in range(20)]
    first = s.select(3, clients)
    assert len(first) == 6 and first == s.select(3, clients)
    assert first != s.select(4, clients)


def test_checkpoint_round_trip_and_damage(tmp_path: Path) -> None:
    path = tmp_path / "x.ckpt"
    save_checkpoint(path, {"a": np.arange(5, dtype=np.float32), "b": [1, 2], "c": None})
    back = load_checkpoint(path)
    np.testing.assert_array_equal(back["a"], np.arange(5))
    assert back["b"] == [1, 2] and back["c"] is None
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValidationError, match="damaged"):
        load_checkpoint(path)
    (tmp_path / "y.ckpt").write_bytes(b"\x80\x04pickle")
    with pytest.raises(ValidationError, match="not an islands checkpoint"):
        load_checkpoint(tmp_path / "y.ckpt")


# ----------------------------------------------------------------------------- end to end
torch = pytest.importorskip("torch")

from islands.hfl.torch.learner import TorchLearner  # noqa: E402
from islands.hfl.torch.models import ModelSpec, flat_parameters  # noqa: E402
from islands.hfl.torch.training import Position, Trainer, batch_indices, train_centralised  # noqa: E402


def _blobs(n: int, d: int = 6, classes: int = 3, seed: int = 0) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    centres = rng.normal(size=(classes, d)) * 2
    X = (centres[y] + rng.normal(size=(n, d))).astype(np.float32)
    return X, y.astype(np.int64)


SPEC = ModelSpec(kind="mlp", input_shape=(6,), n_outputs=3, hidden=(8,))


def _run(strategy: Any, parts: list[tuple[Any, Any]], *, epochs: int, seeds: list[int],
         init_seed: int = 0, **server_kw: Any) -> Any:
    names = [f"c{k}" for k in range(len(parts))]
    roles: dict[str, Any] = {"server": partial(
        server, clients=names, strategy=strategy,
        initial=flat_parameters(SPEC.build(init_seed)), epochs=epochs, **server_kw)}
    for name, (X, y), seed in zip(names, parts, seeds, strict=True):
        roles[name] = partial(client, server="server",
                              learner=TorchLearner(SPEC, X, y, task="classification", seed=seed),
                              aggregator=strategy.aggregator)
    return run_local(roles, tolerate=names, timeout=60, blas_threads=None)


def test_one_client_fedavg_equals_centralised_step_for_step() -> None:
    X, y = _blobs(100)
    strategy = FedAvg(local_steps=3, batch_size=8, lr=0.1, momentum=0.5)
    run = _run(strategy, [(X, y)], epochs=2, seeds=[11])
    fl = run.results["server"].params
    cl, _ = train_centralised(SPEC, X, y, epochs=2, batch_size=8, lr=0.1, momentum=0.5,
                              seed=11, init_seed=0)
    # same batches, same arithmetic: bit-for-bit equal
    np.testing.assert_array_equal(fl, cl)
    assert run.results["server"].aggregations == 2 * math.ceil(12 / 3)


def test_fedavg_tau1_with_the_batch_rule_equals_centralised_sgd_on_the_union() -> None:
    # eq. 29: three equal clients, b_k = b/3, τ = 1, weights n_k/n → one SGD step on the
    # union of the three batches per round, momentum included (Σ_k v_k / 3 = v_CL)
    parts = [_blobs(60, seed=s) for s in (1, 2, 3)]
    seeds = [5, 6, 7]
    strategy = APFL(tau=1, phi=1000, batch_size=12, lr=0.1, momentum=0.5)
    run = _run(strategy, parts, epochs=2, seeds=seeds)
    assert run.results["server"].batch_sizes == {"c0": 4, "c1": 4, "c2": 4}

    params = flat_parameters(SPEC.build(0))
    buf = None
    steps = 60 // 4
    for epoch in range(2):
        for step in range(steps):
            rows = [batch_indices(60, 4, s, epoch, step) for s in seeds]
            Xb = np.concatenate([p[0][r] for p, r in zip(parts, rows, strict=True)])
            yb = np.concatenate([p[1][r] for p, r in zip(parts, rows, strict=True)])
            out = Trainer(SPEC, Xb, yb).train(params, start=Position(0, 0), steps=1,
                                              batch_size=12, lr=0.1, momentum=0.5,
                                              momentum_buffer=buf)
            params, buf = out.params, out.momentum
    # float32 sums in a different order: agreement to a few ulps of the weights' scale
    np.testing.assert_allclose(run.results["server"].params, params, rtol=1e-4, atol=1e-5)


def test_fedprox_pulls_towards_the_global_model() -> None:
    X, y = _blobs(90)
    parts = [(X[:45], y[:45]), (X[45:], y[45:])]
    far = _run(FedAvg(local_steps=10, batch_size=5, lr=0.2), parts, epochs=1, seeds=[1, 2])
    near = _run(FedProx(mu=5.0, local_steps=10, batch_size=5, lr=0.2), parts, epochs=1,
                seeds=[1, 2])
    start = flat_parameters(SPEC.build(0))
    d_far = np.linalg.norm(far.results["server"].params - start)
    d_near = np.linalg.norm(near.results["server"].params - start)
    assert d_near < d_far


class _Crashing(TorchLearner):
    def __init__(self, *args: Any, crash_on: int, how: str = "raise", pause: float = 0.0,
                 **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.calls = 0
        self.crash_on = crash_on
        self.how = how
        self.pause = pause

    def train(self, params: Any, **kw: Any) -> Any:
        self.calls += 1
        if self.calls == self.crash_on:
            if self.how == "raise":
                raise RuntimeError("disk on fire")
            time.sleep(self.pause)
        return super().train(params, **kw)


def _crash_run(how: str, min_clients: int, client_timeout: float = 60.0) -> Any:
    X, y = _blobs(120)
    parts = [(X[i::3], y[i::3]) for i in range(3)]
    strategy = FedAvg(local_steps=2, batch_size=5, lr=0.1, min_clients=min_clients)
    names = ["c0", "c1", "c2"]
    roles: dict[str, Any] = {"server": partial(
        server, clients=names, strategy=strategy, initial=flat_parameters(SPEC.build(0)),
        epochs=2, client_timeout=client_timeout)}
    for k, name in enumerate(names):
        cls = (partial(_Crashing, crash_on=3, how=how, pause=client_timeout + 1.5)
               if name == "c1" else TorchLearner)
        learner = cls(SPEC, *parts[k], seed=k)
        roles[name] = partial(client, server="server", learner=learner,
                              aggregator=strategy.aggregator)
    return run_local(roles, tolerate=names, timeout=60, blas_threads=None)


def test_a_client_that_crashes_is_left_out_and_the_run_goes_on() -> None:
    run = _crash_run("raise", min_clients=2)
    res = run.results["server"]
    assert [(d.round, d.client, d.reason) for d in res.dropouts] == [(3, "c1", "failed")]
    assert "c1" in run.failures and "c1" not in run.results
    assert res.rounds[2].survivors == 2 and res.rounds[-1].clients == 2
    assert np.all(np.isfinite(res.params))


def test_too_few_survivors_is_a_clear_error() -> None:
    with pytest.raises(ProtocolError, match=r"round 3: only 2 of 3 clients .*min_clients=3"):
        _crash_run("raise", min_clients=3)


def test_a_silent_client_times_out_and_its_late_update_is_discarded() -> None:
    # a timeout far above a healthy client's round (milliseconds, plus torch's first-call
    # warm-up on a loaded machine), so only the sleeping client misses it
    run = _crash_run("sleep", min_clients=1, client_timeout=3.0)
    res = run.results["server"]
    # the slow client may miss the next round too while it finishes the late one
    assert (res.dropouts[0].round, res.dropouts[0].client) == (3, "c1")
    assert {(d.client, d.reason) for d in res.dropouts} == {("c1", "timeout")}
    # the slow client is asked again in later rounds and takes part
    assert res.rounds[-1].survivors == 3


def test_resume_ends_with_exactly_the_model_of_an_uninterrupted_run(tmp_path: Path) -> None:
    X, y = _blobs(150)
    parts = [(X[:50], y[:50]), (X[50:], y[50:])]

    def model(**kw: Any) -> FederatedModel:
        return FederatedModel(SPEC, APFL(tau=3, phi=2, batch_size=10), epochs=3, random_state=4,
                              **kw)

    whole = model().fit(parts)

    class Killed(Exception):
        pass

    def kill_at_round_5(record: Any, epoch: Any) -> None:
        if record.round == 5:
            raise Killed

    with pytest.raises(ProtocolError, match="Killed"):
        model(checkpoint=tmp_path, callback=kill_at_round_5).fit(parts)
    # the callback runs before the round's checkpoint: round 5 was not checkpointed
    assert load_checkpoint(tmp_path / "server.ckpt")["round"] == 4
    resumed = model(checkpoint=tmp_path, resume=True).fit(parts)
    assert resumed.rounds_[0].round == 1 and len(resumed.rounds_) == len(whole.rounds_)
    np.testing.assert_array_equal(resumed.params_, whole.params_)
    assert [r.tau for r in resumed.rounds_] == [r.tau for r in whole.rounds_]


def test_resume_without_a_checkpoint_folder_is_refused() -> None:
    with pytest.raises(ValidationError, match="'resume'"):
        FederatedModel(SPEC, resume=True).fit([_blobs(20)])


def test_estimator_reports_history_and_bytes() -> None:
    X, y = _blobs(300)
    parts = [(X[:150], y[:150]), (X[150:], y[150:])]
    fm = FederatedModel(SPEC, FedAvg(local_steps=5, batch_size=10, lr=0.2), epochs=3,
                        random_state=1).fit(parts, test=(X, y))
    assert len(fm.history_) == 3 and fm.history_[-1].test["accuracy"] > 0.8
    assert fm.aggregations_ == 3 * math.ceil((135 // 10) / 5)
    assert fm.transcript_.totals("tag")["update"].messages == 2 * fm.aggregations_
    assert fm.metrics(X, y) == fm.history_[-1].test  # the last epoch's model is the final
    assert fm.score(X, y) == fm.history_[-1].test["accuracy"]
    assert fm.predict(X[:5]).shape == (5,)


def test_bad_input_is_named() -> None:
    X, y = _blobs(40)
    with pytest.raises(ValidationError, match="client 1 has no data"):
        FederatedModel(SPEC).fit([(X, y), (X[:0], y[:0])])
    with pytest.raises(ValidationError, match=r"labels \[7\] are outside"):
        FederatedModel(SPEC).fit([(X, np.full(40, 7))])
    with pytest.raises(ValidationError, match=r"has 36 training rows .* at least 64"):
        FederatedModel(SPEC, FedAvg(batch_size=64)).fit([(X, y)])
    with pytest.raises(ValidationError, match="'epochs'"):
        FederatedModel(SPEC, epochs=0).fit([(X, y)])


def test_two_clients_of_one_name_are_named_not_reported_as_a_deadlock() -> None:
    """Before: the run stopped with "deadlock: every running party is waiting"."""
    X, y = _blobs(40)
    with pytest.raises(ValidationError, match=r"^The 'names' parameter of FederatedModel.fit "
                                              r"must name each client once; 'a' names parts "
                                              r"0 and 2$"):
        FederatedModel(SPEC).fit([(X, y)] * 3, names=["a", "b", "a"])
    with pytest.raises(ValidationError, match=r"must not use 'server' \(part 1\): it is the "
                                              r"server's name"):
        FederatedModel(SPEC).fit([(X, y)] * 2, names=["a", "server"])
    with pytest.raises(ValidationError, match=r"'names' parameter of FederatedModel.fit must "
                                              r"be a list of non-empty strings"):
        FederatedModel(SPEC).fit([(X, y)] * 2, names=["a", ""])


@pytest.mark.parametrize(("strategy", "need"), [(FedAvg(batch_size=8), "FedAvg trains every "
                                                 "client on mini-batches of 8 rows, so each "
                                                 "client needs at least 8"),
                                                (APFL(batch_size=64, mbs=False), "APFL trains "
                                                 "every client on mini-batches of 32 rows")])
def test_a_one_row_client_is_refused_naming_it_and_the_minimum(strategy: Any,
                                                               need: str) -> None:
    """Before: the server refused it at the joins (after every client had sent its count)."""
    X, y = _blobs(40)
    with pytest.raises(ValidationError, match=r"^client 'client-2' has 1 training row; "
                                              + need):
        FederatedModel(SPEC, strategy).fit([(X, y), (X[:1], y[:1])])
    # APFL's batch rule needs every count: the server's check, made before any message
    with pytest.raises(ValidationError, match=r"^client 'client-2' holds 1 of 37 samples, so "
                                              r"its APFL mini-batch int\(16·1/37\) is 0"):
        FederatedModel(SPEC, APFL(batch_size=16)).fit([(X, y), (X[:1], y[:1])])


def test_mean_aggregator_refuses_malformed_updates() -> None:
    class P:
        name = "server"

    agg = Mean().server_half().start(
        ServerLink(P(), 1.0), round=1, clients=["a"], weights={"a": 1.0}, dim=3)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="malformed update from 'a'"):
        agg.add("a", np.array([1.0, np.nan, 2.0], np.float32))
    with pytest.raises(ProtocolError, match="not in this round"):
        agg.add("b", np.zeros(3, np.float32))
    assert isinstance(MeanAggregator(), Mean)


def test_in_process_training_runs_on_a_pool_of_concurrency_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # every OS thread that calls torch keeps ~0.6 MB: with many clients only the pool's
    # threads may train, not one thread per client role
    seen: set[str] = set()
    train = TorchLearner.train

    def recording(self: Any, params: Any, **kw: Any) -> Any:
        seen.add(threading.current_thread().name)
        return train(self, params, **kw)

    monkeypatch.setattr(TorchLearner, "train", recording)
    X, y = _blobs(240)
    parts = [(X[k::12], y[k::12]) for k in range(12)]
    fm = FederatedModel(SPEC, FedAvg(local_steps=2, batch_size=5), concurrency=3,
                        random_state=1).fit(parts)
    assert fm.workers_ == 3 and fm.aggregations_ >= 2
    assert 1 <= len(seen) <= 3 and all(n.startswith("islands-train") for n in seen), seen


def test_a_straggler_on_the_training_pool_drops_out_alone() -> None:
    """A call the server gave up on keeps its pool thread; the next client must not wait."""
    import time as _time
    from concurrent.futures import ThreadPoolExecutor
    from functools import partial

    from sklearn.datasets import load_digits

    from islands.hfl.protocol import client, server
    from islands.hfl.strategy import FedAvg
    from islands.hfl.torch.learner import PooledLearner, TorchLearner
    from islands.hfl.torch.models import ModelSpec, flat_parameters
    from islands.runtime import run_local

    spec = ModelSpec(kind="mlp", input_shape=(64,), n_outputs=10, hidden=(8,))
    X, y = load_digits(return_X_y=True)
    X = (X / 16).astype(np.float32)

    class Slow(TorchLearner):
        slept = False

        def train(self, params, **kw):  # type: ignore[no-untyped-def]
            if not Slow.slept:
                Slow.slept = True
                _time.sleep(6)
            return super().train(params, **kw)

    names = ["c0", "c1", "c2"]
    learners = [(Slow if k == 0 else TorchLearner)(spec, X[k::3], y[k::3], seed=k)
                for k in range(3)]
    executor = ThreadPoolExecutor(max_workers=2)  # twice the one client trained at a time
    pooled = [PooledLearner(learner, executor, timeout=60) for learner in learners]
    strategy = FedAvg(local_steps=2, batch_size=32, lr=0.1)
    roles = {"server": partial(server, clients=names, strategy=strategy,
                               initial=flat_parameters(spec.build(0)), epochs=1,
                               concurrency=1, client_timeout=3.0)}
    for name, learner in zip(names, pooled, strict=True):
        roles[name] = partial(client, server="server", learner=learner,
                              aggregator=strategy.aggregator)
    try:
        result = run_local(roles, tolerate=names, timeout=60, blas_threads=None)
    finally:
        executor.shutdown(wait=True)
    dropped = {d.client for d in result.results["server"].dropouts}
    assert dropped == {"c0"}


def test_fit_without_local_evaluation_trains_on_the_checked_rows_as_a_copy_would() -> None:
    # eval_fraction=0: every client trains on its part itself, no private copy; the model
    # is bit for bit the one of clients holding copies, and the caller's rows are unchanged
    from islands.hfl.estimator import client_seed

    parts = [_blobs(40, seed=s) for s in (1, 2, 3)]
    before = [X.copy() for X, _ in parts]
    strategy = FedAvg(local_steps=2, batch_size=8, lr=0.1, momentum=0.5)
    fm = FederatedModel(SPEC, strategy, epochs=2, random_state=3, eval_fraction=0.0,
                        threads=1).fit(parts)
    names = [f"client-{k + 1}" for k in range(3)]
    roles: dict[str, Any] = {"server": partial(
        server, clients=names, strategy=strategy, initial=flat_parameters(SPEC.build(3)),
        epochs=2, send_final=False)}
    for k, (name, (X, y)) in enumerate(zip(names, parts, strict=True)):
        learner = TorchLearner(SPEC, X.copy(), y.copy(), task="classification",
                               seed=client_seed(3, k))
        roles[name] = partial(client, server="server", learner=learner,
                              aggregator=strategy.aggregator)
    with torch_threads(1):
        run = run_local(roles, timeout=60, blas_threads=None)
    np.testing.assert_array_equal(fm.params_, run.results["server"].params)
    for (X, _), old in zip(parts, before, strict=True):
        np.testing.assert_array_equal(X, old)


def test_a_federation_on_uint8_pixels_trains_the_model_of_float32_pixels() -> None:
    # images as stored (uint8) with input_divisor=255, against the same pixels divided by
    # 255 beforehand: the same model bit for bit, a quarter of the rows' memory, including
    # the clients' local evaluation rows and the test-set score
    rng = np.random.default_rng(5)
    parts8 = [(rng.integers(0, 256, (48, 1, 12, 12), dtype=np.uint8), rng.integers(0, 3, 48))
              for _ in range(3)]
    partsf = [(X / 255, y) for X, y in parts8]
    spec = ModelSpec(kind="cnn", input_shape=(1, 12, 12), n_outputs=3, channels=(2, 4))
    scaled = ModelSpec(kind="cnn", input_shape=(1, 12, 12), n_outputs=3, channels=(2, 4),
                       input_divisor=255)
    strategy = FedAvg(local_steps=2, batch_size=8, lr=0.2, momentum=0.5)
    runs = [FederatedModel(s, strategy, epochs=2, random_state=1, eval_fraction=0.25,
                           threads=1).fit(parts, test=parts[0])
            for s, parts in ((spec, partsf), (scaled, parts8))]
    np.testing.assert_array_equal(runs[0].params_, runs[1].params_)
    tests = [[e.test["accuracy"] for e in r.history_] for r in runs]
    assert tests[0] == tests[1] and len(tests[0]) == 2
    assert runs[0].metrics(*partsf[0]) == runs[1].metrics(*parts8[0])


def test_an_idle_client_holds_no_model_between_rounds() -> None:
    # with 1000 clients and 8 training at once, every idle client that kept its last
    # trained model held 0.64 MB (MLP) for nothing: the new model must be gone by the time
    # the client trains again (a weak reference to it is dead)
    seen: list[weakref.ref[Any]] = []
    alive: list[bool] = []

    class Recording:
        n_train, n_eval = 10, 0

        def train(self, params: Any, **_: Any) -> LocalOutcome:
            gc.collect()
            alive.extend(ref() is not None for ref in seen)
            out = np.asarray(params, dtype=np.float32) + np.float32(0.5)
            seen.append(weakref.ref(out))
            return LocalOutcome(params=out, state=None, loss=0.0)

        def evaluate(self, params: Any) -> float:
            return float("nan")

    strategy = FedAvg(local_steps=1, batch_size=None)  # a round an epoch
    roles: dict[str, Any] = {
        "server": partial(server, clients=["c0"], strategy=strategy,
                          initial=np.zeros(1000, np.float32), epochs=3, send_final=False),
        "c0": partial(client, server="server", learner=Recording(),
                      aggregator=strategy.aggregator)}
    run = run_local(roles, timeout=60, blas_threads=None)
    np.testing.assert_array_equal(run.results["server"].params, np.full(1000, 1.5, np.float32))
    assert len(seen) == 3 and alive == [False, False, False]
