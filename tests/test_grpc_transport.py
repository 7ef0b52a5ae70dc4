"""The gRPC transport: mutual TLS, chunked messages, run IDs, sequence numbers, faults.

Parties run as threads of this process here, each with its own transport and its own
gRPC server on a loopback port; tests/test_deploy.py runs them as separate processes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

grpc = pytest.importorskip("grpc")

from islands.deploy.certs import make_certificates, party_name_of  # noqa: E402
from islands.errors import (  # noqa: E402
    PeerFailedError,
    PeerTimeoutError,
    ProtocolError,
    ValidationError,
)
from islands.runtime.grpc_transport import (  # noqa: E402
    HEADER_KEY,
    GrpcTransport,
    _pack,
    loopback_addresses,
    run_party,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_certificates(["a", "b", "c"], tmp_path_factory.mktemp("certs"))


def run_all(roles: dict[str, Any], certs: Any, **kwargs: Any) -> dict[str, Any]:
    """Run each role with run_party in its own thread; return results or exceptions."""
    addresses = kwargs.pop("addresses", None) or loopback_addresses(list(roles))
    out: dict[str, Any] = {}

    def go(name: str, role: Any) -> None:
        try:
            out[name] = run_party(name, role, addresses, tls=certs.parties[name],
                                  digest=kwargs.get("digest", "d"),
                                  **{k: v for k, v in kwargs.items() if k != "digest"})
        except Exception as exc:
            out[name] = exc

    threads = [threading.Thread(target=go, args=item) for item in roles.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return out


def _started_and_joined(threads: list[threading.Thread], join: float = 60) -> float:
    """Start the threads, wait for each (``join`` s at most); return the seconds taken."""
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(join)
    return time.monotonic() - t0


def ping(party: Any, payload: Any) -> Any:
    party.send("b", "ping", payload)
    return party.recv("b", "pong")


def pong(party: Any) -> str:
    value = party.recv("a", "ping")
    party.send("a", "pong", value)
    return "ok"


def test_certificates_name_their_party(certs: Any) -> None:
    assert party_name_of(certs.parties["b"].cert.read_bytes()) == "b"
    assert (certs.ca_key.stat().st_mode & 0o777) == 0o600
    assert (certs.parties["a"].key.stat().st_mode & 0o777) == 0o600
    with pytest.raises(ValidationError, match="refusing to overwrite"):
        make_certificates(["a"], certs.ca_cert.parent)


def test_round_trip_over_mutual_tls(certs: Any) -> None:
    data = {"x": np.arange(12.0).reshape(3, 4), "s": "hello"}
    out = run_all({"a": partial(ping, payload=data), "b": pong}, certs)
    assert out["b"].result == "ok"
    back = out["a"].result
    np.testing.assert_array_equal(back["x"], data["x"])
    assert back["s"] == "hello"
    assert out["a"].run_id == out["b"].run_id
    assert out["a"].transcript.total_bytes > 0


def test_a_250_mb_message_streams_in_chunks(certs: Any) -> None:
    big = np.ones(250_000_000 // 8)  # 250 MB, far above gRPC's 4 MB message limit

    def sender(party: Any) -> int:
        party.send("b", "big", big)
        return int(party.recv("b", "sum"))

    def receiver(party: Any) -> str:
        got = party.recv("a", "big")
        party.send("a", "sum", float(got.sum()))
        return "ok"

    out = run_all({"a": sender, "b": receiver}, certs)
    assert out["a"].result == big.size


def test_runs_agree_on_a_fresh_run_id(certs: Any) -> None:
    first = run_all({"a": partial(ping, payload=1), "b": pong}, certs)
    second = run_all({"a": partial(ping, payload=1), "b": pong}, certs)
    assert first["a"].run_id != second["a"].run_id


def test_different_federation_descriptions_refuse_to_run(certs: Any) -> None:
    addresses = loopback_addresses(["a", "b"])
    out: dict[str, Any] = {}

    def go(name: str, role: Any, digest: str) -> None:
        try:
            out[name] = run_party(name, role, addresses, tls=certs.parties[name],
                                  digest=digest, connect_timeout=10)
        except Exception as exc:
            out[name] = exc

    threads = [threading.Thread(target=go, args=("a", partial(ping, payload=1), "one")),
               threading.Thread(target=go, args=("b", pong, "two"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # both parties learn the real reason (not a timeout), with both digests
    assert set(out) == {"a", "b"}
    for exc in out.values():
        assert isinstance(exc, ProtocolError), exc
        assert "the federation files of" in str(exc) and "differ" in str(exc), exc
        assert "one at 'a'" in str(exc) and "two at 'b'" in str(exc), exc


def test_unreachable_peer_is_named_after_a_bounded_wait(certs: Any) -> None:
    addresses = loopback_addresses(["a", "b"])
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError, match=r"could not reach 'b' at 127\.0\.0\.1:\d+"):
        run_party("a", partial(ping, payload=1), addresses, tls=certs.parties["a"],
                  connect_timeout=1.5)
    assert time.monotonic() - t0 < 10


def test_missing_certificate_is_a_clear_error(tmp_path: Path, certs: Any) -> None:
    from islands.deploy.certs import TlsFiles

    missing = TlsFiles(ca=certs.ca_cert, cert=tmp_path / "nope.pem", key=certs.parties["a"].key)
    with pytest.raises(ValidationError, match=r"certificate file .*nope\.pem.* does not exist"):
        run_party("a", pong, loopback_addresses(["a", "b"]), tls=missing)


def test_insecure_mode_is_loopback_only() -> None:
    with pytest.raises(ValidationError, match="loopback tests only"):
        GrpcTransport("a", {"a": "127.0.0.1:5001", "b": "10.1.2.3:5001"}, insecure=True)
    with pytest.raises(ValidationError, match="needs TLS files"):
        GrpcTransport("a", {"a": "127.0.0.1:5001", "b": "127.0.0.1:5002"})


def test_insecure_mode_runs_on_loopback() -> None:
    addresses = loopback_addresses(["a", "b"])
    out: dict[str, Any] = {}

    def go(name: str, role: Any) -> None:
        out[name] = run_party(name, role, addresses, insecure=True)

    threads = [threading.Thread(target=go, args=("a", partial(ping, payload=7))),
               threading.Thread(target=go, args=("b", pong))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out["a"].result == 7


def _raw_call(certs: Any, cert_of: str, target: str, address: str, method: str,
              request: Any, metadata: Any = None, ca: Path | None = None) -> Any:
    files = certs.parties[cert_of]
    creds = grpc.ssl_channel_credentials(
        root_certificates=(ca or files.ca).read_bytes(), private_key=files.key.read_bytes(),
        certificate_chain=files.cert.read_bytes())
    with grpc.secure_channel(address, creds,
                             options=[("grpc.ssl_target_name_override", target)]) as ch:
        if method == "Deliver":
            return ch.stream_unary(f"/islands.Mailbox/{method}")(
                iter(request), timeout=5, metadata=metadata)
        return ch.unary_unary(f"/islands.Mailbox/{method}")(request, timeout=5,
                                                            metadata=metadata)


@pytest.fixture
def server_a(certs: Any) -> Any:
    """Party a's transport, handshaken with a stand-in b, serving on loopback."""
    addresses = loopback_addresses(["a", "b"])
    a = GrpcTransport("a", addresses, tls=certs.parties["a"], digest="d")
    b = GrpcTransport("b", addresses, tls=certs.parties["b"], digest="d")
    a.start()
    b.start()
    runs: list[str] = []
    t = threading.Thread(target=lambda: runs.append(b.handshake(10)))
    t.start()
    a.handshake(10)
    t.join(10)
    yield a, b, addresses
    a.close(0)
    b.close(0)


def test_unauthenticated_client_is_refused(server_a: Any, certs: Any, tmp_path: Path) -> None:
    _, _, addresses = server_a
    rogue = make_certificates(["b"], tmp_path / "rogue")  # another CA's "b"
    files = rogue.parties["b"]
    creds = grpc.ssl_channel_credentials(
        root_certificates=certs.ca_cert.read_bytes(), private_key=files.key.read_bytes(),
        certificate_chain=files.cert.read_bytes())
    with grpc.secure_channel(addresses["a"], creds, options=[
            ("grpc.ssl_target_name_override", "a")]) as ch, pytest.raises(grpc.RpcError) as info:
        ch.unary_unary("/islands.Mailbox/Ping")(_pack({"run": "", "sender": "b"}), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # the TLS handshake fails
    # while the federation's own b gets through to the same server
    assert _raw_call(certs, "b", "a", addresses["a"], "Ping",
                     _pack({"run": "", "sender": "b"})) == a_nonce(server_a)
    # and without any client certificate
    creds = grpc.ssl_channel_credentials(root_certificates=certs.ca_cert.read_bytes())
    with grpc.secure_channel(addresses["a"], creds, options=[
            ("grpc.ssl_target_name_override", "a")]) as ch, pytest.raises(grpc.RpcError):
        ch.unary_unary("/islands.Mailbox/Ping")(_pack({"run": "", "sender": "b"}), timeout=5)


def test_a_party_cannot_speak_as_another(server_a: Any, certs: Any) -> None:
    a, _, addresses = server_a
    header = _pack({"run": a.run_id, "sender": "b", "tag": "t", "seq": 1, "size": 1})
    # c holds a valid certificate of this federation, but claims to be b
    with pytest.raises(grpc.RpcError) as info:
        _raw_call(certs, "c", "a", addresses["a"], "Deliver", [b"x"],
                  metadata=((HEADER_KEY, header),))
    assert info.value.code() in (grpc.StatusCode.UNAUTHENTICATED,
                                 grpc.StatusCode.PERMISSION_DENIED)


def test_replays_from_another_run_and_duplicates_are_rejected(server_a: Any,
                                                                certs: Any) -> None:
    a, _, addresses = server_a
    old = _pack({"run": "0" * 32, "sender": "b", "tag": "t", "seq": 1, "size": 1})
    with pytest.raises(grpc.RpcError) as info:
        _raw_call(certs, "b", "a", addresses["a"], "Deliver", [b"x"],
                  metadata=((HEADER_KEY, old),))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "replay" in info.value.details()

    header = _pack({"run": a.run_id, "sender": "b", "tag": "t", "seq": 1, "size": 1})
    for _ in range(2):  # a retry after a lost acknowledgement: delivered once
        _raw_call(certs, "b", "a", addresses["a"], "Deliver", [b"x"],
                  metadata=((HEADER_KEY, header),))
    assert a.duplicates == 1
    assert bytes(a.recv("a", "b", "t", 1.0)) == b"x"
    with pytest.raises(PeerTimeoutError):
        a.recv("a", "b", "t", 0.3)
    gap = _pack({"run": a.run_id, "sender": "b", "tag": "t", "seq": 5, "size": 1})
    with pytest.raises(grpc.RpcError) as info:
        _raw_call(certs, "b", "a", addresses["a"], "Deliver", [b"x"],
                  metadata=((HEADER_KEY, gap),))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    # a header announcing 3 GB costs the receiver only what actually arrives
    huge = _pack({"run": a.run_id, "sender": "b", "tag": "t", "seq": 2, "size": 3 << 30})
    with pytest.raises(grpc.RpcError) as info:
        _raw_call(certs, "b", "a", addresses["a"], "Deliver", [b"x"] * 3,
                  metadata=((HEADER_KEY, huge),))
    assert info.value.code() == grpc.StatusCode.DATA_LOSS
    short = _pack({"run": a.run_id, "sender": "b", "tag": "t", "seq": 2, "size": 10})
    with pytest.raises(grpc.RpcError) as info:
        _raw_call(certs, "b", "a", addresses["a"], "Deliver", [b"x"],
                  metadata=((HEADER_KEY, short),))
    assert info.value.code() == grpc.StatusCode.DATA_LOSS


def test_malformed_header_is_refused(server_a: Any, certs: Any) -> None:
    _, _, addresses = server_a
    with pytest.raises(grpc.RpcError) as info:
        _raw_call(certs, "b", "a", addresses["a"], "Deliver", [b"x"],
                  metadata=((HEADER_KEY, b"\x93\x01\x02\x03"),))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_failing_party_stops_its_peers_at_once_naming_it(certs: Any) -> None:
    def broken(party: Any) -> None:
        party.send("b", "first", 1)
        raise RuntimeError("disk full")

    def waiting(party: Any) -> None:
        party.recv("a", "first")
        party.recv("a", "second")

    t0 = time.monotonic()
    out = run_all({"a": broken, "b": waiting}, certs, timeout=60)
    assert time.monotonic() - t0 < 20
    assert isinstance(out["a"], ProtocolError) and "disk full" in str(out["a"])
    err = out["b"]
    assert isinstance(err, PeerFailedError)
    assert err.peer == "a" and err.tag == "second"
    assert "'a' failed at step 'first': RuntimeError" in str(err)
    assert "disk full" not in str(err)  # the text may describe a's data: it stays with a


def test_a_vanished_peer_is_detected_by_probing(certs: Any) -> None:
    addresses = loopback_addresses(["a", "b"])
    vanished = threading.Event()

    def quitter(party: Any) -> None:
        party.send("b", "first", 1)
        vanished.set()

    a = GrpcTransport("a", addresses, tls=certs.parties["a"], digest="d")
    a.start()
    handshaken = threading.Event()

    def run_a() -> None:
        a.handshake(10)
        handshaken.set()
        from islands.runtime import Party, Transcript

        quitter(Party("a", a.parties, a, Transcript()))
        a.close(0)  # gone without a word, as a killed process

    t = threading.Thread(target=run_a)
    t.start()

    def waiting(party: Any) -> None:
        party.recv("a", "first")
        party.recv("a", "second")

    t0 = time.monotonic()
    with pytest.raises(PeerFailedError, match="'a' stopped responding") as info:
        run_party("b", waiting, addresses, tls=certs.parties["b"], digest="d",
                  liveness=1.0, probe_interval=0.3, timeout=60)
    assert time.monotonic() - t0 < 20
    assert info.value.peer == "a" and info.value.tag == "second"
    t.join(10)


def test_bad_transport_parameters() -> None:
    with pytest.raises(ValidationError, match="not in the federation"):
        GrpcTransport("z", {"a": "127.0.0.1:1", "b": "127.0.0.1:2"}, insecure=True)
    with pytest.raises(ValidationError, match="host:port"):
        GrpcTransport("a", {"a": "127.0.0.1", "b": "127.0.0.1:2"}, insecure=True)
    with pytest.raises(ValidationError, match="liveness"):
        GrpcTransport("a", {"a": "127.0.0.1:1", "b": "127.0.0.1:2"}, insecure=True,
                      liveness=0)


def a_nonce(server: Any) -> bytes:
    return bytes(server[0]._nonce)


def test_a_single_chunk_retry_is_delivered_once(server_a: Any, certs: Any) -> None:
    a, _, addresses = server_a
    header = _pack({"run": a.run_id, "sender": "b", "tag": "one", "seq": 1, "size": 3})
    for _ in range(2):
        _raw_call(certs, "b", "a", addresses["a"], "DeliverOne", b"abc",
                  metadata=((HEADER_KEY, header),))
    assert a.duplicates == 1
    assert bytes(a.recv("a", "b", "one", 1.0)) == b"abc"


def test_a_peer_that_finishes_its_handshake_late_is_waited_for(certs: Any) -> None:
    """b listens but starts its own handshake 2 s after a; a must wait, not give up."""
    addresses = loopback_addresses(["a", "b"])
    b = GrpcTransport("b", addresses, tls=certs.parties["b"], digest="d")
    b.start()
    got: list[Any] = []

    def late_b() -> None:
        time.sleep(2.0)
        b.handshake(10)
        from islands.runtime import Party, Transcript

        Party("b", b.parties, b, Transcript()).send("a", "hi", 5)
        b.notify("done", "hi")
        b.linger(5)

    t = threading.Thread(target=late_b)
    t.start()
    try:
        def receive(party: Any) -> Any:
            return party.recv("b", "hi")

        got.append(run_party("a", receive, addresses, tls=certs.parties["a"], digest="d",
                             probe_interval=0.3, liveness=5.0, timeout=30).result)
    finally:
        t.join(15)
        b.close(0)
    assert got == [5]


def test_a_failure_reaches_a_peer_that_started_late(certs: Any) -> None:
    addresses = loopback_addresses(["a", "b", "c"])

    def broken(party: Any) -> None:
        raise ValueError("bad input")

    def waiting(party: Any) -> None:
        party.recv("a", "never")

    out: dict[str, Any] = {}

    def go(name: str, role: Any, delay: float) -> None:
        time.sleep(delay)
        try:
            out[name] = run_party(name, role, addresses, tls=certs.parties[name], digest="d",
                                  timeout=60, connect_timeout=30)
        except Exception as exc:
            out[name] = exc

    threads = [threading.Thread(target=go, args=("a", broken, 0.0)),
               threading.Thread(target=go, args=("b", waiting, 0.0)),
               threading.Thread(target=go, args=("c", waiting, 2.0))]
    _started_and_joined(threads)
    assert not any(t.is_alive() for t in threads)
    for name in ("b", "c"):
        assert isinstance(out[name], PeerFailedError), out[name]
        assert "'a' failed" in str(out[name]) and "ValueError" in str(out[name])


@pytest.mark.parametrize(("b_delay", "gap"), [(0.7, 0.1), (1.2, 0.05)])
def test_a_refusal_reaches_a_peer_that_said_hello_first(certs: Any, b_delay: float,
                                                       gap: float) -> None:
    # a waits for b (its channel to b backs off), b says hello to a first, then c (whose
    # file differs and does not list b) is refused by a and stops: b can learn why only
    # from a's notice, sent over a channel that may still be backing off
    addresses = loopback_addresses(["a", "b", "c"])

    def waiting(party: Any) -> None:
        party.recv("a", "never")

    out: dict[str, Any] = {}

    def go(name: str, delay: float, digest: str, known: list[str]) -> None:
        time.sleep(delay)
        try:
            out[name] = run_party(name, waiting, {k: addresses[k] for k in known},
                                  tls=certs.parties[name], digest=digest, timeout=60,
                                  connect_timeout=40)
        except Exception as exc:
            out[name] = exc

    threads = [threading.Thread(target=go, args=("a", 0.0, "d", ["a", "b", "c"])),
               threading.Thread(target=go, args=("b", b_delay, "d", ["a", "b", "c"])),
               threading.Thread(target=go, args=("c", b_delay + gap, "x", ["a", "c"]))]
    _started_and_joined(threads)
    assert not any(t.is_alive() for t in threads)
    assert isinstance(out["b"], ProtocolError), out["b"]
    assert "the federation files of 'a' and 'c' differ" in str(out["b"]), out["b"]


def test_a_result_is_incomplete_when_a_peer_fails_after_our_last_message(certs: Any) -> None:
    def last_word(party: Any) -> str:
        party.send("b", "final", 1)
        return "sent"

    def fails_after(party: Any) -> None:
        party.recv("a", "final")
        raise RuntimeError("crash while finishing")

    out = run_all({"a": last_word, "b": fails_after}, certs)
    assert isinstance(out["a"], PeerFailedError)
    assert "finished its role, but 'b' failed" in str(out["a"])


def test_a_peer_at_the_wrong_address_is_not_trusted(certs: Any) -> None:
    """a's federation says b is where c listens: c's certificate does not name b."""
    right = loopback_addresses(["a", "b", "c"])
    c = GrpcTransport("c", right, tls=certs.parties["c"], digest="d")
    c.start()
    try:
        wrong = {"a": right["a"], "b": right["c"]}
        # refused at once (a certificate does not start to verify by waiting), naming b
        with pytest.raises(ProtocolError, match="cannot run with 'b': the certificate "
                                                "presented at"):
            run_party("a", pong, wrong, tls=certs.parties["a"], digest="d",
                      connect_timeout=60)
    finally:
        c.close(0)


def test_tls_files_are_checked_before_listening(certs: Any, tmp_path: Path) -> None:
    from islands.deploy.certs import TlsFiles, check_tls

    a, b = certs.parties["a"], certs.parties["b"]
    with pytest.raises(ValidationError, match="does not belong to the certificate"):
        check_tls(TlsFiles(ca=a.ca, cert=a.cert, key=b.key), "a")
    with pytest.raises(ValidationError, match="issued to party 'b', not 'a'"):
        check_tls(b, "a")
    other = make_certificates(["a"], tmp_path / "other")
    with pytest.raises(ValidationError, match="was not issued by the CA"):
        check_tls(TlsFiles(ca=a.ca, cert=other.parties["a"].cert, key=other.parties["a"].key),
                  "a")
    (tmp_path / "junk.key").write_text("not a key")
    with pytest.raises(ValidationError, match="not an unencrypted PEM private key"):
        check_tls(TlsFiles(ca=a.ca, cert=a.cert, key=tmp_path / "junk.key"), "a")
    check_tls(a, "a")


def test_private_keys_stay_private_when_overwritten(tmp_path: Path) -> None:
    files = make_certificates(["a"], tmp_path)
    key = files.parties["a"].key
    key.chmod(0o644)
    make_certificates(["a"], tmp_path, overwrite=True)
    assert (key.stat().st_mode & 0o777) == 0o600


def test_parties_verify_what_a_peer_signed(certs: Any) -> None:
    # the identity keys travel in the hellos over mutual TLS: b checks a's signature on a
    # message that any party could have relayed, and refuses one made with another key
    def signer(party: Any) -> str:
        sig = party.identity.sign("t", b"survivors")
        party.send("b", "signed", {"m": b"survivors", "sig": sig})
        return "ok"

    def checker(party: Any) -> str:
        got = party.recv("a", "signed")
        party.identity.verify("a", "t", got["m"], got["sig"])
        forged = party.identity.sign("t", got["m"])  # b's own key, claimed as a's
        with pytest.raises(ProtocolError, match="signature of 'a' does not verify"):
            party.identity.verify("a", "t", got["m"], forged)
        with pytest.raises(ProtocolError, match="does not verify"):
            party.identity.verify("a", "other purpose", got["m"], got["sig"])
        return "ok"

    out = run_all({"a": signer, "b": checker}, certs)
    assert out["a"].result == "ok" and out["b"].result == "ok", out


def _hello_sender(request: bytes) -> str:
    import msgpack

    return str(msgpack.unpackb(request, raw=False).get("sender"))


def test_a_second_instance_of_a_party_is_refused_and_the_run_goes_on(
        certs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # b is started twice: the second instance, listening elsewhere, says hello to the
    # server a before the genuine b (at b's address in the federation) even starts. The
    # second instance must be refused, naming b and both addresses; a, b and c must run
    # as if it never existed, and a must never take a value from it.
    addresses = loopback_addresses(["a", "b", "c"])
    elsewhere = loopback_addresses(["b"])["b"]
    heard = threading.Event()  # a has handled a hello from (the second) b
    original = GrpcTransport._on_hello

    def on_hello(self: GrpcTransport, request: bytes, context: Any) -> bytes:
        try:
            return original(self, request, context)
        finally:
            if self.name == "a" and _hello_sender(request) == "b":
                heard.set()

    monkeypatch.setattr(GrpcTransport, "_on_hello", on_hello)

    second_done = threading.Event()

    def server(party: Any) -> dict[str, Any]:
        got = {}
        for peer in ("b", "c"):
            with contextlib.suppress(PeerFailedError):  # a server tolerates its clients
                got[peer] = party.recv(peer, "value")
        # still serving when the second instance tries again: it must hear why
        assert second_done.wait(120), "the second instance never stopped"
        return got

    def client(value: str, party: Any) -> str:
        party.send("a", "value", value)
        return value

    out: dict[str, Any] = {}

    def go(key: str, name: str, role: Any, **kwargs: Any) -> None:
        try:
            out[key] = run_party(name, role, addresses, tls=certs.parties[name], digest="d",
                                 timeout=180, connect_timeout=60, **kwargs)
        except Exception as exc:
            out[key] = exc
        if key == "second":
            second_done.set()

    early = [threading.Thread(target=go, args=("a", "a", server), kwargs={"tolerate": "bc"}),
             threading.Thread(target=go, args=("c", "c", partial(client, "from c"))),
             threading.Thread(target=go, args=("second", "b", partial(client, "from the "
                                                                              "second b")),
                              kwargs={"listen": elsewhere})]
    for t in early:
        t.start()
    assert heard.wait(60), "the second instance never said hello to a"
    genuine = threading.Thread(target=go, args=("b", "b", partial(client, "from b")))
    genuine.start()
    for t in [*early, genuine]:
        t.join(90)
    err = out["second"]
    assert isinstance(err, ProtocolError), err
    text = " ".join(str(err).split())
    assert "two instances of party 'b'" in text, text
    assert addresses["b"] in text and elsewhere in text, text
    assert out["a"].result == {"b": "from b", "c": "from c"}, out["a"]
    assert out["b"].result == "from b" and out["c"].result == "from c", out


def test_identity_keys_are_unique_within_a_run(certs: Any) -> None:
    # c announces a's identity key as its own: every party refuses to run, naming both
    addresses = loopback_addresses(["a", "b", "c"])
    parties = {n: GrpcTransport(n, addresses, tls=certs.parties[n], digest="d")
               for n in addresses}
    parties["c"]._sign_public = parties["a"]._sign_public
    out: dict[str, Any] = {}

    def handshake(name: str) -> None:
        try:
            out[name] = parties[name].handshake(30)
        except Exception as exc:
            out[name] = exc

    threads = [threading.Thread(target=handshake, args=(n,)) for n in parties]
    try:
        for party in parties.values():
            party.start()
        _started_and_joined(threads)
    finally:
        for party in parties.values():
            party.close(0)
    for name in parties:
        assert isinstance(out[name], ProtocolError), out
        text = str(out[name])
        assert "identity key" in text and "'c'" in text and "'a'" in text, (name, text)


def test_an_identity_key_is_fixed_once_agreed(server_a: Any, certs: Any) -> None:
    # after the run began, b (same instance, same nonce) announces another identity key:
    # a refuses the hello, names b, and keeps the key it agreed
    a, b, addresses = server_a
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from islands.runtime import grpc_transport

    def hello(key: bytes) -> bytes:
        # the hello b's transport sends, in the fields this version speaks
        values = {"v": grpc_transport._PROTOCOL_VERSION, "sender": "b", "nonce": b._nonce,
                  "digest": "d", "fields": {}, "sign": key, "addr": addresses["b"]}
        return _pack({k: values[k] for k in grpc_transport._HELLO})

    before = a._peers["b"].sign_key
    other = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    with pytest.raises(grpc.RpcError) as info:
        _raw_call(certs, "b", "a", addresses["a"], "Hello", hello(other))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'b' announced another identity key" in info.value.details()
    assert a._peers["b"].sign_key == before
    a.identity().verify("b", "t", b"m", b.identity().sign("t", b"m"))
    # the same hello again (a retry) is still answered
    assert _raw_call(certs, "b", "a", addresses["a"], "Hello", hello(b._sign_public))


_STALLING_SERVER = """
import contextlib, json, sys
from pathlib import Path
from islands.errors import PeerFailedError
from islands.runtime.grpc_transport import run_party
from islands.runtime.tls import TlsFiles

addresses, marker = json.loads(sys.argv[1]), Path(sys.argv[2])
tls = TlsFiles(*(Path(p) for p in sys.argv[3:6]))

def server(party):
    for peer in ("b", "c"):
        party.recv(peer, "joined")
    marker.write_text("both joined")
    got = {}
    for peer in ("c", "b"):
        with contextlib.suppress(PeerFailedError):  # a server tolerates its clients
            got[peer] = party.recv(peer, "update")
    return got

run = run_party("a", server, addresses, tls=tls, digest="d", timeout=120, liveness=2.0,
                probe_interval=0.5, tolerate=("b", "c"))
print("finished with", sorted(run.result))
"""


def test_a_stalled_server_is_named_by_every_client_and_by_itself(certs: Any,
                                                                 tmp_path: Path) -> None:
    # the server a is frozen (SIGSTOP) for longer than liveness while client b waits to
    # receive from it and client c sends to it: both clients must count a as stopped, by
    # the same rule, and a, when it runs again, must stop naming itself, never finish
    # on the clients that are left, blaming them
    import json
    import os
    import signal
    import subprocess
    import sys

    addresses = loopback_addresses(["a", "b", "c"])
    marker = tmp_path / "joined"
    files = certs.parties["a"]
    src = str(Path(__file__).resolve().parents[1] / "src")
    proc = subprocess.Popen(
        [sys.executable, "-c", _STALLING_SERVER, json.dumps(addresses), str(marker),
         str(files.ca), str(files.cert), str(files.key)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": src})
    sending = threading.Event()
    out: dict[str, Any] = {}

    def receiver(party: Any) -> None:
        party.send("a", "joined", 1)
        party.recv("a", "task")

    def sender(party: Any) -> None:
        party.send("a", "joined", 1)
        assert sending.wait(120)
        party.send("a", "update", np.zeros(1000))  # under way while a is frozen
        party.recv("a", "task")

    def go(name: str, role: Any) -> None:
        try:
            out[name] = run_party(name, role, addresses, tls=certs.parties[name], digest="d",
                                  timeout=120, connect_timeout=60, liveness=2.0,
                                  probe_interval=0.5)
        except Exception as exc:
            out[name] = exc

    clients = {n: threading.Thread(target=go, args=(n, r))
               for n, r in (("b", receiver), ("c", sender))}
    for t in clients.values():
        t.start()
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the server never got both joins"
            time.sleep(0.05)
        proc.send_signal(signal.SIGSTOP)
        sending.set()
        clients["b"].join(60)
        clients["c"].join(30)  # it must not wait for the server to wake up
    finally:
        proc.send_signal(signal.SIGCONT)
        sending.set()
        log = proc.communicate(timeout=120)[0]
        for t in clients.values():
            t.join(60)
    for name in ("b", "c"):
        err = out[name]
        assert isinstance(err, PeerFailedError), (name, err)
        assert err.peer == "a" and "'a' stopped responding" in str(err), (name, err)
    assert proc.returncode != 0, log
    assert "'a' stalled for" in log and "finished with" not in log, log
