"""Deployment descriptions: the federation every party shares, and each party's own file.

The **federation file** is the same at every organisation; parties compare a digest of
it when they connect and refuse to run with a peer whose copy differs::

    name = "cca-demo"
    protocol = "cca"          # securesum | cca | pca | hfl | vfl | psi | ftl
    timeout = 120             # seconds a party waits for one message
    connect_timeout = 60      # seconds to wait for every peer at start-up
    liveness = 15             # seconds a peer may answer no ping, waited for or sent to

    [parties]                 # name = "host:port" where the others reach it
    hospital = "10.0.0.1:50051"
    bank = "10.0.0.2:50051"

    [cca]                     # the protocol's options (see its package's spec module)
    n_components = 5

The **party file** is one organisation's own: who it is, where its data and its
certificates are, where to write its result. Relative paths are relative to the file::

    name = "hospital"
    federation = "federation.toml"
    data = "hospital.csv"           # CSV, NPY or Parquet, one row per sample
    ids = "hospital-ids.txt"        # optional: one ID per row of data (PSI, vfl, ftl)
    predict = "new-ids.txt"         # optional: IDs to score after training (vfl, ftl)
    output = "out/hospital"
    listen = "0.0.0.0:50051"        # optional; default: its address in [parties]
    threads = 2                     # optional: torch/BLAS threads of this party

    [tls]
    ca = "certs/ca.pem"
    cert = "certs/hospital.pem"
    key = "certs/hospital.key"

Every key is checked; an unknown key or a value of the wrong kind is an error naming the
file, section and key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from islands.deploy.certs import TlsFiles
from islands.errors import JobError, ValidationError
from islands.protocols import names
from islands.runtime.grpc_transport import check_address
from islands.runtime.party import check_party_names
from islands.validation import read_toml

__all__ = ["PROTOCOLS", "Federation", "PartyConfig", "load_federation", "load_party_config",
           "parse_federation", "parse_party_config"]

PROTOCOLS = names()
_FED_KEYS = {"name", "protocol", "timeout", "connect_timeout", "liveness", "max_message_mb",
             "parties", *PROTOCOLS}
_PARTY_KEYS = {"name", "federation", "data", "labels", "ids", "predict", "output", "listen",
               "tls", "insecure", "threads"}
_TLS_KEYS = {"ca", "cert", "key"}


@dataclass(frozen=True)
class Federation:
    """A parsed federation file.

    Attributes
    ----------
    name, protocol
        The federation's name and the protocol its parties run.
    parties
        Party name → ``host:port``, in file order.
    options
        The protocol's section, as given.
    timeout, connect_timeout, liveness
        Seconds (see the module docstring).
    max_message
        Largest message a party accepts, in bytes (``max_message_mb``, default 4096).
    digest
        SHA-256 of the canonical form; parties compare it at start-up.
    fields
        A short digest of every key (``section.key`` inside tables), so that parties whose
        digests differ can name the keys that differ without sending the file.
    source
        The file it came from.
    """

    name: str
    protocol: str
    parties: dict[str, str]
    options: dict[str, Any]
    timeout: float
    connect_timeout: float
    liveness: float
    digest: str
    source: str = ""
    max_message: int = 4 << 30
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartyConfig:
    """A parsed party file (paths resolved against the file's folder)."""

    name: str
    federation: Federation
    data: Path | None
    output: Path
    labels: Path | None = None
    ids: Path | None = None
    predict: Path | None = None
    listen: str | None = None
    tls: TlsFiles | None = None
    insecure: bool = False
    source: str = ""
    threads: int | None = None


def _number(raw: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = raw.get(key, default)
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not 0 < value <= 1e6):
        raise JobError(f"{where}: {key!r} must be a number of seconds in (0, 1e6]; "
                       f"got {value!r}")
    return float(value)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _field_digests(raw: Mapping[str, Any]) -> dict[str, str]:
    """Return a 16-hex-digit digest of every key, one level into tables (``parties.bank``)."""
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, Mapping):
            flat[key] = {}  # an empty table still differs from a missing one
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return {k: hashlib.sha256(_canonical(v).encode()).hexdigest()[:16]
            for k, v in flat.items()}


def parse_federation(raw: Mapping[str, Any], *, source: str = "<federation>") -> Federation:
    """Check a federation description given as a mapping (parsed TOML)."""
    where = f"federation file {source}"
    unknown = sorted(set(raw) - _FED_KEYS)
    if unknown:
        raise JobError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(_FED_KEYS)}")
    protocol = raw.get("protocol")
    if protocol not in PROTOCOLS:
        raise JobError(f"{where}: 'protocol' must be one of {list(PROTOCOLS)}; got {protocol!r}")
    others = sorted(p for p in PROTOCOLS if p in raw and p != protocol)
    if others:
        raise JobError(f"{where}: section(s) {others} do not apply to protocol {protocol!r}")
    parties = raw.get("parties")
    if not isinstance(parties, Mapping) or len(parties) < 2:
        raise JobError(f"{where}: [parties] must name at least two parties as "
                       "name = \"host:port\"")
    try:
        check_party_names(parties)
        for name, address in parties.items():
            check_address(address, f"{where} [parties] {name}")
    except ValidationError as exc:
        raise JobError(f"{where} [parties]: {exc}") from None
    options = raw.get(protocol, {})
    if not isinstance(options, Mapping):
        raise JobError(f"{where}: [{protocol}] must be a table")
    name = raw.get("name", Path(source).stem)
    if not isinstance(name, str):
        raise JobError(f"{where}: 'name' must be a str; got {name!r}")
    mb = raw.get("max_message_mb", 4096)
    if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1:
        raise JobError(f"{where}: 'max_message_mb' must be an int >= 1; got {mb!r}")
    canonical = _canonical(dict(raw))
    return Federation(
        name=name, protocol=protocol, parties=dict(parties), options=dict(options),
        timeout=_number(raw, "timeout", 120.0, where),
        connect_timeout=_number(raw, "connect_timeout", 60.0, where),
        liveness=_number(raw, "liveness", 15.0, where),
        digest=hashlib.sha256(canonical.encode()).hexdigest(), source=source,
        max_message=mb << 20, fields=_field_digests(raw))


def load_federation(path: str | Path) -> Federation:
    """Read and check a federation file."""
    return parse_federation(read_toml(path, what="federation file"), source=str(path))


def _path(raw: Mapping[str, Any], key: str, base: Path, where: str,
          required: bool = False) -> Path | None:
    value = raw.get(key)
    if value is None:
        if required:
            raise JobError(f"{where}: missing key {key!r}")
        return None
    if not isinstance(value, str) or not value:
        raise JobError(f"{where}: {key!r} must be a path (str); got {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def parse_party_config(raw: Mapping[str, Any], *, source: str = "<party>",
                       base: Path | None = None, insecure: bool | None = None) -> PartyConfig:
    """Check a party file given as a mapping; ``insecure`` overrides the file's setting."""
    where = f"party file {source}"
    base = Path(source).parent if base is None else base
    unknown = sorted(set(raw) - _PARTY_KEYS)
    if unknown:
        raise JobError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(_PARTY_KEYS)}")
    fed_path = _path(raw, "federation", base, where, required=True)
    assert fed_path is not None
    federation = load_federation(fed_path)
    name = raw.get("name")
    if not isinstance(name, str) or name not in federation.parties:
        raise JobError(f"{where}: 'name' = {name!r} is not a party of {fed_path} "
                       f"(parties: {list(federation.parties)})")
    listen = raw.get("listen")
    if listen is not None:
        try:
            check_address(listen, f"{where}: 'listen'")
        except ValidationError as exc:
            raise JobError(str(exc)) from None
    in_file = raw.get("insecure", False)
    if not isinstance(in_file, bool):
        raise JobError(f"{where}: 'insecure' must be true or false; got {in_file!r}")
    no_tls = in_file if insecure is None else insecure
    tls = None
    if not no_tls:
        section = raw.get("tls")
        if not isinstance(section, Mapping):
            raise JobError(f"{where}: a [tls] section with ca, cert and key is required "
                           "(make them with `islands certs`); --insecure is for loopback "
                           "tests only")
        extra = sorted(set(section) - _TLS_KEYS)
        if extra:
            raise JobError(f"{where} [tls]: unknown key(s) {extra}; allowed: {sorted(_TLS_KEYS)}")
        files = {k: _path(section, k, base, f"{where} [tls]", required=True)
                 for k in ("ca", "cert", "key")}
        for key, path in files.items():
            assert path is not None
            if not path.is_file():
                raise JobError(f"{where} [tls]: the {key} file {path} does not exist")
        tls = TlsFiles(ca=files["ca"], cert=files["cert"], key=files["key"])  # type: ignore[arg-type]
    output = _path(raw, "output", base, where) or base / f"out-{name}"
    data = _path(raw, "data", base, where)
    if data is not None and not data.is_file():
        raise JobError(f"{where}: the data file {data} does not exist")
    own: dict[str, Path | None] = {}
    for key in ("labels", "ids", "predict"):
        path = own[key] = _path(raw, key, base, where)
        if path is not None and not path.is_file():
            raise JobError(f"{where}: the {key} file {path} does not exist")
    threads = raw.get("threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise JobError(f"{where}: 'threads' must be an int >= 1; got {threads!r}")
    return PartyConfig(name=name, federation=federation, data=data, output=output,
                       labels=own["labels"], ids=own["ids"], predict=own["predict"],
                       listen=listen, tls=tls, insecure=no_tls, source=source,
                       threads=threads)


def load_party_config(path: str | Path, *, insecure: bool | None = None) -> PartyConfig:
    """Read and check a party file (and the federation file it names)."""
    source = Path(path)
    return parse_party_config(read_toml(source, what="party file"), source=str(source),
                              base=source.parent, insecure=insecure)
