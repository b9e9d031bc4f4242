"""The plan space of a search: which (tp, pp, dp, micro-batch, schedule, recompute, ...) to try.

Two views of one space:
- :func:`enumerate_plans` lists every structurally valid plan (the ``grid`` sampler), and
- :func:`suggest_plan` draws one plan define-by-run from an Optuna trial (conditional parameters).

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

    def dp_choices(self, tp: int, pp: int) -> Tuple[int, ...]:
        """dp values that fit the cluster for this (tp, pp), largest first (more GPUs first)."""
        n = self.cluster.num_gpus
        return tuple(d for d in reversed(self.dp) if self.min_gpus <= tp * pp * d <= n)


def plan_space(model: ModelSpec, cluster: ClusterSpec, base: ParallelPlan, search: Any) -> PlanSpace:
    """The space from the ``search`` config group (see :class:`vtrain.config.schema.SearchConfig`).

    tp: divisors of the attention and kv heads that divide the node size (or are multiples of it),
    at most ``search.max_tp`` (0: GPUs per node, or the
    whole cluster when ``search.allow_cross_node_tp``); pp: divisors of the layers; dp: divisors of
    the global batch (each replica gets whole sequences), tp*pp*dp <= cluster GPUs.
    """
    n = cluster.num_gpus
    cross = bool(search.allow_cross_node_tp)
    max_tp = int(search.max_tp) or (n if cross else cluster.gpus_per_node)
    if not cross:
        max_tp = min(max_tp, cluster.gpus_per_node)
    # a TP group must not straddle nodes: within a node tp divides the node size, across nodes it is a
    # multiple of it (tp=3 or 6 on 8-GPU nodes would put one group on two nodes and stall every step)
    gpn = cluster.gpus_per_node
    tp = tuple(d for d in divisors(model.num_heads) if model.num_kv_heads % d == 0 and d <= max_tp
               and (gpn % d == 0 if d <= gpn else d % gpn == 0))
    try:
        schedules = tuple(Schedule(str(s)) for s in search.schedules)
        recompute = tuple(Recompute(str(r)) for r in search.recompute)
    except ValueError as exc:
        raise ConfigError(f"search: {exc}") from None
    return PlanSpace(
        model=model, cluster=cluster, base=base, tp=tp,
        pp=tuple(d for d in divisors(model.num_layers) if d <= n),
        dp=tuple(d for d in divisors(base.global_batch_size) if d <= n),
        micro_batch_sizes=tuple(sorted({int(b) for b in search.micro_batch_sizes})),
        schedules=schedules, virtual_stages=tuple(sorted({int(v) for v in search.virtual_stages if int(v) > 1})),
        recompute=recompute, sequence_parallel=tuple(bool(x) for x in search.sequence_parallel),
        distributed_optimizer=tuple(bool(x) for x in search.distributed_optimizer),
        min_gpus=max(1, int(search.min_gpus)))


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
    if plan.num_gpus < space.min_gpus:
        return f"tp*pp*dp={plan.num_gpus} is below search.min_gpus={space.min_gpus}"
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
            if layers % (pp * v) == 0:
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


def _pick(trial: Any, name: str, choices: Sequence[Any]) -> Any:
    """A categorical draw; a single choice is fixed without a trial parameter."""
    if len(choices) == 1:
        return choices[0]
    raw = trial.suggest_categorical(name, [c.value if hasattr(c, "value") else c for c in choices])
    return next(c for c in choices if (c.value if hasattr(c, "value") else c) == raw)


def _index(share: float, n: int) -> int:
    """Position in a list of ``n`` from a share in [0, 1]."""
    return min(n - 1, int(share * n))


def _sp_possible(space: PlanSpace, tp: int) -> bool:
    return tp > 1 and space.base.seq_len % tp == 0


def suggest_plan(trial: Any, space: PlanSpace) -> ParallelPlan:
    """Draw one plan define-by-run from an Optuna trial; raises :class:`Infeasible` with the reason.

    Optuna needs a fixed choice list per parameter name, so the conditional dp is encoded as
    ``dp_share`` in [0, 1]: its position among the dp values that fit next to (tp, pp), most GPUs
    first (every draw is a valid dp). Every parameter is drawn in every trial, and the plan ignores
    those that do not apply (``virtual_stages`` without the interleaved schedule,
    ``sequence_parallel`` at tp=1, ``distributed_optimizer`` at dp=1; see :func:`canonical`):
    NSGA-II varies only the parameters all finished trials share (Optuna's intersection search
    space) and samples the others at random, which would scramble a good parent's dp or schedule.
    """
    tp = _pick(trial, "tp", space.tp)
    pp = _pick(trial, "pp", space.pp)
    share = trial.suggest_float("dp_share", 0.0, 1.0) if len(space.dp) > 1 else 0.0
    mb = _pick(trial, "micro_batch_size", space.micro_batch_sizes)
    sched = _pick(trial, "schedule", space.schedules)
    v = _pick(trial, "virtual_stages", space.virtual_stages) if space.virtual_stages else 1
    rc = _pick(trial, "recompute", space.recompute)
    sp = _pick(trial, "sequence_parallel", space.sequence_parallel)
    do = _pick(trial, "distributed_optimizer", space.distributed_optimizer)
    dps = space.dp_choices(tp, pp)
    if not dps:
        raise Infeasible(f"tp*pp={tp * pp} leaves no dp with {space.min_gpus} <= tp*pp*dp <= "
                         f"{space.cluster.num_gpus} GPUs")
    dp = dps[_index(share, len(dps))]
    if sched == Schedule.INTERLEAVED and not space.virtual_stages:
        raise Infeasible("schedule=interleaved needs search.virtual_stages with a value > 1")
    if sched != Schedule.INTERLEAVED:
        v = 1
    if not _sp_possible(space, tp):
        sp = False
    plan = canonical(dataclasses.replace(space.base, tp=tp, pp=pp, dp=dp, micro_batch_size=mb, schedule=sched,
                                         virtual_stages=v, recompute=rc, sequence_parallel=sp,
                                         distributed_optimizer=do))
    reason = check(space, plan)
    if reason is not None:
        raise Infeasible(reason)
    return plan


def trial_params(space: PlanSpace, plan: ParallelPlan) -> dict:
    """The Optuna parameters under which :func:`suggest_plan` draws ``plan`` (to enqueue it)."""
    params: dict = {}

    def put(name: str, choices: Sequence[Any], value: Any) -> None:
        if len(choices) > 1:
            params[name] = value.value if hasattr(value, "value") else value

    put("tp", space.tp, plan.tp)
    put("pp", space.pp, plan.pp)
    if len(space.dp) > 1:
        dps = space.dp_choices(plan.tp, plan.pp)
        params["dp_share"] = (dps.index(plan.dp) + 0.5) / len(dps)
    put("micro_batch_size", space.micro_batch_sizes, plan.micro_batch_size)
    put("schedule", space.schedules, plan.schedule)
    if space.virtual_stages:
        put("virtual_stages", space.virtual_stages,
            plan.virtual_stages if plan.virtual_stages in space.virtual_stages else space.virtual_stages[0])
    put("recompute", space.recompute, plan.recompute)
    put("sequence_parallel", space.sequence_parallel, plan.sequence_parallel)
    put("distributed_optimizer", space.distributed_optimizer, plan.distributed_optimizer)
    return params
