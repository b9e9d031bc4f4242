"""Fit the intra-node collective constants (latency, step latency, bandwidth efficiency) to nccl-tests
all_reduce_perf tables, by least squares on log time (every size 1 MiB–1 GiB, every GPU count).

    python bench/fit_nccl.py a100 300     # table folder, NVLink bandwidth per GPU per direction (GB/s)
"""
from __future__ import annotations

import sys

import numpy as np

from vtrain.cost.nccl_tables import fit_ring_constants, read_allreduce_tables

if __name__ == "__main__":
    gpu = sys.argv[1] if len(sys.argv) > 1 else "a100"
    link_gb_per_s = float(sys.argv[2]) if len(sys.argv) > 2 else 300.0
    tables = read_allreduce_tables(gpu)
    fit = fit_ring_constants(tables, link_gb_per_s * 1e9)
    print(f"{gpu}: latency_s={fit.latency_s:.3e} step_latency_s={fit.step_latency_s:.3e} "
          f"efficiency={fit.efficiency:.3f}  (median |error| {fit.median_abs_err_pct:.1f}%, "
          f"max {fit.max_abs_err_pct:.1f}%, n={fit.n})")
    for n, (size, t) in sorted(tables.items()):
        idx = [0, 7, 63, len(size) - 1]
        pred = fit.predict(n, size[idx], link_gb_per_s * 1e9)
        print(f"  n={n}: " + ", ".join(f"{int(size[i]) >> 20} MiB {t[i] * 1e6:.0f}/{p * 1e6:.0f} us"
                                        for i, p in zip(idx, pred)))
    _ = np
