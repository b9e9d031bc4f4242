"""The cluster scheduler of case study 2: event-driven FIFO (or any queue order) with EASY backfilling
on whole nodes. The first queued job that cannot start gets a reservation at the earliest time enough
nodes are free; a later job may start now if it ends before that time or uses only nodes the reserved
job does not need. Run times are known to the scheduler (as accurate wall-time limits would be)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from vtrain.errors import ConfigError
from vtrain.report import Report
from vtrain.workload.workload import Workload


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
