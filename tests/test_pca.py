"""Federated PCA: exactness, noise calibration, masks, messages, streaming, bad input, audit."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
import secrets
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.linalg import subspace_angles
from sklearn.decomposition import PCA

from islands.config import RunSettings
from islands.crypto import decode_fixed
from islands.crypto.masking import generate_key, pairwise_mask
from islands.data.sources import open_source
from islands.errors import JobError, ProtocolError, ValidationError
from islands.pca import FederatedPCA, maths, protocol
from islands.pca.audit import audit_pca
from islands.pca.config import PcaSettings
from islands.pca.protocol import (
    MOMENT_FRAC_BITS,
    Components,
    Mean,
    PcaConfig,
    publisher,
    site,
)
from islands.runtime import run_local


def sites(n_sites: int = 3, rows: int = 60, d: int = 6, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((d, d)) * np.linspace(3, 0.3, d)[:, None]
    return [rng.standard_normal((rows + 7 * i, d)) @ mix + 2.0 for i in range(n_sites)]


def test_plain_equals_pooled_pca() -> None:
    parts = sites(4, rows=200, d=8)
    model = FederatedPCA(3).fit(parts)
    ref = PCA(3).fit(np.vstack(parts))
    # both are backward-stable eigen/SVD solutions of the same covariance
    assert np.max(subspace_angles(model.components_.T, ref.components_.T)) <= 1e-9
    np.testing.assert_allclose(model.mean_, ref.mean_, rtol=1e-12)
    n = model.n_samples_
    np.testing.assert_allclose(model.explained_variance_ * n / (n - 1),
                               ref.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(np.abs(model.published_), np.abs(ref.transform(np.vstack(parts))),
                               rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("mode", ["central", "secure", "dpdispca"])
def test_noise_is_calibrated_to_tau(mode: str) -> None:
    parts = sites(3, rows=20, d=6)
    pooled = np.vstack(parts)
    unit_sum = maths.normalize_rows(pooled).sum(axis=0)
    noise, mean_noise = [], []
    tau = noise_std = mean_noise_std = None
    for _ in range(200):
        model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode=mode).fit(parts)
        # the matrix is centred on the released (noisy) mean, so the truth is per fit
        noise.append(maths.upper_of(model.noisy_moment_ - _noiseless_moment(model, parts)))
        mean_noise.append(model.mean_ * model.n_samples_ - unit_sum)
        tau, noise_std, mean_noise_std = model.tau_, model.noise_std_, model.mean_noise_std_
    if mode == "dpdispca":  # tau_ holds each site's own τ_i; τ is that of all n rows
        tau = maths.moment_tau(0.5, 1e-5, model.n_samples_)
    assert isinstance(tau, float)
    # half the budget (ε/2, δ/2) for the moment, half for the mean
    assert tau == pytest.approx(np.sqrt(2 * np.log(1.25 / 5e-6)) / (model.n_samples_ * 0.25))
    sigma_mu = np.sqrt(2 * np.log(1.25 / 5e-6)) / 0.25
    # secure: 3 shares of variance τ²/2 each, so that site 1's unknown part is τ²;
    # dpdispca: each site's (N_i/n)·τ_i is τ, and the 3 draws add up
    total = {"central": 1.0, "secure": np.sqrt(3 / 2), "dpdispca": np.sqrt(3)}[mode]
    assert noise_std == pytest.approx(total * tau)
    assert mean_noise_std == pytest.approx(total * sigma_mu)
    for values, scale in ((np.concatenate(noise), noise_std),
                          (np.concatenate(mean_noise), mean_noise_std)):
        # >= 1200 draws: the sample s.d. is within ~2% of the scale (1 s.e.); the pre-fix
        # secure total (ratio sqrt(2/3) = 0.82 of this) is 9 s.e. away
        assert abs(values.std() / scale - 1.0) < 0.08
        assert abs(values.mean()) < 5 * scale / np.sqrt(values.size)  # p < 1e-6 of a false alarm


@pytest.mark.filterwarnings("ignore:.*no differential-privacy guarantee:UserWarning")
def test_elfedpca_is_calibrated_as_published() -> None:
    # the exact joint mean (no noise, no budget), rows centred on it then normalised,
    # and τ = sqrt(2 ln(1.25/δ))/(nε) for the whole budget, as the source notes give it
    parts = sites(3, rows=20, d=6)
    pooled = np.vstack(parts)
    published = maths.normalize_rows(pooled - pooled.mean(axis=0))
    truth = published.T @ published / len(pooled)
    noise = []
    for _ in range(100):
        model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="elfedpca").fit(parts)
        np.testing.assert_allclose(model.mean_, pooled.mean(axis=0), rtol=1e-12, atol=1e-12)
        noise.append(maths.upper_of(model.noisy_moment_ - truth))
    tau = np.sqrt(2 * np.log(1.25 / 1e-5)) / (len(pooled) * 0.5)
    assert model.tau_ == pytest.approx(tau, rel=1e-12)
    values = np.concatenate(noise)
    # 2100 draws: the sample s.d. is within ~1.5% of τ (1 s.e.)
    assert abs(values.std() / tau - 1.0) < 0.08
    np.testing.assert_allclose(model.transform(pooled), published @ model.components_.T,
                               atol=1e-12)


def test_elfedpca_claims_no_guarantee_and_says_why() -> None:
    parts = sites(3, rows=30, d=5)
    with pytest.warns(UserWarning, match="no differential-privacy guarantee.*exact joint mean"):
        model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="elfedpca").fit(parts)
    assert model.dp_guarantee_ is False
    assert model.epsilon_ == float("inf") and model.delta_ == 1e-5
    assert model.dp_void_reason_ is not None and "sqrt(2)" in model.dp_void_reason_
    # with noise_seed both reasons are given, through the same mechanism
    with pytest.warns(UserWarning, match="noise_seed=3"):
        seeded = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="elfedpca", noise_seed=3)
        seeded.fit(parts)
    assert seeded.dp_void_reason_ is not None
    assert "exact joint mean" in seeded.dp_void_reason_ and "noise_seed=3" in seeded.dp_void_reason_


def test_dpdispca_uses_each_sites_own_tau() -> None:
    parts = sites(3, rows=30)
    model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="dpdispca", random_state=0).fit(parts)
    assert isinstance(model.tau_, dict)
    for (name, tau), part in zip(model.tau_.items(), parts, strict=True):
        assert tau == pytest.approx(np.sqrt(2 * np.log(1.25 / 5e-6)) / (len(part) * 0.25)), name


def test_secure_masks_cancel_exactly() -> None:
    parts = sites(4, rows=50)
    model = FederatedPCA(2, epsilon=0.9, delta=1e-5, mode="secure", keep_payloads=True)
    model.fit(parts)
    # the mean is the sum of unit rows plus s noise shares of total s.d.
    # σ_μ·sqrt(s/(s - 1)) (~12.5 here)
    unit_sum = maths.normalize_rows(np.vstack(parts)).sum(axis=0)
    sigma_mu = maths.secure_total_sigma(maths.mean_sigma(0.9, 1e-5), 4)
    assert np.all(np.abs(model.mean_ * model.n_samples_ - unit_sum) < 6 * sigma_mu)
    plain = FederatedPCA(2, mode="plain").fit(parts)
    np.testing.assert_allclose(plain.mean_, np.vstack(parts).mean(axis=0), atol=1e-12)
    assert model.n_samples_ == sum(len(p) for p in parts)
    # what site 1 received is uniform-looking ring elements, not the sites' sums
    for record in model.transcript_.received_by("site1"):
        if record.tag == "stats":
            assert record.payload.dtype == np.uint64


@pytest.mark.filterwarnings("ignore:.*no differential-privacy guarantee:UserWarning")
def test_elfedpca_messages_are_the_schemes() -> None:
    parts = sites(3, rows=40, d=5)
    model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="elfedpca", random_state=1,
                         keep_payloads=True).fit(parts)
    t = model.transcript_
    counts = {tag: tot.messages for tag, tot in t.totals("tag").items()}
    assert counts == {"mask": 1, "stats": 2, "mean": 2, "noise": 2, "moment": 2,
                      "components": 2, "projection": 3}
    assert [r.receiver for r in t.with_tag("mask")] == ["site3"]
    assert all(np.shape(r.payload) == (5, 5) for r in t.with_tag("moment"))
    assert all(np.shape(r.payload) == (6,) for r in t.with_tag("stats"))
    assert model.published_.shape == (sum(len(p) for p in parts), 2)


def test_secure_mode_messages() -> None:
    model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="secure").fit(sites(3, d=5))
    counts = {tag: tot.messages for tag, tot in model.transcript_.totals("tag").items()}
    assert counts == {"session": 2, "pubkey": 6, "stats": 2, "mean": 2, "moment": 2,
                      "components": 2, "projection": 3}
    moment = model.transcript_.with_tag("moment")[0]
    assert moment.summary == "uint64[15]"  # the upper triangle only, d(d+1)/2


def test_central_sends_raw_rows_to_the_curator() -> None:
    parts = sites(3, rows=30, d=4)
    model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="central", block_size=16)
    model.fit(parts)
    rows = model.transcript_.with_tag("rows")
    assert sum(int(r.summary.split("[")[1].split(",")[0]) for r in rows) == sum(
        len(p) for p in parts[1:])


def test_streaming_from_a_memory_mapped_file_matches_in_memory(tmp_path: Path) -> None:
    parts = sites(3, rows=500, d=6)
    path = tmp_path / "site2.npy"
    np.save(path, parts[1])
    streamed = FederatedPCA(3, block_size=64).fit([parts[0], str(path), parts[2]])
    memory = FederatedPCA(3).fit(parts)
    assert np.max(subspace_angles(streamed.components_.T, memory.components_.T)) < 1e-10
    np.testing.assert_allclose(streamed.published_, memory.published_, atol=1e-10)


@pytest.mark.filterwarnings("ignore:.*no differential-privacy guarantee:UserWarning")
def test_transform_matches_the_published_projection() -> None:
    parts = sites(3)
    model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="elfedpca", random_state=0)
    model.fit(parts)
    np.testing.assert_allclose(model.transform(np.vstack(parts)), model.published_,
                               atol=1e-12)


@pytest.mark.parametrize(
    ("parts", "kwargs", "needle"),
    [
        ([np.ones((5, 3)), np.ones((5, 4))], {}, "different numbers of features"),
        ([np.ones((5, 3)), np.ones((0, 3))], {}, "no rows"),
        ([np.ones((5, 3)), np.ones((5, 3))], {"n_components": 4}, "n_components"),
        ([np.ones((5, 3))] * 2, {"mode": "secure", "epsilon": 0.0, "delta": 1e-5}, "epsilon"),
        ([np.ones((5, 3))] * 2, {"mode": "secure", "epsilon": 1.5, "delta": 1e-5}, "ε < 1"),
        ([np.ones((5, 3))] * 2, {"mode": "central", "epsilon": 0.5, "delta": 1.0}, "delta"),
        ([np.ones((5, 3))] * 2, {"mode": "elfedpca"}, "epsilon"),
        ([np.ones((5, 3))] * 2, {"epsilon": 0.5, "delta": 1e-5}, "plain"),
        ([np.ones((5, 3))] * 2, {"mode": "magic"}, "mode"),
        ([np.full((5, 3), np.nan), np.ones((5, 3))], {}, "NaN"),
        ([np.ones((5, 3))], {}, "at least two"),
    ],
)
def test_bad_input_is_refused_before_any_message(
    parts: list[np.ndarray], kwargs: dict[str, object], needle: str
) -> None:
    options = {"n_components": 2, **kwargs}
    with pytest.raises(ValidationError, match=needle):
        FederatedPCA(**options).fit(parts)  # type: ignore[arg-type]


def test_audit_recovers_elfedpca_matrices_but_not_secure_ones() -> None:
    report = audit_pca(sites(4, rows=80, d=6), n_components=2)
    assert report.elfedpca_recovery_rel_error < 1e-10
    assert report.secure_recovery_rel_error > 1e3


def test_cli_audit_pca_writes_the_required_keys(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from islands.cli import app

    out = tmp_path / "audit.json"
    result = CliRunner().invoke(app, ["audit", "pca", "--sites", "3", "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["elfedpca_recovery_rel_error"] < 1e-10
    assert doc["secure_recovery_rel_error"] > 1e3


# ---------------------------------------------------------------- issue 22, finding 7
# Someone who knows the public `random_state` replays the generator the noise came from
# and subtracts the noise. These tests play that attack with what the old code drew.


def _mechanism_rows(model: FederatedPCA, X: np.ndarray) -> np.ndarray:
    """The centred, normalised rows the DP matrix was built from (transform with V = I)."""
    probe = copy.copy(model)
    probe.components_ = np.eye(model.n_features_in_)
    return probe.transform(X)


def _noiseless_moment(model: FederatedPCA, parts: list[np.ndarray]) -> np.ndarray:
    rows = _mechanism_rows(model, np.vstack(parts))
    return rows.T @ rows / model.n_samples_


def _replayed_noise(mode: str, random_state: int, d: int, tau: float) -> np.ndarray:
    """E as the pre-fix code drew it from numpy seeded with random_state."""
    if mode == "elfedpca":
        seed = int(np.random.default_rng(random_state).integers(0, 2**63 - 1))
        rng = np.random.default_rng(seed)
    else:  # central
        rng = np.random.default_rng(random_state)
    return maths.symmetric_noise(d, tau, lambda c, s: rng.normal(0.0, s, size=c))


@pytest.mark.filterwarnings("ignore:.*no differential-privacy guarantee:UserWarning")
@pytest.mark.parametrize("mode", ["central", "elfedpca"])
def test_knowing_random_state_does_not_remove_the_noise(mode: str) -> None:
    parts = sites(3, rows=40, d=6)
    model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode=mode, random_state=7)
    model.fit(parts)
    assert isinstance(model.tau_, float)
    truth = _noiseless_moment(model, parts)
    guess = model.noisy_moment_ - _replayed_noise(mode, 7, 6, model.tau_)
    # the replay must miss by about the noise itself: ‖E − E_guess‖_F ≈ √2·τ·d; a miss
    # below τ has probability < 1e-15 for 21 independent N(0, 2τ²) entries
    assert np.linalg.norm(guess - truth) > model.tau_


def test_site1_cannot_replay_a_dpdispca_sites_noise() -> None:
    parts = sites(3, rows=40, d=6)
    model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="dpdispca", random_state=7,
                         keep_payloads=True).fit(parts)
    assert isinstance(model.tau_, dict)
    n = model.n_samples_
    for index, (name, part) in enumerate(zip(("site1", "site2", "site3"), parts,
                                             strict=True)):
        if index == 0:
            continue
        (record,) = [r for r in model.transcript_.received_by("site1")
                     if r.tag == "moment" and r.sender == name]
        rng = np.random.default_rng([7, index])
        e_i = maths.symmetric_noise(6, model.tau_[name],
                                    lambda c, s, rng=rng: rng.normal(0.0, s, size=c))
        guess = np.asarray(record.payload) * n / len(part) - e_i
        rows = _mechanism_rows(model, part)
        truth = rows.T @ rows / len(part)
        assert np.linalg.norm(guess - truth) > model.tau_[name], name


@pytest.mark.filterwarnings("ignore:.*no differential-privacy guarantee:UserWarning")
def test_site1_cannot_replay_elfedpcas_centring_masks() -> None:
    parts = sites(3, rows=40, d=6)
    model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="elfedpca", random_state=7,
                         keep_payloads=True).fit(parts)
    (record,) = [r for r in model.transcript_.received_by("site1")
                 if r.tag == "stats" and r.sender == "site3"]
    rng = np.random.default_rng(7)  # site 2's masks, as the pre-fix code drew them
    real = rng.normal(0.0, 1.0, size=(2, 6))
    real -= real.mean(axis=0)
    guess = np.asarray(record.payload)[:-1] - real[1]
    assert not np.allclose(guess, parts[2].sum(axis=0), atol=1e-6)


@pytest.mark.parametrize("mode", ["central", "secure", "dpdispca"])
def test_fresh_noise_by_default_and_the_guarantee_holds(mode: str) -> None:
    parts = sites(3, rows=40, d=6)
    fits = [FederatedPCA(2, epsilon=0.5, delta=1e-5, mode=mode, random_state=3).fit(parts)
            for _ in range(2)]
    assert not np.allclose(fits[0].noisy_moment_, fits[1].noisy_moment_)
    for model in fits:
        assert model.dp_guarantee_ is True and model.dp_void_reason_ is None
        assert model.epsilon_ == 0.5 and model.delta_ == 1e-5


@pytest.mark.parametrize("mode", ["central", "elfedpca", "secure", "dpdispca"])
def test_noise_seed_reproduces_the_noise_and_voids_the_guarantee(mode: str) -> None:
    parts = sites(3, rows=40, d=6)
    fits = []
    for random_state in (1, 2):
        with pytest.warns(UserWarning, match="no differential-privacy guarantee"):
            fits.append(FederatedPCA(2, epsilon=0.5, delta=1e-5, mode=mode,
                                     random_state=random_state, noise_seed=11).fit(parts))
    np.testing.assert_array_equal(fits[0].noisy_moment_, fits[1].noisy_moment_)
    for model in fits:
        assert model.dp_guarantee_ is False
        assert model.epsilon_ == float("inf")
    other = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode=mode, noise_seed=12)
    with pytest.warns(UserWarning):
        other.fit(parts)
    assert not np.allclose(other.noisy_moment_, fits[0].noisy_moment_)


def test_estimator_parameters_are_the_config_and_the_runtime_settings() -> None:
    # FederatedPCA's __init__ and PcaSettings cannot drift apart: same names, same defaults
    params = inspect.signature(FederatedPCA.__init__).parameters
    assert set(params) - {"self"} == set(PcaSettings.model_fields) | set(FederatedPCA.runtime)
    assert not set(PcaSettings.model_fields) & set(FederatedPCA.runtime)
    for name, field in PcaSettings.model_fields.items():
        if field.is_required():
            assert params[name].default is inspect.Parameter.empty, name
        else:
            assert params[name].default == field.default, name
    for name in ("timeout", "keep_payloads"):
        assert params[name].default == RunSettings.model_fields[name].default


def test_get_set_params_repr_and_clone() -> None:
    model = FederatedPCA(3, epsilon=0.5, delta=1e-5, mode="secure")
    assert model.get_params() == {
        "n_components": 3, "epsilon": 0.5, "delta": 1e-5, "mode": "secure",
        "random_state": None, "noise_seed": None, "block_size": 8192, "timeout": 600.0,
        "keep_payloads": False}
    assert repr(model) == "FederatedPCA(n_components=3, epsilon=0.5, delta=1e-05, mode='secure')"
    assert model.set_params(block_size=10) is model and model.block_size == 10
    with pytest.raises(ValidationError, match=r"FederatedPCA has no parameter 'seed'; valid:"):
        model.set_params(block_size=20, seed=1)
    assert model.block_size == 10  # nothing set when one name is unknown
    from sklearn.base import clone

    twin = clone(model)
    assert twin is not model and twin.get_params() == model.get_params()


DP = {"mode": "secure", "epsilon": 0.5, "delta": 1e-5}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_components": 0},
         "The 'n_components' parameter of FederatedPCA must be an int in [1, inf). Got 0 "
         "instead."),
        ({"mode": "magic"},
         "The 'mode' parameter of FederatedPCA must be one of ['plain', 'elfedpca', 'secure', "
         "'dpdispca', 'central']. Got 'magic' instead."),
        ({**DP, "epsilon": 1.0},
         "The 'epsilon' parameter of FederatedPCA must be a float in (0, 1) (the classic "
         "Gaussian mechanism is proven only for ε < 1). Got 1.0 instead."),
        ({"mode": "central"},
         "The 'epsilon' parameter of FederatedPCA must be a float in (0, 1) (the classic "
         "Gaussian mechanism is proven only for ε < 1). Got None instead."),
        ({**DP, "delta": None},
         "The 'delta' parameter of FederatedPCA must be a float in (0, 1). Got None instead."),
        ({**DP, "delta": np.nan},
         "The 'delta' parameter of FederatedPCA must be a float in (0, 1). Got nan instead."),
        ({"delta": 1e-5},
         "mode='plain' adds no noise: leave epsilon and delta as None, or choose a DP mode"),
        ({"noise_seed": 1},
         "The 'noise_seed' parameter of FederatedPCA must be None for mode='plain' (no noise). "
         "Got 1 instead."),
        ({**DP, "noise_seed": -1},
         "The 'noise_seed' parameter of FederatedPCA must be an int in [0, inf). Got -1 "
         "instead."),
        ({"block_size": 2.0},
         "The 'block_size' parameter of FederatedPCA must be an int in [1, inf). Got 2.0 "
         "instead."),
        ({"timeout": 0},
         "The 'timeout' parameter of FederatedPCA must be a float in (0, inf). Got 0 instead."),
    ],
)
def test_parameter_messages_are_the_standard_ones(kwargs: dict[str, object],
                                                  message: str) -> None:
    with pytest.raises(ValidationError) as info:
        FederatedPCA(**{"n_components": 2, **kwargs}).fit(sites(2))  # type: ignore[arg-type]
    assert str(info.value) == message


def test_numpy_scalar_parameters_are_accepted() -> None:
    parts = sites(2)
    ref = FederatedPCA(2).fit(parts)
    model = FederatedPCA(np.int64(2), block_size=np.int32(8192),  # type: ignore[arg-type]
                         timeout=np.float32(60)).fit(parts)  # type: ignore[arg-type]
    np.testing.assert_array_equal(model.components_, ref.components_)


@pytest.mark.parametrize(
    "values",
    [{"epsilon": 1}, {"epsilon": 0.5}, {"epsilon": 0.5, "delta": 1e-5},
     {**DP}, {**DP, "epsilon": 1}, {**DP, "epsilon": 0}, {**DP, "delta": 1},
     {**DP, "epsilon": True}, {**DP, "noise_seed": 3}, {"noise_seed": 3},
     {"mode": "elfedpca"}, {"mode": "Secure"}, {"block_size": 0}, {"block_size": 1.0},
     {"n_components": 2.0}, {"n_components": 0}],
)
def test_the_federation_section_and_the_estimator_agree(values: dict[str, object]) -> None:
    # the same settings are accepted, or refused, by FederatedPCA and by a [pca] section
    values = {"n_components": 2, **values}
    try:
        from_estimator: object = PcaSettings.build("FederatedPCA", **values)
    except ValidationError:
        from_estimator = "refused"
    try:
        from_file: object = PcaSettings.from_table(values, "federation file f [pca]")
    except JobError:
        from_file = "refused"
    assert from_estimator == from_file
    assert PcaSettings.from_table({"n_components": 2}, "f") == PcaSettings(n_components=2)


def test_plain_mode_refuses_a_noise_seed() -> None:
    with pytest.raises(ValidationError, match="noise_seed"):
        FederatedPCA(2, noise_seed=1).fit(sites(2))


def test_a_site_refuses_a_noise_message_that_differs_from_its_own_epsilon() -> None:
    from functools import partial

    from islands.data.sources import open_source
    from islands.errors import ProtocolError
    from islands.pca.protocol import PcaConfig, publisher, site
    from islands.runtime import run_local

    names = ("site1", "site2", "site3")
    honest = PcaConfig(mode="elfedpca", n_components=2, sites=names, publisher="publisher",
                       epsilon=0.5, delta=1e-5)
    # site 1 runs with a larger ε than the federation agreed: less noise for everyone
    deviant = dataclasses.replace(honest, epsilon=0.9)
    roles = {name: partial(site, source=open_source(part, block_size=64, name=name),
                           config=deviant if name == "site1" else honest)
             for name, part in zip(names, sites(3), strict=True)}
    roles["publisher"] = partial(publisher, config=honest)
    with pytest.raises(ProtocolError) as info:
        run_local(roles, timeout=20.0, keep_payloads=True)
    text = str(info.value)
    assert "'site1'" in text and "epsilon" in text and "0.9" in text and "0.5" in text, text


def test_secure_mode_takes_any_scale_since_rows_are_normalised_first() -> None:
    # rows are scaled to unit norm before the masked sums, so their size never reaches
    # the fixed-point ring's limit (before the fix, 1e30 was refused)
    parts = [p * 1e30 for p in sites(3, rows=30, d=4)]
    model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="secure").fit(parts)
    # the mean of unit rows, plus noise of s.d. σ_μ/n per coordinate (8 s.d.: p < 1e-14)
    bound = 1.0 + 8 * maths.mean_sigma(0.5, 1e-5) / model.n_samples_
    assert np.all(np.abs(model.mean_) <= bound)
    np.testing.assert_allclose(np.linalg.norm(model.components_, axis=1), 1.0, rtol=1e-12)


# ---------------------------------------------------------------- issue 22, the row count n
# Site 1 tells every site the total row count n. Before the fix, secure-mode sites put
# noise of s.d. τ(n)/√s on A_i = Σx̃x̃ᵀ/n with the n site 1 sent: an inflated n pushed
# their noise shares below the fixed-point ring's resolution, where they were rounded
# away and site 1 read a deterministic function of their data. Now each share goes on
# Σx̃x̃ᵀ (sensitivity 1) and no site's noise depends on n.


def _deviant_site1(party: Any, *, d: int, k: int, n_sent: int, mean: np.ndarray,
                   readings: list[np.ndarray]) -> None:
    """Site 1 of a two-site secure run that lies about n and unmasks site 2's moment."""
    session = secrets.token_bytes(16)
    party.send("site2", "session", session)
    key = generate_key()
    party.send("site2", "pubkey", key.public)
    peer = {"site2": party.recv("site2", "pubkey")}
    party.recv("site2", "stats")
    party.send("site2", "mean", Mean(mean, n_sent))
    ring = party.recv("site2", "moment")
    # with two sites, site 1's own pairwise mask is minus site 2's: it unmasks site 2
    own = pairwise_mask("site1", key, peer, ring.size, context=session, label=b"moment")
    readings.append(decode_fixed(ring + own, frac_bits=MOMENT_FRAC_BITS))
    party.send("site2", "components", Components(np.eye(k, d), np.ones(k)))
    party.send("publisher", "projection", np.zeros((1, k)))


def _attack_n(part: np.ndarray, n_sent: int, readings: list[np.ndarray]) -> None:
    d, k = part.shape[1], 2
    config = PcaConfig(mode="secure", n_components=k, sites=("site1", "site2"),
                       publisher="publisher", epsilon=0.5, delta=1e-5)
    mean = maths.normalize_rows(part).mean(axis=0)
    roles: dict[str, Any] = {
        "site1": partial(_deviant_site1, d=d, k=k, n_sent=n_sent, mean=mean,
                         readings=readings),
        "site2": partial(site, source=open_source(part, block_size=64, name="site2"),
                         config=config),
        "publisher": partial(publisher, config=config),
    }
    run_local(roles, timeout=20.0)


def test_site1_inflating_n_does_not_shrink_a_secure_sites_noise() -> None:
    part = sites(1, rows=40, d=6)[0]
    n_true = len(part) + 1
    readings: list[np.ndarray] = []
    for _ in range(3):
        _attack_n(part, n_true * 2**50, readings)
    # fresh noise in every run: before the fix the shares (s.d. ~1e-16) were rounded
    # away by the 2^-40 ring step and all three readings were the same
    assert not np.array_equal(readings[0], readings[1])
    assert not np.array_equal(readings[1], readings[2])
    rows = maths.centre_rows(part, maths.normalize_rows(part).mean(axis=0),
                             centring="released")
    truth = maths.upper_of(rows.T @ rows)  # site 2's Σx̃x̃ᵀ
    # and the noise site 1 faces, in units of site 2's data, is site 2's full share
    # nτ/√(s-1) = τ(1) whatever n it was told (63 draws: sample s.d. within ±40% is > 4 s.e.)
    share = maths.moment_tau(0.5, 1e-5, 1)
    residual = np.concatenate([r - truth for r in readings])
    assert 0.6 < residual.std() / share < 1.4


def test_a_site_refuses_a_total_row_count_below_its_own() -> None:
    part = sites(1, rows=40, d=6)[0]
    with pytest.raises(ProtocolError) as info:
        _attack_n(part, 12, [])
    text = str(info.value)
    assert "'site1'" in text and "n = 12" in text and ">= 41" in text, text


@pytest.mark.parametrize("mode", ["elfedpca", "dpdispca", "central"])
def test_other_modes_refuse_a_total_row_count_below_their_own(mode: str) -> None:
    names = ("site1", "site2")
    config = PcaConfig(mode=mode, n_components=2, sites=names,  # type: ignore[arg-type]
                       publisher="publisher", epsilon=0.5, delta=1e-5)
    parts = sites(2, rows=30, d=4)

    def liar(party: Any, **kwargs: Any) -> Any:
        real_broadcast = party.broadcast

        def broadcast(tag: str, payload: Any, *, to: Any) -> None:
            if tag == "mean":
                payload = dataclasses.replace(payload, n=3)
            real_broadcast(tag, payload, to=to)
        party.broadcast = broadcast
        return site(party, **kwargs)

    roles: dict[str, Any] = {
        name: partial(liar if name == "site1" else site,
                      source=open_source(part, block_size=64, name=name), config=config)
        for name, part in zip(names, parts, strict=True)}
    roles["publisher"] = partial(publisher, config=config)
    with pytest.raises(ProtocolError, match="'site1' sent n = 3 rows"):
        run_local(roles, timeout=20.0)


# ---------------------------------------------------------------- issue 22, secure noise shares
# In `secure` mode site 1 decodes the total A' = A + E with E the sum of every site's
# share, and it knows its own share. Before the fix each share had variance τ²/s, so
# against site 1 only τ²(s − 1)/s was left: half the variance (ε, δ) needs when s = 2.


def _record_site_noise(monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:
    """Keep every DP noise draw a site makes, by label (what that site knows of its noise)."""
    drawn: dict[str, np.ndarray] = {}
    real = protocol._noise

    def noise(config: PcaConfig, label: str) -> maths.NormalSource:
        draw = real(config, label)

        def recorded(count: int, sigma: float) -> np.ndarray:
            drawn[label] = draw(count, sigma)
            return drawn[label]
        return recorded

    monkeypatch.setattr(protocol, "_noise", noise)
    return drawn


@pytest.mark.parametrize("n_sites", [2, 3])
def test_site1_removing_its_own_share_still_faces_the_full_noise(
        monkeypatch: pytest.MonkeyPatch, n_sites: int) -> None:
    drawn = _record_site_noise(monkeypatch)
    d, fits = 48, 20
    parts = sites(n_sites, rows=60, d=d)
    unit_sum = maths.normalize_rows(np.vstack(parts)).sum(axis=0)
    left_moment, left_mean = [], []
    for _ in range(fits):
        model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="secure").fit(parts)
        n = model.n_samples_
        # site 1 plays: it decoded the totals and subtracts its own shares from them
        own_moment = drawn["moment site1"] / n  # its share went on Σx̃x̃ᵀ, A' = total / n
        left_moment.append(maths.upper_of(model.noisy_moment_ - _noiseless_moment(model, parts))
                           - own_moment)
        left_mean.append(model.mean_ * n - unit_sum - drawn["mean site1"])
    tau = maths.moment_tau(0.5, 1e-5, n)
    assert model.tau_ == pytest.approx(tau)
    for values, scale in ((np.concatenate(left_moment), tau),
                          (np.concatenate(left_mean), maths.mean_sigma(0.5, 1e-5))):
        # the sample s.d. of N i.i.d. normals has relative s.e. 1/sqrt(2N): 1.0% for the
        # 23520 moment draws, 2.3% for the 960 mean draws; 5 s.e. is a 1e-6 false alarm.
        # Before the fix the ratio was sqrt((s - 1)/s): 0.71 (s = 2) or 0.82 (s = 3).
        assert abs(values.std() / scale - 1.0) < 5 / np.sqrt(2 * values.size), (
            values.std() / scale)


def test_secure_mode_refuses_a_single_site() -> None:
    # one site has no other site to hide among: before, the run started and failed at
    # 'pubkey' with an error about pairwise_mask's peer keys
    with pytest.raises(ValidationError, match=r"'sites' parameter of PcaConfig.*at least 2 "
                                              r"sites for mode='secure'.*mode='central'"):
        PcaConfig(mode="secure", n_components=2, sites=("site1",), publisher="publisher",
                  epsilon=0.5, delta=1e-5)
    with pytest.raises(ValueError, match="an int >= 2"):
        maths.share_sigma(1.0, 1)


def test_a_one_site_secure_federation_file_is_refused_before_connecting(
        tmp_path: Path) -> None:
    from islands.deploy.config import load_party_config
    from islands.deploy.launch import run_configured
    from islands.deploy.local import write_federation

    np.save(tmp_path / "site1.npy", sites(1, rows=30, d=4)[0])
    files = write_federation(tmp_path, "pca", {"site1": {"data": "site1.npy"}, "pub": {}},
                             options={"publisher": "pub", "mode": "secure", "n_components": 2,
                                      "epsilon": 0.5, "delta": 1e-5})
    with pytest.raises(ValidationError, match="at least 2 sites for mode='secure'"):
        run_configured(load_party_config(files["site1"]))


# ---------------------------------------------------------------- issue 23, typed messages
# mask, mean, noise and components were dicts taken apart by hand (a dict without "n"
# was a KeyError, eigenvalues were never checked); now each is a registered dataclass
# that the codec checks on arrival, and the receiver checks what depends on its own state.


def _run_with_rewrite(mode: str, liar: str, tag: str, rewrite: Any) -> Any:
    """Run three sites where ``liar`` rewrites every ``tag`` payload it sends."""
    names = ("site1", "site2", "site3")
    config = PcaConfig(mode=mode, n_components=2, sites=names,  # type: ignore[arg-type]
                       publisher="publisher", epsilon=0.5, delta=1e-5)

    def lying(party: Any, **kwargs: Any) -> Any:
        real_send = party.send

        def send(to: str, t: str, payload: Any) -> int:
            return real_send(to, t, rewrite(payload) if t == tag else payload)

        def broadcast(t: str, payload: Any, to: Any = None) -> None:
            for peer in party.peers if to is None else to:
                send(peer, t, payload)
        party.send, party.broadcast = send, broadcast
        return site(party, **kwargs)

    roles: dict[str, Any] = {
        name: partial(lying if name == liar else site,
                      source=open_source(part, block_size=64, name=name), config=config)
        for name, part in zip(names, sites(3, rows=30, d=4), strict=True)}
    roles["publisher"] = partial(publisher, config=config)
    return run_local(roles, timeout=20.0, keep_payloads=True)


def test_pca_messages_are_registered_dataclasses() -> None:
    run = _run_with_rewrite("elfedpca", "site1", "none", lambda p: p)
    kinds = {r.tag: type(r.payload) for r in run.transcript.records}
    assert kinds["mask"] is protocol.Mask and kinds["mean"] is Mean
    assert kinds["noise"] is protocol.Noise and kinds["components"] is Components
    central = _run_with_rewrite("central", "site1", "none", lambda p: p)
    assert {type(r.payload) for r in central.transcript.records
            if r.tag in ("mean", "components")} == {Mean, Components}


@pytest.mark.parametrize(("mode", "liar", "tag", "rewrite", "error", "needle"), [
    # the old dict format is refused by name, not a KeyError
    ("elfedpca", "site1", "mean", lambda m: {"mean": m.mean, "n": m.n}, ProtocolError,
     "'site1' sent a malformed 'mean' message"),
    ("central", "site1", "components",
     lambda c: {"components": c.components, "eigenvalues": c.eigenvalues}, ProtocolError,
     "'site1' sent a malformed 'components' message"),
    ("elfedpca", "site2", "mask", lambda m: {"a": m.a, "b": m.b}, ProtocolError,
     "site3: 'site2' sent a malformed 'mask' message"),
    # the codec's checks, named with the field
    ("elfedpca", "site1", "noise", lambda n: dataclasses.replace(n, seed=n.seed * 2),
     ProtocolError, "pca.Noise field 'seed': expected at most 32 items, got 64"),
    ("elfedpca", "site1", "noise", lambda n: dataclasses.replace(n, seed=n.seed[:8]),
     ProtocolError, "'site1' sent a noise seed that is not 32 random bytes"),
    ("elfedpca", "site1", "mean", lambda m: dataclasses.replace(m, n=-1), ProtocolError,
     "pca.Mean field 'n': expected a value >= 1, got -1"),
    ("elfedpca", "site2", "mask", lambda m: dataclasses.replace(m, a=m.a[:, None]),
     ProtocolError, "pca.Mask field 'a': expected an array of 1 dimensions"),
    # and the receiver's own checks: shapes it knows
    ("dpdispca", "site1", "components",
     lambda c: dataclasses.replace(c, eigenvalues=np.ones(5)), ValidationError,
     "'site1' sent eigenvalues of shape (5,), expected (2,)"),
    ("plain", "site1", "mean", lambda m: dataclasses.replace(m, mean=m.mean[:2]),
     ValidationError, "'site1' sent the mean of shape (2,), expected (4,)"),
])
def test_a_deviating_site_gets_a_named_error(mode: str, liar: str, tag: str, rewrite: Any,
                                             error: type[Exception], needle: str) -> None:
    with pytest.raises(error, match=re.escape(needle)):
        _run_with_rewrite(mode, liar, tag, rewrite)


def test_secure_mode_refuses_stats_that_are_not_ring_elements() -> None:
    # before, site 1 added float stats to its uint64 total: a numpy casting TypeError
    with pytest.raises(ValidationError, match=re.escape(
            "'site2' sent stats of shape float64(5,), expected uint64(5,)")):
        _run_with_rewrite("secure", "site2", "stats", lambda r: r.astype(np.float64))
