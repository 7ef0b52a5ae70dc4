"""Progress of long operations: PSI and key generation report through a callback."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from islands.errors import ProtocolError, ValidationError
from islands.progress import ProgressUpdate, task
from islands.psi import intersect


class Recorder:
    """Collects updates from the parties' threads."""

    def __init__(self) -> None:
        self.updates: list[ProgressUpdate] = []
        self._lock = threading.Lock()

    def __call__(self, update: ProgressUpdate) -> None:
        with self._lock:
            self.updates.append(update)

    def of(self, name: str) -> list[ProgressUpdate]:
        return [u for u in self.updates if u.task == name]


def test_psi_reports_each_party_s_steps() -> None:
    seen = Recorder()
    common = intersect([f"id{i}" for i in range(30)], [f"id{i}" for i in range(20, 60)],
                       workers=1, progress=seen)
    assert len(common) == 10
    for name in ("PSI a", "PSI b"):
        steps = seen.of(name)
        assert [u.done for u in steps] == [0, 1, 2, 3, 4, 4], steps
        assert steps[-1].finished and steps[-1].info == "done"
        assert not any(u.finished for u in steps[:-1])
        assert steps[-2].info == "10 common IDs"
    assert "30 IDs here, 40 at b" in {u.info for u in seen.of("PSI a")}


def test_psi_refuses_a_bad_progress_argument_before_running() -> None:
    with pytest.raises(ValidationError, match="'progress' parameter of intersect"):
        intersect([1, 2], [2, 3], progress="yes")


def test_psi_reports_a_failed_run() -> None:
    seen = Recorder()
    with pytest.raises(ProtocolError, match="refuses party"):
        intersect([1, 2, 3], [3, 4, 5], workers=1, max_peer_size=2, progress=seen)
    finished = [u for u in seen.updates if u.finished]
    assert finished and {u.info for u in finished} == {"failed"}


def test_paillier_key_generation_reports_progress() -> None:
    from islands.crypto.paillier import generate_djn_keypair, generate_keypair

    seen = Recorder()
    generate_keypair(1024, progress=seen)
    assert [(u.task, u.done, u.total, u.finished) for u in seen.updates] == [
        ("Paillier keys (1024 bits)", 0, 1, False), ("Paillier keys (1024 bits)", 1, 1, True)]
    seen = Recorder()
    _, private_key, hs = generate_djn_keypair(1024, progress=seen)
    infos = [u.info for u in seen.updates]
    assert infos[0] == "starting" and infos[-2:] == ["DJN base h_s", "done"]
    assert "prime pair drawn" in infos and seen.updates[-1].finished
    # no secret reaches the callback: the updates hold names, counts and step names only
    text = repr(seen.updates)
    assert str(private_key.p) not in text and str(hs) not in text


def test_ou_key_generation_reports_progress() -> None:
    heu = pytest.importorskip("islands.crypto.heu")
    if not heu.available():
        pytest.skip("sf-heu is not installed")
    seen = Recorder()
    heu.OuKeyOwner(2048, progress=seen)
    assert [(u.done, u.finished) for u in seen.updates] == [(0, False), (1, True)]
    assert seen.updates[0].task == "OU keys (2048 bits)"


def test_bars_draw_in_a_terminal_without_a_callback() -> None:
    code = ("from islands.progress import task\n"
            "with task(True, 'keys', 2) as t:\n"
            "    t.advance(info='first')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert "keys" in out.stdout and "2/2" in out.stdout and "done" in out.stdout


def test_task_rejects_an_unknown_progress_value() -> None:
    with (pytest.raises(ValidationError, match="'progress' parameter of f must be True"),
          task(3, "x", owner="f")):
        pass


def test_the_audits_report_their_steps_and_refuse_a_bad_progress() -> None:
    import numpy as np

    from islands.cca.audit import audit_scca
    from islands.data import load_sklearn, split_image_views
    from islands.pca.audit import audit_pca

    ds = load_sklearn("digits")
    assert ds.image_shape is not None
    left, right = split_image_views(ds.X, ds.image_shape)
    seen = Recorder()
    audit_scca(left, right, protocol="secure", progress=seen)
    steps = seen.of("audit scca")
    assert [u.done for u in steps] == [0, 0, 1, 2, 3] and steps[-1].finished
    assert steps[-1].info == "done" and "simulation check" in steps[-2].info
    parts = np.array_split(np.random.default_rng(0).normal(size=(300, 8)), 3)
    audit_pca(parts, n_components=2, progress=seen)
    assert [u.done for u in seen.of("audit pca")] == [0, 0, 1, 2]
    with pytest.raises(ValidationError, match="'progress'"):
        audit_pca(parts, n_components=2, progress="yes")
    failing = Recorder()
    with pytest.raises(ValidationError):
        audit_scca(left, right[:10], progress=failing)
    assert failing.updates[-1].info == "failed"
