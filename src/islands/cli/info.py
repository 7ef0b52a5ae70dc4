"""``islands info`` (what this installation can use) and ``islands demo``.

``islands demo`` runs :mod:`islands.experiments.demo`'s parts (Swarm CCA, DP-PCA,
horizontal FL, vertical FL, SecureBoost, transfer learning and contribution) and writes
their report;
``islands demo securesum`` is the three-party secure sum it showed before.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import secrets
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from islands import __version__
from islands.cli.common import app, console, save_json, stop_on_error
from islands.data import find_fashion_mnist
from islands.errors import ValidationError
from islands.reporting import write_json

__all__ = ["OPTIONAL_PARTS", "demo", "info"]

OPTIONAL_PARTS: dict[str, tuple[str, str]] = {
    # distribution name: (import name, what islands uses it for)
    "torch": ("torch", "horizontal FL training"),
    "tenseal": ("tenseal", "CKKS homomorphic encryption"),
    "phe": ("phe", "Paillier homomorphic encryption"),
    "gmpy2": ("gmpy2", "fast big-integer arithmetic for Paillier"),
    "dp-accounting": ("dp_accounting", "differential-privacy accounting"),
    "grpcio": ("grpc", "one process per organisation over gRPC + mutual TLS"),
    "ray": ("ray", "large simulations"),
    "pyarrow": ("pyarrow", "Parquet data files"),
    "matplotlib": ("matplotlib", "plots in experiment reports"),
    "onnxscript": ("onnxscript", "model.onnx (torch's ONNX exporter; with onnx)"),
    "onnxruntime": ("onnxruntime", "running model.onnx without PyTorch"),
}


def _installed(dist: str, module: str) -> str | None:
    """Version of an installed distribution, found without importing it."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "installed"


@app.command()
def info(
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the report as JSON here.")
    ] = None,
) -> None:
    """Show the optional components and data sets this installation can use."""
    parts = {dist: _installed(dist, mod) for dist, (mod, _) in OPTIONAL_PARTS.items()}
    fmnist = find_fashion_mnist()
    report: dict[str, Any] = {
        "islands": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "optional": parts,
        "datasets": {
            "fashion_mnist": str(fmnist) if fmnist else None,
            "sklearn_bundled": ["digits", "breast_cancer", "wine", "diabetes"],
        },
    }
    console.print(f"[bold]islands {__version__}[/] on Python {report['python']}, "
                  f"numpy {report['numpy']}")
    table = Table(title="Optional components", show_lines=False)
    for col in ("package", "version", "used for"):
        table.add_column(col)
    for dist, (_, purpose) in OPTIONAL_PARTS.items():
        version = parts[dist]
        table.add_row(dist, version or "[red]not installed[/]", purpose)
    console.print(table)
    data = Table(title="Data sets")
    data.add_column("data set")
    data.add_column("where")
    missing = "[red]not found[/] (apt-get install dataset-fashion-mnist, or pass a path)"
    data.add_row("Fashion-MNIST", str(fmnist) if fmnist else missing)
    data.add_row("digits, breast_cancer, wine, diabetes", "bundled with scikit-learn")
    console.print(data)
    if json_path is not None:
        save_json(json_path, report)


DEMO_WHAT = ("all", "securesum")


@app.command()
def demo(
    what: Annotated[str, typer.Argument(
        help="'all' (default): the whole system, part by part; 'securesum': the "
             "three-party secure sum.")] = "all",
    part: Annotated[list[str] | None, typer.Option(
        "--part", help="Run only this part (repeatable, or a comma list): scca, pca, hfl, "
                       "vfl, secureboost, ftl.")] = None,
    out: Annotated[Path, typer.Option(
        help="Folder for results.json, report.md and the figures.")] = Path("runs/demo"),
    quick: Annotated[bool, typer.Option(
        "--quick", help="Tiny sizes (seconds a part; for tests, the figures mean little).")]
    = False,
    parties: Annotated[int, typer.Option(
        min=2, max=26, help="securesum: number of parties.")] = 3,
    size: Annotated[int, typer.Option(
        min=1, max=10_000_000, help="securesum: vector length.")] = 4,
    seed: Annotated[int | None, typer.Option(
        help="Seed of the data splits (securesum: of the private values).")] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the results as JSON here.")
    ] = None,
) -> None:
    """Show the whole system on real data in a few minutes (or ``securesum``)."""
    if what == "securesum":
        if part:
            raise typer.BadParameter("--part is for the whole demo, not securesum",
                                     param_hint="--part")
        _securesum(parties, size, seed, json_path)
        return
    if what != "all":
        raise typer.BadParameter(f"{what!r}: use 'all' (default) or 'securesum'",
                                 param_hint="WHAT")
    _demo_parts(part, out, quick, 0 if seed is None else seed, json_path)


def _demo_parts(part: list[str] | None, out: Path, quick: bool, seed: int,
                json_path: Path | None) -> None:
    from islands.experiments.demo import check_parts, run_demo

    try:
        names = check_parts(part)
    except ValidationError as exc:
        raise typer.BadParameter(str(exc), param_hint="--part") from None
    console.print(f"[bold]islands demo[/]: {', '.join(names)}"
                  f"{' (quick sizes)' if quick else ''}; writing {escape(str(out))}/")
    start = time.perf_counter()

    def say(msg: str) -> None:
        console.print(f"[dim]{time.perf_counter() - start:6.1f}s[/] {escape(msg)}",
                      highlight=False)

    with stop_on_error(1):
        result = run_demo(out, parts=names, quick=quick, seed=seed, progress=say)
    table = Table(title=f"islands demo: {len(result.parts)} parts in "
                        f"{result.wall_time_s:.0f} s")
    for col in ("part", "what ran", "key figure", "seconds", "bytes exchanged"):
        table.add_column(col, justify="right" if col in ("seconds", "bytes exchanged")
                         else "left")
    for p in result.parts:
        key = f"[yellow]{escape(p.key_figure)}[/]" if p.skipped else escape(p.key_figure)
        table.add_row(p.name, escape(p.ran), key, f"{p.seconds:.1f}",
                      f"{p.bytes_exchanged:,}")
    console.print(table)
    console.print(f"wrote {escape(str(out / 'results.json'))}, "
                  f"{escape(str(out / 'report.md'))}, "
                  f"{sum(len(p.figures) for p in result.parts)} figures and "
                  f"[bold]{escape(str(out / 'report.html'))}[/] (open it in a browser)")
    if json_path is not None:
        write_json(json_path, result.to_json())
        console.print(f"wrote {escape(str(json_path))}")


def _securesum(parties: int, size: int, seed: int | None, json_path: Path | None) -> None:
    """Run a secure sum among parties that never reveal their own vectors."""
    from islands.securesum import secure_sum

    names = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan",
             "judy", "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent",
             "ursula", "victor", "walter", "xavier", "yvonne", "zoe", "amir", "bea", "cyd"]
    rng = np.random.default_rng(seed if seed is not None else secrets.randbits(64))
    private = {names[i]: np.round(rng.normal(50.0, 20.0, size), 3) for i in range(parties)}
    console.print(f"[bold]Secure sum[/] among {parties} parties, vectors of length {size}: "
                  "each splits its vector into random additive shares over Z_2^64 "
                  "(fixed point), so no party sees another's values.")
    result = secure_sum(private)
    expected = np.sum(list(private.values()), axis=0)
    error = float(np.max(np.abs(result.total - expected)))

    shown = min(size, 6)
    values = Table(title="Inputs (each known only to its owner) and the secure sum")
    values.add_column("party")
    values.add_column(f"first {shown} values" if size > shown else "values")
    for name, vec in private.items():
        values.add_row(name, escape(np.array2string(vec[:shown], precision=3)))
    total = escape(np.array2string(result.total[:shown], precision=3))
    values.add_row("[bold]secure sum[/]", total)
    console.print(values)
    console.print(f"max |secure sum - plain sum| = {error:.2e}")

    transcript = result.transcript
    msgs = Table(title=f"Transcript: {len(transcript)} messages, {transcript.total_bytes} bytes")
    for col in ("tag", "messages", "bytes", "payload"):
        msgs.add_column(col)
    for tag, tot in transcript.totals("tag").items():
        summary = transcript.with_tag(tag)[0].summary
        msgs.add_row(escape(tag), str(tot.messages), str(tot.nbytes), escape(summary))
    console.print(msgs)
    by_party = Table(title="Traffic by party")
    for col in ("party", "sent msgs", "sent bytes", "received msgs", "received bytes"):
        by_party.add_column(col)
    sent, recv = transcript.totals("sender"), transcript.totals("receiver")
    for name in private:
        by_party.add_row(name, str(sent[name].messages), str(sent[name].nbytes),
                         str(recv[name].messages), str(recv[name].nbytes))
    console.print(by_party)
    if json_path is not None:
        save_json(json_path, {
            "parties": list(private), "size": size, "total": result.total.tolist(),
            "max_abs_error": error, "transcript": transcript.to_dict()})
    if error > 1e-5 * parties:
        console.print("[red]the secure sum disagrees with the plain sum[/]")
        raise typer.Exit(1)
