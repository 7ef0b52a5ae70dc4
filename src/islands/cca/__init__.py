"""Swarm CCA (SCCA): canonical correlation analysis between two peers with no server.

- :mod:`islands.cca.secure`: the secure protocol (the default): each peer learns its
  canonical vectors and the correlations, with a dealer of correlated randomness;
- :mod:`islands.cca.protocol`: the paper's roles S1 and S2 (and the swap-rule peer);
- :mod:`islands.cca.config`: :class:`SccaConfig`, every setting with its default and limit;
- :mod:`islands.cca.estimator`: :class:`SwarmCCA`, the scikit-learn-style API;
- :mod:`islands.cca.audit`: what each peer can recover from the messages it received;
- :mod:`islands.cca.maths`: the linear algebra, as pure functions.

The paper's protocol sends no raw rows, but its perturbation protects nothing: a peer
recovers the other's secret factor, S1 recovers the column span of Y, and with q known
rows of Y, all of Y (:mod:`islands.cca.audit`). It is kept for reproducing the paper.
"""

from islands.cca.config import SccaConfig
from islands.cca.estimator import SwarmCCA
from islands.cca.maths import pooled_cca
from islands.cca.protocol import SccaResult, peer, s1, s2
from islands.cca.secure import dealer, secure_peer

__all__ = ["SccaConfig", "SccaResult", "SwarmCCA", "dealer", "peer", "pooled_cca", "s1", "s2",
           "secure_peer"]
