"""FederatedModel keeps scikit-learn's conventions (issue 38, part 5).

``random_state`` (formerly ``seed``: still taken with a FutureWarning), ``score`` as one
number (accuracy or R²) with every metric in ``metrics``, and a signature in groups that
``get_params`` and :func:`sklearn.base.clone` read.
"""

from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.errors import ProtocolError, ValidationError
from islands.hfl import FedAvg, FederatedModel
from islands.hfl.checkpoint import load_checkpoint
from islands.hfl.config import SEED_MAX, HflConfig

pytest.importorskip("torch")
from islands.hfl.torch.models import ModelSpec

SPEC = ModelSpec(kind="mlp", input_shape=(6,), n_outputs=3, hidden=(8,))
# the groups of the signature, in order: training, protections, execution, state,
# observation (the class docstring names them)
GROUPS = [["model", "strategy"],
          ["epochs", "task", "loss", "eval_fraction", "random_state"],
          ["sample_dp"],
          ["backend", "ray_address", "concurrency", "threads", "batch_clients", "timeout"],
          ["checkpoint", "resume"],
          ["callback", "round_observer", "tracking", "keep_payloads", "contribution",
           "settings", "extra_metrics"]]
ORDER = [name for group in GROUPS for name in group]


def _blobs(n: int, d: int = 6, classes: int = 3, seed: int = 0) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    centres = rng.normal(size=(classes, d)) * 2
    X = (centres[y] + rng.normal(size=(n, d))).astype(np.float32)
    return X, y.astype(np.int64)


def _parts() -> list[tuple[Any, Any]]:
    X, y = _blobs(120)
    return [(X[:60], y[:60]), (X[60:], y[60:])]


def _strategy() -> FedAvg:
    return FedAvg(local_steps=2, batch_size=10, lr=0.2, momentum=0.5)


def _model(**kw: Any) -> FederatedModel:
    return FederatedModel(SPEC, _strategy(), **{"epochs": 2, "threads": 1, **kw})


# ------------------------------------------------------------------------- signature


def test_signature_reads_in_groups_and_get_params_follows_it() -> None:
    params = inspect.signature(FederatedModel).parameters
    assert list(params) == ORDER
    assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in ORDER[2:])
    assert list(FederatedModel(SPEC).get_params()) == ORDER
    # every default as before the regrouping (random_state's is seed's, the files' seed)
    assert {name: params[name].default for name in ORDER[1:]} == {
        "strategy": None, "epochs": 1, "task": "classification", "loss": None,
        "eval_fraction": 0.1,
        "random_state": 0, "sample_dp": None, "backend": "local", "ray_address": None,
        "concurrency": 8, "threads": "auto", "batch_clients": "auto", "timeout": 600.0,
        "checkpoint": None,
        "resume": False, "callback": None, "round_observer": None, "tracking": None,
        "keep_payloads": False, "contribution": None, "settings": None, "extra_metrics": None}
    assert params["random_state"].default == HflConfig().seed


def test_the_docstring_documents_the_parameters_in_the_signature_s_order() -> None:
    doc = FederatedModel.__doc__ or ""
    section = doc.split("Parameters\n    ----------\n")[1].split("\n\n")[0]
    assert re.findall(r"^    (\w+) : ", section, flags=re.M) == ORDER


def test_clone_makes_an_unfitted_twin_that_trains_the_same_model() -> None:
    from sklearn.base import clone

    model = _model(random_state=3, eval_fraction=0.2)
    twin = clone(model)
    assert twin is not model and type(twin) is FederatedModel
    assert twin.get_params().keys() == model.get_params().keys()
    assert twin.model == SPEC and twin.random_state == 3 and twin.eval_fraction == 0.2
    assert twin.strategy is not model.strategy
    model.fit(_parts())
    again = clone(model)
    assert not hasattr(again, "params_") and not hasattr(again, "seed_")
    np.testing.assert_array_equal(again.fit(_parts()).params_, model.params_)


# ---------------------------------------------------------------------- random_state


def test_random_state_trains_the_model_seed_did_bit_for_bit() -> None:
    with pytest.warns(FutureWarning, match=r"FederatedModel's 'seed' parameter is "
                                           r"deprecated .* use 'random_state'") as caught:
        old = _model(seed=4)
    assert caught[0].filename == __file__  # the warning points at the caller's line
    assert old.random_state == 4 and "seed" not in old.get_params()
    assert repr(old) == repr(_model(random_state=4))
    new = _model(random_state=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # random_state itself warns nothing
        new.fit(_parts())
    old.fit(_parts())
    np.testing.assert_array_equal(old.params_, new.params_)
    assert old.seed_ == new.seed_ == 4
    # and the seed matters: another one is another model
    assert not np.array_equal(_model(random_state=5).fit(_parts()).params_, new.params_)


def test_set_params_takes_seed_with_a_warning_and_both_names_are_refused() -> None:
    model = _model()
    with pytest.warns(FutureWarning, match="use 'random_state'") as caught:
        assert model.set_params(seed=7, epochs=3) is model
    assert caught[0].filename == __file__
    assert (model.random_state, model.epochs) == (7, 3)
    message = r"FederatedModel: give 'random_state' only; 'seed' is its old name"
    with pytest.raises(ValidationError, match=message):
        model.set_params(seed=1, random_state=2, epochs=4)
    assert (model.random_state, model.epochs) == (7, 3)  # nothing set
    with pytest.raises(ValidationError, match=message):
        _model(seed=1, random_state=1)  # even when they agree
    with pytest.raises(ValidationError, match="FederatedModel has no parameter 'seeds'"):
        model.set_params(seeds=4)


def test_a_generator_or_none_draws_the_seed_and_seed_trains_it_again() -> None:
    draw = int(np.random.default_rng(11).integers(0, SEED_MAX, endpoint=True))
    first = _model(random_state=np.random.default_rng(11)).fit(_parts())
    assert first.seed_ == draw
    again = _model(random_state=first.seed_).fit(_parts())
    np.testing.assert_array_equal(first.params_, again.params_)
    rng = np.random.default_rng(11)
    model = _model(random_state=rng, epochs=1)
    assert model.fit(_parts()).seed_ == draw
    assert model.fit(_parts()).seed_ != draw  # the caller's stream advanced
    fresh = _model(random_state=None, epochs=1).fit(_parts())
    assert 0 <= fresh.seed_ <= SEED_MAX


@pytest.mark.parametrize("bad", [-1, SEED_MAX + 1, True, 1.5, "4", np.random.RandomState(0)])
def test_a_bad_random_state_is_named_before_any_training(bad: Any) -> None:
    calls: list[Any] = []
    with pytest.raises(ValidationError, match=r"'random_state' parameter of FederatedModel "
                                              r"must be an int in \[0, 9223372036854775807\], "
                                              r"a numpy.random.Generator or None"):
        _model(random_state=bad, callback=lambda *a: calls.append(a)).fit(_parts())
    assert calls == []


def test_a_checkpoint_made_under_seed_resumes_under_random_state(tmp_path: Path) -> None:
    whole = _model(random_state=4, epochs=3).fit(_parts())

    class Killed(Exception):
        pass

    def kill_at_round_5(record: Any, epoch: Any) -> None:
        if record.round == 5:
            raise Killed

    with pytest.warns(FutureWarning, match="use 'random_state'"):
        old = _model(seed=4, epochs=3, checkpoint=tmp_path, callback=kill_at_round_5)
    with pytest.raises(ProtocolError, match="Killed"):
        old.fit(_parts())
    assert load_checkpoint(tmp_path / "server.ckpt")["round"] == 4
    with pytest.raises(ValidationError, match=r"seed: 4 → 5"):
        _model(random_state=5, epochs=3, checkpoint=tmp_path, resume=True).fit(_parts())
    resumed = _model(random_state=4, epochs=3, checkpoint=tmp_path, resume=True).fit(_parts())
    assert resumed.rounds_[0].round == 1 and len(resumed.rounds_) == len(whole.rounds_)
    np.testing.assert_array_equal(resumed.params_, whole.params_)


# ----------------------------------------------------------------------------- score


def test_score_is_the_accuracy_of_a_classifier_and_metrics_has_the_rest() -> None:
    from sklearn.metrics import accuracy_score

    X, y = _blobs(80, seed=9)
    model = _model().fit(_parts())
    score = model.score(X, y)
    metrics = model.metrics(X, y)
    assert type(score) is float and score == metrics["accuracy"]
    assert score == pytest.approx(accuracy_score(y, model.predict(X)), abs=1e-12)
    assert 0.0 < score < 1.0  # neither trivially right nor wrong on these rows
    assert set(metrics) == {"accuracy", "precision", "recall", "f1", "per_class_accuracy",
                            "confusion"}


def test_score_is_the_r2_of_a_regressor() -> None:
    from sklearn.metrics import r2_score

    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 6)).astype(np.float32)
    y = (X @ rng.normal(size=6) + 0.1 * rng.normal(size=120)).astype(np.float32)
    spec = ModelSpec(kind="linear", input_shape=(6,), n_outputs=1)
    model = FederatedModel(spec, FedAvg(local_steps=3, batch_size=10, lr=0.05),
                           epochs=3, task="regression", threads=1)
    model.fit([(X[:60], y[:60]), (X[60:100], y[60:100])])
    score = model.score(X[100:], y[100:])
    metrics = model.metrics(X[100:], y[100:])
    assert type(score) is float and score == metrics["r2"]
    assert set(metrics) == {"mse", "rmse", "mae", "r2"}
    assert score == pytest.approx(r2_score(y[100:], model.predict(X[100:])), rel=1e-5)
    assert score != pytest.approx(-metrics["mse"])  # R², not a loss
