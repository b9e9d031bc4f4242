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
Memory-bound ops move their bytes at eta_mem · HBM bw.
"""
from __future__ import annotations

import math
from typing import FrozenSet

from vtrain.cost.collectives import GroupPlacement, collective_time_s
from vtrain.graph.ops import Collective, ComputeOp, FlashAttention, Gemm
from vtrain.workload.workload import Workload

TILE_M, TILE_N = 128, 128  # a typical cuBLAS/CUTLASS fp16 tensor-core tile


def alignment_elements(*dims: int, widest: int = 8) -> int:
    """The largest power of two up to ``widest`` elements that divides every dimension."""
    a = widest
    while a > 1 and any(d % a for d in dims):
        a //= 2
    return a


def wave_efficiency(m: int, n: int, batch: int, sms: int) -> float:
    """Wave quantization (NVIDIA "Matrix Multiplication Background", Sec. "Wave Quantization"): output
    tiles run in waves of one tile per SM; a partly filled last wave wastes the idle SMs."""
    tiles = -(-m // TILE_M) * -(-n // TILE_N) * batch
    waves = -(-tiles // sms)
    return tiles / (waves * sms)


class AnalyticalCostModel:
    name = "analytical"

    def __init__(self, w: Workload) -> None:
        cluster, stack, precision = w.cluster, w.stack, w.plan.precision.value
        self.cluster = cluster
        gpu = cluster.gpu
        self.peak = gpu.peak_flops_per_s(precision)
        self.mem_bw = gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency
        self.eta_max = gpu.gemm_max_efficiency
        self.d_half = gpu.gemm_half_efficiency_dim
        self.misaligned = gpu.gemm_misaligned_efficiency
        self.sms = gpu.num_sms
        self.wave = True
        self.align = 16 // (2 if precision in ("fp16", "bf16") else 4)  # elements per 16-byte TC alignment
        # eta_align for every alignment below the full one (a = align/2, align/4, ..., 1)
        self.align_eff = {}
        a = self.align // 2
        while a >= 1:
            self.align_eff[a] = self.misaligned ** (math.log2(self.align / a) / math.log2(self.align))
            a //= 2
        self.attn_eff = gpu.attention_efficiency
        self.kernel_s = gpu.kernel_time_s
        self.host_s = stack.host_time_per_kernel_s
        self.host_coll_s = stack.host_time_per_collective_s
        self.opt_bytes = stack.optimizer_bytes_per_param

    def _g(self, d: float) -> float:
        return d / (d + self.d_half)

    def gemm_efficiency(self, op: Gemm) -> float:
        eta = self.eta_max * self._g(op.m) * self._g(op.n) * self._g(op.k)
        if self.wave:
            eta *= wave_efficiency(op.m, op.n, op.batch, self.sms)
        a = alignment_elements(op.m, op.n, op.k, widest=self.align)
        if a < self.align:
            eta *= self.align_eff[a]
        return eta * self.attn_eff if op.attention else eta

    def compute_time_s(self, op: ComputeOp) -> float:
        if isinstance(op, Gemm):
            t = max(op.flops / (self.peak * self.gemm_efficiency(op)), op.bytes / self.mem_bw)
        elif isinstance(op, FlashAttention):
            t = max(op.flops / (self.peak * self.eta_max * self.attn_eff), op.bytes / self.mem_bw)
        else:
            t = max(op.flops / self.peak, op.bytes / self.mem_bw)
        return max(t, op.kernels * self.kernel_s)

    def host_time_s(self, kernels: int) -> float:
        return kernels * self.host_s

    def collective_host_time_s(self, op: Collective) -> float:
        return op.kernels * self.host_s + self.host_coll_s

    def collective_time_s(self, op: Collective, where: GroupPlacement) -> float:
        return collective_time_s(op.kind, op.bytes, where, self.cluster)

    def optimizer_time_s(self, params: float) -> float:
        return params * self.opt_bytes / self.mem_bw

    def extrapolated(self) -> FrozenSet[str]:
        return frozenset()
