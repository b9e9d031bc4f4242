"""The engine's breakdown: every part >= 0 and the parts add up to the iteration time, per stage."""
import random
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.search.space import enumerate_plans, plan_space
from vtrain.sim.simulator import simulate_workload
from vtrain.validation.datasets import single_node_workloads, weak_scaling_workloads


def check(report):
    for st in report.stages:
        parts = (st.compute_s, st.host_overhead_s, st.exposed_comm_s, st.bubble_s, st.optimizer_s)
        assert min(parts) >= -1e-12 * report.iteration_time_s, (st, report.plan)
        assert sum(parts) == pytest.approx(report.iteration_time_s, rel=1e-9), (st, report.plan)
        assert sum(st.exposed_comm_by_group.values()) == pytest.approx(st.exposed_comm_s, rel=1e-9, abs=1e-15)
        for su in st.streams:
            assert su.idle_s >= 0 and min(su.busy_s.values()) >= 0
        # the compute stream, the FSDP side stream, DP, pipeline, the host, and with experts the all-to-all stream
        names = [su.stream for su in st.streams]
        assert names[:5] == ["compute", "fsdp", "dp_comm", "pp_p2p", "host"] and names[5:] in ([], ["ep_comm"])


@pytest.mark.slow  # 18 simulations; the fast loop keeps test_breakdown_adds_up_on_the_weak_scaling_rows
def test_breakdown_adds_up_on_the_shipped_single_node_runs():
    cfg = compose(["+cluster=vtrain_a100"], require=False)
    ws, _, _ = single_node_workloads(cfg.cluster)
    for w in ws[::3]:
        check(simulate_workload(w, cost_model_for(w))[0])


def test_breakdown_adds_up_on_the_weak_scaling_rows():
    ws, _, _ = weak_scaling_workloads()
    for w in ws:
        check(simulate_workload(w, cost_model_for(w))[0])


@pytest.mark.slow
def test_breakdown_adds_up_on_a_sample_of_the_search_space():
    cfg = compose(["+model=llama3_70b", "+cluster=h100x1024"])
    w = build_workload(cfg)
    space = plan_space(w.model, w.cluster, replace(w.plan, tp=1, pp=1, dp=1), cfg.search)
    for plan in random.Random(1).sample(list(enumerate_plans(space)), 60):
        check(simulate_workload(replace(w, plan=plan), cost_model_for(w))[0])


def test_no_negative_number_in_a_tp_free_moe_report():
    """A stage without TP communication sums differences that may round to -1e-17: the report shows 0."""
    w = build_workload(compose(["+model=qwen3_235b_a22b", "+cluster=h200x1024", "parallelism.tp=1", "parallelism.pp=4",
                                "parallelism.dp=4", "parallelism.ep=4", "training.global_batch_size=32",
                                "parallelism.sequence_parallel=false"]))
    report, _ = simulate_workload(w, cost_model_for(w))

    def numbers(x):
        if isinstance(x, dict):
            for v in x.values():
                yield from numbers(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                yield from numbers(v)
        elif isinstance(x, float):
            yield x

    assert min(numbers(report.to_dict())) >= 0.0


def test_the_report_splits_the_exposed_communication_by_group():
    from vtrain.api import simulate
    from vtrain.cli.format import render_report

    r = simulate(compose(["+model=mixtral_8x7b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
                          "parallelism.dp=16", "parallelism.ep=8", "parallelism.micro_batch_size=1",
                          "training.global_batch_size=64", "training.seq_len=4096"]))
    (line,) = [x for x in render_report(r).splitlines() if "exposed comm by group" in x]
    groups = r.breakdown.exposed_comm_by_group
    assert groups["ep"] > 0 and "EP all-to-all" in line
    labels = {"ep": "EP all-to-all", "dp": "DP", "tp": "TP", "pp": "PP p2p"}
    shown = [k for k in labels if groups.get(k, 0) > 0]
    assert all(labels[k] in line for k in shown)
    by_position = sorted(shown, key=lambda k: line.index(labels[k]))
    assert by_position == sorted(shown, key=lambda k: -groups[k])  # largest first


@pytest.mark.parametrize("precision,note", [("bf16", False), ("fp8", True)])
def test_a_low_precision_report_says_its_mfu_is_of_the_bf16_peak(precision, note):
    from vtrain.api import simulate
    from vtrain.cli.format import render_report

    r = simulate(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
                          "parallelism.dp=8", "training.global_batch_size=64", f"training.precision={precision}"]))
    (line,) = [x for x in render_report(r).splitlines() if x.startswith("iteration time")]
    assert ("(MFU/HFU of the bf16 peak)" in line) == note
    peak = r.mfu * r.iteration_time_s * r.gpus_used * 989.4e12  # the H100's bf16 peak either way
    assert peak == pytest.approx(r.model_flops_per_iteration, rel=1e-9)


@pytest.mark.parametrize("schedule", ["dualpipe", "dualpipev", "zero_bubble"])
def test_breakdown_adds_up_under_the_bidirectional_and_split_schedules(schedule):
    """DualPipe runs each direction on half the micro-batches; the B/W-split schedules price W passes apart."""
    w = build_workload(compose(["+model=mixtral_8x7b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.dp=8",
                                "parallelism.ep=8", "parallelism.sequence_parallel=false", "parallelism.pp=8",
                                "training.global_batch_size=512", "training.seq_len=4096",
                                f"parallelism.schedule={schedule}"]))
    check(simulate_workload(w, cost_model_for(w))[0])


def test_a_dualpipe_rank_is_busy_as_the_two_zero_bubble_stages_whose_chunks_it_holds():
    """DualPipe (DeepSeek-V3 report Sec. 3.2.1) feeds half the micro-batches from each end of two model copies: rank
    r holds stage r of one copy and stage p-1-r of the other, each running m/2 micro-batches. So the rank issues and
    computes what ZB-H1 (the same B/W split, one copy, all m micro-batches through each stage) gives stages r and
    p-1-r, halved: the mean of the two. Counting m micro-batches per DualPipe chunk would double it."""
    def stages(schedule):
        w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=2", "parallelism.dp=4",
                                    "parallelism.pp=4", "training.global_batch_size=64", "training.seq_len=4096",
                                    f"parallelism.schedule={schedule}"]))
        return simulate_workload(w, cost_model_for(w))[0].stages

    def busy(stage):
        streams = {su.stream: su.busy_s for su in stage.streams}
        return stage.compute_s, streams["host"]["issue"], streams["compute"]["in_stream_comm"]

    zb, dual = stages("zero_bubble"), stages("dualpipe")
    p = len(zb)
    for r in range(p):
        mean = [(a + b) / 2 for a, b in zip(busy(zb[r]), busy(zb[p - 1 - r]))]
        assert busy(dual[r]) == pytest.approx(mean, rel=1e-12)
    assert busy(dual[0])[1] > 1.05 * busy(dual[1])[1]  # the embedding's and the head's ranks differ from the middle
