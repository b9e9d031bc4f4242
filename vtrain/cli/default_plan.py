"""task=simulate without a plan: the recipe rule's plan (:func:`vtrain.search.baseline.baseline_plan`: EP for MoE,
TP inside the NVLink domain, PP from memory), said so; and for a plan predicted below ~10% MFU or not fitting, a
one-line hint naming its largest loss and the recipe plan, when that does better."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from omegaconf import DictConfig, open_dict

from vtrain.workload.plan import PAR, ParallelPlan

LOW_MFU = 0.10  # the threshold: a plan this far below the ~35-45% MFU recipes publish is a plan problem


def plan_given(cfg: Any) -> bool:
    """Whether the command line (or an experiment) names a plan: any ``parallelism`` override. Outside a Hydra run
    (the Python API) the config's plan is always taken as given."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
    except Exception:
        return True
    if hc.runtime.choices.get("experiment"):
        return True
    return any(o.lstrip("+~").startswith("parallelism") for o in hc.overrides.task)


def _par_fields(plan: ParallelPlan) -> List[Tuple[str, Any]]:
    out = []
    for name, f in ParallelPlan.__dataclass_fields__.items():
        if f.metadata.get("group") == PAR:
            value = getattr(plan, name)
            out.append((name, getattr(value, "value", value)))
    return out


def _workload_of_any_plan(cfg: DictConfig) -> Any:
    """The config's workload with a plan that is valid for any model and cluster (one GPU): what the recipe rule
    replaces, keeping the batch, precision and stack."""
    from vtrain.config.build import build_workload

    probe = cfg.copy()
    with open_dict(probe):
        for key, value in (("tp", 1), ("pp", 1), ("dp", 1), ("cp", 1), ("ep", 1), ("virtual_stages", 1),
                           ("schedule", "1f1b"), ("micro_batch_size", 1)):
            if key in probe.parallelism:
                probe.parallelism[key] = value
    return build_workload(probe)


def recipe(cfg: DictConfig, profile: Any) -> Any:
    """The recipe rule's plan for the config's model, cluster and batch (a vtrain.search.baseline.Baseline), or
    None when none fits."""
    from vtrain.api import cost_model_for
    from vtrain.search.baseline import baseline_plan

    w = _workload_of_any_plan(cfg)
    return baseline_plan(w, cost_model_for(w, profile))


def overrides_of(plan: ParallelPlan, current: Optional[ParallelPlan] = None) -> str:
    """The overrides that set ``plan``: those that differ from ``current`` when given."""
    from vtrain.search.outputs import plan_overrides
    from vtrain.search.plans import plan_fields

    now = plan_fields(current) if current is not None else {}
    return " ".join(plan_overrides({k: v for k, v in plan_fields(plan).items() if now.get(k, not v) != v}))


def use_recipe_plan(cfg: DictConfig, profile: Any) -> Tuple[Optional[str], Any]:
    """With no plan given, set ``cfg.parallelism`` to the recipe rule's plan; the line that says so (None when a plan
    was given) and the recipe's Baseline (None when none fits: the config's own plan runs)."""
    if plan_given(cfg):
        return None, None
    found = recipe(cfg, profile)
    if found is None:
        return "plan: none given and no recipe plan fits; simulating parallelism/default.yaml (task=search)", None
    with open_dict(cfg):
        for name, value in _par_fields(found.plan):
            cfg.parallelism[name] = value
    return (f"plan: none given, so the {found.rule} (vtrain/search/baseline.py); give parallelism.* to simulate "
            "your own, or task=search to search"), found


def _largest_loss(report: Any) -> str:
    """The critical stage's largest loss besides compute, in words."""
    st = report.breakdown
    losses = {f"exposed {g.upper() if len(g) <= 3 else g} communication": s
              for g, s in st.exposed_comm_by_group.items()}
    losses.update({"pipeline bubble": st.bubble_s, "host overhead (kernel launches)": st.host_overhead_s})
    name, seconds = max(losses.items(), key=lambda kv: kv[1])
    return f"{name}, {seconds / report.iteration_time_s:.0%} of the iteration"


def plan_hint(cfg: DictConfig, report: Any, profile: Any, found: Any = None) -> Optional[str]:
    """For a plan below :data:`LOW_MFU` or not fitting: its likely cause, and the recipe plan when it fits and runs
    faster (its MFU and overrides); ``found``: the recipe's Baseline when already known (the plan is the recipe's)."""
    if report.fits and report.mfu >= LOW_MFU:
        return None
    cause = "does not fit memory" if not report.fits else f"MFU {report.mfu:.1%}: largest loss {_largest_loss(report)}"
    experts = int(cfg.model.get("num_experts") or 0)
    if experts > 1 and report.plan.ep == 1:  # the likeliest cause of both on a mixture of experts
        cause += f" (parallelism.ep=1: every GPU holds all {experts} experts of each layer)"
    found = found if found is not None else recipe(cfg, profile)
    if found is None or (report.fits and found.report.iteration_time_s >= report.iteration_time_s * 0.999):
        return f"hint: {cause}; task=search finds better plans"
    better = found.report
    return (f"hint: {cause}; the recipe plan ({found.rule}) fits at MFU {better.mfu:.1%}, "
            f"{better.iteration_time_s:.2f} s per iteration: {overrides_of(found.plan, report.plan)}")
