"""Deployment benchmark: the gRPC + mutual-TLS transport against the in-memory one.

Two benchmarks (deployment issue), each baseline measured in the same run:

1. Round trips of 1 KB, 1 MB and 250 MB messages (a party sends, its peer echoes the
   same bytes back): over gRPC with mutual TLS on loopback, the peer a separate process
   (this script with a hidden flag), against the in-memory transport of
   :func:`islands.runtime.run_local` (two threads, every message still encoded and
   copied). Reported: median round-trip time and throughput (2 × size / round trip).
2. Swarm CCA on Fashion-MNIST train halves (n = 60000, p = q = 392, perturb=True) as two
   ``islands party`` processes over gRPC with mutual TLS, against ``SwarmCCA.fit`` in
   one process. Target: ratio <= 1.5. The deployed figure is the slower party's role
   time (from its ``party.json``: whitening, messages, SVD; after the start-up
   handshake, without Python's start and the data load, which an in-process fit does not
   pay either); its total process wall time is reported beside it. Each party runs with
   one BLAS thread, as ``run_local`` gives each of two peers on this 2-core machine.

    python benchmarks/bench_transport.py [--json OUT] [--quick] [--repeats N] [--only 1,2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from common import finish, fmt_bytes, fmt_s, median, source_digest, verdict

SIZES = {"1 KB": 1_000, "1 MB": 1_000_000, "250 MB": 250_000_000}


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else fmt_s(seconds)


def repeats_for(size: int, quick: bool) -> int:
    if size >= 100_000_000:
        return 2 if quick else 4
    if size >= 1_000_000:
        return 10 if quick else 40
    return 50 if quick else 300


# ----------------------------------------------------------------- roles
def driver(party: Any, plan: list[tuple[int, int]], echo: str) -> dict[int, list[float]]:
    """Send each size `count` times, waiting for the echo; time each round trip."""
    times: dict[int, list[float]] = {}
    for size, count in plan:
        payload = np.full(size, 7, dtype=np.uint8)
        party.send(echo, "warm", payload)  # one untimed round trip per size
        party.recv(echo, "echo")
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            party.send(echo, "warm", payload)
            back = party.recv(echo, "echo")
            out.append(time.perf_counter() - t0)
            assert back.size == size
            del back
        times[size] = out
    party.send(echo, "warm", None)
    return times


def echoer(party: Any, driver_name: str) -> None:
    while True:
        msg = party.recv(driver_name, "warm", timeout=600)
        if msg is None:
            return
        party.send(driver_name, "echo", msg)


def _serve_echo(folder: str, addresses: str) -> None:
    """Hidden entry point: the echo peer as its own process."""
    from islands.deploy.certs import TlsFiles
    from islands.runtime.grpc_transport import run_party

    root = Path(folder)
    tls = TlsFiles(ca=root / "ca.pem", cert=root / "b.pem", key=root / "b.key")
    run_party("b", partial(echoer, driver_name="a"), json.loads(addresses), tls=tls,
              digest="bench", timeout=600, connect_timeout=60)


def bench_round_trips(quick: bool) -> dict[str, Any]:
    from islands.deploy.certs import make_certificates
    from islands.runtime import run_local
    from islands.runtime.grpc_transport import loopback_addresses, run_party

    plan = [(size, repeats_for(size, quick)) for size in SIZES.values()]
    roles = {"a": partial(driver, plan=plan, echo="b"), "b": partial(echoer, driver_name="a")}
    memory = run_local(roles, timeout=600).results["a"]

    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certificates(["a", "b"], tmp)
        addresses = loopback_addresses(["a", "b"])
        peer = subprocess.Popen([sys.executable, __file__, "--serve-echo", tmp,
                                 json.dumps(addresses)])
        try:
            run = run_party("a", roles["a"], addresses, tls=certs.parties["a"], digest="bench",
                            timeout=600, connect_timeout=60)
        finally:
            try:
                peer.wait(timeout=120)
            except subprocess.TimeoutExpired:
                peer.kill()
                peer.wait(timeout=10)
    grpc_times = run.result
    rows = {}
    for label, size in SIZES.items():
        mem, net = median(memory[size]), median(grpc_times[size])
        rows[label] = {"bytes": size, "repeats": len(grpc_times[size]),
                       "memory_rtt_s": mem, "grpc_tls_rtt_s": net, "ratio": net / mem,
                       "memory_throughput_Bps": 2 * size / mem,
                       "grpc_tls_throughput_Bps": 2 * size / net}
    print("\n1. Round trips, loopback; gRPC + mutual TLS (peer in another process) vs memory")
    print(f"{'size':>8} {'memory RTT':>12} {'gRPC RTT':>12} {'ratio':>8} "
          f"{'memory thr.':>13} {'gRPC thr.':>13}")
    for label, r in rows.items():
        print(f"{label:>8} {fmt_ms(r['memory_rtt_s']):>12} {fmt_ms(r['grpc_tls_rtt_s']):>12} "
              f"{r['ratio']:>7.1f}x {fmt_bytes(r['memory_throughput_Bps']) + '/s':>13} "
              f"{fmt_bytes(r['grpc_tls_throughput_Bps']) + '/s':>13}")
    return rows


# ----------------------------------------------------------------- Swarm CCA
def bench_cca(quick: bool, repeats: int) -> dict[str, Any]:
    from islands.cca import SwarmCCA
    from islands.data import load_fashion_mnist, split_image_views
    from islands.deploy.launch import PartyRecord
    from islands.deploy.local import start_parties, wait_parties, write_federation

    n = 20000 if quick else 60000
    ds = load_fashion_mnist(split="train")
    assert ds.image_shape is not None
    X, Y = split_image_views(ds.X[:n], ds.image_shape)
    X = np.ascontiguousarray(X, dtype=np.float64)
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    local, deployed, walls = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        np.save(root / "x.npy", X)
        np.save(root / "y.npy", Y)
        for _ in range(repeats):
            t0 = time.perf_counter()
            SwarmCCA(n_components=10, protocol="paper", rank_tol=1e-8).fit(X, Y)
            local.append(time.perf_counter() - t0)
            files = write_federation(
                root, "cca", {"x": {"data": "x.npy", "threads": 1},
                              "y": {"data": "y.npy", "threads": 1}},
                options={"n_components": 10, "rank_tol": 1e-8})
            t0 = time.perf_counter()
            done = wait_parties(start_parties(files), files, 600)
            walls.append(time.perf_counter() - t0)
            bad = {k: v.log[-1000:] for k, v in done.items() if v.returncode}
            if bad:
                raise RuntimeError(f"a party failed: {bad}")
            records = [PartyRecord.read(root / f"out/{p}") for p in "xy"]
            deployed.append(max(r.role_seconds for r in records))
    ratio = median(deployed) / median(local)
    row = {"n": n, "p": X.shape[1], "q": Y.shape[1], "repeats": repeats,
           "in_process_s": local, "grpc_role_s": deployed, "grpc_process_wall_s": walls,
           "ratio": ratio, "target": 1.5, "met": ratio <= 1.5}
    print(f"\n2. Swarm CCA, Fashion-MNIST halves n={n}, p=q={X.shape[1]}, perturb=True")
    print(f"   in-process SwarmCCA.fit   {fmt_s(median(local))}")
    print(f"   two processes over gRPC   {fmt_s(median(deployed))} (slower party's role; "
          f"whole processes {fmt_s(median(walls))})")
    print(f"   ratio {ratio:.2f}x (target <= 1.5: {verdict(ratio <= 1.5)})")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="1,2")
    parser.add_argument("--serve-echo", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_echo:
        _serve_echo(*args.serve_echo)
        return
    args.blas_threads = 1  # each party process; run_local gives each of two peers 1 of 2 cores
    only = {int(x) for x in args.only.split(",")}
    digests = {source_digest(["runtime", "deploy", "cca"])}
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    if 1 in only:
        results["round_trips"] = bench_round_trips(args.quick)
    if 2 in only:
        try:
            results["swarm_cca"] = bench_cca(args.quick, 1 if args.quick else args.repeats)
        except FileNotFoundError as exc:
            skipped["swarm_cca"] = str(exc)
            print(f"skipped Swarm CCA: {exc}")
    digests.add(source_digest(["runtime", "deploy", "cca"]))
    finish("transport", args, digests, results, skipped)


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
