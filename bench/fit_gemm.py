"""Fit the GEMM curve of H100 and B200 to XLA's measured GEMM tables; print how well it reproduces them.

    python bench/fit_gemm.py            # fit, cross-validate, cross-check; print the figures
    python bench/fit_gemm.py --write    # ... and write the constants into conf/gpu/*.yaml (Hopper, Blackwell)
    python bench/fit_gemm.py --scaled profiles/measured/h200/gemm_scaled.csv   # FP8 recipes from a side-by-side table

Without ``--scaled``, ``profiles/measured/h200/gemm_scaled.csv`` is read when it exists (bench/gpu_run.sh writes it:
``python -m vtrain.profiler.scaled_gemm``): each FP8 recipe's eta relative to per-tensor fp8 on Hopper
(vtrain/calibration/fp8_recipes.py). With no such table, fp8_rowwise copies fp8's eta, as before it was priced.

Per GPU x precision: median and 90th-percentile |error| of the kernel time, in sample and held out
(leave-one-k-out, -m-, -n-, -b-: refit without every shape of that value, predict them); the
run-to-run / software spread of the same shapes in earlier measurements (history table); the
best-achievable-matmul (MAMF) cross-check of the fitted large-GEMM efficiency. H100 fp8 rows above the
1,979 TFLOP/s datasheet peak are rejected; the rest is contradicted by the MAMF search (see below), so
H100 fp8 uses the bf16 curve with eta scaled by the MAMF fp8/bf16 ratio, a transfer checked on B200.
"""
from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from vtrain.calibration.fp8_recipes import ScaledTable, fit_recipes, read_scaled_table
from vtrain.calibration.gemm_tables import (
    GemmParams,
    GemmTable,
    Hardware,
    MamfRow,
    errors_pct,
    fit_eta_only,
    fit_joint,
    history_commits,
    leave_one_out_pct,
    mamf_ratio,
    percentile,
    predict_s,
    read_gemm_table,
    read_mamf,
    run_spread_pct,
)
from vtrain.calibration.gpu_derive import TRANSFERS, derive, power_limited_rate_ratio, read_flash_tflops
from vtrain.calibration.yaml_write import provenance_path, update_yaml
from vtrain.config.build import gpu_spec
from vtrain.config.compose import CONF_DIR, load_gpu_config
from vtrain.cost.gemm import GemmCurve
from vtrain.cost.profile_io import default_profiles_root
from vtrain.errors import VtrainError
from vtrain.io.args import ArgumentParser

SCALED_DEFAULT = default_profiles_root() / "measured" / "h200" / "gemm_scaled.csv"
GPUS = {"H100": ("h100_sxm", "NVIDIA H100 SXM", ("bf16",)), "B200": ("b200", "NVIDIA B200 SXM", ("bf16", "fp8"))}
TABLE = "vtrain/data/modern_gpus/xla_gemm_perf_table_h100_b200.csv"
FITTED_ON = {"H100": f"XLA GEMM table sm_90 bf16, 375 shapes ({TABLE})",
             "B200": f"XLA GEMM table sm_100 bf16 + fp8 e4m3, 750 shapes ({TABLE})"}


def stats(e: np.ndarray) -> str:
    return f"median {np.median(e):5.1f}%  p90 {percentile(e, 90):5.1f}%  (n={len(e)})"


def hardware(gpu_name: str, precision: str) -> Hardware:
    g = gpu_spec(load_gpu_config(gpu_name))
    return Hardware(g.peak_tflops[precision], g.peak_tflops["bf16"], g.num_sms)


def mamf_check(label: str, gpu_name: str, precision: str, row_key: tuple, mamf: dict) -> str:
    row = mamf[row_key]
    curve = GemmCurve.for_gpu(gpu_spec(load_gpu_config(gpu_name)), precision)
    t = curve.compute_time_s(row.m, row.n, row.k)
    pred = 2.0 * row.m * row.n * row.k / t / 1e12
    return (f"  {label:16s} {row.m}x{row.n}x{row.k}: measured {row.tflops:7.1f} TFLOP/s "
            f"({row.efficiency:.1%} of {row.theoretical_tflops:.0f}), model {pred:7.1f} ({pred / row.tflops - 1:+.1%})")


def hopper_table(path: Path) -> ScaledTable:
    """The side-by-side table at ``path``, refused (one line) unless it was measured on a Hopper GPU."""
    table = read_scaled_table(path)
    hopper = any(name in table.device for name in ("H100", "H200", "H800", "H20"))  # sm_90 parts' CUDA names
    if not hopper or table.gpu not in ("h100_sxm", "h200", "h800"):
        raise VtrainError(f"{path}: measured on {table.device} for gpu={table.gpu}, not a Hopper GPU")
    return table


def scaled_recipes(path: Path, table: ScaledTable, shape: GemmParams, xla_bf16: GemmTable
                   ) -> Dict[str, Tuple[float, str]]:
    """Print the FP8-recipe fit of a side-by-side table; recipe -> (eta ratio to per-tensor fp8, source)."""
    hw = hardware(table.gpu, "fp8")
    fit = fit_recipes(table, shape, hw)
    print(f"\nFP8 recipes side by side ({path}: {table.device}, torch {table.torch_version}; the H100 curve "
          f"shape, eta fitted per recipe and accumulation on the shapes >= 4096^3, median |error| over all):")
    for (recipe, fast), eta in sorted(fit.eta.items()):
        print(f"  {recipe:14s} fast_accum={int(fast)}  eta {eta:.3f} (on {fit.fitted_rows[(recipe, fast)]})  "
              f"median |error| {fit.median_error_pct[(recipe, fast)]:.1f}%  "
              f"(n={len(table.tables[(recipe, fast)].time_s)})")
    own_bf16 = table.tables.get(("bf16", False))
    if own_bf16 is not None:
        xla = {(m, n, k): t for b, m, n, k, t in zip(xla_bf16.b, xla_bf16.m, xla_bf16.n, xla_bf16.k, xla_bf16.time_s)
               if b == 1}
        r = [xla[s] / t for s, t in zip(zip(own_bf16.m, own_bf16.n, own_bf16.k), own_bf16.time_s) if s in xla]
        if r:
            print(f"  bf16 vs the XLA H100 table at its {len(r)} single-matrix shapes: median time ratio "
                  f"XLA/this {float(np.median(r)):.3f}")
    out: Dict[str, Tuple[float, str]] = {}
    source = f"measured on {table.device} side by side with per-tensor fp8, {provenance_path(path)}"
    for recipe, ratio in fit.ratio.items():
        print(f"  {recipe}: effective eta / per-tensor fp8's (torchao's accumulation per GEMM) {ratio:.3f}; "
              f"median time ratio over the shapes >= 4096^3 {fit.shape_ratio.get(recipe, float('nan')):.3f}")
        out[recipe] = (ratio, source)
    return out


def _fit_gpus() -> Tuple[Dict[str, Dict[str, GemmParams]], Dict[str, Dict[str, GemmTable]]]:
    """Each GPU's curve fitted jointly over its precisions, printed with in-sample and leave-one-out errors and
    the spread against earlier measurements of the same table."""
    fitted: Dict[str, Dict[str, GemmParams]] = {}
    tables: Dict[str, Dict[str, GemmTable]] = {}
    print("GEMM curve fit (kernel time; errors |predicted/measured - 1|)")
    for gpu, (name, mamf_name, precisions) in GPUS.items():
        hws = [hardware(name, p) for p in precisions]
        tabs = [read_gemm_table(gpu, p, hw.peak_tflops) for p, hw in zip(precisions, hws)]
        tables[gpu] = dict(zip(precisions, tabs))
        params = fit_joint(tabs, hws)
        fitted[gpu] = params
        shape = params["bf16"]
        print(f"\n{gpu} ({name}): d_mn={shape.half_mn:.1f}  d_k(bf16 rate)={shape.half_k:.0f}  "
              f"t0={shape.fixed_time_s * 1e6:.2f} us  wave exponent={shape.wave_exponent:.3f}  "
              + "  ".join(f"eta_max[{p}]={params[p].eta_max:.3f}" for p in precisions))
        cv = {dim: leave_one_out_pct(tabs, hws, dim) for dim in ("k", "m", "n", "b")}
        for i, (p, t, hw) in enumerate(zip(precisions, tabs, hws)):
            e = errors_pct(predict_s(params[p], t, hw), t.time_s)
            rejected = f"   rejected above peak: {t.rejected}" if t.rejected else ""
            print(f"  {p:5s} in sample      {stats(e)}{rejected}")
            for dim, errs in cv.items():
                print(f"  {p:5s} leave-one-{dim}-out {stats(errs[i])}")
        for commit, date, g in history_commits():
            if g == gpu:
                old = read_gemm_table(gpu, "bf16", 1e9, name="xla_gemm_perf_table_history.csv", commit=commit)
                print(f"  bf16  spread vs the {date} measurement ({commit[:8]}): "
                      f"median {run_spread_pct(tabs[0], old):.1f}%")
    return fitted, tables


def power_law(gpu_name: str, source_name: str) -> Tuple[float, Dict[str, float]]:
    """(the power-limited clock law's rate ratio of ``gpu_name`` over ``source_name``, the source's peaks)."""
    g, s = gpu_spec(load_gpu_config(gpu_name)), gpu_spec(load_gpu_config(source_name))
    return power_limited_rate_ratio(g.num_sms, g.tdp_w, g.idle_w, s.num_sms, s.tdp_w, s.idle_w), dict(s.peak_tflops)


def _law_checks(mamf: Dict[Tuple[str, str], MamfRow]) -> None:
    """The power law's rate ratio over B200 beside each part's own best matmul (MAMF) over B200's, where measured."""
    print("\npower-limited clock law vs best matmul (rate over B200's: law | MAMF bf16, fp8):")
    for gpu_name, acc in (("gb200", "NVIDIA GB200 SXM"), ("b300", "NVIDIA B300 SXM"), ("gb300", None)):
        law = power_law(gpu_name, "b200")[0]
        got = [f"{mamf[(acc, p)].tflops / mamf[('NVIDIA B200 SXM', p)].tflops:.3f}" for p in ("bf16", "fp8")
               if acc is not None and (acc, p) in mamf]
        print(f"  {gpu_name:6s} law {law:.3f} | MAMF {', '.join(got) or 'not measured'}")


def _mamf_checks(mamf: Dict[Tuple[str, str], MamfRow]) -> None:
    """The gpu/ configs as they are now against the best matmul of MAMF's brute-force shape search."""
    print("\nMAMF cross-check (best matmul of a brute-force shape search; model: the gpu/ configs as they are now):")
    for label, gpu_name, precision, key in [
            ("h100_sxm bf16", "h100_sxm", "bf16", ("NVIDIA H100 SXM", "bf16")),
            ("h100_sxm fp8", "h100_sxm", "fp8", ("NVIDIA H100 SXM", "fp8")),
            ("h200 fp8", "h200", "fp8", ("NVIDIA H200 SXM", "fp8")),
            ("b200 bf16", "b200", "bf16", ("NVIDIA B200 SXM", "bf16")),
            ("b200 fp8", "b200", "fp8", ("NVIDIA B200 SXM", "fp8")),
            ("b300 bf16", "b300", "bf16", ("NVIDIA B300 SXM", "bf16")),
            ("gb200 bf16", "gb200", "bf16", ("NVIDIA GB200 SXM", "bf16")),
            ("gb200 fp8", "gb200", "fp8", ("NVIDIA GB200 SXM", "fp8"))]:
        print(mamf_check(label, gpu_name, precision, key, mamf))


def main(argv: List[str]) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the constants into conf/gpu/*.yaml")
    ap.add_argument("--scaled", type=Path, default=None,
                    help=f"a Hopper FP8-recipe table (python -m vtrain.profiler.scaled_gemm; default {SCALED_DEFAULT} "
                         "if it exists)")
    args = ap.parse_args(argv)
    scaled = args.scaled or (SCALED_DEFAULT if SCALED_DEFAULT.is_file() else None)
    try:  # checked before the minutes of fitting
        scaled_table = hopper_table(scaled) if scaled else None
    except VtrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    mamf = read_mamf()
    fitted, tables = _fit_gpus()
    # H100 fp8: what the table says, and the transfer we use instead (checked on B200 first)
    print("\nfp8 transfer check on B200 (bf16 curve, d_k scaled by the peak ratio, eta from ...):")
    b_hw = hardware("b200", "fp8")
    b_bf16 = fit_joint([tables["B200"]["bf16"]], [hardware("b200", "bf16")])["bf16"]
    b_fp8 = tables["B200"]["fp8"]
    refit = fit_eta_only(b_bf16, b_fp8, b_hw)
    ratio_b = mamf_ratio(mamf, ("NVIDIA B200 SXM", "fp8"), ("NVIDIA B200 SXM", "bf16"))
    by_mamf = GemmParams(b_bf16.eta_max * ratio_b, b_bf16.half_mn, b_bf16.half_k, b_bf16.fixed_time_s,
                         b_bf16.wave_exponent)
    print(f"  ... refitted to the fp8 table (eta {refit.eta_max:.3f}):    "
          f"{stats(errors_pct(predict_s(refit, b_fp8, b_hw), b_fp8.time_s))}")
    print(f"  ... bf16 eta x MAMF fp8/bf16 {ratio_b:.3f} (eta {by_mamf.eta_max:.3f}): "
          f"{stats(errors_pct(predict_s(by_mamf, b_fp8, b_hw), b_fp8.time_s))}")
    h_hw = hardware("h100_sxm", "fp8")
    h_fp8 = read_gemm_table("H100", "fp8", h_hw.peak_tflops)
    ceiling = mamf[("NVIDIA H100 SXM", "fp8")].tflops
    over = int((h_fp8.flops / h_fp8.time_s > ceiling * 1e12).sum())
    ratio_h = mamf_ratio(mamf, ("NVIDIA H100 SXM", "fp8"), ("NVIDIA H100 SXM", "bf16"))
    h_bf16 = fitted["H100"]["bf16"]
    h_used = GemmParams(h_bf16.eta_max * ratio_h, h_bf16.half_mn, h_bf16.half_k, h_bf16.fixed_time_s,
                        h_bf16.wave_exponent)
    own = fit_joint([h_fp8], [h_hw])["fp8"]
    bf16_time = {s: t for s, t in zip(zip(tables["H100"]["bf16"].b, tables["H100"]["bf16"].m,
                                          tables["H100"]["bf16"].n, tables["H100"]["bf16"].k),
                                      tables["H100"]["bf16"].time_s)}
    speedup = [bf16_time[s] / t for s, t in zip(zip(h_fp8.b, h_fp8.m, h_fp8.n, h_fp8.k), h_fp8.time_s)
               if s in bf16_time]
    print(f"\nH100 fp8 (e4m3 x e4m3): {h_fp8.rejected} of {h_fp8.rejected + len(h_fp8.time_s)} rows rejected above the "
          f"1,979 TFLOP/s peak; {over} of the remaining {len(h_fp8.time_s)} exceed the {ceiling:.0f} TFLOP/s the MAMF "
          f"shape search could reach; {sum(x > 2.0 for x in speedup)} run more than 2x (the peak ratio) faster "
          f"than bf16 at the same shape (up to {max(speedup):.2f}x): not fitted.")
    print(f"  used: bf16 curve, eta x MAMF fp8/bf16 {ratio_h:.3f} = {h_used.eta_max:.3f}; vs the accepted rows "
          f"{stats(errors_pct(predict_s(h_used, h_fp8, h_hw), h_fp8.time_s))}")
    print(f"  (a fit of its own would give eta_max {own.eta_max:.3f}, "
          f"{stats(errors_pct(predict_s(own, h_fp8, h_hw), h_fp8.time_s))})")
    fitted["H100"]["fp8"] = h_used
    try:
        recipe_ratios = (scaled_recipes(scaled, scaled_table, h_bf16, tables["H100"]["bf16"])
                         if scaled and scaled_table else {})
    except VtrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    date = datetime.date.today().strftime("%Y-%m")
    flash = read_flash_tflops()
    flash_peaks = {g: gpu_spec(load_gpu_config(g.lower())).peak_tflops["bf16"] for g in flash}
    for tr in TRANSFERS:
        spec = gpu_spec(load_gpu_config(tr.gpu))
        values, prov = derive(tr, fitted, mamf, spec.peak_tflops, flash, flash_peaks, date, FITTED_ON, recipe_ratios,
                              power_law(tr.gpu, GPUS[tr.source][0]) if tr.by_power else None)
        if args.write:
            update_yaml(CONF_DIR / "gpu" / f"{tr.gpu}.yaml", values, prov)
        eff = values["gemm_efficiency_by_precision"]
        print(f"{'wrote' if args.write else 'would write'} gpu/{tr.gpu}: eta {eff}, "
              f"flash {values['flash_attention_efficiency']}")
    _mamf_checks(mamf)
    _law_checks(mamf)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
