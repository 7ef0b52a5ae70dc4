"""Server optimisers: the FedOpt family (FedAvgM, FedAdam, FedYogi, FedAdagrad).

The server treats the round's pseudo-gradient Δ_t = x̄_t − x_t (the weighted mean of the
survivors' new models minus the global model the round started from, i.e. their mean
update) as a gradient step and updates the global model with its own optimiser
(Reddi et al. [1]_, Algorithm 2; Hsu et al. [2]_ for server momentum)::

    FedAvgM     m_t = β·m_{t−1} + Δ_t                       x_{t+1} = x_t + η·m_t
    FedAdagrad  m_t = β1·m_{t−1} + (1 − β1)·Δ_t
                v_t = v_{t−1} + Δ_t²                        x_{t+1} = x_t + η·m_t/(√v_t + τ)
    FedYogi     v_t = v_{t−1} − (1 − β2)·Δ_t²·sign(v_{t−1} − Δ_t²)   (m_t, x_{t+1} as above)
    FedAdam     v_t = β2·v_{t−1} + (1 − β2)·Δ_t²                   (m_t, x_{t+1} as above)

with m_{−1} = 0 and v_{−1} = τ² (the paper asks v_{−1} ≥ τ²). As published, there is no
bias correction of m_t or v_t (unlike Adam's): the first rounds' steps are smaller than
Adam's would be, and the defaults below were tuned in the paper this way. Squares,
square roots and the division are element-wise. The moments are float64; the global
model stays float32 (the step is computed in float64 and rounded once).

An optimiser here is an immutable configuration (its parameters, checked when it is
built); the state (t, m, v) is a separate :class:`ServerOptState` that the server role
creates for each run, advances every round and writes into its checkpoint
(:meth:`ServerOptState.to_dict`), so a resumed run ends with the model of an
uninterrupted one. A strategy is given an optimiser (``FedAvg(server_optimizer=FedAdam())``),
which composes with every local strategy and with every protection under which the
server sees the aggregate (:func:`check_composes`).

References
----------
.. [1] Reddi, Charles, Zaheer, Garrett, Rush, Konečný, Kumar, McMahan. "Adaptive
   Federated Optimization". ICLR 2021, Algorithm 2 and §5.
.. [2] Hsu, Qi, Brown. "Measuring the Effects of Non-Identical Data Distribution for
   Federated Visual Classification". arXiv:1909.06335, 2019 (FedAvgM).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_float, describe

__all__ = [
    "OPTIMIZERS",
    "FedAdagrad",
    "FedAdam",
    "FedAvgM",
    "FedYogi",
    "ServerOptState",
    "ServerOptimizer",
    "adagrad_second_moment",
    "adam_second_moment",
    "adaptive_update",
    "check_composes",
    "first_moment",
    "momentum_buffer",
    "momentum_update",
    "pseudo_gradient",
    "server_optimizer",
    "yogi_second_moment",
]

F64 = NDArray[np.float64]
Vector = NDArray[np.float32]


# --------------------------------------------------------------------------- maths
def pseudo_gradient(params: Vector, aggregate: Vector) -> F64:
    """Return Δ_t = aggregate − params in float64 (the mean update of the round).

    Parameters
    ----------
    params
        x_t, the global model the round started from.
    aggregate
        The weighted mean of the survivors' new models.
    """
    return np.asarray(aggregate, dtype=np.float64) - np.asarray(params, dtype=np.float64)


def momentum_buffer(m: F64, delta: F64, *, beta: float) -> F64:
    """FedAvgM's buffer: m_t = β·m_{t−1} + Δ_t (Hsu et al. 2019, heavy ball on Δ)."""
    return beta * m + delta


def momentum_update(params: Vector, m: F64, *, lr: float) -> Vector:
    """FedAvgM's step: x_{t+1} = x_t + η·m_t, rounded once to float32 (inf beyond it)."""
    with np.errstate(over="ignore"):
        return (np.asarray(params, dtype=np.float64) + lr * m).astype(np.float32)


def first_moment(m: F64, delta: F64, *, beta1: float) -> F64:
    """m_t = β1·m_{t−1} + (1 − β1)·Δ_t (Reddi et al. 2021, Algorithm 2)."""
    return beta1 * m + (1.0 - beta1) * delta


def adagrad_second_moment(v: F64, delta: F64) -> F64:
    """FedAdagrad: v_t = v_{t−1} + Δ_t² (Algorithm 2)."""
    return v + delta * delta


def yogi_second_moment(v: F64, delta: F64, *, beta2: float) -> F64:
    """FedYogi: v_t = v_{t−1} − (1 − β2)·Δ_t²·sign(v_{t−1} − Δ_t²) (Algorithm 2)."""
    sq = delta * delta
    return v - (1.0 - beta2) * sq * np.sign(v - sq)


def adam_second_moment(v: F64, delta: F64, *, beta2: float) -> F64:
    """FedAdam: v_t = β2·v_{t−1} + (1 − β2)·Δ_t² (Algorithm 2, no bias correction)."""
    return beta2 * v + (1.0 - beta2) * (delta * delta)


def adaptive_update(params: Vector, m: F64, v: F64, *, lr: float, tau: float) -> Vector:
    """x_{t+1} = x_t + η·m_t/(√v_t + τ) (Algorithm 2), rounded once to float32 (inf beyond it)."""
    step = lr * m / (np.sqrt(v) + tau)
    with np.errstate(over="ignore"):
        return (np.asarray(params, dtype=np.float64) + step).astype(np.float32)


# --------------------------------------------------------------------------- state
@dataclass(frozen=True)
class ServerOptState:
    """A server optimiser's state after ``t`` steps: its moments m and v (float64).

    ``v`` is None for FedAvgM, which keeps one buffer.
    """

    t: int
    m: F64
    v: F64 | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the state as checkpoint values (an int and float64 arrays)."""
        out: dict[str, Any] = {"t": self.t, "m": self.m}
        if self.v is not None:
            out["v"] = self.v
        return out

    @classmethod
    def from_dict(cls, state: Mapping[str, Any], dim: int, owner: str) -> ServerOptState:
        """Rebuild :meth:`to_dict`'s output, checking each moment's length against ``dim``.

        Raises
        ------
        ValidationError
            If a moment is missing, of another length, or not finite, naming ``owner``.
        """
        def vector(key: str) -> F64:
            arr = np.asarray(state.get(key, np.zeros(0)), dtype=np.float64)
            if arr.shape != (dim,) or not np.all(np.isfinite(arr)):
                raise ValidationError(f"the checkpoint's {owner} state holds no usable {key!r} "
                                      f"({dim} finite values expected); start the run afresh")
            out: F64 = arr.copy()
            return out

        t = state.get("t")
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0:
            raise ValidationError(f"the checkpoint's {owner} state holds no step count t")
        return cls(t=int(t), m=vector("m"), v=vector("v") if "v" in state else None)


class ServerOptimizer(Protocol):
    """What the server role needs from a server optimiser (see the module docstring)."""

    name: str

    def init(self, dim: int) -> ServerOptState:
        """Return the state before the first step, for a model of ``dim`` values."""

    def step(self, params: Vector, aggregate: Vector, state: ServerOptState
             ) -> tuple[Vector, ServerOptState]:
        """Return x_{t+1} and the new state from x_t (``params``) and the round's mean."""

    def restore(self, state: Mapping[str, Any], dim: int) -> ServerOptState:
        """Rebuild a state from :meth:`ServerOptState.to_dict` (a checkpoint)."""


# --------------------------------------------------------------------------- checks
def _rate(value: Any, name: str, owner: str) -> float:
    """Return a rate (η, τ), a finite float > 0."""
    return check_float(value, name, owner, low=0.0, low_inclusive=False)


def _decay(value: Any, name: str, owner: str) -> float:
    """Return a decay β, a float in [0, 1)."""
    try:
        beta = check_float(value, name, owner, low=0.0)
    except ValidationError:
        beta = math.nan
    if not 0.0 <= beta < 1.0:
        raise invalid_parameter(name, owner, "a float in [0, 1)", describe(value))
    return beta


def _params(opt: Any) -> str:
    return ", ".join(f"{f.name}={getattr(opt, f.name)!r}" for f in fields(opt))


def _checked(new: Vector, opt: Any, t: int) -> Vector:
    if not np.all(np.isfinite(new)):
        raise ValidationError(
            f"the server optimiser {type(opt).__name__}({_params(opt)}) made a global model "
            f"with NaN or infinite values at step {t} (beyond float32's range); lower its "
            "'lr'")
    return new


# --------------------------------------------------------------------------- optimisers
@dataclass(frozen=True, kw_only=True)
class FedAvgM:
    """FedAvg with server momentum: m_t = β·m_{t−1} + Δ_t, x_{t+1} = x_t + η·m_t.

    With β = 0 and η = 1 the new model is the aggregate: plain FedAvg.

    Parameters
    ----------
    lr : float, default=1.0
        η, the server learning rate (> 0).
    momentum : float, default=0.9
        β in [0, 1), the server momentum (Reddi et al. §5 run FedAvgM with 0.9).

    References
    ----------
    .. [1] Hsu, Qi, Brown. arXiv:1909.06335, 2019.
    .. [2] Reddi et al. "Adaptive Federated Optimization". ICLR 2021, §5.
    """

    lr: float = 1.0
    momentum: float = 0.9

    name = "fedavgm"

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", _rate(self.lr, "lr", "FedAvgM"))
        object.__setattr__(self, "momentum", _decay(self.momentum, "momentum", "FedAvgM"))

    def init(self, dim: int) -> ServerOptState:
        """m_{−1} = 0."""
        return ServerOptState(t=0, m=np.zeros(dim, dtype=np.float64))

    def step(self, params: Vector, aggregate: Vector, state: ServerOptState
             ) -> tuple[Vector, ServerOptState]:
        """One round of server momentum."""
        m = momentum_buffer(state.m, pseudo_gradient(params, aggregate), beta=self.momentum)
        new = _checked(momentum_update(params, m, lr=self.lr), self, state.t + 1)
        return new, ServerOptState(t=state.t + 1, m=m)

    def restore(self, state: Mapping[str, Any], dim: int) -> ServerOptState:
        """Rebuild the state from a checkpoint."""
        return ServerOptState.from_dict(state, dim, "FedAvgM")


class _Adaptive:
    """The steps of Algorithm 2 shared by the three adaptive rules (fields: each class's)."""

    lr: float
    beta1: float
    tau: float
    name = ""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        object.__setattr__(self, "lr", _rate(self.lr, "lr", owner))
        object.__setattr__(self, "beta1", _decay(self.beta1, "beta1", owner))
        if hasattr(self, "beta2"):
            object.__setattr__(self, "beta2", _decay(self.beta2, "beta2", owner))
        object.__setattr__(self, "tau", _rate(self.tau, "tau", owner))

    def init(self, dim: int) -> ServerOptState:
        """m_{−1} = 0 and v_{−1} = τ² (Algorithm 2 asks v_{−1} ≥ τ²)."""
        return ServerOptState(t=0, m=np.zeros(dim, dtype=np.float64),
                              v=np.full(dim, self.tau * self.tau, dtype=np.float64))

    def _second(self, v: F64, delta: F64) -> F64:
        raise NotImplementedError

    def step(self, params: Vector, aggregate: Vector, state: ServerOptState
             ) -> tuple[Vector, ServerOptState]:
        """One round of Algorithm 2."""
        if state.v is None:
            raise ValidationError(f"{type(self).__name__} needs a second moment v in its state")
        delta = pseudo_gradient(params, aggregate)
        m = first_moment(state.m, delta, beta1=self.beta1)
        v = self._second(state.v, delta)
        new = adaptive_update(params, m, v, lr=self.lr, tau=self.tau)
        return _checked(new, self, state.t + 1), ServerOptState(t=state.t + 1, m=m, v=v)

    def restore(self, state: Mapping[str, Any], dim: int) -> ServerOptState:
        """Rebuild the state from a checkpoint."""
        restored = ServerOptState.from_dict(state, dim, type(self).__name__)
        if restored.v is None:
            raise ValidationError(f"the checkpoint's {type(self).__name__} state holds no "
                                  "second moment 'v'; start the run afresh")
        return restored


@dataclass(frozen=True, kw_only=True)
class FedAdagrad(_Adaptive):
    """FedAdagrad (Reddi et al. 2021, Algorithm 2): v_t = v_{t−1} + Δ_t².

    Parameters
    ----------
    lr : float, default=0.1
        η, the server learning rate (> 0).
    beta1 : float, default=0.0
        β1 in [0, 1), the first moment's decay; the paper's experiments ran FedAdagrad
        without momentum (Algorithm 2 allows any β1).
    tau : float, default=1e-3
        τ > 0, the adaptivity (ε in Adam's notation); v_{−1} = τ².

    References
    ----------
    .. [1] Reddi et al. "Adaptive Federated Optimization". ICLR 2021.
    """

    lr: float = 0.1
    beta1: float = 0.0
    tau: float = 1e-3

    name = "fedadagrad"

    def _second(self, v: F64, delta: F64) -> F64:
        return adagrad_second_moment(v, delta)


@dataclass(frozen=True, kw_only=True)
class _SecondMomentDecay(_Adaptive):
    """FedYogi's and FedAdam's settings: the paper's β1, β2, τ and a server lr."""

    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3


@dataclass(frozen=True, kw_only=True)
class FedYogi(_SecondMomentDecay):
    """FedYogi (Reddi et al. 2021, Algorithm 2): v_t = v_{t−1} − (1 − β2)Δ_t² sign(v_{t−1} − Δ_t²).

    Parameters
    ----------
    lr : float, default=0.01
        η, the server learning rate (> 0).
    beta1, beta2 : float, default=0.9, 0.99
        The moments' decays, each in [0, 1) (the paper's values throughout §5).
    tau : float, default=1e-3
        τ > 0, the adaptivity; v_{−1} = τ².

    References
    ----------
    .. [1] Reddi et al. "Adaptive Federated Optimization". ICLR 2021.
    """

    name = "fedyogi"

    def _second(self, v: F64, delta: F64) -> F64:
        return yogi_second_moment(v, delta, beta2=self.beta2)


@dataclass(frozen=True, kw_only=True)
class FedAdam(_SecondMomentDecay):
    """FedAdam (Reddi et al. 2021, Algorithm 2): v_t = β2·v_{t−1} + (1 − β2)·Δ_t².

    Parameters
    ----------
    lr : float, default=0.01
        η, the server learning rate (> 0).
    beta1, beta2 : float, default=0.9, 0.99
        The moments' decays, each in [0, 1) (the paper's values throughout §5).
    tau : float, default=1e-3
        τ > 0, the adaptivity; v_{−1} = τ². No bias correction, as published.

    References
    ----------
    .. [1] Reddi et al. "Adaptive Federated Optimization". ICLR 2021.
    """

    name = "fedadam"

    def _second(self, v: F64, delta: F64) -> F64:
        return adam_second_moment(v, delta, beta2=self.beta2)


OPTIMIZERS: dict[str, type[FedAvgM | FedAdagrad | FedYogi | FedAdam]] = {
    "fedavgm": FedAvgM, "fedadagrad": FedAdagrad, "fedyogi": FedYogi, "fedadam": FedAdam}
"""The server optimisers by name, as files name them."""


def server_optimizer(name: str, **params: Any) -> ServerOptimizer:
    """Build the server optimiser ``name`` (a key of :data:`OPTIMIZERS`) with ``params``.

    Raises
    ------
    ValidationError
        For an unknown name, a parameter the optimiser does not take, or a value out of
        its range.
    """
    cls = OPTIMIZERS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise invalid_parameter("name", "server_optimizer", f"one of {sorted(OPTIMIZERS)}",
                                describe(name))
    allowed = sorted(f.name for f in fields(cls))
    stray = sorted(set(params) - set(allowed))
    if stray:
        raise ValidationError(f"the server optimiser {name!r} does not take {stray}; it "
                              f"takes {allowed}")
    opt: ServerOptimizer = cls(**params)
    return opt


_PROBE = np.zeros(1, dtype=np.float32)


def check_composes(aggregator: Any, optimizer: ServerOptimizer | None, owner: str) -> None:
    """Refuse a server optimiser over an aggregator that hides the aggregate from the server.

    The rule needs the plain mean x̄_t at the server. The plain mean, secure aggregation,
    additive sharing, client-level DP over any of them and any aggregator whose server
    half reveals the model give it; CKKS, Paillier and the chaos permutation do not
    (:meth:`~islands.aggregation.base.ServerHalf.reveal` is None).

    Raises
    ------
    ValidationError
        Naming the optimiser and the aggregator, and why.
    """
    if optimizer is None or aggregator is None:
        return
    if aggregator.server_half().reveal(_PROBE) is None:
        name = getattr(aggregator, "name", type(aggregator).__name__)
        raise ValidationError(
            f"{owner}: the server optimiser {optimizer.name!r} cannot run over the {name!r} "
            "aggregator: the server never holds the plain aggregate there (it combines "
            "ciphertexts or permuted vectors that only the clients open), so it cannot "
            "square it or divide by √v; and the clients accept only an aggregate that is "
            "exactly the weighted sum of the round's uploads (its MAC), so not even "
            "FedAvgM's linear step can be applied to the ciphertexts. Use it with the plain "
            "mean, 'secagg' or 'additive' (with or without 'dp'), or drop the server "
            "optimiser")
