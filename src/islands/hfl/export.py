"""A finished horizontal run's model, rebuilt from its folder and written as torch or ONNX.

``islands export RUN_DIR --format torch|onnx`` (:func:`export_run`) reads what ``islands
run`` wrote: ``results.json`` (the job's ``[model]`` and the data's shape: ``input_shape``,
``n_outputs``, ``input_divisor``) and ``model.pt`` (the trained state dict, read with
``weights_only=True``), checked as one complete set like :func:`islands.load_run` does.
:func:`load_run_model` rebuilds the model the job named: a built-in
:class:`~islands.hfl.torch.models.ModelSpec`, or a user's factory imported on this machine
(the job file's folder searched too) and called with its ``args`` under the job's seed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError as PydanticError

from islands.errors import DataNotFoundError, OutputError, ValidationError, invalid_parameter
from islands.hfl.config import ModelConfig
from islands.reporting import (
    MANIFEST,
    RESULTS,
    check_result_set,
    check_writable,
    write_bytes,
)
from islands.validation import describe

__all__ = ["FORMATS", "default_output", "export_run", "load_run_model"]

FORMATS = {"torch": ".pt", "onnx": ".onnx"}
"""The formats :func:`export_run` writes, and their file suffixes."""
_SHAPE_KEYS = ("input_shape", "n_outputs", "input_divisor")


def _results(root: Path) -> dict[str, Any]:
    """Return a horizontal run's ``results.json``, its set checked complete, or raise."""
    if not root.is_dir():
        raise DataNotFoundError(f"{root} is not a folder: name the output folder of an "
                                "'islands run'")
    file = root / RESULTS
    if not file.is_file():
        raise DataNotFoundError(f"no {RESULTS} in {root}: it is not the output folder of an "
                                "'islands run'")
    check_result_set(root)
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{file} is not valid JSON ({exc})") from exc
    job = doc.get("job") if isinstance(doc, dict) else None
    if not isinstance(job, dict):
        raise ValidationError(f"{file} is not the results of an 'islands run' job (no 'job')")
    if job.get("kind") == "vertical" or "loss_history" in doc:
        raise ValidationError(
            f"{root} is a vertical run: no one holds its whole model, so there is none to "
            "export; each party keeps its own part (party-<name>.json: islands.vfl.parts, "
            "docs/vfl.md)")
    if not isinstance(doc.get("history"), list) or not isinstance(job.get("model"), dict):
        raise ValidationError(f"{file} is not the results of a horizontal 'islands run' job")
    out: dict[str, Any] = doc
    return out


def load_run_model(folder: str | Path) -> tuple[Any, tuple[int, ...]]:
    """Rebuild a horizontal run's trained model from its folder.

    Parameters
    ----------
    folder : path
        The output folder of an ``islands run`` of a horizontal job.

    Returns
    -------
    module : torch.nn.Module
        The trained model, in eval mode.
    input_shape : tuple of int
        The shape of one example.

    Raises
    ------
    DataNotFoundError
        If ``folder`` is not a folder, or has no ``results.json`` or ``model.pt``.
    ValidationError
        If its set of files is incomplete, it is a vertical run, ``results.json`` lacks
        the data's shape, the factory cannot be imported here (named), or ``model.pt``
        does not fit the model.
    """
    from islands.hfl.torch.user import TorchModel, load_model  # torch

    root = Path(folder)
    doc = _results(root)
    file = root / RESULTS
    state = root / "model.pt"
    if not state.is_file():
        raise DataNotFoundError(f"no model.pt in {root}: the run wrote no trained model "
                                "(islands before model.pt); run the job again")
    data = doc.get("data")
    if not isinstance(data, dict) or any(k not in data for k in _SHAPE_KEYS):
        raise ValidationError(
            f"{file} does not record the data's shape ({', '.join(_SHAPE_KEYS)}; runs of "
            "islands before 'islands export' did not): run the job again to export it")
    job = doc["job"]
    try:
        model = ModelConfig.model_validate(job["model"])
        shape = tuple(int(v) for v in data["input_shape"])
        n_outputs, divisor = int(data["n_outputs"]), float(data["input_divisor"])
    except (PydanticError, ValidationError, TypeError, ValueError) as exc:
        raise ValidationError(f"{file}: the job's [model] or the data's shape cannot be "
                              f"read ({exc})") from None
    if model.factory is None:
        return load_model(state, model.spec(shape, n_outputs, divisor)), shape
    source = job.get("source")
    where = Path(source).parent if isinstance(source, str) and source else None
    bound = TorchModel.bind(model.factory, shape, task=str(job.get("task", "classification")),
                            seed=int(job.get("seed", 0)), kwargs=model.args,
                            owner=f"the run in {root} ([model] of its job)",
                            folder=where if where is not None and where.is_dir() else None)
    return load_model(state, bound.module), shape


def _check_output(output: Path, suffix: str, root: Path) -> None:
    """Refuse an output that is a folder, cannot be written, or is one of the run's files."""
    if output.is_dir():
        raise ValidationError(f"the output {output} is a folder, not a file; name a file, "
                              f"e.g. {output / ('model' + suffix)}")
    other = {s for s in FORMATS.values() if s != suffix}
    if output.suffix in other:
        raise ValidationError(f"the output {output} ends in {output.suffix}, but the format "
                              f"writes a {suffix} file; name a {suffix} file")
    check_writable(output, "the output", folder=False)
    if output.resolve().parent == root.resolve() and (root / MANIFEST).is_file():
        listed = json.loads((root / MANIFEST).read_text(encoding="utf-8")).get("files", {})
        if output.name in listed:
            raise ValidationError(f"the output {output} is one of the run's own files "
                                  f"({MANIFEST} lists it); choose another output")


def default_output(name: str, format: str) -> Path:
    """Return where :func:`export_run` writes by default: ``<job name>.<suffix>`` here."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"
    return Path(f"{stem}{FORMATS[format]}")


def export_run(folder: str | Path, format: str = "onnx",
               output: str | Path | None = None) -> Path:
    """Write a horizontal run's trained model as ``format``, whole.

    Parameters
    ----------
    folder : path
        The run's output folder (``results.json`` and ``model.pt``).
    format : {"torch", "onnx"}
        ``"torch"``: the state dict (``torch.save``, loads with ``weights_only=True``);
        ``"onnx"``: an ONNX model for onnxruntime (:mod:`islands.hfl.torch.onnx_export`).
    output : path or None
        The file to write (its folder created). None: ``<job name>.pt`` or
        ``<job name>.onnx`` in the working directory.

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    DataNotFoundError, ValidationError
        As :func:`load_run_model`; or ``format`` is unknown, or ``output`` is a folder, a
        file of the other format, one of the run's own files or cannot be written.
    ModelExportError
        If torch cannot export the model to ONNX (its reason).
    ImportError
        If ONNX export's packages are missing (the ``export`` extra).
    """
    if format not in FORMATS:
        raise invalid_parameter("format", "islands export", "'torch' or 'onnx'",
                                describe(format))
    root = Path(folder)
    doc = _results(root)
    out = (default_output(str(doc["job"].get("name", root.name)), format) if output is None
           else Path(output))
    _check_output(out, FORMATS[format], root)
    module, shape = load_run_model(root)
    if format == "onnx":
        from islands.hfl.torch.onnx_export import onnx_bytes  # torch

        data = onnx_bytes(module, shape)
    else:
        from islands.hfl.torch.models import state_bytes  # torch

        data = state_bytes(module)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"the output's folder {out.parent} cannot be created ({exc})") from exc
    return write_bytes(out, data)
