"""Protections that wrap any aggregator: the chaos permutation and client-level DP.

Both compose with every aggregator of :mod:`islands.aggregation` (plain mean, secure
aggregation, additive sharing, CKKS, Paillier) and with each other, and
:func:`build_aggregator` builds the stack a job's ``protect = [...]`` names:

* the base is at most one of ``"secagg"``, ``"secaggplus"`` (SecAgg+), ``"additive"``,
  ``"ckks"``, ``"paillier"`` (default: the plain mean);
* ``"chaos"`` permutes every upload's coordinates first (APFL's CKKS over a chaos
  permutation is ``["ckks", "chaos"]``);
* ``"dp"`` clips and noises the update before anything else;
* or, instead of a base that hides updates, one robust rule against poisoning clients
  (``"median"``, ``"trimmed-mean"``, ``"krum"``, ``"norm-bound"``,
  :mod:`islands.aggregation.robust`), which needs every update on its own: it is refused
  with the hiding bases and with ``"chaos"``, and composes with ``"dp"`` with local noise
  (each client clips and noises its own update; the rule post-processes them, so the
  accountant's ε, that of each noised update, still holds).

Chaos permutation (APFL §3.2, ALGORITHMS.md §3): the clients share a logistic-map key
(x₀, λ) dealt by the first client (:mod:`islands.aggregation.keys`) and permute their model by
the argsort of the orbit; since all use the same permutation, the coordinate-wise
aggregate of the permuted vectors is the permuted aggregate, which the clients
unpermute. The server never holds the key. It is obfuscation, not encryption, and on
its own it does not even hide which coordinate is which: the initial model goes out in
the clear, coordinates a client leaves unchanged match it exactly and give the server
pairs (coordinate, position), and the orbit's rank map is smooth, so a fit from those
pairs places the others. It is therefore accepted only over a protection that hides the
values from the server (secure aggregation, additive sharing, CKKS, Paillier), and
refused alone or over the plain mean (:class:`ChaosPermutation`).

Client-level differential privacy (DP-FedAvg; the tutorial §3.3, McMahan et al. 2018):
each client clips its update Δ = w − w_global to L2 ≤ S and adds Gaussian noise from a
cryptographic generator; the server averages with equal weights. Noise is added

* ``"local"``: N(0, σ²S²) by each client (its update alone is (ε, δ)-DP; the mean is
  over-noised by √m), or
* ``"distributed"``: N(0, σ²S²/t) by each client, t the *guaranteed* number of
  survivors (secure aggregation's threshold, or ``guaranteed``): any t or more
  survivors' sum carries at least N(0, σ²S²). Only the sum is protected, so it is refused
  over an aggregator that shows single updates (the plain mean), and needs
  ``guaranteed`` except over secure aggregation, whose threshold is then t.

Every client holds its own clip S, σ and t (the client half is built from the same
:class:`ClientDP` it was given) and checks what the server asks for each round: the
server may ask for more protection (larger σ, smaller S, smaller t), never less; less
stops the client with a :class:`~islands.errors.ProtocolError` naming the server, the
parameter, the value expected and the value received, before its update leaves. Under
secure aggregation a client's t is at most the threshold its own secure-aggregation
half accepted for the round. A round that finishes with fewer survivors k than the t
its noise was calibrated for would carry only σ·√(k/t): the server refuses it before
anything is unmasked or decrypted (:class:`~islands.errors.ProtocolError`), so the
reported ε is always the one of the noise really in the released sum.

Each round is one Gaussian mechanism on the clipped sum (sensitivity S for adding or
removing one client) with noise multiplier σ. Amplification by sampling (rate
q = ``fraction``) is claimed only when the strategy draws its cohorts secretly, as a
Poisson sample from the CSPRNG (``FedAvg(sampling="poisson")``); a cohort drawn from the
public job seed is predictable, and is charged q = 1. The server draws the cohort and
knows it: the amplified ε is the guarantee against whoever sees the released models,
while against the server itself every round counts with q = 1.
:class:`islands.privacy.PrivacyAccountant` composes the rounds (RDP by default) and the
server reports both after every round, each labelled: the (ε, δ) of the run (amplified
when the cohort is secret) and the (ε, δ) against the server, every round a client was
asked to train in counted at q = 1, the largest over the clients (``spent`` and
``spent_against_server``); with ``target_epsilon`` the run stops before the round that
would take the first above the target.

Sample-level differential privacy (``"dp-sgd"``, :class:`SampleDP`): every client trains
with DP-SGD (Abadi et al. 2016; :mod:`islands.hfl.torch.dpsgd`, per-sample gradients from
Opacus), which protects each *training example* of that client, whatever the other
parties do with its updates. It is not an aggregator: it changes local training, so it
composes with every protection above. Each client's budget is its own (ε, δ) over its
own rows; both the client (which refuses to overspend) and the server (which stops the
run before a round that would, :class:`SampleBudget`) account it, and the server
reports the largest ε among the clients.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.aggregation.additive import AdditiveSharing
from islands.aggregation.base import (
    Aggregator,
    AggStep,
    ClientHalf,
    MeanAggregator,
    PlainServerHalf,
    RoundAggregation,
    ServerHalf,
    ServerLink,
)
from islands.aggregation.config import ROBUST, SECTIONS, ClientDPConfig, SampleDPConfig
from islands.aggregation.homomorphic import CKKSAggregator, PaillierAggregator
from islands.aggregation.keys import KeyReceiver, deal_key
from islands.aggregation.robust import (
    KrumAggregator,
    MedianAggregator,
    NormBoundAggregator,
    TrimmedMeanAggregator,
)
from islands.aggregation.secagg import (
    SecAggClient,
    SecAggServer,
    SecureAggregation,
    round_threshold,
)
from islands.aggregation.secaggplus import (
    SecAggPlusClient,
    SecAggPlusServer,
    SecureAggregationPlus,
)
from islands.config import ProtocolConfig
from islands.crypto import chaos
from islands.errors import JobError, ProtocolError, ValidationError, invalid_parameter
from islands.privacy import (
    PrivacyAccountant,
    clip_l2,
    distributed_noise_std,
    effective_noise_multiplier,
    gaussian_noise,
)
from islands.runtime import Party, wire
from islands.validation import is_int

__all__ = [
    "BASES",
    "PAIRWISE_BASES",
    "SAMPLE_LEVEL",
    "ChaosPermutation",
    "ClientDP",
    "DPNoiseRequest",
    "Protection",
    "SampleAccount",
    "SampleBudget",
    "SampleDP",
    "build_aggregator",
    "build_sample_dp",
    "can_retrain",
]

Vector = NDArray[np.float32]


HIDING_BASES = ("secagg", "secaggplus", "additive", "ckks", "paillier")
"""Base aggregators that hide single updates' values from the server."""


# --------------------------------------------------------------------------- messages
@wire.register(name="hfl.DPNoiseRequest")
@dataclass(frozen=True)
class DPNoiseRequest:
    """``dp-noise``, server → client: the round's noise; the client checks it against its own.

    The codec checks the field types on decode; the client checks the values.
    """

    noise_multiplier: float
    clip: float
    guaranteed: int


def _layers(agg: Any) -> list[Any]:
    """Return the aggregator and every one it wraps (its ``inner`` chain), outermost first."""
    out: list[Any] = []
    while agg is not None and len(out) < 64:
        out.append(agg)
        agg = getattr(agg, "inner", None)
    return out


def _base_name(agg: Aggregator | None) -> str:
    if agg is None:
        return "mean"
    return str(getattr(_layers(agg)[-1], "name", type(agg).__name__))


PAIRWISE_BASES = ("secagg", "secaggplus", "additive")
"""Bases whose rounds need at least two clients (masks or shares between them)."""


def can_retrain(agg: Aggregator | None) -> bool:
    """Whether every coalition of clients can be trained again under ``agg`` alone.

    Not under client-level DP (each retrained model would be a release the run's ε does
    not count) nor over a base whose round needs two clients (a coalition of one).
    """
    layers = _layers(agg)
    return (not any(isinstance(layer, ClientDP) for layer in layers)
            and _base_name(agg) not in PAIRWISE_BASES)


def _secagg_threshold(agg: Aggregator) -> float | int | None:
    """Return the threshold of the secure aggregation in ``agg``'s stack, or None."""
    for layer in _layers(agg):
        if isinstance(layer, SecureAggregation):
            return layer.threshold
    return None


def _robust_refusal(rule: str, protection: str) -> str:
    """Say why robust rule ``rule`` cannot run under ``protection``."""
    what = {"secagg": "secure aggregation shows the server only the sum",
            "secaggplus": "SecAgg+ shows the server only the sum",
            "additive": "additive sharing shows the server only the sum",
            "ckks": "under CKKS the server holds only ciphertexts and their sum",
            "paillier": "under Paillier the server holds only ciphertexts and their sum",
            "chaos": "the chaos permutation runs only over a base that hides the updates "
                     "(secure aggregation, additive sharing, CKKS or Paillier)"}[protection]
    return (f"the robust rule {rule!r} needs every client's update on its own (it ranks, "
            f"trims or clips single updates), but {what}: the server never sees single "
            f"updates there, so {rule!r} cannot be combined with {protection!r}; choose "
            "between protecting the updates from the server and screening them for "
            "poisoning")


# --------------------------------------------------------------------------- chaos
def _chaos_secret() -> tuple[bytes, bytes]:
    key = chaos.generate_chaos_key()
    return struct.pack("<dd", key.x0, key.lam), b""


class ChaosPermutation:
    """APFL's chaos permutation of the uploads, around an aggregator that hides values.

    Parameters
    ----------
    inner : Aggregator
        What aggregates the permuted vectors (CKKS in the APFL paper): secure
        aggregation, additive sharing, CKKS or Paillier, possibly under client-level DP.

    Raises
    ------
    ValidationError
        Over the plain mean (or without ``inner``): the permutation alone does not hide
        which coordinate is which (module docstring).
    """

    def __init__(self, inner: Aggregator | None = None) -> None:
        base = _base_name(inner)
        if base in ROBUST:
            raise ValidationError(_robust_refusal(base, "chaos"))
        if inner is None or base not in HIDING_BASES:
            raise ValidationError(
                f"the chaos permutation does not hide the coordinates on its own (the "
                f"server pairs unchanged coordinates with the clear initial model and fits "
                f"the rest), and over {base!r} it does not hide the values either; use it "
                f"over one of {list(HIDING_BASES)}, e.g. protect = ['ckks', 'chaos']")
        self.inner = inner
        self.name = f"chaos+{self.inner.name}"

    def client_half(self) -> _ChaosClient:
        """Make a client half: permutes before the inner upload, unpermutes after."""
        return _ChaosClient(self.inner.client_half())

    def server_half(self) -> _ChaosServer:
        """Make the server half: deals the key (it never sees it), then the inner half."""
        return _ChaosServer(self.inner.server_half())

    def __repr__(self) -> str:
        return f"ChaosPermutation({self.inner!r})"


class _ChaosClient:
    def __init__(self, inner: ClientHalf) -> None:
        self.inner = inner
        self.key: chaos.ChaosKey | None = None
        self._index: NDArray[np.int64] | None = None
        self.keys = KeyReceiver("chaos", _chaos_secret, self._install)

    def _install(self, secret: bytes) -> None:
        if len(secret) != 16:
            raise ValidationError("the chaos key dealt is malformed")
        x0, lam = struct.unpack("<dd", secret)
        self.key = chaos.ChaosKey(x0=x0, lam=lam)
        self._index = None
        return None

    def index(self, n: int) -> NDArray[np.int64]:
        if self.key is None:
            raise ValidationError("no chaos key has been dealt to this client")
        if self._index is None or self._index.size != n:
            self._index = chaos.permutation(self.key, n)
        return self._index

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        if self.keys.handles(step):
            return self.keys.on_step(party, step, server=server)
        return self.inner.on_step(party, server=server, step=step)

    def open(self, payload: Any) -> Vector:
        opened = self.inner.open(payload)
        return np.asarray(chaos.unpermute(opened, self.index(opened.size)), dtype=np.float32)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> Any:
        index = self.index(params.size)
        return self.inner.payload(party, server=server, round=round,
                                  params=chaos.permute(params, index),
                                  base=chaos.permute(base, index), weight=weight)


class _ChaosServer(PlainServerHalf):
    def __init__(self, inner: ServerHalf) -> None:
        self.inner = inner

    def setup(self, link: ServerLink, clients: Sequence[str]) -> list[str]:
        _, dealt = deal_key(link, list(clients), "chaos", lambda public: None)
        return self.inner.setup(link, dealt)

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> RoundAggregation:
        return self.inner.start(link, round=round, clients=clients, weights=weights, dim=dim)

    def set_sampling_rate(self, rate: float | None) -> None:
        self.inner.set_sampling_rate(rate)

    def spent(self) -> tuple[float, float] | None:
        return self.inner.spent()

    def spent_against_server(self) -> tuple[float, float] | None:
        return self.inner.spent_against_server()

    def exhausted(self) -> bool:
        return self.inner.exhausted()

    def reveal(self, payload: Any) -> Vector | None:
        return None  # permuted: the server does not know which coordinate is which

    def get_state(self) -> dict[str, Any]:
        return self.inner.get_state()

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.inner.set_state(state)


# --------------------------------------------------------------------------- DP


class ClientDP:
    """Client-level differential privacy (clip, Gaussian noise, accountant) around an aggregator.

    Parameters
    ----------
    inner : Aggregator, default=MeanAggregator()
        What aggregates the noised updates.
    clip : float, default=1.0
        S, the L2 bound of each client's update w − w_global.
    noise_multiplier : float, default=1.0
        σ: the sum of the survivors' updates carries noise of standard deviation ≥ σS.
    noise : {"local", "distributed"}, default="local"
        Where the noise is added (module docstring).
    guaranteed : int, optional
        t for ``"distributed"`` noise: the number of survivors the noise is calibrated
        for. Default: the threshold of the secure aggregation in the stack; required
        over the other aggregators that hide single updates (additive sharing, CKKS,
        Paillier). A round with fewer survivors is refused.
    delta : float, default=1e-5
        δ of the reported (ε, δ).
    target_epsilon : float, optional
        Stop the run before the round that would spend more.
    accountant : {"rdp", "pld"}, default="rdp"
        dp-accounting's accountant.
    """

    def __init__(self, inner: Aggregator | None = None, *, clip: float = 1.0,
                 noise_multiplier: float = 1.0, noise: str = "local",
                 guaranteed: int | None = None, delta: float = 1e-5,
                 target_epsilon: float | None = None, accountant: str = "rdp") -> None:
        self.inner = MeanAggregator() if inner is None else inner
        config = ClientDPConfig.build(
            None, clip=clip, noise_multiplier=noise_multiplier, noise=noise,
            guaranteed=guaranteed, delta=delta, target_epsilon=target_epsilon,
            accountant=accountant)
        self.clip, self.noise_multiplier = config.clip, config.noise_multiplier
        self.noise, self.guaranteed, self.delta = config.noise, config.guaranteed, config.delta
        self.target_epsilon, self.accountant = config.target_epsilon, config.accountant
        if noise == "distributed":
            self._check_distributed()
        self.name = f"dp+{self.inner.name}"

    def _check_distributed(self) -> None:
        base = _base_name(self.inner)
        if base not in HIDING_BASES:
            raise ValidationError(
                f"ClientDP: noise='distributed' adds only a share of the noise to each "
                f"update and protects only their sum, but the {base!r} aggregator shows "
                f"the server every single update; use noise='local', or aggregate with "
                f"one of {list(HIDING_BASES)}")
        threshold = _secagg_threshold(self.inner)
        if threshold is None and self.guaranteed is None and base != "secaggplus":
            raise ValidationError(
                f"ClientDP: noise='distributed' over {base!r} needs 'guaranteed', the "
                "number of survivors the noise is calibrated for, held by every client "
                "(only secure aggregation's threshold gives it otherwise)")
        if (self.guaranteed is not None and is_int(threshold)
                and self.guaranteed > int(threshold)):  # type: ignore[arg-type]
            raise invalid_parameter(
                "guaranteed", "ClientDP", f"an int <= the secure aggregation threshold "
                f"{threshold} (secure aggregation may finish with that many)",
                self.guaranteed)

    def client_half(self) -> _DPClient:
        """Make a client half: clip and noise, then the inner upload."""
        return _DPClient(self.inner.client_half(), self)

    def server_half(self) -> _DPServer:
        """Make the server half: equal weights, noise calibration, the accountant."""
        return _DPServer(self)

    def __repr__(self) -> str:
        return (f"ClientDP({self.inner!r}, clip={self.clip}, noise_multiplier="
                f"{self.noise_multiplier}, noise={self.noise!r})")


def _refuse(party: Party, server: str, rnd: int, parameter: str, expected: str,
            received: Any) -> ProtocolError:
    return ProtocolError(
        f"client {party.name!r} refuses round {rnd}: the server {server!r} asks for "
        f"{parameter}={received!r}, less protection than this client's own DP "
        f"configuration allows (expected {expected}); its update does not leave",
        party=party.name, step="dp-noise")


class _DPClient:
    """The client's DP half: it holds its own S, σ and t and checks the server's."""

    def __init__(self, inner: ClientHalf, config: ClientDP) -> None:
        self.inner, self.config = inner, config
        self.round = 0
        self.clip = config.clip
        self.std: float | None = None

    def _own_guaranteed(self, party: Party, server: str, rnd: int) -> int:
        """Return the largest t this client accepts this round (1 for local noise)."""
        cfg = self.config
        if cfg.noise == "local":
            return 1
        bound = cfg.guaranteed
        for layer in _layers(self.inner):
            if isinstance(layer, (SecAggClient, SecAggPlusClient)):
                # the fewest survivors of any sum the server can unmask: t for the full
                # graph; for SecAgg+ its floor if colluders and dropouts cannot cut the
                # graph, else t (an arc)
                least = int(layer.round_guaranteed)
                if layer.round != rnd or least < 1:
                    raise ProtocolError(
                        f"client {party.name!r}: the server {server!r} sent the noise of "
                        f"round {rnd} before secure aggregation's set-up of that round",
                        party=party.name, step="dp-noise")
                bound = least if bound is None else min(bound, least)
        if bound is None:  # refused when ClientDP is built
            raise ProtocolError(f"client {party.name!r} has no guaranteed number of "
                                "survivors for distributed noise", party=party.name,
                                step="dp-noise")
        return bound

    def on_step(self, party: Party, *, server: str, step: AggStep) -> Any:
        if step.phase == "dp-noise":
            self._check_noise(party, server, step)
            return None
        return self.inner.on_step(party, server=server, step=step)

    def _check_noise(self, party: Party, server: str, step: AggStep) -> None:
        cfg, body, rnd = self.config, step.body, step.round
        if not isinstance(body, DPNoiseRequest):
            raise ProtocolError(f"client {party.name!r} got a malformed noise request from "
                                f"{server!r} in round {rnd}", party=party.name,
                                step="dp-noise")
        sigma, clip, t = body.noise_multiplier, body.clip, body.guaranteed
        if (not isinstance(sigma, float) or not np.isfinite(sigma)
                or sigma < cfg.noise_multiplier):
            raise _refuse(party, server, rnd, "noise_multiplier",
                          f">= {cfg.noise_multiplier!r}", sigma)
        if not isinstance(clip, float) or not np.isfinite(clip) or not 0 < clip <= cfg.clip:
            raise _refuse(party, server, rnd, "clip", f"in (0, {cfg.clip!r}]", clip)
        own_t = self._own_guaranteed(party, server, rnd)
        if not is_int(t) or not 1 <= t <= own_t:
            raise _refuse(party, server, rnd, "guaranteed", f"an int in [1, {own_t}]", t)
        self.round, self.clip = rnd, clip
        self.std = distributed_noise_std(sigma, clip, int(t))
        if cfg.noise == "distributed":
            # an aggregate the server opens for the clients must sum at least t uploads
            for layer in _layers(self.inner):
                binding = getattr(layer, "binding", None)
                if binding is not None:
                    binding.require(rnd, int(t))

    def open(self, payload: Any) -> Vector:
        return self.inner.open(payload)

    def payload(self, party: Party, *, server: str, round: int, params: Vector,
                base: Vector, weight: float) -> Any:
        if self.round != round or self.std is None:
            raise ProtocolError(
                f"client {party.name!r} refuses to upload round {round}: the server "
                f"{server!r} sent no noise request for it, and this client's configuration "
                "adds DP noise to every update", party=party.name, step="update")
        delta = np.asarray(params, np.float64) - np.asarray(base, np.float64)
        clipped, _ = clip_l2(delta, self.clip)
        noised = clipped + gaussian_noise(delta.shape, self.std)
        self.std = None  # one noise request per upload
        private = (np.asarray(base, np.float64) + noised).astype(np.float32)
        return self.inner.payload(party, server=server, round=round, params=private,
                                  base=base, weight=weight)


class _DPServer(PlainServerHalf):
    def __init__(self, config: ClientDP) -> None:
        self.config = config
        self.inner = config.inner.server_half()
        self.clients = 0
        self.steps = 0
        self.rounds_in: dict[str, int] = {}  # rounds each client was asked to train in
        self.rounds_unknown = 0  # rounds of an older checkpoint, charged to every client
        self._accountant: Any = None
        self._server_accountant: Any = None
        self._rate: float | None = None

    def setup(self, link: ServerLink, clients: Sequence[str]) -> list[str]:
        out = self.inner.setup(link, clients)
        self.clients = len(out)
        return out

    def set_global(self, params: Vector | None) -> None:
        """Pass the round's global model to the inner half (norm bounding uses it)."""
        self.inner.set_global(params)

    def set_sampling_rate(self, rate: float | None) -> None:
        """Claim amplification by sampling at ``rate`` (None: q = 1).

        The server role calls this with the strategy's ``secret_sampling_rate``: only a
        cohort drawn secretly (Poisson, from the CSPRNG) amplifies privacy.
        """
        self._rate = 1.0 if rate is None else min(1.0, float(rate))
        self._accountant = None

    def _guaranteed(self, round_clients: int) -> int:
        cfg = self.config
        if cfg.noise == "local":
            return 1
        t = None
        for layer in _layers(self.inner):
            if isinstance(layer, SecAggServer) and layer.federation is not None:
                # the t secure aggregation advertised for this round (its start ran first)
                t = round_threshold(layer.threshold, round_clients,
                                    federation=layer.federation,
                                    min_clients=layer.min_clients)
            if isinstance(layer, SecAggPlusServer) and layer.guaranteed:
                t = layer.guaranteed  # what its clients hold (start ran first)
        if cfg.guaranteed is not None:
            t = cfg.guaranteed if t is None else min(t, cfg.guaranteed)
        assert t is not None  # ClientDP refuses distributed noise without either
        return t

    def start(self, link: ServerLink, *, round: int, clients: Sequence[str],
              weights: Mapping[str, float], dim: int) -> RoundAggregation:
        cfg = self.config
        # equal weights: the sum of clipped updates has sensitivity S
        agg = self.inner.start(link, round=round, clients=clients,
                               weights={c: 1.0 for c in clients}, dim=dim)
        participants = list(agg.participants)
        t = self._guaranteed(len(clients))
        if cfg.noise == "distributed" and len(participants) < t:
            raise ProtocolError(
                f"round {round}: {len(participants)} clients, fewer than the {t} the "
                "distributed noise is calibrated for", party=link.name, step="dp-noise")
        request = DPNoiseRequest(noise_multiplier=float(cfg.noise_multiplier),
                                 clip=float(cfg.clip), guaranteed=int(t))
        link.send(round, "dp-noise", {c: request for c in participants})
        return _DPRound(agg, self, t, link.name)

    def account(self, participants: Sequence[str]) -> None:
        """Count one release: a step of the run, and one round for each participant."""
        self.steps += 1
        for c in participants:
            self.rounds_in[c] = self.rounds_in.get(c, 0) + 1

    def _acct(self) -> Any:
        cfg = self.config
        if self._accountant is None:
            self._accountant = PrivacyAccountant(
                cfg.noise_multiplier, sampling_rate=self._rate or 1.0, delta=cfg.delta,
                method=cfg.accountant)
        acct = self._accountant
        if acct.steps < self.steps:
            acct.step(self.steps - acct.steps)
        return acct

    def spent(self) -> tuple[float, float]:
        """(ε, δ) against whoever sees the released models (amplified for a secret cohort)."""
        acct = self._acct()
        eps, delta = acct.spent()
        return float(eps), float(delta)

    def spent_against_server(self) -> tuple[float, float]:
        """(ε, δ) against the server, which draws the cohort: the largest over the clients.

        Every round a client was asked to train in counts as one release with q = 1
        (the server knows who took part), whether or not its update arrived; the
        accountant is the run's own, at q = 1.
        """
        cfg = self.config
        if self._server_accountant is None:
            self._server_accountant = PrivacyAccountant(
                cfg.noise_multiplier, sampling_rate=1.0, delta=cfg.delta,
                method=cfg.accountant)
        acct = self._server_accountant
        most = self.rounds_unknown + max(self.rounds_in.values(), default=0)
        if acct.steps < most:
            acct.step(most - acct.steps)
        eps, delta = acct.spent()
        return float(eps), float(delta)

    def exhausted(self) -> bool:
        target = self.config.target_epsilon
        return target is not None and bool(self._acct().would_exceed(target, 1))

    def reveal(self, payload: Any) -> Vector | None:
        return self.inner.reveal(payload)

    def get_state(self) -> dict[str, Any]:
        return {"inner": self.inner.get_state(), "steps": self.steps,
                "rate": -1.0 if self._rate is None else self._rate,
                "rounds_in": dict(self.rounds_in), "rounds_unknown": self.rounds_unknown}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if not state:
            return
        self.inner.set_state(state.get("inner", {}))
        self.steps = int(state.get("steps", 0))
        rate = float(state.get("rate", -1.0))
        self._rate = None if rate < 0 else rate
        # a checkpoint of before issue 37 has no per-client count: charge every client
        # every round it holds, the bound for a client in all of them
        saved = state.get("rounds_in")
        self.rounds_in = ({str(c): int(k) for c, k in saved.items()}
                          if isinstance(saved, Mapping) else {})
        self.rounds_unknown = int(state.get("rounds_unknown", 0 if isinstance(saved, Mapping)
                                            else self.steps))
        self._accountant = None
        self._server_accountant = None


class _DPRound:
    def __init__(self, inner: RoundAggregation, server: _DPServer, guaranteed: int,
                 name: str) -> None:
        self.inner, self.server = inner, server
        self.guaranteed, self.name = guaranteed, name
        self.participants = inner.participants
        self.weights = inner.weights

    def add(self, client: str, payload: Any) -> None:
        self.inner.add(client, payload)

    def finish(self, survivors: Sequence[str]) -> Any:
        k, t = len(survivors), self.guaranteed
        if k < t:  # before the inner finish: nothing is unmasked or decrypted
            sigma = self.server.config.noise_multiplier
            raise ProtocolError(
                f"client-level DP: only {k} clients survived the round, fewer than the "
                f"t={t} its distributed noise is calibrated for; their sum would carry "
                f"noise multiplier {effective_noise_multiplier(sigma, t, k):.4g} instead of "
                f"the {sigma:.4g} the accountant charges, so the round is not released",
                party=self.name, step="update")
        out = self.inner.finish(survivors)
        self.server.account(self.participants)
        if isinstance(out, dict) and "round" in out:
            # an encrypted aggregate the clients open: they check the t it claims against
            # the one each contributor's MAC was made with (aggregation.homomorphic)
            out = {**out, "guaranteed": int(t)}
        return out


# --------------------------------------------------------------------------- DP-SGD
class SampleDP:
    """Sample-level differential privacy: DP-SGD settings shared by a federation.

    Each local step draws a Poisson sample of the client's rows (each row independently
    with probability q = b/n, b the client's batch size, n its training rows), clips
    every per-sample gradient to L2 ≤ C, adds N(0, σ²C²) from a cryptographic generator
    to their sum and divides by b (:mod:`islands.hfl.torch.dpsgd`). One step is one release of
    the Poisson-subsampled Gaussian mechanism with noise multiplier σ and sampling rate
    q; :class:`islands.privacy.PrivacyAccountant` composes them.

    Parameters
    ----------
    clip : float, default=1.0
        C, the per-sample gradient L2 bound.
    noise_multiplier : float, default=1.0
        σ: the noise std divided by C.
    delta : float, default=1e-5
        δ of the reported (ε, δ); keep it below 1/n.
    target_epsilon : float, optional
        Stop the run before a round that would take any client past this ε.
    accountant : {"rdp", "pld"}, default="rdp"
        dp-accounting's accountant.
    """

    name = "dp-sgd"

    def __init__(self, *, clip: float = 1.0, noise_multiplier: float = 1.0,
                 delta: float = 1e-5, target_epsilon: float | None = None,
                 accountant: str = "rdp") -> None:
        config = SampleDPConfig.build(None, clip=clip, noise_multiplier=noise_multiplier,
                                      delta=delta, target_epsilon=target_epsilon,
                                      accountant=accountant)
        self.clip, self.noise_multiplier = config.clip, config.noise_multiplier
        self.delta, self.target_epsilon = config.delta, config.target_epsilon
        self.accountant = config.accountant

    def sampling_rate(self, batch_size: int, n: int) -> float:
        """Return q = b/n, the Poisson sampling rate for ``n`` rows and batch size ``b``."""
        if not is_int(n) or n < 1:
            raise invalid_parameter("n", "SampleDP.sampling_rate", "an int >= 1", n)
        if not is_int(batch_size) or not 1 <= batch_size <= n:
            raise invalid_parameter("batch_size", "SampleDP.sampling_rate",
                                    f"an int in [1, {n}]", batch_size)
        return int(batch_size) / int(n)

    def new_accountant(self, batch_size: int, n: int) -> Any:
        """Return a fresh :class:`~islands.privacy.PrivacyAccountant` for one client."""
        return PrivacyAccountant(self.noise_multiplier,
                                 sampling_rate=self.sampling_rate(batch_size, n),
                                 delta=self.delta, method=self.accountant)

    def __repr__(self) -> str:
        return (f"SampleDP(clip={self.clip}, noise_multiplier={self.noise_multiplier}, "
                f"delta={self.delta}, target_epsilon={self.target_epsilon})")


class SampleBudget:
    """The server's view of every client's DP-SGD budget (one accountant per client).

    The server knows each client's rows (its join), batch size and steps per round (it
    sets them), so it can account exactly what the clients account themselves.

    Parameters
    ----------
    dp
        The federation's DP-SGD settings.
    counts, batch_sizes
        Training rows and batch size per client.
    """

    def __init__(self, dp: SampleDP, counts: Mapping[str, int],
                 batch_sizes: Mapping[str, int]) -> None:
        self.dp = dp
        self.accountants = {c: dp.new_accountant(int(batch_sizes[c]), int(counts[c]))
                            for c in counts}

    def would_exceed(self, clients: Sequence[str], steps: int) -> bool:
        """Whether ``steps`` more steps would take any of ``clients`` past the target."""
        target = self.dp.target_epsilon
        return target is not None and any(
            self.accountants[c].would_exceed(target, steps) for c in clients)

    def step(self, clients: Sequence[str], steps: int) -> None:
        """Account ``steps`` DP-SGD steps for each of ``clients``."""
        for c in clients:
            self.accountants[c].step(steps)

    def spent(self) -> tuple[float, float]:
        """Return the largest (ε, δ) among the clients."""
        return max(a.epsilon() for a in self.accountants.values()), self.dp.delta

    def get_state(self) -> dict[str, Any]:
        """Return every client's accountant state, for checkpoints."""
        return {c: a.get_state() for c, a in self.accountants.items()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`get_state` saved (clients not in the run are ignored)."""
        for c, st in state.items():
            if c in self.accountants:
                self.accountants[c].set_state(st)


class SampleAccount:
    """A client's own DP-SGD budget: checked before local steps, accounted after them.

    The client's side of what :class:`SampleBudget` accounts on the server's. The
    accountant is made at the first call, for that call's batch size (the sampling
    rate q = b/n it assumes). Kept by whoever holds the client's learner state
    (:class:`~islands.hfl.torch.learner.TorchLearner`, or the driver-side learner of the Ray
    backend), whoever runs the steps.

    Parameters
    ----------
    dp
        The DP-SGD settings (:class:`~islands.aggregation.protect.SampleDP`).
    n_train
        The client's training rows n.
    """

    def __init__(self, dp: SampleDP, n_train: int) -> None:
        self.dp = dp
        self.n_train = int(n_train)
        self._accountant: Any = None
        self._batch_size: int | None = None

    def check(self, batch_size: int, steps: int) -> None:
        """Refuse ``steps`` steps at ``batch_size`` that the budget does not allow.

        Raises
        ------
        ValidationError
            If the steps would take the client past ``target_epsilon``, or the batch size
            changed (the accountant's sampling rate would be wrong).
        """
        if self._accountant is None:
            self._accountant = self.dp.new_accountant(batch_size, self.n_train)
            self._batch_size = batch_size
        elif batch_size != self._batch_size:
            raise ValidationError(
                f"DP-SGD: the batch size changed from {self._batch_size} to {batch_size}; "
                "the privacy accountant assumes one sampling rate")
        target = self.dp.target_epsilon
        if target is not None and self._accountant.would_exceed(target, steps):
            raise ValidationError(
                f"DP-SGD: {steps} more steps would take this client past its target "
                f"epsilon {target} (spent {self._accountant.epsilon():.3g})")

    def step(self, steps: int) -> None:
        """Account ``steps`` steps that ran (after a successful :meth:`check`)."""
        self._accountant.step(steps)

    def spent(self) -> tuple[float, float]:
        """Return the (ε, δ) spent so far."""
        if self._accountant is None:
            return (0.0, self.dp.delta)
        eps, delta = self._accountant.spent()
        return (float(eps), float(delta))


# --------------------------------------------------------------------------- jobs
BASES = ("mean", "secagg", "secaggplus", "additive", "ckks", "paillier", *ROBUST)
WRAPPERS = ("chaos", "dp")
SAMPLE_LEVEL = ("dp-sgd",)


@dataclass(frozen=True)
class Protection:
    """The protections a run names and their settings: a job's ``protect = [...]`` and sections.

    Attributes
    ----------
    names
        Among ``secagg``, ``secaggplus``, ``additive``, ``ckks``, ``paillier``, the robust rules
        ``median``, ``trimmed-mean``, ``krum``, ``norm-bound`` (at most one base),
        ``chaos``, ``dp`` and ``dp-sgd``, in the order given.
    settings
        The configuration (:data:`~islands.aggregation.config.SECTIONS`) of each named
        protection that was given settings; the others take their defaults.
    """

    names: tuple[str, ...] = ()
    settings: Mapping[str, ProtocolConfig] = field(default_factory=dict)

    @classmethod
    def build(cls, protect: Sequence[str],
              options: Mapping[str, Mapping[str, Any]] | None = None) -> Protection:
        """Check ``protect`` and each protection's keyword arguments in ``options``.

        Raises
        ------
        ValidationError
            For an unknown name, two bases, a repeated name, options of a name not used,
            or a refused setting (the standard message, naming the protection's class).
        """
        names = _check_names(protect)
        stray = [k for k in (options or {}) if k not in names]
        if stray:
            raise ValidationError(f"options given for protections not in protect: {stray}")
        return cls(names, {name: SECTIONS[name].build(None, **dict(values))
                           for name, values in (options or {}).items()})

    @classmethod
    def from_table(cls, raw: Mapping[str, Any], where: str) -> Protection:
        """Read ``protect`` and the protection sections of a job or federation table.

        Every value is checked, and the stack is built once (so settings that only
        conflict together, such as distributed noise over the plain mean, are refused
        now, before anything runs).

        Raises
        ------
        JobError
            Naming ``where``, the section and the key.
        """
        protect = raw.get("protect", [])
        if not isinstance(protect, list) or not all(
                isinstance(p, str) and p in SECTIONS for p in protect):
            raise JobError(f"{where}: 'protect' must be a list of names among "
                           f"{sorted(SECTIONS)}; got {protect!r}")
        settings: dict[str, ProtocolConfig] = {}
        for name, config in SECTIONS.items():
            if name not in raw:
                continue
            if name not in protect:
                raise JobError(f"{where}: section [{name}] is given but protect = {protect} "
                               f"does not use {name!r}")
            if not isinstance(raw[name], Mapping):
                raise JobError(f"{where}: [{name}] must be a section (a table)")
            settings[name] = config.from_table(raw[name], f"{where} [{name}]")
        try:
            protection = cls(_check_names(protect), settings)
            protection.aggregator()
            protection.sample_dp()
        except (ValidationError, TypeError, ImportError) as exc:
            raise JobError(f"{where}: protect = {protect}: {exc}") from exc
        return protection

    def options(self) -> dict[str, dict[str, Any]]:
        """Return the settings given, per protection, as keyword arguments."""
        return {name: config.model_dump(exclude_unset=True)
                for name, config in self.settings.items()}

    def _kwargs(self, name: str) -> dict[str, Any]:
        config = self.settings.get(name)
        return {} if config is None else dict(config)

    def aggregator(self) -> Aggregator:
        """Build the aggregator stack: the base, then ``chaos``, then ``dp`` around it."""
        bases = [n for n in self.names if n in BASES]
        base = bases[0] if bases else "mean"
        agg: Aggregator
        if base == "secagg":
            agg = SecureAggregation(**self._kwargs("secagg"))
        elif base == "secaggplus":
            agg = SecureAggregationPlus(**self._kwargs("secaggplus"))
        elif base == "additive":
            agg = AdditiveSharing(**self._kwargs("additive"))
        elif base == "ckks":
            agg = CKKSAggregator(**self._kwargs("ckks"))
        elif base == "paillier":
            agg = PaillierAggregator(**self._kwargs("paillier"))
        elif base == "median":
            agg = MedianAggregator(**self._kwargs("median"))
        elif base == "trimmed-mean":
            agg = TrimmedMeanAggregator(**self._kwargs("trimmed-mean"))
        elif base == "krum":
            agg = KrumAggregator(**self._kwargs("krum"))
        elif base == "norm-bound":
            agg = NormBoundAggregator(**self._kwargs("norm-bound"))
        else:
            agg = MeanAggregator()
        if "chaos" in self.names:
            agg = ChaosPermutation(agg, **self._kwargs("chaos"))
        if "dp" in self.names:
            agg = ClientDP(agg, **self._kwargs("dp"))
        return agg

    def sample_dp(self) -> SampleDP | None:
        """Return the DP-SGD settings ``dp-sgd`` asks for, or None."""
        return SampleDP(**self._kwargs("dp-sgd")) if "dp-sgd" in self.names else None


def _check_names(protect: Sequence[str]) -> tuple[str, ...]:
    names = list(protect)
    unknown = [n for n in names if n not in BASES + WRAPPERS + SAMPLE_LEVEL]
    if unknown:
        raise ValidationError(f"unknown protection(s) {unknown}; choose among "
                              f"{list(BASES[1:] + WRAPPERS + SAMPLE_LEVEL)}")
    if len(set(names)) != len(names):
        raise ValidationError(f"protect lists a protection twice: {names}")
    robust = [n for n in names if n in ROBUST]
    hiding = [n for n in names if n in (*HIDING_BASES, "chaos")]
    if robust and hiding:
        raise ValidationError(_robust_refusal(robust[0], hiding[0]))
    bases = [n for n in names if n in BASES]
    if len(bases) > 1:
        raise ValidationError(f"protect names two base aggregators {bases}; choose one")
    return tuple(names)


def build_sample_dp(protect: Sequence[str], options: Mapping[str, Mapping[str, Any]]
                    | None = None) -> SampleDP | None:
    """Return the :class:`SampleDP` that ``protect`` asks for (``"dp-sgd"``), or None."""
    return Protection.build(protect, options).sample_dp()


def build_aggregator(protect: Sequence[str], options: Mapping[str, Mapping[str, Any]]
                     | None = None) -> Aggregator:
    """Build the aggregator stack for ``protect`` (a job's ``protect = [...]``).

    Parameters
    ----------
    protect
        Names among ``secagg``, ``secaggplus``, ``additive``, ``ckks``, ``paillier``, ``median``,
        ``trimmed-mean``, ``krum``, ``norm-bound`` (at most one base; a robust rule is
        refused with the four before it and with ``chaos``), ``chaos`` and ``dp``, in
        any order; ``dp-sgd`` is allowed and left to
        :func:`build_sample_dp` (it changes training, not aggregation).
    options
        Keyword arguments per name, e.g. ``{"dp": {"clip": 1.0}, "secagg":
        {"threshold": 0.6}}``.

    Raises
    ------
    ValidationError
        For an unknown name, two bases, a repeated name, options of a name not used, or
        a robust rule with a protection that hides single updates (saying why).
    """
    return Protection.build(protect, options).aggregator()
