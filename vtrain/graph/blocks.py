"""The shared pieces of the operator graph: a pass's ops, a component's three passes, the model's graph, a
linear layer with its quantization kernels, a residual branch (:class:`Block`) and the attention kernels'
ring steps. The builder (:mod:`vtrain.graph.builder`) and the MLA, MoE, MTP and recompute blocks build on
them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple, Type

from vtrain.graph.cp_ring import ring_merge_ops
from vtrain.graph.ops import Gemm, MemoryOp, Op
from vtrain.graph.options import GraphOptions
from vtrain.workload.enums import CpComm
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
    tail_layer: Optional[ComponentGraph] = None  # a last layer kept in high precision (builder.tail_layers)
    tail_layers: int = 0  # how many of the model's last layers run ``tail_layer`` instead of ``layer``


def map_passes(graph: ModelGraph, fn: Callable[[PassOps], PassOps]) -> ModelGraph:
    """``graph`` with ``fn`` applied to every pass of every component (a graph rewrite: kernel fusion,
    layout copies)."""
    def component(c: ComponentGraph) -> ComponentGraph:
        return ComponentGraph(fn(c.forward), fn(c.backward), fn(c.recompute))

    return ModelGraph(component(graph.layer), component(graph.embedding), component(graph.head),
                      None if graph.moe_layer is None else component(graph.moe_layer),
                      None if graph.mtp is None else component(graph.mtp),
                      None if graph.tail_layer is None else component(graph.tail_layer), graph.tail_layers)


def gemm_fwd_bwd(name: str, m: int, n: int, k: int, dt: float, precision: str = "", batch: int = 1,
                  cls: Type[Gemm] = Gemm) -> Tuple[Gemm, Tuple[Gemm, Gemm]]:
    """A GEMM Y[m, n] = X[m, k] W[k, n] (``batch`` side by side, as ``cls``) and its activation-grad and
    weight-grad."""
    fwd = cls(name, m=m, n=n, k=k, batch=batch, dtype_bytes=dt, precision=precision)
    dgrad = cls(f"{name}.dgrad", m=m, n=k, k=n, batch=batch, dtype_bytes=dt, precision=precision)
    wgrad = cls(f"{name}.wgrad", m=k, n=n, k=m, batch=batch, dtype_bytes=dt, precision=precision)
    return fwd, (dgrad, wgrad)


# Bytes per element of the fused quantization kernels of a low-precision linear layer (Transformer Engine's
# cast_transpose, torchao's float8 casts), as (input in forward, input in backward, weight in backward, output
# gradient). Per-tensor, MX and NVFP4 scales: read the bf16 tensor (2 B), write it quantized in both layouts
# (the GEMMs need row- and column-major operands on Hopper/Blackwell: 2 x 1 B; 2 x 0.5 B for NVFP4, whose
# random Hadamard transform adds about as much); the weight is cast with the input. Blockwise scales cannot
# transpose a quantized tensor: the transposed copy is quantized again from bf16 (one more 2-byte read).
# torchao's rowwise recipe (float8_linear.manual_float8_matmul_with_args_in_hp) saves the bf16 input and
# weight and casts each operand for each GEMM: along its rows (amax fused with the cast: read 2, write 1) for
# the output and the input gradient, along its columns for the weight gradient (a column amax over all tokens
# first: read 2, then read 2, write 1): the input 3 B in forward and 5 B in backward, the weight 3 B in each,
# the output gradient 3 + 5 B.
_QUANT_BYTES = {"fp8": (4.0, 0.0, 0.0, 4.0), "mxfp8": (4.0, 0.0, 0.0, 4.0), "nvfp4": (4.0, 0.0, 0.0, 4.0),
                "fp8_rowwise": (3.0, 5.0, 3.0, 8.0), "fp8_blockwise": (6.0, 0.0, 0.0, 6.0)}


def linear(name: str, tokens: int, n: int, k: int, plan: ParallelPlan, batch: int = 1,
           cls: Type[Gemm] = Gemm, quantize_input: bool = True) -> Tuple[Tuple[Op, ...], Tuple[Op, ...]]:
    """A linear layer Y[tokens, n] = X[tokens, k] W[k, n] (``batch`` of them side by side: the local experts'
    grouped GEMM, ``cls``): its forward and backward ops (in backward order: dgrad, wgrad). With a low
    precision the three GEMMs run in that format and the fused quantization kernels of the input, the
    weight (forward) and the output gradient (backward) are memory-bound ops beside them (Transformer
    Engine's Linear and GroupedLinear, torchao's float8 / MX linears and grouped GEMMs alike);
    ``quantize_input`` False: the input is quantized already (a projection beside another on the same input)."""
    prec = plan.precision
    if not prec.low:
        fwd, (dgrad, wgrad) = gemm_fwd_bwd(name, tokens, n, k, plan.dtype_bytes, batch=batch, cls=cls)
        return (fwd,), (dgrad, wgrad)
    fwd, (dgrad, wgrad) = gemm_fwd_bwd(name, tokens, n, k, prec.gemm_operand_bytes, prec.value, batch, cls)
    q_in, q_in_bwd, q_w_bwd, q_grad = _QUANT_BYTES[prec.value]
    inputs = tokens * k if quantize_input else 0
    recast = q_in_bwd > 0  # rowwise: the output gradient's row cast, column amax and cast; the input's and weight's
    quant_in = MemoryOp(f"{name}.quant", q_in * batch * (inputs + k * n), 2 if quantize_input else 1,  # input, weight
                        weight_bytes=q_in * batch * k * n if not recast else 0.0)
    quant_grad = MemoryOp(f"{name}.quant.bwd", batch * (q_grad * tokens * n + q_in_bwd * inputs + q_w_bwd * k * n),
                          (3 + (2 if inputs else 0) + 1) if recast else 1)
    return (quant_in, fwd), (quant_grad, dgrad, wgrad)


def projections(names: Sequence[str], tokens: int, widths: Sequence[int], k: int, plan: ParallelPlan,
                separate: bool) -> Tuple[Tuple[Op, ...], Tuple[Op, ...]]:
    """Linear layers of one input X[tokens, k] with outputs of ``widths``: one GEMM of their summed width
    (Megatron's fused QKV / FC1, named ``names[0]``), or with ``separate`` one GEMM each (torchtitan's wq, wk,
    wv / w1, w3, named ``names[1:]``: the input quantized once, each weight its own), whose input gradients
    are summed (the partial gradients read, the sum written: one fused kernel)."""
    if not separate or len(widths) == 1:
        return linear(names[0], tokens, sum(widths), k, plan)
    parts = [linear(name, tokens, n, k, plan, quantize_input=i == 0) for i, (name, n) in
             enumerate(zip(names[1:], widths))]
    grad_sum = MemoryOp(f"{names[0]}.grad_sum", (len(parts) + 1) * float(tokens * k * plan.dtype_bytes), 1)
    return (tuple(op for f, _ in parts for op in f), (*(op for _, b in parts for op in b), grad_sum))


@dataclass(frozen=True, slots=True)
class Block:
    """The ops of one residual block's branch (attention or MLP) between its norm and its residual add:
    forward, backward (in backward order) and what selective recompute runs again."""

    forward: Tuple[Op, ...]
    backward: Tuple[Op, ...]
    selective_recompute: Tuple[Op, ...] = ()
    modules: Tuple[Tuple[str, Tuple[Op, ...]], ...] = ()  # Megatron-Core recompute module -> its forward ops


def ring_steps(plan: ParallelPlan, opts: GraphOptions) -> int:
    """Attention kernels per layer and pass: one per ring step where the framework's context parallelism runs
    its ring in Python (``opts.cp_ring_merge``; an all-to-all CP attends once), else one."""
    return plan.cp if opts.cp_ring_merge and plan.cp_comm != CpComm.A2A else 1


def call_keys(plan: ParallelPlan, calls: int) -> int:
    """Keys one attention kernel call holds per query: a ring step's one block of s/cp (a ring run in Python, or
    Megatron-Core's p2p CP, whose Transformer Engine kernels also run once per step), else the whole sequence
    (an all-gather CP attends once over the gathered keys; an all-to-all CP over the whole sequence)."""
    ring = calls > 1 or (plan.cp > 1 and plan.cp_comm == CpComm.P2P)
    return plan.seq_len // plan.cp if ring else plan.seq_len


def ring_merges(plan: ParallelPlan, opts: GraphOptions, q_elems: float, out_elems: float,
                kv_elems: float) -> Tuple[Tuple[Op, ...], Tuple[Op, ...]]:
    """The element-wise merges of a framework whose context parallelism runs one attention kernel per ring
    step (``opts.cp_ring_merge``: :mod:`vtrain.graph.cp_ring`), (forward, backward); none otherwise."""
    if ring_steps(plan, opts) == 1:
        return (), ()
    fwd, bwd = ring_merge_ops(plan.cp, q_elems, out_elems, kv_elems, plan.dtype_bytes, opts.cp_accumulate_fp32)
    return (fwd,), (bwd,)
