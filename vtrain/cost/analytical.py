"""Analytical cost model: a roofline with shape-dependent efficiency.

GEMM time = max(FLOPs / (peak · eta(m,n,k)), bytes / (HBM bw · eta_mem)), never below one kernel's
minimum time. eta(m,n,k) = eta_max · g(m)·g(n)·g(k) with g(d) = d / (d + d_half): a GEMM reaches its
peak efficiency only when every dimension fills the tensor-core tiles (the saturation form used by
Calculon's efficiency tables, reduced to one constant). Batched attention GEMMs (QK^T, AV) run at a
further factor ``attention_efficiency``; a GEMM with a dimension that is not a multiple of 16 bytes
(e.g. an unpadded vocabulary of 50,257) misses cuBLAS's aligned tensor-core kernels and runs at a
factor ``gemm_misaligned_efficiency`` (NVIDIA, "Matrix Multiplication Background User's Guide",
Tensor Core requirements). The penalty is graded by the alignment a (the largest of 8, 4, 2, 1 elements
that divides every dimension): CUTLASS/cuBLAS kernels load 16, 8, 4 or 2 bytes per access for
a = 8, 4, 2, 1, so each halving of the load width costs the same factor and
eta_align(a) = gemm_misaligned_efficiency ** (log2(8 / a) / 3) (1 at a = 8, the full penalty at a = 1).
Memory-bound ops move their bytes at eta_mem · HBM bw; those on PyTorch's non-vectorized element-wise path (an
operand broadcast or sliced along its last dimension: ``MemoryOp.strided``) at min(``strided_gb_per_s_per_sm`` · SMs,
eta_mem · HBM bw): latency-bound, their rate is the bytes each SM keeps in flight, not the HBM's.

The GEMM efficiency curve per GPU and precision (size terms, a fixed kernel time, wave quantization) is
:class:`vtrain.cost.gemm.GemmCurve`. In a plan at a low precision (fp8, fp8_blockwise, mxfp8, nvfp4) the
linear-layer GEMMs run at that precision's peak and efficiency; attention (its batched GEMMs and the fused
kernel) and everything else stay at bf16 (Transformer Engine's and torchao's recipes).
Fused attention runs at ``flash_attention_efficiency`` of the peak where the GPU states it, else at the
large-GEMM efficiency times ``attention_efficiency`` (the A100 fit); where the GPU states
``flash_attention_k0_tokens``, that rate is the 8K causal anchor's and each call's follows its mean keys per
query, shorter calls slower and longer ones faster up to ``flash_attention_max_length_factor``
(:func:`flash_length_factor`).
"""
from __future__ import annotations

from typing import FrozenSet, Optional, Tuple

from vtrain.comm.placement import GroupPlacement
from vtrain.cost.collectives import collective_time_s
from vtrain.cost.gemm import TILE_M, TILE_N, GemmCurve, alignment_elements, high_precision_of, wave_efficiency
from vtrain.graph.ops import Collective, ComputeOp, FlashAttention, Gemm, MemoryOp
from vtrain.workload.enums import Precision
from vtrain.workload.workload import Workload

__all__ = ["AnalyticalCostModel", "TILE_M", "TILE_N", "alignment_elements", "flash_head_dim_factor",
           "flash_length_factor", "wave_efficiency"]

# the mean keys per query of the length flash_attention_efficiency is measured at (8K causal sequences)
FLASH_ANCHOR_KEYS = 4096.0


# the head dimension of the models flash_attention_efficiency was measured on (Llama-3.1-8B: 4,096 / 32 heads)
FLASH_ANCHOR_HEAD_DIM = 128.0
# a fused-attention backward runs 2.5x its forward's matmul FLOPs (graph.ops.FlashAttention) and one exponential
# per score (recomputing P), so its exponentials weigh 1 / 2.5 as much against its matmuls
FLASH_BACKWARD_MATMUL_FACTOR = 2.5


def flash_head_dim_factor(head_dim: float, exp_head_dim: Optional[float], backward: bool = False) -> float:
    """A fused-attention call's rate at ``head_dim`` relative to the anchor's (128): per score the kernel runs
    4 d matmul FLOPs and one exponential on the special-function units; taken as serial (the model the GB300
    constant's provenance uses), the time per score goes as d + e (e = gpu.flash_attention_exp_head_dim; e / 2.5
    in backward), the FLOP rate as d / (d + e). None: 1 at every head dimension."""
    if exp_head_dim is None or head_dim <= 0 or head_dim == FLASH_ANCHOR_HEAD_DIM:
        return 1.0
    e = exp_head_dim / (FLASH_BACKWARD_MATMUL_FACTOR if backward else 1.0)
    return (head_dim / (head_dim + e)) * ((FLASH_ANCHOR_HEAD_DIM + e) / FLASH_ANCHOR_HEAD_DIM)


def flash_length_factor(mean_keys: float, k0: Optional[float], cap: Optional[float] = None) -> float:
    """A fused-attention call's rate relative to the 8K causal anchor: per query tile, a fixed cost (Q in,
    O and log-sum-exp out) worth k0 keys beside the work on its keys, so the rate goes as k / (k + k0)
    (gpu.flash_attention_k0_tokens; None: 1), below the anchor as above it, and above it gains at most
    ``cap`` (gpu.flash_attention_max_length_factor; None: no cap)."""
    if k0 is None or mean_keys == FLASH_ANCHOR_KEYS or mean_keys <= 0:  # exactly the measured rate at the anchor
        return 1.0
    factor = (mean_keys / (mean_keys + k0)) * ((FLASH_ANCHOR_KEYS + k0) / FLASH_ANCHOR_KEYS)
    return factor if cap is None else min(factor, cap)


class AnalyticalCostModel:
    name = "analytical"

    def __init__(self, w: Workload) -> None:
        cluster, stack, prec = w.cluster, w.stack, w.plan.precision
        self.cluster = cluster
        gpu = cluster.gpu
        precision = prec.value if prec.value in gpu.peak_tflops else prec.peak_key  # fp8_rowwise: the fp8 rate
        self.curve = GemmCurve.for_gpu(gpu, precision)
        if prec is Precision.FP8_ROWWISE and stack.rowwise_fp8_on_cutlass(gpu.architecture):  # PyTorch's CUTLASS
            self.curve = GemmCurve.for_gpu(gpu, prec.peak_key).scaled(gpu.rowwise_cutlass_gemm_ratio)
        high = high_precision_of(gpu, precision)
        self.attn_curve = self.curve if high == precision else GemmCurve.for_gpu(gpu, high)
        # a GEMM names its format (the linear layers in a low-precision plan); "" is the high precision
        self.curves = {"": self.attn_curve, prec.value: self.curve}
        self.peak = self.attn_curve.peak_flops_per_s  # non-GEMM FLOPs run in high precision
        self.mem_bw = gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency
        per_sm = gpu.strided_gb_per_s_per_sm  # PyTorch's non-vectorized element-wise path (MemoryOp.strided)
        self.strided_bw = self.mem_bw if per_sm is None else min(self.mem_bw, per_sm * 1e9 * gpu.num_sms)
        self.eta_max = self.curve.eta_max
        self.wave = True
        self.attn_eff = gpu.attention_efficiency
        sustained = stack.sustained_gemm_fraction(gpu)  # benchmarked GEMM rate -> rate inside a training step
        if gpu.flash_attention_efficiency is None:  # the GEMM curve's rate, sustained as the stack's GEMMs are
            self.flash_rate = self.peak * self.attn_curve.eta_max * self.attn_eff * sustained
        else:
            self.flash_rate = self.peak * gpu.flash_attention_efficiency
        # a power-capped part runs its tensor cores at a lower clock: GEMMs and fused attention alike
        fwd_factor, bwd_factor = stack.attention_pass_factors(gpu.architecture)
        self.flash_rate *= fwd_factor * gpu.power_clock_fraction
        self.flash_backward = bwd_factor / fwd_factor  # the backward's rate over the forward's
        self.flash_k0 = gpu.flash_attention_k0_tokens
        self.flash_cap = gpu.flash_attention_max_length_factor
        self.flash_exp_d = gpu.flash_attention_exp_head_dim
        self.sustained = sustained * gpu.power_clock_fraction  # and on this part's clock
        self.elementwise = stack.elementwise_traffic  # eager frameworks: several kernels per fused op
        self.kernel_s = gpu.kernel_time_s
        self.host_s = stack.host_time_per_kernel_s
        eager_s = stack.host_time_per_eager_op_s
        self.eager_host = 1.0 if eager_s is None or self.host_s <= 0 else eager_s / self.host_s
        self.host_coll_s = stack.host_time_per_collective_s
        self.opt_bytes = stack.optimizer_bytes_per_param
        opt_fraction = stack.optimizer_bandwidth_fraction
        self.opt_bw = self.mem_bw if opt_fraction is None else gpu.hbm_bandwidth_bytes_per_s * opt_fraction

    def _curve(self, op: Gemm) -> GemmCurve:
        return self.attn_curve if op.attention else self.curves.get(op.precision, self.curve)

    def gemm_efficiency(self, op: Gemm) -> float:
        eta = self._curve(op).efficiency(op.m, op.n, op.k, op.batch, self.wave)
        return eta * self.attn_eff if op.attention else eta

    def compute_time_s(self, op: ComputeOp) -> float:
        if isinstance(op, Gemm) and getattr(op, "streams", 0) > 0:  # graph.moe.GroupedGemm: one GEMM per expert
            return max(self.grouped_gemm_time_s(op), op.kernels * self.kernel_s)
        if isinstance(op, Gemm):
            c = self._curve(op)
            t = c.fixed_time_s + max(op.flops / (c.peak_flops_per_s * self.sustained * self.gemm_efficiency(op)),
                                     op.bytes / self.mem_bw)
        elif isinstance(op, FlashAttention):
            rate = self.flash_rate * (self.curve.peak_flops_per_s / self.peak if op.precision else 1.0)
            rate *= flash_length_factor(op.mean_call_keys, self.flash_k0, self.flash_cap)
            rate *= self.flash_backward if op.backward else 1.0
            rate *= flash_head_dim_factor(op.head_dim, self.flash_exp_d, op.backward)
            t = max(op.flops / rate, op.bytes / self.mem_bw)
        else:
            traffic = 1.0 if op.eager else self.elementwise
            t = max(op.flops / self.peak, op.bytes * traffic / (self.strided_bw if op.strided else self.mem_bw))
            return max(t, op.kernels * traffic * self.kernel_s)
        return max(t, op.kernels * self.kernel_s)

    def grouped_gemm_time_s(self, op: Gemm) -> float:
        """Transformer Engine's grouped GEMM: ``op.batch`` expert GEMMs over ``op.streams`` streams, priced as
        rounds of a batched GEMM of the experts that share the SMs (their waves together: ``streams`` per round,
        the rest in a last round), each with the curve's fixed kernel time, never faster than its bytes."""
        c = self._curve(op)
        side = min(op.batch, getattr(op, "streams", 1))
        full, rest = divmod(op.batch, side)

        def round_s(experts: int) -> float:  # one round: ``experts`` GEMMs side by side
            return c.fixed_time_s + 2.0 * experts * op.m * op.n * op.k / (
                c.peak_flops_per_s * self.sustained * c.efficiency(op.m, op.n, op.k, experts, self.wave))

        t = full * round_s(side) + (round_s(rest) if rest else 0.0)
        return max(t, c.fixed_time_s + op.bytes / self.mem_bw)

    def host_time_s(self, kernels: float) -> float:
        return kernels * self.host_s

    def kernels_of(self, op: ComputeOp) -> float:
        """The op's kernels as the host issues them, in units of the stack's host time per kernel (an eager
        op's at the stack's host time per eager op)."""
        if isinstance(op, MemoryOp):
            return op.kernels * (self.eager_host if op.eager else self.elementwise)
        return float(op.kernels)

    def collective_host_time_s(self, op: Collective) -> float:
        return op.kernels * self.host_s + self.host_coll_s

    def collective_time_s(self, op: Collective, where: GroupPlacement) -> float:
        return collective_time_s(op.kind, op.bytes, where, self.cluster)

    def copy_time_s(self, nbytes: float) -> float:
        return max(nbytes / self.mem_bw, self.kernel_s)

    def optimizer_time_s(self, params: float) -> float:
        return params * self.opt_bytes / self.opt_bw

    def extrapolated(self) -> FrozenSet[str]:
        return frozenset()

    def notes(self) -> Tuple[str, ...]:
        return ()
