"""How low can the single-node error go? A lower bound for any model whose time grows with the work.

The 1,440 A100 runs (vtrain/data/a100_single_node_iteration_times.csv) have an exact structure: for each
(hidden, t, d, p, micro-batch) group, the time is bilinear in layers L and micro-batches m,
    T = a + b·L + c·m + e·L·m      (max residual printed below, ~1e-2 or less),
and the per-layer, per-micro-batch cost e·p is the same for every d and p at a given (hidden, t,
micro-batch). That cost is the bulk of every run. This script takes every other term as exact and asks:
what is the smallest MAPE a model can reach if its per-layer cost never decreases when the micro-batch
or the hidden size grows (more work never takes less time)? It solves that weighted-L1 isotonic fit as
a linear program per t (scipy.optimize.linprog) over the groups with a full (L, m) grid
(micro-batch 1, 2, 4), and reports the bound on MAPE and on the share of rows within 10%.

    python bench/single_node_floor.py
"""
from __future__ import annotations

import csv
import itertools
from collections import defaultdict
from importlib import resources
from typing import Dict, Tuple

import numpy as np
from scipy.optimize import linprog

KEYS = ["# GPUs", "global batch", "micro batch", "hidden size", "attention heads", "# layers",
        "sequence length", "tensor parallelism", "data parallelism", "pipeline parallelism", "iteration time (ms)"]


def load() -> np.ndarray:
    path = resources.files("vtrain") / "data" / "a100_single_node_iteration_times.csv"
    with open(str(path), encoding="utf-8-sig") as f:
        rows = [[float(r[k]) for k in KEYS] for r in csv.DictReader(f)]
    return np.array(rows)


def bilinear_fit(layers: np.ndarray, microbatches: np.ndarray, times: np.ndarray) -> Tuple[np.ndarray, int]:
    """Least-squares (a, b, c, e) of T = a + b·L + c·m + e·L·m over one group's runs, and the design's rank
    (< 4: the group's L and m do not separate the four terms)."""
    coef, _, rank, _ = np.linalg.lstsq(bilinear_design(layers, microbatches), times, rcond=None)
    return coef, int(rank)


def bilinear_design(layers: np.ndarray, microbatches: np.ndarray) -> np.ndarray:
    """Columns 1, L, m, L·m of T = a + b·L + c·m + e·L·m."""
    return np.c_[np.ones(len(layers)), layers, microbatches, layers * microbatches]


def main() -> None:
    d = load()
    gb, mb, h, L, t, dp, p, T = d[:, 1], d[:, 2], d[:, 3], d[:, 5], d[:, 7], d[:, 8], d[:, 9], d[:, 10]
    m = gb / (dp * mb)
    groups = defaultdict(list)
    for i in range(len(d)):
        groups[(h[i], t[i], dp[i], p[i], mb[i])].append(i)
    per_layer = defaultdict(list)  # (h, t, mb) -> e·p of every (d, p) group
    worst = 0.0
    for (hh, tt, dd, pp, bb), idx in groups.items():
        coef, rank = bilinear_fit(L[idx], m[idx], T[idx])
        if rank < 4:  # micro-batch 8: one m per group, e is not separable
            continue
        fitted = bilinear_design(L[idx], m[idx]) @ coef
        worst = max(worst, float(np.max(np.abs(fitted - T[idx]) / T[idx])))
        per_layer[(hh, tt, bb)].append(coef[3] * pp)
    spread = max(np.ptp(v) / np.mean(v) for v in per_layer.values())
    print(f"bilinear fit T = a + b·L + c·m + e·L·m: max relative residual {worst:.2e} over "
          f"{sum(len(v) for v in per_layer.values())} groups")
    print(f"per-layer cost e·p across the (d, p) groups of one (hidden, t, micro-batch): max spread {spread:.1e}")
    cost = {k: float(np.mean(v)) for k, v in per_layer.items()}
    # weight of one unit of per-layer error in the MAPE sum: L·(m + p - 1)/p / T (1F1B: the layer cost
    # enters the steady state m times and the fill/drain p - 1 times, over p stages)
    weight: Dict[Tuple[float, ...], float] = defaultdict(float)
    rows_of = defaultdict(list)
    for i in range(len(d)):
        k = (h[i], t[i], mb[i])
        if k in cost:
            w = L[i] * (m[i] + p[i] - 1) / p[i] / T[i]
            weight[k] += w
            rows_of[k].append(w)
    total_ape, within = 0.0, 0
    print("\nper-layer cost (ms): measured -> nearest monotone (isotonic) value")
    for tt in sorted({k[1] for k in cost}):
        cells = sorted(k for k in cost if k[1] == tt)
        n = len(cells)
        # variables: x (n), u (n) with u >= |x - cost|; minimise sum weight·u
        c_obj = np.r_[np.zeros(n), [weight[k] for k in cells]]
        A_ub, b_ub = [], []
        for j, k in enumerate(cells):
            for sign in (1, -1):
                row = np.zeros(2 * n)
                row[j], row[n + j] = sign, -1
                A_ub.append(row)
                b_ub.append(sign * cost[k])
        for (j, a), (k2, b) in itertools.permutations(list(enumerate(cells)), 2):
            if (a[0] <= b[0] and a[2] <= b[2]) and a != b:  # a does no more work than b: x_a <= x_b
                row = np.zeros(2 * n)
                row[j], row[k2] = 1, -1
                A_ub.append(row)
                b_ub.append(0.0)
        res = linprog(c_obj, A_ub=np.array(A_ub), b_ub=np.array(b_ub), bounds=[(0, None)] * (2 * n))
        x = res.x[:n]
        for j, k in enumerate(cells):
            dev = abs(x[j] - cost[k])
            total_ape += dev * weight[k]
            within += sum(1 for w in rows_of[k] if dev * w <= 0.10)
            flag = "" if dev < 1e-9 else f"  ({(x[j] - cost[k]) / cost[k] * 100:+.0f}%)"
            print(f"  t={int(tt)} hidden={int(k[0])} micro-batch={int(k[2])}: {cost[k]:.2f} -> {x[j]:.2f}{flag}")
    n_rows = len(d)
    outside = sum(len(v) for v in rows_of.values()) - within
    print("\nlower bound, any model monotone in work (everything else exact): "
          f"MAPE >= {total_ape / n_rows * 100:.2f}%, "
          f"within 10% <= {(n_rows - outside) / n_rows * 100:.1f}% of {n_rows} rows")


if __name__ == "__main__":
    main()
