"""Run one organisation's party from its party file: ``islands party --config FILE``.

Everything that can be checked alone is checked before the party listens: the files, the
federation description, its certificate, the data's shape and the protocol's options. Run
by ``islands party``, a party that refuses its own input, settings or certificate then
listens only to tell its peers so, naming the kind of error and never its details, for
at most :data:`REFUSAL_WINDOW` seconds
(:func:`islands.runtime.grpc_transport.refuse_start`): they stop at once instead of
waiting ``connect_timeout`` for it. Otherwise the party reaches every peer (bounded by
``connect_timeout``), runs its role over gRPC with mutual TLS
(:func:`islands.runtime.grpc_transport.run_party`) and writes its result.

A result is written only when the role finished: files go to a hidden folder beside the
output and are renamed into place at the end, so a crashed or failed run never leaves
something that looks complete. A failure writes ``<output>.failed.json`` instead (the
error, the step and the run ID; no data).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from islands.deploy.config import PartyConfig, load_party_config
from islands.deploy.protocols import prepare
from islands.errors import IslandsError, JobError, ValidationError
from islands.reporting import JsonRow
from islands.runtime.grpc_transport import refuse_start, run_party
from islands.runtime.tls import check_tls
from islands.threads import torch_threads

__all__ = ["REFUSAL_WINDOW", "PartyRecord", "run_configured", "run_party_file"]

log = logging.getLogger(__name__)

MARKER = "party.json"

REFUSAL_WINDOW = 10.0
"""Seconds, at most, a party that refused its own input or certificate tells its peers."""


@dataclass(frozen=True)
class PartyRecord(JsonRow):
    """What a party ran and sent; :meth:`to_json` is its ``<output>/party.json``.

    Attributes
    ----------
    party, protocol, federation
        This party's name, the protocol and the federation's name.
    run_id
        The run's ID, the same for every party of the run.
    description
        One line saying what the party's role computed.
    connect_seconds, role_seconds, total_seconds
        Time to reach every peer, time in the role, and in all.
    bytes_sent
        Receiver → bytes this party sent it.
    messages_sent
        Messages this party sent.
    result
        The protocol's own summary of the party's result (its spec's writer).
    """

    party: str
    protocol: str
    federation: str
    run_id: str
    description: str
    connect_seconds: float
    role_seconds: float
    total_seconds: float
    bytes_sent: dict[str, int]
    messages_sent: int
    result: dict[str, Any]

    @property
    def total_bytes_sent(self) -> int:
        """Bytes sent to all peers."""
        return sum(self.bytes_sent.values())


    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartyRecord:
        """Read a ``party.json`` mapping back.

        Raises
        ------
        ValidationError
            If a key is missing or unknown.
        """
        names = [f.name for f in fields(cls)]
        missing = [k for k in names if k not in data]
        unknown = [k for k in data if k not in names]
        if missing or unknown:
            raise ValidationError(f"not a party record: missing {missing}, unknown {unknown}")
        return cls(**{k: data[k] for k in names})

    @classmethod
    def read(cls, output: str | Path) -> PartyRecord:
        """Read the record of a party's output folder (its ``party.json``)."""
        path = Path(output) / MARKER
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValidationError(f"{path} is not valid JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise ValidationError(f"{path} is not a party record")
        return cls.from_json(data)

    def __getitem__(self, key: str) -> Any:
        raise TypeError(f"run_configured returns a PartyRecord now: read .{key} "
                        f"(or .to_json()[{key!r}]) instead of [{key!r}]")


def _check_output(out: Path) -> None:
    """Refuse, before the run, an output folder that is not an earlier result of ours."""
    if out.exists() and not (out.is_dir() and (out / MARKER).is_file()):
        raise JobError(f"the output {out} exists and is not an islands party result; "
                       "choose another 'output' or move it away")
    out.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(out.parent, os.W_OK):
        raise JobError(f"cannot write the output into {out.parent}")


def _publish(tmp: Path, out: Path) -> None:
    """Move a finished result folder into place, replacing an earlier result of ours."""
    if out.exists():
        _check_output(out)
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old)
    else:
        os.replace(tmp, out)


@contextlib.contextmanager
def _threads(threads: int | None) -> Iterator[None]:
    """Limit BLAS (and torch, when loaded) to ``threads`` threads while the party runs."""
    if threads is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with contextlib.ExitStack() as stack:
        stack.enter_context(threadpool_limits(limits=threads))
        if "torch" in sys.modules:  # an hfl party: its learner loaded torch
            stack.enter_context(torch_threads(threads))
        yield


def run_configured(config: PartyConfig, *, resume: bool = False,
                   on_ready: Callable[[str], None] | None = None,
                   tell_peers: bool = False) -> PartyRecord:
    """Run the party a :class:`~islands.deploy.config.PartyConfig` describes.

    Parameters
    ----------
    config
        The party file, read.
    resume
        Horizontal FL: continue from the checkpoints.
    on_ready
        Called with the run ID once every peer is reachable.
    tell_peers
        When this party refuses its own input, settings or certificate, listen for at
        most :data:`REFUSAL_WINDOW` seconds to tell its peers (``islands party`` does);
        otherwise raise at once.

    Returns
    -------
    PartyRecord
        The record written to ``<output>/party.json``: party, protocol, run ID, times,
        bytes sent, and the protocol's own summary.
    """
    fed = config.federation
    out = config.output
    failed = out.with_name(out.name + ".failed.json")
    if config.tls is not None:
        try:
            check_tls(config.tls, config.name)
        except ValidationError as exc:
            if tell_peers:
                _tell_peers(config, exc, "certificate")
            raise
    try:
        prepared = prepare(config, resume=resume)
        _check_output(out)
    except (IslandsError, OSError) as exc:
        if tell_peers:
            _tell_peers(config, exc, "input or settings")
        raise
    t0 = time.monotonic()
    try:
        digest, fields = _with_derived(fed.digest, fed.fields, prepared.derived)
        with _threads(config.threads):
            run = run_party(config.name, prepared.role, fed.parties, tls=config.tls,
                            insecure=config.insecure, listen=config.listen,
                            digest=digest, fields=fields, timeout=fed.timeout,
                            connect_timeout=fed.connect_timeout, liveness=fed.liveness,
                            max_message=fed.max_message, tolerate=prepared.tolerate,
                            on_ready=on_ready)
    except Exception as exc:
        failed.write_text(json.dumps({
            "party": config.name, "protocol": fed.protocol, "federation": fed.name,
            "error": f"{type(exc).__name__}: {exc}",
            "step": getattr(exc, "step", None), "peer": getattr(exc, "peer", None),
        }, indent=2) + "\n", encoding="utf-8")
        raise
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    summary = prepared.write(run.result, tmp)
    sent = run.transcript.totals("receiver")
    record = PartyRecord(
        party=config.name, protocol=fed.protocol, federation=fed.name, run_id=run.run_id,
        description=prepared.description, connect_seconds=run.connect_time,
        role_seconds=run.wall_time, total_seconds=time.monotonic() - t0,
        bytes_sent={k: v.nbytes for k, v in sent.items()},
        messages_sent=len(run.transcript), result=summary)
    (tmp / MARKER).write_text(json.dumps(record.to_json(), indent=2, default=float) + "\n",
                              encoding="utf-8")
    _publish(tmp, out)
    if failed.exists():
        failed.unlink()
    return record


def _with_derived(digest: str, fields: Mapping[str, str], derived: Mapping[str, str]
                  ) -> tuple[str, dict[str, str]]:
    """Fold what a party derived from the federation file into the hello's digest and keys.

    Parties that built different things from the same file (another version of a model
    factory's package) then differ at the hello, naming the derived key.
    """
    if not derived:
        return digest, dict(fields)
    text = json.dumps(sorted(derived.items()))
    combined = hashlib.sha256(f"{digest}\n{text}".encode()).hexdigest()
    return combined, {**fields, **derived}


def _tell_peers(config: PartyConfig, exc: BaseException, what: str) -> None:
    """Tell the peers that this party refused its own ``what``, then give up quietly.

    They learn the kind of error only: its text may describe this party's data.
    """
    fed = config.federation
    within = min(fed.connect_timeout, REFUSAL_WINDOW)
    log.warning("party %r refused its own %s (%s); telling its peers, for %g s at most",
                config.name, what, type(exc).__name__, within)
    reason = f"it refused its own {what} ({type(exc).__name__})"
    try:
        refuse_start(config.name, fed.parties, reason, tls=config.tls,
                     insecure=config.insecure, listen=config.listen, digest=fed.digest,
                     fields=fed.fields, within=within,
                     certificate_refused=what == "certificate")
    except Exception as err:  # cannot listen, or cannot serve that certificate
        log.warning("party %r could not tell its peers: %s: %s", config.name,
                    type(err).__name__, err)


def run_party_file(path: str | Path, *, insecure: bool | None = None, resume: bool = False,
                   on_ready: Callable[[str], None] | None = None,
                   tell_peers: bool = False) -> PartyRecord:
    """Load a party file and run it (see :func:`run_configured`)."""
    return run_configured(load_party_config(path, insecure=insecure), resume=resume,
                          on_ready=on_ready, tell_peers=tell_peers)
