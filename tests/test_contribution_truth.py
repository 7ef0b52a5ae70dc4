"""The default contribution valuation against retraining Shapley (issue 27), a fast slice.

The smallest federation of ``benchmarks/bench_contribution_truth.py`` that shows the
failure the issue reports: six digits clients (a large clean one, two holding the same
rows, a small clean one, one whose labels are shuffled, a free-rider that uploads the
global model), FedAvg full batch without momentum for 15 rounds (the benchmark runs 30;
these hold at both), so training is deterministic and the twins' retraining values are
equal. Retraining Shapley (every coalition trained from the same initial model with
the same schedule) is the ground truth; the assertions are what it says. The default
before issue 27 (``gtg``, fixed weighting, accuracy) failed three of them: it paid the
shuffled client, ranked the twins below it and gave them nothing. The default now values a
federation this small by retraining inside the estimator (``methods=None`` resolves to
``("retrain",)``, on accuracy), checked here against the independent computation; per-round
valuation, the default where retraining cannot run, is on minus the loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from islands.hfl import FedAvg, FederatedModel
from islands.hfl.contribution import Contribution, ServerValidation, reward_shares
from islands.hfl.contribution.retrain import coalition_trainer, retrain_contributions

torch = pytest.importorskip("torch")
scipy_stats = pytest.importorskip("scipy.stats")

from islands.data import load  # noqa: E402
from islands.hfl.torch.learner import FreeRider  # noqa: E402
from islands.hfl.torch.models import ModelSpec  # noqa: E402

SPEC = ModelSpec("mlp", (64,), 10, hidden=(32,))
ROUNDS = 15
LARGE, TWIN_A, TWIN_B, SMALL, SHUFFLED, RIDER = range(6)


def _model(contribution: Contribution | None = None) -> FederatedModel:
    return FederatedModel(SPEC, FedAvg(local_steps=2, batch_size=None, lr=0.5, momentum=0.0),
                          epochs=ROUNDS, random_state=0, eval_fraction=0.0, concurrency=None,
                          threads=1, contribution=contribution)


@pytest.fixture(scope="module")
def federation() -> dict[str, Any]:
    data = load("digits")
    X, y = (data.X / 16).astype(np.float32), np.asarray(data.y, np.int64)
    # the benchmark's digits "issue" federation at seed 0 (its build(), drawn the same way)
    rng = np.random.default_rng([0, len("issue"), len("digits")])
    idx = rng.permutation(len(y))
    val, twin, large, small, shuffled, rider = np.split(idx[:1730],
                                                        [400, 650, 1150, 1230, 1480])
    parts = [(X[large], y[large]), (X[twin], y[twin]), (X[twin], y[twin]),
             (X[small], y[small]), (X[shuffled], rng.permutation(y[shuffled])),
             (X[rider], y[rider])]
    behaviour = {"client-6": FreeRider}
    validation = (X[val], y[val])
    utility = ServerValidation(SPEC, *validation, metric="accuracy")
    truth = retrain_contributions(coalition_trainer(_model, parts, utility,
                                                    behaviour=behaviour), len(parts))
    fm = _model(Contribution(validation)).fit(parts, behaviour=behaviour)  # defaults
    assert fm.contribution_ is not None
    loss = _model(Contribution(validation, methods=("exact",), metric="loss")).fit(
        parts, behaviour=behaviour).contribution_
    return {"truth": np.array(truth.scores), "report": fm.contribution_, "retrain": truth,
            "loss": loss}


def test_retraining_says_the_twins_help_equally_and_the_shuffled_client_does_not(
        federation: dict[str, Any]) -> None:
    phi = federation["truth"]
    # deterministic full-batch training: the twins' coalitions train bit for bit alike
    assert phi[TWIN_A] == pytest.approx(phi[TWIN_B], abs=1e-12)
    assert phi[TWIN_A] > 0.05 and phi[LARGE] > phi[TWIN_A] > phi[SMALL] > 0
    assert phi[SHUFFLED] < 0  # it makes every coalition it joins worse on average
    r = federation["retrain"]
    assert r.value([SHUFFLED]) < 0.2  # alone it learns nothing (ten classes)
    assert sum(phi) == pytest.approx(r.value(range(6)) - r.value([]), abs=1e-12)


def test_default_is_the_documented_one(federation: dict[str, Any]) -> None:
    rep = federation["report"]
    assert (rep.primary, rep.settings["methods"], rep.settings["metric"]) == (
        "retrain", ["retrain"], "accuracy")
    assert rep.trainings == 2**6 - 2  # every coalition but ∅ (scored) and N (the run)
    assert rep.rounds == [] and rep.gain == pytest.approx(
        rep.utility_final - rep.utility_initial, abs=1e-12)


def test_where_retraining_cannot_run_the_default_is_per_round_on_the_loss(
        federation: dict[str, Any]) -> None:
    cfg = Contribution((np.zeros((1, 64)), np.zeros(1)))
    for kw in ({"n": 9}, {"n": 6, "retrainable": False}):
        made = cfg.resolve(**kw)  # type: ignore[arg-type]
        assert (made.methods, made.metric) == (("gtg", "loo"), "loss")
    assert cfg.resolve(6, task="regression").metric == "loss"
    assert Contribution("clients").resolve(3).methods == ("gtg", "loo")


def test_the_estimators_retraining_is_the_ground_truth(federation: dict[str, Any]) -> None:
    # the estimator retrains with its own settings: the same game as the independent run
    np.testing.assert_allclose(federation["report"].scores["retrain"], federation["truth"],
                               atol=1e-12)


def test_default_pays_the_shuffled_client_at_most_5_percent(
        federation: dict[str, Any]) -> None:
    assert federation["report"].shares[SHUFFLED] <= 0.05
    assert federation["report"].shares[RIDER] <= 0.05


def test_default_ranks_as_retraining_does(federation: dict[str, Any]) -> None:
    tau = scipy_stats.kendalltau(federation["report"].scores["retrain"],
                                 federation["truth"]).statistic
    assert tau >= 0.8


def test_default_pays_the_twins_equal_positive_shares(federation: dict[str, Any]) -> None:
    shares = federation["report"].shares
    assert abs(shares[TWIN_A] - shares[TWIN_B]) <= 0.02
    assert min(shares[TWIN_A], shares[TWIN_B]) > 0


def test_shares_are_shares(federation: dict[str, Any]) -> None:
    rep = federation["report"]
    np.testing.assert_allclose(rep.shares, reward_shares(rep.scores["retrain"]))
    assert sum(rep.shares) == pytest.approx(1.0)


def test_per_round_shapley_on_the_loss_does_not_pay_the_shuffled_client(
        federation: dict[str, Any]) -> None:
    # the same per-round game with a smooth utility: the finding behind the xfails above
    rep = federation["loss"]
    assert rep is not None
    phi = np.array(rep.scores["exact"])
    assert rep.shares[SHUFFLED] == 0.0 and phi[SHUFFLED] < 0
    assert phi[TWIN_A] == pytest.approx(phi[TWIN_B], abs=1e-6) and phi[TWIN_A] > 0
    assert scipy_stats.kendalltau(phi, federation["truth"]).statistic >= 0.8


def test_free_rider_with_noise_uploads_the_global_model_plus_that_noise() -> None:
    from islands.errors import ValidationError
    from islands.hfl.strategy import LocalConfig

    with pytest.raises(ValidationError, match="noise"):
        FreeRider(object(), noise=-1.0)
    params = np.linspace(-1, 1, 20_000, dtype=np.float32)
    kw: dict[str, Any] = {"epoch": 0, "step": 0, "steps": 1, "batch_size": 1,
                          "config": LocalConfig(lr=0.1), "state": None}
    assert np.array_equal(FreeRider(object()).train(params, **kw).params, params)
    out = FreeRider(object(), noise=1e-3, seed=3).train(params, **kw).params
    # 20,000 draws: the sample std is within 2% of σ with overwhelming probability
    assert np.std(out - params) == pytest.approx(1e-3, rel=0.02)
    assert np.array_equal(out, FreeRider(object(), noise=1e-3, seed=3).train(params, **kw).params)


def test_retraining_is_refused_where_it_would_release_more() -> None:
    # under client-level DP every retrained model is a release the run's ε does not
    # count: an explicit 'retrain' is refused before any message, the default falls back
    from islands.aggregation.base import MeanAggregator
    from islands.aggregation.protect import ClientDP, SecureAggregation, can_retrain
    from islands.errors import ValidationError

    data = load("digits")
    X, y = (data.X / 16).astype(np.float32), np.asarray(data.y, np.int64)
    parts = [(X[:100], y[:100]), (X[100:200], y[100:200])]
    rounds: list[Any] = []
    fm = FederatedModel(SPEC, FedAvg(aggregator=ClientDP(MeanAggregator())), epochs=1,
                        eval_fraction=0.0, callback=lambda rec, ep: rounds.append(rec),
                        contribution=Contribution((X[1500:], y[1500:]),
                                                  methods=("retrain",)))
    with pytest.raises(ValidationError, match=r"'methods'.*differential privacy"):
        fm.fit(parts)
    assert rounds == [] and not hasattr(fm, "params_")
    assert not can_retrain(ClientDP(MeanAggregator()))
    assert not can_retrain(SecureAggregation()) and can_retrain(MeanAggregator())
