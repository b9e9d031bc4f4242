"""Output-layer FLOPs and the GPU's ``memory_efficiency``, each pinned by several tests against hand values.

Output layer (Narayanan et al. SC'21, Eq. 3's last term: 6 B s h V per iteration, never recomputed): the
logits GEMM of one micro-batch on one TP rank is [tokens, h] x [h, V/t] (Megatron's vocab-parallel output
layer, V padded to a multiple of 128 x t), 2 tokens h V/t FLOPs forward, the same again for its input
gradient and for its weight gradient.
memory_efficiency (the fraction of the datasheet HBM bandwidth an element-wise kernel reaches): a memory-bound
op takes bytes x traffic / (HBM x memory_efficiency), never less than its kernels' launch floor.
"""
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.api import AnalyticalCostModel, simulate_workload
from vtrain.comm.tp import plan_tp_comms
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_head
from vtrain.graph.ops import Gemm, MemoryOp


def gpt3(*overrides):
    return build_workload(compose(["+model=gpt175b", "+cluster=a100x1024", *overrides]))


def head_gemms(w):
    g = build_head(w.model, w.plan, plan_tp_comms(w.model, w.plan))
    return ([op for op in g.forward.ops if isinstance(op, Gemm)], [op for op in g.backward.ops if isinstance(op, Gemm)],
            g.recompute.ops)


def test_logits_gemm_shape_and_flops_per_micro_batch():
    w = gpt3("parallelism.tp=8", "parallelism.micro_batch_size=2")
    fwd, bwd, again = head_gemms(w)
    # 50,257 padded to a multiple of 128 x 8 = 1,024: 51,200 rows, 6,400 per TP rank
    tokens, h, shard = 2 * 2048, 12288, 6400
    assert [(op.m, op.n, op.k) for op in fwd] == [(tokens, shard, h)]
    assert fwd[0].flops == 2 * tokens * h * shard
    assert sorted(op.flops for op in bwd) == [2 * tokens * h * shard] * 2  # input and weight gradients
    assert again == ()  # the output layer is never recomputed


@pytest.mark.parametrize("tp,shard", [(1, 50304), (2, 25216), (4, 12672), (8, 6400)])
def test_logits_gemm_follows_the_padded_vocab_shard(tp, shard):
    # the next multiple of 128 x tp: 50,304 = 393 x 128, 50,432 = 197 x 256, 50,688 = 99 x 512, 51,200 = 50 x 1,024
    fwd, _, _ = head_gemms(gpt3(f"parallelism.tp={tp}", "parallelism.pp=1", "parallelism.dp=8"))
    assert fwd[0].n == shard and fwd[0].flops == 2 * 2048 * 12288 * shard


def test_model_flops_count_the_output_layer_once_per_pass():
    m = gpt3().model
    b, s, h = 1536, 2048, 12288
    smaller = replace(m, vocab_size=m.vocab_size - 1000)
    assert m.forward_flops_per_sequence(s) - smaller.forward_flops_per_sequence(s) == 2 * s * h * 1000
    assert m.model_flops_per_iteration(b, s) - smaller.model_flops_per_iteration(b, s) == 6 * b * s * h * 1000
    # recompute adds nothing to the output layer (full recompute reruns the transformer layers only)
    full = m.hardware_flops_per_iteration(b, s, "full") - smaller.hardware_flops_per_iteration(b, s, "full")
    assert full == 6 * b * s * h * 1000


def test_output_layer_share_of_gpt3_flops():
    """Eq. 3's output term over the whole: V / (16 l h) / (1 + s/(6h) + V/(16 l h)) with full recompute."""
    m = gpt3().model
    b, s, h, n_l, v = 1536, 2048, 12288, 96, 50257
    share = (6 * b * s * h * v) / m.hardware_flops_per_iteration(b, s, "full")
    closed = (v / (16 * n_l * h)) / (1 + s / (6 * h) + v / (16 * n_l * h))
    assert share == pytest.approx(closed, rel=5e-3)  # biases and norms are in the model's count, not Eq. 3's


def cost(w, efficiency):
    gpu = replace(w.cluster.gpu, memory_efficiency=efficiency)
    return AnalyticalCostModel(replace(w, cluster=replace(w.cluster, gpu=gpu)))


@pytest.mark.parametrize("efficiency", [0.5, 0.704, 0.9])
def test_memory_bound_op_runs_at_memory_efficiency_of_hbm(efficiency):
    w = gpt3()
    op = MemoryOp("residual", 3.0e9, 1)
    hbm = 2039e9  # A100-SXM4-80GB datasheet, GB/s
    assert cost(w, efficiency).compute_time_s(op) == pytest.approx(3.0e9 * w.stack.elementwise_traffic
                                                                   / (hbm * efficiency), rel=1e-12)


def test_memory_efficiency_does_not_move_a_compute_bound_gemm_nor_a_launch_bound_op():
    w = gpt3()
    big = Gemm("fc1", m=8192, n=12288, k=12288, dtype_bytes=2)
    assert cost(w, 0.4).compute_time_s(big) == cost(w, 0.9).compute_time_s(big)
    tiny = MemoryOp("bias", 1000.0, 1)  # 1 kB: the 2 us kernel floor of the A100
    assert cost(w, 0.4).compute_time_s(tiny) == cost(w, 0.9).compute_time_s(tiny) == w.cluster.gpu.kernel_time_s


def test_memory_bound_gemm_is_priced_at_the_same_bandwidth():
    w = gpt3()
    skinny = Gemm("gemv", m=1, n=65536, k=65536, dtype_bytes=2)  # 8 GiB of weights for 8.6 GFLOP
    t = cost(w, 0.5).compute_time_s(skinny)
    curve = cost(w, 0.5).curve
    assert t == pytest.approx(curve.fixed_time_s + skinny.bytes / (2039e9 * 0.5), rel=1e-9)


def test_iteration_time_is_linear_in_one_over_memory_efficiency():
    """End to end, GPT-3 (8, 8, 16): the memory-bound kernels sit on the critical path, so the iteration time is
    T(e) = T_gemm + X / e. Then (T(0.3) - T(0.6)) / (T(0.4) - T(0.6)) = (1/0.3 - 1/0.6) / (1/0.4 - 1/0.6) = 2."""
    base = gpt3()

    def iteration_s(efficiency):
        w = replace(base, cluster=replace(base.cluster, gpu=replace(base.cluster.gpu, memory_efficiency=efficiency)))
        return simulate_workload(w, AnalyticalCostModel(w))[0].iteration_time_s

    t = {e: iteration_s(e) for e in (0.3, 0.4, 0.6)}
    assert (t[0.3] - t[0.6]) / (t[0.4] - t[0.6]) == pytest.approx(2.0, rel=1e-6)
    x = (t[0.4] - t[0.6]) / (1 / 0.4 - 1 / 0.6)  # the element-wise seconds at full bandwidth
    assert 0 < x < 0.05 * t[0.6]  # a few % of a GPT-3 iteration (fused kernels, Korthikanti et al. Sec. 5)
