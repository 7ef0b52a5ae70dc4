"""The record a deployed party writes (``party.json``) is a typed :class:`PartyRecord`.

Two ``islands party`` processes run a secure sum as a user starts them; what each wrote
reads back as a record with the keys and order ``party.json`` has always had, and the
command's last lines print the record's numbers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")

from islands.deploy.launch import PartyRecord
from islands.deploy.local import start_parties, wait_parties, write_federation
from islands.errors import ValidationError

pytestmark = pytest.mark.timeout(300)

KEYS = ["party", "protocol", "federation", "run_id", "description", "connect_seconds",
        "role_seconds", "total_seconds", "bytes_sent", "messages_sent", "result"]


def test_deployed_parties_write_and_print_their_record(tmp_path: Path) -> None:
    np.savetxt(tmp_path / "a.csv", np.array([[1.0, 2.0, 3.0]]), delimiter=",")
    np.savetxt(tmp_path / "b.csv", np.array([[4.0, 5.0, 6.0]]), delimiter=",")
    files = write_federation(tmp_path, "securesum",
                             {"a": {"data": "a.csv"}, "b": {"data": "b.csv"}})
    report = tmp_path / "a-record.json"
    done = wait_parties(start_parties(files, extra_args=["--json", str(report)],
                                      only=["a"]) | start_parties(files, only=["b"]),
                        files, 120)
    assert all(f.returncode == 0 for f in done.values()), {n: f.log for n, f in done.items()}
    records = {}
    for party in ("a", "b"):
        raw = json.loads((tmp_path / "out" / party / "party.json").read_text())
        assert list(raw) == KEYS
        record = PartyRecord.read(tmp_path / "out" / party)
        assert record.to_json() == raw and record.party == party
        assert record.protocol == "securesum" and record.messages_sent > 0
        assert record.total_bytes_sent == sum(raw["bytes_sent"].values()) > 0
        records[party] = record
    assert records["a"].run_id == records["b"].run_id
    # --json writes the same record as party.json
    assert json.loads(report.read_text()) == records["a"].to_json()
    log = " ".join(done["a"].log.split())
    sent = re.search(r"sent (\d+) messages, ([0-9.]+) MB", log)
    assert sent is not None, log
    assert int(sent.group(1)) == records["a"].messages_sent
    assert float(sent.group(2)) == round(records["a"].total_bytes_sent / 1e6, 3)


def test_a_record_missing_a_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "party.json").write_text(json.dumps({"party": "a", "extra": 1}))
    with pytest.raises(ValidationError, match=r"missing \['protocol'.*unknown \['extra'\]"):
        PartyRecord.read(tmp_path)
    (tmp_path / "party.json").write_text("[1, 2]")
    with pytest.raises(ValidationError, match="not a party record"):
        PartyRecord.read(tmp_path)
