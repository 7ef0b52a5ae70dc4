"""Federated transfer learning on secret shares (engine="ss", islands.vfl.ftl.ss).

The SS flow computes the HE flow's integers: with the same seeds it trains the networks
of a Paillier run bit for bit. The dealer receives only seeds (and B's go-on), every ring
message is checked and refused naming its sender and step, and the defaults fit breast
cancer in seconds.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from ftl_data import overlap_data
from islands.crypto.rns import SS_RING
from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local
from islands.vfl import FederatedTransferLearner
from islands.vfl.ftl import FtlConfig, maths, ss
from islands.vfl.ftl.protocol import Plan, infer_source, infer_target, source, target

RING = SS_RING


# ------------------------------------------------------------------ ring maths
def test_ring_encode_carries_the_he_integers() -> None:
    """ring_encode's residues are those of maths.encode's Python ints, at f and 2f."""
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(size=200) * 10.0 ** rng.integers(-8, 9, 200),
                             [0.0, -0.0, 2.0**30, -(2.0**30), 0.5 / 2**24, -1.5 / 2**24,
                              -1e-30, 2.0**30 - 2.0**-20]])
    for f in (8, 24, 32, 48, 64):
        want = RING.encode_int(np.array(maths.encode(values, f, "v", "t"), dtype=object))
        np.testing.assert_array_equal(ss.ring_encode(values, f, "v", "t"), want)
    with pytest.raises(ValidationError, match="diverged"):
        ss.ring_encode([np.nan], 24, "u", "party 'A'")


def test_decode_ints_is_garner() -> None:
    """The vectorised reconstruction gives RnsRing.decode_int's signed integers."""
    half = RING.modulus // 2
    ints = [0, 1, -1, half, -half, 2**120, -(2**120) + 7, 3**100, -(3**99)]
    r = RING.encode_int(np.array(ints, dtype=object))
    assert ss.decode_ints(r) == ints == RING.decode_int(r)
    u = RING.uniform(b"s" * 32, (7, 5), label=b"t")
    assert ss.decode_ints(u) == RING.decode_int(u)


def test_commodity_products_give_each_party_its_output_exactly() -> None:
    """A's g = P̃ + UQ̃ᵀ and B's G = WᵀY, ⟨w_L, Y⟩ from masks, products and D's deal."""
    rng = np.random.default_rng(3)
    b, d, k = 6, 4, 3
    big = 2**60

    def ints(*shape: int) -> np.ndarray:
        return rng.integers(-big, big, size=shape, dtype=np.int64)

    y, q_t, w, w_l = ints(b + d, d), ints(d, d), ints(b + d, k), ints(b + d, d)
    p = np.array([[int(v) * 2**40 for v in row] for row in ints(b, d)], dtype=object)
    ry, rq, rw, rl = (RING.encode_int(x) for x in (y, q_t, w, w_l))
    rp = RING.encode_int(p)
    seed_a, seed_b = ss.new_seed(), ss.new_seed()
    ma, mb = ss.target_masks(seed_a, 0, 0, b, d, k), ss.source_masks(seed_b, 0, 0, b, d, k)
    ra, rg, rll = ss.deal(ma, mb, b)
    y_hat, q_hat = RING.add(ry, ma[0]), RING.add(rq, mb[0])
    w_hat, wl_hat = RING.add(rw, mb[1]), RING.add(rl, mb[2])
    t_g, t_l = ss.target_products(w_hat, wl_hat, ry, ma[1], ma[2])
    t_a = ss.source_products(y_hat, rq, rp, mb[3])
    g = ss.decode_ints(ss.target_output(t_a, ma[0], q_hat, ra))
    big_g, loss = ss.source_output(t_g, t_l, mb[1], mb[2], y_hat, rg, rll)
    yo, qo, wo, wlo = (x.astype(object) for x in (y, q_t, w, w_l))
    assert g == (p + yo[:b] @ qo).ravel().tolist()
    assert ss.decode_ints(big_g) == (wo.T @ yo).ravel().tolist()
    assert ss.decode_ints(loss) == [int(np.sum(wlo * yo))]


def test_every_mask_is_fresh_per_batch_and_the_same_at_the_dealer() -> None:
    seed = ss.new_seed()
    first = ss.target_masks(seed, 0, 0, 5, 3, 2)
    assert all(np.array_equal(x, y) for x, y in zip(first, ss.target_masks(seed, 0, 0, 5, 3, 2),
                                                    strict=True))
    for other in (ss.target_masks(seed, 0, 1, 5, 3, 2), ss.target_masks(seed, 1, 0, 5, 3, 2)):
        assert not np.array_equal(first[0], other[0])
    assert len(seed) == 32 and seed != ss.new_seed()


# ------------------------------------------------------------------ the protocol


def _roles(plan: Plan, classes: int, *, a: Any = None, b: Any = None, d: Any = None
           ) -> dict[str, Any]:
    """The three roles of a run (a, b, d: replacements, e.g. tampered parties)."""
    x_a, x_b, labels, overlap = overlap_data(classes=classes)
    dealer = "D" if plan.engine == "ss" else None
    roles: dict[str, Any] = {
        "A": a or partial(target, X=x_a, plan=plan, init_seed=1, dealer=dealer),
        "B": b or partial(source, X=x_b, labels=labels, overlap=overlap, n_classes=classes,
                          plan=plan, init_seed=2, dealer=dealer)}
    if dealer is not None:
        roles["D"] = d or partial(ss.dealer, target="A", source="B", plan=plan)
    return roles


def _scores(run: Any, x: np.ndarray, plan: Plan, *, keep_payloads: bool = False) -> Any:
    dealer = "D" if plan.engine == "ss" else None
    roles: dict[str, Any] = {
        "A": partial(infer_target, net=run.results["A"].net, X=x, plan=plan, dealer=dealer),
        "B": partial(infer_source, phi=run.results["B"].phi, plan=plan, dealer=dealer)}
    if dealer is not None:
        roles["D"] = partial(ss.infer_dealer, plan=plan)
    return run_local(roles, timeout=120, blas_threads=None, keep_payloads=keep_payloads)


COMMON: dict[str, Any] = dict(dim=3, hidden=(6,), epochs=2, batch_size=10, pretrain_epochs=1,
                              seed=5)
PAILLIER: dict[str, Any] = dict(engine="he", he="paillier", key_bits=1024, insecure_keys=True)


@pytest.mark.parametrize(("alignment", "loss", "classes"), [("anchored", "softmax", 3),
                                                            ("symmetric", "logistic", 2)])
def test_ss_trains_the_paillier_networks_bit_for_bit(alignment: str, loss: str,
                                                     classes: int) -> None:
    """Same seeds: the SS run and a Paillier run (1024-bit insecure keys) compute the same
    integers, so both networks, Φ, every batch loss and the inference scores are equal;
    the clear run (he="none", floats) is within the fixed point's 2^-24."""
    common = {**COMMON, "alignment": alignment, "loss": loss}
    plans = {"ss": Plan(**common), "paillier": Plan(**common, **PAILLIER),
             "none": Plan(**common, engine="he", he="none")}
    runs = {name: run_local(_roles(plan, classes), timeout=120, blas_threads=None)
            for name, plan in plans.items()}
    got, pa = runs["ss"].results, runs["paillier"].results
    for party in ("A", "B"):
        assert all(torch.equal(p, q) for p, q in zip(got[party].net.parameters(),
                                                     pa[party].net.parameters(), strict=True))
    np.testing.assert_array_equal(got["B"].phi, pa["B"].phi)
    assert got["B"].batch_losses == pa["B"].batch_losses
    assert got["A"].epoch_losses == got["B"].epoch_losses == pa["B"].epoch_losses
    # the ring work is counted as the clock's 'he' (cryptographic) time
    assert got["A"].clock.he > 0 and got["B"].clock.he > 0
    x_new = overlap_data(classes=classes)[0][:6]
    scores = {name: _scores(runs[name], x_new, plans[name]).results["A"] for name in plans}
    np.testing.assert_array_equal(scores["ss"], scores["paillier"])
    np.testing.assert_allclose(got["B"].epoch_losses, runs["none"].results["B"].epoch_losses,
                               rtol=1e-6)
    np.testing.assert_allclose(scores["ss"], scores["none"], atol=1e-5)


def test_the_estimators_ss_fit_predicts_as_the_paillier_one() -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    perm = np.random.default_rng(0).permutation(len(y))
    b, a, test = perm[:300], np.concatenate([perm[:60], perm[300:480]]), perm[480:]
    ids = [f"person-{i}" for i in range(len(y))]
    kw: dict[str, Any] = dict(dim=4, hidden=(8,), epochs=2, batch_size=30, pretrain_epochs=1,
                              random_state=3)
    fits = {name: FederatedTransferLearner(**kw, **extra).fit(
        X[a][:, :15], X[b][:, 15:], y[b], [ids[i] for i in a], [ids[i] for i in b])
        for name, extra in (("ss", {}), ("paillier", PAILLIER))}
    ss_fit, pa_fit = fits["ss"], fits["paillier"]
    assert ss_fit.plan_.engine == "ss" and ss_fit.plan_.he is None
    assert ss_fit.loss_history_ == pa_fit.loss_history_
    np.testing.assert_array_equal(ss_fit.phi_, pa_fit.phi_)
    np.testing.assert_array_equal(ss_fit.decision_function(X[test][:, :15]),
                                  pa_fit.decision_function(X[test][:, :15]))
    assert ss_fit.predict(X[test][:, :15]).tolist() == pa_fit.predict(X[test][:, :15]).tolist()
    assert ss_fit.score(X[test][:, :15], y[test]) == pa_fit.score(X[test][:, :15], y[test])
    # the dealer played in-process; it received only seeds and B's go-on
    assert {r.tag for r in ss_fit.transcript_ if r.receiver == "D"} == {"seed", "proceed"}
    assert {r.tag for r in ss_fit.inference_transcript_ if r.receiver == "D"} == {"seed"}


def test_the_dealer_receives_only_seeds_and_never_a_data_share() -> None:
    plan = Plan(**COMMON, alignment="symmetric", loss="logistic")
    run = run_local(_roles(plan, 2), timeout=120, blas_threads=None, keep_payloads=True)
    infer = _scores(run, overlap_data()[0][:5], plan, keep_payloads=True)
    for transcript in (run.transcript, infer.transcript):
        to_d = [r for r in transcript if r.receiver == "D"]
        assert to_d and all(r.tag in ss.DEALER_TAGS for r in to_d)
        for record in to_d:
            payload = record.payload
            assert isinstance(payload, (ss.Seed, ss.Proceed))
            if isinstance(payload, ss.Seed):
                assert len(payload.seed) == 32
        # D only deals; the data parties' masked shares travel between A and B alone
        assert {r.tag for r in transcript if r.sender == "D"} <= {"deal", "infer-deal"}
        assert {(r.sender, r.receiver) for r in transcript
                if r.tag in ("reps", "terms", "products")} <= {("A", "B"), ("B", "A")}
    # per batch, two round trips between A and B: reps/terms, then products
    batches = len(run.results["B"].batch_losses)
    assert len(run.transcript.with_tag("products")) == 2 * batches
    assert len(run.transcript.with_tag("reps")) == len(run.transcript.with_tag("terms")) \
        == batches


def test_tol_stops_the_dealer_with_the_parties() -> None:
    plan = Plan(dim=3, hidden=(6,), epochs=30, batch_size=12, pretrain_epochs=0, tol=0.5)
    run = run_local(_roles(plan, 2), timeout=120, blas_threads=None)
    model_a, model_b, record = (run.results[p] for p in "ABD")
    assert model_b.epochs < 30 and model_b.converged
    assert model_a.epochs == model_b.epochs
    # D deals one epoch ahead: at most one dealt epoch goes unused
    assert record.epochs_dealt in (model_b.epochs, model_b.epochs + 1)
    assert record.rows == 24 and record.scores == 2  # softmax: one score per class


# ------------------------------------------------------------------ configuration
def test_engine_and_he_settings() -> None:
    config = FtlConfig()
    assert (config.engine, config.he) == ("ss", None)
    assert FtlConfig(engine="he").he == "ou"  # None resolves to OU under engine='he'
    assert FtlConfig(engine="he", he="paillier").he == "paillier"
    with pytest.raises(ValidationError, match=r"^FederatedTransferLearner: he='paillier' "
                                              r"applies to engine='he'"):
        FederatedTransferLearner(engine="ss", he="paillier")._config()
    with pytest.raises(ValidationError, match="he='none' applies to engine='he'"):
        FtlConfig.build(None, engine="ss", he="none")
    # a scheme given alone selects the HE flow (as vertical regression does)
    assert FederatedTransferLearner(he="paillier")._config().engine == "he"
    with pytest.raises(ValidationError, match=r"The 'engine' parameter of .* must be 'ss' or "
                       r"'he', or None"):
        FtlConfig.build(None, engine="mpc")
    assert '"engine":"ss"' in Plan().text() and Plan().text() != Plan(engine="he").text()


def test_a_plan_differing_in_engine_is_refused_at_hello() -> None:
    x_a, x_b, labels, overlap = overlap_data()
    with pytest.raises(ValidationError, match=r"plan differs.*'engine'"):
        run_local({"A": partial(target, X=x_a, plan=Plan(**COMMON), dealer="D"),
                   "B": partial(source, X=x_b, labels=labels, overlap=overlap, n_classes=2,
                                plan=Plan(**COMMON, engine="he", he="none"))},
                  timeout=30, blas_threads=None)


def test_ss_needs_a_third_party_as_dealer() -> None:
    x_a = overlap_data()[0]
    with pytest.raises(ValidationError, match=r"engine='ss' needs a dealer: name a dealer that "
                       r"colludes with neither party, or set engine='he'"):
        run_local({"A": partial(target, X=x_a, plan=Plan(**COMMON))}, timeout=10)
    with pytest.raises(ValidationError, match="the dealer 'B' must be a third party"):
        run_local({"A": partial(target, X=x_a, plan=Plan(**COMMON), dealer="B")}, timeout=10)
    clear = Plan(**COMMON, engine="he", he="none")
    with pytest.raises(ValidationError, match=r"a dealer .* serves engine='ss' only"):
        run_local({"A": partial(target, X=x_a, plan=clear, dealer="D")}, timeout=10)


# ------------------------------------------------------------------ refusals
class _Tampered:
    """A party whose first message under ``tag`` (to ``to``, if given) goes through ``edit``."""

    def __init__(self, party: Any, tag: str, edit: Any, to: str | None = None) -> None:
        self._party, self._tag, self._edit, self._to = party, tag, edit, to
        self._done = False

    @property
    def name(self) -> str:
        return str(self._party.name)

    def send(self, to: str, tag: str, payload: Any) -> int:
        if tag == self._tag and not self._done and self._to in (None, to):
            self._done = True
            payload = self._edit(payload)
        return int(self._party.send(to, tag, payload))

    def recv(self, frm: str, tag: str, timeout: float | None = None) -> Any:
        return self._party.recv(frm, tag, timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._party, name)


def _tamper(role: Any, tag: str, edit: Any, to: str | None = None) -> Any:
    return lambda party: role(_Tampered(party, tag, edit, to))


def _drop_row(a: np.ndarray) -> np.ndarray:
    return np.asarray(a[1:])


def _bad_residue(a: np.ndarray) -> np.ndarray:
    out: np.ndarray = a.copy()
    out.reshape(-1, RING.words)[0, 0] |= np.uint64((1 << 21) - 1)  # above every prime
    return out


def _stray_bit(a: np.ndarray) -> np.ndarray:
    out: np.ndarray = a.copy()
    out.reshape(-1, RING.words)[0, -1] |= np.uint64(1 << 63)
    return out


PLAN = Plan(**COMMON)


@pytest.mark.parametrize(("who", "tag", "edit", "to", "said", "victim"), [
    ("A", "reps", lambda m: replace(m, y=_drop_row(m.y)), None,
     r"party 'B': peer 'A' sent a malformed Ŷ .*uint64 array of shape \(13, 3, 3\)", "B"),
    ("A", "reps", lambda m: replace(m, y=m.y.astype(np.int64)), None,
     r"party 'B' received a malformed 'reps' message from 'A'.*uint64", "B"),
    ("A", "reps", lambda m: replace(m, y=_bad_residue(m.y)), None,
     r"peer 'A' sent a malformed Ŷ .*residue not below", "B"),
    ("B", "terms", lambda m: replace(m, q=_drop_row(m.q)), None,
     r"party 'A': peer 'B' sent a malformed Q̂", "A"),
    ("B", "terms", lambda m: replace(m, wl=_stray_bit(m.wl)), None,
     r"peer 'B' sent a malformed ŵ_L .*bits above its 9 residues", "A"),
    ("B", "products", lambda m: replace(m, t=_bad_residue(m.t)), None,
     r"peer 'B' sent a malformed T_A", "A"),
    ("A", "products", lambda m: replace(m, loss=m.g), None,
     r"peer 'A' sent a malformed t_L", "B"),
    ("A", "products", lambda m: replace(m, u=np.zeros((10, 3), dtype=np.int64)), None,
     r"peer 'A' sent U under anchored alignment", "B"),
    ("A", "reps", lambda m: np.zeros(3), None,
     r"peer 'A' sent a malformed reps message \(a MaskedReps expected; got ndarray\)", "B"),
    ("D", "deal", lambda m: replace(m, ra=_drop_row(m.ra)), "A",
     r"party 'A': dealer 'D' sent a malformed deal \(r_a\)", "A"),
    ("D", "deal", lambda m: replace(m, epoch=1), "A", r"dealer 'D' dealt epoch 1 for epoch 0",
     "A"),
    ("D", "deal", lambda m: replace(m, rl=_stray_bit(m.rl)), "B",
     r"party 'B': dealer 'D' sent a malformed deal \(r''_a\)", "B"),
    ("A", "seed", lambda m: replace(m, seed=m.seed[:16]), None,
     r"dealer 'D': party 'A' sent a seed of 16 bytes; 32 expected", "D"),
    ("B", "seed", lambda m: replace(m, rows=m.rows + 1), None,
     r"dealer 'D': the parties disagree: 'A' announced 24 rows", "D"),
    ("B", "proceed", lambda m: replace(m, epoch=5), None,
     r"dealer 'D': party 'B' ended epoch 5 during epoch 0", "D"),
])
def test_malformed_ring_messages_are_refused_naming_sender_and_step(
        who: str, tag: str, edit: Any, to: str | None, said: str, victim: str) -> None:
    roles = _roles(PLAN, 2)
    roles[who] = _tamper(roles[who], tag, edit, to)
    with pytest.raises(ProtocolError, match=said) as info:
        run_local(roles, timeout=60, blas_threads=None)
    assert info.value.party == victim
    assert info.value.step == ("seed" if victim == "D" and tag == "seed" else tag)


def test_malformed_inference_messages_are_refused() -> None:
    run = run_local(_roles(PLAN, 2), timeout=120, blas_threads=None)
    x = overlap_data()[0][:4]
    net, phi = run.results["A"].net, run.results["B"].phi
    cases = [("B", "products", lambda m: replace(m, phi=None), r"malformed Φ̂", "A"),
             ("A", "reps", lambda m: replace(m, y=_drop_row(m.y)), r"malformed Û", "B"),
             ("D", "infer-deal", lambda m: replace(m, ra=_bad_residue(m.ra)),
              r"dealer 'D' sent a malformed deal \(r_a\)", "A")]
    for who, tag, edit, said, victim in cases:
        roles: dict[str, Any] = {
            "A": partial(infer_target, net=net, X=x, plan=PLAN, dealer="D"),
            "B": partial(infer_source, phi=phi, plan=PLAN, dealer="D"),
            "D": partial(ss.infer_dealer, plan=PLAN)}
        roles[who] = _tamper(roles[who], tag, edit)
        with pytest.raises(ProtocolError, match=said) as info:
            run_local(roles, timeout=60, blas_threads=None)
        assert info.value.party == victim


# ------------------------------------------------------------------ the defaults
def test_defaults_fit_breast_cancer_in_seconds() -> None:
    """FederatedTransferLearner() with every default (engine="ss", 30 epochs) on breast
    cancer as in the issue: B holds 60% of the training rows with labels, A the rest plus
    30% of B's rows. The time is printed, not asserted (machines differ)."""
    X, y = load_breast_cancer(return_X_y=True)
    perm = np.random.default_rng(0).permutation(y.size)
    test, train = perm[:114], perm[114:]
    nb = round(0.6 * train.size)
    b_rows, a_only = train[:nb], train[nb:]
    a_rows = np.concatenate([a_only, b_rows[:round(0.3 * nb)]])
    xs = StandardScaler().fit_transform(X)
    model = FederatedTransferLearner(random_state=0)
    start = time.perf_counter()
    model.fit(xs[a_rows, :15], xs[b_rows, 15:], y[b_rows], a_rows.tolist(), b_rows.tolist())
    seconds = time.perf_counter() - start
    accuracy = model.score(xs[test, :15], y[test])
    print(f"\nFederatedTransferLearner() defaults, breast cancer, whole fit: {seconds:.2f} s "
          f"({model.n_overlap_} overlap rows, {model.n_epochs_} epochs; accuracy "
          f"{accuracy:.3f})")
    assert model.n_overlap_ == 82 and model.n_epochs_ == 30
    assert accuracy > 0.85


def _ring_arrays(payload: Any) -> list[np.ndarray]:
    """Every packed ring array a message carries (uint64, one row of words per element)."""
    import dataclasses

    values = ([getattr(payload, f.name) for f in dataclasses.fields(payload)]
              if dataclasses.is_dataclass(payload) else [payload])
    return [v for v in values if isinstance(v, np.ndarray) and v.dtype == np.uint64
            and v.ndim >= 1 and v.shape[-1] == SS_RING.words]


def test_each_partys_ring_messages_look_uniform() -> None:
    """A's and B's view under engine='ss': every residue they receive, scaled by its prime,
    is uniform (Kolmogorov–Smirnov), in training and in inference."""
    from scipy import stats

    plan = Plan(**COMMON, alignment="symmetric", loss="logistic")
    run = run_local(_roles(plan, 2), timeout=120, blas_threads=None, keep_payloads=True)
    infer = _scores(run, overlap_data()[0][:5], plan, keep_payloads=True)
    for party in ("A", "B"):
        seen = []
        for transcript in (run.transcript, infer.transcript):
            for record in transcript.received_by(party):
                for arr in _ring_arrays(record.payload):
                    residues = SS_RING.unpack(arr, arr.shape[:-1], record.tag, party)
                    seen.append(residues.reshape(SS_RING.k, -1))
        assert seen, party
        res = np.concatenate(seen, axis=1)
        assert res.shape[1] > 200  # small plan: a few hundred elements each
        for k, p in enumerate(SS_RING.primes):
            assert stats.kstest(res[k] / p, "uniform").pvalue > 1e-6, (party, k)
