"""The structure of an iteration — the stage partition, the op graph, the communication plan — built once.

The partition and the graph are pure functions of the model and of the plan fields that shape one
micro-batch's work on one stage; neither reads the data-parallel degree, the batch or the data-parallel
sharding (what the tail, the communication plan and the memory model see). A search visits many plans that
differ only there (every dp of one (tp, pp, micro-batch) shape), and a simulate of a config already seen
finds both built, as it finds its compiled schedule (:func:`vtrain.sim.schedule.compile_schedule`'s cache),
and its communication plan (which does read dp: kept per plan). Prices are never kept here: every call
prices the ops anew. ``tests/unit/test_structure_memo.py`` checks that the fields left out of the key do
not change what is built.
"""
from __future__ import annotations

from dataclasses import fields
from operator import attrgetter
from typing import Any, Callable, Dict, Hashable, Optional, Tuple

from vtrain.comm.plan import CommPlan, build_comm_plan
from vtrain.graph.blocks import ModelGraph
from vtrain.graph.builder import build_model_graph
from vtrain.graph.collectives import CpComms, TpComms, TpOperator
from vtrain.graph.fusion import fuse_elementwise
from vtrain.graph.layout import with_symm_mem_copies, with_tp_layout_copies
from vtrain.graph.options import GraphOptions
from vtrain.graph.torchao_mx import uses_torchao_mx, with_torchao_mx_casts, with_torchao_nvfp4_casts
from vtrain.workload.enums import Precision
from vtrain.workload.model import ModelSpec
from vtrain.workload.partition import StagePartition, partition
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.stack import StackSpec
from vtrain.workload.system import ClusterSpec
from vtrain.workload.workload import Workload

# plan fields the partition and the graph do not read (grep vtrain/graph, vtrain/workload/partition.py)
NOT_SHAPING = frozenset({"dp", "global_batch_size", "tokens_to_train", "zero_stage", "fsdp_shard_size",
                         "reshard_after_forward", "overlap_param_gather", "distributed_optimizer",
                         "overlap_grad_reduce", "grad_bucket_mib"})
_shaping: Callable[[ParallelPlan], Tuple[Any, ...]] = attrgetter(
    *(f.name for f in fields(ParallelPlan) if f.name not in NOT_SHAPING))
_MAX_ENTRIES = 512  # each memo is emptied when it grows past this (a search's shapes number in the hundreds)
_PARTS: Dict[Hashable, StagePartition] = {}
_GRAPHS: Dict[Hashable, ModelGraph] = {}
_COMMS: Dict[Tuple[int, ...], Tuple[ModelSpec, ParallelPlan, ClusterSpec, StagePartition, CommPlan, StackSpec]] = {}


def shape_key(model: ModelSpec, plan: ParallelPlan) -> Tuple[Any, ...]:
    """What the partition and the graph depend on: the model and the shaping plan fields."""
    return (model, _shaping(plan))


def stage_partition(model: ModelSpec, plan: ParallelPlan, key: Optional[Tuple[Any, ...]] = None) -> StagePartition:
    """:func:`vtrain.workload.partition.partition`, built once per shape."""
    k = key if key is not None else shape_key(model, plan)
    hit = _PARTS.get(k)
    if hit is None:
        if len(_PARTS) >= _MAX_ENTRIES:
            _PARTS.clear()
        hit = _PARTS[k] = partition(model, plan)
    return hit


def model_graph(model: ModelSpec, plan: ParallelPlan, tp: TpComms, cp: Optional[CpComms], ep: Optional[TpOperator],
                opts: GraphOptions = GraphOptions(), key: Optional[Tuple[Any, ...]] = None) -> ModelGraph:
    """:func:`vtrain.graph.builder.build_model_graph` with the communication plan's TP, CP and EP collectives
    and the stack's switches ``opts`` (Inductor-style fusion when ``opts.fuse_elementwise``; the batch-first
    copies around TP collectives when ``opts.layout_copies``, and async TP's symmetric-memory copies when
    ``opts.symm_mem_tp``, :mod:`vtrain.graph.layout`), built once per shape,
    collectives and switches."""
    k = (key if key is not None else shape_key(model, plan), tp, cp, ep, opts)
    hit = _GRAPHS.get(k)
    if hit is None:
        if len(_GRAPHS) >= _MAX_ENTRIES:
            _GRAPHS.clear()
        graph = build_model_graph(model, plan, tp, cp, ep, opts)
        if opts.torchao_casts and plan.precision is Precision.NVFP4:  # torchao's own Triton casts: never fused
            graph = with_torchao_nvfp4_casts(graph)
        elif uses_torchao_mx(opts.torchao_casts, plan.precision.value):  # its MXFP8 Triton / CUDA casts: the same
            graph = with_torchao_mx_casts(graph)
        # a cat beside a collective does not fuse into it
        graph = fuse_elementwise(graph) if opts.fuse_elementwise else graph
        graph = with_tp_layout_copies(graph) if opts.layout_copies and plan.tp > 1 else graph
        hit = _GRAPHS[k] = with_symm_mem_copies(graph) if opts.symm_mem_tp and plan.tp_comm_overlap else graph
    return hit


def comm_plan(w: Workload, part: StagePartition) -> CommPlan:
    """:func:`vtrain.comm.plan.build_comm_plan` (it reads the model, the plan and the cluster), built once per
    (model, plan, cluster, partition, stack) objects: a config simulated again (the build memo hands back the same
    values) finds its communication plan built. Keyed by identity (the values hold dicts), the objects held."""
    k = (id(w.model), id(w.plan), id(w.cluster), id(part), id(w.stack))
    hit = _COMMS.get(k)
    if hit is not None and hit[0] is w.model and hit[1] is w.plan and hit[2] is w.cluster and hit[3] is part \
            and hit[5] is w.stack:
        return hit[4]
    if len(_COMMS) >= _MAX_ENTRIES:
        _COMMS.clear()
    comm = build_comm_plan(w, part)
    _COMMS[k] = (w.model, w.plan, w.cluster, part, comm, w.stack)
    return comm


def clear_structures() -> None:
    """Forget the built partitions, graphs and communication plans (benchmarks that time a config never
    seen, tests)."""
    _PARTS.clear()
    _GRAPHS.clear()
    _COMMS.clear()
