"""Build the operator graph of one transformer layer, the embedding and the output head.

Shapes follow Megatron-LM's tensor parallelism (Shoeybi et al. 2019, Fig. 3): column-parallel QKV and
FC1, row-parallel projection and FC2; with sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2) the
norms, dropouts and residuals work on s/t tokens. The TP collectives come from the communication plan
(:mod:`vtrain.comm.tp`) and are placed between the GEMMs they sit between. Backward of a GEMM =
activation-grad + weight-grad.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from vtrain.comm.tp import TpComms, TpOperator
from vtrain.graph.ops import (
    FlashAttention,
    Gemm,
    MemoryOp,
    Op,
)
from vtrain.workload.enums import PositionEmbedding, Recompute
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan


@dataclass(frozen=True, slots=True)
class PassOps:
    """The ops of one pass (forward, backward or recompute) of one graph component."""

    ops: Tuple[Op, ...]

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)


@dataclass(frozen=True, slots=True)
class ComponentGraph:
    forward: PassOps
    backward: PassOps
    recompute: PassOps


@dataclass(frozen=True, slots=True)
class ModelGraph:
    """Per-micro-batch graphs for one GPU of a TP group."""

    layer: ComponentGraph
    embedding: ComponentGraph
    head: ComponentGraph  # final norm + logits + cross-entropy
    moe_layer: Optional[ComponentGraph] = None  # a layer whose MLP is a mixture of experts (graph.moe)
    mtp: Optional[ComponentGraph] = None  # an MTP module's embedding, norms and projection (graph.mtp)


def _gemm_fwd_bwd(name: str, m: int, n: int, k: int, dt: int) -> Tuple[Gemm, Tuple[Gemm, Gemm]]:
    fwd = Gemm(name, m=m, n=n, k=k, dtype_bytes=dt)
    dgrad = Gemm(f"{name}.dgrad", m=m, n=k, k=n, dtype_bytes=dt)
    wgrad = Gemm(f"{name}.wgrad", m=k, n=n, k=m, dtype_bytes=dt)
    return fwd, (dgrad, wgrad)


@dataclass(frozen=True, slots=True)
class Block:
    """The ops of one residual block's branch (attention or MLP) between its norm and its residual add:
    forward, backward (in backward order) and what selective recompute runs again."""

    forward: Tuple[Op, ...]
    backward: Tuple[Op, ...]
    selective_recompute: Tuple[Op, ...] = ()
    modules: Tuple[Tuple[str, Tuple[Op, ...]], ...] = ()  # Megatron-Core recompute module -> its forward ops


def attention_block(model: ModelSpec, plan: ParallelPlan, tp: TpComms) -> Block:
    """QKV (column-parallel), RoPE, the attention core (flash, or unfused QK^T / softmax / dropout / AV),
    projection (row-parallel), with the TP collectives of the f/g pair around them."""
    b, s, t, dt = plan.micro_batch_size, plan.seq_len, plan.tp, plan.dtype_bytes
    h = model.hidden_size
    tokens = b * s
    heads = model.num_heads // t
    qkv_out = (model.q_size + 2 * model.kv_size) // t
    has_dropout = model.dropout > 0
    att = tp.attention
    qkv, qkv_b = _gemm_fwd_bwd("qkv", tokens, qkv_out, h, dt)
    proj, proj_b = _gemm_fwd_bwd("proj", tokens, h, model.q_size // t, dt)
    attn_fwd: List[Op]
    attn_bwd: List[Op]
    rope: List[Op] = []
    if model.position_embedding == PositionEmbedding.ROPE:
        rope = [MemoryOp("rope", 2.0 * tokens * (model.q_size + model.kv_size) // t * dt, 2)]
    if model.qk_norm:  # RMSNorm per query and key head (Qwen3)
        rope.insert(0, MemoryOp("qk_norm", 2.0 * tokens * (model.q_size + model.kv_size) // t * dt, 2))
    if plan.flash_attention:
        fa = FlashAttention("flash_attn", b * heads, s, model.head_dim, dtype_bytes=dt)
        fab = FlashAttention("flash_attn.bwd", b * heads, s, model.head_dim, backward=True, dtype_bytes=dt)
        attn_fwd, attn_bwd = [fa], [fab]
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
    selective = () if plan.flash_attention else tuple(op for op in attn_fwd if not isinstance(op, Gemm) or op.attention)
    forward = (*att.enter, qkv, *rope, *attn_fwd, proj, *att.exit)
    backward = (*att.exit_backward, *proj_b, *attn_bwd, *(MemoryOp(f"{op.name}.bwd", op.bytes, 2) for op in rope),
                *qkv_b, *att.enter_backward)
    return Block(forward, backward, selective)


def mlp_block(model: ModelSpec, plan: ParallelPlan, tp: TpComms) -> Block:
    """FC1 (column-parallel; gate and up together with SwiGLU), the activation, FC2 (row-parallel)."""
    b, s, t, dt = plan.micro_batch_size, plan.seq_len, plan.tp, plan.dtype_bytes
    h, f = model.hidden_size, model.ffn_hidden_size
    tokens = b * s
    fc1_out = (2 * f if model.gated_mlp else f) // t
    mlp = tp.mlp
    fc1, fc1_b = _gemm_fwd_bwd("fc1", tokens, fc1_out, h, dt)
    fc2, fc2_b = _gemm_fwd_bwd("fc2", tokens, h, f // t, dt)
    act_name = "swiglu" if model.gated_mlp else "gelu"
    mlp_act_elems = float(tokens * (f // t) * dt)
    act_fwd = MemoryOp(act_name, (3 if model.gated_mlp else 2) * mlp_act_elems)
    act_bwd = MemoryOp(f"{act_name}.bwd", (5 if model.gated_mlp else 3) * mlp_act_elems)
    forward: Tuple[Op, ...] = (*mlp.enter, fc1, act_fwd, fc2, *mlp.exit)
    return Block(forward, (*mlp.exit_backward, *fc2_b, act_bwd, *fc1_b, *mlp.enter_backward), (),
                 (("mlp", forward), ("moe_act", (act_fwd,))))


def build_layer(model: ModelSpec, plan: ParallelPlan, tp: TpComms, mlp: Optional[Block] = None) -> ComponentGraph:
    """One transformer layer: norm, attention block, residual, norm, MLP block (``mlp``: another MLP
    branch, e.g. a mixture of experts), residual; backward in reverse; recompute per ``plan.recompute``."""
    t, dt = plan.tp, plan.dtype_bytes
    tokens = plan.micro_batch_size * plan.seq_len
    local_tokens = tokens // t if plan.sequence_parallel else tokens  # tokens in norms/residuals
    act = float(local_tokens * model.hidden_size * dt)  # one [local_tokens, h] activation
    has_dropout = model.dropout > 0

    def norm(name: str) -> MemoryOp:
        return MemoryOp(name, 2 * act, 1)

    def residual(name: str) -> MemoryOp:
        # bias + dropout + residual add: read x, residual (and mask), write out
        return MemoryOp(name, (4 if has_dropout else 3) * act, 1)

    if model.is_mla:
        from vtrain.graph.mla import mla_block

        att = mla_block(model, plan, tp)
    else:
        att = attention_block(model, plan, tp)
    ffn = mlp if mlp is not None else mlp_block(model, plan, tp)
    forward: List[Op] = [norm("norm1"), *att.forward, residual("residual1"), norm("norm2"), *ffn.forward,
                         residual("residual2")]
    backward: List[Op] = [MemoryOp("residual2.bwd", 2 * act), *ffn.backward, MemoryOp("norm2.bwd", 3 * act),
                          MemoryOp("residual1.bwd", 2 * act), *att.backward, MemoryOp("norm1.bwd", 3 * act)]
    if plan.recompute == Recompute.FULL:
        recompute: Tuple[Op, ...] = tuple(forward)
    elif plan.recompute == Recompute.SELECTIVE:
        recompute = att.selective_recompute + ffn.selective_recompute
        if plan.recompute_modules != "core_attn":  # Megatron-Core's fine-grained --recompute-modules
            from vtrain.graph.recompute import selective_ops

            recompute = selective_ops(plan.recompute_modules, att, ffn, (forward[0], forward[len(att.forward) + 2]))
    else:
        recompute = ()
    return ComponentGraph(PassOps(tuple(forward)), PassOps(tuple(backward)), PassOps(recompute))


def build_embedding(model: ModelSpec, plan: ParallelPlan, tp: TpComms) -> ComponentGraph:
    """Vocab-parallel word embedding (+ learned positions): gather rows, sum over TP ranks."""
    b, s, t, dt = plan.micro_batch_size, plan.seq_len, plan.tp, plan.dtype_bytes
    h = model.hidden_size
    tokens = b * s
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


def build_head(model: ModelSpec, plan: ParallelPlan, tp: TpComms) -> ComponentGraph:
    """Final norm, vocab-parallel logits GEMM and fp32 cross-entropy (Megatron's vocab-parallel CE)."""
    b, s, t, dt = plan.micro_batch_size, plan.seq_len, plan.tp, plan.dtype_bytes
    h, v = model.hidden_size, model.vocab_shard(t)  # padded vocab shard
    tokens = b * s
    local = tokens // t if plan.sequence_parallel else tokens
    act = float(local * h * dt)
    logits, logits_b = _gemm_fwd_bwd("logits", tokens, v, h, dt)
    logit_bytes = float(tokens * v)
    fwd: List[Op] = [MemoryOp("final_norm", 2 * act), *tp.logits.enter, logits,
                     MemoryOp("cross_entropy", logit_bytes * (dt + 4 * 3), 4), *tp.cross_entropy]
    bwd: List[Op] = [MemoryOp("cross_entropy.bwd", logit_bytes * (4 * 2 + dt), 2), *logits_b,
                     *tp.logits.enter_backward, MemoryOp("final_norm.bwd", 3 * act)]
    return ComponentGraph(PassOps(tuple(fwd)), PassOps(tuple(bwd)), PassOps(()))


def build_model_graph(model: ModelSpec, plan: ParallelPlan, tp: TpComms, ep: Optional[TpOperator] = None
                      ) -> ModelGraph:
    """The graphs with the TP (and EP: ``ep``, :mod:`vtrain.comm.ep`) collectives of the communication plan
    in place; an MoE model adds its MoE layer (:mod:`vtrain.graph.moe`) and MTP module graphs."""
    dense = build_layer(model, plan, tp)
    moe_layer = mtp = None
    if model.is_moe:
        from vtrain.graph.moe import moe_block

        moe_layer = build_layer(model, plan, tp, mlp=moe_block(model, plan, tp, ep or TpOperator()))
    if model.mtp_layers:
        from vtrain.graph.mtp import build_mtp

        mtp = build_mtp(model, plan)
    return ModelGraph(dense, build_embedding(model, plan, tp), build_head(model, plan, tp), moe_layer, mtp)


