"""The islands wire format: a versioned, language-neutral, pickle-free message codec.

Every message that crosses between parties, in one process or over the network, is
encoded to bytes here and decoded on receipt. Decoding only ever builds values from an
allow-list of types; it never imports or calls code named by the bytes (no pickle).

Layout of one message (all integers little-endian)::

    offset  size  field
    0       4     magic b"ISLW"
    4       1     version (1)
    5       1     flags (0; reserved)
    6       2     reserved (0)
    8       4     H = length of the header in bytes
    12      H     header: one MessagePack object (the payload tree)
    12+H    0-7   zero padding, so that the data section starts at a multiple of 8
    D       ...   data section: out-of-band buffers in order of appearance, each starting
                  at a multiple of 8 from the start of the message, zero padding between
                  them; the message ends exactly after the last buffer

The header is plain MessagePack (nil, bool, int, float64, str, bin, array, map with str
keys) plus these extension types:

====  =============  ==================================================================
code  name           ext payload (itself MessagePack)
====  =============  ==================================================================
1     ndarray        [index, dtype, shape, nbytes]: buffer number ``index`` (0, 1, ...
                     in order of appearance), dtype string from the allow-list below,
                     shape as a list of non-negative ints, nbytes = prod(shape)*itemsize
2     bigint         raw bytes, not MessagePack: sign byte (0 or 1) then the magnitude,
                     little-endian; used for ints outside [-2**63, 2**64)
3     scalar         [dtype, raw little-endian bytes of one element]: a numpy scalar
4     message        [name, map]: a frozen dataclass registered with :func:`register`
5     tuple          array: a Python tuple (decoded as a tuple, not a list)
6     blob           [index, nbytes]: a ``bytes`` value carried out of band (large ones)
====  =============  ==================================================================

A message is canonical: padding bytes are zero and nothing follows the last buffer.

A registered message is checked on decode, before its class is constructed: every field's
value must fit the field's type annotation (resolved with :func:`typing.get_type_hints`):
``int`` (a Python int, not a bool or a numpy scalar), ``float`` (ints and numpy float
scalars pass), ``bool`` (not ``numpy.bool_``), ``str``, ``bytes``, ``None``, ``Any`` (anything),
``Literal[...]``, unions and ``Optional``, ``list[X]``, ``tuple[X, ...]``, ``tuple[X, Y]``,
``dict[str, X]``, ``numpy.ndarray`` and ``NDArray[dtype]`` (an abstract dtype such as
``np.floating`` admits its subtypes), and registered message classes (checked themselves
when decoded). A field declares simple constraints in its metadata, checked after its type
(``None`` passes them)::

    n_train: int = field(metadata={"ge": 1})          # ge, gt, le, lt: bounds (NaN fails)
    phase: str = field(metadata={"max_len": 64})      # max_len: str, bytes, list, dict
    params: NDArray[np.float32] = field(metadata={"ndim": 1})   # ndim: arrays

A mismatch raises :class:`~islands.errors.WireError` naming the message, the field (and the
item within it), what was expected and what was got. The checks are compiled once, in
:func:`register`, which refuses an annotation or constraint it cannot check.

Allowed dtypes (little-endian, C order): ``|b1 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 <f2 <f4
<f8 <c8 <c16``. Arrays of other dtypes (object, strings, structured, datetimes) are
rejected at the sender.

Malformed, truncated or lying input raises :class:`~islands.errors.WireError` and no
other exception: a wrong magic or version, an unknown extension, a dtype outside the
allow-list, a shape whose size disagrees with nbytes, buffers that do not fit or leave
trailing bytes, non-str or duplicate map keys, MessagePack's own timestamp extension,
nesting deeper than :data:`MAX_DEPTH`, a header over :data:`MAX_HEADER` bytes.

Copies: :func:`encode` and :func:`encode_buffer` copy each array once into the message;
:func:`decode` copies each array once out of it (the input is left untouched), while
:func:`decode_buffer` takes ownership of a ``bytearray`` message and returns large arrays
as writable views into it, so a message costs one copy end to end.

Why hand-written: MessagePack (through ``msgpack``) does the encoding of the structure;
what no library provides is the combination islands needs — an allow-list of numpy
dtypes carried out of band with one copy each way, arbitrary-precision ints (4096-bit
Paillier ciphertexts) and registered message dataclasses, with strict validation of
bytes that arrive from another organisation. The field checks are compiled here too:
pydantic's strict dataclass validation knows no numpy dtypes or dimensions (arrays would be
``arbitrary_types_allowed`` instance checks) and would rebuild each value, where these
checks only look at the values msgpack already decoded.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from typing import Any, Final, TypeVar

import msgpack
import numpy as np

from islands.errors import WireError

__all__ = [
    "ALLOWED_DTYPES",
    "MAGIC",
    "MAX_DEPTH",
    "MAX_HEADER",
    "VERSION",
    "ZERO_COPY_MIN",
    "decode",
    "decode_buffer",
    "encode",
    "encode_buffer",
    "register",
    "registered_messages",
    "summarize",
]

MAGIC: Final = b"ISLW"
VERSION: Final = 1
MAX_DEPTH: Final = 64
MAX_NDIM: Final = 32
ALIGN: Final = 8
BLOB_INLINE_MAX: Final = 4096
MAX_HEADER: Final = 256 * 2**20
"""Largest header accepted (bytes). Arrays and large bytes travel outside the header."""
ZERO_COPY_MIN: Final = 65536
"""Arrays at least this large are views into the message in :func:`decode_buffer`;
smaller ones are copied, so that keeping a small array does not keep a large message."""
_PREFIX = struct.Struct("<4sBBHI")

_EXT_NDARRAY: Final = 1
_EXT_BIGINT: Final = 2
_EXT_SCALAR: Final = 3
_EXT_MESSAGE: Final = 4
_EXT_TUPLE: Final = 5
_EXT_BLOB: Final = 6

ALLOWED_DTYPES: Final[frozenset[str]] = frozenset(
    {"|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8",
     "<f2", "<f4", "<f8", "<c8", "<c16"}
)
_INT63: Final = 2**63
_INT64_MIN: Final = -(2**63)
_UINT64_END: Final = 2**64

_registry: dict[str, type[Any]] = {}
_names: dict[type[Any], str] = {}
_checks: dict[str, tuple[tuple[str, Callable[[Any], None]], ...] | None] = {}

T = TypeVar("T")


def register(cls: type[T] | None = None, *, name: str | None = None) -> Any:
    """Allow a frozen dataclass to cross the wire as a typed message.

    Use as ``@register`` or ``@register(name="scca.R2")``. Only registered classes are
    ever constructed by :func:`decode`; the name on the wire selects the class from this
    registry and the fields are passed to its constructor by keyword, after each has been
    checked against its annotation and constraints (see the module docstring), with checks
    compiled here.

    Raises
    ------
    TypeError
        If ``cls`` is not a frozen dataclass, or a field's annotation or constraint is one
        the codec cannot check.

    Parameters
    ----------
    cls
        A frozen dataclass whose fields hold wire-encodable values.
    name
        Stable wire name; defaults to ``module.QualName``.
    """

    def wrap(klass: type[T]) -> type[T]:
        if not (dataclasses.is_dataclass(klass) and isinstance(klass, type)):
            raise TypeError(f"register() needs a dataclass, got {klass!r}")
        params = getattr(klass, "__dataclass_params__", None)
        if params is None or not params.frozen:
            raise TypeError(f"register() needs a frozen dataclass; {klass.__qualname__} is not")
        wire_name = name or f"{klass.__module__}.{klass.__qualname__}"
        existing = _registry.get(wire_name)
        same_origin = existing is not None and (existing.__module__, existing.__qualname__) == (
            klass.__module__, klass.__qualname__)  # a module reloaded: replace the entry
        if existing is not None and existing is not klass and not same_origin:
            raise ValueError(f"wire name {wire_name!r} is already registered")
        try:
            checks = _field_checks(klass, wire_name)
        except NameError:
            checks = None  # an annotation names a class defined later: compile on first use
        _registry[wire_name] = klass
        _names[klass] = wire_name
        _checks[wire_name] = checks
        return klass

    if cls is None:
        return wrap
    return wrap(cls)


def registered_messages() -> dict[str, type[Any]]:
    """Return a copy of the registry of message classes, by wire name."""
    return dict(_registry)


# --------------------------------------------------------------------------- encoding


class _Encoder:
    """One encoding pass: turns a payload into a MessagePack tree plus raw buffers."""

    def __init__(self) -> None:
        self.buffers: list[memoryview] = []

    def _add_buffer(self, view: memoryview) -> int:
        self.buffers.append(view)
        return len(self.buffers) - 1

    def prepare(self, obj: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise WireError(f"payload nests deeper than {MAX_DEPTH} levels")
        t = type(obj)
        if obj is None or t is bool or t is float or t is str:
            return obj
        if t is int:
            if _INT64_MIN <= obj < _UINT64_END:
                return obj
            return msgpack.ExtType(_EXT_BIGINT, _bigint_bytes(obj))
        if t is bytes:
            if len(obj) <= BLOB_INLINE_MAX:
                return obj
            index = self._add_buffer(memoryview(obj))
            return msgpack.ExtType(_EXT_BLOB, _packb([index, len(obj)]))
        if t is list:
            return [self.prepare(v, depth + 1) for v in obj]
        if t is tuple:
            items = [self.prepare(v, depth + 1) for v in obj]
            return msgpack.ExtType(_EXT_TUPLE, _packb(items))
        if t is dict:
            out: dict[str, Any] = {}
            for k, v in obj.items():
                if type(k) is not str:
                    raise WireError(f"dict keys must be str, got key {k!r} ({type(k).__name__})")
                out[k] = self.prepare(v, depth + 1)
            return out
        if t is np.ndarray:
            return self._array(obj)
        if isinstance(obj, np.generic):
            dtype = _wire_dtype(obj.dtype)
            raw = np.asarray(obj, dtype=dtype).tobytes()
            return msgpack.ExtType(_EXT_SCALAR, _packb([dtype.str, raw]))
        wire_name = _names.get(t)
        if wire_name is not None:
            fields = {name: self.prepare(getattr(obj, name), depth + 1)
                      for name in _field_names(t, init=True)}
            return msgpack.ExtType(_EXT_MESSAGE, _packb([wire_name, fields]))
        raise WireError(_unsupported(obj))

    def _array(self, arr: np.ndarray[Any, Any]) -> msgpack.ExtType:
        dtype = _wire_dtype(arr.dtype)
        if arr.ndim > MAX_NDIM:
            raise WireError(f"arrays may have at most {MAX_NDIM} dimensions, got {arr.ndim}")
        arr = np.asarray(arr, dtype=dtype, order="C")
        view = memoryview(arr.reshape(-1).data).cast("B") if arr.nbytes else memoryview(b"")
        index = self._add_buffer(view)
        return msgpack.ExtType(
            _EXT_NDARRAY, _packb([index, dtype.str, list(arr.shape), arr.nbytes])
        )


def _align(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _packb(obj: Any) -> bytes:
    try:
        out: bytes = msgpack.packb(obj, use_bin_type=True, strict_types=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"cannot encode payload: {exc}") from exc
    return out


def _bigint_bytes(value: int) -> bytes:
    magnitude = abs(value)
    return bytes([1 if value < 0 else 0]) + magnitude.to_bytes(
        max(1, (magnitude.bit_length() + 7) // 8), "little"
    )


def _wire_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        raise WireError(
            f"arrays of dtype {dtype} cannot be sent; allowed: bool, int8-64, uint8-64, "
            "float16/32/64, complex64/128"
        )
    wire: np.dtype[Any] = dtype.newbyteorder("<")
    if wire.str not in ALLOWED_DTYPES:
        raise WireError(
            f"arrays of dtype {dtype} cannot be sent; allowed: {sorted(ALLOWED_DTYPES)}"
        )
    return wire


def _unsupported(obj: Any) -> str:
    t = type(obj)
    hint = ""
    if dataclasses.is_dataclass(obj):
        hint = " (register the dataclass with islands.runtime.wire.register)"
    elif t in (bytearray, memoryview):
        hint = " (convert it to bytes)"
    elif isinstance(obj, (set, frozenset)):
        hint = " (send a sorted list)"
    elif isinstance(obj, (int, float, str, list, dict, tuple, bytes)):
        hint = f" (a subclass of {t.__mro__[1].__name__}; convert it to the base type)"
    return f"values of type {t.__module__}.{t.__qualname__} cannot be sent{hint}"


def _parts(payload: Any) -> list[bytes | memoryview]:
    enc = _Encoder()
    header = _packb(enc.prepare(payload))
    parts: list[bytes | memoryview] = [
        _PREFIX.pack(MAGIC, VERSION, 0, 0, len(header)), header
    ]
    pos = _PREFIX.size + len(header)
    for view in enc.buffers:
        pad = _align(pos) - pos
        if pad:
            parts.append(bytes(pad))
        parts.append(view)
        pos += pad + view.nbytes
    return parts


def encode(payload: Any) -> bytes:
    """Encode a payload to (immutable) wire bytes.

    Raises
    ------
    WireError
        If the payload holds a type, dtype or dict key the format does not allow.
    """
    return b"".join(_parts(payload))


def encode_buffer(payload: Any) -> bytearray:
    """Encode a payload into a new ``bytearray`` for a receiver to own (bytes as :func:`encode`).

    Raises
    ------
    WireError
        If the payload holds a type, dtype or dict key the format does not allow.
    """
    return bytearray().join(_parts(payload))


# --------------------------------------------------------------------------- field checks


class _Mismatch(Exception):
    """A decoded value that does not fit its field's annotation (turned into WireError)."""

    def __init__(self, expected: str, got: str, where: str = "") -> None:
        super().__init__(expected)
        self.expected, self.got, self.where = expected, got, where


_Check = Callable[[Any], None]
_CONSTRAINTS: Final = frozenset({"ge", "gt", "le", "lt", "max_len", "ndim"})


def _kind(value: Any) -> str:
    """Name a value's type for an error message, never its content."""
    t = type(value)
    if t is np.ndarray:
        return f"ndarray of {value.dtype.name} with shape {value.shape}"
    if isinstance(value, np.generic):
        return f"numpy {value.dtype.name} scalar"
    name = _names.get(t)
    return f"message {name}" if name is not None else t.__name__


def _exact(kind: type[Any], label: str) -> _Check:
    def check(value: Any) -> None:
        if type(value) is not kind:
            raise _Mismatch(label, _kind(value))
    return check


def _check_int(value: Any) -> None:
    if type(value) is not int:
        raise _Mismatch("int", _kind(value))


def _check_float(value: Any) -> None:
    t = type(value)
    if t is not float and t is not int and not isinstance(value, np.floating):
        raise _Mismatch("float", _kind(value))


def _array_check(hint: Any) -> _Check:
    want: Any = None
    args = typing.get_args(hint)
    if len(args) == 2:
        dargs = typing.get_args(args[1])
        if dargs and isinstance(dargs[0], type) and issubclass(dargs[0], np.generic):
            want = dargs[0]
    if want is None or want is np.generic:
        label = "ndarray"

        def any_array(value: Any) -> None:
            if type(value) is not np.ndarray:
                raise _Mismatch(label, _kind(value))
        return any_array
    label = f"ndarray of {want.__name__}"

    def typed_array(value: Any) -> None:
        if type(value) is not np.ndarray or not np.issubdtype(value.dtype, want):
            raise _Mismatch(label, _kind(value))
    return typed_array


def _check_item(check: _Check, value: Any, where: str) -> None:
    """Check one item of a container, prefixing its position to any mismatch."""
    try:
        check(value)
    except _Mismatch as exc:
        raise _Mismatch(exc.expected, exc.got, f"{where}{exc.where}") from None


def _checker(hint: Any, owner: str) -> _Check | None:
    """Compile a check of one annotation; None when anything goes (``Any``)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any or hint is object:
        return None
    if hint is None or hint is type(None):
        return _exact(type(None), "None")
    if hint is bool:
        return _exact(bool, "bool")
    if hint is int:
        return _check_int
    if hint is float:
        return _check_float
    if hint in (str, bytes):
        return _exact(hint, hint.__name__)
    if hint is np.ndarray or origin is np.ndarray:
        return _array_check(hint)
    if origin is typing.Annotated:
        return _checker(args[0], owner)
    if origin is typing.Literal:
        allowed = tuple((type(a), a) for a in args)
        label = " or ".join(repr(a) for a in args)

        def check_literal(value: Any) -> None:
            if (type(value), value) not in allowed:
                raise _Mismatch(label, _short(value) if type(value) in (str, int, bool)
                                else _kind(value))
        return check_literal
    if origin is typing.Union or origin is types.UnionType:
        options = [_checker(a, owner) for a in args]
        if any(c is None for c in options):
            return None
        label = " or ".join(_label(a) for a in args)

        def check_union(value: Any) -> None:
            for c in options:
                try:
                    c(value)  # type: ignore[misc]
                except _Mismatch:
                    continue
                return
            raise _Mismatch(label, _kind(value))
        return check_union
    if origin in (list, tuple) and (origin is list or (len(args) == 2 and args[1] is ...)):
        item = _checker(args[0], owner) if args else None
        label = _label(hint)
        container = origin

        def check_sequence(value: Any) -> None:
            if type(value) is not container:
                raise _Mismatch(label, _kind(value))
            if item is not None:
                for i, v in enumerate(value):
                    _check_item(item, v, f"[{i}]")
        return check_sequence
    if origin is tuple:
        items = [_checker(a, owner) for a in args]
        label = _label(hint)

        def check_tuple(value: Any) -> None:
            if type(value) is not tuple or len(value) != len(items):
                raise _Mismatch(label, _kind(value) if type(value) is not tuple
                                else f"tuple of {len(value)} items")
            for i, (c, v) in enumerate(zip(items, value, strict=True)):
                if c is not None:
                    _check_item(c, v, f"[{i}]")
        return check_tuple
    if origin is dict:
        if not args or args[0] is not str:
            raise TypeError(f"{owner}: wire messages carry dicts with str keys only; "
                            f"got {hint!r}")
        value_check = _checker(args[1], owner)
        label = _label(hint)

        def check_dict(value: Any) -> None:
            if type(value) is not dict:
                raise _Mismatch(label, _kind(value))
            if value_check is not None:
                for k, v in value.items():
                    _check_item(value_check, v, f"[{_short(k)}]")
        return check_dict
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        # a nested message is checked when it is decoded; here only its class
        return _exact(hint, f"message {_names.get(hint, hint.__qualname__)}")
    raise TypeError(f"{owner}: the wire codec cannot check the annotation {hint!r}; "
                    "use int, float, str, bool, bytes, None, Any, Literal, unions, "
                    "list/tuple/dict[str, ...], numpy arrays or registered messages")


def _label(hint: Any) -> str:
    if hint is type(None) or hint is None:
        return "None"
    if isinstance(hint, type):
        name = _names.get(hint)
        return hint.__name__ if name is None else f"message {name}"
    return str(hint).replace("typing.", "").replace("numpy.", "np.")


def _leaves(hint: Any) -> set[Any]:
    """Return the non-None types a hint admits, by origin (``list[int]`` gives ``list``)."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _leaves(typing.get_args(hint)[0])
    if origin is typing.Union or origin is types.UnionType:
        return set().union(*(_leaves(a) for a in typing.get_args(hint)))
    if hint is None or hint is type(None):
        return set()
    return {origin or hint}


_APPLIES: Final[dict[str, frozenset[Any]]] = {
    "max_len": frozenset({str, bytes, list, tuple, dict}),
    "ndim": frozenset({np.ndarray}),
    **{k: frozenset({int, float}) for k in ("ge", "gt", "le", "lt")},
}


def _constraint(key: str, limit: Any, hint: Any, owner: str) -> _Check:
    leaves = _leaves(hint)
    if not leaves or not leaves <= _APPLIES[key]:
        raise TypeError(f"{owner}: the constraint {key!r} does not apply to {_label(hint)}")
    numeric = key not in ("max_len", "ndim")
    if (type(limit) not in ((int, float) if numeric else (int,))) or limit != limit:
        raise TypeError(f"{owner}: the constraint {key!r} needs a number; got {limit!r}")
    if key == "max_len":
        def check_len(value: Any) -> None:
            if value is not None and len(value) > limit:
                raise _Mismatch(f"at most {limit} items", f"{len(value)}")
        return check_len
    if key == "ndim":
        def check_ndim(value: Any) -> None:
            if value is not None and value.ndim != limit:
                raise _Mismatch(f"an array of {limit} dimensions", f"{value.ndim}")
        return check_ndim
    ops: dict[str, Callable[[Any, Any], bool]] = {
        "ge": lambda v, b: v >= b, "gt": lambda v, b: v > b,
        "le": lambda v, b: v <= b, "lt": lambda v, b: v < b}
    op = ops[key]
    symbol = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}[key]

    def check_bound(value: Any) -> None:
        # NaN fails every bound
        if value is not None and not op(value, limit):
            raise _Mismatch(f"a value {symbol} {limit}", _short(value) if type(value)
                            in (int, float) else str(value))
    return check_bound


_names_cache: dict[tuple[type[Any], bool], tuple[str, ...]] = {}


def _field_names(klass: type[Any], *, init: bool) -> tuple[str, ...]:
    """Return the names of a message class's fields (only those ``__init__`` takes when ``init``).

    Cached per class: ``dataclasses.fields`` builds its tuple anew at every call, and
    every message is encoded, summarised and decoded through this.
    """
    names = _names_cache.get((klass, init))
    if names is None:
        names = _names_cache[klass, init] = tuple(
            f.name for f in dataclasses.fields(klass) if f.init or not init)
    return names


def _field_checks(klass: type[Any], wire_name: str) -> tuple[tuple[str, _Check], ...]:
    """Compile the checks of every init field of a message class (see the module doc)."""
    hints = typing.get_type_hints(klass, include_extras=True)
    checks: list[tuple[str, _Check]] = []
    for f in dataclasses.fields(klass):
        if not f.init:
            continue
        owner = f"message {wire_name} field {f.name!r}"
        check = _checker(hints[f.name], owner)
        if check is not None:
            checks.append((f.name, check))
        unknown = set(f.metadata) - _CONSTRAINTS
        if unknown:
            raise TypeError(f"{owner}: unknown constraint(s) {sorted(unknown)}; "
                            f"allowed: {sorted(_CONSTRAINTS)}")
        for key in sorted(f.metadata):
            checks.append((f.name, _constraint(key, f.metadata[key], hints[f.name], owner)))
    return tuple(checks)


# --------------------------------------------------------------------------- decoding


class _Decoder:
    """One decoding pass; ``owned`` lets large arrays be views into ``data``."""

    def __init__(self, data: memoryview, header: memoryview, *, owned: bool) -> None:
        self.data = data
        self.header = header
        self.owned = owned
        self.pos = _PREFIX.size + len(header)  # end of what has been consumed
        self.next_index = 0
        self.depth = 0

    def run(self) -> Any:
        value = self._unpack(self.header)
        if self.pos != len(self.data):
            raise WireError(
                f"message has {len(self.data) - self.pos} trailing bytes after the declared "
                "buffers"
            )
        return value

    def _unpack(self, raw: bytes | memoryview) -> Any:
        # the header and an array/scalar/blob descriptor each count as a level here, so
        # allow two more than the encoder, which counts containers only
        self.depth += 1
        if self.depth > MAX_DEPTH + 2:
            raise WireError(f"message nests deeper than {MAX_DEPTH} levels")
        try:
            value = msgpack.unpackb(
                raw, raw=False, use_list=True, strict_map_key=False,
                ext_hook=self._ext, object_pairs_hook=_str_keyed_dict, list_hook=_check_items,
            )
        finally:
            self.depth -= 1
        if type(value) is msgpack.Timestamp:
            raise WireError("timestamp values are not part of the islands wire format")
        return value

    def _take(self, index: Any, nbytes: Any) -> memoryview:
        if not _small_int(index) or index != self.next_index:
            raise WireError(f"buffer index {_short(index)} out of order (expected "
                            f"{self.next_index})")
        if not _small_int(nbytes):
            raise WireError(f"invalid buffer length {_short(nbytes)}")
        start = _align(self.pos)
        if start + nbytes > len(self.data):
            raise WireError(
                f"buffer {index} needs {nbytes} bytes but the message is truncated "
                f"({max(0, len(self.data) - start)} left)"
            )
        if any(self.data[self.pos:start]):
            raise WireError(f"non-zero padding before buffer {index}")
        self.next_index += 1
        self.pos = start + nbytes
        return self.data[start:start + nbytes]

    def _ext(self, code: int, payload: bytes) -> Any:
        if code == _EXT_NDARRAY:
            return self._ndarray(self._unpack(payload))
        if code == _EXT_BIGINT:
            if len(payload) < 2 or payload[0] not in (0, 1):
                raise WireError("malformed bigint")
            value = int.from_bytes(payload[1:], "little")
            return -value if payload[0] else value
        if code == _EXT_SCALAR:
            desc = self._unpack(payload)
            if not (isinstance(desc, list) and len(desc) == 2 and type(desc[1]) is bytes):
                raise WireError("malformed scalar descriptor")
            dtype = _parse_dtype(desc[0])
            if len(desc[1]) != dtype.itemsize:
                raise WireError(f"scalar of dtype {dtype.str} needs {dtype.itemsize} bytes")
            return np.frombuffer(desc[1], dtype=dtype)[0].astype(dtype.newbyteorder("="))
        if code == _EXT_MESSAGE:
            return self._message(self._unpack(payload))
        if code == _EXT_TUPLE:
            items = self._unpack(payload)
            if type(items) is not list:
                raise WireError("malformed tuple")
            return tuple(items)
        if code == _EXT_BLOB:
            desc = self._unpack(payload)
            if not (isinstance(desc, list) and len(desc) == 2):
                raise WireError("malformed blob descriptor")
            return bytes(self._take(desc[0], desc[1]))
        raise WireError(f"unknown extension type {code}")

    def _ndarray(self, desc: Any) -> np.ndarray[Any, Any]:
        if not (isinstance(desc, list) and len(desc) == 4):
            raise WireError("malformed array descriptor")
        index, dtype_str, shape, nbytes = desc
        dtype = _parse_dtype(dtype_str)
        if not (isinstance(shape, list) and len(shape) <= MAX_NDIM
                and all(_small_int(s) for s in shape)):
            raise WireError(f"invalid array shape {_short(shape)}")
        # never multiply unbounded numbers: stop as soon as the size exceeds the message
        expected = dtype.itemsize if 0 not in shape else 0
        for s in shape:
            expected *= s
            if expected > len(self.data):
                raise WireError(
                    f"array shape {_short(shape)} of {dtype.str} needs more bytes than the "
                    f"whole message ({len(self.data)})"
                )
        if expected != nbytes:
            raise WireError(
                f"array shape {tuple(shape)} of {dtype.str} needs {expected} bytes, "
                f"the message declares {_short(nbytes)}"
            )
        view = self._take(index, nbytes)
        flat = np.frombuffer(view, dtype=dtype, count=expected // dtype.itemsize)
        if dtype.kind == "b":
            # foreign bytes may hold values other than 0/1; normalise, never trust
            mask: np.ndarray[Any, Any] = flat.view(np.uint8) != 0
            return mask.reshape(tuple(shape))
        if self.owned and nbytes >= ZERO_COPY_MIN and dtype.isnative:
            return flat.reshape(tuple(shape))  # a writable view into the owned buffer
        out: np.ndarray[Any, Any] = flat.astype(dtype.newbyteorder("="), copy=True)
        return out.reshape(tuple(shape))

    def _message(self, desc: Any) -> Any:
        if not (isinstance(desc, list) and len(desc) == 2 and type(desc[0]) is str
                and type(desc[1]) is dict):
            raise WireError("malformed message descriptor")
        name, fields = desc
        cls = _registry.get(name)
        if cls is None:
            raise WireError(f"unknown message type {_short(name)}")
        expected = _field_names(cls, init=True)
        if fields.keys() != set(expected):
            raise WireError(
                f"message {_short(name)} has fields {_short(sorted(fields))}, expected "
                f"{sorted(expected)}"
            )
        checks = _checks.get(name)
        if checks is None:
            try:
                checks = _checks[name] = _field_checks(cls, name)
            except (NameError, TypeError) as exc:
                raise WireError(f"message {name} cannot be checked: {exc}") from None
        for field_name, check in checks:
            try:
                check(fields[field_name])
            except _Mismatch as exc:
                raise WireError(f"message {name} field {field_name!r}{exc.where}: expected "
                                f"{exc.expected}, got {exc.got}") from None
        try:
            return cls(**fields)
        except Exception as exc:
            raise WireError(f"message {_short(name)} rejected its fields: {exc}") from exc


def _small_int(value: Any) -> bool:
    return type(value) is int and 0 <= value < _INT63


def _short(value: Any) -> str:
    """Describe an untrusted value for an error message in bounded time and length."""
    if type(value) is int and value.bit_length() > 64:
        return f"<{value.bit_length()}-bit int>"
    if type(value) in (list, tuple):
        inner = ", ".join(_short(v) for v in value[:4])
        return f"[{inner}{', ...' if len(value) > 4 else ''}]"
    if type(value) in (int, float, bool) or value is None:
        return repr(value)
    if type(value) in (str, bytes):
        text = repr(value[:40])
        return text + ("..." if len(value) > 40 else "")
    return f"<{type(value).__name__}>"


def _check_items(items: list[Any]) -> list[Any]:
    # msgpack decodes its own extension -1 (Timestamp) before ext_hook sees it: refuse it
    for v in items:
        if type(v) is msgpack.Timestamp:
            raise WireError("timestamp values are not part of the islands wire format")
    return items


def _str_keyed_dict(pairs: list[tuple[Any, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if type(k) is not str:
            raise WireError(f"map keys must be str, got {type(k).__name__}")
        if type(v) is msgpack.Timestamp:
            raise WireError("timestamp values are not part of the islands wire format")
        if k in out:
            raise WireError(f"duplicate map key {_short(k)}")
        out[k] = v
    return out


def _parse_dtype(value: Any) -> np.dtype[Any]:
    if type(value) is not str or value not in ALLOWED_DTYPES:
        raise WireError(f"dtype {_short(value)} is not allowed on the wire")
    return np.dtype(value)


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Decode wire bytes to a payload; never executes code named by the bytes.

    Arrays are copied out of ``data``, which is left untouched and may be reused.

    Raises
    ------
    WireError
        For malformed, truncated, lying or unsupported input, and nothing else.
    """
    try:
        view = memoryview(data).cast("B")
    except (TypeError, ValueError) as exc:
        raise WireError(f"decode() needs bytes, got {type(data).__name__}") from exc
    return _decode(view, owned=False)


def decode_buffer(buffer: bytearray) -> Any:
    """Decode a message the caller hands over, without copying large arrays.

    Arrays of at least :data:`ZERO_COPY_MIN` bytes are returned as writable views into
    ``buffer``, which the caller must not use afterwards. Validation is the same as
    :func:`decode`.

    Raises
    ------
    WireError
        For malformed, truncated, lying or unsupported input, and nothing else.
    """
    if type(buffer) is not bytearray:
        raise WireError(f"decode_buffer() needs a bytearray, got {type(buffer).__name__}")
    return _decode(memoryview(buffer), owned=True)


def _decode(view: memoryview, *, owned: bool) -> Any:
    if len(view) < _PREFIX.size:
        raise WireError(f"message too short: {len(view)} bytes")
    magic, version, flags, reserved, hlen = _PREFIX.unpack_from(view, 0)
    if magic != MAGIC:
        raise WireError(f"not an islands message (magic {bytes(magic)!r})")
    if version != VERSION:
        raise WireError(f"unsupported wire version {version} (this build reads {VERSION})")
    if flags or reserved:
        raise WireError("reserved header bits are set")
    if hlen > MAX_HEADER:
        raise WireError(f"header of {hlen} bytes exceeds the limit of {MAX_HEADER}")
    if _PREFIX.size + hlen > len(view):
        raise WireError(f"header length {hlen} exceeds the message ({len(view)} bytes)")
    header = view[_PREFIX.size:_PREFIX.size + hlen]
    decoder = _Decoder(view, header, owned=owned)
    try:
        return decoder.run()
    except WireError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, MemoryError,
            RecursionError, UnicodeDecodeError, msgpack.UnpackException) as exc:
        raise WireError(f"malformed message: {type(exc).__name__}: {exc}") from exc


# --------------------------------------------------------------------------- summaries


def summarize(payload: Any, *, limit: int = 200) -> str:
    """Describe a payload by structure, shapes and dtypes, never by its values.

    Summaries go into transcripts and logs, so they must not reveal data: arrays show
    dtype and shape, scalars only their type, bytes and strings only their length.

    Examples
    --------
    >>> summarize({"delta": np.zeros(3), "k": 2})
    '{delta: float64[3], k: int}'
    """
    text: str = _summary(payload, 0)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _summary(obj: Any, depth: int) -> str:
    if depth > 4:
        return "..."
    t = type(obj)
    if isinstance(obj, np.ndarray):
        return f"{obj.dtype.name}[{','.join(map(str, obj.shape))}]"
    if isinstance(obj, np.generic):
        return str(obj.dtype.name)
    if obj is None:
        return "None"
    if t is int:
        return "int" if _INT64_MIN <= obj < _UINT64_END else f"int{obj.bit_length()}b"
    if t in (bool, float):
        return t.__name__
    if t in (str, bytes):
        return f"{t.__name__}({len(obj)})"
    if t in (list, tuple):
        open_, close = ("[", "]") if t is list else ("(", ")")
        if len(obj) > 4:
            kinds = sorted({_summary(v, depth + 1) for v in obj[:64]})
            inner = kinds[0] if len(kinds) == 1 else "mixed"
            return f"{open_}{len(obj)} x {inner}{close}"
        return open_ + ", ".join(_summary(v, depth + 1) for v in obj) + close
    if t is dict:
        return "{" + ", ".join(f"{k}: {_summary(v, depth + 1)}" for k, v in obj.items()) + "}"
    name = _names.get(t)
    if name is not None:
        fields = ", ".join(
            f"{n}={_summary(getattr(obj, n), depth + 1)}" for n in _field_names(t, init=False)
        )
        return f"{t.__name__}({fields})"
    return t.__name__

