"""Horizontal FL's settings, declared once for the estimator, job files and federation files.

:class:`HflConfig` holds every setting of a horizontal-FL run with its one default,
constraint and doc line; its parts are their own configurations:

- :class:`ModelConfig` (``[model]``): the architecture's kind and sizes (the sizes'
  defaults are :class:`~islands.hfl.torch.models.ModelSpec`'s, the one copy);
- :data:`StrategyConfig` (``[strategy]``): :class:`FedAvgConfig`, :class:`FedProxConfig`
  or :class:`ApflConfig`, chosen by ``name``; an unset key keeps the strategy class's
  default, and the ranges are the class's own (checked when it is built);
- :class:`ServerOptimizerConfig` (``[server_optimizer]``): the server's optimiser
  (:mod:`islands.hfl.server_opt`), chosen by ``name``; an unset key keeps the optimiser
  class's default, and the ranges are the class's own;
- :class:`ContributionConfig` (``[contribution]``): :class:`ContributionSettings`, which
  :class:`~islands.hfl.contribution.Contribution` checks its parameters with, plus the
  file's ``validation`` and ``validation_samples``.

:class:`~islands.hfl.FederatedModel` builds :class:`HflConfig` from its parameters at
``fit`` (its model, strategy and contribution are objects, checked as such); a job file
(:mod:`islands.hfl.job`) and a federation file's ``[hfl]`` section (:mod:`islands.hfl.spec`)
build it from their tables. ``task`` defaults to None, resolved by :func:`infer_task`.
In files, ``concurrency = "all"`` stands for None (every client at once).

Files name the run's seed ``seed``; the estimator's parameter is ``random_state``, as
every islands estimator's, and an int ``random_state`` is that seed itself
(:func:`resolve_seed`): a file's ``seed = 4`` and ``random_state=4`` train the same model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from islands.config import ProtocolConfig, setting
from islands.errors import JobError, ValidationError, invalid_parameter
from islands.hfl.named import NAME_PATTERN
from islands.hfl.server_opt import OPTIMIZERS, ServerOptimizer, server_optimizer
from islands.hfl.strategy import SAMPLINGS
from islands.validation import check_random_state, describe, is_int

__all__ = [
    "DATASETS",
    "METHODS",
    "SEED_MAX",
    "STRATEGY_KEYS",
    "ApflConfig",
    "ContributionConfig",
    "ContributionSettings",
    "DataConfig",
    "FedAvgConfig",
    "FedBNConfig",
    "FedProxConfig",
    "HflConfig",
    "HflFederationConfig",
    "ModelConfig",
    "PartitionConfig",
    "ScaffoldConfig",
    "ServerOptimizerConfig",
    "StrategyConfig",
    "infer_task",
    "resolve_seed",
    "strategy_config",
]

DATASETS: tuple[str, ...] = ("fashion_mnist", "digits", "breast_cancer", "wine", "diabetes")
"""The data sets a job file can name."""
METHODS: tuple[str, ...] = ("retrain", "gtg", "exact", "or", "loo")
"""Contribution methods (:mod:`islands.hfl.contribution.tracker`)."""
DEFAULT_RETRAIN_CLIENTS = 8
"""Contribution's default methods: ``("retrain",)`` up to this many clients (2^n − 1 more
trainings), the per-round ``("gtg", "loo")`` above it or where retraining cannot run."""
_WEIGHTINGS = ("fixed", "renormalised")  # islands.hfl.contribution.game.WEIGHTINGS (a test)
_REGRESSION_DATASETS = ("diabetes",)

SEED_MAX = 2**63 - 1
"""The largest seed (PyTorch's generator and NumPy's int64 take no more)."""



def resolve_seed(random_state: Any, owner: str) -> int:
    """Return the run's seed that a ``random_state`` stands for.

    An int in [0, :data:`SEED_MAX`] is the seed itself (what ``seed`` was, and a file's
    ``seed`` is); a :class:`numpy.random.Generator` gives one draw from its stream (so
    each call advances it); None a draw from fresh operating-system entropy.

    Raises
    ------
    ValidationError
        Naming ``random_state`` and ``owner``, for anything else (a negative or too large
        int, a bool, a float).
    """
    if is_int(random_state):
        if 0 <= random_state <= SEED_MAX:
            return int(random_state)
    elif random_state is None or isinstance(random_state, np.random.Generator):
        rng = check_random_state(random_state, owner)
        return int(rng.integers(0, SEED_MAX, endpoint=True))
    raise invalid_parameter("random_state", owner,
                            f"an int in [0, {SEED_MAX}], a numpy.random.Generator or None",
                            describe(random_state))


Task = Literal["classification", "regression"]
_PositiveInt = Annotated[int, Field(ge=1)]


def _as_tuple(value: Any) -> Any:
    """TOML and Python callers give lists where a tuple is meant."""
    return tuple(value) if isinstance(value, list) else value


def _all_is_none(value: Any) -> Any:
    """``concurrency = "all"`` in a file (TOML has no null) means None."""
    return None if value == "all" else value


def _distinct(value: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(value)) != len(value):
        raise ValueError("names repeat")
    return value


def _distinct_or_none(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    return None if value is None else _distinct(value)


def infer_task(task: str | None, dataset: str | None = None) -> Task:
    """Return ``task``, or the task a data set's name implies when it is None.

    The one rule for a job or federation file without ``task``: a regression data set
    (diabetes) gives ``"regression"``; anything else, or no data set, ``"classification"``.
    """
    if task is not None:
        return "regression" if task == "regression" else "classification"
    return "regression" if dataset in _REGRESSION_DATASETS else "classification"


class ModelConfig(ProtocolConfig):
    """``[model]``: the model every party trains, built in or the user's own.

    Either ``kind`` (a built-in architecture: ``hidden`` and ``channels`` left unset take
    :class:`~islands.hfl.torch.models.ModelSpec`'s defaults (200,) and (16, 32)) or
    ``factory``, a user's function ``"package.module:function"`` that returns an
    ``nn.Module``, called with ``args`` as keyword arguments (each party imports it on its
    own machine; :class:`~islands.hfl.torch.user.TorchModel`). :meth:`make_model` makes
    either. With either, ``loss`` names the clients' loss function
    (:mod:`islands.hfl.torch.loss`; each client imports it) and ``metrics`` the extra
    test metrics of the results (:func:`islands.hfl.metrics.resolve_metrics`).
    """

    OWNER: ClassVar[str] = "ModelSpec"

    kind: Literal["mlp", "cnn", "linear"] | None = setting(
        None, "'mlp', 'cnn' or 'linear'",
        "A built-in architecture (islands.hfl.torch.models); or give 'factory'.")
    hidden: Annotated[tuple[_PositiveInt, ...] | None, BeforeValidator(_as_tuple)] = setting(
        None, "a list of ints >= 1", "Hidden layer widths of an mlp (None: ModelSpec's).")
    channels: Annotated[tuple[_PositiveInt, ...] | None, BeforeValidator(_as_tuple)] = setting(
        None, "two ints >= 1", "Channels of a cnn's two convolutions (None: ModelSpec's).",
        min_length=2, max_length=2)
    factory: str | None = setting(
        None, "a name 'package.module:function'",
        "A user's function returning the torch.nn.Module to train (imported by each party).",
        pattern=NAME_PATTERN)
    args: dict[str, Any] = setting(
        {}, "a table of plain values", "The factory's keyword arguments.")
    loss: str | None = setting(
        None, "a name 'package.module:function'",
        "The clients' loss fn(outputs, targets) (None: cross-entropy or squared error).",
        pattern=NAME_PATTERN)
    metrics: Annotated[tuple[str, ...], BeforeValidator(_as_tuple)] = setting(
        (), "a list of metric names",
        "Extra test metrics: scikit-learn names ('f1_macro') or 'package.module:function'.")

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if (self.kind is None) == (self.factory is None):
            raise ValidationError("give exactly one of 'kind' (a built-in model) and 'factory' "
                             "(your own, 'package.module:function')")
        if self.factory is not None and (self.hidden is not None or self.channels is not None):
            raise ValidationError("'hidden' and 'channels' size a built-in 'kind'; a factory takes "
                             "its sizes from 'args'")
        if self.kind is not None and self.args:
            raise ValidationError("'args' are a factory's keyword arguments; a built-in 'kind' "
                             "takes 'hidden' and 'channels'")
        return self

    def spec(self, input_shape: tuple[int, ...], n_outputs: int,
             input_divisor: float = 1.0) -> Any:
        """Return the :class:`~islands.hfl.torch.models.ModelSpec` of ``kind`` (imports torch).

        ``input_divisor`` comes from the data, not the file: 255 where a job keeps image
        pixels as ``uint8``.
        """
        from islands.hfl.torch.models import ModelSpec  # torch

        assert self.kind is not None  # a factory's model is made by make_model()
        sizes: dict[str, Any] = {k: v for k, v in (("hidden", self.hidden),
                                                   ("channels", self.channels))
                                 if v is not None}
        return ModelSpec(kind=self.kind, input_shape=input_shape, n_outputs=n_outputs,
                         input_divisor=input_divisor, **sizes)

    def make_model(self, input_shape: tuple[int, ...], n_outputs: int, *, task: str,
                   seed: int, where: str, input_divisor: float = 1.0,
                   folder: str | None = None, local_layers: str | None = None) -> Any:
        """Return the model: :meth:`spec` for a ``kind``, a bound ``TorchModel`` for a factory.

        A factory's module gets the rows as the data holds them (images as (n, C, H, W),
        already divided by ``input_divisor``'s 255 by the caller); its output width must
        be ``n_outputs``. ``folder`` (the job file's) is searched for the factory's module
        when it is found nowhere else; ``local_layers`` stay with each client (FedBN).

        Raises
        ------
        JobError
            Naming ``where`` and what is wrong with the factory or its model.
        """
        if self.factory is None:
            if local_layers is not None:
                raise JobError(f"{where} [model]: FedBN keeps batch-norm layers local; the "
                               f"built-in {self.kind!r} has none (name a 'factory' with batch "
                               "norm, or train with fedavg)")
            return self.spec(input_shape, n_outputs, input_divisor)
        from islands.hfl.torch.user import TorchModel  # torch

        try:
            model = TorchModel.bind(self.factory, input_shape, task=task, seed=seed,
                                    kwargs=self.args, owner=f"{where} [model]", folder=folder,
                                    local_layers=local_layers)
        except ValidationError as exc:
            raise JobError(f"{where} [model]: {exc}") from None
        if model.n_outputs != n_outputs:
            raise JobError(f"{where} [model]: the factory's model {self.factory} outputs "
                           f"{model.n_outputs} values per row, but the data needs "
                           f"{n_outputs}")
        return model


class _StrategyBase(ProtocolConfig):
    """Settings every strategy takes; None keeps the strategy class's default.

    Numbers are only typed here: their ranges are the strategy class's own (infinity
    included, so that the class names the parameter and its range).
    """

    lr: float | None = setting(None, "a number", "Local step size.",
                               allow_inf_nan=True)
    momentum: float | None = setting(None, "a number", "Local SGD momentum.",
                                     allow_inf_nan=True)
    weight_decay: float | None = setting(None, "a number", "Local L2 penalty.",
                                         allow_inf_nan=True)
    min_clients: _PositiveInt | None = setting(
        None, "an int >= 1", "Fewest clients a round may aggregate.")

    def kwargs(self) -> dict[str, Any]:
        """Return the keyword arguments of the strategy class (the settings given)."""
        out = {k: v for k, v in self.model_dump(exclude_unset=True).items()
               if k != "name" and v is not None}
        if out.get("batch_size") == "full":
            out["batch_size"] = None
        return out


class FedAvgConfig(_StrategyBase):
    """``[strategy] name = "fedavg"`` (:class:`~islands.hfl.strategy.FedAvg`)."""

    OWNER: ClassVar[str] = "FedAvg"

    name: Literal["fedavg"] = setting("fedavg", "'fedavg'", "The strategy.")
    local_steps: _PositiveInt | None = setting(None, "an int >= 1",
                                               "Local steps per round (None: one epoch).")
    batch_size: _PositiveInt | Literal["full"] | None = setting(
        None, "an int >= 1 or 'full'", "Local mini-batch size ('full': all rows).")
    fraction: float | None = setting(None, "a number", "Share of the clients per round.",
                                     allow_inf_nan=True)
    evaluate: bool | None = setting(None, "a bool", "Clients report local accuracy.")
    sampling: Literal[SAMPLINGS] | None = setting(  # type: ignore[valid-type]
        None, " or ".join(repr(v) for v in SAMPLINGS),
        "'fixed' (from the seed) or 'poisson' (a secret draw) cohorts.")


class FedProxConfig(FedAvgConfig):
    """``[strategy] name = "fedprox"`` (:class:`~islands.hfl.strategy.FedProx`)."""

    OWNER: ClassVar[str] = "FedProx"

    name: Literal["fedprox"] = setting("fedprox", "'fedprox'",  # type: ignore[assignment]
                                       "The strategy.")
    mu: float | None = setting(None, "a number", "The proximal term's weight μ.",
                               allow_inf_nan=True)


class FedBNConfig(FedAvgConfig):
    """``[strategy] name = "fedbn"`` (:class:`~islands.hfl.strategy.FedBN`).

    It needs a model with batch norm, from ``[model] factory``.
    """

    OWNER: ClassVar[str] = "FedBN"

    name: Literal["fedbn"] = setting("fedbn", "'fedbn'",  # type: ignore[assignment]
                                     "The strategy.")


class ScaffoldConfig(FedAvgConfig):
    """``[strategy] name = "scaffold"`` (:class:`~islands.hfl.scaffold.Scaffold`).

    No ``[server_optimizer]``: SCAFFOLD's global step is 1.
    """

    OWNER: ClassVar[str] = "Scaffold"

    name: Literal["scaffold"] = setting("scaffold", "'scaffold'",  # type: ignore[assignment]
                                        "The strategy.")


class ApflConfig(_StrategyBase):
    """``[strategy] name = "apfl"`` (:class:`~islands.hfl.strategy.APFL`)."""

    OWNER: ClassVar[str] = "APFL"

    name: Literal["apfl"] = setting("apfl", "'apfl'", "The strategy.")
    tau: _PositiveInt | None = setting(None, "an int >= 1", "Initial local steps τ.")
    phi: _PositiveInt | None = setting(None, "an int >= 1", "τ's adaptation parameter φ.")
    batch_size: _PositiveInt | None = setting(
        None, "an int >= 1 ('full' is for fedavg/fedprox)", "Mini-batch size.")
    mbs: bool | None = setting(None, "a bool", "Mini-batch sizes per client (MBS).")
    adaptive: bool | None = setting(None, "a bool", "Adapt τ every round.")
    client_batch_size: _PositiveInt | None = setting(
        None, "an int >= 1", "A fixed mini-batch size for every client.")


StrategyConfig = Annotated[FedAvgConfig | FedProxConfig | FedBNConfig | ScaffoldConfig
                           | ApflConfig, Field(discriminator="name")]
"""One strategy's settings, chosen by ``name``."""
_STRATEGIES: dict[str, type[FedAvgConfig] | type[ApflConfig]] = {
    "fedavg": FedAvgConfig, "apfl": ApflConfig, "fedprox": FedProxConfig,
    "fedbn": FedBNConfig, "scaffold": ScaffoldConfig}
STRATEGY_KEYS: list[str] = sorted(set().union(*(c.model_fields for c in _STRATEGIES.values())))
"""Every key a ``[strategy]`` table may hold (each strategy takes some of them)."""


def strategy_config(table: Mapping[str, Any], where: str) -> FedAvgConfig | ApflConfig:
    """Check a ``[strategy]`` table and return the named strategy's configuration.

    Raises
    ------
    JobError
        An unknown key, an unknown ``name``, a key the strategy does not take, or a value
        of the wrong kind, naming ``where``.
    """
    extra = sorted(set(table) - set(STRATEGY_KEYS))
    if extra:
        raise JobError(f"{where}: unknown key(s) {extra}; allowed: {STRATEGY_KEYS}")
    if "name" not in table:
        raise JobError(f"{where}: missing key 'name'")
    name = table["name"]
    cls = _STRATEGIES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise JobError(f"{where}: 'name' must be one of {sorted(_STRATEGIES)}; got {name!r}")
    allowed = sorted(set(cls.model_fields) - {"name"})
    stray = sorted(set(table) - set(cls.model_fields))
    if stray:
        raise JobError(f"{where} {stray} do not apply to {name!r}; it takes {allowed}")
    return cls.from_table(table, where)


_OPTIMIZER_NAMES = tuple(sorted(OPTIMIZERS))


class ServerOptimizerConfig(ProtocolConfig):
    """``[server_optimizer]``: the server's optimiser (:mod:`islands.hfl.server_opt`).

    Numbers are only typed here: their ranges are the optimiser class's own, and a key
    left out keeps its default (:meth:`build` refuses a key the named optimiser does not
    take: ``momentum`` is FedAvgM's, ``beta2`` FedAdam's and FedYogi's).
    """

    OWNER: ClassVar[str] = "server_optimizer"

    name: Literal[_OPTIMIZER_NAMES] = setting(  # type: ignore[valid-type]
        ..., " or ".join(repr(n) for n in _OPTIMIZER_NAMES), "The server optimiser.")
    lr: float | None = setting(None, "a number", "η, the server learning rate.",
                               allow_inf_nan=True)
    momentum: float | None = setting(None, "a number", "fedavgm: the server momentum β.",
                                     allow_inf_nan=True)
    beta1: float | None = setting(None, "a number", "The first moment's decay β1.",
                                  allow_inf_nan=True)
    beta2: float | None = setting(None, "a number",
                                  "fedadam, fedyogi: the second moment's decay β2.",
                                  allow_inf_nan=True)
    tau: float | None = setting(None, "a number", "The adaptivity τ (not fedavgm).",
                                allow_inf_nan=True)

    def optimizer(self) -> ServerOptimizer:
        """Return the optimiser, with the keys given (ValidationError out of its range)."""
        given = {k: v for k, v in self.model_dump(exclude_unset=True).items()
                 if k != "name" and v is not None}
        return server_optimizer(self.name, **given)


class DataConfig(ProtocolConfig):
    """A job file's ``[data]``: the data set and its train/test rows."""

    OWNER: ClassVar[str] = "job"

    name: Literal[DATASETS] = setting(  # type: ignore[valid-type]
        ..., f"one of {list(DATASETS)}", "The data set.")
    train_samples: _PositiveInt | None = setting(
        None, "an int >= 1", "A random subset of the training rows (None: all).")
    test_samples: _PositiveInt | None = setting(
        None, "an int >= 1", "A random subset of the test rows (None: all).")
    test_fraction: float = setting(0.2, "a float in (0, 1)",
                                   "Test share of a data set without a test split.", gt=0, lt=1)
    standardize: bool = setting(False, "a bool",
                                "Standardise with the pooled training rows' statistics.")
    path: str | None = setting(None, "a str", "Folder of the Fashion-MNIST files.")


class PartitionConfig(ProtocolConfig):
    """A job file's ``[partition]``: how the training rows are divided between clients."""

    OWNER: ClassVar[str] = "job"

    kind: Literal["iid", "classes", "dirichlet", "shards"] = setting(
        ..., "one of ['iid', 'classes', 'dirichlet', 'shards']", "The partition.")
    clients: _PositiveInt | None = setting(None, "an int >= 1", "How many clients.")
    groups: str | list[Any] | None = setting(
        None, "str or list", "kind 'classes': the classes of each client ('0-3,4-6,7-9').")
    alpha: float = setting(0.5, "a number > 0", "kind 'dirichlet': the concentration.", gt=0)
    shards_per_client: _PositiveInt = setting(2, "an int >= 1", "kind 'shards'.")
    min_samples: int | float | None = setting(None, "a number", "Unused; kept so files parse.")

    @model_validator(mode="after")
    def _sizes_are_given(self) -> PartitionConfig:
        if self.kind == "classes" and self.groups is None:
            raise ValidationError("missing key 'groups'")
        if self.kind != "classes" and self.clients is None:
            raise ValidationError("missing key 'clients'")
        return self


class ContributionSettings(ProtocolConfig):
    """How a run's clients are valued (:class:`~islands.hfl.contribution.Contribution`)."""

    OWNER: ClassVar[str] = "Contribution"

    methods: Annotated[tuple[Literal[METHODS], ...] | None,  # type: ignore[valid-type]
                       BeforeValidator(_as_tuple), AfterValidator(_distinct_or_none)] = setting(
        None, f"a list of distinct names among {list(METHODS)}",
        "Methods to compute; the first gives the reward shares (None: 'retrain' up to "
        f"{DEFAULT_RETRAIN_CLIENTS} clients without DP, else 'gtg', 'loo').", min_length=1)
    metric: Literal["accuracy", "loss"] | None = setting(
        None, "'accuracy' or 'loss'", "The utility (None: accuracy for 'retrain', minus the "
        "loss for the per-round methods and for a regression).")
    weighting: Literal[_WEIGHTINGS] = setting(  # type: ignore[valid-type]
        "fixed", "'fixed' or 'renormalised'", "How a coalition's model is rebuilt.")
    tolerance: float = setting(0.005, "a float in (0, inf)",
                               "gtg: confidence half-width to stop a round's sampling.", gt=0,
                               changed="files accepted 0, which never stops sampling early; "
                                       "the Contribution class always refused it")
    confidence: float = setting(0.95, "a float in (0, 1)", "gtg: the half-width's confidence.",
                                gt=0, lt=1)
    min_permutations: int = setting(10, "an int >= 2", "gtg: fewest orders per round.", ge=2)
    max_permutations: int = setting(200, "an int >= 2", "gtg: most orders per round.", ge=2)
    truncation: float = setting(0.0, "a float in [0, inf)",
                                "gtg: within-round truncation threshold (0: off).", ge=0)
    round_truncation: float = setting(0.0, "a float in [0, inf)",
                                      "gtg: skip rounds gaining at most this (0: off).", ge=0)
    seed: int | None = setting(None, "an int >= 0",
                               "Seeds the sampled orders (None: the federation's seed).", ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> ContributionSettings:
        if self.max_permutations < self.min_permutations:
            raise invalid_parameter("max_permutations", self.OWNER,
                                    f"an int >= min_permutations = {self.min_permutations}",
                                    self.max_permutations)
        return self


class ContributionConfig(ContributionSettings):
    """A file's ``[contribution]``: :class:`ContributionSettings` and the validation rows."""

    validation: Literal["server", "clients"] = setting(
        "server", "'server' or 'clients'",
        "The server's rows (drawn from the test rows) or the clients' own evaluation rows.")
    validation_samples: _PositiveInt = setting(1000, "an int >= 1",
                                               "How many test rows the server validates on.")

    def settings(self) -> dict[str, Any]:
        """Return the :class:`Contribution` keyword arguments (without ``validation``)."""
        return {k: v for k, v in dict(self).items()
                if k not in ("validation", "validation_samples")}


class HflConfig(ProtocolConfig):
    """Every setting of one horizontal-FL run.

    Fields are declared in the order they are checked. ``model``, ``strategy`` and
    ``contribution`` are None when the caller holds them as objects (the estimator's
    ModelSpec, Strategy and Contribution).
    """

    OWNER: ClassVar[str] = "FederatedModel"

    epochs: _PositiveInt = setting(1, "an int >= 1", "Epochs of local mini-batch steps.")
    seed: int = setting(0, f"an int in [0, {SEED_MAX}]",
                        "Seeds the initial model, the local splits and the batch orders.",
                        ge=0, le=SEED_MAX)
    task: Task | None = setting(None, "'classification' or 'regression'",
                                "What the model predicts (None: see infer_task).")
    eval_fraction: float = setting(0.1, "a float in [0, 1)",
                                   "Share of each client's rows kept for local evaluation.",
                                   ge=0, lt=1)
    concurrency: Annotated[_PositiveInt | None, BeforeValidator(_all_is_none)] = setting(
        8, "an int >= 1, or None (in files: \"all\")",
        "Clients training at the same time (None: all).")
    timeout: float = setting(600.0, "a float in (0, inf)",
                             "Seconds the server waits for one client's update.", gt=0)
    backend: Literal["local", "ray"] = setting(
        "local", "'local' or 'ray'", "Where local training runs: threads or Ray workers.")
    batch_clients: bool | Literal["auto"] = setting(
        "auto", "True, False or 'auto'",
        "Train the clients of one process as one batched computation ('auto': where it "
        "can; backend 'local').")
    ray_address: str | None = setting(
        None, "a Ray address such as 'auto', 'host:6379' or 'ray://host:10001' (or None)",
        "With backend 'ray': a running cluster (None: a local Ray).", pattern=r"^\S+$")
    model: ModelConfig | None = setting(None, "a [model] table", "The architecture.")
    strategy: StrategyConfig | None = setting(None, "a [strategy] table",
                                              "The strategy (None: FedAvg's defaults).")
    contribution: ContributionConfig | None = setting(
        None, "a [contribution] table", "Value every client's contribution (None: off).")

    @model_validator(mode="after")
    def _consistent(self) -> HflConfig:
        if self.ray_address is not None and self.backend != "ray":
            raise invalid_parameter("ray_address", self.OWNER, "None unless backend='ray'",
                                    self.ray_address)
        if self.batch_clients is True and self.backend != "local":
            raise invalid_parameter("batch_clients", self.OWNER,
                                    "False or 'auto' unless backend='local'", True)
        return self


class HflFederationConfig(ProtocolConfig):
    """A federation file's own ``[hfl]`` keys (the others are :class:`HflConfig`'s, as a job's).

    In a deployment no party sees a data set's name, so the model's input and output sizes
    are written here.
    """

    OWNER: ClassVar[str] = "the [hfl] section"

    server: str = setting(..., "a party name", "The party that aggregates (no data file).")
    features: _PositiveInt | Annotated[tuple[_PositiveInt, ...], BeforeValidator(_as_tuple),
                                       Field(min_length=1)] = setting(
        ..., "the input size (an int >= 1, or a shape such as [1, 28, 28] for a cnn)",
        "The model's input: the number of feature columns, or the shape each row has.",
        union_mode="left_to_right")
    classes: Annotated[int, Field(ge=2)] | None = setting(
        None, "an int >= 2", "The number of labels (a classification needs it).")
    checkpoint: bool = setting(True, "a bool", "Keep checkpoints next to the output folder.")

    @property
    def shape(self) -> tuple[int, ...]:
        """The model's input shape."""
        return (self.features,) if isinstance(self.features, int) else self.features
