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

1F1B and interleaved orders are warm-up + steady pairs (one forward, one backward) + cool-down, and the
pairs repeat with a period of ``period_mbs`` micro-batches (1, or p when interleaved): the engine
simulates a few periods and extrapolates the rest exactly (:mod:`vtrain.sim.pipeline`). For that the
compiled DAG records each task's steady-pair index and whether a cool-down task reaches it (``tainted``:
such tasks are not part of the repeating pattern). The compiled DAG depends only on (schedule, p, v, m)
and is cached, so a search re-uses it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from vtrain.workload.enums import Schedule

Task = Tuple[int, int, int]  # (is_backward, chunk, microbatch)


@dataclass(frozen=True)
class StageOrder:
    warmup: Tuple[Task, ...]
    steady: Tuple[Tuple[Task, Task], ...]  # (forward, backward) pairs
    cooldown: Tuple[Task, ...]

    def tasks(self) -> List[Task]:
        return [*self.warmup, *(t for pair in self.steady for t in pair), *self.cooldown]


def _interleaved_ids(k: int, p: int, v: int, backward: bool) -> Tuple[int, int]:
    """Megatron's mapping of the k-th virtual micro-batch to (chunk, micro-batch)."""
    group = k // (p * v)
    chunk = (k // p) % v
    if backward:
        chunk = v - 1 - chunk
    return chunk, group * p + k % p


def stage_order(schedule: Schedule, p: int, v: int, m: int, s: int) -> StageOrder:
    if schedule == Schedule.GPIPE:
        return StageOrder(tuple((0, 0, i) for i in range(m)), (), tuple((1, 0, i) for i in range(m)))
    if schedule == Schedule.ONE_F_ONE_B or v == 1:
        w = min(p - s - 1, m)
        return StageOrder(tuple((0, 0, i) for i in range(w)),
                          tuple(((0, 0, w + i), (1, 0, i)) for i in range(m - w)),
                          tuple((1, 0, i) for i in range(m - w, m)))
    total = m * v
    w = min((p - s - 1) * 2 + (v - 1) * p, total)
    fwd = [_interleaved_ids(k, p, v, False) for k in range(total)]
    bwd = [_interleaved_ids(k, p, v, True) for k in range(total)]
    return StageOrder(tuple((0, c, i) for c, i in fwd[:w]),
                      tuple(((0, *fwd[w + k]), (1, *bwd[k])) for k in range(total - w)),
                      tuple((1, c, i) for c, i in bwd[total - w:]))


def period_mbs(schedule: Schedule, p: int, v: int) -> Optional[int]:
    """Micro-batches per repeating period of the steady state (None: the schedule does not repeat)."""
    if schedule == Schedule.GPIPE:
        return None
    return p if schedule == Schedule.INTERLEAVED and v > 1 else 1


@dataclass(frozen=True)
class CompiledSchedule:
    """A topologically sorted task list. Arrays are indexed by topological position.

    ``stage[i]``, ``dur_key[i]`` = stage·2v + is_bwd·v + chunk, ``dep[i]`` (topological index of
    the cross-stage dependency, -1 if none), ``lag_key[i]`` (index into the per-boundary p2p times:
    forward boundary q-1→q at 2q, backward boundary q+1→q at 2q+1; -1 for none).
    ``last_bwd[s][c]`` is the topological index of the last backward of chunk c on stage s.
    ``pairs[s][k]`` = topological indices of steady pair k's (forward, backward) on stage s;
    ``tainted[i]``: a cool-down task reaches task i (through dependencies or its stage's order).
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
    pairs: Tuple[Tuple[Tuple[int, int], ...], ...]
    tainted: Tuple[bool, ...]
    period_mbs: Optional[int]


@lru_cache(maxsize=512)
def compile_schedule(schedule: Schedule, p: int, v: int, m: int) -> CompiledSchedule:
    chunks = v if schedule == Schedule.INTERLEAVED else 1
    positions = p * chunks
    orders = [stage_order(schedule, p, chunks, m, s) for s in range(p)]
    seqs = [o.tasks() for o in orders]
    cool_start = [len(o.warmup) + 2 * len(o.steady) for o in orders]
    done: Dict[Task, int] = {}  # (is_bwd, q, mb) -> topological index
    ptr = [0] * p
    stage: List[int] = []
    dur_key: List[int] = []
    dep: List[int] = []
    lag_key: List[int] = []
    mbs: List[int] = []
    tainted: List[bool] = []
    pos_of: List[List[int]] = [[0] * len(seq) for seq in seqs]  # stage-order position -> topological index
    remaining = sum(len(o) for o in seqs)
    while remaining:
        progressed = False
        for s in range(p):
            order = seqs[s]
            while ptr[s] < len(order):
                bwd, c, i = order[ptr[s]]
                q = c * p + s
                key: Optional[Task]
                if bwd:
                    key = (1, q + 1, i) if q < positions - 1 else (0, q, i)
                    lag = 2 * q + 1 if q < positions - 1 else -1
                else:
                    key = (0, q - 1, i) if q > 0 else None
                    lag = 2 * q if q > 0 else -1
                if key is not None and key not in done:
                    break
                idx = len(stage)
                done[(bwd, q, i)] = idx
                d = done[key] if key is not None else -1
                prev_tainted = ptr[s] > 0 and tainted[pos_of[s][ptr[s] - 1]]
                tainted.append(ptr[s] >= cool_start[s] or prev_tainted or (d >= 0 and tainted[d]))
                pos_of[s][ptr[s]] = idx
                stage.append(s)
                dur_key.append(s * 2 * chunks + bwd * chunks + c)
                dep.append(d)
                lag_key.append(lag)
                mbs.append(i)
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - would be a bug in stage_order
            raise RuntimeError(f"schedule {schedule} deadlocks for p={p} v={v} m={m}")
    last_bwd = tuple(tuple(done[(1, c * p + s, m - 1)] for c in range(chunks)) for s in range(p))
    pairs = tuple(tuple((pos_of[s][len(orders[s].warmup) + 2 * k], pos_of[s][len(orders[s].warmup) + 2 * k + 1])
                        for k in range(len(orders[s].steady))) for s in range(p))
    return CompiledSchedule(p, chunks, m, tuple(stage), tuple(dur_key), tuple(dep), tuple(lag_key),
                            last_bwd, tuple(mbs), pairs, tuple(tainted), period_mbs(schedule, p, chunks))
