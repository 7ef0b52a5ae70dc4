"""Vertical job files for ``islands run``, and the runner ``islands reproduce vfl`` shares.

The data sets, the split of their columns between the parties and each party's own IDs
(:func:`load_dataset`, :func:`split_columns`, :func:`own_views`) serve the SecureBoost
job (:mod:`islands.vfl.secureboost.job`) too.

A vertical job is a TOML file with ``kind = "vertical"``::

    name = "vfl-breast-cancer"
    kind = "vertical"
    seed = 0
    output = "runs/vfl-breast-cancer"

    [data]
    name = "breast_cancer"       # breast_cancer | diabetes | synthetic
    test_fraction = 0.2
    # rows = 100000              # synthetic only (features: [parties] b_features + a_features)

    [parties]
    b_features = 10              # B (labels) holds the first 10 columns
    passive = 1                  # the other columns are split between A_1 … A_k
    psi = true                   # every party gets its own IDs (5% of rows only its own,
                                 # its own order): rows are aligned by PSI first
    # max_peer_ratio = 10.0      # with psi: each party accepts at most this times its own
                                 # number of IDs from the other (the default, 10)
    # max_peer_size = 50000      # with psi: an absolute limit instead of the ratio
    # psi_engine = "spu"         # with psi: SecretFlow SPU's RR22 (`make spu`) instead of
                                 # "dh" (Diffie–Hellman, the default); same rows, same model
    # a_features = 20            # synthetic only

    [model]
    kind = "logistic"            # linear | logistic
    learning_rate = 0.3
    lam = 0.0
    epochs = 20
    batch_size = 256
    tol = 1e-4                   # "none": run every epoch
    key_bits = 2048              # below 2048 only with insecure_keys = true (tests only:
                                 # results.json and the run's output say so)
    djn = true
    # feature_bits = 16, score_bits = 32, he = "paillier" ("ou": HEU's Okamoto-Uchiyama;
    # "none": benchmarks only)
    # sigmoid = "poly5"          # logistic, engine "ss": a degree-5 polynomial sigmoid
                                 # instead of the Taylor loss (better calibrated)

    [tracking]                   # optional, as a horizontal job's (islands.tracking)
    tensorboard = true           # event files in <output>/tensorboard/<run name>

The ``[model]`` keys and the ``[parties]`` PSI settings are the settings of
:class:`~islands.vfl.config.VflConfig` (``kind`` is its ``objective``), with its
defaults and limits; the job's ``seed`` seeds the splits and is the estimator's
``random_state``, so the batch order's seed is ``draw_seed(seed)``
(:func:`islands.vfl.config.draw_seed`).

Each party standardises its own columns with its own training statistics (nothing
leaves the party); for the linear model B also standardises the target and the
predictions are mapped back. The test rows are scored by the inference protocol
(Table 2). The result holds the loss of every epoch, test metrics (R² and MSE, or
accuracy and ROC AUC) next to scikit-learn trained on the joined data, seconds per
epoch and each party's split between homomorphic work, plain compute and messaging.
With ``[tracking]`` (:class:`~islands.tracking.TrackingConfig`, the ``tracking`` extra)
the settings, the loss and seconds of every epoch (``train/loss``, ``train/seconds``,
step = epoch) and the final summary (test metrics, rows, bytes) go to TensorBoard and/or
MLflow once training ends: what ``results.json`` shows, never rows, weights or keys.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.data import load_fashion_mnist, load_sklearn, split_image_views
from islands.errors import JobError
from islands.reporting import new_figure, write_results
from islands.tracking import TrackingConfig, job_tracker
from islands.validation import file_section, read_job, read_toml, table_value
from islands.vfl import maths
from islands.vfl.config import RENAMED, VflConfig, describe_he, draw_seed
from islands.vfl.estimator import (
    VerticalLinearRegression,
    VerticalLogisticRegression,
    passive_names,
)
from islands.vfl.keys import insecure_key_note
from islands.vfl.parts import ModelPart
from islands.vfl.protocol import Clock

__all__ = ["FASHION_ROWS", "FASHION_TOPS", "JobError", "VerticalJob", "VerticalJobResult",
           "check_psi_keys", "id_of", "is_vertical", "job_header", "load_dataset",
           "load_vertical_job", "own_ids", "own_views", "parse_vertical_job", "rows_of",
           "run_vertical", "split_columns", "vertical_dataset", "write_vertical_outputs"]

_TOP = {"name", "kind", "seed", "output", "data", "parties", "model", "tracking"}
_DATA = {"name", "test_fraction", "rows"}
_PSI_KEYS = ("max_peer_size", "max_peer_ratio", "psi_engine")
"""The settings of :class:`VflConfig` a job file gives in ``[parties]``, with ``psi = true``."""
_PARTIES = {"b_features", "a_features", "passive", "psi", *_PSI_KEYS}
_MODEL = {"kind", *(set(VflConfig.model_fields) - {"objective", "seed", *_PSI_KEYS})}
_TRACKING = set(TrackingConfig.model_fields)
DATASETS = ("breast_cancer", "diabetes", "synthetic")



@dataclass(frozen=True)
class VerticalJob:
    """A checked vertical job (see the module docstring for the file format)."""

    name: str
    seed: int = 0
    output: str = "runs/vertical"
    data: dict[str, Any] = field(default_factory=dict)
    parties: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    source: str = "<job>"
    overrides: dict[str, Any] = field(default_factory=dict)
    tracking: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the job as plain values (``overrides``, ``tracking`` only when given)."""
        out = asdict(self)
        if not self.overrides:
            del out["overrides"]
        if self.tracking is None:
            del out["tracking"]
        return out

    def check_trackers(self) -> None:
        """Raise ImportError naming the extra when ``[tracking]`` asks for a missing tracker."""
        if self.tracking is not None:
            TrackingConfig.model_validate(self.tracking).check_installed()

    def config(self) -> VflConfig:
        """Return the model's settings, as the estimator builds them.

        ``[model]`` (``kind`` is the objective), the PSI settings of ``[parties]`` and the
        seed the estimator draws from the job's ``seed``. A job built in code may leave
        keys out: they take :class:`VflConfig`'s defaults.
        """
        where = f"job file {self.source}"
        limits = {k: self.parties[k] for k in _PSI_KEYS if k in self.parties}
        return VflConfig.from_file(self.model, f"{where} [model]", objective_key="kind",
                                   extra={**limits, "seed": draw_seed(self.seed, where)})


def load_vertical_job(path: str | Path, overrides: Sequence[str] = ()) -> VerticalJob:
    """Read and check a vertical job file, ``KEY=VALUE`` overrides applied first.

    The overrides (``islands run --set``, :func:`~islands.validation.apply_overrides`) are
    checked with the file and kept in :attr:`VerticalJob.overrides`.
    """
    job, applied = read_job(path, overrides,
                            lambda raw, source: parse_vertical_job(raw, source=source))
    return replace(job, overrides=applied)


def is_vertical(path: str | Path) -> bool:
    """Tell whether a job file declares ``kind = "vertical"`` (unreadable files: False)."""
    try:
        raw = read_toml(path)
    except (OSError, ValueError):
        return False
    return bool(raw.get("kind") == "vertical")


def job_header(raw: Mapping[str, Any], kind: str, allowed: set[str], source: str
               ) -> tuple[str, str, int, str]:
    """Check a job file's top level: its keys, ``kind``, ``name``, ``seed`` and ``output``.

    Keys outside ``allowed`` are refused; ``output`` defaults to ``runs/<name>``.

    Returns
    -------
    tuple
        Where errors say they are (``"job file <source>"``), the name, seed and output.
    """
    where = f"job file {source}"
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise JobError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    if raw.get("kind") != kind:
        raise JobError(f"{where}: kind must be {kind!r}")
    name = table_value(raw, "name", (str,), where, None, lambda v: bool(v), "a non-empty string")
    if name is None:
        raise JobError(f"{where}: missing key 'name'")
    seed = table_value(raw, "seed", (int,), where, 0, lambda v: v >= 0, "an int >= 0")
    return where, name, seed, table_value(raw, "output", (str,), where, f"runs/{name}")


def check_psi_keys(section: Mapping[str, Any], psi: bool, keys: Sequence[str],
                   where: str) -> None:
    """Refuse the PSI settings ``keys`` in ``section`` when the job does not align by PSI."""
    for key in keys:
        if key in section and not psi:
            raise JobError(f"{where}: {key!r} applies only with psi = true (it is a setting of "
                           "the private set intersection that aligns the rows)")


def parse_vertical_job(raw: Mapping[str, Any], *, source: str = "<job>") -> VerticalJob:
    """Check a parsed vertical job file; errors name the section and key."""
    where, name, seed, output = job_header(raw, "vertical", _TOP, source)
    pos_int = (lambda v: v >= 1, "an int >= 1")
    d = file_section(raw, "data", _DATA, where, required=False)
    dw = f"{where} [data]"
    data = {"name": table_value(d, "name", (str,), dw, "breast_cancer", lambda v: v in DATASETS,
                           f"one of {DATASETS}"),
            "test_fraction": float(table_value(d, "test_fraction", (float, int), dw, 0.2,
                                          lambda v: 0 < v < 1, "a number in (0, 1)")),
            "rows": table_value(d, "rows", (int,), dw, 10_000, *pos_int)}
    p = file_section(raw, "parties", _PARTIES, where, required=False)
    pw = f"{where} [parties]"
    parties = {"b_features": table_value(p, "b_features", (int,), pw, None, *pos_int),
               "a_features": table_value(p, "a_features", (int,), pw, 20, *pos_int),
               "passive": table_value(p, "passive", (int,), pw, 1, *pos_int),
               "psi": table_value(p, "psi", (bool,), pw, False)}
    # the PSI settings are the model's VflConfig's, checked in this section's words
    limits = VflConfig.from_file({k: p[k] for k in _PSI_KEYS if k in p}, pw,
                                 objective_key="kind")
    parties |= {k: getattr(limits, k) for k in _PSI_KEYS}
    check_psi_keys(p, parties["psi"], _PSI_KEYS, pw)
    m = file_section(raw, "model", _MODEL, where, required=False, renamed=RENAMED)
    config = VflConfig.from_file(m, f"{where} [model]", objective_key="kind",
                                 extra={k: parties[k] for k in _PSI_KEYS})
    model = {"kind": config.objective,
             **{k: getattr(config, k) for k in sorted(_MODEL - {"kind"})}}
    tracking = None
    if "tracking" in raw:
        tracking = dict(TrackingConfig.from_table(
            file_section(raw, "tracking", _TRACKING, where), f"{where} [tracking]"))
    return VerticalJob(name, seed, output, data, parties, model, source, tracking=tracking)


# ----------------------------------------------------------------------------- data


FASHION_TOPS = (0, 2, 4, 6)
"""Fashion-MNIST's tops (T-shirt/top, Pullover, Coat, Shirt): the positive class of the
binary task the ``fashion_mnist`` data of a job sets."""
FASHION_ROWS = 60_000
"""Images in Fashion-MNIST's training split, the most a job's ``rows`` can ask for."""


def load_dataset(name: str, *, regression: bool, seed: int, rows: int,
                 b_features: int | None, a_features: int = 20
                 ) -> tuple[NDArray[np.float64], NDArray[Any], int]:
    """Return a job's rows, targets and B's column count (B holds the first columns).

    Parameters
    ----------
    name
        ``"breast_cancer"``, ``"diabetes"``, ``"synthetic"`` (a noisy linear target of
        Gaussian columns, thresholded at 0 unless ``regression``) or ``"fashion_mnist"``
        (the first ``rows`` training images, the left image halves' 392 pixels first,
        then the right halves'; the label is 1 for :data:`FASHION_TOPS`, else 0).
    regression
        Synthetic data: a real target instead of 0/1 labels.
    seed
        Seeds the synthetic data.
    rows
        Rows of synthetic data, or Fashion-MNIST images to load.
    b_features
        B's columns; None: 20 (synthetic), 392 (fashion_mnist, the left halves) or a
        third of the columns.
    a_features
        Synthetic data: the columns besides B's.

    Raises
    ------
    JobError
        When ``b_features`` leaves no column to the other parties.
    DataNotFoundError
        When Fashion-MNIST's files are not installed (the message says how to get them).
    """
    if name == "synthetic":
        b = b_features or 20
        width = b + a_features
        rng = np.random.default_rng([seed, 17])
        X = rng.normal(size=(rows, width))
        coef = rng.normal(size=width) / np.sqrt(width)
        z = X @ coef + 0.3 * rng.normal(size=X.shape[0])
        return X, (z if regression else (z > 0).astype(np.int64)), b
    if name == "fashion_mnist":
        ds = load_fashion_mnist(split="train", n_samples=rows)
        assert ds.image_shape is not None
        X = np.hstack(split_image_views(ds.X, ds.image_shape, how="left-right"))
        y = np.isin(ds.y, FASHION_TOPS).astype(np.int64)
        default = X.shape[1] // 2
    else:
        ds = load_sklearn(name)
        X, y = np.asarray(ds.X, dtype=np.float64), np.asarray(ds.y)
        default = X.shape[1] // 3
    width = X.shape[1]
    b = b_features or default
    if not 1 <= b < width:
        raise JobError(f"b_features must be in [1, {width - 1}] for {name}; got {b}")
    return np.asarray(X, dtype=np.float64), y, b


def vertical_dataset(job: VerticalJob) -> tuple[NDArray[np.float64], NDArray[Any], int]:
    """Return a vertical job's rows, targets and B's column count (:func:`load_dataset`)."""
    name = job.data["name"]
    if name != "synthetic" and (name == "diabetes") != (job.model["kind"] == "linear"):
        raise JobError(f"job {job.name!r}: {name} is a "
                       f"{'regression' if name == 'diabetes' else 'classification'} data "
                       f"set; use model kind "
                       f"{'linear' if name == 'diabetes' else 'logistic'}")
    try:
        return load_dataset(name, regression=job.model["kind"] == "linear", seed=job.seed,
                            rows=job.data["rows"], b_features=job.parties["b_features"],
                            a_features=job.parties["a_features"])
    except JobError as exc:
        raise JobError(f"job {job.name!r}: {exc}") from None


def split_columns(width: int, b: int, passive: int) -> list[NDArray[np.intp]]:
    """Return the column indices of A_1 … A_k, then B's (the first ``b`` columns).

    The columns after B's are shared out in order, as evenly as they go.
    """
    rest = np.arange(b, width)
    if passive > rest.size:
        raise JobError(f"{passive} passive parties cannot share {rest.size} columns")
    return [*np.array_split(rest, passive), np.arange(b)]


def _scaling(train: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Return a party's standardisation of its columns: its training rows' mean and std."""
    mean, std = train.mean(axis=0), train.std(axis=0)
    return mean, np.where(std > 0, std, 1.0)


def own_ids(n: int, party: int, seed: int) -> tuple[NDArray[np.intp], list[str]]:
    """Return a party's rows in its own order, 5% of them missing, and their IDs.

    Simulates what a deployment has: every party lists its own people, in its own order,
    and lacks some the others hold. Row i's ID is :func:`id_of` (i).
    """
    rng = np.random.default_rng([seed, 101, party])
    keep = np.sort(rng.choice(n, size=n - max(1, n // 20), replace=False))
    order = rng.permutation(keep)
    return order, [id_of(i) for i in order]


def id_of(row: int) -> str:
    """Return the ID :func:`own_ids` gives row ``row``."""
    return f"id-{row:07d}"


def rows_of(ids: Sequence[str]) -> NDArray[np.intp]:
    """Return the rows of IDs made by :func:`own_ids` (the inverse of :func:`id_of`)."""
    return np.asarray([int(str(v)[3:]) for v in ids], dtype=np.intp)


def own_views(blocks_a: Sequence[NDArray[np.float64]], block_b: NDArray[np.float64],
              target: NDArray[Any], seed: int
              ) -> tuple[list[NDArray[np.float64]], NDArray[np.float64], NDArray[Any],
                         dict[str, Any]]:
    """Give every party its own rows and IDs (:func:`own_ids`), as in a deployment.

    Returns each passive party's rows, B's rows and targets, and the ``ids_a`` and
    ``ids_b`` arguments of a vertical estimator's ``fit``, which align the rows by
    private set intersection.
    """
    views = []
    for k, block in enumerate([*blocks_a, np.column_stack([block_b, target])]):
        rows, ids = own_ids(block.shape[0], k, seed)
        views.append((block[rows], ids))
    fit_args = {"ids_a": [v[1] for v in views[:-1]] if len(views) > 2 else views[0][1],
                "ids_b": views[-1][1]}
    b_view = views[-1][0]
    return [v[0] for v in views[:-1]], b_view[:, :-1], b_view[:, -1], fit_args


# ----------------------------------------------------------------------------- run


@dataclass(frozen=True)
class VerticalJobResult:
    """What :func:`run_vertical` returns; :meth:`to_json` is ``results.json``.

    ``metrics`` holds ``accuracy`` and ``auc`` (logistic) or ``r2`` and ``mse`` (linear),
    each also as ``sklearn_<name>`` for scikit-learn trained on the joined data.
    ``per_epoch_split`` is, per party, its seconds per epoch (a :class:`Clock`);
    ``aligned_ids`` the rows PSI aligned (None without PSI);
    ``max_abs_diff_to_centralised_gd`` the distance to centralised gradient descent on
    the same batches (None with PSI).
    """

    job: VerticalJob
    settings: VflConfig
    train_rows: int
    test_rows: int
    passive_features: list[int]
    active_features: int
    loss_history: list[float]
    batch_losses: list[float]
    epochs_run: int
    converged: bool
    metrics: dict[str, float]
    epoch_seconds: list[float]
    per_epoch_split: dict[str, Clock]
    bytes: int
    bytes_by_tag: dict[str, int]
    aligned_ids: int | None
    max_abs_diff_to_centralised_gd: float | None
    wall_time_s: float
    tracking: dict[str, Any] | None = None
    parts: list[ModelPart] = field(default_factory=list, repr=False)
    """Each party's part of the trained model (``party-<name>.json``; not in results.json)."""

    def to_json(self) -> dict[str, Any]:
        """Return ``results.json``: the keys and order it has always had.

        Keys below the 2048-bit floor (``insecure_keys``) add ``"security_warning"``
        after ``settings``: the warning in words.
        """
        note = insecure_key_note(self.settings.he, self.settings.key_bits)
        out = {
            "job": self.job.to_dict(),
            "settings": self.settings.model_dump(),
            **({"security_warning": note} if note else {}),
            "rows": {"train_aligned": self.train_rows, "test": self.test_rows},
            "features": {"passive": self.passive_features, "active": self.active_features},
            "loss_history": self.loss_history,
            "batch_losses": self.batch_losses,
            "epochs_run": self.epochs_run,
            "converged": self.converged,
            "metrics": self.metrics,
            "epoch_seconds": self.epoch_seconds,
            "per_epoch_split": {name: asdict(c) for name, c in self.per_epoch_split.items()},
            "bytes": self.bytes,
            "bytes_by_tag": self.bytes_by_tag,
            "aligned_ids": self.aligned_ids,
            "max_abs_diff_to_centralised_gd": self.max_abs_diff_to_centralised_gd,
        }
        if self.tracking is not None:
            out["tracking"] = self.tracking
        out["wall_time_s"] = self.wall_time_s
        return out


def run_vertical(job: VerticalJob, *, progress: Callable[[str], None] | None = None,
                 output: str | Path | None = None) -> VerticalJobResult:
    """Train one vertical job and return its results, logged to its trackers.

    Parameters
    ----------
    job
        From :func:`load_vertical_job`.
    progress
        Called with a short message at each step.
    output
        The run's folder (default: the job's ``output``): ``tracking.tensorboard = true``
        writes under ``<output>/tensorboard``, the default MLflow store is
        ``<output>/mlruns``.

    Raises
    ------
    ImportError
        When ``[tracking]`` asks for a tracker that is not installed (before anything runs).
    TrackingError
        When a tracker cannot start (before anything runs).
    """
    tracker = job_tracker(job.tracking, output if output is not None else job.output,
                          job.name, job.overrides, job.to_dict())
    try:
        result = _run_vertical(job, progress)
    except BaseException:
        if tracker is not None:
            tracker.close(failed=True)
        raise
    if tracker is None:
        return result
    for epoch, (loss, seconds) in enumerate(
            zip(result.loss_history, result.epoch_seconds, strict=False), 1):
        tracker.log_metrics({"train/loss": loss, "train/seconds": seconds}, epoch)
    tracker.log_summary({**result.metrics, "epochs_run": result.epochs_run,
                         "converged": result.converged, "train_rows": result.train_rows,
                         "test_rows": result.test_rows, "aligned_ids": result.aligned_ids,
                         "bytes": result.bytes, "objective": result.settings.objective,
                         "engine": result.settings.engine, "he": result.settings.he,
                         "key_bits": result.settings.key_bits})
    tracker.close()
    return replace(result, tracking=tracker.info())


def _run_vertical(job: VerticalJob, progress: Callable[[str], None] | None
                  ) -> VerticalJobResult:
    """Train one vertical job (:func:`run_vertical`, without the trackers)."""
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.metrics import accuracy_score, mean_squared_error, r2_score, roc_auc_score
    from sklearn.model_selection import train_test_split

    say = progress or (lambda _m: None)
    start = time.perf_counter()
    config = job.config()
    X, y, b = vertical_dataset(job)
    logistic = config.objective == "logistic"
    x_tr, x_te, y_tr, y_te = train_test_split(
        X, y, test_size=job.data["test_fraction"], random_state=job.seed,
        stratify=y if logistic else None)
    cols = split_columns(X.shape[1], b, job.parties["passive"])
    scaling = [_scaling(x_tr[:, c]) for c in cols]
    parts_tr, parts_te = zip(*(((x_tr[:, c] - m) / s, (x_te[:, c] - m) / s)
                               for c, (m, s) in zip(cols, scaling, strict=True)), strict=True)
    y_mean, y_std = (0.0, 1.0) if logistic else (float(y_tr.mean()), float(y_tr.std()))
    target = y_tr if logistic else (y_tr - y_mean) / y_std
    kind = VerticalLogisticRegression if logistic else VerticalLinearRegression
    # the estimator draws config.seed again from random_state=job.seed
    est = kind(random_state=job.seed, **{k: getattr(config, k) for k in kind._param_names()
                                         if k in VflConfig.model_fields})
    blocks_a, block_b = list(parts_tr[:-1]), parts_tr[-1]
    fit_args: dict[str, Any] = {}
    if job.parties["psi"]:
        say("aligning rows by private set intersection"
            + (" on SecretFlow SPU's RR22" if config.psi_engine == "spu" else ""))
        blocks_a, block_b, target, fit_args = own_views(blocks_a, block_b, target,
                                                        job.seed)
    say(f"training {config.objective} regression " + (
        "in the clear (he = 'none')" if config.he == "none" else
        f"under {describe_he(config.he, config.key_bits, config.djn)}"))
    est.fit(blocks_a if len(blocks_a) > 1 else blocks_a[0], block_b, target, **fit_args)
    a_test = list(parts_te[:-1])
    test_a = a_test if len(a_test) > 1 else a_test[0]
    # one run of the inference protocol (Table 2) scores the test rows
    z = (est.decision_function(test_a, parts_te[-1])
         if isinstance(est, VerticalLogisticRegression) else est.predict(test_a, parts_te[-1]))
    joined_tr, joined_te = np.hstack(parts_tr), np.hstack(parts_te)
    metrics: dict[str, Any]
    if isinstance(est, VerticalLogisticRegression):
        labels = np.where(z > 0, est.classes_[1], est.classes_[0])
        ref = LogisticRegression(max_iter=2000).fit(joined_tr, y_tr)
        metrics = {"accuracy": float(accuracy_score(y_te, labels)),
                   "auc": float(roc_auc_score(y_te, z)),
                   "sklearn_accuracy": float(accuracy_score(y_te, ref.predict(joined_te))),
                   "sklearn_auc": float(roc_auc_score(y_te, ref.decision_function(joined_te)))}
    else:
        pred = z * y_std + y_mean
        ref_pred = LinearRegression().fit(joined_tr, y_tr).predict(joined_te)
        metrics = {"r2": float(r2_score(y_te, pred)), "mse": float(mean_squared_error(y_te, pred)),
                   "sklearn_r2": float(r2_score(y_te, ref_pred)),
                   "sklearn_mse": float(mean_squared_error(y_te, ref_pred))}
    lossless = None
    if not job.parties["psi"]:
        plan = est.plan_
        ref_thetas, _ = maths.centralised_gd(
            [*blocks_a, block_b], np.asarray(est._encode_targets(target, block_b.shape[0])),
            objective=plan.loss, lam=plan.lam, learning_rate=plan.learning_rate,
            epochs=est.n_epochs_, batch_size=plan.batch_size, seed=plan.seed)
        coefs = [est.coef_a_] if isinstance(est.coef_a_, np.ndarray) else list(est.coef_a_)
        got = np.concatenate([*coefs, est.coef_b_, [est.intercept_]])
        lossless = float(np.max(np.abs(got - np.concatenate(ref_thetas))))
    epoch_s = est.epoch_seconds_
    epochs = max(est.n_epochs_, 1)
    coefs = [est.coef_a_] if isinstance(est.coef_a_, np.ndarray) else list(est.coef_a_)
    names = passive_names(len(coefs))
    model_parts = [ModelPart(party=name, role="passive", objective=config.objective,
                             weights=np.asarray(w, dtype=np.float64), mean=m, scale=s,
                             columns=[int(v) for v in c])
                   for name, w, c, (m, s) in zip(names, coefs, cols[:-1], scaling[:-1],
                                                 strict=True)]
    model_parts.append(ModelPart(
        party="B", role="active", objective=config.objective,
        weights=np.asarray(est.coef_b_, dtype=np.float64), mean=scaling[-1][0],
        scale=scaling[-1][1], columns=[int(v) for v in cols[-1]], intercept=est.intercept_,
        target_mean=y_mean, target_scale=y_std,
        classes=([_plain(v) for v in est.classes_]
                 if isinstance(est, VerticalLogisticRegression) else None)))
    return VerticalJobResult(
        job=job, settings=config,
        train_rows=int(block_b.shape[0]) if est.ids_ is None else len(est.ids_),
        test_rows=int(x_te.shape[0]),
        passive_features=[int(c.size) for c in cols[:-1]], active_features=int(cols[-1].size),
        loss_history=est.loss_history_, batch_losses=est.batch_losses_,
        epochs_run=est.n_epochs_, converged=bool(est.converged_), metrics=metrics,
        epoch_seconds=epoch_s,
        per_epoch_split={name: Clock(**{k: v / epochs for k, v in asdict(c).items()})
                         for name, c in est.timing_.items()},
        bytes=est.transcript_.total_bytes,
        bytes_by_tag={t: v.nbytes for t, v in est.transcript_.totals("tag").items()},
        aligned_ids=None if est.ids_ is None else len(est.ids_),
        max_abs_diff_to_centralised_gd=lossless, wall_time_s=time.perf_counter() - start,
        parts=model_parts)


def _plain(value: Any) -> Any:
    """Return a class label as a plain JSON value (a numpy scalar as Python's)."""
    return value.item() if isinstance(value, np.generic) else value


def write_vertical_outputs(result: VerticalJobResult, out: str | Path, *,
                           json_path: str | Path | None = None) -> list[Path]:
    """Write ``results.json``, ``loss.png`` and each party's ``party-<name>.json``, as one set.

    Each party's file is its part of the trained model (:class:`~islands.vfl.parts.ModelPart`:
    its weights and standardisation, B's intercept and the target's scale or classes): in
    a deployment each party writes its own; here, one process simulates them all.

    See :func:`islands.hfl.job.write_outputs`: staged, renamed together, ``manifest.json``
    last; an :class:`~islands.errors.OutputError` names the file and leaves the previous
    results unchanged.
    """
    with write_results(result, out, json_path) as files:
        fig = new_figure(6.4, 4.0)
        ax = fig.subplots()
        losses = result.loss_history
        ax.plot(range(1, len(losses) + 1), losses, marker="o")
        ax.set_xlabel("epoch")
        ax.set_ylabel("loss (decrypted by C)")
        ax.set_title(f"{result.job.name}: {result.settings.objective} regression")
        ax.grid(alpha=0.3)
        files.add_figure("loss.png", fig)
        for part in result.parts:
            files.add_json(f"party-{part.party}.json", part.to_json())
    return files.published
