"""Contribution measurement in horizontal FL against exact Shapley by retraining (§2.4.4).

:func:`reproduce_contribution` trains one FedAvg federation on Fashion-MNIST whose seven
clients differ in what they bring, values them as it trains
(:class:`~islands.hfl.contribution.Contribution`: GTG-Shapley, exact per-round Shapley,
one-round reconstruction, leave-one-out), then retrains the federation on every one of
its 2⁷ − 1 coalitions to get the exact Shapley values and leave-one-out by retraining,
the ground truth, and writes ``report.md``, ``results.json`` and four PNGs:

- ``client-1``: large, clean (3,000 rows);
- ``client-2``: medium, clean (1,500);
- ``client-3``: client-2's twin, holding the same 1,500 rows and labels;
- ``client-4``: small, clean (400);
- ``client-5``: medium (1,500) with 70% of its labels replaced by uniform random labels;
- ``client-6``: medium (1,500) whose labels are shuffled among its rows (the same label
  counts, no information about which row is what);
- ``client-7``: a free-rider holding 1,500 rows, so that it claims their aggregation
  weight, which uploads the global model it receives unchanged
  (:class:`~islands.hfl.torch.learner.FreeRider`).

Issue 27's cases are the twins and the two clients whose uploads carry no label
information (shuffled labels, free-rider): the report shows each method's and
weighting's Kendall τ against retraining Shapley, the share it pays those two clients and
the twins' shares (``ranking`` in ``results.json``, ``ranking.png``).

The rows are disjoint random (IID) draws from the Fashion-MNIST training split; the
server's validation rows (2,000, never trained on) come from the same split and give
every utility (accuracy); the test split only reports the model's accuracy. The clients
train a 784-64-10 MLP with FedAvg at τ = 5, each with a mini-batch proportional to its
rows (APFL's eq. 26 with the adaptive interval off), so that every client passes over
its own rows once an epoch; with one batch size for all, an epoch would be as short as
the smallest client's pass and the large client would leave most of its rows unseen.

The same run is valued a second time with the papers' renormalised coalition weighting
(the training is the same; only the valuation differs). What is checked: the free-rider
gets nothing, the noisy client less than the clean client of its size, larger clean
clients more, GTG agrees with exact per-round Shapley within its confidence half-widths,
and each reconstruction method ranks the clients as retraining does; and what valuing
costs against training and retraining.

References
----------
.. [1] Yang Qiang et al. "Federated Machine Learning: Concept and Applications", ACM
   TIST 2019, §2.4.4 (``papers/fml-concepts-yang-2019.vi.txt``).
.. [2] T. Song, Y. Tong, S. Wei. "Profit Allocation for Federated Learning". IEEE Big
   Data 2019.
.. [3] Z. Liu et al. "GTG-Shapley: Efficient and Accurate Participant Contribution
   Evaluation in Federated Learning". ACM TIST 13(4), 2022.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.data import find_fashion_mnist, load
from islands.errors import DataNotFoundError
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
    write_json,
)
from islands.hfl import APFL, FederatedModel
from islands.hfl.contribution import (
    Contribution,
    ContributionReport,
    ServerValidation,
    reward_shares,
)
from islands.hfl.contribution.report import LABELS, plot_contribution
from islands.hfl.contribution.retrain import coalition_trainer, retrain_contributions
from islands.progress import ProgressOption
from islands.reporting import JsonRow
from islands.threads import torch_threads

__all__ = ["ROLES", "ContributionClient", "RetrainScores", "reproduce_contribution"]

ROLES: tuple[str, ...] = ("large, clean", "medium, clean", "twin of client-2",
                          "small, clean", "medium, noisy labels", "medium, shuffled labels",
                          "medium, free-rider")
"""What each client is, in order (client-1 ... client-7)."""

NO_INFO_LIMIT = 0.05
"""The share a client whose upload carries no label information may get (issue 27)."""
TWIN_TOLERANCE = 0.02
"""How far apart identical clients' shares may be (issue 27)."""

METHODS: tuple[str, ...] = ("gtg", "exact", "or", "loo")
PER_ROUND: tuple[str, ...] = ("gtg", "exact", "loo")
SHORT = {"gtg": "GTG", "exact": "exact/round", "or": "OR", "loo": "LOO/round",
         "retrain": "Shapley (retrain)", "retrain_loo": "LOO (retrain)"}
LABELS_LONG = {**LABELS, "exact": "exact Shapley per round", "loo": "leave-one-out per round",
               "retrain": "exact Shapley by retraining",
               "retrain_loo": "leave-one-out by retraining"}

Floats = NDArray[np.float64]


@dataclass(frozen=True)
class _Settings:
    seed: int
    quick: bool
    sizes: tuple[int, ...]
    noisy: int  # index of the noisy client
    noise: float  # share of its labels replaced by uniform random labels
    free_rider: int  # index of the free-rider
    twin: int  # index of the client holding the same rows as client ``twin - 1``
    shuffled: int  # index of the client whose labels are a permutation of its rows' labels
    validation_rows: int
    test_rows: int | None  # None: the whole test split
    hidden: tuple[int, ...]
    epochs: int
    tau: int
    batch: int  # b_CL: the clients' batches add up to it
    lr: float
    momentum: float
    n_threads: int | None


@dataclass(frozen=True)
class ContributionClient(JsonRow):
    """One client of the experiment: its role, data and how it misbehaves."""

    name: str
    role: str
    rows: int
    aggregation_weight: float
    batch_size: int
    noise: float
    wrong_labels: int
    free_rider: bool
    twin_of: str | None
    shuffled: bool



@dataclass(frozen=True)
class RetrainScores(JsonRow):
    """Contributions by retraining every coalition: the reference the methods are scored by.

    Attributes
    ----------
    scores, loo
        Exact Shapley values and leave-one-out, per client.
    values, coalition_seconds
        v(S) and the seconds to train S, by S's members (comma-joined indices).
    trainings, seconds
        Coalitions trained and their total seconds.
    alone, without
        v({k}) and v(N without k) per client.
    full, empty
        v(N) and v(∅).
    """

    scores: list[float]
    loo: list[float]
    values: dict[str, float]
    trainings: int
    seconds: float
    coalition_seconds: dict[str, float]
    alone: list[float]
    without: list[float]
    full: float
    empty: float



def _settings(quick: bool, seed: int, n_threads: int | None) -> _Settings:
    if quick:
        return _Settings(seed=seed, quick=True, sizes=(600, 300, 300, 100, 300, 300, 300),
                         noisy=4, noise=0.7, free_rider=6, twin=2, shuffled=5,
                         validation_rows=400, test_rows=1000,
                         hidden=(32,), epochs=1, tau=10, batch=32, lr=0.1, momentum=0.5,
                         n_threads=n_threads)
    return _Settings(seed=seed, quick=False, sizes=(3000, 1500, 1500, 400, 1500, 1500, 1500),
                     noisy=4, noise=0.7, free_rider=6, twin=2, shuffled=5,
                     validation_rows=2000, test_rows=None,
                     hidden=(64,), epochs=5, tau=5, batch=128, lr=0.1, momentum=0.5,
                     n_threads=n_threads)


# ------------------------------------------------------------------ data and training
def _data(s: _Settings) -> dict[str, Any]:
    """Split the rows: the clients' parts, the server's validation rows, the test rows."""
    if find_fashion_mnist() is None:
        raise DataNotFoundError("Fashion-MNIST files not found (Debian package "
                                "dataset-fashion-mnist, or ISLANDS_FASHION_MNIST)")
    train, test = load("fashion_mnist", split="train"), load("fashion_mnist", split="test")
    rng = np.random.default_rng(s.seed)
    perm = rng.permutation(train.n_samples)
    X = np.asarray(train.X, dtype=np.float32)  # pixels in [0, 1]
    y = np.asarray(train.y, dtype=np.int64)
    val = perm[:s.validation_rows]
    parts: list[tuple[NDArray[np.float32], NDArray[np.int64]]] = []
    start = s.validation_rows
    wrong: dict[int, int] = {}
    for k, n in enumerate(s.sizes):
        if k == s.twin:  # the same rows and labels as the client before it
            parts.append(parts[k - 1])
            continue
        rows = perm[start:start + n]
        start += n
        labels = y[rows].copy()
        if k == s.noisy:
            replaced = rng.random(n) < s.noise
            labels[replaced] = rng.integers(0, 10, int(replaced.sum()))
        elif k == s.shuffled:  # the same label counts, no information about the rows
            labels = rng.permutation(labels)
        wrong[k] = int(np.sum(labels != y[rows]))
        parts.append((X[rows], labels))
    te = (np.arange(test.n_samples) if s.test_rows is None
          else np.sort(rng.choice(test.n_samples, s.test_rows, replace=False)))
    return {"parts": parts, "validation": (X[val], y[val]),
            "test": (np.asarray(test.X[te], dtype=np.float32),
                     np.asarray(test.y[te], dtype=np.int64)),
            "wrong_labels": wrong}


def _model_factory(s: _Settings, spec: Any) -> Callable[..., Any]:
    """Fresh FederatedModels with the experiment's settings (any ``contribution``)."""
    def make(contribution: Any = None, callback: Any = None) -> Any:
        # FedAvg with batches proportional to the clients' rows: APFL's eq. 26 at a fixed τ
        strategy = APFL(tau=s.tau, batch_size=s.batch, adaptive=False, lr=s.lr,
                        momentum=s.momentum)
        return FederatedModel(spec, strategy, epochs=s.epochs, random_state=s.seed,
                              eval_fraction=0.0, threads=s.n_threads or "auto",
                              contribution=contribution, callback=callback)

    return make


def _valued_run(make: Callable[..., Any], data: dict[str, Any], weighting: str,
                behaviour: dict[str, Any], say: Progress, s: _Settings) -> Any:
    def tick(record: Any, epoch: Any) -> None:
        if epoch is not None:
            say(f"[{weighting}] epoch {epoch.epoch}/{s.epochs}: test accuracy "
                f"{epoch.test['accuracy']:.4f} ({record.round} rounds valued)")

    # accuracy, as the papers value it (the per-round default is now the loss: issue 27)
    contribution = Contribution(data["validation"], methods=METHODS, weighting=weighting,
                                metric="accuracy")
    fm = make(contribution, tick)
    fm.fit(data["parts"], test=data["test"], behaviour=behaviour)
    return fm


def _retrain(make: Callable[..., Any], spec: Any, data: dict[str, Any], names: list[str],
             behaviour: dict[str, Any], say: Progress) -> RetrainScores:
    """Exact Shapley values and leave-one-out by training every coalition."""
    utility = ServerValidation(spec, *data["validation"], metric="accuracy")
    base = coalition_trainer(make, data["parts"], utility, names=names, behaviour=behaviour)
    seconds: dict[str, float] = {}

    def train(members: tuple[int, ...]) -> float:
        t0 = time.perf_counter()
        value = base(members)
        seconds[",".join(str(k) for k in members)] = time.perf_counter() - t0
        return value

    def tick(done: int, total: int) -> None:
        if done == total or done % 4 == 0:
            say(f"retraining coalitions: {done}/{total}")

    n = len(names)
    result = retrain_contributions(train, n, method="exact", progress=tick)
    full = list(range(n))
    loo = [result.value(full) - result.value([j for j in full if j != k]) for k in full]
    return RetrainScores(
        scores=result.scores, loo=loo, values=result.values, trainings=result.trainings,
        seconds=result.seconds, coalition_seconds=seconds,
        alone=[result.value([k]) for k in full],
        without=[result.value([j for j in full if j != k]) for k in full],
        full=result.value(full), empty=result.value([]))


# ------------------------------------------------------------------ comparisons
def _spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def _compare(scores: dict[str, list[float]], retrain: RetrainScores) -> list[dict[str, Any]]:
    """Each reconstruction method against retraining: Spearman ρ, max |Δ|, Σ φ."""
    out = []
    for m, phi in scores.items():
        refs = [("retrain", retrain.scores)]
        if m == "loo":
            refs.append(("retrain_loo", retrain.loo))
        for ref, target in refs:
            diff = np.abs(np.asarray(phi) - np.asarray(target))
            out.append({"method": m, "reference": ref, "spearman": _spearman(phi, target),
                        "max_abs_diff": float(diff.max()), "sum": float(np.sum(phi)),
                        "reference_sum": float(np.sum(target))})
    return out


def _kendall(a: list[float], b: list[float]) -> float:
    from scipy.stats import kendalltau

    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(kendalltau(a, b).statistic)  # τ-b: ties (twins, null players) allowed


def _ranking(s: _Settings, report: ContributionReport, renorm: ContributionReport,
             retrain: RetrainScores) -> list[dict[str, Any]]:
    """Each method and weighting against retraining Shapley, as issue 27 judges them.

    Kendall τ-b of the scores against retraining Shapley; the reward shares
    (:func:`~islands.hfl.contribution.reward_shares` of the scores) paid to the two
    clients whose uploads carry no label information (shuffled labels, free-rider); and
    the twins' shares.
    """
    rows: list[tuple[str, str | None, list[float]]] = [
        *((m, "fixed", report.scores[m]) for m in METHODS),
        *((m, "renormalised", renorm.scores[m]) for m in METHODS),
        ("retrain", None, retrain.scores), ("retrain_loo", None, retrain.loo)]
    twins = (s.twin - 1, s.twin)
    helps = retrain.scores[twins[0]] > 0 and retrain.scores[twins[1]] > 0
    out = []
    for method, weighting, phi in rows:
        shares = [float(v) for v in reward_shares(phi)]
        no_info = shares[s.shuffled] + shares[s.free_rider]
        gap = abs(shares[twins[0]] - shares[twins[1]])
        out.append({
            "method": method, "weighting": weighting, "tau": _kendall(phi, retrain.scores),
            "shares": shares, "no_info_share": no_info,
            "shuffled_share": shares[s.shuffled], "free_rider_share": shares[s.free_rider],
            "twin_shares": [shares[k] for k in twins], "twin_gap": gap,
            "twins_ok": bool(gap <= TWIN_TOLERANCE
                             and (not helps or min(shares[k] for k in twins) > 0))})
    return out


def _gtg_check(report: ContributionReport) -> dict[str, Any]:
    gtg = np.asarray(report.scores["gtg"])
    exact = np.asarray(report.scores["exact"])
    hw = np.asarray(report.halfwidth["gtg"])
    diff = np.abs(gtg - exact)
    return {"abs_diff": diff.tolist(), "halfwidth": hw.tolist(),
            "within": (diff <= hw).tolist(), "within_twice": (diff <= 2 * hw).tolist(),
            "max_abs_diff": float(diff.max()), "hoeffding": report.hoeffding,
            "permutations": report.permutations, "unconverged": report.unconverged,
            "rounds": len(report.rounds)}


def _cumulative(report: ContributionReport, method: str, n: int) -> Floats:
    """Return rounds × clients: each client's summed per-round score after every round."""
    rows = np.zeros((len(report.rounds), n))
    for r, entry in enumerate(report.rounds):
        rows[r, entry["clients"]] = entry[method]
    return np.cumsum(rows, axis=0)


# ------------------------------------------------------------------ entry point
@reports_progress("contribution")
def reproduce_contribution(out_dir: str | Path = "reports/contribution", *,
                           quick: bool = False, random_state: int = 0,
                           n_threads: int | None = None,
                           progress: ProgressOption = None) -> ReproductionResult:
    """Value seven unequal Fashion-MNIST clients and compare with Shapley by retraining.

    Parameters
    ----------
    out_dir
        Folder for ``report.md``, ``results.json``, ``contribution.png``,
        ``rounds.png`` and ``agreement.png``; created if missing.
    quick
        A smoke-test profile (under a minute): 2,200 training rows over the same seven
        roles, 400 validation rows, a 784-32-10 MLP, one epoch. Full: 10,900 training
        rows, 2,000 validation rows, a 784-64-10 MLP, five epochs at τ = 5: a few
        minutes on two cores, nearly all of it the two valuations and the 127
        retrainings.
    random_state
        Seed of the split, the label noise, the initial model, the batch orders and
        GTG's sampled orders.
    n_threads
        torch threads (None: the federation's ``"auto"``).
    progress
        False or None (silent), True (bars in a terminal or a notebook) or a callable
        receiving each :class:`~islands.progress.ProgressUpdate` (its ``info``
        is the step's message).

    Returns
    -------
    ReproductionResult
        Its ``to_json()`` (``results.json``) holds ``settings``, ``clients`` (rows,
        role, aggregation weight), ``federation``
        (accuracy, rounds, wall time), ``contribution`` and ``renormalised`` (the two
        :class:`~islands.hfl.contribution.ContributionReport` as dicts), ``retrain``
        (coalition values, Shapley and leave-one-out scores, times), ``comparison``,
        ``ranking`` (per method and weighting: Kendall τ against retraining Shapley, the
        reward shares, the no-information clients' and the twins'), ``gtg_check``,
        ``costs``, ``agreement`` (the claims), ``figures`` and ``wall_time_s``. Its
        ``sections`` hold ``clients`` as :class:`ContributionClient`, the two reports
        as ``ContributionReport`` and ``retrain`` as :class:`RetrainScores`.
    """
    from islands.hfl.torch.learner import FreeRider
    from islands.hfl.torch.models import ModelSpec

    start = time.perf_counter()
    run = setup_run("reproduce_contribution", out_dir, random_state, n_threads, progress)
    s = _settings(bool(quick), run.random_state, run.n_threads)
    say = run.say
    say("loading Fashion-MNIST")
    data = _data(s)
    n = len(s.sizes)
    names = [f"client-{k + 1}" for k in range(n)]
    behaviour: dict[str, Any] = {names[s.free_rider]: FreeRider}
    spec = ModelSpec("mlp", (784,), 10, hidden=s.hidden)
    make = _model_factory(s, spec)
    with torch_threads(s.n_threads):
        say(f"training and valuing {n} clients (fixed weighting)")
        fm = _valued_run(make, data, "fixed", behaviour, say, s)
        report: ContributionReport = fm.contribution_
        say(f"valued: {report.evaluations} coalition models in "
            f"{report.seconds:.1f} s; training wall time {fm.wall_time_:.1f} s")
        say("training and valuing again (renormalised weighting)")
        fm_renorm = _valued_run(make, data, "renormalised", behaviour, say, s)
        renorm: ContributionReport = fm_renorm.contribution_
        same_model = bool(np.array_equal(fm.params_, fm_renorm.params_))
        say(f"retraining all {2 ** n - 1} coalitions")
        retrain = _retrain(make, spec, data, names, behaviour, say)
    test = fm.metrics(*data["test"])
    counts = [int(fm.counts_[c]) for c in names]
    clients = [ContributionClient(
        name=c, role=ROLES[k], rows=counts[k], aggregation_weight=counts[k] / sum(counts),
        batch_size=int(fm.batch_sizes_[c]), noise=s.noise if k == s.noisy else 0.0,
        wrong_labels=data["wrong_labels"].get(k, 0),
        free_rider=k == s.free_rider,
        twin_of=names[s.twin - 1] if k == s.twin else None,
        shuffled=k == s.shuffled) for k, c in enumerate(names)]
    training_s = retrain.coalition_seconds[",".join(str(k) for k in range(n))]
    costs = {"valued_run_wall_s": fm.wall_time_, "valuation_s": report.seconds,
             "evaluations": report.evaluations,
             "training_alone_s": training_s,
             "renormalised_valuation_s": renorm.seconds,
             "retrain_s": retrain.seconds, "retrain_trainings": retrain.trainings,
             "valuation_vs_training": report.seconds / training_s,
             "valuation_vs_retrain": report.seconds / retrain.seconds}
    federation = {
        "test_accuracy": float(test["accuracy"]),
        "history": [{"epoch": h.epoch, "accuracy": h.test["accuracy"],
                     "rounds": h.aggregations} for h in fm.history_],
        "rounds": int(fm.aggregations_), "steps_per_epoch": int(fm.steps_per_epoch_),
        "wall_time_s": fm.wall_time_, "same_model_both_runs": same_model,
        "validation_initial": report.utility_initial,
        "validation_final": report.utility_final,
        "parameters": spec.n_params(), "model_description": spec.describe()}
    comparison = _compare(report.scores, retrain)
    ranking = _ranking(s, report, renorm, retrain)
    gtg = _gtg_check(report)
    claims = _claims(s, report, renorm, retrain, comparison, ranking, gtg, costs)
    figures = _figures(run.out, names, report, renorm, retrain, ranking, s)
    result = ReproductionResult(
        settings=asdict(s) | {"dataset": "fashion_mnist", "methods": list(METHODS),
                              "strategy": "FedAvg, batches ∝ rows (APFL eq. 26, fixed τ)",
                              "contribution": report.settings},
        sections={"clients": clients, "federation": federation, "contribution": report,
                  "renormalised": renorm, "retrain": retrain, "comparison": comparison,
                  "ranking": ranking, "gtg_check": gtg, "costs": costs},
        agreement=claims, figures=figures, wall_time_s=time.perf_counter() - start)
    results = result.to_json()
    write_json(run.out / "results.json", results)
    _report(run.out, results)
    say(f"done in {result.wall_time_s:.0f} s")
    return result


# ------------------------------------------------------------------ claims
def _verdict(wins: int, total: int) -> str:
    return "agrees" if wins == total else "partly" if wins else "differs"


def _all_scores(scores: dict[str, list[float]], retrain: list[float],
                retrain_loo: list[float]) -> dict[str, list[float]]:
    return {**scores, "retrain": retrain, "retrain_loo": retrain_loo}


def _claims(s: _Settings, report: ContributionReport, renorm: ContributionReport,
            retrain: RetrainScores, comparison: list[dict[str, Any]],
            ranking: list[dict[str, Any]], gtg: dict[str, Any],
            costs: dict[str, Any]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    fr, noisy = s.free_rider, s.noisy
    scores = _all_scores(report.scores, retrain.scores, retrain.loo)

    # the free-rider
    zero = [m for m in METHODS if report.scores[m][fr] == 0.0]
    share = report.shares[fr]
    out.append(claim(
        "The free-rider gets nothing: a null player of the fixed-weighting game (score "
        "exactly 0 by every reconstruction method, share 0)",
        ", ".join(f"{SHORT[m]} {report.scores[m][fr]:+.4f}" for m in METHODS)
        + f"; share {100 * share:.1f}%",
        "agrees" if len(zero) == len(METHODS) and share == 0 else
        "partly" if zero else "differs"))
    top = max(abs(v) for v in retrain.scores)
    ratio = abs(retrain.scores[fr]) / top if top > 0 else 0.0
    out.append(claim(
        "Retraining also values the free-rider near 0 (|φ| ≤ 10% of the largest "
        "retrained Shapley value)",
        f"Shapley (retrain) {retrain.scores[fr]:+.4f}, {100 * ratio:.0f}% of "
        f"the largest ({top:.4f}); LOO (retrain) {retrain.loo[fr]:+.4f}",
        "agrees" if ratio <= 0.1 else "partly" if ratio <= 0.25 else "differs"))
    top_r = max(abs(v) for v in renorm.scores["exact"])
    ratio_r = abs(renorm.scores["exact"][fr]) / top_r if top_r > 0 else 0.0
    out.append(claim(
        "Under the papers' renormalised weighting the free-rider is near 0 too "
        "(|φ| ≤ 10% of the largest exact per-round value)",
        ", ".join(f"{SHORT[m]} {renorm.scores[m][fr]:+.4f}" for m in METHODS)
        + f"; {100 * ratio_r:.0f}% of the largest; share "
        f"{100 * renorm.shares[fr]:.1f}%",
        "agrees" if ratio_r <= 0.1 else "partly" if ratio_r <= 0.25 else "differs"))

    # noisy against clean of the same size
    same = next(k for k, n in enumerate(s.sizes)
                if n == s.sizes[noisy] and k not in (noisy, fr))
    below = [m for m, phi in scores.items() if phi[noisy] < phi[same]]
    out.append(claim(
        f"The noisy client (client-{noisy + 1}) scores below the clean client of its "
        f"size (client-{same + 1})",
        "; ".join(f"{SHORT[m]} {phi[noisy]:+.4f} vs {phi[same]:+.4f}"
                  for m, phi in scores.items()),
        _verdict(len(below), len(scores))))

    # issue 27: no-information clients and twins, by per-round GTG (the default until
    # issue 27) and by retraining (the default now for a federation this small)
    rows = {(r["method"], r["weighting"]): r for r in ranking}
    for key, who in ((("gtg", "fixed"), "GTG (fixed weighting, accuracy)"),
                     (("retrain", None), "Retraining Shapley (the default up to 8 clients)")):
        r = rows[key]
        out.append(claim(
            f"{who} pays the clients whose uploads carry no label information (shuffled "
            f"labels, free-rider) at most {100 * NO_INFO_LIMIT:.0f}% together",
            f"shuffled {100 * r['shuffled_share']:.1f}%, free-rider "
            f"{100 * r['free_rider_share']:.1f}%",
            "agrees" if r["no_info_share"] <= NO_INFO_LIMIT else
            "partly" if r["no_info_share"] <= 2 * NO_INFO_LIMIT else "differs"))
        a, b = r["twin_shares"]
        out.append(claim(
            f"{who} pays the twins (client-{s.twin}, client-{s.twin + 1}: the same rows) "
            f"equal shares (within {TWIN_TOLERANCE:g}), positive where retraining says they "
            "help",
            f"{100 * a:.1f}% and {100 * b:.1f}% (retraining Shapley "
            f"{retrain.scores[s.twin - 1]:+.4f} / {retrain.scores[s.twin]:+.4f})",
            "agrees" if r["twins_ok"] else
            "partly" if r["twin_gap"] <= TWIN_TOLERANCE else "differs"))
    best = max((r for r in ranking if r["weighting"] is not None and np.isfinite(r["tau"])),
               key=lambda r: r["tau"], default=None)
    default_tau = rows[("gtg", "fixed")]["tau"]
    out.append(claim(
        "GTG (fixed weighting, accuracy; the default until issue 27) ranks the clients as "
        "retraining Shapley does (Kendall τ ≥ 0.8, issue 27's target)",
        f"τ = {default_tau:.2f}" + (f"; the best reconstruction: {SHORT[best['method']]}, "
                                    f"{best['weighting']}, τ = {best['tau']:.2f}"
                                    if best else ""),
        "agrees" if default_tau >= 0.8 else "partly" if default_tau >= 0.5 else "differs"))

    # larger clean clients score higher
    clean = sorted((k for k in range(len(s.sizes))
                    if k not in (noisy, fr, s.shuffled, s.twin)),
                   key=lambda k: -s.sizes[k])
    ordered = [m for m, phi in scores.items()
               if all(phi[a] > phi[b] for a, b in itertools.pairwise(clean))]
    out.append(claim(
        "Among clean clients, more data scores higher ("
        + " > ".join(f"client-{k + 1} ({s.sizes[k]})" for k in clean) + ")",
        "; ".join(f"{SHORT[m]} " + " / ".join(f"{phi[k]:+.4f}" for k in clean)
                  for m, phi in scores.items()),
        _verdict(len(ordered), len(scores))))

    # GTG against exact per round
    hw = gtg["halfwidth"]
    within = sum(gtg["within"])
    twice = sum(gtg["within_twice"])
    out.append(claim(
        "GTG-Shapley is within its 95% half-width of exact per-round Shapley for every "
        "client",
        f"max |GTG − exact| {gtg['max_abs_diff']:.4f}; within the half-width for "
        f"{within}/{len(hw)} clients (half-widths {min(hw):.4f}–{max(hw):.4f}); "
        f"Hoeffding bound {gtg['hoeffding']:.3f}",
        "agrees" if within == len(hw) else "partly" if twice == len(hw) else "differs"))

    # ranking agreement with retraining
    for row in comparison:
        if row["reference"] != "retrain":
            continue
        rho = row["spearman"]
        ok = np.isfinite(rho)
        rho_cmp = round(rho, 9) if ok else rho  # ρ = 4/5 is computed as 0.7999…
        out.append(claim(
            f"{SHORT[row['method']]} ranks the clients as exact Shapley by retraining "
            "does (Spearman ρ ≥ 0.8)",
            f"ρ = {rho:.2f}, max |Δφ| = {row['max_abs_diff']:.4f}" if ok else
            "ρ undefined (constant scores)",
            "agrees" if ok and rho_cmp >= 0.8 else "partly" if ok and rho_cmp >= 0.5
            else "differs"))

    # efficiency and the retrained grand coalition
    checks = {
        "Σ exact/round − gain": sum(report.scores["exact"]) - report.gain,
        "Σ OR − (u_final − u_initial)": sum(report.scores["or"])
        - (report.utility_final - report.utility_initial),
        "Σ retrain − (v(N) − v(∅))": sum(retrain.scores) - (retrain.full
                                                               - retrain.empty),
        "v_retrain(N) − u_final": retrain.full - report.utility_final,
        "v_retrain(∅) − u_initial": retrain.empty - report.utility_initial}
    worst = max(abs(v) for v in checks.values())
    out.append(claim(
        "Efficiency: the scores sum to the gain they share, and retraining the grand "
        "coalition gives the valued run's model, so both scales are the same",
        "; ".join(f"{k} = {v:.1e}" for k, v in checks.items()),
        "agrees" if worst < 1e-6 else "differs"))

    # costs
    r = costs["valuation_vs_retrain"]
    out.append(claim(
        "Reconstruction values the clients for a fraction of retraining's cost "
        "(the papers' motivation; < 50%)",
        f"valuation {costs['valuation_s']:.1f} s ({costs['evaluations']} coalition models "
        f"scored) vs retraining {costs['retrain_s']:.1f} s ({costs['retrain_trainings']} "
        f"trainings): {100 * r:.0f}%; the training alone takes "
        f"{costs['training_alone_s']:.1f} s",
        "agrees" if r < 0.5 else "partly" if r < 1 else "differs"))
    return out


# ------------------------------------------------------------------ figures
def _ranking_figure(path: Path, ranking: list[dict[str, Any]], names: list[str],
                    s: _Settings) -> str:
    """Kendall τ, the no-information clients' share and the twins' shares, per method."""
    fig = new_figure(13, 4.2)
    axes = fig.subplots(1, 3)
    labels = [SHORT[r["method"]] + ("" if r["weighting"] is None else
                                    f"\n{r['weighting'][:5]}.") for r in ranking]
    x = np.arange(len(ranking))
    colours = ["C0" if r["weighting"] == "fixed" else "C1" if r["weighting"] else "C2"
               for r in ranking]
    axes[0].bar(x, [0.0 if not np.isfinite(r["tau"]) else r["tau"] for r in ranking],
                color=colours)
    axes[0].axhline(0.8, color="black", linestyle="--", linewidth=0.8, label="target 0.8")
    axes[0].set_ylim(-1, 1)
    axes[0].set_title("Kendall τ against retraining Shapley", fontsize=10)
    axes[1].bar(x, [100 * r["shuffled_share"] for r in ranking], color=colours,
                label=f"{names[s.shuffled]} (shuffled)")
    axes[1].bar(x, [100 * r["free_rider_share"] for r in ranking],
                bottom=[100 * r["shuffled_share"] for r in ranking], color="grey",
                label=f"{names[s.free_rider]} (free-rider)")
    axes[1].axhline(100 * NO_INFO_LIMIT, color="black", linestyle="--", linewidth=0.8,
                    label=f"target {100 * NO_INFO_LIMIT:.0f}%")
    axes[1].set_title("share paid to no-information clients (%)", fontsize=10)
    width = 0.4
    a = [100 * r["twin_shares"][0] for r in ranking]
    b = [100 * r["twin_shares"][1] for r in ranking]
    axes[2].bar(x - width / 2, a, width, label=names[s.twin - 1])
    axes[2].bar(x + width / 2, b, width, label=f"{names[s.twin]} (its twin)")
    axes[2].set_title("the twins' shares (%)", fontsize=10)
    for ax in axes:
        ax.set_xticks(x, labels, fontsize=6, rotation=90)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    return save_figure(fig, path).name


def _figures(out: Path, names: list[str], report: ContributionReport,
             renorm: ContributionReport, retrain: RetrainScores,
             ranking: list[dict[str, Any]], s: _Settings) -> list[str]:
    from matplotlib.ticker import MaxNLocator

    bars = replace(report, scores=_all_scores(report.scores, retrain.scores, retrain.loo))
    files = [plot_contribution(bars, out / "contribution.png",
                               title="Fashion-MNIST, fixed weighting").name]

    n = len(names)
    panels = [(report, m, "fixed") for m in PER_ROUND] + [(renorm, "exact", "renormalised")]
    fig = new_figure(12, 8)
    axes = fig.subplots(2, 2, sharex=True).ravel()
    for ax, (rep, m, weighting) in zip(axes, panels, strict=True):
        cum = _cumulative(rep, m, n)
        x = [e["round"] for e in rep.rounds]
        for k, name in enumerate(names):
            ax.plot(x, cum[:, k], label=name)
        if m != "loo":
            ax.plot(x, np.cumsum([e["gain"] for e in rep.rounds]), color="black",
                    linestyle=":", label="gain (Σ of the clients)")
        ax.axhline(0, color="grey", linewidth=0.6)
        ax.set_title(f"{LABELS[m]}, {weighting} weighting", fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("cumulative contribution")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    for ax in axes[2:]:
        ax.set_xlabel("round")
    files.append(save_figure(fig, out / "rounds.png").name)

    fig = new_figure(6.4, 5.2)
    ax = fig.subplots()
    ref = np.asarray(retrain.scores)
    markers = {"gtg": "o", "exact": "s", "or": "^", "loo": "v"}
    for m, phi in report.scores.items():
        ax.scatter(ref, phi, marker=markers.get(m, "o"), label=LABELS.get(m, m))
    for k, name in enumerate(names):
        ax.annotate(name, (ref[k], report.scores["exact"][k]), fontsize=7,
                    xytext=(4, -10), textcoords="offset points")
    everything = np.concatenate([ref, *[np.asarray(v) for v in report.scores.values()]])
    lo, hi = float(everything.min()), float(everything.max())
    pad = 0.05 * (hi - lo or 1.0)
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="black", linewidth=0.8,
            linestyle="--", label="y = x")
    ax.set_xlabel("exact Shapley by retraining (2ⁿ − 1 trainings)")
    ax.set_ylabel("reconstruction score (one training)")
    ax.set_title("Reconstruction against retraining")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    files.append(save_figure(fig, out / "agreement.png").name)
    files.append(_ranking_figure(out / "ranking.png", ranking, names, s))
    return files


# ------------------------------------------------------------------ report
def _report(out: Path, results: dict[str, Any]) -> None:
    s, fed, rep, ren, ret = (results[k] for k in ("settings", "federation", "contribution",
                                                  "renormalised", "retrain"))
    clients, costs, gtg = results["clients"], results["costs"], results["gtg_check"]
    names = [c["name"] for c in clients]
    n = len(names)
    scores = _all_scores(rep["scores"], ret["scores"], ret["loo"])
    lines = ["# Contribution measurement on Fashion-MNIST (Yang et al. 2019, §2.4.4)", ""]
    if s["quick"]:
        lines += ["**Quick settings** (smoke test): fewer rows, a smaller model and one "
                  "epoch; the full run is `islands reproduce contribution`.", ""]
    lines += [
        f"{n} clients train one model with FedAvg; the server values each client's "
        f"contribution from the uploads of every round, on {s['validation_rows']:,} "
        "validation rows it holds (Fashion-MNIST training rows no client holds; utility: "
        "accuracy), then the federation is retrained on every one of its "
        f"{2 ** n - 1} coalitions for the exact Shapley values (the ground truth).", "",
        "## Federation", "",
        markdown_table(
            ["client", "role", "rows", "wrong labels", "weight p_k", "batch",
             "alone (retrained)", "without it (retrained)"],
            [[c["name"], c["role"], c["rows"],
              f"{c['wrong_labels']} ({100 * c['wrong_labels'] / c['rows']:.0f}%)"
              if c["wrong_labels"] else "0",
              f"{c['aggregation_weight']:.3f}", c["batch_size"], ret["alone"][k],
              ret["without"][k]] for k, c in enumerate(clients)],
            floatfmt=".4f", align="llrrrrrr"), "",
        f"The noisy client's labels: {100 * s['noise']:.0f}% replaced by uniform random "
        "labels (a tenth of those land on the true label again). The shuffled client's "
        "labels are a random permutation of its rows' labels (the same counts, no "
        f"information about the rows). {names[s['twin']]} holds exactly "
        f"{names[s['twin'] - 1]}'s rows and labels. The free-rider joins "
        "with its row count, so it takes its aggregation weight, and uploads the global "
        "model it receives unchanged. \"Alone\" and \"without it\" are the validation "
        f"accuracies of the models that client alone, and the other {n - 1}, train.", "",
        f"Model: {fed['model_description']}. FedAvg, "
        f"τ = {s['tau']} local steps, mini-batches proportional to the rows (they add up "
        f"to {s['batch']}: APFL's eq. 26 with the interval fixed), SGD lr {s['lr']:g}, "
        f"momentum {s['momentum']:g}, {s['epochs']} epoch(s), {fed['rounds']} rounds. "
        f"Test accuracy {fed['test_accuracy']:.4f}; validation accuracy "
        f"{fed['validation_initial']:.4f} → {fed['validation_final']:.4f} (the gain the "
        f"scores share: {rep['gain']:+.4f}). Seed {s['seed']}.", "",
        "## Scores", "",
        "Fixed weighting (the default): a coalition's model is w + Σ_{k∈S} p_k·(w_k − w) "
        "each round. Scores are in accuracy points (×100 for percent); the share is from "
        "GTG, the first method.", "",
        markdown_table(
            ["client", *(SHORT[m] for m in scores), "share"],
            [[name,
              *(f"{scores[m][k]:+.4f}" + (f" ± {rep['halfwidth']['gtg'][k]:.4f}"
                                          if m == "gtg" else "") for m in scores),
              f"{100 * rep['shares'][k]:.1f}%"] for k, name in enumerate(names)],
            align="l" + "r" * (len(scores) + 1)), "",
        "Σ φ: " + ", ".join(f"{SHORT[m]} {sum(v):+.4f}" for m, v in scores.items())
        + ". GTG's ± is the 95% half-width (the rounds' variances added, Student t "
        "with Welch–Satterthwaite's degrees of freedom).", "",
        "Renormalised weighting (the papers' choice: FedAvg over S alone, "
        "w_S = Σ_{k∈S} p_k·w_k / Σ_{k∈S} p_k), valued on the same training"
        + (" (identical final model)" if fed["same_model_both_runs"] else
           " (**the final models differ**: valuation should not change training)") + ":",
        "",
        markdown_table(
            ["client", *(SHORT[m] for m in METHODS), "share"],
            [[name, *(f"{ren['scores'][m][k]:+.4f}" for m in METHODS),
              f"{100 * ren['shares'][k]:.1f}%"] for k, name in enumerate(names)],
            align="l" + "r" * (len(METHODS) + 1)), "",
        "## Agreement with retraining", "",
        "Both scales are the same here: retraining the grand coalition reproduces the "
        "valued run (same clients, order, seed and batches), and v(∅) is the same initial "
        "model, so every efficient score sums to the same gain v(N) − v(∅). (In general "
        "reconstruction scores sum to the real run's gain and retraining scores to the "
        "retrained game's v(N) − v(∅).)", "",
        markdown_table(
            ["method", "reference", "Spearman ρ", "max |Δφ|", "Σ φ", "Σ reference"],
            [[LABELS_LONG[c["method"]], LABELS_LONG[c["reference"]], c["spearman"],
              c["max_abs_diff"], c["sum"], c["reference_sum"]]
             for c in results["comparison"]], floatfmt=".4f", align="llrrrr"), "",
        "## Each method's ranking against retraining (issue 27)", "",
        "Kendall τ-b of each method's scores against retraining Shapley (1: the same "
        "order); the reward shares paid to the clients whose uploads carry no label "
        f"information ({names[s['shuffled']]}, shuffled labels; {names[s['free_rider']]}, "
        f"the free-rider; target ≤ {100 * NO_INFO_LIMIT:.0f}% together); and the twins' "
        f"shares ({names[s['twin'] - 1]} and {names[s['twin']]} hold the same rows: "
        f"equal within {TWIN_TOLERANCE:g}, positive where retraining says they help).", "",
        markdown_table(
            ["method", "weighting", "Kendall τ", "shuffled", "free-rider",
             "twins", "twins ok"],
            [[LABELS_LONG[r["method"]], r["weighting"] or "–",
              "–" if r["tau"] is None or not np.isfinite(r["tau"]) else f"{r['tau']:+.2f}",
              f"{100 * r['shuffled_share']:.1f}%", f"{100 * r['free_rider_share']:.1f}%",
              " / ".join(f"{100 * v:.1f}%" for v in r["twin_shares"]),
              "yes" if r["twins_ok"] else "no"] for r in results["ranking"]],
            align="llrrrrl"), "",
        "## GTG-Shapley against exact per-round Shapley", "",
        markdown_table(
            ["client", "GTG", "exact/round", "|Δ|", "95% half-width", "within"],
            [[name, rep["scores"]["gtg"][k], rep["scores"]["exact"][k],
              gtg["abs_diff"][k], gtg["halfwidth"][k], "yes" if gtg["within"][k] else "no"]
             for k, name in enumerate(names)], floatfmt=".4f"), "",
        f"{gtg['permutations']} orders sampled over {gtg['rounds']} rounds "
        f"({gtg['unconverged']} round(s) stopped at max_permutations = "
        f"{rep['settings']['max_permutations']} before every half-width fell to "
        f"{rep['settings']['tolerance']:g}). Hoeffding's distribution-free bound for all "
        f"clients at once, summed over the rounds: {gtg['hoeffding']:.3f}, far looser "
        "than the t half-widths.", "",
        "## Cost", "",
        markdown_table(
            ["work", "seconds", "models"],
            [["training alone (the grand coalition, retrained)",
              costs["training_alone_s"], "1 training"],
             ["valued run: the rounds' wall time, valuation included (fixed)",
              costs["valued_run_wall_s"], "1 training"],
             ["valuation (gtg, exact, or, loo; fixed): between rounds, and OR's final "
              "models after them", costs["valuation_s"],
              f"{costs['evaluations']} coalition models scored"],
             ["valuation (renormalised)", costs["renormalised_valuation_s"], "as above"],
             ["retraining every coalition", costs["retrain_s"],
              f"{costs['retrain_trainings']} trainings"]], floatfmt=".1f", align="lrr"),
        "",
        f"The valuation costs {costs['valuation_vs_training']:.1f}× the training and "
        f"{100 * costs['valuation_vs_retrain']:.0f}% of the retraining. With {n} clients "
        f"a round has only 2^{n} = {2 ** n} coalitions and GTG's cache ends up scoring "
        "nearly all of them, so GTG costs about what exact per-round Shapley does; its "
        "sampling pays off with more clients (exact per round is refused above 14).", "",
        "## Claims checked", "",
        *agreement_table(["claim", "here"], [[c["claim"], c["finding"]]
                                             for c in results["agreement"]],
                         results["agreement"]),
        "## Figures", "",
        "![scores by method, with the reward shares](contribution.png)", "",
        "![cumulative per-round contributions](rounds.png)", "",
        "![reconstruction against retraining](agreement.png)", "",
        "![each method's ranking, no-information shares and twins' shares](ranking.png)",
        "",
        "## Notes", "",
        "- Per-round methods (GTG, exact/round, LOO/round) add up every round's "
        "marginals. After the first rounds the gain per round is small and the marginals "
        "are mostly the noise of accuracy on a finite validation set; their sum drifts "
        "over many rounds (see `rounds.png`). The one-round reconstruction (OR) carries "
        "every coalition's model through the whole run and values it once at the end.",
        "- A round's coalition model under fixed weighting moves p_S = Σ_{k∈S} p_k of the "
        "way along the round's step, and accuracy is not linear in the step's length, so "
        "per-round Shapley values need not follow the data's worth: a heavy client "
        "moves the model far on its own and collects the early, large gains.",
        "- Renormalised per-round scores can exceed the range of the utility: every round "
        "a singleton coalition's model is that client's own local model, so a client "
        "whose local model is worse than the global one (few rows, noisy labels) loses "
        "on every round, and the free-rider, whose \"model\" is the global one, gains "
        "by diluting them; only the sum over clients is bounded.",
        "- Uniform label noise keeps the right class the most frequent label, so a "
        "noisy client still pushes the model the right way, only with a weaker signal; "
        "retraining measures how much that is worth.",
        "- Retrained coalitions other than the grand coalition differ from the valued "
        "run in their batch orders (a client's seed follows its position): their values "
        "carry that training noise.",
        "- Under fixed weighting the free-rider's update is zero and changes no "
        "coalition's model; under renormalised weighting it takes weight from the "
        "others in every coalition it joins, as it does in the real aggregate.",
        "- Cost: the federation is simulated in one process and the model is small, so "
        f"a retraining takes {costs['retrain_s'] / costs['retrain_trainings']:.2f} s on "
        "average; in a deployment each of the "
        f"{2 ** n - 1} retrainings is a whole federated run (every client's time, every "
        "round's messages), while the reconstruction is the server's own computation "
        "on its validation rows. That computation grows with validation rows × coalition "
        f"models scored: here {s['validation_rows']:,} × {costs['evaluations']:,} = "
        f"{s['validation_rows'] * costs['evaluations'] / 1e6:.1f} M forward passes, "
        f"against {s['epochs']} × {sum(c['rows'] for c in clients if not c['free_rider']):,}"
        " rows trained (forward and backward) by the federation.",
        f"- Wall time of the whole reproduction: {results['wall_time_s'] / 60:.1f} min "
        f"({s['n_threads'] or 'auto'} torch thread(s)); timings on a shared machine vary "
        "by tens of percent from run to run, scores do not (same seed).", ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
