"""The ``islands`` command line.

Commands: ``islands --version``, ``islands info`` (which optional parts and data sets are
installed), ``islands demo`` (every protocol family on real data, with its audits, written
to ``runs/demo/``; ``islands demo securesum``: a three-party secure sum with its
transcript), ``islands run JOB.toml`` (a federated training job), ``islands contribution``
(each client's share of a finished run), ``islands audit scca|server|pca|gradients`` (what
each protocol's parties recover from each other), ``islands reproduce
scca|pca|vfl|ftl|apfl|contribution`` (a paper's experiments as a report), ``islands certs``
(a federation's CA and party certificates), ``islands party --config FILE`` (one
organisation's party of a deployed federation, over gRPC with mutual TLS) and ``islands
protocols`` (the protocols a federation can run, from :mod:`islands.protocols`) and
``islands report RUN_DIR`` (a run folder as one self-contained HTML page).

Each command group is one module of this package; importing them registers their commands
on :data:`app`, in the order ``islands --help`` lists them. The cli is the top layer and
may import anything, but ``islands --help`` loads no protocol package: a command imports
the protocol packages, deployment and experiments it runs (they bring pydantic, torch,
scipy, scikit-learn, Paillier), and only the registry's names are read up front
(``tests/test_package.py::test_cli_loads_no_protocol_package``).
"""

from __future__ import annotations

from islands.cli.common import app

# isort: off
# importing a module registers its commands: this order is `islands --help`'s order
from islands.cli import info, run, deploy, audit, reproduce  # noqa: F401
from islands.cli import report  # noqa: F401
# isort: on

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``islands`` console script."""
    app()
