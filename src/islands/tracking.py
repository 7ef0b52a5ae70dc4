"""Experiment trackers: per-round metrics to TensorBoard and MLflow (optional extras).

A job's ``[tracking]`` section and an estimator's ``tracking=`` argument build one
:class:`TrackingConfig`; :class:`Tracker` opens the trackers it names in the process that
holds the history (the server's side, or the estimator), takes each round's values and
the final summary, and closes them. The writers are the tools' own:
:class:`torch.utils.tensorboard.SummaryWriter` (event files for ``tensorboard --logdir``)
and :class:`mlflow.tracking.MlflowClient` (``mlflow-skinny``); this module only maps
islands' records onto them, which neither library does.

What is logged is what the run's ``results.json`` shows anyway: the settings, per-round
τ, loss, local accuracy, ε spent and bytes, per-epoch test metrics, and a summary of the
final model (its test metrics, size and architecture). Never the rows, labels, model
weights, keys or masks.

A tracker that fails to start (extra missing, URI refused) stops the run before any
training, with a message naming it; one that fails later is turned off with a warning
naming it and the error, and recorded in :attr:`Tracker.errors` (``results.json``'s
``tracking``): the training and its results go on unchanged.

MLflow 3 refuses its ``file:`` store unless ``MLFLOW_ALLOW_FILE_STORE`` is set; for a
``file:`` URI islands sets it to ``true`` when it is unset (MLflow's documented opt-out).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import model_validator

from islands.config import ProtocolConfig, setting
from islands.errors import TrackingError, ValidationError

__all__ = ["EXTRA_HINT", "Tracker", "TrackingConfig", "job_tracker", "run_label"]

EXTRA_HINT = "pip install 'islands[tracking]'"
"""What to install for the trackers."""


class TrackingConfig(ProtocolConfig):
    """Where a run's metrics go: TensorBoard event files, an MLflow run, both or neither."""

    OWNER = "tracking"

    tensorboard: bool | str = setting(
        False, "a bool or a folder path",
        "Write TensorBoard event files: true puts them in the run's folder (a job's "
        "<output>/tensorboard, an estimator's runs/), a path in that folder; one "
        "subfolder per run.")
    mlflow: bool = setting(False, "a bool", "Log the run to MLflow.")
    mlflow_uri: str | None = setting(
        None, "None or a tracking URI",
        "MLflow tracking URI (default: a file: store, a job's <output>/mlruns or an "
        "estimator's ./mlruns).")
    experiment: str = setting("islands", "a non-empty string",
                              "MLflow experiment the run is logged under.", min_length=1)
    run_name: str | None = setting(
        None, "None or a non-empty string",
        "Name of the run in both trackers (default: the job's name, its --set "
        "overrides and the start time).", min_length=1)

    @model_validator(mode="after")
    def _check(self) -> TrackingConfig:
        if self.tensorboard == "":
            raise ValidationError("'tensorboard' must be a bool or a folder path; got ''")
        if self.mlflow_uri is not None and not self.mlflow:
            raise ValidationError(f"'mlflow_uri' is only used with mlflow = true; got "
                                  f"mlflow_uri = {self.mlflow_uri!r} and mlflow = false")
        return self

    @property
    def enabled(self) -> bool:
        """Whether any tracker is on."""
        return self.tensorboard is not False or self.mlflow

    def check_installed(self) -> None:
        """Raise ImportError naming the extra when a tracker this asks for is missing."""
        if self.tensorboard is not False:
            _need("tensorboard", "tensorboard")
            _need("torch", "torch")
        if self.mlflow:
            _need("mlflow", "mlflow-skinny")


def run_label(name: str, overrides: Mapping[str, Any] | None = None) -> str:
    """Return a default run name: ``name``, the overrides and the local start time.

    TensorBoard shows each run folder as one curve, so two runs that differ in one
    ``--set`` setting sit side by side under names that say which.
    """
    parts = [name, *(f"{k}={v}" for k, v in (overrides or {}).items()),
             time.strftime("%Y%m%d-%H%M%S")]
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "-", "_".join(parts))


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Return nested settings as ``a.b`` → text (MLflow parameters are strings)."""
    out: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, name + "."))
        else:
            out[name] = value if isinstance(value, str) else json.dumps(value, default=str)
    return out


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    """Keep the finite real numbers (not bools, lists or None) as floats."""
    return {k: float(v) for k, v in values.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


def _need(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"[tracking] needs {package}, which is not installed: {EXTRA_HINT}")


class Tracker:
    """Open trackers for one run; log each round, the summary, then :meth:`close`.

    Parameters
    ----------
    config
        The settings.
    folder
        The run's folder: ``tensorboard = true`` writes under ``folder/tensorboard`` and
        the default MLflow store is ``folder/mlruns``.
    name
        The run's name (``config.run_name`` wins).
    params
        The run's settings, logged once (nested tables become ``a.b`` names).

    Raises
    ------
    ImportError
        When a tracker's package is missing (naming the extra to install).
    TrackingError
        When a tracker cannot start (its folder or URI is refused).
    """

    def __init__(self, config: TrackingConfig, folder: str | os.PathLike[str], name: str,
                 params: Mapping[str, Any] | None = None) -> None:
        self.config = config
        self.name = config.run_name or name
        self.errors: list[str] = []
        self.tensorboard_dir: Path | None = None
        self.mlflow_uri: str | None = None
        self.mlflow_run_id: str | None = None
        self._writer: Any = None
        self._client: Any = None
        self._closed = False
        base = Path(folder)
        config.check_installed()
        if config.tensorboard is not False:
            root = base / "tensorboard" if config.tensorboard is True else Path(
                str(config.tensorboard))
            self.tensorboard_dir = root / self.name
            from torch.utils.tensorboard import SummaryWriter

            try:
                self._writer = SummaryWriter(log_dir=str(self.tensorboard_dir))
            except OSError as exc:
                raise TrackingError(f"TensorBoard cannot write to {self.tensorboard_dir}: "
                                    f"{exc}") from exc
        if config.mlflow:
            self._start_mlflow(base)
        if params:
            self.log_params(params)

    def _start_mlflow(self, base: Path) -> None:
        uri = self.config.mlflow_uri or (base / "mlruns").resolve().as_uri()
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        try:
            client = MlflowClient(tracking_uri=uri)
            found = client.get_experiment_by_name(self.config.experiment)
            experiment = (found.experiment_id if found is not None
                          else client.create_experiment(self.config.experiment))
            run = client.create_run(experiment, run_name=self.name)
        except Exception as exc:  # MLflow raises its own types, and OSError, for a bad store
            raise TrackingError(f"MLflow cannot start a run at {uri!r} (experiment "
                                f"{self.config.experiment!r}): {exc}") from exc
        self._client, self.mlflow_uri, self.mlflow_run_id = client, uri, run.info.run_id

    # ------------------------------------------------------------------ logging
    def _fail(self, which: str, what: str, exc: Exception) -> None:
        message = (f"{which} failed while logging {what} ({type(exc).__name__}: {exc}); "
                   f"nothing more is logged to it, the run and its results go on unchanged")
        self.errors.append(message)
        warnings.warn(f"tracking: {message}", UserWarning, stacklevel=3)
        if which == "TensorBoard":
            self._writer = None
        else:
            self._client = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log the run's settings (MLflow parameters; TensorBoard text ``settings``)."""
        flat = _flat(params)
        if self._writer is not None:
            try:
                self._writer.add_text("settings", "```\n" + json.dumps(
                    params, indent=2, default=str) + "\n```", 0)
            except Exception as exc:
                self._fail("TensorBoard", "the settings", exc)
        if self._client is not None:
            from mlflow.entities import Param

            try:
                # MLflow caps one batch at 100 parameters and a value at 6000 characters
                items = [Param(k, v[:6000]) for k, v in flat.items()]
                for i in range(0, len(items), 100):
                    self._client.log_batch(self.mlflow_run_id, params=items[i:i + 100])
            except Exception as exc:
                self._fail("MLflow", "the settings", exc)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log the finite numbers of ``metrics`` at ``step`` (others are left out)."""
        values = _numbers(metrics)
        if not values:
            return
        if self._writer is not None:
            try:
                for key, value in values.items():
                    self._writer.add_scalar(key, value, step)
            except Exception as exc:
                self._fail("TensorBoard", f"step {step}", exc)
        if self._client is not None:
            from mlflow.entities import Metric

            try:
                now = int(time.time() * 1000)
                self._client.log_batch(self.mlflow_run_id, metrics=[
                    Metric(key, value, now, step) for key, value in values.items()])
            except Exception as exc:
                self._fail("MLflow", f"step {step}", exc)

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        """Log the final model's summary: its numbers as ``final/...``, the whole as text."""
        self.log_metrics({f"final/{k}": v for k, v in summary.items()}, 0)
        text = json.dumps(summary, indent=2, default=str)
        if self._writer is not None:
            try:
                self._writer.add_text("summary", "```\n" + text + "\n```", 0)
            except Exception as exc:
                self._fail("TensorBoard", "the summary", exc)
        if self._client is not None:
            try:
                self._client.log_text(self.mlflow_run_id, text, "summary.json")
            except Exception as exc:
                self._fail("MLflow", "the summary", exc)

    def close(self, failed: bool = False) -> None:
        """Flush and close the writers; end the MLflow run (FAILED when ``failed``)."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception as exc:
                self._fail("TensorBoard", "the end of the run", exc)
        if self._client is not None:
            try:
                self._client.set_terminated(self.mlflow_run_id,
                                            "FAILED" if failed else "FINISHED")
            except Exception as exc:
                self._fail("MLflow", "the end of the run", exc)

    def info(self) -> dict[str, Any]:
        """Where the run was logged, and any tracker failure (``results.json``'s ``tracking``)."""
        return {"run_name": self.name,
                "tensorboard": None if self.tensorboard_dir is None else str(
                    self.tensorboard_dir),
                "mlflow": None if self.mlflow_uri is None else {
                    "uri": self.mlflow_uri, "experiment": self.config.experiment,
                    "run_id": self.mlflow_run_id},
                "errors": list(self.errors)}


def job_tracker(tracking: Mapping[str, Any] | None, folder: str | os.PathLike[str], name: str,
                overrides: Mapping[str, Any], params: Mapping[str, Any]) -> Tracker | None:
    """Open the tracker a job file's ``[tracking]`` asks for (None when it asks for none).

    The run's name says the settings the job ran with (its ``--set`` overrides), not where
    it is logged (``tracking.*`` overrides are left out).
    """
    if tracking is None:
        return None
    config = TrackingConfig.model_validate(tracking)
    if not config.enabled:
        return None
    shown = {k: v for k, v in overrides.items() if not k.startswith("tracking.")}
    return Tracker(config, folder, run_label(name, shown), params=params)

