"""Federated PCA: exactness, noise calibration, masks, messages, streaming, bad input, audit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.linalg import subspace_angles
from sklearn.decomposition import PCA

from islands.errors import ValidationError
from islands.pca import FederatedPCA, maths
from islands.pca.audit import audit_pca


def sites(n_sites: int = 3, rows: int = 60, d: int = 6, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((d, d)) * np.linspace(3, 0.3, d)[:, None]
    return [rng.standard_normal((rows + 7 * i, d)) @ mix + 2.0 for i in range(n_sites)]


def exact_moment(parts: list[np.ndarray], *, normalize: bool) -> np.ndarray:
    pooled = np.vstack(parts)
    return maths.moment([pooled], pooled.mean(axis=0), normalize=normalize)[0] / len(pooled)


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


@pytest.mark.parametrize("mode", ["central", "elfedpca", "secure"])
def test_noise_is_calibrated_to_tau(mode: str) -> None:
    parts = sites(3, rows=20, d=6)
    truth = exact_moment(parts, normalize=True)
    noise = []
    tau = None
    for seed in range(200):
        model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode=mode, random_state=seed)
        model.fit(parts)
        noise.append(maths.upper_of(model.noisy_moment_ - truth))
        tau = model.tau_
    assert isinstance(tau, float)
    assert tau == pytest.approx(np.sqrt(2 * np.log(1.25 / 1e-5)) / (model.n_samples_ * 0.5))
    values = np.concatenate(noise)
    # 200 runs x 21 entries = 4200 draws: the sample s.d. is within ~1.1% of tau (1 s.e.)
    assert abs(values.std() / tau - 1.0) < 0.05
    assert abs(values.mean()) < 5 * tau / np.sqrt(values.size)  # p < 1e-6 of a false alarm


def test_dpdispca_uses_each_sites_own_tau() -> None:
    parts = sites(3, rows=30)
    model = FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="dpdispca", random_state=0).fit(parts)
    assert isinstance(model.tau_, dict)
    for (name, tau), part in zip(model.tau_.items(), parts, strict=True):
        assert tau == pytest.approx(np.sqrt(2 * np.log(1.25 / 1e-5)) / (len(part) * 0.5)), name


def test_secure_masks_cancel_exactly() -> None:
    parts = sites(4, rows=50)
    model = FederatedPCA(2, epsilon=0.9, delta=1e-5, mode="secure", keep_payloads=True)
    model.fit(parts)
    # the mean comes from masked fixed-point sums: exact up to the 2^-24 encoding
    np.testing.assert_allclose(model.mean_, np.vstack(parts).mean(axis=0), atol=1e-6)
    assert model.n_samples_ == sum(len(p) for p in parts)
    # what site 1 received is uniform-looking ring elements, not the sites' sums
    for record in model.transcript_.received_by("site1"):
        if record.tag == "stats":
            assert record.payload.dtype == np.uint64


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
