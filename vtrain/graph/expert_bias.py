"""The routed experts' output bias as Megatron-Core applies it (gpt-oss: biases on every expert linear).

Megatron-Core's TEGroupedMLP (megatron/core/transformer/moe/experts.py) builds linear_fc1 with its bias inside
Transformer Engine's grouped GEMM (``skip_bias_add=False``: the GEMM epilogue, no kernel of its own) and
linear_fc2 with ``skip_bias_add=True``, then adds fc2's bias in ``_apply_bias``: eager PyTorch, one local expert
at a time, ``t + b * p`` over that expert's rows (``p`` the routing probability of each row, already applied to
fc2's input by the weighted activation), then ``torch.cat`` of the pieces and a cast to the activation dtype.
The router's probabilities are in the router's dtype, bf16 here (gpt-oss's provider and Megatron-Bridge's
gpt_oss performance scripts leave ``moe_router_dtype`` unset), so the cast is a no-op and every tensor is 2 bytes
per element of the fc2 output [rows, h]:

- forward, per expert: ``b * p`` (write 2), ``t + (b * p)`` (read 2 + 2, write 2); then the concatenation of
  every expert's piece (read 2, write 2): 12 bytes per element, 2 kernels per local expert and 1;
- backward (autograd of the same ops): the probability's gradient ``(g * b).sum(-1)`` (read 2, write 2, read 2)
  and the bias's ``(g * p).sum(0)`` (the same) per expert, and the split's backward concatenating the pieces of
  the fc2 output's gradient (read 2, write 2): 16 bytes per element, 4 kernels per local expert and 1.

They run eagerly, outside any fused or compiled region (``eager``: the stack's elementwise traffic factor does
not apply), after fc2 and before the combine.
"""
from __future__ import annotations

from typing import Tuple

from vtrain.graph.ops import MemoryOp
from vtrain.workload.model import ModelSpec

FORWARD_BYTES_PER_ELEMENT = 12.0
BACKWARD_BYTES_PER_ELEMENT = 16.0


def expert_bias_ops(model: ModelSpec, rows_per_expert: int, local_experts: int,
                    dtype_bytes: float) -> Tuple[Tuple[MemoryOp, ...], Tuple[MemoryOp, ...]]:
    """(forward, backward) of the fc2 bias of ``local_experts`` experts of ``rows_per_expert`` rows each; none
    for a model without biases. Bytes scale with the activation width (``dtype_bytes`` / 2)."""
    if not model.use_bias or not model.is_moe:
        return (), ()
    elems = float(rows_per_expert * local_experts * model.hidden_size) * dtype_bytes / 2.0
    fwd = MemoryOp("moe.expert.bias", FORWARD_BYTES_PER_ELEMENT * elems, 2 * local_experts + 1, eager=True)
    bwd = MemoryOp("moe.expert.bias.bwd", BACKWARD_BYTES_PER_ELEMENT * elems, 4 * local_experts + 1, eager=True)
    return (fwd,), (bwd,)
