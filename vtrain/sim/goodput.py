"""Goodput: the expected wall time of a training run that fails, restarts and checkpoints. Pure arithmetic.

Failures arrive as a Poisson process at the job's rate (per-GPU and per-node rates times the GPUs and nodes it
uses: vtrain/workload/reliability.py). The job writes a checkpoint every ``tau`` seconds of work, which takes
``delta``; a failure costs the restart, reading the last checkpoint back and, on average, half a segment of lost
work. ``tau`` is Young's optimum sqrt(2 delta M) (Young 1974, "A first order approximation to the optimum
checkpoint interval"; Daly 2006 keeps it as the first-order term). Per segment of ``tau`` useful seconds the job
spends ``tau + delta``; per failure ``R + restore + (tau + delta) / 2``; failures come every M wall seconds, so
wall W = T (1 + delta / tau) / (1 - (R + restore + (tau + delta) / 2) / M) and goodput = T / W.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from vtrain.workload.workload import Workload

GB = 1e9
# a run whose failures eat all its time never finishes: the loss share is capped below 1 so that the expected
# time stays finite (a goodput of at most 1e-3 and the report says so)
MAX_LOSS_SHARE = 0.999


@dataclass(frozen=True, slots=True)
class Goodput:
    goodput: float  # useful training time / expected wall time, in (0, 1]
    failures_per_h: float  # the job's expected failures per wall-clock hour
    checkpoint_bytes: float  # model and optimizer state, all of it
    checkpoint_write_s: float  # one checkpoint (delta)
    restore_s: float  # reading it back after a failure
    checkpoint_interval_s: float  # useful work between checkpoints (tau, Young/Daly)
    expected_failures: float  # over the whole run
    expected_time_s: float  # wall time including checkpoints, failures and restarts

    @property
    def mtbf_s(self) -> float:
        return math.inf if self.failures_per_h <= 0 else 3600.0 / self.failures_per_h


def checkpoint_bytes(params: float, weight_bytes: float = 2.0, moment_bytes: float = 4.0) -> float:
    """Model and optimizer state of mixed-precision Adam: the low-precision weights, fp32 master weights and two
    moments (Megatron-Core's distributed checkpoint saves all three: 2 + 4 + 2 x 4 = 14 bytes per parameter)."""
    return params * (weight_bytes + 4.0 + 2.0 * moment_bytes)


def job_failures_per_h(gpus: int, nodes: int, gpu_failures_per_h: float, node_failures_per_h: float) -> float:
    """Failures per hour of a job on ``gpus`` GPUs over ``nodes`` nodes (independent components: rates add)."""
    return gpus * gpu_failures_per_h + nodes * node_failures_per_h


def young_daly_interval_s(write_s: float, mtbf_s: float) -> float:
    """The checkpoint interval that minimises lost time to first order: sqrt(2 delta M) (Young 1974)."""
    return math.sqrt(2.0 * write_s * mtbf_s)


def goodput_of(train_s: float, gpus: int, gpus_per_node: int, state_bytes: float, write_gb_per_s_per_node: float,
               gpu_failures_per_h: float, node_failures_per_h: float, restart_s: float) -> Goodput:
    """Goodput of a run of ``train_s`` failure-free seconds on ``gpus`` GPUs; the checkpoint of ``state_bytes`` is
    written (and read back) by the job's nodes at ``write_gb_per_s_per_node`` each."""
    nodes = -(-gpus // gpus_per_node)
    bandwidth = nodes * write_gb_per_s_per_node * GB
    write_s = state_bytes / bandwidth if bandwidth > 0 else 0.0
    rate_h = job_failures_per_h(gpus, nodes, gpu_failures_per_h, node_failures_per_h)
    if rate_h <= 0 or train_s <= 0:
        return Goodput(1.0, max(rate_h, 0.0), state_bytes, write_s, write_s, train_s, 0.0, train_s)
    mtbf_s = 3600.0 / rate_h
    tau = min(young_daly_interval_s(write_s, mtbf_s), train_s) if write_s > 0 else min(mtbf_s, train_s)
    lost_per_failure_s = restart_s + write_s + (tau + write_s) / 2.0
    loss_share = min(lost_per_failure_s / mtbf_s, MAX_LOSS_SHARE)
    wall_s = train_s * (1.0 + write_s / tau) / (1.0 - loss_share)
    return Goodput(goodput=train_s / wall_s, failures_per_h=rate_h, checkpoint_bytes=state_bytes,
                   checkpoint_write_s=write_s, restore_s=write_s, checkpoint_interval_s=tau,
                   expected_failures=wall_s / mtbf_s, expected_time_s=wall_s)


def run_goodput(w: Workload, train_s: float) -> Goodput:
    """Goodput of workload ``w``'s run of ``train_s`` failure-free seconds at its cluster's rates: the checkpoint
    holds every parameter once (weights at the training precision, bf16 for the 8- and 4-bit formats, whose
    master copy is what is saved) with fp32 master weights and Adam's moments."""
    plan, cluster = w.plan, w.cluster
    weight_bytes = 4.0 if plan.precision.value == "fp32" else 2.0
    moment_bytes = 2.0 if plan.optimizer_moments == "bf16" else 4.0
    state = checkpoint_bytes(float(w.model.total_params()), weight_bytes, moment_bytes)
    return goodput_of(train_s, plan.num_gpus, cluster.gpus_per_node, state, cluster.checkpoint_write_gb_per_s,
                      cluster.gpu_failures_per_h, cluster.node_failures_per_h, cluster.restart_s)
