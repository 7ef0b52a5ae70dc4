"""Reproduce the experiments of the ELFedPCA notes: federated DP-PCA utility against ε and k.

:func:`reproduce_pca` compares the five modes of :class:`~islands.pca.FederatedPCA` on
offline data (the notes name no data set): Fashion-MNIST (784 pixels) and scikit-learn
digits (64 pixels), the training rows split over s sites, balanced
(:func:`~islands.data.partition_iid`) or unbalanced
(:func:`~islands.data.partition_unbalanced`, log-normal sizes with σ = 1). It writes
``report.md``, ``results.json`` and PNG figures.

Utility measures (the notes' "CE" and SVM experiments):

- Captured variance q = tr(V'ᵀAV') / tr(V*ᵀAV*), with A = Σ x̃x̃ᵀ / n the exact second
  moment of the pooled training rows, centred and unit-normalised as the mode's own
  mechanism does it (:data:`MECHANISMS`: ``elfedpca`` on the exact mean, as published;
  the other DP modes on the mean of the unit rows), and V* its exact top-k
  eigenvectors; V' are the components a mode published. ``plain`` does not normalise
  rows, so its q is taken against the un-normalised covariance it targets (it is 1 up
  to rounding: federated exact PCA equals pooled PCA); its q against the normalised A
  is recorded too.
- Accuracy of a linear SVM (standardised features, ``LinearSVC``) trained on the
  published projections ``published_`` (site order; labels are reordered to match) and
  tested on ``transform`` of held-out rows.

Every DP fit uses δ = 1e-5 and is repeated over a few noise seeds; the partition of the
rows into sites is fixed per setting (only the noise varies). One fit at the largest k
serves every k: the top-k eigenvectors of one noisy matrix are the first k rows of its
top-k_max eigenvectors, so slicing equals refitting with the same noise.

Deviations, all deliberate: other data (the notes give none); the classic Gaussian
mechanism forbids ε ≥ 1 (:func:`islands.pca.maths.gaussian_tau`), so ε stops at 0.9;
``secure``, ``dpdispca`` and ``central`` unit-normalise rows before centring and split ε
between a noisy mean and the second moment (:mod:`islands.pca.maths`), while
``elfedpca`` runs the published mechanism (exact mean, all of ε on the second moment, no
guarantee); each mode's measured noise is divided by the τ of centralised DP-PCA under
its own mechanism, so the paper's noise claims compare like with like (expected:
1 for ``elfedpca`` and ``central``, sqrt(s/(s − 1)) for ``secure``, whose shares leave
the full τ to site 1, and √s for ``dpdispca``; :func:`expected_noise_ratio`). Every DP fit
passes ``noise_seed`` so that its figures can be redrawn exactly: **those fits carry no
DP guarantee** (anyone who knows the seed subtracts the noise); the report and
``results.json`` say so. The ε axis is the calibration target, which is what the utility
curves measure.

References
----------
.. [1] ELFedPCA notes (``papers/elfedpca-notes.zh.txt``): "实验结果" (CE and SVM against
   DPdisPCA) and "最后本文贡献" (same noise level as centralised DP-PCA, less noise and
   higher utility than DPdisPCA).
.. [2] Dwork, Talwar, Thakurta, Zhang. "Analyze Gauss". STOC 2014.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.data import (
    load_fashion_mnist,
    load_sklearn,
    partition_iid,
    partition_unbalanced,
)
from islands.experiments.report import (
    Progress,
    ReproductionResult,
    agreement_table,
    claim,
    markdown_table,
    new_figure,
    reports_progress,
    save_figure,
    setup_run,
    thread_limit,
    two_datasets,
    write_json,
)
from islands.pca import maths
from islands.pca.estimator import FederatedPCA
from islands.pca.protocol import centring_of
from islands.progress import ProgressOption

__all__ = [
    "BALANCES",
    "DELTA",
    "DP_MODES",
    "MODES",
    "SIGMA",
    "SVM_C",
    "expected_noise_ratio",
    "reproduce_pca",
]

Array = NDArray[np.float64]
Labels = NDArray[np.int64]

#: Every mode of FederatedPCA, the non-private one first.
MODES = ("plain", "elfedpca", "secure", "dpdispca", "central")
#: The differentially private modes.
DP_MODES = ("elfedpca", "secure", "dpdispca", "central")
#: The mechanism each DP mode runs (:mod:`islands.pca.maths`), as the report states it.
MECHANISMS = {
    "elfedpca": "published: rows centred on the exact joint mean (released without noise), "
                "all of ε on A, τ = sqrt(2 ln(1.25/δ))/(nε); no (ε, δ) guarantee",
    "secure": "released mean: ε/2 on the mean of unit rows, ε/2 on A, "
              "τ = sqrt(2 ln(2.5/δ))/(nε/2); each of the s sites adds a share of variance "
              "τ²/(s − 1), so that site 1, which knows its own, still faces τ: "
              "total noise τ·sqrt(s/(s − 1))",
    "dpdispca": "released mean, each site τ_i = sqrt(2 ln(2.5/δ))/(N_i ε/2) on its own A_i",
    "central": "released mean: ε/2 on the mean of unit rows, ε/2 on A, "
               "τ = sqrt(2 ln(2.5/δ))/(nε/2)",
}
#: How the training rows are divided over the sites.
BALANCES = ("balanced", "unbalanced")
#: δ of every DP fit.
DELTA = 1e-5
#: Spread of the log-normal site sizes of the unbalanced partition.
SIGMA = 1.0
#: LinearSVC's C (on standardised projections).
SVM_C = 0.1
#: Tolerance (in q) below which two modes count as equal in the findings.
Q_TOL = 0.01

_MODE_STYLE = {
    "plain": ("k", "", "-"),
    "elfedpca": ("tab:blue", "o", "-"),
    "secure": ("tab:green", "s", "--"),
    "dpdispca": ("tab:red", "^", "-"),
    "central": ("tab:orange", "D", ":"),
}
_TITLES = {"fashion_mnist": "Fashion-MNIST", "digits": "scikit-learn digits"}


@dataclass(frozen=True)
class _Settings:
    quick: bool
    random_state: int
    fashion_train: int
    fashion_test: int
    digits_test_fraction: float
    sites: tuple[int, ...]
    epsilons: tuple[float, ...]
    ks: dict[str, tuple[int, ...]]
    k_plot: dict[str, int]
    eps_for_k: float
    n_seeds: int
    svm_max_iter: int
    n_threads: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "quick": self.quick, "random_state": self.random_state,
            "fashion_train": self.fashion_train, "fashion_test": self.fashion_test,
            "digits_test_fraction": self.digits_test_fraction, "sites": list(self.sites),
            "epsilons": list(self.epsilons), "ks": {k: list(v) for k, v in self.ks.items()},
            "k_plot": dict(self.k_plot), "eps_for_k": self.eps_for_k,
            "n_seeds": self.n_seeds, "delta": DELTA, "sigma": SIGMA, "svm_c": SVM_C,
            "svm_max_iter": self.svm_max_iter, "modes": list(MODES),
            "balances": list(BALANCES), "n_threads": self.n_threads,
            "noise_seeded": True, "dp_guarantee": False, "mechanisms": dict(MECHANISMS),
        }


def _settings(quick: bool, random_state: int, n_threads: int | None) -> _Settings:
    if quick:
        return _Settings(quick=True, random_state=random_state, fashion_train=1500,
                         fashion_test=300, digits_test_fraction=0.3, sites=(2, 5),
                         epsilons=(0.2, 0.9),
                         ks={"fashion_mnist": (20,), "digits": (10,)},
                         k_plot={"fashion_mnist": 20, "digits": 10}, eps_for_k=0.2,
                         n_seeds=1, svm_max_iter=2000, n_threads=n_threads)
    return _Settings(quick=False, random_state=random_state, fashion_train=10000,
                     fashion_test=2000, digits_test_fraction=0.3, sites=(2, 5, 10, 20),
                     epsilons=(0.1, 0.2, 0.5, 0.9),
                     ks={"fashion_mnist": (10, 20, 50), "digits": (5, 10, 20)},
                     k_plot={"fashion_mnist": 20, "digits": 10}, eps_for_k=0.5,
                     n_seeds=3, svm_max_iter=2000, n_threads=n_threads)


@dataclass(frozen=True)
class _Data:
    name: str
    title: str
    X_tr: Array
    y_tr: Labels
    X_te: Array
    y_te: Labels
    split: str


def _load_fashion(s: _Settings) -> _Data:
    train = load_fashion_mnist(split="train", n_samples=s.fashion_train)
    test = load_fashion_mnist(split="test", n_samples=s.fashion_test)
    return _Data("fashion_mnist", _TITLES["fashion_mnist"], train.X, train.y.astype(np.int64),
                 test.X, test.y.astype(np.int64),
                 "first rows of the train split (fit) and of the test split (SVM test)")


def _load_digits(s: _Settings) -> _Data:
    from sklearn.model_selection import train_test_split

    ds = load_sklearn("digits")
    labels = ds.y.astype(np.int64)
    i_tr, i_te = train_test_split(np.arange(labels.size), test_size=s.digits_test_fraction,
                                  stratify=labels, random_state=s.random_state)
    return _Data("digits", _TITLES["digits"], ds.X[i_tr], labels[i_tr], ds.X[i_te],
                 labels[i_te],
                 f"stratified {1 - s.digits_test_fraction:.0%}/"
                 f"{s.digits_test_fraction:.0%} split, seeded")


@dataclass(frozen=True)
class _Reference:
    """The exact, pooled quantities every fit is measured against."""

    mean: Array
    A: Array  # normalised second moment, the matrix the released-mean modes perturb
    V: Array  # its exact top-k_max components (rows)
    A_raw: Array  # un-normalised covariance (what plain decomposes)
    V_raw: Array
    A_pub: Array  # rows centred on the exact mean, then normalised (what elfedpca perturbs)
    V_pub: Array

    def target(self, mode: str) -> tuple[Array, Array]:
        """Return the exact (A, V) ``mode``'s mechanism perturbs."""
        return (self.A_pub, self.V_pub) if mode == "elfedpca" else (self.A, self.V)


def _reference(data: _Data, k_max: int) -> _Reference:
    n = data.X_tr.shape[0]
    mean = maths.normalize_rows(data.X_tr).mean(axis=0)  # what the DP modes centre on
    outer, _ = maths.moment([data.X_tr], mean, centring="released")
    exact = data.X_tr.mean(axis=0)
    raw, _ = maths.moment([data.X_tr], exact, centring="raw")
    pub, _ = maths.moment([data.X_tr], exact, centring="published")
    A, A_raw, A_pub = outer / n, raw / n, pub / n
    return _Reference(mean=mean, A=A, V=maths.top_components(A, k_max)[1], A_raw=A_raw,
                      V_raw=maths.top_components(A_raw, k_max)[1], A_pub=A_pub,
                      V_pub=maths.top_components(A_pub, k_max)[1])


def expected_noise_ratio(mode: str, n_sites: int) -> float:
    """S.d. of a mode's noise on A' over the τ of central DP-PCA under its mechanism.

    1 for ``elfedpca`` and ``central``; sqrt(s/(s − 1)) for ``secure`` (s shares of
    variance τ²/(s − 1), :func:`islands.pca.maths.share_sigma`); √s for ``dpdispca``
    (each site's (N_i/n)·τ_i is τ).
    """
    if mode == "secure":
        return maths.secure_total_sigma(1.0, n_sites)
    return math.sqrt(n_sites) if mode == "dpdispca" else 1.0


def _central_tau(mode: str, epsilon: float, n: int) -> float:
    """τ of centralised DP-PCA under ``mode``'s mechanism (the noise-ratio unit)."""
    if mode == "elfedpca":
        return maths.gaussian_tau(epsilon, DELTA, n)
    return maths.moment_tau(epsilon, DELTA, n)


# ----------------------------------------------------------------------------- helpers
def _svm(F_tr: Array, y_tr: Labels, F_te: Array, y_te: Labels, s: _Settings) -> float:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    clf = make_pipeline(StandardScaler(), LinearSVC(C=SVM_C, dual="auto",
                                                    max_iter=s.svm_max_iter,
                                                    random_state=s.random_state))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(F_tr, y_tr)
    return float(clf.score(F_te, y_te))


def _noisy_moment(model: FederatedPCA) -> Array:
    """Return the matrix site 1 decomposed (every mode sets it)."""
    if model.noisy_moment_ is None:
        raise RuntimeError("FederatedPCA did not set noisy_moment_")
    return model.noisy_moment_


def _sd(values: Array, axis: int = -1) -> Array:
    """Sample standard deviation over seeds (0 with a single seed)."""
    if values.shape[axis] < 2:
        return np.zeros(np.delete(values.shape, axis))
    out: Array = values.std(axis=axis, ddof=1)
    return out


def _seed(s: _Settings, *key: int) -> int:
    return int(np.random.SeedSequence([s.random_state, *key]).generate_state(1)[0])


def _partition(balance: str, n: int, n_sites: int, seed: int) -> list[NDArray[np.intp]]:
    if balance == "balanced":
        return partition_iid(n, n_sites, random_state=seed)
    return partition_unbalanced(n, n_sites, sigma=SIGMA, random_state=seed)


# ------------------------------------------------------------------------ one setting
def _run_setting(data: _Data, ref: _Reference, s: _Settings, d_index: int, balance: str,
                 n_sites: int, say: Progress) -> dict[str, Any]:
    ks = s.ks[data.name]
    k_max, k_plot = max(ks), s.k_plot[data.name]
    i_plot = ks.index(k_plot)
    n = data.X_tr.shape[0]
    b_index = BALANCES.index(balance)
    idx = _partition(balance, n, n_sites, _seed(s, d_index, b_index, n_sites))
    order = np.concatenate(idx)
    y_pub = data.y_tr[order]  # published_ stacks site 1's rows, then site 2's, ...
    parts = [data.X_tr[i] for i in idx]
    tag = f"[{data.name}] {balance} s={n_sites}"

    say(f"{tag}: plain")
    plain = FederatedPCA(k_max, mode="plain").fit(parts)
    if not np.allclose(plain.published_, plain.transform(data.X_tr[order]), atol=1e-8):
        raise RuntimeError("published_ is not in the order of the index arrays")
    X_te_plain = plain.transform(data.X_te)
    out: dict[str, Any] = {
        "balance": balance, "n_sites": n_sites,
        "site_sizes": [int(i.size) for i in idx],
        "plain": {
            "q": np.array([maths.captured_variance(plain.components_[:k], ref.V_raw[:k],
                                                   ref.A_raw) for k in ks]),
            "q_on_normalised": np.array([maths.captured_variance(
                plain.components_[:k], ref.V[:k], ref.A) for k in ks]),
            "svm": np.array([_svm(plain.published_[:, :k], y_pub, X_te_plain[:, :k],
                                  data.y_te, s) for k in ks]),
            "moment_max_abs_error": float(np.max(np.abs(_noisy_moment(plain) - ref.A_raw))),
        },
    }
    n_eps, n_k, n_rep = len(s.epsilons), len(ks), s.n_seeds
    for mode in DP_MODES:
        out[mode] = {"q": np.zeros((n_eps, n_k, n_rep)), "svm": np.zeros((n_eps, n_rep)),
                     "svm_vs_k": np.zeros((n_k, n_rep)),
                     "noise_ratio": np.zeros((n_eps, n_rep)), "tau": []}
    for e, eps in enumerate(s.epsilons):
        for r in range(n_rep):
            seed = _seed(s, d_index, b_index, n_sites, e, r)
            say(f"{tag}: ε={eps:g}, seed {r + 1}/{n_rep}")
            for mode in DP_MODES:
                with warnings.catch_warnings():  # the report says the guarantee is void
                    warnings.simplefilter("ignore", UserWarning)
                    model = FederatedPCA(k_max, epsilon=eps, delta=DELTA, mode=mode,
                                         noise_seed=seed).fit(parts)
                res = out[mode]
                comps = model.components_
                A, V = ref.target(mode)
                res["q"][e, :, r] = [maths.captured_variance(comps[:k], V[:k], A)
                                     for k in ks]
                # E alone: the exact matrix centred as this mode does, on the mean it released
                target = maths.moment([data.X_tr], model.mean_,
                                      centring=centring_of(mode))[0] / n
                noise = maths.upper_of(_noisy_moment(model) - target)
                res["noise_ratio"][e, r] = float(noise.std()) / _central_tau(mode, eps, n)
                if r == 0:
                    tau = model.tau_
                    res["tau"].append(list(tau.values()) if isinstance(tau, dict) else tau)
                X_te = model.transform(data.X_te)
                k_list = list(range(n_k)) if math.isclose(eps, s.eps_for_k) else [i_plot]
                for j in k_list:
                    k = ks[j]
                    acc = _svm(model.published_[:, :k], y_pub, X_te[:, :k], data.y_te, s)
                    if j == i_plot:
                        res["svm"][e, r] = acc
                    if math.isclose(eps, s.eps_for_k):
                        res["svm_vs_k"][j, r] = acc
    for mode in DP_MODES:
        res = out[mode]
        res["q_mean"], res["q_sd"] = res["q"].mean(axis=-1), _sd(res["q"])
        res["svm_mean"], res["svm_sd"] = res["svm"].mean(axis=-1), _sd(res["svm"])
        res["svm_vs_k_mean"] = res["svm_vs_k"].mean(axis=-1)
        res["svm_vs_k_sd"] = _sd(res["svm_vs_k"])
        res["noise_ratio_mean"] = float(res["noise_ratio"].mean())
        res["noise_ratio_expected"] = expected_noise_ratio(mode, n_sites)
    return out


def _run_dataset(data: _Data, s: _Settings, d_index: int, say: Progress) -> dict[str, Any]:
    ks = s.ks[data.name]
    say(f"[{data.name}] exact reference ({data.X_tr.shape[0]} × {data.X_tr.shape[1]})")
    ref = _reference(data, max(ks))
    F_tr = maths.centre_rows(data.X_tr, ref.mean, centring="released") @ ref.V.T
    F_te = maths.centre_rows(data.X_te, ref.mean, centring="released") @ ref.V.T
    svm_exact = np.array([_svm(F_tr[:, :k], data.y_tr, F_te[:, :k], data.y_te, s)
                          for k in ks])
    settings: dict[str, Any] = {}
    for balance in BALANCES:
        for n_sites in s.sites:
            settings[f"{balance}_s{n_sites}"] = _run_setting(data, ref, s, d_index, balance,
                                                             n_sites, say)
    return {
        "title": data.title, "n_train": int(data.X_tr.shape[0]),
        "n_test": int(data.X_te.shape[0]), "n_features": int(data.X_tr.shape[1]),
        "split": data.split, "ks": list(ks), "k_plot": s.k_plot[data.name],
        "tau": {f"{eps:g}": maths.moment_tau(eps, DELTA, data.X_tr.shape[0])
                for eps in s.epsilons},
        "svm_exact_normalised": svm_exact, "settings": settings,
    }


# ------------------------------------------------------------------------ findings
def _fmt(x: float) -> str:
    return f"{x:.3f}"


def _cells(datasets: dict[str, Any], mode: str, key: str) -> Array:
    """Every mean q or SVM accuracy of a mode, flattened in one fixed order.

    ``key`` is ``"q_mean"`` (over data sets, settings, ε and k) or ``"svm_mean"`` (over
    data sets, settings and ε).
    """
    out = [np.ravel(res[mode][key]) for ds in datasets.values()
           for res in ds["settings"].values()]
    return np.concatenate(out)


def _findings(datasets: dict[str, Any], s: _Settings) -> dict[str, Any]:
    f: dict[str, Any] = {}
    # (1) q against ε, for every curve (data set × setting × k)
    mono: dict[str, dict[str, int]] = {}
    for mode in DP_MODES:
        total = inc = nondec = ends = 0
        for ds in datasets.values():
            for res in ds["settings"].values():
                qm, qs = res[mode]["q_mean"], res[mode]["q_sd"]
                for j in range(qm.shape[1]):
                    diffs = np.diff(qm[:, j])
                    slack = np.maximum(qs[1:, j], qs[:-1, j])
                    total += 1
                    inc += bool(np.all(diffs > 0))
                    nondec += bool(np.all(diffs >= -np.maximum(slack, 1e-12)))
                    ends += bool(qm[-1, j] > qm[0, j])
        mono[mode] = {"curves": total, "strictly_increasing": inc,
                      "increasing_within_sd": nondec, "last_above_first": ends}
    f["q_vs_epsilon"] = mono

    # (2) elfedpca and secure against central (same τ; secure's total noise is
    # sqrt(s/(s - 1)) times larger, the price of leaving τ to site 1). If two modes' q
    # are equal in distribution, the difference of their means over n seeds has sd
    # sqrt((sd_a² + sd_b²)/n) and an expected absolute value sqrt(2/π) times that.
    central = _cells(datasets, "central", "q_mean")
    sd_central = _cells(datasets, "central", "q_sd")
    same: dict[str, dict[str, Any]] = {}
    for mode in ("elfedpca", "secure"):
        diff = _cells(datasets, mode, "q_mean") - central
        sd_mode = _cells(datasets, mode, "q_sd")
        null = (float(np.mean(np.sqrt(2.0 / np.pi * (sd_mode**2 + sd_central**2)
                                      / s.n_seeds))) if s.n_seeds > 1 else None)
        mean_abs = float(np.abs(diff).mean())
        svm_diff = _cells(datasets, mode, "svm_mean") - _cells(datasets, "central",
                                                               "svm_mean")
        equal = (mean_abs <= 1.5 * null + 1e-12) if null is not None else mean_abs <= Q_TOL
        same[mode] = {"mean_diff": float(diff.mean()), "mean_abs_diff": mean_abs,
                      "max_abs_diff": float(np.abs(diff).max()),
                      "mean_seed_sd_central": float(sd_central.mean()),
                      "expected_abs_diff_if_equal": null, "equal_within_noise": bool(equal),
                      "svm_mean_diff": float(svm_diff.mean()),
                      "svm_max_abs_diff": float(np.abs(svm_diff).max())}
    f["vs_central"] = same

    # (3) dpdispca's gap, by number of sites
    gap: dict[str, dict[str, float]] = {}
    for n_sites in s.sites:
        qg, sg, worse, count = [], [], 0, 0
        for ds in datasets.values():
            for res in ds["settings"].values():
                if res["n_sites"] != n_sites:
                    continue
                dp = res["dpdispca"]["q_mean"]
                best = np.minimum.reduce([res[m]["q_mean"] for m in
                                          ("elfedpca", "secure", "central")])
                qg.append(np.ravel(res["central"]["q_mean"] - dp))
                sg.append(np.ravel(res["central"]["svm_mean"] - res["dpdispca"]["svm_mean"]))
                worse += int(np.sum(dp < best))
                count += dp.size
        q_gap, s_gap = np.concatenate(qg), np.concatenate(sg)
        gap[str(n_sites)] = {"q_gap_mean": float(q_gap.mean()), "q_gap_max": float(q_gap.max()),
                             "q_gap_min": float(q_gap.min()),
                             "svm_gap_mean": float(s_gap.mean()),
                             "dpdispca_below_all_others": worse, "cells": count}
    f["dpdispca_gap"] = gap

    # (4) measured noise sd of A' - A, in units of the central τ
    noise: dict[str, dict[str, float]] = {}
    for mode in DP_MODES:
        noise[mode] = {}
        for n_sites in s.sites:
            vals = [res[mode]["noise_ratio_mean"] for ds in datasets.values()
                    for res in ds["settings"].values() if res["n_sites"] == n_sites]
            noise[mode][str(n_sites)] = float(np.mean(vals))
    f["noise_ratio"] = noise
    f["noise_ratio_expected"] = {mode: {str(n): expected_noise_ratio(mode, n)
                                        for n in s.sites} for mode in DP_MODES}

    # (5) unbalanced against balanced
    bal: dict[str, dict[str, float]] = {}
    for mode in DP_MODES:
        diffs = [np.ravel(ds["settings"][f"unbalanced_s{n}"][mode]["q_mean"]
                          - ds["settings"][f"balanced_s{n}"][mode]["q_mean"])
                 for ds in datasets.values() for n in s.sites]
        d = np.concatenate(diffs)
        bal[mode] = {"mean_diff": float(d.mean()), "max_abs_diff": float(np.abs(d).max())}
    f["unbalanced_minus_balanced"] = bal

    # (6) plain is exact; q against k at eps_for_k
    f["plain_q_max_error"] = float(max(
        np.max(np.abs(res["plain"]["q"] - 1.0)) for ds in datasets.values()
        for res in ds["settings"].values()))
    f["plain_moment_max_error"] = float(max(
        res["plain"]["moment_max_abs_error"] for ds in datasets.values()
        for res in ds["settings"].values()))
    e = s.epsilons.index(s.eps_for_k)
    by_k: dict[str, dict[str, int]] = {}
    for name, ds in datasets.items():
        counts = {"curves": 0, "decreasing": 0, "increasing": 0}
        for res in ds["settings"].values():
            for mode in DP_MODES:
                steps = np.diff(res[mode]["q_mean"][e])
                counts["curves"] += 1
                counts["decreasing"] += bool(np.all(steps < 0))
                counts["increasing"] += bool(np.all(steps > 0))
        by_k[name] = counts
    f["q_vs_k"] = by_k
    return f


def _null_text(vc: dict[str, Any]) -> str:
    if vc["expected_abs_diff_if_equal"] is None:
        return f"one seed only, so equality is judged by mean |Δ| ≤ {Q_TOL}"
    return (f"expected mean |Δ| if equal in distribution "
            f"{vc['expected_abs_diff_if_equal']:.4f} (from the seed-to-seed sds)")


def _agreement(datasets: dict[str, Any], f: dict[str, Any], s: _Settings) -> list[dict[str,
                                                                                    str]]:
    out: list[dict[str, str]] = []
    # the notes' claim, under the published mechanism: ELFedPCA's τ is central DP-PCA's
    same_tau = all(
        math.isclose(float(elf), maths.gaussian_tau(eps, DELTA, ds["n_train"]), rel_tol=1e-12)
        for ds in datasets.values() for res in ds["settings"].values()
        for elf, eps in zip(res["elfedpca"]["tau"], s.epsilons, strict=True))
    nr = f["noise_ratio"]
    ratios = ", ".join(f"s={n}: {nr['elfedpca'][n]:.3f} vs {nr['central'][n]:.3f}"
                       for n in nr["elfedpca"])
    close = all(abs(nr["elfedpca"][n] - nr["central"][n]) < 0.05 for n in nr["elfedpca"])
    out.append(claim(
        "ELFedPCA reaches the noise level of centralised DP-PCA "
        "(τ = sqrt(2 ln(1.25/δ))/(nε), both under the published mechanism).",
        f"ELFedPCA's τ equals that τ in every run: {same_tau}. Measured sd of A' − A over "
        f"the central τ of each mode's own mechanism (ELFedPCA vs islands' central): "
        f"{ratios}.",
        "agrees" if same_tau and close else "differs"))
    vc = f["vs_central"]["elfedpca"]
    out.append(claim(
        "ELFedPCA's utility equals centralised DP-PCA's (same noise distribution).",
        "Like for like only in noise relative to its own τ: islands' central runs the "
        "released-mean mechanism (ε/2 on A) and ELFedPCA the published one (ε on A, no "
        "guarantee), each scored against its own exact A. q(ELFedPCA) − q(central): "
        f"mean {vc['mean_diff']:+.4f}, mean |Δ| "
        f"{vc['mean_abs_diff']:.4f}, max |Δ| {vc['max_abs_diff']:.4f}; "
        + _null_text(vc) + f"; SVM mean Δ {100 * vc['svm_mean_diff']:+.2f} pts.",
        "agrees" if vc["equal_within_noise"]
        else "partly" if vc["mean_abs_diff"] <= 3 * Q_TOL else "differs"))
    local = [max(t) / min(t) for ds in datasets.values() for res in ds["settings"].values()
             for t in res["dpdispca"]["tau"] if isinstance(t, list)]
    more = all(nr["dpdispca"][n] > nr["elfedpca"][n] for n in nr["dpdispca"])
    out.append(claim(
        "ELFedPCA adds less noise than DPdisPCA, whose local τ_i ∝ 1/N_i.",
        "DPdisPCA effective noise over τ: "
        + ", ".join(f"s={n}: {v:.2f} (√s = {math.sqrt(int(n)):.2f})"
                    for n, v in nr["dpdispca"].items())
        + f"; largest/smallest τ_i within a federation up to {max(local):.1f}×.",
        "agrees" if more else "differs"))
    q_elf, q_dp = _cells(datasets, "elfedpca", "q_mean"), _cells(datasets, "dpdispca",
                                                                  "q_mean")
    frac = float(np.mean(q_elf > q_dp))
    out.append(claim(
        "ELFedPCA has higher utility than DPdisPCA: captured variance (the notes' CE).",
        f"q(ELFedPCA) > q(DPdisPCA) in {frac:.0%} of {q_elf.size} (data set, split, s, ε, k) "
        f"cells; mean gain {float(np.mean(q_elf - q_dp)):+.3f}.",
        "agrees" if frac >= 0.9 else "partly" if frac >= 0.5 else "differs"))
    a_elf, a_dp = _cells(datasets, "elfedpca", "svm_mean"), _cells(datasets, "dpdispca",
                                                                    "svm_mean")
    frac_a = float(np.mean(a_elf > a_dp))
    ties = float(np.mean(a_elf == a_dp))
    out.append(claim(
        "ELFedPCA has higher utility than DPdisPCA: SVM accuracy on the projected data.",
        f"SVM accuracy higher in {frac_a:.0%} of {a_elf.size} cells (ties {ties:.0%}); "
        f"mean gain {100 * float(np.mean(a_elf - a_dp)):+.2f} pts.",
        "agrees" if frac_a >= 0.9 else "partly" if frac_a >= 0.5 else "differs"))
    return out


# ------------------------------------------------------------------------- figures
def _errorbar(ax: Any, x: Array, y: Array, err: Array, mode: str, offset: float) -> None:
    colour, marker, ls = _MODE_STYLE[mode]
    ax.errorbar(x + offset, y, yerr=err, color=colour, marker=marker, ls=ls, capsize=2,
                label=mode, markersize=5)


def _plot_grid(ds: dict[str, Any], s: _Settings, metric: str, path: Path) -> Path:
    """Rows: balanced / unbalanced; columns: s. metric: "q_eps", "svm_eps" or "q_k"."""
    fig = new_figure(max(3.4 * len(s.sites), 7.5), 6.6)
    axes = fig.subplots(len(BALANCES), len(s.sites), squeeze=False, sharey=True)
    ks = ds["ks"]
    j = ks.index(ds["k_plot"])
    e = s.epsilons.index(s.eps_for_k)
    x = np.asarray(ks if metric == "q_k" else s.epsilons, dtype=np.float64)
    step = 0.006 * float(np.ptp(x) or 1.0)
    for row, balance in zip(axes, BALANCES, strict=True):
        for ax, n_sites in zip(row, s.sites, strict=True):
            res = ds["settings"][f"{balance}_s{n_sites}"]
            for m, mode in enumerate(DP_MODES):
                r = res[mode]
                if metric == "q_eps":
                    y, err = r["q_mean"][:, j], r["q_sd"][:, j]
                elif metric == "svm_eps":
                    y, err = r["svm_mean"], r["svm_sd"]
                else:
                    y, err = r["q_mean"][e], r["q_sd"][e]
                _errorbar(ax, x, y, err, mode, (m - 1.5) * step)
            plain = res["plain"]["svm"][j] if metric == "svm_eps" else 1.0
            ax.axhline(plain, color="k", lw=1.0, label="plain (no DP)")
            if metric == "svm_eps":
                ax.axhline(ds["svm_exact_normalised"][j], color="0.5", lw=1.0, ls="--",
                           label="exact PCA, unit-norm rows")
            ax.set_title(f"{balance}, s = {n_sites}", fontsize=9)
            ax.grid(alpha=0.3)
            ax.set_xlabel("k" if metric == "q_k" else "ε")
            if metric == "q_k":
                ax.set_xticks(x)
        row[0].set_ylabel("captured variance q" if metric != "svm_eps"
                          else "linear-SVM test accuracy")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(handles), fontsize=8)
    what = {"q_eps": f"captured variance q vs ε (k = {ds['k_plot']})",
            "svm_eps": f"SVM accuracy vs ε (k = {ds['k_plot']})",
            "q_k": f"captured variance q vs k (ε = {s.eps_for_k:g})"}[metric]
    fig.suptitle(f"{ds['title']}: {what}\nδ = {DELTA:g}; mean ± sd over {s.n_seeds} "
                 f"noise seed(s)", fontsize=11)
    return save_figure(fig, path)


def _plot_sites(datasets: dict[str, Any], s: _Settings, path: Path) -> Path:
    names = list(datasets)
    fig = new_figure(5.0 * len(names), 7.0)
    axes = fig.subplots(2, len(names), squeeze=False)
    e = s.epsilons.index(s.eps_for_k)
    x = np.asarray(s.sites, dtype=np.float64)
    for col, name in enumerate(names):
        ds = datasets[name]
        j = ds["ks"].index(ds["k_plot"])
        for row, key in enumerate(("q", "svm")):
            ax = axes[row][col]
            for mode in MODES:
                colour, marker, _ = _MODE_STYLE[mode]
                for balance, ls in (("balanced", "-"), ("unbalanced", "--")):
                    res = [ds["settings"][f"{balance}_s{n}"] for n in s.sites]
                    if mode == "plain":
                        y = [r["plain"][key][j] for r in res]
                    elif key == "q":
                        y = [r[mode]["q_mean"][e, j] for r in res]
                    else:
                        y = [r[mode]["svm_mean"][e] for r in res]
                    ax.plot(x, y, color=colour, marker=marker or ".", ls=ls,
                            label=f"{mode}, {balance}")
            ax.set_xscale("log")
            ax.minorticks_off()
            ax.set_xticks(x, [str(n) for n in s.sites])
            ax.set_xlabel("number of sites s")
            ax.set_ylabel("captured variance q" if key == "q" else "SVM accuracy")
            ax.set_title(f"{ds['title']} (k = {ds['k_plot']}, ε = {s.eps_for_k:g})",
                         fontsize=9)
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=5, fontsize=7)
    fig.suptitle("Utility against the number of sites\n(solid: balanced, dashed: unbalanced)",
                 fontsize=11)
    return save_figure(fig, path)


# -------------------------------------------------------------------------- report
def _pm(mean: float, sd: float, n_seeds: int) -> str:
    return f"{mean:.3f} ± {sd:.3f}" if n_seeds > 1 else f"{mean:.3f}"


def _dataset_section(ds: dict[str, Any], s: _Settings) -> list[str]:
    ks, k_plot = ds["ks"], ds["k_plot"]
    j = ks.index(k_plot)
    e = s.epsilons.index(s.eps_for_k)
    n = s.n_seeds
    lines = [f"## {ds['title']}", "",
             f"{ds['n_train']} training rows × {ds['n_features']} features, {ds['n_test']} "
             f"test rows ({ds['split']}). τ (central) = "
             + ", ".join(f"{v:.2e} at ε = {k}" for k, v in ds["tau"].items()) + ". "
             "SVM on the exact top-k of the normalised data: "
             + ", ".join(f"k = {k}: {a:.3f}" for k, a in
                         zip(ks, ds["svm_exact_normalised"], strict=True)) + ".", ""]
    eps_heads = [f"ε = {eps:g}" for eps in s.epsilons]
    rows_q, rows_a = [], []
    for res in ds["settings"].values():
        balance, n_sites = res["balance"], res["n_sites"]
        rows_a.append([balance, n_sites, "plain", *([f"{res['plain']['svm'][j]:.3f}"]
                                                    * len(s.epsilons))])
        for mode in DP_MODES:
            r = res[mode]
            rows_q.append([balance, n_sites, mode, *(_pm(r["q_mean"][i, j], r["q_sd"][i, j], n)
                                                      for i in range(len(s.epsilons)))])
            rows_a.append([balance, n_sites, mode, *(_pm(r["svm_mean"][i], r["svm_sd"][i], n)
                                                      for i in range(len(s.epsilons)))])
    lines += [f"### Captured variance q against ε (k = {k_plot})", "",
              "plain: q = 1 in every setting (see Findings).", ""]
    lines.append(markdown_table(["split", "s", "mode", *eps_heads], rows_q))
    lines += ["", f"### Linear-SVM test accuracy against ε (k = {k_plot})", ""]
    lines.append(markdown_table(["split", "s", "mode", *eps_heads], rows_a))
    k_heads = [f"k = {k}" for k in ks]
    rows_k = []
    for res in ds["settings"].values():
        rows_k.append([res["balance"], res["n_sites"], "plain",
                       *(f"1 / {a:.3f}" for a in res["plain"]["svm"])])
        for mode in DP_MODES:
            r = res[mode]
            rows_k.append([res["balance"], res["n_sites"], mode,
                           *(f"{_pm(r['q_mean'][e, i], r['q_sd'][e, i], n)} / "
                             f"{r['svm_vs_k_mean'][i]:.3f}" for i in range(len(ks)))])
    lines += ["", f"### q / SVM accuracy against k (ε = {s.eps_for_k:g})", ""]
    lines.append(markdown_table(["split", "s", "mode", *k_heads], rows_k))
    sizes_line = "; ".join(f"s = {res['n_sites']}: {res['site_sizes']}"
                           for res in ds["settings"].values()
                           if res["balance"] == "unbalanced")
    lines += ["", f"Unbalanced site sizes: {sizes_line}.", ""]
    return lines


def _report(results: dict[str, Any], files: dict[str, str], st: _Settings) -> str:
    s = results["settings"]
    data = results["datasets"]
    f = results["findings"]
    lines = [
        "# Reproduction: federated DP-PCA (ELFedPCA notes) — utility against ε, k and s",
        "",
        f"Mode: **{'quick' if s['quick'] else 'full'}**, random_state = {s['random_state']}, "
        f"wall time {results['wall_time_s']:.1f} s "
        f"({s['n_threads'] or 'default'} BLAS thread(s)).",
        "",
        "## Settings",
        "",
        "- Data (the notes name none):",
    ]
    for ds in data.values():
        lines.append(f"  - {ds['title']}: {ds['n_train']} × {ds['n_features']} training, "
                     f"{ds['n_test']} test ({ds['split']}); k ∈ {ds['ks']}, "
                     f"plots at k = {ds['k_plot']}.")
    for name, why in results["skipped"].items():
        lines.append(f"  - {name}: **skipped** ({why}).")
    lines += [
        f"- Sites s ∈ {s['sites']}, balanced (`partition_iid`) and unbalanced "
        f"(`partition_unbalanced`, log-normal sizes, σ = {s['sigma']:g}); the partition is "
        "fixed per setting, only the DP noise changes between seeds.",
        f"- Modes: {', '.join(s['modes'])} (`FederatedPCA`); ε ∈ {s['epsilons']} (the "
        f"classic Gaussian mechanism is only proven for ε < 1), δ = {s['delta']:g}; "
        f"{s['n_seeds']} noise seed(s) per cell (mean ± sample sd).",
        "- **No DP guarantee for these fits:** every DP fit passes `noise_seed` so the "
        "figures can be redrawn exactly, and anyone who knows that seed subtracts the "
        "noise (ε = ∞). ε is the calibration target; without `noise_seed` the same noise "
        "comes from the CSPRNG and the guarantee holds (except for elfedpca, which as "
        "published claims none).",
        "- Mechanism of each DP mode: " + "; ".join(
            f"`{m}`: {why}" for m, why in s["mechanisms"].items()) + ".",
        "- q = tr(V'ᵀAV')/tr(V*ᵀAV*), A = exact second moment of the pooled training rows, "
        "centred and unit-normalised as the mode's mechanism does it, V* its exact top k. "
        "`plain` does not normalise rows: its q is taken against the covariance it "
        "targets (its q against the normalised A is in results.json, "
        "`q_on_normalised`).",
        f"- One fit at the largest k serves every k (the top k of one noisy matrix are the "
        f"first k of its top k_max). SVM: StandardScaler + LinearSVC(C = {s['svm_c']:g}, "
        f"dual='auto', max_iter = {s['svm_max_iter']}), trained on `published_` (labels "
        "reordered to the site order) and tested on `transform(X_test)`; computed at the "
        f"plotted k for every ε and at every k for ε = {s['eps_for_k']:g}.",
        "- Measured noise: the sd of the upper triangle of A' − A (A' = `noisy_moment_`, A "
        "centred as the mode does, on the mean the fit released), divided by the τ of "
        "centralised DP-PCA under the mode's own mechanism: sqrt(2 ln(1.25/δ'))/(nε') "
        "with ε' = ε/2, δ' = δ/2 for the released-mean modes (the other half pays for the "
        "noisy mean), sqrt(2 ln(1.25/δ))/(nε) for elfedpca.",
        "",
    ]
    for ds in data.values():
        lines += _dataset_section(ds, st)
    lines += ["## Figures", ""]
    for caption, file in files.items():
        lines += [f"![{caption}]({file})", ""]

    lines += ["## Findings (computed from the numbers above)", ""]
    mono = f["q_vs_epsilon"]
    lines.append("- **q against ε.** " + "; ".join(
        f"{m}: {v['strictly_increasing']}/{v['curves']} curves strictly increasing, "
        f"{v['increasing_within_sd']}/{v['curves']} non-decreasing within one seed sd, "
        f"q(ε max) > q(ε min) in {v['last_above_first']}/{v['curves']}"
        for m, v in mono.items()) + ".")
    for mode in ("elfedpca", "secure"):
        vc = f["vs_central"][mode]
        lines.append(
            f"- **{mode} vs central.** q difference: mean {vc['mean_diff']:+.4f}, mean |Δ| "
            f"{vc['mean_abs_diff']:.4f}, max |Δ| {vc['max_abs_diff']:.4f}; "
            + _null_text(vc) + f". SVM accuracy difference mean "
            f"{100 * vc['svm_mean_diff']:+.2f} pts, max |Δ| "
            f"{100 * vc['svm_max_abs_diff']:.2f} pts. "
            + ("Equal within the noise." if vc["equal_within_noise"]
               else "**Not** equal within the noise.")
            + (" Expected: secure's shares leave the full τ to site 1, so its total noise "
               "is sqrt(s/(s − 1)) times central's." if mode == "secure" else ""))
    gap = f["dpdispca_gap"]
    lines.append("- **dpdispca is worse, more so as s grows.** q(central) − q(dpdispca), "
                 "mean [min, max] over data sets, splits, ε and k: " + "; ".join(
                     f"s = {n}: {g['q_gap_mean']:+.3f} [{g['q_gap_min']:+.3f}, "
                     f"{g['q_gap_max']:+.3f}], below all three other DP modes in "
                     f"{g['dpdispca_below_all_others']}/{g['cells']} cells, SVM gap "
                     f"{100 * g['svm_gap_mean']:+.2f} pts" for n, g in gap.items()) + ".")
    nr = f["noise_ratio"]
    lines.append("- **Measured noise (sd of A' − A over τ).** " + "; ".join(
        f"{m}: " + ", ".join(f"s={n} {v:.2f}" for n, v in nr[m].items())
        for m in DP_MODES) + ". Theory: 1 for elfedpca and central; sqrt(s/(s − 1)) for "
        "secure (" + ", ".join(f"s={n} {v:.2f}" for n, v in
                                f["noise_ratio_expected"]["secure"].items())
        + "), whose s sites each add a share of variance τ²/(s − 1) so that site 1, which "
        "decodes the total and knows its own share, still faces noise of sd τ; √s for "
        "dpdispca, whose site i adds τ_i = sqrt(2 ln(1.25/δ))/(N_i ε) to A_i = X_iᵀX_i/N_i "
        "and is weighted by N_i/n, so each site contributes noise of sd τ whatever N_i and "
        "the s independent draws add up to √s·τ. With s = 2, secure and dpdispca therefore "
        "put the same noise on A'; secure still hides each A_i from site 1.")
    ub = f["unbalanced_minus_balanced"]
    lines.append("- **Unbalanced vs balanced.** q(unbalanced) − q(balanced): " + "; ".join(
        f"{m} mean {v['mean_diff']:+.4f} (max |Δ| {v['max_abs_diff']:.4f})"
        for m, v in ub.items()) + ". No mode's noise depends on the site sizes (see the "
        "previous point), so no systematic difference is expected.")
    lines.append(f"- **q against k** (ε = {s['eps_for_k']:g}): " + "; ".join(
        f"{data[name]['title']}: strictly decreasing in {c['decreasing']}/{c['curves']} DP "
        f"curves, strictly increasing in {c['increasing']}/{c['curves']}"
        for name, c in f["q_vs_k"].items()) + " (the others are not monotone). Noise of "
        "equal variance in every direction matters most for the weak trailing "
        "components, so q need not rise with k.")
    lines.append(f"- **plain** is exact: max |q − 1| = {f['plain_q_max_error']:.1e}, max "
                 f"|A_federated − A_pooled| = {f['plain_moment_max_error']:.1e}.")
    lines.append("- The published projections Y_i are raw projections of each site's "
                 "rows: only the components are differentially private.")
    lines += ["", "## Agreement with the paper", "",
              "The notes report CE (captured energy) and SVM experiments against DPdisPCA "
              "without their numbers; only the claims below can be checked. Verdicts are "
              "computed.", ""]
    claims = results["agreement"]
    lines += agreement_table(["claim", "here"], [[c["claim"], c["finding"]] for c in claims],
                             claims)
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main
@reports_progress("pca")
def reproduce_pca(
    out_dir: Path | str,
    *,
    quick: bool = False,
    random_state: int = 0,
    progress: ProgressOption = None,
    n_threads: int | None = 1,
) -> ReproductionResult:
    """Run the federated DP-PCA experiments (q and SVM accuracy vs ε, k, s) and report.

    Parameters
    ----------
    out_dir
        Directory for ``report.md``, ``results.json`` and the figures
        ``q_vs_epsilon_<data>.png``, ``svm_vs_epsilon_<data>.png``,
        ``q_vs_k_<data>.png`` (per data set) and ``utility_vs_sites.png``; created if
        missing.
    quick
        Small settings for tests (a few seconds): Fashion-MNIST 1500 / 300 rows,
        s ∈ {2, 5}, ε ∈ {0.2, 0.9}, one k, one noise seed. Full: 10000 / 2000 rows,
        s ∈ {2, 5, 10, 20}, ε ∈ {0.1, 0.2, 0.5, 0.9}, three k, three seeds.
    random_state
        Seed of the digits split, the partitions, the SVMs and the ``noise_seed`` of
        every DP fit (which voids those fits' DP guarantee; the report says so).
    progress
        False or None (silent), True (bars in a terminal or a notebook) or a callable
        receiving each :class:`~islands.progress.ProgressUpdate` (its ``info``
        is the step's message).
    n_threads
        Threads the BLAS and OpenMP libraries may use (through ``threadpoolctl``);
        ``None`` leaves them alone. The sites of each fit already run in threads of
        their own.

    Returns
    -------
    ReproductionResult
        Its ``to_json()`` is ``results.json``: ``settings``, ``datasets`` (per
        data set: metadata, ``tau``, ``svm_exact_normalised`` and ``settings``, keyed
        ``"<balanced|unbalanced>_s<s>"``, each with ``plain`` and one entry per DP mode
        holding ``q`` (ε × k × seed), ``svm`` (ε × seed, at the plotted k),
        ``svm_vs_k`` (k × seed, at ``eps_for_k``), ``noise_ratio``, ``tau`` and their
        means and sds), ``findings``, ``agreement`` (claims with a ``verdict`` of
        ``"agrees"``, ``"partly"`` or ``"differs"``), ``skipped``, ``figures`` and
        ``wall_time_s``.

    Notes
    -----
    Fashion-MNIST is skipped (and named in ``skipped``) when its files are absent
    (:func:`islands.data.find_fashion_mnist`); digits always runs.
    """
    start = time.perf_counter()
    run = setup_run("reproduce_pca", out_dir, random_state, n_threads, progress)
    s = _settings(bool(quick), run.random_state, run.n_threads)
    with thread_limit(run.n_threads, preload=("scipy.linalg", "sklearn.svm")):
        return _run(run.out, s, run.say, start)


def _run(out: Path, s: _Settings, say: Progress, start: float) -> ReproductionResult:
    loaders, skipped = two_datasets(_load_fashion, _load_digits)

    datasets: dict[str, Any] = {}
    for name, load in loaders:
        say(f"[{name}] loading")
        datasets[name] = _run_dataset(load(s), s, list(_TITLES).index(name), say)

    findings = _findings(datasets, s)
    agreement = _agreement(datasets, findings, s)
    say("plotting")
    files: dict[str, str] = {}
    for name, ds in datasets.items():
        title = ds["title"]
        files[f"{title}: q vs ε"] = _plot_grid(
            ds, s, "q_eps", out / f"q_vs_epsilon_{name}.png").name
        files[f"{title}: SVM accuracy vs ε"] = _plot_grid(
            ds, s, "svm_eps", out / f"svm_vs_epsilon_{name}.png").name
        files[f"{title}: q vs k"] = _plot_grid(ds, s, "q_k", out / f"q_vs_k_{name}.png").name
    files["Utility vs number of sites"] = _plot_sites(datasets, s,
                                                      out / "utility_vs_sites.png").name
    result = ReproductionResult(
        settings=s.as_dict(), sections={"datasets": datasets, "findings": findings},
        agreement=agreement, skipped=skipped, figures=files,
        wall_time_s=time.perf_counter() - start)
    results = result.to_json()
    (out / "report.md").write_text(_report(results, files, s), encoding="utf-8")
    write_json(out / "results.json", results)
    say(f"done in {result.wall_time_s:.1f} s: report.md")
    return result
