"""Strategies: the server's decisions each round (who trains, how long, how to combine).

A strategy is a small object with round hooks that the server role calls:

=========================  ==============================================================
hook                       decides
=========================  ==============================================================
``setup(counts)``          each client's mini-batch size, from the clients' sample counts
``min_rows(clients)``      the fewest training rows a client needs (optional: a client
                           checks its own rows against it before it joins)
``select(round, clients)`` which of the available clients train this round
``local_steps()``          τ, the local mini-batch steps before the next aggregation
``local_config(round)``    the local optimiser: lr, momentum, weight decay, prox term μ
``observe(round, acc)``    what the strategy learns from the round (APFL adapts τ)
``get_state/set_state``    what a checkpoint must hold to resume exactly
=========================  ==============================================================

and an :class:`~islands.aggregation.base.Aggregator` it is given, which the server uses to
combine the updates, and optionally a server optimiser (``server_optimizer``,
:mod:`islands.hfl.server_opt`: FedAvgM, FedAdam, FedYogi, FedAdagrad) that turns the
aggregate into the next global model. :class:`FedAvg`, :class:`APFL` and
:class:`FedProx` are built from the same parts: a batch rule (fixed, or APFL's eq. 26),
an interval rule (fixed τ, or APFL's adaptive eq. 31) and a local optimiser
configuration.

References
----------
.. [1] McMahan et al. "Communication-Efficient Learning of Deep Networks from
   Decentralized Data". AISTATS 2017.
.. [2] Zhang Ze-Hui et al. "Adaptive privacy-preserving federated learning" (APFL),
   Acta Automatica Sinica 2023, §3.3 and §5.
.. [3] Li et al. "Federated Optimization in Heterogeneous Networks" (FedProx). MLSys 2020.
.. [4] X. Li, M. Jiang, X. Zhang, M. Kamp, Q. Dou. "FedBN: Federated Learning on Non-IID
   Features via Local Batch Normalization". ICLR 2021.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from islands.aggregation.base import Aggregator, MeanAggregator
from islands.errors import ValidationError, invalid_parameter
from islands.hfl.maths import TauState, apfl_batch_sizes, update_tau
from islands.hfl.server_opt import ServerOptimizer, check_composes
from islands.validation import check_float, check_int, describe

__all__ = ["APFL", "FedAvg", "FedBN", "FedProx", "LocalConfig", "Strategy", "check_client_rows"]


@dataclass(frozen=True)
class LocalConfig:
    """The local optimiser every selected client runs this round.

    Heavy-ball SGD, as ``torch.optim.SGD`` (dampening 0): g = ∇loss + λ·w + μ·(w − w_g)
    + δ, v ← m·v + g, w ← w − lr·v, where w_g is the global model the round started from
    and δ a fixed drift correction (SCAFFOLD's c − c_i, set by the client's own
    :class:`~islands.hfl.scaffold.ScaffoldLearner`, never sent).

    ``share`` is the server's word on the round: the clients taking part over the clients
    available, |S|/N (SCAFFOLD scales its control-variate step by it).
    """

    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0
    share: float = 1.0
    correction: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_rate(self.lr, "lr", "LocalConfig", low_inclusive=False)
        check_float(self.momentum, "momentum", "LocalConfig", low=0.0)
        if self.momentum >= 1:
            raise invalid_parameter("momentum", "LocalConfig", "a float in [0, 1)",
                                    self.momentum)
        check_rate(self.weight_decay, "weight_decay", "LocalConfig")
        check_rate(self.prox_mu, "prox_mu", "LocalConfig")
        share = check_float(self.share, "share", "LocalConfig", low=0.0, low_inclusive=False)
        if share > 1:
            raise invalid_parameter("share", "LocalConfig", "a float in (0, 1]", self.share)


FLOAT32_MAX = float(np.finfo(np.float32).max)
"""The largest step size or penalty the clients' float32 training can take."""


def check_rate(value: Any, name: str, owner: str, *, low_inclusive: bool = True) -> float:
    """Return ``value`` as a float in [0, :data:`FLOAT32_MAX`] ((0, ...] unless ``low_inclusive``).

    The clients train in float32 (torch): a larger value cannot be converted there, and
    every client would fail in its first step.
    """
    bracket = "[" if low_inclusive else "("
    try:
        rate = check_float(value, name, owner, low=0.0, low_inclusive=low_inclusive)
    except ValidationError:
        rate = math.inf
    if rate > FLOAT32_MAX:
        raise invalid_parameter(name, owner, f"a float in {bracket}0, {FLOAT32_MAX:.6g}] "
                                "(finite in float32)", describe(value))
    return rate


class Strategy(Protocol):
    """The round hooks the server calls; see the module docstring."""

    name: str
    aggregator: Aggregator
    min_clients: int
    """Fewest surviving updates a round may aggregate."""
    server_optimizer: ServerOptimizer | None
    """The server's update from the aggregate, or None (the aggregate is the model)."""
    control_variates: bool
    """Whether control variates travel with the model (SCAFFOLD)."""

    @property
    def secret_sampling_rate(self) -> float | None:
        """Q for DP amplification by sampling, or None for a cohort that is not secret."""

    def setup(self, counts: Mapping[str, int]) -> dict[str, int]:
        """Return each client's mini-batch size given its training-sample count."""

    def min_rows(self, clients: int) -> int:
        """Return the fewest training rows one of ``clients`` needs, whatever the others hold.

        A client checks its own count against it before it joins
        (:func:`check_client_rows`); :meth:`setup` checks every count at the server.
        """

    def select(self, round: int, available: Sequence[str]) -> list[str]:
        """Return the clients that train in ``round`` (from 1), in a fixed order."""

    def local_steps(self) -> int:
        """Return τ for the next round."""

    def local_config(self, round: int) -> LocalConfig:
        """Return the local optimiser of ``round``."""

    def needs_evaluation(self, round: int) -> bool:
        """Whether clients report their local accuracy of the global model this round."""

    def observe(self, round: int, accuracy: float | None) -> None:
        """Learn from a finished round (``accuracy``: eq. 30 over the survivors)."""

    def get_state(self) -> dict[str, Any]:
        """Return the mutable state, as wire-encodable values, for a checkpoint."""

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state`'s output."""


def _check_fraction(value: Any, owner: str) -> float:
    frac = check_float(value, "fraction", owner, low=0.0, low_inclusive=False)
    if frac > 1:
        raise invalid_parameter("fraction", owner, "a float in (0, 1]", describe(value))
    return frac


def check_client_rows(strategy: Strategy, client: str, rows: int, clients: int, *,
                      eval_rows: int = 0) -> None:
    """Refuse, before the client joins, fewer training rows than the strategy needs.

    Parameters
    ----------
    strategy
        The federation's strategy (:meth:`Strategy.min_rows`).
    client
        The client's name, for the message.
    rows, eval_rows
        Its training rows and the rows it keeps for local evaluation.
    clients
        How many clients the federation has.

    Raises
    ------
    ValidationError
        Naming the client, its rows and the minimum.
    """
    min_rows = getattr(strategy, "min_rows", None)
    if min_rows is None:  # a user's strategy written before the hook: no minimum
        return
    need = min_rows(clients)
    if rows < need:
        kept = f" ({eval_rows} more kept for its local evaluation)" if eval_rows else ""
        raise ValidationError(
            f"client {client!r} has {rows} training row{'s' if rows != 1 else ''}{kept}; "
            f"{type(strategy).__name__} trains every client on mini-batches of {need} rows, "
            f"so each client needs at least {need}")


def _fixed_batches(batch_size: int, counts: Mapping[str, int], owner: str) -> dict[str, int]:
    for client, n in counts.items():
        if batch_size > n:
            raise ValidationError(
                f"The 'batch_size' parameter of {owner} ({batch_size}) is larger than the "
                f"{n} training samples of client {client!r}"
            )
    return dict.fromkeys(counts, batch_size)


SAMPLINGS = ("fixed", "poisson")


def _sample(fraction: float, min_clients: int, round: int, available: Sequence[str],
            seed: int, sampling: str = "fixed") -> list[str]:
    if fraction >= 1:
        return list(available)
    if sampling == "poisson":
        # secret: each client independently with probability q, from the CSPRNG
        # (2^-53 resolution); no floor, which would make it another mechanism
        threshold = math.floor(fraction * 2.0**53 + 0.5)
        return [c for c in available if secrets.randbits(53) < threshold]
    want = max(min_clients, math.ceil(fraction * len(available)))
    want = min(want, len(available))
    # a generator per (seed, round): the same selection after a resume
    rng = np.random.default_rng([seed, round])
    picked = set(rng.choice(len(available), size=want, replace=False).tolist())
    return [c for i, c in enumerate(available) if i in picked]


class FedAvg:
    """Federated averaging: every round each selected client runs τ local SGD steps.

    Parameters
    ----------
    local_steps : int, default=1
        τ, local mini-batch steps between aggregations (fixed).
    batch_size : int or None, default=64
        Every client's mini-batch size (each must hold at least this many samples);
        None: full batch, every client's whole training data each step.
    lr, momentum, weight_decay : float
        The local optimiser (see :class:`LocalConfig`).
    fraction : float, default=1.0
        Share of the available clients that train each round (see ``sampling``).
    sampling : {"fixed", "poisson"}, default="fixed"
        How a ``fraction`` < 1 is drawn. ``"fixed"``: ⌈fraction·N⌉ clients (at least
        ``min_clients``) from ``seed``, reproducible, and therefore predictable: client-
        level DP claims no amplification by sampling for it (q = 1). ``"poisson"``: each
        client independently with probability ``fraction``, from the cryptographic
        generator, secret and not reproducible; client-level DP accounts q = fraction.
        A draw below ``min_clients`` stops the run: choose fraction·N well above it.
    min_clients : int, default=1
        Fewest surviving updates a round may aggregate; fewer is an error.
    evaluate : bool, default=False
        Ask clients for their local accuracy of the global model every round.
    aggregator : Aggregator, default=MeanAggregator()
        How updates are combined (weights n_k).
    seed : int, default=0
        Seed of ``"fixed"`` client sampling.
    server_optimizer : ServerOptimizer or None, default=None
        The server's update from the aggregate (:mod:`islands.hfl.server_opt`); None:
        the aggregate is the next global model. Refused over an aggregator that hides the
        aggregate from the server (CKKS, Paillier, chaos).
    """

    strategy_name = "fedavg"
    """The name files give the strategy (``[strategy] name``)."""
    control_variates = False
    """Whether control variates travel with the model (SCAFFOLD, :mod:`islands.hfl.scaffold`)."""

    def __init__(self, local_steps: int = 1, batch_size: int | None = 64, lr: float = 0.1,
                 momentum: float = 0.0, weight_decay: float = 0.0, fraction: float = 1.0,
                 min_clients: int = 1, evaluate: bool = False,
                 aggregator: Aggregator | None = None, seed: int = 0,
                 sampling: str = "fixed",
                 server_optimizer: ServerOptimizer | None = None) -> None:
        owner = type(self).__name__
        self.tau = check_int(local_steps, "local_steps", owner, low=1)
        self.batch_size = (None if batch_size is None
                           else check_int(batch_size, "batch_size", owner, low=1))
        self._config = LocalConfig(lr=lr, momentum=momentum, weight_decay=weight_decay)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.fraction = _check_fraction(fraction, owner)
        self.min_clients = check_int(min_clients, "min_clients", owner, low=1)
        self.evaluate = bool(evaluate)
        self.aggregator = MeanAggregator() if aggregator is None else aggregator
        self.seed = check_int(seed, "seed", owner, low=0)
        if sampling not in SAMPLINGS:
            raise invalid_parameter("sampling", owner, f"one of {SAMPLINGS}", sampling)
        self.sampling = sampling
        self.server_optimizer = server_optimizer
        check_composes(self.aggregator, server_optimizer, owner)
        self.name = self.strategy_name

    @property
    def secret_sampling_rate(self) -> float | None:
        """Return q for amplification by sampling, or None for a cohort that is not secret.

        Only a ``"poisson"`` draw from the cryptographic generator is; every client
        training (``fraction`` 1) gives q = 1.
        """
        if self.fraction >= 1:
            return 1.0
        return self.fraction if self.sampling == "poisson" else None

    def min_rows(self, clients: int) -> int:
        """Return ``batch_size`` (1 for full batches)."""
        return 1 if self.batch_size is None else self.batch_size

    def setup(self, counts: Mapping[str, int]) -> dict[str, int]:
        """Every client uses ``batch_size`` (or all its rows when it is None)."""
        if self.batch_size is None:
            return dict(counts)
        return _fixed_batches(self.batch_size, counts, type(self).__name__)

    def select(self, round: int, available: Sequence[str]) -> list[str]:
        """All available clients, or a per-round sample of ``fraction`` of them."""
        return _sample(self.fraction, self.min_clients, round, available, self.seed,
                       self.sampling)

    def local_steps(self) -> int:
        """Return the fixed τ."""
        return self.tau

    def local_config(self, round: int) -> LocalConfig:
        """Return the same optimiser every round."""
        return self._config

    def needs_evaluation(self, round: int) -> bool:
        """As configured by ``evaluate``."""
        return self.evaluate

    def observe(self, round: int, accuracy: float | None) -> None:
        """FedAvg learns nothing from a round."""

    def get_state(self) -> dict[str, Any]:
        """FedAvg has no mutable state."""
        return {}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore."""

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(local_steps={self.tau}, "
                f"batch_size={self.batch_size}, lr={self.lr}, momentum={self.momentum}, "
                f"aggregator={self.aggregator!r}{_opt_repr(self)})")


class FedProx(FedAvg):
    """FedAvg with FedProx's proximal term μ/2·‖w − w_g‖² in every local objective.

    Parameters
    ----------
    mu : float, default=0.01
        μ ≥ 0; μ = 0 is FedAvg.
    **FedAvg parameters
        As :class:`FedAvg`.
    """

    strategy_name = "fedprox"

    def __init__(self, mu: float = 0.01, local_steps: int = 1, batch_size: int | None = 64,
                 lr: float = 0.1, momentum: float = 0.0, weight_decay: float = 0.0,
                 fraction: float = 1.0, min_clients: int = 1, evaluate: bool = False,
                 aggregator: Aggregator | None = None, seed: int = 0,
                 sampling: str = "fixed",
                 server_optimizer: ServerOptimizer | None = None) -> None:
        super().__init__(local_steps=local_steps, batch_size=batch_size, lr=lr,
                         momentum=momentum, weight_decay=weight_decay, fraction=fraction,
                         min_clients=min_clients, evaluate=evaluate, aggregator=aggregator,
                         seed=seed, sampling=sampling, server_optimizer=server_optimizer)
        self.mu = check_rate(mu, "mu", "FedProx")
        self._config = LocalConfig(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                   prox_mu=self.mu)

    def __repr__(self) -> str:
        return f"FedProx(mu={self.mu}, " + super().__repr__().split("(", 1)[1]


class FedBN(FedAvg):
    """FedAvg with every batch-norm layer kept local (FedBN, Li et al. [4]_).

    Each client keeps its batch-norm layers' weights and running statistics, trained on
    its own rows and never sent; every other parameter is averaged as in FedAvg (under
    the aggregator's protection). For clients whose features are shifted (another
    scanner, contrast or rotation), each keeps the normalisation of its own
    distribution. Needs a user's model with batch norm
    (:class:`~islands.hfl.torch.user.TorchModel`); the model each client ends with is its
    own (``FederatedModel.export(client=...)``).

    Parameters
    ----------
    **FedAvg parameters
        As :class:`FedAvg`.
    """

    local_layers = "batchnorm"
    """The layers that stay with each client (:data:`~islands.hfl.torch.user.LOCAL_LAYERS`)."""
    strategy_name = "fedbn"

    def __repr__(self) -> str:
        return "FedBN(" + super().__repr__().split("(", 1)[1]


class APFL:
    """APFL's adaptive aggregation: proportional mini-batches and a shrinking interval.

    Each client's mini-batch is b_k = int(b_CL·n_k/n) (eq. 26; ``mbs=False`` gives every
    client ``client_batch_size`` instead, the paper's "no mbs" ablation). Every round the
    clients report their local test accuracy of the global model; the server weighs
    them by n_k (eq. 30) and, after ``phi`` evaluations in a row without a new best,
    sets τ ← max(τ − 1, 1) (eq. 31). The local optimiser is momentum SGD.

    Parameters
    ----------
    tau : int, default=15
        τ₀, the initial interval.
    phi : int, default=5
        Φ.
    batch_size : int, default=512
        b_CL, the centralised batch the clients' batches add up to.
    mbs : bool, default=True
        Apply the batch rule of eq. 26.
    adaptive : bool, default=True
        Apply the interval rule of eq. 31; False keeps τ fixed (the paper's
        "FL (τ) + mbs" ablation rows).
    client_batch_size : int or None
        Every client's batch when ``mbs=False``; default ``batch_size // n_clients``
        (the same total per step as the rule, split evenly instead of by data).
    lr : float, default=0.1
    momentum : float, default=0.5
        The paper's optimiser.
    weight_decay : float, default=0.0
    min_clients : int, default=1
    aggregator : Aggregator, default=MeanAggregator()
        APFL's own protection (CKKS over a chaos permutation) is an aggregator too.
    server_optimizer : ServerOptimizer or None, default=None
        As :class:`FedAvg`'s (not over CKKS or the chaos permutation).

    References
    ----------
    .. [1] Zhang Ze-Hui et al., Acta Automatica Sinica 2023, eqs. 26, 30, 31; §5.1 for
       the defaults (τ₀ = 15, Φ = 5, b_CL = 512, lr 0.1, momentum 0.5).
    """

    control_variates = False
    """No control variates travel (see :attr:`FedAvg.control_variates`)."""

    def __init__(self, tau: int = 15, phi: int = 5, batch_size: int = 512, mbs: bool = True,
                 adaptive: bool = True, client_batch_size: int | None = None, lr: float = 0.1,
                 momentum: float = 0.5, weight_decay: float = 0.0, min_clients: int = 1,
                 aggregator: Aggregator | None = None,
                 server_optimizer: ServerOptimizer | None = None) -> None:
        self.tau0 = check_int(tau, "tau", "APFL", low=1)
        self.phi = check_int(phi, "phi", "APFL", low=1)
        self.batch_size = check_int(batch_size, "batch_size", "APFL", low=1)
        self.mbs = bool(mbs)
        self.adaptive = bool(adaptive)
        self.client_batch_size = (None if client_batch_size is None else
                                  check_int(client_batch_size, "client_batch_size", "APFL",
                                            low=1))
        self._config = LocalConfig(lr=lr, momentum=momentum, weight_decay=weight_decay)
        self.min_clients = check_int(min_clients, "min_clients", "APFL", low=1)
        self.aggregator = MeanAggregator() if aggregator is None else aggregator
        self.server_optimizer = server_optimizer
        check_composes(self.aggregator, server_optimizer, "APFL")
        self.name = "apfl" if self.mbs else "apfl-no-mbs"
        self.state = TauState(tau=self.tau0)

    @property
    def secret_sampling_rate(self) -> float:
        """Every client trains every round: q = 1."""
        return 1.0

    def min_rows(self, clients: int) -> int:
        """Return the common batch without the rule; with it, 1 (eq. 26 needs every count)."""
        if self.mbs:
            return 1
        return self.client_batch_size or max(1, self.batch_size // clients)

    def setup(self, counts: Mapping[str, int]) -> dict[str, int]:
        """Eq. 26, or a common batch size when the rule is off."""
        if self.mbs:
            return dict(zip(counts, apfl_batch_sizes(self.batch_size, list(counts.values()),
                                                     list(counts)), strict=True))
        size = self.client_batch_size or max(1, self.batch_size // len(counts))
        return _fixed_batches(size, counts, "APFL")

    def select(self, round: int, available: Sequence[str]) -> list[str]:
        """Every available client, every round."""
        return list(available)

    def local_steps(self) -> int:
        """Return the current τ."""
        return self.state.tau

    def local_config(self, round: int) -> LocalConfig:
        """Momentum SGD."""
        return self._config

    def needs_evaluation(self, round: int) -> bool:
        """Return True when adaptive: eq. 30 needs the accuracy of every round."""
        return self.adaptive

    def observe(self, round: int, accuracy: float | None) -> None:
        """Eq. 31 on the round's weighted accuracy."""
        if accuracy is not None and self.adaptive:
            self.state = update_tau(self.state, accuracy, phi=self.phi)

    def get_state(self) -> dict[str, Any]:
        """τ, the best accuracy and the stale count."""
        return {"tau": self.state.tau, "best": self.state.best, "stale": self.state.stale}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore τ, best and the stale count."""
        self.state = TauState(tau=int(state["tau"]), best=float(state["best"]),
                              stale=int(state["stale"]))

    def __repr__(self) -> str:
        return (f"APFL(tau={self.tau0}, phi={self.phi}, batch_size={self.batch_size}, "
                f"mbs={self.mbs}, adaptive={self.adaptive}, lr={self._config.lr}, "
                f"momentum={self._config.momentum}, "
                f"aggregator={self.aggregator!r}{_opt_repr(self)})")


def _opt_repr(strategy: Any) -> str:
    opt = getattr(strategy, "server_optimizer", None)
    return "" if opt is None else f", server_optimizer={opt!r}"
