"""The base of islands' scikit-learn-style estimators: parameters from ``__init__``, checked at fit.

scikit-learn's ``BaseEstimator`` is not subclassed: importing it costs about a second and
``import islands`` stays light. What it gives is small and is written here once:
``get_params``/``set_params`` read the parameter names from the explicit ``__init__``
signature (scikit-learn's own rule, so :func:`sklearn.base.clone` works), and ``__repr__``
shows only the parameters that differ from their defaults. A renamed parameter's old name
is still taken for a while (:func:`accepts_renamed`, with a ``FutureWarning``), without
being a parameter of its own.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, TypeVar, cast

from islands.config import ProtocolConfig, RunSettings
from islands.errors import ValidationError
from islands.reporting import html_table

__all__ = ["FederatedEstimator", "accepts_renamed"]

_E = TypeVar("_E", bound="FederatedEstimator[Any]")
_Cfg = TypeVar("_Cfg", bound=ProtocolConfig)
_Init = TypeVar("_Init", bound=Callable[..., None])


def accepts_renamed(init: _Init) -> _Init:
    """Let an ``__init__`` take the deprecated names of its class's ``renamed``.

    An old name is moved to its new one with a ``FutureWarning``; both at once is a
    :class:`~islands.errors.ValidationError`. The signature ``get_params`` reads stays
    the wrapped one (:func:`inspect.signature` follows ``__wrapped__``), so the old name
    is no parameter: ``get_params``, ``repr`` and :func:`sklearn.base.clone` use the new.
    """

    @functools.wraps(init)
    def wrapper(self: FederatedEstimator[Any], *args: Any, **kwargs: Any) -> None:
        init(self, *args, **_renamed(type(self), kwargs))

    return cast(_Init, wrapper)


def _renamed(cls: type[FederatedEstimator[Any]], params: dict[str, Any]) -> dict[str, Any]:
    """Return ``params`` with ``cls.renamed``'s old names moved to the new (warned once each).

    Called by :func:`accepts_renamed`'s wrapper and by ``set_params``, each called by the
    user: the warning points at the user's line.
    """
    out = dict(params)
    for old, new in cls.renamed.items():
        if old not in out:
            continue
        if new in out:
            raise ValidationError(f"{cls.__name__}: give {new!r} only; {old!r} is its old "
                                  f"name (deprecated), and both were given")
        warnings.warn(f"{cls.__name__}'s {old!r} parameter is deprecated and will be "
                      f"removed; use {new!r} (the same value means the same thing)",
                      FutureWarning, stacklevel=3)
        out[new] = out.pop(old)
    return out


class FederatedEstimator(Generic[_Cfg]):
    """An estimator whose ``__init__`` only stores its protocol's settings and runtime ones.

    A subclass sets ``Config`` (its protocol's :class:`~islands.config.ProtocolConfig`)
    and ``runtime`` (the other ``__init__`` parameters: timeout, payloads, seeds). Its
    ``__init__`` parameters must be exactly ``Config``'s fields and ``runtime``.
    """

    Config: type[_Cfg]
    runtime: ClassVar[tuple[str, ...]] = ()
    renamed: ClassVar[Mapping[str, str]] = {}
    """Deprecated parameter names and their new ones, still taken by ``set_params`` and
    by an ``__init__`` decorated with :func:`accepts_renamed` (with a ``FutureWarning``)."""

    @classmethod
    def _param_names(cls) -> list[str]:
        signature = inspect.signature(cls.__init__)
        return [p.name for p in signature.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        signature = inspect.signature(cls.__init__)
        return {name: signature.parameters[name].default for name in cls._param_names()}

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Return the constructor parameters (scikit-learn convention)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self: _E, **params: Any) -> _E:
        """Set constructor parameters (scikit-learn convention); they are checked at fit.

        A deprecated name of ``renamed`` sets its new parameter, with a ``FutureWarning``.
        """
        params = _renamed(type(self), params)
        valid = self._param_names()
        for key in params:
            if key not in valid:
                raise ValidationError(f"{type(self).__name__} has no parameter {key!r}; "
                                      f"valid: {sorted(valid)}")
        for key, value in params.items():
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        defaults = self._defaults()
        changed = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items()
                            if v is not defaults[k] and _differs(v, defaults[k]))
        return f"{type(self).__name__}({changed})"

    def _repr_html_(self) -> str:
        """Show the estimator in Jupyter: fitted or not, its fitted results, its settings."""
        fitted = {k: v for k, v in vars(self).items()
                  if k.endswith("_") and not k.startswith("_") and v is not None}
        rows: list[tuple[str, Any]] = [("fitted", "yes" if fitted else "no")]
        for name, value in fitted.items():
            if name == "transcript_" and hasattr(value, "__len__"):
                value = f"{len(value)} messages"
            rows.append((name, value))
        return html_table(type(self).__name__, rows, settings=self.get_params(),
                          open_settings=True)

    def _config(self) -> _Cfg:
        """Return the protocol settings, checked (the message names this estimator)."""
        owner = type(self).__name__
        return self.Config.build(owner, **{name: getattr(self, name)
                                           for name in self.Config.model_fields})

    def _run_settings(self) -> RunSettings:
        """Return the ``timeout`` and ``keep_payloads`` parameters, checked."""
        owner = type(self).__name__
        return RunSettings.build(owner, **{name: getattr(self, name)
                                           for name in RunSettings.model_fields
                                           if name in self.runtime})


def _differs(value: Any, default: Any) -> bool:
    try:
        return bool(value != default)
    except (TypeError, ValueError):  # e.g. an array, whose comparison is not one bool
        return True
