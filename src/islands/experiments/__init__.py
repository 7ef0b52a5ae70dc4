"""Reproductions of the source papers' experiments, each writing a self-contained report.

:mod:`islands.experiments.scca`
    :func:`~islands.experiments.scca.reproduce_scca`: Swarm CCA (Li & Du 2024, Figs 3-7)
    on two-view Fashion-MNIST and scikit-learn digits.
:mod:`islands.experiments.pca`
    :func:`~islands.experiments.pca.reproduce_pca`: federated DP-PCA (ELFedPCA notes):
    captured variance and SVM accuracy against ε, k and sites, all five modes.
:mod:`islands.experiments.demo`
    :func:`~islands.experiments.demo.run_demo`: ``islands demo``, every protocol family on
    real data in a few minutes (:data:`~islands.experiments.demo.PARTS`).
:mod:`islands.experiments.report`
    Small helpers shared by the reproductions: ``results.json`` writing, Markdown
    tables and PNG figures.

Importing this package loads nothing heavy: scikit-learn and matplotlib are imported
inside the functions that need them. Import the submodules explicitly, e.g.
``from islands.experiments.scca import reproduce_scca``.
"""

from __future__ import annotations

__all__ = ["demo", "pca", "report", "scca"]
