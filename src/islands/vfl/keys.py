"""The key size of vertical regression and FTL, declared once for both: a 2048-bit floor.

The coordinator of vertical regression and each FTL party make a Paillier or OU key of
``key_bits``. A key below :data:`KEY_FLOOR` (2048 bits: about 112-bit security, NIST SP
800-57 Part 1 Rev. 5, Table 2; horizontal FL's keys have the same floor) is refused
unless ``insecure_keys`` is set: an explicit opt-in for tests and quick reproductions
that every fit warns about (:class:`InsecureKeyWarning`) and every result records.

Each party applies the floor to its own settings and through them to every key it
receives (:func:`min_peer_key_bits`); ``insecure_keys`` is part of the plan the parties
compare, so one party's opt-in never lowers another's floor.
"""

from __future__ import annotations

import warnings
from typing import Any

from islands.config import setting
from islands.crypto import paillier
from islands.errors import ValidationError

__all__ = ["DEFAULT_HE", "KEY_BITS_RULE", "KEY_FLOOR", "InsecureKeyWarning", "check_key_floor",
           "insecure_key_note", "insecure_keys_setting", "key_bits_setting",
           "min_peer_key_bits", "party_security", "resolve_engine", "warn_insecure_keys"]

KEY_FLOOR = 2048
"""The smallest ``key_bits`` accepted without ``insecure_keys`` (about 112-bit security)."""

KEY_BITS_RULE = (f"an int in [{KEY_FLOOR}, {paillier.MAX_KEY_BITS}] and a multiple of 256 "
                 f"(from {paillier.MIN_KEY_BITS} only with insecure_keys, for tests)")
"""What ``key_bits`` accepts, as error messages word it."""


class InsecureKeyWarning(UserWarning):
    """A run with keys below :data:`KEY_FLOOR`, which ``insecure_keys`` allowed."""


def key_bits_setting(doc: str) -> Any:
    """Declare ``key_bits``: default 2048, a multiple of 256 in [1024, 16384].

    Below :data:`KEY_FLOOR` the configuration's validator (:func:`check_key_floor`) also
    needs ``insecure_keys``, which must be declared before this field.
    """
    return setting(paillier.DEFAULT_KEY_BITS, KEY_BITS_RULE, doc,
                   ge=paillier.MIN_KEY_BITS, le=paillier.MAX_KEY_BITS, multiple_of=256)


def insecure_keys_setting() -> Any:
    """Declare ``insecure_keys``, the opt-in to keys below :data:`KEY_FLOOR`."""
    return setting(False, "a bool",
                   f"Allow key_bits below {KEY_FLOOR} (down to {paillier.MIN_KEY_BITS}): "
                   "insecure, for tests and quick reproductions only; a fit warns "
                   "(InsecureKeyWarning) and results record it.")


def check_key_floor(key_bits: int, insecure_keys: Any) -> int:
    """Return ``key_bits``, or raise ValueError below the floor without ``insecure_keys``.

    A plain ValueError, so that a :class:`~islands.config.ProtocolConfig` validator turns
    it into the standard message for ``key_bits`` (naming :data:`KEY_BITS_RULE`).
    """
    if key_bits < KEY_FLOOR and insecure_keys is not True:
        raise ValueError(f"key_bits below {KEY_FLOOR} needs insecure_keys")
    return key_bits


def min_peer_key_bits(key_bits: int, insecure_keys: bool) -> int:
    """Return the fewest modulus bits a party accepts in a key it receives.

    Its own ``key_bits``, and never less than :data:`KEY_FLOOR` unless it opted in with
    ``insecure_keys`` itself: a peer may send a larger key, never a smaller one.
    """
    return key_bits if insecure_keys is True else max(key_bits, KEY_FLOOR)


def insecure_key_note(he: str | None, key_bits: int) -> str | None:
    """Return the warning a run with these keys gets, or None for keys at the floor.

    ``he`` None (secret sharing) and ``"none"`` use no key.
    """
    if he is None or he == "none" or key_bits >= KEY_FLOOR:
        return None
    return (f"{key_bits}-bit keys are below islands' {KEY_FLOOR}-bit floor (insecure_keys): "
            "insecure, for tests and quick reproductions only")


def warn_insecure_keys(he: str | None, key_bits: int, who: str, *, stacklevel: int = 3) -> None:
    """Warn (:class:`InsecureKeyWarning`) when ``who`` runs with keys below the floor."""
    note = insecure_key_note(he, key_bits)
    if note is not None:
        warnings.warn(f"{who}: {note}", InsecureKeyWarning, stacklevel=stacklevel)


def party_security(he: str | None, key_bits: int, party: str) -> dict[str, str]:
    """Warn when a deployed party runs below the floor; return what its result records.

    ``{"security_warning": note}`` below the floor, else nothing; called when the party's
    role is bound, before anything is sent.
    """
    warn_insecure_keys(he, key_bits, f"party {party!r}")
    note = insecure_key_note(he, key_bits)
    return {} if note is None else {"security_warning": note}


DEFAULT_HE = "ou"
"""The scheme ``engine="he"`` takes when ``he`` is None: the fastest at the 2048-bit floor."""


def resolve_engine(engine: Any, he: Any, owner: str) -> tuple[Any, Any]:
    """Return (engine, he) resolved: a scheme given alone means ``engine="he"``.

    No engine and no scheme is ``"ss"``; ``engine="he"`` without a scheme takes
    :data:`DEFAULT_HE`; a scheme with ``engine="ss"`` is refused (values of the wrong
    type pass through to the fields' own checks).
    """
    if engine is None:
        engine = "ss" if he is None else "he"
    if engine == "he" and he is None:
        he = DEFAULT_HE
    if engine == "ss" and he in ("ou", "paillier", "none"):  # other values: the field's check
        raise ValidationError(f"{owner}: he={he!r} applies to engine='he'; with "
                              "engine='ss' leave he unset")
    return engine, he
