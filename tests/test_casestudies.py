"""The paper's three case studies (task=casestudy), in small versions that run in seconds."""
from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from vtrain.api import cost_model_for
from vtrain.casestudies import STUDIES, study
from vtrain.casestudies.scheduler import Job, Option, schedule
from vtrain.casestudies.sizing import ChinchillaFit
from vtrain.config.build import build_workload
from vtrain.config.compose import CONF_DIR, compose
from vtrain.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def run(name: str, *overrides: str):
    cfg = compose([f"+casestudy={name}", "tracking.enabled=false", *overrides])
    w = build_workload(cfg)
    run_study, _ = study(str(cfg.case_study.name))
    return run_study(cfg, w, cost_model_for(w))


# ------------------------------------------------------------------------------------------ configs
def test_every_casestudy_config_composes_and_names_a_study():
    names = sorted(p.stem for p in (CONF_DIR / "casestudy").glob("*.yaml"))
    assert names == ["compute_optimal", "mtnlg_parallel", "multitenant"]
    for n in names:
        cfg = compose([f"+casestudy={n}"])
        assert cfg.task == "casestudy" and str(cfg.case_study.name) in STUDIES


def test_mtnlg_config_is_the_published_setup():
    cfg = compose(["+casestudy=mtnlg_parallel"])
    assert (cfg.model.name, cfg.cluster.name) == ("mtnlg530b", "a100x3360")
    assert (cfg.training.global_batch_size, cfg.training.seq_len, cfg.training.tokens_to_train) == (1920, 2048, 2.7e11)
    par = cfg.parallelism
    assert (par.micro_batch_size, par.recompute, par.schedule) == (1, "full", "1f1b")
    assert dict(cfg.case_study.params.baseline) == {"tp": 8, "dp": 12, "pp": 35}


# ------------------------------------------------------------------------------ 1. parallelization
@pytest.fixture(scope="module")
def parallel():
    return run("mtnlg_parallel", "case_study.params.tp=[8,16]", "case_study.params.pp=[21,35]",
               "case_study.params.dp=[5,8,10,12,15,20]")


def test_parallelization_baseline_row_and_consistent_savings(parallel):
    rows = parallel.tables["plans"]
    base = [r for r in rows if r["baseline"]]
    assert len(base) == 1 and (base[0]["tp"], base[0]["dp"], base[0]["pp"]) == (8, 12, 35)
    b = base[0]
    assert b["gpus"] == 3360 and b["micro_batches"] == 160
    assert b["cost_saved_pct"] == pytest.approx(0) and b["time_saved_pct"] == pytest.approx(0)
    assert all(r["gpus"] == r["tp"] * r["dp"] * r["pp"] <= 3360 for r in rows)
    assert {(r["tp"], r["pp"]) for r in rows} <= {(8, 21), (8, 35), (16, 21), (16, 35)}
    for r in rows:  # savings are computed from the row's own values
        assert r["cost_saved_pct"] == pytest.approx(100 * (b["cost_usd"] - r["cost_usd"]) / b["cost_usd"])
        assert r["time_saved_pct"] == pytest.approx(
            100 * (b["time_to_train_days"] - r["time_to_train_days"]) / b["time_to_train_days"])
        # cost is GPU-hours at the price; time is iterations x iteration time
        assert r["cost_usd"] == pytest.approx(r["gpus"] * r["time_to_train_days"] * 24 * 5.12, rel=1e-9)
        assert r["time_to_train_days"] * 86400 == pytest.approx(2.7e11 / (1920 * 2048) * r["iteration_time_s"])
        if r["beats_baseline_cost"]:
            assert r["fits"] and r["cost_usd"] < b["cost_usd"] and r["time_to_train_days"] <= b["time_to_train_days"]
        if r["beats_baseline_time"]:
            assert r["fits"] and r["time_to_train_days"] < b["time_to_train_days"] and r["cost_usd"] <= b["cost_usd"]
    s = parallel.summary
    assert s["plans_cheaper_at_equal_or_lower_time"] == sum(r["beats_baseline_cost"] for r in rows)
    if s["best_cost_at_equal_or_lower_time"]:
        best = s["best_cost_at_equal_or_lower_time"]
        assert best["cost_usd"] == min(r["cost_usd"] for r in rows if r["beats_baseline_cost"])


def test_parallelization_pareto_front_is_non_dominated(parallel):
    rows = [r for r in parallel.tables["plans"] if r["fits"]]
    front = [r for r in rows if r["pareto"]]
    assert front
    for f in front:
        assert not any(o["time_to_train_days"] <= f["time_to_train_days"] and o["cost_usd"] < f["cost_usd"]
                       for o in rows)
    for r in rows:  # every plan off the front is dominated (or tied) by one on it
        if not r["pareto"]:
            assert any(f["time_to_train_days"] <= r["time_to_train_days"] and f["cost_usd"] <= r["cost_usd"]
                       for f in front)


def test_parallelization_reproduces_the_papers_headline(parallel):
    """vTrain paper (Bang et al., MICRO 2024), Sec. on cost-effective parallelization: for MT-NLG 530B on 3,360
    A100 it finds plans more than 5% cheaper and more than 10% more GPU-efficient (MFU) than the published
    (8,35,12). Reproduced: (8,21,8) on 1,344 GPUs, >= 12% cheaper at 1.14x the baseline's MFU. Not reproduced
    one-to-one: the paper's exact plans are not public, and at equal or lower time vtrain finds < 1% savings."""
    rows = parallel.tables["plans"]
    b = next(r for r in rows if r["baseline"])
    better = [r for r in rows if r["fits"] and r["cost_saved_pct"] > 5.0 and r["mfu_pct"] > 1.10 * b["mfu_pct"]]
    assert {(r["tp"], r["pp"], r["dp"]) for r in better} >= {(8, 21, 8), (8, 21, 5)}
    eight = next(r for r in better if (r["tp"], r["pp"], r["dp"]) == (8, 21, 8))
    assert eight["gpus"] == 1344 and eight["cost_saved_pct"] > 12.0 and eight["time_saved_pct"] < 0


# ---------------------------------------------------------------------------------- 2. scheduling
@pytest.fixture(scope="module")
def sched():
    return run("multitenant")


def test_scheduler_completes_every_job_without_oversubscribing(sched):
    names = {j["name"] for j in compose(["+casestudy=multitenant"]).case_study.params.jobs}
    assert len(names) >= 8
    for sim in sched.data["sims"]:
        assert {r.job for r in sim.records} == names
        events = []
        for r in sim.records:
            assert r.start_s >= r.arrival_s - 1e-6 and r.end_s > r.start_s
            gpus = sum(hi - lo for lo, hi in r.gpu_ranges)
            assert gpus == r.option.nodes * 8 >= r.option.report.gpus_used and r.option.report.fits
            events += [(r.start_s, gpus), (r.end_s, -gpus)]
        used = 0
        for _, d in sorted(events, key=lambda e: (e[0], e[1])):  # releases before starts at equal times
            used += d
            assert used <= 1024
        for a in sim.records:  # no node runs two jobs at once
            for b in sim.records:
                if a is not b and a.start_s < b.end_s - 1e-6 and b.start_s < a.end_s - 1e-6:
                    assert not set(a.nodes) & set(b.nodes)
        assert 0 < sim.utilization <= 1 and 0 < sim.cluster_mfu < sim.utilization


def test_guided_policy_beats_the_heuristic_on_the_example_trace(sched):
    pol = {p["policy"]: p for p in sched.tables["policies"]}
    assert set(pol) == {"baseline", "vtrain", "vtrain_sjf"}
    assert pol["vtrain"]["avg_jct_h"] <= pol["baseline"]["avg_jct_h"]
    assert pol["vtrain_sjf"]["avg_jct_h"] <= pol["baseline"]["avg_jct_h"]
    assert pol["vtrain"]["avg_jct_vs_baseline_pct"] == pytest.approx(
        100 * (pol["baseline"]["avg_jct_h"] - pol["vtrain"]["avg_jct_h"]) / pol["baseline"]["avg_jct_h"])
    jobs = [r for r in sched.tables["jobs"] if r["policy"] == "baseline"]
    assert pol["baseline"]["avg_jct_h"] == pytest.approx(sum(r["jct_h"] for r in jobs) / len(jobs))
    # docs/casestudies.md's figures for this trace: average JCT 49% lower with vtrain's allocations (55% with
    # shortest-job-first), makespan 46% lower, cluster MFU from 27% to 50%: the paper's direction (vTrain-guided
    # scheduling shortens the average completion time), the magnitude on this project's own trace
    assert pol["vtrain"]["avg_jct_vs_baseline_pct"] == pytest.approx(49.0, abs=2.0)
    assert pol["vtrain_sjf"]["avg_jct_vs_baseline_pct"] == pytest.approx(55.3, abs=2.0)
    assert pol["vtrain"]["makespan_vs_baseline_pct"] == pytest.approx(45.7, abs=2.0)
    assert pol["vtrain"]["cluster_mfu_pct"] > 1.75 * pol["baseline"]["cluster_mfu_pct"]


def _opt(nodes: int, hours: float) -> Option:
    return Option(nodes, hours * 3600.0, None)  # type: ignore[arg-type]


def test_easy_backfill_on_a_hand_checked_trace():
    """4 nodes. A (3 nodes, 10 h) at 0; B (4 nodes, 5 h) at 1 h must wait for A; C (1 node, 2 h) at 2 h
    backfills on the free node (ends at 4 h, before B's reservation at 10 h); D (1 node, 20 h) at 3 h
    would delay B, so it waits until B is done."""
    jobs = [Job(n, "m", 1.0, 1.0, t * 3600.0, None) for n, t in (("A", 0), ("B", 1), ("C", 2), ("D", 3))]  # type: ignore[arg-type]
    opts = {"A": [_opt(3, 10)], "B": [_opt(4, 5)], "C": [_opt(1, 2)], "D": [_opt(1, 20)]}
    res = schedule(jobs, opts, total_nodes=4, gpn=8, policy="fifo", order_key=lambda j: (j.arrival_s, j.name))
    start = {r.job: r.start_s / 3600 for r in res.records}
    assert start == pytest.approx({"A": 0, "B": 10, "C": 2, "D": 15})


def test_guided_choice_takes_the_earliest_finish():
    """One job, two allocations: 1 node for 10 h now, or 4 nodes for 3 h after the running job ends (5 h)."""
    jobs = [Job("X", "m", 1.0, 1.0, 0.0, None), Job("Y", "m", 1.0, 1.0, 1.0, None)]  # type: ignore[arg-type]
    opts = {"X": [_opt(3, 5)], "Y": [_opt(1, 10), _opt(4, 3)]}
    res = schedule(jobs, opts, 4, 8, "vtrain", lambda j: (j.arrival_s, j.name))
    y = next(r for r in res.records if r.job == "Y")
    assert y.option.nodes == 4 and y.start_s == pytest.approx(5 * 3600)


# ------------------------------------------------------------------------------ 3. compute-optimal
def test_chinchilla_loss_formula_values():
    fit = ChinchillaFit()
    assert (fit.E, fit.A, fit.B, fit.alpha, fit.beta) == (1.69, 406.4, 410.7, 0.34, 0.28)
    n, d = 70e9, 1.4e12  # Chinchilla itself
    assert fit.loss(n, d) == pytest.approx(1.69 + 406.4 / n ** 0.34 + 410.7 / d ** 0.28)
    assert fit.loss(n, d) == pytest.approx(1.9367, abs=2e-4)
    c = 5.76e23  # Chinchilla's budget: the closed form is a minimum along C = 6ND
    n_opt, d_opt = fit.optimum(c)
    assert 6 * n_opt * d_opt == pytest.approx(c)
    for k in (0.8, 1.25):
        assert fit.loss(n_opt, d_opt) < fit.loss(n_opt * k, d_opt / k)


def test_compute_optimal_choices_follow_the_loss():
    r = run("compute_optimal", "case_study.params.gpu_counts=[1024]",
            "case_study.params.shapes=[{name:s1,num_layers:24,hidden_size:2048,num_heads:16},"
            "{name:s2,num_layers:40,hidden_size:5120,num_heads:40},{name:s3,num_layers:48,hidden_size:8192,num_heads:64}]")
    rows = r.tables["shapes"]
    assert [x["shape"] for x in rows] == ["s1", "s2", "s3"]
    s = r.summary
    fit = ChinchillaFit()
    for x in rows:
        n = x["params_b"] * 1e9
        assert x["loss_fixed_mfu"] == pytest.approx(fit.loss(n, x["tokens_fixed_mfu"]))
        assert x["tokens_fixed_mfu"] == pytest.approx(
            0.45 * 312e12 * 1024 * min(30 * 86400, 1e6 * 3600 / 1024) / (6 * n))
        assert x["feasible_vtrain"] and x["loss_vtrain"] == pytest.approx(fit.loss(n, x["tokens_vtrain"]))
        assert x["gpu_hours"] <= 1e6 * (1 + 1e-9) and x["train_days"] <= 30 * (1 + 1e-9)
    assert s["vtrain_choice"]["shape"] == min(rows, key=lambda x: x["loss_vtrain"])["shape"]
    assert s["chinchilla_choice"]["shape"] == min(rows, key=lambda x: x["loss_fixed_mfu"])["shape"]
    assert s["same_choice"] == (s["vtrain_choice"]["shape"] == s["chinchilla_choice"]["shape"])


@pytest.mark.slow
def test_compute_optimal_study_does_not_reproduce_a_changed_choice():
    """The paper's compute-optimal study finds that realistic (simulated) throughput moves the compute-optimal
    model away from the fixed-MFU Chinchilla choice. NOT reproduced here: at 1M GPU-hours and 30 days on 1,024
    A100, vtrain's per-shape MFU (46-50% for large shapes) picks the same gpt-30b as a fixed 45% MFU; what the
    simulation changes is the token count (about 3.7% more) and so the loss (docs/casestudies.md)."""
    r = run("compute_optimal")
    s = r.summary
    assert s["same_choice"] and s["vtrain_choice"]["shape"] == s["chinchilla_choice"]["shape"] == "gpt-30b"
    v, c = s["vtrain_choice"], s["chinchilla_choice"]
    assert v["tokens_vtrain"] / c["tokens_fixed_mfu"] == pytest.approx(1.037, abs=0.01)
    assert v["loss_vtrain"] < c["loss_fixed_mfu"]


# --------------------------------------------------------------------------------- bad sweep inputs
def test_empty_job_queue_is_a_config_error():
    with pytest.raises(ConfigError, match="jobs is empty"):
        run("multitenant", "case_study.params.jobs=[]")


def test_budget_too_small_is_a_config_error():
    with pytest.raises(ConfigError, match="too small for any model"):
        run("compute_optimal", "case_study.params.budget_gpu_hours=0.01",
            "case_study.params.shapes=[{name:s1,num_layers:24,hidden_size:2048,num_heads:16}]",
            "case_study.params.gpu_counts=[1024]")


def test_unknown_param_key_is_a_config_error():
    with pytest.raises(ConfigError, match="case_study.params"):
        run("mtnlg_parallel", "+case_study.params.tpp=[8]")


def test_cli_bad_input_is_one_line(tmp_path, capfd):
    from tests.clirun import run_inprocess

    res = run_inprocess(["+casestudy=multitenant", "case_study.params.jobs=[]", "tracking.enabled=false",
                         f"hydra.run.dir={tmp_path}/run"], capfd)
    assert res.one_line_error() == ("vtrain: error: case_study.params.jobs is empty: give at least one job "
                                    "({name, model, tokens, arrival_h})")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------- CLI: files and MLflow
@pytest.mark.slow
def test_cli_writes_table_plot_and_logs_to_mlflow(tmp_path):
    db = tmp_path / "mlflow.db"
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "vtrain", "+casestudy=mtnlg_parallel", "case_study.params.tp=[8]",
                        "case_study.params.pp=[35]", f"tracking.uri=sqlite:///{db}", f"hydra.run.dir={out}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = list(csv.DictReader((out / "plans.csv").open()))
    assert any(r["baseline"] == "true" for r in rows)  # the one CSV writer: booleans as true/false
    assert (out / "parallelization.png").stat().st_size > 10_000 and (out / "summary.json").is_file()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("vtrain/casestudy/parallelization")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    m = parents[0].data.metrics
    assert m["plans_simulated"] == len(rows) and math.isfinite(m["baseline_cost_usd"])
    arts = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert {"plans.csv", "parallelization.png", "summary.json"} <= arts
    assert any(r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id for r in runs)  # child runs
