"""In-process time of one prediction, for the reference plans and modern ones.

    python bench/bench_simulate.py            # the table of the README's Speed section
    python bench/bench_simulate.py --batch    # warm time over global batch 256 .. 65,536 (grows with pp, not m)

Per case: the cold call (schedule DAG compiled, partition and op graph built), the warm engine call
(`simulate_workload` on a built Workload: how a search calls it), the public `simulate(cfg)` on a composed
config (build + engine), the same with the build's per-group memo and the engine's structures (partition,
op graph: `vtrain.sim.structure`) emptied before each call (every group rebuilt and validated: the cost
of a config never seen before, its schedule DAG compiled), and the build alone (memo hit). The warm
and public figures keep what a search keeps across plans: the compiled schedule, the partition and the
op graph (structure, no prices). The engine's memos of priced passes and of recent pipeline runs (which
a search hits across plans that differ in dp alone) are emptied before every timed call
(`vtrain.sim.pass_memo.clear_passes`, `vtrain.sim.pipeline.clear_runs`): every figure prices every op and
includes the event simulation. Each figure is the minimum over 7 repeats of the mean of a batch of calls,
in CPU time of this process (`time.process_time`): on a shared 2-core machine the minimum is the least
disturbed figure.
Targets (issue 11): public simulate of GPT-3 175B (8,16,8) <= 1 ms, MT-NLG 530B (8,35,12) <= 2 ms.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Dict, List

from vtrain import compose, simulate
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload, clear_memo
from vtrain.sim.pass_memo import clear_passes
from vtrain.sim.pipeline import clear_runs
from vtrain.sim.schedule import compile_schedule
from vtrain.sim.simulator import simulate_workload
from vtrain.sim.structure import clear_structures

GPT3 = ["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8",
        "parallelism.micro_batch_size=1"]
CASES: Dict[str, List[str]] = {
    "GPT-3 175B (8,16,8), 1,024 A100": GPT3,
    "MT-NLG 530B (8,35,12), 3,360 A100": ["+model=mtnlg530b", "+cluster=a100x3360", "parallelism.tp=8",
                                          "parallelism.pp=35", "parallelism.dp=12", "parallelism.micro_batch_size=1",
                                          "training.global_batch_size=1920"],
    "Llama-3 70B fp8, ZeRO-3, TP8 x CP2, 1,024 H100": [
        "+model=llama3_70b", "+cluster=h100x1024", "+stack=megatron_core_te", "parallelism.tp=8",
        "parallelism.cp=2", "parallelism.pp=1", "parallelism.dp=64", "parallelism.zero_stage=3",
        "parallelism.sequence_parallel=true", "parallelism.micro_batch_size=1", "training.precision=fp8",
        "training.seq_len=8192", "training.global_batch_size=512"],
    "Qwen3-235B-A22B, EP32, VPP4, 256 H100": [
        "+model=qwen3_235b_a22b", "+cluster=h100x1024", "parallelism.tp=2", "parallelism.pp=8",
        "parallelism.dp=16", "parallelism.ep=32", "parallelism.etp=1", "parallelism.schedule=interleaved",
        "parallelism.virtual_stages=4",
        "parallelism.moe_dispatcher=deepep", "parallelism.sequence_parallel=true", "parallelism.micro_batch_size=1",
        "training.seq_len=4096", "training.global_batch_size=2048"],
    "DeepSeek-V3, PP16 x EP64, DualPipe, 2,048 H800": [
        "+model=deepseek_v3", "+cluster=h800x2048", "parallelism.tp=1", "parallelism.pp=16", "parallelism.dp=128",
        "parallelism.ep=64", "parallelism.schedule=dualpipe", "parallelism.moe_dispatcher=deepep",
        "parallelism.sequence_parallel=false",
        "parallelism.micro_batch_size=1", "training.seq_len=4096", "training.global_batch_size=15360"],
}


def forget_prices() -> None:
    """Empty the memos of priced passes and pipeline runs: the timed call prices every op and simulates."""
    clear_passes()
    clear_runs()


def min_mean_ms(fn: Callable[[], object], calls: int, repeats: int = 7) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - t0) / calls)
    return best * 1e3


def table() -> None:
    print("| plan | tasks | cold ms | warm engine ms | public simulate(cfg) ms | public, memo emptied ms | build ms |")
    print("|---|---|---|---|---|---|---|")
    for name, overrides in CASES.items():
        try:
            cfg = compose(overrides)
            w = build_workload(cfg)
        except Exception as err:  # a preset the current configs reject: say so, measure the rest
            print(f"| {name} | - | {type(err).__name__}: {err} | | | | |")
            continue
        compile_schedule.cache_clear()
        clear_structures()
        t0 = time.process_time()
        simulate_workload(w, cost_model_for(w))
        cold = (time.process_time() - t0) * 1e3
        warm = min_mean_ms(lambda: priced_afresh(lambda: simulate_workload(w, cost_model_for(w))), 20)
        public = min_mean_ms(lambda: priced_afresh(lambda: simulate(cfg)), 10)
        fresh = min_mean_ms(lambda: priced_afresh(lambda: simulate(cfg), structures=True), 10)
        build = min_mean_ms(lambda: build_workload(cfg), 10)
        tasks = len(compile_schedule(w.plan.schedule, w.plan.pp, w.plan.chunks, w.plan.num_microbatches).stage)
        print(f"| {name} | {tasks:,} | {cold:.1f} | {warm:.2f} | {public:.2f} | {fresh:.2f} | {build:.2f} |")


def priced_afresh(call: Callable[[], object], structures: bool = False) -> object:
    """``call()`` with the memos of priced passes and pipeline runs emptied (and, with ``structures``, every
    built structure and config group too), so it prices every op and runs the event simulation."""
    forget_prices()
    if structures:
        clear_memo()
        clear_structures()
    return call()


def batch_scaling() -> None:
    print("| global batch | micro-batches per replica | warm engine ms |")
    print("|---|---|---|")
    for gbs in (256, 1024, 4096, 16384, 65536):
        w = build_workload(compose([*GPT3, f"training.global_batch_size={gbs}"]))
        simulate_workload(w, cost_model_for(w))
        ms = min_mean_ms(lambda: priced_afresh(lambda: simulate_workload(w, cost_model_for(w))), 10)
        print(f"| {gbs:,} | {w.plan.num_microbatches:,} | {ms:.2f} |")


if __name__ == "__main__":
    batch_scaling() if "--batch" in sys.argv else table()
