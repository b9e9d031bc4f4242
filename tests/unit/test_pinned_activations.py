"""Activation bytes per layer pinned against hand counts, per recompute mode, for GPT and for SwiGLU/GQA.

Independent source: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
Sec. 4.1, which lists every tensor a GPT layer saves for backward (sbh(34 + 5as/h) in 16-bit with 1-byte
dropout masks), extended here the way Megatron-Core's TransformerLayer with Transformer Engine saves them for
a Llama layer (megatron/core/transformer/{attention,mlp}.py; TE's LayerNormLinear and Linear save their
inputs, flash attention its q, k, v, output and fp32 log-sum-exp):
  - input_layernorm input and the QKV GEMM input (norm output): h each, split over TP only with SP;
  - q (a*d), k and v (g*d each: GQA), the core attention output = the projection input (a*d);
  - pre_mlp_layernorm input and the FC1 input: h each (SP-split);
  - FC1 output: gate AND up (2f; SwiGLU's backward needs both, megatron/core/fusions/fused_bias_swiglu.py),
    or f for GELU; the FC2 input (f);
  - dropout masks (1 B per element) after attention and MLP, only with dropout > 0;
  - unfused attention: softmax output (2 B), its dropout mask (1 B) and dropout output (2 B) per score.
Selective recompute (core_attn) drops the score tensors; full recompute keeps only the layer input.
"""
from dataclasses import replace

import pytest

from vtrain.sim.memory import layer_activation_bytes
from vtrain.workload.enums import NormType, PositionEmbedding, Recompute
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan

LLAMA3_70B = ModelSpec(name="llama3_70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
                       ffn_hidden_size=28672, gated_mlp=True, norm=NormType.RMSNORM,
                       position_embedding=PositionEmbedding.ROPE, use_bias=False, dropout=0.0, vocab_size=128256,
                       tied_embeddings=False, max_seq_len=8192)
LLAMA3_8B = replace(LLAMA3_70B, name="llama3_8b", num_layers=32, hidden_size=4096, num_heads=32,
                    ffn_hidden_size=14336)
GPT3 = ModelSpec(name="gpt175b", num_layers=96, hidden_size=12288, num_heads=96, num_kv_heads=96,
                 ffn_hidden_size=4 * 12288, vocab_size=50257)


def plan(**kw):
    return replace(ParallelPlan(tp=8, pp=1, dp=1, micro_batch_size=1, global_batch_size=8, seq_len=8192), **kw)


def hand_count(m, s, b, t, sp, flash, recompute, cp=1):
    """Bytes one layer saves, per the tensor list in the module docstring (bf16, 1-byte masks)."""
    s = s // cp
    h, a, d, g, f = m.hidden_size, m.num_heads, m.hidden_size // m.num_heads, m.num_kv_heads, m.ffn_hidden_size
    rep = t if sp else 1  # the TP split of the replicated (SP-split) tensors
    if recompute == Recompute.FULL:
        return 2 * s * b * h / rep
    mask = 1 if m.dropout > 0 else 0
    norms_and_linear_inputs = 4 * 2 * s * b * h / rep  # ln1 in, QKV in, ln2 in, FC1 in
    masks = 2 * mask * s * b * h / rep  # attention and MLP dropout
    qkv = 2 * s * b * (a * d + 2 * g * d) / t
    proj_in = 2 * s * b * a * d / t
    fc1_out = 2 * s * b * (2 * f if m.gated_mlp else f) / t  # SwiGLU: gate and up
    fc2_in = 2 * s * b * f / t
    if flash:
        scores = 4 * a * s * b / t  # fp32 log-sum-exp per head and token
    elif recompute == Recompute.SELECTIVE:
        scores = 0
    else:
        scores = a * s * s * b * (2 + mask + (2 if mask else 0)) / t
    return norms_and_linear_inputs + masks + qkv + proj_in + fc1_out + fc2_in + scores


CASES = [(t, sp, flash) for t in (1, 8) for sp in (False, True) for flash in (False, True) if not (sp and t == 1)]


@pytest.mark.parametrize("recompute", [Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL])
@pytest.mark.parametrize("t,sp,flash", CASES)
@pytest.mark.parametrize("model", [LLAMA3_70B, LLAMA3_8B, GPT3], ids=lambda m: m.name)
def test_layer_activation_bytes_match_the_hand_count(model, t, sp, flash, recompute):
    p = plan(tp=t, sequence_parallel=sp, flash_attention=flash, recompute=recompute, seq_len=4096)
    assert layer_activation_bytes(model, p) == pytest.approx(hand_count(model, 4096, 1, t, sp, flash, recompute))


def test_gpt_reduces_to_korthikanti_table_2():
    """GPT-3 shape (dropout 0.1, no flash): 34 sbh + 5 a s^2 b with SP, 34 sbh with selective, 2 sbh full."""
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    none = layer_activation_bytes(GPT3, plan(tp=t, sequence_parallel=True, flash_attention=False, seq_len=s))
    sel = layer_activation_bytes(GPT3, plan(tp=t, sequence_parallel=True, flash_attention=False, seq_len=s,
                                            recompute=Recompute.SELECTIVE))
    full = layer_activation_bytes(GPT3, plan(tp=t, sequence_parallel=True, flash_attention=False, seq_len=s,
                                             recompute=Recompute.FULL))
    assert none == s * b * h * (34 + 5 * a * s / h) / t
    assert sel == 34 * s * b * h / t
    assert full == 2 * s * b * h / t


def test_llama3_70b_layer_in_bytes():
    """Llama 3 70B, s=8192, b=1, TP8 + SP, flash, bf16: the values written out (MiB, exact)."""
    p = plan(tp=8, sequence_parallel=True, flash_attention=True, seq_len=8192)
    sbh = 8192 * 8192
    # 8 sbh (4 SP tensors) + 2 sb(8192 + 2*1024) q,k,v + 2 sbh proj + 2 sb*2*28672 gate/up + 2 sb*28672 fc2 in
    expected = (8 * sbh + 2 * 8192 * 10240 + 2 * sbh + 4 * 8192 * 28672 + 2 * 8192 * 28672) / 8 + 4 * 64 * 8192 / 8
    assert expected == 281_280_512  # 268.25 MiB
    assert layer_activation_bytes(LLAMA3_70B, p) == expected
    assert layer_activation_bytes(LLAMA3_70B, replace(p, recompute=Recompute.FULL)) == 2 * sbh / 8


def test_swiglu_saves_both_fc1_outputs():
    """SwiGLU's backward reads the gate and the up projection: 2 f per token, not f. Dropping the second is
    58,720,256 of a Llama 3 70B layer's 281,280,512 bytes (TP8 + SP, s=8192): 20.9%."""
    p = plan(tp=8, sequence_parallel=True, flash_attention=True, seq_len=8192)
    gated = layer_activation_bytes(LLAMA3_70B, p)
    gelu = layer_activation_bytes(replace(LLAMA3_70B, gated_mlp=False), p)
    assert gated - gelu == 2 * 8192 * 28672 / 8  # the second FC1 output, bf16
    assert (gated - gelu) / gated == pytest.approx(58_720_256 / 281_280_512)


def test_gqa_saves_fewer_key_value_bytes():
    p = plan(tp=8, sequence_parallel=True, flash_attention=True, seq_len=8192)
    mha = layer_activation_bytes(replace(LLAMA3_70B, num_kv_heads=64), p)
    assert mha - layer_activation_bytes(LLAMA3_70B, p) == 2 * 8192 * 2 * (64 - 8) * 128 / 8


@pytest.mark.parametrize("cp", [2, 4])
def test_context_parallel_splits_every_tensor(cp):
    p = plan(tp=8, sequence_parallel=True, flash_attention=True, seq_len=8192, cp=cp)
    assert layer_activation_bytes(LLAMA3_70B, p) == pytest.approx(
        hand_count(LLAMA3_70B, 8192, 1, 8, True, True, Recompute.NONE, cp=cp))
