"""nccl-tests all_reduce_perf tables (data/nccl_allreduce/<gpu>/allreduce_<n>gpu.csv) and the fit of
the ring-model constants to them. Columns: size(B), count, type, time(ns), busbw(GB/s) out-of-place,
then time(ns), busbw(GB/s) in-place (the in-place time is used, as vTrain does)."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Dict, Tuple

import numpy as np

Table = Tuple[np.ndarray, np.ndarray]  # (bytes, seconds)


def _data_dir() -> Path:
    return Path(str(resources.files("vtrain") / "data" / "nccl_allreduce"))


def read_allreduce_table(path: Path) -> Table:
    sizes, times = [], []
    with path.open(newline="") as fh:
        rows = csv.reader(fh)
        next(rows)
        for rec in rows:
            sizes.append(float(rec[0]))
            times.append(float(rec[5]) * 1e-9)
    return np.asarray(sizes), np.asarray(times)


def read_allreduce_tables(gpu: str, folder: Path | None = None) -> Dict[int, Table]:
    base = (folder or _data_dir()) / gpu
    out: Dict[int, Table] = {}
    for path in sorted(base.glob("allreduce_*gpu.csv")):
        n = int(path.stem.split("_")[1].removesuffix("gpu"))
        out[n] = read_allreduce_table(path)
    return out


@dataclass(frozen=True)
class RingFit:
    latency_s: float
    step_latency_s: float
    efficiency: float
    median_abs_err_pct: float
    max_abs_err_pct: float
    n: int

    def predict(self, n: int, size: np.ndarray, link_bytes_per_s: float) -> np.ndarray:
        return (self.latency_s + 2 * (n - 1) * self.step_latency_s
                + 2 * (n - 1) / n * size / (link_bytes_per_s * self.efficiency))


def fit_ring_constants(tables: Dict[int, Table], link_bytes_per_s: float) -> RingFit:
    """t = a + 2(n-1)·b + 2(n-1)/n·S·c is linear in (a, b, c): weighted least squares with weights 1/t
    (relative error), then efficiency = 1 / (c · link bandwidth)."""
    rows, ys = [], []
    for n, (size, t) in tables.items():
        for s, ti in zip(size, t):
            rows.append([1.0 / ti, 2 * (n - 1) / ti, 2 * (n - 1) / n * s / ti])
            ys.append(1.0)
    a, b, c = np.linalg.lstsq(np.asarray(rows), np.asarray(ys), rcond=None)[0]
    fit = RingFit(float(a), float(max(b, 0.0)), float(1.0 / (c * link_bytes_per_s)), 0.0, 0.0, len(ys))
    errs = np.concatenate([np.abs(fit.predict(n, s, link_bytes_per_s) - t) / t * 100 for n, (s, t) in tables.items()])
    return RingFit(fit.latency_s, fit.step_latency_s, fit.efficiency, float(np.median(errs)), float(errs.max()),
                   len(ys))
