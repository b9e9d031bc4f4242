"""Prediction intervals: the split-conformal quantile (finite-sample order statistics, monotone, small
classes), the class fallback and the unvalidated class, the Report fields, coverage80 in task=validate,
and search.objective_quantile=hi."""
from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tests.clirun import run_inprocess
from vtrain import compose, simulate
from vtrain.errors import ConfigError
from vtrain.sim import intervals as iv

ROOT = Path(__file__).resolve().parents[2]


def test_conformal_uses_the_finite_sample_order_statistics():
    r = list(range(1, 101))  # residuals 1..100, shuffled order must not matter
    rng = np.random.default_rng(0)
    rng.shuffle(r)
    # n = 100: k_lo = floor(101 * 0.1) = 10, k_hi = ceil(101 * 0.9) = ceil(90.9) = 91
    assert iv.conformal_quantiles(r) == (10.0, 91.0)
    # n = 19: (n+1)*0.9 = 18 exactly (no float round-up to 19), k_lo = 2
    assert iv.conformal_quantiles(range(1, 20)) == (2.0, 18.0)
    # n = 9 is the smallest finite 80% interval: min and max; n = 8 has none
    assert iv.min_finite_n() == 9
    assert iv.conformal_quantiles(range(1, 10)) == (1.0, 9.0)
    assert iv.conformal_quantiles(range(1, 9)) is None
    assert iv.conformal_quantiles([]) is None


def test_conformal_interval_is_monotone_in_level_and_data():
    rng = np.random.default_rng(1)
    r = rng.normal(size=200).tolist()
    lo8, hi8 = iv.conformal_quantiles(r, 0.8)
    lo9, hi9 = iv.conformal_quantiles(r, 0.9)
    assert lo9 <= lo8 < hi8 <= hi9
    # a larger residual never lowers the upper end; a smaller one never raises the lower end
    assert iv.conformal_quantiles(r + [10.0])[1] >= hi8
    assert iv.conformal_quantiles(r + [-10.0])[0] <= lo8
    # the empirical coverage of the training residuals is at least the level
    assert np.mean((np.array(r) >= lo8) & (np.array(r) <= hi8)) >= 0.8


CLASSES = {
    "transferred": {"n": 100, "q_lo": -0.3, "q_hi": 0.2},
    "transferred/moe": {"n": 12, "q_lo": -0.1, "q_hi": 0.4},  # too few to stand alone, finite
    "transferred/moe/multi_node": {"n": 5, "q_lo": None, "q_hi": None},
    "transferred/moe/multi_node/gpu_bound": {"n": 5, "q_lo": None, "q_hi": None},
    "transferred/dense": {"n": 88, "q_lo": -0.2, "q_hi": 0.1},
    "fitted": {"n": 50, "q_lo": -0.05, "q_hi": 0.05},
}


def test_small_classes_fall_back_to_a_wider_class_never_narrower_than_their_own_data():
    lo, hi, used = iv.resolve("transferred/moe/multi_node/gpu_bound", CLASSES, 20)
    assert used == "transferred"
    assert (lo, hi) == (-0.3, 0.4)  # the parent's interval, widened to the MoE class's own upper end
    assert iv.resolve("transferred/dense/single_node/gpu_bound", CLASSES, 20) == (-0.2, 0.1, "transferred/dense")
    assert iv.resolve("transferred/moe/multi_node/gpu_bound", CLASSES, 200) is None


def table(**validated):
    return iv.IntervalTable({"classes": CLASSES, "min_class_n": 20,
                             "validated": {"gpu": ["h100_sxm"], "precision": ["bf16"], "schedule": ["1f1b"],
                                           **validated}})


def test_unvalidated_features_get_the_widest_class_and_a_note():
    t = table()
    ok = t.interval("h100_sxm", "bf16", "1f1b", "transferred/dense/single_node/gpu_bound")
    assert ok.regime == "transferred/dense" and ok.note == ""
    assert (ok.lo_factor, ok.hi_factor) == pytest.approx((np.exp(-0.2), np.exp(0.1)))
    for gpu, prec, sched, key in [("gb300", "bf16", "1f1b", "transferred/dense/single_node/gpu_bound"),
                                  ("h100_sxm", "nvfp4", "1f1b", "transferred/dense/single_node/gpu_bound"),
                                  ("h100_sxm", "bf16", "dualpipe", "transferred/dense/single_node/gpu_bound"),
                                  ("h100_sxm", "bf16", "1f1b", "fitted/moe/single_node/gpu_bound")]:
        bad = t.interval(gpu, prec, sched, key)
        assert bad.regime == iv.UNVALIDATED and "validation rows for" in bad.note
        assert (bad.lo_factor, bad.hi_factor) == pytest.approx((np.exp(-0.3), np.exp(0.4)))  # the envelope
        assert bad.lo_factor <= ok.lo_factor and bad.hi_factor >= ok.hi_factor
    assert "gpu=gb300" in t.interval("gb300", "bf16", "1f1b", "transferred/dense/single_node/gpu_bound").note


def test_a_one_sided_class_still_contains_the_prediction():
    assert iv.factors(0.1, 0.3) == (1.0, pytest.approx(np.exp(0.3)))
    assert iv.factors(-0.3, -0.1) == (pytest.approx(np.exp(-0.3)), 1.0)


def test_regime_key_conditions_on_constants_family_nodes_and_bound():
    assert iv.regime_key("a100_80gb", "megatron_deepspeed_2022", False, False, False, 0.5) == \
        "fitted/dense/single_node/host_bound"
    assert iv.regime_key("a100_80gb", "megatron_deepspeed_2022", True, False, True, 0.0) == \
        "transferred/dense/multi_node/gpu_bound"
    assert iv.regime_key("h100_sxm", "megatron_core_te", False, True, True, 0.0).startswith("transferred/moe/")
    assert iv.lineage("a/b/c/d") == ["a/b/c/d", "a/b/c", "a/b", "a"]


def test_shipped_table_states_its_data_and_covers_held_out_runs_at_80_percent():
    data = json.loads((ROOT / "vtrain" / "data" / "intervals.json").read_text())
    assert {"method", "command", "generated", "data", "classes", "heldout_coverage", "validated"} <= set(data)
    for key, c in data["classes"].items():
        assert c["n"] >= 1 and (c["q_lo"] is None) == (c["n"] < iv.min_finite_n()), key
        if c["q_lo"] is not None:
            assert c["q_lo"] <= c["q_hi"]
    # each class's n is the sum of its children's
    for key, c in data["classes"].items():
        kids = [k for k in data["classes"] if k.startswith(key + "/") and k.count("/") == key.count("/") + 1]
        if kids:
            assert c["n"] == sum(data["classes"][k]["n"] for k in kids), key
    # held out a source at a time (the table refitted without it): 70-90% on average over the sources (issue 39);
    # every row is checked once
    per_source = [c["coverage_pct"] for k, c in data["heldout_coverage"].items() if k.startswith("source:")]
    assert len(per_source) >= 5 and 70.0 <= sum(per_source) / len(per_source) <= 90.0
    roots = sum(c["n"] for k, c in data["classes"].items() if "/" not in k)
    assert data["heldout_coverage"]["all"]["n"] == roots


@pytest.mark.parametrize("overrides, regime", [
    (["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8",
      "parallelism.micro_batch_size=1"], None),
    (["+model=gpt_1_7b", "+cluster=vtrain_a100", "stack=megatron_deepspeed_2022", "parallelism.tp=2",
      "parallelism.pp=1", "parallelism.dp=4", "training.global_batch_size=32", "training.seq_len=1024"], "fitted"),
    (["+model=llama3_8b", "+cluster=h200x8", "parallelism.sequence_parallel=false", "parallelism.tp=1",
      "parallelism.pp=1", "parallelism.dp=8", "training.global_batch_size=32"], iv.UNVALIDATED),
])
def test_report_carries_an_interval_around_its_prediction(overrides, regime):
    r = simulate(compose(overrides))
    assert 0 < r.iteration_time_lo_s <= r.iteration_time_s <= r.iteration_time_hi_s
    assert r.time_to_train_lo_s <= r.time_to_train_s <= r.time_to_train_hi_s
    assert r.cost_lo_usd <= r.cost_usd <= r.cost_hi_usd
    assert r.iteration_time_hi_s > r.iteration_time_lo_s
    ratio = r.iteration_time_hi_s / r.iteration_time_s  # time to train and cost share the relative interval
    assert r.time_to_train_hi_s / r.time_to_train_s == pytest.approx(ratio)
    assert r.cost_hi_usd / r.cost_usd == pytest.approx(ratio)
    assert r.interval_regime
    if regime is not None:
        assert r.interval_regime.split("/")[0] == regime
    if regime == iv.UNVALIDATED:
        assert any("validation rows for gpu=h200" in n for n in r.notes)
    d = r.to_dict()
    assert d["iteration_time_hi_s"] == r.iteration_time_hi_s and d["interval_regime"] == r.interval_regime


def test_validate_prints_coverage80_and_writes_the_interval_columns(tmp_path, capfd):
    src = ROOT / "vtrain" / "data" / "a100_single_node_iteration_times.csv"
    lines = src.read_text().splitlines()
    data = tmp_path / "rows.csv"
    data.write_text("\n".join([lines[0], *lines[1:400:20]]) + "\n")  # 20 rows
    run = tmp_path / "run"
    res = run_inprocess(["task=validate", "+cluster=vtrain_a100", f"validate.data={data}",
                         "validate.stack=megatron_deepspeed_2022",
                         "validate.show_rows=0", f"hydra.run.dir={run}"], capfd)
    assert res.code == 0, res.err
    line = next(ln for ln in res.out.splitlines() if ln.startswith("MAPE: "))
    assert "| coverage80: " in line and "% (fitted/dense/single_node" in line
    rows = list(csv.DictReader((run / "validation.csv").open()))
    assert len(rows) == 20
    covered = 0
    for row in rows:
        lo, mid, hi = float(row["predicted_lo_ms"]), float(row["predicted_ms"]), float(row["predicted_hi_ms"])
        assert lo <= mid <= hi
        inside = lo <= float(row["measured_ms"]) <= hi
        assert row["covered80"] == str(inside)
        covered += inside
    assert f"coverage80: {100 * covered / 20:.1f}%" in line


def test_objective_quantile_hi_ranks_on_the_slow_end_of_the_interval(tmp_path):
    from vtrain.search.objective import Evaluator
    from vtrain.search.run import prepare

    cfg = compose(["+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=32",
                   "search.progress_bar=false", "tracking.enabled=false"])
    ctx = prepare(cfg)
    objectives = ["time_to_train_s", "cost_usd", "tokens_per_s", "peak_memory_bytes"]
    mid = Evaluator(ctx.workload, ctx.cost, ctx.space, objectives)
    hi = Evaluator(ctx.workload, ctx.cost, ctx.space, objectives, "hi")
    plan = dataclasses.replace(ctx.workload.plan, tp=1, pp=1, dp=8, micro_batch_size=1)
    a, b = mid.evaluate(plan), hi.evaluate(plan)
    assert a.feasible and b.feasible
    report, _ = mid.simulate(plan)
    slow = report.iteration_time_hi_s / report.iteration_time_s
    assert slow > 1.0
    # the search ranks expected figures (with goodput, vtrain/sim/goodput.py): the slow end of those
    assert b.values[0] == pytest.approx(report.time_to_train_hi_s / report.goodput) and b.values[0] > a.values[0]
    assert b.values[1] == pytest.approx(report.cost_hi_usd / report.goodput) and b.values[1] > a.values[1]
    assert b.values[2] == pytest.approx(a.values[2] / slow)  # a rate: the slow end's throughput
    assert b.values[3] == a.values[3]  # memory has no interval
    with pytest.raises(ConfigError, match=r"^search.objective_quantile=max: must be one of mid, hi$"):
        from vtrain.search.settings import check_search

        check_search(compose(["+model=gpt_1_7b", "+cluster=h200x8", "search.objective_quantile=max"]).search)
