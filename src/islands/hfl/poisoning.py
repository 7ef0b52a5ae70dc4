"""Poisoning clients for simulations: sign flipping, scaling, "a little is enough".

Each is a learner wrapper for ``FederatedModel.fit(..., behaviour={name: wrap})``, like
:class:`~islands.hfl.torch.learner.FreeRider`: it joins with the inner learner's sample
counts, trains honestly to get its update Δ = w_k − w_global, then uploads another model.
They exist to measure the robust rules of :mod:`islands.aggregation.robust`; none of
them is a protection. Numpy only (no torch), so they wrap any learner.

* :class:`SignFlipping` uploads w_global − s·Δ (s = 10 by default);
* :class:`Scaling` uploads w_global + s·Δ (model replacement's boosting);
* :class:`LittleIsEnough` (Baruch et al. 2019) makes colluding clients upload
  w_global + μ − z·σ, μ and σ the per-coordinate mean and standard deviation of the
  updates the coalition sees, z the paper's z_max for n clients and f colluders. The
  colluders share one coordinator object (in one process: a simulation), each waits at
  a per-round barrier for the others' honest updates, and what the coalition sees is
  stated: its own members' honest updates, plus those of any benign client the
  simulation lets it :meth:`~LittleIsEnough.watch` (the paper's omniscient attacker,
  who knows the benign updates' statistics). Every colluder and watched client must
  train in every round (``fraction`` 1): a round where one of them is missing times out
  with an error naming the round.

References
----------
.. [1] G. Baruch, M. Baruch, Y. Goldberg. "A Little Is Enough: Circumventing Defenses
   For Distributed Learning". NeurIPS 2019 (§3, z_max; Algorithm 3).
.. [2] E. Bagdasaryan et al. "How To Backdoor Federated Learning". AISTATS 2020
   (scaling an update to replace the model).
"""

from __future__ import annotations

import math
import threading
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import NDArray

from islands.arrays import Vector
from islands.errors import ValidationError, invalid_parameter
from islands.hfl.protocol import LocalOutcome, WrappedLearner
from islands.hfl.strategy import LocalConfig
from islands.validation import check_float, check_int

__all__ = ["LittleIsEnough", "Scaling", "SignFlipping", "alie_z_max"]


class _Attacker(WrappedLearner):
    """A learner around ``inner``: its counts and evaluation, an honest update to corrupt.

    It claims ``inner``'s weight.
    """

    def evaluate(self, params: Vector) -> float:
        """Return the inner learner's evaluation."""
        return float(self.inner.evaluate(params))

    def _honest(self, params: Vector, **kw: Any) -> tuple[LocalOutcome, NDArray[np.float64]]:
        out: LocalOutcome = self.inner.train(params, **kw)
        delta = np.asarray(out.params, np.float64) - np.asarray(params, np.float64)
        return out, delta


def _scale(value: Any, owner: str) -> float:
    return check_float(value, "scale", owner, low=0.0, low_inclusive=False)


class _Magnified(_Attacker):
    """Upload w_global + direction·s·Δ: the honest update Δ magnified by s (and reversed)."""

    direction = 1.0

    def __init__(self, inner: Any, scale: float = 10.0) -> None:
        self.inner = inner
        self.scale = _scale(scale, type(self).__name__)

    def train(self, params: Vector, *, epoch: int, step: int, steps: int, batch_size: int,
              config: LocalConfig, state: Vector | None) -> LocalOutcome:
        """Train honestly, then upload the magnified update (the honest loss is reported)."""
        out, delta = self._honest(params, epoch=epoch, step=step, steps=steps,
                                  batch_size=batch_size, config=config, state=state)
        bad = np.asarray(params, np.float64) + self.direction * self.scale * delta
        return LocalOutcome(params=bad.astype(np.float32), state=out.state,
                            loss=out.loss)


class SignFlipping(_Magnified):
    """Upload w_global − s·Δ: the honest update reversed and magnified.

    Parameters
    ----------
    inner
        The learner that trains honestly (its counts are claimed).
    scale : float, default=10.0
        s > 0.
    """

    direction = -1.0


class Scaling(_Magnified):
    """Upload w_global + s·Δ: the honest update magnified (boosting).

    Parameters
    ----------
    inner
        The learner that trains honestly.
    scale : float, default=10.0
        s > 0.
    """


def alie_z_max(n: int, f: int) -> float:
    """Return Baruch et al.'s z_max for n clients of which f collude.

    s = ⌊n/2 + 1⌋ − f benign clients must be "won over" for the colluders' value to
    be chosen; z_max = Φ⁻¹((n − s)/n), Φ the standard normal CDF.

    Raises
    ------
    ValidationError
        Unless 1 ≤ f < n and z_max > 0 (too few colluders for any shift).

    References
    ----------
    .. [1] Baruch et al., NeurIPS 2019, §3 (Algorithm 3's z_max).
    """
    n = check_int(n, "n", "alie_z_max", low=2)
    f = check_int(f, "f", "alie_z_max", low=1)
    if f >= n:
        raise invalid_parameter("f", "alie_z_max", f"an int in [1, {n - 1}] (n={n})", f)
    s = math.floor(n / 2 + 1) - f
    p = (n - s) / n
    if not 0.5 < p < 1:
        raise ValidationError(f"alie_z_max: with n={n} and f={f}, (n - s)/n = {p:.3g} gives "
                              "no positive z")
    return float(NormalDist().inv_cdf(p))


class LittleIsEnough:
    """The coordinator of a "little is enough" coalition (Baruch et al. 2019).

    Make one per coalition; :meth:`wrap` each colluding client's learner and, for the
    paper's omniscient attacker, :meth:`watch` the benign clients' learners (they stay
    honest; their updates are only shown to the coalition). Each round every wrapped
    and watched learner reports its honest update Δ; once all have, each colluder
    uploads w_global + μ − z·σ, μ and σ the per-coordinate mean and (population)
    standard deviation of the reported updates.

    Parameters
    ----------
    clients : int
        n, the clients of the federation (for z).
    colluders : int
        f, how many learners will be wrapped.
    z : float, optional
        The shift in standard deviations (default: :func:`alie_z_max` of n and f).
    timeout : float, default=120.0
        Seconds a colluder waits for the round's other reports.
    """

    def __init__(self, clients: int, colluders: int, z: float | None = None,
                 timeout: float = 120.0) -> None:
        self.clients = check_int(clients, "clients", "LittleIsEnough", low=2)
        self.colluders = check_int(colluders, "colluders", "LittleIsEnough", low=1)
        if self.colluders >= self.clients:
            raise invalid_parameter("colluders", "LittleIsEnough",
                                    f"an int in [1, {self.clients - 1}]", colluders)
        self.z = (alie_z_max(self.clients, self.colluders) if z is None
                  else check_float(z, "z", "LittleIsEnough"))
        self.timeout = check_float(timeout, "timeout", "LittleIsEnough", low=0.0,
                                   low_inclusive=False)
        self._members = 0
        self._watched = 0
        self._cond = threading.Condition()
        self._reports: dict[tuple[int, int], list[NDArray[np.float64]]] = {}

    @property
    def expected(self) -> int:
        """Reports a round waits for: the colluders plus the watched clients."""
        return self.colluders + self._watched

    def wrap(self, inner: Any) -> _Member:
        """Return a colluding learner around ``inner`` (at most ``colluders`` of them)."""
        if self._members >= self.colluders:
            raise ValidationError(f"LittleIsEnough was made for {self.colluders} colluders; "
                                  "a further one would never be waited for")
        self._members += 1
        return _Member(inner, self, colludes=True)

    def watch(self, inner: Any) -> _Member:
        """Return ``inner`` unchanged in behaviour, its honest updates shown to the coalition."""
        self._watched += 1
        return _Member(inner, self, colludes=False)

    def report(self, key: tuple[int, int], delta: NDArray[np.float64]) -> None:
        """Add one honest update of the round ``key`` = (epoch, step)."""
        with self._cond:
            self._reports.setdefault(key, []).append(delta)
            self._cond.notify_all()

    def shift(self, key: tuple[int, int]) -> NDArray[np.float64]:
        """Wait for the round's reports, then return μ − z·σ over them.

        Raises
        ------
        TimeoutError
            If the round's reports do not all arrive within ``timeout`` seconds.
        """
        with self._cond:
            done = self._cond.wait_for(lambda: len(self._reports.get(key, ())) >= self.expected,
                                       timeout=self.timeout)
            if not done:
                got = len(self._reports.get(key, ()))
                raise TimeoutError(
                    f"LittleIsEnough: round at (epoch, step) {key} got {got} of the "
                    f"{self.expected} honest updates it waits for within {self.timeout:g} s "
                    "(every colluder and watched client must train in every round)")
            stacked = np.stack(self._reports[key])
            for old in [k for k in self._reports if k < key]:
                del self._reports[old]
        return np.asarray(stacked.mean(axis=0) - self.z * stacked.std(axis=0), np.float64)


class _Member(_Attacker):
    """A coalition member: it reports its honest update; a colluder uploads the shift."""

    def __init__(self, inner: Any, coalition: LittleIsEnough, *, colludes: bool) -> None:
        self.inner, self.coalition, self.colludes = inner, coalition, colludes

    def train(self, params: Vector, *, epoch: int, step: int, steps: int, batch_size: int,
              config: LocalConfig, state: Vector | None) -> LocalOutcome:
        """Train honestly and report the update; a colluder then uploads w + μ − z·σ."""
        out, delta = self._honest(params, epoch=epoch, step=step, steps=steps,
                                  batch_size=batch_size, config=config, state=state)
        key = (int(epoch), int(step))
        self.coalition.report(key, delta)
        if not self.colludes:
            return out
        bad = np.asarray(params, np.float64) + self.coalition.shift(key)
        return LocalOutcome(params=bad.astype(np.float32), state=out.state, loss=out.loss)
