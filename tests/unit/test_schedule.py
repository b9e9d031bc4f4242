"""Pipeline schedules: orders, dependencies and bubble sizes from the event simulation."""
import random

import pytest

from vtrain.sim.engine import run_pipeline
from vtrain.sim.schedule import compile_schedule, stage_order
from vtrain.workload.enums import Schedule


def run(cs, durations, lags):
    """The engine with passes that occupy their stage for their duration (no host-bound latency)."""
    return run_pipeline(cs, durations, lags, durations, [0.0] * len(durations))


def uniform(cs, tf, tb):
    v = cs.v
    durations = []
    for _ in range(cs.p):
        durations += [tf / v] * v + [tb / v] * v
    return run(cs, durations, [0.0] * (2 * cs.p * v))


@pytest.mark.parametrize("p,m", [(1, 8), (2, 8), (4, 8), (4, 16), (8, 8)])
def test_1f1b_closed_form_without_communication(p, m):
    """Uniform stages, no p2p: 1F1B takes (m + p - 1)(tf + tb) (Narayanan et al. 2021, Sec. 2.2)."""
    result = uniform(compile_schedule(Schedule.ONE_F_ONE_B, p, 1, m), 1.0, 2.0)
    assert max(result.stage_end) == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize("p,m,v", [(2, 8, 2), (4, 8, 2), (4, 16, 4)])
def test_interleaved_reduces_bubble(p, m, v):
    """Interleaving divides the bubble by v: (m + (p-1)/v)(tf + tb) (Narayanan et al. SC'21, Sec. 2.2)."""
    result = uniform(compile_schedule(Schedule.INTERLEAVED, p, v, m), 1.0, 2.0)
    assert max(result.stage_end) == pytest.approx((m + (p - 1) / v) * 3.0)


def test_gpipe_same_time_more_memory_order():
    order = stage_order(Schedule.GPIPE, 4, 1, 6, 0).tasks()
    assert [t[0] for t in order] == [0] * 6 + [1] * 6


def test_1f1b_warmup_depth():
    order = stage_order(Schedule.ONE_F_ONE_B, 4, 1, 8, 0).tasks()
    assert [t[0] for t in order[:4]] == [0, 0, 0, 0] and order[4][0] == 1
    last = stage_order(Schedule.ONE_F_ONE_B, 4, 1, 8, 3).tasks()
    assert [t[0] for t in last[:4]] == [0, 1, 0, 1]


def test_p2p_lag_delays_dependants():
    cs = compile_schedule(Schedule.ONE_F_ONE_B, 2, 1, 1)
    # lags: [fwd into q0 (unused), bwd into q0, fwd into q1, bwd into q1 (unused)]
    result = run(cs, [1.0, 2.0, 1.0, 2.0], [0.0, 0.5, 0.5, 0.0])
    # F0 on stage 0 (1) -> p2p (0.5) -> F0 stage 1 (1) -> B0 stage 1 (2) -> p2p (0.5) -> B0 stage 0 (2)
    assert max(result.stage_end) == pytest.approx(7.0)


def test_random_durations_respect_dependencies():
    rnd = random.Random(0)
    cs = compile_schedule(Schedule.INTERLEAVED, 4, 2, 8)
    durations = [rnd.uniform(0.5, 2.0) for _ in range(4 * 2 * 2)]
    lags = [rnd.uniform(0.0, 0.2) for _ in range(2 * 4 * 2)]
    result = run(cs, durations, lags)
    for i, d in enumerate(cs.dep):
        start = result.end[i] - durations[cs.dur_key[i]] - result.host[i]
        if d >= 0:
            lag = lags[cs.lag_key[i]] if cs.lag_key[i] >= 0 else 0.0
            assert start >= result.end[d] + lag - 1e-12


@pytest.mark.parametrize("p,m", [(2, 8), (4, 8), (8, 16)])
def test_engine_measures_the_1f1b_bubble(p, m):
    """Uniform stages: every stage idles (p-1)(tf+tb) (fill + drain), and waits sum to its end time."""
    result = uniform(compile_schedule(Schedule.ONE_F_ONE_B, p, 1, m), 1.0, 2.0)
    for s in range(p):
        assert result.stage_bubble[s] + result.stage_p2p[s] + result.stage_host[s] == pytest.approx(
            result.stage_end[s] - 3.0 * m)
    assert result.stage_bubble[0] == pytest.approx((p - 1) * 3.0)
    assert max(result.stage_host) == 0.0


def test_engine_splits_a_transfer_wait_from_the_bubble():
    cs = compile_schedule(Schedule.ONE_F_ONE_B, 2, 1, 1)
    result = run(cs, [1.0, 2.0, 1.0, 2.0], [0.0, 0.5, 0.5, 0.0])
    # stage 1 waits 1.0 for stage 0's forward (bubble), then 0.5 for the transfer (p2p)
    assert result.stage_bubble[1] == pytest.approx(1.0) and result.stage_p2p[1] == pytest.approx(0.5)
    # stage 0 waits from 1.0 until stage 1's backward ends at 4.5 (bubble), then for its transfer (p2p):
    # the forward transfer is stage 1's wait, not stage 0's
    assert result.stage_end[0] == pytest.approx(7.0)
    assert result.stage_bubble[0] == pytest.approx(3.5) and result.stage_p2p[0] == pytest.approx(0.5)
