"""Settings the whole suite pins so that its bit-exact comparisons hold on every machine.

Floating-point sums depend on how many threads split them: torch's intra-op threads and
the BLAS threads. The defaults follow the machine (its cores, its affinity mask), so a
test comparing two runs bit for bit — in-process against Ray workers or party processes,
a resumed run against an uninterrupted one — passes on one machine and fails on another
unless both sides run with the same counts. The suite therefore runs with one thread of
each, here and (through the environment) in every process it starts; a test that needs
another count sets it explicitly on both sides of its comparison.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

PINNED_THREADS = 1
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = str(PINNED_THREADS)

# pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their environment; rich's
# console, built when islands.cli is imported, would keep 80 columns for good and wrap the
# lines that in-process command tests read (they set COLUMNS for the call)
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


@pytest.fixture(autouse=True, scope="session")
def _pinned_threads() -> Iterator[None]:
    from threadpoolctl import threadpool_limits

    try:
        import torch
    except ImportError:  # pragma: no cover - torch is part of the test install
        torch = None
    if torch is not None:
        torch.set_num_threads(PINNED_THREADS)
    with threadpool_limits(limits=PINNED_THREADS):
        yield
