"""What site 1 learns about each site's data in federated DP-PCA.

In the published scheme (``mode="elfedpca"``) site 1 draws the noise seed (32 fresh
bytes from its CSPRNG) and sends it to every site, which adds E/s to its local matrix
A_i = X̃_iᵀX̃_i/n. Site 1 therefore
regenerates E and subtracts it: A_i = (A_i + E/s) − E/s, exactly. The source notes admit
this themselves. Each A_i is that site's (normalised) second-moment matrix: the whole
covariance structure of its private data, with no noise at all.

In ``mode="secure"`` the same attack reads a pairwise-masked ring element: decoded, it is
uniform garbage whose error dwarfs the noise scale. Site 1 learns only the noisy total.

The attack uses only what site 1 received and sent (the transcript) and nothing of the
other sites' data; the data is used only to score it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from islands.arrays import Array
from islands.crypto import decode_fixed
from islands.errors import ValidationError
from islands.pca import maths
from islands.pca.estimator import FederatedPCA
from islands.pca.protocol import (
    MOMENT_FRAC_BITS,
    Mean,
    Noise,
    centring_of,
    elfedpca_noise,
)
from islands.progress import ProgressOption, check_progress, task
from islands.runtime import Record

__all__ = ["PcaAuditReport", "audit_pca", "recover_elfedpca_moments"]



def _sent(records: Sequence[Record], tag: str) -> Any:
    for r in records:
        if r.tag == tag:
            return r.payload
    raise ValidationError(f"site 1 sent no {tag!r} message; run with keep_payloads=True")


def recover_elfedpca_moments(
    received_by_site1: Sequence[Record], sent_by_site1: Sequence[Record], n_sites: int
) -> dict[str, Array]:
    """Site 1's attack on ELFedPCA: every other site's exact A_i from its ``moment``.

    Parameters
    ----------
    received_by_site1, sent_by_site1
        What site 1 received and sent (``transcript.received_by("site1")`` etc.).
    n_sites
        s, the number of sites.
    """
    noise: Noise = _sent(sent_by_site1, "noise")
    mean: Mean = _sent(sent_by_site1, "mean")
    d = int(mean.mean.shape[0])
    # as published, E is calibrated for the whole budget
    tau = maths.gaussian_tau(float(noise.epsilon), float(noise.delta), mean.n)
    shared = maths.symmetric_noise(d, tau, elfedpca_noise(noise.seed))
    return {r.sender: np.asarray(r.payload) - shared / n_sites
            for r in received_by_site1 if r.tag == "moment"}


def _naive_secure_reading(received_by_site1: Sequence[Record], d: int,
                          n: int) -> dict[str, Array]:
    """Run the same attack on secure mode: read each masked ``moment`` as if it were plain."""
    return {r.sender: maths.symmetric_from_upper(
        decode_fixed(np.asarray(r.payload), frac_bits=MOMENT_FRAC_BITS), d) / n
        for r in received_by_site1 if r.tag == "moment"}


@dataclass(frozen=True)
class PcaAuditReport:
    """Site 1's recovery of the other sites' local matrices.

    Attributes
    ----------
    elfedpca_recovery_rel_error
        Largest ‖Â_i − A_i‖_F / ‖A_i‖_F over sites 2..s in ``elfedpca`` (0 = exact).
    secure_recovery_rel_error
        Smallest ‖Â_i − A_i‖_F / (τ·d) over sites 2..s in ``secure``: the attack's error
        measured in units of the noise scale (τ·d ≈ ‖E‖_F). Far above 1: it fails.
    secure_recovery_rel_error_data
        Smallest ‖Â_i − A_i‖_F / ‖A_i‖_F in ``secure``.
    n_sites, n, d, epsilon, delta, tau
        The setting.
    """

    elfedpca_recovery_rel_error: float
    secure_recovery_rel_error: float
    secure_recovery_rel_error_data: float
    n_sites: int
    n: int
    d: int
    epsilon: float
    delta: float
    tau: float

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready values."""
        return asdict(self)


def audit_pca(
    parts: Sequence[Array], *, n_components: int = 5, epsilon: float = 0.5,
    delta: float = 1e-5, random_state: int = 0, progress: ProgressOption = None,
) -> PcaAuditReport:
    """Fit ``elfedpca`` and ``secure`` on the same sites and run site 1's attack on both.

    ``progress`` reports one step per mode (``True``: a bar; a callable gets each
    :class:`~islands.progress.ProgressUpdate`).
    """
    progress = check_progress(progress, "audit_pca")
    arrays = [np.asarray(p, dtype=np.float64) for p in parts]
    n, d = np.vstack(arrays).shape

    errors: dict[str, list[float]] = {}
    tau = 0.0
    with task(progress, "audit pca", 2, owner="audit_pca") as running:
        for done, mode in enumerate(("elfedpca", "secure")):
            running.update(done, f"fitting {mode} and running site 1's attack")
            with warnings.catch_warnings():  # elfedpca's void guarantee is what is audited
                warnings.simplefilter("ignore", UserWarning)
                model = FederatedPCA(n_components, epsilon=epsilon, delta=delta, mode=mode,
                                     random_state=random_state, keep_payloads=True).fit(arrays)
            t = model.transcript_
            # each site's true matrix, centred as this mode centres, on the mean it released
            truth = {f"site{i + 1}": maths.moment([a], model.mean_,
                                                  centring=centring_of(mode))[0] / n
                     for i, a in enumerate(arrays)}
            assert isinstance(model.tau_, float)
            tau = model.tau_
            if mode == "elfedpca":
                guess = recover_elfedpca_moments(t.received_by("site1"), t.sent_by("site1"),
                                                 len(arrays))
                errors[mode] = [float(np.linalg.norm(guess[s] - truth[s])
                                      / np.linalg.norm(truth[s])) for s in guess]
            else:
                guess = _naive_secure_reading(t.received_by("site1"), d, n)
                diffs = {s: float(np.linalg.norm(guess[s] - truth[s])) for s in guess}
                errors[mode] = [diffs[s] / (tau * d) for s in guess]
                errors["secure_data"] = [diffs[s] / float(np.linalg.norm(truth[s]))
                                         for s in guess]
    return PcaAuditReport(
        elfedpca_recovery_rel_error=max(errors["elfedpca"]),
        secure_recovery_rel_error=min(errors["secure"]),
        secure_recovery_rel_error_data=min(errors["secure_data"]),
        n_sites=len(arrays), n=n, d=d, epsilon=epsilon, delta=delta, tau=tau,
    )
