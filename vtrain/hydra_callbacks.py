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
