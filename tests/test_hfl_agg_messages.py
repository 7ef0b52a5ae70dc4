"""The bodies of the aggregator phases are registered messages (issue 23, item 5).

They used to be dicts (and bare bytes, lists) checked by hand; each is now a registered
dataclass the codec checks field by field on arrival, and each receiver checks that the
body is the class its phase expects. These tests play a deviating server against a real
client (``islands.hfl.protocol.client``) and a deviating client against a real server,
over the same in-process transport a simulation uses, so every message crosses the codec.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from islands.aggregation.additive import (
    AdditivePartialSum,
    AdditiveRoster,
    AdditiveSumRequest,
)
from islands.aggregation.base import AggReply, AggStep
from islands.aggregation.keys import (
    KeyAck,
    KeyDeal,
    KeyDealRequest,
    KeyDelivery,
    KeyHello,
    KeyOffer,
)
from islands.aggregation.protect import DPNoiseRequest
from islands.aggregation.secagg import (
    SecAggAdvertise,
    SecAggDelivery,
    SecAggEnvelopes,
    SecAggKeyList,
    SecAggKeys,
    SecAggShares,
    SecAggSignature,
    SecAggSurvivors,
    SecAggUnmask,
    SecureAggregation,
)
from islands.aggregation.secaggplus import (
    SecAggPlusAdvertise,
    SecAggPlusDelivery,
    SecAggPlusEnvelopes,
    SecAggPlusKeys,
    SecAggPlusReveal,
    SecAggPlusReveals,
    SecAggPlusRoster,
    SecAggPlusShares,
    SecAggPlusSignature,
    SecAggPlusSurvivors,
    SecAggPlusUnmask,
)
from islands.errors import ProtocolError
from islands.hfl import FedAvg
from islands.hfl.protocol import Join, LocalOutcome, Start, client, server
from islands.runtime import run_local, wire

DIM = 8
BODIES = [SecAggAdvertise, SecAggKeys, SecAggKeyList, SecAggEnvelopes, SecAggDelivery,
          SecAggSurvivors, SecAggSignature, SecAggUnmask, SecAggShares, KeyHello, KeyOffer,
          KeyDealRequest, KeyDeal, KeyDelivery, KeyAck, DPNoiseRequest, AdditiveRoster,
          AdditiveSumRequest, AdditivePartialSum, SecAggPlusAdvertise, SecAggPlusKeys,
          SecAggPlusRoster, SecAggPlusReveal, SecAggPlusReveals, SecAggPlusEnvelopes,
          SecAggPlusDelivery, SecAggPlusSurvivors, SecAggPlusSignature, SecAggPlusUnmask,
          SecAggPlusShares]


class Still:
    """A learner that returns the model it got (no torch needed)."""

    n_train, n_eval = 10, 0

    def train(self, params: Any, **kw: Any) -> LocalOutcome:
        return LocalOutcome(params=np.asarray(params, np.float32).copy(), state=None,
                            loss=0.0)

    def evaluate(self, params: Any) -> float:  # pragma: no cover - n_eval = 0
        return 0.0


def test_every_phase_body_is_a_registered_message() -> None:
    registry = wire.registered_messages()
    for cls in BODIES:
        assert registry[f"hfl.{cls.__name__}"] is cls
    # a body crosses the codec inside AggStep, and comes back as its class
    step = AggStep(round=2, phase="unmask", body=SecAggUnmask(
        survivors=["a", "b"], dropped=["c"], signatures={"a": b"x", "b": b"y"}))
    assert wire.decode(wire.encode(step)) == step


# --------------------------------------------------------------- a deviating server
def played_server(party: Any, body: Any) -> None:
    """Open the run as the real server does, then send one advertise step with ``body``."""
    assert isinstance(party.recv("c0", "join"), Join)
    party.send("c0", "task", Start(resumed_from=0))
    party.recv("c0", "join")  # Ready
    party.send("c0", "task", AggStep(round=1, phase="advertise", body=body))


def against_a_client(body: Any) -> tuple[ProtocolError, list[str]]:
    roles: dict[str, Any] = {
        "server": partial(played_server, body=body),
        "c0": partial(client, server="server", learner=Still(),
                      aggregator=SecureAggregation(), task_timeout=20.0)}
    run = run_local(roles, tolerate=["c0", "server"], timeout=20)
    exc = run.failures.get("c0")
    assert isinstance(exc, ProtocolError), run.failures
    sent = [m.tag for m in run.transcript.sent_by("c0")]
    return exc, sent


@pytest.mark.parametrize(("body", "step", "needle"), [
    # a dict where the dataclass is expected: the client's own check for the phase
    ({"session": bytes(16), "threshold": 3}, "advertise",
     "secure aggregation: malformed advertise request"),
    # another phase's message
    (SecAggSurvivors(survivors=["c0"]), "advertise",
     "secure aggregation: malformed advertise request"),
    # a field of the wrong type: the codec, on arrival
    (SecAggAdvertise(session="0" * 16, threshold=3), "task",  # type: ignore[arg-type]
     "hfl.SecAggAdvertise field 'session': expected bytes, got str"),
    (SecAggAdvertise(session=bytes(16), threshold=3.0), "task",  # type: ignore[arg-type]
     "hfl.SecAggAdvertise field 'threshold': expected int, got float"),
])
def test_a_client_refuses_a_body_of_the_wrong_type_before_anything_leaves_it(
        body: Any, step: str, needle: str) -> None:
    exc, sent = against_a_client(body)
    assert exc.party == "c0" and exc.step == step
    assert needle in str(exc)
    assert sent == ["join", "join"]  # Join and Ready: no key left the client


# --------------------------------------------------------------- a deviating client
class BadAdvert:
    """A secure-aggregation client half that answers ``advertise`` with ``reply``."""

    def __init__(self, reply: Any) -> None:
        self.inner = SecureAggregation().client_half()
        self.reply = reply

    def on_step(self, party: Any, *, server: str, step: AggStep) -> Any:
        honest = self.inner.on_step(party, server=server, step=step)
        return self.reply(honest) if step.phase == "advertise" else honest

    def open(self, payload: Any) -> Any:
        return self.inner.open(payload)

    def payload(self, party: Any, **kw: Any) -> Any:
        return self.inner.payload(party, **kw)


def against_the_server(reply: Any) -> ProtocolError:
    names = ["c0", "c1", "c2"]
    agg = SecureAggregation()
    strategy = FedAvg(local_steps=1, batch_size=None, aggregator=agg)
    roles: dict[str, Any] = {"server": partial(
        server, clients=names, strategy=strategy, initial=np.zeros(DIM, np.float32),
        epochs=1, client_timeout=20.0)}
    for name in names:
        roles[name] = partial(client, server="server", learner=Still(), aggregator=agg,
                              half=BadAdvert(reply) if name == "c1" else None,
                              task_timeout=20.0)
    run = run_local(roles, tolerate=[*names, "server"], timeout=30)
    exc = run.failures.get("server")
    assert isinstance(exc, ProtocolError), run.failures
    assert not run.transcript.with_tag("update")  # the round stopped at its set-up
    return exc


@pytest.mark.parametrize(("reply", "needle"), [
    (lambda a: {"c": a.c, "s": a.s, "sig": a.sig}, "client 'c1' advertised malformed keys"),
    (lambda a: SecAggKeys(c=a.c, s=a.s[:8], sig=a.sig), "client 'c1' advertised malformed keys"),
    (lambda a: SecAggKeys(c=a.c.hex(), s=a.s, sig=a.sig),
     "client 'c1' sent a malformed reply to 'advertise' in round 1"),
])
def test_the_server_refuses_a_reply_of_the_wrong_type_by_name(reply: Any, needle: str) -> None:
    exc = against_the_server(reply)
    assert exc.party == "server" and exc.step == "advertise"
    assert needle in str(exc)


def test_a_reply_field_of_the_wrong_type_names_the_field() -> None:
    exc = against_the_server(lambda a: SecAggKeys(c=a.c.hex(), s=a.s, sig=a.sig))
    assert "hfl.SecAggKeys field 'c': expected bytes, got str" in str(exc)


def test_an_honest_round_is_unchanged() -> None:
    # the round's messages in order, by phase and body class: what the codec now checks
    names = ["c0", "c1", "c2"]
    agg = SecureAggregation()
    strategy = FedAvg(local_steps=1, batch_size=None, aggregator=agg)
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=DIM).astype(np.float32)
    roles: dict[str, Any] = {"server": partial(server, clients=names, strategy=strategy,
                                               initial=w0, epochs=1, client_timeout=20.0)}
    for name in names:
        roles[name] = partial(client, server="server", learner=Still(), aggregator=agg,
                              task_timeout=20.0)
    run = run_local(roles, timeout=30, keep_payloads=True)
    assert not run.failures
    received = [m.payload for m in run.transcript.received_by("c0") if m.tag == "task"]
    steps = [(p.phase, type(p.body).__name__) for p in received if isinstance(p, AggStep)]
    assert steps == [("advertise", "SecAggAdvertise"), ("share-keys", "SecAggKeyList"),
                     ("deliver", "SecAggDelivery"), ("consistency", "SecAggSurvivors"),
                     ("unmask", "SecAggUnmask")]
    replies = [type(m.payload.body).__name__ for m in run.transcript.sent_by("c0")
               if m.tag == "agg" and isinstance(m.payload, AggReply)]
    assert replies == ["SecAggKeys", "SecAggEnvelopes", "SecAggSignature", "SecAggShares"]
    # every client kept the model: the mean of three copies of w0 is w0 (to 2^-33)
    final = run.results["c0"].params
    np.testing.assert_allclose(final, w0, atol=1e-8, rtol=0)
