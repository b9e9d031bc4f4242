"""Quantized weights kept across the micro-batches of a step: the weight casts of a low-precision linear layer run
on the first micro-batch only.

Megatron-Core's ``forward_step`` calls ``model.set_is_first_microbatch()`` on a step's first micro-batch
(megatron/core/pipeline_parallel/schedules.py), and its Transformer Engine layers pass ``is_first_microbatch`` on
to TE's Linear, LayerNormLinear and GroupedLinear, which quantize the weight (and write its transposed or
column-wise copy) when it is True and reuse the cached FP8 / MXFP8 / NVFP4 weight otherwise. torchao's float8 and
MX linears cast the weight in every forward (no cache), as do the per-operand casts of its rowwise recipe.
The graph is one micro-batch's, so a cached weight cast is priced at its step average: the weight's bytes times
1 / (micro-batches per step), and its kernel launched on one micro-batch in that many (``StackSpec.fp8_weight_cache``;
under ZeRO-3 / FSDP the weights are gathered again for each micro-batch, and with them cast again).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, Tuple

from vtrain.graph.blocks import ModelGraph, PassOps, map_passes
from vtrain.graph.ops import MemoryOp, Op
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.stack import StackSpec

_MEMO: Dict[Tuple[int, float], Tuple[ModelGraph, ModelGraph]] = {}
_MAX_ENTRIES = 512  # emptied when it grows past this, as the structure memos (vtrain.sim.structure)


def weight_cast_share(stack: StackSpec, plan: ParallelPlan) -> float:
    """The share of a step's micro-batches that cast the weights: 1 / micro-batches where the stack keeps quantized
    weights across them (a low precision, no per-micro-batch weight gather), else 1."""
    if not (plan.precision.low and stack.fp8_weight_cache and plan.sharding_stage < 3):
        return 1.0
    return 1.0 / max(1, plan.num_microbatches)


def _cached(op: Op, share: float) -> Op:
    if not isinstance(op, MemoryOp) or op.weight_bytes <= 0.0:
        return op
    saved = (1.0 - share) * op.weight_bytes
    # the input's cast (one kernel) stays in every micro-batch; an op of the weight alone keeps its one kernel
    kernels = op.kernels - 1 if op.bytes > op.weight_bytes and op.kernels > 1 else op.kernels
    return replace(op, bytes=op.bytes - saved, weight_bytes=op.weight_bytes - saved, kernels=kernels)


def with_cached_weights(graph: ModelGraph, share: float) -> ModelGraph:
    """``graph`` with every weight cast priced at ``share`` of its bytes (:func:`weight_cast_share`); the same
    graph object when ``share`` is 1. Built once per (graph, share)."""
    if share >= 1.0:
        return graph
    key = (id(graph), share)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is graph:
        return hit[1]
    if len(_MEMO) >= _MAX_ENTRIES:
        _MEMO.clear()
    out = map_passes(graph, lambda p: PassOps(tuple(_cached(op, share) for op in p.ops)))
    _MEMO[key] = (graph, out)
    return out
