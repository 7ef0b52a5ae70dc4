"""Package-level contracts: light import, CLI, no pickle."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import islands
from islands.cli import app

HEAVY = ("torch", "opacus", "tenseal", "grpc", "ray", "phe", "gmpy2", "pyarrow", "matplotlib",
         "sklearn", "typer", "rich")


def test_import_islands_stays_light() -> None:
    code = (
        "import sys, islands, islands.runtime, islands.crypto, islands.data, islands.securesum,"
        " islands.hfl, islands.hfl.metrics, islands.hfl.strategy, islands.hfl.protocol,"
        " islands.aggregation.protect, islands.aggregation.secagg, islands.aggregation.additive,"
        " islands.aggregation.homomorphic, islands.privacy;"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_version_is_exposed() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", islands.__version__)
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and islands.__version__ in result.output


def test_cli_info_reports_components(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["info", "--json", str(tmp_path / "info.json")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "info.json").read_text())
    assert set(report["optional"]) >= {"torch", "tenseal", "phe", "grpcio", "ray"}
    assert "Fashion-MNIST" in result.output


def test_cli_demo_runs_the_secure_sum(tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    result = CliRunner().invoke(app, ["demo", "securesum", "--seed", "3", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "Transcript: 18 messages" in result.output
    doc = json.loads(out.read_text())
    assert doc["parties"] == ["alice", "bob", "carol"] and doc["max_abs_error"] < 1e-6
    assert doc["transcript"]["messages"] == 18


def test_cli_demo_refuses_bad_options() -> None:
    result = CliRunner().invoke(app, ["demo", "--parties", "1"])
    assert result.exit_code != 0


def test_cli_info_and_reproductions_say_when_fashion_mnist_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISLANDS_FASHION_MNIST", str(tmp_path / "nowhere"))
    info = CliRunner().invoke(app, ["info", "--json", str(tmp_path / "info.json")])
    assert info.exit_code == 0
    assert json.loads((tmp_path / "info.json").read_text())["datasets"]["fashion_mnist"] is None
    assert "not found" in info.output
    for name in ("apfl", "contribution"):
        result = CliRunner().invoke(app, ["reproduce", name, "--quick", "--out",
                                          str(tmp_path / name)])
        assert result.exit_code == 2, result.output
        flat = " ".join(result.output.split())
        # progress lines come first (off a terminal); the error is the last thing said
        assert "error:" in flat and flat[flat.index("error:"):].startswith(
            "error: Fashion-MNIST files not found"), flat
        assert "dataset-fashion-mnist" in flat and "Traceback" not in flat


def test_no_pickle_in_the_package() -> None:
    src = Path(islands.__file__).parent
    offenders = [str(p) for p in src.rglob("*.py")
                 if re.search(r"\bimport pickle\b|pickle\.loads|cloudpickle|allow_pickle=True",
                              p.read_text())]
    assert offenders == []


@pytest.mark.parametrize("name", ["scca", "pca", "vfl", "ftl", "apfl", "contribution"])
def test_every_reproduction_prints_an_islands_error_as_one_line(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from islands.errors import ValidationError

    def broken(*args: object, **kwargs: object) -> None:
        raise ValidationError("the settings are wrong")

    monkeypatch.setattr(importlib.import_module(f"islands.experiments.{name}"),
                        f"reproduce_{name}", broken)
    result = CliRunner().invoke(app, ["reproduce", name, "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert " ".join(result.output.split()) == "error: the settings are wrong"


def test_cli_loads_no_protocol_package() -> None:
    """``islands --help`` imports the registry's names, not the protocols or heavy parts."""
    packages = ("islands.securesum", "islands.cca", "islands.pca", "islands.hfl",
                "islands.vfl", "islands.psi", "islands.experiments", "pydantic", "scipy")
    heavy = tuple(m for m in HEAVY if m not in ("typer", "rich", "grpc")) + packages
    code = f"import sys, islands.cli; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_cli_protocols_lists_every_registered_protocol(tmp_path: Path) -> None:
    from islands.protocols import names, spec

    result = CliRunner().invoke(app, ["protocols", "--json", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    listing = json.loads((tmp_path / "p.json").read_text())
    assert list(listing) == list(names())
    for name in names():
        found = spec(name)
        assert listing[name] == {"title": found.title,
                                 "roles": {r: found.roles[r].doc for r in found.roles}}
        for word in (name, *found.roles):
            assert f" {word} " in result.output


def test_party_help_and_the_deployment_docs_list_the_registry() -> None:
    from islands.protocols import names

    result = CliRunner().invoke(app, ["party", "--help"])
    assert result.exit_code == 0
    assert f"is one of: {', '.join(names())} " in " ".join(result.output.split())
    docs = (Path(__file__).resolve().parents[1] / "docs" / "deployment.md").read_text()
    intro = docs.split("## The pieces")[0]
    assert re.findall(r"^- `(\w+)`:", intro, flags=re.MULTILINE) == list(names())


@pytest.mark.parametrize("name", ["scca", "pca", "vfl", "ftl", "apfl", "contribution"])
def test_every_reproduction_command_passes_its_options(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands are built from one table: each passes out, quick, seed and its own."""
    import importlib

    from islands.errors import ValidationError

    seen: dict[str, object] = {}

    def record(out: Path, **kwargs: object) -> None:
        seen.update(kwargs, out=out)
        raise ValidationError("stop here")

    monkeypatch.setattr(importlib.import_module(f"islands.experiments.{name}"),
                        f"reproduce_{name}", record)
    extra = ["--epochs", "3", "--model", "cnn"] if name == "apfl" else []
    result = CliRunner().invoke(app, ["reproduce", name, "--quick", "--seed", "7", "--out",
                                      str(tmp_path), *extra])
    assert result.exit_code == 2, result.output
    progress = seen.pop("progress")
    assert callable(progress)
    expected = {"out": tmp_path, "quick": True, "random_state": 7}
    assert seen == ({**expected, "epochs": 3, "model": "cnn"} if name == "apfl" else expected)
    default = CliRunner().invoke(app, ["reproduce", name])
    assert default.exit_code == 2 and seen["out"] == Path("reports") / name
    assert seen["quick"] is False and seen["random_state"] == 0


@pytest.mark.parametrize("command", [["audit", "scca"],
                                     ["audit", "pca", "--dataset", "fashion_mnist"],
                                     ["audit", "secureboost", "--data", "fashion_mnist"]])
def test_audits_say_in_one_line_when_fashion_mnist_is_missing(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISLANDS_FASHION_MNIST", str(tmp_path / "nowhere"))
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert flat.startswith("error: Fashion-MNIST train files not found"), flat
    assert "dataset-fashion-mnist" in flat and "Traceback" not in flat


def test_a_reproduction_result_is_its_results_json() -> None:
    """The envelope keeps results.json's order; a section cannot hide one of its keys."""
    from islands.experiments.report import ReproductionResult, claim, to_jsonable

    agreement = [claim("a", "x", "agrees"), claim("b", "y", "differs"),
                 claim("c", "z", "agrees")]
    result = ReproductionResult(settings={"quick": True}, sections={"rows": [1], "paper": {}},
                                agreement=agreement, figures=["f.png"], wall_time_s=1.5)
    assert list(result.to_json()) == ["settings", "rows", "paper", "agreement", "figures",
                                      "wall_time_s"]
    assert to_jsonable({"run": result}) == {"run": result.to_json()}
    assert result.verdicts == {"agrees": 2, "differs": 1}
    skipping = ReproductionResult(settings={}, sections={}, agreement=[], figures=[],
                                  wall_time_s=0.0, skipped={"fashion_mnist": "not found"})
    assert list(skipping.to_json()) == ["settings", "agreement", "skipped", "figures",
                                        "wall_time_s"]
    with pytest.raises(ValueError, match=r"\['figures'\]"):
        ReproductionResult(settings={}, sections={"figures": []}, agreement=[], figures=[],
                           wall_time_s=0.0)
