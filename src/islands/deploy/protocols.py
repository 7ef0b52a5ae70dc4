"""From a party file to that party's role: the protocols ``islands party`` can run.

Each protocol here binds one party's own data and the federation's shared options to the
same role function the in-process estimators run (:mod:`islands.cca.protocol`,
:mod:`islands.pca.protocol`, :mod:`islands.hfl.protocol`), and says how to write that
party's result. Nothing is re-implemented: a deployed run and an in-process run with the
same inputs and seeds compute the same numbers.

Options by protocol (the federation file's ``[cca]``, ``[pca]`` or ``[hfl]`` section):

``cca`` (Swarm CCA, exactly two parties, each with its own block of columns, rows aligned)
    ``n_components``, ``threshold``, ``perturb`` (default true), ``reg``, ``rank_tol``:
    the settings of :class:`~islands.cca.config.SccaConfig`, with the estimator's defaults
    and constraints (``threshold`` in (0, 1], ``rank_tol`` in (0, 1)).
``pca`` (federated PCA; one party publishes, the others are sites in file order)
    ``publisher`` (party name, required), ``mode`` (required: files used to default to
    ``"secure"``, the estimator defaults to ``"plain"``), ``n_components`` (required),
    ``epsilon``, ``delta``, ``noise_seed``, ``block_size``: besides ``publisher``, the
    settings of :class:`~islands.pca.config.PcaSettings`, with the estimator's defaults
    and constraints (``epsilon`` and ``delta`` in (0, 1), both required by the DP modes
    and refused by ``plain``, as is ``noise_seed``).
``vfl`` (vertical linear or logistic regression, rows already aligned, e.g. by PSI)
    ``coordinator`` and ``active`` (party names, required; the others are passive, in
    file order), ``model`` (``"logistic"`` or ``"linear"``), ``learning_rate``,
    ``lam``, ``epochs``, ``batch_size``, ``seed``, ``tol``, ``key_bits``, ``djn``,
    ``feature_bits``, ``score_bits``. The active party's file holds the label in its
    last column (or ``labels``); for the logistic model, of exactly two classes.
``hfl`` (horizontal FL; one server, the others are clients in file order)
    ``server`` (party name, required), ``features``, ``classes`` (0 for regression),
    ``epochs``, ``seed``, ``task``, ``concurrency``, ``client_timeout``,
    ``eval_fraction``, and the job file's ``[model]``, ``[strategy]``, ``protect`` and
    protection sections (:mod:`islands.hfl.job`), nested under ``[hfl]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from islands.deploy.config import PartyConfig
from islands.errors import JobError, ValidationError
from islands.runtime import Role
from islands.validation import table_value

__all__ = ["Prepared", "load_table", "prepare"]

Writer = Callable[[Any, Path], dict[str, Any]]


@dataclass(frozen=True)
class Prepared:
    """One party's role, bound to its data, and how to write and summarise its result."""

    role: Role
    write: Writer
    description: str
    tolerate: tuple[str, ...] = ()
    """Peers whose failure leaves this party's result complete (a server's clients)."""


def load_table(path: Path, *, what: str) -> np.ndarray:
    """Read a whole CSV, NPY or Parquet file of numbers as a float64 matrix."""
    from islands.data.sources import open_source

    source = open_source(str(path), name=what)
    blocks = [np.asarray(b, dtype=np.float64) for b in source.blocks()]
    if not blocks:
        raise ValidationError(f"{what} ({path}) holds no rows")
    return np.concatenate(blocks, axis=0)


def _keys(options: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(options) - allowed)
    if extra:
        raise JobError(f"{where}: unknown key(s) {extra}; allowed: {sorted(allowed)}")


def _save_json(path: Path, obj: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2, default=float) + "\n", encoding="utf-8")


def _need_data(config: PartyConfig) -> Path:
    if config.data is None:
        raise JobError(f"party file {config.source}: party {config.name!r} needs its 'data' "
                       f"file for protocol {config.federation.protocol!r}")
    return config.data


# --------------------------------------------------------------------------- cca
def _cca(config: PartyConfig, resume: bool) -> Prepared:
    from islands.cca.config import SccaConfig
    from islands.cca.protocol import SccaResult, peer

    fed = config.federation
    where = f"federation file {fed.source} [cca]"
    settings = SccaConfig.from_table(fed.options, where)
    if len(fed.parties) != 2:
        raise JobError(f"{where}: Swarm CCA runs between exactly two parties; "
                       f"[parties] names {len(fed.parties)}")
    n_components = settings.n_components
    Z = load_table(_need_data(config), what=f"the data of party {config.name!r}")
    if n_components is not None and n_components > Z.shape[1]:
        raise JobError(f"{where}: n_components = {n_components} exceeds the {Z.shape[1]} "
                       f"columns of party {config.name!r}'s data")
    role = partial(peer, Z=Z, **dict(settings))

    def write(result: SccaResult, out: Path) -> dict[str, Any]:
        np.save(out / "weights.npy", result.weights)
        np.save(out / "mean.npy", result.mean)
        summary = {"role": result.role, "rank": result.rank,
                   "n_components": int(result.ratios.size),
                   "correlation_ratios": result.ratios.tolist(),
                   "canonical_correlations": (result.correlations.tolist() if result.exact
                                              else None)}
        _save_json(out / "result.json", summary)
        return summary

    return Prepared(role=role, write=write,
                    description=f"Swarm CCA on {Z.shape[0]} rows × {Z.shape[1]} columns")


# --------------------------------------------------------------------------- pca
def _pca(config: PartyConfig, resume: bool) -> Prepared:
    from islands.data.sources import open_source
    from islands.pca.config import PcaSettings
    from islands.pca.protocol import PcaConfig, publisher, site

    fed = config.federation
    where = f"federation file {fed.source} [pca]"
    o = fed.options
    if "seed" in o:
        raise JobError(f"{where}: 'seed' no longer seeds the DP noise (a shared seed lets anyone "
                       "who reads this file subtract it); remove it, or set 'noise_seed' to "
                       "make the noise reproducible, which voids the DP guarantee")
    _keys(o, {"publisher", *PcaSettings.model_fields}, where)
    pub = o.get("publisher")
    if not isinstance(pub, str) or pub not in fed.parties:
        raise JobError(f"{where}: 'publisher' must name a party of [parties]; got {pub!r}")
    sites = tuple(p for p in fed.parties if p != pub)
    if "mode" not in o:
        # files defaulted to "secure", FederatedPCA to "plain": never drop DP silently
        raise JobError(f"{where}: missing key 'mode'; federation files used to default to "
                       "'secure', FederatedPCA defaults to 'plain' (no noise): set mode = "
                       "\"secure\" to keep the old behaviour, or choose another mode")
    settings = PcaSettings.from_table({key: v for key, v in o.items() if key != "publisher"},
                                      where)
    mode, k = settings.mode, settings.n_components
    pca = PcaConfig(mode=mode, n_components=k, sites=sites, publisher=pub,
                    epsilon=settings.epsilon, delta=settings.delta,
                    noise_seed=settings.noise_seed)
    if config.name == pub:
        def write_pub(result: Any, out: Path) -> dict[str, Any]:
            np.save(out / "projection.npy", result.projection)
            summary = {"role": "publisher", "rows_per_site": result.rows_per_site,
                       "shape": list(result.projection.shape)}
            _save_json(out / "result.json", summary)
            return summary

        return Prepared(role=partial(publisher, config=pca), write=write_pub,
                        description=f"federated PCA publisher for {len(sites)} sites")
    source = open_source(str(_need_data(config)), block_size=settings.block_size,
                         name=f"the data of party {config.name!r}")
    if k > source.n_features:
        raise JobError(f"{where}: n_components = {k} exceeds the {source.n_features} columns "
                       f"of party {config.name!r}'s data")

    def write_site(result: Any, out: Path) -> dict[str, Any]:
        np.save(out / "components.npy", result.components)
        np.save(out / "mean.npy", result.mean)
        np.save(out / "eigenvalues.npy", result.eigenvalues)
        summary = {"role": "site", "mode": mode, "n_rows": result.n_rows,
                   "n_total": result.n_total, "tau": result.tau,
                   "noise_std": result.noise_std, "mean_noise_std": result.mean_noise_std,
                   "dp_guarantee": result.dp_guarantee,
                   "dp_void_reason": result.dp_void_reason,
                   "eigenvalues": result.eigenvalues.tolist()}
        _save_json(out / "result.json", summary)
        return summary

    return Prepared(role=partial(site, source=source, config=pca), write=write_site,
                    description=f"federated PCA ({mode}) site with {source.n_features} columns")


# --------------------------------------------------------------------------- hfl
_HFL_OWN = {"server", "features", "classes", "checkpoint"}
_HFL_JOB = {"seed", "epochs", "task", "concurrency", "timeout", "eval_fraction", "model",
            "strategy", "protect", "secagg", "additive", "ckks", "paillier", "chaos", "dp",
            "dp-sgd"}


def hfl_job(config: PartyConfig) -> Any:
    """Check the federation's ``[hfl]`` section as a job's training sections.

    The model, strategy and protection keys are exactly those of a job file
    (:mod:`islands.hfl.job`) and are checked by the same code; the job's ``[data]`` and
    ``[partition]``, which in a deployment each client's own file replaces, are filled
    with inert values only to pass that check.
    """
    from islands.hfl.job import parse_job

    fed = config.federation
    where = f"federation file {fed.source} [hfl]"
    o = fed.options
    _keys(o, _HFL_OWN | _HFL_JOB, where)
    server = o.get("server")
    if not isinstance(server, str) or server not in fed.parties:
        raise JobError(f"{where}: 'server' must name a party of [parties]; got {server!r}")
    for key in ("model", "strategy"):
        if key not in o:
            raise JobError(f"{where}: missing section [hfl.{key}]")
    raw = {k: v for k, v in o.items() if k in _HFL_JOB}
    raw.update(name=fed.name, data={"name": "digits"},
               partition={"kind": "iid", "clients": len(fed.parties) - 1}, baseline=False)
    raw.setdefault("task", "classification")
    return parse_job(raw, source=f"{fed.source} [hfl]")


def _hfl(config: PartyConfig, resume: bool) -> Prepared:
    from islands.hfl.estimator import client_seed, split_local_eval
    from islands.hfl.job import build_strategy
    from islands.hfl.learner import TorchLearner
    from islands.hfl.models import ModelSpec, flat_parameters
    from islands.hfl.protect import build_sample_dp
    from islands.hfl.protocol import ClientResult, ServerResult, client, server

    fed = config.federation
    where = f"federation file {fed.source} [hfl]"
    job = hfl_job(config)
    o = fed.options
    server_name = o["server"]
    clients = [p for p in fed.parties if p != server_name]
    classification = job.task == "classification"
    shape = o.get("features")
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = [shape]
    if (not isinstance(shape, list) or not shape
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in shape)):
        raise JobError(f"{where}: 'features' must be the input size (an int >= 1, or a shape "
                       f"such as [1, 28, 28] for a cnn); got {o.get('features')!r}")
    classes = table_value(o, "classes", (int,), where, None, lambda v: v >= 2, "an int >= 2")
    if classification and classes is None:
        raise JobError(f"{where}: a classification task needs 'classes' (the number of labels)")
    spec = ModelSpec(kind=job.model["kind"], input_shape=tuple(shape),
                     n_outputs=int(classes) if classification else 1,
                     hidden=tuple(job.model.get("hidden", [200])),
                     channels=tuple(job.model.get("channels", [16, 32])))
    strategy = build_strategy(job)
    sample_dp = build_sample_dp(job.protect, job.protect_options)
    checkpoint = config.output.with_name(config.output.name + ".checkpoints")
    keep = table_value(o, "checkpoint", (bool,), where, True)
    ckpt = checkpoint if keep else None
    if ckpt is not None:
        ckpt.mkdir(parents=True, exist_ok=True)
    if resume and ckpt is None:
        raise JobError(f"{where}: resuming needs checkpoint = true")

    if config.name == server_name:
        initial = flat_parameters(spec.build(job.seed))
        resuming = resume and ckpt is not None and (ckpt / "server.ckpt").is_file()
        if resume and not resuming:
            raise JobError(f"party {config.name!r}: --resume, but no server checkpoint in "
                           f"{checkpoint}")
        server_role: Role = partial(server, clients=clients, strategy=strategy, initial=initial,
                       epochs=job.epochs, concurrency=job.concurrency,
                       client_timeout=job.timeout, checkpoint=ckpt, resume=resuming,
                       sample_dp=sample_dp)

        def write_server(result: ServerResult, out: Path) -> dict[str, Any]:
            if result.params is not None:
                np.save(out / "params.npy", result.params)
            summary = {
                "role": "server", "aggregations": result.aggregations,
                "rounds": len(result.rounds), "resumed_from": result.resumed_from,
                "counts": result.counts, "batch_sizes": result.batch_sizes,
                "steps_per_epoch": result.steps_per_epoch, "stopped": result.stopped,
                "dropouts": [{"round": d.round, "client": d.client, "reason": d.reason,
                              "stage": d.stage, "detail": d.detail}
                             for d in result.dropouts],
                "privacy": result.privacy, "sample_privacy": result.sample_privacy,
                "local_accuracy": [r.accuracy for r in result.rounds],
                "model_visible": result.params is not None,
            }
            _save_json(out / "result.json", summary)
            return summary

        return Prepared(role=server_role, write=write_server, tolerate=tuple(clients),
                        description=f"{job.strategy['name']} server for {len(clients)} clients"
                        f"{' under ' + '+'.join(job.protect) if job.protect else ''}")

    X = load_table(_need_data(config), what=f"the data of party {config.name!r}")
    if config.labels is not None:
        y = load_table(config.labels, what=f"the labels of party {config.name!r}")
        if y.ndim == 2 and y.shape[1] != 1:
            raise JobError(f"party {config.name!r}: the labels file must hold one column; "
                           f"it has {y.shape[1]}")
        y = y.reshape(-1)
    else:
        X, y = X[:, :-1], X[:, -1]
    if len(y) != len(X):
        raise JobError(f"party {config.name!r}: {len(X)} rows of features but {len(y)} labels")
    width = int(np.prod(shape))
    if X.shape[1] != width:
        raise JobError(f"party {config.name!r}: its data has {X.shape[1]} feature columns; the "
                       f"federation's model takes {width} (features = {o.get('features')!r})")
    X = X.astype(np.float32).reshape(len(X), *shape)
    if classification:
        if not np.all(y == np.round(y)) or y.min() < 0 or y.max() >= classes:
            raise JobError(f"party {config.name!r}: labels must be integers in [0, {classes})")
        labels: np.ndarray = y.astype(np.int64)
    else:
        labels = y.astype(np.float32)
    k = clients.index(config.name)
    seed = client_seed(job.seed, k)
    tr, ev = split_local_eval(len(labels), job.eval_fraction, seed)
    learner = TorchLearner(spec, X[tr], labels[tr], X[ev], labels[ev], task=job.task,
                           seed=seed, dp=sample_dp)
    client_role: Role = partial(client, server=server_name, learner=learner,
                                aggregator=strategy.aggregator, checkpoint=ckpt, resume=resume)

    def write_client(result: ClientResult, out: Path) -> dict[str, Any]:
        if result.params is not None:
            np.save(out / "params.npy", result.params)
        summary = {"role": "client", "rounds_trained": result.rounds_trained,
                   "n_train": result.n_train, "n_eval": result.n_eval,
                   "losses": result.losses}
        _save_json(out / "result.json", summary)
        return summary

    return Prepared(role=client_role, write=write_client,
                    tolerate=tuple(c for c in clients if c != config.name),
                    description=f"{job.strategy['name']} client {k + 1}/{len(clients)} with "
                                f"{len(tr)} training rows")


# --------------------------------------------------------------------------- vfl
def _vfl(config: PartyConfig, resume: bool) -> Prepared:
    from islands.crypto import paillier
    from islands.vfl import maths as vmaths
    from islands.vfl.protocol import Plan, active, check_plan, coordinator, passive

    fed = config.federation
    where = f"federation file {fed.source} [vfl]"
    o = fed.options
    _keys(o, {"coordinator", "active", "model", "learning_rate", "lam", "epochs",
              "batch_size", "seed", "tol", "key_bits", "djn", "feature_bits", "score_bits"},
          where)
    roles = {}
    for key in ("coordinator", "active"):
        value = o.get(key)
        if not isinstance(value, str) or value not in fed.parties:
            raise JobError(f"{where}: {key!r} must name a party of [parties]; got {value!r}")
        roles[key] = value
    if roles["coordinator"] == roles["active"]:
        raise JobError(f"{where}: the coordinator and the active party must differ")
    c_name, b_name = roles["coordinator"], roles["active"]
    passives = [p for p in fed.parties if p not in (c_name, b_name)]
    if not passives:
        raise JobError(f"{where}: vertical FL needs at least one passive party besides the "
                       "coordinator and the active party")
    model = table_value(o, "model", (str,), where, "logistic",
                        lambda v: v in ("linear", "logistic"), "'linear' or 'logistic'")
    default_lr = 0.3 if model == "logistic" else 0.05
    lr = table_value(o, "learning_rate", (float, int), where, default_lr, lambda v: v > 0, "> 0")
    tol = table_value(o, "tol", (float, int), where, 1e-4, lambda v: v > 0, "> 0")
    lam = table_value(o, "lam", (float, int), where, 0.0, lambda v: v >= 0, ">= 0")
    try:
        plan = check_plan(Plan(
            model, float(lr), float(lam),
            table_value(o, "epochs", (int,), where, 20, lambda v: v >= 1, "an int >= 1"),
            table_value(o, "batch_size", (int,), where, 256, lambda v: v >= 1, "an int >= 1"),
            table_value(o, "seed", (int,), where, 0, lambda v: v >= 0, "an int >= 0"),
            float(tol), table_value(o, "feature_bits", (int,), where, 16),
            table_value(o, "score_bits", (int,), where, 32)), "[vfl]")
    except ValidationError as exc:
        raise JobError(f"{where}: {exc}") from None
    key_bits = table_value(o, "key_bits", (int,), where, paillier.DEFAULT_KEY_BITS,
                    lambda v: v >= paillier.MIN_KEY_BITS and v % 256 == 0,
                    f"an int >= {paillier.MIN_KEY_BITS}, a multiple of 256")
    djn = table_value(o, "djn", (bool,), where, True)

    def write_model(result: Any, out: Path) -> dict[str, Any]:
        np.save(out / "theta.npy", result.theta)
        summary = {"role": "active" if config.name == b_name else "passive",
                   "epochs": result.epochs, "features": int(result.theta.size)
                   - (config.name == b_name),
                   "note": "the active party's last weight is the intercept"}
        _save_json(out / "result.json", summary)
        return summary

    if config.name == c_name:
        def write_c(result: Any, out: Path) -> dict[str, Any]:
            summary = {"role": "coordinator", "epochs": result.epochs,
                       "epoch_losses": result.epoch_losses, "converged": result.converged,
                       "key_bits": result.key_bits}
            _save_json(out / "result.json", summary)
            return summary

        return Prepared(role=partial(coordinator, active=b_name, passive=passives, plan=plan,
                                     key_bits=key_bits, djn=djn),
                        write=write_c, description=f"vertical {model} regression coordinator")
    X = load_table(_need_data(config), what=f"the data of party {config.name!r}")
    if config.name == b_name:
        if config.labels is not None:
            y = load_table(config.labels, what=f"the labels of party {config.name!r}")
            y = y.reshape(-1)
        else:
            X, y = X[:, :-1], X[:, -1]
    try:  # the fixed-point range, checked before anything is sent
        vmaths.encode(X, plan.feature_bits, vmaths.MAX_ABS_FEATURE,
                      f"the data of party {config.name!r}", "islands party")
    except ValidationError as exc:
        raise JobError(str(exc)) from None
    if config.name != b_name:
        return Prepared(role=partial(passive, X=X, coordinator=c_name, active=b_name, plan=plan),
                        write=write_model,
                        description=f"vertical {model} regression, passive, {X.shape[1]} columns")
    if len(y) != len(X):
        raise JobError(f"party {config.name!r}: {len(X)} rows of features but {len(y)} labels")
    if model == "logistic":
        classes = np.unique(y)
        if classes.size != 2:
            raise JobError(f"party {config.name!r}: logistic regression needs exactly two "
                           f"classes in the labels; got {classes.size}")
        y = np.where(y == classes[1], 1.0, -1.0)
    return Prepared(role=partial(active, X=X, y=y, coordinator=c_name, passive=passives,
                                 plan=plan),
                    write=write_model,
                    description=f"vertical {model} regression, active, {X.shape[1]} columns")


_PROTOCOLS: dict[str, Callable[[PartyConfig, bool], Prepared]] = {
    "cca": _cca, "pca": _pca, "hfl": _hfl, "vfl": _vfl}


def prepare(config: PartyConfig, *, resume: bool = False) -> Prepared:
    """Load this party's data and bind its role; every error comes before any connection."""
    return _PROTOCOLS[config.federation.protocol](config, resume)
