"""PSI with engine='spu' between organisations: `islands party` processes and the SPU link.

Each party's SPU presents a certificate made for the run and accepts only the one its
peer sent over islands' mutually authenticated channel (islands.psi.spu_engine). The
runs through the real engine need SPU's environment (``make spu``) and are skipped,
saying so, where it is missing; the settings checks run without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography import x509

import islands.psi.protocol as psi_protocol
import islands.psi.spu_engine as spu_engine
from islands.deploy.certs import make_certificates
from islands.deploy.config import load_party_config
from islands.deploy.launch import run_configured
from islands.deploy.local import start_parties, wait_parties, write_federation
from islands.deploy.protocols import prepare
from islands.errors import JobError, ProtocolError, ValidationError
from islands.psi import align, initiator, responder
from islands.psi.spu_engine import RunCertificate, free_loopback_hosts
from islands.runtime import run_local
from islands.runtime.tls import TlsFiles
from islands.runtime.transcript import Transcript
from spu_env import needs_spu

pytestmark = pytest.mark.timeout(300)


def _write_ids(path: Path, ids: list[str]) -> None:
    path.write_text("".join(f"{i}\n" for i in ids), encoding="utf-8")


def _federation(tmp_path: Path, ids_a: list[str], ids_b: list[str],
                **options: Any) -> dict[str, Path]:
    _write_ids(tmp_path / "a.txt", ids_a)
    _write_ids(tmp_path / "b.txt", ids_b)
    spu = dict(zip(("hospital", "bank"), free_loopback_hosts(2), strict=True))
    return write_federation(tmp_path, "psi", {"hospital": {"ids": "a.txt"},
                                              "bank": {"ids": "b.txt"}},
                            options={"initiator": "hospital", "engine": "spu", "spu": spu,
                                     **options},
                            settings={"timeout": 120})


@needs_spu
def test_spu_psi_between_two_party_processes_equals_dh(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    universe = [f"id{k:05d}" for k in rng.choice(100_000, 3000, replace=False)]
    ids_a, ids_b = universe[:1200], universe[900:2500]
    files = _federation(tmp_path, ids_a, ids_b)
    done = wait_parties(start_parties(files), files, 200)
    assert all(f.returncode == 0 for f in done.values()), {n: f.log[-2000:]
                                                           for n, f in done.items()}
    out = tmp_path / "out"
    common_a = (out / "hospital" / "common.txt").read_text(encoding="utf-8").splitlines()
    common_b = (out / "bank" / "common.txt").read_text(encoding="utf-8").splitlines()
    ref_a, ref_b = align(ids_a, ids_b)  # engine='dh', in this process
    assert common_a == common_b == ref_a.ids == sorted(set(ids_a) & set(ids_b))
    assert len(common_a) == 300
    np.testing.assert_array_equal(np.load(out / "hospital" / "rows.npy"), ref_a.rows)
    np.testing.assert_array_equal(np.load(out / "bank" / "rows.npy"), ref_b.rows)
    assert "(SPU RR22)" in (out / "hospital" / "party.json").read_text()


def _run_pair(hosts_a: tuple[str, str], hosts_b: tuple[str, str], timeout: float,
              log: Transcript | None = None, **limits: Any) -> dict[str, Any]:
    """Run the two roles in one process; return each party's result or exception."""
    ids_a = [f"u{i}" for i in range(200)]
    ids_b = [f"u{i}" for i in range(150, 400)]

    def catching(role: Any, **kw: Any) -> Any:
        def run(party: Any) -> Any:
            try:
                return role(party, engine="spu", **kw)
            except Exception as exc:  # the test looks at each party's own error
                return exc
        return run

    return run_local({"a": catching(initiator, peer="b", ids=ids_a, spu=hosts_a, **limits),
                      "b": catching(responder, peer="a", ids=ids_b, spu=hosts_b)},
                     timeout=timeout, transcript=log).results


@needs_spu
def test_a_party_whose_spu_presents_another_certificate_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # b sends its run certificate over islands' channel, but its SPU presents another
    # certificate: one the federation's CA issued (to "c"), which a link trusting the
    # federation's CA would accept
    fed = make_certificates(["c"], tmp_path / "fed")
    honest = spu_engine.pinned_tls

    def deviating(folder: Path, own: RunCertificate, peer_cert: bytes) -> TlsFiles:
        files = honest(folder, own, peer_cert)
        if x509.load_pem_x509_certificate(own.cert).subject.rfc4514_string() == "CN=b":
            return TlsFiles(files.ca, fed.parties["c"].cert, fed.parties["c"].key)
        return files

    monkeypatch.setattr(psi_protocol, "pinned_tls", deviating)
    a, b = free_loopback_hosts(2)
    results = _run_pair((a, b), (a, b), timeout=12)
    refused = results["a"]
    assert isinstance(refused, ProtocolError) and refused.step == "spu-tls"
    assert "the SPU of party 'b' presented a certificate this party's SPU does not accept" \
        in str(refused)
    assert isinstance(results["b"], ProtocolError)  # b learns nothing either


def test_a_mismatched_spu_setting_is_refused_naming_it_before_spu_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISLANDS_SPU_PYTHON", "/nonexistent/python")  # SPU never starts
    hosts = free_loopback_hosts(3)
    log = Transcript()
    results = _run_pair((hosts[0], hosts[1]), (hosts[0], hosts[2]), timeout=20, log=log)
    for party, peer in (("a", "b"), ("b", "a")):
        err = results[party]
        assert isinstance(err, ValidationError), err
        assert f"party {party!r} runs engine='spu' with spu (SPU addresses)" in str(err)
        assert f"but party {peer!r} with" in str(err)
    assert [m.tag for m in log.records] == ["hello", "hello"]


def test_a_peer_above_the_limit_is_refused_before_any_spu_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISLANDS_SPU_PYTHON", "/nonexistent/python")
    a, b = free_loopback_hosts(2)
    log = Transcript()
    results = _run_pair((a, b), (a, b), timeout=5, log=log, max_peer_size=100)
    err = results["a"]
    assert isinstance(err, ProtocolError) and "PSI party 'a' refuses party 'b'" in str(err)
    assert "announced 250 IDs" in str(err)
    assert [(m.sender, m.tag) for m in log.records] == [("a", "hello"), ("b", "hello")]


@pytest.mark.parametrize(("change", "message"), [
    ({"engine": "spu"}, r"engine = 'spu' needs a \[psi.spu\] table"),
    ({"engine": "spu", "spu": {"hospital": "127.0.0.1:1"}},
     r"engine = 'spu' needs a \[psi.spu\] table .* for exactly \['hospital', 'bank'\]"),
    ({"engine": "spu", "spu": {"hospital": "127.0.0.1:1", "bank": "nowhere"}},
     r"\[psi.spu\] bank must be 'host:port'"),
    ({"engine": "spu", "spu": {"hospital": "127.0.0.1:1", "bank": "127.0.0.1:1"}},
     r"the parties' SPU addresses must differ"),
    ({"engine": "dh", "spu": {"hospital": "127.0.0.1:1", "bank": "127.0.0.1:2"}},
     r"\[psi.spu\] applies only with engine = 'spu'"),
])
def test_the_spu_section_is_checked_before_connecting(tmp_path: Path, change: dict[str, Any],
                                                      message: str) -> None:
    _write_ids(tmp_path / "a.txt", ["x"])
    files = write_federation(tmp_path, "psi", {"hospital": {"ids": "a.txt"},
                                               "bank": {"ids": "a.txt"}},
                             options={"initiator": "hospital", **change})
    with pytest.raises(JobError, match=message):
        run_configured(load_party_config(files["hospital"]))


def _vfl_federation(folder: Path, engine: str) -> dict[str, Path]:
    """A vertical federation (coordinator c, active b, passives a1 and a2) aligning by PSI."""
    rng = np.random.default_rng(3)
    folder.mkdir()
    keys: dict[str, dict[str, str]] = {"c": {}}
    for name, rows in (("b", range(0, 60)), ("a1", range(10, 80)), ("a2", range(5, 55))):
        order = rng.permutation(list(rows))
        np.savetxt(folder / f"{name}.csv", rng.normal(size=(order.size, 2)), delimiter=",")
        (folder / f"{name}-ids.txt").write_text("".join(f"id{i}\n" for i in order))
        keys[name] = {"data": f"{name}.csv", "ids": f"{name}-ids.txt"}
    (folder / "labels.txt").write_text("".join(f"{i % 2}\n" for i in range(60)))
    keys["b"]["labels"] = "labels.txt"
    options: dict[str, Any] = {"coordinator": "c", "active": "b", "psi": True,
                               "model": "logistic", "epochs": 2, "key_bits": 1024,
                               "insecure_keys": True}
    if engine == "spu":
        options.update(psi_engine="spu", spu=dict(zip(("b", "a1", "a2"),
                                                      free_loopback_hosts(3), strict=True)))
    return write_federation(folder, "vfl", keys, options=options, settings={"timeout": 120})


@needs_spu
def test_vertical_federation_aligns_with_spu_as_with_dh(tmp_path: Path) -> None:
    outs = {}
    for engine in ("dh", "spu"):
        files = _vfl_federation(tmp_path / engine, engine)
        done = wait_parties(start_parties(files), files, 240)
        assert all(f.returncode == 0 for f in done.values()), {n: f.log[-2000:]
                                                               for n, f in done.items()}
        outs[engine] = tmp_path / engine / "out"
    for party in ("b", "a1"):
        assert "PSI on SPU RR22" in (outs["spu"] / party / "party.json").read_text()
        assert "PSI on SPU RR22" not in (outs["dh"] / party / "party.json").read_text()
    for party in ("b", "a1", "a2"):
        ids = {e: (outs[e] / party / "aligned-ids.txt").read_text().splitlines()
               for e in outs}
        assert ids["spu"] == ids["dh"]
        assert sorted(ids["dh"]) == sorted(f"id{i}" for i in range(10, 55))
        np.testing.assert_array_equal(np.load(outs["spu"] / party / "theta.npy"),
                                      np.load(outs["dh"] / party / "theta.npy"))


@pytest.mark.parametrize(("change", "message"), [
    ({"psi_engine": "spu"}, r"psi_engine = 'spu' needs a \[vfl.spu\] table"),
    ({"psi_engine": "ecdh"}, r"'psi_engine' must be 'dh' or 'spu'"),
    ({"spu": {"b": "127.0.0.1:1", "a1": "127.0.0.1:2", "a2": "127.0.0.1:3"}},
     r"\[vfl.spu\] applies only with psi_engine = 'spu'"),
])
def test_the_vertical_spu_settings_are_checked_before_connecting(
        tmp_path: Path, change: dict[str, Any], message: str) -> None:
    files = _vfl_federation(tmp_path / "f", "dh")
    text = (tmp_path / "f" / "federation.toml").read_text()
    extra = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in change.items()
                    if not isinstance(v, dict))
    tables = "".join(f"\n[vfl.{k}]\n" + "".join(f'{n} = "{a}"\n' for n, a in v.items())
                     for k, v in change.items() if isinstance(v, dict))
    (tmp_path / "f" / "federation.toml").write_text(
        text.replace("[vfl]\n", "[vfl]\n" + extra) + tables)
    with pytest.raises(JobError, match=message):
        prepare(load_party_config(files["b"]))
