"""The share of per-tensor FP8's GEMM efficiency that PyTorch's own CUTLASS rowwise-scaled FP8 kernel reaches
(``gpu.rowwise_cutlass_gemm_ratio``), fitted on torchtitan's pairs of one job in per-tensor and rowwise FP8.

torchao's rowwise recipe multiplies with ``torch._scaled_mm`` and a scale per row. PyTorch runs that on cuBLASLt
only on Hopper with cuBLAS >= 12.9; otherwise on its own CUTLASS kernel (aten/src/ATen/native/cuda/Blas.cpp,
RowwiseScaledMM.cu): an output tile per CTA with no split-K or stream-K, and, on Hopper, without fast accumulation
(torchao turns it off for the input- and weight-gradient GEMMs) the plain warp-specialized or cooperative schedule
with its accumulator promotion. Every rowwise run in vtrain/data ran that kernel (June 2025 H100 nightly, August
2025 B200 build on CUDA 12.8); the lent H200's table (profiles/measured/h200/gemm_scaled.csv, torch 2.11 on CUDA
13.0) timed cuBLAS's, which is what ``gemm_efficiency_by_precision.fp8_rowwise`` holds.

No table times the CUTLASS kernel alone. The per-tensor partner of a pair does not depend on the ratio and shares
everything else the step does (communication, attention, power limit), so the measured step ratio prices the
kernel together with the rowwise casts vtrain models apart (vtrain.graph.blocks). Fitted on the Hopper pairs
(two jobs, with and without async TP); held out: the B200 pair (sm_100's variant of the kernel). Leave-one-job-out
on Hopper is reported beside the fit.

    python bench/fit_rowwise_kernel.py [--write]
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import date
from typing import Any, Dict, List, Sequence, Tuple

from vtrain.calibration.block_scaled import fit as golden_fit
from vtrain.calibration.block_scaled import pair_error
from vtrain.calibration.yaml_write import provenance_path, update_yaml
from vtrain.config.compose import CONF_DIR, compose, load_gpu_config, load_stack_config
from vtrain.validation.csv_io import MeasuredRow, read_measurements
from vtrain.validation.datasets import resolve_dataset, shipped_defaults
from vtrain.validation.run import measured_ms, simulate_row

FITTED_ARCH = "hopper"  # the pairs the ratio is fitted on; the others are held out
WRITTEN = {"hopper": ("h100_sxm",), "blackwell": ("b200",)}  # the configs the other GPUs of each inherit from
_KEY = ("model", "gpu", "num_gpus", "tp", "micro_batch", "global_batch", "seq_len", "stack", "recompute",
        "tp_comm_overlap")


@dataclass(frozen=True)
class Pair:
    """One job measured in per-tensor FP8 (``ref``) and rowwise FP8 (``low``): (row, workload, measured ms)."""

    ref: Tuple[MeasuredRow, Any, float]
    low: Tuple[MeasuredRow, Any, float]

    @property
    def architecture(self) -> str:
        return str(self.low[1].cluster.gpu.architecture)

    @property
    def job(self) -> str:
        r = self.low[0]
        return f"{r.get('gpu')} x{r.get('num_gpus')} {r.get('model')}"

    @property
    def label(self) -> str:
        async_tp = " async TP" if str(self.low[0].get("tp_comm_overlap")).lower() == "true" else ""
        return f"{self.job}{async_tp} fp8->fp8_rowwise (rows {self.ref[0].index}/{self.low[0].index})"


def error(pair: Pair, ratio: float) -> float:
    """log(predicted / measured) of the pair's step-time ratio (rowwise / per-tensor)."""
    return pair_error(pair, ratio, "rowwise_cutlass_gemm_ratio")


def load_pairs() -> List[Pair]:
    """Every per-tensor / rowwise pair of torchtitan's rows, as task=validate simulates them."""
    cfg = compose(["+cluster=h100x1024"], require=False)
    load_gpu = functools.lru_cache(None)(load_gpu_config)
    rows = list(read_measurements(resolve_dataset("torchtitan")))

    def sim(row: MeasuredRow) -> Tuple[MeasuredRow, Any, float]:
        w, _, _ = simulate_row(row, cfg, load_gpu, load_stack_config, shipped_defaults("torchtitan"), None)
        return row, w, measured_ms(row, w)[0]

    def key(r: MeasuredRow) -> Tuple[str, ...]:
        return tuple(str(r.get(k)).lower() for k in _KEY)

    per_tensor = {key(r): r for r in rows if r.get("precision") == "fp8"}
    return [Pair(sim(per_tensor[key(r)]), sim(r)) for r in rows
            if r.get("precision") == "fp8_rowwise" and key(r) in per_tensor]


def loss(pairs: Sequence[Pair], ratio: float) -> float:
    """Mean squared log error of the pairs' step ratios."""
    return sum(error(p, ratio) ** 2 for p in pairs) / max(1, len(pairs))


def fit(pairs: Sequence[Pair]) -> float:
    """The ratio in [0.3, 1] minimising :func:`loss` on ``pairs``."""
    return golden_fit(pairs, loss_fn=loss)


def mean_abs_pct(pairs: Sequence[Pair], ratio: float) -> float:
    return 100.0 * sum(abs(math.expm1(error(p, ratio))) for p in pairs) / max(1, len(pairs))


def report(pairs: Sequence[Pair], ratio: float, shipped: Dict[str, float]) -> List[str]:
    """The fit's table: the Hopper pairs in sample and leave-one-job-out, the held-out ones at the fitted ratio."""
    fitted = [p for p in pairs if p.architecture == FITTED_ARCH]
    jobs = sorted({p.job for p in fitted})
    held = {j: fit([p for p in fitted if p.job != j]) for j in jobs} if len(jobs) > 1 else {}
    out = [f"rowwise_cutlass_gemm_ratio = {ratio:.3f} fitted on {len(fitted)} {FITTED_ARCH} pairs of {len(jobs)} "
           f"jobs (shipped: {', '.join(f'{a} {v:.3f}' for a, v in sorted(shipped.items()))})",
           "pair (step ratio predicted/measured - 1)" + " " * 28 + "at 1.0  fitted  left out (ratio)"]
    for p in pairs:
        left = f"{math.expm1(error(p, held[p.job])) * 100:+6.1f}% ({held[p.job]:.3f})" if p.job in held else "(held)"
        out.append(f"  {p.label:66s} {math.expm1(error(p, 1.0)) * 100:+6.1f}% "
                   f"{math.expm1(error(p, ratio)) * 100:+6.1f}%  {left}")
    out.append(f"mean |step ratio error|: fitted pairs {mean_abs_pct(fitted, 1.0):.1f}% at 1.0 -> "
               f"{mean_abs_pct(fitted, ratio):.1f}%; held-out pairs {mean_abs_pct(_held(pairs), 1.0):.1f}% -> "
               f"{mean_abs_pct(_held(pairs), ratio):.1f}%")
    return out


def _held(pairs: Sequence[Pair]) -> List[Pair]:
    return [p for p in pairs if p.architecture != FITTED_ARCH]


def write(pairs: Sequence[Pair], ratio: float) -> List[str]:
    """Write ``ratio`` into the Hopper and Blackwell base configs with its provenance."""
    fitted = [p for p in pairs if p.architecture == FITTED_ARCH]
    prov = (f"fitted: the measured step ratios of {len(fitted)} {FITTED_ARCH} pairs of one job in per-tensor and "
            f"rowwise FP8 (torchao on PyTorch's CUTLASS rowwise kernel; rows "
            f"{', '.join(f'{p.ref[0].index}/{p.low[0].index}' for p in fitted)} of "
            f"{provenance_path(resolve_dataset('torchtitan'))}), leave-one-job-out reported; "
            f"vtrain.calibration.rowwise_kernel, {date.today().isoformat()}")
    out = []
    for arch, gpus in WRITTEN.items():
        note = prov if arch == FITTED_ARCH else (f"transferred from: the {FITTED_ARCH} fit (sm_100's variant of the "
                                                 f"same CUTLASS kernel; its B200 pair held out); {prov}")
        for gpu in gpus:
            update_yaml(CONF_DIR / "gpu" / f"{gpu}.yaml", {"rowwise_cutlass_gemm_ratio": round(ratio, 3)},
                        {"rowwise_cutlass_gemm_ratio": note})
            out.append(f"wrote rowwise_cutlass_gemm_ratio={ratio:.3f} into gpu/{gpu}")
    return out
