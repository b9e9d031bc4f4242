"""Fit the per-GPU cost-model constants to measured iteration times.

The constants (see GpuConfig) each have a physical meaning and a plausible range; they are searched in
log space by Nelder-Mead (Nelder & Mead 1965, scipy.optimize) minimising the mean absolute percentage
error. Workloads are built once; each evaluation re-prices and re-simulates every row (~0.5 ms/row).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Sequence, Tuple

import numpy as np

from vtrain.config.build import Workload
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.system import GpuSpec

# name -> (lower, upper) plausible range
BOUNDS: Dict[str, Tuple[float, float]] = {
    "gemm_max_efficiency": (0.3, 0.98),
    "gemm_half_efficiency_dim": (1.0, 1024.0),
    "gemm_misaligned_efficiency": (0.05, 1.0),
    "attention_efficiency": (0.05, 1.0),
    "memory_efficiency": (0.2, 1.0),
    "kernel_time_s": (1e-7, 5e-5),
    "host_time_per_kernel_s": (1e-7, 2e-4),
    "optimizer_bytes_per_param": (4.0, 400.0),
    "iteration_overhead_s": (1e-5, 0.2),
    "microbatch_overhead_s": (1e-6, 0.02),
}


@dataclass(frozen=True)
class FitResult:
    constants: Dict[str, float]
    mape_pct: float
    evaluations: int


def predict_ms(workloads: Sequence[Workload], gpu: GpuSpec) -> np.ndarray:
    out = np.empty(len(workloads))
    for i, w in enumerate(workloads):
        wi = replace(w, cluster=replace(w.cluster, gpu=gpu))
        report, _ = simulate_workload(wi, AnalyticalCostModel(wi.cluster, wi.plan.precision.value))
        out[i] = report.iteration_time_s * 1e3
    return out


def _to_gpu(base: GpuSpec, names: Sequence[str], x: np.ndarray) -> GpuSpec:
    values = {}
    for n, xi in zip(names, x):
        lo, hi = BOUNDS[n]
        values[n] = float(np.clip(np.exp(xi), lo, hi))
    return replace(base, **values)


def fit_constants(workloads: Sequence[Workload], measured_ms: np.ndarray, base: GpuSpec,
                  names: Sequence[str] = tuple(BOUNDS), max_evals: int = 400) -> FitResult:
    from scipy.optimize import minimize

    measured = np.asarray(measured_ms, dtype=float)
    x0 = np.log([max(BOUNDS[n][0], min(BOUNDS[n][1], getattr(base, n))) for n in names])
    evals = [0]

    def loss(x: np.ndarray) -> float:
        evals[0] += 1
        pred = predict_ms(workloads, _to_gpu(base, names, x))
        return float(np.mean(np.abs(pred - measured) / measured) * 100.0)

    res = minimize(loss, x0, method="Nelder-Mead",
                   options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-3, "adaptive": True})
    gpu = _to_gpu(base, names, res.x)
    return FitResult({n: getattr(gpu, n) for n in names}, float(res.fun), evals[0])


def cross_validate(workloads: Sequence[Workload], measured_ms: np.ndarray, groups: Sequence[object],
                   base: GpuSpec, names: Sequence[str] = tuple(BOUNDS), max_evals: int = 200
                   ) -> Tuple[float, List[Tuple[object, float, int]]]:
    """Leave-one-group-out: fit without a group, predict it. Returns (pooled MAPE, per-group MAPE)."""
    measured = np.asarray(measured_ms, dtype=float)
    groups_arr = np.asarray([str(g) for g in groups])
    pooled = np.empty(len(workloads))
    per_group = []
    for g in sorted(set(groups_arr)):
        test = groups_arr == g
        train_idx = np.flatnonzero(~test)
        fit = fit_constants([workloads[i] for i in train_idx], measured[train_idx], base, names, max_evals)
        gpu = replace(base, **fit.constants)
        test_idx = np.flatnonzero(test)
        pred = predict_ms([workloads[i] for i in test_idx], gpu)
        pooled[test_idx] = pred
        per_group.append((g, float(np.mean(np.abs(pred - measured[test_idx]) / measured[test_idx]) * 100), len(test_idx)))
    return float(np.mean(np.abs(pooled - measured) / measured) * 100.0), per_group
