"""Tensor-parallel collectives of Megatron's f/g operators (Shoeybi et al. 2019, Fig. 3; with sequence
parallelism, Korthikanti et al. 2022, Sec. 4.2.2).

Per transformer layer, forward: identity before each column-parallel GEMM (QKV, FC1) and an all-reduce
after each row-parallel GEMM (projection, FC2); backward: an all-reduce of each column-parallel GEMM's
input gradient. With sequence parallelism each forward all-reduce becomes a reduce-scatter, each
identity an all-gather (and the backward mirrors them). Every message is the full activation
[tokens, h] of one micro-batch (the buffer an all-reduce reduces; an all-gather's output).
"""
from __future__ import annotations

import functools
from typing import Tuple

from vtrain.graph.collectives import NONE, TpComms, TpOperator
from vtrain.graph.ops import Collective, CollectiveKind, Group
from vtrain.workload.enums import Precision
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.stack import StackSpec


def _operator(enter: str, exit_: str, tp: int, sp: bool, nbytes: float, overlap: bool = False,
              gather_bytes: float | None = None, overlap_input_grad: bool = True,
              overlap_gather: bool = True) -> TpOperator:
    """The f/g pair around a block entered at GEMM ``enter`` and left at GEMM ``exit_`` ("" for none).
    ``overlap`` (TP-communication overlap, with SP): each all-gather is pipelined with the GEMM it feeds,
    each reduce-scatter with the GEMM before it, in tp chunks (TE userbuffers' ring exchange; torchtitan's
    async TP); the backward reduce-scatter of the input gradient only with ``overlap_input_grad``
    (not with :attr:`StackSpec.separate_projections`), each all-gather only with ``overlap_gather``
    (:func:`gathers_fuse`). ``gather_bytes``: the all-gathers' message when they move a quantized tensor
    (:attr:`StackSpec.tp_fp8_all_gather`)."""
    if tp == 1:
        return TpOperator()

    def coll(name: str, suffix: str, kind: CollectiveKind, pipelined: bool = True) -> Tuple[Collective, ...]:
        if not name:
            return NONE
        side = "" if not (overlap and pipelined) or kind == CollectiveKind.ALL_REDUCE else (
            "next" if kind == CollectiveKind.ALL_GATHER else "previous")
        size = nbytes if gather_bytes is None or kind != CollectiveKind.ALL_GATHER else gather_bytes
        return (Collective(f"{name}.{suffix}", kind, size, Group.TP, tp, overlap=side, chunks=tp if side else 1),)

    ag, rs, ar = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE
    return TpOperator(
        enter=coll(enter, "ag", ag, overlap_gather) if sp else NONE,
        exit=coll(exit_, "rs", rs) if sp else coll(exit_, "ar", ar),
        enter_backward=coll(enter, "bwd.rs", rs, overlap_input_grad) if sp else coll(enter, "bwd.ar", ar),
        exit_backward=coll(exit_, "bwd.ag", ag, overlap_gather) if sp else NONE)


@functools.lru_cache(maxsize=1024)  # a pure function of scalars: a search's plans share a handful of values
def tp_comms(tp: int, sequence_parallel: bool, tokens: int, hidden: int, dtype_bytes: int,
             overlap: bool = False, gather_dtype_bytes: float | None = None,
             overlap_input_grad: bool = True, overlap_gather: bool = True) -> TpComms:
    """``gather_dtype_bytes``: the all-gathers' element size around the low-precision linear layers of the
    attention and MLP blocks when they gather the quantized tensor (the embedding and the output layer stay
    in the activation dtype: torchtitan's float8 converter skips the output layer)."""
    size = float(tokens * hidden * dtype_bytes)
    gather = None if gather_dtype_bytes is None else float(tokens * hidden * gather_dtype_bytes)
    sp = sequence_parallel
    ce: Tuple[Collective, ...] = ()
    if tp > 1:
        ce = tuple(Collective(f"cross_entropy.ar{i}", CollectiveKind.ALL_REDUCE, tokens * 4.0, Group.TP, tp)
                   for i in range(3))
    return TpComms(attention=_operator("qkv", "proj", tp, sp, size, overlap, gather, overlap_input_grad,
                                       overlap_gather),
                   mlp=_operator("fc1", "fc2", tp, sp, size, overlap, gather, overlap_input_grad, overlap_gather),
                   embedding=_operator("", "embedding", tp, sp, size), logits=_operator("logits", "", tp, sp, size),
                   cross_entropy=ce)


def gathers_fuse(plan: ParallelPlan, stack: StackSpec | None, fp8_gather: bool) -> bool:
    """Whether TP overlap pipelines the sequence-parallel all-gathers with the GEMMs they feed. Async TP on
    symmetric memory (:attr:`StackSpec.tp_overlap_symm_mem`) is Inductor's micro-pipeline pass, which fuses an
    all-gather only into the matmuls that take the gathered tensor as their left operand
    (torch._inductor.fx_passes.micro_pipeline_tp: fuse_all_gather_matmul, _find_consumer_matmuls: aten.mm or
    aten._scaled_mm, through a reshape). A low precision whose TP gathers the bf16 activation (every recipe but
    per-tensor float8 with :attr:`StackSpec.tp_fp8_all_gather`: torchao's rowwise float8 casts after the gather,
    its MX and NVFP4 linears cast inside their own matmul function) puts its cast between the gather and the
    matmul, so the gathers run as vanilla TP's; the forward reduce-scatter after a row-parallel GEMM still fuses
    (its producer is the _scaled_mm). TE's userbuffers overlap (Megatron-Core) pipelines every gather."""
    return not (stack is not None and stack.tp_overlap_symm_mem and plan.precision.low and not fp8_gather)


def plan_tp_comms(model: ModelSpec, plan: ParallelPlan, stack: StackSpec | None = None) -> TpComms:
    """The TP collectives of ``plan`` for ``model`` (one micro-batch on one context-parallel rank), as
    ``stack`` runs them (default: Megatron's)."""
    fp8_gather = stack is not None and stack.tp_fp8_all_gather and plan.precision == Precision.FP8
    return tp_comms(plan.tp, plan.sequence_parallel, plan.tokens_per_rank, model.hidden_size, plan.dtype_bytes,
                    plan.tp_comm_overlap, plan.precision.gemm_operand_bytes if fp8_gather else None,
                    stack is None or not stack.separate_projections, gathers_fuse(plan, stack, fp8_gather))
