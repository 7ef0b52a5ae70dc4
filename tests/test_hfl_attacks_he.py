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

from islands.aggregation.base import PlainServerHalf
from islands.aggregation.keys import KeyAck
from islands.crypto import ckks, mac
from islands.errors import ProtocolError
from islands.hfl.server_audit import (
    HEFederation,
    combine,
    dp_uploads,
    forwarded,
    he_aggregator,
    honest_coefficients,
    masked,
    positions,
    random_combination,
    scaled,
    spliced,
)

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
    why = [r"claims the upload of 'c1' alone", r"not the weighted sum of the uploads of round 1 by "
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
                            state=None, loss=1.0)

    def evaluate(self, params: Any) -> float:
        self.seen.append(np.array(params))
        return 0.5


class _ForwardingRound:
    """A deviating server's round: the victim c1's values become "the aggregate".

    The forgery of the issue: every upload times a 0/1 plaintext vector, the victim's
    over the model and everyone's over the MAC, under the honest aggregate's claims.
    """

    def __init__(self, half: Any, link: Any, rnd: int, inner: Any, dim: int) -> None:
        self.half, self.link, self.rnd, self.inner, self.dim = half, link, rnd, inner, dim
        self.participants, self.weights = inner.participants, inner.weights
        self.raw: dict[str, Any] = {}

    def add(self, client: str, payload: Any) -> None:
        self.raw[client] = payload
        self.inner.add(client, payload)

    def finish(self, survivors: list[str]) -> Any:
        return masked(self.half, self.raw, self.inner.finish(survivors), "c1")


class _ForwardingServer:
    def __init__(self, honest: Any) -> None:
        self.honest = honest
        self.name = honest.name

    def client_half(self) -> Any:
        return self.honest.client_half()

    def server_half(self) -> Any:
        inner = self.honest.server_half()

        class Half(PlainServerHalf):
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

    dim = LONG[scheme]  # more than one CKKS chunk, or one packed Paillier ciphertext
    honest = _aggregator(scheme)
    seen: dict[str, list[Any]] = {c: [] for c in CLIENTS}
    strategy = FedAvg(local_steps=1, batch_size=5, lr=0.1, evaluate=True,
                      aggregator=_ForwardingServer(honest))
    roles: dict[str, Any] = {"server": partial(
        server, clients=CLIENTS, strategy=strategy, initial=np.zeros(dim, np.float32),
        epochs=3, client_timeout=60)}
    for k, c in enumerate(CLIENTS):
        roles[c] = partial(client, server="server", learner=_Recorder(seen[c], k),
                           aggregator=honest, task_timeout=60)
    with pytest.raises(ProtocolError, match="refuses"):
        run_local(roles, timeout=120)
    victim = np.zeros(dim, np.float32) + 0.2  # c1's model after round 1
    for c in ["c0", "c2", "c3"]:
        # round 1 evaluates the clear initial model; the forwarded one is never evaluated
        assert len(seen[c]) == 1 and not np.allclose(seen[c][0], victim)


# ------------------------------------------------------------------ issue 37: the MAC
LONG = {"ckks": 5000, "paillier": 100, "ou": 40}
"""Model sizes longer than one CKKS chunk (4,096 slots) or packed ciphertext (40 or 13)."""

SCHEMES3 = ["ckks", "paillier", "ou"]


def _long(scheme: str, **options: Any) -> HEFederation:
    if scheme == "ou":
        pytest.importorskip("heu")
        options = {"he": "ou", **options}
    _aggregator("ckks" if scheme == "ckks" else "paillier")
    fed = HEFederation("ckks" if scheme == "ckks" else "paillier", dim=LONG[scheme],
                       options=options)
    fed.deal()
    return fed


def _decrypted(fed: HEFederation, payload: Any) -> Any:
    """What c2's key decrypts ``payload``'s values to, with no check (the forgery's content)."""
    if fed.scheme == "ckks":
        n = fed.dim + mac.real_tag_count(fed.dim)
        return ckks.decrypt_vector(fed.halves["c2"].context, payload["chunks"], n)[:fed.dim]
    return None


@pytest.mark.parametrize("scheme", SCHEMES3)
@pytest.mark.parametrize("attack", ["masked", "spliced", "scaled"])
def test_a_forged_combination_of_the_rounds_uploads_is_refused_by_every_client(
        scheme: str, attack: str) -> None:
    fed = _long(scheme)
    agg, ups = fed.uploads(1)
    honest = fed.aggregate(agg, ups, CLIENTS)
    half = fed.server_half()
    forged = {"masked": lambda: masked(half, ups, honest, "c1"),
              "spliced": lambda: spliced(half, ups, honest, "c1"),
              "scaled": lambda: scaled(half, ups, honest)}[attack]()
    if attack == "masked" and scheme == "ckks":
        # the forgery: it decrypts to the victim's exact model (error <= 1e-9)
        np.testing.assert_allclose(_decrypted(fed, forged), fed.models[1]["c1"], atol=1e-8)
    for c in CLIENTS:
        with pytest.raises(ProtocolError, match=rf"client {c!r} refuses the aggregate server "
                           r"'server' sent as that of round 1: it is not the weighted sum of "
                           r"the uploads of round 1 by \['c0', 'c1', 'c2', 'c3'\] it claims "
                           r"\(its MAC"):
            fed.halves[c].open(forged)
    for c in CLIENTS:  # the honest aggregate still opens
        np.testing.assert_allclose(fed.halves[c].open(honest), fed.mean(1, CLIENTS), atol=TOL)


@pytest.mark.parametrize("scheme", SCHEMES3)
def test_a_replay_mixing_two_rounds_is_refused(scheme: str) -> None:
    fed = _long(scheme)
    _, first = fed.uploads(1)
    agg, second = fed.uploads(2)
    honest = fed.aggregate(agg, second, CLIENTS)
    half = fed.server_half()
    count = positions(half, fed.dim)
    tags = fed.dim if scheme == "ckks" else count - 1
    uploads = {**{f"{c}@1": first[c] for c in CLIENTS}, **second}
    coefficients: dict[str, Any] = {}
    for c, p in honest_coefficients(half, CLIENTS, dict(zip(
            honest["contributors"], honest["weights"], strict=True))).items():
        old = np.zeros(count, dtype=np.float64 if scheme == "ckks" else object)
        new = old.copy()
        old[:tags], new[tags:] = p, p  # round 1's values under round 2's MAC
        coefficients[f"{c}@1"], coefficients[c] = old, new
    forged = combine(half, uploads, coefficients, honest)
    for c in CLIENTS:
        with pytest.raises(ProtocolError, match=rf"client {c!r} refuses .* round 2 .*its MAC"):
            fed.halves[c].open(forged)


@pytest.mark.parametrize("scheme", SCHEMES3)
def test_a_sum_of_fewer_uploads_than_a_client_accepts_is_refused(scheme: str) -> None:
    fed = _long(scheme, min_clients=3)
    agg, ups = fed.uploads(1)
    pair = fed.aggregate(agg, ups, ["c1", "c2"])
    with pytest.raises(ProtocolError, match=r"client 'c0' refuses .* it sums 2 uploads, "
                       r"fewer than this client's min_clients=3"):
        fed.halves["c0"].open(pair)
    # the same two uploads, claimed as three: the MAC holds the server to its claim
    agg, ups = fed.uploads(2)
    three = fed.aggregate(agg, ups, ["c1", "c2", "c3"])
    forged = combine(fed.server_half(), ups, {c: honest_coefficients(
        fed.server_half(), ["c1", "c2"], dict(zip(three["contributors"], three["weights"],
                                                   strict=True)))[c] for c in ["c1", "c2"]},
        three)
    with pytest.raises(ProtocolError, match=r"client 'c0' refuses .*its MAC"):
        fed.halves["c0"].open(forged)
    np.testing.assert_allclose(fed.halves["c0"].open(three),
                               fed.mean(2, ["c1", "c2", "c3"]), atol=TOL)


@pytest.mark.parametrize("scheme", SCHEMES3)
def test_a_randomised_attacker_combining_the_rounds_ciphertexts_never_passes(
        scheme: str) -> None:
    fed = _long(scheme)
    agg, ups = fed.uploads(1)
    honest = fed.aggregate(agg, ups, CLIENTS)
    half = fed.server_half()
    rng = np.random.default_rng(37)
    for trial in range(25):
        coef, offsets = random_combination(rng, half, honest)
        forged = combine(half, ups, coef, honest, offsets=offsets)
        if scheme == "ckks":
            # a forgery within CKKS's noise is no forgery; these move the sum visibly
            opened = _decrypted(fed, forged)
            if np.max(np.abs(opened - fed.mean(1, CLIENTS))) < 1e-2 and all(
                    np.allclose(coef[c][fed.dim:], p) for c, p in zip(
                        honest["contributors"], honest["weights"], strict=True)):
                continue
        with pytest.raises(ProtocolError, match=r"client 'c2' refuses"):
            fed.halves["c2"].open(forged)
        assert fed.halves["c2"].binding.opened == 0, f"trial {trial} was accepted"


# ------------------------------------------------- issue 37, review: forgeries that pass
# Found by the attack review of the MAC (branch i37-attack); each test fails on the code
# it was written against and states the property the fix must restore.
def _claims(names: list[str], weights: list[float], dim: int, rnd: int = 1) -> dict[str, Any]:
    return {"round": rnd, "contributors": names, "weights": weights, "length": dim}


@pytest.mark.parametrize("dp", [False, True], ids=["min_clients=3", "dp t=3"])
def test_ckks_claimed_weights_the_clients_were_never_given_are_refused(dp: bool) -> None:
    # CKKS uploads are unweighted and the server applies p_k, so the pads bind the claimed
    # weights only to the multipliers the server used, never to the weights the clients
    # were given: claiming c2 and c3 at weight 1e-300 (summed as 0) makes "the mean of
    # [c1, c2, c3]" c1's model, opened and evaluated by c0 despite its min_clients=3 (or
    # c1's upload alone, noised for t=3, under distributed DP: a sum with less noise)
    if dp:
        fed, ups = dp_uploads("ckks", t=3)
    else:
        fed = _long("ckks", min_clients=3)
        _, ups = fed.uploads(1)
    forged = combine(fed.server_half(), ups, {"c1": 0.25},
                     _claims(["c1", "c2", "c3"], [0.25, 1e-300, 1e-300], fed.dim))
    if not dp:  # what c0 would open: c1's model
        np.testing.assert_allclose(_decrypted(fed, forged) / 0.25, fed.models[1]["c1"],
                                   atol=1e-6)
    with pytest.raises(ProtocolError, match=r"client 'c0' refuses"):
        fed.halves["c0"].open(forged)


def test_ckks_tiny_claimed_weights_cannot_carry_a_model_of_the_servers_choice() -> None:
    # the tolerance is absolute (2^-24) but the client then multiplies by 1/Σ w: with
    # weights of about 3e-10 the server's own encryption of s·M passes (its tags are off
    # by about s·|M|, far inside the tolerance) and every client opens M, any model the
    # server likes, without a single upload in it
    fed = _long("ckks")
    fed.uploads(1)
    half = fed.server_half()
    count = positions(half, fed.dim)
    model = np.random.default_rng(5).uniform(-10, 10, fed.dim)
    big, small = 1000.0, 2.0**-40  # encrypted at scale 2^40, times a weight at 2^40
    own = ckks.encrypt_vector(half.context, np.concatenate([big * model,
                                                            np.zeros(count - fed.dim)]))
    total = ckks.EncryptedSum(half.context, count)
    total.add(own, small)
    for victim in CLIENTS:
        others = [c for c in CLIENTS if c != victim]
        forged = dict(_claims(others, [big * small / 3] * 3, fed.dim), chunks=total.result())
        with pytest.raises(ProtocolError, match=rf"client {victim!r} refuses"):
            opened = fed.halves[victim].open(forged)
            # what it opened on the code this test was written against: the server's model
            np.testing.assert_allclose(opened, model, atol=1e-5)


@pytest.mark.parametrize("scheme", SCHEMES3)
def test_a_client_asked_twice_for_one_round_gives_the_server_no_new_combination(
        scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # nothing stops a server from sending a client two Tasks of one round (the client
    # never checks that a task's round grows), and both uploads carry the same pads
    # (per round and client; Paillier's counter is always 0): 3·U − 2·U' then passes the
    # MAC as the client's upload, a model nobody uploaded. The fix: one upload per round
    # (or pads fresh per upload, with the verifier told which)
    monkeypatch.setattr(ckks, "_WEIGHT_TOLERANCE", 10.0)  # the server's own sanity limit
    fed = _long(scheme)
    agg, ups = fed.uploads(1)
    w = agg.weights
    again = (fed.models[1]["c1"] + 0.5).astype(np.float32)  # trained from another model
    try:
        ups["c1'"] = fed.halves["c1"].payload(fed.views["c1"], server="server", round=1,
                                              params=again, base=np.zeros(fed.dim),
                                              weight=w["c1"])
    except ProtocolError:
        return  # a second upload of round 1 refused: no second tag under the same pads
    honest = fed.aggregate(agg, {c: ups[c] for c in CLIENTS}, CLIENTS)
    half = fed.server_half()
    coef: dict[str, Any] = dict(honest_coefficients(half, CLIENTS, w))
    coef["c1'"] = -2 * coef["c1"]
    coef["c1"] = 3 * coef["c1"]
    forged = combine(half, ups, coef, honest)
    for c in CLIENTS:
        with pytest.raises(ProtocolError, match=rf"client {c!r} refuses"):
            opened = fed.halves[c].open(forged)
            target = fed.mean(1, CLIENTS) + 2 * w["c1"] * (fed.models[1]["c1"] - again)
            np.testing.assert_allclose(opened, target, atol=TOL)  # the forgery, opened


def test_ckks_a_claimed_length_other_than_the_uploads_is_refused() -> None:
    # a model of n = 5,120 values (a multiple of 1,024) and its 80 tags fill two chunks;
    # the first 1,024 values sit in chunk 0 and the 16 tags of their block at slots
    # 1,024..1,039 of chunk 1, the very slots they take when the length is 1,024. Chunk
    # headers and TenSEAL's size field are the server's to write: one re-headered chunk
    # of the two, masked slot-wise, opens everywhere as a model of 1,024 values. The fix:
    # the length in the MAC's labels (or the client checks it against its own upload)
    import tenseal as ts

    dim, short = 5120, 1024
    fed = HEFederation("ckks", dim=dim)
    fed.deal()
    agg, ups = fed.uploads(1)
    ctx = fed.server_half().context
    head = ckks._HEADER
    size = short + mac.real_tag_count(short)  # 1,040 slots

    def resized(chunk: bytes) -> Any:  # TenSEAL's CKKSVectorProto: field 1 is the size
        body = bytes(chunk[head.size:])
        assert body[:2] == b"\x0a\x02"
        return ts.ckks_vector_from(ctx, body[:2] + bytes([size & 0x7F | 0x80, size >> 7])
                                   + body[4:])

    acc: Any = None
    for c in CLIENTS:
        first, second = (resized(ch) for ch in ups[c])
        p = agg.weights[c]
        first.mul_([p] * short + [0.0] * (size - short))
        second.mul_([0.0] * short + [p] * (size - short))
        first.add_(second)
        acc = first if acc is None else acc + first
    chunk = head.pack(ckks._MAGIC, ckks._VERSION, ckks._KIND_SUM, ckks.fingerprint(ctx), 0,
                      1, size) + acc.serialize()
    forged = dict(_claims(list(CLIENTS), [agg.weights[c] for c in CLIENTS], short),
                  chunks=[chunk])
    for c in CLIENTS:
        with pytest.raises(ProtocolError, match=rf"client {c!r} refuses"):
            opened = fed.halves[c].open(forged)
            assert opened.shape == (short,)  # a model of another length than its own
            np.testing.assert_allclose(opened, fed.mean(1, CLIENTS)[:short], atol=TOL)


@pytest.mark.parametrize("scheme", SCHEMES3)
def test_an_honest_aggregate_under_other_claimed_weights_is_refused(scheme: str) -> None:
    # the honest sum of c1..c3 claimed with every weight divided by 20: c0 (not among them,
    # so its own weight is not checked) would open 20 times the mean. Each pad is drawn
    # for the weight the client was given, so other claimed weights draw other pads
    fed = _long(scheme)
    agg, ups = fed.uploads(1)
    honest = fed.aggregate(agg, ups, ["c1", "c2", "c3"])
    relabelled = dict(honest, weights=[p / 20 for p in honest["weights"]])
    with pytest.raises(ProtocolError, match=r"client 'c0' refuses .*its MAC"):
        fed.halves["c0"].open(relabelled)


def test_a_paillier_upload_scaled_by_a_weight_code_ratio_is_refused_by_the_mac() -> None:
    # the MAC is linear: c1's whole upload (values and tag) times e = code(w')/code(w)
    # mod n, claimed at w', satisfies T' = Σ a^(C+1-c)·M'_c + code(w')·β when β does not
    # depend on the weight; only unpack's range check (e·M mod n is no packing) refused
    # it. With the weight's code in the pad's label the MAC itself refuses it
    import gmpy2

    fed = _long("paillier")
    agg, ups = fed.uploads(1)
    honest = fed.aggregate(agg, ups, CLIENTS)
    half = fed.server_half()
    n = int(half.public_key.n)
    w = dict(zip(honest["contributors"], honest["weights"], strict=True))
    other = w["c1"] * 1.5
    ratio = mac.weight_code(other) * int(gmpy2.invert(mac.weight_code(w["c1"]), n)) % n
    coef: dict[str, Any] = {c: 1 for c in CLIENTS}
    coef["c1"] = ratio
    claims = dict(honest, weights=[other if c == "c1" else w[c] for c in CLIENTS])
    with pytest.raises(ProtocolError, match=r"client 'c0' refuses .*its MAC does not match"):
        fed.halves["c0"].open(combine(half, ups, coef, claims))


def test_a_plain_initial_model_after_the_first_task_is_refused() -> None:
    # the MAC checks what open() decrypts, but a Task flagged initial carries a plain model
    # that the client trains on and evaluates without open(): a server sending one in
    # round 2 has every client use (and report the accuracy of) any model it likes. An
    # honest server sends the plain model only with a client's first task
    from islands.hfl.protocol import Finish, Start, Task, client

    evil = np.full(DIM, 7.0, np.float32)

    def task(rnd: int, params: Any) -> Task:
        return Task(round=rnd, params=params, epoch=0, step=0, steps=1, batch_size=1,
                    lr=0.1, momentum=0.0, weight_decay=0.0, prox_mu=0.0, evaluate=True,
                    weight=0.5, initial=True)

    class Party:
        name, parties = "c0", ("server", "c0")

        def __init__(self) -> None:
            self.inbox = [Start(resumed_from=0), task(1, np.zeros(DIM, np.float32)),
                          task(2, evil), Finish(params=None, rounds=2)]

        def send(self, to: str, tag: str, msg: Any) -> None:
            pass

        def recv(self, sender: str, tag: str, timeout: float | None = None) -> Any:
            return self.inbox.pop(0)

    class Half:  # an HE client half: every aggregate goes through open()
        def on_step(self, party: Any, **kw: Any) -> None:
            return None

        def open(self, payload: Any) -> Any:
            raise ProtocolError("open() refuses it")

        def payload(self, party: Any, **kw: Any) -> Any:
            return {"upload": True}

    seen: list[Any] = []
    with pytest.raises(ProtocolError):
        client(Party(), server="server", learner=_Recorder(seen, 0), aggregator=None,
               half=Half())
    assert not any(np.array_equal(s, evil) for s in seen), "the client evaluated it"
