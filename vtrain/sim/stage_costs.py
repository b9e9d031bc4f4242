"""Price the op graph per pipeline stage and model chunk: the durations the schedule engine runs (each
pass priced by the launch queue of :mod:`vtrain.sim.launch`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from vtrain.comm.plan import CommPlan
from vtrain.cost.base import CostModel
from vtrain.graph.blocks import ComponentGraph, ModelGraph, PassOps
from vtrain.graph.cuda_graphs import captured_ops
from vtrain.graph.ops import Op, is_weight_grad
from vtrain.sim.host_sync import price_pass
from vtrain.sim.launch import NO_SIDE, NO_SYNC_S, Part, PassCost, PrefixMemo, SideStream, Timed, price_chunk, timed_ops
from vtrain.sim.overlap import fused_pass
from vtrain.sim.schedule_nodes import dense_layer_nodes, moe_layer_nodes
from vtrain.workload.partition import StagePartition

__all__ = ["PassCost", "StageCosts", "price_chunk"]


@dataclass(frozen=True, slots=True)
class StageCosts:
    """Per (stage, chunk): forward and backward(+recompute) pass costs; per boundary: p2p times."""

    forward: Tuple[Tuple[PassCost, ...], ...]  # [stage][chunk]
    backward: Tuple[Tuple[PassCost, ...], ...]  # recompute + backward (input gradient only when split)
    p2p_fwd_s: Tuple[float, ...]  # boundary into position q (q = 0..P-1; 0 unused)
    p2p_bwd_s: Tuple[float, ...]  # boundary out of position q+1 into q
    weight: Tuple[Tuple[PassCost, ...], ...] = ()  # [stage][chunk]: the W passes of a B/W-split schedule
    fused: Tuple[Tuple[Tuple[PassCost, ...], ...], ...] = ()  # [stage][f chunk][b chunk]: overlapped pairs

    def passes(self) -> List[PassCost]:
        """Every pass in the engine's duration order, CompiledSchedule.dur_key: stage·kinds·v + kind·v +
        chunk, then the fused pairs (:func:`vtrain.sim.schedule.fused_key`); the zero-length wait after
        them is not included."""
        out: List[PassCost] = []
        for s, (fwd, bwd) in enumerate(zip(self.forward, self.backward)):
            out += fwd
            out += bwd
            if self.weight:
                out += self.weight[s]
        if self.fused:
            out += [c for row in self.fused for cb in row for c in cb]
        return out

    def _flat(self, attr: str) -> List[float]:
        """One attribute of each pass in duration order (and the wait's 0 after fused pairs)."""
        return [getattr(c, attr) for c in self.passes()] + ([0.0] if self.fused else [])

    def engine_inputs(self) -> Tuple[List[float], List[float], List[float]]:
        """(compute-stream time, host-bound latency, host issue time) of each pass, in duration order."""
        passes = self.passes()
        tail = [0.0] if self.fused else []
        return ([c.gpu_compute_s + c.comm_s for c in passes] + tail, [c.latency_s for c in passes] + tail,
                [c.host_s for c in passes] + tail)

    def sync_inputs(self) -> Optional[Tuple[List[float], List[float]]]:
        """(sync_lead_s, sync_host_s) of each pass in duration order (:mod:`vtrain.sim.host_sync`), or None when
        no pass has a host sync."""
        passes = self.passes()
        if all(c.sync_host_s == NO_SYNC_S for c in passes):
            return None
        tail = [0.0] if self.fused else []
        return ([c.sync_lead_s for c in passes] + tail,
                [c.sync_host_s for c in passes] + ([NO_SYNC_S] if self.fused else []))

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

    def exposed_by_group(self) -> List[Tuple[float, ...]]:
        """Exposed communication of each pass in duration order, split by ``COMM_GROUPS`` (tp, cp, fsdp, ep): the
        part of its compute-stream time that waits on a collective (the wait after fused pairs: none)."""
        out = [tuple(c.comm_by_group) for c in self.passes()]
        return out + ([(0.0,) * len(out[0])] if self.fused else [])

    def lags(self) -> List[float]:
        out: List[float] = []
        for f, b in zip(self.p2p_fwd_s, self.p2p_bwd_s):
            out += [f, b]
        return out


def _p2p(part: StagePartition, comm: CommPlan, cost: CostModel) -> Tuple[List[float], List[float]]:
    gather_s = cost.collective_time_s(comm.p2p_gather, comm.tp_where) if comm.p2p_gather is not None else 0.0
    p2p_f = [0.0] * part.positions
    p2p_b = [0.0] * part.positions
    priced: Dict[Tuple[int, int], float] = {}  # boundaries share the message and one of two placements
    for q in range(1, part.positions):
        msg = comm.boundary[q]
        if msg is not None:  # none into a chain's first position or between two chunks of one stage
            where = comm.boundary_where[q]
            key = (id(msg), id(where))
            t = priced.get(key)
            if t is None:
                t = priced[key] = cost.collective_time_s(msg, where) + gather_s
            p2p_f[q] = p2p_b[q - 1] = t
    return p2p_f, p2p_b


def recomputed_layers(recompute_layers: int, n: int) -> int:
    """How many of a chunk's ``n`` layers run their recompute: all (``recompute_layers`` 0), or the first
    ``recompute_layers`` of them (Megatron's block method)."""
    return n if recompute_layers == 0 else min(recompute_layers, n)


def _dense_stage_costs(part: StagePartition, microbatch_overhead_s: float,
                       layer_f: List[Timed], layer_b: List[Timed], emb_f: List[Timed], emb_b: List[Timed],
                       head_f: List[Timed], head_b: List[Timed], side_f: SideStream, side_b: SideStream,
                       layer_b_kept: List[Timed], recompute_layers: int) -> StageCosts:
    """A dense model on a schedule without B/W split or fused pairs: embedding, layers, head per chunk
    (``layer_b_kept``: the backward of a layer that kept its activations, the last n - r of a chunk's layers
    under block recompute; :func:`recomputed_layers`)."""
    priced: Dict[Tuple[bool, bool, int], Tuple[PassCost, PassCost]] = {}
    memo: PrefixMemo = {}
    forward, backward = [], []
    for s in range(part.p):
        f_row, b_row = [], []
        for c in range(part.v):
            q = part.position(s, c)
            key = (part.is_first(q), part.is_last(q), part.layers[q])
            if key not in priced:
                first, is_last, n = key
                r = recomputed_layers(recompute_layers, n)
                fparts: List[Part] = ([(emb_f, 1, NO_SIDE)] if first else []) + [(layer_f, n, side_f)] + \
                    ([(head_f, 1, NO_SIDE)] if is_last else [])
                bparts: List[Part] = ([(head_b, 1, NO_SIDE)] if is_last else []) + \
                    [x for x in ((layer_b_kept, n - r, side_b), (layer_b, r, side_b)) if x[1] > 0] + \
                    ([(emb_b, 1, NO_SIDE)] if first else [])
                priced[key] = (price_chunk(fparts, microbatch_overhead_s, memo), price_chunk(bparts, 0.0, memo))
            f, b = priced[key]
            f_row.append(f)
            b_row.append(b)
        forward.append(tuple(f_row))
        backward.append(tuple(b_row))
    return StageCosts(tuple(forward), tuple(backward), (), ())


def _side_streams(comm: CommPlan, cost: CostModel, slowdown: float, moe: bool = False
                  ) -> Tuple[SideStream, SideStream]:
    """ZeRO-3: per-layer gathers (forward, and backward again unless kept) and reduce-scatters; an MoE
    layer's are its dense part over dp·cp and then its routed experts over edp, on the same side stream,
    which slows the compute beside it by ``slowdown``."""
    if comm.fsdp is None:
        return NO_SIDE, NO_SIDE
    kinds = [(comm.fsdp, comm.fsdp_where)]
    if moe and comm.fsdp_moe is not None and comm.fsdp_experts is not None:
        kinds = [(comm.fsdp_moe, comm.fsdp_where), (comm.fsdp_experts, comm.edp_where)]
    g = reduce_s = copy_s = 0.0
    for fs, where in kinds:
        g += cost.collective_time_s(fs.gather, where)
        copy_s += cost.copy_time_s(fs.copy_out_bytes) if fs.copy_out_bytes else 0.0
        if not fs.reduce_per_layer:
            continue
        reduce_s += cost.collective_time_s(fs.reduce, where)
        if fs.replica_reduce is not None:
            reduce_s += cost.collective_time_s(fs.replica_reduce, comm.replica_where)
    again = comm.fsdp.regather
    return (SideStream(gather_s=g, copy_s=copy_s, slowdown=slowdown),
            SideStream(gather_s=g if again else 0.0, reduce_s=reduce_s, copy_s=copy_s if again else 0.0,
                       slowdown=slowdown))


def side_streams(comm: CommPlan, cost: CostModel, slowdown: float = 0.0) -> Tuple[SideStream, ...]:
    """The passes' side-stream work: (dense forward, dense backward, MoE forward, MoE backward); ``slowdown``:
    the compute slowdown while it runs (:class:`vtrain.sim.launch.SideStream`)."""
    return (*_side_streams(comm, cost, slowdown), *_side_streams(comm, cost, slowdown, moe=True))


def with_p2p(passes: StageCosts, part: StagePartition, comm: CommPlan, cost: CostModel) -> StageCosts:
    """The priced passes with the pipeline transfers of this plan's placement."""
    p2p_f, p2p_b = _p2p(part, comm, cost)
    return StageCosts(passes.forward, passes.backward, tuple(p2p_f), tuple(p2p_b), passes.weight, passes.fused)


@dataclass(frozen=True, slots=True)
class _Timed:
    """The timed ops of each component's passes (a whole backward: recompute + backward; ``kept``: the backward
    of a layer that kept its activations) and, for a B/W-split schedule, ``bw``: per component (B, W)."""

    layer_f: List[Timed]
    layer_b: List[Timed]
    layer_b_kept: List[Timed]
    emb_f: List[Timed]
    emb_b: List[Timed]
    head_f: List[Timed]
    head_b: List[Timed]
    moe_f: List[Timed]
    moe_b: List[Timed]
    moe_b_kept: List[Timed]
    mtp_f: List[Timed]
    mtp_b: List[Timed]
    bw: Dict[str, Tuple[List[Timed], List[Timed]]]
    tail_f: List[Timed]  # a layer of the high-precision tail (graph.builder.tail_layers)
    tail_b: List[Timed]
    tail_b_kept: List[Timed]


def _timed_passes(graph: ModelGraph, cost: CostModel, comm: CommPlan, overlap_slowdown: float,
                  graph_scopes: Tuple[str, ...], split: bool) -> _Timed:
    """Price the ops of every component's passes once (:func:`vtrain.sim.launch.timed_ops`)."""
    def timed(ops: PassOps | Sequence[Op], component: str) -> List[Timed]:
        return timed_ops(ops, cost, comm, overlap_slowdown, captured_ops(graph_scopes, component))

    layer_b_kept = timed(graph.layer.backward, "layer")
    layer = (timed(graph.layer.forward, "layer"), timed(graph.layer.recompute, "layer") + layer_b_kept, layer_b_kept)
    edges = (timed(graph.embedding.forward, "emb"), timed(graph.embedding.backward, "emb"),
             timed(graph.head.forward, "head"), timed(graph.head.backward, "head"))
    bw: Dict[str, Tuple[List[Timed], List[Timed]]] = {}
    comps = {"layer": graph.layer, "emb": graph.embedding, "head": graph.head, "moe": graph.moe_layer,
             "mtp": graph.mtp, "tail": graph.tail_layer}
    for name, g in comps.items():
        if g is not None and split:  # (B, W): the input-gradient ops and the weight-gradient ops
            b_ops = timed([op for op in g.backward.ops if not is_weight_grad(op)], name)
            w_ops = timed([op for op in g.backward.ops if is_weight_grad(op)], name)
            bw[name] = (timed(g.recompute, name) + b_ops, w_ops)
            if name in ("layer", "moe", "tail"):  # a layer that kept its activations (block recompute)
                bw[name + "_kept"] = (b_ops, w_ops)
    moe_f, moe_b_kept, moe_b = _layer_passes(graph.moe_layer, timed, "moe")
    tail_f, tail_b_kept, tail_b = _layer_passes(graph.tail_layer, timed, "layer")
    mtp = graph.mtp
    return _Timed(*layer, *edges, moe_f, moe_b, moe_b_kept, timed(mtp.forward, "mtp") if mtp else [],
                  timed(mtp.backward, "mtp") if mtp else [], bw, tail_f, tail_b, tail_b_kept)


def _with_node_calls(t: _Timed, node_host_s: float) -> _Timed:
    """The layers' launch queues with the combined 1F1B's node calls (:mod:`vtrain.sim.schedule_nodes`; the
    recompute before a backward keeps its plain queue)."""
    def both(f: List[Timed], whole: List[Timed], kept: List[Timed], nodes: Callable[..., List[Timed]]
             ) -> Tuple[List[Timed], List[Timed], List[Timed]]:
        b = nodes(kept, True, node_host_s) if kept else kept
        return (nodes(f, False, node_host_s) if f else f), whole[:len(whole) - len(kept)] + b, b
    layer_f, layer_b, layer_b_kept = both(t.layer_f, t.layer_b, t.layer_b_kept, dense_layer_nodes)
    moe_f, moe_b, moe_b_kept = both(t.moe_f, t.moe_b, t.moe_b_kept, moe_layer_nodes)
    return replace(t, layer_f=layer_f, layer_b=layer_b, layer_b_kept=layer_b_kept, moe_f=moe_f, moe_b=moe_b,
                   moe_b_kept=moe_b_kept)


def _layer_passes(c: Optional[ComponentGraph], timed: Callable[[PassOps, str], List[Timed]], name: str
                  ) -> Tuple[List[Timed], List[Timed], List[Timed]]:
    """A layer component's timed forward, backward and recompute + backward (all empty without it)."""
    if c is None:
        return [], [], []
    kept = timed(c.backward, name)
    return timed(c.forward, name), kept, timed(c.recompute, name) + kept


def tail_at(part: StagePartition, q: int, tail: int) -> int:
    """How many of the model's last ``tail`` layers sit at pipeline position ``q`` (each chain holds the layers
    in order, position by position)."""
    if tail <= 0:
        return 0
    chain = part.chain_len
    base = q - q % chain
    start = sum(part.layers[base:q])
    total = sum(part.layers[base:base + chain])
    return max(0, min(start + part.layers[q], total) - max(start, total - tail))


ChunkKey = Tuple[bool, bool, int, int, int]  # (first position, last position, layers, MoE layers, tail layers)


def _chunk_parts(t: _Timed, sides: Tuple[SideStream, ...], key: ChunkKey, mtp_layers: int, mtp_moe: bool,
                 recompute_layers: int, which: int) -> Tuple[List[Part], List[Part]]:
    """(forward, backward) parts of a chunk: embedding, dense layers, MoE layers, the high-precision tail's
    layers, MTP modules, head; ``which``: 0 the whole backward, 1 its B, 2 its W (no side stream: the
    reduce-scatters go with B)."""
    first, is_last, n, nm, nt = key
    k = mtp_layers if is_last else 0
    r = recomputed_layers(recompute_layers, n)  # the first r: dense layers first, then MoE ones, then the tail
    r_dense, r_moe, r_tail = min(r, n - nm - nt), max(0, min(r - (n - nm - nt), nm)), max(0, r - (n - nt))
    mtp_layer = (t.moe_f, t.moe_b, "moe") if mtp_moe else (t.layer_f, t.layer_b, "layer")
    side_f, side_b, moe_side_f, moe_side_b = sides

    def b_of(name: str, whole: List[Timed]) -> List[Timed]:
        return whole if which == 0 or name not in t.bw else t.bw[name][which - 1]
    sb = side_b if which != 2 else NO_SIDE
    msb = moe_side_b if which != 2 else NO_SIDE
    fp = [(t.emb_f, int(first), NO_SIDE), (t.layer_f, n - nm - nt, side_f), (t.moe_f, nm, moe_side_f),
          (t.tail_f, nt, side_f), (t.mtp_f, k, NO_SIDE), (mtp_layer[0], k, NO_SIDE),
          (t.head_f, int(is_last) * (1 + k), NO_SIDE)]
    bp = [(b_of("head", t.head_b), int(is_last) * (1 + k), NO_SIDE),
          (b_of(mtp_layer[2], mtp_layer[1]), k, NO_SIDE), (b_of("mtp", t.mtp_b), k, NO_SIDE),
          (b_of("tail_kept", t.tail_b_kept), nt - r_tail, sb), (b_of("tail", t.tail_b), r_tail, sb),
          (b_of("moe_kept", t.moe_b_kept), nm - r_moe, msb), (b_of("moe", t.moe_b), r_moe, msb),
          (b_of("layer_kept", t.layer_b_kept), n - nm - nt - r_dense, sb),
          (b_of("layer", t.layer_b), r_dense, sb), (b_of("emb", t.emb_b), int(first), NO_SIDE)]
    return [x for x in fp if x[1] > 0], [x for x in bp if x[1] > 0]


Priced = Tuple[PassCost, PassCost, Optional[PassCost]]  # forward, backward (B when split), W when split


def _priced_rows(part: StagePartition, price: Callable[[ChunkKey], Priced], tail: int = 0
                 ) -> Tuple[List[Tuple[PassCost, ...]], List[Tuple[PassCost, ...]], List[Tuple[PassCost, ...]]]:
    """[stage][chunk] forward, backward and W passes, each distinct chunk priced once."""
    priced: Dict[ChunkKey, Priced] = {}
    forward, backward, weight = [], [], []
    for s in range(part.p):
        f_row, b_row, w_row = [], [], []
        for c in range(part.v):
            q = part.position(s, c)
            key = (part.is_first(q), part.is_last(q), part.layers[q], part.moe_at(q), tail_at(part, q, tail))
            if key not in priced:
                priced[key] = price(key)
            f, b, w = priced[key]
            f_row.append(f)
            b_row.append(b)
            if w is not None:
                w_row.append(w)
        forward.append(tuple(f_row))
        backward.append(tuple(b_row))
        weight.append(tuple(w_row))
    return forward, backward, weight


def priced_passes(graph: ModelGraph, part: StagePartition, comm: CommPlan, cost: CostModel,
                  microbatch_overhead_s: float, split: bool, fuse: Optional[Tuple[float, float]],
                  overlap_slowdown: float, sides: Tuple[SideStream, ...], graph_scopes: Tuple[str, ...] = (),
                  recompute_layers: int = 0, node_host_s: float = 0.0) -> StageCosts:
    """Every pass of every (stage, chunk), no p2p times: what depends on the graph, the partition, the
    placement of the in-pass collectives' groups (``comm.where``), the side streams ``sides``
    (:func:`side_streams`), the CUDA graphs' scopes (``graph_scopes``, :mod:`vtrain.graph.cuda_graphs`) and the
    layers that run their recompute (``recompute_layers``: :func:`recomputed_layers`) only; ``node_host_s``: the
    host time of each schedule-node call of Megatron-Core's combined 1F1B (:mod:`vtrain.sim.schedule_nodes`; 0:
    the plain layers)."""
    t = _timed_passes(graph, cost, comm, overlap_slowdown, graph_scopes, split)
    if node_host_s > 0.0 and graph.moe_layer is not None:
        t = _with_node_calls(t, node_host_s)
    if not split and fuse is None and graph.moe_layer is None and graph.mtp is None and graph.tail_layer is None:
        return _dense_stage_costs(part, microbatch_overhead_s, t.layer_f, t.layer_b, t.emb_f, t.emb_b, t.head_f,
                                  t.head_b, sides[0], sides[1], t.layer_b_kept, recompute_layers)
    mtp_moe = bool(graph.moe_layer is not None and part.mtp_layers and part.mtp_expert_params > 0)
    memo: PrefixMemo = {}

    def price(key: ChunkKey) -> Priced:
        def parts(which: int) -> Tuple[List[Part], List[Part]]:
            return _chunk_parts(t, sides, key, part.mtp_layers, mtp_moe, recompute_layers, which)
        fparts, bparts = parts(0)
        f = price_pass(fparts, microbatch_overhead_s, memo)
        if split:
            return f, price_pass(parts(1)[1], 0.0, memo), price_pass(parts(2)[1], 0.0, memo)
        return f, price_pass(bparts, 0.0, memo), None

    forward, backward, weight = _priced_rows(part, price, graph.tail_layers)
    fused: Tuple[Tuple[Tuple[PassCost, ...], ...], ...] = ()
    if fuse is not None:
        whole = [[b + w for b, w in zip(backward[s], weight[s])] if split else list(backward[s])
                 for s in range(part.p)]
        fused = tuple(tuple(tuple(fused_pass(forward[s][cf], whole[s][cb], *fuse) for cb in range(part.v))
                            for cf in range(part.v)) for s in range(part.p))
    return StageCosts(tuple(forward), tuple(backward), (), (), tuple(weight) if split else (), fused)
