"""``islands report RUN_DIR``: one self-contained HTML page per run folder, checked in Chromium.

The pages are built from real runs (a tiny ``islands run`` job through the command line, as
a user runs it) and from hand-made folders (a reproduction, a kind the page does not know,
strings, NaN and missing files where numbers and figures are expected). Where Debian's
``chromium`` is installed, headless Chromium loads each page from disk and every image
must load with no console error; the checker itself is shown to fail on a broken page.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chromium import check_page, find_chromium
from islands.errors import ValidationError
from islands.reporting import new_figure, save_figure
from islands.run_report import render_html, write_html

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
needs_chromium = pytest.mark.skipif(
    find_chromium() is None,
    reason="headless Chromium is not installed (Debian: apt-get install chromium; "
           ".ci/run installs it when run as root)")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "islands.cli", *args], env=ENV,
                          capture_output=True, text=True, timeout=600)


def _images(page: str) -> list[str]:
    return re.findall(r'<img src="([^"]*)"', page)


def _assert_self_contained(page: str) -> None:
    assert "<script" not in page
    external = [u for u in re.findall(r'(?:src|href)="([^"]*)"', page)
                if not u.startswith("data:image/png;base64,")]
    assert external == []


def _assert_loads_in_chromium(page: Path, images: int) -> None:
    if find_chromium() is None:
        return
    check = check_page(page)
    assert check.errors == []
    assert len(check.images) == images
    assert check.broken_images == []
    assert check.overflowing_images == []


def _png(path: Path) -> Path:
    fig = new_figure(3, 2)
    fig.subplots().plot([0, 1], [1, 0])
    return save_figure(fig, path, dpi=50)


@pytest.fixture(scope="module")
def hfl_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny FedAvg job with contribution shares, run by ``islands run --set``."""
    tmp = tmp_path_factory.mktemp("hfl")
    job = tmp / "job.toml"
    job.write_text((ROOT / "examples" / "fedavg-contribution.toml").read_text()
                   .replace('output = "runs/fedavg-contribution"', f'output = "{tmp / "run"}"'))
    done = _cli("run", str(job), "--set", "epochs=2", "--set", 'contribution.methods=["loo"]')
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp / "run"


def test_hfl_job_page_through_the_cli(hfl_run: Path, tmp_path: Path) -> None:
    done = _cli("report", str(hfl_run))
    assert done.returncode == 0, done.stdout + done.stderr
    page_path = hfl_run / "report.html"
    assert str(page_path) in done.stdout.replace("\n", "")
    page = page_path.read_text(encoding="utf-8")
    _assert_self_contained(page)
    for text in ("fedavg-contribution", "horizontal federated learning job",
                 "Overrides from the command line (--set)", "contribution.methods",
                 "test accuracy per epoch", "τ per round", "bytes per party",
                 "confusion matrix", "reward share per client", "accuracy.png", "tau.png",
                 "contribution.png"):
        assert text in page, text
    # 5 drawn (curves, τ, bytes, confusion, shares) + the job's 3 PNGs
    assert len(_images(page)) == 8
    _assert_loads_in_chromium(page_path, 8)

    # --out elsewhere: the same page, figures still inlined
    other = tmp_path / "elsewhere.html"
    assert _cli("report", str(hfl_run), "--out", str(other)).returncode == 0
    assert len(_images(other.read_text(encoding="utf-8"))) == 8


def test_not_a_run_folder_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    _png(empty / "stray.png")
    done = _cli("report", str(empty))
    assert done.returncode == 2
    assert f"{empty} is not a run folder" in done.stdout.replace("\n", "")
    assert not (empty / "report.html").exists()
    with pytest.raises(ValidationError, match="does not exist"):
        write_html(tmp_path / "nowhere")
    with pytest.raises(ValidationError, match="is not a run folder: it is a file"):
        write_html(empty / "stray.png")
    (empty / "results.json").write_text("{not json")
    with pytest.raises(ValidationError, match=r"results.json is not JSON"):
        write_html(empty)
    (empty / "results.json").write_text("{}")
    with pytest.raises(ValidationError, match=r"its folder .* does not exist"):
        write_html(empty, tmp_path / "no" / "page.html")


def test_reproduction_page_inlines_the_reports_figures(tmp_path: Path) -> None:
    run = tmp_path / "pca"
    run.mkdir()
    _png(run / "q_vs_epsilon.png")
    _png(run / "extra.png")
    (run / "not-a-png.png").write_bytes(b"GIF89a")
    (run / "report.md").write_text(
        "# Reproduction\n\n| mode | q |\n|:--|--:|\n| secure | 0.9 |\n\n"
        "![q against ε](q_vs_epsilon.png)\n\n![gone](absent.png)\n\n"
        "<script>alert(1)</script>\n", encoding="utf-8")
    (run / "results.json").write_text(json.dumps({
        "settings": {"quick": True, "epsilons": [0.2, 0.9]},
        "rows": [{"mode": "secure", "q": 0.9}],
        "agreement": [{"claim": "q grows with ε", "verdict": "agrees"}],
        "figures": ["q_vs_epsilon.png"], "wall_time_s": 3.5}))
    page_path = write_html(run)
    page = page_path.read_text(encoding="utf-8")
    _assert_self_contained(page)
    assert "paper reproduction" in page and "<table>" in page
    assert "[figure missing: absent.png]" in page
    assert "not-a-png.png: not a PNG image" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # raw HTML is shown, not run
    # q_vs_epsilon.png once (in the report), extra.png in the folder's figures
    assert page.count("<figcaption>q_vs_epsilon.png") == 0
    assert len(_images(page)) == 2
    _assert_loads_in_chromium(page_path, 2)


def test_a_figure_in_a_subfolder_is_inlined_one_outside_the_folder_is_not(
        tmp_path: Path) -> None:
    # islands demo writes its gradient audit's figure to hfl_audit/ and names it in report.md
    run = tmp_path / "demo"
    (run / "hfl_audit").mkdir(parents=True)
    wide = new_figure(30, 3)  # 1500 px at 50 dpi: wider than the page's 1100 px
    wide.subplots().plot([0, 1], [1, 0])
    save_figure(wide, run / "hfl_audit" / "gradient_leakage.png", dpi=50)
    _png(run / "gradient_leakage.png")  # same name at the top: a different figure
    _png(tmp_path / "outside.png")
    (run / "report.md").write_text(
        "# demo\n\n![audit](hfl_audit/gradient_leakage.png)\n\n![out](../outside.png)\n",
        encoding="utf-8")
    (run / "results.json").write_text(json.dumps({
        "settings": {"quick": True, "seed": 0, "parts": ["hfl"]},
        "parts": {"hfl": {"figures": ["hfl_audit/gradient_leakage.png"]}}}))
    page_path = write_html(run)
    page = page_path.read_text(encoding="utf-8")
    _assert_self_contained(page)
    assert "demo (islands demo)" in page
    assert "[figure missing: hfl_audit/gradient_leakage.png]" not in page
    assert "[figure missing: ../outside.png]" in page
    # the top-level figure of the same name is still shown, among the folder's figures
    assert "<figcaption>gradient_leakage.png</figcaption>" in page
    assert len(_images(page)) == 2
    _assert_loads_in_chromium(page_path, 2)


def test_unknown_kind_with_strings_nan_and_markup(tmp_path: Path) -> None:
    run = tmp_path / "odd"
    run.mkdir()
    # Python's json writes NaN; strings and nulls sit where numbers are expected
    (run / "results.json").write_text(json.dumps({
        "name": "<b>odd</b>", "score": math.nan, "tau": ["four", None, math.nan],
        "epsilon": [None, None], "history": [{"epoch": 1, "test": {"accuracy": "high"}}],
        "nested": {"deeper": {"loss_history": [1.0, math.nan, 0.5]}},
        "labels": [0, 1, 1, 2], "predictions": [0, 1, 2, 2],
        "long": list(range(100))}))
    page_path = write_html(run, tmp_path / "odd.html")
    page = page_path.read_text(encoding="utf-8")
    _assert_self_contained(page)
    assert "&lt;b&gt;odd&lt;/b&gt;" in page and "<b>odd</b>" not in page
    assert "NaN" in page and "… 88 more" in page
    assert "τ per round" not in page and "ε spent" not in page  # nothing finite to draw
    assert "nested.deeper: training loss per epoch" in page
    assert "confusion matrix" in page
    assert len(_images(page)) == 2
    _assert_loads_in_chromium(page_path, 2)


def test_vertical_and_contribution_figures(tmp_path: Path) -> None:
    run = tmp_path / "vfl"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({
        "job": {"name": "vfl", "model": {"kind": "logistic"}},
        "loss_history": [0.69, 0.5, 0.4], "bytes_by_tag": {"psi": 10_000, "grad": 2e6},
        "metrics": {"auc": 0.99}, "wall_time_s": 1.0}))
    page = render_html(run)
    assert "vertical federated learning job" in page and "metrics.auc" in page
    assert "training loss per epoch" in page and "bytes per message tag" in page
    shares = tmp_path / "shares"
    shares.mkdir()
    (shares / "results.json").write_text(json.dumps({
        "clients": ["a", "b"], "shares": [0.25, 0.75], "primary": "gtg"}))
    page = render_html(shares)
    assert "contribution report" in page and "reward share per client" in page


@needs_chromium
def test_the_browser_check_catches_a_broken_page(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img src="missing.png">'
                   '<img src="data:image/png;base64,AAAA">'
                   '<script>console.error("boom"); notDefined();</script></body></html>')
    check = check_page(bad)
    assert len(check.images) == 2 and len(check.broken_images) == 2
    text = "\n".join(check.errors)
    assert "ERR_FILE_NOT_FOUND" in text and "boom" in text and "notDefined" in text
