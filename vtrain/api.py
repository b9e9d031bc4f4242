"""The public core: ``simulate(cfg) -> Report``. Pure: no I/O, no Hydra, no torch/mlflow/optuna."""
from __future__ import annotations

from typing import Any, Optional, Tuple

from vtrain.config.build import build_workload
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.cost.base import CostModel
from vtrain.report import Report
from vtrain.sim.simulator import SimulationTrace, simulate_workload
from vtrain.workload.workload import Workload


def cost_model_for(w: Workload, profile: Any = None) -> CostModel:
    """The analytical model, or a profile-driven one when a loaded profile table is given."""
    analytical = AnalyticalCostModel(w)
    if profile is None:
        return analytical
    from vtrain.cost.profiled import ProfiledCostModel  # no torch: plain tables

    return ProfiledCostModel(profile, analytical, model=w.model, precision=w.plan.precision.value)


def simulate(cfg: Any, profile: Any = None) -> Report:
    """Predict one training iteration of the composed config ``cfg`` (see :func:`vtrain.compose`)."""
    w = build_workload(cfg)
    report, _ = simulate_workload(w, cost_model_for(w, profile))
    return report


def simulate_with_trace(cfg: Any, profile: Any = None) -> Tuple[Report, Optional[SimulationTrace]]:
    w = build_workload(cfg)
    return simulate_workload(w, cost_model_for(w, profile), keep_trace=True)
