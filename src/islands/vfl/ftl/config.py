"""Federated transfer learning's settings, declared once for the estimator and ``[ftl]``.

- :class:`FtlConfig`: every protocol setting (the networks, the losses, training, the
  ``engine``: secret sharing with a dealer or the homomorphic scheme ``he``, the PSI
  limits and ``psi_engine``).
  :class:`~islands.vfl.ftl.FederatedTransferLearner` builds it from its parameters at
  ``fit``; ``islands party`` from the ``[ftl]`` section.
- :class:`Plan`: what both parties must share to train, made by :meth:`FtlConfig.plan`
  with the public ``seed``; the parties compare its :meth:`Plan.text`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from islands.arrays import IntArray
from islands.config import ProtocolConfig, setting
from islands.errors import ValidationError
from islands.psi import DEFAULT_MAX_PEER_RATIO
from islands.psi.config import Engine, engine_setting
from islands.validation import check_random_state
from islands.vfl import maths as vfl_maths
from islands.vfl.config import RENAMED
from islands.vfl.ftl.maths import LOSSES
from islands.vfl.keys import (
    check_key_floor,
    insecure_keys_setting,
    key_bits_setting,
    resolve_engine,
)

__all__ = ["ALIGNMENTS", "ENGINES", "RENAMED", "FtlConfig", "FtlSettings", "Plan",
           "PlanSettings", "batch_order", "check_plan", "draw_seeds"]

ALIGNMENTS = ("anchored", "symmetric")
ENGINES = ("ss", "he")

Width = Annotated[int, Field(ge=1, le=65536)]


class _Training(ProtocolConfig):
    """The settings of training and inference (shared by the config and the plan)."""

    OWNER: ClassVar[str] = "FederatedTransferLearner"

    dim: int = setting(32, "an int in [1, 1024]", "Dimension d of the common representation.",
                       ge=1, le=1024)
    hidden: tuple[Width, ...] = setting(
        (128,), "a tuple of layer widths in [1, 65536]",
        "Hidden layer widths of both networks (ReLU between linear layers).")
    loss: Literal["softmax", "logistic"] = setting(
        "softmax", f"one of {list(LOSSES)}",
        "Taylor expansion of the K-class cross-entropy, or the paper's logistic loss.")
    alignment: Literal["anchored", "symmetric"] = setting(
        "anchored", f"one of {list(ALIGNMENTS)}",
        "Anchored: only A's network moves to B's; symmetric: the paper's loss (reveals A's "
        "overlap representations to B).")
    alpha: float = setting(1.0, "a float in (0, 1e6] (it weights the label loss A learns "
                           "from)", "Weight α of the label loss.", gt=0, le=1e6)
    gamma: float = setting(1.0, "a float in [0, 1e6]", "Weight γ of the alignment loss.",
                           ge=0, le=1e6)
    source_weight: float = setting(1.0, "a float in [0, 1e6]",
                                   "Weight β of B's local loss on its own labels (0: the "
                                   "paper).", ge=0, le=1e6)
    pretrain_epochs: int = setting(5, "an int in [0, inf)",
                                   "Epochs B trains on its own labels before the federation.",
                                   ge=0)
    epochs: int = setting(30, "an int in [1, inf)", "Passes over the overlap rows.", ge=1)
    batch_size: int = setting(64, "an int in [1, inf)", "Overlap rows per step.", ge=1)
    learning_rate: float = setting(1e-3, "a float in (0, 10]", "Adam's step size.",
                                   gt=0, le=10)
    weight_decay: float = setting(1e-4, "a float in [0, 1e6]", "Adam's L2 penalty.",
                                  ge=0, le=1e6)
    tol: float | None = setting(None, "None or a float in (0, inf)",
                                "Stop once an epoch's loss improves by less than this "
                                "(relative); None runs every epoch.", gt=0)
    # weights are int64 in fixed point: |v|·2^f < 2^62
    frac_bits: int = setting(24, "an int in [8, 32]", "Fixed-point fraction bits f.",
                             ge=8, le=32)
    engine: Literal["ss", "he"] | None = setting(
        None, "'ss' or 'he', or None ('he' when he is given, else 'ss')",
        "'ss': secret sharing over an exact ring with a third-party dealer "
        "(islands.vfl.ftl.ss; the dealer must collude with neither party); 'he': Liu et "
        "al.'s two-party flow under each party's homomorphic key ('he').")
    he: Literal["ou", "paillier", "none"] | None = setting(
        None, "None, 'ou', 'paillier' or 'none'",
        "With engine='he': the homomorphic scheme of each party's key, 'ou' "
        "(Okamoto-Uchiyama on HEU, needs sf-heu; what None means), 'paillier' (islands' DJN "
        "Paillier) or 'none' (the same terms in the clear: a baseline for measurements "
        "only, it protects nothing). With engine='ss': None.")
    insecure_keys: bool = insecure_keys_setting()
    key_bits: int = key_bits_setting(
        "Size of each party's modulus (under OU the approximate bits of n = p²q); each "
        "party refuses a shorter key from the other. Unused under engine='ss'.")
    djn: bool = setting(True, "a bool", "With he='paillier': DJN fixed-base encryption "
                        "(faster); False for textbook Paillier.")

    @model_validator(mode="before")
    @classmethod
    def _resolve_engine(cls, data: Any) -> Any:
        """Resolve the engine: a scheme given alone means engine="he" (resolve_engine)."""
        if not isinstance(data, dict):
            return data
        engine, he = resolve_engine(data.get("engine"), data.get("he"), cls.OWNER or
                                    cls.__name__)
        return {**data, "engine": engine, "he": he}

    @field_validator("key_bits")
    @classmethod
    def _key_floor(cls, value: int, info: ValidationInfo) -> int:
        return check_key_floor(value, info.data.get("insecure_keys"))

    @field_validator("hidden", mode="before")
    @classmethod
    def _widths_as_tuple(cls, value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value


class FtlConfig(_Training):
    """Every setting of federated transfer learning, each with its one default.

    The public seed of the batch order is not here: the estimator draws it from its
    ``random_state``, a federation file gives it as ``seed`` (:class:`FtlSettings`).
    """

    max_peer_size: int | None = setting(
        None, "an int >= 1 or None",
        "The largest ID set a party accepts from the other in PSI (replaces the ratio).",
        ge=1)
    max_peer_ratio: float | None = setting(
        DEFAULT_MAX_PEER_RATIO, "a number > 0 and finite, or None",
        "Without max_peer_size: this many times the party's own number of IDs.", gt=0)
    psi_engine: Engine = engine_setting()

    def plan(self, seed: int) -> Plan:
        """Return the plan both parties train with, its batch order from ``seed``."""
        fields = self.model_dump(include=set(_Training.model_fields))
        return Plan(**fields, seed=seed)


class FtlSettings(FtlConfig):
    """The federation file's ``[ftl]`` settings: :class:`FtlConfig` and the public seed."""

    OWNER: ClassVar[str] = "ftl"

    seed: int = setting(0, "an int in [0, inf)", "Seed of the public batch order.", ge=0)


class PlanSettings(_Training):
    """A :class:`Plan`'s fields, checked (:func:`~islands.vfl.ftl.protocol.check_plan`)."""

    seed: int = setting(0, "an int in [0, inf)", "Seed of the public batch order.", ge=0)


def draw_seeds(random_state: Any, owner: str = "FederatedTransferLearner"
               ) -> tuple[int, int, int]:
    """Return the seeds a ``random_state`` gives: A's and B's initial weights, the plan's.

    :class:`~islands.vfl.ftl.FederatedTransferLearner` draws them at ``fit``; a federation
    file's ``random_state`` (:mod:`islands.vfl.ftl.spec`) draws the same, so the deployed
    parties train the estimator's model on the same data.
    """
    rng = check_random_state(random_state, owner)
    seed_a, seed_b = int(rng.integers(0, 2**62)), int(rng.integers(0, 2**62))
    return seed_a, seed_b, int(rng.integers(0, 2**31 - 1))


def _default(name: str) -> Any:
    return _Training.model_fields[name].default


@dataclass(frozen=True)
class Plan:
    """The public hyper-parameters both parties must share.

    The fields are :class:`FtlConfig`'s training settings (see there, with their
    defaults) and ``seed``, the seed of the public batch order. Each network starts from
    its owner's private seed, not this one.
    """

    dim: int = _default("dim")
    hidden: tuple[int, ...] = _default("hidden")
    loss: str = _default("loss")
    alignment: str = _default("alignment")
    alpha: float = _default("alpha")
    gamma: float = _default("gamma")
    source_weight: float = _default("source_weight")
    pretrain_epochs: int = _default("pretrain_epochs")
    epochs: int = _default("epochs")
    batch_size: int = _default("batch_size")
    learning_rate: float = _default("learning_rate")
    weight_decay: float = _default("weight_decay")
    seed: int = 0
    tol: float | None = _default("tol")
    frac_bits: int = _default("frac_bits")
    engine: str = "ss"
    he: str | None = _default("he")
    insecure_keys: bool = _default("insecure_keys")
    key_bits: int = _default("key_bits")
    djn: bool = _default("djn")

    def settings(self, owner: str | None = None) -> PlanSettings:
        """Return the plan's fields checked, as :class:`PlanSettings` (errors name ``owner``)."""
        return PlanSettings.build(owner, **asdict(self))

    def text(self) -> str:
        """Return the plan as canonical JSON: what the parties exchange and compare."""
        return self.settings().plan_text()

def check_plan(plan: Any, owner: str) -> Plan:
    """Validate a :class:`Plan`; return it normalised (Python numbers, a tuple of widths).

    Errors are islands' standard message for the first refused field, naming ``owner``
    (the constraints are :class:`~islands.vfl.ftl.config.FtlConfig`'s).
    """
    if not isinstance(plan, Plan):
        raise ValidationError(f"{owner}: plan must be an islands.vfl.ftl.Plan")
    return Plan(**plan.settings(owner).model_dump())


def batch_order(rows: int, plan: Plan, epoch: int, scores: int) -> list[IntArray]:
    """Return the public batch order; a last batch of at most K rows joins the one before.

    From the aggregate G = Σ_i (t_i + MΦu_i)u_iᵀ of a batch of b ≤ K − 1 rows B could
    solve for A's rows (a review recovered u exactly from a one-row batch), so no batch
    has fewer than K + 1 rows (:func:`check_rows`).
    """
    return vfl_maths.batch_plan(rows, plan.batch_size, epoch, plan.seed, min_rows=scores + 1)
