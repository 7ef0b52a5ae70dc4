"""Job files for ``islands run``: one TOML file describes a whole federated training run.

A job names a data set, how its rows are divided between clients, the model, the
strategy and its parameters, the epochs, the seed and an output folder::

    name = "apfl-quick"
    seed = 0
    epochs = 3
    output = "runs/apfl-quick"   # relative to the working directory
    baseline = true              # also train centrally (CL) for Dev_avg and comparison
    backend = "local"            # or "ray": local training in Ray workers (optional)
    ray_address = "auto"         # with backend = "ray": a running cluster (optional;
                                 # without it a local Ray starts on this machine's cores)

    [data]
    name = "fashion_mnist"       # or digits, breast_cancer, wine, diabetes
    train_samples = 6000         # a random subset (optional)
    test_samples = 2000

    [partition]
    kind = "classes"             # iid | classes | dirichlet | shards
    clients = 3
    groups = "0-3,4-6,7-9"

    [model]
    kind = "mlp"                 # mlp | cnn | linear (or factory = "package.module:function")
    hidden = [200]
    loss = "losses:smoothed"     # the clients' loss fn(outputs, targets) (optional; each
                                 # client imports it, the job file's folder searched too)
    metrics = ["f1_macro", "balanced_accuracy"]   # extra test metrics (optional)

    [strategy]
    name = "apfl"                # fedavg | apfl | fedprox
    tau = 15
    phi = 5
    batch_size = 512
    lr = 0.1
    momentum = 0.5

FedAvg and FedProx also take ``fraction`` (clients per round) and ``sampling``:
``"fixed"`` (the default, reproducible from the job's seed) or ``"poisson"`` (a secret
draw from the cryptographic generator, the only one client-level DP amplifies).

A server optimiser (:mod:`islands.hfl.server_opt`, Reddi et al. 2021) turns each round's
aggregate into the next global model, with any strategy; a key left out keeps the
optimiser's default (not with ckks, paillier or chaos, which hide the aggregate)::

    [server_optimizer]
    name = "fedadam"             # fedavgm | fedadam | fedyogi | fedadagrad
    lr = 0.01                    # η, the server learning rate
    beta1 = 0.9                  # the first moment's decay (fedavgm: momentum = 0.9)
    beta2 = 0.99                 # fedadam, fedyogi
    tau = 0.001                  # the adaptivity τ (not fedavgm)

Protections (:mod:`islands.aggregation.protect`) are a list, each with an optional section of
options named after it::

    protect = ["ckks", "chaos"]  # or e.g. ["secagg", "dp"]; default: none

    [dp]                         # client-level differential privacy
    clip = 1.0
    noise_multiplier = 1.0
    noise = "distributed"        # or "local"
    target_epsilon = 8.0         # stop before exceeding it (optional)

    [secagg]
    threshold = 0.6              # t as a fraction of the round's clients, or an int

    [dp-sgd]                     # sample-level DP: every client trains with DP-SGD
    clip = 1.0                   # per-sample gradient bound C
    noise_multiplier = 1.1
    target_epsilon = 8.0

Contribution measurement (:mod:`islands.hfl.contribution`): each client's score and
reward share, by retraining the coalitions (the default up to 8 clients) or valued round
by round from the plain uploads (not with secagg, additive, ckks, paillier or chaos,
which hide them)::

    [contribution]
    methods = ["gtg", "loo"]     # retrain | gtg | exact | or | loo; the first gives the
                                 # shares (left out: retrain up to 8 clients, else these)
    validation = "server"        # or "clients": their own evaluation rows (simulation)
    validation_samples = 1000    # the server's rows, drawn from the test rows
    metric = "loss"              # or "accuracy" (left out: accuracy for retrain, else loss)
    weighting = "fixed"          # or "renormalised" (the papers' coalition models)
    tolerance = 0.005            # gtg: confidence half-width per round
    max_permutations = 200

Every key is checked: an unknown key (a typo) or a value of the wrong kind is an error
naming the section and key. The top-level training keys and each section are the typed
configurations of :mod:`islands.hfl.config` (one default and constraint per setting,
shared with :class:`~islands.hfl.FederatedModel` and the federation file's ``[hfl]``):
``task`` left out is inferred from the data set (``"regression"`` for diabetes, else
``"classification"``), ``concurrency = "all"`` trains every client at once
(``batch_clients``, default ``"auto"``: as one batched computation where it can), and
``[contribution]`` also takes ``seed`` (default: the job's). :func:`run_job` trains the
federation, the centralised baseline (``baseline = true``) or, for a linear regression,
the closed-form ridge solution, and returns an :class:`HflJobResult` (its
``to_json()`` is ``results.json``); :func:`write_outputs` writes ``results.json`` and
the accuracy and τ curves as PNG.
"""

from __future__ import annotations

import builtins
import copy
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.aggregation.config import SECTIONS
from islands.aggregation.protect import Protection
from islands.data import (
    load,
    partition_by_class,
    partition_dirichlet,
    partition_iid,
    partition_shards,
)
from islands.errors import JobError, ValidationError
from islands.hfl.checkpoint import (
    SERVER_FILE,
    check_resume,
    load_checkpoint,
    save_checkpoint,
    shaping_settings,
)
from islands.hfl.config import (
    STRATEGY_KEYS,
    ApflConfig,
    ContributionConfig,
    DataConfig,
    FedAvgConfig,
    HflConfig,
    ModelConfig,
    PartitionConfig,
    ServerOptimizerConfig,
    infer_task,
    strategy_config,
)
from islands.hfl.contribution import Contribution, ContributionReport, check_compatible
from islands.hfl.contribution.report import plot_contribution
from islands.hfl.estimator import (
    EpochRecord,
    FederatedModel,
    client_seed,
    split_local_eval,
)
from islands.hfl.metrics import (
    classification_report,
    dev_avg,
    extra_metrics,
    regression_report,
    resolve_metrics,
)
from islands.hfl.named import is_name
from islands.hfl.plan import TrainingPlan
from islands.hfl.protocol import RoundRecord
from islands.hfl.scaffold import Scaffold
from islands.hfl.server_opt import check_composes
from islands.hfl.strategy import APFL, FedAvg, FedBN, FedProx, Strategy
from islands.reporting import new_figure, write_results
from islands.tracking import Tracker, TrackingConfig, job_tracker
from islands.validation import file_section, read_job, table_value

__all__ = [
    "BaselineResult",
    "HflJobResult",
    "Job",
    "PrivacySpent",
    "RidgeComparison",
    "RoundSeconds",
    "Traffic",
    "Training",
    "can_resume",
    "check_resumable",
    "check_trackers",
    "job_plan",
    "job_settings",
    "load_job",
    "parse_job",
    "protection_settings",
    "read_training",
    "run_job",
    "write_outputs",
]

log = logging.getLogger(__name__)
HISTORY_FILE = "history.ckpt"
# the server cannot see the model under these, so it cannot checkpoint it in the clear
_NO_RESUME = ("ckks", "paillier", "chaos")

Callback = Callable[[RoundRecord, EpochRecord | None], None]

_TOP = {"name", "seed", "epochs", "output", "baseline", "task", "concurrency", "timeout",
        "batch_clients", "eval_fraction", "data", "partition", "model", "strategy", "protect",
        "backend", "ray_address", "contribution", "tracking", "server_optimizer", *SECTIONS}
# the top-level keys that are HflConfig's; each section is its own configuration
_SETTINGS = ("epochs", "seed", "task", "eval_fraction", "concurrency", "timeout", "backend",
             "ray_address", "batch_clients")
_CONTRIBUTION = set(ContributionConfig.model_fields)
_DATA = set(DataConfig.model_fields)
_PARTITION = set(PartitionConfig.model_fields)
_MODEL = set(ModelConfig.model_fields)
_STRATEGY = set(STRATEGY_KEYS)
_TRACKING = set(TrackingConfig.model_fields)
_SERVER_OPTIMIZER = set(ServerOptimizerConfig.model_fields)



@dataclass(frozen=True)
class Job:
    """A parsed, checked job file (see the module docstring for the keys)."""

    name: str
    seed: int
    epochs: int
    output: str
    baseline: bool
    task: str
    concurrency: int | None
    timeout: float
    eval_fraction: float
    data: dict[str, Any]
    partition: dict[str, Any]
    model: dict[str, Any]
    strategy: dict[str, Any]
    source: str = ""
    protection: Protection = field(default_factory=Protection)
    backend: str = "local"
    ray_address: str | None = None
    batch_clients: bool | str = "auto"
    contribution: dict[str, Any] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    tracking: dict[str, Any] | None = None
    server_optimizer: dict[str, Any] | None = None
    training: Training | None = field(default=None, compare=False, repr=False)
    """The training sections, checked and typed once (:func:`read_training`)."""

    @property
    def protect(self) -> list[str]:
        """The protections' names, as the file's ``protect`` lists them."""
        return list(self.protection.names)

    def to_dict(self) -> dict[str, Any]:
        """Return the job as plain values, as the file has them (and ``source``)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "training":
                continue
            if f.name == "protection":
                out["protect"] = self.protect
            elif ((f.name not in ("contribution", "tracking", "server_optimizer")
                   or getattr(self, f.name) is not None)
                  and (f.name != "overrides" or self.overrides)):
                out[f.name] = copy.deepcopy(getattr(self, f.name))
        out.update(self.protection.options())
        return out


def load_job(path: str | Path, overrides: Sequence[str] = ()) -> Job:
    """Read and check a job file, with ``KEY=VALUE`` overrides applied first.

    The overrides (``islands run --set``, :func:`~islands.validation.apply_overrides`) are
    checked with the file, exactly as if it held them, and kept in :attr:`Job.overrides`.

    Raises
    ------
    DataNotFoundError
        If the file does not exist.
    JobError
        If it is not valid TOML or a key is unknown, missing or of the wrong kind.
    """
    job, applied = read_job(path, overrides, lambda raw, source: parse_job(raw, source=source))
    return replace(job, overrides=applied)


def parse_job(raw: Mapping[str, Any], *, source: str = "<job>") -> Job:
    """Check a job given as a mapping (the parsed TOML) and return it as a :class:`Job`."""
    where = f"job file {source}"
    unknown = sorted(set(raw) - _TOP)
    if unknown:
        raise JobError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(_TOP)}")
    data = DataConfig.from_table(file_section(raw, "data", _DATA, where), f"{where} [data]")
    PartitionConfig.from_table(file_section(raw, "partition", _PARTITION, where),
                               f"{where} [partition]")
    if raw.get("ray_address") is not None and raw.get("backend", "local") != "ray":
        raise JobError(f"{where}: 'ray_address' is only used with backend = \"ray\"; got "
                       f"backend = {raw.get('backend', 'local')!r}")
    training, settings = read_training(raw, where, dataset=data.name)
    task, protection = training.task, training.protection
    contribution = None
    if "contribution" in raw:
        contribution = _contribution_section(raw, where, protection, task)
        if training.strategy_class().control_variates:
            raise JobError(f"{where} [contribution]: the {training.strategy.name!r} strategy's "
                           "uploads carry control variates, not models to value; remove "
                           "[contribution] or choose another strategy")
    server_optimizer = (None if training.server_optimizer is None
                        else dict(raw["server_optimizer"]))
    tracking = None
    if "tracking" in raw:
        tracking = dict(TrackingConfig.from_table(
            file_section(raw, "tracking", _TRACKING, where), f"{where} [tracking]"))
    job = Job(
        name=table_value(raw, "name", (str,), where, Path(source).stem),
        seed=settings.seed, epochs=settings.epochs,
        output=table_value(raw, "output", (str,), where, f"runs/{Path(source).stem}"),
        baseline=table_value(raw, "baseline", (bool,), where, True),
        task=task, concurrency=settings.concurrency, timeout=settings.timeout,
        eval_fraction=settings.eval_fraction,
        data=dict(raw["data"]), partition=dict(raw["partition"]), model=dict(raw["model"]),
        strategy=dict(raw["strategy"]), source=source, protection=protection,
        backend=settings.backend, ray_address=settings.ray_address,
        batch_clients=settings.batch_clients,
        contribution=contribution, tracking=tracking, server_optimizer=server_optimizer,
        training=training,
    )
    return job


@dataclass(frozen=True)
class Training:
    """The sections of a job file (or a federation file's ``[hfl]``) that shape training.

    Checked once by :func:`read_training` and kept typed: the strategy and the plan are
    built from these, never from the file's tables again.
    """

    model: ModelConfig
    strategy: FedAvgConfig | ApflConfig
    protection: Protection
    server_optimizer: ServerOptimizerConfig | None
    seed: int
    task: str

    def build_strategy(self, *, protected: bool = True) -> Strategy:
        """Build the strategy with its parameters (defaults as each class's).

        ``protected``: with the protections' aggregator (False: the plain mean, a dry run
        of the strategy's own checks).
        """
        s: dict[str, Any] = self.strategy.kwargs()
        if protected and self.protection.names:
            s["aggregator"] = self.protection.aggregator()
        if self.server_optimizer is not None:
            s["server_optimizer"] = self.server_optimizer.optimizer()
        cls = self.strategy_class()
        if issubclass(cls, FedAvg):  # the FedAvg family draws "fixed" cohorts from the seed
            return cls(**s, seed=self.seed)
        return cls(**s)

    def strategy_class(self) -> type[APFL] | type[FedAvg]:
        """Return the class ``[strategy] name`` names (its class attributes, unbuilt)."""
        return APFL if self.strategy.name == "apfl" else _FEDAVG_FAMILY[self.strategy.name]

    def plan(self, input_shape: tuple[int, ...], n_outputs: int, *, where: str,
             input_divisor: float = 1.0, folder: str | None = None) -> TrainingPlan:
        """Build the :class:`~islands.hfl.plan.TrainingPlan`, each piece once.

        The strategy (with its protections and server optimiser), then the model it
        trains. The loss is named (``loss_name``), not bound: a party that trains binds
        it (``dataclasses.replace(plan, loss=...)``).

        Raises
        ------
        JobError
            A factory that cannot be imported or built, or a model that does not fit the
            data.
        """
        strategy = self.build_strategy()
        built = self.model.make_model(input_shape, n_outputs, task=self.task, seed=self.seed,
                                      where=where, input_divisor=input_divisor,
                                      folder=folder,
                                      local_layers=getattr(strategy, "local_layers", None))
        return TrainingPlan(model=built, strategy=strategy, task=self.task, seed=self.seed,
                            sample_dp=self.protection.sample_dp(), loss_name=self.model.loss)


def read_training(raw: Mapping[str, Any], where: str, *, dataset: str | None
                  ) -> tuple[Training, HflConfig]:
    """Check the training sections of a job or federation file, once.

    ``[model]``, ``[strategy]``, the run's settings (seed, epochs, task, ...), ``protect``
    with its sections and ``[server_optimizer]``; then a dry run of the strategy's own
    checks. ``dataset`` (a job's ``[data] name``, None for a federation) infers the task
    where the file does not give it.

    Raises
    ------
    JobError
        Naming ``where``, the section and the key.
    """
    model = ModelConfig.from_table(file_section(raw, "model", _MODEL, where), f"{where} [model]")
    strategy = strategy_config(file_section(raw, "strategy", _STRATEGY, where),
                               f"{where} [strategy]")
    top = {k: raw[k] for k in _SETTINGS if k in raw}
    settings = HflConfig.from_table({**top, "model": model, "strategy": strategy}, where)
    task = infer_task(settings.task, dataset)
    try:  # the named metrics against the task now; a function's name is imported by prepare
        resolve_metrics([m for m in model.metrics if not is_name(m)], task,
                        owner=f"{where} [model]", param="metrics")
    except ValidationError as exc:
        raise JobError(f"{where} [model]: {exc}") from None
    protection = Protection.from_table(raw, where)  # every value checked before anything runs
    server_optimizer = None
    if "server_optimizer" in raw:
        server_optimizer = _server_optimizer_section(raw, where, protection)
    training = Training(model=model, strategy=strategy, protection=protection,
                        server_optimizer=server_optimizer, seed=settings.seed, task=task)
    try:  # a dry run: the strategy's own checks, before anything runs
        training.build_strategy(protected=False)
    except JobError as exc:
        raise JobError(f"{where} {exc}") from exc
    except ValidationError as exc:
        section = ("[server_optimizer]" if "'server_optimizer' parameter" in str(exc)
                   else "[strategy]")
        raise JobError(f"{where} {section}: {exc}") from exc
    return training, settings


def _server_optimizer_section(raw: Mapping[str, Any], where: str,
                              protection: Protection) -> ServerOptimizerConfig:
    """Check ``[server_optimizer]``: its values on the optimiser, and its protections."""
    sec = f"{where} [server_optimizer]"
    table = file_section(raw, "server_optimizer", _SERVER_OPTIMIZER, where)
    try:
        config = ServerOptimizerConfig.from_table(table, sec)
        check_composes(protection.aggregator(), config.optimizer(),
                       f"protect = {list(protection.names)}")
    except JobError:
        raise
    except ValidationError as exc:
        raise JobError(f"{sec}: {exc}") from exc
    return config


def _contribution_section(raw: Mapping[str, Any], where: str, protection: Protection,
                          task: str) -> dict[str, Any]:
    """Check ``[contribution]``; every value is tried on a Contribution now."""
    sec = f"{where} [contribution]"
    config = ContributionConfig.from_table(file_section(raw, "contribution", _CONTRIBUTION, where),
                                           sec)
    # the file's keys, with the defaults results.json has always shown (methods None:
    # decided for the run, FederatedModel's Contribution.resolve)
    methods = None if config.methods is None else list(config.methods)
    table = {**raw["contribution"], "methods": methods,
             "validation": config.validation, "validation_samples": config.validation_samples,
             "weighting": config.weighting}
    if table.get("metric") == "accuracy" and task != "classification":
        raise JobError(f"{sec}: 'metric' must be 'loss' for a regression job; got 'accuracy'")
    if table["validation"] == "clients" and raw.get("eval_fraction", 0.1) == 0:
        raise JobError(f"{sec}: validation = \"clients\" needs eval_fraction > 0 (the "
                       "clients' own evaluation rows)")
    try:
        _contribution_config(table, (np.zeros((1, 1)), np.zeros(1)))
        if methods is not None and any(m != "retrain" for m in methods):
            check_compatible(protection.aggregator())
    except ValidationError as exc:
        raise JobError(f"{sec}: {exc}") from exc
    return table


def _contribution_config(table: Mapping[str, Any], validation: Any) -> Any:
    """Build the :class:`Contribution` of a checked ``[contribution]`` table."""
    config = ContributionConfig.model_validate(dict(table))
    return Contribution(validation, **config.settings())


# --------------------------------------------------------------------------- building
@dataclass
class Prepared:
    """A job's data, divided between clients, and the plan built from the job (once)."""

    parts: list[tuple[NDArray[Any], NDArray[Any]]]
    test: tuple[NDArray[Any], NDArray[Any]]
    plan: TrainingPlan
    n_classes: int
    dataset: str
    summary: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    """The extra test metrics by name (:func:`~islands.hfl.metrics.resolve_metrics`)."""

    @property
    def spec(self) -> Any:
        """The model (the plan's)."""
        return self.plan.model

    @property
    def loss(self) -> Any:
        """The user's loss, checked (a :class:`~islands.hfl.torch.loss.UserLoss`), or None."""
        return self.plan.loss


def job_plan(job: Job, input_shape: tuple[int, ...], n_outputs: int, *, where: str,
             input_divisor: float = 1.0, folder: str | None = None) -> TrainingPlan:
    """Build the job's :class:`~islands.hfl.plan.TrainingPlan` (:meth:`Training.plan`)."""
    return _training(job).plan(input_shape, n_outputs, where=where,
                               input_divisor=input_divisor, folder=folder)


def _training(job: Job) -> Training:
    if job.training is None:  # parse_job makes every Job with its training
        raise JobError(f"job {job.name!r} was not made by parse_job: no checked training")
    return job.training


def _subset(n: int, size: int | None, rng: np.random.Generator) -> NDArray[np.intp]:
    if size is None or size >= n:
        return np.arange(n)
    return np.sort(rng.choice(n, size=size, replace=False))


def prepare(job: Job) -> Prepared:
    """Load the job's data, split train/test, divide the training rows between clients."""
    rng = np.random.default_rng(job.seed)
    d = DataConfig.model_validate(job.data)
    name = d.name
    if name == "fashion_mnist":
        kwargs = {"path": d.path} if d.path else {}
        train = load("fashion_mnist", split="train", normalize=False, **kwargs)
        test = load("fashion_mnist", split="test", normalize=False, **kwargs)
        tr = _subset(train.n_samples, d.train_samples, rng)
        te = _subset(test.n_samples, d.test_samples, rng)
        # the pixels stay uint8 (a quarter of float32's memory) and the model divides them
        # by 255: bit for bit the rows load_fashion_mnist normalises (ModelSpec.input_divisor)
        X, y = train.X[tr], train.y[tr]
        X_test, y_test = test.X[te], test.y[te]
        divisor = 255.0
        image: tuple[int, ...] | None = (1, 28, 28)
    else:
        full = load(name)
        order = rng.permutation(full.n_samples)
        n_test = max(1, round(full.n_samples * d.test_fraction))
        te, tr = order[:n_test], order[n_test:]
        tr = tr[_subset(len(tr), d.train_samples, rng)]
        te = te[_subset(len(te), d.test_samples, rng)]
        X = full.X[tr].reshape(len(tr), -1).astype(np.float32)
        X_test = full.X[te].reshape(len(te), -1).astype(np.float32)
        y, y_test = full.y[tr], full.y[te]
        divisor = 1.0
        image = (1, *full.image_shape) if full.image_shape else None
    model = _training(job).model
    # standardised rows are float32, normalised as the loader does; a user's module takes
    # the pixels in [0, 1] too (as load_fashion_mnist normalises them)
    if (d.standardize or model.factory is not None) and divisor != 1.0:
        X = (X / divisor).astype(np.float32)
        X_test = (X_test / divisor).astype(np.float32)
        divisor = 1.0
    if d.standardize:
        # statistics of the pooled training rows: in a deployment these are the sums
        # Σx, Σx², n that a secure sum (islands.securesum) gives without pooling rows
        mu, sd = X.mean(axis=0), X.std(axis=0)  # float32, as X
        sd[sd == 0] = 1.0
        X, X_test = (X - mu) / sd, (X_test - mu) / sd
    regression = job.task == "regression"
    if regression:
        y = y.astype(np.float32)  # type: ignore[assignment]
        y_test = y_test.astype(np.float32)  # type: ignore[assignment]
        n_classes = 0
    else:
        n_classes = int(max(y.max(), y_test.max())) + 1

    p = job.partition
    part = PartitionConfig.model_validate(p)
    if part.kind == "classes":
        if regression:
            raise JobError("[partition] kind 'classes' needs class labels (a classification "
                           "data set)")
        groups = p["groups"] if isinstance(p["groups"], str) else [list(g) for g in p["groups"]]
        try:
            idx = partition_by_class(y, groups)
        except ValidationError as exc:
            raise JobError(f"[partition] groups: {exc}") from exc
        if p.get("clients") is not None and p["clients"] != len(idx):
            raise JobError(f"[partition] clients = {p['clients']} but groups names "
                           f"{len(idx)} groups")
    elif regression and p["kind"] != "iid":
        raise JobError(f"[partition] kind {p['kind']!r} needs class labels")
    else:
        try:
            if p["kind"] == "iid":
                idx = partition_iid(len(y), p["clients"], random_state=job.seed)
            elif p["kind"] == "dirichlet":
                idx = partition_dirichlet(y, p["clients"], alpha=part.alpha,
                                          random_state=job.seed)
            else:
                idx = partition_shards(y, p["clients"], shards_per_party=part.shards_per_client,
                                       random_state=job.seed)
        except ValidationError as exc:
            raise _partition_error(job, len(y), exc) from exc
    for k, rows in enumerate(idx):
        if len(rows) == 0:
            raise JobError(f"[partition] client {k + 1} gets no rows; change the partition")

    kind = model.kind
    if kind == "cnn" and image is None:
        raise JobError(f"[model] kind 'cnn' needs an image data set; {name} is tabular")
    # a cnn and a user's module see images as (C, H, W); the built-in mlp and linear, rows
    input_shape: tuple[int, ...] = (image if image is not None and kind in ("cnn", None)
                                    else (int(X.shape[1]),))
    if input_shape != tuple(X.shape[1:]):
        X, X_test = X.reshape(len(X), *input_shape), X_test.reshape(len(X_test), *input_shape)
    folder = str(Path(job.source).parent) if job.source and Path(job.source).is_file() else None
    plan = job_plan(job, input_shape, 1 if regression else n_classes,
                    where=f"job file {job.source}", input_divisor=divisor, folder=folder)
    loss, metrics = _loss_and_metrics(job, model, plan.model, folder)
    plan = replace(plan, loss=loss)
    parts = [(X[rows], y[rows]) for rows in idx]
    summary = {"train_rows": len(y), "test_rows": len(y_test),
               "client_rows": [len(r) for r in idx]}
    if not regression:
        summary["client_classes"] = [sorted(np.unique(y[r]).tolist()) for r in idx]
    return Prepared(parts=parts, test=(X_test, y_test), plan=plan, n_classes=n_classes,
                    dataset=name, summary=summary, metrics=metrics)


def _loss_and_metrics(job: Job, model: ModelConfig, spec: Any, folder: str | None
                      ) -> tuple[Any, dict[str, Any]]:
    """Import and check ``[model] loss`` (on ``spec``) and ``metrics``, before any training."""
    from islands.hfl.torch.loss import bind_loss  # torch

    where = f"job file {job.source} [model]"
    try:
        loss = bind_loss(model.loss, spec, job.task, owner=where, folder=folder,
                         per_sample=job.protection.sample_dp() is not None)
        metrics = resolve_metrics(model.metrics, job.task, owner=where, param="metrics",
                                  folder=folder)
    except ValidationError as exc:
        raise JobError(f"{where}: {exc}") from None
    return loss, metrics


# the partition functions' parameters, by the [partition] key that gives them
_PARTITION_KEYS = {"n_parties": "clients", "alpha": "alpha",
                   "shards_per_party": "shards_per_client"}


def _partition_error(job: Job, n_rows: int, exc: ValidationError) -> JobError:
    """Name the [partition] key behind a partition function's error (its parameter)."""
    text = str(exc)
    key = next((k for param, k in _PARTITION_KEYS.items() if f"'{param}'" in text), None)
    given = f" {key} = {job.partition[key]!r}" if key in job.partition else ""
    return JobError(f"job file {job.source} [partition]{given} (kind {job.partition['kind']!r}, "
                    f"{n_rows} training rows): {text}")


def build_strategy(job: Job) -> Strategy:
    """Build the strategy the job names, with its parameters (defaults as each class's)."""
    return _training(job).build_strategy()


_FEDAVG_FAMILY: dict[str, type[FedAvg]] = {cls.strategy_name: cls
                                            for cls in (FedAvg, FedProx, FedBN, Scaffold)}
"""The strategies a ``[strategy] name`` builds that take FedAvg's parameters."""


# --------------------------------------------------------------------------- running
def _union_train(job: Job, parts: list[tuple[NDArray[Any], NDArray[Any]]]
                 ) -> tuple[NDArray[Any], NDArray[Any]]:
    """Return the rows the federation trains on (each client's part minus its local eval rows)."""
    xs, ys = [], []
    for k, (X, y) in enumerate(parts):
        tr, _ = split_local_eval(len(y), job.eval_fraction, client_seed(job.seed, k))
        xs.append(X[tr])
        ys.append(y[tr])
    return np.concatenate(xs), np.concatenate(ys)


def _baseline_batch(strategy: Strategy, n_clients: int, n_rows: int) -> int:
    if isinstance(strategy, APFL):
        return strategy.batch_size
    b = getattr(strategy, "batch_size", None)
    return n_rows if b is None else min(n_rows, b * n_clients)


@dataclass(frozen=True)
class Traffic:
    """Bytes on the wire: sent and received per party, and the total."""

    sent: dict[str, int]
    received: dict[str, int]
    total: int


@dataclass(frozen=True)
class RoundSeconds:
    """Wall time of one round: the mean and the longest."""

    mean: float
    max: float


@dataclass(frozen=True)
class PrivacySpent:
    """An (ε, δ) budget spent by the run."""

    epsilon: float
    delta: float


@dataclass(frozen=True)
class RidgeComparison:
    """The closed-form ridge solution and the federated model's distance to it."""

    coef: list[float]
    intercept: float
    federated_coef: list[float]
    federated_intercept: float
    max_abs_difference: float
    relative_difference: float
    test: dict[str, Any]
    lam: float

    def to_json(self) -> dict[str, Any]:
        """Return plain values, ``lam`` under the key ``lambda``."""
        out = asdict(self)
        out["lambda"] = out.pop("lam")
        return out


@dataclass(frozen=True)
class BaselineResult:
    """Centralised training with the federation's model, optimiser and seed.

    ``metrics`` are the final model's test metrics; ``history`` one ``{"epoch", "test"}``
    per epoch; ``closed_form`` only for a linear regression.
    """

    metrics: dict[str, Any]
    batch_size: int
    history: list[dict[str, Any]]
    losses: list[float]
    seconds: float
    closed_form: RidgeComparison | None = None
    kind: str = "centralised"

    def to_json(self) -> dict[str, Any]:
        """Return the ``baseline`` entry of ``results.json`` (the metrics first)."""
        out: dict[str, Any] = {**self.metrics, "kind": self.kind, "batch_size": self.batch_size,
                               "history": self.history, "losses": self.losses,
                               "seconds": self.seconds}
        if self.closed_form is not None:
            out["closed_form"] = self.closed_form.to_json()
        return out


@dataclass(frozen=True)
class HflJobResult:
    """What :func:`run_job` returns; :meth:`to_json` is ``results.json``.

    ``metrics`` are the final global model's test metrics (``accuracy``, ``precision``,
    ``recall``, ``f1``, ... for a classification, ``mse``, ``rmse``, ``mae``, ``r2`` for a
    regression); ``workers`` the threads or Ray workers that trained; ``resumed_from`` the
    round a resumed run continued after (0: afresh). After a resume, ``bytes``,
    ``federated_seconds`` and ``wall_time_s`` count this process's part of the run only.
    ``contribution`` is the contribution report (its plain values are what ``islands
    contribution`` reads back); ``dev_avg`` needs a classification with a baseline.
    Under client-level DP, ``privacy`` (and ``epsilon``, per round) is the ε against
    whoever sees the released models, amplified when the cohort is a secret Poisson
    sample, and ``privacy_against_server`` (``epsilon_against_server``) the ε against the
    server, which draws the cohort: every round a client was asked to train in counts
    with q = 1, the largest over the clients. results.json has these two keys only
    under client-level DP.
    """

    job: Job
    data: dict[str, Any]
    strategy: str
    workers: int
    metrics: dict[str, Any]
    aggregations: int
    rounds: int
    steps_per_epoch: int
    batch_sizes: dict[str, int]
    dropouts: list[dict[str, Any]]
    client_failures: dict[str, str]
    bytes: Traffic
    seconds_per_round: RoundSeconds
    history: list[dict[str, Any]]
    resumed_from: int
    privacy: PrivacySpent | None
    sample_privacy: PrivacySpent | None
    stopped: str | None
    epsilon: list[float | None]
    sample_epsilon: list[float | None]
    tau: list[int]
    local_accuracy: list[float | None]
    federated_seconds: float
    wall_time_s: float
    contribution: ContributionReport | None = None
    baseline: BaselineResult | None = None
    dev_avg: float | None = None
    tracking: dict[str, Any] | None = None
    privacy_against_server: PrivacySpent | None = None
    epsilon_against_server: list[float | None] = field(default_factory=list)
    model_files: dict[str, builtins.bytes] = field(default_factory=dict, repr=False)
    """The trained model by file name (``model.pt`` and ``model.onnx``; under FedBN each
    client's state dict, ``model.<client>.pt``); not in results.json."""
    onnx_skipped: str | None = None
    """Why ``model.onnx`` was not written (results.json's ``onnx_skipped``), or None."""

    @property
    def task(self) -> str:
        """``"classification"`` or ``"regression"``."""
        return self.job.task

    def to_json(self) -> dict[str, Any]:
        """Return ``results.json``: the keys and order it has always had."""
        out: dict[str, Any] = {
            "job": self.job.to_dict(), "data": self.data, "strategy": self.strategy,
            "backend": self.job.backend, "ray_address": self.job.ray_address,
            "workers": self.workers, **self.metrics, "aggregations": self.aggregations,
            "rounds": self.rounds, "steps_per_epoch": self.steps_per_epoch,
            "batch_sizes": self.batch_sizes, "dropouts": self.dropouts,
            "client_failures": self.client_failures, "bytes": asdict(self.bytes),
            "seconds_per_round": asdict(self.seconds_per_round), "history": self.history,
            "resumed_from": self.resumed_from, "protect": list(self.job.protect),
            "privacy": None if self.privacy is None else asdict(self.privacy),
            **({} if self.privacy_against_server is None else
               {"privacy_against_server": asdict(self.privacy_against_server)}),
            "sample_privacy": (None if self.sample_privacy is None
                               else asdict(self.sample_privacy)),
            "stopped": self.stopped, "epsilon": self.epsilon,
            **({} if self.privacy_against_server is None else
               {"epsilon_against_server": self.epsilon_against_server}),
            "sample_epsilon": self.sample_epsilon, "tau": self.tau,
            "local_accuracy": self.local_accuracy, "federated_seconds": self.federated_seconds}
        if self.contribution is not None:
            out["contribution"] = self.contribution.to_dict()
        if self.baseline is not None:
            out["baseline"] = self.baseline.to_json()
        if self.dev_avg is not None:
            out["dev_avg"] = self.dev_avg
        if self.tracking is not None:
            out["tracking"] = self.tracking
        if self.onnx_skipped is not None:
            out["onnx_skipped"] = self.onnx_skipped
        out["wall_time_s"] = self.wall_time_s
        return out


def run_job(job: Job, *, resume: bool = False, output: str | Path | None = None,
            callback: Callback | None = None,
            baseline_callback: Callable[[int, int], None] | None = None) -> HflJobResult:
    """Run a job: the federation, then its baseline; return its results.

    Parameters
    ----------
    job
        From :func:`load_job`.
    resume
        Continue the run checkpointed in ``<output>/checkpoints`` (starts afresh if there
        is none): the results then cover the whole run, the epochs before the
        interruption included (their test metrics are kept in ``history.ckpt`` there).
    output
        Overrides the job's ``output`` folder.
    callback
        Passed to :class:`FederatedModel` (progress per round).
    baseline_callback
        Called as ``(epoch, epochs)`` after each centralised epoch.

    Returns
    -------
    HflJobResult
        Its :meth:`~HflJobResult.to_json` is ``results.json``.

    Raises
    ------
    ImportError
        When ``[tracking]`` asks for a tracker that is not installed (before anything runs).
    TrackingError
        When a tracker cannot start (before anything runs).
    """
    t0 = time.perf_counter()
    out = Path(output if output is not None else job.output)
    tracker = job_tracker(job.tracking, out, job.name, job.overrides,
                          job.to_dict())
    try:
        result = _run_job(job, out, resume, callback, baseline_callback, tracker, t0)
    except BaseException:
        if tracker is not None:
            tracker.close(failed=True)
        raise
    if tracker is not None:
        tracker.log_summary(_summary(result))
        tracker.close()
        result = replace(result, tracking=tracker.info())
    return result


def _summary(result: HflJobResult) -> dict[str, Any]:
    """Return the final model's summary for the trackers: what results.json shows, no weights."""
    out: dict[str, Any] = {k: v for k, v in result.metrics.items()
                           if not isinstance(v, list | dict)}
    out.update({"model": result.data["model"], "parameters": result.data["parameters"],
                "rounds": result.rounds, "aggregations": result.aggregations,
                "bytes": result.bytes.total, "federated_seconds": result.federated_seconds})
    if result.privacy is not None:
        out["epsilon"], out["delta"] = result.privacy.epsilon, result.privacy.delta
    if result.privacy_against_server is not None:
        out["epsilon_against_server"] = result.privacy_against_server.epsilon
    if result.sample_privacy is not None:
        out["sample_epsilon"] = result.sample_privacy.epsilon
    if result.baseline is not None:
        out.update({f"baseline_{k}": v for k, v in result.baseline.metrics.items()
                    if not isinstance(v, list | dict)})
    if result.dev_avg is not None:
        out["dev_avg"] = result.dev_avg
    if result.stopped is not None:
        out["stopped"] = result.stopped
    return out


def _run_job(job: Job, out: Path, resume: bool, callback: Callback | None,
             baseline_callback: Callable[[int, int], None] | None, tracker: Tracker | None,
             t0: float) -> HflJobResult:
    """Run the job (:func:`run_job`), logging each round to ``tracker``."""
    prep = prepare(job)
    checkpoints = out / "checkpoints"
    earlier, resumed_from = _earlier_history(checkpoints, resume)
    history = list(earlier)
    offset = float(earlier[-1]["seconds"]) if earlier else 0.0

    def on_round(record: RoundRecord, epoch: EpochRecord | None) -> None:
        if callback is not None:
            callback(record, epoch)
        if epoch is not None:
            # kept beside the server's checkpoint, which is written after this: a resumed
            # run reports every epoch
            history.append({**asdict(epoch), "seconds": offset + epoch.seconds})
            save_checkpoint(checkpoints / HISTORY_FILE, {"history": history})

    plan = prep.plan
    strategy = plan.strategy
    contribution = None
    if job.contribution is not None:
        c = job.contribution
        if c["validation"] == "clients":
            contribution = _contribution_config(c, "clients")
        else:
            # the server's own labelled rows, drawn from the test rows: never trained on,
            # and the test metrics below stay on all the test rows
            X_all, y_all = prep.test
            rows = np.random.default_rng([job.seed, 7]).permutation(len(y_all))
            if c["validation_samples"] > len(rows):
                raise JobError(f"[contribution] validation_samples = "
                               f"{c['validation_samples']}, but the job has only {len(rows)} "
                               "test rows to draw the server's validation rows from")
            rows = np.sort(rows[: c["validation_samples"]])
            contribution = _contribution_config(c, (X_all[rows], y_all[rows]))
    # the plan's pieces as built: the estimator binds nothing again
    fl = FederatedModel(plan.model, strategy, epochs=job.epochs, task=plan.task,  # type: ignore[arg-type]
                        eval_fraction=job.eval_fraction, random_state=plan.seed,
                        concurrency=job.concurrency, timeout=job.timeout,
                        checkpoint=checkpoints, resume=resume, callback=on_round,
                        sample_dp=plan.sample_dp,
                        backend=job.backend,  # type: ignore[arg-type]
                        ray_address=job.ray_address, batch_clients=job.batch_clients,  # type: ignore[arg-type]
                        contribution=contribution,
                        tracking=tracker, settings=job_settings(job), loss=plan.loss,
                        extra_metrics=prep.metrics)
    fl.fit(prep.parts, test=prep.test)
    onnx, onnx_skipped = _onnx_bytes(fl)
    X_test, y_test = prep.test
    final = fl.metrics(X_test, y_test)
    totals_sent = fl.transcript_.totals("sender")
    totals_recv = fl.transcript_.totals("receiver")
    per_round = [r.seconds for r in fl.rounds_]
    baseline = None
    gap = None
    if job.baseline:
        baseline = _baseline(job, prep, strategy, fl, baseline_callback)
        if job.task == "classification":
            gap = dev_avg(np.asarray(final["per_class_accuracy"]),
                          np.asarray(baseline.metrics["per_class_accuracy"]))
    return HflJobResult(
        job=job,
        data={"dataset": prep.dataset, **prep.summary, "model": prep.spec.describe(),
              "parameters": prep.spec.n_params(), **_model_shape(prep.spec)},
        strategy=repr(strategy), workers=fl.workers_, metrics=final,
        aggregations=fl.aggregations_, rounds=len(fl.rounds_),
        steps_per_epoch=fl.steps_per_epoch_, batch_sizes=fl.batch_sizes_,
        dropouts=[asdict(d) for d in fl.dropouts_],
        client_failures={k: repr(v) for k, v in fl.client_failures_.items()},
        bytes=Traffic(sent={k: v.nbytes for k, v in totals_sent.items()},
                      received={k: v.nbytes for k, v in totals_recv.items()},
                      total=fl.transcript_.total_bytes),
        seconds_per_round=RoundSeconds(
            mean=float(np.mean(per_round)) if per_round else 0.0,
            max=float(np.max(per_round)) if per_round else 0.0),
        history=history, resumed_from=resumed_from,
        privacy=None if fl.privacy_ is None else PrivacySpent(*fl.privacy_),
        sample_privacy=(None if fl.sample_privacy_ is None
                        else PrivacySpent(*fl.sample_privacy_)),
        privacy_against_server=(None if fl.privacy_against_server_ is None
                                else PrivacySpent(*fl.privacy_against_server_)),
        epsilon_against_server=[r.epsilon_against_server for r in fl.rounds_],
        stopped=fl.stopped_,
        epsilon=[r.epsilon for r in fl.rounds_],
        sample_epsilon=[r.sample_epsilon for r in fl.rounds_],
        tau=[r.tau for r in fl.rounds_],
        local_accuracy=[r.accuracy for r in fl.rounds_],
        federated_seconds=fl.wall_time_,
        contribution=fl.contribution_,
        model_files=_model_files(fl, onnx), onnx_skipped=onnx_skipped,
        baseline=baseline, dev_avg=gap, wall_time_s=time.perf_counter() - t0)


def check_trackers(job: Job) -> None:
    """Raise ImportError naming the extra when ``[tracking]`` asks for a missing tracker."""
    if job.tracking is not None:
        TrackingConfig.model_validate(job.tracking).check_installed()


def can_resume(job: Job) -> bool:
    """Whether ``run_job(job, resume=True)`` can continue an interrupted run of ``job``."""
    return not set(job.protect) & set(_NO_RESUME)


def protection_settings(protection: Protection) -> dict[str, Any]:
    """Return ``protect`` and every protection's settings (defaults filled in), by section.

    A protection without its section has its defaults: ``[dp] clip = 1.0`` and no
    ``[dp]`` are the same settings.
    """
    out: dict[str, Any] = {"protect": list(protection.names)}
    for name in protection.names:
        config = protection.settings.get(name) or SECTIONS[name].model_validate({})
        out.update({f"{name}.{k}": v for k, v in config.model_dump(mode="json").items()})
    return out


def job_settings(job: Job) -> dict[str, Any]:
    """Return the job's settings that shape the model beyond :class:`FederatedModel`'s own.

    Its ``[data]`` (but ``path``: where the files are, not what they hold; the rows'
    digests catch other files) and ``[partition]``, with their defaults filled in, and its
    protections (:func:`protection_settings`); :func:`~islands.hfl.checkpoint.shaping_settings`
    adds the seed, task, model, strategy and the rows. Recorded in every checkpoint.
    """
    data = DataConfig.model_validate(job.data).model_dump(mode="json", exclude={"path"})
    part = PartitionConfig.model_validate(job.partition).model_dump(
        mode="json", exclude={"min_samples"})
    return {**{f"data.{k}": v for k, v in data.items()},
            **{f"partition.{k}": v for k, v in part.items()}, **protection_settings(job.protection)}


def check_resumable(job: Job, output: str | Path) -> bool:
    """Check, before any work, that ``run_job(job, resume=True)`` can continue ``output``.

    Returns
    -------
    bool
        Whether ``output`` holds a server checkpoint to continue (False: the run starts
        afresh).

    Raises
    ------
    JobError
        If the checkpoints cannot be continued: the job's protections hide the model from
        the server, a checkpoint is damaged (naming the file and client), it was made
        under other settings (naming each, the checkpoint's value → the job's), or it has
        trained more epochs than the job's ``epochs``. The model's size and the rows are
        checked once the data is loaded, before any training.
    """
    folder = Path(output) / "checkpoints"
    if not (folder / SERVER_FILE).is_file():
        return False
    if not can_resume(job):
        raise JobError(f"protect = {job.protect} keeps the model hidden from the server, so "
                       f"the run in {output} cannot be resumed: start it afresh")
    settings = shaping_settings(seed=job.seed, task=job.task, eval_fraction=job.eval_fraction,
                                strategy=build_strategy(job),
                                sample_dp=job.protection.sample_dp(),
                                loss=_training(job).model.loss,
                                extra=job_settings(job))
    try:
        check_resume(folder, settings, epochs=job.epochs, partial=True)
    except ValidationError as exc:
        raise JobError(str(exc)) from None
    return True


def _earlier_history(checkpoints: Path, resume: bool) -> tuple[list[dict[str, Any]], int]:
    """Return the epochs a resumed run already has and the round it resumes after (0: afresh)."""
    server_file = checkpoints / SERVER_FILE
    if not (resume and server_file.is_file()):
        # a fresh run: an old history must not be mistaken for this run's
        (checkpoints / HISTORY_FILE).unlink(missing_ok=True)
        return [], 0
    saved = load_checkpoint(server_file)
    done = int(saved["epoch"])
    kept: list[dict[str, Any]] = []
    if (checkpoints / HISTORY_FILE).is_file():
        kept = [dict(h) for h in load_checkpoint(checkpoints / HISTORY_FILE)["history"]
                if int(h["epoch"]) <= done]
    if [h["epoch"] for h in kept] != list(range(1, done + 1)):
        log.warning("the test metrics of some of the %d epochs before the interruption were "
                    "lost with it; results.json has those of epochs %s", done,
                    [h["epoch"] for h in kept])
    return kept, int(saved["round"])


def _baseline(job: Job, prep: Prepared, strategy: Strategy, fl: FederatedModel,
              progress: Callable[[int, int], None] | None) -> BaselineResult:
    """Centralised training with the same model, optimiser and seed (or ridge's closed form)."""
    from islands.hfl.torch.training import Trainer, train_centralised

    X, y = _union_train(job, prep.parts)
    X_test, y_test = prep.test
    cfg = strategy.local_config(1)
    batch = _baseline_batch(strategy, len(prep.parts), len(y))
    history: list[dict[str, Any]] = []
    scorer = Trainer(prep.spec, X_test, y_test, task=job.task)  # type: ignore[arg-type]

    def report(pred: NDArray[Any]) -> dict[str, Any]:
        metrics = (classification_report(y_test, pred, prep.n_classes).to_dict()
                   if job.task == "classification" else regression_report(y_test, pred).to_dict())
        return {**metrics, **extra_metrics(prep.metrics, y_test, pred)}

    def each_epoch(index: int, params: NDArray[np.float32]) -> None:
        epoch = index + 1  # train_centralised counts epochs from 0
        history.append({"epoch": epoch, "test": report(scorer.predict(params, X_test))})
        if progress is not None:
            progress(epoch, job.epochs)

    t0 = time.perf_counter()
    params, losses = train_centralised(
        prep.spec, X, y, epochs=job.epochs, batch_size=batch, lr=cfg.lr, momentum=cfg.momentum,
        weight_decay=cfg.weight_decay, task=job.task, seed=job.seed,  # type: ignore[arg-type]
        init_seed=job.seed, callback=each_epoch, loss=prep.loss)
    metrics = report(scorer.predict(params, X_test))
    seconds = time.perf_counter() - t0
    closed = None
    if job.task == "regression" and job.model["kind"] == "linear":
        closed = _ridge_closed_form(X, y, X_test, y_test, cfg.weight_decay, fl.params_)
    return BaselineResult(metrics=metrics, batch_size=batch, history=history, losses=losses,
                          seconds=seconds, closed_form=closed)


def _ridge_closed_form(X: NDArray[Any], y: NDArray[Any], X_test: NDArray[Any],
                       y_test: NDArray[Any], weight_decay: float,
                       federated: NDArray[np.float32]) -> RidgeComparison:
    """Ridge with the bias penalised too, as the tutorial's objective (§4).

    min (1/n)·‖y − Xw − b‖² + λ(‖w‖² + b²); SGD's weight decay is the gradient of
    (wd/2)·‖θ‖², so λ = wd/2 makes GD on the mean squared error converge to this θ.
    """
    n = len(y)
    Xa = np.hstack([np.asarray(X, np.float64), np.ones((n, 1))])
    lam = weight_decay / 2
    theta = np.linalg.solve(Xa.T @ Xa / n + lam * np.eye(Xa.shape[1]),
                            Xa.T @ np.asarray(y, np.float64) / n)
    # torch's Linear stores (weight, bias): the same order as [w, b]
    fed = np.asarray(federated, np.float64)
    pred = np.hstack([np.asarray(X_test, np.float64),
                      np.ones((len(y_test), 1))]) @ theta
    return RidgeComparison(
        coef=theta[:-1].tolist(), intercept=float(theta[-1]), federated_coef=fed[:-1].tolist(),
        federated_intercept=float(fed[-1]), max_abs_difference=float(np.max(np.abs(fed - theta))),
        relative_difference=float(np.linalg.norm(fed - theta) / np.linalg.norm(theta)),
        test=regression_report(y_test, pred).to_dict(), lam=lam)


def _model_files(fl: FederatedModel, onnx: bytes | None) -> dict[str, bytes]:
    """Return ``model.pt`` (and ``model.onnx``), or under FedBN each ``model.<client>.pt``."""
    from islands.hfl.torch.models import state_bytes  # torch

    if fl.local_states_:
        return {f"model.{name}.pt": state_bytes(fl.export(client=name))
                for name in fl.local_states_}
    return {"model.pt": state_bytes(fl.export()),
            **({} if onnx is None else {"model.onnx": onnx})}


def _model_shape(spec: Any) -> dict[str, Any]:
    """Return what rebuilds the job's model with the data's shape (``islands export``)."""
    return {"input_shape": list(spec.input_shape), "n_outputs": spec.n_outputs,
            "input_divisor": spec.input_divisor}


def _onnx_bytes(fl: FederatedModel) -> tuple[bytes | None, str | None]:
    """Return the trained model as ONNX, or None and why not (never raises for the model)."""
    from islands.hfl.torch.onnx_export import ModelExportError, onnx_bytes  # torch

    if fl.local_states_:
        return None, ("FedBN: each client's model is its own (model.<client>.pt); "
                      "FederatedModel.save(path, format='onnx', client=...) writes one")
    try:
        return onnx_bytes(fl.export(), fl.model_.input_shape), None
    except (ImportError, ModelExportError) as exc:
        return None, str(exc)


# --------------------------------------------------------------------------- outputs
def write_outputs(result: HflJobResult, out: str | Path, *,
                  json_path: str | Path | None = None) -> list[Path]:
    """Write ``results.json``, ``accuracy.png``, ``tau.png``, ``model.pt``, ``model.onnx``.

    ``model.pt`` is the trained model's state dict: :func:`islands.hfl.load_model` (or
    ``torch.load(path, weights_only=True)``) loads it into the model the job names; under
    FedBN each client's model is its own, ``model.<client>.pt``. ``model.onnx`` is the
    same model for onnxruntime (:mod:`islands.hfl.torch.onnx_export`), written where torch
    can export it and the ``export`` extra is installed; otherwise results.json's
    ``onnx_skipped`` says why.

    The files are one set (:class:`~islands.reporting.ResultSet`): staged, renamed into
    place together and listed in ``manifest.json``, which says complete once they all
    are. With ``json_path``, ``results.json`` is also copied there (its folder created
    when missing).

    Raises
    ------
    OutputError
        If a file cannot be written (disk full, no permission), naming it; the previous
        results in ``out`` are then unchanged.
    """
    regression = result.task == "regression"
    key = "r2" if regression else "accuracy"
    label = "test R²" if regression else "test accuracy"
    with write_results(result, out, json_path) as files:
        for name, data in result.model_files.items():
            files.add_bytes(name, data)
        fig = new_figure()
        ax = fig.subplots()
        hist = result.history
        ax.plot([h["epoch"] for h in hist], [h["test"].get(key, math.nan) for h in hist],
                marker="o", label=f"federated ({result.job.strategy['name']})")
        base = result.baseline
        if base is not None and base.history:
            ax.plot([h["epoch"] for h in base.history],
                    [h["test"].get(key, math.nan) for h in base.history],
                    marker="s", label="centralised")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.set_title(result.job.name)
        ax.grid(alpha=0.3)
        ax.legend()
        files.add_figure("accuracy.png", fig)
        fig = new_figure(6.4, 3.6)
        ax = fig.subplots()
        ax.step(range(1, len(result.tau) + 1), result.tau, where="post")
        ax.set_xlabel("round (aggregation)")
        ax.set_ylabel("τ (local steps)")
        ax.set_title(f"{result.job.name}: τ per round")
        ax.grid(alpha=0.3)
        files.add_figure("tau.png", fig)
        if result.contribution is not None:
            plot_contribution(result.contribution, files.path("contribution.png"),
                              title=f"{result.job.name}: contributions")
    return files.published
