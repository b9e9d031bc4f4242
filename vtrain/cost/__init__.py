"""Cost models: per-op time from an analytical roofline or from measured profiles."""
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.cost.base import CostModel

__all__ = ["AnalyticalCostModel", "CostModel"]
