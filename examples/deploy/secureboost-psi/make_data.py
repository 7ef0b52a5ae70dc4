"""Write each organisation's own files for the secureboost-psi example (synthetic credit data).

3,000 customers; whether a customer defaulted depends on features the three
organisations hold apart, each for an overlapping subset of the customers, in its own
row order, with some values missing (empty cells):

- ``bank`` (active party): income, debt ratio, years as a customer, late payments, and
  the outcome (``default`` or ``repaid``), unknown (an empty line in ``bank-labels.txt``)
  for 40 customers it asks the federation to score;
- ``telco``: monthly bill, contract months, missed bills;
- ``retailer``: basket size, returns share, months since last purchase, instalment plans.

Usage: ``python make_data.py FOLDER``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

COLUMNS = {
    "bank": ["income", "debt_ratio", "years_customer", "late_payments"],
    "telco": ["monthly_bill", "contract_months", "missed_bills"],
    "retailer": ["basket_size", "returns_share", "months_since_purchase", "instalments"],
}


def main(folder: Path) -> None:
    """Write the three organisations' files into ``folder``."""
    rng = np.random.default_rng(11)
    n = 3000
    cols = {
        "income": rng.lognormal(10.5, 0.5, n), "debt_ratio": rng.beta(2, 5, n),
        "years_customer": rng.integers(0, 30, n).astype(float),
        "late_payments": rng.poisson(0.6, n).astype(float),
        "monthly_bill": rng.gamma(4, 12, n), "contract_months": rng.integers(1, 60, n) * 1.0,
        "missed_bills": rng.poisson(0.4, n).astype(float),
        "basket_size": rng.gamma(3, 20, n), "returns_share": rng.beta(1, 8, n),
        "months_since_purchase": rng.exponential(4, n), "instalments": rng.poisson(1, n) * 1.0,
    }
    z = (-2.0 + 3.0 * cols["debt_ratio"] + 0.8 * cols["late_payments"]
         + 0.9 * cols["missed_bills"] - 0.02 * cols["contract_months"]
         + 0.6 * cols["instalments"] - 0.5 * np.log(cols["income"] / 30000)
         + 2.0 * cols["returns_share"] + 0.3 * rng.normal(size=n))
    default = rng.random(n) < 1 / (1 + np.exp(-z))
    ids = np.asarray([f"cust-{i:05d}" for i in rng.permutation(50_000)[:n]])
    held = {"bank": rng.random(n) < 0.95, "telco": rng.random(n) < 0.85,
            "retailer": rng.random(n) < 0.80}
    everywhere = np.flatnonzero(held["bank"] & held["telco"] & held["retailer"])
    unknown = set(rng.choice(everywhere, size=40, replace=False).tolist())
    folder.mkdir(parents=True, exist_ok=True)
    for name, mask in held.items():
        rows = rng.permutation(np.flatnonzero(mask))  # each its own order
        block = np.column_stack([cols[c][rows] for c in COLUMNS[name]])
        block[rng.random(block.shape) < 0.05] = np.nan  # missing values
        lines = [",".join(COLUMNS[name])] + [
            ",".join("" if np.isnan(v) else f"{v:.6g}" for v in row) for row in block]
        (folder / f"{name}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (folder / f"{name}-ids.txt").write_text("".join(f"{v}\n" for v in ids[rows]),
                                                encoding="utf-8")
        if name == "bank":
            outcome = np.where(default, "default", "repaid")
            labels = ["" if r in unknown else outcome[r] for r in rows]
            (folder / "bank-labels.txt").write_text("".join(f"{v}\n" for v in labels),
                                                    encoding="utf-8")
            asked = [ids[r] for r in rows if r in unknown]
            (folder / "bank-predict.txt").write_text("".join(f"{v}\n" for v in asked),
                                                     encoding="utf-8")
            truth = [f"{ids[r]},{outcome[r]}" for r in rows if r in unknown]
            (folder / "truth.csv").write_text("id,label\n" + "\n".join(truth) + "\n",
                                              encoding="utf-8")
    print(f"wrote the three organisations' files to {folder} "
          f"({len(everywhere)} customers held by all three, 40 of them to score)")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
