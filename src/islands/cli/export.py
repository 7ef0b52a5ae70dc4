"""``islands export RUN_DIR --format torch|onnx``: a horizontal run's trained model as a file."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from islands.cli.common import app, console, print_error
from islands.errors import IslandsError, OutputError

__all__ = ["export"]


class Format(str, Enum):
    """The formats ``islands export`` writes (:data:`islands.hfl.export.FORMATS`)."""

    torch = "torch"
    onnx = "onnx"


@app.command("export")
def export(
    run_dir: Annotated[Path, typer.Argument(
        help="The output folder of an 'islands run' of a horizontal job.",
        show_default=False)],
    format: Annotated[Format, typer.Option(
        "--format", help="torch: the state dict (torch.load(..., weights_only=True)); "
                         "onnx: an ONNX model for onnxruntime.")] = Format.onnx,
    output: Annotated[Path | None, typer.Option(
        "--output", help="The file to write (default: <job name>.pt or .onnx here).")] = None,
) -> None:
    """Rebuild a run's trained model from results.json and model.pt; write it as a file."""
    from islands.hfl.export import export_run
    from islands.hfl.torch.onnx_export import ModelExportError

    try:
        path = export_run(run_dir, format.value, output)
    except (ModelExportError, OutputError) as exc:  # the export itself failed
        print_error(exc)
        raise typer.Exit(1) from exc
    except (IslandsError, ImportError) as exc:  # what it was given cannot be used
        print_error(exc)
        raise typer.Exit(2) from exc
    console.print(f"wrote {escape(str(path))} ({format.value}, "
                  f"{path.stat().st_size / 1024:.0f} KiB)")
