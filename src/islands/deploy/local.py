"""A whole federation on one machine: files, certificates and one process per party.

For trying a deployment before spreading it over machines, for the tests and for the
benchmarks: :func:`write_federation` writes the federation file, a CA and certificates,
and one party file per party, with free loopback ports; :func:`start_parties` starts
``islands party --config FILE`` for each party as its own operating-system process, and
:func:`wait_parties` waits for them with a deadline (killing what is left after it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from islands.deploy.certs import make_certificates
from islands.runtime.grpc_transport import loopback_addresses

__all__ = ["Finished", "start_parties", "wait_parties", "write_federation"]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml(table: Mapping[str, Any], prefix: str = "") -> str:
    """Write a nested mapping of plain values as TOML (scalars first, then tables)."""
    lines = [f"{_key(k)} = {_toml_value(v)}" for k, v in table.items()
             if not isinstance(v, Mapping)]
    for key, value in table.items():
        if isinstance(value, Mapping):
            name = f"{prefix}{_key(key)}"
            lines += ["", f"[{name}]", _toml(value, name + ".").rstrip("\n")]
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else _toml_value(key)


def write_federation(folder: str | os.PathLike[str], protocol: str,
                     parties: Mapping[str, Mapping[str, Any]], *,
                     options: Mapping[str, Any] | None = None, name: str = "local",
                     tls: bool = True, settings: Mapping[str, Any] | None = None
                     ) -> dict[str, Path]:
    """Write a loopback federation: returns each party's party-file path.

    Parameters
    ----------
    folder
        Where to write ``federation.toml``, ``certs/`` and ``<party>.toml``.
    protocol
        ``cca``, ``pca`` or ``hfl``.
    parties
        Party name → its party-file keys besides name, federation and tls (e.g.
        ``{"data": "x.npy"}``); ``output`` defaults to ``out/<party>``.
    options
        The protocol's section.
    name
        The federation's name.
    tls
        Make certificates (default) or mark every party ``insecure``.
    settings
        Top-level federation keys (``timeout``, ``connect_timeout``, ``liveness``).
    """
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    names = list(parties)
    federation: dict[str, Any] = {"name": name, "protocol": protocol, **(settings or {}),
                                  "parties": loopback_addresses(names)}
    if options:
        federation[protocol] = dict(options)
    (root / "federation.toml").write_text(_toml(federation), encoding="utf-8")
    if tls:
        make_certificates(names, root / "certs", overwrite=True)
    files = {}
    for party, keys in parties.items():
        entry: dict[str, Any] = {"name": party, "federation": "federation.toml",
                                 "output": f"out/{party}", **keys}
        if tls:
            entry["tls"] = {"ca": "certs/ca.pem", "cert": f"certs/{party}.pem",
                            "key": f"certs/{party}.key"}
        else:
            entry["insecure"] = True
        path = root / f"{party}.toml"
        path.write_text(_toml(entry), encoding="utf-8")
        files[party] = path
    return files


def start_parties(files: Mapping[str, Path], *, extra_args: Sequence[str] = (),
                  env: Mapping[str, str] | None = None,
                  only: Sequence[str] | None = None) -> dict[str, subprocess.Popen[str]]:
    """Start ``islands party --config FILE`` per party, each its own process.

    Output goes to ``<party>.log`` beside the party file.
    """
    procs = {}
    environ = {**os.environ, **(env or {})}
    # the parties import the same islands as this process, installed or not
    here = str(Path(__file__).resolve().parents[2])
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, environ.get("PYTHONPATH", "")) if p)
    for party, path in files.items():
        if only is not None and party not in only:
            continue
        log = open(path.with_suffix(".log"), "w", encoding="utf-8")  # noqa: SIM115 - kept by the process
        procs[party] = subprocess.Popen(
            [sys.executable, "-m", "islands.cli", "party", "--config", str(path),
             *extra_args],
            stdout=log, stderr=subprocess.STDOUT, text=True, env=environ,
            cwd=str(path.parent))
        log.close()
    return procs


@dataclass(frozen=True)
class Finished:
    """A party process's exit code and its log."""

    returncode: int
    log: str


def wait_parties(procs: Mapping[str, subprocess.Popen[str]], files: Mapping[str, Path],
                 timeout: float) -> dict[str, Finished]:
    """Wait for every process until ``timeout`` seconds in all; kill the ones still running."""
    deadline = time.monotonic() + timeout
    out = {}
    for party, proc in procs.items():
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log = files[party].with_suffix(".log").read_text(encoding="utf-8")
        out[party] = Finished(returncode=proc.returncode, log=log)
    return out
