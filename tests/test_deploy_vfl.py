"""Vertical FL across processes: PSI on raw ID files, training, then inference, one federation.

The example ``examples/deploy/vfl-psi/run-local.sh`` is run as a user runs it (four
``islands party`` processes over loopback with mutual TLS), and its model and predictions
are compared with the in-process estimator's on the same files.
"""

from __future__ import annotations

import csv
import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from islands.deploy.config import load_party_config
from islands.deploy.local import start_parties, wait_parties, write_federation
from islands.deploy.protocols import prepare
from islands.errors import JobError
from islands.protocols import load_table, read_ids, read_labels
from islands.vfl import VerticalLogisticRegression
from islands.vfl.config import draw_seed

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "deploy" / "vfl-psi"


def _free_base(count: int = 4) -> int:
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000)
        sockets = []
        try:
            for i in range(1, count + 1):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no run of free loopback ports")


def test_the_example_aligns_trains_and_infers_as_the_estimator_does(tmp_path: Path) -> None:
    random_state = 5
    seed = draw_seed(random_state, "test")
    env = {**os.environ, "PYTHON": sys.executable, "BASE_PORT": str(_free_base()),
           "KEY_BITS": "1024", "SEED": str(seed), "DEADLINE": "400",
           "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run(["bash", str(EXAMPLE / "run-local.sh"), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "25 of 25 predictions" in run.stdout or "predictions match" in run.stdout

    # the same organisations' files, in one process
    def rows(name: str) -> tuple[np.ndarray, list[str]]:
        return (load_table(tmp_path / f"{name}.csv", what=name),
                read_ids(tmp_path / f"{name}-ids.txt", what=name))

    (x_b, ids_b), (x_lab, ids_lab), (x_clinic, ids_clinic) = map(
        rows, ("hospital", "lab", "clinic"))
    labels = read_labels(tmp_path / "hospital-labels.txt", what="labels")
    known = [i for i, v in enumerate(labels) if v is not None]
    est = VerticalLogisticRegression(epochs=10, batch_size=64, key_bits=1024, insecure_keys=True,
                                     random_state=random_state)
    est.fit([x_lab, x_clinic], x_b[known], [labels[i] for i in known],
            ids_a=[ids_lab, ids_clinic], ids_b=[ids_b[i] for i in known])
    assert est.plan_.seed == seed

    out = tmp_path / "out"
    np.testing.assert_array_equal(np.load(out / "hospital" / "theta.npy"),
                                  np.append(est.coef_b_, est.intercept_))
    np.testing.assert_array_equal(np.load(out / "lab" / "theta.npy"), est.coef_a_[0])
    np.testing.assert_array_equal(np.load(out / "clinic" / "theta.npy"), est.coef_a_[1])
    aligned = (out / "hospital" / "aligned-ids.txt").read_text().split()
    assert aligned == est.ids_ and len(aligned) == 320
    coordinator = json.loads((out / "coordinator" / "result.json").read_text())
    assert coordinator["epoch_losses"] == est.loss_history_

    # inference: the federation's decision values are the estimator's on the same rows
    with open(out / "hospital" / "predictions.csv", encoding="utf-8") as f:
        predicted = list(csv.DictReader(f))
    asked = [r["id"] for r in predicted]
    assert asked == read_ids(tmp_path / "hospital-predict.txt", what="predict")

    def pick(x: np.ndarray, ids: list[str]) -> np.ndarray:
        where = {v: i for i, v in enumerate(ids)}
        return x[[where[v] for v in asked]]

    z = est.decision_function([pick(x_lab, ids_lab), pick(x_clinic, ids_clinic)],
                              pick(x_b, ids_b))
    np.testing.assert_allclose([float(r["decision"]) for r in predicted], z, rtol=0,
                               atol=1e-12)
    assert [r["label"] for r in predicted] == list(est.predict(
        [pick(x_lab, ids_lab), pick(x_clinic, ids_clinic)], pick(x_b, ids_b)))


def _federation(tmp_path: Path, options: dict[str, object], *, ids: bool = True,
                **party_keys: dict[str, str]) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    for name in ("b", "a"):
        np.savetxt(tmp_path / f"{name}.csv", rng.normal(size=(30, 3)), delimiter=",")
        (tmp_path / f"{name}-ids.txt").write_text("".join(f"id{i}\n" for i in range(30)))
    (tmp_path / "labels.txt").write_text("".join(f"{i % 2}\n" for i in range(30)))
    parties: dict[str, dict[str, str]] = {
        "c": {}, "b": {"data": "b.csv", "labels": "labels.txt"}, "a": {"data": "a.csv"}}
    if ids:
        parties["a"]["ids"], parties["b"]["ids"] = "a-ids.txt", "b-ids.txt"
    for name, keys in party_keys.items():
        parties[name] = {**parties[name], **keys}
    return write_federation(tmp_path, "vfl", parties, tls=False,
                            options={"coordinator": "c", "active": "b", **options})


@pytest.mark.parametrize(("options", "keys", "party", "message"), [
    ({"psi": True, "normalize": "NFX"}, {}, "a", "'normalize' must be one of"),
    ({"normalize": "NFC"}, {}, "a", "'normalize' applies only with psi = true"),
    ({"psi": True, "max_peer_ratio": 0}, {}, "b", "'max_peer_ratio' must be"),
    ({"psi": True, "key_bits": 1100}, {}, "c", "'key_bits' must be an int in"),
    # the 2048-bit floor, for every party: a 1024-bit key needs insecure_keys = true
    *[({"key_bits": 1024}, {}, p, r"'key_bits' must be an int in \[2048, 16384\] and a "
       r"multiple of 256 \(from 1024 only with insecure_keys, for tests\); got 1024")
      for p in ("a", "b", "c")],
    ({"psi": True}, {"b": {"predict": "a.csv"}}, "b", "predict file names IDs"),
    ({}, {"a": {"ids": "a-ids.txt"}}, "a", "'ids' and 'predict' need psi = true"),
    ({}, {"b": {"predict": "b-ids.txt"}}, "b", "'ids' and 'predict' need psi = true"),
    ({"psi": True}, {"a": {"ids": "labels.txt"}}, "a", "repeat|more than once|twice"),
])
def test_bad_vfl_settings_are_named_before_connecting(
        tmp_path: Path, options: dict[str, object], keys: dict[str, dict[str, str]],
        party: str, message: str) -> None:
    files = _federation(tmp_path, options, ids=options.get("psi") is True, **keys)
    with pytest.raises(JobError, match=message):
        prepare(load_party_config(files[party]))


def test_unlabelled_rows_need_psi(tmp_path: Path) -> None:
    files = _federation(tmp_path, {}, ids=False)
    (tmp_path / "labels.txt").write_text("".join("\n" if i == 3 else f"{i % 2}\n"
                                                 for i in range(30)))
    with pytest.raises(JobError, match="every row needs a label"):
        prepare(load_party_config(files["b"]))


def test_a_federation_without_ids_still_trains_on_aligned_rows(tmp_path: Path) -> None:
    files = _federation(tmp_path, {"epochs": 1, "batch_size": 10, "key_bits": 1024,
                                   "insecure_keys": True, "he": "paillier"}, ids=False)
    procs = start_parties(files, extra_args=["--insecure"])
    done = wait_parties(procs, files, timeout=300)
    assert all(f.returncode == 0 for f in done.values()), {k: f.log[-2000:]
                                                           for k, f in done.items()}
    summary = json.loads((tmp_path / "out" / "b" / "result.json").read_text())
    assert summary["role"] == "active" and "aligned_rows" not in summary
    # the opt-in to 1024-bit keys: each party warned and its result says so
    for name, party in done.items():
        assert "InsecureKeyWarning: party" in party.log, name
        summary = json.loads((tmp_path / "out" / name / "result.json").read_text())
        assert summary["security_warning"].startswith(
            "1024-bit keys are below islands' 2048-bit floor"), name


def test_a_byte_order_mark_in_a_labels_or_predict_file_is_not_part_of_its_first_line(
        tmp_path: Path) -> None:
    """Text files saved by a Windows editor start with a byte-order mark: the first label
    is "1", not "\\ufeff1" (a third class, or a label that is not a number)."""
    labels, predict = tmp_path / "labels.txt", tmp_path / "predict.txt"
    labels.write_text("1\n0\n\n1\n", encoding="utf-8-sig")
    predict.write_text("p1\np2\n", encoding="utf-8-sig")
    assert read_labels(labels, what="labels") == ["1", "0", None, "1"]
    assert read_ids(predict, what="predict") == ["p1", "p2"]
