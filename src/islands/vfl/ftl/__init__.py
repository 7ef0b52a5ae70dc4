"""Federated transfer learning: B's labels teach A, which holds other features.

Liu, Kang, Xing, Chen, Yang (2020); Yang et al. (2019), §2.3.3 and §2.4.3. B (the
source) holds labelled rows, A (the target) unlabelled rows with different features;
they share a few rows. Each trains a network into a common space; A's rows are then
scored against B's class directions.

- :class:`FederatedTransferLearner`: the estimator (PSI alignment, training, inference).
- :class:`FtlConfig` (:mod:`islands.vfl.ftl.config`): every setting, once; the
  estimator and the federation file's ``[ftl]`` section build it.
- :mod:`islands.vfl.ftl.protocol`: the two roles and federated inference, dispatching
  on the plan's ``engine``: secret shares with a dealer (:mod:`islands.vfl.ftl.ss`, the
  default) or each party's homomorphic key (OU, Paillier) or the clear.
- :mod:`islands.vfl.ftl.maths`: the Taylor losses, gradients and fixed point.
"""

from islands.vfl.ftl.config import FtlConfig, Plan
from islands.vfl.ftl.estimator import FederatedTransferLearner

__all__ = ["FederatedTransferLearner", "FtlConfig", "Plan"]
