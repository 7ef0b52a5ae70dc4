"""Aggregators: how client updates become the next global model.

An aggregator is an object a strategy is given (composition, not a strategy subclass per
protection). It has a client half and a server half, so that protections that change
what a client uploads (masking, encryption, permutation, noise) fit the same interface:

* client side, :meth:`Aggregator.client_payload`: turns the client's new parameter
  vector into what it uploads (the plain mean uploads the vector itself);
* server side, :meth:`Aggregator.start` opens one round's aggregation, which receives
  each survivor's payload through :meth:`RoundAggregation.add` as it arrives (streaming:
  the server never needs every update in memory at once) and produces the new global
  vector from the clients that survived in :meth:`RoundAggregation.finish`. Weights of
  clients that dropped out are left out and the rest renormalised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party

__all__ = ["Aggregator", "MeanAggregator", "RoundAggregation"]

Vector = NDArray[np.float32]


class RoundAggregation(Protocol):
    """One round's aggregation on the server."""

    def add(self, client: str, payload: Any) -> None:
        """Take one client's upload (called in a fixed client order, for determinism)."""

    def finish(self, survivors: Sequence[str]) -> Vector:
        """Return the new global vector from the survivors' uploads."""


class Aggregator(Protocol):
    """What a strategy needs to combine client updates; see the module docstring."""

    name: str

    def client_payload(
        self, party: Party, *, server: str, round: int, params: Vector
    ) -> Any:
        """Client side: what to upload for ``params`` (the client's new model)."""

    def start(
        self, party: Party, *, round: int, clients: Sequence[str], weights: Mapping[str, float],
        dim: int,
    ) -> RoundAggregation:
        """Server side: open the aggregation of ``round`` over ``clients``."""


class MeanAggregator:
    """The plain weighted mean of FedAvg, Σ_k (n_k/n_S)·w_k over the survivors S.

    The server sees every client's model in the clear: protection comes from the
    aggregators in :mod:`islands.hfl` that replace this one.
    """

    name = "mean"

    def client_payload(
        self, party: Party, *, server: str, round: int, params: Vector
    ) -> Vector:
        """Upload the vector itself."""
        return params

    def start(
        self, party: Party, *, round: int, clients: Sequence[str], weights: Mapping[str, float],
        dim: int,
    ) -> _MeanRound:
        """Open a streaming weighted sum."""
        return _MeanRound(party.name, weights, dim)

    def __repr__(self) -> str:
        return "MeanAggregator()"


class _MeanRound:
    def __init__(self, server: str, weights: Mapping[str, float], dim: int) -> None:
        self._server = server
        self._weights = dict(weights)
        self._dim = dim
        self._total = np.zeros(dim, dtype=np.float64)
        self._weight = 0.0
        self._added: list[str] = []

    def add(self, client: str, payload: Any) -> None:
        if client not in self._weights:
            raise ProtocolError(
                f"server {self._server!r} got an update from {client!r}, which is not in "
                "this round", party=self._server, step="update",
            )
        if client in self._added:
            raise ProtocolError(
                f"server {self._server!r} got two updates from {client!r} in one round",
                party=self._server, step="update",
            )
        vec = np.asarray(payload)
        if vec.shape != (self._dim,) or vec.dtype.kind != "f" or not np.all(np.isfinite(vec)):
            raise ProtocolError(
                f"server {self._server!r} got a malformed update from {client!r}: expected "
                f"{self._dim} finite floats, got {vec.dtype} array of shape {vec.shape}",
                party=self._server, step="update",
            )
        w = self._weights[client]
        # in float64: a Python float times a float32 array would round to float32
        self._total += w * vec.astype(np.float64)
        self._weight += w
        self._added.append(client)

    def finish(self, survivors: Sequence[str]) -> Vector:
        if sorted(survivors) != sorted(self._added):
            raise ValidationError(
                f"survivors {list(survivors)} differ from the clients added {self._added}"
            )
        if not self._added or self._weight <= 0:
            raise ProtocolError("no client update to aggregate", party=self._server,
                                step="aggregate")
        return (self._total / self._weight).astype(np.float32)
