"""Hydra callbacks of vtrain (registered under ``hydra.callbacks`` in ``conf/config.yaml``).

- :class:`RunDirGuard`: before Hydra makes the run (or sweep) directory, take one that no other
  process uses (two runs started in the same second get ``<time>`` and ``<time>-2``) and record what
  it held, so that clean-up after a bad input removes only what this process created
  (:mod:`vtrain.cli.rundir`).
- :class:`PrepareSharedStores`: once in the launching process of a multirun, before any job starts,
  create (or migrate) the MLflow SQLite tracking database and an Optuna RDB storage given as
  ``search.storage``: several jobs creating one new SQLite schema at the same time race (some fail
  quietly). Single runs are untouched.
- :class:`SweepSummary`: at the end of a multirun, ``sweep_summary.csv`` (one row per job: overrides,
  status, headline metrics) and the best plan of each job on stdout (:mod:`vtrain.cli.sweep`).

Heavy imports happen only when needed.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write
from omegaconf.errors import OmegaConfBaseException

log = logging.getLogger(__name__)


def _explicit(config: DictConfig, key: str) -> bool:
    """Whether ``key`` was given on the command line (the override strings unresolved: one may hold ${...})."""
    given = OmegaConf.to_container(config.hydra.overrides.hydra, resolve=False)
    return any(str(o).startswith(f"{key}=") for o in (given if isinstance(given, list) else []))


class RunDirGuard(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from vtrain.cli import rundir

        try:
            path = rundir.claim(str(config.hydra.run.dir), exclusive=not _explicit(config, "hydra.run.dir"))
        except (OSError, OmegaConfBaseException):  # a file in the way, no permission, a bad ${...}: Hydra
            return  # fails next, and vtrain says so in one line
        with read_write(config.hydra):
            config.hydra.run.dir = str(path)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from vtrain.cli import rundir

        try:
            if _explicit(config, "hydra.sweep.dir"):
                return
            path = rundir.claim(str(config.hydra.sweep.dir), exclusive=True)
        except (OSError, OmegaConfBaseException):  # as in on_run_start: Hydra's own step fails next, in one line
            return
        with read_write(config.hydra):
            config.hydra.sweep.dir = str(path)
            config.hydra.overrides.hydra.append(f"hydra.sweep.dir={path}")  # jobs are composed anew from these


class PrepareSharedStores(Callback):
    def __init__(self, mlflow: bool = True, optuna: bool = True) -> None:
        self.mlflow = mlflow
        self.optuna = optuna

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
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


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from vtrain.cli import sweep

        text = sweep.summarise(Path(str(config.hydra.sweep.dir)))
        if text:
            print(text, flush=True)  # the launching process has no job logging configured
