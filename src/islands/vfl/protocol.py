"""The roles of vertical linear and logistic regression (Yang et al. 2019, Tables 1–2).

Parties: ``C`` the coordinator (holds the private key, sees no data), ``B`` the
active party (features X_B, labels y, the intercept) and one or more passive parties
``A_1 … A_k`` (features X_k). Rows are already aligned (:mod:`islands.psi`). The maths
is :mod:`islands.vfl.maths`: residual e = Σ_k u_k + v, gradient (c1/b)·Xᵀe + λθ, loss
c0 + (c2/b)·Σe² + penalty. [[·]] is additively homomorphic encryption under C's key:
Okamoto–Uchiyama on HEU (``he="ou"``, :mod:`islands.crypto.heu`), islands' DJN Paillier
(``"paillier"``, :mod:`islands.crypto.paillier_ops`), or the same messages in the clear
(``"none"``, :mod:`islands.vfl.cleartext`).

Messages, in order (every one a wire message in the transcript):

==========  ===========  =================================================================
tag         sender → to  payload
==========  ===========  =================================================================
hello       A_k, B → C   :class:`Hello`: rows and features (C checks the rows agree)
setup       C → all      :class:`Setup`: the public key, the DJN base h_s
                         (Paillier), the plan, every party's feature count
                         — for every mini-batch of b rows (same plan for every party) —
u           A_k → B      [[ũ_k]]: b ciphertexts of A_k's partial scores
residual    B → A_k      [[ẽ]] = Π_k [[ũ_k]] · Enc(ṽ): b ciphertexts, re-randomised
                         by B's fresh encryption of ṽ
gradient    A_k, B → C   [[G + R]]: Π_i [[ẽ_i]]^(x̃_ij) · Enc(R_j) for every feature j,
                         R_j from the CSPRNG: uniform modulo n under Paillier
                         (one-time pad); under OU, whose plaintext modulus is
                         secret, R_j = 2^k + U, U uniform below 2^(k+128), for
                         |G| < 2^k (:func:`islands.vfl.maths.value_bounds`)
share       A_k → B      [[Σ_i ẽ_i·ũ_k,i + penalty_k]]: one ciphertext
loss        B → C        [[Σ_i ẽ_i²+ penalties]] = Π_k share_k · Π_i [[ẽ_i]]^(ṽ_i) · Enc(pen_B)
masked      C → A_k, B   G + R (mod n) for the party's features: decrypted, still
                         masked; under OU C refuses any value outside (0, 2^(k+129))
                         — after every epoch —
status      C → all      :class:`Status`: epoch, its loss, whether to go on
==========  ===========  =================================================================

A and B remove their masks (G = masked − R, modulo n and read as a signed integer under
Paillier), scale,
add λθ and step. What each party sees: C sees uniformly random masked gradients and the
loss of every batch (Table 1 reveals the loss to C too); A_k sees ciphertexts and its
gradient sums X_kᵀe, B ciphertexts and X_Bᵀe, Σe, i.e. X_Bᵀ(Σ_k u_k). From a batch of no
more rows than those equations a party would solve for e (the labels, in the first
batch) or for A's scores, so every party refuses such a batch size and the last batch of
an epoch joins the one before when it is too short
(:func:`islands.vfl.maths.check_batch_rows`, ``docs/vfl.md``).
Nothing defends against a party that deviates (honest-but-curious, non-colluding, as in
the paper); B must re-randomise [[ẽ]], otherwise A could divide it by its own [[ũ]] and
read B's v = u_B − y in the clear.

Two departures from the letter of Table 1, same information flow: the regulariser λθ is
added after unmasking (each party knows its own θ) rather than encrypted, and the loss
is assembled from shares Σ_i ẽ_i·ũ_k,i sent after the residual instead of A's Σ_i ũ_i²
sent before it, because with several passive parties the cross terms ũ_k·ũ_l cannot be
formed under additive encryption; for one A both give the same L.

Inference (Table 2): :func:`inference_coordinator` sends row IDs to every party, each
returns its partial scores in the clear (:func:`inference_party`), C adds them.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from islands.arrays import Array, IntArray
from islands.config import check_same_plan, plan_text
from islands.crypto import heu, paillier
from islands.crypto.paillier_ops import VectorCipher, decrypt_signed
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party, wire
from islands.vfl import maths, ss
from islands.vfl.cleartext import ClearCipher
from islands.vfl.keys import KEY_BITS_RULE, KEY_FLOOR, min_peer_key_bits
from islands.vfl.maths import Objective, Precision

__all__ = [
    "CoordinatorResult",
    "Hello",
    "PartyModel",
    "Plan",
    "Setup",
    "Status",
    "active",
    "coordinator",
    "epoch_seconds",
    "inference_coordinator",
    "inference_party",
    "passive",
]

OBJECTIVES = {"linear": maths.LINEAR, "logistic": maths.LOGISTIC}
HE = ("ou", "paillier", "none")
ENGINES = ("ss", "he")
SIGMOIDS = ("taylor", "poly5")
POLY5_NEEDS = "sigmoid='poly5' needs engine='ss' and the logistic objective"


@dataclass(frozen=True)
class Plan:
    """The public hyper-parameters every party must share, resolved (no defaults).

    Build it with :meth:`islands.vfl.config.VflConfig.plan`, which holds the defaults
    and constraints; :func:`check_plan` is each party's own check of what it was given.

    Attributes
    ----------
    objective
        ``"linear"`` or ``"logistic"``.
    learning_rate, lam
        Step size η and L2 penalty λ.
    epochs, batch_size
        Passes over the aligned rows and rows per mini-batch.
    seed
        Seed of the public batch order (:func:`islands.vfl.maths.batch_plan`).
    tol
        Stop once an epoch's mean loss improves by less than ``tol`` (relative); None
        runs every epoch.
    feature_bits, score_bits
        Fixed-point precision (:class:`islands.vfl.maths.Precision`).
    engine
        ``"ss"``: additive secret sharing with C as the dealer (:mod:`islands.vfl.ss`);
        ``"he"``: the paper's homomorphic encryption, scheme ``he``.
    he
        Under ``engine="he"``: ``"ou"`` (Okamoto–Uchiyama on HEU), ``"paillier"``
        (islands' DJN Paillier); ``"none"`` runs the same messages in the clear
        (:mod:`islands.vfl.cleartext`), as a baseline for benchmarks only. None under
        ``engine="ss"``.
    key_bits
        The smallest modulus every data party accepts from C: the bits of the Paillier n,
        or the approximate bits of the OU n = p²q (2048: about 112-bit security).
    insecure_keys
        Whether ``key_bits`` may be below 2048 (:mod:`islands.vfl.keys`): tests only.
    djn
        Paillier: whether C may hand out a DJN base h_s for short-exponent encryption;
        False makes the parties refuse a base and encrypt with textbook randomness r^n.
    sigmoid
        ``"taylor"``: the second-order Taylor loss of the paper; ``"poly5"`` (logistic,
        ``engine="ss"`` only): the degree-5 polynomial of :data:`islands.vfl.maths.POLY5`,
        one more round per batch (:mod:`islands.vfl.ss`).
    """

    objective: str
    learning_rate: float
    lam: float
    epochs: int
    batch_size: int
    seed: int
    tol: float | None
    feature_bits: int
    score_bits: int
    engine: str
    he: str | None
    key_bits: int
    insecure_keys: bool
    djn: bool
    sigmoid: str

    @property
    def loss(self) -> Objective:
        """The model's :class:`~islands.vfl.maths.Objective`."""
        return OBJECTIVES[self.objective]

    @property
    def precision(self) -> Precision:
        """The fixed-point :class:`~islands.vfl.maths.Precision`."""
        return Precision(self.feature_bits, self.score_bits)

    def text(self) -> str:
        """Return the plan as canonical JSON: what the coordinator sends and parties compare."""
        return plan_text(asdict(self))


@wire.register(name="vfl.Hello")
@dataclass(frozen=True)
class Hello:
    """A data party's row and feature counts."""

    rows: int = field(metadata={"ge": 1})
    features: int = field(metadata={"ge": 0})


@wire.register(name="vfl.Setup")
@dataclass(frozen=True)
class Setup:
    """The coordinator's public key, the plan and every data party's feature count.

    ``public_key`` is the OU key's HEU serialisation (``he="ou"``), the Paillier modulus n
    (``"paillier"``, with ``djn_base`` h_s or None) or empty (``"none"``). ``features``
    holds B's count without the intercept, as the hellos gave them.
    """

    public_key: bytes
    djn_base: int | None
    plan: str
    features: dict[str, int]


@wire.register(name="vfl.Status")
@dataclass(frozen=True)
class Status:
    """End of an epoch: whether training goes on (the loss stays with C)."""

    epoch: int = field(metadata={"ge": 0})
    go_on: bool


@dataclass
class Clock:
    """Seconds one party spent on homomorphic work, ring work, plain compute and messaging.

    ``he`` counts encryption and decryption (``engine="he"``), ``ring`` the share
    arithmetic of ``engine="ss"``; ``messaging`` is the time inside send and receive,
    which includes waiting for peers.
    """

    he: float = 0.0
    compute: float = 0.0
    messaging: float = 0.0
    ring: float = 0.0

    @contextmanager
    def timing(self, what: str) -> Any:
        """Add the time spent in the ``with`` block to ``what``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, what, getattr(self, what) + time.perf_counter() - t0)


@dataclass
class PartyModel:
    """What a data party ends with: its own weights (B's last entry is the intercept)."""

    name: str
    theta: Array
    epochs: int
    clock: Clock = field(default_factory=Clock)


@dataclass
class CoordinatorResult:
    """What the coordinator ends with: the loss of every batch and epoch."""

    batch_losses: list[float]
    epoch_losses: list[float]
    epochs: int
    key_bits: int
    clock: Clock = field(default_factory=Clock)
    converged: bool = False


def check_plan(plan: Any, owner: str) -> Plan:
    """Validate a :class:`Plan`; errors name the field and ``owner``."""
    if not isinstance(plan, Plan):
        raise ValidationError(f"{owner}: plan must be a islands.vfl.protocol.Plan")
    if plan.objective not in OBJECTIVES:
        raise ValidationError(f"{owner}: objective must be one of {sorted(OBJECTIVES)}; got "
                              f"{plan.objective!r}")
    for name in ("learning_rate", "lam"):
        value = getattr(plan, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                np.isfinite(value) and 0 <= value <= 1e6) or (
                name == "learning_rate" and value == 0):
            raise ValidationError(f"{owner}: {name} must be a finite float "
                                  f"{'in (0' if name == 'learning_rate' else 'in [0'}, 1e6]; got "
                                  f"{value!r}")
    for name in ("epochs", "batch_size"):
        value = getattr(plan, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValidationError(f"{owner}: {name} must be an int >= 1; got {value!r}")
    if isinstance(plan.seed, bool) or not isinstance(plan.seed, int) or plan.seed < 0:
        raise ValidationError(f"{owner}: seed must be an int >= 0; got {plan.seed!r}")
    if plan.tol is not None and (isinstance(plan.tol, bool) or not isinstance(
            plan.tol, (int, float)) or not plan.tol > 0):
        raise ValidationError(f"{owner}: tol must be None or a float > 0; got {plan.tol!r}")
    if plan.engine not in ENGINES:
        raise ValidationError(f"{owner}: engine must be one of {list(ENGINES)}; got "
                              f"{plan.engine!r}")
    if plan.engine == "ss" and plan.he is not None:
        raise ValidationError(f"{owner}: he={plan.he!r} applies to engine='he'; under "
                              "engine='ss' it must be None")
    if plan.engine == "he" and plan.he not in HE:
        raise ValidationError(f"{owner}: he must be one of {list(HE)}; got {plan.he!r}")
    if not isinstance(plan.insecure_keys, bool):
        raise ValidationError(f"{owner}: insecure_keys must be a bool; got "
                              f"{plan.insecure_keys!r}")
    if (isinstance(plan.key_bits, bool) or not isinstance(plan.key_bits, int)
            or not paillier.MIN_KEY_BITS <= plan.key_bits <= paillier.MAX_KEY_BITS
            or plan.key_bits % 256 or (plan.key_bits < KEY_FLOOR and not plan.insecure_keys)):
        raise ValidationError(f"{owner}: key_bits must be {KEY_BITS_RULE}; got "
                              f"{plan.key_bits!r}")
    if not isinstance(plan.djn, bool):
        raise ValidationError(f"{owner}: djn must be a bool; got {plan.djn!r}")
    if plan.sigmoid not in SIGMOIDS:
        raise ValidationError(f"{owner}: sigmoid must be one of {list(SIGMOIDS)}; got "
                              f"{plan.sigmoid!r}")
    if plan.sigmoid == "poly5" and (plan.engine != "ss" or plan.objective != "logistic"):
        raise ValidationError(f"{owner}: {POLY5_NEEDS}; got engine={plan.engine!r} and "
                              f"objective={plan.objective!r}")
    plan.precision  # noqa: B018 - validates the bit counts
    return plan


def _check_names(party: Party, active: str, passive: Sequence[str]) -> list[str]:
    """Return [*passive, active] after checking the names are distinct peers."""
    names = [*passive, active]
    if not passive or len(set(names)) != len(names) or party.name in passive:
        raise ValidationError(f"party {party.name!r}: the passive parties {list(passive)} "
                              f"and the active party {active!r} must be distinct, with at "
                              "least one passive party")
    return names


def _send(party: Party, clock: Clock, to: str, tag: str, payload: Any) -> None:
    with clock.timing("messaging"):
        party.send(to, tag, payload)


def _recv(party: Party, clock: Clock, frm: str, tag: str) -> Any:
    with clock.timing("messaging"):
        return party.recv(frm, tag)


def _join(party: Party, clock: Clock, coordinator: str, plan: Plan, rows: int,
          features: int, active: str, parties: Sequence[str] | None = None,
          ) -> tuple[Any, int, maths.ValueBounds]:
    """Say hello to C, receive and check the key, the plan and the feature counts.

    The batch size is checked against this party's own feature count before the hello and
    against every party's count, as C relays them, before anything derived from the
    data is sent (:func:`islands.vfl.maths.check_batch_rows`). B names all the data
    ``parties``; a passive party knows only itself and B. Returns the cipher, the
    fold threshold of :func:`islands.vfl.maths.batch_plan` and the plan's
    :func:`~islands.vfl.maths.value_bounds`.
    """
    owner = f"party {party.name!r}"
    maths.check_batch_rows(plan.batch_size, {party.name: features}, active, owner, rows)
    _send(party, clock, coordinator, "hello", Hello(rows, features))
    setup = _recv(party, clock, coordinator, "setup")
    if not isinstance(setup, Setup):
        raise ProtocolError(f"coordinator {coordinator!r} sent a malformed setup",
                            party=party.name, step="setup")
    counts = setup.features
    names = set(parties) if parties is not None else {party.name, active}
    if plan.engine == "ss" and isinstance(counts, dict):
        # every data party sends its masked block to every other: the roster must be the
        # federation's, confirmed by B (_confirm_roster), and never hold C, who knows the
        # masks
        if coordinator in counts:
            raise ProtocolError(f"coordinator {coordinator!r} named itself a data party in "
                                "the setup (it would read the masked features it dealt)",
                                party=party.name, step="setup")
        names |= set(counts)
    if (not isinstance(counts, dict) or not names <= set(counts)
            or (parties is not None and set(counts) != names)
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                       for v in counts.values())):
        raise ProtocolError(f"coordinator {coordinator!r} sent the feature counts "
                            f"{counts!r}; expected one int >= 0 for each of {sorted(names)}",
                            party=party.name, step="setup")
    if counts[party.name] != features:
        raise ProtocolError(f"coordinator {coordinator!r} sent a wrong 'features' for party "
                            f"{party.name!r}: expected {features} (the count it sent), got "
                            f"{counts[party.name]}", party=party.name, step="setup")
    check_same_plan(plan.text(), setup.plan, party=party.name, peer=coordinator)
    if plan.engine == "ss" and parties is None:
        _confirm_roster(party, clock, coordinator, active, counts)
    min_rows = maths.check_batch_rows(plan.batch_size, counts, active, owner, rows)
    bounds = maths.value_bounds(plan.precision, plan.batch_size, len(counts) - 1)
    if plan.engine == "ss":
        if setup.public_key or setup.djn_base is not None:
            raise ProtocolError(f"coordinator {coordinator!r} sent a key under engine='ss'",
                                party=party.name, step="setup")
        return dict(counts), min_rows, bounds
    if plan.he == "none":
        return ClearCipher(), min_rows, bounds
    where = f"party {party.name!r} (setup from {coordinator!r})"
    min_bits = min_peer_key_bits(plan.key_bits, plan.insecure_keys)
    if plan.he == "ou":
        if setup.djn_base is not None:
            raise ProtocolError(f"coordinator {coordinator!r} sent a DJN base with an OU key",
                                party=party.name, step="setup")
        try:
            cipher = heu.OuCipher.from_public_bytes(setup.public_key, owner=where,
                                                    min_bits=min_bits)
        except ValidationError as exc:
            raise ProtocolError(str(exc), party=party.name, step="setup") from None
        _check_room(cipher, bounds, where)
        return cipher, min_rows, bounds
    try:
        public_key = paillier.public_key_from_bytes(setup.public_key, min_bits=min_bits)
    except ValidationError as exc:
        raise ProtocolError(f"{where}: {exc}", party=party.name, step="setup") from None
    djn_base = None
    if setup.djn_base is not None:
        if not plan.djn:
            raise ProtocolError(f"coordinator {coordinator!r} sent a DJN base, but the plan "
                                "says djn=False (textbook randomness)", party=party.name,
                                step="setup")
        djn_base = int(paillier.check_djn_base(public_key, setup.djn_base, where))
    return VectorCipher(public_key, djn_base), min_rows, bounds


def _confirm_roster(party: Party, clock: Clock, coordinator: str, active: str,
                    counts: Any) -> None:
    """Refuse, as a passive party under ``engine="ss"``, a roster B does not confirm.

    C relays the data parties' names in its setup, and each one receives this party's
    masked block; C knows the masks, so a name C added (itself under another name, or an
    organisation working with it) would read the features. B names the federation's data
    parties itself (``roster``) before any share leaves this party.
    """
    roster = _recv(party, clock, active, "roster")
    if not (isinstance(roster, list) and all(isinstance(v, str) for v in roster)):
        raise ProtocolError(f"party {active!r} sent a malformed roster", party=party.name,
                            step="roster")
    if not isinstance(counts, dict) or set(roster) != set(counts):
        raise ProtocolError(f"coordinator {coordinator!r} named the data parties "
                            f"{sorted(counts) if isinstance(counts, dict) else counts!r}, "
                            f"but party {active!r} names {sorted(roster)}: no share is sent",
                            party=party.name, step="roster")


def _widths(features: dict[str, int], active: str) -> dict[str, int]:
    """Every data party's encoded width: its feature count, B's plus the intercept."""
    return {name: count + (name == active) for name, count in features.items()}


def _check_room(cipher: heu.OuCipher, bounds: maths.ValueBounds, owner: str) -> None:
    """Refuse a plan whose masked gradients or loss the OU plaintext space cannot hold."""
    cipher.check_room(bounds.gradient_bits + heu.MASK_BITS + 1, "the masked gradients", owner)
    cipher.check_room(bounds.loss_bits, "the loss", owner)


def _penalty(cipher: Any, value: int, bounds: maths.ValueBounds, owner: str) -> int:
    """Return a party's loss penalty; under OU it must stay inside the loss's range."""
    if isinstance(cipher, heu.OuCipher) and abs(value) >= 1 << bounds.penalty_bits:
        raise ValidationError(f"{owner}: the L2 penalty λ‖θ‖² has grown beyond the loss's "
                              "fixed-point range (training diverged); lower learning_rate or "
                              "lam")
    return value


def _unmask(cipher: Any, masked: Any, masks: list[int], bounds: maths.ValueBounds,
            party: Party, frm: str) -> list[int]:
    try:
        out: list[int] = cipher.unmask(masked, masks, bounds.gradient_bits)
    except ValidationError as exc:
        raise ProtocolError(f"coordinator {frm!r} sent malformed masked gradients ({exc})",
                            party=party.name, step="masked") from None
    return out


def _status(party: Party, clock: Clock, coordinator: str, epoch: int) -> bool:
    status = _recv(party, clock, coordinator, "status")
    if not isinstance(status, Status) or status.epoch != epoch:
        raise ProtocolError(f"coordinator {coordinator!r} sent a malformed status",
                            party=party.name, step="status")
    return bool(status.go_on)


def _encode_features(X: Any, owner: str, precision: Precision,
                     intercept: bool) -> tuple[IntArray, Array]:
    enc = maths.encode_features(X, precision, intercept=intercept, owner=owner)
    # exact: numerators are below 2^(30 + feature_bits) <= 2^52
    return enc, enc.astype(np.float64) / float(1 << precision.feature_bits)


def epoch_seconds(transcript: Any, active: str = "B") -> list[float]:
    """Seconds of every epoch of a run, from C's setup and end-of-epoch messages to B."""
    marks = [r.time for r in transcript if r.tag == "setup" and r.receiver == active]
    marks += [r.time for r in transcript if r.tag == "status" and r.receiver == active]
    return [b - a for a, b in itertools.pairwise(marks)]


def passive(party: Party, X: Any, *, coordinator: str = "C", active: str = "B",
            plan: Plan) -> PartyModel:
    """Play a passive party A_k: features only.

    Parameters
    ----------
    party
        This party's context.
    X
        Its features for the aligned rows (n × p_k), standardised.
    coordinator, active
        Names of C and B.
    plan
        The shared :class:`Plan`.

    Returns
    -------
    PartyModel
        θ_k.
    """
    owner = f"party {party.name!r}"
    plan = check_plan(plan, owner)
    precision, clock = plan.precision, Clock()
    with clock.timing("compute"):
        x_enc, x_float = _encode_features(X, owner, precision, intercept=False)
    n, p = x_enc.shape
    cipher, min_rows, bounds = _join(party, clock, coordinator, plan, n, p, active)
    if plan.engine == "ss":
        def scores(rows: IntArray, theta: Array) -> IntArray:
            if plan.sigmoid == "poly5":
                return maths.poly5_scores(x_float[rows] @ theta, owner)
            return maths.encode(x_float[rows] @ theta, precision.score_bits,
                                maths.MAX_ABS_SCORE, "partial scores", owner)

        theta, epochs = ss.run_data_party(
            party, clock, plan, x_enc, x_float, scores, _widths(cipher, active), active,
            coordinator, min_rows, lambda epoch: _status(party, clock, coordinator, epoch))
        return PartyModel(party.name, theta, epochs, clock)
    theta = np.zeros(p)
    epochs_run = 0
    for epoch in range(plan.epochs):
        for rows in maths.batch_plan(n, plan.batch_size, epoch, plan.seed, min_rows):
            with clock.timing("compute"):
                u = maths.encode(x_float[rows] @ theta, precision.score_bits,
                                 maths.MAX_ABS_SCORE, "partial scores", owner)
            with clock.timing("he"):
                blob = cipher.to_bytes(cipher.encrypt(u))
            _send(party, clock, active, "u", blob)
            residual = _recv(party, clock, active, "residual")
            with clock.timing("he"):
                e = cipher.from_bytes(residual, rows.size, "residual", owner)
                sums = cipher.weighted(e, np.hstack([x_enc[rows], u[:, None]]))
                masks = cipher.masks(p, bounds.gradient_bits)
                penalty = _penalty(cipher, maths.penalty_units(
                    theta, plan.lam, rows.size, plan.loss, precision), bounds, owner)
                extra = cipher.encrypt([*masks, penalty])
                gradient = cipher.add(sums[:p], extra[:p])
                share = cipher.add(sums[p:], extra[p:])
                g_blob, s_blob = cipher.to_bytes(gradient), cipher.to_bytes(share)
            _send(party, clock, coordinator, "gradient", g_blob)
            _send(party, clock, active, "share", s_blob)
            masked = _recv(party, clock, coordinator, "masked")
            with clock.timing("compute"):
                g_int = _unmask(cipher, masked, masks, bounds, party, coordinator)
                grad = maths.gradient_from_sum(g_int, theta, plan.lam, rows.size, plan.loss,
                                               precision)
                theta = theta - plan.learning_rate * grad
        epochs_run = epoch + 1
        if not _status(party, clock, coordinator, epoch):
            break
    return PartyModel(party.name, theta, epochs_run, clock)


def active(party: Party, X: Any, y: Any, *, coordinator: str = "C",
           passive: Sequence[str] = ("A",), plan: Plan) -> PartyModel:
    """Play the active party B: features, labels and the intercept.

    Parameters
    ----------
    party
        This party's context.
    X
        Its features for the aligned rows (n × p_B), standardised.
    y
        Targets: reals for the linear model, ±1 for the logistic one.
    coordinator, passive
        Names of C and of the passive parties.
    plan
        The shared :class:`Plan`.

    Returns
    -------
    PartyModel
        θ_B with the intercept last.
    """
    owner = f"party {party.name!r}"
    plan = check_plan(plan, owner)
    precision, objective, clock = plan.precision, plan.loss, Clock()
    passive = _check_names(party, party.name, passive)[:-1]
    with clock.timing("compute"):
        x_enc, x_float = _encode_features(X, owner, precision, intercept=True)
        labels = np.asarray(y, dtype=np.float64)
        if labels.shape != (x_enc.shape[0],) or not np.all(np.isfinite(labels)):
            raise ValidationError(f"{owner}: y must be a finite 1-D array with one entry per "
                                  f"row of X ({x_enc.shape[0]}); got shape {labels.shape}")
        if objective is maths.LOGISTIC and not np.all(np.abs(labels) == 1.0):
            raise ValidationError(f"{owner}: the logistic model needs labels in {{-1, +1}}")
    n, p = x_enc.shape
    cipher, min_rows, bounds = _join(party, clock, coordinator, plan, n, p - 1, party.name,
                                     [*passive, party.name])
    if plan.engine == "ss":
        for a in passive:  # B's own roster: each passive party checks C's against it
            _send(party, clock, a, "roster", sorted([*passive, party.name]))
        def scores(rows: IntArray, theta: Array) -> IntArray:
            if plan.sigmoid == "poly5":  # the labels enter the residual on shares
                return maths.poly5_scores(x_float[rows] @ theta, owner)
            return maths.encode(x_float[rows] @ theta - objective.label_factor * labels[rows],
                                precision.score_bits, 4 * maths.MAX_ABS_SCORE,
                                "partial scores", owner)

        theta, epochs = ss.run_data_party(
            party, clock, plan, x_enc, x_float, scores, _widths(cipher, party.name),
            party.name, coordinator, min_rows,
            lambda epoch: _status(party, clock, coordinator, epoch), labels=labels)
        return PartyModel(party.name, theta, epochs, clock)
    theta = np.zeros(p)
    epochs_run = 0
    for epoch in range(plan.epochs):
        for rows in maths.batch_plan(n, plan.batch_size, epoch, plan.seed, min_rows):
            b = rows.size
            with clock.timing("compute"):
                v = maths.encode(x_float[rows] @ theta - objective.label_factor * labels[rows],
                                 precision.score_bits, 4 * maths.MAX_ABS_SCORE,
                                 "partial scores", owner)
            with clock.timing("he"):  # while the passive parties encrypt their scores
                e = cipher.encrypt(v)  # fresh randomness: re-randomises the sum
            us = [_recv(party, clock, a, "u") for a in passive]
            with clock.timing("he"):
                for a, blob in zip(passive, us, strict=True):
                    e = cipher.add(e, cipher.from_bytes(blob, b, "u", f"{owner} (from {a!r})"))
                e_blob = cipher.to_bytes(e)
            for a in passive:
                _send(party, clock, a, "residual", e_blob)
            with clock.timing("he"):
                sums = cipher.weighted(e, np.hstack([x_enc[rows], v[:, None]]))
                masks = cipher.masks(p, bounds.gradient_bits)
                penalty = _penalty(cipher, maths.penalty_units(
                    theta[:-1], plan.lam, b, objective, precision), bounds, owner)
                extra = cipher.encrypt([*masks, penalty])
                g_blob = cipher.to_bytes(cipher.add(sums[:p], extra[:p]))
            _send(party, clock, coordinator, "gradient", g_blob)
            shares = [_recv(party, clock, a, "share") for a in passive]
            with clock.timing("he"):
                loss = cipher.add(sums[p:], extra[p:])
                for a, blob in zip(passive, shares, strict=True):
                    loss = cipher.add(loss, cipher.from_bytes(blob, 1, "share",
                                                              f"{owner} (from {a!r})"))
                loss_blob = cipher.to_bytes(loss)
            _send(party, clock, coordinator, "loss", loss_blob)
            masked = _recv(party, clock, coordinator, "masked")
            with clock.timing("compute"):
                g_int = _unmask(cipher, masked, masks, bounds, party, coordinator)
                grad = maths.gradient_from_sum(g_int, theta, plan.lam, b, objective, precision,
                                               intercept=True)
                theta = theta - plan.learning_rate * grad
        epochs_run = epoch + 1
        if not _status(party, clock, coordinator, epoch):
            break
    return PartyModel(party.name, theta, epochs_run, clock)


def coordinator(party: Party, *, active: str = "B", passive: Sequence[str] = ("A",),
                plan: Plan,
                keys: tuple[Any, Any, int | None] | heu.OuKeyOwner | None = None,
                ) -> CoordinatorResult:
    """Play the coordinator C: make the key, decrypt masked gradients and the loss.

    Parameters
    ----------
    party
        C's context.
    active, passive
        Names of B and of the passive parties.
    plan
        The shared :class:`Plan`; its ``key_bits`` sizes C's key (every data party refuses
        a smaller one) and, under Paillier, ``djn`` makes C generate a DJN key
        (admissible modulus and public base h_s) so the parties can encrypt with short
        fixed-base exponents (:mod:`islands.crypto.paillier`); False keeps textbook
        randomness r^n.
    keys
        Paillier: ``(public_key, private_key, djn_base or None)``; OU: an
        :class:`~islands.crypto.heu.OuKeyOwner`; to use instead of generating a key
        (key generation at 2048 bits takes seconds; tests and audits also use it to read
        what C decrypts).

    Returns
    -------
    CoordinatorResult
    """
    owner = f"coordinator {party.name!r}"
    plan = check_plan(plan, owner)
    precision, clock = plan.precision, Clock()
    data_parties = _check_names(party, active, passive)
    hellos = {}
    for name in data_parties:
        hello = _recv(party, clock, name, "hello")
        if not isinstance(hello, Hello):
            raise ProtocolError(f"party {name!r} sent a malformed hello", party=party.name,
                                step="hello")
        hellos[name] = hello
    rows = {hellos[name].rows for name in data_parties}
    if len(rows) != 1:
        counts = {name: hellos[name].rows for name in data_parties}
        raise ValidationError(f"{owner}: the parties hold different numbers of aligned rows "
                              f"{counts}; align them first (islands.psi)")
    n = rows.pop()
    features = {name: hellos[name].features for name in data_parties}
    min_rows = maths.check_batch_rows(plan.batch_size, features, active, owner, n)
    bounds = maths.value_bounds(precision, plan.batch_size, len(passive))
    if plan.engine == "ss":
        if keys is not None:
            raise ValidationError(f"{owner}: keys apply to engine='he'; engine='ss' uses none")
        ss.check_fits(ss.plan_bounds(plan, len(passive)), owner)
        with clock.timing("messaging"):
            party.broadcast("setup", Setup(b"", None, plan.text(), features), to=data_parties)
        widths = _widths(features, active)
        batch_losses, epoch_losses, epochs_run, converged = ss.run_coordinator(
            party, clock, plan, widths, active, n, min_rows,
            lambda epoch, go_on: party.broadcast("status", Status(epoch, go_on),
                                                 to=data_parties))
        return CoordinatorResult(batch_losses, epoch_losses, epochs_run, 0, clock, converged)
    if plan.he == "ou":
        return _ou_coordinator(party, clock, plan, hellos, features, data_parties, active,
                               n, min_rows, bounds, plan.key_bits, keys)
    if isinstance(keys, heu.OuKeyOwner):
        raise ValidationError(f"{owner}: keys is an OU key but the plan says he={plan.he!r}")
    with clock.timing("he"):
        if plan.he == "none":
            public_key = private_key = djn_base = None
        elif keys is not None:
            public_key, private_key, djn_base = keys
            if djn_base is not None:
                djn_base = int(paillier.check_djn_base(public_key, djn_base, owner))
        elif plan.djn:
            public_key, private_key, djn_base = paillier.generate_djn_keypair(plan.key_bits)
        else:
            public_key, private_key = paillier.generate_keypair(plan.key_bits)
            djn_base = None
    cipher: Any
    if public_key is None:
        cipher = ClearCipher()
        setup = Setup(b"", None, plan.text(), features)
        key_size = 0
    else:
        cipher = VectorCipher(public_key, djn_base, workers=1)
        setup = Setup(paillier.public_key_to_bytes(public_key), djn_base, plan.text(),
                      features)
        key_size = int(public_key.n).bit_length()

    def decrypt(cts: list[Any], sender: str) -> list[int]:
        if private_key is None:
            out: list[int] = cipher.decrypt(cts)
            return out
        return paillier.decrypt(private_key, cts)

    def decrypt_one_signed(cts: list[Any], sender: str) -> int:
        if private_key is None:
            return int(cipher.decrypt_signed(cts)[0])
        return decrypt_signed(private_key, cts)[0]

    return _coordinate(party, clock, plan, setup, cipher, decrypt, decrypt_one_signed,
                       hellos, data_parties, active, n, min_rows, key_size)


def _ou_coordinator(party: Party, clock: Clock, plan: Plan, hellos: dict[str, Hello],
                    features: dict[str, int], data_parties: list[str], active: str, n: int,
                    min_rows: int, bounds: maths.ValueBounds, key_bits: int,
                    keys: Any) -> CoordinatorResult:
    """C under OU: make (or take) the key; decrypt only inside the plan's ranges."""
    owner = f"coordinator {party.name!r}"
    if keys is not None and not isinstance(keys, heu.OuKeyOwner):
        raise ValidationError(f"{owner}: with he='ou', keys must be an "
                              "islands.crypto.heu.OuKeyOwner")
    with clock.timing("he"):
        key = keys if keys is not None else heu.OuKeyOwner(key_bits)
        cipher = key.cipher()
    _check_room(cipher, bounds, owner)
    masked_bits = bounds.gradient_bits + heu.MASK_BITS + 1

    def decrypt(cts: Any, sender: str) -> list[int]:
        return key.decrypt(cts, masked_bits, positive=True, what="masked gradients",
                           sender=f"party {sender!r}", party=party.name, step="gradient")

    def decrypt_loss(cts: Any, sender: str) -> int:
        values = key.decrypt(cts, bounds.loss_bits, positive=False, what="a loss",
                             sender=f"party {sender!r}", party=party.name, step="loss")
        if values[0] < 0:
            raise ProtocolError(f"party {sender!r} sent a negative loss", party=party.name,
                                step="loss")
        return values[0]

    setup = Setup(key.public_bytes(), None, plan.text(), features)
    return _coordinate(party, clock, plan, setup, cipher, decrypt, decrypt_loss, hellos,
                       data_parties, active, n, min_rows, cipher.n_bits)


def _coordinate(party: Party, clock: Clock, plan: Plan, setup: Setup, cipher: Any,
                decrypt: Callable[[Any, str], list[int]],
                decrypt_loss: Callable[[Any, str], int], hellos: dict[str, Hello],
                data_parties: list[str], active: str, n: int, min_rows: int,
                key_size: int) -> CoordinatorResult:
    """C's rounds, whatever the scheme: send the setup, decrypt, report every epoch."""
    owner = f"coordinator {party.name!r}"
    precision, objective = plan.precision, plan.loss
    with clock.timing("messaging"):
        party.broadcast("setup", setup, to=data_parties)
    widths = {name: hellos[name].features + (1 if name == active else 0)
              for name in data_parties}
    batch_losses: list[float] = []
    epoch_losses: list[float] = []
    epochs_run, converged = 0, False
    for epoch in range(plan.epochs):
        total, count = 0.0, 0
        for batch in maths.batch_plan(n, plan.batch_size, epoch, plan.seed, min_rows):
            for name in data_parties:
                blob = _recv(party, clock, name, "gradient")
                with clock.timing("he"):
                    cts = cipher.from_bytes(blob, widths[name], "gradient",
                                            f"{owner} (from {name!r})")
                    masked = decrypt(cts, name)
                _send(party, clock, name, "masked", masked)
            blob = _recv(party, clock, active, "loss")
            with clock.timing("he"):
                value = decrypt_loss(cipher.from_bytes(
                    blob, 1, "loss", f"{owner} (from {active!r})"), active)
            loss = maths.decode_loss(value, batch.size, objective, precision)
            batch_losses.append(loss)
            total += loss * batch.size
            count += batch.size
        epoch_losses.append(total / count)
        epochs_run = epoch + 1
        converged = maths.settled(epoch_losses, plan.tol)
        go_on = epoch + 1 < plan.epochs and not converged
        with clock.timing("messaging"):
            party.broadcast("status", Status(epoch, go_on), to=data_parties)
        if not go_on:
            break
    return CoordinatorResult(batch_losses, epoch_losses, epochs_run, key_size, clock,
                             converged)


# ------------------------------------------------------------------------- inference


def inference_party(party: Party, X: Any, theta: Any, *, coordinator: str = "C",
                    ids: Sequence[Any] | None = None, intercept: bool = False) -> int:
    """Answer the coordinator's queries with this party's partial scores (Table 2).

    Parameters
    ----------
    X
        This party's features, one row per ID.
    theta
        Its weights (with the intercept last when ``intercept``).
    ids
        The IDs of X's rows; None: queries name row positions.

    Returns
    -------
    int
        Rows scored.
    """
    owner = f"party {party.name!r}"
    x = np.asarray(X, dtype=np.float64)
    w = np.asarray(theta, dtype=np.float64)
    width = x.shape[1] + (1 if intercept else 0) if x.ndim == 2 else -1
    if x.ndim != 2 or w.shape != (width,) or not np.all(np.isfinite(x)):
        raise ValidationError(f"{owner}: X must be a finite 2-D array matching theta "
                              f"({w.shape}); got X of shape {x.shape}")
    index = None if ids is None else {v: i for i, v in enumerate(ids)}
    query = party.recv(coordinator, "query")
    if index is None:
        rows = np.asarray(query)
        if rows.dtype.kind not in "iu" or rows.ndim != 1 or (
                rows.size and (rows.min() < 0 or rows.max() >= x.shape[0])):
            raise ProtocolError(f"coordinator {coordinator!r} asked for rows this party "
                                "does not hold", party=party.name, step="query")
    else:
        missing = [v for v in query if v not in index]
        if missing:
            raise ValidationError(f"{owner} holds no row for the IDs {missing[:5]!r}")
        rows = np.asarray([index[v] for v in query], dtype=np.int64)
    scores = x[rows] @ (w[:-1] if intercept else w)
    if intercept:
        scores = scores + w[-1]
    party.send(coordinator, "partial", scores)
    return int(rows.size)


def inference_coordinator(party: Party, query: Any, *, parties: Sequence[str]) -> Array:
    """Ask every party for its partial scores of ``query`` (IDs or rows) and add them.

    Returns
    -------
    ndarray
        z = Σ partial scores, one per queried ID (the decision function).
    """
    payload: Any = (query.astype(np.int64) if isinstance(query, np.ndarray)
                    and query.dtype.kind in "iu" else list(query))
    for name in parties:
        party.send(name, "query", payload)
    total = np.zeros(len(payload))
    for name in parties:
        part = np.asarray(party.recv(name, "partial"), dtype=np.float64)
        if part.shape != total.shape:
            raise ProtocolError(f"party {name!r} sent {part.shape} partial scores for "
                                f"{total.shape[0]} IDs", party=party.name, step="partial")
        total += part
    return total
