"""Helpers shared by the paper reproductions: run set-up, progress, claims and tables.

JSON, Markdown and PNG writing live in :mod:`islands.reporting` (re-exported here).
Importing this module loads only NumPy; matplotlib is imported by :func:`new_figure`.

Every ``reproduce_<name>`` function is wrapped by :func:`reports_progress`: its
``progress`` argument is a :data:`~islands.progress.ProgressOption` (False/None
silent, True bars in a terminal or a notebook, a callable receiving each
:class:`~islands.progress.ProgressUpdate`, whose ``info`` is the step's message),
while the body keeps saying its steps as short strings (:attr:`RunSetup.say`).

A reproduction's files are one set (:class:`~islands.reporting.ResultSet`): the body
writes them into :attr:`RunSetup.out`, a staging folder inside the output folder, and
:func:`reports_progress` publishes them together (``manifest.json`` last) when the body
returns, or removes them when it raises, leaving the previous results untouched.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from islands.data import find_fashion_mnist
from islands.progress import ProgressOption, Task, check_progress, task
from islands.reporting import (
    ResultSet,
    markdown_table,
    new_figure,
    save_figure,
    to_jsonable,
    write_json,
)
from islands.validation import check_int

if TYPE_CHECKING:
    pass

__all__ = [
    "Progress",
    "ReproductionResult",
    "RunSetup",
    "agreement_table",
    "claim",
    "markdown_table",
    "new_figure",
    "plain",
    "reports_progress",
    "save_figure",
    "setup_run",
    "thread_limit",
    "to_jsonable",
    "two_datasets",
    "write_json",
]

Progress = Callable[[str], None]
"""Called with a short message at each step of a reproduction (:attr:`RunSetup.say`)."""


class Steps:
    """A reproduction's step messages, each one unit of its progress task."""

    def __init__(self, running: Task) -> None:
        self._task = running

    def __call__(self, message: str) -> None:
        self._task.advance(info=message)


P = ParamSpec("P")
R = TypeVar("R")

# the result sets :func:`setup_run` opened inside the reproduction running in this context
_OPEN_SETS: ContextVar[list[ResultSet] | None] = ContextVar("islands_open_sets", default=None)


def reports_progress(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a ``reproduce_<name>`` function report its steps as the task ``reproduce NAME``.

    The wrapped function's ``progress`` keyword is checked first (a bad value raises
    :class:`~islands.errors.ValidationError` naming it, before anything runs); the body
    gets a :class:`Steps` that advances the task by one at each message, and the task
    finishes (``done``, or ``failed`` with the exception going on) when it returns. The
    files the body wrote into :attr:`RunSetup.out` are then published as one set, or
    discarded when it raised.
    """
    def wrap(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            sink = check_progress(kwargs.get("progress"), function.__name__)
            opened: list[ResultSet] = []
            token = _OPEN_SETS.set(opened)
            try:
                if sink is None:
                    result = function(*args, **{**kwargs,  # type: ignore[arg-type]
                                                "progress": None})
                else:
                    with task(sink, f"reproduce {name}") as running:
                        result = function(*args, **{**kwargs,  # type: ignore[arg-type]
                                                    "progress": Steps(running)})
            except BaseException:
                for files in opened:
                    files.discard()
                raise
            finally:
                _OPEN_SETS.reset(token)
            for files in opened:
                files.publish()
            return result
        return run
    return wrap


@dataclass(frozen=True)
class RunSetup:
    """Validated common arguments of a reproduction.

    ``out`` is where the body writes its files: the staging folder of the set published
    into ``folder`` when the reproduction returns.
    """

    out: Path
    random_state: int
    n_threads: int | None
    say: Progress
    folder: Path


def setup_run(
    owner: str, out_dir: str | Path, random_state: Any, n_threads: Any,
    progress: ProgressOption | Steps,
) -> RunSetup:
    """Check a reproduction's common arguments and open its set of files in ``out_dir``.

    ``progress`` is what :func:`reports_progress` hands the body: its :class:`Steps`, or
    None (silent). Only a body that :func:`reports_progress` runs may call it (it
    publishes the set).
    """
    seed = check_int(random_state, "random_state", owner, low=0)
    threads = None if n_threads is None else check_int(n_threads, "n_threads", owner, low=1)
    if progress is not None and progress is not False and not isinstance(progress, Steps):
        raise TypeError(f"{owner}: setup_run takes the Steps of @reports_progress, got "
                        f"{type(progress).__name__}")
    opened = _OPEN_SETS.get()
    if opened is None:
        raise TypeError(f"{owner}: setup_run runs inside a function wrapped by "
                        "@reports_progress, which publishes its files")
    files = ResultSet(out_dir)
    opened.append(files)
    say: Progress = progress if isinstance(progress, Steps) else (lambda _msg: None)
    return RunSetup(out=files.staging, random_state=seed, n_threads=threads, say=say,
                    folder=files.folder)


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


T = TypeVar("T")


def two_datasets(fashion: T, digits: T) -> tuple[list[tuple[str, T]], dict[str, str]]:
    """Choose the reproductions' data sets: Fashion-MNIST when its files exist, digits always.

    Returns
    -------
    loaders, skipped
        ``(name, loader)`` pairs to run, and the data sets skipped with the reason.
    """
    if find_fashion_mnist() is None:
        return [("digits", digits)], {"fashion_mnist": "Fashion-MNIST files not found"}
    return [("fashion_mnist", fashion), ("digits", digits)], {}


@dataclass(frozen=True)
class ReproductionResult:
    """What a ``reproduce_<name>`` function returns; :meth:`to_json` is its ``results.json``.

    Attributes
    ----------
    settings
        The settings the run used.
    sections
        The reproduction's own results by name, in the order ``results.json`` lists them
        (e.g. ``runs`` for vfl, ``rows`` and ``sensitivity`` for apfl). Values may hold
        typed rows (objects with a ``to_json()`` method); :meth:`to_json` writes them as
        their plain values.
    agreement
        The paper's claims checked here (:func:`claim`, with ``figure`` or ``dataset``
        where the claim is about one).
    figures
        The plots' file names (a list, or title → file name).
    wall_time_s
        Seconds the whole reproduction took.
    skipped
        What was skipped and why, for reproductions that can skip a data set (else None).
    """

    settings: dict[str, Any]
    sections: dict[str, Any]
    agreement: list[dict[str, Any]]
    figures: list[str] | dict[str, str]
    wall_time_s: float
    skipped: list[str] | dict[str, str] | None = None

    def __post_init__(self) -> None:
        clash = sorted(set(self.sections) & _ENVELOPE)
        if clash:
            raise ValueError(f"sections {clash} would hide the result's own keys")

    @property
    def verdicts(self) -> dict[str, int]:
        """How many claims got each verdict, in the order they first appear."""
        counts: dict[str, int] = {}
        for c in self.agreement:
            counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
        return counts

    def to_json(self) -> dict[str, Any]:
        """Return ``results.json``: settings, the sections, agreement, skipped, figures, time."""
        out: dict[str, Any] = {"settings": self.settings,
                               **{k: plain(v) for k, v in self.sections.items()},
                               "agreement": self.agreement}
        if self.skipped is not None:
            out["skipped"] = self.skipped
        out.update(figures=self.figures, wall_time_s=self.wall_time_s)
        return out


_ENVELOPE = frozenset({"settings", "agreement", "skipped", "figures", "wall_time_s"})


def plain(obj: Any) -> Any:
    """Replace every typed row (an object with ``to_json()``) in a nest by its plain values.

    Mappings and lists are rebuilt around them; everything else (NumPy values, tuples,
    NaN) is left for :func:`~islands.reporting.write_json` to convert, as before.
    """
    if hasattr(obj, "to_json") and not isinstance(obj, type):
        return plain(obj.to_json())
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    return obj


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
