"""The gRPC transport: one process per organisation, mutual TLS, the same roles.

Each party serves a small messaging service (``islands.Mailbox``) and pushes its
messages to its peers' services; a role function sees the same
:class:`~islands.runtime.transport.Transport` interface as in one process, so every
protocol runs over the network unchanged (:func:`run_party`).

Security
--------
Mutual TLS is the default. A party presents a certificate the federation's CA signed for
its party name (:mod:`islands.runtime.tls`) and accepts a connection only from a peer
whose certificate chains to that CA. The server reads the caller's party name from its
certificate and refuses a message whose claimed sender differs; the caller checks that
the server's certificate names the peer it meant to reach (``ssl_target_name_override``
set to the peer's party name, so addresses may be plain IPs). ``insecure=True`` drops
TLS; it is refused unless every address is a loopback address, and logs a warning.

Messages
--------
Every message carries, in a header sent as gRPC metadata, the run ID, the sender, the tag,
a sequence number and the size. The run ID is agreed at start-up: each party draws a
random nonce, the parties exchange nonces (with a digest of the shared federation
description, so parties started with different descriptions refuse to run), and the run
ID is a hash of all of them. Parties whose descriptions differ are all told why: the hello
also carries a short digest of every key, so the party that sees a different digest
refuses with a message naming both digests and the keys that differ, and a party that
cannot run tells every peer it can reach before it exits (a notice with an empty run ID),
so no peer is left waiting for ``connect_timeout``; so does a party that refused its own
input (:func:`refuse_start`), and a peer whose certificate does not verify stops its
peers' hellos at once. A party is the instance that answers at its address in the
federation description: a nonce (and identity key) is taken only from that instance,
checked by a ping to the address, so a second instance of a party (started twice,
listening elsewhere) is refused with an error naming both addresses and disturbs no one.
Identity keys must be unique within a run and are fixed once agreed. A message from
another run (a replay, or a peer that restarted) is refused; a sequence number already
delivered (a retry whose acknowledgement was lost) is acknowledged and dropped; a gap is
refused. Bodies travel as a stream of chunks (1 MiB by default) and are reassembled into
one buffer, so messages far above gRPC's 4 MB limit work (250 MB is benchmarked).

Faults
------
A send that fails for a transient reason (peer not yet listening, connection reset) is
retried with exponential backoff. ``liveness`` is the one tolerance for a silent peer,
whichever way the message goes: the peer being waited on, and the peer a message is
being delivered to, is pinged every ``probe_interval`` seconds, and one that answers no
ping for ``liveness`` seconds counts as stopped. A message to it is dropped (as the
in-memory transport keeps messages nobody will read), whoever waits on it gets
:class:`~islands.errors.PeerFailedError` naming the peer and the step, and a message it
sends later is refused, telling it so. A party whose own process did not run for
``liveness`` seconds or more (stopped, frozen) knows its peers may have counted it as
stopped: when a peer then turns out to be gone, it stops naming itself as the stalled
party, rather than going on without that peer as if the peer had failed. A party whose
role returns or raises tells its peers (with its step and error), so they stop at once
instead of waiting; a killed process is caught by the same probes.

gRPC is used through its generic handlers with raw bytes (no generated protobuf code):
the payloads are already encoded by :mod:`islands.runtime.wire`, and the header is a
small msgpack map checked field by field; nothing is unpickled.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import msgpack
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from islands.errors import PeerFailedError, PeerTimeoutError, ProtocolError, ValidationError
from islands.runtime.identity import PUBLIC_KEY_BYTES, Identity
from islands.runtime.party import DEFAULT_TIMEOUT, Party, check_party_names
from islands.runtime.runner import PartyInputError
from islands.runtime.tls import TlsFiles, check_tls
from islands.runtime.transcript import Transcript
from islands.runtime.transport import DERIVED_SUFFIX, RunCancelled

__all__ = ["GrpcTransport", "PartyRun", "check_address", "free_ports", "is_loopback",
           "loopback_addresses", "refuse_start", "run_party"]

log = logging.getLogger(__name__)

SERVICE = "islands.Mailbox"
CHUNK = 1 << 20
MAX_MESSAGE = 4 << 30
PREALLOCATE = 64 << 20
HEADER_KEY = "islands-header-bin"
_PROTOCOL_VERSION = 3  # 3: a hello names the instance's address, a notice its nonce
_NOT_READY = "is not ready yet (still connecting to its peers)"
# how gRPC's TLS reports a peer certificate that does not verify: final, never retried
_CERTIFICATE_REFUSED = ("CERTIFICATE_VERIFY_FAILED", "Hostname Verification Check failed")


def _grpc() -> Any:
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no INFO lines on every handshake
    import grpc

    return grpc


def _pack(obj: Mapping[str, Any]) -> bytes:
    return bytes(msgpack.packb(dict(obj), use_bin_type=True))


def _unpack(data: bytes, fields: Mapping[str, type | tuple[type, ...]]) -> dict[str, Any]:
    """Decode a control map and check every field's type; anything else is refused."""
    if len(data) > 1 << 16:
        raise ValueError("control message too long")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # malformed bytes from a peer
        raise ValueError(f"malformed control message: {exc}") from None
    if not isinstance(obj, dict) or set(obj) != set(fields):
        raise ValueError(f"control message must hold exactly {sorted(fields)}")
    for key, kind in fields.items():
        value = obj[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise ValueError(f"control field {key!r} has the wrong type")
    return obj


def _parse(request: bytes, fields: Mapping[str, type | tuple[type, ...]],
           context: Any) -> dict[str, Any]:
    """Decode a peer's control request, or end the call with INVALID_ARGUMENT."""
    try:
        return _unpack(request, fields)
    except ValueError as exc:
        context.abort(_grpc().StatusCode.INVALID_ARGUMENT, str(exc))
        raise  # abort raises; this keeps the type checker informed


_HELLO = {"v": int, "sender": str, "nonce": bytes, "digest": str, "fields": dict,
          "sign": bytes, "addr": str}
_HEADER = {"run": str, "sender": str, "tag": str, "seq": int, "size": int}
_NOTICE = {"run": str, "sender": str, "state": str, "step": str, "error": str,
           "nonce": bytes}
_PING = {"run": str, "sender": str}


def _check_hello(hello: Mapping[str, Any]) -> None:
    """Check a hello's fields beyond their types: key length, digests, address."""
    if len(hello["sign"]) != PUBLIC_KEY_BYTES:
        raise ValueError(f"hello field 'sign' must be a {PUBLIC_KEY_BYTES}-byte Ed25519 key")
    if len(hello["addr"]) > 300:
        raise ValueError("hello field 'addr' must be at most 300 characters")
    _check_fields(hello["fields"])


def _check_fields(fields: Mapping[Any, Any]) -> None:
    """Check a hello's per-key digests: a bounded map of short strings."""
    if len(fields) > 1024 or not all(
            type(k) is str and type(v) is str and len(k) <= 200 and len(v) <= 64
            for k, v in fields.items()):
        raise ValueError("control field 'fields' must map at most 1024 keys to short digests")


def is_loopback(address: str) -> bool:
    """Whether ``host:port`` names this machine only (127.0.0.0/8, ::1 or localhost)."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_address(address: Any, what: str) -> str:
    """Return ``address`` if it is ``host:port`` with a valid port; ``what`` names it."""
    if not isinstance(address, str) or ":" not in address:
        raise ValidationError(f"{what} must be 'host:port'; got {address!r}")
    port = address.rsplit(":", 1)[1]
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValidationError(f"{what} has no valid port: {address!r}")
    return address


def _positive(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
        raise ValidationError(f"The {name!r} parameter must be a positive number of seconds. "
                              f"Got {value!r} instead.")
    return float(value)


class _Gone(Exception):
    """The receiver of a message counts as stopped: the attempt was cancelled."""


class _Stalled(Exception):
    """A stream cancelled for lack of progress, shaped like ``grpc.RpcError``."""

    def __init__(self, code: Any, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> Any:
        return self._code

    def details(self) -> str:
        return self._details


@dataclass
class _Peer:
    """What this party knows of one peer."""

    address: str
    state: str = "running"  # running | done | failed | unreachable
    detail: str = ""
    step: str = ""
    nonce: bytes | None = None  # of the instance that answers at its address
    sign_key: bytes | None = None  # its identity key, received over its TLS channel
    instance: str = ""  # where that instance says it listens
    # when the last call of ours that it answered began (time.monotonic): a call of its,
    # or an answer, can be read after this party stalled though sent before
    heard: float = 0.0
    told: bool = False  # it knows why this party cannot run (refuse_start)
    sent_seq: int = 0
    recv_seq: int = 0
    unreachable_since: float | None = None
    refused: str = ""  # why it and this party cannot run together (both know)
    seen: bool = False  # it has answered or called at least once: it was started
    lock: threading.Lock = field(default_factory=threading.Lock)  # one send at a time
    deliver_lock: threading.Lock = field(default_factory=threading.Lock)
    channel: Any = None
    calls: dict[str, Any] = field(default_factory=dict)


class GrpcTransport:
    """A :class:`~islands.runtime.transport.Transport` over gRPC, for one party.

    Parameters
    ----------
    name
        This party's name.
    addresses
        ``host:port`` of every party, this one included (where peers reach it).
    listen
        Address to bind (default: this party's entry in ``addresses``); e.g.
        ``0.0.0.0:50051`` behind NAT.
    tls
        The CA certificate, this party's certificate and key. Required unless
        ``insecure``.
    insecure
        No TLS, for loopback tests only: refused unless every address is loopback.
    digest
        A digest of the federation description every party must share.
    fields
        A short digest of each key of that description, to name the keys that differ
        when the digests do.
    liveness
        Seconds a peer may answer no ping before it counts as stopped, whether this
        party waits for a message from it or delivers one to it; a stall of this party's
        own process this long makes it stop, naming itself, once a peer is found gone.
    probe_interval
        Seconds between probes of a peer being waited on or delivered to.
    chunk
        Bytes per streamed chunk.
    max_message
        Largest message accepted from a peer, in bytes.
    send_timeout
        Seconds a message may keep failing to reach a peer that still answers pings.
    stall_timeout
        Seconds a streamed message may make no progress before the attempt is retried.
    checked_tls
        False only to serve a certificate this party refused, so that its peers meet it
        at their hello and stop (:func:`refuse_start`).
    """

    def __init__(self, name: str, addresses: Mapping[str, str], *, listen: str | None = None,
                 tls: TlsFiles | None = None, insecure: bool = False, digest: str = "",
                 fields: Mapping[str, str] | None = None, liveness: float = 15.0,
                 probe_interval: float = 2.0, chunk: int = CHUNK,
                 max_message: int = MAX_MESSAGE, send_timeout: float = DEFAULT_TIMEOUT,
                 stall_timeout: float = 60.0, checked_tls: bool = True) -> None:
        names = check_party_names(addresses)
        if name not in names:
            raise ValidationError(f"party {name!r} is not in the federation {list(names)}")
        for party, address in addresses.items():
            check_address(address, f"the address of party {party!r}")
        self.listen = check_address(listen if listen is not None else addresses[name],
                                     f"the listen address of party {name!r}")
        if insecure:
            if tls is not None:
                raise ValidationError("give either tls files or insecure=True, not both")
            outside = [a for a in (self.listen, *addresses.values()) if not is_loopback(a)]
            if outside:
                raise ValidationError(
                    f"insecure mode (no TLS) is for loopback tests only; refusing the "
                    f"non-loopback address(es) {outside}")
            log.warning("INSECURE: party %r runs WITHOUT TLS: anyone on this machine can "
                        "read its messages or impersonate a peer. Loopback testing only.", name)
        elif tls is None:
            raise ValidationError(
                f"party {name!r} needs TLS files (CA certificate, certificate, key); "
                "pass insecure=True only for loopback tests")
        elif checked_tls:
            check_tls(tls, name)
        if not isinstance(chunk, int) or chunk < 1024:
            raise ValidationError(f"The 'chunk' parameter must be an int >= 1024. Got {chunk!r}.")
        self.name = name
        self.parties = names
        self.digest = digest
        self.fields = dict(fields or {})
        self.liveness = _positive(liveness, "liveness")
        self.probe_interval = _positive(probe_interval, "probe_interval")
        self.chunk = chunk
        if isinstance(max_message, bool) or not isinstance(max_message, int) or max_message < 1:
            raise ValidationError(f"The 'max_message' parameter must be an int >= 1 (bytes). "
                                  f"Got {max_message!r} instead.")
        self.max_message = max_message
        self.send_timeout = _positive(send_timeout, "send_timeout")
        self.stall_timeout = _positive(stall_timeout, "stall_timeout")
        self._insecure = insecure
        self._pem = None if tls is None else tls.read()
        self._nonce = secrets.token_bytes(16)
        self._signing = Ed25519PrivateKey.generate()
        self._sign_public = self._signing.public_key().public_bytes_raw()
        self._peers = {p: _Peer(address=a) for p, a in addresses.items() if p != name}
        self._run_id: str | None = None
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._mail: dict[tuple[str, str], deque[bytearray]] = {}
        self._cancelled: str | None = None
        self._refusal: str | None = None  # why this party cannot run (set at start-up)
        self._identity: Identity | None = None
        self._stalls: list[tuple[float, float]] = []  # this process's own, >= liveness
        self._closing = threading.Event()
        self._server: Any = None
        self.port: int | None = None
        self.duplicates = 0  # retried messages acknowledged and dropped

    # ------------------------------------------------------------------ lifecycle
    @property
    def run_id(self) -> str | None:
        """The run ID agreed with the peers (None before :meth:`handshake`)."""
        return self._run_id

    def start(self) -> None:
        """Bind and start this party's messaging service."""
        grpc = _grpc()
        limit = self.chunk + (64 << 10)
        options = [("grpc.max_receive_message_length", limit),
                   ("grpc.max_send_message_length", limit)]
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=min(32, len(self._peers) + 4),
                                       thread_name_prefix=f"islands-rpc-{self.name}"),
            # no SO_REUSEPORT: a second instance of a party must fail to bind, not
            # silently take half of its peers' connections
            options=[*options, ("grpc.so_reuseport", 0)])
        raw = {"request_deserializer": None, "response_serializer": None}
        handlers = {
            "Hello": grpc.unary_unary_rpc_method_handler(self._on_hello, **raw),
            "Deliver": grpc.stream_unary_rpc_method_handler(self._on_deliver, **raw),
            "DeliverOne": grpc.unary_unary_rpc_method_handler(self._on_deliver_one, **raw),
            "Notice": grpc.unary_unary_rpc_method_handler(self._on_notice, **raw),
            "Ping": grpc.unary_unary_rpc_method_handler(self._on_ping, **raw),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE,
                                                                              handlers),))
        try:
            if self._pem is None:
                port = server.add_insecure_port(self.listen)
            else:
                ca, cert, key = self._pem
                creds = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                                    require_client_auth=True)
                port = server.add_secure_port(self.listen, creds)
        except RuntimeError as exc:
            raise ValidationError(f"party {self.name!r} cannot listen on {self.listen}: {exc}") \
                from None
        if not port:
            raise ValidationError(f"party {self.name!r} cannot listen on {self.listen} "
                                  "(address in use or not on this machine)")
        server.start()
        self._server, self.port = server, port
        for peer, info in self._peers.items():
            info.channel = self._channel(peer, info.address, options)
        threading.Thread(target=self._watchdog, daemon=True,
                         name=f"islands-watchdog-{self.name}").start()

    def _channel(self, peer: str, address: str, options: list[tuple[str, Any]]) -> Any:
        grpc = _grpc()
        options = [*options, ("grpc.keepalive_time_ms", 10_000),
                   ("grpc.keepalive_timeout_ms", 5_000),
                   ("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 1_000)]
        if self._pem is None:
            return grpc.insecure_channel(address, options=options)
        ca, cert, key = self._pem
        creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                             certificate_chain=cert)
        # the peer must prove it is `peer`, whatever host or IP it is reached at
        return grpc.secure_channel(address, creds,
                                   options=[*options, ("grpc.ssl_target_name_override", peer)])

    def _call(self, peer: str, method: str) -> Any:
        info = self._peers[peer]
        call = info.calls.get(method)
        if call is None:
            path = f"/{SERVICE}/{method}"
            call = (info.channel.stream_unary(path) if method == "Deliver"
                    else info.channel.unary_unary(path))
            info.calls[method] = call
        return call

    def close(self, grace: float = 1.0) -> None:
        """Stop serving and close the channels."""
        self._closing.set()
        if self._server is not None:
            self._server.stop(grace).wait(grace + 1)
            self._server = None
        for info in self._peers.values():
            if info.channel is not None:
                info.channel.close()
                info.channel = None

    # ------------------------------------------------------------------ handshake
    def _hello_body(self) -> bytes:
        return _pack({"v": _PROTOCOL_VERSION, "sender": self.name, "nonce": self._nonce,
                       "digest": self.digest, "fields": self.fields,
                       "sign": self._sign_public, "addr": self.listen})

    def handshake(self, timeout: float) -> str:
        """Reach every peer (retrying until ``timeout``) and agree on the run ID.

        A peer is the instance that answers at its address in the federation
        description: a hello from another instance of it (the same party started twice,
        listening elsewhere) is refused, naming both addresses, and changes nothing here.
        Identity keys must be unique within the run and are fixed once agreed.

        Raises
        ------
        PeerTimeoutError
            A peer could not be reached in time; names it, its address and the last error.
        ProtocolError
            A peer refused: different federation description (the message names both
            digests and the keys that differ), not the party it claims, or the instance
            of a party that is not at its address; or two parties announced the same
            identity key. Before raising, the party tells every peer it can reach why
            it cannot run.
        """
        deadline = time.monotonic() + _positive(timeout, "connect_timeout")
        hello = self._hello_body()
        try:
            for peer in self._peers:
                self._hello(peer, hello, deadline, timeout)
        except ProtocolError as exc:
            self._refuse(str(exc), deadline)
            raise
        with self._cond:
            self._agree()
            assert self._run_id is not None
            return self._run_id

    def identity(self) -> Identity:
        """Return the signing identity, knowing every peer's key (after the handshake).

        Each peer's key arrived in its hello over the mutually authenticated TLS channel
        between the two parties, so it is bound to the name in the peer's certificate.
        The identity is made once: a key announced later changes nothing.
        """
        with self._cond:
            if self._identity is not None:
                return self._identity
            keys = {p: i.sign_key for p, i in self._peers.items()}
            missing = sorted(p for p, k in keys.items() if k is None)
            if missing:
                raise ProtocolError(f"party {self.name!r} has no identity key of {missing} "
                                    "(the handshake has not finished)", party=self.name,
                                    step="hello")
            self._identity = Identity(self.name, self._signing,
                                      {p: k for p, k in keys.items() if k is not None})
            return self._identity

    def _hello(self, peer: str, hello: bytes, deadline: float, timeout: float) -> None:
        """Say hello to one peer until it answers; raise on a refusal learnt from anyone."""
        grpc = _grpc()
        info = self._peers[peer]
        delay, last = 0.05, "no answer"
        while True:
            with self._cond:
                self._raise_refusal()
                if info.nonce is not None:
                    # it said hello first, from the instance at its address: its
                    # certificate, name and federation digest are checked, and it may
                    # have stopped serving since
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerTimeoutError(
                    f"party {self.name!r} could not reach {peer!r} at {info.address} within "
                    f"{timeout:g} s (last error: {last}). Is it running, is the address "
                    "right, and was its certificate issued by this federation's CA?",
                    party=self.name, peer=peer, tag="hello", timeout=timeout)
            try:
                reply = self._call(peer, "Hello")(hello, timeout=min(max(left, 0.01), 5.0))
            except grpc.RpcError as exc:
                code = exc.code()
                if code in (grpc.StatusCode.FAILED_PRECONDITION,
                            grpc.StatusCode.INVALID_ARGUMENT,
                            grpc.StatusCode.PERMISSION_DENIED,
                            grpc.StatusCode.UNAUTHENTICATED):
                    with self._cond:
                        info.seen = True
                        info.refused = info.refused or str(exc.details())[:4000]
                    raise ProtocolError(f"party {peer!r} refused {self.name!r}: "
                                        f"{exc.details()}", party=self.name,
                                        step="hello") from None
                last = f"{code.name}: {exc.details()}"
                if any(m in last for m in _CERTIFICATE_REFUSED):
                    # a certificate does not start to verify by waiting: stop now
                    info.seen = True  # it listens: telling it why takes no long wait
                    raise ProtocolError(
                        f"party {self.name!r} cannot run with {peer!r}: the certificate "
                        f"presented at {info.address} does not verify against the CA file "
                        f"of {self.name!r} (it has expired, or it was issued by another CA "
                        f"or to another party than {peer!r}; last error: {last[-300:]})",
                        party=self.name, step="hello") from None
                with self._cond:  # a refusal learnt meanwhile wakes this wait
                    self._cond.wait(min(delay, max(deadline - time.monotonic(), 0)))
                delay = min(delay * 2, 1.0)
                continue
            info.seen = True
            try:
                answer = _unpack(reply, _HELLO)
                _check_hello(answer)
            except ValueError as exc:
                raise ProtocolError(f"party {peer!r} answered hello badly: {exc}",
                                    party=self.name, step="hello") from None
            if answer["sender"] != peer:
                raise ProtocolError(f"{info.address} answered as {answer['sender']!r}, "
                                    f"not {peer!r}", party=self.name, step="hello")
            if answer["digest"] != self.digest:
                reason = self._mismatch(peer, answer["digest"], answer["fields"])
                with self._cond:
                    info.refused = reason
                raise ProtocolError(reason, party=self.name, step="hello")
            with self._cond:
                # the answer comes from the instance at the peer's address: the peer
                problem = self._record(peer, answer["nonce"], answer["sign"], answer["addr"])
                if problem is None:
                    self._agree()
            if problem is not None:
                raise ProtocolError(problem, party=self.name, step="hello")
            return

    def _record(self, peer: str, nonce: bytes, key: bytes, addr: str) -> str | None:
        """Take ``peer``'s nonce and identity key (caller holds the lock).

        The caller has checked that they come from the instance at the peer's address.
        Returns why they cannot be taken, changing nothing, or None once taken.
        """
        info = self._peers[peer]
        if self._run_id is not None and info.nonce != nonce:
            return (f"party {self.name!r} is already in a run with the instance of {peer!r} "
                    f"listening at {info.instance or info.address}; another instance of "
                    f"{peer!r} (listening at {addr}) is refused. Restart every party to "
                    "start a new run.")
        if info.nonce == nonce and info.sign_key is not None and info.sign_key != key:
            return (f"party {peer!r} announced another identity key than the one it gave "
                    f"{self.name!r} before: a party's identity key is fixed for the run")
        if key == self._sign_public:
            return (f"party {peer!r} announced the identity key of {self.name!r}: identity "
                    "keys must be unique within a run")
        for other, known in self._peers.items():
            if other != peer and known.sign_key == key:
                return (f"parties {peer!r} and {other!r} announced the same identity key: "
                        "identity keys must be unique within a run")
        info.nonce, info.sign_key, info.instance = nonce, key, addr
        info.heard = time.monotonic()
        return None

    def _instance(self, peer: str, nonce: bytes) -> str:
        """Whether the instance of ``peer`` with ``nonce`` is the one at its address.

        Returns ``"same"``; ``"other"`` when another instance answers at the peer's
        address in the federation description (this one was started twice); or
        ``"unknown"`` when nothing answers there yet.
        """
        with self._cond:
            if self._peers[peer].nonce == nonce:
                return "same"
        grpc = _grpc()
        ping = _pack({"run": self._run_id or "", "sender": self.name})
        try:
            # wait_for_ready: the channel may still be backing off from a connection
            # refused before the peer listened
            answer = self._call(peer, "Ping")(ping, timeout=2.0, wait_for_ready=True)
        except grpc.RpcError:
            return "unknown"
        return "same" if answer == nonce else "other"

    def _second_instance(self, peer: str, addr: str) -> str:
        """Say that a second instance of ``peer``, listening at ``addr``, is refused."""
        where = self._peers[peer].address
        message = (f"two instances of party {peer!r} are running: the one answering at "
                   f"{where} (its address in the federation description) and another "
                   f"listening at {addr or 'an unknown address'}. Party {self.name!r} runs "
                   f"with the one at {where} and refuses the other: stop it (each party "
                   "runs once per federation).")
        log.warning("party %r: %s", self.name, message)
        return message

    def _raise_refusal(self) -> None:
        """Raise why a peer cannot run with this party, if one said so (caller holds the lock)."""
        for info in self._peers.values():
            if info.refused:
                raise ProtocolError(info.refused, party=self.name, step="hello")

    def _mismatch(self, other: str, digest: str, fields: Mapping[str, str]) -> str:
        """Explain that ``other``'s federation description differs from this party's."""
        keys = sorted(k for k in set(self.fields) | set(fields)
                      if self.fields.get(k) != fields.get(k))
        shown = ", ".join(repr(k) for k in keys[:12])
        if len(keys) > 12:
            shown += f" and {len(keys) - 12} more"
        which = f"; the keys that differ: {shown}" if keys else ""
        built = [k for k in keys if k.endswith(DERIVED_SUFFIX)]
        also = (f" ({', '.join(repr(k) for k in built)}: built on each machine from the "
                "file, e.g. a model factory's initial state: install the same code at "
                "every party)" if built else "")
        return (f"the federation files of {self.name!r} and {other!r} differ (digest "
                f"{self.digest[:12]} at {self.name!r}, {digest[:12]} at {other!r}){which}. "
                f"Every party must be started with the same federation file{also}.")

    def _refusal_notice(self, reason: str) -> bytes:
        return _pack({"run": "", "sender": self.name, "state": "failed", "step": "hello",
                      "error": reason[:4000], "nonce": self._nonce})

    def _refuse(self, reason: str, deadline: float) -> None:
        """Tell every peer that does not know it yet why this party cannot run.

        From now on a hello is refused with ``reason``, and a notice (with an empty run
        ID) goes to every peer still in the handshake, so each stops at once with the
        real reason instead of waiting for ``connect_timeout``. A peer never heard from
        (perhaps not started yet) is retried until ``deadline`` or for 10 s at most.
        """
        grpc = _grpc()
        with self._cond:
            self._refusal = reason
            targets = [p for p, i in self._peers.items()
                       if i.state == "running" and not i.refused]
        body = self._refusal_notice(reason)
        until = min(deadline, time.monotonic() + 10.0)

        def tell(peer: str) -> None:
            # wait_for_ready: our channel to a peer that said hello first may still be in
            # its reconnect backoff; a peer that answered before and is unreachable for
            # 3 s has stopped, one never heard from may not listen yet
            wait = 3.0 if self._peers[peer].seen else until - time.monotonic()
            with contextlib.suppress(grpc.RpcError):
                self._call(peer, "Notice")(body, timeout=max(wait, 0.1), wait_for_ready=True)

        threads = [threading.Thread(target=tell, args=(p,), daemon=True) for p in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(until - time.monotonic(), 0) + 5)

    def refuse_start(self, reason: str, within: float) -> None:
        """Tell every peer, at start-up, that this party cannot run, and why.

        For a party that refused its own input before its handshake: its peers stop at
        once with an error naming it and ``reason`` (a category, never the details,
        which may describe its data) instead of waiting ``connect_timeout`` for it. A
        peer is told by a notice or by the refusal of its hello. Returns once every peer
        has been told, or after ``within`` seconds: a peer that starts later waits for
        its own ``connect_timeout``.
        """
        grpc = _grpc()
        with self._cond:
            self._refusal = reason
        body = self._refusal_notice(reason)
        deadline = time.monotonic() + _positive(within, "within")

        def tell(peer: str) -> None:
            info = self._peers[peer]
            delay = 0.05
            while True:
                with self._cond:
                    left = deadline - time.monotonic()
                    if info.told or left <= 0:
                        return
                try:
                    self._call(peer, "Notice")(body, timeout=min(3.0, left))
                except grpc.RpcError:
                    with self._cond:  # a hello refused meanwhile wakes this wait
                        self._cond.wait(min(delay, max(deadline - time.monotonic(), 0)))
                    delay = min(delay * 2, 1.0)
                    continue
                with self._cond:
                    info.told = True
                return

        threads = [threading.Thread(target=tell, args=(p,), daemon=True) for p in self._peers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(within + 5)

    def _agree(self) -> None:
        """Fix the run ID once every peer's nonce is known (caller holds the lock).

        A party learns a nonce from its own hello or from a peer's, so it may agree
        before its own hellos are done: a peer that is ready early is then not refused
        as "not ready" for long.
        """
        if self._run_id is not None or any(i.nonce is None for i in self._peers.values()):
            return
        nonces = {self.name: self._nonce}
        nonces.update({p: i.nonce for p, i in self._peers.items() if i.nonce is not None})
        h = hashlib.sha256(self.digest.encode())
        for party in sorted(nonces):
            h.update(party.encode() + b"\0" + nonces[party])
        self._run_id = h.hexdigest()[:32]
        self._cond.notify_all()

    # ------------------------------------------------------------------ server side
    def _caller(self, context: Any, claimed: str) -> str:
        grpc = _grpc()
        if claimed not in self._peers:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"{claimed!r} is not a peer of {self.name!r}")
        self._authenticate(context, claimed)
        return claimed

    def _authenticate(self, context: Any, claimed: str) -> None:
        """End the call unless the TLS certificate names ``claimed`` (no-op without TLS)."""
        if self._pem is not None:
            ids = [i.decode(errors="replace") for i in (context.peer_identities() or [])]
            if claimed not in ids:
                context.abort(_grpc().StatusCode.UNAUTHENTICATED,
                              f"the TLS peer {ids} may not speak as {claimed!r}")

    def _on_hello(self, request: bytes, context: Any) -> bytes:
        grpc = _grpc()
        hello = _parse(request, _HELLO, context)
        try:
            _check_hello(hello)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if hello["v"] != _PROTOCOL_VERSION:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"protocol version {hello['v']} (this party speaks {_PROTOCOL_VERSION})")
        claimed = hello["sender"][:100]
        if hello["digest"] != self.digest:
            # checked before membership: a peer whose file lists other parties learns why
            self._authenticate(context, claimed)
            if claimed in self._peers and self._instance(claimed, hello["nonce"]) == "other":
                # a second instance's file stops nobody: the instance at the address runs
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              self._second_instance(claimed, hello["addr"]))
            reason = self._mismatch(claimed, hello["digest"], hello["fields"])
            with self._cond:
                info = self._peers.get(claimed)
                if info is not None and not info.refused:
                    info.refused, info.seen = reason, True
                self._cond.notify_all()
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, reason)
        sender = self._caller(context, claimed)
        info = self._peers[sender]
        info.seen = True
        if self._refusal is not None:
            with self._cond:
                info.told = True
                self._cond.notify_all()
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"party {self.name!r} cannot run: {self._refusal}")
        verdict = self._instance(sender, hello["nonce"])
        if verdict == "other":
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          self._second_instance(sender, hello["addr"]))
        if verdict == "unknown":
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          f"party {self.name!r} cannot reach {sender!r} at {info.address} "
                          f"yet, to check that the instance saying hello is the one there")
        with self._cond:  # check and set at once: a restarted peer cannot slip in between
            problem = self._record(sender, hello["nonce"], hello["sign"], hello["addr"])
            if problem is None:
                self._agree()
        if problem is not None:
            log.warning("party %r refused a hello: %s", self.name, problem)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, problem)
        return self._hello_body()

    def _check_run(self, run: str, context: Any) -> None:
        grpc = _grpc()
        ours = self._run_id
        if ours is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"party {self.name!r} {_NOT_READY}")
        elif run != ours:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"message of run {run[:8]}…, but party {self.name!r} is in run "
                          f"{ours[:8]}… (a replay, or a peer that restarted)")

    def _on_deliver(self, chunks: Iterator[bytes], context: Any) -> bytes:
        return self._accept(chunks, context)

    def _on_deliver_one(self, body: bytes, context: Any) -> bytes:
        # a message of one chunk: a unary call costs less than a stream of one
        return self._accept(iter((body,)), context)

    def _accept(self, chunks: Iterator[bytes], context: Any) -> bytes:
        grpc = _grpc()
        raw = dict(context.invocation_metadata()).get(HEADER_KEY)
        try:
            if not isinstance(raw, bytes):
                raise ValueError("no message header")
            header = _unpack(raw, _HEADER)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        sender = self._caller(context, header["sender"])
        self._check_run(header["run"], context)
        size = header["size"]
        if not 0 <= size <= self.max_message:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"message of {size} bytes exceeds {self.name!r}'s limit "
                          f"of {self.max_message}")
        info = self._peers[sender]
        with self._cond:
            stopped, step = info.state == "unreachable", info.step
        if stopped:
            # it was silent for longer than the federation tolerates: the roles here
            # have gone on without it, and it must learn so rather than carry on
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"party {self.name!r} counted {sender!r} as stopped: it did not "
                          f"answer for {self.liveness:g} s (liveness) at step {step!r}")
        with info.deliver_lock:  # a retry may overlap an attempt still being read
            seq = header["seq"]
            if seq <= info.recv_seq:
                for _ in chunks:  # already delivered: the ack was lost; drop the copy
                    pass
                self.duplicates += 1
                return b"dup"
            if seq != info.recv_seq + 1:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              f"message {seq} from {sender!r} after {info.recv_seq}: a gap")
            # memory follows the bytes that actually arrive: up to PREALLOCATE at once,
            # then doubling, so a header announcing a huge size costs nothing by itself
            buf = bytearray(min(size, PREALLOCATE))
            pos = 0
            for piece in chunks:
                end = pos + len(piece)
                if end > size:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"message from {sender!r} longer than its header says")
                if end > len(buf):
                    buf.extend(bytes(min(max(len(buf), end - len(buf)), size - len(buf))))
                buf[pos:end] = piece
                pos = end
            if pos != size:
                context.abort(grpc.StatusCode.DATA_LOSS,
                              f"message from {sender!r} ended after {pos} of {size} bytes")
            with self._cond:
                info.recv_seq = seq
                self._mail.setdefault((sender, header["tag"]), deque()).append(buf)
                self._cond.notify_all()
        return b"ok"

    def _on_notice(self, request: bytes, context: Any) -> bytes:
        grpc = _grpc()
        notice = _parse(request, _NOTICE, context)
        sender = self._caller(context, notice["sender"])
        if notice["run"] == "" and notice["state"] == "failed" and notice["step"] == "hello":
            # a peer that cannot run tells why during start-up, before any run ID exists;
            # a second instance of it (refused, listening elsewhere) stops nobody
            if (self._run_id is None
                    and self._instance(sender, notice["nonce"]) == "other"):
                log.warning("party %r ignored why a second instance of %r cannot run: %s",
                            self.name, sender, notice["error"][:300])
                return b"ok"
            with self._cond:
                if self._run_id is None:
                    info = self._peers[sender]
                    info.seen = True
                    info.refused = info.refused or (
                        f"party {sender!r} cannot run: {notice['error'][:4000]}")
                    self._cond.notify_all()
                    return b"ok"
        self._check_run(notice["run"], context)
        if notice["state"] not in ("done", "failed"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown state")
        with self._cond:
            info = self._peers[sender]
            if info.state in ("running", "unreachable"):
                info.state, info.step = notice["state"], notice["step"]
                info.detail = notice["error"][:2000]
            self._cond.notify_all()
        return b"ok"

    def _on_ping(self, request: bytes, context: Any) -> bytes:
        ping = _parse(request, _PING, context)
        self._caller(context, ping["sender"])
        return self._nonce  # who answers: a restarted or second instance has another nonce

    # ------------------------------------------------------------------ sending
    def _attempt_timeout(self, size: int) -> float:
        return 30.0 + size / 5e6  # one chunk at most: generous even on a slow link

    def send(self, sender: str, receiver: str, tag: str, data: bytes | bytearray) -> None:
        """Deliver one message to ``receiver``, retrying transient failures.

        A failed attempt (peer not listening, connection reset, a stream that stalls for
        ``stall_timeout`` seconds) is retried with exponential backoff. A receiver that
        does not answer pings for ``liveness`` seconds, during an attempt or between
        attempts, counts as stopped, as it does for a party waiting in :meth:`recv`: the
        message is dropped with a warning (a later receive from it raises
        :class:`~islands.errors.PeerFailedError`). If it answers, retries go on until
        ``send_timeout``, then :class:`~islands.errors.PeerTimeoutError`. A refusal
        (another run, not authenticated, too large, malformed, an error in the
        receiver) raises :class:`~islands.errors.ProtocolError` at once.
        """
        grpc = _grpc()
        if sender != self.name:
            raise ValidationError(f"this transport sends for {self.name!r}, not {sender!r}")
        if receiver not in self._peers:
            raise ValidationError(f"{receiver!r} is not a peer of {self.name!r}")
        if self._run_id is None:
            raise ProtocolError("send before the handshake", party=self.name, step=tag)
        info = self._peers[receiver]
        size = len(data)
        retryable = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                     grpc.StatusCode.CANCELLED)
        with info.lock:
            if self._cancelled is not None:
                raise RunCancelled(self._cancelled, party=sender, step=tag)
            if info.state != "running":
                log.warning("party %r: %r %s; %r message dropped", self.name, receiver,
                            info.state, tag)
                return
            seq = info.sent_seq + 1
            header = _pack({"run": self._run_id, "sender": self.name, "tag": tag, "seq": seq,
                            "size": size})
            delay = 0.05
            first_failure: float | None = None
            while True:
                began = time.monotonic()
                try:
                    self._attempt(receiver, data, header, tag)
                except _Gone:
                    self._dropped(receiver, tag)
                    return
                except (grpc.RpcError, _Stalled) as exc:
                    code = exc.code()
                    if code not in retryable:
                        raise ProtocolError(
                            f"party {receiver!r} refused {tag!r} from {self.name!r}: "
                            f"{code.name}: {exc.details()}", party=self.name, step=tag) from None
                    now = time.monotonic()
                    first_failure = now if first_failure is None else first_failure
                    failing = now - first_failure
                    if failing > self.liveness and not self._answers(receiver):
                        self._mark_unreachable(receiver, f"{code.name}: {exc.details()}", tag)
                        self._dropped(receiver, tag)
                        return
                    if failing > self.send_timeout:
                        raise PeerTimeoutError(
                            f"party {self.name!r} could not deliver {tag!r} to {receiver!r} "
                            f"in {failing:.0f} s ({code.name}: {exc.details()})",
                            party=self.name, peer=receiver, tag=tag,
                            timeout=self.send_timeout) from None
                    if self._cancelled is not None:
                        raise RunCancelled(self._cancelled, party=sender, step=tag) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                info.sent_seq = seq
                info.unreachable_since = None
                info.heard = max(info.heard, began)
                return

    def _dropped(self, receiver: str, tag: str) -> None:
        """Drop a message to a receiver found stopped (raise if this party was the one)."""
        if self._cancelled is not None:
            raise RunCancelled(self._cancelled, party=self.name, step=tag)
        log.warning("party %r: %r did not answer for %g s (liveness); %r message dropped",
                    self.name, receiver, self.liveness, tag)

    def _attempt(self, receiver: str, data: bytes | bytearray, header: bytes,
                 tag: str) -> None:
        """One delivery attempt; raises ``grpc.RpcError``, :class:`_Stalled` or :class:`_Gone`.

        While it waits, the receiver is probed as a party waiting in :meth:`recv` probes
        its sender, so a stalled receiver counts as stopped after ``liveness`` seconds
        whichever way the message goes.
        """
        grpc = _grpc()
        metadata = ((HEADER_KEY, header),)
        size = len(data)
        progress: list[float] | None = None
        if size <= self.chunk:
            call = self._call(receiver, "DeliverOne").future(
                bytes(data), timeout=self._attempt_timeout(size), metadata=metadata)
        else:
            # a long stream has no overall deadline (a slow link is not a dead peer); it
            # is cancelled when no chunk has moved for stall_timeout seconds
            progress = [time.monotonic()]
            call = self._call(receiver, "Deliver").future(self._chunks(data, progress),
                                                          metadata=metadata)
        info = self._peers[receiver]
        gone = False
        next_probe = time.monotonic() + self.probe_interval
        while True:
            try:
                call.result(timeout=min(1.0, self.probe_interval))
                return
            except grpc.FutureTimeoutError:
                pass
            except grpc.FutureCancelledError:
                if gone:
                    raise _Gone() from None
                raise _Stalled(grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"no progress for {self.stall_timeout:g} s") from None
            now = time.monotonic()
            moving = progress is not None and now - progress[0] < self.probe_interval
            if progress is not None and now - progress[0] > self.stall_timeout:
                call.cancel()
            elif moving:
                info.unreachable_since = None  # chunks are leaving: it reads them
            elif now >= next_probe:
                self._probe(receiver, tag)
                next_probe = time.monotonic() + self.probe_interval
                if info.state != "running" or self._cancelled is not None:
                    gone = True
                    call.cancel()

    def _answers(self, peer: str) -> bool:
        """Whether ``peer`` answers a ping now."""
        grpc = _grpc()
        ping = _pack({"run": self._run_id or "", "sender": self.name})
        try:
            self._call(peer, "Ping")(ping, timeout=5.0)
        except grpc.RpcError:
            return False
        return True

    def _chunks(self, data: bytes | bytearray, progress: list[float]) -> Iterator[bytes]:
        view = memoryview(data)
        try:
            for start in range(0, len(view), self.chunk):
                progress[0] = time.monotonic()
                yield bytes(view[start:start + self.chunk])
        finally:
            view.release()

    def _mark_unreachable(self, peer: str, why: str, step: str) -> None:
        """Count ``peer`` as stopped; blame this party if it stalled since it heard from it.

        A party that did not run for ``liveness`` seconds or more (a stopped or frozen
        process) was itself unreachable to its peers for that long: a peer that has
        gone since the last call of this party it answered began most likely counted
        it as stopped and left. (Calls of the peer's own, and answers, may be read
        after the stall though sent before: they prove nothing.)
        The run is then cancelled naming this party, rather than going on without
        that peer as if the peer had failed.
        """
        with self._cond:
            info = self._peers[peer]
            if info.state == "running":
                info.state, info.detail, info.step = "unreachable", why, step
                stall = max((end - start for start, end in self._stalls if end > info.heard),
                            default=0.0)
                if stall and self._cancelled is None:
                    self._cancelled = (
                        f"party {self.name!r} stalled for {stall:.0f} s, longer than the "
                        f"federation tolerates (liveness = {self.liveness:g} s), and "
                        f"{peer!r} stopped answering since: its peers count {self.name!r} "
                        "as stopped, so this run cannot go on")
                    log.error("%s", self._cancelled)
            self._cond.notify_all()

    def _watchdog(self) -> None:
        """Record every stretch of ``liveness`` seconds or more this process did not run."""
        tick = min(0.25, self.liveness / 4)
        last = time.monotonic()
        while not self._closing.wait(tick):
            now = time.monotonic()
            if now - last >= self.liveness:
                with self._cond:
                    self._stalls.append((last, now))
                log.warning("party %r did not run for %.1f s, longer than liveness = %g s: "
                            "its peers may count it as stopped", self.name, now - last,
                            self.liveness)
            last = now

    # ------------------------------------------------------------------ receiving
    def recv(self, receiver: str, sender: str, tag: str, timeout: float) -> bytes | bytearray:
        """Wait for the next ``tag`` message from ``sender``; never longer than ``timeout``."""
        if receiver != self.name:
            raise ValidationError(f"this transport receives for {self.name!r}, not {receiver!r}")
        if sender not in self._peers:
            raise ValidationError(f"{sender!r} is not a peer of {self.name!r}")
        deadline = time.monotonic() + timeout
        next_probe = time.monotonic() + self.probe_interval
        key = (sender, tag)
        info = self._peers[sender]
        while True:
            with self._cond:
                box = self._mail.get(key)
                if box:
                    return box.popleft()
                if self._cancelled is not None:
                    raise RunCancelled(self._cancelled, party=receiver, step=tag)
                if info.state != "running":
                    raise PeerFailedError(self._stopped_message(sender, tag), party=receiver,
                                          peer=sender, tag=tag)
                now = time.monotonic()
                if now >= deadline:
                    raise PeerTimeoutError(
                        f"party {receiver!r} timed out after {timeout:g} s waiting for "
                        f"{tag!r} from {sender!r}",
                        party=receiver, peer=sender, tag=tag, timeout=timeout)
                if now < next_probe:
                    self._cond.wait(min(deadline, next_probe) - now)
                    continue
            self._probe(sender, tag)
            next_probe = time.monotonic() + self.probe_interval

    def _stopped_message(self, sender: str, tag: str) -> str:
        info = self._peers[sender]
        where = f" at step {info.step!r}" if info.step else ""
        if info.state == "failed":
            return (f"party {self.name!r} was waiting for {tag!r} from {sender!r}, but "
                    f"{sender!r} failed{where}: {info.detail}")
        if info.state == "done":
            return (f"party {self.name!r} was waiting for {tag!r} from {sender!r}, but "
                    f"{sender!r} finished without sending it")
        return (f"party {self.name!r} was waiting for {tag!r} from {sender!r}, but {sender!r} "
                f"stopped responding (unreachable for {self.liveness:g} s{where}; "
                f"{info.detail})")

    def _probe(self, peer: str, tag: str) -> None:
        """Ping a peer being waited on; mark it stopped if it stays unreachable."""
        grpc = _grpc()
        info = self._peers[peer]
        ping = _pack({"run": self._run_id or "", "sender": self.name})
        began = time.monotonic()
        try:
            answer = self._call(peer, "Ping")(ping, timeout=min(self.probe_interval, 5.0))
        except grpc.RpcError as exc:
            now = time.monotonic()
            if info.unreachable_since is None:
                info.unreachable_since = now
            elif now - info.unreachable_since >= self.liveness:
                self._mark_unreachable(peer, f"{exc.code().name}: {exc.details()}", tag)
            return
        info.unreachable_since = None
        info.heard = max(info.heard, began)
        if info.nonce is not None and answer != info.nonce:
            with self._cond:
                if info.state == "running":
                    info.state, info.step = "failed", tag
                    info.detail = "it restarted and is no longer in this run"
                self._cond.notify_all()

    # ------------------------------------------------------------------ end of run
    def notify(self, state: str, step: str, error: str = "", *, within: float = 15.0) -> None:
        """Tell every peer still serving that this party is ``done`` or ``failed``.

        ``error`` should name the kind of failure only (an exception's type): its text
        may describe this party's data, and peers get nothing of that. Peers are told
        in parallel; one not yet ready (still connecting) is retried for ``within``
        seconds.
        """
        grpc = _grpc()
        if self._run_id is None:
            return
        body = _pack({"run": self._run_id, "sender": self.name, "state": state,
                      "step": step, "error": error[:200], "nonce": self._nonce})
        deadline = time.monotonic() + within

        def tell(peer: str) -> None:
            delay = 0.05
            while self._peers[peer].state in ("running", "done"):
                try:
                    # wait_for_ready: a channel still backing off from a connection
                    # refused before the peer listened must reconnect, not fail fast
                    self._call(peer, "Notice")(body, timeout=3.0, wait_for_ready=True)
                    return
                except grpc.RpcError as exc:
                    # retry only a peer that answers but has not agreed the run yet; one
                    # that does not answer has stopped (or will be found so by probing)
                    if (exc.code() != grpc.StatusCode.UNAVAILABLE
                            or _NOT_READY not in (exc.details() or "")
                            or time.monotonic() + delay > deadline):
                        return
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

        # a peer that is done may still be lingering to learn how the run ended
        targets = [p for p, i in self._peers.items() if i.state in ("running", "done")]
        threads = [threading.Thread(target=tell, args=(p,), daemon=True) for p in targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join(within + 5)

    def linger(self, timeout: float) -> None:
        """Keep serving until every peer has stopped, or ``timeout`` seconds pass.

        A peer still marked running whose address refuses a ping (UNAVAILABLE: a killed
        process no longer listens) is not waited for: lingering serves peers that may
        still ask how the run ended, and that one cannot. Its state is left as it is.
        """
        grpc = _grpc()
        deadline = time.monotonic() + timeout
        gone: set[str] = set()
        ping = _pack({"run": self._run_id or "", "sender": self.name})
        while True:
            with self._cond:
                waiting = [p for p, i in self._peers.items()
                           if i.state == "running" and p not in gone]
                left = deadline - time.monotonic()
                if not waiting or left <= 0:
                    return
                self._cond.wait(min(left, 0.5))
                waiting = [p for p in waiting if self._peers[p].state == "running"]
            for peer in waiting:
                try:
                    self._call(peer, "Ping")(ping, timeout=min(1.0, self.probe_interval))
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.UNAVAILABLE:
                        gone.add(peer)

    def cancel(self, reason: str) -> None:
        """Make every pending and future send/receive of this party raise RunCancelled."""
        with self._cond:
            if self._cancelled is None:
                self._cancelled = reason
            self._cond.notify_all()

    def peer_states(self) -> dict[str, str]:
        """Each peer's state: running, done, failed or unreachable."""
        with self._cond:
            return {p: i.state for p, i in self._peers.items()}


@dataclass(frozen=True)
class PartyRun:
    """What :func:`run_party` returns.

    Attributes
    ----------
    result
        The role's return value.
    transcript
        The messages this party sent.
    run_id
        The run ID the parties agreed.
    wall_time
        Seconds the role ran (after the handshake).
    connect_time
        Seconds the start-up handshake took.
    """

    result: Any
    transcript: Transcript
    run_id: str
    wall_time: float
    connect_time: float


def run_party(
    name: str,
    role: Callable[[Party], Any],
    addresses: Mapping[str, str],
    *,
    tls: TlsFiles | None = None,
    insecure: bool = False,
    listen: str | None = None,
    digest: str = "",
    fields: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    connect_timeout: float = 60.0,
    liveness: float = 15.0,
    probe_interval: float = 2.0,
    linger: float = 10.0,
    keep_payloads: bool = False,
    on_ready: Callable[[str], None] | None = None,
    chunk: int = CHUNK,
    max_message: int = MAX_MESSAGE,
    tolerate: Iterable[str] = (),
) -> PartyRun:
    """Run one party's role against peers in other processes or on other hosts.

    The role is the same function :func:`~islands.runtime.run_local` runs in a thread.

    Parameters
    ----------
    name
        This party.
    role
        Its role, inputs bound (``functools.partial``).
    addresses
        ``host:port`` of every party, this one included.
    tls, insecure, listen, digest, fields, liveness, probe_interval, chunk, max_message
        See :class:`GrpcTransport`.
    timeout
        Seconds the role waits for one message.
    connect_timeout
        Seconds to wait for every peer to be reachable at start-up.
    linger
        Seconds to keep serving after the role ends, until the peers have ended too.
    keep_payloads
        Keep the bytes of every message sent in the transcript.
    on_ready
        Called with the run ID once every peer is reachable (progress output).
    tolerate
        Peers whose failure does not make this party's result incomplete (a federated
        server's clients). Any other peer that failed by the end of the run makes
        :func:`run_party` raise, even if this party's own role returned, as
        :func:`~islands.runtime.run_local` fails the whole run.

    Returns
    -------
    PartyRun

    Raises
    ------
    PeerTimeoutError
        A peer could not be reached at start-up, or went silent.
    ProtocolError
        The role failed, or a peer failed or stopped (names the party and the step).
    """
    transport = GrpcTransport(name, addresses, listen=listen, tls=tls, insecure=insecure,
                              digest=digest, fields=fields, liveness=liveness,
                              probe_interval=probe_interval,
                              chunk=chunk, max_message=max_message, send_timeout=timeout)
    tolerated = set(tolerate)
    transcript = Transcript(keep_payloads=keep_payloads)
    transport.start()
    try:
        t0 = time.monotonic()
        run_id = transport.handshake(connect_timeout)
        connected = time.monotonic() - t0
        if on_ready is not None:
            on_ready(run_id)
        party = Party(name, transport.parties, transport, transcript, timeout=timeout,
                      identity=transport.identity())
        t1 = time.monotonic()
        try:
            result = role(party)
        except BaseException as exc:
            # peers learn the step and the kind of error, not its text (which may
            # describe this party's data)
            transport.notify("failed", party.step, type(exc).__name__)
            if isinstance(exc, ProtocolError) or not isinstance(exc, Exception):
                raise
            message = (f"party {name!r} failed at step {party.step!r}: "
                       f"{type(exc).__name__}: {exc}")
            if isinstance(exc, ValueError):
                raise PartyInputError(message, party=name, step=party.step) from exc
            raise ProtocolError(message, party=name, step=party.step) from exc
        wall = time.monotonic() - t1
        transport.notify("done", party.step)
        transport.linger(linger)
        lost = {p: st for p, st in transport.peer_states().items()
                if st in ("failed", "unreachable") and p not in tolerated}
        if lost:
            peer, state = next(iter(lost.items()))
            raise PeerFailedError(
                f"party {name!r} finished its role, but {peer!r} "
                f"{'failed' if state == 'failed' else 'stopped responding'} during the run: "
                "the run is incomplete", party=name, peer=peer, tag=party.step)
        return PartyRun(result=result, transcript=transcript, run_id=run_id, wall_time=wall,
                        connect_time=connected)
    finally:
        transport.close()


def refuse_start(name: str, addresses: Mapping[str, str], reason: str, *,
                 tls: TlsFiles | None = None, insecure: bool = False,
                 listen: str | None = None, digest: str = "",
                 fields: Mapping[str, str] | None = None, within: float = 10.0,
                 certificate_refused: bool = False) -> None:
    """Listen only to tell party ``name``'s peers that it cannot run, and why.

    For a party that refused its own input before its run: see
    :meth:`GrpcTransport.refuse_start`. ``reason`` should name a category (the kind of
    error), not details. With ``certificate_refused`` the party refused its own
    certificate and cannot authenticate a notice: it serves that certificate for
    ``within`` seconds instead, and a peer whose hello meets it stops at once, naming
    the party (a certificate that has expired, or that another CA or another party's
    name signed). Other parameters as :func:`run_party`.
    """
    transport = GrpcTransport(name, addresses, listen=listen, tls=tls, insecure=insecure,
                              digest=digest, fields=fields,
                              checked_tls=not certificate_refused)
    transport.start()
    try:
        transport.refuse_start(reason, within)
    finally:
        transport.close()


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Return ``count`` TCP ports that were free on ``host`` a moment ago (tests, demos)."""
    import socket

    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
            ports.append(int(s.getsockname()[1]))
    finally:
        for s in socks:
            s.close()
    return ports


def loopback_addresses(names: Sequence[str]) -> dict[str, str]:
    """Give each party a free loopback address."""
    return {n: f"127.0.0.1:{p}" for n, p in zip(names, free_ports(len(names)), strict=True)}

