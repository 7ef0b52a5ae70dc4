"""The protections' settings, declared once for their classes, job files and federation files.

Each protection a job's ``protect = [...]`` names has one configuration here, and its
class (:class:`~islands.aggregation.secagg.SecureAggregation`, ...) checks its
parameters by building it, so the Python API, a job file's ``[secagg]``/``[dp]``/...
section and a federation file's ``[hfl.secagg]``/... section share every default,
constraint and message. :data:`SECTIONS` maps each name to its configuration: it is
the list of protections and of the keys each section accepts.

Settings that depend on a cryptographic engine's own rules are checked by that
engine's parameter class when the protection is built (CKKS's modulus chain by
:class:`~islands.crypto.ckks.CKKSParams`, Paillier's packing by
:func:`~islands.crypto.paillier.packing_spec`), so the rules stay in one place.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, model_validator

from islands.config import ProtocolConfig, setting
from islands.crypto.ckks import CKKSParams
from islands.errors import invalid_parameter

__all__ = [
    "ROBUST",
    "SECTIONS",
    "AdditiveConfig",
    "ChaosConfig",
    "CkksConfig",
    "ClientDPConfig",
    "KrumConfig",
    "MedianConfig",
    "NormBoundConfig",
    "PaillierAggConfig",
    "SampleDPConfig",
    "SecAggConfig",
    "SecAggPlusConfig",
    "TrimmedMeanConfig",
]

_FRAC_BITS = "an int in [8, 48]"
MAX_ABS = 1e6
"""The default largest magnitude of a model parameter in an upload (every aggregator)."""
_MAX_ABS_DOC = ("The largest magnitude of a model parameter in an upload: a client refuses to "
                "upload beyond it, and a decoded mean beyond it is refused (no in-range "
                "uploads average to more).")
_MIN_HE_CLIENTS = ("The fewest uploads an aggregate this client opens may sum (a single one "
                   "must be its own).")
_ACCOUNTANTS = Literal["rdp", "pld"]


def _threshold(value: int | float) -> int | float:
    if isinstance(value, int) and value < 2:
        raise ValueError("too small")
    if isinstance(value, float) and not 0.5 <= value < 1.0:
        raise ValueError("out of range")
    return value


class SecAggConfig(ProtocolConfig):
    """Secure aggregation (Bonawitz et al. 2017): ``protect = ["secagg"]``, ``[secagg]``."""

    OWNER = "SecureAggregation"

    threshold: Annotated[int | float, AfterValidator(_threshold)] = setting(
        0.5, "an int >= 2 or a fraction in [0.5, 1) (t <= n/2 lets an active server unmask "
        "a client)", "t, the survivors needed to unmask: a count, or a fraction φ of m "
        "clients (t = ⌊φm⌋ + 1), m the federation's clients or min_clients.")
    frac_bits: int = setting(32, _FRAC_BITS, "Fixed-point fractional bits in Z_2^64.",
                             ge=8, le=48)
    min_clients: int | None = setting(
        None, "an int >= 2", "The smallest round a client joins, and the m its threshold "
        "and colluder bound are set against (unset: the federation's clients, of which a "
        "round needs t); set it when the strategy samples cohorts.", ge=2)
    max_abs: float = setting(MAX_ABS, "a float in (0, inf)", _MAX_ABS_DOC, gt=0,
                             allow_inf_nan=False)


class SecAggPlusConfig(ProtocolConfig):
    """SecAgg+ (Bell et al. 2020): ``protect = ["secaggplus"]``, ``[secaggplus]``.

    A bare TOML key (``secagg+`` would need quoting in every section header).
    """

    OWNER = "SecureAggregationPlus"

    corrupt_fraction: float = setting(
        0.05, "a float in [0, 0.5)", "γ: colluding clients protected against, as a fraction "
        "of m (the federation's clients, or min_clients): C = ⌊γm⌋.", ge=0, lt=0.5)
    dropout: float = setting(
        0.10, "a float in [0, 0.5)", "δ: dropouts a round may have, as a fraction of its n "
        "clients; fewer than n − ⌊δn⌋ survivors are refused.", ge=0, lt=0.5)
    sigma: float = setting(40.0, "a float in [20, 128]", "Privacy fails with probability "
                           "≤ 2^-sigma over the graph draw.", ge=20, le=128)
    eta: float = setting(20.0, "a float in [1, 128]", "A round fails for lack of holders "
                         "with probability ≤ 2^-eta.", ge=1, le=128)
    min_clients: int | None = setting(
        None, "an int >= 2", "The smallest round a client joins and the m its colluders "
        "are counted against (unset: its federation, of which a round needs m − ⌊δm⌋).",
        ge=2)
    max_abs: float = setting(MAX_ABS, "a float in (0, inf)", _MAX_ABS_DOC, gt=0,
                             allow_inf_nan=False)
    frac_bits: int = setting(32, _FRAC_BITS, "Fixed-point fractional bits in Z_2^64.",
                             ge=8, le=48)
    neighbours: int | None = setting(
        None, "an even int >= 2", "k the server proposes instead of the sparsest that "
        "fits (every client still checks it).", ge=2)
    threshold: int | None = setting(
        None, "an int >= 2 (with neighbours)", "t the server proposes, at least the "
        "least one for k (every client still checks it).", ge=2)
    max_setups: int = setting(2, "an int in [1, 4]", "Set-ups a client accepts per round "
                              "(a missing reveal restarts one).", ge=1, le=4)

    @model_validator(mode="after")
    def _overrides(self) -> SecAggPlusConfig:
        owner = self.OWNER
        if self.neighbours is not None and self.neighbours % 2:
            raise invalid_parameter("neighbours", owner, "an even int >= 2 (a Harary graph "
                                    "H(n, k))", self.neighbours)
        if self.threshold is not None and (self.neighbours is None
                                           or self.threshold > self.neighbours + 1):
            raise invalid_parameter("threshold", owner, "an int in [2, neighbours + 1], "
                                    "given with neighbours", self.threshold)
        return self


class AdditiveConfig(ProtocolConfig):
    """Additive secret sharing between the clients: ``["additive"]``, ``[additive]``."""

    OWNER = "AdditiveSharing"

    frac_bits: int = setting(32, _FRAC_BITS, "Fixed-point fractional bits in Z_2^64.",
                             ge=8, le=48)
    min_clients: int = setting(2, "an int >= 2 (a roster of one reveals the update)",
                               "The smallest roster a client shares its update with.", ge=2)
    max_abs: float = setting(MAX_ABS, "a float in (0, inf)", _MAX_ABS_DOC, gt=0,
                             allow_inf_nan=False)


class CkksConfig(ProtocolConfig):
    """CKKS aggregation under the clients' shared key (APFL): ``["ckks"]``, ``[ckks]``.

    An unset value is :class:`~islands.crypto.ckks.CKKSParams`'s default, which also
    checks the three together (SEAL's 128-bit security table, the scale's room).
    """

    OWNER = "CKKSAggregator"

    poly_modulus_degree: int | None = setting(
        None, "one of 4096, 8192, 16384, 32768", "Ring dimension N (default 8192).")
    coeff_mod_bit_sizes: tuple[int, ...] | list[int] | None = setting(
        None, "a list of at least two ints in [20, 60]",
        "Bit sizes of the coefficient modulus primes (default [60, 40, 60]).")
    scale_bits: int | None = setting(None, "an int in [20, 60]",
                                     "log2 of the CKKS scale (default 40).")
    min_clients: int = setting(1, "an int >= 1", _MIN_HE_CLIENTS, ge=1)

    def params(self) -> CKKSParams:
        """Return the engine's parameters, unset values at their defaults."""
        defaults = CKKSParams()
        return CKKSParams(
            poly_modulus_degree=(defaults.poly_modulus_degree
                                 if self.poly_modulus_degree is None
                                 else self.poly_modulus_degree),
            coeff_mod_bit_sizes=(defaults.coeff_mod_bit_sizes
                                 if self.coeff_mod_bit_sizes is None
                                 else tuple(self.coeff_mod_bit_sizes)),
            scale_bits=defaults.scale_bits if self.scale_bits is None else self.scale_bits)

    @model_validator(mode="after")
    def _engine(self) -> CkksConfig:
        self.params()  # CKKSParams raises the ValidationError naming the parameter
        return self


class PaillierAggConfig(ProtocolConfig):
    """Packed additively homomorphic aggregation: ``["paillier"]``, ``[paillier]``.

    ``he`` picks the engine (Paillier, or HEU's Okamoto-Uchiyama). The packing (slot
    width from ``frac_bits``, ``int_bits`` and ``max_clients``) is checked by
    :func:`~islands.crypto.paillier.packing_spec` when the aggregator is built.
    """

    OWNER = "PaillierAggregator"

    key_bits: int = setting(2048, "an int >= 2048", "Size of the Paillier modulus n.",
                            ge=2048)
    frac_bits: int = setting(32, "an int >= 1", "Fixed point: resolution 2^-frac_bits.",
                             ge=1)
    int_bits: int = setting(8, "an int >= 1",
                            "Fixed point: the bound 2^int_bits on each weighted value.", ge=1)
    max_clients: int = setting(1024, "an int >= 1",
                               "Headroom of each slot for the sum over the clients.", ge=1)
    packed: bool = setting(True, "a bool", "Many values per plaintext; false is the "
                           "paper's one value per ciphertext (comparisons only).")
    he: Literal["paillier", "ou"] = setting(
        "paillier", "'paillier' or 'ou'",
        "Homomorphic engine: 'paillier' (islands' packed Paillier) or 'ou' "
        "(Okamoto-Uchiyama on HEU, needs sf-heu: pip install 'islands[heu]'; key_bits is "
        "then the approximate size of n = p²q).")
    min_clients: int = setting(1, "an int >= 1", _MIN_HE_CLIENTS, ge=1)


class ChaosConfig(ProtocolConfig):
    """APFL's chaos permutation: ``["chaos"]``; it has no settings (the key is dealt)."""

    OWNER = "ChaosPermutation"


class _DPCommon(ProtocolConfig):
    clip: float = setting(1.0, "a float in (0, inf)", "The L2 bound S (or C per sample).",
                          gt=0)
    noise_multiplier: float = setting(1.0, "a float in (0, inf)",
                                      "σ: the noise's standard deviation over the clip.", gt=0)
    delta: float = setting(1e-5, "a float in (0, 1)", "δ of the reported (ε, δ).",
                           gt=0, lt=1)
    target_epsilon: float | None = setting(
        None, "a float in (0, inf)", "Stop the run before a round that would spend more.",
        gt=0)
    accountant: _ACCOUNTANTS = setting("rdp", "'rdp' or 'pld'", "dp-accounting's accountant.")


class ClientDPConfig(_DPCommon):
    """Client-level DP (DP-FedAvg): ``["dp"]``, ``[dp]``."""

    OWNER = "ClientDP"

    noise: Literal["local", "distributed"] = setting(
        "local", "one of ('local', 'distributed')",
        "Each client adds all the noise, or its share of it for t survivors.")
    guaranteed: int | None = setting(
        None, "an int >= 1", "t for distributed noise: the survivors it is calibrated for "
        "(default: secure aggregation's threshold).", ge=1)


class SampleDPConfig(_DPCommon):
    """Sample-level DP (DP-SGD in every client): ``["dp-sgd"]``, ``[dp-sgd]``."""

    OWNER = "SampleDP"


_PLAIN_MAX_ABS_DOC = ("The largest magnitude of a model parameter in an upload: a client "
                      "refuses to upload beyond it, and the server leaves out an upload "
                      "beyond it as malformed.")
_F_DOC = ("f, the Byzantine (arbitrary, colluding) clients a round must tolerate; a round "
          "with fewer clients than the rule needs for f is refused.")


class MedianConfig(ProtocolConfig):
    """Coordinate-wise median (Yin et al. 2018): ``protect = ["median"]``, ``[median]``."""

    OWNER = "MedianAggregator"

    f: int = setting(1, "an int >= 1", _F_DOC + " The median needs n >= 2f+1.", ge=1)
    max_abs: float = setting(MAX_ABS, "a float in (0, inf)", _PLAIN_MAX_ABS_DOC, gt=0,
                             allow_inf_nan=False)


class TrimmedMeanConfig(ProtocolConfig):
    """Coordinate-wise trimmed mean (Yin et al. 2018): ``["trimmed-mean"]``, ``[trimmed-mean]``."""

    OWNER = "TrimmedMeanAggregator"

    beta: float = setting(0.1, "a float in (0, 0.5)",
                          "β, the fraction removed at each end of every coordinate "
                          "(⌊βn⌋ values each side; a round where that is 0 is refused).",
                          gt=0, lt=0.5)
    max_abs: float = setting(MAX_ABS, "a float in (0, inf)", _PLAIN_MAX_ABS_DOC, gt=0,
                             allow_inf_nan=False)


class KrumConfig(ProtocolConfig):
    """Krum and Multi-Krum (Blanchard et al. 2017): ``["krum"]``, ``[krum]``."""

    OWNER = "KrumAggregator"

    f: int = setting(1, "an int >= 1", _F_DOC + " Krum needs n >= 2f+3.", ge=1)
    m: int = setting(1, "an int >= 1", "Updates selected and averaged: 1 is Krum, more is "
                     "Multi-Krum (a round needs m <= n - f).", ge=1)
    max_abs: float = setting(MAX_ABS, "a float in (0, inf)", _PLAIN_MAX_ABS_DOC, gt=0,
                             allow_inf_nan=False)


class NormBoundConfig(ProtocolConfig):
    """Norm bounding (Sun et al. 2019): ``["norm-bound"]``, ``[norm-bound]``."""

    OWNER = "NormBoundAggregator"

    max_norm: float = setting(..., "a float in (0, inf)",
                              "M: each update w_k - w_global is clipped to L2 norm <= M "
                              "before the mean (no default: it depends on the model).",
                              gt=0, allow_inf_nan=False)
    max_abs: float = setting(MAX_ABS, "a float in (0, inf)", _PLAIN_MAX_ABS_DOC, gt=0,
                             allow_inf_nan=False)


ROBUST: dict[str, type[ProtocolConfig]] = {
    "median": MedianConfig,
    "trimmed-mean": TrimmedMeanConfig,
    "krum": KrumConfig,
    "norm-bound": NormBoundConfig,
}
"""The robust rules against poisoning clients: base aggregators that need single updates."""


SECTIONS: dict[str, type[ProtocolConfig]] = {
    "secagg": SecAggConfig,
    "secaggplus": SecAggPlusConfig,
    "additive": AdditiveConfig,
    "ckks": CkksConfig,
    "paillier": PaillierAggConfig,
    "chaos": ChaosConfig,
    "dp": ClientDPConfig,
    "dp-sgd": SampleDPConfig,
    **ROBUST,
}
"""Each protection's name and configuration; a file's section of that name is read into it."""

