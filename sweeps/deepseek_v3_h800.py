"""Issue 13's acceptance case: the plan search for DeepSeek-V3 on 2,048 H800 (``+experiment=deepseek_v3_h800``)
and where the published layout (PP16 x EP64, ZeRO-1, DualPipe, DeepEP, FP8; the preset's parallelism) ranks
among the plans the search evaluated, by time to train and by cost. Also the same layout with full recompute,
the memory-safe variant (README, "DeepSeek-V3 on 2,048 H800").

Run:  python sweeps/deepseek_v3_h800.py [overrides ...]      e.g. search.seed=1 search.n_trials=500
"""
from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, List

from vtrain.config.build import build_workload
from vtrain.config.compose import compose
from vtrain.io.labels import fmt_days, fmt_usd, plan_label
from vtrain.search.run import run_search
from vtrain.workload.enums import Recompute

GIB = 2**30
PRESET = ["+experiment=deepseek_v3_h800", "tracking=off", "search.progress_bar=false"]


def rank(value: float, others: List[float]) -> int:
    """1 + how many evaluated plans are strictly better (smaller)."""
    return 1 + sum(1 for o in others if o < value)


def describe(name: str, ev: Any, plan: Any, times: List[float], costs: List[float]) -> None:
    out = ev.evaluate(plan)
    report, _ = ev.simulate(plan)
    t, c = report.time_to_train_s, report.cost_usd
    fit = "fits" if out.feasible else f"infeasible ({out.reason})"
    print(f"{name}: {plan_label(plan)} on {plan.num_gpus} GPUs: {fmt_days(t)}, {fmt_usd(c)}, MFU "
          f"{100 * report.mfu:.1f}%, {report.peak_memory_bytes / GIB:.1f} GiB/GPU: {fit}")
    print(f"  would rank {rank(t, times)} of {len(times)} feasible by time to train, {rank(c, costs)} by cost")


def main(argv: List[str]) -> int:
    cfg = compose([*PRESET, "task=search", *argv])
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        result = run_search(cfg, Path(tmp))
        wall = time.perf_counter() - t0
    uniq = {r.plan_key: r for r in result.feasible}.values()
    times = sorted(r.metrics["time_to_train_s"] for r in uniq)
    costs = sorted(r.metrics["cost_usd"] for r in uniq)
    print(f"search: {len(result.records)} trials, {len(times)} feasible distinct plans, {len(result.front)} on the "
          f"Pareto front, {wall:.1f} s")
    for key, what in (("time", "fastest"), ("cost", "cheapest")):
        rec = result.best[key]
        print(f"{what}: {plan_label(rec.plan or {})} on {rec.metrics['gpus_used']:.0f} GPUs: "
              f"{fmt_days(rec.metrics['time_to_train_s'])}, {fmt_usd(rec.metrics['cost_usd'])}")
    ev = result.context.evaluator
    published = build_workload(compose([*PRESET, *argv])).plan
    describe("published", ev, published, times, costs)
    full = dataclasses.replace(published, recompute=Recompute.FULL)
    describe("published, full recompute", ev, full, times, costs)
    return 0


if __name__ == "__main__":
    from vtrain.cli.main import run_script

    run_script(lambda: main(sys.argv[1:]), sys.argv[1:])
