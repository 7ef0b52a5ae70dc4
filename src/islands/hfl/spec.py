"""Horizontal FL as ``islands party`` runs it: one server, the other parties clients.

The federation file's ``[hfl]`` section holds ``server`` (party name), ``features`` (the
input size, or a shape such as ``[1, 28, 28]`` for a cnn), ``classes`` (0 for
regression), ``checkpoint`` (default true) and the job file's training keys and sections
(``epochs``, ``seed``, ``task``, ``concurrency``, ``timeout``, ``eval_fraction``,
``[hfl.model]``, ``[hfl.strategy]``, ``[hfl.server_optimizer]``, ``protect`` and the
protection sections), checked by the job file's own code
(:func:`~islands.hfl.job.read_training`, no data section needed), which gives the typed
:class:`~islands.hfl.job.Training` and :class:`~islands.hfl.config.HflConfig`; every party
builds its :class:`~islands.hfl.plan.TrainingPlan` from them once. Without ``task`` the run is a
classification (:func:`~islands.hfl.config.infer_task`); ``concurrency = "all"`` trains
every client at once.

``[hfl.model] loss = "package.module:function"`` is the clients' loss: each client imports
it on its own machine and checks it before it connects (the server never calls it). Its
name is compared at the hello with every other key of the federation file; the code behind
it is each client's. ``[hfl.model] metrics`` is refused: no party holds a test set.

Each party's checkpoints record the settings that shape the model (the section's seed,
task, model, loss, strategy and protections; a client's also a digest of its rows): ``--resume``
after any of them changed is refused, the server's before it connects, a client's at
the start, which stops the server naming it (:mod:`islands.hfl.checkpoint`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from islands.aggregation.config import SECTIONS
from islands.errors import JobError, ValidationError
from islands.hfl.checkpoint import check_resume, rows_digest
from islands.hfl.config import HflConfig, HflFederationConfig
from islands.hfl.estimator import client_seed, split_local_eval
from islands.hfl.job import Training, protection_settings, read_training
from islands.hfl.plan import TrainingPlan
from islands.hfl.protocol import ClientResult, ServerResult, client, server
from islands.hfl.strategy import check_client_rows
from islands.protocols import (
    Deployment,
    Prepared,
    ProtocolSpec,
    RoleSpec,
    load_column,
    load_table,
    party_key,
    save_json,
)
from islands.runtime.transport import DERIVED_SUFFIX

__all__ = ["SPEC", "hfl_training"]

_OWN = set(HflFederationConfig.model_fields)
_JOB = {"seed", "epochs", "task", "concurrency", "timeout", "eval_fraction", "model",
        "strategy", "protect", "server_optimizer", *SECTIONS}


def hfl_training(options: Mapping[str, Any], where: str, parties: tuple[str, ...]
                 ) -> tuple[Training, HflConfig]:
    """Check the federation's ``[hfl]`` training keys and sections, as a job's.

    The model, strategy, protection and server-optimiser keys, and the run's settings,
    are exactly those of a job file and are checked by the same code
    (:func:`~islands.hfl.job.read_training`); without a data set, the task is
    classification unless ``task`` says otherwise.

    Returns
    -------
    Training, HflConfig
        The typed training sections and the run's settings.
    """
    extra = sorted(set(options) - _OWN - _JOB)
    if extra:
        raise JobError(f"{where}: unknown key(s) {extra}; allowed: {sorted(_OWN | _JOB)}")
    party_key(options, "server", parties, where)
    for key in ("model", "strategy"):
        if key not in options:
            raise JobError(f"{where}: missing section [hfl.{key}]")
    if isinstance(options["model"], Mapping) and options["model"].get("metrics"):
        raise JobError(f"{where} [hfl.model]: 'metrics' are test metrics of a job run "
                       "(islands run); in a deployment no party holds a test set")
    return read_training({k: v for k, v in options.items() if k in _JOB}, where, dataset=None)


@dataclass(frozen=True)
class _Federated:
    training: Training
    run: HflConfig
    server: str
    clients: tuple[str, ...]
    shape: tuple[int, ...]
    classes: int | None
    checkpoint: bool


def _settings(options: Mapping[str, Any], where: str, parties: tuple[str, ...]) -> _Federated:
    training, run = hfl_training(options, where, parties)
    own = HflFederationConfig.from_table({k: v for k, v in options.items() if k in _OWN}, where)
    if training.task == "classification" and own.classes is None:
        raise JobError(f"{where}: a classification task needs 'classes' (the number of labels)")
    return _Federated(training, run, own.server, tuple(p for p in parties if p != own.server),
                      own.shape, own.classes, own.checkpoint)


def _common(dep: Deployment, fed: _Federated
            ) -> tuple[TrainingPlan, Path | None, dict[str, Any]]:
    """Return the federation's training plan, the checkpoint folder and the settings."""
    training = fed.training
    classification = training.task == "classification"
    # a factory's module is built here, from this machine's code: its digest joins the
    # hello's keys (_derived), so parties that built different initial models never start
    plan = training.plan(fed.shape, int(fed.classes) if classification and fed.classes
                         else 1, where=f"{dep.where} [hfl]")
    ckpt = dep.output.with_name(dep.output.name + ".checkpoints") if fed.checkpoint else None
    if ckpt is not None:
        ckpt.mkdir(parents=True, exist_ok=True)
    if dep.resume and ckpt is None:
        raise JobError(f"{dep.where}: resuming needs checkpoint = true")
    settings = plan.settings(eval_fraction=fed.run.eval_fraction,
                             extra=protection_settings(training.protection))
    return plan, ckpt, settings


def _derived(spec: Any) -> dict[str, str]:
    """Return the hello key of a factory model's initial state (none for a built-in one)."""
    digest = getattr(spec, "digest", None)
    return {} if digest is None else {f"hfl.model{DERIVED_SUFFIX}": str(digest)[:16]}


def _bind_server(dep: Deployment, fed: _Federated) -> Prepared:
    plan, ckpt, settings = _common(dep, fed)
    run = fed.run
    initial = plan.initial()
    resuming = dep.resume and ckpt is not None and (ckpt / "server.ckpt").is_file()
    if dep.resume and not resuming:
        checkpoint = dep.output.with_name(dep.output.name + ".checkpoints")
        raise JobError(f"party {dep.party!r}: --resume, but no server checkpoint in "
                       f"{checkpoint}")
    if resuming:  # before any connection: the settings, the epochs, a damaged file
        check_resume(ckpt, settings, epochs=run.epochs)  # type: ignore[arg-type]
    role = partial(server, clients=list(fed.clients), strategy=plan.strategy, initial=initial,
                   epochs=run.epochs, concurrency=run.concurrency, client_timeout=run.timeout,
                   checkpoint=ckpt, resume=resuming, sample_dp=plan.sample_dp,
                   settings=settings)

    def write(result: ServerResult, out: Path) -> dict[str, Any]:
        if result.params is not None:
            np.save(out / "params.npy", plan.model_part(result.params))
        summary = {
            "role": "server", "aggregations": result.aggregations,
            "rounds": len(result.rounds), "resumed_from": result.resumed_from,
            "counts": result.counts, "batch_sizes": result.batch_sizes,
            "steps_per_epoch": result.steps_per_epoch, "stopped": result.stopped,
            "dropouts": [{"round": d.round, "client": d.client, "reason": d.reason,
                          "stage": d.stage, "detail": d.detail} for d in result.dropouts],
            "privacy": result.privacy, "sample_privacy": result.sample_privacy,
            "privacy_against_server": result.privacy_against_server,
            "local_accuracy": [r.accuracy for r in result.rounds],
            "model_visible": result.params is not None,
        }
        save_json(out / "result.json", summary)
        return summary

    names = fed.training.protection.names
    protect = f" under {'+'.join(names)}" if names else ""
    return Prepared(role=role, write=write, tolerate=fed.clients, derived=_derived(plan.model),
                    description=f"{fed.training.strategy.name} server for {len(fed.clients)} "
                                f"clients{protect}")


def _client_loss(dep: Deployment, plan: TrainingPlan) -> Any:
    """Import and check the federation's ``[hfl.model] loss`` here (None: the task's)."""
    from islands.hfl.torch.loss import bind_loss  # torch

    where = f"{dep.where} [hfl.model]"
    try:
        return bind_loss(plan.loss_name, plan.model, plan.task, owner=where,
                         per_sample=plan.sample_dp is not None)
    except ValidationError as exc:
        raise JobError(f"{where}: {exc}") from None


def _client_data(dep: Deployment, fed: _Federated) -> tuple[np.ndarray, np.ndarray]:
    """Read a client's features and labels (the last column, or its labels file)."""
    name = dep.party
    X = load_table(dep.need("data", "hfl"), what=f"the data of party {name!r}")
    if dep.labels is not None:
        y = load_column(dep.labels, what=f"the labels of party {name!r}")
    else:
        X, y = X[:, :-1], X[:, -1]
    if len(y) != len(X):
        raise JobError(f"party {name!r}: {len(X)} rows of features but {len(y)} labels")
    width = int(np.prod(fed.shape))
    if X.shape[1] != width:
        shown = list(fed.shape) if len(fed.shape) > 1 else fed.shape[0]
        raise JobError(f"party {name!r}: its data has {X.shape[1]} feature columns; the "
                       f"federation's model takes {width} (features = {shown!r})")
    X = X.astype(np.float32).reshape(len(X), *fed.shape)
    if fed.training.task != "classification":
        return X, y.astype(np.float32)
    classes = int(fed.classes or 0)
    if not np.all(y == np.round(y)) or y.min() < 0 or y.max() >= classes:
        raise JobError(f"party {name!r}: labels must be integers in [0, {classes})")
    return X, y.astype(np.int64)


def _bind_client(dep: Deployment, fed: _Federated) -> Prepared:
    plan, ckpt, settings = _common(dep, fed)
    X, labels = _client_data(dep, fed)
    settings = {**settings, "clients": [dep.party], f"rows.{dep.party}": rows_digest(X, labels)}
    k = fed.clients.index(dep.party)
    seed = client_seed(plan.seed, k)
    tr, ev = split_local_eval(len(labels), fed.run.eval_fraction, seed)
    try:  # before anything is sent: the server would refuse it at the joins
        check_client_rows(plan.strategy, dep.party, len(tr), len(fed.clients),
                          eval_rows=len(ev))
    except ValidationError as exc:
        raise JobError(f"party file {dep.source}: {exc}") from None
    plan = replace(plan, loss=_client_loss(dep, plan))  # this party trains: its loss bound
    learner = plan.client(plan.learner(X[tr], labels[tr], X[ev], labels[ev], seed=seed))
    role = partial(client, server=fed.server, learner=learner, aggregator=plan.aggregator,
                   checkpoint=ckpt, resume=dep.resume, settings=settings)

    def write(result: ClientResult, out: Path) -> dict[str, Any]:
        if result.params is not None:
            np.save(out / "params.npy", plan.model_part(result.params))
        summary = {"role": "client", "rounds_trained": result.rounds_trained,
                   "n_train": result.n_train, "n_eval": result.n_eval,
                   "losses": result.losses}
        save_json(out / "result.json", summary)
        return summary

    return Prepared(role=role, write=write, derived=_derived(plan.model),
                    tolerate=tuple(c for c in fed.clients if c != dep.party),
                    description=f"{fed.training.strategy.name} client {k + 1}/{len(fed.clients)} "
                                f"with {len(tr)} training rows")


SPEC = ProtocolSpec(
    name="hfl", title="Horizontal FL (FedAvg, FedProx, APFL) with its protections",
    settings=_settings,
    assign=lambda fed, parties: {p: "server" if p == fed.server else "client"
                                 for p in parties},
    roles={"server": RoleSpec("server", _bind_server,
                              "Aggregates the clients' updates (no data file)."),
           "client": RoleSpec("client", _bind_client,
                              "Trains on its rows (data: features, labels in the last "
                              "column or in its labels file).")})
