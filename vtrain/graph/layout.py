"""The copies a batch-first framework makes around its tensor-parallel collectives.

NCCL gathers and scatters along a buffer's first dimension. Megatron keeps activations sequence-first
([s, b, h]), so its sequence-parallel all-gathers and reduce-scatters act on dim 0 with no copy. DTensor in
torchtitan keeps them batch-first ([b, s, h]) and shards the sequence on dim 1: PyTorch's functional
collectives all-gather on dim 0 and then ``torch.cat(torch.chunk(out, group_size, dim=0), dim=gather_dim)``,
and chunk-and-cat the input to dim 0 before a reduce-scatter (torch.distributed._functional_collectives,
``all_gather_tensor`` / ``reduce_scatter_tensor``). Each is a copy of the full [tokens, h] activation: one
read and one write, one kernel, in the forward, the backward and a recompute alike. Async TP's fused
all-gather-matmul and matmul-reduce-scatter consume the chunks in place, so overlapped collectives get none.
"""
from __future__ import annotations

from typing import List

from vtrain.graph.builder import ModelGraph, PassOps, map_passes
from vtrain.graph.ops import Collective, CollectiveKind, Group, MemoryOp, Op


def _copy(op: Collective) -> MemoryOp:
    return MemoryOp(f"{op.name}.cat", 2.0 * op.bytes, 1)  # read + write the full tensor


def copy_pass(ops: PassOps) -> PassOps:
    out: List[Op] = []
    for op in ops.ops:
        if not (isinstance(op, Collective) and op.group == Group.TP and not op.overlap):
            out.append(op)
        elif op.kind == CollectiveKind.REDUCE_SCATTER:
            out += [_copy(op), op]
        elif op.kind == CollectiveKind.ALL_GATHER:
            out += [op, _copy(op)]
        else:  # an all-reduce has no dimension to move
            out.append(op)
    return PassOps(tuple(out))


def with_tp_layout_copies(graph: ModelGraph) -> ModelGraph:
    """Every component with the chunk-and-cat copies beside its non-overlapped TP all-gathers (after) and
    reduce-scatters (before)."""
    return map_passes(graph, copy_pass)
