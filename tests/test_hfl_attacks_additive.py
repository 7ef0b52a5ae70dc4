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

from islands.aggregation.additive import (
    AdditiveRoster,
    AdditiveSharing,
    AdditiveSumRequest,
    Share,
)
from islands.aggregation.base import AggStep, ring_encode
from islands.crypto.sharing import reconstruct
from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local

DIM = 5


def client_role(party: Any, roster: list[str], update: np.ndarray) -> Any:
    half = AdditiveSharing().client_half()
    half.on_step(party, server="server", step=AggStep(1, "ss-roster", AdditiveRoster(roster)))
    half.payload(party, server="server", round=1, params=update, base=np.zeros(DIM),
                 weight=1.0)
    answer = half.on_step(party, server="server",
                         step=AggStep(1, "ss-sum", AdditiveSumRequest()))
    return answer.total


def play(rosters: dict[str, list[str]], keep_payloads: bool = False) -> Any:
    rng = np.random.default_rng(0)
    roles: dict[str, Any] = {"server": lambda party: None}
    for name, roster in rosters.items():
        roles[name] = partial(client_role, roster=roster,
                              update=rng.normal(size=DIM).astype(np.float32))
    return run_local(roles, tolerate=list(rosters), timeout=20, keep_payloads=keep_payloads)


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


# ----------------------------------------------------------------- issue 23, typed shares
# A share used to be a dict {"round", "share", "roster"} checked by hand; it is now a
# registered Share the codec checks on arrival (round >= 1, a 1-D uint64 array, a digest
# of at most 32 bytes); the receiver still checks the round, the length and the roster.


def deviant_role(party: Any, payload: Any) -> Any:
    """Client 'b': sends ``payload`` as its share to the others and stops."""
    for peer in ("v", "a"):
        party.send(peer, "ss-share", payload)


def play_with_deviant(payload: Any) -> Any:
    roster = ["v", "a", "b"]
    rng = np.random.default_rng(0)
    roles: dict[str, Any] = {"server": lambda party: None,
                             "b": partial(deviant_role, payload=payload)}
    for name in ("v", "a"):
        roles[name] = partial(client_role, roster=roster,
                              update=rng.normal(size=DIM).astype(np.float32))
    return run_local(roles, tolerate=roster, timeout=20)


def test_shares_travel_as_registered_messages() -> None:
    run = play({"v": ["v", "a", "b"], "a": ["v", "a", "b"], "b": ["v", "a", "b"]},
               keep_payloads=True)
    assert not run.failures
    shares = run.transcript.with_tag("ss-share")
    assert len(shares) == 6 and all(type(r.payload) is Share for r in shares)
    assert {r.payload.round for r in shares} == {1}
    # the partial sums add up to the encoded updates exactly, whatever shares were dealt
    rng = np.random.default_rng(0)
    encoded = [ring_encode(rng.normal(size=DIM).astype(np.float32), 1.0, frac_bits=32,
                           headroom=3, who="test", max_abs=1e6) for _ in range(3)]
    np.testing.assert_array_equal(reconstruct([run.results[c] for c in "vab"]),
                                  reconstruct(encoded))


@pytest.mark.parametrize(("payload", "needle"), [
    ({"round": 1, "share": np.zeros(DIM, np.uint64), "roster": b""},
     "additive sharing: a malformed share from 'b'"),
    (Share(1, np.zeros(DIM, np.int64), b""),  # type: ignore[arg-type]
     "hfl.AdditiveShare field 'share': expected ndarray of uint64, got ndarray of int64"),
    (Share(1, np.zeros(DIM + 1, np.uint64), b""), "additive sharing: a malformed share from 'b'"),
    (Share(2, np.zeros(DIM, np.uint64), b""), "additive sharing: a malformed share from 'b'"),
    (Share(1, np.zeros(DIM, np.uint64), b"x" * 32), "'b' was shown another roster"),
])
def test_a_malformed_share_is_refused_by_name(payload: Any, needle: str) -> None:
    run = play_with_deviant(payload)
    for name in ("v", "a"):
        assert isinstance(run.failures.get(name), ProtocolError), run.failures
        assert needle in str(run.failures[name])
