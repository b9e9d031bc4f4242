"""Register the schemas in Hydra's ConfigStore so a wrong key or type fails at compose time."""
from __future__ import annotations

from hydra.core.config_store import ConfigStore

from vtrain.config.schema import VtrainConfig

_registered = False


def register_configs() -> None:
    global _registered
    if _registered:
        return
    cs = ConfigStore.instance()
    cs.store(name="vtrain_schema", node=VtrainConfig)
    _registered = True
