"""The chunk layout of a pipeline schedule: how many model chunks a stage holds and where each sits in the
pipeline. The partition (:mod:`vtrain.workload.partition`), the plan's checks and the schedules
(:mod:`vtrain.sim.schedule`) all read it from here."""
from __future__ import annotations

from functools import lru_cache
from typing import Tuple

from vtrain.workload.enums import Schedule

V_SHAPE = frozenset((Schedule.ZBV, Schedule.DUALPIPEV))  # one model copy in a V (Qi et al. 2024 Sec. 6; DualPipeV)
TWO_CHUNKS = V_SHAPE | {Schedule.DUALPIPE}  # V-shaped, or two directions (DeepSeek-V3 report Sec. 3.2.1)


def chunks_of(schedule: Schedule, v: int) -> int:
    """Model chunks per stage: 2 for the V-shaped and two-direction schedules, ``v`` interleaved, else 1."""
    if schedule in TWO_CHUNKS:
        return 2
    return v if schedule is Schedule.INTERLEAVED else 1


@lru_cache(maxsize=256)
def layout(schedule: Schedule, p: int, v: int) -> Tuple[Tuple[Tuple[int, ...], ...], int]:
    """(position[stage][chunk], positions per chain). Interleaved: q = c·p + s; V-shape: chunk 0 at s,
    chunk 1 at 2p-1-s; DualPipe: direction 0 at s, direction 1 at p + (p-1-s), chains of p."""
    v = chunks_of(schedule, v)
    if schedule in V_SHAPE:
        return tuple((s, 2 * p - 1 - s) for s in range(p)), 2 * p
    if schedule == Schedule.DUALPIPE:
        return tuple((s, 2 * p - 1 - s) for s in range(p)), p
    return tuple(tuple(c * p + s for c in range(v)) for s in range(p)), p * v
