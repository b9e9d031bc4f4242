"""gpt-oss's eager paths in Megatron-Core (graph.eager_paths): YaRN RoPE through _apply_rotary_pos_emb_bshd (RoPE
fusion off for a non-"rope" position type), the gated input clamped in eager ops before the fused activation with
a blocking host-to-device copy of the linear offset, and the host time of an eager op."""
import pytest

from vtrain.comm.tp import tp_comms
from vtrain.config.build import model_spec
from vtrain.config.compose import compose
from vtrain.graph.builder import build_model_graph
from vtrain.graph.eager_paths import clamp_ops, yarn_ops
from vtrain.graph.ops import MemoryOp
from vtrain.sim.launch import SYNC, _timed_op
from vtrain.workload.enums import PositionEmbedding
from vtrain.workload.plan import ParallelPlan


def spec(name):
    return model_spec(compose([f"+model={name}", "+cluster=a100x1024"]).model)


def _moe(name, micro_batch=4):
    m = spec(name)
    plan = ParallelPlan(dp=1, micro_batch_size=micro_batch, global_batch_size=micro_batch, seq_len=4096)
    return m, build_model_graph(m, plan, tp_comms(1, False, micro_batch * 4096, m.hidden_size, 2)).moe_layer


def test_gpt_oss_states_yarn_and_the_clamp():
    m = spec("gpt_oss_120b")
    assert (m.position_embedding, m.activation_clamp, m.rotary) == (PositionEmbedding.YARN, 7.0, True)
    q = spec("qwen3_30b_a3b")
    assert (q.position_embedding, q.activation_clamp, q.rotary) == (PositionEmbedding.ROPE, 0.0, True)


def test_yarn_moves_12_and_13_elements_per_rotated_element():
    """Forward: t*cos (2), -x2 (1), cat (2), *sin (2), the sum (3), cat with the empty pass-through (2); backward:
    g*sin (2), the negation (1), the halves' cat (2), g*cos (2), the sum (3), the slice's zero fill and copy (3)."""
    m = spec("gpt_oss_120b")
    elems = 16384 * (64 + 8) * 64  # 4 x 4,096 tokens, 64 query and 8 key heads of 64
    (fwd,), (bwd,) = yarn_ops(m, elems, 2)
    assert (fwd.bytes, fwd.kernels, fwd.eager, fwd.strided) == (12 * 2 * elems, 18, True, True)
    assert (bwd.bytes, bwd.kernels, bwd.eager, bwd.strided) == (13 * 2 * elems, 14, True, True)
    assert yarn_ops(spec("qwen3_30b_a3b"), elems, 2) == ((), ())


def test_a_yarn_layer_rotates_on_the_eager_path_and_a_rope_layer_in_one_kernel():
    m, g = _moe("gpt_oss_120b")
    rope = [op for op in g.forward.ops if op.name.startswith("rope")]
    assert [op.name for op in rope] == ["rope.yarn"]
    assert rope[0].bytes == 12 * 2 * 16384 * (m.q_size + m.kv_size)
    assert [op.name for op in g.backward.ops if op.name.startswith("rope")] == ["rope.yarn.bwd"]
    _, q = _moe("qwen3_30b_a3b")
    assert [op.name for op in q.forward.ops if op.name.startswith("rope")] == ["rope"]


def test_the_clamp_runs_between_fc1_and_the_activation_and_syncs_the_host():
    m, g = _moe("gpt_oss_120b", micro_batch=1)
    names = [op.name for op in g.forward.ops]
    assert names.index("moe.expert.clamp") == names.index("moe.expert.fc1") + 1
    assert names.index("moe.expert.swiglu") == names.index("moe.expert.clamp") + 1
    clamp = g.forward.ops[names.index("moe.expert.clamp")]
    fc1 = g.forward.ops[names.index("moe.expert.fc1")]
    assert clamp.bytes == 4 * 2 * fc1.m * fc1.n * fc1.batch  # [rows, 2 ffn] per local expert, read and written
    assert (clamp.kernels, clamp.eager, clamp.host_sync, clamp.strided) == (4, True, True, True)
    back = [op.name for op in g.backward.ops]
    assert back.index("moe.expert.clamp.bwd") == back.index("moe.expert.swiglu.bwd") + 1
    assert "moe.expert.clamp" not in [op.name for op in _moe("qwen3_30b_a3b")[1].forward.ops]


def test_the_clamp_is_recomputed_with_the_activation():
    """recompute_modules=moe_act reruns bias_act_func whole: the clamps, the copy and its sync with it."""
    m = spec("gpt_oss_120b")
    (fwd,), (bwd,) = clamp_ops(m, 1000.0, 2, "moe.expert")
    assert (fwd.bytes, bwd.bytes) == (8000.0, 15000.0)
    _, g = _moe("gpt_oss_120b")
    plan = ParallelPlan(dp=1, micro_batch_size=4, global_batch_size=4, seq_len=4096, recompute="selective",
                        recompute_modules="moe_act")
    graph = build_model_graph(m, plan, tp_comms(1, False, 4 * 4096, m.hidden_size, 2))
    assert [op.name for op in graph.moe_layer.recompute.ops] == ["moe.expert.clamp", "moe.expert.swiglu"]


class _Cost:
    def compute_time_s(self, op):
        return 1e-3

    def kernels_of(self, op):
        return op.kernels

    def host_time_s(self, kernels):
        return kernels * 1e-5


def test_a_blocking_copy_makes_the_host_wait_for_the_gpu():
    op = MemoryOp("moe.expert.clamp", 1e6, 4, eager=True, host_sync=True)
    timed = _timed_op(0, op, [op], {}, {}, _Cost(), lambda g: None, 0.0)
    assert [t[4] for t in timed] == [SYNC, 0]
    plain = _timed_op(0, MemoryOp("x", 1e6), [], {}, {}, _Cost(), lambda g: None, 0.0)
    assert [t[4] for t in plain] == [0]


def test_an_eager_op_costs_the_host_its_dispatch_not_a_module():
    from vtrain.config.build import build_workload
    from vtrain.cost.analytical import AnalyticalCostModel

    w = build_workload(compose(["+model=gpt_oss_120b", "+cluster=h100x1024", "parallelism.tp=1",
                                "parallelism.pp=4", "parallelism.dp=16"]))
    cm = AnalyticalCostModel(w)
    assert (w.stack.host_time_per_kernel_s, w.stack.host_time_per_eager_op_s) == (4.946e-05, 2.0e-05)
    eager, fused = MemoryOp("e", 1.0, 10, eager=True), MemoryOp("f", 1.0, 10)
    assert cm.host_time_s(cm.kernels_of(eager)) == pytest.approx(10 * 2.0e-05)
    assert cm.host_time_s(cm.kernels_of(fused)) == pytest.approx(10 * 4.946e-05)


def test_a_strided_op_moves_its_bytes_at_the_non_vectorized_rate():
    """YaRN and the clamp take PyTorch's non-vectorized element-wise path: 12.86 GB/s per SM (measured on the lent
    H200), capped by memory_efficiency x HBM: 1.70 TB/s on H100's 132 SMs (0.51 of its HBM), 1.90 TB/s on B200's 148
    (0.25 of its 7.7 TB/s), where a vectorized element-wise kernel moves at memory_efficiency."""
    from vtrain.config.build import build_workload
    from vtrain.cost.analytical import AnalyticalCostModel

    for cluster, sms, hbm in (("h100x1024", 132, 3350e9), ("b200x1024", 148, 7700e9)):
        w = build_workload(compose(["+model=gpt_oss_120b", f"+cluster={cluster}", "parallelism.tp=1",
                                    "parallelism.pp=4", "parallelism.dp=16"]))
        cm = AnalyticalCostModel(w)
        gpu = w.cluster.gpu
        assert (gpu.strided_gb_per_s_per_sm, gpu.num_sms) == (12.86, sms)
        strided, plain = MemoryOp("s", 1e9, 1, eager=True, strided=True), MemoryOp("p", 1e9, 1, eager=True)
        assert cm.compute_time_s(strided) == pytest.approx(1e9 / (12.86e9 * sms))
        assert cm.compute_time_s(plain) == pytest.approx(1e9 / (hbm * gpu.memory_efficiency))


def test_the_strided_rate_is_the_median_of_the_h200_chains():
    """RoPE's chain (10 moves per rotated element) at 0.30-0.32 of the H200's 4.8 TB/s, the chunked SwiGLU (5 per
    output element) at 0.38-0.39; a contiguous add in the same profile reaches 0.89. The median, 0.354, over the
    H200's 132 SMs."""
    from vtrain.calibration.strided_elementwise import fit, points

    fractions = {(op, mb, s): f for op, mb, s, f in points()}
    assert fractions[("rope", 1, 4096)] == pytest.approx(0.298, abs=1e-3)
    assert fractions[("swiglu", 1, 4096)] == pytest.approx(0.384, abs=1e-3)
    assert len(fractions) == 6
    assert round(fit(), 2) == 12.86
