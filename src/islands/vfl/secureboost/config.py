"""SecureBoost's settings, declared once for the estimators, job files and federation files.

:class:`BoostConfig` holds every public setting of a SecureBoost run (the plan the parties
compare before any data moves) with its one default, constraint and doc line. Defaults
follow FATE's HeteroSecureBoost where XGBoost and FATE differ in ways that matter under
encryption (32 bins, depth 3) and XGBoost elsewhere (η = 0.3, λ = 1, γ = 0,
min_child_weight = 1).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ValidationInfo, field_validator, model_validator

from islands.config import ProtocolConfig, setting
from islands.psi import DEFAULT_MAX_PEER_RATIO
from islands.psi.config import Engine, engine_setting
from islands.vfl.keys import (
    check_key_floor,
    insecure_key_note,
    insecure_keys_setting,
    key_bits_setting,
)
from islands.vfl.secureboost.maths import MAX_BINS, Objective, Params, Sampling

__all__ = ["BoostConfig", "WoeConfig", "describe_he"]


def describe_he(he: str, key_bits: int) -> str:
    """Return the scheme in words, as summaries print it."""
    note = insecure_key_note(he, key_bits)
    return {"ou": f"{key_bits}-bit Okamoto-Uchiyama (HEU)",
            "paillier": f"{key_bits}-bit Paillier (DJN)",
            "none": "no encryption (a baseline)"}[he] + (f" [INSECURE: {note}]" if note else "")


class BoostConfig(ProtocolConfig):
    """The settings of one SecureBoost run (Cheng et al. 2021; SecureBoost+, Chen et al. 2021).

    ``objective`` has no default: the estimator class (or the label column) fixes it.
    """

    OWNER: ClassVar[str] = "SecureBoost"

    objective: Literal["binary", "regression", "multiclass"] = setting(
        ..., "'binary', 'regression' or 'multiclass'",
        "Logistic loss, squared error, or softmax with one tree per class and round.")
    n_estimators: int = setting(50, "an int in [1, 10000]", "Boosting rounds.", ge=1, le=10000)
    max_depth: int = setting(3, "an int in [1, 16]", "Levels of splits per tree.", ge=1, le=16)
    learning_rate: float = setting(0.3, "a float in (0, 1]", "Shrinkage η of every leaf.",
                                   gt=0, le=1)
    max_bins: int = setting(32, f"an int in [2, {MAX_BINS}]",
                            "Quantile bins per feature (plus one for missing values).",
                            ge=2, le=MAX_BINS)
    min_child_weight: float = setting(1.0, "a float in [0, 1e6]",
                                      "Smallest hessian sum of a child.", ge=0, le=1e6)
    reg_lambda: float = setting(1.0, "a float in [0, 1e6]", "L2 penalty λ on leaf weights.",
                                ge=0, le=1e6)
    gamma: float = setting(0.0, "a float in [0, 1e6]", "Smallest gain γ a split must exceed.",
                           ge=0, le=1e6)
    subsample: float = setting(1.0, "a float in (0, 1]", "Rows drawn for each round's trees.",
                               gt=0, le=1)
    colsample_bytree: float = setting(1.0, "a float in (0, 1]",
                                      "Features of each party drawn for each tree.", gt=0, le=1)
    goss: bool = setting(False, "a bool",
                         "Gradient-based one-side sampling (SecureBoost+): keep top_rate of "
                         "the rows by |g|, draw other_rate of the rest (replaces subsample).")
    top_rate: float = setting(0.2, "a float in (0, 1)", "GOSS: share of large-gradient rows.",
                              gt=0, lt=1)
    other_rate: float = setting(0.1, "a float in (0, 1)", "GOSS: share drawn from the rest.",
                                gt=0, lt=1)
    early_stopping_rounds: int | None = setting(
        None, "an int >= 1, or None", "Stop once the validation loss has not improved for "
        "this many rounds, keeping the best rounds.", ge=1)
    validation_fraction: float = setting(
        0.1, "a float in (0, 0.5]", "With early stopping: share of the aligned rows the "
        "active party holds out for validation.", gt=0, le=0.5)
    he: Literal["ou", "paillier", "none"] = setting(
        "ou", "'ou', 'paillier' or 'none'",
        "Homomorphic encryption of the gradients: 'ou' (Okamoto-Uchiyama on HEU, needs "
        "sf-heu), 'paillier' (islands' DJN Paillier: slower, in Python); 'none' sends them "
        "in the clear: a baseline for benchmarks, it protects nothing.")
    insecure_keys: bool = insecure_keys_setting()
    key_bits: int = key_bits_setting("Size of the active party's modulus (OU's n = p²q, or "
                                     "Paillier's n).")
    packing: bool = setting(True, "a bool",
                            "Pack each row's gradient and hessian into one plaintext "
                            "(SecureBoost+): half the encryptions and histogram work.")
    compression: bool = setting(True, "a bool",
                                "Pack several bin sums into one ciphertext before they travel "
                                "(SecureBoost+'s cipher compression): 6 times fewer bytes and "
                                "decryptions at 2048 bits.")
    subtraction: bool = setting(True, "a bool",
                                "Histogram subtraction: ask only the smaller child's "
                                "histograms, the larger is the parent's minus it.")
    active_first_trees: int = setting(
        0, "an int >= 0", "Hardening: the first trees use the active party's features only "
        "(FATE's complete secure tree for 1); passive parties see nothing of them, but "
        "later trees leak as much (islands audit secureboost).", ge=0)
    active_top_levels: int = setting(
        0, "an int >= 0", "Hardening: the top levels of every tree split on the active "
        "party's features only; the first level a passive party takes part in still shows "
        "it their partition, so this hides no instance space (islands audit secureboost).",
        ge=0)
    max_peer_size: int | None = setting(
        None, "an int >= 1 or None",
        "With private alignment: the largest ID set a party accepts from the other; given, "
        "it replaces max_peer_ratio.", ge=1)
    max_peer_ratio: float | None = setting(
        DEFAULT_MAX_PEER_RATIO, "a number > 0 and finite, or None",
        "With private alignment and no max_peer_size: the limit is this times the party's "
        "own number of IDs; both None accept any size.", gt=0)
    psi_engine: Engine = engine_setting()
    mix: bool = setting(
        False, "a bool", "Hardening (FATE's mix mode): each tree splits on one party's "
        "features, in turn (the active party's, then each passive party's); a passive party "
        "is shown only its own trees, whose partitions follow its own features.")
    seed: int = setting(0, "an int in [0, inf)",
                        "Seed of the active party's row and column draws.", ge=0)

    @field_validator("key_bits")
    @classmethod
    def _key_floor(cls, value: int, info: ValidationInfo) -> int:
        return check_key_floor(value, info.data.get("insecure_keys"))

    @model_validator(mode="after")
    def _goss_rates(self) -> BoostConfig:
        if self.goss and self.top_rate + self.other_rate > 1:
            raise ValueError("top_rate + other_rate must be at most 1")
        return self

    def params(self) -> Params:
        """Return the tree's regularisation, depth and step."""
        return Params(reg_lambda=self.reg_lambda, gamma=self.gamma,
                      min_child_weight=self.min_child_weight, max_depth=self.max_depth,
                      learning_rate=self.learning_rate)

    def sampling(self) -> Sampling:
        """Return the row and column sampling."""
        return Sampling(subsample=self.subsample, colsample=self.colsample_bytree,
                        goss=(self.top_rate, self.other_rate) if self.goss else None)

    def objective_for(self, classes: int) -> Objective:
        """Return the loss for labels of ``classes`` classes."""
        return Objective(self.objective, classes if self.objective == "multiclass" else 1)

    def allowed(self, tree: int, party: int, depth: int, parties: int = 2) -> bool:
        """Return whether party ``party`` (0: active) may split at ``depth`` of tree ``tree``.

        ``parties`` counts the active party and the passive ones (``mix`` gives tree t to
        party t mod parties).
        """
        if self.mix and party != tree % parties:
            return False
        return party == 0 or (tree >= self.active_first_trees
                              and depth >= self.active_top_levels)

    def hardened(self) -> bool:
        """Return whether any level of any tree is kept from some party."""
        return self.active_first_trees > 0 or self.active_top_levels > 0 or self.mix

    def summary(self) -> dict[str, Any]:
        """Return a one-line description for reports."""
        return {"he": describe_he(self.he, self.key_bits), "trees": self.n_estimators,
                "depth": self.max_depth, "bins": self.max_bins}


class WoeConfig(ProtocolConfig):
    """The plan of a federated WOE/IV run (:mod:`~islands.vfl.secureboost.woe`).

    BoostConfig's binning and encryption settings, the ones every party compares before
    any data moves.
    """

    OWNER: ClassVar[str] = "information_values"

    max_bins: int = setting(32, f"an int in [2, {MAX_BINS}]",
                            "Quantile bins per feature (plus one for missing values).",
                            ge=2, le=MAX_BINS)
    he: Literal["ou", "paillier", "none"] = setting(
        "ou", "'ou', 'paillier' or 'none'",
        "Homomorphic encryption of the labels: 'ou' (Okamoto-Uchiyama on HEU, needs "
        "sf-heu), 'paillier' (islands' DJN Paillier); 'none' sends them in the clear: a "
        "baseline for tests and benchmarks, it protects nothing.")
    insecure_keys: bool = insecure_keys_setting()
    key_bits: int = key_bits_setting("Size of the active party's modulus (OU's n = p²q, or "
                                     "Paillier's n).")

    @field_validator("key_bits")
    @classmethod
    def _key_floor(cls, value: int, info: ValidationInfo) -> int:
        return check_key_floor(value, info.data.get("insecure_keys"))
