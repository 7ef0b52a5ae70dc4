"""A practitioner's own PyTorch model as the model a federation trains.

:class:`TorchModel` binds an ``nn.Module`` (the initial model), a zero-argument factory,
or a factory named ``"package.module:function"`` with keyword arguments (job and
federation files: every party imports it on its own machine; code never travels) to the
shape of one example. It offers what the trainers use of a
:class:`~islands.hfl.torch.models.ModelSpec` (``empty``, ``build``, ``n_params``, ...), so
every protocol, protection and backend trains it unchanged.

What travels (the model contract, ``docs/hfl.md``):

- the **trainable parameters** (``requires_grad``), in ``parameters()`` order, each
  flattened row-major: what the clients' SGD steps change. A frozen parameter never
  travels and keeps the initial model's value everywhere (fine-tuning a head uploads the
  head);
- then the **floating-point buffers that belong to the state dict** (BatchNorm's running
  mean and variance), in ``named_buffers()`` order: averaged like parameters, under the
  same protection;
- never an **integer buffer** (BatchNorm's ``num_batches_tracked``): it is set back to
  the initial model's value whenever a model is loaded, so it is never averaged; nor a
  non-persistent buffer (``register_buffer(..., persistent=False)``), which keeps the
  initial model's value.

Every protection (secure aggregation, additive sharing, CKKS, Paillier, chaos, client-level
DP) covers exactly that vector. Stochastic layers (dropout) draw from torch's global
generator: such a model trains correctly but not bit for bit the same from run to run.

This module imports torch.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from islands.errors import ValidationError, invalid_parameter
from islands.hfl.named import import_callable
from islands.hfl.torch.models import (
    ModelSpec,
    flat_parameters,
    lay_out,
    load_flat,
    load_local,
    local_state,
    register_model_type,
)
from islands.validation import describe

__all__ = ["TorchModel", "import_factory", "load_model"]

_CHECK_ROWS = 2


def import_factory(name: str, owner: str = "TorchModel",
                   folder: str | os.PathLike[str] | None = None) -> Callable[..., Any]:
    """Import the factory ``"package.module:function"`` on this machine and return it.

    :func:`islands.hfl.named.import_callable` with ``param="factory"``: with ``folder`` (a
    job file's), a module found nowhere else is looked up there too.

    Raises
    ------
    ValidationError
        If the name is malformed, the module cannot be imported here or has no such
        callable (each party imports the factory itself: it must be installed there).
    """
    return import_callable(name, param="factory", owner=owner, folder=folder)


def _seeded_call(factory: Callable[..., Any], kwargs: Mapping[str, Any], seed: int,
                 what: str) -> nn.Module:
    """Call ``factory(**kwargs)`` with torch's global generator seeded ``seed``, restored after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            module = factory(**kwargs)
        except Exception as exc:
            raise ValidationError(f"The model factory {what} failed: {exc!r}") from exc
    if not isinstance(module, nn.Module):
        raise ValidationError(f"The model factory {what} must return a torch.nn.Module; "
                              f"it returned {describe(module)}")
    return module


def _state_digest(module: nn.Module) -> str:
    """Return a SHA-256 of the module's state dict and of which parameters train."""
    h = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    for name, p in module.named_parameters():
        h.update(f"{name}:{int(p.requires_grad)};".encode())
    return h.hexdigest()


@dataclass(frozen=True, eq=False)
class TorchModel:
    """A user's ``nn.Module``, bound to the shape of one example (see the module docstring).

    Build it with :meth:`bind`; :class:`~islands.hfl.FederatedModel` does so at ``fit`` from
    its ``model`` parameter (an ``nn.Module`` or a factory) and the shape of the rows.

    Attributes
    ----------
    module : torch.nn.Module
        The initial model (a private CPU copy; never trained in place).
    input_shape : tuple of int
        The shape of one example.
    n_outputs : int
        The width of the model's output: classes, or 1 for a regression.
    factory : str or None
        The ``"package.module:function"`` it was built from, if any.
    kwargs : mapping
        The factory's keyword arguments.
    """

    module: nn.Module
    input_shape: tuple[int, ...]
    n_outputs: int
    factory: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    _buffers: tuple[str, ...] = ()
    _resets: tuple[str, ...] = ()
    _digest: str = ""
    local_layers: str | None = None
    _local_params: tuple[str, ...] = ()
    _local_buffers: tuple[str, ...] = ()
    _initial_local: NDArray[np.float32] = field(
        default_factory=lambda: np.zeros(0, np.float32), repr=False)

    input_divisor = 1.0
    """No scaling of the inputs: a user's module does its own preprocessing."""

    @classmethod
    def bind(cls, model: Any, input_shape: tuple[int, ...], *, task: str = "classification",
             seed: int = 0, kwargs: Mapping[str, Any] | None = None,
             owner: str = "FederatedModel",
             folder: str | os.PathLike[str] | None = None,
             local_layers: str | None = None) -> TorchModel:
        """Bind a module or factory to examples of ``input_shape`` and check it.

        Parameters
        ----------
        model : torch.nn.Module, callable or str
            The initial model (copied), a factory called once with ``kwargs`` (torch's
            global generator seeded with ``seed`` for the call, then restored), or a
            factory's name ``"package.module:function"``.
        input_shape : tuple of int
            The shape of one example (the rows' shape without their count).
        task : {"classification", "regression"}
            Classification needs an output of shape (n, classes ≥ 2); a regression
            (n, 1) or (n,).
        seed : int
            Seeds a factory's call.
        kwargs : mapping or None
            A factory's keyword arguments (plain values).
        owner : str
            Who asks, for the messages.
        folder : path or None
            Where a factory's module may also be (a job file's folder: :func:`import_factory`).
        local_layers : {"batchnorm"} or None
            Layers whose parameters and buffers stay with each client (FedBN: every batch
            norm); None: everything trainable travels.

        Raises
        ------
        ValidationError
            Naming what is wrong: not a module, no trainable parameter, a parameter that
            is not float32, a forward pass that fails or gives the wrong shape.
        """
        kwargs = dict(kwargs or {})
        factory_name: str | None = None
        if isinstance(model, str):
            factory_name = model
            module = _seeded_call(import_factory(model, owner, folder), kwargs, seed,
                                  repr(model))
        elif isinstance(model, nn.Module):
            if kwargs:
                raise invalid_parameter("kwargs", owner, "empty for an nn.Module (they are a "
                                        "factory's arguments)", describe(kwargs))
            module = model
        elif callable(model):
            module = _seeded_call(model, kwargs, seed, getattr(model, "__qualname__",
                                                               repr(model)))
        else:
            raise invalid_parameter("model", owner, "a ModelSpec, a torch.nn.Module, a "
                                    "zero-argument factory or 'package.module:function'",
                                    describe(model))
        try:
            module = copy.deepcopy(module).to("cpu")
        except Exception as exc:
            raise ValidationError(f"The 'model' parameter of {owner} cannot be copied "
                                  f"({exc!r}); every party trains private copies") from exc
        shape = tuple(int(v) for v in input_shape)
        _check_parameters(module, owner)
        local_params, local_buffers = _local_parts(module, local_layers, owner)
        state = set(module.state_dict())
        buffers: list[str] = []
        resets: list[str] = []
        for name, buffer in module.named_buffers():
            if name not in state or name in local_buffers:
                continue  # non-persistent (never travels) or the client's own
            (buffers if buffer.is_floating_point() else resets).append(name)
        n_outputs = _check_forward(module, shape, task, owner)
        bound = cls(module=module, input_shape=shape, n_outputs=n_outputs,
                    factory=factory_name, kwargs=kwargs, _buffers=tuple(buffers),
                    _resets=tuple(resets), _digest=_state_digest(module),
                    local_layers=local_layers, _local_params=local_params,
                    _local_buffers=local_buffers)
        object.__setattr__(bound, "_initial_local", local_state(bound.empty()))
        return bound

    @property
    def input_size(self) -> int:
        """The number of features of one example."""
        return math.prod(self.input_shape)

    @property
    def digest(self) -> str:
        """SHA-256 of the initial model's state dict and of which parameters train."""
        return self._digest

    def empty(self) -> nn.Module:
        """Return a fresh copy of the initial model, laid out for flat loads and steps."""
        module = copy.deepcopy(self.module)
        buffers = tuple(_owner_of(module, name) for name in self._buffers)
        resets = tuple((*_owner_of(module, name), module.get_buffer(name).detach().clone())
                       for name in self._resets)
        return lay_out(module, buffers, resets,
                       local=tuple(module.get_parameter(n) for n in self._local_params),
                       local_buffers=tuple(_owner_of(module, n) for n in self._local_buffers))

    def initial_local(self) -> NDArray[np.float32]:
        """Return the initial model's local layers (empty without local layers)."""
        return self._initial_local

    def build(self, seed: int = 0) -> nn.Module:
        """Return the initial model (``seed`` is unused: the model is the one bound)."""
        return self.empty()

    def initial_params(self, seed: int = 0) -> NDArray[np.float32]:
        """Return the initial model's travelling vector."""
        return flat_parameters(self.empty())

    def n_trainable(self) -> int:
        """Return the number of trainable parameter values (the SGD steps' length)."""
        return sum(p.numel() for p in self.module.parameters() if p.requires_grad)

    def n_params(self) -> int:
        """Return the length of the travelling vector: trainable values, then buffers."""
        kept = sum(self.module.get_parameter(n).numel() for n in self._local_params)
        return self.n_trainable() - kept + sum(self.module.get_buffer(name).numel()
                                               for name in self._buffers)

    def travelling_buffers(self) -> tuple[str, ...]:
        """Return the names of the buffers that travel after the parameters."""
        return self._buffers

    def describe(self) -> str:
        """Return a one-line description, e.g. ``"Net (user model: 1,234 trained ...)"``."""
        frozen = sum(p.numel() for p in self.module.parameters() if not p.requires_grad)
        kept = self._initial_local.size
        buffered = sum(self.module.get_buffer(n).numel() for n in self._buffers)
        source = f" from {self.factory}" if self.factory else ""
        parts = [f"{self.n_trainable():,} trained parameters"]
        if frozen:
            parts.append(f"{frozen:,} frozen")
        if kept:
            parts.append(f"{kept:,} values of local {self.local_layers} layers stay")
        if buffered:
            parts.append(f"{buffered:,} buffer values")
        return (f"{type(self.module).__name__} (user model{source}: {', '.join(parts)}; "
                f"{self.n_params():,} values travel)")

    def shaping(self) -> dict[str, Any]:
        """Return the settings of this model a checkpoint records (plain values)."""
        return {"model.class": f"{type(self.module).__module__}.{type(self.module).__qualname__}",
                "model.factory": self.factory, "model.kwargs": dict(self.kwargs),
                "model.input_shape": self.input_shape, "model.n_outputs": self.n_outputs,
                "model.digest": self.digest}

    def export(self, params: Any, local: Any = None) -> nn.Module:
        """Return a copy of the model holding ``params`` (a travelling vector), in eval mode.

        ``local``: a client's local layers (FedBN), None for the initial model's. The
        copy is a plain module again (no flat layout): save it with
        ``torch.save(module.state_dict(), path)``.
        """
        laid = self.empty()
        load_flat(laid, params)
        load_local(laid, self._initial_local if local is None
                   else np.asarray(local, dtype=np.float32))
        out = copy.deepcopy(self.module)
        out.load_state_dict({k: v.clone() for k, v in laid.state_dict().items()})
        return out.eval()


register_model_type(TorchModel)


def _owner_of(module: nn.Module, name: str) -> tuple[nn.Module, str]:
    prefix, _, leaf = name.rpartition(".")
    return (module.get_submodule(prefix) if prefix else module), leaf


LOCAL_LAYERS: tuple[str, ...] = ("batchnorm",)
"""What ``local_layers`` may name: ``"batchnorm"``, every batch-norm layer (FedBN)."""


def _local_parts(module: nn.Module, local_layers: str | None, owner: str
                 ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Return the names of the parameters and float buffers that stay with each client."""
    if local_layers is None:
        return (), ()
    if local_layers not in LOCAL_LAYERS:
        raise invalid_parameter("local_layers", owner, f"None or one of {LOCAL_LAYERS}",
                                describe(local_layers))
    layers = [(name, layer) for name, layer in module.named_modules()
              if isinstance(layer, nn.modules.batchnorm._BatchNorm)]
    if not layers:
        raise ValidationError(f"FedBN keeps every batch-norm layer local, but the 'model' of "
                              f"{owner} has none: train it with FedAvg")
    params: list[str] = []
    buffers: list[str] = []
    for name, layer in layers:
        prefix = f"{name}." if name else ""
        params += [prefix + n for n, p in layer.named_parameters(recurse=False)
                   if p.requires_grad]
        buffers += [prefix + n for n, b in layer.named_buffers(recurse=False)
                    if b.is_floating_point()]
    return tuple(params), tuple(buffers)


def _check_parameters(module: nn.Module, owner: str) -> None:
    trainable = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    if not trainable:
        raise ValidationError(f"The 'model' parameter of {owner} has no trainable parameter "
                              "(every parameter has requires_grad=False): nothing to train")
    for name, p in trainable:
        if p.dtype != torch.float32:
            raise ValidationError(
                f"The 'model' parameter of {owner} has parameter {name!r} of dtype "
                f"{p.dtype}; islands trains float32 models (call module.float())")


def _check_forward(module: nn.Module, shape: tuple[int, ...], task: str, owner: str) -> int:
    """Run the model on zero rows of ``shape`` and return its output width."""
    probe = copy.deepcopy(module).eval()
    try:
        with torch.no_grad():
            out = probe(torch.zeros((_CHECK_ROWS, *shape), dtype=torch.float32))
    except Exception as exc:
        raise ValidationError(
            f"The 'model' parameter of {owner} fails on a batch of shape "
            f"{(_CHECK_ROWS, *shape)} (the rows' shape): {exc!r}") from exc
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise ValidationError(f"The 'model' parameter of {owner} must return a float tensor; "
                              f"it returned {describe(out)}")
    if task == "regression":
        if tuple(out.shape) not in ((_CHECK_ROWS,), (_CHECK_ROWS, 1)):
            raise ValidationError(
                f"The 'model' parameter of {owner} must return shape (n, 1) or (n,) for a "
                f"regression; it returned {tuple(out.shape)} for n={_CHECK_ROWS}")
        return 1
    if out.ndim != 2 or out.shape[0] != _CHECK_ROWS or out.shape[1] < 2:
        raise ValidationError(
            f"The 'model' parameter of {owner} must return shape (n, classes) with classes "
            f">= 2 for a classification (logits); it returned {tuple(out.shape)} for "
            f"n={_CHECK_ROWS}")
    return int(out.shape[1])


def load_model(path: str | os.PathLike[str], model: Any) -> nn.Module:
    """Load a trained model's state dict (``model.pt``, :meth:`FederatedModel.save`).

    Parameters
    ----------
    path : path
        The file: a state dict as ``torch.save`` writes it; read with
        ``weights_only=True`` (tensors only, no code runs).
    model : torch.nn.Module, callable, str or ModelSpec
        What was trained: the initial module (copied), a factory (called, or imported
        from ``"package.module:function"``), or the built-in :class:`ModelSpec`.

    Returns
    -------
    torch.nn.Module
        The model holding the trained state, in eval mode.

    Raises
    ------
    ValidationError
        If the file is not a state dict, or its entries do not match the model's
        (the missing and unexpected names listed).
    """
    if isinstance(model, ModelSpec):
        module: nn.Module = nn.Sequential(*model._layers())
    elif isinstance(model, nn.Module):
        module = copy.deepcopy(model)
    elif isinstance(model, str) or callable(model):
        factory = import_factory(model, "load_model") if isinstance(model, str) else model
        module = factory()
        if not isinstance(module, nn.Module):
            raise ValidationError(f"load_model: the factory returned {describe(module)}, not "
                                  "a torch.nn.Module")
    else:
        raise invalid_parameter("model", "load_model", "a torch.nn.Module, a factory or a "
                                "ModelSpec", describe(model))
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:
        raise ValidationError(f"load_model: {os.fspath(path)!r} is not a model state dict "
                              f"({exc!r})") from None
    if not isinstance(state, Mapping):
        raise ValidationError(f"load_model: {os.fspath(path)!r} holds {describe(state)}, not "
                              "a state dict")
    try:
        result = module.load_state_dict(dict(state), strict=False)
    except RuntimeError as exc:  # shapes that differ
        raise ValidationError(f"load_model: {os.fspath(path)!r} does not fit the model: "
                              f"{exc}") from None
    if result.missing_keys or result.unexpected_keys:
        raise ValidationError(
            f"load_model: {os.fspath(path)!r} does not fit the model: missing "
            f"{list(result.missing_keys)}, unexpected {list(result.unexpected_keys)}")
    return module.eval()
