"""The protocol registry: every protocol islands can run, by name, in one table.

A protocol package declares its deployable form once, in its ``spec`` module, as a
:class:`ProtocolSpec`: its name, its settings (the federation file's section, read into
the protocol's :class:`~islands.config.ProtocolConfig`), which role each party plays, and
for each role how a party's own files become the role's inputs and how its result is
written. ``islands party``, the local launcher and the federation-file reader look
protocols up here and know nothing else about them; adding a protocol is its package
plus one line of :data:`REGISTRY` (see ``docs/architecture.md``).

:data:`REGISTRY` holds import strings, not modules, so that naming the protocols imports
none of them (``import islands`` stays light).
"""

from __future__ import annotations

import csv
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from islands.crypto.psi import Normalization, encode_ids
from islands.data.sources import open_source
from islands.errors import JobError, ValidationError
from islands.runtime import Role

__all__ = [
    "REGISTRY",
    "Deployment",
    "Prepared",
    "ProtocolSpec",
    "RoleSpec",
    "check_section",
    "load_array",
    "load_column",
    "load_table",
    "names",
    "party_ids",
    "party_key",
    "read_ids",
    "read_labels",
    "save_json",
    "spec",
]

REGISTRY: dict[str, str] = {
    "securesum": "islands.securesum.spec:SPEC",
    "cca": "islands.cca.spec:SPEC",
    "pca": "islands.pca.spec:SPEC",
    "hfl": "islands.hfl.spec:SPEC",
    "vfl": "islands.vfl.spec:SPEC",
    "psi": "islands.psi.spec:SPEC",
    "ftl": "islands.vfl.ftl.spec:SPEC",
    "secureboost": "islands.vfl.secureboost.spec:SPEC",
}
"""Protocol name → ``module:attribute`` of its :class:`ProtocolSpec`."""

Writer = Callable[[Any, Path], dict[str, Any]]


@dataclass(frozen=True)
class Deployment:
    """What one party brings to a deployed run.

    Its name, the federation's shared settings for the protocol, and its own files
    (paths already resolved).

    Attributes
    ----------
    party
        This party's name.
    parties
        Every party of the federation, in the federation file's order.
    options
        The protocol's section of the federation file, as written.
    where
        The file and section, for messages (``"federation file f.toml [vfl]"``).
    data, labels, ids, predict
        The party file's ``data`` (features), ``labels``, ``ids`` (one ID per row of
        ``data``) and ``predict`` (IDs to score after training) files, where given.
    output
        The party's output folder (a checkpoint folder goes next to it).
    resume
        ``islands party --resume``.
    source
        The party file, for messages.
    """

    party: str
    parties: tuple[str, ...]
    options: Mapping[str, Any]
    where: str
    output: Path
    data: Path | None = None
    labels: Path | None = None
    ids: Path | None = None
    predict: Path | None = None
    resume: bool = False
    source: str = "<party>"

    def need(self, key: str, protocol: str) -> Path:
        """Return the party file's ``key`` path, or a JobError saying it is needed."""
        path: Path | None = getattr(self, key)
        if path is None:
            raise JobError(f"party file {self.source}: party {self.party!r} needs its "
                           f"{key!r} file for protocol {protocol!r}")
        return path


@dataclass(frozen=True)
class Prepared:
    """One party's role, bound to its data, and how to write and summarise its result."""

    role: Role
    write: Writer
    description: str
    tolerate: tuple[str, ...] = ()
    """Peers whose failure leaves this party's result complete (a server's clients)."""
    derived: Mapping[str, str] = field(default_factory=dict)
    """Settings this party built on its own machine from the federation file, which every
    party must hold alike (an HFL factory model's initial state, as a digest): compared at
    the hello with the file's own keys, and named when they differ."""


@dataclass(frozen=True)
class RoleSpec:
    """One role of a protocol: how a party's files and the settings become that role.

    ``bind(deployment, settings)`` reads the party's own files, checks them against the
    settings (every error before any connection) and returns the bound role with its
    result writer.
    """

    name: str
    bind: Callable[[Deployment, Any], Prepared]
    doc: str = ""


@dataclass(frozen=True)
class ProtocolSpec:
    """A protocol as ``islands party`` runs it.

    Attributes
    ----------
    name
        The name files use (``protocol = "vfl"``) and the federation file's section.
    title
        One line for listings.
    settings
        ``settings(options, where, parties)``: the protocol's section read and checked
        (a :class:`~islands.config.ProtocolConfig`, or an object holding one together
        with the party-name keys such as ``server``).
    assign
        ``assign(settings, parties)``: party name → role name, for every party.
    roles
        Role name → :class:`RoleSpec`.
    """

    name: str
    title: str
    settings: Callable[[Mapping[str, Any], str, tuple[str, ...]], Any]
    assign: Callable[[Any, tuple[str, ...]], Mapping[str, str]]
    roles: Mapping[str, RoleSpec]

    def prepare(self, deployment: Deployment) -> Prepared:
        """Check the settings, find this party's role and bind it to the party's files."""
        settings = self.settings(deployment.options, deployment.where, deployment.parties)
        assigned = self.assign(settings, deployment.parties)
        return self.roles[assigned[deployment.party]].bind(deployment, settings)


def names() -> tuple[str, ...]:
    """Every registered protocol's name."""
    return tuple(REGISTRY)


def spec(name: str) -> ProtocolSpec:
    """Return the registered protocol ``name`` (importing its package)."""
    if name not in REGISTRY:
        raise JobError(f"unknown protocol {name!r}; islands runs {list(REGISTRY)}")
    module, _, attribute = REGISTRY[name].partition(":")
    found = getattr(importlib.import_module(module), attribute)
    if not isinstance(found, ProtocolSpec):
        raise TypeError(f"{REGISTRY[name]} is not a ProtocolSpec")
    return found


# ------------------------------------------------------------ helpers for role specs
def party_key(options: Mapping[str, Any], key: str, parties: Sequence[str], where: str) -> str:
    """Return the section's ``key``, which must name a party of the federation."""
    value = options.get(key)
    if not isinstance(value, str) or value not in parties:
        raise JobError(f"{where}: {key!r} must name a party of [parties]; got {value!r}")
    return value


def check_section(options: Mapping[str, Any], where: str, allowed: set[str], *,
                  renamed: Mapping[str, str] | None = None) -> None:
    """Refuse a ``timeout`` key (a federation-wide setting) and keys not in ``allowed``.

    A key of ``renamed`` (a key files used to accept) gets its message saying what changed.
    """
    for key, why in (renamed or {}).items():
        if key in options:
            raise JobError(f"{where}: {key!r} {why}")
    if "timeout" in options and "timeout" not in allowed:
        raise JobError(f"{where}: 'timeout' is the federation file's top-level setting "
                       "(seconds a party waits for one message); move it out of this section")
    extra = sorted(set(options) - allowed)
    if extra:
        raise JobError(f"{where}: unknown key(s) {extra}; allowed: {sorted(allowed)}")


def party_ids(dep: Deployment, protocol: str, *, rows: int | None = None,
              normalize: Normalization = "NFC") -> list[str]:
    """Read and check a party's ``ids`` file before anything is sent.

    Repeated IDs and two IDs that normalise alike are refused (as PSI refuses them), and
    with ``rows`` the file must hold one ID per row of the party's data.
    """
    path = dep.need("ids", protocol)
    ids = read_ids(path, what=f"the ids of party {dep.party!r}")
    try:
        encode_ids(ids, "ids", f"PSI party {dep.party!r}", normalize=normalize)
    except ValidationError as exc:
        raise JobError(f"party file {dep.source}: its 'ids' file {path}: {exc}") from None
    if rows is not None and rows != len(ids):
        raise JobError(f"party file {dep.source}: its 'data' file {dep.data} holds {rows} "
                       f"rows but its 'ids' file {path} holds {len(ids)} IDs; give one ID "
                       "per row, in the same order")
    return ids


def load_table(path: Path, *, what: str, block_size: int | None = None,
               missing: bool = False) -> np.ndarray:
    """Read a whole CSV, NPY or Parquet file of numbers as a float64 matrix.

    With ``missing``, an empty CSV cell (or ``nan``, ``NA``) reads as NaN, for protocols
    that learn from missing values (SecureBoost); otherwise it is an error naming it.
    """
    if missing and path.suffix.lower() in (".csv", ".txt"):
        return _load_with_missing(path, what)
    return _load(str(path), path, what, block_size)


_MISSING_CELLS = frozenset({"", "nan", "na", "n/a", "null"})


def _load_with_missing(path: Path, what: str) -> np.ndarray:
    """Read a CSV file of numbers and missing cells (a first non-numeric line: a header)."""
    rows: list[list[float]] = []
    width = None
    for number, line in enumerate(_read_text(path, what).splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        cells = next(csv.reader([text]))
        values: list[float] = []
        for column, cell in enumerate(cells, start=1):
            cell = cell.strip()
            if cell.lower() in _MISSING_CELLS:
                values.append(float("nan"))
                continue
            try:
                values.append(float(cell))
            except ValueError:
                if not rows and width is None:  # the header
                    values = []
                    break
                raise ValidationError(f"Line {number} of {str(path)!r} ({what}): cell {column} "
                                      f"is {cell!r}, which is neither a number nor empty "
                                      "(missing)") from None
        if not values:
            width = len(cells)
            continue
        if width is not None and len(values) != width:
            raise ValidationError(f"Line {number} of {str(path)!r} ({what}) has {len(values)} "
                                  f"values, but the file has {width} columns")
        width = len(values)
        rows.append(values)
    if not rows:
        raise ValidationError(f"{what} ({path}) holds no rows")
    return np.asarray(rows, dtype=np.float64)


def load_array(path: Path, *, what: str) -> np.ndarray:
    """Read a table as :func:`load_table` does, or a 1-D ``.npy`` array as a vector.

    A 1-D ``.npy`` file (what ``np.save(path, y)`` writes for a vector) is read as it is;
    it gets the checks a column of a table gets.
    """
    if path.suffix.lower() == ".npy" and path.is_file():
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise JobError(f"{what} ({path}) cannot be read as a numeric .npy file: "
                           f"{exc}") from None
        if array.ndim == 1:
            return _load(array.reshape(-1, 1), path, what, None)[:, 0]
    return load_table(path, what=what)


def load_column(path: Path, *, what: str) -> np.ndarray:
    """Read a file of one number per row (labels) as a float64 vector (:func:`load_array`).

    Raises
    ------
    JobError
        If the file holds more than one column, naming it.
    """
    values = load_array(path, what=what)
    if values.ndim == 2:
        if values.shape[1] != 1:
            raise JobError(f"{what} ({path}) must hold one column; it has {values.shape[1]}")
        values = values[:, 0]
    return values


def _load(rows: Any, path: Path, what: str, block_size: int | None) -> np.ndarray:
    source = open_source(rows, name=what, **({} if block_size is None
                                             else {"block_size": block_size}))
    blocks = [np.asarray(b, dtype=np.float64) for b in source.blocks()]
    if not blocks:
        raise ValidationError(f"{what} ({path}) holds no rows")
    return np.concatenate(blocks, axis=0)


_BOM = "\ufeff"


def _read_text(path: Path, what: str) -> str:
    """Read a UTF-8 text file; a byte-order mark at its start (Windows editors) is dropped."""
    try:
        # utf-8-sig: a BOM would otherwise stay part of the first line (its first ID)
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise JobError(f"{what} ({path}) cannot be read as UTF-8 text: {exc}") from None


def read_ids(path: Path, *, what: str) -> list[str]:
    """Read an ID file: one ID per line, UTF-8, each kept as text.

    IDs stay strings (``"007"`` and ``"7"`` differ), so that two parties reading their
    files by this rule always enter IDs of one kind into PSI. A byte-order mark at the
    start of the file is not part of the first ID; one at the start of another line
    (files joined together) is an error naming its line. Blank lines at the end are
    ignored; a blank line among the IDs is an error naming its line, as is a file with
    no ID.
    """
    text = _read_text(path, what)
    ids = [line.rstrip("\r") for line in text.rstrip("\r\n").splitlines()]
    if not ids or ids == [""]:
        raise JobError(f"{what} ({path}) holds no ID")
    for number, value in enumerate(ids, start=1):
        if not value.strip():
            raise JobError(f"{what} ({path}): line {number} is blank; every line must hold "
                           "one ID")
        if value.startswith(_BOM):
            raise JobError(f"{what} ({path}): line {number} starts with a byte-order mark "
                           "(U+FEFF), which would be part of its ID and never match; "
                           "remove it (were files joined together?)")
    return ids


def read_labels(path: Path, *, what: str) -> list[str | None]:
    """Read a text label file: one label per line, an empty line for a row with no label.

    Labels stay text (the caller decides whether they are numbers or classes); None marks
    a row whose outcome is unknown (a row to predict, not to train on).
    """
    text = _read_text(path, what)
    labels = [line.strip() or None for line in text.rstrip("\r\n").splitlines()]
    if not any(v is not None for v in labels):
        raise JobError(f"{what} ({path}) holds no label")
    return labels


def save_json(path: Path, obj: Mapping[str, Any]) -> None:
    """Write a result summary as indented JSON (numpy numbers as floats)."""
    path.write_text(json.dumps(obj, indent=2, default=float) + "\n", encoding="utf-8")
