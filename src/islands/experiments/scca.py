"""Reproduce the experiments of the Swarm CCA paper (Li & Du 2024, Figs 3-7).

:func:`reproduce_scca` runs the paper's three experiments on offline substitutes for its
data (HAPT accelerometer/gyroscope and IMDB-WIKI faces are not shipped): two-view
Fashion-MNIST and scikit-learn digits, each image cut into a left and a right half, one
half per peer. It writes ``report.md``, ``results.json`` and five PNG figures.

(a) Figs 3-4 - principal vectors and relative 1-NN accuracy. SCCA is fitted once, with
    the paper's perturbation, on the training views. Under perturbation only the
    correlation *ratios* ρ_i/ρ_1 are known, so the paper's threshold on "the canonical
    correlation" is applied to the ratios: for each threshold t (0.95 down to 0.15, step
    0.05) the d pairs with ratio ≥ t are kept (at least one). Relative accuracy =
    100 % × acc(1-NN on the d canonical variates) / acc(1-NN on the raw pixels), for each
    view alone and for both views concatenated; data-size ratio = d/p per view and
    2d/(p+q) concatenated.
(b) Figs 5-6 - six classifiers (naive Bayes, LDA, AdaBoost, random forest of 10 trees,
    1-NN, linear SVM) on raw pixels and on SCCA features, keeping the pairs whose ratio
    is at least the 0.65 quantile of all ratios (the paper's rule; about 35 % of them):
    accuracy and fit time.
(c) Fig 7 - SCCA (quantile 0.65 rule, both views' variates) vs PCA (95 % of the
    variance of the concatenated raw views) vs centralised CCA (top 15 % of min(p, q)
    pairs, both views' variates), each followed by LDA, over random draws of a training
    and a test set.

Deviations from the paper, all deliberate: other data (above); scikit-learn's
``LinearDiscriminantAnalysis`` (SVD solver) stands for MATLAB's pseudo-linear
discriminant and ``LinearSVC`` on standardised inputs for the SVM; in (c) the training
and test sets are drawn from the training and test parts of our data, as the paper drew
them from separate candidate pools. Both image halves have constant (border) pixels, so
every CCA here uses the rank-revealing option ``rank_tol=1e-10``.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.cca.estimator import SwarmCCA
from islands.cca.maths import pooled_cca
from islands.data import load_fashion_mnist, load_sklearn, split_image_views
from islands.experiments.report import (
    Progress,
    ReproductionResult,
    agreement_table,
    markdown_table,
    new_figure,
    reports_progress,
    save_figure,
    setup_run,
    thread_limit,
    two_datasets,
    write_json,
)
from islands.progress import ProgressOption

__all__ = [
    "CCA_FRACTION",
    "CLASSIFIERS",
    "FEATURE_SETS",
    "METHODS",
    "PCA_VARIANCE",
    "QUANTILE",
    "RANK_TOL",
    "SVM_C",
    "THRESHOLDS",
    "reproduce_scca",
]

Array = NDArray[np.float64]
Labels = NDArray[np.int64]

#: Thresholds on the correlation ratio, 0.95 down to 0.15 (paper, Fig. 3).
THRESHOLDS: Array = np.round(np.arange(0.95, 0.149, -0.05), 2)
#: Quantile of the ratios above which pairs are kept in (b) and (c) (paper, §4.3).
QUANTILE = 0.65
#: Fraction of min(p, q) pairs kept by centralised CCA in (c) (paper, Fig. 7).
CCA_FRACTION = 0.15
#: Share of variance kept by PCA in (c) (paper, Fig. 7).
PCA_VARIANCE = 0.95
#: Rank tolerance for every CCA (image halves have constant pixels).
RANK_TOL = 1e-10
#: The six classifiers of Figs 5-6.
CLASSIFIERS = ("NB", "LDA", "AdaBoost", "RF", "1-NN", "SVM")
#: Feature sets of Figs 5-6: both raw views, the X view's raw pixels, SCCA X-view
#: variates, SCCA variates of both views concatenated.
FEATURE_SETS = ("raw", "raw_x", "scca_x", "scca_xy")
#: Dimension-reduction methods of Fig. 7.
METHODS = ("SCCA", "PCA", "CCA")

#: LinearSVC's C: with C = 1, liblinear needs thousands of iterations on standardised
#: pixels (minutes at n = 10000); C = 0.01 converges in about a hundred.
SVM_C = 0.01
#: Percentage points a curve must rise before, and fall after, its peak to be "bell-shaped".
BELL_MARGIN = 0.5

_FEATURE_LABELS = {
    "raw": "raw, both views",
    "raw_x": "raw, X view",
    "scca_x": "SCCA, X view",
    "scca_xy": "SCCA, X+Y views",
}
_VIEW_LABELS = {"x": "X view (left half)", "y": "Y view (right half)",
                "concat": "X+Y concatenated"}


@dataclass(frozen=True)
class _Settings:
    quick: bool
    random_state: int
    thresholds: Array
    fashion_train: int
    fashion_test: int
    digits_test_fraction: float
    n_repeats: int
    compare_sizes: dict[str, tuple[int, int]]
    adaboost_estimators: int
    svm_max_iter: int
    n_threads: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "quick": self.quick, "random_state": self.random_state,
            "thresholds": self.thresholds, "fashion_train": self.fashion_train,
            "fashion_test": self.fashion_test,
            "digits_test_fraction": self.digits_test_fraction,
            "n_repeats": self.n_repeats,
            "compare_sizes": {k: list(v) for k, v in self.compare_sizes.items()},
            "quantile": QUANTILE, "cca_fraction": CCA_FRACTION,
            "pca_variance": PCA_VARIANCE, "rank_tol": RANK_TOL, "protocol": "paper",
            "perturb": True,
            "adaboost_estimators": self.adaboost_estimators,
            "svm_max_iter": self.svm_max_iter, "svm_c": SVM_C, "bell_margin": BELL_MARGIN,
            "n_threads": self.n_threads,
        }


def _settings(quick: bool, random_state: int, n_threads: int | None) -> _Settings:
    if quick:
        return _Settings(quick=True, random_state=random_state, thresholds=THRESHOLDS[::2],
                         fashion_train=1500, fashion_test=300, digits_test_fraction=0.3,
                         n_repeats=5,
                         compare_sizes={"fashion_mnist": (1000, 200), "digits": (1200, 300)},
                         adaboost_estimators=10, svm_max_iter=2000,
                         n_threads=n_threads)
    return _Settings(quick=False, random_state=random_state, thresholds=THRESHOLDS,
                     fashion_train=10000, fashion_test=2000, digits_test_fraction=0.3,
                     n_repeats=30,
                     compare_sizes={"fashion_mnist": (3000, 300), "digits": (1200, 300)},
                     adaboost_estimators=50, svm_max_iter=5000,
                     n_threads=n_threads)


@dataclass(frozen=True)
class _TwoViews:
    """One data set cut into two views, with a train and a test part."""

    name: str
    title: str
    X_tr: Array
    Y_tr: Array
    X_te: Array
    Y_te: Array
    lab_tr: Labels
    lab_te: Labels

    @property
    def p(self) -> int:
        return int(self.X_tr.shape[1])

    @property
    def q(self) -> int:
        return int(self.Y_tr.shape[1])


def _load_fashion(s: _Settings) -> _TwoViews:
    train = load_fashion_mnist(split="train", n_samples=s.fashion_train)
    test = load_fashion_mnist(split="test", n_samples=s.fashion_test)
    assert train.image_shape is not None
    X_tr, Y_tr = split_image_views(train.X, train.image_shape)
    X_te, Y_te = split_image_views(test.X, train.image_shape)
    return _TwoViews("fashion_mnist", "Fashion-MNIST", X_tr, Y_tr, X_te, Y_te,
                     train.y.astype(np.int64), test.y.astype(np.int64))


def _load_digits(s: _Settings) -> _TwoViews:
    from sklearn.model_selection import train_test_split

    ds = load_sklearn("digits")
    assert ds.image_shape is not None
    X, Y = split_image_views(ds.X, ds.image_shape)
    labels = ds.y.astype(np.int64)
    i_tr, i_te = train_test_split(np.arange(labels.size), test_size=s.digits_test_fraction,
                                  stratify=labels, random_state=s.random_state)
    return _TwoViews("digits", "scikit-learn digits", X[i_tr], Y[i_tr], X[i_te], Y[i_te],
                     labels[i_tr], labels[i_te])


# ----------------------------------------------------------------------------- helpers
def _fit_scca(X: Array, Y: Array) -> tuple[SwarmCCA, float]:
    start = time.perf_counter()
    model = SwarmCCA(protocol="paper", perturb=True, rank_tol=RANK_TOL).fit(X, Y)
    return model, time.perf_counter() - start


def _scores(model: SwarmCCA, X: Array, Y: Array) -> tuple[Array, Array]:
    out = model.transform(X, Y)
    assert isinstance(out, tuple)
    return out


def _quantile_d(ratios: Array) -> tuple[int, float]:
    """Pairs kept by the quantile rule: ratio ≥ the QUANTILE quantile of all ratios."""
    cutoff = float(np.quantile(ratios, QUANTILE))
    return max(1, int(np.sum(ratios >= cutoff))), cutoff


def _one_nn(F_tr: Array, lab_tr: Labels, F_te: Array, lab_te: Labels) -> float:
    from sklearn.neighbors import KNeighborsClassifier

    clf = KNeighborsClassifier(n_neighbors=1, algorithm="brute")
    return float(clf.fit(F_tr, lab_tr).score(F_te, lab_te))


def _lda_accuracy(F_tr: Array, lab_tr: Labels, F_te: Array, lab_te: Labels) -> float:
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Variables are collinear"
        clf = LinearDiscriminantAnalysis().fit(F_tr, lab_tr)
        return float(clf.score(F_te, lab_te))


def _classifiers(s: _Settings) -> dict[str, Callable[[], Any]]:
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.ensemble import AdaBoostClassifier, RandomForestClassifier
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    rs = s.random_state
    return {
        "NB": GaussianNB,
        "LDA": LinearDiscriminantAnalysis,
        "AdaBoost": lambda: AdaBoostClassifier(n_estimators=s.adaboost_estimators,
                                               random_state=rs),
        "RF": lambda: RandomForestClassifier(n_estimators=10, random_state=rs),
        "1-NN": lambda: KNeighborsClassifier(n_neighbors=1),
        "SVM": lambda: make_pipeline(
            StandardScaler(), LinearSVC(C=SVM_C, dual="auto", max_iter=s.svm_max_iter,
                                        random_state=rs)),
    }


def _box_stats(values: Array) -> dict[str, float | int]:
    """Median, quartiles, extremes and outliers by the 1.5 × IQR rule (as in box plots)."""
    q1, med, q3 = (float(v) for v in np.quantile(values, [0.25, 0.5, 0.75]))
    iqr = q3 - q1
    outliers = int(np.sum((values < q1 - 1.5 * iqr) | (values > q3 + 1.5 * iqr)))
    return {"median": med, "q1": q1, "q3": q3, "iqr": iqr, "min": float(values.min()),
            "max": float(values.max()), "mean": float(values.mean()),
            "n_outliers": outliers}


# ------------------------------------------------------------------- (a) Figs 3 and 4
def _curve_shape(values: Array, thresholds: Array, d: NDArray[np.int64]) -> dict[str, Any]:
    k = int(np.argmax(values))
    rise = float(values[k] - values[0])
    fall = float(values[k] - values[-1])
    interior = 0 < k < values.size - 1
    return {
        "peak_index": k, "peak_threshold": float(thresholds[k]), "peak_d": int(d[k]),
        "peak_value": float(values[k]), "rise": rise, "fall": fall,
        "bell_shaped": bool(interior and rise >= BELL_MARGIN and fall >= BELL_MARGIN),
        "above_100": bool(values.max() > 100.0),
    }


def _threshold_sweep(data: _TwoViews, s: _Settings, say: Progress) -> tuple[dict[str, Any],
                                                                             SwarmCCA]:
    say(f"[{data.name}] (a) fitting SCCA once on {data.X_tr.shape[0]} training samples")
    model, fit_time = _fit_scca(data.X_tr, data.Y_tr)
    ratios = np.asarray(model.correlation_ratios_, dtype=np.float64)
    XA_tr, YB_tr = _scores(model, data.X_tr, data.Y_tr)
    XA_te, YB_te = _scores(model, data.X_te, data.Y_te)
    say(f"[{data.name}] (a) SCCA fit {fit_time:.2f} s, {ratios.size} pairs; raw 1-NN")
    raw = {
        "x": _one_nn(data.X_tr, data.lab_tr, data.X_te, data.lab_te),
        "y": _one_nn(data.Y_tr, data.lab_tr, data.Y_te, data.lab_te),
        "concat": _one_nn(np.hstack([data.X_tr, data.Y_tr]), data.lab_tr,
                          np.hstack([data.X_te, data.Y_te]), data.lab_te),
    }
    thresholds = s.thresholds
    d = np.array([max(1, int(np.sum(ratios >= t))) for t in thresholds], dtype=np.int64)
    acc: dict[str, list[float]] = {"x": [], "y": [], "concat": []}
    for t, k in zip(thresholds, d, strict=True):
        say(f"[{data.name}] (a) threshold {t:.2f}: d = {k}")
        acc["x"].append(_one_nn(XA_tr[:, :k], data.lab_tr, XA_te[:, :k], data.lab_te))
        acc["y"].append(_one_nn(YB_tr[:, :k], data.lab_tr, YB_te[:, :k], data.lab_te))
        acc["concat"].append(_one_nn(
            np.hstack([XA_tr[:, :k], YB_tr[:, :k]]), data.lab_tr,
            np.hstack([XA_te[:, :k], YB_te[:, :k]]), data.lab_te))
    relative = {v: 100.0 * np.asarray(a) / raw[v] for v, a in acc.items()}
    size = {"x": d / data.p, "y": d / data.q, "concat": 2 * d / (data.p + data.q)}
    result = {
        "scca_fit_time_s": fit_time, "n_pairs": int(ratios.size), "ratios": ratios,
        "roles": dict(model.roles_), "thresholds": thresholds, "d": d,
        "raw_accuracy": raw, "accuracy": acc, "relative_accuracy": relative,
        "size_ratio": size,
        "shape": {v: _curve_shape(relative[v], thresholds, d) for v in relative},
    }
    return result, model


# ------------------------------------------------------------------- (b) Figs 5 and 6
def _classifier_study(data: _TwoViews, model: SwarmCCA, s: _Settings,
                      say: Progress) -> dict[str, Any]:
    ratios = np.asarray(model.correlation_ratios_, dtype=np.float64)
    d, cutoff = _quantile_d(ratios)
    XA_tr, YB_tr = _scores(model, data.X_tr, data.Y_tr)
    XA_te, YB_te = _scores(model, data.X_te, data.Y_te)
    features = {
        "raw": (np.hstack([data.X_tr, data.Y_tr]), np.hstack([data.X_te, data.Y_te])),
        "raw_x": (data.X_tr, data.X_te),
        "scca_x": (XA_tr[:, :d], XA_te[:, :d]),
        "scca_xy": (np.hstack([XA_tr[:, :d], YB_tr[:, :d]]),
                    np.hstack([XA_te[:, :d], YB_te[:, :d]])),
    }
    accuracy: dict[str, dict[str, float]] = {}
    fit_time: dict[str, dict[str, float]] = {}
    for name, make in _classifiers(s).items():
        accuracy[name], fit_time[name] = {}, {}
        for fs, (F_tr, F_te) in features.items():
            say(f"[{data.name}] (b) {name} on {fs} ({F_tr.shape[1]} features)")
            clf = make()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # collinear pixels, SVM convergence
                start = time.perf_counter()
                clf.fit(F_tr, data.lab_tr)
                fit_time[name][fs] = time.perf_counter() - start
                accuracy[name][fs] = float(clf.score(F_te, data.lab_te))
    return {"quantile": QUANTILE, "ratio_cutoff": cutoff, "d": d,
            "n_features": {fs: int(tr.shape[1]) for fs, (tr, _) in features.items()},
            "accuracy": accuracy, "fit_time_s": fit_time}


# ------------------------------------------------------------------------ (c) Fig 7
def _method_comparison(data: _TwoViews, s: _Settings, seed: int,
                       say: Progress) -> dict[str, Any]:
    from sklearn.decomposition import PCA

    n_train, n_test = s.compare_sizes[data.name]
    n_train = min(n_train, data.X_tr.shape[0])
    n_test = min(n_test, data.X_te.shape[0])
    rng = np.random.default_rng([s.random_state, seed])
    k_cca = max(1, math.ceil(CCA_FRACTION * min(data.p, data.q)))
    acc: dict[str, list[float]] = {m: [] for m in METHODS}
    n_feat: dict[str, list[int]] = {m: [] for m in METHODS}
    for rep in range(s.n_repeats):
        say(f"[{data.name}] (c) repetition {rep + 1}/{s.n_repeats}")
        i_tr = rng.choice(data.X_tr.shape[0], n_train, replace=False)
        i_te = rng.choice(data.X_te.shape[0], n_test, replace=False)
        X_tr, Y_tr, lab_tr = data.X_tr[i_tr], data.Y_tr[i_tr], data.lab_tr[i_tr]
        X_te, Y_te, lab_te = data.X_te[i_te], data.Y_te[i_te], data.lab_te[i_te]

        model, _ = _fit_scca(X_tr, Y_tr)
        d, _ = _quantile_d(np.asarray(model.correlation_ratios_, dtype=np.float64))
        XA_tr, YB_tr = _scores(model, X_tr, Y_tr)
        XA_te, YB_te = _scores(model, X_te, Y_te)
        acc["SCCA"].append(_lda_accuracy(np.hstack([XA_tr[:, :d], YB_tr[:, :d]]), lab_tr,
                                         np.hstack([XA_te[:, :d], YB_te[:, :d]]), lab_te))
        n_feat["SCCA"].append(2 * d)

        Z_tr, Z_te = np.hstack([X_tr, Y_tr]), np.hstack([X_te, Y_te])
        pca = PCA(n_components=PCA_VARIANCE, svd_solver="full").fit(Z_tr)
        acc["PCA"].append(_lda_accuracy(pca.transform(Z_tr), lab_tr, pca.transform(Z_te),
                                        lab_te))
        n_feat["PCA"].append(int(pca.n_components_))

        _, A, B = pooled_cca(X_tr, Y_tr, k_cca, rank_tol=RANK_TOL)
        mx, my = X_tr.mean(axis=0), Y_tr.mean(axis=0)
        acc["CCA"].append(_lda_accuracy(
            np.hstack([(X_tr - mx) @ A, (Y_tr - my) @ B]), lab_tr,
            np.hstack([(X_te - mx) @ A, (Y_te - my) @ B]), lab_te))
        n_feat["CCA"].append(2 * int(A.shape[1]))
    return {
        "n_repeats": s.n_repeats, "n_train": n_train, "n_test": n_test, "cca_pairs": k_cca,
        "accuracy": acc, "n_features": n_feat,
        "summary": {m: _box_stats(np.asarray(acc[m])) for m in METHODS},
    }


# ----------------------------------------------------------------- agreement checks
def _claim(figure: str, dataset: str, paper: str, finding: str, verdict: str) -> dict[str, str]:
    return {"figure": figure, "dataset": dataset, "paper": paper, "finding": finding,
            "verdict": verdict}


def _agreement(name: str, res: dict[str, Any]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    a, b, c = res["threshold"], res["classifiers"], res["methods"]
    thresholds = np.asarray(a["thresholds"])
    rel = {v: np.asarray(x) for v, x in a["relative_accuracy"].items()}

    for view, shape in a["shape"].items():
        k = shape["peak_index"]
        if shape["bell_shaped"]:
            verdict, kind = "agrees", "bell-shaped"
        elif 0 < k < thresholds.size - 1 and max(shape["rise"], shape["fall"]) >= BELL_MARGIN:
            verdict, kind = "partly", "peaks inside the range but is nearly flat on one side"
        elif k == thresholds.size - 1:
            verdict, kind = "differs", "keeps rising as the threshold falls (no fall)"
        elif k == 0:
            verdict, kind = "differs", "highest at the largest threshold (no rise)"
        else:
            verdict, kind = "differs", "flat"
        out.append(_claim(
            "Fig. 3", name,
            "Relative accuracy is bell-shaped: it rises, then falls, as the threshold "
            "decreases.",
            f"{_VIEW_LABELS[view]}: peak {shape['peak_value']:.1f} % at t = "
            f"{shape['peak_threshold']:.2f} (d = {shape['peak_d']}); {shape['rise']:+.1f} "
            f"pts from t = {thresholds[0]:.2f}, {-shape['fall']:+.1f} pts to t = "
            f"{thresholds[-1]:.2f}: {kind}.", verdict))

    best_view = max(rel, key=lambda v: float(rel[v].max()))
    top = float(rel[best_view].max())
    out.append(_claim(
        "Fig. 3", name,
        "A suitable threshold beats the raw data (Gyro > 101 % at t = 0.55).",
        f"Best relative accuracy {top:.1f} % ({_VIEW_LABELS[best_view]}, t = "
        f"{thresholds[int(np.argmax(rel[best_view]))]:.2f}).",
        "agrees" if top > 100.0 else "differs"))

    low = thresholds <= 0.9 + 1e-9
    below = int(np.sum((rel["concat"] < rel["x"]) & (rel["concat"] < rel["y"]) & low))
    n_low = int(low.sum())
    frac = below / n_low if n_low else 0.0
    out.append(_claim(
        "Fig. 3", name,
        "For t ≤ 0.9 the concatenated features' relative accuracy is below both single "
        "views'.",
        f"Below both at {below} of {n_low} thresholds t ≤ 0.9.",
        "agrees" if frac == 1.0 else "partly" if frac >= 0.5 else "differs"))

    size = {v: np.asarray(x) for v, x in a["size_ratio"].items()}
    monotone = all(bool(np.all(np.diff(x) >= 0)) for x in size.values())
    out.append(_claim(
        "Fig. 4", name, "The data-size ratio grows as the threshold decreases.",
        f"Non-decreasing for every view: {monotone}; from {100 * size['concat'][0]:.1f} % "
        f"to {100 * size['concat'][-1]:.1f} % (concatenated).",
        "agrees" if monotone else "differs"))

    hit = np.flatnonzero(np.isclose(thresholds, 0.75))
    if hit.size:
        i = int(hit[0])
        good = [v for v in ("x", "y") if rel[v][i] > 95.0 and size[v][i] < 0.10]
        parts = ", ".join(f"{v.upper()}: {rel[v][i]:.1f} % with {100 * size[v][i]:.1f} % "
                          "of the data" for v in ("x", "y"))
        out.append(_claim(
            "Fig. 4", name,
            "At t = 0.75 a single view keeps > 95 % relative accuracy with < 10 % of the "
            "data.", parts + ".", "agrees" if good else "differs"))

    acc = b["accuracy"]
    gains = {clf: acc[clf]["scca_x"] - acc[clf]["raw_x"] for clf in CLASSIFIERS}
    nb_da = [clf for clf in ("NB", "LDA") if gains[clf] > 0]
    out.append(_claim(
        "Fig. 5", name,
        "NB and DA are clearly more accurate on SCCA features than on the raw data "
        "(compared here: SCCA X-view vs raw X view, as the paper's X_XSCCA vs X_Org).",
        f"NB {100 * gains['NB']:+.1f} pts, LDA {100 * gains['LDA']:+.1f} pts.",
        "agrees" if len(nb_da) == 2 else "partly" if nb_da else "differs"))
    rest = ("AdaBoost", "RF", "1-NN", "SVM")
    small = [clf for clf in rest if abs(gains[clf]) <= 0.03]
    out.append(_claim(
        "Fig. 5", name,
        "AdaBoost, RF, 1-NN and SVM differ little between raw and SCCA features "
        "(here: within 3 pts).",
        ", ".join(f"{clf} {100 * gains[clf]:+.1f} pts" for clf in rest) + ".",
        "agrees" if len(small) == len(rest) else "partly" if small else "differs"))
    agg = {clf: acc[clf]["scca_xy"] - acc[clf]["scca_x"] for clf in CLASSIFIERS}
    helped = [clf for clf in CLASSIFIERS if agg[clf] > 0.01]
    out.append(_claim(
        "Fig. 5", name,
        "Concatenating both peers' SCCA features mostly does not help (≈ equal, sometimes "
        "lower).",
        "X+Y minus X: " + ", ".join(f"{clf} {100 * agg[clf]:+.1f}" for clf in CLASSIFIERS)
        + f" pts; helps (> 1 pt) for {len(helped)} of 6.",
        "agrees" if len(helped) <= 2 else "partly" if len(helped) <= 4 else "differs"))

    times = b["fit_time_s"]
    speed = {clf: times[clf]["raw_x"] / max(times[clf]["scca_x"], 1e-9)
             for clf in ("LDA", "AdaBoost", "SVM")}
    faster = [clf for clf, v in speed.items() if v > 1.0]
    out.append(_claim(
        "Fig. 6", name,
        "Training on SCCA features is faster than on raw data, notably for DA, "
        "AdaBoost and SVM (DA about 20×).",
        ", ".join(f"{clf} {v:.1f}×" for clf, v in speed.items()) + " faster (raw X view "
        "vs SCCA X view).",
        "agrees" if len(faster) == 3 else "partly" if faster else "differs"))

    st = c["summary"]
    out.append(_claim(
        "Fig. 7", name, "SCCA's median accuracy is slightly above PCA's.",
        f"Medians: SCCA {st['SCCA']['median']:.3f}, PCA {st['PCA']['median']:.3f}, "
        f"CCA {st['CCA']['median']:.3f}.",
        "agrees" if st["SCCA"]["median"] >= st["PCA"]["median"] else "differs"))
    out.append(_claim(
        "Fig. 7", name, "SCCA's interquartile range is smaller than CCA's.",
        f"IQR: SCCA {st['SCCA']['iqr']:.3f}, CCA {st['CCA']['iqr']:.3f}.",
        "agrees" if st["SCCA"]["iqr"] < st["CCA"]["iqr"] else "differs"))
    out.append(_claim(
        "Fig. 7", name, "SCCA's maximum is below CCA's and SCCA shows no outliers.",
        f"Max: SCCA {st['SCCA']['max']:.3f}, CCA {st['CCA']['max']:.3f}; SCCA outliers "
        f"(1.5 × IQR): {st['SCCA']['n_outliers']}.",
        "agrees" if st["SCCA"]["max"] < st["CCA"]["max"] and st["SCCA"]["n_outliers"] == 0
        else "partly" if st["SCCA"]["max"] < st["CCA"]["max"]
        or st["SCCA"]["n_outliers"] == 0 else "differs"))
    med = {m: float(np.median(c["n_features"][m])) for m in METHODS}
    spread = {m: int(np.ptp(c["n_features"][m])) for m in METHODS}
    fewer = med["SCCA"] < med["CCA"] and med["SCCA"] < med["PCA"]
    out.append(_claim(
        "Fig. 7b", name,
        "SCCA uses fewer features than CCA and PCA (the paper's text says SCCA and CCA "
        "both keep the top 15 % there; we use the quantile-0.65 rule for SCCA).",
        "Median features: " + ", ".join(f"{m} {med[m]:.0f} (range {spread[m]})"
                                        for m in METHODS) + ".",
        "agrees" if fewer else "differs"))
    return out


# ------------------------------------------------------------------------- figures
_VIEW_STYLE = {"x": ("o", "tab:blue"), "y": ("D", "tab:orange"), "concat": ("*", "tab:green")}
_FS_COLOURS = {"raw": "0.35", "raw_x": "0.7", "scca_x": "tab:blue", "scca_xy": "tab:green"}


def _plot_curves(results: dict[str, Any], key: str, ylabel: str, title: str,
                 path: Path, *, percent: float = 1.0, mark_peak: bool = False) -> Path:
    names = list(results)
    fig = new_figure(5.2 * len(names), 4.2)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names, strict=True):
        a = results[name]["threshold"]
        t = np.asarray(a["thresholds"])
        for view, values in a[key].items():
            marker, colour = _VIEW_STYLE[view]
            y = percent * np.asarray(values)
            ax.plot(t, y, marker=marker, color=colour, label=_VIEW_LABELS[view])
            if mark_peak:
                k = int(np.argmax(y))
                ax.plot(t[k], y[k], "s", color="red", markersize=9, zorder=3)
                ax.axvline(t[k], color=colour, lw=0.8, ls=":")
        if mark_peak:
            ax.axhline(100.0, color="0.5", lw=0.8, ls="--")
        ax.set_xlim(t.max() + 0.02, t.min() - 0.02)  # threshold decreases left to right
        ax.set_xlabel("threshold on ρ_i/ρ_1 (more pairs →)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{results[name]['title']}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    return save_figure(fig, path)


def _plot_bars(results: dict[str, Any], key: str, ylabel: str, title: str, path: Path,
               *, log: bool = False) -> Path:
    names = list(results)
    fig = new_figure(6.0 * len(names), 4.2)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    width = 0.8 / len(FEATURE_SETS)
    x = np.arange(len(CLASSIFIERS))
    for ax, name in zip(axes, names, strict=True):
        table = results[name]["classifiers"][key]
        for j, fs in enumerate(FEATURE_SETS):
            ax.bar(x + (j - (len(FEATURE_SETS) - 1) / 2) * width,
                   [table[clf][fs] for clf in CLASSIFIERS], width,
                   color=_FS_COLOURS[fs], label=_FEATURE_LABELS[fs])
        ax.set_xticks(x, CLASSIFIERS)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, 1)
        ax.set_title(results[name]["title"])
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(FEATURE_SETS))
    fig.suptitle(title)
    return save_figure(fig, path)


def _plot_methods(results: dict[str, Any], path: Path) -> Path:
    names = list(results)
    fig = new_figure(10.0, 3.8 * len(names))
    axes = fig.subplots(len(names), 2, squeeze=False)
    for row, name in zip(axes, names, strict=True):
        c = results[name]["methods"]
        row[0].boxplot([c["accuracy"][m] for m in METHODS], tick_labels=METHODS)
        row[0].set_ylabel("LDA accuracy")
        row[0].set_title(f"{results[name]['title']}: accuracy ({c['n_repeats']} draws)")
        row[1].boxplot([c["n_features"][m] for m in METHODS], tick_labels=METHODS)
        row[1].set_ylabel("number of features")
        row[1].set_title(f"{results[name]['title']}: low-dimensional features")
        for ax in row:
            ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Fig. 7 - SCCA vs PCA vs CCA, each followed by LDA")
    return save_figure(fig, path)


# -------------------------------------------------------------------------- report
def _report(results: dict[str, Any], files: dict[str, str]) -> str:
    s = results["settings"]
    data = results["datasets"]
    lines = [
        "# Reproduction: Swarm CCA (Li & Du 2024), Figs 3-7",
        "",
        f"Mode: **{'quick' if s['quick'] else 'full'}**, random_state = {s['random_state']}, "
        f"wall time {results['wall_time_s']:.1f} s.",
        "",
        "## Settings",
        "",
        "- Data (offline substitutes for the paper's HAPT and IMDB-WIKI): each image is cut "
        "into a left half (view X, peer 1) and a right half (view Y, peer 2).",
    ]
    for res in data.values():
        lines.append(f"  - {res['title']}: p = {res['p']}, q = {res['q']}, "
                     f"{res['n_train']} training / {res['n_test']} test samples "
                     f"({res['split']}).")
    for name, why in results["skipped"].items():
        lines.append(f"  - {name}: **skipped** ({why}).")
    lines += [
        f"- SCCA: `SwarmCCA(protocol='paper', perturb=True, rank_tol={s['rank_tol']:g})` "
        "(image halves have "
        "constant border pixels, so dependent columns are dropped by a rank-revealing QR). "
        "**With the paper's perturbation only the ratios ρ_i/ρ_1 are known, not ρ itself**, "
        "so every threshold below is on the ratio. The perturbation factors come from the "
        "OS CSPRNG (not seeded); the canonical vectors and ratios do not depend on them.",
        f"- (a) Thresholds: {', '.join(f'{t:.2f}' for t in s['thresholds'])}; SCCA fitted "
        "once; the d pairs with ratio ≥ t are kept (at least 1). 1-NN "
        "(`KNeighborsClassifier(n_neighbors=1)`). Relative accuracy = 100 % × "
        "acc(reduced)/acc(raw), raw = that view's pixels (both views' pixels for the "
        "concatenation). Data-size ratio = d/p per view, 2d/(p+q) concatenated.",
        f"- (b) Pairs with ratio ≥ the {s['quantile']} quantile of all ratios. Classifiers: "
        f"GaussianNB, LinearDiscriminantAnalysis (SVD solver; the paper's pseudo-linear DA), "
        f"AdaBoostClassifier(n_estimators={s['adaboost_estimators']}), "
        "RandomForestClassifier(n_estimators=10), KNeighborsClassifier(1), "
        f"StandardScaler + LinearSVC(C={s['svm_c']}, dual='auto', "
        f"max_iter={s['svm_max_iter']}); all seeded "
        "with random_state. Time = `fit` wall time (time.perf_counter); the SCCA fit itself "
        "is excluded, as in the paper.",
        f"- (c) {s['n_repeats']} random draws (training from the training part, test from "
        "the test part); SCCA: quantile rule on each draw, both views' variates; PCA: "
        f"{s['pca_variance']:.0%} of the variance of both raw views; CCA: centralised "
        f"(`pooled_cca`), top {s['cca_fraction']:.0%} of min(p, q) pairs, both views' "
        "variates; each followed by LDA.",
        f"- BLAS/OpenMP threads: {s['n_threads'] or 'library default'} (all timings).",
        "",
    ]
    for res in data.values():
        a, b = res["threshold"], res["classifiers"]
        lines += [f"## {res['title']}", "",
                  f"SCCA fit on {res['n_train']} samples: {a['scca_fit_time_s']:.2f} s, "
                  f"{a['n_pairs']} pairs (roles {a['roles']}). Raw 1-NN accuracy: X "
                  f"{a['raw_accuracy']['x']:.3f}, Y {a['raw_accuracy']['y']:.3f}, both "
                  f"{a['raw_accuracy']['concat']:.3f}.", "",
                  "### (a) Figs 3-4: threshold sweep", ""]
        rows = []
        for i, t in enumerate(a["thresholds"]):
            rows.append([f"{t:.2f}", int(a["d"][i]),
                         *(float(a["relative_accuracy"][v][i]) for v in ("x", "y", "concat")),
                         *(100 * float(a["size_ratio"][v][i]) for v in ("x", "concat"))])
        lines.append(markdown_table(
            ["threshold", "d", "rel. acc. X %", "rel. acc. Y %", "rel. acc. X+Y %",
             "size X %", "size X+Y %"], rows, floatfmt=".1f"))
        lines += [f"### (b) Figs 5-6: six classifiers (d = {b['d']} pairs, ratio ≥ "
                  f"{b['ratio_cutoff']:.3f})", "", "Accuracy:", ""]
        heads = ["classifier"] + [f"{_FEATURE_LABELS[fs]} ({b['n_features'][fs]})"
                                  for fs in FEATURE_SETS]
        lines.append(markdown_table(heads, [[clf, *(b["accuracy"][clf][fs]
                                                    for fs in FEATURE_SETS)]
                                            for clf in CLASSIFIERS]))
        lines += ["", "Fit time (s):", ""]
        lines.append(markdown_table(heads, [[clf, *(b["fit_time_s"][clf][fs]
                                                    for fs in FEATURE_SETS)]
                                            for clf in CLASSIFIERS], floatfmt=".4f"))
        c = res["methods"]
        lines += ["", f"### (c) Fig. 7: SCCA vs PCA vs CCA + LDA ({c['n_repeats']} draws of "
                  f"{c['n_train']} train / {c['n_test']} test)", ""]
        lines.append(markdown_table(
            ["method", "median", "Q1", "Q3", "min", "max", "outliers", "features (median)"],
            [[m, *(c["summary"][m][k] for k in ("median", "q1", "q3", "min", "max")),
              c["summary"][m]["n_outliers"], f"{np.median(c['n_features'][m]):.0f}"]
             for m in METHODS]))
        lines.append("")
    lines += ["## Figures", ""]
    for caption, file in files.items():
        lines += [f"![{caption}]({file})", ""]
    lines += ["## Agreement with the paper", "",
              "Each paper claim is checked against the numbers above (computed, not "
              "hand-written). The paper's data (HAPT, IMDB-WIKI) differ from ours, so "
              "only the *shape* of its results can be compared.", ""]
    claims = results["agreement"]
    lines += agreement_table(
        ["figure", "data", "paper", "here"],
        [[c["figure"], data[c["dataset"]]["title"], c["paper"], c["finding"]] for c in claims],
        claims)
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main
@reports_progress("scca")
def reproduce_scca(
    out_dir: Path | str,
    *,
    quick: bool = False,
    random_state: int = 0,
    progress: ProgressOption = None,
    n_threads: int | None = 1,
) -> ReproductionResult:
    """Run the Swarm CCA paper's experiments (Figs 3-7) and write a report.

    Parameters
    ----------
    out_dir
        Directory for ``report.md``, ``results.json`` and the figures
        ``fig3_relative_accuracy.png``, ``fig4_data_size.png``,
        ``fig5_classifier_accuracy.png``, ``fig6_training_time.png`` and
        ``fig7_methods.png``; created if missing.
    quick
        Small settings for tests (well under 20 s): Fashion-MNIST 1500 / 300 samples,
        every other threshold, AdaBoost with 10 stumps, 5 draws of 1000 / 200 in (c).
        Full: 10000 / 2000, 17 thresholds, 30 draws of 3000 / 300.
    random_state
        Seed of the digits split, the classifiers and the draws of (c).
    progress
        False or None (silent), True (bars in a terminal or a notebook) or a callable
        receiving each :class:`~islands.progress.ProgressUpdate` (its ``info``
        is the step's message).
    n_threads
        Threads the BLAS and OpenMP libraries may use during the run (through
        ``threadpoolctl``); ``None`` leaves them alone. The default, 1, makes the
        timings reproducible and avoids a pathology of multi-threaded OpenBLAS on a busy
        machine (the two SCCA peers also run in threads of their own): a QR of 1000×392
        measured 5.9 s with 2 BLAS threads under load against 0.03 s with 1.

    Returns
    -------
    ReproductionResult
        Its ``to_json()`` is ``results.json``: ``settings``, ``datasets`` (per
        data set: ``threshold`` for (a), ``classifiers`` for (b), ``methods`` for (c)),
        ``agreement`` (one entry per checked paper claim, with a ``verdict`` of
        ``"agrees"``, ``"partly"`` or ``"differs"``), ``skipped``, ``figures`` and
        ``wall_time_s``.

    Notes
    -----
    Fashion-MNIST is skipped (and named in ``skipped``) when its files are absent
    (:func:`islands.data.find_fashion_mnist`); digits always runs.
    """
    start = time.perf_counter()
    run = setup_run("reproduce_scca", out_dir, random_state, n_threads, progress)
    s = _settings(bool(quick), run.random_state, run.n_threads)
    with thread_limit(run.n_threads, preload=("scipy.linalg", "sklearn.neighbors")):
        return _run(run.out, s, run.say, start)


def _run(out: Path, s: _Settings, say: Progress, start: float) -> ReproductionResult:
    loaders, skipped = two_datasets(_load_fashion, _load_digits)

    datasets: dict[str, Any] = {}
    agreement: list[dict[str, str]] = []
    for seed, (name, load) in enumerate(loaders):
        say(f"[{name}] loading")
        data = load(s)
        res: dict[str, Any] = {
            "title": data.title, "p": data.p, "q": data.q,
            "n_train": int(data.X_tr.shape[0]), "n_test": int(data.X_te.shape[0]),
            "split": ("first samples of the train and test splits" if name == "fashion_mnist"
                      else f"stratified {1 - s.digits_test_fraction:.0%}/"
                      f"{s.digits_test_fraction:.0%} split, seeded"),
        }
        res["threshold"], model = _threshold_sweep(data, s, say)
        res["classifiers"] = _classifier_study(data, model, s, say)
        res["methods"] = _method_comparison(data, s, seed, say)
        datasets[name] = res
        agreement += _agreement(name, res)

    say("plotting")
    files = {
        "Fig. 3 - relative 1-NN accuracy": _plot_curves(
            datasets, "relative_accuracy", "relative 1-NN accuracy (%)",
            "Fig. 3 - relative 1-NN accuracy vs threshold (red: peak)",
            out / "fig3_relative_accuracy.png", mark_peak=True).name,
        "Fig. 4 - reduced data-size ratio": _plot_curves(
            datasets, "size_ratio", "data-size ratio (%)",
            "Fig. 4 - reduced data size / raw data size", out / "fig4_data_size.png",
            percent=100.0).name,
        "Fig. 5 - classifier accuracy": _plot_bars(
            datasets, "accuracy", "test accuracy",
            "Fig. 5 - accuracy on raw and SCCA features", out / "fig5_classifier_accuracy.png",
        ).name,
        "Fig. 6 - training time": _plot_bars(
            datasets, "fit_time_s", "fit time (s, log scale)",
            "Fig. 6 - training time on raw and SCCA features",
            out / "fig6_training_time.png", log=True).name,
        "Fig. 7 - SCCA vs PCA vs CCA": _plot_methods(datasets, out / "fig7_methods.png").name,
    }
    result = ReproductionResult(
        settings=s.as_dict(), sections={"datasets": datasets}, agreement=agreement,
        skipped=skipped, figures=files, wall_time_s=time.perf_counter() - start)
    results = result.to_json()
    (out / "report.md").write_text(_report(results, files), encoding="utf-8")
    write_json(out / "results.json", results)
    say(f"done in {result.wall_time_s:.1f} s: report.md")
    return result
