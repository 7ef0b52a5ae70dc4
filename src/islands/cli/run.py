"""``islands run JOB.toml`` (a job, dispatched by its ``kind``) and ``islands contribution``."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from islands.cli.common import app, console, print_error, stop_on_error
from islands.errors import IslandsError, JobError, OutputError
from islands.progress import ProgressUpdate
from islands.reporting import MANIFEST, check_writable, previous_results
from islands.runtime.runner import running_roles
from islands.validation import read_toml

if TYPE_CHECKING:
    from islands.hfl.contribution import ContributionReport
    from islands.hfl.job import HflJobResult
    from islands.vfl.job import VerticalJobResult
    from islands.vfl.secureboost.job import SecureBoostJobResult

__all__ = ["JOB_KINDS", "check_output", "contribution_command", "print_contribution",
           "run_command"]


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
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=VALUE",
        help="Override one setting of the file, e.g. --set strategy.tau=4 --set epochs=5 "
             "(a TOML value; checked as the file is, and recorded in results.json).")] = None,
    overwrite: Annotated[bool, typer.Option(
        help="Run into an output folder that holds another run's results (or checkpoints), "
             "replacing them once this run's are written.")] = False,
) -> None:
    """Run a federated training job: progress per round, a summary, JSON and curves."""
    JOB_KINDS[_job_kind(job_file)](job_file, resume=resume, output=output, json_path=json_path,
                                   overrides=list(overrides or []), overwrite=overwrite)


def check_output(out: Path, json_path: Path | None, *, resume: bool, overwrite: bool,
                 checkpoints: bool = False) -> None:
    """Refuse, before any work, an output the run could not write or must not replace.

    ``checkpoints``: the folder holds checkpoints this run does not continue (an
    interrupted run). A folder with another run's results (or such checkpoints) needs
    ``--overwrite``, or ``--resume`` where the job can continue it.
    """
    check_writable(out, "the output folder", folder=True)
    if json_path is not None:
        check_writable(json_path, "--json", folder=False)
    if overwrite:
        return
    held = previous_results(out)
    if resume:
        if held is not None and not checkpoints:
            raise JobError(f"--resume, but the output folder {out} holds {held} and no "
                           "checkpoint to continue: pass --overwrite to run the job afresh "
                           "there, or choose another --output")
        return
    if held is None and checkpoints:
        held = "the checkpoints of an interrupted run"
    if held is not None:
        raise JobError(f"the output folder {out} holds {held}: pass --overwrite to replace "
                       f"them, --resume to continue that run, or choose another --output")


def _job_kind(job_file: Path) -> str:
    """Return the job file's ``kind`` when :data:`JOB_KINDS` has it, else ``"horizontal"``.

    A file that cannot be read, or names no known kind, goes to the horizontal job
    reader, which says what is wrong with it.
    """
    try:
        kind = read_toml(job_file).get("kind")
    except (OSError, ValueError):
        return "horizontal"
    return kind if isinstance(kind, str) and kind in JOB_KINDS else "horizontal"


def _run_horizontal(job_file: Path, *, resume: bool, output: Path | None,
                    json_path: Path | None, overrides: list[str], overwrite: bool) -> None:
    """Run a horizontal job: rounds with a progress bar, the centralised baseline, Ctrl-C."""
    from islands.hfl.checkpoint import SERVER_FILE
    from islands.hfl.job import (
        can_resume,
        check_resumable,
        check_trackers,
        load_job,
        run_job,
        write_outputs,
    )

    with stop_on_error(2, also=(ImportError,)):
        job = load_job(job_file, overrides)
        check_trackers(job)  # a missing extra is said before anything runs
        out = output if output is not None else Path(job.output)
        interrupted = (out / "checkpoints" / SERVER_FILE).is_file()
        check_output(out, json_path, resume=resume, overwrite=overwrite,
                     checkpoints=interrupted)
        if resume:
            check_resumable(job, out)
    protect = f" protected by {' + '.join(job.protect)}" if job.protect else ""
    on_ray = ""
    if job.backend == "ray":
        where = escape(job.ray_address) if job.ray_address else "a local instance"
        on_ray = f", training on Ray ({where})"
    console.print(f"job [bold]{escape(job.name)}[/]: {job.strategy['name']}{protect} on "
                  f"{job.data['name']}, {job.epochs} epoch(s){on_ray}, output {escape(str(out))}"
                  + _set_text(job.overrides))
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
            if record.epsilon_against_server is not None:
                eps += f" (vs server {record.epsilon_against_server:.2f})"
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
                print_error(exc)
                raise typer.Exit(1) from exc
            result = None
        except KeyboardInterrupt:
            result = None
        finally:
            signal.signal(signal.SIGINT, previous)
    if result is None:  # Ctrl-C: said after the progress bars are drawn for the last time
        _interrupted_job(job, job_file, output, out, overrides)
        _exit_past_busy_roles(130)
        raise typer.Exit(130)
    _summarise_job(result)
    if result.onnx_skipped is not None:
        console.print(f"[yellow]warning: model.onnx not written: {escape(result.onnx_skipped)}"
                      "[/] (model.pt is; results.json's onnx_skipped says why)", soft_wrap=True)
    try:
        written = write_outputs(result, out, json_path=json_path)
    except OutputError as exc:
        print_error(exc)
        if can_resume(job) and (out / "checkpoints" / SERVER_FILE).is_file():
            console.print("the trained model is in the checkpoints: once the output can be "
                          "written, the same command with --resume writes the results "
                          "without training again", soft_wrap=True)
        raise typer.Exit(1) from exc
    console.print("wrote " + ", ".join(escape(str(p)) for p in written))
    _say_tracking(result.tracking)


def _exit_past_busy_roles(code: int) -> None:
    """Exit at once if a party's role is still computing after Ctrl-C.

    The runner waits a grace period for cancelled roles; a role still running after it
    (a long local epoch) would be ended by the interpreter's exit with pthread_exit, which
    PyTorch's C++ frames turn into an abort. Its work is lost either way.
    """
    busy = running_roles()
    if busy:
        console.print(f"not waiting for {', '.join(busy)}, still computing")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _interrupted_job(job: Any, job_file: Path, output: Path | None, out: Path,
                     overrides: list[str]) -> None:
    """Say, after Ctrl-C, whether and how the run can be resumed."""
    from islands.hfl.checkpoint import SERVER_FILE
    from islands.hfl.job import can_resume

    console.print("[yellow]interrupted[/]")
    if not (out / "checkpoints" / SERVER_FILE).is_file():
        console.print("no round was checkpointed yet: run the job again to start it")
    elif not can_resume(job):
        console.print(f"protect = {job.protect} keeps the model hidden from the server, so "
                      "the run cannot be resumed: run the job again with --overwrite to "
                      "start it afresh")
    else:
        command = ["islands", "run", str(job_file), "--resume"]
        if output is not None:
            command += ["--output", str(output)]
        for text in overrides:  # the same settings, or the checkpoints do not fit
            command += ["--set", text]
        console.print(f"checkpoints in {escape(str(out / 'checkpoints'))}; to continue, "
                      f"run:\n  {escape(shlex.join(command))}", soft_wrap=True)


def _refuse_resume(resume: bool, kind: str, job_file: Path) -> None:
    """Exit 2 on --resume: only a horizontal job keeps checkpoints to continue from."""
    if resume:
        print_error(f"--resume continues a horizontal job from its checkpoints; the {kind} "
                    f"job {job_file} keeps none: run it without --resume")
        raise typer.Exit(2)


def _run_vertical(job_file: Path, *, resume: bool, output: Path | None,
                  json_path: Path | None, overrides: list[str], overwrite: bool) -> None:
    """Run a vertical job (kind = "vertical"): alignment, encrypted training, test metrics."""
    from islands.vfl.config import describe_he
    from islands.vfl.job import load_vertical_job, run_vertical, write_vertical_outputs

    _refuse_resume(resume, "vertical", job_file)
    with stop_on_error(2, also=(ImportError,)):
        job = load_vertical_job(job_file, overrides)
        settings = job.config()
        job.check_trackers()  # a missing extra is said before anything runs
        out = output if output is not None else Path(job.output)
        check_output(out, json_path, resume=False, overwrite=overwrite)
    scheme = describe_he(settings.he, settings.key_bits, settings.djn)
    console.print(f"job [bold]{escape(job.name)}[/]: vertical {settings.objective} regression "
                  f"on {job.data['name']}, {job.parties['passive']} passive part"
                  f"{'y' if job.parties['passive'] == 1 else 'ies'} + B + coordinator, "
                  f"{scheme}, up to {settings.epochs} epochs, output {escape(str(out))}"
                  + _set_text(job.overrides))
    with console.status("starting") as status, stop_on_error(1):
        result = run_vertical(job, progress=lambda msg: status.update(escape(msg)),
                              output=out)
    _summarise_vertical(result)
    with stop_on_error(1):
        written = write_vertical_outputs(result, out, json_path=json_path)
    _say_tracking(result.tracking)
    console.print("wrote " + ", ".join(escape(str(p)) for p in written))


def _run_secureboost(job_file: Path, *, resume: bool, output: Path | None,
                     json_path: Path | None, overrides: list[str], overwrite: bool) -> None:
    """Run a SecureBoost job (kind = "secureboost"): trees with progress, XGBoost beside."""
    from islands.vfl.secureboost.job import (
        describe,
        load_secureboost_job,
        run_secureboost,
        write_secureboost_outputs,
    )

    _refuse_resume(resume, "SecureBoost", job_file)
    with stop_on_error(2, also=(ImportError,)):
        job = load_secureboost_job(job_file, overrides)
        settings = job.config()
        job.check_data()  # missing data is said before anything runs
        out = output if output is not None else Path(job.output)
        check_output(out, json_path, resume=False, overwrite=overwrite)
    console.print(f"job [bold]{escape(job.name)}[/]: {escape(describe(job, settings))}, "
                  f"output {escape(str(out))}" + _set_text(job.overrides))
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar, stop_on_error(1):
        rows: dict[str, Any] = {}

        def on_update(update: ProgressUpdate) -> None:
            if update.task not in rows:
                rows[update.task] = bar.add_task(update.task, total=update.total, info="")
            bar.update(rows[update.task], completed=update.done, info=escape(update.info))

        result = run_secureboost(job, progress=on_update)
    _summarise_secureboost(result)
    with stop_on_error(1):
        written = write_secureboost_outputs(result, out, json_path=json_path)
    console.print("wrote " + ", ".join(escape(str(p)) for p in written))


def _summarise_secureboost(result: SecureBoostJobResult) -> None:
    """One screen: SecureBoost against XGBoost on the same bins, then what the trees cost."""
    keys = ["auc", "accuracy"] if result.metric == "auc" else ["r2", "mse"]
    table = Table(title=f"{result.job.name}: SecureBoost vs XGBoost (same bins), test rows")
    table.add_column("model")
    for key in keys:
        table.add_column(key, justify="right")
    metrics = result.metrics
    table.add_row("SecureBoost, federated", *(f"{metrics[k]:.4f}" for k in keys))
    xgb = result.xgboost
    if "skipped" in xgb:
        table.add_row("XGBoost hist, joined data", *("–" for _ in keys))
    else:
        table.add_row("XGBoost hist, joined data", *(f"{metrics['xgboost_' + k]:.4f}"
                                                      for k in keys))
    console.print(table)
    facts = [f"{len(result.per_tree)} trees, loss {result.per_tree[0]['train_loss']:.4f} → "
             f"{result.per_tree[-1]['train_loss']:.4f}",
             f"{result.seconds_per_tree:.2f} s per tree (the first, with keys and "
             f"alignment: {result.per_tree[0]['seconds']:.1f} s)",
             f"{result.bytes / 1e6:.2f} MB exchanged"]
    if result.aligned_ids is not None:
        facts.append(f"PSI aligned {result.aligned_ids} rows")
    gains = result.gain_by_party()
    total = sum(gains.values()) or 1.0
    facts.append("gain by party " + ", ".join(f"{p} {100 * g / total:.0f}%"
                                               for p, g in gains.items()))
    console.print("; ".join(facts))
    if "skipped" in xgb:
        console.print(f"[yellow]XGBoost not compared: {escape(xgb['skipped'])}[/]",
                      soft_wrap=True)
    elif xgb["same_trees_expected"]:
        console.print(f"largest test margin difference to XGBoost "
                      f"{xgb['max_abs_margin_diff']:.2e} (the same trees)")
    else:
        console.print(f"XGBoost grows other trees here: {escape(xgb['why_not'])}")
    if result.plot_skipped is not None:
        console.print(f"[yellow]report.png not drawn: {escape(result.plot_skipped)}[/]")


def _say_tracking(info: dict[str, Any] | None) -> None:
    """Say where the trackers logged the run, how to open them, and any failure."""
    if info is None:
        return
    if info["tensorboard"] is not None:
        folder = Path(info["tensorboard"]).parent
        console.print(f"TensorBoard: run {escape(info['run_name'])}; open with "
                      f"[bold]tensorboard --logdir {escape(shlex.quote(str(folder)))}[/]",
                      soft_wrap=True)
    if info["mlflow"] is not None:
        uri = info["mlflow"]["uri"]
        env = "MLFLOW_ALLOW_FILE_STORE=true " if uri.startswith("file:") else ""
        console.print(f"MLflow: run {info['mlflow']['run_id']} in experiment "
                      f"{escape(info['mlflow']['experiment'])}; open with [bold]{env}mlflow ui "
                      f"--backend-store-uri {escape(shlex.quote(uri))}[/] (needs the full "
                      "mlflow package)", soft_wrap=True)
    for error in info["errors"]:
        console.print(f"[yellow]tracking: {escape(error)}[/]", soft_wrap=True)


def _set_text(applied: dict[str, Any]) -> str:
    """Return the overrides a job was run with, for its first line (empty without any)."""
    if not applied:
        return ""
    return "; with " + escape(", ".join(f"{k} = {json.dumps(v)}" for k, v in applied.items()))


def _summarise_vertical(result: VerticalJobResult) -> None:
    """Print the test metrics against scikit-learn, then what the epochs cost."""
    keys = ["accuracy", "auc"] if result.settings.objective == "logistic" else ["r2", "mse"]
    table = Table(title=f"{result.job.name}: test metrics")
    table.add_column("model")
    for key in keys:
        table.add_column(key, justify="right")
    metrics = result.metrics
    protected = "secret-shared" if result.settings.engine == "ss" else (
        "in the clear" if result.settings.he == "none" else "encrypted")
    table.add_row(f"vertical, {protected}", *(f"{metrics[k]:.4f}" for k in keys))
    table.add_row("scikit-learn, joined data", *(f"{metrics['sklearn_' + k]:.4f}" for k in keys))
    console.print(table)
    crypto = "ring" if result.settings.engine == "ss" else "HE"
    parts = ", ".join(f"{name}: {crypto} {c.ring + c.he:.3f} s, compute {c.compute:.3f} s, "
                      f"messaging {c.messaging:.2f} s"
                      for name, c in result.per_epoch_split.items())
    console.print(f"{result.epochs_run} epochs, loss {result.loss_history[0]:.4f} → "
                  f"{result.loss_history[-1]:.4f}; {np.mean(result.epoch_seconds):.2f} s per "
                  f"epoch ({parts}); {result.bytes / 1e6:.2f} MB exchanged")
    if result.aligned_ids is not None:
        console.print(f"PSI aligned {result.aligned_ids} rows")


def _amplified(result: HflJobResult) -> str:
    """Say how the run's client-level ε was amplified, if it was."""
    strategy = result.job.strategy
    fraction = strategy.get("fraction", 1.0)
    if strategy.get("sampling") == "poisson" and fraction < 1:
        return f", amplified by the secret Poisson cohort, q = {fraction:g}"
    return ""


def _summarise_job(result: HflJobResult) -> None:
    """One screen: the federated model against its baseline, and what the run cost."""
    keys = (("mse", "rmse", "mae", "r2") if result.task == "regression"
            else ("accuracy", "precision", "recall", "f1"))
    # the job's [model] metrics after the report's own
    keys += tuple(k for k in result.job.model.get("metrics", ())
                  if k not in keys and isinstance(result.metrics.get(k), int | float))
    table = Table(title=f"{result.job.name}: test metrics")
    table.add_column("model")
    for key in keys:
        table.add_column(key, justify="right")
    table.add_column("aggregations", justify="right")

    def cells(metrics: dict[str, Any]) -> list[str]:
        return [f"{metrics[k]:.4f}" if k in metrics else "–" for k in keys]

    table.add_row(f"federated ({result.job.strategy['name']})", *cells(result.metrics),
                  str(result.aggregations))
    base = result.baseline
    closed = None if base is None else base.closed_form
    if base is not None:
        table.add_row("centralised", *cells(base.metrics), "–")
        if closed is not None:
            table.add_row("closed-form ridge", *cells(closed.test), "–")
    console.print(table)
    facts = [f"{result.rounds} rounds, {result.seconds_per_round.mean * 1000:.1f} ms "
             f"per round, {result.bytes.total / 1e6:.1f} MB on the wire"]
    if result.dev_avg is not None:
        facts.append(f"Dev_avg {result.dev_avg:.4f}")
    if result.contribution:
        print_contribution(result.contribution)
    if result.dropouts:
        facts.append(f"{len(result.dropouts)} dropout(s)")
    if result.job.protect:
        facts.append("protected by " + " + ".join(result.job.protect))
    if result.privacy is not None:
        facts.append(f"privacy spent ε = {result.privacy.epsilon:.3f} at "
                     f"δ = {result.privacy.delta:g} (against who sees the models"
                     f"{_amplified(result)})")
    if result.privacy_against_server is not None:
        facts.append(f"against the server ε = {result.privacy_against_server.epsilon:.3f} "
                     f"(it knows the cohorts: each round a client trained in counts "
                     f"unamplified; largest of the clients)")
    if result.sample_privacy is not None:
        facts.append(f"DP-SGD privacy spent ε = {result.sample_privacy.epsilon:.3f} "
                     f"at δ = {result.sample_privacy.delta:g} (largest of the clients)")
    if result.stopped:
        facts.append(f"stopped early ({result.stopped})")
    if closed is not None:
        facts.append(f"max |θ_fed − θ_ridge| {closed.max_abs_difference:.2e}")
    console.print("; ".join(facts) + f"; {result.wall_time_s:.1f} s in all")



@app.command("contribution")
def contribution_command(
    run_dir: Annotated[Path, typer.Argument(help="The output folder of an 'islands run' "
                                            "whose job had a \\[contribution] section.")],
    chart: Annotated[Path | None, typer.Option(
        help="Where to write the bar chart (default: RUN_DIR/contribution.png).")] = None,
) -> None:
    """Each client's contribution and reward share: a table and a bar chart."""
    from islands.hfl.contribution.report import load_contribution, plot_contribution
    with stop_on_error(2):
        report = load_contribution(run_dir)
    print_contribution(report)
    path = chart if chart is not None else run_dir / "contribution.png"
    if chart is None and path.is_file() and (run_dir / MANIFEST).is_file():
        # drawn with the run, part of its checked set of files: not redrawn over it
        console.print(f"chart: {escape(str(path))}")
        return
    with stop_on_error(1):
        path = plot_contribution(report, path, title=f"{run_dir.name}: contributions")
    console.print(f"wrote {escape(str(path))}")


def print_contribution(report: ContributionReport) -> None:
    """Print the scores table, the primary method's bars and how they were obtained."""
    from islands.hfl.contribution.report import contribution_rows, text_bars

    headers, rows = contribution_rows(report)
    settings = report.settings
    table = Table(title=f"contributions ({settings.get('validation', '?')} validation, "
                        f"{settings.get('weighting', '?')} weighting)")
    for h in headers:
        table.add_column(h, justify="left" if h == "client" else "right")
    for row in rows:
        table.add_row(*(escape(str(c)) for c in row))
    console.print(table)
    for line in text_bars(report):
        console.print(escape(line))
    metric = {"accuracy": "accuracy", "loss": "minus the loss"}.get(
        str(report.settings.get("metric")), "utility")
    facts = [f"{metric} {report.utility_initial:.4f} → {report.utility_final:.4f} "
             f"(gain {report.gain:+.4f})",
             f"{report.evaluations} coalition models scored in {report.seconds:.1f} s"]
    if report.trainings:
        facts.append(f"{report.trainings} coalitions retrained")
    if "gtg" in report.scores:
        facts.append(f"GTG: {report.permutations} orders, {report.unconverged} "
                     f"round(s) at max_permutations, {report.skipped} skipped")
        if report.hoeffding is not None:
            facts.append(f"Hoeffding half-width {report.hoeffding:.4f}")
    console.print("; ".join(facts))


JOB_KINDS: dict[str, Callable[..., None]] = {
    "horizontal": _run_horizontal,
    "vertical": _run_vertical,
    "secureboost": _run_secureboost,
}
"""A job file's ``kind`` → the function that runs it (no ``kind``: horizontal)."""
