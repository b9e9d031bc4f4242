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


Bucketed = Tuple[Collective, GroupPlacement, int, float]  # a reduction, its group, its buckets, time per bucket
Reductions = Tuple[bool, Tuple[Tuple[Bucketed, ...], ...]]  # (reduces anything, per chunk its reductions)


class _Pricer:
    """The iteration-end collectives of one comm plan, each size priced once (middle stages repeat)."""

    __slots__ = ("comm", "cost", "reducers", "_times", "_rows")

    def __init__(self, comm: CommPlan, cost: CostModel, reducers: int) -> None:
        self.comm, self.cost, self.reducers = comm, cost, reducers
        self._times: Dict[Tuple[CollectiveKind, Group, float, int], float] = {}
        self._rows: Dict[Tuple[int, int], Reductions] = {}

    def time_s(self, coll: Collective, nbytes: float, where: Optional[GroupPlacement] = None) -> float:
        """``coll`` of ``nbytes`` over ``where`` (default: the DP group)."""
        where = self.comm.dp_where if where is None else where
        key = (coll.kind, coll.group, nbytes, id(where))
        t = self._times.get(key)
        if t is None:
            t = self._times[key] = self.cost.collective_time_s(
                Collective(coll.name, coll.kind, nbytes, coll.group, coll.group_size), where)
        return t

    def reductions(self, s: int, v: int) -> Reductions:
        """Stage ``s``'s gradient reductions, per chunk with bucket count and time per bucket; stages whose
        comm-plan rows are one object (equal sizes) share one value."""
        comm = self.comm
        e_row = comm.expert_grad_reduce[s] if comm.expert_grad_reduce else None
        key = (id(comm.grad_reduce[s]), id(e_row))
        hit = self._rows.get(key)
        if hit is None:
            has = (self.reducers > 1 and any(c.bytes > 0 for c in comm.grad_reduce[s])) or bool(comm.expert_grad_reduce)
            chunks = []
            for c in range(v):
                out = []
                for coll, where in comm.grad_reductions(s, c):
                    n_b = max(1, math.ceil(coll.bytes / comm.bucket_bytes)) if comm.overlap_grad_reduce else 1
                    out.append((coll, where, n_b, self.time_s(coll, coll.bytes / n_b, where)))  # x / 1 == x
                chunks.append(tuple(out))
            hit = self._rows[key] = (has, tuple(chunks))
        return hit


def _grad_sync(s: int, pipe: PipelineResult, durations: Sequence[float], comm: CommPlan,
               per_chunk: Sequence[Tuple[Bucketed, ...]], drain_s: float, slowdown: float, keep_events: bool,
               events: List[Event]) -> Tuple[float, float]:
    """(when stage ``s``'s gradient reductions end, the DP-stream time they take). Overlapped: each chunk's
    buckets go out during its last backward pass (:func:`_bucketed_ready`), which the buckets beside it
    stretch by ``slowdown``; else one reduction after another once the stage's last pass is done."""
    end_s, cs = pipe.stage_end[s], pipe.schedule
    cur, busy = 0.0, 0.0 + drain_s
    bwd_ends = pipe.last_bwd_end[s]
    chunks = sorted(zip(bwd_ends, range(len(per_chunk)))) if len(per_chunk) > 1 else ((bwd_ends[0], 0),)
    slowed = 0.0  # compute time the buckets reduced beside the last backward passes add to them so far
    for last_end, c in chunks:
        dur = durations[cs.dur_key[cs.last_bwd[s][c]]]
        if comm.overlap_grad_reduce and slowdown:
            # the buckets go out from the first one's readiness (one step into the pass) on; the pass, and the
            # readiness of its later buckets, stretch by the slowdown over that overlap
            beside = sum(min(n_b * t_b, dur * (1.0 - 1.0 / n_b)) for _, _, n_b, t_b in per_chunk[c])
            pass_start = last_end - dur + slowed
            slowed += slowdown * min(beside, dur)
            dur = last_end + slowed - pass_start
            last_end += slowed
        for coll, _, n_b, t_b in per_chunk[c]:
            if comm.overlap_grad_reduce:
                cur = _bucketed_ready(coll, c, last_end - dur, dur, cur, comm.bucket_bytes, t_b, n_b, keep_events,
                                      events)
                busy += n_b * t_b
                continue
            start = max(cur, end_s)
            cur = start + t_b
            busy += t_b
            if keep_events:
                events.append((Stream.DATA_PARALLEL.value, f"{coll.group.value} {coll.kind.value} chunk{c}", start,
                               cur))
    return max(cur, end_s + slowed + drain_s), busy


def _embedding_sync(comm: CommPlan, cost: CostModel, ready: List[float], dp_busy: List[float], keep_events: bool,
                    events: List[List[Event]]) -> List[float]:
    """First and last stage all-reduce the tied word-embedding gradient once both are ready: ``ready`` moves to
    its end; per stage the wait for the partner."""
    p = len(ready)
    emb_wait = [0.0] * p
    if comm.embedding_sync is None:
        return emb_wait
    emb_t = cost.collective_time_s(comm.embedding_sync, comm.embedding_where)
    first, last = 0, p - 1
    start = max(ready[first], ready[last])
    for s in (first, last):
        emb_wait[s] = start - ready[s]
        ready[s] = start + emb_t
        dp_busy[s] += emb_t
        if keep_events:
            events[s].append((Stream.DATA_PARALLEL.value, "embedding grad all-reduce", start, start + emb_t))
    return emb_wait


def _optimizer_step(s: int, part: StagePartition, comm: CommPlan, plan: ParallelPlan, pricer: _Pricer,
                    slowdown: float) -> Tuple[float, float, float]:
    """(optimizer step, parameter gather on the DP stream, exposed parameter gather) of stage ``s``. The
    optimizer steps the parameters each rank holds: 1/(dp_shard x cp) from ZeRO stage 1 on, routed experts
    1/edp. Megatron's overlapped gather hides all but its first bucket behind the next forward, FSDP2's
    layer-by-layer gather of the parameters it keeps all but a layer; what runs beside the forward slows it
    by ``slowdown`` of its time and counts as exposed."""
    params = part.stage_params(s)
    shard = float(plan.dp_shard * plan.cp if plan.sharding_stage >= 1 else 1)
    steps = params / shard
    if comm.expert_grad_reduce and plan.sharding_stage >= 1:  # routed experts are sharded over edp
        experts = part.stage_expert_params(s)
        steps = (params - experts) / shard + experts / comm.edp_where.size
    t_opt = pricer.cost.optimizer_time_s(steps)
    gather = comm.param_gather[s]
    t_ag = pricer.time_s(gather, gather.bytes) if gather is not None else 0.0
    exposed: Optional[float] = None  # bytes of the first piece (None: the whole gather is exposed)
    if plan.overlap_param_gather and pricer.reducers > 1:
        exposed = min(params, comm.bucket_bytes / plan.grad_bytes) * plan.dtype_bytes
    elif comm.prefetch_gather_bytes and gather is not None:
        exposed = min(gather.bytes, comm.prefetch_gather_bytes)
    beside = 0.0
    if exposed is not None:
        whole = t_ag
        t_ag = pricer.time_s(Collective("dp.param_gather.first", CollectiveKind.ALL_GATHER, exposed, Group.DP,
                                        pricer.reducers), exposed)
        beside = slowdown * max(0.0, whole - t_ag)  # the rest runs beside the next forward, slowing it
    e_gather = comm.expert_param_gather[s] if comm.expert_param_gather else None
    if e_gather is not None:
        t_ag += pricer.time_s(e_gather, e_gather.bytes, comm.edp_where)
    return t_opt, t_ag, t_ag + beside


def simulate_tail(pipe: PipelineResult, durations: Sequence[float], part: StagePartition, comm: CommPlan,
                  cost: CostModel, plan: ParallelPlan, drain_s: Sequence[float], keep_events: bool,
                  slowdown: float = 0.0) -> Tuple[float, List[StageTail]]:
    """(end of the iteration, per-stage tail). ``durations`` are the passes' compute-stream times;
    ``drain_s`` per stage: side-stream work (ZeRO-3 reduce-scatters) still running after the last pass.
    ``slowdown``: the compute slowdown while a DP collective runs beside it (the SMs its NCCL kernels hold,
    ``GpuSpec.overlap_slowdown``): the buckets reduced during a chunk's last backward stretch that pass by
    that share of their time inside it, and an overlapped parameter gather stretches the next forward by that
    share of its hidden part; both are counted as exposed DP time."""
    p = part.p
    pricer = _Pricer(comm, cost, plan.dp * plan.cp)
    ready: List[float] = []
    dp_busy: List[float] = []
    events: List[List[Event]] = [[] for _ in range(p)]
    for s in range(p):  # the gradient reductions
        has_grads, per_chunk = pricer.reductions(s, part.v)
        if has_grads:
            cur, busy = _grad_sync(s, pipe, durations, comm, per_chunk, drain_s[s], slowdown, keep_events, events[s])
        else:
            cur, busy = pipe.stage_end[s] + drain_s[s], 0.0 + drain_s[s]
        ready.append(cur)
        dp_busy.append(busy)
    dp_ready = list(ready)
    emb_wait = _embedding_sync(comm, cost, ready, dp_busy, keep_events, events)
    barrier = max(ready)  # grad-norm clipping and inf checks all-reduce over all ranks
    ends, opt, ag = [], [], []
    for s in range(p):
        t_opt, t_ag, exposed_ag = _optimizer_step(s, part, comm, plan, pricer, slowdown)
        dp_busy[s] += t_ag
        if keep_events:
            events[s].append((Stream.COMPUTE.value, "optimizer step", barrier, barrier + t_opt))
            if t_ag:
                events[s].append((Stream.DATA_PARALLEL.value, "dp param all-gather", barrier + t_opt,
                                  barrier + t_opt + t_ag))
        opt.append(t_opt)
        ag.append(exposed_ag)
        ends.append(barrier + t_opt + exposed_ag)
    end = max(ends)
    tails = []
    for s in range(p):
        embedding = (ready[s] - dp_ready[s] - emb_wait[s]) if comm.embedding_sync is not None else 0.0
        sync = emb_wait[s] + (barrier - ready[s]) + (end - ends[s])
        tails.append(StageTail(dp_exposed_s=dp_ready[s] - pipe.stage_end[s], embedding_s=embedding, sync_wait_s=sync,
                               optimizer_s=opt[s], param_gather_s=ag[s], dp_busy_s=dp_busy[s],
                               events=tuple(events[s])))
    return end, tails
