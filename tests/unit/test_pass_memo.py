"""vtrain.sim.pass_memo: plans that share their passes reuse the priced passes, and every report equals the
one of a fresh simulation (nothing memoised), over a sample of plans that differ in dp, ZeRO stage and the
optimizer's sharding, dense and MoE, 1F1B, interleaved and DualPipe."""
import dataclasses
import itertools

import pytest

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.sim import pass_memo
from vtrain.sim.pipeline import clear_runs
from vtrain.sim.simulator import simulate_workload
from vtrain.sim.structure import clear_structures

CASES = {
    "gpt3": (["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=8", "parallelism.dp=8"],
             {"dp": (1, 2, 8), "zero_stage": (0, 1, 3), "schedule": ("1f1b", "interleaved")}),
    "moe": (["+model=qwen3_30b_a3b", "+cluster=h100x1024", "parallelism.tp=2", "parallelism.pp=2",
             "parallelism.dp=8", "parallelism.ep=4", "parallelism.sequence_parallel=true",
             "training.global_batch_size=256", "training.seq_len=4096"],
            {"dp": (4, 8), "zero_stage": (1, 3), "schedule": ("1f1b", "dualpipe")}),
}


def _plans(w, axes):
    from vtrain.workload.enums import Schedule

    for values in itertools.product(*axes.values()):
        change = dict(zip(axes, values))
        change["schedule"] = Schedule(change["schedule"])
        change["virtual_stages"] = 2 if change["schedule"] == Schedule.INTERLEAVED else 1
        yield dataclasses.replace(w.plan, **change)


def _fresh(w, cost):
    pass_memo.clear_passes()
    clear_structures()
    clear_runs()
    return simulate_workload(w, cost)[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_memoised_passes_give_the_reports_of_fresh_simulations(name):
    overrides, axes = CASES[name]
    base = build_workload(compose(overrides))
    cost = cost_model_for(base)
    workloads = [dataclasses.replace(base, plan=plan) for plan in _plans(base, axes)]
    pass_memo.clear_passes()
    memoised = [simulate_workload(w, cost)[0] for w in workloads]
    assert len(pass_memo._PASSES) < len(workloads)  # plans differing in dp / ZeRO-1 shared their passes
    for w, report in zip(workloads, memoised):
        assert report == _fresh(w, cost), w.plan


def test_a_new_cost_model_prices_anew():
    w = build_workload(compose(CASES["gpt3"][0]))
    pass_memo.clear_passes()
    simulate_workload(w, cost_model_for(w))
    simulate_workload(w, cost_model_for(w))
    assert len(pass_memo._PASSES) == 2
