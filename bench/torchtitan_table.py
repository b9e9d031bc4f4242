"""The README's torchtitan table: error per GPU and parallelism, and per precision, of the shipped
`torchtitan` rows (vtrain/data/modern_gpus/torchtitan_rows.csv) as task=validate simulates them.

    python bench/torchtitan_table.py

MAPE is that of the measured quantity (tokens/s per GPU); the signed error is that of the iteration time,
(predicted - measured) / measured: negative = vtrain too fast.
"""
from __future__ import annotations

import statistics
from typing import Dict, List, Tuple

from vtrain import compose
from vtrain.validation.csv_io import read_measurements
from vtrain.validation.datasets import SHIPPED_STACK, resolve_dataset, shipped_defaults
from vtrain.validation.run import RowResult, validate_rows

GPU_LABEL = {"h100_96gb_500w": "H100 96 GB, 500 W", "h200": "H200", "b200": 'B200 ("power-limited", limit not stated)',
             "gb200": "GB200"}
PRECISIONS = ("bf16", "fp8", "fp8_rowwise", "mxfp8", "nvfp4")
ORDER = ("FSDP", "FSDP + TP", "FSDP + TP + PP", "FSDP + CP (+ TP + PP)", "FSDP + EP")


def parallelism(v: Dict[str, str]) -> str:
    if int(v.get("ep") or 1) > 1:
        return "FSDP + EP"
    if int(v.get("cp") or 1) > 1:
        return "FSDP + CP (+ TP + PP)"
    parts = ["FSDP"] + [name for name in ("tp", "pp") if int(v.get(name) or 1) > 1]
    return " + ".join(p.upper() for p in parts)


def figures(results: List[RowResult]) -> Tuple[int, float, float]:
    """(rows, MAPE of tokens/s %, mean signed time error %)."""
    ape = [r.ape_pct for r in results if r.ape_pct is not None]
    signed = [(r.predicted_ms - r.measured_ms) / r.measured_ms * 100 for r in results if r.predicted_ms is not None]
    return len(results), statistics.fmean(ape), statistics.fmean(signed)


def main() -> None:
    cfg = compose(["+cluster=h100x1024"], require=False)
    rows = read_measurements(resolve_dataset("torchtitan"))
    results = [r for r in validate_rows(rows, cfg, shipped_defaults("torchtitan"), SHIPPED_STACK["torchtitan"])
               if r.predicted_ms is not None]
    groups: Dict[Tuple[str, str], List[RowResult]] = {}
    for r in results:
        v = r.row.values
        groups.setdefault((GPU_LABEL.get(v["gpu"], v["gpu"]), parallelism(v)), []).append(r)
    print("| GPU | parallelism | rows | MAPE (tokens/s) | mean signed time error |")
    print("|---|---|---|---|---|")
    labels = list(GPU_LABEL.values())
    for (gpu, par), rs in sorted(groups.items(), key=lambda kv: (labels.index(kv[0][0]), ORDER.index(kv[0][1]))):
        n, mape, signed = figures(rs)
        print(f"| {gpu} | {par} | {n} | {mape:.1f}% | {signed:+.1f}% |")
    per = [figures([r for r in results if r.row.values["precision"] == p]) for p in PRECISIONS]
    print(f"| all | {' / '.join(PRECISIONS).replace('_', ' ')} | {' / '.join(str(n) for n, _, _ in per)} | "
          f"{' / '.join(f'{m:.1f}%' for _, m, _ in per)} | {' / '.join(f'{s:+.0f}%' for _, _, s in per)} |")
    print()
    print(h100_summary(results))


def h100_summary(results: List[RowResult]) -> str:
    """The issue's figures on the H100 rows: MAPE of tokens/s (all, and without float8 rowwise), and of the
    peak memory where the source states it."""
    h100 = [r for r in results if r.row.values["gpu"] == "h100_96gb_500w"]
    plain = [r for r in h100 if r.row.values["precision"] != "fp8_rowwise"]
    mem = [a for a in (r.memory_ape_pct for r in h100) if a is not None]
    return (f"H100 rows: tokens/s MAPE {figures(h100)[1]:.1f}% (n={len(h100)}), without float8 rowwise "
            f"{figures(plain)[1]:.1f}% (n={len(plain)}); peak memory MAPE {statistics.fmean(mem):.1f}% "
            f"(n={len(mem)}, {sum(a <= 10 for a in mem)} within 10%)")


if __name__ == "__main__":
    main()
