"""What the one-run DP audit costs (issue 42): one run of the mechanism plus its canaries.

1. ``examples/apfl-secagg-dp-quick.toml`` (client-level DP under secure aggregation): wall
   seconds of the job's federation without canaries (``run_job``, no baseline) and of
   ``audit_job`` with its default canary clients, the ratio, each run's accountant ε and
   test accuracy (canary clients are extra clients: secure aggregation's work grows with
   the cohort).
2. The Gaussian mechanism's harness (T = 10, σ = 6): seconds of the mechanism's releases
   and of the statistics (bounds, plans, estimate) at m = 1,000 and 20,000, to show the
   statistics are not the cost.
3. The DP-SGD harness on islands' PrivateTrainer (T = 200 steps, q = 0.05): seconds with
   5,000 canary rows against the same harness with 2 (the real rows alone, near enough).

    python benchmarks/bench_dp_audit.py [--skip-job] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import environment, fmt_s

ROOT = Path(__file__).resolve().parents[1]


def job_section() -> dict[str, Any]:
    from islands.hfl.dp_audit import audit_job
    from islands.hfl.job import load_job, run_job

    job = replace(load_job(ROOT / "examples" / "apfl-secagg-dp-quick.toml"), baseline=False)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        plain = run_job(job, output=tmp)
        plain_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    audited = audit_job(job)
    audit_s = time.perf_counter() - t0
    settings = dict(audited.settings)
    key = next(k for k in settings if k.startswith("test_"))
    return {"job": job.name, "seconds_without_canaries": plain_s,
            "seconds_with_canaries": audit_s, "ratio": audit_s / plain_s,
            "canaries": settings["canaries"], "epsilon_without": plain.to_json().get(
                "privacy", {}).get("epsilon"), "epsilon_with": settings["epsilon"],
            key: settings[key],
            "bytes_with_canaries": settings["bytes"],
            "lower_bounds": {k: v.lower_bound for k, v in audited.views.items()}}


def gaussian_section() -> dict[str, Any]:
    from islands.privacy.audit import (
        CurveClaim,
        audit_scores,
        default_plans,
        dirac_canaries,
        draw_membership,
        gaussian_epsilon,
        gaussian_releases,
        white_box_scores,
    )

    out = {}
    sigma, rounds = 6.0, 10
    mu = rounds ** 0.5 / sigma
    for m in (1_000, 20_000):
        t0 = time.perf_counter()
        dirac = dirac_canaries(m + 1024, m)
        included = draw_membership(m)
        releases = gaussian_releases(dirac, included, noise_multiplier=sigma, clip=1.0,
                                     rounds=rounds, sampling_rate=1.0, canary_norm=1.0)
        scores = white_box_scores(releases, dirac, clip=1.0, sampling_rate=1.0,
                                  canary_norm=1.0)
        mechanism_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        audit = audit_scores(scores, included, delta=1e-5, confidence=0.95,
                             plans=default_plans(mu, m, 1e-5, 0.95),
                             curve=CurveClaim.gaussian(mu),
                             claimed_epsilon=gaussian_epsilon(mu, 1e-5))
        stats_s = time.perf_counter() - t0
        out[str(m)] = {"mechanism_s": mechanism_s, "statistics_s": stats_s,
                       "lower_bound": audit.lower_bound}
    return out


def dpsgd_section() -> dict[str, Any]:
    from islands.hfl.dp_audit import audit_dpsgd

    out = {}
    for m in (2, 5_000):
        t0 = time.perf_counter()
        run = audit_dpsgd(canaries=m, steps=200, noise_multiplier=2.0, sampling_rate=0.05)
        out[str(m)] = {"seconds": time.perf_counter() - t0,
                       "lower_bound": max(v.lower_bound for v in run.views.values())}
    out["ratio"] = out["5000"]["seconds"] / out["2"]["seconds"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-job", action="store_true", help="leave out section 1")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    # every canary client reports no training loss: the server's per-client warning is noise
    logging.getLogger("islands.hfl.protocol").setLevel(logging.ERROR)
    results: dict[str, Any] = {}
    if not args.skip_job:
        j = results["job"] = job_section()
        print(f"1. {j['job']}: federation {fmt_s(j['seconds_without_canaries'])} without "
              f"canaries, {fmt_s(j['seconds_with_canaries'])} with {j['canaries']} canary "
              f"clients ({j['ratio']:.2f}×); accountant ε {j['epsilon_with']:.1f} with "
              f"canaries; bounds {j['lower_bounds']}")
    g = results["gaussian"] = gaussian_section()
    for m, r in g.items():
        print(f"2. Gaussian harness, m = {m}: mechanism {fmt_s(r['mechanism_s'])}, "
              f"statistics {fmt_s(r['statistics_s'])}, bound {r['lower_bound']:.2f}")
    d = results["dpsgd"] = dpsgd_section()
    print(f"3. DP-SGD harness, 200 steps: {fmt_s(d['5000']['seconds'])} with 5,000 canary "
          f"rows, {fmt_s(d['2']['seconds'])} with 2 ({d['ratio']:.2f}×)")
    results["environment"] = environment()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
