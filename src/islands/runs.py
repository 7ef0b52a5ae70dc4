"""Read a finished run's folder back as typed results, for a notebook or a script.

:func:`load_run` reads what ``islands run`` (horizontal, vertical and SecureBoost jobs) and
``islands reproduce`` wrote: ``results.json`` (and a reproduction's ``report.md``). Its history
becomes a pandas DataFrame with :meth:`Run.history_frame` when pandas is installed (the
``notebook`` extra); nothing here needs pandas otherwise. Each result shows itself as a
small HTML table in Jupyter (``_repr_html_``, :func:`islands.reporting.html_table`).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from islands.errors import DataNotFoundError, ValidationError
from islands.hfl.contribution.tracker import ContributionReport
from islands.reporting import check_result_set, html_table, short_text

__all__ = ["HorizontalRun", "Reproduction", "Run", "SecureBoostRun", "VerticalRun", "load_run"]


@dataclass(frozen=True)
class Run:
    """A run read back from its folder.

    Attributes
    ----------
    path
        The folder.
    name
        The job's name, or the folder's for a reproduction.
    settings
        The settings the run used (a job's file with its overrides, or a reproduction's).
    metrics
        The key final figures.
    history
        One mapping per epoch (or per row), nested values flattened as ``test_accuracy``.
    results
        The whole ``results.json``.
    """

    path: Path
    name: str
    settings: dict[str, Any]
    metrics: dict[str, Any]
    history: list[dict[str, Any]]
    results: dict[str, Any] = field(repr=False)

    kind = "run"

    def history_frame(self) -> Any:
        """Return :attr:`history` as a ``pandas.DataFrame`` (needs pandas)."""
        try:
            pandas = importlib.import_module("pandas")
        except ImportError as exc:
            raise ImportError("Run.history_frame needs pandas: pip install 'islands[notebook]' "
                              "(or pip install pandas)") from exc
        return pandas.DataFrame(self.history)

    def __repr__(self) -> str:
        # short, for print(run): the settings and every epoch's figures are attributes
        return (f"{type(self).__name__}(name={self.name!r}, path={str(self.path)!r}, "
                f"metrics={self.metrics!r}, history=<{len(self.history)} rows>)")

    def _repr_html_(self) -> str:
        rows = [("kind", self.kind), ("folder", str(self.path)),
                *((k, short_text(v)) for k, v in self.metrics.items()),
                ("history", f"{len(self.history)} rows")]
        return html_table(f"{type(self).__name__} {self.name}", rows,
                          settings=_flat(self.settings))


@dataclass(frozen=True, repr=False)  # Run's short __repr__
class HorizontalRun(Run):
    """A horizontal job (``islands run``); :attr:`contribution` when it measured one."""

    contribution: ContributionReport | None = None

    kind = "horizontal"


@dataclass(frozen=True, repr=False)  # Run's short __repr__
class VerticalRun(Run):
    """A vertical job (``kind = "vertical"``); :attr:`history` holds the loss per epoch."""

    kind = "vertical"


@dataclass(frozen=True, repr=False)  # Run's short __repr__
class SecureBoostRun(Run):
    """A SecureBoost job (``kind = "secureboost"``); :attr:`history` has one row per tree.

    Each row: ``tree``, ``train_loss``, the test metric after that tree (``test_auc`` or
    ``test_r2``, and XGBoost's as ``xgboost_test_auc``) and ``seconds``.
    """

    kind = "secureboost"


@dataclass(frozen=True, repr=False)  # Run's short __repr__
class Reproduction(Run):
    """A reproduction (``islands reproduce NAME``); :attr:`history` is its first table.

    That is the shallowest list of records, or mapping of named records (one row per
    name), in ``results.json``: contribution's ``clients``, apfl's ``rows``, vfl's
    ``runs``, ftl's ``fashion_mnist.rows``, scca's and pca's ``datasets``.

    Attributes
    ----------
    agreement
        The paper's claims checked, with their verdicts.
    report
        ``report.md``'s text ("" when absent).
    """

    agreement: list[dict[str, Any]] = field(default_factory=list)
    report: str = field(default="", repr=False)

    kind = "reproduction"


def load_run(folder: str | Path) -> Run:
    """Read the results an ``islands run`` or ``islands reproduce`` wrote into ``folder``.

    Returns
    -------
    Run
        A :class:`HorizontalRun`, :class:`VerticalRun`, :class:`SecureBoostRun` or
        :class:`Reproduction`.

    Raises
    ------
    DataNotFoundError
        When ``folder`` or its ``results.json`` does not exist.
    ValidationError
        Naming ``results.json`` when it is not valid JSON or not the results of a known
        kind of run, or the folder when its files are not one run's complete set (their
        writing was cut short: :func:`islands.reporting.check_result_set`).

    Examples
    --------
    >>> run = islands.load_run("runs/linear-regression")  # doctest: +SKIP
    >>> run.history_frame()[["epoch", "test_r2"]]  # doctest: +SKIP
    """
    path = Path(folder)
    if not path.is_dir():
        raise DataNotFoundError(f"load_run: no folder {path}")
    file = path / "results.json"
    if not file.is_file():
        raise DataNotFoundError(f"load_run: no results.json in {path}: is it the output "
                                "folder of 'islands run' or 'islands reproduce'?")
    try:
        check_result_set(path)
    except ValidationError as exc:
        raise ValidationError(f"load_run: {exc}") from None
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(f"load_run: {file} is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ValidationError(f"load_run: {file} holds a {type(doc).__name__}, not the "
                              "object of a run's results")
    if isinstance(doc.get("job"), dict) and doc["job"].get("kind") == "secureboost":
        return _secureboost(path, doc)
    if isinstance(doc.get("job"), dict) and "loss_history" in doc:
        return _vertical(path, doc)
    if isinstance(doc.get("job"), dict) and isinstance(doc.get("history"), list):
        return _horizontal(path, doc, file)
    if isinstance(doc.get("settings"), dict) and isinstance(doc.get("agreement"), list):
        return _reproduction(path, doc)
    raise ValidationError(f"load_run: {file} is not the results of a known run (a horizontal, "
                          "vertical or SecureBoost job, or a reproduction); its keys are "
                          f"{sorted(doc)[:12]}")


def _horizontal(path: Path, doc: dict[str, Any], file: Path) -> HorizontalRun:
    job = doc["job"]
    keys = ("accuracy", "f1", "mse", "rmse", "r2", "rounds", "aggregations", "wall_time_s")
    metrics = {k: doc[k] for k in keys if k in doc}
    if isinstance(doc.get("bytes"), dict) and "total" in doc["bytes"]:
        metrics["bytes"] = doc["bytes"]["total"]
    for key, name in (("privacy", "epsilon"),
                      ("privacy_against_server", "epsilon_against_server")):
        privacy = doc.get(key)
        if isinstance(privacy, dict) and "epsilon" in privacy:
            metrics[name] = privacy["epsilon"]
    found = doc.get("contribution")
    contribution = (ContributionReport.from_dict(found, where=f" in {file}")
                    if isinstance(found, dict) else None)
    return HorizontalRun(path=path, name=str(job.get("name", path.name)), settings=job,
                         metrics=metrics, history=[_flat(h) for h in doc["history"]
                                                   if isinstance(h, Mapping)],
                         results=doc, contribution=contribution)


def _job_metrics(doc: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Return a job's ``metrics`` with the figures ``keys`` of ``results.json`` after them."""
    metrics = dict(doc["metrics"]) if isinstance(doc.get("metrics"), dict) else {}
    metrics |= {key: doc[key] for key in keys if key in doc}
    return metrics


def _vertical(path: Path, doc: dict[str, Any]) -> VerticalRun:
    job = doc["job"]
    metrics = _job_metrics(doc, ("epochs_run", "converged", "aligned_ids", "bytes",
                                 "wall_time_s"))
    losses = doc["loss_history"] if isinstance(doc["loss_history"], list) else []
    history = [{"epoch": i + 1, "loss": loss} for i, loss in enumerate(losses)]
    return VerticalRun(path=path, name=str(job.get("name", path.name)), settings=job,
                       metrics=metrics, history=history, results=doc)


def _secureboost(path: Path, doc: dict[str, Any]) -> SecureBoostRun:
    job = doc["job"]
    metrics = _job_metrics(doc, ("trees_kept", "seconds_per_tree", "aligned_ids", "bytes",
                                 "wall_time_s"))
    rows = doc["per_tree"] if isinstance(doc.get("per_tree"), list) else []
    return SecureBoostRun(path=path, name=str(job.get("name", path.name)), settings=job,
                          metrics=metrics, history=[_flat(r) for r in rows
                                                    if isinstance(r, Mapping)], results=doc)


def _reproduction(path: Path, doc: dict[str, Any]) -> Reproduction:
    agreement = [c for c in doc["agreement"] if isinstance(c, dict)]
    verdicts: dict[str, int] = {}
    for c in agreement:
        verdicts[str(c.get("verdict"))] = verdicts.get(str(c.get("verdict")), 0) + 1
    metrics: dict[str, Any] = {f"claims {v}": n for v, n in verdicts.items()}
    if "wall_time_s" in doc:
        metrics["wall_time_s"] = doc["wall_time_s"]
    envelope = {"settings", "agreement", "skipped", "figures", "wall_time_s"}
    sections = {k: v for k, v in doc.items() if k not in envelope}
    history = _first_table(sections)
    report = path / "report.md"
    return Reproduction(path=path, name=path.name, settings=doc["settings"], metrics=metrics,
                        history=history, results=doc, agreement=agreement,
                        report=report.read_text(encoding="utf-8") if report.is_file() else "")


def _table(value: Any) -> list[dict[str, Any]]:
    """``value`` as a table: a list of records, or a mapping of two or more named records.

    Named records become one row each, ``name`` first, then their scalars flattened (their
    lists, such as a loss history or 390 correlation ratios, stay in ``results``). ``[]``
    when ``value`` is neither.
    """
    if isinstance(value, list) and value and all(isinstance(r, Mapping) for r in value):
        return [_flat(r) for r in value]
    if (isinstance(value, Mapping) and len(value) > 1
            and all(isinstance(v, Mapping) for v in value.values())):
        rows = [{"name": str(k), **{c: v for c, v in _flat(row).items()
                                    if not isinstance(v, list)}}
                for k, row in value.items()]
        if all(len(r) > 1 for r in rows):
            return rows
    return []


def _first_table(sections: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the shallowest table of ``results.json``'s sections (the first at its depth).

    Reproductions nest their main table differently: contribution's ``clients`` is a
    list, apfl's ``rows`` and vfl's ``runs`` map names to records, ftl's is one level
    down (``fashion_mnist.rows``), scca's and pca's are per data set (``datasets``).
    """
    level: list[Any] = list(sections.values())
    while level:
        for value in level:
            found = _table(value)
            if found:
                return found
        level = [v for value in level if isinstance(value, Mapping) for v in value.values()]
    return []


def _flat(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings: ``{"test": {"r2": 0.4}}`` becomes ``{"test_r2": 0.4}``."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}_"))
        else:
            out[name] = value
    return out
