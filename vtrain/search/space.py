"""The plan space of a search: which (tp, cp, pp, dp, micro-batch, schedule, recompute, ZeRO stage,
precision, ep, etp, dispatcher, CP communication, block-recompute depth, hybrid-sharding group, FSDP
reshard) to try.

Two views of one space:
- :func:`enumerate_plans` lists every structurally valid plan (the ``grid`` sampler), and
- :func:`vtrain.search.encoding.suggest_plan` draws one plan define-by-run from an Optuna trial.

Both canonicalise plans so that two plans that simulate identically compare equal (see
:func:`canonical`), and both reject a plan with the one-line reason of
:func:`vtrain.config.validate.check_plan`. Pure apart from the trial: no optuna import here.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from vtrain.comm.ep import expert_parallel_degrees
from vtrain.config.validate import check_plan
from vtrain.errors import ConfigError
from vtrain.search.plans import PlanKey, canonical, plan_key
from vtrain.workload.arith import divisors
from vtrain.workload.enums import CpComm, MoeDispatcher, Precision, Recompute, Schedule
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.system import ClusterSpec
from vtrain.workload.tp_split import tp_divides


class Infeasible(Exception):
    """A drawn plan breaks a rule; ``str(err)`` is the one-line reason recorded on the trial."""


@dataclass(frozen=True)
class PlanSpace:
    """The choices per plan field. ``base`` carries the fields a search does not vary."""

    model: ModelSpec
    cluster: ClusterSpec
    base: ParallelPlan
    tp: Tuple[int, ...]
    pp: Tuple[int, ...]
    dp: Tuple[int, ...]  # every candidate, ascending; a plan uses those with tp*cp*pp*dp <= GPUs
    micro_batch_sizes: Tuple[int, ...]
    schedules: Tuple[Schedule, ...]
    virtual_stages: Tuple[int, ...]  # > 1, for the interleaved schedule
    recompute: Tuple[Recompute, ...]
    sequence_parallel: Tuple[bool, ...]
    zero_stages: Tuple[int, ...]  # 0..3; stage >= 1 is Megatron's distributed optimizer (canonical)
    cp: Tuple[int, ...] = (1,)
    precisions: Tuple[Precision, ...] = ()  # empty: the base plan's precision
    ep: Tuple[int, ...] = (1,)  # candidates; a plan's ep must also divide num_experts and dp*cp (check_plan)
    etp: Tuple[int, ...] = (0,)  # 0: the plan's tp (Megatron-Core's default)
    moe_dispatchers: Tuple[MoeDispatcher, ...] = ()  # empty: the base plan's dispatcher
    cp_comms: Tuple[CpComm, ...] = ()  # empty: the base plan's; plans with cp > 1 only
    recompute_num_layers: Tuple[int, ...] = (0,)  # recompute=full only (0: every layer of a chunk)
    fsdp_shard_sizes: Tuple[int, ...] = ()  # ZeRO >= 1 only; empty: the base plan's (0: the whole DP group)
    reshard_after_forward: Tuple[bool, ...] = ()  # ZeRO-3 only; empty: the base plan's
    min_gpus: int = 1
    max_gpus: int = 0  # 0: the cluster's GPUs

    @property
    def distributed_optimizer(self) -> Tuple[bool, ...]:
        """The distributed-optimizer settings the ZeRO stages give (stage >= 1: true)."""
        return tuple(sorted({z >= 1 for z in self.zero_stages}))

    @property
    def precision_choices(self) -> Tuple[Precision, ...]:
        return self.precisions or (self.base.precision,)

    @property
    def dispatcher_choices(self) -> Tuple[MoeDispatcher, ...]:
        return self.moe_dispatchers if self.model.is_moe and self.moe_dispatchers else (self.base.moe_dispatcher,)

    @property
    def cp_comm_choices(self) -> Tuple[CpComm, ...]:
        return self.cp_comms or (self.base.cp_comm,)

    @property
    def shard_size_choices(self) -> Tuple[int, ...]:
        return self.fsdp_shard_sizes or (self.base.fsdp_shard_size,)

    @property
    def reshard_choices(self) -> Tuple[bool, ...]:
        return self.reshard_after_forward or (self.base.reshard_after_forward,)

    def sharding_options(self, dp: int, cp: int) -> Tuple[Tuple[int, int, bool], ...]:
        """(ZeRO stage, fsdp_shard_size, reshard_after_forward) for a (dp, cp): stage 0 at dp*cp=1; a shard
        group (0: the whole DP group) only with a stage >= 1 and dividing dp below it; the reshard choice only
        at stage 3 (where canonical keeps them)."""
        if dp * cp == 1:
            return ((0, 0, True),)
        out = []
        for z in self.zero_stages:
            sizes = tuple(dict.fromkeys(s if s < dp else 0 for s in self.shard_size_choices
                                        if s == 0 or dp % s == 0)) if z >= 1 else (0,)
            for s in sizes:
                for r in self.reshard_choices if z == 3 else (True,):
                    out.append((z, s, r))
        return tuple(dict.fromkeys(out))

    def recompute_options(self) -> Tuple[Tuple[Recompute, int], ...]:
        """(recompute, recompute_num_layers) pairs: a block depth only with full recompute."""
        return tuple((rc, n) for rc in self.recompute
                     for n in (self.recompute_num_layers if rc == Recompute.FULL else (0,)))

    @property
    def ep_choices(self) -> Tuple[int, ...]:
        return self.ep if self.model.is_moe else (1,)

    @property
    def etp_choices(self) -> Tuple[int, ...]:
        return self.etp if self.model.is_moe else (0,)

    @property
    def gpu_limit(self) -> int:
        return min(self.max_gpus, self.cluster.num_gpus) if self.max_gpus else self.cluster.num_gpus

    def gpus_ok(self, gpus: int) -> bool:
        return self.min_gpus <= gpus <= self.gpu_limit

    @property
    def dp_values(self) -> Tuple[int, ...]:
        """The dp values some (tp, cp, pp) of the space can use, ascending."""
        return tuple(d for d in self.dp if any(self.gpus_ok(t * c * p * d) for t in self.tp for c in self.cp
                                               for p in self.pp))

    def dp_choices(self, tp: int, pp: int, cp: int = 1) -> Tuple[int, ...]:
        """dp values whose GPU count tp*cp*pp*dp is allowed for this (tp, cp, pp), largest first (more GPUs
        first)."""
        return tuple(d for d in reversed(self.dp) if self.gpus_ok(tp * cp * pp * d))


def node_aligned_tp(model: ModelSpec, cluster: ClusterSpec, max_tp: int = 0, cross_node: bool = False
                    ) -> Tuple[int, ...]:
    """tp degrees that split the model (:func:`vtrain.workload.tp_split.tp_divides`) and keep a TP group
    inside one node (a divisor of the node size) or span whole nodes (a multiple of it, with ``cross_node``), at
    most ``max_tp``."""
    gpn = cluster.gpus_per_node
    limit = max_tp or (cluster.num_gpus if cross_node else gpn)
    if not cross_node:
        limit = min(limit, gpn)
    # tp=3 or 6 on 8-GPU nodes would put one group on two nodes and stall every step
    return tuple(d for d in divisors(model.num_heads, limit) if tp_divides(model, d) and d <= limit
                 and (gpn % d == 0 if d <= gpn else d % gpn == 0))


def build_space(model: ModelSpec, cluster: ClusterSpec, base: ParallelPlan, *, tp: Optional[Sequence[int]] = None,
                max_tp: int = 0, cross_node_tp: bool = False, pp: Optional[Sequence[int]] = None,
                micro_batch_sizes: Sequence[int] = (1, 2, 4, 8, 16),
                schedules: Sequence[Schedule] = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED),
                virtual_stages: Sequence[int] = (2, 4), recompute: Sequence[Recompute] = tuple(Recompute),
                sequence_parallel: Sequence[bool] = (False, True),
                distributed_optimizer: Sequence[bool] = (False, True), zero_stages: Optional[Sequence[int]] = None,
                cp: Sequence[int] = (1,), precisions: Sequence[Precision] = (), ep: Optional[Sequence[int]] = None,
                etp: Sequence[int] = (0,), moe_dispatchers: Sequence[MoeDispatcher] = (),
                cp_comms: Sequence[CpComm] = (), recompute_num_layers: Sequence[int] = (0,),
                fsdp_shard_sizes: Sequence[int] = (), reshard_after_forward: Sequence[bool] = (),
                gpus: int = 0, min_gpus: int = 1, max_gpus: int = 0) -> PlanSpace:
    """A plan space from plain values (the search's config and the case studies both build theirs here).

    tp: ``tp`` or :func:`node_aligned_tp`; pp: ``pp`` or the divisors of the layers; dp: divisors of the
    global batch (each replica gets whole sequences); GPU count tp*cp*pp*dp exactly ``gpus`` (0: any) or
    within [``min_gpus``, ``max_gpus``] (0: the cluster). ZeRO stages: ``zero_stages``, or (None) stage 0
    and/or 1 from ``distributed_optimizer``. ep (MoE models only; dense: 1): ``ep``, or (None) every degree
    :func:`vtrain.comm.ep.expert_parallel_degrees` admits for some dp*cp of the cluster."""
    n = cluster.num_gpus
    lo, hi = (gpus, gpus) if gpus else (max(1, min_gpus), max_gpus)
    stages = tuple(sorted(set(zero_stages))) if zero_stages is not None else \
        tuple(sorted({1 if d else 0 for d in distributed_optimizer}))
    if ep is None:  # every divisor of the experts that some tp*dp*cp <= the cluster's GPUs admits
        ep = expert_parallel_degrees(model.num_experts, 1, n)
    return PlanSpace(
        model=model, cluster=cluster, base=base,
        tp=tuple(tp) if tp is not None else node_aligned_tp(model, cluster, max_tp, cross_node_tp),
        pp=tuple(pp) if pp is not None else divisors(model.num_layers, n),
        dp=divisors(base.global_batch_size, n),
        micro_batch_sizes=tuple(sorted(set(micro_batch_sizes))), schedules=tuple(schedules),
        virtual_stages=tuple(sorted({v for v in virtual_stages if v > 1})), recompute=tuple(recompute),
        sequence_parallel=tuple(sequence_parallel), zero_stages=stages,
        cp=tuple(sorted(set(cp))), precisions=tuple(dict.fromkeys(precisions)),
        ep=tuple(sorted(set(ep))) if model.is_moe else (1,), etp=tuple(sorted(set(etp))) if model.is_moe else (0,),
        moe_dispatchers=tuple(dict.fromkeys(moe_dispatchers)) if model.is_moe else (),
        cp_comms=tuple(dict.fromkeys(cp_comms)), recompute_num_layers=tuple(sorted(set(recompute_num_layers))),
        fsdp_shard_sizes=tuple(sorted(set(fsdp_shard_sizes))),
        reshard_after_forward=tuple(dict.fromkeys(reshard_after_forward)),
        min_gpus=lo, max_gpus=hi)


def _ints(search: Any, name: str) -> Optional[List[int]]:
    value = search.get(name) if hasattr(search, "get") else getattr(search, name, None)
    return None if value is None else [int(x) for x in value]


def plan_space(model: ModelSpec, cluster: ClusterSpec, base: ParallelPlan, search: Any) -> PlanSpace:
    """The space of the ``search`` config group (see :class:`vtrain.config.schema.SearchConfig`)."""
    get = search.get if hasattr(search, "get") else (lambda k, d=None: getattr(search, k, d))
    try:
        schedules = tuple(Schedule(str(s)) for s in search.schedules)
        recompute = tuple(Recompute(str(r)) for r in search.recompute)
        precisions = tuple(Precision(str(x)) for x in get("precisions") or ())
        dispatchers = tuple(MoeDispatcher(str(x)) for x in get("moe_dispatchers") or ())
        cp_comms = tuple(CpComm(str(x)) for x in get("cp_comms") or ())
    except ValueError as exc:
        raise ConfigError(f"search: {exc}") from None
    return build_space(
        model, cluster, base, max_tp=int(search.max_tp), cross_node_tp=bool(search.allow_cross_node_tp),
        pp=_ints(search, "pp"), micro_batch_sizes=[int(b) for b in search.micro_batch_sizes], schedules=schedules,
        virtual_stages=[int(v) for v in search.virtual_stages], recompute=recompute,
        sequence_parallel=[bool(x) for x in search.sequence_parallel],
        distributed_optimizer=[bool(x) for x in search.distributed_optimizer], zero_stages=_ints(search, "zero_stages"),
        cp=_ints(search, "cp") or [1], precisions=precisions, ep=_ints(search, "ep"), etp=_ints(search, "etp") or [0],
        moe_dispatchers=dispatchers, cp_comms=cp_comms,
        recompute_num_layers=_ints(search, "recompute_num_layers") or [0],
        fsdp_shard_sizes=_ints(search, "fsdp_shard_sizes") or [],
        reshard_after_forward=[bool(x) for x in get("reshard_after_forward") or ()],
        gpus=int(get("gpus", 0)), min_gpus=int(search.min_gpus), max_gpus=int(get("max_gpus", 0)))


# settings a search keeps from the config and applies to the plans they suit (canonical drops them elsewhere)
def check(space: PlanSpace, plan: ParallelPlan) -> Optional[str]:
    """The reason ``plan`` is invalid, or None."""
    if not space.gpus_ok(plan.num_gpus):
        return (f"tp*cp*pp*dp={plan.num_gpus} GPUs is outside the searched {space.min_gpus}..{space.gpu_limit} "
                "(search.gpus / min_gpus / max_gpus)")
    try:
        check_plan(space.model, plan, space.cluster)
    except ConfigError as err:
        return str(err)
    return None


def _schedule_options(space: PlanSpace, pp: int, microbatches: int) -> Iterator[Tuple[Schedule, int]]:
    layers = space.model.num_layers
    for sched in space.schedules:
        if sched != Schedule.INTERLEAVED:
            yield sched, 1
            continue
        if pp == 1 or microbatches % pp:
            continue
        for v in space.virtual_stages:
            if layers >= pp * v:  # uneven splits spread the remainder (vtrain.workload.partition)
                yield sched, v


def pipeline_shape(plan: ParallelPlan) -> Tuple[int, str, int, int]:
    """(pp, schedule, chunks, micro-batches): what the simulator's compiled schedule depends on."""
    return plan.pp, plan.schedule.value, plan.chunks, plan.num_microbatches


def _rest_options(space: PlanSpace, tp: int, cp: int, dp: int) -> List[Tuple[Any, ...]]:
    """((recompute, block depth), sequence_parallel, (zero stage, shard group, reshard), precision, (ep, etp),
    dispatcher, cp_comm) choices for one (tp, cp, dp), without the ones canonical would collapse or check_plan's
    EP rule would reject."""
    m = space.model
    ranks = tp * dp * cp
    eps = [(e, t) for e in space.ep_choices for t in space.etp_choices
           if not m.is_moe or (m.num_experts % e == 0 and ranks % ((t or tp) * e) == 0)]
    return list(itertools.product(
        space.recompute_options(), space.sequence_parallel if tp > 1 else (False,),
        space.sharding_options(dp, cp), space.precision_choices, eps, space.dispatcher_choices,
        space.cp_comm_choices if cp > 1 else (CpComm.P2P,)))


def plan_groups(space: PlanSpace) -> List[ParallelPlan]:
    """One plan per (pp, tp, cp, dp, micro-batch, schedule, virtual stages) of the space, its other searched
    fields the base's, sorted by :func:`pipeline_shape` (stable: ties keep the loop order). Each group's
    plans (:func:`group_plans`) share its pipeline shape, so that the groups in this order, each expanded,
    are every plan sorted by shape; canonical never changes these fields, so a repeated group (a choice
    listed twice) only repeats plans and is left out."""
    groups: Dict[PlanKey, ParallelPlan] = {}
    gbs = space.base.global_batch_size
    for pp, tp, cp in itertools.product(space.pp, space.tp, space.cp):
        for dp in space.dp_choices(tp, pp, cp):
            for mb in space.micro_batch_sizes:
                if gbs % (dp * mb):
                    continue
                for sched, v in _schedule_options(space, pp, gbs // (dp * mb)):
                    key = (pp, tp, cp, dp, mb, sched, v)
                    if key not in groups:
                        groups[key] = dataclasses.replace(space.base, tp=tp, cp=cp, pp=pp, dp=dp, micro_batch_size=mb,
                                                          schedule=sched, virtual_stages=v)
    return sorted(groups.values(), key=pipeline_shape)


def group_size(space: PlanSpace, group: ParallelPlan) -> int:
    """How many plans :func:`group_plans` tries for ``group`` (an upper bound of the valid ones)."""
    return len(_rest_options(space, group.tp, group.cp, group.dp))


def group_plans(space: PlanSpace, group: ParallelPlan) -> List[ParallelPlan]:
    """The valid, canonical plans of one group of :func:`plan_groups`, each once, in loop order."""
    seen = set()
    plans = []
    for (rc, nl), sp, (zs, fs, rf), prec, (ep, etp), disp, cpc in _rest_options(space, group.tp, group.cp, group.dp):
        plan = canonical(dataclasses.replace(
            group, recompute=rc, recompute_num_layers=nl, sequence_parallel=sp, zero_stage=zs,
            distributed_optimizer=zs >= 1, fsdp_shard_size=fs, reshard_after_forward=rf, precision=prec, ep=ep,
            etp=etp, moe_dispatcher=disp, cp_comm=cpc), space.model)
        key = plan_key(plan)
        if key not in seen and check(space, plan) is None:
            seen.add(key)
            plans.append(plan)
    return plans


def enumerate_plans(space: PlanSpace, max_plans: int = 0) -> List[ParallelPlan]:
    """Every valid, canonical plan once, sorted by :func:`pipeline_shape` so that neighbours reuse
    the simulator's compiled-schedule cache (``vtrain.sim.schedule.compile_schedule``). With ``max_plans``
    > 0, more valid plans than that is a :class:`ConfigError` (``search.max_grid_plans``): each new
    choice list multiplies the grid."""
    plans: List[ParallelPlan] = []
    for group in plan_groups(space):
        plans.extend(group_plans(space, group))
        if max_plans and len(plans) > max_plans:
            raise ConfigError(f"search.max_grid_plans={max_plans}: the grid has more valid plans; shorten the "
                              "search.* choice lists (zero_stages, cp, precisions, ep, ...) or raise the cap")
    return plans
