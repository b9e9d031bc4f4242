"""Median in-process time of simulate() for the issue's reference plans.

    python bench/bench_simulate.py

Reports the cold call (schedule DAG compiled) and the warm median (DAG cached, as in a search), plus
the time to build a Workload from a composed config. Targets: GPT-3 175B (8,16,8) on 1,024 A100
<= 2 ms; MT-NLG 530B (8,12,35) on 3,360 A100 <= 20 ms.
"""
from __future__ import annotations

import statistics
import time

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.sim.schedule import compile_schedule
from vtrain.sim.simulator import simulate_workload

CASES = {
    "gpt175b (8,16,8) mb=1 on a100x1024": ["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8",
                                           "parallelism.pp=16", "parallelism.dp=8", "parallelism.micro_batch_size=1"],
    "mtnlg530b (8,12,35) mb=1 on a100x3360": ["+model=mtnlg530b", "+cluster=a100x3360", "parallelism.tp=8",
                                              "parallelism.pp=35", "parallelism.dp=12",
                                              "parallelism.micro_batch_size=1", "training.global_batch_size=1920"],
}


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    print(f"{'case':42s} {'cold ms':>8} {'warm median ms':>15} {'build ms':>9} {'tasks':>7}")
    for name, overrides in CASES.items():
        cfg = compose(overrides)
        w = build_workload(cfg)
        cm = cost_model_for(w)
        compile_schedule.cache_clear()
        t0 = time.perf_counter()
        simulate_workload(w, cm)
        cold = (time.perf_counter() - t0) * 1e3
        warm = median_ms(lambda: simulate_workload(w, cost_model_for(w)), 30)
        build = median_ms(lambda: build_workload(cfg), 10)
        tasks = len(compile_schedule(w.plan.schedule, w.plan.pp, w.plan.chunks, w.plan.num_microbatches).stage)
        print(f"{name:42s} {cold:8.2f} {warm:15.2f} {build:9.2f} {tasks:7d}")


if __name__ == "__main__":
    main()
