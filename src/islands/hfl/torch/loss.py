"""A user's loss function for the clients' local training.

By default a client minimises the task's loss: mean cross-entropy on class labels, mean
squared error on real targets. ``FederatedModel(loss=fn)``, or a file's ``[model] loss =
"package.module:function"`` (imported by each client on its own machine; code never
travels, only the name), replaces it everywhere a client computes a loss: the gradient of
every SGD step, the training loss reported, the contribution's ``"loss"`` metric and
DP-SGD's per-sample losses.

The contract, ``fn(outputs, targets) -> loss``:

- ``outputs``: the model's output on a mini-batch of b rows, float32, carrying gradient:
  shape (b, classes) (the logits) for a classification, shape (b,) for a regression (the
  model's (b, 1) output flattened, so that it lines up with the targets);
- ``targets``: the rows' int64 class labels, or float32 values, shape (b,);
- the result: a 0-dimensional float tensor, the **mean** over the batch, differentiable
  with respect to ``outputs``. A sum is b times larger, and so is every step.

DP-SGD needs each row's own loss ℓᵢ (clipping bounds each row's gradient): it calls ``fn``
on each row alone (a batch of one) and stacks the results, so ℓᵢ depends on row i only, as
the guarantee requires. A loss that is the mean of its rows' losses (every loss of
``torch.nn.functional`` with ``reduction="mean"``) gets the same gradients; one that
couples the rows of a batch is trained, under DP-SGD, as the mean of its one-row values.

:func:`bind_loss` checks a loss before anything runs, calling it on two rows of zeros
(the model in eval mode): not callable, an error, a non-tensor, a tensor that is not
0-dimensional, not floating point, not finite, or without gradient are refused with a
:class:`~islands.errors.ValidationError` naming ``loss``.

Checkpoints and resumes compare the loss by :attr:`UserLoss.name`: a named loss by its
``package.module:function``, a Python callable by module and qualified name (with a
``functools.partial``'s arguments, or a callable object's plain attributes, such as
``CrossEntropyLoss``'s ``label_smoothing``). A function whose body changed under the same
name is not detected.

This module imports torch.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from islands.errors import ValidationError, invalid_parameter
from islands.hfl.named import import_callable
from islands.validation import describe

__all__ = ["UserLoss", "bind_loss", "loss_name"]

_CHECK_ROWS = 2
_TASKS = ("classification", "regression")


def loss_name(fn: Any) -> str:
    """Return a stable name of a callable: ``module:qualname`` and its plain settings.

    A ``functools.partial`` shows its arguments; a callable object (an ``nn.Module``
    loss) its class and public attributes that hold plain values (``training`` left out).
    """
    if isinstance(fn, functools.partial):
        args = [repr(a) for a in fn.args]
        args += [f"{k}={v!r}" for k, v in sorted(fn.keywords.items())]
        return f"{loss_name(fn.func)}({', '.join(args)})"
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}:{qualname}"
    cls = type(fn)
    plain = {k: v for k, v in sorted(getattr(fn, "__dict__", {}).items())
             if not k.startswith("_") and k != "training"
             and (v is None or isinstance(v, bool | int | float | str))}
    settings = ", ".join(f"{k}={v!r}" for k, v in plain.items())
    return f"{cls.__module__}:{cls.__qualname__}({settings})"


@dataclass(frozen=True, eq=False)
class UserLoss:
    """A user's loss, checked against one model and task (see the module docstring).

    Build it with :func:`bind_loss`.

    Attributes
    ----------
    fn : callable
        ``fn(outputs, targets)``: a 0-dimensional tensor, the mean over the batch.
    name : str
        The ``"package.module:function"`` it was imported by, or :func:`loss_name`'s.
    """

    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    name: str

    def __call__(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Return the mean loss of a batch."""
        return self.fn(outputs, targets)

    def per_sample(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Return each row's loss, shape (b,): ``fn`` on each row alone (DP-SGD)."""
        return torch.stack([self.fn(outputs[i : i + 1], targets[i : i + 1]).reshape(())
                            for i in range(outputs.shape[0])])


def bind_loss(loss: Any, model: Any, task: str, *, owner: str = "FederatedModel",
              folder: str | os.PathLike[str] | None = None,
              per_sample: bool = False) -> UserLoss | None:
    """Resolve ``loss`` and check it on ``model``'s output for two rows.

    Parameters
    ----------
    loss : callable, str, UserLoss or None
        ``fn(outputs, targets)``, its name ``"package.module:function"`` (imported here),
        a :class:`UserLoss` (checked again) or None (the task's loss).
    model : ModelSpec or TorchModel
        The model whose outputs the loss takes.
    task : {"classification", "regression"}
        What the targets are.
    owner : str
        Who asks, for the messages.
    folder : path or None
        A job file's folder, searched for a named loss's module.
    per_sample : bool
        Also check a call on one row (DP-SGD calls the loss row by row).

    Returns
    -------
    UserLoss or None
        None for ``loss=None``.

    Raises
    ------
    ValidationError
        Naming ``loss`` and what is wrong.
    """
    if loss is None:
        return None
    if task not in _TASKS:
        raise invalid_parameter("task", owner, "'classification' or 'regression'", task)
    if isinstance(loss, UserLoss):
        bound = loss
    elif isinstance(loss, str):
        bound = UserLoss(import_callable(loss, param="loss", owner=owner, folder=folder), loss)
    elif callable(loss):
        bound = UserLoss(loss, loss_name(loss))
    else:
        raise invalid_parameter("loss", owner, "None, a callable fn(outputs, targets) or a "
                                "name 'package.module:function'", describe(loss))
    _check_call(bound, model, task, owner, per_sample)
    return bound


def _check_call(loss: UserLoss, model: Any, task: str, owner: str, per_sample: bool) -> None:
    """Call ``loss`` on the model's outputs for two rows of zeros; raise naming ``loss``."""
    module = model.build(0).eval()  # a fresh module
    rows = torch.zeros((_CHECK_ROWS, *model.input_shape), dtype=torch.float32)
    if task == "classification":
        targets = torch.arange(_CHECK_ROWS, dtype=torch.int64) % int(model.n_outputs)
    else:
        targets = torch.zeros(_CHECK_ROWS, dtype=torch.float32)
    with torch.enable_grad():
        outputs = module(rows)
        if task == "regression":
            outputs = outputs.reshape(-1)
        _check_value(loss, outputs, targets, owner, "a batch of two rows")
        if per_sample:
            _check_value(loss, outputs[:1], targets[:1], owner,
                         "one row (DP-SGD's per-sample losses)")


def _check_value(loss: UserLoss, outputs: torch.Tensor, targets: torch.Tensor, owner: str,
                 what: str) -> None:
    head = f"The 'loss' parameter of {owner} ({loss.name}) "
    try:
        value = loss(outputs, targets)
    except Exception as exc:
        raise ValidationError(f"{head}fails on {what}, outputs of shape "
                              f"{tuple(outputs.shape)} and targets of dtype {targets.dtype}: "
                              f"{exc!r}") from exc
    if not isinstance(value, torch.Tensor):
        raise ValidationError(f"{head}must return a torch tensor (the mean loss); it returned "
                              f"{describe(value)} on {what}")
    if value.ndim != 0 or not value.is_floating_point():
        raise ValidationError(f"{head}must return a 0-dimensional float tensor (the mean over "
                              f"the batch); it returned shape {tuple(value.shape)}, dtype "
                              f"{value.dtype} on {what}")
    if not math.isfinite(float(value.detach())):
        raise ValidationError(f"{head}must return a finite value; it returned "
                              f"{float(value.detach())} on {what}")
    if not value.requires_grad:
        raise ValidationError(f"{head}must be differentiable with respect to the outputs; "
                              f"its value on {what} carries no gradient (computed from "
                              "detached tensors or numpy?)")
