"""Other retraining games: which one pays clients whose labels carry no information nothing.

Issue 27 asks that the default valuation pay a client whose upload carries no information
about the labels (shuffled labels, a free-rider) at most 5% of the reward in every
federation of the ground-truth matrix, while ranking like retraining Shapley (Kendall τ
mean ≥ 0.8, none below 0.5) and paying twins equally. The default is retraining Shapley
on accuracy itself: exact Shapley values of the game v(S) = validation accuracy of the
model FedAvg trains over the coalition S alone (data Shapley with the federation's
training as the learning algorithm, Ghorbani & Zou 2019). At the matrix's step size
(lr 0.5) that game pays no-information clients up to 19%. This benchmark measures
other games and semivalues built from the same retrainings, each against plain
retraining Shapley at the same step size, to see whether one meets the targets.

Candidates (every one the Shapley or Banzhaf value of a coalition game; v(∅) is the
initial model's accuracy in every game):

* **retraining Shapley** (the truth): v(S) = accuracy of FedAvg over S alone after
  ``--rounds`` rounds;
* **retraining Banzhaf**: the same game, Banzhaf value β_k = 2^{1−n} Σ_{S ⊆ N∖{k}}
  (v(S ∪ {k}) − v(S)), which weighs every coalition equally and is the most robust
  semivalue to noise in v (Wang & Jia 2023, "Data Banzhaf");
* **fixed-weight retraining**: every client takes part in every coalition's training,
  those outside S replaced by a free-rider uploading the global model
  (:class:`~islands.hfl.torch.learner.FreeRider`) with their row counts, so each round
  is w ← w + Σ_{k∈S} p_k Δ_k with the grand coalition's weights p_k: absent clients
  are set to a reference (a null upload), as baseline Shapley sets absent features
  to a baseline value (Sundararajan & Najmi 2020). A client that uploads the global
  model is then an exact null player;
* **best round** (early stopping, Prechelt 1998): v(S) = the best validation accuracy
  over the rounds of S's training; **mean over rounds** (the area under the accuracy
  curve) and **mean of the last 5 rounds**: the same curves, averaged;
* **tuned step**: v(S) = the best final accuracy of S's training over a grid of step
  sizes, {lr, lr/2.5}, {lr, lr/5} or {lr, lr/2.5, lr/5} (each coalition trained at its
  best step, as each would tune its own run); **step tuned on N only**: the one step of
  the grid that gives the grand coalition the best accuracy, used for every coalition;
* combinations: fixed-weight with the best round, the tuned step with the best round,
  the tuned step and the best round with Banzhaf.

For each candidate and federation: Kendall τ-b of its scores against retraining Shapley
at the same ``--lr``, the largest reward share it pays a no-information client (and in
how many federations that is above 5%), and whether the twins get equal shares (within
0.02) that are positive where the truth says they help, all as
``bench_contribution_truth.judge`` computes them. The "oracle" line is the truth with the
no-information clients' scores set to 0: the best τ any game that pays them nothing can
reach.

Federations, model and training are ``benchmarks/bench_contribution_truth.py``'s (its
``build`` and ``_model``, imported): digits and Fashion-MNIST, cases ``issue``,
``noise50`` and ``noniid``, seeds 0, 1, 2; an MLP with 32 hidden units, FedAvg full batch,
2 local steps, no momentum, 30 rounds. Training is deterministic: the plain game's
values equal ``bench_contribution_truth.retrain``'s. Each federation trains every
coalition once per step size and weighting it needs: at one ``--lr`` the plain game at
lr, lr/2.5 and lr/5 and the fixed-weight game at lr, 4 × (2^n − 1) trainings; several
``--lr`` values share the step sizes they have in common (0.5, 0.2, 0.1 need six step
sizes and three fixed-weight games), and the benchmark then also reports Kendall τ
between retraining Shapley at each pair of them: how much the definition itself moves
with the step size.

``--redraw K`` replaces the candidates by a diagnostic: the shuffled client's labels are
drawn K times (draw 0 is the matrix's own; draw d permutes them with generator
``[99, d]``) and plain retraining Shapley is recomputed for each draw at each ``--lr``,
to see how much of the no-information share is the luck of one draw.

    python benchmarks/bench_contribution_games.py [--quick] [--json OUT] [--lr 0.5[,0.2,...]]
        [--datasets digits,fashion] [--cases issue,noise50,noniid] [--seeds 0,1,2]
        [--rounds 30] [--redraw K]

``--quick`` is one digits federation (``issue``, seed 0, 10 rounds, lr 0.5) in about a
minute. Nothing here is timed against anything: the figures are agreement, not speed.

References: Ghorbani A., Zou J. "Data Shapley: Equitable Valuation of Data for Machine
Learning", ICML 2019. Wang J. T., Jia R. "Data Banzhaf: A Robust Data Valuation
Framework for Machine Learning", AISTATS 2023. Prechelt L. "Early Stopping — But
When?", in Neural Networks: Tricks of the Trade, LNCS 1524, 1998. Sundararajan M.,
Najmi A. "The Many Shapley Values for Model Explanation", ICML 2020.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_contribution_truth as matrix
from bench_contribution_truth import NO_INFO, Federation, build, judge
from islands.hfl import FederatedModel
from islands.hfl.contribution import ServerValidation, exact_shapley, reward_shares
from islands.hfl.torch.learner import FreeRider

Record = dict[str, Any]
"""One coalition's training: ``final`` accuracy, ``loss`` and the accuracy ``curve``."""
Games = dict[str, list[Record]]
"""Trained coalitions by :func:`_key` (weighting and step), each list indexed by bitmask."""

TARGET_SHARE = 0.05
TARGET_MEAN_TAU = 0.8
TARGET_MIN_TAU = 0.5


@dataclass(frozen=True)
class Candidate:
    """A game built from retrained coalitions, and the semivalue taken of it.

    ``weighting`` "alone" (FedAvg over S alone) or "fixed" (absent clients upload the
    global model); ``utility`` "final", "best" (best round), "auc" (mean over rounds) or
    "last5"; ``steps`` the divisors of lr tried; ``tune`` "coalition" (each coalition
    its best step) or "grand" (the grand coalition's best step for all).
    """

    name: str
    weighting: str = "alone"
    utility: str = "final"
    semivalue: str = "shapley"
    steps: tuple[float, ...] = (1.0,)
    tune: str = "coalition"


TRUTH = Candidate("retraining Shapley (truth)")
CANDIDATES = (
    TRUTH,
    Candidate("retraining Banzhaf", semivalue="banzhaf"),
    Candidate("fixed-weight retraining", weighting="fixed"),
    Candidate("fixed-weight, best round", weighting="fixed", utility="best"),
    Candidate("best round", utility="best"),
    Candidate("best round, Banzhaf", utility="best", semivalue="banzhaf"),
    Candidate("mean over rounds (AUC)", utility="auc"),
    Candidate("mean of last 5 rounds", utility="last5"),
    Candidate("tuned step {lr, lr/2.5}", steps=(1.0, 2.5)),
    Candidate("tuned step {lr, lr/5}", steps=(1.0, 5.0)),
    Candidate("tuned step {lr, lr/2.5, lr/5}", steps=(1.0, 2.5, 5.0)),
    Candidate("tuned step {lr, lr/2.5, lr/5}, best round", utility="best",
              steps=(1.0, 2.5, 5.0)),
    Candidate("tuned step {lr, lr/2.5, lr/5}, Banzhaf", semivalue="banzhaf",
              steps=(1.0, 2.5, 5.0)),
    Candidate("step tuned on N only {lr, lr/2.5, lr/5}", steps=(1.0, 2.5, 5.0),
              tune="grand"),
)
ORACLE = "oracle: truth, no-information scores set to 0"


def _step(lr: float, divisor: float) -> float:
    return round(lr / divisor, 6)


def _key(weighting: str, step: float) -> str:
    return f"{weighting}@{step:g}"


def _model(fed: Federation, rounds: int, lr: float) -> FederatedModel:
    """The matrix's model and strategy (``bench_contribution_truth._model``) at step ``lr``."""
    matrix.LR = lr
    return matrix._model(fed, rounds)


def train_coalitions(fed: Federation, rounds: int, lr: float, weighting: str
                     ) -> list[Record]:
    """Train every coalition at step ``lr``; its final accuracy, loss and accuracy curve.

    "alone": FedAvg over S alone, as ``retrain.coalition_trainer`` does (the clients keep
    their names and behaviour). "fixed": all clients train, those outside S replaced by
    a :class:`FreeRider` (it keeps the client's row count, so the weights stay N's).
    """
    first = _model(fed, rounds, lr)
    accuracy = ServerValidation(first.model, *fed.validation, metric="accuracy")
    loss = ServerValidation(first.model, *fed.validation, metric="loss")
    initial = first.model.initial_params(first.seed)
    records: list[Record] = [{"final": accuracy(initial), "loss": loss(initial),
                              "curve": []}]
    n = len(fed.parts)
    for mask in range(1, 1 << n):
        members = [k for k in range(n) if mask >> k & 1]
        if weighting == "alone":
            names = [fed.names[k] for k in members]
            parts = [fed.parts[k] for k in members]
            behaviour = {c: f for c, f in fed.behaviour.items() if c in names}
        else:
            names, parts = fed.names, fed.parts
            behaviour = {c: f for c, f in fed.behaviour.items()
                         if fed.names.index(c) in members}
            behaviour |= {fed.names[k]: FreeRider for k in range(n) if k not in members}
        fm = _model(fed, rounds, lr).fit(parts, names=names, test=fed.validation,
                                        behaviour=behaviour)
        records.append({"final": accuracy(fm.params_), "loss": loss(fm.params_),
                        "curve": [float(h.test["accuracy"]) for h in fm.history_]})
    return records


def values(records: list[Record], utility: str) -> list[float]:
    """v(S) for every bitmask S from one set of trained coalitions."""
    out = [float(records[0]["final"])]  # ∅: the initial model
    for rec in records[1:]:
        curve = rec["curve"]
        out.append(float(rec["final"]) if utility == "final"
                   else max(curve) if utility == "best"
                   else float(np.mean(curve)) if utility == "auc"
                   else float(np.mean(curve[-5:])))  # "last5"
    return out


def banzhaf(value: Callable[[int], float], n: int) -> NDArray[np.float64]:
    """Banzhaf values: every marginal v(S ∪ {k}) − v(S) weighted 2^{1−n}."""
    out: NDArray[np.float64] = np.zeros(n)
    for k in range(n):
        bit = 1 << k
        out[k] = sum(value(m | bit) - value(m) for m in range(1 << n) if not m & bit)
    return out / float(1 << (n - 1))


def needs(candidates: tuple[Candidate, ...], lr: float) -> set[tuple[str, float]]:
    """The (weighting, step) games the candidates need at ``lr``."""
    return {(c.weighting, _step(lr, f)) for c in candidates for f in c.steps}


def game(c: Candidate, games: Games, lr: float) -> list[float]:
    """The candidate's game v(S), every bitmask."""
    tried = [values(games[_key(c.weighting, _step(lr, f))], c.utility) for f in c.steps]
    if c.tune == "grand":  # the grand coalition's best step (the first on a tie)
        return max(tried, key=lambda v: v[-1])
    return [max(column) for column in zip(*tried, strict=True)]


def scores(c: Candidate, games: Games, lr: float, n: int) -> list[float]:
    v = game(c, games, lr)
    phi = exact_shapley(v.__getitem__, n) if c.semivalue == "shapley" else banzhaf(
        v.__getitem__, n)
    return [float(x) for x in phi]


def value_all(fed: Federation, games: Games, lr: float) -> dict[str, Any]:
    """Every candidate at ``lr`` judged against retraining Shapley at ``lr``."""
    n = len(fed.parts)
    plain = games[_key("alone", lr)]
    truth = {"shapley": scores(TRUTH, games, lr, n),
             "shapley_loss": [float(x) for x in exact_shapley(
                 [-float(r["loss"]) for r in plain].__getitem__, n)]}
    out = {c.name: judge(scores(c, games, lr, n), fed.roles, truth) for c in CANDIDATES}
    oracle = [0.0 if r in NO_INFO else x for r, x in zip(fed.roles, truth["shapley"],
                                                          strict=True)]
    out[ORACLE] = judge(oracle, fed.roles, truth)
    return out


def summarise(judged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per candidate over the federations: τ, no-information shares, twins."""
    rows = []
    for name in judged[0]:
        per = [j[name] for j in judged]
        taus = [p["tau"] for p in per]
        paid = [p["no_info_share"] for p in per if p["no_info_share"] is not None]
        twins = [p["twins_ok"] for p in per if "twins_ok" in p]
        rows.append({
            "candidate": name, "federations": len(per), "mean_tau": float(np.mean(taus)),
            "min_tau": float(np.min(taus)),
            "max_no_info_share": max(paid) if paid else None,
            "above_5pct": sum(p > TARGET_SHARE for p in paid),
            "twins_ok": f"{sum(twins)}/{len(twins)}",
            "meets_targets": bool(np.mean(taus) >= TARGET_MEAN_TAU
                                  and np.min(taus) >= TARGET_MIN_TAU
                                  and (not paid or max(paid) <= TARGET_SHARE)
                                  and all(twins))})
    return rows


def table(rows: list[dict[str, Any]], lr: float) -> str:
    head = (f"lr {lr:g}: {'candidate':<46} {'mean τ':>6} {'min τ':>6} {'no-info':>8} "
            f"{'#>5%':>4} {'twins':>6}  targets")
    lines = [head, "-" * len(head)]
    for r in rows:
        paid = 100 * (r["max_no_info_share"] or 0.0)
        met = "" if r["candidate"] == ORACLE else "met" if r["meets_targets"] else "no"
        lines.append(f"{'':>{len(f'lr {lr:g}: ')}}{r['candidate']:<46} {r['mean_tau']:>6.2f} "
                     f"{r['min_tau']:>6.2f} {paid:>7.1f}% {r['above_5pct']:>4} "
                     f"{r['twins_ok']:>6}  {met}")
    return "\n".join(lines)


def truth_tau(entry: dict[str, Any], lrs: list[float]) -> dict[str, float]:
    """Kendall τ between retraining Shapley at each pair of step sizes."""
    truths = {lr: entry["candidates"][f"{lr:g}"][TRUTH.name]["scores"] for lr in lrs}
    return {f"{a:g}/{b:g}": matrix._tau(truths[a], truths[b])
            for a, b in itertools.combinations(lrs, 2)}


def redraw(fed: Federation, rounds: int, lrs: list[float], draws: int
           ) -> dict[str, list[dict[str, Any]]]:
    """Retraining Shapley with the shuffled client's labels drawn ``draws`` times."""
    k = fed.roles.index("shuffled")
    X, y = fed.parts[k]
    out: dict[str, list[dict[str, Any]]] = {f"{lr:g}": [] for lr in lrs}
    for draw in range(draws):
        parts = list(fed.parts)
        if draw:
            parts[k] = (X, y[np.random.default_rng([99, draw]).permutation(len(y))])
        drawn = dataclasses.replace(fed, parts=parts)
        for lr in lrs:
            t0 = time.perf_counter()
            v = values(train_coalitions(drawn, rounds, lr, "alone"), "final")
            phi = exact_shapley(v.__getitem__, len(parts))
            shares = [float(s) for s in reward_shares(phi)]
            row: dict[str, Any] = {"draw": draw, "phi": [float(x) for x in phi], "shares": shares,
                                   "shuffled_share": shares[k], "full": v[-1],
                                   "no_info_share": max(
                                       s for s, r in zip(shares, fed.roles, strict=True)
                                       if r in NO_INFO)}
            out[f"{lr:g}"].append(row)
            print(f"{fed.dataset:<8} {fed.case:<8} seed {fed.seed} lr {lr:g} draw {draw}: "
                  f"shuffled client {100 * shares[k]:.1f}%, no-info max "
                  f"{100 * row['no_info_share']:.1f}%, v(N) {v[-1]:.3f} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    for lr in lrs:
        rows = out[f"{lr:g}"]
        paid = [r["shuffled_share"] for r in rows]
        full = [r["full"] for r in rows]
        print(f"{fed.dataset:<8} {fed.case:<8} seed {fed.seed} lr {lr:g}: {draws} draws, "
              f"shuffled client {100 * min(paid):.1f}–{100 * max(paid):.1f}%, v(N) "
              f"{min(full):.3f}–{max(full):.3f}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--lr", default="0.5", help="FedAvg's step sizes, comma-separated")
    ap.add_argument("--datasets", default="digits,fashion")
    ap.add_argument("--cases", default="issue,noise50,noniid")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--rider-noise", type=float, default=1e-3)
    ap.add_argument("--redraw", type=int, default=0, metavar="K",
                    help="instead of the candidates: retraining Shapley over K draws of "
                         "the shuffled client's labels")
    args = ap.parse_args(argv)
    logging.getLogger("islands").setLevel(logging.ERROR)  # the free-riders' NaN losses
    if args.quick:
        args.datasets, args.seeds, args.cases, args.rounds = "digits", "0", "issue", 10
        args.lr = "0.5"
    lrs = [float(x) for x in args.lr.split(",")]
    t0 = time.perf_counter()
    federations: list[dict[str, Any]] = []
    judged: dict[float, list[dict[str, Any]]] = {lr: [] for lr in lrs}
    for dataset in args.datasets.split(","):
        for case in args.cases.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                fed = build(dataset, case, seed, args.rider_noise)
                entry: dict[str, Any] = {"dataset": dataset, "case": case, "seed": seed,
                                         "roles": fed.roles}
                if args.redraw:
                    if "shuffled" in fed.roles:
                        entry["redraw"] = redraw(fed, args.rounds, lrs, args.redraw)
                        federations.append(entry)
                    continue
                games: Games = {}
                for lr in lrs:
                    t1 = time.perf_counter()
                    for weighting, step in sorted(needs(CANDIDATES, lr)):
                        if _key(weighting, step) not in games:
                            games[_key(weighting, step)] = train_coalitions(
                                fed, args.rounds, step, weighting)
                    result = value_all(fed, games, lr)
                    judged[lr].append(result)
                    entry.setdefault("candidates", {})[f"{lr:g}"] = result
                    grand = [games[_key("alone", _step(lr, f))][-1] for f in (1.0, 2.5, 5.0)]
                    finals = " ".join(f"{g['final']:.3f}" for g in grand)
                    print(f"{dataset:<8} {case:<8} seed {seed} lr {lr:g}: v(N) at lr, lr/2.5, "
                          f"lr/5 {finals} (best round {max(grand[0]['curve']):.3f}); truth pays "
                          f"no-info {100 * result[TRUTH.name]['no_info_share']:.1f}%, best "
                          f"round {100 * result['best round']['no_info_share']:.1f}% "
                          f"({time.perf_counter() - t1:.0f} s)", flush=True)
                if len(lrs) > 1:
                    entry["truth_tau"] = truth_tau(entry, lrs)
                    print(f"{dataset:<8} {case:<8} seed {seed}: retraining Shapley τ between "
                          + ", ".join(f"lr {k} {v:+.2f}" for k, v in entry["truth_tau"].items()),
                          flush=True)
                entry["coalitions"] = games
                federations.append(entry)
    summary: dict[str, Any] = {}
    if not args.redraw:
        for lr in lrs:
            summary[f"{lr:g}"] = rows = summarise(judged[lr])
            print()
            print(table(rows, lr))
        if len(lrs) > 1:
            print("\nretraining Shapley at one step size against another (Kendall τ):")
            for pair in federations[0]["truth_tau"]:
                for dataset in args.datasets.split(","):
                    taus = [f["truth_tau"][pair] for f in federations
                            if f["dataset"] == dataset]
                    summary.setdefault("truth_tau", {})[f"{dataset} {pair}"] = taus
                    print(f"  {dataset:<8} lr {pair}: mean {np.mean(taus):+.2f}, "
                          f"min {np.min(taus):+.2f}, max {np.max(taus):+.2f}")
    print(f"\n{len(federations)} federations, {args.rounds} rounds, lr {args.lr}, "
          f"{time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                         "summary": summary, "federations": federations}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
