"""How torchtitan runs its TP collectives: float8 all-gathers (tensorwise only) and async TP's unfused
backward reduce-scatter of the input gradient (StackSpec.tp_fp8_all_gather, tp_overlap_input_grad)."""
import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.ops import Collective, CollectiveKind
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
    fused = simulate(compose([*on, "stack.tp_overlap_input_grad=true"])).iteration_time_s
    vanilla = simulate(compose(PLAN)).iteration_time_s
    assert fused < titan < vanilla
