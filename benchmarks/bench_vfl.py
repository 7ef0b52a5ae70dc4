"""Vertical logistic regression benchmark: what encryption costs per epoch (islands.vfl).

1. Breast cancer (scikit-learn, 455 training rows after a stratified 80/20 split,
   standardised; B holds 10 features and the labels, A the other 20), batches of 256:
   seconds per epoch of the encrypted protocol (C, A and B in threads of this process)
   under ``he="ou"`` (HEU's Okamoto–Uchiyama, 2048-bit key, HEU's own thread pool) and
   ``he="paillier"`` (islands' 2048-bit DJN Paillier, worker processes, one per usable
   core) against the same protocol with ``he="none"`` in the same run — the same
   messages, masks and fixed-point arithmetic in the clear — and the ratios (issue 24
   target ≤ 15; FATE reports 7.5× for Paillier over plaintext). Also the time with
   textbook Paillier randomness (r^n, ``djn=False``).
2. Synthetic 100k × (20 + 20) features, batches of 1024: seconds per epoch under each
   scheme of ``--large-he`` (default ou and paillier), and the split between homomorphic
   work, plain compute and messaging per party.

The key pair is generated before the clock starts (its time is printed apart). Epochs
are timed from the coordinator's end-of-epoch messages in the transcript; the first
epoch also starts the worker processes and builds the DJN tables, so section 1 runs
``--epochs`` epochs (3) and reports the median of the later ones: the clear epoch is
about 10 ms, so its ratio moves with any hiccup of the machine, and ``--epochs 8`` or
more steadies it.

    python benchmarks/bench_vfl.py [--rows 100000] [--skip-large] [--large-he ou,paillier]
                                   [--epochs 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np

from common import environment, fmt_bytes, fmt_s


def train(blocks: list[Any], y: Any, plan: Any, keys: Any) -> tuple[Any, float]:
    from islands.runtime import run_local
    from islands.vfl.protocol import active, coordinator, passive

    t0 = time.perf_counter()
    run = run_local({"C": partial(coordinator, plan=plan, keys=keys),
                     "A": partial(passive, X=blocks[0], plan=plan),
                     "B": partial(active, X=blocks[1], y=y, plan=plan)},
                    timeout=3600, blas_threads=None)
    return run, time.perf_counter() - t0


def clocks(run: Any) -> dict[str, dict[str, float]]:
    return {name: {k: round(v, 3) for k, v in vars(run.results[name].clock).items()}
            for name in ("C", "A", "B")}


def breast_cancer(keys: dict[str, Any], epochs: int = 3) -> dict[str, Any]:
    from sklearn.datasets import load_breast_cancer
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    from islands.vfl.config import VflConfig
    from islands.vfl.protocol import epoch_seconds

    X, y = load_breast_cancer(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    x_tr, x_te = scaler.transform(x_tr), scaler.transform(x_te)
    blocks = [x_tr[:, 10:], x_tr[:, :10]]
    labels = np.where(y_tr == 1, 1.0, -1.0)
    out: dict[str, Any] = {"rows": int(x_tr.shape[0]), "features": [20, 10], "batch_size": 256}
    for name, he, key in (("ou", "ou", keys["ou"]),
                          ("paillier_djn", "paillier", keys["djn"]),
                          ("cleartext", "none", None),
                          ("paillier_textbook", "paillier", keys["plain"])):
        plan = VflConfig.build(None, objective="logistic", learning_rate=0.3, epochs=epochs,
                               batch_size=256, tol=None, he=he, key_bits=keys["bits"],
                               djn=name != "paillier_textbook").plan()
        run, wall = train(blocks, labels, plan, key)
        per_epoch = epoch_seconds(run.transcript)
        theta_a, theta_b = run.results["A"].theta, run.results["B"].theta
        z = x_te[:, 10:] @ theta_a + x_te[:, :10] @ theta_b[:-1] + theta_b[-1]
        out[name] = {"epoch_s": per_epoch, "steady_epoch_s": float(np.median(per_epoch[1:])),
                     "wall_s": wall, "bytes": run.transcript.total_bytes,
                     "test_auc": float(roc_auc_score(y_te, z)),
                     "clock": clocks(run)}
    base = out["cleartext"]["steady_epoch_s"]
    out["ratio_ou"] = out["ou"]["steady_epoch_s"] / base
    out["ratio_djn"] = out["paillier_djn"]["steady_epoch_s"] / base
    out["ratio_textbook"] = out["paillier_textbook"]["steady_epoch_s"] / base
    return out


def synthetic(rows: int, keys: dict[str, Any], he: str) -> dict[str, Any]:
    from islands.crypto.processes import usable_cores
    from islands.vfl.config import VflConfig
    from islands.vfl.protocol import epoch_seconds

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, 40))
    y = np.where(X @ rng.normal(size=40) + 0.5 * rng.normal(size=rows) > 0, 1.0, -1.0)
    plan = VflConfig.build(None, objective="logistic", learning_rate=0.3, epochs=1,
                           batch_size=1024, tol=None, he=he, key_bits=keys["bits"]).plan()
    run, wall = train([X[:, :20], X[:, 20:]], y, plan, keys["ou" if he == "ou" else "djn"])
    return {"he": he, "rows": rows, "features": [20, 20], "batch_size": 1024,
            "workers": usable_cores(), "epoch_s": epoch_seconds(run.transcript)[0],
            "wall_s": wall,
            "bytes": run.transcript.total_bytes, "loss": run.results["C"].epoch_losses,
            "clock": clocks(run)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--skip-large", action="store_true", help="only section 1")
    ap.add_argument("--large-he", default="ou,paillier",
                    help="schemes of section 2, comma-separated (ou, paillier, none)")
    ap.add_argument("--epochs", type=int, default=3,
                    help="epochs of each section-1 run (the first is not counted)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from islands.crypto import heu, paillier

    t0 = time.perf_counter()
    ou_key = heu.OuKeyOwner(args.key_bits)
    keygen_ou = time.perf_counter() - t0
    t0 = time.perf_counter()
    pk, sk, hs = paillier.generate_djn_keypair(args.key_bits)
    keygen_djn = time.perf_counter() - t0
    t0 = time.perf_counter()
    pk2, sk2 = paillier.generate_keypair(args.key_bits)
    keygen_plain = time.perf_counter() - t0
    keys = {"djn": (pk, sk, hs), "plain": (pk2, sk2, None), "ou": ou_key,
            "bits": args.key_bits}
    print(f"{args.key_bits}-bit keys: OU {fmt_s(keygen_ou)}, DJN {fmt_s(keygen_djn)}, "
          f"textbook {fmt_s(keygen_plain)}")
    results: dict[str, Any] = {"key_bits": args.key_bits, "keygen_s": {
        "ou": keygen_ou, "djn": keygen_djn, "textbook": keygen_plain}}

    bc = breast_cancer(keys, max(2, args.epochs))
    results["breast_cancer"] = bc
    print(f"1. breast cancer, {bc['rows']} rows, 20 + 10 features, batches of 256, "
          f"seconds per epoch (median of epochs 2-{max(2, args.epochs)})")
    for name in ("ou", "paillier_djn", "paillier_textbook", "cleartext"):
        r = bc[name]
        print(f"   {name:18s} {fmt_s(r['steady_epoch_s']):>9s}  first epoch "
              f"{fmt_s(r['epoch_s'][0])}, {fmt_bytes(r['bytes'])}, test AUC "
              f"{r['test_auc']:.4f}")
    print(f"   ratio to cleartext: OU {bc['ratio_ou']:.1f}×, Paillier (DJN) "
          f"{bc['ratio_djn']:.1f}×, textbook {bc['ratio_textbook']:.1f}×  (target ≤ 15: "
          f"{'met' if bc['ratio_ou'] <= 15 else 'MISSED'} with OU)")
    print(f"   clocks (OU): {bc['ou']['clock']}")
    print(f"   clocks (DJN): {bc['paillier_djn']['clock']}")
    if not args.skip_large:
        for he in args.large_he.split(","):
            big = synthetic(args.rows, keys, he)
            results["synthetic" if he == "paillier" else f"synthetic_{he}"] = big
            print(f"2. synthetic {big['rows']:,} × (20 + 20), batches of 1024, he={he!r}, "
                  f"{big['workers']} core(s): {fmt_s(big['epoch_s'])} per epoch, "
                  f"{fmt_bytes(big['bytes'])}")
            print(f"   clocks: {big['clock']}")
    results["environment"] = environment()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
