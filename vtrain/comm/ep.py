"""Expert-parallel communication: token dispatch and combine around the experts of an MoE layer.

Megatron-Core's layout (``RankGenerator`` for experts, order tp-cp-ep-dp-pp): the tp·dp·cp ranks of a
pipeline stage are regrouped as etp x ep x edp; an EP group is ``ep`` ranks ``etp`` apart, an ETP group
``etp`` consecutive ranks, and the expert gradients reduce over the edp ranks that hold the same experts
(dense gradients over dp as before). Each GPU routes its tokens (b·s/tp with sequence parallelism) to
top-k experts; per MoE layer and micro-batch (forward; the backward mirrors it):

- ``alltoall`` / ``deepep`` / ``hybridep``: all-to-all dispatch of tokens·k rows of h over the EP group (the
  flex backends: each token once per destination rank), all-gather over ETP (etp > 1), the grouped expert
  GEMMs, reduce-scatter over ETP, all-to-all combine. The permutation kernels around them are the graph's
  (:func:`vtrain.graph.moe.permutations`); DeepEP and HybridEP hold SMs while they run (``DISPATCH_SMS``),
  which slows the compute they overlap with.
- ``allgather``: every GPU all-gathers the EP group's tokens (ep·tokens rows), keeps those routed to its
  experts, and the outputs are reduce-scattered back.

Routing imbalance: the busiest rank receives ``moe_imbalance`` times the mean (or, with a capacity factor,
exactly capacity rows, padded), and every rank waits for it, so the all-to-all bytes and the expert GEMM
rows scale by that load factor (:func:`vtrain.workload.moe_load.expert_load`). The all-to-all runs on NVLink
within the NVLink domain and over the GPU's NIC share beyond it
(:func:`vtrain.cost.collectives.collective_time_s`, all-to-all).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from vtrain.comm.placement import GroupPlacement, placement
from vtrain.errors import ConfigError
from vtrain.graph.collectives import TpOperator
from vtrain.graph.ops import Collective, CollectiveKind, Group
from vtrain.workload.enums import MoeDispatcher
from vtrain.workload.model import ModelSpec
from vtrain.workload.moe_load import cp_of, distinct_rank_fraction, expert_load, miss_probability, moe_tokens
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.system import ClusterSpec

# SMs a dispatcher's kernels hold while they overlap compute. DeepEP: DeepSeek-V3 report, Sec. 3.2.2 ("only
# 20 SMs are sufficient to fully utilize the bandwidths of IB and NVLink"); NCCL all-to-all: one CTA per
# channel, NCCL's default of 32 channels on NVSwitch systems (NCCL_MAX_NCHANNELS; assumed, not measured).
# HybridEP: Megatron-Core's moe_hybridep_num_sms default (_HybridEPManager, 24 SMs).
DISPATCH_SMS: Dict[MoeDispatcher, int] = {MoeDispatcher.DEEPEP: 20, MoeDispatcher.HYBRIDEP: 24,
                                          MoeDispatcher.ALLTOALL: 32, MoeDispatcher.ALLGATHER: 32}
# the flex dispatcher's backends: a token sent once to each rank (and node) holding one of its experts
FLEX: Tuple[MoeDispatcher, ...] = (MoeDispatcher.DEEPEP, MoeDispatcher.HYBRIDEP)
# DeepEP's normal kernels across nodes, as a share of the NIC's line rate: DeepEP README, H800 with one CX7
# InfiniBand 400 Gb/s NIC each (~50 GB/s), bottleneck RDMA bandwidth EP16 dispatch 43 / combine 43 GB/s, EP32
# 44 / 47 GB/s: mean 44.25 / 50 = 0.885 (measured, not fitted to any vtrain row)
DEEPEP_RDMA_EFFICIENCY = 0.885


def expert_parallel_degrees(num_experts: int, tp: int, dp: int, cp: int = 1, etp: int = 0) -> List[int]:
    """Every ep the rules of :func:`check_expert_parallel` admit (for the plan search)."""
    if num_experts <= 0:
        return [1]
    e_tp = etp or tp
    ranks = tp * dp * cp
    return [ep for ep in range(1, num_experts + 1)
            if num_experts % ep == 0 and ranks % (e_tp * ep) == 0]


def expert_tensor_parallel_degrees(model: ModelSpec, tp: int) -> List[int]:
    """Every etp for the plan search: 1, or a divisor of tp that divides the expert width (Megatron-Core
    allows any etp with etp*ep dividing tp*dp*cp; the search keeps ETP inside the TP group)."""
    return [e for e in range(1, tp + 1) if tp % e == 0 and model.expert_ffn % e == 0] if model.is_moe else [tp]


def check_expert_parallel(m: ModelSpec, p: ParallelPlan) -> None:
    """Megatron-Core's rules, one line each naming the field."""
    etp, cp = p.expert_tp, cp_of(p)
    if not m.is_moe:
        if p.ep > 1 or p.etp not in (0, p.tp):
            raise ConfigError(f"ep={p.ep}, etp={p.etp} need a model with experts (model.num_experts=0)")
        if p.overlap_moe_comm:
            raise ConfigError("overlap_moe_comm=true needs a model with experts (model.num_experts=0)")
        return
    if m.num_experts % p.ep:
        raise ConfigError(f"ep={p.ep} must divide num_experts={m.num_experts}")
    ranks = p.tp * p.dp * cp
    if ranks % (etp * p.ep):
        if etp == p.tp:
            raise ConfigError(f"ep={p.ep} must divide dp*cp={p.dp * cp}")
        raise ConfigError(f"etp*ep={etp}*{p.ep} must divide tp*dp*cp={ranks}")
    if m.expert_ffn % etp:
        raise ConfigError(f"etp={etp} must divide moe_ffn_hidden_size={m.expert_ffn}")
    if m.shared_ffn % p.tp:  # Megatron-Core's SharedExpertMLP is split over the TP ranks, not the expert TP
        raise ConfigError(f"tp={p.tp} must divide the shared experts' width={m.shared_ffn} "
                          "(model.shared_expert_ffn_hidden_size, or num_shared_experts * moe_ffn_hidden_size)")
    if p.tp > 1 and not p.sequence_parallel:
        raise ConfigError(f"tp={p.tp} with experts needs sequence_parallel=true (Megatron-Core MoE)")
    if p.overlap_moe_comm and not (p.schedule.value == "interleaved" or p.pp == 1):
        raise ConfigError(f"overlap_moe_comm=true needs schedule=interleaved (or pp=1), not {p.schedule.value} "
                          "with pp>1 (Megatron-Core; dualpipe and dualpipev overlap by themselves)")


def ep_placement(plan: ParallelPlan, domain: int) -> GroupPlacement:
    """The EP group: ep ranks etp apart (the allgather dispatcher gathers over the ep*etp consecutive ranks)."""
    if plan.moe_dispatcher == MoeDispatcher.ALLGATHER:
        return placement(plan.ep * plan.expert_tp, 1, domain)
    return placement(plan.ep, plan.expert_tp, domain)


def etp_placement(plan: ParallelPlan, domain: int) -> GroupPlacement:
    return placement(plan.expert_tp, 1, domain)


def edp_placement(plan: ParallelPlan, domain: int) -> GroupPlacement:
    return placement(plan.expert_dp, plan.expert_tp * plan.ep, domain)


def remote_node_fraction(num_experts: int, top_k: int, nodes: int) -> float:
    """DeepEP's network rows relative to NCCL's: DeepEP sends a token once to each remote node that holds
    one of its experts (to the GPU of the same local rank, which forwards it over NVLink: DeepSeek-V3
    report, Sec. 3.2.2), NCCL sends each of its k copies. With uniform routing over ``nodes`` nodes of
    E/nodes experts each, a node misses a token with probability C(E - E/N, k) / C(E, k), so a token
    reaches (N-1)(1 - P) remote nodes in expectation, against k(N-1)/N remote copies."""
    if nodes <= 1:
        return 1.0
    miss = miss_probability(num_experts, top_k, nodes)
    return min(1.0, (nodes - 1) * (1.0 - miss) / (top_k * (nodes - 1) / nodes))


def deepep_wire_fraction(num_experts: int, top_k: int, ep: int, nodes: int) -> float:
    """DeepEP's bytes relative to NCCL's k copies: inside one NVLink domain the per-rank deduplication
    (:func:`distinct_rank_fraction`), across domains the per-node one on the network, the bottleneck
    (:func:`remote_node_fraction`)."""
    if nodes <= 1:
        return distinct_rank_fraction(num_experts, top_k, ep)
    return remote_node_fraction(num_experts, top_k, nodes)


def a2a_efficiency(cluster: ClusterSpec) -> float:
    """The share of the NIC's line rate at which ``cluster`` prices an all-to-all across nodes
    (:func:`vtrain.cost.collectives.collective_time_s`: the tier's all-to-all efficiency, else its own, capped
    by NCCL's per-GPU all-to-all ceiling ``all_to_all_gb_per_s`` over the GPU's NIC share)."""
    tier = cluster.inter_node
    eff = tier.kind_efficiency.get(CollectiveKind.ALL_TO_ALL.value, tier.efficiency)
    if tier.all_to_all_gb_per_s is None:
        return eff
    return min(eff, tier.all_to_all_gb_per_s * cluster.gpus_per_node / tier.bandwidth_gb_per_s)


def plan_ep_comms(model: ModelSpec, plan: ParallelPlan, where: GroupPlacement = GroupPlacement(1, 1),
                  inter_a2a_efficiency: float = DEEPEP_RDMA_EFFICIENCY) -> TpOperator:
    """The dispatch/combine collectives of one MoE layer and micro-batch on one GPU: ``enter`` before the
    experts (dispatch), ``exit`` after them (combine), and their backward counterparts. ``where``: the EP
    group's placement (DeepEP's network bytes depend on the nodes it spans, :func:`remote_node_fraction`;
    the all-to-all's NVLink share then scales alike, which understates DeepEP's NVLink forwarding, never
    the bottleneck across nodes). ``inter_a2a_efficiency``: the share of the NIC's line rate the cluster
    prices an all-to-all across nodes at; DeepEP's bytes across nodes scale by it over
    :data:`DEEPEP_RDMA_EFFICIENCY`, so that they move at DeepEP's measured rate."""
    if not model.is_moe:
        return TpOperator()
    h, dt, k = model.hidden_size, plan.dtype_bytes, model.moe_top_k
    rows = moe_tokens(plan)
    etp, ep = plan.expert_tp, plan.ep
    a2a, ag, rs = CollectiveKind.ALL_TO_ALL, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
    if plan.moe_dispatcher == MoeDispatcher.ALLGATHER:  # Megatron-Core's MoEAllGatherTokenDispatcher
        n = ep * etp
        if n == 1:
            return TpOperator()
        full = float(n * rows * h * dt)  # the gathered tokens of the EP x ETP group
        return TpOperator(enter=(Collective("moe.dispatch.ag", ag, full, Group.EP, n),),
                          exit=(Collective("moe.combine.rs", rs, full, Group.EP, n),),
                          enter_backward=(Collective("moe.dispatch.bwd.rs", rs, full, Group.EP, n),),
                          exit_backward=(Collective("moe.combine.bwd.ag", ag, full, Group.EP, n),))
    nbytes = float(rows * k * h * dt) * expert_load(model)
    if plan.moe_dispatcher in FLEX:  # HybridEP's RDMA path: DeepEP's measured rate, transferred
        nbytes *= deepep_wire_fraction(model.num_experts, k, ep, where.nodes)
        if where.nodes > 1:  # priced at the cluster's all-to-all rate: at DeepEP's measured one instead
            nbytes *= inter_a2a_efficiency / DEEPEP_RDMA_EFFICIENCY
    enter: List[Collective] = []
    exit_: List[Collective] = []
    enter_b: List[Collective] = []
    exit_b: List[Collective] = []
    # dropless dispatch needs the received row counts on the host before it can size its buffers:
    # Megatron-Core's alltoall dispatcher copies the splits to the host and synchronizes, DeepEP's normal
    # kernels make the CPU wait for them; with a capacity factor the rows are padded and known
    sync = model.capacity_factor is None
    if ep > 1:
        enter.append(Collective("moe.dispatch", a2a, nbytes, Group.EP, ep, host_sync=sync))
        exit_b.append(Collective("moe.combine.bwd", a2a, nbytes, Group.EP, ep))
    if etp > 1:
        gathered = nbytes * etp
        enter.append(Collective("moe.etp.ag", ag, gathered, Group.ETP, etp))
        exit_.append(Collective("moe.etp.rs", rs, gathered, Group.ETP, etp))
        exit_b.append(Collective("moe.etp.bwd.ag", ag, gathered, Group.ETP, etp))
        enter_b.append(Collective("moe.etp.bwd.rs", rs, gathered, Group.ETP, etp))
    if ep > 1:
        exit_.append(Collective("moe.combine", a2a, nbytes, Group.EP, ep))
        enter_b.append(Collective("moe.dispatch.bwd", a2a, nbytes, Group.EP, ep))
    return TpOperator(tuple(enter), tuple(exit_), tuple(enter_b), tuple(exit_b))


def imbalance_from_expert_load(tokens_per_expert: Sequence[Sequence[float]], ep: int) -> float:
    """``moe_imbalance`` from a measured expert-load histogram: per MoE layer the tokens each expert received
    (one row per layer, experts in Megatron's order: expert e on EP rank e // (E/ep)). Each layer waits for
    its busiest EP rank, so the factor is the mean over layers of max-rank load / mean-rank load."""
    factors = []
    for counts in tokens_per_expert:
        per_rank = len(counts) // ep
        if per_rank * ep != len(counts):
            raise ConfigError(f"ep={ep} must divide the {len(counts)} experts of the histogram")
        loads = [sum(counts[r * per_rank:(r + 1) * per_rank]) for r in range(ep)]
        mean = sum(loads) / ep
        factors.append(max(loads) / mean if mean > 0 else 1.0)
    return sum(factors) / len(factors) if factors else 1.0
