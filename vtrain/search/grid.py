"""The ``grid`` sampler: every valid plan of the space, evaluated directly (no Optuna trial per plan).

A full GPT-3 175B x 1,024-GPU space has ~56k valid plans; recording each as an Optuna trial in SQLite
would take tens of minutes, so the grid enumerates (:func:`vtrain.search.space.enumerate_plans`),
skips plans whose memory lower bound exceeds the GPU, and simulates the rest in ``workers``
processes (fork: each inherits the one Workload and cost model). Results come back in enumeration
order, so the outcome is deterministic.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from typing import Callable, List, Optional, Sequence, Tuple

from vtrain.search.objective import Evaluator, Outcome
from vtrain.search.space import pipeline_shape
from vtrain.workload.plan import ParallelPlan

_WORKER: Optional[Tuple[Evaluator, Sequence[ParallelPlan]]] = None  # set before fork


def _run_chunk(bounds: Tuple[int, int]) -> List[Tuple[Optional[Tuple[float, ...]], Optional[str], dict]]:
    assert _WORKER is not None
    ev, plans = _WORKER
    out = []
    for i in range(*bounds):
        o = ev.evaluate(plans[i])
        out.append((o.values, o.reason, o.metrics))
    return out


def _chunks(plans: Sequence[ParallelPlan], size: int) -> List[Tuple[int, int]]:
    """Index ranges of at least ``size`` plans that end where the pipeline shape changes, so that
    one shape's plans share one worker's compiled-schedule cache."""
    out, start = [], 0
    for i in range(1, len(plans) + 1):
        if i == len(plans) or (i - start >= size and pipeline_shape(plans[i]) != pipeline_shape(plans[i - 1])):
            out.append((start, i))
            start = i
    return out


def evaluate_all(ev: Evaluator, plans: Sequence[ParallelPlan], workers: int = 0,
                 progress: Optional[Callable[[int], None]] = None) -> List[Outcome]:
    """Outcomes of ``plans`` in order; ``workers`` 0 = one per CPU (1 = in this process)."""
    global _WORKER
    workers = workers or (os.cpu_count() or 1)
    if workers <= 1 or len(plans) < 200 or "fork" not in mp.get_all_start_methods():
        outs = []
        for p in plans:
            outs.append(ev.evaluate(p))
            if progress:
                progress(1)
        return outs
    _WORKER = (ev, plans)
    rows: List[Tuple[Optional[Tuple[float, ...]], Optional[str], dict]] = []
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            # contiguous chunks keep neighbouring plans (same pipeline shape) in one worker's cache
            for part in pool.imap(_run_chunk, _chunks(plans, 50)):
                rows.extend(part)
                if progress:
                    progress(len(part))
    finally:
        _WORKER = None
    outs = [Outcome(p, v, r, m) for p, (v, r, m) in zip(plans, rows)]
    ev.simulations += sum(1 for o in outs if "iteration_time_s" in o.metrics)
    return outs
