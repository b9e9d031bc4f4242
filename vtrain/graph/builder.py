"""Build the operator graph of one transformer layer, the embedding and the output head.

Shapes follow Megatron-LM's tensor parallelism (Shoeybi et al. 2019, Fig. 3): column-parallel QKV and
FC1, row-parallel projection and FC2; with sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2) the
norms, dropouts and residuals work on s/t tokens. The TP collectives come from the communication plan
(:mod:`vtrain.comm.tp`) and are placed between the GEMMs they sit between. Backward of a GEMM =
activation-grad + weight-grad.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import List, Optional, Sequence, Tuple

from vtrain.graph.blocks import (
    Block,
    ComponentGraph,
    ModelGraph,
    PassOps,
    call_keys,
    gemm_fwd_bwd,
    linear,
    projections,
    ring_merges,
    ring_steps,
)
from vtrain.graph.collectives import CpComms, TpComms, TpOperator, kv_features
from vtrain.graph.cp_ring import RING_PREFIX
from vtrain.graph.eager_paths import yarn_ops
from vtrain.graph.mla import mla_block
from vtrain.graph.moe import moe_block
from vtrain.graph.mtp import build_mtp
from vtrain.graph.ops import Collective, CollectiveKind, FlashAttention, Gemm, Group, MemoryOp, Op
from vtrain.graph.options import GraphOptions
from vtrain.graph.recompute import selective_ops
from vtrain.graph.window import split_windowed
from vtrain.workload.enums import PositionEmbedding, Precision, Recompute
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan


def attention_block(model: ModelSpec, plan: ParallelPlan, tp: TpComms, cp: CpComms,
                    opts: GraphOptions = GraphOptions()) -> Block:
    """QKV (column-parallel), RoPE, the attention core (flash, or unfused QK^T / softmax / dropout / AV),
    projection (row-parallel), with the TP collectives of the f/g pair around them. With context
    parallelism the s/cp local queries attend to all s keys, their KV exchange beside the core (``cp``).
    Selective recompute runs the unfused core again; the fused kernel (and its KV exchange) only when
    ``opts.rerun_fused_attention`` (``StackSpec.recompute_fused_attention``); ``opts.separate_projections``:
    q, k and v as three GEMMs (:func:`projections`)."""
    b, s, t, dt = plan.micro_batch_size, plan.seq_len, plan.tp, plan.dtype_bytes
    h = model.hidden_size
    tokens = plan.tokens_per_rank  # b * s / cp
    heads = model.num_heads // t
    has_dropout = model.dropout > 0
    att = tp.attention
    qkv, qkv_b = projections(("qkv", "wq", "wk", "wv"), tokens,
                             (model.q_size // t, model.kv_size // t, model.kv_size // t), h, plan,
                             opts.separate_projections)
    proj, proj_b = linear("proj", tokens, h, model.q_size // t, plan)
    attn_prec = plan.precision.value if plan.fp8_attention else ""
    attn_fwd: List[Op]
    attn_bwd: List[Op]
    rope: List[Op] = []
    if model.position_embedding == PositionEmbedding.ROPE:
        rope = [MemoryOp("rope", 2.0 * tokens * (model.q_size + model.kv_size) // t * dt, 2)]
    if model.qk_norm:  # RMSNorm per query and key head (Qwen3)
        rope.insert(0, MemoryOp("qk_norm", 2.0 * tokens * (model.q_size + model.kv_size) // t * dt, 2))
    rope_b: List[Op] = [MemoryOp(f"{op.name}.bwd", op.bytes, 2) for op in rope]
    yarn, yarn_b = yarn_ops(model, tokens * (model.q_size + model.kv_size) / t, dt)  # eager (graph.eager_paths)
    rope += yarn
    rope_b = [*yarn_b, *rope_b]
    if plan.flash_attention:
        q_len = s // plan.cp
        calls = ring_steps(plan, opts)
        keys = call_keys(plan, calls)
        fa = FlashAttention("flash_attn", b * heads, q_len, model.head_dim, dtype_bytes=dt, precision=attn_prec,
                            kv_len=s, calls=calls, call_keys=keys)
        fab = FlashAttention("flash_attn.bwd", b * heads, q_len, model.head_dim, backward=True, dtype_bytes=dt,
                             precision=attn_prec, kv_len=s, calls=calls, call_keys=keys)
        q_elems = float(tokens * heads * model.head_dim)
        merge, merge_b = ring_merges(plan, opts, q_elems, q_elems, tokens * kv_features(model, opts.expands_kv) / t)
        attn_fwd = [*cp.forward, *split_windowed(model, fa), *merge, *cp.forward_after]
        attn_bwd = [*cp.backward, *split_windowed(model, fab), *merge_b, *cp.backward_after]
    else:
        d = model.head_dim
        scores = float(b * heads * s * s * dt)
        score = Gemm("attn.qk", m=s, n=s, k=d, batch=b * heads, dtype_bytes=dt, attention=True)
        ctx = Gemm("attn.av", m=s, n=d, k=s, batch=b * heads, dtype_bytes=dt, attention=True)
        softmax = MemoryOp("attn.softmax", 2 * scores)  # fused scale-mask-softmax: read + write
        attn_fwd = [score, softmax]
        if has_dropout:
            attn_fwd.append(MemoryOp("attn.dropout", 3 * scores))  # read, write, mask
        attn_fwd.append(ctx)
        attn_bwd = [
            Gemm("attn.av.dgrad_p", m=s, n=s, k=d, batch=b * heads, dtype_bytes=dt, attention=True),
            Gemm("attn.av.dgrad_v", m=s, n=d, k=s, batch=b * heads, dtype_bytes=dt, attention=True),
        ]
        if has_dropout:
            attn_bwd.append(MemoryOp("attn.dropout.bwd", 3 * scores))
        attn_bwd += [
            MemoryOp("attn.softmax.bwd", 3 * scores),
            Gemm("attn.qk.dgrad_q", m=s, n=d, k=s, batch=b * heads, dtype_bytes=dt, attention=True),
            Gemm("attn.qk.dgrad_k", m=s, n=d, k=s, batch=b * heads, dtype_bytes=dt, attention=True),
        ]
    if plan.flash_attention:
        selective: Tuple[Op, ...] = tuple(attn_fwd) if opts.rerun_fused_attention else ()
    else:
        selective = tuple(op for op in attn_fwd if not isinstance(op, Gemm) or op.attention)
    forward = (*att.enter, *qkv, *rope, *attn_fwd, *proj, *att.exit)
    backward = (*att.exit_backward, *proj_b, *attn_bwd, *rope_b, *qkv_b, *att.enter_backward)
    return Block(forward, backward, selective)


def mlp_block(model: ModelSpec, plan: ParallelPlan, tp: TpComms, opts: GraphOptions = GraphOptions()) -> Block:
    """FC1 (column-parallel; gate and up together with SwiGLU, or as two GEMMs with
    ``opts.separate_projections``), the activation, FC2 (row-parallel)."""
    t, dt = plan.tp, plan.dtype_bytes
    h, f = model.hidden_size, model.ffn_hidden_size
    tokens = plan.tokens_per_rank  # b * s / cp
    mlp = tp.mlp
    widths = (f // t, f // t) if model.gated_mlp else (f // t,)
    fc1, fc1_b = projections(("fc1", "w1", "w3"), tokens, widths, h, plan, opts.separate_projections)
    fc2, fc2_b = linear("fc2", tokens, h, f // t, plan)
    act_name = "swiglu" if model.gated_mlp else "gelu"
    mlp_act_elems = float(tokens * (f // t) * dt)
    act_fwd = MemoryOp(act_name, (3 if model.gated_mlp else 2) * mlp_act_elems)
    act_bwd = MemoryOp(f"{act_name}.bwd", (5 if model.gated_mlp else 3) * mlp_act_elems)
    forward: Tuple[Op, ...] = (*mlp.enter, *fc1, act_fwd, *fc2, *mlp.exit)
    return Block(forward, (*mlp.exit_backward, *fc2_b, act_bwd, *fc1_b, *mlp.enter_backward), (),
                 (("mlp", forward), ("moe_act", (act_fwd,))))


def build_layer(model: ModelSpec, plan: ParallelPlan, tp: TpComms, cp: CpComms,
                mlp: Optional[Block] = None, opts: GraphOptions = GraphOptions()) -> ComponentGraph:
    """One transformer layer: norm, attention block, residual, norm, MLP block (``mlp``: another MLP
    branch, e.g. a mixture of experts), residual; backward in reverse; recompute per ``plan.recompute``
    (``opts``: see :func:`attention_block`)."""
    t, dt = plan.tp, plan.dtype_bytes
    tokens = plan.tokens_per_rank
    local_tokens = tokens // t if plan.sequence_parallel else tokens  # tokens in norms/residuals
    act = float(local_tokens * model.hidden_size * dt)  # one [local_tokens, h] activation
    has_dropout = model.dropout > 0

    def norm(name: str) -> MemoryOp:
        return MemoryOp(name, 2 * act, 1)

    def residual(name: str) -> MemoryOp:
        # bias + dropout + residual add: read x, residual (and mask), write out
        return MemoryOp(name, (4 if has_dropout else 3) * act, 1)

    if model.is_mla:
        att = mla_block(model, plan, tp, cp, opts)
    else:
        att = attention_block(model, plan, tp, cp, opts)
    ffn = mlp if mlp is not None else mlp_block(model, plan, tp, opts)
    forward: List[Op] = [norm("norm1"), *att.forward, residual("residual1"), norm("norm2"), *ffn.forward,
                         residual("residual2")]
    backward: List[Op] = [MemoryOp("residual2.bwd", 2 * act), *ffn.backward, MemoryOp("norm2.bwd", 3 * act),
                          MemoryOp("residual1.bwd", 2 * act), *att.backward, MemoryOp("norm1.bwd", 3 * act)]
    if plan.recompute == Recompute.FULL:
        recompute: Tuple[Op, ...] = tuple(forward)
    elif plan.recompute == Recompute.SELECTIVE:
        recompute = att.selective_recompute + ffn.selective_recompute
        if plan.recompute_modules != "core_attn":  # Megatron-Core's fine-grained --recompute-modules
            recompute = selective_ops(plan.recompute_modules, att, ffn, (forward[0], forward[len(att.forward) + 2]))
    elif plan.recompute == Recompute.SELECTIVE_OP:
        recompute = _selective_op_recompute(forward, model, plan, opts.separate_projections)
    else:
        recompute = ()
    return ComponentGraph(PassOps(tuple(forward)), PassOps(tuple(backward)), PassOps(recompute))


def _selective_op_recompute(forward: Sequence[Op], model: ModelSpec, plan: ParallelPlan,
                            separate: bool = False) -> Tuple[Op, ...]:
    """What torchtitan's per-op selective checkpointing runs again before a layer's backward: its policy saves
    the outputs of matmuls (but every second), attention and TP reduce-scatters (``_save_list``), so the
    recompute replays the rest of the forward in order: the memory-bound ops, every second matmul and the
    sequence-parallel all-gathers, which the list leaves out (their outputs feed the saved matmuls' weight
    gradients). Each recomputed matmul follows the forward GEMM it is part of; one the layer lacks (an MoE
    layer's expert MLP) goes last. With ``separate`` projections the layer's own matmuls are the ones counted
    (wq, wk, wv, wo, w1, w3, w2: it runs wk, wo and w3 again). A precision whose GEMM is not ``aten.mm``
    (NVFP4: :attr:`Precision.gemm_is_aten_mm`) has no matmul output saved: every matmul runs again."""
    forward = [op for op in forward if not op.name.startswith(RING_PREFIX)]  # inside the saved attention op
    every = not plan.precision.gemm_is_aten_mm
    if separate or every:
        mms = [op for op in forward if isinstance(op, Gemm) and not op.attention]
        again_ids = set(map(id, mms if every else mms[1::2]))
        return tuple(op for op in forward if isinstance(op, MemoryOp) or id(op) in again_ids
                     or (isinstance(op, Collective) and op.group == Group.TP and op.kind == CollectiveKind.ALL_GATHER))
    again = list(_every_second_matmul(model, plan))
    anchors = dict(zip(("qkv", "proj", "fc1") if model.gated_mlp else ("proj", "fc2"), again))
    out: List[Op] = []
    for op in forward:
        if isinstance(op, MemoryOp) or (isinstance(op, Collective) and op.group == Group.TP
                                        and op.kind == CollectiveKind.ALL_GATHER):
            out.append(op)
        elif isinstance(op, Gemm) and op.name in anchors:
            out.append(anchors.pop(op.name))
    return (*out, *anchors.values())


def _every_second_matmul(model: ModelSpec, plan: ParallelPlan) -> Tuple[Op, ...]:
    """torchtitan's per-op selective checkpointing saves every compute op's output but every second
    matmul's (torchtitan/models/llama3/infra/parallelize.py, _apply_ac_to_transformer_block): with its
    layer's matmuls wq, wk, wv, wo, w1, w3, w2 (Llama) it recomputes wk, wo and w3; with GPT's qkv,
    proj, fc1, fc2 it recomputes proj and fc2."""
    t, h, f = plan.tp, model.hidden_size, model.ffn_hidden_size
    tokens = plan.tokens_per_rank
    parts = [("wk", model.kv_size // t, h), ("wo", h, h // t), ("w3", f // t, h)] if model.gated_mlp else \
        [("proj", h, h // t), ("fc2", h, f // t)]
    prec = plan.precision
    dt = prec.gemm_operand_bytes if prec.low else plan.dtype_bytes
    return tuple(Gemm(f"{name}.recompute", m=tokens, n=n, k=k, dtype_bytes=dt, precision=prec.value if prec.low else "")
                 for name, n, k in parts)


def build_embedding(model: ModelSpec, plan: ParallelPlan, tp: TpComms) -> ComponentGraph:
    """Vocab-parallel word embedding (+ learned positions): gather rows, sum over TP ranks."""
    t, dt = plan.tp, plan.dtype_bytes
    h = model.hidden_size
    tokens = plan.tokens_per_rank  # b * s / cp
    act = float(tokens * h * dt)
    fwd: List[Op] = [MemoryOp("embedding.lookup", 2 * act, 2)]
    if model.position_embedding == PositionEmbedding.LEARNED:
        fwd.append(MemoryOp("embedding.position", 3 * act))
    if model.dropout > 0:
        fwd.append(MemoryOp("embedding.dropout", 3 * act / (t if plan.sequence_parallel else 1)))
    fwd += tp.embedding.exit
    table = float(model.vocab_shard(t) * h * dt)
    bwd: List[Op] = [*tp.embedding.exit_backward, MemoryOp("embedding.grad", 2 * act + table, 2)]
    return ComponentGraph(PassOps(tuple(fwd)), PassOps(tuple(bwd)), PassOps(()))


def build_head(model: ModelSpec, plan: ParallelPlan, tp: TpComms,
               opts: GraphOptions = GraphOptions()) -> ComponentGraph:
    """Final norm, vocab-parallel logits GEMM and the cross-entropy: fp32 (Megatron's vocab-parallel CE), one
    fused kernel (``opts.fused_loss``: reads the logits; its backward reads them and writes the gradient), or,
    with tp > 1, DTensor's eager loss_parallel kernels (``opts.loss_parallel``)."""
    t, dt = plan.tp, plan.dtype_bytes
    h, v = model.hidden_size, model.vocab_shard(t)  # padded vocab shard
    tokens = plan.tokens_per_rank  # b * s / cp
    local = tokens // t if plan.sequence_parallel else tokens
    act = float(local * h * dt)
    logits, logits_b = gemm_fwd_bwd("logits", tokens, v, h, dt)
    logit_bytes = float(tokens * v)
    if opts.fused_loss:
        loss = MemoryOp("cross_entropy", logit_bytes * dt, 1, eager=True)
        loss_b = MemoryOp("cross_entropy.bwd", logit_bytes * 2 * dt, 1, eager=True)
    elif opts.loss_parallel and t > 1:
        # torch.distributed.tensor.parallel.loss: upcast (dt + 4), amax (4), x - max (8), exp (8), sum (4),
        # shifted - lse (8) | backward: zeros (4), exp(x) (8), + (12), * grad (8), downcast (4 + dt); the ~15
        # per-token kernels each way (target masks, gather, index_put) are left out: a few us each
        loss = MemoryOp("cross_entropy", logit_bytes * (dt + 36), 6, eager=True)
        loss_b = MemoryOp("cross_entropy.bwd", logit_bytes * (36 + dt), 5, eager=True)
    else:
        loss = MemoryOp("cross_entropy", logit_bytes * (dt + 4 * 3), 4)
        loss_b = MemoryOp("cross_entropy.bwd", logit_bytes * (4 * 2 + dt), 2)
    fwd: List[Op] = [MemoryOp("final_norm", 2 * act), *tp.logits.enter, logits, loss, *tp.cross_entropy,
                     *train_metrics(logit_bytes, dt, opts.train_metric_passes)]
    bwd: List[Op] = [loss_b, *logits_b, *tp.logits.enter_backward, MemoryOp("final_norm.bwd", 3 * act)]
    return ComponentGraph(PassOps(tuple(fwd)), PassOps(tuple(bwd)), PassOps(()))


def train_metrics(logits: float, dt: float, passes: int) -> Tuple[Op, ...]:
    """The trainer's cross-entropy metrics over a micro-batch's ``logits`` (``passes`` of them; Composer's
    LanguageCrossEntropy and LanguagePerplexity each run torch's cross-entropy, no grad, under autocast).
    Autocast's log_softmax asks for fp32: ATen casts the bf16 logits first (its fused half-to-float path takes
    fp16 alone: read dt, write 4 B), then the fp32 log-softmax reads the row for its max, for its sum of
    exponentials and for its output, and writes it (3 x 4 + 4 B: a 50K-entry fp32 row is 200 KB and the
    rows in flight, 512 threads each, exceed the L2, so each pass reads HBM), then nll_loss gathers one
    entry per token: dt + 20 B per logit and three kernels a pass."""
    return tuple(MemoryOp(f"train_metric{i}", logits * (dt + 20.0), 3, eager=True) for i in range(passes))


def build_model_graph(model: ModelSpec, plan: ParallelPlan, tp: TpComms, cp: Optional[CpComms] = None,
                      ep: Optional[TpOperator] = None, opts: GraphOptions = GraphOptions()) -> ModelGraph:
    """The graphs with the TP, CP and EP collectives of the communication plan in place (``comm.tp``,
    ``comm.cp``, ``comm.ep``; by default none: a plan with cp > 1 must pass its CP exchanges); an MoE
    model adds its MoE layer (:mod:`vtrain.graph.moe`) and MTP module graphs. ``opts``: the stack's switches
    (:func:`attention_block`); its fusion and layout copies are graph rewrites that
    :func:`vtrain.sim.structure.model_graph` applies."""
    if cp is None:
        if plan.cp > 1:
            raise ValueError(f"cp={plan.cp}: pass the plan's CP exchanges (vtrain.comm.cp.cp_comms)")
        cp = CpComms((), (), ())
    dense = build_layer(model, plan, tp, cp, opts=opts)
    moe_layer = mtp = None
    if model.is_moe:
        moe = moe_block(model, plan, tp, ep or TpOperator(), opts)
        moe_layer = build_layer(model, plan, tp, cp, mlp=moe, opts=opts)
    if model.mtp_layers:
        mtp = build_mtp(model, plan)
    n_tail = tail_layers(model, plan, opts)
    tail = build_layer(model, replace(plan, precision=Precision.BF16), tp, cp, opts=opts) if n_tail else None
    return ModelGraph(dense, build_embedding(model, plan, tp), build_head(model, plan, tp, opts), moe_layer, mtp,
                      tail, n_tail)


def tail_layers(model: ModelSpec, plan: ParallelPlan, opts: GraphOptions) -> int:
    """The model's last decoder layers that a low-precision recipe leaves in bf16: torchtitan's NVFP4 recipe
    converts the leading layers and keeps the last ceil(num_layers x ``opts.nvfp4_bf16_tail_fraction``) in bf16
    with the output layer (llama3_8b_nvfp4_mixed, nvfp4_bf16_tail_fqns(n_layers, 0.15): Llama 3 8B layers 27-31,
    Qwen3 8B 30-35; the recipe of "Pretraining Large Language Models with NVFP4", arXiv 2509.25149). Dense
    models only (an MoE layer's experts have converters of their own)."""
    if plan.precision != Precision.NVFP4 or opts.nvfp4_bf16_tail_fraction <= 0 or model.is_moe:
        return 0
    return min(model.num_layers, math.ceil(model.num_layers * opts.nvfp4_bf16_tail_fraction - 1e-9))


