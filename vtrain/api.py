"""The public core: ``simulate(cfg) -> Report``. Pure: no I/O, no Hydra, no torch/mlflow/optuna."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Optional, Tuple

from vtrain.config.build import build_workload
from vtrain.config.validate import check_plan
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.report import Report
from vtrain.sim.recompute_fit import MODES, PER_OP_MODES, first_fitting, recompute_steps
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


def least_recompute_that_fits(w: Workload, cost_for: Callable[[Workload], CostModel]
                              ) -> Optional[Tuple[Workload, Report]]:
    """``w`` with the lightest recompute step that fits its GPUs (:mod:`vtrain.sim.recompute_fit`; a stack whose
    selective checkpointing is per-op, torchtitan's, steps through its own modes) and its report; None when no
    step fits."""
    def attempt(settings: Mapping[str, Any]) -> Optional[Tuple[Workload, Report]]:
        plan = replace(w.plan, **{"recompute_modules": "core_attn", "recompute_num_layers": 0, **settings})
        try:
            check_plan(w.model, plan, w.cluster)
            w2 = replace(w, plan=plan)
            return w2, simulate_workload(w2, cost_for(w2))[0]
        except ConfigError:
            return None

    per_op = w.stack.selective_is_per_op  # torchtitan: per-op SAC, and no block recompute
    steps = recompute_steps(PER_OP_MODES if per_op else MODES, w.model, w.plan, block=not per_op)
    got = first_fitting(steps, attempt)
    return got if got is not None and got[1].fits else None
