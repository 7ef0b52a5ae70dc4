"""Each party's part of a trained vertical model (issue 38, part 4).

A vertical job run writes ``party-<name>.json`` per party in its set of files; docs/vfl.md's
inference snippet, run here on such a folder, gives the run's own test predictions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.errors import ValidationError
from islands.vfl.job import (
    load_vertical_job,
    run_vertical,
    vertical_dataset,
    write_vertical_outputs,
)
from islands.vfl.parts import ModelPart, combine

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["model.key_bits=1024", "model.insecure_keys=true", "model.epochs=3"]


def _run(tmp_path: Path, example: str, extra: list[str]) -> tuple[Path, Any]:
    job = load_vertical_job(ROOT / "examples" / example, [*QUICK, *extra])
    out = tmp_path / "run"
    result = run_vertical(job, output=out)
    write_vertical_outputs(result, out)
    return out, job


def _snippet() -> str:
    text = (ROOT / "docs" / "vfl.md").read_text(encoding="utf-8")
    section = text.split("### The trained model stays split", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def _test_rows(job: Any) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    X, y, _ = vertical_dataset(job)
    logistic = job.model["kind"] == "logistic"
    _, x_te, _, y_te = train_test_split(X, y, test_size=job.data["test_fraction"],
                                        random_state=job.seed, stratify=y if logistic else None)
    return x_te, y_te


def test_the_docs_inference_snippet_gives_the_runs_own_predictions(tmp_path: Path) -> None:
    from sklearn.metrics import r2_score

    out, job = _run(tmp_path, "vfl-diabetes-two-passive.toml", [])
    manifest = json.loads((out / "manifest.json").read_text())
    assert {"party-A1.json", "party-A2.json", "party-B.json"} <= set(manifest["files"])
    b_doc = json.loads((out / "party-B.json").read_text())
    assert b_doc["role"] == "active" and "target_scale" in b_doc and "intercept" in b_doc
    assert "intercept" not in json.loads((out / "party-A1.json").read_text())
    namespace: dict[str, Any] = {}
    code = _snippet().replace('run = "runs/vfl-diabetes-two-passive"', f"run = {str(out)!r}")
    assert str(out) in code
    exec(compile(code, "docs/vfl.md", "exec"), namespace)
    y_hat = namespace["y_hat"]
    X, _, _ = vertical_dataset(job)
    assert y_hat.shape == (X.shape[0],)
    # the job's test rows: the inference protocol's predictions, rebuilt from the files
    x_te, y_te = _test_rows(job)
    parts = [namespace["a1"], namespace["a2"], namespace["b"]]
    pred = combine([p.partial_score(x_te[:, p.columns]) for p in parts], namespace["b"])
    results = json.loads((out / "results.json").read_text())
    assert abs(r2_score(y_te, pred) - results["metrics"]["r2"]) < 1e-9
    assert abs(float(np.mean((y_te - pred) ** 2)) - results["metrics"]["mse"]) < 1e-6


def test_a_logistic_run_writes_the_classes_and_combine_gives_probabilities(
        tmp_path: Path) -> None:
    from sklearn.metrics import accuracy_score, roc_auc_score

    out, job = _run(tmp_path, "vfl-breast-cancer.toml", [])
    a, b = ModelPart.load(out / "party-A.json"), ModelPart.load(out / "party-B.json")
    assert b.classes == [0, 1] and a.role == "passive" and a.intercept == 0.0
    x_te, y_te = _test_rows(job)
    p = combine([a.partial_score(x_te[:, a.columns]), b.partial_score(x_te[:, b.columns])], b)
    assert np.all((p > 0) & (p < 1))
    results = json.loads((out / "results.json").read_text())
    labels = np.where(p > 0.5, b.classes[1], b.classes[0])
    assert accuracy_score(y_te, labels) == results["metrics"]["accuracy"]
    assert abs(roc_auc_score(y_te, p) - results["metrics"]["auc"]) < 1e-12


def test_a_part_round_trips_and_bad_input_is_named(tmp_path: Path) -> None:
    part = ModelPart(party="A", role="passive", objective="linear",
                     weights=np.array([1.0, -2.0]), mean=np.array([0.5, 0.0]),
                     scale=np.array([2.0, 1.0]), columns=[3, 4])
    back = ModelPart.load(part.save(tmp_path / "a.json"))
    np.testing.assert_array_equal(back.partial_score([[2.5, 1.0]]), [1.0 - 2.0])
    with pytest.raises(ValidationError, match="party 'A' holds 2 columns; X has 3"):
        back.partial_score(np.zeros((1, 3)))
    with pytest.raises(ValidationError, match="combine needs the active party's part"):
        combine([np.zeros(2)], back)
    (tmp_path / "bad.json").write_text(json.dumps({**part.to_json(), "scale": [0.0, 1.0]}))
    with pytest.raises(ValidationError, match=r"bad\.json is not a vertical model's part"):
        ModelPart.load(tmp_path / "bad.json")
