"""Raw SecretFlow SPU PSI, the baseline of bench_psi.py: run with SPU's own Python.

Two processes (ranks 0 and 1) on loopback, each running ``spu.psi.psi_execute`` on its
CSV file (one column ``id``) and writing the intersection to a CSV file, as SPU's own
tests do. Timed: from starting the two processes to both having written their output
(Python start, import of spu, link set-up, the PSI, CSV out; the CSV files are written
before the clock starts), and, inside, ``psi_execute`` alone (the slower party). Prints
one JSON line. SPU writes a timing trace per party outside the working folder
(``/tmp/psi_*.trace``); the ones that appeared during the run are deleted after it, as
islands' engine deletes its own.

    .venv-spu/bin/python benchmarks/spu_raw.py N OVERLAP [PROTOCOL_RR22]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import socket
import sys
import tempfile
import time
from pathlib import Path


def _party(rank: int, hosts: list[str], path_in: str, path_out: str, protocol: str,
           path_time: str) -> None:
    import spu.libspu.link as link  # type: ignore[import-not-found]
    import spu.psi as psi  # type: ignore[import-not-found]

    desc = link.Desc()
    desc.id = "bench-raw"
    for i, host in enumerate(hosts):
        desc.add_party(f"rank{i}", host)
    desc.recv_timeout_ms = 3_600_000
    desc.connect_retry_interval_ms = 200
    desc.connect_retry_times = 300
    ctx = link.create_brpc(desc, rank)
    config = psi.PsiExecuteConfig(
        protocol_conf=psi.PsiProtocolConfig(protocol=psi.parse_protocol(protocol),
                                            receiver_rank=0, broadcast_result=True),
        input_params=psi.InputParams(type=psi.SourceType.SOURCE_TYPE_FILE_CSV, path=path_in,
                                     selected_keys=["id"], keys_unique=True),
        output_params=psi.OutputParams(type=psi.SourceType.SOURCE_TYPE_FILE_CSV,
                                       path=path_out, disable_alignment=False))
    t0 = time.perf_counter()
    psi.psi_execute(config, ctx)
    with open(path_time, "w") as f:
        f.write(str(time.perf_counter() - t0))
    ctx.stop_link()


def main() -> None:
    n, overlap = int(sys.argv[1]), float(sys.argv[2])
    protocol = sys.argv[3] if len(sys.argv) > 3 else "PROTOCOL_RR22"
    common = int(n * overlap)
    with tempfile.TemporaryDirectory() as d:
        for name, start in (("a", 0), ("b", n - common)):
            with open(f"{d}/{name}.csv", "w") as f:
                f.write("id\n" + "".join(f"user-{i:09d}\n" for i in range(start, start + n)))
        socks = [socket.socket(), socket.socket()]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        hosts = [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]
        for s in socks:
            s.close()
        ctx = mp.get_context("spawn")
        traces_before = set(Path(tempfile.gettempdir()).glob("psi_*.trace"))
        t0 = time.perf_counter()
        procs = [ctx.Process(target=_party, args=(r, hosts, f"{d}/{'ab'[r]}.csv",
                                                  f"{d}/out{r}.csv", protocol,
                                                  f"{d}/time{r}"))
                 for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        seconds = time.perf_counter() - t0
        for trace in set(Path(tempfile.gettempdir()).glob("psi_*.trace")) - traces_before:
            trace.unlink(missing_ok=True)
        with open(f"{d}/out0.csv") as f:
            found = sum(1 for _ in f) - 1
        execute = [float(Path(f"{d}/time{r}").read_text()) for r in range(2)]
    ok = all(p.exitcode == 0 for p in procs) and found == common
    print(json.dumps({"seconds": seconds, "psi_execute_s": max(execute), "common": found,
                      "ok": ok}))


if __name__ == "__main__":
    main()
