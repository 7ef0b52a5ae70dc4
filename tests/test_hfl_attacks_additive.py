"""A deviating server against additive sharing: issue 22, finding 3.

Before the change a client accepted any roster: with a roster of one (the victim) it
did not split its update and its partial sum was the update in the clear, and rosters
were not checked to be the same across clients. The clients here are real client halves
in a real run; the server's part (the rosters, the request for partial sums) is played
by the test.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from islands.errors import ProtocolError, ValidationError
from islands.hfl.additive import AdditiveSharing
from islands.hfl.aggregate import AggStep
from islands.runtime import run_local

DIM = 5


def client_role(party: Any, roster: list[str], update: np.ndarray) -> Any:
    half = AdditiveSharing().client_half()
    half.on_step(party, server="server", step=AggStep(1, "ss-roster", roster))
    half.payload(party, server="server", round=1, params=update, base=np.zeros(DIM),
                 weight=1.0)
    return half.on_step(party, server="server", step=AggStep(1, "ss-sum", None))


def play(rosters: dict[str, list[str]]) -> Any:
    rng = np.random.default_rng(0)
    roles: dict[str, Any] = {"server": lambda party: None}
    for name, roster in rosters.items():
        roles[name] = partial(client_role, roster=roster,
                              update=rng.normal(size=DIM).astype(np.float32))
    return run_local(roles, tolerate=list(rosters), timeout=20)


def test_a_roster_of_one_is_refused() -> None:
    run = play({"v": ["v"], "a": ["a", "b"], "b": ["a", "b"]})
    assert isinstance(run.failures["v"], ProtocolError)
    assert "parameter 'min_clients' is 2, got a roster of 1" in str(run.failures["v"])
    assert not run.transcript.with_tag("ss-share") or all(
        m.sender != "v" for m in run.transcript.with_tag("ss-share"))


def test_a_roster_with_a_stranger_or_the_server_is_refused() -> None:
    run = play({"v": ["v", "server"], "a": ["a", "b"], "b": ["a", "b"]})
    assert "['server'] are not clients of this federation" in str(run.failures["v"])


def test_clients_shown_different_rosters_refuse_their_partial_sums() -> None:
    run = play({"v": ["v", "a"], "a": ["v", "a", "b"], "b": ["a", "b"]})
    for name in ("v", "a", "b"):
        assert isinstance(run.failures.get(name), ProtocolError), run.failures
        assert "was shown another roster by the server" in str(run.failures[name])
    assert not run.results.get("v")


def test_an_honest_roster_sums_the_updates() -> None:
    run = play({"v": ["v", "a", "b"], "a": ["v", "a", "b"], "b": ["v", "a", "b"]})
    assert not run.failures
    total = sum((run.results[c] for c in "vab"), np.zeros(DIM, dtype=np.uint64))
    rng = np.random.default_rng(0)
    want = sum(rng.normal(size=DIM).astype(np.float32).astype(np.float64) for _ in range(3))
    np.testing.assert_allclose(total.view(np.int64) / 2.0**32, want, atol=1e-8)


def test_min_clients_is_checked() -> None:
    for bad in (1, 0, 2.5, "3"):
        with pytest.raises(ValidationError, match="'min_clients'"):
            AdditiveSharing(min_clients=bad)  # type: ignore[arg-type]
