"""The eager PyTorch paths Megatron-Core runs for two gpt-oss features, where other models get one fused kernel.

**YaRN RoPE.** Megatron-Bridge keeps RoPE fusion only for ``position_embedding_type="rope"``
(``validate_rope_fusion_compatibility`` switches ``apply_rope_fusion`` off for any other type; Megatron-Core's
own default is off), so a YaRN model's queries and keys go through ``_apply_rotary_pos_emb_bshd``
(megatron/core/models/common/embeddings/rope_utils.py), one call for q and one for k, each over its whole tensor
t of E elements (the cos / sin tables of the frequencies, [s, d] in fp32, are a few small kernels per call):

- forward: ``t * cos`` (read and write E), ``_rotate_half``: ``-x2`` (half of E each way) and ``torch.cat((-x2,
  x1))`` (E each way), ``* sin`` (E each way), the sum (read 2E, write E), ``torch.cat((t, t_pass))`` with an
  empty ``t_pass`` (a copy: E each way): 12 E element moves in 6 kernels, against 2 E in one fused kernel;
- backward (autograd of the same): ``g * sin`` and ``g * cos`` (2 E each), the negation (E), the concatenation
  of the halves' gradients (2 E), their sum (3 E) and the backward of the slice ``t[..., :rot_dim]`` (a zero
  fill and a copy, 3 E): 13 E in 7 kernels.

**The clamped gated activation.** gpt-oss clamps the gated input at 7 (Hugging Face's ``swiglu_limit``).
Megatron-Core's ``weighted_bias_quick_geglu_impl`` (megatron/core/fusions/fused_bias_geglu.py), which
TEGroupedMLP's ``bias_act_func`` calls with ``activation_func_clamp_value``, does that in eager ops before its
fused kernel: ``input.chunk(2, -1)``, ``x_glu.clamp(max=7)`` and ``x_linear.clamp(-7, 7)`` (each half read and
written) and ``torch.cat`` of the two (the whole input read and written): 4 moves of the [rows, 2 ffn] input in
3 kernels. It then makes the linear offset a device tensor, ``torch.tensor(linear_offset, device=...)``: a copy
from pageable host memory, which PyTorch completes with a stream synchronize, so the host waits for the GPU
there, in every forward and every recompute of the activation. Backward: each clamp's gradient is
``where(mask, g, 0)`` with its mask built from the saved input (``clamp_backward``: compare, and for the
two-sided clamp a second compare and a logical and, then ``where``; 8 B per element of the one-sided half, 14 B
of the two-sided one at 2-byte activations), and the chunk's backward concatenates the two halves' gradients
(the input's size read and written): 7.5 moves of the input in 7 kernels.

Both run outside any fused or compiled region (``eager``: the stack's elementwise traffic factor does not
apply). Their bytes are counted from the code, not fitted. Both take PyTorch's non-vectorized element-wise path
(``strided``): YaRN multiplies by cos / sin tables broadcast over batch and heads and negates a ``chunk`` half, the
clamp reads the two ``chunk`` halves of the gated input; such a kernel is latency-bound and moves
``gpu.strided_gb_per_s_per_sm`` per SM (measured on the lent H200 on the same chains:
:mod:`vtrain.calibration.strided_elementwise`).
"""
from __future__ import annotations

from typing import Tuple

from vtrain.graph.ops import MemoryOp
from vtrain.workload.enums import PositionEmbedding
from vtrain.workload.model import ModelSpec

YARN_FORWARD_MOVES = 12.0  # element moves per rotated element (reads + writes), forward
YARN_BACKWARD_MOVES = 13.0
YARN_FORWARD_KERNELS = 6 + 3  # per rotated tensor: the six full-size kernels and the cos / sin tables
YARN_BACKWARD_KERNELS = 7
CLAMP_FORWARD_MOVES = 4.0  # per element of the gated input [rows, 2 ffn]
CLAMP_BACKWARD_MOVES = 7.5
CLAMP_FORWARD_KERNELS = 4  # two clamps, the concatenation, the offset's host-to-device copy
CLAMP_BACKWARD_KERNELS = 7


def yarn_ops(model: ModelSpec, rotated_elems: float, dtype_bytes: float) -> Tuple[Tuple[MemoryOp, ...],
                                                                                 Tuple[MemoryOp, ...]]:
    """(forward, backward) of YaRN's rotation of ``rotated_elems`` query and key elements of this rank on
    Megatron-Core's eager path; none for another position embedding (RoPE's fused kernel: graph.builder)."""
    if model.position_embedding != PositionEmbedding.YARN:
        return (), ()
    return ((MemoryOp("rope.yarn", YARN_FORWARD_MOVES * rotated_elems * dtype_bytes, 2 * YARN_FORWARD_KERNELS,
                      eager=True, strided=True),),
            (MemoryOp("rope.yarn.bwd", YARN_BACKWARD_MOVES * rotated_elems * dtype_bytes,
                      2 * YARN_BACKWARD_KERNELS, eager=True, strided=True),))


def clamp_ops(model: ModelSpec, gated_elems: float, dtype_bytes: float, prefix: str) -> Tuple[
        Tuple[MemoryOp, ...], Tuple[MemoryOp, ...]]:
    """(forward, backward) of the clamp before a gated activation over ``gated_elems`` elements of its
    [rows, 2 ffn] input; none for a model without a clamp or a gated MLP."""
    if not model.activation_clamp or not model.gated_mlp:
        return (), ()
    return ((MemoryOp(f"{prefix}.clamp", CLAMP_FORWARD_MOVES * gated_elems * dtype_bytes, CLAMP_FORWARD_KERNELS,
                      eager=True, host_sync=True, strided=True),),
            (MemoryOp(f"{prefix}.clamp.bwd", CLAMP_BACKWARD_MOVES * gated_elems * dtype_bytes,
                      CLAMP_BACKWARD_KERNELS, eager=True, strided=True),))
