"""Megatron-LM's model-FLOP count (``num_floating_point_operations`` in megatron/training/training.py,
``transformer_flops``): the count behind the TFLOP/s per GPU that Megatron-Core runs report, so measured
throughputs convert to step times. Dense and MoE MLPs (SwiGLU x3/2), MHA/GQA or MLA attention with the
causal half of the score and context GEMMs, MTP modules, logits over the padded vocabulary; 3x for forward,
dgrad and wgrad. Router GEMMs and norms are not counted (as Megatron does not)."""
from __future__ import annotations

from vtrain.workload.model import ModelSpec


def megatron_flops_per_iteration(model: ModelSpec, batch: int, seq_len: int, tp: int = 1) -> float:
    m, s, h = model, seq_len, model.hidden_size
    n_moe = m.num_moe_layers
    n_dense = m.num_layers - n_moe
    last_moe = int(m.mtp_is_moe)
    n_moe += last_moe * m.mtp_layers
    n_dense += (1 - last_moe) * m.mtp_layers
    layers = m.num_layers + m.mtp_layers
    ffn_x = 3 if m.gated_mlp else 2
    mlp = 6 * h * (m.ffn_hidden_size * ffn_x * n_dense
                   + (m.expert_ffn * m.moe_top_k * ffn_x + m.shared_ffn * ffn_x) * n_moe)
    if m.is_mla:
        n = m.num_heads
        qk = m.qk_head_dim + m.qk_rope_head_dim
        q = m.q_lora_rank * (h + n * qk + 1) if m.q_lora_rank else h * n * qk
        attn = 6 * (q + m.kv_lora_rank * (h + n * (m.qk_head_dim + m.v_head_dim) + 1) + h * m.qk_rope_head_dim
                    + n * m.v_head_dim * h + s * n * qk / 2 + s * n * m.v_head_dim / 2)
    else:
        qs, kv = m.q_size, m.kv_size
        attn = 6 * (h * (qs + 2 * kv) + qs * s / 2 * 2 + qs * h)
    mtp = 6 * m.mtp_layers * (3 * h + 2 * h * h)
    vocab = m.vocab_shard(tp) * tp
    logits = 6 * h * vocab * (m.mtp_layers + 1)
    return float(batch * s * (mlp + attn * layers + mtp + logits))
