"""Sliding-window attention layers alternating with full ones (gpt-oss).

Megatron-Bridge's GPTOSSProvider sets ``window_size=(128, 0)`` and ``window_attn_skip_freq=2``: Megatron-Core's
attention gives every second layer the whole causal sequence and the others a causal band of 128 keys before
each query (TransformerConfig.window_attn_skip_freq; TE DotProductAttention's ``window_size``). With the
learnable softmax sinks of the same provider Transformer Engine runs cuDNN's fused attention
(``NVTE_F16_arbitrary_seqlen``: FlashAttention takes no sinks, cuDNN does from 9.13.1), and its sliding window
skips the key blocks outside the band.

vtrain builds one graph for every MoE layer, so each layer carries the mean of the pattern: its attention kernel
runs as two calls, the full layers' share of the heads over the whole sequence (``flash_attn``) and the windowed
layers' share over the band (``flash_attn.window``, :attr:`vtrain.graph.ops.FlashAttention.window`). FLOPs,
bytes and each call's rate (its mean keys per query: :func:`vtrain.cost.analytical.flash_length_factor`) add up
to the mean of the two kinds of layer; the one extra kernel launch per layer is the approximation's price.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Tuple

from vtrain.graph.ops import FlashAttention
from vtrain.workload.model import ModelSpec


def full_share(model: ModelSpec) -> float:
    """The share of the layers that attend to the whole sequence: 1 without a window, else 1 / n for a full
    layer every n-th (Megatron-Core's window_attn_skip_freq)."""
    return 1.0 if not model.sliding_window else 1.0 / model.full_attention_every


def split_windowed(model: ModelSpec, op: FlashAttention) -> Tuple[FlashAttention, ...]:
    """``op`` as the mean layer runs it: whole (no window, or every layer full), or its heads split into the
    full layers' share and the windowed layers' share (``<name>.window``; rounded to whole heads, at least
    one each)."""
    share = full_share(model)
    if share >= 1.0 or op.batch_heads < 2:
        return (op,)
    full = min(op.batch_heads - 1, max(1, round(op.batch_heads * share)))
    window = replace(op, name=op.name.replace("flash_attn", "flash_attn.window", 1),
                     batch_heads=op.batch_heads - full, window=model.sliding_window)
    return replace(op, batch_heads=full), window
