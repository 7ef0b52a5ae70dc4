"""SecureBoost: gradient-boosted trees across vertically partitioned parties.

Cheng et al., "SecureBoost: A Lossless Federated Learning Framework" (IEEE Intelligent
Systems 2021), with SecureBoost+'s engineering (Chen et al. 2021). Modules: ``maths``
(bins, losses, gains, tree growth), ``packing`` (gradient–hessian packing, cipher
compression), ``config`` (the settings), ``protocol`` (the roles), ``model`` (what each
party keeps), ``reference`` (the plaintext reference), ``federation`` (alignment,
training and inference as one run), ``estimator`` (the user API), ``woe`` (weight of
evidence and information value across the parties, a feature-selection step), ``audit``
(what a passive party infers of the labels, measured).
"""

from islands.vfl.secureboost.config import BoostConfig
from islands.vfl.secureboost.estimator import SecureBoostClassifier, SecureBoostRegressor
from islands.vfl.secureboost.woe import InformationValues, information_values

__all__ = ["BoostConfig", "InformationValues", "SecureBoostClassifier", "SecureBoostRegressor",
           "information_values"]
