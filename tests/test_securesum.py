"""The secure-sum protocol end to end through the runner."""

from __future__ import annotations

import inspect
from functools import partial

import numpy as np
import pytest

from islands.crypto import decode_fixed, encode_fixed, reconstruct
from islands.errors import ProtocolError, ValidationError
from islands.runtime import Party, Transcript, run_local
from islands.securesum import SecureSumConfig, secure_sum, secure_sum_party


def test_sum_of_three_parties_matches_plain_sum() -> None:
    rng = np.random.default_rng(0)
    values = {name: rng.normal(0, 100, (4, 5)) for name in ("a", "b", "c")}
    result = secure_sum(values)
    # 24 fractional bits: each input is rounded to within 2^-25, three of them add up
    np.testing.assert_allclose(result.total, sum(values.values()), rtol=0, atol=3 * 2.0**-25)
    assert result.total.shape == (4, 5)


def test_no_party_receives_another_partys_input() -> None:
    values = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0]), "c": np.array([5.0, 6.0])}
    result = secure_sum(values, keep_payloads=True)
    t = result.transcript
    assert {tag: tot.messages for tag, tot in t.totals("tag").items()} == {
        "spec": 6, "share": 6, "partial": 6}
    encoded = {n: (np.rint(v * 2**24).astype(np.int64).view(np.uint64)) for n, v in values.items()}
    for record in t.with_tag("share"):
        # a share is a uniformly random ring element, never the sender's encoded input
        assert not np.array_equal(record.payload, encoded[record.sender])
    for party in values:
        assert len(t.received_by(party)) == 6


def test_mismatched_shapes_are_caught_before_any_share_leaves() -> None:
    with pytest.raises(ValidationError, match="shape"):
        secure_sum({"a": np.zeros(3), "b": np.zeros(4), "c": np.zeros(3)})


def test_non_finite_input_is_refused_before_sending() -> None:
    with pytest.raises(ValidationError, match="NaN"):
        secure_sum({"a": [np.nan], "b": [1.0]})


def test_one_party_is_not_a_sum() -> None:
    with pytest.raises(ValidationError, match="at least two parties"):
        secure_sum({"a": [1.0]})


def test_scalars_can_be_summed() -> None:
    assert float(secure_sum({"a": 1.0, "b": 2.0}).total) == 3.0


def test_one_default_and_one_check_for_frac_bits_and_timeout() -> None:
    params = inspect.signature(secure_sum).parameters
    for name, field in SecureSumConfig.model_fields.items():
        assert params[name].default == field.default, name
    with pytest.raises(ValidationError, match=r"The 'frac_bits' parameter of secure_sum must be "
                       r"an int in \[0, 52\]. Got 53 instead."):
        secure_sum({"a": [1.0], "b": [2.0]}, frac_bits=53)
    with pytest.raises(ValidationError, match="'timeout' parameter of secure_sum"):
        secure_sum({"a": [1.0], "b": [2.0]}, timeout=0)


def test_a_party_that_announces_an_untyped_spec_is_refused_before_any_share() -> None:
    def deviating(party: Party) -> None:
        # the old wire form: a dict of unknown shape instead of the registered SumSpec
        party.broadcast("spec", {"shape": [2], "frac_bits": 24})

    log = Transcript()
    with pytest.raises(ProtocolError, match="party 'b' sent a malformed 'spec'"):
        run_local({"a": partial(secure_sum_party, x=[1.0, 2.0]), "b": deviating},
                  timeout=10, transcript=log)
    assert [r.tag for r in log.records if r.sender == "a"] == ["spec"]


def test_the_sum_is_exactly_the_ring_sum_of_the_encoded_inputs() -> None:
    # shares are random, but they cancel exactly: whatever was dealt, the total decodes
    # to Σ encode(x_i) mod 2^64, bit for bit (the shared sharing helpers of issue 23)
    rng = np.random.default_rng(3)
    values = {name: rng.normal(0, 1e3, 7) for name in ("a", "b", "c", "d")}
    want = decode_fixed(reconstruct([encode_fixed(v, frac_bits=24, headroom=4)
                                     for v in values.values()]), frac_bits=24)
    for _ in range(2):
        np.testing.assert_array_equal(secure_sum(values).total, want)
