"""A key owner cannot weaken the key: every party checks the key it receives against its plan.

The vertical coordinator C (and each FTL peer) makes the key the others encrypt under. A
C that announces the shared plan but hands out a shorter key (or, under ``djn=False``, a
DJN base) would let a data party factor n and read what the others encrypt. Each data
party refuses such a setup before anything derived from its data leaves it; a larger
key than the plan asks for is accepted (more protection, never less). Below 2048 bits
every party refuses a plan or a key unless it opted into ``insecure_keys`` itself
(:mod:`islands.vfl.keys`).
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from functools import cache, partial
from typing import Any

import numpy as np
import pytest

pytest.importorskip("phe")
pytest.importorskip("gmpy2")

from islands.crypto import paillier
from islands.errors import ProtocolError, ValidationError
from islands.runtime import run_local
from islands.runtime.transcript import Transcript
from islands.vfl.config import VflConfig
from islands.vfl.protocol import Plan, active, coordinator, passive


def make_plan(he: str, **settings: Any) -> Plan:
    return VflConfig.build(None, objective="logistic", he=he, epochs=1, batch_size=16,
                           tol=None, **settings).plan()


@cache
def djn_keys_1024() -> tuple[Any, Any, int]:
    return paillier.generate_djn_keypair(1024)


def ou_engine() -> Any:
    pytest.importorskip("heu", reason="he='ou' needs sf-heu (pip install 'islands[heu]')")
    from islands.crypto import heu

    return heu


def data(rows: int = 48) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(rows, 3)), rng.normal(size=(rows, 2)), np.sign(rng.normal(size=rows))


def play(plan: Plan, keys: Any, transcript: Transcript | None = None) -> Any:
    x_a, x_b, y = data()
    roles = {"C": partial(coordinator, plan=plan, keys=keys),
             "A": partial(passive, X=x_a, plan=plan),
             "B": partial(active, X=x_b, y=y, plan=plan)}
    return run_local(roles, timeout=120, transcript=transcript)


def test_a_paillier_key_shorter_than_the_plan_is_refused_before_any_score() -> None:
    plan = make_plan("paillier", key_bits=1280, insecure_keys=True)
    transcript = Transcript()
    with pytest.raises(ProtocolError, match=r"setup from 'C'.*at least 1280 bits.*1024 bits"):
        play(plan, djn_keys_1024(), transcript)
    assert {r.tag for r in transcript if r.sender in ("A", "B")} == {"hello"}


def test_an_ou_key_shorter_than_the_plan_is_refused() -> None:
    heu = ou_engine()
    plan = make_plan("ou", key_bits=2048)
    with pytest.raises(ProtocolError, match=r"setup from 'C'.*2048"):
        play(plan, heu.OuKeyOwner(1024, workers=1))


def test_a_larger_key_than_the_plan_asks_for_is_accepted() -> None:
    heu = ou_engine()
    plan = make_plan("ou", key_bits=1024, insecure_keys=True)
    run = play(plan, heu.OuKeyOwner(1536, workers=1))
    assert run.results["C"].key_bits >= 1536


def test_a_djn_base_is_refused_when_the_plan_says_textbook_randomness() -> None:
    plan = make_plan("paillier", key_bits=1024, insecure_keys=True, djn=False)
    with pytest.raises(ProtocolError, match=r"sent a DJN base, but the plan says djn=False"):
        play(plan, djn_keys_1024())


def test_the_plan_carries_the_key_settings_so_parties_that_differ_are_refused() -> None:
    from islands.config import check_same_plan

    mine = make_plan("paillier", key_bits=2048)
    theirs = make_plan("paillier", key_bits=1024, insecure_keys=True)
    with pytest.raises(ValidationError, match=r"differs.*key_bits.*2048, 1024"):
        check_same_plan(mine.text(), theirs.text(), party="A", peer="C")


def test_an_ftl_peer_with_a_key_shorter_than_the_plan_is_refused() -> None:
    pytest.importorskip("torch")
    from islands.vfl.ftl import FtlConfig
    from islands.vfl.ftl.protocol import Hello, target

    plan = FtlConfig.build(None, key_bits=1280, insecure_keys=True, dim=2, hidden=(4,), epochs=1,
                           batch_size=8, he="paillier").plan(0)
    short, _, base = djn_keys_1024()

    def deviating_source(party: Any) -> None:
        party.recv("A", "hello")
        party.send("A", "hello", Hello(20, 3, plan.text(), paillier.public_key_to_bytes(short),
                                       int(base), 2))

    roles = {"A": partial(target, X=np.zeros((20, 3)), peer="B", plan=plan),
             "B": deviating_source}
    with pytest.raises(ProtocolError, match=r"hello from 'B'.*at least 1280 bits"):
        run_local(roles, timeout=120)


# ------------------------------------------------------------------ the 2048-bit floor
RULE = (r"an int in \[2048, 16384\] and a multiple of 256 \(from 1024 only with "
        r"insecure_keys, for tests\)")


def test_a_plan_below_the_floor_without_the_opt_in_is_refused_before_any_message() -> None:
    """A plan made by hand with 1024 bits (every party's, or a key owner's that hands out
    a 1024-bit key): every party refuses it before it sends anything."""
    plan = replace(make_plan("paillier"), key_bits=1024)
    assert plan.insecure_keys is False
    transcript = Transcript()
    with pytest.raises(ValidationError, match=r"key_bits must be " + RULE + "; got 1024"):
        play(plan, djn_keys_1024(), transcript)
    assert len(transcript) == 0


def test_one_partys_opt_in_does_not_lower_anothers_floor() -> None:
    """C opts into 1024-bit keys and hands one out; A and B, at the default 2048, refuse
    C's plan, naming both settings, before anything derived from their data is sent."""
    strict = make_plan("paillier")
    loose = make_plan("paillier", key_bits=1024, insecure_keys=True)
    x_a, x_b, y = data()
    roles = {"C": partial(coordinator, plan=loose, keys=djn_keys_1024()),
             "A": partial(passive, X=x_a, plan=strict),
             "B": partial(active, X=x_b, y=y, plan=strict)}
    transcript = Transcript()
    with pytest.raises(ValidationError, match=r"differs.*'insecure_keys': \(False, True\), "
                                              r"'key_bits': \(2048, 1024\)"):
        run_local(roles, timeout=120, transcript=transcript)
    assert {r.tag for r in transcript if r.sender in ("A", "B")} == {"hello"}


def test_the_check_of_a_received_key_applies_the_floor_itself() -> None:
    """A data party's check of C's key refuses a 1024-bit key without its own opt-in, even
    given a 1024-bit plan that skipped the plan check (before, it took the plan's word)."""
    from islands.vfl.protocol import Clock, Setup, _join

    short, _, base = djn_keys_1024()

    def join(plan: Plan) -> dict[str, Any]:
        def coordinator_with_a_short_key(party: Any) -> None:
            party.recv("A", "hello")
            party.send("A", "setup", Setup(paillier.public_key_to_bytes(short), int(base),
                                           plan.text(), {"A": 3, "B": 2}))

        return run_local({"A": lambda party: _join(party, Clock(), "C", plan, 48, 3, "B"),
                          "C": coordinator_with_a_short_key}, timeout=120).results

    plan = replace(make_plan("paillier"), key_bits=1024)  # insecure_keys stays False
    with pytest.raises(ProtocolError, match=r"'A' \(setup from 'C'\).*at least 2048 bits.*"
                                            r"1024 bits"):
        join(plan)
    # the party's own opt-in, and only that, lowers its floor
    cipher, _, _ = join(replace(plan, insecure_keys=True))["A"]
    assert cipher.public_key.n.bit_length() == 1024


def test_an_ftl_plan_below_the_floor_needs_the_opt_in() -> None:
    pytest.importorskip("torch")
    from islands.vfl.ftl import FtlConfig
    from islands.vfl.ftl.protocol import check_plan

    plan = replace(FtlConfig().plan(0), key_bits=1024)
    with pytest.raises(ValidationError, match=r"The 'key_bits' parameter of party 'A' must be "
                                              + RULE + r"\. Got 1024 instead\."):
        check_plan(plan, "party 'A'")
    assert check_plan(replace(plan, insecure_keys=True), "party 'A'").key_bits == 1024


def test_an_insecure_fit_warns_and_records_the_opt_in() -> None:
    """A user fits with 1024-bit keys: refused without insecure_keys; with it, fit warns
    and the fitted settings and plan record the opt-in."""
    from islands.vfl import VerticalLogisticRegression
    from islands.vfl.keys import InsecureKeyWarning

    x_a, x_b, y = data()
    with pytest.raises(ValidationError, match=r"The 'key_bits' parameter of "
                                              r"VerticalLogisticRegression must be " + RULE):
        VerticalLogisticRegression(key_bits=1024).fit(x_a, x_b, y)
    model = VerticalLogisticRegression(key_bits=1024, insecure_keys=True, epochs=1,
                                       batch_size=16, random_state=0, he="paillier")
    with pytest.warns(InsecureKeyWarning, match=r"^VerticalLogisticRegression: 1024-bit keys "
                                                r"are below islands' 2048-bit floor"):
        model.fit(x_a, x_b, y)
    assert model.config_.insecure_keys and model.plan_.insecure_keys
    assert model.key_bits_ >= 1024


def test_an_insecure_ftl_fit_warns_before_anything_runs() -> None:
    pytest.importorskip("torch")
    from islands.vfl import FederatedTransferLearner
    from islands.vfl.keys import InsecureKeyWarning

    x = np.zeros((10, 2))
    with pytest.raises(ValidationError, match=r"'key_bits' parameter of "
                                              r"FederatedTransferLearner must be " + RULE):
        FederatedTransferLearner(key_bits=1024).fit(x, x, np.arange(10) % 2, None, None)
    with pytest.warns(InsecureKeyWarning, match=r"^FederatedTransferLearner: 1024-bit keys"), \
            pytest.raises(ValidationError, match="ids_a must hold one ID per row"):
        FederatedTransferLearner(key_bits=1024, insecure_keys=True, he="paillier").fit(
            x, x, np.arange(10) % 2, None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureKeyWarning)  # none at the floor
        with pytest.raises(ValidationError, match="ids_a must hold"):
            FederatedTransferLearner().fit(x, x, np.arange(10) % 2, None, None)
