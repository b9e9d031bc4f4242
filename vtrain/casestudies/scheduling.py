"""Case study 2 (vTrain, MICRO'24): scheduling LLM training jobs on a shared (multi-tenant) GPU cluster.

A queue of jobs (arrival time, model, tokens) arrives at one cluster. An event-driven scheduler
(FIFO with EASY backfilling, whole nodes) runs them under each policy:

- ``baseline``: every job gets a fixed GPU count by model size (``baseline_gpus`` table) and a
  rule-of-thumb plan: tensor parallelism inside a node first, then the fewest pipeline stages whose
  model states (18 bytes/parameter: bf16 weights, fp32 gradients, Adam) take at most
  ``baseline_state_fraction`` of HBM; micro-batch 1, ``baseline_recompute`` (full: safe); data parallelism fills
  the allocation. If vtrain's memory model says it does not fit, the next pipeline depth is tried.
- ``vtrain``: for each candidate GPU count vtrain predicts the job's time with its best plan; only
  allocations within ``efficiency_slack`` of the job's cheapest GPU-hours are allowed; when a job is
  scheduled it takes the allowed allocation with the earliest predicted *finish* (it may wait for a
  larger one). Same FIFO + EASY backfill.
- ``vtrain_sjf``: as ``vtrain``, the queue ordered by predicted run time (shortest job first).

The scheduler is :mod:`vtrain.casestudies.scheduler`, the allocations :mod:`vtrain.casestudies.allocation`.
Run times are vtrain's predictions for every policy (the "ground truth" of this simulated cluster).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Tuple

from omegaconf import DictConfig

from vtrain.casestudies.allocation import POLICIES, SchedulingParams, baseline_option, make_jobs, vtrain_options
from vtrain.casestudies.common import StudyResult, fmt_table, parse_params
from vtrain.casestudies.scheduler import Job, Option, ScheduleResult, schedule
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.io.labels import plan_label
from vtrain.report import Report
from vtrain.workload.enums import Recompute
from vtrain.workload.workload import Workload


def run_study(cfg: DictConfig, w: Workload, cost: CostModel) -> StudyResult:
    prm = parse_params(SchedulingParams, cfg.case_study.params)
    _check_params(prm)
    jobs = make_jobs(cfg, w, prm)
    gpn, total_nodes = w.cluster.gpus_per_node, w.cluster.num_nodes
    counts = sorted(set(prm.gpu_counts)) or [gpn * 2**k for k in range(int(math.log2(total_nodes)) + 1)]
    bad_counts = [g for g in counts if g % gpn or g > w.cluster.num_gpus or g <= 0]
    if bad_counts:
        raise ConfigError(f"case_study.params.gpu_counts: {bad_counts} must be whole nodes of {gpn} GPUs and at "
                          f"most the cluster's {w.cluster.num_gpus}")

    options: Dict[str, Dict[str, List[Option]]] = {}
    if "baseline" in prm.policies:
        options["baseline"] = {j.name: [baseline_option(j, cost, prm)] for j in jobs}
    if any(p.startswith("vtrain") for p in prm.policies):
        cache: Dict[Any, Optional[Report]] = {}
        vt = {j.name: vtrain_options(j, cost, prm, counts, cache) for j in jobs}
        options["vtrain"] = options["vtrain_sjf"] = vt
    sims = [schedule(jobs, options[pol], total_nodes, gpn, pol, _queue_order(pol, options[pol]))
            for pol in prm.policies]

    job_rows, pol_rows = _rows(sims, jobs, gpn, w.usd_per_gpu_hour)
    base = next((p for p in pol_rows if p["policy"] == "baseline"), None)
    if base:
        for p in pol_rows:
            p["avg_jct_vs_baseline_pct"] = 100 * (base["avg_jct_h"] - p["avg_jct_h"]) / base["avg_jct_h"]
            p["makespan_vs_baseline_pct"] = 100 * (base["makespan_h"] - p["makespan_h"]) / base["makespan_h"]

    summary = {"cluster": w.cluster.name, "cluster_gpus": w.cluster.num_gpus, "gpu": w.cluster.gpu.name,
               "usd_per_gpu_hour": w.usd_per_gpu_hour, "jobs": len(jobs), "gpu_counts": counts,
               "efficiency_slack": prm.efficiency_slack, "policies": pol_rows}
    metrics: Dict[str, float] = {}
    for p in pol_rows:
        for k in ("avg_jct_h", "median_jct_h", "max_jct_h", "avg_wait_h", "makespan_h", "gpu_utilization_pct",
                  "cluster_mfu_pct", "gpu_hours", "cost_usd"):
            metrics[f"{p['policy']}.{k}"] = float(p[k])
    params = {"cluster": w.cluster.name, "jobs": len(jobs), "policies": prm.policies, "gpu_counts": counts,
              "efficiency_slack": prm.efficiency_slack,
              "baseline_gpus": [dataclasses.asdict(r) for r in prm.baseline_gpus],
              "plan_tp": prm.plan_tp, "plan_max_pp": prm.plan_max_pp,
              "plan_micro_batch_sizes": prm.plan_micro_batch_sizes, "plan_recompute": prm.plan_recompute}
    runs = [{"name": p["policy"], "params": {"policy": p["policy"]},
             "metrics": {k: float(v) for k, v in p.items() if isinstance(v, (int, float))}} for p in pol_rows]
    span = max(j.arrival_s for j in jobs) / 3600
    lines = [f"case study 2: {len(jobs)} jobs arriving over {span:.1f} h on {w.cluster.name} "
             f"({w.cluster.num_gpus} x {w.cluster.gpu.name}), FIFO + EASY backfill on whole nodes",
             fmt_table(pol_rows, ["policy", "avg_jct_h", "median_jct_h", "max_jct_h", "avg_wait_h", "makespan_h",
                                  "gpu_utilization_pct", "cluster_mfu_pct", "gpu_hours"]
                       + (["avg_jct_vs_baseline_pct", "makespan_vs_baseline_pct"] if base else [])),
             "\nper job (allocated GPUs, plan, JCT in hours):",
             fmt_table(_side_by_side(job_rows, [p["policy"] for p in pol_rows]),
                       ["job", "model", "tokens_b"] + [f"{p['policy']}{s}" for p in pol_rows
                                                       for s in (":gpus", ":plan", ":jct_h")])]
    data = {"sims": sims, "cluster_gpus": w.cluster.num_gpus, "job_names": [j.name for j in jobs]}
    best = min(pol_rows, key=lambda p: p["avg_jct_h"])
    headline = f"best policy {best['policy']}: average JCT {best['avg_jct_h']:.1f} h" + (
        f" ({best['avg_jct_vs_baseline_pct']:.1f}% below the baseline)" if base else "")
    return StudyResult("scheduling", str(cfg.case_study.title or "Multi-tenant GPU cluster scheduling"),
                       {"jobs": job_rows, "policies": pol_rows}, summary, params, metrics, "\n".join(lines), data,
                       runs, headline)


def _check_params(prm: SchedulingParams) -> None:
    """The policies, the baseline's recompute and the efficiency slack, each a one-line error."""
    bad = [p for p in prm.policies if p not in POLICIES]
    if bad or not prm.policies:
        raise ConfigError(f"case_study.params.policies={prm.policies}: each must be one of {', '.join(POLICIES)}")
    if prm.baseline_recompute not in [r.value for r in Recompute]:
        raise ConfigError(f"case_study.params.baseline_recompute={prm.baseline_recompute} is not one of "
                          f"{', '.join(r.value for r in Recompute)}")
    if prm.efficiency_slack < 0:
        raise ConfigError(f"case_study.params.efficiency_slack={prm.efficiency_slack} must be >= 0")


def _rows(sims: List[ScheduleResult], jobs: List[Job], gpn: int, usd_per_gpu_hour: float
          ) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """One row per (policy, job) and one per policy (JCTs, makespan, utilization, GPU hours, cost)."""
    job_rows: List[Dict[str, Any]] = []
    pol_rows: List[Dict[str, Any]] = []
    by_name = {j.name: j for j in jobs}
    for sim in sims:
        for rec in sim.records:
            r, j = rec.option.report, by_name[rec.job]
            job_rows.append({
                "policy": sim.policy, "job": rec.job, "model": j.model, "params_b": j.params_b,
                "tokens_b": j.tokens / 1e9, "arrival_h": rec.arrival_s / 3600, "start_h": rec.start_s / 3600,
                "end_h": rec.end_s / 3600, "wait_h": (rec.start_s - rec.arrival_s) / 3600,
                "run_h": (rec.end_s - rec.start_s) / 3600, "jct_h": (rec.end_s - rec.arrival_s) / 3600,
                "gpus_allocated": rec.option.nodes * gpn, "gpus_used": r.gpus_used, "plan": plan_label(r.plan),
                "iteration_time_s": r.iteration_time_s, "mfu_pct": 100 * r.mfu,
                "gpu_hours": rec.option.nodes * gpn * (rec.end_s - rec.start_s) / 3600,
                "cost_usd": rec.option.nodes * gpn * (rec.end_s - rec.start_s) / 3600 * usd_per_gpu_hour})
        jcts = sorted(rec.end_s - rec.arrival_s for rec in sim.records)
        pol_rows.append({
            "policy": sim.policy, "jobs": len(sim.records), "avg_jct_h": sim.avg_jct_s / 3600,
            "median_jct_h": jcts[len(jcts) // 2] / 3600 if len(jcts) % 2 else (jcts[len(jcts) // 2 - 1]
                                                                                + jcts[len(jcts) // 2]) / 7200,
            "max_jct_h": jcts[-1] / 3600,
            "avg_wait_h": sum(r.start_s - r.arrival_s for r in sim.records) / len(sim.records) / 3600,
            "makespan_h": sim.makespan_s / 3600, "gpu_utilization_pct": 100 * sim.utilization,
            "cluster_mfu_pct": 100 * sim.cluster_mfu,
            "gpu_hours": sum(x["gpu_hours"] for x in job_rows if x["policy"] == sim.policy),
            "cost_usd": sum(x["cost_usd"] for x in job_rows if x["policy"] == sim.policy)})
    return job_rows, pol_rows


def _queue_order(policy: str, options: Dict[str, List[Option]]) -> Callable[[Job], Any]:
    """FIFO; shortest predicted run time first for ``vtrain_sjf``."""
    if policy == "vtrain_sjf":
        return lambda j: (min(x.duration_s for x in options[j.name]), j.arrival_s)
    return lambda j: (j.arrival_s, j.name)


def _side_by_side(rows: List[Dict[str, Any]], policies: List[str]) -> List[Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        o = out.setdefault(r["job"], {"job": r["job"], "model": r["model"], "tokens_b": r["tokens_b"],
                                      "_arr": r["arrival_h"]})
        o[f"{r['policy']}:gpus"] = r["gpus_allocated"]
        o[f"{r['policy']}:plan"] = r["plan"].replace(" rc=", "/")
        o[f"{r['policy']}:jct_h"] = r["jct_h"]
    return sorted(out.values(), key=lambda o: (o["_arr"], o["job"]))
