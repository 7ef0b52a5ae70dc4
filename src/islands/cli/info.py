"""``islands info`` (what this installation can use) and ``islands demo`` (a secure sum)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import platform
import secrets
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from islands import __version__
from islands.cli.common import app, console
from islands.data import find_fashion_mnist

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
        json_path.write_text(json.dumps(report, indent=2))


@app.command()
def demo(
    parties: Annotated[int, typer.Option(min=2, max=26, help="Number of parties.")] = 3,
    size: Annotated[int, typer.Option(min=1, max=10_000_000, help="Vector length.")] = 4,
    seed: Annotated[int | None, typer.Option(help="Seed for the demo's private values.")] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the result and transcript as JSON.")
    ] = None,
) -> None:
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
        json_path.write_text(json.dumps({
            "parties": list(private), "size": size, "total": result.total.tolist(),
            "max_abs_error": error, "transcript": transcript.to_dict(),
        }, indent=2))
        console.print(f"wrote {json_path}")
    if error > 1e-5 * parties:
        console.print("[red]the secure sum disagrees with the plain sum[/]")
        raise typer.Exit(1)
