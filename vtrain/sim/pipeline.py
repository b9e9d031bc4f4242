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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from vtrain.errors import ConfigError
from vtrain.sim.engine import PipelineRun, run_pipeline
from vtrain.sim.schedule import CompiledSchedule, chunks_of, compile_schedule, period
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


def _result(cs: CompiledSchedule, run: PipelineRun, k: int = 0, shift: float = 0.0,
            extra: Optional[Waits] = None) -> PipelineResult:
    b, q, h = run.stage_bubble, run.stage_p2p, run.stage_host
    if extra is not None:
        b = [x + k * y for x, y in zip(b, extra[0])]
        q = [x + k * y for x, y in zip(q, extra[1])]
        h = [x + k * y for x, y in zip(h, extra[2])]
    return PipelineResult(tuple(e + k * shift for e in run.stage_end),
                          tuple(tuple(run.end[i] + k * shift for i in row) for row in cs.last_bwd),
                          tuple(b), tuple(q), tuple(h), cs, run, k, shift)


def _periodic_window(cs: CompiledSchedule, run: PipelineRun) -> Optional[Tuple[float, Waits]]:
    """(shift per period, per-stage waits of one period) when the last two clean periods repeat."""
    assert cs.period_mbs is not None
    q = cs.period_units  # steady units per period
    clean = cs.clean_units
    lo = clean - 2 * q
    if lo < 1:
        return None
    tol = _TOL * (1.0 + max(run.stage_end))
    shift: Optional[float] = None
    waits: Waits = ([0.0] * cs.p, [0.0] * cs.p, [0.0] * cs.p)
    for s, pairs in enumerate(cs.pairs):
        for k in range(lo, lo + q):
            for a, b in zip(pairs[k], pairs[k + q]):
                d = run.end[b] - run.end[a]
                if shift is None:
                    shift = d
                if (abs(d - shift) > tol or abs(run.host_free[b] - run.host_free[a] - shift) > tol
                        or abs(run.bubble[b] - run.bubble[a]) > tol or abs(run.p2p[b] - run.p2p[a]) > tol
                        or abs(run.host[b] - run.host[a]) > tol):
                    return None
                waits[0][s] += run.bubble[b]
                waits[1][s] += run.p2p[b]
                waits[2][s] += run.host[b]
    assert shift is not None
    return shift, waits


def _candidates(p: int, v: int, period: int, m: int) -> List[int]:
    """Simulated micro-batch counts to try, each ≡ m (mod period) and below m."""
    base = [p + 3, p + 6, 2 * p + 6, 4 * p + 8] if v == 1 else [4 * p, 6 * p, 10 * p]
    out = []
    for b in base:
        ms = m - ((m - b) // period) * period if m > b else m
        if ms < m and ms not in out:
            out.append(ms)
    return out


def simulate_pipeline(schedule: Schedule, p: int, v: int, m: int, gpu_s: Sequence[float], lags: Sequence[float],
                      latency_s: Sequence[float], host_s: Sequence[float], full: bool = False,
                      fused: bool = False) -> PipelineResult:
    """The pipeline phase for m micro-batches; ``full`` forces the whole schedule (timelines, tests);
    ``fused``: steady forward/backward pairs run as one overlapped task."""
    chunks = chunks_of(schedule, v)
    per = period(schedule, p, chunks)
    if per is not None and not full:
        mbs = per[0]
        for ms in _candidates(p, 1 if schedule in (Schedule.ONE_F_ONE_B, Schedule.ZERO_BUBBLE) else chunks,
                              mbs, m):
            if ms < (2 * p if chunks > 1 and schedule != Schedule.INTERLEAVED else 1):
                continue
            cs = compile_schedule(schedule, p, chunks, ms, fused)
            run = run_pipeline(cs, gpu_s, lags, latency_s, host_s)
            window = _periodic_window(cs, run)
            if window is not None:
                shift, waits = window
                return _result(cs, run, (m - ms) // mbs, shift, waits)
    tasks = 2 * p * chunks * m
    if tasks > MAX_TASKS:
        raise ConfigError(f"{schedule.value} with pp={p}, {chunks} chunk(s) and {m} micro-batches is {tasks:,} "
                          f"pipeline tasks, above the simulation limit of {MAX_TASKS:,}: use fewer micro-batches "
                          "(a larger micro_batch_size or dp) or a 1f1b/interleaved schedule")
    cs = compile_schedule(schedule, p, chunks, m, fused)
    return _result(cs, run_pipeline(cs, gpu_s, lags, latency_s, host_s))
