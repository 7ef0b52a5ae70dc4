"""Vertical regression's settings, declared once for the estimators, job files and federation files.

:class:`VflConfig` holds every setting of vertical linear and logistic regression
(:mod:`islands.vfl.protocol`) with its one default, constraint and doc line:

- :class:`~islands.vfl.VerticalLinearRegression` and
  :class:`~islands.vfl.VerticalLogisticRegression` build it from their parameters at
  ``fit`` (the class gives ``objective``; ``random_state`` gives ``seed`` through
  :func:`draw_seed`);
- a vertical job file (``islands run``, :mod:`islands.vfl.job`) builds it from its
  ``[model]`` section (``kind`` is the objective) and its ``[parties]`` PSI settings
  (``max_peer_size``, ``max_peer_ratio``, ``psi_engine``);
- a federation file's ``[vfl]`` section builds it with :meth:`VflConfig.from_federation`
  (``model`` is the objective, ``seed`` is used as written).

:meth:`VflConfig.plan` gives the resolved :class:`~islands.vfl.protocol.Plan` every
party runs with, ``key_bits``, ``insecure_keys`` and ``djn`` included: C sizes its key
from them and every data party refuses a smaller key (or a DJN base when ``djn`` is False).
``key_bits`` below 2048 needs ``insecure_keys`` (:mod:`islands.vfl.keys`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import ValidationInfo, field_validator, model_validator

from islands.config import ProtocolConfig, setting
from islands.errors import JobError, ValidationError
from islands.psi import DEFAULT_MAX_PEER_RATIO
from islands.psi.config import Engine, engine_setting
from islands.validation import check_random_state
from islands.vfl.keys import (
    DEFAULT_HE,
    check_key_floor,
    insecure_key_note,
    insecure_keys_setting,
    key_bits_setting,
    resolve_engine,
)
from islands.vfl.protocol import POLY5_NEEDS, Plan

__all__ = ["DEFAULT_HE", "DEFAULT_LEARNING_RATE", "RENAMED", "VflConfig", "describe_he",
           "draw_seed", "resolve_engine"]

RENAMED: Mapping[str, str] = {
    "encryption": "was renamed to 'he' ('ou', 'paillier' or 'none'; 'paillier' and 'none' "
                  "mean what 'encryption' meant)"}
"""Settings that were renamed, each with the message a file or estimator gets for it."""

def describe_he(he: str | None, key_bits: int, djn: bool) -> str:
    """Return the scheme in words, as command-line summaries print it.

    ``he`` None is the secret-sharing engine. Keys below the 2048-bit floor are named as
    such (:func:`~islands.vfl.keys.insecure_key_note`).
    """
    if he is None:
        return "secret sharing over a 189-bit ring, the coordinator dealing"
    note = insecure_key_note(he, key_bits)
    return {"ou": f"{key_bits}-bit Okamoto-Uchiyama (HEU)",
            "paillier": f"{key_bits}-bit Paillier{' (DJN)' if djn else ''}",
            "none": "no encryption (a baseline)"}[he] + (
                f" [INSECURE: {note}]" if note else "")


DEFAULT_LEARNING_RATE: Mapping[str, float] = {"linear": 0.05, "logistic": 0.3}
"""The step each objective gets when ``learning_rate`` is None.

0.05 converges on standardised features whose correlation matrix has largest eigenvalue
below 20; the Taylor loss's curvature is a quarter of that, hence 0.3 for logistic."""

_TOL = 'a float in (0, inf), or None (in files: "none") to run every epoch'
_STEP_LIMIT = 1e6  # |η·gradient| and λθ must stay far inside the fixed-point range


def draw_seed(random_state: Any, owner: str) -> int:
    """Return the public batch-order seed an estimator's ``random_state`` stands for.

    ``random_state=r`` trains exactly as a federation file's ``seed = draw_seed(r, ...)``.
    """
    rng = check_random_state(random_state, owner)
    return int(rng.integers(0, 2**31 - 1))


class VflConfig(ProtocolConfig):
    """The settings of one vertical linear or logistic regression.

    Fields are declared in the order they are checked (the first refused one is
    reported). ``objective`` has no default: the estimator class fixes it, and files
    default to ``"logistic"``.
    """

    OWNER: ClassVar[str] = "vertical regression"

    objective: Literal["linear", "logistic"] = setting(
        ..., "'linear' or 'logistic'",
        "Least squares, or the logistic loss's Taylor expansion (labels ±1).")
    learning_rate: float | None = setting(
        None, "a float in (0, 1e6], or None (0.05 linear, 0.3 logistic)",
        "Step size η; None takes DEFAULT_LEARNING_RATE[objective].", gt=0, le=_STEP_LIMIT)
    lam: float = setting(0.0, "a float in [0, 1e6]",
                         "L2 penalty λ (the intercept is not penalised).",
                         ge=0, le=_STEP_LIMIT)
    epochs: int = setting(20, "an int in [1, inf)", "Most passes over the aligned rows.",
                          ge=1)
    batch_size: int = setting(
        256, "an int in [1, inf)",
        "Rows per mini-batch; each party also refuses batches it could solve for another's "
        "data (islands.vfl.maths.min_batch_rows).", ge=1)
    tol: float | None = setting(
        1e-4, _TOL, "Stop once an epoch's mean loss changes by less than tol (relative).",
        gt=0)
    insecure_keys: bool = insecure_keys_setting()
    key_bits: int = key_bits_setting(
        "Size of the coordinator's modulus (under OU the approximate bits of n = p²q).")
    djn: bool = setting(True, "a bool",
                        "With he='paillier': DJN key with short fixed-base randomness (faster "
                        "encryption); False for textbook Paillier.")
    feature_bits: int = setting(16, "an int in [1, 22]",
                                "Fixed-point fractional bits of the features.", ge=1, le=22)
    score_bits: int = setting(32, "an int in [1, 32]",
                              "Fixed-point fractional bits of scores and residuals.",
                              ge=1, le=32)
    engine: Literal["ss", "he"] | None = setting(
        None, "'ss' or 'he', or None ('he' when he is given, else 'ss')",
        "'ss': additive secret sharing, the coordinator dealing correlated randomness "
        "(islands.vfl.ss; the same model bit for bit, far faster); 'he': the paper's "
        "homomorphic encryption, scheme 'he'.")
    he: Literal["ou", "paillier", "none"] | None = setting(
        None, "'ou', 'paillier' or 'none' (engine='he' only), or None",
        "With engine='he', the scheme: 'ou' (Okamoto-Uchiyama on HEU, needs sf-heu; the "
        "default), 'paillier' (islands' DJN Paillier); 'none' sends the same messages in "
        "the clear: a baseline for benchmarks only, it protects nothing.")
    sigmoid: Literal["taylor", "poly5"] = setting(
        "taylor", "'taylor' or 'poly5'",
        "The logistic loss: 'taylor', the paper's second-order Taylor expansion; 'poly5' "
        "(engine='ss' only), a degree-5 polynomial sigmoid fitted on [-8, 8]: better "
        "calibrated probabilities, one more round per batch (islands.vfl.maths.POLY5).")
    max_peer_size: int | None = setting(
        None, "an int >= 1 or None",
        "With private alignment: the largest ID set a party accepts from the other; given, "
        "it replaces max_peer_ratio.", ge=1)
    max_peer_ratio: float | None = setting(
        DEFAULT_MAX_PEER_RATIO, "a number > 0 and finite, or None",
        "With private alignment and no max_peer_size: the limit is this times the party's "
        "own number of IDs; both None accept any size.", gt=0)
    psi_engine: Engine = engine_setting()
    seed: int = setting(0, "an int in [0, inf)",
                        "Seed of the public mini-batch order (estimators draw it from "
                        "random_state, see draw_seed).", ge=0)

    @field_validator("key_bits")
    @classmethod
    def _key_floor(cls, value: int, info: ValidationInfo) -> int:
        return check_key_floor(value, info.data.get("insecure_keys"))

    @model_validator(mode="before")
    @classmethod
    def _scheme(cls, data: Any) -> Any:
        """Resolve the engine and the scheme (see :func:`resolve_engine`)."""
        if not isinstance(data, Mapping):
            return data
        engine, he = resolve_engine(data.get("engine"), data.get("he"), cls.OWNER)
        return {**data, "engine": engine, "he": he}

    @model_validator(mode="after")
    def _poly5_needs_ss(self) -> VflConfig:
        if self.sigmoid == "poly5" and (self.engine != "ss" or self.objective != "logistic"):
            got = (f"engine={self.engine!r}" if self.engine != "ss"
                   else f"objective={self.objective!r}")
            raise ValidationError(f"{self.OWNER}: {POLY5_NEEDS}; got {got}")
        return self

    @property
    def step(self) -> float:
        """The learning rate the parties use: ``learning_rate``, or the objective's default."""
        if self.learning_rate is None:
            return DEFAULT_LEARNING_RATE[self.objective]
        return self.learning_rate

    def plan(self) -> Plan:
        """Return the resolved :class:`~islands.vfl.protocol.Plan` every party runs with."""
        return Plan(objective=self.objective, learning_rate=float(self.step),
                    lam=float(self.lam), epochs=self.epochs, batch_size=self.batch_size,
                    seed=self.seed, tol=None if self.tol is None else float(self.tol),
                    feature_bits=self.feature_bits, score_bits=self.score_bits,
                    engine=str(self.engine), he=self.he, key_bits=self.key_bits,
                    insecure_keys=self.insecure_keys, djn=self.djn, sigmoid=self.sigmoid)

    @classmethod
    def from_file(cls, table: Mapping[str, Any], where: str, *, objective_key: str,
                  extra: Mapping[str, Any] | None = None) -> VflConfig:
        """Build from a file's section, where ``objective_key`` names the objective.

        The objective defaults to ``"logistic"``; ``tol = "none"`` means None (TOML has no
        null). ``extra`` holds settings that do not come from this section (a seed drawn
        from the job's, the PSI limits of another section). Messages name the file's keys.
        """
        for key, why in RENAMED.items():
            if key in table:
                raise JobError(f"{where}: {key!r} {why}")
        values = {("objective" if key == objective_key else key): value
                  for key, value in table.items()}
        allowed = {objective_key, *cls.model_fields} - {"objective", *(extra or {})}
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise JobError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
        values.setdefault("objective", "logistic")
        if values.get("tol") == "none":
            values["tol"] = None
        try:
            return cls.from_table({**values, **(extra or {})}, where)
        except JobError as exc:
            text = str(exc)
            if objective_key != "objective":
                text = text.replace("'objective'", repr(objective_key))
            raise JobError(text) from None

    @classmethod
    def from_federation(cls, section: Mapping[str, Any], where: str) -> VflConfig:
        """Build from a federation file's ``[vfl]`` section (without its party keys).

        Keys: ``model`` (``"logistic"``, the default, or ``"linear"``), every other field
        of this class under its own name, ``seed`` used as written (default 0) and
        ``tol = "none"`` to run every epoch.

        Raises
        ------
        JobError
            ``"<where>: 'key' must be ...; got ..."`` or ``"<where>: unknown key(s) ..."``.
        """
        return cls.from_file(section, where, objective_key="model")
