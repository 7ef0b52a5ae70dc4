"""A key owner cannot weaken the key: every party checks the key it receives against its plan.

The vertical coordinator C (and each FTL peer) makes the key the others encrypt under. A
C that announces the shared plan but hands out a shorter key (or, under ``djn=False``, a
DJN base) would let a data party factor n and read what the others encrypt. Each data
party refuses such a setup before anything derived from its data leaves it; a larger
key than the plan asks for is accepted (more protection, never less).
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
    plan = make_plan("paillier", key_bits=1280)
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
    plan = make_plan("ou", key_bits=1024)
    run = play(plan, heu.OuKeyOwner(1536, workers=1))
    assert run.results["C"].key_bits >= 1536


def test_a_djn_base_is_refused_when_the_plan_says_textbook_randomness() -> None:
    plan = make_plan("paillier", key_bits=1024, djn=False)
    with pytest.raises(ProtocolError, match=r"sent a DJN base, but the plan says djn=False"):
        play(plan, djn_keys_1024())


def test_the_plan_carries_the_key_settings_so_parties_that_differ_are_refused() -> None:
    from islands.config import check_same_plan

    mine, theirs = make_plan("paillier", key_bits=2048), make_plan("paillier", key_bits=1024)
    with pytest.raises(ValidationError, match=r"differs.*key_bits.*2048, 1024"):
        check_same_plan(mine.text(), theirs.text(), party="A", peer="C")


def test_an_ftl_peer_with_a_key_shorter_than_the_plan_is_refused() -> None:
    pytest.importorskip("torch")
    from islands.vfl.ftl import FtlConfig
    from islands.vfl.ftl.protocol import Hello, target

    plan = FtlConfig.build(None, key_bits=1280, dim=2, hidden=(4,), epochs=1,
                           batch_size=8).plan(0)
    short, _, base = djn_keys_1024()

    def deviating_source(party: Any) -> None:
        party.recv("A", "hello")
        party.send("A", "hello", Hello(20, 3, plan.text(), paillier.public_key_to_bytes(short),
                                       int(base), 2))

    roles = {"A": partial(target, X=np.zeros((20, 3)), peer="B", plan=plan),
             "B": deviating_source}
    with pytest.raises(ProtocolError, match=r"hello from 'B'.*at least 1280 bits"):
        run_local(roles, timeout=120)
