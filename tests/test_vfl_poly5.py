"""sigmoid="poly5" under engine="ss" (issue 41): the polynomial, its integer bounds, the
secret-shared flow bit for bit against the exact reference, refusals, and its accuracy."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from islands.errors import JobError, ProtocolError, ValidationError
from islands.runtime import run_local
from islands.vfl import VerticalLinearRegression, VerticalLogisticRegression, maths, ss
from islands.vfl.config import VflConfig
from islands.vfl.job import parse_vertical_job
from islands.vfl.protocol import Plan, active, check_plan, coordinator, passive


def make_plan(**settings: Any) -> Plan:
    settings = {"objective": "logistic", "sigmoid": "poly5", "tol": None, **settings}
    return VflConfig.build(None, **settings).plan()


def data(n: int, widths: tuple[int, ...], seed: int = 0) -> tuple[list[Any], Any]:
    rng = np.random.default_rng(seed)
    blocks = [rng.normal(size=(n, w)) for w in widths]
    z = np.hstack(blocks) @ rng.normal(size=sum(widths)) + 0.3 * rng.normal(size=n)
    return blocks, np.where(z > 0, 1.0, -1.0)


def run_roles(blocks: list[Any], y: Any, plan: Plan, keep_payloads: bool = False) -> Any:
    names = ["A"] if len(blocks) == 2 else [f"A{i + 1}" for i in range(len(blocks) - 1)]
    roles: dict[str, Any] = {
        "C": partial(coordinator, active="B", passive=names, plan=plan),
        "B": partial(active, X=blocks[-1], y=y, passive=names, plan=plan),
    }
    for name, x in zip(names, blocks[:-1], strict=True):
        roles[name] = partial(passive, X=x, plan=plan)
    return run_local(roles, timeout=120, keep_payloads=keep_payloads, blas_threads=None), names


# ----------------------------------------------------------------------------- maths


def test_the_coefficients_are_the_least_squares_fit_at_chebyshev_nodes_on_8() -> None:
    nodes = 8.0 * np.cos(np.pi * (np.arange(4000) + 0.5) / 4000)
    design = np.stack([nodes, nodes**3, nodes**5], axis=1)
    fit, *_ = np.linalg.lstsq(design, maths.sigmoid(nodes) - 0.5, rcond=None)
    assert tuple(round(c * 2**maths.POLY5_COEF_BITS) for c in fit) == maths.POLY5
    np.testing.assert_allclose(fit, [0.184774, -0.004083, 3.46e-5], rtol=2e-3)
    z = np.linspace(-8, 8, 100_001)
    assert np.abs(maths.poly5(z) - maths.sigmoid(z)).max() < 0.056
    assert maths.POLY5[2] > 0  # a positive leading term pulls a runaway z back


def test_the_loss_is_the_antiderivative_of_the_residual() -> None:
    z = np.linspace(-12, 12, 241)
    for label in (-1.0, 1.0):
        y = np.full_like(z, label)
        h = 1e-5  # central differences: error O(h²·ℓ''') far below the tolerance
        slope = (maths.poly5_loss(z + h, y) - maths.poly5_loss(z - h, y)) / (2 * h)
        np.testing.assert_allclose(slope, maths.poly5(z) - (label + 1) / 2, atol=1e-6)
    assert maths.poly5_loss(np.zeros(1), np.ones(1))[0] == pytest.approx(np.log(2.0))


def test_the_integers_are_the_polynomial_at_their_scales() -> None:
    rng = np.random.default_rng(3)
    z_int = rng.integers(-(2 << 21), 2 << 21, size=200)
    y = np.where(rng.random(200) < 0.5, -1.0, 1.0)
    z = z_int / 2.0**maths.POLY5_SCORE_BITS
    r = maths.poly5_residual(z_int.astype(object), y)
    np.testing.assert_allclose([float(v) / maths.POLY5_RESIDUAL_SCALE for v in r],
                               maths.poly5(z) - (y + 1) / 2, rtol=1e-12, atol=1e-12)
    total = maths.poly5_loss_sum(z_int.astype(object), y)
    expected = float(np.sum(maths.poly5_loss(z, y) - np.log(2.0)))
    assert total / maths.POLY5_LOSS_SCALE == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize(("passive_count", "batch_size", "feature_bits"),
                         [(1, 256, 16), (2, 256, 16), (3, 1024, 16), (1, 1024, 22)])
def test_the_bounds_hold_the_worst_case_and_fit_the_ring(passive_count: int,
                                                         batch_size: int,
                                                         feature_bits: int) -> None:
    """Every party's score at the limit, every feature at 2^30: r̃, G and the loss stay
    below the bound function's powers of two, which stay below the ring's ±P/2."""
    precision = maths.Precision(feature_bits=feature_bits)
    bounds = maths.poly5_bounds(precision, batch_size, passive_count)
    z = np.array([(passive_count + 1) << 21, -((passive_count + 1) << 21)], dtype=object)
    y = np.array([-1.0, 1.0])  # the label term adds to the polynomial's sign
    r = maths.poly5_residual(z, y)
    rows = 2 * batch_size - 1
    worst_g = rows * (1 << (30 + feature_bits)) * max(abs(int(v)) for v in r)
    assert worst_g < 1 << bounds.gradient_bits
    worst_loss = rows * abs(maths.poly5_loss_sum(z[:1], y[:1]))
    assert worst_loss < 1 << bounds.penalty_bits < 1 << bounds.loss_bits
    half = ss.RING.modulus // 2
    assert 1 << bounds.gradient_bits <= half and 1 << bounds.loss_bits <= half
    ss.check_fits(bounds, "test")


def test_a_plan_beyond_the_ring_is_refused() -> None:
    bounds = maths.poly5_bounds(maths.Precision(feature_bits=22), 1 << 14, 1)
    with pytest.raises(ValidationError, match=r"party 'B': the plan's sums need 19[0-9] bits, "
                                              r"beyond the ring's 187"):
        ss.check_fits(bounds, "party 'B'")


def test_the_fixed_point_reference_tracks_float_gradient_descent() -> None:
    blocks, y = data(120, (3, 2))
    kw: dict[str, Any] = dict(lam=0.05, learning_rate=0.3, epochs=4, batch_size=40, seed=2)
    fixed, fixed_losses = maths.fixed_point_gd_poly(blocks, y, precision=maths.Precision(),
                                                    **kw)
    exact, losses = maths.centralised_gd_poly(blocks, y, **kw)
    for f, e in zip(fixed, exact, strict=True):
        # features rounded to 2^-16 and scores to 2^-16: errors of order 1e-5 per step
        np.testing.assert_allclose(f, e, rtol=0, atol=1e-4)
    np.testing.assert_allclose(fixed_losses, losses, rtol=0, atol=1e-4)


# -------------------------------------------------------------------------- protocol


@pytest.mark.parametrize(("widths", "n"), [((3, 2), 70), ((2, 3, 2), 62)])
def test_the_shared_flow_equals_the_exact_reference_bit_for_bit(widths: tuple[int, ...],
                                                                n: int) -> None:
    """One and two passive parties; n = 62 with batches of 30 folds a last batch of 2."""
    blocks, y = data(n, widths, seed=len(widths))
    plan = make_plan(learning_rate=0.3, lam=0.1, epochs=3, batch_size=30, seed=5)
    run, names = run_roles(blocks, y, plan)
    kw: dict[str, Any] = dict(lam=plan.lam, learning_rate=plan.learning_rate, epochs=3,
              batch_size=plan.batch_size, seed=plan.seed)
    fixed, losses = maths.fixed_point_gd_poly(blocks, y, precision=plan.precision, **kw)
    exact, float_losses = maths.centralised_gd_poly(blocks, y, **kw)
    got = [run.results[name].theta for name in [*names, "B"]]
    for g, f, e in zip(got, fixed, exact, strict=True):
        np.testing.assert_array_equal(g, f)  # the same integers, the same floats
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-4)  # 2^-16 rounding
    assert run.results["C"].batch_losses == losses
    np.testing.assert_allclose(losses, float_losses, rtol=0, atol=1e-4)


def test_the_coordinator_receives_what_it_receives_under_taylor() -> None:
    """C, the dealer, receives no data share: only hellos, seeds and masked loss shares,
    as under the Taylor loss; the opened d and the masked labels stay among data parties."""
    blocks, y = data(60, (2, 2, 2))
    runs = {sigmoid: run_roles(blocks, y, make_plan(sigmoid=sigmoid, epochs=2, batch_size=30,
                                                    learning_rate=0.3))[0]
            for sigmoid in ("taylor", "poly5")}
    received = {sigmoid: {r.tag for r in run.transcript.received_by("C")}
                for sigmoid, run in runs.items()}
    assert received["poly5"] == received["taylor"] == {"hello", "seed", "lossshare"}
    records = list(runs["poly5"].transcript)
    data_parties = {"A1", "A2", "B"}
    for tag in ("open", "yhat", "xhat", "m", "pair"):
        assert {r.receiver for r in records if r.tag == tag} <= data_parties, tag
        assert {r.sender for r in records if r.tag == tag} <= data_parties, tag
    assert {(r.sender, r.receiver) for r in records if r.tag == "yhat"} == {("B", "A1"),
                                                                             ("B", "A2")}
    assert {(r.sender, r.receiver) for r in records if r.tag == "powers"} == {("C", "B")}
    # one opening per batch and ordered pair of data parties: 2 epochs × 2 batches × 6
    assert sum(r.tag == "open" for r in records) == 2 * 2 * 6
    assert not any(r.tag in {"open", "yhat", "powers"} for r in runs["taylor"].transcript)


def test_a_party_refuses_a_partial_score_beyond_2_to_the_5() -> None:
    blocks, y = data(60, (2, 2))
    blocks = [8.0 * b for b in blocks]  # large features and a large step: |x·θ| grows fast
    plan = make_plan(learning_rate=50.0, epochs=3, batch_size=30)
    with pytest.raises(ValueError, match=r"party '(A|B)': a partial score \|x·θ\| = .* "
                                         r"reaches sigmoid='poly5''s limit 2\^5 = 32 per "
                                         r"party .*lower learning_rate"):
        run_roles(blocks, y, plan)


class _ShortOpen:
    """A party whose ``open`` messages lose their last element."""

    def __init__(self, party: Any) -> None:
        self._party = party

    def __getattr__(self, name: str) -> Any:
        return getattr(self._party, name)

    def send(self, to: str, tag: str, payload: Any) -> None:
        self._party.send(to, tag, payload[:-1] if tag == "open" else payload)


def test_a_malformed_opening_is_refused_naming_its_sender() -> None:
    blocks, y = data(60, (2, 2))
    plan = make_plan(epochs=1, batch_size=30)
    roles: dict[str, Any] = {
        "C": partial(coordinator, active="B", passive=["A"], plan=plan),
        "B": partial(active, X=blocks[1], y=y, passive=["A"], plan=plan),
        "A": lambda party: passive(_ShortOpen(party), X=blocks[0], plan=plan),  # type: ignore[arg-type]
    }
    with pytest.raises(ProtocolError, match=r"party 'B' \(from 'A'\): open must be a uint64 "
                                            r"array of shape \(30, 3\); got uint64 \(29, 3\)"):
        run_local(roles, timeout=30, blas_threads=None)


# -------------------------------------------------------------------------- settings


@pytest.mark.parametrize(("settings", "got"), [
    ({"engine": "he", "he": "none"}, "engine='he'"),
    ({"he": "paillier", "key_bits": 1024, "insecure_keys": True}, "engine='he'"),
    ({"objective": "linear"}, "objective='linear'"),
])
def test_poly5_needs_the_ss_engine_and_the_logistic_objective(settings: dict[str, Any],
                                                              got: str) -> None:
    with pytest.raises(ValidationError, match=f"vertical regression: sigmoid='poly5' needs "
                                              f"engine='ss' and the logistic objective; got "
                                              f"{got}"):
        VflConfig.build(None, **{"objective": "logistic", "sigmoid": "poly5", **settings})


def test_the_estimators_jobs_and_federation_files_take_the_setting() -> None:
    assert VerticalLogisticRegression(sigmoid="poly5")._config().plan().sigmoid == "poly5"
    assert VerticalLogisticRegression()._config().plan().sigmoid == "taylor"
    with pytest.raises(ValidationError, match="sigmoid='poly5' needs engine='ss' and the "
                                              "logistic objective; got objective='linear'"):
        VerticalLinearRegression(sigmoid="poly5")._config()
    with pytest.raises(ValidationError, match=r"The 'sigmoid' parameter of "
                                              r"VerticalLogisticRegression must be 'taylor' or "
                                              r"'poly5'\. Got 'cubic' instead\."):
        VerticalLogisticRegression(sigmoid="cubic")._config()
    job = parse_vertical_job({"name": "x", "kind": "vertical",
                              "model": {"kind": "logistic", "sigmoid": "poly5"}})
    assert job.config().plan().sigmoid == "poly5"
    where = "federation file f.toml [vfl]"
    assert VflConfig.from_federation({"sigmoid": "poly5"}, where).sigmoid == "poly5"
    with pytest.raises(JobError, match=r"\[vfl\]: vertical regression: sigmoid='poly5' needs "
                                       r"engine='ss' and the logistic objective; got "
                                       r"engine='he'"):
        VflConfig.from_federation({"sigmoid": "poly5", "he": "none"}, where)
    with pytest.raises(JobError, match=r"\[vfl\]: 'sigmoid' must be 'taylor' or 'poly5'; "
                                       r"got 'exact'"):
        VflConfig.from_federation({"sigmoid": "exact"}, where)


def test_every_party_checks_the_plan_it_is_given() -> None:
    plan = make_plan()
    for changes, said in (({"engine": "he", "he": "none"}, "got engine='he'"),
                          ({"objective": "linear"}, "objective='linear'"),
                          ({"sigmoid": "cubic"}, "sigmoid must be one of")):
        bad = Plan(**{**vars(plan), **changes})
        with pytest.raises(ValidationError, match=f"party 'A': .*{said}"):
            check_plan(bad, "party 'A'")


# -------------------------------------------------------------------------- accuracy


def _breast_cancer() -> tuple[Any, ...]:
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    return scaler.transform(x_tr), scaler.transform(x_te), y_tr, y_te


def test_poly5_is_as_accurate_as_taylor_and_better_calibrated_on_breast_cancer() -> None:
    """B holds 10 features, A 20; lr 0.3, batches of 256, 20 epochs. The log-loss is that
    of the true sigmoid of the final scores (what predict_proba returns)."""
    from sklearn.metrics import accuracy_score, log_loss

    x_tr, x_te, y_tr, y_te = _breast_cancer()
    scores = {}
    for sigmoid in ("taylor", "poly5"):
        model = VerticalLogisticRegression(sigmoid=sigmoid, learning_rate=0.3, batch_size=256,
                                           epochs=20, tol=None, random_state=0)
        model.fit(x_tr[:, 10:], x_tr[:, :10], y_tr)
        z = model.decision_function(x_te[:, 10:], x_te[:, :10])
        scores[sigmoid] = (accuracy_score(y_te, z > 0), log_loss(y_te, maths.sigmoid(z)))
    assert scores["poly5"][0] >= scores["taylor"][0] - 0.01
    assert scores["poly5"][1] < scores["taylor"][1]
