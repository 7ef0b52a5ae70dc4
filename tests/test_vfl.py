"""Vertical linear and logistic regression: lossless against centralised gradient descent,
C never decrypts an unmasked gradient, alignment by PSI, inference, clear errors."""

from __future__ import annotations

from functools import cache, partial
from typing import Any

import numpy as np
import pytest

pytest.importorskip("phe")
pytest.importorskip("gmpy2")

from islands.crypto import paillier
from islands.crypto.paillier_ops import decrypt_many, decrypt_signed, weighted_products
from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local
from islands.vfl import VerticalLinearRegression, VerticalLogisticRegression, maths
from islands.vfl.config import VflConfig
from islands.vfl.protocol import (
    Plan,
    active,
    coordinator,
    inference_coordinator,
    inference_party,
    passive,
)


def make_plan(objective: str, **settings: Any) -> Plan:
    """A resolved plan from VflConfig; protocol tests run every epoch (tol=None) unless told."""
    settings = {"tol": None, "key_bits": 1024, "insecure_keys": True, "he": "paillier",
                **settings}
    return VflConfig.build(None, objective=objective, **settings).plan()


@cache
def djn_keys() -> tuple[Any, Any, int]:
    return paillier.generate_djn_keypair(1024)


@cache
def plain_keys() -> tuple[Any, Any, None]:
    pk, sk = paillier.generate_keypair(1024)
    return pk, sk, None


def data(n: int = 90, widths: tuple[int, ...] = (3, 2, 2), seed: int = 0) -> tuple[list[Any], Any]:
    rng = np.random.default_rng(seed)
    blocks = [rng.normal(size=(n, w)) for w in widths]
    coef = rng.normal(size=sum(widths))
    y = np.hstack(blocks) @ coef + 0.5 + 0.1 * rng.normal(size=n)
    return blocks, y


def run_roles(blocks: list[Any], y: Any, plan: Plan, keys: Any,
              keep_payloads: bool = False) -> Any:
    names = ["A"] if len(blocks) == 2 else [f"A{i + 1}" for i in range(len(blocks) - 1)]
    roles: dict[str, Any] = {
        "C": partial(coordinator, active="B", passive=names, plan=plan, keys=keys),
        "B": partial(active, X=blocks[-1], y=y, passive=names, plan=plan),
    }
    for name, x in zip(names, blocks[:-1], strict=True):
        roles[name] = partial(passive, X=x, plan=plan)
    return run_local(roles, timeout=120, keep_payloads=keep_payloads, blas_threads=None), names


# ----------------------------------------------------------------------------- maths


@pytest.mark.parametrize("objective", [maths.LINEAR, maths.LOGISTIC])
def test_fixed_point_reference_tracks_float_gradient_descent(objective: maths.Objective) -> None:
    blocks, y = data(120)
    if objective is maths.LOGISTIC:
        y = np.where(y > np.median(y), 1.0, -1.0)
    kw = dict(objective=objective, lam=0.05, learning_rate=0.1, epochs=8, batch_size=50, seed=3)
    exact, loss_exact = maths.centralised_gd(blocks, y, **kw)
    fixed, loss_fixed = maths.fixed_point_gd(blocks, y, precision=maths.Precision(), **kw)
    # features rounded to 2^-16 (error <= 7.6e-6 each): iterates agree to ~1e-5
    for a, b in zip(exact, fixed, strict=True):
        np.testing.assert_allclose(a, b, atol=5e-5)
    np.testing.assert_allclose(loss_exact, loss_fixed, rtol=1e-4)
    # and a finer grid brings them closer
    finer, _ = maths.fixed_point_gd(blocks, y, precision=maths.Precision(22, 32), **kw)
    for a, b in zip(exact, finer, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_taylor_loss_is_the_logistic_loss_to_second_order() -> None:
    z = np.linspace(-0.3, 0.3, 13)
    for y in (-1.0, 1.0):
        taylor = maths.LOGISTIC.c0 + maths.LOGISTIC.c2 * (z - 2 * y) ** 2
        np.testing.assert_allclose(taylor, np.log1p(np.exp(-y * z)), atol=3e-4)


def test_batch_plan_covers_every_row_once_per_epoch() -> None:
    batches = maths.batch_plan(101, 25, epoch=2, seed=7)
    assert [b.size for b in batches] == [25, 25, 25, 25, 1]
    assert sorted(np.concatenate(batches).tolist()) == list(range(101))
    assert not np.array_equal(np.concatenate(batches),
                              np.concatenate(maths.batch_plan(101, 25, epoch=3, seed=7)))


# ----------------------------------------------------------------------- Paillier ops


def test_precision_refuses_settings_that_would_overflow() -> None:
    with pytest.raises(ValidationError, match="score_bits"):
        maths.Precision(16, 34)
    with pytest.raises(ValidationError, match="overflow int64"):
        maths.encode([1.0], 40, 2.0**30, "v", "t")


def test_weighted_products_equal_the_integer_dot_products() -> None:
    pk, sk, hs = djn_keys()
    rng = np.random.default_rng(1)
    m = [int(v) for v in rng.integers(-2**40, 2**40, size=70)]
    cts = paillier.encrypt(pk, [v % pk.n for v in m], pool=paillier.RandomnessPool(pk, djn_base=hs))
    w = rng.integers(-2**20, 2**20, size=(70, 4)).astype(np.int64)
    w[:, 1] = 0
    w[:, 2] = np.abs(w[:, 2])
    w[5, 3] = -(2**62)
    w[:, 0] = -np.abs(w[:, 0])  # an all-negative column
    want = [sum(a * int(b) for a, b in zip(m, col, strict=True)) for col in w.T]
    assert decrypt_signed(sk, weighted_products(pk, cts, w)) == want
    big = np.repeat(w, 20, axis=1)  # enough entries for the process pool
    got = decrypt_signed(sk, weighted_products(pk, cts, big, workers=2))
    assert got == [want[j // 20] for j in range(big.shape[1])]
    one = np.asarray([[2**63 - 1, -(2**63), 0]], dtype=np.int64)  # a single row
    (single,) = paillier.encrypt(pk, [m[0] % pk.n])
    assert decrypt_signed(sk, weighted_products(pk, [single], one)) == [
        m[0] * (2**63 - 1), -m[0] * 2**63, 0]


def test_decrypt_many_over_workers_equals_decrypt() -> None:
    pk, sk, hs = djn_keys()
    values = [(v * 7919) % pk.n for v in range(150)]
    cts = paillier.encrypt(pk, values, pool=paillier.RandomnessPool(pk, djn_base=hs))
    assert decrypt_many(sk, cts, workers=2) == values == decrypt_many(sk, cts, workers=1)


# -------------------------------------------------------------------------- protocol


@pytest.mark.parametrize(("objective", "keys", "widths"), [
    ("linear", djn_keys, (3, 2)),
    ("logistic", djn_keys, (2, 3, 2)),
    ("linear", plain_keys, (2, 2, 1, 2)),
])
def test_every_iterate_equals_centralised_gradient_descent(objective: str, keys: Any,
                                                           widths: tuple[int, ...]) -> None:
    blocks, y = data(70, widths, seed=len(widths))
    if objective == "logistic":
        y = np.where(y > 0, 1.0, -1.0)
    for epochs in (1, 3):  # the iterate after 1 and after 3 epochs (every batch in between)
        plan = make_plan(objective, learning_rate=0.2, lam=0.1, epochs=epochs, batch_size=30,
                         seed=5)
        run, names = run_roles(blocks, y, plan, keys())
        kw = dict(objective=plan.loss, lam=plan.lam, learning_rate=plan.learning_rate,
                  epochs=epochs, batch_size=plan.batch_size, seed=plan.seed)
        fixed, losses = maths.fixed_point_gd(blocks, y, precision=plan.precision, **kw)
        exact, _ = maths.centralised_gd(blocks, y, **kw)
        got = [run.results[n].theta for n in [*names, "B"]]
        for g, f, e in zip(got, fixed, exact, strict=True):
            np.testing.assert_allclose(g, f, rtol=0, atol=1e-12)  # same arithmetic
            np.testing.assert_allclose(g, e, rtol=0, atol=5e-5)  # float GD, 2^-16 features
        np.testing.assert_allclose(run.results["C"].batch_losses, losses, rtol=1e-12)
        assert len(run.results["C"].batch_losses) == 3 * epochs


def test_the_coordinator_never_decrypts_an_unmasked_gradient() -> None:
    pk, sk, hs = djn_keys()
    blocks, y = data(40, (2, 2))
    plan = make_plan("linear", learning_rate=0.1, epochs=2, batch_size=20, seed=1)
    run, _ = run_roles(blocks, y, plan, (pk, sk, hs), keep_payloads=True)
    to_c = run.transcript.received_by("C")
    assert {r.tag for r in to_c} == {"hello", "gradient", "loss"}
    # the true integer gradient sums of every batch, from the protocol's own arithmetic
    xs = [maths.encode(b, 16, maths.MAX_ABS_FEATURE, "X", "t") for b in blocks]
    xs[-1] = np.hstack([xs[-1], np.full((40, 1), 1 << 16, np.int64)])
    thetas = [np.zeros(x.shape[1]) for x in xs]
    true_sums = set()
    for epoch in range(2):
        for rows in maths.batch_plan(40, 20, epoch, 1):
            scores = [(x[rows] / 2.0**16) @ t for x, t in zip(xs, thetas, strict=True)]
            e = (maths.encode(scores[0], 32, 2**28, "u", "t").astype(object)
                 + maths.encode(scores[1] - y[rows], 32, 2**30, "v", "t"))
            for x in xs:
                true_sums.update(int(v) for v in x[rows].astype(object).T @ e)
            grads, _ = maths.fixed_point_step([x[rows] for x in xs], thetas, y[rows], 0.0,
                                              plan.loss, plan.precision)
            thetas = [t - 0.1 * g for t, g in zip(thetas, grads, strict=True)]
    width = 2 * ((pk.n.bit_length() + 7) // 8)
    seen = []
    for record in to_c:
        if record.tag == "gradient":
            blob = record.payload
            cts = paillier.ciphertexts_from_bytes(pk, blob[paillier.FINGERPRINT_BYTES:])
            assert len(blob) == paillier.FINGERPRINT_BYTES + width * len(cts)
            seen.extend(decrypt_signed(sk, cts))
    assert len(seen) == 2 * 2 * (2 + 3)
    assert not true_sums & set(seen)
    assert len(set(seen)) == len(seen)  # a fresh pad for every value, batch and party
    # one-time pads modulo n: every value C reads is uniform, so none is small
    assert min(abs(v) for v in seen) > 2 ** 900
    # ... while the unmasked sums are small integers
    assert max(abs(v) for v in true_sums) < 2**80


def test_b_re_randomises_the_residual_and_only_c_sees_the_loss() -> None:
    pk, sk, hs = djn_keys()
    blocks, y = data(30, (2, 2))
    plan = make_plan("linear", learning_rate=0.1, epochs=1, batch_size=30, seed=1)
    run, _ = run_roles(blocks, y, plan, (pk, sk, hs), keep_payloads=True)
    (sent_u,) = [r.payload for r in run.transcript.with_tag("u")]
    (residual,) = [r.payload for r in run.transcript.with_tag("residual")]
    n2 = pk.n**2
    u = paillier.ciphertexts_from_bytes(pk, sent_u[paillier.FINGERPRINT_BYTES:])
    e = paillier.ciphertexts_from_bytes(pk, residual[paillier.FINGERPRINT_BYTES:])
    # without fresh randomness, e/u would be (1 + n)^v = 1 + n·v mod n², revealing v
    assert all(int(ei * pow(int(ui), -1, n2) % n2) % pk.n != 1 for ui, ei in zip(u, e, strict=True))
    statuses = [r.payload for r in run.transcript.with_tag("status")]
    assert statuses and all(set(vars(s)) == {"epoch", "go_on"} for s in statuses)


def test_the_cleartext_baseline_runs_the_same_arithmetic() -> None:
    blocks, y = data(50, (2, 3))
    plan = make_plan("logistic", learning_rate=0.2, epochs=2, batch_size=20, seed=2,
                he="none")
    y = np.where(y > 0, 1.0, -1.0)
    run, _ = run_roles(blocks, y, plan, None)
    fixed, losses = maths.fixed_point_gd(blocks, y, objective=plan.loss, lam=0.0,
                                         learning_rate=0.2, epochs=2, batch_size=20, seed=2,
                                         precision=plan.precision)
    np.testing.assert_allclose(run.results["B"].theta, fixed[1], atol=1e-12)
    np.testing.assert_allclose(run.results["C"].batch_losses, losses, rtol=1e-12)


def test_party_names_must_be_distinct() -> None:
    blocks, y = data(20, (2, 2))
    plan = make_plan("linear", epochs=1)
    roles = {"C": partial(coordinator, active="B", passive=["B"], plan=plan, keys=djn_keys()),
             "B": partial(active, X=blocks[1], y=y, passive=["B"], plan=plan)}
    with pytest.raises(ValidationError, match="must be distinct"):
        run_local(roles, timeout=10)


def test_parties_refuse_a_plan_that_differs_from_the_coordinators() -> None:
    blocks, y = data(30, (2, 2))
    plan = make_plan("linear", epochs=1, batch_size=30)
    other = make_plan("linear", epochs=1, batch_size=30, learning_rate=0.5)
    roles = {"C": partial(coordinator, plan=plan, keys=djn_keys()),
             "A": partial(passive, X=blocks[0], plan=other),
             "B": partial(active, X=blocks[1], y=y, plan=plan)}
    with pytest.raises(ValidationError, match=r"party 'A'.*plan differs.*learning_rate"):
        run_local(roles, timeout=30)


def test_unequal_rows_are_refused_by_the_coordinator() -> None:
    blocks, y = data(30, (2, 2))
    plan = make_plan("linear", epochs=1)
    roles = {"C": partial(coordinator, plan=plan, keys=djn_keys()),
             "A": partial(passive, X=blocks[0][:29], plan=plan),
             "B": partial(active, X=blocks[1], y=y, plan=plan)}
    with pytest.raises(ValidationError, match="different numbers of aligned rows"):
        run_local(roles, timeout=30)


# ------------------------------------------------------------------------ estimators


def test_linear_estimator_recovers_the_coefficients_and_predicts_by_table_2() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 5))
    y = X @ [1.0, -2.0, 0.5, 3.0, 0.0] + 1.0
    model = VerticalLinearRegression(epochs=80, learning_rate=0.1, key_bits=1024,
                                     insecure_keys=True, tol=None, random_state=0,
                                     he="paillier").fit(X[:, :2], X[:, 2:], y)
    np.testing.assert_allclose(model.coef_a_, [1.0, -2.0], atol=1e-3)
    np.testing.assert_allclose(model.coef_b_, [0.5, 3.0, 0.0], atol=1e-3)
    assert model.intercept_ == pytest.approx(1.0, abs=1e-3)
    assert model.loss_history_[-1] < 1e-5 and len(model.loss_history_) == 80
    pred = model.predict(X[:, :2], X[:, 2:])
    np.testing.assert_allclose(pred, X[:, :2] @ model.coef_a_ + X[:, 2:] @ model.coef_b_
                               + model.intercept_, atol=1e-12)
    assert {r.tag for r in model.inference_transcript_} == {"query", "partial"}
    assert set(model.timing_) == {"A", "B", "C"} and model.timing_["A"].he > 0


def test_tol_stops_training_once_the_loss_settles() -> None:
    blocks, y = data(60, (2, 2))
    model = VerticalLinearRegression(epochs=200, learning_rate=0.1, key_bits=1024,
                                     insecure_keys=True, tol=1e-3, random_state=0,
                                     ).fit(blocks[0], blocks[1], y)
    assert model.converged_ and model.n_epochs_ < 200 == model.epochs
    assert len(model.loss_history_) == model.n_epochs_


def test_logistic_estimator_maps_any_two_labels() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 4))
    labels = np.where(X @ [2.0, -1.0, 1.0, 0.5] > 0, "spam", "ham")
    model = VerticalLogisticRegression(key_bits=1024, insecure_keys=True, epochs=15, random_state=0)
    model.fit(X[:, :2], X[:, 2:], labels)
    assert model.classes_.tolist() == ["ham", "spam"]
    pred = model.predict(X[:, :2], X[:, 2:])
    assert set(pred) <= {"ham", "spam"} and np.mean(pred == labels) > 0.9
    proba = model.predict_proba(X[:, :2], X[:, 2:])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    z = model.decision_function(X[:, :2], X[:, 2:])
    assert np.array_equal(pred == "spam", z > 0) and np.array_equal(proba[:, 1] > 0.5, z > 0)


def test_several_passive_parties_and_alignment_by_psi() -> None:
    blocks, y = data(60, (2, 1, 2), seed=4)
    ids = [f"person-{i:03d}" for i in range(60)]
    rng = np.random.default_rng(9)
    kw = dict(epochs=3, learning_rate=0.1, key_bits=1024, insecure_keys=True, tol=None,
              random_state=3)
    reference = VerticalLinearRegression(**kw).fit(blocks[:2], blocks[2], y)
    # every party holds its rows in its own order, plus people the others lack; B's
    # labels follow B's rows
    joined = [blocks[0], blocks[1], np.column_stack([blocks[2], y])]
    shuffled, id_lists = [], []
    for i, x in enumerate(joined):
        order = rng.permutation(65)
        shuffled.append(np.vstack([x, rng.normal(size=(5, x.shape[1]))])[order])
        id_lists.append([[*ids, *(f"only-{i}-{j}" for j in range(5))][k] for k in order])
    x_b, y_b = shuffled[2][:, :-1], shuffled[2][:, -1]
    model = VerticalLinearRegression(**kw).fit(shuffled[:2], x_b, y_b,
                                               ids_a=id_lists[:2], ids_b=id_lists[2])
    assert model.ids_ == ids  # sorted common IDs
    for a, b in zip(model.coef_a_, reference.coef_a_, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-12)
    np.testing.assert_allclose(model.coef_b_, reference.coef_b_, atol=1e-12)


def test_inference_by_ids() -> None:
    rng = np.random.default_rng(5)
    xa, xb = rng.normal(size=(6, 2)), rng.normal(size=(6, 3))
    ta, tb = rng.normal(size=2), rng.normal(size=4)
    ids_a = list("abcdef")
    ids_b = list("fedcba")
    xb_rev = xb[::-1]
    run = run_local({
        "C": partial(inference_coordinator, query=["b", "e"], parties=["A", "B"]),
        "A": partial(inference_party, X=xa, theta=ta, ids=ids_a),
        "B": partial(inference_party, X=xb_rev, theta=tb, ids=ids_b, intercept=True),
    })
    want = [xa[i] @ ta + xb[i] @ tb[:-1] + tb[-1] for i in (1, 4)]
    np.testing.assert_allclose(run.results["C"], want)
    with pytest.raises(ValidationError, match="no row for the IDs"):
        run_local({"C": partial(inference_coordinator, query=["zz"], parties=["A"]),
                   "A": partial(inference_party, X=xa, theta=ta, ids=ids_a)})


@pytest.mark.parametrize(("call", "message"), [
    (lambda m: m.fit(np.ones((5, 2)), np.ones((4, 2)), np.ones(4)), "X_a has 5 rows but X_b"),
    (lambda m: m.fit(np.ones((4, 2)), np.ones((4, 2)), np.ones(3)), "y must be 1-D"),
    (lambda m: m.fit(np.full((4, 2), np.nan), np.ones((4, 2)), np.ones(4)), "'X_a'.*finite"),
    (lambda m: m.fit(np.ones(4), np.ones((4, 2)), np.ones(4)), "'X_a'.*2-D"),
    (lambda m: m.fit(np.full((4, 2), 2.0**31), np.ones((4, 2)), np.ones(4)), "standardise"),
    (lambda m: m.fit(np.ones((4, 2)), np.ones((4, 2)), np.ones(4), ids_a=[1, 2, 3, 4]),
     "both ids_a and ids_b"),
    (lambda m: m.set_params(learning_rate=-1).fit(np.ones((4, 2)), np.ones((4, 2)),
                                                   np.ones(4)), "learning_rate"),
    (lambda m: m.set_params(batch_size=0).fit(np.ones((4, 2)), np.ones((4, 2)), np.ones(4)),
     "batch_size"),
])
def test_bad_input_is_refused_before_any_message(call: Any, message: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import islands.vfl.estimator as est

    runs: list[Any] = []
    monkeypatch.setattr(est, "run_local", lambda *a, **k: runs.append(a))
    model = VerticalLinearRegression(key_bits=1024, insecure_keys=True)
    with pytest.raises(ValidationError, match=message):
        call(model)
    assert not runs


def test_logistic_needs_two_classes() -> None:
    with pytest.raises(ValidationError, match="exactly two classes"):
        VerticalLogisticRegression(key_bits=1024, insecure_keys=True).fit(
            np.ones((4, 1)), np.ones((4, 1)), [1, 1, 1, 1])
    with pytest.raises(RuntimeError, match="not fitted"):
        VerticalLogisticRegression().predict(np.ones((2, 1)), np.ones((2, 1)))


def test_breast_cancer_auc_is_within_001_of_scikit_learn() -> None:
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    x_tr, x_te = scaler.transform(x_tr), scaler.transform(x_te)
    ref = roc_auc_score(y_te, LogisticRegression(max_iter=1000).fit(x_tr, y_tr)
                        .decision_function(x_te))
    model = VerticalLogisticRegression(key_bits=1024, insecure_keys=True, random_state=0)
    model.fit(x_tr[:, 10:], x_tr[:, :10], y_tr)
    auc = roc_auc_score(y_te, model.decision_function(x_te[:, 10:], x_te[:, :10]))
    assert auc >= ref - 0.01


# ----------------------------------------------------------------------------- PSI size limit


def _unbalanced(big: int, n_passive: int = 1) -> tuple[Any, Any, Any, Any, Any]:
    """Party ``big`` (0, 1: a passive party; -1: B) holds 2,000 IDs, the others 100.

    The 100 shared people are every 20th of the big party's 2,000: a peer that enters
    20 times the other's set (as guesses would be) with every real ID among them.
    """
    rng = np.random.default_rng(11)
    shared = [f"p{i:05d}" for i in range(0, 2000, 20)]
    sizes = [100] * (n_passive + 1)
    sizes[big] = 2000
    lists = [[f"p{i:05d}" for i in range(2000)] if s == 2000 else list(shared) for s in sizes]
    blocks = [rng.normal(size=(s, 2)) for s in sizes]
    y = rng.normal(size=sizes[-1])
    return (blocks[:-1] if n_passive > 1 else blocks[0]), blocks[-1], y, \
        (lists[:-1] if n_passive > 1 else lists[0]), lists[-1]


@pytest.mark.parametrize(("big", "n_passive", "refuser", "peer"), [
    (0, 1, "B", "A"),    # a passive party enters 20x B's set
    (1, 2, "B", "A2"),   # the second of two passive parties does
    (-1, 1, "A", "B"),   # B enters 20x the passive party's set
])
def test_psi_refuses_a_party_with_20x_the_others_ids(big: int, n_passive: int, refuser: str,
                                                      peer: str) -> None:
    x_a, x_b, y, ids_a, ids_b = _unbalanced(big, n_passive)
    model = VerticalLinearRegression(key_bits=1024, insecure_keys=True, epochs=1, batch_size=50,
                                     tol=None)
    with pytest.raises(ProtocolError) as info:
        model.fit(x_a, x_b, y, ids_a=ids_a, ids_b=ids_b)
    message = str(info.value)
    # the real parties, not PSI's internal 'a' and 'b', and the limit: 10 x 100 IDs
    assert f"PSI party {refuser!r} refuses party {peer!r}" in message
    assert "announced 2000 IDs" in message and "max_peer_size = 1000" in message
    assert "'a'" not in message and "'b'" not in message
    assert info.value.party == refuser


@pytest.mark.parametrize("limit", [{"max_peer_ratio": 20}, {"max_peer_size": 2000},
                                   {"max_peer_ratio": None}])
def test_psi_accepts_the_large_party_once_the_limit_is_raised(limit: dict[str, Any]) -> None:
    x_a, x_b, y, ids_a, ids_b = _unbalanced(0)
    model = VerticalLinearRegression(key_bits=1024, insecure_keys=True, epochs=1, batch_size=50,
                                     tol=None, **limit)
    assert model.get_params() | limit == model.get_params()
    model.fit(x_a, x_b, y, ids_a=ids_a, ids_b=ids_b)
    assert model.ids_ == ids_b and np.shape(model.coef_a_) == (2,)


@pytest.mark.parametrize(("key", "value"), [
    ("max_peer_size", 0), ("max_peer_size", -5), ("max_peer_size", "1000"),
    ("max_peer_size", 2.5), ("max_peer_size", True), ("max_peer_ratio", 0),
    ("max_peer_ratio", -1.0), ("max_peer_ratio", "10"), ("max_peer_ratio", float("inf")),
    ("max_peer_ratio", float("nan")),
])
@pytest.mark.parametrize("ids", [False, True])
def test_bad_psi_limits_are_refused_before_any_message(key: str, value: Any, ids: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import islands.vfl.estimator as est

    runs: list[Any] = []
    monkeypatch.setattr(est, "run_local", lambda *a, **k: runs.append(a))
    model = VerticalLogisticRegression(key_bits=1024, insecure_keys=True).set_params(**{key: value})
    ids_kw = {"ids_a": [1, 2, 3, 4], "ids_b": [1, 2, 3, 4]} if ids else {}
    with pytest.raises(ValidationError,
                       match=f"The '{key}' parameter of VerticalLogisticRegression must be"):
        model.fit(np.ones((4, 1)), np.ones((4, 1)), [0, 1, 0, 1], **ids_kw)
    assert not runs


# ------------------------------------------------- one alignment path (issue 23)

_PSI_TAGS = {"turn", "blinded", "double", "matches", "keep", "aligned"}


def _recorded(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Let every in-process run through (the estimator's and PSI's), keeping its result."""
    import islands.runtime
    import islands.vfl.estimator as est

    runs: list[Any] = []

    def record(roles: dict[str, Any], **kw: Any) -> Any:
        runs.append(run_local(roles, **kw))
        return runs[-1]

    monkeypatch.setattr(est, "run_local", record)
    monkeypatch.setattr(islands.runtime, "run_local", record)
    return runs


def test_fit_with_ids_aligns_and_trains_in_one_run_of_the_federation_roles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """PSI, then training, as the deployed federation's roles, with no inference stage."""
    blocks, y = data(40, (2, 2, 3), seed=6)
    ids = [f"id-{i:02d}" for i in range(40)]
    kw = dict(epochs=2, learning_rate=0.1, key_bits=1024, insecure_keys=True, tol=None,
              random_state=1)
    runs = _recorded(monkeypatch)
    # A₂ lacks the first 5 people, A₁ holds 3 that B lacks; B's rows are reversed
    model = VerticalLinearRegression(**kw).fit(
        [np.vstack([blocks[0], np.ones((3, 2))]), blocks[1][5:]], blocks[2][::-1], y[::-1],
        ids_a=[[*ids, "x", "y", "z"], ids[5:]], ids_b=ids[::-1])
    (run,) = runs
    assert model.transcript_ is run.transcript
    tags = [r.tag for r in model.transcript_]
    assert set(tags) >= _PSI_TAGS and not {"predict", "query", "partial", "scores"} & set(tags)
    assert max(i for i, t in enumerate(tags) if t in _PSI_TAGS) < tags.index("setup")
    assert model.ids_ == ids[5:] and run.results["A1"].ids == run.results["A2"].ids == ids[5:]
    assert len(model.epoch_seconds_) == model.n_epochs_ == 2
    # the same model as the rows aligned by hand
    kept = slice(5, None)
    aligned = VerticalLinearRegression(**kw).fit([blocks[0][kept], blocks[1][kept]],
                                                 blocks[2][kept], y[kept])
    for a, b in zip(model.coef_a_, aligned.coef_a_, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(model.coef_b_, aligned.coef_b_)
    assert model.loss_history_ == aligned.loss_history_ and aligned.ids_ is None


def test_ids_that_differ_only_in_unicode_form_align() -> None:
    """A writes 'café' decomposed (NFD), B composed: PSI's NFC matches them (a KeyError before)."""
    blocks, y = data(12, (2, 2), seed=8)
    names = [f"caf\u00e9-{i}" for i in range(12)]
    decomposed = [n.replace("\u00e9", "e\u0301") for n in names]
    kw = dict(epochs=1, batch_size=6, key_bits=1024, insecure_keys=True, tol=None, random_state=2)
    model = VerticalLinearRegression(**kw).fit(blocks[0], blocks[1], y, ids_a=decomposed,
                                               ids_b=names)
    assert model.ids_ == sorted(names)  # B's own spelling, in PSI's order
    order = [names.index(v) for v in model.ids_]
    again = VerticalLinearRegression(**kw).fit(blocks[0][order], blocks[1][order], y[order])
    assert np.array_equal(model.coef_a_, again.coef_a_)


def test_numpy_ids_come_back_as_python_values() -> None:
    blocks, y = data(12, (2, 2), seed=9)
    model = VerticalLinearRegression(epochs=1, batch_size=6, key_bits=1024, insecure_keys=True).fit(
        blocks[0], blocks[1], y, ids_a=np.arange(12), ids_b=np.arange(12)[::-1].copy())
    assert model.ids_ == list(range(12)) and all(type(v) is int for v in model.ids_)


@pytest.mark.parametrize(("ids_a", "ids_b", "message"), [
    ([list(range(6)), list(range(6, 12))], list(range(12)),
     r"party 'B'.*the parties share no ID across all of them"),
    ([list(range(3)), list(range(3))], list(range(3)),
     r"party 'B'.*the 3 aligned rows make a single batch.*more than 3 rows"),
])
def test_what_alignment_leaves_is_refused_before_training(ids_a: Any, ids_b: Any,
                                                          message: str) -> None:
    rng = np.random.default_rng(0)
    x_a = [rng.normal(size=(len(ids), 1)) for ids in ids_a]
    x_b, y = rng.normal(size=(len(ids_b), 2)), rng.normal(size=len(ids_b))
    model = VerticalLinearRegression(key_bits=1024, insecure_keys=True, batch_size=8)
    with pytest.raises(ValidationError, match=message) as info:
        model.fit(x_a, x_b, y, ids_a=ids_a, ids_b=ids_b)
    assert not hasattr(model, "coef_b_")
    assert getattr(info.value, "party", None) == "B"


@pytest.mark.parametrize(("ids_a", "message"), [
    ([list(range(4)), [0, 1, 2, 0]], r"'ids_a\[1\]' parameter of VerticalLinearRegression "
                                    r"repeats the ID 0"),
    ([list(range(4)), list("abcd")], r"ids_a\[1\] holds str IDs but ids_b holds int IDs"),
    ([list(range(4))], r"one ID list per passive party \(2\); got 1"),
])
def test_bad_ids_of_any_passive_party_are_refused_before_any_message(
        ids_a: Any, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, PSI with A₁ ran before A₂'s IDs were checked."""
    runs = _recorded(monkeypatch)
    model = VerticalLinearRegression(key_bits=1024, insecure_keys=True)
    with pytest.raises(ValidationError, match=message):
        model.fit([np.ones((4, 1)), np.ones((4, 1))], np.ones((4, 1)), np.arange(4.0),
                  ids_a=ids_a, ids_b=list(range(4)))
    assert not runs


def test_the_active_party_refuses_a_query_without_the_inference_stage() -> None:
    from islands.vfl.federation import PsiSettings, active_party

    role = partial(active_party, X=np.ones((4, 1)), y=np.ones(4), ids=list(range(4)),
                   coordinator="C", passive=["A"], plan=make_plan("linear"),
                   psi=PsiSettings(inference=False), query=[1])
    with pytest.raises(ValidationError, match="IDs to predict need the inference stage"):
        run_local({"B": role}, timeout=5)
