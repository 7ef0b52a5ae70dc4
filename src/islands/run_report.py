"""One self-contained HTML page for a run folder (``islands report RUN_DIR``).

Every run writes a folder: ``islands run JOB.toml`` (``results.json`` and its curves),
``islands reproduce NAME`` (``report.md``, ``results.json`` and PNG figures), ``islands
contribution`` and the audits. :func:`write_html` turns any such folder into one
``report.html`` that a browser opens from disk with no network access and no JavaScript:
the figures are PNGs inlined as ``data:`` URIs and the style sheet is in the page.

The page holds, each where the folder has the data: a header (what ran, when, the islands
version), the configuration (the job or reproduction settings and the ``--set`` overrides
recorded in ``results.json``), ``report.md`` rendered (markdown-it-py, raw HTML off), the
figures this module draws from ``results.json`` (test metrics per epoch against the
centralised baseline, the clients' local accuracy, τ per round, ε spent per round, bytes
sent and received per party, the confusion matrix, contribution shares per client, the
loss per epoch), every PNG of the folder, and the whole of ``results.json`` as a table.
A folder of an unknown kind still gets its configuration, its JSON and its PNGs.

The figures are looked for by key in ``results.json`` and in the mappings nested in it (up
to :data:`MAX_DEPTH` levels), so that a reproduction's or a demo's sections get theirs as
a job does. Only ``report.html`` is hand-written here: an HTML page is a few templates, and
a template engine would add a dependency for no gain. This module imports NumPy only;
matplotlib and markdown-it-py are imported when a page is drawn.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import islands
from islands.errors import ValidationError
from islands.reporting import check_result_set, new_figure, write_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MAX_DEPTH", "render_html", "write_html"]

MAX_DEPTH = 3
"""How deep in ``results.json``'s mappings figures are looked for (0: the top level only)."""

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_MAX_FIGURES = 40  # drawn figures per page; a page with more is unreadable anyway
_MAX_LIST = 12  # list items shown in the JSON table before "… N more"

_STYLE = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
color:#1d2430;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
header{background:#1d3557;color:#fff;padding:20px 24px}
header h1{margin:0 0 4px;font-size:24px}header p{margin:0;opacity:.85}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:16px 20px;
margin:0 0 20px}
h2{margin:0 0 12px;font-size:19px}h3{font-size:16px}
table{border-collapse:collapse;margin:8px 0;font-size:14px}
td,th{border:1px solid #dde1e7;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:13px}tr.override td,dl .override{background:#fff4d6}
dl.pairs{columns:3 260px;column-gap:24px;margin:0}
dl.pairs div{break-inside:avoid;display:flex;gap:8px;padding:2px 4px;
border-bottom:1px solid #eef1f5}
dt{font:13px ui-monospace,monospace;color:#5a6475;flex:0 0 45%;overflow-wrap:anywhere}
dd{margin:0;overflow-wrap:anywhere}
figure{display:inline-block;width:calc(50% - 16px);margin:8px 12px 8px 0;vertical-align:top}
figure img{width:100%;height:auto;border:1px solid #eef1f5}
section img{max-width:100%;height:auto}
figcaption{font-size:13px;color:#5a6475}
.missing{color:#a4262c}.note{color:#5a6475;font-size:13px}
details summary{cursor:pointer;font-weight:600}
"""


def write_html(run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None
               ) -> Path:
    """Write a run folder's self-contained ``report.html``.

    Parameters
    ----------
    run_dir
        A folder written by ``islands run``, ``islands reproduce``, ``islands
        contribution`` or an audit's ``--json``: it holds a ``results.json`` or a
        ``report.md`` (and any PNG figures).
    out
        The page to write; default ``run_dir/report.html``. Its folder must exist.

    Returns
    -------
    pathlib.Path
        The page written.

    Raises
    ------
    islands.errors.ValidationError
        If ``run_dir`` is not a run folder, its ``results.json`` is not JSON, or the
        folder of ``out`` does not exist.
    """
    folder = Path(run_dir)
    target = folder / "report.html" if out is None else Path(out)
    page = render_html(folder)
    if not target.parent.is_dir():
        raise ValidationError(f"cannot write {target}: its folder {target.parent} does not exist")
    return write_text(target, page)


def render_html(run_dir: str | os.PathLike[str]) -> str:
    """Return a run folder's page as one HTML document (see :func:`write_html`)."""
    folder = Path(run_dir)
    results, report_md, pngs = _read_folder(folder)
    kind, title = _describe(results, folder)
    parts = [_header(title, kind, folder, results)]
    parts.append(_summary_section(results))
    if kind != _DEMO:  # every demo part draws its own figures, shown with its report.md
        parts.append(_figures_section(results))
    shown: set[str] = set()
    if report_md is not None:
        parts.append(_section("Report", _markdown(report_md, folder, shown)))
    rest = [p for p in pngs if str(p.resolve()) not in shown]
    if rest:
        parts.append(_section("Figures of the run", "".join(_png_figure(p) for p in rest)))
    parts.append(_config_section(results))
    if results is not None:
        parts.append(_section("results.json", "<details><summary>Every value "
                              f"({_count_leaves(results)} values)</summary>"
                              f"{_json_table(results)}</details>"))
    body = "\n".join(p for p in parts if p)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)} · islands report</title><style>{_STYLE}</style></head>"
            f"<body>{body}</main></body></html>\n")


# ------------------------------------------------------------------------ the folder
def _read_folder(folder: Path) -> tuple[Any, str | None, list[Path]]:
    if not folder.exists():
        raise ValidationError(f"run folder {folder} does not exist")
    if not folder.is_dir():
        raise ValidationError(f"{folder} is not a run folder: it is a file, not a folder")
    results_path, report_path = folder / "results.json", folder / "report.md"
    if not results_path.is_file() and not report_path.is_file():
        raise ValidationError(f"{folder} is not a run folder: it holds neither results.json "
                              "nor report.md (islands run and islands reproduce write them)")
    check_result_set(folder)  # one run's complete set, not a write cut short
    pngs = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".png" and p.is_file())
    results: Any = None
    if results_path.is_file():
        text = results_path.read_text(encoding="utf-8", errors="replace")
        try:
            results = json.loads(text)  # NaN and Infinity, which Python writes, are read
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{results_path} is not JSON: {exc}") from exc
    report_md = (report_path.read_text(encoding="utf-8", errors="replace")
                 if report_path.is_file() else None)
    return results, report_md, pngs


_DEMO = "demo (islands demo)"


def _describe(results: Any, folder: Path) -> tuple[str, str]:
    """Return the kind of run and the page's title."""
    name = folder.resolve().name
    if not isinstance(results, Mapping):
        return ("run", name)
    job = results.get("job")
    if isinstance(job, Mapping):
        title = str(job.get("name", name))
        if job.get("kind") == "secureboost":
            return ("SecureBoost job (islands run)", title)
        if "loss_history" in results:
            return ("vertical federated learning job (islands run)", title)
        if "history" in results or "tau" in results:
            return ("horizontal federated learning job (islands run)", title)
        return ("job (islands run)", title)
    if "settings" in results and "agreement" in results:
        return ("paper reproduction (islands reproduce)", name)
    if isinstance(results.get("parts"), Mapping) and "settings" in results:
        return (_DEMO, name)
    if "shares" in results and "clients" in results:
        return ("contribution report (islands contribution)", name)
    return ("run", name)


def _header(title: str, kind: str, folder: Path, results: Any) -> str:
    source = folder / "results.json"
    if not source.exists():
        source = folder
    when = datetime.fromtimestamp(source.stat().st_mtime, tz=timezone.utc)
    facts = [f"{_e(kind)}", f"written {when:%Y-%m-%d %H:%M} UTC"]
    wall = results.get("wall_time_s") if isinstance(results, Mapping) else None
    if isinstance(wall, (int, float)) and not isinstance(wall, bool):
        facts.append(f"{float(wall):.1f} s")
    facts.append(f"islands {_e(str(islands.__version__))}")
    return (f"<header><h1>{_e(title)}</h1><p>{' · '.join(facts)}</p>"
            f"<p class=\"note\">{_e(str(folder))}</p></header><main>")


# ------------------------------------------------------------------------ sections
def _section(title: str, inner: str) -> str:
    return f"<section><h2>{_e(title)}</h2>{inner}</section>"


def _config_section(results: Any) -> str:
    if not isinstance(results, Mapping):
        return ""
    blocks = []
    for key in ("job", "settings"):
        conf = results.get(key)
        if not isinstance(conf, Mapping):
            continue
        given = conf.get("overrides")
        overrides: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        if overrides:
            rows = "".join(f"<tr class=\"override\"><td><code>{_e(str(k))}</code></td>"
                           f"<td>{_value(v)}</td></tr>" for k, v in overrides.items())
            blocks.append("<h3>Overrides from the command line (--set)</h3>"
                          f"<table><tr><th>setting</th><th>value</th></tr>{rows}</table>")
        flat = [(k, v) for k, v in _flatten(conf) if not k.startswith("overrides")]
        label = "The job" if key == "job" else "Settings"
        blocks.append(f"<h3>{label}</h3>{_pairs(flat, marked=set(overrides))}")
    return _section("Configuration", "".join(blocks)) if blocks else ""


def _summary_section(results: Any) -> str:
    if not isinstance(results, Mapping):
        return ""
    rows = [(str(k), v) for k, v in results.items()
            if (v is None or isinstance(v, (str, bool, int, float))) and k != "wall_time_s"]
    if isinstance(results.get("metrics"), Mapping):
        rows += [(f"metrics.{k}", v) for k, v in results["metrics"].items()
                 if isinstance(v, (str, bool, int, float))]
    if not rows:
        return ""
    return _section("Key figures", _pairs(rows))


def _pairs(rows: Sequence[tuple[str, Any]], marked: set[str] | None = None) -> str:
    """Lay out key, value pairs in columns (a definition list)."""
    marked = marked or set()
    flag = ' class="override"'
    items = "".join(f"<div{flag if k in marked else ''}><dt>{_e(k)}</dt>"
                    f"<dd>{_value(v)}</dd></div>" for k, v in rows)
    return f"<dl class=\"pairs\">{items}</dl>"


def _markdown(text: str, folder: Path, shown: set[str]) -> str:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    tokens = md.parse(text)
    for token in tokens:
        for child in token.children or ():
            if child.type != "image":
                continue
            src = str(child.attrGet("src") or "")
            data = _local_png(folder, src)
            if data is None:
                # a figure the folder lacks: its alt text, not a broken image
                child.type, child.tag, child.nesting = "text", "", 0
                child.content = f"[figure missing: {src}]"
                child.children = None
                continue
            shown.add(str((folder / src).resolve()))
            child.attrSet("src", _data_uri(data))
    return str(md.renderer.render(tokens, md.options, {}))


def _local_png(folder: Path, src: str) -> bytes | None:
    if not src or "://" in src or src.startswith(("/", "data:")):
        return None
    path = (folder / src).resolve()
    # a figure in a subfolder (the demo's hfl_audit/) is the run's; one outside it is not
    if not path.is_relative_to(folder.resolve()) or not path.is_file():
        return None
    data = path.read_bytes()
    return data if data.startswith(_PNG_MAGIC) else None


def _png_figure(path: Path) -> str:
    data = path.read_bytes()
    if not data.startswith(_PNG_MAGIC):
        return (f"<p class=\"missing\">{_e(path.name)}: not a PNG image "
                f"({len(data)} bytes), left out</p>")
    return (f"<figure><img src=\"{_data_uri(data)}\" alt=\"{_e(path.name)}\">"
            f"<figcaption>{_e(path.name)}</figcaption></figure>")


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


# ------------------------------------------------------------------------ figures
def _figures_section(results: Any) -> str:
    if not isinstance(results, Mapping):
        return ""
    figures: list[str] = []
    for path, node in _mappings(results, "", 0):
        for caption, fig in _node_figures(node, path):
            if len(figures) == _MAX_FIGURES:
                break
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=90)
            figures.append(f"<figure><img src=\"{_data_uri(buf.getvalue())}\" "
                           f"alt=\"{_e(caption)}\"><figcaption>{_e(caption)}</figcaption>"
                           "</figure>")
    if not figures:
        return ""
    return _section("Figures drawn from results.json", "".join(figures))


def _mappings(node: Mapping[str, Any], path: str, depth: int
              ) -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield path, node
    if depth >= MAX_DEPTH:
        return
    for key, value in node.items():
        # the baseline and the contribution report are drawn with the run that holds them
        if isinstance(value, Mapping) and key not in ("baseline", "contribution", "job",
                                                       "settings"):
            yield from _mappings(value, f"{path}{key}.", depth + 1)


def _node_figures(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, Figure]]:
    where = path.rstrip(".")
    prefix = f"{where}: " if where else ""
    drawers = (_curves, _local_accuracy, _loss, _tau, _epsilon, _bytes, _confusion,
               _contribution, _dp_audit)
    for draw in drawers:
        drawn = draw(node)
        if drawn is not None:
            yield prefix + drawn[0], drawn[1]


def _numbers(seq: Any) -> np.ndarray | None:
    """Return a sequence as floats (anything not a number as NaN); None if none is finite."""
    if not isinstance(seq, Sequence) or isinstance(seq, str) or not seq:
        return None
    values = np.array([float(v) if _is_number(v) else math.nan for v in seq])
    return values if np.isfinite(values).any() else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _metric_series(history: Any, key: str) -> tuple[np.ndarray, np.ndarray] | None:
    if not isinstance(history, Sequence) or isinstance(history, str):
        return None
    rows = [h for h in history if isinstance(h, Mapping) and isinstance(h.get("test"), Mapping)]
    epochs = _numbers([h.get("epoch") for h in rows])
    values = _numbers([h["test"].get(key) for h in rows])
    if epochs is None or values is None:
        return None
    return epochs, values


def _curves(node: Mapping[str, Any]) -> tuple[str, Figure] | None:
    history = node.get("history")
    given = node.get("baseline")
    baseline: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    for key, label in (("accuracy", "test accuracy"), ("r2", "test R²"), ("loss", "test loss"),
                       ("mse", "test MSE")):
        fed = _metric_series(history, key)
        if fed is None:
            continue
        fig = new_figure(6.0, 3.6)
        ax = fig.subplots()
        ax.plot(*fed, marker="o", label="federated (global model)")
        base = _metric_series(baseline.get("history"), key)
        if base is not None:
            ax.plot(*base, marker="s", label=str(baseline.get("kind", "centralised")))
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
        return f"{label} per epoch", fig
    return None


def _series_figure(values: Any, xlabel: str, ylabel: str) -> Figure:
    """One value per round or epoch, numbered from 1."""
    fig = new_figure(6.0, 3.6)
    ax = fig.subplots()
    ax.plot(np.arange(1, len(values) + 1), values, marker=".")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig


def _local_accuracy(node: Mapping[str, Any]) -> tuple[str, Figure] | None:
    values = _numbers(node.get("local_accuracy"))
    if values is None:
        return None
    return ("the clients' local models' accuracy per round",
            _series_figure(values, "round", "mean local accuracy"))


def _loss(node: Mapping[str, Any]) -> tuple[str, Figure] | None:
    for key, xlabel in (("loss_history", "epoch"), ("losses", "epoch")):
        values = _numbers(node.get(key))
        if values is None:
            continue
        return f"training loss per {xlabel}", _series_figure(values, xlabel, "training loss")
    return None


def _tau(node: Mapping[str, Any]) -> tuple[str, Figure] | None:
    values = _numbers(node.get("tau"))
    if values is None:
        return None
    fig = new_figure(6.0, 3.0)
    ax = fig.subplots()
    ax.step(np.arange(1, len(values) + 1), values, where="post")
    ax.set_xlabel("round (aggregation)")
    ax.set_ylabel("τ (local steps)")
    ax.grid(alpha=0.3)
    return "τ per round", fig


def _epsilon(node: Mapping[str, Any]) -> tuple[str, Figure] | None:
    series = {label: _numbers(node.get(key)) for key, label in
              (("epsilon", "client-level ε"),
               ("epsilon_against_server", "client-level ε against the server"),
               ("sample_epsilon", "sample-level ε"))}
    drawn = {k: v for k, v in series.items() if v is not None}
    if not drawn:
        return None
    fig = new_figure(6.0, 3.6)
    ax = fig.subplots()
    for label, values in drawn.items():
        ax.plot(np.arange(1, len(values) + 1), values, marker=".", label=label)
    ax.set_xlabel("round")
    ax.set_ylabel("ε spent")
    ax.grid(alpha=0.3)
    ax.legend()
    return "ε spent per round", fig


def _dp_audit(node: Mapping[str, Any]) -> tuple[str, Figure] | None:
    """Draw a DP audit's sweep (``islands audit dp --sweep``): the bound against m or σ."""
    by_m, by_sigma = node.get("by_canaries"), node.get("by_noise")
    if not isinstance(by_m, Mapping) and not isinstance(by_sigma, Mapping):
        return None
    fig = dp_audit_figure(by_m if isinstance(by_m, Mapping) else None,
                          by_sigma if isinstance(by_sigma, Mapping) else None,
                          str(node.get("mechanism", "")))
    return None if fig is None else ("the one-run lower bound on ε", fig)


def dp_audit_figure(by_canaries: Mapping[str, Any] | None, by_noise: Mapping[str, Any] | None,
                    mechanism: str) -> Figure | None:
    """Draw a DP audit's sweep: bound, ceiling and claimed ε against m, or against σ."""
    fig = new_figure(6.4, 4.2)
    ax = fig.subplots()
    if by_canaries is not None:
        m = _numbers(by_canaries.get("m"))
        if m is None:
            return None
        nested = "curve_bound" in by_canaries  # one run, nested subsets of its canaries
        for key, label, style in (("lower_bound", "lower bound (nested subsets of one run)"
                                   if nested else "lower bound (one run each)", "o-"),
                                  ("curve_bound", "curve bound", "s-"),
                                  ("ceiling", "ceiling (every guess right)", "--"),
                                  ("accountant_epsilon", "claimed ε", "-")):
            values = _numbers(by_canaries.get(key))
            if values is not None:
                ax.plot(m, values, style, label=label)
        ax.set(xscale="log", xlabel="canaries m", ylabel="ε")
    elif by_noise is not None:
        sigma = _numbers(by_noise.get("noise_multiplier"))
        if sigma is None:
            return None
        for key, label, style in (("accountant_epsilon", "claimed ε", "-"),
                                  ("lower_bound", "lower bound", "o-"),
                                  ("curve_bound", "curve bound", "s-")):
            values = _numbers(by_noise.get(key))
            if values is not None:
                ax.plot(sigma, values, style, label=label)
        ax.set(xlabel="noise multiplier σ", ylabel="ε")
    else:
        return None
    ax.set_title(f"One-run DP audit: {mechanism}")
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def _bytes(node: Mapping[str, Any]) -> tuple[str, Figure] | None:
    traffic = node.get("bytes")
    if isinstance(traffic, Mapping) and isinstance(traffic.get("sent"), Mapping):
        sent, received = traffic["sent"], traffic.get("received") or {}
        parties = sorted(set(sent) | set(received if isinstance(received, Mapping) else {}))
        up = _numbers([sent.get(p) for p in parties])
        down = _numbers([received.get(p) for p in parties] if isinstance(received, Mapping)
                        else [])
        if up is None:
            return None
        fig = new_figure(6.4, 3.6)
        ax = fig.subplots()
        x = np.arange(len(parties))
        ax.bar(x - 0.2, up / 1e6, 0.4, label="sent")
        if down is not None:
            ax.bar(x + 0.2, down / 1e6, 0.4, label="received")
        ax.set_xticks(x, parties, rotation=30 if len(parties) > 4 else 0, ha="right"
                      if len(parties) > 4 else "center")
        ax.set_ylabel("MB")
        ax.legend()
        return "bytes per party", fig
    by_tag = node.get("bytes_by_tag")
    if isinstance(by_tag, Mapping) and by_tag:
        tags = list(by_tag)
        values = _numbers([by_tag[t] for t in tags])
        if values is None:
            return None
        fig = new_figure(6.4, 0.8 + 0.3 * len(tags))
        ax = fig.subplots()
        ax.barh(np.arange(len(tags)), values / 1e6)
        ax.set_yticks(np.arange(len(tags)), [str(t) for t in tags])
        ax.invert_yaxis()
        ax.set_xlabel("MB")
        return "bytes per message tag", fig
    return None


def _confusion(node: Mapping[str, Any]) -> tuple[str, Figure] | None:
    matrix: np.ndarray | None = None
    for key in ("confusion", "confusion_matrix"):
        raw = node.get(key)
        if isinstance(raw, Sequence) and raw and all(
                isinstance(r, Sequence) and len(r) == len(raw) for r in raw):
            rows = [_numbers(r) for r in raw]
            if all(r is not None for r in rows):
                matrix = np.array(rows, dtype=float)
                break
    if matrix is None:
        labels, predictions = node.get("labels"), node.get("predictions")
        y, p = _numbers(labels), _numbers(predictions)
        if y is None or p is None or len(y) != len(p):
            return None
        keep = np.isfinite(y) & np.isfinite(p)
        classes = np.unique(np.concatenate([y[keep], p[keep]]))
        if len(classes) > 50:
            return None
        index = {c: i for i, c in enumerate(classes)}
        matrix = np.zeros((len(classes), len(classes)))
        for t, q in zip(y[keep], p[keep], strict=True):
            matrix[index[t], index[q]] += 1
    n = len(matrix)
    fig = new_figure(1.5 + 0.45 * n, 1.2 + 0.45 * n)
    ax = fig.subplots()
    image = ax.imshow(matrix, cmap="Blues")
    if n <= 15:
        top = np.nanmax(matrix) if np.isfinite(matrix).any() else 0.0
        for i in range(n):
            for j in range(n):
                if np.isfinite(matrix[i, j]):
                    ax.text(j, i, f"{matrix[i, j]:g}", ha="center", va="center", fontsize=8,
                            color="white" if matrix[i, j] > top / 2 else "black")
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return "confusion matrix (test rows)", fig


def _contribution(node: Mapping[str, Any]) -> tuple[str, Figure] | None:
    report = node.get("contribution")
    report = report if isinstance(report, Mapping) else node
    clients, shares = report.get("clients"), _numbers(report.get("shares"))
    if not isinstance(clients, Sequence) or shares is None or len(clients) != len(shares):
        return None
    fig = new_figure(6.0, 3.6)
    ax = fig.subplots()
    x = np.arange(len(clients))
    ax.bar(x, shares)
    ax.set_xticks(x, [str(c) for c in clients])
    ax.set_ylabel(f"reward share ({report.get('primary', 'primary method')})")
    ax.grid(alpha=0.3, axis="y")
    return "contribution: reward share per client", fig


# ------------------------------------------------------------------------ tables
def _flatten(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping) and node:
        for key, value in node.items():
            yield from _flatten(value, f"{path}.{key}" if path else str(key))
    else:
        yield path, node


def _json_table(results: Any) -> str:
    rows = "".join(f"<tr><td><code>{_e(k or '(value)')}</code></td>{_cell(v)}</tr>"
                   for k, v in _flatten(results))
    return f"<table><tr><th>key</th><th>value</th></tr>{rows}</table>"


def _count_leaves(results: Any) -> int:
    return sum(1 for _ in _flatten(results))


def _cell(value: Any) -> str:
    if _is_number(value):
        return f"<td class=\"num\">{_value(value)}</td>"
    return f"<td>{_value(value)}</td>"


def _value(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return _e(f"{value:.6g}") if math.isfinite(value) else _nonfinite(value)
    if isinstance(value, (list, tuple)):
        shown = ", ".join(_plain(v) for v in value[:_MAX_LIST])
        more = f", … {len(value) - _MAX_LIST} more" if len(value) > _MAX_LIST else ""
        return _e(f"[{shown}{more}]")
    if isinstance(value, Mapping):
        return _e(json.dumps(value, default=str)[:500])
    return _e(str(value))


def _nonfinite(value: float) -> str:
    return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else _nonfinite(value)
    if isinstance(value, (list, tuple, Mapping)):
        text = json.dumps(value, default=str)
        return text if len(text) <= 80 else text[:77] + "…"
    return "null" if value is None else str(value)


def _e(text: str) -> str:
    return html.escape(text, quote=True)
