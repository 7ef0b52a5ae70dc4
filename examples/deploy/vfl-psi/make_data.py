"""Write each organisation's own files for the vfl-psi example (scikit-learn's breast-cancer data).

569 patients, 30 measurements split between three organisations that each hold a
different, overlapping subset of the patients, under their own row order:

- ``hospital`` (active party): 10 columns and the diagnosis, unknown (an empty line in
  ``hospital-labels.txt``) for 25 patients it asks the federation to predict;
- ``lab`` and ``clinic`` (passive parties): 10 columns each.

Each organisation standardises its own columns with its own statistics. Usage:
``python make_data.py FOLDER``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer


def main(folder: Path) -> None:
    """Write the three organisations' files into ``folder``."""
    data = load_breast_cancer()
    X, y = data.data, data.target
    n = X.shape[0]
    rng = np.random.default_rng(7)
    ids = np.asarray([f"patient-{i:04d}" for i in rng.permutation(10_000)[:n]])
    held = {"hospital": rng.random(n) < 0.90, "lab": rng.random(n) < 0.85,
            "clinic": rng.random(n) < 0.85}
    everywhere = np.flatnonzero(held["hospital"] & held["lab"] & held["clinic"])
    unknown = set(rng.choice(everywhere, size=25, replace=False).tolist())
    columns = {"hospital": slice(0, 10), "lab": slice(10, 20), "clinic": slice(20, 30)}
    folder.mkdir(parents=True, exist_ok=True)
    for name, mask in held.items():
        rows = rng.permutation(np.flatnonzero(mask))  # each its own order
        block = X[rows, columns[name]]
        block = (block - block.mean(axis=0)) / block.std(axis=0)
        header = ",".join(data.feature_names[columns[name]]).replace(" ", "_")
        np.savetxt(folder / f"{name}.csv", block, delimiter=",", header=header, comments="",
                   fmt="%.6f")
        (folder / f"{name}-ids.txt").write_text("".join(f"{v}\n" for v in ids[rows]),
                                                encoding="utf-8")
        if name == "hospital":
            labels = ["" if r in unknown else data.target_names[y[r]] for r in rows]
            (folder / "hospital-labels.txt").write_text("".join(f"{v}\n" for v in labels),
                                                        encoding="utf-8")
            asked = [ids[r] for r in rows if r in unknown]
            (folder / "hospital-predict.txt").write_text("".join(f"{v}\n" for v in asked),
                                                         encoding="utf-8")
            truth = [f"{ids[r]},{data.target_names[y[r]]}" for r in rows if r in unknown]
            (folder / "truth.csv").write_text("id,label\n" + "\n".join(truth) + "\n",
                                              encoding="utf-8")
    print(f"wrote the three organisations' files to {folder} "
          f"({len(everywhere)} patients held by all three, 25 of them to predict)")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
