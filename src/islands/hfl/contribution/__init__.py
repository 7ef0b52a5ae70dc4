"""Contribution measurement and reward shares for horizontal FL (Yang et al. 2019, §2.4.4).

Each organisation's contribution to the joint model is measured on validation data and
the benefit shared in proportion:

- :mod:`~islands.hfl.contribution.maths`: exact and Monte-Carlo Shapley values,
  leave-one-out, reward shares, Hoeffding's bound (pure functions of a coalition game);
- :mod:`~islands.hfl.contribution.game`: the coalition game of one round, rebuilt from
  the clients' recorded uploads without retraining, and the utilities that score it;
- :mod:`~islands.hfl.contribution.tracker`: :class:`Contribution` (the user's settings,
  given to :class:`~islands.hfl.FederatedModel`) and the server's
  :class:`ContributionTracker` (GTG-Shapley, exact per-round Shapley, one-round
  reconstruction, leave-one-out; which protections allow it and why);
- :mod:`~islands.hfl.contribution.retrain`: leave-one-out and exact Shapley by
  retraining on coalitions (any protection; the ground truth on small federations);
- :mod:`~islands.hfl.contribution.report`: the table and bar chart of
  ``islands contribution RUN_DIR``.

References
----------
.. [1] Yang Qiang et al. "Federated Machine Learning: Concept and Applications", ACM
   TIST 2019, §2.4.4 (``papers/fml-concepts-yang-2019.vi.txt``).
"""

from islands.hfl.contribution.game import ClientValidation, RoundGame, ServerValidation, Utility
from islands.hfl.contribution.maths import (
    PermutationEstimate,
    exact_shapley,
    hoeffding_halfwidth,
    leave_one_out,
    permutation_shapley,
    reward_shares,
)
from islands.hfl.contribution.tracker import (
    METHODS,
    Contribution,
    ContributionReport,
    ContributionTracker,
    IncompatibleAggregatorError,
    check_compatible,
)

__all__ = [
    "METHODS",
    "ClientValidation",
    "Contribution",
    "ContributionReport",
    "ContributionTracker",
    "IncompatibleAggregatorError",
    "PermutationEstimate",
    "RoundGame",
    "ServerValidation",
    "Utility",
    "check_compatible",
    "exact_shapley",
    "hoeffding_halfwidth",
    "leave_one_out",
    "permutation_shapley",
    "reward_shares",
]
