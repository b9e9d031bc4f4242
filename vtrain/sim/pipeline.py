"""The pipeline phase of an iteration in time O(pp), not O(micro-batches): simulate a few periods of the
steady state, verify that they repeat, extrapolate the rest exactly.

1F1B and interleaved 1F1B run warm-up, then steady (forward, backward) pairs that repeat every
``period_mbs`` micro-batches, then cool-down (:mod:`vtrain.sim.schedule`). The engine is a max-plus
recurrence, so once the steady state is periodic (every task of one period ends exactly ``shift_s``
after its counterpart of the previous period, host times included, on every stage) each further period
is the same pattern shifted by ``shift_s`` (shift-invariance of max and +). We simulate m' < m
micro-batches with m' ≡ m (mod period), check the last two clean periods (not reached by the cool-down,
``CompiledSchedule.tainted``), and add (m - m') / period periods: tasks after the check window end
``k·shift_s`` later and each stage's waits grow by ``k`` times one period's waits. When the check fails
(no periodic regime yet) a longer m' is tried, then the full schedule. GPipe does not repeat this way and
always runs in full. ``tests/unit/test_pipeline.py`` compares extrapolated and full runs.

The simulated run depends only on the schedule's shape and the pass and transfer times, so a small memo of
the last runs (:func:`_simulated`, bounded in tasks held) serves, exactly, the plans of a search that differ
only in what the run does not see (dp, ZeRO-1/2).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from operator import itemgetter, sub
from typing import Dict, List, Optional, Sequence, Tuple

from vtrain.errors import ConfigError
from vtrain.sim.engine import PipelineRun, Sync, run_pipeline
from vtrain.sim.schedule import CompiledSchedule, chunks_of, compile_schedule, period
from vtrain.sim.schedule_zb import zbv_costs
from vtrain.workload.enums import Schedule

MAX_TASKS = 400_000  # a full run above this is refused (memory ~100 MB, ~0.2 s)
_TOL = 1e-12  # relative: periods must repeat to within float rounding


@dataclass(frozen=True)
class PipelineResult:
    stage_end: Tuple[float, ...]  # when each stage's compute stream finished its last pass
    last_bwd_end: Tuple[Tuple[float, ...], ...]  # [stage][chunk]: end of the chunk's last backward
    bubble_s: Tuple[float, ...]  # per stage: waiting for the producer stage
    p2p_s: Tuple[float, ...]  # per stage: waiting for a transfer after the producer finished
    host_s: Tuple[float, ...]  # per stage: waiting for the host to issue kernels
    schedule: CompiledSchedule  # the simulated schedule (m' micro-batches when extrapolated)
    run: PipelineRun
    periods_added: int  # steady periods extrapolated beyond the simulated ones
    shift_s: float  # time one period adds


Waits = Tuple[List[float], List[float], List[float]]  # per stage: bubble, p2p, host


def _result(sim: "Simulated", k: int = 0, shift: float = 0.0, extra: Optional[Waits] = None) -> PipelineResult:
    cs, run, _, last_ends = sim
    b, q, h = run.stage_bubble, run.stage_p2p, run.stage_host
    if extra is not None:
        b = [x + k * y for x, y in zip(b, extra[0])]
        q = [x + k * y for x, y in zip(q, extra[1])]
        h = [x + k * y for x, y in zip(h, extra[2])]
    return PipelineResult(tuple(e + k * shift for e in run.stage_end),
                          tuple(tuple(e + k * shift for e in row) for row in last_ends),
                          tuple(b), tuple(q), tuple(h), cs, run, k, shift)


def _periodic_window(cs: CompiledSchedule, run: PipelineRun) -> Optional[Tuple[float, Waits]]:
    """(shift per period, per-stage waits of one period) when the last two clean periods repeat: every task
    of the second ends (and frees its host) ``shift`` after its counterpart in the first, with the same
    waits, to within float rounding (compared as whole arrays: min and max of the differences)."""
    if cs.window is None or not cs.window[0]:
        return None
    first, second, bounds = cs.window
    tol = _TOL * (1.0 + max(run.stage_end))
    a, b = itemgetter(*first), itemgetter(*second)
    ends = list(map(sub, _seq(b(run.end)), _seq(a(run.end))))
    shift = ends[0]
    hosts = list(map(sub, _seq(b(run.host_free)), _seq(a(run.host_free))))
    if max(ends) - shift > tol or shift - min(ends) > tol or max(hosts) - shift > tol or shift - min(hosts) > tol:
        return None
    for arr in (run.bubble, run.p2p, run.host):
        wb, wa = _seq(b(arr)), _seq(a(arr))
        if wb == wa:  # mostly zeros, often bit-equal: one C comparison
            continue
        d = list(map(sub, wb, wa))
        if max(d) > tol or -min(d) > tol:
            return None
    bubble, p2p, host = ([sum(map(arr.__getitem__, second[lo:hi])) for lo, hi in bounds]
                         for arr in (run.bubble, run.p2p, run.host))
    waits: Waits = (bubble, p2p, host)
    return shift, waits


def _seq(x: object) -> Sequence[float]:
    """itemgetter's result as a sequence (a single index gives the bare value)."""
    return x if isinstance(x, tuple) else (x,)


def _candidates(p: int, v: int, period: int, m: int) -> List[int]:
    """Simulated micro-batch counts to try, each ≡ m (mod period) and below m."""
    base = [p + 3, p + 6, 2 * p + 6, 4 * p + 8] if v == 1 else [4 * p, 6 * p, 10 * p]
    out = []
    for b in base:
        ms = m - ((m - b) // period) * period if m > b else m
        if ms < m and ms not in out:
            out.append(ms)
    return out


# the simulated schedule, its run (per-task arrays emptied in the memo unless a trace asked for them), its
# periodic window, and per [stage][chunk] the end of the chunk's last backward
Simulated = Tuple[CompiledSchedule, PipelineRun, Optional[Tuple[float, Waits]], Tuple[Tuple[float, ...], ...]]


class _Key:
    """A run's inputs (a long tuple of floats) hashed once: a dict hashes a tuple anew on every lookup."""

    __slots__ = ("inputs", "hash")

    def __init__(self, inputs: Tuple[object, ...]) -> None:
        self.inputs = inputs
        self.hash = hash(inputs)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and self.inputs == other.inputs


# the last simulated runs, by their exact inputs, least recently used first (an OrderedDict: evicting from
# the front of a plain dict rescans the deleted slots there on every next(iter(...)), O(evictions))
_RUNS: "OrderedDict[_Key, Simulated]" = OrderedDict()
_RUNS_MAX_TASKS = 200_000  # at most ~40 MB kept: a run with its task arrays costs its tasks, one without ~5p
_units: Dict[_Key, int] = {}  # what each memo entry costs against _RUNS_MAX_TASKS


def _simulated(key: Tuple[object, ...], schedule: Schedule, p: int, chunks: int, ms: int, fused: bool,
               gpu_s: Sequence[float], lags: Sequence[float], latency_s: Sequence[float],
               host_s: Sequence[float], keep_tasks: bool = False, group: int = 0, sync: Sync = None) -> Simulated:
    """The run of ``ms`` micro-batches (the whole schedule, or the simulated part of a longer one) and its
    periodic window. It depends only on the schedule's shape and the pass and transfer times, not on the
    iteration's micro-batch count m (m' is m reduced modulo the period), so plans that differ in dp alone
    (the same passes, more or fewer micro-batches) or in what only the tail sees (ZeRO-1/2, the distributed
    optimizer) share one: a search reuses it, exactly, from this memo of the last runs. The memo keeps a
    run's per-stage sums only (freed while they are fresh in the cache, not when evicted long after: that
    cost a quarter of the event pass), unless ``keep_tasks`` (a timeline) asks for every task's times."""
    global _runs_tasks
    hashed = _Key(key)
    with _RUNS_LOCK:
        hit = _RUNS.get(hashed)
        if hit is not None and (hit[1].end or not keep_tasks):
            _RUNS.move_to_end(hashed)  # the most recently used last
            return hit
    cs = compile_schedule(schedule, p, chunks, ms, fused, _zbv_costs(schedule, p, chunks, gpu_s), group)
    run = run_pipeline(cs, gpu_s, lags, latency_s, host_s, record_from=0 if keep_tasks else cs.window_start,
                       sync=sync)
    sim = (cs, run, _periodic_window(cs, run), tuple(tuple(run.end[i] for i in row) for row in cs.last_bwd))
    kept = sim if keep_tasks else (cs, PipelineRun([], [], [], [], [], run.stage_end, run.stage_bubble,
                                                   run.stage_p2p, run.stage_host), sim[2], sim[3])
    units = len(cs.stage) if keep_tasks else 5 * p + p * chunks
    if units > _RUNS_MAX_TASKS:  # larger than the whole memo: not kept
        return sim
    with _RUNS_LOCK:
        _runs_tasks += units - _units.get(hashed, 0)
        _units[hashed] = units
        _RUNS[hashed] = kept
        _RUNS.move_to_end(hashed)
        while len(_RUNS) > 1 and _runs_tasks > _RUNS_MAX_TASKS:  # evict the least recently used
            _runs_tasks -= _units.pop(_RUNS.popitem(last=False)[0])
    return sim


def _zbv_costs(schedule: Schedule, p: int, chunks: int, gpu_s: Sequence[float]) -> Tuple[int, int, int]:
    """ZB-V's order is built on the pass times (:func:`vtrain.sim.schedule_zb.zbv_costs`): the stages' mean
    F, B and W chunk passes (duration keys s * 3 * chunks + kind * chunks + chunk); other schedules: units."""
    if schedule != Schedule.ZBV:
        return (1, 1, 1)
    mean = [sum(gpu_s[s * 3 * chunks + k * chunks + c] for s in range(p) for c in range(chunks)) / (p * chunks)
            for k in range(3)]
    return zbv_costs(*mean)


_runs_tasks = 0  # tasks held by _RUNS
_RUNS_LOCK = threading.Lock()  # callers may simulate from threads


def clear_runs() -> None:
    """Forget the memoised runs (benchmarks that time the event simulation itself, tests)."""
    global _runs_tasks
    with _RUNS_LOCK:
        _RUNS.clear()
        _units.clear()
        _runs_tasks = 0


def simulate_pipeline(schedule: Schedule, p: int, v: int, m: int, gpu_s: Sequence[float], lags: Sequence[float],
                      latency_s: Sequence[float], host_s: Sequence[float], full: bool = False,
                      fused: bool = False, keep_tasks: bool = False, group: int = 0, sync: Sync = None
                      ) -> PipelineResult:
    """The pipeline phase for m micro-batches; ``full`` forces the whole schedule (timelines, tests);
    ``fused``: steady forward/backward pairs run as one overlapped task; ``keep_tasks``: the result's run
    holds every simulated task's times (a timeline; else it may hold the per-stage sums only); ``group``: the
    interleaved schedule's micro-batches per chunk group (0: p); ``sync``: each pass's host-sync lead and host
    time (:mod:`vtrain.sim.host_sync`; None: no pass has a host sync)."""
    chunks = chunks_of(schedule, v)
    group = group if schedule == Schedule.INTERLEAVED and chunks > 1 and group != p else 0
    per = period(schedule, p, chunks, group)
    inputs = (schedule, p, chunks, fused, group, tuple(gpu_s), tuple(lags), tuple(latency_s), tuple(host_s),
              None if sync is None else (tuple(sync[0]), tuple(sync[1])))
    if per is not None and not full:
        mbs = per[0]
        for ms in _candidates(p, 1 if schedule in (Schedule.ONE_F_ONE_B, Schedule.ZERO_BUBBLE) else chunks,
                              mbs, m):
            # at least one whole group, so that m' runs m's groups less some whole ones (same last group)
            if ms < (2 * p if chunks > 1 and schedule != Schedule.INTERLEAVED else max(1, group)):
                continue
            sim = _simulated((ms, *inputs), schedule, p, chunks, ms, fused, gpu_s, lags, latency_s, host_s,
                             keep_tasks, group, sync)
            if sim[2] is not None:
                shift, waits = sim[2]
                return _result(sim, (m - ms) // mbs, shift, waits)
    tasks = 2 * p * chunks * m
    if tasks > MAX_TASKS:
        raise ConfigError(f"{schedule.value} with pp={p}, {chunks} chunk(s) and {m} micro-batches is {tasks:,} "
                          f"pipeline tasks, above the simulation limit of {MAX_TASKS:,}: use fewer micro-batches "
                          "(a larger micro_batch_size or dp) or a 1f1b/interleaved schedule")
    return _result(_simulated((m, *inputs), schedule, p, chunks, m, fused, gpu_s, lags, latency_s, host_s,
                              keep_tasks, group, sync))
