"""Issue 22, findings 9 and 12: what a deviating or curious data party of vertical regression
can read, played against the real roles.

After removing its pad, a passive party A holds X_Aᵀe for every mini-batch, with
e = u_A + u_B − c·y; B holds X_Bᵀe and Σe, i.e. X_Bᵀu_A up to terms it knows. A batch of
no more rows than the equations a party gets lets it solve for the batch's e (A: the labels,
since e = −c·y while every weight is zero) or for u_A (B). These tests play those solves.
"""

from __future__ import annotations

from functools import cache, partial
from typing import Any

import numpy as np
import pytest

pytest.importorskip("phe")
pytest.importorskip("gmpy2")

from islands.crypto import paillier
from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local
from islands.vfl import VerticalLogisticRegression, maths
from islands.vfl.config import VflConfig
from islands.vfl.protocol import Hello, Plan, Setup, active, coordinator, passive


def make_plan(objective: str, **settings: Any) -> Plan:
    """A resolved plan from VflConfig; protocol tests run every epoch (tol=None) unless told."""
    settings = {"tol": None, "key_bits": 1024, "insecure_keys": True, "he": "paillier",
                **settings}
    return VflConfig.build(None, objective=objective, **settings).plan()


@cache
def keys() -> tuple[Any, Any, int]:
    return paillier.generate_djn_keypair(1024)


@cache
def breast_cancer() -> tuple[Any, Any, Any]:
    """Standardised breast cancer: B holds columns 0–9 and the labels (±1), A columns 10–29."""
    datasets = pytest.importorskip("sklearn.datasets")
    X, y = datasets.load_breast_cancer(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X[:, 10:], X[:, :10], np.where(y == 1, 1.0, -1.0)


def capture_gradient_sums(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, Any, Any, int]]:
    """Record (intercept, G, θ, b) every time a data party turns its unmasked sums into a step.

    G = Σ_i ẽ_i·x̃_ij is what the party holds after removing its pad: exactly what a
    curious party keeps.
    """
    seen: list[tuple[bool, Any, Any, int]] = []
    real = maths.gradient_from_sum

    def spy(g_sum: Any, theta: Any, lam: float, batch: int, objective: Any, precision: Any,
            intercept: bool = False) -> Any:
        seen.append((intercept, np.asarray([float(v) for v in g_sum]), np.array(theta), batch))
        return real(g_sum, theta, lam, batch, objective, precision, intercept)

    monkeypatch.setattr(maths, "gradient_from_sum", spy)
    return seen


def solve_residual(x_a: Any, g: Any, precision: maths.Precision) -> tuple[Any, int]:
    """A's least-squares solve of X̃_Aᵀẽ = G for the batch residual e; returns (e, rank)."""
    xt = maths.encode_features(x_a, precision, intercept=False).astype(np.float64).T
    e_scaled, _, rank, _ = np.linalg.lstsq(xt, g, rcond=None)
    return e_scaled / float(1 << precision.score_bits), int(rank)


# --------------------------------------------------- finding 9: the label solve of A


def test_a_reads_the_labels_of_a_batch_no_larger_than_its_features_so_it_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Breast cancer, A with 20 features, batch 16: the first batch's e is −2y, and A solves it."""
    x_a, x_b, y = breast_cancer()
    plan = make_plan("logistic", learning_rate=0.3, epochs=1, batch_size=16, seed=0)
    seen = capture_gradient_sums(monkeypatch)
    roles = {"C": partial(coordinator, plan=plan, keys=keys()),
             "A": partial(passive, X=x_a, plan=plan),
             "B": partial(active, X=x_b, y=y, plan=plan)}
    try:
        run_local(roles, timeout=300)
    except ValidationError as exc:
        text = str(exc)
        assert "'batch_size'" in text and "'A'" in text and "20 features" in text
        assert "21" in text  # the minimum
        assert not seen  # nobody reached a gradient
    else:  # the plan ran: play A's solve on what it held after the first batch
        (_, g, _, b), *_ = [s for s in seen if not s[0]]
        rows = maths.batch_plan(y.size, 16, 0, plan.seed)[0]
        e, rank = solve_residual(x_a[rows], g, plan.precision)
        read = np.mean(np.sign(-e) == y[rows])
        pytest.fail(f"a batch of {b} rows ran; A solved X_Aᵀe (rank {rank}) and read "
                    f"{read:.0%} of the first batch's labels")


def test_the_estimator_refuses_such_a_batch_before_any_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import islands.vfl.estimator as est

    x_a, x_b, y = breast_cancer()
    runs: list[Any] = []
    monkeypatch.setattr(est, "run_local", lambda *a, **k: runs.append(a))
    model = VerticalLogisticRegression(batch_size=16, key_bits=1024, insecure_keys=True)
    with pytest.raises(ValidationError, match=r"'batch_size'.*>= 21.*'A' holds 20 features"):
        model.fit(x_a, x_b, y)
    # the other way round: B's 10 features and intercept, 11 equations for u_A
    with pytest.raises(ValidationError,
                       match=r"'batch_size'.*>= 12.*'B' holds 10 features and the intercept"):
        model.set_params(batch_size=11).fit(x_a[:, :3], x_b, y)
    assert not runs


def _fake_coordinator(party: Any, features: dict[str, int], plan: Plan,
                      parties: tuple[str, ...] = ("A", "B")) -> None:
    """A coordinator that tells the parties other feature counts than it was told."""
    for name in parties:
        party.recv(name, "hello")
    pk, _, hs = keys()
    setup = Setup(paillier.public_key_to_bytes(pk), hs, plan.text(), features)
    party.broadcast("setup", setup, to=list(parties))
    for name in parties:
        party.recv(name, "gradient")


def _silent(party: Any, frm: str, tag: str) -> None:
    party.send("C", "hello", Hello(60, 20))
    party.recv(frm, tag)


def test_a_passive_party_refuses_a_plan_that_lets_b_solve_its_scores() -> None:
    """A deviating B (with C relaying) runs batch 8 against B's 10 features: A refuses."""
    x_a, _, _ = breast_cancer()
    plan = make_plan("logistic", learning_rate=0.05, epochs=1, batch_size=8)
    roles = {"C": partial(_fake_coordinator, features={"A": 3, "B": 10}, plan=plan),
             "B": partial(_silent, frm="A", tag="u"),
             "A": partial(passive, X=x_a[:60, :3], plan=plan)}
    with pytest.raises(ValidationError,
                       match=r"'batch_size'.*party 'A'.*>= 12.*party 'B' holds 10 features"):
        run_local(roles, timeout=30)


def test_the_active_party_refuses_a_plan_that_lets_a_solve_the_labels() -> None:
    """A deviating A declares 20 features; B, configured for batch 16, refuses to start."""
    _, x_b, y = breast_cancer()
    plan = make_plan("logistic", learning_rate=0.05, epochs=1, batch_size=16)
    roles = {"C": partial(_fake_coordinator, features={"A": 20, "B": 10}, plan=plan),
             "A": partial(_silent, frm="B", tag="residual"),
             "B": partial(active, X=x_b[:60], y=y[:60], plan=plan)}
    with pytest.raises(ValidationError,
                       match=r"'batch_size'.*party 'B'.*>= 21.*party 'A' holds 20 features"):
        run_local(roles, timeout=30)


def test_a_coordinator_that_misstates_a_partys_own_feature_count_is_named() -> None:
    x_a, _, _ = breast_cancer()
    plan = make_plan("logistic", learning_rate=0.05, epochs=1, batch_size=32)
    roles = {"C": partial(_fake_coordinator, features={"A": 2, "B": 10}, plan=plan),
             "B": partial(_silent, frm="A", tag="u"),
             "A": partial(passive, X=x_a[:60, :5], plan=plan)}
    with pytest.raises(ProtocolError, match=r"coordinator 'C'.*features.*expected 5.*got 2"):
        run_local(roles, timeout=30)


# ------------------------------------------------- finding 9: the chosen last batch


def test_a_cannot_choose_a_tiny_last_batch_by_dropping_ids(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A drops 54 of its IDs so that 515 = 8·64 + 3 rows align: the last batch would hold 3
    rows, whose residuals A solves from its 20 equations. Folded, it holds 67 and the
    system is underdetermined."""
    x_a, x_b, y = breast_cancer()
    ids = [f"patient-{i:03d}" for i in range(y.size)]
    keep = np.sort(np.random.default_rng(1).permutation(y.size)[:515])
    seen = capture_gradient_sums(monkeypatch)
    model = VerticalLogisticRegression(batch_size=64, epochs=1, tol=None, key_bits=1024,
                                       insecure_keys=True, random_state=0)
    model.fit(x_a[keep], x_b, y, ids_a=[ids[i] for i in keep], ids_b=ids)
    assert model.ids_ is not None and len(model.ids_) == 515
    rows_of = {v: i for i, v in enumerate(ids)}
    aligned = np.asarray([rows_of[v] for v in model.ids_])
    xa, xb, ya = x_a[aligned], x_b[aligned], y[aligned]
    a_steps = [s for s in seen if not s[0]]
    b_steps = [s for s in seen if s[0]]
    sizes = [s[3] for s in a_steps]
    assert sum(sizes) == 515
    # the last batch: A's view (its sums, its weights) and the truth (B's weights, labels)
    _, g, theta_a, b = a_steps[-1]
    theta_b = b_steps[-1][2]
    rows = np.random.default_rng([model.plan_.seed, 0]).permutation(515)[-b:]
    e_true = xa[rows] @ theta_a + xb[rows] @ theta_b[:-1] + theta_b[-1] - 2 * ya[rows]
    e_hat, rank = solve_residual(xa[rows], g, model.plan_.precision)
    error = float(np.linalg.norm(e_hat - e_true) / np.linalg.norm(e_true))
    read = float(np.mean(np.sign(-(e_hat - xa[rows] @ theta_a)) == ya[rows]))
    assert b > 20, (f"A chose a last batch of {b} rows and solved its residual to a "
                    f"relative error of {error:.1e}, reading {read:.0%} of its labels")
    assert sizes == [64] * 7 + [67]
    assert rank == 20 < b  # more unknowns than equations: e is not determined
    assert error > 0.3  # the least-squares guess is far from the residual


def test_the_fold_is_one_rule_for_the_protocol_and_its_references() -> None:
    """A last batch below the minimum joins the one before, identically for every party."""
    sizes = [r.size for r in maths.batch_plan(515, 64, 0, 3, min_rows=21)]
    assert sizes == [64] * 7 + [67]
    assert [r.size for r in maths.batch_plan(515, 64, 0, 3, min_rows=3)] == [64] * 8 + [3]
    assert maths.min_batch_rows([20], 10) == 21 and maths.min_batch_rows([3, 4], 10) == 12
    # the centralised references fold the same way, so "lossless" still compares like with like
    x_a, x_b, y = breast_cancer()
    kw = dict(objective=maths.LOGISTIC, lam=0.0, learning_rate=0.3, epochs=1, batch_size=64,
              seed=3)
    _, losses = maths.centralised_gd([x_a[:515], x_b[:515]], y[:515], **kw)
    assert len(losses) == 8


# --------------------------------------------- finding 12: multi-party alignment


def test_a1_learns_which_of_its_ids_shared_with_b_a2_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/vfl.md: A₁ learns A₁ ∩ B from PSI and then the rows kept, (A₁ ∩ B) ∩ A₂."""
    import islands.vfl.estimator as est

    ids_b = [f"id-{i:02d}" for i in range(40)]
    ids_a1 = [*ids_b[:30], "a1-only-0", "a1-only-1"]
    ids_a2 = [*ids_b[10:40], "a2-only-0"]
    rng = np.random.default_rng(0)
    x_a1, x_a2 = rng.normal(size=(len(ids_a1), 2)), rng.normal(size=(len(ids_a2), 2))
    x_b, y = rng.normal(size=(40, 2)), rng.normal(size=40)
    runs: list[Any] = []

    def record(roles: dict[str, Any], **kw: Any) -> Any:
        runs.append(run_local(roles, **kw))
        return runs[-1]

    monkeypatch.setattr(est, "run_local", record)
    model = est.VerticalLinearRegression(key_bits=1024, insecure_keys=True, epochs=1)
    model.fit([x_a1, x_a2], x_b, y, ids_a=[ids_a1, ids_a2], ids_b=ids_b)
    (run,) = runs  # alignment and training in one run
    a1_with_b = set(ids_a1) & set(ids_b)  # A₁'s own PSI output
    kept = set(run.results["A1"].ids)  # the rows A₁ is told to train on
    assert kept == a1_with_b & set(ids_a2) == set(model.ids_)
    # so A₁ reads, for each of its 30 IDs shared with B, whether A₂ holds it
    assert a1_with_b - kept == {f"id-{i:02d}" for i in range(10)}
    assert not kept & {"a2-only-0"}  # but nothing of A₂'s IDs outside A₁ ∩ B


# -------------------------------------------------- the deployed federation's own messages
def _psi_then(send: Any) -> Any:
    """An active party B that runs PSI honestly, then sends what ``send`` makes."""
    from islands.psi.protocol import responder

    def role(party: Any) -> None:
        party.send("A", "turn", 0)
        pair = responder(party, peer="A", ids=[f"id{i}" for i in range(20)])
        send(party, len(pair.ids))

    return role


@pytest.mark.parametrize("keep", [
    np.array([3, 1], dtype=np.int64),      # not ascending
    np.array([0, 99], dtype=np.int64),     # past A's common IDs
    np.array([], dtype=np.int64),          # nothing to train on
    np.array([0.5, 1.0]),                  # not positions
])
def test_a_passive_party_refuses_a_malformed_keep_list(keep: np.ndarray) -> None:
    from islands.vfl.federation import PsiSettings, passive_party

    plan = VflConfig.build(objective="linear", epochs=1, batch_size=4).plan()
    roles = {
        "A": partial(passive_party, X=np.ones((20, 2)), ids=[f"id{i}" for i in range(20)],
                     coordinator="B", active="B", plan=plan, psi=PsiSettings()),
        "B": _psi_then(lambda party, n: party.send("A", "keep", keep)),
    }
    with pytest.raises(ProtocolError, match=r"party 'B' sent a malformed 'keep' list"):
        run_local(roles, timeout=30)


@pytest.mark.parametrize("aligned", [0, -3, "20", 2.5])
def test_the_coordinator_refuses_a_malformed_alignment_count(aligned: Any) -> None:
    from islands.vfl.federation import PsiSettings, coordinator_party

    plan = VflConfig.build(objective="linear", epochs=1, batch_size=4).plan()
    roles = {"C": partial(coordinator_party, active="B", passive=["A"], plan=plan,
                          psi=PsiSettings()),
             "B": lambda party: party.send("C", "aligned", aligned),
             "A": lambda party: None}
    with pytest.raises(ProtocolError, match=r"party 'B' sent a malformed 'aligned' count"):
        run_local(roles, timeout=30)
