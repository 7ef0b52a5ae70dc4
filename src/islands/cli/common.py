"""What every command shares: the ``islands`` app, the console, and how an error ends a command."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from islands import __version__
from islands.errors import IslandsError
from islands.progress import ProgressOption, ProgressUpdate
from islands.reporting import write_json

__all__ = ["app", "console", "progress_option", "stop_on_error"]

app = typer.Typer(
    name="islands",
    help="Privacy-preserving computation across data islands.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold a party's data or keys
)
console = Console()


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"islands {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True,
                     help="Print the version and exit."),
    ] = False,
) -> None:
    """Privacy-preserving computation across data islands."""


def print_error(error: BaseException | str) -> None:
    """Print an error as the one line a failed command ends with.

    Not wrapped at the console's width (80 columns off a terminal): a log keeps the
    line whole, and the paths in it can be copied.
    """
    console.print(f"[red]error:[/] {escape(str(error))}", soft_wrap=True)


@contextlib.contextmanager
def stop_on_error(code: int = 2, also: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Print an islands error (bad settings, missing data) as one line and exit ``code``.

    Exit 2 means the command was given something it cannot use (a file, a setting), exit 1
    that the run itself failed.
    """
    caught: tuple[type[Exception], ...] = (IslandsError, *also)
    try:
        yield
    except caught as exc:
        print_error(exc)
        raise typer.Exit(code) from exc


def save_json(path: Path, obj: Any) -> None:
    """Write a command's ``--json`` output whole (:func:`islands.reporting.write_json`).

    A path that cannot be written is one error line naming it (exit 1), never a traceback.
    """
    with stop_on_error(1):
        write_json(path, obj)
    console.print(f"wrote {escape(str(path))}")


def progress_option() -> ProgressOption:
    """Return how a command shows a long operation's progress.

    On a terminal, the bars of :mod:`islands.progress` (``True``); elsewhere (a
    pipe, a CI log) a bar drawn once at the end says little, so each step's message is
    printed as one line instead.
    """
    if console.is_terminal:
        return True

    def line(update: ProgressUpdate) -> None:
        if update.info and update.info != "starting":
            done = f" [{update.done}/{update.total}]" if update.total is not None else ""
            console.print(f"{escape(update.task)}{done}: {escape(update.info)}",
                          highlight=False, soft_wrap=True)

    return line
