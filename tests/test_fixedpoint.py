"""One fixed-point quantiser: the four encoders built on it give the same bits as before.

``crypto.fixedpoint.encode_fixed`` (two's complement in Z_2^64), ``vfl.maths.encode``
(signed int64), ``vfl.ftl.maths.encode`` (Python ints) and ``crypto.paillier.pack``
(offset binary in packed plaintexts) each used to round and bound-check on their own. The
``_old_*`` functions below are private copies of those bodies as they were before they
were rewritten on :func:`islands.crypto.fixedpoint.quantize`; every case compares the
result (values, dtype, shape, Python type) or the error (type and message) of old and new.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray

from islands.crypto import fixedpoint as fp
from islands.crypto import paillier as P
from islands.errors import ValidationError, invalid_parameter
from islands.validation import check_array, describe
from islands.vfl import maths as vmaths
from islands.vfl.ftl import maths as fmaths

# --------------------------------------------------------------------------------------
# the four encoders as they were (references)
# --------------------------------------------------------------------------------------


def _old_check_frac_bits(frac_bits: Any, owner: str) -> int:
    if isinstance(frac_bits, bool) or not isinstance(frac_bits, (int, np.integer)) or not (
        0 <= frac_bits <= 52
    ):
        raise invalid_parameter("frac_bits", owner, "an int in [0, 52]", frac_bits)
    return int(frac_bits)


def _old_encode_fixed(x: ArrayLike, *, frac_bits: int = 24, headroom: int = 1) -> Any:
    f = _old_check_frac_bits(frac_bits, "encode_fixed")
    if isinstance(headroom, bool) or not isinstance(headroom, int) or headroom < 1:
        raise invalid_parameter("headroom", "encode_fixed", "an int >= 1", headroom)
    bound = float(2 ** (63 - f)) / headroom
    arr = check_array(x, "x", "encode_fixed", ndim=None, min_rows=0, max_abs=bound,
                      why=f"frac_bits={f}: a sum over headroom={headroom} values must not "
                      "wrap the 64-bit ring")
    scaled = np.asarray(np.rint(arr * float(2**f)))
    if scaled.size and int(np.max(np.abs(scaled))) * headroom >= 2**63:
        raise ValidationError(
            f"encode_fixed: |x| reaches {float(np.max(np.abs(arr))):.3g}, but with "
            f"frac_bits={f} and headroom={headroom} values must stay below {bound:.3g}"
        )
    return scaled.astype(np.int64).view(np.uint64)


def _old_decode_fixed(v: ArrayLike, *, frac_bits: int = 24) -> Any:
    f = _old_check_frac_bits(frac_bits, "decode_fixed")
    arr = np.asarray(v)
    if arr.dtype != np.uint64:
        raise ValidationError(f"decode_fixed expects uint64 ring elements, got {arr.dtype}")
    return arr.view(np.int64).astype(np.float64) / float(2**f)


def _old_vfl_encode(values: ArrayLike, frac_bits: int, bound: float, name: str,
                    owner: str) -> Any:
    arr = np.asarray(values, dtype=np.float64)
    if bound * 2.0**frac_bits > 2.0**62:
        raise ValidationError(f"{owner}: {name} at {frac_bits} fractional bits with bound "
                              f"{bound:.3g} would overflow int64")
    if not np.all(np.isfinite(arr)):
        raise ValidationError(f"{owner}: {name} holds NaN or infinite values")
    if arr.size and float(np.max(np.abs(arr))) > bound:
        raise ValidationError(
            f"{owner}: {name} holds a value of magnitude {float(np.max(np.abs(arr))):.3g}, "
            f"above the fixed-point bound {bound:.3g}; standardise the features or "
            "lower the learning rate (training may have diverged)")
    return np.rint(arr * float(2**frac_bits)).astype(np.int64)


def _old_ftl_encode(values: ArrayLike, frac_bits: int, what: str, owner: str) -> list[int]:
    arr = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(arr)) or (arr.size and np.max(np.abs(arr)) > float(2**30)):
        raise ValidationError(f"{owner}: {what} is not finite or above 2^30 in magnitude; "
                              "training has diverged (lower the learning rate)")
    return [int(v) for v in np.rint(arr * float(2**frac_bits))]


def _old_pack(values: ArrayLike, spec: P.PackingSpec) -> list[int]:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise invalid_parameter("values", "pack", "a 1-D array of reals", describe(values)) from exc
    if arr.ndim != 1:
        raise invalid_parameter("values", "pack", "a 1-D array of reals", describe(arr))
    if arr.size == 0:
        return []
    finite = np.isfinite(arr)
    if not finite.all():
        bad = int(np.argmin(finite))
        raise ValidationError(f"pack: values[{bad}] is {float(arr[bad])!r}; values must be finite")
    magnitude = np.abs(arr)
    worst = int(np.argmax(magnitude))
    limit = 2.0**spec.int_bits
    scale = float(2**spec.frac_bits)
    if magnitude[worst] >= limit or abs(np.rint(magnitude[worst] * scale)) >= limit * scale:
        raise ValidationError(
            f"pack: |values[{worst}]| = {float(magnitude[worst])!r} is not below 2**int_bits = "
            f"{limit:g} (after rounding to multiples of 2**-{spec.frac_bits}); raise "
            "int_bits or scale the values down"
        )
    scaled = np.rint(arr * scale)
    encoded = (scaled.astype(np.int64) + np.int64(spec.offset)).astype(np.uint64)
    return P._slots_to_ints(encoded, spec)


def _old_unpack_tail(sums: NDArray[np.uint64], terms: int, spec: P.PackingSpec) -> Any:
    diff = (sums - np.uint64(terms * spec.offset)).view(np.int64)
    return diff.astype(np.float64) / float(2**spec.frac_bits)


# --------------------------------------------------------------------------------------
# inputs and comparison
# --------------------------------------------------------------------------------------


def _outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:
        return "error", (type(exc), str(exc))


def _same(old: Callable[..., Any], new: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """Assert old and new give the same bits or the same error; return which it was."""
    return _same_outcome(_outcome(old, *args, **kwargs), _outcome(new, *args, **kwargs))


def _same_outcome(outcome_a: tuple[str, Any], outcome_b: tuple[str, Any]) -> str:
    (kind_a, a), (kind_b, b) = outcome_a, outcome_b
    assert kind_a == kind_b, (a, b)
    if kind_a == "error":
        assert a == b
        return "error"
    assert type(a) is type(b)
    if isinstance(a, list):
        assert all(type(v) is int for v in b)
        assert a == b
    else:
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    return "ok"


def _values(rng: np.random.Generator, f: int, bound: float, size: int) -> NDArray[np.float64]:
    """A mix of ordinary, huge, exact-bound, half-step, signed-zero and non-finite values."""
    s = 2.0**f
    top = min(bound * s, 2.0**62)
    k = np.floor(rng.uniform(-top, top, size) * rng.choice([1e-12, 1e-6, 1.0], size))
    near = np.array([bound, np.nextafter(bound, np.inf), np.nextafter(bound, 0.0)])
    pool = np.concatenate([
        rng.normal(size=size) * rng.choice([1e-9, 1e-3, 1.0, 1e3], size),
        rng.uniform(-bound, bound, size),
        near, -near, np.array([0.0, -0.0]),
        (k + 0.5) / s, (k - 0.5) / s,  # exact halves of a step: ties go to even
        np.nextafter((k + 0.5) / s, np.inf), np.nextafter((k + 0.5) / s, -np.inf),
    ])
    pool = pool[np.isfinite(pool)]
    out = rng.choice(pool, size)
    if size and rng.random() < 0.25:
        out[rng.integers(size)] = rng.choice([np.nan, np.inf, -np.inf])
    if size and rng.random() < 0.25:
        out[rng.integers(size)] = rng.choice([1.0, -1.0]) * rng.choice(near)
    return out


def _cases(seed: int, trials: int) -> Iterator[tuple[np.random.Generator, int]]:
    rng = np.random.default_rng(seed)
    for i in range(trials):
        yield rng, i


# --------------------------------------------------------------------------------------
# old == new, bit for bit
# --------------------------------------------------------------------------------------


def test_encode_fixed_matches_the_old_encoder_bit_for_bit() -> None:
    seen = set()
    for rng, i in _cases(1, 600):
        f = int(rng.choice([0, 1, 8, 24, 32, 40, 52]))
        headroom = int(rng.choice([1, 2, 3, 7, 1000]))
        bound = fp.max_abs_value(f, headroom)
        x = _values(rng, f, bound, int(rng.integers(0, 40)))
        shape = (-1,) if x.size % 2 else (2, -1) if i % 3 else (-1, 1)
        x = x.reshape(shape)
        seen.add(_same(_old_encode_fixed, fp.encode_fixed, x, frac_bits=f, headroom=headroom))
        enc = _old_encode_fixed(np.nan_to_num(x.ravel(), posinf=0, neginf=0) / 2, frac_bits=f)
        _same(_old_decode_fixed, fp.decode_fixed, enc, frac_bits=f)
    assert seen == {"ok", "error"}


def test_encode_fixed_edges_match_the_old_encoder() -> None:
    for f, h in [(24, 1), (0, 1), (52, 1), (24, 3), (10, 1000)]:
        bound = fp.max_abs_value(f, h)
        for x in ([bound], [-bound], [np.nextafter(bound, 0)], [bound, -0.0], [], 2.5,
                  [[0.5, -0.5], [1.5, -1.5]], [np.nan], ["a"]):
            _same(_old_encode_fixed, fp.encode_fixed, x, frac_bits=f, headroom=h)
    for bad in ({"frac_bits": 53}, {"frac_bits": True}, {"headroom": 0}, {"headroom": 2.0}):
        _same(_old_encode_fixed, fp.encode_fixed, [1.0], **bad)


def test_encode_fixed_refuses_a_value_that_rounds_onto_the_bound() -> None:
    # 2^(63-f) itself passes the magnitude check but rounds to 2^63, outside int64
    with pytest.raises(ValidationError, match="must stay below"):
        fp.encode_fixed([fp.max_abs_value(24)], frac_bits=24)


def test_vfl_encode_matches_the_old_encoder_bit_for_bit() -> None:
    seen = set()
    for rng, i in _cases(2, 600):
        f, bound = [(16, vmaths.MAX_ABS_FEATURE), (22, vmaths.MAX_ABS_FEATURE),
                    (32, vmaths.MAX_ABS_SCORE), (32, 4 * vmaths.MAX_ABS_SCORE),
                    (1, 3.0), (32, 2.0**31)][i % 6]
        x = _values(rng, f, bound, int(rng.integers(0, 40)))
        x = x.reshape(-1, 1) if i % 4 == 0 else x
        seen.add(_same(_old_vfl_encode, vmaths.encode, x, f, bound, "u", "party 'A'"))
    assert seen == {"ok", "error"}
    _same(_old_vfl_encode, vmaths.encode, np.float64(1.25), 16, 4.0, "u", "A")


def test_ftl_encode_matches_the_old_encoder_bit_for_bit() -> None:
    seen = set()
    for rng, i in _cases(3, 600):
        # 2f (up to 64) is used for products: numerators beyond int64 stay exact ints
        f = int(rng.choice([8, 16, 24, 32, 48, 64]))
        x = _values(rng, f, 2.0**30, int(rng.integers(0, 40)))
        x = x.reshape(2, -1) if x.size % 2 == 0 and i % 2 else x
        seen.add(_same(_old_ftl_encode, fmaths.encode, x, f, "A's S", "party 'A'"))
    assert seen == {"ok", "error"}
    assert max(abs(v) for v in fmaths.encode([2.0**30], 64, "t", "B")) == 2**94


def test_pack_matches_the_old_encoder_bit_for_bit() -> None:
    specs = [P.packing_spec(2048), P.packing_spec(1024, frac_bits=0, int_bits=62, max_terms=1),
             P.packing_spec(1024, frac_bits=62, int_bits=0, max_terms=1),
             P.packing_spec(512, frac_bits=20, int_bits=20, max_terms=3),
             P.packing_spec(2048, frac_bits=16, int_bits=30, slots=1)]
    seen = set()
    for rng, i in _cases(4, 600):
        spec = specs[i % len(specs)]
        x = _values(rng, spec.frac_bits, spec.max_abs, int(rng.integers(0, 60)))
        kind = _same(_old_pack, P.pack, x, spec)
        seen.add(kind)
        if kind == "ok" and x.size:
            packed = P.pack(x, spec)
            sums = P._ints_to_slots(packed, spec)[: x.size]
            _same_outcome(_outcome(_old_unpack_tail, sums, 1, spec),
                          _outcome(P.unpack, packed, x.size, spec, terms=1))
    assert seen == {"ok", "error"}
    for x in ([], [[1.0]], 1.0, ["a"], [[]]):
        _same(_old_pack, P.pack, x, specs[0])


# --------------------------------------------------------------------------------------
# the shared quantiser itself
# --------------------------------------------------------------------------------------


def _refuse(index: int, value: float) -> ValidationError:
    return ValidationError(f"bad {index} {value!r}")


def test_quantize_rounds_half_to_even_and_keeps_the_shape() -> None:
    q = fp.quantize([[0.5, 1.5], [-0.5, -2.5]], 0, bound=10.0, fail=_refuse)
    assert q.dtype == np.int64 and q.shape == (2, 2)
    assert q.tolist() == [[0, 2], [0, -2]]
    np.testing.assert_array_equal(fp.dequantize(q, 3), q / 8)


@pytest.mark.parametrize(("x", "inclusive", "message"), [
    ([1.0, np.nan, np.inf], True, "bad 1 nan"),
    ([1.0, -4.0, 4.0], True, "bad 1 -4.0"),
    ([1.0, 3.0, -3.0], False, "bad 1 3.0"),
])
def test_quantize_hands_the_caller_the_first_bad_value(x: list[float], inclusive: bool,
                                                       message: str) -> None:
    bound = 3.0 if inclusive is False else 3.5
    with pytest.raises(ValidationError, match=message):
        fp.quantize(x, 2, bound=bound, inclusive=inclusive, fail=_refuse)


def test_quantize_checks_the_rounded_value_against_the_limit() -> None:
    # 7.9 rounds to 8 at f=0: below the bound 8 but not below the limit 2^3
    assert fp.quantize([7.4], 0, bound=8.0, inclusive=False, limit=8, fail=_refuse)[0] == 7
    with pytest.raises(ValidationError, match=r"bad 0 7\.9"):
        fp.quantize([7.9], 0, bound=8.0, inclusive=False, limit=8, fail=_refuse)


def test_quantize_never_wraps_int64() -> None:
    with pytest.raises(ValidationError, match="bad 0"):
        fp.quantize([2.0**63], 0, bound=None, fail=_refuse)
    with pytest.raises(ValueError, match="limit"):
        fp.quantize([1.0], 0, bound=None, limit=2**63 + 1, fail=_refuse)
