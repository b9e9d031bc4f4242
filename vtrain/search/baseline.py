"""The baseline plan a recommendation is compared with: the plan a framework recipe would run.

One rule (:func:`baseline_plan`), as NVIDIA's published recipes (Megatron-Bridge / NeMo) and the Megatron
paper set their plans (Narayanan et al., SC'21, Sec. 3.3, takeaway #1: "tensor model parallelism should
generally be used up to degree g when using g-GPU servers, and then pipeline model parallelism can be used
to scale up to larger models across servers"):

1. Tensor parallelism inside the NVLink domain, at most :data:`RECIPE_MAX_TP` (8: one HGX node; no recipe of
   Megatron-Bridge's goes beyond; :data:`RECIPE_MAX_TP_MOE` for MoE models), the smallest degree with which
   the model fits without a pipeline; a model that fits at none of them gets the largest, and then
2. pipeline parallelism from memory: the fewest stages (a divisor of the layers, or a power of two with the
   remainder of an uneven split spread from the first stage) with which it fits, the
   interleaved schedule with 2 chunks per stage where the layers and micro-batches allow (recipes set a
   virtual pipeline size whenever pp > 1), 1F1B otherwise;
3. a mixture-of-experts model puts its experts on the largest expert-parallel degree that divides the experts
   and stays inside the NVLink domain (the all-to-all on NVLink), experts unsplit by TP (etp = 1, as every
   MoE recipe of Megatron-Bridge's scripts/performance sets);
4. micro-batch 1, sequence parallelism with TP, the distributed optimizer (ZeRO-1), data parallelism over the
   remaining GPUs (the largest degree that divides the global batch), the base plan's precision; a (tp, pp)
   whose data parallelism uses every GPU is tried before one that leaves GPUs idle (Megatron's world size is
   tp x pp x cp x dp: Llama 3 405B's 126 layers on 1,024 GPUs get PP8 or PP16 uneven, not PP6 on 768);
5. at each (tp, pp) of steps 1-2 in turn, the lightest recompute mode that fits (none, selective, full): the
   first (tp, pp) where one fits is the plan.

"Fits" means the predicted peak is within the memory margin (``cluster.usable_hbm_fraction``,
:mod:`vtrain.sim.memory_margin`). The search compares its best plan with this one (or with the user's
``parallelism`` when given: :mod:`vtrain.search.optimum`); ``task=simulate`` runs it when no plan is given.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Tuple

from vtrain.comm.ep import expert_parallel_degrees
from vtrain.config.validate import check_plan
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.report import Report
from vtrain.search.plans import canonical
from vtrain.search.space import node_aligned_tp
from vtrain.sim.memory_margin import usable_bytes
from vtrain.sim.stage_memory import memory_lower_bound_bytes
from vtrain.workload.arith import divisors
from vtrain.workload.enums import Recompute, Schedule
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.workload import Workload

# Megatron-Bridge / NeMo recipes keep TP within one 8-GPU NVLink node (Llama 3 405B and GPT-3 175B: TP8)
RECIPE_MAX_TP = 8
# MoE recipes split attention by TP 1-4 and the experts by EP: the Megatron-MoE-ModelZoo plans shipped
# (vtrain/data/modern_gpus/megatron_moe_qwen3_*.csv, 16 rows) run TP1 (3), TP2 (4) or TP4 (9), never more
RECIPE_MAX_TP_MOE = 4
RECOMPUTE_ORDER = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)  # lightest first
RECIPE_VP = 2  # chunks per stage tried first when pp > 1 (the smallest virtual pipeline size)


@dataclass(frozen=True)
class Baseline:
    """The recipe plan, its simulated report, and the rule's choices in words."""

    plan: ParallelPlan
    report: Report
    rule: str


def _tp_pp_order(w: Workload) -> List[Tuple[int, int]]:
    """(tp, pp) in the rule's order: each TP degree without a pipeline, then the largest TP with more stages."""
    c, m = w.cluster, w.model
    limit = min(RECIPE_MAX_TP_MOE if m.is_moe else RECIPE_MAX_TP, c.domain_size)
    tps = node_aligned_tp(m, c, max_tp=limit, cross_node=c.domain_size > c.gpus_per_node) or (1,)
    most = min(m.num_layers, max(1, c.num_gpus // tps[-1]))
    # the divisors of the layers, and the powers of two recipes run with an uneven split (DeepSeek-V3's 61 on 16)
    pps = sorted({p for p in divisors(m.num_layers, most) if p > 1} | {2**k for k in range(1, most.bit_length())})
    return [(t, 1) for t in tps] + [(tps[-1], p) for p in pps]


def _expert_degree(w: Workload, tp: int, dp: int) -> int:
    """The largest ep within the NVLink domain that the experts and the tp*dp ranks admit (1: dense)."""
    if not w.model.is_moe:
        return 1
    fit = [e for e in expert_parallel_degrees(w.model.num_experts, tp, dp, 1, 1) if e <= w.cluster.domain_size]
    return max(fit, default=1)


def _tp_pp_dp(w: Workload, gpus: int) -> List[Tuple[int, int, int]]:
    """(tp, pp, dp) in the rule's order, the ones that use every GPU (tp x pp x dp = ``gpus``, as Megatron's world
    size is the product of the degrees) before the ones that leave GPUs idle (a batch no divisor of which fits)."""
    found = []
    for tp, pp in _tp_pp_order(w):
        dps = divisors(w.plan.global_batch_size, gpus // (tp * pp))
        if dps:
            found.append((tp, pp, dps[-1]))
    return sorted(found, key=lambda t: t[0] * t[1] * t[2] != gpus)  # stable: the rule's order within each


def _candidates(w: Workload, gpus: int) -> Iterator[ParallelPlan]:
    """The rule's plans on at most ``gpus`` GPUs, in order: (tp, pp, dp) as :func:`_tp_pp_dp`, then the recompute
    modes lightest first, then interleaved before 1F1B (pp > 1)."""
    base = w.plan
    moe = w.model.is_moe
    for tp, pp, dp in _tp_pp_dp(w, gpus):
        schedules = [(Schedule.INTERLEAVED, RECIPE_VP), (Schedule.ONE_F_ONE_B, 1)] if pp > 1 else \
            [(Schedule.ONE_F_ONE_B, 1)]
        for recompute in RECOMPUTE_ORDER:
            for schedule, vp in schedules:
                plan = dataclasses.replace(
                    base, tp=tp, pp=pp, dp=dp, cp=1, micro_batch_size=1, recompute=recompute, recompute_num_layers=0,
                    sequence_parallel=tp > 1, distributed_optimizer=dp > 1, zero_stage=1 if dp > 1 else 0,
                    ep=_expert_degree(w, tp, dp), etp=1 if moe else 0, schedule=schedule, virtual_stages=vp)
                yield canonical(plan, w.model)


def _valid(w: Workload, plan: ParallelPlan) -> bool:
    try:
        check_plan(w.model, plan, w.cluster)
    except ConfigError:
        return False
    return True


def _describe(w: Workload, plan: ParallelPlan) -> str:
    """The rule's choices for this plan, in words."""
    parts = [f"TP{plan.tp} within the {w.cluster.domain_size}-GPU NVLink domain",
             f"PP{plan.pp} from memory" + (f" (VP{plan.virtual_stages})" if plan.virtual_stages > 1 else ""),
             f"DP{plan.dp}", f"recompute {plan.recompute.value}", "micro-batch 1, ZeRO-1"]
    if w.model.is_moe:
        parts.insert(2, f"EP{plan.ep} inside the NVLink domain")
    return "recipe rule: " + ", ".join(parts)


def baseline_plan(w: Workload, cost: Optional[CostModel] = None,
                  fits: Optional[Callable[[ParallelPlan, Report], bool]] = None,
                  gpus: int = 0) -> Optional[Baseline]:
    """The recipe rule's plan for ``w``'s model, cluster and batch (the module's rules 1-5) on at most ``gpus``
    GPUs (0: the cluster's), simulated with ``cost`` (None: the analytical model); ``fits`` (default: the peak
    is within the memory margin) judges a simulated candidate. None when no candidate fits."""
    from vtrain.cost.analytical import AnalyticalCostModel
    from vtrain.sim.simulator import simulate_workload

    model = cost or AnalyticalCostModel(w)
    usable = usable_bytes(w.cluster)
    judge = fits or (lambda _plan, report: report.peak_memory_bytes <= usable)
    for plan in _candidates(w, min(gpus or w.cluster.num_gpus, w.cluster.num_gpus)):
        if not _valid(w, plan) or memory_lower_bound_bytes(w, plan) > usable:
            continue
        try:
            report, _ = simulate_workload(dataclasses.replace(w, plan=plan), model)
        except ConfigError:
            continue
        if judge(plan, report):
            return Baseline(plan, report, _describe(w, plan))
    return None
