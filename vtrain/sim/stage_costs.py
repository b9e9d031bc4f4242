"""Price the op graph per pipeline stage and model chunk: the durations the schedule engine runs.

A pass (forward, or recompute + backward) of a chunk is priced by a kernel launch-queue recurrence: the
host issues kernels one after another (framework + launch time per kernel), the GPU runs them in
order as they arrive (TP collectives included). Small layers are host-bound (a few
ms per layer in Megatron), large ones GPU-bound, with the soft transition real runs show.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from vtrain.comm.plan import CommPlan
from vtrain.cost.base import CostModel
from vtrain.graph.builder import ModelGraph, PassOps
from vtrain.graph.ops import Collective, Gemm, Group, Op
from vtrain.workload.partition import StagePartition

Timed = Tuple[float, float, int, float]  # (GPU time, host issue time, 0 | TP_COMM | EP_COMM, FLOPs)
_EP_GROUPS = frozenset((Group.EP, Group.ETP))
TP_COMM, EP_COMM, EP_SYNC = 1, 2, 3  # a collective on the compute stream; expert-parallel; ... after a host sync


@dataclass(frozen=True, slots=True)
class PassCost:
    """One pass (forward, or recompute + backward) of one model chunk for one micro-batch.

    With the host starting to issue at h0 and the GPU free (and the pass's input arrived) at g0, the
    pass ends on the GPU at max(g0 + gpu_s, h0 + latency_s): the launch-queue recurrence
    E_i = max(H_i, E_{i-1}) + g_i unrolls exactly to that max-plus form.
    """

    gpu_compute_s: float  # sum of kernel times
    comm_s: float  # TP collectives on the compute stream (exposed: the next kernel waits for them)
    latency_s: float  # host start to GPU end when the GPU is idle (host-bound path)
    host_s: float  # host time to issue the whole pass
    flops: float
    ep_comm_s: float = 0.0  # of comm_s, the expert-parallel dispatch/combine (exposed)

    @property
    def gpu_s(self) -> float:
        return self.gpu_compute_s + self.comm_s

    @property
    def duration_s(self) -> float:
        """Wall time of the pass alone (host and GPU start together)."""
        return max(self.gpu_s, self.latency_s)

    def __add__(self, other: "PassCost") -> "PassCost":
        """Two passes back to back (a B pass and its W pass: the whole backward)."""
        return PassCost(self.gpu_compute_s + other.gpu_compute_s, self.comm_s + other.comm_s,
                        self.latency_s + other.latency_s, self.host_s + other.host_s, self.flops + other.flops,
                        self.ep_comm_s + other.ep_comm_s)

    @property
    def host_excess_s(self) -> float:
        """Time the GPU waited for the host to issue kernels."""
        return max(0.0, self.latency_s - self.gpu_s)


_IDLE = -1e30  # GPU free since long ago: the recurrence then yields the host-bound latency


class _LaunchQueue:
    """Asynchronous kernel launch: the host issues kernel i at H_i = H_{i-1} + host time; the GPU runs
    it at max(H_i, E_{i-1}) (stream order). NCCL collectives are enqueued the same way (the host does
    not wait for them); on the GPU they take their communication time in stream order, so the host
    hides them when it is the bottleneck. (A blocking variant, host waiting for every collective, fit
    the A100 measurements worse: 11.1% vs 8.9% MAPE.)"""

    __slots__ = ("host", "gpu", "compute", "comm", "flops", "ep")

    def __init__(self, host_start_s: float = 0.0) -> None:
        self.host = host_start_s
        self.gpu = _IDLE
        self.compute = self.comm = self.flops = self.ep = 0.0

    def run(self, timed: Sequence[Timed]) -> None:
        host, gpu = self.host, self.gpu
        compute = comm = flops = ep = 0.0
        for t, h, is_comm, f in timed:
            host += h
            gpu = (host if host > gpu else gpu) + t
            if is_comm:
                comm += t
                if is_comm > TP_COMM:
                    ep += t
                    if is_comm == EP_SYNC:  # a zero-length marker: the host waits for the GPU here
                        host = gpu
            else:
                compute += t
            flops += f
        self.compute += compute
        self.comm += comm
        self.flops += flops
        self.ep += ep
        self.host, self.gpu = host, gpu


def _timed(ops: PassOps | Sequence[Op], cost: CostModel, comm: CommPlan) -> List[Timed]:
    out: List[Timed] = []
    tp_where = comm.tp_where
    for op in (ops.ops if isinstance(ops, PassOps) else ops):
        if isinstance(op, Collective):
            if op.group in _EP_GROUPS:
                kind, where = EP_COMM, comm.where(op.group)
                if op.host_sync:  # dropless dispatch: the host waits for the GPU before issuing it
                    out.append((0.0, 0.0, EP_SYNC, 0.0))
            else:
                kind, where = TP_COMM, tp_where
            out.append((cost.collective_time_s(op, where), cost.collective_host_time_s(op), kind, 0.0))
        else:
            out.append((cost.compute_time_s(op), cost.host_time_s(op.kernels), 0, op.flops))
    return out


def is_weight_grad(op: Op) -> bool:
    """A W pass op: a weight-gradient GEMM or the embedding's gradient accumulation."""
    return op.name.endswith(".wgrad") and isinstance(op, Gemm) or op.name == "embedding.grad"


def _split(ops: PassOps, cost: CostModel, comm: CommPlan) -> Tuple[List[Timed], List[Timed]]:
    """(B, W) of a backward pass: the input-gradient ops and the weight-gradient ops."""
    return (_timed([op for op in ops.ops if not is_weight_grad(op)], cost, comm),
            _timed([op for op in ops.ops if is_weight_grad(op)], cost, comm))


def price_chunk(parts: Sequence[Tuple[List[Timed], int]], host_start_s: float) -> PassCost:
    """Run the launch queue over (ops, repeat) parts. A repeated part (the transformer layers) reaches a
    periodic state after a few repeats; the rest is extrapolated exactly from the last period.

    Host and GPU resynchronise at every part and layer boundary: the host does not run ahead of the GPU
    into the next layer. The measured runs show it: per-layer costs add (the logits GEMM of the head
    is not hidden behind host-bound layers), and a queue that runs ahead across layers fits the 1,440
    A100 runs worse (8.7% vs 7.5% MAPE after refitting; README, Accuracy)."""
    q = _LaunchQueue(host_start_s)
    for timed, repeat in parts:
        done = 0
        prev = None
        while done < repeat:
            if q.gpu > q.host:  # layer boundary: the host waits for the GPU (see price_chunk)
                q.host = q.gpu
            before = (q.host, q.gpu, q.compute, q.comm, q.flops)
            q.run(timed)
            done += 1
            delta = tuple(a - b for a, b in zip((q.host, q.gpu, q.compute, q.comm, q.flops), before))
            if prev is not None and abs(delta[0] - prev[0]) < 1e-12 and abs(delta[1] - prev[1]) < 1e-12:
                k = repeat - done
                q.host, q.gpu = q.host + k * delta[0], q.gpu + k * delta[1]
                q.compute, q.comm, q.flops = q.compute + k * delta[2], q.comm + k * delta[3], q.flops + k * delta[4]
                break
            prev = delta
    return PassCost(q.compute, q.comm, max(q.gpu, 0.0), q.host, q.flops, q.ep)


@dataclass(frozen=True, slots=True)
class StageCosts:
    """Per (stage, chunk): forward and backward(+recompute) pass costs; per boundary: p2p times."""

    forward: Tuple[Tuple[PassCost, ...], ...]  # [stage][chunk]
    backward: Tuple[Tuple[PassCost, ...], ...]  # recompute + backward (input gradient only when split)
    p2p_fwd_s: Tuple[float, ...]  # boundary into position q (q = 0..P-1; 0 unused)
    p2p_bwd_s: Tuple[float, ...]  # boundary out of position q+1 into q
    weight: Tuple[Tuple[PassCost, ...], ...] = ()  # [stage][chunk]: the W passes of a B/W-split schedule
    fused: Tuple[Tuple[Tuple[PassCost, ...], ...], ...] = ()  # [stage][f chunk][b chunk]: overlapped pairs

    def _flat(self, attr: str) -> List[float]:
        """Flat list indexed like CompiledSchedule.dur_key: stage·kinds·v + kind·v + chunk, then the fused
        pairs and a zero-length wait (:func:`vtrain.sim.schedule.fused_key`)."""
        out: List[float] = []
        for s, (fwd, bwd) in enumerate(zip(self.forward, self.backward)):
            out += [getattr(c, attr) for c in fwd] + [getattr(c, attr) for c in bwd]
            if self.weight:
                out += [getattr(c, attr) for c in self.weight[s]]
        if self.fused:
            out += [getattr(c, attr) for row in self.fused for cb in row for c in cb] + [0.0]
        return out

    def durations(self) -> List[float]:
        """Compute-stream time of each pass (the engine's ``gpu_s``)."""
        return self._flat("gpu_s")

    def all_to_all(self) -> List[float]:
        """Expert-parallel all-to-all time of each pass (a fused pair: both passes' all-to-alls, hidden or not)."""
        out = self._flat("ep_comm_s")
        if self.fused:
            n = len(out) - 1 - sum(len(cb) for row in self.fused for cb in row)
            whole = [[b + w for b, w in zip(self.backward[s], self.weight[s])] if self.weight else self.backward[s]
                     for s in range(len(self.forward))]
            out[n:-1] = [f.ep_comm_s + whole[s][cb].ep_comm_s for s, f_row in enumerate(self.forward)
                         for f in f_row for cb in range(len(f_row))]
        return out

    def latencies(self) -> List[float]:
        return self._flat("latency_s")

    def host_times(self) -> List[float]:
        return self._flat("host_s")

    def lags(self) -> List[float]:
        out: List[float] = []
        for f, b in zip(self.p2p_fwd_s, self.p2p_bwd_s):
            out += [f, b]
        return out


def _p2p(part: StagePartition, comm: CommPlan, cost: CostModel) -> Tuple[List[float], List[float]]:
    gather_s = cost.collective_time_s(comm.p2p_gather, comm.tp_where) if comm.p2p_gather is not None else 0.0
    p2p_f = [0.0] * part.positions
    p2p_b = [0.0] * part.positions
    for q in range(1, part.positions):
        msg = comm.boundary[q]
        if msg is not None:  # none into a chain's first position or between two chunks of one stage
            p2p_f[q] = p2p_b[q - 1] = cost.collective_time_s(msg, comm.boundary_where[q]) + gather_s
    return p2p_f, p2p_b


def _dense_stage_costs(part: StagePartition, comm: CommPlan, cost: CostModel, microbatch_overhead_s: float,
                       layer_f: List[Timed], layer_b: List[Timed], emb_f: List[Timed], emb_b: List[Timed],
                       head_f: List[Timed], head_b: List[Timed]) -> StageCosts:
    """A dense model on a schedule without B/W split or fused pairs: embedding, layers, head per chunk."""
    priced: Dict[Tuple[bool, bool, int], Tuple[PassCost, PassCost]] = {}
    forward, backward = [], []
    for s in range(part.p):
        f_row, b_row = [], []
        for c in range(part.v):
            q = part.position(s, c)
            key = (part.is_first(q), part.is_last(q), part.layers[q])
            if key not in priced:
                first, is_last, n = key
                fparts = ([(emb_f, 1)] if first else []) + [(layer_f, n)] + ([(head_f, 1)] if is_last else [])
                bparts = ([(head_b, 1)] if is_last else []) + [(layer_b, n)] + ([(emb_b, 1)] if first else [])
                priced[key] = (price_chunk(fparts, microbatch_overhead_s), price_chunk(bparts, 0.0))
            f, b = priced[key]
            f_row.append(f)
            b_row.append(b)
        forward.append(tuple(f_row))
        backward.append(tuple(b_row))
    p2p_f, p2p_b = _p2p(part, comm, cost)
    return StageCosts(tuple(forward), tuple(backward), tuple(p2p_f), tuple(p2p_b))


def build_stage_costs(graph: ModelGraph, part: StagePartition, comm: CommPlan, cost: CostModel,
                      microbatch_overhead_s: float, split: bool = False,
                      fuse: Optional[Tuple[float]] = None) -> StageCosts:
    """``split``: price B (recompute + input gradient) and W (weight gradient) apart; ``fuse``: (SM share
    of the dispatcher,) to price fused forward/backward pairs (:func:`vtrain.sim.overlap.fused_pass`)."""
    p, v = part.p, part.v
    layer_f = _timed(graph.layer.forward, cost, comm)
    layer_b = _timed(graph.layer.recompute, cost, comm) + _timed(graph.layer.backward, cost, comm)
    emb_f, emb_b = _timed(graph.embedding.forward, cost, comm), _timed(graph.embedding.backward, cost, comm)
    head_f, head_b = _timed(graph.head.forward, cost, comm), _timed(graph.head.backward, cost, comm)
    if not split and fuse is None and graph.moe_layer is None and graph.mtp is None:
        return _dense_stage_costs(part, comm, cost, microbatch_overhead_s, layer_f, layer_b, emb_f, emb_b, head_f,
                                  head_b)
    comps = {"layer": graph.layer, "emb": graph.embedding, "head": graph.head, "moe": graph.moe_layer,
             "mtp": graph.mtp}
    bw: Dict[str, Tuple[List[Timed], List[Timed]]] = {}
    for name, g in comps.items():
        if g is not None and split:
            b_ops, w_ops = _split(g.backward, cost, comm)
            bw[name] = (_timed(g.recompute, cost, comm) + b_ops, w_ops)
    moe_f = _timed(graph.moe_layer.forward, cost, comm) if graph.moe_layer else []
    moe_b = (_timed(graph.moe_layer.recompute, cost, comm) + _timed(graph.moe_layer.backward, cost, comm)
             if graph.moe_layer else [])
    mtp_f = _timed(graph.mtp.forward, cost, comm) if graph.mtp else []
    mtp_b = _timed(graph.mtp.backward, cost, comm) if graph.mtp else []
    mtp_moe = graph.moe_layer is not None and part.mtp_layers and part.mtp_expert_params > 0
    priced: Dict[Tuple[bool, bool, int, int], Tuple[PassCost, PassCost, Optional[PassCost]]] = {}
    forward, backward, weight = [], [], []
    for s in range(p):
        f_row, b_row, w_row = [], [], []
        for c in range(v):
            q = part.position(s, c)
            key = (part.is_first(q), part.is_last(q), part.layers[q], part.moe_at(q))
            if key not in priced:
                first, is_last, n, nm = key
                k = part.mtp_layers if is_last else 0
                mtp_layer = (moe_f, moe_b, "moe") if mtp_moe else (layer_f, layer_b, "layer")

                def parts(which: int) -> Tuple[List[Tuple[List[Timed], int]], List[Tuple[List[Timed], int]]]:
                    """(forward, backward) parts; which: 0 whole backward, 1 its B, 2 its W."""
                    def b_of(name: str, whole: List[Timed]) -> List[Timed]:
                        return whole if which == 0 or name not in bw else bw[name][which - 1]
                    fp = [(emb_f, int(first)), (layer_f, n - nm), (moe_f, nm), (mtp_f, k), (mtp_layer[0], k),
                          (head_f, int(is_last) * (1 + k))]
                    bp = [(b_of("head", head_b), int(is_last) * (1 + k)), (b_of(mtp_layer[2], mtp_layer[1]), k),
                          (b_of("mtp", mtp_b), k), (b_of("moe", moe_b), nm), (b_of("layer", layer_b), n - nm),
                          (b_of("emb", emb_b), int(first))]
                    return [x for x in fp if x[1] > 0], [x for x in bp if x[1] > 0]
                fparts, bparts = parts(0)
                if split:
                    priced[key] = (price_chunk(fparts, microbatch_overhead_s), price_chunk(parts(1)[1], 0.0),
                                   price_chunk(parts(2)[1], 0.0))
                else:
                    priced[key] = (price_chunk(fparts, microbatch_overhead_s), price_chunk(bparts, 0.0), None)
            f, b, w = priced[key]
            f_row.append(f)
            b_row.append(b)
            if w is not None:
                w_row.append(w)
        forward.append(tuple(f_row))
        backward.append(tuple(b_row))
        weight.append(tuple(w_row))
    p2p_f, p2p_b = _p2p(part, comm, cost)
    fused: Tuple[Tuple[Tuple[PassCost, ...], ...], ...] = ()
    if fuse is not None:
        from vtrain.sim.overlap import fused_pass

        whole = [[b + w for b, w in zip(backward[s], weight[s])] if split else list(backward[s]) for s in range(p)]
        fused = tuple(tuple(tuple(fused_pass(forward[s][cf], whole[s][cb], fuse[0]) for cb in range(v))
                            for cf in range(v)) for s in range(p))
    return StageCosts(tuple(forward), tuple(backward), tuple(p2p_f), tuple(p2p_b),
                      tuple(weight) if split else (), fused)
