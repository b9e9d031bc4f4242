"""Hydra callbacks of vtrain (registered under ``hydra.callbacks`` in ``conf/config.yaml``).

:class:`PrepareSharedStores` runs once in the launching process of a multirun, before any job
starts: it creates (or migrates) the MLflow SQLite tracking database and an Optuna RDB storage given
as ``search.storage``, because several jobs creating one new SQLite schema at the same time race
(some fail quietly). Single runs are untouched. Heavy imports happen only when a store is prepared.
"""
from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)


class PrepareSharedStores(Callback):
    def __init__(self, mlflow: bool = True, optuna: bool = True) -> None:
        self.mlflow = mlflow
        self.optuna = optuna

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from omegaconf import OmegaConf

        tracking = OmegaConf.select(config, "tracking", default=None)
        if self.mlflow and tracking is not None and bool(tracking.get("enabled", False)):
            from vtrain.tracking.store import prepare_store, tracking_uri

            uri = tracking_uri(tracking)
            try:
                prepare_store(uri)
                log.info(f"MLflow tracking store ready: {uri}")
            except Exception as exc:  # never block the sweep; jobs report their own errors
                log.warning(f"could not prepare the MLflow store {uri}: {exc}")
        storage = OmegaConf.select(config, "search.storage", default=None)
        if self.optuna and storage and "://" in str(storage):
            try:
                import optuna

                optuna.storages.RDBStorage(str(storage))  # creates / upgrades the schema
                log.info(f"Optuna storage ready: {storage}")
            except Exception as exc:
                log.warning(f"could not prepare the Optuna storage {storage}: {exc}")



class JobInputError(Exception):
    """A multirun job's one-line input error, raised so that the launcher records the job as failed."""


class MultirunJobErrors(Callback):
    """In a multirun job, vtrain's one-line input error fails *that job* instead of exiting the process.

    ``vtrain.cli.main`` ends a bad input with ``sys.exit(2)``. Inside a submitit job ``SystemExit``
    escapes submitit's wrapper without writing a result file; on a SLURM cluster without job
    accounting (no ``sacct``, like the single-node CI cluster) the launcher then waits forever, and
    with Hydra's basic launcher the whole sweep stops at the first bad job. Here the job prints the
    line to stderr as usual and raises :class:`JobInputError`; Hydra records a failed job and the
    launcher reports it. Single runs are untouched (still one line, exit code 2)."""

    def on_job_start(self, config: DictConfig, *, task_function: Any = None, **kwargs: Any) -> None:
        from hydra.types import RunMode

        if config.hydra.mode != RunMode.MULTIRUN:
            return
        import sys

        import vtrain.cli.main as cli

        def fail(message: str) -> None:
            print(f"vtrain: error: {message}", file=sys.stderr)
            raise JobInputError(f"vtrain: error: {message}")

        cli.fail = fail  # type: ignore[assignment]
        # submitit pickles the undecorated task function by value (the module attribute is Hydra's
        # wrapper), so its globals are a copy: patch the ones the job will actually run with
        task_globals = getattr(task_function, "__globals__", None)
        if isinstance(task_globals, dict) and "fail" in task_globals:
            task_globals["fail"] = fail
