"""``benchmarks/flower.py``: how the benchmarks run a Flower peer script in another Python.

The peer scripts themselves need Flower's own venv (``benchmarks/peers/README.md``); these
tests run stand-in scripts with this Python, so they need no Flower.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = str(Path(__file__).resolve().parents[1] / "benchmarks")
sys.path.insert(0, BENCHMARKS)  # benchmarks/flower.py and its common.py, for this import only
try:
    import flower
finally:
    sys.path.remove(BENCHMARKS)


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "peer.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_run_peer_parses_result_and_hides_islands(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere/src")
    peer = script(tmp_path, """
        import json, os, sys
        print("RESULT {\\"seconds_per_round\\": [9.0]}")  # an earlier line: the last counts
        print("RESULT " + json.dumps({"seconds_per_round": [5.0, 1.0, 2.0], "args": sys.argv[1:],
              "pythonpath": os.environ.get("PYTHONPATH"),
              "telemetry": os.environ.get("FLWR_TELEMETRY_ENABLED")}))
    """)
    out = flower.run_peer(sys.executable, peer, [3, "x"], timeout=60)
    assert out["args"] == ["3", "x"]
    assert out["pythonpath"] is None and out["telemetry"] == "0"
    assert out["rounds_s"] == [5.0, 1.0, 2.0] and out["per_round_s"] == 1.5
    assert out["process_wall_s"] > 0 and "max_processes" in out


def test_run_peer_failure_names_status_and_stderr(tmp_path: Path) -> None:
    peer = script(tmp_path, """
        import sys
        print("no ray for you", file=sys.stderr)
        sys.exit(3)
    """)
    with pytest.raises(flower.PeerError, match=r"(?s)exit status 3.*no ray for you"):
        flower.run_peer(sys.executable, peer, [], timeout=60)
    quiet = script(tmp_path, "print('done')\n")
    with pytest.raises(flower.PeerError, match="no RESULT line"):
        flower.run_peer(sys.executable, quiet, [], timeout=60)


def test_run_peer_time_out_kills_the_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    peer = script(tmp_path, f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print('ROUND {{"round": 1, "seconds": 7.5}}', flush=True)
        time.sleep(60)
    """)
    t0 = time.perf_counter()
    with pytest.raises(flower.PeerError, match="timed out after 2 s") as info:
        flower.run_peer(sys.executable, peer, [], timeout=2)
    assert info.value.rounds == [{"round": 1, "seconds": 7.5}]
    assert time.perf_counter() - t0 < 30
    pid = int(pidfile.read_text())
    for _ in range(50):  # reaped by init once killed
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {pid} outlived the time-out")


def test_export_fedavg_data_shards_and_weights(tmp_path: Path) -> None:
    from islands.data import load_fashion_mnist, partition_iid
    from islands.errors import DataNotFoundError
    from islands.hfl.torch.models import ModelSpec

    try:
        train = load_fashion_mnist(split="train", normalize=False)
    except DataNotFoundError as exc:
        pytest.skip(str(exc))
    path = tmp_path / "d.npz"
    flower.export_fedavg_data(path, 7, seed=3, split_seed=1)
    with np.load(path) as d:
        off = d["offsets"]
        assert off[0] == 0 and off[-1] == 60000 and len(off) == 8
        k = 4
        idx = partition_iid(60000, 7, random_state=1)[k]
        assert np.array_equal(d["X"][off[k]:off[k + 1]], train.X[idx])
        assert np.array_equal(d["y"][off[k]:off[k + 1]], train.y[idx])
        assert d["X"].dtype == np.uint8 and d["X_test"].shape == (10000, 784)
        spec = ModelSpec(kind="mlp", input_shape=(784,), n_outputs=10, hidden=(200,))
        flat = np.concatenate([d[f"w{i}"].ravel() for i in range(4)])
        assert np.array_equal(flat, spec.initial_params(3))
