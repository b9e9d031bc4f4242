"""Discrete-event evaluation of a compiled schedule: per stage a host that issues a pass's kernels and a
compute stream that runs them; pipeline transfers on the DAG's edges.

A pass on stage s starts issuing (h0) when the host finished issuing the stage's previous pass and its
cross-stage input has arrived (producer end + p2p time: Megatron's p2p receive waits on the host); its
kernels run once the compute stream is free and the input is there (g0). It ends at
max(g0 + gpu_s + sync_lead_s, h0 + latency_s) and frees the host at max(h0 + host_s, g0 + sync_host_s)
(:class:`vtrain.sim.launch.PassCost`), so within a stage the host may run ahead of a busy GPU, up to the
first host sync of a pass (:mod:`vtrain.sim.host_sync`). A longest-path pass over the DAG in topological
order (the order within a stage is fixed by the schedule): exact for the model, O(tasks).

The engine accounts for every instant of each compute stream: between the end of its previous pass
(``prev``) and the end of this one (``e``) the stream is either waiting for the producer stage
(``bubble``: pipeline fill, drain and imbalance), waiting for the transfer after the producer finished
(``p2p``: exposed pipeline communication), running the pass (``gpu_s``: kernels and in-stream
collectives) or waiting for the host to issue kernels (``host``). The four parts add up to e - prev, so
the per-stage sums add up to the stage's end time exactly and none is negative.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from vtrain.sim.schedule import CompiledSchedule

# per pass (duration order): sync_lead_s and sync_host_s (StageCosts.sync_inputs); None: no pass has a host sync
Sync = Optional[Tuple[Sequence[float], Sequence[float]]]


@dataclass(frozen=True)
class PipelineRun:
    """Per task (topological index): end on the compute stream, host free time after issuing it, and the
    waits of its compute stream before and during it (its start is end - gpu_s - host wait). Per stage:
    when its compute stream finished, and the sums of the waits."""

    end: List[float]
    host_free: List[float]
    bubble: List[float]
    p2p: List[float]
    host: List[float]
    stage_end: List[float]
    stage_bubble: List[float]  # per stage: sums of the per-task waits
    stage_p2p: List[float]
    stage_host: List[float]


def run_pipeline(cs: CompiledSchedule, gpu_s: Sequence[float], lags: Sequence[float],
                 latency_s: Sequence[float], host_s: Sequence[float], record_from: int = 0,
                 sync: Sync = None) -> PipelineRun:
    """Per pass (indexed by ``dur_key``): stream time, host-bound latency and host issue time (seconds);
    per boundary (``lag_key``): p2p transfer time; ``sync``: each pass's host-sync lead and host time (None:
    none). Tasks before ``record_from`` keep their end only (their host-free time and waits read 0 in the run;
    the per-stage sums count them): what the periodicity check and the result need, at three quarters of the
    cost (no per-task floats to keep and free)."""
    n = len(cs.stage)
    end = [0.0] * n
    hfree = [0.0] * n
    bubble = [0.0] * n
    p2p = [0.0] * n
    host = [0.0] * n
    gpu_free = [0.0] * cs.p
    host_free = [0.0] * cs.p
    sb, sq, sh = [0.0] * cs.p, [0.0] * cs.p, [0.0] * cs.p
    lag = [*lags, 0.0]  # lag_key -1 (no transfer) reads the trailing 0
    start = min(max(record_from, 0), n)
    lead, sync_host = sync if sync is not None else ((), ())
    if start:
        _sums_only(cs, start, gpu_s, lag, latency_s, host_s, end, gpu_free, host_free, sb, sq, sh, sync)
    i = start
    for s, k, d, lk in zip(cs.stage[start:], cs.dur_key[start:], cs.dep[start:], cs.lag_key[start:]):
        prev = g0 = gpu_free[s]
        h0 = host_free[s]
        if d >= 0:
            pe = end[d]
            r = pe + lag[lk]
            if r > g0:
                if pe > prev:
                    bubble[i] = x = pe - prev
                    sb[s] += x
                    p2p[i] = x = r - pe
                else:
                    p2p[i] = x = r - prev
                sq[s] += x
                g0 = r
            if r > h0:  # Megatron's p2p receive blocks the host until the tensor arrived
                h0 = r
        e = g0 + gpu_s[k]
        e2 = h0 + latency_s[k]
        hf = h0 + host_s[k]
        if sync is not None:  # inline comparisons: builtins.max costs a call per task
            x = e + lead[k]
            if x > e2:
                e2 = x
            x = g0 + sync_host[k]
            if x > hf:
                hf = x
        if e2 > e:
            host[i] = x = e2 - e
            sh[s] += x
            e = e2
        end[i] = gpu_free[s] = e
        host_free[s] = hfree[i] = hf
        i += 1
    return PipelineRun(end, hfree, bubble, p2p, host, gpu_free, sb, sq, sh)


def _sums_only(cs: CompiledSchedule, stop: int, gpu_s: Sequence[float], lag: Sequence[float],
               latency_s: Sequence[float], host_s: Sequence[float], end: List[float], gpu_free: List[float],
               host_free: List[float], sb: List[float], sq: List[float], sh: List[float], sync: Sync) -> None:
    """:func:`run_pipeline`'s recurrence over the first ``stop`` tasks, the same arithmetic in the same order
    (so the same floats), keeping each task's end and the per-stage sums only."""
    i = 0
    lead, sync_host = sync if sync is not None else ((), ())
    for s, k, d, lk in zip(cs.stage[:stop], cs.dur_key[:stop], cs.dep[:stop], cs.lag_key[:stop]):
        prev = g0 = gpu_free[s]
        h0 = host_free[s]
        if d >= 0:
            pe = end[d]
            r = pe + lag[lk]
            if r > g0:
                if pe > prev:
                    sb[s] += pe - prev
                    sq[s] += r - pe
                else:
                    sq[s] += r - prev
                g0 = r
            if r > h0:
                h0 = r
        e = g0 + gpu_s[k]
        e2 = h0 + latency_s[k]
        hf = h0 + host_s[k]
        if sync is not None:
            x = e + lead[k]
            if x > e2:
                e2 = x
            x = g0 + sync_host[k]
            if x > hf:
                hf = x
        if e2 > e:
            sh[s] += e2 - e
            e = e2
        end[i] = gpu_free[s] = e
        host_free[s] = hf
        i += 1
