"""A plan as Optuna trial parameters, and back: one categorical parameter per searched plan field.

Each parameter holds the plan's own value (``dp`` is the data-parallel degree, not a share), with a
fixed list of choices per name, as Optuna's samplers need. Every parameter is drawn in every trial and
the plan ignores those that do not apply (``virtual_stages`` without the interleaved schedule,
``sequence_parallel`` at tp=1, ``zero_stage`` at dp*cp=1, ``etp`` equal to tp, ``cp_comm`` at cp=1,
``recompute_num_layers`` without full recompute, ``fsdp_shard_size`` without sharding,
``reshard_after_forward`` below ZeRO-3; see :func:`canonical`). The ZeRO stage is one parameter,
``zero_stage`` (``distributed_optimizer`` follows from it); ``cp``, ``precision``, ``ep``, ``etp``,
``moe_dispatcher``, ``cp_comm``, ``recompute_num_layers``, ``fsdp_shard_size`` and
``reshard_after_forward`` are parameters only when their search list has
more than one choice (MoE fields only for a model with experts). NSGA-II
varies only the parameters all finished trials share (Optuna's intersection search space) and samples
the others at random, which would scramble a good parent's schedule. A (tp, pp, dp) whose GPU count
is outside the searched range is :class:`Infeasible` (NSGA-II children are re-drawn before that,
:mod:`vtrain.search.operators`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Sequence

from vtrain.search.plans import canonical
from vtrain.search.space import Infeasible, PlanSpace, check
from vtrain.workload.enums import Schedule
from vtrain.workload.plan import ParallelPlan


def _raw(value: Any) -> Any:
    return value.value if hasattr(value, "value") else value


def choices(space: PlanSpace) -> Dict[str, Sequence[Any]]:
    """Parameter name -> its choices (plain values), for every field with more than one choice."""
    every: Dict[str, Sequence[Any]] = {
        "tp": space.tp, "pp": space.pp, "dp": space.dp_values, "micro_batch_size": space.micro_batch_sizes,
        "schedule": [_raw(s) for s in space.schedules], "virtual_stages": space.virtual_stages,
        "recompute": [_raw(r) for r in space.recompute], "sequence_parallel": space.sequence_parallel,
        "zero_stage": space.zero_stages, "cp": space.cp, "precision": [_raw(x) for x in space.precision_choices],
        "ep": space.ep_choices, "etp": space.etp_choices,
        "moe_dispatcher": [_raw(x) for x in space.dispatcher_choices],
        "cp_comm": [_raw(x) for x in space.cp_comm_choices], "recompute_num_layers": space.recompute_num_layers,
        "fsdp_shard_size": space.shard_size_choices, "reshard_after_forward": space.reshard_choices}
    return {k: list(v) for k, v in every.items() if len(v) > 1}


def _pick(trial: Any, name: str, options: Sequence[Any]) -> Any:
    """A categorical draw; a single choice is fixed without a trial parameter."""
    if len(options) == 1:
        return options[0]
    raw = trial.suggest_categorical(name, [_raw(c) for c in options])
    return next(c for c in options if _raw(c) == raw)


def suggest_plan(trial: Any, space: PlanSpace) -> ParallelPlan:
    """Draw one plan from an Optuna trial (or a ``FixedTrial``); raises :class:`Infeasible` with the reason."""
    if not space.dp_values:
        raise Infeasible(f"no tp*pp*dp lies within the searched {space.min_gpus}..{space.gpu_limit} GPUs")
    tp = _pick(trial, "tp", space.tp)
    pp = _pick(trial, "pp", space.pp)
    dp = _pick(trial, "dp", space.dp_values)
    mb = _pick(trial, "micro_batch_size", space.micro_batch_sizes)
    sched = _pick(trial, "schedule", space.schedules)
    v = _pick(trial, "virtual_stages", space.virtual_stages) if space.virtual_stages else 1
    rc = _pick(trial, "recompute", space.recompute)
    sp = _pick(trial, "sequence_parallel", space.sequence_parallel)
    zs = _pick(trial, "zero_stage", space.zero_stages)
    cp = _pick(trial, "cp", space.cp)
    prec = _pick(trial, "precision", space.precision_choices)
    ep = _pick(trial, "ep", space.ep_choices)
    etp = _pick(trial, "etp", space.etp_choices)
    disp = _pick(trial, "moe_dispatcher", space.dispatcher_choices)
    cpc = _pick(trial, "cp_comm", space.cp_comm_choices)
    nl = _pick(trial, "recompute_num_layers", space.recompute_num_layers)
    fs = _pick(trial, "fsdp_shard_size", space.shard_size_choices)
    rf = _pick(trial, "reshard_after_forward", space.reshard_choices)
    if sched == Schedule.INTERLEAVED and not space.virtual_stages:
        raise Infeasible("schedule=interleaved needs search.virtual_stages with a value > 1")
    if sched != Schedule.INTERLEAVED:
        v = 1
    if tp == 1 or space.base.seq_len % tp:
        sp = False
    plan = canonical(dataclasses.replace(space.base, tp=tp, cp=cp, pp=pp, dp=dp, micro_batch_size=mb, schedule=sched,
                                         virtual_stages=v, recompute=rc, sequence_parallel=sp, zero_stage=zs,
                                         distributed_optimizer=zs >= 1, precision=prec, ep=ep, etp=etp,
                                         moe_dispatcher=disp, cp_comm=cpc, recompute_num_layers=nl,
                                         fsdp_shard_size=fs, reshard_after_forward=rf), space.model)
    reason = check(space, plan)
    if reason is not None:
        raise Infeasible(reason)
    return plan


def trial_params(space: PlanSpace, plan: ParallelPlan) -> Dict[str, Any]:
    """The Optuna parameters under which :func:`suggest_plan` draws ``plan`` (to enqueue it)."""
    values = {"tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "micro_batch_size": plan.micro_batch_size,
              "schedule": _raw(plan.schedule), "recompute": _raw(plan.recompute),
              "virtual_stages": plan.virtual_stages if plan.virtual_stages in space.virtual_stages
              else (space.virtual_stages[0] if space.virtual_stages else 1),
              "sequence_parallel": plan.sequence_parallel, "zero_stage": plan.sharding_stage, "cp": plan.cp,
              "precision": _raw(plan.precision), "ep": plan.ep, "etp": plan.etp,
              "moe_dispatcher": _raw(plan.moe_dispatcher), "cp_comm": _raw(plan.cp_comm),
              "recompute_num_layers": plan.recompute_num_layers, "fsdp_shard_size": plan.fsdp_shard_size,
              "reshard_after_forward": plan.reshard_after_forward}
    options = choices(space)
    if "etp" in options and plan.etp not in options["etp"] and plan.tp in options["etp"]:
        values["etp"] = plan.tp  # canonical etp=0 means tp: draw it as tp
    # a value canonical collapsed (zero_stage at dp*cp=1, sequence_parallel at tp=1, cp_comm at cp=1, a block
    # depth covering every chunk): any choice decodes alike
    return {name: values[name] if values[name] in opts else opts[0] for name, opts in options.items()}


def decode(space: PlanSpace, params: Dict[str, Any]) -> ParallelPlan:
    """The plan of a complete parameter set (raises :class:`Infeasible`)."""
    import optuna

    return suggest_plan(optuna.trial.FixedTrial(params), space)
