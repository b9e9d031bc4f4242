"""The pipeline phase runs in O(pp): a few simulated periods extrapolated exactly (vtrain.sim.pipeline)."""
import random
from dataclasses import replace

import pytest

from tests.sampling import fast_every
from tests.simruns import extrapolated_and_full
from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.errors import ConfigError
from vtrain.search.space import enumerate_plans, plan_space
from vtrain.sim import simulator
from vtrain.sim.pipeline import simulate_pipeline
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.enums import Schedule


def _close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(1e-9, abs(b))


@pytest.mark.slow
def test_extrapolated_and_full_runs_agree_on_a_sample_of_the_gpt3_grid():
    cfg = compose(["+model=gpt175b", "+cluster=a100x1024"])
    w = build_workload(cfg)
    space = plan_space(w.model, w.cluster, replace(w.plan, tp=1, pp=1, dp=1), cfg.search)
    plans = [p for p in enumerate_plans(space) if p.pp > 1]
    sample = random.Random(0).sample(plans, 40)
    for plan in sample:
        fast, full = extrapolated_and_full(replace(w, plan=plan))
        assert _close(fast.iteration_time_s, full.iteration_time_s), plan
        for a, b in zip(fast.stages, full.stages):
            for f in ("compute_s", "host_overhead_s", "exposed_comm_s", "bubble_s", "optimizer_s"):
                x, y = getattr(a, f), getattr(b, f)
                assert _close(x, y, 1e-8) or abs(x - y) < 1e-12, (plan, f)


@pytest.mark.parametrize("schedule,v", fast_every(2, [(Schedule.ONE_F_ONE_B, 1), (Schedule.INTERLEAVED, 2)]))
def test_simulated_micro_batches_do_not_grow_with_the_batch(schedule, v):
    """The simulated schedule stays a few periods long from global batch 256 to 65,536."""
    sizes = []
    for gbs in (256, 4096, 65536):
        cfg = compose(["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16",
                       "parallelism.dp=1", f"training.global_batch_size={gbs}",
                       f"parallelism.schedule={schedule.value}", f"parallelism.virtual_stages={v}"])
        w = build_workload(cfg)
        seen = []
        orig = simulator.simulate_pipeline

        def spy(*a, **k):
            r = orig(*a, **k)
            seen.append(r)
            return r
        simulator.simulate_pipeline = spy
        try:
            fast, _ = simulate_workload(w, cost_model_for(w))
        finally:
            simulator.simulate_pipeline = orig
        res = seen[0]
        assert res.schedule.m + res.periods_added * (16 if v > 1 else 1) == w.plan.num_microbatches
        sizes.append(res.schedule.m)
        if gbs == 4096:
            full = extrapolated_and_full(w)[1]
            assert _close(fast.iteration_time_s, full.iteration_time_s)
    assert max(sizes) <= 16 * 10 and len(set(sizes)) <= 2


def test_gpipe_runs_in_full_and_refuses_unbounded_work():
    durations = [1.0, 2.0] * 4
    res = simulate_pipeline(Schedule.GPIPE, 4, 1, 8, durations, [0.0] * 8, durations, [0.0] * 8)
    assert res.periods_added == 0 and max(res.stage_end) == pytest.approx((8 + 3) * 3.0)
    with pytest.raises(ConfigError, match="above the simulation limit"):
        simulate_pipeline(Schedule.GPIPE, 4, 1, 10**6, durations, [0.0] * 8, durations, [0.0] * 8)


def test_eight_million_micro_batches_on_one_replica_stay_cheap_and_exact():
    """2^23 micro-batches of 2,048 tokens (the schema's 2^34-token cap) simulate in O(pp) and the time is exact:
    each extra micro-batch adds one steady-state period, so t(2^23) - t(2^22) = 2 (t(2^22) - t(2^21))."""
    import time

    def run(m):
        cfg = compose(["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16",
                       "parallelism.dp=1", f"training.global_batch_size={m}"])
        w = build_workload(cfg)
        return simulator.simulate_workload(w, cost_model_for(w))[0]

    start = time.process_time()
    big, mid, small = run(2**23), run(2**22), run(2**21)
    assert time.process_time() - start < 30.0  # three runs of 2M-8M micro-batches, not a walk over them
    assert big.plan.num_microbatches == 2**23
    period = (mid.iteration_time_s - small.iteration_time_s) / 2**21
    assert big.iteration_time_s - mid.iteration_time_s == pytest.approx(2**22 * period, rel=1e-9)
    # the pipeline's fill and drain (15 periods of 2^23) and the optimizer step vanish at this size
    assert big.iteration_time_s == pytest.approx(2**23 * period, rel=1e-4)


def test_plans_that_differ_in_dp_alone_share_one_simulated_run_and_match_a_fresh_one():
    from vtrain.sim import pipeline

    base = ["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16"]
    w8, w4 = (build_workload(compose([*base, f"parallelism.dp={d}"])) for d in (8, 4))
    assert w8.plan.num_microbatches != w4.plan.num_microbatches
    pipeline.clear_runs()
    r8, _ = simulate_workload(w8, cost_model_for(w8))
    runs = len(pipeline._RUNS)
    r4, _ = simulate_workload(w4, cost_model_for(w4))
    assert len(pipeline._RUNS) == runs  # the dp=4 plan reused the dp=8 plan's run
    pipeline.clear_runs()
    fresh, _ = simulate_workload(w4, cost_model_for(w4))
    assert r4 == fresh and r4.iteration_time_s != r8.iteration_time_s


def test_the_run_memo_stays_bounded(monkeypatch):
    """Entries cost their per-stage sums (5p + p·v units) or, when a timeline keeps the task arrays, their
    tasks; the memo evicts the least recently used beyond its bound."""
    from vtrain.sim import pipeline

    monkeypatch.setattr(pipeline, "_RUNS_MAX_TASKS", 500)
    pipeline.clear_runs()
    p = 8  # 48 units a run without task arrays: 40 distinct runs exceed the bound
    for i in range(40):
        simulate_pipeline(Schedule.ONE_F_ONE_B, p, 1, 64, [1.0 + i * 1e-3, 2.0] * p, [0.1] * (2 * p),
                          [0.0] * (2 * p), [0.0] * (2 * p))
    assert sum(pipeline._units.values()) == pipeline._runs_tasks <= 500
    assert 0 < len(pipeline._RUNS) < 40 and all(not run.end for _, run, _, _ in pipeline._RUNS.values())
    traced = simulate_pipeline(Schedule.GPIPE, p, 1, 200, [1.0, 2.0] * p, [0.1] * (2 * p), [0.0] * (2 * p),
                               [0.0] * (2 * p), keep_tasks=True)
    assert len(traced.run.end) == 3_200  # the caller gets every task; the memo does not keep 3,200 tasks
    assert sum(pipeline._units.values()) == pipeline._runs_tasks <= 500
    pipeline.clear_runs()


def test_the_run_memo_is_safe_from_threads(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from vtrain.sim import pipeline

    monkeypatch.setattr(pipeline, "_RUNS_MAX_TASKS", 1_000)
    pipeline.clear_runs()
    p = 8

    def run(i):
        return simulate_pipeline(Schedule.ONE_F_ONE_B, p, 1, 64, [1.0 + (i % 7) * 1e-3, 2.0] * p, [0.1] * (2 * p),
                                 [0.0] * (2 * p), [0.0] * (2 * p)).stage_end

    with ThreadPoolExecutor(4) as pool:
        ends = list(pool.map(run, range(200)))
    assert all(ends[i] == ends[i % 7] for i in range(200))
    assert sum(pipeline._units.values()) == pipeline._runs_tasks <= 1_000
    pipeline.clear_runs()


@pytest.mark.parametrize("schedule,v", [(Schedule.ONE_F_ONE_B, 1), (Schedule.INTERLEAVED, 2)])
def test_recording_from_the_window_changes_no_float(schedule, v):
    """The engine's sums-only prefix runs the same arithmetic: ends, per-stage sums and every recorded task
    equal the full recording's exactly."""
    from vtrain.sim.engine import run_pipeline
    from vtrain.sim.schedule import compile_schedule

    p = 6
    cs = compile_schedule(schedule, p, v, 8 * p, False)
    n_pass = 2 * p * v
    gpu_s = [1.0 + 0.01 * (i % 5) for i in range(n_pass)]
    args = (gpu_s, [0.05 + 0.001 * i for i in range(2 * p * v)], [x * 0.9 for x in gpu_s], [0.2] * n_pass)
    full = run_pipeline(cs, *args)
    start = cs.window_start
    assert 0 < start < len(cs.stage)
    part = run_pipeline(cs, *args, record_from=start)
    assert part.end == full.end and part.stage_end == full.stage_end
    assert (part.stage_bubble, part.stage_p2p, part.stage_host) == (full.stage_bubble, full.stage_p2p, full.stage_host)
    for name in ("host_free", "bubble", "p2p", "host"):
        assert getattr(part, name)[start:] == getattr(full, name)[start:]
