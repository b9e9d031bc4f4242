"""The shape of the optimum (vtrain.search.optimum, sensitivity, baseline) and the memory margin in the search."""
import json
import math

import pytest

from vtrain.config.build import build_workload
from vtrain.config.compose import compose
from vtrain.search.baseline import RECIPE_MAX_TP, baseline_plan
from vtrain.search.optimum import WITHIN, gain_line, gain_over, near_optimal, shape_of_optimum
from vtrain.search.plans import plan_from_fields
from vtrain.search.run import prepare, run_search
from vtrain.search.sensitivity import knob_steps
from vtrain.sim.memory_margin import margin_line, margin_reason, usable_bytes
from vtrain.workload.enums import Recompute, Schedule
from vtrain.workload.plan import ParallelPlan

SMALL = ["+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=32", "search.progress_bar=false",
         "tracking.enabled=false", "search=grid", "search.workers=1"]


@pytest.fixture(scope="module")
def small_search(tmp_path_factory):
    out = tmp_path_factory.mktemp("search")
    return run_search(compose(SMALL), out)


def _metrics(days, lo=0.9, hi=1.2, gpus=8.0):
    s = days * 86400.0
    return {"time_to_train_s": s, "cost_usd": s * gpus, "iteration_time_s": 1.0, "iteration_time_lo_s": lo,
            "iteration_time_hi_s": hi}


def test_gain_interval_combines_both_intervals_in_log_space():
    g = gain_over(_metrics(10.0), _metrics(20.0), "b", "recipe")
    assert g.gain_pct == pytest.approx(100.0)
    up = math.sqrt(math.log(1.2) ** 2 + math.log(1 / 0.9) ** 2)
    assert g.hi_pct == pytest.approx((2 * math.exp(up) - 1) * 100)
    assert g.lo_pct == pytest.approx((2 * math.exp(-up) - 1) * 100)  # the same two logs, the other way round
    assert not g.within_uncertainty and WITHIN not in gain_line(g) and "+100.0% faster" in gain_line(g)


def test_a_gain_smaller_than_the_intervals_is_within_the_models_uncertainty():
    g = gain_over(_metrics(10.0), _metrics(10.5), "b", "your parallelism")
    assert g.gain_pct == pytest.approx(5.0) and g.lo_pct < 0 < g.hi_pct
    assert g.within_uncertainty and gain_line(g).endswith(f": {WITHIN}")


def test_a_composed_search_whose_gain_is_inside_the_interval_says_so(small_search):
    """The user's plan is the search's runner-up: its gain is inside the interval, and the words say so."""
    best = small_search.best["time"]
    near = near_optimal(small_search, best)
    assert near, "a small grid has plans within the fastest's interval"
    ctx = small_search.context
    runner_up = plan_from_fields(ctx.space.base, near[0].plan)
    opt = shape_of_optimum(small_search, runner_up)
    assert opt is not None and opt.gain is not None and opt.gain.source == "your parallelism"
    assert opt.gain.gain_pct >= 0 and opt.gain.lo_pct <= 0 < opt.gain.hi_pct
    text = "\n".join(opt.lines())
    assert WITHIN in text and f"{opt.near_total} plans" in text
    assert "sensitivity around the fastest plan" in text and "micro-batch" in text and "ZeRO stage" in text


def test_near_optimal_plans_overlap_the_fastest_and_say_how_they_differ(small_search):
    best = small_search.best["time"]
    opt = shape_of_optimum(small_search)
    assert opt is not None and opt.near_total == len(near_optimal(small_search, best))
    best_hi = best.metrics["time_to_train_s"] * best.metrics["iteration_time_hi_s"] / best.metrics["iteration_time_s"]
    for n in opt.near:
        assert n.days_lo * 86400 <= best_hi * (1 + 1e-12) and n.differs and n.differs != "the same plan"
    assert opt.gain is not None and "recipe rule" in opt.gain.source  # no parallelism given: the recipe's plan


def test_sensitivity_steps_every_knob_keeping_the_gpus():
    plan = ParallelPlan(tp=2, pp=4, dp=4, micro_batch_size=2, schedule=Schedule.INTERLEAVED, virtual_stages=2,
                        recompute=Recompute.SELECTIVE, zero_stage=1, distributed_optimizer=True, ep=2)
    steps = {change: fields for _, change, fields in knob_steps(plan, moe=True)}
    assert steps["tp 2 -> 4"] == {"tp": 4, "dp": 2} and steps["pp 4 -> 2"] == {"pp": 2, "dp": 8}
    assert steps["ep 2 -> 4"] == {"ep": 4} and steps["cp 1 -> 2"] == {"cp": 2, "dp": 2}
    assert steps["vp 2 -> 1"] == {"schedule": Schedule.ONE_F_ONE_B, "virtual_stages": 1}
    assert steps["micro-batch 2 -> 1"] == {"micro_batch_size": 1}
    assert set(steps) >= {"recompute selective -> none", "recompute selective -> full", "ZeRO stage 1 -> 0",
                          "ZeRO stage 1 -> 2", "tp 2 -> 1", "pp 4 -> 8", "vp 2 -> 4", "micro-batch 2 -> 4"}
    assert len(steps) == 15  # two per knob, cp only up from 1
    assert not any(k.startswith("ep") for _, k, _ in knob_steps(plan, moe=False))


# a whole search run (~1.7 s of CPU); the fast loop keeps
# test_a_composed_search_whose_gain_is_inside_the_interval_says_so
@pytest.mark.slow
def test_the_search_summary_json_holds_the_shape_of_the_optimum(tmp_path, capfd):
    from vtrain.cli.task_search import run

    assert run(compose(SMALL), tmp_path) == 0
    out = capfd.readouterr().out
    assert "near-optimal (80% intervals" in out and "gain over the baseline" in out and "sensitivity" in out
    doc = json.loads((tmp_path / "summary.json").read_text())
    opt = doc["optimum"]
    assert set(opt) >= {"best", "near_optimal_count", "near_optimal", "gain_over_baseline", "sensitivity"}
    gain = set(opt["gain_over_baseline"])
    assert {"gain_pct", "lo_pct", "hi_pct", "within_uncertainty", "baseline", "source"} <= gain
    assert {s["change"].split(" ")[0] for s in opt["sensitivity"]} >= {"tp", "pp", "micro-batch", "recompute", "ZeRO"}
    assert doc["best"]["time"]["plan"] == opt["best"]


# a search (~1.2 s of CPU); the fast loop keeps test_a_composed_search_whose_gain_is_inside_the_interval_says_so
@pytest.mark.slow
def test_the_search_prunes_plans_above_the_memory_margin_with_the_reason(tmp_path):
    result = run_search(compose([*SMALL, "cluster.usable_hbm_fraction=0.3"]), tmp_path)
    cluster = result.context.workload.cluster
    usable_gib = usable_bytes(cluster) / 2**30
    assert usable_gib == pytest.approx(0.3 * cluster.gpu.hbm_capacity_gib)
    assert result.feasible and all(r.metrics["peak_memory_gib"] <= usable_gib for r in result.feasible)
    reasons = [r.reason for r in result.records if r.state == "PRUNED" and "usable" in (r.reason or "")]
    assert reasons and all("cluster.usable_hbm_fraction" in r for r in reasons)
    wider = run_search(compose(SMALL), tmp_path / "wide")
    assert len(wider.feasible) > len(result.feasible)  # the margin is what refused them


def test_margin_lines_name_the_field():
    cluster = build_workload(compose(["+model=gpt_1_7b", "+cluster=h200x8", "parallelism.tp=1", "parallelism.pp=1"
                                      ])).cluster
    assert "cluster.usable_hbm_fraction" in margin_reason(200 * 2**30, cluster)
    cap = 100 * 2**30
    assert margin_line(97 * 2**30, cap, 0.95).startswith("memory margin: the peak 97.0 GiB exceeds the usable 95.0")
    assert margin_line(90 * 2**30, cap, 0.95) is None and margin_line(120 * 2**30, cap, 0.95) is None


def test_the_recipe_baseline_fits_the_margin_and_keeps_tp_in_the_node():
    cfg = compose(["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=1", "parallelism.pp=1",
                   "parallelism.dp=1"])
    w = build_workload(cfg)
    got = baseline_plan(w)
    assert got is not None and got.plan.tp == RECIPE_MAX_TP and got.plan.pp > 1  # 175B needs TP8 and a pipeline
    assert got.report.peak_memory_bytes <= usable_bytes(w.cluster) and got.plan.num_gpus <= 1024
    assert "TP8" in got.rule and "from memory" in got.rule
    small = baseline_plan(build_workload(compose(["+model=gpt_1_7b", "+cluster=h200x8", "parallelism.tp=1",
                                                  "parallelism.pp=1", "parallelism.dp=1"])), gpus=4)
    assert small is not None and (small.plan.tp, small.plan.pp) == (1, 1) and small.plan.num_gpus <= 4


def test_the_recipe_baseline_uses_every_gpu_when_a_plan_that_does_fits():
    # Llama 3 405B (126 layers) on 1,024 H100: PP6 (a divisor of 126) fits first but leaves 256 GPUs idle
    # (8 x 6 x 16 = 768); Megatron's world size is tp x pp x dp, so the rule goes on to a power-of-two pipeline
    w = build_workload(compose(["+model=llama3_1_405b", "+cluster=h100x1024", "parallelism.tp=1",
                                "parallelism.pp=1", "parallelism.dp=1"]))
    got = baseline_plan(w)
    assert got is not None and got.plan.num_gpus == 1024
    assert (got.plan.tp, got.plan.pp) in {(8, 8), (8, 16)} and got.plan.dp == 1024 // (8 * got.plan.pp)


def test_a_moe_baseline_puts_the_experts_inside_the_nvlink_domain():
    w = build_workload(compose(["+model=mixtral_8x7b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
                                "parallelism.dp=1", "parallelism.ep=1"]))
    got = baseline_plan(w)
    assert got is not None and 1 < got.plan.ep <= w.cluster.domain_size and got.plan.etp in (0, 1)
    assert "EP" in got.rule


def test_prepare_keeps_the_margin_of_the_cluster(tmp_path):
    ctx = prepare(compose([*SMALL, "cluster.usable_hbm_fraction=0.8"]))
    assert ctx.workload.cluster.usable_hbm_fraction == 0.8


def test_a_user_plan_that_is_no_plan_is_said_beside_the_recipe_gain():
    from vtrain.search.optimum import Optimum

    opt = Optimum("best", gain=gain_over(_metrics(10.0), _metrics(20.0), "b", "recipe rule: ..."),
                  baseline_note="your parallelism is no plan for this cluster (tp=3 ...)")
    lines = opt.lines()
    assert any(ln.startswith("gain over the baseline b (recipe rule") for ln in lines)
    assert "  (your parallelism is no plan for this cluster (tp=3 ...): the recipe rule's plan is the baseline " \
           "instead)" in lines
