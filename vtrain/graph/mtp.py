"""A multi-token prediction module's own ops (DeepSeek-V3 report, Sec. 2.2; Megatron-Core's
MultiTokenPredictionLayer): the shared embedding looked up for the shifted tokens, RMSNorms of that
embedding and of the previous depth's hidden state, their concatenation projected by the 2h x h eh_proj
(column-parallel), then one transformer layer and the shared output head (priced with the layer and head
graphs)."""
from __future__ import annotations

from vtrain.graph.blocks import ComponentGraph, PassOps, gemm_fwd_bwd
from vtrain.graph.ops import MemoryOp
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan


def build_mtp(model: ModelSpec, plan: ParallelPlan) -> ComponentGraph:
    t, dt = plan.tp, plan.dtype_bytes
    h = model.hidden_size
    tokens = plan.tokens_per_rank  # b * s / cp
    act = float(tokens * h * dt) / (t if plan.sequence_parallel else 1)
    proj, proj_b = gemm_fwd_bwd("mtp.eh_proj", tokens, h // t, 2 * h, dt)
    fwd = (MemoryOp("mtp.embedding", 2 * act, 2), MemoryOp("mtp.enorm", 2 * act), MemoryOp("mtp.hnorm", 2 * act),
           proj)
    bwd = (*proj_b, MemoryOp("mtp.norms.bwd", 6 * act, 2), MemoryOp("mtp.embedding.grad", 2 * act, 2))
    return ComponentGraph(PassOps(fwd), PassOps(bwd), PassOps(()))
