"""The share of per-tensor FP8's GEMM efficiency that block-scaled MXFP8 reaches on Blackwell
(gpu.block_scaled_gemm_ratio), from the measured runs that timed the same job in bf16 and in MXFP8.

No table in vtrain/data measures a block-scaled GEMM: the Blackwell configs copy per-tensor fp8's efficiency
to mxfp8 and nvfp4 (bench/fit_gemm.py). The torchtitan tables (vtrain/data/modern_gpus/torchtitan_rows.csv)
time dense jobs twice, once in bf16 and once in MXFP8, on the same GPUs, so the measured speedup
t_bf16 / t_mxfp8 is free of everything the two runs share (power limits, the bf16 rate, communication). The
ratio solves, in least squares over those pairs, log(predicted speedup / measured speedup) = 0. The bf16
partner does not depend on it; the MXFP8 time falls as it grows.

    python bench/fit_block_scaled.py            # fit, leave-one-pair-out, the held-out checks
    python bench/fit_block_scaled.py --write    # ... and write it into the Blackwell gpu/ configs

Fitted on the dense pairs; held out: the MoE pair (GB200 Llama 4 Scout: its bf16 and MXFP8 rows share a
stated configuration that cannot fit in memory, so their speedup, not their times, is the check), the NVFP4
pairs (the same ratio transferred: NVFP4 is block-scaled on the same tensor cores) and Megatron-Core's
Blackwell MXFP8 rows (Transformer Engine's kernels, not torchao's; absolute errors).
"""
from __future__ import annotations

import functools
import math
import sys
from dataclasses import replace
from datetime import date
from typing import List, Optional, Sequence, Tuple

from vtrain import compose
from vtrain.calibration.yaml_write import provenance_path, update_yaml
from vtrain.config.build import gpu_spec
from vtrain.config.compose import CONF_DIR, load_gpu_config, load_stack_config
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.io.args import ArgumentParser
from vtrain.sim.simulator import simulate_workload
from vtrain.validation.csv_io import MeasuredRow, read_measurements
from vtrain.validation.datasets import resolve_dataset, shipped_defaults
from vtrain.validation.run import measured_ms, simulate_row
from vtrain.workload.workload import Workload

FITTED = ("b200", "gb200")  # the GPUs of the fitted pairs (sm_100)
TRANSFERS = ("b300", "gb300")  # Blackwell Ultra (sm_103): the same MX tensor cores, no pair of its own
PAIR_KEY = ("table", "model", "gpu", "num_gpus", "micro_batch", "global_batch", "seq_len", "stack", "recompute")

Simulated = Tuple[MeasuredRow, Workload, float]  # row, workload, measured ms


def load_pairs() -> Tuple[List[Tuple[Simulated, Simulated]], List[Simulated]]:
    """(bf16, low-precision) pairs of the torchtitan Blackwell rows, and Megatron-Core's Blackwell MXFP8 rows."""
    load_gpu = functools.lru_cache(None)(load_gpu_config)

    def simulated(row: MeasuredRow, data: str, cluster: str, stack: Optional[str] = None) -> Simulated:
        """The row as task=validate simulates it (its dataset's defaults, recompute and micro-batch choices)."""
        cfg = compose([f"+cluster={cluster}"], require=False)
        w, _, _ = simulate_row(row, cfg, load_gpu, load_stack_config, shipped_defaults(data), stack)
        return row, w, measured_ms(row, w)[0]

    rows = [r for r in read_measurements(resolve_dataset("torchtitan")) if str(r.get("gpu")) in FITTED]
    bf16 = {tuple(str(r.get(k)) for k in PAIR_KEY): r for r in rows if r.get("precision") == "bf16"}
    pairs = [(simulated(bf16[key], "torchtitan", "h100x1024"), simulated(r, "torchtitan", "h100x1024"))
             for r in rows if r.get("precision") in ("mxfp8", "nvfp4")
             for key in [tuple(str(r.get(k)) for k in PAIR_KEY)] if key in bf16]
    data = "megatron_moe_qwen3_blackwell"
    megatron = [simulated(r, data, "gb200_nvl72x16", "megatron_core_te") for r in read_measurements(
        resolve_dataset(data)) if r.get("precision") == "mxfp8"]
    return pairs, megatron


def split(pairs: Sequence[Tuple[Simulated, Simulated]]
          ) -> Tuple[List[Tuple[Simulated, Simulated]], List[Tuple[Simulated, Simulated]]]:
    """(the dense MXFP8 pairs the ratio is fitted on, the rest: MoE and NVFP4, held out)."""
    dense = [p for p in pairs if p[1][1].model.num_experts == 0 and p[1][0].get("precision") == "mxfp8"]
    return dense, [p for p in pairs if p not in dense]


def predicted_ms(w: Workload, ratio: float) -> float:
    w = replace(w, cluster=replace(w.cluster, gpu=replace(w.cluster.gpu, block_scaled_gemm_ratio=ratio)))
    return simulate_workload(w, AnalyticalCostModel(w))[0].iteration_time_s * 1e3


def speedup_error(pair: Tuple[Simulated, Simulated], ratio: float) -> float:
    """log(predicted / measured) of the pair's bf16 -> low-precision speedup."""
    (_, wb, mb), (_, wl, ml) = pair
    return math.log((predicted_ms(wb, ratio) / predicted_ms(wl, ratio)) / (mb / ml))


def fit(pairs: Sequence[Tuple[Simulated, Simulated]]) -> float:
    """The ratio in (0.3, 1] minimising the summed squared log speedup errors (golden-section search)."""
    def loss(r: float) -> float:
        return sum(speedup_error(p, r) ** 2 for p in pairs)

    lo, hi = 0.3, 1.0
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(30):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss(b)
    return min(1.0, (lo + hi) / 2)


def label(pair: Tuple[Simulated, Simulated]) -> str:
    r = pair[1][0]
    return f"{r.get('gpu')} {r.get('model')} {r.get('precision')} (row {r.index})"


def main(argv: Optional[List[str]] = None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true",
                    help=f"write the ratio into conf/gpu/{{{','.join(FITTED + TRANSFERS)}}}.yaml")
    args = ap.parse_args(argv)
    pairs, megatron = load_pairs()
    dense, held = split(pairs)
    ratio = round(fit(dense), 3)
    print(f"fit on {len(dense)} dense bf16/MXFP8 pairs (torchtitan, B200 and GB200): block_scaled_gemm_ratio = "
          f"{ratio:.3f}; shipped {gpu_spec(load_gpu_config('b200')).block_scaled_gemm_ratio:.3f}")
    print("speedup error (predicted/measured - 1)       at 1.0    fitted   left out")
    def pct(pair: Tuple[Simulated, Simulated], r: float) -> str:
        return f"{math.expm1(speedup_error(pair, r)) * 100:+7.1f}%"

    for p in dense:
        loo = fit([q for q in dense if q is not p])
        print(f"  {label(p):40s} {pct(p, 1.0)} {pct(p, ratio)} {pct(p, loo)} (ratio {loo:.3f})")
    print("held out (pairs; NVFP4: the ratio transferred):")
    for p in held:
        print(f"  {label(p):40s} {pct(p, 1.0)} {pct(p, ratio)}")
    print("held out (Megatron-Core MXFP8 rows, time error):")
    for r, w, m in megatron:
        print(f"  {r.get('gpu')} {r.get('name')}: {(predicted_ms(w, 1.0) / m - 1) * 100:+.1f}% at 1.0, "
              f"{(predicted_ms(w, ratio) / m - 1) * 100:+.1f}% fitted")
    if args.write:
        source = provenance_path(resolve_dataset("torchtitan"))
        names = ", ".join(label(p) for p in dense)
        prov = (f"fitted: the measured bf16 -> MXFP8 speedups of {len(dense)} dense torchtitan pairs ({names}; "
                f"{source}), bench/fit_block_scaled.py, {date.today().isoformat()}")
        for gpu in FITTED + TRANSFERS:
            note = prov if gpu in FITTED else f"transferred from: b200/gb200 fit (same MX tensor cores); {prov}"
            update_yaml(CONF_DIR / "gpu" / f"{gpu}.yaml", {"block_scaled_gemm_ratio": ratio},
                        {"block_scaled_gemm_ratio": note})
        print(f"wrote gpu/{', gpu/'.join(FITTED + TRANSFERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
