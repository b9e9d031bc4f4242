"""The vocabulary of a pipeline schedule: a task (kind, chunk, micro-batch) or a fused pair, its kinds, and one
stage's order of tasks (warm-up, repeating steady units, cool-down). :mod:`vtrain.sim.schedule` and
:mod:`vtrain.sim.schedule_zb` build orders of them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

Task = Tuple[int, ...]  # (kind, chunk, microbatch) or (FUSED, f chunk, f mb, b chunk, b mb)
F, B, W, FUSED = 0, 1, 2, 3


@dataclass(frozen=True)
class StageOrder:
    warmup: Tuple[Task, ...]
    steady: Tuple[Tuple[Task, ...], ...]  # repeating units ((forward, backward) pairs for 1F1B)
    cooldown: Tuple[Task, ...]
    regular: int = -1  # steady units that repeat (-1: all); the rest touch a shorter last micro-batch group

    def tasks(self) -> List[Task]:
        return [*self.warmup, *(t for unit in self.steady for t in unit), *self.cooldown]
