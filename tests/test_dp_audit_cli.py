"""``islands audit dp``: the Gaussian mechanism audited from the command line (issue 42)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_faults import releases_without_clip
from islands.cli import app
from islands.experiments import dp_audit
from islands.experiments.dp_audit import AuditSettings, Views, audit_dp, write_dp_audit
from islands.privacy.audit import audit_gaussian


def test_the_real_mechanism_is_consistent_and_the_files_say_so(tmp_path: Path) -> None:
    result = audit_dp("gaussian", AuditSettings(canaries=2_000, noise_multiplier=4.0),
                      sweep="canaries")
    audit = result.views["white-box"]
    assert not result.contradicted and audit.claimed_epsilon is not None
    assert 0 < audit.lower_bound < audit.claimed_epsilon
    assert result.by_canaries is not None and len(result.by_canaries["m"]) >= 4
    written = write_dp_audit(result, tmp_path / "out")
    assert {p.name for p in written} >= {"results.json", "report.md", "dp_audit.png",
                                         "report.html"}
    assert "the one-run lower bound on ε" in (tmp_path / "out" / "report.html").read_text()
    doc = json.loads((tmp_path / "out" / "results.json").read_text())["dp_audit"]
    assert doc["mechanism"] == "gaussian" and doc["contradicted"] is False
    assert doc["views"]["white-box"]["lower_bound"] == audit.lower_bound
    assert "consistent" in (tmp_path / "out" / "report.md").read_text()


def test_the_command_prints_the_bound_and_exits_1_on_a_planted_fault(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["audit", "dp", "--canaries", "2000", "--json",
                             str(tmp_path / "ok.json")])
    assert ok.exit_code == 0, ok.output
    text = " ".join(ok.output.split())
    assert "consistent" in text and "white-box" in text
    assert json.loads((tmp_path / "ok.json").read_text())["dp_audit"]["contradicted"] is False

    def faulty(s: AuditSettings) -> Views:  # the clip skipped, canaries 10× S
        return Views({"white-box": audit_gaussian(
            noise_multiplier=float(s.noise_multiplier or 0), rounds=int(s.rounds or 0),
            canaries=int(s.canaries or 0), clip=s.clip,
            sampling_rate=float(s.sampling_rate or 0), delta=s.delta,
            accountant=s.accountant, confidence=s.confidence, canary_norm=10 * s.clip,
            mechanism=releases_without_clip)}, {"white-box": "the accountant"})

    monkeypatch.setitem(dp_audit.MECHANISMS, "gaussian", faulty)
    bad = runner.invoke(app, ["audit", "dp", "--canaries", "2000", "--noise-multiplier", "4"])
    assert bad.exit_code == 1, bad.output
    assert "contradicted" in " ".join(bad.output.split())


@pytest.mark.parametrize(("args", "hint"), [
    (["--mechanism", "laplace"], "--mechanism"),
    (["--sweep", "rounds"], "--sweep"),
    (["--accountant", "gdp"], "--accountant"),
    (["--sampling-rate", "1.5"], "sampling_rate"),
])
def test_bad_settings_are_named(args: list[str], hint: str) -> None:
    result = CliRunner().invoke(app, ["audit", "dp", "--canaries", "100", *args])
    assert result.exit_code == 2 and hint in " ".join(result.output.split()), result.output


def test_pca_secure_is_consistent_and_elfedpca_as_published_is_contradicted(
        tmp_path: Path) -> None:
    """ELFedPCA's first site knows the others' noise E (its published protocol sends it),
    so the audit's bound exceeds the configured ε; the secure mode is consistent."""
    runner = CliRunner()
    ok = runner.invoke(app, ["audit", "dp", "--mechanism", "pca", "--canaries", "500",
                             "--json", str(tmp_path / "pca.json")])
    assert ok.exit_code == 0, ok.output
    doc = json.loads((tmp_path / "pca.json").read_text())["dp_audit"]
    assert set(doc["views"]) == {"white-box", "black-box"} and not doc["contradicted"]
    bad = runner.invoke(app, ["audit", "dp", "--mechanism", "pca", "--mode", "elfedpca",
                              "--canaries", "500"])
    assert bad.exit_code == 1, bad.output
    assert "contradicted" in " ".join(bad.output.split())


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("mechanism", "views"), [
    ("client-dp", {"aggregate", "final", "uploads"}),
    ("dp-sgd", {"steps", "final"}),
])
def test_the_protocol_and_trainer_mechanisms_run_from_the_command_line(
        tmp_path: Path, mechanism: str, views: set[str]) -> None:
    out = tmp_path / "audit.json"
    result = CliRunner().invoke(app, ["audit", "dp", "--mechanism", mechanism, "--canaries",
                                      "100" if mechanism == "client-dp" else "1000",
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())["dp_audit"]
    assert set(doc["views"]) == views and doc["contradicted"] is False
    assert all(v["compared_with"] for v in doc["views"].values())


DIGITS_DPSGD_TOML = """
name = "digits-dpsgd"
seed = 0
epochs = 2
baseline = false
protect = ["dp-sgd"]

[dp-sgd]
clip = 1.0
noise_multiplier = 1.0

[data]
name = "digits"

[partition]
kind = "iid"
clients = 3

[model]
kind = "mlp"
hidden = [16]

[strategy]
name = "fedavg"
local_steps = 5
batch_size = 32
lr = 0.1
"""


def test_a_dp_sgd_job_is_audited_in_its_own_model_and_at_the_mechanism_level(
        tmp_path: Path) -> None:
    job = tmp_path / "digits-dpsgd.toml"
    job.write_text(DIGITS_DPSGD_TOML)
    out = tmp_path / "audit"
    runner = CliRunner()
    result = runner.invoke(app, ["audit", "dp", str(job), "--canaries", "60", "--out",
                                 str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "own model and data" in text and "consistent" in text
    doc = json.loads((out / "results.json").read_text())["dp_audit"]
    assert doc["job"] == "digits-dpsgd" and doc["mechanism"] == "dp-sgd-job"
    assert set(doc["views"]) == {"aggregate", "final", "mechanism-steps", "mechanism-final"}
    assert doc["canaries"] == 60 and doc["run"]["holder"] in doc["scope"]
    assert doc["views"]["aggregate"]["claimed_epsilon"] == doc["run"]["epsilon"]
    assert "canary holder" in doc["views"]["aggregate"]["compared_with"]
    assert doc["views"]["mechanism-steps"]["canaries"] == 5000
    too_many = runner.invoke(app, ["audit", "dp", str(job), "--canaries", "100000"])
    assert too_many.exit_code == 2
    assert "'canaries' parameter of audit_dpsgd_job" in " ".join(too_many.output.split())


@pytest.mark.slow
def test_the_dp_sgd_example_job_is_audited_in_its_own_model(tmp_path: Path) -> None:
    out = tmp_path / "audit"
    result = CliRunner().invoke(app, ["audit", "dp",
                                      str(ROOT / "examples/fedavg-secagg-dpsgd-quick.toml"),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "results.json").read_text())["dp_audit"]
    assert doc["job"] == "fedavg-secagg-dpsgd-quick" and doc["mechanism"] == "dp-sgd-job"
    assert doc["canaries"] == 256 and doc["contradicted"] is False
    assert doc["run"]["test_accuracy_with_canaries"] > 0.6


@pytest.mark.slow
def test_the_client_dp_example_job_runs_with_canary_clients(tmp_path: Path) -> None:
    out = tmp_path / "audit.json"
    result = CliRunner().invoke(app, ["audit", "dp",
                                      str(ROOT / "examples/apfl-secagg-dp-quick.toml"),
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())["dp_audit"]
    assert doc["mechanism"] == "job" and set(doc["views"]) == {"aggregate", "final"}
    # APFL's batch rule leaves room for this many extra clients: the default shrinks to it
    assert 2 <= doc["canaries"] <= 128 and doc["contradicted"] is False


def test_a_job_without_dp_and_both_forms_at_once_are_refused(tmp_path: Path) -> None:
    runner = CliRunner()
    both = runner.invoke(app, ["audit", "dp", str(ROOT / "examples/fedprox-dirichlet.toml"),
                               "--mechanism", "gaussian"])
    assert both.exit_code == 2 and "not both" in " ".join(both.output.split())
    plain = runner.invoke(app, ["audit", "dp", str(ROOT / "examples/fedprox-dirichlet.toml")])
    assert plain.exit_code == 2
    assert "protect holds 'dp'" in " ".join(plain.output.split())
