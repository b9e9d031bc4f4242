"""Kernel fusion of a compiling framework (torch.compile / Inductor): runs of adjacent memory-bound ops
between two GEMMs (or collectives) become one generated kernel.

A fused run reads its inputs once and writes its outputs once; the intermediates between the ops stay in
registers. In a transformer layer's chains (residual add + norm, quantization casts, activation) each
fused boundary removes one write and one read of an intermediate, about a quarter of the chain's traffic:
fused bytes = FUSED_TRAFFIC x the sum (a first-principles estimate, not fitted), one kernel per run.
"""
from __future__ import annotations

from typing import List

from vtrain.graph.blocks import ModelGraph, PassOps, map_passes
from vtrain.graph.ops import MemoryOp, Op

FUSED_TRAFFIC = 0.75


def fuse_pass(ops: PassOps) -> PassOps:
    out: List[Op] = []
    run: List[MemoryOp] = []

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            out.append(MemoryOp("+".join(op.name for op in run), FUSED_TRAFFIC * sum(op.bytes for op in run), 1,
                                sum(op.flops for op in run)))
        run.clear()

    for op in ops.ops:
        if isinstance(op, MemoryOp) and not op.eager:
            run.append(op)
        else:
            flush()
            out.append(op)
    flush()
    return PassOps(tuple(out))


def fuse_elementwise(graph: ModelGraph) -> ModelGraph:
    """Every component fused, the MoE layer and the MTP module included (a compiled MoE model keeps its experts)."""
    return map_passes(graph, fuse_pass)
