"""How Transformer Engine quantizes a low-precision linear layer's operands, where it differs from the generic
cast the graph prices (:func:`vtrain.graph.blocks.linear`: read the bf16 tensor, write it in both GEMM layouts).

Transformer Engine, "Performance Considerations" (docs/features/low_precision_training/performance_considerations):

- **Fused norm and quantization.** ``LayerNormLinear`` quantizes the norm's output inside the norm kernel, so the
  linear layer's own input cast is gone. Megatron-Core builds the attention's QKV projection and a dense MLP's FC1
  as ``TELayerNormColumnParallelLinear`` (megatron/core/models/gpt/gpt_layer_specs.py); the MLA projections and
  the MoE experts follow a separate ``TENorm`` (the latent projections, the router and the token permutation sit
  between), so their casts stay.
- **No transposed copy on Blackwell.** "Hopper cannot efficiently access elements in columnwise fashion, so
  columnwise tensors need to be physically transposed in memory ... Blackwell supports columnwise access natively,
  so no transpose is needed" (TE's ``is_non_tn_fp8_gemm_supported``: sm_100 and later) for per-tensor FP8: a cast
  reads 2 B and writes 1 B per element, not 2 x 1 B. MXFP8 and NVFP4 scale 32 / 16 elements along the GEMM's
  reduction axis, so their row- and column-wise tensors differ and both are written, on Blackwell too.

Applied as a rewrite of the built graph (``StackSpec.te_quantization``), once per (graph, switches).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, Tuple

from vtrain.graph.blocks import ModelGraph, PassOps, map_passes
from vtrain.graph.ops import MemoryOp, Op
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.stack import StackSpec

# the input casts a LayerNormLinear folds into its norm: Megatron-Core's fused QKV and dense FC1 (graph.builder)
NORM_FUSED_CASTS = frozenset({"qkv.quant", "fc1.quant"})
# per-tensor FP8 on Blackwell: read 2 B, write 1 B per element instead of 2 + 2 x 1 B (_QUANT_BYTES in blocks.py)
NO_TRANSPOSE_SHARE = 3.0 / 4.0

_MEMO: Dict[Tuple[int, bool, bool], Tuple[ModelGraph, ModelGraph]] = {}
_MAX_ENTRIES = 512  # emptied when it grows past this, as the structure memos (vtrain.sim.structure)


def te_switches(stack: StackSpec, plan: ParallelPlan, architecture: str) -> Tuple[bool, bool]:
    """(norm-fused input casts, per-tensor FP8 casts without a transposed copy) for this stack, plan and GPU."""
    if not (stack.te_quantization and plan.precision.low):
        return False, False
    return True, plan.precision.value == "fp8" and architecture == "blackwell"


def _rewritten(op: Op, fuse_norm: bool, no_transpose: bool) -> Op:
    if not isinstance(op, MemoryOp) or not (op.name.endswith(".quant") or op.name.endswith(".quant.bwd")):
        return op
    nbytes, weight, kernels = op.bytes, op.weight_bytes, op.kernels
    if fuse_norm and op.name in NORM_FUSED_CASTS and nbytes > weight:
        nbytes, kernels = weight, max(1, kernels - 1)  # the input's cast is the norm's; the weight's stays
    if no_transpose:
        nbytes, weight = nbytes * NO_TRANSPOSE_SHARE, weight * NO_TRANSPOSE_SHARE
    return replace(op, bytes=nbytes, weight_bytes=weight, kernels=kernels)


def with_te_quantization(graph: ModelGraph, fuse_norm: bool, no_transpose: bool) -> ModelGraph:
    """``graph`` with Transformer Engine's casts (:func:`te_switches`); the same graph when both are off."""
    if not (fuse_norm or no_transpose):
        return graph
    key = (id(graph), fuse_norm, no_transpose)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is graph:
        return hit[1]
    if len(_MEMO) >= _MAX_ENTRIES:
        _MEMO.clear()
    out = map_passes(graph, lambda p: PassOps(tuple(_rewritten(op, fuse_norm, no_transpose) for op in p.ops)))
    _MEMO[key] = (graph, out)
    return out
