"""Every communication of one training iteration, with its group, placement, bytes, stream and overlap.

Megatron-LM rank order (tp fastest, then dp, then pp: ``initialize_model_parallel``): a TP group is
``tp`` consecutive ranks, a DP group strides by ``tp``, stage s starts at rank s·tp·dp. A group's
placement counts its ranks per NVLink domain (the node, or a multi-node NVLink domain such as NVL72);
groups that span domains run hierarchically and share the node's NICs (:mod:`vtrain.cost.collectives`).

Entries, per GPU of a stage:
- TP/SP (:mod:`vtrain.comm.tp`): on the compute stream, in order with the GEMMs (blocking).
- Pipeline p2p: one activation per micro-batch and boundary each way. Each TP rank sends its 1/t slice
  and the receiver all-gathers it over NVLink (Megatron's scatter/gather, Narayanan et al. SC'21,
  Sec. 4.1); with sequence parallelism the activation is already sharded and needs no gather.
- DP gradient sync: per model chunk, all-reduce (or reduce-scatter with the distributed optimizer) of
  its gradients, in buckets (:func:`grad_bucket_bytes`) on the DP stream, overlapped with the backward pass
  of the last micro-batch when ``overlap_grad_reduce`` (Megatron's DistributedDataParallel).
- Tied embeddings with pp > 1: all-reduce of the word-embedding gradient between first and last stage.
- Distributed optimizer: all-gather of the updated parameters after the optimizer step.
- Mixture of experts (:mod:`vtrain.comm.ep`): per MoE layer and micro-batch the dispatch and combine
  (all-to-all over EP, all-gather / reduce-scatter over ETP), on the compute stream; the routed experts'
  gradients reduce (and, with the distributed optimizer, their parameters gather) over the expert
  data-parallel group instead of DP.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from vtrain.comm.cp import cp_comms
from vtrain.comm.ep import a2a_efficiency, edp_placement, ep_placement, etp_placement, plan_ep_comms
from vtrain.comm.placement import (
    GroupPlacement,
    cp_placement,
    dp_placement,
    replica_placement,
    shard_placement,
    stages_share_domain,
    tp_placement,
)
from vtrain.comm.sharding import FsdpComms, deferred_sync, expert_fsdp_comms, fsdp_comms
from vtrain.comm.tp import plan_tp_comms
from vtrain.graph.collectives import CpComms, TpComms, TpOperator
from vtrain.graph.ops import Collective, CollectiveKind, Group
from vtrain.workload.enums import StrEnum
from vtrain.workload.partition import StagePartition
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.workload import Workload

# What a context-parallel exchange overlaps, by its Collective.overlap (the timeline and the plan's listing)
_CP_OVERLAPS = {"next": "the attention blocks (ring)", "first": "the first ring step's attention (all-gather)"}
_CP_OVERLAPS_BWD = {"next": "the attention backward (ring)"}


class Stream(StrEnum):
    COMPUTE = "compute"  # in order with the kernels of the compute stream (the GPU waits for it)
    PIPELINE = "pp_p2p"  # stage-to-stage send/recv
    DATA_PARALLEL = "dp_comm"  # gradient reduction and parameter gather over the data-parallel group
    FSDP = "fsdp"  # per-layer parameter gathers and gradient reduce-scatters beside the compute stream
    EXPERT = "ep_comm"  # token dispatch and combine of the MoE layers


class Cadence(StrEnum):
    LAYER = "per layer and micro-batch"
    EMBEDDING = "per micro-batch on the first position"
    HEAD = "per micro-batch on the last position"
    BOUNDARY = "per micro-batch and pipeline boundary, each way"
    ITERATION = "per iteration"


@dataclass(frozen=True, slots=True, kw_only=True)
class Comm:
    """One communication of the plan; ``count`` times per iteration on each GPU of ``stages``."""

    op: Collective
    where: GroupPlacement
    stream: Stream
    cadence: Cadence
    stages: Tuple[int, ...]
    count: int
    overlaps: str  # what it may overlap with


def grad_bucket_bytes(plan: ParallelPlan) -> float:
    """Bytes of one DP gradient bucket: ``grad_bucket_mib``, else Megatron-Core's default of max(4e7,
    1e6 x dp x cp) parameters (larger DP groups get larger buckets, so that NCCL's ring chunks stay
    bandwidth-bound: megatron/core/distributed/distributed_data_parallel.py)."""
    if plan.grad_bucket_mib is not None:
        return plan.grad_bucket_mib * 2**20
    return max(4.0e7, 1.0e6 * plan.dp * plan.cp) * plan.grad_bytes


@dataclass(frozen=True, slots=True)
class CommPlan:
    tp: TpComms
    tp_where: GroupPlacement
    cp: CpComms
    cp_where: GroupPlacement
    fsdp: Optional[FsdpComms]  # ZeRO-3: per-layer gathers and reductions on a side stream
    fsdp_where: GroupPlacement
    replica_where: GroupPlacement
    boundary: Tuple[Optional[Collective], ...]  # per position q: the activation p2p into q (None at q=0)
    boundary_where: Tuple[GroupPlacement, ...]
    p2p_gather: Optional[Collective]  # the receiver's TP all-gather of the scattered activation
    grad_reduce: Tuple[Tuple[Collective, ...], ...]  # [stage][chunk]: the chunk's whole gradient
    dp_where: GroupPlacement
    bucket_bytes: float
    overlap_grad_reduce: bool
    embedding_sync: Optional[Collective]
    embedding_where: GroupPlacement
    param_gather: Tuple[Optional[Collective], ...]  # [stage]
    boundary_stages: Tuple[Tuple[int, int], ...]  # per position q: (sender, receiver) of the boundary into q
    # what the counts of :meth:`entries` need
    stage_layers: Tuple[int, ...]
    microbatches: int
    layer_forwards: int  # forward passes of a layer per micro-batch (2 with full recompute)
    # --- expert parallelism (empty for a dense model)
    ep: TpOperator = TpOperator()  # dispatch (enter) and combine (exit) of one MoE layer and micro-batch
    ep_where: GroupPlacement = GroupPlacement(1, 1)
    etp_where: GroupPlacement = GroupPlacement(1, 1)
    edp_where: GroupPlacement = GroupPlacement(1, 1)
    expert_grad_reduce: Tuple[Tuple[Optional[Collective], ...], ...] = ()  # [stage][chunk], over edp
    expert_param_gather: Tuple[Optional[Collective], ...] = ()  # [stage]
    stage_moe_layers: Tuple[int, ...] = ()
    last_stage: int = -1  # the stage holding the output layer (-1: the last)
    # ZeRO-3 with experts: an MoE layer's non-expert parameters over dp·cp, its routed experts over edp
    fsdp_moe: Optional[FsdpComms] = None
    fsdp_experts: Optional[FsdpComms] = None
    # ZeRO-3 parameters gathered once per iteration (deferred_sync): the first layer's bytes, which the next
    # forward waits for (FSDP2 gathers layer by layer, prefetching the next); 0: not so
    prefetch_gather_bytes: float = 0.0
    overlap_param_gather: bool = False  # Megatron's: ``param_gather`` runs beside the next forward but a bucket
    moe_mlp_tp: bool = True  # an MoE layer runs the MLP's TP collectives (around its shared experts: graph.moe)

    _by_group: Dict[Group, GroupPlacement] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_group", {
            Group.EP: self.ep_where, Group.ETP: self.etp_where, Group.CP: self.cp_where, Group.DP: self.dp_where,
            Group.EDP: self.edp_where, Group.EMBEDDING: self.embedding_where})

    def where(self, group: Group) -> GroupPlacement:
        """The placement of a collective's group (for pricing in-pass collectives)."""
        return self._by_group.get(group, self.tp_where)

    def grad_reductions(self, stage: int, chunk: int) -> Tuple[Tuple[Collective, GroupPlacement], ...]:
        """The gradient reductions of a chunk in order: dense over DP, then routed experts over EDP."""
        out = [(self.grad_reduce[stage][chunk], self.dp_where)] if self.dp_where.size > 1 else []
        if self.expert_grad_reduce and self.edp_where.size > 1:
            e = self.expert_grad_reduce[stage][chunk]
            if e is not None:
                out.append((e, self.edp_where))
        return tuple(out)

    def entries(self) -> Tuple[Comm, ...]:
        """Every communication of the iteration, with its stream, cadence and count per GPU."""
        p, m = len(self.stage_layers), self.microbatches
        out = []
        fwd_ops = self.tp.attention.enter + self.tp.attention.exit + self.tp.mlp.enter + self.tp.mlp.exit
        moe_only = () if self.moe_mlp_tp else self.stage_moe_layers  # layers without the MLP's TP collectives
        for op in self.tp.per_layer():
            passes = self.layer_forwards if op in fwd_ops else 1
            for s in range(p):
                skip = moe_only[s] if moe_only and op in self.tp.mlp.all() else 0
                out.append(Comm(op=op, where=self.tp_where, stream=Stream.COMPUTE, cadence=Cadence.LAYER,
                                stages=(s,), count=(self.stage_layers[s] - skip) * m * passes,
                                overlaps="nothing: the next GEMM waits for it"))
        for op in self.cp.forward + self.cp.forward_after:
            for s in range(p):
                out.append(Comm(op=op, where=self.cp_where, stream=Stream.COMPUTE, cadence=Cadence.LAYER, stages=(s,),
                                count=self.stage_layers[s] * m * self.layer_forwards,
                                overlaps=_CP_OVERLAPS.get(op.overlap, "nothing")))
        for op in self.cp.backward + self.cp.backward_after:
            for s in range(p):
                out.append(Comm(op=op, where=self.cp_where, stream=Stream.COMPUTE, cadence=Cadence.LAYER, stages=(s,),
                                count=self.stage_layers[s] * m,
                                overlaps=_CP_OVERLAPS_BWD.get(op.overlap, "nothing")))
        if self.fsdp is not None:
            for s in range(p):
                n_moe = self.stage_moe_layers[s] if self.stage_moe_layers else 0
                per_kind = [(self.fsdp, self.fsdp_where, self.stage_layers[s] - n_moe)]
                if self.fsdp_moe is not None and self.fsdp_experts is not None:
                    per_kind += [(self.fsdp_moe, self.fsdp_where, n_moe), (self.fsdp_experts, self.edp_where, n_moe)]
                for fs, where, layers in per_kind:
                    n = layers * m
                    if n == 0:
                        continue
                    out.append(Comm(op=fs.gather, where=where, stream=Stream.FSDP, cadence=Cadence.LAYER,
                                    stages=(s,), count=n * (1 + int(fs.regather)),
                                    overlaps="the previous layer's compute (prefetch)"))
                    if not fs.reduce_per_layer:
                        continue
                    out.append(Comm(op=fs.reduce, where=where, stream=Stream.FSDP, cadence=Cadence.LAYER,
                                    stages=(s,), count=n, overlaps="the next layers' backward"))
                    if fs.replica_reduce is not None:
                        out.append(Comm(op=fs.replica_reduce, where=self.replica_where, stream=Stream.FSDP,
                                        cadence=Cadence.LAYER, stages=(s,), count=n,
                                        overlaps="the next layers' backward"))
        positions = len(self.boundary)
        last = self.last_stage if self.last_stage >= 0 else (positions - 1) % p
        for op in self.tp.embedding.all():
            out.append(Comm(op=op, where=self.tp_where, stream=Stream.COMPUTE, cadence=Cadence.EMBEDDING,
                            stages=(0,), count=m, overlaps="nothing"))
        for op in self.tp.head():
            out.append(Comm(op=op, where=self.tp_where, stream=Stream.COMPUTE, cadence=Cadence.HEAD, stages=(last,),
                            count=m, overlaps="nothing"))
        if self.stage_moe_layers:
            fwd_ep = self.ep.enter + self.ep.exit
            for op in self.ep.all():
                passes = self.layer_forwards if op in fwd_ep else 1
                for s in range(p):
                    if self.stage_moe_layers[s]:
                        out.append(Comm(op=op, where=self.where(op.group), stream=Stream.EXPERT, cadence=Cadence.LAYER,
                                        stages=(s,), count=self.stage_moe_layers[s] * m * passes,
                                        overlaps="the other micro-batch's compute when fused (overlap_moe_comm, "
                                                 "dualpipe); else nothing: the experts wait for it"))
        for q in range(1, positions):
            msg = self.boundary[q]
            if msg is None:  # a chain's first position, or both positions on one stage
                continue
            src, dst = self.boundary_stages[q]
            out.append(Comm(op=msg, where=self.boundary_where[q], stream=Stream.PIPELINE, cadence=Cadence.BOUNDARY,
                            stages=(src, dst), count=2 * m,
                            overlaps="the sender's next pass; the receiver waits for it"))
            if self.p2p_gather is not None:
                out.append(Comm(op=self.p2p_gather, where=self.tp_where, stream=Stream.PIPELINE,
                                cadence=Cadence.BOUNDARY, stages=(src, dst), count=2 * m,
                                overlaps="nothing: the receiver waits for it"))
        for s in range(p):
            for c in range(len(self.grad_reduce[s])):
                for op, where in self.grad_reductions(s, c):
                    out.append(Comm(op=op, where=where, stream=Stream.DATA_PARALLEL,
                                    cadence=Cadence.ITERATION, stages=(s,), count=1,
                                    overlaps="the last micro-batch's backward" if self.overlap_grad_reduce
                                    else "nothing: after the last backward"))
            eg = self.expert_param_gather[s] if self.expert_param_gather else None
            if eg is not None:
                out.append(Comm(op=eg, where=self.edp_where, stream=Stream.DATA_PARALLEL, cadence=Cadence.ITERATION,
                                stages=(s,), count=1, overlaps="nothing: after the optimizer step"))
            ag = self.param_gather[s]
            if ag is not None:
                out.append(Comm(op=ag, where=self.dp_where, stream=Stream.DATA_PARALLEL, cadence=Cadence.ITERATION,
                                stages=(s,), count=1,
                                overlaps="the next forward, but its first bucket" if self.overlap_param_gather
                                else "nothing: after the optimizer step"))
        if self.embedding_sync is not None:
            out.append(Comm(op=self.embedding_sync, where=self.embedding_where, stream=Stream.DATA_PARALLEL,
                            cadence=Cadence.ITERATION, stages=(0, p - 1), count=1,
                            overlaps="nothing: before the optimizer step"))
        return tuple(out)


def _tail_params(part: StagePartition, stage: int, chunk: int, per_layer: bool) -> float:
    """Parameters whose gradients are reduced (or parameters gathered) after the last backward: all of the
    chunk's, or with ZeRO-3 only those outside the transformer layers (embedding, head, MTP)."""
    q = part.position(stage, chunk)
    total = part.position_params(q)
    if per_layer:
        n_moe = part.moe_at(q)
        total -= (part.layers[q] - n_moe) * part.layer_params + n_moe * part.moe_layer_params
    return total


def _tail_expert_params(part: StagePartition, stage: int, chunk: int, per_layer: bool) -> float:
    """Routed-expert parameters reduced after the last backward (with ZeRO-3 only the MTP modules')."""
    if not per_layer:
        return part.chunk_expert_params(stage, chunk)
    q = part.position(stage, chunk)
    return part.mtp_expert_params if part.is_last(q) else 0.0


def _tail_rows(part: StagePartition, per_layer: bool, moe: bool) -> Tuple[List[List[float]], List[List[float]]]:
    """[stage][chunk] (routed-expert, dense) parameters reduced or gathered once per iteration."""
    p, v = part.p, part.v
    experts = [[_tail_expert_params(part, s, c, per_layer) if moe else 0.0 for c in range(v)] for s in range(p)]
    if moe or per_layer:
        return experts, [[_tail_params(part, s, c, per_layer) - experts[s][c] for c in range(v)] for s in range(p)]
    return experts, [[part.position_params(part.position(s, c)) for c in range(v)] for s in range(p)]  # whole chunks


def _boundaries(plan: ParallelPlan, part: StagePartition, domain: int, msg: Collective
                ) -> Tuple[List[Optional[Collective]], List[GroupPlacement], List[Tuple[int, int]]]:
    """The pipeline p2p at each chunk position's input: the message (None: no transfer), where its two ends sit
    and the (source, destination) stages."""
    p = plan.pp
    boundary: List[Optional[Collective]] = [None]
    boundary_where = [GroupPlacement(1, 1)]
    boundary_stages = [(0, 0)]
    default = not part.pos
    near, far = GroupPlacement(2, 2), GroupPlacement(2, 1)  # the two ends inside one NVLink domain, or not
    stride = plan.tp * plan.cp * plan.dp  # stage s starts at rank s·stride (stages_share_domain)
    for q in range(1, part.positions):
        if default:  # Megatron's order: q = c·p + s, one chain
            src, dst, local = (q - 1) % p, q % p, False
        else:
            src, dst = part.stage_of(q - 1), part.stage_of(q)
            local = part.is_first(q) or src == dst  # no transfer into a chain's start or within a stage
        boundary.append(None if local else msg)
        boundary_stages.append((src, dst))
        boundary_where.append(near if (src * stride) // domain == (dst * stride) // domain else far)
    return boundary, boundary_where, boundary_stages


def build_comm_plan(w: Workload, part: StagePartition) -> CommPlan:
    model, plan, cluster = w.model, w.plan, w.cluster
    domain = cluster.domain_size
    p, v, t = plan.pp, plan.chunks, plan.tp
    tokens = plan.tokens_per_rank
    act_bytes = float(tokens * model.hidden_size * plan.dtype_bytes)
    gather = None
    if t > 1 and not plan.sequence_parallel:
        gather = Collective("p2p.gather", CollectiveKind.ALL_GATHER, act_bytes, Group.TP, t)
    msg = Collective("p2p", CollectiveKind.P2P, act_bytes / t, Group.PP, 2)
    boundary, boundary_where, boundary_stages = _boundaries(plan, part, domain, msg)
    gbytes = plan.grad_bytes
    stage = plan.sharding_stage
    reducers = plan.dp * plan.cp
    kind = CollectiveKind.REDUCE_SCATTER if stage >= 1 else CollectiveKind.ALL_REDUCE
    deferred = deferred_sync(plan, w.stack)  # a pipeline on FSDP2: gradients once, kept parameters gathered once
    gather_per_layer = stage == 3 and not (deferred and not plan.reshard_after_forward)
    reduce_per_layer = stage == 3 and not deferred
    copy = w.stack.fsdp_copy_out
    fsdp = fsdp_comms(part.layer_params, plan, gbytes, reduce_per_layer, copy) if gather_per_layer else None
    moe = model.is_moe
    # dense gradients over DP (x CP); ZeRO-3 reduces each layer's in its backward, what is left at the end is
    # the embedding's and the head's; routed experts' over the expert-data-parallel group
    experts, dense = _tail_rows(part, reduce_per_layer, moe)
    g_experts, g_dense = (experts, dense) if gather_per_layer == reduce_per_layer else \
        _tail_rows(part, gather_per_layer, moe)
    fsdp_moe = fsdp_experts = None
    if fsdp is not None and moe:
        fsdp_moe = fsdp_comms(part.moe_layer_params - part.expert_layer_params, plan, gbytes, reduce_per_layer, copy)
        fsdp_experts = expert_fsdp_comms(part.expert_layer_params, plan, gbytes, reduce_per_layer, copy)
    names = [f"dp.grad.chunk{c}" for c in range(v)]
    gather_all = stage >= 1 and reducers > 1  # overlapped or not: the tail prices what is exposed
    dtype_bytes = plan.dtype_bytes
    # stages of equal sizes (the middle of a pipeline) share one row of collectives
    rows: Dict[Tuple[float, ...], Tuple[Tuple[Collective, ...], Optional[Collective]]] = {}  # (grads, -1, gathers)
    grads_l: list[Tuple[Collective, ...]] = []
    gathers_l: list[Optional[Collective]] = []
    for row, g_row in zip(dense, g_dense):
        key = (*row, -1.0, *g_row)
        hit = rows.get(key)
        if hit is None:
            hit = rows[key] = (
                tuple(Collective(names[c], kind, x * gbytes, Group.DP, reducers) for c, x in enumerate(row)),
                Collective("dp.param_gather", CollectiveKind.ALL_GATHER, sum(g_row) * dtype_bytes, Group.DP,
                           reducers)
                if gather_all else None)
        grads_l.append(hit[0])
        gathers_l.append(hit[1])
    grads, gathers = tuple(grads_l), tuple(gathers_l)
    edp = plan.expert_dp if moe else 1
    e_grads: Tuple[Tuple[Optional[Collective], ...], ...] = ()
    e_gathers: Tuple[Optional[Collective], ...] = ()
    if moe:
        e_grads = tuple(tuple(Collective(f"edp.grad.chunk{c}", kind, experts[s][c] * gbytes,
                                         Group.EDP, edp) if experts[s][c] > 0 else None
                              for c in range(v)) for s in range(p))
        e_gathers = tuple(Collective("edp.param_gather", CollectiveKind.ALL_GATHER,
                                     sum(g_experts[s]) * plan.dtype_bytes, Group.EDP, edp)
                          if stage >= 1 and edp > 1 and sum(g_experts[s]) > 0 else None
                          for s in range(p))
    emb = None
    emb_where = GroupPlacement(1, 1)
    last_stage = part.stage_of(part.chain_len - 1)
    if part.tied_sync_params > 0:
        emb = Collective("embedding.grad_sync", CollectiveKind.ALL_REDUCE, part.tied_sync_params * gbytes,
                         Group.EMBEDDING, 2)
        emb_where = GroupPlacement(2, 2 if stages_share_domain(plan, domain, 0, last_stage) else 1)
    moe_layers = tuple(sum(part.moe_at(part.position(s, c)) for c in range(v)) for s in range(p)) if moe else ()
    cp = cp_comms(model, plan, w.stack.attention_expands_kv, w.stack.cp_grads_fp32, w.stack.cp_ring_merge)
    return CommPlan(tp=plan_tp_comms(model, plan, w.stack), tp_where=tp_placement(plan, domain),
                    cp=cp, cp_where=cp_placement(plan, domain), fsdp=fsdp,
                    fsdp_where=shard_placement(plan, domain), replica_where=replica_placement(plan, domain),
                    boundary=tuple(boundary),
                    boundary_where=tuple(boundary_where), p2p_gather=gather, grad_reduce=grads,
                    dp_where=dp_placement(plan, domain), bucket_bytes=grad_bucket_bytes(plan),
                    overlap_grad_reduce=plan.overlap_grad_reduce and not deferred, embedding_sync=emb,
                    embedding_where=emb_where,
                    param_gather=gathers, boundary_stages=tuple(boundary_stages),
                    stage_layers=tuple(part.stage_layers(s) for s in range(p)),
                    microbatches=plan.num_microbatches,
                    layer_forwards=2 if plan.recompute.value == "full" else 1,
                    ep=plan_ep_comms(model, plan, ep_placement(plan, domain), a2a_efficiency(cluster)),
                    ep_where=ep_placement(plan, domain),
                    etp_where=etp_placement(plan, domain), edp_where=edp_placement(plan, domain),
                    expert_grad_reduce=e_grads, expert_param_gather=e_gathers, stage_moe_layers=moe_layers,
                    last_stage=last_stage, fsdp_moe=fsdp_moe, fsdp_experts=fsdp_experts,
                    prefetch_gather_bytes=part.layer_params * dtype_bytes if stage == 3 and fsdp is None else 0.0,
                    overlap_param_gather=plan.overlap_param_gather, moe_mlp_tp=not moe or model.shared_ffn > 0)
