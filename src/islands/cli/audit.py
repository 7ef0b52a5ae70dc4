"""``islands audit``: the attacks that show what each protocol really reveals."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from islands.cli.common import app, console, progress_option, save_json, stop_on_error
from islands.data import Dataset, load_fashion_mnist, load_sklearn, partition_iid, split_image_views
from islands.reporting import write_json

__all__ = ["audit_app"]

audit_app = typer.Typer(help="Attacks that show what each protocol really reveals.",
                        no_args_is_help=True)
app.add_typer(audit_app, name="audit")

_DATASETS = ("fashion_mnist", "digits")
_Alpha = Annotated[float, typer.Option(
    min=1e-12, max=0.5,
    help="Family-wise level of the tests (Bonferroni): a correct run is flagged with at most "
         "this probability (the masks come from the CSPRNG, so every run differs).")]


def _check_dataset(dataset: str) -> None:
    if dataset not in _DATASETS:
        raise typer.BadParameter("use 'fashion_mnist' or 'digits'", param_hint="--dataset")


def _save_report(json_path: Path | None, dataset: str, report: dict[str, Any]) -> None:
    if json_path is not None:
        save_json(json_path, {"dataset": dataset, **report})


def _load_images(dataset: str, n_samples: int) -> Dataset:
    """Load the ``--dataset`` option's images: Fashion-MNIST's training rows, or digits."""
    _check_dataset(dataset)
    with stop_on_error(2):
        if dataset == "fashion_mnist":
            return load_fashion_mnist(split="train", n_samples=n_samples)
        return load_sklearn("digits")


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
    protocol: Annotated[str, typer.Option(
        help="'paper' (Li and Du, perturbed as the paper recommends) or 'secure' "
             "(islands.cca.secure, with a dealer).")] = "paper",
    alpha: _Alpha = 0.01,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the recovery errors as JSON.")
    ] = None,
) -> None:
    """Attack Swarm CCA on the messages each peer received; print what they recover."""
    from islands.cca.audit import audit_scca

    if protocol not in ("paper", "secure"):
        raise typer.BadParameter("use 'paper' or 'secure'", param_hint="--protocol")
    ds = _load_images(dataset, n_samples)
    assert ds.image_shape is not None
    left, right = split_image_views(ds.X, ds.image_shape)
    how = ("perturbed as the paper recommends" if protocol == "paper"
           else "secure protocol (a dealer deals randomness)")
    console.print(f"SCCA between the left and right halves of {dataset} "
                  f"({left.shape[0]} samples, {left.shape[1]}+{right.shape[1]} features), "
                  f"{how}; attacks use only received messages.")
    with stop_on_error(1):
        report = audit_scca(left, right, random_state=seed, extra_rows=extra_rows,
                            protocol=protocol, alpha=alpha, progress=progress_option())
    table = Table(title="What each peer recovers (relative errors; 0 = exact)")
    for col in ("attacker", "recovers", "error"):
        table.add_column(col)
    for who, what, error in (("S2", "S1's secret factor k1", report.k1_rel_error),
                             ("S1", "S2's secret factor k2", report.k2_rel_error)):
        table.add_row(who, what, "none to recover" if error is None else f"{error:.2e}")
    table.add_row("S1", "projector onto span(Y)", f"{report.projector_error:.2e}")
    if report.projector_error_from_product is not None:
        table.add_row("S1", "projector onto span(Y), from the M·O it decodes",
                      f"{report.projector_error_from_product:.2e}")
    table.add_row("S1", f"all of Y (centred) from q={report.known_rows} known rows",
                  f"{report.y_reconstruction_rel_error:.2e}")
    table.add_row("S1", f"all of Y (centred) from q+{report.extra_rows} known rows",
                  f"{report.y_reconstruction_rel_error_extra_rows:.2e}")
    table.add_row("S1", f"all of Y (raw) from q+1={report.known_rows + 1} known rows",
                  f"{report.y_raw_reconstruction_rel_error:.2e}")
    console.print(table)
    if report.simulation is None:
        console.print("The perturbation k1, k2 does not protect the shared parameters: each "
                      "peer recovers the other's factor, and S1 learns span(Y), hence Y from a "
                      "few known rows. On sparse images q random rows can miss a rarely-lit "
                      "pixel altogether; more known rows (--extra-rows) make the recovery "
                      "exact.")
    else:
        sim = report.simulation
        worst = min(sim.pvalues, key=lambda k: sim.pvalues[k])
        console.print(f"S1 reads the ring elements in R2's place as a basis of span(Y): a "
                      f"random subspace, so rebuilding Y is no better than guessing (error "
                      f"1 = predicting the column means). What S1 decodes, M·O, gives it only "
                      f"the projection of span(Y) onto span(X). Simulation check: S1's "
                      f"messages from Y and from a different Y' with the same outputs "
                      f"{'cannot' if sim.indistinguishable else 'CAN'} be told apart "
                      f"(Kolmogorov-Smirnov, smallest p = {sim.pvalues[worst]:.2f} for "
                      f"{worst}; outputs equal within {sim.same_outputs:.1e}, decoded Gram "
                      f"matrices within {sim.gram_difference:.1e}).")
    _save_report(json_path, dataset, report.to_dict())


@audit_app.command("server")
def audit_server_command(
    details: Annotated[bool, typer.Option(
        "--details", help="Also print each refusal as the party gave it.")] = False,
    only: Annotated[str | None, typer.Option(
        "--only", help="Only the rows whose protection contains this, e.g. 'ckks'.")] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write every attack and its outcome as JSON.")
    ] = None,
) -> None:
    """Play a deviating server against each protection; print which check stops which attack."""
    from islands.hfl.server_audit import audit_server

    console.print("A server that sends other numbers than the protocol says, against honest "
                  "clients holding their own configuration and identity (exact messages). "
                  "A row holds only if the check it names is the one that refuses.")
    with stop_on_error(1):
        results = audit_server(progress=progress_option(), only=only)
    if not results:
        raise typer.BadParameter(f"no row's protection contains {only!r}", param_hint="--only")
    titles = {"message": "What stops a deviating server (its messages)",
              "configuration": "Settings refused when built, and honest accounting"}
    for kind, title in titles.items():
        rows = [r for r in results if r.kind == kind]
        if not rows:
            continue
        table = Table(title=title)
        for col in ("protection", "the server tries to" if kind == "message" else "setting",
                    "stopped by", "outcome"):
            table.add_column(col, overflow="fold")
        for r in rows:
            outcome = r.outcome if r.stopped else f"[bold red]{r.outcome}[/]"
            table.add_row(escape(r.protection), escape(r.attack), escape(r.check), outcome)
        console.print(table)
    if details:
        for i, r in enumerate(results, 1):
            console.print(f"{i:2d}. {escape(r.detail)}")
    failed = [r for r in results if not r.stopped]
    messages = [r for r in results if r.kind == "message"]
    settings = [r for r in results if r.kind != "message"]
    console.print(
        f"{sum(r.stopped for r in messages)} of {len(messages)} message attacks stopped by the "
        f"check each row names; {sum(r.stopped for r in settings)} of {len(settings)} "
        "configuration checks hold. What each protection holds against, and what it does "
        "not: docs/threat-model.md.")
    if json_path is not None:
        save_json(json_path, [r.to_dict() for r in results])
    if failed:
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
    from islands.pca.audit import audit_pca

    ds = _load_images(dataset, n_samples)
    parts = [ds.X[idx] for idx in partition_iid(ds.n_samples, sites, random_state=seed)]
    console.print(f"{dataset}: {ds.n_samples} rows × {ds.n_features} features over {sites} "
                  f"sites; ε = {epsilon}, δ = {delta}. Site 1 attacks with what it received.")
    with stop_on_error(1):
        report = audit_pca(parts, epsilon=epsilon, delta=delta, random_state=seed,
                           progress=progress_option())
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
    _save_report(json_path, dataset, report.to_dict())


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
    from islands.hfl.audit import PROTECTIONS, audit_gradients

    names = [p.strip() for p in protections.split(",") if p.strip()]
    if not names or any(p not in PROTECTIONS for p in names):
        raise typer.BadParameter(f"a comma-separated subset of {', '.join(PROTECTIONS)}",
                                 param_hint="--protections")
    if dataset is not None:
        _check_dataset(dataset)
    console.print("Three clients, one FedAvg round of one full-batch SGD step each; client 1 "
                  "holds one image. The server attacks what it received: "
                  "x_i = ΔW\\[j,i]/Δb\\[j] on the first layer.")
    with stop_on_error(1):
        result = audit_gradients(out, protections=names, seed=seed, sample=sample,
                                 dp_clip=dp_clip, dp_noise=dp_noise, dataset=dataset,
                                 progress=progress_option())
    if "dataset" in result.notes:
        console.print(f"[yellow]{escape(result.notes['dataset'])}[/]")
    table = Table(title=f"Server's recovery of client 1's image ({result.dataset} "
                        f"#{result.sample_index}, label {result.label}); "
                        "error ‖x̂ − x‖/‖x‖, 0 = exact, 1 = guessing 0")
    for col in ("protection", "error", "readings"):
        table.add_column(col, justify="right" if col == "error" else "left")
    for name, error in result.errors.items():
        readings = ", ".join(f"{view} {value:.2e}" for view, value
                             in result.views.get(name, {}).items())
        colour = "red" if error < 0.1 else "green"
        table.add_row(escape(name), f"[{colour}]{error:.2e}[/]", escape(readings))
    console.print(table)
    for name, note in result.notes.items():
        if name != "dataset":
            console.print(f"[bold]{escape(name)}[/]: {escape(note)}")
    if result.figure:
        console.print(f"figure: {escape(result.figure)}")
    if result.json:
        console.print(f"wrote {escape(result.json)}")
    if json_path is not None:
        write_json(json_path, result.to_json())
        console.print(f"wrote {escape(str(json_path))}")


@audit_app.command("secureboost")
def audit_secureboost_command(
    dataset: Annotated[str, typer.Option(
        "--dataset", "--data",
        help="'breast_cancer' (569 rows, 15 + 15 columns), 'synthetic' (Gaussian, 10 + 10 "
             "features) or 'fashion_mnist' (left/right image halves; 1 = upper-body "
             "garment).")] = "breast_cancer",
    n_samples: Annotated[int, typer.Option(
        min=20, help="Rows of 'synthetic' and 'fashion_mnist'.")] = 5_000,
    trees: Annotated[int, typer.Option(min=1, max=10_000, help="Boosting rounds.")] = 50,
    depth: Annotated[int, typer.Option(min=1, max=16, help="Levels of every tree.")] = 3,
    known: Annotated[float, typer.Option(
        help="Share of the training rows whose labels the attacker knows, in (0, 0.5].")]
    = 0.02,
    top_levels: Annotated[int, typer.Option(
        min=1, help="active_top_levels of the hardened settings, at most --depth.")] = 1,
    seed: Annotated[int, typer.Option(
        min=0, help="Seed of the split, the known rows and the boosting.")] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write every figure as JSON.")
    ] = None,
) -> None:
    """Infer the labels from what a passive SecureBoost party received, per hardening."""
    from islands.vfl.secureboost.audit import DATASETS, audit_data, audit_secureboost

    if dataset not in DATASETS:
        raise typer.BadParameter(f"use one of {', '.join(DATASETS)}", param_hint="--dataset")
    if not 0 < known <= 0.5:
        raise typer.BadParameter(f"a share in (0, 0.5]; got {known}", param_hint="--known")
    if top_levels > depth:
        raise typer.BadParameter(f"at most --depth ({depth}); got {top_levels}",
                                 param_hint="--top-levels")
    with stop_on_error(2):
        data = audit_data(dataset, n_samples=n_samples, seed=seed)
    console.print(f"{escape(data.description)}. {trees} trees of depth {depth}, 30% of the "
                  "rows held out. The passive party attacks what it received: each tree's "
                  "node of every row and its own splits (never the gradients; the run is in "
                  "the clear for speed, the instance spaces are those of the encrypted run).")
    with stop_on_error(1):
        report = audit_secureboost(data.passive, data.active, data.y, n_estimators=trees,
                                   max_depth=depth, known_fraction=known,
                                   top_levels=top_levels, seed=seed, dataset=data.name,
                                   progress=progress_option())
    short = {(0, 0, False): "faithful", (1, 0, False): "first tree",
             (0, top_levels, False): f"top {top_levels} level{'s' if top_levels > 1 else ''}",
             (1, top_levels, False): "both", (0, 0, True): "mix"}
    table = Table(title=f"Passive party's accuracy/AUC on the "
                        f"{report.train_rows - report.known_labels} training rows whose "
                        f"label it does not know ({report.known_labels} known)")
    table.add_column("trees seen")
    for s in report.settings:
        table.add_column(short[(s.active_first_trees, s.active_top_levels, s.mix)],
                         justify="right")
    for i, point in enumerate(report.settings[0].curve):
        table.add_row(str(point.trees),
                      *[f"{s.curve[i].accuracy:.3f}/{s.curve[i].auc:.2f}"
                        for s in report.settings])
    table.add_row("no label", *[
        "—" if s.zero_knowledge_accuracy is None
        else f"{s.zero_knowledge_accuracy:.2f}≤{s.naming_upper_bound:.2f}"
        for s in report.settings], end_section=True)
    hidden = []
    for s in report.settings:
        text = ", ".join(part for part in (
            f"{s.trees_hidden} tree{'s' if s.trees_hidden > 1 else ''}"
            if s.trees_hidden else "",
            f"{s.levels_hidden} lv" if s.levels_hidden else "") if part) or "none"
        hidden.append(text if s.hidden_as_planned else f"[bold red]{text} NOT AS PLANNED[/]")
    table.add_row("hidden", *hidden)
    table.add_row("test AUC", *[f"{s.test_auc:.4f}" for s in report.settings])
    console.print(table)
    console.print(
        f"Baselines on the same rows: the majority class {report.prior_accuracy:.3f} (AUC "
        f"0.500); a logistic regression on the passive party's own features and the "
        f"{report.known_labels} known labels {report.own_features_accuracy:.3f} / "
        f"{report.own_features_auc:.3f}. Accuracy names the π share of best-scoring rows "
        f"positive (π = {report.positive_rate:.3f}, assumed known). 'no label': the first "
        "split the party saw, its parts named from π alone (≤ the best naming of those "
        "parts, an upper bound). 'hidden': trees and levels (lv) that reached the passive "
        "party without rows. Hiding a tree hides its instance spaces; hiding the top "
        "levels does not, since the next level's nodes show them.")
    _save_report(json_path, report.dataset, report.to_dict())


@audit_app.command("vfl")
def audit_vfl_command(
    dataset: Annotated[str, typer.Option(
        help="'breast_cancer' (B holds 10 columns and the labels, A the other 20).")]
    = "breast_cancer",
    epochs: Annotated[int, typer.Option(min=1, help="Epochs of each run.")] = 2,
    sigmoid: Annotated[str, typer.Option(
        help="'taylor' (the paper's) or 'poly5' (adds the power tuples and openings).")]
    = "taylor",
    seed: Annotated[int, typer.Option(help="Seed of the permutation and the batches.")] = 0,
    alpha: _Alpha = 0.01,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write every p-value as JSON.")
    ] = None,
) -> None:
    """Show that each party's view of vertical regression on secret shares is uniform."""
    from sklearn.preprocessing import StandardScaler

    from islands.vfl.audit import ss_view_check

    if dataset != "breast_cancer":
        raise typer.BadParameter("use 'breast_cancer'", param_hint="--dataset")
    if sigmoid not in ("taylor", "poly5"):
        raise typer.BadParameter("use 'taylor' or 'poly5'", param_hint="--sigmoid")
    with stop_on_error(2):
        ds = load_sklearn("breast_cancer")
    x = StandardScaler().fit_transform(ds.X)
    console.print("Vertical logistic regression on breast cancer under engine='ss', trained "
                  "twice: on B's rows and labels, then on a random permutation of them (A's "
                  "data unchanged). Every ring message each party received, residues scaled "
                  "by their prime to [0, 1), against uniform noise and against the other "
                  "run (Kolmogorov-Smirnov).")
    with stop_on_error(1):
        check = ss_view_check(x[:, 10:], x[:, :10], ds.y, sigmoid=sigmoid, epochs=epochs,
                              alpha=alpha, random_state=seed)
    table = Table(title="p-values (small: the view tells the data apart)")
    for col in ("party", "message", "vs uniform", "vs the other run"):
        table.add_column(col)
    for key, p in check.pvalues.items():
        party, tag, test = key.split("/")
        if test == "uniform":
            table.add_row(party, tag, f"{p:.3f}",
                          f"{check.pvalues[f'{party}/{tag}/two-sample']:.3f}")
    console.print(table)
    bound = check.alpha / len(check.pvalues)
    console.print(f"C received only {', '.join(check.coordinator_tags)}: no share of data. "
                  f"Every p-value {'is' if check.indistinguishable else 'is NOT'} above "
                  f"{bound:.1e} (Bonferroni at {check.alpha}): each party's view "
                  f"{'cannot' if check.indistinguishable else 'CAN'} be told from uniform "
                  "noise or from a run on other data.")
    _save_report(json_path, dataset, check.to_dict())


@audit_app.command("dp")
def audit_dp_command(
    job_file: Annotated[Path | None, typer.Argument(
        help="An HFL job file with client-level DP (protect holds \"dp\": canary clients "
             "are added to its run) or DP-SGD (\"dp-sgd\": canary rows are added to one "
             "client's data). Without it, --mechanism is audited.", show_default=False)]
    = None,
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", help="KEY=VALUE overrides of the job file, as islands run takes them.")]
    = None,
    mechanism: Annotated[str | None, typer.Option(
        help="Without a job: 'gaussian' (islands' clip, CSPRNG noise and Poisson sampling; "
             "the default), 'client-dp' (canary clients through the real FL protocol), "
             "'dp-sgd' (canary rows through the real PrivateTrainer) or 'pca' (federated "
             "DP-PCA, canary rows in one site).", show_default=False)] = None,
    canaries: Annotated[int | None, typer.Option(
        min=2, help="m, the number of canaries (default per mechanism: gaussian 20000, "
                    "client-dp 200, dp-sgd 5000, pca 1000; a client-level DP job: 128 "
                    "under a hiding protection, else 512; a DP-SGD job: 256 canary rows, at "
                    "most the holder's training rows).", show_default=False)] = None,
    noise_multiplier: Annotated[float | None, typer.Option(
        help="σ (gaussian 6, client-dp 8, dp-sgd 2).", show_default=False)] = None,
    clip: Annotated[float, typer.Option(help="S, the clipping norm.")] = 1.0,
    rounds: Annotated[int | None, typer.Option(
        min=1, help="Releases: gaussian T (10), client-dp rounds (5), dp-sgd steps (200).",
        show_default=False)] = None,
    sampling_rate: Annotated[float | None, typer.Option(
        help="q, the Poisson sampling rate, in (0, 1] (gaussian 1, dp-sgd 0.05).",
        show_default=False)] = None,
    noise: Annotated[str, typer.Option(
        help="client-dp: 'local' or 'distributed' noise.")] = "local",
    base: Annotated[str, typer.Option(
        help="client-dp: the aggregation under the noise: 'mean', 'secagg', 'secaggplus' or "
             "'additive'.")] = "mean",
    mode: Annotated[str, typer.Option(
        help="pca: 'secure', 'central', 'dpdispca' or 'elfedpca'.")] = "secure",
    epsilon: Annotated[float, typer.Option(help="pca: the configured ε, in (0, 1).")] = 0.9,
    dataset: Annotated[str, typer.Option(help="pca: a scikit-learn data set.")] = "digits",
    sites: Annotated[int, typer.Option(min=2, help="pca: sites the rows are split into.")]
    = 3,
    delta: Annotated[float, typer.Option(help="δ of the claim and the bounds.")] = 1e-5,
    accountant: Annotated[str, typer.Option(help="'rdp' or 'pld'.")] = "rdp",
    confidence: Annotated[float, typer.Option(help="1 − β of every bound.")] = 0.95,
    sweep: Annotated[str | None, typer.Option(
        help="Also plot the bound against 'canaries' (m: nested subsets of one run) or, for "
             "gaussian, 'noise' (σ: one run per point).")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Write results.json, report.md and (with --sweep) dp_audit.png here.")] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the audit as JSON.")] = None,
) -> None:
    """Measure a lower bound on the ε a DP mechanism really gives, in one run (Steinke et al.).

    Exits 1 when a bound contradicts the ε the mechanism reports.
    """
    import logging

    from islands.experiments.dp_audit import (
        DESCRIPTIONS,
        MECHANISMS,
        AuditSettings,
        audit_dp,
        audit_dp_job,
        verdict,
        write_dp_audit,
    )

    if job_file is not None and mechanism is not None:
        raise typer.BadParameter("give a job file or --mechanism, not both",
                                 param_hint="--mechanism")
    if job_file is None and overrides:
        raise typer.BadParameter("--set applies to a job file", param_hint="--set")
    name = mechanism or "gaussian"
    if name not in MECHANISMS:
        raise typer.BadParameter(f"use one of {', '.join(sorted(MECHANISMS))}",
                                 param_hint="--mechanism")
    if sweep not in (None, "canaries", "noise") or (sweep == "noise" and name != "gaussian") \
            or (sweep is not None and job_file is not None):
        raise typer.BadParameter("use 'canaries' (or 'noise' with --mechanism gaussian); "
                                 "a job file takes no sweep", param_hint="--sweep")
    if accountant not in ("rdp", "pld"):
        raise typer.BadParameter("use 'rdp' or 'pld'", param_hint="--accountant")
    # every canary client reports no training loss; the server's per-client warning is noise
    logging.getLogger("islands.hfl.protocol").setLevel(logging.ERROR)
    if job_file is not None:
        from islands.hfl.job import load_job

        with stop_on_error(2):
            job = load_job(job_file, overrides or ())
        what = (f"DP-SGD: {DESCRIPTIONS['dp-sgd-job']}; the canary rows change the "
                "holder's data (more rows) and it is compared with its own account"
                if "dp-sgd" in job.protect else
                f"Client-level DP: {DESCRIPTIONS['job']}; the canaries change the run (more "
                "clients) and it is compared with its own accountant")
        console.print(f"One-run DP audit (Steinke, Nasr and Jagielski 2023) of job "
                      f"{escape(job.name)}. {what}.")
        with stop_on_error(2), console.status("auditing") as status:
            result = audit_dp_job(job, canaries=canaries, confidence=confidence,
                                  progress=lambda msg: status.update(escape(msg)))
        if "scope" in result.extra:
            console.print(f"Audited: {escape(result.extra['scope'])}.")
    else:
        settings = AuditSettings(
            canaries=canaries, confidence=confidence, delta=delta, accountant=accountant,
            noise_multiplier=noise_multiplier, clip=clip, rounds=rounds,
            sampling_rate=sampling_rate, noise=noise, base=base, mode=mode, epsilon=epsilon,
            dataset=dataset, sites=sites).resolved(name)
        what = (f"mode {mode}, ε = {epsilon:g}, {dataset} in {sites} sites" if name == "pca"
                else f"σ = {settings.noise_multiplier:g}, S = {clip:g}, T = "
                     f"{settings.rounds}, q = {settings.sampling_rate:g}"
                     + (f", {noise} noise over {base}" if name == "client-dp" else ""))
        console.print(f"One-run DP audit (Steinke, Nasr and Jagielski 2023) of "
                      f"{DESCRIPTIONS[name]}: {what}; {settings.canaries} canaries, each "
                      "included with probability 1/2 from the CSPRNG.")
        with stop_on_error(2), console.status("auditing") as status:
            result = audit_dp(name, settings, sweep=sweep,
                              progress=lambda msg: status.update(escape(msg)))
    table = Table(title=f"ε at δ = {result.settings.delta:g}; bounds at {confidence:.0%} "
                        "confidence")
    # two-line headers and right/guesses in one column: the table fits 80 columns
    for col in ("view", "claimed\nε", "bound", "curve\nbound", "estimate", "right of\nguesses",
                "ceiling"):
        table.add_column(col, justify="left" if col == "view" else "right", no_wrap=True)
    for view, a in result.views.items():
        table.add_row(view, f"{a.claimed_epsilon:.3f}", f"{a.lower_bound:.3f}",
                      "n/a" if a.curve_bound is None else f"{a.curve_bound:.3f}",
                      "n/a" if a.estimate is None else f"{a.estimate:.3f}",
                      f"{a.correct} / {a.guesses}", f"{a.plan_ceiling:.2f}")
    console.print(table)
    console.print("claimed ε: what the mechanism's accountant reports (" + "; ".join(
        f"{v}: {c}" for v, c in result.compared_with.items()) + "); bound: Steinke et al.'s "
        "lower bound on ε; curve bound: against the claim's whole trade-off curve "
        "(Mahloujifar et al.; Gaussian, or Poisson-subsampled Gaussian from its privacy "
        "profile); estimate: Andrew et al.'s, with no confidence; right of guesses and "
        "ceiling: the bound's guesses, and the most they can show.")
    console.print(verdict(result))
    if out is not None:
        with stop_on_error(2):
            written = write_dp_audit(result, out)
        console.print("wrote " + ", ".join(escape(str(p)) for p in written))
    if json_path is not None:
        save_json(json_path, result.to_json())
    if result.contradicted:
        raise typer.Exit(1)
