"""Worker pools work however Python was started, and a pool whose worker died is rebuilt.

Each way of starting Python runs a user's code the way a user would — in a subprocess,
with inputs large enough that vertical logistic regression and PSI take the process-pool
paths — and checks the pool was really used.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from islands.crypto import processes
from islands.errors import ProtocolError

# A user's script: no `if __name__ == "__main__":` guard. The Paillier work of 1,000 rows
# and PSI over 20,000 IDs per side are above the sizes where islands starts its pool.
USER_CODE = textwrap.dedent("""
    import numpy as np
    import islands.psi
    from islands.crypto import processes
    from islands.vfl import VerticalLogisticRegression

    rng = np.random.default_rng(0)
    Xa, Xb = rng.normal(size=(1000, 3)), rng.normal(size=(1000, 2))
    y = (Xa[:, 0] + Xb[:, 0] > 0).astype(int)
    model = VerticalLogisticRegression(epochs=1, random_state=0).fit(Xa, Xb, y)
    common = islands.psi.intersect([f"id{i}" for i in range(20000)],
                                   [f"id{i}" for i in range(10000, 30000)])
    # SecureBoost under Paillier: 1,600 rows x 3 features take the pool's bucket products
    from islands.vfl import SecureBoostClassifier
    Xa, Xb = rng.normal(size=(1600, 3)), rng.normal(size=(1600, 2))
    y = (Xa[:, 0] + Xb[:, 0] > 0).astype(int)
    boost = SecureBoostClassifier(n_estimators=1, max_depth=2, he="paillier", workers=2,
                                  random_state=0).fit(Xa, Xb, y)
    print("pools", sorted(processes._POOLS), "common", len(common),
          "finite", bool(np.isfinite(model.coef_a_).all()),
          "boost", boost.score(Xa, Xb, y) > 0.7)
""")
EXPECTED = "common 10000 finite True boost True"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "src"), env.get("PYTHONPATH", "")])
    return env


def _check(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert EXPECTED in proc.stdout
    assert "pools []" not in proc.stdout  # the pool paths really ran
    assert "BrokenProcessPool" not in proc.stderr


def test_a_script_file_without_a_main_guard(tmp_path: Path) -> None:
    script = tmp_path / "user_script.py"
    script.write_text(USER_CODE)
    _check(subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env=_env(), timeout=600))


def test_code_from_standard_input(tmp_path: Path) -> None:
    # `python - <<EOF`: the workers must not try to re-import "<stdin>"
    _check(subprocess.run([sys.executable, "-"], input=USER_CODE, capture_output=True,
                          text=True, cwd=tmp_path, env=_env(), timeout=600))


def test_python_dash_c(tmp_path: Path) -> None:
    _check(subprocess.run([sys.executable, "-c", USER_CODE], capture_output=True, text=True,
                          cwd=tmp_path, env=_env(), timeout=600))


def test_a_jupyter_kernel(tmp_path: Path) -> None:
    manager = pytest.importorskip("jupyter_client.manager")
    pytest.importorskip("ipykernel")
    km, kc = manager.start_new_kernel(kernel_name="python3", cwd=str(tmp_path), env=_env())
    out: list[str] = []
    try:
        reply = kc.execute_interactive(
            USER_CODE, timeout=600,
            output_hook=lambda msg: out.append(msg["content"].get("text", "")
                                               if msg["msg_type"] == "stream" else
                                               msg["content"].get("evalue", "")))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    text = "".join(out)
    assert reply["content"]["status"] == "ok", text
    assert EXPECTED in text and "pools []" not in text


def _wait_until_broken(workers: int, pool: object, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not processes._is_broken(pool):  # type: ignore[arg-type]
        time.sleep(0.05)


def test_a_pool_whose_worker_was_killed_is_rebuilt() -> None:
    pids = processes.run_in_workers(os.getpid, [()] * 4, 2)
    assert os.getpid() not in pids
    pool = processes.process_pool(2)
    os.kill(pids[0], signal.SIGKILL)
    _wait_until_broken(2, pool)
    # the next call gets a fresh pool and succeeds
    again = processes.run_in_workers(os.getpid, [()] * 4, 2)
    assert pids[0] not in again
    assert processes.process_pool(2) is not pool


def test_a_call_that_kills_its_worker_twice_is_named_and_the_pool_recovers() -> None:
    with pytest.raises(ProtocolError, match=r"unit test: a worker process died twice"):
        processes.run_in_workers(os._exit, [(3,)], 2, owner="unit test")
    assert processes.run_in_workers(abs, [(-2,), (5,)], 2) == [2, 5]


def test_a_call_past_its_timeout_is_named() -> None:
    with pytest.raises(ProtocolError, match=r"sleep did not finish within 0.5 s"):
        processes.run_in_workers(time.sleep, [(30,)], 2, timeout=0.5, owner="unit test")
    assert processes.run_in_workers(abs, [(-7,)], 2) == [7]
