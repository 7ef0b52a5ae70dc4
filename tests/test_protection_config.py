"""The protections' one configuration each: classes, job files and federation files agree."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from islands.aggregation import (
    AdditiveSharing,
    CKKSAggregator,
    ClientDP,
    PaillierAggregator,
    SampleDP,
    SecureAggregation,
)
from islands.aggregation.config import SECTIONS
from islands.aggregation.protect import Protection
from islands.errors import JobError, ValidationError
from islands.hfl.job import parse_job
from islands.hfl.spec import hfl_training

CLASSES = {"secagg": SecureAggregation, "additive": AdditiveSharing, "ckks": CKKSAggregator,
           "paillier": PaillierAggregator, "dp": ClientDP, "dp-sgd": SampleDP}

JOB: dict[str, Any] = {
    "data": {"name": "digits"}, "partition": {"kind": "iid", "clients": 3},
    "model": {"kind": "linear"}, "strategy": {"name": "fedavg", "local_steps": 1},
}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_class_takes_its_defaults_from_its_configuration(name: str) -> None:
    params = inspect.signature(CLASSES[name].__init__).parameters
    config = SECTIONS[name]
    for field, info in config.model_fields.items():
        assert params[field].default == info.default, (name, field)
    # the class's other parameters are not protection settings a file can set
    assert set(params) - set(config.model_fields) <= {"self", "inner", "timeout"}


@pytest.mark.parametrize(("name", "key", "value", "expected"), [
    ("secagg", "threshold", 1, "an int >= 2 or a fraction in [0.5, 1)"),
    ("secagg", "threshold", 0.3, "an int >= 2 or a fraction in [0.5, 1)"),
    ("secagg", "frac_bits", 60, "an int in [8, 48]"),
    ("additive", "min_clients", 1, "an int >= 2"),
    ("paillier", "key_bits", 1024, "an int >= 2048"),
    ("dp", "clip", -1.0, "a float in (0, inf)"),
    ("dp", "noise", "central", "one of ('local', 'distributed')"),
    ("dp", "delta", 1.0, "a float in (0, 1)"),
    ("dp-sgd", "noise_multiplier", "1.0", "a float in (0, inf)"),
    ("dp-sgd", "accountant", "gdp", "'rdp' or 'pld'"),
])
def test_python_job_file_and_federation_file_refuse_a_value_alike(
        name: str, key: str, value: object, expected: str) -> None:
    with pytest.raises(ValidationError, match=rf"'{key}' parameter of \w+ must be "
                                              + re.escape(expected)):
        CLASSES[name](**{key: value})
    raw = {**JOB, "protect": [name], name: {key: value}}
    with pytest.raises(JobError) as job_error:
        parse_job(raw, source="j.toml")
    assert f"job file j.toml [{name}]: '{key}' must be {expected}" in str(job_error.value)
    options = {"server": "s", "features": 64, "classes": 10, "model": {"kind": "linear"},
               "strategy": {"name": "fedavg"}, "protect": [name], name: {key: value}}
    with pytest.raises(JobError) as fed_error:
        hfl_training(options, "federation file f.toml [hfl]", ("s", "a", "b", "c"))
    assert f"[hfl] [{name}]: '{key}' must be {expected}" in str(fed_error.value)


def test_a_section_names_its_own_keys_and_the_protections_are_one_list() -> None:
    with pytest.raises(JobError, match=r"\[secagg\]: unknown key\(s\) \['treshold'\]; "
                                       r"allowed: \['frac_bits', 'max_abs', 'min_clients', "
                                       r"'threshold'\]"):
        parse_job({**JOB, "protect": ["secagg"], "secagg": {"treshold": 0.6}}, source="j")
    with pytest.raises(JobError, match="'protect' must be a list of names among"):
        parse_job({**JOB, "protect": "secagg"}, source="j")
    with pytest.raises(JobError, match=r"\[chaos\] must be a section"):
        parse_job({**JOB, "protect": ["secagg", "chaos"], "chaos": 1}, source="j")


def test_settings_that_only_conflict_together_are_refused_when_the_file_is_read() -> None:
    with pytest.raises(JobError, match="noise='distributed'"):
        parse_job({**JOB, "protect": ["dp"], "dp": {"noise": "distributed"}}, source="j")
    with pytest.raises(JobError, match="chaos permutation does not hide"):
        parse_job({**JOB, "protect": ["chaos"]}, source="j")


def test_the_job_keeps_the_typed_protection_and_echoes_the_file() -> None:
    raw = {**JOB, "protect": ["secagg", "dp"], "secagg": {"threshold": 3},
           "dp": {"clip": 2.0, "noise": "distributed"}}
    job = parse_job(raw, source="j.toml")
    assert job.protect == ["secagg", "dp"]
    assert job.protection == Protection.build(["secagg", "dp"], {
        "secagg": {"threshold": 3}, "dp": {"clip": 2.0, "noise": "distributed"}})
    echo = job.to_dict()
    assert echo["protect"] == ["secagg", "dp"]
    assert echo["secagg"] == {"threshold": 3}
    assert echo["dp"] == {"clip": 2.0, "noise": "distributed"}
    assert list(echo)[-2:] == ["secagg", "dp"]
    agg = job.protection.aggregator()
    assert isinstance(agg, ClientDP) and agg.clip == 2.0 and agg.noise == "distributed"
    assert isinstance(agg.inner, SecureAggregation) and agg.inner.threshold == 3
    assert job.protection.sample_dp() is None


def test_the_docs_table_lists_every_setting_with_its_default() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "hfl.md").read_text("utf-8")
    for name, config in SECTIONS.items():
        for key, info in config.model_fields.items():
            default = info.default
            shown = ("required" if info.is_required() else "unset" if default is None
                     else f"`{str(default).lower()}`"
                     if isinstance(default, bool) else f"`{default!r}`".replace("'", '"'))
            row = f"| `[{name}]` | `{key}` | {shown} |"
            assert row in text, row
