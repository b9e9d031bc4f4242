"""Multi-head latent attention (DeepSeek-V2 report, Sec. 2.1; Megatron-Core's MLASelfAttention).

Per GPU and micro-batch with tensor parallelism t: the down-projections to the compressed query
(q_lora_rank) and key/value (kv_lora_rank + the shared RoPE key) are replicated on every TP rank
(Megatron-Core's ``duplicated`` linears), their RMSNorms, the column-parallel up-projections to n/t heads of
qk_head_dim + qk_rope_head_dim (queries) and qk_head_dim + v_head_dim (keys and values), RoPE on the rope
dims, fused attention with query/key dims qk + rope and value dims v (priced at their mean head dim), and
the row-parallel output projection; the TP collectives of the f/g pair around them. Flash attention is
assumed (an unfused MLA core is not modelled). With context parallelism the s/cp local queries attend to
all s keys, the up-projected K/V exchange beside the core (``comm.cp``), as in the MHA/GQA block.
"""
from __future__ import annotations

from typing import List, Tuple

from vtrain.graph.blocks import Block, call_keys, linear, ring_merges, ring_steps
from vtrain.graph.collectives import CpComms, TpComms, kv_features
from vtrain.graph.ops import FlashAttention, MemoryOp, Op
from vtrain.graph.options import GraphOptions
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan


def mla_block(model: ModelSpec, plan: ParallelPlan, tp: TpComms, cp: CpComms,
              opts: GraphOptions = GraphOptions()) -> Block:
    """``opts.rerun_fused_attention``: selective recompute runs the fused core (and its KV exchange) again
    (:func:`vtrain.graph.builder.attention_block`)."""
    b, s, t, dt = plan.micro_batch_size, plan.seq_len, plan.tp, plan.dtype_bytes
    h, n = model.hidden_size, model.num_heads // t
    tokens = plan.tokens_per_rank  # b * s / cp
    qk, rope, vd = model.mla_qk_dim, model.qk_rope_head_dim, model.v_head_dim
    att = tp.attention
    fwd: List[Op] = [*att.enter]
    bwd: List[Op] = []
    up: List[Op] = []
    if model.q_lora_rank:
        q_down, q_down_b = linear("mla.q_down", tokens, model.q_lora_rank, h, plan)
        q_up, q_up_b = linear("mla.q_up", tokens, n * qk, model.q_lora_rank, plan)
        q_norm = MemoryOp("mla.q_norm", 2.0 * tokens * model.q_lora_rank * dt)
        fwd += [*q_down, q_norm, *q_up]
        up += q_up
        bwd_q: List[Op] = [*q_up_b, MemoryOp("mla.q_norm.bwd", 3.0 * tokens * model.q_lora_rank * dt), *q_down_b]
    else:
        q_proj, q_proj_b = linear("mla.q", tokens, n * qk, h, plan)
        fwd += q_proj
        bwd_q = list(q_proj_b)
    kv_down, kv_down_b = linear("mla.kv_down", tokens, model.kv_lora_rank + rope, h, plan)
    kv_up, kv_up_b = linear("mla.kv_up", tokens, n * (model.qk_head_dim + vd), model.kv_lora_rank, plan)
    kv_norm = MemoryOp("mla.kv_norm", 2.0 * tokens * model.kv_lora_rank * dt)
    rope_op = MemoryOp("mla.rope", 2.0 * tokens * (n + 1) * rope * dt, 2)
    q_len = s // plan.cp
    calls = ring_steps(plan, opts)
    keys = call_keys(plan, calls)
    core = FlashAttention("flash_attn", b * n, q_len, (qk + vd) // 2, dtype_bytes=dt, kv_len=s, calls=calls,
                          call_keys=keys)
    core_b = FlashAttention("flash_attn.bwd", b * n, q_len, (qk + vd) // 2, backward=True, dtype_bytes=dt,
                            kv_len=s, calls=calls, call_keys=keys)
    merge, merge_b = ring_merges(plan, opts, float(tokens * n * qk), float(tokens * n * vd),
                                 tokens * kv_features(model) / t)
    proj, proj_b = linear("proj", tokens, h, n * vd, plan)
    fwd += [*kv_down, kv_norm, *kv_up, rope_op, *cp.forward, core, *merge, *cp.forward_after, *proj, *att.exit]
    up += [*kv_up, rope_op]
    bwd = [*att.exit_backward, *proj_b, *cp.backward, core_b, *merge_b, *cp.backward_after,
           MemoryOp("mla.rope.bwd", rope_op.bytes, 2), *kv_up_b,
           MemoryOp("mla.kv_norm.bwd", 3.0 * tokens * model.kv_lora_rank * dt), *kv_down_b, *bwd_q,
           *att.enter_backward]
    selective: Tuple[Op, ...] = (*cp.forward, core, *merge, *cp.forward_after) if opts.rerun_fused_attention else ()
    return Block(tuple(fwd), tuple(bwd), selective, (("mla_up_proj", tuple(up)),))
