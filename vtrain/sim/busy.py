"""Per-stage busy time of the compute stream by kind (kernels, TP collectives, exposed expert-parallel
all-to-alls) over the whole iteration, and the all-to-all stream's busy time.

Without fused pairs every (stage, chunk) runs each of its passes once per micro-batch of its chain, so the
totals are sums over the pass costs. With fused pairs the passes run in the schedule's combinations: the
simulated tasks are counted, plus the extrapolated periods' (each period the same units as the first one).
"""
from __future__ import annotations

from typing import List, Tuple

from vtrain.sim.pipeline import PipelineResult
from vtrain.sim.stage_costs import PassCost, StageCosts


def _parts(c: PassCost) -> Tuple[float, float, float]:
    return c.gpu_compute_s, c.comm_s - c.ep_comm_s, c.ep_comm_s


def stage_busy(sc: StageCosts, pipe: PipelineResult, s: int, per_chunk: int, moe: bool = True
               ) -> Tuple[float, float, float, float]:
    """(kernels, TP collectives, exposed EP all-to-all, EP stream busy) of stage ``s``; ``per_chunk``:
    micro-batches each chunk runs (m, or m/2 per DualPipe direction); ``moe``: the model has experts."""
    passes = sc.forward[s] + sc.backward[s] + (sc.weight[s] if sc.weight else ())
    if not moe:  # a dense model: no all-to-all, no fused pair hides anything
        return per_chunk * sum(c.gpu_compute_s for c in passes), per_chunk * sum(c.comm_s for c in passes), 0.0, 0.0
    a2a = per_chunk * sum(c.ep_comm_s for c in passes)
    if not sc.fused:
        compute = per_chunk * sum(c.gpu_compute_s for c in passes)
        tp = per_chunk * sum(c.comm_s - c.ep_comm_s for c in passes)
        return compute, tp, a2a, a2a
    flat: List[Tuple[float, float, float]] = []
    for st in range(len(sc.forward)):
        flat += [_parts(c) for c in sc.forward[st] + sc.backward[st] + (sc.weight[st] if sc.weight else ())]
    flat += [_parts(c) for row in sc.fused for cb in row for c in cb] + [(0.0, 0.0, 0.0)]
    cs = pipe.schedule
    tot = [0.0, 0.0, 0.0]
    for i, st in enumerate(cs.stage):
        if st == s:
            for j, x in enumerate(flat[cs.dur_key[i]]):
                tot[j] += x
    if pipe.periods_added:
        for unit in cs.pairs[s][:cs.period_units]:
            for i in unit:
                for j, x in enumerate(flat[cs.dur_key[i]]):
                    tot[j] += pipe.periods_added * x
    return tot[0], tot[1], tot[2], a2a
