"""Party runtime: messaging, transcripts, failures, timeouts, bad input."""

from __future__ import annotations

import inspect
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.errors import (
    DeadlockError,
    PeerFailedError,
    PeerTimeoutError,
    ProtocolError,
    ValidationError,
    WireError,
)
from islands.runtime import (
    Party,
    PartyInputError,
    RunCancelled,
    Transcript,
    run_local,
    runner,
    wire,
)
from islands.runtime.runner import running_roles
from islands.threads import torch_threads


def ping(party: Party, n: int) -> Any:
    party.send("b", "ping", n)
    return party.recv("b", "pong")


def pong(party: Party) -> None:
    party.send("a", "pong", party.recv("a", "ping") + 1)


def test_ping_pong_and_transcript() -> None:
    run = run_local({"a": partial(ping, n=41), "b": pong})
    assert run.results == {"a": 42, "b": None}
    recs = run.transcript.records
    assert [(r.seq, r.sender, r.receiver, r.tag) for r in recs] == [
        (0, "a", "b", "ping"), (1, "b", "a", "pong")]
    assert recs[0].nbytes == len(wire.encode(41))
    assert recs[0].summary == "int"
    assert run.wall_time >= 0


def test_party_context_names() -> None:
    seen: dict[str, Any] = {}

    def role(party: Party) -> None:
        seen[party.name] = (party.peers, party.parties)

    run_local([("x", role), ("y", role), ("z", role)])
    assert seen["y"] == (("x", "z"), ("x", "y", "z"))


def test_nothing_is_shared_by_reference() -> None:
    original = np.arange(5.0)
    got: dict[str, np.ndarray] = {}
    ready = threading.Event()

    def sender(party: Party) -> None:
        arr = original.copy()
        party.send("r", "arr", arr)
        arr[:] = -1  # after sending: must not reach the receiver
        ready.set()
        party.recv("r", "done")

    def receiver(party: Party) -> None:
        ready.wait(5)
        got["arr"] = party.recv("s", "arr")
        got["arr"][0] = 99.0  # must not reach the transcript's copy
        party.send("s", "done", None)

    run = run_local({"s": sender, "r": receiver}, keep_payloads=True)
    np.testing.assert_array_equal(got["arr"], [99.0, 1, 2, 3, 4])
    np.testing.assert_array_equal(run.transcript.received_by("r")[0].payload, original)


def test_broadcast_gather_and_fifo_order() -> None:
    def hub(party: Party) -> dict[str, Any]:
        party.broadcast("hello", np.ones(3))
        return party.gather("reply")

    def spoke(party: Party) -> None:
        x = party.recv("hub", "hello")
        for i in range(3):
            party.send("hub", "reply" if i == 0 else "extra", float(x.sum()) + i)

    def hub2(party: Party) -> list[float]:
        party.broadcast("hello", np.ones(3))
        replies = party.gather("reply")
        extras = [party.recv("s1", "extra") for _ in range(2)]
        return [*replies.values(), *extras]

    run = run_local({"hub": hub2, "s1": spoke, "s2": spoke})
    assert run.results["hub"] == [3.0, 3.0, 4.0, 5.0]
    assert run.transcript.totals("tag")["hello"].messages == 2
    assert run.transcript.totals("sender")["hub"].messages == 2


def test_broadcast_receivers_own_independent_copies() -> None:
    big = np.ones(100_000)  # large enough to be decoded in place, without a copy
    got: dict[str, np.ndarray] = {}
    barrier = threading.Barrier(2)

    def hub(party: Party) -> None:
        party.broadcast("w", big)

    def spoke(party: Party) -> None:
        w = party.recv("hub", "w")
        barrier.wait(5)
        w += 1.0 if party.name == "s1" else 2.0  # in place: must not reach the other spoke
        barrier.wait(5)
        got[party.name] = w

    run = run_local({"hub": hub, "s1": spoke, "s2": spoke}, keep_payloads=True)
    assert got["s1"][0] == 2.0 and got["s2"][0] == 3.0 and big[0] == 1.0
    assert all(r.payload[0] == 1.0 for r in run.transcript.records)


def test_broadcast_to_subset() -> None:
    def a(party: Party) -> None:
        party.broadcast("m", 1, to=["c"])

    def c(party: Party) -> Any:
        return party.recv("a", "m")

    run = run_local({"a": a, "b": lambda p: None, "c": c})
    assert run.results["c"] == 1 and len(run.transcript) == 1


def test_transcript_totals_json_and_queries() -> None:
    run = run_local({"a": partial(ping, n=1), "b": pong}, keep_payloads=True)
    t = run.transcript
    assert [r.payload for r in t.received_by("b")] == [1]
    assert [r.tag for r in t.sent_by("b")] == ["pong"]
    assert [r.receiver for r in t.with_tag("pong")] == ["a"]
    assert t.totals("pair")["a->b"].messages == 1
    doc = json.loads(t.to_json())
    assert doc["messages"] == 2 and doc["nbytes"] == t.total_bytes
    assert doc["by_receiver"]["a"]["nbytes"] == t.records[1].nbytes
    assert set(doc["records"][0]) == {"seq", "sender", "receiver", "tag", "nbytes", "summary",
                                      "time"}
    with pytest.raises(ValueError, match="'by' parameter"):
        t.totals("colour")  # type: ignore[arg-type]


def test_payload_not_kept_by_default() -> None:
    run = run_local({"a": partial(ping, n=1), "b": pong})
    with pytest.raises(LookupError, match="keep_payloads=True"):
        _ = run.transcript.records[0].payload


def test_given_transcript_is_used() -> None:
    t = Transcript(keep_payloads=True)
    run = run_local({"a": partial(ping, n=3), "b": pong}, transcript=t)
    assert run.transcript is t and len(t) == 2


# ----------------------------------------------------------------- failures


def test_failure_names_party_and_step_and_stops_the_others() -> None:
    cancelled = threading.Event()

    def a(party: Party) -> None:
        party.send("b", "x", 1)
        try:
            party.recv("b", "never", timeout=60)
        except RunCancelled:
            cancelled.set()
            raise

    def b(party: Party) -> None:
        party.recv("a", "x")
        raise KeyError("boom")

    with pytest.raises(ProtocolError) as info:
        run_local({"a": a, "b": b}, timeout=60)
    err = info.value
    assert err.party == "b" and err.step == "x"
    assert "party 'b' failed at step 'x'" in str(err) and "boom" in str(err)
    assert isinstance(err.__cause__, KeyError)
    assert cancelled.wait(5)


def test_value_error_in_role_is_a_party_input_error() -> None:
    def a(party: Party) -> None:
        raise ValueError("X has NaN")

    with pytest.raises(PartyInputError, match=r"party 'a'.*X has NaN") as info:
        run_local({"a": a, "b": lambda p: p.recv("a", "m")})
    assert isinstance(info.value, ValueError) and info.value.party == "a"


def test_silent_peer_times_out_naming_it() -> None:
    release = threading.Event()

    def silent(party: Party) -> None:
        release.wait(30)

    def waiter(party: Party) -> Any:
        try:
            return party.recv("quiet", "hello", timeout=0.3)
        finally:
            release.set()

    with pytest.raises(PeerTimeoutError) as info:
        run_local({"quiet": silent, "w": waiter})
    err = info.value
    assert (err.party, err.peer, err.tag) == ("w", "quiet", "hello")
    assert isinstance(err, TimeoutError) and "'quiet'" in str(err)


def test_run_timeout_applies_to_every_recv() -> None:
    def silent(party: Party) -> None:
        time.sleep(1.0)

    with pytest.raises(PeerTimeoutError, match=r"0\.2 s"):
        run_local({"s": silent, "w": lambda p: p.recv("s", "m")}, timeout=0.2)


def test_peer_that_finished_without_sending_is_named_at_once() -> None:
    with pytest.raises(PeerFailedError, match="'w' was waiting for 'm' from 'gone'") as info:
        run_local({"gone": lambda p: None, "w": lambda p: p.recv("gone", "m")}, timeout=60)
    assert info.value.peer == "gone"


def test_peer_that_crashed_is_the_reported_cause() -> None:
    def crash(party: Party) -> None:
        raise RuntimeError("disk full")

    waiting = [lambda p: p.recv("crash", "m", timeout=60)] * 3
    roles = [("crash", crash)] + [(f"w{i}", r) for i, r in enumerate(waiting)]
    with pytest.raises(ProtocolError, match=r"party 'crash' failed at step 'start'.*disk full"):
        run_local(roles)


def test_deadlock_is_detected_at_once() -> None:
    with pytest.raises(DeadlockError, match="every running party is waiting"):
        run_local({"c": lambda p: p.recv("d", "q"), "d": lambda p: p.recv("c", "q")},
                  timeout=60)


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("action", "error", "needle"),
    [
        (lambda p: p.send("zed", "t", 1), ValidationError, "unknown party"),
        (lambda p: p.send("a", "t", 1), ValidationError, "cannot send to itself"),
        (lambda p: p.send("b", 7, 1), ValidationError, "tags must be non-empty str"),
        (lambda p: p.send("b", "", 1), ValidationError, "tags must be non-empty str"),
        (lambda p: p.send("b", "t", {"x": object()}), WireError, "cannot send 't' to 'b'"),
        (lambda p: p.broadcast("t", 1, to=["a"]), ValidationError, "itself"),
        (lambda p: p.recv("nobody", "t"), ValidationError, "unknown party"),
        (lambda p: p.recv("b", "t", timeout=-1), ValidationError, "'timeout' parameter"),
        (lambda p: p.recv("b", "t", timeout=float("inf")), ValidationError, "finite"),
    ],
)
def test_bad_calls_fail_at_the_sender_before_anything_leaves(
    action: Any, error: type[Exception], needle: str
) -> None:
    caught: list[BaseException] = []

    def a(party: Party) -> None:
        try:
            action(party)
        except Exception as exc:
            caught.append(exc)

    run = run_local({"a": a, "b": lambda p: None})
    assert len(caught) == 1 and isinstance(caught[0], error)
    assert needle in str(caught[0])
    assert len(run.transcript) == 0


@pytest.mark.parametrize(
    ("roles", "needle"),
    [
        ([("a", pong), ("a", pong)], "duplicate party name 'a'"),
        ({"": pong}, "party names must be str"),
        ({"a b": pong}, "party names must be str"),
        ({"a": 3}, "not callable"),
        ([("a",)], "pairs"),
        ({}, "at least one party"),
    ],
)
def test_bad_role_sets_are_refused(roles: Any, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        run_local(roles)


def test_bad_run_timeout_is_refused() -> None:
    with pytest.raises(ValidationError, match="'timeout'"):
        run_local({"a": pong}, timeout=0)


# ----------------------------------------------------------------- review regressions


def test_broadcast_to_nobody_sends_nothing() -> None:
    run = run_local({"a": lambda p: p.broadcast("t", 1)})
    assert run.results["a"] == 0 and len(run.transcript) == 0
    run = run_local({"a": lambda p: p.broadcast("t", 1, to=[]), "b": lambda p: None})
    assert run.results["a"] == 0


def test_concurrent_receives_in_one_party_are_refused_clearly() -> None:
    from concurrent.futures import ThreadPoolExecutor

    def a(party: Party) -> None:
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(party.recv, peer, "x", 5) for peer in ("b", "c")]
            for f in futures:
                f.result()

    def sender(party: Party) -> None:
        time.sleep(0.2)
        party.send("a", "x", 1)

    with pytest.raises(ProtocolError, match="already waiting"):
        run_local({"a": a, "b": sender, "c": sender})


def test_very_large_timeout_is_usable() -> None:
    run = run_local({"a": partial(ping, n=1), "b": pong}, timeout=1e10)
    assert run.results["a"] == 2


def test_malformed_message_is_blamed_on_its_sender() -> None:
    class Liar:
        """A transport that corrupts every message in flight."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def send(self, sender: str, receiver: str, tag: str, data: Any) -> None:
            self.inner.send(sender, receiver, tag, bytes(data[:-1]))

        def recv(self, receiver: str, sender: str, tag: str, timeout: float) -> Any:
            return self.inner.recv(receiver, sender, tag, timeout)

    from islands.runtime import MemoryTransport

    liar = Liar(MemoryTransport(["a", "b"]))
    t = Transcript()
    a = Party("a", ["a", "b"], liar, t)
    b = Party("b", ["a", "b"], liar, t)
    a.send("b", "x", np.zeros(3))
    with pytest.raises(ProtocolError, match="malformed 'x' message from 'a'"):
        b.recv("a", "x", timeout=1)


def test_keyboard_interrupt_in_a_role_propagates() -> None:
    def a(party: Party) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_local({"a": a, "b": lambda p: p.recv("a", "m", timeout=5)})


def test_transcript_without_payloads_cannot_serve_an_audit() -> None:
    with pytest.raises(ValidationError, match="keep_payloads"):
        run_local({"a": pong}, keep_payloads=True, transcript=Transcript())


def test_blas_threads_are_shared_out_while_roles_run() -> None:
    from threadpoolctl import threadpool_info

    def blas_threads(party: Party) -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = blas_threads(None)  # type: ignore[arg-type]
    run = run_local({"a": blas_threads, "b": blas_threads}, blas_threads=1)
    assert run.results["a"] and all(n == 1 for n in run.results["a"])
    assert blas_threads(None) == before  # type: ignore[arg-type]
    untouched = run_local({"a": blas_threads}, blas_threads=None)
    assert untouched.results["a"] == before
    with pytest.raises(ValidationError, match="'blas_threads'"):
        run_local({"a": pong}, blas_threads=0)


def test_a_step_run_alone_gets_every_core_while_the_other_party_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """run_local('auto') lends the cores of a party waiting in recv to the one computing."""
    from threadpoolctl import threadpool_info

    import islands.runtime.runner as runner

    def blas() -> set[int]:
        return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}

    if runner.usable_cores() < 2:
        pytest.skip("needs 2 cores to lend one")
    monkeypatch.setattr(runner, "usable_cores", lambda: 2)  # two parties share 2 cores

    def worker(party: Party) -> tuple[set[int], bool, set[int], set[int]]:
        shared = blas()
        with party.alone() as lent:
            inside = blas()
        party.send("b", "done", 1)
        return shared, lent, inside, blas()

    def waiter(party: Party) -> int:
        return int(party.recv("a", "done"))

    run = run_local({"a": worker, "b": waiter}, timeout=30)
    shared, lent, inside, after = run.results["a"]
    assert (shared, lent, inside, after) == ({1}, True, {2}, {1})

    def both_busy(party: Party) -> tuple[bool, set[int]]:
        party.send(party.peers[0], "hi", 1)  # neither waits while the other is alone
        with party.alone() as lent:
            inside = blas()
        party.recv(party.peers[0], "hi")
        return lent, inside

    busy = run_local({"a": both_busy, "b": both_busy}, timeout=30)
    assert all(r == (False, {1}) for r in busy.results.values())
    alone = run_local({"a": worker, "b": waiter}, timeout=30, blas_threads=None)
    assert alone.results["a"][1] is False

# ----------------------------------------------------------------- many parties


MANY = 1000


def _hub_and_spokes(hub: Any, spoke: Any, n: int = MANY) -> list[tuple[str, Any]]:
    return [("hub", hub)] + [(f"s{i}", spoke) for i in range(n - 1)]


def test_a_thousand_parties_round_trip() -> None:
    def hub(party: Party) -> int:
        got = party.gather("up")
        for peer, value in got.items():
            party.send(peer, "down", value + 1)
        return sum(got.values())

    def spoke(party: Party) -> int:
        party.send("hub", "up", int(party.name[1:]))
        return int(party.recv("hub", "down"))

    run = run_local(_hub_and_spokes(hub, spoke), timeout=60, blas_threads=None)
    assert run.results["hub"] == sum(range(MANY - 1))
    assert all(run.results[f"s{i}"] == i + 1 for i in range(MANY - 1))
    assert len(run.transcript) == 2 * (MANY - 1) and run.failures == {}


def test_deadlock_among_many_parties_is_detected_at_once() -> None:
    # the hub waits on one spoke while every spoke waits on the hub
    with pytest.raises(DeadlockError, match="every running party is waiting"):
        run_local(_hub_and_spokes(lambda p: p.recv("s0", "never"),
                                  lambda p: p.recv("hub", "never")),
                  timeout=60, blas_threads=None)


def test_deadlock_left_when_the_last_busy_party_returns_is_detected() -> None:
    # a and b wait on each other; the deadlock only exists once every spoke has returned
    def spoke(party: Party) -> None:
        time.sleep(0.2)  # a and b are waiting by then

    roles = [("a", lambda p: p.recv("b", "x")), ("b", lambda p: p.recv("a", "x"))]
    roles += [(f"s{i}", spoke) for i in range(200)]
    with pytest.raises(DeadlockError):
        run_local(roles, timeout=60, blas_threads=None)


def test_peer_failed_among_many_parties_is_reported_at_once() -> None:
    def hub(party: Party) -> None:
        party.gather("up")

    def spoke(party: Party) -> None:
        if party.name != "s500":
            party.send("hub", "up", 1)

    with pytest.raises(PeerFailedError, match="'hub' was waiting for 'up' from 's500'"):
        run_local(_hub_and_spokes(hub, spoke), timeout=60, blas_threads=None)


def test_memory_transport_wakes_only_the_receiver() -> None:
    from islands.runtime import MemoryTransport

    transport = MemoryTransport(["a", "b", "c"])
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(transport.recv("a", "b", "t", 5)))
    waiter.start()
    time.sleep(0.05)
    transport.send("b", "c", "t", b"not for a")
    transport.send("c", "a", "t", b"not from b")
    time.sleep(0.05)
    assert not got
    transport.send("b", "a", "t", b"yes")
    waiter.join(5)
    assert got == [b"yes"]
    assert transport.undelivered() == {("c", "b", "t"): 1, ("a", "c", "t"): 1}


# ----------------------------------------------------------------- tolerated failures


def _fl_hub(party: Party) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for peer in party.peers:
        try:
            out[peer] = party.recv(peer, "update")
        except PeerFailedError as exc:
            out[peer] = exc.peer
    party.broadcast("model", sum(v for v in out.values() if isinstance(v, int)),
                    to=[p for p, v in out.items() if isinstance(v, int)])
    return out


def _fl_client(party: Party) -> Any:
    if party.name == "bad":
        raise ValueError("client data corrupt")
    party.send("hub", "update", 1)
    return party.recv("hub", "model")


def test_tolerated_failure_is_recorded_and_the_run_goes_on() -> None:
    roles = {"hub": _fl_hub, "c1": _fl_client, "bad": _fl_client, "c2": _fl_client}
    run = run_local(roles, timeout=60, tolerate=["bad"])
    assert run.results["hub"] == {"c1": 1, "bad": "bad", "c2": 1}
    assert run.results["c1"] == run.results["c2"] == 2
    assert "bad" not in run.results and list(run.failures) == ["bad"]
    assert isinstance(run.failures["bad"], ValueError)
    assert "client data corrupt" in str(run.failures["bad"])


def test_tolerated_failures_among_many_parties() -> None:
    def spoke(party: Party) -> Any:
        if int(party.name[1:]) % 100 == 7:
            raise RuntimeError(f"{party.name} crashed")
        party.send("hub", "update", 1)
        return party.recv("hub", "model")

    roles = [("hub", _fl_hub)] + [(f"s{i}", spoke) for i in range(MANY - 1)]
    crashing = [f"s{i}" for i in range(MANY - 1) if i % 100 == 7]
    run = run_local(roles, timeout=60, blas_threads=None, tolerate=[n for n, _ in roles[1:]])
    assert list(run.failures) == crashing
    assert sum(isinstance(v, int) for v in run.results["hub"].values()) == MANY - 1 - 10
    assert all(run.results[f"s{i}"] == MANY - 11 for i in range(MANY - 1) if i % 100 != 7)


def test_failure_not_tolerated_still_stops_the_run() -> None:
    roles = {"hub": _fl_hub, "c1": _fl_client, "bad": _fl_client, "c2": _fl_client}
    with pytest.raises(PartyInputError, match=r"party 'bad'.*client data corrupt"):
        run_local(roles, timeout=60, tolerate=["c1", "c2"])

    def hub(party: Party) -> None:
        raise RuntimeError("server down")

    with pytest.raises(ProtocolError, match=r"party 'hub' failed.*server down"):
        run_local({"hub": hub, "c1": _fl_client}, timeout=60, tolerate=["c1"])


def test_tolerated_party_is_not_shielded_from_keyboard_interrupt() -> None:
    def a(party: Party) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_local({"a": a, "b": lambda p: p.recv("a", "m", timeout=5)}, tolerate=["a"])


def test_peer_not_catching_a_tolerated_failure_fails_the_run() -> None:
    def crash(party: Party) -> None:
        raise RuntimeError("gone")

    with pytest.raises(PeerFailedError, match="'w' was waiting for 'm' from 'c'"):
        run_local({"c": crash, "w": lambda p: p.recv("c", "m")}, timeout=60, tolerate=["c"])


@pytest.mark.parametrize(
    ("tolerate", "needle"),
    [
        (["zed"], "cannot tolerate the failure of 'zed': not a party"),
        (["a", 3], "cannot tolerate the failure of 3"),
        ("a", "not a str"),
        (5, "'tolerate' parameter"),
    ],
)
def test_bad_tolerate_is_refused(tolerate: Any, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        run_local({"a": pong, "b": pong}, tolerate=tolerate)


def test_run_result_failures_default_to_empty() -> None:
    run = run_local({"a": partial(ping, n=1), "b": pong})
    assert run.failures == {}


def test_a_run_stopped_by_tolerated_failures_names_their_own_errors() -> None:
    """Every client failing makes the server give up: the clients' errors are not lost."""

    def client(party: Party) -> None:
        raise RuntimeError("value cannot be converted to type float without overflow")

    def server(party: Party) -> None:
        for name in ("c1", "c2"):
            try:
                party.recv(name, "update", timeout=10)
            except PeerFailedError:
                continue
        raise ProtocolError("only 0 of 2 clients returned an update", party="server",
                            step="update")

    with pytest.raises(ProtocolError) as info:
        run_local({"server": server, "c1": client, "c2": client}, tolerate=["c1", "c2"])
    text = str(info.value)
    assert text.startswith("only 0 of 2 clients returned an update")
    assert "'c1': RuntimeError: value cannot be converted" in text and "'c2'" in text
    assert set(info.value.tolerated) == {"c1", "c2"}  # type: ignore[attr-defined]


def test_every_party_of_a_local_run_has_an_identity_its_peers_know() -> None:
    from islands.errors import ProtocolError

    def signer(party: Any) -> bytes:
        sig = party.identity.sign("t", b"m")
        party.send("b", "sig", sig)
        return sig

    def checker(party: Any) -> bool:
        sig = party.recv("a", "sig")
        party.identity.verify("a", "t", b"m", sig)
        with pytest.raises(ProtocolError, match="does not verify"):
            party.identity.verify("a", "t", b"other", sig)
        return True

    first = run_local({"a": signer, "b": checker})
    second = run_local({"a": signer, "b": checker})
    assert first.results["b"] and second.results["b"]
    assert first.results["a"] != second.results["a"]  # fresh keys every run


def test_identities_of_many_parties_grow_linearly_and_check_what_they_list() -> None:
    from types import MappingProxyType

    from islands.errors import ProtocolError
    from islands.runtime.identity import Identity, make_identities

    names = [f"p{k}" for k in range(300)]
    ids = make_identities(names)
    # one list of public keys for the whole run: n parties each parsing all n keys held
    # n² key objects (0.36 GB at 1000 parties, issue 24's memory figure)
    assert len({id(i._publics) for i in ids.values()}) == 1
    sig = ids["p7"].sign("t", b"m")
    ids["p250"].verify("p7", "t", b"m", sig)
    with pytest.raises(ProtocolError, match="does not verify"):
        ids["p3"].verify("p7", "t", b"x", sig)
    with pytest.raises(ProtocolError, match="no identity key for 'q'"):
        ids["p3"].verify("q", "t", b"m", sig)
    # a listed key that is not a key is named when first used, not a crash
    bad = Identity("a", ids["p0"]._private, MappingProxyType(
        {"a": ids["p0"].public, "b": b"\x01" * 31}))
    with pytest.raises(ProtocolError, match="'b' is not an Ed25519 public key"):
        bad.verify("b", "t", b"m", b"\x00" * 64)
    with pytest.raises(ProtocolError, match="is not its own"):
        Identity("a", ids["p0"]._private, {"a": ids["p1"].public})


def test_torch_threads_sets_and_restores_the_thread_count() -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with torch_threads(target):
        assert torch.get_num_threads() == target
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in this test, however pytest was started.

    A shell that starts a command in the background (``make test &``, some CI runners)
    hands it SIGINT ignored, and Python then installs no handler: a Ctrl-C test run so
    saw nothing ("DID NOT RAISE KeyboardInterrupt"), on a quiet machine or a busy one.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


_LOCK_WAIT = threading.Condition.wait.__code__
_LOCK_WAIT_LINE = max(
    i for i, line in enumerate(inspect.getsourcelines(threading.Condition.wait)[0],
                               start=inspect.getsourcelines(threading.Condition.wait)[1])
    if line.strip() == "waiter.acquire()")
"""The line where ``Condition.wait`` without a timeout blocks (the last such call)."""


def _main_waits_in_run_local() -> bool:
    """Whether the main thread is blocked in run_local's wait for its roles.

    Its innermost frames are then Condition.wait at its blocking ``waiter.acquire()``,
    Event.wait and run_local; where Linux says, the thread also sleeps in the kernel (not
    merely about to). A SIGINT that comes then interrupts that wait, and Python raises
    KeyboardInterrupt there. One that came earlier, while the main thread still ran
    Python code, would be raised in whatever code ran next, and inside a finalizer of
    garbage collected just then (an xdist worker holds plenty) it is printed as
    "Exception ignored" and lost.
    """
    main = threading.main_thread()
    frame = sys._current_frames().get(main.ident or -1)
    stack: list[Any] = []
    while frame is not None and len(stack) < 3:
        stack.append(frame)
        frame = frame.f_back
    if not (len(stack) == 3 and stack[0].f_code is _LOCK_WAIT
            and stack[0].f_lineno == _LOCK_WAIT_LINE
            and stack[1].f_code is threading.Event.wait.__code__
            and stack[2].f_code is runner.run_local.__code__):
        return False
    try:
        stat = Path(f"/proc/self/task/{main.native_id}/stat").read_text()
    except OSError:  # no procfs: the frames alone
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "S"


def _press_ctrl_c(*ready: threading.Event) -> threading.Thread:
    """Send SIGINT to the main thread once ``ready`` are set and run_local waits.

    No sleep stands for "by then it will be there": the signal goes only once the roles
    say they are where the test needs them and the main thread is blocked in run_local
    (:func:`_main_waits_in_run_local`), so how busy the machine is changes nothing. If
    that never happens within a minute, no signal is sent and the test fails.
    """
    def press() -> None:
        deadline = time.monotonic() + 60
        while not (all(e.is_set() for e in ready) and _main_waits_in_run_local()):
            if time.monotonic() > deadline:
                return
            time.sleep(0.002)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    presser = threading.Thread(target=press, daemon=True)
    presser.start()
    return presser


@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_returns_only_after_the_cancelled_roles_stopped() -> None:
    # a role thread still in native code when the interpreter exits is killed by
    # pthread_exit, and PyTorch's C++ frames turn that into an abort (exit -6 after Ctrl-C)
    ticking = {"a": threading.Event(), "b": threading.Event()}

    def busy(party: Party) -> None:
        peer = party.peers[0]
        for _ in range(50):  # until cancelled: each step takes a while, then a message
            ticking[party.name].set()
            time.sleep(0.2)
            party.send(peer, "tick", 0)
            party.recv(peer, "tick")

    presser = _press_ctrl_c(*ticking.values())
    with pytest.raises(KeyboardInterrupt):
        run_local({"a": busy, "b": busy}, timeout=30)
    presser.join()
    assert not [t.name for t in threading.enumerate() if t.name in ("islands-a", "islands-b")]
    assert running_roles() == []


@pytest.mark.usefixtures("ctrl_c_raises")
def test_a_role_still_computing_after_the_grace_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "CANCEL_GRACE", 0.1)
    release = threading.Event()
    computing, waiting = threading.Event(), threading.Event()

    def stubborn(party: Party) -> None:  # a long local step that never sends
        computing.set()
        release.wait(60)

    def patient(party: Party) -> None:
        waiting.set()
        party.recv("slow", "m", timeout=60)

    presser = _press_ctrl_c(computing, waiting)
    with pytest.raises(KeyboardInterrupt):
        run_local({"slow": stubborn, "b": patient})
    presser.join()
    # run_local re-raised past the grace while 'slow' was still computing (it cannot
    # have left: it waits for `release`); 'b', cancelled in its recv, stops
    assert "islands-slow" in running_roles()
    deadline = time.monotonic() + 30
    while running_roles() != ["islands-slow"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert running_roles() == ["islands-slow"]
    release.set()
    deadline = time.monotonic() + 30
    while running_roles() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert running_roles() == []


def test_a_party_is_refused_a_names_set_that_is_not_its_federation() -> None:
    from islands.runtime.transport import MemoryTransport

    names = ("a", "b", "c")
    t, tr = MemoryTransport(names), Transcript()
    with pytest.raises(ValidationError, match="members must be the set"):
        Party("a", names, t, tr, members=frozenset({"a", "b", "x"}))
    with pytest.raises(ValidationError, match="must be distinct"):
        Party("a", ("a", "b", "b"), t, tr)
    with pytest.raises(ValidationError, match="must be str"):
        Party("a", ("a", ["b"]), t, tr)  # type: ignore[list-item]
    party = Party("a", names, t, tr, members=frozenset(names))
    assert party.peers == ("b", "c")
    with pytest.raises(ValidationError, match="unknown party"):
        party.send("x", "t", 1)
