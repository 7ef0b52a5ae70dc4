"""PSI and secure sum deployed: one ``islands party`` process per party, loopback, mutual TLS.

Each federation is written with :mod:`islands.deploy.local` and every party runs as its
own operating-system process, as a user starts them; the results must equal the same
protocol run in one process (:func:`islands.psi.align`, :func:`islands.securesum.secure_sum`).
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")

from islands.deploy.config import load_party_config
from islands.deploy.launch import run_configured
from islands.deploy.local import Finished, start_parties, wait_parties, write_federation
from islands.errors import JobError
from islands.psi import align
from islands.securesum import secure_sum

pytestmark = pytest.mark.timeout(300)


def run(files: dict[str, Path], only: list[str] | None = None,
        timeout: float = 120) -> dict[str, Finished]:
    return wait_parties(start_parties(files, only=only), files, timeout)


def assert_ok(done: dict[str, Finished]) -> None:
    bad = {n: f.log[-2000:] for n, f in done.items() if f.returncode != 0}
    assert not bad, bad


def said(done: dict[str, Finished], party: str) -> str:
    """A party's log with the console's line wrapping undone."""
    return " ".join(done[party].log.split())


def result(folder: Path, party: str) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((folder / "out" / party / "result.json").read_text())
    return summary


# --------------------------------------------------------------------------- securesum
def test_secure_sum_across_processes_equals_in_process(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    values = {name: rng.normal(0, 50, 6) for name in ("a", "b", "c", "d")}
    # four ways a party may hold its vector: one CSV row, one NPY column, one CSV column,
    # a 1-D NPY array (what np.save(path, x) writes)
    np.savetxt(tmp_path / "a.csv", values["a"][None, :], delimiter=",", fmt="%.17g")
    np.save(tmp_path / "b.npy", values["b"][:, None])
    np.savetxt(tmp_path / "c.csv", values["c"][:, None], delimiter=",", fmt="%.17g")
    np.save(tmp_path / "d.npy", values["d"])
    files = write_federation(tmp_path, "securesum",
                             {"a": {"data": "a.csv"}, "b": {"data": "b.npy"},
                              "c": {"data": "c.csv"}, "d": {"data": "d.npy"}},
                             options={"frac_bits": 20})
    assert_ok(run(files))
    ref = secure_sum(values, frac_bits=20).total
    for party in values:
        # fixed point is exact in the ring: every party decodes the same total as in process
        np.testing.assert_array_equal(np.load(tmp_path / "out" / party / "total.npy"), ref)
        # the summary says what was summed, never the party's own values
        assert result(tmp_path, party) == {"role": "party", "parties": 4, "shape": [6],
                                           "frac_bits": 20}


def test_secure_sum_refuses_bad_data_before_connecting(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("1.0,nan,3.0\n", encoding="utf-8")
    (tmp_path / "b.csv").write_text("1.0,2.0,3.0\n", encoding="utf-8")
    files = write_federation(tmp_path, "securesum",
                             {"a": {"data": "a.csv"}, "b": {"data": "b.csv"}},
                             settings={"connect_timeout": 60.0})
    # party a alone: an error after connecting would wait for b for a minute; a party
    # that refuses its own input only spends REFUSAL_WINDOW telling its peers
    done = run(files, only=["a"], timeout=50)
    assert done["a"].returncode != 0
    assert "'data' file" in said(done, "a") and "a.csv" in said(done, "a")
    assert "finite" in said(done, "a")
    assert not (tmp_path / "out" / "a" / "result.json").exists()


def _listening(address: str) -> bool:
    import socket

    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, int(port))) == 0


def _b_joins_last(folder: Path, files: dict[str, Path]) -> dict[str, Any]:
    """Start a and c, wait until both listen, then start b; return every party's end."""
    import time

    from islands.deploy.config import load_federation

    parties = load_federation(folder / "federation.toml").parties
    procs = start_parties(files, only=["a", "c"])
    deadline = time.monotonic() + 100
    while not (_listening(parties["a"]) and _listening(parties["c"])):
        assert all(p.poll() is None for p in procs.values()), "a or c ended early"
        assert time.monotonic() < deadline, "a and c never listened"
        time.sleep(0.1)
    procs.update(start_parties(files, only=["b"]))
    return wait_parties(procs, files, 150)


def test_a_party_that_refuses_its_input_tells_its_peers(tmp_path: Path) -> None:
    # b's data holds NaN: b refuses it before its run, and a and c, already waiting
    # for b, must stop with an error naming b and the kind of its error (never its
    # details), not wait their whole connect_timeout for it


    (tmp_path / "ok.csv").write_text("1.0,2.0,3.0\n", encoding="utf-8")
    (tmp_path / "b.csv").write_text("1.0,nan,3.0\n", encoding="utf-8")
    files = write_federation(tmp_path, "securesum",
                             {"a": {"data": "ok.csv"}, "b": {"data": "b.csv"},
                              "c": {"data": "ok.csv"}},
                             settings={"connect_timeout": 100.0})
    done = _b_joins_last(tmp_path, files)
    assert done["b"].returncode != 0 and "finite" in said(done, "b")
    for party in ("a", "c"):
        text = said(done, party)
        assert done[party].returncode != 0, text
        assert "party 'b' cannot run: it refused its own input or settings" in text, text
        assert "could not reach" not in text, text
        assert "finite" not in text and "b.csv" not in text, text  # b's details stay at b


def test_secure_sum_section_is_the_configs(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("1.0\n", encoding="utf-8")
    files = write_federation(tmp_path, "securesum", {"a": {"data": "a.csv"},
                                                     "b": {"data": "a.csv"}},
                             options={"frac_bits": 60})
    with pytest.raises(JobError, match=r"\[securesum\]: 'frac_bits' must be an int in "
                       r"\[0, 52\]; got 60"):
        run_configured(load_party_config(files["a"]))
    fed = tmp_path / "federation.toml"
    fed.write_text(fed.read_text().replace("frac_bits = 60", "timeout = 5.0"))
    with pytest.raises(JobError, match=r"\[securesum\]: 'timeout' is the federation file's "
                       "top-level setting"):
        run_configured(load_party_config(files["a"]))


def test_parties_with_different_shapes_stop_before_any_share(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("1.0,2.0,3.0\n", encoding="utf-8")
    (tmp_path / "b.csv").write_text("1.0,2.0\n", encoding="utf-8")
    files = write_federation(tmp_path, "securesum",
                             {"a": {"data": "a.csv"}, "b": {"data": "b.csv"}})
    done = run(files)
    for party, other in (("a", "b"), ("b", "a")):
        assert done[party].returncode != 0
        assert f"party {other!r} holds shape" in said(done, party)


# --------------------------------------------------------------------------- psi
def write_ids(path: Path, ids: list[str]) -> None:
    path.write_text("".join(f"{i}\n" for i in ids), encoding="utf-8")


def test_psi_across_processes_equals_in_process(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    shared = [f"id{k:04d}" for k in rng.choice(1000, 40, replace=False)]
    ids_a = shared[:30] + [f"a{k}" for k in range(25)] + ["Jos\u00e9"]
    ids_b = shared[10:] + [f"b{k}" for k in range(12)] + [unicodedata.normalize("NFD", "Jos\u00e9")]
    rng.shuffle(ids_a)
    rng.shuffle(ids_b)
    data_a = rng.normal(size=(len(ids_a), 3))
    write_ids(tmp_path / "a.txt", ids_a)
    write_ids(tmp_path / "b.txt", ids_b)
    np.save(tmp_path / "a.npy", data_a)
    files = write_federation(tmp_path, "psi", {"hospital": {"ids": "a.txt", "data": "a.npy"},
                                               "bank": {"ids": "b.txt"}},
                             options={"initiator": "hospital"})
    assert_ok(run(files))
    ref_a, ref_b = align(ids_a, ids_b)
    out = tmp_path / "out"
    # each party gets the common IDs in the one aligned order, in its own spelling
    common_a = (out / "hospital" / "common.txt").read_text(encoding="utf-8").splitlines()
    common_b = (out / "bank" / "common.txt").read_text(encoding="utf-8").splitlines()
    assert common_a == ref_a.ids and common_b == ref_b.ids
    assert "Jos\u00e9" in common_a and unicodedata.normalize("NFD", "Jos\u00e9") in common_b
    assert len(common_a) == 21  # shared[10:30] and José
    np.testing.assert_array_equal(np.load(out / "hospital" / "rows.npy"), ref_a.rows)
    np.testing.assert_array_equal(np.load(out / "bank" / "rows.npy"), ref_b.rows)
    np.testing.assert_array_equal(np.load(out / "hospital" / "aligned.npy"), data_a[ref_a.rows])
    assert not (out / "bank" / "aligned.npy").exists()
    assert result(tmp_path, "hospital") == {"role": "initiator", "n_own": len(ids_a),
                                            "n_peer": len(ids_b), "n_common": 21}
    assert result(tmp_path, "bank") == {"role": "responder", "n_own": len(ids_b),
                                        "n_peer": len(ids_a), "n_common": 21}


def test_psi_refuses_data_that_does_not_match_its_ids_before_connecting(
        tmp_path: Path) -> None:
    write_ids(tmp_path / "a.txt", ["x", "y", "z"])
    write_ids(tmp_path / "b.txt", ["x", "y"])
    np.save(tmp_path / "a.npy", np.zeros((2, 4)))
    files = write_federation(tmp_path, "psi", {"a": {"ids": "a.txt", "data": "a.npy"},
                                               "b": {"ids": "b.txt"}},
                             options={"initiator": "b"}, settings={"connect_timeout": 60.0})
    done = run(files, only=["a"], timeout=50)
    assert done["a"].returncode != 0
    assert "'data' file" in said(done, "a") and "holds 2 rows" in said(done, "a")
    assert "'ids' file" in said(done, "a") and "holds 3 IDs" in said(done, "a")


@pytest.mark.parametrize(("change", "message"), [
    ({"initiator": "c"}, r"'initiator' must name a party of \[parties\]; got 'c'"),
    ({"max_peer_ratio": -1.0}, r"'max_peer_ratio' must be a number > 0 and finite, or None"),
    ({"normalize": "nfc"}, r"'normalize' must be one of 'NFC'"),
    ({"workers": 2}, r"unknown key\(s\) \['workers'\]"),
    ({"timeout": 5.0}, r"'timeout' is the federation file's top-level setting"),
    ({"engine": "spu"}, r"engine = 'spu' needs a \[psi.spu\] table"),
    ({"engine": "ecdh"}, r"'engine' must be 'dh' or 'spu'"),
])
def test_psi_section_is_checked_before_connecting(tmp_path: Path, change: dict[str, Any],
                                                  message: str) -> None:
    write_ids(tmp_path / "a.txt", ["x"])
    files = write_federation(tmp_path, "psi", {"a": {"ids": "a.txt"}, "b": {"ids": "a.txt"}},
                             options={"initiator": "a", **change})
    with pytest.raises(JobError, match=r"\[psi\]: " + message):
        run_configured(load_party_config(files["b"]))


def test_psi_ids_are_checked_before_connecting(tmp_path: Path) -> None:
    write_ids(tmp_path / "a.txt", ["x", "y", "x"])
    files = write_federation(tmp_path, "psi", {"a": {"ids": "a.txt"}, "b": {}},
                             options={"initiator": "a", "normalize": "none"})
    with pytest.raises(JobError, match=r"'ids' file .*a\.txt: .* repeats the ID 'x'"):
        run_configured(load_party_config(files["a"]))
    with pytest.raises(JobError, match="party 'b' needs its 'ids' file for protocol 'psi'"):
        run_configured(load_party_config(files["b"]))


def _expire_certificate(folder: Path, name: str) -> None:
    """Replace party ``name``'s certificate by one the same CA signed, expired yesterday."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    ca = x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
    key = serialization.load_pem_private_key((folder / f"{name}.key").read_bytes(), None)
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.subject).public_key(key.public_key())  # type: ignore[arg-type]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=30))
            .not_valid_after(now - dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    (folder / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def test_a_party_that_refuses_its_certificate_is_named_by_its_peers(tmp_path: Path) -> None:
    # b's certificate has expired: b refuses it and cannot authenticate any notice, so it
    # serves it for a moment; a and c, already waiting for b, meet it at their hello
    # and stop naming b and its certificate, not after their whole connect_timeout


    (tmp_path / "ok.csv").write_text("1.0,2.0,3.0\n", encoding="utf-8")
    files = write_federation(tmp_path, "securesum",
                             {n: {"data": "ok.csv"} for n in ("a", "b", "c")},
                             settings={"connect_timeout": 100.0})
    _expire_certificate(tmp_path / "certs", "b")
    done = _b_joins_last(tmp_path, files)
    assert done["b"].returncode != 0 and "not now" in said(done, "b"), said(done, "b")
    for party in ("a", "c"):
        text = said(done, party)
        assert done[party].returncode != 0, text
        assert "cannot run with 'b': the certificate presented at" in text, text
        assert "could not reach" not in text, text


def test_a_byte_order_mark_in_an_ids_file_is_not_part_of_the_first_id(tmp_path: Path) -> None:
    """A party saves its IDs from a Windows editor (UTF-8 with a byte-order mark) and its
    first ID is one both hold: PSI finds it (before, the mark stayed part of that ID and
    PSI silently missed it)."""
    (tmp_path / "a.txt").write_text("id1\nid2\nid3\n", encoding="utf-8-sig")
    write_ids(tmp_path / "b.txt", ["id3", "id1", "b9"])
    files = write_federation(tmp_path, "psi", {"hospital": {"ids": "a.txt"},
                                               "bank": {"ids": "b.txt"}},
                             options={"initiator": "hospital"})
    assert_ok(run(files))
    for party in ("hospital", "bank"):
        common = (tmp_path / "out" / party / "common.txt").read_text(encoding="utf-8")
        assert sorted(common.splitlines()) == ["id1", "id3"], party
        assert result(tmp_path, party)["n_common"] == 2


def test_a_byte_order_mark_inside_an_ids_file_is_named(tmp_path: Path) -> None:
    """Two files joined together leave the second one's mark at the start of a line: an
    error naming the line, before connecting (the mark would silently miss that ID)."""
    (tmp_path / "a.txt").write_bytes("x\ny\n".encode("utf-8-sig") * 2)
    files = write_federation(tmp_path, "psi", {"a": {"ids": "a.txt"}, "b": {}},
                             options={"initiator": "a"})
    with pytest.raises(JobError, match=r"a\.txt\): line 3 starts with a byte-order mark"):
        run_configured(load_party_config(files["a"]))
