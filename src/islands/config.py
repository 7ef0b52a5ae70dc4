"""One typed configuration per protocol: every setting with its one default, constraint and doc.

A protocol's settings are declared once, as a frozen :class:`ProtocolConfig` subclass, one
:func:`setting` line per field. The estimator's ``__init__`` parameters, the job file and
the federation file's protocol section all build that one object, so they share defaults
and constraints, and a refused value gets islands' standard message:

- from Python, :meth:`ProtocolConfig.build`: ``The 'epsilon' parameter of FederatedPCA must
  be a float in (0, inf). Got -1 instead.``;
- from a TOML file, :meth:`ProtocolConfig.from_table`: ``<where>: 'epsilon' must be a float
  in (0, inf); got -1``.

Values are checked strictly: a bool is not an int, a string is not a number, NaN and
infinity are refused unless a field allows them; numpy scalars count as the Python number
they hold.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import numpy as np
import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

from islands.errors import JobError, ProtocolError, ValidationError, invalid_parameter
from islands.validation import describe

__all__ = ["ProtocolConfig", "RunSettings", "check_same_plan", "plan_text", "setting"]

_C = TypeVar("_C", bound="ProtocolConfig")


def setting(default: Any, expected: str, doc: str, *, changed: str | None = None,
            **constraints: Any) -> Any:
    """Declare one setting of a :class:`ProtocolConfig`.

    Parameters
    ----------
    default
        The one default (``...`` for a required setting).
    expected
        The accepted values, as the error message words them ("a float in (0, 1]").
    doc
        One line saying what the setting does.
    changed
        For a value files used to accept and no longer do: what changed, appended to the
        message :meth:`ProtocolConfig.from_table` gives for a refused value.
    **constraints
        pydantic's field constraints (``gt``, ``ge``, ``lt``, ``le``, ``allow_inf_nan``, ...).
    """
    extra: dict[str, Any] = {"expected": expected}
    if changed is not None:
        extra["changed"] = changed
    return Field(default, description=doc, json_schema_extra=extra, **constraints)


def _plain(value: Any) -> Any:
    """Return the Python value a numpy scalar holds (inside lists and tuples too)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


class ProtocolConfig(BaseModel):
    """Base of every protocol configuration: frozen, strict, no unknown settings.

    Subclasses declare their fields with :func:`setting`, in the order the values should
    be checked (the first refused one is reported), and name their user-facing owner in
    ``OWNER`` (the estimator, for messages). Checks that involve several settings are a
    ``model_validator(mode="after")`` that raises :class:`~islands.errors.ValidationError`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False,
                              ser_json_inf_nan="strings")

    OWNER: ClassVar[str] = ""
    """Who the settings belong to in messages (default: the class name)."""

    @model_validator(mode="before")
    @classmethod
    def _numpy_scalars(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return {key: _plain(value) for key, value in data.items()}
        return data

    @classmethod
    def _expected(cls, name: str, fallback: str) -> str:
        field = cls.model_fields.get(name)
        extra = field.json_schema_extra if field is not None else None
        if isinstance(extra, dict) and isinstance(extra.get("expected"), str):
            return str(extra["expected"])
        return fallback

    @classmethod
    def _first_error(cls, exc: pydantic.ValidationError) -> tuple[str, str, dict[str, Any]]:
        """Return (kind, field name, error) of the first error; kind: extra, cross or value."""
        err: dict[str, Any] = dict(exc.errors()[0])
        name = str(err["loc"][0]) if err["loc"] else ""
        if err["type"] == "extra_forbidden":
            return "extra", name, err
        if isinstance(err.get("ctx", {}).get("error"), ValidationError):
            return "cross", name, err
        return "value", name, err

    @classmethod
    def build(cls: type[_C], owner: str | None = None, /, **values: Any) -> _C:
        """Check ``values`` and return the configuration.

        Raises
        ------
        ValidationError
            The standard message for the first refused value, naming ``owner`` (default
            :attr:`OWNER`); for an unknown name, the list of valid ones.
        """
        who = owner or cls.OWNER or cls.__name__
        try:
            return cls.model_validate(values)
        except pydantic.ValidationError as exc:
            kind, name, err = cls._first_error(exc)
        if kind == "extra":
            raise ValidationError(f"{who} has no parameter {name!r}; valid: "
                                  f"{sorted(cls.model_fields)}") from None
        if kind == "cross":
            raise err["ctx"]["error"] from None
        if name not in values and err.get("type") == "missing":
            raise ValidationError(f"{who} needs the {name!r} parameter "
                                  f"({cls._expected(name, err['msg'])})") from None
        got = values[name] if name in values else err["input"]
        raise invalid_parameter(name, who, cls._expected(name, err["msg"]),
                                describe(got)) from None

    @classmethod
    def from_table(cls: type[_C], table: Mapping[str, Any], where: str, *,
                   removed: Mapping[str, str] | None = None) -> _C:
        """Build the configuration from a parsed TOML (sub)table.

        Parameters
        ----------
        table
            The section's keys and values.
        where
            The file and section, for messages (``"federation file f.toml [cca]"``).
        removed
            Keys that files used to accept, each with the message saying what changed.

        Raises
        ------
        JobError
            ``"<where>: 'key' must be ...; got ..."``, ``"<where>: unknown key(s) [...];
            allowed: [...]"``, ``"<where>: missing key 'key'"``, or the removed key's message.
        """
        for key, why in (removed or {}).items():
            if key in table:
                raise JobError(f"{where}: {key!r} {why}")
        allowed = set(cls.model_fields)
        extra = sorted(set(table) - allowed)
        if extra:
            raise JobError(f"{where}: unknown key(s) {extra}; allowed: {sorted(allowed)}")
        try:
            return cls.model_validate(dict(table))
        except pydantic.ValidationError as exc:
            kind, name, err = cls._first_error(exc)
        if kind == "cross":
            raise JobError(f"{where}: {err['ctx']['error']}") from None
        if err["type"] == "missing":
            raise JobError(f"{where}: missing key {name!r}") from None
        extra_info = cls.model_fields[name].json_schema_extra
        note = extra_info.get("changed") if isinstance(extra_info, dict) else None
        got = table[name] if name in table else err["input"]
        message = f"{where}: {name!r} must be {cls._expected(name, err['msg'])}; got {got!r}"
        raise JobError(message + (f" ({note})" if note else "")) from None

    def replace(self: _C, **changes: Any) -> _C:
        """Return a copy with ``changes`` applied, checked as :meth:`build` checks."""
        return type(self).build(None, **{**dict(self), **changes})

    def plan_text(self) -> str:
        """Return the settings as canonical JSON (:func:`plan_text`): what parties compare."""
        # model_dump_json writes an infinite setting as "Infinity" (a string), so the text
        # is strict JSON
        return plan_text(json.loads(self.model_dump_json()))

    def digest(self) -> str:
        """SHA-256 (hex) of :meth:`plan_text`: equal settings, equal digest."""
        return hashlib.sha256(self.plan_text().encode("utf-8")).hexdigest()


class RunSettings(ProtocolConfig):
    """How an estimator runs its parties in one process (not part of the protocol)."""

    timeout: float = setting(600.0, "a float in (0, inf)",
                             "Seconds a party waits for one message.", gt=0)
    keep_payloads: bool = setting(False, "a bool",
                                  "Keep every message's payload in the transcript.")


MAX_PLAN_TEXT = 1 << 16
"""The longest plan text a party parses from a peer (characters)."""


def plan_text(values: Mapping[str, Any]) -> str:
    """Return a plan's public settings as canonical JSON (sorted keys, compact, finite).

    Every party of a protocol whose parties must run with the same public settings (the
    vertical and transfer-learning plans) sends this text and checks the one it receives
    with :func:`check_same_plan`, so a mismatch is caught before any data moves and named
    setting by setting.
    """
    return json.dumps(dict(values), sort_keys=True, separators=(",", ":"), allow_nan=False)


def check_same_plan(mine: str, theirs: Any, *, party: str, peer: str) -> None:
    """Refuse a peer's plan text that differs from ``mine``, naming every differing setting.

    Raises
    ------
    ProtocolError
        If ``theirs`` is not a plan text (not a string, too long, not a JSON object).
    ValidationError
        ``"party 'A': its plan differs from 'C''s (mine, theirs): {...}"``.
    """
    if theirs == mine:
        return
    other: Any = None
    if isinstance(theirs, str) and len(theirs) <= MAX_PLAN_TEXT:
        try:
            other = json.loads(theirs)
        except ValueError:
            other = None
    if not isinstance(other, dict):
        raise ProtocolError(f"party {party!r}: {peer!r} sent a malformed plan "
                            f"({type(theirs).__name__})", party=party, step="plan")
    own = json.loads(mine)
    if own == other:
        return
    diff = {key: (own.get(key), other.get(key)) for key in sorted(set(own) | set(other))
            if own.get(key) != other.get(key)}
    raise ValidationError(f"party {party!r}: its plan differs from {peer!r}'s "
                          f"(mine, theirs): {diff}")
