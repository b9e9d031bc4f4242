"""How torchao quantizes an MXFP8 linear layer's operands (torchtitan's MXFP8 path), where it differs from the
generic cast the graph prices (:func:`vtrain.graph.blocks.linear`: one kernel reads the bf16 tensor and writes it
in both GEMM layouts, as Transformer Engine's MXFP8 quantizer does).

torchao ``prototype/mx_formats/mx_linear.py`` (``mx_mm``, the autograd function behind torchtitan's
``MXLinearConverter``) saves the bf16 input and weight and casts each operand separately for each GEMM:

- forward: the input and the weight, each along dim 0 (``MXTensor.to_mx``: one Triton kernel each);
- backward: the output gradient along dim 0 (for the input gradient) and along dim 1 (for the weight gradient),
  the weight along dim 1 and the saved input along dim 1 (``_to_mxfp8_dim1_kernel_wrapper``: one CUDA kernel
  each), four casts.

Each cast reads the bf16 tensor (2 B per element) and writes the FP8 elements (1 B) and one E8M0 scale per 32
elements (OCP MX v1.0: block size 32, 8-bit scale): 2 + 1 + 1/32 B. Every ``mx_mm`` casts its own input, so
torchtitan's separate wq / wk / wv (w1 / w3) each cast the shared input (the generic graph casts it once).

NVFP4 (torchao ``prototype/mx_formats/nvfp4_linear.py``, ``nvfp4_mm_triton``: the autograd function behind
torchtitan's NVFP4 linears, ``allow_in_graph``) quantizes with its own Triton kernels, which Inductor neither fuses
with neighbouring ops nor shares between linears: per linear, forward, a pass over the bf16 input for its row and
column amax after the random Hadamard transform (``triton_rht_amax``: read 2 B) and one kernel writing both
layouts (``triton_rht_quantize_row_col``: read 2 B, write 2 x (0.5 B + an E4M3 scale per 16)), the same for the
weight (``x.float().abs().max()``, ``triton_weight_quantize_2d``); backward, the two for the output gradient
(stochastic rounding), no recast of the input or the weight (their column codes are saved). Applied before fusion
(:func:`with_torchao_nvfp4_casts`, ``vtrain.sim.structure.model_graph``), the casts eager kernels of their own.

Both are applied to the unfused graph (``StackSpec.torchao_mx_casts``; ``vtrain.sim.structure.model_graph``), each
cast an eager kernel of its own: torchtitan's MXFP8 path (``_to_mxfp8_then_scaled_mm``) casts along dim 0 with
torchao's Triton kernel (``MXFP8Dim0CastKernelChoice.TRITON``) and along dim 1 with its CUDA kernel, custom ops
inside ``mx_mm`` (``torch._dynamo.allow_in_graph``) that Inductor does not fuse with the norm, SwiGLU or residual
beside them (rewritten after fusion, a cast fused into such a run kept the generic price: 7 of a Llama layer's
16). Each cast's element counts are read off the GEMMs it feeds (``X``: m = tokens, n, k; ``X.dgrad``: n and k
swapped).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Tuple

from vtrain.graph.blocks import ModelGraph, PassOps, map_passes
from vtrain.graph.ops import Gemm, MemoryOp, Op

# one cast: read bf16 (2 B), write e4m3 (1 B) and an E8M0 scale per 32 elements (OCP MX v1.0 spec, section 5)
CAST_BYTES_PER_ELEMENT = 2.0 + 1.0 + 1.0 / 32.0
FORWARD_CASTS = 2  # mx_mm.forward: input dim 0, weight dim 0
BACKWARD_CASTS = 4  # mx_mm.backward: grad_output dim 0 and dim 1, weight dim 1, input dim 1

# one NVFP4 operand (nvfp4_mm_triton): the amax pass reads bf16 (2 B); the quantize kernel reads it again (2 B) and
# writes row- and column-major E2M1 codes (2 x 0.5 B) with an E4M3 scale per 16 elements each (2 x 1/16 B)
NVFP4_CAST_BYTES_PER_ELEMENT = 2.0 + 2.0 + 2.0 * (0.5 + 1.0 / 16.0)
NVFP4_FORWARD_KERNELS = 4  # input amax and quantize, weight amax and quantize
NVFP4_BACKWARD_KERNELS = 2  # output gradient amax and quantize


def uses_torchao_mx(torchao_mx_casts: bool, precision: str) -> bool:
    """Whether a stack with ``torchao_mx_casts`` casts this precision's operands as torchao's ``mx_mm`` does."""
    return torchao_mx_casts and precision == "mxfp8"


def _cast(op: MemoryOp, gemm: Gemm, backward: bool) -> MemoryOp:
    b, e = gemm.batch, CAST_BYTES_PER_ELEMENT
    if backward:  # X.dgrad: m = tokens, n = the layer's k, k = the layer's n
        tokens, k, n = gemm.m, gemm.n, gemm.k
        grad, weight, inputs = 2 * tokens * n, k * n, tokens * k  # grad_output twice (dim 0, dim 1)
        return replace(op, bytes=e * b * (grad + weight + inputs), kernels=BACKWARD_CASTS, weight_bytes=0.0,
                       eager=True)
    tokens, n, k = gemm.m, gemm.n, gemm.k
    return replace(op, bytes=e * b * (tokens * k + k * n), kernels=FORWARD_CASTS, weight_bytes=e * b * k * n,
                   eager=True)


def _rewritten(ops: Tuple[Op, ...], cast: Callable[[MemoryOp, Gemm, bool], MemoryOp]) -> Tuple[Op, ...]:
    """``ops`` with each GEMM's cast (``X.quant`` before ``X``, ``X.quant.bwd`` before ``X.dgrad``) priced by
    ``cast`` (the recipe's kernels), every other op as it was."""
    gemms = {op.name: op for op in ops if isinstance(op, Gemm)}
    out = []
    for op in ops:
        if isinstance(op, MemoryOp) and op.name.endswith(".quant.bwd") and op.name[:-10] + ".dgrad" in gemms:
            op = cast(op, gemms[op.name[:-10] + ".dgrad"], True)
        elif isinstance(op, MemoryOp) and op.name.endswith(".quant") and op.name[:-6] in gemms:
            op = cast(op, gemms[op.name[:-6]], False)
        out.append(op)
    return tuple(out)


def with_torchao_mx_casts(graph: ModelGraph) -> ModelGraph:
    """``graph`` (unfused) with torchao's MXFP8 casts: per GEMM, eager kernels (``mx_mm``), never fused."""
    return map_passes(graph, lambda p: PassOps(_rewritten(p.ops, _cast)))


def _nvfp4_cast(op: MemoryOp, gemm: Gemm, backward: bool) -> MemoryOp:
    b, e = gemm.batch, NVFP4_CAST_BYTES_PER_ELEMENT
    if backward:  # X.dgrad: m = tokens, k = the layer's n: the output gradient, cast once for both GEMMs
        return MemoryOp(op.name, e * b * gemm.m * gemm.k, NVFP4_BACKWARD_KERNELS, eager=True)
    tokens, n, k = gemm.m, gemm.n, gemm.k
    return MemoryOp(op.name, e * b * (tokens * k + k * n), NVFP4_FORWARD_KERNELS, eager=True,
                    weight_bytes=e * b * k * n)


def with_torchao_nvfp4_casts(graph: ModelGraph) -> ModelGraph:
    """``graph`` (unfused) with torchao's NVFP4 casts: per linear, eager Triton kernels (``nvfp4_mm_triton``)."""
    return map_passes(graph, lambda p: PassOps(_rewritten(p.ops, _nvfp4_cast)))
