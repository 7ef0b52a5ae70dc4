"""``islands audit dp``: the ε a DP mechanism really gives, measured in one run.

The accountant's ε is an upper bound *if* the mechanism is implemented as analysed. This
module runs islands' DP mechanisms once with m canaries, each included with probability ½
from the CSPRNG, scores them from what the attacker sees, and reports Steinke, Nasr and
Jagielski's one-run lower bound on ε beside the accountant's ε
(:mod:`islands.privacy.audit`, where the statistics and what they mean are documented).
A bound above the accountant's ε says the implementation or its accounting is wrong (or
an event of probability at most β happened); a bound below it does not certify anything.

Mechanisms are registered in :data:`MECHANISMS` (name → runner); each runner takes the
plain settings of :class:`AuditSettings` and returns its views' audits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from islands.data import load_sklearn
from islands.errors import ValidationError
from islands.hfl.dp_audit import audit_client_dp, audit_dpsgd, audit_dpsgd_job, audit_job
from islands.hfl.job import Job, prepare
from islands.pca.dp_audit import audit_pca_dp
from islands.privacy.audit import OneRunAudit, audit_gaussian, audit_prefix, ceiling
from islands.reporting import ResultSet
from islands.run_report import dp_audit_figure, write_html

__all__ = ["DEFAULTS", "DEFAULT_CANARIES", "MECHANISMS", "AuditSettings", "DpAuditResult",
           "Views", "audit_dp", "audit_dp_job", "write_dp_audit"]


@dataclass(frozen=True)
class AuditSettings:
    """What one audit runs; None takes the mechanism's default (:data:`DEFAULTS`).

    Attributes
    ----------
    canaries
        m, the number of canaries.
    confidence
        1 − β of every bound.
    delta
        δ of the claim and of the bounds.
    accountant
        ``"rdp"`` or ``"pld"``: the accountant whose ε is compared.
    noise_multiplier, clip, rounds, sampling_rate
        σ, S, the releases T (rounds of FL for client-level DP, steps for DP-SGD) and the
        Poisson rate q (gaussian, dp-sgd).
    noise, base
        Client-level DP: ``"local"`` or ``"distributed"`` noise, over ``"mean"`` or a
        hiding aggregation (``"secagg"``, ``"secaggplus"``, ``"additive"``).
    mode, epsilon, dataset, sites
        Federated DP-PCA's mode (:data:`islands.pca.dp_audit.AUDITED_MODES`), its configured
        ε, the scikit-learn data set split into ``sites`` sites (the canaries go to the
        second site; the first aggregates and observes).
    """

    canaries: int | None = None
    confidence: float = 0.95
    delta: float = 1e-5
    accountant: str = "rdp"
    noise_multiplier: float | None = None
    clip: float = 1.0
    rounds: int | None = None
    sampling_rate: float | None = None
    noise: str = "local"
    base: str = "mean"
    mode: str = "secure"
    epsilon: float = 0.9
    dataset: str = "digits"
    sites: int = 3

    def resolved(self, mechanism: str) -> AuditSettings:
        """Return these settings with every None replaced by ``mechanism``'s default."""
        given = {k: v for k, v in DEFAULTS[mechanism].items() if getattr(self, k) is None}
        return replace(self, **given)


DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "gaussian": {"canaries": 20_000, "noise_multiplier": 6.0, "rounds": 10,
                 "sampling_rate": 1.0},
    "client-dp": {"canaries": 200, "noise_multiplier": 8.0, "rounds": 5, "sampling_rate": 1.0},
    "dp-sgd": {"canaries": 5_000, "noise_multiplier": 2.0, "rounds": 200,
               "sampling_rate": 0.05},
    "pca": {"canaries": 1_000, "noise_multiplier": 0.0, "rounds": 1, "sampling_rate": 1.0},
}
"""Each mechanism's defaults: each gives a claimed ε of about 1–2 at δ = 1e-5 (PCA's is
set by ``epsilon``), and m within what the mechanism can hold and audit in seconds."""

DEFAULT_CANARIES: Mapping[str, int] = {name: int(d["canaries"]) for name, d in DEFAULTS.items()}
"""Each mechanism's m when none is given."""


@dataclass(frozen=True)
class Views:
    """What a runner returns: each view's audit, and which accountant value each compares with."""

    audits: dict[str, OneRunAudit]
    compared_with: dict[str, str]
    details: dict[str, Any] = field(default_factory=dict)


Runner = Callable[[AuditSettings], Views]


def _gaussian(s: AuditSettings) -> Views:
    """Audit the Gaussian mechanism (clip, Gaussian noise, Poisson sampling), white-box."""
    audit = audit_gaussian(
        noise_multiplier=float(s.noise_multiplier or 0.0), rounds=int(s.rounds or 0),
        canaries=int(s.canaries or 0), clip=s.clip, sampling_rate=float(s.sampling_rate or 0),
        delta=s.delta, accountant=s.accountant, confidence=s.confidence)
    return Views({"white-box": audit}, {"white-box": f"PrivacyAccountant ({s.accountant})"})


def _client_dp(s: AuditSettings) -> Views:
    """Audit client-level DP through the real FL protocol, with canary clients."""
    run = audit_client_dp(canaries=int(s.canaries or 0), rounds=int(s.rounds or 0),
                          noise_multiplier=float(s.noise_multiplier or 0.0), clip=s.clip,
                          noise=s.noise, base=s.base, delta=s.delta, accountant=s.accountant,
                          confidence=s.confidence)
    return Views(dict(run.views), dict(run.accountant), {"run": dict(run.settings)})


def _dp_sgd(s: AuditSettings) -> Views:
    """Audit DP-SGD on the real PrivateTrainer, with canary rows."""
    run = audit_dpsgd(canaries=int(s.canaries or 0), steps=int(s.rounds or 0),
                      noise_multiplier=float(s.noise_multiplier or 0.0), clip=s.clip,
                      sampling_rate=float(s.sampling_rate or 0.0), delta=s.delta,
                      accountant=s.accountant, confidence=s.confidence)
    return Views(dict(run.views), dict(run.accountant), {"run": dict(run.settings)})


def _pca(s: AuditSettings) -> Views:
    """Audit federated DP-PCA with canary rows in one site, white- and black-box."""
    data = load_sklearn(s.dataset)
    parts = np.array_split(data.X.astype(np.float64), s.sites)
    audit = audit_pca_dp(parts, mode=s.mode, epsilon=s.epsilon, delta=s.delta,
                         canaries=int(s.canaries or 0), confidence=s.confidence)
    return Views({"white-box": audit.white_box, "black-box": audit.black_box},
                 {"white-box": "the configured ε", "black-box": "the configured ε"})


MECHANISMS: Mapping[str, Runner] = {"gaussian": _gaussian, "client-dp": _client_dp,
                                    "dp-sgd": _dp_sgd, "pca": _pca}
"""Every auditable mechanism, by the name ``islands audit dp --mechanism`` takes."""

DESCRIPTIONS: Mapping[str, str] = {
    "gaussian": "islands' Gaussian mechanism (clip_l2, CSPRNG Gaussian noise, Poisson "
                "sampling), T releases, the attacker sees every release (white-box), "
                "Dirac canaries",
    "client-dp": "client-level DP through the real FL protocol: canary clients, each "
                 "uploading a Dirac update or the model unchanged; the server's released "
                 "models (and, without hiding, single uploads) white-box, the final model "
                 "black-box",
    "dp-sgd": "sample-level DP-SGD on islands' PrivateTrainer (Opacus per-sample clipping, "
              "Poisson batches): canary rows each on a column of its own; every step "
              "white-box, the final model black-box",
    "pca": "federated DP-PCA (islands.pca): canary rows in one site; white-box, the "
           "aggregating site's noisy moments; black-box, the released components",
    "job": "an HFL job file with client-level DP: canary clients added, every round's "
           "global model observed (white-box), the final model (black-box)",
    "dp-sgd-job": "an HFL job file with sample-level DP-SGD, run in its own model and data: "
                  "input-space canary rows added to one client; every round's global model "
                  "along each canary's clipped gradient (white-box), its loss drop in the "
                  "final model (black-box); views prefixed 'mechanism-' are the job's "
                  "DP-SGD settings on the PrivateTrainer canary harness"}


@dataclass(frozen=True)
class DpAuditResult:
    """One audit, and the sweep around it if asked for.

    Attributes
    ----------
    mechanism
        Its name in :data:`MECHANISMS`, ``"job"`` or ``"dp-sgd-job"``.
    settings
        What ran (resolved).
    views
        Each view's :class:`~islands.privacy.audit.OneRunAudit`.
    compared_with
        Each view's accountant value (what its ``claimed_epsilon`` is).
    by_canaries, by_noise
        The sweep's points (one independent run each), or None.
    seconds
        Wall time of the audit and its sweep.
    extra
        The runner's details (the audited run's own settings, a job's name).
    """

    mechanism: str
    settings: AuditSettings
    views: dict[str, OneRunAudit]
    compared_with: dict[str, str] = field(default_factory=dict)
    by_canaries: dict[str, list[float]] | None = None
    by_noise: dict[str, list[float]] | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def contradicted(self) -> bool:
        """Whether any view's rigorous bound exceeds the accountant's ε."""
        return any(a.contradicted or a.curve_contradicted for a in self.views.values())

    def to_json(self) -> dict[str, Any]:
        """Return ``results.json``'s ``dp_audit`` object."""
        s = self.settings
        out: dict[str, Any] = {
            "mechanism": self.mechanism, "description": DESCRIPTIONS[self.mechanism],
            "delta": s.delta, "confidence": s.confidence, "accountant": s.accountant,
            "settings": vars(s).copy(), "canaries": s.canaries,
            "views": {name: {**a.to_dict(), "compared_with": self.compared_with.get(name)}
                      for name, a in self.views.items()},
            "ceiling": ceiling(int(s.canaries or 2), s.delta, s.confidence),
            "contradicted": self.contradicted}
        if self.by_canaries is not None:
            out["by_canaries"] = self.by_canaries
        if self.by_noise is not None:
            out["by_noise"] = self.by_noise
        out["seconds"] = self.seconds
        return {"dp_audit": {**out, **self.extra}}


def _sweep_canaries(run: Runner, s: AuditSettings, points: Sequence[int], main: OneRunAudit,
                    say: Callable[[str], None]) -> dict[str, list[float]]:
    """One run with the most canaries; every smaller m audits its first m (nested).

    The main run ``main`` serves when it has at least the sweep's largest m.
    """
    out: dict[str, list[float]] = {"m": [], "lower_bound": [], "ceiling": [],
                                   "accountant_epsilon": [], "curve_bound": []}
    top = max(points)
    full = main
    if main.canaries < top:
        say(f"sweep: one run with {top} canaries, audited on nested subsets")
        full = next(iter(run(replace(s, canaries=top)).audits.values()))
    for m in sorted(points):
        audit = full if m == full.canaries else audit_prefix(full, min(m, full.canaries))
        out["m"].append(float(audit.canaries))
        out["lower_bound"].append(audit.lower_bound)
        out["ceiling"].append(audit.ceiling)
        out["accountant_epsilon"].append(float(audit.claimed_epsilon or 0.0))
        out["curve_bound"].append(
            float("nan") if audit.curve_bound is None else audit.curve_bound)
    return out


def _sweep_noise(run: Runner, s: AuditSettings, points: Sequence[float],
                 say: Callable[[str], None]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"noise_multiplier": [], "lower_bound": [],
                                   "accountant_epsilon": [], "curve_bound": []}
    for sigma in points:
        say(f"sweep: noise multiplier {sigma:g}")
        audit = next(iter(run(replace(s, noise_multiplier=sigma)).audits.values()))
        out["noise_multiplier"].append(float(sigma))
        out["lower_bound"].append(audit.lower_bound)
        out["accountant_epsilon"].append(float(audit.claimed_epsilon or 0.0))
        out["curve_bound"].append(
            float("nan") if audit.curve_bound is None else audit.curve_bound)
    return out


SWEEP_CANARIES: Mapping[str, tuple[int, ...]] = {
    "gaussian": (500, 1_000, 2_000, 5_000, 10_000, 20_000),
    "client-dp": (50, 100, 200, 400),
    "dp-sgd": (500, 1_000, 2_000, 5_000),
    "pca": (50, 100, 250, 500, 1_000, 2_000)}
"""Each mechanism's canary counts for ``--sweep canaries``."""

SWEEP_NOISE = (2.0, 3.0, 4.0, 6.0, 9.0, 12.0)
"""The noise multipliers of ``--sweep noise`` (the Gaussian mechanism's σ)."""


def audit_dp(mechanism: str = "gaussian", settings: AuditSettings | None = None, *,
             sweep: str | None = None,
             progress: Callable[[str], None] | None = None) -> DpAuditResult:
    """Audit one mechanism once; with ``sweep``, also against m or σ.

    ``sweep="canaries"`` audits nested subsets of one run's canaries
    (:func:`~islands.privacy.audit.audit_prefix`): the main run's, when it has at least
    the largest m of :data:`SWEEP_CANARIES`, else one more run with that m; ``"noise"``
    runs once per σ.

    Parameters
    ----------
    mechanism
        A name in :data:`MECHANISMS`.
    settings
        What to run (default :class:`AuditSettings`).
    sweep
        None, ``"canaries"`` (:data:`SWEEP_CANARIES`) or, for the Gaussian mechanism,
        ``"noise"`` (:data:`SWEEP_NOISE`).
    progress
        Called with a short message at each step.

    Raises
    ------
    ValidationError
        For an unknown mechanism or sweep, or a setting out of range (naming it).
    """
    if mechanism not in MECHANISMS:
        raise ValidationError(f"mechanism must be one of {sorted(MECHANISMS)}; got "
                              f"{mechanism!r}")
    if sweep not in (None, "canaries", "noise") or (sweep == "noise"
                                                     and mechanism != "gaussian"):
        raise ValidationError(f"sweep must be 'canaries', 'noise' (the Gaussian mechanism "
                              f"only) or None; got {sweep!r} for {mechanism!r}")
    s = (settings if settings is not None else AuditSettings()).resolved(mechanism)
    say = progress if progress is not None else (lambda _m: None)
    run = MECHANISMS[mechanism]
    start = time.perf_counter()
    say(f"auditing {mechanism} with {s.canaries} canaries")
    views = run(s)
    by_canaries = (_sweep_canaries(run, s, SWEEP_CANARIES[mechanism],
                                   next(iter(views.audits.values())), say)
                   if sweep == "canaries" else None)
    by_noise = _sweep_noise(run, s, SWEEP_NOISE, say) if sweep == "noise" else None
    return DpAuditResult(mechanism, s, views.audits, views.compared_with, by_canaries,
                         by_noise, time.perf_counter() - start, views.details)


def audit_dp_job(job: Job, *, canaries: int | None = None, confidence: float = 0.95,
                 mechanism_canaries: int | None = None,
                 progress: Callable[[str], None] | None = None) -> DpAuditResult:
    """Audit an HFL job with DP once: canaries added to the job's own run.

    Client-level DP (``protect`` holds ``"dp"``): m canary clients
    (:func:`islands.hfl.dp_audit.audit_job`); each view is compared with the audited run's
    own accountant (its cohort includes the canaries).

    Sample-level DP-SGD (``protect`` holds ``"dp-sgd"``): the job's own model and data run
    as ``islands run`` runs them, with m input-space canary rows in the client of median
    size (:func:`islands.hfl.dp_audit.audit_dpsgd_job`, views ``"aggregate"`` and
    ``"final"``, compared with that client's own DP-SGD account). Beside them, the job's
    DP-SGD settings (σ, C, δ, accountant, q = batch/rows of the median client, T = epochs
    × local steps) are audited on islands' :class:`~islands.hfl.torch.dpsgd.PrivateTrainer`
    with feature-column canary rows (:func:`islands.hfl.dp_audit.audit_dpsgd`, views
    ``"mechanism-steps"`` and ``"mechanism-final"``, ``mechanism_canaries`` of them,
    default 5,000): the mechanism with the strongest canaries, where the job's model gives
    much weaker ones.

    Raises
    ------
    ValidationError
        If the job has neither client-level DP nor DP-SGD, naming it.
    """
    say = progress if progress is not None else (lambda _m: None)
    start = time.perf_counter()
    if "dp-sgd" in job.protect:
        return _job_dp_sgd(job, canaries, confidence, mechanism_canaries, say, start)
    say(f"running {job.name} with canary clients")
    run = audit_job(job, canaries, confidence=confidence)
    m = next(iter(run.views.values())).canaries
    settings = AuditSettings(canaries=m, confidence=confidence,
                             delta=float(run.settings.get("delta", 1e-5)))
    return DpAuditResult("job", settings, dict(run.views), dict(run.accountant),
                         seconds=time.perf_counter() - start,
                         extra={"job": job.name, "run": dict(run.settings)})


def _job_dp_sgd(job: Job, canaries: int | None, confidence: float,
                mechanism_canaries: int | None, say: Callable[[str], None],
                start: float) -> DpAuditResult:
    """Audit a DP-SGD job in its own model, and its settings on the PrivateTrainer harness."""
    say(f"running {job.name} with canary rows in one client")
    run = audit_dpsgd_job(job, canaries, confidence=confidence)
    m = next(iter(run.views.values())).canaries
    prep = prepare(job)
    sample_dp = prep.plan.sample_dp
    assert sample_dp is not None  # "dp-sgd" in protect
    strategy = prep.plan.strategy
    sizes = sorted(len(y) for _, y in prep.parts)
    rows = sizes[len(sizes) // 2]
    batch = getattr(strategy, "batch_size", None) or rows
    harness = AuditSettings(
        canaries=mechanism_canaries, confidence=confidence, delta=sample_dp.delta,
        accountant=sample_dp.accountant, noise_multiplier=sample_dp.noise_multiplier,
        clip=sample_dp.clip, rounds=job.epochs * strategy.local_steps(),
        sampling_rate=sample_dp.sampling_rate(min(batch, rows), rows)).resolved("dp-sgd")
    say(f"auditing {job.name}'s DP-SGD settings with {harness.canaries} canary rows")
    mech = _dp_sgd(harness)
    views = {**run.views, **{f"mechanism-{k}": v for k, v in mech.audits.items()}}
    compared = {**run.accountant,
                **{f"mechanism-{k}": v for k, v in mech.compared_with.items()}}
    scope = (f"the job's own model and data, run as islands run runs them, with {m} "
             f"input-space canary rows in {run.settings['holder']} (views aggregate, final; "
             "compared with that client's own DP-SGD account); and the job's DP-SGD settings "
             "(σ, C, δ, q = batch/rows of its median client, T = epochs × local steps) on "
             f"islands' PrivateTrainer with {harness.canaries} feature-column canary rows "
             "(views mechanism-steps, mechanism-final)")
    settings = AuditSettings(canaries=m, confidence=confidence, delta=sample_dp.delta,
                             accountant=sample_dp.accountant,
                             noise_multiplier=sample_dp.noise_multiplier, clip=sample_dp.clip)
    return DpAuditResult("dp-sgd-job", settings, views, compared,
                         seconds=time.perf_counter() - start,
                         extra={"job": job.name, "scope": scope, "run": dict(run.settings),
                                "harness": {"canaries": harness.canaries,
                                            **mech.details}})


def _report(result: DpAuditResult) -> str:
    s = result.settings
    m = int(s.canaries or 2)
    lines = [f"# DP audit: {result.extra.get('job', result.mechanism)}", "",
             DESCRIPTIONS[result.mechanism] + ".", "",
             f"{m} canaries, δ = {s.delta:g}, confidence {s.confidence:g}; the most any "
             f"one-run audit with this many canaries can show: ε = "
             f"{ceiling(m, s.delta, s.confidence):.2f}.", "",
             "| view | claimed ε (compared with) | lower bound | curve bound | "
             "estimate (no confidence) | guesses | correct |", "|---|---|---|---|---|---|---|"]
    for name, a in result.views.items():
        curve = "n/a" if a.curve_bound is None else f"{a.curve_bound:.3f} ({a.curve})"
        estimate = "n/a" if a.estimate is None else f"{a.estimate:.3f}"
        lines.append(f"| {name} | {a.claimed_epsilon:.3f} ({result.compared_with.get(name)}) | "
                     f"{a.lower_bound:.3f} | {curve} | {estimate} | {a.guesses} | "
                     f"{a.correct} |")
    if "scope" in result.extra:
        lines += ["", f"Scope: {result.extra['scope']}."]
    lines += ["", verdict(result), ""]
    if result.by_canaries is not None or result.by_noise is not None:
        lines += ["![the bound against the sweep](dp_audit.png)", ""]
    return "\n".join(lines)


def verdict(result: DpAuditResult) -> str:
    """One sentence: contradicted, or consistent (and the ceiling that limits it)."""
    s = result.settings
    if result.contradicted:
        tests = sum(1 + (a.curve_bound is not None) for a in result.views.values())
        family = ("" if tests == 1 else
                  f" per test ({tests} tests: at least "
                  f"{max(0.0, 1.0 - tests * (1.0 - s.confidence)):.0%} for the whole audit)")
        return (f"**The reported ε is contradicted at {s.confidence:.0%} confidence**"
                f"{family}: the implementation or its accounting gives less privacy than "
                "it reports.")
    m = int(s.canaries or 2)
    top = ceiling(m, s.delta, s.confidence)
    return (f"No bound exceeds the claimed ε: consistent. A one-run audit with "
            f"{m} canaries cannot contradict an ε above {top:.2f}, and a bound below "
            "the accountant's ε does not certify the mechanism.")


def write_dp_audit(result: DpAuditResult, out: str | Path) -> list[Path]:
    """Write the audit's files into ``out``.

    ``results.json``, ``report.md``, ``report.html`` and, with a sweep, ``dp_audit.png``.
    The files are published together (:class:`~islands.reporting.ResultSet`): a failure
    leaves the folder's previous results as they were.
    """
    with ResultSet(out) as files:
        files.add_json("results.json", result.to_json())
        files.add_text("report.md", _report(result) + "\n")
        fig = dp_audit_figure(result.by_canaries, result.by_noise, result.mechanism)
        if fig is not None:
            files.add_figure("dp_audit.png", fig)
    return [*files.published, write_html(files.folder)]
