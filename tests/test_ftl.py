"""Federated transfer learning (islands.vfl.ftl): maths, protocol, estimator, errors."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from ftl_data import overlap_data
from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local
from islands.vfl import FederatedTransferLearner
from islands.vfl.ftl import FtlConfig, maths
from islands.vfl.ftl.protocol import (
    Plan,
    check_plan,
    infer_source,
    infer_target,
    make_net,
    source,
    target,
)
from islands.vfl.keys import KEY_BITS_RULE as _KEY_RULE


# ------------------------------------------------------------------ maths
@pytest.mark.parametrize(("kind", "classes"), [("logistic", 2), ("logistic", 4),
                                               ("softmax", 2), ("softmax", 5)])
def test_gradients_match_autograd(kind: str, classes: int) -> None:
    """a_gradient and phi_gradient are the derivatives of batch_loss (through Φ = WᵀU_B)."""
    rng = np.random.default_rng(classes)
    loss = maths.TaylorLoss(kind, classes)
    n_b, b, d = 40, 7, 3
    labels = np.arange(n_b) % classes
    w = maths.prototypes(loss, labels)
    t = loss.targets(labels[:b])
    m = loss.curvature()
    u_b = torch.tensor(rng.normal(size=(n_b, d)), requires_grad=True)
    u_a = torch.tensor(rng.normal(size=(b, d)), requires_grad=True)
    alpha, gamma = 0.7, 0.3
    phi = torch.tensor(w).T @ u_b
    scores = u_a @ phi.T
    value = (alpha * (loss.constant + (torch.tensor(t) * scores).sum(1)
                      + 0.5 * ((scores @ torch.tensor(m)) * scores).sum(1)).sum()
             + gamma * ((u_a - u_b[:b]) ** 2).sum()) / b
    value.backward()
    phi_np = phi.detach().numpy()
    ua, ub = u_a.detach().numpy(), u_b.detach().numpy()
    assert maths.batch_loss(loss, phi_np, t, ua, ub[:b], alpha=alpha, gamma=gamma) == \
        pytest.approx(float(value.detach()), rel=1e-12)
    p, q = maths.target_terms(phi_np, t, m)
    np.testing.assert_allclose(maths.a_gradient(p, q, ua, ub[:b], alpha=alpha, gamma=gamma),
                               u_a.grad.numpy(), rtol=1e-10, atol=1e-12)
    grad_b = alpha / b * (w @ maths.phi_gradient(t, ua, phi_np, m))
    grad_b[:b] += 2 * gamma / b * (ub[:b] - ua)  # the symmetric alignment term
    np.testing.assert_allclose(grad_b, u_b.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_taylor_losses_expand_the_real_losses_at_zero() -> None:
    """ℓ matches log(1 + e^(−yφ)) / softmax cross-entropy to second order near φ = 0."""
    phi = np.array([[1e-3], [-2e-3]])
    logistic = maths.TaylorLoss("logistic", 2)
    t = logistic.targets(np.array([1, 0]))
    exact = np.log1p(np.exp(-np.array([1.0, -1.0]) * phi[:, 0]))
    np.testing.assert_allclose(logistic.value(phi, t), exact, atol=1e-8)
    softmax = maths.TaylorLoss("softmax", 3)
    phi3 = np.array([[1e-3, -2e-3, 5e-4]])
    t3 = softmax.targets(np.array([1]))
    exact3 = np.log(np.exp(phi3).sum()) - phi3[0, 1]
    np.testing.assert_allclose(softmax.value(phi3, t3), [exact3], atol=1e-8)
    # the softmax expansion is minimised with a margin of K between the true class and
    # the others, the one-vs-rest one pulls scores to ±2
    assert np.allclose(softmax.proba(np.zeros((2, 3))), 1 / 3)
    assert logistic.proba(np.array([[0.0]])).tolist() == [[0.5, 0.5]]


def test_prototypes_need_every_class() -> None:
    loss = maths.TaylorLoss("softmax", 3)
    with pytest.raises(ValidationError, match=r"classes \[2\] have no labelled row"):
        maths.prototypes(loss, np.array([0, 1, 1]))
    w = maths.prototypes(loss, np.array([0, 1, 1, 2]))
    np.testing.assert_allclose(w.sum(axis=0), 1.0)  # class means


def test_encode_refuses_divergence() -> None:
    with pytest.raises(ValidationError, match="diverged"):
        maths.encode([np.inf], 24, "u", "party 'A'")
    assert maths.decode(maths.encode([0.5, -1.25], 24, "u", "A"), 24, (2,)).tolist() == \
        [0.5, -1.25]


# ------------------------------------------------------------------ protocol


def _train(plan: Plan, classes: int = 2) -> tuple[object, object]:
    x_a, x_b, labels, overlap = overlap_data(classes=classes)
    run = run_local({"A": partial(target, X=x_a, plan=plan, init_seed=1),
                     "B": partial(source, X=x_b, labels=labels, overlap=overlap,
                                  n_classes=classes, plan=plan, init_seed=2)}, timeout=120,
                    blas_threads=None)
    return run.results["A"], run.results["B"]


def _scores(model_a: object, model_b: object, x: np.ndarray, plan: Plan) -> np.ndarray:
    run = run_local({"A": partial(infer_target, net=model_a.net, X=x, plan=plan),  # type: ignore[attr-defined]
                     "B": partial(infer_source, phi=model_b.phi, plan=plan)},  # type: ignore[attr-defined]
                    timeout=120, blas_threads=None)
    return np.asarray(run.results["A"])


@pytest.mark.parametrize(("alignment", "loss", "classes"), [("anchored", "softmax", 3),
                                                            ("symmetric", "logistic", 2)])
def test_encrypted_equals_plain(alignment: str, loss: str, classes: int) -> None:
    """Same seed: Paillier and clear runs give the same losses and scores to ~2^-24."""
    common = dict(dim=3, hidden=(6,), epochs=2, batch_size=10, pretrain_epochs=1,
                  alignment=alignment, loss=loss, key_bits=1024, insecure_keys=True, seed=5)
    plain = Plan(engine="he", he="none", **common)  # type: ignore[arg-type]
    secret = Plan(engine="he", he="paillier", **common)  # type: ignore[arg-type]
    a0, b0 = _train(plain, classes)
    a1, b1 = _train(secret, classes)
    np.testing.assert_allclose(b0.epoch_losses, b1.epoch_losses, rtol=1e-6)  # type: ignore[attr-defined]
    np.testing.assert_allclose(a0.epoch_losses, b0.epoch_losses)  # type: ignore[attr-defined]
    x_new = overlap_data(classes=classes)[0][:6]
    s0, s1 = _scores(a0, b0, x_new, plain), _scores(a1, b1, x_new, secret)
    np.testing.assert_allclose(s0, s1, atol=1e-5)
    with torch.no_grad():  # inference returns Φ·Net_A(x), in the clear and encrypted
        direct = a1.net(torch.tensor(x_new, dtype=torch.float32)).numpy() @ b1.phi.T  # type: ignore[attr-defined]
    np.testing.assert_allclose(s1, direct, atol=1e-5)
    # training moved A's network away from its initial weights
    start = make_net(4 + 2, secret, 1)
    moved = [not torch.equal(p, q) for p, q in zip(a1.net.parameters(),  # type: ignore[attr-defined]
                                                   start.parameters(), strict=True)]
    assert all(moved)


def test_plans_must_agree() -> None:
    x_a, x_b, labels, overlap = overlap_data()
    plan = Plan(engine="he", he="none", dim=3, hidden=(4,), epochs=1, pretrain_epochs=0)
    other = Plan(engine="he", he="none", dim=3, hidden=(4,), epochs=2, pretrain_epochs=0)
    with pytest.raises(ValidationError, match=r"plan differs.*'epochs': \((1, 2|2, 1)\)"):
        run_local({"A": partial(target, X=x_a, plan=plan),
                   "B": partial(source, X=x_b, labels=labels, overlap=overlap, n_classes=2,
                                plan=other)}, timeout=30, blas_threads=None)


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("loss", "hinge", "one of ['softmax', 'logistic']"),
    ("alignment", "both", "one of ['anchored', 'symmetric']"),
    ("dim", 0, "an int in [1, 1024]"), ("hidden", (0,), "a tuple of layer widths in [1, 65536]"),
    ("hidden", ("8",), "a tuple of layer widths in [1, 65536]"),
    ("alpha", 0.0, "a float in (0, 1e6] (it weights the label loss A learns from)"),
    ("he", "rsa", "None, 'ou', 'paillier' or 'none'"),
    ("key_bits", 1000, _KEY_RULE), ("key_bits", 2100, _KEY_RULE),
    ("key_bits", 1024, _KEY_RULE),  # below the 2048-bit floor without insecure_keys
    ("frac_bits", 60, "an int in [8, 32]"), ("tol", float("inf"), "None or a float in (0, inf)"),
    ("seed", -1, "an int in [0, inf)")])
def test_plan_errors_name_the_field(field: str, value: object, expected: str) -> None:
    with pytest.raises(ValidationError) as info:
        check_plan(Plan(**{field: value}), "party 'A'")  # type: ignore[arg-type]
    assert str(info.value) == (f"The {field!r} parameter of party 'A' must be {expected}. "
                               f"Got {value!r} instead.")


def test_one_config_holds_every_default() -> None:
    """The estimator's __init__, FtlConfig and Plan share each default; the plan comes from
    the config, and Paillier's own key-size rule holds (16384 bits is accepted)."""
    import inspect

    config = FtlConfig()
    signature = inspect.signature(FederatedTransferLearner.__init__).parameters
    assert set(signature) - {"self", "renamed"} == set(FtlConfig.model_fields) | set(
        FederatedTransferLearner.runtime)
    for name, field in FtlConfig.model_fields.items():  # engine's None resolves to "ss"
        assert signature[name].default == field.default, name
    assert config.engine == Plan().engine == "ss"
    plan = config.plan(7)
    assert plan == Plan(seed=7)
    assert check_plan(plan, "t") == plan and plan.text() == Plan(seed=7).text()
    assert plan.text() != Plan(seed=8).text()
    assert FtlConfig(key_bits=16384).plan(0).key_bits == 16384
    assert FtlConfig.build(None, hidden=[8, 4]).hidden == (8, 4)  # a TOML list


def test_estimator_errors_are_the_standard_message(cancer: dict[str, np.ndarray]) -> None:
    X, y, a, b = cancer["X"], cancer["y"], cancer["a"], cancer["b"]
    for bits in (1100, 1024):  # 1024: below the 2048-bit floor without insecure_keys
        with pytest.raises(ValidationError, match=r"^The 'key_bits' parameter of "
                           r"FederatedTransferLearner must be an int in \[2048, 16384\] and a "
                           r"multiple of 256 \(from 1024 only with insecure_keys, for "
                           rf"tests\). Got {bits} instead.$"):
            FederatedTransferLearner(key_bits=bits).fit(X[a][:, :15], X[b][:, 15:], y[b],
                                                        _ids(a), _ids(b))
    with pytest.raises(ValidationError, match="The 'timeout' parameter of "
                       "FederatedTransferLearner must be"):
        FederatedTransferLearner(timeout=0).fit(X[a][:, :15], X[b][:, 15:], y[b], _ids(a),
                                                _ids(b))


# ------------------------------------------------------------------ estimator
@pytest.fixture(scope="module")
def cancer() -> dict[str, np.ndarray]:
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    perm = np.random.default_rng(0).permutation(len(y))
    return {"X": X, "y": y, "b": perm[:300], "a": np.concatenate([perm[:60], perm[300:480]]),
            "test": perm[480:]}


def _ids(rows: np.ndarray) -> list[str]:
    return [f"person-{i}" for i in rows]


def test_estimator_learns_and_follows_sklearn_conventions(cancer: dict[str, np.ndarray]) -> None:
    X, y, a, b, test = cancer["X"], cancer["y"], cancer["a"], cancer["b"], cancer["test"]
    labels = np.where(y == 1, "benign", "malignant")
    model = FederatedTransferLearner(dim=8, hidden=(16,), epochs=15, batch_size=16,
                                     engine="he", he="none", random_state=0)
    assert "he='none'" in repr(model)
    model.fit(X[a][:, :15], X[b][:, 15:], labels[b], _ids(a), _ids(b))
    assert model.n_overlap_ == 60 and sorted(model.overlap_ids_) == sorted(_ids(a[:60]))
    assert list(model.classes_) == ["benign", "malignant"]
    proba = model.predict_proba(X[test][:, :15])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert model.score(X[test][:, :15], labels[test]) > 0.8
    assert len(model.loss_history_) == 15 and len(model.epoch_seconds_) == 15
    assert model.get_params()["dim"] == 8 and model.set_params(dim=4).dim == 4
    with pytest.raises(ValidationError, match="X_a must have 15 features"):
        model.predict(X[test][:, :14])


def test_estimator_encrypted_equals_plain(cancer: dict[str, np.ndarray]) -> None:
    X, y, a, b, test = cancer["X"], cancer["y"], cancer["a"], cancer["b"], cancer["test"]
    kw = dict(dim=4, hidden=(8,), epochs=2, batch_size=30, pretrain_epochs=1, key_bits=1024,
              insecure_keys=True, random_state=3)
    fits = [FederatedTransferLearner(engine="he", he=enc, **kw).fit(  # type: ignore[arg-type]
        X[a][:, :15], X[b][:, 15:], y[b], _ids(a), _ids(b)) for enc in ("none", "paillier")]
    np.testing.assert_allclose(fits[0].loss_history_, fits[1].loss_history_, rtol=1e-6)
    np.testing.assert_allclose(fits[0].decision_function(X[test][:20, :15]),
                               fits[1].decision_function(X[test][:20, :15]), atol=1e-5)
    assert fits[1].timing_["A"].he > 0 and fits[0].timing_["A"].he == 0


def test_estimator_errors(cancer: dict[str, np.ndarray]) -> None:
    X, y, a, b = cancer["X"], cancer["y"], cancer["a"], cancer["b"]
    x_a, x_b = X[a][:, :15], X[b][:, 15:]
    model = FederatedTransferLearner(engine="he", he="none", epochs=1)
    with pytest.raises(RuntimeError, match="not fitted"):
        model.predict(x_a)
    with pytest.raises(ValidationError, match=r"(?i)intersect|share|common"):
        model.fit(x_a, x_b, y[b], [f"a{i}" for i in a], [f"b{i}" for i in b])
    with pytest.raises(ValidationError, match="ids_a must hold one ID per row"):
        model.fit(x_a, x_b, y[b], _ids(a)[:-1], _ids(b))
    with pytest.raises(ValidationError, match="y_b must be 1-D with one label per row"):
        model.fit(x_a, x_b, y[b][:-1], _ids(a), _ids(b))
    with pytest.raises(ValidationError, match="at least 2 classes"):
        model.fit(x_a, x_b, np.zeros(len(b)), _ids(a), _ids(b))
    with pytest.raises(ValidationError, match=r"classes \[2\] have no labelled row"):
        FederatedTransferLearner(classes=[0, 1, 2]).fit(x_a, x_b, y[b], _ids(a), _ids(b))
    with pytest.raises(ValidationError, match="not in classes"):
        FederatedTransferLearner(classes=[0]).fit(x_a, x_b, y[b], _ids(a), _ids(b))
    bad = x_a.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValidationError, match=r"'X_a'.*finite"):
        model.fit(bad, x_b, y[b], _ids(a), _ids(b))
    with pytest.raises(ValidationError, match=r"'X_b'.*2-D array"):
        model.fit(x_a, x_b[:, 0], y[b], _ids(a), _ids(b))
    with pytest.raises(ValidationError, match="The 'loss' parameter of "
                       "FederatedTransferLearner must be one of"):
        FederatedTransferLearner(loss="hinge").fit(x_a, x_b, y[b], _ids(a), _ids(b))
    with pytest.raises(ValidationError, match="no parameter 'depth'"):
        model.set_params(depth=3)


def test_numpy_ids_and_numpy_parameters(cancer: dict[str, np.ndarray]) -> None:
    """IDs as numpy arrays and numpy-typed parameters work (and hash like Python ones)."""
    X, y, a, b = cancer["X"], cancer["y"], cancer["a"], cancer["b"]
    model = FederatedTransferLearner(dim=np.int64(4), hidden=(np.int64(8),), epochs=1,
                                     alpha=np.float64(1), engine="he", he="none", random_state=0)
    model.fit(X[a][:, :15], X[b][:, 15:], y[b], np.asarray(a), np.asarray(b))
    assert model.n_overlap_ == 60
    assert check_plan(Plan(alpha=1), "t").text() == check_plan(Plan(alpha=1.0), "t").text()


def test_no_batch_of_k_rows_or_fewer() -> None:
    """A last batch of at most K rows joins the previous one; tiny overlaps are refused."""
    from islands.vfl.ftl.config import batch_order
    from islands.vfl.ftl.protocol import check_rows

    plan = Plan(batch_size=20, engine="he", he="none")
    sizes = [r.size for r in batch_order(61, plan, 0, 3)]
    assert sizes == [20, 20, 21] and sum(sizes) == 61
    assert [r.size for r in batch_order(64, plan, 0, 3)] == [20, 20, 20, 4]
    with pytest.raises(ValidationError, match="more than K = 3 overlap rows"):
        check_rows(3, plan, 3, "party 'B'")
    with pytest.raises(ValidationError, match="batch_size > 10"):
        check_rows(100, Plan(batch_size=10), 10, "party 'B'")


def test_tol_stops_both_parties_at_the_same_epoch() -> None:
    plan = Plan(dim=3, hidden=(6,), epochs=30, batch_size=12, pretrain_epochs=0, tol=0.5,
                engine="he", he="none")
    model_a, model_b = _train(plan)
    assert model_b.epochs < 30 and model_b.converged  # type: ignore[attr-defined]
    assert model_a.epochs == model_b.epochs  # type: ignore[attr-defined]
    assert model_a.epoch_losses == model_b.epoch_losses  # type: ignore[attr-defined]


# ------------------------------------------------------------------ PSI size limit
def _unbalanced(cancer: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """A enters 500 IDs against B's 25 (20x), 20 of them shared."""
    X, y = cancer["X"], cancer["y"]
    perm = np.random.default_rng(1).permutation(len(y))
    b, a = perm[:25], np.concatenate([perm[:20], perm[25:505]])
    return X[a][:, :15], X[b][:, 15:], y[b], np.asarray(_ids(a)), np.asarray(_ids(b))


def test_psi_refuses_a_target_party_with_20x_the_source_ids(
        cancer: dict[str, np.ndarray]) -> None:
    x_a, x_b, y_b, ids_a, ids_b = _unbalanced(cancer)
    model = FederatedTransferLearner(dim=4, hidden=(8,), epochs=1, batch_size=10,
                                     pretrain_epochs=0, engine="he", he="none", random_state=0)
    with pytest.raises(ProtocolError) as info:
        model.fit(x_a, x_b, y_b, ids_a, ids_b)
    message = str(info.value)
    # the real parties and the limit (10 x B's 25 IDs), not PSI's internal 'a' and 'b'
    assert "PSI party 'B' refuses party 'A'" in message and info.value.party == "B"
    assert "announced 500 IDs" in message and "max_peer_size = 250" in message
    assert "'a'" not in message and "'b'" not in message
    model.set_params(max_peer_ratio=20).fit(x_a, x_b, y_b, ids_a, ids_b)
    assert model.n_overlap_ == 20
    assert FederatedTransferLearner(max_peer_size=500, dim=4, hidden=(8,), epochs=1,
                                    batch_size=10, pretrain_epochs=0, engine="he", he="none",
                                    ).fit(x_a, x_b, y_b, ids_a, ids_b).n_overlap_ == 20


@pytest.mark.parametrize(("key", "value"), [
    ("max_peer_size", 0), ("max_peer_size", -1), ("max_peer_size", "500"),
    ("max_peer_ratio", 0), ("max_peer_ratio", -2), ("max_peer_ratio", "20"),
    ("max_peer_ratio", float("nan")),
])
def test_bad_psi_limits_are_refused_before_any_message(cancer: dict[str, np.ndarray], key: str,
                                                      value: object,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import islands.vfl.ftl.estimator as est

    runs: list[object] = []
    monkeypatch.setattr(est, "run_local", lambda *a, **k: runs.append(a))
    x_a, x_b, y_b, ids_a, ids_b = _unbalanced(cancer)
    model = FederatedTransferLearner(engine="he", he="none").set_params(**{key: value})
    with pytest.raises(ValidationError,
                       match=f"The '{key}' parameter of FederatedTransferLearner must be"):
        model.fit(x_a, x_b, y_b, ids_a, ids_b)
    assert not runs
