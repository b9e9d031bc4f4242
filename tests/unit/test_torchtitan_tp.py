"""How torchtitan runs its TP collectives: float8 all-gathers (tensorwise only) and async TP's unfused
backward reduce-scatter of the input gradient, separate q/k/v and gate/up GEMMs (StackSpec.tp_fp8_all_gather,
separate_projections)."""
import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.ops import Collective, CollectiveKind, Gemm
from vtrain.graph.options import graph_options
from vtrain.workload.partition import partition

PLAN = ["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=8", "parallelism.pp=1", "parallelism.dp=8",
        "parallelism.micro_batch_size=2", "training.global_batch_size=16", "training.seq_len=8192",
        "parallelism.recompute=none", "stack=torchtitan_fsdp2_compile"]
FULL = 2 * 8192 * 4096 * 2  # one micro-batch's [tokens, h] activation in bf16


def tp_ops(*extra):
    w = build_workload(compose([*PLAN, *extra]))
    tp = build_comm_plan(w, partition(w.model, w.plan)).tp
    return tp.attention, tp.mlp


@pytest.mark.parametrize("precision,gather", [("fp8", FULL / 2), ("fp8_rowwise", FULL), ("bf16", FULL)])
def test_only_tensorwise_float8_gathers_the_quantized_tensor(precision, gather):
    for block in tp_ops(f"training.precision={precision}"):
        ags = [c for c in block.all() if c.kind == CollectiveKind.ALL_GATHER]
        rss = [c for c in block.all() if c.kind == CollectiveKind.REDUCE_SCATTER]
        assert len(ags) == 2 and all(c.bytes == gather for c in ags)  # forward input, backward output gradient
        assert len(rss) == 2 and all(c.bytes == FULL for c in rss)  # the GEMMs' bf16 outputs


def test_megatron_core_gathers_in_bf16():
    attention, _ = tp_ops("training.precision=fp8", "stack=megatron_core_te")
    assert all(c.bytes == FULL for c in attention.all())


def test_async_tp_leaves_the_input_gradient_reduce_scatter_unfused():
    for block in tp_ops("parallelism.tp_comm_overlap=true"):
        (bwd_rs,) = block.enter_backward
        assert isinstance(bwd_rs, Collective) and bwd_rs.overlap == "" and bwd_rs.chunks == 1
        assert all(c.overlap for c in (*block.enter, *block.exit, *block.exit_backward))
    for block in tp_ops("parallelism.tp_comm_overlap=true", "stack=megatron_core_te"):
        assert all(c.overlap for c in block.all())  # TE's userbuffers pipeline all four


def test_the_unfused_reduce_scatter_costs_time():
    on = [*PLAN, "parallelism.tp_comm_overlap=true"]
    titan = simulate(compose(on)).iteration_time_s
    fused = simulate(compose([*on, "stack.separate_projections=false"])).iteration_time_s
    vanilla = simulate(compose(PLAN)).iteration_time_s
    assert fused < titan < vanilla


def _layer(*extra):
    from vtrain.graph.builder import build_model_graph

    w = build_workload(compose([*PLAN, *extra]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    return w, build_model_graph(w.model, w.plan, comm.tp, comm.cp, opts=graph_options(w.stack)).layer


def test_separate_projections_are_gemms_of_their_own_with_a_summed_input_gradient():
    """torchtitan's wq, wk, wv and w1, w3 (hand-computed shapes, TP 8): each reads the shared input; the
    backward sums their input gradients in one kernel; fp8 quantizes the input once."""
    w, layer = _layer("training.precision=fp8")
    gemms = {op.name: op for op in layer.forward.ops if isinstance(op, Gemm)}
    tokens, h = 2 * 8192, 4096
    assert [(gemms[n].m, gemms[n].n, gemms[n].k) for n in ("wq", "wk", "wv", "w1", "w3")] == \
        [(tokens, 4096 // 8, h), (tokens, 1024 // 8, h), (tokens, 1024 // 8, h), (tokens, 14336 // 8, h),
         (tokens, 14336 // 8, h)]
    assert "qkv" not in gemms and "fc1" not in gemms
    sums = {op.name: op for op in layer.backward.ops if op.name.endswith(".grad_sum")}
    assert sums["qkv.grad_sum"].bytes == 4 * tokens * h * 2 and sums["fc1.grad_sum"].bytes == 3 * tokens * h * 2
    quants = {op.name: op.bytes for op in layer.forward.ops if op.name.endswith(".quant")}
    assert quants["wk.quant"] == 4.0 * h * (1024 // 8)  # the weight alone: the input was cast for wq
    assert quants["wq.quant"] == 4.0 * (tokens * h + h * (4096 // 8))


def test_rowwise_float8_casts_each_operand_for_each_gemm():
    """torchao's rowwise recipe (hand-computed, TP 8): forward casts the input along its rows (3 B) and the weight
    (3 B); backward casts the saved bf16 input along its columns (5 B: column amax, then cast), the weight again
    (3 B) and the output gradient both ways (3 + 5 B); the input is saved in bf16, not float8."""
    from vtrain.sim.memory import saved_linear_input_bytes

    w, layer = _layer("training.precision=fp8_rowwise")
    tokens, h, n = 2 * 8192, 4096, 4096 // 8
    fwd = {op.name: op for op in layer.forward.ops if op.name.endswith(".quant")}
    bwd = {op.name: op for op in layer.backward.ops if op.name.endswith(".quant.bwd")}
    assert fwd["wq.quant"].bytes == 3.0 * (tokens * h + h * n)
    assert bwd["wq.quant.bwd"].bytes == 8.0 * tokens * n + 5.0 * tokens * h + 3.0 * h * n
    assert bwd["wq.quant.bwd"].kernels == 6
    assert bwd["wk.quant.bwd"].bytes == 8.0 * tokens * (1024 // 8) + 3.0 * h * (1024 // 8)  # input cast for wq
    assert saved_linear_input_bytes(w.plan) == 2


def test_torchtitans_selective_op_recompute_reruns_wk_wo_and_w3():
    _, layer = _layer("parallelism.recompute=selective_op")
    assert [op.name for op in layer.recompute.ops if isinstance(op, Gemm)] == ["wk", "proj", "w3"]


def test_async_tp_pipelines_the_gathered_input_with_all_its_projections():
    """The fused all-gather-matmul runs wq, wk and wv per chunk: the projections after the first merge into the
    overlapped op, which carries their FLOPs."""
    from vtrain.api import cost_model_for
    from vtrain.sim.launch import timed_ops

    w, layer = _layer("parallelism.tp_comm_overlap=true")
    comm = build_comm_plan(w, partition(w.model, w.plan))
    ops = layer.forward.ops
    timed = timed_ops(layer.forward, cost_model_for(w), comm, 0.1)
    flops = sum(op.flops for op in ops if isinstance(op, Gemm) or type(op).__name__ == "FlashAttention")
    assert sum(f for _, _, _, f, _ in timed) == pytest.approx(flops)
    assert len(timed) == len(ops) - 4 - 3  # 4 collectives merge into their GEMMs, wk, wv and w3 into wq's, w1's
