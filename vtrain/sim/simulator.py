"""One training iteration, end to end: partition → communication plan → op graph → per-pass costs →
pipeline events → gradient sync and optimizer → Report. Pure: no I/O, no global state besides the
caches of structure (compiled schedules, partitions and op graphs: vtrain/sim/structure.py) and the
memos of priced passes (vtrain/sim/pass_memo.py) and recent pipeline runs (vtrain/sim/pipeline.py), each
exact."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from vtrain.comm.ep import DISPATCH_SMS
from vtrain.comm.plan import CommPlan, Stream
from vtrain.cost.base import CostModel
from vtrain.cost.gemm import BLOCK_SCALED, borrowed_efficiency
from vtrain.errors import ConfigError
from vtrain.graph.blocks import ModelGraph
from vtrain.graph.options import graph_options
from vtrain.graph.te_quant import te_switches, with_te_quantization
from vtrain.graph.weight_cache import weight_cast_share, with_cached_weights
from vtrain.report import Report, StageBreakdown, StreamUsage
from vtrain.sim.busy import stage_busy
from vtrain.sim.energy import energy
from vtrain.sim.engine import PipelineRun
from vtrain.sim.goodput import run_goodput
from vtrain.sim.intervals import Interval, regime_key, shipped_table
from vtrain.sim.launch import COMM_GROUPS, PassCost
from vtrain.sim.offload import with_offload
from vtrain.sim.pass_memo import stage_costs
from vtrain.sim.pipeline import PipelineResult, simulate_pipeline
from vtrain.sim.schedule import CompiledSchedule, splits_backward
from vtrain.sim.stage_costs import StageCosts
from vtrain.sim.stage_memory import partial_recompute_memory, recomputed_share, stage_memory
from vtrain.sim.structure import comm_plan, model_graph, shape_key, stage_partition
from vtrain.sim.tail import Event, StageTail, simulate_tail
from vtrain.workload.enums import Recompute, Schedule, parse_recompute_modules
from vtrain.workload.partition import StagePartition
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.stack import StackSpec
from vtrain.workload.workload import Workload

_DUALPIPE = Schedule.DUALPIPE
TRACE_TASKS = 100_000  # a timeline simulates the whole schedule up to this many pipeline tasks


@dataclass(frozen=True)
class SimulationTrace:
    """What a timeline needs: the simulated schedule, task times, per-stage tail events. When the
    pipeline was extrapolated (more than TRACE_TASKS tasks) it shows the simulated micro-batches."""

    schedule: CompiledSchedule
    run: PipelineRun
    durations: Tuple[float, ...]  # per pass (dur_key): compute-stream time
    tail: Tuple[Tuple[Event, ...], ...]  # [stage] -> (stream, name, start, end)
    microbatches: int  # of the iteration (schedule.m when the whole schedule was simulated)
    ep_comm: Tuple[float, ...] = ()  # per pass (dur_key): its expert-parallel all-to-all time (MoE models)
    exposed_comm: Tuple[Tuple[float, ...], ...] = ()  # per pass (dur_key): exposed comm by COMM_GROUPS (tp, cp, ...)

    def start(self, i: int) -> float:
        """When task ``i`` started on its compute stream."""
        return self.run.end[i] - self.durations[self.schedule.dur_key[i]] - self.run.host[i]


def _pass_sums(passes: Tuple[PassCost, ...]) -> Tuple[float, ...]:
    """(GPU compute, in-pass comm, host, side-stream comm, comm by group...) summed over a stage's passes;
    stages built from the same priced passes share one sum (most stages of a uniform pipeline)."""
    key = tuple(map(id, passes))
    hit = _SUMS.get(key)
    if hit is not None and hit[0] == passes:
        return hit[1]
    out = (sum(c.gpu_compute_s for c in passes), sum(c.comm_s for c in passes), sum(c.host_s for c in passes),
           sum(c.side_comm_s for c in passes),
           *(sum(c.comm_by_group[i] for c in passes) for i in range(len(COMM_GROUPS))))
    if len(_SUMS) > 64:
        _SUMS.clear()
    _SUMS[key] = (passes, out)
    return out


_SUMS: Dict[Tuple[int, ...], Tuple[Tuple[PassCost, ...], Tuple[float, ...]]] = {}


def _stage_passes(sc: StageCosts, s: int, plan: ParallelPlan) -> Tuple[Tuple[PassCost, ...], int]:
    """Stage ``s``'s priced passes (forward, backward, the W passes of a B/W split) and how often each runs
    per iteration (DualPipe's two directions take half the micro-batches each)."""
    passes = sc.forward[s] + sc.backward[s] + (sc.weight[s] if sc.weight else ())
    return passes, plan.num_microbatches // 2 if plan.schedule is _DUALPIPE else plan.num_microbatches


def _side_work_s(sc: StageCosts, s: int, plan: ParallelPlan) -> float:
    """Stage ``s``'s side-stream work over the iteration (ZeRO-3 gathers and reduce-scatters of every pass),
    counted as the breakdown's FSDP stream counts it."""
    passes, per_chunk = _stage_passes(sc, s, plan)
    return per_chunk * _pass_sums(passes)[3]


def _p2p_busy(part: StagePartition, sc: StageCosts, m: int) -> List[float]:
    """Per stage: the pipeline stream's send/receive time over the iteration (each chunk's boundaries)."""
    out = []
    last = part.positions - 1
    for s in range(part.p):
        busy = 0.0
        for c in range(part.v):
            q = part.position(s, c)
            busy += m * ((sc.p2p_fwd_s[q + 1] if q < last else 0.0) + (sc.p2p_bwd_s[q - 1] if q else 0.0))
        out.append(busy)
    return out


def _streams(iteration: float, moe: bool, compute: float, tp: float, ep: float, optimizer: float, side: float,
             dp_busy: float, pp_busy: float, host_busy: float, a2a: float) -> Tuple[StreamUsage, ...]:
    """A stage's streams over the iteration: busy time by kind and idle time."""
    busy = {"compute": compute, "in_stream_comm": tp, "optimizer": optimizer}
    if moe:
        busy["ep_comm"] = ep
    streams: Tuple[StreamUsage, ...] = (
        StreamUsage(_COMPUTE, busy, max(0.0, iteration - compute - tp - ep - optimizer)),
        StreamUsage(_FSDP, {"fsdp": side}, max(0.0, iteration - side)),
        StreamUsage(_DP, {"dp_comm": dp_busy}, max(0.0, iteration - dp_busy)),
        StreamUsage(_PP, {"p2p": pp_busy}, max(0.0, iteration - pp_busy)),
        StreamUsage("host", {"issue": host_busy}, max(0.0, iteration - host_busy)),
    )
    if moe:
        streams += (StreamUsage(Stream.EXPERT.value, {"all_to_all": a2a}, max(0.0, iteration - a2a)),)
    return streams


Streams = Dict[Tuple[float, ...], Tuple[StreamUsage, ...]]


def _stage_breakdown(s: int, w: Workload, part: StagePartition, sc: StageCosts, pipe: PipelineResult,
                     tail: StageTail, iteration: float, peak_bytes: float, pp_busy: float,
                     shared_streams: Streams) -> StageBreakdown:
    moe = w.model.is_moe
    passes, per_chunk = _stage_passes(sc, s, w.plan)
    sums = _pass_sums(passes)
    if sc.weight or sc.fused or moe:
        compute, tp, ep, a2a = stage_busy(sc, pipe, s, per_chunk, moe or bool(sc.fused))
    else:
        compute, tp, ep, a2a = per_chunk * sums[0], per_chunk * sums[1], 0.0, 0.0
    overhead = w.stack.iteration_overhead_s
    # exposed in-pass communication by group: CP and FSDP from the passes, EP as the schedule hid it, TP the rest
    cp, fsdp = per_chunk * sums[5], per_chunk * sums[6]
    tp = max(0.0, tp)  # sums of differences: a TP-free stage may come out at -1e-17
    groups = {"tp": max(0.0, tp - cp - fsdp), "cp": cp, "fsdp": fsdp, "ep": ep, "pp": pipe.p2p_s[s],
              "dp": tail.dp_exposed_s + tail.param_gather_s, "embedding": tail.embedding_s}
    exposed = sum(groups.values())
    host_busy = per_chunk * sums[2] + overhead
    side = per_chunk * sums[3]
    key = (compute, tp, ep, tail.optimizer_s, side, tail.dp_busy_s, pp_busy, host_busy, a2a)
    streams = shared_streams.get(key)
    if streams is None:  # stages with the same busy times (the middle of a pipeline) share one value
        streams = shared_streams[key] = _streams(iteration, moe, *key)
    return StageBreakdown(stage=s, compute_s=compute, host_overhead_s=pipe.host_s[s] + overhead,
                          exposed_comm_s=exposed, bubble_s=pipe.bubble_s[s] + tail.sync_wait_s,
                          optimizer_s=tail.optimizer_s, peak_memory_bytes=peak_bytes, layers=part.stage_layers(s),
                          params=part.stage_params(s), exposed_comm_by_group=groups, streams=streams)


_COMPUTE, _FSDP, _DP, _PP = Stream.COMPUTE.value, Stream.FSDP.value, Stream.DATA_PARALLEL.value, Stream.PIPELINE.value
assert COMM_GROUPS == ("tp", "cp", "fsdp", "ep")  # the sums' order (_pass_sums: 4 + index)


def _provenance(w: Workload) -> Dict[str, str]:
    """Where each constant this prediction rests on came from: the GPU's, and the stack's on this GPU's
    architecture (:meth:`vtrain.workload.stack.StackSpec.provenance_on`)."""
    out = {f"gpu.{k}": v for k, v in w.cluster.gpu.provenance.items()}
    out.update({f"stack.{k}": v for k, v in w.stack.provenance_on(w.cluster.gpu.architecture).items()})
    return out


def _notes(prov: Dict[str, str], w: Workload) -> Tuple[str, ...]:
    out: Tuple[str, ...] = ()
    transferred = sorted(k for k, v in prov.items() if v.startswith("transferred"))
    if transferred:
        gpu = sum(k.startswith("gpu.") for k in transferred)
        out += (f"caution: {len(transferred)} constants are transferred, not fitted to this GPU and stack ({gpu} "
                f"gpu, {len(transferred) - gpu} stack; report.json lists their sources): a first-principles estimate",)
    p = w.plan.precision.value
    borrowed = borrowed_efficiency(w.cluster.gpu, p) if w.plan.precision.low else None
    if borrowed:
        ratio = w.cluster.gpu.block_scaled_gemm_ratio if p in BLOCK_SCALED else 1.0
        scaled = f" x {ratio:.3g} (gpu.block_scaled_gemm_ratio, fitted end to end)" if ratio != 1.0 else ""
        out += (f"caution: {p} GEMMs are priced at {borrowed}'s efficiency{scaled}: no table measures this GPU's "
                f"{p} kernels",)
    if p == "fp8_rowwise" and w.stack.rowwise_fp8_on_cutlass(w.cluster.gpu.architecture):
        out += (f"caution: fp8_rowwise GEMMs run on PyTorch's CUTLASS kernel, priced at fp8's efficiency x "
                f"{w.cluster.gpu.rowwise_cutlass_gemm_ratio:.3g} (gpu.rowwise_cutlass_gemm_ratio, fitted end to end; "
                f"stack.cublas_rowwise_fp8=true: a PyTorch on cuBLAS >= 12.9 runs cuBLAS's on Hopper)",)
    return out


def _convention_note(w: Workload, iteration_s: float, peak_flops: float, hw_flops: float) -> Tuple[str, ...]:
    """A note when HFU passes 100%: MFU and HFU count the whole attention score matrix (Megatron's and
    torchtitan's convention) while a causal fused kernel executes half of it, so a plan dominated by long
    causal attention passes the peak on paper; the note gives the share of the peak the GPUs execute."""
    plan = w.plan
    if hw_flops <= iteration_s * plan.num_gpus * peak_flops:
        return ()
    executed = hardware_flops(w, causal_flash=plan.flash_attention)
    share = executed / (iteration_s * plan.num_gpus * peak_flops)
    return (f"MFU and HFU count the whole attention score matrix (Megatron's convention); this plan's causal "
            f"attention executes about half of it: the GPUs execute {share:.1%} of their peak",)


def leaf_regime(w: Workload, prov: Dict[str, str], host_fraction: float) -> str:
    """The most specific interval class of this plan (vtrain/sim/intervals.py :func:`regime_key`)."""
    plan, cluster = w.plan, w.cluster
    transferred = any(v.startswith("transferred") for v in prov.values())
    return regime_key(cluster.gpu.name, w.stack.name, transferred, w.model.is_moe,
                      plan.num_gpus > cluster.gpus_per_node, host_fraction)


def host_fraction(report: Report) -> float:
    """The share of the iteration the critical stage's GPU waits on the host."""
    it = report.iteration_time_s
    return report.breakdown.host_overhead_s / it if it > 0 else 0.0


def interval_of(w: Workload, prov: Dict[str, str], host_share: float) -> Interval:
    """The calibrated 80% interval of this plan's iteration time, relative to the prediction."""
    return shipped_table().interval(w.cluster.gpu.name, w.plan.precision.value, w.plan.schedule.value,
                                    leaf_regime(w, prov, host_share))


def _recompute_flops_mode(plan: ParallelPlan, stack: StackSpec) -> str:
    """The recompute mode whose extra FLOPs HFU counts: selective recompute runs the attention core again
    unless it is a fused kernel the stack leaves out of the checkpoint, or core_attn is not among
    Megatron-Core's recompute modules (the matmuls of the other modules: ModelSpec.recomputed_module_flops)."""
    if plan.recompute != Recompute.SELECTIVE:
        return str(plan.recompute.value)
    core = "core_attn" in parse_recompute_modules(plan.recompute_modules)
    fused_skipped = plan.flash_attention and not stack.recompute_fused_attention
    return "selective" if core and not fused_skipped else "none"


def hardware_flops(w: Workload, causal_flash: bool = False) -> float:
    """FLOPs the GPUs run per iteration, recompute included: the recompute mode's
    (:meth:`ModelSpec.hardware_flops_per_iteration`) and the matmuls of Megatron-Core's recomputed modules;
    ``causal_flash``: the causal fused attention's executed share instead of the MFU convention's."""
    plan, model = w.plan, w.model
    flops = model.hardware_flops_per_iteration(plan.global_batch_size, plan.seq_len,
                                               _recompute_flops_mode(plan, w.stack), causal_flash)
    if plan.recompute_num_layers:  # block recompute: the recomputed layers' share of full recompute's extra
        kept = model.hardware_flops_per_iteration(plan.global_batch_size, plan.seq_len, "none", causal_flash)
        flops = kept + recomputed_share(stage_partition(model, plan), plan) * (flops - kept)
    if plan.recompute == Recompute.SELECTIVE:  # Megatron-Core's modules with matmuls (mlp, moe, ...)
        flops += plan.global_batch_size * model.recomputed_module_flops(
            plan.seq_len, parse_recompute_modules(plan.recompute_modules))
    return flops


def _graph(w: Workload, comm: CommPlan, shape: Tuple[Any, ...]) -> ModelGraph:
    """The op graph with the plan's collectives in place and the stack's cast rewrites."""
    model, plan, stack = w.model, w.plan, w.stack
    graph = model_graph(model, plan, comm.tp, comm.cp, comm.ep, graph_options(stack), shape)
    graph = with_te_quantization(graph, te_switches(stack, plan, w.cluster.gpu.architecture))  # TE's casts
    return with_cached_weights(graph, weight_cast_share(stack, plan))  # TE's weight cast on a step's first micro-batch


def simulate_workload(w: Workload, cost: CostModel, keep_trace: bool = False
                      ) -> Tuple[Report, Optional[SimulationTrace]]:
    model, plan, cluster, stack, gpu = w.model, w.plan, w.cluster, w.stack, w.cluster.gpu
    most = stack.pipeline_max_zero_stage
    if plan.pp > 1 and most is not None and plan.sharding_stage > most:
        raise ConfigError(f"parallelism.zero_stage={plan.sharding_stage} with pp={plan.pp}: stack={stack.name} runs "
                          f"ZeRO stages up to {most} under a pipeline (DeepSpeed's PipelineEngine)")
    shape = shape_key(model, plan)
    part = stage_partition(model, plan, shape)
    comm: CommPlan = comm_plan(w, part)
    graph = _graph(w, comm, shape)
    fused = plan.overlap_moe_comm or plan.schedule in (Schedule.DUALPIPE, Schedule.DUALPIPEV)
    # Megatron-Core's combined 1F1B hides the stack's share of a pair's all-to-all; DualPipe's own schedule all of it
    hidden = stack.ep_overlap_hidden_share if plan.overlap_moe_comm else 1.0
    fuse = (DISPATCH_SMS[plan.moe_dispatcher] / gpu.num_sms, hidden) if fused else None
    sc = with_offload(stage_costs(graph, part, comm, cost, stack.microbatch_overhead_s,
                                  split=splits_backward(plan.schedule), fuse=fuse,
                                  overlap_slowdown=gpu.overlap_slowdown, graph_scopes=plan.cuda_graph_scopes,
                                  recompute_layers=plan.recompute_num_layers,
                                  node_host_s=stack.ep_overlap_node_host_s if plan.overlap_moe_comm else 0.0), w)
    m = plan.num_microbatches
    durations, latencies, host_times = sc.engine_inputs()
    full = keep_trace and 2 * plan.pp * plan.chunks * m <= TRACE_TASKS
    pipe = simulate_pipeline(plan.schedule, plan.pp, plan.chunks, m, durations, sc.lags(), latencies,
                             host_times, full=full, fused=plan.overlap_moe_comm, keep_tasks=keep_trace,
                             group=plan.microbatch_group_size_per_vp_stage, sync=sc.sync_inputs())
    # ZeRO-3's side stream is one serial queue per GPU: each pass is priced with its own, so a pass's unfinished
    # reduce-scatters (side_tail_s) would vanish into the next; a stage ends no earlier than its side stream has
    # done all of the iteration's gathers and reduce-scatters
    drain = [max(max((b.side_tail_s for b in sc.backward[s]), default=0.0),
                 _side_work_s(sc, s, plan) - pipe.stage_end[s]) for s in range(plan.pp)]
    end, tails = simulate_tail(pipe, durations, part, comm, cost, plan, drain, keep_trace, gpu.overlap_slowdown)
    iteration = end + stack.iteration_overhead_s

    mems = partial_recompute_memory(w, part) if plan.recompute_num_layers else stage_memory(w, part)
    pp_busy = _p2p_busy(part, sc, m)
    shared: Streams = {}
    stages = tuple(_stage_breakdown(s, w, part, sc, pipe, tails[s], iteration, mems[s].total_bytes, pp_busy[s],
                                    shared) for s in range(plan.pp))
    peak_stage = max(range(plan.pp), key=lambda i: mems[i].total_bytes)
    peak = mems[peak_stage].total_bytes
    gpus = plan.num_gpus
    # MFU against the bf16 peak also for low-precision runs (as torchtitan and Megatron report it)
    peak_flops = gpu.peak_flops_per_s(plan.precision.activation.value)
    model_flops = model.model_flops_per_iteration(plan.global_batch_size, plan.seq_len)
    hw_flops = hardware_flops(w)
    tokens_per_iter = plan.global_batch_size * plan.seq_len
    iterations = w.tokens_to_train / tokens_per_iter
    time_to_train = iterations * iteration
    gpu_hours = gpus * time_to_train / 3600.0
    prov = _provenance(w)
    e = energy(stages, iteration, iterations, gpus, cluster, w.usd_per_kwh, w.grid_kg_co2_per_kwh)
    critical = min(stages, key=lambda st: st.bubble_s)  # Report.breakdown
    iv = interval_of(w, prov, critical.host_overhead_s / iteration if iteration > 0 else 0.0)
    cost_usd = gpu_hours * w.usd_per_gpu_hour + (e.energy_cost_usd if w.include_energy else 0.0)
    gp = run_goodput(w, time_to_train)
    report = Report(
        model=model.name, cluster=cluster.name, gpu=gpu.name, plan=plan,
        iteration_time_s=iteration, stages=stages, peak_memory_bytes=peak, memory=mems[peak_stage],
        memory_capacity_bytes=gpu.hbm_capacity_bytes, fits=peak <= gpu.hbm_capacity_bytes,
        mfu=model_flops / (iteration * gpus * peak_flops), hfu=hw_flops / (iteration * gpus * peak_flops),
        tokens_per_s=tokens_per_iter / iteration, model_flops_per_iteration=model_flops,
        iterations=iterations, time_to_train_s=time_to_train, gpu_hours=gpu_hours,
        cost_usd=cost_usd, usd_per_gpu_hour=w.usd_per_gpu_hour, gpus_used=gpus,
        cost_model=cost.name, stack=stack.name, provenance=prov, extrapolated_ops=tuple(sorted(cost.extrapolated())),
        notes=(_notes(prov, w) + cost.notes() + ((iv.note,) if iv.note else ())
               + _convention_note(w, iteration, peak_flops, hw_flops)),
        iteration_time_lo_s=iteration * iv.lo_factor, iteration_time_hi_s=iteration * iv.hi_factor,
        time_to_train_lo_s=time_to_train * iv.lo_factor, time_to_train_hi_s=time_to_train * iv.hi_factor,
        cost_lo_usd=cost_usd * iv.lo_factor, cost_hi_usd=cost_usd * iv.hi_factor, interval_regime=iv.regime,
        energy_kwh_per_iteration=e.energy_kwh_per_iteration, energy_kwh=e.energy_kwh,
        avg_power_w_per_gpu=e.avg_power_w_per_gpu, co2_kg=e.co2_kg, energy_cost_usd=e.energy_cost_usd,
        goodput=gp.goodput, expected_time_to_train_s=gp.expected_time_s, expected_cost_usd=cost_usd / gp.goodput,
        expected_failures=gp.expected_failures, checkpoint_interval_s=gp.checkpoint_interval_s,
        checkpoint_write_s=gp.checkpoint_write_s)
    trace = None
    if keep_trace:
        trace = SimulationTrace(pipe.schedule, pipe.run, tuple(durations), tuple(t.events for t in tails), m,
                                tuple(sc.all_to_all()) if model.is_moe else (), tuple(sc.exposed_by_group()))
    return report, trace
