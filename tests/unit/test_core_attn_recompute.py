"""Selective recompute of the attention core under fused attention (graph.builder, graph.mla) and MLA's
context-parallel split (comm.cp.kv_features), hand-computed."""
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.comm.cp import cp_comms
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.collectives import kv_features
from vtrain.graph.ops import Collective, FlashAttention
from vtrain.graph.options import GraphOptions
from vtrain.workload.partition import partition

LLAMA = ["+model=llama3_70b", "+cluster=h100x1024", "parallelism.tp=8", "parallelism.pp=4", "parallelism.dp=16",
         "parallelism.cp=2", "training.seq_len=16384", "training.global_batch_size=256",
         "parallelism.recompute=selective"]
DEEPSEEK = ["+model=deepseek_v3", "+cluster=h800x2048", "parallelism.tp=1", "parallelism.pp=16",
            "parallelism.dp=64", "parallelism.cp=2", "parallelism.ep=64", "training.seq_len=4096",
            "training.global_batch_size=4096", "parallelism.recompute=selective",
            "parallelism.recompute_modules=core_attn"]


def layers(overrides, rerun):
    w = build_workload(compose(overrides))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    g = build_model_graph(w.model, w.plan, comm.tp, comm.cp, opts=GraphOptions(rerun_fused_attention=rerun))
    return w, g


def test_megatron_core_reruns_the_fused_core_and_its_kv_exchange():
    """Megatron-Core checkpoints core_attention (TE's fused kernel, CP inside it) under selective recompute."""
    w, g = layers(LLAMA, rerun=True)
    ops = g.layer.recompute.ops
    assert [op.name for op in ops] == ["cp.kv_ring", "flash_attn"]
    fa = ops[1]
    assert isinstance(fa, FlashAttention) and not fa.backward
    assert (fa.seq_len, fa.keys) == (16384 // 2, 16384)  # s/cp local queries attend to all s keys
    assert isinstance(ops[0], Collective) and ops[0].group.value == "cp"


def test_legacy_megatron_leaves_flash_attention_out_of_the_checkpoint():
    _, g = layers(LLAMA, rerun=False)
    assert g.layer.recompute.ops == ()


def test_the_rerun_costs_time_and_counts_as_hardware_flops():
    """The default stack (megatron_core_te) reruns it; the extra FLOPs are the attention core's forward."""
    rerun = simulate(compose(LLAMA))
    legacy = simulate(compose([*LLAMA, "stack=megatron_deepspeed_2022"]))
    none = simulate(compose([*LLAMA, "parallelism.recompute=none"]))
    assert rerun.iteration_time_s > none.iteration_time_s
    assert rerun.hfu > rerun.mfu
    assert none.hfu == pytest.approx(none.mfu)
    assert legacy.hfu == pytest.approx(legacy.mfu)  # its fused core stays out of the recompute


def test_recompute_modules_without_core_attn_count_no_attention_flops():
    r = simulate(compose([*LLAMA, "parallelism.recompute_modules='layernorm,moe_act'"]))
    assert r.hfu == pytest.approx(r.mfu)


def test_mla_kv_features_are_the_up_projected_keys_and_values():
    w = build_workload(compose(DEEPSEEK))
    m = w.model
    assert kv_features(m) == 128 * (128 + 64 + 128)  # DeepSeek-V3: 128 heads, qk 128 + rope 64, v 128
    comms = cp_comms(m, replace(w.plan))
    assert comms.forward[0].bytes == pytest.approx(1 * 4096 * kv_features(m) / 1 * w.plan.dtype_bytes)


def test_mla_splits_the_queries_over_cp_and_exchanges_kv():
    _, g = layers(DEEPSEEK, rerun=True)
    fwd = g.layer.forward.ops
    fa = next(op for op in fwd if isinstance(op, FlashAttention))
    assert (fa.seq_len, fa.keys) == (2048, 4096)
    assert any(isinstance(op, Collective) and op.group.value == "cp" for op in fwd)
    assert [op.name for op in g.layer.recompute.ops] == ["cp.kv_ring", "flash_attn"]


def test_hfu_counts_the_matmuls_of_the_recomputed_modules():
    """Megatron-Core's recompute of mlp / moe / mla_up_proj runs their GEMMs again: HFU counts them (it
    counted the attention core alone); layernorm and moe_act recompute no matmul."""
    from vtrain import compose, simulate

    base = ["+model=deepseek_v3", "model.num_layers=62", "+cluster=h100x1024", "parallelism.tp=1",
            "parallelism.pp=2", "parallelism.dp=8", "parallelism.ep=8", "training.global_batch_size=64",
            "training.seq_len=4096", "parallelism.recompute=selective"]
    none = simulate(compose([*base, "parallelism.recompute_modules='layernorm,moe_act'"]))
    moe = simulate(compose([*base, "parallelism.recompute_modules='layernorm,moe'"]))
    assert none.hfu == pytest.approx(none.mfu)
    from vtrain.config.build import model_spec

    extra = 64 * model_spec(compose(base).model).recomputed_module_flops(4096, ["moe"])
    expected = (moe.model_flops_per_iteration + extra) / moe.model_flops_per_iteration
    assert moe.hfu / moe.mfu == pytest.approx(expected, rel=1e-9) and expected > 1.1


def test_the_unfused_attention_core_gemms_by_hand():
    """Megatron's unfused CoreAttention (flash off): Q·K^T and P·V as batched GEMMs over the b·a/t local heads,
    [s, d] x [d, s] and [s, s] x [s, d]: 4·b·s²·h/t FLOPs forward (Narayanan et al. SC'21, Eq. 3's attention term),
    and the backward's four (dP = dO·V^T, dV = P^T·dO, dQ = dS·K, dK = dS^T·Q) twice that, each over the same heads."""
    from vtrain.graph.ops import Gemm

    w = build_workload(compose(["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=8",
                                "parallelism.dp=16", "training.flash_attention=false", "training.seq_len=2048",
                                "parallelism.micro_batch_size=1", "parallelism.sequence_parallel=false"]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    g = build_model_graph(w.model, w.plan, comm.tp, comm.cp)
    b, s, h, d, heads = 1, 2048, 12288, 128, 96 // 8

    def core(ops):
        return [(op.name, op.m, op.n, op.k, op.batch) for op in ops if isinstance(op, Gemm) and op.attention]

    n = b * heads
    assert core(g.layer.forward.ops) == [("attn.qk", s, s, d, n), ("attn.av", s, d, s, n)]
    assert core(g.layer.backward.ops) == [("attn.av.dgrad_p", s, s, d, n), ("attn.av.dgrad_v", s, d, s, n),
                                          ("attn.qk.dgrad_q", s, d, s, n), ("attn.qk.dgrad_k", s, d, s, n)]
    forward = sum(op.flops for op in g.layer.forward.ops if isinstance(op, Gemm) and op.attention)
    backward = sum(op.flops for op in g.layer.backward.ops if isinstance(op, Gemm) and op.attention)
    assert (forward, backward) == (4 * b * s * s * h / 8, 8 * b * s * s * h / 8)


def test_rope_rotates_the_queries_and_keys_forward_and_back():
    """Megatron-Core applies RoPE to the query and to the key apart (apply_rotary_pos_emb, TE's fused kernel): two
    kernels, each reading and writing its tensor, [tokens, (a + a_kv)·d / t] in bf16; the backward rotates their
    gradients back (the same kernel with the sine negated): the same bytes, in two kernels. Llama 3 8B, tp 1:
    4,096 tokens x (32 + 8) heads x 128."""
    from vtrain.graph.ops import MemoryOp

    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
                                "parallelism.dp=8", "training.seq_len=4096", "parallelism.micro_batch_size=1",
                                "training.global_batch_size=64", "training.precision=bf16"]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    g = build_model_graph(w.model, w.plan, comm.tp, comm.cp)
    rope_bytes = 2.0 * 4096 * (32 + 8) * 128 * 2

    def rope(ops):
        return [(op.name, op.bytes, op.kernels) for op in ops if isinstance(op, MemoryOp) and "rope" in op.name]

    assert rope(g.layer.forward.ops) == [("rope", rope_bytes, 2)]
    assert rope(g.layer.backward.ops) == [("rope.bwd", rope_bytes, 2)]
