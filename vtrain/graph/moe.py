"""The MoE branch of a transformer layer (the MLP block of :func:`vtrain.graph.builder.build_layer`).

Per GPU and micro-batch (Megatron-Core's MoELayer with grouped GEMM; Gale et al. 2023, "MegaBlocks"):
router GEMM (h x E) and its score/top-k kernels, permutation of the tokens·k rows into expert order,
dispatch (all-to-all over EP, all-gather over ETP: :mod:`vtrain.comm.ep`), one grouped GEMM per expert
matrix over the E/ep local experts (a batched GEMM of E/ep groups, each of the busiest rank's rows per
expert), the activation, the combine (reduce-scatter over ETP, all-to-all over EP), unpermutation with
the routing weights; shared experts as a tensor-parallel MLP on every token. DeepEP fuses the permutation
into its dispatch/combine kernels. Backward in reverse, each GEMM as activation-grad + weight-grad.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Tuple

from vtrain.comm.ep import expert_load, moe_tokens
from vtrain.comm.tp import TpComms, TpOperator
from vtrain.graph.builder import Block, gemm_fwd_bwd, linear
from vtrain.graph.ops import Gemm, MemoryOp, Op
from vtrain.workload.enums import MoeDispatcher
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan

ROW_ALIGN = 8  # rows per expert are rounded up to this (see expert_rows)


@dataclass(frozen=True, slots=True)
class GroupedGemm(Gemm):
    """The GEMMs of ``batch`` local experts, priced as one batched GEMM on the GPU but launched one per expert:
    Transformer Engine's GroupedLinear issues a cuBLAS GEMM per expert (over a few streams;
    transformer_engine/pytorch/module/grouped_linear.py, ``general_grouped_gemm``), so its host cost grows
    with the local experts."""

    @property
    def kernels(self) -> int:
        return self.batch


def mlp_ops(prefix: str, model: ModelSpec, tokens: int, ffn: int, plan: ParallelPlan, batch: int = 1
            ) -> Tuple[List[Op], List[Op], MemoryOp]:
    """(forward, backward, activation) of an MLP of width ``ffn`` (already sharded) on ``tokens`` rows, its
    GEMMs in the plan's precision with their quantization kernels (:func:`vtrain.graph.builder.linear`:
    Megatron-Core's TE GroupedLinear and torchao's scaled grouped GEMMs run the experts in FP8 / MXFP8)."""
    h, dt = model.hidden_size, plan.dtype_bytes
    cls = GroupedGemm if batch > 1 else Gemm
    fc1, fc1_b = linear(f"{prefix}.fc1", tokens, (2 if model.gated_mlp else 1) * ffn, h, plan, batch, cls)
    fc2, fc2_b = linear(f"{prefix}.fc2", tokens, h, ffn, plan, batch, cls)
    elems = float(batch * tokens * ffn * dt)
    name = f"{prefix}.{'swiglu' if model.gated_mlp else 'gelu'}"
    act = MemoryOp(name, (3 if model.gated_mlp else 2) * elems)
    act_b = MemoryOp(f"{name}.bwd", (5 if model.gated_mlp else 3) * elems)
    return [*fc1, act, *fc2], [*fc2_b, act_b, *fc1_b], act


def expert_rows(model: ModelSpec, plan: ParallelPlan) -> int:
    """Rows per local expert on the busiest rank: tokens·k of the EP group spread over E experts, gathered
    over ETP, times the load factor (:func:`vtrain.comm.ep.expert_load`)."""
    rows = moe_tokens(plan) * model.moe_top_k * plan.expert_tp * expert_load(model)
    per_expert = max(1, math.ceil(rows / (model.num_experts // plan.ep)))
    # rounded up to 8 rows: the token count is the strided dimension of the row-major operands, so an odd
    # count costs no vector loads (the GEMM curve's alignment penalty is for the contiguous dimensions),
    # and a load factor of 1.1 must not price as a misaligned GEMM
    return -(-per_expert // ROW_ALIGN) * ROW_ALIGN


def moe_block(model: ModelSpec, plan: ParallelPlan, tp: TpComms, ep: TpOperator) -> Block:
    dt, h, k, e = plan.dtype_bytes, model.hidden_size, model.moe_top_k, model.num_experts
    tokens = moe_tokens(plan)
    router, router_b = gemm_fwd_bwd("moe.router", tokens, e, h, dt)
    scores = float(tokens * e * 4)  # fp32 router logits (Megatron-Core moe_router_dtype=fp32)
    topk = MemoryOp("moe.router.topk", 3 * scores, 2)  # score function + top-k (+ load-balancing loss)
    topk_b = MemoryOp("moe.router.topk.bwd", 3 * scores, 2)
    rows = float(tokens * k * h * dt)
    fused = plan.moe_dispatcher == MoeDispatcher.DEEPEP  # permutation inside DeepEP's kernels
    permute = [] if fused else [MemoryOp("moe.permute", 2 * rows, 2)]
    unpermute = [] if fused else [MemoryOp("moe.unpermute", rows + tokens * h * dt, 2)]
    permute_b = [] if fused else [MemoryOp("moe.permute.bwd", 2 * rows, 2)]
    unpermute_b = [] if fused else [MemoryOp("moe.unpermute.bwd", 2 * rows + tokens * h * dt, 2)]
    local = e // plan.ep
    exp_f, exp_b, act = mlp_ops("moe.expert", model, expert_rows(model, plan), model.expert_ffn // plan.expert_tp,
                                plan, batch=local)
    forward: List[Op] = [router, topk, *permute, *ep.enter, *exp_f, *ep.exit, *unpermute]
    backward: List[Op] = [*unpermute_b, *ep.exit_backward, *exp_b, *ep.enter_backward, *permute_b, topk_b,
                          *router_b]
    shared: List[Op] = []
    if model.shared_ffn:  # a tensor-parallel MLP on the whole (gathered) sequence
        seq = tokens * plan.tp if plan.sequence_parallel else tokens
        sh_f, sh_b, _ = mlp_ops("moe.shared", model, seq, model.shared_ffn // plan.tp, plan)
        shared = [*tp.mlp.enter, *sh_f, *tp.mlp.exit]
        forward += shared
        backward = [*tp.mlp.exit_backward, *sh_b, *tp.mlp.enter_backward, *backward]
    modules = (("moe", tuple(forward)), ("moe_act", (act,)), ("shared_experts", tuple(shared)))
    return Block(tuple(forward), tuple(backward), (), modules)
