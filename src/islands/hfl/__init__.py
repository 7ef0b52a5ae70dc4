"""Horizontal federated learning: clients with the same features and different rows.

- :mod:`islands.hfl.protocol`: the server and client roles (models as flat vectors,
  time in mini-batch steps, dropouts, checkpoints);
- :mod:`islands.hfl.strategy`: :class:`FedAvg`, :class:`APFL`, :class:`FedProx`,
  :class:`FedBN`; :mod:`islands.hfl.scaffold`: :class:`Scaffold` (control variates);
- :mod:`islands.hfl.server_opt`: server optimisers (:class:`FedAvgM`, :class:`FedAdam`,
  :class:`FedYogi`, :class:`FedAdagrad`) a strategy is given;
- :mod:`islands.aggregation`: aggregators and protections (plain mean, secure
  aggregation, additive sharing, CKKS, Paillier, chaos, DP) and the robust rules
  against poisoning (median, trimmed mean, Krum, norm bound), a package of their own;
- :mod:`islands.hfl.poisoning`: poisoning clients for simulations (sign flipping,
  scaling, "a little is enough");
- :mod:`islands.hfl.maths`: FedAvg weights, APFL's batch and interval rules;
- :mod:`islands.hfl.metrics`: accuracy, macro precision/recall/F1, Dev_avg, and the
  user's extra metrics (scikit-learn's by name, or the user's functions);
- :mod:`islands.hfl.named`: imports ``"package.module:function"`` names on each machine;
- :mod:`islands.hfl.torch`: PyTorch models (built in, or the user's own module:
  :class:`TorchModel`, :func:`load_model`), local SGD, DP-SGD and the learners
  (imported only when used: ``import islands.hfl`` does not load torch);
- :mod:`islands.hfl.estimator`: :class:`FederatedModel`, the user API;
- :mod:`islands.hfl.ray_backend`: the clients' local training in Ray workers
  (``FederatedModel(backend="ray")``; Ray imported only when used);
- :mod:`islands.hfl.job`: TOML job files for ``islands run``;
- :mod:`islands.hfl.contribution`: each client's contribution (Shapley values from the
  recorded updates, leave-one-out, retraining) and reward shares.
"""

from typing import Any

from islands.aggregation.base import Aggregator, MeanAggregator
from islands.aggregation.robust import (
    KrumAggregator,
    MedianAggregator,
    NormBoundAggregator,
    TrimmedMeanAggregator,
)
from islands.hfl.estimator import EpochRecord, FederatedModel
from islands.hfl.protocol import client, server
from islands.hfl.scaffold import Scaffold
from islands.hfl.server_opt import FedAdagrad, FedAdam, FedAvgM, FedYogi
from islands.hfl.strategy import APFL, FedAvg, FedBN, FedProx, LocalConfig, Strategy

__all__ = [
    "APFL",
    "Aggregator",
    "EpochRecord",
    "FedAdagrad",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedBN",
    "FedProx",
    "FedYogi",
    "FederatedModel",
    "KrumAggregator",
    "LocalConfig",
    "MeanAggregator",
    "MedianAggregator",
    "ModelSpec",
    "NormBoundAggregator",
    "Scaffold",
    "Strategy",
    "TorchModel",
    "TrimmedMeanAggregator",
    "client",
    "load_model",
    "server",
]


def __getattr__(name: str) -> Any:
    # the models live beside torch; load them (and torch) on first use only
    if name == "ModelSpec":
        from islands.hfl.torch.models import ModelSpec

        return ModelSpec
    if name in ("TorchModel", "load_model"):
        from islands.hfl.torch import user

        return getattr(user, name)
    raise AttributeError(f"module 'islands.hfl' has no attribute {name!r}")
