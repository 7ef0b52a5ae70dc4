"""PSI's engine as a setting of the vertical learners (issue 24): ``psi_engine = "spu"``.

The vertical estimators, the federated transfer learner and vertical job files align rows
with SecretFlow SPU's RR22 when asked; the rows, their order and so the model are those of
Diffie–Hellman PSI. The tests that run SPU skip where its environment is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

import islands.vfl.estimator as vfl_estimator
import islands.vfl.ftl.estimator as ftl_estimator
from islands.errors import ValidationError
from islands.psi.spu_engine import SPU_PYTHON_ENV, SpuParty
from islands.vfl import (
    FederatedTransferLearner,
    VerticalLinearRegression,
    VerticalLogisticRegression,
)
from islands.vfl.job import parse_vertical_job, run_vertical
from spu_env import needs_spu

pytestmark = pytest.mark.timeout(300)


def _cancer() -> tuple[np.ndarray, np.ndarray]:
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X[:150]), y[:150]


def _ids(rows: np.ndarray) -> list[str]:
    return [f"person-{i}" for i in rows]


def _vertical_views() -> dict[str, Any]:
    """Two passive parties and B, each with its own rows in its own order (130 shared)."""
    X, y = _cancer()
    rng = np.random.default_rng(5)
    a1, a2 = rng.permutation(np.arange(0, 140)), rng.permutation(np.arange(10, 150))
    b = rng.permutation(np.arange(5, 145))
    return {"X_a": [X[a1][:, :8], X[a2][:, 8:16]], "X_b": X[b][:, 16:], "y": y[b],
            "ids_a": [_ids(a1), _ids(a2)], "ids_b": _ids(b)}


def _count_spu_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the name of every party whose SPU run finished."""
    finished: list[str] = []
    finish = SpuParty.finish

    def spy(self: SpuParty) -> Any:
        finished.append(self.name)
        return finish(self)

    monkeypatch.setattr(SpuParty, "finish", spy)
    return finished


@needs_spu
def test_the_vertical_estimator_with_spu_fits_the_model_dh_fits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    d = _vertical_views()
    finished = _count_spu_runs(monkeypatch)
    fits = {engine: VerticalLogisticRegression(epochs=1, batch_size=32, key_bits=1024,
                                               insecure_keys=True, psi_engine=engine,
                                               random_state=0, timeout=120).fit(**d)
            for engine in ("dh", "spu")}
    # B runs one SPU PSI with each passive party, on the same loopback address for both
    assert sorted(finished) == ["A1", "A2", "B", "B"]
    dh, spu = fits["dh"], fits["spu"]
    assert spu.ids_ == dh.ids_ and sorted(dh.ids_) == sorted(_ids(np.arange(10, 140)))
    assert "done" in spu.transcript_.totals("tag") and "done" not in dh.transcript_.totals("tag")
    for got, want in zip([*spu.coef_a_, spu.coef_b_], [*dh.coef_a_, dh.coef_b_], strict=True):
        np.testing.assert_array_equal(got, want)
    assert spu.intercept_ == dh.intercept_ and spu.loss_history_ == dh.loss_history_
    assert spu.config_.psi_engine == "spu" and "psi_engine='spu'" in repr(spu)


@needs_spu
def test_the_transfer_learner_with_spu_fits_the_model_dh_fits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _cancer()
    perm = np.random.default_rng(0).permutation(len(y))
    b, a = perm[:100], np.concatenate([perm[100:150], perm[:30]])
    finished = _count_spu_runs(monkeypatch)
    fits = {engine: FederatedTransferLearner(dim=4, hidden=(8,), epochs=1, batch_size=15,
                                             pretrain_epochs=1, key_bits=1024, insecure_keys=True,
                                             psi_engine=engine, random_state=3,
                                             timeout=120).fit(
        X[a][:, :15], X[b][:, 15:], y[b], _ids(a), _ids(b)) for engine in ("dh", "spu")}
    assert sorted(finished) == ["A", "B"]
    dh, spu = fits["dh"], fits["spu"]
    assert spu.overlap_ids_ == dh.overlap_ids_ and sorted(dh.overlap_ids_) == sorted(_ids(a[50:]))
    assert spu.loss_history_ == dh.loss_history_
    np.testing.assert_array_equal(spu.phi_, dh.phi_)
    np.testing.assert_array_equal(spu.predict_proba(X[a][:, :15]), dh.predict_proba(X[a][:, :15]))


@needs_spu
def test_a_vertical_job_file_aligns_with_spu(monkeypatch: pytest.MonkeyPatch) -> None:
    finished = _count_spu_runs(monkeypatch)
    results = {}
    for engine in ("dh", "spu"):
        job = parse_vertical_job({"name": "t", "kind": "vertical",
                                  "parties": {"b_features": 10, "psi": True,
                                              "psi_engine": engine},
                                  "model": {"kind": "logistic", "key_bits": 1024,
                                            "insecure_keys": True, "epochs": 1}})
        assert job.config().psi_engine == engine
        results[engine] = run_vertical(job)
    assert sorted(finished) == ["A", "B"]
    dh, spu = results["dh"], results["spu"]
    assert spu.aligned_ids == dh.aligned_ids and dh.aligned_ids is not None
    assert spu.loss_history == dh.loss_history and spu.metrics == dh.metrics
    assert spu.to_json()["settings"]["psi_engine"] == "spu"


# ------------------------------------------------------------ errors, SPU or not
@pytest.mark.parametrize("kind", [VerticalLinearRegression, VerticalLogisticRegression])
def test_a_bad_engine_is_named_before_any_message(
        kind: type[VerticalLinearRegression], monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[object] = []
    monkeypatch.setattr(vfl_estimator, "run_local", lambda *a, **k: runs.append(a))
    d = _vertical_views()
    with pytest.raises(ValidationError, match=rf"The 'psi_engine' parameter of {kind.__name__} "
                       r"must be 'dh' or 'spu'\. Got 'ecdh' instead"):
        kind(psi_engine="ecdh", key_bits=1024, insecure_keys=True).fit(**d)
    x_a, x_b = _cancer()[0][:, :15], _cancer()[0][:, 15:]
    with pytest.raises(ValidationError, match="The 'psi_engine' parameter of "
                       "FederatedTransferLearner must be 'dh' or 'spu'"):
        FederatedTransferLearner(psi_engine="SPU").fit(x_a, x_b, _cancer()[1], _ids(np.arange(150)),
                                                       _ids(np.arange(150)))
    assert not runs


def test_without_spus_environment_spu_fails_before_any_message(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(SPU_PYTHON_ENV, str(tmp_path / "nowhere" / "python"))
    runs: list[object] = []
    monkeypatch.setattr(vfl_estimator, "run_local", lambda *a, **k: runs.append(a))
    monkeypatch.setattr(ftl_estimator, "align", lambda *a, **k: runs.append(a))
    d = _vertical_views()
    how = r"SecretFlow SPU's environment is missing .*`make spu`.*psi_engine='dh'"
    with pytest.raises(ValidationError,
                       match=r"^VerticalLogisticRegression \(psi_engine='spu'\): " + how):
        VerticalLogisticRegression(psi_engine="spu", key_bits=1024, insecure_keys=True).fit(**d)
    X, y = _cancer()
    with pytest.raises(ValidationError,
                       match=r"^FederatedTransferLearner \(psi_engine='spu'\): " + how):
        FederatedTransferLearner(psi_engine="spu").fit(X[:, :15], X[:, 15:], y,
                                                       _ids(np.arange(150)),
                                                       _ids(np.arange(150)))
    assert not runs
