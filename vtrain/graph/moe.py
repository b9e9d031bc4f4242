"""The MoE branch of a transformer layer (the MLP block of :func:`vtrain.graph.builder.build_layer`).

Per GPU and micro-batch (Megatron-Core's MoELayer with grouped GEMM; Gale et al. 2023, "MegaBlocks"):
router GEMM (h x E) and its score/top-k kernels, permutation of the tokens·k rows into expert order,
dispatch (all-to-all over EP, all-gather over ETP: :mod:`vtrain.comm.ep`), one grouped GEMM per expert
matrix over the E/ep local experts (a batched GEMM of E/ep groups, each of the busiest rank's rows per
expert), the activation, the combine (reduce-scatter over ETP, all-to-all over EP), unpermutation with
the routing weights; shared experts as a tensor-parallel MLP on every token. Backward in reverse, each GEMM
as activation-grad + weight-grad. The permutations as Megatron-Core runs them with ``--moe-permute-fusion``
(one fused kernel each, moe_utils.permute / unpermute / sort_chunks_by_idxs): the all-to-all dispatcher
permutes the k copies before sending and, with several local experts behind ep > 1, sorts the received
chunks by expert (and back after the experts); the flex dispatcher's backends send each token once per
destination rank and permute the received tokens into expert order after it, unpermuting (summing the k copies)
before the combine: DeepEP in _DeepepManager.get_permuted_hidden_states_by_experts, HybridEP inside its
dispatch_with_permute / combine_with_unpermute calls, as kernels of their own in its executor (DeepEP's hybrid-ep
csrc/hybrid_ep/executor/executor.cu: dispatch_postprocess runs permute_launcher on the received buffer after
the dispatch kernel, combine_preprocess unpermute_launcher before the combine kernel).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import List, Tuple

from vtrain.graph.blocks import Block, gemm_fwd_bwd, linear
from vtrain.graph.collectives import TpComms, TpOperator
from vtrain.graph.eager_paths import clamp_ops
from vtrain.graph.expert_bias import expert_bias_ops
from vtrain.graph.ops import Gemm, MemoryOp, Op
from vtrain.graph.options import GraphOptions
from vtrain.graph.router import dispatch_bookkeeping, gating_backward_casts, router_ops
from vtrain.workload.enums import MoeDispatcher
from vtrain.workload.model import ModelSpec
from vtrain.workload.moe_load import distinct_rank_fraction, expert_load, moe_tokens
from vtrain.workload.plan import ParallelPlan

ROW_ALIGN = 8  # rows per expert are rounded up to this (see expert_rows)


# Transformer Engine's grouped GEMM on the default path is a loop of one cuBLAS GEMM per expert, round-robin
# over its compute streams (common/gemm/cublaslt_gemm.cu, multi_stream_cublas_gemm; num_streams = 4 in
# transformer_engine/multi_stream.h; the CUTLASS grouped kernel is opt-in, NVTE_USE_CUTLASS_GROUPED_GEMM)
GEMM_STREAMS = 4
# bytes per weight-gradient element a GEMM that accumulates into the fp32 main gradient reads and writes
# (Megatron-Core's gradient_accumulation_fusion: TE GroupedLinear's fuse_wgrad_accumulation, accumulate=True)
MAIN_GRAD_BYTES = 8.0


@dataclass(frozen=True, slots=True)
class GroupedGemm(Gemm):
    """The GEMMs of ``batch`` local experts, launched one per expert (the host issues ``batch`` kernels).
    ``streams`` 0: priced as one batched GEMM (a grouped kernel); n > 0: over n CUDA streams (Transformer
    Engine, :data:`GEMM_STREAMS`), up to n of them share the SMs at a time, so the cost model prices
    ceil(batch / n) rounds of a batched GEMM of min(batch, n), each with its fixed kernel time
    (``AnalyticalCostModel.grouped_gemm_time_s``). ``main_grad``: a weight gradient accumulated into the fp32
    main gradient (read and written: :data:`MAIN_GRAD_BYTES` per element instead of the bf16 output)."""

    streams: int = 0
    main_grad: bool = False

    @property
    def kernels(self) -> int:
        return self.batch

    @property
    def bytes(self) -> float:
        out = MAIN_GRAD_BYTES if self.main_grad else self.dtype_bytes
        return float(self.batch * ((self.m * self.k + self.k * self.n) * self.dtype_bytes + self.m * self.n * out))


def _as_run(ops: Tuple[Op, ...], opts: GraphOptions) -> Tuple[Op, ...]:
    """The experts' GEMMs as the stack runs them: over its GEMM streams, the weight gradients into the fp32
    main gradient where it fuses that accumulation."""
    return tuple(replace(op, streams=opts.grouped_gemm_streams,
                         main_grad=opts.expert_wgrad_main_grad and op.name.endswith(".wgrad"))
                 if isinstance(op, GroupedGemm) else op for op in ops)


def mlp_ops(prefix: str, model: ModelSpec, tokens: int, ffn: int, plan: ParallelPlan, batch: int = 1,
            opts: GraphOptions = GraphOptions()) -> Tuple[List[Op], List[Op], MemoryOp]:
    """(forward, backward, activation) of an MLP of width ``ffn`` (already sharded) on ``tokens`` rows, its
    GEMMs in the plan's precision with their quantization kernels (:func:`vtrain.graph.blocks.linear`:
    Megatron-Core's TE GroupedLinear and torchao's scaled grouped GEMMs run the experts in FP8 / MXFP8)."""
    h, dt = model.hidden_size, plan.dtype_bytes
    cls = GroupedGemm if batch > 1 else Gemm
    fc1, fc1_b = linear(f"{prefix}.fc1", tokens, (2 if model.gated_mlp else 1) * ffn, h, plan, batch, cls)
    fc2, fc2_b = linear(f"{prefix}.fc2", tokens, h, ffn, plan, batch, cls)
    fc1, fc1_b, fc2, fc2_b = _as_run(fc1, opts), _as_run(fc1_b, opts), _as_run(fc2, opts), _as_run(fc2_b, opts)
    elems = float(batch * tokens * ffn * dt)
    name = f"{prefix}.{'swiglu' if model.gated_mlp else 'gelu'}"
    act = MemoryOp(name, (3 if model.gated_mlp else 2) * elems)
    act_b = MemoryOp(f"{name}.bwd", (5 if model.gated_mlp else 3) * elems)
    return [*fc1, act, *fc2], [*fc2_b, act_b, *fc1_b], act


def expert_rows(model: ModelSpec, plan: ParallelPlan) -> int:
    """Rows per local expert on the busiest rank: tokens·k of the EP group spread over E experts, gathered
    over ETP, times the load factor (:func:`vtrain.workload.moe_load.expert_load`)."""
    rows = moe_tokens(plan) * model.moe_top_k * plan.expert_tp * expert_load(model)
    per_expert = max(1, math.ceil(rows / (model.num_experts // plan.ep)))
    # rounded up to 8 rows: the token count is the strided dimension of the row-major operands, so an odd
    # count costs no vector loads (the GEMM curve's alignment penalty is for the contiguous dimensions),
    # and a load factor of 1.1 must not price as a misaligned GEMM
    return -(-per_expert // ROW_ALIGN) * ROW_ALIGN


@dataclass(frozen=True, slots=True)
class Permutations:
    """The permutation kernels around the dispatch and combine, forward and backward (in backward order)."""

    before_dispatch: Tuple[Op, ...] = ()
    after_dispatch: Tuple[Op, ...] = ()
    before_combine: Tuple[Op, ...] = ()
    after_combine: Tuple[Op, ...] = ()


def permutations(model: ModelSpec, plan: ParallelPlan) -> Tuple[Permutations, Permutations]:
    """(forward, backward) permutation kernels, fused (Megatron-Core's ``--moe-permute-fusion``), bytes from
    the code. The all-to-all (and all-gather) dispatcher permutes each token into its k rows before sending
    (read the tokens, write the rows) and unpermutes after the combine (read the rows, write the weighted
    sums); the all-to-all one, with ep > 1 and several local experts, also sorts the received chunks by expert
    after the dispatch and back before the combine (sort_chunks_by_idxs: read and write the rows). The flex
    dispatcher's backends receive each token once per rank (:func:`vtrain.comm.ep.distinct_rank_fraction`),
    permute those into the k rows after the dispatch and unpermute before the combine: DeepEP in
    _DeepepManager, HybridEP in its executor's permute / unpermute kernels around its dispatch and combine
    kernels (the module docstring). The backward of each kernel moves the same bytes the other way."""
    dt, h, k, e = plan.dtype_bytes, model.hidden_size, model.moe_top_k, model.num_experts
    tokens = float(moe_tokens(plan) * h * dt)
    rows = tokens * k * expert_load(model)
    if plan.moe_dispatcher in (MoeDispatcher.DEEPEP, MoeDispatcher.HYBRIDEP):
        received = rows * distinct_rank_fraction(e, k, plan.ep)
        # named apart from the all-to-all's pre-dispatch permute: they run after the host sync, outside
        # the moe_preprocess CUDA graph (vtrain.graph.cuda_graphs)
        return (Permutations(after_dispatch=(MemoryOp("moe.received.permute", received + rows, 2),),
                             before_combine=(MemoryOp("moe.received.unpermute", rows + received, 1),)),
                Permutations(after_dispatch=(MemoryOp("moe.received.permute.bwd", rows + received, 1),),
                             before_combine=(MemoryOp("moe.received.unpermute.bwd", received + rows, 2),)))
    fwd = Permutations(before_dispatch=(MemoryOp("moe.permute", tokens + rows, 2),),
                       after_combine=(MemoryOp("moe.unpermute", rows + tokens, 1),))
    bwd = Permutations(before_dispatch=(MemoryOp("moe.permute.bwd", rows + tokens, 1),),
                       after_combine=(MemoryOp("moe.unpermute.bwd", tokens + rows, 2),))
    if plan.moe_dispatcher == MoeDispatcher.ALLTOALL and plan.ep > 1 and e // plan.ep > 1:
        sort, unsort = MemoryOp("moe.sort_chunks", 2 * rows, 1), MemoryOp("moe.unsort_chunks", 2 * rows, 1)
        fwd = replace(fwd, after_dispatch=(sort,), before_combine=(unsort,))
        bwd = replace(bwd, after_dispatch=(replace(sort, name="moe.sort_chunks.bwd"),),
                      before_combine=(replace(unsort, name="moe.unsort_chunks.bwd"),))
    return fwd, bwd


def moe_block(model: ModelSpec, plan: ParallelPlan, tp: TpComms, ep: TpOperator,
              opts: GraphOptions = GraphOptions()) -> Block:
    dt, h, e = plan.dtype_bytes, model.hidden_size, model.num_experts
    tokens = moe_tokens(plan)
    # the gating GEMM (Megatron-Core's RouterGatingLinearFunction through Transformer Engine's GEMM): bf16 in,
    # fp32 logits out; its backward GEMMs take fp32 operands (cast around them: graph.router)
    router, (dgrad, wgrad) = gemm_fwd_bwd("moe.router", tokens, e, h, dt)
    router_b = (replace(dgrad, dtype_bytes=4), replace(wgrad, dtype_bytes=4))
    route_f, route_b = router_ops(model, plan, tokens, opts.router_fusion)
    casts = gating_backward_casts(model, tokens)
    splits, probs, probs_b = dispatch_bookkeeping(model, plan)
    local = e // plan.ep
    pf, pb = permutations(model, plan)
    rows = expert_rows(model, plan)
    ffn = model.expert_ffn // plan.expert_tp
    exp_f, exp_b, act = mlp_ops("moe.expert", model, rows, ffn, plan, batch=local, opts=opts)
    clamp_f, clamp_b = clamp_ops(model, 2.0 * rows * local * ffn, dt, "moe.expert")  # eager (graph.eager_paths)
    at = exp_f.index(act)
    exp_f[at:at] = clamp_f
    at = [op.name for op in exp_b].index(f"{act.name}.bwd") + 1
    exp_b[at:at] = clamp_b
    bias_f, bias_b = expert_bias_ops(model, rows, local, dt)  # fc2's bias, eager (graph.expert_bias)
    forward: List[Op] = [router, *route_f, *splits, *pf.before_dispatch, *ep.enter, *probs, *pf.after_dispatch,
                         *exp_f, *bias_f, *pf.before_combine, *ep.exit, *pf.after_combine]
    backward: List[Op] = [*pb.after_combine, *ep.exit_backward, *pb.before_combine, *bias_b, *exp_b,
                          *pb.after_dispatch, *probs_b, *ep.enter_backward, *pb.before_dispatch, *route_b, casts,
                          *router_b]
    shared: List[Op] = []
    if model.shared_ffn:  # a tensor-parallel MLP on the whole (gathered) sequence
        seq = tokens * plan.tp if plan.sequence_parallel else tokens
        sh_f, sh_b, _ = mlp_ops("moe.shared", model, seq, model.shared_ffn // plan.tp, plan)
        shared = [*tp.mlp.enter, *sh_f, *tp.mlp.exit]
        forward += shared
        backward = [*tp.mlp.exit_backward, *sh_b, *tp.mlp.enter_backward, *backward]
    modules = (("moe", tuple(forward)), ("moe_act", (*clamp_f, act)), ("shared_experts", tuple(shared)))
    return Block(tuple(forward), tuple(backward), (), modules)
