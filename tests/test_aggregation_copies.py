"""The copies removed from the aggregation path (issue 38, memory) change no value.

Each test pins a copy removal where it could have changed behaviour: an in-place
accumulation that must equal the sum it replaces, a blockwise mean that must round as the
whole-vector one did, an array handed out without a copy that must not alias the module
it came from, a caller's array that must stay untouched.
"""

from __future__ import annotations

import numpy as np
import pytest

from islands.aggregation import base
from islands.aggregation.base import ring_encode, ring_mean
from islands.crypto import decode_fixed, encode_fixed, generate_key, pairwise_mask
from islands.errors import ProtocolError, ValidationError

CONTEXT = b"run-copies"


def _keys(names: list[str]) -> dict[str, object]:
    return {name: generate_key() for name in names}


def test_pairwise_mask_added_in_place_equals_the_mask_added_and_returns_out() -> None:
    names = ["a", "b", "c", "d"]
    keys = _keys(names)
    publics = {v: keys[v].public for v in names if v != "b"}  # type: ignore[attr-defined]
    x = np.random.default_rng(0).integers(0, 2**63, 1000, dtype=np.uint64)
    mask = pairwise_mask("b", keys["b"], publics, x.size, context=CONTEXT,  # type: ignore[arg-type]
                         label=b"in")
    expected = x + mask  # uint64: modulo 2^64
    out = x.copy()
    got = pairwise_mask("b", keys["b"], publics, x.size, context=CONTEXT,  # type: ignore[arg-type]
                        label=b"in", out=out)
    assert got is out
    np.testing.assert_array_equal(out, expected)


def test_masks_added_in_place_still_cancel_over_the_parties() -> None:
    names = ["a", "b", "c"]
    keys = _keys(names)
    total = np.zeros(257, dtype=np.uint64)
    for name in names:
        publics = {v: keys[v].public for v in names if v != name}  # type: ignore[attr-defined]
        pairwise_mask(name, keys[name], publics, total.size, context=CONTEXT,  # type: ignore[arg-type]
                      label=b"s", out=total)
    np.testing.assert_array_equal(total, np.zeros(257, dtype=np.uint64))


@pytest.mark.parametrize("bad", [
    np.zeros(10, dtype=np.int64),            # not uint64
    np.zeros(11, dtype=np.uint64),           # wrong length
    np.zeros(20, dtype=np.uint64)[::2],      # not contiguous
])
def test_pairwise_mask_refuses_an_out_it_cannot_add_to_and_leaves_it_untouched(
        bad: np.ndarray) -> None:
    keys = _keys(["a", "b"])
    before = bad.copy()
    with pytest.raises(ValidationError, match="'out'"):
        pairwise_mask("a", keys["a"], {"b": keys["b"].public}, 10,  # type: ignore[arg-type, attr-defined]
                      context=CONTEXT, label=b"s", out=bad)
    np.testing.assert_array_equal(bad, before)


def test_pairwise_mask_refuses_a_read_only_out() -> None:
    keys = _keys(["a", "b"])
    out = np.zeros(10, dtype=np.uint64)
    out.flags.writeable = False
    with pytest.raises(ValidationError, match="'out'"):
        pairwise_mask("a", keys["a"], {"b": keys["b"].public}, 10,  # type: ignore[arg-type, attr-defined]
                      context=CONTEXT, label=b"s", out=out)


def test_fixed_point_encoding_and_decoding_are_the_whole_vector_formulas() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(scale=3.0, size=5000)
    x[:4] = [0.5 * 2**-32, 1.5 * 2**-32, -2.5 * 2**-32, 0.0]  # ties to even
    own = x.copy()
    enc = encode_fixed(x, frac_bits=32, headroom=7)
    np.testing.assert_array_equal(x, own)  # the caller's array is not the scratch space
    np.testing.assert_array_equal(
        enc, np.rint(x * 2.0**32).astype(np.int64).view(np.uint64))
    np.testing.assert_array_equal(decode_fixed(enc, frac_bits=32),
                                  enc.view(np.int64).astype(np.float64) / 2.0**32)


def test_ring_encode_is_the_float64_product_and_leaves_the_model_alone() -> None:
    params = np.random.default_rng(2).normal(size=3001).astype(np.float32)
    own = params.copy()
    weight = 1 / 3
    got = ring_encode(params, weight, frac_bits=32, headroom=10, who="c", max_abs=1e6)
    np.testing.assert_array_equal(params, own)
    scaled = float(weight) * np.asarray(params, dtype=np.float64)
    np.testing.assert_array_equal(got, encode_fixed(scaled, frac_bits=32, headroom=10))


def test_ring_mean_decodes_as_before_and_still_refuses_a_sum_out_of_range() -> None:
    rng = np.random.default_rng(3)
    uploads = [rng.normal(size=999).astype(np.float32) for _ in range(3)]
    w = [0.2, 0.3, 0.1]
    total = np.zeros(999, dtype=np.uint64)
    for u, p in zip(uploads, w, strict=True):
        total += ring_encode(u, p, frac_bits=32, headroom=3, who="c", max_abs=1e6)
    own = total.copy()
    got = ring_mean(total, frac_bits=32, weight=sum(w), uploads=3, headroom=3, max_abs=1e6,
                    where="round 1", party="s", step="unmask")
    np.testing.assert_array_equal(total, own)
    np.testing.assert_array_equal(
        got, (decode_fixed(own, frac_bits=32) / sum(w)).astype(np.float32))
    total[417] = np.uint64(2**62)  # beyond what 3 in-range uploads sum to
    with pytest.raises(ProtocolError, match="at coordinate 417"):
        ring_mean(total, frac_bits=32, weight=sum(w), uploads=3, headroom=3, max_abs=1e6,
                  where="round 1", party="s", step="unmask")


def test_the_plain_mean_in_blocks_rounds_as_the_whole_vector_mean() -> None:
    dim = 3 * base._TERM + 17  # several blocks and a partial one
    rng = np.random.default_rng(4)
    uploads = {c: rng.normal(size=dim).astype(np.float32) for c in ("a", "b", "c")}
    counts = {"a": 1.0, "b": 2.0, "c": 4.0}
    rnd = base.MeanAggregator().server_half().start(
        _Link(), round=1, clients=list(counts), weights=counts, dim=dim)
    for c in ("c", "a", "b"):
        rnd.add(c, uploads[c])
    got = rnd.finish(["a", "b", "c"])
    total = np.zeros(dim, dtype=np.float64)
    for c in ("c", "a", "b"):
        total += np.multiply(uploads[c], rnd.weights[c], dtype=np.float64)
    weight = sum(rnd.weights[c] for c in ("c", "a", "b"))  # in the order added
    np.testing.assert_array_equal(got, (total / weight).astype(np.float32))
    np.testing.assert_array_equal(rnd.finish(["a", "b", "c"]), got)  # the sum is kept


class _Link:
    name = "server"


def test_a_buffered_models_vector_is_handed_out_without_aliasing_the_module() -> None:
    torch = pytest.importorskip("torch")
    from torch import nn

    from islands.hfl.torch.models import ModelSpec, flat_parameters, load_flat
    from islands.hfl.torch.user import TorchModel

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.Flatten(),
                        nn.Linear(2 * 16, 3))
    for model in (TorchModel.bind(net, (1, 4, 4)), ModelSpec("mlp", (5,), 3, hidden=(4,))):
        module = model.empty()
        values = np.random.default_rng(5).normal(size=model.n_params()).astype(np.float32)
        load_flat(module, values)
        out = flat_parameters(module)
        np.testing.assert_array_equal(out, values)
        out[:] = 0.0  # the caller's to change: the module keeps its values
        np.testing.assert_array_equal(flat_parameters(module), values)
        again = flat_parameters(module)
        load_flat(module, np.zeros_like(values))  # and the module's: the vector keeps its own
        np.testing.assert_array_equal(again, values)
        assert again.dtype == np.float32 and again.flags.writeable


# ------------------------------------------------ no model-sized temporaries (tracemalloc)
# numpy reports its buffers to tracemalloc, so the traced peak of a call counts every
# array it made: a vector of n uint64 is 8n bytes, a block of the streams 1 MiB.
N = 1 << 20  # 8 MiB as uint64, 4 MiB as float32: well above one block


def _traced_peak(fn: object) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn()  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_a_stream_is_added_in_place_a_block_at_a_time() -> None:
    from islands.crypto.prg import add_expanded, expand

    seed = bytes(range(32))
    x = np.random.default_rng(6).integers(0, 2**63, N + 3, dtype=np.uint64)
    stream = expand(seed, x.size, label=b"t")
    out = x.copy()
    peak = _traced_peak(lambda: add_expanded(seed, out, label=b"t"))
    np.testing.assert_array_equal(out, x + stream)
    assert peak <= (1 << 20) + 4096  # the 1 MiB block, never 8·n bytes
    add_expanded(seed, out, label=b"t", subtract=True)
    np.testing.assert_array_equal(out, x)


def test_a_mask_of_many_peers_needs_no_mask_sized_array() -> None:
    names = ["a", "b", "c", "d", "e"]
    keys = _keys(names)
    publics = {v: keys[v].public for v in names if v != "c"}  # type: ignore[attr-defined]
    out = np.zeros(N, dtype=np.uint64)
    peak = _traced_peak(lambda: pairwise_mask(
        "c", keys["c"], publics, N, context=CONTEXT, label=b"m", out=out))  # type: ignore[arg-type]
    assert peak <= (1 << 20) + 64 * 1024  # one block (four streams used to be 4·8·n)


def test_ring_encode_in_blocks_equals_the_whole_vector_and_allocates_only_its_output() -> None:
    params = np.random.default_rng(7).normal(size=N + 5).astype(np.float32)
    weight = 0.3
    got: list[np.ndarray] = []
    peak = _traced_peak(lambda: got.append(ring_encode(
        params, weight, frac_bits=32, headroom=10, who="c", max_abs=1e6)))
    scaled = np.multiply(params, weight, dtype=np.float64)
    np.testing.assert_array_equal(got[0], encode_fixed(scaled, frac_bits=32, headroom=10))
    out_bytes = 8 * params.size
    # the output and blocks of 2^16 values: before, the float64 products, the scaled
    # values and the int64 numerators were each as large as the output
    assert peak <= out_bytes + 2 * 1024 * 1024


def test_ring_encode_names_the_value_out_of_range_as_the_whole_vector_did() -> None:
    params = np.zeros(3 * base._TERM, dtype=np.float32)
    params[2 * base._TERM + 9] = -7.0e5  # in the third block; the range is 8.39e4 here
    with pytest.raises(ValidationError, match=r"client 'c''s update is outside the "
                       r"fixed-point range .*Got -7e\+05 at row 131081 instead"):
        ring_encode(params, 1.0, frac_bits=40, headroom=100, who="client 'c'", max_abs=1e6)
