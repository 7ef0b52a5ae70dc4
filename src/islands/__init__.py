"""islands: privacy-preserving computation across data islands.

Organisations whose data must stay on their premises compute together through
protocols written as roles that only talk through messages (:mod:`islands.runtime`).
The heavy optional parts (PyTorch, TenSEAL, gRPC, Ray) are imported only by the
subpackages that need them, never by ``import islands``.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
