"""The measured single-GPU training iterations of a profile folder, predicted again from its profile: as the ops
were timed (burst, boost clock) and with the folder's sustained-GEMM fraction (the power-capped clock a step
runs at; vtrain/profiler/sustained_gemm.py, vtrain/cost/profile_io.py: sustained_fraction).

    python bench/h200_measured.py [--profile profiles/measured/h200]

Reads ``validation*.csv`` (``task=measure`` rows, bench/gpu_run.sh) and ``sustained_gemm.csv`` of the folder;
each row is composed as task=measure composes it (one GPU, the profile's dtype, gradient accumulation) and
simulated with the profile-driven cost model. Nothing is fitted: the fraction comes from a GEMM running alone.
"""
from __future__ import annotations

import csv
import sys
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Sequence

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.cli.task_measure import single_device
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.config.compose import resolve
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.cost.profile_io import read_profile
from vtrain.cost.profiled import ProfiledCostModel, ProfileTable
from vtrain.errors import VtrainError
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import Gemm
from vtrain.graph.options import graph_options
from vtrain.io.args import ArgumentParser
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.partition import partition
from vtrain.workload.workload import Workload

ROOT = Path(__file__).resolve().parents[1]


def row_workload(row: dict, gpu: str) -> Workload:
    """The plan task=measure ran the row with: one GPU, the profile's dtype, its gradient accumulation."""
    cfg = compose([f"+model={row['model']}", f"+cluster={gpu}x8", f"model.num_layers={row['num_layers']}",
                   f"model.hidden_size={row['hidden_size']}", f"model.num_heads={row['num_heads']}",
                   f"model.max_seq_len={max(4096, int(row['seq_len']))}", f"training.seq_len={row['seq_len']}",
                   f"parallelism.micro_batch_size={row['micro_batch_size']}",
                   f"training.flash_attention={str(row['flash_attention']).lower()}"])
    resolve(cfg)
    single_device(cfg, row["dtype"], int(row["microbatches"]))
    return build_workload(cfg)


def predicted_s(w: Workload, profile: ProfileTable) -> float:
    return simulate_workload(w, cost_model_for(w, profile))[0].iteration_time_s


def gemm_curve_ratio(w: Workload, profile: ProfileTable) -> float:
    """The analytical GEMM curve (before gpu.sustained_gemm_fraction) over the profile's burst-timed GEMMs,
    summed over one layer's forward and backward GEMMs at the row's shapes."""
    analytical = AnalyticalCostModel(w)
    measured = ProfiledCostModel(profile, analytical, model=w.model, precision=w.plan.precision.value)
    graph = build_model_graph(w.model, w.plan, build_comm_plan(w, partition(w.model, w.plan)).tp,
                              opts=graph_options(w.stack))
    a = m = 0.0
    for op in (*graph.layer.forward.ops, *graph.layer.backward.ops):
        if not isinstance(op, Gemm):
            continue
        t = measured.lookup(op)
        if t is not None:
            a += analytical.compute_time_s(op) * w.cluster.gpu.sustained_gemm_fraction
            m += t
    return a / m


def main(argv: Sequence[str]) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=ROOT / "profiles" / "measured" / "h200")
    args = ap.parse_args(argv)
    try:
        table = read_profile(args.profile)
    except VtrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows: List[dict] = []
    for path in sorted(args.profile.glob("validation*.csv")):
        with path.open(newline="") as fh:
            rows += [dict(r, source=path.name) for r in csv.DictReader(fh)]
    if not rows or table.sustained_fraction is None:
        print(f"error: {args.profile} needs validation*.csv rows and a sustained_gemm.csv", file=sys.stderr)
        return 2
    burst = replace(table, sustained_fraction=None)
    shown = args.profile.resolve().relative_to(ROOT) if args.profile.resolve().is_relative_to(ROOT) else args.profile
    print(f"{shown}: {table.meta.device_name}, sustained GEMM fraction {table.sustained_fraction:.3f} "
          f"({len(rows)} measured iterations)")
    errs: Dict[str, List[float]] = {"burst": [], "sustained": []}
    plans = [row_workload(r, table.meta.gpu) for r in rows]
    for r, w in zip(rows, plans):
        measured = float(r["measured_s"])
        pb, ps = predicted_s(w, burst), predicted_s(w, table)
        errs["burst"].append(pb / measured - 1)
        errs["sustained"].append(ps / measured - 1)
        print(f"  L={int(r['num_layers']):2d} h={int(r['hidden_size']):4d} mb={r['micro_batch_size']} "
              f"s={r['seq_len']} ({r['iterations']} iterations, {r['source']}): measured {measured * 1e3:7.1f} ms, "
              f"ops as timed {pb * 1e3:7.1f} ms ({errs['burst'][-1]:+.1%}), sustained {ps * 1e3:7.1f} ms "
              f"({errs['sustained'][-1]:+.1%})")
    for k, e in errs.items():
        print(f"{k:>9}: MAPE {100 * sum(abs(x) for x in e) / len(e):.1f}%, mean signed {100 * sum(e) / len(e):+.1f}%")
    ratios = [gemm_curve_ratio(w, burst) for w in plans]
    print(f"analytical GEMM curve (gpu/{table.meta.gpu}.yaml, before its sustained_gemm_fraction) over the profile's "
          f"burst-timed GEMMs, per layer: {min(ratios):.3f}-{max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
