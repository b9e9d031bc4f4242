"""Fit the prediction-interval table vtrain/data/intervals.json and measure its held-out coverage.

    python bench/fit_intervals.py [--plot docs/intervals.png]   # ~15 s; after bench/cv_a100.py

Residuals r = log(measured / predicted), out of sample throughout:

- A100 single-node (1,440 runs) and Megatron-LM weak scaling (10 rows): the constants were fitted on
  these rows, so the predictions are the cross-validated ones of vtrain/data/intervals/a100_cv_predictions.csv
  (bench/cv_a100.py: leave-one-(t,d,p)-shape-out, 18 folds; leave-one-row-out, 10 folds);
- torchtitan H100 runs and the Megatron-Core MoE H100 rows: transferred constants never fitted on them,
  so the plain predictions (as task=validate makes them, cluster h100x1024).

Each row's class is its leaf regime (vtrain/sim/intervals.py: constants/family/nodes/bound); every class
and parent class gets its split-conformal quantiles. Coverage is measured nested, as a new plan meets the
table: for each fold (an A100 shape, a weak-scaling row, a transferred row), the table is refitted
without it and the fold's rows are checked against their interval.
"""
from __future__ import annotations

import csv
import datetime
import functools
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from vtrain.cli.args import ArgumentParser, new_file
from vtrain.sim import intervals as iv

ROOT = Path(__file__).resolve().parents[1]
CV_FILE = ROOT / "vtrain" / "data" / "intervals" / "a100_cv_predictions.csv"
TABLE = ROOT / "vtrain" / "data" / iv.TABLE_FILE
# a class needs >= 20 residuals to stand alone: each 10% tail then holds >= 2 of them, and the conformal
# coverage is at most 80% + 2/(n+1) < 90%; smaller classes widen their parent's interval instead
MIN_CLASS_N = 20
TRANSFERRED = {"torchtitan": "h100x1024", "megatron_moe_qwen3_h100": "h100x1024"}  # dataset -> cluster




class Row:
    """One residual: its dataset, fold, leaf class, features for the validated sets, and times."""

    def __init__(self, dataset: str, fold: str, leaf: str, w: Any, measured_s: float, predicted_s: float) -> None:
        self.dataset, self.fold, self.leaf = dataset, fold, leaf
        self.gpu, self.precision, self.schedule = w.cluster.gpu.name, w.plan.precision.value, w.plan.schedule.value
        self.measured_s, self.predicted_s = measured_s, predicted_s
        self.r = math.log(measured_s / predicted_s)


def _leaf(w: Any) -> Tuple[str, float]:
    """(leaf class, in-sample predicted seconds) of a workload on the shipped constants."""
    from vtrain.cost.analytical import AnalyticalCostModel
    from vtrain.sim.simulator import host_fraction, leaf_regime, simulate_workload

    report, _ = simulate_workload(w, AnalyticalCostModel(w))
    return leaf_regime(w, report.provenance, host_fraction(report)), report.iteration_time_s


def a100_rows() -> List[Row]:
    from vtrain.config.compose import load_group_config
    from vtrain.config.schema import ClusterConfig
    from vtrain.validation.datasets import single_node_workloads, weak_scaling_workloads
    from vtrain.validation.weak_scaling import weak_scaling_cluster

    cluster = load_group_config("cluster", "vtrain_a100", ClusterConfig)
    single, _, _ = single_node_workloads(cluster, None, "megatron_deepspeed_2022")
    weak, _, _ = weak_scaling_workloads(weak_scaling_cluster(str(cluster.gpu)))
    by_set = {"single_node": single, "weak_scaling": weak}
    with CV_FILE.open(newline="") as fh:
        recs = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    out = []
    for rec in recs:
        w = by_set[rec["dataset"]][int(rec["row"]) - 1]
        leaf, in_sample = _leaf(w)
        if not math.isclose(in_sample, float(rec["in_sample_s"]), rel_tol=1e-4):
            raise SystemExit(f"{CV_FILE}: {rec['dataset']} row {rec['row']} was predicted {rec['in_sample_s']} s, "
                             f"now {in_sample:.6g} s: the model or constants changed; rerun bench/cv_a100.py")
        name = "a100_single_node" if rec["dataset"] == "single_node" else "megatron_2021_weak_scaling"
        out.append(Row(name, f"{name}:{rec['fold']}", leaf, w, float(rec["measured_s"]), float(rec["held_out_s"])))
    return out


def transferred_rows() -> List[Row]:
    from vtrain.config.compose import load_gpu_config, load_group_config, load_stack_config
    from vtrain.config.schema import ClusterConfig
    from vtrain.errors import ConfigError
    from vtrain.validation.csv_io import read_measurements
    from vtrain.validation.datasets import SHIPPED_STACK, resolve_dataset, shipped_defaults
    from vtrain.validation.rows import row_workload
    from vtrain.validation.run import measured_ms

    load_gpu = functools.lru_cache(maxsize=None)(load_gpu_config)
    load_stack = functools.lru_cache(maxsize=None)(load_stack_config)
    out = []
    for name, cluster_name in TRANSFERRED.items():
        cluster = load_group_config("cluster", cluster_name, ClusterConfig)
        for row in read_measurements(resolve_dataset(name)):
            try:
                w = row_workload(row, cluster, load_gpu, load_stack, shipped_defaults(name), SHIPPED_STACK[name])
            except ConfigError:
                continue  # task=validate skips it too
            ms, _ = measured_ms(row, w)
            leaf, pred = _leaf(w)
            out.append(Row(name, f"{name}:row={row.index}", leaf, w, ms / 1e3, pred))
    return out


def fit_classes(rows: Sequence[Row]) -> Dict[str, Dict[str, Any]]:
    by: Dict[str, List[float]] = defaultdict(list)
    for row in rows:
        for k in iv.lineage(row.leaf):
            by[k].append(row.r)
    out: Dict[str, Dict[str, Any]] = {}
    for k in sorted(by):
        q = iv.conformal_quantiles(by[k])
        out[k] = {"n": len(by[k]), "q_lo": None if q is None else round(q[0], 5),
                  "q_hi": None if q is None else round(q[1], 5)}
    return out


def validated(rows: Sequence[Row]) -> Tuple[Dict[str, List[str]], Dict[str, Dict[str, int]]]:
    """(validated values, rows per value) of each feature: a value needs >= min_finite_n() rows."""
    counts = {k: Counter(getattr(r, k) for r in rows) for k in ("gpu", "precision", "schedule")}
    return ({k: sorted(v for v, n in c.items() if n >= iv.min_finite_n()) for k, c in counts.items()},
            {k: dict(sorted(c.items())) for k, c in counts.items()})


def lookup_table(rows: Sequence[Row]) -> iv.IntervalTable:
    """The table a simulation would use, fitted on ``rows``."""
    return iv.IntervalTable({"classes": fit_classes(rows), "min_class_n": MIN_CLASS_N, "validated": validated(rows)[0]})


def nested(rows: Sequence[Row]) -> List[Tuple[Row, float, float, str]]:
    """Each row with the interval a simulation would give it from the table refitted without its fold."""
    out = []
    for fold in sorted({r.fold for r in rows}):
        table = lookup_table([r for r in rows if r.fold != fold])
        for r in rows:
            if r.fold == fold:
                got = table.interval(r.gpu, r.precision, r.schedule, r.leaf)
                out.append((r, got.lo_factor, got.hi_factor, got.regime))
    return out


def coverage_table(checked: Sequence[Tuple[Row, float, float, str]]) -> Dict[str, Dict[str, Any]]:
    groups: Dict[str, List[Tuple[bool, float]]] = defaultdict(list)
    for r, lo, hi, used in checked:
        hit = lo <= r.measured_s / r.predicted_s <= hi
        keys = [*iv.lineage(r.leaf), f"dataset:{r.dataset}", "all"] + ([used] if used == iv.UNVALIDATED else [])
        for k in keys:
            groups[k].append((hit, hi / lo))
    return {k: {"n": len(v), "coverage_pct": round(100.0 * sum(h for h, _ in v) / len(v), 1),
                "median_width_ratio": round(float(np.median([x for _, x in v])), 3)}
            for k, v in sorted(groups.items())}


def plot(checked: Sequence[Tuple[Row, float, float, str]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("a100_single_node", "A100 single node (fitted; leave-one-shape-out)"),
              ("megatron_2021_weak_scaling", "A100 weak scaling (fitted; leave-one-row-out)"),
              ("torchtitan", "H100 torchtitan (transferred)"),
              ("megatron_moe_qwen3_h100", "H100 Megatron-Core MoE (transferred)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 3.8), sharey=True)
    for ax, (name, title) in zip(axes, panels):
        pts = sorted((c for c in checked if c[0].dataset == name), key=lambda c: c[0].predicted_s)
        x = np.arange(len(pts))
        ratio = np.array([c[0].measured_s / c[0].predicted_s for c in pts])
        lo = np.array([c[1] for c in pts])
        hi = np.array([c[2] for c in pts])
        hit = (lo <= ratio) & (ratio <= hi)
        ax.vlines(x, lo, hi, color="0.75", lw=1.5 if len(pts) < 100 else 0.4, label="80% interval (held out)")
        size = 3 if len(pts) > 100 else 10
        ax.scatter(x[hit], ratio[hit], s=size, color="tab:blue", label="measured inside", zorder=3)
        ax.scatter(x[~hit], ratio[~hit], s=size, color="tab:red", label="measured outside", zorder=3)
        ax.axhline(1.0, color="k", lw=0.6)
        ax.set_yscale("log")
        ticks = [0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0]
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_title(f"{title}\ncoverage {100 * hit.mean():.0f}% of {len(pts)}", fontsize=8)
        ax.set_xlabel("runs, by predicted iteration time")
    axes[0].set_ylabel("measured / predicted iteration time")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = ArgumentParser()
    ap.add_argument("--plot", type=new_file, default=None, help="write the held-out interval plot here (PNG)")
    ap.add_argument("--check", action="store_true", help="do not write the table; fail if it is out of date")
    args = ap.parse_args(argv)
    rows = a100_rows() + transferred_rows()
    classes = fit_classes(rows)
    checked = nested(rows)
    coverage = coverage_table(checked)
    cv_header = CV_FILE.read_text().splitlines()[0].lstrip("# ")
    valid, per_value = validated(rows)
    counts = {d: sum(r.dataset == d for r in rows) for d in sorted({r.dataset for r in rows})}
    table = {
        "method": "split-conformal (Vovk et al. 2005; Lei et al. 2018) on log(measured/predicted), equal-tailed "
                  "80%: k_lo = floor((n+1)*0.1), k_hi = ceil((n+1)*0.9) order statistics; per regime class "
                  "(vtrain/sim/intervals.py), classes under min_class_n residuals widen their parent's interval",
        "command": "python bench/fit_intervals.py",
        "generated": datetime.date.today().isoformat(),
        "level": iv.LEVEL, "min_class_n": MIN_CLASS_N, "host_bound_fraction": iv.HOST_BOUND_FRACTION,
        "data": {
            "a100_single_node": f"{counts.get('a100_single_node', 0)} runs; held-out predictions of the joint "
                                "A100 fit, leave-one-(t,d,p)-shape-out (18 folds): " + cv_header,
            "megatron_2021_weak_scaling": f"{counts.get('megatron_2021_weak_scaling', 0)} rows; held-out "
                                          "predictions, leave-one-row-out (10 folds), same file",
            "torchtitan": f"{counts.get('torchtitan', 0)} runs on h100x1024, transferred constants: plain "
                          "predictions (never fitted on)",
            "megatron_moe_qwen3_h100": f"{counts.get('megatron_moe_qwen3_h100', 0)} runs on h100x1024, "
                                       "transferred constants: plain predictions",
        },
        "validated_rule": f"a gpu, precision or schedule is validated when >= {iv.min_finite_n()} rows (the fewest "
                          "that give a finite 80% interval) carry it; rarer values still add their residuals "
                          "to their class, but a plan using them gets the unvalidated interval",
        "validated": valid,
        "rows_per_feature": per_value,
        "classes": classes,
        "heldout_coverage": coverage,
    }
    text = json.dumps(table, indent=1) + "\n"
    if args.check:
        old = json.loads(TABLE.read_text())
        if old["classes"] != classes:
            raise SystemExit(f"{TABLE} is out of date: run python bench/fit_intervals.py")
    else:
        TABLE.write_text(text)
        print(f"wrote {TABLE}")
    final = iv.IntervalTable(table)
    print("| class | n | 80% interval (x predicted) | held-out coverage | n held out |")
    print("|---|---|---|---|---|")
    for k, c in classes.items():
        res = iv.resolve(k, classes, MIN_CLASS_N)
        if res is None:
            continue
        lo, hi = iv.factors(res[0], res[1])
        cov = coverage.get(k, {})
        src = "" if res[2] == k else f" (from {res[2]})"
        print(f"| {k} | {c['n']} | x{lo:.2f} to x{hi:.2f}{src} | {cov.get('coverage_pct', float('nan')):.1f}% | "
              f"{cov.get('n', 0)} |")
    wlo, whi = iv.factors(*final.widest)
    unv = coverage.get(iv.UNVALIDATED, {})
    print(f"| unvalidated (a rare gpu, precision or schedule) | | x{wlo:.2f} to x{whi:.2f} | "
          f"{unv.get('coverage_pct', float('nan')):.1f}% | {unv.get('n', 0)} |")
    for k in [k for k in coverage if k.startswith("dataset:") or k == "all"]:
        print(f"| {k} | | | {coverage[k]['coverage_pct']:.1f}% | {coverage[k]['n']} |")
    if args.plot:
        plot(checked, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
