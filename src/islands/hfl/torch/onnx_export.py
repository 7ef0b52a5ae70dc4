"""A trained model as an ONNX file (``model.onnx``), for serving without PyTorch.

:func:`onnx_bytes` exports a module in eval mode with torch's ``torch.export``-based
exporter (``torch.onnx.export(..., dynamo=True)``, which needs ``onnx`` and ``onnxscript``:
the ``export`` extra). The graph takes one ``float32`` input named ``input`` of shape
``(batch, *input_shape)``, the batch size free, and returns ``output``: the logits of a
classification, the values of a regression. A built-in model with an ``input_divisor``
divides its input inside the graph, as in PyTorch.

A module torch cannot export (data-dependent control flow, an operator ONNX lacks, a
batch size fixed in the code) raises :class:`ModelExportError` naming torch's reason.

This module imports torch; onnx and onnxscript are imported when a model is exported.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import logging
import re
import warnings
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from islands.errors import IslandsError

__all__ = ["INPUT_NAME", "ONNX_PACKAGES", "OUTPUT_NAME", "ModelExportError", "missing_packages",
           "onnx_bytes"]

INPUT_NAME = "input"
"""The ONNX graph's input: rows of ``float32``, shape ``(batch, *input_shape)``."""
OUTPUT_NAME = "output"
"""The ONNX graph's output: logits (classification) or values (regression)."""
ONNX_PACKAGES = ("onnx", "onnxscript")
"""What torch's exporter needs beyond torch (``pip install 'islands[export]'``)."""

_EXAMPLE_ROWS = 2  # a batch of 1 would be specialised to 1; 2 stays free
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REASON_CHARS = 400


class ModelExportError(IslandsError, RuntimeError):
    """Torch cannot export the model to ONNX; the message gives torch's reason."""


def missing_packages() -> list[str]:
    """Return the packages of :data:`ONNX_PACKAGES` not installed here (found, not imported)."""
    return [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence torch's exporter (its warnings, log lines and printed graphs) while it runs.

    Torch's loggers write to stderr with handlers of their own; the root ``torch``
    logger's level decides for them all. A failed trace also prints its graph to stdout.
    A failure is still raised, with its reason.
    """
    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with (warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()),
              contextlib.redirect_stderr(io.StringIO())):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _reason(exc: BaseException) -> str:
    """Return torch's reason for a failed export in one short line (its root cause)."""
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    text = _ANSI.sub("", str(root)).strip()
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    reason = f"{type(root).__name__}: {line}" if line else type(root).__name__
    return reason if len(reason) <= _REASON_CHARS else reason[: _REASON_CHARS - 1] + "…"


def onnx_bytes(module: nn.Module, input_shape: Sequence[int]) -> bytes:
    """Return ``module`` as an ONNX model (its weights inside), exported in eval mode.

    Parameters
    ----------
    module : torch.nn.Module
        The trained model (copied: ``module`` itself is left as it was).
    input_shape : sequence of int
        The shape of one example; the batch size stays free.

    Returns
    -------
    bytes
        The ONNX file: input ``input`` (float32, ``(batch, *input_shape)``), output
        ``output``.

    Raises
    ------
    ImportError
        If ``onnx`` or ``onnxscript`` is not installed (naming the extra).
    ModelExportError
        If torch cannot export the module, with torch's reason.
    """
    missing = missing_packages()
    if missing:
        raise ImportError(f"ONNX export needs {' and '.join(missing)}: pip install "
                          "'islands[export]'")
    shape = tuple(int(v) for v in input_shape)
    model = copy.deepcopy(module).to("cpu").eval()
    example = torch.zeros((_EXAMPLE_ROWS, *shape), dtype=torch.float32)
    try:
        with _quiet():
            program = torch.onnx.export(
                model, (example,), dynamo=True, input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME], external_data=False, verbose=False,
                dynamic_shapes=({0: torch.export.Dim("batch")},))
    except Exception as exc:  # torch's exporter raises many kinds: each is the model's
        raise ModelExportError(f"torch cannot export {type(module).__name__} to ONNX "
                               f"({_reason(exc)})") from exc
    if program is None:  # only the TorchScript exporter writes a file and returns None
        raise ModelExportError(f"torch returned no ONNX program for {type(module).__name__}")
    data: bytes = program.model_proto.SerializeToString()
    return data
