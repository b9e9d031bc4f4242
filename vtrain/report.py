"""The result of one simulation: a frozen value, also written as JSON."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Tuple

from vtrain.workload.plan import ParallelPlan


@dataclass(frozen=True, slots=True)
class StreamUsage:
    """One stream of a stage over the iteration: busy time by kind, and idle time (they add up to it)."""

    stream: str  # compute | dp_comm | pp_p2p | host
    busy_s: Dict[str, float]
    idle_s: float


@dataclass(frozen=True, slots=True)
class StageBreakdown:
    """Where one pipeline stage's iteration time goes, as the engine measured its compute stream: the
    parts are never negative and add up to the iteration time."""

    stage: int
    compute_s: float  # GPU kernel time of forward, recompute and backward
    host_overhead_s: float  # time the GPU waits for the framework to issue kernels
    exposed_comm_s: float  # communication the compute stream waits for (sum of exposed_comm_by_group)
    bubble_s: float  # idle: pipeline fill/drain and waits for other stages
    optimizer_s: float
    peak_memory_bytes: float
    layers: int
    params: float
    exposed_comm_by_group: Dict[str, float] = field(default_factory=dict)  # tp, pp, dp, embedding, ...
    streams: Tuple[StreamUsage, ...] = ()

    @property
    def total_s(self) -> float:
        return self.compute_s + self.host_overhead_s + self.exposed_comm_s + self.bubble_s + self.optimizer_s


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    other_bytes: float  # logits, workspace, reserved

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.other_bytes)


@dataclass(frozen=True, slots=True)
class Report:
    model: str
    cluster: str
    gpu: str
    plan: ParallelPlan
    iteration_time_s: float
    stages: Tuple[StageBreakdown, ...]
    peak_memory_bytes: float  # the largest over stages
    memory: MemoryBreakdown  # of the stage with the largest peak
    memory_capacity_bytes: float
    fits: bool
    mfu: float  # model FLOPs / (time x GPUs x the activation precision's peak: bf16 for FP8/FP4 plans too)
    hfu: float  # the same with the recomputed FLOPs
    tokens_per_s: float
    model_flops_per_iteration: float
    iterations: float
    time_to_train_s: float
    gpu_hours: float
    cost_usd: float
    usd_per_gpu_hour: float
    gpus_used: int
    cost_model: str
    stack: str = ""
    provenance: Dict[str, str] = field(default_factory=dict)  # "gpu.<constant>" / "stack.<constant>" -> source
    extrapolated_ops: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = field(default_factory=tuple)
    # energy (vtrain/sim/energy.py): IT power of the GPUs used and their nodes' share, times the site's PUE
    energy_kwh_per_iteration: float = 0.0
    energy_kwh: float = 0.0  # the whole training (iterations x per iteration)
    avg_power_w_per_gpu: float = 0.0  # GPU plus its share of the node, averaged over the iteration; no PUE
    co2_kg: float = 0.0  # energy_kwh x pricing.grid_kg_co2_per_kwh
    energy_cost_usd: float = 0.0  # energy_kwh x pricing.usd_per_kwh (on-premises; not part of cost_usd)
    # intervals: the calibrated 80% prediction interval (vtrain/sim/intervals.py, vtrain/data/intervals.json);
    # time to train and cost scale with the iteration time, so they share its relative interval
    iteration_time_lo_s: float = 0.0
    iteration_time_hi_s: float = 0.0
    time_to_train_lo_s: float = 0.0
    time_to_train_hi_s: float = 0.0
    cost_lo_usd: float = 0.0
    cost_hi_usd: float = 0.0
    interval_regime: str = ""  # the residual class the interval rests on, e.g. fitted/dense/single_node
    # goodput (vtrain/sim/goodput.py): failures, restarts and checkpoints at the cluster's rates; the expected
    # figures are the run's wall time and cost including them (time_to_train_s, cost_usd: without)
    goodput: float = 1.0
    expected_time_to_train_s: float = 0.0
    expected_cost_usd: float = 0.0
    expected_failures: float = 0.0
    checkpoint_interval_s: float = 0.0  # Young/Daly
    checkpoint_write_s: float = 0.0

    @property
    def breakdown(self) -> StageBreakdown:
        """The critical stage: the one with the least bubble (it ran the longest)."""
        return min(self.stages, key=lambda st: st.bubble_s)

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["plan"] = self.plan.as_dict()
        d["breakdown"] = dataclasses.asdict(self.breakdown)
        return d
