"""islands.load_run and the HTML the notebook shows: a real job, a real Jupyter kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import islands
from islands.errors import DataNotFoundError, ValidationError
from islands.pca import FederatedPCA
from islands.runs import HorizontalRun, Reproduction, VerticalRun, load_run

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A three-round federated ridge regression, run as a user runs it."""
    out = tmp_path_factory.mktemp("run") / "lr"
    subprocess.run([sys.executable, "-m", "islands.cli", "run",
                    str(ROOT / "examples" / "linear-regression.toml"), "--output", str(out),
                    "--set", "epochs=3"], check=True, capture_output=True, env=_env(),
                   timeout=300)
    return out


def test_load_run_reads_a_horizontal_job(tiny_run: Path) -> None:
    run = islands.load_run(tiny_run)
    doc = json.loads((tiny_run / "results.json").read_text())
    assert isinstance(run, HorizontalRun) and run.name == "linear-regression"
    assert run.settings["overrides"] == {"epochs": 3}
    assert [h["epoch"] for h in run.history] == [1, 2, 3]
    assert run.history[-1]["test_r2"] == doc["history"][-1]["test"]["r2"]
    assert run.metrics["r2"] == doc["r2"] and run.contribution is None
    html = run._repr_html_()
    assert "HorizontalRun linear-regression" in html and "<script" not in html
    # print(run) is one short line, not every epoch's figures and every setting
    text = repr(run)
    assert text.startswith("HorizontalRun(name='linear-regression', path=")
    assert "history=<3 rows>" in text and "'r2'" in text and "overrides" not in text


def test_history_frame_needs_pandas_or_says_so(tiny_run: Path) -> None:
    run = load_run(tiny_run)
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"pandas: pip install 'islands\[notebook\]'"):
            run.history_frame()
    else:
        frame = run.history_frame()
        assert list(frame["epoch"]) == [1, 2, 3] and "test_r2" in frame.columns


def test_load_run_reads_a_vertical_job_and_a_reproduction(tmp_path: Path) -> None:
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "results.json").write_text(json.dumps(
        {"job": {"name": "vfl"}, "loss_history": [0.7, 0.5], "metrics": {"auc": 0.9}}))
    run = load_run(tmp_path / "v")
    assert isinstance(run, VerticalRun) and run.history == [{"epoch": 1, "loss": 0.7},
                                                            {"epoch": 2, "loss": 0.5}]
    assert run.metrics == {"auc": 0.9}
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results.json").write_text(json.dumps(
        {"settings": {"quick": True}, "rows": [{"k": 1, "acc": {"fed": 0.8}}],
         "agreement": [{"claim": "c", "finding": "f", "verdict": "agrees"}],
         "figures": [], "wall_time_s": 1.0}))
    (tmp_path / "r" / "report.md").write_text("# report <b>")
    rep = load_run(tmp_path / "r")
    assert isinstance(rep, Reproduction) and rep.history == [{"k": 1, "acc_fed": 0.8}]
    assert rep.metrics["claims agrees"] == 1 and rep.report == "# report <b>"


def test_load_run_names_the_folder_or_file_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="no folder"):
        load_run(tmp_path / "missing")
    with pytest.raises(DataNotFoundError, match=f"no results.json in {tmp_path}"):
        load_run(tmp_path)
    file = tmp_path / "results.json"
    file.write_text('{"job": {"name": ')
    with pytest.raises(ValidationError, match=f"{file} is not valid JSON"):
        load_run(tmp_path)
    file.write_text("[1, 2]")
    with pytest.raises(ValidationError, match=f"{file} holds a list"):
        load_run(tmp_path)
    file.write_text('{"answer": 42}')
    with pytest.raises(ValidationError, match=f"{file} is not the results of a known run"):
        load_run(tmp_path)


def test_estimator_html_is_escaped_and_says_whether_it_is_fitted() -> None:
    est = FederatedPCA(2, mode="plain")
    assert "fitted</th><td style=\"text-align:left\">no" in est._repr_html_()
    rng = np.random.default_rng(0)
    est.fit([rng.normal(size=(20, 4)) for _ in range(2)])
    html = est._repr_html_()
    assert "fitted</th><td style=\"text-align:left\">yes" in html
    assert "components_" in html and "array 2×4 float64" in html and "<script" not in html
    assert "&#x27;" in html  # dp_void_reason_ quotes mode='plain', escaped


def test_a_jupyter_kernel_loads_a_run_and_displays_an_estimator(tiny_run: Path) -> None:
    manager = pytest.importorskip("jupyter_client.manager")
    pytest.importorskip("ipykernel")
    code = (
        "import islands\n"
        "from islands.cca import SwarmCCA\n"
        f"run = islands.load_run({str(tiny_run)!r})\n"
        "display(run)\n"
        "display(SwarmCCA(n_components=2))\n"
        "from islands.progress import task\n"
        "with task(True, 'keys', 2) as t:\n"
        "    t.advance(info='half')\n"
    )
    km, kc = manager.start_new_kernel(kernel_name="python3", cwd=str(ROOT), env=_env())
    shown: list[dict[str, str]] = []
    errors: list[str] = []

    def hook(msg: dict[str, object]) -> None:
        content = msg["content"]
        assert isinstance(content, dict)
        if msg["msg_type"] in ("display_data", "update_display_data", "execute_result"):
            shown.append(content["data"])
        elif msg["msg_type"] == "error":
            errors.append(str(content.get("evalue")))
        elif msg["msg_type"] == "stream" and content.get("name") == "stderr":
            errors.append(str(content.get("text")))

    try:
        reply = kc.execute_interactive(code, timeout=120, output_hook=hook)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok" and not errors, errors
    html = [d.get("text/html", "") for d in shown]
    assert "<b>HorizontalRun linear-regression</b>" in html[0] and "test_r2" not in html[0]
    assert "<b>SwarmCCA</b>" in html[1] and "n_components" in html[1]
    assert all("<script" not in h for h in html)
    # the progress bar is one display, updated in place, ending at 2/2
    assert len(shown) >= 3 and "2/2" in shown[-1]["text/plain"]
    assert "keys" in shown[-1]["text/html"]


# The main tables of the reproductions' results.json, trimmed from real quick runs
# (islands reproduce NAME --quick): each nests its table differently.
_APFL = {"settings": {"quick": True}, "schedule": {"cl_steps": 42, "mbs_batches": [26, 19]},
         "rows": {"CL": {"accuracy": 0.763, "per_class_accuracy": [0.9, 0.94], "bytes": 0},
                  "APFL": {"accuracy": 0.666, "per_class_accuracy": [0.8, 0.7],
                           "bytes": 5120}},
         "sensitivity": {"tau": {"4": {"accuracy": 0.7}}}, "agreement": [], "figures": [],
         "wall_time_s": 44.6}
_FTL = {"settings": {}, "fashion_mnist": {
            "rows": [{"overlap_fraction": 0.02, "ftl": {"accuracy": 0.61, "loss_history": [1.0]}},
                     {"overlap_fraction": 0.1, "ftl": {"accuracy": 0.7, "loss_history": [0.9]}}],
            "b_rows": 6000, "model": {"dim": 32}},
        "breast_cancer": {"runs": {"10%": [{"repeat": 0}], "30%": [{"repeat": 0}]},
                          "summary": {"10%": {"ftl_auc": 0.9}, "30%": {"ftl_auc": 0.95}}},
        "agreement": [], "figures": [], "wall_time_s": 519.0}
_SCCA = {"settings": {}, "datasets": {
             "fashion_mnist": {"title": "Fashion-MNIST", "p": 392,
                               "threshold": {"ratios": [1.0, 0.9], "n_pairs": 390}},
             "digits": {"title": "digits", "p": 32,
                        "threshold": {"ratios": [1.0, 0.5], "n_pairs": 30}}},
         "agreement": [], "skipped": {}, "figures": [], "wall_time_s": 121.0}
_CONTRIBUTION = {"settings": {}, "clients": [{"name": "c1", "rows": 100},
                                             {"name": "c2", "rows": 50}],
                 "federation": {"rounds": 3}, "comparison": [{"method": "gtg"}],
                 "agreement": [], "figures": [], "wall_time_s": 63.7}


@pytest.mark.parametrize(("doc", "history"), [
    (_APFL, [{"name": "CL", "accuracy": 0.763, "bytes": 0},
             {"name": "APFL", "accuracy": 0.666, "bytes": 5120}]),
    (_FTL, [{"overlap_fraction": 0.02, "ftl_accuracy": 0.61, "ftl_loss_history": [1.0]},
            {"overlap_fraction": 0.1, "ftl_accuracy": 0.7, "ftl_loss_history": [0.9]}]),
    (_SCCA, [{"name": "fashion_mnist", "title": "Fashion-MNIST", "p": 392,
              "threshold_n_pairs": 390},
             {"name": "digits", "title": "digits", "p": 32, "threshold_n_pairs": 30}]),
    (_CONTRIBUTION, [{"name": "c1", "rows": 100}, {"name": "c2", "rows": 50}]),
], ids=["apfl", "ftl", "scca", "contribution"])
def test_a_reproductions_history_is_its_main_table(tmp_path: Path, doc: dict[str, object],
                                                   history: list[dict[str, object]]) -> None:
    (tmp_path / "results.json").write_text(json.dumps(doc))
    run = load_run(tmp_path)
    assert isinstance(run, Reproduction)
    assert run.history == history
