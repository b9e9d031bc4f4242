"""The end of an iteration after the last backward pass: gradient sync over DP (bucketed, overlapped with
the last micro-batch's backward when enabled), the tied-embedding sync, a global barrier (grad-norm
clipping and inf checks all-reduce over all ranks), the optimizer step and, with the distributed
optimizer, the parameter all-gather. Per stage, every instant from the stage's last pass to the end of
the iteration is accounted for (:class:`StageTail`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from vtrain.comm.placement import GroupPlacement
from vtrain.comm.plan import CommPlan, Stream
from vtrain.cost.base import CostModel
from vtrain.graph.ops import Collective, CollectiveKind, Group
from vtrain.sim.pipeline import PipelineResult
from vtrain.workload.partition import StagePartition
from vtrain.workload.plan import ParallelPlan

Event = Tuple[str, str, float, float]  # (stream, name, start, end)
_MAX_BUCKET_EVENTS = 32  # timeline: consecutive buckets drawn as one bar beyond this many per chunk


@dataclass(frozen=True, slots=True)
class StageTail:
    """Compute-stream time of one stage after its last pass, by what it waits for (all >= 0)."""

    dp_exposed_s: float  # waiting for the gradient reduction
    embedding_s: float  # the tied-embedding all-reduce
    sync_wait_s: float  # waiting for the other stages (embedding partner, global barrier, last stage done)
    optimizer_s: float
    param_gather_s: float  # distributed optimizer's parameter all-gather
    dp_busy_s: float  # DP stream busy (gradient reduction, embedding sync, parameter gather)
    events: Tuple[Event, ...]


def _bucketed_ready(coll: Collective, chunk: int, start_s: float, dur_s: float, cur: float, bucket_bytes: float,
                    bucket_time_s: float, n_b: int, keep_events: bool, events: List[Event]) -> float:
    """Buckets of the chunk's gradient become ready evenly over its last backward pass [start, start+dur]
    and go out one after another on the DP stream: bucket k starts at max(previous end, start + (k+1)·step).
    The recurrence has a closed form: its maximum is reached at the first or the last bucket."""
    step = dur_s / n_b
    end = max(cur + n_b * bucket_time_s, start_s + step + n_b * bucket_time_s, start_s + n_b * step + bucket_time_s)
    if keep_events:  # bars of `group` consecutive buckets, each priced by the same closed form
        group = max(1, math.ceil(n_b / _MAX_BUCKET_EVENTS))
        t = cur
        for k0 in range(0, n_b, group):
            k1 = min(n_b, k0 + group)
            first = max(t, start_s + (k0 + 1) * step)
            n = k1 - k0
            t = max(first + n * bucket_time_s, start_s + k1 * step + bucket_time_s)
            label = f"bucket{k0}" if n == 1 else f"buckets {k0}-{k1 - 1}"
            events.append((Stream.DATA_PARALLEL.value, f"dp {coll.kind.value} chunk{chunk} {label}", first, t))
    return end


def simulate_tail(pipe: PipelineResult, durations: Sequence[float], part: StagePartition, comm: CommPlan,
                  cost: CostModel, plan: ParallelPlan, drain_s: Sequence[float], keep_events: bool,
                  slowdown: float = 0.0) -> Tuple[float, List[StageTail]]:
    """(end of the iteration, per-stage tail). ``durations`` are the passes' compute-stream times;
    ``drain_s`` per stage: side-stream work (ZeRO-3 reduce-scatters) still running after the last pass.
    The optimizer steps the parameters each rank holds: 1/(dp_shard x cp) of them from ZeRO stage 1 on.
    ``slowdown``: the compute slowdown while a DP collective runs beside it (the SMs its NCCL kernels hold,
    ``GpuSpec.overlap_slowdown``): the buckets reduced during a chunk's last backward stretch that pass by
    that share of their time inside it, and an overlapped parameter gather stretches the next forward by that
    share of its hidden part; both are counted as exposed DP time."""
    p, cs = part.p, pipe.schedule
    reducers = plan.dp * plan.cp
    shard = float(plan.dp_shard * plan.cp if plan.sharding_stage >= 1 else 1)
    priced: Dict[Tuple[CollectiveKind, Group, float, int], float] = {}  # each size once (middle stages repeat)

    def dp_time(kind: Collective, nbytes: float, where: GroupPlacement = comm.dp_where) -> float:
        key = (kind.kind, kind.group, nbytes, id(where))
        t = priced.get(key)
        if t is None:
            t = priced[key] = cost.collective_time_s(
                Collective(kind.name, kind.kind, nbytes, kind.group, kind.group_size), where)
        return t

    Priced = Tuple[bool, Tuple[Tuple[Tuple[Collective, GroupPlacement, int, float], ...], ...]]
    rows: Dict[Tuple[int, int], Priced] = {}

    def reductions(s: int) -> Priced:
        """(whether the stage reduces anything, per chunk its reductions with bucket count and time per
        bucket); stages whose comm-plan rows are one object (equal sizes) share one value."""
        e_row = comm.expert_grad_reduce[s] if comm.expert_grad_reduce else None
        key = (id(comm.grad_reduce[s]), id(e_row))
        hit = rows.get(key)
        if hit is None:
            has = (reducers > 1 and any(c.bytes > 0 for c in comm.grad_reduce[s])) or bool(comm.expert_grad_reduce)
            chunks = []
            for c in range(part.v):
                out = []
                for coll, where in comm.grad_reductions(s, c):
                    n_b = max(1, math.ceil(coll.bytes / comm.bucket_bytes)) if comm.overlap_grad_reduce else 1
                    out.append((coll, where, n_b, dp_time(coll, coll.bytes / n_b, where)))  # x / 1 == x
                chunks.append(tuple(out))
            hit = rows[key] = (has, tuple(chunks))
        return hit

    ready: List[float] = []
    dp_busy = [0.0] * p
    events: List[List[Event]] = [[] for _ in range(p)]
    for s in range(p):
        end_s = pipe.stage_end[s]
        cur = end_s + drain_s[s]
        dp_busy[s] += drain_s[s]
        has_grads, per_chunk = reductions(s)
        if has_grads:
            cur = 0.0
            bwd_ends = pipe.last_bwd_end[s]
            chunks = sorted(zip(bwd_ends, range(part.v))) if part.v > 1 else ((bwd_ends[0], 0),)
            slowed = 0.0  # compute time the buckets reduced beside the last backward passes add to them so far
            for last_end, c in chunks:
                dur = durations[cs.dur_key[cs.last_bwd[s][c]]]
                if comm.overlap_grad_reduce and slowdown:
                    # the buckets go out from the first one's readiness (one step into the pass) on; the pass,
                    # and the readiness of its later buckets, stretch by the slowdown over that overlap
                    beside = sum(min(n_b * t_b, dur * (1.0 - 1.0 / n_b)) for _, _, n_b, t_b in per_chunk[c])
                    pass_start = last_end - dur + slowed
                    slowed += slowdown * min(beside, dur)
                    dur = last_end + slowed - pass_start
                    last_end += slowed
                for coll, where, n_b, t_b in per_chunk[c]:
                    if comm.overlap_grad_reduce:
                        cur = _bucketed_ready(coll, c, last_end - dur, dur, cur, comm.bucket_bytes, t_b, n_b,
                                              keep_events, events[s])
                        dp_busy[s] += n_b * t_b
                    else:
                        t = t_b
                        start = max(cur, end_s)
                        cur = start + t
                        dp_busy[s] += t
                        if keep_events:
                            events[s].append((Stream.DATA_PARALLEL.value, f"{coll.group.value} {coll.kind.value} "
                                              f"chunk{c}", start, cur))
            cur = max(cur, end_s + slowed + drain_s[s])
        ready.append(cur)
    dp_ready = list(ready)
    emb_wait = [0.0] * p
    emb_t = 0.0
    if comm.embedding_sync is not None:  # first and last stage all-reduce the tied word-embedding grad
        emb_t = cost.collective_time_s(comm.embedding_sync, comm.embedding_where)
        first, last = 0, p - 1
        start = max(ready[first], ready[last])
        for s in (first, last):
            emb_wait[s] = start - ready[s]
            ready[s] = start + emb_t
            dp_busy[s] += emb_t
            if keep_events:
                events[s].append((Stream.DATA_PARALLEL.value, "embedding grad all-reduce", start, start + emb_t))
    barrier = max(ready)
    ends, opt, ag = [], [], []
    edp = comm.edp_where.size
    for s in range(p):
        params = part.stage_params(s)
        steps = params / shard
        if comm.expert_grad_reduce and plan.sharding_stage >= 1:  # routed experts are sharded over edp
            experts = part.stage_expert_params(s)
            steps = (params - experts) / shard + experts / edp
        t_opt = cost.optimizer_time_s(steps)
        gather = comm.param_gather[s]
        t_ag = dp_time(gather, gather.bytes) if gather is not None else 0.0
        # hidden behind the next forward but its first piece: Megatron's overlapped gather (a bucket), FSDP2's
        # layer-by-layer gather of the parameters it keeps (a layer)
        exposed: Optional[float] = None  # bytes of that first piece (None: the whole gather is exposed)
        if plan.overlap_param_gather and reducers > 1:
            exposed = min(params, comm.bucket_bytes / plan.grad_bytes) * plan.dtype_bytes
        elif comm.prefetch_gather_bytes and gather is not None:
            exposed = min(gather.bytes, comm.prefetch_gather_bytes)
        if exposed is not None:
            whole = t_ag
            t_ag = dp_time(Collective("dp.param_gather.first", CollectiveKind.ALL_GATHER, exposed, Group.DP,
                                      reducers), exposed)
            beside = slowdown * max(0.0, whole - t_ag)  # the rest runs beside the next forward, slowing it
        else:
            beside = 0.0
        e_gather = comm.expert_param_gather[s] if comm.expert_param_gather else None
        if e_gather is not None:
            t_ag += dp_time(e_gather, e_gather.bytes, comm.edp_where)
        dp_busy[s] += t_ag
        if keep_events:
            events[s].append((Stream.COMPUTE.value, "optimizer step", barrier, barrier + t_opt))
            if t_ag:
                events[s].append((Stream.DATA_PARALLEL.value, "dp param all-gather", barrier + t_opt,
                                  barrier + t_opt + t_ag))
        t_ag += beside  # exposed: the gather's first piece, and what the rest costs the next forward
        opt.append(t_opt)
        ag.append(t_ag)
        ends.append(barrier + t_opt + t_ag)
    end = max(ends)
    tails = []
    for s in range(p):
        embedding = (ready[s] - dp_ready[s] - emb_wait[s]) if comm.embedding_sync is not None else 0.0
        sync = emb_wait[s] + (barrier - ready[s]) + (end - ends[s])
        tails.append(StageTail(dp_exposed_s=dp_ready[s] - pipe.stage_end[s], embedding_s=embedding, sync_wait_s=sync,
                               optimizer_s=opt[s], param_gather_s=ag[s], dp_busy_s=dp_busy[s],
                               events=tuple(events[s])))
    return end, tails

