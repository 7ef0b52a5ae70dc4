"""Vertical regression on secret shares (issue 41): exact iterates, what each party
receives, and the refusal of every malformed share, played against the real roles."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from islands.crypto.rns import SS_RING
from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local
from islands.vfl import VerticalLinearRegression, VerticalLogisticRegression, maths
from islands.vfl.config import VflConfig
from islands.vfl.protocol import Plan, active, coordinator, passive

DATA_TAGS = {"xhat", "m", "pair"}


def make_plan(objective: str, **settings: Any) -> Plan:
    settings = {"tol": None, **settings}
    return VflConfig.build(None, objective=objective, **settings).plan()


def data(n: int, widths: tuple[int, ...], seed: int = 0,
         logistic: bool = False) -> tuple[list[Any], Any]:
    rng = np.random.default_rng(seed)
    blocks = [rng.normal(size=(n, w)) for w in widths]
    z = sum(b @ rng.normal(size=b.shape[1]) for b in blocks)
    y = np.where(z > 0, 1.0, -1.0) if logistic else z + 0.1 * rng.normal(size=n)
    return blocks, y


def run_roles(blocks: list[Any], y: Any, plan: Plan, *, keep_payloads: bool = False,
              wrap: dict[str, Any] | None = None, timeout: float = 60) -> Any:
    names = ["A"] if len(blocks) == 2 else [f"A{i + 1}" for i in range(len(blocks) - 1)]
    roles: dict[str, Any] = {
        "C": partial(coordinator, active="B", passive=names, plan=plan),
        "B": partial(active, X=blocks[-1], y=y, passive=names, plan=plan)}
    for name, x in zip(names, blocks, strict=False):
        roles[name] = partial(passive, X=x, plan=plan)
    for name, wrapper in (wrap or {}).items():
        roles[name] = wrapper(roles[name])
    return run_local(roles, timeout=timeout, keep_payloads=keep_payloads), names


@pytest.mark.parametrize(("objective", "widths", "n", "batch"), [
    ("linear", (3, 4), 101, 25),          # the short last batch folds into the one before
    ("logistic", (5, 3), 90, 30),
    ("linear", (2, 3, 4), 77, 20),        # two passive parties: every pair exchanges
    ("logistic", (4, 2, 3, 3), 64, 16),   # three passive parties
])
def test_every_iterate_and_loss_equal_the_fixed_point_reference_bit_for_bit(
        objective: str, widths: tuple[int, ...], n: int, batch: int) -> None:
    blocks, y = data(n, widths, logistic=objective == "logistic")
    plan = make_plan(objective, learning_rate=0.2, lam=0.05, epochs=3, batch_size=batch,
                     seed=4)
    assert plan.engine == "ss"
    run, names = run_roles(blocks, y, plan)
    fixed, losses = maths.fixed_point_gd(
        blocks, y, objective=plan.loss, lam=plan.lam, learning_rate=plan.learning_rate,
        epochs=plan.epochs, batch_size=plan.batch_size, seed=plan.seed,
        precision=plan.precision)
    for name, want in zip([*names, "B"], fixed, strict=True):
        assert np.array_equal(run.results[name].theta, want), name
    assert run.results["C"].batch_losses == losses
    # and the float iterates stay within the fixed point's distance
    exact, _ = maths.centralised_gd(blocks, y, objective=plan.loss, lam=plan.lam,
                                    learning_rate=plan.learning_rate, epochs=plan.epochs,
                                    batch_size=plan.batch_size, seed=plan.seed)
    for name, want in zip([*names, "B"], exact, strict=True):
        np.testing.assert_allclose(run.results[name].theta, want, atol=1e-4)


def test_the_estimator_trains_the_model_of_the_clear_baseline() -> None:
    blocks, y = data(120, (3, 4), seed=2, logistic=True)
    kw: dict[str, Any] = dict(epochs=4, batch_size=32, tol=None, random_state=3)
    ss = VerticalLogisticRegression(**kw).fit(blocks[0], blocks[1], y)
    clear = VerticalLogisticRegression(he="none", **kw).fit(blocks[0], blocks[1], y)
    assert ss.plan_.engine == "ss" and clear.plan_.engine == "he"
    assert np.array_equal(ss.coef_a_, clear.coef_a_)
    assert np.array_equal(ss.coef_b_, clear.coef_b_) and ss.intercept_ == clear.intercept_
    assert ss.batch_losses_ == clear.batch_losses_
    assert np.array_equal(ss.predict(blocks[0], blocks[1]), clear.predict(blocks[0],
                                                                           blocks[1]))
    assert ss.key_bits_ == 0 and ss.timing_["A"].ring > 0 and ss.timing_["A"].he == 0


def test_the_coordinator_receives_seeds_and_masked_loss_shares_only() -> None:
    """C deals and reads the loss; no share of data, score or gradient ever reaches it."""
    blocks, y = data(60, (2, 3, 3), seed=5)
    plan = make_plan("linear", epochs=2, batch_size=12)
    run, names = run_roles(blocks, y, plan, keep_payloads=True)
    to_c = {r.tag for r in run.transcript if r.receiver == "C"}
    assert to_c == {"hello", "seed", "lossshare"}
    from_c = {r.tag for r in run.transcript if r.sender == "C"}
    assert from_c == {"setup", "deal", "status"}
    # the data parties' exchanges travel between them only
    between = {(r.sender, r.receiver) for r in run.transcript if r.tag in DATA_TAGS}
    assert between and all("C" not in pair for pair in between)
    # every pair of data parties exchanges masked scores each batch, in both directions
    assert {pair for pair in between} == {(a, b) for a in [*names, "B"]
                                          for b in [*names, "B"] if a != b}


def test_every_ring_message_looks_uniform_to_its_receiver() -> None:
    """A's view of B's masked features and scores: residues uniform modulo each prime."""
    from scipy import stats

    blocks, y = data(400, (3, 6), seed=6, logistic=True)
    plan = make_plan("logistic", epochs=2, batch_size=50)
    run, _ = run_roles(blocks, y, plan, keep_payloads=True)
    for tag, width in (("xhat", 7), ("m", None)):
        rows = [r.payload for r in run.transcript if r.tag == tag and r.receiver == "A"]
        values = []
        for payload in rows:
            shape = payload.shape[:-1]
            values.append(SS_RING.unpack(payload, shape, tag, "test").reshape(SS_RING.k, -1))
        res = np.concatenate(values, axis=1)
        if width is not None:
            assert res.shape[1] == 400 * width
        for k, p in enumerate(SS_RING.primes):
            assert stats.kstest(res[k] / p, "uniform").pvalue > 1e-6, (tag, k)


class _Tampered:
    """A party whose outgoing ``tag`` messages pass through ``change`` first."""

    def __init__(self, party: Any, tag: str, change: Any) -> None:
        self._party, self._tag, self._change = party, tag, change

    def __getattr__(self, name: str) -> Any:
        return getattr(self._party, name)

    def send(self, to: str, tag: str, payload: Any) -> int:
        if tag == self._tag:
            payload = self._change(payload)
        out: int = self._party.send(to, tag, payload)
        return out

    def broadcast(self, tag: str, payload: Any, to: Any = None) -> int:
        if tag == self._tag:
            payload = self._change(payload)
        out: int = self._party.broadcast(tag, payload, to=to)
        return out


def tamper(tag: str, change: Any) -> Any:
    def wrapper(role: Any) -> Any:
        return lambda party: role(_Tampered(party, tag, change))
    return wrapper


def _flip_to_prime(payload: Any) -> Any:
    out = payload.copy()
    out.reshape(-1, SS_RING.words)[0, 0] = np.uint64(SS_RING.primes[0])  # residue 0 = p_0
    return out


@pytest.mark.parametrize(("sender", "tag", "change", "receiver", "message"), [
    ("A", "seed", lambda s: s[:16], "C", r"party 'A' sent a seed that is not 32 bytes"),
    ("A", "pair", lambda s: b"x" * 31, "B", r"party 'A' sent a pair that is not 32"),
    ("B", "xhat", lambda x: x[:-1], "A", r"xhat must be a uint64 array of shape \(40, 4, 3\)"),
    ("A", "xhat", lambda x: x.astype(np.int64), "B", r"xhat must be a uint64 array"),
    ("A", "m", lambda x: x[:-1], "B", r"m must be a uint64 array of shape"),
    ("B", "m", _flip_to_prime, "A", r"m has a residue not below 2097143"),
    ("C", "deal", lambda x: x[:1], "AB", r"deal must be a uint64 array of shape"),
    ("A", "lossshare", _flip_to_prime, "C", r"lossshare has a residue not below"),
])
def test_a_malformed_share_is_refused_naming_the_sender_and_step(
        sender: str, tag: str, change: Any, receiver: str, message: str) -> None:
    blocks, y = data(40, (3, 3), seed=7)
    plan = make_plan("linear", epochs=2, batch_size=10)
    with pytest.raises(ProtocolError, match=message) as info:
        run_roles(blocks, y, plan, wrap={sender: tamper(tag, change)}, timeout=20)
    assert info.value.party in receiver and info.value.step == tag  # C deals to both


def test_a_wrong_correction_or_loss_share_is_caught_by_the_bounds() -> None:
    """A deviating dealer's random correction makes gradient sums beyond the plan's bound."""
    blocks, y = data(40, (3, 3), seed=8)
    plan = make_plan("linear", epochs=1, batch_size=10)

    def noise(payload: Any) -> Any:
        shape = payload.shape[:-1]
        return SS_RING.pack(SS_RING.uniform(b"z" * 32, shape, label=b"noise"))

    with pytest.raises(ProtocolError, match=r"gradient sums of batch 0 are beyond 2\^") as info:
        run_roles(blocks, y, plan, wrap={"C": tamper("deal", noise)}, timeout=20)
    assert info.value.step == "m"
    with pytest.raises(ProtocolError, match=r"loss shares .* add up to a value outside"):
        run_roles(blocks, y, plan, wrap={"B": tamper("lossshare", noise)}, timeout=20)


def test_keys_and_a_scheme_are_refused_under_secret_sharing() -> None:
    blocks, y = data(40, (3, 3), seed=9)
    plan = make_plan("linear", epochs=1, batch_size=10)
    roles = {"C": partial(coordinator, plan=plan, keys=(1, 2, None)),
             "A": partial(passive, X=blocks[0], plan=plan),
             "B": partial(active, X=blocks[1], y=y, plan=plan)}
    with pytest.raises(ValidationError, match="keys apply to engine='he'"):
        run_local(roles, timeout=20)
    with pytest.raises(ValidationError, match="he='ou' applies to engine='he'"):
        VerticalLinearRegression(engine="ss", he="ou").fit(blocks[0], blocks[1], y)


def test_a_party_refuses_a_plan_on_another_engine() -> None:
    """A coordinator on HE and a data party on SS compare plans before any share."""
    blocks, y = data(40, (3, 3), seed=10)
    ss_plan = make_plan("linear", epochs=1, batch_size=10)
    he_plan = make_plan("linear", epochs=1, batch_size=10, he="none")
    roles = {"C": partial(coordinator, plan=he_plan),
             "A": partial(passive, X=blocks[0], plan=ss_plan),
             "B": partial(active, X=blocks[1], y=y, plan=he_plan)}
    with pytest.raises(ValidationError, match=r"party 'A'.*plan differs.*engine"):
        run_local(roles, timeout=20)


def test_tol_stops_every_party_at_the_same_epoch() -> None:
    blocks, y = data(80, (2, 2), seed=11)
    plan = make_plan("linear", epochs=50, batch_size=20, tol=0.05, learning_rate=0.1)
    run, _ = run_roles(blocks, y, plan)
    c = run.results["C"]
    assert c.converged and c.epochs < 50
    assert run.results["A"].epochs == run.results["B"].epochs == c.epochs


def test_a_batch_too_large_for_the_ring_is_refused() -> None:
    from islands.vfl import ss

    bounds = maths.value_bounds(maths.Precision(16, 32), 2**60, 1)
    with pytest.raises(ValidationError, match=r"beyond the ring's 187 .*engine='ss'"):
        ss.check_fits(bounds, "party 'A'")
    ss.check_fits(maths.value_bounds(maths.Precision(16, 32), 4096, 3), "party 'A'")


@pytest.fixture(scope="module")
def breast_cancer_views() -> tuple[Any, Any, Any]:
    datasets = pytest.importorskip("sklearn.datasets")
    X, y = datasets.load_breast_cancer(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X[:, 10:], X[:, :10], y


def test_each_partys_ring_messages_are_uniform_and_independent_of_the_data(
        breast_cancer_views: tuple[Any, Any, Any]) -> None:
    from islands.vfl.audit import COORDINATOR_TAGS, ss_view_check

    # family-wise 1e-4: the masks come from the CSPRNG, so the test is random; a leak
    # gives p-values far below (the control below: < 1e-10)
    check = ss_view_check(*breast_cancer_views, alpha=1e-4, random_state=1)
    assert check.indistinguishable and check.models_differ, check.pvalues
    assert set(check.coordinator_tags) <= COORDINATOR_TAGS
    assert {key.rsplit("/", 1)[0] for key in check.pvalues} == {
        "A/xhat", "A/m", "A/deal", "B/xhat", "B/m", "B/deal", "C/lossshare"}
    # poly5's openings, masked labels and power tuples too
    check = ss_view_check(*breast_cancer_views, sigmoid="poly5", alpha=1e-4, random_state=2)
    assert check.indistinguishable and check.models_differ, check.pvalues
    assert set(check.coordinator_tags) <= COORDINATOR_TAGS
    assert {"A/open", "B/open", "A/yhat", "B/powers"} <= {
        key.rsplit("/", 1)[0] for key in check.pvalues}


def test_the_view_check_catches_masks_that_are_not_there(
        breast_cancer_views: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Zero per-batch masks still train the same model, but the scores go out in the clear."""
    from islands.vfl import ss
    from islands.vfl.audit import ss_view_check

    def unmasked(seed: bytes, epoch: int, n: int, batches: int, widths: dict[str, int]) -> Any:
        zero = np.zeros((SS_RING.k, n), dtype=np.uint32)
        return ss._Masks(zero, {k: np.zeros((SS_RING.k, batches, w), dtype=np.uint32)
                                for k, w in widths.items()})

    monkeypatch.setattr(ss, "_epoch_masks", unmasked)
    check = ss_view_check(*breast_cancer_views, random_state=1)
    assert not check.indistinguishable
    assert check.pvalues["A/m/uniform"] < 1e-10 and check.pvalues["B/m/uniform"] < 1e-10


def test_the_audit_command_prints_the_view_check(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys

    out = tmp_path / "audit.json"
    # the masks come from the CSPRNG: at the default family-wise 0.01 a correct run is
    # flagged about once in a hundred, so the test asks for 1e-5
    run = subprocess.run([sys.executable, "-m", "islands.cli", "audit", "vfl", "--alpha",
                          "1e-5", "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "C received only hello, lossshare, seed" in " ".join(run.stdout.split())
    report = json.loads(out.read_text())
    assert report["dataset"] == "breast_cancer" and report["indistinguishable"] is True


def _deviating_coordinator(change: str, plan: Plan, received: list[Any]) -> Any:
    """A C honest to B that changes A1's roster: adds itself or an accomplice X (to read
    A1's masked block, whose mask C knows), or drops A2 (to split the federation)."""
    from islands.vfl.protocol import Setup

    def role(party: Any) -> None:
        hellos = {n: party.recv(n, "hello") for n in ("A1", "A2", "B")}
        counts = {n: h.features for n, h in hellos.items()}
        for name in ("A2", "B"):
            party.send(name, "setup", Setup(b"", None, plan.text(), counts))
        told = ({k: v for k, v in counts.items() if k != "A2"} if change == "drop"
                else {**counts, change: 1})
        party.send("A1", "setup", Setup(b"", None, plan.text(), told))
        received.append(party.recv("A1", "seed", timeout=120))
    return role


@pytest.mark.parametrize("change", ["C", "X", "drop"])
def test_a_passive_party_sends_no_share_to_a_data_party_b_does_not_name(change: str) -> None:
    """C knows every mask: a data party it adds to A1's roster (itself, or an accomplice X)
    would receive A1's masked block and read A1's features; a roster without A2 would
    split the federation. A1 checks the roster against B's before its seed, pair or block
    leaves it."""
    blocks, y = data(40, (3, 2, 3), seed=12)
    plan = make_plan("linear", epochs=1, batch_size=10)
    received: list[Any] = []
    roles: dict[str, Any] = {
        "C": _deviating_coordinator(change, plan, received),
        "A1": partial(passive, X=blocks[0], plan=plan),
        "A2": partial(passive, X=blocks[1], plan=plan),
        "B": partial(active, X=blocks[2], y=y, passive=["A1", "A2"], plan=plan)}
    if change == "X":
        roles["X"] = lambda party: received.append(party.recv("A1", "xhat", timeout=120))
    with pytest.raises(ProtocolError) as info:
        run_local(roles, timeout=180)
    assert info.value.party == "A1"
    assert info.value.step == ("setup" if change == "C" else "roster")
    assert "named itself a data party" in str(info.value) or "no share is sent" in str(
        info.value)
    assert not received  # A1 sent C no seed, and X nothing
