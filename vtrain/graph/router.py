"""The MoE router's kernels after its gating GEMM and the dispatcher's bookkeeping, as Megatron-Core runs them
(issue 39).

Megatron-Core's ``TopKRouter.routing`` (megatron/core/transformer/moe/router.py, moe_utils.py; the same structure
in the 0.14-0.16 releases under Megatron-Bridge 25.09-26.02), per MoE layer and micro-batch on T tokens and E
experts, scores in fp32 (``moe_router_dtype: fp32``; Transformer Engine's fused kernels compute and keep them in
fp32 whatever the logits' type):

1. score function and top-k (``topk_routing_with_score_function``): with ``moe_router_fusion`` one Transformer
   Engine kernel (``fused_topk_with_score_function``: reads the logits, writes the probabilities, the routing map
   and the intermediate it keeps for backward; one kernel back); without it eager PyTorch ops: softmax after the
   top-k, or sigmoid, expert bias, gather and normalisation, then the [T, E] probabilities and map built by
   ``zeros_like`` + ``scatter`` (twice, the map through ``.int()`` and ``.bool()``);
2. token drop (``moe_expert_capacity_factor``: ``apply_router_token_dropping``, drop policy ``probs``): a
   ``torch.topk`` over the token dimension per expert (k = the capacity), then ``zeros_like``, ``scatter``,
   ``.bool()`` and the masked probabilities (``moe_pad_expert_input_to_capacity``: the mask is the map); PyTorch
   runs that top-k as one radix-select kernel per slice or, for E slices of T tokens past its threshold
   (:func:`topk_kernels`), the multi-block radix select: a fill, three kernels per 8-bit digit of fp32 (digit
   counts, their cumulative sum, the within-k counts) and the gather;
3. the load-balancing loss (``moe_router_load_balancing_type`` aux_loss / seq_aux_loss with a non-zero
   ``moe_aux_loss_coeff``; :class:`vtrain.workload.enums.MoeAuxLoss`): the scores again
   (``compute_routing_scores_for_aux_loss``: fused, one kernel; else the score function, a top-k and the map),
   the tokens per expert (``routing_map.sum(dim=0)``, all-reduced over the TP x CP group when it has several
   ranks: E int64; not counted where both TP and CP do), the loss (``fused_moe_aux_loss``, or the eager sums),
   the logging (loss / coefficient, added into the layer's tracker entry; seq_aux_loss also divides by the
   batch); backward: the auto-scaler's scaled one, the loss' and the scores' backward kernels and the sum of the
   logits' two gradients;
4. the expert bias of a sigmoid router (``moe_router_enable_expert_bias``): ``local_tokens_per_expert +=
   routing_map.sum(dim=0)``.

Beside them, the dispatchers' bookkeeping of the routing map (the all-to-all dispatcher's, with its all-to-all of the
probabilities, and the flex dispatcher's: :func:`dispatch_bookkeeping`). Each kernel is a PyTorch op issued from
Megatron-Core's Python (``MemoryOp.eager``: the stack's host time per eager op), priced as vtrain prices small
kernels: its bytes at the memory rate, never under one kernel time each. Z-loss (``moe_z_loss_coeff``) is off in
every recipe read and not modelled; Megatron-Bridge's benchmarks also run ``moe_router_force_load_balancing`` (two
more kernels, a clone and ``normal_`` of the logits), which is not a property of the model and is left out.
"""
from __future__ import annotations

import math
from typing import List, Tuple

from vtrain.graph.ops import Collective, CollectiveKind, Group, MemoryOp, Op
from vtrain.workload.enums import MoeAuxLoss, MoeDispatcher, MoeRouter
from vtrain.workload.model import ModelSpec
from vtrain.workload.moe_load import expert_load, moe_tokens
from vtrain.workload.plan import ParallelPlan

SCORE_BYTES = 4  # fp32 scores, probabilities and their gradients
# PyTorch's multi-block radix select (aten/src/ATen/native/cuda/TensorTopK.cu, mbtopk): a fill of its counters,
# then per 8-bit digit of a 4-byte key computeBlockDigitCounts, computeDigitCumSum and
# computeBlockwiseWithinKCounts, then gatherTopK
MULTIBLOCK_TOPK_KERNELS = 1 + 3 * 4 + 1
MULTIBLOCK_TOPK_READS = 5  # each digit pass and the gather read the input once
SINGLE_BLOCK_TOPK_READS = 16  # one block per slice, a radix select of 2-bit digits reads its slice 16 times


def _eager(name: str, nbytes: float, kernels: int = 1) -> MemoryOp:
    return MemoryOp(name, float(nbytes), kernels, eager=True)


def topk_kernels(slices: int, slice_size: int) -> int:
    """Kernels of one ``torch.topk`` over ``slices`` slices of ``slice_size`` elements: PyTorch's
    ``should_use_multiblock`` thresholds (TensorTopK.cu) pick the multi-block radix select for large slices."""
    multi = ((slices <= 20 and slice_size >= 20000) or (20 < slices <= 40 and slice_size >= 10000)
             or (40 < slices <= 80 and slice_size >= 8000) or (80 < slices < 200 and slice_size >= 5000)
             or (200 <= slices < 800 and slice_size >= 3000) or (800 <= slices <= 4000 and slice_size >= 800)
             or (slices > 4000 and slice_size >= 400))
    return MULTIBLOCK_TOPK_KERNELS if multi else 1


def _score_topk(model: ModelSpec, s: float, m: float, fused: bool) -> Tuple[MemoryOp, MemoryOp]:
    """(forward, backward) of the score function and top-k over the [T, E] logits (``s`` bytes of fp32 scores,
    ``m`` bytes of the bool map)."""
    if fused:  # read the logits; write probabilities, intermediate and map / read map, intermediate, grad
        return (_eager("moe.router.topk", 3 * s + m), _eager("moe.router.topk.bwd", 3 * s + m))
    # the [T, E] probabilities and map: zeros_like, scatter, zeros_like, .int(), scatter, .bool()
    build = (6, 5 * s + m)
    if model.moe_router == MoeRouter.SIGMOID:  # sigmoid, + bias, top-k, gather, sum, + eps, div, x scale
        fwd = (8 + build[0], 6 * s + build[1])
        # the scatter's gather, x scale, the division's two terms, sum, the gather's zeros + scatter, sigmoid
        bwd = (9, 6 * s)
    else:  # top-k of the logits, softmax of the k
        fwd = (2 + build[0], s + build[1])
        bwd = (4, 2 * s)  # the scatter's gather, softmax backward, top-k's zeros + scatter
    return (_eager("moe.router.topk", fwd[1], fwd[0]), _eager("moe.router.topk.bwd", bwd[1], bwd[0]))


def _token_drop(model: ModelSpec, tokens: int, s: float, m: float) -> Tuple[List[Op], List[Op]]:
    """The capacity mask of ``apply_router_token_dropping`` (none where the capacity holds every token)."""
    e, k = model.num_experts, model.moe_top_k
    cf = model.capacity_factor
    if cf is None or math.ceil(tokens * k / e * cf) > tokens:
        return [], []
    topk = topk_kernels(e, tokens)
    reads = MULTIBLOCK_TOPK_READS if topk > 1 else SINGLE_BLOCK_TOPK_READS
    # zeros_like, scatter, .bool(), probabilities x mask
    return ([_eager("moe.router.capacity.topk", reads * s, topk), _eager("moe.router.capacity.mask", 4 * s + 2 * m, 4)],
            [_eager("moe.router.capacity.mask.bwd", 2 * s + m)])


def _aux_loss(model: ModelSpec, plan: ParallelPlan, s: float, m: float, fused: bool) -> Tuple[List[Op], List[Op]]:
    """The load-balancing loss' kernels (none without one)."""
    if model.moe_aux_loss == MoeAuxLoss.NONE:
        return [], []
    scalars = 3 if model.moe_aux_loss == MoeAuxLoss.SEQ else 2  # / coefficient, tracker add (, / batch)
    if fused:  # fused_score_for_moe_aux_loss, routing_map.sum, fused_moe_aux_loss
        scores, loss = (1, 3 * s + m), (2, s + m)
        scores_b, loss_b = (1, 3 * s), (1, s)
    else:  # the score function, top-k, zeros_like.int, scatter, .bool / probs.sum, x, sum, x coefficient
        scores, loss = (6, 8 * s + m), (5, s + m)
        scores_b, loss_b = (2, 4 * s), (3, s)
    fwd: List[Op] = [_eager("moe.router.aux.scores", scores[1], scores[0]),
                     _eager("moe.router.aux.loss", loss[1], loss[0] + scalars)]
    # the tokens per expert summed over the TP x CP group (reduce_from_tensor_model_parallel_region): E int64
    group = (Group.TP, plan.tp) if plan.cp == 1 else (Group.CP, plan.cp) if plan.tp == 1 else (Group.TP, 1)
    if group[1] > 1:
        fwd.insert(1, Collective("moe.router.aux.allreduce", CollectiveKind.ALL_REDUCE, 8.0 * model.num_experts,
                                 group[0], group[1]))
    # the auto-scaler's ones_like x scale (and the batch division), the loss, the scores, the logits' two grads
    bwd: List[Op] = [_eager("moe.router.aux.loss.bwd", loss_b[1], loss_b[0] + scalars),
                     _eager("moe.router.aux.scores.bwd", scores_b[1] + 3 * s, scores_b[0] + 1)]
    return fwd, bwd


def router_ops(model: ModelSpec, plan: ParallelPlan, tokens: int, fused: bool) -> Tuple[List[Op], List[Op]]:
    """(forward, backward in backward order) of the router's kernels after its gating GEMM on ``tokens`` tokens;
    ``fused``: Megatron-Core's ``moe_router_fusion`` (Transformer Engine's router kernels)."""
    s, m = float(tokens * model.num_experts * SCORE_BYTES), float(tokens * model.num_experts)
    topk, topk_b = _score_topk(model, s, m, fused)
    drop, drop_b = _token_drop(model, tokens, s, m)
    aux, aux_b = _aux_loss(model, plan, s, m, fused)
    fwd: List[Op] = [topk, *drop, *aux]
    if model.moe_router == MoeRouter.SIGMOID:  # the expert bias' token count: sum and add
        fwd.append(_eager("moe.router.expert_bias", m, 2))
    return fwd, [*aux_b, *drop_b, topk_b]


def gating_backward_casts(model: ModelSpec, tokens: int) -> MemoryOp:
    """The casts around the gating GEMM's backward in fp32 (``RouterGatingLinearFunction.backward``: the weight and
    the input to fp32 for Transformer Engine's GEMMs, the input and weight gradients back to bf16): 6 B per element
    of the [T, h] input twice and of the [E, h] weight twice."""
    h, e = model.hidden_size, model.num_experts
    return _eager("moe.router.bwd_casts", 12.0 * (tokens * h + e * h), 4)


def _flex_bookkeeping(model: ModelSpec, plan: ParallelPlan, tokens: int) -> Tuple[List[Op], List[Op], List[Op]]:
    """The flex dispatcher's routing metadata (Megatron-Core's _DeepepManager / _HybridEPManager). HybridEP's
    ``dispatch_with_permute`` all-gathers every rank's bool routing map over the EP group
    (``all_gather_into_tensor``, ep x T x E bytes) and runs its metadata-preprocessing kernel on it in every
    forward (the backward reuses the handle), then Megatron-Core sums the tokens per expert. DeepEP's manager turns
    the probabilities back into top-k indices (``torch.topk`` over the experts), DeepEP lays out the dispatch and
    notifies the ranks (``get_dispatch_layout``, ``notify_dispatch``: two kernels beside its dispatch kernel), and
    the received indices become a routing map again (``fused_indices_to_multihot``); backward: the multihot's and
    the top-k's (zeros + scatter)."""
    e, k, ep = model.num_experts, model.moe_top_k, plan.ep
    if plan.moe_dispatcher == MoeDispatcher.HYBRIDEP:
        gathered = float(ep * tokens * e)
        return ([Collective("moe.dispatch.routing_map.ag", CollectiveKind.ALL_GATHER, gathered, Group.EP, ep),
                 _eager("moe.dispatch.metadata", gathered)], [_eager("moe.dispatch.tokens_per_expert", 8.0 * e)], [])
    s, rows = float(tokens * e * SCORE_BYTES), float(tokens * k) * expert_load(model)
    return ([_eager("moe.dispatch.topk_indices", s + tokens * k * 12.0), _eager("moe.dispatch.layout", s / 2, 2)],
            [_eager("moe.dispatch.multihot", rows * 13.0)],
            [_eager("moe.dispatch.multihot.bwd", rows * 8.0), _eager("moe.dispatch.topk_indices.bwd", 2 * s, 2)])


def dispatch_bookkeeping(model: ModelSpec, plan: ParallelPlan) -> Tuple[List[Op], List[Op], List[Op]]:
    """(before the permutation, after the dispatch, in the dispatch's backward) of Megatron-Core's all-to-all
    dispatcher beside its token all-to-all (``MoEAlltoAllTokenDispatcher``). Dropless, ``preprocess`` counts the
    tokens per expert (``routing_map.sum(dim=0).long()``) and, with ep or tp > 1, sums them per rank, all-gathers
    them over the EP x TP group (E int64 per rank) and slices and sums what it received (``.contiguous()``, three
    sums): 2 or 7 kernels and the all-gather, before the copies to the host that the dispatch waits for; padded to
    capacity it fills one tensor with the capacity. ``token_dispatch`` sends the permuted probabilities (fp32, one
    per row) by a second all-to-all after the tokens', and its backward returns their gradients. The flex
    dispatcher: :func:`_flex_bookkeeping`; the all-gather dispatcher: nothing here."""
    e, ep, etp = model.num_experts, plan.ep, plan.expert_tp
    tokens = moe_tokens(plan)
    if plan.moe_dispatcher in (MoeDispatcher.DEEPEP, MoeDispatcher.HYBRIDEP):
        return _flex_bookkeeping(model, plan, tokens) if ep > 1 else ([], [], [])
    if plan.moe_dispatcher != MoeDispatcher.ALLTOALL:
        return [], [], []
    if model.capacity_factor is not None:  # drop and pad: torch.full of the capacity (no sync, no gather)
        pre: List[Op] = [_eager("moe.permute.capacity_fill", 8.0 * e * etp)]
    elif ep > 1 or etp > 1:
        pre = [_eager("moe.dispatch.splits", float(tokens * e), 3),
               Collective("moe.dispatch.splits.ag", CollectiveKind.ALL_GATHER, 8.0 * e * ep * etp, Group.EP, ep * etp),
               _eager("moe.dispatch.splits.sum", 8.0 * e * ep * etp, 4)]
    else:
        pre = [_eager("moe.dispatch.splits", float(tokens * e), 2)]
    if ep == 1:
        return pre, [], []
    probs = float(tokens * model.moe_top_k * SCORE_BYTES) * expert_load(model)
    return (pre, [Collective("moe.dispatch.probs", CollectiveKind.ALL_TO_ALL, probs, Group.EP, ep)],
            [Collective("moe.dispatch.probs.bwd", CollectiveKind.ALL_TO_ALL, probs, Group.EP, ep)])
