"""The data-parallel syncs of an iteration, per stage and model chunk: the gradient reductions after the last
backward pass (dense over DP x CP, routed experts over the expert-data-parallel group), the distributed
optimizer's parameter all-gathers and the tied-embedding gradient sync of the first and the last stage.
ZeRO-3 reduces (and gathers) the transformer layers' inside the passes (:mod:`vtrain.comm.sharding`); what is
left for the end of the iteration is the embedding's, the head's and the MTP modules'."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from vtrain.comm.placement import GroupPlacement, stages_share_domain
from vtrain.graph.ops import Collective, CollectiveKind, Group
from vtrain.workload.partition import StagePartition
from vtrain.workload.plan import ParallelPlan


def _params(part: StagePartition, stage: int, chunk: int, per_layer: bool) -> float:
    """Parameters whose gradients are reduced (or parameters gathered) after the last backward: all of the
    chunk's, or with ZeRO-3 only those outside the transformer layers (embedding, head, MTP)."""
    q = part.position(stage, chunk)
    total = part.position_params(q)
    if per_layer:
        n_moe = part.moe_at(q)
        total -= (part.layers[q] - n_moe) * part.layer_params + n_moe * part.moe_layer_params
    return total


def _expert_params(part: StagePartition, stage: int, chunk: int, per_layer: bool) -> float:
    """Routed-expert parameters reduced after the last backward (with ZeRO-3 only the MTP modules')."""
    if not per_layer:
        return part.chunk_expert_params(stage, chunk)
    q = part.position(stage, chunk)
    return part.mtp_expert_params if part.is_last(q) else 0.0


def sync_rows(part: StagePartition, per_layer: bool, moe: bool) -> Tuple[List[List[float]], List[List[float]]]:
    """[stage][chunk] (routed-expert, dense) parameters reduced or gathered once per iteration."""
    p, v = part.p, part.v
    experts = [[_expert_params(part, s, c, per_layer) if moe else 0.0 for c in range(v)] for s in range(p)]
    if moe or per_layer:
        return experts, [[_params(part, s, c, per_layer) - experts[s][c] for c in range(v)] for s in range(p)]
    return experts, [[part.position_params(part.position(s, c)) for c in range(v)] for s in range(p)]  # whole chunks


Rows = List[List[float]]  # [stage][chunk] parameters


def dp_syncs(plan: ParallelPlan, dense: Rows, g_dense: Rows
             ) -> Tuple[Tuple[Tuple[Collective, ...], ...], Tuple[Optional[Collective], ...]]:
    """Per stage: each chunk's dense gradient reduction over DP (x CP), and the parameter all-gather of the
    distributed optimizer (None without one). Stages of equal sizes (the middle of a pipeline) share one row."""
    reducers = plan.dp * plan.cp
    kind = CollectiveKind.REDUCE_SCATTER if plan.sharding_stage >= 1 else CollectiveKind.ALL_REDUCE
    names = [f"dp.grad.chunk{c}" for c in range(len(dense[0]))]
    gather_all = plan.sharding_stage >= 1 and reducers > 1  # overlapped or not: the tail prices what is exposed
    rows: Dict[Tuple[float, ...], Tuple[Tuple[Collective, ...], Optional[Collective]]] = {}  # (grads, -1, gathers)
    grads: List[Tuple[Collective, ...]] = []
    gathers: List[Optional[Collective]] = []
    for row, g_row in zip(dense, g_dense):
        key = (*row, -1.0, *g_row)
        hit = rows.get(key)
        if hit is None:
            hit = rows[key] = (
                tuple(Collective(names[c], kind, x * plan.grad_bytes, Group.DP, reducers) for c, x in enumerate(row)),
                Collective("dp.param_gather", CollectiveKind.ALL_GATHER, sum(g_row) * plan.dtype_bytes, Group.DP,
                           reducers)
                if gather_all else None)
        grads.append(hit[0])
        gathers.append(hit[1])
    return tuple(grads), tuple(gathers)


def expert_syncs(plan: ParallelPlan, experts: Rows, g_experts: Rows
                 ) -> Tuple[Tuple[Tuple[Optional[Collective], ...], ...], Tuple[Optional[Collective], ...]]:
    """Per stage: each chunk's routed-expert gradient reduction over the expert-data-parallel group (None:
    no experts), and their parameter all-gather from ZeRO stage 1 on."""
    edp = plan.expert_dp
    kind = CollectiveKind.REDUCE_SCATTER if plan.sharding_stage >= 1 else CollectiveKind.ALL_REDUCE
    grads = tuple(tuple(Collective(f"edp.grad.chunk{c}", kind, x * plan.grad_bytes, Group.EDP, edp) if x > 0 else None
                        for c, x in enumerate(row)) for row in experts)
    gathers = tuple(Collective("edp.param_gather", CollectiveKind.ALL_GATHER, sum(row) * plan.dtype_bytes, Group.EDP,
                               edp) if plan.sharding_stage >= 1 and edp > 1 and sum(row) > 0 else None
                    for row in g_experts)
    return grads, gathers


def embedding_sync(plan: ParallelPlan, part: StagePartition, domain: int, last_stage: int
                    ) -> Tuple[Optional[Collective], GroupPlacement]:
    """The all-reduce of the tied word-embedding gradient between the first and the last stage (None: untied or
    one stage holds both), and where its two ends sit."""
    if part.tied_sync_params <= 0:
        return None, GroupPlacement(1, 1)
    emb = Collective("embedding.grad_sync", CollectiveKind.ALL_REDUCE, part.tied_sync_params * plan.grad_bytes,
                     Group.EMBEDDING, 2)
    return emb, GroupPlacement(2, 2 if stages_share_domain(plan, domain, 0, last_stage) else 1)


