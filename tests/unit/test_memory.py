"""The activation memory model reproduces Korthikanti et al. 2022 (Sec. 4, Table 2)."""
from dataclasses import replace

import pytest

from vtrain.sim.memory import inflight_layers, layer_activation_bytes, sharded_working_bytes, state_bytes_per_param
from vtrain.workload.enums import NormType, PositionEmbedding, Recompute
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan

GPT = ModelSpec(name="gpt", num_layers=96, hidden_size=12288, num_heads=96, num_kv_heads=96,
                ffn_hidden_size=4 * 12288, gated_mlp=False, norm=NormType.LAYERNORM,
                position_embedding=PositionEmbedding.LEARNED, use_bias=True, dropout=0.1, vocab_size=51200,
                tied_embeddings=True, max_seq_len=2048)


def plan(**kw):
    base = ParallelPlan(tp=8, pp=8, dp=1, micro_batch_size=1, global_batch_size=64, seq_len=2048,
                        flash_attention=False)
    return replace(base, **kw)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_no_recompute_tensor_parallel(t):
    s, b, h, a = 2048, 1, 12288, 96
    expected = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    assert layer_activation_bytes(GPT, plan(tp=t)) == pytest.approx(expected)


def test_sequence_parallel():
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    expected = s * b * h / t * (34 + 5 * a * s / h)
    assert layer_activation_bytes(GPT, plan(sequence_parallel=True)) == pytest.approx(expected)


def test_selective_recompute_drops_attention_term():
    s, b, h, t = 2048, 1, 12288, 8
    assert layer_activation_bytes(GPT, plan(sequence_parallel=True, recompute=Recompute.SELECTIVE)) == \
        pytest.approx(34 * s * b * h / t)
    assert layer_activation_bytes(GPT, plan(recompute=Recompute.SELECTIVE)) == \
        pytest.approx(s * b * h * (10 + 24 / t))


def test_full_recompute_keeps_layer_input():
    assert layer_activation_bytes(GPT, plan(recompute=Recompute.FULL)) == 2 * 2048 * 12288


def test_1f1b_inflight_microbatches():
    p = plan(pp=8, global_batch_size=64)
    assert [inflight_layers(p, s, 1) for s in range(8)] == [8, 7, 6, 5, 4, 3, 2, 1]


def test_distributed_optimizer_shards_states():
    w, g, o = state_bytes_per_param(plan(dp=8, distributed_optimizer=True))
    assert (w, o) == (2.0, 12.0 / 8)


def test_zero3_working_set_keeps_the_stages_gradients_when_their_sync_is_deferred():
    """ZeRO-3 holds the unsharded gradients of the two layers in flight, or, when a pipeline on FSDP2 defers
    the gradient sync to the stage's last backward, of all its layers, accumulated in fp32 (hand-computed)."""
    p = plan(dp=8, zero_stage=3, reshard_after_forward=False)
    layer = 1.0e9
    assert sharded_working_bytes(layer, 12, p) == (12 * layer * 2, 2 * layer * 4)
    assert sharded_working_bytes(layer, 12, p, deferred=True) == (12 * layer * 2, 12 * layer * 4)
    assert sharded_working_bytes(layer, 12, replace(p, zero_stage=1), deferred=True) == (0.0, 0.0)


def test_fsdp2_keeps_no_bf16_shard_beside_its_fp32_masters():
    """ZeRO-3 as DeepSpeed/Megatron-FSDP hold it: a bf16 shard (2/n), fp32 gradients (4/n), fp32 master + m + v
    (12/n); FSDP2's sharded parameters are the fp32 masters, so the bf16 shard is not there."""
    p = plan(dp=8, zero_stage=3)
    assert state_bytes_per_param(p) == pytest.approx((2 / 8, 4 / 8, 12 / 8))
    assert state_bytes_per_param(p, masters_sharded=True) == pytest.approx((0.0, 4 / 8, 12 / 8))
    assert state_bytes_per_param(replace(p, zero_stage=1), masters_sharded=True) == pytest.approx((2.0, 4.0, 12 / 8))


def test_layernorm_recompute_saves_the_norm_outputs_of_this_cp_rank():
    """The saving is the two norm outputs of the rank's s/cp tokens (it was the whole sequence's, so at cp=4
    an MoE layer's activations came out negative)."""
    from dataclasses import replace

    from vtrain import compose
    from vtrain.api import simulate
    from vtrain.config.build import build_workload
    from vtrain.sim.memory_moe import layernorm_recompute_saving_bytes

    over = ["+model=gpt_oss_120b", "+cluster=h200x1024", "parallelism.cp=4",
            "parallelism.recompute_modules='layernorm,moe_act,moe'"]
    w = build_workload(compose(over))
    one = layernorm_recompute_saving_bytes(w.model, replace(w.plan, cp=1))
    assert layernorm_recompute_saving_bytes(w.model, w.plan) == one / 4
    assert simulate(compose(over)).memory.activations_bytes > 0


def test_fp8_weight_cache_and_fp8_parameters():
    """Transformer Engine keeps an FP8 weight and its transpose beside each bf16 weight (2 B per parameter; 1 B
    with NVFP4); with FP8 parameters (fp8_param_gather) the FP8 weight and its transpose are the weight, so
    nothing is held beside it; ZeRO-3 and bf16 runs hold no cache."""
    from vtrain.sim.memory import fp8_weight_cache_bytes_per_param
    from vtrain.workload.enums import Precision
    from vtrain.workload.stack import StackSpec

    te = StackSpec(name="te", fp8_weight_cache=True)
    te_fp8_params = StackSpec(name="te8", fp8_weight_cache=True, fp8_params=True)
    fp8 = plan(precision=Precision.FP8)
    assert fp8_weight_cache_bytes_per_param(fp8, te) == 2.0
    assert fp8_weight_cache_bytes_per_param(plan(precision=Precision.NVFP4), te) == 1.0
    assert fp8_weight_cache_bytes_per_param(fp8, te_fp8_params) == 0.0
    assert fp8_weight_cache_bytes_per_param(plan(precision=Precision.MXFP8), te_fp8_params) == 0.0
    assert fp8_weight_cache_bytes_per_param(plan(precision=Precision.NVFP4), te_fp8_params) == 1.0  # no FP4 params
    assert fp8_weight_cache_bytes_per_param(plan(), te) == 0.0
    assert fp8_weight_cache_bytes_per_param(replace(fp8, dp=8, zero_stage=3), te) == 0.0
    assert fp8_weight_cache_bytes_per_param(fp8, StackSpec(name="torchao")) == 0.0  # torchao casts per forward


def test_fp8_parameters_let_llama3_8b_fp8_fit_where_it_runs():
    """Llama 3 8B, FP8, TP1 CP2 on 8 H100 (Megatron-Core): 8.03 B parameters in bf16 or FP8-with-transpose
    (2 B each, 15 GiB), fp32 main gradients (30 GiB), fp32 master + Adam sharded over 8 (11 GiB): with bf16
    weights and TE's FP8 copies (2 B more per layer parameter, +13 GiB) the plan would not fit in 80 GiB."""
    from vtrain import compose
    from vtrain.api import simulate

    over = ["+model=llama3_8b", "+cluster=h100x1024", "training.precision=fp8", "training.global_batch_size=128",
            "training.seq_len=8192", "parallelism.tp=1", "parallelism.pp=1", "parallelism.cp=2", "parallelism.dp=4",
            "parallelism.recompute=none", "parallelism.sequence_parallel=false"]
    with_params, without = simulate(compose(over)), simulate(compose([*over, "stack.fp8_params=false"]))
    gib = 1024 ** 3
    assert with_params.fits and not without.fits
    assert with_params.memory.weights_bytes / gib == pytest.approx(8.03e9 * 2 / gib, rel=0.01)
    layer_params = 32 * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336)
    extra = without.memory.weights_bytes - with_params.memory.weights_bytes
    assert extra == pytest.approx(2 * layer_params, rel=0.01)


def test_bf16_gradients_halve_the_gradient_buffer_and_its_reduction():
    """fp32_grads=false (NeMo's performance recipes: grad_reduce_in_fp32=False) keeps gradients in bf16: 2 B
    per parameter in memory and in the DP reduction; fp16 is 2 B either way, fp32 training 4 B."""
    from vtrain.workload.enums import Precision

    bf16 = plan(precision=Precision.BF16)
    assert bf16.grad_bytes == 4.0 and state_bytes_per_param(bf16)[1] == 4.0
    assert replace(bf16, fp32_grads=False).grad_bytes == 2.0
    assert state_bytes_per_param(replace(bf16, fp32_grads=False))[1] == 2.0
    assert plan(precision=Precision.FP16).grad_bytes == 2.0
    assert replace(plan(precision=Precision.FP32), fp32_grads=False).grad_bytes == 4.0


def test_nvidia_recipe_rows_reduce_bf16_gradients_and_megatron_lm_rows_fp32():
    from vtrain.validation.datasets import shipped_defaults
    from vtrain.validation.rows import MEGATRON_CORE_DEFAULTS

    assert MEGATRON_CORE_DEFAULTS.plan["fp32_grads"] is False
    assert shipped_defaults("megatron_moe_qwen3_blackwell").plan["fp32_grads"] is True


def test_a_compiled_block_does_not_keep_the_down_projection_output_per_op_sac_names():
    """torchtitan's per-op SAC saves wq, wv, w1 and w2's outputs; w2's is read by no backward, so a compiled block
    (AOTAutograd saves what the backward reads) holds h fewer elements per token than eager checkpointing."""
    from vtrain import compose
    from vtrain.config.build import build_workload

    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
                                "parallelism.dp=8", "training.global_batch_size=16", "parallelism.micro_batch_size=2",
                                "training.seq_len=8192", "parallelism.recompute=selective_op"]))
    eager = layer_activation_bytes(w.model, w.plan)
    compiled = layer_activation_bytes(w.model, w.plan, keeps_unread=False)
    assert eager - compiled == 2 * 8192 * 4096 * 2  # b * s * h * 2 B
    # other recompute modes are unaffected
    full = replace(w.plan, recompute=Recompute.FULL)
    assert layer_activation_bytes(w.model, full) == layer_activation_bytes(w.model, full, keeps_unread=False)


def test_moe_stages_hold_the_dispatch_buffers_beside_their_other_bytes():
    """memory_moe.moe_memory: a stage with MoE layers adds the all-to-all's dispatch and combine buffers (2 x the
    busiest rank's rows x its local experts x h, at the activation dtype) to its other bytes."""
    from vtrain import compose
    from vtrain.config.build import build_workload
    from vtrain.graph.moe import expert_rows
    from vtrain.sim.memory_moe import dispatch_buffer_bytes, moe_memory
    from vtrain.workload.partition import partition

    w = build_workload(compose(["+model=mixtral_8x7b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=4",
                                "parallelism.dp=8", "parallelism.ep=8", "parallelism.sequence_parallel=false",
                                "training.global_batch_size=512", "training.seq_len=4096"]))
    m, p = w.model, w.plan
    buffers = 2.0 * expert_rows(m, p) * (8 // 8) * 4096 * 2  # 8 experts over ep 8: one local expert, h 4096, bf16
    assert dispatch_buffer_bytes(m, p) == buffers > 0
    apply = moe_memory(m, p, partition(m, p))
    for s in range(4):
        assert apply(s, (0.0, 0.0, 0.0, 0.0, 5e8))[4] == 5e8 + buffers
