"""Bad input to every estimator is a ValidationError naming the argument (docs/bad-input.md).

One case per row of the table in ``docs/bad-input.md``: each asserts the error type and
that the message names the argument (and, for range errors, the limit).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest

from islands.errors import JobError, ValidationError

RNG = np.random.default_rng(0)
X = RNG.normal(size=(30, 3))
Y = RNG.normal(size=(30, 2))


def _with(value: Any, arr: Any = X) -> Any:
    """``arr`` (copied) with ``value`` at row 3, column 1; an object array for a str."""
    out = np.array(arr, dtype=object if isinstance(value, str) else np.float64, copy=True)
    out[3, 1] = value
    return out


NAN, INF, HUGE = _with(np.nan), _with(np.inf), _with(1e300)
TEXT = _with("abc")
STRINGS = X.astype(str)
RAGGED = [[1.0, 2.0, 3.0], [1.0, 2.0]]


def _cca(x: Any, y: Any = Y) -> Any:
    from islands.cca import SwarmCCA

    return SwarmCCA(perturb=False, timeout=30).fit(x, y)


def _pca(mode: str, part: Any) -> Any:
    from islands.pca import FederatedPCA

    eps, delta = (None, None) if mode == "plain" else (0.5, 1e-5)
    return FederatedPCA(2, epsilon=eps, delta=delta, mode=mode, random_state=0,
                        timeout=30).fit([part, X])


def _vfl_lin(x_a: Any = X, y: Any = None) -> Any:
    from islands.vfl import VerticalLinearRegression

    target = X[:, 0] if y is None else y
    return VerticalLinearRegression(epochs=1, timeout=30).fit(x_a, Y, target)


def _ftl(x_a: Any, y_b: Any = None) -> Any:
    from islands.vfl import FederatedTransferLearner

    ids = list(range(len(X)))
    labels = (X[:, 0] > 0).astype(int) if y_b is None else y_b
    return FederatedTransferLearner(epochs=1, pretrain_epochs=1, timeout=30).fit(
        x_a, Y, labels, ids, ids)


def _vlog(y: Any) -> Any:
    from islands.vfl import VerticalLogisticRegression

    return VerticalLogisticRegression(epochs=1, timeout=30).fit(X, Y, y)


def _ssum(a: Any) -> Any:
    from islands.securesum import secure_sum

    return secure_sum({"a": a, "b": [1.0, 2.0, 3.0]}, timeout=30)


# (id, call, words the message must contain)
CASES: list[tuple[str, Callable[[], Any], tuple[str, ...]]] = [
    ("cca-nan", lambda: _cca(NAN), ("'X'", "finite", "row 3, column 1")),
    ("cca-inf", lambda: _cca(INF), ("'X'", "finite", "row 3, column 1")),
    ("cca-1e300", lambda: _cca(HUGE), ("'X'", "at most 6.39e+147", "row 3, column 1")),
    ("cca-object-str", lambda: _cca(TEXT), ("'X'", "numbers", "'abc'")),
    ("cca-str-dtype", lambda: _cca(STRINGS), ("'X'", "numbers", "<U")),
    ("cca-ragged", lambda: _cca(RAGGED), ("'X'", "rectangular")),
    ("cca-empty", lambda: _cca(X[:0]), ("'X'", "at least 1 row")),
    ("cca-1d", lambda: _cca(X[:, 0]), ("'X'", "2-D")),
    ("cca-rows", lambda: _cca(X[:-5]), ("X and Y", "same rows")),
    ("cca-Y-nan", lambda: _cca(X, _with(np.nan, Y)), ("'Y'", "finite")),
    ("pca-plain-nan", lambda: _pca("plain", NAN), ("site1", "finite", "row 3, column 1")),
    ("pca-plain-1e300", lambda: _pca("plain", HUGE), ("site1", "at most 6.39e+147")),
    ("pca-secure-1e300", lambda: _pca("secure", HUGE), ("site1", "at most 6.39e+147")),
    ("pca-elfedpca-inf", lambda: _pca("elfedpca", INF), ("site1", "finite")),
    ("pca-dpdispca-1e300", lambda: _pca("dpdispca", HUGE), ("site1", "at most")),
    ("pca-central-nan", lambda: _pca("central", NAN), ("site1", "finite")),
    ("pca-object-str", lambda: _pca("plain", TEXT), ("site1", "numbers")),
    ("pca-1d", lambda: _pca("plain", X[:, 0]), ("site1", "2-D")),
    ("pca-empty", lambda: _pca("plain", X[:0]), ("site1", "no rows")),
    ("vfl-X_a-nan", lambda: _vfl_lin(NAN), ("'X_a'", "finite", "row 3, column 1")),
    ("vfl-X_a-1e30", lambda: _vfl_lin(_with(1e30)), ("'X_a'", "at most 1.07e+09", "2^30")),
    ("vfl-X_a-str", lambda: _vfl_lin(TEXT), ("'X_a'", "numbers", "'abc'")),
    ("vfl-X_a-ragged", lambda: _vfl_lin(np.array(RAGGED, dtype=object)), ("'X_a'", "numbers")),
    ("vfl-y-1e300", lambda: _vfl_lin(y=np.where(np.arange(30) == 2, 1e300, 0.0)),
     ("'y'", "at most 2.68e+08", "2^28", "row 2")),
    ("vfl-y-str", lambda: _vfl_lin(y=np.array(["a"] * 30)), ("'y'", "numbers")),
    ("vfl-y-nan", lambda: _vfl_lin(y=np.where(np.arange(30) == 2, np.nan, 0.0)),
     ("'y'", "finite")),
    ("ftl-X_a-nan", lambda: _ftl(NAN), ("'X_a'", "finite", "row 3, column 1")),
    ("ftl-X_a-1e300", lambda: _ftl(HUGE), ("'X_a'", "at most 1.07e+09", "2^30")),
    ("ftl-X_a-str", lambda: _ftl(TEXT), ("'X_a'", "numbers")),
    ("ftl-X_a-ragged", lambda: _ftl(RAGGED), ("'X_a'", "rectangular")),
    ("securesum-nan", lambda: _ssum([1.0, np.nan, 3.0]), ("values[a]", "finite", "row 1")),
    ("securesum-1e30", lambda: _ssum([1.0, 1e30, 3.0]),
     ("values[a]", "at most 2.75e+11", "frac_bits=24")),
    ("securesum-str", lambda: _ssum(["1", "x", "3"]), ("values[a]", "numbers")),
    ("securesum-ragged", lambda: _ssum([[1.0], [2.0, 3.0]]), ("values[a]", "rectangular")),
    ("securesum-shape", lambda: _ssum([1.0, 2.0]), ("same shape", "'a': (2,)")),
    ("securesum-list", lambda: __import__("islands.securesum").securesum.secure_sum(
        [[1.0], [2.0]]), ("'values'", "mapping of party name")),
    ("vfl-rows-a-vs-b", lambda: __import__("islands.vfl").vfl.VerticalLinearRegression(
        epochs=1, timeout=30).fit(X, Y[:-1], X[:, 0]), ("X_a has 30 rows but X_b has 29",)),
    ("vlog-y-none", lambda: _vlog(np.array(["a", "b"] * 14 + ["a", None], dtype=object)),
     ("'y'", "none missing", "None at row 29")),
    ("vlog-y-nan-object", lambda: _vlog(np.array(["a", "b"] * 14 + ["a", np.nan],
                                                 dtype=object)), ("'y'", "nan at row 29")),
    ("vlog-y-mixed", lambda: _vlog(np.array([1, "b"] * 15, dtype=object)),
     ("'y'", "one kind", "'b' at row 1 after 1 at row 0")),
    ("ftl-y_b-mixed", lambda: _ftl(X, np.array([0, "x"] * 15, dtype=object)),
     ("'y_b'", "'x' at row 1")),
]


@pytest.mark.parametrize(("call", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.filterwarnings("ignore:FederatedPCA.mode='elfedpca'. carries no")
def test_bad_input_is_named(call: Callable[[], Any], words: tuple[str, ...]) -> None:
    with pytest.raises(ValidationError) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_huge_but_encodable_values_still_fit() -> None:
    # 1e30 is within the float limit: plain PCA runs and its components are finite
    fitted = _pca("plain", _with(1e30))
    assert np.all(np.isfinite(fitted.components_))


def test_secure_pca_encodes_a_1e30_row_as_its_direction() -> None:
    """docs/bad-input.md said secure PCA refuses 1e30; it does not need to: every row is
    scaled to unit norm before anything is encoded, so the ring holds the row's direction
    (the same model as the unit row along that column) and no cell's magnitude."""
    from islands.pca import FederatedPCA

    unit = X.copy()
    unit[3] = 0.0
    unit[3, 1] = 1.0
    with pytest.warns(UserWarning, match="noise_seed=7 makes the noise reproducible"):
        fits = [FederatedPCA(2, epsilon=0.5, delta=1e-5, mode="secure", noise_seed=7,
                             timeout=30).fit([part, Y @ np.ones((2, 3))])
                for part in (_with(1e30), unit)]
    # the 1e30 row's other cells become about 1e-30 after scaling: below the ring's 2^-24
    np.testing.assert_array_equal(fits[0].components_, fits[1].components_)
    np.testing.assert_array_equal(fits[0].mean_, fits[1].mean_)


def test_secure_pca_refuses_noise_its_ring_cannot_hold_before_any_message() -> None:
    """A tiny epsilon makes each site's noise share larger than the 64-bit ring can add
    up. Before: encode_fixed failed inside the run, after the sites had exchanged their
    session and keys; now the site names epsilon, the noise, the limit, before sending."""
    from islands.data import open_source
    from islands.pca import FederatedPCA, PcaConfig, publisher, site
    from islands.runtime import Transcript, run_local

    with pytest.raises(ValidationError, match=r"site1: epsilon=1e-11 gives its share of the "
                                              r"noise on the column sums a standard deviation "
                                              r"of 9.97e\+11, but the secure mode adds each "
                                              r"site's column sums in 64-bit fixed point with "
                                              r"24 fractional bits over 2 sites, so each must "
                                              r"be at most 2.75e\+11"):
        FederatedPCA(2, epsilon=1e-11, delta=1e-5, mode="secure", timeout=30).fit([X, X])
    config = PcaConfig(mode="secure", n_components=2, sites=("a", "b"), publisher="p",
                       epsilon=1e-11, delta=1e-5)
    roles: dict[str, Any] = {name: partial(site, source=open_source(X, name=name),
                                           config=config) for name in ("a", "b")}
    transcript = Transcript()
    with pytest.raises(ValidationError, match="epsilon=1e-11"):
        run_local({**roles, "p": partial(publisher, config=config)}, timeout=30,
                  transcript=transcript)
    assert len(transcript) == 0


def test_caller_array_is_not_written() -> None:
    data = NAN.copy()
    with pytest.raises(ValidationError):
        _cca(data)
    assert np.array_equal(data, NAN, equal_nan=True)


# ------------------------------------------------- data files of `islands party`


@pytest.mark.parametrize(("text", "words"), [
    ("a,b\n1,2\n3,1e300\n", ("party 'x'", "at most 6.39e+147", "row 1, column 1")),
    ("a,b\n1,2\n3,nan\n", ("party 'x'", "finite", "row 1, column 1")),
    ("a,b\n1,2\n3,abc\n", ("Line 3", "'abc'", "not a number")),
    ("1,2\n3\n", ("Line 2", "has 1 values")),
], ids=["1e300", "nan", "text", "ragged"])
def test_party_data_file(tmp_path: Any, text: str, words: tuple[str, ...]) -> None:
    from islands.protocols import load_table

    path = tmp_path / "data.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValidationError) as info:
        load_table(path, what="the data of party 'x'")
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_a_labels_file_may_be_a_vector_or_one_column(tmp_path: Any) -> None:
    from islands.protocols import load_array, load_column

    y = np.array([0.0, 1.0, 1.0, 0.0])
    np.save(tmp_path / "y.npy", y)  # what np.save(path, y) writes: 1-D
    np.save(tmp_path / "col.npy", y[:, None])
    np.savetxt(tmp_path / "y.csv", y[:, None], delimiter=",")
    for name in ("y.npy", "col.npy", "y.csv"):
        got = load_column(tmp_path / name, what="the labels of party 'x'")
        assert got.shape == (4,) and np.array_equal(got, y), name
    assert load_array(tmp_path / "y.npy", what="v").shape == (4,)
    assert load_array(tmp_path / "col.npy", what="v").shape == (4, 1)
    np.save(tmp_path / "two.npy", np.ones((4, 2)))
    with pytest.raises(JobError, match=r"labels of party 'x' \(.*two.npy\) must hold one "
                                       r"column; it has 2"):
        load_column(tmp_path / "two.npy", what="the labels of party 'x'")
    np.save(tmp_path / "nan.npy", np.array([0.0, np.nan]))
    with pytest.raises(ValidationError, match="finite"):
        load_column(tmp_path / "nan.npy", what="the labels of party 'x'")
    np.save(tmp_path / "text.npy", np.array(["a", "b"]))
    with pytest.raises(ValidationError, match="party 'x'"):
        load_column(tmp_path / "text.npy", what="the labels of party 'x'")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}, None]), allow_pickle=True)
    with pytest.raises(JobError, match=r"cannot be read as a numeric \.npy file"):
        load_column(tmp_path / "objects.npy", what="the labels of party 'x'")


# ---------------------------------------------------------------- horizontal FL

def _hfl_parts() -> tuple[Any, list[tuple[Any, Any]]]:
    pytest.importorskip("torch")
    from islands.hfl import ModelSpec

    spec = ModelSpec(kind="mlp", input_shape=(6,), n_outputs=3, hidden=(8,))
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, size=80)
    x = (rng.normal(size=(3, 6))[y] * 2 + rng.normal(size=(80, 6))).astype(np.float32)
    return spec, [(x[:40], y[:40]), (x[40:], y[40:])]


def _hfl_fit(part0: tuple[Any, Any]) -> Any:
    from islands.hfl import APFL, FederatedModel

    spec, parts = _hfl_parts()
    return FederatedModel(spec, APFL(tau=2, phi=2, batch_size=8), epochs=1,
                          eval_fraction=0.25, random_state=0).fit([part0, parts[1]])


@pytest.mark.parametrize("row", range(40))
def test_hfl_nan_in_any_row_incl_eval_rows(row: int) -> None:
    # whichever rows the client keeps for local evaluation, a NaN there is refused
    _, parts = _hfl_parts()
    x = parts[0][0].copy()
    x[row, 2] = np.nan
    with pytest.raises(ValidationError, match=rf"'parts\[0\]\[0\]'.*nan at row {row}, column 2"):
        _hfl_fit((x, parts[0][1]))


@pytest.mark.parametrize("value", [1e300, 1e30, -1e13])
def test_hfl_value_beyond_float32_names_limit(value: float) -> None:
    # before: 1e30 passed (below float32 max) and the client became a dropout a round later
    _, parts = _hfl_parts()
    x = parts[0][0].astype(np.float64)
    x[5, 0] = value
    with pytest.raises(ValidationError, match=r"'parts\[0\]\[0\]'.*at most 8\.8e\+12 \(the "
                       r"model computes in float32.*2\^40.*Got "
                       + re.escape(f"{value:.3g} at row 5, column 0")):
        _hfl_fit((x, parts[0][1]))


def test_hfl_regression_targets_beyond_float32_limit() -> None:
    pytest.importorskip("torch")
    from islands.hfl import FedAvg, FederatedModel, ModelSpec

    spec = ModelSpec(kind="mlp", input_shape=(6,), n_outputs=1, hidden=(8,))
    _, parts = _hfl_parts()
    y = np.zeros(40)
    y[7] = 1e20
    fl = FederatedModel(spec, FedAvg(batch_size=8), task="regression", epochs=1, random_state=0)
    with pytest.raises(ValidationError, match=r"'parts\[0\]\[1\]'.*at most 8\.8e\+12.*row 7"):
        fl.fit([(parts[0][0], y), (parts[1][0], np.zeros(40))])


@pytest.mark.parametrize(("j", "value", "words"), [
    (0, None, "Got None"), (0, 5.0, "Got 5.0"), (0, {"a": 1}, "Got {'a': 1}"),
    (0, "data.csv", "(load the file first). Got 'data.csv'"), (1, None, "Got None"),
], ids=["None", "number", "dict", "file-name", "y-None"])
def test_hfl_part_that_is_not_an_array(j: int, value: Any, words: str) -> None:
    # before: TypeError: len() of unsized object
    _, parts = _hfl_parts()
    part = [*parts[0]]
    part[j] = value
    with pytest.raises(ValidationError) as info:
        _hfl_fit((part[0], part[1]))
    assert f"'parts[0][{j}]' parameter of FederatedModel.fit" in str(info.value)
    assert words in str(info.value)


def test_hfl_three_tuple_is_summarised() -> None:
    _, parts = _hfl_parts()
    x, y = parts[0]
    with pytest.raises(ValidationError) as info:
        _hfl_fit((x, y, y))  # type: ignore[arg-type]
    assert "array(shape=(40, 6), dtype=float32), array(shape=(40,)" in str(info.value)
    assert len(str(info.value)) < 300


def test_hfl_bool_features_are_numbers() -> None:
    # before: refused ("of real numbers ... dtype=bool"), unlike every other estimator
    _, parts = _hfl_parts()
    x, y = parts[0]
    fitted = _hfl_fit((x > 0, y))
    assert np.all(np.isfinite(fitted.params_))


class _NaNLearner:
    """A client whose every local update holds a NaN (it refuses to send it)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.n_train, self.n_eval = inner.n_train, inner.n_eval

    def evaluate(self, params: Any) -> float:
        return float(self.inner.evaluate(params))

    def train(self, params: Any, **kw: Any) -> Any:
        from islands.hfl.protocol import LocalOutcome

        out = self.inner.train(params, **kw)
        bad = np.array(out.params, copy=True)
        bad[0] = np.nan
        return LocalOutcome(params=bad, state=out.state, loss=out.loss)


def test_hfl_fit_with_a_dropout_warns_naming_client_round_and_reason() -> None:
    # before: fit returned as if clean; only a log line said a client was left out
    from islands.hfl import FedAvg, FederatedModel

    spec, parts = _hfl_parts()
    fl = FederatedModel(spec, FedAvg(batch_size=8, min_clients=1), epochs=1, random_state=0)
    with pytest.warns(UserWarning, match=r"clients were left out.*client-2: malformed update "
                      r"in round\(s\) 1 \(.+\)") as record:
        fl.fit(parts, behaviour={"client-2": _NaNLearner})
    assert len([w for w in record if "left out" in str(w.message)]) == 1
    assert [(d.client, d.reason) for d in fl.dropouts_] == [("client-2", "malformed update")]


def test_hfl_clean_fit_does_not_warn() -> None:
    import warnings

    _, parts = _hfl_parts()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        fitted = _hfl_fit(parts[0])
    assert fitted.dropouts_ == []


def test_hfl_ragged_and_text_rows() -> None:
    _, parts = _hfl_parts()
    ragged = [list(r) for r in parts[0][0][:39]] + [[1.0]]
    with pytest.raises(ValidationError, match=r"part 0: .*rectangular"):
        _hfl_fit((ragged, parts[0][1]))
    with pytest.raises(ValidationError, match=r"'parts\[0\]\[0\]'.*real numbers"):
        _hfl_fit((parts[0][0].astype(str), parts[0][1]))


def test_hfl_labels_out_of_range() -> None:
    _, parts = _hfl_parts()
    with pytest.raises(ValidationError, match=r"labels \[7\] are outside"):
        _hfl_fit((parts[0][0], np.full(40, 7)))


def test_torch_learner_checks_eval_rows() -> None:
    from islands.hfl.torch.learner import TorchLearner

    spec, parts = _hfl_parts()
    x, y = parts[0]
    bad = x[:5].copy()
    bad[1, 1] = np.inf
    with pytest.raises(ValidationError, match=r"'X_eval'.*inf at row 1, column 1"):
        TorchLearner(spec, x, y, bad, y[:5])


# ------------------------------------------------------------- a user's script

def test_user_script_sees_named_error() -> None:
    script = textwrap.dedent("""
        import numpy as np
        from islands.pca import FederatedPCA
        a = np.ones((20, 3)); a[4, 2] = 1e300
        b = np.random.default_rng(0).normal(size=(20, 3))
        FederatedPCA(2, mode="plain").fit([b, a])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "ValidationError" in last and "site2" in last, done.stderr
    assert "at most 6.39e+147" in last and "row 4, column 2" in last, done.stderr
    assert "OverflowError" not in done.stderr and "LinAlgError" not in done.stderr
