"""Atomic, pickle-free checkpoint files for the FL roles, bound to the run's settings.

A checkpoint is a mapping of plain values and numpy arrays, encoded with the wire codec
(:mod:`islands.runtime.wire`: MessagePack plus raw array buffers, no code execution on
load) after a SHA-256 of the encoded bytes, written to a temporary file in the same
folder, flushed to disk and renamed over the old one, so a run killed at any moment
leaves either the previous checkpoint or the new one, never half of one, and a file
damaged afterwards (a bit flipped, a truncated copy) is refused on load.

Every checkpoint the roles write carries the settings that shape the model
(:func:`shaping_settings`) and their digest; a resume under other settings is refused
(:func:`check_settings`, :func:`check_resume`), naming every setting that differs, old
value and new. The rule for what shapes the model:

- **blocks a resume**: ``seed``, ``task``, ``eval_fraction``, the model (every field of
  its :class:`~islands.hfl.torch.models.ModelSpec`), a user's loss (by name), the
  strategy and each of its parameters, its server optimiser and each of its parameters,
  the aggregator with its protections and their settings, DP-SGD's settings,
  the clients' names, the data (the rows each client holds, by digest; a job's ``[data]``
  and ``[partition]`` by name, its ``protect`` and protection sections);
- **does not**: where and how the run goes — the output and checkpoint folders, the job's
  ``name``, ``baseline``, ``concurrency``, ``timeout``, ``backend``, ``ray_address``,
  ``threads``, ``tracking``, progress and callbacks, the extra metrics, a Fashion-MNIST
  ``path`` (the rows' digests still catch other files); ``contribution`` is checked by
  its own tracker;
- ``epochs`` is how far the run goes: a resume may keep or raise it (the run then ends
  with the model of an uninterrupted run of that many epochs) but not set it below the
  epochs the checkpoint has already trained.

Settings hold no secret: names, numbers and digests.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from islands.errors import DataNotFoundError, ValidationError, WireError
from islands.reporting import to_jsonable
from islands.runtime import wire

__all__ = ["SERVER_FILE", "check_epochs", "check_resume", "check_settings", "client_file",
           "load_checkpoint", "rows_digest", "save_checkpoint", "settings_differences",
           "settings_digest", "shaping_settings", "strategy_settings", "with_settings"]

_MAGIC_V1 = b"ISLANDS-CKPT-1\n"  # no checksum (read, never written)
_MAGIC = b"ISLANDS-CKPT-2\n"  # then the SHA-256 of the body, then the body
_DIGEST = 32

SERVER_FILE = "server.ckpt"
"""The server's checkpoint file in the checkpoint folder."""
SETTINGS = "settings"
"""The key of a checkpoint's settings (a flat mapping of plain values)."""
SETTINGS_DIGEST = "settings_digest"


def client_file(name: str) -> str:
    """Return the file name of client ``name``'s checkpoint."""
    return f"{name}.ckpt"


def save_checkpoint(path: str | os.PathLike[str], state: Mapping[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (temporary file, fsync, rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = wire.encode(dict(state))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC)
            fh.write(hashlib.sha256(data).digest())
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
        If the file is not an islands checkpoint or is damaged (its bytes do not match
        their SHA-256, or do not decode), naming the file.
    """
    source = Path(path)
    if not source.is_file():
        raise DataNotFoundError(f"no checkpoint at {source}")
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise ValidationError(f"checkpoint {source} cannot be read: {exc}") from exc
    if raw.startswith(_MAGIC):
        digest, body = raw[len(_MAGIC):len(_MAGIC) + _DIGEST], raw[len(_MAGIC) + _DIGEST:]
        if hashlib.sha256(body).digest() != digest:
            raise ValidationError(f"checkpoint {source} is damaged: its bytes do not match "
                                  "the digest written with them")
    elif raw.startswith(_MAGIC_V1):
        body = raw[len(_MAGIC_V1):]
    else:
        raise ValidationError(f"{source} is not an islands checkpoint")
    try:
        state = wire.decode(body)
    except WireError as exc:
        raise ValidationError(f"checkpoint {source} is damaged: {exc}") from exc
    if not isinstance(state, dict):
        raise ValidationError(f"checkpoint {source} does not hold a mapping")
    return state


# --------------------------------------------------------------------------- settings
def _plain(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``settings`` as JSON values (tuples as lists), keys sorted."""
    try:
        plain = to_jsonable(dict(settings))
    except TypeError as exc:
        raise ValidationError(f"a checkpoint's settings must be plain values: {exc}") from None
    return dict(sorted(plain.items()))


def settings_digest(settings: Mapping[str, Any]) -> str:
    """Return the SHA-256 (hex) of ``settings`` as canonical JSON."""
    text = json.dumps(_plain(settings), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def with_settings(state: Mapping[str, Any], settings: Mapping[str, Any] | None
                  ) -> dict[str, Any]:
    """Return ``state`` with ``settings`` and their digest (unchanged for None)."""
    if settings is None:
        return dict(state)
    plain = _plain(settings)
    return {**state, SETTINGS: plain, SETTINGS_DIGEST: settings_digest(plain)}


def rows_digest(X: Any, y: Any) -> str:
    """Return a short digest of one client's rows and targets (dtype, shape and bytes)."""
    h = hashlib.sha256()
    for arr in (np.asarray(X), np.asarray(y)):
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:16]


def shaping_settings(*, seed: int, task: str, eval_fraction: float, strategy: Any,
                     model: Any = None, sample_dp: Any = None, loss: str | None = None,
                     rows: Mapping[str, str] | None = None,
                     extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Return the settings that shape a run's model, by name, for its checkpoints.

    Parameters
    ----------
    seed, task, eval_fraction
        As :class:`~islands.hfl.FederatedModel` takes them.
    strategy
        The strategy: its class, every parameter (:func:`strategy_settings`), its server
        optimiser (``server_optimizer`` and ``server_optimizer.<name>``, when it has one)
        and its aggregator (:func:`aggregator_settings`).
    model
        The :class:`~islands.hfl.torch.models.ModelSpec` (each field as ``model.<name>``),
        or a user's :class:`~islands.hfl.torch.user.TorchModel` (its class, factory and
        arguments, shapes and the digest of its initial state); None leaves the model out
        (a check made before the data gives its shape).
    sample_dp
        DP-SGD's settings, or None.
    loss
        The name of a user's loss (:attr:`~islands.hfl.torch.loss.UserLoss.name`), as
        ``loss``; None (the task's loss) leaves the key out, so that checkpoints made
        before losses could be chosen stay resumable.
    rows
        Each client's :func:`rows_digest`, by name (as ``rows.<name>``).
    extra
        Further named settings from the caller (a job's ``[data]`` and ``[partition]``,
        its protections by section).

    Returns
    -------
    dict
        Flat names (``strategy.lr``, ``model.hidden``) to plain values.
    """
    out: dict[str, Any] = {"seed": int(seed), "task": str(task),
                           "eval_fraction": float(eval_fraction)}
    out.update(strategy_settings(strategy))
    optimizer = getattr(strategy, "server_optimizer", None)
    if optimizer is not None:  # absent without one: earlier checkpoints stay resumable
        out.update(_public(optimizer, "server_optimizer"))
    out.update(aggregator_settings(getattr(strategy, "aggregator", None)))
    out.update(_public(sample_dp, "dp-sgd") if sample_dp is not None else {"dp-sgd": None})
    if loss is not None:
        out["loss"] = str(loss)
    if model is not None:
        if callable(getattr(model, "shaping", None)):  # a user's module: its digest and all
            out.update(model.shaping())
        elif dataclasses.is_dataclass(model) and not isinstance(model, type):
            out.update({f"model.{f.name}": getattr(model, f.name)
                        for f in dataclasses.fields(model)})
        else:
            out["model"] = repr(model)
    if rows is not None:
        out["clients"] = list(rows)
        out.update({f"rows.{name}": digest for name, digest in rows.items()})
    out.update(extra or {})
    return _plain(out)


def strategy_settings(strategy: Any) -> dict[str, Any]:
    """Return a strategy's class and its parameters as ``strategy.<name>`` settings.

    The parameters are the strategy's public attributes that hold plain values (numbers,
    strings, bools, None, tuples of them), which for islands' strategies are their
    constructor's parameters, and the local optimiser it gives the clients
    (``local_config``, its fields as ``strategy.<name>`` where no attribute has the name:
    APFL keeps its ``lr`` there only);
    the mutable state a checkpoint restores (``get_state``) is left out.
    """
    state = set(getattr(strategy, "get_state", dict)() or {})
    out = _public(strategy, "strategy", skip=state | {"aggregator", "server_optimizer"})
    local = getattr(strategy, "local_config", None)
    if callable(local):  # the optimiser's settings not already among the attributes
        for name, value in _public(local(1), "strategy", named=False).items():
            out.setdefault(name, value)
    return out


def aggregator_settings(aggregator: Any) -> dict[str, Any]:
    """Return every layer of an aggregator stack and its parameters as settings.

    ``aggregator`` (the outermost layer), ``aggregator.inner`` and so on, each with its
    class and its public plain or dataclass-valued attributes: every protection and
    setting (a client-level DP's ``guaranteed`` and ``delta``, a CKKS context's
    parameters) shapes the model or the privacy its checkpoint stands for.
    """
    out: dict[str, Any] = {}
    prefix, layer = "aggregator", aggregator
    for _ in range(16):
        if layer is None:
            break
        out.update(_public(layer, prefix, skip={"inner"}))
        prefix, layer = f"{prefix}.inner", getattr(layer, "inner", None)
    return out or {"aggregator": None}


def _public(obj: Any, prefix: str, *, skip: set[str] | frozenset[str] = frozenset(),
            named: bool = True) -> dict[str, Any]:
    """``obj``'s class (as ``prefix``) and its public plain attributes (``prefix.<name>``).

    A dataclass attribute (a CKKS context's parameters, a packing) contributes its fields.
    """
    out: dict[str, Any] = {prefix: type(obj).__name__} if named else {}
    fields = (dataclasses.asdict(obj) if dataclasses.is_dataclass(obj)
              and not isinstance(obj, type) else getattr(obj, "__dict__", {}))
    for name, value in sorted(fields.items()):
        if name.startswith("_") or name in skip:
            continue
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = {k: v for k, v in sorted(dataclasses.asdict(value).items())
                     if _is_plain(v)}
            out.update({f"{prefix}.{name}.{k}": v for k, v in value.items()})
        elif _is_plain(value):
            out[f"{prefix}.{name}"] = value
    return out


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        return True
    return isinstance(value, (tuple, list)) and all(_is_plain(v) for v in value)


def _shown(value: Any) -> str:
    return "(none)" if value is _MISSING else json.dumps(value, ensure_ascii=False)


_MISSING = object()


def settings_differences(saved: Mapping[str, Any], current: Mapping[str, Any], *,
                         keys: Sequence[str] | None = None) -> list[str]:
    """Return ``"name: old → new"`` for every setting that differs (``keys``: only those).

    The clients whose rows differ are named together on one line.
    """
    names = sorted(set(saved) | set(current)) if keys is None else sorted(keys)
    lines, rows = [], []
    for name in names:
        old, new = saved.get(name, _MISSING), current.get(name, _MISSING)
        if old == new:
            continue
        if name.startswith("rows."):
            rows.append(name.removeprefix("rows."))
        else:
            lines.append(f"{name}: {_shown(old)} → {_shown(new)}")
    if rows:
        lines.append(f"the rows of client(s) {', '.join(repr(r) for r in rows)} (their "
                     "data differs)")
    return lines


def check_settings(saved: Mapping[str, Any], settings: Mapping[str, Any], path: Path, *,
                   partial: bool = False) -> None:
    """Refuse to resume the checkpoint ``saved`` (read from ``path``) under other settings.

    Parameters
    ----------
    saved
        The checkpoint's state.
    settings
        This run's settings (:func:`shaping_settings`).
    path
        The checkpoint's file, for the message.
    partial
        Compare only the settings given (a check made before every setting is known).

    Raises
    ------
    ValidationError
        If the checkpoint holds no settings (written by an islands before checkpoints
        had them), or any setting differs: each named, the checkpoint's value → this
        run's.
    """
    current = _plain(settings)
    stored = saved.get(SETTINGS)
    if not isinstance(stored, Mapping):
        raise ValidationError(
            f"cannot resume from {path}: it does not record the settings it was made under "
            "(written by an earlier islands), so a resume could mix two runs; start the "
            "run afresh")
    if not partial and saved.get(SETTINGS_DIGEST) == settings_digest(current):
        return
    differ = settings_differences(stored, current, keys=list(current) if partial else None)
    if differ:
        raise ValidationError(
            f"cannot resume from {path}: it was made under other settings ("
            + "; ".join(differ) + "); resume with the settings it was made under, or start "
            "the run afresh")


def check_resume(folder: str | os.PathLike[str], settings: Mapping[str, Any], *, epochs: int,
                 partial: bool = False) -> dict[str, Any] | None:
    """Check, before a resume starts, every checkpoint in ``folder`` against this run.

    The server's checkpoint must be readable, made under ``settings`` and not past
    ``epochs``; each of its clients' checkpoints that exists must be readable and made
    under the same settings (a client without one is refused by the roles, which say so).

    Returns
    -------
    dict or None
        The server's checkpoint, or None when the folder holds none (nothing to resume).

    Raises
    ------
    ValidationError
        Naming the file (and the client) that is damaged or made under other settings,
        or the epochs already trained.
    """
    root = Path(folder)
    server_path = root / SERVER_FILE
    if not server_path.is_file():
        return None
    try:
        saved = load_checkpoint(server_path)
    except ValidationError as exc:
        raise ValidationError(f"cannot resume: the server's {exc}; start the run "
                              "afresh") from None
    check_settings(saved, settings, server_path, partial=partial)
    check_epochs(saved, epochs, server_path)
    for name in saved.get("clients", []):
        path = root / client_file(str(name))
        if not path.is_file():
            continue
        try:
            stored = load_checkpoint(path)
        except ValidationError as exc:
            raise ValidationError(
                f"cannot resume: client {name!r}'s {exc}; restore that file, or start the "
                "run afresh") from None
        try:
            check_settings(stored, settings, path, partial=partial)
        except ValidationError as exc:
            raise ValidationError(f"client {name!r}: {exc}") from None
    return saved


def check_epochs(saved: Mapping[str, Any], epochs: int, path: Path) -> None:
    """Refuse ``epochs`` below the epochs the checkpoint has already trained."""
    done = int(saved.get("epoch", 0))
    if done > epochs:
        raise ValidationError(
            f"cannot resume from {path} with epochs = {epochs}: it has already trained "
            f"{done} epochs; resume with epochs >= {done}, or start the run afresh")
