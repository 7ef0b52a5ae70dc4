"""What one party sees of vertical regression on secret shares: uniform ring elements.

The secret-sharing engine (:mod:`islands.vfl.ss`) claims that every ring element a party
receives is masked by a value drawn from another party's seed, so that its view is
uniform in Z_P whatever the others' data, and that the coordinator receives no share of
data at all. :func:`ss_view_check` tests the consequences on the real messages: it trains
twice, on B's rows and labels and on an independent permutation of them (A's inputs
unchanged), and compares every party's received ring messages, residue by residue scaled
to [0, 1) by its prime,

* with the uniform distribution (Kolmogorov–Smirnov) and
* with the other run's (two-sample Kolmogorov–Smirnov),

and checks that C received only the tags of seeds and loss shares. A p-value below
``alpha`` / (number of tests) (Bonferroni) would tell a message from uniform noise, or the
runs apart. Like the secure-CCA check (:mod:`islands.cca.audit`), these are necessary
conditions checked on the messages, not the proof: a leak that keeps every marginal
uniform (a dealer that tells A the seed of R_B) would pass them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from islands.arrays import Array
from islands.crypto.rns import SS_RING
from islands.validation import check_random_state
from islands.vfl.estimator import VerticalLinearRegression, VerticalLogisticRegression

__all__ = ["COORDINATOR_TAGS", "SsViewCheck", "ss_view_check"]

COORDINATOR_TAGS = frozenset({"hello", "seed", "lossshare"})
"""The only tags C may receive under ``engine="ss"``: no share of data reaches it."""

_RING_TAGS = ("xhat", "m", "deal", "lossshare", "open", "yhat", "powers")


@dataclass(frozen=True)
class SsViewCheck:
    """Every party's received ring messages in two runs on different data of B.

    Attributes
    ----------
    pvalues
        ``{"A/xhat/uniform": p, "A/xhat/two-sample": p, ..., "C/lossshare/uniform": p}``.
    alpha
        The family-wise level (Bonferroni over ``pvalues``).
    coordinator_tags
        The tags C received (both runs).
    indistinguishable
        Every p-value at least alpha / len(pvalues), and C received only
        :data:`COORDINATOR_TAGS`.
    models_differ
        Whether the two runs trained different models (they should: B's data differ).
    """

    pvalues: dict[str, float]
    alpha: float
    coordinator_tags: list[str]
    indistinguishable: bool
    models_differ: bool

    def to_dict(self) -> dict[str, Any]:
        """Return the check as JSON-ready values."""
        return asdict(self)


def _view(transcript: Any, party: str) -> dict[str, Array]:
    """Residues (scaled by their prime to [0, 1)) of every ring message ``party`` received."""
    out: dict[str, list[Array]] = {}
    for record in transcript.received_by(party):
        if record.tag not in _RING_TAGS:
            continue
        payload = record.payload
        residues = SS_RING.unpack(payload, payload.shape[:-1], record.tag, party)
        flat = residues.reshape(SS_RING.k, -1).astype(np.float64)
        scaled = flat / np.asarray(SS_RING.primes, dtype=np.float64)[:, None]
        out.setdefault(record.tag, []).append(scaled.ravel())
    return {tag: np.concatenate(parts) for tag, parts in out.items()}


def ss_view_check(X_a: Any, X_b: Any, y: Any, *, objective: str = "logistic",
                  sigmoid: str = "taylor", alpha: float = 0.01, epochs: int = 2,
                  batch_size: int = 64,
                  random_state: int | np.random.Generator | None = 0,
                  parties: Sequence[str] = ("A", "B", "C")) -> SsViewCheck:
    """Train twice under ``engine="ss"`` (B's data permuted the second time); compare views.

    Parameters
    ----------
    X_a, X_b, y
        The passive party's features, the active party's features and its targets,
        rows aligned.
    objective
        ``"logistic"`` (labels of two classes) or ``"linear"``.
    sigmoid
        The logistic model's ``"taylor"`` or ``"poly5"`` (whose power-tuple messages,
        masked labels and openings are checked too).
    alpha
        The family-wise level.
    epochs, batch_size
        Of both runs.
    random_state
        Draws the permutation of B's rows and both runs' batch order.

    Returns
    -------
    SsViewCheck
    """
    from scipy import stats

    rng = check_random_state(random_state, "ss_view_check")
    x_b, target = np.asarray(X_b, dtype=np.float64), np.asarray(y)
    order = rng.permutation(x_b.shape[0])
    seed = int(rng.integers(0, 2**31 - 1))
    kind = VerticalLogisticRegression if objective == "logistic" else VerticalLinearRegression
    extra: dict[str, Any] = {"sigmoid": sigmoid} if objective == "logistic" else {}
    runs = [kind(engine="ss", epochs=epochs, batch_size=batch_size, tol=None,
                 keep_payloads=True, random_state=seed, **extra).fit(X_a, xb, t)
            for xb, t in ((x_b, target), (x_b[order], target[order]))]
    pvalues: dict[str, float] = {}
    for party in parties:
        views = [_view(run.transcript_, party) for run in runs]
        for tag in sorted(views[0]):
            pvalues[f"{party}/{tag}/uniform"] = float(stats.kstest(views[0][tag],
                                                                   "uniform").pvalue)
            pvalues[f"{party}/{tag}/two-sample"] = float(
                stats.ks_2samp(views[0][tag], views[1][tag]).pvalue)
    tags = sorted({r.tag for run in runs for r in run.transcript_.received_by("C")})
    differ = not np.array_equal(runs[0].coef_b_, runs[1].coef_b_)
    return SsViewCheck(pvalues=pvalues, alpha=alpha, coordinator_tags=tags,
                       indistinguishable=(min(pvalues.values()) >= alpha / len(pvalues)
                                          and set(tags) <= COORDINATOR_TAGS),
                       models_differ=differ)
