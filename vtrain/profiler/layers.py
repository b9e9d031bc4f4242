"""The transformer's functional building blocks, in plain PyTorch.

Shared by the training model (:mod:`vtrain.profiler.model`) and the op benchmarks
(:mod:`vtrain.profiler.ops`), so an op is profiled with exactly the code that runs in training.
Each function is one op of :mod:`vtrain.graph.builder` (the name is in the docstring).
Layout: activations are [batch, seq, hidden]; heads are [batch, heads, seq, head_dim].
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

EPS = 1e-5


def norm(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], kind: str) -> torch.Tensor:
    """norm1 / norm2 / final_norm: LayerNorm or RMSNorm over the last dimension."""
    if kind == "rmsnorm":
        return F.rms_norm(x, (x.shape[-1],), weight, EPS)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, EPS)


def dropout_add(x: torch.Tensor, residual: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """residual1 / residual2: dropout of the branch output, then the residual add."""
    return residual + F.dropout(x, p, training) if p > 0 else residual + x


def activation(x: torch.Tensor, gated: bool) -> torch.Tensor:
    """gelu (GPT, tanh approximation as Megatron) or swiglu (Llama: fc1 holds gate and up halves)."""
    if gated:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up
    return F.gelu(x, approximate="tanh")


def rope_tables(seq: int, head_dim: int, device: torch.device, dtype: torch.dtype,
                base: float = 10000.0) -> Tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """rope: rotary position embedding of queries and keys (Su et al. 2021)."""
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def split_heads(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, s, _ = qkv.shape
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    return (q.view(b, s, heads, head_dim).transpose(1, 2), k.view(b, s, kv_heads, head_dim).transpose(1, 2),
            v.view(b, s, kv_heads, head_dim).transpose(1, 2))


def merge_heads(ctx: torch.Tensor) -> torch.Tensor:
    b, nh, s, d = ctx.shape
    return ctx.transpose(1, 2).reshape(b, s, nh * d)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: float, training: bool = True
                    ) -> torch.Tensor:
    """flash_attn: torch SDPA (FlashAttention / memory-efficient kernel where available), causal."""
    gqa = k.shape[1] != q.shape[1]
    return F.scaled_dot_product_attention(q, k, v, dropout_p=p if training else 0.0, is_causal=True, enable_gqa=gqa)


def causal_mask(seq: int, device: torch.device) -> torch.Tensor:
    return torch.ones(seq, seq, dtype=torch.bool, device=device).triu(1)


def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """attn.qk: batched Q·K^T scaled by 1/sqrt(d) (baddbmm, as Megatron). q, k: [B·H, s, d]."""
    out = torch.empty(q.shape[0], q.shape[1], k.shape[1], dtype=q.dtype, device=q.device)
    return torch.baddbmm(out, q, k.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(q.shape[-1]))


def masked_softmax(s: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """attn.softmax: causal mask + softmax over the keys."""
    return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)


def _expand_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x if x.shape[1] == heads else x.repeat_interleave(heads // x.shape[1], dim=1)


def unfused_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """attn.qk as the unfused path runs it: flatten heads to [B·H, s, d], scaled Q·K^T."""
    b, nh, s, d = q.shape
    return scores(q.reshape(b * nh, s, d), _expand_kv(k, nh).reshape(b * nh, s, d))


def unfused_context(probs: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """attn.av as the unfused path runs it: probs · V, then merge heads to [b, s, h]."""
    b, _, s, d = v.shape
    ctx = torch.bmm(probs, _expand_kv(v, heads).reshape(b * heads, s, d))
    return merge_heads(ctx.view(b, heads, s, d))


def attention(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int, *, flash: bool, p: float,
              rope_cs: Optional[Tuple[torch.Tensor, torch.Tensor]] = None, mask: Optional[torch.Tensor] = None,
              training: bool = True) -> torch.Tensor:
    """The attention core between the qkv and proj GEMMs: split heads, [rope], attend, merge heads.

    Unfused: attn.qk, attn.softmax, attn.dropout, attn.av (the classic path with s x s scores)."""
    q, k, v = split_heads(qkv, heads, kv_heads, head_dim)
    if rope_cs is not None:
        q, k = rope(q, k, *rope_cs)
    if flash:
        return merge_heads(flash_attention(q, k, v, p, training))
    assert mask is not None
    probs = masked_softmax(unfused_scores(q, k), mask)
    if p > 0:
        probs = F.dropout(probs, p, training)
    return unfused_context(probs, v, heads)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """cross_entropy: in fp32 over the vocabulary (as Megatron), mean over tokens."""
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))
