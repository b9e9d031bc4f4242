"""Compose the config (Hydra's compose API or the CLI), then resolve the cluster's GPU by name."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from vtrain.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def group_options(group: str) -> List[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def require_group(cfg: DictConfig, group: str) -> None:
    if OmegaConf.is_missing(cfg, group) or cfg.get(group) is None:
        raise ConfigError(f"{group} is not set: add +{group}=<name>, one of: {', '.join(group_options(group))}")


def load_group_config(group: str, name: str, schema: type) -> DictConfig:
    """The ``group/name.yaml`` config merged over its schema dataclass (typed, checked), without
    composing a whole run config."""
    path = CONF_DIR / group / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"{group}={name} is unknown; one of: {', '.join(group_options(group))}")
    try:
        return OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.load(path))
    except Exception as exc:
        raise ConfigError(f"{group}/{name}.yaml: {str(exc).splitlines()[0]}") from None


def load_gpu_config(name: str) -> DictConfig:
    """The gpu/ config ``name`` merged over the GpuConfig schema."""
    from vtrain.config.schema import GpuConfig

    return load_group_config("gpu", name, GpuConfig)


def resolve(cfg: DictConfig) -> DictConfig:
    """Check that model and cluster are given and fill ``cfg.gpu`` from ``cluster.gpu`` when unset."""
    require_group(cfg, "model")
    require_group(cfg, "cluster")
    if cfg.get("gpu") is None:
        with open_dict(cfg):
            cfg.gpu = load_gpu_config(str(cfg.cluster.gpu))
    return cfg


def compose(overrides: Optional[Sequence[str]] = None, require: bool = True) -> DictConfig:
    """Compose ``conf/config.yaml`` with Hydra overrides, e.g. ``["+model=gpt175b", "+cluster=a100x1024"]``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from vtrain.config.store import register_configs

    register_configs()
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="vtrain"):
            cfg = hydra_compose(config_name="config", overrides=list(overrides or []))
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(str(exc).strip().splitlines()[0]) from None
    return resolve(cfg) if require else cfg
