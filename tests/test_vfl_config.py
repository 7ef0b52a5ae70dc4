"""Vertical regression's one configuration: the estimators, job files and the federation
file's ``[vfl]`` section share every default and limit (issue 23, §1.8 rows 1-9)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.crypto import heu
from islands.errors import JobError, ValidationError
from islands.vfl import VerticalLinearRegression, VerticalLogisticRegression
from islands.vfl.config import VflConfig, draw_seed
from islands.vfl.job import parse_vertical_job

FED = "federation file f.toml [vfl]"
ESTIMATORS = {"linear": VerticalLinearRegression, "logistic": VerticalLogisticRegression}


def estimator_config(objective: str = "linear", **params: Any) -> VflConfig:
    """The configuration an estimator builds at fit (its seed drawn from random_state)."""
    return ESTIMATORS[objective](**params)._config()


def job_config(objective: str = "logistic", seed: int = 0, **model: Any) -> VflConfig:
    raw = {"name": "x", "kind": "vertical", "seed": seed, "model": {"kind": objective, **model}}
    return parse_vertical_job(raw).config()


def fed_config(objective: str = "logistic", **section: Any) -> VflConfig:
    return VflConfig.from_federation({"model": objective, **section}, FED)


# ------------------------------------------------------- the conflicts, one case each


@pytest.mark.parametrize("build", [estimator_config, job_config, fed_config])
def test_epochs_defaults_to_20_everywhere(build: Any) -> None:
    """Plan used to default to 10 epochs, the estimator and both files to 20."""
    assert build().epochs == 20 == build().plan().epochs


@pytest.mark.parametrize("build", [estimator_config, job_config, fed_config])
def test_tol_defaults_to_1e_4_and_none_can_be_written(build: Any) -> None:
    """Plan defaulted to None; files could not say None at all."""
    assert build().tol == 1e-4
    off = None if build is estimator_config else "none"
    assert build(tol=off).plan().tol is None


@pytest.mark.parametrize("build", [estimator_config, job_config, fed_config])
@pytest.mark.parametrize(("objective", "step"), [("linear", 0.05), ("logistic", 0.3)])
def test_the_learning_rate_default_depends_on_the_objective(build: Any, objective: str,
                                                           step: float) -> None:
    """Plan used 0.05 for both objectives."""
    config = build(objective)
    assert config.learning_rate is None and config.plan().learning_rate == step
    assert build(objective, learning_rate=0.7).plan().learning_rate == 0.7


def test_the_objective_comes_from_the_class_and_files_default_to_logistic() -> None:
    """Plan defaulted to linear, the files to logistic: the config has no default."""
    with pytest.raises(ValidationError, match="needs the 'objective' parameter"):
        VflConfig.build()
    assert parse_vertical_job({"name": "x", "kind": "vertical"}).config().objective == "logistic"
    assert VflConfig.from_federation({}, FED).objective == "logistic"
    assert estimator_config("logistic").objective == "logistic"
    with pytest.raises(JobError, match=r"\[vfl\]: 'model' must be 'linear' or 'logistic'; got"):
        VflConfig.from_federation({"model": "tree"}, FED)
    with pytest.raises(JobError, match=r"\[model\]: 'kind' must be 'linear' or 'logistic'"):
        job_config("tree")


@pytest.mark.parametrize("build", [estimator_config, job_config, fed_config])
def test_he_is_a_setting_everywhere(build: Any) -> None:
    """Only Plan had it before; the estimator and the files could not choose it.

    The default is now the secret-sharing engine; a scheme given alone selects HE, and
    engine='he' alone takes OU (the fastest scheme at the 2048-bit floor, issue 41).
    """
    config = build()
    assert (config.engine, config.he) == ("ss", None)
    assert (config.plan().engine, config.plan().he) == ("ss", None)
    assert build(he="none").plan().he == "none"
    assert build(he="paillier").plan().engine == "he"
    if heu.available() or build is not estimator_config:  # the estimator checks sf-heu
        assert build(he="ou").plan().he == "ou"
        assert build(engine="he").plan().he == "ou"
    with pytest.raises((ValidationError, JobError),
                       match="he='paillier' applies to engine='he'; with engine='ss' leave "
                             "he unset"):
        build(engine="ss", he="paillier")
    with pytest.raises((ValidationError, JobError), match=r"'engine' .*'ss' or 'he'"):
        build(engine="spdz")


@pytest.mark.parametrize("build", [estimator_config, job_config, fed_config])
def test_the_old_name_encryption_says_it_was_renamed(build: Any) -> None:
    with pytest.raises((ValidationError, JobError),
                       match=r"'encryption' was renamed to 'he' \('ou', 'paillier' or 'none'"):
        build(encryption="none")


def test_the_estimator_refuses_the_old_name_in_set_params_too() -> None:
    with pytest.raises(ValidationError, match=r"^VerticalLinearRegression: 'encryption' was "
                                              r"renamed to 'he'"):
        VerticalLinearRegression().set_params(encryption="none")
    with pytest.raises(TypeError, match="unexpected keyword argument 'encrypt'"):
        VerticalLinearRegression(encrypt="none")


def test_the_cleartext_baseline_trains_the_same_model() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 4))
    y = X @ [1.0, -1.0, 0.5, 2.0] + 0.3
    fits = [VerticalLinearRegression(he=e, key_bits=1024, insecure_keys=True, epochs=2,
                                     batch_size=20, random_state=1).fit(X[:, :2], X[:, 2:], y)
            for e in ("none", "paillier")]
    np.testing.assert_array_equal(fits[0].coef_b_, fits[1].coef_b_)  # same integer arithmetic
    np.testing.assert_array_equal(fits[0].coef_a_, fits[1].coef_a_)
    # in the clear: no key, and no ciphertext of 2 x 1024 bits per value on the wire
    assert fits[0].transcript_.total_bytes * 5 < fits[1].transcript_.total_bytes


def test_seed_random_state_is_the_federation_files_drawn_seed() -> None:
    """The federation file used its seed raw, the estimator and job drew one from theirs."""
    assert fed_config().seed == 0 and fed_config(seed=7).seed == 7
    assert estimator_config(random_state=5).seed == draw_seed(5, "x")
    assert job_config(seed=5).seed == draw_seed(5, "x")
    assert (estimator_config("logistic", random_state=5).plan()
            == job_config(seed=5).plan() == fed_config(seed=draw_seed(5, "x")).plan())


@pytest.mark.parametrize("bits", [1100, 768, 17408, 2048.0, 1024, 1792])
def test_key_bits_is_paillier_own_rule_everywhere(bits: Any) -> None:
    """The estimator took 1100 (keygen failed inside the run); the limit is Paillier's own,
    with the 2048-bit floor: 1024 and 1792 need insecure_keys."""
    rule = (r"an int in \[2048, 16384\] and a multiple of 256 \(from 1024 only with "
            r"insecure_keys, for tests\)")
    with pytest.raises(ValidationError,
                       match=r"The 'key_bits' parameter of VerticalLinearRegression must be "
                             + rule + r"\. Got "):
        estimator_config(key_bits=bits)
    for build in (job_config, fed_config):
        with pytest.raises(JobError, match=r"'key_bits' must be " + rule + "; got"):
            build(key_bits=bits)
    assert fed_config(key_bits=16384).key_bits == 16384


@pytest.mark.parametrize(("key", "bad", "limit"), [("feature_bits", 23, "[1, 22]"),
                                                   ("score_bits", 33, "[1, 32]"),
                                                   ("feature_bits", 0, "[1, 22]")])
def test_precision_bounds_are_checked_everywhere(key: str, bad: int, limit: str) -> None:
    """The job file checked only >= 1 and the federation file nothing: the run failed later."""
    with pytest.raises(ValidationError, match=rf"The '{key}' parameter of "
                                              rf"VerticalLogisticRegression must be an int in "
                                              rf"\{limit[:-1]}\]\. Got {bad} instead\."):
        estimator_config("logistic", **{key: bad})
    for build in (job_config, fed_config):
        with pytest.raises(JobError, match=rf"'{key}' must be an int in \{limit[:-1]}\]; "
                                           rf"got {bad}"):
            build(**{key: bad})


@pytest.mark.parametrize(("key", "bad"), [("learning_rate", 2e6), ("lam", 1e7),
                                          ("learning_rate", 0), ("lam", -0.1)])
def test_step_and_penalty_are_at_most_1e6_in_the_standard_message(key: str, bad: float) -> None:
    """The estimator reported the 1e6 bound in Plan's own words ("VerticalLinear...: ...")."""
    with pytest.raises(ValidationError, match=rf"^The '{key}' parameter of "
                                              r"VerticalLinearRegression must be a float in "
                                              r"[\(\[]0, 1e6\]"):
        estimator_config(**{key: bad})
    for build in (job_config, fed_config):
        with pytest.raises(JobError, match=rf"'{key}' must be a float in [\(\[]0, 1e6\]"):
            build(**{key: bad})


# ------------------------------------------------------------------ the readers


def test_the_federation_section_takes_every_setting_and_names_bad_keys() -> None:
    config = VflConfig.from_federation(
        {"model": "linear", "learning_rate": 0.1, "lam": 0.5, "epochs": 3, "batch_size": 64,
         "seed": 9, "tol": "none", "key_bits": 3072, "djn": False, "feature_bits": 12,
         "score_bits": 30, "max_peer_size": 500, "max_peer_ratio": 2.0,
         "he": "paillier"}, FED)
    assert (config.key_bits, config.djn, config.max_peer_size) == (3072, False, 500)
    assert config.plan() == VflConfig.build(
        None, objective="linear", learning_rate=0.1, lam=0.5, epochs=3, batch_size=64, seed=9,
        tol=None, feature_bits=12, score_bits=30, key_bits=3072, djn=False,
        he="paillier").plan()
    with pytest.raises(JobError, match=r"\[vfl\]: unknown key\(s\) \['objective'\]; allowed: "
                                       r"\[.*'model'"):
        VflConfig.from_federation({"objective": "linear"}, FED)
    with pytest.raises(JobError, match=r"\[vfl\]: 'seed' must be an int in \[0, inf\); got -1"):
        VflConfig.from_federation({"seed": -1}, FED)
    with pytest.raises(JobError, match=r"'tol' must be a float in \(0, inf\), or None \(in "
                                       r"files: \"none\"\)"):
        VflConfig.from_federation({"tol": 0}, FED)
    with pytest.raises(JobError, match=r"'djn' must be a bool; got 1"):
        VflConfig.from_federation({"djn": 1}, FED)


def test_the_estimator_messages_are_the_standard_ones() -> None:
    model = VerticalLinearRegression(epochs=0)
    with pytest.raises(ValidationError, match=r"^The 'epochs' parameter of "
                                              r"VerticalLinearRegression must be an int in "
                                              r"\[1, inf\)\. Got 0 instead\.$"):
        model.fit(np.ones((4, 1)), np.ones((4, 1)), np.ones(4))
    with pytest.raises(ValidationError, match=r"The 'he' parameter of "
                                              r"VerticalLogisticRegression must be 'ou', "
                                              r"'paillier' or 'none' \(engine='he' only\), "
                                              r"or None\. Got 'rsa' instead\."):
        estimator_config("logistic", he="rsa")
    with pytest.raises(ValidationError, match="VerticalLinearRegression has no parameter "
                                              "'objective'"):
        VerticalLinearRegression().set_params(objective="logistic")


def test_estimator_parameters_are_the_config_fields_and_the_runtime_ones() -> None:
    for cls in ESTIMATORS.values():
        names = set(cls._param_names())
        assert names == (set(VflConfig.model_fields) - {"objective", "seed"}) | set(cls.runtime)
        defaults = cls._defaults()
        for name, field in VflConfig.model_fields.items():
            if name in names:
                assert defaults[name] == field.default, name
    assert repr(VerticalLogisticRegression(epochs=3)) == "VerticalLogisticRegression(epochs=3)"


def test_a_generator_random_state_is_drawn_from_once_per_fit() -> None:
    rng, twin = np.random.default_rng(4), np.random.default_rng(4)
    X = np.random.default_rng(0).normal(size=(40, 2))
    model = VerticalLinearRegression(he="none", epochs=1, batch_size=20,
                                     random_state=rng).fit(X[:, :1], X[:, 1:], X[:, 0])
    assert model.plan_.seed == draw_seed(twin, "x") and model.config_.plan() == model.plan_
    assert rng.integers(1 << 30) == twin.integers(1 << 30)  # both streams advanced once


def test_the_estimator_and_the_job_file_train_with_one_plan() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3))
    y = (X @ [1.0, -1.0, 2.0] > 0).astype(int)
    settings = {"learning_rate": 0.2, "epochs": 2, "batch_size": 30, "key_bits": 1024,
                "insecure_keys": True}
    model = VerticalLogisticRegression(random_state=11, he="none", **settings)
    model.fit(X[:, :1], X[:, 1:], y)
    job = parse_vertical_job({"name": "x", "kind": "vertical", "seed": 11,
                              "model": {"kind": "logistic", "he": "none", **settings}})
    assert job.config() == model.config_ and job.config().plan() == model.plan_


@pytest.mark.parametrize(("line", "said"), [
    ("feature_bits = 30", "[model]: 'feature_bits' must be an int in [1, 22]; got 30"),
    ("key_bits = 1100", "[model]: 'key_bits' must be an int in [2048, 16384] and a multiple "
                        "of 256 (from 1024 only with insecure_keys, for tests); got 1100"),
    # the 2048-bit floor: 1024 needs insecure_keys = true
    ("key_bits = 1024", "[model]: 'key_bits' must be an int in [2048, 16384] and a multiple "
                        "of 256 (from 1024 only with insecure_keys, for tests); got 1024"),
    ("tol = 0", "[model]: 'tol' must be a float in (0, inf), or None"),
])
def test_islands_run_refuses_a_bad_model_setting_before_training(tmp_path: Path, line: str,
                                                                 said: str) -> None:
    """A user runs ``islands run`` on a job file with a bad [model] value: one line naming
    the file, the section, the key and the limit, and nothing written."""
    job = tmp_path / "job.toml"
    job.write_text(f'name = "bc"\nkind = "vertical"\n[data]\nname = "breast_cancer"\n'
                   f'[model]\nkind = "logistic"\n{line}\n')
    done = subprocess.run([sys.executable, "-c", "from islands.cli import main; main()",
                           "run", str(job), "--output", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "COLUMNS": "400"})
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, text  # a bad job file, as for every job kind
    assert f"job file {job} {said}" in text, text
    assert "Traceback" not in text and not (tmp_path / "out").exists()
