"""PyTorch training for horizontal FL: everything here imports torch when imported.

- :mod:`islands.hfl.torch.models`: :class:`ModelSpec` (the architectures), a pool of
  modules, models as flat vectors;
- :mod:`islands.hfl.torch.training`: local mini-batch SGD (FedAvg, APFL, FedProx steps)
  and the centralised baseline;
- :mod:`islands.hfl.torch.loss`: a user's loss function in place of the task's;
- :mod:`islands.hfl.torch.dpsgd`: sample-level DP (DP-SGD) training;
- :mod:`islands.hfl.torch.batched`: the clients of one process trained as one batch
  (``torch.func.vmap``), :class:`~islands.hfl.torch.batched.ClientBatcher` gathering their
  calls;
- :mod:`islands.hfl.torch.learner`: the clients' local training as the roles call it
  (:class:`TorchLearner`, :class:`PooledLearner`, the :class:`FreeRider` of the
  contribution audits).

The rest of :mod:`islands.hfl` imports these inside the functions that train, so
``import islands.hfl`` does not load torch (``tests/test_layers.py`` holds that line).
"""

from islands.hfl.torch.dpsgd import PrivateTrainer
from islands.hfl.torch.learner import FreeRider, PooledLearner, TorchLearner
from islands.hfl.torch.models import ModelSpec, ModulePool, flat_parameters, load_flat
from islands.hfl.torch.training import Trainer, train_centralised

__all__ = [
    "FreeRider",
    "ModelSpec",
    "ModulePool",
    "PooledLearner",
    "PrivateTrainer",
    "TorchLearner",
    "Trainer",
    "flat_parameters",
    "load_flat",
    "train_centralised",
]
