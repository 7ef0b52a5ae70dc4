"""Horizontal FL under faults: malformed uploads are one client's dropout; resume agrees."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from islands.aggregation.base import MeanAggregator
from islands.errors import ProtocolError, ValidationError
from islands.hfl import FedAvg, FederatedModel
from islands.hfl.checkpoint import load_checkpoint
from islands.hfl.protocol import LocalOutcome, WrappedLearner, client, server
from islands.runtime import run_local

torch = pytest.importorskip("torch")

from islands.hfl.torch.learner import TorchLearner  # noqa: E402
from islands.hfl.torch.models import ModelSpec, flat_parameters  # noqa: E402

SPEC = ModelSpec(kind="mlp", input_shape=(6,), n_outputs=3, hidden=(8,))
NAMES = ["c0", "c1", "c2"]


def _blobs(n: int, d: int = 6, classes: int = 3, seed: int = 0) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    centres = rng.normal(size=(classes, d)) * 2
    X = (centres[y] + rng.normal(size=(n, d))).astype(np.float32)
    return X, y.astype(np.int64)


def _forge(params: Any, kind: str) -> Any:
    bad = np.array(params, copy=True)
    if kind == "nan":
        bad[0] = np.nan
    elif kind == "short":
        bad = bad[:-1]
    else:
        bad[:] = 1e30
    return bad


class _BadLearner(WrappedLearner):
    """A client whose training returns a malformed model (its own checks catch it)."""

    def __init__(self, inner: Any, kind: str) -> None:
        self.inner, self.kind = inner, kind

    def evaluate(self, params: Any) -> float:
        return float(self.inner.evaluate(params))

    def train(self, params: Any, **kw: Any) -> LocalOutcome:
        out = self.inner.train(params, **kw)
        return LocalOutcome(params=_forge(out.params, self.kind), state=out.state,
                            loss=out.loss)


class _Forger:
    """A deviating client half: uploads a malformed payload, skipping every own check."""

    def __init__(self, inner: Any, kind: str) -> None:
        self.inner, self.kind = inner, kind

    def on_step(self, party: Any, *, server: str, step: Any) -> Any:
        return self.inner.on_step(party, server=server, step=step)

    def open(self, payload: Any) -> Any:
        return self.inner.open(payload)

    def payload(self, party: Any, *, server: str, round: int, params: Any, base: Any,
                weight: float) -> Any:
        if self.kind in ("short", "half"):  # the encoding of a vector of the wrong length
            n = params.size - 1 if self.kind == "short" else params.size // 2
            return self.inner.payload(party, server=server, round=round,
                                      params=params[:n], base=base[:n], weight=weight)
        return _forge(params, self.kind)


def _roles(strategy: Any, *, bad: dict[str, str] | None = None, forged: bool = False,
           epochs: int = 2, checkpoint: Path | None = None,
           resume: dict[str, bool] | None = None, on_round: Any = None) -> dict[str, Any]:
    X, y = _blobs(120)
    parts = [(X[i::3], y[i::3]) for i in range(3)]
    bad = bad or {}
    resume = resume or {}
    roles: dict[str, Any] = {"server": partial(
        server, clients=NAMES, strategy=strategy, initial=flat_parameters(SPEC.build(0)),
        epochs=epochs, client_timeout=60, checkpoint=checkpoint,
        resume=resume.get("server", False), on_round=on_round)}
    for k, name in enumerate(NAMES):
        learner: Any = TorchLearner(SPEC, *parts[k], seed=k)
        half = strategy.aggregator.client_half()
        if name in bad and forged:
            half = _Forger(half, bad[name])
        elif name in bad:
            learner = _BadLearner(learner, bad[name])
        roles[name] = partial(client, server="server", learner=learner,
                              aggregator=strategy.aggregator, half=half,
                              checkpoint=checkpoint, resume=resume.get(name, False))
    return roles


def _run(roles: dict[str, Any]) -> Any:
    return run_local(roles, tolerate=NAMES, timeout=120, blas_threads=None)


# ----------------------------------------------------------------------------- malformed
@pytest.mark.parametrize("forged", [False, True], ids=["own-check", "server-check"])
@pytest.mark.parametrize("kind", ["nan", "short", "huge"])
def test_a_malformed_update_is_that_clients_dropout(kind: str, forged: bool) -> None:
    # before: the whole run stopped with a ProtocolError, and for 1e30 it named c0, an
    # honest client whose next model overflowed
    strategy = FedAvg(local_steps=2, batch_size=5, lr=0.1, min_clients=2)
    run = _run(_roles(strategy, bad={"c1": kind}, forged=forged))
    res = run.results["server"]
    assert [(d.round, d.client, d.reason, d.stage) for d in res.dropouts] == [
        (1, "c1", "malformed update", "update")]
    assert res.dropouts[0].detail  # what was wrong, for the log and results.json
    # c1 is not asked again; the others finish every round with a finite model
    assert all(r.survivors == 2 for r in res.rounds) and res.rounds[-1].clients == 2
    assert np.all(np.isfinite(res.params)) and np.max(np.abs(res.params)) < 100
    assert set(run.results) >= {"c0", "c2"}
    if not forged:  # the honest client stops with its own reason
        assert isinstance(run.failures["c1"], ValidationError)
        assert "cannot upload its update of round 1" in str(run.failures["c1"])


def test_the_server_check_names_the_parameter_limit() -> None:
    strategy = FedAvg(local_steps=2, batch_size=5, lr=0.1, min_clients=2,
                      aggregator=MeanAggregator(max_abs=50.0))
    run = _run(_roles(strategy, bad={"c2": "huge"}, forged=True, epochs=1))
    (drop,) = run.results["server"].dropouts
    assert drop.client == "c2" and "max_abs=50" in drop.detail
    with pytest.raises(ValidationError, match="'max_abs' parameter of MeanAggregator"):
        MeanAggregator(max_abs=float("nan"))


def test_too_many_malformed_updates_is_a_clear_error() -> None:
    strategy = FedAvg(local_steps=2, batch_size=5, lr=0.1, min_clients=2)
    with pytest.raises(ProtocolError, match=r"round 1: only 1 of 3 clients returned an update, "
                       r"fewer than min_clients=2 \(left out: 'c0': malformed update, "
                       r"'c2': malformed update\)"):
        _run(_roles(strategy, bad={"c0": "nan", "c2": "huge"}, forged=True))


@pytest.mark.parametrize("kind", ["nan", "huge", "short"])
def test_secure_aggregation_drops_a_malformed_client_and_unmasks_the_rest(kind: str) -> None:
    from islands.aggregation.secagg import SecureAggregation

    # nan/huge: the honest encoder refuses them (the client drops out, saying why);
    # short: a forged masked vector of the wrong length, refused by the server
    plain = FedAvg(local_steps=2, batch_size=5, lr=0.1, min_clients=2)
    secure = FedAvg(local_steps=2, batch_size=5, lr=0.1, min_clients=2,
                    aggregator=SecureAggregation(threshold=2))
    ref = _run(_roles(plain, bad={"c1": kind}, forged=kind == "short"))
    run = _run(_roles(secure, bad={"c1": kind}, forged=kind == "short"))
    res = run.results["server"]
    assert [(d.client, d.reason, d.stage) for d in res.dropouts] == [
        ("c1", "malformed update", "update")]
    # the masks of the dropped client are removed: the mean of the other two, up to
    # the fixed-point encoding's rounding
    np.testing.assert_allclose(res.params, ref.results["server"].params, atol=1e-5)


@pytest.mark.parametrize("scheme", ["ckks", "paillier"])
def test_homomorphic_aggregators_drop_an_upload_of_another_length(scheme: str) -> None:
    pytest.importorskip("tenseal" if scheme == "ckks" else "phe")
    from islands.aggregation.protect import build_aggregator

    strategy = FedAvg(local_steps=2, batch_size=5, lr=0.1, min_clients=2,
                      aggregator=build_aggregator([scheme], {}))
    # c0's upload comes first: it is checked against the expected size, not the others'
    run = _run(_roles(strategy, bad={"c0": "half"}, forged=True, epochs=1))
    res = run.results["server"]
    assert [(d.client, d.reason) for d in res.dropouts] == [("c0", "malformed update")]
    assert res.rounds[0].survivors == 2
    opened = run.results["c2"].params  # the clients open the mean of c1 and c2
    assert opened is not None and np.all(np.isfinite(opened))


def test_estimator_records_a_malformed_client(tmp_path: Path) -> None:
    X, y = _blobs(300)
    parts = [(X[i::3], y[i::3]) for i in range(3)]
    fl = FederatedModel(SPEC, FedAvg(local_steps=2, batch_size=10, lr=0.2, min_clients=2),
                        epochs=2, random_state=1)
    with pytest.warns(UserWarning, match=r"client-2: malformed update"):
        fl.fit(parts, behaviour={"client-2": partial(_BadLearner, kind="huge")})
    assert [(d.client, d.reason) for d in fl.dropouts_] == [("client-2", "malformed update")]
    assert "client-2" in fl.client_failures_ and np.all(np.isfinite(fl.params_))


# ----------------------------------------------------------------------------- resume
class _Killed(Exception):
    pass


def _interrupted(tmp_path: Path, at: int = 4) -> None:
    def kill(record: Any, model: Any) -> None:
        if record.round == at:
            raise _Killed

    strategy = FedAvg(local_steps=2, batch_size=5, lr=0.1, momentum=0.9)
    with pytest.raises(ProtocolError, match="_Killed"):
        _run(_roles(strategy, epochs=3, checkpoint=tmp_path, on_round=kill))
    # the round whose observer failed is not checkpointed
    assert load_checkpoint(tmp_path / "server.ckpt")["round"] == at - 1


def test_a_resumed_server_with_fresh_clients_is_refused_naming_them(tmp_path: Path) -> None:
    # before: the clients started again with no momentum buffer and the run finished
    # with another model, silently
    _interrupted(tmp_path)
    strategy = FedAvg(local_steps=2, batch_size=5, lr=0.1, momentum=0.9)
    with pytest.raises(ProtocolError) as info:
        _run(_roles(strategy, epochs=3, checkpoint=tmp_path,
                    resume={"server": True, "c0": True, "c2": True}))
    msg = " ".join(str(info.value).split())
    assert "server 'server' resumes after round 3, but not every client does" in msg
    assert ("client 'c1' would start from round 0 (it was started without resume), but the "
            "server resumes after round 3") in msg
    assert "'c0' refused" not in msg and "'c2' refused" not in msg
    # nothing was overwritten: a correct restart still resumes exactly
    assert load_checkpoint(tmp_path / "c1.ckpt")["rounds"] == [3, 4]


def test_a_fresh_server_with_a_resuming_client_is_refused(tmp_path: Path) -> None:
    _interrupted(tmp_path)
    strategy = FedAvg(local_steps=2, batch_size=5, lr=0.1, momentum=0.9)
    with pytest.raises(ProtocolError, match=r"server 'server' starts afresh \(round 0\), but not "
                       r"every client does: client 'c2' refused: client 'c2' resumes from its "
                       r"checkpoint \(round 4\)"):
        _run(_roles(strategy, epochs=3, checkpoint=tmp_path, resume={"c2": True}))


def test_an_agreed_resume_ends_with_the_uninterrupted_model(tmp_path: Path) -> None:
    strategy = FedAvg(local_steps=2, batch_size=5, lr=0.1, momentum=0.9)
    whole = _run(_roles(strategy, epochs=3)).results["server"]
    _interrupted(tmp_path / "ck")
    everyone = dict.fromkeys(["server", *NAMES], True)
    strategy = FedAvg(local_steps=2, batch_size=5, lr=0.1, momentum=0.9)
    res = _run(_roles(strategy, epochs=3, checkpoint=tmp_path / "ck",
                      resume=everyone)).results["server"]
    assert res.resumed_from == 3 and len(res.rounds) == len(whole.rounds)
    np.testing.assert_array_equal(res.params, whole.params)


# ----------------------------------------------------------------------------- islands run
JOB = """
name = "faults"
seed = 0
epochs = {epochs}
output = "{out}"
baseline = false
concurrency = 3

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


def _cli(*args: str, **kw: Any) -> subprocess.Popen[str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src, "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "islands.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def test_islands_run_interrupted_says_how_to_resume_and_keeps_the_history(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = tmp_path / "job.toml"
    job.write_text(JOB.format(epochs=200, out=out))  # far more than it will run
    # a shell that starts a command in the background (CI may) hands it SIGINT ignored;
    # the user's Ctrl-C reaches a command in the foreground, so restore the default
    proc = _cli("run", str(job),
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ckpt = out / "checkpoints" / "server.ckpt"
    deadline = time.monotonic() + 240
    while not ckpt.exists() or load_checkpoint(ckpt)["epoch"] < 2:
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "no checkpoint of epoch 2"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, text
    flat = " ".join(text.split())
    assert "interrupted" in flat and f"islands run {job} --resume" in flat, flat
    assert not (out / "results.json").exists()

    # the same job with fewer epochs, so that the test is quick
    done_epoch = int(load_checkpoint(ckpt)["epoch"])
    job.write_text(JOB.format(epochs=done_epoch + 2, out=out))
    proc = _cli("run", str(job), "--resume")
    text, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, text
    result = json.loads((out / "results.json").read_text())
    assert [h["epoch"] for h in result["history"]] == list(range(1, done_epoch + 3))
    assert result["resumed_from"] > 0 and result["rounds"] == len(result["tau"])
    # no round after Ctrl-C was checkpointed with its clients stopped as dropouts
    assert result["dropouts"] == []


# ----------------------------------------------------------------------------- islands party
def test_islands_party_server_resumed_alone_is_refused_by_the_clients(tmp_path: Path) -> None:
    pytest.importorskip("grpc")
    from sklearn.datasets import load_digits

    from islands.deploy.local import start_parties, wait_parties, write_federation

    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))[:600]
    for k, rows in enumerate(np.array_split(order, 3)):
        np.save(tmp_path / f"c{k}.npy", np.column_stack([X[rows] / 16, y[rows]]))
    options = {"server": "server", "features": 64, "classes": 10, "seed": 3, "epochs": 100,
               "model": {"kind": "mlp", "hidden": [16]},
               "strategy": {"name": "fedavg", "local_steps": 4, "batch_size": 32, "lr": 0.1,
                            "momentum": 0.9}}
    parties: dict[str, dict[str, Any]] = {"server": {"threads": 1},
               **{f"c{k}": {"data": f"c{k}.npy", "threads": 1} for k in range(3)}}
    files = write_federation(tmp_path, "hfl", parties, options=options,
                             settings={"liveness": 2.0, "timeout": 60})
    procs = start_parties(files)
    ckpt = tmp_path / "out/server.checkpoints/server.ckpt"
    deadline = time.monotonic() + 120
    while not ckpt.exists():
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs.values())
        time.sleep(0.05)
    procs["server"].send_signal(signal.SIGKILL)
    wait_parties(procs, files, 60)

    # the operator restarts the server with --resume but the clients without it
    procs = {**start_parties(files, extra_args=["--resume"], only=["server"]),
             **start_parties(files, only=["c0", "c1", "c2"])}
    done = wait_parties(procs, files, 120)
    assert all(d.returncode != 0 for d in done.values()), {n: d.log[-800:] for n, d in
                                                           done.items()}
    rnd = int(load_checkpoint(ckpt)["round"])
    server_log = " ".join(done["server"].log.split())
    assert f"server 'server' resumes after round {rnd}, but not every client does" in server_log
    for name in ("c0", "c1", "c2"):
        assert (f"client '{name}' would start from round 0 (it was started without resume), "
                f"but the server resumes after round {rnd}") in server_log
        assert "would start from round 0" in " ".join(done[name].log.split())
    assert not (tmp_path / "out/server").exists()


def test_a_client_checkpoint_written_before_the_generic_state_still_resumes() -> None:
    from islands.hfl.protocol import _resume_state

    buf = np.arange(5, dtype=np.float32)
    state, keep = _resume_state("c1", 3, {"rounds": [2, 3], "momenta": [buf - 1, buf]}, True)
    np.testing.assert_array_equal(state, buf)
    assert keep["rounds"] == [3] and np.array_equal(keep["states"][0], buf)
    state, _ = _resume_state("c1", 2, {"rounds": [2, 3], "states": [buf - 1, buf]}, True)
    np.testing.assert_array_equal(state, buf - 1)
