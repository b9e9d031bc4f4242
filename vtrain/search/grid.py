"""The ``grid`` sampler: every valid plan of the space, evaluated directly (no Optuna trial per plan).

A full GPT-3 175B x 1,024-GPU space has ~47k valid plans; recording each as an Optuna trial in SQLite
would take tens of minutes, so the grid evaluates them in ``workers`` processes (fork: each inherits the
one Workload and cost model). The parent lists only the plan groups (:func:`vtrain.search.space.plan_groups`,
a few thousand); each worker enumerates the plans of its groups (:func:`vtrain.search.space.group_plans`),
skips those whose memory lower bound exceeds the GPU, simulates the rest and sends back one compact row
per plan. Rows come back in group order, so the outcome is deterministic and the same with any number of
workers.
"""
from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from vtrain.search.collector import fewer_collections
from vtrain.search.objective import Evaluator
from vtrain.search.plans import plan_values
from vtrain.search.space import PlanSpace, enumerate_plans, group_plans, group_size, plan_groups
from vtrain.workload.plan import ParallelPlan

# (searched field values in SEARCHED_FIELDS order, objective values, reason, metrics) of one plan
Row = Tuple[Tuple[object, ...], Optional[Tuple[float, ...]], Optional[str], Dict[str, float]]
_WORKER: Optional[Tuple[Evaluator, Sequence[ParallelPlan]]] = None  # set before fork
TASK_PLANS = 50  # candidate plans a task holds at least (longer tasks share more of a worker's caches)


class Task(NamedTuple):
    groups: Tuple[int, ...]  # indices into the groups, in order
    plans: int  # candidate plans (valid or not): the task's share of the progress bar


def _passes_key(plan: ParallelPlan) -> Tuple[object, ...]:
    """What, besides the cluster (:func:`_cluster`), changes a plan's pass costs: plans equal in it have
    the same passes, so that the engine's run memo (:mod:`vtrain.sim.pipeline`) serves the next one."""
    return (plan.recompute.value, plan.recompute_num_layers, plan.sequence_parallel, plan.precision.value,
            plan.zero_stage >= 3, plan.ep, plan.etp, plan.moe_dispatcher.value, plan.cp_comm.value,
            plan.fsdp_shard_size, plan.reshard_after_forward)


def _cluster(group: ParallelPlan) -> Tuple[object, ...]:
    """Groups whose plans may share a simulated pipeline run: all but dp (which changes only the number of
    micro-batches, and the simulated run is the same m' for all of them)."""
    return (group.pp, group.schedule.value, group.chunks, group.tp, group.cp, group.micro_batch_size)


def _run_task(task: Task) -> List[Tuple[int, List[Row]]]:
    """Rows of the valid plans of the task's groups, per group in order. The plans are evaluated sorted by
    :func:`_passes_key` (stable), so that plans with the same passes follow each other."""
    assert _WORKER is not None
    ev, groups = _WORKER
    plans = [(g, plan) for g in task.groups for plan in group_plans(ev.space, groups[g])]
    rows: List[Optional[Row]] = [None] * len(plans)
    for i in sorted(range(len(plans)), key=lambda i: _passes_key(plans[i][1])):
        plan = plans[i][1]
        o = ev.evaluate_valid(plan)  # group_plans checked it
        rows[i] = (plan_values(plan), o.values, o.reason, o.metrics)
    out: Dict[int, List[Row]] = {g: [] for g in task.groups}
    for (g, _), row in zip(plans, rows):
        assert row is not None
        out[g].append(row)
    return list(out.items())


def grid_tasks(space: PlanSpace, max_plans: int = 0) -> Tuple[List[ParallelPlan], List[Task]]:
    """The plan groups of ``space`` (in :func:`vtrain.search.space.enumerate_plans`' order, the order of the
    rows) and tasks over them: the groups of one cluster (:func:`_cluster`) together, clusters in order
    of pipeline shape joined up to at least :data:`TASK_PLANS` candidates, so that a worker reuses its
    compiled schedules and simulated runs. More valid plans than ``max_plans`` (> 0) is a ConfigError."""
    groups = plan_groups(space)
    sizes = [group_size(space, g) for g in groups]
    if max_plans and sum(sizes) > max_plans:
        enumerate_plans(space, max_plans)  # counts the valid ones: raises when they exceed the cap
    clusters: Dict[Tuple[object, ...], List[int]] = {}
    for i, g in enumerate(groups):
        clusters.setdefault(_cluster(g), []).append(i)
    out: List[Task] = []
    members: List[int] = []
    for key in sorted(clusters, key=lambda k: (k[0], k[1], k[2])):  # stable: pp, schedule, chunks
        members += clusters[key]
        count = sum(sizes[i] for i in members)
        if count >= TASK_PLANS:
            out.append(Task(tuple(members), count))
            members = []
    if members:
        out.append(Task(tuple(members), sum(sizes[i] for i in members)))
    return groups, out


def evaluate_grid(ev: Evaluator, groups: Sequence[ParallelPlan], tasks: Sequence[Task], workers: int = 0,
                  progress: Optional[Callable[[int], None]] = None) -> List[Row]:
    """One row per valid plan of the groups, in group order (that of
    :func:`vtrain.search.space.enumerate_plans`); ``workers`` 0 = one per CPU (1 = in this process)."""
    global _WORKER
    workers = workers or (os.cpu_count() or 1)
    _WORKER = (ev, groups)
    per_group: List[List[Row]] = [[] for _ in groups]
    try:
        with fewer_collections():  # ~14% of the evaluation at the default thresholds (vtrain.search.collector)
            in_process = workers <= 1 or sum(t.plans for t in tasks) < 200 or "fork" not in mp.get_all_start_methods()
            if in_process:  # the evaluator counts its own simulations
                for t in tasks:
                    for g, rows in _run_task(t):
                        per_group[g] = rows
                    if progress:
                        progress(t.plans)
            else:
                _run_parallel(tasks, workers, per_group, progress)
    finally:
        _WORKER = None
    rows = [row for part in per_group for row in part]
    if not in_process:  # the workers' evaluators counted theirs, in their own processes
        ev.simulations += sum(1 for r in rows if "iteration_time_s" in r[3])
    return rows


def _leave_sigint_to_parent() -> None:
    """A grid worker ignores Ctrl-C: the parent's KeyboardInterrupt ends the pool, and the run prints its one
    interrupt line (each worker printed "Process ForkPoolWorker-n:" and a traceback before)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_parallel(tasks: Sequence[Task], workers: int, per_group: List[List[Row]],
                  progress: Optional[Callable[[int], None]]) -> None:
    order = reversed(range(len(tasks)))  # deep pipelines (slow to simulate) first, the cheap tasks last
    gc.freeze()  # the workers inherit the parent's objects: their collections skip them (and copy no pages)
    try:
        with mp.get_context("fork").Pool(workers, initializer=_leave_sigint_to_parent) as pool:
            for i, part in pool.imap_unordered(_indexed, [(i, tasks[i]) for i in order]):
                for g, rows in part:
                    per_group[g] = rows
                if progress:
                    progress(tasks[i].plans)
    finally:
        gc.unfreeze()


def _indexed(item: Tuple[int, Task]) -> Tuple[int, List[Tuple[int, List[Row]]]]:
    return item[0], _run_task(item[1])
