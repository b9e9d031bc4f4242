"""Megatron-Core's interleaved 1F1B with ``microbatch_group_size_per_vp_stage`` (N): the order of chunk passes
as its ``get_schedule_table`` builds it, its rules on N and the micro-batch count, its bubble, and the
extrapolated pipeline run against the full one."""
import random
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.config.validate import check_microbatch_group
from vtrain.errors import ConfigError
from vtrain.search.plans import canonical
from vtrain.sim.engine import run_pipeline
from vtrain.sim.pipeline import simulate_pipeline
from vtrain.sim.schedule import compile_schedule, interleaved_table, stage_order
from vtrain.workload.enums import Schedule
from vtrain.workload.plan import ParallelPlan


def test_the_table_is_megatrons_example():
    """schedules.py's own example, PP2 N3 M5 VP2: micro-batches 0 1 2 0 1 2 3 4 3 4, chunks 0 0 0 1 1 1 0 0 1 1."""
    table = interleaved_table(5, 2, 3)
    assert [i for _, i in table] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [c for c, _ in table] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_the_default_group_is_the_narayanan_order():
    """N = p: chunk (k // p) % v, micro-batch (k // (p v)) p + k % p (Narayanan et al. SC'21, Fig. 4)."""
    p, v, m = 4, 3, 8
    assert interleaved_table(m, v, p) == tuple(((k // p) % v, (k // (p * v)) * p + k % p) for k in range(m * v))


def test_the_last_stage_starts_its_backwards_after_v_minus_1_groups():
    """Warm-up (p-s-1)*2 + (v-1)*N: with p=4, v=2, N=6 the last stage runs 6 chunk-0 forwards, then the
    steady forward of micro-batch 0's chunk 1 and at once its backward (chunk 1, micro-batch 0)."""
    order = stage_order(Schedule.INTERLEAVED, 4, 2, 12, 3, group=6).tasks()
    assert order[:6] == [(0, 0, i) for i in range(6)]
    assert order[6:8] == [(0, 1, 0), (1, 1, 0)]


def _uniform_time(p, v, m, group):
    cs = compile_schedule(Schedule.INTERLEAVED, p, v, m, group=group)
    durations = []
    for _ in range(p):
        durations += [1.0 / v] * v + [2.0 / v] * v
    return max(run_pipeline(cs, durations, [0.0] * (2 * p * v), durations, [0.0] * len(durations)).stage_end)


@pytest.mark.parametrize("p,v,m,group", [(4, 2, 12, 6), (4, 2, 10, 5), (4, 2, 14, 5), (8, 2, 44, 12)])
def test_admitted_groups_keep_the_interleaved_bubble(p, v, m, group):
    """Uniform stages, no p2p: (m + (p-1)/v)(tf + tb) as with N = p (Narayanan et al. SC'21, Sec. 2.2)."""
    assert _uniform_time(p, v, m, group) == pytest.approx((m + (p - 1) / v) * 3.0)


def test_a_last_group_shorter_than_pp_stalls_as_megatron_warns():
    """m=13, N=5, p=4: a last group of 3 < p, which Megatron-Core refuses ("it introduces dependency bubbles
    in the pipeline"): the order runs, slower than the interleaved bubble of an admitted count."""
    assert _uniform_time(4, 3, 13, 5) > (13 + 3 / 3) * 3.0 + 1.0


def _plan(m, group, p=4, schedule=Schedule.INTERLEAVED):
    return ParallelPlan(tp=1, pp=p, dp=1, global_batch_size=m, schedule=schedule, virtual_stages=2,
                        microbatch_group_size_per_vp_stage=group)


@pytest.mark.parametrize("m,group,message", [
    (10, 0, "pp=4 must divide the number of micro-batches=10 with schedule=interleaved"),
    (12, 3, "microbatch_group_size_per_vp_stage=3: must be in [pp=4, micro-batches=12]"),
    (12, 13, "microbatch_group_size_per_vp_stage=13: must be in [pp=4, micro-batches=12]"),
    (13, 5, "microbatch_group_size_per_vp_stage=5: leaves a last group of 13%5=3 micro-batches"),
])
def test_megatrons_rules_on_the_group(m, group, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_microbatch_group(_plan(m, group))


@pytest.mark.parametrize("m,group", [(12, 0), (10, 5), (14, 5), (13, 13), (12, 4)])
def test_counts_megatron_admits(m, group):
    check_microbatch_group(_plan(m, group))
    assert _plan(m, group).microbatch_group == (group or 4)


@pytest.mark.parametrize("p,v,m,group,fused", [(8, 2, 208, 10, False), (8, 2, 209, 10, True),
                                               (4, 3, 62, 5, False), (16, 4, 200, 24, False)])
def test_extrapolated_runs_equal_full_ones(p, v, m, group, fused):
    """The shorter last group's units are kept out of the periodicity check: extrapolating whole groups
    gives the full run's end and waits on every stage."""
    rnd = random.Random(p * m + group)
    durations = [rnd.uniform(0.5, 2.0) for _ in range(p * 2 * v)]
    if fused:
        durations += [rnd.uniform(1.0, 3.0) for _ in range(p * v * v)] + [0.0]
    lags = [rnd.uniform(0.0, 0.1) for _ in range(2 * p * v)]
    host = [0.0] * len(durations)
    fast = simulate_pipeline(Schedule.INTERLEAVED, p, v, m, durations, lags, durations, host, group=group, fused=fused)
    full = simulate_pipeline(Schedule.INTERLEAVED, p, v, m, durations, lags, durations, host, full=True,
                             group=group, fused=fused)
    assert fast.periods_added > 0
    assert fast.stage_end == pytest.approx(full.stage_end, rel=1e-9)
    assert fast.bubble_s == pytest.approx(full.bubble_s, rel=1e-9, abs=1e-9)


_LLAMA = ["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=4", "parallelism.dp=1",
          "parallelism.schedule=interleaved", "parallelism.virtual_stages=2", "training.seq_len=4096",
          "parallelism.recompute=selective", "parallelism.sequence_parallel=false", "training.global_batch_size=10"]


def test_a_count_not_a_multiple_of_pp_simulates_with_a_group():
    """10 micro-batches on pp=4: refused with the default group, simulated with N=5 (two groups) and N=10 (one
    group); the larger group holds more chunks in flight (warm-up (v-1)*N) and so more memory, and both keep
    the interleaved bubble, so their times agree within 1%."""
    with pytest.raises(ConfigError, match="pp=4 must divide the number of micro-batches=10"):
        simulate(compose(_LLAMA))
    runs = [simulate(compose([*_LLAMA, f"parallelism.microbatch_group_size_per_vp_stage={n}"])) for n in (5, 10)]
    assert runs[1].peak_memory_bytes > runs[0].peak_memory_bytes
    assert runs[1].iteration_time_s == pytest.approx(runs[0].iteration_time_s, rel=0.01)


def test_a_search_keeps_the_group_only_where_megatron_admits_it():
    plan = replace(_plan(10, 5), virtual_stages=2)
    assert canonical(plan).microbatch_group_size_per_vp_stage == 5
    assert canonical(replace(plan, global_batch_size=13)).microbatch_group_size_per_vp_stage == 0
    assert canonical(replace(plan, schedule=Schedule.ONE_F_ONE_B, virtual_stages=1)
                     ).microbatch_group_size_per_vp_stage == 0
