"""The typed input of one simulation: model, plan, cluster and what a run of it costs."""
from __future__ import annotations

from dataclasses import dataclass

from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.stack import StackSpec
from vtrain.workload.system import ClusterSpec


@dataclass(frozen=True, slots=True)
class Workload:
    model: ModelSpec
    plan: ParallelPlan
    cluster: ClusterSpec
    stack: StackSpec
    usd_per_gpu_hour: float
    cost_model: str = "analytical"

    @property
    def tokens_to_train(self) -> float:
        return self.plan.tokens_to_train
