"""vtrain: a config-driven simulator and planner for large-language-model training."""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["compose", "simulate", "Report", "__version__"]


def __getattr__(name: str) -> Any:  # lazy: `import vtrain` stays fast
    if name == "simulate":
        from vtrain.api import simulate

        return simulate
    if name == "compose":
        from vtrain.config.compose import compose

        return compose
    if name == "Report":
        from vtrain.report import Report

        return Report
    raise AttributeError(name)
