"""The plan space of a search: which (tp, pp, dp, micro-batch, schedule, recompute, ...) to try.

Two views of one space:
- :func:`enumerate_plans` lists every structurally valid plan (the ``grid`` sampler), and
- :func:`vtrain.search.encoding.suggest_plan` draws one plan define-by-run from an Optuna trial.

Both canonicalise plans so that two plans that simulate identically compare equal (see
:func:`canonical`), and both reject a plan with the one-line reason of
:func:`vtrain.config.validate.check_plan`. Pure apart from the trial: no optuna import here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from vtrain.config.validate import check_plan
from vtrain.errors import ConfigError
from vtrain.workload.enums import Recompute, Schedule
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.system import ClusterSpec

PlanKey = Tuple[Any, ...]
# the plan fields a search varies (everything else comes from the composed config)
SEARCHED_FIELDS = ("tp", "pp", "dp", "micro_batch_size", "schedule", "virtual_stages", "recompute",
                   "sequence_parallel", "distributed_optimizer")


class Infeasible(Exception):
    """A drawn plan breaks a rule; ``str(err)`` is the one-line reason recorded on the trial."""


def divisors(n: int) -> Tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


@dataclass(frozen=True)
class PlanSpace:
    """The choices per plan field. ``base`` carries the fields a search does not vary."""

    model: ModelSpec
    cluster: ClusterSpec
    base: ParallelPlan
    tp: Tuple[int, ...]
    pp: Tuple[int, ...]
    dp: Tuple[int, ...]  # every candidate, ascending; a plan uses those with tp*pp*dp <= GPUs
    micro_batch_sizes: Tuple[int, ...]
    schedules: Tuple[Schedule, ...]
    virtual_stages: Tuple[int, ...]  # > 1, for the interleaved schedule
    recompute: Tuple[Recompute, ...]
    sequence_parallel: Tuple[bool, ...]
    distributed_optimizer: Tuple[bool, ...]
    min_gpus: int = 1
    max_gpus: int = 0  # 0: the cluster's GPUs

    @property
    def gpu_limit(self) -> int:
        return min(self.max_gpus, self.cluster.num_gpus) if self.max_gpus else self.cluster.num_gpus

    def gpus_ok(self, gpus: int) -> bool:
        return self.min_gpus <= gpus <= self.gpu_limit

    @property
    def dp_values(self) -> Tuple[int, ...]:
        """The dp values some (tp, pp) of the space can use, ascending."""
        return tuple(d for d in self.dp if any(self.gpus_ok(t * p * d) for t in self.tp for p in self.pp))

    def dp_choices(self, tp: int, pp: int) -> Tuple[int, ...]:
        """dp values whose GPU count tp*pp*dp is allowed for this (tp, pp), largest first (more GPUs first)."""
        return tuple(d for d in reversed(self.dp) if self.gpus_ok(tp * pp * d))


def node_aligned_tp(model: ModelSpec, cluster: ClusterSpec, max_tp: int = 0, cross_node: bool = False
                    ) -> Tuple[int, ...]:
    """tp degrees dividing the attention and kv heads that keep a TP group inside one node (a divisor of
    the node size) or span whole nodes (a multiple of it, with ``cross_node``), at most ``max_tp``."""
    gpn = cluster.gpus_per_node
    limit = max_tp or (cluster.num_gpus if cross_node else gpn)
    if not cross_node:
        limit = min(limit, gpn)
    # tp=3 or 6 on 8-GPU nodes would put one group on two nodes and stall every step
    return tuple(d for d in divisors(model.num_heads) if model.num_kv_heads % d == 0 and d <= limit
                 and (gpn % d == 0 if d <= gpn else d % gpn == 0))


def build_space(model: ModelSpec, cluster: ClusterSpec, base: ParallelPlan, *, tp: Optional[Sequence[int]] = None,
                max_tp: int = 0, cross_node_tp: bool = False, pp: Optional[Sequence[int]] = None,
                micro_batch_sizes: Sequence[int] = (1, 2, 4, 8, 16),
                schedules: Sequence[Schedule] = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED),
                virtual_stages: Sequence[int] = (2, 4), recompute: Sequence[Recompute] = tuple(Recompute),
                sequence_parallel: Sequence[bool] = (False, True),
                distributed_optimizer: Sequence[bool] = (False, True),
                gpus: int = 0, min_gpus: int = 1, max_gpus: int = 0) -> PlanSpace:
    """A plan space from plain values (the search's config and the case studies both build theirs here).

    tp: ``tp`` or :func:`node_aligned_tp`; pp: ``pp`` or the divisors of the layers; dp: divisors of the
    global batch (each replica gets whole sequences); GPU count tp*pp*dp exactly ``gpus`` (0: any) or
    within [``min_gpus``, ``max_gpus``] (0: the cluster)."""
    n = cluster.num_gpus
    lo, hi = (gpus, gpus) if gpus else (max(1, min_gpus), max_gpus)
    return PlanSpace(
        model=model, cluster=cluster, base=base,
        tp=tuple(tp) if tp is not None else node_aligned_tp(model, cluster, max_tp, cross_node_tp),
        pp=tuple(pp) if pp is not None else tuple(d for d in divisors(model.num_layers) if d <= n),
        dp=tuple(d for d in divisors(base.global_batch_size) if d <= n),
        micro_batch_sizes=tuple(sorted(set(micro_batch_sizes))), schedules=tuple(schedules),
        virtual_stages=tuple(sorted({v for v in virtual_stages if v > 1})), recompute=tuple(recompute),
        sequence_parallel=tuple(sequence_parallel), distributed_optimizer=tuple(distributed_optimizer),
        min_gpus=lo, max_gpus=hi)


def plan_space(model: ModelSpec, cluster: ClusterSpec, base: ParallelPlan, search: Any) -> PlanSpace:
    """The space of the ``search`` config group (see :class:`vtrain.config.schema.SearchConfig`)."""
    try:
        schedules = tuple(Schedule(str(s)) for s in search.schedules)
        recompute = tuple(Recompute(str(r)) for r in search.recompute)
    except ValueError as exc:
        raise ConfigError(f"search: {exc}") from None
    return build_space(
        model, cluster, base, max_tp=int(search.max_tp), cross_node_tp=bool(search.allow_cross_node_tp),
        micro_batch_sizes=[int(b) for b in search.micro_batch_sizes], schedules=schedules,
        virtual_stages=[int(v) for v in search.virtual_stages], recompute=recompute,
        sequence_parallel=[bool(x) for x in search.sequence_parallel],
        distributed_optimizer=[bool(x) for x in search.distributed_optimizer],
        gpus=int(search.get("gpus", 0)), min_gpus=int(search.min_gpus), max_gpus=int(search.get("max_gpus", 0)))


def canonical(plan: ParallelPlan) -> ParallelPlan:
    """Collapse plans that are the same run: no sequence parallelism at tp=1, no distributed
    optimizer at dp=1 (nothing to shard), virtual_stages=1 unless interleaved."""
    changes: dict = {}
    if plan.tp == 1 and plan.sequence_parallel:
        changes["sequence_parallel"] = False
    if plan.dp == 1 and plan.distributed_optimizer:
        changes["distributed_optimizer"] = False
    if plan.schedule != Schedule.INTERLEAVED and plan.virtual_stages != 1:
        changes["virtual_stages"] = 1
    return dataclasses.replace(plan, **changes) if changes else plan


def plan_key(plan: ParallelPlan) -> PlanKey:
    """Hashable identity of a plan, for de-duplication and memoisation."""
    return dataclasses.astuple(plan)


def plan_fields(plan: ParallelPlan) -> dict:
    """The searched fields as plain values (str for enums): trial attrs, CSV rows, MLflow params."""
    out = {}
    for name in SEARCHED_FIELDS:
        value = getattr(plan, name)
        out[name] = value.value if hasattr(value, "value") else value
    return out


def plan_from_fields(base: ParallelPlan, fields: dict) -> ParallelPlan:
    """Inverse of :func:`plan_fields` (a stored trial back to a plan)."""
    f = dict(fields)
    f["schedule"] = Schedule(f["schedule"])
    f["recompute"] = Recompute(f["recompute"])
    return dataclasses.replace(base, **{k: f[k] for k in SEARCHED_FIELDS})


def check(space: PlanSpace, plan: ParallelPlan) -> Optional[str]:
    """The reason ``plan`` is invalid, or None."""
    if not space.gpus_ok(plan.num_gpus):
        return (f"tp*pp*dp={plan.num_gpus} GPUs is outside the searched {space.min_gpus}..{space.gpu_limit} "
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


def enumerate_plans(space: PlanSpace) -> List[ParallelPlan]:
    """Every valid, canonical plan once, sorted by :func:`pipeline_shape` so that neighbours reuse
    the simulator's compiled-schedule cache (``vtrain.sim.schedule.compile_schedule``)."""
    seen = set()
    plans: List[ParallelPlan] = []
    base = space.base
    gbs = base.global_batch_size
    for pp in space.pp:
        for tp in space.tp:
            for dp in space.dp_choices(tp, pp):
                for mb in space.micro_batch_sizes:
                    if gbs % (dp * mb):
                        continue
                    for sched, v in _schedule_options(space, pp, gbs // (dp * mb)):
                        for rc in space.recompute:
                            for sp in (space.sequence_parallel if tp > 1 else (False,)):
                                for do in (space.distributed_optimizer if dp > 1 else (False,)):
                                    plan = canonical(dataclasses.replace(
                                        base, tp=tp, pp=pp, dp=dp, micro_batch_size=mb, schedule=sched,
                                        virtual_stages=v, recompute=rc, sequence_parallel=sp,
                                        distributed_optimizer=do))
                                    key = plan_key(plan)
                                    if key in seen or check(space, plan) is not None:
                                        continue
                                    seen.add(key)
                                    plans.append(plan)
    plans.sort(key=pipeline_shape)  # stable: ties keep the loop order
    return plans
