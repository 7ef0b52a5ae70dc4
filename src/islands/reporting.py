"""Results on disk: strict JSON, Markdown tables and PNG figures, for every layer.

Jobs, audits, contribution reports and the paper reproductions write their results with
these helpers; they sit at the bottom of the package so that no protocol has to import
the reproductions (:mod:`islands.experiments`) to write a file. Importing this module
loads only NumPy; matplotlib is imported by :func:`new_figure`.

Every file is written whole or not at all: to a temporary name beside it, flushed to
disk, then renamed over the old one (:func:`write_bytes`), so a full disk or a kill never
leaves half a file, and the previous file stays until the new one is complete. An
``OSError`` (disk full, no permission) becomes an :class:`~islands.errors.OutputError`
naming the path.

A run's files are one set (:class:`ResultSet`): they are written into a hidden staging
folder inside the output folder, then put in place together under ``manifest.json``,
which names the set's run ID and lists every file with its SHA-256: before the first
rename it is written saying ``"complete": false``, after the last one ``true``.
:func:`check_result_set` is how a reader knows that the folder holds one run's complete
set: a complete manifest whose files all match it. A set whose writing was cut short (a
kill between two renames) has a manifest that says so, or files that do not match it,
and is refused by the readers (:func:`islands.load_run`, ``islands report``, ``islands
contribution``); a folder without a manifest (written before sets had one) is read as
before.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import io
import json
import math
import os
import secrets
import shutil
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from islands.errors import OutputError, ValidationError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MANIFEST", "RESULTS", "JsonResult", "JsonRow", "ResultSet", "check_result_set",
           "check_writable", "copy_file", "html_table", "markdown_table", "new_figure",
           "previous_results", "save_figure", "short_text", "to_jsonable", "write_bytes",
           "write_json", "write_results", "write_text"]

RESULTS = "results.json"
"""The results file of a run's set."""
MANIFEST = "manifest.json"
"""The file a :class:`ResultSet` writes last: the set's run ID and every file's SHA-256."""


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


def _output_error(path: Path, exc: OSError, *, kept: str | None = None) -> OutputError:
    """Name the path and the system's reason; say what was kept (the previous file)."""
    reason = exc.strerror or str(exc)
    if exc.errno is not None:
        reason += f" (errno {exc.errno})"
    note = f"; {kept}" if kept else ""
    error = OutputError(f"cannot write {path}: {reason}{note}")
    error.errno = exc.errno
    error.filename = str(path)
    return error


def _fsync_folder(folder: Path) -> None:
    """Make renames in ``folder`` durable (where the platform allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` whole or not at all.

    The bytes go to a temporary file beside ``path``, are flushed to disk and renamed
    over ``path``: a failure or a kill leaves the previous file (if any) unchanged.

    Parameters
    ----------
    path
        File to write; its folder must exist.
    data
        The file's content.

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    OutputError
        If the file cannot be written (disk full, no permission, no such folder), naming
        ``path``; the temporary file is removed.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    kept = f"the previous {target.name} is unchanged" if target.is_file() else None
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise _output_error(target, exc, kept=kept) from exc
    _fsync_folder(target.parent)
    return target


def copy_file(source: str | Path, target: str | Path) -> Path:
    """Copy ``source`` to ``target`` whole or not at all, making ``target``'s folder.

    Raises
    ------
    OutputError
        If ``target`` cannot be written, naming it.
    """
    out = Path(target)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        data = Path(source).read_bytes()
    except OSError as exc:
        raise _output_error(out, exc) from exc
    return write_bytes(out, data)


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all (:func:`write_bytes`)."""
    return write_bytes(path, text.encode("utf-8"))


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n").encode("utf-8")


def write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` (converted by :func:`to_jsonable`) as indented, strict JSON.

    Parameters
    ----------
    path
        File to write; its folder must exist. Written whole or not at all
        (:func:`write_bytes`).
    obj
        The results.

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    OutputError
        If the file cannot be written, naming it.
    """
    return write_bytes(path, _json_bytes(obj))


class ResultSet:
    """The files of one run, staged and then published together.

    Files are written into a hidden staging folder inside ``folder``
    (``.partial-<run_id>``), either with the ``add_*`` methods or by any writer given
    :meth:`path`. :meth:`publish` flushes them to disk, renames each into ``folder``,
    removes the files of the previous set that this one does not have, and writes
    ``manifest.json`` (the run ID and every file's SHA-256) last. Used as a context
    manager, the set is published when the block ends and discarded (the staging folder
    removed, ``folder`` untouched) when it raises.

    Parameters
    ----------
    folder
        The output folder (created when missing).
    run_id
        The set's ID (default: a new random one), in ``manifest.json``.

    Raises
    ------
    OutputError
        From any method, when a file cannot be written, naming it and saying that the
        previous results in ``folder`` are unchanged.
    """

    def __init__(self, folder: str | Path, *, run_id: str | None = None) -> None:
        self.folder = Path(folder)
        self.run_id = uuid.uuid4().hex if run_id is None else str(run_id)
        self.published: list[Path] = []
        self._staging: Path | None = None

    def _error(self, path: Path, exc: OSError) -> OutputError:
        self.discard()
        return _output_error(path, exc, kept=f"the previous results in {self.folder} are "
                                             "unchanged")

    @property
    def staging(self) -> Path:
        """The hidden folder the set's files are written into until :meth:`publish`."""
        if self._staging is None:
            staging = self.folder / f".partial-{self.run_id}"
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                staging.mkdir()
            except OSError as exc:
                raise self._error(self.folder if not self.folder.is_dir() else staging,
                                  exc) from exc
            self._staging = staging
        return self._staging

    def path(self, name: str) -> Path:
        """Return where a writer writes the set's file ``name`` (published with the set)."""
        if (not name or name != Path(name).name or name.startswith(".")
                or name == MANIFEST):
            raise ValueError(f"a result set's file is a plain visible name other than "
                             f"{MANIFEST}; got {name!r}")
        return self.staging / name

    def add_bytes(self, name: str, data: bytes) -> Path:
        """Stage ``data`` as the file ``name``; return the path it will be published at."""
        staged = self.path(name)
        try:
            staged.write_bytes(data)
        except OSError as exc:
            raise self._error(self.folder / name, exc) from exc
        return self.folder / name

    def add_json(self, name: str, obj: Any) -> Path:
        """Stage ``obj`` as strict JSON (:func:`write_json`'s text)."""
        return self.add_bytes(name, _json_bytes(obj))

    def add_text(self, name: str, text: str) -> Path:
        """Stage ``text`` (UTF-8) as the file ``name``."""
        return self.add_bytes(name, text.encode("utf-8"))

    def add_figure(self, name: str, fig: Figure, *, dpi: int = 110) -> Path:
        """Stage a figure as the PNG ``name``."""
        return self.add_bytes(name, _png_bytes(fig, dpi))

    def publish(self) -> list[Path]:
        """Rename the staged files into the folder, then write the manifest; return them."""
        staging = self.staging
        files: dict[str, dict[str, Any]] = {}
        try:
            # top-level entries (files, and folders such as an audit's), results.json last:
            # a reader of it alone sees the previous run's until the end
            entries = sorted((p.name for p in staging.iterdir()), key=lambda n: (n == RESULTS, n))
            for path in sorted(p for p in staging.rglob("*") if p.is_file()):
                with open(path, "rb") as fh:
                    data = fh.read()
                    os.fsync(fh.fileno())
                files[path.relative_to(staging).as_posix()] = {
                    "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        except OSError as exc:
            raise self._error(self.folder, exc) from exc
        previous = {name.split("/")[0] for name in _manifest_files(self.folder)}
        manifest = {"run_id": self.run_id, "complete": False,
                    "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "files": files}
        try:
            # from here until the manifest says complete, the folder holds no complete set
            write_json(self.folder / MANIFEST, manifest)
        except OutputError:
            self.discard()
            raise
        try:
            for name in entries:
                _replace(staging / name, self.folder / name)
            for stale in sorted(previous - set(entries)):
                _remove(self.folder / stale)
        except OSError as exc:
            self.discard()
            raise _output_error(self.folder, exc, kept="the folder holds an incomplete set "
                                f"of results ({MANIFEST} says so)") from exc
        shutil.rmtree(staging, ignore_errors=True)
        self._staging = None
        for left in self.folder.glob(".partial-*"):  # the staging of a set that was killed
            shutil.rmtree(left, ignore_errors=True)
        try:
            write_json(self.folder / MANIFEST, {**manifest, "complete": True})
        except OutputError as exc:
            raise OutputError(f"{exc}; the results in {self.folder} are written but not "
                              f"marked complete ({MANIFEST} says they are not)") from exc
        self.published = [self.folder / n for n in entries] + [self.folder / MANIFEST]
        return list(self.published)

    def discard(self) -> None:
        """Remove the staging folder and what it holds; the output folder is untouched."""
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None

    def __enter__(self) -> ResultSet:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.publish()
        else:
            self.discard()


def _replace(source: Path, target: Path) -> None:
    """Rename ``source`` over ``target`` (a folder over a folder: the old one removed)."""
    if source.is_dir() and target.is_dir():
        old = target.with_name(f".{target.name}.old-{secrets.token_hex(4)}")
        os.replace(target, old)
        os.replace(source, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(source, target)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _safe_name(name: Any) -> bool:
    """Tell whether a manifest's file is a relative path inside the folder, none hidden."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name:
        return False
    return all(part and not part.startswith(".") for part in name.split("/"))


def _manifest_files(folder: Path) -> dict[str, Any]:
    """Return the files the folder's manifest lists (empty when it has none or is damaged)."""
    try:
        doc = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if _safe_name(k)}


def _manifest_run(folder: Path) -> str | None:
    try:
        doc = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    run_id = doc.get("run_id") if isinstance(doc, dict) else None
    return run_id if isinstance(run_id, str) else None


def check_result_set(folder: str | Path) -> str | None:
    """Return the run ID of the complete set of results ``folder`` holds.

    Returns
    -------
    str or None
        The set's run ID; None for a folder without ``manifest.json`` (written before
        sets had one, or holding no results).

    Raises
    ------
    ValidationError
        If the folder holds an incomplete or mixed set: a manifest that says its writing
        was cut short, or files missing from the folder or differing from the manifest,
        naming them.
    """
    root = Path(folder)
    manifest = root / MANIFEST
    if not manifest.is_file():
        return None
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{manifest} cannot be read ({exc}); the results in {root} "
                              "are not known to be complete") from exc
    run_id = doc.get("run_id") if isinstance(doc, dict) else None
    files = _manifest_files(root)
    if not isinstance(run_id, str) or not files:
        raise ValidationError(f"{manifest} is not an islands manifest (run_id and files)")
    if doc.get("complete") is not True:
        raise ValidationError(
            f"the results in {root} are incomplete: the writing of run {run_id} was cut "
            f"short ({MANIFEST} does not say complete), so its files may sit beside an "
            "earlier run's; run it again")
    bad = []
    for name, entry in files.items():
        try:
            data = (root / name).read_bytes()
        except OSError:
            bad.append(f"{name} (missing)")
            continue
        want = entry.get("sha256") if isinstance(entry, dict) else None
        if hashlib.sha256(data).hexdigest() != want:
            bad.append(f"{name} (not the file of run {run_id})")
    if bad:
        raise ValidationError(f"the results in {root} are not one run's complete set: "
                              f"{MANIFEST} lists run {run_id}, but " + ", ".join(bad)
                              + "; run it again")
    return run_id


def check_writable(path: str | Path, what: str, *, folder: bool) -> None:
    """Refuse, before a run, an output it could not write at its end.

    Parameters
    ----------
    path
        The output: a folder (created when missing) or a file (its folder created when
        missing).
    what
        What it is, for the message (``"the output folder"``, ``"--json"``).
    folder
        Whether ``path`` is a folder.

    Raises
    ------
    ValidationError
        If ``path`` is a file where a folder is meant (or the reverse), or a file stands
        where a folder would be created, or the nearest existing folder is not writable.
    """
    target = Path(path)
    if target.exists():
        if folder and not target.is_dir():
            raise ValidationError(f"{what} {target} is a file, not a folder; choose a folder")
        if not folder and target.is_dir():
            raise ValidationError(f"{what} {target} is a folder, not a file; name a file")
    place = target if folder and target.is_dir() else target.parent
    while not place.exists() and place != place.parent:
        place = place.parent
    if not place.is_dir():
        raise ValidationError(f"{what} {target} cannot be created: {place} is a file, not "
                              "a folder")
    if not os.access(place, os.W_OK | os.X_OK):
        raise ValidationError(f"{what} {target} cannot be written: no permission to write "
                              f"in {place}")


def previous_results(folder: str | Path) -> str | None:
    """Say which run's results ``folder`` holds (``"the results of run …"``), or None."""
    root = Path(folder)
    if not (root / RESULTS).is_file() and not (root / MANIFEST).is_file():
        return None
    run_id = _manifest_run(root)
    return f"the {RESULTS} of another run" if run_id is None else (
        f"the results of run {run_id}")


def write_results(result: JsonResult, out: str | Path, json_path: str | Path | None = None,
                  *, run_id: str | None = None) -> ResultSet:
    """Open the set of ``result``: ``out/results.json`` staged, the figures to add.

    Use it as a context manager; when the block ends the set is published and, with
    ``json_path``, ``results.json`` is copied there (its folder created when missing)::

        with write_results(result, out, json_path) as files:
            files.add_figure("loss.png", fig)
        written = files.published

    Returns
    -------
    ResultSet
        ``published`` lists the files written once the block has ended.
    """
    files = _ResultsWithCopy(out, run_id=run_id, copy_to=json_path)
    try:
        files.add_json(RESULTS, result)
    except BaseException:
        files.discard()
        raise
    return files


class _ResultsWithCopy(ResultSet):
    """A set whose ``results.json`` is also copied to ``copy_to`` once published."""

    def __init__(self, folder: str | Path, *, run_id: str | None,
                 copy_to: str | Path | None) -> None:
        super().__init__(folder, run_id=run_id)
        self.copy_to = None if copy_to is None else Path(copy_to)

    def publish(self) -> list[Path]:
        written = super().publish()
        if self.copy_to is not None:
            copy_file(self.folder / RESULTS, self.copy_to)
            self.published.append(self.copy_to)
            written.append(self.copy_to)
        return written


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
        Output file (``.png``); its directory must exist. Written whole or not at all
        (:func:`write_bytes`).
    dpi
        Resolution.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    return write_bytes(path, _png_bytes(fig, dpi))


def _png_bytes(fig: Figure, dpi: int) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


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
