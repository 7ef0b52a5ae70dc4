"""The models horizontal federated learning trains, and their flat-vector form.

Models travel between server and clients as one flat ``float32`` vector: the parameters
in ``module.parameters()`` order, each flattened row-major. Every module built here
holds its parameters as views into one contiguous flat tensor, so loading a vector is
one copy and an optimiser step is one vector-wide update (:mod:`islands.hfl.torch.training`).

Three model kinds (:class:`ModelSpec`):

* ``"mlp"``: flatten → (Linear → ReLU) per hidden width → Linear(n_outputs). The
  default 784-200-10 MLP of the FedAvg paper has 159,010 parameters
  (784·200 + 200 + 200·10 + 10).
* ``"cnn"``: for C×H×W images (H, W ≥ 12): Conv(C→c₁, 5×5, padding 2) → ReLU →
  MaxPool 2 → Conv(c₁→c₂, 5×5, padding 2) → ReLU → MaxPool 2 → flatten →
  Linear(→128) → ReLU → Linear(n_outputs). For 1×28×28 inputs, channels (16, 32) and
  10 outputs: 215,370 parameters (416 + 12,832 + 1568·128 + 128 + 1,290).
* ``"linear"``: flatten → Linear(d, n_outputs); with ``n_outputs=1`` a least-squares
  regression model (d + 1 parameters), otherwise multinomial logistic regression.

With ``input_divisor`` d ≠ 1 every kind first divides its input by d in ``float32`` (no
parameter): images kept as ``uint8`` with d = 255 train exactly as the same images
divided by 255 beforehand (``X / 255``, or ``load_fashion_mnist(normalize=True)``: a
correctly rounded ``float32`` quotient equals the ``float64`` one rounded to ``float32``
for every pixel value), in a quarter of the memory (the trainer converts one mini-batch
at a time: :mod:`islands.hfl.torch.training`).

This module imports torch; ``import islands.hfl`` does not import it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from islands.arrays import peak_abs
from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_float, check_int, describe, is_int

__all__ = [
    "ModelKind",
    "ModelSpec",
    "ModulePool",
    "check_model",
    "flat_parameters",
    "lay_out",
    "load_flat",
    "load_local",
    "local_state",
    "state_bytes",
    "travel_size",
]

ModelKind = Literal["mlp", "cnn", "linear"]
"""The model families :class:`ModelSpec` knows."""

_KINDS: tuple[str, ...] = ("mlp", "cnn", "linear")
_CNN_MIN_SIDE = 12
_CNN_HIDDEN = 128
_FLOAT32 = np.finfo(np.float32)
_FLAT_ATTR = "_islands_flat"
_PARAMS_ATTR = "_islands_params"
_BUFFERS_ATTR = "_islands_buffers"
_RESETS_ATTR = "_islands_resets"
_LOCAL_ATTR = "_islands_local"  # (number of trainable values that travel, local buffers)


def _int_tuple(value: Any, *, min_len: int, max_len: int | None = None) -> bool:
    """Tell whether ``value`` is a sequence of positive ints of an allowed length."""
    if not isinstance(value, (tuple, list)):
        return False
    if len(value) < min_len or (max_len is not None and len(value) > max_len):
        return False
    return all(is_int(v) and v >= 1 for v in value)


@dataclass(frozen=True)
class ModelSpec:
    """What model to train: enough to rebuild it identically anywhere.

    Parameters
    ----------
    kind : {"mlp", "cnn", "linear"}
        The model family (see the module docstring for the architectures).
    input_shape : tuple of int
        The shape of one example: ``(C, H, W)`` for images, ``(d,)`` for tabular rows.
        ``"cnn"`` needs three dimensions with H, W ≥ 12.
    n_outputs : int
        Classes (classification) or 1 (regression).
    hidden : tuple of int, default=(200,)
        The hidden widths of ``"mlp"`` (may be empty: softmax regression). Ignored by
        the other kinds.
    channels : tuple of (int, int), default=(16, 32)
        The output channels of the two convolutions of ``"cnn"``. Ignored by the other
        kinds.
    input_divisor : float, default=1.0
        Every input is divided by it before the first layer, in ``float32``: 255 for
        images held as ``uint8``. Stored as its ``float32`` value.

    Examples
    --------
    >>> ModelSpec("mlp", (1, 28, 28), 10).n_params()
    159010
    >>> ModelSpec("cnn", (1, 28, 28), 10).n_params()
    215370
    """

    kind: ModelKind
    input_shape: tuple[int, ...]
    n_outputs: int
    hidden: tuple[int, ...] = (200,)
    channels: tuple[int, int] = (16, 32)
    input_divisor: float = 1.0

    def __post_init__(self) -> None:
        owner = "ModelSpec"
        if self.kind not in _KINDS:
            raise invalid_parameter("kind", owner, "one of 'mlp', 'cnn', 'linear'", self.kind)
        if not _int_tuple(self.input_shape, min_len=1):
            raise invalid_parameter(
                "input_shape", owner, "a non-empty tuple of positive ints", self.input_shape
            )
        object.__setattr__(self, "input_shape", tuple(int(v) for v in self.input_shape))
        if self.kind == "cnn" and (
            len(self.input_shape) != 3 or min(self.input_shape[1:]) < _CNN_MIN_SIDE
        ):
            raise invalid_parameter(
                "input_shape",
                owner,
                f"(C, H, W) with H, W >= {_CNN_MIN_SIDE} for kind='cnn'",
                self.input_shape,
            )
        object.__setattr__(self, "n_outputs", check_int(self.n_outputs, "n_outputs", owner, low=1))
        if not _int_tuple(self.hidden, min_len=0):
            raise invalid_parameter("hidden", owner, "a tuple of positive ints", self.hidden)
        object.__setattr__(self, "hidden", tuple(int(v) for v in self.hidden))
        if not _int_tuple(self.channels, min_len=2, max_len=2):
            raise invalid_parameter(
                "channels", owner, "a tuple of two positive ints", self.channels
            )
        object.__setattr__(self, "channels", (int(self.channels[0]), int(self.channels[1])))
        divisor = check_float(self.input_divisor, "input_divisor", owner, low=0.0,
                              low_inclusive=False)
        with np.errstate(over="ignore"):
            as32 = float(np.float32(divisor))
        # a subnormal, 0 or inf in float32 would not be the divisor asked for
        if not _FLOAT32.tiny <= as32 <= _FLOAT32.max:
            raise invalid_parameter(
                "input_divisor", owner,
                f"a positive float within float32's normal range "
                f"[{_FLOAT32.tiny:.3g}, {_FLOAT32.max:.3g}]", divisor)
        object.__setattr__(self, "input_divisor", as32)  # specs equal when models are

    @property
    def input_size(self) -> int:
        """The number of features of one example, the product of ``input_shape``."""
        return math.prod(self.input_shape)

    def _layers(self) -> list[nn.Module]:
        """Return the layers of the architecture (the caller picks the device)."""
        body = self._body()
        return body if self.input_divisor == 1.0 else [_InputDivisor(self.input_divisor), *body]

    def _body(self) -> list[nn.Module]:
        if self.kind == "linear":
            return [nn.Flatten(), nn.Linear(self.input_size, self.n_outputs)]
        if self.kind == "mlp":
            layers: list[nn.Module] = [nn.Flatten()]
            width = self.input_size
            for h in self.hidden:
                layers += [nn.Linear(width, h), nn.ReLU()]
                width = h
            layers.append(nn.Linear(width, self.n_outputs))
            return layers
        c, h, w = self.input_shape
        c1, c2 = self.channels
        flat = c2 * (h // 2 // 2) * (w // 2 // 2)
        return [
            nn.Conv2d(c, c1, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(flat, _CNN_HIDDEN),
            nn.ReLU(),
            nn.Linear(_CNN_HIDDEN, self.n_outputs),
        ]

    def empty(self) -> nn.Module:
        """Build the module with uninitialised (arbitrary) parameters.

        The parameters are views into one contiguous flat ``float32`` tensor, so
        :func:`load_flat` and :func:`flat_parameters` are single copies. Nothing is
        drawn from any random generator. Use :meth:`build` for an initialised model.
        """
        with torch.device("meta"):
            module = nn.Sequential(*self._layers())
        # each meta parameter replaced by a view of the flat tensor, each buffer by its own
        # tensor (Module.to_empty would import sympy, half a second, at the first call)
        owned = [(sub, name, p) for sub in module.modules()
                 for name, p in sub.named_parameters(recurse=False)]
        flat = torch.zeros(sum(p.numel() for _, _, p in owned), dtype=torch.float32)
        offset = 0
        for sub, name, p in owned:
            size = p.numel()
            sub._parameters[name] = nn.Parameter(flat[offset : offset + size].view(p.shape),
                                                 requires_grad=p.requires_grad)
            offset += size
        for sub in module.modules():
            for name, b in list(sub.named_buffers(recurse=False)):
                sub._buffers[name] = torch.zeros(b.shape, dtype=b.dtype)
        params = list(module.parameters())
        setattr(module, _FLAT_ATTR, flat)
        setattr(module, _PARAMS_ATTR, tuple(params))  # walking the module tree is slow
        return module

    def n_trainable(self) -> int:
        """Return the number of trained values (every parameter travels: ``n_params``)."""
        return self.n_params()

    def export(self, params: Any) -> nn.Module:
        """Return a plain module (own tensors, no flat layout) holding ``params``, in eval mode."""
        module = nn.Sequential(*self._layers())
        laid = self.empty()
        load_flat(laid, params)
        module.load_state_dict({k: v.clone() for k, v in laid.state_dict().items()})
        return module.eval()

    def build(self, seed: int) -> nn.Module:
        """Build the model with PyTorch's default initialisation, drawn from ``seed``.

        Every weight and bias of a layer with fan-in f is drawn uniformly from
        [−1/√f, 1/√f] (the distribution of PyTorch's default ``reset_parameters``:
        Kaiming-uniform with a = √5 for weights, the same bound for biases), from a
        private :class:`torch.Generator` seeded with ``seed``, parameter by parameter in
        ``parameters()`` order. The global torch RNG is neither read nor advanced, so
        the same seed gives identical parameters in any thread, at any time.

        Parameters
        ----------
        seed : int
            A non-negative seed.

        Returns
        -------
        torch.nn.Module
            The model, parameters as views into one flat tensor (see :meth:`empty`).
        """
        seed = check_int(seed, "seed", "ModelSpec.build", low=0)
        module = self.empty()
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for layer in module.modules():
                if isinstance(layer, (nn.Linear, nn.Conv2d)):
                    fan_in = layer.weight[0].numel()
                    bound = 1.0 / math.sqrt(fan_in)
                    layer.weight.uniform_(-bound, bound, generator=generator)
                    if layer.bias is not None:
                        layer.bias.uniform_(-bound, bound, generator=generator)
        return module

    def initial_params(self, seed: int) -> NDArray[np.float32]:
        """Return the flat parameters of ``build(seed)``: an initial global model."""
        return flat_parameters(self.build(seed))

    def n_params(self) -> int:
        """Return the number of scalar parameters, the length of the flat vector."""
        with torch.device("meta"):
            module = nn.Sequential(*self._layers())
        return sum(p.numel() for p in module.parameters())

    def describe(self) -> str:
        """Return a one-line description, e.g. ``"MLP 784-200-10 (159,010 parameters)"``."""
        shape = "×".join(str(v) for v in self.input_shape)
        if self.kind == "mlp":
            widths = "-".join(str(v) for v in (self.input_size, *self.hidden, self.n_outputs))
            text = f"MLP {widths}"
        elif self.kind == "cnn":
            c1, c2 = self.channels
            text = (
                f"CNN on {shape}: conv5×5({c1})-pool-conv5×5({c2})-pool-fc{_CNN_HIDDEN}-"
                f"fc{self.n_outputs}"
            )
        else:
            text = f"linear {self.input_size}→{self.n_outputs}"
        if self.input_divisor != 1.0:
            text += f" on inputs / {self.input_divisor:.7g}"
        return f"{text} ({self.n_params():,} parameters)"


class _InputDivisor(nn.Module):
    """Divide the input by a constant (no parameter): ``ModelSpec.input_divisor``."""

    def __init__(self, divisor: float) -> None:
        super().__init__()
        self.divisor = divisor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a true float32 division, not a product with 1/d: x / 255 matches X / 255 computed
        # beforehand (in float64 or float32) for every uint8 value; x * (1/255) does not
        return x / self.divisor

    def extra_repr(self) -> str:
        return f"divisor={self.divisor:.7g}"


def _flat_of(module: nn.Module) -> torch.Tensor | None:
    """Return the flat tensor that ``module``'s trainable parameters view, if laid out here."""
    flat = getattr(module, _FLAT_ATTR, None)
    return flat if isinstance(flat, torch.Tensor) else None


def _params_of(module: nn.Module) -> tuple[nn.Parameter, ...]:
    """Return ``module``'s travelling (trainable) parameters in order.

    Cached for modules laid out here (:func:`lay_out`); any other module: every parameter.
    """
    cached = getattr(module, _PARAMS_ATTR, None)
    return cached if isinstance(cached, tuple) else tuple(module.parameters())


def _buffers_of(module: nn.Module) -> tuple[tuple[nn.Module, str], ...]:
    """Return the (owner, name) of each buffer that travels after the parameters."""
    cached = getattr(module, _BUFFERS_ATTR, None)
    return cached if isinstance(cached, tuple) else ()


def lay_out(module: nn.Module, buffers: tuple[tuple[nn.Module, str], ...] = (),
            resets: tuple[tuple[nn.Module, str, torch.Tensor], ...] = (),
            local: tuple[nn.Parameter, ...] = (),
            local_buffers: tuple[tuple[nn.Module, str], ...] = ()) -> nn.Module:
    """Lay ``module``'s trainable parameters out as views into one flat ``float32`` tensor.

    The travelling vector is then that tensor's travelling part followed by ``buffers``
    (each flattened), so :func:`load_flat` and :func:`flat_parameters` are single copies
    of the parameters and an optimiser step is one vector-wide update. Frozen parameters
    (no gradient) keep their values and never travel. ``resets`` are buffers set back to
    the given value at every load (integer counters that must not be averaged).

    ``local`` parameters (FedBN's batch-norm weights) are trained but stay with each
    client: they sit last in the flat tensor, after the travelling ones, and with
    ``local_buffers`` form the client's local state (:func:`local_state`,
    :func:`load_local`).

    Parameters
    ----------
    module : torch.nn.Module
        A CPU module whose trainable parameters are ``float32`` (changed in place).
    buffers : tuple of (module, name)
        The floating-point buffers that travel, in order.
    resets : tuple of (module, name, tensor)
        Buffers reset to ``tensor`` at every load.
    local : tuple of Parameter
        Trainable parameters that stay with the client.
    local_buffers : tuple of (module, name)
        Buffers that stay with the client.

    Returns
    -------
    torch.nn.Module
        ``module``.
    """
    kept = {id(p) for p in local}
    travel = tuple(p for p in module.parameters() if p.requires_grad and id(p) not in kept)
    params = travel + tuple(p for p in module.parameters() if p.requires_grad
                            and id(p) in kept)
    flat = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32)
    offset = 0
    for p in params:
        size = p.numel()
        with torch.no_grad():
            flat[offset : offset + size].copy_(p.detach().reshape(-1))
        p.data = flat[offset : offset + size].view(p.shape)
        offset += size
    setattr(module, _FLAT_ATTR, flat)
    setattr(module, _PARAMS_ATTR, params)  # walking the module tree is slow
    setattr(module, _BUFFERS_ATTR, tuple(buffers))
    setattr(module, _RESETS_ATTR, tuple(resets))
    setattr(module, _LOCAL_ATTR, (sum(p.numel() for p in travel), tuple(local_buffers)))
    return module


def _travelling(module: nn.Module, flat: torch.Tensor) -> torch.Tensor:
    """Return the part of the flat tensor that travels (all of it without local layers)."""
    cached = getattr(module, _LOCAL_ATTR, None)
    return flat if cached is None or cached[0] == flat.numel() else flat[: cached[0]]


def local_state(module: nn.Module) -> NDArray[np.float32]:
    """Return a copy of the part of a laid-out module that stays with its client.

    Its local trainable parameters (last in the flat tensor), then its local buffers;
    empty for a module without local layers.
    """
    cached = getattr(module, _LOCAL_ATTR, None)
    flat = _flat_of(module)
    if cached is None or flat is None:
        return np.zeros(0, dtype=np.float32)
    n, buffers = cached
    with torch.no_grad():
        parts = [flat[n:], *(owner.get_buffer(name).detach().reshape(-1).to(torch.float32)
                             for owner, name in buffers)]
        out: NDArray[np.float32] = torch.cat(parts).numpy().copy()
    return out


def load_local(module: nn.Module, values: NDArray[np.float32]) -> None:
    """Copy a client's local state (:func:`local_state`) back into a laid-out module."""
    cached = getattr(module, _LOCAL_ATTR, None)
    flat = _flat_of(module)
    if cached is None or flat is None:
        if values.size:
            raise ValidationError("this model has no local layers to load a state into")
        return
    n, buffers = cached
    expected = flat.numel() - n + sum(owner.get_buffer(name).numel()
                                      for owner, name in buffers)
    if values.shape != (expected,):
        raise invalid_parameter("values", "load_local", f"a vector of {expected} values "
                                "(the local layers' state)", describe(values))
    tensor = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32).copy())
    with torch.no_grad():
        flat[n:].copy_(tensor[: flat.numel() - n])
        offset = flat.numel() - n
        for owner, name in buffers:
            buffer = owner.get_buffer(name)
            size = buffer.numel()
            buffer.copy_(tensor[offset : offset + size].view(buffer.shape))
            offset += size


def _flat_tensor(module: nn.Module) -> torch.Tensor:
    """Return the flat tensor behind a module laid out by :func:`lay_out`, or raise."""
    flat = _flat_of(module)
    if flat is None:
        raise ValidationError(
            "The 'module' parameter must be built by ModelSpec or TorchModel (its parameters "
            f"views into one flat tensor). Got {type(module).__name__} instead."
        )
    return flat


def flat_parameters(module: nn.Module) -> NDArray[np.float32]:
    """Return a ``float32`` copy of what ``module`` sends: its travelling vector.

    The trainable parameters in ``module.parameters()`` order, each flattened row-major,
    then the travelling buffers of a :class:`~islands.hfl.torch.user.TorchModel`'s module
    (none for a :class:`ModelSpec`'s). Works for any module (every parameter, no
    buffer), and is a single copy for modules built by :class:`ModelSpec`.
    """
    flat = _flat_of(module)
    buffers = _buffers_of(module)
    fresh = flat is None or bool(buffers)  # a tensor of our own: no second copy
    if flat is not None:
        flat = _travelling(module, flat)
    with torch.no_grad():
        if flat is None:
            parts = [p.detach().reshape(-1).to(torch.float32) for p in _params_of(module)]
            flat = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float32)
        if buffers:
            # gathered by name: a module may replace a buffer rather than update it in place
            flat = torch.cat([flat, *(owner.get_buffer(name).detach().reshape(-1)
                                      .to(torch.float32) for owner, name in buffers)])
    arr = flat.detach().numpy()
    out: NDArray[np.float32] = arr if fresh else arr.copy()
    return out


def travel_size(module: nn.Module) -> int:
    """Return the length of ``module``'s travelling vector (:func:`flat_parameters`)."""
    flat = _flat_of(module)
    params = (sum(p.numel() for p in _params_of(module)) if flat is None
              else _travelling(module, flat).numel())
    return params + sum(owner.get_buffer(name).numel() for owner, name in _buffers_of(module))


def _check_vector(vector: Any, expected: int, name: str, owner: str) -> NDArray[np.float32]:
    """Return ``vector`` as a C-contiguous ``float32`` array of length ``expected``."""
    arr = np.asarray(vector)
    if arr.shape != (expected,) or arr.dtype.kind not in "fiu":
        raise invalid_parameter(
            name, owner, f"a 1-D float vector of length {expected}", describe(arr)
        )
    with np.errstate(over="ignore"):  # values beyond float32 become inf, refused below
        out = np.ascontiguousarray(arr, dtype=np.float32)
    if not math.isfinite(peak_abs(out)):
        bad = int(np.count_nonzero(~np.isfinite(out)))
        raise ValidationError(
            f"The {name!r} parameter of {owner} must be finite (after conversion to "
            f"float32). Got {bad} non-finite value(s) of {expected} instead."
        )
    return out


def load_flat(module: nn.Module, vector: Any) -> None:
    """Copy a travelling vector into ``module`` (the inverse of :func:`flat_parameters`).

    Parameters
    ----------
    module : torch.nn.Module
        Any module; a single copy for modules built by :class:`ModelSpec`.
    vector : array-like of shape (n_params,)
        Finite values, converted to ``float32``.

    Raises
    ------
    ValidationError
        If the length is not the module's travelling size, or a value is not finite
        (also after rounding to ``float32``).
    """
    _load_checked(module, _check_vector(vector, travel_size(module), "vector", "load_flat"))


def _load_checked(module: nn.Module, values: NDArray[np.float32]) -> None:
    """Copy an already validated vector into ``module`` and drop its gradients."""
    params = _params_of(module)
    flat = _flat_of(module)
    with torch.no_grad():
        if flat is not None:
            n = _travelling(module, flat).numel()
            np.copyto(flat.numpy()[:n], values[:n])  # numpy copy: fine for read-only input
            tensor = torch.tensor(values[n:]) if values.size > n else None
            offset = 0
        else:
            tensor = torch.tensor(values)
            offset = 0
            for p in params:
                size = p.numel()
                p.copy_(tensor[offset : offset + size].view(p.shape))
                offset += size
        for owner, name in _buffers_of(module):
            assert tensor is not None
            buffer = owner.get_buffer(name)
            size = buffer.numel()
            buffer.copy_(tensor[offset : offset + size].view(buffer.shape))
            offset += size
        for owner, name, initial in getattr(module, _RESETS_ATTR, ()):
            owner.get_buffer(name).copy_(initial)
    for p in params:
        p.grad = None


def state_bytes(module: nn.Module) -> bytes:
    """Return ``module``'s state dict as ``torch.save`` writes it (own tensors, no views).

    It loads with ``torch.load(..., weights_only=True)``: tensors only, no code.
    """
    import io

    buffer = io.BytesIO()
    torch.save({k: v.detach().clone() for k, v in module.state_dict().items()}, buffer)
    return buffer.getvalue()


_MODEL_TYPES: list[type] = []
"""The model kinds a trainer takes: :class:`ModelSpec`, and
:class:`~islands.hfl.torch.user.TorchModel` once its module is loaded (it registers
itself: no TorchModel exists before)."""


def register_model_type(kind: type) -> None:
    """Let trainers and pools take models of ``kind`` (``empty``, ``n_params``, ...)."""
    if kind not in _MODEL_TYPES:
        _MODEL_TYPES.append(kind)


register_model_type(ModelSpec)


def check_model(model: Any, name: str, owner: str) -> Any:
    """Return ``model`` if it is a ModelSpec or a bound TorchModel, else raise.

    The error names ``name`` of ``owner``.
    """
    if not isinstance(model, tuple(_MODEL_TYPES)):
        raise invalid_parameter(name, owner, "a ModelSpec or a TorchModel", describe(model))
    return model


class ModulePool:
    """A thread-safe pool of modules of one :class:`ModelSpec`.

    Modules are created on demand and reused: with many client threads, only as many
    modules exist as are borrowed at the same moment. A borrowed module's parameters
    hold whatever the previous borrower left; load a flat vector (:func:`load_flat`)
    to define them (which also drops any gradients). Gradients are cleared when a
    module is returned, so a borrowed module never carries a ``.grad``.

    Parameters
    ----------
    spec : ModelSpec
        The architecture of every module in the pool.

    Examples
    --------
    >>> pool = ModulePool(ModelSpec("linear", (3,), 1))
    >>> with pool.borrow() as module:
    ...     load_flat(module, [1.0, 2.0, 3.0, 0.5])
    >>> pool.size
    1
    """

    def __init__(self, spec: Any):
        self.spec = check_model(spec, "spec", "ModulePool")
        self._lock = threading.Lock()
        self._idle: list[nn.Module] = []
        self._created = 0

    @property
    def size(self) -> int:
        """How many modules the pool has created (idle and lent)."""
        with self._lock:
            return self._created

    @property
    def idle(self) -> int:
        """How many modules are idle, ready to be lent."""
        with self._lock:
            return len(self._idle)

    @contextmanager
    def borrow(self) -> Iterator[nn.Module]:
        """Lend a module for the duration of a ``with`` block, then take it back."""
        with self._lock:
            module = self._idle.pop() if self._idle else None
            if module is None:
                self._created += 1
        if module is None:
            module = self.spec.empty()
        try:
            yield module
        finally:
            _clear_grads(module)
            with self._lock:
                self._idle.append(module)


def _clear_grads(module: nn.Module) -> None:
    """Drop every parameter's ``.grad``."""
    for p in _params_of(module):
        p.grad = None
