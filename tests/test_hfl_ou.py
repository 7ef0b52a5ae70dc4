"""Horizontal FL's homomorphic baseline on HEU's Okamoto–Uchiyama: ``[paillier] he = "ou"``.

The clients share a dealt OU key, upload Enc(pack(p_k·w_k)) under it and open the sum the
server makes of ciphertexts; the model must be the unprotected run's to the fixed point,
a deviating dealer's key (shorter, or of the other scheme) is refused before anything is
encrypted, and the aggregate stays bound to its round and contributors (issue 24).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.aggregation.base import MalformedUpdateError, MeanAggregator
from islands.aggregation.homomorphic import PaillierAggregator
from islands.aggregation.keys import KeyAck
from islands.aggregation.protect import build_aggregator
from islands.crypto import heu
from islands.errors import ProtocolError, ValidationError
from islands.hfl import FedAvg
from islands.hfl.protocol import client, server
from islands.hfl.server_audit import HEFederation, forwarded
from islands.runtime import run_local
from scripted import ScriptedLearner

pytest.importorskip("phe")
if not heu.available():
    pytest.skip("sf-heu is not importable here (pip install 'islands[heu]')",
                allow_module_level=True)

DIM = 101
OU = {"he": "ou"}
# 3 clients, 2 rounds: each term is rounded to 2^-32 once; the float32 output adds ~6e-8
TOL = 1e-6


def _fedavg(aggregator: Any, epochs: int = 2) -> tuple[np.ndarray, bool]:
    """Run 3-client FedAvg; return the final model and whether the server held it."""
    rng = np.random.default_rng(3)
    counts = [int(c) for c in rng.integers(20, 200, size=3)]
    vs = [rng.normal(size=DIM).astype(np.float32) for _ in range(3)]
    w0 = rng.normal(size=DIM).astype(np.float32)
    names = ["c0", "c1", "c2"]
    strategy = FedAvg(local_steps=1, batch_size=None, aggregator=aggregator)
    roles: dict[str, Any] = {"server": partial(server, clients=names, strategy=strategy,
                                               initial=w0, epochs=epochs,
                                               client_timeout=60.0)}
    for name, n, v in zip(names, counts, vs, strict=True):
        roles[name] = partial(client, server="server", learner=ScriptedLearner(n, v),
                              aggregator=aggregator, task_timeout=60.0)
    results = run_local(roles, timeout=240.0).results
    if results["server"].params is not None:
        return np.asarray(results["server"].params, dtype=np.float64), True
    opened = [results[c].params for c in names]
    for other in opened[1:]:
        np.testing.assert_array_equal(other, opened[0])
    return np.asarray(opened[0], dtype=np.float64), False


def test_fedavg_under_ou_gives_the_unprotected_model() -> None:
    agg = build_aggregator(["paillier"], {"paillier": OU})
    assert isinstance(agg, PaillierAggregator) and agg.he == "ou"
    plain, server_saw_plain = _fedavg(MeanAggregator())
    protected, server_saw = _fedavg(agg)
    assert server_saw_plain and not server_saw  # only the clients open the OU aggregate
    np.testing.assert_allclose(protected, plain, atol=TOL, rtol=0)


def test_ou_packs_the_slots_its_plaintext_bound_holds() -> None:
    agg = PaillierAggregator(he="ou")
    # 2048 bits: k = 682 plaintext bits, slots of 41 + 10 bits
    assert heu.min_plaintext_bits(2048) == 682
    assert (agg.spec.slot_bits, agg.spec.slots, agg.range_bits) == (51, 13, 663)
    assert PaillierAggregator().spec.slots == 40  # the Paillier default is unchanged
    assert PaillierAggregator(he="ou", packed=False).spec.slots == 1


def test_a_bad_engine_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValidationError, match=r"'he' parameter of PaillierAggregator must "
                       r"be 'paillier' or 'ou'. Got 'rsa'"):
        PaillierAggregator(he="rsa")
    with pytest.raises(ValidationError, match=r"'he'.*'paillier' or 'ou'.*'OU'"):
        build_aggregator(["paillier"], {"paillier": {"he": "OU"}})


def test_missing_heu_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heu, "_MISSING", "No module named 'heu'")
    with pytest.raises(ValidationError, match=r"PaillierAggregator: he='ou' needs sf-heu "
                       r"\(pip install 'islands\[heu\]'"):
        PaillierAggregator(he="ou")
    assert PaillierAggregator().he == "paillier"  # the default engine needs no HEU


# ----------------------------------------------------------------------------- dealer
def test_an_ou_key_shorter_than_the_clients_key_bits_is_refused() -> None:
    from islands.crypto import paillier

    dealer = PaillierAggregator(he="ou")
    # a dealer configured (or patched) below the clients' size, with its packing
    dealer.key_bits = 1024
    dealer.spec = paillier.packing_spec(heu.min_plaintext_bits(1024) + 1)
    dealer.range_bits = dealer.spec.slots * dealer.spec.slot_bits
    fed = HEFederation("paillier", dealer=dealer, options=OU)
    acks = fed.deal()
    for c in fed.clients[1:]:
        exc = acks[c]
        assert isinstance(exc, ProtocolError), f"{c} installed a 1024-bit key"
        msg = str(exc)
        assert f"client {c!r} refuses the ou key of dealer 'c0'" in msg
        assert "parameter 'key_bits' must be at least 2048" in msg
        assert int(msg.rsplit("got ", 1)[1]) < 2048
        assert fed.halves[c].owner is None and fed.halves[c].cipher is None
        with pytest.raises(ProtocolError, match="has no OU key"):
            fed.halves[c].payload(fed.views[c], server="server", round=1,
                                  params=np.zeros(fed.dim, np.float32),
                                  base=np.zeros(fed.dim), weight=0.5)


@pytest.mark.parametrize(("clients", "dealer", "name"), [
    (OU, {}, "ou"), ({}, OU, "paillier")], ids=["paillier-to-ou", "ou-to-paillier"])
def test_a_key_of_the_other_scheme_is_refused(clients: dict[str, str],
                                              dealer: dict[str, str], name: str) -> None:
    other = "paillier" if name == "ou" else "ou"
    fed = HEFederation("paillier", dealer=PaillierAggregator(**dealer), options=clients)
    acks = fed.deal()
    for c in fed.clients[1:]:
        exc = acks[c]
        assert isinstance(exc, ProtocolError), f"{c} installed a {other} key"
        assert (f"client {c!r} refuses the {name} key of dealer 'c0': parameter 'he' must "
                f"be {name!r} (this client's own configuration), got {other!r}") in str(exc)


def test_a_malformed_ou_secret_key_is_refused() -> None:
    fed = HEFederation("paillier", options=OU)
    half = fed.halves["c1"]
    half.binding.me, half.binding.dealer = "c1", "c0"
    owner = heu.OuKeyOwner(2048)
    public, secret = owner.public_bytes(), bytearray(owner.secret_bytes())
    secret[5] ^= 1  # a bit of p
    blob = b"islands ou key\x00" + len(public).to_bytes(4, "big") + public + bytes(secret)
    with pytest.raises(ProtocolError, match=r"client 'c1' got a malformed ou key from "
                       r"dealer 'c0': .*OU secret key"):
        half._install(blob)
    assert half.owner is None


# ----------------------------------------------------------------------------- server
def test_the_aggregate_stays_bound_to_its_round_and_contributors() -> None:
    fed = HEFederation("paillier", options=OU)
    acks = fed.deal()
    assert all(isinstance(a, KeyAck) for a in acks.values())
    agg, ups = fed.uploads(1)
    honest = fed.aggregate(agg, ups, list(fed.clients))
    for c in fed.clients:
        np.testing.assert_allclose(fed.halves[c].open(honest), fed.mean(1, fed.clients),
                                   atol=TOL)
    why = [r"claims the upload of 'c1' alone",
           r"not the weighted sum of the uploads of round 1 by \['c0', 'c1', 'c2', 'c3'\]"]
    for payload, reason in zip(forwarded(fed, ups, honest), why, strict=True):
        with pytest.raises(ProtocolError, match=rf"client 'c2' refuses the aggregate server "
                           rf"'server' sent as that of round 1: .*{reason}"):
            fed.halves["c2"].open(payload)
    # the server never holds the secret key, and a malformed upload leaves its sum as it was
    half = fed.server_half()
    assert half.cipher is not None and not hasattr(half.cipher, "_decryptor")
    agg2, ups2 = fed.uploads(2)
    with pytest.raises(MalformedUpdateError, match=r"client 'c3' sent a malformed OU update"):
        agg2.add("c3", dict(ups2["c3"], blob=ups2["c3"]["blob"][:-40]))
    with pytest.raises(MalformedUpdateError, match=r"another public key"):
        agg2.add("c3", dict(ups2["c3"], blob=bytes(32) + ups2["c3"]["blob"][32:]))
    with pytest.raises(MalformedUpdateError, match=r"its MAC counter"):
        agg2.add("c3", ups2["c3"]["blob"])
    second = fed.aggregate(agg2, ups2, list(fed.clients))
    np.testing.assert_allclose(fed.halves["c1"].open(second), fed.mean(2, fed.clients),
                               atol=TOL)


# ----------------------------------------------------------------------------- job file
def test_a_job_file_with_he_ou_parses_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from islands.hfl.job import JobError, load_job, run_job

    base = (
        'name = "ou"\nseed = 0\nepochs = 2\noutput = "{out}"\nbaseline = false\n'
        'protect = {protect}\n\n[data]\nname = "digits"\nstandardize = true\n\n'
        '[partition]\nkind = "classes"\nclients = 3\ngroups = "0-3,4-6,7-9"\n\n'
        '[model]\nkind = "mlp"\nhidden = [16]\n\n[strategy]\nname = "fedavg"\n'
        'batch_size = 48\nlr = 0.05\n')
    ou = base + '\n[paillier]\nhe = "{he}"\n'
    bad = tmp_path / "bad.toml"
    bad.write_text(ou.format(out=tmp_path / "bad", protect='["paillier"]', he="rsa"))
    with pytest.raises(JobError, match=r"'he'.*'paillier' or 'ou'.*'rsa'"):
        load_job(bad)
    good = tmp_path / "job.toml"
    good.write_text(ou.format(out=tmp_path / "out", protect='["paillier"]', he="ou"))
    job = load_job(good)
    plain_file = tmp_path / "plain.toml"
    plain_file.write_text(base.format(out=tmp_path / "plain", protect="[]"))
    plain = run_job(load_job(plain_file))
    protected = run_job(job)
    assert protected.aggregations == plain.aggregations >= 2
    assert abs(protected.metrics["accuracy"] - plain.metrics["accuracy"]) <= 0.005
