"""A deviating dealer or server against CKKS and Paillier aggregation: issue 22, 13 and 8.

Before the change a client installed whatever CKKS context or Paillier key the dealer
sent (a dealer, or a server relaying for one, imposed N = 4096 at scale 2^20 or a
1024-bit modulus), and opened whatever ciphertext the server sent as "the aggregate": a
server that forwarded one client's upload, or a round's aggregate again later, had the
other clients decrypt, train on and evaluate it. The dealer and the server are played by
the test against real client halves, each with its own configuration and identity.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from islands.aggregation.keys import KeyAck
from islands.errors import ProtocolError
from islands.hfl.server_audit import HEFederation, forwarded, he_aggregator

CLIENTS = ["c0", "c1", "c2", "c3"]  # c0 deals the key; c1 is the victim
DIM = 7
N_TRAIN = {"c0": 10, "c1": 30, "c2": 20, "c3": 40}


def _aggregator(scheme: str, **kw: Any) -> Any:
    pytest.importorskip("tenseal" if scheme == "ckks" else "phe")
    return he_aggregator(scheme, **kw)


def Federation(scheme: str, dealer: Any = None) -> HEFederation:
    _aggregator(scheme)
    return HEFederation(scheme, dealer=dealer, dim=DIM)


SCHEMES = ["ckks", "paillier"]
# CKKS decrypts to ~1e-9 at the defaults and Paillier to 2^-32 per term; the float32
# output adds ~6e-8 relative
TOL = 1e-6


# ----------------------------------------------------------------------------- 13a
@pytest.mark.parametrize(("params", "name", "want", "got"), [
    ({"poly_modulus_degree": 4096, "coeff_mod_bit_sizes": (40, 20, 40), "scale_bits": 20},
     "poly_modulus_degree", "at least 8192", "4096"),
    ({"scale_bits": 20}, "scale_bits", "at least 40", "20"),
    # within SEAL's table at N = 8192, but a larger modulus: less security than 160 bits
    ({"coeff_mod_bit_sizes": (60, 58, 60, 40)}, "coeff_mod_bit_sizes",
     "at most 160 bits in total at poly_modulus_degree=8192", "(60, 58, 60, 40) (218 bits)"),
], ids=["N=4096", "scale=2^20", "modulus=218"])
def test_a_dealer_imposing_a_weaker_ckks_context_is_refused(
        params: dict[str, Any], name: str, want: str, got: str) -> None:
    dealer = _aggregator("ckks", **params)
    fed = Federation("ckks", dealer=dealer)
    acks = fed.deal()
    for c in CLIENTS[1:]:
        exc = acks[c]
        assert isinstance(exc, ProtocolError), f"{c} installed the dealer's weaker context"
        msg = str(exc)
        assert f"client {c!r} refuses the ckks key of dealer 'c0'" in msg
        assert f"parameter {name!r} must be {want}" in msg and f"got {got}" in msg
        assert fed.halves[c].context is None  # nothing installed: nothing to encrypt with
        with pytest.raises(ProtocolError, match="has no CKKS key"):
            fed.halves[c].payload(fed.views[c], server="server", round=1,
                                  params=np.zeros(DIM, np.float32), base=np.zeros(DIM),
                                  weight=0.5)


def test_a_dealer_offering_more_ckks_protection_is_accepted() -> None:
    dealer = _aggregator("ckks", poly_modulus_degree=16384)
    fed = Federation("ckks", dealer=dealer)
    acks = fed.deal()
    assert all(isinstance(a, KeyAck) for a in acks.values())
    agg, ups = fed.uploads(1)
    payload = fed.aggregate(agg, ups, CLIENTS)
    for c in CLIENTS:
        np.testing.assert_allclose(fed.halves[c].open(payload), fed.mean(1, CLIENTS),
                                   atol=TOL)


def test_a_1024_bit_paillier_key_dealt_to_a_2048_bit_client_is_refused() -> None:
    dealer = _aggregator("paillier")
    dealer.key_bits = 1024  # a dealer configured (or patched) below the clients' size
    fed = Federation("paillier", dealer=dealer)
    acks = fed.deal()
    for c in CLIENTS[1:]:
        exc = acks[c]
        assert isinstance(exc, ProtocolError), f"{c} installed a 1024-bit key"
        msg = str(exc)
        assert f"client {c!r} refuses the paillier key of dealer 'c0'" in msg
        assert "parameter 'key_bits' must be at least 2048" in msg and "got 1024" in msg
        assert fed.halves[c].private_key is None


# ----------------------------------------------------------------------------- 13b, 8b
@pytest.mark.parametrize("scheme", SCHEMES)
def test_an_honest_aggregate_is_the_weighted_mean_and_opens_everywhere(scheme: str) -> None:
    fed = Federation(scheme)
    fed.deal()
    for rnd in (1, 2):
        agg, ups = fed.uploads(rnd)
        payload = fed.aggregate(agg, ups, CLIENTS)
        for c in CLIENTS:
            np.testing.assert_allclose(fed.halves[c].open(payload), fed.mean(rnd, CLIENTS),
                                       atol=TOL)
    # round 3: c3 is late and left out; it still opens the others' mean, as they do
    agg, ups = fed.uploads(3)
    payload = fed.aggregate(agg, ups, ["c0", "c1", "c2"])
    for c in CLIENTS:
        np.testing.assert_allclose(fed.halves[c].open(payload),
                                   fed.mean(3, ["c0", "c1", "c2"]), atol=TOL)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_server_forwarding_one_upload_as_the_aggregate_is_refused_by_every_other_client(
        scheme: str) -> None:
    fed = Federation(scheme)
    fed.deal()
    agg, ups = fed.uploads(1)
    honest = fed.aggregate(agg, ups, CLIENTS)
    why = [r"claims the upload of 'c1' alone", r"not the sum of the uploads of round 1 by "
           r"\['c0', 'c1', 'c2', 'c3'\]"]
    for payload, reason in zip(forwarded(fed, ups, honest), why, strict=True):
        for c in ["c0", "c2", "c3"]:
            with pytest.raises(ProtocolError, match=rf"client {c!r} refuses the aggregate "
                               rf"server 'server' sent as that of round 1: .*{reason}"):
                fed.halves[c].open(payload)
    for c in CLIENTS:  # the honest aggregate still opens afterwards
        np.testing.assert_allclose(fed.halves[c].open(honest), fed.mean(1, CLIENTS),
                                   atol=TOL)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_replayed_aggregate_of_an_earlier_round_is_refused(scheme: str) -> None:
    fed = Federation(scheme)
    fed.deal()
    agg, ups = fed.uploads(1)
    first = fed.aggregate(agg, ups, CLIENTS)
    for c in CLIENTS:
        fed.halves[c].open(first)
    fed.uploads(2)  # every client uploads in round 2; the server sends round 1's again
    for c in CLIENTS:
        with pytest.raises(ProtocolError, match=rf"client {c!r} refuses .*server 'server'.*"
                           r"round 1.*after its own upload of round 2"):
            fed.halves[c].open(first)
    # relabelled as round 2, its tags are those of round 1: refused as well
    relabelled = dict(first, round=2)
    for c in CLIENTS:
        with pytest.raises(ProtocolError, match=rf"client {c!r} refuses .*round 2"):
            fed.halves[c].open(relabelled)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_sum_of_a_chosen_subset_is_what_remains(scheme: str) -> None:
    # the residual, as documented: the server may leave uploads out (as it does for late
    # clients); the clients then open the mean of those left in, never a single one
    fed = Federation(scheme)
    fed.deal()
    agg, ups = fed.uploads(1)
    pair = fed.aggregate(agg, ups, ["c1", "c2"])
    np.testing.assert_allclose(fed.halves["c0"].open(pair), fed.mean(1, ["c1", "c2"]),
                               atol=TOL)


# ----------------------------------------------------------------------------- 8b, a run
class _Recorder:
    """A client's learner that records every model it is asked to evaluate."""

    def __init__(self, seen: list[Any], k: int) -> None:
        self.seen, self.k = seen, k

    @property
    def n_train(self) -> int:
        return N_TRAIN[CLIENTS[self.k]]

    @property
    def n_eval(self) -> int:
        return 5

    def train(self, params: Any, **kw: Any) -> Any:
        from islands.hfl.protocol import LocalOutcome

        return LocalOutcome(params=(params + 0.1 * (self.k + 1)).astype(np.float32),
                            momentum=None, loss=1.0)

    def evaluate(self, params: Any) -> float:
        self.seen.append(np.array(params))
        return 0.5


class _ForwardingRound:
    """A deviating server's round: the victim c1's upload alone becomes "the aggregate"."""

    def __init__(self, half: Any, link: Any, rnd: int, inner: Any, dim: int) -> None:
        self.half, self.link, self.rnd, self.inner, self.dim = half, link, rnd, inner, dim
        self.participants, self.weights = inner.participants, inner.weights
        self.raw: dict[str, Any] = {}

    def add(self, client: str, payload: Any) -> None:
        self.raw[client] = payload
        self.inner.add(client, payload)

    def finish(self, survivors: list[str]) -> Any:
        alone = self.half.start(self.link, round=self.rnd, clients=["c1"],
                                weights={"c1": 1.0}, dim=self.dim)
        alone.add("c1", self.raw["c1"])
        return alone.finish(["c1"])


class _ForwardingServer:
    def __init__(self, honest: Any) -> None:
        self.honest = honest
        self.name = honest.name

    def client_half(self) -> Any:
        return self.honest.client_half()

    def server_half(self) -> Any:
        inner = self.honest.server_half()

        class Half:
            def setup(self, link: Any, clients: Any) -> Any:
                return inner.setup(link, clients)

            def start(self, link: Any, *, round: int, clients: Any, weights: Any,
                      dim: int) -> Any:
                real = inner.start(link, round=round, clients=clients, weights=weights,
                                   dim=dim)
                return _ForwardingRound(inner, link, round, real, dim)

            def reveal(self, payload: Any) -> None:
                return None

            def get_state(self) -> dict[str, Any]:
                return {}

            def set_state(self, state: Any) -> None:
                pass

        return Half()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_server_sending_one_clients_upload_for_evaluation_gets_no_accuracy(
        scheme: str) -> None:
    from islands.hfl import FedAvg
    from islands.hfl.protocol import client, server
    from islands.runtime import run_local

    honest = _aggregator(scheme)
    seen: dict[str, list[Any]] = {c: [] for c in CLIENTS}
    strategy = FedAvg(local_steps=1, batch_size=5, lr=0.1, evaluate=True,
                      aggregator=_ForwardingServer(honest))
    roles: dict[str, Any] = {"server": partial(
        server, clients=CLIENTS, strategy=strategy, initial=np.zeros(DIM, np.float32),
        epochs=3, client_timeout=60)}
    for k, c in enumerate(CLIENTS):
        roles[c] = partial(client, server="server", learner=_Recorder(seen[c], k),
                           aggregator=honest, task_timeout=60)
    with pytest.raises(ProtocolError, match="refuses"):
        run_local(roles, timeout=120)
    victim = np.zeros(DIM, np.float32) + 0.2  # c1's model after round 1
    for c in ["c0", "c2", "c3"]:
        # round 1 evaluates the clear initial model; the forwarded one is never evaluated
        assert len(seen[c]) == 1 and not np.allclose(seen[c][0], victim)
