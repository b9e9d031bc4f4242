"""Pipeline schedules as per-stage orders of (pass, chunk, micro-batch), compiled to a flat DAG.

- GPipe (Huang et al. 2019): all forwards, then all backwards.
- 1F1B (PipeDream-Flush, Narayanan et al. 2021, Fig. 4 top): stage s runs min(p-s-1, m) warm-up
  forwards, then alternates one forward and one backward, then drains the backwards.
- Interleaved 1F1B (Narayanan et al. SC'21, Fig. 4 bottom; Megatron-LM's
  ``forward_backward_pipelining_with_interleaving``): v model chunks per stage, warm-up
  (p-s-1)·2 + (v-1)·p chunk-forwards, chunk order advancing every p micro-batches.

Dependencies: the forward of pipeline position q = c·p + s needs the forward of q-1 (after a p2p
transfer); the backward of q needs the backward of q+1 (after a p2p transfer), the last position's
backward needs its own forward. Within a stage, tasks run in the schedule's order on one stream.
The compiled DAG depends only on (schedule, p, v, m) and is cached, so a search re-uses it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import List, Tuple

from vtrain.workload.enums import Schedule

Task = Tuple[int, int, int]  # (is_backward, chunk, microbatch)


def _interleaved_ids(k: int, p: int, v: int, backward: bool) -> Tuple[int, int]:
    """Megatron's mapping of the k-th virtual micro-batch to (chunk, micro-batch)."""
    group = k // (p * v)
    chunk = (k // p) % v
    if backward:
        chunk = v - 1 - chunk
    return chunk, group * p + k % p


def stage_order(schedule: Schedule, p: int, v: int, m: int, s: int) -> List[Task]:
    if schedule == Schedule.GPIPE:
        return [(0, 0, i) for i in range(m)] + [(1, 0, i) for i in range(m)]
    if schedule == Schedule.ONE_F_ONE_B or v == 1:
        w = min(p - s - 1, m)
        order: List[Task] = [(0, 0, i) for i in range(w)]
        for i in range(m - w):
            order += [(0, 0, w + i), (1, 0, i)]
        order += [(1, 0, i) for i in range(m - w, m)]
        return order
    total = m * v
    w = min((p - s - 1) * 2 + (v - 1) * p, total)
    fwd = [_interleaved_ids(k, p, v, False) for k in range(total)]
    bwd = [_interleaved_ids(k, p, v, True) for k in range(total)]
    order = [(0, c, i) for c, i in fwd[:w]]
    for k in range(total - w):
        order.append((0, *fwd[w + k]))
        order.append((1, *bwd[k]))
    order += [(1, c, i) for c, i in bwd[total - w:]]
    return order


@dataclass(frozen=True)
class CompiledSchedule:
    """A topologically sorted task list. Arrays are indexed by topological position.

    ``stage[i]``, ``dur_key[i]`` = stage·2v + is_bwd·v + chunk, ``dep[i]`` (topological index of
    the cross-stage dependency, -1 if none), ``lag_key[i]`` (index into the per-boundary p2p times:
    forward boundary q-1→q at 2q, backward boundary q+1→q at 2q+1; -1 for none).
    ``last_bwd[s][c]`` is the topological index of the last backward of chunk c on stage s.
    """

    p: int
    v: int
    m: int
    stage: Tuple[int, ...]
    dur_key: Tuple[int, ...]
    dep: Tuple[int, ...]
    lag_key: Tuple[int, ...]
    last_bwd: Tuple[Tuple[int, ...], ...]
    microbatch: Tuple[int, ...]


@lru_cache(maxsize=512)
def compile_schedule(schedule: Schedule, p: int, v: int, m: int) -> CompiledSchedule:
    chunks = v if schedule == Schedule.INTERLEAVED else 1
    positions = p * chunks
    orders = [stage_order(schedule, p, chunks, m, s) for s in range(p)]
    done: dict = {}  # (is_bwd, q, mb) -> topological index
    ptr = [0] * p
    stage: List[int] = []
    dur_key: List[int] = []
    dep: List[int] = []
    lag_key: List[int] = []
    mbs: List[int] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            order = orders[s]
            while ptr[s] < len(order):
                bwd, c, i = order[ptr[s]]
                q = c * p + s
                if bwd:
                    key = (1, q + 1, i) if q < positions - 1 else (0, q, i)
                    lag = 2 * q + 1 if q < positions - 1 else -1
                else:
                    key = (0, q - 1, i) if q > 0 else None
                    lag = 2 * q if q > 0 else -1
                if key is not None and key not in done:
                    break
                done[(bwd, q, i)] = len(stage)
                stage.append(s)
                dur_key.append(s * 2 * chunks + bwd * chunks + c)
                dep.append(done[key] if key is not None else -1)
                lag_key.append(lag)
                mbs.append(i)
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - would be a bug in stage_order
            raise RuntimeError(f"schedule {schedule} deadlocks for p={p} v={v} m={m}")
    last_bwd = tuple(tuple(done[(1, c * p + s, m - 1)] for c in range(chunks)) for s in range(p))
    return CompiledSchedule(p, chunks, m, tuple(stage), tuple(dur_key), tuple(dep), tuple(lag_key),
                            last_bwd, tuple(mbs))
