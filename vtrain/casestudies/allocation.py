"""Case study 2's jobs and their allocations: the job trace from the config, the baseline heuristic's
fixed allocation and plan, and vtrain's efficient allocations (best plan per GPU count)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from omegaconf import MISSING, DictConfig

from vtrain.casestudies.plans import GpuCountSpace, best_plan, divisors, load_model, with_plan
from vtrain.casestudies.scheduler import Job, Option
from vtrain.config.validate import check_plan
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.report import Report
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.enums import Recompute
from vtrain.workload.tp_split import tp_divides
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
    tps = [t for t in (1, 2, 4, 8) if t <= gpn and tp_divides(m, t)]
    tp = next((t for t in tps if states / t <= budget), tps[-1])
    pps = [p for p in divisors(m.num_layers, gpus // tp) if tp * p <= gpus]
    start = next((i for i, p in enumerate(pps) if states / (tp * p) <= budget), len(pps) - 1)
    for pp in pps[start:]:
        dp = max(divisors(w.plan.global_batch_size, gpus // (tp * pp)), default=0)
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
    space = GpuCountSpace.of(prm)
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
