"""`islands audit server`: every attack of a deviating server is played and stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from islands.cli import app
from islands.hfl import server_audit


def test_every_attack_is_stopped_and_says_by_what() -> None:
    results = server_audit.audit_server()
    assert len(results) == len(server_audit.ATTACKS) >= 20
    for r in results:
        assert r.stopped, (r.attack, r.detail)
        assert r.detail and r.check
    protections = {r.protection for r in results}
    assert {"secagg", "additive", "dp (local)", "chaos", "paillier"} <= protections


def test_the_command_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "audit.json"
    result = CliRunner().invoke(app, ["audit", "server", "--details", "--json", str(out)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "What stops a deviating server" in result.output
    n = len(server_audit.ATTACKS)
    assert f"{n} of {n} attacks stopped" in result.output
    assert "refuses 'server''s 'share-keys' message" in result.output  # --details
    rows = json.loads(out.read_text())
    assert len(rows) == n and all(r["stopped"] for r in rows)


def test_a_protection_that_gives_way_is_reported_and_fails_the_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the audit is not a list of foregone conclusions: with the chaos check removed the
    # row reads LEAKS and the command exits 1
    from islands.aggregation import protect

    monkeypatch.setattr(protect.ChaosPermutation, "__init__",
                        lambda self, inner=None: None)
    rows = {r.attack: r for r in server_audit.audit_server()}
    chaos = next(r for a, r in rows.items() if "permutation alone" in a)
    assert chaos.outcome == "LEAKS" and not chaos.stopped
    result = CliRunner().invoke(app, ["audit", "server"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert f"{len(rows) - 1} of {len(rows)} attacks stopped" in result.output
