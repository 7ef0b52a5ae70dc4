"""Differential privacy: clipping, cryptographic Gaussian noise, and privacy accounting.

:mod:`islands.privacy.mechanisms` has the pieces of the Gaussian mechanism (L2
clipping, noise from a CSPRNG, the per-client noise of distributed DP with secure
aggregation); :mod:`islands.privacy.accountant` tracks the (ε, δ) spent over repeated,
optionally subsampled, releases with Google's ``dp-accounting`` (RDP or PLD), and
calibrates σ to a budget. :mod:`islands.privacy.audit` measures what a run really gave:
an empirical lower bound on ε from canaries in one run (Steinke, Nasr and Jagielski), to
set beside the accountant's upper bound.

Importing this package is cheap: ``dp_accounting`` (and scipy behind it) is imported
only when ε is first computed.
"""

from islands.privacy.accountant import (
    METHODS,
    PLD_DISCRETIZATION,
    RDP_ORDERS,
    PrivacyAccountant,
    calibrate_noise,
)
from islands.privacy.audit import (
    OneRunAudit,
    audit_gaussian,
    audit_scores,
    ceiling,
    gaussian_curve_lower_bound,
    one_run_lower_bound,
    one_run_p_value,
)
from islands.privacy.mechanisms import (
    clip_l2,
    distributed_noise_std,
    effective_noise_multiplier,
    gaussian_noise,
)

__all__ = [
    "METHODS",
    "PLD_DISCRETIZATION",
    "RDP_ORDERS",
    "OneRunAudit",
    "PrivacyAccountant",
    "audit_gaussian",
    "audit_scores",
    "calibrate_noise",
    "ceiling",
    "clip_l2",
    "distributed_noise_std",
    "effective_noise_multiplier",
    "gaussian_curve_lower_bound",
    "gaussian_noise",
    "one_run_lower_bound",
    "one_run_p_value",
]
