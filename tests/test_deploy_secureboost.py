"""SecureBoost across processes: PSI on raw ID files, training, inference, one federation.

The example ``examples/deploy/secureboost-psi/run-local.sh`` is run as a user runs it
(three ``islands party`` processes over loopback with mutual TLS, data with missing
cells), and its predictions are compared with the in-process estimator's on the same
files: the same trees, so the same probabilities.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from islands.crypto import heu
from islands.protocols import load_table, read_ids, read_labels
from islands.vfl import SecureBoostClassifier
from test_deploy_vfl import _free_base

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "deploy" / "secureboost-psi"

pytestmark = pytest.mark.skipif(not heu.available(), reason="sf-heu is not importable here")


def test_the_example_trains_and_scores_as_the_estimator_does(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "BASE_PORT": str(_free_base(3)),
           "KEY_BITS": "1024", "DEADLINE": "400", "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run(["bash", str(EXAMPLE / "run-local.sh"), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "of 40 predictions match" in run.stdout

    def rows(name: str) -> tuple[np.ndarray, list[str]]:
        return (load_table(tmp_path / f"{name}.csv", what=name, missing=True),
                read_ids(tmp_path / f"{name}-ids.txt", what=name))

    (x_bank, ids_bank), (x_telco, ids_telco), (x_shop, ids_shop) = map(
        rows, ("bank", "telco", "retailer"))
    assert np.isnan(x_telco).any()  # the missing cells travelled as missing values
    labels = read_labels(tmp_path / "bank-labels.txt", what="labels")
    known = [i for i, v in enumerate(labels) if v is not None]
    est = SecureBoostClassifier(n_estimators=10, max_depth=3, key_bits=1024,
                                insecure_keys=True, random_state=0)
    est.fit([x_telco, x_shop], x_bank[known], [labels[i] for i in known],
            ids_a=[ids_telco, ids_shop], ids_b=[ids_bank[i] for i in known])

    out = tmp_path / "out"
    with open(out / "bank" / "predictions.csv", encoding="utf-8") as handle:
        predicted = list(csv.DictReader(handle))
    asked = [r["id"] for r in predicted]
    pick = {name: [ids.index(v) for v in asked]
            for name, ids in (("bank", ids_bank), ("telco", ids_telco), ("retailer", ids_shop))}
    proba = est.predict_proba([x_telco[pick["telco"]], x_shop[pick["retailer"]]],
                              x_bank[pick["bank"]])
    column = list(est.classes_).index("repaid")
    assert [float(r["p_repaid"]) for r in predicted] == proba[:, column].tolist()
    bank = json.loads((out / "bank" / "party-bank.json").read_text())
    telco = json.loads((out / "telco" / "party-telco.json").read_text())
    assert bank["classes"] == ["default", "repaid"] and telco["role"] == "passive"
    # the bank's part names a passive split by record only; the threshold is the telco's
    assert "records" in telco and all(len(r) == 3 for r in telco["records"])
    assert all("threshold" not in json.dumps(t) for t in bank["model"]["trees"])


def _federation(tmp_path: Path, options: dict[str, object], labels: list[str] | None = None,
                **party_keys: dict[str, str]) -> dict[str, Path]:
    from islands.deploy.local import write_federation

    rng = np.random.default_rng(0)
    for name in ("bank", "shop"):
        rows = rng.normal(size=(30, 3))
        text = "x1,x2,x3\n" + "\n".join(
            ",".join("" if (i + j) % 7 == 0 else f"{v:.4f}" for j, v in enumerate(row))
            for i, row in enumerate(rows))
        (tmp_path / f"{name}.csv").write_text(text + "\n")
        (tmp_path / f"{name}-ids.txt").write_text("".join(f"id{i}\n" for i in range(30)))
    (tmp_path / "labels.txt").write_text("".join(
        f"{v}\n" for v in (labels or [f"{i % 2}" for i in range(30)])))
    parties: dict[str, dict[str, str]] = {"bank": {"data": "bank.csv", "labels": "labels.txt"},
                                          "shop": {"data": "shop.csv"}}
    for name, keys in party_keys.items():
        parties[name] = {**parties[name], **keys}
    return write_federation(tmp_path, "secureboost", parties, tls=False,
                            options={"active": "bank", **options})


def test_a_party_reads_empty_cells_as_missing_values(tmp_path: Path) -> None:
    from islands.deploy.config import load_party_config
    from islands.deploy.protocols import prepare

    files = _federation(tmp_path, {"key_bits": 1024, "insecure_keys": True})
    prepared = prepare(load_party_config(files["shop"]))
    assert "3 columns" in prepared.description
    X = load_table(tmp_path / "shop.csv", what="shop", missing=True)
    assert X.shape == (30, 3) and int(np.isnan(X).sum()) == sum(
        (i + j) % 7 == 0 for i in range(30) for j in range(3))


@pytest.mark.parametrize(("options", "labels", "party", "message"), [
    ({"objective": "multiclass"}, None, "bank", "needs at least 3 classes"),
    ({"objective": "binary"}, [str(i % 3) for i in range(30)], "bank", "needs exactly 2"),
    ({"objective": "regression"}, ["yes"] * 30, "bank", "numeric labels"),
    ({}, ["" if i == 4 else "1" for i in range(30)], "bank", "every row needs a label"),
    ({"max_bins": 500}, None, "shop", "'max_bins' must be"),
    ({"key_bits": 1024}, None, "shop", "'key_bits' must be"),
    ({"he": "rsa"}, None, "bank", "'he' must be"),
    ({"coordinator": "bank"}, None, "shop", "unknown key"),
    ({"normalize": "NFC"}, None, "shop", "'normalize' applies only with psi = true"),
])
def test_bad_federation_files_are_refused_before_any_connection(
        tmp_path: Path, options: dict[str, object], labels: list[str] | None, party: str,
        message: str) -> None:
    from islands.deploy.config import load_party_config
    from islands.deploy.protocols import prepare
    from islands.errors import JobError

    files = _federation(tmp_path, options, labels)
    with pytest.raises(JobError, match=message):
        prepare(load_party_config(files[party]))


def test_a_bad_cell_is_named_with_its_line(tmp_path: Path) -> None:
    from islands.errors import ValidationError

    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n3,oops\n")
    with pytest.raises(ValidationError, match=r"Line 3 .* cell 2 is 'oops'"):
        load_table(path, what="x", missing=True)
