"""Server optimisers (FedAvgM, FedAdam, FedYogi, FedAdagrad): maths, server loop, resume, files."""

from __future__ import annotations

import math
import re
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from islands.aggregation.base import MeanAggregator
from islands.aggregation.homomorphic import CKKSAggregator, PaillierAggregator
from islands.aggregation.protect import ChaosPermutation
from islands.aggregation.secagg import SecureAggregation
from islands.errors import JobError, ValidationError
from islands.hfl import APFL, FedAdagrad, FedAdam, FedAvg, FedAvgM, FedProx, FedYogi
from islands.hfl.checkpoint import load_checkpoint, shaping_settings
from islands.hfl.job import build_strategy, parse_job
from islands.hfl.protocol import client, server
from islands.hfl.server_opt import ServerOptState, server_optimizer
from islands.runtime import run_local
from scripted import ScriptedLearner

ADAPTIVE = {"fedadam": FedAdam, "fedyogi": FedYogi, "fedadagrad": FedAdagrad}


# ----------------------------------------------------------------------------- the paper
def _sign(x: float) -> float:
    return 0.0 if x == 0 else math.copysign(1.0, x)


def _paper_run(rule: str, x0: np.ndarray, target: Any, rounds: int, *, lr: float,
               beta1: float = 0.0, beta2: float = 0.0, tau: float = 0.0,
               ) -> tuple[np.ndarray, list[float]]:
    """Algorithm 2 of Reddi et al. (and FedAvgM), one coordinate at a time in Python floats.

    ``target(x)`` is the round's aggregate from the float32 model x; the model is rounded
    to float32 after every round, as the server keeps it. Returns the final model and
    every v_{t−1} − Δ_t² (to see both of Yogi's signs).
    """
    x = [float(v) for v in x0]
    m = [0.0] * len(x)
    v = [tau * tau] * len(x)  # v_{-1} = τ²
    gaps = []
    for _ in range(rounds):
        agg = target(np.array(x, dtype=np.float32))
        for i in range(len(x)):
            d = float(agg[i]) - x[i]
            if rule == "fedavgm":
                m[i] = beta1 * m[i] + d
                x[i] = x[i] + lr * m[i]
                continue
            m[i] = beta1 * m[i] + (1 - beta1) * d
            gaps.append(v[i] - d * d)
            if rule == "fedadagrad":
                v[i] = v[i] + d * d
            elif rule == "fedyogi":
                v[i] = v[i] - (1 - beta2) * d * d * _sign(v[i] - d * d)
            else:
                v[i] = beta2 * v[i] + (1 - beta2) * d * d
            x[i] = x[i] + lr * (m[i] / (math.sqrt(v[i]) + tau))
        x = [float(np.float32(xi)) for xi in x]
    return np.array(x, dtype=np.float32), gaps


def _target(scales: list[float], c: np.ndarray) -> Any:
    """A round's aggregate as a known map of the model: 0.5·x + s_t·c (s_t shrinking)."""
    t = iter(scales)

    def agg(x: np.ndarray) -> np.ndarray:
        return (0.5 * x + next(t) * c).astype(np.float32)

    return agg


def _optimizer(rule: str, **kw: Any) -> Any:
    return server_optimizer(rule, **kw)


RULES = [
    ("fedadam", {"lr": 0.05, "beta1": 0.9, "beta2": 0.99, "tau": 1e-3}),
    ("fedyogi", {"lr": 0.05, "beta1": 0.9, "beta2": 0.99, "tau": 1e-3}),
    ("fedadagrad", {"lr": 0.1, "beta1": 0.5, "tau": 1e-3}),
    ("fedadagrad", {"lr": 0.1, "beta1": 0.0, "tau": 1e-2}),
    ("fedavgm", {"lr": 0.7, "momentum": 0.9}),
]


@pytest.mark.parametrize(("rule", "params"), RULES)
def test_each_rule_follows_algorithm_2_over_several_rounds(rule: str, params: dict[str, Any]
                                                           ) -> None:
    rng = np.random.default_rng(3)
    x0 = rng.normal(size=7).astype(np.float32)
    c = rng.normal(size=7)
    scales = [1.0, 0.5, 0.02, 0.01, 0.3, 0.001, 0.2, 0.0005]
    opt = _optimizer(rule, **params)
    kw = {"beta1": params.get("momentum", params.get("beta1", 0.0)),
          "beta2": params.get("beta2", 0.0), "tau": params.get("tau", 0.0)}
    want, gaps = _paper_run(rule, x0, _target(scales, c), len(scales), lr=params["lr"], **kw)
    state, x, agg = opt.init(7), x0, _target(scales, c)
    for _ in scales:
        x, state = opt.step(x, agg(x), state)
        assert x.dtype == np.float32 and state.m.dtype == np.float64
    assert state.t == len(scales)
    # the model is float32: the two orders of float64 operations may round it one ulp apart
    np.testing.assert_allclose(x, want, rtol=1e-6, atol=1e-7)
    if rule == "fedyogi":  # both branches of sign(v_{t−1} − Δ_t²) were taken
        assert min(gaps) < 0 < max(gaps)


def test_no_bias_correction_the_first_adam_step_is_published_one() -> None:
    # t = 0: m = (1 − β1)Δ, v = β2τ² + (1 − β2)Δ²; no division by (1 − β^t)
    opt = FedAdam(lr=1.0, beta1=0.9, beta2=0.99, tau=1e-3)
    x0 = np.zeros(1, np.float32)
    x1, state = opt.step(x0, np.ones(1, np.float32), opt.init(1))
    v = 0.99 * 1e-6 + 0.01
    assert state.v is not None and state.v[0] == pytest.approx(v, rel=1e-15)
    assert x1[0] == np.float32(0.1 / (math.sqrt(v) + 1e-3))


def test_fedavgm_without_momentum_at_rate_one_is_the_aggregate_bitwise() -> None:
    opt = FedAvgM(lr=1.0, momentum=0.0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=1000).astype(np.float32)
    state = opt.init(x.size)
    for _ in range(5):
        agg = (x * 0.9 + rng.normal(size=x.size) * 1e-3).astype(np.float32)
        x, state = opt.step(x, agg, state)
        np.testing.assert_array_equal(x, agg)


@pytest.mark.parametrize("cls", [FedAdam, FedYogi, FedAdagrad, FedAvgM])
@pytest.mark.parametrize(("name", "value", "expected"), [
    ("lr", 0, "(0, inf)"), ("lr", -0.1, "(0, inf)"), ("lr", math.nan, "(0, inf)"),
    ("lr", math.inf, "(0, inf)"), ("lr", "0.1", "(0, inf)"), ("lr", True, "(0, inf)"),
    ("lr", None, "(0, inf)"),
    ("beta1", 1.0, "[0, 1)"), ("beta1", -0.1, "[0, 1)"), ("beta1", math.nan, "[0, 1)"),
    ("beta1", "0.9", "[0, 1)"), ("beta2", 1.5, "[0, 1)"), ("momentum", 1.0, "[0, 1)"),
    ("momentum", math.nan, "[0, 1)"), ("tau", 0.0, "(0, inf)"), ("tau", -1e-3, "(0, inf)"),
    ("tau", math.nan, "(0, inf)"), ("tau", "1e-3", "(0, inf)"),
])
def test_bad_parameters_are_refused_naming_them(cls: Any, name: str, value: Any,
                                                expected: str) -> None:
    if name not in cls.__dataclass_fields__:
        with pytest.raises(TypeError, match=name):
            cls(**{name: value})
        return
    with pytest.raises(ValidationError, match=rf"'{name}' parameter of {cls.__name__} must "
                                              rf"be a float in {re.escape(expected)}"):
        cls(**{name: value})


def test_optimisers_by_name_refuse_unknown_names_and_keys() -> None:
    assert server_optimizer("fedyogi", lr=0.2) == FedYogi(lr=0.2)
    with pytest.raises(ValidationError, match="'name' parameter of server_optimizer"):
        server_optimizer("fedsgd")
    with pytest.raises(ValidationError, match=r"'fedadam' does not take \['momentum'\]"):
        server_optimizer("fedadam", momentum=0.5)


def test_a_step_past_float32_is_refused_naming_the_rate() -> None:
    opt = FedAvgM(lr=1e38, momentum=0.5)
    x = np.zeros(2, np.float32)
    with pytest.raises(ValidationError, match=r"FedAvgM\(lr=1e\+38.*lower its 'lr'"):
        opt.step(x, np.full(2, 100.0, np.float32), opt.init(2))


def test_state_round_trips_and_a_damaged_one_is_refused() -> None:
    opt = FedYogi()
    _, state = opt.step(np.zeros(3, np.float32), np.ones(3, np.float32), opt.init(3))
    again = opt.restore(state.to_dict(), 3)
    assert again.t == 1
    np.testing.assert_array_equal(again.m, state.m)
    assert again.v is not None and state.v is not None
    np.testing.assert_array_equal(again.v, state.v)
    with pytest.raises(ValidationError, match="no usable 'm'"):
        opt.restore(state.to_dict(), 4)
    with pytest.raises(ValidationError, match="no second moment"):
        opt.restore(ServerOptState(t=1, m=np.zeros(3)).to_dict(), 3)
    with pytest.raises(ValidationError, match="no step count"):
        opt.restore({}, 3)


# ----------------------------------------------------------------------------- server loop
def _scripted(strategy: Any, *, rounds: int, n: tuple[int, ...] = (10, 30),
              dim: int = 5) -> tuple[Any, np.ndarray, list[np.ndarray]]:
    """Run the roles with local training w ↦ 0.5·w + v_k; one round per epoch."""
    rng = np.random.default_rng(1)
    x0 = rng.normal(size=dim).astype(np.float32)
    vs = [rng.normal(size=dim).astype(np.float32) for _ in n]
    names = [f"c{k}" for k in range(len(n))]
    roles: dict[str, Any] = {"server": partial(server, clients=names, strategy=strategy,
                                               initial=x0, epochs=rounds)}
    for name, count, v in zip(names, n, vs, strict=True):
        roles[name] = partial(client, server="server", learner=ScriptedLearner(count, v),
                              aggregator=strategy.aggregator)
    return run_local(roles, timeout=60).results["server"], x0, vs


@pytest.mark.parametrize(("rule", "params"), RULES[:3] + RULES[4:])
def test_the_server_applies_the_rule_to_each_round_aggregate(rule: str,
                                                            params: dict[str, Any]) -> None:
    rounds = 6
    strategy = FedAvg(batch_size=None, server_optimizer=_optimizer(rule, **params))
    res, x0, vs = _scripted(strategy, rounds=rounds)

    def mean(x: np.ndarray) -> np.ndarray:  # the weighted mean, p = 1/4 and 3/4
        ups = [(0.5 * x + v).astype(np.float32) for v in vs]
        return (0.25 * ups[0].astype(np.float64) + 0.75 * ups[1]).astype(np.float32)

    kw = {"beta1": params.get("momentum", params.get("beta1", 0.0)),
          "beta2": params.get("beta2", 0.0), "tau": params.get("tau", 0.0)}
    want, _ = _paper_run(rule, x0, mean, rounds, lr=params["lr"], **kw)
    assert res.aggregations == rounds
    np.testing.assert_allclose(res.params, want, rtol=1e-6, atol=1e-7)  # float32 rounding
    plain, _, _ = _scripted(FedAvg(batch_size=None), rounds=rounds)
    assert not np.allclose(res.params, plain.params)


def test_fedavgm_beta0_lr1_equals_fedavg_bitwise_with_torch_training() -> None:
    pytest.importorskip("torch")
    from islands.hfl import FederatedModel, ModelSpec

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 6)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    parts = [(X[:40], y[:40]), (X[40:], y[40:])]
    spec = ModelSpec("linear", (6,), 2)

    def fit(opt: Any) -> np.ndarray:
        strategy = FedProx(mu=0.01, local_steps=2, batch_size=8, lr=0.1, server_optimizer=opt)
        fm = FederatedModel(spec, strategy, epochs=2, random_state=3)
        return np.asarray(fm.fit(parts).params_)

    np.testing.assert_array_equal(fit(FedAvgM(lr=1.0, momentum=0.0)), fit(None))


def test_resume_is_exact_and_another_optimiser_or_rate_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from islands.errors import ProtocolError
    from islands.hfl import FederatedModel, ModelSpec

    rng = np.random.default_rng(1)
    X = rng.normal(size=(150, 6)).astype(np.float32)
    y = (X[:, 0] - X[:, 2] > 0).astype(np.int64)
    parts = [(X[:50], y[:50]), (X[50:], y[50:])]
    spec = ModelSpec("linear", (6,), 2)

    def model(opt: Any = None, **kw: Any) -> FederatedModel:
        opt = FedAdam(lr=0.02) if opt is None else opt
        strategy = FedAvg(local_steps=3, batch_size=10, lr=0.1, server_optimizer=opt)
        return FederatedModel(spec, strategy, epochs=3, random_state=4, **kw)

    whole = model().fit(parts)

    class Killed(Exception):
        pass

    def kill_at_round_5(record: Any, epoch: Any) -> None:
        if record.round == 5:
            raise Killed

    with pytest.raises(ProtocolError, match="Killed"):
        model(checkpoint=tmp_path, callback=kill_at_round_5).fit(parts)
    saved = load_checkpoint(tmp_path / "server.ckpt")
    assert saved["round"] == 4 and saved["server_optimizer"]["t"] == 4
    for other, named in [(FedYogi(lr=0.02), 'server_optimizer: "FedAdam" → "FedYogi"'),
                         (FedAdam(lr=0.03), "server_optimizer.lr: 0.02 → 0.03")]:
        with pytest.raises(ValidationError, match=named):
            model(other, checkpoint=tmp_path, resume=True).fit(parts)
    without = FedAvg(local_steps=3, batch_size=10, lr=0.1)
    with pytest.raises(ValidationError, match=r'server_optimizer: "FedAdam" → \(none\)'):
        FederatedModel(spec, without, epochs=3, random_state=4, checkpoint=tmp_path,
                       resume=True).fit(parts)
    resumed = model(checkpoint=tmp_path, resume=True).fit(parts)
    np.testing.assert_array_equal(resumed.params_, whole.params_)


def test_under_secure_aggregation_the_rule_sees_the_same_mean() -> None:
    opt = FedAdam(lr=0.05)
    plain, _, _ = _scripted(FedAvg(batch_size=None, server_optimizer=opt), rounds=4,
                            n=(10, 20, 30))
    masked, _, _ = _scripted(FedAvg(batch_size=None, aggregator=SecureAggregation(),
                                    server_optimizer=opt), rounds=4, n=(10, 20, 30))
    # secure aggregation's fixed point (2^-32 per upload) moves the mean by ~1e-9
    np.testing.assert_allclose(masked.params, plain.params, atol=1e-5)
    assert masked.params is not None and masked.params.dtype == np.float32


@pytest.mark.parametrize("make", [
    lambda: CKKSAggregator(), lambda: PaillierAggregator(),
    lambda: ChaosPermutation(SecureAggregation()),
], ids=["ckks", "paillier", "chaos+secagg"])
def test_aggregators_that_hide_the_aggregate_are_refused(make: Any) -> None:
    agg = make()
    for build in (lambda o: FedAvg(aggregator=agg, server_optimizer=o),
                  lambda o: APFL(aggregator=agg, server_optimizer=o)):
        with pytest.raises(ValidationError, match=r"the server never holds the plain "
                                                  r"aggregate.*MAC"):
            build(FedAdam())
    # a strategy given its optimiser later is refused by the server before any message
    strategy = FedAvg(aggregator=agg)
    strategy.server_optimizer = FedAvgM()
    with pytest.raises(ValidationError, match="server 'server': the server optimiser"):
        server(SimpleNamespace(name="server"), clients=["c0"], strategy=strategy,  # type: ignore[arg-type]
               initial=np.zeros(3, np.float32), epochs=1)


def test_settings_name_the_optimiser_and_each_parameter() -> None:
    def settings(strategy: Any) -> dict[str, Any]:
        return shaping_settings(seed=0, task="classification", eval_fraction=0.1,
                                strategy=strategy)

    with_opt = settings(FedAvg(server_optimizer=FedYogi(tau=0.01)))
    assert {k: v for k, v in with_opt.items() if k.startswith("server_optimizer")} == {
        "server_optimizer": "FedYogi", "server_optimizer.lr": 0.01,
        "server_optimizer.beta1": 0.9, "server_optimizer.beta2": 0.99,
        "server_optimizer.tau": 0.01}
    assert not any(k.startswith("server_optimizer") for k in settings(FedAvg()))
    assert "server_optimizer" in repr(FedAvg(server_optimizer=FedAvgM()))


# ----------------------------------------------------------------------------- files
JOB = {
    "name": "t", "data": {"name": "digits"}, "partition": {"kind": "iid", "clients": 2},
    "model": {"kind": "linear"}, "strategy": {"name": "fedavg", "lr": 0.1},
}


def test_a_job_file_section_builds_the_optimiser() -> None:
    job = parse_job({**JOB, "server_optimizer": {"name": "fedadam", "lr": 0.02, "tau": 1e-2}})
    strategy = build_strategy(job)
    assert strategy.server_optimizer == FedAdam(lr=0.02, tau=1e-2)  # type: ignore[attr-defined]
    assert job.to_dict()["server_optimizer"] == {"name": "fedadam", "lr": 0.02, "tau": 1e-2}
    assert "server_optimizer" not in parse_job(JOB).to_dict()
    apfl = parse_job({**JOB, "strategy": {"name": "apfl"},
                      "server_optimizer": {"name": "fedavgm"}})
    assert build_strategy(apfl).server_optimizer == FedAvgM()  # type: ignore[attr-defined]


@pytest.mark.parametrize(("table", "extra", "message"), [
    ({"name": "fedadam", "eta": 0.1}, {}, r"\[server_optimizer\]: unknown key\(s\) \['eta'\]"),
    ({"lr": 0.1}, {}, r"\[server_optimizer\]: missing key 'name'"),
    ({"name": "fedadam", "lr": "big"}, {}, r"\[server_optimizer\]: 'lr' must be a number"),
    ({"name": "fedadam", "lr": -1.0}, {}, r"\[server_optimizer\]: The 'lr' parameter of "
                                          r"FedAdam must be a float in \(0, inf\)"),
    ({"name": "fedyogi", "momentum": 0.9}, {}, r"'fedyogi' does not take \['momentum'\]"),
    ({"name": "fedavgm"}, {"protect": ["paillier"]},
     r"\[server_optimizer\]: protect = \['paillier'\]: the server optimiser 'fedavgm'"),
])
def test_a_bad_job_section_is_refused_naming_it(table: dict[str, Any], extra: dict[str, Any],
                                                message: str) -> None:
    with pytest.raises(JobError, match=message):
        parse_job({**JOB, **extra, "server_optimizer": table})


def test_a_federation_file_takes_the_section() -> None:
    from islands.hfl.spec import hfl_training

    options = {"server": "s", "features": 4, "classes": 2, "model": {"kind": "linear"},
               "strategy": {"name": "fedprox", "mu": 0.1},
               "server_optimizer": {"name": "fedyogi", "lr": 0.03}}
    training, _ = hfl_training(options, "federation file f.toml [hfl]", ("s", "a", "b"))
    assert training.build_strategy().server_optimizer == FedYogi(lr=0.03)


def test_default_aggregator_composes() -> None:
    assert FedAvg(server_optimizer=FedAdam()).aggregator.name == MeanAggregator().name
