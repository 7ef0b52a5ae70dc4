"""PSI with engine='spu': SecretFlow SPU's RR22 in its own environment, driven by islands.

The runs through the real engine need SPU's environment (``make spu`` builds .venv-spu);
they are skipped, saying so, where it is missing. The errors (a missing environment, bad
input, a refused peer, an engine that fails, lies or hangs) are tested without it, with
stand-in workers where the engine's behaviour is the point.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import islands.psi as psi
from islands.deploy.certs import make_certificates
from islands.errors import PeerTimeoutError, ProtocolError, ValidationError
from islands.psi import align, initiator, intersect, responder
from islands.psi._spu_worker import ADDRESS_IN_USE
from islands.psi.spu_engine import (
    SPU_PYTHON_ENV,
    SpuAddressInUse,
    SpuLink,
    SpuParty,
    finish_all,
    free_loopback_hosts,
    new_link_id,
    spu_keys,
    spu_python,
)
from islands.runtime import run_local
from islands.runtime.tls import TlsFiles
from islands.runtime.transcript import Transcript
from spu_env import needs_spu


@needs_spu
def test_spu_equals_the_plain_intersection_and_dh() -> None:
    rng = np.random.default_rng(7)
    universe = rng.choice(10**9, size=3000, replace=False)
    a = universe[:1000]
    b = np.concatenate([a[:300], universe[1000:2400]])
    rng.shuffle(b)
    got_a, got_b = align(a.tolist(), b.tolist(), engine="spu", timeout=120)
    want = set(a.tolist()) & set(b.tolist())
    assert set(got_a.ids) == want and len(got_a.ids) == len(want)
    assert got_a.ids == got_b.ids == sorted(want)  # ints in order of value, as with dh
    assert [a[r] for r in got_a.rows] == got_a.ids and [b[r] for r in got_b.rows] == got_b.ids
    assert got_a.peer_size == 1700 and got_b.peer_size == 1000
    dh_a, dh_b = align(a.tolist(), b.tolist(), workers=1)
    assert dh_a.ids == got_a.ids and np.array_equal(dh_a.rows, got_a.rows)
    assert np.array_equal(dh_b.rows, got_b.rows)


@needs_spu
def test_spu_takes_any_string_or_bytes_id() -> None:
    # commas, quotes, newlines and a composed/decomposed é: IDs no CSV file could hold as
    # they are (islands hands SPU their canonical encoding in hex, the others as they are)
    traces = set(Path("/tmp").glob("psi_*.trace"))
    a = ["ann", 'x,"y"', "line\nbreak", "caf\u00e9", "bob"]
    b = ["cafe\u0301", "line\nbreak", 'x,"y"', "zoe"]
    assert intersect(a, b, engine="spu", timeout=120) == intersect(a, b)
    assert intersect(a, b, engine="spu", timeout=120) == ["caf\u00e9", "line\nbreak", 'x,"y"']
    # one party's IDs all plain (keys written in one pass), the other's mixed: "ann" has
    # one key on both sides
    assert intersect(["ann", "bob"], ["a,b", "ann"], engine="spu", timeout=120) == ["ann"]
    raw_a, raw_b = [b"\x00,\n", b"\xff", b"k"], [b"k", b"\x00,\n"]
    assert intersect(raw_a, raw_b, engine="spu", timeout=120) == [b"\x00,\n", b"k"]
    # SPU's timing traces outside the private directory are gone too
    assert set(Path("/tmp").glob("psi_*.trace")) <= traces


@needs_spu
def test_no_common_id_is_the_same_clear_error_as_dh() -> None:
    with pytest.raises(ValidationError, match="share no IDs"):
        intersect(["a", "b"], ["c", "d"], engine="spu", timeout=120)


@needs_spu
def test_a_users_script_runs_spu_psi(tmp_path: Path) -> None:
    script = tmp_path / "align.py"
    script.write_text(textwrap.dedent("""
        from islands.psi import intersect
        a = [f"user-{i}" for i in range(2000)]
        b = [f"user-{i}" for i in range(1500, 4000)]
        common = intersect(a, b, engine="spu", timeout=120)
        print(len(common), common[0], common[-1])
    """))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["500", "user-1500", "user-1999"]
    assert not list(tmp_path.glob("*.csv"))


def test_a_missing_environment_names_how_to_build_it(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setenv(SPU_PYTHON_ENV, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(ValidationError, match=r"make spu.*engine='dh'"):
        intersect(["a", "b"], ["b"], engine="spu")


def _no_submit(*args: Any, **kw: Any) -> None:
    raise AssertionError("SPU got the IDs")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"engine": "rr22"}, r"The 'engine' parameter of intersect must be 'dh' or 'spu'"),
    ({"ids_a": []}, "is empty"),
    ({"ids_a": ["a", "a"]}, "repeats the ID 'a'"),
    ({"ids_b": [1, 2]}, "ids_a holds str IDs but ids_b holds int IDs"),
    ({"timeout": 0}, "'timeout' parameter of intersect"),
])
def test_bad_input_is_refused_before_spu_gets_an_id(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path, kwargs: dict[str, Any],
                                                    match: str) -> None:
    # SPU's workers start early (importing SPU), but get no ID before every check passed
    monkeypatch.setenv(SPU_PYTHON_ENV, str(_fake_engine(tmp_path, "sys.exit(9)")))
    monkeypatch.setattr(SpuParty, "submit", _no_submit)
    args: dict[str, Any] = {"ids_a": ["a", "b"], "ids_b": ["b", "c"], "engine": "spu"}
    args.update(kwargs)
    with pytest.raises(ValidationError, match=match):
        intersect(args.pop("ids_a"), args.pop("ids_b"), **args)


def test_a_peer_above_the_limit_is_refused_before_spu_gets_an_id(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(SPU_PYTHON_ENV, str(_fake_engine(tmp_path, "sys.exit(9)")))
    monkeypatch.setattr(SpuParty, "submit", _no_submit)
    with pytest.raises(ProtocolError, match="party 'b' refuses party 'a': it announced 30 IDs"):
        align([f"x{i}" for i in range(30)], ["x1", "x2"], engine="spu")


def test_the_roles_refuse_spu_without_its_addresses_before_anything_is_sent() -> None:
    log = Transcript()
    with pytest.raises(ValidationError, match=r"engine='spu' needs spu = \(initiator's"):
        run_local({"a": lambda p: initiator(p, peer="b", ids=["x"], engine="spu"),
                   "b": lambda p: responder(p, peer="a", ids=["x"])}, timeout=10,
                  transcript=log)
    assert [m.tag for m in log.records if m.sender == "a"] == []


def _fake_engine(tmp_path: Path, body: str) -> Path:
    """Write a stand-in for SPU's Python: it reads the worker's request and does ``body``."""
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""
        import json, os, sys, time
        workdir = sys.argv[-2]
        open(os.path.join(workdir, "ready"), "w").close()
        while not os.path.exists(os.path.join(workdir, "go")):
            time.sleep(0.01)
        req = json.load(open(os.path.join(workdir, "request.json")))
        report = req["report"]
    """) + textwrap.dedent(body))
    fake.chmod(0o755)
    return fake


def test_an_engine_that_fails_is_named_with_its_log(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setenv(SPU_PYTHON_ENV, str(_fake_engine(tmp_path, """
        print("link error: peer closed the connection", flush=True)
        sys.exit(1)
    """)))
    with pytest.raises(ProtocolError, match=r"(?s)SPU's PSI with party '.' failed \(exit "
                       r"status 1\).*peer closed the connection"):
        intersect(["a", "b"], ["b"], engine="spu", timeout=60)


def test_an_engine_result_that_does_not_check_out_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    # the engine reports an ID this party never entered ("zz"), or a row it does not hold
    for line, error in (("szz,0", "holds an ID this party does not hold at that row"),
                        ("sa,7", "holds a row this party does not hold"),
                        ("sa", "is malformed")):
        monkeypatch.setenv(SPU_PYTHON_ENV, str(_fake_engine(tmp_path, f"""
            n = sum(1 for _ in open(req["input"])) - 1
            with open(req["output"], "w") as f:
                f.write('"id","row"\\n{line}\\n')
            json.dump({{"original_count": n, "intersection_count": 1}}, open(report, "w"))
        """)))
        with pytest.raises(ProtocolError, match=error):
            intersect(["a", "b"], ["b"], engine="spu", timeout=60)


def test_a_count_that_disagrees_with_the_engine_report_is_refused(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(SPU_PYTHON_ENV, str(_fake_engine(tmp_path, """
        lines = open(req["input"]).read().split()
        with open(req["output"], "w") as f:
            f.write('"id","row"\\n' + lines[1] + "\\n")
        json.dump({"original_count": len(lines) - 1, "intersection_count": 2},
                  open(report, "w"))
    """)))
    with pytest.raises(ProtocolError, match="holds 1 IDs, SPU reports 2"):
        intersect(["a", "b"], ["a", "b"], engine="spu", timeout=60)


def test_an_engine_that_hangs_is_stopped_at_the_timeout(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    fake = _fake_engine(tmp_path, f"""
        open({str(tmp_path)!r} + "/pid-" + str(os.getpid()), "w").close()
        time.sleep(600)
    """)
    monkeypatch.setenv(SPU_PYTHON_ENV, str(fake))
    seen: list[Path] = []
    original = SpuParty.finish

    def finish(self: SpuParty) -> Any:
        assert self._dir is not None
        seen.append(self._dir)
        return original(self)

    monkeypatch.setattr(SpuParty, "finish", finish)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match="did not finish within timeout = 2 s"):
        intersect(["a", "b"], ["b"], engine="spu", timeout=2)
    assert time.monotonic() - t0 < 60  # the call returned, it did not wait for the sleep
    assert seen and not any(d.exists() for d in seen)  # the private files are gone
    pids = [int(p.name[4:]) for p in tmp_path.glob("pid-*")]
    assert len(pids) == 2
    for pid in pids:  # both engine processes were stopped
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_no_engine_is_stopped_before_both_have_their_result(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    """SPU can return before its last message to the peer has left (a party whose SPU
    exited at once left its peer waiting, now and then, until the timeout). The worker
    therefore stays after its result, and islands stops it only once both have theirs;
    a stand-in that behaves like the real worker then waits, and is stopped."""
    monkeypatch.setenv(SPU_PYTHON_ENV, str(_fake_engine(tmp_path, f"""
        lines = open(req["input"]).read().split()[1:]
        with open(req["output"], "w") as f:
            f.write('"id","row"\\n' + "\\n".join(lines) + "\\n")
        json.dump({{"original_count": len(lines), "intersection_count": len(lines)}},
                  open(report, "w"))
        open({str(tmp_path)!r} + "/pid-" + str(os.getpid()), "w").close()
        open(os.path.join(workdir, "finished"), "w").close()
        time.sleep(600)
    """)))
    events: list[tuple[str, str]] = []
    finish, close = SpuParty.finish, SpuParty.close

    def finishing(self: SpuParty) -> Any:
        out = finish(self)
        events.append(("result", self.name))
        return out

    def closing(self: SpuParty) -> None:
        if self._dir is not None:
            assert self._proc is not None
            events.append(("close", self.name) if self._proc.poll() is None
                          else ("gone before close", self.name))
        close(self)

    monkeypatch.setattr(SpuParty, "finish", finishing)
    monkeypatch.setattr(SpuParty, "close", closing)
    t0 = time.monotonic()
    assert intersect(["a", "b"], ["a", "b"], engine="spu", timeout=60) == ["a", "b"]
    assert time.monotonic() - t0 < 30  # it did not wait for the stand-ins to exit
    assert sorted(events[:2]) == [("result", "a"), ("result", "b")]
    assert sorted(events[2:]) == [("close", "a"), ("close", "b")]
    pids = [int(p.name[4:]) for p in tmp_path.glob("pid-*")]
    assert len(pids) == 2
    for pid in pids:  # both stopped once both had their result
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@needs_spu
def test_a_peer_that_never_comes_times_out() -> None:
    # one real SPU party whose peer address has nobody behind it
    hosts = free_loopback_hosts(2)
    party = SpuParty("a", "b", SpuLink(new_link_id(), (hosts[0], hosts[1]), 0), timeout=5)
    party.start([b"sx", b"sy"])
    with pytest.raises(PeerTimeoutError, match="party 'a': SPU's PSI with party 'b' did not"):
        party.finish()


def test_spu_python_prefers_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPU_PYTHON_ENV, sys.executable)
    assert spu_python() == Path(sys.executable)
    monkeypatch.delenv(SPU_PYTHON_ENV)
    try:
        got = spu_python()
    except ValidationError as exc:
        assert ".venv-spu" in str(exc)
    else:
        assert got.parts[-3:] == (".venv-spu", "bin", "python")


def test_the_request_is_json_and_the_ids_never_reach_the_command_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # what the worker gets: argv holds paths only; the request is plain JSON
    monkeypatch.setenv(SPU_PYTHON_ENV, str(_fake_engine(tmp_path, f"""
        import shutil
        shutil.copy(os.path.join(workdir, "request.json"), {str(tmp_path / 'request.json')!r})
        open({str(tmp_path / 'argv.txt')!r}, "w").write(" ".join(sys.argv))
        sys.exit(2)
    """)))
    with pytest.raises(ProtocolError):
        intersect(["secret-id"], ["secret-id"], engine="spu", timeout=60)
    req = json.loads((tmp_path / "request.json").read_text())
    assert req["protocol"] == "PROTOCOL_RR22" and req["tls"] is None
    assert "secret-id" not in (tmp_path / "argv.txt").read_text()


def _run_pair(tls_a: TlsFiles | None, tls_b: TlsFiles | None,
              timeout: float) -> list[NDArray[np.int64]]:
    ids_a = [b"s" + f"u{i}".encode() for i in range(200)]
    ids_b = [b"s" + f"u{i}".encode() for i in range(150, 400)]
    hosts = free_loopback_hosts(2)
    link = new_link_id()
    parties = [SpuParty("a", "b", SpuLink(link, (hosts[0], hosts[1]), 0, tls_a),
                        timeout=timeout),
               SpuParty("b", "a", SpuLink(link, (hosts[0], hosts[1]), 1, tls_b),
                        timeout=timeout)]
    try:
        for p, ids in zip(parties, (ids_a, ids_b), strict=True):
            p.launch()
            p.submit(ids)
        for p in parties:
            p.wait_ready()
        for p in parties:
            p.go()
        return [p.finish() for p in parties]
    finally:
        for p in parties:
            p.close()


def _tls(root: Path, name: str) -> TlsFiles:
    return TlsFiles(root / "ca.pem", root / f"{name}.pem", root / f"{name}.key")


@needs_spu
def test_spu_link_runs_over_the_federations_mutual_tls(tmp_path: Path) -> None:
    make_certificates(["a", "b"], tmp_path / "fed")
    rows_a, rows_b = _run_pair(_tls(tmp_path / "fed", "a"), _tls(tmp_path / "fed", "b"),
                               timeout=120)
    assert sorted(rows_a.tolist()) == list(range(150, 200))
    assert sorted(rows_b.tolist()) == list(range(50))


@needs_spu
@pytest.mark.parametrize("intruder", ["other CA", "no TLS"])
def test_a_peer_without_the_federations_certificate_gets_nothing(tmp_path: Path,
                                                                 intruder: str) -> None:
    make_certificates(["a", "b"], tmp_path / "fed")
    make_certificates(["b"], tmp_path / "other")
    tls_b = _tls(tmp_path / "other", "b") if intruder == "other CA" else None
    # another CA's certificate is named as such; a peer without TLS never gets through
    error, message = ((ProtocolError, "the SPU of party 'b' presented a certificate this "
                       "party's SPU does not accept") if intruder == "other CA"
                      else (PeerTimeoutError, "did not finish within timeout"))
    with pytest.raises(error, match=message):
        _run_pair(_tls(tmp_path / "fed", "a"), tls_b, timeout=6)


def test_each_id_gets_one_csv_key_whatever_else_the_party_holds() -> None:
    plain = [b"sann", b"i-12", b"bk"]
    odd = [b"sa,b", b'sx"y', b"s a", b"sline\nbreak", b"b\x00\xff", "scaf\u00e9".encode()]
    keys = spu_keys(plain + odd)
    assert keys[:3] == plain  # plain encodings are their own key, also beside odd ones
    assert spu_keys(plain) == plain  # (the one-pass path)
    assert keys[3:] == [b"x" + e.hex().encode() for e in odd]
    assert len(set(keys)) == len(keys)
    assert not any(c in k for k in keys for c in (b",", b'"', b" ", b"\n", b"\r"))


@contextlib.contextmanager
def _late_replies(target: str, delay: float) -> Iterator[str]:
    """A TCP relay to ``target`` that passes what the target sends back ``delay`` s late.

    Yields the relay's ``host:port``. A party that reaches its peer through it gets every
    reply late (a slow network, a busy peer), while what it sends arrives at once.
    """
    host, port = target.rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()
    sockets: list[socket.socket] = [listener]

    def pump(src: socket.socket, dst: socket.socket, late: float) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                time.sleep(late)
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection((host, int(port)), timeout=5)
            except OSError:  # the target does not listen yet: as if refused
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            sockets.extend((client, upstream))
            threading.Thread(target=pump, args=(client, upstream, 0.0), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client, delay), daemon=True).start()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        server.join(5)
        for s in sockets:
            s.close()


def _listening(host: str, deadline: float) -> None:
    """Wait until something listens on ``host`` (``host:port``)."""
    ip, port = host.rsplit(":", 1)
    while True:
        try:
            socket.create_connection((ip, int(port)), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {host}"
            time.sleep(0.02)


@needs_spu
def test_a_late_reply_on_spus_link_does_not_stall_its_start() -> None:
    """SPU's link says hello twice under the same message keys: once when it opens
    (create_brpc) and again when the PSI starts; a party keeps one message per key and
    drops a second that comes before it read the first. B reads A's first hello only
    after A's reply to B's own hello; when that reply is late, A (which has B's hello)
    sends its second hello before B read the first, B drops it, and both SPUs waited
    at "[AbstractPsiParty::Init] start" for the whole timeout. On a busy machine this
    happened in about 1 run in 60; here A's replies to B come 0.5 s late, and B listens
    before A starts, so that A's first hello is there early: without the barrier after
    the link opens (islands.psi._spu_worker), every run stalls."""
    ids_a = [b"s" + f"u{i}".encode() for i in range(8)]
    ids_b = [b"s" + f"u{i}".encode() for i in range(4, 12)]
    hosts = free_loopback_hosts(2)
    link = new_link_id()
    with _late_replies(hosts[0], 0.5) as via:
        # B reaches A through the relay, A reaches B directly; a stall shows as
        # PeerTimeoutError at the timeout
        parties = [SpuParty("a", "b", SpuLink(link, (hosts[0], hosts[1]), 0), timeout=60),
                   SpuParty("b", "a", SpuLink(link, (via, hosts[1]), 1), timeout=60)]
        try:
            for p, ids in zip(parties, (ids_a, ids_b), strict=True):
                p.launch()
                p.submit(ids)
            for p in parties:
                p.wait_ready()
            parties[1].go()
            _listening(hosts[1], time.monotonic() + 20)
            parties[0].go()
            rows_a, rows_b = finish_all(parties)
        finally:
            for p in parties:
                p.close()
    assert sorted(rows_a.tolist()) == [4, 5, 6, 7]
    assert sorted(rows_b.tolist()) == [0, 1, 2, 3]


@needs_spu
def test_a_port_taken_before_spu_listens_is_named_at_once() -> None:
    # another process took B's port between its choice and SPU's listening on it: B's
    # SPU says so at once, and A, which would wait for B until its timeout, is stopped
    hosts = free_loopback_hosts(2)
    taken = socket.create_server(("127.0.0.1", int(hosts[1].rsplit(":", 1)[1])))
    link = new_link_id()
    # A waiting for B until its timeout shows as PeerTimeoutError
    parties = [SpuParty("a", "b", SpuLink(link, (hosts[0], hosts[1]), 0), timeout=60),
               SpuParty("b", "a", SpuLink(link, (hosts[0], hosts[1]), 1), timeout=60)]
    try:
        for p in parties:
            p.start([b"sx", b"sy"])
        with pytest.raises(SpuAddressInUse,
                           match=f"party 'b': SPU cannot listen on {re.escape(hosts[1])}: "
                                 "another process holds that address"):
            finish_all(parties)
    finally:
        for p in parties:
            p.close()
        taken.close()


@needs_spu
def test_intersect_starts_again_on_fresh_ports_when_one_was_taken(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = free_loopback_hosts
    calls: list[tuple[str, ...]] = []
    taken: list[socket.socket] = []

    def hosts(n: int = 2) -> tuple[str, ...]:
        got = fresh(n)
        if not calls:  # the first run's second port is taken before SPU listens
            taken.append(socket.create_server(("127.0.0.1", int(got[1].rsplit(":", 1)[1]))))
        calls.append(got)
        return got

    monkeypatch.setattr(psi, "free_loopback_hosts", hosts)
    try:
        # without a new start, A waits for B until the timeout: PeerTimeoutError
        assert intersect(["a", "b", "c"], ["c", "b", "z"], engine="spu", timeout=60) == \
            ["b", "c"]
    finally:
        for s in taken:
            s.close()
    assert len(calls) == 2


@pytest.mark.parametrize(("stop", "match"), [
    (f"sys.exit({ADDRESS_IN_USE})", "another process holds that address"),
    # the worker saw brpc fail to listen, but the holder had let go when it looked
    ("print('E1128 server.cpp:1088] Fail to listen ' + req['hosts'][1], flush=True); "
     "sys.exit(1)", "another process held that address when SPU started"),
])
def test_a_port_that_stays_taken_is_named_after_a_few_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stop: str, match: str) -> None:
    # a stand-in SPU whose party B can never listen: three starts, then the error, long
    # before the timeout (without SPU's environment)
    monkeypatch.setenv(SPU_PYTHON_ENV, str(_fake_engine(tmp_path, f"""
        if req["rank"] == 1:
            {stop}
        time.sleep(600)
    """)))
    calls: list[int] = []
    fresh = free_loopback_hosts

    def hosts(n: int = 2) -> tuple[str, ...]:
        calls.append(n)
        return fresh(n)

    monkeypatch.setattr(psi, "free_loopback_hosts", hosts)
    with pytest.raises(SpuAddressInUse,
                       match=rf"party 'b': SPU cannot listen on 127\.0\.0\.1:\d+: {match}"):
        intersect(["a", "b"], ["b"], engine="spu", timeout=60)
    assert len(calls) == 3
