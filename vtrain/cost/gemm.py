"""GEMM efficiency of one GPU at one precision: the curve the analytical cost model prices GEMMs with.

    t(m, n, k, b) = t0 + 2·b·m·n·k / (peak_p · eta),
    eta = eta_max,p · g(m; d_mn) · g(n; d_mn) · g(k; d_k,p) · wave(m, n, b)**x · align(m, n, k)

- ``g(d; d_half) = d / (d + d_half)`` is the size factor (Calculon's saturation form): a dimension
  reaches the tile's full rate only when it is much larger than d_half.
- ``d_k,p`` is the k at which the k-loop of a tile has done as much work as its fixed prologue and
  epilogue (operand pipeline fill, writing the C tile). That fixed part takes the same time at every
  precision, while a k-step at precision p runs peak_p / peak_bf16 times faster, so
  ``d_k,p = d_k,bf16 · peak_p / peak_bf16`` (first principles; checked on B200, where the bf16 fit
  transferred this way to fp8 reproduces the measured fp8 table as well as an fp8 fit of its own).
- ``wave`` is wave quantization over the SMs (NVIDIA, "Matrix Multiplication Background User's Guide",
  Sec. "Wave Quantization") with 128x128 output tiles; the exponent x < 1 says the library partly hides
  it (tile-size choice, split-K / stream-K), x = 1 is the plain tile-per-SM model.
- ``t0`` is a fixed time per GEMM kernel (launch to first tile, tail), measured by kernel tracers.
- ``align`` is the misalignment penalty graded by load width (see :mod:`vtrain.cost.analytical`).

With the A100 constants (one ``d_half`` for m, n and k, ``t0 = 0``, x = 1, one ``eta_max``) this is the
formula the A100 fit was made with, unchanged.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Dict, Mapping, Optional

from vtrain.workload.system import TFLOPS, GpuSpec

TILE_M, TILE_N = 128, 128  # a typical cuBLAS/CUTLASS tensor-core output tile
# bytes per element of a GEMM operand by precision name (nvfp4: 4 bits + block scales)
ELEMENT_BYTES: Dict[str, float] = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0,
                                   "fp8_rowwise": 1.0, "fp8_blockwise": 1.0, "mxfp8": 1.0, "nvfp4": 0.5}
HIGH_PRECISIONS = ("bf16", "fp16", "fp32", "tf32")  # what stays in high precision in an fp8/fp4 plan
BLOCK_SCALED = ("mxfp8", "nvfp4")  # microscaling formats: a scale per 32 (MX) or 16 (NVFP4) elements


def alignment_elements(*dims: int, widest: int = 8) -> int:
    """The largest power of two up to ``widest`` elements that divides every dimension."""
    a = widest
    while a > 1 and any(d % a for d in dims):
        a //= 2
    return a


def wave_efficiency(m: int, n: int, batch: int, sms: int) -> float:
    """Output tiles run in waves of one tile per SM; a partly filled last wave wastes the idle SMs."""
    tiles = -(-m // TILE_M) * -(-n // TILE_N) * batch
    waves = -(-tiles // sms)
    return float(tiles / (waves * sms))


def reference_peak_tflops(gpu: GpuSpec) -> float:
    """The rate ``gemm_half_efficiency_k`` is stated at: bf16, else fp16, else the highest peak."""
    peaks = gpu.peak_tflops
    return peaks.get("bf16") or peaks.get("fp16") or max(peaks.values())


def high_precision_of(gpu: GpuSpec, precision: str) -> str:
    """The precision of what is not a low-precision GEMM in a plan at ``precision`` (attention, norms)."""
    if precision in HIGH_PRECISIONS:
        return precision
    return "bf16" if "bf16" in gpu.peak_tflops else "fp16"


def fp8_fallback(precision: str, table: Mapping[str, float]) -> Optional[str]:
    """The entry a scaled-FP8 recipe missing from ``table`` reads instead: per-tensor fp8's (the same tensor
    cores), when the table has one; None for any other precision."""
    return "fp8" if precision.startswith("fp8_") and "fp8" in table else None


def ceiling_of(gpu: GpuSpec, precision: str, eta_max: float) -> float:
    """The best achievable matmul of ``precision`` as a fraction of its peak (1: none known).

    The MAMF search measured per-tensor FP8; a rowwise or blockwise recipe on the same tensor cores reaches
    that best in the ratio its large-GEMM efficiency bears to per-tensor FP8's (``fp8_recipes.py``)."""
    ceilings = gpu.gemm_ceiling_by_precision
    if precision in ceilings:
        return ceilings[precision]
    if fp8_fallback(precision, ceilings):
        fp8_eta = gpu.gemm_efficiency_by_precision.get("fp8", gpu.gemm_max_efficiency)
        return min(ceilings["fp8"], ceilings["fp8"] * eta_max / fp8_eta)  # never above the measured best
    return 1.0


def borrowed_efficiency(gpu: GpuSpec, precision: str) -> Optional[str]:
    """The format whose large-GEMM efficiency GEMMs at ``precision`` are priced at because no table measured
    this GPU's own kernels; None when the precision has its own (measured, or set by the user).

    A config without the precision's key borrows per-tensor fp8's (a scaled-FP8 recipe) or the default; a
    shipped one whose provenance says "no table for <p> = <q> ...: copied" (bench/fit_gemm.py) borrows q's,
    unless its value was changed from q's."""
    effs = gpu.gemm_efficiency_by_precision
    if precision not in effs:
        return fp8_fallback(precision, effs) or "gemm_max_efficiency"
    note = gpu.provenance.get("gemm_efficiency_by_precision", "")
    copied = re.search(rf"no table for [^:]*\b{re.escape(precision)} = (\w+)", note)
    if copied and effs.get(copied.group(1)) == effs[precision]:
        return copied.group(1)
    return None


@dataclass(frozen=True, slots=True)
class GemmCurve:
    """Per-GPU, per-precision constants, precomputed once so that pricing one GEMM is a few float ops."""

    precision: str
    peak_flops_per_s: float
    eta_max: float
    half_mn: float
    half_k: float
    fixed_time_s: float
    wave_exponent: float
    sms: int
    align: int  # elements per 16-byte tensor-core load
    align_eff: Dict[int, float]  # eta_align for each alignment below ``align``
    ceiling: float = 1.0  # the best achievable matmul (gpu.gemm_ceiling_by_precision)

    @classmethod
    def for_gpu(cls, gpu: GpuSpec, precision: str) -> "GemmCurve":
        if precision not in gpu.peak_tflops:
            raise KeyError(f"gpu {gpu.name} has no {precision} peak (peak_tflops: {sorted(gpu.peak_tflops)})")
        peak_tflops = gpu.peak_tflops[precision]
        if gpu.gemm_half_efficiency_k is None:  # one size term for every dimension and precision (A100 fit)
            half_k = gpu.gemm_half_efficiency_dim
        else:
            half_k = gpu.gemm_half_efficiency_k * peak_tflops / reference_peak_tflops(gpu)
        align = int(16 // ELEMENT_BYTES.get(precision, 4.0))
        align_eff: Dict[int, float] = {}
        a = align // 2
        while a >= 1:  # eta_align(a) = misaligned ** (log2(align / a) / log2(align)): 1 at a = align
            align_eff[a] = gpu.gemm_misaligned_efficiency ** (math.log2(align / a) / math.log2(align))
            a //= 2
        effs = gpu.gemm_efficiency_by_precision
        fallback = fp8_fallback(precision, effs)  # a scaled-FP8 recipe with no efficiency of its own: fp8's
        eta_max = effs.get(precision, effs[fallback] if fallback else gpu.gemm_max_efficiency)
        if precision in BLOCK_SCALED and borrowed_efficiency(gpu, precision):  # priced at another format's rate
            eta_max *= gpu.block_scaled_gemm_ratio
        return cls(precision=precision, peak_flops_per_s=peak_tflops * TFLOPS, eta_max=eta_max,
                   half_mn=gpu.gemm_half_efficiency_dim, half_k=half_k, fixed_time_s=gpu.gemm_fixed_time_s,
                   wave_exponent=gpu.gemm_wave_exponent, sms=gpu.num_sms, align=align, align_eff=align_eff,
                   ceiling=ceiling_of(gpu, precision, eta_max))

    def scaled(self, ratio: float) -> "GemmCurve":
        """This curve with its large-GEMM efficiency and its ceiling times ``ratio`` (another kernel on the same
        tensor cores: gpu.rowwise_cutlass_gemm_ratio)."""
        return replace(self, eta_max=self.eta_max * ratio, ceiling=self.ceiling * ratio)

    def efficiency(self, m: int, n: int, k: int, batch: int = 1, wave: bool = True) -> float:
        d, dk = self.half_mn, self.half_k
        eta = self.eta_max * (m / (m + d)) * (n / (n + d)) * (k / (k + dk))
        if wave:
            w = wave_efficiency(m, n, batch, self.sms)
            eta *= w if self.wave_exponent == 1.0 else w ** self.wave_exponent
        a = alignment_elements(m, n, k, widest=self.align)
        if a < self.align:
            eta *= self.align_eff[a]
        return eta if eta < self.ceiling else self.ceiling

    def compute_time_s(self, m: int, n: int, k: int, batch: int = 1) -> float:
        """Compute-bound time of one GEMM (no memory roofline, no kernel floor): what the tables measure."""
        return self.fixed_time_s + 2.0 * batch * m * n * k / (self.peak_flops_per_s * self.efficiency(m, n, k, batch))
