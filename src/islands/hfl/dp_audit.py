"""Empirical DP audits of horizontal FL in one run: canary clients, canary rows, observers.

The statistics are :mod:`islands.privacy.audit`'s (Steinke, Nasr and Jagielski's one-run
bound [1]_, the bound of Mahloujifar et al. [2]_ against the claim's whole trade-off
curve, Gaussian or Poisson-subsampled Gaussian, Andrew et al.'s estimate [3]_); this
module runs islands' real mechanisms with canaries and scores them. Nothing here touches
a mechanism's code:

* **client-level DP** (:func:`audit_client_dp`): m canary *clients*
  (:class:`CanaryClient`, a learner wrapper like the poisoning clients) join a federation
  of a few real clients, run by the real server and client roles (``run_local``) under
  the real :class:`~islands.aggregation.protect.ClientDP` stack. Canary i owns one model
  coordinate (Dirac canaries, Nasr et al. [4]_) and, if its secret bit says "in",
  uploads the round's model plus M·u_i (M = 4S, so the clip matters), else the model
  unchanged ("zero-out": present either way, so the cohort and the distributed noise's t
  are the same in both worlds). Views: every round's released model (``"aggregate"``,
  white-box), the final model only (``"final"``, black-box), and, where the server sees
  single uploads (local noise), each upload (``"uploads"``, :class:`UploadObserver`);
* **DP-SGD** (:func:`audit_dpsgd`): m canary *rows* for islands' real
  :class:`~islands.hfl.torch.dpsgd.PrivateTrainer` (Opacus per-sample clipping), each on
  a feature column of its own of a linear model, observed after every step;
* **jobs**: canary clients (client-level DP, :func:`audit_job`) or input-space canary
  rows in one client (DP-SGD, :func:`audit_dpsgd_job`) added to a parsed job, run as
  ``islands run`` runs it, observed through ``FederatedModel(round_observer=...)``.

Each view is compared with the accountant's ε that covers it: the run's ``spent()`` for
released models, ``spent_against_server()`` for single uploads, the canary-holding
client's own DP-SGD account for rows. Canary coordinates and membership bits come from
the CSPRNG (:func:`~islands.privacy.audit.dirac_canaries`,
:func:`~islands.privacy.audit.draw_membership`), never from a job's seed.

References
----------
.. [1] T. Steinke, M. Nasr, M. Jagielski. "Privacy Auditing with One (1) Training Run."
   NeurIPS 2023, arXiv:2305.08846.
.. [2] S. Mahloujifar, L. Melis, K. Chaudhuri. "Auditing f-Differential Privacy in One
   Run." ICML 2025, arXiv:2410.22235.
.. [3] G. Andrew, P. Kairouz, S. Oh, A. Oprea, H. B. McMahan, V. Suriyakumar. "One-shot
   Empirical Privacy Estimation for Federated Learning." ICLR 2024, arXiv:2302.03098.
.. [4] M. Nasr et al. "Tight Auditing of Differentially Private Machine Learning."
   USENIX Security 2023, arXiv:2302.07956.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.aggregation.base import Aggregator
from islands.aggregation.protect import ClientDP, SampleAccount, SampleDP, build_aggregator
from islands.arrays import Vector
from islands.crypto.prg import csprng_uniform
from islands.errors import ValidationError, invalid_parameter
from islands.hfl.config import resolve_seed
from islands.hfl.contribution.tracker import check_compatible
from islands.hfl.estimator import FederatedModel, client_seed, split_local_eval
from islands.hfl.job import Job, prepare
from islands.hfl.protocol import LocalOutcome, RoundRecord, WrappedLearner, client, server
from islands.hfl.strategy import FedAvg, LocalConfig
from islands.privacy.audit import (
    CurveClaim,
    DiracCanaries,
    GuessPlan,
    OneRunAudit,
    audit_scores,
    bonferroni_plans,
    check_confidence,
    default_plans,
    dirac_canaries,
    draw_membership,
    gaussian_mu,
    white_box_scores,
)
from islands.runtime import run_local
from islands.validation import check_float, check_int, describe

__all__ = [
    "CLIENT_VIEWS",
    "DPSGD_VIEWS",
    "JOB_DPSGD_VIEWS",
    "JOB_VIEWS",
    "CanaryClient",
    "DPAudit",
    "UploadObserver",
    "audit_client_dp",
    "audit_dpsgd",
    "audit_dpsgd_job",
    "audit_job",
    "gaussian_llr_scores",
]

CLIENT_VIEWS = ("aggregate", "final", "uploads")
"""The views of a client-level audit: every released model, the final one, each upload."""

_SPARE = 1024  # canary-free coordinates the noise's spread is read from
_MAD_TO_SD = 1.482602218505602  # 1 / Φ⁻¹(3/4)


# --------------------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True)
class DPAudit:
    """One audit run: a :class:`~islands.privacy.audit.OneRunAudit` per view, and its setting.

    Attributes
    ----------
    mechanism
        ``"client-dp"``, ``"dp-sgd"`` or ``"job"``.
    views
        View name → its audit; each carries the accountant's ε it is compared with
        (``claimed_epsilon``) and the ceiling m canaries allow.
    settings
        The audited run's settings as plain values (canaries, rounds, σ, clip, ...).
    accountant
        View name → which accountant value the view is compared with (``"spent"``,
        ``"spent_against_server"``, ``"canary client's DP-SGD account"``).
    seconds
        Wall time of the run and the audit.
    """

    mechanism: str
    views: Mapping[str, OneRunAudit]
    settings: Mapping[str, Any]
    accountant: Mapping[str, str]
    seconds: float

    @property
    def contradicted(self) -> bool:
        """Whether any view's Steinke bound exceeds its accountant's ε."""
        return any(a.contradicted for a in self.views.values())

    def to_dict(self) -> dict[str, Any]:
        """Return plain JSON-ready values: the settings, each view's audit, the verdict."""
        return {"mechanism": self.mechanism, "settings": dict(self.settings),
                "views": {k: {**v.to_dict(), "accountant": self.accountant[k]}
                          for k, v in self.views.items()},
                "contradicted": self.contradicted, "seconds": self.seconds}


# --------------------------------------------------------------------------- scores


def gaussian_llr_scores(values: NDArray[np.float64], noise_sd: NDArray[np.float64], *,
                        contribution: float) -> NDArray[np.float64]:
    """Score canaries from per-release observations: Σ_t (c·x_t − c²/2)/σ̂_t².

    x_t is the canary's coordinate of its own release t (one upload), N(c·[in], σ̂_t²)
    under the claim; the sum is the Neyman–Pearson statistic of T unsampled Gaussian
    releases, each weighted by its own noise (a release without noise dominates).
    Missing releases (NaN) count 0.

    Parameters
    ----------
    values, noise_sd
        (T, m) observations and the s.d. of the noise of each (> 0 where finite).
    contribution
        c, the clipped canary's contribution to its coordinate, > 0.

    Returns
    -------
    ndarray of float64, shape (m,)
    """
    c = float(contribution)
    z = (c * values - c * c / 2.0) / noise_sd**2
    out: NDArray[np.float64] = np.where(np.isfinite(z), z, 0.0).sum(axis=0)
    return out


def _noise_sd(vectors: NDArray[np.float64], spare: NDArray[np.bool_], floor: float
              ) -> NDArray[np.float64]:
    """1.4826 × the median |value| over the spare coordinates of each row, at least ``floor``."""
    sd: NDArray[np.float64] = np.maximum(
        _MAD_TO_SD * np.median(np.abs(vectors[..., spare]), axis=-1), floor)
    return sd


# --------------------------------------------------------------------------- canary clients


class CanaryClient(WrappedLearner):
    """A canary client: uploads the model plus ``norm``·``sign``·e_``coordinate``, or nothing.

    "Zero-out" canaries: the client is in the federation either way (its counts are
    ``inner``'s); if ``included`` its update is M·u with u = ±e_j, a coordinate it alone
    owns, else it uploads the model it was sent unchanged. It never trains ``inner`` and
    reports no loss (NaN). For audits only (:func:`audit_client_dp`, :func:`audit_job`).

    Parameters
    ----------
    inner
        The learner whose counts (and evaluation) it reports.
    coordinate
        j, an int >= 0 (below the model's length).
    sign
        +1.0 or -1.0.
    norm
        M, the update's L2 norm before the DP clip, a float > 0.
    included
        The canary's secret membership bit.
    """

    def __init__(self, inner: Any, *, coordinate: int, sign: float, norm: float,
                 included: bool) -> None:
        owner = "CanaryClient"
        self.inner = inner
        self.coordinate = check_int(coordinate, "coordinate", owner, low=0)
        if sign not in (1.0, -1.0):
            raise invalid_parameter("sign", owner, "+1.0 or -1.0", sign)
        self.sign = float(sign)
        self.norm = check_float(norm, "norm", owner, low=0.0, low_inclusive=False)
        self.included = bool(included)

    def train(self, params: Vector, *, epoch: int, step: int, steps: int, batch_size: int,
              config: LocalConfig, state: Vector | None) -> LocalOutcome:
        """Return the model plus the canary's update if included, else unchanged."""
        out = np.array(params, dtype=np.float32)
        if self.coordinate >= out.size:
            raise invalid_parameter("coordinate", "CanaryClient", f"an int < {out.size} "
                                    "(the model's length)", self.coordinate)
        if self.included:
            out[self.coordinate] = np.float32(float(out[self.coordinate])
                                              + self.sign * self.norm)
        return LocalOutcome(params=out, state=state, loss=math.nan)

    def evaluate(self, params: Vector) -> float:
        """Return the inner learner's evaluation."""
        return float(self.inner.evaluate(params))


class _NoRows:
    """The inner learner of a harness canary: ``n`` rows claimed, none trained on."""

    def __init__(self, n: int) -> None:
        self._n = n

    @property
    def n_train(self) -> int:
        return self._n

    @property
    def n_eval(self) -> int:
        return 0

    def train(self, params: Vector, **kw: Any) -> LocalOutcome:  # pragma: no cover
        raise RuntimeError("a canary's inner learner never trains")

    def evaluate(self, params: Vector) -> float:  # pragma: no cover - n_eval = 0
        return math.nan


class _FixedUpdate:
    """A harness's real client: local training replaced by w ↦ w + v (v its own update)."""

    def __init__(self, n: int, update: NDArray[np.float32]) -> None:
        self._n, self.update = n, update

    @property
    def n_train(self) -> int:
        return self._n

    @property
    def n_eval(self) -> int:
        return 0

    def train(self, params: Vector, **kw: Any) -> LocalOutcome:
        return LocalOutcome(params=(np.asarray(params, np.float32) + self.update),
                            state=None, loss=0.0)

    def evaluate(self, params: Vector) -> float:  # pragma: no cover - n_eval = 0
        return math.nan


# --------------------------------------------------------------------------- observers


class UploadObserver:
    """The server's view of single uploads: each canary client's coordinate, every round.

    Implements :class:`~islands.hfl.protocol.RoundObserver` (the server's ``contribution``
    hook): refused, before any message, over an aggregator that hides single updates.
    Keeps, per round and canary, x = ⟨upload − base, u_i⟩ and the upload's noise s.d.
    read from the coordinates no canary owns; nothing else. Not checkpointed.

    Parameters
    ----------
    canaries
        The canaries' coordinates and signs.
    names
        The canary clients' party names, in canary order.
    """

    def __init__(self, canaries: DiracCanaries, names: Sequence[str]) -> None:
        if len(names) != canaries.m:
            raise invalid_parameter("names", "UploadObserver", f"{canaries.m} names",
                                    len(names))
        self.canaries = canaries
        self.index = {name: i for i, name in enumerate(names)}
        self.spare = np.ones(canaries.dim, dtype=bool)
        self.spare[canaries.coordinates] = False
        self.values: list[NDArray[np.float64]] = []
        self.noise_sd: list[NDArray[np.float64]] = []

    def check_aggregator(self, aggregator: Aggregator) -> None:
        """Raise unless the server sees plain single updates."""
        check_compatible(aggregator)

    def observe(self, round: int, base: Vector, uploads: dict[str, Any],
                weights: dict[str, float]) -> None:
        """Take each canary client's upload of the round (others are ignored)."""
        m = self.canaries.m
        values, sd = np.full(m, np.nan), np.full(m, np.nan)
        start = np.asarray(base, np.float64)
        for name, upload in uploads.items():
            i = self.index.get(name)
            if i is None:
                continue
            delta = np.asarray(upload, np.float64) - start
            j = int(self.canaries.coordinates[i])
            values[i] = delta[j] * self.canaries.signs[i]
            sd[i] = _noise_sd(delta, self.spare, 1e-300)
        self.values.append(values)
        self.noise_sd.append(sd)

    def get_state(self) -> dict[str, Any]:
        """Nothing: an audit is not resumed."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Nothing to restore."""


class _ModelObserver:
    """Keeps every round's released model and the round's survivors (white-box view)."""

    def __init__(self, initial: NDArray[np.float64]) -> None:
        self.models = [initial]
        self.survivors: list[int] = []

    def __call__(self, record: RoundRecord, params: Vector) -> None:
        self.models.append(np.asarray(params, np.float64).copy())
        self.survivors.append(int(record.survivors))

    def releases(self, scale: bool) -> NDArray[np.float64]:
        """(T, d) model differences, times each round's survivors when ``scale`` (the sum)."""
        models = np.stack(self.models)
        diffs: NDArray[np.float64] = np.diff(models, axis=0)
        if scale:
            diffs *= np.asarray(self.survivors, np.float64)[:, None]
        return diffs


# --------------------------------------------------------------------------- helpers


def _plans(mu: float, m: int, delta: float, confidence: float, rate: float
           ) -> tuple[GuessPlan, ...]:
    return default_plans(mu, m, delta, confidence, sampling_rate=rate)


def _audit(scores: NDArray[np.float64], included: NDArray[np.bool_], *, curve: CurveClaim,
           claim: float, delta: float, confidence: float) -> OneRunAudit:
    plans = _plans(curve.mu, scores.size, delta, confidence, curve.sampling_rate)
    return audit_scores(scores, included, delta=delta, confidence=confidence, plans=plans,
                        claimed_epsilon=claim, curve=curve)


def _check_views(views: Sequence[str] | None, allowed: Sequence[str], default: Sequence[str],
                 owner: str) -> tuple[str, ...]:
    if views is None:
        return tuple(default)
    if isinstance(views, str) or not all(isinstance(v, str) and v in allowed for v in views) \
            or not views:
        raise invalid_parameter("views", owner, f"a non-empty list among {list(allowed)}",
                                describe(views))
    return tuple(dict.fromkeys(views))


# --------------------------------------------------------------------------- client-level


def audit_client_dp(*, canaries: int = 200, rounds: int = 5, noise_multiplier: float = 1.0,
                    clip: float = 1.0, noise: str = "local", base: str = "mean",
                    threshold: float | None = None, real_clients: int = 3,
                    canary_norm: float | None = None, delta: float = 1e-5,
                    accountant: str = "rdp", confidence: float = 0.95,
                    views: Sequence[str] | None = None, aggregator: Aggregator | None = None,
                    timeout: float = 120.0) -> DPAudit:
    """Audit client-level DP once, through the real FL protocol, with m canary clients.

    Builds the ``["dp", base]`` stack (:func:`~islands.aggregation.protect.build_aggregator`),
    a model of m + 1024 coordinates (zeros), m :class:`CanaryClient` (Dirac coordinates,
    signs and membership bits from the CSPRNG) and ``real_clients`` clients whose local
    training is a fixed update of norm 2S, and runs the server and every client role
    (``run_local``) for ``rounds`` rounds of FedAvg with every client in every round. The
    server's released models and, where it sees them, the single uploads are scored
    white-box (Gaussian log-likelihood ratio of the claim, each release weighted by the
    noise read from canary-free coordinates), the final model black-box
    (⟨w_T − w_0, u_i⟩), and each view is audited against its accountant value: the run's
    ``spent()`` for models, ``spent_against_server()`` for uploads (the accountant of the
    server result). Every round is an unsampled Gaussian release, so the curve bound is
    against the Gaussian curve.

    Parameters
    ----------
    canaries
        m, an int >= 2.
    rounds
        T, an int >= 1.
    noise_multiplier, clip
        σ > 0 and S > 0 of :class:`~islands.aggregation.protect.ClientDP`.
    noise
        ``"local"`` or ``"distributed"`` (needs a hiding ``base``).
    base
        ``"mean"``, ``"secagg"``, ``"secaggplus"`` or ``"additive"``.
    threshold
        Secure aggregation's threshold (fraction of the round's clients), or None for its
        default.
    real_clients
        Clients besides the canaries, an int >= 1.
    canary_norm
        M, each included canary's update norm before the clip (default 4S).
    delta, accountant
        The accountant's δ and method (``"rdp"`` or ``"pld"``).
    confidence
        1 − β, a float in (0, 1).
    views
        Among ``"aggregate"``, ``"final"``, ``"uploads"`` (default: the first two, and
        ``"uploads"`` where the server sees single updates).
    aggregator
        The stack audited, in place of the one the settings build (its own σ, S and
        accountant are then the ones audited; tests pass faulty copies).
    timeout
        Seconds any party waits for one message.

    Returns
    -------
    DPAudit
        ``mechanism="client-dp"``; views as asked.

    Raises
    ------
    ValidationError
        For a setting out of range (named), or ``"uploads"`` over an aggregator that hides
        single updates.
    """
    t0 = time.perf_counter()
    owner = "audit_client_dp"
    m = check_int(canaries, "canaries", owner, low=2)
    rounds = check_int(rounds, "rounds", owner, low=1)
    real = check_int(real_clients, "real_clients", owner, low=1)
    conf = check_confidence(confidence, owner)
    if base not in ("mean", "secagg", "secaggplus", "additive"):
        raise invalid_parameter("base", owner, "one of 'mean', 'secagg', 'secaggplus', "
                                "'additive'", base)
    if aggregator is None:
        options: dict[str, dict[str, Any]] = {"dp": {
            "clip": clip, "noise_multiplier": noise_multiplier, "noise": noise,
            "delta": delta, "accountant": accountant}}
        protect = ["dp"] if base == "mean" else ["dp", base]
        if threshold is not None:
            if base not in ("secagg", "secaggplus"):
                raise invalid_parameter("threshold", owner, "None unless base is 'secagg' or "
                                        "'secaggplus'", threshold)
            options[base] = {"threshold": threshold}
        aggregator = build_aggregator(protect, options)
    if not isinstance(aggregator, ClientDP):
        raise invalid_parameter("aggregator", owner, "a ClientDP stack", describe(aggregator))
    sigma, s, dlt = aggregator.noise_multiplier, aggregator.clip, aggregator.delta
    norm = 4.0 * s if canary_norm is None else check_float(canary_norm, "canary_norm", owner,
                                                           low=0.0, low_inclusive=False)
    try:
        check_compatible(aggregator)
        shows_uploads = aggregator.noise == "local"
    except ValidationError:
        shows_uploads = False
    chosen = _check_views(views, CLIENT_VIEWS, ("aggregate", "final", "uploads")
                          if shows_uploads else ("aggregate", "final"), owner)
    if "uploads" in chosen and not shows_uploads:
        raise invalid_parameter("views", owner, "no 'uploads' here: the server sees single "
                                "updates only with local noise over the plain mean", chosen)

    dim = m + _SPARE
    dirac = dirac_canaries(dim, m)
    included = draw_membership(m)
    names = [f"canary-{i + 1}" for i in range(m)]
    reals = [f"client-{k + 1}" for k in range(real)]
    rng = np.random.default_rng(0)  # the real clients' updates: data, not a secret
    learners: dict[str, Any] = {}
    for k, name in enumerate(reals):
        v = rng.normal(size=dim)
        learners[name] = _FixedUpdate(100 + k, (2.0 * s * v / np.linalg.norm(v)).astype(
            np.float32))
    for i, name in enumerate(names):
        learners[name] = CanaryClient(_NoRows(100), coordinate=int(dirac.coordinates[i]),
                                      sign=float(dirac.signs[i]), norm=norm,
                                      included=bool(included[i]))
    order = reals + names
    strategy = FedAvg(local_steps=1, batch_size=None, aggregator=aggregator, min_clients=1)
    initial = np.zeros(dim, dtype=np.float32)
    models = _ModelObserver(initial.astype(np.float64))
    opener = aggregator.client_half()  # opens each released model as the first client does

    def on_round(record: RoundRecord, payload: Any) -> None:
        models(record, opener.open(payload))

    uploads = UploadObserver(dirac, names) if "uploads" in chosen else None
    roles: dict[str, Any] = {"server": partial(
        server, clients=order, strategy=strategy, initial=initial, epochs=rounds,
        concurrency=None, client_timeout=timeout, on_round=on_round, send_final=False,
        contribution=uploads)}
    for name in order:
        roles[name] = partial(client, server="server", learner=learners[name],
                              aggregator=aggregator, task_timeout=timeout,
                              half=opener if name == order[0] else None)
    run = run_local(roles, timeout=timeout, blas_threads=None)
    result = run.results["server"]
    if result.aggregations != rounds:
        raise ValidationError(f"{owner}: the audited run aggregated {result.aggregations} of "
                              f"{rounds} rounds ({result.stopped or 'clients left out'}); "
                              "its releases cannot be scored")
    spent, against = result.privacy, result.privacy_against_server
    contribution = min(norm, s)
    curve = CurveClaim(sigma * s / contribution, rounds)
    out: dict[str, OneRunAudit] = {}
    which: dict[str, str] = {}
    if "aggregate" in chosen:
        releases = models.releases(scale=True)
        scores = white_box_scores(releases, dirac, clip=s, sampling_rate=1.0,
                                  canary_norm=norm)
        out["aggregate"] = _audit(scores, included, curve=curve, claim=spent[0], delta=dlt,
                                  confidence=conf)
        which["aggregate"] = "spent"
    if "final" in chosen:
        total = models.models[-1] - models.models[0]
        scores = total[dirac.coordinates] * dirac.signs
        out["final"] = _audit(scores, included, curve=curve, claim=spent[0], delta=dlt,
                              confidence=conf)
        which["final"] = "spent"
    if uploads is not None:
        scores = gaussian_llr_scores(np.stack(uploads.values),
                                     np.maximum(np.stack(uploads.noise_sd), 1e-12 * s),
                                     contribution=contribution)
        out["uploads"] = _audit(scores, included, curve=curve, claim=against[0], delta=dlt,
                                confidence=conf)
        which["uploads"] = "spent_against_server"
    settings = {"canaries": m, "rounds": rounds, "noise_multiplier": sigma, "clip": s,
                "noise": aggregator.noise, "aggregator": aggregator.name,
                "real_clients": real, "canary_norm": norm, "dimension": dim,
                "delta": dlt, "accountant": aggregator.accountant, "confidence": conf,
                "canary_design": "dirac-zero-out", "epsilon": spent[0],
                "epsilon_against_server": against[0]}
    return DPAudit("client-dp", out, settings, which, time.perf_counter() - t0)


# --------------------------------------------------------------------------- DP-SGD

DPSGD_VIEWS = ("steps", "final")
"""The views of a DP-SGD audit: every step's update (white-box), the final model."""

_AMPLITUDE = 100.0  # a canary row's value on its own feature column


def _dpsgd_data(m: int, real: int, features: int, clip: float, included: NDArray[np.bool_]
                ) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """Real rows on the first ``features`` columns, then one row per included canary.

    Canary i's row is α·e_{features + i} (α = 100) with target −10³·(1 + C): its squared
    error's gradient 2(z − y)·[α e_j; 1] has norm ≈ 2·10⁵·(1 + C) ≫ C, so the clip makes
    it C·[α e_j; 1]/√(α² + 1) whatever the model: a constant contribution
    C·α/√(α² + 1) to coordinate j of the clipped sum, which no other row touches.
    """
    dim = features + m + _SPARE
    rng = np.random.default_rng(0)  # the real rows: data, not a secret
    X_real = np.zeros((real, dim), np.float32)
    X_real[:, :features] = rng.normal(size=(real, features))
    beta = rng.normal(size=features)
    y_real = X_real[:, :features] @ beta + 0.1 * rng.normal(size=real)
    rows = np.flatnonzero(included)
    X_can = np.zeros((rows.size, dim), np.float32)
    X_can[np.arange(rows.size), features + rows] = _AMPLITUDE
    y_can = np.full(rows.size, -1e3 * (1.0 + clip))
    X = np.concatenate([X_real, X_can])
    y = np.concatenate([y_real, y_can]).astype(np.float32)
    return X, y


def audit_dpsgd(*, canaries: int = 1000, steps: int = 200, noise_multiplier: float = 1.0,
                clip: float = 1.0, sampling_rate: float = 0.05, real_rows: int = 256,
                features: int = 8, delta: float = 1e-5, accountant: str = "rdp",
                confidence: float = 0.95, views: Sequence[str] | None = None,
                train: Callable[..., Any] | None = None) -> DPAudit:
    """Audit DP-SGD once, white-box, on islands' real :class:`PrivateTrainer` with m canary rows.

    A linear regression (``ModelSpec("linear", (d,), 1)``) over ``features`` real columns,
    m canary columns and 1024 columns that stay zero. Each canary is a row of its own
    column (:func:`_dpsgd_data`: the real Opacus clip makes its gradient a constant
    ≈ C·e_j), included with probability ½ (CSPRNG); the client's rows are the real ones
    plus the included canaries (n), the batch size b = round(q·n), and the trainer runs
    T single steps (momentum 0), each observed: x_t = (θ_{t−1} − θ_t)·b/lr is the
    step's noisy clipped sum, in which canary j contributes to coordinate j only if
    sampled. The white-box score (``"steps"``) is the log-likelihood ratio of the claimed
    Poisson-subsampled Gaussian mechanism (rate q, each step's noise read from the zero
    columns, :func:`~islands.privacy.audit.white_box_scores`); the black-box score
    (``"final"``) is (θ_0 − θ_T)_j. Both are compared with the client's own DP-SGD
    account (:class:`~islands.aggregation.protect.SampleAccount` for n and b), and
    the curve bound against the whole curve of T Poisson-subsampled Gaussian steps at the
    run's q = b/n (:func:`~islands.privacy.audit.curve_lower_bound`; Gaussian for q = 1).

    The plans are fixed from the nominal setting (n = real rows + m/2), never from the
    drawn membership. The learning rate is 0.05·b/α², small enough that even an unclipped
    canary gradient (a fault) does not overshoot; it cancels in x_t.

    Parameters
    ----------
    canaries
        m, an int >= 2.
    steps
        T, an int >= 1.
    noise_multiplier, clip
        σ > 0 and C > 0 of :class:`~islands.aggregation.protect.SampleDP`.
    sampling_rate
        The nominal q in (0, 1]; the run's is b/n.
    real_rows, features
        The real rows (an int >= 1) and their feature columns (an int >= 1).
    delta, accountant
        The accountant's δ and method.
    confidence
        1 − β, a float in (0, 1).
    views
        Among ``"steps"`` and ``"final"`` (default both).
    train
        The step audited, called as ``train(private_trainer, params, start=, steps=1,
        batch_size=, lr=)``; default :meth:`PrivateTrainer.train` (tests pass faulty copies).

    Returns
    -------
    DPAudit
        ``mechanism="dp-sgd"``.

    Raises
    ------
    ValidationError
        For a setting out of range, named.
    """
    from islands.hfl.torch.dpsgd import PrivateTrainer  # torch
    from islands.hfl.torch.models import ModelSpec
    from islands.hfl.torch.training import Position, Trainer

    t0 = time.perf_counter()
    owner = "audit_dpsgd"
    m = check_int(canaries, "canaries", owner, low=2)
    steps = check_int(steps, "steps", owner, low=1)
    real = check_int(real_rows, "real_rows", owner, low=1)
    features = check_int(features, "features", owner, low=1)
    q = check_float(sampling_rate, "sampling_rate", owner, low=0.0, low_inclusive=False,
                    high=1.0)
    conf = check_confidence(confidence, owner)
    chosen = _check_views(views, DPSGD_VIEWS, DPSGD_VIEWS, owner)
    dp = SampleDP(clip=clip, noise_multiplier=noise_multiplier, delta=delta,
                  accountant=accountant)
    step = train if train is not None else PrivateTrainer.train

    # the plans, from public parameters only: n = real + m/2 expected rows
    n_nominal = real + m // 2
    b_nominal = max(1, min(n_nominal, round(q * n_nominal)))
    planned = dp.new_accountant(b_nominal, n_nominal)
    planned.step(steps)
    contribution = dp.clip * _AMPLITUDE / math.sqrt(_AMPLITUDE**2 + 1.0)
    curve = CurveClaim(dp.noise_multiplier * dp.clip / contribution, steps,
                       planned.sampling_rate)
    mu = curve.mu if q >= 1.0 else gaussian_mu(planned.epsilon(), dp.delta)
    plans = _plans(mu, m, dp.delta, conf, q)

    included = draw_membership(m)
    X, y = _dpsgd_data(m, real, features, dp.clip, included)
    n, dim = X.shape
    b = n if q >= 1.0 else max(1, min(n, round(q * n)))
    rate = dp.sampling_rate(b, n)
    account = SampleAccount(dp, n)
    account.check(b, steps)
    spec = ModelSpec("linear", (dim,), 1)
    private = PrivateTrainer(Trainer(spec, X, y, task="regression"), dp)
    lr = 0.05 * b / _AMPLITUDE**2
    params = np.zeros(spec.n_params(), np.float32)
    first = params.copy()
    view = slice(features, dim)  # the canary columns, then the zero ones
    releases = np.empty((steps, dim - features))
    for t in range(steps):
        out = step(private, params, start=Position(0, 0), steps=1, batch_size=b, lr=lr)
        new = np.asarray(out.params, np.float32)
        releases[t] = (params[view].astype(np.float64) - new[view]) * (b / lr)
        params = new
    account.step(steps)
    claim = account.spent()[0]
    dirac = DiracCanaries(dim - features, np.arange(m, dtype=np.int64), np.ones(m))
    curve = dataclasses.replace(curve, sampling_rate=rate)  # the run's b/n, not the plan's
    results: dict[str, OneRunAudit] = {}
    if "steps" in chosen:
        scores = white_box_scores(releases, dirac, clip=dp.clip, sampling_rate=rate,
                                  canary_norm=contribution)
        results["steps"] = audit_scores(scores, included, delta=dp.delta, plans=plans,
                                        confidence=conf, claimed_epsilon=claim, curve=curve)
    if "final" in chosen:
        scores = (first[view][:m].astype(np.float64) - params[view][:m]) * (b / lr)
        results["final"] = audit_scores(scores, included, delta=dp.delta, plans=plans,
                                        confidence=conf, claimed_epsilon=claim, curve=curve)
    settings = {"canaries": m, "steps": steps, "noise_multiplier": dp.noise_multiplier,
                "clip": dp.clip, "sampling_rate": rate, "nominal_sampling_rate": q,
                "batch_size": b, "rows": n, "real_rows": real, "features": features,
                "dimension": spec.n_params(), "delta": dp.delta, "accountant": dp.accountant,
                "confidence": conf, "canary_design": "feature-column rows", "epsilon": claim}
    which = {k: "canary client's DP-SGD account" for k in results}
    return DPAudit("dp-sgd", results, settings, which, time.perf_counter() - t0)


# --------------------------------------------------------------------------- jobs

JOB_VIEWS = ("aggregate", "final")
"""The views of a job audit: every round's released model (white-box), the final one."""


def _batch_rule_room(strategy: Any, sizes: Sequence[int], canary_rows: int) -> int:
    """How many canary clients of ``canary_rows`` samples APFL's batch rule leaves room for.

    With ``mbs`` every client's batch is int(b·n_k/N) (:func:`~islands.hfl.maths.
    apfl_batch_sizes`); each canary adds ``canary_rows`` to N, and the smallest client's
    batch must stay at least 1. Without the rule: no limit.
    """
    if not getattr(strategy, "mbs", False):
        return 1 << 30
    batch = int(strategy.batch_size)
    return (batch * min(sizes) - sum(sizes)) // max(canary_rows, 1)


def _job_canaries(job: Job) -> int:
    hiding = {"secagg", "secaggplus", "additive", "ckks", "paillier"}
    return 128 if hiding & set(job.protect) else 512


def audit_job(job: Job, canaries: int | None = None, views: Sequence[str] | None = None,
              confidence: float = 0.95, *, canary_norm: float | None = None) -> DPAudit:
    """Audit a client-level DP job once: add m canary clients, run it, score every round.

    The job's data are prepared as ``islands run`` prepares them
    (:func:`~islands.hfl.job.prepare`) and m :class:`CanaryClient` are added, each
    holding a copy of the rows of the client with the median count (so APFL's batch rule
    and the steps per epoch see plausible counts), owning one coordinate of the model
    (CSPRNG) and uploading the model plus M·u_i (M = 4S) if its secret bit says so.
    :class:`~islands.hfl.estimator.FederatedModel` then runs exactly as the job runs it
    (same plan, strategy, protections, seed; no checkpoints, trackers or contribution),
    its ``round_observer`` keeping every round's global model. Views: ``"aggregate"``
    (white-box: each round's model difference times the round's survivors, scored as
    :func:`audit_client_dp` does; the other clients' training counts as noise) and
    ``"final"`` (black-box: ⟨w_T − w_0, u_i⟩), both compared with the audited run's own
    ``privacy_`` (the run *with* canaries: its cohort, t and rounds). The plans are fixed
    before the run from public settings: (a)–(c) of
    :func:`~islands.privacy.audit.default_plans` for μ = √epochs/σ, plus two-sided
    guesses on 1, 5 and 20 % of the canaries (G = 6).

    Parameters
    ----------
    job
        A parsed job (:func:`~islands.hfl.job.load_job`) whose ``protect`` holds ``"dp"``.
    canaries
        m, an int >= 2 (default 128 when a protection hides single updates, else 512),
        at most the model's length minus 64.
    views
        Among ``"aggregate"`` and ``"final"`` (default both).
    confidence
        1 − β, a float in (0, 1).
    canary_norm
        M (default 4S).

    Returns
    -------
    DPAudit
        ``mechanism="job"``; ``settings`` holds the job's name, the rounds, the accountant's
        ε of the audited run, its test accuracy and wall time (with canaries).

    Raises
    ------
    ValidationError
        If the job has no client-level DP (``"dp-sgd"`` jobs: use
        :func:`audit_dpsgd_job`), or a setting is out of range.
    """
    t0 = time.perf_counter()
    owner = "audit_job"
    if not isinstance(job, Job):
        raise invalid_parameter("job", owner, "a Job (load_job)", describe(job))
    if "dp" not in job.protect:
        raise invalid_parameter("job", owner, "a job whose protect holds 'dp' (client-level "
                                "DP; a 'dp-sgd' job is audited by audit_dpsgd_job)",
                                job.protect)
    conf = check_confidence(confidence, owner)
    chosen = _check_views(views, JOB_VIEWS, JOB_VIEWS, owner)
    prep = prepare(job)
    plan = prep.plan
    strategy = plan.strategy
    dp = strategy.aggregator
    if not isinstance(dp, ClientDP):
        raise invalid_parameter("job", owner, "a job whose aggregator stack is ClientDP",
                                describe(dp))
    dim = int(plan.model.n_params())
    sizes = [len(y) for _, y in prep.parts]
    median = prep.parts[int(np.argsort(sizes, kind="stable")[len(sizes) // 2])]
    room = _batch_rule_room(strategy, sizes, len(median[1]))
    if canaries is None:
        m = min(_job_canaries(job), room)
        if m < 2:
            raise ValidationError(
                f"{owner}: APFL's batch rule (mbs) gives client {int(np.argmin(sizes)) + 1} "
                f"a batch of 0 with {max(room, 0) + 2} or more extra clients of "
                f"{len(median[1])} samples, so no canary client fits; set the strategy's "
                "mbs to false or raise its batch_size to audit this job")
    else:
        m = check_int(canaries, "canaries", owner, low=2, high=max(2, min(dim - 64, room)))
    norm = 4.0 * dp.clip if canary_norm is None else check_float(
        canary_norm, "canary_norm", owner, low=0.0, low_inclusive=False)
    rate = strategy.secret_sampling_rate or 1.0
    curve = CurveClaim(dp.noise_multiplier * dp.clip / min(norm, dp.clip), job.epochs, rate)
    plans = (*_plans(curve.mu, m, dp.delta, conf, rate), *bonferroni_plans(m))

    dirac = dirac_canaries(dim, m)
    included = draw_membership(m)
    names = [f"client-{k + 1}" for k in range(len(prep.parts))]
    canary_names = [f"canary-{i + 1}" for i in range(m)]

    def wrap(i: int) -> Callable[[Any], CanaryClient]:
        return lambda learner: CanaryClient(learner, coordinate=int(dirac.coordinates[i]),
                                            sign=float(dirac.signs[i]), norm=norm,
                                            included=bool(included[i]))

    behaviour = {name: wrap(i) for i, name in enumerate(canary_names)}
    observer = _ModelObserver(plan.model_part(plan.initial()).astype(np.float64))
    fl = FederatedModel(plan.model, strategy, epochs=job.epochs, task=plan.task,  # type: ignore[arg-type]
                        eval_fraction=job.eval_fraction, random_state=plan.seed,
                        concurrency=job.concurrency, timeout=job.timeout,
                        sample_dp=plan.sample_dp, backend=job.backend,  # type: ignore[arg-type]
                        ray_address=job.ray_address,
                        batch_clients=job.batch_clients,  # type: ignore[arg-type]
                        loss=plan.loss, extra_metrics=prep.metrics, round_observer=observer)
    fl.fit([*prep.parts, *([median] * m)], test=prep.test, names=names + canary_names,
           behaviour=behaviour)
    if fl.privacy_ is None or not observer.survivors:
        raise ValidationError(f"{owner}: the audited run released no model "
                              f"({fl.stopped_ or 'no round'})")
    claim = float(fl.privacy_[0])
    out: dict[str, OneRunAudit] = {}
    if "aggregate" in chosen:
        scores = white_box_scores(observer.releases(scale=True), dirac, clip=dp.clip,
                                  sampling_rate=rate, canary_norm=norm)
        out["aggregate"] = audit_scores(scores, included, delta=dp.delta, plans=plans,
                                        confidence=conf, claimed_epsilon=claim, curve=curve)
    if "final" in chosen:
        total = observer.models[-1] - observer.models[0]
        out["final"] = audit_scores(total[dirac.coordinates] * dirac.signs, included,
                                    delta=dp.delta, plans=plans, confidence=conf,
                                    claimed_epsilon=claim, curve=curve)
    X_test, y_test = prep.test
    metrics = fl.metrics(X_test, y_test)
    score_key = "accuracy" if "accuracy" in metrics else "r2"
    settings = {"job": job.name, "canaries": m, "rounds": len(fl.rounds_),
                "aggregations": fl.aggregations_, "noise_multiplier": dp.noise_multiplier,
                "clip": dp.clip, "noise": dp.noise, "aggregator": dp.name,
                "canary_norm": norm, "dimension": dim, "delta": dp.delta,
                "accountant": dp.accountant, "confidence": conf,
                "canary_design": "dirac-zero-out", "epsilon": claim,
                "epsilon_against_server": (None if fl.privacy_against_server_ is None
                                           else float(fl.privacy_against_server_[0])),
                "sampling_rate": rate, "plans": len(plans),
                f"test_{score_key}_with_canaries": float(metrics[score_key]),
                "federated_seconds": fl.wall_time_, "bytes": fl.transcript_.total_bytes}
    which = {k: "spent" for k in out}
    return DPAudit("job", out, settings, which, time.perf_counter() - t0)


# --------------------------------------------------------------------------- DP-SGD jobs

JOB_DPSGD_VIEWS = ("aggregate", "final")
"""The views of a DP-SGD job audit: every round's released model (white-box), the final one."""


def _job_dpsgd_canaries(rows: int) -> int:
    """Return the default m of a DP-SGD job: 256, at most the holder's training rows."""
    return max(2, min(256, rows))


def _input_canaries(X: NDArray[Any], y: NDArray[Any], m: int, task: str, n_outputs: int
                    ) -> tuple[NDArray[Any], NDArray[Any]]:
    """Draw m canary rows in the input space of ``X``: sparse random patterns, random labels.

    Each canary is the data's smallest value everywhere but on k = max(1, d/16) features
    drawn at random (of d), where it takes the data's largest value (e.g. 49 white
    pixels on black in a 28 × 28 image); its label is uniform over the classes
    (mislabelled canaries, Steinke et al. §6) or, for regression, its target uniform on
    [min y, max y]. Patterns, labels: from the CSPRNG. Sparse patterns rather than
    uniform noise: two canaries' supports barely overlap, so their gradients are nearly
    orthogonal (a first layer's gradient is the row times the back-propagated error)
    and one canary's inclusion does not raise the others' scores (uniform-noise rows are
    all alike to the model: their gradients align and no canary stands out).
    """
    lo, hi = float(np.min(X)), float(np.max(X))
    d = int(np.prod(X.shape[1:]))
    k = max(1, d // 16)
    keys = csprng_uniform((m, d))
    on = np.argsort(keys, axis=1)[:, :k]  # k distinct features per canary, uniformly
    values = np.full((m, d), lo)
    np.put_along_axis(values, on, hi, axis=1)
    X_can = values.reshape((m, *X.shape[1:])).astype(X.dtype)
    if task == "classification":
        y_can = np.minimum(np.floor(csprng_uniform(m) * n_outputs), n_outputs - 1).astype(
            y.dtype)
    else:
        y_lo, y_hi = float(np.min(y)), float(np.max(y))
        y_can = (y_lo + (y_hi - y_lo) * csprng_uniform(m)).astype(y.dtype)
    return X_can, y_can


def _with_rows(X: NDArray[Any], y: NDArray[Any], X_add: NDArray[Any], y_add: NDArray[Any],
               fraction: float, seed: int) -> tuple[NDArray[Any], NDArray[Any]]:
    """``X, y`` with the rows ``X_add, y_add`` placed where the client's training rows are.

    A client keeps ``fraction`` of its rows for local evaluation
    (:func:`~islands.hfl.estimator.split_local_eval`, by its count and seed); the added
    rows go to positions it trains on, the real rows fill the others in order.
    """
    n = len(y) + len(y_add)
    train, _ = split_local_eval(n, fraction, seed)
    if len(train) < len(y_add):
        raise ValidationError(f"the canary holder trains on {len(train)} of its {n} rows, "
                              f"fewer than the {len(y_add)} canary rows; lower eval_fraction")
    at = np.zeros(n, dtype=bool)
    at[train[len(train) - len(y_add):]] = True
    X_out = np.empty((n, *X.shape[1:]), dtype=X.dtype)
    y_out = np.empty(n, dtype=y.dtype)
    X_out[at], y_out[at] = X_add, y_add
    X_out[~at], y_out[~at] = X, y
    return X_out, y_out


class _Holder:
    """Keeps the canary holder's learner (its own DP-SGD account); ``train`` swaps its step."""

    def __init__(self, train: Callable[..., Any] | None) -> None:
        self.train = train
        self.learner: Any = None

    def __call__(self, learner: Any) -> Any:
        self.learner = learner
        if self.train is not None:
            from islands.hfl.torch.dpsgd import PrivateTrainer  # torch
            from islands.hfl.torch.learner import PooledLearner, TorchLearner

            inner = learner.inner if isinstance(learner, PooledLearner) else learner
            private = getattr(inner, "_private", None)
            if not isinstance(inner, TorchLearner) or not isinstance(private, PrivateTrainer):
                raise invalid_parameter("train", "audit_dpsgd_job", "None unless the job "
                                        "runs DP-SGD in this process (backend 'local')",
                                        describe(inner))
            inner._private = _Step(private, self.train)
        return learner

    def spent(self) -> tuple[float, float]:
        spent = getattr(self.learner, "spent", None)
        out = None if spent is None else spent()
        if out is None:
            raise ValidationError("audit_dpsgd_job: the canary holder kept no DP-SGD account")
        return float(out[0]), float(out[1])


class _Step:
    """A :class:`PrivateTrainer` whose ``train`` is ``step(private, params, **kw)``."""

    def __init__(self, private: Any, step: Callable[..., Any]) -> None:
        self.private, self.step = private, step

    def train(self, params: Any, **kw: Any) -> Any:
        return self.step(self.private, params, **kw)


def audit_dpsgd_job(job: Job, canaries: int | None = None, views: Sequence[str] | None = None,
                    confidence: float = 0.95, *, train: Callable[..., Any] | None = None
                    ) -> DPAudit:
    """Audit a DP-SGD job once inside its own model: m input-space canary rows in one client.

    The job's data are prepared as ``islands run`` prepares them
    (:func:`~islands.hfl.job.prepare`); the client with the median row count (the
    *holder*) gets m canary rows in the input space of its features
    (:func:`_input_canaries`: the data's smallest value but on d/16 random features set
    to its largest, a label drawn uniformly, so mostly mislabelled; Steinke, Nasr and
    Jagielski [1]_ §6), each included with probability ½
    (:func:`~islands.privacy.audit.draw_membership`; values, labels and bits from the
    CSPRNG). :class:`~islands.hfl.estimator.FederatedModel`
    then runs as the job runs (same plan, strategy, protections, seed; no checkpoints,
    trackers or contribution), its ``round_observer`` keeping every released model
    θ₀, …, θ_R. Views:

    * ``"aggregate"`` (white-box, what the server sees): Σ_r ⟨θ_{r−1} − θ_r, ḡᵢ(θ_{r−1})⟩ /
      ‖θ_{r−1} − θ_r‖, the round's model change along canary i's gradient at the round's
      start, clipped to C as DP-SGD clips it (:class:`~islands.hfl.torch.per_example.
      PerExample`);
    * ``"final"`` (black-box): the loss drop ℓᵢ(θ₀) − ℓᵢ(θ_R).

    Both are compared with the holder's own DP-SGD account (its n counts the included
    canaries; the account its learner keeps, :class:`~islands.aggregation.protect.
    SampleAccount`). The claim is Poisson-subsampled (q < 1 in general): no Gaussian-curve
    bound. The plans are fixed before the run from public settings only:
    :func:`~islands.privacy.audit.default_plans` for the nominal μ (the ε of the holder's
    account for n = its rows + m/2 and the job's steps) and :func:`~islands.privacy.audit.
    bonferroni_plans` (1, 5, 20 % of the canaries), G = 6.

    Parameters
    ----------
    job
        A parsed job (:func:`~islands.hfl.job.load_job`) whose ``protect`` holds ``"dp-sgd"``.
    canaries
        m, an int in [2, the holder's training rows] (default 256, at most that).
    views
        Among ``"aggregate"`` and ``"final"`` (default both).
    confidence
        1 − β, a float in (0, 1).
    train
        The holder's DP-SGD step, called as ``train(private_trainer, params, start=,
        steps=, batch_size=, lr=, momentum=, weight_decay=, prox_mu=, momentum_buffer=,
        correction=)``; default :meth:`PrivateTrainer.train` (tests pass faulty copies;
        the local backend only).

    Returns
    -------
    DPAudit
        ``mechanism="dp-sgd-job"``; ``settings`` holds the holder, its rows, σ, C, q, the
        steps, the claimed ε, the test accuracy with canaries and the wall time.

    Raises
    ------
    ValidationError
        If the job has no DP-SGD, or a setting is out of range (named, with its limit).

    References
    ----------
    .. [1] T. Steinke, M. Nasr, M. Jagielski. "Privacy Auditing with One (1) Training
       Run." NeurIPS 2023, arXiv:2305.08846.
    """
    from islands.hfl.torch.per_example import PerExample  # torch

    t0 = time.perf_counter()
    owner = "audit_dpsgd_job"
    if not isinstance(job, Job):
        raise invalid_parameter("job", owner, "a Job (load_job)", describe(job))
    if "dp-sgd" not in job.protect:
        raise invalid_parameter("job", owner, "a job whose protect holds 'dp-sgd'",
                                job.protect)
    conf = check_confidence(confidence, owner)
    chosen = _check_views(views, JOB_DPSGD_VIEWS, JOB_DPSGD_VIEWS, owner)
    prep = prepare(job)
    plan = prep.plan
    dp = plan.sample_dp
    if dp is None:
        raise invalid_parameter("job", owner, "a job with DP-SGD settings", job.protect)
    strategy = plan.strategy
    seed = resolve_seed(plan.seed, owner)
    sizes = [len(y) for _, y in prep.parts]
    holder = int(np.argsort(sizes, kind="stable")[len(sizes) // 2])
    X_real, y_real = prep.parts[holder]
    real_train = len(split_local_eval(len(y_real), job.eval_fraction,
                                      client_seed(seed, holder))[0])
    m = (_job_dpsgd_canaries(real_train) if canaries is None
         else check_int(canaries, "canaries", owner, low=2, high=max(2, real_train)))

    # the plans, from public settings only: the holder's nominal n = its rows + m/2
    names = [f"client-{k + 1}" for k in range(len(prep.parts))]
    counts = {name: len(split_local_eval(s, job.eval_fraction, client_seed(seed, k))[0])
              for k, (name, s) in enumerate(zip(names, sizes, strict=True))}
    counts[names[holder]] += m // 2
    batches = copy.deepcopy(strategy).setup(counts)
    steps_nominal = job.epochs * min(counts[c] // batches[c] for c in counts)
    nominal = dp.new_accountant(int(batches[names[holder]]), counts[names[holder]])
    nominal.step(steps_nominal)
    mu = gaussian_mu(nominal.epsilon(), dp.delta)
    q_nominal = dp.sampling_rate(int(batches[names[holder]]), counts[names[holder]])
    plans = (*default_plans(mu, m, dp.delta, conf, sampling_rate=q_nominal),
             *bonferroni_plans(m))

    included = draw_membership(m)
    X_can, y_can = _input_canaries(X_real, y_real, m, plan.task, int(plan.model.n_outputs))
    parts = list(prep.parts)
    parts[holder] = _with_rows(X_real, y_real, X_can[included], y_can[included],
                               job.eval_fraction, client_seed(seed, holder))
    keeper = _Holder(train)
    observer = _ModelObserver(plan.model_part(plan.initial()).astype(np.float64))
    fl = FederatedModel(plan.model, strategy, epochs=job.epochs, task=plan.task,  # type: ignore[arg-type]
                        eval_fraction=job.eval_fraction, random_state=seed,
                        concurrency=job.concurrency, timeout=job.timeout, sample_dp=dp,
                        backend=job.backend,  # type: ignore[arg-type]
                        ray_address=job.ray_address,
                        batch_clients=job.batch_clients,  # type: ignore[arg-type]
                        loss=plan.loss, extra_metrics=prep.metrics, round_observer=observer)
    fl.fit(parts, test=prep.test, names=names, behaviour={names[holder]: keeper})
    if not observer.survivors:
        raise ValidationError(f"{owner}: the audited run released no model "
                              f"({fl.stopped_ or 'no round'})")
    claim, delta = keeper.spent()
    rows = keeper.learner.n_train
    batch = int(strategy.setup({**counts, names[holder]: rows})[names[holder]])
    per = PerExample(plan.model, X_can, y_can, task=plan.task, loss=fl.loss_, clip=dp.clip)
    out: dict[str, OneRunAudit] = {}
    if "aggregate" in chosen:
        scores = np.zeros(m)
        for before, after in itertools.pairwise(observer.models):
            scores += per.alignment(before, before - after)
        out["aggregate"] = audit_scores(scores, included, delta=delta, plans=plans,
                                        confidence=conf, claimed_epsilon=claim)
    if "final" in chosen:
        scores = per.losses(observer.models[0]) - per.losses(observer.models[-1])
        out["final"] = audit_scores(scores, included, delta=delta, plans=plans,
                                    confidence=conf, claimed_epsilon=claim)
    X_test, y_test = prep.test
    metrics = fl.metrics(X_test, y_test)
    score_key = "accuracy" if "accuracy" in metrics else "r2"
    settings = {"job": job.name, "canaries": m, "included": int(included.sum()),
                "holder": names[holder], "holder_rows": rows, "holder_real_rows": real_train,
                "batch_size": batch, "sampling_rate": dp.sampling_rate(batch, rows),
                "rounds": len(fl.rounds_), "steps": int(sum(r.steps for r in fl.rounds_)),
                "noise_multiplier": dp.noise_multiplier, "clip": dp.clip, "delta": delta,
                "accountant": dp.accountant, "confidence": conf,
                "canary_design": "input-space rows (sparse random patterns, random labels)",
                "epsilon": claim, "sample_epsilon_largest": (
                    None if fl.sample_privacy_ is None else float(fl.sample_privacy_[0])),
                "nominal_mu": mu, "plans": len(plans), "dimension": per.dim,
                f"test_{score_key}_with_canaries": float(metrics[score_key]),
                "federated_seconds": fl.wall_time_}
    which = {k: f"{names[holder]}'s own DP-SGD account (canary holder)" for k in out}
    return DPAudit("dp-sgd-job", out, settings, which, time.perf_counter() - t0)
