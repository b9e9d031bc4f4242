"""B/W-split and fused schedules: bubbles from the event simulation against each paper's formula on uniform
stages, dependencies, periodic extrapolation against the full run."""
import pytest

from tests.simruns import extrapolated_and_full
from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.errors import ConfigError
from vtrain.sim.engine import run_pipeline
from vtrain.sim.schedule import FUSED, B, F, W, compile_schedule, fused_key, stage_order
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.enums import Schedule


def uniform(schedule, p, m, f, b, w, v=1, fused=False, costs=(1, 1, 1)):
    """Makespan with F, B (input grad), W per chunk, fused pairs = F + B + W (no overlap), no p2p; ``costs``:
    the pass times ZB-V's order is built on."""
    cs = compile_schedule(schedule, p, v, m, fused, costs)
    k, vv = cs.kinds, cs.v
    d = [0.0] * (fused_key(p, vv, k, p, 0, 0) + 1)
    for s in range(p):
        for c in range(vv):
            d[s * k * vv + c] = f
            d[s * k * vv + vv + c] = b if k == 3 else b + w
            if k == 3:
                d[s * k * vv + 2 * vv + c] = w
            for cb in range(vv):
                d[fused_key(p, vv, k, s, c, cb)] = f + b + w
    run = run_pipeline(cs, d, [0.0] * (2 * p * vv), d, [0.0] * len(d))
    return max(run.stage_end), cs


@pytest.mark.parametrize("p,m", [(2, 8), (4, 8), (4, 16), (8, 16), (8, 24)])
@pytest.mark.parametrize("f,b,w", [(1.0, 1.0, 1.0), (1.0, 1.2, 0.7), (1.0, 2.0, 1.0)])
def test_zb_h1_bubble_is_the_papers(p, m, f, b, w):
    """ZB-H1 (Qi et al. 2024, Table 2): bubble (p-1)(F + B - W), 1F1B's memory."""
    t, _ = uniform(Schedule.ZERO_BUBBLE, p, m, f, b, w)
    assert t == pytest.approx(m * (f + b + w) + (p - 1) * (f + b - w))


@pytest.mark.parametrize("p", [2, 4, 6, 8, 16])
def test_dualpipe_bubble_is_the_papers(p):
    """DualPipe README: bubble (p/2-1)(F&B + B - 3W) with B a whole backward, on F = B_input = W."""
    m = 4 * p  # per direction: 2p micro-batches in all
    t, _ = uniform(Schedule.DUALPIPE, p, 2 * m, 1.0, 1.0, 1.0)
    fb, whole_b = 3.0, 2.0
    assert t == pytest.approx(2 * m * 3.0 + (p / 2 - 1) * (fb + whole_b - 3.0))


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_dualpipev_bubble_is_the_papers(p):
    """DualPipeV (DualPipe cut in half): (p-1)(F&B + B - 3W) in chunk passes, on F = B_input = W."""
    m = 4 * p
    t, _ = uniform(Schedule.DUALPIPEV, p, m, 1.0, 1.0, 1.0)
    assert t == pytest.approx(2 * m * 3.0 + (p - 1) * (3.0 + 2.0 - 3.0))


@pytest.mark.parametrize("p,m", [(2, 8), (4, 8), (4, 16), (8, 16)])
def test_zbv_bubble_is_the_fill_of_the_last_stage(p, m):
    """ZB-V with F = B = W per chunk: (p-1) chunk forwards, the last stage's fill (no schedule of this layout
    has less), half of ZB-H1's bubble with the same memory (Qi et al. 2024, Sec. 6)."""
    t, _ = uniform(Schedule.ZBV, p, m, 1.0, 1.0, 1.0)
    assert t == pytest.approx(2 * m * 3.0 + (p - 1) * 1.0)
    t_h1, _ = uniform(Schedule.ZERO_BUBBLE, p, m, 2.0, 2.0, 2.0)  # the same stage, one chunk
    assert t - 2 * m * 3.0 == pytest.approx((t_h1 - m * 6.0) / 2)


@pytest.mark.parametrize("p", [4, 8])
def test_zbv_built_on_its_pass_times_keeps_a_recomputing_backward_below_1f1bs_bubble(p):
    """A B that carries full recompute (B = 2F, W = F per chunk): the order built on those times
    (zbv_costs, as the zero-bubble implementation's v_schedule builds its V from profiled costs) keeps a
    bubble of (p-1)(F + B - W) chunk passes, half ZB-H1's on the same stage and a quarter of 1F1B's, whatever
    the micro-batch count; the order of unit times stalls in the steady state, its bubble growing with m to
    1F1B's and past it."""
    from vtrain.sim.schedule_zb import zbv_costs

    f, b, w = 1.0, 2.0, 1.0
    assert zbv_costs(f, b, w) == (2, 4, 2)
    for m in (2 * p, 4 * p, 8 * p):
        work = 2 * m * (f + b + w)
        t_unit, _ = uniform(Schedule.ZBV, p, m, f, b, w)
        t_costs, _ = uniform(Schedule.ZBV, p, m, f, b, w, costs=zbv_costs(f, b, w))
        t_1f1b, _ = uniform(Schedule.ONE_F_ONE_B, p, m, 2 * f, 2 * b, 2 * w)  # the same stage, one chunk
        t_h1, _ = uniform(Schedule.ZERO_BUBBLE, p, m, 2 * f, 2 * b, 2 * w)
        assert t_costs - work == pytest.approx((p - 1) * (f + b - w))
        assert t_costs - work == pytest.approx((t_h1 - work) / 2) == pytest.approx((t_1f1b - work) / 4)
        assert t_unit - work > t_costs - work
    assert t_unit - work > t_1f1b - work  # m = 8p


@pytest.mark.parametrize("schedule,p,m", [(Schedule.ZERO_BUBBLE, 4, 8), (Schedule.ZBV, 4, 8),
                                          (Schedule.DUALPIPE, 4, 16), (Schedule.DUALPIPEV, 4, 8)])
def test_every_pass_runs_once_and_after_its_inputs(schedule, p, m):
    cs = compile_schedule(schedule, p, 1, m)
    v = cs.v
    per_chain = m // 2 if schedule == Schedule.DUALPIPE else m
    for s in range(p):
        tasks = stage_order(schedule, p, v, m, s).tasks()
        counts = {F: 0, B: 0, W: 0}
        for t in tasks:
            if t[0] == FUSED:
                counts[F] += 1
                counts[B] += 1
                counts[W] += 1
            else:
                counts[t[0]] += 1
        assert counts == {F: v * per_chain, B: v * per_chain, W: v * per_chain}
    d = [1.0] * (fused_key(p, v, cs.kinds, p, 0, 0) + 1)
    run = run_pipeline(cs, d, [0.1] * (2 * p * v), d, [0.0] * len(d))
    for i, dep in enumerate(cs.dep):
        if dep >= 0:
            assert run.end[i] - d[cs.dur_key[i]] >= run.end[dep] - 1e-9


def test_fused_interleaved_hides_nothing_without_experts():
    """Fused pairs of a dense model cost their sum: the schedule changes by one warm-up forward only."""
    t1, _ = uniform(Schedule.INTERLEAVED, 4, 8, 1.0, 2.0, 0.0, v=2)
    t2, _ = uniform(Schedule.INTERLEAVED, 4, 8, 1.0, 2.0, 0.0, v=2, fused=True)
    assert t2 >= t1 - 1e-9


MOE = ["+model=mixtral_8x7b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.dp=8", "parallelism.ep=8",
       "parallelism.sequence_parallel=false", "training.global_batch_size=512", "training.seq_len=4096"]


@pytest.mark.parametrize("extra", [
    ["parallelism.pp=8", "parallelism.schedule=zero_bubble"],
    ["parallelism.pp=4", "parallelism.schedule=interleaved", "parallelism.virtual_stages=2",
     "parallelism.overlap_moe_comm=true"],
    ["parallelism.pp=8", "parallelism.schedule=dualpipe"],
    ["parallelism.pp=8", "parallelism.schedule=dualpipev"],
    ["parallelism.pp=4", "parallelism.schedule=zbv"],
])
def test_extrapolated_runs_match_full_runs(extra):
    fast, full = extrapolated_and_full(build_workload(compose(MOE + extra)))
    assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    for a, b in zip(fast.stages, full.stages):
        for key in ("compute_s", "bubble_s", "exposed_comm_s", "host_overhead_s"):
            assert getattr(a, key) == pytest.approx(getattr(b, key), rel=1e-8, abs=1e-12), key
        assert a.total_s == pytest.approx(fast.iteration_time_s, rel=1e-9)


def test_dualpipe_and_zero_bubble_shrink_the_1f1b_bubble():
    times = {}
    for sched in ("1f1b", "zero_bubble", "dualpipev"):
        w = build_workload(compose(MOE + ["parallelism.pp=8", f"parallelism.schedule={sched}"]))
        times[sched] = simulate_workload(w, cost_model_for(w))[0].breakdown.bubble_s
    assert times["dualpipev"] < times["zero_bubble"] < times["1f1b"]


@pytest.mark.parametrize("extra,message", [
    (["parallelism.pp=8", "parallelism.schedule=dualpipe", "training.global_batch_size=64"],
     "schedule=dualpipe needs an even number of micro-batches >= 2*pp=16, got 8"),
    (["parallelism.pp=1", "parallelism.schedule=dualpipe"], "schedule=dualpipe needs an even pp, got pp=1"),
    (["parallelism.pp=4", "parallelism.schedule=zbv", "training.global_batch_size=48"],  # PyTorch's ZB-V: m >= 2p
     "parallelism.schedule=zbv needs micro-batches >= 2*pp=8, got 6"),
    (["parallelism.pp=8", "parallelism.schedule=1f1b", "parallelism.overlap_moe_comm=true"],
     "overlap_moe_comm=true needs schedule=interleaved (or pp=1)"),
])
def test_schedule_rules_are_one_line_errors(extra, message):
    with pytest.raises(ConfigError) as err:
        build_workload(compose(MOE + extra))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("p,b,w", [(2, 3, 1), (3, 3, 5), (2, 3, 16)])
def test_zbv_greedy_order_finishes_where_its_memory_limit_would_deadlock_it(p, b, w):
    """(F, B, W) = (2, 3, 1) on 2 stages filled stage 0 with chunk-0 forwards up to the 2p limit, so the
    chunk-1 forward its own next B needs could never run (a fuzz found simulate() hanging there); the
    limit is lifted for one step when every stage is idle and none can start. Every pass is placed once."""
    from vtrain.sim.schedule_zb import _zb_v

    for m in (2 * p, 3 * p + 1):
        orders = _zb_v.__wrapped__(p, m, (2, b, w))
        for order in orders:
            assert len(order) == 6 * m and len(set(order)) == 6 * m


def test_a_split_backward_is_its_whole_backward_cut_in_two():
    """Zero-bubble prices B (input gradients) and W (weight gradients) apart: on every stage, the embedding, the
    layers, DeepSeek-V3's MTP module and the head included, B + W is the whole backward, FLOP for FLOP."""
    from vtrain.comm.plan import build_comm_plan
    from vtrain.graph.builder import build_model_graph
    from vtrain.sim.pass_memo import stage_costs
    from vtrain.workload.partition import partition

    w = build_workload(compose(["+model=deepseek_v3", "+cluster=h800x2048", "model.num_layers=8",
                                "model.first_dense_layers=1", "parallelism.tp=1", "parallelism.pp=2",
                                "parallelism.dp=64", "parallelism.ep=64", "parallelism.schedule=zero_bubble",
                                "training.global_batch_size=512", "training.seq_len=4096",
                                "parallelism.sequence_parallel=false"]))
    cm, part = cost_model_for(w), partition(w.model, w.plan)
    comm = build_comm_plan(w, part)
    graph = build_model_graph(w.model, w.plan, comm.tp, comm.cp, comm.ep)
    split = stage_costs(graph, part, comm, cm, 0.0, split=True)
    whole = stage_costs(graph, part, comm, cm, 0.0, split=False)
    for s in range(2):
        b, wp, full = split.backward[s][0], split.weight[s][0], whole.backward[s][0]
        assert b.flops + wp.flops == pytest.approx(full.flops, rel=1e-12) and wp.flops > 0
        assert b.gpu_compute_s + wp.gpu_compute_s == pytest.approx(full.gpu_compute_s, rel=1e-12)
