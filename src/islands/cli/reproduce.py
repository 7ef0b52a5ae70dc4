"""``islands reproduce NAME``: a paper's experiments as a report, one command per table row.

Every reproduction takes ``--out``, ``--quick``, ``--seed`` and ``--json``, runs its
``reproduce_<name>(out, quick=, random_state=, progress=, **extra)`` with progress bars,
prints its own tables and then the claims checked against the paper. :data:`REPRODUCTIONS`
holds what differs between them; the commands are built from it.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from islands.cli.common import app, console, progress_option, stop_on_error
from islands.reporting import copy_file

if TYPE_CHECKING:  # islands.cli imports no experiments until a command runs
    from islands.experiments.apfl import ApflRow
    from islands.experiments.contribution import ContributionClient, RetrainScores
    from islands.experiments.ftl import FashionResults, TabularResults
    from islands.experiments.report import ReproductionResult as Results
    from islands.hfl.contribution import ContributionReport
    from islands.vfl.job import VerticalJobResult

__all__ = ["REPRODUCTIONS", "Reproduction", "reproduce_app"]

QUICK_HELP = "Small settings (seconds, for smoke tests)."


@dataclass(frozen=True)
class Reproduction:
    """One ``islands reproduce`` command.

    Attributes
    ----------
    name
        The command's name; its report goes to ``reports/<name>`` by default.
    run
        ``"module:function"`` of the reproduction, imported when the command runs (the
        experiments load scipy, scikit-learn, torch or Paillier).
    help
        The command's help line.
    seed_help, quick_help
        What ``--seed`` and ``--quick`` change in this reproduction.
    options
        Options beyond the common ones, passed to ``run`` by name.
    tables
        Prints the reproduction's own tables before the agreement with the paper.
    notes
        Prints what must be said after it.
    """

    name: str
    run: str
    help: str
    seed_help: str
    quick_help: str = QUICK_HELP
    options: tuple[inspect.Parameter, ...] = ()
    tables: Callable[[Results], None] | None = None
    notes: Callable[[Results], None] | None = None


def _option(name: str, kind: type, default: Any, help: str) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[kind, typer.Option(help=help)])


def _pca_notes(results: Results) -> None:
    if results.settings.get("dp_guarantee") is False:
        console.print("[bold yellow]No DP guarantee:[/] every DP fit used noise_seed so the "
                      "figures can be redrawn; anyone who knows it removes the noise "
                      "(ε = ∞). ε here is the calibration target.")


def _vfl_tables(results: Results) -> None:
    table = Table(title="Vertical FL under Paillier")
    for col in ("data", "metric", "federated", "scikit-learn", "epochs", "s/epoch"):
        table.add_column(col, justify="left" if col == "data" else "right")
    runs: dict[str, VerticalJobResult] = results.sections["runs"]
    for name, r in runs.items():
        key = "auc" if "auc" in r.metrics else "r2"
        table.add_row(escape(name), key, f"{r.metrics[key]:.4f}",
                      f"{r.metrics['sklearn_' + key]:.4f}", str(r.epochs_run),
                      f"{sum(r.epoch_seconds) / max(len(r.epoch_seconds), 1):.2f}")
    console.print(table)


def _ftl_tables(results: Results) -> None:
    fashion: FashionResults | None = results.sections["fashion_mnist"]
    if fashion is not None:
        table = Table(title="Fashion-MNIST: test accuracy on A's half (B holds the labels)")
        for col in ("overlap", "rows", "FTL", "FTL (paper)", "lower bound", "upper bound",
                    "FTL s"):
            table.add_column(col, justify="left" if col == "overlap" else "right")
        for r in fashion.rows:
            table.add_row(f"{100 * r.overlap_fraction:g}%", str(r.overlap_rows),
                          f"{r.ftl['accuracy']:.4f}",
                          "–" if r.ftl_paper is None else f"{r.ftl_paper['accuracy']:.4f}",
                          f"{r.lower_bound['accuracy']:.4f}",
                          f"{r.upper_bound['accuracy']:.4f}",
                          f"{r.ftl['seconds']:.0f}")
        console.print(table)
    table = Table(title="Breast cancer: mean test AUC on A's features over the splits")
    for col in ("overlap", "rows", "FTL", "FTL (paper)", "lower bound", "upper bound"):
        table.add_column(col, justify="left" if col == "overlap" else "right")
    tabular: TabularResults = results.sections["breast_cancer"]
    for name, v in tabular.summary.items():
        table.add_row(escape(name), str(v.overlap_rows), f"{v.ftl_auc:.4f}",
                      f"{v.ftl_paper_auc:.4f}", f"{v.lower_bound_auc:.4f}",
                      f"{v.upper_bound_auc:.4f}")
    console.print(table)


def _apfl_tables(results: Results) -> None:
    table = Table(title="Fashion-MNIST, classes 0-3 / 4-6 / 7-9")
    for col in ("row", "accuracy %", "Dev_avg", "aggregations"):
        table.add_column(col, justify="left" if col == "row" else "right")
    rows: dict[str, ApflRow] = results.sections["rows"]
    for name, row in rows.items():
        table.add_row(escape(name), f"{100 * row.accuracy:.2f}",
                      "–" if row.dev_avg is None else f"{100 * row.dev_avg:.2f}",
                      "–" if name == "CL" else str(row.aggregations))
    console.print(table)


def _contribution_tables(results: Results) -> None:
    report: ContributionReport = results.sections["contribution"]
    retrain: RetrainScores = results.sections["retrain"]
    clients: list[ContributionClient] = results.sections["clients"]
    scores = {**report.scores, "retrain": retrain.scores}
    names = {"gtg": "GTG", "exact": "exact/round", "or": "OR", "loo": "LOO/round",
             "retrain": "retrained Shapley"}
    table = Table(title="Contribution of each client (validation accuracy points)")
    table.add_column("client")
    table.add_column("role")
    for m in scores:
        table.add_column(names.get(m, m), justify="right")
    table.add_column("share", justify="right")
    for k, c in enumerate(clients):
        table.add_row(escape(c.name), escape(c.role),
                      *(f"{scores[m][k]:+.4f}" for m in scores),
                      f"{100 * report.shares[k]:.1f}%")
    console.print(table)


REPRODUCTIONS: tuple[Reproduction, ...] = (
    Reproduction("scca", "islands.experiments.scca:reproduce_scca",
                 "Swarm CCA paper, Figs 3-7, on Fashion-MNIST and digits halves.",
                 "Seed of splits, classifiers and draws."),
    Reproduction("pca", "islands.experiments.pca:reproduce_pca",
                 "Federated DP-PCA: captured variance and SVM accuracy against ε, k and sites.",
                 "Seed of splits, noise and classifiers.", notes=_pca_notes),
    Reproduction("vfl", "islands.experiments.vfl:reproduce_vfl",
                 "Vertical FL, Tables 1-2: diabetes, breast cancer (PSI first), synthetic 100k "
                 "rows.",
                 "Seed of splits, synthetic data, batches.",
                 quick_help="1024-bit keys, few epochs, 3,000 synthetic rows (under a minute).",
                 tables=_vfl_tables),
    Reproduction("ftl", "islands.experiments.ftl:reproduce_ftl",
                 "Federated transfer learning: Fashion-MNIST halves and breast cancer, few "
                 "shared rows.",
                 "Seed of splits, initial weights, batches.",
                 quick_help="6,000 rows a party, overlaps 2% and 10%, few epochs (under a "
                            "minute).",
                 tables=_ftl_tables),
    Reproduction("apfl", "islands.experiments.apfl:reproduce_apfl",
                 "APFL paper, Tables 5, 7, 9: CL, FL τ=15/4/1, τ=4 + mbs, APFL, APFL (no mbs).",
                 "Seed of subsets, initial model, batches.",
                 options=(_option("epochs", int, 50,
                                  "Epochs per row (the paper's 50 by default: about 6 min per "
                                  "row with the MLP on 2 cores, nine rows in all; --quick for "
                                  "a short check)."),
                          _option("model", str, "mlp", "'mlp' (784-200-10) or 'cnn'.")),
                 tables=_apfl_tables),
    Reproduction("contribution", "islands.experiments.contribution:reproduce_contribution",
                 "Seven unequal Fashion-MNIST clients (twins, shuffled labels, a free-rider) "
                 "valued by every method and by retraining.",
                 "Seed of splits, noise, batches and orders.", tables=_contribution_tables),
)
"""Every ``islands reproduce`` command, in the order ``--help`` lists them."""


def reproduce(entry: Reproduction, out: Path, quick: bool, seed: int, json_path: Path | None,
              **extra: Any) -> Results:
    """Run one reproduction with progress bars (lines off a terminal); print its summary.

    An islands error (bad settings, missing data) is one line and exit 2.
    """
    module, _, function = entry.run.partition(":")
    with stop_on_error(2):
        run = getattr(importlib.import_module(module), function)
        results: Results = run(out, quick=quick, random_state=seed,
                               progress=progress_option(), **extra)
    if entry.tables is not None:
        entry.tables(results)
    _summarise_reproduction(results, out, json_path)
    if entry.notes is not None:
        entry.notes(results)
    return results


def _summarise_reproduction(results: Results, out: Path, json_path: Path | None) -> None:
    """Print the claims checked against the paper, one screen, and where the report is."""
    table = Table(title="Agreement with the paper")
    columns = [c for c in ("figure", "claim", "dataset", "verdict", "finding")
               if any(c in claim for claim in results.agreement)]
    for col in columns:
        table.add_column(col)
    for claim in results.agreement:
        table.add_row(*(escape(str(claim.get(c, ""))) for c in columns))
    console.print(table)
    console.print(f"{results.verdicts} in {results.wall_time_s:.0f} s; report: "
                  f"{out / 'report.md'}")
    for name in results.skipped or []:
        console.print(f"[yellow]skipped[/] {escape(str(name))}")
    if json_path is not None:
        with stop_on_error(1):
            copy_file(out / "results.json", json_path)


def _command(entry: Reproduction) -> Callable[..., None]:
    """Build the typer command of ``entry``: the common options around its own."""
    def command(*, out: Path, quick: bool, seed: int, json_path: Path | None,
                **extra: Any) -> None:
        reproduce(entry, out, quick, seed, json_path, **extra)

    keyword = inspect.Parameter.KEYWORD_ONLY
    command.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("out", keyword, default=Path(f"reports/{entry.name}"),
                          annotation=Annotated[Path, typer.Option(
                              help="Folder for report.md, results.json and plots.")]),
        *entry.options,
        _option("quick", bool, False, entry.quick_help),
        _option("seed", int, 0, entry.seed_help),
        inspect.Parameter("json_path", keyword, default=None,
                          annotation=Annotated[Path | None, typer.Option(
                              "--json", help="Also copy results.json here.")]),
    ], return_annotation=None)
    command.__name__ = f"reproduce_{entry.name}_command"
    command.__doc__ = entry.help
    return command


reproduce_app = typer.Typer(help="Reproduce a source paper's experiments as a report.",
                            no_args_is_help=True)
app.add_typer(reproduce_app, name="reproduce")
for _entry in REPRODUCTIONS:
    reproduce_app.command(_entry.name)(_command(_entry))
