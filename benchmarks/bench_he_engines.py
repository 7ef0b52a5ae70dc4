"""Homomorphic engines side by side: which one each ``he`` value runs on (issue 24, item 1).

Issue 24 asks for SecretFlow's HEU as the homomorphic engine, islands' own Paillier kept
only where HEU cannot do the job. ``he="ou"`` runs on HEU's Okamoto–Uchiyama; for
``he="paillier"`` this benchmark compares HEU's Paillier (``ZPaillier``, its fastest
Paillier on a CPU without Intel's IPCL) with islands' DJN Paillier
(:mod:`islands.crypto.paillier_ops`), on the primitives vertical regression and FTL
spend their time in, in one run, with 2048-bit keys:

- **encrypt**: seconds per value, 256 signed 41-bit values (a batch's partial scores);
- **decrypt**: seconds per value, 21 values (what the coordinator opens per batch);
- **weighted**: Σ_i c_i·w_ij for 256 ciphertexts and 20 columns of 19-bit weights (a
  passive party's gradient sums), by each engine's bucket method (HEU's
  ``feature_wise_bucket_sum``, windows of 5 bits, prefix sums in C++; islands'
  Pippenger on gmpy2).

Every engine runs in this process on one core (HEU's thread pool of one thread, islands
with ``workers=1``), so the figures compare the arithmetic, not the parallelism. Median
of ``--repeats`` after one warm-up call each. HEU's OU is printed beside them as the
reference the other rows are read against.

    python benchmarks/bench_he_engines.py [--repeats 5] [--key-bits 2048] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ["YACL_NUM_THREADS"] = "1"  # HEU's pool: read once, before its first use

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np

from common import environment, source_digest, timed

ROWS, COLS, WINDOW, DECRYPTS = 256, 20, 5, 21


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def heu_engine(schema: str, bits: int, repeats: int, rng: np.random.Generator
               ) -> dict[str, float]:
    from heu import numpy as hnp
    from heu import phe

    kit = hnp.setup(getattr(phe.SchemaType, schema), bits)
    enc, ev, dec = kit.encryptor(), kit.evaluator(), kit.decryptor()
    values = rng.integers(-2**40, 2**40, ROWS)
    plain = kit.array(np.array([[int(v)] for v in values], dtype=object).reshape(-1, 1))
    cts = enc.encrypt(plain)
    digits = [rng.integers(0, 2**WINDOW, (ROWS, COLS)).astype(np.int8)
              for _ in range(-(-19 // WINDOW))]
    ones = np.ones((1, ROWS), dtype=np.int8)
    size = 2**WINDOW

    def weighted() -> None:  # the bucket method's HEU calls, as islands.crypto.heu runs them
        acc = None
        for d in digits:
            prefix = ev.feature_wise_bucket_sum(cts, ones, d, size, True)
            wins = [ev.sum(prefix[j * size: j * size + size - 1]) for j in range(COLS)]
            acc = wins if acc is None else [ev.phe.add(ev.phe.mul(a, size), s)
                                           for a, s in zip(acc, wins, strict=True)]

    return {"encrypt_s": timed(lambda: enc.encrypt(plain), repeats) / ROWS,
            "decrypt_s": timed(lambda: dec.decrypt(cts[:DECRYPTS]), repeats) / DECRYPTS,
            "weighted_s": timed(weighted, repeats)}


def islands_djn(bits: int, repeats: int, rng: np.random.Generator) -> dict[str, float]:
    from islands.crypto import paillier
    from islands.crypto.paillier_ops import VectorCipher, decrypt_many

    public, private, base = paillier.generate_djn_keypair(bits)
    cipher = VectorCipher(public, base, workers=1)
    values = [int(v) for v in rng.integers(-2**40, 2**40, ROWS)]
    cts = cipher.encrypt(values)
    weights = rng.integers(-2**18, 2**18, (ROWS, COLS))
    return {"encrypt_s": timed(lambda: cipher.encrypt(values), repeats) / ROWS,
            "decrypt_s": timed(lambda: decrypt_many(private, cts[:DECRYPTS]),
                               repeats) / DECRYPTS,
            "weighted_s": timed(lambda: cipher.weighted(cts, weights), repeats)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from islands.crypto import heu

    rng = np.random.default_rng(0)
    rows: dict[str, dict[str, float]] = {"islands DJN Paillier": islands_djn(
        args.key_bits, args.repeats, rng)}
    if heu.available():
        rows["HEU ZPaillier"] = heu_engine("ZPaillier", args.key_bits, args.repeats, rng)
        rows["HEU OU"] = heu_engine("OU", args.key_bits, args.repeats, rng)
    else:
        print("sf-heu is not importable here: only islands' Paillier is measured")
    print(f"{args.key_bits}-bit keys, one core each, median of {args.repeats}")
    print(f"{'engine':22s} {'encrypt/value':>14s} {'decrypt/value':>14s} "
          f"{'weighted 256x20':>16s}")
    for name, r in rows.items():
        print(f"{name:22s} {ms(r['encrypt_s']):>14s} {ms(r['decrypt_s']):>14s} "
              f"{ms(r['weighted_s']):>16s}")
    if "HEU ZPaillier" in rows:
        own, theirs = rows["islands DJN Paillier"], rows["HEU ZPaillier"]
        print("HEU ZPaillier / islands DJN: " + ", ".join(
            f"{k[:-2]} {theirs[k] / own[k]:.2f}x" for k in ("encrypt_s", "decrypt_s",
                                                             "weighted_s")))
    print(f"islands sources: {source_digest(['crypto'])}")
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "bench_he_engines", "argv": sys.argv[1:],
                                         "environment": environment(), "rows": rows},
                                        indent=2))


if __name__ == "__main__":
    main()
