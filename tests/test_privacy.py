"""Clipping, cryptographic Gaussian noise, distributed noise and the privacy accountant.

Reference values come from ``shared/MEASURED.md`` (dp-accounting 0.6); statistical
tolerances are chosen so that a correct implementation fails with negligible
probability.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys

import numpy as np
import pytest

from islands.errors import ValidationError
from islands.privacy import (
    PrivacyAccountant,
    calibrate_noise,
    clip_l2,
    distributed_noise_std,
    effective_noise_multiplier,
    gaussian_noise,
    mechanisms,
)
from islands.privacy import accountant as accountant_module
from islands.validation import check_float

DPSGD_RATE = 256 / 60000
DPSGD_STEPS = 14_062


def test_importing_the_package_does_not_import_dp_accounting() -> None:
    code = "import sys, islands.privacy; print('dp_accounting' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


# --------------------------------------------------------------------------- clipping


def test_clip_l2_scales_long_vectors_onto_the_ball() -> None:
    v = np.array([[3.0, 4.0], [0.0, 12.0]])  # norm 13
    clipped, factor = clip_l2(v, 1.3)
    assert factor == pytest.approx(0.1)
    assert clipped.shape == v.shape and clipped.dtype == np.float64
    assert np.linalg.norm(clipped) == pytest.approx(1.3, rel=1e-15)
    np.testing.assert_allclose(clipped, v * 0.1)
    assert v[0, 0] == 3.0  # the input is left alone


def test_clip_l2_returns_short_vectors_unchanged_as_a_copy() -> None:
    v = np.array([0.3, -0.4], dtype=np.float32)
    clipped, factor = clip_l2(v, 0.6)
    assert factor == 1.0 and clipped is not v
    np.testing.assert_array_equal(clipped, v.astype(np.float64))
    zero, factor = clip_l2(np.zeros(3), 1.0)
    assert factor == 1.0 and not zero.any()
    ints, _ = clip_l2([3, 4], 10)
    assert ints.dtype == np.float64


def test_clip_l2_does_not_overflow_on_huge_entries() -> None:
    clipped, factor = clip_l2(np.full(4, 1e308), 2.0)
    assert 0 < factor < 1
    assert np.linalg.norm(clipped) == pytest.approx(2.0)


@pytest.mark.parametrize("bound", [0.0, -1.0, math.nan, math.inf, True, "1"])
def test_clip_l2_rejects_bad_bounds(bound: object) -> None:
    with pytest.raises(ValidationError, match="'bound' parameter of clip_l2"):
        clip_l2(np.ones(3), bound)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_clip_l2_rejects_non_finite_vectors(bad: float) -> None:
    with pytest.raises(ValidationError, match="'vector' parameter of clip_l2"):
        clip_l2(np.array([1.0, bad]), 1.0)


# --------------------------------------------------------------------------- noise


def test_gaussian_noise_has_the_requested_scale_and_comes_from_the_csprng(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    z = gaussian_noise((400, 500), 2.5)
    assert z.shape == (400, 500) and z.dtype == np.float64
    # 200,000 samples: the sample std is within 1% of sigma with overwhelming probability
    assert abs(float(z.std()) / 2.5 - 1) < 0.01
    assert abs(float(z.mean())) < 0.05
    assert not np.array_equal(gaussian_noise(8, 1.0), gaussian_noise(8, 1.0))
    assert not gaussian_noise(5, 0.0).any()

    calls: list[tuple[object, float]] = []

    def spy(shape: object, sigma: float) -> np.ndarray:
        calls.append((shape, sigma))
        return np.zeros(3)

    monkeypatch.setattr(mechanisms, "csprng_normal", spy)
    gaussian_noise(3, 1.5)
    assert calls == [(3, 1.5)]


@pytest.mark.parametrize("sigma", [-0.1, math.nan, math.inf, None])
def test_gaussian_noise_rejects_bad_sigma(sigma: object) -> None:
    with pytest.raises(ValidationError, match="'sigma' parameter of gaussian_noise"):
        gaussian_noise(3, sigma)  # type: ignore[arg-type]


def test_distributed_noise_sums_to_at_least_the_central_noise() -> None:
    sigma, clip, t = 1.2, 0.5, 16
    std = distributed_noise_std(sigma, clip, t)
    assert std == pytest.approx(sigma * clip / 4)
    assert distributed_noise_std(sigma, clip, 1) == pytest.approx(sigma * clip)
    for survivors in (t, 2 * t):
        total = sum(gaussian_noise(50_000, std) for _ in range(survivors))
        expected = sigma * clip * math.sqrt(survivors / t)
        assert abs(float(total.std()) / expected - 1) < 0.02
        assert effective_noise_multiplier(sigma, t, survivors) >= sigma


def test_effective_noise_multiplier_after_dropouts() -> None:
    assert effective_noise_multiplier(1.0, 100, 70) == pytest.approx(0.8367, abs=1e-4)
    assert effective_noise_multiplier(1.1, 10, 10) == pytest.approx(1.1)
    assert effective_noise_multiplier(1.0, 10, 0) == 0.0


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: distributed_noise_std(-1.0, 1.0, 3), "noise_multiplier"),
        (lambda: distributed_noise_std(1.0, 0.0, 3), "clip"),
        (lambda: distributed_noise_std(1.0, 1.0, 0), "guaranteed"),
        (lambda: distributed_noise_std(1.0, 1.0, 2.0), "guaranteed"),
        (lambda: effective_noise_multiplier(math.nan, 3, 3), "noise_multiplier"),
        (lambda: effective_noise_multiplier(1.0, 0, 3), "guaranteed"),
        (lambda: effective_noise_multiplier(1.0, 3, -1), "survivors"),
    ],
)
def test_noise_helpers_name_bad_parameters(call: object, name: str) -> None:
    with pytest.raises(ValidationError, match=f"'{name}' parameter"):
        call()  # type: ignore[operator]


# --------------------------------------------------------------------------- accountant


@pytest.mark.parametrize(("method", "expected"), [("rdp", 2.597), ("pld", 2.391)])
def test_dpsgd_reference_epsilon(method: str, expected: float) -> None:
    acct = PrivacyAccountant(1.1, sampling_rate=DPSGD_RATE, delta=1e-5, method=method)
    assert acct.epsilon() == 0.0 and acct.spent() == (0.0, 1e-5)
    acct.step(DPSGD_STEPS)
    assert acct.steps == DPSGD_STEPS
    assert acct.epsilon() == pytest.approx(expected, abs=1e-2)
    assert acct.spent() == (acct.epsilon(), 1e-5)


@pytest.mark.parametrize(("method", "expected"), [("rdp", 4.045), ("pld", 3.731)])
def test_one_release_at_epsilon_one_reference_sigma(method: str, expected: float) -> None:
    sigma = calibrate_noise(1.0, 1e-5, 1, method=method)
    assert sigma == pytest.approx(expected, abs=1e-2)
    acct = PrivacyAccountant(sigma, method=method)
    acct.step()
    assert acct.epsilon() <= 1.0


@pytest.mark.parametrize(
    ("method", "rate", "steps"), [("rdp", 0.05, 200), ("rdp", 1.0, 30), ("pld", 1.0, 30)]
)
def test_calibrate_noise_round_trip(method: str, rate: float, steps: int) -> None:
    tol = 1e-3
    sigma = calibrate_noise(2.0, 1e-5, steps, sampling_rate=rate, method=method, tol=tol)
    acct = PrivacyAccountant(sigma, sampling_rate=rate, method=method)
    acct.step(steps)
    assert acct.epsilon() <= 2.0
    smaller = PrivacyAccountant(sigma - 2 * tol, sampling_rate=rate, method=method)
    smaller.step(steps)
    assert smaller.epsilon() > 2.0  # the smallest sigma, to within tol


def test_subsampling_amplifies_and_epsilon_grows_with_steps() -> None:
    full, sampled = PrivacyAccountant(2.0), PrivacyAccountant(2.0, sampling_rate=0.1)
    previous = 0.0
    for _ in range(3):
        full.step(5)
        sampled.step(5)
        assert 0.0 < sampled.epsilon() < full.epsilon()
        assert full.epsilon() > previous
        previous = full.epsilon()


def test_epsilon_is_cached_per_step_count(monkeypatch: pytest.MonkeyPatch) -> None:
    real = accountant_module._epsilon
    calls: list[int] = []

    def counting(sigma: float, rate: float, delta: float, steps: int, method: str) -> float:
        calls.append(steps)
        return real(sigma, rate, delta, steps, method)

    monkeypatch.setattr(accountant_module, "_epsilon", counting)
    acct = PrivacyAccountant(1.5)
    acct.step(4)
    for _ in range(3):
        acct.epsilon()
        acct.spent()
    assert not acct.would_exceed(100.0)  # computes 5 steps ...
    acct.step()
    acct.epsilon()  # ... which the next round reuses
    assert calls == [4, 5]


def test_would_exceed_stops_before_the_budget() -> None:
    acct = PrivacyAccountant(1.0, delta=1e-6)
    acct.step(3)
    now = acct.epsilon()
    after_one = PrivacyAccountant(1.0, delta=1e-6)
    after_one.step(4)
    next_eps = after_one.epsilon()
    assert now < next_eps
    assert not acct.would_exceed(next_eps)
    assert acct.would_exceed(next_eps - 1e-6)
    assert not acct.would_exceed(now, count=0)
    assert acct.would_exceed(next_eps, count=2)
    # a run that asks before every round ends at or below its budget
    budget, run = 10.0, PrivacyAccountant(1.0, delta=1e-6)
    while not run.would_exceed(budget):
        run.step()
    assert run.steps > 0 and run.epsilon() <= budget


def test_state_round_trip_through_json() -> None:
    acct = PrivacyAccountant(1.3, sampling_rate=0.02, delta=1e-6, method="rdp")
    acct.step(40)
    state = json.loads(json.dumps(acct.get_state()))
    resumed = PrivacyAccountant(1.3, sampling_rate=0.02, delta=1e-6, method="rdp")
    resumed.set_state(state)
    assert resumed.steps == 40
    assert resumed.epsilon() == acct.epsilon()
    other = PrivacyAccountant(1.2, sampling_rate=0.02, delta=1e-6, method="rdp")
    with pytest.raises(ValidationError, match="noise_multiplier"):
        other.set_state(state)
    with pytest.raises(ValidationError, match="method"):
        PrivacyAccountant(1.3, sampling_rate=0.02, delta=1e-6, method="pld").set_state(state)
    with pytest.raises(ValidationError, match="'state' parameter"):
        resumed.set_state({"steps": 3})
    with pytest.raises(ValidationError, match=r"\"state\['steps'\]\" parameter"):
        resumed.set_state({**state, "steps": -1})
    assert resumed.steps == 40


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"noise_multiplier": -1.0}, "noise_multiplier"),
        ({"noise_multiplier": math.inf}, "noise_multiplier"),
        ({"noise_multiplier": 1.0, "sampling_rate": 0.0}, "sampling_rate"),
        ({"noise_multiplier": 1.0, "sampling_rate": 1.5}, "sampling_rate"),
        ({"noise_multiplier": 1.0, "delta": 0.0}, "delta"),
        ({"noise_multiplier": 1.0, "delta": 1.0}, "delta"),
        ({"noise_multiplier": 1.0, "method": "moments"}, "method"),
    ],
)
def test_accountant_validation_names_the_parameter(kwargs: dict, name: str) -> None:
    with pytest.raises(ValidationError, match=f"'{name}' parameter of PrivacyAccountant"):
        PrivacyAccountant(**kwargs)


def test_accountant_method_validation() -> None:
    acct = PrivacyAccountant(1.0)
    with pytest.raises(ValidationError, match="'count' parameter"):
        acct.step(-1)
    with pytest.raises(ValidationError, match="'target_epsilon' parameter"):
        acct.would_exceed(-1.0)
    with pytest.raises(ValidationError, match="'count' parameter"):
        acct.would_exceed(1.0, count=1.5)  # type: ignore[arg-type]
    assert acct.steps == 0


@pytest.mark.parametrize(
    ("args", "kwargs", "name"),
    [
        ((0.0, 1e-5, 10), {}, "target_epsilon"),
        ((1.0, 0.0, 10), {}, "delta"),
        ((1.0, 1e-5, 0), {}, "steps"),
        ((1.0, 1e-5, 10), {"sampling_rate": 2.0}, "sampling_rate"),
        ((1.0, 1e-5, 10), {"method": "RDP"}, "method"),
        ((1.0, 1e-5, 10), {"tol": 0.0}, "tol"),
        ((5000.0, 1e-5, 1), {}, "target_epsilon"),  # so loose no sensible sigma is needed
    ],
)
def test_calibrate_noise_validation_names_the_parameter(
    args: tuple, kwargs: dict, name: str
) -> None:
    with pytest.raises(ValidationError, match=f"'{name}' parameter of calibrate_noise"):
        calibrate_noise(*args, **kwargs)


def test_privacy_profile_is_the_accountants_curve_at_every_epsilon() -> None:
    # δ(ε) from dp-accounting's PLD: decreasing in ε, and at the PLD accountant's ε for
    # δ = 1e-5 it is (about) 1e-5; the ε it returns is that accountant's, to discretisation.
    eps = np.linspace(0.0, 8.0, 81)
    deltas, at = accountant_module.privacy_profile(2.0, 0.05, 200, eps, 1e-5)
    assert deltas.shape == eps.shape and np.all(np.diff(deltas) <= 1e-15)
    assert deltas.min() >= 0.0 and deltas.max() <= 1.0
    acct = PrivacyAccountant(2.0, sampling_rate=0.05, delta=1e-5, method="pld")
    acct.step(200)
    assert at == pytest.approx(acct.epsilon(), abs=0.01)
    crossing = float(np.interp(at, eps, deltas))
    assert 0.5e-5 < crossing < 2e-5
    # unsampled: the Gaussian mechanism's exact profile (Balle and Wang), from above
    mu = math.sqrt(10) / 3.0
    normal = statistics.NormalDist()
    for e in (0.5, 1.0, 2.0):
        exact = normal.cdf(-e / mu + mu / 2) - math.exp(e) * normal.cdf(-e / mu - mu / 2)
        got = accountant_module.privacy_profile(3.0, 1.0, 10, [e], 1e-5)[0][0]
        assert exact - 1e-9 <= got <= exact + 5e-3 * exact + 1e-9
    with pytest.raises(ValidationError, match="'epsilons' parameter of privacy_profile"):
        accountant_module.privacy_profile(1.0, 1.0, 1, [-1.0], 1e-5)
    with pytest.raises(ValidationError, match="'sampling_rate' parameter of privacy_profile"):
        accountant_module.privacy_profile(1.0, 0.0, 1, [1.0], 1e-5)


def test_check_float_bounds_both_ends_and_words_the_interval() -> None:
    assert check_float(1.0, "q", "f", low=0.0, low_inclusive=False, high=1.0) == 1.0
    for value, expected in ((1.5, r"\(0, 1\]"), (0.0, r"\(0, 1\]")):
        with pytest.raises(ValidationError,
                           match=f"'q' parameter of f must be a float in {expected}"):
            check_float(value, "q", "f", low=0.0, low_inclusive=False, high=1.0)
    with pytest.raises(ValidationError, match=r"a float in \[0, 1\)"):
        check_float(1.0, "d", "f", low=0.0, high=1.0, high_inclusive=False)
    with pytest.raises(ValidationError, match=r"a float in \[0, inf\)"):
        check_float(-1.0, "x", "f", low=0.0)
