"""Evaluate one plan: validity, memory, simulation, objectives. Memoised by plan.

Shared by the Optuna objective (:mod:`vtrain.search.study`) and the exhaustive grid
(:mod:`vtrain.search.grid`). One Workload and one cost model are built once per search; a trial only
swaps the plan (``dataclasses.replace``). No optuna import here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.report import Report
from vtrain.search.plans import PlanKey, plan_key
from vtrain.search.space import PlanSpace, check
from vtrain.sim.memory_margin import exceeds_margin, margin_reason
from vtrain.sim.simulator import simulate_workload
from vtrain.sim.stage_memory import memory_lower_bound_bytes
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.workload import Workload

GIB = 2**30
MAXIMIZED = frozenset({"mfu", "hfu", "tokens_per_s"})  # every other objective is minimised
NUMERIC_REPORT_FIELDS = frozenset({
    "iteration_time_s", "peak_memory_bytes", "mfu", "hfu", "tokens_per_s", "time_to_train_s",
    "gpu_hours", "cost_usd", "gpus_used", "energy_kwh", "co2_kg", "iteration_time_hi_s", "time_to_train_hi_s",
    "cost_hi_usd"})
QUANTILES = ("mid", "hi")  # search.objective_quantile: the prediction, or the pessimistic end of its 80% interval
# objectives that grow with the iteration time (the others but memory and GPU count shrink with it)
# (energy too: average power x time)
SCALES_WITH_TIME = frozenset({"iteration_time_s", "time_to_train_s", "gpu_hours", "cost_usd", "energy_kwh", "co2_kg"})
METRICS = ("iteration_time_s", "time_to_train_s", "cost_usd", "mfu", "peak_memory_gib", "fits", "gpus_used",
           "energy_kwh", "co2_kg")


def directions(objectives: Sequence[str]) -> List[str]:
    """Optuna study directions; each objective must be a numeric :class:`vtrain.report.Report` field."""
    if not objectives:
        raise ConfigError("search.objectives is empty; e.g. [time_to_train_s, cost_usd]")
    twice = sorted({o for o in objectives if list(objectives).count(o) > 1})
    if twice:
        raise ConfigError(f"search.objectives lists {', '.join(twice)} more than once: each objective once")
    for name in objectives:
        if name not in NUMERIC_REPORT_FIELDS:
            raise ConfigError(f"search.objectives: {name} is not one of {', '.join(sorted(NUMERIC_REPORT_FIELDS))}")
    return ["maximize" if o in MAXIMIZED else "minimize" for o in objectives]


@dataclass(frozen=True)
class Outcome:
    """What one plan gave. ``values`` is None when the plan is infeasible (then ``reason`` is set)."""

    plan: ParallelPlan
    values: Optional[Tuple[float, ...]]
    reason: Optional[str]
    metrics: Dict[str, float] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return self.values is not None


# the search ranks runs by their expected wall time and cost, failures, restarts and checkpoints included
# (Report.goodput, vtrain/sim/goodput.py); zero failure rates (cluster.gpu_failures_per_h=0
# cluster.node_failures_per_h=0) give the failure-free figures
EXPECTED = {"time_to_train_s": "expected_time_to_train_s", "cost_usd": "expected_cost_usd"}


def expected_value(r: Report, name: str) -> float:
    """``name`` of a report, its expected figure (with goodput) for time to train and cost."""
    expected = EXPECTED.get(name)
    value = float(getattr(r, expected)) if expected else 0.0
    return value if value > 0 else float(getattr(r, name))  # a report built without goodput: the plain figure


def objective_value(r: Report, name: str, quantile: str = "mid") -> float:
    """An objective of a report; with ``quantile="hi"`` the pessimistic end of its 80% interval: the
    interval's slow end for times and costs (``time_to_train_hi_s``, ``cost_hi_usd``, ...), and the rates
    (tokens/s, MFU, HFU) that slow end implies. Memory and GPU count have no interval."""
    value = expected_value(r, name)
    if quantile != "hi" or r.iteration_time_s <= 0 or r.iteration_time_hi_s <= 0:
        return value
    slow = r.iteration_time_hi_s / r.iteration_time_s
    if name in SCALES_WITH_TIME:
        return value * slow
    if name in MAXIMIZED:
        return value / slow
    return value


def report_metrics(r: Report, quantile: str = "mid") -> Dict[str, float]:
    """A trial's metrics, at the quantile the search ranks on: with ``hi`` the times, costs, energy and MFU
    are the slow end of the interval (:func:`objective_value`), so that the fastest and cheapest plans, the
    constraints and the tables use the numbers the front was built on; the point predictions follow as
    ``predicted_<name>``."""
    m = {"iteration_time_s": r.iteration_time_s, "time_to_train_s": expected_value(r, "time_to_train_s"),
         "cost_usd": expected_value(r, "cost_usd"), "mfu": r.mfu, "peak_memory_gib": r.peak_memory_bytes / GIB,
         "fits": float(r.fits), "gpus_used": float(r.gpus_used), "energy_kwh": r.energy_kwh, "co2_kg": r.co2_kg,
         # the 80% interval of the point prediction (vtrain.search.optimum: near-optimal set, gain over a baseline)
         "iteration_time_lo_s": r.iteration_time_lo_s, "iteration_time_hi_s": r.iteration_time_hi_s}
    if quantile != "hi":
        return m
    ranked = [k for k in m if k in SCALES_WITH_TIME or k in MAXIMIZED]
    return {**{k: objective_value(r, k, quantile) if k in ranked else v for k, v in m.items()},
            **{f"predicted_{k}": m[k] for k in ranked}}


class Evaluator:
    """``evaluate(plan) -> Outcome``, memoised by :func:`plan_key`; counts simulations and hits."""

    def __init__(self, workload: Workload, cost: CostModel, space: PlanSpace, objectives: Sequence[str],
                 quantile: str = "mid") -> None:
        if quantile not in QUANTILES:
            raise ConfigError(f"search.objective_quantile={quantile}: must be one of {', '.join(QUANTILES)}")
        self.quantile = quantile
        self.workload = workload
        self.cost = cost
        self.space = space
        self.objectives = tuple(objectives)
        directions(self.objectives)
        self.cache: Dict[PlanKey, Outcome] = {}
        self.simulations = 0
        self.hits = 0

    def simulate(self, plan: ParallelPlan, keep_trace: bool = False) -> Tuple[Report, Any]:
        return simulate_workload(dataclasses.replace(self.workload, plan=plan), self.cost, keep_trace=keep_trace)

    def evaluate(self, plan: ParallelPlan) -> Outcome:
        key = plan_key(plan)
        hit = self.cache.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        out = self._evaluate(plan)
        self.cache[key] = out
        return out

    def _evaluate(self, plan: ParallelPlan) -> Outcome:
        reason = check(self.space, plan)
        if reason is not None:
            return Outcome(plan, None, reason)
        return self.evaluate_valid(plan)

    def evaluate_valid(self, plan: ParallelPlan) -> Outcome:
        """The outcome of a plan that passed :func:`vtrain.search.space.check`: memory bound, then simulation
        (not memoised: the grid's plans are distinct)."""
        cluster = self.workload.cluster
        bound = memory_lower_bound_bytes(self.workload, plan)
        if exceeds_margin(bound, cluster):  # the usable share of HBM (cluster.usable_hbm_fraction)
            return Outcome(plan, None, margin_reason(bound, cluster, bound=True),
                           {"peak_memory_gib": bound / GIB, "fits": 0.0, "gpus_used": float(plan.num_gpus)})
        self.simulations += 1
        try:
            report, _ = self.simulate(plan)
        except ConfigError as err:  # a plan the simulator refuses (e.g. above its pipeline-task limit)
            return Outcome(plan, None, str(err), {"gpus_used": float(plan.num_gpus)})
        metrics = report_metrics(report, self.quantile)
        if not report.fits or exceeds_margin(report.peak_memory_bytes, cluster):
            return Outcome(plan, None, margin_reason(report.peak_memory_bytes, cluster), metrics)
        return Outcome(plan, tuple(objective_value(report, o, self.quantile) for o in self.objectives), None, metrics)
