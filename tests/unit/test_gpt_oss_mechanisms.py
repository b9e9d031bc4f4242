"""gpt-oss's mechanisms as Megatron-Core runs them: alternating sliding-window attention (window_size (128, 0),
window_attn_skip_freq 2), the experts' fc2 bias applied eagerly per expert (TEGroupedMLP._apply_bias), and the
fused-attention rate at a head dimension other than the anchor's 128 (exponentials against matmuls)."""
import pytest

from vtrain.comm.tp import tp_comms
from vtrain.config.build import model_spec
from vtrain.config.compose import compose
from vtrain.cost.analytical import flash_head_dim_factor
from vtrain.graph.builder import build_model_graph
from vtrain.graph.cuda_graphs import captured_ops
from vtrain.graph.expert_bias import expert_bias_ops
from vtrain.graph.ops import FlashAttention, windowed_keys
from vtrain.graph.window import full_share, split_windowed
from vtrain.workload.plan import ParallelPlan


def spec(name):
    return model_spec(compose([f"+model={name}", "+cluster=a100x1024"]).model)


def test_gpt_oss_config_states_the_window_pattern_and_sinks():
    m = spec("gpt_oss_120b")
    assert (m.sliding_window, m.full_attention_every, m.attention_sinks) == (128, 2, True)
    assert full_share(m) == 0.5
    assert full_share(spec("qwen3_30b_a3b")) == 1.0


def test_windowed_keys_mean_over_a_causal_band():
    # query i sees min(i, 128) keys before it and itself: over 4,096 queries the mean is 129 - 128 x 129 / 8192
    assert windowed_keys(128, 4096) == pytest.approx(129 - 128 * 129 / 8192)
    assert windowed_keys(128, 4096) == pytest.approx(sum(min(i, 128) + 1 for i in range(4096)) / 4096, abs=0.02)
    assert windowed_keys(4096, 100) == pytest.approx(50.5)  # a window longer than the sequence: plain causal


def test_a_windowed_kernel_runs_the_band_only():
    full = FlashAttention("flash_attn", 64, 4096, 64)
    band = FlashAttention("flash_attn.window", 64, 4096, 64, window=128)
    assert full.flops == pytest.approx(4.0 * 64 * 4096 * 4096 * 64 * 0.5)
    assert band.flops == pytest.approx(full.flops * windowed_keys(128, 4096) / 2048)
    assert band.mean_call_keys == pytest.approx(windowed_keys(128, 4096))
    assert band.bytes == full.bytes  # Q, K, V and O are read and written once either way


def _graph(m, micro_batch):
    plan = ParallelPlan(dp=1, micro_batch_size=micro_batch, global_batch_size=micro_batch, seq_len=4096)
    return build_model_graph(m, plan, tp_comms(1, False, micro_batch * 4096, m.hidden_size, 2))


def _moe_attention(name, micro_batch=4):
    m = spec(name)
    g = _graph(m, micro_batch)
    return m, [op for op in g.moe_layer.forward.ops if isinstance(op, FlashAttention)]


def test_gpt_oss_layer_attention_is_half_full_half_windowed():
    m, ops = _moe_attention("gpt_oss_120b")
    assert [(op.name, op.batch_heads, op.window) for op in ops] == [("flash_attn", 128, 0),
                                                                  ("flash_attn.window", 128, 128)]
    _, plain = _moe_attention("qwen3_30b_a3b")
    assert [(op.name, op.batch_heads, op.window) for op in plain] == [("flash_attn", 4 * 32, 0)]


def test_split_keeps_every_head():
    m = spec("gpt_oss_120b")
    odd = FlashAttention("flash_attn", 5, 4096, 64)
    assert sum(op.batch_heads for op in split_windowed(m, odd)) == 5


@pytest.mark.parametrize("heads,split", [(1, [(1, 0)]), (2, [(1, 0), (1, 128)]), (3, [(2, 0), (1, 128)])])
def test_the_fewest_heads_split_one_full_one_windowed(heads, split):
    """Half of gpt-oss's layers are windowed: a call over two heads (b·a/tp at tp 32) is one full head and one
    windowed (at least one each); a single head cannot split and runs whole (rounding 1.5 to even: 2 full)."""
    op = FlashAttention("flash_attn", heads, 4096, 64)
    assert [(x.batch_heads, x.window) for x in split_windowed(spec("gpt_oss_120b"), op)] == split


def test_expert_bias_bytes_and_kernels_follow_te_grouped_mlp():
    """12 bytes per fc2-output element forward (b * p, t + b * p, cat), 16 backward, in bf16; 2 kernels per
    local expert and the cat forward, 4 per expert and the split's cat backward."""
    m = spec("gpt_oss_120b")
    (fwd,), (bwd,) = expert_bias_ops(m, rows_per_expert=32768, local_experts=2, dtype_bytes=2)
    elems = 32768 * 2 * 2880
    assert (fwd.bytes, fwd.kernels, fwd.eager) == (12.0 * elems, 5, True)
    assert (bwd.bytes, bwd.kernels, bwd.eager) == (16.0 * elems, 9, True)
    assert expert_bias_ops(spec("qwen3_30b_a3b"), 32768, 2, 2) == ((), ())  # no biases: none


def test_the_moe_layer_adds_the_bias_after_fc2():
    g = _graph(spec("gpt_oss_120b"), 1)
    names = [op.name for op in g.moe_layer.forward.ops]
    assert names.index("moe.expert.bias") == names.index("moe.expert.fc2") + 1
    back = [op.name for op in g.moe_layer.backward.ops]
    assert back.index("moe.expert.bias.bwd") == back.index("moe.expert.fc2.dgrad") - 1


@pytest.mark.parametrize("gpu_exp_head_dim,head_dim,backward,factor", [
    (128, 64, False, (64 / 192) * (256 / 128)),  # B200 / GB200: 8,192 FLOP/clk/SM, 16 exp2/clk/SM -> 2/3
    (128, 64, True, (64 / 115.2) * (179.2 / 128)),  # backward: exponentials weigh 1/2.5 -> 7/9
    (64, 64, False, 0.75),  # H100, B300 / GB300 (doubled exp rate)
    (32, 64, False, (64 / 96) * (160 / 128)),  # A100
    (128, 160, False, (160 / 288) * 2.0),  # MLA's (192 + 128) / 2 runs faster than the anchor
    (128, 128, False, 1.0),  # the anchor's own head dimension
    (None, 64, False, 1.0),  # a GPU without the constant: one rate
])
def test_head_dim_factor(gpu_exp_head_dim, head_dim, backward, factor):
    assert flash_head_dim_factor(head_dim, gpu_exp_head_dim, backward) == pytest.approx(factor)


def test_the_windowed_call_is_part_of_the_attention_cuda_graph():
    """Megatron-Bridge's GB300 / B300 presets capture ``attn`` with TE CUDA graphs: both calls replay from it."""
    captured = captured_ops(["attn"], "moe")
    assert captured is not None
    _, ops = _moe_attention("gpt_oss_120b")
    assert all(captured(op) for op in ops)
