"""The plans the case studies try, on the core's types: a Workload with another plan, the core's rule
check and simulator, a small enumeration of plans on exactly N GPUs, and the time-cost Pareto front
(the search package's routine)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Sequence, Set, Tuple

from vtrain.config.build import model_spec
from vtrain.config.compose import load_group_config
from vtrain.config.validate import check_plan
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.report import Report
from vtrain.search.pareto import pareto_front
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.arith import divisors
from vtrain.workload.enums import Recompute
from vtrain.workload.model import ModelSpec
from vtrain.workload.workload import Workload

__all__ = ["GpuCountSpace", "best_plan", "divisors", "load_model", "pareto", "simulate", "valid_plan", "with_plan"]


def load_model(name: str) -> ModelSpec:
    """A ``model/<name>.yaml`` config as a checked ModelSpec (unknown name: one-line ConfigError)."""
    from vtrain.config.schema import ModelConfig

    return model_spec(load_group_config("model", name, ModelConfig))


def with_plan(w: Workload, **changes: Any) -> Workload:
    return dataclasses.replace(w, plan=dataclasses.replace(w.plan, **changes))


def valid_plan(w: Workload) -> bool:
    try:
        check_plan(w.model, w.plan, w.cluster)
    except ConfigError:
        return False
    return True


def simulate(w: Workload, cost: CostModel) -> Optional[Report]:
    """The Report of a valid plan, None for a plan that breaks a divisibility/size rule."""
    if not valid_plan(w):
        return None
    report, _ = simulate_workload(w, cost)
    return report


def pareto(reports: Sequence[Report]) -> List[Report]:
    """The plans no other plan beats on both time to train and cost (ties once), fastest first."""
    return pareto_front(list(reports), [(r.time_to_train_s, r.cost_usd) for r in reports],
                        [(r.plan.tp, r.plan.pp, r.plan.dp) for r in reports])


@dataclass(frozen=True)
class GpuCountSpace:
    """Plans on exactly ``gpus`` GPUs: tp (within a node), pp dividing the layers (at most ``max_pp``),
    dp = gpus / (tp·pp) dividing the batch, micro-batch sizes, recompute modes; the rest of the plan
    (schedule, sequence parallelism, distributed optimizer) as in the workload. (A search's space
    bounds tp·pp·dp by the cluster instead; the studies compare allocations of a given size.)"""

    tp: Sequence[int] = (1, 2, 4, 8)
    max_pp: int = 16
    micro_batch_sizes: Sequence[int] = (1, 2)
    recompute: Sequence[str] = ("selective", "full")

    @classmethod
    def of(cls, params: Any) -> "GpuCountSpace":
        """From a study's ``plan_tp``, ``plan_max_pp``, ``plan_micro_batch_sizes``, ``plan_recompute``; each
        a non-empty list of positive integers (the recompute modes: names of Recompute), else a one-line
        error naming the key."""
        lists = {"plan_tp": params.plan_tp, "plan_micro_batch_sizes": params.plan_micro_batch_sizes}
        for key, values in lists.items():
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise ConfigError(f"case_study.params.{key}={list(values)} must be a non-empty list of integers >= 1")
        max_pp = params.plan_max_pp
        if isinstance(max_pp, bool) or not isinstance(max_pp, int) or max_pp < 1:
            raise ConfigError(f"case_study.params.plan_max_pp={max_pp} must be an integer >= 1")
        modes = [str(m) for m in params.plan_recompute]
        known = [r.value for r in Recompute]
        if not modes or any(m not in known for m in modes):
            raise ConfigError(f"case_study.params.plan_recompute={modes} must be a non-empty list of "
                              f"{', '.join(known)}")
        return cls(tuple(lists["plan_tp"]), max_pp, tuple(lists["plan_micro_batch_sizes"]), tuple(modes))

    def plans(self, w: Workload, gpus: int) -> Iterator[Workload]:
        gbs = w.plan.global_batch_size
        for tp in self.tp:
            if tp > w.cluster.gpus_per_node or gpus % tp:
                continue
            for pp in divisors(w.model.num_layers, gpus):
                if pp > self.max_pp or gpus % (tp * pp):
                    continue
                dp = gpus // (tp * pp)
                for mbs in self.micro_batch_sizes:
                    if gbs % (dp * mbs):
                        continue
                    for rc in self.recompute:
                        cand = with_plan(w, tp=tp, pp=pp, dp=dp, micro_batch_size=mbs, recompute=Recompute(rc),
                                         sequence_parallel=w.plan.sequence_parallel and tp > 1)
                        if valid_plan(cand):
                            yield cand


def best_plan(w: Workload, cost: CostModel, gpus: int, space: GpuCountSpace,
              key: Callable[[Report], float] = lambda r: r.iteration_time_s) -> Optional[Report]:
    """The fitting plan of ``space`` on exactly ``gpus`` GPUs with the smallest ``key``; None if none fits.
    Recompute modes are tried cheapest first and a costlier one is skipped once a cheaper one fits."""
    best: Optional[Report] = None
    fitted: Set[Tuple[int, int, int, int]] = set()
    for cand in space.plans(w, gpus):
        p = cand.plan
        shape = (p.tp, p.pp, p.dp, p.micro_batch_size)
        if shape in fitted:
            continue  # a cheaper recompute mode of this shape already fits: more recompute only costs time
        report, _ = simulate_workload(cand, cost)
        if not report.fits:
            continue
        fitted.add(shape)
        if best is None or key(report) < key(best):
            best = report
    return best
