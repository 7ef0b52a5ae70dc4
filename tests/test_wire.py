"""The wire codec: exact round trips, and only WireError on bad bytes."""

from __future__ import annotations

import contextlib
import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from islands.errors import WireError
from islands.runtime import wire


@wire.register(name="tests.Point")
@dataclass(frozen=True)
class Point:
    coords: np.ndarray
    label: str
    weight: int


@dataclass(frozen=True)
class Unregistered:
    x: int


def same(a: Any, b: Any) -> bool:
    """Deep equality that also demands identical types, dtypes and shapes (NaN == NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and (a == b or (a != a and b != b))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, Point):
        return same(a.coords, b.coords) and a.label == b.label and a.weight == b.weight
    return bool(a == b)


DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]

arrays = st.sampled_from(DTYPES).flatmap(
    lambda dt: hnp.arrays(np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                          max_side=5))
)
scalars = st.sampled_from(DTYPES).flatmap(
    lambda dt: hnp.from_dtype(np.dtype(dt)).map(lambda v: np.dtype(dt).type(v))
)
leaves = (
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**5000),
                                                             max_value=2**5000)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
    | st.binary(max_size=40) | st.binary(min_size=wire.BLOB_INLINE_MAX + 1,
                                          max_size=wire.BLOB_INLINE_MAX + 50)
    | arrays | scalars
)
payloads = st.recursive(
    leaves,
    lambda children: st.lists(children, max_size=4)
    | st.lists(children, max_size=4).map(tuple)
    | st.dictionaries(st.text(max_size=8), children, max_size=4)
    | st.builds(Point, coords=arrays, label=st.text(max_size=5), weight=st.integers()),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads)
def test_round_trip_is_exact(payload: Any) -> None:
    data = wire.encode(payload)
    assert same(wire.decode(data), payload)
    buf = wire.encode_buffer(payload)
    assert buf == data
    assert same(wire.decode_buffer(buf), payload)


def test_owned_decoding_views_large_arrays_and_copies_small_ones() -> None:
    big = np.arange(wire.ZERO_COPY_MIN // 8, dtype=np.float64)
    small = np.arange(10, dtype=np.int32)
    buf = wire.encode_buffer({"big": big, "small": small})
    out = wire.decode_buffer(buf)
    assert out["big"].flags.writeable and out["big"].flags.aligned
    assert np.shares_memory(out["big"], np.frombuffer(buf, dtype=np.uint8))
    assert not np.shares_memory(out["small"], np.frombuffer(buf, dtype=np.uint8))
    np.testing.assert_array_equal(out["big"], big)
    with pytest.raises(WireError, match="needs a bytearray"):
        wire.decode_buffer(bytes(buf))  # type: ignore[arg-type]


def test_non_zero_padding_is_refused() -> None:
    data = bytearray(wire.encode([np.int8(1), np.zeros(1, dtype=np.int8), np.ones(3)]))
    header_end = 12 + int.from_bytes(data[8:12], "little")
    pads = [i for i in range(header_end, len(data) - 24) if data[i] == 0]
    assert pads, "the sample must contain padding"
    data[pads[-1]] = 1
    with pytest.raises(WireError):
        wire.decode(bytes(data))


@settings(max_examples=100, deadline=None)
@given(arrays)
def test_decoded_arrays_are_writable_native_copies(arr: np.ndarray) -> None:
    data = wire.encode(arr)
    out = wire.decode(data)
    assert out.flags.writeable and out.flags.c_contiguous and out.dtype.isnative
    if out.size:
        out.reshape(-1)[0] = out.reshape(-1)[-1]  # must not touch the message
        assert wire.decode(data).tobytes() == arr.tobytes()


def test_layouts_are_normalised() -> None:
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    for arr in (base.T, base[:, ::2], np.asfortranarray(base), base.astype(">f8"),
                base.astype(">i4")):
        out = wire.decode(wire.encode(arr))
        np.testing.assert_array_equal(out, arr)
        assert out.dtype.isnative


def test_4096_bit_integers_round_trip() -> None:
    # Paillier ciphertexts under a 2048-bit key live modulo n^2: 4096 bits
    values = [2**4095 + 12345, -(2**4096 - 1), 2**64, -(2**63) - 1, 2**64 - 1, -(2**63)]
    assert wire.decode(wire.encode(values)) == values


def test_tuple_and_list_stay_distinct() -> None:
    out = wire.decode(wire.encode({"t": (1, 2), "l": [1, 2]}))
    assert type(out["t"]) is tuple and type(out["l"]) is list


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({1: "a"}, "dict keys must be str"),
        (np.array(["a", "b"]), "dtype <U1"),
        (np.array([object()], dtype=object), "dtype object"),
        (np.zeros(2, dtype=[("a", "f8")]), "cannot be sent"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "cannot be sent"),
        ({"x": {1, 2}}, "send a sorted list"),
        (bytearray(b"x"), "convert it to bytes"),
        (Unregistered(1), "register the dataclass"),
        (object(), "cannot be sent"),
        (np.zeros((1,) * 33), "at most 32 dimensions"),
    ],
)
def test_unsupported_payloads_are_refused(payload: Any, needle: str) -> None:
    with pytest.raises(WireError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        wire.encode(payload)


def test_deep_nesting_is_refused_both_ways() -> None:
    deep: Any = 1
    for _ in range(wire.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(WireError, match="deeper"):
        wire.encode(deep)


def test_summary_shows_structure_not_values() -> None:
    summary = wire.summarize({"secret": np.full((3, 4), 7.0), "n": 123456789, "s": "hunter2"})
    assert summary == "{secret: float64[3,4], n: int, s: str(7)}"
    assert "123456789" not in summary and "hunter2" not in summary


# ----------------------------------------------------------------- malformed input


def message(header_obj: Any, data: bytes = b"", *, version: int = 1) -> bytes:
    import msgpack

    header = msgpack.packb(header_obj, use_bin_type=True)
    return struct.pack("<4sBBHI", b"ISLW", version, 0, 0, len(header)) + header + data


def ext(code: int, obj: Any) -> Any:
    import msgpack

    return msgpack.ExtType(code, msgpack.packb(obj, use_bin_type=True))


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "too short"),
        (b"NOPE" + bytes(8), "not an islands message"),
        (message(1, version=2), "unsupported wire version 2"),
        (message(1) + b"\x00", "trailing bytes"),
        (message(ext(1, [0, "<f8", [2, 2], 32]), bytes(31)), "truncated"),
        (message(ext(1, [0, "<f8", [2, 2], 16]), bytes(16)), "needs 32 bytes"),
        (message(ext(1, [0, "<f8", [2**40, 2**40], 8]), bytes(8)), "needs"),
        (message(ext(1, [0, "<f8", [-1], 8]), bytes(8)), "invalid array shape"),
        (message(ext(1, [0, "|O", [1], 8]), bytes(8)), "not allowed"),
        (message(ext(1, [0, ">f8", [1], 8]), bytes(8)), "not allowed"),
        (message(ext(1, [3, "<f8", [1], 8]), bytes(8)), "out of order"),
        (message(ext(1, [0, "<f8"]), bytes(8)), "malformed array"),
        (message(ext(99, 0)), "unknown extension"),
        (message(ext(4, ["os.system", {"command": "true"}])), "unknown message type"),
        (message(ext(4, ["tests.Point", {"label": "a"}])), "has fields"),
        (message(ext(3, ["<f8", b"\x00"])), "needs 8 bytes"),
        (message({1: 2}), "map keys must be str"),
        (message(ext(6, [0, 10]), bytes(3)), "truncated"),
    ],
)
def test_bad_input_raises_wire_error_with_reason(data: bytes, needle: str) -> None:
    with pytest.raises(WireError, match=needle):
        wire.decode(data)


def test_nested_extensions_past_the_depth_limit_are_refused() -> None:
    obj: Any = 1
    for _ in range(wire.MAX_DEPTH + 5):
        obj = ext(5, [obj])
    with pytest.raises(WireError):
        wire.decode(message(obj))


def test_decode_rejects_non_bytes() -> None:
    with pytest.raises(WireError):
        wire.decode("not bytes")  # type: ignore[arg-type]


SAMPLE = wire.encode({
    "a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": [1, 2**300, (None, True)],
    "c": b"z" * 5000, "d": Point(np.ones(2), "p", 3), "e": np.int16(-4), "f": "text",
})


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_raise_only_wire_error(data: bytes) -> None:
    for candidate in (data, b"ISLW\x01\x00\x00\x00" + data, SAMPLE[:12] + data):
        with contextlib.suppress(WireError):
            wire.decode(candidate)
        with contextlib.suppress(WireError):
            wire.decode_buffer(bytearray(candidate))


@settings(max_examples=1500, deadline=None)
@given(st.data())
def test_fuzz_mutated_messages_raise_only_wire_error(data: st.DataObject) -> None:
    buf = bytearray(SAMPLE)
    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "header"]))
        if op == "flip" and buf:
            i = data.draw(st.integers(0, len(buf) - 1))
            buf[i] = data.draw(st.integers(0, 255))
        elif op == "cut" and buf:
            i = data.draw(st.integers(0, len(buf)))
            buf = buf[:i] + buf[i + data.draw(st.integers(0, 64)):]
        elif op == "insert":
            i = data.draw(st.integers(0, len(buf)))
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=16))
        elif op == "header" and len(buf) > 40:
            # hit the header hard: that is where lengths and shapes live
            i = data.draw(st.integers(12, 40))
            buf[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(WireError):
        wire.decode(bytes(buf))
    with contextlib.suppress(WireError):
        wire.decode_buffer(buf)


# ----------------------------------------------------------------- review regressions


def test_huge_shape_entries_fail_fast() -> None:
    import time

    import msgpack

    big = msgpack.ExtType(2, b"\x00" + b"\xff" * 64000)  # a 512 000-bit shape entry
    data = message(ext(1, [0, "<i8", [big] * 32, 0]))
    t0 = time.perf_counter()
    with pytest.raises(WireError, match="invalid array shape"):
        wire.decode(data)
    assert time.perf_counter() - t0 < 1.0
    with pytest.raises(WireError, match="more bytes than the whole message"):
        wire.decode(message(ext(1, [0, "<f8", [2**40] * 8, 8]), bytes(8)))


def test_msgpack_timestamps_are_refused() -> None:
    raw = b"\xd7\xff" + bytes(8)  # MessagePack's built-in extension -1
    header = struct.pack("<4sBBHI", b"ISLW", 1, 0, 0, len(raw)) + raw
    with pytest.raises(WireError, match="timestamp"):
        wire.decode(header)
    for wrapped in (b"\x91" + raw, b"\x81\xa1a" + raw):  # inside a list, inside a map
        with pytest.raises(WireError, match="timestamp"):
            wire.decode(struct.pack("<4sBBHI", b"ISLW", 1, 0, 0, len(wrapped)) + wrapped)


def test_duplicate_map_keys_are_refused() -> None:
    wrapped = b"\x82\xa1a\x01\xa1a\x02"
    with pytest.raises(WireError, match="duplicate map key"):
        wire.decode(struct.pack("<4sBBHI", b"ISLW", 1, 0, 0, len(wrapped)) + wrapped)


@pytest.mark.parametrize("leaf", [1, np.zeros(2), Point(np.ones(1), "p", 1)])
def test_nesting_at_the_limit_round_trips(leaf: Any) -> None:
    obj: Any = leaf
    for _ in range(wire.MAX_DEPTH - 1):
        obj = (obj,)
    assert same(wire.decode(wire.encode(obj)), obj)
