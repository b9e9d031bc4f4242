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
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from vtrain.search.objective import Evaluator
from vtrain.search.space import (
    PlanSpace,
    enumerate_plans,
    group_plans,
    group_size,
    pipeline_shape,
    plan_groups,
    plan_values,
)
from vtrain.workload.plan import ParallelPlan

# (searched field values in SEARCHED_FIELDS order, objective values, reason, metrics) of one plan
Row = Tuple[Tuple[object, ...], Optional[Tuple[float, ...]], Optional[str], Dict[str, float]]
_WORKER: Optional[Tuple[Evaluator, Sequence[ParallelPlan]]] = None  # set before fork
TASK_PLANS = 50  # candidate plans a task holds at least (longer tasks share more of a worker's caches)


class Task(NamedTuple):
    start: int  # groups[start:end]
    end: int
    plans: int  # candidate plans (valid or not): the task's share of the progress bar


def _run_task(task: Task) -> List[Row]:
    """Rows of the valid plans of the task's groups, in order."""
    assert _WORKER is not None
    ev, groups = _WORKER
    rows: List[Row] = []
    for group in groups[task.start:task.end]:
        for plan in group_plans(ev.space, group):
            o = ev.evaluate_valid(plan)  # group_plans checked it
            rows.append((plan_values(plan), o.values, o.reason, o.metrics))
    return rows


def grid_tasks(space: PlanSpace, max_plans: int = 0) -> Tuple[List[ParallelPlan], List[Task]]:
    """The plan groups of ``space`` and tasks over them: ranges of at least :data:`TASK_PLANS` candidates
    that end where the pipeline shape changes, so that one shape's plans share one worker's
    compiled-schedule cache. More valid plans than ``max_plans`` (> 0) is a ConfigError."""
    groups = plan_groups(space)
    sizes = [group_size(space, g) for g in groups]
    if max_plans and sum(sizes) > max_plans:
        enumerate_plans(space, max_plans)  # counts the valid ones: raises when they exceed the cap
    out, start, count = [], 0, 0
    for i in range(1, len(groups) + 1):
        count += sizes[i - 1]
        if i == len(groups) or (count >= TASK_PLANS and pipeline_shape(groups[i]) != pipeline_shape(groups[i - 1])):
            out.append(Task(start, i, count))
            start, count = i, 0
    return groups, out


def evaluate_grid(ev: Evaluator, groups: Sequence[ParallelPlan], tasks: Sequence[Task], workers: int = 0,
                  progress: Optional[Callable[[int], None]] = None) -> List[Row]:
    """One row per valid plan of the tasks, in task order (that of
    :func:`vtrain.search.space.enumerate_plans`); ``workers`` 0 = one per CPU (1 = in this process)."""
    global _WORKER
    workers = workers or (os.cpu_count() or 1)
    _WORKER = (ev, groups)
    try:
        if workers <= 1 or sum(t.plans for t in tasks) < 200 or "fork" not in mp.get_all_start_methods():
            parts = []
            for t in tasks:
                parts.append(_run_task(t))
                if progress:
                    progress(t.plans)
        else:
            parts = _run_parallel(tasks, workers, progress)
    finally:
        _WORKER = None
    rows = [row for part in parts for row in part]
    ev.simulations += sum(1 for r in rows if "iteration_time_s" in r[3])
    return rows


def _run_parallel(tasks: Sequence[Task], workers: int, progress: Optional[Callable[[int], None]]) -> List[List[Row]]:
    parts: List[List[Row]] = [[] for _ in tasks]
    order = reversed(range(len(tasks)))  # deep pipelines (slow to simulate) first, the cheap tasks last
    gc.freeze()  # the workers inherit the parent's objects: their collections skip them (and copy no pages)
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            for i, part in pool.imap_unordered(_indexed, [(i, tasks[i]) for i in order]):
                parts[i] = part
                if progress:
                    progress(tasks[i].plans)
    finally:
        gc.unfreeze()
    return parts


def _indexed(item: Tuple[int, Task]) -> Tuple[int, List[Row]]:
    return item[0], _run_task(item[1])
