"""Atomic, pickle-free checkpoint files for the FL roles.

A checkpoint is a mapping of plain values and numpy arrays, encoded with the wire codec
(:mod:`islands.runtime.wire`: MessagePack plus raw array buffers, no code execution on
load), written to a temporary file in the same folder, flushed to disk and renamed over
the old one, so a run killed at any moment leaves either the previous checkpoint or the
new one, never half of one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from islands.errors import DataNotFoundError, ValidationError, WireError
from islands.runtime import wire

__all__ = ["load_checkpoint", "save_checkpoint"]

_MAGIC = b"ISLANDS-CKPT-1\n"


def save_checkpoint(path: str | os.PathLike[str], state: Mapping[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (temporary file, fsync, rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = wire.encode(dict(state))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # make the rename itself durable
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Raises
    ------
    DataNotFoundError
        If there is no file at ``path``.
    ValidationError
        If the file is not an islands checkpoint or is damaged.
    """
    source = Path(path)
    if not source.is_file():
        raise DataNotFoundError(f"no checkpoint at {source}")
    raw = source.read_bytes()
    if not raw.startswith(_MAGIC):
        raise ValidationError(f"{source} is not an islands checkpoint")
    try:
        state = wire.decode(raw[len(_MAGIC):])
    except WireError as exc:
        raise ValidationError(f"checkpoint {source} is damaged: {exc}") from exc
    if not isinstance(state, dict):
        raise ValidationError(f"checkpoint {source} does not hold a mapping")
    return state
