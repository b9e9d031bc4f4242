"""How Transformer Engine quantizes a low-precision linear layer's operands, where it differs from the generic
cast the graph prices (:func:`vtrain.graph.blocks.linear`: read the bf16 tensor, write it in both GEMM layouts).

Transformer Engine, "Performance Considerations" (docs/features/low_precision_training/performance_considerations):

- **Fused norm and quantization, for delayed-scaling FP8 only.** ``LayerNormLinear`` quantizes the norm's output
  inside the norm kernel, so the linear layer's own input cast is gone. Megatron-Core builds the attention's QKV
  projection and a dense MLP's FC1 as ``TELayerNormColumnParallelLinear`` (megatron/core/models/gpt/
  gpt_layer_specs.py); the MLA projections and the MoE experts follow a separate ``TENorm`` (the latent
  projections, the router and the token permutation sit between), so their casts stay. TE's norm extension
  (pytorch/csrc/extensions/normalization.cpp, ``force_unfused_kernel``) runs the fused kernel for per-tensor FP8
  (``Float8Quantizer``) alone: an MXFP8 output only through cuDNN's norm (``NVTE_NORM_FWD_USE_CUDNN``, which
  Megatron-Bridge's performance launcher removes for Llama's MXFP8 runs, perf_plugins.py ``del_cudnn_ln``), NVFP4
  and blockwise FP8 never: the norm writes bf16 and the linear layer casts it (its own kernel, as the graph prices).
- **No transposed copy on Blackwell.** "Hopper cannot efficiently access elements in columnwise fashion, so
  columnwise tensors need to be physically transposed in memory ... Blackwell supports columnwise access natively,
  so no transpose is needed" (TE's ``is_non_tn_fp8_gemm_supported``: sm_100 and later) for per-tensor FP8: a cast
  reads 2 B and writes 1 B per element, not 2 x 1 B. MXFP8 and NVFP4 scale 32 / 16 elements along the GEMM's
  reduction axis, so their row- and column-wise tensors differ and both are written, on Blackwell too.
- **NVFP4's three passes.** TE's NVFP4 quantizer (pytorch/csrc/quantizer.cpp, ``NVFP4Quantizer::quantize_impl``)
  scales each 16-element block under a per-tensor amax it computes first: one pass reads the input for the amax
  of it and of its random Hadamard transform (``nvte_hadamard_transform_amax``, 2 B), then the row-wise cast
  (``nvte_quantize_v2``: read 2 B, write 0.5 B) and the column-wise cast fused with the Hadamard transform for the
  weight-gradient GEMM (``nvte_hadamard_transform_cast_fusion_columnwise``: read 2 B, write 0.5 B) each read it
  again: 7 B per element of an activation or gradient, three kernels, where the generic cast counts 4 B and one.
  The weight's 2D 16 x 16 blocks need no transform (its cast, once per step, stays as priced).

Applied as a rewrite of the built graph (``StackSpec.te_quantization``), once per (graph, switches).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, NamedTuple, Tuple

from vtrain.graph.blocks import ModelGraph, PassOps, map_passes
from vtrain.graph.ops import MemoryOp, Op
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.stack import StackSpec

# the input casts a LayerNormLinear folds into its norm: Megatron-Core's fused QKV and dense FC1 (graph.builder)
NORM_FUSED_CASTS = frozenset({"qkv.quant", "fc1.quant"})
# the precisions whose norm output TE quantizes inside the norm kernel (normalization.cpp: per-tensor FP8)
NORM_FUSED_PRECISIONS = frozenset({"fp8"})
# per-tensor FP8 on Blackwell: read 2 B, write 1 B per element instead of 2 + 2 x 1 B (_QUANT_BYTES in blocks.py)
NO_TRANSPOSE_SHARE = 3.0 / 4.0
# NVFP4: amax pass 2 B + row-wise cast 2 + 0.5 B + column-wise Hadamard cast 2 + 0.5 B, over the generic 4 B
NVFP4_PASSES_SHARE = 7.0 / 4.0
NVFP4_EXTRA_KERNELS = 2  # the amax pass and the second (column-wise) cast, per activation or gradient tensor


class TeCasts(NamedTuple):
    """How Transformer Engine's casts differ from the generic ones (:func:`te_switches`)."""

    fuse_norm: bool  # the QKV and FC1 input casts are the norm's
    no_transpose: bool  # per-tensor FP8 on Blackwell: one layout written
    activation_share: float = 1.0  # bytes of an activation's or gradient's cast over the generic cast's


NONE = TeCasts(False, False)
_MEMO: Dict[Tuple[int, TeCasts], Tuple[ModelGraph, ModelGraph]] = {}
_MAX_ENTRIES = 512  # emptied when it grows past this, as the structure memos (vtrain.sim.structure)


def te_switches(stack: StackSpec, plan: ParallelPlan, architecture: str) -> TeCasts:
    """TE's casts for this stack, plan and GPU (:class:`TeCasts`; :data:`NONE` where the graph's generic casts
    stand: a stack without TE's quantization, or a high-precision plan)."""
    if not (stack.te_quantization and plan.precision.low):
        return NONE
    value = plan.precision.value
    return TeCasts(value in NORM_FUSED_PRECISIONS, value == "fp8" and architecture == "blackwell",
                   NVFP4_PASSES_SHARE if value == "nvfp4" else 1.0)


def _rewritten(op: Op, casts: TeCasts) -> Op:
    if not isinstance(op, MemoryOp) or not (op.name.endswith(".quant") or op.name.endswith(".quant.bwd")):
        return op
    nbytes, weight, kernels = op.bytes, op.weight_bytes, op.kernels
    if casts.activation_share != 1.0 and nbytes > weight:  # the activation's (or gradient's) part, not the weight's
        nbytes = weight + (nbytes - weight) * casts.activation_share
        kernels += NVFP4_EXTRA_KERNELS * (op.kernels - (1 if weight > 0 else 0))
    if casts.fuse_norm and op.name in NORM_FUSED_CASTS and nbytes > weight:
        nbytes, kernels = weight, max(1, op.kernels - 1)  # the input's cast is the norm's; the weight's stays
    if casts.no_transpose:
        nbytes, weight = nbytes * NO_TRANSPOSE_SHARE, weight * NO_TRANSPOSE_SHARE
    return replace(op, bytes=nbytes, weight_bytes=weight, kernels=kernels)


def with_te_quantization(graph: ModelGraph, casts: TeCasts) -> ModelGraph:
    """``graph`` with Transformer Engine's casts (:func:`te_switches`); the same graph where they are the generic
    ones (:data:`NONE`)."""
    if casts == NONE:
        return graph
    key = (id(graph), casts)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is graph:
        return hit[1]
    if len(_MEMO) >= _MAX_ENTRIES:
        _MEMO.clear()
    out = map_passes(graph, lambda p: PassOps(tuple(_rewritten(op, casts) for op in p.ops)))
    _MEMO[key] = (graph, out)
    return out
