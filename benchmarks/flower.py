"""Run Flower peer scripts (``benchmarks/peers/``) in Flower's own Python, from a benchmark.

The peers run in a separate virtual environment, so Flower's pins never touch islands'
(``benchmarks/peers/README.md`` says how to build it; in short
``python3 -m venv /work/flwr-venv && /work/flwr-venv/bin/pip install
"flwr[simulation]==1.42.*" numpy torch==2.13.0``). A benchmark given ``--flower-python PATH``
calls, in the same invocation as its islands row:

* :func:`flower_noop` — no-compute FedAvg round (benchmark 3 of ``bench_hfl.py``);
* :func:`flower_fedavg` — real-compute FedAvg, MLP 784-200-10 on IID Fashion-MNIST
  shards; the shards and initial weights come from islands (:func:`export_fedavg_data`:
  ``partition_iid(60000, n, random_state=split_seed)`` and ``ModelSpec.build(seed)``),
  so an islands row built the same way trains the same data from the same model;
* :func:`flower_secaggplus` — Flower's SecAgg+ round (no-op training);

each returns the peer's ``RESULT`` dict with ``per_round_s`` (mean of rounds 2..: round 1
includes Ray's start-up), ``process_wall_s``, ``pss_peak_bytes`` (PSS summed over the
peer's process tree, sampled every 0.5 s; None if it ended before 3 samples) and
``max_processes``; or raises :class:`PeerError` (exit status, time-out, the tail of
stderr). :func:`run_peer` runs any peer script.

Imported from the benchmark scripts' folder (``from flower import flower_fedavg``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from common import proc_kb, process_tree

PEERS = Path(__file__).resolve().parent / "peers"
NOOP_SCRIPT = PEERS / "flower_noop_round.py"
FEDAVG_SCRIPT = PEERS / "flower_fedavg_round.py"
SECAGG_SCRIPT = PEERS / "flower_secaggplus_round.py"
TIMEOUT = 900.0
SAMPLE_EVERY = 0.5


class PeerError(RuntimeError):
    """A peer script failed, timed out, or printed no ``RESULT`` line; ``rounds`` holds the
    ``ROUND`` lines it printed before (the rounds it finished)."""

    def __init__(self, message: str, rounds: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.rounds = rounds or []


def run_sampled(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run ``cmd``, sampling its process tree's PSS every 0.5 s; kill the tree past
    ``timeout`` seconds. Returns rc, wall_s, timed_out, stdout, stderr, pss_peak_bytes
    (None with fewer than 3 samples), pss_samples and max_processes."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        peak = procs = samples = 0
        timed_out = False
        while proc.poll() is None:
            pids = process_tree(proc.pid)
            peak = max(peak, sum(proc_kb("smaps_rollup", "Pss", pid) for pid in pids) * 1024)
            samples += 1
            procs = max(procs, len(pids))
            if time.perf_counter() - t0 > timeout:
                timed_out = True
                for pid in reversed(pids):  # the tree we started, by id
                    with suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                proc.wait(timeout=60)
                break
            time.sleep(SAMPLE_EVERY)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return {"rc": proc.returncode, "wall_s": wall, "timed_out": timed_out,
                "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace"),
                "pss_peak_bytes": peak if samples >= 3 else None, "pss_samples": samples,
                "max_processes": procs}


def parse_line(stdout: str, prefix: str) -> dict[str, Any] | None:
    """The JSON after ``prefix`` on the last line that starts with it, or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(prefix):
            out: dict[str, Any] = json.loads(line[len(prefix):])
            return out
    return None


def run_peer(python: str | os.PathLike[str], script: str | os.PathLike[str],
             args: list[str], timeout: float = TIMEOUT) -> dict[str, Any]:
    """Run a peer ``script`` with Flower's ``python`` and return its ``RESULT`` dict,
    with process_wall_s, pss_peak_bytes and max_processes added.

    Environment: this one without PYTHONPATH (the peer must not see islands), with
    ``FLWR_TELEMETRY_ENABLED=0``. Raises :class:`PeerError` on a non-zero exit, a
    time-out (the process tree is killed) or a missing ``RESULT`` line.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["FLWR_TELEMETRY_ENABLED"] = "0"
    cmd = [str(python), str(script), *map(str, args)]
    proc = run_sampled(cmd, env, timeout)
    out = parse_line(proc["stdout"], "RESULT ")
    if proc["rc"] != 0 or proc["timed_out"] or out is None:
        what = (f"timed out after {timeout:.0f} s" if proc["timed_out"]
                else f"exit status {proc['rc']}" + ("" if out is None else " after RESULT")
                if proc["rc"] != 0 else "no RESULT line")
        rounds = [json.loads(line[6:]) for line in proc["stdout"].splitlines()
                  if line.startswith("ROUND ")]
        tail = (proc["stderr"] or proc["stdout"])[-2000:]
        raise PeerError(f"{' '.join(cmd)}: {what}; rounds finished: {rounds}; output ends:\n"
                        f"{tail}", rounds)
    per = [float(s) for s in out["seconds_per_round"]]
    out.update(rounds_s=per, per_round_s=sum(per[1:]) / len(per[1:]) if len(per) > 1
               else per[0], process_wall_s=proc["wall_s"],
               pss_peak_bytes=proc["pss_peak_bytes"], max_processes=proc["max_processes"])
    return out


def flower_noop(python: str, n: int, rounds: int = 3, *, script: Path = NOOP_SCRIPT,
                timeout: float = TIMEOUT) -> dict[str, Any]:
    """Flower's no-compute FedAvg round: n clients, 100,000 float32 each."""
    return run_peer(python, script, [n, rounds], timeout)


def export_fedavg_data(path: str | os.PathLike[str], n: int, *, seed: int = 0,
                       split_seed: int = 0) -> None:
    """Write the ``.npz`` that ``peers/flower_fedavg_round.py`` reads: Fashion-MNIST's
    train rows (uint8, as islands loads them) grouped by the shards of
    ``partition_iid(60000, n, random_state=split_seed)`` with their ``offsets``, the test
    rows, and the initial weights ``w0``..``w3`` of ``ModelSpec`` MLP 784-200-10
    ``.build(seed)`` (torch's layout: weight, bias of each Linear)."""
    import numpy as np

    from islands.data import load_fashion_mnist, partition_iid
    from islands.hfl.torch.models import ModelSpec

    train = load_fashion_mnist(split="train", normalize=False)
    test = load_fashion_mnist(split="test", normalize=False)
    parts = partition_iid(len(train.y), n, random_state=split_seed)
    order = np.concatenate(parts)
    offsets = np.cumsum([0, *(len(p) for p in parts)])
    spec = ModelSpec(kind="mlp", input_shape=(784,), n_outputs=10, hidden=(200,))
    weights = [p.detach().numpy() for p in spec.build(seed).parameters()]
    assert [w.shape for w in weights] == [(200, 784), (200,), (10, 200), (10,)]
    np.savez(path, X=np.ascontiguousarray(train.X[order]), y=np.asarray(train.y)[order],
             offsets=offsets, X_test=np.ascontiguousarray(test.X), y_test=np.asarray(test.y),
             **{f"w{i}": w for i, w in enumerate(weights)})


def flower_fedavg(python: str, n: int, rounds: int = 3, *, lr: float = 0.05,
                  batch: int = 32, epochs: int = 1, seed: int = 0, split_seed: int = 0,
                  timeout: float = TIMEOUT) -> dict[str, Any]:
    """Flower's real-compute FedAvg: n clients, MLP 784-200-10, ``epochs`` local epochs at
    ``batch``, SGD at ``lr``, ``rounds`` rounds, ``num_cpus=1`` (one torch thread) per
    client. Adds ``accuracy`` (test set; [0] the initial model, [r] after round r)."""
    with tempfile.TemporaryDirectory(prefix="islands-flower-") as tmp:
        data = Path(tmp) / "fedavg.npz"
        export_fedavg_data(data, n, seed=seed, split_seed=split_seed)
        return run_peer(python, FEDAVG_SCRIPT,
                        [data, rounds, f"lr={lr}", f"batch={batch}", f"epochs={epochs}"],
                        timeout)


def flower_secaggplus(python: str, n: int, dim: int, k: int | float, dropout: float = 0.0,
                      *, threshold: int | float | None = None, rounds: int = 3,
                      timeout: float = TIMEOUT) -> dict[str, Any]:
    """Flower's SecAgg+ round (``SecAggPlusWorkflow`` + ``secaggplus_mod``): n clients ×
    ``dim`` float32 parameters, no-op training, ``k`` = Flower's ``num_shares`` (the client
    and its k - 1 neighbours; an even int becomes k + 1, as Flower's server makes it; a
    float is a fraction of n; 0 is plain FedAvg through the same workflow),
    ``threshold`` shares to rebuild a key (default: 2/3 of the shares, the ratio of
    Flower's example), ``dropout`` the fraction of clients that fail after sharing their
    keys, before uploading their masked vector.

    Rounds that Flower halted (some client kept fewer than ``threshold`` live neighbours)
    are listed in ``halted_rounds`` and left out of ``per_round_s`` (mean of the completed
    rounds after the first); PeerError if no round after the first completed."""
    args = [n, dim, k, "" if threshold is None else threshold, dropout, rounds]
    out = run_peer(python, SECAGG_SCRIPT, args, timeout)
    done = [s for r, s in enumerate(out["rounds_s"], 1)
            if r > 1 and r not in out["halted_rounds"]]
    if not done:
        raise PeerError(f"Flower's SecAgg+ halted rounds {out['halted_rounds']} of "
                        f"{out['rounds']} (n={n}, k={out['num_shares']}, threshold="
                        f"{out['reconstruction_threshold']}, dropout={dropout}): {out}")
    out["per_round_s"] = sum(done) / len(done)
    return out


def main() -> None:
    """``python benchmarks/flower.py --flower-python PY {noop,fedavg,secaggplus} N ...``:
    one peer run, its result as JSON on stdout (islands' PYTHONPATH for fedavg's data)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--flower-python", required=True, help="Python of Flower's venv")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=TIMEOUT)
    ap.add_argument("peer", choices=("noop", "fedavg", "secaggplus"))
    ap.add_argument("n", type=int, help="clients")
    ap.add_argument("--dim", type=int, default=100_000, help="secaggplus: parameters")
    ap.add_argument("--k", default="10", help="secaggplus: num_shares (0: plain FedAvg)")
    ap.add_argument("--threshold", default=None, help="secaggplus: reconstruction_threshold")
    ap.add_argument("--dropout", type=float, default=0.0, help="secaggplus: dropout fraction")
    a = ap.parse_args()
    py, kw = a.flower_python, {"rounds": a.rounds, "timeout": a.timeout}
    if a.peer == "noop":
        out = flower_noop(py, a.n, **kw)
    elif a.peer == "fedavg":
        out = flower_fedavg(py, a.n, **kw)
    else:
        def num(s: str) -> int | float:
            return float(s) if "." in s else int(s)

        out = flower_secaggplus(py, a.n, a.dim, num(a.k), a.dropout, **kw,
                                threshold=None if a.threshold is None else num(a.threshold))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
