"""PSI on SecretFlow SPU's RR22 engine, driven from islands through files and a subprocess.

RR22 (Raghuraman and Rindal, 2022) is OT-extension (VOLE) PSI, about twenty times faster
than islands' Diffie–Hellman PSI at a million IDs. It is SPU's maintained C++ engine, not
written here. SPU 0.9.5 pins numpy < 2 and Python < 3.12, which islands' core does not,
so SPU lives in its own environment (``make spu`` builds ``.venv-spu``) and each party
runs :mod:`islands.psi._spu_worker` with that environment's Python. What this module
writes by hand is only the bridge: the IDs go to a CSV file in a private temporary
directory (one CSV-safe key per ID, :func:`spu_keys`, and the ID's row), the worker runs
with a timeout, and the intersection it writes is read back and checked (every row one
of this party's and holding its key, none twice, as many as SPU reports). A worker stays
after its result until islands stops it, once the peer has its result too: SPU can
return before its last message to the peer has left, and a worker that exited at once
left its peer waiting for that message, now and then, until the timeout. The files are
written and read as whole buffers, not line by line: at a million IDs islands' share of
the run is then small beside SPU's own. No pickle crosses: a JSON request, a JSON report
and two CSV files.

**Starting without a stall.** SPU's link says hello twice under the same message keys:
once when it opens (``create_brpc`` ends with yacl's ``ConnectToMesh``) and again when
the PSI starts (``AbstractPsiParty::Init``). A party keeps one message per key and
silently drops a second that comes before it has read the first, and a party reads its
peer's first hello only after the peer has answered its own. When that answer was late
(a busy machine: about 1 run in 60 with two to four PSIs at once on 2 cores), the
party that opened first sent its second hello before the other had read the first; it
was dropped, and both SPUs waited at ``[AbstractPsiParty::Init] start`` for the whole
timeout, neither logging an error (the ``test_spu_takes_any_string_or_bytes_id`` hang
of issue 37). The worker therefore waits after opening the link until the peer has
opened its own (a barrier over the link, :mod:`islands.psi._spu_worker`): no second
hello leaves before the first has been read. Side by side on the same busy machine,
400 runs each, 6 stalled before and none after
(``test_a_late_reply_on_spus_link_does_not_stall_its_start`` makes the late answer
every time). The link's handshake is in SPU's log (``log_details``). A port chosen free
(:func:`free_loopback_hosts`) that another process takes before SPU listens on it stops
that party's SPU at once with :class:`SpuAddressInUse`, naming the address; parties run
here together are waited for together (:func:`finish_all`), so the other is not left
waiting for it until its timeout, and :func:`islands.psi.align` starts such a run again
on fresh ports.

Both parties learn the intersection (SPU's ``broadcast_result``); the two SPU processes
talk over SPU's own link (brpc), with mutual TLS when certificate files are given
(:class:`islands.runtime.tls.TlsFiles`).

**Whose SPU is on the other end.** brpc checks only that the peer's certificate chains to
the CA file it is given (SPU 0.9.5's ``link.SSLOptions`` hold a certificate, a key, a CA
file and a depth, nothing that names the peer). With the federation's CA there, any
member of the federation could stand in for another's SPU. Between organisations each
party therefore makes a certificate for the one run (:func:`run_certificate`, a fresh
P-256 key from OpenSSL's CSPRNG, self-signed), sends it over islands' own channel, which
has authenticated the peer by its federation certificate, and gives its SPU the peer's
run certificate as the only CA (:func:`pinned_tls`): brpc then accepts exactly the
holder of that key, the party islands' channel named. The federation's own party
certificates cannot be pinned that way: they are not self-signed, and brpc does not let
OpenSSL end a chain below a self-signed root, so pinning one fails every handshake.

References
----------
.. [1] S. Raghuraman, P. Rindal, "Blazing Fast PSI from Improved OKVS and Subfield VOLE",
   ACM CCS 2022.
.. [2] SecretFlow SPU 0.9.5, ``spu.psi.psi_execute`` and ``spu.libspu.link.create_brpc``.
.. [3] SecretFlow PSI, ``psi/interface.cc`` (``AbstractPsiParty::Init``); YACL,
   ``yacl/link/context.cc`` (``Context::ConnectToMesh``) and
   ``yacl/link/transport/channel.cc`` (``Channel::TestSend``, ``OnNormalMessage``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from islands.errors import PeerTimeoutError, ProtocolError, ValidationError
from islands.psi._spu_worker import ADDRESS_IN_USE
from islands.runtime.tls import TlsFiles

__all__ = ["SPU_PROTOCOL", "SPU_PYTHON_ENV", "RunCertificate", "SpuAddressInUse", "SpuLink",
           "SpuParty", "check_run_certificate", "finish_all", "free_loopback_hosts",
           "new_link_id", "pinned_tls", "run_certificate", "spu_keys", "spu_python"]

SPU_PROTOCOL = "PROTOCOL_RR22"
"""The SPU PSI protocol islands runs."""

SPU_PYTHON_ENV = "ISLANDS_SPU_PYTHON"
"""Environment variable naming the Python of an environment that has ``spu`` 0.9.5."""

_WORKER = Path(__file__).with_name("_spu_worker.py")
_PROJECT = Path(__file__).resolve().parents[3]
_LOG_TAIL = 2000
_TRACE = re.compile(r"Trace has been written to (/tmp/psi_[A-Za-z0-9_-]+\.trace)")


def spu_python(owner: str = "PSI engine 'spu'", setting: str = "engine") -> Path:
    """Return the Python of SPU's environment, or raise saying how to build it.

    ``$ISLANDS_SPU_PYTHON`` when set, else ``.venv-spu/bin/python`` in the islands
    checkout (what ``make spu`` builds). ``setting`` is the name the caller gives the
    engine choice (the message suggests ``<setting>='dh'`` instead).

    Raises
    ------
    ValidationError
        When that Python does not exist.
    """
    configured = os.environ.get(SPU_PYTHON_ENV)
    path = Path(configured) if configured else _PROJECT / ".venv-spu" / "bin" / "python"
    if not path.is_file():
        where = f"${SPU_PYTHON_ENV} = {configured!r}" if configured else str(path)
        raise ValidationError(
            f"{owner}: SecretFlow SPU's environment is missing ({where} does not exist). "
            "Build it with `make spu` in the islands checkout (a separate .venv-spu with "
            f"spu==0.9.5, which needs Python 3.10 or 3.11), or set {SPU_PYTHON_ENV} to the "
            f"Python of an environment that has spu==0.9.5; or choose {setting}='dh'.")
    return path


def free_loopback_hosts(n: int = 2) -> tuple[str, ...]:
    """Return ``n`` ``127.0.0.1:port`` addresses whose ports were free a moment ago."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return tuple(f"127.0.0.1:{s.getsockname()[1]}" for s in socks)
    finally:
        for s in socks:
            s.close()


class SpuAddressInUse(ProtocolError):
    """SPU's link could not listen on this party's address: another process holds it."""


@dataclass(frozen=True)
class SpuLink:
    """How one party reaches the other over SPU's link.

    Attributes
    ----------
    link_id
        The run's name; both parties use the same.
    hosts
        ``host:port`` of rank 0 (the initiator) and rank 1; each party listens on its own.
    rank
        This party's rank, 0 or 1.
    tls
        The federation's CA, this party's certificate and key for mutual TLS, or None
        (loopback only).
    """

    link_id: str
    hosts: tuple[str, str]
    rank: int
    tls: TlsFiles | None = None


class SpuParty:
    """One party's run of SPU PSI.

    :meth:`launch` starts SPU's worker (it imports SPU, then waits), :meth:`submit` hands
    it this party's IDs, :meth:`wait_ready` and :meth:`go` let it open the link, and
    :meth:`finish` waits for the result; :meth:`start` does the four in a row. The worker
    starts before the IDs are ready so that importing SPU (about a second) overlaps
    islands' own checks, and two local parties open their links together (a party that
    finds its peer not yet listening waits seconds in brpc's reconnection back-off).

    Parameters
    ----------
    name
        This party's name (errors name it).
    peer
        The other party's name.
    link
        How to reach the peer.
    timeout
        Seconds the whole run may take, > 0.
    protocol
        SPU's protocol name (``"PROTOCOL_RR22"``).

    Raises
    ------
    ValidationError
        When SPU's environment is missing (:func:`spu_python`).
    """

    def __init__(self, name: str, peer: str, link: SpuLink, *, timeout: float,
                 protocol: str = SPU_PROTOCOL) -> None:
        self.name = name
        self.peer = peer
        self.link = link
        self.timeout = timeout
        self._python = spu_python(f"PSI party {name!r}")
        self._protocol = protocol
        self._keys: list[bytes] | None = None
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None
        self._deadline = 0.0
        self.report: dict[str, float] = {}
        """SPU's counts and seconds (import, wait, link, PSI), once :meth:`finish` returned."""

    def start(self, encoded: Sequence[bytes]) -> None:
        """Launch the worker, hand it ``encoded`` and let it connect at once."""
        self.launch()
        self.submit(encoded)
        self.wait_ready()
        self.go()

    def launch(self) -> None:
        """Start SPU's worker in a new private directory; it imports SPU and waits."""
        self._dir = Path(tempfile.mkdtemp(prefix="islands-spu-"))  # mode 0700
        self._log = self._dir / "spu.log"
        # SPU keeps its scratch files under TMPDIR: inside the private directory
        env = {**os.environ, "TMPDIR": str(self._dir)}
        self._deadline = time.monotonic() + self.timeout
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(
                [str(self._python), "-I", str(_WORKER), str(self._dir),
                 str(max(1, int(self.timeout * 1000)))],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)

    def submit(self, encoded: Sequence[bytes]) -> None:
        """Write this party's IDs (canonical, unique encodings) and the run's request.

        The CSV file has two columns: ``id``, this party's key for each ID
        (:func:`spu_keys`), and ``row``, its position, which SPU copies to its output
        so that no key has to be looked up when the result comes back.
        """
        assert self._dir is not None, "launch() first"
        keys = spu_keys(encoded)
        rows = "\n".join(map(str, range(len(keys)))).encode("ascii").split(b"\n")
        inp = self._dir / "ids.csv"
        with open(inp, "wb") as f:
            f.write(b"id,row\n")
            f.write(b"\n".join(map(b",".join, zip(keys, rows, strict=True))))
            f.write(b"\n")
        self._keys = keys
        tls = self.link.tls
        request = {"protocol": self._protocol, "rank": self.link.rank,
                   "link_id": self.link.link_id, "hosts": list(self.link.hosts),
                   "input": str(inp), "output": str(self._dir / "common.csv"),
                   "report": str(self._dir / "report.json"),
                   "timeout_ms": max(1, int((self._deadline - time.monotonic()) * 1000)),
                   "tls": None if tls is None else {"ca": str(tls.ca), "cert": str(tls.cert),
                                                    "key": str(tls.key)}}
        part = self._dir / "request.part"
        part.write_text(json.dumps(request), encoding="utf-8")
        part.rename(self._dir / "request.json")

    def wait_ready(self) -> None:
        """Wait until the worker has imported SPU.

        Raises
        ------
        PeerTimeoutError, ProtocolError
            As :meth:`finish`, when the worker stops or the timeout passes first.
        """
        assert self._proc is not None and self._dir is not None, "launch() first"
        if not self._wait_for("ready"):
            self.finish()  # raises: the worker failed or ran out of time

    def go(self) -> None:
        """Let the worker open SPU's link and run (after :meth:`submit`)."""
        assert self._dir is not None and self._keys is not None, "submit() first"
        (self._dir / "go").touch()

    def finish(self) -> NDArray[np.int64]:
        """Wait for SPU's result (within the timeout); return the rows of the common IDs.

        The rows are positions in this party's ``encoded``, in SPU's order (sorted by
        key, the same on both sides). The worker stays after its result until
        :meth:`close` (or its timeout): SPU can return before its last message to the
        peer has left, so a party closes only once the peer has its result too (both
        :meth:`finish` calls returned, or the peer said so over islands' channel).

        Raises
        ------
        PeerTimeoutError
            When the run takes longer than ``timeout`` (the worker is killed).
        ProtocolError
            When SPU fails (with the end of its log) or its output does not check out
            (the worker is stopped in both cases).
        """
        if self._proc is None or self._dir is None:
            raise RuntimeError("SpuParty.finish() before start()")
        try:
            done = self._wait_for("finished")
            rc = None if done else self._proc.poll()  # an exit status, or None: still running
            if not done and rc is None:  # the timeout passed first
                self._kill()
                self._refused_tls()
                raise PeerTimeoutError(
                    f"PSI party {self.name!r}: SPU's PSI with party {self.peer!r} did not "
                    f"finish within timeout = {self.timeout:g} s; its process was stopped "
                    "(a peer that never connects, or refuses this party's certificate, "
                    f"looks like this). The end of its log:\n{self._log_tail()}",
                    party=self.name, peer=self.peer, tag="spu", timeout=self.timeout
                    ) from None
            if rc:  # a clean exit (0) without the marker: the output is checked below
                self._listen_failed(rc)
                raise ProtocolError(
                    f"PSI party {self.name!r}: SPU's PSI with party {self.peer!r} failed "
                    f"(exit status {rc}); the end of its log:\n{self._log_tail()}",
                    party=self.name, step="spu")
            return self._read()
        except BaseException:
            self.close()
            raise

    def ended(self) -> bool:
        """Whether :meth:`finish` would return or raise at once.

        True once the worker has its result, has stopped, or the timeout has passed.
        """
        assert self._proc is not None and self._dir is not None, "launch() first"
        return ((self._dir / "finished").exists() or self._proc.poll() is not None
                or time.monotonic() > self._deadline)

    def _wait_for(self, marker: str) -> bool:
        """Wait until the worker creates ``marker`` in its directory.

        False when the worker ended without it or the timeout passed first.
        """
        assert self._proc is not None and self._dir is not None
        path = self._dir / marker
        while not path.exists():
            if self._proc.poll() is not None or time.monotonic() > self._deadline:
                return path.exists()
            time.sleep(0.005)
        return True

    def close(self) -> None:
        """Stop the worker if it still runs and delete the private directory.

        Also deletes the timing trace SPU writes outside it (``/tmp/psi_*.trace``, named
        in its log).
        """
        if self._proc is not None and self._proc.poll() is None:
            self._kill()
        if self._dir is not None:
            for match in _TRACE.finditer(self._log_tail(limit=None)):
                with contextlib.suppress(OSError):
                    Path(match.group(1)).unlink()
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _listen_failed(self, rc: int) -> None:
        """Raise when SPU's link could not listen on this party's address.

        The worker exits with :data:`ADDRESS_IN_USE` when it found the address held; brpc's
        own "Fail to listen <address>" in the log, with the worker stopped by the error,
        means the same whose holder has let go since (or an address not this machine's).
        """
        host = self.link.hosts[self.link.rank]
        port = host.rpartition(":")[2]
        listen = re.search(rf"Fail to listen \S*:{re.escape(port)}\b", self._log_tail(None))
        if rc != ADDRESS_IN_USE and not listen:
            return
        why = ("another process holds that address" if rc == ADDRESS_IN_USE else
               "another process held that address when SPU started, or it is not one "
               "of this machine's")
        raise SpuAddressInUse(
            f"PSI party {self.name!r}: SPU cannot listen on {host}: {why}, so SPU's PSI "
            f"with party {self.peer!r} did not start (choose another port)",
            party=self.name, step="spu")

    def _refused_tls(self) -> None:
        """Raise when the log shows a TLS handshake that failed over a certificate.

        OpenSSL's reasons, as brpc logs them: this party's SPU did not accept the peer's
        certificate (``certificate verify failed``), or the peer's SPU did not accept
        this party's (``alert unknown ca``, ``alert bad certificate``).
        """
        log = self._log_tail(limit=None)
        if "certificate verify failed" in log:
            raise ProtocolError(
                f"PSI party {self.name!r}: the SPU of party {self.peer!r} presented a "
                "certificate this party's SPU does not accept (not the certificate "
                f"{self.peer!r} announced over islands' channel, or not from the CA given), "
                "so SPU's link was refused before any ID crossed it. The end of its log:\n"
                f"{self._log_tail()}", party=self.name, step="spu-tls")
        if "alert unknown ca" in log or "alert bad certificate" in log:
            raise ProtocolError(
                f"PSI party {self.name!r}: the SPU of party {self.peer!r} refused this "
                "party's certificate, so SPU's link was refused before any ID crossed it. "
                f"The end of its log:\n{self._log_tail()}", party=self.name, step="spu-tls")

    def _kill(self) -> None:
        assert self._proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait(timeout=10)

    def _log_tail(self, limit: int | None = _LOG_TAIL) -> str:
        if self._log is None:
            return "(no log)"
        try:
            text = self._log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return text if limit is None else text[-limit:]

    def _read(self) -> NDArray[np.int64]:
        assert self._dir is not None and self._keys is not None
        report = json.loads((self._dir / "report.json").read_text(encoding="utf-8"))
        self.report = report
        bad = f"PSI party {self.name!r}: SPU's result with party {self.peer!r} "
        try:
            data = (self._dir / "common.csv").read_bytes()
        except OSError as exc:
            raise ProtocolError(bad + f"cannot be read: {exc}", party=self.name,
                                step="spu") from None
        # keys and rows hold no quote, comma or white space (spu_keys): one split gives
        # header, header, key, row, key, row, ...
        cells = data.replace(b'"', b"").replace(b",", b"\n").split()
        n = len(self._keys)
        if (cells[:2] != [b"id", b"row"] or len(cells) % 2
                or report.get("original_count") != n):
            raise ProtocolError(bad + f"is malformed (header {cells[:2]!r}, report {report})",
                                party=self.name, step="spu")
        try:
            rows = np.array(cells[3::2], dtype="S").astype(np.int64)
        except ValueError:
            rows = np.full(1, -1, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise ProtocolError(bad + "holds a row this party does not hold",
                                party=self.name, step="spu")
        got = cells[2::2]
        if got != [self._keys[r] for r in rows.tolist()]:
            raise ProtocolError(bad + "holds an ID this party does not hold at that row",
                                party=self.name, step="spu")
        seen = np.zeros(n, dtype=bool)
        seen[rows] = True
        if rows.size != report.get("intersection_count") or int(seen.sum()) != rows.size:
            raise ProtocolError(bad + f"holds {rows.size} IDs, SPU reports "
                                f"{report.get('intersection_count')} (or repeats one)",
                                party=self.name, step="spu")
        return rows


def finish_all(parties: Sequence[SpuParty]) -> list[NDArray[np.int64]]:
    """Wait for the results of parties run here together; return them in order.

    The first party to fail is raised at once, not after the others' timeouts: a party
    whose SPU has stopped leaves its peer waiting for it until the peer's timeout. The
    caller closes every party (:meth:`SpuParty.close`), which stops the others.

    Raises
    ------
    PeerTimeoutError, ProtocolError
        As :meth:`SpuParty.finish`, for the first party that fails.
    """
    rows: dict[int, NDArray[np.int64]] = {}
    while len(rows) < len(parties):
        ended = [i for i, p in enumerate(parties) if i not in rows and p.ended()]
        for i in ended:
            rows[i] = parties[i].finish()
        if not ended:
            time.sleep(0.005)
    return [rows[i] for i in range(len(parties))]


_PLAIN = (b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
          b"-_.:@/+=~!#$%&*?^|()[]{}<>")
"""The bytes a key keeps as they are: no comma, quote, white space, backslash or
control byte, nothing a CSV reader or writer could quote, trim or change."""


def spu_keys(encoded: Sequence[bytes]) -> list[bytes]:
    """Return the CSV key of each encoded ID: itself when plain, else ``x`` + its hex.

    An encoding (:func:`islands.crypto.psi.encode_ids`: ``i``, ``s`` or ``b`` and the
    ID) made only of :data:`_PLAIN` bytes is its own key; any other is ``x`` and its
    hex. The rule looks at one ID at a time, so both parties give an ID the same key,
    and no two IDs share one (a plain key never starts with ``x``). Plain keys are half
    as long as hex ones, which SPU reads twice and hashes.
    """
    joined = b"\n".join(encoded)
    if not joined.translate(None, _PLAIN + b"\n") and joined.count(b"\n") == len(encoded) - 1:
        return list(encoded)  # all plain: one pass over the bytes
    return [e if e and not e.translate(None, _PLAIN) else b"x" + e.hex().encode("ascii")
            for e in encoded]


@dataclass(frozen=True)
class RunCertificate:
    """A certificate made for one run of SPU's link, and its private key (PEM bytes)."""

    cert: bytes
    key: bytes = field(repr=False)


_RUN_CERT_MAX = 4096
_RUN_CERT_DAYS = 2


def run_certificate(name: str) -> RunCertificate:
    """Return a fresh self-signed certificate for party ``name``'s SPU, for one run.

    The key is ECDSA on P-256 from :mod:`cryptography` (OpenSSL's CSPRNG); the
    certificate names the party (common name) and is valid from five minutes ago for
    two days, enough for any run's timeout.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=_RUN_CERT_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False)
            .sign(key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return RunCertificate(cert.public_bytes(pem), key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def check_run_certificate(pem: bytes, peer: str, name: str) -> str:
    """Check a peer's run certificate; return its SHA-256 fingerprint (hex).

    It must be one PEM certificate of at most 4096 bytes, self-signed with a P-256 key,
    and valid now.

    Raises
    ------
    ProtocolError
        Naming this party (``name``), ``peer`` and what is wrong.
    """
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    bad = f"PSI party {name!r}: party {peer!r} sent a run certificate for SPU's link that "
    if not isinstance(pem, bytes) or not 0 < len(pem) <= _RUN_CERT_MAX \
            or pem.count(b"-----BEGIN") != 1:
        raise ProtocolError(bad + "is not one PEM certificate", party=name, step="hello")
    try:
        cert = x509.load_pem_x509_certificate(pem)
        cert.verify_directly_issued_by(cert)
    except (ValueError, TypeError, InvalidSignature):
        raise ProtocolError(bad + "is not a valid self-signed certificate", party=name,
                            step="hello") from None
    public = cert.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey) or public.curve.name != "secp256r1":
        raise ProtocolError(bad + "has no P-256 key", party=name, step="hello")
    now = datetime.datetime.now(datetime.timezone.utc)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise ProtocolError(bad + "is not valid now", party=name, step="hello")
    return cert.fingerprint(hashes.SHA256()).hex()


def pinned_tls(folder: Path, own: RunCertificate, peer_cert: bytes) -> TlsFiles:
    """Write this party's run certificate and key and the peer's; return SPU's TLS files.

    The peer's run certificate is the only CA: SPU accepts no other peer. ``folder``
    must be private (``tempfile.mkdtemp``); the key file is created with mode 0600.
    """
    files = TlsFiles(ca=folder / "peer.pem", cert=folder / "own.pem", key=folder / "own.key")
    fd = os.open(files.key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(own.key)
    files.cert.write_bytes(own.cert)
    files.ca.write_bytes(peer_cert)
    return files


def new_link_id() -> str:
    """Return a fresh, unguessable name for one run's link."""
    return "islands-psi-" + secrets.token_hex(8)
