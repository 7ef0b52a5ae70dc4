"""Thread limits for a party's numerical libraries."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["torch_threads"]


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Set torch's intra-op threads for the duration (None: leave as is).

    Imports torch (an optional dependency) only when ``threads`` is given.
    """
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
