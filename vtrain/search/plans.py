"""A plan as the search stores and compares it: the fields a search varies and their config groups, the
canonical form that collapses plans which are the same run, and the plain values and keys a trial, a CSV row or
an MLflow run carries. :mod:`vtrain.search.space` builds the space of them."""
from __future__ import annotations

import dataclasses
import operator
from enum import Enum
from typing import Any, Optional, Tuple

from vtrain.config.validate import check_microbatch_group, check_pipeline_split
from vtrain.errors import ConfigError
from vtrain.workload.enums import CpComm, MoeDispatcher, Precision, Recompute, Schedule
from vtrain.workload.model import ModelSpec
from vtrain.workload.partition import partition
from vtrain.workload.plan import PAR, ParallelPlan

PlanKey = Tuple[Any, ...]
# the plan fields a search varies (everything else comes from the composed config); the ones after
# distributed_optimizer came with issue 12 and keep their base value unless their search.* list names more
SEARCHED_FIELDS = ("tp", "pp", "dp", "micro_batch_size", "schedule", "virtual_stages", "recompute",
                   "sequence_parallel", "distributed_optimizer", "zero_stage", "cp", "precision", "ep", "etp",
                   "moe_dispatcher", "cp_comm", "recompute_num_layers", "fsdp_shard_size", "reshard_after_forward")
# the config group of each searched field (``training.precision``, ``parallelism.<the rest>``)
FIELD_GROUP = {f.name: f.metadata.get("group") or PAR for f in dataclasses.fields(ParallelPlan)
               if f.name in SEARCHED_FIELDS}
_ENUMS = {"schedule": Schedule, "recompute": Recompute, "precision": Precision, "moe_dispatcher": MoeDispatcher,
          "cp_comm": CpComm}


APPLIED_FIELDS = ("tp_comm_overlap", "overlap_param_gather", "first_stage_layers", "last_stage_layers",
                  "pipeline_layout", "microbatch_group_size_per_vp_stage")
# fields whose rules tie them to other plan fields: the search's one-GPU starting plan holds their defaults
# and its base plan the config's values (vtrain.search.run.prepare)
TIED_FIELDS = (*APPLIED_FIELDS, "fsdp_shard_size")


def canonical(plan: ParallelPlan, model: Optional[ModelSpec] = None) -> ParallelPlan:
    """Collapse plans that are the same run: no sequence parallelism at tp=1; one ZeRO stage field (the
    stage in effect, :attr:`ParallelPlan.sharding_stage`, with ``distributed_optimizer`` = stage >= 1), and
    stage 0 when dp*cp=1 (nothing to shard); virtual_stages=1 unless interleaved; etp=0 when it equals tp
    (0 means tp); ``fsdp_shard_size`` 0 without sharding or at dp and above, ``reshard_after_forward`` true
    below ZeRO-3; the default ``cp_comm`` at cp=1 (no attention to split); ``recompute_num_layers`` 0 unless
    recompute=full, and 0 when it covers every layer of the largest chunk (the same as 0; needs ``model``).
    With ``model`` and a dense one: ep=1, etp=0 and the default dispatcher (no experts)."""
    changes: dict = {}
    if plan.tp == 1 and plan.sequence_parallel:
        changes["sequence_parallel"] = False
    stage = plan.sharding_stage if plan.dp * plan.cp > 1 else 0
    if stage != plan.zero_stage or (stage >= 1) != plan.distributed_optimizer:
        changes["zero_stage"], changes["distributed_optimizer"] = stage, stage >= 1
    if plan.schedule != Schedule.INTERLEAVED and plan.virtual_stages != 1:
        changes["virtual_stages"] = 1
    if plan.etp and plan.etp == plan.tp:
        changes["etp"] = 0
    if plan.cp == 1 and plan.cp_comm != CpComm.P2P:
        changes["cp_comm"] = CpComm.P2P
    if plan.recompute_num_layers and (plan.recompute != Recompute.FULL or _covers_every_chunk(model, plan)):
        changes["recompute_num_layers"] = 0
    # settings the config asks for where they apply (APPLIED_FIELDS): elsewhere they change nothing
    if plan.tp_comm_overlap and (plan.tp == 1 or not changes.get("sequence_parallel", plan.sequence_parallel)):
        changes["tp_comm_overlap"] = False
    if plan.overlap_param_gather and stage not in (1, 2):
        changes["overlap_param_gather"] = False
    if plan.fsdp_shard_size and (stage == 0 or plan.fsdp_shard_size >= plan.dp):
        changes["fsdp_shard_size"] = 0
    if not plan.reshard_after_forward and stage != 3:  # only FSDP/ZeRO-3 frees gathered parameters
        changes["reshard_after_forward"] = True
    if (plan.first_stage_layers or plan.last_stage_layers) and (plan.pp == 1 or not _split_fits(model, plan)):
        changes["first_stage_layers"] = changes["last_stage_layers"] = 0  # the config's split is for another pp
    if plan.pipeline_layout and (plan.pp == 1 or not _split_fits(model, plan)):
        changes["pipeline_layout"] = ""  # the config's layout is for another pp x virtual_stages
    if plan.microbatch_group_size_per_vp_stage and not _group_fits(plan):
        changes["microbatch_group_size_per_vp_stage"] = 0  # Megatron-Core's default group: pp
    if model is not None and not model.is_moe:
        dense = {"ep": 1, "etp": 0, "moe_dispatcher": MoeDispatcher.ALLTOALL}
        changes.update({k: v for k, v in dense.items() if getattr(plan, k) != v})
    return dataclasses.replace(plan, **changes) if changes else plan


def _covers_every_chunk(model: Optional[ModelSpec], plan: ParallelPlan) -> bool:
    """Block recompute of ``plan.recompute_num_layers`` layers reruns every layer of every chunk (no model,
    or a split that does not partition: not known, so not collapsed)."""
    if model is None:
        return False
    try:
        return plan.recompute_num_layers >= max(partition(model, plan).layers)
    except (ConfigError, ValueError, ZeroDivisionError, IndexError, StopIteration):
        return False


def _group_fits(plan: ParallelPlan) -> bool:
    """The config's interleaved micro-batch group suits this plan (Megatron-Core's rules)."""
    if plan.schedule != Schedule.INTERLEAVED:
        return False
    try:
        check_microbatch_group(plan)
    except ConfigError:
        return False
    return True


def _split_fits(model: Optional[ModelSpec], plan: ParallelPlan) -> bool:
    """The explicit first/last stage layer counts split this plan's pipeline (no model: assumed so)."""
    if model is None:
        return True
    try:
        check_pipeline_split(model, plan)
    except ConfigError:
        return False
    return True


# every field is a scalar or an enum: the same tuple as dataclasses.astuple, without its deep copies
_ALL_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(ParallelPlan)))
_SEARCHED = operator.attrgetter(*SEARCHED_FIELDS)


def plan_key(plan: ParallelPlan) -> PlanKey:
    """Hashable identity of a plan, for de-duplication and memoisation."""
    return _ALL_FIELDS(plan)


def plan_fields(plan: ParallelPlan) -> dict:
    """The searched fields as plain values (str for enums): trial attrs, CSV rows, MLflow params."""
    return dict(zip(SEARCHED_FIELDS, plan_values(plan)))


def plan_values(plan: ParallelPlan) -> Tuple[Any, ...]:
    """The searched fields' plain values in :data:`SEARCHED_FIELDS` order (compact: the grid's workers
    send these)."""
    return tuple(v.value if isinstance(v, Enum) else v for v in _SEARCHED(plan))


def plan_from_fields(base: ParallelPlan, fields: dict) -> ParallelPlan:
    """Inverse of :func:`plan_fields` (a stored trial back to a plan); a field the record lacks (a trial
    stored before that field was searched) keeps the base plan's value."""
    f = {k: fields[k] for k in SEARCHED_FIELDS if k in fields}
    for name, enum in _ENUMS.items():
        if name in f:
            f[name] = enum(f[name])
    return dataclasses.replace(base, **f)
