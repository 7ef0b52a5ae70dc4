"""Tables and charts of contribution results (``islands contribution RUN_DIR``).

They read a :class:`~islands.hfl.contribution.ContributionReport`, as a run made it or
as :func:`load_contribution` reads it back from the ``contribution`` mapping a job writes
into ``results.json`` (:meth:`~islands.hfl.contribution.ContributionReport.to_dict`), so
a finished run can be shown without its data or model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from islands.errors import DataNotFoundError, ValidationError
from islands.hfl.contribution.tracker import ContributionReport
from islands.reporting import check_result_set, new_figure, save_figure

__all__ = ["contribution_rows", "load_contribution", "plot_contribution", "text_bars"]

LABELS = {"gtg": "GTG-Shapley", "exact": "exact Shapley (per round)",
          "or": "one-round reconstruction", "loo": "leave-one-out",
          "retrain": "exact Shapley (retraining)", "retrain_loo": "leave-one-out (retraining)"}


def load_contribution(run_dir: str | Path) -> ContributionReport:
    """Read the ``contribution`` results of a run folder (its ``results.json``).

    Raises
    ------
    DataNotFoundError
        If there is no ``results.json``.
    ValidationError
        If the run measured no contribution, or the folder's files are not one run's
        complete set.
    """
    path = Path(run_dir) / "results.json"
    if not path.is_file():
        raise DataNotFoundError(f"no results.json in {run_dir}: is it the output folder of "
                                "an 'islands run'?")
    check_result_set(run_dir)  # one run's complete set, not a write cut short
    try:
        result = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{path} is not valid JSON ({exc})") from exc
    found = result.get("contribution") if isinstance(result, dict) else None
    if not isinstance(found, dict):
        raise ValidationError(f"the run in {run_dir} measured no contribution: add a "
                              "[contribution] section to its job file and run it again")
    return ContributionReport.from_dict(found, where=f" in {path}")


def contribution_rows(report: ContributionReport) -> tuple[list[str], list[list[Any]]]:
    """Headers and one row per client: each method's score (± half-width) and the share."""
    methods = list(report.scores)
    headers = ["client", *(LABELS.get(m, m) for m in methods), "share"]
    rows = []
    for k, name in enumerate(report.clients):
        cells: list[Any] = [name]
        for m in methods:
            score = float(report.scores[m][k])
            hw = report.halfwidth.get(m)
            cells.append(f"{score:+.4f}" + ("" if hw is None else f" ± {float(hw[k]):.4f}"))
        cells.append(f"{100 * float(report.shares[k]):.1f}%")
        rows.append(cells)
    return headers, rows


def text_bars(report: ContributionReport, width: int = 40) -> list[str]:
    """Draw a bar per client of the primary method's score, for a terminal (signed, to scale)."""
    scores = np.asarray(report.scores[report.primary], dtype=np.float64)
    top = float(np.max(np.abs(scores))) if scores.size else 0.0
    names = [str(c) for c in report.clients]
    pad = max(len(c) for c in names)
    half = width // 2
    lines = []
    for name, s in zip(names, scores, strict=True):
        n = 0 if top == 0 else round(abs(s) / top * half)
        left = ("█" * n).rjust(half) if s < 0 else " " * half
        right = ("█" * n).ljust(half) if s >= 0 else " " * half
        lines.append(f"{name.ljust(pad)} {left}│{right} {s:+.4f}")
    return lines


def plot_contribution(report: ContributionReport, path: str | Path, *,
                      title: str = "client contributions") -> Path:
    """Bar chart: every method's scores (error bars where known) and the reward shares."""
    clients = [str(c) for c in report.clients]
    methods = list(report.scores)
    x = np.arange(len(clients))
    fig = new_figure(max(6.4, 0.9 * len(clients) + 3), 6.4)
    ax, ax2 = fig.subplots(2, 1, height_ratios=[2, 1])
    width = 0.8 / max(len(methods), 1)
    for j, m in enumerate(methods):
        hw = report.halfwidth.get(m)
        ax.bar(x + (j - (len(methods) - 1) / 2) * width, report.scores[m], width,
               yerr=hw, capsize=3 if hw is not None else 0, label=LABELS.get(m, m))
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, clients, rotation=30 if len(clients) > 8 else 0)
    ax.set_ylabel("contribution (utility units)")
    gain = report.gain
    ax.set_title(title if gain is None or not math.isfinite(gain)
                 else f"{title} (total gain {gain:+.3f})")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    ax2.bar(x, [100 * float(s) for s in report.shares], color="tab:green")
    ax2.set_xticks(x, clients, rotation=30 if len(clients) > 8 else 0)
    ax2.set_ylabel(f"reward share, % ({LABELS.get(report.primary, report.primary)})")
    ax2.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)
