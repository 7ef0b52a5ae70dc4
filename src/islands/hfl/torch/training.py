"""Deterministic mini-batch SGD on one party's data: the client update and the CL baseline.

A federated client and the centralised baseline run the very same :class:`Trainer`, so
their updates agree step for step. Everything is a pure function of its inputs:

* **Batches.** Mini-batch ``step`` of ``epoch`` is ``perm[step·b:(step+1)·b]`` with
  ``perm = np.random.default_rng([seed, epoch]).permutation(n)``
  (:func:`batch_indices`); an epoch has ⌊n/b⌋ steps, the last partial batch is dropped
  (:func:`steps_per_epoch`). Training from position (epoch, step) therefore draws the
  same batches whoever asks, whatever happened before.
* **Update.** With loss L (mean cross-entropy, or mean squared error for regression, or
  the user's loss: :mod:`islands.hfl.torch.loss`) over the batch, w the current and w₀
  the starting parameters of the call (the global model)::

      g = ∇L(w) + λ·w + μ·(w − w₀) + δ    (weight decay λ, FedProx proximal term μ,
                                            SCAFFOLD's drift correction δ = c − c_i)
      v = g on the first step without a buffer, else v = m·v + g     (if m > 0)
      w = w − η·v   (or w − η·g if m = 0)

  exactly :class:`torch.optim.SGD` (dampening 0, no Nesterov) plus the proximal term
  μ/2·‖w − w₀‖² of FedProx. The momentum buffer v is returned and handed back by the
  caller, so a client's buffer survives between rounds.
* **State.** Modules come from a :class:`~islands.hfl.torch.models.ModulePool` and keep nothing
  between calls: each call loads the given vector and returns a copy of the result.

* **Rows.** Features are kept as ``float32``, or, given as ``uint8`` or ``int8`` (images),
  as they are: each mini-batch is converted to ``float32`` when it is used, which gives
  the values a ``float32`` copy would hold, in a quarter of the memory. Pair ``uint8``
  pixels with ``ModelSpec(input_divisor=255)``.

All arithmetic is ``float32``. The number of intra-op threads is the caller's business
(``torch.set_num_threads``); nothing here changes it. This module imports torch;
``import islands.hfl`` does not import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from torch import nn

from islands.errors import invalid_parameter
from islands.hfl.torch.loss import UserLoss, bind_loss
from islands.hfl.torch.models import (
    ModelSpec,
    ModulePool,
    _check_vector,
    _flat_tensor,
    _load_checked,
    _params_of,
    check_model,
    flat_parameters,
    load_local,
    local_state,
)
from islands.validation import (
    FLOAT32_LIMIT_REASON,
    MAX_ABS_FLOAT32,
    check_float,
    check_int,
    check_labels,
    check_values,
    describe,
    is_int,
)

__all__ = [
    "Position",
    "StepSettings",
    "Task",
    "TrainOutcome",
    "Trainer",
    "batch_indices",
    "steps_per_epoch",
    "train_centralised",
]

Task = Literal["classification", "regression"]
"""What a :class:`Trainer` learns: class labels (cross-entropy) or real targets (MSE)."""

_TASKS: tuple[str, ...] = ("classification", "regression")
_PREDICT_ROWS = 4096


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Return ⌊n/b⌋, the number of full mini-batches in one pass over ``n`` rows.

    The last partial batch is dropped, as the step counts of the APFL paper imply.

    Raises
    ------
    ValidationError
        If ``n < 1`` or ``batch_size`` is not in [1, n].
    """
    n = check_int(n, "n", "steps_per_epoch", low=1)
    check_int(batch_size, "batch_size", "steps_per_epoch", low=1, high=n)
    return n // int(batch_size)


def _permutation(n: int, seed: int, epoch: int) -> NDArray[np.int64]:
    """Return the row order of ``epoch``: ``default_rng([seed, epoch]).permutation(n)``."""
    perm: NDArray[np.int64] = np.random.default_rng([seed, epoch]).permutation(n)
    return perm


def batch_indices(n: int, batch_size: int, seed: int, epoch: int, step: int) -> NDArray[np.int64]:
    """Return the row indices of mini-batch ``step`` of ``epoch``.

    ``perm = np.random.default_rng([seed, epoch]).permutation(n)``, and the batch is
    ``perm[step·b:(step+1)·b]``: the batches of one epoch are disjoint and together
    cover ⌊n/b⌋·b distinct rows.

    Parameters
    ----------
    n : int
        The number of rows, at least 1.
    batch_size : int
        b, in [1, n].
    seed, epoch : int
        Non-negative; they select the permutation.
    step : int
        In [0, ⌊n/b⌋).

    Returns
    -------
    ndarray of shape (batch_size,), dtype int64
    """
    owner = "batch_indices"
    spe = steps_per_epoch(n, batch_size)
    seed = check_int(seed, "seed", owner, low=0)
    epoch = check_int(epoch, "epoch", owner, low=0)
    step = check_int(step, "step", owner, low=0, high=spe - 1)
    b = int(batch_size)
    out: NDArray[np.int64] = _permutation(int(n), seed, epoch)[step * b : (step + 1) * b].copy()
    return out


@dataclass(frozen=True)
class Position:
    """Where in the stream of mini-batches training stands: ``(epoch, step)``.

    Parameters
    ----------
    epoch : int
        Passes over the data completed, at least 0.
    step : int
        Mini-batches done in the current epoch, at least 0 (and below the number of
        steps per epoch wherever one is known).

    Examples
    --------
    >>> Position(0, 8).advance(5, steps_per_epoch=10)
    Position(epoch=1, step=3)
    """

    epoch: int = 0
    step: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epoch", check_int(self.epoch, "epoch", "Position", low=0))
        object.__setattr__(self, "step", check_int(self.step, "step", "Position", low=0))

    def check(self, steps_per_epoch: int, name: str, owner: str) -> None:
        """Raise if ``step`` is not below ``steps_per_epoch``; the error names ``name``."""
        if self.step >= steps_per_epoch:
            raise invalid_parameter(
                name, owner, f"a Position with step in [0, {steps_per_epoch})", self
            )

    def advance(self, steps: int, steps_per_epoch: int) -> Position:
        """Return the position ``steps`` mini-batches later, rolling over epoch ends.

        Parameters
        ----------
        steps : int
            At least 0.
        steps_per_epoch : int
            At least 1, and above this position's ``step``.
        """
        owner = "Position.advance"
        spe = check_int(steps_per_epoch, "steps_per_epoch", owner, low=1)
        steps = check_int(steps, "steps", owner, low=0)
        self.check(spe, "self", owner)
        total = self.epoch * spe + self.step + steps
        return Position(total // spe, total % spe)


@dataclass(frozen=True)
class TrainOutcome:
    """What one :meth:`Trainer.train` call returns.

    Attributes
    ----------
    params : ndarray of shape (n_params,), float32
        The trained flat parameter vector (a fresh array).
    momentum : ndarray of shape (n_trainable,), float32, or None
        The momentum buffer after the last step, to hand to the next call; None when
        momentum is 0.
    loss : float
        The mean of the mini-batch training losses of the steps (each computed before
        its update).
    steps : int
        The number of steps run.
    end : Position
        The position after the last step, where the next call should start.
    local : ndarray, float32
        The client's local layers after the steps (FedBN's batch norm: the state that
        never travels), to hand to the next call; empty without local layers.
    """

    params: NDArray[np.float32]
    momentum: NDArray[np.float32] | None
    loss: float
    steps: int
    end: Position
    local: NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))


@dataclass
class StepSettings:
    """The checked arguments of one :meth:`Trainer.train` call, and the update rule.

    ``apply`` is the SGD step of the module docstring: given the flat parameters ``w``
    (updated in place), the step's gradient ``g`` of the loss, the momentum buffer and
    the FedProx anchor w₀, it adds λ·w and μ·(w − w₀) to ``g``, folds in momentum and
    takes the step; it returns the new buffer.
    """

    params: NDArray[np.float32]
    steps: int
    batch_size: int
    steps_per_epoch: int
    lr: float
    momentum: float
    weight_decay: float
    prox_mu: float
    momentum_buffer: torch.Tensor | None
    correction: torch.Tensor | None = None

    def apply(self, flat: torch.Tensor, g: torch.Tensor, buf: torch.Tensor | None,
              anchor: torch.Tensor | None) -> torch.Tensor | None:
        """One SGD step on ``flat`` (in place) from gradient ``g``; returns the buffer."""
        if self.weight_decay != 0.0:
            g.add_(flat, alpha=self.weight_decay)
        if anchor is not None:
            g.add_(flat - anchor, alpha=self.prox_mu)
        if self.correction is not None:
            g.add_(self.correction)
        if self.momentum != 0.0:
            buf = g if buf is None else buf.mul_(self.momentum).add_(g)
            g = buf
        flat.add_(g, alpha=-self.lr)
        return buf


_COMPACT = (np.dtype(np.uint8), np.dtype(np.int8))
"""Feature types kept as given (every value exact in float32), converted a batch at a time."""


def _as_features(X: Any, spec: ModelSpec, name: str, owner: str) -> NDArray[Any]:
    """Return ``X`` as a C-contiguous ``(n, *input_shape)`` array of finite values.

    ``uint8`` and ``int8`` stay as they are, anything else becomes ``float32``. No copy
    when ``X`` is already writable and C-contiguous in one of those types.
    """
    arr = np.asarray(X)
    shape = spec.input_shape
    ok_shape = arr.ndim >= 1 and arr.shape[1:] in (shape, (spec.input_size,))
    if not ok_shape or arr.dtype.kind not in "biuf":
        expected = f"an array of shape (n, {', '.join(map(str, shape))})"
        if len(shape) > 1:
            expected += f" or (n, {spec.input_size})"
        raise invalid_parameter(name, owner, expected + " of real numbers", describe(arr))
    if arr.shape[0] == 0:
        raise invalid_parameter(
            name, owner, "at least one row (a party with no data cannot train)", describe(arr)
        )
    compact = arr.dtype in _COMPACT  # every value finite and exact in float32
    with np.errstate(over="ignore"):  # values beyond float32 become inf, refused below
        out = np.ascontiguousarray(arr, dtype=None if compact else np.float32)
    if not out.flags.writeable:  # torch.from_numpy refuses to share read-only memory
        out = out.copy()
    # max and min rather than isfinite and |x|: no temporary the size of the data, and a
    # NaN makes both comparisons false, so the same arrays pass
    if not compact and out.size and not (out.max() <= MAX_ABS_FLOAT32
                                         and out.min() >= -MAX_ABS_FLOAT32):
        # names the first NaN/inf or too large value, as given (before float32 rounding)
        check_values(np.asarray(arr, dtype=np.float64).reshape(arr.shape[0], -1), name, owner,
                     max_abs=MAX_ABS_FLOAT32, why=FLOAT32_LIMIT_REASON)
        # not raised: a value at the limit that float32 rounded up, accepted as given
    return out.reshape((out.shape[0], *shape))


def _as_float(rows: torch.Tensor) -> torch.Tensor:
    """Return a batch of rows as ``float32`` (a compact ``uint8``/``int8`` batch converted)."""
    return rows if rows.dtype == torch.float32 else rows.to(torch.float32)


def _as_targets(
    y: Any, n: int, task: str, n_outputs: int, name: str, owner: str
) -> NDArray[np.int64] | NDArray[np.float32]:
    """Validate targets: int64 labels in [0, n_outputs), or finite float32 values."""
    arr = np.asarray(y)
    if arr.shape != (n,):
        raise invalid_parameter(name, owner, f"a 1-D array of length {n} (one per row)",
                                describe(arr))
    if task == "classification":
        labels = check_labels(arr, name, owner)
        if labels.min() < 0 or labels.max() >= n_outputs:
            bad = labels[(labels < 0) | (labels >= n_outputs)]
            raise invalid_parameter(
                name, owner, f"class labels in [0, {n_outputs}) (n_outputs of the model)",
                int(bad[0]),
            )
        return labels
    if arr.dtype.kind not in "biuf":
        raise invalid_parameter(name, owner, "real-valued regression targets", describe(arr))
    check_values(np.asarray(arr, dtype=np.float64), name, owner, max_abs=MAX_ABS_FLOAT32,
                 why=FLOAT32_LIMIT_REASON)
    return np.array(arr, dtype=np.float32)  # a private copy


def _is_flat_float32(values: Any, n: int) -> bool:
    """Whether ``values`` is a C-contiguous float32 vector of length n (not its values)."""
    return (isinstance(values, np.ndarray) and values.dtype == np.float32
            and values.shape == (n,) and values.flags.c_contiguous)


def _flat_grads(tensors: tuple[nn.Parameter, ...], grad: torch.Tensor) -> torch.Tensor:
    """Make each parameter's ``.grad`` a view into ``grad`` (laid out as the flat tensor).

    Backpropagation then adds every layer's gradient into ``grad`` in place as soon as
    it is computed: the step's gradient is one model-sized tensor, where
    ``torch.autograd.grad`` returns one tensor per layer that a concatenation copies
    into a second.
    """
    offset = 0
    for p in tensors:
        size = p.numel()
        p.grad = grad[offset : offset + size].view(p.shape)
        offset += size
    return grad


class Trainer:
    """Mini-batch SGD of one model on one party's rows, deterministic and stateless.

    Parameters
    ----------
    spec : ModelSpec or TorchModel
        The model (a built-in architecture, or a user's module:
        :class:`~islands.hfl.torch.user.TorchModel`).
    X : array-like of shape (n, *spec.input_shape) or (n, prod(input_shape))
        The party's features, finite. Kept as a float32 tensor that shares memory with
        ``X`` when it already is writable C-contiguous float32 (it is never written).
    y : array-like of shape (n,)
        Class labels in [0, spec.n_outputs) (classification) or real targets
        (regression).
    task : {"classification", "regression"}, default="classification"
        Cross-entropy on class labels, or mean squared error on real targets
        (``spec.n_outputs`` must then be 1).
    seed : int, default=0
        The seed of this party's batch order (see :func:`batch_indices`).
    pool : ModulePool or None, default=None
        Where to borrow modules from; share one pool between many trainers of the same
        spec so that only as many modules exist as train at once. None: a private pool.
    loss : UserLoss, callable or None, default=None
        The user's loss ``fn(outputs, targets)`` in place of the task's
        (:mod:`islands.hfl.torch.loss`); a callable is checked here with
        :func:`~islands.hfl.torch.loss.bind_loss`. None: cross-entropy or squared error.

    Attributes
    ----------
    n : int
        The number of rows.
    n_params : int
        The length of the travelling vector (trainable parameters, then the buffers
        that travel: none for a ModelSpec).
    n_trainable : int
        The trainable parameters, the length of a momentum buffer.

    Notes
    -----
    One Trainer may be used from several threads at once: every call borrows its own
    module and keeps its state in local variables.
    """

    def __init__(
        self,
        spec: ModelSpec,
        X: Any,
        y: Any,
        *,
        task: Task = "classification",
        seed: int = 0,
        pool: ModulePool | None = None,
        loss: UserLoss | Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    ):
        owner = "Trainer"
        check_model(spec, "spec", owner)
        if task not in _TASKS:
            raise invalid_parameter("task", owner, "'classification' or 'regression'", task)
        if task == "regression" and spec.n_outputs != 1:
            raise invalid_parameter(
                "spec", owner, "a model with n_outputs=1 for task='regression'", spec
            )
        self.seed = check_int(seed, "seed", owner, low=0)
        if pool is None:
            pool = ModulePool(spec)
        elif not isinstance(pool, ModulePool) or pool.spec != spec:
            raise invalid_parameter("pool", owner, "None or a ModulePool of this spec",
                                    describe(pool))
        features = _as_features(X, spec, "X", owner)
        targets = _as_targets(y, features.shape[0], task, spec.n_outputs, "y", owner)
        self.spec = spec
        self.task: Task = task
        self.pool = pool
        self.n = int(features.shape[0])
        self.n_params = spec.n_params()
        self.n_trainable = spec.n_trainable()
        self.user_loss = loss if isinstance(loss, UserLoss) or loss is None else bind_loss(
            loss, spec, task, owner=owner)
        self._X = torch.from_numpy(features)
        self._y = torch.from_numpy(targets)
        self._perm: tuple[int, NDArray[np.int64]] | None = None

    def __repr__(self) -> str:
        loss = "" if self.user_loss is None else f", loss={self.user_loss.name!r}"
        return (f"Trainer({self.spec.describe()}, n={self.n}, task={self.task!r}, "
                f"seed={self.seed}{loss})")

    def steps_per_epoch(self, batch_size: int) -> int:
        """Return ⌊n/b⌋, the full mini-batches in one epoch of this party's rows."""
        self._check_batch_size(batch_size, "Trainer.steps_per_epoch")
        return self.n // int(batch_size)

    def _check_batch_size(self, batch_size: Any, owner: str) -> int:
        if not is_int(batch_size) or not 1 <= batch_size <= self.n:
            raise invalid_parameter(
                "batch_size", owner,
                f"an int in [1, {self.n}] (this party holds n={self.n} rows)",
                describe(batch_size),
            )
        return int(batch_size)

    def _epoch_order(self, epoch: int) -> NDArray[np.int64]:
        """Return the permutation of ``epoch``, cached for the latest epoch asked for."""
        cached = self._perm  # one read: safe against other threads replacing it
        if cached is not None and cached[0] == epoch:
            return cached[1]
        perm = _permutation(self.n, self.seed, epoch)
        self._perm = (epoch, perm)
        return perm

    def _loss(self, module: nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return self.loss(module, xb, yb)

    def train(
        self,
        params: Any,
        *,
        start: Position,
        steps: int,
        batch_size: int,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        prox_mu: float = 0.0,
        momentum_buffer: Any = None,
        local: Any = None,
        correction: Any = None,
        finite: bool = False,
    ) -> TrainOutcome:
        """Run ``steps`` SGD steps from ``params``, starting at mini-batch ``start``.

        Parameters
        ----------
        params : array-like of shape (n_params,)
            The starting flat parameters w₀ (the global model), finite.
        start : Position
            The first mini-batch; ``start.step`` must be below ⌊n/b⌋.
        steps : int
            At least 1. Steps run on past epoch ends into the next epoch.
        batch_size : int
            b, in [1, n].
        lr : float
            η > 0.
        momentum : float, default=0.0
            m in [0, 1): heavy-ball momentum as in :class:`torch.optim.SGD`.
        weight_decay : float, default=0.0
            λ ≥ 0, added to the gradient as λ·w (L2 regularisation λ/2·‖w‖²).
        prox_mu : float, default=0.0
            μ ≥ 0, the FedProx proximal term μ/2·‖w − w₀‖² (gradient μ·(w − w₀)).
        momentum_buffer : array-like of shape (n_trainable,) or None, default=None
            The buffer a previous call returned (not modified). None starts a fresh
            buffer (v = g on the first step). Must be None when momentum is 0.
        local : array-like or None, default=None
            The client's local layers (a previous call's ``local``); None: the initial
            model's. Only for a model with local layers (FedBN).
        correction : array-like of shape (n_trainable,) or None, default=None
            δ, added to every step's gradient (SCAFFOLD's c − c_i); None: no correction.
        finite : bool, default=False
            Whether the caller has already checked every value of ``params`` finite (the
            client role checks each model it receives): a ``float32`` vector of the
            right length is then taken without a second pass over its values.

        Returns
        -------
        TrainOutcome
        """
        st = self.settings(params, start=start, steps=steps, batch_size=batch_size, lr=lr,
                           momentum=momentum, weight_decay=weight_decay, prox_mu=prox_mu,
                           momentum_buffer=momentum_buffer, correction=correction,
                           owner="Trainer.train", finite=finite)
        b, spe, buf = st.batch_size, st.steps_per_epoch, st.momentum_buffer
        losses = 0.0
        pos = start
        with self.pool.borrow() as module:
            _load_checked(module, st.params)
            self._load_local(module, local)
            module.train()
            flat = _flat_tensor(module)
            anchor = flat.clone() if st.prox_mu > 0.0 else None
            tensors = _params_of(module)
            g = _flat_grads(tensors, torch.empty_like(flat))
            for _ in range(st.steps):
                perm = self._epoch_order(pos.epoch)
                idx = torch.from_numpy(perm[pos.step * b : (pos.step + 1) * b])
                g.fill_(-0.0)  # -0 + x is x for every x, -0 and +0 included
                with torch.enable_grad():
                    loss = self._loss(module, _as_float(self._X.index_select(0, idx)),
                                      self._y.index_select(0, idx))
                    torch.autograd.backward(loss, inputs=list(tensors))
                with torch.no_grad():
                    buf = st.apply(flat, g, buf, anchor)
                    if buf is g:  # the first momentum step keeps the gradient as its buffer
                        g = _flat_grads(tensors, torch.empty_like(flat))
                losses += float(loss.item())
                # inline rather than Position.advance: no re-validation on the hot path
                pos = Position(pos.epoch, pos.step + 1) if pos.step + 1 < spe else Position(
                    pos.epoch + 1, 0
                )
            for p in tensors:  # the gradient goes before the copy of the parameters
                p.grad = None
            del g
            out_params = flat_parameters(module)
            out_local = local_state(module)
        out_buf: NDArray[np.float32] | None = None if buf is None else buf.numpy()
        return TrainOutcome(out_params, out_buf, losses / st.steps, st.steps, pos, out_local)

    def _load_local(self, module: nn.Module, local: Any) -> None:
        """Load a client's local layers (the initial model's when None) into ``module``."""
        if local is None:
            initial = getattr(self.spec, "initial_local", None)
            if initial is not None:
                load_local(module, initial())
            return
        load_local(module, np.asarray(local, dtype=np.float32))

    def settings(self, params: Any, *, start: Position, steps: int, batch_size: int,
                 lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
                 prox_mu: float = 0.0, momentum_buffer: Any = None,
                 correction: Any = None,
                 owner: str = "Trainer.settings", finite: bool = False) -> StepSettings:
        """Check the arguments of :meth:`train` and return them as :class:`StepSettings`.

        Raises
        ------
        ValidationError
            Naming the first argument out of range (see :meth:`train`).
        """
        w0 = (params if finite and _is_flat_float32(params, self.n_params)
              else _check_vector(params, self.n_params, "params", owner))
        if not isinstance(start, Position):
            raise invalid_parameter("start", owner, "a Position", describe(start))
        steps = check_int(steps, "steps", owner, low=1)
        b = self._check_batch_size(batch_size, owner)
        spe = self.n // b
        start.check(spe, "start", owner)
        lr = check_float(lr, "lr", owner, low=0.0, low_inclusive=False)
        m = check_float(momentum, "momentum", owner, low=0.0)
        if m >= 1.0:
            raise invalid_parameter("momentum", owner, "a float in [0, 1)", momentum)
        wd = check_float(weight_decay, "weight_decay", owner, low=0.0)
        mu = check_float(prox_mu, "prox_mu", owner, low=0.0)
        buf: torch.Tensor | None = None
        if momentum_buffer is not None:
            if m == 0.0:
                raise invalid_parameter(
                    "momentum_buffer", owner, "None when momentum is 0", describe(momentum_buffer)
                )
            buf = torch.from_numpy(
                _check_vector(momentum_buffer, self.n_trainable, "momentum_buffer",
                              owner).copy()
            )
        delta = None if correction is None else torch.from_numpy(
            _check_vector(correction, self.n_trainable, "correction", owner).copy())
        return StepSettings(w0, steps, b, spe, lr, m, wd, mu, buf, delta)

    @property
    def features(self) -> torch.Tensor:
        """The party's rows, shape (n, *input_shape); do not modify.

        ``float32``, or ``uint8``/``int8`` as given (convert a batch with ``.float()``).
        """
        return self._X

    @property
    def targets(self) -> torch.Tensor:
        """The party's labels (int64) or targets (float32), shape (n,); do not modify."""
        return self._y

    def loss(self, module: nn.Module, xb: torch.Tensor, yb: torch.Tensor,
             reduction: str = "mean") -> torch.Tensor:
        """Return the loss of ``module`` on a batch: the user's, or the task's.

        ``reduction``: ``"mean"``, ``"sum"`` or ``"none"`` (each row's loss). A user's
        loss gives the mean; its sum is b times the mean and its rows' losses are its
        values on each row alone (:meth:`UserLoss.per_sample`).
        """
        return self.output_loss(module(xb), yb, reduction)

    def output_loss(self, out: torch.Tensor, yb: torch.Tensor,
                    reduction: str = "mean") -> torch.Tensor:
        """Return the loss of a batch's outputs ``out`` against its targets ``yb``.

        :meth:`loss` without the forward pass (as a batched forward calls it, one
        client's outputs at a time).
        """
        user = self.user_loss
        if user is not None:
            if self.task == "regression":
                out = out.reshape(-1)
            if reduction == "none":
                return user.per_sample(out, yb)
            value = user(out, yb)
            return value * out.shape[0] if reduction == "sum" else value
        if self.task == "classification":
            return F.cross_entropy(out, yb, reduction=reduction)
        return F.mse_loss(out.reshape(-1), yb, reduction=reduction)

    def _outputs(self, params: Any, X: Any, owner: str, local: Any = None) -> torch.Tensor:
        w = _check_vector(params, self.n_params, "params", owner)
        features = torch.from_numpy(_as_features(X, self.spec, "X", owner))
        chunks = []
        with self.pool.borrow() as module, torch.no_grad():
            _load_checked(module, w)
            self._load_local(module, local)
            module.eval()
            for lo in range(0, features.shape[0], _PREDICT_ROWS):
                out = module(_as_float(features[lo : lo + _PREDICT_ROWS]))
                if self.task == "classification":
                    chunks.append(out.argmax(dim=1))
                else:
                    chunks.append(out.reshape(-1))
        return torch.cat(chunks)

    def predict(self, params: Any, X: Any, local: Any = None) -> NDArray[Any]:
        """Predict with the model ``params`` on ``X``, 4096 rows at a time.

        ``local``: a client's local layers (FedBN), None for the initial model's.

        Returns
        -------
        ndarray of shape (n,)
            Class labels (int64, the argmax of the outputs) for classification, the
            float32 outputs for regression.
        """
        out: NDArray[Any] = self._outputs(params, X, "Trainer.predict", local).numpy()
        return out

    def score_own(self, params: Any, metric: Literal["accuracy", "loss"]) -> float:
        """Score ``params`` on this trainer's own rows (checked once, at construction).

        ``"accuracy"``: the share of rows whose argmax is the label (classification);
        ``"loss"``: minus the mean loss (cross-entropy, squared error or the user's
        loss), so that higher is better either way.
        """
        owner = "Trainer.score_own"
        if metric not in ("accuracy", "loss"):
            raise invalid_parameter("metric", owner, "'accuracy' or 'loss'", describe(metric))
        if metric == "accuracy" and self.task != "classification":
            raise invalid_parameter("metric", owner, "'loss' for a regression", metric)
        w = _check_vector(params, self.n_params, "params", owner)
        total = 0.0
        with self.pool.borrow() as module, torch.no_grad():
            _load_checked(module, w)
            self._load_local(module, None)
            module.eval()
            for lo in range(0, self.n, _PREDICT_ROWS):
                xb = _as_float(self._X[lo : lo + _PREDICT_ROWS])
                yb = self._y[lo : lo + _PREDICT_ROWS]
                if metric == "accuracy":
                    total += float((module(xb).argmax(dim=1) == yb).sum().item())
                else:
                    total += float(self.loss(module, xb, yb, reduction="sum").item())
        return total / self.n if metric == "accuracy" else -total / self.n

    def evaluate(self, params: Any, X: Any, y: Any, local: Any = None) -> float:
        """Return the accuracy (classification) or the mean squared error (regression)."""
        owner = "Trainer.evaluate"
        pred = self.predict(params, X, local)
        target = _as_targets(y, pred.shape[0], self.task, self.spec.n_outputs, "y", owner)
        if self.task == "classification":
            return float(np.mean(pred == target))
        diff = pred.astype(np.float64) - target.astype(np.float64)
        return float(np.mean(diff * diff))


def train_centralised(
    spec: ModelSpec,
    X: Any,
    y: Any,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    task: Task = "classification",
    seed: int = 0,
    init_seed: int = 0,
    callback: Callable[[int, NDArray[np.float32]], None] | None = None,
    loss: UserLoss | Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> tuple[NDArray[np.float32], list[float]]:
    """Train on pooled data: the centralised-learning (CL) baseline.

    Builds the model with ``spec.build(init_seed)`` and runs ``epochs`` × ⌊n/b⌋ steps
    through :meth:`Trainer.train`, one call per epoch, the momentum buffer carried
    across. A federated run with one client holding the same rows, the same seeds and
    the same hyper-parameters goes through exactly the same steps.

    Parameters
    ----------
    spec : ModelSpec
        The model.
    X, y : array-like
        The pooled data (see :class:`Trainer`).
    epochs : int
        At least 1.
    batch_size, lr, momentum, weight_decay
        As in :meth:`Trainer.train`.
    task : {"classification", "regression"}, default="classification"
        As in :class:`Trainer`.
    seed : int, default=0
        The seed of the batch order.
    init_seed : int, default=0
        The seed of the initial model.
    callback : callable or None, default=None
        Called as ``callback(epoch, params)`` after each epoch, ``epoch`` counting from
        0 (the :attr:`Position.epoch` just completed), ``params`` a fresh flat copy.
    loss : UserLoss, callable or None, default=None
        The user's loss, as in :class:`Trainer` (None: the task's).

    Returns
    -------
    params : ndarray of shape (n_params,), float32
        The final model.
    history : list of float
        The mean training loss of each epoch.
    """
    epochs = check_int(epochs, "epochs", "train_centralised", low=1)
    trainer = Trainer(spec, X, y, task=task, seed=seed, loss=loss)
    spe = trainer.steps_per_epoch(batch_size)
    params = spec.initial_params(init_seed)
    buf: NDArray[np.float32] | None = None
    history: list[float] = []
    for epoch in range(epochs):
        outcome = trainer.train(
            params,
            start=Position(epoch, 0),
            steps=spe,
            batch_size=batch_size,
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
            momentum_buffer=buf,
        )
        params, buf = outcome.params, outcome.momentum
        history.append(outcome.loss)
        if callback is not None:
            callback(epoch, params.copy())
    return params, history

