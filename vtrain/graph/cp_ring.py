"""The element-wise work of PyTorch's ring attention around its attention kernels (context parallelism).

``torch.distributed.tensor.experimental._attention`` runs one attention kernel per ring step and merges the
steps in eager kernels (``_templated_ring_attention``, ``_SDPAMerger``, ``_templated_ring_attention_backward``;
``_cp_options.convert_to_f32``: the running values in fp32). Per micro-batch and layer, with n = cp steps, q
the local query elements, o the output's, kv the local K and V elements together, d the activation dtype's
bytes and a the accumulator's (4 in fp32, else d):

- forward: before each exchange but the last, ``torch.cat`` of K and V (read + write: 2·kv·d); each step's
  output converted to the accumulator ((d + a)·o, none when a = d) and merged into the running output by its
  log-sum-exp (``out - sigmoid(block_lse - lse) * (out - block_out)``: three passes over o, 8·a·o); the merged
  output converted back once;
- backward: three ``zeros_like`` accumulators (a·(q + kv)); the same K/V ``cat`` per exchange; each step's K/V
  gradient added into the accumulator passed around the ring ((2a + d)·kv; a later step on the last rank
  updates the first half and ``torch.cat``s the halves back: (2a + d)/2·kv + 2a·kv), the accumulator
  ``cat``-ed for its exchange (2a·kv), the query gradient added ((2a + d)·q); both converted back once.

The costliest rank is priced, the last: with causal load balancing every later step there attends with its whole
local query (the merges are full-size) and updates the first half of the K/V gradients. Query-side log-sum-exp
tensors (1/head_dim of o) are left out. Megatron-Core with Transformer Engine fuses the correction into its
attention path and has none of this (``StackSpec.cp_ring_merge``: false).
"""
from __future__ import annotations

from typing import Tuple

from vtrain.graph.ops import MemoryOp

RING_PREFIX = "flash_attn.ring"  # the merges belong to the attention op (torchtitan's per-op SAC saves its output)


def ring_merge_ops(steps: int, q_elems: float, out_elems: float, kv_elems: float, dtype_bytes: float,
                   accumulate_fp32: bool) -> Tuple[MemoryOp, MemoryOp]:
    """(forward, backward) element-wise work of a ring of ``steps`` attention kernels (module docstring)."""
    n, q, o, kv, d = steps, q_elems, out_elems, kv_elems, dtype_bytes
    a = 4.0 if accumulate_fp32 else d
    convert = (d + a) if a != d else 0.0  # one read in d and one write in a (or back)
    casts = 2 if a != d else 0  # the output and its log-sum-exp (or the query and the K/V gradients)
    fwd_bytes = (n - 1) * 2 * kv * d + n * convert * o + (n - 1) * 8 * a * o + convert * o
    fwd_kernels = (n - 1) + n * casts + (n - 1) * 8 + casts
    bwd_bytes = (a * (q + kv) + (n - 1) * 2 * kv * d + (2 * a + d) * kv
                 + (n - 1) * ((2 * a + d) / 2 + 2 * a) * kv + n * 2 * a * kv + n * (2 * a + d) * q
                 + convert * (q + kv))
    bwd_kernels = 3 + (n - 1) + 2 + (n - 1) * 4 + 2 * n + casts
    return (MemoryOp(f"{RING_PREFIX}_merge", fwd_bytes, fwd_kernels, eager=True),
            MemoryOp(f"{RING_PREFIX}_merge.bwd", bwd_bytes, bwd_kernels, eager=True))
