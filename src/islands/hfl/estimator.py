"""``FederatedModel``: train one model over clients that each keep their own rows.

``fit(parts)`` runs a server and one client per part in this process (one thread each,
every message through the wire codec), with local training in PyTorch. Each client
keeps ``eval_fraction`` of its rows as local evaluation data (the accuracy APFL's
server weighs); a test set given to ``fit`` is scored at the end of every epoch by the
caller's side, outside the protocol.

Where the torch work runs is the ``backend``: ``"local"`` runs it on a small thread
pool of this process, as many threads as clients train at once
(:class:`~islands.hfl.torch.learner.PooledLearner`); ``"ray"`` runs it in Ray workers, on
this machine or a Ray cluster (:mod:`islands.hfl.ray_backend`). The roles and their
messages are the same either way, and so are the results for the same seeds and the
same torch thread count (an int ``threads``: with ``"auto"`` each backend picks its own,
and float sums may then round differently).

With ``batch_clients`` (``"auto"`` by default: from 10 clients training at once, so not
at the default ``concurrency=8``) the ``"local"`` backend trains the clients
that train at once as one batched computation (:mod:`islands.hfl.torch.batched`): each
client's result within float32 rounding of its own training, its protections unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import math
import os
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from islands.aggregation.base import MeanAggregator
from islands.aggregation.protect import SampleDP, can_retrain
from islands.arrays import Vector
from islands.cores import usable_cores
from islands.errors import IslandsError, ValidationError, invalid_parameter
from islands.estimator import FederatedEstimator, accepts_renamed
from islands.hfl.checkpoint import check_resume, rows_digest
from islands.hfl.config import HflConfig, resolve_seed
from islands.hfl.contribution import (
    ClientValidation,
    Contribution,
    ContributionReport,
    ContributionTracker,
    ServerValidation,
    check_compatible,
)
from islands.hfl.contribution.retrain import (
    RetrainResult,
    coalition_trainer,
    retrain_contributions,
)
from islands.hfl.metrics import (
    classification_report,
    extra_metrics,
    regression_report,
    resolve_metrics,
)
from islands.hfl.plan import TrainingPlan
from islands.hfl.protocol import (
    DropoutEvent,
    RoundRecord,
    ServerResult,
    client,
    server,
)
from islands.hfl.ray_backend import RayWorkerPool, check_client_data, ray_session
from islands.hfl.strategy import FedAvg, Strategy, check_client_rows
from islands.reporting import write_bytes
from islands.runtime import Role, Transcript, run_local
from islands.threads import torch_threads
from islands.tracking import Tracker, TrackingConfig, run_label
from islands.validation import describe

__all__ = ["BACKENDS", "EpochRecord", "FederatedModel", "client_seed", "round_metrics",
           "split_local_eval"]

log = logging.getLogger(__name__)

_AUTO_BATCH = 10
"""The fewest clients training at once that ``batch_clients="auto"`` batches (issue 24
measured that three do not pay; a client that never calls, such as a free rider, also
holds a small batch for the gathering window)."""

Task = Literal["classification", "regression"]
Backend = Literal["local", "ray"]
BACKENDS: tuple[str, ...] = ("local", "ray")
"""Where the clients' local training runs: this process, or Ray workers."""


@dataclass(frozen=True)
class EpochRecord:
    """The federation at the end of one epoch.

    Attributes
    ----------
    epoch
        From 1.
    rounds, aggregations
        Rounds run so far (equal unless resumed).
    tau
        τ of the epoch's last round.
    local_accuracy
        The server's weighted local accuracy (eq. 30) of its last round, or None.
    test
        Metrics of the global model on the test set given to ``fit`` (empty if none).
    seconds
        Wall time since the run began.
    """

    epoch: int
    rounds: int
    aggregations: int
    tau: int
    local_accuracy: float | None
    test: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def _dropout_summary(dropouts: Sequence[DropoutEvent],
                     failures: Mapping[str, BaseException]) -> str:
    """Say which clients were left out of which rounds and why ("" when none were)."""
    by_client: dict[tuple[str, str, str], list[int]] = {}
    for event in dropouts:
        detail = event.detail or (repr(failures[event.client])
                                  if event.reason == "failed" and event.client in failures
                                  else "")
        by_client.setdefault((event.client, event.reason, detail), []).append(event.round)
    lines = [f"{client}: {reason} in round(s) {', '.join(map(str, sorted(set(rounds))))}"
             + (f" ({detail})" if detail else "")
             for (client, reason, detail), rounds in by_client.items()]
    listed = {event.client for event in dropouts}
    lines += [f"{name}: failed ({exc!r})" for name, exc in failures.items()
              if name not in listed]
    if not lines:
        return ""
    return ("FederatedModel.fit finished, but clients were left out of the model "
            "(see dropouts_ and client_failures_): " + "; ".join(lines))


def _without_traceback(exc: BaseException) -> BaseException:
    """Drop the tracebacks of ``exc`` and its causes (their frames hold large objects)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
    return exc


def round_metrics(record: RoundRecord, total_bytes: int) -> dict[str, Any]:
    """Return one round's values for the trackers, as ``round/<name>`` (None: left out).

    ``bytes`` counts every message of the run so far, as the transcript has it.
    """
    return {"round/tau": record.tau, "round/steps": record.steps,
            "round/loss": record.loss, "round/local_accuracy": record.accuracy,
            "round/survivors": record.survivors, "round/seconds": record.seconds,
            "round/epsilon": record.epsilon, "round/sample_epsilon": record.sample_epsilon,
            "round/bytes": total_bytes}


def client_seed(seed: int, index: int) -> int:
    """Return the mini-batch seed of client ``index`` in a federation seeded ``seed``."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def split_local_eval(n: int, fraction: float, seed: int) -> tuple[NDArray[np.intp],
                                                                   NDArray[np.intp]]:
    """Split ``range(n)`` into (train, local evaluation) rows, ``fraction`` for evaluation."""
    n_eval = math.floor(n * fraction)
    if n_eval >= n:
        n_eval = n - 1
    order = np.random.default_rng([seed, n]).permutation(n)
    return np.sort(order[n_eval:]), np.sort(order[:n_eval])


def _names(names: Any, parts: int) -> list[str]:
    """Check ``fit``'s client names: one distinct non-empty string per part.

    Each name is a party of the run; two clients of one name would be one party to the
    server, which would then wait for the second's messages forever.
    """
    if isinstance(names, str) or not isinstance(names, Sequence) or not all(
            isinstance(n, str) and n for n in names):
        raise invalid_parameter("names", "FederatedModel.fit",
                                "a list of non-empty strings, one per part", describe(names))
    out = list(names)
    if len(out) != parts:
        raise ValidationError(f"{len(out)} names for {parts} parts")
    first: dict[str, int] = {}
    for k, name in enumerate(out):
        if name == "server":  # the server's party name (FederatedModel._run)
            raise ValidationError(f"The 'names' parameter of FederatedModel.fit must not use "
                                  f"'server' (part {k}): it is the server's name")
        if name in first:
            raise ValidationError(f"The 'names' parameter of FederatedModel.fit must name "
                                  f"each client once; {name!r} names parts {first[name]} "
                                  f"and {k}")
        first[name] = k
    return out


class FederatedModel(FederatedEstimator[HflConfig]):
    """Horizontal federated training of a PyTorch model (FedAvg, APFL, FedProx, ...).

    After ``model`` and ``strategy`` the parameters are keyword-only, in five groups:
    training (``epochs``, ``task``, ``loss``, ``eval_fraction``, ``random_state``),
    protections (``sample_dp``), execution (``backend``, ``ray_address``, ``concurrency``,
    ``threads``, ``batch_clients``, ``timeout``), state (``checkpoint``, ``resume``) and
    observation (``callback``, ``round_observer``, ``tracking``, ``keep_payloads``,
    ``contribution``, ``settings``, ``extra_metrics``).

    Parameters
    ----------
    model : ModelSpec
        The architecture every party trains (:class:`islands.hfl.torch.models.ModelSpec`).
    strategy : Strategy, default=FedAvg()
        The server's round hooks and aggregator (:mod:`islands.hfl.strategy`).
    epochs : int, default=1
        Epochs of local mini-batch steps.
    task : {"classification", "regression"}, default="classification"
    loss : callable, str or None, default=None
        The clients' loss ``fn(outputs, targets)``: a 0-dimensional tensor, the mean over
        the batch, from the model's outputs ((b, classes) logits, or (b,) for a
        regression) and the targets (int64 labels, or float32 values), e.g.
        ``torch.nn.CrossEntropyLoss(label_smoothing=0.1)``; or its name
        ``"package.module:function"``. Checked at ``fit`` on two rows before any message;
        under ``sample_dp`` it is called on each row alone (:mod:`islands.hfl.torch.loss`).
        None: cross-entropy (classification) or mean squared error (regression).
    eval_fraction : float, default=0.1
        Share of each client's rows kept back as its local evaluation data.
    random_state : int, numpy.random.Generator or None, default=0
        Seeds the initial model, the local splits and every client's batch order. An int
        is the run's seed itself (the same int, the same model bit for bit; a job or
        federation file's ``seed``); a Generator gives one draw per ``fit`` and None one
        from fresh entropy (see :func:`~islands.hfl.config.resolve_seed`); ``seed_`` is
        the seed the fit ran with. Give an int to ``resume`` a run: the checkpoints
        hold the seed, and another one is refused. Formerly ``seed`` (still taken, with
        a ``FutureWarning``).
    sample_dp : SampleDP or None
        Train every client with DP-SGD under these settings (sample-level differential
        privacy, :mod:`islands.hfl.torch.dpsgd`); the server accounts each client's budget.
    backend : {"local", "ray"}, default="local"
        Where the clients' local training and evaluation run: ``"local"`` on a thread
        pool of this process (as many threads as clients train at once), ``"ray"`` in
        Ray workers, one per free CPU of the Ray cluster up to ``concurrency``
        (:mod:`islands.hfl.ray_backend`). The roles run in this process either way, and
        the results are the same for the same seeds and ``threads``.
    ray_address : str or None, default=None
        With ``backend="ray"``: None starts a local Ray instance on the usable cores
        (and shuts it down after ``fit``); otherwise the address of a running Ray
        cluster (``"auto"``, ``"host:6379"``, ``"ray://host:10001"``), on whose nodes
        islands must be installed. If Ray is already initialised in this process, that
        instance is used.
    concurrency : int or None, default=8
        Clients training at the same time (None: all). With ``batch_clients`` these
        are the clients that train as one batch: raise it (or None) to batch more.
    threads : int, "auto" or None, default="auto"
        torch intra-op threads while training: "auto" shares the cores among the clients
        that train at once (with ``backend="ray"``: 1 in each worker, which holds one
        CPU; an int sets every worker's threads).
    batch_clients : bool or "auto", default="auto"
        With ``backend="local"``, train the clients that train at once as one batched
        computation (:mod:`islands.hfl.torch.batched`): parameters stacked, one
        ``torch.func.vmap`` forward and backward over all of them per local step, each
        client's result its own training's within float32 rounding. ``"auto"``: where
        it can and at least 10 clients train at once, else one client at a time with
        an INFO log saying why (DP-SGD, the Ray backend, a model with local layers or
        buffers, a user's module ``vmap`` cannot run, fewer clients). True: the same,
        from 2 clients, and a run that cannot batch is refused at ``fit``.
        False: one client at a time, bit for bit as before. With the default
        ``concurrency=8`` no batch forms under ``"auto"``: set ``concurrency=None``
        (or >= 10) to batch. A batch is trained in
        chunks on one thread per core, each with ``threads`` torch threads ("auto": 1).
    timeout : float, default=600.0
        Seconds the server waits for one client's update before leaving it out.
    checkpoint : path or None
        Folder for the server's and clients' checkpoint files. Each carries the settings
        that shape the model (the seed, task, ``eval_fraction``, the model, the strategy
        and its aggregator with every parameter, ``sample_dp``, the clients' names and
        a digest of each client's rows, and ``settings``).
    resume : bool, default=False
        Continue the run checkpointed in ``checkpoint`` (starts afresh if there is none).
        Refused at ``fit``, before any training, when a checkpoint was made under other
        settings (each named, old → new), is damaged (the client and file named), or
        has trained more epochs than ``epochs``; the other parameters (``epochs``
        raised, ``concurrency``, ``timeout``, ``threads``, ``backend``, ...) may change.
    callback : callable or None
        ``callback(record: RoundRecord, epoch: EpochRecord | None)`` after every round
        (``epoch`` set at the end of an epoch): progress bars, logging.
    round_observer : callable or None
        ``round_observer(record: RoundRecord, params: numpy.ndarray)`` after every round,
        with the round's global model as a client opens it (the flat float32 vector
        :attr:`params_` has at the end; under CKKS, Paillier or the chaos permutation
        opened once more per round for it): the white-box view of empirical privacy
        audits (:mod:`islands.hfl.dp_audit`). Not a setting: it changes nothing the run
        sends, is not written into checkpoints and is not part of a resume's checks.
    tracking : TrackingConfig, dict, Tracker or None
        Log every round (τ, loss, local accuracy, ε spent, bytes), each epoch's test
        metrics and the final model's summary to TensorBoard and/or MLflow
        (:mod:`islands.tracking`, ``pip install 'islands[tracking]'``), e.g.
        ``{"tensorboard": True}``: event files under ``runs/<run name>``, an MLflow
        store in ``./mlruns``. An open :class:`~islands.tracking.Tracker` is logged to
        and left open for its owner. ``tracking_`` says where the run went.
    keep_payloads : bool, default=False
        Keep every message's bytes in ``transcript_`` (for audits).
    contribution : Contribution or None
        Value every client's contribution (:mod:`islands.hfl.contribution`); the
        result is ``contribution_``. ``"retrain"`` (the default up to 8 clients:
        :meth:`~islands.hfl.contribution.Contribution.resolve`) trains the federation
        again on every coalition after the run; the per-round methods (GTG-Shapley,
        exact per-round Shapley, one-round reconstruction, leave-one-out) value each
        round from its plain uploads and are refused with an aggregator that hides
        single updates.
    settings : mapping or None
        Further named settings that shaped ``parts`` and are not parameters here (a
        job's data set and partition): plain values, recorded in the checkpoints with
        the estimator's own and compared on ``resume`` the same way.
    extra_metrics : sequence of str, mapping or None
        Metrics :meth:`metrics` (and each epoch's test metrics) add to the report, by
        name: a list of names (a classification's ``"balanced_accuracy"``,
        ``"f1_macro"``, ``"f1_micro"``, ``"f1_weighted"``, ``"precision_weighted"``,
        ``"recall_weighted"``, ``"cohen_kappa"``, ``"matthews_corrcoef"``; a
        regression's ``"median_ae"``, ``"max_error"``, ``"explained_variance"``,
        ``"mape"``, from ``sklearn.metrics``; or ``"package.module:function"``), or a
        mapping of names to functions ``fn(y_true, y_pred) -> float`` on numpy arrays
        (labels, or values). A name the report already has (``"r2"``, ``"mae"``) is kept
        as it is. Checked at ``fit`` (each called once on the first client's labels).

    Every parameter is stored as given and checked at ``fit``; ``get_params`` and
    ``set_params`` follow scikit-learn's conventions
    (:class:`islands.estimator.FederatedEstimator`).

    Attributes
    ----------
    params_ : numpy.ndarray
        The final global model as a flat float32 vector.
    loss_ : UserLoss or None
        The clients' loss as checked (:class:`~islands.hfl.torch.loss.UserLoss`: the
        function and its name), None for the task's.
    plan_ : TrainingPlan
        What the server and every client trained with: the bound model, the strategy
        with its protections, DP-SGD and the loss (:class:`~islands.hfl.plan.TrainingPlan`).
    seed_ : int
        The run's seed: ``random_state`` itself when it is an int, else the one drawn
        from it (``random_state=seed_`` trains the same model again).
    rounds_ : list of RoundRecord
    history_ : list of EpochRecord
    aggregations_ : int
    dropouts_ : list of DropoutEvent
    client_failures_ : dict
        The exception of each client that failed, by name.
    batch_sizes_, counts_ : dict
        Each client's mini-batch size and training rows.
    steps_per_epoch_ : int
    transcript_ : Transcript
    wall_time_ : float
    stopped_ : str or None
        Why the run ended early (``"privacy budget"``), or None.
    privacy_ : tuple or None
        Client-level (ε, δ) spent (with ``protect`` DP), or None: against whoever sees
        the released models, amplified when the cohort is a secret Poisson sample.
    privacy_against_server_ : tuple or None
        Client-level (ε, δ) against the server, which draws the cohort: every round a
        client was asked to train in counts with q = 1, the largest over the clients.
    sample_privacy_ : tuple or None
        The largest sample-level (ε, δ) of any client (with ``sample_dp``), or None.
    workers_ : int
        Threads (``"local"``) or Ray workers (``"ray"``) that ran the local training.
    batches_ : list of int
        The number of clients in each batch trained together (``batch_clients``), in
        order; empty when every client trained alone.
    local_states_ : dict
        Under FedBN, each client's own layers (its batch norm) by name; else empty.
    contribution_ : ContributionReport or None
        Each client's scores and reward share (with ``contribution``), else None.
    tracking_ : dict or None
        Where the run was logged and any tracker failure (with ``tracking``), else None.
    """

    Config = HflConfig

    renamed: ClassVar[Mapping[str, str]] = {"seed": "random_state"}

    @accepts_renamed
    def __init__(
        self,
        model: Any,
        strategy: Strategy | None = None,
        *,
        # training
        epochs: int = 1,
        task: Task = "classification",
        loss: Callable[..., Any] | str | None = None,
        eval_fraction: float = 0.1,
        random_state: int | np.random.Generator | None = 0,
        # protections
        sample_dp: SampleDP | None = None,
        # execution
        backend: Backend = "local",
        ray_address: str | None = None,
        concurrency: int | None = 8,
        threads: int | Literal["auto"] | None = "auto",
        batch_clients: bool | Literal["auto"] = "auto",
        timeout: float = 600.0,
        # state
        checkpoint: str | os.PathLike[str] | None = None,
        resume: bool = False,
        # observation
        callback: Callable[[RoundRecord, EpochRecord | None], None] | None = None,
        round_observer: Callable[[RoundRecord, Vector], None] | None = None,
        tracking: TrackingConfig | Mapping[str, Any] | Tracker | None = None,
        keep_payloads: bool = False,
        contribution: Any = None,
        settings: Mapping[str, Any] | None = None,
        extra_metrics: Sequence[str] | Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.strategy = strategy
        self.epochs = epochs
        self.task = task
        self.loss = loss
        self.eval_fraction = eval_fraction
        self.random_state = random_state
        self.sample_dp = sample_dp
        self.backend = backend
        self.ray_address = ray_address
        self.concurrency = concurrency
        self.threads = threads
        self.batch_clients = batch_clients
        self.timeout = timeout
        self.checkpoint = checkpoint
        self.resume = resume
        self.callback = callback
        self.round_observer = round_observer
        self.tracking = tracking
        self.keep_payloads = keep_payloads
        self.contribution = contribution
        self.settings = settings
        self.extra_metrics = extra_metrics

    def _tracking_config(self) -> TrackingConfig | None:
        """Return ``tracking`` as a checked :class:`TrackingConfig` (None: no tracker)."""
        if self.tracking is None or isinstance(self.tracking, Tracker | TrackingConfig):
            return self.tracking.config if isinstance(self.tracking, Tracker) else self.tracking
        if isinstance(self.tracking, Mapping):
            return TrackingConfig.build("FederatedModel's 'tracking'", **self.tracking)
        raise invalid_parameter("tracking", "FederatedModel",
                                "None, a TrackingConfig, a dict of its settings or a Tracker",
                                describe(self.tracking))

    def _validate(self) -> None:
        owner = "FederatedModel"
        # the settings files share (one default and constraint each); the model, strategy
        # and contribution are objects here, checked as such
        config = HflConfig.build(owner, epochs=self.epochs, task=self.task,
                                 eval_fraction=self.eval_fraction,
                                 concurrency=self.concurrency, timeout=self.timeout,
                                 backend=self.backend, ray_address=self.ray_address,
                                 batch_clients=self.batch_clients)
        if config.task is None:  # files infer it from the data set; fit has no name to go by
            raise invalid_parameter("task", owner, "'classification' or 'regression'", None)
        if not (self.loss is None or callable(self.loss) or isinstance(self.loss, str)):
            raise invalid_parameter("loss", owner, "None, a callable fn(outputs, targets) or "
                                    "a name 'package.module:function'", describe(self.loss))
        self._metric_fns = resolve_metrics(self.extra_metrics, config.task, owner=owner)
        if self.sample_dp is not None and not isinstance(self.sample_dp, SampleDP):
            raise invalid_parameter("sample_dp", owner, "None or a SampleDP",
                                    describe(self.sample_dp))
        if self.resume and self.checkpoint is None:
            raise invalid_parameter("resume", owner, "False when 'checkpoint' is None", True)
        if self.round_observer is not None and not callable(self.round_observer):
            raise invalid_parameter("round_observer", owner, "None or a callable "
                                    "fn(record, params)", describe(self.round_observer))
        if self.settings is not None and not (
                isinstance(self.settings, Mapping)
                and all(isinstance(k, str) for k in self.settings)):
            raise invalid_parameter("settings", owner, "None or a mapping of names to plain "
                                    "values", describe(self.settings))
        if not (self.threads in ("auto", None) or (
                isinstance(self.threads, int) and self.threads >= 1)):
            raise invalid_parameter("threads", owner, "'auto', None or an int >= 1",
                                    describe(self.threads))
        if self.contribution is not None:
            if not isinstance(self.contribution, Contribution):
                raise invalid_parameter("contribution", owner, "None or a Contribution",
                                        describe(self.contribution))
            if self.contribution.validation == "clients" and self.eval_fraction == 0:
                raise invalid_parameter("eval_fraction", owner, "> 0 with contribution "
                                        "validation='clients'", 0.0)
            if self.contribution.metric == "accuracy" and self.task != "classification":
                raise invalid_parameter("contribution", owner, "metric 'loss' (or None) for "
                                        "a regression", "metric='accuracy'")
            if self.contribution.methods is not None and self.contribution.per_round:
                check_compatible(getattr(self.strategy, "aggregator", MeanAggregator()))
        tracking = self._tracking_config()
        if tracking is not None:
            tracking.check_installed()
        if self.contribution is not None and getattr(self.strategy, "control_variates",
                                                     False):
            raise invalid_parameter("contribution", owner, f"None with "
                                    f"{type(self.strategy).__name__} (its uploads carry "
                                    "control variates, not models to value)",
                                    type(self.contribution).__name__)
        if self.backend == "ray" and importlib.util.find_spec("ray") is None:
            raise ImportError("The 'backend' parameter of FederatedModel is 'ray', but Ray "
                              "is not installed: pip install 'islands[ray]'")
        # last: a Generator's stream advances only for a fit that passed every check
        self.seed_ = resolve_seed(self.random_state, owner)

    def _bind_model(self, X: NDArray[Any]) -> Any:
        """Return the model to train: a ModelSpec as given, a user's module bound to X's rows."""
        from islands.hfl.torch.models import ModelSpec
        from islands.hfl.torch.user import TorchModel

        local = getattr(self.strategy, "local_layers", None)  # FedBN's batch norm
        if isinstance(self.model, ModelSpec | TorchModel):
            if local is not None and getattr(self.model, "local_layers", None) != local:
                raise invalid_parameter(
                    "model", "FederatedModel", f"a torch.nn.Module with batch norm for "
                    f"{type(self.strategy).__name__} (it keeps each client's batch norm)",
                    describe(self.model))
            return self.model
        if isinstance(self.model, str):  # files name factories; Python passes the function
            raise invalid_parameter("model", "FederatedModel", "a ModelSpec, a torch.nn.Module "
                                    "or a zero-argument factory (a job file names "
                                    "'package.module:function')", describe(self.model))
        return TorchModel.bind(self.model, tuple(X.shape[1:]), task=self.task, seed=self.seed_,
                               local_layers=local)

    def _check_parts(self, parts: Sequence[Any]) -> list[tuple[NDArray[Any], NDArray[Any]]]:
        from islands.hfl.torch.training import _as_features, _as_targets

        if not isinstance(parts, Sequence) or len(parts) == 0:
            raise ValidationError("fit needs a non-empty list of (X, y) parts, one per client")
        out = []
        model: Any = None
        for k, part in enumerate(parts):
            if not (isinstance(part, tuple | list) and len(part) == 2):
                raise ValidationError(f"part {k} must be an (X, y) pair; got {describe(part)}")
            try:
                X, y = np.asarray(part[0]), np.asarray(part[1])
            except (ValueError, TypeError):  # ragged nesting
                raise ValidationError(f"part {k}: X and y must be rectangular arrays of "
                                      "numbers; got rows of different lengths") from None
            for j, arr in enumerate((X, y)):
                if arr.ndim == 0:  # None, a number, a dict, a file name
                    hint = " (load the file first)" if arr.dtype.kind in "US" else ""
                    raise invalid_parameter(
                        f"parts[{k}][{j}]", "FederatedModel.fit",
                        "an array with one row per sample" + hint, describe(part[j]))
            if model is None:  # a user's module takes the shape of the first part's rows
                model = self.model_ = self._bind_model(X)
            if len(X) == 0:
                raise ValidationError(f"client {k} has no data (part {k} is empty)")
            if len(X) != len(y):
                raise ValidationError(
                    f"part {k}: X has {len(X)} rows but y has {len(y)} entries")
            if self.task == "classification":
                if y.dtype.kind not in "iu":
                    raise ValidationError(f"part {k}: y must hold integer class labels")
                bad = np.setdiff1d(np.unique(y), np.arange(model.n_outputs))
                if bad.size:
                    raise ValidationError(
                        f"part {k}: labels {bad.tolist()} are outside the model's "
                        f"{model.n_outputs} classes")
            # every row, the local evaluation rows (APFL's) included, before the first message
            X = _as_features(X, model, f"parts[{k}][0]", "FederatedModel.fit")
            y = _as_targets(y, len(X), self.task, model.n_outputs, f"parts[{k}][1]",
                            "FederatedModel.fit")
            out.append((X, y))
        return out

    def fit(self, parts: Sequence[tuple[ArrayLike, ArrayLike]], *,
            test: tuple[ArrayLike, ArrayLike] | None = None,
            names: Sequence[str] | None = None,
            behaviour: Mapping[str, Callable[[Any], Any]] | None = None) -> FederatedModel:
        """Train over the clients' parts.

        Parameters
        ----------
        parts
            One ``(X, y)`` per client, rows as the model expects.
        test
            ``(X, y)`` scored with the global model after every epoch (optional).
        names
            Client names (default ``client-1``, ``client-2``, ...).
        behaviour
            Simulate misbehaving clients: ``{name: wrap}`` replaces that client's
            learner with ``wrap(learner)``, e.g.
            :class:`~islands.hfl.torch.learner.FreeRider` (uploads the global model
            unchanged).

        Returns
        -------
        FederatedModel
            ``self``.

        Warns
        -----
        UserWarning
            If clients were left out (failed, timed out or sent a malformed update):
            one warning naming each, the rounds and why (also in ``dropouts_``).
        """
        from islands.hfl.torch.models import ModulePool

        self._validate()
        data = self._check_parts(parts)
        if self.sample_dp is not None:  # a layer DP-SGD cannot train, named before any message
            from islands.hfl.torch.dpsgd import check_private

            check_private(self.model_.build(self.seed_), "FederatedModel's sample_dp")
        from islands.hfl.torch.loss import bind_loss

        self.loss_ = bind_loss(self.loss, self.model_, self.task,
                               per_sample=self.sample_dp is not None)
        if self._metric_fns:  # a metric that fails fails now, before any message
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                y0 = data[0][1][:64]
                extra_metrics(self._metric_fns, y0, y0)
        names = [f"client-{k + 1}" for k in range(len(data))] if names is None else _names(
            names, len(data))
        strategy = FedAvg() if self.strategy is None else self.strategy
        # each client's rows against the strategy's batches, as a deployed client checks
        # them before it joins, then every count as the server checks them at the joins
        counts = {}
        for k, (name, (_, y)) in enumerate(zip(names, data, strict=True)):
            tr, ev = split_local_eval(len(y), self.eval_fraction, client_seed(self.seed_, k))
            check_client_rows(strategy, name, len(tr), len(names), eval_rows=len(ev))
            counts[name] = len(tr)
        strategy.setup(counts)
        contribution = None
        if self.contribution is not None:
            contribution = self.contribution.resolve(
                len(names), task=self.task,
                retrainable=self.sample_dp is None and can_retrain(strategy.aggregator))
            contribution.check_clients(len(names))
            if contribution.per_round:  # the default decided now: refused before any message
                check_compatible(strategy.aggregator)
        behaviour = dict(behaviour or {})
        stray = sorted(set(behaviour) - set(names))
        if stray or not all(callable(f) for f in behaviour.values()):
            raise invalid_parameter("behaviour", "FederatedModel.fit",
                                    "a mapping of client names to callables",
                                    stray or describe(behaviour))
        # the plan every client and the server are given, built once from what fit checked
        plan = self.plan_ = TrainingPlan(model=self.model_, strategy=strategy, task=self.task,
                                         seed=self.seed_, sample_dp=self.sample_dp,
                                         loss=self.loss_)
        settings = None
        if self.checkpoint is not None:
            settings = plan.settings(
                eval_fraction=self.eval_fraction,
                rows={name: rows_digest(X, y) for name, (X, y) in zip(names, data, strict=True)},
                extra=self.settings)
        resume = self._resuming(settings)
        # the settings each retrained coalition starts from (a run may change its strategy)
        template = (copy.deepcopy(strategy) if contribution is not None
                    and "retrain" in (contribution.methods or ()) else None)
        pool = ModulePool(self.model_)
        self._batching: Any = None
        active = len(names) if self.concurrency is None else min(len(names), self.concurrency)
        with contextlib.ExitStack() as stack:
            if self.backend == "ray":
                learners, workers = self._ray_learners(stack, plan, data, names, active)
            else:
                learners, workers = self._local_learners(stack, plan, data, pool, active)
            learners = [behaviour[name](learner) if name in behaviour else learner
                        for name, learner in zip(names, learners, strict=True)]
            tracker = self._run(learners, names, plan, pool, active, test, contribution,
                                settings, resume)
        self.workers_ = workers
        self.batches_: list[int] = ([] if self._batching is None
                                    else list(self._batching.batches))
        if tracker is not None and template is not None:
            retrained = self._retrain(tracker, template, data, names, behaviour)
            report: ContributionReport | None = tracker.report(retrained, final=self.params_)
            self.contribution_ = report
        return self

    def _resuming(self, settings: dict[str, Any] | None) -> bool:
        """Whether fit resumes: checkpoints there, all readable and made under ``settings``.

        Raises
        ------
        ValidationError
            Before anything runs, naming the damaged file (and its client), the settings
            that differ (old → new), or the epochs already trained.
        """
        if not self.resume or self.checkpoint is None or settings is None:
            return False
        if check_resume(self.checkpoint, settings, epochs=self.epochs) is None:
            log.warning("no checkpoint in %s: starting afresh", self.checkpoint)
            return False
        return True

    def _retrain(self, tracker: ContributionTracker, template: Strategy,
                 data: list[tuple[NDArray[Any], NDArray[Any]]], names: list[str],
                 behaviour: Mapping[str, Callable[[Any], Any]]) -> RetrainResult:
        """Train the federation again on every other coalition (``methods`` 'retrain')."""
        n = len(names)
        final = float(tracker.utility(self.params_))
        log.info("contribution: retraining the federation on its %d other coalitions of %d "
                 "clients (exact Shapley values; about %d times this run's training)",
                 (1 << n) - 2, n, (1 << n) - 2)

        def make() -> FederatedModel:
            return FederatedModel(
                self.model_, copy.deepcopy(template), epochs=self.epochs, task=self.task,
                eval_fraction=self.eval_fraction, random_state=self.seed_,
                concurrency=self.concurrency, timeout=self.timeout, threads=self.threads,
                backend=self.backend, ray_address=self.ray_address, loss=self.loss_,
                batch_clients=self.batch_clients)

        coalition = coalition_trainer(make, data, tracker.utility, names=names,
                                      behaviour=behaviour)

        def train(members: tuple[int, ...]) -> float:
            if len(members) == n:  # the grand coalition is the run itself
                return final
            try:
                return coalition(members)
            except IslandsError as exc:
                raise ValidationError(
                    f"contribution by retraining: the coalition "
                    f"{[names[k] for k in members]} could not be trained ({exc}); value "
                    f"the clients with methods=('gtg', 'loo') instead") from exc

        def progress(done: int, total: int) -> None:
            log.info("contribution: coalition %d of %d retrained", done, total)

        result = retrain_contributions(train, n, method="exact", progress=progress)
        return replace(result, trainings=result.trainings - 1)  # N is the run itself

    def _local_learners(self, stack: contextlib.ExitStack, plan: TrainingPlan,
                        data: list[tuple[NDArray[Any], NDArray[Any]]], pool: Any,
                        active: int) -> tuple[list[Any], int]:
        """TorchLearners whose calls run on a pool of ``active`` threads."""
        from islands.hfl.torch.learner import PooledLearner

        batcher = self._batcher(plan, active)
        if batcher is not None:
            stack.callback(batcher.close)
        learners = []
        for k, (X, y) in enumerate(data):
            tr, ev = split_local_eval(len(y), self.eval_fraction, client_seed(self.seed_, k))
            # every row trains (no local evaluation): the checked part itself, not a copy
            X_tr, y_tr = (X, y) if len(ev) == 0 else (X[tr], y[tr])
            learners.append(plan.learner(X_tr, y_tr, X[ev], y[ev],
                                         seed=client_seed(self.seed_, k), pool=pool,
                                         batcher=batcher))
        # only the pool's threads call torch (each OS thread that does keeps ~0.6 MB)
        # twice the clients that train at once: a straggler the server gave up on keeps
        # its thread until it finishes, and must not delay the clients that follow
        executor = ThreadPoolExecutor(max_workers=2 * active, thread_name_prefix="islands-train")
        stack.callback(executor.shutdown, wait=False, cancel_futures=True)
        self._local_holders = learners  # FedBN: each holds its client's local layers
        return [PooledLearner(learner, executor, timeout=float(self.timeout))
                for learner in learners], active

    def _batcher(self, plan: TrainingPlan, active: int) -> Any:
        """Return the run's :class:`ClientBatcher`, or None where the clients train alone.

        Raises
        ------
        ValidationError
            With ``batch_clients=True``, naming why the clients cannot train together.
        """
        from islands.hfl.torch.batched import ClientBatcher, batch_refusal

        if self.batch_clients is False:
            return None
        if plan.sample_dp is not None:
            reason: str | None = "DP-SGD clips every sample's gradient of each client"
        elif active < 2:
            reason = "one client trains at a time (concurrency 1)"
        elif active < _AUTO_BATCH and self.batch_clients == "auto":
            reason = (f"{active} clients train at once, fewer than {_AUTO_BATCH}: a small "
                      "batch does not pay (batch_clients=True batches them)")
        else:
            reason = batch_refusal(plan.model)
        if reason is not None:
            if self.batch_clients is True:
                raise invalid_parameter("batch_clients", "FederatedModel",
                                        f"False or 'auto' here ({reason})", True)
            log.info("clients train one at a time: %s", reason)
            return None
        # each chunk of the batch on one torch thread, one chunk per core (threads="auto")
        per_worker = self.threads if isinstance(self.threads, int) else 1
        self._batching = ClientBatcher(active, timeout=float(self.timeout),
                                       workers=max(1, usable_cores() // per_worker))
        return self._batching

    def _ray_learners(self, stack: contextlib.ExitStack, plan: TrainingPlan,
                      data: list[tuple[NDArray[Any], NDArray[Any]]], names: list[str],
                      active: int) -> tuple[list[Any], int]:
        """Learners whose calls run in Ray workers (started here, stopped on exit)."""
        checked = []  # every client's rows checked before Ray starts: errors come first
        for k, (X, y) in enumerate(data):
            tr, ev = split_local_eval(len(y), self.eval_fraction, client_seed(self.seed_, k))
            checked.append(check_client_data(plan.model, plan.task, X[tr], y[tr], X[ev],
                                             y[ev]))
        stack.enter_context(ray_session(self.ray_address))
        threads = self.threads if isinstance(self.threads, int) else (
            1 if self.threads == "auto" else None)
        workers = stack.enter_context(RayWorkerPool(
            plan.model, workers=active, task=plan.task, threads=threads, dp=plan.sample_dp,
            timeout=self.timeout, loss=plan.loss))
        log.info("training on %d Ray workers (pids %s)", workers.size, workers.pids)
        pending = deque(checked)
        del checked
        learners = []
        for k, name in enumerate(names):
            X, y, X_ev, y_ev = pending.popleft()  # let go of it: the object store has it
            learners.append(workers.learner(name, X, y, X_ev, y_ev,
                                            seed=client_seed(self.seed_, k), checked=True))
        self._local_holders = learners  # FedBN: the driver keeps each client's local layers
        return learners, workers.size

    def _run(self, learners: list[Any], names: list[str], plan: TrainingPlan, pool: Any,
             active: int, test: tuple[ArrayLike, ArrayLike] | None,
             contribution: Contribution | None, settings: dict[str, Any] | None,
             resume: bool) -> ContributionTracker | None:
        """Run the server and client roles over ``learners``; set the fitted attributes.

        Returns the contribution tracker (None without ``contribution``): with
        ``retrain`` among its methods, :meth:`fit` completes its report.
        """
        from islands.hfl.torch.training import Trainer

        strategy = plan.strategy
        initial = plan.initial()
        scorer = None
        if test is not None:
            X_test, y_test = np.asarray(test[0]), np.asarray(test[1])
            scorer = Trainer(self.model_, X_test, y_test, task=self.task, pool=pool)

        tracker = None
        if contribution is not None:
            tracker = self._tracker(contribution, learners, names, pool,
                                    plan.model_part(initial))
        learners = [plan.client(learner) for learner in learners]
        history: list[EpochRecord] = []
        t0 = time.perf_counter()

        aggregator = plan.aggregator
        halves = [aggregator.client_half() for _ in names]
        transcript = Transcript(keep_payloads=self.keep_payloads)
        logger, own_logger = self._open_tracker(strategy, names)

        def on_round(record: RoundRecord, payload: Any) -> None:
            epoch_rec = None
            if record.epoch_end:
                metrics: dict[str, Any] = {}
                if scorer is not None:
                    # where the server cannot see the model (CKKS, Paillier, chaos), the
                    # evaluation opens it as the first client would: the test set and the
                    # user stand on the clients' side here, never on the server's
                    params = plan.model_part(halves[0].open(payload))
                    if self._local_layers():
                        metrics = self._personal_report(scorer, params, X_test, y_test)
                    else:
                        metrics = self._report(y_test, scorer.predict(params, X_test))
                epoch_rec = EpochRecord(
                    epoch=record.epoch, rounds=record.round,
                    aggregations=record.round, tau=record.tau,
                    local_accuracy=record.accuracy, test=metrics,
                    seconds=time.perf_counter() - t0)
                history.append(epoch_rec)
            if logger is not None:
                logger.log_metrics(round_metrics(record, transcript.total_bytes),
                                   record.round)
                if epoch_rec is not None:
                    logger.log_metrics({f"test/{k}": v for k, v in epoch_rec.test.items()},
                                       epoch_rec.epoch)
            if self.callback is not None:
                self.callback(record, epoch_rec)
            if self.round_observer is not None:
                self.round_observer(record, plan.model_part(halves[0].open(payload)))

        roles: dict[str, Role] = {
            "server": partial(server, clients=names, strategy=strategy, initial=initial,
                              epochs=self.epochs, concurrency=self.concurrency,
                              client_timeout=self.timeout, checkpoint=self.checkpoint,
                              resume=resume, on_round=on_round, send_final=False,
                              sample_dp=self.sample_dp,
                              contribution=tracker if contribution is not None
                              and contribution.per_round else None, settings=settings),
        }
        for name, learner, half in zip(names, learners, halves, strict=True):
            roles[name] = partial(client, server="server", learner=learner,
                                  aggregator=aggregator, half=half,
                                  checkpoint=self.checkpoint, resume=resume,
                                  settings=settings)
        if self.threads == "auto":  # batched: each of the batcher's workers on one thread
            threads: int | None = (1 if self._batching is not None
                                   else max(1, usable_cores() // active))
        else:
            threads = self.threads if isinstance(self.threads, int) else None
        try:
            with torch_threads(threads):
                run = run_local(roles, timeout=self.timeout, transcript=transcript,
                                tolerate=names, blas_threads=None)
        except BaseException:
            if own_logger and logger is not None:
                logger.close(failed=True)
            raise
        result: ServerResult = run.results["server"]
        self.params_: Vector = plan.model_part(result.params if result.params is not None
                                               else halves[0].open(result.payload))
        self.stopped_ = result.stopped
        self.privacy_ = result.privacy
        self.privacy_against_server_ = result.privacy_against_server
        self.sample_privacy_ = result.sample_privacy
        self.rounds_ = result.rounds
        self.history_ = history
        self.aggregations_ = result.aggregations
        self.dropouts_: list[DropoutEvent] = result.dropouts
        # without tracebacks: their frames would keep each failed client's learner (and
        # under Ray its rows in the object store) alive as long as this estimator
        self.client_failures_ = {k: _without_traceback(v) for k, v in run.failures.items()}
        summary = _dropout_summary(self.dropouts_, self.client_failures_)
        if summary:
            warnings.warn(summary, UserWarning, stacklevel=3)
        self.batch_sizes_ = result.batch_sizes
        self.counts_ = result.counts
        self.steps_per_epoch_ = result.steps_per_epoch
        self.transcript_ = run.transcript
        self.wall_time_ = run.wall_time
        self.client_names_ = names
        self._scorer_pool = pool
        self.local_states_ = ({name: learner.local_state for name, learner
                               in zip(names, self._local_holders, strict=True)}
                              if self._local_layers() else {})
        self.contribution_ = None  # with 'retrain': fit completes the report
        if tracker is not None and "retrain" not in tracker.methods:
            self.contribution_ = tracker.report()
        self.tracking_ = None
        if logger is not None:
            if own_logger:
                logger.log_summary(self._summary(history))
                logger.close()
            self.tracking_ = logger.info()
        return tracker

    def _open_tracker(self, strategy: Strategy, names: list[str]) -> tuple[Tracker | None, bool]:
        """Return the run's tracker (opened here unless given open) and whether fit owns it."""
        if isinstance(self.tracking, Tracker):
            return self.tracking, False
        config = self._tracking_config()
        if config is None or not config.enabled:
            return None, False
        params = {"epochs": self.epochs, "task": self.task, "seed": self.seed_,
                  "eval_fraction": self.eval_fraction, "concurrency": self.concurrency,
                  "backend": self.backend, "clients": len(names), "strategy": repr(strategy),
                  "model": self.model_.describe(), "parameters": self.model_.n_params()}
        if self.loss_ is not None:
            params["loss"] = self.loss_.name
        return Tracker(config, "runs", run_label("FederatedModel"), params), True

    def _summary(self, history: list[EpochRecord]) -> dict[str, Any]:
        """Return the final model as the results show it (no weights): metrics, size, cost."""
        out: dict[str, Any] = {"model": self.model_.describe(),
                               "parameters": self.model_.n_params(),
                               "rounds": len(self.rounds_), "aggregations": self.aggregations_,
                               "bytes": self.transcript_.total_bytes,
                               "seconds": self.wall_time_}
        if history:
            out.update({k: v for k, v in history[-1].test.items()})
        if self.privacy_ is not None:
            out["epsilon"], out["delta"] = self.privacy_
        if self.privacy_against_server_ is not None:
            out["epsilon_against_server"] = self.privacy_against_server_[0]
        if self.sample_privacy_ is not None:
            out["sample_epsilon"], out["sample_delta"] = self.sample_privacy_
        return out

    def _tracker(self, cfg: Contribution, learners: list[Any], names: list[str], pool: Any,
                 initial: Vector) -> ContributionTracker:
        """Build the contribution tracker: the server's validation rows or the clients'."""
        utility: Any
        if cfg.validation == "clients":
            utility = ClientValidation([(learner.evaluate, learner.n_eval)
                                        for learner in learners])
        else:
            X_val, y_val = cfg.validation
            assert cfg.metric is not None  # resolved by fit
            utility = ServerValidation(self.model_, X_val, y_val, task=self.task,
                                       metric=cfg.metric, pool=pool, loss=self.loss_)
        return ContributionTracker(cfg, names, utility, initial, seed=self.seed_)

    def _report(self, y: NDArray[Any], pred: NDArray[Any]) -> dict[str, Any]:
        if self.task == "classification":
            out = classification_report(y, pred, self.model_.n_outputs).to_dict()
        else:
            out = regression_report(y, pred).to_dict()
        out.update(extra_metrics(getattr(self, "_metric_fns", {}), y, pred))
        return out

    def _local_layers(self) -> str | None:
        """Return what stays with each client (FedBN's "batchnorm"), or None."""
        return getattr(getattr(self, "model_", None), "local_layers", None)

    def _personal_report(self, scorer: Any, params: Vector, X: Any, y: Any) -> dict[str, Any]:
        """Score ``(X, y)`` with every client's own model (FedBN) and average each metric."""
        states = [learner.local_state for learner in self._local_holders]
        reports = [self._report(y, scorer.predict(params, X, local=state)) for state in states]
        out: dict[str, Any] = {}
        for key, value in reports[0].items():
            values = [r[key] for r in reports]
            if isinstance(value, int | float):
                out[key] = float(np.mean(values))
            elif isinstance(value, list) and all(isinstance(v, int | float) for v in value):
                out[key] = np.mean(np.asarray(values, dtype=np.float64), axis=0).tolist()
        out["clients_averaged"] = len(reports)
        return out

    def _check_fitted(self) -> None:
        if not hasattr(self, "params_"):
            raise ValidationError("this FederatedModel is not fitted yet; call fit first")

    def _client_local(self, client: str | None, owner: str) -> Any:
        """Return ``client``'s local layers (FedBN), None without local layers."""
        if self._local_layers() is None:
            if client is not None:
                raise invalid_parameter("client", owner, "None: every client holds the same "
                                        "model (no layer stays local)", client)
            return None
        if client not in self.local_states_:
            raise invalid_parameter(
                "client", owner, f"one of {sorted(self.local_states_)}: under "
                f"{type(self.strategy).__name__} each client keeps its own batch norm, so "
                "the model is a client's", describe(client))
        return self.local_states_[client]

    def export(self, client: str | None = None) -> Any:
        """Return the trained model as a ``torch.nn.Module`` in eval mode.

        A user's module comes back as its own class, with the trained parameters and the
        averaged buffers (frozen parameters and integer buffers as in the initial model);
        a :class:`~islands.hfl.torch.models.ModelSpec` as an ``nn.Sequential``. Under
        FedBN name the ``client`` whose model (with its own batch norm) to export.
        """
        self._check_fitted()
        local = self._client_local(client, "FederatedModel.export")
        if local is None:
            return self.model_.export(self.params_)
        return self.model_.export(self.params_, local)

    def save(self, path: str | os.PathLike[str], format: str = "torch",
             client: str | None = None) -> None:
        """Write the trained model to ``path``, whole (a temporary file, then a rename).

        Parameters
        ----------
        path : path
            The file to write.
        format : {"torch", "onnx"}
            ``"torch"``: the state dict (``torch.save``); it loads with
            ``module.load_state_dict(torch.load(path, weights_only=True))`` into the
            module that was trained (or :meth:`export`'s). ``"onnx"``: an ONNX model
            (input ``input``, float32 rows of any count; output ``output``) for
            onnxruntime, needing the ``export`` extra
            (:mod:`islands.hfl.torch.onnx_export`).
        client : str or None
            Under FedBN, the client whose model (its own batch norm) to write.

        Raises
        ------
        ValidationError
            If ``format`` is neither.
        ModelExportError
            If torch cannot export the model to ONNX, with its reason.
        """
        if format not in ("torch", "onnx"):
            raise invalid_parameter("format", "FederatedModel.save", "'torch' or 'onnx'",
                                    describe(format))
        self._check_fitted()
        if format == "onnx":
            from islands.hfl.torch.onnx_export import onnx_bytes

            data = onnx_bytes(self.export(client), self.model_.input_shape)
        else:
            from islands.hfl.torch.models import state_bytes

            data = state_bytes(self.export(client))
        write_bytes(os.fspath(path), data)

    def predict(self, X: ArrayLike, client: str | None = None) -> NDArray[Any]:
        """Class labels (classification) or values (regression) for the rows of ``X``.

        Under FedBN name the ``client`` whose model (its own batch norm) predicts.
        """
        from islands.hfl.torch.training import Trainer

        self._check_fitted()
        local = self._client_local(client, "FederatedModel.predict")
        X = np.asarray(X)
        dummy = np.zeros(1, dtype=np.int64 if self.task == "classification" else np.float32)
        trainer = Trainer(self.model_, X[:1], dummy, task=self.task, pool=self._scorer_pool)
        return trainer.predict(self.params_, X, local)

    def metrics(self, X: ArrayLike, y: ArrayLike, client: str | None = None) -> dict[str, Any]:
        """Every metric of the final model on ``(X, y)``, by name (:mod:`islands.hfl.metrics`).

        Classification: ``accuracy``, macro ``precision``, ``recall`` and ``f1``,
        ``per_class_accuracy`` and ``confusion``; regression: ``mse``, ``rmse``, ``mae``
        and ``r2``; then each of ``extra_metrics`` by its name. The same dict as each
        epoch's ``history_[i].test``. Under FedBN, of
        ``client``'s model; without a client, each metric averaged over every client's own
        model (``clients_averaged`` says how many).
        """
        if client is None and self._local_layers() is not None:
            from islands.hfl.torch.training import Trainer

            self._check_fitted()
            X_arr, y_arr = np.asarray(X), np.asarray(y)
            scorer = Trainer(self.model_, X_arr[:1], y_arr[:1], task=self.task,
                             pool=self._scorer_pool)
            return self._personal_report(scorer, self.params_, X_arr, y_arr)
        return self._report(np.asarray(y), self.predict(X, client))

    def score(self, X: ArrayLike, y: ArrayLike, client: str | None = None) -> float:
        """Return one number for ``(X, y)``, higher is better (scikit-learn's ``score``).

        The accuracy for a classification and R² for a regression, as scikit-learn's
        classifiers and regressors give; :meth:`metrics` has the others (``client`` as
        there).
        """
        return float(self.metrics(X, y, client)["accuracy" if self.task == "classification"
                                                else "r2"])
