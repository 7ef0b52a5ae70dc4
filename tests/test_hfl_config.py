"""HflConfig: one default and one constraint per horizontal-FL setting, for every reader."""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pytest

from islands.errors import JobError, ValidationError
from islands.hfl.config import (
    ContributionConfig,
    ContributionSettings,
    HflConfig,
    ModelConfig,
    infer_task,
    strategy_config,
)
from islands.hfl.contribution import Contribution
from islands.hfl.contribution.game import WEIGHTINGS
from islands.hfl.estimator import FederatedModel
from islands.hfl.job import parse_job

ROOT = Path(__file__).resolve().parents[1]
BASE: dict[str, object] = {"data": {"name": "digits"}, "partition": {"kind": "iid", "clients": 2},
                           "model": {"kind": "mlp"}, "strategy": {"name": "fedavg"}}


def test_every_example_job_still_parses_in_a_fresh_process() -> None:
    # the way a user runs them: a new interpreter, each file through load_job
    code = ("import sys, pathlib\nfrom islands.hfl.job import load_job\n"
            "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.toml')):\n"
            "    if not p.name.startswith(('vfl-', 'secureboost-')):\n"
            "        print(p.name, load_job(p).strategy['name'])\n")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "examples")], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    assert len([line for line in out if line]) >= 2


def test_task_is_inferred_from_the_data_set_else_classification() -> None:
    assert infer_task(None, "diabetes") == "regression"
    assert infer_task(None, "digits") == infer_task(None) == "classification"
    assert parse_job({**BASE, "data": {"name": "diabetes"},
                      "model": {"kind": "linear"}}).task == "regression"
    assert parse_job(BASE).task == "classification"


def test_concurrency_all_in_a_file_means_every_client() -> None:
    assert parse_job({**BASE, "concurrency": "all"}).concurrency is None
    assert HflConfig.build(None, concurrency=None).concurrency is None
    with pytest.raises(JobError, match=r"'concurrency' must be an int >= 1, or None "
                                       r"\(in files: \"all\"\); got 0"):
        parse_job({**BASE, "concurrency": 0})


def test_estimator_and_file_share_defaults_and_limits() -> None:
    sig = inspect.signature(FederatedModel)
    cfg = HflConfig()
    for name in ("epochs", "eval_fraction", "concurrency", "timeout", "backend",
                 "ray_address"):
        assert sig.parameters[name].default == getattr(cfg, name), name
    assert sig.parameters["random_state"].default == cfg.seed  # files' seed is random_state
    job = parse_job(BASE)
    assert (job.epochs, job.seed, job.eval_fraction, job.concurrency, job.timeout) == (
        cfg.epochs, cfg.seed, cfg.eval_fraction, cfg.concurrency, cfg.timeout)
    with pytest.raises(ValidationError, match=r"'timeout' parameter of FederatedModel must be "
                                              r"a float in \(0, inf\)\. Got -1 instead"):
        HflConfig.build("FederatedModel", timeout=-1)
    with pytest.raises(JobError, match=r"'timeout' must be a float in \(0, inf\); got -1"):
        parse_job({**BASE, "timeout": -1})
    with pytest.raises(JobError, match="'epochs' must be an int >= 1; got True"):
        parse_job({**BASE, "epochs": True})


def test_model_sizes_default_to_model_spec_s() -> None:
    pytest.importorskip("torch")
    from islands.hfl.torch.models import ModelSpec

    spec = ModelConfig(kind="cnn").spec((1, 28, 28), 10)
    assert spec == ModelSpec("cnn", (1, 28, 28), 10)
    assert ModelConfig.from_table({"kind": "mlp", "hidden": [8, 4]}, "m").spec(
        (3,), 2).hidden == (8, 4)
    with pytest.raises(JobError, match=r"\[model\]: 'channels' must be two ints >= 1; got \[4\]"):
        parse_job({**BASE, "model": {"kind": "cnn", "channels": [4]}})


def test_strategies_are_chosen_by_name_and_keep_their_class_defaults() -> None:
    cfg = strategy_config({"name": "fedprox", "mu": 0.1, "batch_size": "full"}, "s")
    assert cfg.kwargs() == {"mu": 0.1, "batch_size": None}
    with pytest.raises(JobError, match=r"'batch_size' must be an int >= 1 \('full' is for "):
        strategy_config({"name": "apfl", "batch_size": "full"}, "s")
    with pytest.raises(JobError, match=r"s \['mu'\] do not apply to 'fedavg'"):
        strategy_config({"name": "fedavg", "mu": 1.0}, "s")


def test_contribution_has_one_set_of_constraints() -> None:
    val = (np.zeros((2, 3)), np.zeros(2, dtype=np.int64))
    # the config's copy of the weightings is the game's
    assert typing.get_args(ContributionSettings.model_fields["weighting"].annotation) == WEIGHTINGS
    for bad in ({"tolerance": 0.0}, {"min_permutations": 20, "max_permutations": 10},
                {"methods": ["gtg", "gtg"]}, {"weighting": "equal"}):
        name = next(iter(bad)) if "max_permutations" not in bad else "max_permutations"
        with pytest.raises(ValidationError, match=f"'{name}' parameter of Contribution"):
            Contribution(val, **bad)  # type: ignore[arg-type]
        with pytest.raises(JobError, match=f"'{name}'"):
            parse_job({**BASE, "contribution": bad})
    # files used to accept tolerance = 0 (then the run failed): the message says so
    with pytest.raises(JobError, match="files accepted 0"):
        parse_job({**BASE, "contribution": {"tolerance": 0}})
    cfg = ContributionConfig.from_table({"tolerance": 0.01, "seed": 3}, "c")
    made = Contribution(val, **cfg.settings())
    assert (made.tolerance, made.seed, made.methods) == (0.01, 3, None)  # decided per run


def test_the_federation_section_builds_the_same_configs() -> None:
    from islands.hfl.spec import _settings

    where = "federation file f.toml [hfl]"
    base = {"server": "s", "model": {"kind": "mlp"}, "strategy": {"name": "fedavg"}}
    fed = _settings({**base, "features": [1, 8, 8], "classes": 3, "concurrency": "all"},
                    where, ("s", "a", "b"))
    assert (fed.shape, fed.classes, fed.checkpoint, fed.clients) == ((1, 8, 8), 3, True,
                                                                    ("a", "b"))
    assert fed.training.task == "classification" and fed.run.concurrency is None
    assert _settings({**base, "features": 4, "task": "regression"}, where,
                     ("s", "a", "b")).training.task == "regression"
    for bad, message in [({"features": [], "classes": 3}, "'features' must be the input size"),
                         ({"features": True, "classes": 3}, "'features' must be the input"),
                         ({"features": 4, "classes": 1}, "'classes' must be an int >= 2"),
                         ({"features": 4}, "a classification task needs 'classes'"),
                         ({"features": 4, "classes": 3, "model": {"kind": "mlp", "hidden": [0]}},
                          r"f\.toml \[hfl\] \[model\]: 'hidden' must be a list of ints >= 1")]:
        with pytest.raises(JobError, match=message):
            _settings({**base, **bad}, where, ("s", "a", "b"))


def test_federated_model_follows_scikit_learns_parameter_conventions() -> None:
    from sklearn.base import clone

    from islands.hfl.strategy import FedAvg

    model = FederatedModel("spec", FedAvg(lr=0.2), epochs=3, concurrency=None)
    params = model.get_params()
    assert params["epochs"] == 3 and params["concurrency"] is None
    assert set(params) == set(inspect.signature(FederatedModel).parameters)
    copy = clone(model)
    assert copy is not model and copy.get_params()["epochs"] == 3
    assert model.set_params(random_state=4) is model and model.random_state == 4
    with pytest.raises(ValidationError, match="FederatedModel has no parameter 'seeds'"):
        model.set_params(seeds=4)
    assert repr(model).startswith("FederatedModel(model='spec', strategy=FedAvg(")
    assert "epochs=3" in repr(model) and "timeout" not in repr(model)
