"""PyTorch's ring attention as torchtitan runs it (graph.cp_ring, comm.cp's pytorch_ring, launch.gated_s,
memory.cp_gathered_kv_bytes), hand-computed."""
import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.comm.cp import cp_comms
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.cp_ring import ring_merge_ops
from vtrain.graph.fusion import fuse_pass
from vtrain.graph.ops import CollectiveKind, FlashAttention, MemoryOp
from vtrain.graph.options import graph_options
from vtrain.sim.launch import gated_s
from vtrain.sim.memory import cp_gathered_kv_bytes
from vtrain.workload.partition import partition

# Llama 3.1 8B at 256K tokens, CP 8 on one node, as torchtitan's Table 2 ran it
TITAN = ["+model=llama3_8b", "+cluster=h100x1024", "cluster.gpu=h100_96gb_500w",
         "stack=torchtitan_fsdp2_compile_blocks", "parallelism.tp=1", "parallelism.pp=1", "parallelism.cp=8",
         "parallelism.dp=1", "parallelism.zero_stage=3", "training.seq_len=262144",
         "training.global_batch_size=1", "parallelism.micro_batch_size=1", "training.precision=fp8",
         "parallelism.recompute=full", "parallelism.cp_comm=allgather", "parallelism.sequence_parallel=false"]


def test_merge_traffic_by_hand():
    """n = 4 steps, q = o = kv = 1 element, bf16 activations, fp32 accumulators (a = 4, d = 2)."""
    fwd, bwd = ring_merge_ops(4, 1.0, 1.0, 1.0, 2.0, accumulate_fp32=True)
    # forward: 3 K/V cats (2·kv·d = 4 each), 4 step conversions + 1 final (d + a = 6 each), 3 merges (8·a = 32)
    assert fwd.bytes == pytest.approx(3 * 4 + 5 * 6 + 3 * 32)
    # backward: zeros a·(q + kv) = 8; 3 cats (4 each); step 0's K/V add (2a + d = 10); 3 half-adds and cats
    # ((2a + d)/2 + 2a = 13 each); 4 gradient cats (2a = 8 each); 4 query adds (10 each); final casts 6·(q + kv)
    assert bwd.bytes == pytest.approx(8 + 12 + 10 + 3 * 13 + 4 * 8 + 4 * 10 + 12)
    assert fwd.eager and bwd.eager
    assert fwd.kernels == 3 + 4 * 2 + 3 * 8 + 2


def test_without_fp32_the_merges_need_no_casts():
    fwd, _ = ring_merge_ops(2, 1.0, 1.0, 1.0, 2.0, accumulate_fp32=False)
    assert fwd.bytes == pytest.approx(1 * 4 + 1 * 8 * 2)  # one cat, one merge at a = d = 2
    assert fwd.kernels == 1 + 8


def test_merges_are_neither_fused_nor_scaled():
    """Eager kernels outside the compiled block: Inductor's fusion leaves them, the eager factor does not apply."""
    fwd, _ = ring_merge_ops(8, 1e6, 1e6, 1e6, 2.0, True)
    norm = MemoryOp("norm", 10.0)
    fused = fuse_pass(type("P", (), {"ops": (norm, fwd, MemoryOp("residual", 10.0))})())
    assert fwd in fused.ops and len(fused.ops) == 3


def test_torchtitan_graph_runs_one_kernel_per_step_and_its_merges():
    w = build_workload(compose(TITAN))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    layer = build_model_graph(w.model, w.plan, comm.tp, comm.cp, opts=graph_options(w.stack)).layer
    fa = [op for op in layer.forward.ops if isinstance(op, FlashAttention)]
    assert [op.kernels for op in fa] == [8]
    names = [op.name for op in layer.forward.ops]
    assert names[names.index("flash_attn") + 1] == "flash_attn.ring_merge"
    assert "flash_attn.ring_merge.bwd" in [op.name for op in layer.backward.ops]
    # full recompute replays the forward, merges included
    assert "flash_attn.ring_merge" in [op.name for op in layer.recompute.ops]


def test_megatron_core_has_no_merges():
    w = build_workload(compose([*TITAN, "stack=megatron_core_te"]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    layer = build_model_graph(w.model, w.plan, comm.tp, comm.cp, opts=graph_options(w.stack)).layer
    assert not any(op.name.startswith("flash_attn.ring") for op in layer.forward.ops)


def test_pytorch_allgather_is_gated_and_its_gradients_ring():
    w = build_workload(compose(TITAN))
    c = cp_comms(w.model, w.plan, expands_kv=True, grads_fp32=True, pytorch_ring=True)
    (fwd,), (bwd,), (last,) = c.forward, c.backward, c.backward_after
    assert (fwd.overlap, fwd.chunks, bwd.overlap) == ("first", 8, "first")
    kv_full = 262144 * 2 * 4096 * 2  # the sequence's repeated K and V in bf16
    assert fwd.bytes == kv_full
    assert last.kind == CollectiveKind.P2P and last.bytes == kv_full * 2 / 8  # one rank's fp32 K/V gradient
    llama3 = cp_comms(w.model, w.plan, expands_kv=True, grads_fp32=True)  # Llama 3's blocking variant
    assert llama3.forward[0].overlap == "" and llama3.backward_after[0].kind == CollectiveKind.REDUCE_SCATTER


def test_gated_overlap_by_hand():
    # 8 pieces of 8 s: the first (1 s) runs beside a 3 s gather, the rest after it
    assert gated_s(8.0, 3.0, 8, 0.0) == pytest.approx(3.0 + 7.0)
    assert gated_s(8.0, 0.5, 8, 0.0) == pytest.approx(8.0)
    assert gated_s(8.0, 0.5, 8, 0.1) == pytest.approx(8.0 + 0.05)  # the first piece slowed while both run


def test_gathered_kv_memory():
    w = build_workload(compose(TITAN))
    full = 262144 * 2 * 4096 * 2
    assert cp_gathered_kv_bytes(w.model, w.plan, expands_kv=True) == pytest.approx(full * 7 / 8)
    assert cp_gathered_kv_bytes(w.model, w.plan) == pytest.approx(full / 4 * 7 / 8)  # 8 of 32 K/V heads
    ring = build_workload(compose([*TITAN, "parallelism.cp_comm=p2p"]))
    assert cp_gathered_kv_bytes(ring.model, ring.plan, True) == 0.0


def test_merges_cost_time_on_torchtitan():
    with_merges = simulate(compose(TITAN))
    without = simulate(compose([*TITAN, "stack.cp_ring_merge=false"]))
    assert with_merges.iteration_time_s > without.iteration_time_s


def test_megatron_core_p2p_ring_overlaps_each_step_with_the_attention():
    """Transformer Engine's p2p context parallelism (AttnFuncWithCPAndKVP2P, cp_comm_type p2p): in each of the cp
    steps a rank sends the K/V block it holds to the next while it attends to it, forward and backward (the
    backward passes K/V and their gradients on): every exchange overlaps the attention, in cp pieces. Llama 3 8B at
    256K tokens, cp 8: the 8 K/V heads x 128 x 2 of every token in bf16, twice that in the backward."""
    w = build_workload(compose([*TITAN, "stack=megatron_core_te", "parallelism.cp_comm=p2p", "training.precision=bf16",
                                "parallelism.zero_stage=0"]))
    c = cp_comms(w.model, w.plan)
    kv = 262144 * 8 * 128 * 2 * 2.0
    assert [(x.name, x.bytes, x.overlap, x.chunks) for x in c.forward + c.backward] == [
        ("cp.kv_ring", kv, "next", 8), ("cp.kv_ring.bwd", 2 * kv, "next", 8)]
    assert c.backward_after == () and c.forward_after == ()
