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

EASY backfill: the first queued job that cannot start gets a reservation at the earliest time enough
nodes are free; a later job may start now if it ends before that time or uses only nodes the
reserved job does not need. Run times are vtrain's predictions for every policy (the "ground truth"
of this simulated cluster), and are known to the scheduler (as accurate wall-time limits would be).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from omegaconf import MISSING, DictConfig

from vtrain.casestudies.common import (
    PlanSpace,
    StudyResult,
    best_plan,
    divisors,
    fmt_table,
    load_model,
    parse_params,
    plan_str,
    with_plan,
)
from vtrain.config.validate import check_plan
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.report import Report
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.enums import Recompute
from vtrain.workload.workload import Workload

POLICIES = ("baseline", "vtrain", "vtrain_sjf")
STATE_BYTES_PER_PARAM = 18.0  # bf16 weights 2 + fp32 grads 4 + fp32 master/m/v 12 (Rajbhandari et al. 2020)


@dataclass
class JobSpec:
    name: str = MISSING
    model: str = ""  # a model/ config; "": the run's model
    tokens: float = MISSING  # tokens to train
    arrival_h: float = 0.0  # hours after the start of the trace
    global_batch_size: int = 0  # 0: training.global_batch_size
    seq_len: int = 0  # 0: training.seq_len


@dataclass
class GpuRule:
    max_params_b: float = MISSING  # models up to this many billion parameters ...
    gpus: int = MISSING  # ... get this many GPUs under the baseline policy


@dataclass
class SchedulingParams:
    jobs: List[JobSpec] = field(default_factory=list)
    policies: List[str] = field(default_factory=lambda: list(POLICIES))
    baseline_gpus: List[GpuRule] = field(default_factory=lambda: [
        GpuRule(3, 64), GpuRule(10, 128), GpuRule(30, 256), GpuRule(1e9, 512)])
    baseline_state_fraction: float = 0.5
    baseline_recompute: str = "full"  # the heuristic's "safe" choice (Megatron-LM's GPT-3 runs used full)
    gpu_counts: List[int] = field(default_factory=list)  # vtrain candidates; empty: 1, 2, 4, ... nodes
    efficiency_slack: float = 0.25  # allowed GPU-hours above the job's cheapest allocation (fraction)
    plan_tp: List[int] = field(default_factory=lambda: [1, 2, 4, 8])
    plan_max_pp: int = 16
    plan_micro_batch_sizes: List[int] = field(default_factory=lambda: [1, 2])
    plan_recompute: List[str] = field(default_factory=lambda: ["selective", "full"])


@dataclass(frozen=True)
class Option:
    """One way to run a job: whole nodes, the plan's report and its predicted run time."""

    nodes: int
    duration_s: float
    report: Report


@dataclass(frozen=True)
class Job:
    name: str
    model: str
    params_b: float
    tokens: float
    arrival_s: float
    workload: Workload


@dataclass(frozen=True)
class Record:
    job: str
    arrival_s: float
    start_s: float
    end_s: float
    nodes: Tuple[int, ...]
    gpu_ranges: Tuple[Tuple[int, int], ...]
    option: Option


@dataclass(frozen=True)
class ScheduleResult:
    policy: str
    records: Tuple[Record, ...]
    cluster_gpus: int

    @property
    def makespan_s(self) -> float:
        return max(r.end_s for r in self.records) - min(r.arrival_s for r in self.records)

    @property
    def avg_jct_s(self) -> float:
        return sum(r.end_s - r.arrival_s for r in self.records) / len(self.records)

    @property
    def utilization(self) -> float:
        """Allocated GPU-time over the cluster's GPU-time between the first arrival and the last end."""
        busy = sum(sum(hi - lo for lo, hi in r.gpu_ranges) * (r.end_s - r.start_s) for r in self.records)
        return busy / (self.cluster_gpus * self.makespan_s)

    @property
    def cluster_mfu(self) -> float:
        """Model FLOPs done over the peak FLOPs of the whole cluster in the same span."""
        useful = sum(r.option.report.mfu * r.option.report.gpus_used * (r.end_s - r.start_s) for r in self.records)
        return useful / (self.cluster_gpus * self.makespan_s)


# ---------------------------------------------------------------------------------------------- jobs
def make_jobs(cfg: DictConfig, w: Workload, prm: SchedulingParams) -> List[Job]:
    if not prm.jobs:
        raise ConfigError("case_study.params.jobs is empty: give at least one job "
                          "({name, model, tokens, arrival_h})")
    names = [j.name for j in prm.jobs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"case_study.params.jobs: duplicate job name(s): {', '.join(dup)}")
    jobs = []
    for j in prm.jobs:
        if not j.tokens or j.tokens <= 0:
            raise ConfigError(f"case_study.params.jobs[{j.name}].tokens={j.tokens} must be a positive number")
        if j.arrival_h < 0:
            raise ConfigError(f"case_study.params.jobs[{j.name}].arrival_h={j.arrival_h} must be >= 0")
        model = load_model(j.model) if j.model else w.model
        gbs = j.global_batch_size or w.plan.global_batch_size
        seq = j.seq_len or w.plan.seq_len
        if seq > model.max_seq_len and model.position_embedding.value == "learned":
            raise ConfigError(f"case_study.params.jobs[{j.name}]: seq_len={seq} exceeds {model.name}'s "
                              f"max_seq_len={model.max_seq_len}")
        jw = dataclasses.replace(w, model=model, plan=dataclasses.replace(
            w.plan, global_batch_size=gbs, seq_len=seq, tokens_to_train=float(j.tokens)))
        jobs.append(Job(j.name, model.name, model.total_params() / 1e9, float(j.tokens), j.arrival_h * 3600.0, jw))
    return jobs


def _scaled(report: Report, tokens: float) -> float:
    """Run time for ``tokens`` from a report's iteration time (the plan does not depend on tokens)."""
    p = report.plan.as_dict()
    return tokens / (p["global_batch_size"] * p["seq_len"]) * report.iteration_time_s


def baseline_option(job: Job, cost: CostModel, prm: SchedulingParams) -> Option:
    """The fixed heuristic allocation and plan (see the module docstring)."""
    w = job.workload
    gpn = w.cluster.gpus_per_node
    rules = sorted(prm.baseline_gpus, key=lambda r: r.max_params_b)
    gpus = next((r.gpus for r in rules if job.params_b <= r.max_params_b), rules[-1].gpus if rules else gpn)
    gpus = min(max(gpn, gpus - gpus % gpn), w.cluster.num_gpus)
    budget = prm.baseline_state_fraction * w.cluster.gpu.hbm_capacity_bytes
    states = STATE_BYTES_PER_PARAM * job.params_b * 1e9
    m = w.model
    tps = [t for t in (1, 2, 4, 8) if t <= gpn and m.num_heads % t == 0 and m.num_kv_heads % t == 0
           and m.ffn_hidden_size % t == 0]
    tp = next((t for t in tps if states / t <= budget), tps[-1])
    pps = [p for p in divisors(m.num_layers) if tp * p <= gpus]
    start = next((i for i, p in enumerate(pps) if states / (tp * p) <= budget), len(pps) - 1)
    for pp in pps[start:]:
        dp = max((d for d in divisors(w.plan.global_batch_size) if tp * pp * d <= gpus), default=0)
        if dp == 0:
            continue
        cand = with_plan(w, tp=tp, pp=pp, dp=dp, micro_batch_size=1, recompute=Recompute(prm.baseline_recompute),
                         sequence_parallel=w.plan.sequence_parallel and tp > 1)
        try:
            check_plan(cand.model, cand.plan, cand.cluster)
        except ConfigError:
            continue
        report, _ = simulate_workload(cand, cost)
        if report.fits:
            return Option(gpus // gpn, _scaled(report, job.tokens), report)
    raise ConfigError(f"job {job.name}: the baseline heuristic finds no plan of {job.model} that fits "
                      f"on {gpus} GPUs; raise its baseline_gpus rule")


def vtrain_options(job: Job, cost: CostModel, prm: SchedulingParams, gpu_counts: Sequence[int],
                   cache: Dict[Any, Optional[Report]]) -> List[Option]:
    """The job's efficient allocations: best plan per GPU count, then only counts whose GPU-hours are
    within ``efficiency_slack`` of the cheapest and that are faster than every smaller count."""
    w = job.workload
    space = PlanSpace(tuple(prm.plan_tp), prm.plan_max_pp, tuple(prm.plan_micro_batch_sizes),
                      tuple(prm.plan_recompute))
    gpn = w.cluster.gpus_per_node
    opts = []
    for g in gpu_counts:
        key = (w.model, w.plan.global_batch_size, w.plan.seq_len, g)
        if key not in cache:
            cache[key] = best_plan(w, cost, g, space)
        r = cache[key]
        if r is not None:
            opts.append(Option(g // gpn, _scaled(r, job.tokens), r))
    if not opts:
        raise ConfigError(f"job {job.name}: no plan of {job.model} fits on any of {list(gpu_counts)} GPUs "
                          f"of cluster {w.cluster.name}")
    cheapest = min(o.nodes * o.duration_s for o in opts)
    keep, best_time = [], math.inf
    for o in sorted(opts, key=lambda o: o.nodes):
        if o.nodes * o.duration_s <= (1 + prm.efficiency_slack) * cheapest and o.duration_s < best_time:
            keep.append(o)
            best_time = o.duration_s
    return keep


# ------------------------------------------------------------------------------------------ scheduler
def schedule(jobs: Sequence[Job], options: Dict[str, List[Option]], total_nodes: int, gpn: int, policy: str,
             order_key: Callable[[Job], Any]) -> ScheduleResult:
    """Event-driven FIFO (or ``order_key``) scheduling with EASY backfilling on whole nodes."""
    pending = sorted(jobs, key=lambda j: (j.arrival_s, j.name))
    waiting: List[Job] = []
    running: List[Tuple[float, str, Tuple[int, ...]]] = []  # (end, job, nodes)
    free = list(range(total_nodes))
    records: List[Record] = []
    now = 0.0
    eps = 1e-6

    def earliest(n: int) -> float:
        """Earliest time ≥ now with n nodes free, given the running jobs' end times."""
        avail = len(free)
        if avail >= n:
            return now
        for end, _, nodes in sorted(running):
            avail += len(nodes)
            if avail >= n:
                return end
        return math.inf

    def start(job: Job, opt: Option) -> None:
        nonlocal free
        take, free = tuple(free[:opt.nodes]), free[opt.nodes:]
        running.append((now + opt.duration_s, job.name, take))
        records.append(Record(job.name, job.arrival_s, now, now + opt.duration_s, take, _ranges(take, gpn), opt))

    while pending or waiting or running:
        events = ([pending[0].arrival_s] if pending else []) + [e for e, _, _ in running]
        if not events:  # cannot happen: an empty cluster always starts the first waiting job
            raise ConfigError(f"scheduler stalled with {len(waiting)} waiting job(s)")
        now = max(now, min(events))
        for item in [r for r in running if r[0] <= now + eps]:
            running.remove(item)
            free = sorted(free + list(item[2]))
        while pending and pending[0].arrival_s <= now + eps:
            waiting.append(pending.pop(0))
        reservation: Optional[Tuple[float, int]] = None  # (time, spare nodes at that time)
        for job in sorted(waiting, key=order_key):
            opts = options[job.name]
            if reservation is None:
                finish = [(earliest(o.nodes) + o.duration_s, o.nodes, i) for i, o in enumerate(opts)]
                f, _, i = min(finish)
                if math.isinf(f):
                    raise ConfigError(f"job {job.name} needs {opts[i].nodes} nodes; the cluster has {total_nodes}")
                opt = opts[i]
                t0 = earliest(opt.nodes)
                if t0 <= now + eps:
                    start(job, opt)
                    waiting.remove(job)
                else:
                    avail_then = len(free) + sum(len(n) for e, _, n in running if e <= t0 + eps)
                    reservation = (t0, avail_then - opt.nodes)
            else:
                t_res, spare = reservation
                ok = [o for o in opts if o.nodes <= len(free)
                      and (now + o.duration_s <= t_res + eps or o.nodes <= spare)]
                if ok:
                    opt = min(ok, key=lambda o: (o.duration_s, o.nodes))
                    if now + opt.duration_s > t_res + eps:
                        reservation = (t_res, spare - opt.nodes)
                    start(job, opt)
                    waiting.remove(job)
    return ScheduleResult(policy, tuple(sorted(records, key=lambda r: r.start_s)), total_nodes * gpn)


def _ranges(nodes: Sequence[int], gpn: int) -> Tuple[Tuple[int, int], ...]:
    """Contiguous GPU index ranges [lo, hi) of a set of nodes (for the Gantt chart)."""
    out: List[List[int]] = []
    for n in sorted(nodes):
        if out and out[-1][1] == n * gpn:
            out[-1][1] = (n + 1) * gpn
        else:
            out.append([n * gpn, (n + 1) * gpn])
    return tuple((lo, hi) for lo, hi in out)


# ------------------------------------------------------------------------------------------- study
def run_study(cfg: DictConfig, w: Workload, cost: CostModel) -> StudyResult:
    prm = parse_params(SchedulingParams, cfg.case_study.params)
    bad = [p for p in prm.policies if p not in POLICIES]
    if bad or not prm.policies:
        raise ConfigError(f"case_study.params.policies={prm.policies}: each must be one of {', '.join(POLICIES)}")
    if prm.baseline_recompute not in [r.value for r in Recompute]:
        raise ConfigError(f"case_study.params.baseline_recompute={prm.baseline_recompute} is not one of "
                          f"{', '.join(r.value for r in Recompute)}")
    if prm.efficiency_slack < 0:
        raise ConfigError(f"case_study.params.efficiency_slack={prm.efficiency_slack} must be >= 0")
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
    fifo = lambda j: (j.arrival_s, j.name)  # noqa: E731
    sims = []
    for pol in prm.policies:
        opts = options[pol]
        key = fifo if pol != "vtrain_sjf" else (lambda j, o=opts: (min(x.duration_s for x in o[j.name]), j.arrival_s))
        sims.append(schedule(jobs, opts, total_nodes, gpn, pol, key))

    job_rows, pol_rows = [], []
    by_name = {j.name: j for j in jobs}
    for sim in sims:
        for rec in sim.records:
            r, j = rec.option.report, by_name[rec.job]
            job_rows.append({
                "policy": sim.policy, "job": rec.job, "model": j.model, "params_b": j.params_b,
                "tokens_b": j.tokens / 1e9, "arrival_h": rec.arrival_s / 3600, "start_h": rec.start_s / 3600,
                "end_h": rec.end_s / 3600, "wait_h": (rec.start_s - rec.arrival_s) / 3600,
                "run_h": (rec.end_s - rec.start_s) / 3600, "jct_h": (rec.end_s - rec.arrival_s) / 3600,
                "gpus_allocated": rec.option.nodes * gpn, "gpus_used": r.gpus_used, "plan": plan_str(r.plan),
                "iteration_time_s": r.iteration_time_s, "mfu": r.mfu,
                "gpu_hours": rec.option.nodes * gpn * (rec.end_s - rec.start_s) / 3600,
                "cost_usd": rec.option.nodes * gpn * (rec.end_s - rec.start_s) / 3600 * w.usd_per_gpu_hour})
        jcts = sorted(rec.end_s - rec.arrival_s for rec in sim.records)
        pol_rows.append({
            "policy": sim.policy, "jobs": len(sim.records), "avg_jct_h": sim.avg_jct_s / 3600,
            "median_jct_h": jcts[len(jcts) // 2] / 3600 if len(jcts) % 2 else (jcts[len(jcts) // 2 - 1]
                                                                                + jcts[len(jcts) // 2]) / 7200,
            "max_jct_h": jcts[-1] / 3600,
            "avg_wait_h": sum(r.start_s - r.arrival_s for r in sim.records) / len(sim.records) / 3600,
            "makespan_h": sim.makespan_s / 3600, "gpu_utilization": sim.utilization, "cluster_mfu": sim.cluster_mfu,
            "gpu_hours": sum(x["gpu_hours"] for x in job_rows if x["policy"] == sim.policy),
            "cost_usd": sum(x["cost_usd"] for x in job_rows if x["policy"] == sim.policy)})
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
        for k in ("avg_jct_h", "median_jct_h", "max_jct_h", "avg_wait_h", "makespan_h", "gpu_utilization",
                  "cluster_mfu", "gpu_hours", "cost_usd"):
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
                                  "gpu_utilization", "cluster_mfu", "gpu_hours"]
                       + (["avg_jct_vs_baseline_pct", "makespan_vs_baseline_pct"] if base else [])),
             "\nper job (allocated GPUs, plan, JCT in hours):",
             fmt_table(_side_by_side(job_rows, [p["policy"] for p in pol_rows]),
                       ["job", "model", "tokens_b"] + [f"{p['policy']}{s}" for p in pol_rows
                                                       for s in (":gpus", ":plan", ":jct_h")])]
    data = {"sims": sims, "cluster_gpus": w.cluster.num_gpus, "job_names": [j.name for j in jobs]}
    return StudyResult("scheduling", str(cfg.case_study.title or "Multi-tenant GPU cluster scheduling"),
                       {"jobs": job_rows, "policies": pol_rows}, summary, params, metrics, "\n".join(lines), data,
                       runs)


def _side_by_side(rows: List[Dict[str, Any]], policies: List[str]) -> List[Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        o = out.setdefault(r["job"], {"job": r["job"], "model": r["model"], "tokens_b": r["tokens_b"],
                                      "_arr": r["arrival_h"]})
        o[f"{r['policy']}:gpus"] = r["gpus_allocated"]
        o[f"{r['policy']}:plan"] = r["plan"].replace(" rc=", "/")
        o[f"{r['policy']}:jct_h"] = r["jct_h"]
    return sorted(out.values(), key=lambda o: (o["_arr"], o["job"]))
