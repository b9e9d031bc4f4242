"""Megatron-Core Qwen3-235B-A22B on 256 H100 (vtrain/data/modern_gpus/megatron_moe_qwen3_h100.csv): per-row error
and its sensitivity to the constants the H100 stack transfers from the A100 fit (not fitted to these rows).

    python bench/moe_validation.py
"""
from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Dict, List, Tuple

from vtrain import compose
from vtrain.config.compose import load_gpu_config, load_stack_config
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.errors import ConfigError
from vtrain.sim.simulator import simulate_workload
from vtrain.validation.csv_io import read_measurements
from vtrain.validation.datasets import resolve_dataset
from vtrain.validation.rows import row_workload

VARIANTS: Dict[str, Dict[str, Dict[str, float]]] = {
    "today's constants": {},
    "host time per kernel x0.5": {"stack": {"host_time_per_kernel_s": 0.5}},
    "host time per kernel x2": {"stack": {"host_time_per_kernel_s": 2.0}},
    # the H100 prices GEMMs on its per-precision fit (gemm_efficiency_by_precision), so the rate is scaled through
    # the sustained fraction every GEMM runs at (scaling gemm_max_efficiency would move nothing)
    "GEMM rate x0.8": {"gpu": {"sustained_gemm_fraction": 0.8}},
    "inter-node efficiency x0.8": {"inter": {"efficiency": 0.8}},
}


def workloads() -> List[Tuple[Any, Any]]:
    cfg = compose(["+cluster=h100x1024"], require=False)
    out = []
    for row in read_measurements(resolve_dataset("megatron_moe_qwen3_h100")):
        try:
            w = row_workload(row, cfg.cluster, functools.lru_cache(None)(load_gpu_config), load_stack_config,
                             stack="megatron_core_te")
        except ConfigError as err:
            print(f"row {row.index:2d} skipped: {err}")
            continue
        out.append((row, w))
    return out


def scaled(w: Any, change: Dict[str, Dict[str, float]]) -> Any:
    stack = replace(w.stack, **{k: getattr(w.stack, k) * f for k, f in change.get("stack", {}).items()})
    gpu = replace(w.cluster.gpu, **{k: min(1.0, getattr(w.cluster.gpu, k) * f)
                                    for k, f in change.get("gpu", {}).items()})
    inter = replace(w.cluster.inter_node, **{k: min(1.0, getattr(w.cluster.inter_node, k) * f)
                                             for k, f in change.get("inter", {}).items()})
    return replace(w, stack=stack, cluster=replace(w.cluster, gpu=gpu, inter_node=inter))


def main() -> None:
    rows = workloads()
    print(f"{'variant':30s} " + " ".join(f"row{r.index:>3d}" for r, _ in rows) + "   MAPE  (balanced rows)")
    for name, change in VARIANTS.items():
        errs = []
        for r, w in rows:
            w2 = scaled(w, change)
            t = simulate_workload(w2, AnalyticalCostModel(w2))[0].iteration_time_s * 1e3
            errs.append((t / float(r.get("iteration_time_ms")) - 1) * 100)
        balanced = [abs(e) for (r, _), e in zip(rows, errs) if "dropless" not in (r.get("routing") or "")]
        mape = sum(abs(e) for e in errs) / len(errs)
        row = " ".join(f"{e:+6.1f}" for e in errs)
        print(f"{name:30s} {row}  {mape:5.1f}%  {sum(balanced) / len(balanced):5.1f}%")


if __name__ == "__main__":
    main()
