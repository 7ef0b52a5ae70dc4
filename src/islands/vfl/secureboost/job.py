"""SecureBoost job files for ``islands run``: training, federated inference, XGBoost beside.

A SecureBoost job is a TOML file with ``kind = "secureboost"``::

    name = "secureboost-breast-cancer"
    kind = "secureboost"
    seed = 0
    output = "runs/secureboost-breast-cancer"

    [data]
    name = "breast_cancer"       # breast_cancer | diabetes | synthetic | fashion_mnist
    test_fraction = 0.2
    # rows = 5000                # synthetic: rows made; fashion_mnist: the first training
                                 # images loaded (at most 60000)
    # features = 30              # synthetic only: columns in all

    [parties]
    b_features = 10              # B (labels) holds the first 10 columns; the others are
    passive = 1                  # split between A_1 … A_k (fashion_mnist: B holds the
                                 # left image halves, 392 pixels, by default)
    psi = true                   # every party gets its own IDs (5% of rows only its own,
                                 # its own order): rows are aligned by PSI first
    # max_peer_ratio = 10.0, max_peer_size = 50000, psi_engine = "spu": as a vertical job's

    [model]                      # BoostConfig's settings, with its defaults and limits
    # objective = "binary"       # default: from the data ("regression" for diabetes;
                                 # synthetic data is binary unless told "regression")
    n_estimators = 15
    max_depth = 3
    learning_rate = 0.3
    max_bins = 32
    key_bits = 2048              # below 2048 only with insecure_keys = true (tests only)

The ``[model]`` keys and the ``[parties]`` PSI settings are those of
:class:`~islands.vfl.secureboost.config.BoostConfig`; the job's ``seed`` seeds the
split of the rows and is the estimator's ``random_state``. Fashion-MNIST's task is
binary: tops (T-shirt/top, Pullover, Coat, Shirt) against the rest, with the left and
right image halves as the parties' features (:func:`islands.vfl.job.load_dataset`).

The run trains :class:`~islands.vfl.secureboost.SecureBoostClassifier` (or the
regressor) on the training rows (Cheng et al. 2021, Algorithms 1–2), scores the test
rows by federated inference once (:meth:`~SecureBoostClassifier.staged_decision_function`
gives the score after every tree), and trains XGBoost's ``hist`` method on the joined
training rows binned with the same cuts (:func:`~islands.vfl.secureboost.maths.bin_edges`),
the same settings and the same starting score: without sampling, early stopping or
hardening the two models are the same trees, which the test margins show
(``max_abs_margin_diff``). ``results.json`` holds the settings, each tree's training
loss, test AUC or R² (both models) and seconds, the test metrics, the bytes exchanged
and the gain of each party's features; ``report.png`` draws them, ``trees.txt`` lists
every tree with its splits' thresholds (which in a deployment no single party can
print), and ``party-<name>.json`` is each party's part of the model, as a deployed
party writes it (:mod:`islands.vfl.secureboost.spec`).

References
----------
Cheng, K., Fan, T., Jin, Y., Liu, Y., Chen, T., Papadopoulos, D., Yang, Q. "SecureBoost:
A Lossless Federated Learning Framework." IEEE Intelligent Systems 36(6), 2021.
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from islands.data import find_fashion_mnist
from islands.errors import DataNotFoundError, JobError
from islands.progress import ProgressUpdate, task
from islands.reporting import new_figure, write_results
from islands.validation import file_section, read_job, table_value
from islands.vfl.config import draw_seed
from islands.vfl.estimator import passive_names
from islands.vfl.job import (
    FASHION_ROWS,
    check_psi_keys,
    job_header,
    load_dataset,
    own_views,
    rows_of,
    split_columns,
)
from islands.vfl.keys import insecure_key_note
from islands.vfl.secureboost.config import BoostConfig, describe_he
from islands.vfl.secureboost.estimator import SecureBoostClassifier, SecureBoostRegressor
from islands.vfl.secureboost.maths import Tree, apply_bins, bin_edges
from islands.vfl.secureboost.model import LookupTable

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["DATASETS", "SecureBoostJob", "SecureBoostJobResult", "describe",
           "load_secureboost_job", "parse_secureboost_job", "report_figure", "run_secureboost",
           "write_secureboost_outputs"]

DATASETS = ("breast_cancer", "diabetes", "synthetic", "fashion_mnist")
_WIDTH = {"breast_cancer": 30, "diabetes": 10, "fashion_mnist": 784}
_TOP = {"name", "kind", "seed", "output", "data", "parties", "model"}
_DATA = {"name", "test_fraction", "rows", "features"}
_PSI_KEYS = ("max_peer_size", "max_peer_ratio", "psi_engine")
_PARTIES = {"b_features", "passive", "psi", *_PSI_KEYS}
_MODEL = set(BoostConfig.model_fields) - {"seed", *_PSI_KEYS}
_TASK = "SecureBoost"  # the estimator's progress task: one update per tree


@dataclass(frozen=True)
class SecureBoostJob:
    """A checked SecureBoost job (see the module docstring for the file format)."""

    name: str
    seed: int = 0
    output: str = "runs/secureboost"
    data: dict[str, Any] = field(default_factory=dict)
    parties: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    source: str = "<job>"
    overrides: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the job as plain values, ``kind`` first (``overrides`` only when given)."""
        out = {"kind": "secureboost", **asdict(self)}
        if not self.overrides:
            del out["overrides"]
        return out

    def check_data(self) -> None:
        """Raise DataNotFoundError, saying how to install it, when the data set is missing."""
        if self.data["name"] == "fashion_mnist" and find_fashion_mnist() is None:
            raise DataNotFoundError(
                f"job file {self.source} [data]: name = 'fashion_mnist' needs Fashion-MNIST, "
                "which is not installed: apt-get install dataset-fashion-mnist, or set "
                "ISLANDS_FASHION_MNIST to the folder holding its IDX files")

    def config(self) -> BoostConfig:
        """Return the model's settings as the estimator builds them (seed drawn from the job's)."""
        where = f"job file {self.source}"
        values = {**self.model, **{k: self.parties[k] for k in _PSI_KEYS if k in self.parties},
                  "seed": draw_seed(self.seed, where)}
        return BoostConfig.from_table(values, f"{where} [model]")


def load_secureboost_job(path: str | Path, overrides: Sequence[str] = ()) -> SecureBoostJob:
    """Read and check a SecureBoost job file, ``KEY=VALUE`` overrides applied first."""
    job, applied = read_job(path, overrides,
                            lambda raw, source: parse_secureboost_job(raw, source=source))
    return replace(job, overrides=applied)


def _objective(given: Any, data: str, where: str) -> str:
    """Return the objective the data set fixes, refusing another one given in [model]."""
    fixed = {"diabetes": "regression", "breast_cancer": "binary", "fashion_mnist": "binary"}
    expected: tuple[str, ...] = (("binary", "regression") if data == "synthetic"
                                 else (fixed[data],))
    if given is None:
        return expected[0]
    if given not in expected:
        allowed = " or ".join(repr(v) for v in expected)
        raise JobError(f"{where}: 'objective' must be {allowed} for the data set {data!r}; "
                       f"got {given!r}")
    return str(given)


def parse_secureboost_job(raw: Mapping[str, Any], *, source: str = "<job>") -> SecureBoostJob:
    """Check a parsed SecureBoost job file; errors name the section and key."""
    where, name, seed, output = job_header(raw, "secureboost", _TOP, source)

    d = file_section(raw, "data", _DATA, where, required=False)
    dw = f"{where} [data]"
    dataset = table_value(d, "name", (str,), dw, "breast_cancer", lambda v: v in DATASETS,
                          f"one of {DATASETS}")
    for key, names in (("rows", ("synthetic", "fashion_mnist")), ("features", ("synthetic",))):
        if key in d and dataset not in names:
            raise JobError(f"{dw}: {key!r} applies only to {' and '.join(names)}")
    limit = FASHION_ROWS if dataset == "fashion_mnist" else 10_000_000
    data = {"name": dataset,
            "test_fraction": float(table_value(d, "test_fraction", (float, int), dw, 0.2,
                                               lambda v: 0 < v < 1, "a number in (0, 1)")),
            "rows": table_value(d, "rows", (int,), dw, 5000, lambda v: 10 <= v <= limit,
                                f"an int in [10, {limit}]"),
            "features": table_value(d, "features", (int,), dw, 30,
                                    lambda v: 2 <= v <= 10_000, "an int in [2, 10000]")}
    width = data["features"] if dataset == "synthetic" else _WIDTH[dataset]

    p = file_section(raw, "parties", _PARTIES, where, required=False)
    pw = f"{where} [parties]"
    parties = {"b_features": table_value(p, "b_features", (int,), pw, None,
                                         lambda v: 1 <= v < width,
                                         f"an int in [1, {width - 1}] for {dataset}"),
               "passive": table_value(p, "passive", (int,), pw, 1, lambda v: v >= 1,
                                      "an int >= 1"),
               "psi": table_value(p, "psi", (bool,), pw, False)}
    b = parties["b_features"] or _default_b(dataset, width)
    if parties["passive"] > width - b:
        raise JobError(f"{pw}: 'passive' must be at most {width - b} (one column each of the "
                       f"{width - b} B does not hold); got {parties['passive']}")
    check_psi_keys(p, parties["psi"], _PSI_KEYS, pw)
    # the PSI settings are the model's BoostConfig's, checked in this section's words
    limits = BoostConfig.from_table({"objective": "binary",
                                     **{k: p[k] for k in _PSI_KEYS if k in p}}, pw)
    parties |= {k: getattr(limits, k) for k in _PSI_KEYS}

    m = file_section(raw, "model", _MODEL, where, required=False)
    mw = f"{where} [model]"
    objective = _objective(m.get("objective"), dataset, mw)
    config = BoostConfig.from_table({**m, "objective": objective,
                                     **{k: parties[k] for k in _PSI_KEYS}}, mw)
    model = {k: getattr(config, k) for k in sorted(_MODEL)}
    return SecureBoostJob(name, seed, output, data, parties, model, source)


def _default_b(dataset: str, width: int) -> int:
    """B's columns when ``b_features`` is not given: the left image halves, or a third."""
    return width // 2 if dataset == "fashion_mnist" else max(1, width // 3)


# ----------------------------------------------------------------------------- run


@dataclass(frozen=True)
class SecureBoostJobResult:
    """What :func:`run_secureboost` returns; :meth:`to_json` is ``results.json``.

    ``metrics`` holds ``auc`` and ``accuracy`` (binary) or ``r2`` and ``mse``
    (regression), each also as ``xgboost_<name>`` when XGBoost ran. ``per_tree`` has one
    record per tree kept: ``train_loss``, ``test_<metric>``, ``xgboost_test_<metric>`` and
    ``seconds`` (the first tree's include the keys, the alignment and the binning).
    ``importance`` maps each party to its columns (of the joined data), their total
    gain and split count; ``xgboost`` says which XGBoost ran and how far its test margins
    are from SecureBoost's, or why it did not run.
    """

    job: SecureBoostJob
    settings: BoostConfig
    train_rows: int
    test_rows: int
    passive_features: list[int]
    active_features: int
    metric: str
    metrics: dict[str, float]
    per_tree: list[dict[str, float]]
    validation_loss: list[float]
    seconds_per_tree: float
    training_s: float
    bytes: int
    bytes_by_tag: dict[str, int]
    aligned_ids: int | None
    importance: dict[str, dict[str, list[Any]]]
    xgboost: dict[str, Any]
    wall_time_s: float
    plot_skipped: str | None = None
    trees: str = field(default="", repr=False)
    """Every tree in words (``trees.txt``; not in results.json)."""
    parts: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    """Each party's part of the model (``party-<name>.json``; not in results.json)."""

    def gain_by_party(self) -> dict[str, float]:
        """Return the total gain of each party's splits."""
        return {p: float(sum(v["gain"])) for p, v in self.importance.items()}

    def to_json(self) -> dict[str, Any]:
        """Return ``results.json``; keys below 2048 bits add ``security_warning``."""
        note = insecure_key_note(self.settings.he, self.settings.key_bits)
        return {
            "job": self.job.to_dict(),
            "settings": self.settings.model_dump(),
            **({"security_warning": note} if note else {}),
            "rows": {"train_aligned": self.train_rows, "test": self.test_rows},
            "features": {"passive": self.passive_features, "active": self.active_features},
            "metric": self.metric,
            "metrics": self.metrics,
            "per_tree": self.per_tree,
            "validation_loss": self.validation_loss,
            "trees_kept": len(self.per_tree),
            "seconds_per_tree": self.seconds_per_tree,
            "training_s": self.training_s,
            "bytes": self.bytes,
            "bytes_by_tag": self.bytes_by_tag,
            "aligned_ids": self.aligned_ids,
            "gain_by_party": self.gain_by_party(),
            "importance": self.importance,
            "xgboost": self.xgboost,
            **({"plot_skipped": self.plot_skipped} if self.plot_skipped else {}),
            "wall_time_s": self.wall_time_s,
        }


def run_secureboost(job: SecureBoostJob, *,
                    progress: Callable[[ProgressUpdate], None] | None = None
                    ) -> SecureBoostJobResult:
    """Train one SecureBoost job and compare it with XGBoost on the same bins.

    Parameters
    ----------
    job
        From :func:`load_secureboost_job`.
    progress
        Called with each step's :class:`~islands.progress.ProgressUpdate`: the task
        ``"SecureBoost"`` once per tree (its ``info`` the training loss), then
        ``"inference"`` and ``"XGBoost"``.

    Raises
    ------
    DataNotFoundError
        When the job asks for Fashion-MNIST and it is not installed.
    """
    from sklearn.model_selection import train_test_split

    start = time.perf_counter()
    config = job.config()
    regression = config.objective == "regression"
    dataset = job.data["name"]
    width = job.data["features"] if dataset == "synthetic" else _WIDTH[dataset]
    b = job.parties["b_features"] or _default_b(dataset, width)
    X, y, b = load_dataset(dataset, regression=regression, seed=job.seed,
                           rows=job.data["rows"], b_features=b, a_features=width - b)
    x_tr, x_te, y_tr, y_te = train_test_split(
        X, y, test_size=job.data["test_fraction"], random_state=job.seed,
        stratify=None if regression else y)
    cols = split_columns(X.shape[1], b, job.parties["passive"])
    blocks_a, block_b = [x_tr[:, c] for c in cols[:-1]], x_tr[:, cols[-1]]
    target: NDArray[Any] = y_tr
    fit_args: dict[str, Any] = {}
    if job.parties["psi"]:
        blocks_a, block_b, target, fit_args = own_views(blocks_a, block_b, target, job.seed)

    stamps: dict[int, float] = {}

    def on_update(update: ProgressUpdate) -> None:
        if update.task == _TASK:
            stamps.setdefault(update.done, time.perf_counter())
        if progress is not None:
            progress(update)

    kind = SecureBoostRegressor if regression else SecureBoostClassifier
    est = kind(random_state=job.seed, progress=on_update,
               **{k: getattr(config, k) for k in kind._param_names()
                  if k in BoostConfig.model_fields})
    fit_start = time.perf_counter()
    est.fit(blocks_a if len(blocks_a) > 1 else blocks_a[0], block_b, target, **fit_args)
    training_s = time.perf_counter() - fit_start
    trees = est.n_estimators_
    rows = np.arange(x_tr.shape[0]) if est.ids_ is None else rows_of(est.ids_)

    a_test = [x_te[:, c] for c in cols[:-1]]
    with task(on_update, "inference", 1) as bar:
        bar.update(0, f"{x_te.shape[0]} test rows, one run for all {trees} trees")
        staged = list(est.staged_decision_function(a_test if len(a_test) > 1 else a_test[0],
                                                   x_te[:, cols[-1]]))
    metric = "r2" if regression else "auc"
    score = _scorer(metric, y_te)
    curve = [score(s) for s in staged]
    metrics = _metrics(regression, y_te, staged[-1], est)
    xgb_info, xgb_stages = _xgboost(est, config, x_tr[rows], y_tr[rows], x_te, job.seed,
                                    on_update)
    if xgb_stages is not None:
        metrics |= {f"xgboost_{k}": v for k, v in
                    _metrics(regression, y_te, xgb_stages[-1], None).items()}
        xgb_info["max_abs_margin_diff"] = float(np.max(np.abs(xgb_stages[-1] - staged[-1])))

    seconds = [stamps.get(r + 1, np.nan) - stamps.get(r, np.nan) for r in range(trees)]
    steady = seconds[1:] or seconds
    per_tree: list[dict[str, float]] = []
    for r in range(trees):
        record = {"tree": r + 1, "train_loss": float(est.train_loss_[r]),
                  f"test_{metric}": curve[r]}
        if xgb_stages is not None:
            record[f"xgboost_test_{metric}"] = score(xgb_stages[r])
        per_tree.append({**record, "seconds": float(seconds[r])})

    names = [*passive_names(len(cols) - 1), "B"]
    columns = dict(zip(names, cols, strict=True))
    gains, splits = est.feature_importances("gain"), est.feature_importances("split")
    importance: dict[str, dict[str, list[Any]]] = {
        n: {"columns": [int(c) for c in columns[n]], "gain": [float(v) for v in gains[n]],
            "split": [float(v) for v in splits[n]]} for n in ["B", *names[:-1]]}
    return SecureBoostJobResult(
        job=job, settings=config, train_rows=int(rows.size), test_rows=int(x_te.shape[0]),
        passive_features=[int(c.size) for c in cols[:-1]], active_features=int(cols[-1].size),
        metric=metric, metrics=metrics, per_tree=per_tree,
        validation_loss=[float(v) for v in est.validation_loss_],
        seconds_per_tree=float(np.mean(steady)), training_s=training_s,
        bytes=int(est.transcript_.total_bytes),
        bytes_by_tag={t: v.nbytes for t, v in est.transcript_.totals("tag").items()},
        aligned_ids=None if est.ids_ is None else len(est.ids_), importance=importance,
        xgboost=xgb_info, wall_time_s=time.perf_counter() - start,
        plot_skipped=(None if importlib.util.find_spec("matplotlib") is not None else
                      "matplotlib is not installed (pip install 'islands[plot]')"),
        trees=_trees_text(est, columns), parts=_parts(est, columns))


def _scorer(metric: str, truth: NDArray[Any]) -> Callable[[NDArray[np.float64]], float]:
    """Return the test metric of raw scores: ROC AUC of the margins, or R²."""
    from sklearn.metrics import r2_score, roc_auc_score

    if metric == "auc":
        return lambda raw: float(roc_auc_score(truth, raw))
    return lambda raw: float(r2_score(truth, raw))


def _metrics(regression: bool, truth: NDArray[Any], raw: NDArray[np.float64],
             est: Any) -> dict[str, float]:
    """Return R² and MSE, or AUC and accuracy (a positive margin predicts the larger class)."""
    from sklearn.metrics import mean_squared_error, r2_score, roc_auc_score

    if regression:
        return {"r2": float(r2_score(truth, raw)),
                "mse": float(mean_squared_error(truth, raw))}
    classes = np.unique(truth) if est is None else est.classes_
    labels = np.where(raw > 0, classes[1], classes[0])
    return {"auc": float(roc_auc_score(truth, raw)),
            "accuracy": float(np.mean(labels == truth))}


def _xgboost(est: Any, config: BoostConfig, x_tr: NDArray[np.float64], y_tr: NDArray[Any],
             x_te: NDArray[np.float64], seed: int,
             progress: Callable[[ProgressUpdate], None]
             ) -> tuple[dict[str, Any], list[NDArray[np.float64]] | None]:
    """Train XGBoost ``hist`` on the joined training rows, binned with SecureBoost's cuts.

    Every column is cut by :func:`bin_edges` at ``max_bins`` on the aligned training
    rows, as each party cuts its own, and XGBoost gets the bin codes (NaN for missing):
    at most ``max_bins`` distinct values, each its own XGBoost bin. With the same
    settings and starting score (``base_margin``) it grows the same trees.

    Returns
    -------
    tuple
        What ran (version, whether the settings allow the same trees), and the test
        margins after each tree; None instead of them when XGBoost is not importable.
    """
    same = not (config.subsample < 1 or config.colsample_bytree < 1 or config.goss
                or config.early_stopping_rounds is not None or config.hardened())
    try:
        xgb = importlib.import_module("xgboost")
    except ImportError as exc:
        return {"skipped": f"xgboost is not importable ({exc}); pip install xgboost-cpu"}, None
    trees = est.n_estimators_
    with task(progress, "XGBoost", trees) as bar:
        bar.update(0, f"hist, {trees} trees on the joined rows, same bins")
        edges = [bin_edges(x_tr[:, j], config.max_bins) for j in range(x_tr.shape[1])]

        def codes(x: NDArray[np.float64]) -> NDArray[np.float64]:
            out = apply_bins(x, edges, config.max_bins).astype(np.float64)
            out[np.isnan(x)] = np.nan
            return out

        settings = {"n_estimators": trees, "max_depth": config.max_depth,
                    "learning_rate": config.learning_rate, "reg_lambda": config.reg_lambda,
                    "gamma": config.gamma, "min_child_weight": config.min_child_weight,
                    "subsample": config.subsample, "colsample_bytree": config.colsample_bytree,
                    "tree_method": "hist", "max_bin": 256, "n_jobs": 1, "random_state": seed}
        base = float(est.model_.base[0])
        regression = config.objective == "regression"
        model = (xgb.XGBRegressor(**settings) if regression
                 else xgb.XGBClassifier(**settings))
        target = y_tr if regression else np.unique(y_tr, return_inverse=True)[1]
        model.fit(codes(x_tr), target, base_margin=np.full(x_tr.shape[0], base))
        test, margin = codes(x_te), np.full(x_te.shape[0], base)
        stages = [np.asarray(model.predict(test, output_margin=True, base_margin=margin,
                                           iteration_range=(0, r + 1)), dtype=np.float64)
                  for r in range(trees)]
        bar.update(trees)
    return {"version": str(xgb.__version__), "tree_method": "hist", "same_trees_expected": same,
            "why_not": None if same else "row or column sampling, GOSS, early stopping or "
            "hardening draw or choose differently from XGBoost"}, stages


def _trees_text(est: Any, columns: Mapping[str, NDArray[np.intp]]) -> str:
    """Return every tree in words: each split's owner, column and threshold, each leaf's weight.

    Only this simulation, which plays every party, can print it: in a deployment the
    active party knows of a passive party's split only its owner and record number.
    """
    names = ["B", *passive_names(len(columns) - 1)]
    lines = ["SecureBoost trees (columns numbered as the job loads the data; x < t goes left,",
             "a missing value as marked). Deployed, no party could print this: thresholds",
             "stay with the party that owns the feature.", ""]
    for r, built in enumerate(est.model_.trees, 1):
        for k, tree in enumerate(built):
            lines.append(f"tree {r}" + (f", output {k}" if len(built) > 1 else ""))
            lines += _node_lines(tree, 0, 1, names, est.tables_, columns)
            lines.append("")
    return "\n".join(lines)


def _node_lines(tree: Tree, i: int, depth: int, names: Sequence[str],
                tables: Mapping[str, LookupTable],
                columns: Mapping[str, NDArray[np.intp]]) -> list[str]:
    """Return node ``i`` of ``tree`` and its subtree, indented by depth."""
    pad = "  " * depth
    if tree.party[i] < 0:
        return [f"{pad}leaf {tree.value[i]:+.6f} (cover {tree.cover[i]:.4g})"]
    party = names[tree.party[i]]
    record = tables[party].records[tree.record[i]]
    column = int(columns[party][record.feature])
    missing = "left" if record.missing_left else "right"
    head = (f"{pad}[{party}] x{column} < {record.threshold:.6g} (missing: {missing}; "
            f"gain {tree.gain[i]:.4g}, cover {tree.cover[i]:.4g})")
    return [head, *_node_lines(tree, tree.left[i], depth + 1, names, tables, columns),
            *_node_lines(tree, tree.right[i], depth + 1, names, tables, columns)]


def _parts(est: Any, columns: Mapping[str, NDArray[np.intp]]) -> dict[str, dict[str, Any]]:
    """Return each party's part of the model as a deployed party writes it, with its columns."""
    passive = passive_names(len(columns) - 1)
    classes = ([v.item() if isinstance(v, np.generic) else v for v in est.classes_]
               if hasattr(est, "classes_") else [])
    out: dict[str, dict[str, Any]] = {}
    for name in ["B", *passive]:
        role: dict[str, Any] = {
            "party": name, "role": "active" if name == "B" else "passive",
            "protocol": "secureboost", "features": int(columns[name].size),
            "columns": [int(c) for c in columns[name]]}
        if name == "B":
            role |= {"passive": passive, "classes": classes, "model": est.model_.to_dict()}
        out[name] = {**role, **est.tables_[name].to_dict()}
    return out


def write_secureboost_outputs(result: SecureBoostJobResult, out: str | Path, *,
                              json_path: str | Path | None = None) -> list[Path]:
    """Write ``results.json``, ``report.png``, ``trees.txt`` and each party's part, as one set.

    ``report.png`` (matplotlib; left out, with ``plot_skipped`` saying why, without it)
    draws the test AUC or R² after each tree for SecureBoost and XGBoost, the training
    loss per tree, and the gain of the most useful features coloured by their party.
    See :func:`islands.hfl.job.write_outputs` for how the set is written.
    """
    with write_results(result, out, json_path) as files:
        if result.plot_skipped is None:
            files.add_figure("report.png", report_figure(result))
        files.add_text("trees.txt", result.trees + "\n")
        for name, part in result.parts.items():
            files.add_json(f"party-{name}.json", part)
    return files.published


def report_figure(result: SecureBoostJobResult) -> Figure:
    """Draw the test metric per tree, the training loss per tree and the gain by party."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    fig = new_figure(15.0, 4.2)
    curve, loss, bars = fig.subplots(1, 3, width_ratios=[1, 1, 1.4])
    label = {"auc": "test ROC AUC", "r2": "test R²"}[result.metric]
    trees = [r["tree"] for r in result.per_tree]
    curve.plot(trees, [r[f"test_{result.metric}"] for r in result.per_tree], marker="o",
               label="SecureBoost (federated inference)")
    key = f"xgboost_test_{result.metric}"
    if result.per_tree and key in result.per_tree[0]:
        curve.plot(trees, [r[key] for r in result.per_tree], marker="x", linestyle="--",
                   label="XGBoost hist, joined data, same bins")
    curve.set(xlabel="trees", ylabel=label, title=f"{result.job.name}: {label} per tree")
    curve.legend()
    loss.plot(trees, [r["train_loss"] for r in result.per_tree], marker="o", label="training")
    if result.validation_loss:
        loss.plot(range(1, len(result.validation_loss) + 1), result.validation_loss,
                  marker=".", label="validation")
        loss.legend()
    loss.set(xlabel="trees", ylabel="mean loss",
             title=f"{result.settings.objective} loss per tree")
    colours = {p: f"C{i}" for i, p in enumerate(result.importance)}
    ranked = sorted(((g, p, c) for p, v in result.importance.items()
                     for g, c in zip(v["gain"], v["columns"], strict=True) if g > 0),
                    reverse=True)[:20]
    bars.bar(range(len(ranked)), [g for g, _, _ in ranked],
             color=[colours[p] for _, p, _ in ranked])
    bars.set_xticks(range(len(ranked)), [f"x{c}" for _, _, c in ranked], rotation=90,
                    fontsize=8)
    totals = result.gain_by_party()
    bars.legend(handles=[Patch(color=colour, label=f"{p}: total gain {totals[p]:.4g}")
                         for p, colour in colours.items()])
    bars.set(ylabel="total gain", title=f"feature importance (gain) by party, top {len(ranked)}")
    for ax in (curve, loss):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (curve, loss, bars):
        ax.grid(alpha=0.3)
    return fig


def describe(job: SecureBoostJob, config: BoostConfig) -> str:
    """Return the job in one line, as ``islands run`` starts it."""
    k = job.parties["passive"]
    psi = ", rows aligned by PSI" if job.parties["psi"] else ""
    return (f"SecureBoost ({config.objective}) on {job.data['name']}, {k} passive "
            f"part{'y' if k == 1 else 'ies'} + B{psi}, {describe_he(config.he, config.key_bits)}"
            f", {config.n_estimators} trees of depth {config.max_depth}, {config.max_bins} bins")
