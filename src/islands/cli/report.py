"""``islands report RUN_DIR``: a run or reproduction folder as one self-contained HTML page.

The page (:func:`islands.run_report.write_html`) inlines its figures and style sheet, so it
opens from disk, offline, without JavaScript, and can be sent as one file.
"""

from __future__ import annotations

import webbrowser
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from islands.cli.common import app, console, stop_on_error
from islands.run_report import write_html

__all__ = ["report"]


@app.command("report")
def report(
    run_dir: Annotated[Path, typer.Argument(
        help="A folder written by islands run, islands reproduce, islands contribution "
             "or an audit's --json.", show_default=False)],
    out: Annotated[Path | None, typer.Option(
        "--out", help="The page to write (default: RUN_DIR/report.html).")] = None,
    open_page: Annotated[bool, typer.Option(
        "--open/--no-open", help="Open the page in the default web browser.")] = False,
) -> None:
    """Write a run folder's results as one self-contained HTML page (figures inlined)."""
    with stop_on_error():
        page = write_html(run_dir, out)
    console.print(f"wrote {escape(str(page))} ({page.stat().st_size / 1024:.0f} KiB)")
    if open_page and not webbrowser.open(page.resolve().as_uri()):
        console.print("[yellow]no web browser found to open it[/]")
