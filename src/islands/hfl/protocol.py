"""Roles of horizontal FL: one server and any number of clients.

Messages (models travel as flat float32 vectors):

==========  ================  ==============================================================
tag         direction         payload
==========  ================  ==============================================================
``join``    client → server   :class:`Join`: training and evaluation sample counts
``task``    server → client   :class:`Start`: the round the server resumes after (0: fresh)
``join``    client → server   :class:`Ready` (the same round) or :class:`Refusal`
``task``    server → client   :class:`Task`: round, global vector, position in the epoch,
                              local steps τ, batch size, optimiser, the round's share
                              |S|/N of the available clients; or :class:`Finish`
``update``  client → server   :class:`Update`: the aggregator's payload for the new local
                              model, the local loss, and (when asked) the local accuracy
                              of the global model the round started from; or
                              :class:`Refusal` when that model cannot be uploaded
``task``    server → client   :class:`~islands.aggregation.base.AggStep`: a phase of the
                              aggregator's own protocol (key agreement, unmasking)
``agg``     client → server   :class:`~islands.aggregation.base.AggReply`: the answer
==========  ================  ==============================================================

The global model travels as the aggregator's *payload*: the plain vector for the plain
mean and secure aggregation, a ciphertext under CKKS or Paillier, which only the
clients can open (:mod:`islands.aggregation.base`). The first task carries the initial
model in the clear (it is public: a seeded initialisation).

Time is counted in mini-batch steps. An epoch has S = min_k ⌊n_k/b_k⌋ steps (with APFL's
batch rule every client's data then lasts one epoch); a round runs τ steps, cut short at
the end of an epoch, so every epoch ends with an aggregation. Clients keep their
learner's state from round to round (a momentum buffer: their local optimiser runs on;
FedBN's local layers; SCAFFOLD's control variate).

The server sends tasks to at most ``concurrency`` clients at once and takes their
updates in a fixed order, adding each to a streaming aggregate, so at most
``concurrency`` client models exist at a time and results do not depend on thread
timing. A client that fails or stays silent longer than ``client_timeout`` is left out
of the round (weights renormalised over the survivors), recorded as a
:class:`DropoutEvent`, and the run goes on unless fewer than the strategy's
``min_clients`` remain. A client that failed is not asked again; a late update is
discarded.

An upload is checked on arrival (its aggregator's :class:`RoundAggregation.add`: shape,
finite values, the encoding's range where the server can see it); a malformed one makes
its client a dropout of reason ``"malformed update"``, as does a client that refuses to
upload a model it cannot encode (NaN, or beyond its aggregator's range). Such a client is
not asked again.

With ``checkpoint`` set, the server writes its state atomically after every aggregation
and each client writes its own (its learner's state) to its own file; ``resume=True``
continues from there and, with the same seeds, ends with exactly the model of an
uninterrupted run. The server's first message (:class:`Start`) names the round it
resumes after; every client checks it against its own state (its checkpoint when it
resumes, round 0 when it does not) and refuses a mismatch, and the server then stops
with that client's reason: a client restarted without ``resume`` (or the server without
it) would otherwise silently train on with a lost state. Every checkpoint
carries the settings that shape the model (``settings``,
:func:`~islands.hfl.checkpoint.shaping_settings`): the server refuses to resume one made
under other settings before any message, and a client whose checkpoint is damaged or was
made under other settings refuses the start the same way, so the run stops naming it
instead of going on without it.

A strategy's ``server_optimizer`` (:mod:`islands.hfl.server_opt`) turns each round's
revealed aggregate into the next global model, x_{t+1} = opt(x_t, aggregate), whose plain
vector is then the global payload; its state (t, m, v) is checkpointed with the server's.
It is refused, before any message, where the server cannot see the aggregate.

References
----------
.. [1] McMahan et al. "Communication-Efficient Learning of Deep Networks from
   Decentralized Data". AISTATS 2017.
.. [2] Zhang Ze-Hui et al. "Adaptive privacy-preserving federated learning", Acta
   Automatica Sinica 2023 (APFL: local accuracy uploaded with the model, eq. 30).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from islands.aggregation.base import (
    Aggregator,
    AggReply,
    AggStep,
    ClientHalf,
    MalformedUpdateError,
    RoundAggregation,
    ServerLink,
)
from islands.aggregation.protect import SampleBudget, SampleDP
from islands.arrays import Vector, peak_abs
from islands.errors import (
    PeerFailedError,
    PeerTimeoutError,
    ProtocolError,
    ValidationError,
)
from islands.hfl.checkpoint import (
    SERVER_FILE,
    check_epochs,
    check_settings,
    client_file,
    load_checkpoint,
    save_checkpoint,
    with_settings,
)
from islands.hfl.maths import round_steps, weighted_accuracy
from islands.hfl.server_opt import check_composes
from islands.hfl.strategy import LocalConfig, Strategy
from islands.runtime import Party, wire
from islands.validation import check_float, check_int

__all__ = [
    "ClientResult",
    "DropoutEvent",
    "Finish",
    "Join",
    "Learner",
    "LocalOutcome",
    "Ready",
    "Refusal",
    "RoundObserver",
    "RoundRecord",
    "ServerResult",
    "Start",
    "Task",
    "Update",
    "client",
    "server",
]

log = logging.getLogger(__name__)

MALFORMED = "malformed update"
RESUME_MISMATCH = "resume mismatch"


# --------------------------------------------------------------------------- messages
@wire.register(name="hfl.Join")
@dataclass(frozen=True)
class Join:
    """A client's opening message: how many samples it trains and evaluates on."""

    n_train: int = field(metadata={"ge": 1})
    n_eval: int = field(metadata={"ge": 0})


@wire.register(name="hfl.Start")
@dataclass(frozen=True)
class Start:
    """The server's first message: the round it resumes after (0: a fresh start)."""

    resumed_from: int = field(metadata={"ge": 0})


@wire.register(name="hfl.Ready")
@dataclass(frozen=True)
class Ready:
    """A client's agreement to :class:`Start`: it resumes after the same round."""

    resumed_from: int = field(metadata={"ge": 0})


@wire.register(name="hfl.Refusal")
@dataclass(frozen=True)
class Refusal:
    """A client's refusal: to resume as the server says, or to upload its update.

    ``reason`` is ``"resume mismatch"`` (answering :class:`Start`) or ``"malformed
    update"`` (instead of an :class:`Update`: its own new model cannot be uploaded);
    ``detail`` says why, for the server's log.
    """

    round: int
    reason: str
    detail: str


@wire.register(name="hfl.Task")
@dataclass(frozen=True)
class Task:
    """One round's instruction to one client."""

    round: int = field(metadata={"ge": 1})
    params: Any
    epoch: int = field(metadata={"ge": 0})
    step: int = field(metadata={"ge": 0})
    steps: int = field(metadata={"ge": 1})
    batch_size: int = field(metadata={"ge": 1})
    lr: float
    momentum: float
    weight_decay: float
    prox_mu: float
    evaluate: bool
    weight: float = 1.0
    initial: bool = False
    share: float = field(default=1.0, metadata={"gt": 0, "le": 1})


@wire.register(name="hfl.Update")
@dataclass(frozen=True)
class Update:
    """A client's answer to a task (``accuracy`` is NaN when not evaluated)."""

    round: int
    payload: Any
    steps: int
    loss: float
    accuracy: float


@wire.register(name="hfl.Finish")
@dataclass(frozen=True)
class Finish:
    """The end of the run, with the final global payload (None if not sent)."""

    params: Any
    rounds: int


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class RoundRecord:
    """What happened in one round, as the server saw it.

    Attributes
    ----------
    round
        From 1.
    epoch, step
        Position after the round (epoch counts completed epochs when ``epoch_end``).
    tau
        The strategy's interval τ this round.
    steps
        Local steps the clients ran (τ, or fewer at the end of an epoch).
    clients
        Clients asked to train.
    survivors
        Clients whose update was aggregated.
    accuracy
        Σ(n_k/n)·acc_k over the survivors' local accuracies of the round's starting
        model (APFL eq. 30), or None when not evaluated.
    loss
        The survivors' mean local training loss, weighted by n_k.
    seconds
        Wall time of the round on the server.
    epoch_end
        Whether the round closed an epoch.
    epsilon
        The client-level differential-privacy budget ε spent after the round (None
        without client-level DP), against whoever sees the released models: amplified
        when the cohort is a secret Poisson sample.
    epsilon_against_server
        The client-level ε against the server, which draws the cohort: every round a
        client was asked to train in counts with q = 1, the largest over the clients
        (None without client-level DP).
    sample_epsilon
        The largest sample-level (DP-SGD) ε of any client after the round (None
        without DP-SGD).
    """

    round: int
    epoch: int
    step: int
    tau: int
    steps: int
    clients: int
    survivors: int
    accuracy: float | None
    loss: float
    seconds: float
    epoch_end: bool
    epsilon: float | None = None
    sample_epsilon: float | None = None
    epsilon_against_server: float | None = None


@dataclass(frozen=True)
class DropoutEvent:
    """A client lost in a round, why and at which stage.

    ``reason`` is ``"failed"``, ``"timeout"`` or ``"malformed update"`` (an upload the
    server refused on arrival, or one the client refused to send; ``detail`` says what
    was wrong). ``stage`` is ``"join"``, ``"update"`` (its update is left out) or a
    phase of the aggregator's protocol (e.g. secure aggregation's ``"unmask"``, after
    which the client's update still counts).
    """

    round: int
    client: str
    reason: str
    stage: str = "update"
    detail: str = ""


@dataclass(frozen=True)
class ServerResult:
    """What the server ends with.

    Attributes
    ----------
    params
        The final global model, or None where the server cannot see it (CKKS,
        Paillier, chaos permutation: the clients open ``payload``).
    rounds
        One :class:`RoundRecord` per round (those before a resume included).
    aggregations
        Rounds aggregated.
    dropouts
        Every client left out of a round.
    batch_sizes
        Each client's mini-batch size.
    steps_per_epoch
        S, local steps per epoch.
    counts
        Each client's number of training samples.
    resumed_from
        The round a resumed run started after (0 for a fresh run).
    payload
        The final global payload, as the clients receive it.
    stopped
        Why the run ended before its epochs (e.g. the privacy budget), or None.
    privacy
        The client-level (ε, δ) spent, or None without client-level DP: against whoever
        sees the released models (amplified when the cohort is a secret Poisson sample).
    privacy_against_server
        The client-level (ε, δ) against the server, the largest over the clients (every
        round a client was asked to train in counts with q = 1), or None without
        client-level DP.
    sample_privacy
        The largest sample-level (ε, δ) of any client, or None without DP-SGD.
    """

    params: Vector | None
    rounds: list[RoundRecord]
    aggregations: int
    dropouts: list[DropoutEvent]
    batch_sizes: dict[str, int]
    steps_per_epoch: int
    counts: dict[str, int]
    resumed_from: int = 0
    payload: Any = None
    stopped: str | None = None
    privacy: tuple[float, float] | None = None
    sample_privacy: tuple[float, float] | None = None
    privacy_against_server: tuple[float, float] | None = None


@dataclass(frozen=True)
class ClientResult:
    """What a client ends with: the final global model (if sent) and its own counts."""

    params: Vector | None
    rounds_trained: int
    n_train: int
    n_eval: int
    losses: list[float] = field(default_factory=list)


# --------------------------------------------------------------------------- learner
@dataclass(frozen=True)
class LocalOutcome:
    """What a learner returns from local training.

    ``state`` is what the learner carries to its next call, the client role keeping (and
    checkpointing) it in between: a momentum buffer, FedBN's local layers, SCAFFOLD's
    control variate, or None. It never leaves the client.
    """

    params: Vector
    state: Vector | None
    loss: float


class RoundObserver(Protocol):
    """Sees every round's plain uploads on the server (contribution measurement)."""

    def check_aggregator(self, aggregator: Aggregator) -> None:
        """Raise if ``aggregator`` does not show the server single updates."""

    def observe(self, round: int, base: Vector, uploads: dict[str, Any],
                weights: dict[str, float]) -> None:
        """Take the round's starting model, the survivors' uploads and weights."""

    def get_state(self) -> dict[str, Any]:
        """Return what a checkpoint must hold to resume."""

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state`."""


class Learner(Protocol):
    """What a client role needs from local training (see :mod:`islands.hfl.torch.learner`)."""

    @property
    def n_train(self) -> int:
        """Training samples."""

    @property
    def n_eval(self) -> int:
        """Local evaluation samples (0: the client cannot report an accuracy)."""

    def train(self, params: Vector, *, epoch: int, step: int, steps: int, batch_size: int,
              config: LocalConfig, state: Vector | None) -> LocalOutcome:
        """Run ``steps`` mini-batch steps from ``(epoch, step)`` starting at ``params``.

        ``state`` is the :attr:`LocalOutcome.state` of the learner's previous call (None
        at the first).
        """

    def evaluate(self, params: Vector) -> float:
        """Accuracy (or the task's score) of ``params`` on the local evaluation data."""


class WrappedLearner:
    """A learner around ``inner`` that reports ``inner``'s sample counts (composition).

    The base of the learners that change how another one runs or what it uploads
    (:class:`~islands.hfl.torch.learner.PooledLearner`, the free-rider, the poisoning
    clients of :mod:`islands.hfl.poisoning`).
    """

    inner: Any

    @property
    def n_train(self) -> int:
        """Training samples (``inner``'s)."""
        return int(self.inner.n_train)

    @property
    def n_eval(self) -> int:
        """Local evaluation samples (``inner``'s)."""
        return int(self.inner.n_eval)


# --------------------------------------------------------------------------- server
def _check_vector(params: Any, dim: int | None, what: str, *, values: bool = True) -> Vector:
    """Return ``params`` as a 1-D float32 vector of ``dim`` values, all finite.

    ``values=False`` leaves the values to the caller's next check (one pass per vector).
    """
    vec = np.asarray(params)
    if vec.ndim != 1 or vec.dtype != np.float32 or (dim is not None and vec.size != dim):
        want = "a 1-D float32 vector" + ("" if dim is None else f" of {dim} values")
        raise ValidationError(f"{what} must be {want}; got {vec.dtype} {vec.shape}")
    if values and not math.isfinite(peak_abs(vec)):
        raise ValidationError(f"{what} holds NaN or infinite values")
    return vec


def server(
    party: Party,
    *,
    clients: Sequence[str],
    strategy: Strategy,
    initial: Vector,
    epochs: int,
    concurrency: int | None = 8,
    client_timeout: float = 600.0,
    checkpoint: str | os.PathLike[str] | None = None,
    resume: bool = False,
    on_round: Callable[[RoundRecord, Any], None] | None = None,
    send_final: bool = True,
    sample_dp: SampleDP | None = None,
    contribution: RoundObserver | None = None,
    settings: Mapping[str, Any] | None = None,
) -> ServerResult:
    """Run the FL server: ``epochs`` epochs of rounds, as the strategy directs.

    The run goes in the steps of :class:`ServerRun`: the clients join, then each round
    is configured, trained and aggregated, and checkpointed, until the epochs are done
    or a budget stops it.

    Parameters
    ----------
    party
        The server's party context.
    clients
        The clients' party names, in the fixed order updates are taken.
    strategy
        Round hooks and the aggregator (:mod:`islands.hfl.strategy`).
    initial
        The initial global model (float32 vector).
    epochs
        Epochs of local steps to run.
    concurrency
        Clients training at once (None: every selected client).
    client_timeout
        Seconds to wait for one client's update (or one phase of the aggregator's
        protocol) before leaving it out.
    checkpoint
        Folder to write ``server.ckpt`` into after every aggregation.
    resume
        Continue from the checkpoint in ``checkpoint`` (only where the server can see
        the model: a resumed run deals new keys).
    on_round
        Called in the server's thread after every aggregation with the round's record
        and the global payload (progress, evaluation); must not modify it.
    send_final
        Send the final model to the clients with :class:`Finish` (a simulation whose
        caller reads the model from the server can skip N copies of it).
    sample_dp
        The DP-SGD settings the clients train with: the server then accounts every
        client's sample-level budget, reports the largest ε and stops before a round
        that would take a client past ``target_epsilon``.
    contribution
        Values the clients from every round's plain uploads
        (:class:`~islands.hfl.contribution.ContributionTracker`); refused, before any
        message, when the aggregator hides single updates.
    settings
        The settings that shape the model (:func:`~islands.hfl.checkpoint.shaping_settings`),
        written into every checkpoint; a resume refuses, before any message, a
        checkpoint made under other settings, naming them, and ``epochs`` below the
        epochs it has trained.

    Returns
    -------
    ServerResult
    """
    run = ServerRun(party, clients=clients, strategy=strategy, initial=initial,
                    epochs=epochs, concurrency=concurrency, client_timeout=client_timeout,
                    checkpoint=checkpoint, resume=resume, on_round=on_round,
                    sample_dp=sample_dp, contribution=contribution, settings=settings)
    run.join()
    while run.epoch < run.epochs:
        record = run.round()
        if record is None:
            break
        run.save()
    return run.finish(send_final=send_final)


@dataclass(frozen=True)
class ServerCheckpoint:
    """What the server writes after every aggregation, to resume exactly (typed).

    Saved as a map (:meth:`to_state`) by :func:`~islands.hfl.checkpoint.save_checkpoint`;
    the optional states are empty maps when the run has no such part.
    """

    clients: list[str]
    dim: int
    params: Any
    round: int
    epoch: int
    step: int
    aggregations: int
    available: list[str]
    strategy: dict[str, Any]
    aggregator: dict[str, Any]
    records: list[RoundRecord]
    dropouts: list[DropoutEvent]
    server_optimizer: dict[str, Any] = field(default_factory=dict)
    sample_budget: dict[str, Any] = field(default_factory=dict)
    contribution: dict[str, Any] = field(default_factory=dict)

    def to_state(self) -> dict[str, Any]:
        """Return the map a checkpoint file holds (records as columns)."""
        return {"clients": self.clients, "dim": self.dim, "params": self.params,
                "round": self.round, "epoch": self.epoch, "step": self.step,
                "aggregations": self.aggregations, "available": self.available,
                "strategy": self.strategy, "aggregator": self.aggregator,
                "server_optimizer": self.server_optimizer,
                "sample_budget": self.sample_budget, "contribution": self.contribution,
                "records": _records_to_columns(self.records),
                "dropouts": [asdict(d) for d in self.dropouts]}

    @classmethod
    def from_state(cls, saved: Mapping[str, Any]) -> ServerCheckpoint:
        """Read :meth:`to_state`'s map (older files: optional parts missing are empty)."""
        return cls(clients=list(saved["clients"]), dim=int(saved["dim"]),
                   params=saved["params"], round=int(saved["round"]),
                   epoch=int(saved["epoch"]), step=int(saved["step"]),
                   aggregations=int(saved["aggregations"]),
                   available=list(saved["available"]), strategy=dict(saved["strategy"]),
                   aggregator=dict(saved.get("aggregator", {})),
                   records=_records_from_columns(saved["records"]),
                   dropouts=[DropoutEvent(**d) for d in saved["dropouts"]],
                   server_optimizer=dict(saved.get("server_optimizer", {})),
                   sample_budget=dict(saved.get("sample_budget", {})),
                   contribution=dict(saved.get("contribution", {})))


class ServerRun:
    """One run of the server role, in steps.

    :meth:`join`, then :meth:`round` and :meth:`save` per round, then :meth:`finish`
    (:func:`server` runs them in order; see it for the parameters).
    A round is three steps, as Flower splits one: :meth:`configure` (the cohort, the
    local optimiser, the aggregator's round set-up), :meth:`fit` (tasks out, updates in,
    streamed into the aggregate) and :meth:`aggregate` (the new global model, the server
    optimiser, the strategy's observation, the round's record). The optional parts are
    explicit members, each None when the run has none: ``optimizer`` (the strategy's
    server optimiser), ``budget`` (DP-SGD's sample-level accounting), ``contribution``
    (the round observer), ``checkpoint`` (the server's file).
    """

    def __init__(self, party: Party, *, clients: Sequence[str], strategy: Strategy,
                 initial: Vector, epochs: int, concurrency: int | None = 8,
                 client_timeout: float = 600.0,
                 checkpoint: str | os.PathLike[str] | None = None, resume: bool = False,
                 on_round: Callable[[RoundRecord, Any], None] | None = None,
                 sample_dp: SampleDP | None = None,
                 contribution: RoundObserver | None = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        params = _check_vector(initial, None, "the initial model")
        self.party = party
        self.epochs = check_int(epochs, "epochs", "server", low=1)
        self.clients = list(clients)
        if not self.clients:
            raise ValidationError("the server needs at least one client")
        self.concurrency = (None if concurrency is None
                            else check_int(concurrency, "concurrency", "server", low=1))
        self.client_timeout = check_float(client_timeout, "client_timeout", "server",
                                          low=0.0, low_inclusive=False)
        if resume and checkpoint is None:
            raise ValidationError("resume=True needs the 'checkpoint' folder to resume from")
        self.strategy = strategy
        self.min_clients = int(strategy.min_clients)
        self.contribution = contribution
        if contribution is not None:
            contribution.check_aggregator(strategy.aggregator)
        self.dim = params.size
        self.optimizer = strategy.server_optimizer
        check_composes(strategy.aggregator, self.optimizer, f"server {party.name!r}")
        self.opt_state = None if self.optimizer is None else self.optimizer.init(self.dim)
        self.half = strategy.aggregator.server_half()
        # DP amplification only for secret cohorts
        self.half.set_sampling_rate(strategy.secret_sampling_rate)
        self.link = ServerLink(party, self.client_timeout)
        self.on_round = on_round
        self.sample_dp = sample_dp
        self.settings = settings
        self.checkpoint = None if checkpoint is None else Path(checkpoint) / SERVER_FILE
        self.saved: ServerCheckpoint | None = None
        if resume and self.checkpoint is not None:
            self.saved = self._load(Path(checkpoint))  # type: ignore[arg-type]
        self.resumed_from = 0 if self.saved is None else self.saved.round
        # the run's state: the global payload (the plain initial model until round 1)
        self.model: Any = params
        self.plain: Vector | None = params
        self.initial_model = True
        self.records: list[RoundRecord] = []
        self.dropouts: list[DropoutEvent] = []
        self.rnd = self.epoch = self.step = self.aggregations = 0
        self.counts: dict[str, int] = {}
        self.available: list[str] = []
        self.batch_sizes: dict[str, int] = {}
        self.steps_per_epoch = 0
        self.budget: SampleBudget | None = None
        self.stopped: str | None = None
        self.no_loss: set[str] = set()  # clients already reported for a non-finite loss

    def _load(self, folder: Path) -> ServerCheckpoint:
        """Read the server's checkpoint and refuse one this run cannot resume from."""
        assert self.checkpoint is not None
        raw = load_checkpoint(self.checkpoint)
        if raw.get("clients") != self.clients or int(raw.get("dim", -1)) != self.dim:
            raise ValidationError(
                f"the checkpoint in {folder} is of another federation (clients "
                f"{raw.get('clients')}, {raw.get('dim')} parameters)")
        if self.settings is not None:
            check_settings(raw, self.settings, self.checkpoint)
        check_epochs(raw, self.epochs, self.checkpoint)
        if self.half.reveal(raw["params"]) is None:
            raise ValidationError(
                f"cannot resume under the {self.strategy.aggregator.name} aggregator: the "
                "saved model is encrypted or permuted under keys of the interrupted run, "
                "which are not checkpointed")
        return ServerCheckpoint.from_state(raw)

    # ------------------------------------------------------------------ join
    def join(self) -> None:
        """Take the joins, agree on the start, set up the aggregator, restore a resume.

        A client that fails before joining is a dropout of round 0.
        """
        party = self.party
        for name in self.clients:
            try:
                join = party.recv(name, "join", timeout=self.client_timeout)
            except (PeerFailedError, PeerTimeoutError) as exc:
                self.dropouts.append(_dropout(0, name, exc, "join"))
                continue
            if not isinstance(join, Join):
                raise ProtocolError(f"client {name!r} sent a malformed join: {join!r}",
                                    party=party.name, step="join")
            self.counts[name] = int(join.n_train)
        _agree_on_start(party, self.counts, self.resumed_from, self.client_timeout,
                        self.dropouts)
        if self.saved is None and self.checkpoint is not None:
            # a fresh run agreed on: an old run's state, which the clients have just
            # replaced with theirs, must not be resumed with them if this run stops
            # before round 1
            self.checkpoint.unlink(missing_ok=True)
        if len(self.counts) < self.min_clients:
            raise ProtocolError(
                f"only {len(self.counts)} of {len(self.clients)} clients joined; the "
                f"strategy needs at least min_clients={self.min_clients}",
                party=party.name, step="join")
        self.batch_sizes = self.strategy.setup(self.counts)
        self.steps_per_epoch = min(self.counts[c] // self.batch_sizes[c] for c in self.counts)
        if self.sample_dp is not None:
            self.budget = SampleBudget(self.sample_dp, self.counts, self.batch_sizes)
        self.available = self.half.setup(self.link, list(self.counts))
        _drain(self.link, self.dropouts, self.available)
        if len(self.available) < self.min_clients:
            raise ProtocolError(
                f"only {len(self.available)} clients finished the "
                f"{self.strategy.aggregator.name} aggregator's set-up; the strategy needs "
                f"at least min_clients={self.min_clients}", party=party.name, step="setup")
        if self.saved is not None:
            self._restore(self.saved)

    def _restore(self, saved: ServerCheckpoint) -> None:
        """Continue from ``saved``: the model, the position and every part's state."""
        self.model = self.plain = np.array(self.half.reveal(saved.params), dtype=np.float32)
        self.rnd, self.epoch, self.step = saved.round, saved.epoch, saved.step
        self.aggregations = saved.aggregations
        self.available = [c for c in saved.available if c in self.available]
        self.strategy.set_state(saved.strategy)
        if self.optimizer is not None:
            self.opt_state = self.optimizer.restore(saved.server_optimizer, self.dim)
        self.half.set_state(saved.aggregator)
        if self.budget is not None:
            self.budget.set_state(saved.sample_budget)
        if self.contribution is not None:
            self.contribution.set_state(saved.contribution)
        self.records = list(saved.records)
        self.dropouts = list(saved.dropouts) + self.dropouts

    # ------------------------------------------------------------------ a round
    def round(self) -> RoundRecord | None:
        """Run the next round: configure, fit, aggregate; None if a budget stops the run."""
        if self.half.exhausted():
            self.stopped = "privacy budget"
            log.warning("stopping before round %d: another round would exceed the target "
                        "epsilon", self.rnd + 1)
            return None
        t0 = time.perf_counter()
        plan = self.configure()
        if plan is None:
            return None
        results = self.fit(plan)
        return self.aggregate(plan, results, t0)

    def configure(self) -> _RoundPlan | None:
        """Choose the round's clients, its steps and optimiser, and open its aggregation.

        Returns None, the round not counted, when its DP-SGD steps would take a client
        past the target ε.
        """
        party = self.party
        rnd = self.rnd + 1
        tau = self.strategy.local_steps()
        steps = round_steps(tau, self.step, self.steps_per_epoch)
        chosen = self.strategy.select(rnd, self.available)
        if len(chosen) < self.min_clients:
            raise ProtocolError(
                f"round {rnd}: {len(chosen)} clients available, fewer than "
                f"min_clients={self.min_clients}", party=party.name, step="task")
        if self.budget is not None and self.budget.would_exceed(chosen, steps):
            self.stopped = "privacy budget"
            log.warning("stopping before round %d: its %d DP-SGD steps would take a client "
                        "past the target epsilon", rnd, steps)
            return None
        self.rnd = rnd
        config = self.strategy.local_config(rnd)
        evaluate = self.strategy.needs_evaluation(rnd)
        self.half.set_global(self.plain)  # robust norm bounding clips against it
        agg = self.half.start(self.link, round=rnd, clients=chosen,
                              weights={c: float(self.counts[c]) for c in chosen},
                              dim=self.dim)
        _drain(self.link, self.dropouts, self.available)
        participants = list(agg.participants)
        if len(participants) < self.min_clients:
            raise ProtocolError(
                f"round {rnd}: {len(participants)} clients left after the aggregator's "
                f"set-up, fewer than min_clients={self.min_clients}", party=party.name,
                step="setup")
        share = len(participants) / len(set(self.available) | set(participants))
        return _RoundPlan(tau=tau, steps=steps, chosen=chosen, participants=participants,
                          config=config, evaluate=evaluate, agg=agg, share=share)

    def fit(self, plan: _RoundPlan) -> dict[str, Any]:
        """Send the tasks and take the updates into the aggregate; drop the lost clients.

        Returns each participant's :class:`Update` (without its payload) or why it is
        missing.
        """
        uploads: dict[str, Any] | None = None if self.contribution is None else {}
        assert plan.agg is not None  # released by aggregate() only
        results = _run_round(self.party, plan.participants, self.rnd, self.model,
                             self.initial_model, self.epoch, self.step, plan.steps,
                             self.batch_sizes, plan.config, plan.evaluate, plan.agg,
                             self.concurrency or len(plan.participants),
                             self.client_timeout, uploads, plan.share)
        plan.uploads = uploads
        if self.budget is not None:  # a client that dropped out may still have trained
            self.budget.step(plan.participants, plan.steps)
        lost = _failures(results)
        for name, why in lost:
            self.dropouts.append(DropoutEvent(self.rnd, name, why.reason, detail=why.detail))
            log.warning("round %d: client %r left out (%s)%s", self.rnd, name, why.reason,
                        f": {why.detail}" if why.detail else "")
            # a client that failed or sent a malformed update is not asked again
            if why.reason != "timeout" and name in self.available:
                self.available.remove(name)
        survivors = [c for c in plan.participants if isinstance(results.get(c), Update)]
        if len(survivors) < self.min_clients:
            left = ", ".join(f"{name!r}: {why.reason}" for name, why in lost)
            raise ProtocolError(
                f"round {self.rnd}: only {len(survivors)} of {len(plan.chosen)} clients "
                f"returned an update, fewer than min_clients={self.min_clients} (left out: "
                f"{left})", party=self.party.name, step="update")
        plan.survivors = survivors
        return results

    def aggregate(self, plan: _RoundPlan, results: dict[str, Any], t0: float) -> RoundRecord:
        """Finish the aggregate into the next global model; record and report the round."""
        rnd, survivors = self.rnd, plan.survivors
        agg = plan.agg
        assert agg is not None  # released below only
        self.model = agg.finish(survivors)
        _drain(self.link, self.dropouts, self.available)
        if self.contribution is not None and plan.uploads is not None \
                and self.plain is not None:
            self.contribution.observe(rnd, self.plain,
                                      {c: plan.uploads[c] for c in survivors},
                                      {c: agg.weights[c] for c in survivors})
        # the round's accumulator (a model-sized sum, or CKKS's ciphertexts) goes now, not
        # when the next round's replaces it: it would live through the next round's training
        plan.uploads = None
        plan.agg = None
        del agg
        start, self.plain = self.plain, self.half.reveal(self.model)
        if self.optimizer is not None and self.opt_state is not None:
            if start is None or self.plain is None:  # check_composes refused such aggregators
                raise ProtocolError(f"round {rnd}: the server optimiser needs the plain "
                                    "aggregate", party=self.party.name, step="aggregate")
            self.plain, self.opt_state = self.optimizer.step(start, self.plain, self.opt_state)
            self.model = self.plain
        del start
        self.initial_model = False
        ups: list[Update] = [results[c] for c in survivors]
        w_surv = [self.counts[c] for c in survivors]
        accuracy = None
        if plan.evaluate:
            scored = [(u.accuracy, n) for u, n in zip(ups, w_surv, strict=True)
                      if not math.isnan(u.accuracy)]
            if scored:
                accuracy = weighted_accuracy([a for a, _ in scored], [n for _, n in scored])
        self.strategy.observe(rnd, accuracy)
        loss = self._mean_loss(survivors, ups, w_surv)
        self.step += plan.steps
        epoch_end = self.step == self.steps_per_epoch
        if epoch_end:
            self.epoch, self.step = self.epoch + 1, 0
        self.aggregations += 1
        spent, against = self.half.spent(), self.half.spent_against_server()
        record = RoundRecord(round=rnd, epoch=self.epoch, step=self.step, tau=plan.tau,
                             steps=plan.steps, clients=len(plan.chosen),
                             survivors=len(survivors), accuracy=accuracy, loss=loss,
                             seconds=time.perf_counter() - t0, epoch_end=epoch_end,
                             epsilon=None if spent is None else spent[0],
                             sample_epsilon=(None if self.budget is None
                                             else self.budget.spent()[0]),
                             epsilon_against_server=None if against is None else against[0])
        self.records.append(record)
        # the round's observer first: a checkpoint then means its round was seen whole
        # (a caller keeping per-round results beside it never lags behind it)
        if self.on_round is not None:
            if isinstance(self.model, np.ndarray):
                self.model = self.model.view()
                self.model.flags.writeable = False
            self.on_round(record, self.model)
        return record

    def _mean_loss(self, survivors: list[str], ups: list[Update], weights: list[int]) -> float:
        """Return the survivors' mean local loss, weighted by n_k, over the finite ones.

        A client that trained nothing (a free-rider) reports no loss (NaN); any non-finite
        loss is left out of the mean, and said so (once per client at warning level: a
        free-rider would repeat it every round).
        """
        finite = [(u.loss, n) for u, n in zip(ups, weights, strict=True)
                  if math.isfinite(u.loss)]
        for name, u in zip(survivors, ups, strict=True):
            if not math.isfinite(u.loss):
                level = logging.DEBUG if name in self.no_loss else logging.WARNING
                self.no_loss.add(name)
                log.log(level, "round %d: client %r reported a loss of %s, left out of the "
                        "round's mean loss", self.rnd, name, u.loss)
        return (float(np.average([v for v, _ in finite], weights=[n for _, n in finite]))
                if finite else math.nan)

    # ------------------------------------------------------------------ checkpoint, end
    def state(self) -> ServerCheckpoint:
        """Return the run's state after its latest round, as a checkpoint holds it."""
        return ServerCheckpoint(
            clients=self.clients, dim=self.dim, params=self.model, round=self.rnd,
            epoch=self.epoch, step=self.step, aggregations=self.aggregations,
            available=self.available, strategy=self.strategy.get_state(),
            aggregator=self.half.get_state(),
            server_optimizer={} if self.opt_state is None else self.opt_state.to_dict(),
            sample_budget={} if self.budget is None else self.budget.get_state(),
            contribution={} if self.contribution is None else self.contribution.get_state(),
            records=self.records, dropouts=self.dropouts)

    def save(self) -> None:
        """Write the checkpoint atomically (nothing without a checkpoint folder)."""
        if self.checkpoint is not None:
            save_checkpoint(self.checkpoint, with_settings(self.state().to_state(),
                                                           self.settings))

    def finish(self, *, send_final: bool = True) -> ServerResult:
        """Send :class:`Finish` to the clients still in the run; return the result."""
        final = Finish(params=self.model if send_final else None, rounds=self.rnd)
        for name in self.available:
            self.party.send(name, "task", final)
        return ServerResult(params=self.plain, rounds=self.records,
                            aggregations=self.aggregations, dropouts=self.dropouts,
                            batch_sizes=self.batch_sizes,
                            steps_per_epoch=self.steps_per_epoch, counts=self.counts,
                            resumed_from=self.resumed_from, payload=self.model,
                            stopped=self.stopped, privacy=self.half.spent(),
                            sample_privacy=None if self.budget is None else self.budget.spent(),
                            privacy_against_server=self.half.spent_against_server())


@dataclass
class _RoundPlan:
    """One round as :meth:`ServerRun.configure` set it up, filled in by :meth:`ServerRun.fit`."""

    tau: int
    steps: int
    chosen: list[str]
    participants: list[str]
    config: LocalConfig
    evaluate: bool
    agg: RoundAggregation | None
    share: float
    survivors: list[str] = field(default_factory=list)
    uploads: dict[str, Any] | None = None


def _agree_on_start(party: Party, counts: dict[str, int], resumed_from: int,
                    client_timeout: float, dropouts: list[DropoutEvent]) -> None:
    """Tell the joined clients the round the run resumes after; stop if one disagrees.

    A client that fails or stays silent here is a dropout of the join (removed from
    ``counts``); a client's :class:`Refusal` stops the run with its reason.
    """
    joined = list(counts)
    for name in joined:
        party.send(name, "task", Start(resumed_from=resumed_from))
    refusals = []
    for name in joined:
        try:
            reply = party.recv(name, "join", timeout=client_timeout)
        except (PeerFailedError, PeerTimeoutError) as exc:
            dropouts.append(_dropout(0, name, exc, "join"))
            del counts[name]
            continue
        if isinstance(reply, Refusal):
            refusals.append(f"client {name!r} refused: {_peer_text(reply.detail)}")
        elif not (isinstance(reply, Ready) and reply.resumed_from == resumed_from):
            raise ProtocolError(f"client {name!r} sent a malformed answer to the start: "
                                f"{_peer_text(reply)}", party=party.name, step="join")
    if refusals:
        where = "starts afresh (round 0)" if resumed_from == 0 else (
            f"resumes after round {resumed_from}")
        raise ProtocolError(f"server {party.name!r} {where}, but not every client does: "
                            + "; ".join(refusals), party=party.name, step="join")


def _drain(link: ServerLink, dropouts: list[DropoutEvent], available: list[str]) -> None:
    """Move the aggregator phases' losses into the run's dropout log."""
    for d in link.dropouts:
        dropouts.append(DropoutEvent(d.round, d.client, d.reason, d.stage))
        log.warning("round %d: client %r lost at stage %r (%s)", d.round, d.client, d.stage,
                    d.reason)
        if d.reason == "failed" and d.client in available:
            available.remove(d.client)
    link.dropouts.clear()


_RECORD_FIELDS = ("round", "epoch", "step", "tau", "steps", "clients", "survivors",
                  "accuracy", "loss", "seconds", "epoch_end", "epsilon", "sample_epsilon",
                  "epsilon_against_server")
_OPTIONAL_FLOATS = ("accuracy", "epsilon", "sample_epsilon", "epsilon_against_server")


def _records_to_columns(records: list[RoundRecord]) -> dict[str, Any]:
    # one array per field: a checkpoint after round r encodes r records as a few
    # buffers instead of r maps, which kept saving from growing quadratically slow
    cols: dict[str, Any] = {}
    for name in _RECORD_FIELDS:
        values = [getattr(r, name) for r in records]
        if name in _OPTIONAL_FLOATS:
            cols[name] = np.array([math.nan if v is None else v for v in values], np.float64)
        elif name in ("loss", "seconds"):
            cols[name] = np.array(values, np.float64)
        elif name == "epoch_end":
            cols[name] = np.array(values, np.bool_)
        else:
            cols[name] = np.array(values, np.int64)
    return cols


def _records_from_columns(cols: dict[str, Any]) -> list[RoundRecord]:
    n = len(cols["round"])
    out = []
    eps_col = cols.get("epsilon", [math.nan] * n)
    sample_col = cols.get("sample_epsilon", [math.nan] * n)
    against_col = cols.get("epsilon_against_server", [math.nan] * n)
    for i in range(n):
        acc = float(cols["accuracy"][i])
        eps = float(eps_col[i])
        sample_eps = float(sample_col[i])
        against = float(against_col[i])
        out.append(RoundRecord(
            round=int(cols["round"][i]), epoch=int(cols["epoch"][i]), step=int(cols["step"][i]),
            tau=int(cols["tau"][i]), steps=int(cols["steps"][i]),
            clients=int(cols["clients"][i]),
            survivors=int(cols["survivors"][i]), accuracy=None if math.isnan(acc) else acc,
            loss=float(cols["loss"][i]), seconds=float(cols["seconds"][i]),
            epoch_end=bool(cols["epoch_end"][i]),
            epsilon=None if math.isnan(eps) else eps,
            sample_epsilon=None if math.isnan(sample_eps) else sample_eps,
            epsilon_against_server=None if math.isnan(against) else against))
    return out


def _dropout(rnd: int, name: str, exc: Exception, stage: str) -> DropoutEvent:
    reason = "timeout" if isinstance(exc, PeerTimeoutError) else "failed"
    log.warning("round %d: client %r left out (%s)", rnd, name, reason)
    return DropoutEvent(rnd, name, reason, stage)


@dataclass(frozen=True)
class _Lost:
    """Why a client's update of a round is missing."""

    reason: str
    detail: str = ""


def _failures(results: dict[str, Any]) -> list[tuple[str, _Lost]]:
    return [(name, value) for name, value in results.items() if isinstance(value, _Lost)]


def _peer_text(text: Any) -> str:
    """Bound a peer's free text for our own log and results (it is never executed)."""
    return (text if isinstance(text, str) else repr(text))[:500]


def _run_round(
    party: Party, chosen: list[str], rnd: int, params: Any, initial: bool, epoch: int,
    step: int, steps: int, batch_sizes: dict[str, int], config: LocalConfig, evaluate: bool,
    agg: RoundAggregation, concurrency: int, client_timeout: float,
    uploads: dict[str, Any] | None = None, share: float = 1.0,
) -> dict[str, Any]:
    """Send tasks to at most ``concurrency`` clients at a time; take updates in order.

    Returns each client's :class:`Update`, or why it is missing (``"failed"``,
    ``"timeout"``, ``"malformed update"``); with ``uploads``, each aggregated payload is
    also kept there, by client.
    """
    out: dict[str, Any] = {}
    queue = deque(chosen)

    def dispatch() -> None:
        name = queue.popleft()
        party.send(name, "task", Task(
            round=rnd, params=params, epoch=epoch, step=step, steps=steps,
            batch_size=batch_sizes[name], lr=config.lr, momentum=config.momentum,
            weight_decay=config.weight_decay, prox_mu=config.prox_mu, evaluate=evaluate,
            weight=agg.weights[name], initial=initial, share=share))

    for _ in range(min(concurrency, len(chosen))):
        dispatch()
    for name in chosen:
        out[name] = _receive_update(party, name, rnd, agg, client_timeout, uploads)
        if queue:
            dispatch()
    return out


def _receive_update(party: Party, name: str, rnd: int, agg: RoundAggregation,
                    client_timeout: float, uploads: dict[str, Any] | None) -> Any:
    """Take ``name``'s update of round ``rnd`` into ``agg``, or say why there is none."""
    deadline = time.monotonic() + client_timeout
    try:
        while True:  # skip late updates of earlier rounds
            update = party.recv(name, "update", timeout=max(deadline - time.monotonic(), 1e-3))
            if not (isinstance(update, (Update, Refusal)) and update.round < rnd):
                break
    except PeerFailedError:
        return _Lost("failed")
    except PeerTimeoutError:
        return _Lost("timeout")
    if isinstance(update, Refusal) and update.round == rnd and update.reason == MALFORMED:
        return _Lost(MALFORMED, _peer_text(update.detail))
    if not isinstance(update, Update) or update.round != rnd:
        raise ProtocolError(f"client {name!r} sent a malformed update in round {rnd}",
                            party=party.name, step="update")
    try:
        agg.add(name, update.payload)
    except MalformedUpdateError as exc:
        if exc.client != name:
            raise
        return _Lost(MALFORMED, str(exc))
    if uploads is not None:
        uploads[name] = update.payload
    # keep the metadata, drop the payload (the aggregate holds what it needs)
    return Update(round=update.round, payload=None, steps=update.steps,
                  loss=float(update.loss), accuracy=float(update.accuracy))


# --------------------------------------------------------------------------- client
def client(
    party: Party,
    *,
    server: str,
    learner: Learner,
    aggregator: Aggregator,
    half: ClientHalf | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    resume: bool = False,
    task_timeout: float = 3600.0,
    settings: Mapping[str, Any] | None = None,
) -> ClientResult:
    """Run an FL client: train on its own data whenever the server sends a task.

    Parameters
    ----------
    party
        The client's party context.
    server
        The server's party name.
    learner
        Local training and evaluation over the client's own data.
    aggregator
        The same aggregator the server's strategy uses (its client half is made here).
    half
        A client half made by the caller (``aggregator.client_half()``), to keep a
        handle on it (a simulation that opens encrypted models for evaluation).
    checkpoint
        Folder for this client's state file (``<name>.ckpt``): its learner's state after
        each of its last two rounds.
    resume
        Load that state to continue a run whose server resumes; the client refuses (and
        the server stops) when the server's :class:`Start` names another round, when
        its checkpoint is damaged, or when it was made under other ``settings``.
    task_timeout
        Seconds to wait for the next task (a round of many clients can take long).
    settings
        The settings that shape the model, as the server's: written into the client's
        checkpoint and compared on resume.

    Returns
    -------
    ClientResult

    Raises
    ------
    ProtocolError
        If the server resumes after another round than this client's state, or the
        client cannot resume (its checkpoint damaged or made under other settings): told
        to the server first, with a :class:`Refusal`, so that the run stops naming it.
    ValidationError
        If its new model cannot be uploaded (NaN, wrong length, beyond the aggregator's
        range): it tells the server with a :class:`Refusal` and stops.
    """
    if learner.n_train < 1:
        raise ValidationError(f"client {party.name!r} has no training data")
    own = aggregator.client_half() if half is None else half
    ckpt_path = None if checkpoint is None else Path(checkpoint) / client_file(party.name)
    stored = None
    unusable = None  # why this client cannot resume, told to the server at the start
    if resume and ckpt_path is not None and ckpt_path.is_file():
        try:
            stored = load_checkpoint(ckpt_path)
        except ValidationError as exc:
            unusable = f"client {party.name!r} cannot resume: {exc}"
        else:
            try:
                if settings is not None:
                    check_settings(stored, settings, ckpt_path)
            except ValidationError as exc:
                unusable = f"client {party.name!r}: {exc}"
    party.send(server, "join", Join(n_train=learner.n_train, n_eval=learner.n_eval))
    start = party.recv(server, "task", timeout=task_timeout)
    if not isinstance(start, Start):
        raise ProtocolError(f"client {party.name!r} expected the server's start, got "
                            f"{type(start).__name__}", party=party.name, step="task")
    try:
        if unusable is not None:
            raise ProtocolError(unusable, party=party.name, step="join")
        state, saved = _resume_state(party.name, start.resumed_from, stored, resume)
    except ProtocolError as exc:
        party.send(server, "join", Refusal(round=0, reason=RESUME_MISMATCH, detail=str(exc)))
        raise
    party.send(server, "join", Ready(resumed_from=start.resumed_from))
    if ckpt_path is not None and stored is None:
        # this run's (empty) state replaces an old one
        save_checkpoint(ckpt_path, with_settings(saved, settings))
    trained = 0
    dim: int | None = None  # the model's length, once known: it never changes
    losses: list[float] = []
    while True:
        msg = party.recv(server, "task", timeout=task_timeout)
        if isinstance(msg, AggStep):
            reply = own.on_step(party, server=server, step=msg)
            if reply is not None:
                party.send(server, "agg", AggReply(round=msg.round, phase=msg.phase,
                                                   body=reply))
            del msg, reply
            continue
        if isinstance(msg, Finish):
            final = None if msg.params is None else _check_vector(
                own.open(msg.params), dim, f"the final model client {party.name!r} got")
            return ClientResult(params=final,
                                rounds_trained=trained, n_train=learner.n_train,
                                n_eval=learner.n_eval, losses=losses)
        if not isinstance(msg, Task):
            raise ProtocolError(f"client {party.name!r} got an unexpected message: "
                                f"{type(msg).__name__}", party=party.name, step="task")
        if msg.initial and trained:
            # the plain model comes with a client's first task only: later ones come
            # through open(), whose checks (an aggregate's MAC) a plain model would skip
            raise ProtocolError(f"client {party.name!r} got a plain initial model from "
                                f"{server!r} in round {msg.round}, after its first task",
                                party=party.name, step="task")
        params = np.asarray(msg.params) if msg.initial else own.open(msg.params)
        params = _check_vector(params, dim, f"the global model client {party.name!r} got")
        dim = params.size
        accuracy = float("nan")
        if msg.evaluate and learner.n_eval > 0:
            accuracy = float(learner.evaluate(params))
        config = LocalConfig(lr=msg.lr, momentum=msg.momentum,
                             weight_decay=msg.weight_decay, prox_mu=msg.prox_mu,
                             share=msg.share)
        outcome = learner.train(params, epoch=msg.epoch, step=msg.step, steps=msg.steps,
                                batch_size=msg.batch_size, config=config, state=state)
        state = outcome.state
        trained += 1
        losses.append(outcome.loss)
        if ckpt_path is not None:
            rounds = [*list(saved["rounds"])[-1:], msg.round]
            states = [*list(saved["states"])[-1:], state]
            saved = {"rounds": rounds, "states": states}
            save_checkpoint(ckpt_path, with_settings(saved, settings))
        try:
            # a half that scans the upload itself (NaN, inf, max_abs) is its one pass
            new = _check_vector(outcome.params, params.size,
                                f"the new model of client {party.name!r}",
                                values=not getattr(own, "checks_values", False))
            payload = own.payload(party, server=server, round=msg.round, params=new,
                                  base=params, weight=float(msg.weight))
            # the new model goes before the upload is encoded, where the payload is another
            # array (masked, encrypted): the encoding is a copy of the payload
            loss = outcome.loss
            del new, outcome
        except ValidationError as exc:
            # an honest client never uploads what it cannot encode: it leaves the run and
            # says why, so the server records a malformed update, not a crash
            party.send(server, "update", Refusal(round=msg.round, reason=MALFORMED,
                                                 detail=str(exc)))
            raise ValidationError(f"client {party.name!r} cannot upload its update of round "
                                  f"{msg.round} and leaves the run: {exc}") from exc
        party.send(server, "update", Update(round=msg.round, payload=payload,
                                            steps=msg.steps, loss=loss, accuracy=accuracy))
        # msg.params is a view of the received buffer: let go of it and of the upload
        # before waiting, or every idle client holds a model or two
        del msg, params, payload


def _resume_state(name: str, resumed_from: int, stored: dict[str, Any] | None,
                  resume: bool) -> tuple[Vector | None, dict[str, Any]]:
    """Return the learner's state to resume after round ``resumed_from`` and what to keep.

    ``stored`` is the client's checkpoint (None when it does not resume or has none).
    A client keeps its learner's state after each of its last two rounds; it resumes from
    the latest at or before the server's round (None if it had not trained yet).
    Checkpoints written before the state was generic name it ``momenta``.

    Raises
    ------
    ProtocolError
        If that state is not the one the server resumes from, naming both rounds.
    """
    empty: dict[str, Any] = {"rounds": [], "states": []}
    if stored is None:
        if resumed_from > 0:
            why = ("it has no checkpoint to resume from" if resume
                   else "it was started without resume")
            raise ProtocolError(
                f"client {name!r} would start from round 0 ({why}), but the server resumes "
                f"after round {resumed_from}; restart the client with resume (--resume) and "
                "its checkpoint", party=name, step="join")
        return None, empty
    rounds = [int(r) for r in stored.get("rounds", [])]
    states = list(stored.get("states", stored.get("momenta", [])))
    if len(states) != len(rounds):
        raise ProtocolError(f"client {name!r}: its checkpoint is damaged (rounds {rounds}, "
                            f"{len(states)} states)", party=name, step="join")
    if resumed_from == 0:
        if rounds:
            raise ProtocolError(
                f"client {name!r} resumes from its checkpoint (round {max(rounds)}), but the "
                "server starts afresh (round 0); restart both with resume, or both without",
                party=name, step="join")
        return None, empty
    earlier = [r for r in rounds if r <= resumed_from]
    if not earlier:
        if len(rounds) > 1:  # it trained before the later of the two: its state is lost
            raise ProtocolError(
                f"client {name!r} holds the state of rounds {rounds}, none at or before round "
                f"{resumed_from}, after which the server resumes", party=name, step="join")
        return None, empty
    k = rounds.index(max(earlier))
    value = states[k]
    state = None if value is None else np.array(value, dtype=np.float32)
    # rounds after the server's were lost with it and will be trained again
    return state, {"rounds": [rounds[k]], "states": [value]}
