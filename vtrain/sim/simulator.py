"""One training iteration, end to end: graph → per-stage costs → pipeline events → gradient sync →
optimizer → Report. Pure: no I/O, no global state besides the schedule cache."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Tuple

from vtrain.cost.base import CostModel
from vtrain.cost.collectives import GroupPlacement
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import Collective, CollectiveKind, Group
from vtrain.report import MemoryBreakdown, Report, StageBreakdown
from vtrain.sim.engine import PipelineRun, run_pipeline
from vtrain.sim.memory import inflight_layers, layer_activation_bytes, state_bytes_per_param
from vtrain.sim.schedule import CompiledSchedule, compile_schedule
from vtrain.sim.stage_costs import StageCosts, build_stage_costs, dp_placement, p2p_crosses_node
from vtrain.workload.enums import Precision, Recompute
from vtrain.workload.workload import Workload


@dataclass(frozen=True)
class SimulationTrace:
    """What a timeline needs: the compiled schedule, task end times and per-stage tail events."""

    schedule: CompiledSchedule
    run: PipelineRun
    durations: Tuple[float, ...]
    tail: Tuple[Tuple[Tuple[str, str, float, float], ...], ...]  # [stage] -> (stream, name, start, end)


def _grad_bytes_per_param(precision: Precision) -> float:
    """DP reduces fp32 main gradients with bf16 (Megatron-LM accumulates them in fp32), else dtype."""
    return 4.0 if precision == Precision.BF16 else (4.0 if precision == Precision.FP32 else 2.0)


def _dp_sync(w: Workload, cost: CostModel, sc: StageCosts, cs: CompiledSchedule, run: PipelineRun,
             durations: List[float], keep_events: bool) -> Tuple[List[float], List[list]]:
    """Per stage: when its gradients are reduced over DP (bucketed, overlapped with the last
    micro-batch's backward when enabled). Returns (ready time per stage, tail events)."""
    plan = w.plan
    where = dp_placement(plan, w.cluster)
    kind = CollectiveKind.REDUCE_SCATTER if plan.distributed_optimizer else CollectiveKind.ALL_REDUCE
    gbytes = _grad_bytes_per_param(plan.precision)
    ready: List[float] = []
    tails: List[list] = []
    for s in range(plan.pp):
        cur = run.stage_end[s]
        events: list = []
        if plan.dp > 1:
            lasts = sorted(((run.end[i], i, c) for c, i in enumerate(cs.last_bwd[s])))
            cur = 0.0
            for end_i, i, c in lasts:
                nbytes = sc.params[s][c] * gbytes
                dur = durations[cs.dur_key[i]]
                if plan.overlap_grad_reduce:
                    # bucket k is ready at a + (k+1)·step; buckets go out one after another on the comm stream
                    n_b = max(1, math.ceil(nbytes / plan.grad_bucket_bytes))
                    t_b = cost.collective_time_s(Collective("dp", kind, nbytes / n_b, Group.DP, plan.dp), where)
                    a, step = end_i - dur, dur / n_b
                    if keep_events:
                        for k in range(n_b):
                            start = max(cur, a + (k + 1) * step)
                            cur = start + t_b
                            events.append(("comm", f"dp {kind.value} chunk{c} bucket{k}", start, cur))
                    else:  # the same recurrence in closed form: its maximum sits at the first or last bucket
                        cur = max(cur + n_b * t_b, a + step + n_b * t_b, a + n_b * step + t_b)
                else:
                    t = cost.collective_time_s(Collective("dp", kind, nbytes, Group.DP, plan.dp), where)
                    start = max(cur, run.stage_end[s])
                    cur = start + t
                    if keep_events:
                        events.append(("comm", f"dp {kind.value} chunk{c}", start, cur))
            cur = max(cur, run.stage_end[s])
        ready.append(cur)
        tails.append(events)
    if sc.embedding_params > 0:  # tied embeddings: first and last stage all-reduce the word-embedding grad
        first, last = 0, plan.pp - 1
        cross = p2p_crosses_node(plan, w.cluster, first, last)
        t = cost.collective_time_s(
            Collective("emb", CollectiveKind.ALL_REDUCE, sc.embedding_params * gbytes, Group.EMBEDDING, 2),
            GroupPlacement(2, 1 if cross else 2))
        start = max(ready[first], ready[last])
        for s in (first, last):
            ready[s] = start + t
            if keep_events:
                tails[s].append(("comm", "embedding grad all-reduce", start, start + t))
    return ready, tails


def simulate_workload(w: Workload, cost: CostModel, keep_trace: bool = False) -> Tuple[Report, SimulationTrace | None]:
    model, plan, cluster = w.model, w.plan, w.cluster
    gpu = cluster.gpu
    graph = build_model_graph(model, plan)
    sc = build_stage_costs(w, graph, cost)
    m = plan.num_microbatches
    cs = compile_schedule(plan.schedule, plan.pp, plan.chunks, m)
    durations = sc.durations()
    run = run_pipeline(cs, durations, sc.lags(), sc.latencies(), sc.host_times())
    ready, tails = _dp_sync(w, cost, sc, cs, run, durations, keep_trace)

    # optimizer: a global barrier (grad-norm clipping and inf checks all-reduce over all ranks)
    barrier = max(ready)
    dp_where = dp_placement(plan, cluster)
    ends: List[float] = []
    opt_times: List[float] = []
    gather_times: List[float] = []
    for s in range(plan.pp):
        params = sum(sc.params[s])
        shard = params / plan.dp if plan.distributed_optimizer else params
        t_opt = cost.optimizer_time_s(shard)
        t_ag = 0.0
        if plan.distributed_optimizer and plan.dp > 1:
            t_ag = cost.collective_time_s(Collective("param_ag", CollectiveKind.ALL_GATHER,
                                                     params * plan.dtype_bytes, Group.DP, plan.dp), dp_where)
        tails[s].append(("compute", "optimizer step", barrier, barrier + t_opt))
        if t_ag:
            tails[s].append(("comm", "dp param all-gather", barrier + t_opt, barrier + t_opt + t_ag))
        opt_times.append(t_opt)
        gather_times.append(t_ag)
        ends.append(barrier + t_opt + t_ag)
    iteration = max(ends) + w.stack.iteration_overhead_s

    # memory
    layers_per_stage = model.num_layers // plan.pp
    act_layer = layer_activation_bytes(model, plan)
    w_b, g_b, o_b = state_bytes_per_param(plan)
    logits_bytes = plan.micro_batch_size * plan.seq_len * model.vocab_shard(plan.tp) * (plan.dtype_bytes + 4)
    working = layer_activation_bytes(model, plan, Recompute.NONE) if plan.recompute == Recompute.FULL else 0.0

    stages: List[StageBreakdown] = []
    mems: List[MemoryBreakdown] = []
    for s in range(plan.pp):
        params = sum(sc.params[s])
        fwd, bwd = sc.forward[s], sc.backward[s]
        compute = m * sum(c.gpu_compute_s for c in fwd + bwd)
        host = m * sum(c.host_excess_s for c in fwd + bwd)
        tp_comm = m * sum(c.comm_s for c in fwd + bwd)
        exposed = tp_comm + (ready[s] - run.stage_end[s]) + gather_times[s]
        bubble = iteration - compute - host - exposed - opt_times[s]
        mem = MemoryBreakdown(
            weights_bytes=params * w_b, gradients_bytes=params * g_b, optimizer_bytes=params * o_b,
            activations_bytes=inflight_layers(plan, s, layers_per_stage) * act_layer + working,
            other_bytes=w.stack.memory_reserved_bytes + (logits_bytes if s == plan.pp - 1 else 0.0))
        mems.append(mem)
        stages.append(StageBreakdown(s, compute, host, exposed, bubble, opt_times[s], mem.total_bytes,
                                     layers_per_stage, params))
    peak_stage = max(range(plan.pp), key=lambda i: mems[i].total_bytes)
    peak = mems[peak_stage].total_bytes

    gpus = plan.num_gpus
    peak_flops = gpu.peak_flops_per_s(plan.precision.value)
    model_flops = model.model_flops_per_iteration(plan.global_batch_size, plan.seq_len)
    # with flash attention, selective recompute is inside the fused kernel's backward: no extra pass
    flash_selective = plan.flash_attention and plan.recompute == Recompute.SELECTIVE
    hw_flops = model.hardware_flops_per_iteration(plan.global_batch_size, plan.seq_len,
                                                  "none" if flash_selective else plan.recompute.value)
    tokens_per_iter = plan.global_batch_size * plan.seq_len
    iterations = w.tokens_to_train / tokens_per_iter
    time_to_train = iterations * iteration
    gpu_hours = gpus * time_to_train / 3600.0
    report = Report(
        model=model.name, cluster=cluster.name, gpu=gpu.name,
        plan=plan,
        iteration_time_s=iteration, stages=tuple(stages), peak_memory_bytes=peak, memory=mems[peak_stage],
        memory_capacity_bytes=gpu.hbm_capacity_bytes, fits=peak <= gpu.hbm_capacity_bytes,
        mfu=model_flops / (iteration * gpus * peak_flops), hfu=hw_flops / (iteration * gpus * peak_flops),
        tokens_per_s=tokens_per_iter / iteration, model_flops_per_iteration=model_flops,
        iterations=iterations, time_to_train_s=time_to_train, gpu_hours=gpu_hours,
        cost_usd=gpu_hours * w.usd_per_gpu_hour, usd_per_gpu_hour=w.usd_per_gpu_hour, gpus_used=gpus,
        cost_model=cost.name, extrapolated_ops=tuple(sorted(cost.extrapolated())))
    trace = None
    if keep_trace:
        trace = SimulationTrace(cs, run, tuple(durations), tuple(tuple(t) for t in tails))
    return report, trace
