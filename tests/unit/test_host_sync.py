"""A host sync inside a pass (Megatron-Core's dropless dispatch) stops the host from running ahead of the GPU
across passes (vtrain.sim.host_sync): each value below is worked by hand from the launch-queue recurrence."""
import pytest

from vtrain.sim.engine import run_pipeline
from vtrain.sim.host_sync import price_pass, sync_lead
from vtrain.sim.launch import NO_SIDE, NO_SYNC_S, SYNC, PassCost, price_chunk
from vtrain.sim.schedule import compile_schedule
from vtrain.workload.enums import Schedule

# (GPU time, host time, exposed comm, FLOPs, group) of each launched op; the SYNC entry is the host's wait
BEFORE = (1.0, 0.1, 0.0, 0.0, 0)  # attention: GPU-bound
WAIT = (0.0, 0.0, 0.0, 0.0, SYNC)  # the dispatch's D2H copy of the split sizes
AFTER = (1.0, 2.0, 0.0, 0.0, 0)  # the experts: the host takes longer to issue than the GPU to run


def test_a_pass_with_a_sync_exposes_what_the_host_issues_after_it():
    """Host far ahead, GPU busy until 0: the first op runs 0..1; at the sync the host waits until 1, issues the
    second op at 3 (2.0 of host time), which runs 3..4. The pass ends 2.0 after gpu_s (2.0), the host is free
    at 3. From idle (both start at 0): 0.1..1.1, the host waits until 1.1, issues at 3.1, ends 4.1."""
    parts = [([BEFORE, WAIT, AFTER], 1, NO_SIDE)]
    assert sync_lead(parts) == pytest.approx((4.0, 3.0))
    cost = price_pass(parts, 0.0)
    assert cost.gpu_s == pytest.approx(2.0) and cost.latency_s == pytest.approx(4.1)
    assert cost.sync_lead_s == pytest.approx(2.0) and cost.sync_host_s == pytest.approx(3.0)


def test_a_pass_without_a_sync_is_priced_as_before():
    parts = [([BEFORE, AFTER], 3, NO_SIDE)]
    assert sync_lead(parts) is None
    assert price_pass(parts, 0.0) == price_chunk(parts, 0.0)
    assert price_pass(parts, 0.0).sync_host_s == NO_SYNC_S


def test_layers_after_the_first_sync_resynchronise_at_each_boundary():
    """Two layers, a sync in each: layer 1 ends at 4 (above), the host at 3; at the boundary it waits for the
    GPU (4), runs the next layer host-bound from there: 4.1 .. 5.1, sync at 5.1, issue at 7.1, end at 8.1."""
    assert sync_lead([([BEFORE, WAIT, AFTER], 2, NO_SIDE)]) == pytest.approx((8.1, 7.1))


def _one_stage(forward: PassCost, backward: PassCost, m: int):
    """1F1B on one stage (F0 B0 F1 B1 ...), no transfers: the engine's stage end and per-stage host wait."""
    cs = compile_schedule(Schedule.ONE_F_ONE_B, 1, 1, m)
    passes = [forward, backward]
    sync = ([c.sync_lead_s for c in passes], [c.sync_host_s for c in passes])
    run = run_pipeline(cs, [c.gpu_s for c in passes], [0.0, 0.0], [c.latency_s for c in passes],
                       [c.host_s for c in passes], sync=sync)
    return run.stage_end[0], run.stage_host[0]


def test_the_engine_cannot_hide_a_synced_pass_behind_the_previous_one():
    """F: 2.0 of GPU, 4.1 from idle, 2.0 past g0 + gpu_s with the host ahead, host free at g0 + 3.0; B: 3.0 of
    GPU, 0.1 of host. F0 0..4.1 (host free at 3.0: the first pass starts idle), B0 issued at 3.0 ends at 7.1;
    F1 starts on the GPU at 7.1 and ends at 7.1 + 2.0 + 2.0 = 11.1 (the host, free at 3.1, ran ahead only to
    the sync); B1 ends at 14.1. Without the sync F1 would end at 7.1 + 2.0 = 9.1 (its host started at 3.1, its
    latency 4.1 ended at 7.2: hidden), B1 at 12.1."""
    f = PassCost(2.0, 0.0, 4.1, 3.0, 0.0, sync_lead_s=2.0, sync_host_s=3.0)
    b = PassCost(3.0, 0.0, 3.0, 0.1, 0.0)
    end, host_wait = _one_stage(f, b, 2)
    assert end == pytest.approx(14.1)
    assert host_wait == pytest.approx(2.1 + 2.0)  # F0's excess from idle, F1's lead
    unsynced = PassCost(2.0, 0.0, 4.1, 3.0, 0.0)
    assert _one_stage(unsynced, b, 2)[0] == pytest.approx(12.1)


def test_a_backward_and_its_weight_pass_compose_their_syncs():
    """B (recomputed forward with a sync): gpu 2, lead 2, host free at 3; W: gpu 1, latency 1.5, host 1. Run
    back to back with the host ahead: B ends at 4, W's host starts at 3 and its latency ends at 4.5, its GPU
    chain at 5: the pair ends at 5 (lead 2.0 over 3.0 of GPU), the host is free at 3 + 1 = 4."""
    b = PassCost(2.0, 0.0, 4.1, 3.0, 0.0, sync_lead_s=2.0, sync_host_s=3.0)
    w = PassCost(1.0, 0.0, 1.5, 1.0, 0.0)
    both = b + w
    assert both.gpu_s == pytest.approx(3.0)
    assert both.sync_lead_s == pytest.approx(2.0) and both.sync_host_s == pytest.approx(4.0)
    plain = PassCost(2.0, 0.0, 2.0, 1.0, 0.0) + w
    assert plain.sync_lead_s == 0.0 and plain.sync_host_s == NO_SYNC_S
