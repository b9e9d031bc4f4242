"""Compose the config (Hydra's compose API or the CLI), then resolve the cluster's GPU by name.

The configs ship as package data (``vtrain/conf``), found through :mod:`importlib.resources` so that a
wheel install works like a source checkout. A group config may inherit from others in its group through
a Hydra defaults list (``defaults: [a100_80gb, _self_]``); :func:`load_group_config` follows the same
rule when it loads a single group config by name (the cluster's GPU).
"""
from __future__ import annotations

import copy
import functools
import re
from importlib import resources
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf, open_dict

from vtrain.config.userfiles import check_config_dirs
from vtrain.errors import ConfigError

CONF_DIR = Path(str(resources.files("vtrain") / "conf"))
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # a config name, never a path
# the user's config folders (``--config-dir``, Hydra's flag), searched after the shipped configs, as Hydra does:
# a model, cluster, GPU, stack or price list of one's own is a YAML file in <dir>/<group>/
_USER_DIRS: List[Path] = []


def set_user_config_dirs(dirs: Sequence[str]) -> None:
    """The ``--config-dir`` folders of this run (replacing any of a previous run in this process)."""
    found: List[Path] = []
    for d in dirs:
        path = Path(d).expanduser()
        if not path.is_dir():
            raise ConfigError(f"--config-dir={d}: no such directory (it holds <group>/<name>.yaml files, e.g. "
                              "model/my_model.yaml)")
        found.append(path.resolve())
    check_config_dirs(found)  # each file readable, data only, of the schema: one line naming file, line and key
    _USER_DIRS[:] = found


def user_config_dirs() -> List[Path]:
    return list(_USER_DIRS)


def config_dirs() -> List[Path]:
    """Where group configs are looked up, in Hydra's order: the shipped configs, then ``--config-dir``."""
    return [CONF_DIR, *_USER_DIRS]


def group_options(group: str) -> List[str]:
    """The selectable configs of a group (files starting with ``_`` are shared bases, not options)."""
    return list(_options(group, tuple(config_dirs())))


@functools.lru_cache(maxsize=64)  # a large validation CSV asks per row
def _options(group: str, dirs: Tuple[Path, ...]) -> Tuple[str, ...]:
    return tuple(sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml") if not p.stem.startswith("_")}))


def require_group(cfg: DictConfig, group: str) -> None:
    if OmegaConf.is_missing(cfg, group) or cfg.get(group) is None:
        raise ConfigError(f"{group} is not set: add +{group}=<name>, one of: {', '.join(group_options(group))}")


def check_config_name(group: str, name: str) -> Path:
    """The file of config ``group/name``; the name must be a plain config name (no path parts)."""
    if not _NAME.match(name) or ".." in name:
        raise ConfigError(f"{group}={name} is not a config name; one of: {', '.join(group_options(group))}")
    for d in config_dirs():
        path = d / group / f"{name}.yaml"
        if path.is_file():
            return path
    raise ConfigError(f"{group}={name} is unknown; one of: {', '.join(group_options(group))}")


def _load_raw(group: str, name: str, seen: tuple[str, ...] = ()) -> Any:
    """``group/name.yaml`` with its in-group defaults list applied (Hydra's order: listed configs, then
    ``_self_`` where it appears, at the end when it does not)."""
    if name in seen:
        raise ConfigError(f"{group}/{name}.yaml: its defaults list is circular ({' -> '.join((*seen, name))})")
    try:
        node = OmegaConf.load(check_config_name(group, name))
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"{group}/{name}.yaml: {str(exc).splitlines()[0]}") from None
    defaults = node.pop("defaults", None) if isinstance(node, DictConfig) else None
    if not defaults:
        return node
    parts: List[Any] = []
    has_self = False
    for entry in defaults:
        if entry == "_self_":
            parts.append(node)
            has_self = True
        elif isinstance(entry, str):
            parts.append(_load_raw(group, entry, (*seen, name)))
        elif isinstance(entry, DictConfig) and all(str(k).startswith("override /") for k in entry):
            continue  # another group's choice (a model's training run): Hydra applies it when a run is composed
        else:
            raise ConfigError(f"{group}/{name}.yaml: defaults entry {entry} must name a {group}/ config")
    if not has_self:
        parts.append(node)
    return OmegaConf.merge(*parts)


def load_group_config(group: str, name: str, schema: type) -> DictConfig:
    """The ``group/name.yaml`` config merged over its schema dataclass (typed, checked), without
    composing a whole run config. A shipped config (package data, which does not change while a process runs)
    is read and merged once per process (~30 ms of YAML parsing and merging) and handed out as a copy (~3 ms),
    which the caller may change; a ``--config-dir`` file, which may be rewritten, is read each time."""
    if check_config_name(group, name).parent.parent == CONF_DIR:
        return copy.deepcopy(_shipped_group_config(group, name, schema, tuple(config_dirs())))
    return _read_group_config(group, name, schema)


@functools.lru_cache(maxsize=256)  # its key names the search path: a defaults entry is looked up along it
def _shipped_group_config(group: str, name: str, schema: type, dirs: Tuple[Path, ...]) -> DictConfig:
    return _read_group_config(group, name, schema)


def _read_group_config(group: str, name: str, schema: type) -> DictConfig:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), _load_raw(group, name))
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"{group}/{name}.yaml: {str(exc).splitlines()[0]}") from None
    assert isinstance(merged, DictConfig)
    return merged


def load_gpu_config(name: str) -> DictConfig:
    """The gpu/ config ``name`` merged over the GpuConfig schema."""
    from vtrain.config.schema import GpuConfig

    return load_group_config("gpu", name, GpuConfig)


def load_stack_config(name: str) -> DictConfig:
    """The stack/ config ``name`` merged over the StackConfig schema."""
    from vtrain.config.schema import StackConfig

    return load_group_config("stack", name, StackConfig)


def resolve(cfg: DictConfig) -> DictConfig:
    """Check that model and cluster are given and fill ``cfg.gpu`` from ``cluster.gpu`` when unset."""
    require_group(cfg, "model")
    require_group(cfg, "cluster")
    if cfg.get("gpu") is None:
        with open_dict(cfg):
            cfg.gpu = load_gpu_config(str(cfg.cluster.gpu))
    return cfg


def compose(overrides: Optional[Sequence[str]] = None, require: bool = True,
            config_dirs: Sequence[str] = ()) -> DictConfig:
    """Compose ``conf/config.yaml`` with Hydra overrides, e.g. ``["+model=gpt175b", "+cluster=a100x1024"]``;
    ``config_dirs``: folders of one's own configs (``<dir>/<group>/<name>.yaml``), the command line's
    ``--config-dir``, searched after the shipped ones (for this and later lookups, until the next compose)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from vtrain.config.store import register_configs

    register_configs()
    set_user_config_dirs(config_dirs)
    quoted = ",".join("'file://" + str(d).replace("\\", "\\\\").replace("'", "\\'") + "'" for d in _USER_DIRS)
    search = [f"hydra.searchpath=[{quoted}]"] if _USER_DIRS else []  # Hydra's quoted strings: \\ and \' escaped
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="vtrain"):
            cfg = hydra_compose(config_name="config", overrides=[*search, *(overrides or [])])
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(str(exc).strip().splitlines()[0]) from None
    return resolve(cfg) if require else cfg
