"""Fit the GEMM curve (:class:`vtrain.cost.gemm.GemmCurve`) of H100 and B200 to XLA's measured GEMM tables.

Data (``vtrain/data/modern_gpus``, provenance in its README): ``xla_gemm_perf_table_h100_b200.csv``
(375 shapes b x m x n x k per GPU and dtype, median kernel time), ``xla_gemm_perf_table_history.csv``
(earlier measurements of the same grid: the run-to-run and software spread) and
``mleng_mamf_max_achievable_matmul.csv`` (best TFLOP/s of a brute-force shape search per GPU: a
cross-check of the fitted large-GEMM efficiency, and the ratio we scale it by where a table is missing).

Fit: weighted least squares on log(predicted / measured time) (a robust soft-L1 loss at 5%, so a few
odd kernels do not pull the curve), every shape of a GPU and precision at once. The shape constants
(d_mn, d_k at the bf16 rate, t0, wave exponent) are the GPU's; the large-GEMM efficiency eta_max is per
precision. Rows faster than the datasheet peak are rejected, never fitted.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy.optimize import least_squares  # type: ignore[import-untyped]

DATA = Path(str(resources.files("vtrain") / "data" / "modern_gpus"))
GEMM_TABLE = "xla_gemm_perf_table_h100_b200.csv"
HISTORY_TABLE = "xla_gemm_perf_table_history.csv"
MAMF_TABLE = "mleng_mamf_max_achievable_matmul.csv"
# table dtype key -> vtrain precision name (f32 dots run on TF32 tensor cores: README caveat)
DTYPE_KEYS = {"bf16xbf16->bf16": "bf16", "f8e4m3fnxf8e4m3fn->bf16": "fp8", "f32xf32->f32": "tf32"}
TILE = 128.0


@dataclass(frozen=True)
class GemmTable:
    """One GPU's measured GEMMs at one precision (rows above the datasheet peak already removed)."""

    gpu: str
    precision: str
    b: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    time_s: np.ndarray
    rejected: int = 0  # rows above the peak

    @property
    def flops(self) -> np.ndarray:
        return np.asarray(2.0 * self.b * self.m * self.n * self.k, dtype=float)

    def where(self, mask: np.ndarray) -> "GemmTable":
        return replace(self, b=self.b[mask], m=self.m[mask], n=self.n[mask], k=self.k[mask],
                       time_s=self.time_s[mask])


@dataclass(frozen=True)
class Hardware:
    """What the curve needs of the GPU besides the fitted constants."""

    peak_tflops: float  # this precision's dense peak
    ref_peak_tflops: float  # the bf16 peak (d_k is stated at that rate)
    sms: int


@dataclass(frozen=True)
class GemmParams:
    eta_max: float
    half_mn: float
    half_k: float  # at the bf16 rate
    fixed_time_s: float
    wave_exponent: float

    def as_vector(self) -> List[float]:
        return [self.eta_max, self.half_mn, self.half_k, self.fixed_time_s * 1e6, self.wave_exponent]

    @staticmethod
    def from_vector(x: Sequence[float]) -> "GemmParams":
        return GemmParams(float(x[0]), float(x[1]), float(x[2]), float(x[3]) * 1e-6, float(x[4]))


LOWER = GemmParams(0.2, 0.0, 0.0, 0.0, 0.0)
UPPER = GemmParams(1.0, 4096.0, 8192.0, 50e-6, 1.0)
START = GemmParams(0.8, 32.0, 200.0, 5e-6, 0.5)


def _path(name: str, folder: Optional[Path]) -> Path:
    return (folder or DATA) / name


def read_gemm_table(gpu: str, precision: str, peak_tflops: float, folder: Optional[Path] = None,
                    name: str = GEMM_TABLE, commit: Optional[str] = None) -> GemmTable:
    """Rows of ``gpu`` (H100 | B200) at ``precision`` (bf16 | fp8 | tf32); rows above the peak rejected."""
    rows = []
    with _path(name, folder).open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["gpu"] != gpu or DTYPE_KEYS.get(r["dtype_key"].lower()) != precision:
                continue
            if commit is not None and r.get("table_commit") != commit:
                continue
            rows.append([float(r[c]) for c in ("b", "m", "n", "k", "flop_count_derived", "flops_per_s_raw")])
    a = np.asarray(rows)
    keep = a[:, 5] <= peak_tflops * 1e12
    a_keep = a[keep]
    return GemmTable(gpu, precision, a_keep[:, 0], a_keep[:, 1], a_keep[:, 2], a_keep[:, 3],
                     a_keep[:, 4] / a_keep[:, 5], rejected=int((~keep).sum()))


def history_commits(folder: Optional[Path] = None) -> List[Tuple[str, str, str]]:
    """(commit, date, gpu) of each earlier version of the table."""
    seen: Dict[Tuple[str, str, str], None] = {}
    with _path(HISTORY_TABLE, folder).open(newline="") as fh:
        for r in csv.DictReader(fh):
            seen[(r["table_commit"], r["table_commit_date"], r["gpu"])] = None
    return list(seen)


def run_spread_pct(current: GemmTable, earlier: GemmTable) -> float:
    """Median |time ratio - 1| (%) between two measurements of the same shapes: the noise floor."""
    key = {(b, m, n, k): t for b, m, n, k, t in zip(earlier.b, earlier.m, earlier.n, earlier.k, earlier.time_s)}
    ratios = [t / key[(b, m, n, k)] for b, m, n, k, t in zip(current.b, current.m, current.n, current.k,
                                                               current.time_s) if (b, m, n, k) in key]
    return float(np.median(np.abs(np.asarray(ratios) - 1.0)) * 100)


def predict_s(p: GemmParams, t: GemmTable, hw: Hardware) -> np.ndarray:
    """The GemmCurve formula, vectorized (tests check it against the scalar one)."""
    half_k = p.half_k * hw.peak_tflops / hw.ref_peak_tflops
    eta = p.eta_max * (t.m / (t.m + p.half_mn)) * (t.n / (t.n + p.half_mn)) * (t.k / (t.k + half_k))
    tiles = np.ceil(t.m / TILE) * np.ceil(t.n / TILE) * t.b
    wave = tiles / (np.ceil(tiles / hw.sms) * hw.sms)
    eta = eta * wave ** p.wave_exponent  # all table dimensions are 16-byte aligned: no alignment factor
    return np.asarray(p.fixed_time_s + t.flops / (hw.peak_tflops * 1e12 * eta), dtype=float)


def errors_pct(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.asarray(np.abs(pred / meas - 1.0) * 100, dtype=float)


def _fit(residuals: Callable[[np.ndarray], np.ndarray], x0: Sequence[float], lo: Sequence[float],
         hi: Sequence[float]) -> np.ndarray:
    r = least_squares(residuals, np.clip(x0, lo, hi), bounds=(lo, hi), loss="soft_l1", f_scale=0.05)
    return np.asarray(r.x)


def fit_joint(tables: Sequence[GemmTable], hws: Sequence[Hardware],
              start: GemmParams = START) -> Dict[str, GemmParams]:
    """Shared shape constants, one eta_max per table (precision); returns the params per precision."""
    shared_lo, shared_hi = LOWER.as_vector()[1:], UPPER.as_vector()[1:]
    lo = [LOWER.eta_max] * len(tables) + shared_lo
    hi = [UPPER.eta_max] * len(tables) + shared_hi
    x0 = [start.eta_max] * len(tables) + start.as_vector()[1:]

    def unpack(x: np.ndarray, i: int) -> GemmParams:
        return GemmParams.from_vector([x[i], *x[len(tables):]])

    def res(x: np.ndarray) -> np.ndarray:
        return np.concatenate([np.log(predict_s(unpack(x, i), t, hw) / t.time_s)
                               for i, (t, hw) in enumerate(zip(tables, hws))])

    x = _fit(res, x0, lo, hi)
    return {t.precision: unpack(x, i) for i, t in enumerate(tables)}


def fit_eta_only(shape: GemmParams, t: GemmTable, hw: Hardware) -> GemmParams:
    """Keep the shape constants (e.g. transferred from bf16), fit only eta_max to this table."""
    x = _fit(lambda v: np.log(predict_s(replace(shape, eta_max=float(v[0])), t, hw) / t.time_s),
             [shape.eta_max], [LOWER.eta_max], [UPPER.eta_max])
    return replace(shape, eta_max=float(x[0]))


def leave_one_out_pct(tables: Sequence[GemmTable], hws: Sequence[Hardware], dim: str) -> List[np.ndarray]:
    """Refit without each value of ``dim`` (b, m, n or k) and predict the held-out shapes: errors per table."""
    out: List[List[np.ndarray]] = [[] for _ in tables]
    for v in np.unique(getattr(tables[0], dim)):
        train = [t.where(getattr(t, dim) != v) for t in tables]
        params = fit_joint(train, hws)
        for i, (t, hw) in enumerate(zip(tables, hws)):
            test = t.where(getattr(t, dim) == v)
            out[i].append(errors_pct(predict_s(params[t.precision], test, hw), test.time_s))
    return [np.concatenate(e) for e in out]


@dataclass(frozen=True)
class MamfRow:
    accelerator: str
    dtype: str  # bf16 | fp8
    tflops: float
    theoretical_tflops: float
    m: int
    n: int
    k: int

    @property
    def efficiency(self) -> float:
        return self.tflops / self.theoretical_tflops


def read_mamf(folder: Optional[Path] = None) -> Dict[Tuple[str, str], MamfRow]:
    """(accelerator, bf16|fp8) -> the best measured matmul (NVIDIA rows)."""
    out: Dict[Tuple[str, str], MamfRow] = {}
    with _path(MAMF_TABLE, folder).open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["vendor"] != "NVIDIA":
                continue
            dtype = "fp8" if r["dtype"].startswith("fp8") else r["dtype"]
            out[(r["accelerator"], dtype)] = MamfRow(r["accelerator"], dtype, float(r["mamf_tflops"]),
                                                     float(r["theoretical_tflops"]), int(r["m"]), int(r["n"]),
                                                     int(r["k"]))
    return out


def mamf_ratio(rows: Dict[Tuple[str, str], MamfRow], target: Tuple[str, str], source: Tuple[str, str]) -> float:
    """Best-matmul efficiency of ``target`` over that of ``source`` (each as a fraction of its own peak)."""
    return rows[target].efficiency / rows[source].efficiency


def percentile(e: np.ndarray, q: float) -> float:
    return float(np.percentile(e, q)) if len(e) else math.nan
