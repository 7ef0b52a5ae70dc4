"""Federated transfer learning deployed: one ``islands party`` process per party, mutual TLS.

The two parties align their raw ID files by PSI, train, and the target scores its rows by
federated inference, as one federation; with the estimator's ``random_state`` the result
must be the in-process :class:`~islands.vfl.FederatedTransferLearner`'s. Under
``engine = "ss"`` (the default) a third process, the dealer, deals the randomness; under
``engine = "he"`` the two parties run alone.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

pytest.importorskip("grpc")

from islands.deploy.local import Finished, start_parties, wait_parties, write_federation
from islands.errors import JobError
from islands.protocols import Deployment, spec
from islands.vfl import FederatedTransferLearner

pytestmark = pytest.mark.timeout(300)

MODEL = {"dim": 4, "hidden": [8], "epochs": 2, "batch_size": 30, "pretrain_epochs": 1}
HE = {"engine": "he", "he": "paillier", "key_bits": 1024, "insecure_keys": True}


def _data() -> dict[str, Any]:
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    perm = np.random.default_rng(0).permutation(len(y))
    # B (the bank, labelled) holds 300 rows, A (the hospital) 240, 60 of them shared;
    # each side lists its rows in its own order
    b, a = perm[:300], np.concatenate([perm[300:480], perm[:60]])
    return {"x_a": X[a][:, :15], "x_b": X[b][:, 15:], "y_b": y[b],
            "ids_a": [f"person-{i}" for i in a], "ids_b": [f"person-{i}" for i in b]}


def _write(folder: Path, d: dict[str, Any]) -> None:
    np.save(folder / "hospital.npy", d["x_a"])
    np.savetxt(folder / "bank.csv", np.column_stack([d["x_b"], d["y_b"]]), delimiter=",",
               fmt="%.17g")
    (folder / "hospital-ids.txt").write_text("\n".join(d["ids_a"]) + "\n", encoding="utf-8")
    (folder / "bank-ids.txt").write_text("\n".join(d["ids_b"]) + "\n", encoding="utf-8")


def _ok(done: dict[str, Finished]) -> None:
    bad = {n: f.log[-3000:] for n, f in done.items() if f.returncode != 0}
    assert not bad, bad


@pytest.mark.parametrize("engine", ["ss", "he"])
def test_deployed_ftl_equals_the_estimator(tmp_path: Path, engine: str) -> None:
    d = _data()
    _write(tmp_path, d)
    (tmp_path / "ask.txt").write_text("\n".join(d["ids_a"][::7]) + "\n", encoding="utf-8")
    parties: dict[str, dict[str, str]] = {
        "hospital": {"data": "hospital.npy", "ids": "hospital-ids.txt", "predict": "ask.txt"},
        "bank": {"data": "bank.csv", "ids": "bank-ids.txt"}}
    extra: dict[str, Any] = HE
    if engine == "ss":
        parties["notary"] = {}  # the dealer: no data
        extra = {"dealer": "notary"}
    files = write_federation(tmp_path, "ftl", parties,
                             options={"source": "bank", "random_state": 3, **MODEL, **extra})
    _ok(wait_parties(start_parties(files), files, 240))

    params: dict[str, Any] = {**MODEL, "hidden": (8,), **({} if engine == "ss" else HE)}
    est = FederatedTransferLearner(**params, random_state=3)
    est.fit(d["x_a"], d["x_b"], d["y_b"], d["ids_a"], d["ids_b"])
    out = tmp_path / "out"
    target = json.loads((out / "hospital" / "result.json").read_text())
    source = json.loads((out / "bank" / "result.json").read_text())
    assert target["role"] == "target" and source["role"] == "source"
    if engine == "he":
        assert "1024-bit keys are below" in target["security_warning"] == \
            source["security_warning"]
    else:
        assert "security_warning" not in target and "security_warning" not in source
        dealer = json.loads((out / "notary" / "result.json").read_text())
        # the dealer saw only sizes: the overlap, K, the epochs it dealt, the rows scored
        assert dealer == {"role": "dealer", "target": "hospital", "source": "bank",
                          "aligned_rows": 60, "scores": 2, "epochs_dealt": 2,
                          "scored_rows": len(d["ids_a"][::7])}
    assert target["aligned_rows"] == source["aligned_rows"] == 60
    aligned = (out / "hospital" / "aligned-ids.txt").read_text().split()
    assert aligned == (out / "bank" / "aligned-ids.txt").read_text().split()
    assert aligned == est.overlap_ids_
    # the ring and Paillier decryption are exact and both runs make the same float32 torch
    # steps; the tolerance only allows for a different BLAS summation order between
    # processes
    np.testing.assert_allclose(source["epoch_losses"], est.loss_history_, rtol=1e-9)
    np.testing.assert_allclose(target["epoch_losses"], est.loss_history_, rtol=1e-9)
    np.testing.assert_allclose(np.load(out / "bank" / "phi.npy"), est.phi_, atol=1e-9)

    with open(out / "hospital" / "predictions.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == d["ids_a"][::7]
    assert set(rows[0]) == {"id", "label", "p_0", "p_1"}
    proba = np.array([[float(r["p_0"]), float(r["p_1"])] for r in rows])
    np.testing.assert_allclose(proba, est.predict_proba(d["x_a"][::7]), atol=1e-9)
    assert [int(r["label"]) for r in rows] == est.predict(d["x_a"][::7]).tolist()
    assert source["classes"] == [0.0, 1.0] and source["scored"] == len(rows)


def _prepare(tmp_path: Path, party: str, options: dict[str, Any], **files: str) -> Any:
    return _prepare_among(("hospital", "bank"), tmp_path, party, options, files)


def _prepare_among(parties: tuple[str, ...], tmp_path: Path, party: str,
                   options: dict[str, Any], files: dict[str, str]) -> Any:
    dep = Deployment(party=party, parties=parties, options=options,
                     where="federation file f.toml [ftl]", output=tmp_path / "out",
                     source="p.toml", **{k: tmp_path / v for k, v in files.items()})
    return spec("ftl").prepare(dep)


def test_ftl_section_and_files_are_checked_before_connecting(tmp_path: Path) -> None:
    d = _data()
    _write(tmp_path, d)
    good = {"source": "bank", **MODEL, **HE}
    a = {"data": "hospital.npy", "ids": "hospital-ids.txt"}
    assert "target" in _prepare(tmp_path, "hospital", good, **a).description
    assert "2 classes" in _prepare(tmp_path, "bank", good, data="bank.csv",
                                   ids="bank-ids.txt").description
    cases: list[tuple[dict[str, Any], dict[str, str], str]] = [
        ({"source": "bank", **MODEL}, a, "federation file f.toml [ftl]: engine = 'ss' (the "
         "default) needs a third party to deal its correlated randomness: name a dealer "
         "that colludes with neither party (dealer = \"<party>\"), or set engine = 'he'"),
        ({**good, "dealer": "bank"}, a, "'dealer' applies only with engine = 'ss'"),
        ({"source": "bank", "dealer": "notary", **MODEL}, a,
         "'dealer' must name a party of [parties]; got 'notary'"),
        ({"source": "bank", "dealer": "hospital", **MODEL}, a,
         "exactly two data parties and the dealer; [parties] names 2"),
        ({"source": "bank", "dealer": "bank", "engine": "ss", "he": "ou", **MODEL}, a,
         "he='ou' applies to engine='he'"),
        # a scheme alone selects the HE flow, which has no dealer
        ({"source": "bank", "dealer": "bank", "he": "ou", **MODEL}, a,
         "'dealer' applies only with engine = 'ss'"),
        ({**good, "engine": "mpc"}, a,
         "'engine' must be 'ss' or 'he', or None ('he' when he is given, else 'ss'); got 'mpc'"),
        ({**good, "key_bits": 1000}, a, "federation file f.toml [ftl]: 'key_bits' must be an "
         "int in [2048, 16384] and a multiple of 256 (from 1024 only with insecure_keys, for "
         "tests); got 1000"),
        # the 2048-bit floor: a smaller key needs the explicit opt-in
        ({**good, "key_bits": 1024, "insecure_keys": False}, a,
         "federation file f.toml [ftl]: 'key_bits' must be an int in [2048, 16384] and a "
         "multiple of 256 (from 1024 only with insecure_keys, for tests); got 1024"),
        ({**good, "loss": "hinge"}, a, "'loss' must be one of ['softmax', 'logistic']"),
        ({**good, "depth": 3}, a, "unknown key(s) ['depth']"),
        ({**good, "timeout": 9}, a, "'timeout' is the federation file's top-level setting"),
        ({**MODEL, **HE}, a, "'source' must name a party of [parties]; got None"),
        ({**good, "seed": 1, "random_state": 2}, a, "give 'seed' or 'random_state'"),
        ({**good, "random_state": -1}, a, "'random_state' must be an int in [0, inf)"),
        (good, {"data": "hospital.npy"}, "needs its 'ids' file for protocol 'ftl'"),
        (good, {**a, "labels": "bank-ids.txt"}, "it holds no labels"),
        (good, {**a, "ids": "bank-ids.txt"}, "holds 240 rows but its 'ids' file"),
        (good, {**a, "predict": "bank-ids.txt"}, "names IDs its ids file does not hold"),
    ]
    for options, keys, message in cases:
        with pytest.raises(JobError) as info:
            _prepare(tmp_path, "hospital", options, **keys)
        assert message in str(info.value), (message, str(info.value))
    big = d["x_a"].copy()
    big[0, 0] = 2.0**31
    np.save(tmp_path / "big.npy", big)
    with pytest.raises(JobError, match="fixed point below 2\\^30"):
        _prepare(tmp_path, "hospital", good, **{**a, "data": "big.npy"})
    np.savetxt(tmp_path / "one.csv", np.column_stack([d["x_b"], np.ones(300)]),
               delimiter=",")
    with pytest.raises(JobError, match="at least 2 classes"):
        _prepare(tmp_path, "bank", good, data="one.csv", ids="bank-ids.txt")


def test_ftl_psi_engine_and_its_spu_addresses_are_checked_before_connecting(
        tmp_path: Path) -> None:
    d = _data()
    _write(tmp_path, d)
    a = {"data": "hospital.npy", "ids": "hospital-ids.txt"}
    good = {"source": "bank", **MODEL, **HE}
    hosts = {"hospital": "127.0.0.1:9001", "bank": "127.0.0.1:9002"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({**good, "psi_engine": "ecdh"}, "federation file f.toml [ftl]: 'psi_engine' must be "
         "'dh' or 'spu'; got 'ecdh'"),
        ({**good, "psi_engine": "spu"}, "psi_engine = 'spu' needs a [ftl.spu] table"),
        ({**good, "psi_engine": "spu", "spu": {"hospital": "127.0.0.1:9001"}},
         "psi_engine = 'spu' needs a [ftl.spu] table"),
        ({**good, "psi_engine": "spu", "spu": {"hospital": "127.0.0.1:9001",
                                                "bank": "127.0.0.1:9001"}},
         "the parties' SPU addresses must differ"),
        ({**good, "spu": hosts}, "[ftl.spu] applies only with psi_engine = 'spu'"),
    ]
    for options, message in cases:
        with pytest.raises(JobError) as info:
            _prepare(tmp_path, "hospital", options, **a)
        assert message in str(info.value), (message, str(info.value))
    assert "PSI on SPU" not in _prepare(tmp_path, "hospital", good, **a).description
    spu = {**good, "psi_engine": "spu", "spu": hosts}
    target = _prepare(tmp_path, "hospital", spu, **a)
    source = _prepare(tmp_path, "bank", spu, data="bank.csv", ids="bank-ids.txt")
    for prepared in (target, source):
        assert "PSI on SPU RR22" in prepared.description
        # the target initiates PSI: its SPU address comes first for both parties
        assert prepared.role.keywords["psi_engine"] == "spu"
        assert prepared.role.keywords["spu"] == (hosts["hospital"], hosts["bank"])


def test_ftl_dealer_is_a_third_party_with_no_data(tmp_path: Path) -> None:
    """Under engine = "ss" the dealer role binds with no files; the others get its name."""
    d = _data()
    _write(tmp_path, d)
    three = ("hospital", "bank", "notary")
    ss = {"source": "bank", "dealer": "notary", **MODEL}
    dealer = _prepare_among(three, tmp_path, "notary", ss, {})
    assert "dealer" in dealer.description and "no data" in dealer.description
    assert dealer.role.keywords == {"target": "hospital", "source": "bank",
                                    "plan": dealer.role.keywords["plan"]}
    assert dealer.role.keywords["plan"].engine == "ss"
    a = {"data": "hospital.npy", "ids": "hospital-ids.txt"}
    target = _prepare_among(three, tmp_path, "hospital", ss, a)
    assert target.role.keywords["dealer"] == "notary"
    assert "secret sharing with dealer 'notary'" in target.description
    with pytest.raises(JobError, match="the dealer 'bank' cannot be the source"):
        _prepare_among(three, tmp_path, "hospital", {**ss, "dealer": "bank"}, a)
    with pytest.raises(JobError, match="exactly two data parties; \\[parties\\] names 3"):
        _prepare_among(three, tmp_path, "hospital", {"source": "bank", **MODEL, **HE}, a)
