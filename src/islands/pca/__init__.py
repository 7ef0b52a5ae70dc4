"""Federated PCA with differential privacy: ELFedPCA as published, a hardened mode, baselines.

- :mod:`islands.pca.protocol`: the site and publisher roles of every mode;
- :mod:`islands.pca.config`: :class:`PcaSettings`, every setting with its default and limit;
- :mod:`islands.pca.estimator`: :class:`FederatedPCA`, the scikit-learn-style API;
- :mod:`islands.pca.maths`: noise calibration, moments, eigenvectors (pure functions);
- :mod:`islands.pca.dp_audit`: :func:`audit_pca_dp`, a one-run empirical audit of ε.

In the published scheme (``mode="elfedpca"``) every site knows the noise, so site 1
recovers each site's matrix exactly; ``mode="secure"`` fixes that with pairwise masks and
independent noise shares.
"""

from islands.pca.config import PcaSettings
from islands.pca.dp_audit import PcaDpAudit, audit_pca_dp
from islands.pca.estimator import FederatedPCA
from islands.pca.protocol import MODES, PcaConfig, publisher, site

__all__ = ["MODES", "FederatedPCA", "PcaConfig", "PcaDpAudit", "PcaSettings", "audit_pca_dp",
           "publisher", "site"]
