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
- DP gradient sync (:mod:`vtrain.comm.dp`): per model chunk, all-reduce (or reduce-scatter with the distributed
  optimizer) of its gradients, in buckets (:func:`grad_bucket_bytes`) on the DP stream, overlapped with the
  backward pass of the last micro-batch when ``overlap_grad_reduce`` (Megatron's DistributedDataParallel).
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
from vtrain.comm.dp import dp_syncs, embedding_sync, expert_syncs, sync_rows
from vtrain.comm.ep import a2a_efficiency, edp_placement, ep_placement, etp_placement, plan_ep_comms
from vtrain.comm.placement import (
    GroupPlacement,
    cp_placement,
    dp_placement,
    replica_placement,
    shard_placement,
    tp_placement,
)
from vtrain.comm.sharding import FsdpComms, sharding_of
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
        """Every communication of the iteration, with its stream, cadence and count per GPU: in-pass (TP, CP,
        ZeRO-3's side stream, the embedding's and head's TP, EP), pipeline p2p, then once per iteration."""
        return (*self._tp_entries(), *self._cp_entries(), *self._fsdp_entries(), *self._edge_entries(),
                *self._ep_entries(), *self._boundary_entries(), *self._iteration_entries())

    def _tp_entries(self) -> List[Comm]:
        """TP/SP around each layer's blocks, run again by a full recompute's second forward; an MoE layer without
        shared experts skips the MLP's."""
        m = self.microbatches
        out: List[Comm] = []
        fwd_ops = self.tp.attention.enter + self.tp.attention.exit + self.tp.mlp.enter + self.tp.mlp.exit
        moe_only = () if self.moe_mlp_tp else self.stage_moe_layers  # layers without the MLP's TP collectives
        for op in self.tp.per_layer():
            passes = self.layer_forwards if op in fwd_ops else 1
            for s, layers in enumerate(self.stage_layers):
                skip = moe_only[s] if moe_only and op in self.tp.mlp.all() else 0
                out.append(Comm(op=op, where=self.tp_where, stream=Stream.COMPUTE, cadence=Cadence.LAYER,
                                stages=(s,), count=(layers - skip) * m * passes,
                                overlaps="nothing: the next GEMM waits for it"))
        return out

    def _cp_entries(self) -> List[Comm]:
        """The context-parallel exchanges of each layer's attention, forward (again under full recompute), then
        backward."""
        m = self.microbatches
        out: List[Comm] = []
        for ops, passes, overlaps in ((self.cp.forward + self.cp.forward_after, self.layer_forwards, _CP_OVERLAPS),
                                      (self.cp.backward + self.cp.backward_after, 1, _CP_OVERLAPS_BWD)):
            for op in ops:
                out += [Comm(op=op, where=self.cp_where, stream=Stream.COMPUTE, cadence=Cadence.LAYER, stages=(s,),
                             count=layers * m * passes, overlaps=overlaps.get(op.overlap, "nothing"))
                        for s, layers in enumerate(self.stage_layers)]
        return out

    def _fsdp_entries(self) -> List[Comm]:
        """ZeRO-3's per-layer gathers (again in backward unless kept) and reductions on their side stream: dense
        layers', and an MoE layer's non-expert part over dp·cp, its routed experts over edp."""
        m = self.microbatches
        out: List[Comm] = []
        if self.fsdp is None:
            return out
        for s, layers in enumerate(self.stage_layers):
            n_moe = self.stage_moe_layers[s] if self.stage_moe_layers else 0
            per_kind = [(self.fsdp, self.fsdp_where, layers - n_moe)]
            if self.fsdp_moe is not None and self.fsdp_experts is not None:
                per_kind += [(self.fsdp_moe, self.fsdp_where, n_moe), (self.fsdp_experts, self.edp_where, n_moe)]
            for fs, where, n in ((fs, where, k * m) for fs, where, k in per_kind if k):
                out.append(Comm(op=fs.gather, where=where, stream=Stream.FSDP, cadence=Cadence.LAYER, stages=(s,),
                                count=n * (1 + int(fs.regather)), overlaps="the previous layer's compute (prefetch)"))
                if not fs.reduce_per_layer:
                    continue
                reduces = [(fs.reduce, where)] + ([(fs.replica_reduce, self.replica_where)] if fs.replica_reduce
                                                  is not None else [])
                out += [Comm(op=op, where=w, stream=Stream.FSDP, cadence=Cadence.LAYER, stages=(s,), count=n,
                             overlaps="the next layers' backward") for op, w in reduces]
        return out

    def _last_position_stage(self) -> int:
        return self.last_stage if self.last_stage >= 0 else (len(self.boundary) - 1) % len(self.stage_layers)

    def _edge_entries(self) -> List[Comm]:
        """The TP collectives of the embedding (first stage) and of the output layer (the last position's stage)."""
        m, last = self.microbatches, self._last_position_stage()
        return ([Comm(op=op, where=self.tp_where, stream=Stream.COMPUTE, cadence=Cadence.EMBEDDING, stages=(0,),
                      count=m, overlaps="nothing") for op in self.tp.embedding.all()]
                + [Comm(op=op, where=self.tp_where, stream=Stream.COMPUTE, cadence=Cadence.HEAD, stages=(last,),
                        count=m, overlaps="nothing") for op in self.tp.head()])

    def _ep_entries(self) -> List[Comm]:
        """Dispatch and combine of each MoE layer (forward again under full recompute)."""
        m = self.microbatches
        out: List[Comm] = []
        if not self.stage_moe_layers:
            return out
        fwd_ep = self.ep.enter + self.ep.exit
        for op in self.ep.all():
            passes = self.layer_forwards if op in fwd_ep else 1
            out += [Comm(op=op, where=self.where(op.group), stream=Stream.EXPERT, cadence=Cadence.LAYER, stages=(s,),
                         count=n * m * passes, overlaps="the other micro-batch's compute when fused (overlap_moe_comm, "
                                                        "dualpipe); else nothing: the experts wait for it")
                    for s, n in enumerate(self.stage_moe_layers) if n]
        return out

    def _boundary_entries(self) -> List[Comm]:
        """The activation (and its gradient) across each pipeline boundary, and the receiver's TP all-gather."""
        m = self.microbatches
        out: List[Comm] = []
        for q in range(1, len(self.boundary)):
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
        return out

    def _iteration_entries(self) -> List[Comm]:
        """Once per iteration, per stage: its chunks' gradient reductions, the routed experts' and the dense
        parameter gathers; then the tied-embedding gradient sync of the first and the last stage."""
        out: List[Comm] = []
        reduce_overlaps = "the last micro-batch's backward" if self.overlap_grad_reduce else \
            "nothing: after the last backward"
        gather_overlaps = "the next forward, but its first bucket" if self.overlap_param_gather else \
            "nothing: after the optimizer step"
        for s in range(len(self.stage_layers)):
            per_stage = [(op, where, reduce_overlaps) for c in range(len(self.grad_reduce[s]))
                         for op, where in self.grad_reductions(s, c)]
            eg = self.expert_param_gather[s] if self.expert_param_gather else None
            if eg is not None:
                per_stage.append((eg, self.edp_where, "nothing: after the optimizer step"))
            ag = self.param_gather[s]
            if ag is not None:
                per_stage.append((ag, self.dp_where, gather_overlaps))
            out += [Comm(op=op, where=where, stream=Stream.DATA_PARALLEL, cadence=Cadence.ITERATION, stages=(s,),
                         count=1, overlaps=overlaps) for op, where, overlaps in per_stage]
        if self.embedding_sync is not None:
            out.append(Comm(op=self.embedding_sync, where=self.embedding_where, stream=Stream.DATA_PARALLEL,
                            cadence=Cadence.ITERATION, stages=(0, len(self.stage_layers) - 1), count=1,
                            overlaps="nothing: before the optimizer step"))
        return out


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


def _p2p(w: Workload, part: StagePartition) -> Tuple[Optional[Collective], Collective]:
    """(the receiver's TP all-gather of the scattered activation or None, one boundary's p2p message)."""
    plan, t = w.plan, w.plan.tp
    act_bytes = float(plan.tokens_per_rank * w.model.hidden_size * plan.dtype_bytes)
    gather = None
    if t > 1 and not plan.sequence_parallel:
        gather = Collective("p2p.gather", CollectiveKind.ALL_GATHER, act_bytes, Group.TP, t)
    return gather, Collective("p2p", CollectiveKind.P2P, act_bytes / t, Group.PP, 2)


def build_comm_plan(w: Workload, part: StagePartition) -> CommPlan:
    """Every communication of one iteration of the workload ``w`` on the partition ``part``."""
    model, plan, cluster, stack = w.model, w.plan, w.cluster, w.stack
    domain, p, v, moe = cluster.domain_size, plan.pp, plan.chunks, model.is_moe
    gather, msg = _p2p(w, part)
    boundary, boundary_where, boundary_stages = _boundaries(plan, part, domain, msg)
    sh = sharding_of(w, part)
    # dense gradients over DP (x CP); ZeRO-3 reduces each layer's in its backward, what is left at the end is
    # the embedding's and the head's; routed experts' over the expert-data-parallel group
    experts, dense = sync_rows(part, sh.reduce_per_layer, moe)
    g_experts, g_dense = (experts, dense) if sh.gather_per_layer == sh.reduce_per_layer else \
        sync_rows(part, sh.gather_per_layer, moe)
    grads, gathers = dp_syncs(plan, dense, g_dense)
    e_grads, e_gathers = expert_syncs(plan, experts, g_experts) if moe else ((), ())
    last_stage = part.stage_of(part.chain_len - 1)
    emb, emb_where = embedding_sync(plan, part, domain, last_stage)
    moe_layers = tuple(sum(part.moe_at(part.position(s, c)) for c in range(v)) for s in range(p)) if moe else ()
    ep_where = ep_placement(plan, domain)
    return CommPlan(tp=plan_tp_comms(model, plan, stack), tp_where=tp_placement(plan, domain),
                    cp=cp_comms(model, plan, stack.attention_expands_kv, stack.cp_grads_fp32, stack.cp_ring_merge),
                    cp_where=cp_placement(plan, domain), fsdp=sh.fsdp,
                    fsdp_where=shard_placement(plan, domain), replica_where=replica_placement(plan, domain),
                    boundary=tuple(boundary), boundary_where=tuple(boundary_where), p2p_gather=gather,
                    grad_reduce=grads, dp_where=dp_placement(plan, domain), bucket_bytes=grad_bucket_bytes(plan),
                    overlap_grad_reduce=plan.overlap_grad_reduce and not sh.deferred, embedding_sync=emb,
                    embedding_where=emb_where, param_gather=gathers, boundary_stages=tuple(boundary_stages),
                    stage_layers=tuple(part.stage_layers(s) for s in range(p)), microbatches=plan.num_microbatches,
                    layer_forwards=2 if plan.recompute.value == "full" else 1,
                    ep=plan_ep_comms(model, plan, ep_where, a2a_efficiency(cluster)), ep_where=ep_where,
                    etp_where=etp_placement(plan, domain), edp_where=edp_placement(plan, domain),
                    expert_grad_reduce=e_grads, expert_param_gather=e_gathers, stage_moe_layers=moe_layers,
                    last_stage=last_stage, fsdp_moe=sh.fsdp_moe, fsdp_experts=sh.fsdp_experts,
                    prefetch_gather_bytes=part.layer_params * plan.dtype_bytes
                    if plan.sharding_stage == 3 and sh.fsdp is None else 0.0,
                    overlap_param_gather=plan.overlap_param_gather, moe_mlp_tp=not moe or model.shared_ffn > 0)
