"""Deployment commands: ``islands certs``, ``islands party`` and ``islands protocols``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from islands.cli.common import app, console, save_json, stop_on_error
from islands.deploy.certs import make_certificates
from islands.protocols import names, spec

__all__ = ["certs_command", "party_command", "protocols_command"]


@app.command("certs")
def certs_command(
    parties: Annotated[str, typer.Option(
        help="Comma-separated party names, as in the federation file's \\[parties].")],
    out: Annotated[Path, typer.Option(help="Folder to write ca.pem, ca.key and "
                                           "<party>.pem/<party>.key into.")],
    days: Annotated[int, typer.Option(help="Validity of the certificates.")] = 365,
    force: Annotated[bool, typer.Option(help="Overwrite existing files.")] = False,
) -> None:
    """Create a federation's CA and one key and certificate per party (mutual TLS)."""
    names = [p.strip() for p in parties.split(",") if p.strip()]
    with stop_on_error(2):
        files = make_certificates(names, out, days=days, overwrite=force)
    table = Table(title=f"certificates in {escape(str(out))} (valid {days} days)")
    table.add_column("party")
    table.add_column("give it")
    for name, tls in files.parties.items():
        table.add_row(escape(name), escape(f"{tls.ca.name}, {tls.cert.name}, {tls.key.name}"))
    console.print(table)
    console.print(f"[yellow]keep {escape(str(files.ca_key))} offline[/]: whoever holds it can "
                  "admit any party. Hand each party only ca.pem and its own pair, over a "
                  "channel you trust.")


@app.command("party", help=(
    "Run one organisation's party of a federation, over gRPC with mutual TLS.\n\n"
    f"The federation file's 'protocol' is one of: {', '.join(names())} ('islands "
    "protocols' shows each one's roles)."))
def party_command(
    config: Annotated[Path, typer.Option("--config", help="This party's TOML file.")],
    insecure: Annotated[bool, typer.Option(
        help="No TLS: loopback testing only (refused for any other address).")] = False,
    resume: Annotated[bool, typer.Option(
        help="Horizontal FL: continue from the checkpoints in the output folder.")] = False,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the party's summary here.")
    ] = None,
) -> None:
    """Run one organisation's party of a federation, over gRPC with mutual TLS."""
    from islands.deploy.config import load_party_config
    from islands.deploy.launch import run_configured

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with stop_on_error(2, also=(OSError,)):
        cfg = load_party_config(config, insecure=True if insecure else None)
    fed = cfg.federation
    if cfg.insecure:
        console.print("[bold red]INSECURE: no TLS. Loopback testing only.[/]")
    console.print(f"party [bold]{escape(cfg.name)}[/] of [bold]{escape(fed.name)}[/] "
                  f"({fed.protocol}, {len(fed.parties)} parties); waiting up to "
                  f"{fed.connect_timeout:g} s for the peers")
    with console.status("connecting") as status:
        def ready(run_id: str) -> None:
            status.update(f"run {run_id[:8]}: running {fed.protocol}")
            console.print(f"all {len(fed.parties) - 1} peers reachable; run {run_id[:8]}")

        with stop_on_error(1, also=(OSError,)):
            record = run_configured(cfg, resume=resume, on_ready=ready, tell_peers=True)
    console.print(f"done in {record.total_seconds:.2f} s (role {record.role_seconds:.2f} s,"
                  f" connecting {record.connect_seconds:.2f} s); sent "
                  f"{record.messages_sent} messages, {record.total_bytes_sent / 1e6:.3f} MB")
    console.print(f"wrote {escape(str(cfg.output))}")
    if json_path is not None:
        save_json(json_path, record.to_json())


@app.command("protocols")
def protocols_command(
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the protocols and roles as JSON.")
    ] = None,
) -> None:
    """List the protocols 'islands party' runs, with each one's roles."""
    listing: dict[str, Any] = {}
    table = Table(title="Protocols (the federation file's 'protocol' and section)")
    for col in ("protocol", "what it computes", "role", "the party in that role"):
        table.add_column(col, overflow="fold")
    for name in names():
        found = spec(name)
        listing[name] = {"title": found.title,
                         "roles": {role: r.doc for role, r in found.roles.items()}}
        for k, role in enumerate(found.roles.values()):
            first = k == 0
            table.add_row(escape(name) if first else "", escape(found.title) if first else "",
                          escape(role.name), escape(role.doc),
                          end_section=k == len(found.roles) - 1)
    console.print(table)
    if json_path is not None:
        save_json(json_path, listing)
