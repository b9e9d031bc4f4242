"""The load of a mixture of experts on one GPU: the tokens it routes, the busiest expert rank's share, and how
many distinct expert-parallel ranks a token reaches. The MoE graph (:mod:`vtrain.graph.moe`), its memory
(:mod:`vtrain.sim.memory_moe`) and the dispatch collectives (:mod:`vtrain.comm.ep`) read them from here."""
from __future__ import annotations

from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan


def cp_of(plan: ParallelPlan) -> int:
    """The context-parallel degree (1 until the plan has one)."""
    return plan.cp


def expert_load(model: ModelSpec) -> float:
    """Rows the busiest expert-parallel rank processes, relative to the balanced mean: the capacity factor
    (tokens padded to capacity, the rest dropped) or, dropless, the measured routing imbalance."""
    return model.capacity_factor if model.capacity_factor is not None else model.moe_imbalance


def moe_tokens(plan: ParallelPlan) -> int:
    """Tokens one GPU routes per micro-batch: its sequence-parallel (and context-parallel) share."""
    tokens = plan.micro_batch_size * plan.seq_len // cp_of(plan)
    return tokens // plan.tp if plan.sequence_parallel else tokens


def miss_probability(num_experts: int, top_k: int, parts: int) -> float:
    """The chance that none of a token's ``top_k`` experts (drawn uniformly without replacement from
    ``num_experts``) lies in one given part of ``num_experts / parts`` experts: C(E - E/P, k) / C(E, k)."""
    per_part = num_experts / parts
    miss = 1.0
    for i in range(top_k):
        miss *= max(0.0, num_experts - per_part - i) / (num_experts - i)
    return miss


def distinct_rank_fraction(num_experts: int, top_k: int, ep: int) -> float:
    """DeepEP's NVLink rows relative to NCCL's: its dispatch sends a token once to each destination rank that
    holds one of its experts (``is_token_in_rank`` in deep_ep's ``get_dispatch_layout``; Megatron-Core's
    _DeepepManager permutes the received tokens into expert order afterwards), NCCL's all-to-all each of its
    k expert copies (MoEAlltoAllTokenDispatcher permutes before sending). A token reaches
    ep (1 - C(E - E/ep, k) / C(E, k)) ranks in expectation, against k copies."""
    if ep <= 1:
        return 1.0
    return min(1.0, ep * (1.0 - miss_probability(num_experts, top_k, ep)) / top_k)
