"""The configuration base: one declaration gives the standard messages in Python and in files."""

from __future__ import annotations

import hashlib
import math
from typing import Any, ClassVar

import numpy as np
import pytest
from pydantic import model_validator

from islands.config import ProtocolConfig, RunSettings, check_same_plan, plan_text, setting
from islands.errors import JobError, ProtocolError, ValidationError


class Demo(ProtocolConfig):
    OWNER: ClassVar[str] = "FederatedDemo"

    n_components: int = setting(..., "an int in [1, inf)", "Components kept.", ge=1)
    epsilon: float | None = setting(None, "a float in (0, inf)", "Privacy budget.", gt=0)
    delta: float = setting(1e-5, "a float in (0, 1)", "Privacy slack.", gt=0, lt=1,
                           changed="files accepted 1 before")
    scale: float = setting(1.0, "a float in (0, inf]", "May be infinite.", gt=0,
                           allow_inf_nan=True)
    mode: str = setting("plain", "'plain' or 'secure'", "How.", pattern="^(plain|secure)$")
    shape: tuple[int, ...] = setting((), "a tuple of ints", "Sizes.")
    secure: bool = setting(False, "a bool", "Protect the sums.")

    @model_validator(mode="after")
    def _secure_needs_epsilon(self) -> Demo:
        if self.mode == "secure" and self.epsilon is None:
            raise ValidationError("FederatedDemo: mode 'secure' needs 'epsilon'")
        return self


def message(**values: Any) -> str:
    with pytest.raises(ValidationError) as info:
        Demo.build(**values)
    return str(info.value)


def test_the_standard_message_names_the_parameter_owner_limit_and_value() -> None:
    assert message(n_components=2, epsilon=-1) == (
        "The 'epsilon' parameter of FederatedDemo must be a float in (0, inf). "
        "Got -1 instead.")
    assert message(n_components=0) == (
        "The 'n_components' parameter of FederatedDemo must be an int in [1, inf). "
        "Got 0 instead.")
    with pytest.raises(ValidationError, match="parameter of FederatedPCA must"):
        Demo.build("FederatedPCA", n_components=2, epsilon=-1)
    # values are checked in declaration order: the first refused one is reported
    assert "'n_components'" in message(n_components=0, epsilon=-1)


def test_bools_strings_and_floats_are_not_ints() -> None:
    assert "Got True instead" in message(n_components=True)
    assert "Got np.True_ instead" in message(n_components=np.True_)
    assert "Got 2.0 instead" in message(n_components=2.0)
    assert "Got '2' instead" in message(n_components="2")
    assert "'epsilon'" in message(n_components=2, epsilon=True)
    assert "'secure'" in message(n_components=2, secure=1)


def test_numpy_scalars_count_as_the_number_they_hold() -> None:
    cfg = Demo.build(n_components=np.int64(3), epsilon=np.float32(0.5), secure=np.True_,
                     shape=(np.int32(2), 3))
    assert cfg.n_components == 3 and type(cfg.n_components) is int
    assert cfg.epsilon == 0.5 and type(cfg.epsilon) is float
    assert cfg.secure is True and cfg.shape == (2, 3)
    # the message shows the value as the caller passed it
    assert "Got np.int64(0) instead" in message(n_components=np.int64(0))
    # an int is a valid float
    assert Demo.build(n_components=1, epsilon=2).epsilon == 2.0


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, np.float64("nan")])
def test_inf_and_nan_are_refused_unless_the_field_allows_them(bad: float) -> None:
    assert "'epsilon' parameter" in message(n_components=1, epsilon=bad)
    assert "'delta' parameter" in message(n_components=1, delta=bad)
    assert Demo.build(n_components=1, scale=math.inf).scale == math.inf


def test_unknown_names_and_cross_checks() -> None:
    assert message(n_components=1, epsilom=1.0) == (
        "FederatedDemo has no parameter 'epsilom'; valid: ['delta', 'epsilon', "
        "'mode', 'n_components', 'scale', 'secure', 'shape']")
    # a check over several settings raises its own error unchanged
    assert message(n_components=1, mode="secure") == (
        "FederatedDemo: mode 'secure' needs 'epsilon'")
    assert Demo.build(n_components=1, mode="secure", epsilon=1.0).mode == "secure"


def test_frozen_and_replace_revalidates() -> None:
    cfg = Demo.build(n_components=2)
    with pytest.raises(ValueError, match="frozen"):
        cfg.n_components = 3  # type: ignore[misc]
    assert cfg.replace(n_components=3).n_components == 3
    assert cfg.n_components == 2
    with pytest.raises(ValidationError, match=r"'n_components' parameter .* Got -3 instead"):
        cfg.replace(n_components=-3)
    with pytest.raises(ValidationError, match="needs 'epsilon'"):
        cfg.replace(mode="secure")
    with pytest.raises(ValidationError, match="has no parameter 'colour'"):
        cfg.replace(colour=1)


def test_digest_is_stable_and_tells_settings_apart() -> None:
    a = Demo.build(n_components=2, epsilon=1.0, shape=(2, 3))
    b = Demo.build(epsilon=1, shape=(np.int64(2), 3), n_components=np.int64(2))
    assert a.digest() == b.digest()
    assert len(a.digest()) == 64 and int(a.digest(), 16) >= 0
    assert a.replace(epsilon=1.0 + 1e-12).digest() != a.digest()
    assert a.replace(shape=(3, 2)).digest() != a.digest()
    assert a.replace(scale=math.inf).digest() != a.digest()
    # canonical JSON of the settings, so the digest is the same in every process
    canonical = ('{"delta":1e-05,"epsilon":null,"mode":"plain","n_components":1,'
                 '"scale":1.0,"secure":false,"shape":[]}')
    assert Demo.build(n_components=1).digest() == hashlib.sha256(canonical.encode()).hexdigest()


def test_from_table_gives_the_file_messages() -> None:
    where = "federation file f.toml [demo]"
    cfg = Demo.from_table({"n_components": 2, "epsilon": 1}, where)
    assert cfg == Demo.build(n_components=2, epsilon=1.0)
    cases = [
        ({"n_components": 2, "epsilon": -1},
         f"{where}: 'epsilon' must be a float in (0, inf); got -1"),
        ({"n_components": 2.0}, f"{where}: 'n_components' must be an int in [1, inf); got 2.0"),
        ({"n_components": True}, f"{where}: 'n_components' must be an int in [1, inf); got True"),
        ({"n_components": 1, "delta": 1},
         f"{where}: 'delta' must be a float in (0, 1); got 1 (files accepted 1 before)"),
        ({"n_components": 1, "colour": 1, "size": 2},
         f"{where}: unknown key(s) ['colour', 'size']; allowed: ['delta', 'epsilon', 'mode', "
         "'n_components', 'scale', 'secure', 'shape']"),
        ({}, f"{where}: missing key 'n_components'"),
        ({"n_components": 1, "mode": "secure"},
         f"{where}: FederatedDemo: mode 'secure' needs 'epsilon'"),
    ]
    for table, expected in cases:
        with pytest.raises(JobError) as info:
            Demo.from_table(table, where)
        assert str(info.value) == expected
    with pytest.raises(JobError, match=r"\[demo\]: 'seed' is gone; use 'noise_seed'"):
        Demo.from_table({"n_components": 1, "seed": 3}, where,
                        removed={"seed": "is gone; use 'noise_seed'"})


def test_run_settings() -> None:
    assert RunSettings.build("SwarmCCA") == RunSettings(timeout=600.0, keep_payloads=False)
    with pytest.raises(ValidationError, match="'timeout' parameter of SwarmCCA must be a float"
                       r" in \(0, inf\). Got 0 instead"):
        RunSettings.build("SwarmCCA", timeout=0)
    with pytest.raises(ValidationError, match="'keep_payloads' parameter of X must be a bool"):
        RunSettings.build("X", keep_payloads="yes")


def test_a_missing_required_setting_is_named() -> None:
    assert message(epsilon=0.5) == (
        "FederatedDemo needs the 'n_components' parameter (an int in [1, inf))")


def test_a_plan_that_differs_is_named_setting_by_setting() -> None:
    mine = Demo.build(n_components=2, epsilon=1.0).plan_text()
    theirs = Demo.build(n_components=3, epsilon=1.0).plan_text()
    assert mine == plan_text({**Demo.build(n_components=2, epsilon=1.0).model_dump()})
    check_same_plan(mine, mine, party="A", peer="B")
    # the same settings written another way are the same plan
    check_same_plan(mine, " " + mine.replace(",", ", "), party="A", peer="B")
    with pytest.raises(ValidationError, match=r"party 'A': its plan differs from 'B''s "
                                              r"\(mine, theirs\): \{'n_components': \(2, 3\)\}"):
        check_same_plan(mine, theirs, party="A", peer="B")


@pytest.mark.parametrize("bad", [{"n_components": 2}, b"{}", "not json", "[1, 2]",
                                 "{" + " " * (1 << 16) + "}", None])
def test_a_malformed_plan_is_a_protocol_error_naming_the_peer(bad: object) -> None:
    mine = Demo.build(n_components=2).plan_text()
    with pytest.raises(ProtocolError, match="'B' sent a malformed plan") as info:
        check_same_plan(mine, bad, party="A", peer="B")
    assert info.value.party == "A" and info.value.step == "plan"
