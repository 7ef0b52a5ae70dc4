"""One party of SecretFlow SPU's PSI, run inside SPU's own environment (``.venv-spu``).

islands cannot import ``spu`` (0.9.5 needs numpy < 2 and Python < 3.12), so
:mod:`islands.psi.spu_engine` runs this file with that environment's Python. It imports only
the standard library and ``spu``. Given the run's private directory (``argv[1]``) and a
timeout in milliseconds (``argv[2]``), it imports SPU, creates ``ready`` there, waits for
``go`` (both parties then open the link together: a party that finds its peer not yet
listening waits seconds in brpc's reconnection back-off), reads ``request.json``, opens
SPU's own link (brpc, optionally with mutual TLS) and waits there for the peer's (a
barrier: see :func:`main`), runs ``spu.psi.psi_execute`` for this party, writes a JSON
report where the request says, creates ``finished`` and stays until islands stops it (or
its timeout passes). It exits with :data:`ADDRESS_IN_USE` when its link cannot listen on
its address, because another process holds it. Nothing else passes between the two
environments: the IDs go through a CSV file in the caller's private directory, the
intersection comes back the same way.

Request keys: ``protocol`` (``"PROTOCOL_RR22"``), ``rank`` (0 receives first, both learn
the result), ``link_id``, ``hosts`` (``host:port`` of rank 0 and rank 1), ``input`` and
``output`` (CSV paths: the key column ``id`` and the column ``row``, which SPU copies
to the output), ``report`` (a path), ``timeout_ms`` (what
is left of the run's time), ``tls`` (None or ``{"ca", "cert", "key"}`` PEM paths).

References
----------
SecretFlow SPU 0.9.5, ``spu/psi.py`` and ``spu/libpsi.pyi`` (``psi_execute``,
``PsiExecuteConfig``) and ``spu/libspu.pyi`` (``link.Desc``, ``SSLOptions``,
``create_brpc``, which ends with ``ConnectToMesh``). SecretFlow PSI,
``psi/interface.cc`` (``AbstractPsiParty::Init`` calls ``ConnectToMesh`` again); YACL,
``yacl/link/context.cc`` (``ConnectToMesh``: ``TestSend`` then ``TestRecv``) and
``yacl/link/transport/channel.cc`` (``TestSend`` sends ``connect_<rank>`` with sequence
number 0; ``OnNormalMessage`` keeps one message per key and ignores a second of
sequence number 0).
"""

from __future__ import annotations

import json
import os
import sys
import time

ADDRESS_IN_USE = 4
"""Exit status when SPU's link cannot listen on this party's address (it is in use)."""


def main(workdir: str, timeout_ms: int) -> int:
    """Run one PSI party as the request in ``workdir`` says; exit with its status."""
    # this file's directory holds islands modules, which must not shadow SPU's imports
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    deadline = time.monotonic() + timeout_ms / 1000
    t_start = time.perf_counter()
    import spu.libspu.link as link  # type: ignore[import-not-found]
    import spu.psi as psi  # type: ignore[import-not-found]

    t_import = time.perf_counter()
    open(os.path.join(workdir, "ready"), "w").close()
    while not os.path.exists(os.path.join(workdir, "go")):
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.002)
    t_ready = time.perf_counter()
    with open(os.path.join(workdir, "request.json"), encoding="utf-8") as f:
        req = json.load(f)
    timeout_ms = int(req["timeout_ms"])
    desc = link.Desc()
    desc.id = req["link_id"]
    for i, host in enumerate(req["hosts"]):
        desc.add_party(f"rank{i}", host)
    desc.recv_timeout_ms = timeout_ms
    desc.http_timeout_ms = timeout_ms
    # keep trying to reach the peer for the whole timeout (it may start later)
    desc.connect_retry_interval_ms = 50
    desc.connect_retry_times = max(1, timeout_ms // 50)
    tls = req.get("tls")
    if tls:
        desc.enable_ssl = True
        for opts in (desc.client_ssl_opts, desc.server_ssl_opts):
            opts.cert.certificate_path = tls["cert"]
            opts.cert.private_key_path = tls["key"]
            opts.verify.ca_file_path = tls["ca"]
            opts.verify.verify_depth = 1
    try:
        # log_details: the link's handshake in the log, where a stuck start would show
        ctx = link.create_brpc(desc, int(req["rank"]), log_details=True)
    except RuntimeError as exc:
        own = req["hosts"][int(req["rank"])]
        if "brpc server failed start" not in str(exc) or not _in_use(own):
            raise
        # another process holds this party's address (brpc logged "Fail to listen")
        print(f"islands: SPU cannot listen on {own}: the address is in use", flush=True)
        return ADDRESS_IN_USE
    # Both parties through create_brpc before either goes on. create_brpc ends with
    # yacl's handshake (ConnectToMesh: a "connect_<rank>" message each way), and
    # psi_execute begins with the same handshake again, under the same keys; a party
    # keeps one message per key, and drops a second that comes before it has read the
    # first. A party that reached psi_execute while its peer was still waiting for the
    # reply to its own first handshake message (the peer reads the first message only
    # after that reply) had its second message dropped, and both then waited for the
    # whole timeout, each at "[AbstractPsiParty::Init] start" (now and then on a busy
    # machine; every time when the reply is late). The barrier returns only once the
    # peer's create_brpc has returned, so the peer has read the first message by then.
    ctx.barrier()
    t_link = time.perf_counter()
    # disable_alignment: islands puts the result in its aligned order itself, so SPU's
    # sort of the output by key would be work done twice
    config = psi.PsiExecuteConfig(
        protocol_conf=psi.PsiProtocolConfig(
            protocol=psi.parse_protocol(req["protocol"]), receiver_rank=0,
            broadcast_result=True),
        input_params=psi.InputParams(type=psi.SourceType.SOURCE_TYPE_FILE_CSV,
                                     path=req["input"], selected_keys=["id"],
                                     keys_unique=True),
        output_params=psi.OutputParams(type=psi.SourceType.SOURCE_TYPE_FILE_CSV,
                                       path=req["output"], disable_alignment=True))
    report = psi.psi_execute(config, ctx)
    part = req["report"] + ".part"
    with open(part, "w", encoding="utf-8") as f:
        json.dump({"original_count": report.original_count,
                   "intersection_count": report.intersection_count,
                   "import_s": t_import - t_start, "wait_s": t_ready - t_import,
                   "link_s": t_link - t_ready,
                   "psi_s": time.perf_counter() - t_link}, f)
    os.replace(part, req["report"])
    sys.stdout.flush()
    sys.stderr.flush()
    open(os.path.join(workdir, "finished"), "w").close()
    # Stay until islands stops this process. psi_execute can return before its last
    # asynchronous message has left; a party that exited at once left its peer waiting
    # for that message until the timeout, now and then (about once in 60 runs on a loaded
    # machine). islands ends this process only once the peer's psi_execute has returned
    # too (both parties' "finished", or the peer's word over islands' own channel). No
    # stop_link: with TLS, brpc aborts the process now and then (a failed check in
    # controller.cpp) when the peer has already gone.
    while time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0)


def _in_use(host: str) -> bool:
    """Whether another socket holds ``host`` (``ip:port``), as brpc would bind it."""
    import errno
    import socket

    ip, _, port = host.rpartition(":")
    try:
        with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip.strip("[]"), int(port)))
    except OSError as exc:
        return exc.errno == errno.EADDRINUSE
    except ValueError:
        return False
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
