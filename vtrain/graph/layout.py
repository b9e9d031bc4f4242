"""The copies a batch-first framework makes around its tensor-parallel collectives.

NCCL gathers and scatters along a buffer's first dimension. Megatron keeps activations sequence-first
([s, b, h]), so its sequence-parallel all-gathers and reduce-scatters act on dim 0 with no copy. DTensor in
torchtitan keeps them batch-first ([b, s, h]) and shards the sequence on dim 1: PyTorch's functional
collectives all-gather on dim 0 and then ``torch.cat(torch.chunk(out, group_size, dim=0), dim=gather_dim)``,
and chunk-and-cat the input to dim 0 before a reduce-scatter (torch.distributed._functional_collectives,
``all_gather_tensor`` / ``reduce_scatter_tensor``). Each is a copy of the full [tokens, h] activation: one
read and one write, one kernel, in the forward, the backward and a recompute alike. Async TP's fused
all-gather-matmul and matmul-reduce-scatter consume the chunks in place, so overlapped collectives get none.

Those fused ops (PyTorch's symmetric memory, ``torch.distributed._symmetric_memory``) make copies of their own,
on the compute stream: ``_pipelined_all_gather_and_consume`` copies the local shard into the symmetric buffer
and waits at a barrier before the first matmul (left unoverlapped on purpose: its comments), and
``_fused_matmul_reduce_scatter_impl`` ends with ``reduce_partials``, one kernel that reads the tp partial
products pulled from the peers and writes their sum (TE userbuffers reduce inside the communication kernels).
Their ``A.movedim(dim, 0).flatten(0, -2)`` of a batch-first input is a view, not a copy: Inductor's
micro-pipeline pass forces the producer's stride order for it (``restride_A_shard_for_fused_all_gather_matmul``,
``restride_A_for_fused_matmul_reduce_scatter`` with ``force_stride_order``), and async TP needs torch.compile.
"""
from __future__ import annotations

from typing import List

from vtrain.graph.blocks import ModelGraph, PassOps, map_passes
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


def symm_mem_pass(ops: PassOps) -> PassOps:
    out: List[Op] = []
    for op in ops.ops:
        if not (isinstance(op, Collective) and op.group == Group.TP and op.overlap):
            out.append(op)
        elif op.kind == CollectiveKind.ALL_GATHER:  # read + write the local shard (1/tp of the output)
            out += [MemoryOp(f"{op.name}.stage", 2.0 * op.bytes / op.group_size, 1, eager=True), op]
        elif op.kind == CollectiveKind.REDUCE_SCATTER:  # read the tp partials (the full buffer), write the shard
            out += [op, MemoryOp(f"{op.name}.reduce", op.bytes * (1.0 + 1.0 / op.group_size), 1, eager=True)]
        else:
            out.append(op)
    return PassOps(tuple(out))


def with_symm_mem_copies(graph: ModelGraph) -> ModelGraph:
    """Every component with the symmetric-memory staging copy before its overlapped TP all-gathers and the
    partial-sum kernel after its overlapped reduce-scatters."""
    return map_passes(graph, symm_mem_pass)


def with_tp_layout_copies(graph: ModelGraph) -> ModelGraph:
    """Every component with the chunk-and-cat copies beside its non-overlapped TP all-gathers (after) and
    reduce-scatters (before)."""
    return map_passes(graph, copy_pass)
