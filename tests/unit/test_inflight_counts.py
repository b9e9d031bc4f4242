"""Micro-batches and model chunks in flight per stage at the schedule's peak, each against a count written by
hand from the paper or the framework's code. Three views must agree with the hand count: the closed form
(``peak_inflight_chunks``), the memory model's layer activations (``inflight_layers``, what the peak memory
reads) and a walk of the simulated stage order (forwards add a chunk's activations, backwards free them)."""
import pytest

from vtrain.sim.memory import inflight_layers
from vtrain.sim.schedule import FUSED, B, F, peak_inflight_chunks, stage_order
from vtrain.workload.enums import Schedule
from vtrain.workload.plan import ParallelPlan

LAYERS_PER_STAGE = 12  # divisible by every chunk count below: layer activations = chunks x 12 / v


def _walk(schedule, p, v, m, s, group=0, fused=False):
    """Peak chunk activations held along stage ``s``'s order (a fused pair holds both before freeing)."""
    held = peak = 0
    for task in stage_order(schedule, p, v, m, s, fused, group=group).tasks():
        if task[0] == F:
            held += 1
        elif task[0] == B:
            held -= 1
        elif task[0] == FUSED:
            peak = max(peak, held + 1)
        peak = max(peak, held)
    return peak


def _plan(schedule, p, m, v=1, group=0, fused=False):
    return ParallelPlan(tp=1, pp=p, dp=1, micro_batch_size=1, global_batch_size=m, schedule=schedule,
                        virtual_stages=v if schedule == Schedule.INTERLEAVED else 1,
                        microbatch_group_size_per_vp_stage=group, overlap_moe_comm=fused)


def _check(schedule, p, m, v, hand, group=0, fused=False):
    plan = _plan(schedule, p, m, v, group, fused)
    chunks = plan.chunks
    assert [peak_inflight_chunks(schedule, p, chunks, m, s, group, fused) for s in range(p)] == hand
    assert [_walk(schedule, p, chunks, m, s, group, fused) for s in range(p)] == hand
    assert [inflight_layers(plan, s, LAYERS_PER_STAGE) for s in range(p)] == \
        [n * LAYERS_PER_STAGE / chunks for n in hand]


def test_1f1b_holds_p_minus_s_micro_batches():
    """PipeDream-Flush / 1F1B (Narayanan et al. 2021, Sec. 2.2): stage s runs p-s-1 warm-up forwards and one
    more before its first backward, so it holds p - s micro-batches: 4, 3, 2, 1 on 4 stages."""
    _check(Schedule.ONE_F_ONE_B, 4, 8, 1, [4, 3, 2, 1])


def test_1f1b_with_fewer_micro_batches_than_stages_holds_them_all():
    _check(Schedule.ONE_F_ONE_B, 4, 2, 1, [2, 2, 2, 1])


def test_interleaved_holds_its_warmup_plus_one_chunk():
    """Megatron-Core (schedules.py, get_pp_rank_microbatches): warm-up (p-s-1)*2 + (v-1)*p chunk forwards,
    then the steady unit's forward before the first backward. p=4, v=2: stage 0 3*2 + 4 + 1 = 11 chunks,
    stage 3 0 + 4 + 1 = 5; 11 chunks of 12/2 layers = 66 layer activations on stage 0 (10 x 6 = 60 without
    the steady forward's chunk: the mutation this pins)."""
    _check(Schedule.INTERLEAVED, 4, 8, 2, [11, 9, 7, 5])
    assert inflight_layers(_plan(Schedule.INTERLEAVED, 4, 8, 2), 0, LAYERS_PER_STAGE) == 66.0


def test_interleaved_with_a_microbatch_group_holds_v_minus_1_groups_more():
    """With --microbatch-group-size-per-virtual-pipeline-stage N the warm-up is (p-s-1)*2 + (v-1)*N:
    p=4, v=2, N=6, m=12: stage 0 6 + 6 + 1 = 13 chunks, stage 3 0 + 6 + 1 = 7."""
    _check(Schedule.INTERLEAVED, 4, 12, 2, [13, 11, 9, 7], group=6)


def test_interleaved_with_a_short_last_group_holds_the_same_warmup():
    """m = 14 with N = 5: groups 5, 5, 4 (the last >= p, as Megatron-Core requires); v=3: warm-up
    (p-s-1)*2 + 2*5, so stage 0 holds 6 + 10 + 1 = 17 chunks, stage 3 11."""
    _check(Schedule.INTERLEAVED, 4, 14, 3, [17, 15, 13, 11], group=5)


def test_interleaved_with_every_chunk_in_the_warmup_holds_all_of_them():
    """p=4, v=2, m=4: stage 0's warm-up 3*2 + 4 = 10 exceeds the 8 chunk forwards: it holds all 8."""
    _check(Schedule.INTERLEAVED, 4, 4, 2, [8, 8, 7, 5])


def test_fused_pairs_hold_one_forward_more():
    """Megatron-Core's combined 1F1B (overlap_moe_expert_parallel_comm) runs one more warm-up forward so that
    a pair never holds the backward of its own forward: 1F1B p - s + 1, interleaved warm-up + 2."""
    _check(Schedule.ONE_F_ONE_B, 4, 8, 1, [5, 4, 3, 2], fused=True)
    _check(Schedule.INTERLEAVED, 4, 8, 2, [12, 10, 8, 6], fused=True)


def test_zero_bubble_h1_holds_1f1b_micro_batches():
    """ZB-H1 (Qi et al. 2024, Sec. 3.1) keeps 1F1B's peak memory: p - s micro-batches, only the W passes move."""
    _check(Schedule.ZERO_BUBBLE, 4, 8, 1, [4, 3, 2, 1])


def test_zbv_holds_2p_half_stage_chunks():
    """ZB-V (Qi et al. 2024, Sec. 6): 2p chunk activations of half a stage on every stage, 1F1B's p
    micro-batches of stage 0."""
    _check(Schedule.ZBV, 4, 8, 2, [8, 8, 8, 8])


@pytest.mark.parametrize("p", [4, 8])
def test_dualpipe_holds_pp_plus_one(p):
    """DualPipe (deepseek-ai/DualPipe README, "Pipeline Bubbles and Memory Usage Comparison"): activation
    memory PP + 1 chunks of one direction's stage on every rank, against 1F1B's PP."""
    _check(Schedule.DUALPIPE, p, 4 * p, 2, [p + 1] * p)


def test_dualpipev_holds_2p_plus_one_half_stage_chunks():
    """DualPipeV (DualPipe cut in half, one model copy in a V): 2p + 1 chunks of half a stage."""
    _check(Schedule.DUALPIPEV, 4, 8, 2, [9, 9, 9, 9])


def test_gpipe_holds_every_micro_batch():
    """GPipe (Huang et al. 2019): all forwards before any backward, m micro-batches on every stage."""
    _check(Schedule.GPIPE, 4, 6, 1, [6, 6, 6, 6])


def test_dualpipe_refuses_an_odd_count_as_its_step_does():
    """deepseek-ai/DualPipe dualpipe.py step(): num_chunks % 2 == 0 and num_chunks >= 2 * num_ranks (each
    direction runs half of the micro-batches), num_ranks % 2 == 0."""
    from vtrain.errors import ConfigError
    from vtrain.sim.schedule import check_schedule

    with pytest.raises(ConfigError, match=r"schedule=dualpipe needs an even number of micro-batches >= 2\*pp=8, "
                                          r"got 9 \(DualPipe's step\(\) asserts num_chunks % 2 == 0"):
        check_schedule(Schedule.DUALPIPE, 4, 9)
    with pytest.raises(ConfigError, match="needs an even pp, got pp=3"):
        check_schedule(Schedule.DUALPIPE, 3, 12)
    check_schedule(Schedule.DUALPIPE, 4, 10)


@pytest.mark.parametrize("m", [9, 11])
def test_dualpipev_schedules_an_odd_count(m):
    """dualpipev.py asserts only num_chunks >= 2 * num_ranks: 9 micro-batches on 4 ranks run, every chunk's
    forward and backward of every micro-batch once on every rank, the weight gradient either inside a fused
    pair's whole backward or as its own W, holding 2p + 1 chunks at the peak."""
    from vtrain.sim.schedule import W, check_schedule

    check_schedule(Schedule.DUALPIPEV, 4, m)
    every = sorted((c, i) for c in (0, 1) for i in range(m))
    for s in range(4):
        fwd, bwd, wgrad = [], [], []
        for task in stage_order(Schedule.DUALPIPEV, 4, 2, m, s).tasks():
            if task[0] == FUSED:
                fwd.append(task[1:3])
                bwd.append(task[3:5])
                wgrad.append(task[3:5])  # a fused pair runs the whole backward
            else:
                {F: fwd, B: bwd, W: wgrad}[task[0]].append(task[1:3])
        assert sorted(fwd) == sorted(bwd) == sorted(wgrad) == every
    assert [_walk(Schedule.DUALPIPEV, 4, 2, m, s) for s in range(4)] == [9, 9, 9, 9]


def _walk_layers(p, v, m, s, chunk_layers):
    """Peak layer activations along stage ``s``'s interleaved order, each chunk weighing its layers."""
    held = peak = 0
    for kind, chunk, _ in stage_order(Schedule.INTERLEAVED, p, v, m, s).tasks():
        held += chunk_layers[chunk] if kind == F else -chunk_layers[chunk]
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize("stage,chunk_layers,hand", [
    (0, (0, 1, 1, 1, 1, 1, 1, 1), 112),
    (15, (1, 1, 1, 1, 1, 1, 1, 0), 113),
    (2, (1,) * 8, 139),
])
def test_interleaved_chunks_of_unequal_depth(stage, chunk_layers, hand):
    """Llama 3.1 405B on PP16 x VP8 with the embedding and loss slots (m = 64, N = 16): stage 0's chunk 0
    holds only the embedding. Its warm-up of 15*2 + 7*16 = 142 forwards holds micro-batches 0-15 of all
    8 chunks (7 x 16 = 112 layers) and 14 empty chunk-0 forwards; after that each backward frees a layer
    before the next layer-holding forward: 112, not the 143 x 7/8 = 125.1 of equal chunks. Stage 15's
    empty chunk is its last: warm-up 112 = chunks 0-6 of 16 micro-batches, and its first steady forwards
    (empty chunk 7) free nothing until chunk 0 of micro-batch 16 adds one: 113 (not 98.9). Stage 2:
    (13*2 + 112 + 1) = 139 chunks of one layer."""
    plan = _plan(Schedule.INTERLEAVED, 16, 64, 8)
    assert inflight_layers(plan, stage, sum(chunk_layers), chunk_layers) == hand
    assert _walk_layers(16, 8, 64, stage, chunk_layers) == hand


@pytest.mark.parametrize("p,m", [(4, 8), (4, 10), (8, 16)])
def test_dualpipev_overlaps_every_main_step_but_the_last_ranks_first(p, m):
    """deepseek-ai/DualPipe dualpipev.py step(): step 4 runs num_chunks - 2 num_ranks + rank + 1 iterations of two
    overlapped forward-backward chunks (F0B1, F1B0), except that the last rank runs its first F0 and B1 apart
    ("we don't overlap these two chunks to further reduce bubble size"); step 5 one more overlapped F1B0 each of
    its num_ranks - rank - 1 iterations."""
    from vtrain.sim.schedule_zb import zb_stage_order
    from vtrain.sim.tasks import W

    for r in range(p):
        order = zb_stage_order(Schedule.DUALPIPEV, p, m, r, fused=True)
        steps4, steps5 = m - 2 * p + r + 1, p - r - 1
        assert sum(t[0] == FUSED for t in order.tasks()) == 2 * steps4 - (r == p - 1) + steps5, r
        # the warm-up ends with step 4's first iteration
        if r == p - 1:  # F0 alone, then B1 with its W at once, then the overlapped F1B0
            assert [t[:2] for t in order.warmup[-4:]] == [(F, 0), (B, 1), (W, 1), (FUSED, 1)]
        else:  # F0B1 and F1B0 overlapped
            assert [(t[0], t[1], t[3]) for t in order.warmup[-2:]] == [(FUSED, 0, 1), (FUSED, 1, 0)]
