"""Per-example losses and clipped gradients of a few rows at given parameters (audits).

What a white-box auditor of DP-SGD computes for its canary rows (Steinke, Nasr and
Jagielski [1]_): each row's loss ℓᵢ(θ) and its gradient gᵢ(θ) clipped as DP-SGD clips
it, gᵢ·min(1, C/(‖gᵢ‖ + 10⁻⁶)) (Opacus's 10⁻⁶), at any parameter vector θ, e.g. each
round's released model. The gradients are vectorised over the rows with ``torch.func``
(``functional_call`` inside ``vmap(grad(...))``), a chunk of rows at a time; a user's loss
(:mod:`islands.hfl.torch.loss`) is called on one row at a time instead, since it need not
be ``vmap``-able. Nothing here trains or touches a client's data.

References
----------
.. [1] T. Steinke, M. Nasr, M. Jagielski. "Privacy Auditing with One (1) Training Run."
   NeurIPS 2023, arXiv:2305.08846.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch.func import functional_call, grad, vmap

from islands.errors import invalid_parameter
from islands.hfl.torch.models import _params_of
from islands.hfl.torch.training import Trainer, _as_float
from islands.validation import check_float, check_int

__all__ = ["PerExample"]

_NORM_EPS = 1e-6  # Opacus adds it to each per-sample norm before the clip


class PerExample:
    """The per-example losses and clipped gradients of ``X, y`` under a model spec.

    Parameters
    ----------
    spec
        The model (:class:`~islands.hfl.torch.models.ModelSpec` or a user's
        :class:`~islands.hfl.torch.user.TorchModel`), as the federation trains it.
    X, y
        The rows (features as the model takes them, e.g. ``uint8`` pixels) and targets.
    task
        ``"classification"`` or ``"regression"``.
    loss
        The user's loss (a :class:`~islands.hfl.torch.loss.UserLoss`), or None for the task's.
    clip
        C, the clipping norm, a float > 0.
    chunk
        Rows per vectorised call, an int >= 1 (memory: chunk × parameters floats).
    """

    def __init__(self, spec: Any, X: NDArray[Any], y: NDArray[Any], *, task: str,
                 loss: Any = None, clip: float, chunk: int = 64) -> None:
        owner = "PerExample"
        self.clip = check_float(clip, "clip", owner, low=0.0, low_inclusive=False)
        self.chunk = check_int(chunk, "chunk", owner, low=1)
        self.trainer = Trainer(spec, X, y, task=task, loss=loss)  # type: ignore[arg-type]
        self.module = spec.build(0).eval()
        tensors = _params_of(self.module)
        names = {id(p): name for name, p in self.module.named_parameters()}
        if not all(id(t) in names for t in tensors):
            raise invalid_parameter("spec", owner, "a model whose travelling values are "
                                    "its parameters", type(spec).__name__)
        self.names = [names[id(t)] for t in tensors]
        self.shapes = [tuple(t.shape) for t in tensors]
        self.sizes = [int(t.numel()) for t in tensors]
        self.dim = int(sum(self.sizes))
        self.n = int(self.trainer.n)

    def _params(self, theta: NDArray[Any]) -> dict[str, torch.Tensor]:
        vec = np.asarray(theta, np.float32)
        if vec.ndim != 1 or vec.size < self.dim:
            raise invalid_parameter("theta", "PerExample", f"a vector of at least {self.dim} "
                                    "values", vec.shape)
        flat = torch.from_numpy(vec[: self.dim].copy())
        out, at = {}, 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            out[name] = flat[at: at + size].reshape(shape)
            at += size
        return out

    def _rows(self, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.arange(lo, hi)
        return (_as_float(self.trainer.features.index_select(0, idx)),
                self.trainer.targets.index_select(0, idx))

    def losses(self, theta: NDArray[Any]) -> NDArray[np.float64]:
        """Return each row's loss at ``theta``, shape (n,)."""
        params = self._params(theta)
        out = []
        with torch.no_grad():
            for lo in range(0, self.n, 4 * self.chunk):
                xb, yb = self._rows(lo, min(self.n, lo + 4 * self.chunk))
                outputs = functional_call(self.module, params, (xb,))
                out.append(self.trainer.output_loss(outputs, yb, "none").double())
        return torch.cat(out).numpy()

    def _one_loss(self, params: dict[str, torch.Tensor], x: torch.Tensor,
                  t: torch.Tensor) -> torch.Tensor:
        outputs = functional_call(self.module, params, (x.unsqueeze(0),))
        return self.trainer.output_loss(outputs, t.unsqueeze(0), "sum")

    def clipped_gradients(self, theta: NDArray[Any], lo: int = 0,
                          hi: int | None = None) -> torch.Tensor:
        """Return rows ``lo:hi``'s gradients at ``theta``, each clipped to C, shape (rows, d).

        Flattened in the model vector's order (float32), as DP-SGD clips them.
        """
        hi = self.n if hi is None else hi
        params = self._params(theta)
        xb, yb = self._rows(lo, hi)
        if self.trainer.user_loss is None:
            grads = vmap(grad(self._one_loss), in_dims=(None, 0, 0))(params, xb, yb)
            flat = torch.cat([grads[name].reshape(hi - lo, -1) for name in self.names], dim=1)
        else:  # a user's loss need not be vmap-able: one row at a time
            rows = []
            for i in range(hi - lo):
                g = grad(self._one_loss)(params, xb[i], yb[i])
                rows.append(torch.cat([g[name].reshape(-1) for name in self.names]))
            flat = torch.stack(rows)
        norms = flat.norm(dim=1, keepdim=True)
        return flat * torch.clamp(self.clip / (norms + _NORM_EPS), max=1.0)

    def alignment(self, theta: NDArray[Any], direction: NDArray[Any]) -> NDArray[np.float64]:
        """Return ⟨ḡᵢ(θ), v⟩/‖v‖ for every row i: each clipped gradient along ``direction`` v.

        0 for every row when v = 0.
        """
        v = torch.from_numpy(np.asarray(direction, np.float32)[: self.dim].copy())
        norm = float(v.norm())
        if norm == 0.0:
            return np.zeros(self.n)
        v = v / norm
        out = np.empty(self.n)
        with torch.no_grad():
            for lo in range(0, self.n, self.chunk):
                hi = min(self.n, lo + self.chunk)
                out[lo:hi] = (self.clipped_gradients(theta, lo, hi) @ v).double().numpy()
        return out
