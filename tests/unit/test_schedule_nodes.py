"""Megatron-Core's combined 1F1B calls each layer as schedule nodes (vtrain.sim.schedule_nodes): each call is host
time at the node's place in the layer's launch queue, hidden by a host that is ahead of a busy GPU, whole on a
host-bound layer. Each value below is worked by hand from the launch-queue recurrence."""
import pytest

from vtrain.sim.launch import NO_SIDE, SYNC, price_chunk
from vtrain.sim.schedule_nodes import (
    DENSE_BACKWARD_CALLS,
    DENSE_FORWARD_CALLS,
    MOE_BACKWARD_CALLS,
    MOE_FORWARD_CALLS,
    dense_layer_nodes,
    moe_layer_nodes,
)

EP = 4  # the group index of an expert-parallel collective (launch.COMM_GROUPS "ep" + 1)
ATTN = (1.0, 0.1, 0.0, 0.0, 0)  # attention, router, dispatch preprocessing
WAIT = (0.0, 0.0, 0.0, 0.0, SYNC)  # the dispatch's D2H copy of the split sizes
A2A = (0.5, 0.01, 0.5, 0.0, EP)  # dispatch or combine
EXPERTS = (2.0, 0.2, 0.0, 0.0, 0)
CALL = 0.3


def _calls(timed):
    return [i for i, t in enumerate(timed) if t == (0.0, CALL, 0.0, 0.0, 0)]


def test_an_moe_forward_gets_a_call_before_each_of_its_four_nodes():
    """attention | (sync) dispatch | experts | combine: the dispatch node starts before its host-sync marker."""
    out = moe_layer_nodes([ATTN, WAIT, A2A, EXPERTS, A2A], False, CALL)
    assert len(_calls(out)) == MOE_FORWARD_CALLS == 4
    assert _calls(out) == [0, 2, 5, 7]
    assert out[3] == WAIT and out[4] == A2A and out[6] == EXPERTS


def test_an_moe_backward_gets_six_calls_two_of_them_weight_gradients():
    """combine | experts, their weight gradients | dispatch | attention, its weight gradients."""
    out = moe_layer_nodes([A2A, EXPERTS, A2A, ATTN], True, CALL)
    assert len(_calls(out)) == MOE_BACKWARD_CALLS == 6
    assert _calls(out) == [0, 2, 4, 5, 7, 9]


def test_dense_layers_and_layers_without_expert_collectives_take_their_calls_first():
    assert dense_layer_nodes([ATTN], False, CALL)[:DENSE_FORWARD_CALLS] == [(0.0, CALL, 0.0, 0.0, 0)] * 2
    assert len(_calls(dense_layer_nodes([ATTN], True, CALL))) == DENSE_BACKWARD_CALLS == 4
    assert _calls(moe_layer_nodes([ATTN, EXPERTS], False, CALL)) == [0, 1, 2, 3]


def test_a_host_ahead_of_a_busy_gpu_hides_a_call():
    """Plain: attention 0.1..1.1; the sync at 1.1; dispatch issued 1.11, runs 1.11..1.61; experts issued 1.31, run
    1.61..3.61; combine issued 1.32, runs 3.61..4.11. With the calls: call 0..0.3; attention issued 0.4, runs
    0.4..1.4; call until 0.7 (the GPU busy until 1.4: hidden); the sync waits until 1.4; dispatch issued 1.41, runs
    1.41..1.91; call until 1.71 (hidden); experts issued 1.91, run 1.91..3.91; call, combine issued 2.22, runs
    3.91..4.41. Of the four calls' 1.2 s of host time only the first (from an idle GPU) shows: 0.3."""
    plain = price_chunk([([ATTN, WAIT, A2A, EXPERTS, A2A], 1, NO_SIDE)], 0.0)
    nodes = price_chunk([(moe_layer_nodes([ATTN, WAIT, A2A, EXPERTS, A2A], False, CALL), 1, NO_SIDE)], 0.0)
    assert plain.latency_s == pytest.approx(4.11)
    assert nodes.latency_s == pytest.approx(4.41)
    assert nodes.gpu_s == pytest.approx(plain.gpu_s)  # no kernel added
    assert plain.host_s == pytest.approx(1.32) and nodes.host_s == pytest.approx(2.22)  # the sync took 0.3


def test_a_host_bound_layer_shows_its_calls():
    """Ops that take the host longer to issue than the GPU to run (but the experts' 0.1 of GPU for 0.2 of host).
    Plain: attention 0.1..0.15, the sync at 0.15, dispatch issued 0.16 runs ..0.165, experts issued 0.36 run
    ..0.46, combine issued 0.37 waits for them: ..0.465. With the calls: 0.3; attention 0.4..0.45; call until 0.7;
    dispatch 0.71..0.715; call until 1.01; experts 1.21..1.31; call until 1.51 (hides the experts' last 0.1);
    combine 1.52..1.525: 1.06 of the calls' 1.2 shows."""
    attn, a2a, experts = (0.05, 0.1, 0.0, 0.0, 0), (0.005, 0.01, 0.005, 0.0, EP), (0.1, 0.2, 0.0, 0.0, 0)
    ops = [attn, WAIT, a2a, experts, a2a]
    plain = price_chunk([(ops, 1, NO_SIDE)], 0.0)
    nodes = price_chunk([(moe_layer_nodes(ops, False, CALL), 1, NO_SIDE)], 0.0)
    assert plain.latency_s == pytest.approx(0.465)
    assert nodes.latency_s == pytest.approx(1.525)


def test_the_b300_preset_shows_most_of_its_node_calls():
    """Qwen3-235B on 256 B300 as the 26.02 releases' preset ran it (PP8 VP4 EP8, micro-batch 1, batch 8192, the
    1F1B all-to-all overlap): each stage runs 12 MoE layers for each of 256 micro-batches, 10 node calls per layer
    and micro-batch (4 forward, 6 backward): 30,720 calls a step. The plan is host-bound (small expert GEMMs on a
    fast GPU), so most of their host time (11.1 s at 0.36 ms a call) shows in the step (7.1 s), none of it twice."""
    from dataclasses import replace

    from vtrain import compose
    from vtrain.api import cost_model_for
    from vtrain.config.build import build_workload
    from vtrain.sim.simulator import simulate_workload

    w = build_workload(compose(["+model=qwen3_235b_a22b", "+cluster=b300x1024", "cluster.num_nodes=32",
                                "parallelism.tp=1", "parallelism.pp=8", "parallelism.dp=32", "parallelism.ep=8",
                                "parallelism.schedule=interleaved", "parallelism.virtual_stages=4",
                                "parallelism.overlap_moe_comm=true", "parallelism.distributed_optimizer=true",
                                "parallelism.account_for_embedding=true", "parallelism.account_for_loss=true",
                                "training.precision=mxfp8", "training.seq_len=4096",
                                "training.global_batch_size=8192", "stack.ep_overlap_node_host_s=3.6e-4"]))
    shipped, _ = simulate_workload(w, cost_model_for(w))
    without = replace(w, stack=replace(w.stack, ep_overlap_node_host_s=0.0))
    plain, _ = simulate_workload(without, cost_model_for(without))
    calls_s = 256 * 12 * (MOE_FORWARD_CALLS + MOE_BACKWARD_CALLS) * 3.6e-4
    shown = shipped.iteration_time_s - plain.iteration_time_s
    assert 0.4 * calls_s < shown <= calls_s
