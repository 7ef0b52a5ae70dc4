"""`islands audit server`: every attack of a deviating server is played and stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from islands.cli import app
from islands.hfl import server_audit


def test_every_attack_is_stopped_by_the_check_its_row_names() -> None:
    results = server_audit.audit_server()
    assert len(results) == len(server_audit.ATTACKS) >= 40
    for r in results:
        assert r.stopped and r.outcome in ("refused", "charged honestly"), (r.attack, r.detail)
        assert r.detail and r.check
    protections = {r.protection for r in results}
    assert {"secagg", "additive", "dp (local)", "chaos", "paillier", "ckks", "ou"} <= protections
    kinds = [r.kind for r in results]
    assert kinds.count("configuration") == 6 and kinds.count("message") == len(results) - 6
    # the forgeries of issue 37 are played on real model sizes, each refused by the MAC
    for scheme, dim in server_audit.REAL_DIMS.items():
        rows = [r for r in results if r.protection == scheme and f"({dim:,} values)" in r.attack]
        assert len(rows) == 8, scheme
        macs = [r for r in rows if "second upload" not in r.attack]
        assert all("its MAC" in r.detail for r in macs), [r.detail for r in macs]
        (again,) = [r for r in rows if "second upload" in r.attack]
        assert "one upload per round" in again.detail


def test_a_refusal_by_another_check_does_not_count() -> None:
    row = server_audit.Attack("chaos", "use the permutation alone", "configuration",
                              "a check that does not exist", r"no such message",
                              server_audit._chaos_alone, kind="configuration")
    outcome, detail = row.run()
    assert outcome == "OTHER CHECK" and "expected a refusal matching" in detail
    result = server_audit.AttackResult("chaos", "x", "y", "z", outcome, detail)
    assert not result.stopped


def test_the_command_prints_both_tables_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "audit.json"
    result = CliRunner().invoke(app, ["audit", "server", "--only", "chaos", "--details",
                                      "--json", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "What stops a deviating server (its messages)" in result.output
    assert "Settings refused when built" in result.output
    assert "3 of 3 message attacks stopped by the check each row names; 1 of 1 " \
           "configuration checks hold" in result.output
    assert "the dealer 'server' is not a client of this federation" in result.output  # --details
    rows = json.loads(out.read_text())
    assert len(rows) == 4 and all(r["stopped"] for r in rows)
    assert {r["kind"] for r in rows} == {"message", "configuration"}
    nothing = CliRunner().invoke(app, ["audit", "server", "--only", "nothing-of-the-sort"])
    assert nothing.exit_code != 0 and "no row's protection contains" in nothing.output


def test_a_protection_that_gives_way_is_reported_and_fails_the_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the audit is not a list of foregone conclusions: with the chaos check removed the
    # row reads LEAKS and the command exits 1
    from islands.aggregation import protect

    monkeypatch.setattr(protect.ChaosPermutation, "__init__",
                        lambda self, inner=None: None)
    rows = {r.attack: r for r in server_audit.audit_server(only="chaos")}
    chaos = next(r for a, r in rows.items() if "permutation alone" in a)
    assert chaos.outcome == "LEAKS" and not chaos.stopped
    result = CliRunner().invoke(app, ["audit", "server", "--only", "chaos"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "0 of 1 configuration checks hold" in result.output


def test_a_forgery_the_mac_no_longer_checks_reads_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    # with the CKKS MAC check removed, the real-size forgeries open: the rows say so
    from islands.aggregation import homomorphic

    monkeypatch.setattr(homomorphic._Binding, "check_real",
                        lambda self, rnd, names, w, values, tags, tol, *_: 1.0 / float(sum(w)))
    rows = [r for r in server_audit.audit_server(only="ckks") if r.protection == "ckks"
            and "159,010" in r.attack and "second upload" not in r.attack]
    assert rows and all(r.outcome == "LEAKS" for r in rows), [(r.attack, r.outcome)
                                                               for r in rows]
