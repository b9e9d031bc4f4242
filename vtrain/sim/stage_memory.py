"""Memory per GPU of each pipeline stage, assembled from the terms of :mod:`vtrain.sim.memory` (weights,
gradients, optimizer states, in-flight activations) and :mod:`vtrain.sim.memory_moe` (experts, MLA, MTP,
dispatch buffers); block recompute mixes the recomputed and the kept layers' activations. The report's peak is
the maximum over the stages; :func:`memory_lower_bound_bytes` bounds it without simulating."""
from __future__ import annotations

from dataclasses import replace
from typing import List, Optional

from vtrain.comm.sharding import deferred_sync
from vtrain.graph.builder import tail_layers
from vtrain.graph.options import graph_options
from vtrain.report import MemoryBreakdown
from vtrain.sim.memory import (
    cp_gathered_kv_bytes,
    fp8_weight_cache_bytes_per_param,
    inflight_layers,
    kept_layers,
    layer_activation_bytes,
    loss_bytes_per_logit,
    sharded_working_bytes,
    state_bytes_per_param,
)
from vtrain.sim.memory_moe import moe_memory
from vtrain.sim.stage_costs import recomputed_layers, tail_at
from vtrain.workload.enums import Precision, Recompute
from vtrain.workload.partition import StagePartition, layer_split, partition
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.workload import Workload


def stage_memory(w: Workload, part: StagePartition) -> List[MemoryBreakdown]:
    """Memory per GPU of each stage (what the report's peak takes the maximum of)."""
    return _dense_and_moe(w, part)


def _dense_and_moe(w: Workload, part: StagePartition) -> List[MemoryBreakdown]:
    model, plan, stack = w.model, w.plan, w.stack
    act_layer = layer_activation_bytes(model, plan, keeps_unread=stack.sac_keeps_unread)
    w_b, g_b, o_b = state_bytes_per_param(plan, masters_sharded=stack.fsdp_fp32_shards)
    tokens = plan.tokens_per_rank
    logits_bytes = tokens * model.vocab_shard(plan.tp) * loss_bytes_per_logit(plan, stack)
    working = layer_activation_bytes(model, plan, Recompute.NONE) if plan.recompute == Recompute.FULL else 0.0
    working += cp_gathered_kv_bytes(model, plan, stack.attention_expands_kv)
    last = part.stage_of(part.chain_len - 1)
    moe_like = model.is_moe or model.is_mla or model.mtp_layers
    moe = moe_memory(model, plan, part, stack.fsdp_fp32_shards) if moe_like else None
    fp8_cache = fp8_weight_cache_bytes_per_param(plan, stack)
    deferred = deferred_sync(plan, stack)
    tail = tail_layers(model, plan, graph_options(stack))
    tail_extra = layer_activation_bytes(model, replace(plan, precision=Precision.BF16),
                                        keeps_unread=stack.sac_keeps_unread) - act_layer if tail else 0.0
    out = []
    for s in range(plan.pp):
        params = part.stage_params(s)
        layers = part.stage_layers(s)
        gathered_w, gathered_g = sharded_working_bytes(part.layer_params, layers, plan, deferred)
        inflight = inflight_layers(plan, s, layers, part.chunk_layers(s))
        # the bf16 tail's layers (builder.tail_layers) hold their own activations, in flight in the stage's share
        n_tail = sum(tail_at(part, part.position(s, c), tail) for c in range(part.v)) if tail else 0
        kept = max(0.0, inflight - plan.offload_layers)  # less the offloaded layers (memory.kept_layers)
        acts = kept * act_layer + (inflight / layers * n_tail * tail_extra if n_tail else 0.0)
        terms = (params * w_b + gathered_w + fp8_cache * layers * part.layer_params, params * g_b + gathered_g,
                 params * o_b, acts + working,
                 stack.memory_reserved_bytes + (logits_bytes * (1 + part.mtp_layers) if s == last else 0.0))
        if moe is not None:
            terms = moe(s, terms)
        out.append(MemoryBreakdown(*terms))
    return out


def recomputed_share(part: StagePartition, plan: ParallelPlan, stage: Optional[int] = None) -> float:
    """The share of the layers (of ``stage``, else of the model) that run their recompute under block
    recompute (``plan.recompute_num_layers``: the first ones of each model chunk)."""
    chunks = [part.position(s, c) for s in (range(part.p) if stage is None else (stage,)) for c in range(part.v)]
    n = sum(part.layers[q] for q in chunks)
    r = sum(recomputed_layers(plan.recompute_num_layers, part.layers[q]) for q in chunks)
    return r / n if n else 1.0


def partial_recompute_memory(w: Workload, part: StagePartition) -> List[MemoryBreakdown]:
    """Block recompute: per stage, the recomputed layers' activations as under full recompute and the others'
    as without recompute, plus one recomputed layer's working set (what full recompute adds besides the layer
    inputs, held while a layer runs again)."""
    full = _dense_and_moe(w, part)
    kept = _dense_and_moe(replace(w, plan=replace(w.plan, recompute=Recompute.NONE, recompute_num_layers=0)), part)
    working = layer_activation_bytes(w.model, w.plan, Recompute.NONE)
    out = []
    for s, (f, k) in enumerate(zip(full, kept)):
        share = recomputed_share(part, w.plan, s)
        act = share * f.activations_bytes + (1.0 - share) * (k.activations_bytes + working)
        out.append(replace(f, activations_bytes=act))
    return out



def memory_lower_bound_bytes(w: Workload, plan: ParallelPlan) -> float:
    """A lower bound of the simulated peak memory per GPU, without simulating.

    Stage 0 holds at least its transformer layers' weights, gradients and optimizer states
    (:func:`state_bytes_per_param`), the activations of its in-flight micro-batches
    (:func:`inflight_layers` x :func:`layer_activation_bytes`,
    Korthikanti et al. 2022) and the reserved memory; the simulator adds the embedding, norms and
    the full-recompute working set on top, so this never exceeds ``Report.peak_memory_bytes``
    (``tests/test_search.py`` checks it). Used to skip plans that cannot fit before simulating them.
    """
    model = w.model
    if model.is_moe or model.is_mla or model.mtp_layers:  # stage 0's own memory (no simulation needed)
        w2 = replace(w, plan=plan)
        return stage_memory(w2, partition(model, plan))[0].total_bytes
    split = layer_split(model.num_layers, plan)
    layers = sum(split[c * plan.pp] for c in range(plan.chunks))  # stage 0
    params = (model.attention_params() + model.mlp_params()) / plan.tp * layers
    wb, gb, ob = state_bytes_per_param(plan, masters_sharded=w.stack.fsdp_fp32_shards)
    chunks = tuple(split[c * plan.pp] for c in range(plan.chunks))
    acts = kept_layers(plan, 0, layers, chunks) * layer_activation_bytes(model, plan,
                                                                        keeps_unread=w.stack.sac_keeps_unread)
    return params * (wb + gb + ob) + acts + w.stack.memory_reserved_bytes
