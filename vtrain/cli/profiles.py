"""Pick the operator profile for a config (cost.model = profile | analytical | auto)."""
from __future__ import annotations

from typing import Any

from omegaconf import DictConfig


def profile_for(cfg: DictConfig) -> Any:
    """The loaded profile table to use, or None for the analytical model."""
    kind = str(cfg.cost.model)
    if kind == "analytical":
        return None
    try:
        from vtrain.cost.profile_io import find_profile
    except ImportError:  # profile support not installed in this build
        if kind == "profile":
            from vtrain.errors import ConfigError

            raise ConfigError("cost.model=profile: profile support is not available") from None
        return None
    return find_profile(cfg, required=(kind == "profile"))
