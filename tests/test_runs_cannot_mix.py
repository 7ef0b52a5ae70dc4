"""Runs that cannot mix (issue 37): resumes bound to their settings, results written whole.

Each test plays what a user met, mostly through the ``islands`` command in a subprocess:
a resume under other settings (``islands run --resume``, ``FederatedModel(resume=True)``,
``islands party --resume``), a damaged client checkpoint, a disk that fills or a kill
while the results are written, a run into a folder that holds another run's results,
and the low items (a seed beyond 64 bits, an ``output`` that is a file, ``--json`` into a
missing folder).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.errors import ProtocolError, ValidationError
from islands.hfl import FederatedModel, ModelSpec
from islands.hfl.checkpoint import load_checkpoint, save_checkpoint
from islands.hfl.strategy import FedAvg
from islands.runs import load_run

pytest.importorskip("torch")

SRC = Path(__file__).resolve().parents[1] / "src"

JOB = """
name = "mix"
seed = 0
epochs = {epochs}
output = "{out}"
baseline = false

[data]
name = "digits"
standardize = true

[partition]
kind = "iid"
clients = 3

[model]
kind = "mlp"
hidden = [16]

[strategy]
name = "fedavg"
local_steps = 2
batch_size = 16
lr = 0.1
momentum = 0.9
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"}


def _islands(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "islands.cli", *args], env=_env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                          check=False)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _job(tmp_path: Path, epochs: int = 2) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(JOB.format(epochs=epochs, out=tmp_path / "out"))
    return path


def _kill_after_epoch(args: list[str], ckpt: Path, epoch: int) -> int:
    """Start ``islands run ARGS``, SIGKILL it once its server checkpoint reaches ``epoch``."""
    proc = subprocess.Popen([sys.executable, "-m", "islands.cli", "run", *args], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    try:
        while not ckpt.is_file() or load_checkpoint(ckpt)["epoch"] < epoch:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, f"no checkpoint of epoch {epoch}"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(60)
    return int(load_checkpoint(ckpt)["epoch"])


# ----------------------------------------------------------------------------- part 1
def test_islands_run_resume_under_other_settings_is_refused_naming_them(
        tmp_path: Path) -> None:
    # before: a run with --set seed=2, killed, resumed without the override (resumed_from
    # 73); results.json said seed 0, and the model was neither run's
    job = _job(tmp_path, epochs=200)
    ckpt = tmp_path / "out" / "checkpoints" / "server.ckpt"
    done = _kill_after_epoch([str(job), "--set", "seed=2"], ckpt, epoch=2)
    before = load_checkpoint(ckpt)
    more = f"epochs={done + 1}"

    proc = _islands("run", str(job), "--resume", "--set", more)
    text = _flat(proc.stdout)
    assert proc.returncode == 2, text
    assert f"cannot resume from {ckpt}: it was made under other settings" in text
    assert "seed: 2 → 0" in text and "Traceback" not in text
    proc = _islands("run", str(job), "--resume", "--set", "seed=2", "--set",
                    "strategy.lr=0.05", "--set", more)
    assert proc.returncode == 2 and "strategy.lr: 0.1 → 0.05" in _flat(proc.stdout)
    assert "seed:" not in _flat(proc.stdout)
    proc = _islands("run", str(job), "--resume", "--set", "seed=2", "--set", "epochs=1")
    assert proc.returncode == 2
    assert f"it has already trained {done} epochs; resume with epochs >= {done}" in _flat(
        proc.stdout)
    # nothing trained, nothing written
    assert load_checkpoint(ckpt)["round"] == before["round"]
    assert not (tmp_path / "out" / "results.json").exists()

    # the settings it was made under resume it; a setting that does not shape the model
    # (concurrency, timeout) may change, and epochs may grow
    proc = _islands("run", str(job), "--resume", "--set", "seed=2", "--set", more,
                    "--set", "concurrency=1", "--set", "timeout=300")
    assert proc.returncode == 0, proc.stdout
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["job"]["seed"] == 2 and result["resumed_from"] == before["round"]
    assert [h["epoch"] for h in result["history"]] == list(range(1, done + 2))


def _blobs(n: int, seed: int = 0) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    X = (rng.normal(size=(3, 6))[y] * 2 + rng.normal(size=(n, 6))).astype(np.float32)
    return X, y.astype(np.int64)


SPEC = ModelSpec(kind="mlp", input_shape=(6,), n_outputs=3, hidden=(8,))


class _Killed(Exception):
    pass


def test_federated_model_resume_with_another_lr_model_or_data_is_refused(
        tmp_path: Path) -> None:
    X, y = _blobs(150)
    parts = [(X[:50], y[:50]), (X[50:100], y[50:100]), (X[100:], y[100:])]

    def model(lr: float = 0.1, spec: ModelSpec = SPEC, **kw: Any) -> FederatedModel:
        return FederatedModel(spec, FedAvg(local_steps=2, batch_size=10, lr=lr, momentum=0.9),
                              epochs=3, random_state=4, checkpoint=tmp_path, **kw)

    def kill(record: Any, epoch: Any) -> None:
        if record.round == 5:
            raise _Killed

    whole = FederatedModel(SPEC, FedAvg(local_steps=2, batch_size=10, lr=0.1, momentum=0.9),
                           epochs=3, random_state=4).fit(parts)
    with pytest.raises(ProtocolError, match="_Killed"):
        model(callback=kill).fit(parts)
    stopped = load_checkpoint(tmp_path / "server.ckpt")["round"]

    # before: accepted, checkpoints were matched on client names and parameter count only
    with pytest.raises(ValidationError, match=r"made under other settings \(strategy\.lr: "
                       r"0\.1 → 0\.05\)"):
        model(lr=0.05, resume=True).fit(parts)
    wider = ModelSpec(kind="mlp", input_shape=(6,), n_outputs=3, hidden=(9,))
    with pytest.raises(ValidationError, match=r"model\.hidden: \[8\] → \[9\]"):
        model(spec=wider, resume=True).fit(parts)
    other = [parts[0], (X[50:100] + 1, y[50:100]), parts[2]]
    with pytest.raises(ValidationError, match=r"the rows of client\(s\) 'client-2' \(their "
                       r"data differs\)"):
        model(resume=True).fit(other)
    with pytest.raises(ValidationError, match=r"seed: 4 → 5"):
        FederatedModel(SPEC, FedAvg(local_steps=2, batch_size=10, lr=0.1, momentum=0.9),
                       epochs=3, random_state=5, checkpoint=tmp_path, resume=True).fit(parts)
    assert load_checkpoint(tmp_path / "server.ckpt")["round"] == stopped  # nothing trained

    # the same settings (another timeout and concurrency) end with the uninterrupted model
    resumed = model(resume=True, timeout=300.0, concurrency=1).fit(parts)
    np.testing.assert_array_equal(resumed.params_, whole.params_)


def test_a_checkpoint_without_its_settings_is_not_resumed(tmp_path: Path) -> None:
    X, y = _blobs(60)
    parts = [(X[:30], y[:30]), (X[30:], y[30:])]
    strategy = FedAvg(local_steps=2, batch_size=10)
    FederatedModel(SPEC, strategy, epochs=1, checkpoint=tmp_path).fit(parts)
    state = load_checkpoint(tmp_path / "server.ckpt")
    del state["settings"]  # as an islands before this change wrote it
    save_checkpoint(tmp_path / "server.ckpt", state)
    with pytest.raises(ValidationError, match="does not record the settings it was made "
                       "under"):
        FederatedModel(SPEC, strategy, epochs=2, checkpoint=tmp_path, resume=True).fit(parts)


# ----------------------------------------------------------------------------- part 4
def test_islands_run_resume_with_a_damaged_client_checkpoint_names_it(tmp_path: Path) -> None:
    # before: that client failed to load it, became a dropout for the rest of the run, and
    # the run ended 0 with a warning
    job = _job(tmp_path, epochs=200)
    ckpt = tmp_path / "out" / "checkpoints" / "server.ckpt"
    done = _kill_after_epoch([str(job)], ckpt, epoch=1)
    damaged = tmp_path / "out" / "checkpoints" / "client-2.ckpt"
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])  # a copy cut short
    proc = _islands("run", str(job), "--resume", "--set", f"epochs={done + 1}")
    text = _flat(proc.stdout)
    assert proc.returncode == 2, text
    assert f"cannot resume: client 'client-2''s checkpoint {damaged} is damaged" in text
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_flipped_byte_in_a_checkpoint_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.ckpt"
    save_checkpoint(path, {"rounds": [3], "momenta": [np.arange(64, dtype=np.float32)]})
    data = bytearray(path.read_bytes())
    data[-7] ^= 0x10  # inside the momentum buffer: it would still decode
    path.write_bytes(bytes(data))
    with pytest.raises(ValidationError, match=f"checkpoint {path} is damaged"):
        load_checkpoint(path)


def test_islands_party_resume_under_other_settings_or_a_damaged_client_file(
        tmp_path: Path) -> None:
    pytest.importorskip("grpc")
    from sklearn.datasets import load_digits

    from islands.deploy.local import start_parties, wait_parties, write_federation

    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))[:600]
    for k, rows in enumerate(np.array_split(order, 3)):
        np.save(tmp_path / f"c{k}.npy", np.column_stack([X[rows] / 16, y[rows]]))

    def federation(lr: float) -> dict[str, Path]:
        options = {"server": "server", "features": 64, "classes": 10, "seed": 3,
                   "epochs": 100, "model": {"kind": "mlp", "hidden": [16]},
                   "strategy": {"name": "fedavg", "local_steps": 4, "batch_size": 32,
                                "lr": lr, "momentum": 0.9}}
        parties: dict[str, dict[str, Any]] = {
            "server": {"threads": 1}, **{f"c{k}": {"data": f"c{k}.npy", "threads": 1}
                                        for k in range(3)}}
        return write_federation(tmp_path, "hfl", parties, options=options,
                                settings={"liveness": 2.0, "timeout": 60,
                                          "connect_timeout": 30})

    files = federation(0.1)
    procs = start_parties(files)
    ckpt = tmp_path / "out/server.checkpoints/server.ckpt"
    deadline = time.monotonic() + 120
    while not (ckpt.exists() and load_checkpoint(ckpt)["round"] >= 2):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs.values())
        time.sleep(0.05)
    procs["server"].send_signal(signal.SIGKILL)
    wait_parties(procs, files, 60)
    rnd = int(load_checkpoint(ckpt)["round"])

    # another lr in every federation file: the server refuses before it connects
    files = federation(0.05)
    done = wait_parties(start_parties(files, extra_args=["--resume"], only=["server"]),
                        files, 60)
    log = _flat(done["server"].log)
    assert done["server"].returncode == 1, log  # before any connection
    assert "it was made under other settings (strategy.lr: 0.1 → 0.05)" in log

    # the same settings, but one client's checkpoint damaged: the run stops naming it
    files = federation(0.1)
    damaged = tmp_path / "out/c1.checkpoints/c1.ckpt"
    damaged.write_bytes(damaged.read_bytes()[:-40])
    done = wait_parties(start_parties(files, extra_args=["--resume"]), files, 120)
    server_log = _flat(done["server"].log)
    assert done["server"].returncode != 0, server_log
    assert (f"server 'server' resumes after round {rnd}, but not every client does: client "
            f"'c1' refused: client 'c1' cannot resume: checkpoint {damaged} is damaged"
            in server_log)
    assert not (tmp_path / "out/server").exists()


# ----------------------------------------------------------------------------- part 2
# a user's disk that fills, or a kill, while results are written: io.open is wrapped so
# that, once the job's write_outputs starts, writes under the output folder fail (ENOSPC)
# after 64 bytes, or the process dies (os._exit) when a PNG is opened there or at the
# second rename into it
SHIM = r'''
import builtins, errno, io, os, sys
out, mode, budget = os.path.realpath(sys.argv[1]), sys.argv[2], [int(sys.argv[3])]
armed = [False]
real_open, real_replace = io.open, os.replace

def where(file):
    if isinstance(file, int):
        try:
            return os.readlink(f"/proc/self/fd/{file}")
        except OSError:
            return ""
    return os.path.realpath(os.fspath(file))

class Full:
    def __init__(self, f):
        self._f = f
    def write(self, data):
        n = min(len(data), budget[0])
        self._f.write(data[:n])
        budget[0] -= n
        if n < len(data):
            self._f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return n
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

def opening(file, mode_="r", *args, **kwargs):
    f = real_open(file, mode_, *args, **kwargs)
    if armed[0] and any(c in mode_ for c in "wax+") and where(file).startswith(out + os.sep):
        if mode == "kill-at-png" and where(file).endswith(".png"):
            os._exit(137)
        if mode == "full":
            return Full(f)
    return f

renamed = [0]

def replacing(src, dst, *args, **kwargs):
    real_replace(src, dst, *args, **kwargs)
    if armed[0] and mode == "kill-at-rename" and where(dst).startswith(out + os.sep):
        renamed[0] += 1
        if renamed[0] == 2:  # one file of the new set in place, the others not yet
            os._exit(137)

io.open = builtins.open = opening
os.replace = replacing
import islands.hfl.job as job
real = job.write_outputs
def armed_write(*args, **kwargs):
    armed[0] = True
    try:
        return real(*args, **kwargs)
    finally:
        armed[0] = False
job.write_outputs = armed_write
from islands.cli import main
sys.argv = ["islands", *sys.argv[4:]]
main()
'''


def _shim(tmp_path: Path, mode: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "shim.py"
    script.write_text(SHIM)
    return subprocess.run([sys.executable, str(script), str(tmp_path / "out"), mode, "64",
                           *args], env=_env(), text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=300, check=False)


def _finished_run(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    job = _job(tmp_path)
    proc = _islands("run", str(job))
    assert proc.returncode == 0, proc.stdout
    out = tmp_path / "out"
    return job, {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def test_a_full_disk_while_writing_results_is_a_clear_error_and_keeps_the_last_ones(
        tmp_path: Path) -> None:
    # before: results.json truncated mid-write, the previous results lost, a raw OSError
    job, first = _finished_run(tmp_path)
    out = tmp_path / "out"
    # the finished run's checkpoint: --resume writes its results again, without training
    proc = _shim(tmp_path, "full", "run", str(job), "--resume")
    text = _flat(proc.stdout)
    assert proc.returncode == 1, text
    assert "error: cannot write" in text and str(out) in text, text
    assert f"No space left on device (errno 28); the previous results in {out} are " \
           "unchanged" in text
    assert "Traceback" not in text
    assert "--resume writes the results without training again" in text
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == first
    from islands.reporting import check_result_set

    assert check_result_set(out) == json.loads(first["manifest.json"])["run_id"]
    assert load_run(out).results == json.loads(first["results.json"])
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_kill_while_writing_results_leaves_one_runs_complete_set(tmp_path: Path) -> None:
    # before: killed between results.json and the figures, the folder held the new
    # results beside the previous run's figures, and nothing said so
    job, first = _finished_run(tmp_path)
    out = tmp_path / "out"
    proc = _shim(tmp_path, "kill-at-png", "run", str(job), "--resume")
    assert proc.returncode == 137, proc.stdout
    assert (out / "results.json").read_bytes() == first["results.json"]
    from islands.reporting import check_result_set

    run_id = json.loads(first["manifest.json"])["run_id"]
    assert check_result_set(out) == run_id
    assert load_run(out).results == json.loads(first["results.json"])

    # killed half-way through putting a new set in place: readers refuse the mix
    proc = _shim(tmp_path, "kill-at-rename", "run", str(job), "--resume")
    assert proc.returncode == 137, proc.stdout
    with pytest.raises(ValidationError, match=r"the results in .* are (incomplete|not one "
                       r"run's complete set)"):
        load_run(out)
    # a run that completes puts a whole set back
    assert _islands("run", str(job), "--resume").returncode == 0
    assert check_result_set(out) not in (None, run_id)
    assert load_run(out).name == "mix"


# ----------------------------------------------------------------------------- part 3
def test_islands_run_into_a_folder_with_another_runs_results_needs_overwrite(
        tmp_path: Path) -> None:
    # before: the second run trained and overwrote the first one's results without a word
    job, first = _finished_run(tmp_path)
    out = tmp_path / "out"
    ckpt = out / "checkpoints" / "server.ckpt"
    stamp = ckpt.stat().st_mtime_ns
    proc = _islands("run", str(job))
    text = _flat(proc.stdout)
    assert proc.returncode == 2, text
    run_id = json.loads(first["manifest.json"])["run_id"]
    assert (f"error: the output folder {out} holds the results of run {run_id}: pass "
            "--overwrite to replace them, --resume to continue that run, or choose another "
            "--output") in text
    assert ckpt.stat().st_mtime_ns == stamp
    assert (out / "results.json").read_bytes() == first["results.json"]

    proc = _islands("run", str(job), "--overwrite")
    assert proc.returncode == 0, proc.stdout
    from islands.reporting import check_result_set

    assert check_result_set(out) not in (None, run_id)


def test_islands_run_into_an_interrupted_runs_folder_needs_resume_or_overwrite(
        tmp_path: Path) -> None:
    job = _job(tmp_path, epochs=200)
    ckpt = tmp_path / "out" / "checkpoints" / "server.ckpt"
    _kill_after_epoch([str(job)], ckpt, epoch=1)
    before = load_checkpoint(ckpt)["round"]
    proc = _islands("run", str(job), "--set", "epochs=1")
    assert proc.returncode == 2, proc.stdout
    assert "holds the checkpoints of an interrupted run: pass --overwrite" in _flat(
        proc.stdout)
    assert load_checkpoint(ckpt)["round"] == before


# ----------------------------------------------------------------------------- part 5
def test_a_seed_beyond_64_bits_is_refused_before_any_work(tmp_path: Path) -> None:
    # before: a raw traceback ("Overflow when unpacking long long") after 14 s of work
    job = _job(tmp_path)
    proc = _islands("run", str(job), "--set", f"seed={2**80}")
    text = _flat(proc.stdout)
    assert proc.returncode == 2, text
    assert f"'seed' must be an int in [0, {2**63 - 1}]; got {2**80}" in text
    assert "Traceback" not in text and not (tmp_path / "out").exists()


def test_an_output_that_is_a_file_and_a_json_path_under_a_file_are_refused_up_front(
        tmp_path: Path) -> None:
    job = _job(tmp_path)
    (tmp_path / "out").write_text("a file, not a folder\n")
    proc = _islands("run", str(job))
    text = _flat(proc.stdout)
    assert proc.returncode == 2, text
    assert f"error: the output folder {tmp_path / 'out'} is a file, not a folder" in text
    assert "Traceback" not in text
    (tmp_path / "out").unlink()
    proc = _islands("run", str(job), "--json", str(tmp_path / "job.toml" / "r.json"))
    text = _flat(proc.stdout)
    assert proc.returncode == 2, text
    assert f"--json {tmp_path / 'job.toml' / 'r.json'} cannot be created: " \
           f"{tmp_path / 'job.toml'} is a file" in text
    assert not (tmp_path / "out").exists()  # refused before any work


def test_json_into_a_missing_folder_is_written_there(tmp_path: Path) -> None:
    # before: the folder was found missing only after training (a raw FileNotFoundError)
    job = _job(tmp_path)
    target = tmp_path / "new" / "deeper" / "results.json"
    proc = _islands("run", str(job), "--json", str(target))
    assert proc.returncode == 0, proc.stdout
    assert target.read_bytes() == (tmp_path / "out" / "results.json").read_bytes()


def _resume_refused(old: object, new: object, name: str) -> None:
    from islands.hfl.checkpoint import check_settings, shaping_settings, with_settings

    def settings(strategy: object) -> dict[str, object]:
        return shaping_settings(seed=0, task="classification", eval_fraction=0.0,
                                strategy=strategy)

    saved = with_settings({}, settings(old))
    with pytest.raises(ValidationError, match=rf"other settings \(.*{name}"):
        check_settings(saved, settings(new), Path("server.ckpt"))
    check_settings(saved, settings(old), Path("server.ckpt"))  # the same settings resume


def test_apfl_lr_momentum_and_weight_decay_block_a_resume() -> None:
    # review of issue 37: APFL keeps its optimiser in its LocalConfig only, which the
    # settings read through local_config()
    from islands.hfl import APFL

    _resume_refused(APFL(lr=0.1), APFL(lr=0.5), r"strategy\.lr: 0\.1 → 0\.5")
    _resume_refused(APFL(momentum=0.0), APFL(momentum=0.9), r"strategy\.momentum")


def test_every_layer_of_the_aggregator_blocks_a_resume() -> None:
    # review of issue 37: ClientDP's repr left out guaranteed (each client's noise σS/√t),
    # delta and the accountant; every layer's parameters are settings now
    from islands.aggregation.protect import ClientDP
    from islands.aggregation.secagg import SecureAggregation
    from islands.hfl import FedAvg

    def dp(**kw: object) -> FedAvg:
        return FedAvg(aggregator=ClientDP(SecureAggregation(), noise="distributed", **kw))

    _resume_refused(dp(guaranteed=5), dp(guaranteed=2), r"aggregator\.guaranteed: 5 → 2")
    _resume_refused(dp(delta=1e-5), dp(delta=1e-6), r"aggregator\.delta")
    _resume_refused(FedAvg(aggregator=SecureAggregation(threshold=0.5)),
                    FedAvg(aggregator=SecureAggregation(threshold=0.75)),
                    r"aggregator\.threshold")
