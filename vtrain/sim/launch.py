"""Price one pass (forward, or recompute + backward) of a model chunk: a kernel launch-queue recurrence.

The host issues kernels one after another (framework + launch time per kernel), the GPU runs them in
order as they arrive (TP, CP and EP collectives in stream order included). Small layers are host-bound (a
few ms per layer in Megatron), large ones GPU-bound, with the soft transition real runs show. A side
stream runs FSDP's per-layer gathers (prefetched one layer ahead) and reduce-scatters.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from vtrain.comm.placement import GroupPlacement
from vtrain.cost.base import CostModel
from vtrain.graph.blocks import PassOps
from vtrain.graph.cuda_graphs import Captured
from vtrain.graph.ops import Collective, FlashAttention, Gemm, Group, MemoryOp, Op, is_weight_grad

# (time on the compute stream, host issue time, exposed-communication part of that time, FLOPs, group index);
# group index SYNC marks a zero-length entry where the host waits for the GPU (a D2H copy of split sizes)
Timed = Tuple[float, float, float, float, int]
COMM_GROUPS = ("tp", "cp", "fsdp", "ep")  # exposed communication inside passes, by group (index + 1)
_GROUP_INDEX = {g: i + 1 for i, g in enumerate(COMM_GROUPS)}
_OF_GROUP = {Group.TP: 1, Group.CP: 2, Group.EP: 4, Group.ETP: 4}
SYNC = -1
_EP = _GROUP_INDEX["ep"] - 1
NO_SYNC_S = -1e30  # PassCost.sync_host_s of a pass without a host sync: its host may run ahead of the GPU


@dataclass(frozen=True, slots=True)
class PassCost:
    """One pass (forward, or recompute + backward) of one model chunk for one micro-batch.

    With the host starting to issue at h0 and the GPU free (and the pass's input arrived) at g0, the
    pass ends on the GPU at max(g0 + gpu_s + sync_lead_s, h0 + latency_s) and frees the host at
    max(h0 + host_s, g0 + sync_host_s): the launch-queue recurrence E_i = max(H_i, E_{i-1}) + g_i (with the
    host waiting for the GPU at a sync, H = max(H, E)) unrolls exactly to that max-plus form. A pass without a
    host sync has sync_lead_s 0 and sync_host_s NO_SYNC_S: a host that started early hides its excess.
    """

    gpu_compute_s: float  # kernel time (with the slowdown of overlapped communication)
    comm_s: float  # communication the compute stream waits for: in-stream collectives, exposed overlap parts
    latency_s: float  # host start to GPU end when the GPU is idle (host-bound path)
    host_s: float  # host time to issue the whole pass
    flops: float
    comm_by_group: Tuple[float, ...] = (0.0,) * len(COMM_GROUPS)  # comm_s split by COMM_GROUPS
    side_comm_s: float = 0.0  # busy time of the side stream (FSDP gathers and reduce-scatters)
    side_tail_s: float = 0.0  # side-stream work still running when the pass ends on the compute stream
    # a host sync inside the pass (dropless dispatch: vtrain.sim.host_sync): the host runs ahead of a busy GPU
    # only up to it, so the pass ends up to sync_lead_s after g0 + gpu_s and the host is free at g0 + sync_host_s
    sync_lead_s: float = 0.0
    sync_host_s: float = NO_SYNC_S

    @property
    def gpu_s(self) -> float:
        return self.gpu_compute_s + self.comm_s

    @property
    def ep_comm_s(self) -> float:
        """Of comm_s, the expert-parallel dispatch and combine."""
        return self.comm_by_group[_EP]

    @property
    def duration_s(self) -> float:
        """Wall time of the pass alone (host and GPU start together)."""
        return max(self.gpu_s, self.latency_s)

    @property
    def host_excess_s(self) -> float:
        """Time the GPU waited for the host to issue kernels."""
        return max(0.0, self.latency_s - self.gpu_s)

    def __add__(self, other: "PassCost") -> "PassCost":
        """Two passes back to back (a B pass and its W pass: the whole backward); their syncs compose as the
        engine runs two passes with the host far ahead (ends and host times measured from the first's g0)."""
        gpu = self.gpu_s + other.gpu_s
        first_end = self.gpu_s + self.sync_lead_s
        end = max(first_end + other.gpu_s + other.sync_lead_s, self.sync_host_s + other.latency_s)
        return PassCost(self.gpu_compute_s + other.gpu_compute_s, self.comm_s + other.comm_s,
                        self.latency_s + other.latency_s, self.host_s + other.host_s, self.flops + other.flops,
                        tuple(a + b for a, b in zip(self.comm_by_group, other.comm_by_group)),
                        self.side_comm_s + other.side_comm_s, other.side_tail_s, max(0.0, end - gpu),
                        max(self.sync_host_s + other.host_s, first_end + other.sync_host_s))


@dataclass(frozen=True, slots=True)
class SideStream:
    """Per-layer work of a repeated part on a second stream (FSDP / ZeRO-3, after FSDP2 and DeepSpeed):
    the layer's parameters are all-gathered one layer ahead (``gather_s``, prefetched while the previous
    layer computes; the first is exposed) and, in backward, its gradients reduce-scattered after it
    (``reduce_s``, not waited for until the end of the iteration). ``copy_s``: what the compute stream spends
    on each gathered layer before its kernels (FSDP2 copies the gathered buffer out into the parameters).
    ``slowdown``: the compute slowdown while the side stream's collectives run beside the kernels (their
    NCCL kernels hold SMs the GEMMs and attention would use: ``GpuSpec.overlap_slowdown``, the share a
    pipelined TP collective takes); such a kernel that starts while side-stream work is queued runs slower
    by that share for the part of it before the side stream is done. Memory-bound kernels (no FLOPs in
    the graph; the copy-out) are not slowed: they reach HBM bandwidth without every SM."""

    gather_s: float = 0.0
    reduce_s: float = 0.0
    copy_s: float = 0.0
    slowdown: float = 0.0


NO_SIDE = SideStream()
_IDLE = -1e30  # GPU free since long ago: the recurrence then yields the host-bound latency


class _LaunchQueue:
    """Asynchronous kernel launch: the host issues kernel i at H_i = H_{i-1} + host time; the GPU runs
    it at max(H_i, E_{i-1}) (stream order). NCCL collectives are enqueued the same way (the host does
    not wait for them); on the GPU they take their communication time in stream order, so the host
    hides them when it is the bottleneck. (A blocking variant, host waiting for every collective, fit
    the A100 measurements worse: 11.1% vs 8.9% MAPE.)"""

    __slots__ = ("host", "gpu", "compute", "comm", "flops", "groups", "side", "pending", "side_busy")

    def __init__(self, host_start_s: float = 0.0) -> None:
        self.host = host_start_s
        self.gpu = _IDLE
        self.compute = self.comm = self.flops = 0.0
        self.groups = [0.0] * (len(COMM_GROUPS) + 1)
        self.side = _IDLE  # when the side stream is free
        self.pending = _IDLE  # when the gather of the next layer completes
        self.side_busy = 0.0

    def state(self) -> Tuple[float, ...]:
        return (self.host, self.gpu, self.side, self.pending, self.compute, self.comm, self.flops, self.side_busy,
                *self.groups)

    def set_state(self, x: Sequence[float]) -> None:
        self.host, self.gpu, self.side, self.pending, self.compute, self.comm, self.flops, self.side_busy = x[:8]
        self.groups = list(x[8:])

    def _prefetch(self, gather_s: float, copy_s: float) -> None:
        """Wait for this layer's gather (and copy it out), then start the next layer's (the first of a pass:
        exposed)."""
        if self.pending == _IDLE:
            self.side = max(self.side, self.host) + gather_s
            self.pending = self.side
            self.side_busy += gather_s
        start = max(self.gpu, self.host)
        if self.pending > start:
            wait = self.pending - start
            self.comm += wait
            self.groups[_GROUP_INDEX["fsdp"]] += wait
            self.gpu = self.pending
        if copy_s:
            self.gpu = max(self.gpu, start) + copy_s
            self.compute += copy_s
        self.side = max(self.side, start) + gather_s
        self.pending = self.side
        self.side_busy += gather_s

    def run(self, timed: Sequence[Timed], side: SideStream) -> None:
        if side.gather_s:
            self._prefetch(side.gather_s, side.copy_s)
        host, gpu = self.host, self.gpu
        compute = comm = flops = 0.0
        groups = self.groups
        # the side stream is busy from before this layer's kernels until self.side (the previous layer's
        # reduce-scatter that spills over, then the next layer's gather): kernels started before then share the SMs
        busy_until = self.side if side.slowdown else _IDLE
        slow = side.slowdown
        for t, h, c, f, g in timed:
            if g == SYNC:  # a zero-length marker: the host waits for the GPU here
                host = host if host > gpu else gpu
                continue
            host += h
            begin = host if host > gpu else gpu
            if begin < busy_until and f > 0.0 and t > c:
                t += slow * min(t - c, busy_until - begin)
            gpu = begin + t
            comm += c
            compute += t - c
            flops += f
            if g:
                groups[g] += c
        if side.reduce_s:
            self.side = max(self.side, gpu) + side.reduce_s
            self.side_busy += side.reduce_s
        self.compute += compute
        self.comm += comm
        self.flops += flops
        self.host, self.gpu = host, gpu


def overlapped_s(compute_s: float, comm_s: float, chunks: int, slowdown: float) -> float:
    """A compute op pipelined with a collective split into ``chunks``: the longer of the two, plus one
    chunk of the shorter (pipeline fill/drain), and the compute slowed by ``slowdown`` while both run
    (the SMs the communication kernels take; Wang et al. 2022, "Overlap communication with dependent
    computation via decomposition", and TE userbuffers' design)."""
    both = min(compute_s, comm_s)
    return max(compute_s + slowdown * both, comm_s) + both / max(1, chunks)


def gated_s(compute_s: float, comm_s: float, chunks: int, slowdown: float) -> float:
    """A compute op whose first of ``chunks`` pieces runs beside a collective and whose rest waits for it
    (PyTorch's context parallelism all-gathers K/V while the first ring step attends to the local block):
    the longer of the first piece (slowed while both run) and the collective, then the rest."""
    first = compute_s / max(1, chunks)
    return max(first + slowdown * min(first, comm_s), comm_s) + compute_s - first


def chunked_gemm_s(op: Gemm, chunks: int, cost: CostModel) -> float:
    """A GEMM split along its token dimension into ``chunks`` GEMMs, one per piece of the collective it is
    pipelined with (TE userbuffers' split GEMMs; torchtitan's micro-pipelined async TP): each runs on 1/chunks
    of the rows (of the reduction for a weight gradient), so small layers lose tile and wave efficiency."""
    if is_weight_grad(op):  # dW = X^T dY: the tokens are the reduction dimension
        piece = replace(op, k=max(1, op.k // chunks))
    else:
        piece = replace(op, m=max(1, op.m // chunks))
    return chunks * cost.compute_time_s(piece)


def _same_input_gemms(items: Sequence[Op], j: int) -> List[int]:
    """The GEMMs after ``items[j]`` that multiply the same input (same rows and reduction: torchtitan's wk
    and wv after wq, w3 after w1), with only memory-bound ops (their weights' casts) between them."""
    first = items[j]
    assert isinstance(first, Gemm)
    out: List[int] = []
    k = j + 1
    while k < len(items) and isinstance(items[k], (MemoryOp, Gemm)):
        op = items[k]
        if isinstance(op, Gemm):
            if (op.m, op.k, op.batch, op.attention) != (first.m, first.k, first.batch, first.attention):
                break
            out.append(k)
        k += 1
    return out


def timed_ops(ops: PassOps | Sequence[Op], cost: CostModel, where: object, slowdown: float,
              captured: Optional[Captured] = None) -> List[Timed]:
    """Price each op of a pass; ``where(group)`` places a collective's group (:meth:`CommPlan.where`). A
    collective marked ``overlap`` merges with the GEMM or attention it is pipelined with. ``captured``: the
    ops replayed from a CUDA graph (:mod:`vtrain.graph.cuda_graphs`): each run of them costs the host one
    launch (``cudaGraphLaunch``, priced as one kernel's), their own launches none."""
    items = list(ops.ops if isinstance(ops, PassOps) else ops)
    place = where.where  # type: ignore[attr-defined]
    paired: Dict[int, int] = {}  # compute op index -> collective index overlapped with it
    group: Dict[int, List[int]] = {}  # an all-gather's first GEMM -> the GEMMs of the same input after it
    for i, op in enumerate(items):
        if isinstance(op, Collective) and op.overlap:
            step = -1 if op.overlap == "previous" else 1
            j = i + step
            while 0 <= j < len(items) and not isinstance(items[j], (Gemm, FlashAttention)):
                j += step
            if 0 <= j < len(items):
                paired[j] = i
                if step == 1 and isinstance(items[j], Gemm):
                    group[j] = _same_input_gemms(items, j)
    merged = set(paired.values()) | {k for ks in group.values() for k in ks}
    out: List[Timed] = []
    replayed = False  # the previous op was replayed from a graph: this one, if captured too, is in its launch
    for i, op in enumerate(items):
        if i in merged:
            continue
        if captured is not None:
            if captured(op):
                out.append(_replayed(_timed_op(i, op, items, paired, group, cost, place, slowdown), replayed,
                                     cost))
                replayed = True
                continue
            replayed = False
        out.extend(_timed_op(i, op, items, paired, group, cost, place, slowdown))
    return out


def _replayed(timed: List[Timed], in_launch: bool, cost: CostModel) -> Timed:
    """An op replayed from a CUDA graph: no host time of its own (one graph launch where a replay starts);
    a replayed collective cannot make the host wait (a graph holds no host sync)."""
    t, _, c, f, g = timed[-1]  # a host-sync marker before it dropped
    return (t, 0.0 if in_launch else cost.host_time_s(1), c, f, g)


def _timed_op(i: int, op: Op, items: Sequence[Op], paired: Dict[int, int], group: Dict[int, List[int]],
              cost: CostModel, place: Callable[[Group], GroupPlacement], slowdown: float) -> List[Timed]:
    """The timed entries of one op (a collective after a host sync: the SYNC marker, then the op)."""
    out: List[Timed] = []
    if isinstance(op, Collective):
        g = _OF_GROUP.get(op.group, 1)
        if op.host_sync:  # dropless dispatch: the host waits for the GPU before issuing it
            out.append((0.0, 0.0, 0.0, 0.0, SYNC))
        t_c = cost.collective_time_s(op, place(op.group))
        out.append((t_c, cost.collective_host_time_s(op), t_c, 0.0, g))
        return out
    if isinstance(op, MemoryOp) and op.host_sync:  # a blocking host-device copy first (graph.eager_paths)
        out.append((0.0, 0.0, 0.0, 0.0, SYNC))
    t = cost.compute_time_s(op)
    h = cost.host_time_s(cost.kernels_of(op))
    if i in paired:
        coll = items[paired[i]]
        assert isinstance(coll, Collective)
        t_c = cost.collective_time_s(coll, place(coll.group))
        flops = op.flops
        if isinstance(op, Gemm) and coll.chunks > 1:
            t = chunked_gemm_s(op, coll.chunks, cost)
        for k in group.get(i, ()):  # the fused all-gather-matmul runs every GEMM of the gathered input per chunk
            other = items[k]
            assert isinstance(other, Gemm)
            t += chunked_gemm_s(other, coll.chunks, cost) if coll.chunks > 1 else cost.compute_time_s(other)
            h += cost.host_time_s(cost.kernels_of(other))
            flops += other.flops
        first = coll.overlap == "first"  # only the first piece runs beside it (gated_s)
        total = (gated_s if first else overlapped_s)(t, t_c, coll.chunks, slowdown)
        beside = t / max(1, coll.chunks) if first else t  # the compute that runs (slowed) beside the collective
        exposed = max(0.0, total - t - slowdown * min(beside, t_c))
        out.append((total, h + cost.collective_host_time_s(coll), exposed, flops, _OF_GROUP.get(coll.group, 1)))
    else:
        out.append((t, h, 0.0, op.flops, 0))
    return out


Part = Tuple[List[Timed], int, SideStream]


PrefixMemo = Dict[Tuple[object, ...], Tuple[float, ...]]


def price_chunk(parts: Sequence[Part], host_start_s: float, memo: Optional[PrefixMemo] = None) -> PassCost:
    """Run the launch queue over (ops, repeat, side stream) parts. A repeated part (the transformer
    layers) reaches a periodic state after a few repeats; the rest is extrapolated exactly from the last
    period.

    Host and GPU resynchronise at every part and layer boundary: the host does not run ahead of the GPU
    into the next layer. The measured runs show it: per-layer costs add (the logits GEMM of the head
    is not hidden behind host-bound layers), and a queue that runs ahead across layers fits the 1,440
    A100 runs worse (8.7% vs 7.5% MAPE after refitting; README, Accuracy).

    ``memo`` (one per set of priced parts) keeps the queue state after each prefix of parts, so that
    chunks that start alike (the middle and the last stage's forward: the same layers, then the head)
    run their common prefix once."""
    q = _LaunchQueue(host_start_s)
    key: Tuple[object, ...] = (host_start_s,)
    for timed, repeat, side in parts:
        if memo is not None:
            key = (*key, id(timed), repeat, id(side))
            hit = memo.get(key)
            if hit is not None:
                q.set_state(hit)
                continue
        _run_part(q, timed, repeat, side)
        if memo is not None:
            memo[key] = q.state()
    end = max(q.gpu, 0.0)
    return PassCost(q.compute, q.comm, end, q.host, q.flops, tuple(q.groups[1:]), q.side_busy, max(0.0, q.side - end))


def _steady(delta: Tuple[float, ...], prev: Optional[Tuple[float, ...]], after: Tuple[float, ...]) -> bool:
    """A run's effect repeats for good: it equals the previous run's, and each of the host, the side stream
    and the pending gather either advances as far as the GPU (its gap to the GPU stays put) or ends at or
    before the GPU, where the next layer forgets it (the host resynchronises to the GPU; a gather or
    reduce-scatter starts after the GPU's position, a wait for an earlier gather is none). Equal but unlike
    advances of a side stream that ends ahead of the GPU (it falls further behind each layer) are a
    transient: the backlog grows until the GPU waits for it."""
    if prev is None or not all(abs(x - y) < 1e-12 for x, y in zip(delta[:4], prev[:4])):
        return False
    d_gpu, gpu = delta[1], after[1]
    return all(abs(delta[i] - d_gpu) < 1e-12 or after[i] <= gpu for i in (0, 2, 3))


def _period(delta: Tuple[float, ...], after: Tuple[float, ...]) -> Tuple[float, ...]:
    """What one more run adds to the state in the steady state: its delta, except that a position the
    next layer forgets (at or before the GPU's: the host, resynchronised to the GPU at the boundary; a
    side stream or gather that is done) moves with the GPU, keeping its gap, as running the layer does. A
    position never used (_IDLE) stays."""
    d = list(delta)
    for i in (0, 2, 3):
        if after[i] <= after[1] and after[i] != _IDLE:
            d[i] = delta[1]
    return tuple(d)


def _run_part(q: _LaunchQueue, timed: List[Timed], repeat: int, side: SideStream) -> None:
    """``repeat`` runs of one part; once a run's effect repeats (:func:`_steady`), the rest are added in
    closed form."""
    done = 0
    prev: Optional[Tuple[float, ...]] = None
    while done < repeat:
        if q.gpu > q.host:  # layer boundary: the host waits for the GPU (see price_chunk)
            q.host = q.gpu
        before = q.state()
        q.run(timed, side)
        done += 1
        after = q.state()
        delta = tuple(map(operator.sub, after, before))
        if _steady(delta, prev, after):
            k = repeat - done
            q.set_state([a + k * d for a, d in zip(after, _period(delta, after))])
            break
        prev = delta
