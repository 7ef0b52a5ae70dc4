"""DP-SGD on one client's rows: per-sample gradients from Opacus, noise from a CSPRNG.

Sample-level differential privacy (Abadi et al. [1]_; the FL tutorial §3.3): every
local step

1. draws a **Poisson sample** of the client's n rows, each row independently with
   probability q = b/n (b the client's batch size, so b rows are expected; a step may
   see more, fewer or none);
2. considers the **per-sample gradient** gᵢ of the loss of each sampled row (a user's
   loss, :mod:`islands.hfl.torch.loss`, is called on each row alone) and
3. clips each to L2 ≤ C: ḡᵢ = gᵢ · min(1, C/‖gᵢ‖). Opacus [2]_ does both without
   forming one gradient per row (:class:`GradSampleModuleFastGradientClipping`, Li et
   al.'s ghost clipping [3]_): hooks on ``Linear`` and ``Conv2d`` turn the first
   backward pass into every row's gradient *norm*, and a second backward pass of
   Σᵢ min(1, C/‖gᵢ‖)·ℓᵢ yields Σᵢ ḡᵢ directly. For the 159k-parameter MLP of the APFL
   runs this took 2.4 ms per batch of 64 against 50 ms with per-sample gradients
   materialised (Opacus's ``GradSampleModule``), 53 against 99 ms for the CNN
   (``benchmarks/bench_protect.py``, section 3, has the step against a plain one);
4. adds Gaussian noise and averages over the *expected* batch size:
   g = (Σᵢ ḡᵢ + N(0, σ²C²·I)) / b — Opacus's convention under Poisson sampling, which
   keeps the released quantity's sensitivity at C whatever the sample's size;
5. takes the same SGD step as the non-private :class:`~islands.hfl.torch.training.Trainer`
   (weight decay, FedProx term, momentum), which is post-processing.

Adding or removing one row changes Σᵢ ḡᵢ by at most C, so each step is the
Poisson-subsampled Gaussian mechanism with noise multiplier σ and rate q, and T steps
are accounted by :class:`islands.privacy.PrivacyAccountant` (dp-accounting's RDP or
PLD). The guarantee covers the rows this client trains on; it holds against anyone who
sees the client's models (the server, other clients, the released model), and composes
with every aggregator.

What is Opacus's and what is not. Opacus supplies the per-sample gradient norms and the
clipped sum, the part no other well-kept library does for arbitrary ``nn.Module``
stacks; it adds 1e-6 to each norm, so a row is clipped to slightly less than C. The
noise does not come from :class:`opacus.optimizers.DPOptimizer`: its ``secure_mode``
draws from a ``torch.Generator`` (Mersenne Twister or Philox, not cryptographic) unless
the unmaintained torchcsprng is installed; here it is
:func:`islands.crypto.prg.csprng_normal` (ChaCha20 keyed from the operating system), and
the Poisson sample comes from the same kind of generator, so neither can be predicted
from a seed. Runs with DP-SGD are therefore not reproducible bit for bit, by design. The
noise, the division by b and the step are a few tensor operations written here, so that
DP-SGD shares the update rule of the non-private trainer exactly.

Caveats, stated plainly: the training loss is not covered by the guarantee, so it is not
reported (NaN); a client's accuracy on its *local evaluation* rows is reported to APFL's
server and is not protected either (those rows are not trained on, but they are the
client's data); floating-point noise has the caveats of Mironov (2012). A user's model
(:class:`~islands.hfl.torch.user.TorchModel`) is checked up front (:func:`check_private`):
a layer Opacus refuses (batch norm, which makes each row's output depend on its batch)
or cannot clip per sample is named, and so is any buffer that would travel (it would
leave the client without noise).

References
----------
.. [1] M. Abadi, A. Chu, I. Goodfellow, H. B. McMahan, I. Mironov, K. Talwar, L. Zhang.
   "Deep Learning with Differential Privacy." ACM CCS 2016.
.. [2] A. Yousefpour et al. "Opacus: User-Friendly Differential Privacy Library in
   PyTorch." arXiv:2109.12298, 2021.
.. [3] X. Li, F. Tramèr, P. Liang, T. Hashimoto. "Large Language Models Can Be Strong
   Differentially Private Learners." ICLR 2022 (ghost clipping).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from islands.aggregation.protect import SampleDP
from islands.crypto.prg import csprng_normal, csprng_uniform
from islands.errors import ValidationError, invalid_parameter
from islands.hfl.torch.models import (
    _buffers_of,
    _flat_tensor,
    _load_checked,
    _params_of,
    flat_parameters,
)
from islands.hfl.torch.training import Position, Trainer, TrainOutcome, _as_float
from islands.validation import describe

__all__ = ["PrivateTrainer", "check_private", "poisson_sample"]

# GradSampleModule's full backward hooks warn when the input needs no gradient (ours
# never does); the per-sample gradients are right all the same
warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)


def poisson_sample(n: int, rate: float) -> NDArray[np.int64]:
    """Return the rows of a Poisson sample: each of ``n`` rows kept with probability ``rate``.

    The coin flips come from :func:`islands.crypto.prg.csprng_uniform` (not seedable).
    """
    if not 0.0 < rate <= 1.0:
        raise invalid_parameter("rate", "poisson_sample", "a float in (0, 1]", rate)
    out: NDArray[np.int64] = np.flatnonzero(csprng_uniform(int(n)) < rate).astype(np.int64)
    return out


def check_private(module: torch.nn.Module, owner: str = "sample_dp") -> None:
    """Refuse a model DP-SGD cannot train privately, naming the layer or buffer.

    Opacus's :class:`~opacus.validators.ModuleValidator` judges each layer (batch norm is
    refused: a row's output depends on the other rows of its batch; any other layer gets
    its per-sample gradients from Opacus's rules or functorch); and no buffer may
    travel, since a buffer written by the forward pass would carry the rows unnoised.

    Raises
    ------
    ValidationError
        Naming the first layer or buffer that fails, and why.
    """
    from opacus.validators import ModuleValidator  # type: ignore[import-untyped]

    for name, layer in module.named_modules():
        if next(layer.children(), None) is not None:
            continue
        errors = ModuleValidator.validate(layer, strict=False)
        if errors:
            reason = str(errors[0]).split(". ")[0]
            raise ValidationError(
                f"DP-SGD ({owner}) cannot train layer {name or '(root)'!r} "
                f"({type(layer).__name__}): {reason}. Replace it (GroupNorm or LayerNorm "
                "for a batch norm) or train without sample-level DP")
    prefixes = {id(sub): prefix for prefix, sub in module.named_modules()}
    buffers = [f"{prefixes[id(owner_)]}.{name}".lstrip(".")
               for owner_, name in _buffers_of(module)]
    if buffers:
        raise ValidationError(
            f"DP-SGD ({owner}) cannot train a model whose buffers travel ({', '.join(buffers)}): "
            "a buffer the forward pass writes would leave the client without noise; "
            "register it with persistent=False or train without sample-level DP")


class PrivateTrainer:
    """DP-SGD over a :class:`~islands.hfl.torch.training.Trainer`'s rows (module docstring).

    Parameters
    ----------
    trainer
        The client's trainer: its rows, model and task.
    dp
        Clip C and noise multiplier σ (the budget itself is the caller's to account:
        :meth:`SampleDP.new_accountant`).

    Notes
    -----
    The trainer owns one module wrapped in Opacus's hooks (not one from
    the trainer's pool, which other clients share); calls are serialised on it.
    """

    def __init__(self, trainer: Trainer, dp: SampleDP) -> None:
        from opacus.grad_sample import (  # type: ignore[import-untyped]
            GradSampleModuleFastGradientClipping,
        )

        if not isinstance(trainer, Trainer):
            raise invalid_parameter("trainer", "PrivateTrainer", "a Trainer", describe(trainer))
        if not isinstance(dp, SampleDP):
            raise invalid_parameter("dp", "PrivateTrainer", "a SampleDP", describe(dp))
        self.trainer, self.dp = trainer, dp
        self._module = trainer.spec.build(0)
        check_private(self._module)
        self._wrapped = GradSampleModuleFastGradientClipping(
            self._module, batch_first=True, loss_reduction="sum", max_grad_norm=dp.clip,
            use_ghost_clipping=True)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PrivateTrainer({self.trainer!r}, {self.dp!r})"

    def clipped_sum(self, rows: NDArray[np.int64]) -> tuple[torch.Tensor, float]:
        """Return Σᵢ ḡᵢ over ``rows`` at the module's current parameters, and their mean loss.

        Two backward passes (Opacus's fast gradient clipping): the first gives every
        row's gradient norm without forming the gradients (for a dense layer
        ‖gᵢ‖² = ‖aᵢ‖²·‖δᵢ‖², activations times back-propagated errors, "ghost
        clipping"), the second back-propagates Σᵢ cᵢ·ℓᵢ with cᵢ = min(1, C/‖gᵢ‖), whose
        gradient is exactly the clipped sum. For no rows the sum is zero and the loss NaN.
        """
        tensors = _params_of(self._module)
        if rows.size == 0:
            return torch.zeros(sum(t.numel() for t in tensors)), float("nan")
        idx = torch.from_numpy(rows)
        xb = _as_float(self.trainer.features.index_select(0, idx))
        yb = self.trainer.targets.index_select(0, idx)
        with torch.enable_grad():
            losses = self.trainer.loss(self._wrapped, xb, yb, reduction="none")
            torch.autograd.grad(losses.sum(), tensors, retain_graph=True)
            coef = self._wrapped.get_clipping_coef().detach()
            self._wrapped.disable_hooks()
            try:
                grads = torch.autograd.grad((coef * losses).sum(), tensors)
            finally:
                self._wrapped.enable_hooks()
        summed = torch.cat([g.reshape(-1) for g in grads])
        return summed, float(losses.detach().mean())

    def train(self, params: Any, *, start: Position, steps: int, batch_size: int, lr: float,
              momentum: float = 0.0, weight_decay: float = 0.0, prox_mu: float = 0.0,
              momentum_buffer: Any = None, correction: Any = None) -> TrainOutcome:
        """Run ``steps`` DP-SGD steps from ``params``.

        Same arguments as :meth:`Trainer.train`; ``start`` only advances (the Poisson
        samples do not follow the trainer's batch order). The returned ``loss`` is NaN:
        it is not covered by the guarantee.

        Raises
        ------
        ValidationError
            For an argument out of range (named), before any step.
        """
        st = self.trainer.settings(params, start=start, steps=steps, batch_size=batch_size,
                                   lr=lr, momentum=momentum, weight_decay=weight_decay,
                                   prox_mu=prox_mu, momentum_buffer=momentum_buffer,
                                   correction=correction, owner="PrivateTrainer.train")
        rate = self.dp.sampling_rate(st.batch_size, self.trainer.n)
        std = self.dp.noise_multiplier * self.dp.clip
        buf = st.momentum_buffer
        with self._lock:
            _load_checked(self._module, st.params)
            flat = _flat_tensor(self._module)
            anchor = flat.clone() if st.prox_mu > 0.0 else None
            for _ in range(st.steps):
                summed, _ = self.clipped_sum(poisson_sample(self.trainer.n, rate))
                with torch.no_grad():
                    noise = torch.from_numpy(csprng_normal(summed.numel(), std)).to(summed.dtype)
                    g = (summed + noise) / st.batch_size
                    buf = st.apply(flat, g, buf, anchor)
            out = flat_parameters(self._module)
        if not np.isfinite(out).all():
            raise ValidationError("DP-SGD diverged (non-finite parameters); lower lr or clip")
        end = start.advance(st.steps, st.steps_per_epoch)
        out_buf = None if buf is None else buf.numpy()
        return TrainOutcome(out, out_buf, float("nan"), st.steps, end)
