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
- **Current scaling's amax pass** (``fp8_recipe=tensorwise``: Megatron-Bridge's FP8-CS, its per-tensor recipe
  from 25.09 on). TE's ``Float8CurrentScalingQuantizer::quantize_impl`` (pytorch/csrc/quantizer.cpp) computes the
  tensor's amax in a kernel of its own (``nvte_compute_amax``: read 2 B per element), all-reduces it over the TP
  group where the layer gathers a sequence-parallel input (``with_amax_reduction``: the column-parallel input, the
  row-parallel output gradient), turns it into the scale (``nvte_compute_scale_from_amax``, one tiny kernel) and
  only then casts (``nvte_quantize_v2``: read 2 B, write 1 B per layout): 2 B more per element of an activation,
  gradient or weight than delayed scaling's one fused cast. The amax and scale kernels are launched from C++ within
  the module's one quantize call (``MemoryOp.launches``: a CUDA launch of host time each and a kernel's GPU time,
  not a framework op's host time). A grouped linear layer (the MoE experts) quantizes through ``split_quantize``,
  whose one fused kernel over the experts' slices serves delayed scaling alone (pytorch/csrc/extensions/cast.cpp,
  ``multi_tensor_quantize_impl``: "only have fused kernel for FP8 delayed scaling"): current scaling runs the amax
  and scale kernels for each local expert's slice (its cast per slice, which MXFP8 runs too, stays one kernel).
  The norm's kernel cannot write the quantized output (normalization.cpp fuses the quantize for
  ``Float8Quantizer``, delayed scaling, alone): it writes the bf16 output and its amax
  (``create_hp_tensor_with_amax``), then ``quantize_with_amax`` runs the scale kernel and the cast, so the QKV and
  FC1 input casts are the generic cast and a scale kernel, with no amax pass. Not priced: the TP all-reduce of
  the amax (one 4-byte all-reduce per such cast, tp > 1 with sequence parallelism).
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
# current scaling's amax pass: read 2 B per element, over the generic cast's 4 B (on either GPU: Blackwell's
# missing transpose saves a write, not this read)
AMAX_PASS_SHARE = 2.0 / 4.0
AMAX_PASS_KERNELS = 2  # nvte_compute_amax and nvte_compute_scale_from_amax, per quantized tensor (C++ launches)
# NVFP4: amax pass 2 B + row-wise cast 2 + 0.5 B + column-wise Hadamard cast 2 + 0.5 B, over the generic 4 B
NVFP4_PASSES_SHARE = 7.0 / 4.0
NVFP4_EXTRA_KERNELS = 2  # the amax pass and the second (column-wise) cast, per activation or gradient tensor


class TeCasts(NamedTuple):
    """How Transformer Engine's casts differ from the generic ones (:func:`te_switches`)."""

    fuse_norm: bool  # the QKV and FC1 input casts are the norm's
    no_transpose: bool  # per-tensor FP8 on Blackwell: one layout written
    activation_share: float = 1.0  # bytes of an activation's or gradient's cast over the generic cast's
    current_scaling: bool = False  # per-tensor FP8 with current scaling: an amax pass before each cast


NONE = TeCasts(False, False)
_MEMO: Dict[Tuple[int, TeCasts], Tuple[ModelGraph, ModelGraph]] = {}
_MAX_ENTRIES = 512  # emptied when it grows past this, as the structure memos (vtrain.sim.structure)


def te_switches(stack: StackSpec, plan: ParallelPlan, architecture: str) -> TeCasts:
    """TE's casts for this stack, plan and GPU (:class:`TeCasts`; :data:`NONE` where the graph's generic casts
    stand: a stack without TE's quantization, or a high-precision plan)."""
    if not (stack.te_quantization and plan.precision.low):
        return NONE
    value = plan.precision.value
    current = value == "fp8" and plan.fp8_recipe == "tensorwise"
    return TeCasts(value in NORM_FUSED_PRECISIONS and not current, value == "fp8" and architecture == "blackwell",
                   NVFP4_PASSES_SHARE if value == "nvfp4" else 1.0, current)


def _amax_passes(op: MemoryOp) -> Tuple[float, float, int]:
    """Current scaling's amax pass before each cast of the generic ``op``, as (bytes, of them the weight's, C++
    launches) to add: the weight's bytes and, unless the norm wrote the input's amax (:data:`NORM_FUSED_CASTS`), the
    input's or gradient's; the amax and scale kernels of each activation or gradient slice (a grouped linear layer
    quantizes each local expert's slice on its own: ``MemoryOp.splits``), the scale kernel alone after the norm.
    The weight's kernels are not counted: its cast runs once per step (vtrain.graph.weight_cache)."""
    fused_input = op.name in NORM_FUSED_CASTS
    activation = op.bytes - op.weight_bytes
    tensors = op.kernels - (1 if op.weight_bytes > 0 else 0) if activation > 0 else 0
    extra_weight = op.weight_bytes * AMAX_PASS_SHARE
    extra = extra_weight + (0.0 if fused_input else activation * AMAX_PASS_SHARE)
    return extra, extra_weight, tensors * op.splits * (1 if fused_input else AMAX_PASS_KERNELS)


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
    if casts.current_scaling:  # the amax read is of the bf16 input: Blackwell's saving above is not its
        extra, extra_weight, launches = _amax_passes(op)
        nbytes, weight = nbytes + extra, weight + extra_weight
        return replace(op, bytes=nbytes, weight_bytes=weight, kernels=kernels, launches=op.launches + launches)
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
