"""Results on disk: strict JSON, Markdown tables and PNG figures, for every layer.

Jobs, audits, contribution reports and the paper reproductions write their results with
these helpers; they sit at the bottom of the package so that no protocol has to import
the reproductions (:mod:`islands.experiments`) to write a file. Importing this module
loads only NumPy; matplotlib is imported by :func:`new_figure`.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["JsonResult", "JsonRow", "html_table", "markdown_table", "new_figure", "save_figure",
           "short_text", "to_jsonable", "write_json", "write_results"]


@runtime_checkable
class JsonResult(Protocol):
    """A typed result that gives its JSON form (plain dicts, lists and numbers)."""

    def to_json(self) -> dict[str, Any]:
        """Return the result as JSON-ready values."""
        ...


class JsonRow:
    """Mixin for a dataclass whose JSON form is its fields, in order (shallow)."""

    def to_json(self) -> dict[str, Any]:
        """Return the fields by name, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


def to_jsonable(obj: Any) -> Any:
    """Convert a nest of dicts, sequences and NumPy values into plain JSON types.

    Parameters
    ----------
    obj
        Any mix of dicts, lists, tuples, NumPy arrays and scalars, paths, strings,
        numbers, booleans, ``None`` and results with a ``to_json()`` method (typed
        results such as :class:`islands.hfl.job.HflJobResult`).

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
    if isinstance(obj, JsonResult):
        return to_jsonable(obj.to_json())
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


def write_results(result: JsonResult, out: str | Path, json_path: str | Path | None = None
                  ) -> tuple[Path, list[Path]]:
    """Write ``result`` as ``out/results.json`` (making ``out``), and also to ``json_path``.

    Returns
    -------
    tuple
        The folder ``out`` (for the figures that go beside it) and the files written.
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    doc = result.to_json()
    written = [write_json(folder / "results.json", doc)]
    if json_path is not None:
        written.append(write_json(json_path, doc))
    return folder, written


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


def short_text(value: Any) -> str:
    """Return ``value`` as a short table cell (floats to 4 digits, arrays by shape)."""
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.4g}"
    if isinstance(value, np.ndarray):
        return f"array {'×'.join(map(str, value.shape))} {value.dtype}"
    if isinstance(value, Mapping):
        return short_text(f"{len(value)} entries: {', '.join(map(str, value))}")
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"{len(value)} values, last {short_text(value[-1])}"
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def html_table(title: str, rows: Iterable[tuple[str, Any]], *,
               settings: Mapping[str, Any] | None = None, open_settings: bool = False) -> str:
    """Return a small HTML table (every cell escaped, no script) with optional settings.

    Parameters
    ----------
    title
        The caption.
    rows
        ``(name, value)`` pairs shown first.
    settings
        Shown below them in a ``<details>`` block, collapsed unless ``open_settings``.
    """
    def body(pairs: Iterable[tuple[str, Any]]) -> str:
        return "".join(f"<tr><th style=\"text-align:left\">{html.escape(str(k))}</th>"
                       f"<td style=\"text-align:left\">{html.escape(short_text(v))}</td></tr>"
                       for k, v in pairs)

    out = (f"<table><caption style=\"text-align:left\"><b>{html.escape(title)}</b></caption>"
           f"{body(rows)}</table>")
    if settings:
        out += (f"<details{' open' if open_settings else ''}><summary>settings "
                f"({len(settings)})</summary>"
                f"<table>{body(settings.items())}</table></details>")
    return f"<div class=\"islands\">{out}</div>"
