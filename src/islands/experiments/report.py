"""Helpers shared by the paper reproductions: JSON results, Markdown tables, PNG figures.

Importing this module loads only NumPy; matplotlib is imported by :func:`new_figure`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from islands.validation import check_int

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "Progress",
    "RunSetup",
    "agreement_table",
    "claim",
    "markdown_table",
    "new_figure",
    "save_figure",
    "setup_run",
    "thread_limit",
    "to_jsonable",
    "two_datasets",
    "write_json",
]

Progress = Callable[[str], None]
"""Called with a short message at each step of a reproduction."""


@dataclass(frozen=True)
class RunSetup:
    """Validated common arguments of a reproduction."""

    out: Path
    random_state: int
    n_threads: int | None
    say: Progress


def setup_run(
    owner: str, out_dir: str | Path, random_state: Any, n_threads: Any,
    progress: Progress | None,
) -> RunSetup:
    """Check a reproduction's common arguments and create its output folder."""
    seed = check_int(random_state, "random_state", owner, low=0)
    threads = None if n_threads is None else check_int(n_threads, "n_threads", owner, low=1)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say: Progress = progress if progress is not None else (lambda _msg: None)
    return RunSetup(out=out, random_state=seed, n_threads=threads, say=say)


def thread_limit(n_threads: int | None, preload: Sequence[str]) -> AbstractContextManager[Any]:
    """Limit BLAS/OpenMP pools to ``n_threads`` (None: leave them) while the run lasts.

    threadpoolctl limits only the libraries already loaded, so the modules in
    ``preload`` (e.g. ``"scipy.linalg"``, ``"sklearn.neighbors"``) are imported first.
    """
    if n_threads is None:
        return contextlib.nullcontext()
    for module in preload:
        importlib.import_module(module)
    threadpoolctl = importlib.import_module("threadpoolctl")
    limiter: AbstractContextManager[Any] = threadpoolctl.threadpool_limits(limits=n_threads)
    return limiter


def to_jsonable(obj: Any) -> Any:
    """Convert a nest of dicts, sequences and NumPy values into plain JSON types.

    Parameters
    ----------
    obj
        Any mix of dicts, lists, tuples, NumPy arrays and scalars, paths, strings,
        numbers, booleans and ``None``.

    Returns
    -------
    object
        The same structure with arrays as (nested) lists, NumPy scalars as Python
        numbers, paths as strings, mapping keys as strings, and NaN or infinite floats as
        ``None`` (strict JSON has no NaN).

    Raises
    ------
    TypeError
        For an object of any other type.
    """
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return value if math.isfinite(value) else None
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` (converted by :func:`to_jsonable`) as indented, strict JSON.

    Parameters
    ----------
    path
        File to write; its directory must exist.
    obj
        The results.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    out = Path(path)
    out.write_text(json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n",
                   encoding="utf-8")
    return out


def _cell(value: Any, floatfmt: str) -> str:
    if isinstance(value, (float, np.floating)):
        return format(float(value), floatfmt) if math.isfinite(float(value)) else "–"
    return str(value).replace("|", "\\|")


def markdown_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    floatfmt: str = ".3f",
    align: str | None = None,
) -> str:
    """Format a GitHub-flavoured Markdown table.

    Parameters
    ----------
    headers
        Column titles.
    rows
        One sequence of cells per row, each as long as ``headers``. Floats are formatted
        with ``floatfmt`` (non-finite ones as an en dash); other cells with ``str``.
    floatfmt
        Format specification for float cells.
    align
        One letter per column, ``"l"``, ``"r"`` or ``"c"``; default: the first column
        left, the others right.

    Returns
    -------
    str
        The table, ending with a newline.

    Raises
    ------
    ValueError
        If a row or ``align`` does not match the number of columns.
    """
    ncol = len(headers)
    align = align or "l" + "r" * (ncol - 1)
    if len(align) != ncol or set(align) - set("lrc"):
        raise ValueError(f"align must be {ncol} letters from 'lrc'; got {align!r}")
    marks = {"l": ":--", "r": "--:", "c": ":-:"}
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    for i, row in enumerate(rows):
        if len(row) != ncol:
            raise ValueError(f"row {i} has {len(row)} cells; expected {ncol}")
        lines.append("| " + " | ".join(_cell(v, floatfmt) for v in row) + " |")
    return "\n".join(lines) + "\n"


def new_figure(width: float = 6.4, height: float = 4.8) -> Figure:
    """Create a matplotlib figure on the Agg canvas, outside pyplot's global state.

    Parameters
    ----------
    width, height
        Size in inches.

    Returns
    -------
    matplotlib.figure.Figure
        A figure attached to a ``FigureCanvasAgg``; it needs no closing.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | Path, *, dpi: int = 110) -> Path:
    """Save a figure as PNG.

    Parameters
    ----------
    fig
        The figure, e.g. from :func:`new_figure`.
    path
        Output file (``.png``); its directory must exist.
    dpi
        Resolution.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    out = Path(path)
    fig.savefig(out, format="png", dpi=dpi)
    return out


T = TypeVar("T")


def two_datasets(fashion: T, digits: T) -> tuple[list[tuple[str, T]], dict[str, str]]:
    """Choose the reproductions' data sets: Fashion-MNIST when its files exist, digits always.

    Returns
    -------
    loaders, skipped
        ``(name, loader)`` pairs to run, and the data sets skipped with the reason.
    """
    from islands.data import find_fashion_mnist

    if find_fashion_mnist() is None:
        return [("digits", digits)], {"fashion_mnist": "Fashion-MNIST files not found"}
    return [("fashion_mnist", fashion), ("digits", digits)], {}


def claim(claim: str, finding: str, verdict: str) -> dict[str, str]:
    """One claim of a paper checked here: what it says, what was found, the verdict."""
    return {"claim": claim, "finding": finding, "verdict": verdict}


VERDICT_MARKS = {"agrees": "✔ agrees", "partly": "◐ partly", "differs": "✘ differs"}


def agreement_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], claims: Sequence[Mapping[str, str]]
) -> list[str]:
    """Markdown lines for the claims checked against a paper: a table plus a summary.

    ``rows[i]`` holds the cells describing ``claims[i]``; a verdict column is added.
    """
    table = markdown_table([*headers, "verdict"],
                           [[*row, VERDICT_MARKS[c["verdict"]]]
                            for row, c in zip(rows, claims, strict=True)],
                           align="l" * (len(headers) + 1))
    counts = {v: sum(c["verdict"] == v for c in claims) for v in VERDICT_MARKS}
    return [table, "", f"Summary: {counts['agrees']} agree, {counts['partly']} partly, "
            f"{counts['differs']} differ.", ""]
