"""SM contention from the side stream (FSDP / ZeRO-3 gathers and reduce-scatters): compute-bound kernels
that run while its collectives are in flight slow down by the GPU's overlap_slowdown; memory-bound ones do
not (hand-computed launch queues, and a whole plan)."""
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.sim.simulator import simulate_workload
from vtrain.sim.stage_costs import SideStream, price_chunk

GEMM = (1.0, 0.0, 0.0, 1.0, 0)  # (GPU s, host s, exposed comm s, FLOPs, group): a compute-bound kernel
COPY = (0.5, 0.0, 0.0, 0.0, 0)  # a memory-bound kernel (no FLOPs)


def test_a_gemm_beside_the_next_layers_gather_is_slowed_for_the_overlap():
    # layer 1 waits 0.6 for its own gather, then the GEMM runs beside the next gather for 0.6 of its 1.0:
    # 1 + 0.1 * 0.6; the copy after it runs alone. Every later layer starts its gather with its GEMM.
    cost = price_chunk([([GEMM, COPY], 3, SideStream(gather_s=0.6, slowdown=0.1))], 0.0)
    assert cost.latency_s == pytest.approx(0.6 + 3 * (1.06 + 0.5))
    assert cost.comm_s == pytest.approx(0.6)  # the first gather is exposed; the slowdown is compute time
    assert cost.gpu_compute_s == pytest.approx(3 * 1.56)


def test_a_memory_bound_kernel_is_not_slowed_and_shortens_the_window():
    # the copy takes the first 0.5 of the 0.6 gather unslowed; the GEMM overlaps the last 0.1 only
    cost = price_chunk([([COPY, GEMM], 3, SideStream(gather_s=0.6, slowdown=0.1))], 0.0)
    assert cost.latency_s == pytest.approx(0.6 + 3 * (0.5 + 1.01))


def test_no_slowdown_or_no_side_work_leaves_the_kernels_alone():
    plain = price_chunk([([GEMM, COPY], 3, SideStream(gather_s=0.6))], 0.0)
    assert plain.latency_s == pytest.approx(0.6 + 3 * 1.5)
    idle = price_chunk([([GEMM, COPY], 3, SideStream(slowdown=0.1))], 0.0)
    assert idle.latency_s == pytest.approx(3 * 1.5)


def test_a_comm_bound_layer_ends_with_its_gather():
    # gathers of 2.0 per layer: the GPU waits for each; slowing the 1.5 of compute to 1.6 hides nothing more
    cost = price_chunk([([GEMM, COPY], 4, SideStream(gather_s=2.0, slowdown=0.1))], 0.0)
    assert cost.latency_s == pytest.approx(4 * 2.0 + 1.6)


def test_fsdp_plan_pays_for_contention_at_most_the_slowdown_times_the_side_stream_busy_time():
    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "stack=torchtitan_fsdp2",
                                "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=128",
                                "parallelism.zero_stage=3", "parallelism.sequence_parallel=false",
                                "training.global_batch_size=128"]))
    slow, _ = simulate_workload(w, cost_model_for(w))
    calm_w = replace(w, cluster=replace(w.cluster, gpu=replace(w.cluster.gpu, overlap_slowdown=0.0)))
    calm, _ = simulate_workload(calm_w, cost_model_for(calm_w))
    extra = slow.stages[0].compute_s - calm.stages[0].compute_s
    fsdp_busy = {u.stream: u.busy_s for u in calm.stages[0].streams}["fsdp"]["fsdp"]
    assert 0.0 < extra <= w.cluster.gpu.overlap_slowdown * fsdp_busy + 1e-12
    # the slowdown is compute time: the layers' gathers are no more exposed (the tail's DP reductions of the
    # embedding and output units are, below)
    assert slow.stages[0].exposed_comm_by_group["fsdp"] == pytest.approx(
        calm.stages[0].exposed_comm_by_group["fsdp"], abs=1e-9)


def _ddp(*overrides):
    return build_workload(compose(["+model=gpt_1_7b", "+cluster=h100x1024", "stack=megatron_core_te",
                                   "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
                                   "parallelism.micro_batch_size=4", "training.global_batch_size=32", *overrides]))


def _calm(w):
    return replace(w, cluster=replace(w.cluster, gpu=replace(w.cluster.gpu, overlap_slowdown=0.0)))


def test_gradient_buckets_reduced_beside_the_last_backward_slow_it_by_the_share_of_their_overlap():
    """One micro-batch per replica: its backward is the last one, and Megatron's bucketed all-reduces run beside
    it; the pass stretches by overlap_slowdown x (their time inside it), counted as exposed DP time."""
    w = _ddp("parallelism.overlap_grad_reduce=true")
    slow, _ = simulate_workload(w, cost_model_for(w))
    calm, _ = simulate_workload(_calm(w), cost_model_for(_calm(w)))
    extra = slow.iteration_time_s - calm.iteration_time_s
    dp_busy = {u.stream: u.busy_s for u in calm.stages[0].streams}["dp_comm"]["dp_comm"]
    assert 0.0 < extra <= w.cluster.gpu.overlap_slowdown * dp_busy + 1e-12
    assert slow.stages[0].compute_s == pytest.approx(calm.stages[0].compute_s)  # the passes are priced alike
    dp = slow.stages[0].exposed_comm_by_group["dp"] - calm.stages[0].exposed_comm_by_group["dp"]
    assert dp == pytest.approx(extra)


def test_a_reduction_after_the_backward_slows_nothing():
    w = _ddp("parallelism.overlap_grad_reduce=false")
    slow, _ = simulate_workload(w, cost_model_for(w))
    calm, _ = simulate_workload(_calm(w), cost_model_for(_calm(w)))
    assert slow.iteration_time_s == pytest.approx(calm.iteration_time_s, rel=1e-12)


def test_an_overlapped_parameter_gather_slows_the_next_forward_by_the_share_of_its_hidden_part():
    w = _ddp("parallelism.overlap_grad_reduce=false", "parallelism.distributed_optimizer=true",
             "parallelism.overlap_param_gather=true")
    slow, _ = simulate_workload(w, cost_model_for(w))
    calm, _ = simulate_workload(_calm(w), cost_model_for(_calm(w)))
    extra = slow.iteration_time_s - calm.iteration_time_s
    dp_busy = {u.stream: u.busy_s for u in calm.stages[0].streams}["dp_comm"]["dp_comm"]
    assert 0.0 < extra <= w.cluster.gpu.overlap_slowdown * dp_busy


def test_a_whole_backward_is_its_b_pass_then_its_w_pass():
    """PassCost + PassCost (a B pass and its W pass back to back): times, FLOPs and each group's communication
    add, and so does the side stream's busy time; what still runs on the side stream when it ends is the W pass's."""
    from vtrain.sim.launch import COMM_GROUPS, PassCost

    n = len(COMM_GROUPS)
    b = PassCost(1.0, 0.5, 1.25, 0.2, 3e12, tuple(0.1 * (i + 1) for i in range(n)), side_comm_s=0.3, side_tail_s=0.05)
    w = PassCost(2.0, 0.25, 2.5, 0.1, 6e12, tuple(0.01 * (i + 1) for i in range(n)), side_comm_s=0.7, side_tail_s=0.02)
    whole = b + w
    assert (whole.gpu_compute_s, whole.comm_s, whole.latency_s, whole.host_s, whole.flops) == \
        (3.0, 0.75, 3.75, pytest.approx(0.3), 9e12)
    assert whole.comm_by_group == pytest.approx(tuple(0.11 * (i + 1) for i in range(n)))
    assert whole.side_comm_s == pytest.approx(1.0) and whole.side_tail_s == 0.02


def test_a_split_backward_runs_its_side_stream_work_once():
    """ZeRO-3 under zero-bubble (B and W priced apart): the per-layer gathers and reduce-scatters of a backward run
    once, with its B pass; B + W carry the side-stream time of the whole backward, not twice it."""
    from vtrain.comm.plan import build_comm_plan
    from vtrain.graph.builder import build_model_graph
    from vtrain.sim.pass_memo import stage_costs
    from vtrain.workload.partition import partition

    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=2",
                                "parallelism.dp=8", "parallelism.zero_stage=3", "parallelism.schedule=zero_bubble",
                                "training.global_batch_size=64", "training.seq_len=4096"]))
    cm, part = cost_model_for(w), partition(w.model, w.plan)
    comm = build_comm_plan(w, part)
    graph = build_model_graph(w.model, w.plan, comm.tp)
    split = stage_costs(graph, part, comm, cm, 0.0, split=True)
    whole = stage_costs(graph, part, comm, cm, 0.0, split=False)
    for s in range(2):
        b, wp, full = split.backward[s][0], split.weight[s][0], whole.backward[s][0]
        assert full.side_comm_s > 0 and wp.side_comm_s == 0.0
        assert b.side_comm_s + wp.side_comm_s == pytest.approx(full.side_comm_s, rel=1e-12)
