"""Aggregation and the protections around it, for any protocol that sums client updates.

- :mod:`islands.aggregation.base`: the :class:`Aggregator` interface (a client half and
  a server half), the plain weighted mean, and the :class:`AggStep`/:class:`AggReply`
  messages every protection's phases travel in;
- :mod:`islands.aggregation.secagg`: secure aggregation with dropout recovery
  (Bonawitz et al., CCS 2017);
- :mod:`islands.aggregation.secaggplus`: SecAgg+ on a sparse random graph (Bell et al.,
  CCS 2020), its graph and parameters in :mod:`islands.aggregation.harary`;
- :mod:`islands.aggregation.additive`: additive secret sharing between the clients;
- :mod:`islands.aggregation.homomorphic`: CKKS and packed Paillier aggregation;
- :mod:`islands.aggregation.keys`: dealing one shared secret key through a server that
  must never see it;
- :mod:`islands.aggregation.robust`: robust rules against poisoning clients (coordinate-
  wise median and trimmed mean, Krum and Multi-Krum, norm bounding), which need single
  updates and so are refused under the protections that hide them;
- :mod:`islands.aggregation.protect`: the chaos permutation and client-level DP that
  wrap any aggregator, the stack a job's ``protect = [...]`` names, and the sample-level
  DP (DP-SGD) settings.

This package imports only :mod:`islands.crypto`, :mod:`islands.privacy`,
:mod:`islands.runtime` and the core modules, never a protocol package or torch
(``tests/test_layers.py``). The wire names of its messages (``hfl.AggStep``,
``hfl.AggReply``, ``hfl.AdditiveShare``) are those they had in :mod:`islands.hfl`.
"""

from islands.aggregation.additive import AdditiveSharing
from islands.aggregation.base import (
    Aggregator,
    AggReply,
    AggStep,
    ClientHalf,
    MeanAggregator,
    ServerHalf,
)
from islands.aggregation.homomorphic import CKKSAggregator, PaillierAggregator
from islands.aggregation.protect import (
    ChaosPermutation,
    ClientDP,
    SampleDP,
    build_aggregator,
    build_sample_dp,
)
from islands.aggregation.robust import (
    KrumAggregator,
    MedianAggregator,
    NormBoundAggregator,
    TrimmedMeanAggregator,
)
from islands.aggregation.secagg import SecureAggregation
from islands.aggregation.secaggplus import SecureAggregationPlus

__all__ = [
    "AdditiveSharing",
    "AggReply",
    "AggStep",
    "Aggregator",
    "CKKSAggregator",
    "ChaosPermutation",
    "ClientDP",
    "ClientHalf",
    "KrumAggregator",
    "MeanAggregator",
    "MedianAggregator",
    "NormBoundAggregator",
    "PaillierAggregator",
    "SampleDP",
    "SecureAggregation",
    "SecureAggregationPlus",
    "ServerHalf",
    "TrimmedMeanAggregator",
    "build_aggregator",
    "build_sample_dp",
]
