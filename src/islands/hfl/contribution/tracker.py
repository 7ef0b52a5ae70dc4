"""Per-client contribution of a horizontal-FL run, valued round by round as it trains.

:class:`Contribution` is the configuration a user gives
:class:`~islands.hfl.FederatedModel` (or a job's ``[contribution]`` section);
:class:`ContributionTracker` is what the server role runs with it: after each
aggregation it values the round's coalition game (:class:`~.game.RoundGame`) from the
uploads it just aggregated, then lets them go. Methods:

==========  ==============================================================================
``gtg``     GTG-Shapley (Liu et al. 2022): per round, Monte-Carlo Shapley values over
            orders of the round's survivors (guided first positions, within-round
            truncation, a confidence-width stopping rule); a client's score is the sum
            over rounds. Rounds whose gain |v(N) − v(∅)| is at most ``round_truncation``
            are skipped (every client 0).
``exact``   The same per-round game valued exactly (2^m coalitions for m survivors):
            the multi-round reconstruction (MR) of Song et al. 2019.
``or``      One-round reconstruction (OR, Song et al. 2019): the model of every
            coalition S of the whole federation is carried through all rounds,
            w_S ← w_S + Σ_{k∈S} c_k·(w_k − w) with the round's coefficients, and the
            exact Shapley values of v(S) = utility(w_S) are computed at the end (2ⁿ
            models kept: small federations only).
``loo``     Leave-one-out per round, v_r(N) − v_r(N∖{k}), summed over rounds.
``retrain`` Exact Shapley values of the retrained game (Ghorbani and Zou 2019's data
            Shapley with the federation's training as the algorithm): after the run,
            the estimator trains the federation again on each of the 2ⁿ − 1 other
            coalitions with the same settings and seed
            (:mod:`islands.hfl.contribution.retrain`) and scores each final model.
            The ground truth the others approximate; the default up to
            :data:`~islands.hfl.config.DEFAULT_RETRAIN_CLIENTS` clients.
==========  ==============================================================================

Which is the default, and why (``docs/contribution.md``, issue 27): on a matrix of
federations with ground truth (``benchmarks/bench_contribution_truth.py``: shuffled and
50%-noisy labels, twins, free-riders, size imbalance, non-IID classes) no per-round
method ranked the clients as retraining does (mean Kendall τ 0.54–0.64 at best), and
per-round accuracy paid clients whose labels carry no information up to 84% of the
reward. So ``methods=None`` resolves to ``("retrain",)`` where the estimator can retrain
(at most ``DEFAULT_RETRAIN_CLIENTS`` clients, no DP: every retrained model would be a
release the run's ε does not count), and to ``("gtg", "loo")`` on minus the validation
loss otherwise (per-round loss paid such clients at most 3.3–6.4%, by step size).

Every per-round method satisfies efficiency in sum: Σ_k φ_k = Σ_r (v_r(N) − v_r(∅)) =
utility(final) − utility(initial) (``gtg`` within its truncations, ``loo`` not at all:
leave-one-out is not efficient); ``or``'s Σ φ_k = utility(final) − utility(initial)
exactly.

Which protections allow it: the uploads must reach the server in the clear, so only the
plain mean, client-level DP over it with *local* noise, and DP-SGD. Under local noise the
scores are computed from uploads the server already holds, each carrying its client's
full noise σS: as a release they are covered by that per-upload Gaussian mechanism,
composed over the rounds the client took part in, without the amplification by sampling
the run's reported ε assumes (the report names each round's participants). Distributed
noise protects only the sum and is refused. Secure aggregation, additive sharing, CKKS
and Paillier exist to show the server the sum and nothing else, and a coalition's model
needs the sum over that coalition — for S = {k}, client k's own update. The chaos
permutation is accepted only over one of those (on its own it does not hide which
coordinate is which), and unpermuting is the clients' job, which would show them each
other's updates.
Under those, value clients by retraining (:mod:`islands.hfl.contribution.retrain`),
which uses only final models.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.aggregation.base import MeanAggregator
from islands.aggregation.protect import PAIRWISE_BASES, ChaosPermutation, ClientDP
from islands.errors import ValidationError, invalid_parameter
from islands.hfl.config import DEFAULT_RETRAIN_CLIENTS, METHODS, ContributionSettings
from islands.hfl.contribution.game import (
    RoundGame,
    Utility,
    member_coefficients,
)
from islands.hfl.contribution.maths import (
    combined_halfwidth,
    exact_shapley,
    hoeffding_halfwidth,
    leave_one_out,
    permutation_shapley,
    reward_shares,
)
from islands.validation import describe

__all__ = [
    "METHODS",
    "Contribution",
    "ContributionReport",
    "ContributionTracker",
    "IncompatibleAggregatorError",
    "check_compatible",
]

log = logging.getLogger(__name__)

Vector = NDArray[np.float32]
MAX_ROUND_EXACT = 14
"""``exact`` values 2^m coalitions per round: refused for federations above this size."""
MAX_OR_CLIENTS = 16
MAX_RETRAIN_CLIENTS = 10
"""``retrain`` trains 2ⁿ − 1 coalitions: refused above this size."""
PER_ROUND = ("gtg", "exact", "loo")
"""The methods the server values round by round from the uploads (``or`` carries its
coalition models through the rounds too; ``retrain`` needs no upload)."""


class IncompatibleAggregatorError(ValidationError):
    """The aggregator hides the per-client updates that reconstruction needs."""


_WHY = {
    "secagg": "secure aggregation shows the server only the sum of the masked updates",
    "secaggplus": "SecAgg+ shows the server only the sum of the masked updates",
    "additive": "additive sharing shows the server only the sum of the shares",
    "ckks": "under CKKS the server holds only ciphertexts and their encrypted sum",
    "paillier": "under Paillier the server holds only ciphertexts and their encrypted sum",
    "chaos": ("the chaos permutation runs only over a protection that hides the values "
              "(secure aggregation, additive sharing, CKKS, Paillier), and unpermuting "
              "coalition models would show the clients each other's updates"),
}


def check_compatible(aggregator: Any) -> None:
    """Raise :class:`IncompatibleAggregatorError` unless the server sees plain updates.

    The plain mean, and client-level DP around an aggregator that allows it, are
    compatible; see the module docstring for why the others are not.
    """
    agg = aggregator
    while isinstance(agg, ClientDP):
        if agg.noise != "local":
            raise IncompatibleAggregatorError(
                "contribution by update reconstruction needs each client's update at the "
                f"server, but client-level DP with noise={agg.noise!r} adds only a share "
                "of the noise to each update and protects only their sum: valuing single "
                "updates would release them under too little noise. Use noise='local'")
        agg = agg.inner
    if isinstance(agg, MeanAggregator):
        return
    name = "chaos" if isinstance(agg, ChaosPermutation) else str(getattr(agg, "name", agg))
    base = name.split("+")[-1]
    why = _WHY.get(name) or _WHY.get(base) or (
        f"the {name!r} aggregator is not known to show the server each client's update")
    instead = (f"Nor can retraining ('retrain'): {base!r} refuses a round of one client, "
               f"and Shapley values need every coalition's model. Run without "
               f"{name!r} to value the clients" if base in PAIRWISE_BASES else
               "Use methods=('retrain',) (it retrains on coalitions and needs only final "
               f"models) or run without {name!r}")
    raise IncompatibleAggregatorError(
        f"contribution by update reconstruction needs each client's update at the server, "
        f"but {why}; valuing a coalition of one client would reveal that client's update. "
        f"{instead}")


@dataclass(frozen=True, eq=False)
class Contribution:
    """How to value the clients of a horizontal-FL run.

    Parameters
    ----------
    validation : (X, y) or "clients"
        Validation rows the server holds (never trained on), or ``"clients"``: every
        client's own evaluation rows (simulations only; see
        :class:`~islands.hfl.contribution.game.ClientValidation`).
    methods : sequence of {"retrain", "gtg", "exact", "or", "loo"} or None
        Methods to compute (module docstring); the first gives the reward shares.
        None (default): ``("retrain",)`` for at most
        :data:`~islands.hfl.config.DEFAULT_RETRAIN_CLIENTS` clients, server validation
        rows and no differential privacy, else ``("gtg", "loo")`` (:meth:`resolve`).
    metric : {"accuracy", "loss"} or None
        The utility: accuracy, or minus the mean loss. None: accuracy when the shares
        come from ``retrain`` (the ground truth's utility), minus the loss when they
        come from a per-round method (per-round accuracy moves in steps and pays
        clients whose labels carry no information), minus the loss for a regression.
        With ``validation="clients"`` the clients' own score is used (accuracy, or R²
        for a regression).
    weighting : {"fixed", "renormalised"}, default="fixed"
        How a coalition's model is rebuilt (:mod:`~islands.hfl.contribution.game`):
        each client's share of the actual step (a client with a zero update is a null
        player), or FedAvg over the coalition alone (GTG-Shapley's and Song et al.'s
        choice, for reproducing them: it credits a free-rider for diluting harmful
        updates).
    tolerance : float, default=0.005
        ``gtg``: stop a round's sampling once every client's confidence half-width is
        at most this (utility units, per round).
    confidence : float, default=0.95
    min_permutations, max_permutations : int, default=10, 200
        ``gtg``: orders sampled per round, at least and at most.
    truncation : float, default=0.0
        ``gtg``: within-round truncation threshold (0: off; exact efficiency).
    round_truncation : float, default=0.0
        ``gtg``: skip rounds whose gain is at most this (0: value every round).
    seed : int or None
        Seeds the orders sampled (None: the federation's seed).
    """

    validation: Any
    methods: tuple[str, ...] | None = None
    metric: str | None = None
    weighting: str = "fixed"
    tolerance: float = 0.005
    confidence: float = 0.95
    min_permutations: int = 10
    max_permutations: int = 200
    truncation: float = 0.0
    round_truncation: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        owner = "Contribution"
        methods = self.methods
        if methods is None:
            pass
        elif isinstance(methods, str):
            methods = (methods,)
        elif isinstance(methods, list | tuple):
            methods = tuple(methods)
        object.__setattr__(self, "methods", methods)
        v = self.validation
        if not (v == "clients" if isinstance(v, str) else (
                isinstance(v, tuple | list) and len(v) == 2)):
            raise invalid_parameter("validation", owner, "an (X, y) pair or 'clients'",
                                    describe(v))
        # the one set of constraints, shared with the [contribution] section of files
        ContributionSettings.build(owner, **{
            f.name: getattr(self, f.name) for f in fields(self) if f.name != "validation"})
        if v == "clients" and methods is not None and "retrain" in methods:
            raise invalid_parameter("methods", owner, "no 'retrain' with validation="
                                    "'clients' (it scores the retrained models on the "
                                    "server's rows)", "'retrain'")

    @property
    def per_round(self) -> bool:
        """Whether a method values the rounds from the uploads (the server must see them)."""
        return self.methods is None or any(m != "retrain" for m in self.methods)

    def resolve(self, n: int, *, task: str = "classification",
                retrainable: bool = True) -> Contribution:
        """Return this configuration with ``methods`` and ``metric`` decided for a run.

        Parameters
        ----------
        n
            Clients in the federation.
        task
            ``"classification"`` or ``"regression"``.
        retrainable
            False where retraining would release more than the run accounts for
            (differential privacy): ``methods=None`` then resolves to per-round
            methods, and an explicit ``"retrain"`` is refused.
        """
        methods = self.methods
        if methods is None:
            methods = (("retrain",) if retrainable and n <= DEFAULT_RETRAIN_CLIENTS
                       and self.validation is not None and not isinstance(
                           self.validation, str) else ("gtg", "loo"))
        elif "retrain" in methods and not retrainable:
            raise invalid_parameter(
                "methods", "Contribution", "no 'retrain' under differential privacy (each "
                "of the 2^n - 1 retrained models is a release the run's epsilon does not "
                "count)", "'retrain'")
        metric = self.metric
        if metric is None:
            metric = ("accuracy" if task == "classification" and methods[0] == "retrain"
                      else "loss")
        return replace(self, methods=tuple(methods), metric=metric)

    def check_clients(self, n: int) -> None:
        """Refuse methods whose cost is exponential in the ``n`` clients when n is too large."""
        methods = self.methods or ()
        if "retrain" in methods and n > MAX_RETRAIN_CLIENTS:
            raise invalid_parameter("methods", "Contribution", f"no 'retrain' above "
                                    f"{MAX_RETRAIN_CLIENTS} clients (2^n - 1 trainings)",
                                    f"'retrain' with {n} clients")
        if "exact" in methods and n > MAX_ROUND_EXACT:
            raise invalid_parameter("methods", "Contribution", f"no 'exact' above "
                                    f"{MAX_ROUND_EXACT} clients (2^n coalitions a round)",
                                    f"'exact' with {n} clients")
        if "or" in methods and n > MAX_OR_CLIENTS:
            raise invalid_parameter("methods", "Contribution", f"no 'or' above "
                                    f"{MAX_OR_CLIENTS} clients (2^n models kept)",
                                    f"'or' with {n} clients")

    def settings(self) -> dict[str, Any]:
        """Return the configuration without the validation rows (for results files)."""
        # not asdict: it would deep-copy the validation rows only to drop them
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "validation"}
        out["methods"] = None if self.methods is None else list(self.methods)
        out["validation"] = ("clients" if isinstance(self.validation, str)
                             else f"server ({len(self.validation[1])} rows)")
        return out


@dataclass(frozen=True)
class ContributionReport:
    """Scores and reward shares of every client (:meth:`to_dict` for JSON).

    Attributes
    ----------
    clients
        Client names, in the federation's order.
    scores
        ``{method: [φ_k]}``: each client's contribution, in utility units.
    halfwidth
        ``{"gtg": [h_k]}``: the confidence half-width of each ``gtg`` score (the
        rounds' variances added, a Student-t quantile with Welch–Satterthwaite's
        degrees of freedom: :func:`~.maths.combined_halfwidth`).
    hoeffding
        ``gtg``'s distribution-free half-width for all clients at once (per round
        Hoeffding bounds at confidence split over the rounds, summed), or None.
    shares
        Reward shares from the first method (:func:`~.maths.reward_shares`).
    primary
        The method the shares come from.
    utility_initial, utility_final
        The utility of the initial and the final global model.
    gain
        Σ_r (v_r(N) − v_r(∅)): what efficient scores sum to.
    rounds
        Per round: ``round``, ``clients`` (indices of the survivors), ``gain`` and each
        per-round method's values (for plots of contribution over time).
    evaluations
        Utility evaluations made (coalition models scored).
    seconds
        Time spent valuing: on the server between rounds, ``retrain``'s trainings, plus
        the scoring of ``or``'s 2ⁿ models when the report is made (so it can exceed the
        run's wall time).
    permutations
        ``gtg``: orders sampled over all rounds; ``unconverged``: rounds that hit
        ``max_permutations``; ``skipped``: rounds skipped by ``round_truncation``.
    settings
        The :class:`Contribution` used (``methods`` and ``metric`` resolved).
    trainings
        ``retrain``: coalitions trained after the run (0 without it).
    """

    clients: list[str]
    scores: dict[str, list[float]]
    halfwidth: dict[str, list[float]]
    hoeffding: float | None
    shares: list[float]
    primary: str
    utility_initial: float
    utility_final: float
    gain: float
    rounds: list[dict[str, Any]]
    evaluations: int
    seconds: float
    permutations: int
    unconverged: int
    skipped: int
    settings: dict[str, Any] = field(default_factory=dict)
    trainings: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain values, for ``results.json``."""
        return asdict(self)

    def to_json(self) -> dict[str, Any]:
        """Return :meth:`to_dict` (how a typed result gives its JSON in islands)."""
        return self.to_dict()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "") -> ContributionReport:
        """Read back the plain values :meth:`to_dict` gave (a run's ``results.json``).

        The keys a report has always had are required; ``halfwidth``, ``hoeffding``,
        ``rounds``, ``permutations``, ``unconverged``, ``skipped`` and ``settings`` default
        to none measured. ``where`` (e.g. " in PATH") goes into the error message.

        Raises
        ------
        ValidationError
            If a required key is missing or the primary method has no scores.
        """
        missing = [k for k in _REPORT_KEYS if k not in data]
        scores = data.get("scores")
        if missing or not isinstance(scores, Mapping) or data["primary"] not in scores:
            raise ValidationError(f"the contribution results{where} are incomplete (missing "
                                  f"{missing or ['the primary method scores']})")
        return cls(
            clients=list(data["clients"]), scores={m: list(v) for m, v in scores.items()},
            halfwidth={m: list(v) for m, v in (data.get("halfwidth") or {}).items()},
            hoeffding=data.get("hoeffding"), shares=list(data["shares"]),
            primary=data["primary"], utility_initial=data["utility_initial"],
            utility_final=data["utility_final"], gain=data["gain"],
            rounds=list(data.get("rounds", [])), evaluations=data["evaluations"],
            seconds=data["seconds"], permutations=data.get("permutations", 0),
            unconverged=data.get("unconverged", 0), skipped=data.get("skipped", 0),
            settings=dict(data.get("settings", {})), trainings=data.get("trainings", 0))

    def __getitem__(self, key: str) -> Any:
        raise TypeError(f"a contribution report is a ContributionReport: read .{key} "
                        f"(or .to_dict()[{key!r}]) instead of [{key!r}]")


_REPORT_KEYS = ("clients", "scores", "shares", "primary", "utility_initial", "utility_final",
                "gain", "evaluations", "seconds")


class ContributionTracker:
    """Values every round of a run from its plain uploads (see the module docstring).

    Parameters
    ----------
    config
        The :class:`Contribution` settings.
    clients
        The federation's client names, in order.
    utility
        Scores a model vector.
    initial
        The initial global model.
    seed
        Seeds ``gtg``'s orders when ``config.seed`` is None.
    """

    def __init__(self, config: Contribution, clients: Sequence[str], utility: Utility,
                 initial: Vector, seed: int = 0) -> None:
        if not isinstance(config, Contribution):
            raise invalid_parameter("contribution", "ContributionTracker", "a Contribution",
                                    describe(config))
        n = len(clients)
        if config.methods is None:  # a tracker alone cannot retrain: the per-round default
            config = config.resolve(n, retrainable=False)
        self.config = config
        self.clients = list(clients)
        config.check_clients(n)
        self.initial = np.array(initial, dtype=np.float32)
        if "or" in self.methods:
            gib = (1 << n) * self.initial.size * 4 / 2**30
            if gib > 4:
                raise invalid_parameter("methods", "Contribution", "'or' only where 2^n "
                                        "models fit in 4 GiB", f"{gib:.1f} GiB for {n} "
                                        f"clients of {self.initial.size} parameters")
        self.utility = utility
        self.seed = int(config.seed if config.seed is not None else seed)
        self._index = {c: k for k, c in enumerate(self.clients)}
        self._totals = {m: np.zeros(n) for m in self.methods if m in PER_ROUND}
        self._var = np.zeros(n)  # Σ_r stderr² of gtg
        self._var_df = np.zeros(n)  # Σ_r stderr⁴/(T_r − 1): Welch–Satterthwaite's ν
        self._hoeffding: list[tuple[float, int, int]] = []
        self._rounds: list[dict[str, Any]] = []
        self._or: NDArray[np.float32] | None = None
        if "or" in self.methods:
            self._or = np.repeat(self.initial[None, :], 1 << n, axis=0)
        self.evaluations = 0
        self.seconds = 0.0
        self.permutations = 0
        self.unconverged = 0
        self.skipped = 0
        self._u0: float | None = None
        self._last_full: float | None = None

    @property
    def methods(self) -> tuple[str, ...]:
        """The methods valued (resolved: never None)."""
        assert self.config.methods is not None
        return self.config.methods

    def check_aggregator(self, aggregator: Any) -> None:
        """Refuse an aggregator that hides single updates (:func:`check_compatible`)."""
        check_compatible(aggregator)

    # ------------------------------------------------------------------ per round
    def observe(self, round: int, base: Vector, uploads: Mapping[str, Vector],
                weights: Mapping[str, float]) -> None:
        """Value one round from its survivors' uploads (``weights``: their p_k)."""
        t0 = time.perf_counter()
        names = [c for c in self.clients if c in uploads]
        unknown = sorted(set(uploads) - set(names))
        if unknown or not names:
            raise ValidationError(f"round {round}: uploads from {unknown or 'no client'}, "
                                  f"not clients of this federation")
        idx = [self._index[c] for c in names]
        cfg = self.config
        game = RoundGame(base, [uploads[c] for c in names], [weights[c] for c in names],
                         self.utility, cfg.weighting)
        m = game.players
        full = (1 << m) - 1
        empty_v, full_v = game(0), game(full)
        if self._u0 is None:
            self._u0 = empty_v
        self._last_full = full_v
        entry: dict[str, Any] = {"round": int(round), "clients": idx,
                                 "gain": full_v - empty_v}
        for method in self._totals:
            values: NDArray[np.float64]
            if method == "gtg":
                if cfg.round_truncation > 0 and abs(full_v - empty_v) <= cfg.round_truncation:
                    values = np.zeros(m)
                    self.skipped += 1
                else:
                    est = permutation_shapley(
                        game, m, rng=np.random.default_rng([self.seed, int(round)]),
                        tolerance=cfg.tolerance, confidence=cfg.confidence,
                        min_permutations=cfg.min_permutations,
                        max_permutations=cfg.max_permutations, truncation=cfg.truncation,
                        null=game.null_players())
                    values = est.values
                    self._var[idx] += est.stderr**2
                    self._var_df[idx] += est.stderr**4 / (est.permutations - 1)
                    self.permutations += est.permutations
                    self.unconverged += int(not est.converged)
                    self._hoeffding.append((est.value_range, est.permutations, m))
            elif method == "exact":
                values = exact_shapley(game, m)
            else:
                values = leave_one_out(game, m)
            self._totals[method][idx] += values
            entry[method] = [float(v) for v in values]
        if self._or is not None:
            self._carry_or(game, idx)
        self._rounds.append(entry)
        self.evaluations += game.evaluations
        self.seconds += time.perf_counter() - t0
        log.info("round %d valued: %d coalition models in %.2f s", round, game.evaluations,
                 time.perf_counter() - t0)

    def _carry_or(self, game: RoundGame, idx: list[int]) -> None:
        """w_S ← w_S + Σ_{k∈S∩round} c_k·(w_k − w) for every coalition S of the federation."""
        assert self._or is not None
        masks = np.arange(1 << len(self.clients))
        inside = np.stack([(masks >> g) & 1 for g in idx], axis=1).astype(np.float64)
        coef = member_coefficients(inside, game.weights, game.weighting)
        self._or += (coef.astype(np.float32) @ game.deltas).astype(np.float32)

    # ------------------------------------------------------------------ results
    def report(self, retrained: Any = None, final: Vector | None = None) -> ContributionReport:
        """Return the scores so far (a running job may call it between rounds).

        Parameters
        ----------
        retrained
            ``retrain``'s :class:`~islands.hfl.contribution.retrain.RetrainResult`
            (exact), once the estimator has retrained the coalitions.
        final
            The run's final model, scored for ``utility_final`` when no round was
            valued here (``retrain`` alone).
        """
        cfg = self.config
        t0 = time.perf_counter()
        n = len(self.clients)
        scores = {m: [float(v) for v in t] for m, t in self._totals.items()}
        u0 = self._u0 if self._u0 is not None else float(self.utility(self.initial))
        u1 = (self._last_full if self._last_full is not None
              else u0 if final is None else float(self.utility(final)))
        trainings, retrain_seconds = 0, 0.0
        if retrained is not None:
            scores["retrain"] = [float(v) for v in retrained.scores]
            trainings, retrain_seconds = int(retrained.trainings), float(retrained.seconds)
        evaluations = 0
        if self._or is not None:
            values = [float(self.utility(w)) for w in self._or]
            evaluations = len(values)
            scores["or"] = [float(v) for v in exact_shapley(lambda s: values[s], n)]
            u0 = values[0]
        scores = {m: scores[m] for m in self.methods if m in scores}
        halfwidth = ({"gtg": [float(h) for h in combined_halfwidth(
            self._var, self._var_df, cfg.confidence)]} if "gtg" in self.methods else {})
        hoeffding = None
        if self._hoeffding:
            per = (1 - cfg.confidence) / len(self._hoeffding)
            hoeffding = float(sum(hoeffding_halfwidth(r, t, 1 - per, k)
                                  for r, t, k in self._hoeffding))
        primary = self.methods[0]
        if primary not in scores:
            raise ValidationError(f"no {primary!r} scores yet: the coalitions are retrained "
                                  "after the run")
        shares = [float(s) for s in reward_shares(scores[primary])]
        gain = (float(sum(e["gain"] for e in self._rounds)) if self._rounds
                else float(u1 - u0))
        return ContributionReport(
            clients=list(self.clients), scores=scores, halfwidth=halfwidth,
            hoeffding=hoeffding, shares=shares, primary=primary, utility_initial=float(u0),
            utility_final=float(u1), gain=gain, rounds=copy.deepcopy(self._rounds),
            evaluations=self.evaluations + evaluations,
            seconds=self.seconds + retrain_seconds + time.perf_counter() - t0,
            permutations=self.permutations, unconverged=self.unconverged,
            skipped=self.skipped, settings=cfg.settings(), trainings=trainings)

    # ------------------------------------------------------------------ checkpoints
    def get_state(self) -> dict[str, Any]:
        """Return what a server checkpoint keeps to resume the valuation."""
        return {"config": self._identity(),
                "totals": {m: t.copy() for m, t in self._totals.items()},
                "var": self._var.copy(), "var_df": self._var_df.copy(),
                "hoeffding": [list(h) for h in self._hoeffding],
                "rounds": self._rounds, "or": self._or,
                "counters": [self.evaluations, self.permutations, self.unconverged,
                             self.skipped],
                "seconds": self.seconds,
                "u": [math.nan if self._u0 is None else self._u0,
                      math.nan if self._last_full is None else self._last_full]}

    def _identity(self) -> dict[str, Any]:
        """Return what must not change between a run and its resumption."""
        cfg = self.config
        return {"clients": list(self.clients), "methods": list(self.methods),
                "weighting": cfg.weighting, "seed": self.seed,
                "metric": str(cfg.metric), "validation": cfg.settings()["validation"]}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state`.

        Raises
        ------
        ValidationError
            If the checkpoint was valued with other settings (methods, weighting,
            seed, metric, validation rows, clients), or not valued at all.
        """
        if not state:
            raise ValidationError(
                "the checkpoint to resume holds no contribution valuation (the run was "
                "started without 'contribution'): resume without it, or start afresh")
        saved = {k: (list(v) if isinstance(v, tuple) else v)
                 for k, v in dict(state.get("config", {})).items()}
        if saved != self._identity():
            raise ValidationError(
                f"the checkpoint was valued with other contribution settings ({saved}); "
                f"this run has {self._identity()}: resume with the same settings")
        for m in self._totals:
            self._totals[m] = np.array(state["totals"][m], dtype=np.float64)
        self._var = np.array(state["var"], dtype=np.float64)
        # a checkpoint from before ν was kept: 0, the normal quantile it was written with
        self._var_df = np.array(state.get("var_df", np.zeros_like(self._var)),
                                dtype=np.float64)
        self._hoeffding = [(float(r), int(t), int(k)) for r, t, k in state["hoeffding"]]
        self._rounds = [dict(e) for e in state["rounds"]]
        if self._or is not None and state.get("or") is not None:
            self._or = np.array(state["or"], dtype=np.float32)
        self.evaluations, self.permutations, self.unconverged, self.skipped = (
            int(v) for v in state["counters"])
        self.seconds = float(state["seconds"])
        u0, u1 = (float(v) for v in state["u"])
        self._u0 = None if math.isnan(u0) else u0
        self._last_full = None if math.isnan(u1) else u1
