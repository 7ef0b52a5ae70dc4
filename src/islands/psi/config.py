"""PSI's settings, declared once for align, intersect, the roles and the ``[psi]`` section."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from islands.config import ProtocolConfig, setting
from islands.crypto.psi import Normalization

__all__ = ["DEFAULT_ENGINE", "DEFAULT_MAX_PEER_RATIO", "Engine", "PsiConfig", "engine_setting"]

DEFAULT_MAX_PEER_RATIO = 10.0
"""A party accepts by default a peer set at most ten times the size of its own.

Ten lets two organisations whose customer bases differ by an order of magnitude align
without a setting, and stops a peer from testing more than ten guesses per ID this party
holds (30,000 guesses against 1,000 IDs are refused). Within the limit, a peer still
learns which of its entries this party holds, whether they are real IDs or guesses.
Unbalanced PSI (10,000 IDs against 1,000,000) needs the small party to raise its limit,
a decision to let that peer test that many IDs.
"""

Engine = Literal["dh", "spu"]
DEFAULT_ENGINE: Engine = "dh"
"""Diffie–Hellman on Curve25519 by default: it needs nothing beyond islands' own install.

``"spu"`` runs SecretFlow SPU's RR22 (:mod:`islands.psi.spu_engine`), about twenty times faster at
a million IDs, in the separate environment ``make spu`` builds.
"""



def engine_setting() -> Any:
    """Declare the PSI engine setting, with its one default, accepted values and doc line.

    :class:`PsiConfig` holds it as ``engine``; the learners that align rows by PSI
    (:class:`~islands.vfl.config.VflConfig`, :class:`~islands.vfl.ftl.config.FtlConfig`) as
    ``psi_engine``, the name their estimators, job files and federation files use.
    """
    return setting(
        DEFAULT_ENGINE, "'dh' or 'spu'",
        "The PSI engine: 'dh' (Diffie–Hellman on Curve25519, in islands) or 'spu' "
        "(SecretFlow SPU's RR22, in the environment `make spu` builds).")


DEFAULT_NORMALIZE: Normalization = "NFC"
DEFAULT_TIMEOUT = 600.0


class PsiConfig(ProtocolConfig):
    """The settings one PSI party runs with.

    ``workers`` (processes for the curve arithmetic) is a setting of the machine, not of
    the protocol, so it stays an argument of :func:`~islands.psi.align` and the roles.
    """

    OWNER: ClassVar[str] = "intersect"

    engine: Engine = engine_setting()
    normalize: Normalization = setting(
        DEFAULT_NORMALIZE, "one of 'NFC', 'NFKC', 'NFD', 'NFKD' or None",
        "Unicode form string IDs are brought to before hashing (None: the code points as "
        "given); both parties must use the same.")
    max_peer_size: int | None = setting(
        None, "an int >= 1 or None",
        "The largest set this party lets the other enter; replaces max_peer_ratio.", ge=1)
    max_peer_ratio: float | None = setting(
        DEFAULT_MAX_PEER_RATIO, "a number > 0 and finite, or None",
        "Without max_peer_size, the limit is this times this party's own number of IDs; "
        "None (with no max_peer_size) accepts any size.", gt=0)
    timeout: float = setting(DEFAULT_TIMEOUT, "a float in (0, inf)",
                             "Seconds a party waits for one message.", gt=0)
