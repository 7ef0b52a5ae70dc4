"""Vertical federated learning: one model over features split between organisations.

Organisations that hold different features of the same people train one model
(Yang et al. 2019, §2.4.2).

- :class:`VerticalLinearRegression`, :class:`VerticalLogisticRegression`: the estimators;
  ``fit(X_a, X_b, y, ids_a=None, ids_b=None)`` aligns rows by private set intersection
  when IDs are given, then trains under additively homomorphic encryption (``he``:
  Okamoto–Uchiyama on HEU or Paillier) with a coordinator.
- :mod:`islands.vfl.protocol`: the roles of the coordinator C, the active party B
  (labels) and the passive parties A_1 … A_k, and of federated inference (Table 2).
- :class:`FederatedTransferLearner` (:mod:`islands.vfl.ftl`): federated transfer
  learning, B's labels teaching A across different features and few shared rows.
- :class:`SecureBoostClassifier`, :class:`SecureBoostRegressor`
  (:mod:`islands.vfl.secureboost`): gradient-boosted trees whose gradients travel
  encrypted and whose thresholds stay with the party owning each feature.
- :mod:`islands.vfl.maths`: the objectives, fixed-point arithmetic and the centralised
  references the protocol is tested against.
"""

from islands.vfl.estimator import VerticalLinearRegression, VerticalLogisticRegression
from islands.vfl.ftl import FederatedTransferLearner
from islands.vfl.protocol import Plan
from islands.vfl.secureboost.estimator import SecureBoostClassifier, SecureBoostRegressor

__all__ = ["FederatedTransferLearner", "Plan", "SecureBoostClassifier", "SecureBoostRegressor",
           "VerticalLinearRegression", "VerticalLogisticRegression"]
