"""``islands demo``: the whole system in a few minutes, one part per protocol family.

Each part runs the library's public API on real data that ships with islands' set-up
(Fashion-MNIST from Debian's ``dataset-fashion-mnist``, scikit-learn's bundled sets),
at settings small enough for the demo's time budget (about 30 s a part on 2 cores),
and returns a :class:`PartResult`: what ran, its key figures, its time, the bytes its
parties exchanged (the transcripts' totals) and its figures.

:data:`PARTS` maps each part's name to its function; :func:`run_demo` runs the parts
asked for and writes ``results.json``, ``report.md`` and the PNG figures into one
folder (the shape ``islands report`` turns into an HTML page).

Parts
-----
``scca``
    Swarm CCA between two peers on Fashion-MNIST's left and right image halves (secure
    protocol, with a dealer), its correlations against pooled CCA, and the leakage
    audit of the paper's protocol beside the secure one (:mod:`islands.cca.audit`).
``pca``
    Federated DP-PCA on digits split over three sites: ELFedPCA's leak against the
    secure mode (:mod:`islands.pca.audit`) and the captured variance against ε.
``hfl``
    APFL under CKKS over a chaos permutation on the non-IID three-client split of
    Fashion-MNIST, against plain FedAvg, and the gradient-leakage audit
    (:mod:`islands.hfl.audit`).
``vfl``
    Private set intersection on unaligned IDs, vertical logistic regression under
    homomorphic encryption (HEU's Okamoto-Uchiyama when installed, else Paillier), and
    federated inference on new IDs (:mod:`islands.vfl`).
``secureboost``
    SecureBoost's gradient-boosted trees across the same split of breast cancer, rows
    aligned by PSI, gradients under HEU's Okamoto-Uchiyama, against XGBoost on the joined
    data with the same bins (:mod:`islands.vfl.secureboost.job`).
``ftl``
    Federated transfer learning (:class:`islands.vfl.FederatedTransferLearner`), then
    each client's contribution and reward share in a small horizontal federation
    (:mod:`islands.hfl.contribution`).

This module composes public APIs only; nothing here is a protocol.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from islands.aggregation.protect import build_aggregator
from islands.cca import SwarmCCA
from islands.cca.audit import audit_scca
from islands.cca.maths import pooled_cca
from islands.data import (
    find_fashion_mnist,
    load_fashion_mnist,
    load_sklearn,
    partition_by_class,
    partition_iid,
    split_image_views,
)
from islands.errors import ValidationError
from islands.experiments.report import Progress, markdown_table, new_figure, save_figure
from islands.hfl import APFL, FedAvg, FederatedModel
from islands.hfl.contribution import Contribution
from islands.pca import FederatedPCA
from islands.pca.audit import audit_pca
from islands.psi import intersect
from islands.reporting import ResultSet
from islands.run_report import write_html

__all__ = [
    "PARTS",
    "DemoResult",
    "MissingDependency",
    "PartResult",
    "Settings",
    "check_parts",
    "ftl_part",
    "hfl_part",
    "pca_part",
    "run_demo",
    "scca_part",
    "secureboost_part",
    "vfl_part",
]


class MissingDependency(RuntimeError):
    """A part needs an optional package or data set that is not installed."""


@dataclass(frozen=True)
class Settings:
    """How every part runs.

    Attributes
    ----------
    out
        Folder for the figures (and ``results.json``/``report.md`` by :func:`run_demo`).
    quick
        Tiny sizes (tests): seconds a part; the figures are then not meaningful.
    seed
        Seeds the data splits and the seeded parts of the protocols (keys and masks
        always come from the OS's generator).
    say
        Called with a short message at each step.
    """

    out: Path
    quick: bool = False
    seed: int = 0
    say: Progress = field(default=lambda _msg: None)


@dataclass(frozen=True)
class PartResult:
    """What one part of the demo ran and found.

    Attributes
    ----------
    name
        The part's name in :data:`PARTS`.
    ran
        What ran, in a few words.
    key_figure
        The headline result, one line.
    figures_of_merit
        The key figures by name (numbers).
    seconds
        Wall time of the part.
    bytes_exchanged
        Bytes the parties sent, from the runs' transcripts (0 for a skipped part).
    figures
        The PNG files written, relative to the output folder.
    summary
        A short paragraph in plain words: what the part shows.
    details
        Further results (settings, per-setting figures), JSON-ready.
    skipped
        Why the part did not run (a missing optional dependency), else None.
    """

    name: str
    ran: str
    key_figure: str
    figures_of_merit: dict[str, float]
    seconds: float
    bytes_exchanged: int
    figures: list[str]
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the result as JSON-ready values."""
        return asdict(self)


def _need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingDependency(f"needs {', '.join(missing)} (not installed)")


def _fashion(n_train: int, n_test: int = 0) -> tuple[Any, Any]:
    if find_fashion_mnist() is None:
        raise MissingDependency("needs Fashion-MNIST (apt-get install dataset-fashion-mnist)")
    train = load_fashion_mnist(split="train", n_samples=n_train)
    test = load_fashion_mnist(split="test", n_samples=n_test) if n_test else None
    return train, test


# ---------------------------------------------------------------- scca


def scca_part(s: Settings) -> PartResult:
    """Swarm CCA on Fashion-MNIST halves, then the audit of the paper's and the secure protocol."""
    _need("scipy")

    start = time.perf_counter()
    if s.quick:  # Fashion-MNIST halves need more rows than pixels: digits' 8×8 images
        data, source = load_sklearn("digits"), "digits"
        n = data.X.shape[0]
    else:
        n = 1500
        data, source = _fashion(n)[0], "Fashion-MNIST 14×14"
    assert data.image_shape is not None
    pixels, shape = data.X, data.image_shape
    if not s.quick:  # 2×2 mean pooling: 98+98 pixels keep the audits within the budget
        h, w = shape[0] // 2, shape[1] // 2
        pixels = pixels.reshape(n, h, 2, w, 2).mean(axis=(2, 4)).reshape(n, h * w)
        shape = (h, w)
    left, right = split_image_views(pixels, shape)
    k = 10
    s.say(f"secure Swarm CCA between two peers (+ dealer), {source} {n} rows, "
          f"{left.shape[1]}+{right.shape[1]} pixels")
    model = SwarmCCA(n_components=k, protocol="secure", rank_tol=1e-10).fit(left, right)
    pooled, _, _ = pooled_cca(left, right, k, rank_tol=1e-10)
    rho = np.asarray(model.canonical_correlations_, dtype=float)
    agreement = float(np.max(np.abs(rho - pooled[:rho.size])))
    nbytes = int(model.transcript_.total_bytes)
    errors: dict[str, float] = {}
    for protocol in ("paper", "secure"):
        s.say(f"leakage audit of the {protocol} protocol (S1 rebuilds Y from the messages)")
        report = audit_scca(left, right, protocol=protocol, random_state=s.seed)
        errors[protocol] = float(report.y_reconstruction_rel_error_extra_rows)

    fig = new_figure(10, 3.6)
    ax1, ax2 = fig.subplots(1, 2)
    idx = np.arange(1, rho.size + 1)
    ax1.plot(idx, pooled[:rho.size], "o-", label="pooled CCA (all data in one place)")
    ax1.plot(idx, rho, "x--", label="secure Swarm CCA")
    ax1.set(xlabel="component", ylabel="canonical correlation ρ",
            title="Correlations: federated = pooled")
    ax1.legend()
    names = list(errors)
    ax2.bar(names, [max(errors[p], 1e-16) for p in names], color=["tab:red", "tab:green"])
    ax2.set_yscale("log")
    ax2.axhline(1.0, color="grey", ls=":", lw=1)
    ax2.set(ylabel="‖Ŷ − Y‖ / ‖Y‖ (log)", title="S1 rebuilding S2's data (1 = guessing)")
    figure = save_figure(fig, s.out / "scca.png").name
    return PartResult(
        name="scca", ran=(f"Swarm CCA, 2 peers + dealer, {source} "
                          f"{n}×({left.shape[1]}+{right.shape[1]})"),
        key_figure=(f"max |ρ − ρ_pooled| = {agreement:.1e}; Y rebuilt with error "
                    f"{errors['paper']:.1e} (paper) vs {errors['secure']:.2g} (secure)"),
        figures_of_merit={"max_abs_rho_diff": agreement,
                          "y_error_paper": errors["paper"],
                          "y_error_secure": errors["secure"]},
        seconds=time.perf_counter() - start, bytes_exchanged=nbytes, figures=[figure],
        summary=("Two organisations each hold one half of every image and find the "
                 "directions in which their halves are most correlated, without pooling "
                 "the pixels. The secure protocol gives the same correlations as CCA on "
                 "pooled data. The audit attacks the messages S1 received: under the "
                 "paper's protocol S1 rebuilds all of S2's data from a few rows it knows "
                 "(error near 0); under the secure protocol the same attack does no better "
                 "than guessing (error 1 or more). Cost: the secure run exchanged "
                 f"{_bytes(nbytes)} between the peers and the dealer."),
        details={"data": source, "rows": n, "n_components": k, "rho": rho.tolist(),
                 "rho_pooled": pooled[:rho.size].tolist(),
                 "y_reconstruction_rel_error": errors})


# ---------------------------------------------------------------- pca


def _captured(components: Any, cov: Any, best: float) -> float:
    v = np.asarray(components, dtype=float)
    return float(np.trace(v @ cov @ v.T) / best)


def pca_part(s: Settings) -> PartResult:
    """Federated DP-PCA on digits over three sites: ELFedPCA's leak, variance against ε."""
    _need("sklearn")
    import warnings


    start = time.perf_counter()
    ds = load_sklearn("digits")
    X = ds.X / 16.0  # pixels in [0, 1]: rows of norm ≤ 8, within the DP's bounds
    parts = [X[idx] for idx in partition_iid(X.shape[0], 3, random_state=s.seed)]
    k = 5
    s.say("site 1 attacks ELFedPCA and the secure mode (ε = 0.5)")
    audit = audit_pca(parts, n_components=k, epsilon=0.5, random_state=s.seed)
    centred = X - X.mean(axis=0)
    cov = centred.T @ centred / X.shape[0]
    best = float(np.sum(np.linalg.eigvalsh(cov)[::-1][:k]))
    # the classic Gaussian mechanism FederatedPCA uses is proven for ε < 1 only
    epsilons = [0.1, 0.5] if s.quick else [0.02, 0.05, 0.1, 0.2, 0.5, 0.9]
    captured: dict[str, list[float]] = {"secure": [], "central": []}
    nbytes = 0
    for eps in epsilons:
        s.say(f"federated PCA at ε = {eps} (secure mode, and centralised DP for reference)")
        for mode in captured:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                model = FederatedPCA(k, epsilon=eps, delta=1e-5, mode=mode,
                                     random_state=s.seed).fit(parts)
            captured[mode].append(_captured(model.components_, cov, best))
            if mode == "secure":
                nbytes += int(model.transcript_.total_bytes)
    fig = new_figure(6.4, 4.0)
    ax = fig.subplots()
    for mode, label in (("secure", "federated, secure mode"), ("central", "centralised DP")):
        ax.plot(epsilons, captured[mode], "o-", label=label)
    ax.axhline(1.0, color="grey", ls=":", lw=1, label="no noise")
    ax.set_xscale("log")
    ax.set(xlabel="ε (δ = 1e-5)", ylabel=f"variance captured by {k} components (share of best)",
           title="Federated DP-PCA on digits, 3 sites")
    ax.legend()
    figure = save_figure(fig, s.out / "pca.png").name
    at_half = captured["secure"][epsilons.index(0.5)]
    return PartResult(
        name="pca", ran=f"federated DP-PCA, 3 sites, digits {X.shape[0]}×{X.shape[1]}, k={k}",
        key_figure=(f"site 1 rebuilds the other sites' matrices with relative error "
                    f"{audit.elfedpca_recovery_rel_error:.1e} (ELFedPCA) vs "
                    f"{_error_text(audit.secure_recovery_rel_error_data)} (secure); "
                    f"{at_half:.0%} of the best variance at ε=0.5"),
        figures_of_merit={"elfedpca_recovery_rel_error": audit.elfedpca_recovery_rel_error,
                          "secure_recovery_rel_error": audit.secure_recovery_rel_error,
                          "secure_recovery_rel_error_data":
                              audit.secure_recovery_rel_error_data,
                          "captured_variance_eps05": at_half},
        seconds=time.perf_counter() - start, bytes_exchanged=nbytes, figures=[figure],
        summary=("Three sites compute principal components of their joint data with "
                 "differential privacy. In the published ELFedPCA scheme every site knows "
                 "the noise, so site 1 subtracts it and reads each other site's second-moment "
                 "matrix exactly. In the secure mode the sites' matrices are masked and each "
                 "adds its own share of the noise, so the same reading is masked garbage: "
                 "its error is "
                 f"{_error_text(audit.secure_recovery_rel_error_data)} the size of "
                 "the matrix it tries to read (1× is as bad as guessing zero); site 1 "
                 "learns only the noisy sum. The figure shows the price of privacy: the "
                 "share of the best possible variance the private components capture, "
                 f"against ε ({at_half:.0%} at ε = 0.5, "
                 f"{captured['central'][epsilons.index(0.5)]:.0%} if one trusted curator "
                 "added the noise; the noise is drawn afresh from the OS each run, so these "
                 "shares vary from run to run). Cost: the secure runs exchanged "
                 f"{_bytes(nbytes)} in all ({len(epsilons)} values of ε)."),
        details={"epsilons": epsilons, "captured_variance": captured,
                 "audit": audit.to_dict()})


# ---------------------------------------------------------------- hfl


def _model_spec() -> Any:
    from islands.hfl.torch.models import ModelSpec  # loads torch

    return ModelSpec


def hfl_part(s: Settings) -> PartResult:
    """APFL under CKKS + chaos against FedAvg on the non-IID split, and the gradient audit."""
    _need("torch", "tenseal")
    from islands.hfl.audit import audit_gradients

    start = time.perf_counter()
    n_train, n_test = (600, 200) if s.quick else (3000, 1000)
    epochs = 1 if s.quick else 3
    train, test = _fashion(n_train, n_test)
    assert test is not None
    parts = [(train.X[i], train.y[i])
             for i in partition_by_class(train.y, "0-3,4-6,7-9", random_state=s.seed)]
    spec = _model_spec()(kind="mlp", input_shape=(784,), n_outputs=10, hidden=(32,))
    runs: dict[str, Any] = {
        "APFL + CKKS + chaos": APFL(tau=15, phi=5, batch_size=64, lr=0.1, momentum=0.5,
                                    aggregator=build_aggregator(["ckks", "chaos"])),
        "FedAvg (plain)": FedAvg(local_steps=15, batch_size=21, lr=0.1, momentum=0.5),
    }
    curves: dict[str, list[float]] = {}
    bytes_by_run: dict[str, int] = {}
    for label, strategy in runs.items():
        s.say(f"{label}: 3 clients (classes 0-3, 4-6, 7-9), {epochs} epochs")
        fm = FederatedModel(spec, strategy, epochs=epochs, random_state=s.seed).fit(
            parts, test=(test.X, test.y))
        curves[label] = [float(e.test.get("accuracy", float("nan"))) for e in fm.history_]
        bytes_by_run[label] = int(fm.transcript_.total_bytes)
    nbytes = sum(bytes_by_run.values())
    s.say("gradient-leakage audit: what the server rebuilds of one client's image")
    audit = audit_gradients(s.out / "hfl_audit", protections=("plain", "ckks"), seed=s.seed,
                            other_rows=8 if s.quick else 32)
    fig = new_figure(6.4, 4.0)
    ax = fig.subplots()
    for label, acc in curves.items():
        ax.plot(range(1, len(acc) + 1), acc, "o-", label=label)
    ax.set(xlabel="epoch", ylabel="test accuracy", title="Non-IID Fashion-MNIST, 3 clients")
    ax.legend()
    figure = save_figure(fig, s.out / "hfl.png").name
    figures = [figure]
    if audit.figure is not None:
        figures.append(str(Path("hfl_audit") / Path(audit.figure).name))
    apfl, fedavg = (curves[k][-1] for k in runs)
    leak_plain = float(audit.errors.get("plain", float("nan")))
    leak_ckks = float(audit.errors.get("ckks", float("nan")))
    leak_collusion = audit.errors.get("ckks+collusion")
    collusion = ("" if leak_collusion is None else
                 " But every client holds the same CKKS secret key: one client that hands "
                 "it to the server lets it rebuild the image again (error "
                 f"{float(leak_collusion):.1e}).")
    encrypted, plain = (bytes_by_run[k] for k in runs)
    return PartResult(
        name="hfl", ran=f"APFL under CKKS+chaos vs FedAvg, 3 non-IID clients, {epochs} epochs",
        key_figure=(f"accuracy {apfl:.3f} (APFL, encrypted) vs {fedavg:.3f} (FedAvg); server "
                    f"rebuilds an image with error {leak_plain:.1e} (plain) vs {leak_ckks:.2g} "
                    f"(CKKS)"),
        figures_of_merit={"accuracy_apfl_ckks_chaos": apfl, "accuracy_fedavg": fedavg,
                          "leak_error_plain": leak_plain, "leak_error_ckks": leak_ckks},
        seconds=time.perf_counter() - start, bytes_exchanged=nbytes, figures=figures,
        summary=("Three clients, each holding only some classes of Fashion-MNIST, train one "
                 "model. APFL adapts how often they synchronise and, here, uploads its models "
                 "encrypted under CKKS over a secret permutation, so the server only adds "
                 "ciphertexts; plain FedAvg is the reference (the two accuracies compare "
                 "two algorithms: encryption itself changes the average only by CKKS's "
                 "rounding). The audit shows why it matters: from one plain update the "
                 "server rebuilds a client's image almost exactly (error near 0), while "
                 f"under CKKS it gets nothing better than noise (error 1).{collusion} "
                 f"Cost: {_bytes(encrypted)} exchanged encrypted against {_bytes(plain)} "
                 "in the clear."),
        details={"train_rows": n_train, "test_rows": n_test, "epochs": epochs,
                 "bytes_by_run": bytes_by_run,
                 "accuracy_by_epoch": curves, "audit_errors": audit.errors,
                 "audit_skipped": audit.skipped})


# ---------------------------------------------------------------- vfl


def _he_name(he: str) -> str:
    return {"ou": "Okamoto-Uchiyama", "paillier": "Paillier", "none": "no encryption"}[he]


def _error_text(rel_error: float) -> str:
    """Return a relative error for people: a masked reading's 2.0e+12 is 'over 1000×'."""
    return f"{rel_error:.2g}×" if rel_error < 1000 else "over 1000×"


def vfl_part(s: Settings) -> PartResult:
    """PSI on unaligned IDs, logistic regression under HE, inference on new IDs."""
    _need("phe", "sklearn")
    from sklearn.metrics import roc_auc_score

    from islands.vfl import VerticalLogisticRegression

    start = time.perf_counter()
    ds = load_sklearn("breast_cancer")
    X = (ds.X - ds.X.mean(axis=0)) / ds.X.std(axis=0)
    y = ds.y
    rng = np.random.default_rng(s.seed)
    order = rng.permutation(X.shape[0])
    train, new = order[:455], order[455:]
    # each party misses 5% of the other's people and keeps its own order
    rows_a = rng.permutation(train[rng.random(train.size) > 0.05])
    rows_b = rng.permutation(train[rng.random(train.size) > 0.05])
    ids = np.array([f"patient-{i:04d}" for i in range(X.shape[0])])
    s.say(f"PSI on {rows_a.size} and {rows_b.size} unaligned IDs, then logistic regression "
          "on secret shares, the coordinator dealing")
    model = VerticalLogisticRegression(epochs=3 if s.quick else 5, learning_rate=0.3,
                                       random_state=s.seed)
    model.fit(X[rows_a, 20:], X[rows_b, :10], y[rows_b], ids_a=list(ids[rows_a]),
              ids_b=list(ids[rows_b]))
    nbytes = int(model.transcript_.total_bytes)
    s.say(f"federated inference on {new.size} new IDs (aligned by PSI first)")
    new_a = rng.permutation(new)
    new_b = rng.permutation(new)
    common = intersect(list(ids[new_a]), list(ids[new_b]))
    pos = {v: i for i, v in enumerate(ids)}
    rows = np.array([pos[str(v)] for v in common])
    scores = model.decision_function(X[rows, 20:], X[rows, :10])
    nbytes += int(model.inference_transcript_.total_bytes)
    auc = float(roc_auc_score(y[rows], scores))
    aligned = len(model.ids_ or [])
    fig = new_figure(6.4, 4.0)
    ax = fig.subplots()
    ax.plot(range(1, len(model.loss_history_) + 1), model.loss_history_, "o-")
    ax.set(xlabel="epoch", ylabel="Taylor loss (read by the coordinator)",
           title="Vertical logistic regression, breast cancer, secret-shared")
    figure = save_figure(fig, s.out / "vfl.png").name
    return PartResult(
        name="vfl", ran=("PSI + vertical logistic regression (secret sharing), breast "
                         "cancer, A 20 / B 10 features"),
        key_figure=f"{aligned} rows aligned privately; AUC {auc:.3f} on {rows.size} new IDs",
        figures_of_merit={"aligned_rows": float(aligned), "auc_new_ids": auc},
        seconds=time.perf_counter() - start, bytes_exchanged=nbytes, figures=[figure],
        summary=("Two organisations hold different columns about overlapping people, "
                 "listed in different orders. Private set intersection finds the people both "
                 "hold without revealing the others; then a logistic regression trains "
                 "across the columns on secret shares: every value exchanged is masked, a "
                 "coordinator deals the correlated randomness and reads only the loss "
                 "(engine='he' runs the paper's homomorphic encryption instead, the same "
                 "model 50-400x slower). New people are "
                 "scored the same way: aligned by PSI, each party computes its partial "
                 "score, and the coordinator adds them. What leaks: each party learns "
                 "which of its IDs the other holds and the other's set size; the "
                 "coordinator sees every batch's loss and, at inference, the partial "
                 "scores in the clear, as in the paper; the coordinator must collude with "
                 "no data party (docs/vfl.md lists it all). Cost: "
                 f"{_bytes(nbytes)} exchanged."),
        details={"engine": model.plan_.engine, "train_ids_a": int(rows_a.size),
                 "train_ids_b": int(rows_b.size),
                 "loss_history": [float(v) for v in model.loss_history_],
                 "new_ids": int(rows.size)})


# ---------------------------------------------------------------- secureboost


def secureboost_part(s: Settings) -> PartResult:
    """SecureBoost on breast cancer after PSI, with XGBoost on the same bins beside it."""
    _need("heu", "sklearn")
    from islands.vfl.keys import insecure_key_note
    from islands.vfl.secureboost.job import (
        parse_secureboost_job,
        report_figure,
        run_secureboost,
    )

    start = time.perf_counter()
    trees, bits = (3 if s.quick else 5), (1024 if s.quick else 2048)
    job = parse_secureboost_job({
        "name": "secureboost", "kind": "secureboost", "seed": s.seed,
        "data": {"name": "breast_cancer"}, "parties": {"b_features": 10, "psi": True},
        "model": {"n_estimators": trees, "max_depth": 3, "key_bits": bits,
                  "insecure_keys": s.quick}}, source="<demo>")
    s.say(f"PSI, then {trees} trees under {bits}-bit Okamoto-Uchiyama; XGBoost beside")
    result = run_secureboost(job)
    auc = result.metrics["auc"]
    xgb = result.metrics.get("xgboost_auc")
    figure = save_figure(report_figure(result), s.out / "secureboost.png").name
    versus = ("XGBoost not installed" if xgb is None
              else f"XGBoost on the same bins {xgb:.3f}")
    gains = result.gain_by_party()
    share = gains["A"] / (sum(gains.values()) or 1.0)
    note = insecure_key_note("ou", bits)
    return PartResult(
        name="secureboost", ran=f"PSI + SecureBoost ({_he_name('ou')}), breast cancer, "
                                f"{trees} trees",
        key_figure=f"AUC {auc:.3f} on new rows; {versus}",
        figures_of_merit={"auc": auc, **({"xgboost_auc": xgb} if xgb is not None else {}),
                          "aligned_rows": float(result.train_rows),
                          "seconds_per_tree": result.seconds_per_tree,
                          "passive_gain_share": share},
        seconds=time.perf_counter() - start, bytes_exchanged=result.bytes, figures=[figure],
        summary=("Gradient-boosted trees across the same two organisations. The label "
                 "holder encrypts every row's gradient and hessian; the other party sums "
                 "them into encrypted histograms of its own features' bins and sends them "
                 "back; the label holder decrypts the sums and picks each split, which "
                 "only the party owning the feature can read (the threshold stays with "
                 "it). No approximation: the trees are XGBoost's on the same bins, as the "
                 "test AUC shows. What leaks: the label holder sees the gradient sums per "
                 "bin of the other party's features; the other party learns which of its "
                 "rows go left at each of its own splits (Cheng et al. 2021). The passive "
                 f"party's features carry {100 * share:.0f}% of the trees' gain. Cost: "
                 f"{_bytes(result.bytes)} exchanged, {result.seconds_per_tree:.1f} s a "
                 "tree."),
        details={"he": "ou", "key_bits": bits, **({"security_warning": note} if note else {}),
                 "per_tree": result.per_tree, "gain_by_party": gains,
                 "xgboost": result.xgboost})


# ---------------------------------------------------------------- ftl + contribution


def ftl_part(s: Settings) -> PartResult:
    """Federated transfer learning, then each client's contribution and reward share."""
    _need("phe", "torch", "sklearn")
    from islands.vfl import FederatedTransferLearner

    start = time.perf_counter()
    ds = load_sklearn("breast_cancer")
    X = (ds.X - ds.X.mean(axis=0)) / ds.X.std(axis=0)
    y = ds.y
    rows = np.random.default_rng(s.seed).permutation(y.size)
    b_rows = rows[:300]
    a_rows = np.concatenate([rows[:60], rows[300:480]])
    test = rows[480:]
    s.say("transfer learning: B labels 300 people, A 240 (60 shared), on secret shares")
    ftl = FederatedTransferLearner(dim=8, hidden=(16,), epochs=2 if s.quick else 12,
                                   batch_size=32, random_state=s.seed)
    ftl.fit(X[a_rows][:, :15], X[b_rows][:, 15:], y[b_rows],
            [f"person-{i}" for i in a_rows], [f"person-{i}" for i in b_rows])
    accuracy = float(ftl.score(X[test][:, :15], y[test]))
    nbytes = int(ftl.transcript_.total_bytes)
    nbytes += int(ftl.inference_transcript_.total_bytes)

    s.say("contribution: 4 clients of FedAvg on digits, one holding shuffled labels")
    digits = load_sklearn("digits")
    Xd = digits.X / 16.0
    order = np.random.default_rng(s.seed).permutation(Xd.shape[0])
    val, train = order[:300], order[300:]
    chunks = np.array_split(train, 4)
    labels = digits.y.copy()
    labels[chunks[3]] = np.random.default_rng(s.seed + 1).permutation(labels[chunks[3]])
    parts = [(Xd[c], labels[c]) for c in chunks]
    spec = _model_spec()("mlp", (64,), 10, hidden=(32,))
    fm = FederatedModel(spec, FedAvg(local_steps=5, batch_size=32), epochs=2 if s.quick else 4,
                        random_state=s.seed, eval_fraction=0.0,
                        contribution=Contribution((Xd[val], digits.y[val]),
                                                  methods=("gtg", "loo")))
    fm.fit(parts)
    rep = fm.contribution_
    assert rep is not None
    nbytes += int(fm.transcript_.total_bytes)
    shares = {c: float(v) for c, v in zip(rep.clients, rep.shares, strict=True)}
    fig = new_figure(11.0, 3.6)
    curve, bars = fig.subplots(1, 2, width_ratios=[1, 1.4])
    curve.plot(range(1, len(ftl.loss_history_) + 1), ftl.loss_history_, marker="o")
    curve.set(xlabel="epoch", ylabel="B's training loss",
              title="Transfer learning (secret sharing)")
    names = [f"{c}{' (noisy labels)' if i == 3 else ''}" for i, c in enumerate(rep.clients)]
    bars.bar(names, list(shares.values()), color=["tab:blue"] * 3 + ["tab:red"])
    bars.set(ylabel="reward share (GTG-Shapley)", title="Who contributed what (FedAvg, digits)")
    figure = save_figure(fig, s.out / "ftl.png").name
    noisy = rep.clients[3]
    return PartResult(
        name="ftl", ran=("FTL (secret sharing, a third party dealing), breast cancer; "
                         "contribution of 4 FedAvg clients"),
        key_figure=(f"FTL accuracy {accuracy:.3f} on A's new rows ({ftl.n_overlap_} shared); "
                    f"noisy client's share {shares[noisy]:.2f}"),
        figures_of_merit={"ftl_accuracy": accuracy, "overlap": float(ftl.n_overlap_),
                          "noisy_client_share": shares[noisy]},
        seconds=time.perf_counter() - start, bytes_exchanged=nbytes, figures=[figure],
        summary=("Transfer learning: B has labels, A has other features of mostly other "
                 "people and no labels; through the few people both hold, A learns a "
                 "classifier for its own rows from B's labels, with the exchanged terms "
                 "secret-shared and a third party dealing the correlated randomness; but "
                 "the gradients A reads leak B's labels of the shared "
                 "rows, a leak not defended (docs/ftl.md). Contribution: the server values "
                 "every client of a federation "
                 "from the updates it aggregates (Shapley values, no retraining); the client "
                 "whose labels are shuffled gets the smallest reward share. Cost: "
                 f"{_bytes(nbytes)} exchanged in all."),
        details={"engine": ftl.plan_.engine, "ftl_epochs": 2 if s.quick else 12,
                 "shares": shares,
                 "scores": {m: list(v) for m, v in rep.scores.items()}})


PARTS: dict[str, Callable[[Settings], PartResult]] = {
    "scca": scca_part,
    "pca": pca_part,
    "hfl": hfl_part,
    "vfl": vfl_part,
    "secureboost": secureboost_part,
    "ftl": ftl_part,
}
"""The demo's parts, in the order they run."""


def check_parts(names: Sequence[str] | None) -> list[str]:
    """Return the parts to run (all when None), refusing unknown names.

    ``names`` may hold comma-separated lists (``["scca,pca", "vfl"]``).
    """
    if not names:
        return list(PARTS)
    wanted: list[str] = []
    for item in names:
        for name in (p.strip() for p in str(item).split(",")):
            if not name:
                continue
            if name not in PARTS:
                raise ValidationError(f"unknown demo part {name!r}; the parts are "
                                      f"{', '.join(PARTS)}")
            if name not in wanted:
                wanted.append(name)
    if not wanted:
        raise ValidationError(f"no demo part named; the parts are {', '.join(PARTS)}")
    return wanted


@dataclass(frozen=True)
class DemoResult:
    """Every part's result; :meth:`to_json` is ``results.json``."""

    parts: list[PartResult]
    quick: bool
    seed: int
    wall_time_s: float

    def to_json(self) -> dict[str, Any]:
        """Return ``results.json``: settings, every part and the total time."""
        return {"settings": {"quick": self.quick, "seed": self.seed,
                             "parts": [p.name for p in self.parts]},
                "parts": {p.name: p.to_json() for p in self.parts},
                "figures": [f for p in self.parts for f in p.figures],
                "wall_time_s": self.wall_time_s}


def _skipped(name: str, why: str, seconds: float) -> PartResult:
    return PartResult(name=name, ran="skipped", key_figure=why, figures_of_merit={},
                      seconds=seconds, bytes_exchanged=0, figures=[], summary=why,
                      skipped=why)


def _report(result: DemoResult) -> str:
    rows = [[p.name, p.ran, p.key_figure, f"{p.seconds:.1f}", _bytes(p.bytes_exchanged)]
            for p in result.parts]
    lines = ["# islands demo", "",
             f"{len(result.parts)} parts in {result.wall_time_s:.0f} s"
             f"{' (quick sizes)' if result.quick else ''}.", "",
             markdown_table(["part", "what ran", "key figure", "seconds", "bytes exchanged"],
                            rows, align="lllrr"), ""]
    for p in result.parts:
        lines += [f"## {p.name}", "", p.summary, ""]
        lines += [f"![{p.name}]({f})" for f in p.figures]
        if p.figures:
            lines.append("")
    return "\n".join(lines)


def _bytes(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def run_demo(out: str | Path = "runs/demo", *, parts: Sequence[str] | None = None,
             quick: bool = False, seed: int = 0, progress: Progress | None = None,
             on_part: Callable[[PartResult], None] | None = None) -> DemoResult:
    """Run the demo's parts; write results.json, report.md, the figures and report.html.

    Parameters
    ----------
    out
        Folder to write (created if missing).
    parts
        Names from :data:`PARTS` (comma lists allowed); None runs them all.
    quick
        Tiny sizes, for tests.
    seed
        Seeds the data splits and the seeded randomness of the protocols.
    progress
        Called with a short message at each step.
    on_part
        Called with each part's result as it finishes.

    Raises
    ------
    ValidationError
        For an unknown part, before anything runs.
    """
    names = check_parts(parts)
    say: Progress = progress if progress is not None else (lambda _msg: None)
    start = time.perf_counter()
    results: list[PartResult] = []
    # one set: every part's files staged, published together when all parts are done
    with ResultSet(out) as files:
        for name in names:
            part_start = time.perf_counter()

            def step(msg: str, name: str = name, t0: float = part_start) -> None:
                say(f"[{name} {time.perf_counter() - t0:5.1f}s] {msg}")

            settings = Settings(out=files.staging, quick=quick, seed=seed, say=step)
            try:
                result = PARTS[name](settings)
            except MissingDependency as exc:
                result = _skipped(name, f"skipped: {exc}", time.perf_counter() - part_start)
            # the part's time includes its imports (torch, scikit-learn): what a user waits
            result = replace(result, seconds=time.perf_counter() - part_start)
            step(f"done: {result.key_figure}")
            results.append(result)
            if on_part is not None:
                on_part(result)
        demo = DemoResult(parts=results, quick=quick, seed=seed,
                          wall_time_s=time.perf_counter() - start)
        files.add_json("results.json", demo.to_json())
        files.add_text("report.md", _report(demo) + "\n")
    say("writing report.html")
    write_html(files.folder)
    return demo
