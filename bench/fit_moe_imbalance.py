"""Fit the routing imbalance of dropless Megatron-Core runs whose expert-load histogram is not published.

The ModelZoo long-context table reports each Qwen3-235B-A22B plan twice: with forced-balance routing and
dropless. vtrain predicts the forced-balance rows with moe_imbalance = 1.0 (no fit); this script fits one
``moe_imbalance`` (max/mean tokens per expert on the busiest rank) to the dropless rows only, reports its
leave-one-out error, and the error the main table gives at 1.0 and at the fit (held out: different plans; its
routing is read as forced balance, bench/make_moe_csv.py MAIN_TABLE_ROUTING).

    python bench/fit_moe_imbalance.py
"""
from __future__ import annotations

import functools
from typing import Dict, List, Sequence

import vtrain.graph.builder  # noqa: F401  (import order: graph before comm)
from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.compose import load_gpu_config, load_stack_config
from vtrain.sim.simulator import simulate_workload
from vtrain.validation.csv_io import MeasuredRow, read_measurements
from vtrain.validation.datasets import resolve_dataset
from vtrain.validation.rows import row_workload

GRID = [1.0 + 0.05 * i for i in range(21)]  # 1.0 .. 2.0


def errors_pct(rows: Sequence[MeasuredRow], imbalance: float) -> List[float]:
    cfg = compose(["+cluster=h100x1024"], require=False)
    gpu = functools.lru_cache(None)(load_gpu_config)
    out = []
    for row in rows:
        w = row_workload(MeasuredRow(row.index, {**row.values, "moe_imbalance": str(imbalance)}), cfg.cluster, gpu,
                         load_stack_config, stack="megatron_core_te")
        report, _ = simulate_workload(w, cost_model_for(w))
        measured_s = float(row.values["iteration_time_ms"]) / 1e3
        out.append(100.0 * (report.iteration_time_s - measured_s) / measured_s)
    return out


def mape(errs: Sequence[float]) -> float:
    return sum(abs(e) for e in errs) / max(1, len(errs))


def main() -> None:
    rows = read_measurements(resolve_dataset("megatron_moe_qwen3_h100"))
    dropless = [r for r in rows if r.values["routing"].startswith("dropless")]
    table: Dict[float, List[float]] = {x: errors_pct(dropless, x) for x in GRID}
    best = min(GRID, key=lambda x: mape(table[x]))
    loo = []
    for i in range(len(dropless)):
        pick = min(GRID, key=lambda x: mape([e for j, e in enumerate(table[x]) if j != i]))
        loo.append(table[pick][i])
    main_rows = [r for r in rows if r.values["table"].startswith("H100_main")]  # held out (forced balance)
    print(f"fit on {len(dropless)} dropless long-context rows: moe_imbalance = {best:.2f}, "
          f"in-sample MAPE {mape(table[best]):.1f}%, leave-one-out MAPE {mape(loo):.1f}%")
    for x in (1.0, best):
        errs = errors_pct(main_rows, x)
        print(f"held-out main table ({len(main_rows)} rows) at moe_imbalance {x:.2f}: "
              f"{' '.join(f'{e:+.0f}%' for e in errs)}  MAPE {mape(errs):.1f}%")


if __name__ == "__main__":
    main()
