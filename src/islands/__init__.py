"""islands: privacy-preserving computation across data islands.

Organisations whose data must stay on their premises compute together through
protocols written as roles that only talk through messages (:mod:`islands.runtime`).
The heavy optional parts (PyTorch, TenSEAL, gRPC, Ray) are imported only by the
subpackages that need them, never by ``import islands``. :func:`islands.load_run`
(:mod:`islands.runs`) reads a finished run's folder back as typed results.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "load_run"]


def __getattr__(name: str) -> Any:
    # PEP 562: islands.load_run loads islands.runs (and what it reads) on first use only
    if name == "load_run":
        return importlib.import_module("islands.runs").load_run
    raise AttributeError(f"module 'islands' has no attribute {name!r}")
