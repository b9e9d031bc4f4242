"""Pipeline schedules: orders, dependencies and bubble sizes from the event simulation."""
import random

import pytest

from vtrain.sim.engine import run_pipeline
from vtrain.sim.schedule import compile_schedule, stage_order
from vtrain.workload.enums import Schedule


def uniform(cs, tf, tb):
    v = cs.v
    durations = []
    for _ in range(cs.p):
        durations += [tf / v] * v + [tb / v] * v
    return run_pipeline(cs, durations, [0.0] * (2 * cs.p * v))


@pytest.mark.parametrize("p,m", [(1, 8), (2, 8), (4, 8), (4, 16), (8, 8)])
def test_1f1b_closed_form_without_communication(p, m):
    """Uniform stages, no p2p: 1F1B takes (m + p - 1)(tf + tb) (Narayanan et al. 2021, Sec. 2.2)."""
    run = uniform(compile_schedule(Schedule.ONE_F_ONE_B, p, 1, m), 1.0, 2.0)
    assert max(run.stage_end) == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("p,m,v", [(2, 8, 2), (4, 8, 2), (4, 16, 4)])
def test_interleaved_reduces_bubble(p, m, v):
    """Interleaving divides the bubble by v: (m + (p-1)/v)(tf + tb) (Narayanan et al. SC'21, Sec. 2.2)."""
    run = uniform(compile_schedule(Schedule.INTERLEAVED, p, v, m), 1.0, 2.0)
    assert max(run.stage_end) == pytest.approx((m + (p - 1) / v) * 3.0)


def test_gpipe_same_time_more_memory_order():
    order = stage_order(Schedule.GPIPE, 4, 1, 6, 0)
    assert [t[0] for t in order] == [0] * 6 + [1] * 6


def test_1f1b_warmup_depth():
    order = stage_order(Schedule.ONE_F_ONE_B, 4, 1, 8, 0)
    assert [t[0] for t in order[:4]] == [0, 0, 0, 0] and order[4][0] == 1
    last = stage_order(Schedule.ONE_F_ONE_B, 4, 1, 8, 3)
    assert [t[0] for t in last[:4]] == [0, 1, 0, 1]


def test_p2p_lag_delays_dependants():
    cs = compile_schedule(Schedule.ONE_F_ONE_B, 2, 1, 1)
    # lags: [fwd into q0 (unused), bwd into q0, fwd into q1, bwd into q1 (unused)]
    run = run_pipeline(cs, [1.0, 2.0, 1.0, 2.0], [0.0, 0.5, 0.5, 0.0])
    # F0 on stage 0 (1) -> p2p (0.5) -> F0 stage 1 (1) -> B0 stage 1 (2) -> p2p (0.5) -> B0 stage 0 (2)
    assert max(run.stage_end) == pytest.approx(7.0)


def test_random_durations_respect_dependencies():
    rnd = random.Random(0)
    cs = compile_schedule(Schedule.INTERLEAVED, 4, 2, 8)
    durations = [rnd.uniform(0.5, 2.0) for _ in range(4 * 2 * 2)]
    lags = [rnd.uniform(0.0, 0.2) for _ in range(2 * 4 * 2)]
    run = run_pipeline(cs, durations, lags)
    for i, d in enumerate(cs.dep):
        start = run.end[i] - durations[cs.dur_key[i]]
        if d >= 0:
            lag = lags[cs.lag_key[i]] if cs.lag_key[i] >= 0 else 0.0
            assert start >= run.end[d] + lag - 1e-12
