"""The ``islands`` command line.

Commands: ``islands --version``, ``islands info`` (which optional parts and data sets are
installed), ``islands demo`` (every protocol family on real data, with its audits, written
to ``runs/demo/``; ``islands demo securesum``: a three-party secure sum with its
transcript), ``islands run JOB.toml`` (a federated training job), ``islands contribution``
(each client's share of a finished run), ``islands audit scca|server|pca|gradients|secureboost``
(what each protocol's parties recover from each other), ``islands reproduce
scca|pca|vfl|ftl|apfl|contribution`` (a paper's experiments as a report), ``islands certs``
(a federation's CA and party certificates), ``islands party --config FILE`` (one
organisation's party of a deployed federation, over gRPC with mutual TLS) and ``islands
protocols`` (the protocols a federation can run, from :mod:`islands.protocols`) and
``islands report RUN_DIR`` (a run folder as one self-contained HTML page) and ``islands
export RUN_DIR`` (a horizontal run's trained model as a torch or ONNX file).

Each command group is one module of this package; importing them registers their commands
on :data:`app`, in the order ``islands --help`` lists them. The cli is the top layer and
may import anything, but ``islands --help`` loads no protocol package: a command imports
the protocol packages, deployment and experiments it runs (they bring pydantic, torch,
scipy, scikit-learn, Paillier), and only the registry's names are read up front
(``tests/test_package.py::test_cli_loads_no_protocol_package``).
"""

from __future__ import annotations

import sys
from typing import NoReturn

from islands.cli.common import app

# isort: off
# importing a module registers its commands: this order is `islands --help`'s order
from islands.cli import info, run, deploy, audit, reproduce  # noqa: F401
from islands.cli import report, export  # noqa: F401
# isort: on

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``islands`` console script."""
    try:
        app()
    except SystemExit as exc:
        if _command(sys.argv[1:]) == "party":
            _leave(exc.code)
        raise


def _command(args: list[str]) -> str | None:
    """Return the command a command line runs: its first word that is not an option."""
    return next((a for a in args if not a.startswith("-")), None)


def _leave(code: int | str | None) -> NoReturn:
    """End an ``islands party`` process now, without the interpreter's teardown.

    By then the party owes nothing: its transport has closed (every message it sent was
    acknowledged, and its server let calls in progress finish within its grace), its
    files are written and closed, and its peers were told how it ended. What is left is
    tearing down some 2,000 modules (torch among them): about a second of CPU per
    process, and the 51 parties of a federation on one machine left a minute after
    their results. The exit handlers still run (worker pools are stopped, logs flushed).
    """
    import atexit
    import os

    status = code if isinstance(code, int) else (0 if code is None else 1)
    if isinstance(code, str):
        print(code, file=sys.stderr)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
