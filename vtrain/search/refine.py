"""Local refinement of a multi-objective search: evaluate the one-step neighbours of the current
Pareto front (a memetic step after the evolutionary one; Ishibuchi & Murata 1998, "A multi-objective
genetic local search algorithm").

NSGA-II finds the right region of the plan space quickly but, in a discrete space with a few hundred
trials, often stops a few moves short of the best plan (one more data-parallel replica, another
pipeline depth). A neighbour differs from a front plan in one field — any other tp or pp (nearest
first, dp re-balanced to keep the GPU count), the next dp, micro-batch or virtual-stage value,
another schedule, recompute mode, sequence-parallel setting, the next ZeRO stage, cp (dp re-balanced),
precision, ep, etp or dispatcher — or in tp and pp together (trading one for the other). A neighbour that
overflows memory is repaired (a higher ZeRO stage, smaller micro-batch, then stronger recompute). Only
cheap checks run here (validity, memory lower bound, already evaluated); the neighbours are then
enqueued as ordinary trials of the same study.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, List, Sequence

from vtrain.search.objective import Evaluator
from vtrain.search.pareto import pareto_front, to_minimise
from vtrain.search.plans import canonical, plan_key
from vtrain.search.space import PlanSpace, check
from vtrain.sim.memory_margin import usable_bytes
from vtrain.sim.stage_memory import memory_lower_bound_bytes
from vtrain.workload.enums import Recompute, Schedule
from vtrain.workload.plan import ParallelPlan


def _adjacent(choices: Sequence, value) -> List:
    if value not in choices:
        return []
    i = list(choices).index(value)
    return [choices[j] for j in (i - 1, i + 1) if 0 <= j < len(choices)]


def _by_distance(choices: Sequence, value) -> List:
    """Every other choice, nearest first (a coordinate line search, not only the next step)."""
    if value not in choices:
        return list(choices)
    i = list(choices).index(value)
    return [c for _, c in sorted((abs(j - i), c) for j, c in enumerate(choices) if j != i)]


def _closest_dp(space: PlanSpace, tp: int, pp: int, gpus: int, cp: int = 1) -> Iterator[int]:
    dps = space.dp_choices(tp, pp, cp)
    if dps:
        yield min(dps, key=lambda d: (abs(tp * cp * pp * d - gpus), -d))


def neighbours(space: PlanSpace, plan: ParallelPlan) -> Iterator[ParallelPlan]:
    """Plans one move away from ``plan`` (not yet checked)."""
    r = dataclasses.replace
    gpus, cp = plan.num_gpus, plan.cp
    for dp in _adjacent(space.dp_choices(plan.tp, plan.pp, cp)[::-1], plan.dp):
        yield r(plan, dp=dp)
    for tp in _by_distance(space.tp, plan.tp):
        for dp in _closest_dp(space, tp, plan.pp, gpus, cp):
            yield r(plan, tp=tp, dp=dp, sequence_parallel=plan.sequence_parallel and tp > 1)
    for pp in _by_distance(space.pp, plan.pp):
        for dp in _closest_dp(space, plan.tp, pp, gpus, cp):
            yield r(plan, pp=pp, dp=dp)
    for tp in _adjacent(space.tp, plan.tp):  # trade tensor for pipeline parallelism (both move)
        for pp in _by_distance(space.pp, plan.pp)[:4]:
            for dp in _closest_dp(space, tp, pp, gpus, cp):
                yield r(plan, tp=tp, pp=pp, dp=dp, sequence_parallel=plan.sequence_parallel and tp > 1)
    for c in _adjacent(space.cp, cp):  # trade context for data parallelism
        for dp in _closest_dp(space, plan.tp, plan.pp, gpus, c):
            yield r(plan, cp=c, dp=dp)
    for ep in _adjacent(space.ep_choices, plan.ep):
        yield r(plan, ep=ep)
    for etp in space.etp_choices:
        if etp != plan.etp:
            yield r(plan, etp=etp)
    for name, options in (("precision", space.precision_choices), ("moe_dispatcher", space.dispatcher_choices)):
        for value in options:
            if value != getattr(plan, name):
                yield r(plan, **{name: value})
    for mb in _adjacent(space.micro_batch_sizes, plan.micro_batch_size):
        yield r(plan, micro_batch_size=mb)
    for sched in space.schedules:
        if sched != plan.schedule:
            v = space.virtual_stages[0] if sched == Schedule.INTERLEAVED and space.virtual_stages else 1
            yield r(plan, schedule=sched, virtual_stages=v)
    if plan.schedule == Schedule.INTERLEAVED:
        for v in _adjacent(space.virtual_stages, plan.virtual_stages):
            yield r(plan, virtual_stages=v)
    for rc in space.recompute:
        if rc != plan.recompute:
            yield r(plan, recompute=rc)
    if plan.recompute == Recompute.FULL:
        for nl in _adjacent(space.recompute_num_layers, plan.recompute_num_layers):
            yield r(plan, recompute_num_layers=nl)
    if plan.cp > 1:
        for cpc in space.cp_comm_choices:
            if cpc != plan.cp_comm:
                yield r(plan, cp_comm=cpc)
    if plan.tp > 1 and len(space.sequence_parallel) > 1:
        yield r(plan, sequence_parallel=not plan.sequence_parallel)
    if plan.dp * plan.cp > 1:
        for z in _adjacent(space.zero_stages, plan.sharding_stage):
            yield r(plan, zero_stage=z, distributed_optimizer=z >= 1)
        if plan.sharding_stage >= 1:
            for fs in _adjacent(space.shard_size_choices, plan.fsdp_shard_size):
                yield r(plan, fsdp_shard_size=fs)
        if plan.sharding_stage == 3 and len(space.reshard_choices) > 1:
            yield r(plan, reshard_after_forward=not plan.reshard_after_forward)


def front_plans(ev: Evaluator, directions: Sequence[str], constraints: Any = None) -> List[ParallelPlan]:
    """The evaluated plans on the current Pareto front, extremes first (fastest, cheapest, rest); with
    ``constraints``, the front of the plans that satisfy them (all plans while none does)."""
    done = [o for o in ev.cache.values() if o.feasible]
    if constraints is not None and constraints.active:
        done = [o for o in done if constraints.satisfied(o.metrics)] or done
    if not done:
        return []
    front = pareto_front(done, [to_minimise(o.values, directions) for o in done],  # type: ignore[arg-type]
                         [plan_key(o.plan) for o in done])
    ordered = [front[0], front[-1], *front[1:-1]] if len(front) > 1 else front
    return [o.plan for o in ordered]


def repairs(space: PlanSpace, plan: ParallelPlan) -> Iterator[ParallelPlan]:
    """The plan, then versions that need less memory, each step kept: the next ZeRO stage (the distributed
    optimizer first), sequence parallelism, smaller micro-batches, then stronger recompute (a repair
    operator: a move that overflows memory is kept and made to fit, not dropped)."""
    yield plan
    higher = [z for z in space.zero_stages if z > plan.sharding_stage]
    if plan.dp * plan.cp > 1 and higher:
        plan = dataclasses.replace(plan, zero_stage=higher[0], distributed_optimizer=True)
        yield plan
    if plan.tp > 1 and not plan.sequence_parallel and True in space.sequence_parallel:
        plan = dataclasses.replace(plan, sequence_parallel=True)
        yield plan
    for mb in sorted((m for m in space.micro_batch_sizes if m < plan.micro_batch_size), reverse=True):
        plan = dataclasses.replace(plan, micro_batch_size=mb)
        yield plan
    for name in ("selective", "full"):
        rc = next((r for r in space.recompute if r.value == name), None)
        if rc is not None and rc != plan.recompute:
            yield dataclasses.replace(plan, recompute=rc)


def _round_robin(streams: List[Iterator[ParallelPlan]]) -> Iterator[ParallelPlan]:
    while streams:
        alive = []
        for it in streams:
            nxt = next(it, None)
            if nxt is not None:
                alive.append(it)
                yield nxt
        streams = alive


def candidates(ev: Evaluator, plans: Iterable[ParallelPlan], limit: int) -> List[ParallelPlan]:
    """Up to ``limit`` new, valid neighbours of ``plans`` whose memory lower bound fits (repaired if
    needed)."""
    w = ev.workload
    cap = usable_bytes(w.cluster)  # the memory margin (cluster.usable_hbm_fraction)
    seen = set(ev.cache)
    out: List[ParallelPlan] = []
    streams = [neighbours(ev.space, plan) for plan in plans]
    for nb in _round_robin(streams):  # every front plan gets its nearest moves first
        for fixed in repairs(ev.space, canonical(nb, ev.space.model)):
            fixed = canonical(fixed, ev.space.model)
            key = plan_key(fixed)
            if key in seen or check(ev.space, fixed) is not None:
                continue
            seen.add(key)
            if memory_lower_bound_bytes(w, fixed) <= cap:
                out.append(fixed)
                break
        if len(out) >= limit:
            break
    return out
