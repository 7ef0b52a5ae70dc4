"""The wire codec: exact round trips, and only WireError on bad bytes."""

from __future__ import annotations

import contextlib
import math
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

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


# --------------------------------------------------------------------------- field checks
@wire.register(name="tests.Checked")
@dataclass(frozen=True)
class Checked:
    count: int = field(metadata={"ge": 0})
    rate: float = field(metadata={"gt": 0, "le": 1})
    name: str = field(metadata={"max_len": 8})
    flag: bool
    blob: bytes | None
    mode: Literal["a", "b"]
    sizes: tuple[int, ...]
    pair: tuple[str, float]
    table: dict[str, list[int]]
    vec: NDArray[np.float32] = field(metadata={"ndim": 1})
    anyarr: np.ndarray
    inner: Point | None
    free: Any = None


def _checked(**changes: Any) -> Checked:
    good: dict[str, Any] = dict(
        count=3, rate=0.5, name="x", flag=True, blob=None, mode="a", sizes=(1, 2),
        pair=("p", 1.5), table={"k": [1]}, vec=np.zeros(2, np.float32),
        anyarr=np.zeros((2, 2), np.int8), inner=Point(np.zeros(1), "l", 1), free=None)
    return Checked(**{**good, **changes})


def test_checked_message_round_trips() -> None:
    msg = _checked(count=0, rate=1, blob=b"z", inner=None, free={"anything": [1, "x"]})
    back = wire.decode(wire.encode(msg))
    assert type(back) is Checked and back.count == 0 and back.rate == 1 and back.blob == b"z"
    assert back.inner is None


@pytest.mark.parametrize(("changes", "needle"), [
    ({"count": -5}, "field 'count': expected a value >= 0, got -5"),
    ({"count": "5"}, "field 'count': expected int, got str"),
    ({"count": True}, "field 'count': expected int, got bool"),
    ({"count": 2.0}, "field 'count': expected int, got float"),
    ({"count": np.int64(2)}, "field 'count': expected int, got numpy int64 scalar"),
    ({"rate": 0.0}, "field 'rate': expected a value > 0, got 0.0"),
    ({"rate": float("nan")}, "field 'rate': expected a value > 0, got nan"),
    ({"rate": "0.5"}, "field 'rate': expected float, got str"),
    ({"name": "x" * 9}, "field 'name': expected at most 8 items, got 9"),
    ({"name": b"x"}, "field 'name': expected str, got bytes"),
    ({"flag": 1}, "field 'flag': expected bool, got int"),
    ({"flag": np.bool_(True)}, "field 'flag': expected bool, got numpy bool scalar"),
    ({"blob": "z"}, "field 'blob': expected bytes or None, got str"),
    ({"mode": "c"}, "field 'mode': expected 'a' or 'b', got 'c'"),
    ({"sizes": [1, 2]}, "field 'sizes': expected tuple[int, ...], got list"),
    ({"sizes": (1, "2")}, "field 'sizes'[1]: expected int, got str"),
    ({"pair": ("p",)}, "field 'pair': expected tuple[str, float], got tuple of 1 items"),
    ({"pair": ("p", "q")}, "field 'pair'[1]: expected float, got str"),
    ({"table": {"k": [1, None]}}, "field 'table'['k'][1]: expected int, got NoneType"),
    ({"table": [1]}, "field 'table': expected dict[str, list[int]], got list"),
    ({"vec": np.zeros(2)}, "field 'vec': expected ndarray of float32, got ndarray of float64"),
    ({"vec": np.zeros((1, 2), np.float32)}, "field 'vec': expected an array of 1 dimensions"),
    ({"vec": [0.0, 1.0]}, "field 'vec': expected ndarray of float32, got list"),
    ({"anyarr": 3}, "field 'anyarr': expected ndarray, got int"),
    ({"inner": Point(np.zeros(1), "l", "heavy")},
     "message tests.Point field 'weight': expected int, got str"),
    ({"inner": {"coords": 1}}, "field 'inner': expected message tests.Point or None, got dict"),
])
def test_decoded_fields_are_checked_against_annotations(changes: dict[str, Any],
                                                        needle: str) -> None:
    data = wire.encode(_checked(**changes))  # encoding does not check; decoding must
    with pytest.raises(WireError, match=re.escape(needle)):
        wire.decode(data)
    with pytest.raises(WireError, match=r"tests\.Checked|tests\.Point"):
        wire.decode_buffer(bytearray(data))


def test_registered_protocol_messages_are_checked() -> None:
    from islands.hfl.protocol import Join, Start, Task

    with pytest.raises(WireError, match=re.escape(
            "message hfl.Join field 'n_train': expected a value >= 1, got -5")):
        wire.decode(wire.encode(Join(n_train=-5, n_eval=0)))
    task = Task(round="1", params=None, epoch="0", step="0", steps="1",  # type: ignore[arg-type]
                batch_size="8", lr="0.1", momentum="0", weight_decay="0",  # type: ignore[arg-type]
                prox_mu="0", evaluate="no")  # type: ignore[arg-type]
    with pytest.raises(WireError, match=re.escape(
            "message hfl.Task field 'round': expected int, got str")):
        wire.decode(wire.encode(task))
    with pytest.raises(WireError, match=r"hfl\.Start field 'resumed_from'"):
        wire.decode(wire.encode(Start(resumed_from=-1)))


def test_a_peer_sending_a_bad_join_gets_a_named_error() -> None:
    # a real deviating client: the server's receive names the client, the step and the field
    from islands.errors import ProtocolError
    from islands.hfl.protocol import Join
    from islands.runtime import run_local

    def client(party: Any) -> None:
        party.send("server", "join", Join(n_train=-5, n_eval=0))

    def server(party: Any) -> Any:
        return party.recv("client", "join")

    with pytest.raises(ProtocolError, match=r"malformed 'join' message from 'client'.*"
                       r"hfl\.Join field 'n_train': expected a value >= 1, got -5"):
        run_local({"server": server, "client": client}, timeout=10)


def test_register_refuses_what_it_cannot_check() -> None:
    with pytest.raises(TypeError, match="unknown constraint"):
        @wire.register(name="tests.BadConstraint")
        @dataclass(frozen=True)
        class BadConstraint:
            x: int = field(metadata={"gte": 0})
    with pytest.raises(TypeError, match="the constraint 'ge' does not apply to str"):
        @wire.register(name="tests.BadTarget")
        @dataclass(frozen=True)
        class BadTarget:
            x: str = field(metadata={"ge": 0})
    with pytest.raises(TypeError, match="cannot check the annotation"):
        @wire.register(name="tests.BadType")
        @dataclass(frozen=True)
        class BadType:
            x: set[int]
    with pytest.raises(TypeError, match="dicts with str keys"):
        @wire.register(name="tests.BadKeys")
        @dataclass(frozen=True)
        class BadKeys:
            x: dict[int, int]


def test_every_registered_message_compiles_its_checks() -> None:
    import islands.cca.protocol
    import islands.hfl.protocol
    import islands.psi.protocol
    import islands.vfl.ftl.protocol
    import islands.vfl.protocol  # noqa: F401

    for name, cls in wire.registered_messages().items():
        assert wire._field_checks(cls, name) is not None


def test_pca_and_additive_sharing_messages_are_registered_and_checked() -> None:
    # issue 23: PCA's mask/mean/noise/components and additive sharing's share were dicts
    # that each receiver took apart by hand; now the codec checks their fields on arrival
    from islands.aggregation.additive import Share
    from islands.pca.protocol import Components, Mask, Mean, Noise

    names = {cls: name for name, cls in wire.registered_messages().items()}
    assert [names.get(c) for c in (Mask, Mean, Noise, Components, Share)] == [
        "pca.Mask", "pca.Mean", "pca.Noise", "pca.Components", "hfl.AdditiveShare"]
    for cls, name in names.items():
        if name.startswith("pca.") or name == "hfl.AdditiveShare":
            assert wire._field_checks(cls, name)
    good = [Mask(np.zeros(3), -4), Mean(np.ones(3), 10), Noise(b"s" * 32, 0.5, 1e-5),
            Components(np.eye(2, 3), np.ones(2)),
            Share(2, np.arange(3, dtype=np.uint64), b"d" * 32)]
    for msg in good:
        back = wire.decode(wire.encode(msg))
        assert type(back) is type(msg) and same(back.__dict__, msg.__dict__)
    bad = [
        (Mask(np.zeros((1, 3)), 1), "pca.Mask field 'a': expected an array of 1 dimensions"),
        (Mask(np.zeros(3), 1.5), "pca.Mask field 'b': expected int, got float"),  # type: ignore[arg-type]
        (Mean(np.ones(3), 0), "pca.Mean field 'n': expected a value >= 1, got 0"),
        (Mean(np.ones(3, np.float32), 5), "pca.Mean field 'mean': expected ndarray of float64"),
        (Noise(b"s" * 33, 0.5, 1e-5), "pca.Noise field 'seed': expected at most 32 items"),
        (Noise(b"s" * 32, 0.0, 1e-5), "pca.Noise field 'epsilon': expected a value > 0.0"),
        (Noise(b"s" * 32, 0.5, 1.0), "pca.Noise field 'delta': expected a value < 1.0"),
        (Components(np.ones(3), np.ones(1)),
         "pca.Components field 'components': expected an array of 2 dimensions"),
        (Share(0, np.zeros(3, np.uint64), b""), "hfl.AdditiveShare field 'round': expected a "
         "value >= 1, got 0"),
        (Share(1, np.zeros(3, np.int64), b""), "hfl.AdditiveShare field 'share': expected "
         "ndarray of uint64"),
        (Share(1, np.zeros(3, np.uint64), b"d" * 33), "hfl.AdditiveShare field 'roster': "
         "expected at most 32 items"),
    ]
    for msg, needle in bad:
        with pytest.raises(WireError, match=re.escape(needle)):
            wire.decode(wire.encode(msg))
