"""The GEMM and fused-attention constants of every Hopper/Blackwell gpu/ config, from the fits.

Measured: H100 (bf16 table) and B200 (bf16 + fp8 tables). Every other GPU and precision is transferred
from its nearest measured sibling, with the large-GEMM efficiency scaled by the ratio of the two GPUs'
best achievable matmul (MAMF table: each as a fraction of its own peak) where that table has both:

    eta_p(target) = eta_q(source) · MAMF_eff(target, p) / MAMF_eff(source, q)

The shape constants (size terms, fixed time, wave exponent) are the source's; the SM count and peaks
are the target's own, so wave quantization and the k size term follow the target's datasheet.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from vtrain.calibration.gemm_tables import DATA, GemmParams, MamfRow
from vtrain.calibration.yaml_write import Value

DECOMPOSITION_TABLE = "mleng_llama31_8b_deepspeed_h200_vs_b200.csv"
# FlashAttention FLOPs here: backward 2.5x forward (5 GEMMs vs 2, Dao 2023); the source's model FLOPs
# count 3x forward for fwd+bwd (6·s²·h causal). Our time = 3.5 F / (peak·eff) = the measured 3 F / TFLOP/s.
FLASH_FLOP_RATIO = 3.5 / 3.0


@dataclass(frozen=True)
class Transfer:
    """How one gpu/ config gets its constants: from which fitted GPU, scaled by which MAMF rows."""

    gpu: str  # gpu/ config name
    source: str  # the fitted GPU (H100 | B200)
    mamf: Optional[str]  # this GPU's MAMF accelerator name, if measured
    source_mamf: str
    precisions: Tuple[str, ...]
    flash_source: str  # the GPU of the step decomposition (H200 | B200)
    reason: str
    low_precision_from: Dict[str, str] = field(default_factory=dict)  # precision -> precision it copies


MEASURED = ("h100_sxm", "b200")
HOPPER = ("bf16", "fp16", "fp8", "fp8_rowwise", "fp8_blockwise")
BLACKWELL = ("bf16", "fp16", "fp8", "fp8_blockwise", "mxfp8", "nvfp4")
SAME_RATE = {"fp16": "bf16", "fp8_rowwise": "fp8", "fp8_blockwise": "fp8", "mxfp8": "fp8", "nvfp4": "fp8"}
# the fitted GPUs whose transfers take a side-by-side FP8-recipe measurement (vtrain/calibration/fp8_recipes.py):
# Hopper, sm_90, where H100, H200 and H800 run the same cuBLASLt and CUTLASS kernels
RECIPE_SOURCES = ("H100",)

TRANSFERS: List[Transfer] = [
    Transfer("h100_sxm", "H100", "NVIDIA H100 SXM", "NVIDIA H100 SXM", HOPPER, "H200",
             "measured (bf16); fp8 table rejected (above the MAMF ceiling)", SAME_RATE),
    Transfer("h200", "H100", "NVIDIA H200 SXM", "NVIDIA H100 SXM", HOPPER, "H200",
             "H100 silicon and clocks with HBM3e (MAMF: 'H200 is the same' for bf16)", SAME_RATE),
    Transfer("h800", "H100", None, "NVIDIA H100 SXM", HOPPER, "H200",
             "H100 SXM silicon; only NVLink (400 GB/s) and FP64 are cut", SAME_RATE),
    Transfer("b200", "B200", "NVIDIA B200 SXM", "NVIDIA B200 SXM", BLACKWELL, "B200",
             "measured (bf16, fp8)", SAME_RATE),
    Transfer("b300", "B200", "NVIDIA B300 SXM", "NVIDIA B200 SXM", BLACKWELL, "B200",
             "Blackwell Ultra: B200's tensor cores at bf16/fp8, 160 SMs", SAME_RATE),
    Transfer("gb200", "B200", "NVIDIA GB200 SXM", "NVIDIA B200 SXM", BLACKWELL, "B200",
             "B200 silicon at GB200's power and clocks", SAME_RATE),
    Transfer("gb300", "B200", "NVIDIA B300 SXM", "NVIDIA B200 SXM", BLACKWELL, "B200",
             "B300 silicon in an NVL72 rack (no GB300 matmul measurement: B300's)", SAME_RATE),
]


def read_flash_tflops(folder: Optional[Path] = None) -> Dict[str, Tuple[float, str]]:
    """GPU -> (attention-bucket TFLOP/s, attention kernel) of the 8K step decomposition."""
    out: Dict[str, Tuple[float, str]] = {}
    with ((folder or DATA) / DECOMPOSITION_TABLE).open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["table"] == "8k_step_decomposition" and r["bucket"].startswith("attention"):
                out[r["gpu"]] = (float(r["tflops_per_gpu"]), r["attention"])
    return out


def flash_efficiency(tflops: float, bf16_peak_tflops: float) -> float:
    """Fraction of the bf16 peak at which our FlashAttention op FLOPs run to take the measured time."""
    return tflops * FLASH_FLOP_RATIO / bf16_peak_tflops


def derive(tr: Transfer, fitted: Dict[str, Dict[str, GemmParams]], mamf: Dict[Tuple[str, str], MamfRow],
           peaks: Dict[str, float], flash: Dict[str, Tuple[float, str]], flash_peaks: Dict[str, float],
           date: str, fitted_on: Dict[str, str], recipe_ratios: Optional[Dict[str, Tuple[float, str]]] = None
           ) -> Tuple[Dict[str, Value], Dict[str, str]]:
    """(YAML values, provenance) of the GEMM/attention constants of ``tr.gpu``; ``flash_peaks``: the bf16
    peak of each GPU the step decomposition was measured on; ``recipe_ratios``: FP8 recipe -> (its eta over
    per-tensor fp8's, where measured), applied to the GPUs of the source it was measured on (Hopper)."""
    src = fitted[tr.source]
    bf16 = src["bf16"]
    eta: Dict[str, float] = {}
    notes: List[str] = []
    target = tr.mamf or tr.source_mamf
    for p in tr.precisions:
        if p not in peaks:
            continue
        base = tr.low_precision_from.get(p, p)
        src_eta, src_key = (src[base], (tr.source_mamf, base)) if base in src else (bf16, (tr.source_mamf, "bf16"))
        value = src_eta.eta_max
        if (target, base) in mamf and (target, base) != src_key:
            ratio = mamf[(target, base)].efficiency / mamf[src_key].efficiency
            value *= ratio
            note = f"{base}: {src_key[1]} x MAMF {mamf[(target, base)].efficiency:.3f}/{mamf[src_key].efficiency:.3f}"
            if note not in notes:
                notes.append(note)
        eta[p] = round(value, 4)
    measured_recipes: Dict[str, str] = {}
    if tr.source in RECIPE_SOURCES and "fp8" in eta:
        for p, (ratio, source) in (recipe_ratios or {}).items():
            if p in eta:
                eta[p] = round(eta["fp8"] * ratio, 4)
                measured_recipes[p] = f"{p} = fp8 x {ratio:.3f} ({source})"
    flash_tflops, kernel = flash[tr.flash_source]
    flash_eff = flash_efficiency(flash_tflops, flash_peaks[tr.flash_source])
    flash_note = ""
    if (target, "bf16") in mamf and (target, "bf16") != (tr.source_mamf, "bf16"):
        flash_ratio = mamf[(target, "bf16")].efficiency / mamf[(tr.source_mamf, "bf16")].efficiency
        flash_eff *= flash_ratio
        flash_note = f", x MAMF bf16 ratio {flash_ratio:.3f}"
    values: Dict[str, Value] = {
        "gemm_max_efficiency": eta["bf16"],
        "gemm_efficiency_by_precision": eta,
        "gemm_half_efficiency_dim": round(bf16.half_mn, 2),
        "gemm_half_efficiency_k": round(bf16.half_k, 1),
        "gemm_fixed_time_s": float(f"{bf16.fixed_time_s:.3g}"),
        "gemm_wave_exponent": round(bf16.wave_exponent, 3),
        "flash_attention_efficiency": round(flash_eff, 4),
        # unfused batched attention GEMMs: the table's batched GEMMs are fitted without a factor
        "attention_efficiency": 1.0,
    }
    measured = tr.gpu in MEASURED
    shape = (f"fitted: {fitted_on[tr.source]}, bench/fit_gemm.py, {date}" if measured
             else f"transferred from: {tr.source.lower()} fit ({tr.reason}), bench/fit_gemm.py, {date}")
    eta_note = shape if not notes else shape + "; eta scaled by the best-matmul ratio (" + "; ".join(notes) + \
        ", vtrain/data/modern_gpus/mleng_mamf_max_achievable_matmul.csv)"
    same = ", ".join(f"{p} = {tr.low_precision_from[p]}" for p in eta
                     if p in tr.low_precision_from and p not in measured_recipes)
    recipes = "; ".join(measured_recipes.values())
    prov = {
        "gemm_max_efficiency": eta_note,
        "gemm_efficiency_by_precision": eta_note + (f"; no table for {same} (same tensor-core rate): copied"
                                                    if same else "") + (f"; {recipes}" if recipes else ""),
        "gemm_half_efficiency_dim": shape,
        "gemm_half_efficiency_k": shape,
        "gemm_fixed_time_s": shape,
        "gemm_wave_exponent": shape,
        "flash_attention_efficiency": (f"{'fitted' if tr.flash_source.lower() == tr.gpu else 'transferred from'}: "
                                       f"{tr.flash_source} {kernel}, Llama-3.1-8B 8K step decomposition, attention "
                                       f"bucket {flash_tflops:.0f} TFLOP/s x 3.5/3 (our backward FLOP count) / "
                                       f"bf16 peak "
                                       f"(vtrain/data/modern_gpus/{DECOMPOSITION_TABLE}){flash_note}, one measurement, "
                                       f"{date}"),
        "attention_efficiency": f"set to 1: the batched GEMMs (b = 2, 4) of {fitted_on[tr.source]} are fitted "
                                f"with no factor of their own, {date}",
    }
    return values, prov
