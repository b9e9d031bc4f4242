"""Discrete-event evaluation of a compiled schedule with two resources per stage: the host that
issues a pass's kernels and the GPU stream that runs them.

A pass on stage s starts issuing (h0) when the host finished issuing the stage's previous pass and its
cross-stage input has arrived (producer end + p2p lag: Megatron's p2p receive waits on the host); its
kernels run once the GPU is free and the input is there (g0). It ends on the GPU at
max(g0 + gpu_s, h0 + latency_s) (see stage_costs.PassCost), so within a stage the host may run ahead
of a busy GPU (e.g. issue the next forward while the previous backward still runs). A longest-path
pass over the DAG in topological order (the order within a stage is fixed by the schedule): exact for
the model, O(tasks).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from vtrain.sim.schedule import CompiledSchedule


@dataclass(frozen=True)
class PipelineRun:
    end: List[float]  # GPU end time of each task, by topological index
    stage_end: List[float]  # when each stage's GPU stream finished its last task


def run_pipeline(cs: CompiledSchedule, gpu_s: Sequence[float], lags: Sequence[float],
                 latency_s: Optional[Sequence[float]] = None, host_s: Optional[Sequence[float]] = None) -> PipelineRun:
    """Per pass (indexed by ``dur_key``): GPU time, host-bound latency and host issue time, seconds.
    Without ``latency_s``/``host_s`` a pass simply occupies its stage for ``gpu_s``."""
    n = len(cs.stage)
    end = [0.0] * n
    gpu_free = [0.0] * cs.p
    host_free = [0.0] * cs.p
    latency = latency_s if latency_s is not None else gpu_s
    host = host_s if host_s is not None else [0.0] * len(gpu_s)
    stage, dur_key, dep, lag_key = cs.stage, cs.dur_key, cs.dep, cs.lag_key
    for i in range(n):
        s = stage[i]
        k = dur_key[i]
        g0 = gpu_free[s]
        h0 = host_free[s]
        d = dep[i]
        if d >= 0:
            r = end[d] + lags[lag_key[i]] if lag_key[i] >= 0 else end[d]
            if r > g0:
                g0 = r
            if r > h0:  # Megatron's p2p receive blocks the host until the tensor arrived
                h0 = r
        e = g0 + gpu_s[k]
        e2 = h0 + latency[k]
        if e2 > e:
            e = e2
        end[i] = e
        gpu_free[s] = e
        host_free[s] = h0 + host[k]
    return PipelineRun(end, gpu_free)
