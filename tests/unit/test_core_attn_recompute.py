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
