"""The GEMM and fused-attention constants of every Hopper/Blackwell gpu/ config, from the fits.

Measured: H100 (bf16 table) and B200 (bf16 + fp8 tables). Every other GPU and precision is transferred
from its nearest measured sibling, with the large-GEMM efficiency scaled by the ratio of the two GPUs'
best achievable matmul (MAMF table: each as a fraction of its own peak) where that table has both:

    eta_p(target) = eta_q(source) · MAMF_eff(target, p) / MAMF_eff(source, q)

Blackwell Ultra (B300, GB300) moves the source's rate by the power-limited clock law instead
(``Transfer.by_power``, :func:`power_limited_rate_ratio`): the same tensor cores per SM and clock, the rate the
source's times (SMs ratio)^(2/3) x (dynamic power ratio)^(1/3), as parts under their board power limit run their
GEMMs. The law puts GB200 at 1.063x B200 where GB200's own MAMF reads 1.044x (bf16) and 1.053x (fp8); B300's one
MAMF point (1.014x, 0.977x) is contradicted by the same-plan pairs of the Megatron-Bridge tables (B300 1.11x B200,
GB300 1.18-1.25x GB200: ``bench/gpu_pairs.py``; docs/accuracy.md, "GB300 reads slow at every precision").

The shape constants (size terms, fixed time, wave exponent) are the source's; the SM count and peaks
are the target's own, so wave quantization and the k size term follow the target's datasheet.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
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
    # the source's rate moved to this part's SMs and power (power_limited_rate_ratio), not by MAMF ratios
    by_power: bool = False
    flash_factor: float = 1.0  # fused attention's own gain on this part (Blackwell Ultra's doubled SFU exp rate)


MEASURED = ("h100_sxm", "b200")
HOPPER = ("bf16", "fp16", "fp8", "fp8_rowwise", "fp8_blockwise")
BLACKWELL = ("bf16", "fp16", "fp8", "fp8_blockwise", "mxfp8", "nvfp4")
SAME_RATE = {"fp16": "bf16", "fp8_rowwise": "fp8", "fp8_blockwise": "fp8", "mxfp8": "fp8", "nvfp4": "fp8"}
# the fitted GPUs whose transfers take a side-by-side FP8-recipe measurement (vtrain/calibration/fp8_recipes.py):
# Hopper, sm_90, where H100, H200 and H800 run the same cuBLASLt and CUTLASS kernels
RECIPE_SOURCES = ("H100",)

# Blackwell Ultra's fused attention per bf16 step over Blackwell's at one tensor-core rate: its doubled SFU exp
# rate (MUFU.EX2 2x; NVIDIA blog "Making Softmax More Efficient with NVIDIA Blackwell Ultra", 2026: attention forward
# in FP8 +35% on GB300 over GB200). A serial MMA + exposed-exp model t = a + b -> a + b/2 gives exp = 1.08x the FP8
# MMA time on GB200, so a bf16 forward (MMA 2x) runs 1.21x and the backward (2.5x the MMA, one exp per score) 1.10x
# faster: 1.128 per step at 1 : 2.5 FLOPs (first principles from the vendor figure, not fitted to rows)
ULTRA_EXP = 1.128


def power_limited_rate_ratio(sms: float, tdp_w: float, idle_w: float, src_sms: float, src_tdp_w: float,
                             src_idle_w: float) -> float:
    """A part's tensor-core rate over the source's when both run their GEMMs at the board power limit: the
    dynamic power (TDP less the idle floor) goes as SMs x f x V^2 with V ~ f at the top of the DVFS curve, so
    the clock goes as ((P - P_idle) / SMs)^(1/3) and the rate, SMs x f, as SMs^(2/3) x (P - P_idle)^(1/3)
    (gpu.power_clock_fraction's law, with the SM count)."""
    return (sms / src_sms) ** (2.0 / 3.0) * ((tdp_w - idle_w) / (src_tdp_w - src_idle_w)) ** (1.0 / 3.0)


TRANSFERS: List[Transfer] = [
    Transfer("h100_sxm", "H100", "NVIDIA H100 SXM", "NVIDIA H100 SXM", HOPPER, "H200",
             "measured (bf16); fp8 table rejected (above the MAMF ceiling)", SAME_RATE),
    Transfer("h200", "H100", "NVIDIA H200 SXM", "NVIDIA H100 SXM", HOPPER, "H200",
             "H100 silicon and clocks with HBM3e (MAMF: 'H200 is the same' for bf16)", SAME_RATE),
    Transfer("h800", "H100", None, "NVIDIA H100 SXM", HOPPER, "H200",
             "H100 SXM silicon; only NVLink (400 GB/s) and FP64 are cut", SAME_RATE),
    Transfer("b200", "B200", "NVIDIA B200 SXM", "NVIDIA B200 SXM", BLACKWELL, "B200",
             "measured (bf16, fp8)", SAME_RATE),
    Transfer("b300", "B200", None, "NVIDIA B200 SXM", BLACKWELL, "B200",
             "Blackwell Ultra: B200's tensor cores at 160 SMs and 1,100 W, by the power-limited clock law; B300's own "
             "MAMF point unused", SAME_RATE, by_power=True, flash_factor=ULTRA_EXP),
    Transfer("gb200", "B200", "NVIDIA GB200 SXM", "NVIDIA B200 SXM", BLACKWELL, "B200",
             "B200 silicon at GB200's power and clocks", SAME_RATE),
    Transfer("gb300", "B200", None, "NVIDIA B200 SXM", BLACKWELL, "B200",
             "B300 silicon at 160 SMs and 1,400 W, by the power-limited clock law (no GB300 matmul measurement)",
             SAME_RATE, by_power=True, flash_factor=ULTRA_EXP),
]


def by_power(tr: Transfer) -> Transfer:
    """``tr`` moved by the power-limited clock law from its source (no MAMF ratio; its own MAMF point, if any, is
    then a check, not an input); a by_power transfer unchanged."""
    if tr.by_power:
        return tr
    return replace(tr, by_power=True, mamf=None,
                   reason=f"{tr.gpu}'s SMs and board power by the power-limited clock law; its own MAMF point unused")


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


# (the law's rate ratio, the source's peaks) for a Transfer with by_power
Power = Tuple[float, Dict[str, float]]


def _etas(tr: Transfer, src: Dict[str, GemmParams], mamf: Dict[Tuple[str, str], MamfRow], peaks: Dict[str, float],
          power: Optional[Power], notes: List[str]) -> Dict[str, float]:
    """Each precision's large-GEMM efficiency (of this part's own peak): the source's, moved by the MAMF ratio
    or, for a by_power transfer, by the power law's rate ratio and the two parts' peaks; ``notes`` gets how."""
    eta: Dict[str, float] = {}
    target = tr.mamf or tr.source_mamf
    for p in tr.precisions:
        if p not in peaks:
            continue
        base = tr.low_precision_from.get(p, p)
        src_eta, src_key = (src[base], (tr.source_mamf, base)) if base in src else (src["bf16"],
                                                                                   (tr.source_mamf, "bf16"))
        value = src_eta.eta_max
        if power is not None:
            value *= power[0] * power[1][base] / peaks[base]
            note = f"{base}: {src_key[1]} x rate {power[0]:.4f} x peak {power[1][base]:.0f}/{peaks[base]:.0f}"
        elif (target, base) in mamf and (target, base) != src_key:
            value *= mamf[(target, base)].efficiency / mamf[src_key].efficiency
            note = f"{base}: {src_key[1]} x MAMF {mamf[(target, base)].efficiency:.3f}/{mamf[src_key].efficiency:.3f}"
        else:
            note = ""
        if note and note not in notes:
            notes.append(note)
        eta[p] = round(value, 4)
    return eta


def power_ceilings(tr: Transfer, mamf: Dict[Tuple[str, str], MamfRow], peaks: Dict[str, float], power: Power
                   ) -> Dict[str, float]:
    """gemm_ceiling_by_precision of a by_power transfer: the source's best measured matmul (MAMF) at the law's
    rate, as a fraction of this part's peak (bf16, fp8 and the formats that copy them)."""
    out: Dict[str, float] = {}
    for p in ("bf16", "fp16", "fp8", "mxfp8"):
        base = tr.low_precision_from.get(p, p)
        if p in peaks and (tr.source_mamf, base) in mamf:
            out[p] = round(mamf[(tr.source_mamf, base)].tflops * power[0] / peaks[base], 3)
    return out


def derive(tr: Transfer, fitted: Dict[str, Dict[str, GemmParams]], mamf: Dict[Tuple[str, str], MamfRow],
           peaks: Dict[str, float], flash: Dict[str, Tuple[float, str]], flash_peaks: Dict[str, float],
           date: str, fitted_on: Dict[str, str], recipe_ratios: Optional[Dict[str, Tuple[float, str]]] = None,
           power: Optional[Power] = None) -> Tuple[Dict[str, Value], Dict[str, str]]:
    """(YAML values, provenance) of the GEMM/attention constants of ``tr.gpu``; ``flash_peaks``: the bf16
    peak of each GPU the step decomposition was measured on; ``recipe_ratios``: FP8 recipe -> (its eta over
    per-tensor fp8's, where measured), applied to the GPUs of the source it was measured on (Hopper);
    ``power``: (rate ratio, source peaks) of a ``by_power`` transfer (:func:`power_limited_rate_ratio`)."""
    if tr.by_power and power is None:
        raise ValueError(f"{tr.gpu}: a by_power transfer needs the power law's rate ratio")
    src = fitted[tr.source]
    bf16 = src["bf16"]
    notes: List[str] = []
    eta = _etas(tr, src, mamf, peaks, power if tr.by_power else None, notes)
    measured_recipes: Dict[str, str] = {}
    if tr.source in RECIPE_SOURCES and "fp8" in eta:
        for p, (ratio, source) in (recipe_ratios or {}).items():
            if p in eta:
                eta[p] = round(eta["fp8"] * ratio, 4)
                measured_recipes[p] = f"{p} = fp8 x {ratio:.3f} ({source})"
    flash_tflops, kernel = flash[tr.flash_source]
    flash_eff = flash_efficiency(flash_tflops, flash_peaks[tr.flash_source])
    flash_note = ""
    target = tr.mamf or tr.source_mamf
    if tr.by_power and power is not None:
        flash_eff *= power[0] * flash_peaks[tr.flash_source] / peaks["bf16"]
        flash_note = f", x rate {power[0]:.4f} x bf16 peak {flash_peaks[tr.flash_source]:.0f}/{peaks['bf16']:.0f}"
    elif (target, "bf16") in mamf and (target, "bf16") != (tr.source_mamf, "bf16"):
        flash_ratio = mamf[(target, "bf16")].efficiency / mamf[(tr.source_mamf, "bf16")].efficiency
        flash_eff *= flash_ratio
        flash_note = f", x MAMF bf16 ratio {flash_ratio:.3f}"
    if tr.flash_factor != 1.0:
        flash_eff *= tr.flash_factor
        flash_note += (f", x {tr.flash_factor} for Blackwell Ultra's doubled SFU exp rate (MUFU.EX2 2x; NVIDIA: FP8 "
                       f"attention forward +35% on GB300; a serial MMA + exp model, vtrain/calibration/gpu_derive.py "
                       f"ULTRA_EXP)")
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
    if tr.by_power and power is not None:
        values["gemm_ceiling_by_precision"] = power_ceilings(tr, mamf, peaks, power)
    return values, _provenance(tr, notes, measured_recipes, eta, flash_tflops, kernel, flash_note, date, fitted_on)


def _provenance(tr: Transfer, notes: List[str], measured_recipes: Dict[str, str], eta: Dict[str, float],
                flash_tflops: float, kernel: str, flash_note: str, date: str, fitted_on: Dict[str, str]
                ) -> Dict[str, str]:
    measured = tr.gpu in MEASURED
    shape = (f"fitted: {fitted_on[tr.source]}, bench/fit_gemm.py, {date}" if measured
             else f"transferred from: {tr.source.lower()} fit ({tr.reason}), bench/fit_gemm.py, {date}")
    how = ("the power-limited clock law: SMs^(2/3) x (TDP - idle)^(1/3), vtrain/calibration/gpu_derive.py"
           if tr.by_power else "the best-matmul ratio")
    table = "" if tr.by_power else ", vtrain/data/modern_gpus/mleng_mamf_max_achievable_matmul.csv"
    eta_note = shape if not notes else shape + f"; eta scaled by {how} (" + "; ".join(notes) + table + ")"
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
    if tr.by_power:
        prov["gemm_ceiling_by_precision"] = (f"transferred from: {tr.source_mamf}'s best achievable matmul "
                                             f"(vtrain/data/modern_gpus/mleng_mamf_max_achievable_matmul.csv) x the "
                                             f"power-limited clock law's rate ratio, / this part's peak, {date}")
    return prov
