"""Progress of long operations, drawn the same way in a terminal and in a Jupyter notebook.

An operation that can take more than a couple of seconds (PSI, key generation, the
reproductions, the audits) takes a ``progress`` argument:

- ``False`` or ``None``: silent (the default of library calls);
- ``True``: bars drawn with rich (``rich.progress``) on the terminal; in a notebook, the
  same bars are shown in one output that is updated in place (IPython's
  ``display(..., display_id=True)``), which needs no widget library;
- a callable: receives every :class:`ProgressUpdate` (for a test, a log or another UI).

rich and IPython are imported only when bars are drawn, so ``import islands`` stays light.
Updates carry names, counts and short step descriptions only: never keys, masks or data.
What is written here is the small dispatch between these three; drawing is rich's.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from islands.errors import invalid_parameter
from islands.validation import describe

__all__ = ["ProgressCallback", "ProgressOption", "ProgressUpdate", "Task", "check_progress",
           "task"]


@dataclass(frozen=True)
class ProgressUpdate:
    """One step of a long operation.

    Attributes
    ----------
    task
        What runs, e.g. ``"PSI a"`` or ``"Paillier keys (2048 bits)"``.
    done
        Units done so far (IDs, steps, rounds).
    total
        Units in all, or None when not known in advance.
    info
        The current step in a few words.
    finished
        True on the task's last update.
    """

    task: str
    done: int
    total: int | None
    info: str = ""
    finished: bool = False


ProgressCallback = Callable[[ProgressUpdate], None]
ProgressOption = bool | ProgressCallback | None
"""What a ``progress`` argument accepts: False/None (silent), True (bars) or a callable."""


def check_progress(progress: Any, owner: str) -> ProgressCallback | None:
    """Return the callback ``progress`` stands for (None: silent), or raise naming it."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return _bars()
    if callable(progress):
        return progress  # type: ignore[no-any-return]
    raise invalid_parameter("progress", owner, "True, False, None or a callable taking a "
                            "ProgressUpdate", describe(progress))


class Task:
    """A running task: :meth:`advance` or :meth:`update` it; :func:`task` finishes it."""

    def __init__(self, sink: ProgressCallback | None, name: str, total: int | None) -> None:
        self._sink = sink
        self.name = name
        self.total = total
        self.done = 0

    def update(self, done: int, info: str = "", total: int | None = None) -> None:
        """Set the units done (and, when it becomes known, the total)."""
        self.done = done
        if total is not None:
            self.total = total
        self._emit(info, finished=False)

    def advance(self, n: int = 1, info: str = "") -> None:
        """Add ``n`` units done."""
        self.update(self.done + n, info)

    def _emit(self, info: str, *, finished: bool) -> None:
        if self._sink is not None:
            self._sink(ProgressUpdate(self.name, self.done, self.total, info, finished))


@contextmanager
def task(progress: ProgressOption, name: str, total: int | None = None, *,
         owner: str = "progress") -> Iterator[Task]:
    """Report a task's progress while the ``with`` block runs.

    The task is announced at 0 on entry and finished on exit: with ``done = total`` and
    ``info="done"`` when the block succeeded, as it stands with ``info="failed"`` when it
    raised (the exception goes on).
    """
    sink = check_progress(progress, owner)
    running = Task(sink, name, total)
    running.update(0, "starting")
    try:
        yield running
    except BaseException:
        running._emit("failed", finished=True)
        raise
    if running.total is not None:
        running.done = running.total
    running._emit("done", finished=True)


# ------------------------------------------------------------------------------ drawing
class _Bars:
    """Draws every task reported to it as one rich progress bar; thread-safe.

    The display starts with the first task and stops when every task it shows has
    finished, so bars from two parties running in two threads share one display.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._progress: Any = None
        self._ids: dict[str, Any] = {}
        self._open: set[str] = set()
        self._handle: Any = None

    def __call__(self, update: ProgressUpdate) -> None:
        with self._lock:
            if self._progress is None:
                self._start()
            progress = self._progress
            if update.task not in self._ids:
                self._ids[update.task] = progress.add_task(update.task, total=update.total,
                                                           info="")
            self._open.add(update.task)
            progress.update(self._ids[update.task], completed=update.done, total=update.total,
                            info=update.info)
            if update.finished:
                self._open.discard(update.task)
            if self._handle is not None:
                self._handle.update(_Rendered(progress))
            if not self._open:
                self._stop()

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console()
        jupyter = console.is_jupyter
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                                  TimeElapsedColumn(), console=console,
                                  auto_refresh=not jupyter, disable=jupyter)
        if jupyter:
            from IPython.display import display

            self._handle = display(_Rendered(self._progress),  # type: ignore[no-untyped-call]
                                   display_id=True)
        else:
            self._progress.start()

    def _stop(self) -> None:
        if self._handle is None:
            self._progress.stop()
        self._progress, self._handle = None, None
        self._ids.clear()


class _Rendered:
    """The bars as a notebook shows them: text/plain and text/html drawn by rich."""

    def __init__(self, progress: Any) -> None:
        from rich.console import Console

        console = Console(record=True, width=100, force_jupyter=False, file=io.StringIO())
        console.print(progress.make_tasks_table(progress.tasks))
        self._text = console.export_text(clear=False)
        self._html = console.export_html(inline_styles=True, code_format="{code}")

    def __repr__(self) -> str:
        return self._text

    def _repr_html_(self) -> str:
        return f'<pre style="line-height:1.2">{self._html}</pre>'


_SHARED: _Bars | None = None
_SHARED_LOCK = threading.Lock()


def _bars() -> _Bars:
    """Return the process's one bar display (parties running in threads share it)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = _Bars()
        return _SHARED
