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
