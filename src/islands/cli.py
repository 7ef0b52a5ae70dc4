"""The ``islands`` command line.

Commands: ``islands --version``, ``islands info`` (which optional parts and data sets are
installed), ``islands demo`` (a three-party secure sum through the runtime, with its
transcript), ``islands run JOB.toml`` (a federated training job), ``islands audit scca`` /
``islands audit pca`` (what each protocol's parties recover from each other) and
``islands reproduce scca|pca|apfl|vfl|ftl`` (a paper's experiments as a report),
``islands certs`` (a federation's CA and party certificates) and ``islands party --config
FILE`` (one organisation's party of a deployed federation, over gRPC with mutual TLS).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import platform
import secrets
import signal
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from islands import __version__

__all__ = ["app", "main"]

app = typer.Typer(
    name="islands",
    help="Privacy-preserving computation across data islands.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold a party's data or keys
)
console = Console()

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


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"islands {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True,
                     help="Print the version and exit."),
    ] = False,
) -> None:
    """Privacy-preserving computation across data islands."""


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
    from islands.data import find_fashion_mnist

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


audit_app = typer.Typer(help="Attacks that show what each protocol really reveals.",
                        no_args_is_help=True)
app.add_typer(audit_app, name="audit")


@audit_app.command("scca")
def audit_scca_command(
    dataset: Annotated[str, typer.Option(
        help="Two views of the same samples: 'fashion_mnist' or 'digits' (left/right "
             "image halves).")] = "fashion_mnist",
    n_samples: Annotated[int, typer.Option(min=20, help="Rows used (Fashion-MNIST train).")]
    = 10_000,
    seed: Annotated[int, typer.Option(help="Chooses the rows of Y the attacker knows.")] = 0,
    extra_rows: Annotated[int, typer.Option(
        min=0, help="Also rebuild Y from this many known rows beyond q (rare pixels need "
                    "more rows to be pinned down).")] = 10,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the recovery errors as JSON.")
    ] = None,
) -> None:
    """Attack Swarm CCA on the messages each peer received; print what they recover."""
    from islands.cca.audit import audit_scca
    from islands.data import load_fashion_mnist, load_sklearn, split_image_views

    if dataset == "fashion_mnist":
        ds = load_fashion_mnist(split="train", n_samples=n_samples)
    elif dataset == "digits":
        ds = load_sklearn("digits")
    else:
        raise typer.BadParameter("use 'fashion_mnist' or 'digits'", param_hint="--dataset")
    assert ds.image_shape is not None
    left, right = split_image_views(ds.X, ds.image_shape)
    console.print(f"SCCA between the left and right halves of {dataset} "
                  f"({left.shape[0]} samples, {left.shape[1]}+{right.shape[1]} features), "
                  "perturbed as the paper recommends; attacks use only received messages.")
    with console.status("fitting SCCA and running the attacks"):
        report = audit_scca(left, right, random_state=seed, extra_rows=extra_rows)
    table = Table(title="What each peer recovers (relative errors; 0 = exact)")
    for col in ("attacker", "recovers", "error"):
        table.add_column(col)
    table.add_row("S2", "S1's secret factor k1", f"{report.k1_rel_error:.2e}")
    table.add_row("S1", "S2's secret factor k2", f"{report.k2_rel_error:.2e}")
    table.add_row("S1", "projector onto span(Y)", f"{report.projector_error:.2e}")
    table.add_row("S1", f"all of Y (centred) from q={report.known_rows} known rows",
                  f"{report.y_reconstruction_rel_error:.2e}")
    table.add_row("S1", f"all of Y (centred) from q+{report.extra_rows} known rows",
                  f"{report.y_reconstruction_rel_error_extra_rows:.2e}")
    table.add_row("S1", f"all of Y (raw) from q+1={report.known_rows + 1} known rows",
                  f"{report.y_raw_reconstruction_rel_error:.2e}")
    console.print(table)
    console.print("The perturbation k1, k2 does not protect the shared parameters: each peer "
                  "recovers the other's factor, and S1 learns span(Y), hence Y from a few known "
                  "rows. On sparse images q random rows can miss a rarely-lit pixel "
                  "altogether; more known rows (--extra-rows) make the recovery exact.")
    if json_path is not None:
        json_path.write_text(json.dumps({"dataset": dataset, **report.to_dict()}, indent=2))
        console.print(f"wrote {json_path}")


@audit_app.command("server")
def audit_server_command(
    details: Annotated[bool, typer.Option(
        "--details", help="Also print each refusal as the party gave it.")] = False,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write every attack and its outcome as JSON.")
    ] = None,
) -> None:
    """Play a deviating server against each protection; print which check stops which attack."""
    from islands.hfl.server_audit import audit_server

    console.print("A server that sends other numbers than the protocol says, against honest "
                  "clients holding their own configuration and identity (exact messages).")
    with console.status("playing the attacks"):
        results = audit_server()
    table = Table(title="What stops a deviating server")
    for col in ("protection", "the server tries to", "stopped by", "outcome"):
        table.add_column(col, overflow="fold")
    for r in results:
        outcome = r.outcome if r.stopped else f"[bold red]{r.outcome}[/]"
        table.add_row(escape(r.protection), escape(r.attack), escape(r.check), outcome)
    console.print(table)
    if details:
        for i, r in enumerate(results, 1):
            console.print(f"{i:2d}. {escape(r.detail)}")
    leaks = [r for r in results if not r.stopped]
    console.print(f"{len(results) - len(leaks)} of {len(results)} attacks stopped. What each "
                  "protection holds against, and what it does not: docs/threat-model.md.")
    if json_path is not None:
        json_path.write_text(json.dumps([r.to_dict() for r in results], indent=2) + "\n")
        console.print(f"wrote {escape(str(json_path))}")
    if leaks:
        raise typer.Exit(1)


@audit_app.command("pca")
def audit_pca_command(
    dataset: Annotated[str, typer.Option(
        help="'digits' or 'fashion_mnist' (rows split over the sites)")] = "digits",
    sites: Annotated[int, typer.Option(min=2, max=100, help="Number of sites.")] = 5,
    n_samples: Annotated[int, typer.Option(min=20, help="Rows used (Fashion-MNIST).")]
    = 5_000,
    epsilon: Annotated[float, typer.Option(help="ε in (0, 1).")] = 0.5,
    delta: Annotated[float, typer.Option(help="δ in (0, 1).")] = 1e-5,
    seed: Annotated[int, typer.Option(help="Seed of the split and the schemes.")] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the recovery errors as JSON.")
    ] = None,
) -> None:
    """Attack federated DP-PCA from site 1: ELFedPCA leaks every site's matrix, secure not."""
    from islands.data import load_fashion_mnist, load_sklearn, partition_iid
    from islands.pca.audit import audit_pca

    if dataset == "fashion_mnist":
        ds = load_fashion_mnist(split="train", n_samples=n_samples)
    elif dataset == "digits":
        ds = load_sklearn("digits")
    else:
        raise typer.BadParameter("use 'fashion_mnist' or 'digits'", param_hint="--dataset")
    parts = [ds.X[idx] for idx in partition_iid(ds.n_samples, sites, random_state=seed)]
    console.print(f"{dataset}: {ds.n_samples} rows × {ds.n_features} features over {sites} "
                  f"sites; ε = {epsilon}, δ = {delta}. Site 1 attacks with what it received.")
    with console.status("fitting elfedpca and secure, running the attack"):
        report = audit_pca(parts, epsilon=epsilon, delta=delta, random_state=seed)
    table = Table(title="Site 1 recovering the other sites' local matrices A_i")
    for col in ("mode", "error", "measured against"):
        table.add_column(col)
    table.add_row("elfedpca", f"{report.elfedpca_recovery_rel_error:.2e}", "‖A_i‖ (0 = exact)")
    table.add_row("secure", f"{report.secure_recovery_rel_error:.2e}", "noise scale τ·d")
    table.add_row("secure", f"{report.secure_recovery_rel_error_data:.2e}", "‖A_i‖")
    console.print(table)
    console.print("In the published scheme every site knows the noise E, so site 1 subtracts "
                  "it and reads each site's second-moment matrix exactly. In secure mode it "
                  "reads pairwise-masked ring elements: noise-free recovery fails.")
    if json_path is not None:
        json_path.write_text(json.dumps({"dataset": dataset, **report.to_dict()}, indent=2))
        console.print(f"wrote {json_path}")


@audit_app.command("gradients")
def audit_gradients_command(
    out: Annotated[Path | None, typer.Option(
        help="Folder for gradient_leakage.png (the image and each recovery) and "
             "audit.json.")] = None,
    protections: Annotated[str, typer.Option(
        help="Comma-separated, among plain, secagg, ckks, dp ('ckks' also runs the "
             "collusion of a client with the server).")] = "plain,secagg,ckks,dp",
    dataset: Annotated[str | None, typer.Option(
        help="'fashion_mnist' or 'digits' (default: Fashion-MNIST, digits if it is "
             "missing).")] = None,
    sample: Annotated[int | None, typer.Option(
        min=0, help="Training row client 1 holds (default: drawn from --seed).")] = None,
    dp_clip: Annotated[float, typer.Option(help="DP clip norm S.")] = 1.0,
    dp_noise: Annotated[float, typer.Option(help="DP noise multiplier σ.")] = 1.0,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the samples and the model.")] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the result (key 'errors') as JSON.")
    ] = None,
) -> None:
    """Attack one client's one-sample update from the server (APFL §2.1), per protection."""
    from islands.experiments.report import write_json
    from islands.hfl.audit import PROTECTIONS, audit_gradients

    names = [p.strip() for p in protections.split(",") if p.strip()]
    if not names or any(p not in PROTECTIONS for p in names):
        raise typer.BadParameter(f"a comma-separated subset of {', '.join(PROTECTIONS)}",
                                 param_hint="--protections")
    if dataset not in (None, "fashion_mnist", "digits"):
        raise typer.BadParameter("use 'fashion_mnist' or 'digits'", param_hint="--dataset")
    console.print("Three clients, one FedAvg round of one full-batch SGD step each; client 1 "
                  "holds one image. The server attacks what it received: "
                  "x_i = ΔW\\[j,i]/Δb\\[j] on the first layer.")
    with (_stop_on_error(1),
          console.status("running one federation per protection and the attacks")):
        result = audit_gradients(out, protections=names, seed=seed, sample=sample,
                                 dp_clip=dp_clip, dp_noise=dp_noise, dataset=dataset)
    if "dataset" in result["notes"]:
        console.print(f"[yellow]{escape(result['notes']['dataset'])}[/]")
    table = Table(title=f"Server's recovery of client 1's image ({result['dataset']} "
                        f"#{result['sample_index']}, label {result['label']}); "
                        "error ‖x̂ − x‖/‖x‖, 0 = exact, 1 = guessing 0")
    for col in ("protection", "error", "readings"):
        table.add_column(col, justify="right" if col == "error" else "left")
    for name, error in result["errors"].items():
        readings = ", ".join(f"{view} {value:.2e}" for view, value
                             in result["views"].get(name, {}).items())
        colour = "red" if error < 0.1 else "green"
        table.add_row(escape(name), f"[{colour}]{error:.2e}[/]", escape(readings))
    console.print(table)
    for name, note in result["notes"].items():
        if name != "dataset":
            console.print(f"[bold]{escape(name)}[/]: {escape(note)}")
    if result.get("figure"):
        console.print(f"figure: {escape(str(result['figure']))}")
    if result.get("json"):
        console.print(f"wrote {escape(str(result['json']))}")
    if json_path is not None:
        write_json(json_path, result)
        console.print(f"wrote {escape(str(json_path))}")


@app.command("run")
def run_command(
    job_file: Annotated[Path, typer.Argument(help="The job's TOML file (see examples/).")],
    resume: Annotated[bool, typer.Option(
        help="Continue a killed run from the checkpoints in its output folder.")] = False,
    output: Annotated[Path | None, typer.Option(
        help="Output folder (default: the job's 'output').")] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the results JSON here.")
    ] = None,
) -> None:
    """Run a federated training job: progress per round, a summary, JSON and curves."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from islands.errors import IslandsError
    from islands.hfl.job import load_job, run_job, write_outputs
    from islands.vfl.job import is_vertical

    if is_vertical(job_file):
        _run_vertical(job_file, output, json_path)
        return
    with _stop_on_error(2):
        job = load_job(job_file)
    out = output if output is not None else Path(job.output)
    protect = f" protected by {' + '.join(job.protect)}" if job.protect else ""
    on_ray = ""
    if job.backend == "ray":
        where = escape(job.ray_address) if job.ray_address else "a local instance"
        on_ray = f", training on Ray ({where})"
    console.print(f"job [bold]{escape(job.name)}[/]: {job.strategy['name']}{protect} on "
                  f"{job.data['name']}, {job.epochs} epoch(s){on_ray}, output {escape(str(out))}")
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        fl_task = bar.add_task("federated", total=job.epochs,
                               info="starting Ray…" if job.backend == "ray" else "")

        stopping = threading.Event()

        def on_round(record: Any, epoch: Any) -> None:
            if stopping.is_set():
                # called before the round's checkpoint: after Ctrl-C no round whose
                # clients were stopped half-way is saved as if they had dropped out
                raise RuntimeError("interrupted by Ctrl-C")
            acc = "" if record.accuracy is None else f" local acc {record.accuracy:.3f}"
            eps = "" if record.epsilon is None else f" ε={record.epsilon:.2f}"
            if record.sample_epsilon is not None:
                eps += f" DP-SGD ε={record.sample_epsilon:.2f}"
            info = f"round {record.round} τ={record.tau}{acc}{eps}"
            if epoch is not None and epoch.test:
                key = "accuracy" if "accuracy" in epoch.test else "r2"
                info += f" | epoch {epoch.epoch} test {key} {epoch.test[key]:.4f}"
            bar.update(fl_task, completed=record.epoch, info=info)

        cl_task = bar.add_task("centralised", total=job.epochs, info="", visible=job.baseline)

        def on_baseline(epoch: int, epochs: int) -> None:
            bar.update(cl_task, completed=epoch, info=f"epoch {epoch}/{epochs}")

        previous = signal.getsignal(signal.SIGINT)
        if (previous is signal.default_int_handler
                and threading.current_thread() is threading.main_thread()):
            def on_sigint(signum: int, frame: Any) -> None:
                stopping.set()  # before anything is torn down
                signal.default_int_handler(signum, frame)

            signal.signal(signal.SIGINT, on_sigint)
        try:
            result = run_job(job, resume=resume, output=out, callback=on_round,
                             baseline_callback=on_baseline)
        except IslandsError as exc:
            if not stopping.is_set():
                console.print(f"[red]error:[/] {escape(str(exc))}")
                raise typer.Exit(1) from exc
            result = None
        except KeyboardInterrupt:
            result = None
        finally:
            signal.signal(signal.SIGINT, previous)
    if result is None:  # Ctrl-C: said after the progress bars are drawn for the last time
        _interrupted_job(job, job_file, output, out)
        raise typer.Exit(130)
    written = write_outputs(result, out, json_path=json_path)
    _summarise_job(result)
    console.print("wrote " + ", ".join(escape(str(p)) for p in written))


def _interrupted_job(job: Any, job_file: Path, output: Path | None, out: Path) -> None:
    """Say, after Ctrl-C, whether and how the run can be resumed."""
    import shlex

    from islands.hfl.job import can_resume
    from islands.hfl.protocol import SERVER_FILE

    console.print("[yellow]interrupted[/]")
    if not (out / "checkpoints" / SERVER_FILE).is_file():
        console.print("no round was checkpointed yet: run the job again to start it")
    elif not can_resume(job):
        console.print(f"protect = {job.protect} keeps the model hidden from the server, so "
                      "the run cannot be resumed: run the job again to start it afresh")
    else:
        command = ["islands", "run", str(job_file), "--resume"]
        if output is not None:
            command += ["--output", str(output)]
        console.print(f"checkpoints in {escape(str(out / 'checkpoints'))}; to continue, "
                      f"run:\n  {escape(shlex.join(command))}", soft_wrap=True)


def _run_vertical(job_file: Path, output: Path | None, json_path: Path | None) -> None:
    """Run a vertical job (kind = "vertical"): alignment, encrypted training, test metrics."""
    from islands.vfl.job import load_vertical_job, run_vertical, write_vertical_outputs

    with _stop_on_error(2):
        job = load_vertical_job(job_file)
    out = output if output is not None else Path(job.output)
    m = job.model
    console.print(f"job [bold]{escape(job.name)}[/]: vertical {m['kind']} regression on "
                  f"{job.data['name']}, {job.parties['passive']} passive part"
                  f"{'y' if job.parties['passive'] == 1 else 'ies'} + B + coordinator, "
                  f"{m['key_bits']}-bit Paillier{' (DJN)' if m['djn'] else ''}, up to "
                  f"{m['epochs']} epochs, output {escape(str(out))}")
    with console.status("starting") as status, _stop_on_error(1):
        result = run_vertical(job, progress=lambda msg: status.update(escape(msg)))
    written = write_vertical_outputs(result, out, json_path=json_path)
    table = Table(title=f"{job.name}: test metrics")
    table.add_column("model")
    keys = ["accuracy", "auc"] if m["kind"] == "logistic" else ["r2", "mse"]
    for key in keys:
        table.add_column(key, justify="right")
    metrics = result["metrics"]
    table.add_row("vertical, encrypted", *(f"{metrics[k]:.4f}" for k in keys))
    table.add_row("scikit-learn, joined data", *(f"{metrics['sklearn_' + k]:.4f}" for k in keys))
    console.print(table)
    split = result["per_epoch_split"]
    parts = ", ".join(f"{name}: HE {c['he']:.2f} s, compute {c['compute']:.3f} s, messaging "
                      f"{c['messaging']:.2f} s" for name, c in split.items())
    epoch_s = result["epoch_seconds"]
    console.print(f"{result['epochs_run']} epochs, loss {result['loss_history'][0]:.4f} → "
                  f"{result['loss_history'][-1]:.4f}; {np.mean(epoch_s):.2f} s per epoch "
                  f"({parts}); {result['bytes'] / 1e6:.2f} MB exchanged")
    if result["aligned_ids"] is not None:
        console.print(f"PSI aligned {result['aligned_ids']} rows")
    console.print("wrote " + ", ".join(escape(str(p)) for p in written))


def _summarise_job(result: dict[str, Any]) -> None:
    """One screen: the federated model against its baseline, and what the run cost."""
    regression = result["job"]["task"] == "regression"
    keys = ("mse", "rmse", "mae", "r2") if regression else ("accuracy", "precision", "recall",
                                                            "f1")
    table = Table(title=f"{result['job']['name']}: test metrics")
    table.add_column("model")
    for key in keys:
        table.add_column(key, justify="right")
    table.add_column("aggregations", justify="right")
    table.add_row(f"federated ({result['job']['strategy']['name']})",
                  *(f"{result[k]:.4f}" for k in keys), str(result["aggregations"]))
    base = result.get("baseline")
    if base is not None:
        table.add_row("centralised", *(f"{base[k]:.4f}" for k in keys), "–")
        closed = base.get("closed_form")
        if closed is not None:
            table.add_row("closed-form ridge", *(f"{closed['test'][k]:.4f}" for k in keys), "–")
    console.print(table)
    facts = [f"{result['rounds']} rounds, {result['seconds_per_round']['mean'] * 1000:.1f} ms "
             f"per round, {result['bytes']['total'] / 1e6:.1f} MB on the wire"]
    if "dev_avg" in result:
        facts.append(f"Dev_avg {result['dev_avg']:.4f}")
    if result.get("contribution"):
        _print_contribution(result["contribution"])
    if result["dropouts"]:
        facts.append(f"{len(result['dropouts'])} dropout(s)")
    if result.get("protect"):
        facts.append("protected by " + " + ".join(result["protect"]))
    if result.get("privacy"):
        facts.append(f"privacy spent ε = {result['privacy']['epsilon']:.3f} at "
                     f"δ = {result['privacy']['delta']:g}")
    if result.get("sample_privacy"):
        facts.append(f"DP-SGD privacy spent ε = {result['sample_privacy']['epsilon']:.3f} "
                     f"at δ = {result['sample_privacy']['delta']:g} (largest of the clients)")
    if result.get("stopped"):
        facts.append(f"stopped early ({result['stopped']})")
    if base is not None and base.get("closed_form"):
        facts.append(f"max |θ_fed − θ_ridge| {base['closed_form']['max_abs_difference']:.2e}")
    console.print("; ".join(facts) + f"; {result['wall_time_s']:.1f} s in all")


@app.command("contribution")
def contribution_command(
    run_dir: Annotated[Path, typer.Argument(help="The output folder of an 'islands run' "
                                            "whose job had a \\[contribution] section.")],
    chart: Annotated[Path | None, typer.Option(
        help="Where to write the bar chart (default: RUN_DIR/contribution.png).")] = None,
) -> None:
    """Each client's contribution and reward share: a table and a bar chart."""
    from islands.hfl.contribution.report import load_contribution, plot_contribution

    with _stop_on_error(2):
        report = load_contribution(run_dir)
    _print_contribution(report)
    path = plot_contribution(report, chart if chart is not None else run_dir / "contribution.png",
                             title=f"{run_dir.name}: contributions")
    console.print(f"wrote {escape(str(path))}")


def _print_contribution(report: dict[str, Any]) -> None:
    """Print the scores table, the primary method's bars and how they were obtained."""
    from islands.hfl.contribution.report import contribution_rows, text_bars

    headers, rows = contribution_rows(report)
    settings = report.get("settings", {})
    table = Table(title=f"contributions ({settings.get('validation', '?')} validation, "
                        f"{settings.get('weighting', '?')} weighting)")
    for h in headers:
        table.add_column(h, justify="left" if h == "client" else "right")
    for row in rows:
        table.add_row(*(escape(str(c)) for c in row))
    console.print(table)
    for line in text_bars(report):
        console.print(escape(line))
    facts = [f"utility {report['utility_initial']:.4f} → {report['utility_final']:.4f} "
             f"(gain {report['gain']:+.4f})",
             f"{report['evaluations']} coalition models scored in {report['seconds']:.1f} s"]
    if "gtg" in report["scores"]:
        facts.append(f"GTG: {report['permutations']} orders, {report['unconverged']} "
                     f"round(s) at max_permutations, {report['skipped']} skipped")
        if report.get("hoeffding") is not None:
            facts.append(f"Hoeffding half-width {report['hoeffding']:.4f}")
    console.print("; ".join(facts))


reproduce_app = typer.Typer(help="Reproduce a source paper's experiments as a report.",
                            no_args_is_help=True)
app.add_typer(reproduce_app, name="reproduce")


@reproduce_app.command("scca")
def reproduce_scca_command(
    out: Annotated[Path, typer.Option(help="Folder for report.md, results.json and plots.")]
    = Path("reports/scca"),
    quick: Annotated[bool, typer.Option(help="Small settings (seconds, for smoke tests).")]
    = False,
    seed: Annotated[int, typer.Option(help="Seed of splits, classifiers and draws.")] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also copy results.json here.")
    ] = None,
) -> None:
    """Swarm CCA paper, Figs 3-7, on Fashion-MNIST and digits halves."""
    from islands.experiments.scca import reproduce_scca

    results = _reproduce(partial(reproduce_scca, out, quick=quick, random_state=seed))
    _summarise_reproduction(results, out, json_path)


@reproduce_app.command("pca")
def reproduce_pca_command(
    out: Annotated[Path, typer.Option(help="Folder for report.md, results.json and plots.")]
    = Path("reports/pca"),
    quick: Annotated[bool, typer.Option(help="Small settings (seconds, for smoke tests).")]
    = False,
    seed: Annotated[int, typer.Option(help="Seed of splits, noise and classifiers.")] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also copy results.json here.")
    ] = None,
) -> None:
    """Federated DP-PCA: captured variance and SVM accuracy against ε, k and sites."""
    from islands.experiments.pca import reproduce_pca

    results = _reproduce(partial(reproduce_pca, out, quick=quick, random_state=seed))
    _summarise_reproduction(results, out, json_path)
    if results["settings"].get("dp_guarantee") is False:
        console.print("[bold yellow]No DP guarantee:[/] every DP fit used noise_seed so the "
                      "figures can be redrawn; anyone who knows it removes the noise "
                      "(ε = ∞). ε here is the calibration target.")


@reproduce_app.command("vfl")
def reproduce_vfl_command(
    out: Annotated[Path, typer.Option(help="Folder for report.md, results.json and plots.")]
    = Path("reports/vfl"),
    quick: Annotated[bool, typer.Option(
        help="1024-bit keys, few epochs, 3,000 synthetic rows (under a minute).")] = False,
    seed: Annotated[int, typer.Option(help="Seed of splits, synthetic data, batches.")] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also copy results.json here.")
    ] = None,
) -> None:
    """Vertical FL, Tables 1-2: diabetes, breast cancer (PSI first), synthetic 100k rows."""
    from islands.experiments.vfl import reproduce_vfl

    results = _reproduce(partial(reproduce_vfl, out, quick=quick, random_state=seed))
    table = Table(title="Vertical FL under Paillier")
    for col in ("data", "metric", "federated", "scikit-learn", "epochs", "s/epoch"):
        table.add_column(col, justify="left" if col == "data" else "right")
    for name, r in results["runs"].items():
        key = "auc" if "auc" in r["metrics"] else "r2"
        epoch_s = r["epoch_seconds"]
        table.add_row(escape(name), key, f"{r['metrics'][key]:.4f}",
                      f"{r['metrics']['sklearn_' + key]:.4f}", str(r["epochs_run"]),
                      f"{sum(epoch_s) / max(len(epoch_s), 1):.2f}")
    console.print(table)
    _summarise_reproduction(results, out, json_path)


@reproduce_app.command("ftl")
def reproduce_ftl_command(
    out: Annotated[Path, typer.Option(help="Folder for report.md, results.json and plots.")]
    = Path("reports/ftl"),
    quick: Annotated[bool, typer.Option(
        help="6,000 rows a party, overlaps 2% and 10%, few epochs (under a minute).")] = False,
    seed: Annotated[int, typer.Option(help="Seed of splits, initial weights, batches.")] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also copy results.json here.")
    ] = None,
) -> None:
    """Federated transfer learning: Fashion-MNIST halves and breast cancer, few shared rows."""
    from islands.experiments.ftl import reproduce_ftl

    results = _reproduce(partial(reproduce_ftl, out, quick=quick, random_state=seed))
    fashion = results["fashion_mnist"]
    if fashion is not None:
        table = Table(title="Fashion-MNIST: test accuracy on A's half (B holds the labels)")
        for col in ("overlap", "rows", "FTL", "FTL (paper)", "lower bound", "upper bound",
                    "FTL s"):
            table.add_column(col, justify="left" if col == "overlap" else "right")
        for r in fashion["rows"]:
            paper = r["ftl_paper"]
            table.add_row(f"{100 * r['overlap_fraction']:g}%", str(r["overlap_rows"]),
                          f"{r['ftl']['accuracy']:.4f}",
                          "–" if paper is None else f"{paper['accuracy']:.4f}",
                          f"{r['lower_bound']['accuracy']:.4f}",
                          f"{r['upper_bound']['accuracy']:.4f}",
                          f"{r['ftl']['seconds']:.0f}")
        console.print(table)
    table = Table(title="Breast cancer: mean test AUC on A's features over the splits")
    for col in ("overlap", "rows", "FTL", "FTL (paper)", "lower bound", "upper bound"):
        table.add_column(col, justify="left" if col == "overlap" else "right")
    for name, v in results["breast_cancer"]["summary"].items():
        table.add_row(escape(name), str(v["overlap_rows"]), f"{v['ftl_auc']:.4f}",
                      f"{v['ftl_paper_auc']:.4f}", f"{v['lower_bound_auc']:.4f}",
                      f"{v['upper_bound_auc']:.4f}")
    console.print(table)
    _summarise_reproduction(results, out, json_path)


@reproduce_app.command("apfl")
def reproduce_apfl_command(
    out: Annotated[Path, typer.Option(help="Folder for report.md, results.json and plots.")]
    = Path("reports/apfl"),
    epochs: Annotated[int, typer.Option(
        help="Epochs per row (the paper's 50 by default: about 6 min per row with the MLP "
             "on 2 cores, nine rows in all; --quick for a short check).")] = 50,
    model: Annotated[str, typer.Option(help="'mlp' (784-200-10) or 'cnn'.")] = "mlp",
    quick: Annotated[bool, typer.Option(help="Small settings (seconds, for smoke tests).")]
    = False,
    seed: Annotated[int, typer.Option(help="Seed of subsets, initial model, batches.")] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also copy results.json here.")
    ] = None,
) -> None:
    """APFL paper, Tables 5, 7, 9: CL, FL τ=15/4/1, τ=4 + mbs, APFL, APFL (no mbs)."""
    from islands.experiments.apfl import reproduce_apfl

    results = _reproduce(partial(reproduce_apfl, out, epochs=epochs, model=model,
                                 quick=quick, random_state=seed))
    table = Table(title="Fashion-MNIST, classes 0-3 / 4-6 / 7-9")
    for col in ("row", "accuracy %", "Dev_avg", "aggregations"):
        table.add_column(col, justify="left" if col == "row" else "right")
    for name, row in results["rows"].items():
        table.add_row(escape(name), f"{100 * row['accuracy']:.2f}",
                      "–" if name == "CL" else f"{100 * row['dev_avg']:.2f}",
                      "–" if name == "CL" else str(row["aggregations"]))
    console.print(table)
    _summarise_reproduction(results, out, json_path)


@reproduce_app.command("contribution")
def reproduce_contribution_command(
    out: Annotated[Path, typer.Option(help="Folder for report.md, results.json and plots.")]
    = Path("reports/contribution"),
    quick: Annotated[bool, typer.Option(help="Small settings (seconds, for smoke tests).")]
    = False,
    seed: Annotated[int, typer.Option(help="Seed of splits, noise, batches and orders.")]
    = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also copy results.json here.")
    ] = None,
) -> None:
    """Five unequal Fashion-MNIST clients valued by every method and by retraining."""
    from islands.experiments.contribution import reproduce_contribution

    results = _reproduce(partial(reproduce_contribution, out, quick=quick,
                                 random_state=seed))
    scores = {**results["contribution"]["scores"], "retrain": results["retrain"]["scores"]}
    names = {"gtg": "GTG", "exact": "exact/round", "or": "OR", "loo": "LOO/round",
             "retrain": "retrained Shapley"}
    table = Table(title="Contribution of each client (validation accuracy points)")
    table.add_column("client")
    table.add_column("role")
    for m in scores:
        table.add_column(names.get(m, m), justify="right")
    table.add_column("share", justify="right")
    for k, c in enumerate(results["clients"]):
        table.add_row(escape(c["name"]), escape(c["role"]),
                      *(f"{scores[m][k]:+.4f}" for m in scores),
                      f"{100 * results['contribution']['shares'][k]:.1f}%")
    console.print(table)
    _summarise_reproduction(results, out, json_path)


def _reproduce(run: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """Run a reproduction with a status line; an islands error is one line and exit 2."""
    with _stop_on_error(), console.status("starting") as status:
        return run(progress=lambda msg: status.update(escape(msg)))


@contextlib.contextmanager
def _stop_on_error(code: int = 2, also: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Print an islands error (bad settings, missing data) as one line and exit ``code``."""
    from islands.errors import IslandsError

    caught: tuple[type[Exception], ...] = (IslandsError, *also)
    try:
        yield
    except caught as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(code) from exc


def _summarise_reproduction(results: dict[str, Any], out: Path, json_path: Path | None) -> None:
    """Print the claims checked against the paper, one screen, and where the report is."""
    verdicts: dict[str, int] = {}
    for claim in results["agreement"]:
        verdicts[claim["verdict"]] = verdicts.get(claim["verdict"], 0) + 1
    table = Table(title="Agreement with the paper")
    columns = [c for c in ("figure", "claim", "dataset", "verdict", "finding")
               if any(c in claim for claim in results["agreement"])]
    for col in columns:
        table.add_column(col)
    for claim in results["agreement"]:
        table.add_row(*(escape(str(claim.get(c, ""))) for c in columns))
    console.print(table)
    console.print(f"{verdicts} in {results['wall_time_s']:.0f} s; report: {out / 'report.md'}")
    for name in results.get("skipped", []):
        console.print(f"[yellow]skipped[/] {escape(str(name))}")
    if json_path is not None:
        json_path.write_text((out / "results.json").read_text())


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
    from islands.deploy.certs import make_certificates

    names = [p.strip() for p in parties.split(",") if p.strip()]
    with _stop_on_error(2):
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


@app.command("party")
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
    import logging

    from islands.deploy.config import load_party_config
    from islands.deploy.launch import run_configured

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with _stop_on_error(2, also=(OSError,)):
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

        with _stop_on_error(1, also=(OSError,)):
            record = run_configured(cfg, resume=resume, on_ready=ready)
    sent = sum(record["bytes_sent"].values())
    console.print(f"done in {record['total_seconds']:.2f} s (role {record['role_seconds']:.2f} s,"
                  f" connecting {record['connect_seconds']:.2f} s); sent "
                  f"{record['messages_sent']} messages, {sent / 1e6:.3f} MB")
    console.print(f"wrote {escape(str(cfg.output))}")
    if json_path is not None:
        json_path.write_text(json.dumps(record, indent=2, default=float) + "\n")


def main() -> None:
    """Entry point of the ``islands`` console script."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
