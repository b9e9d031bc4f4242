"""Issue 40: each model's published run (training/<preset>.yaml), the prices' kind/date/estimates, energy in the cost,
the cluster's reliability fields, and task=simulate's run, price, goodput and default-plan lines."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import run_inprocess
from vtrain import compose, simulate
from vtrain.config.build import build_workload
from vtrain.workload import reliability as rel

GPT3_PLAN = ["parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8"]


@pytest.mark.parametrize("model,tokens,seq,batch,cite", [
    ("llama3_405b", 1.56e13, 8192, 2048, "Dubey et al. 2024"),
    ("deepseek_v3", 1.48e13, 4096, 15360, "DeepSeek-AI 2024"),
    ("llama2_70b", 2.0e12, 4096, 1024, "Touvron et al. 2023"),
    ("llama3_70b", 1.5e13, 8192, 2048, "batch 2,048 x 8,192 assumed"),
    ("llama3_1_405b", 1.56e13, 8192, 2048, "Dubey et al. 2024"),
    ("gpt175b", 3.0e11, 2048, 1536, "Brown et al. 2020"),
    ("gpt_1_7b", 3.0e11, 2048, 1536, "assumed: GPT-3's run"),
])
def test_model_carries_its_published_run(model, tokens, seq, batch, cite) -> None:
    t = compose([f"+model={model}", "+cluster=h100x1024"]).training
    assert (t.tokens_to_train, t.seq_len, t.global_batch_size) == (tokens, seq, batch)
    assert cite in t.source


def test_explicit_training_overrides_win() -> None:
    t = compose(["+model=llama3_405b", "+cluster=h100x1024", "training.seq_len=4096"]).training
    assert (t.seq_len, t.tokens_to_train) == (4096, 1.56e13)
    t = compose(["+model=llama3_405b", "+cluster=h100x1024", "training=gpt3"]).training
    assert (t.seq_len, t.tokens_to_train, t.global_batch_size) == (2048, 3.0e11, 1536)


def test_gpt3_run_is_unchanged_for_gpt175b() -> None:
    """GPT-3 keeps the run every GPT-3 figure was computed with."""
    preset = simulate(compose(["+model=gpt175b", "+cluster=a100x1024", *GPT3_PLAN]))
    plain = simulate(compose(["+model=gpt175b", "+cluster=a100x1024", "training=default", *GPT3_PLAN]))
    assert preset.time_to_train_s == pytest.approx(plain.time_to_train_s)
    assert preset.iterations == pytest.approx(3.0e11 / (1536 * 2048))


def test_model_without_a_run_has_no_source() -> None:
    assert compose(["+model=tiny", "+cluster=local_cpu"]).training.source == ""


def test_pricing_names_kind_date_and_estimates() -> None:
    p = compose(["+model=gpt175b", "+cluster=h800x2048"]).pricing
    assert (p.kind, p.date) == ("list (on-demand)", "2025-10")
    assert "no public list price" in p.estimates["h800"] and "h100_sxm" not in p.estimates
    assert compose(["+model=gpt175b", "+cluster=a100x1024", "pricing=lambda_reserved"]).pricing.kind == "reserved"


def test_include_energy_adds_the_energy_cost() -> None:
    base = ["+model=gpt175b", "+cluster=a100x1024", *GPT3_PLAN]
    plain, with_energy = simulate(compose(base)), simulate(compose([*base, "pricing.include_energy=true"]))
    assert with_energy.energy_cost_usd > 0
    assert with_energy.cost_usd == pytest.approx(plain.cost_usd + plain.energy_cost_usd)
    assert plain.cost_usd == pytest.approx(plain.gpu_hours * plain.usd_per_gpu_hour)


def test_cluster_reliability_fields_compose_and_drive_goodput() -> None:
    base = ["+model=gpt175b", "+cluster=a100x1024", *GPT3_PLAN]
    c = build_workload(compose(base)).cluster
    assert c.gpu_failures_per_h == pytest.approx(rel.GPU_FAILURES_PER_H)
    assert c.checkpoint_write_gb_per_s == pytest.approx(2000 / 2048)
    r = simulate(compose(base))
    assert 0.9 < r.goodput < 1.0 and r.expected_time_to_train_s == pytest.approx(r.time_to_train_s / r.goodput)
    assert r.expected_cost_usd == pytest.approx(r.cost_usd / r.goodput)
    # 1,024 GPUs (128 nodes) of GPT-3's 2.45 TB checkpoint at 0.98 GB/s per node: 19.6 s per checkpoint
    assert r.checkpoint_write_s == pytest.approx(175e9 * 14 / (128 * 2000 / 2048 * 1e9), rel=0.01)
    free = simulate(compose([*base, "cluster.gpu_failures_per_h=0", "cluster.node_failures_per_h=0"]))
    assert free.goodput == 1.0 and free.expected_time_to_train_s == pytest.approx(free.time_to_train_s)
    slow = simulate(compose([*base, "cluster.restart_s=3600", "cluster.checkpoint_write_gb_per_s=0.1"]))
    assert slow.goodput < r.goodput


def test_bad_reliability_input_is_one_line(tmp_path: Path, capfd) -> None:
    res = run_inprocess(["task=simulate", "+model=gpt175b", "+cluster=a100x1024", *GPT3_PLAN,
                         "cluster.gpu_failures_per_h=-1", f"hydra.run.dir={tmp_path}"], capfd)
    assert res.code == 2 and "cluster.gpu_failures_per_h=-1" in res.one_line_error()


def test_a_model_without_a_run_asks_for_its_tokens(tmp_path: Path, capfd) -> None:
    args = ["task=simulate", "+model=qwen3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
            "parallelism.dp=8", "tracking=off"]
    res = run_inprocess([*args, f"hydra.run.dir={tmp_path / 'a'}"], capfd)
    line = res.one_line_error()
    assert res.code == 2 and line.startswith("vtrain: error: training.tokens_to_train=unset: model=qwen3_8b")
    res = run_inprocess([*args, "training.tokens_to_train=1.5e13", f"hydra.run.dir={tmp_path / 'b'}"], capfd)
    assert res.code == 0, res.err
    assert "run: 15T tokens, sequences of 2,048, batch 1,536" in res.out
    assert "from the command line: training.tokens_to_train" in res.out


def test_simulate_prints_and_writes_the_run_price_and_goodput(tmp_path: Path, capfd) -> None:
    res = run_inprocess(["task=simulate", "+model=gpt175b", "+cluster=a100x1024", *GPT3_PLAN, "tracking=off",
                         f"hydra.run.dir={tmp_path}"], capfd)
    assert res.code == 0, res.err
    assert "run: 300B tokens, sequences of 2,048, batch 1,536" in res.out and "Brown et al. 2020" in res.out
    assert "price: $5.12 per a100_80gb GPU-hour, pricing=aws_on_demand (list (on-demand), 2025-10)" in res.out
    assert "goodput: 98.2%" in res.out and "Young/Daly" in res.out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["run"]["tokens_to_train"] == 3.0e11 and report["run"]["pricing"]["estimate"] is None
    assert report["goodput"] == pytest.approx(0.982, abs=0.001)


@pytest.mark.slow
@pytest.mark.parametrize("model,cluster,expect", [
    ("llama3_405b", "h100x1024", ["run: 15.6T tokens, sequences of 8,192", "Dubey et al. 2024"]),
    ("deepseek_v3", "h800x2048", ["run: 14.8T tokens, sequences of 4,096", "ESTIMATE: no public list price"]),
])
def test_done_when_default_plan_fits_with_run_and_goodput(tmp_path: Path, capfd, model, cluster, expect) -> None:
    """Issue 40's "Done when": no plan given, the recipe plan that fits, the run it assumed and goodput."""
    res = run_inprocess(["task=simulate", f"+model={model}", f"+cluster={cluster}", "tracking=off",
                         f"hydra.run.dir={tmp_path}"], capfd)
    assert res.code == 0, res.err
    assert "plan: none given, so the recipe rule" in res.out and "goodput: " in res.out
    for text in expect:
        assert text in res.out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["fits"] and 0.9 < report["goodput"] < 1.0
    if model == "deepseek_v3":
        assert report["plan"]["ep"] > 1


@pytest.mark.slow
def test_a_bad_moe_plan_gets_a_hint_with_the_cause_and_the_recipe_plan(tmp_path: Path, capfd) -> None:
    """Issue 40's example: DeepSeek-V3 at TP8 x PP8 without expert parallelism neither fits nor runs well."""
    res = run_inprocess(["task=simulate", "+model=deepseek_v3", "+cluster=h800x2048", "parallelism.tp=8",
                         "parallelism.pp=8", "tracking=off", f"hydra.run.dir={tmp_path}"], capfd)
    assert res.code == 0, res.err
    hint = next(line for line in res.out.splitlines() if line.startswith("hint: does not fit memory"))
    assert "parallelism.ep=1: every GPU holds all 256 experts" in hint and "parallelism.ep=8" in hint
    assert "parallelism.tp=8 " not in hint  # only the overrides that change the plan
