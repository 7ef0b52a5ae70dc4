"""Callables that files name as ``"package.module:function"``, imported on each machine.

A job or federation file names the user's code (a model factory, a loss, a metric) and
every party imports it from its own installation: code never travels, only its name.
This module does the import, without torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from islands.errors import ValidationError, invalid_parameter
from islands.validation import describe

__all__ = ["NAME_PATTERN", "import_callable", "is_name"]

NAME_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"
"""What a callable's name looks like: ``package.module:function`` (or ``:Class.method``)."""
_NAME = re.compile(NAME_PATTERN)


def is_name(value: Any) -> bool:
    """Whether ``value`` is a string of the form ``"package.module:function"``."""
    return isinstance(value, str) and _NAME.match(value) is not None


def import_callable(name: str, *, param: str, owner: str,
                    folder: str | os.PathLike[str] | None = None) -> Callable[..., Any]:
    """Import ``"package.module:function"`` on this machine and return the callable.

    Parameters
    ----------
    name : str
        The callable's name.
    param : str
        The parameter or key that gave it (``"factory"``, ``"loss"``), for the messages.
    owner : str
        Who asks, for the messages.
    folder : path or None
        A job file's folder: a module found nowhere else is looked up there too (the
        folder joins ``sys.path``, as a script's own folder does when Python runs it).

    Raises
    ------
    ValidationError
        Naming ``param``: the name is malformed, its module cannot be imported here, or
        it has no such callable (each party imports it itself: it must be installed, or
        on ``PYTHONPATH``, there).
    """
    if not is_name(name):
        raise invalid_parameter(param, owner, "a name 'package.module:function'",
                                describe(name))
    module_name, _, attr = name.partition(":")
    top = module_name.split(".")[0]
    where = None if folder is None else os.fspath(Path(folder).resolve())
    if (where is not None and where not in sys.path and importlib.util.find_spec(top) is None
            and ((Path(where) / f"{top}.py").is_file() or (Path(where) / top).is_dir())):
        sys.path.insert(0, where)
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # an import runs the module's code: any error is the user's
        raise ValidationError(
            f"The {param!r} parameter of {owner} names {name!r}, but module "
            f"{module_name!r} cannot be imported on this machine ({exc!r}); each party "
            f"imports the {param} itself, so it must be installed or on PYTHONPATH "
            "at every party") from None
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ValidationError(f"The {param!r} parameter of {owner} names {name!r}, but "
                                  f"{module_name!r} has no attribute {attr!r}")
    if not callable(target):
        raise ValidationError(f"The {param!r} parameter of {owner} names {name!r}, which is "
                              f"not callable ({describe(target)})")
    return target  # type: ignore[no-any-return]
