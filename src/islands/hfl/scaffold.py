"""SCAFFOLD: control variates that correct client drift (Karimireddy et al. [1]_).

Every client i keeps a control variate c_i, the server a global one c, all zero at the
start. A round of Algorithm 1 (control-variate option II, global step η_g = 1)::

    client i:  y ← x;  K steps of  y ← y − η·(g_i(y) + c − c_i)
               c_i⁺ = c_i − c + (x − y)/(K·η)
    server:    x ← Σ_S p_i·y_i;   c ← c + (|S|/N)·Σ_S p_i·(c_i⁺ − c_i)

with p_i the aggregation's weights (n_i/n, or equal: the paper's 1/|S|) and |S|/N the
round's share of the available clients (``Task.share``).

**How the control variates travel.** The global vector is [x, c] and client i uploads
[y_i, c + (|S|/N)·(c_i⁺ − c_i)], whose weighted mean over the survivors is exactly the
next [x, c]. Nothing in the server or the aggregators changes, and every protection
treats c as it treats the model:

* secure aggregation and additive sharing mask c with the model; the server learns the
  aggregate [x, c] only;
* CKKS and Paillier encrypt it; the server sees neither x nor c, which only the clients
  open (and the MAC binds c as it binds x);
* the chaos permutation permutes it with the model;
* client-level DP clips the whole update, [y_i − x, (|S|/N)·(c_i⁺ − c_i)], to the one
  norm bound and noises both halves: c_i⁺ is a function of the client's rows (its model
  movement), so it is released under the same guarantee as the model;
* DP-SGD: c_i⁺ is computed from the model DP-SGD released, so it is post-processing and
  costs no budget; the correction c − c_i enters each noised step as a fixed vector;
* the robust rules see [y_i, c-part] as one update (coordinate-wise median, trimmed
  mean and Krum per coordinate or per vector; norm bounding clips the whole update).

The upload is twice the trainable part of the model, as the paper's algorithm sends.
c_i stays with the client: in the client role's per-client state (checkpointed with
it), never sent. With dropouts, c moves by the survivors' mean scaled with the share of
the clients asked, and a client that trained but was left out keeps its own c_i⁺: the
identity c = Σ p_i·c_i that the paper keeps then drifts by the dropped clients' part.

References
----------
.. [1] S. P. Karimireddy, S. Kale, M. Mohri, S. J. Reddi, S. U. Stich, A. T. Suresh.
   "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning". ICML 2020,
   Algorithm 1 and eq. (4) option II.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from islands.aggregation.base import Aggregator
from islands.arrays import Vector
from islands.errors import ValidationError, invalid_parameter
from islands.hfl.protocol import Learner, LocalOutcome, WrappedLearner
from islands.hfl.server_opt import ServerOptimizer
from islands.hfl.strategy import FedAvg, LocalConfig
from islands.validation import check_int, describe

__all__ = ["Scaffold", "ScaffoldLearner", "client_learner", "global_vector", "model_part"]


class Scaffold(FedAvg):
    """FedAvg with SCAFFOLD's control variates (Karimireddy et al. [1]_).

    Each local step is corrected by c − c_i, the server's control variate minus the
    client's own, which removes the drift of clients whose data differ (non-IID). The
    control variates travel inside the model vector, under the aggregator's protection
    (see the module docstring for how each protection treats them), so each upload is
    twice the model's trainable part.

    Parameters
    ----------
    **FedAvg parameters
        As :class:`~islands.hfl.strategy.FedAvg`, but ``momentum`` 0 (the paper's local
        steps are plain SGD: under heavy-ball momentum option II's (x − y)/(K·η) is about
        the gradient over 1 − m, and the control variates' recursion diverges) and no
        ``server_optimizer`` (SCAFFOLD's global step is 1 here; a server optimiser would
        move the control variate with the model).
    """

    strategy_name = "scaffold"
    control_variates = True
    """The global vector is [model, c]; each client keeps its c_i (:class:`ScaffoldLearner`)."""

    def __init__(self, local_steps: int = 1, batch_size: int | None = 64, lr: float = 0.1,
                 momentum: float = 0.0, weight_decay: float = 0.0, fraction: float = 1.0,
                 min_clients: int = 1, evaluate: bool = False,
                 aggregator: Aggregator | None = None, seed: int = 0,
                 sampling: str = "fixed",
                 server_optimizer: ServerOptimizer | None = None) -> None:
        if server_optimizer is not None:
            raise invalid_parameter(
                "server_optimizer", "Scaffold", "None (SCAFFOLD's global step is 1: a "
                "server optimiser would move the control variate with the model)",
                describe(server_optimizer))
        if momentum != 0:
            raise invalid_parameter(
                "momentum", "Scaffold", "0 (SCAFFOLD's local steps are plain SGD: with "
                "momentum (x - y)/(K·lr) is not the clients' gradient and the control "
                "variates diverge)", describe(momentum))
        super().__init__(local_steps=local_steps, batch_size=batch_size, lr=lr,
                         momentum=momentum, weight_decay=weight_decay, fraction=fraction,
                         min_clients=min_clients, evaluate=evaluate, aggregator=aggregator,
                         seed=seed, sampling=sampling)

    def __repr__(self) -> str:
        return "Scaffold(" + super().__repr__().split("(", 1)[1]


def _controls(strategy: Any) -> bool:
    return bool(getattr(strategy, "control_variates", False))


def global_vector(strategy: Any, initial: Vector, n_trainable: int) -> Vector:
    """Return the first global vector: the model, then c = 0 under SCAFFOLD."""
    if not _controls(strategy):
        return initial
    return np.concatenate([initial, np.zeros(n_trainable, np.float32)])


def model_part(strategy: Any, vector: Vector, n_params: int) -> Vector:
    """Return the model of a global vector (without SCAFFOLD's control variate)."""
    return vector[:n_params] if _controls(strategy) else vector


def client_learner(strategy: Any, learner: Learner, n_params: int,
                   n_trainable: int) -> Learner:
    """Return the learner a client of ``strategy`` runs (a :class:`ScaffoldLearner` or as is)."""
    if not _controls(strategy):
        return learner
    return ScaffoldLearner(learner, n_params, n_trainable)


class ScaffoldLearner(WrappedLearner):
    """A client's SCAFFOLD step around another learner (composition).

    Takes the global [x, c], trains ``inner`` from x with the correction c − c_i, and
    returns [y, c + share·(c_i⁺ − c_i)] with c_i⁺ = c_i − c + (x − y)/(K·η) over the
    trainable part (option II of [1]_). c_i rides first in the state the client role
    carries between rounds (then ``inner``'s own, e.g. a momentum buffer).

    Parameters
    ----------
    inner
        The learner that runs the steps (it applies ``config.correction``).
    n_params
        The model's travelling length (trainable parameters, then travelling buffers).
    n_trainable
        The trainable parameters: the length of c and c_i.
    """

    def __init__(self, inner: Any, n_params: int, n_trainable: int) -> None:
        self.inner = inner
        self.n_params = check_int(n_params, "n_params", "ScaffoldLearner", low=1)
        self.n_trainable = check_int(n_trainable, "n_trainable", "ScaffoldLearner", low=1)
        if self.n_trainable > self.n_params:
            raise invalid_parameter("n_trainable", "ScaffoldLearner",
                                    f"an int <= n_params ({self.n_params})", n_trainable)

    def _split(self, params: Vector) -> tuple[Vector, Vector]:
        if params.shape != (self.n_params + self.n_trainable,):
            raise ValidationError(
                f"SCAFFOLD's global vector must hold the model and its control variate "
                f"({self.n_params} + {self.n_trainable} values); got {params.shape}")
        return params[: self.n_params], params[self.n_params:]

    def train(self, params: Vector, *, epoch: int, step: int, steps: int, batch_size: int,
              config: LocalConfig, state: Vector | None) -> LocalOutcome:
        """Run ``inner``'s steps with the correction; return [y, c-part] and [c_i⁺, state]."""
        x, c = self._split(params)
        k = self.n_trainable
        if state is None:
            c_i, rest = np.zeros(k, np.float32), None
        else:
            c_i, rest = state[:k], (state[k:] if state.size > k else None)
        out = self.inner.train(x, epoch=epoch, step=step, steps=steps, batch_size=batch_size,
                               config=replace(config, correction=c - c_i), state=rest)
        y = out.params
        c_new = c_i - c + (x[:k] - y[:k]) / np.float32(steps * config.lr)
        upload = np.concatenate([y, c + np.float32(config.share) * (c_new - c_i)])
        carried = c_new if out.state is None else np.concatenate([c_new, out.state])
        return LocalOutcome(params=upload.astype(np.float32, copy=False),
                            state=carried.astype(np.float32, copy=False), loss=out.loss)

    def evaluate(self, params: Vector) -> float:
        """Score the model part with ``inner``."""
        return float(self.inner.evaluate(self._split(params)[0]))

    def spent(self) -> tuple[float, float] | None:
        """Return the inner learner's sample-level (ε, δ), or None."""
        spent = getattr(self.inner, "spent", None)
        return None if spent is None else spent()
