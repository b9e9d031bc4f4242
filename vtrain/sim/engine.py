"""Discrete-event evaluation of a compiled schedule: each stage is one compute stream; a task
starts when its stream is free and its cross-stage input has arrived (producer end + p2p lag).

This is a longest-path pass over the DAG in topological order (the task order within a stream is
fixed by the schedule), so it is exact for the modelled dependencies and runs in O(tasks).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

from vtrain.sim.schedule import CompiledSchedule


@dataclass(frozen=True)
class PipelineRun:
    end: List[float]  # end time of each task, by topological index
    stage_end: List[float]  # when each stage's stream finished its last task


def run_pipeline(cs: CompiledSchedule, durations: Sequence[float], lags: Sequence[float]) -> PipelineRun:
    """``durations[dur_key]`` and ``lags[lag_key]`` in seconds (see :class:`CompiledSchedule`)."""
    n = len(cs.stage)
    end = [0.0] * n
    free = [0.0] * cs.p
    stage, dur_key, dep, lag_key = cs.stage, cs.dur_key, cs.dep, cs.lag_key
    for i in range(n):
        s = stage[i]
        t = free[s]
        d = dep[i]
        if d >= 0:
            r = end[d] + lags[lag_key[i]] if lag_key[i] >= 0 else end[d]
            if r > t:
                t = r
        t += durations[dur_key[i]]
        end[i] = t
        free[s] = t
    return PipelineRun(end, free)
