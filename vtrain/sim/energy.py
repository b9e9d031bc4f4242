"""Energy of a simulated iteration and of the whole training, from the engine's own time breakdown. Pure.

The model (README: Energy):

- **GPU power.** Each stage's compute stream splits the iteration into kernel time, optimizer, exposed
  communication, host overhead and bubble (:class:`vtrain.report.StageBreakdown`; the parts add up to the
  iteration). Each part has an *activity* a in [0, 1] and a GPU draws ``idle_w + (tdp_w - idle_w) * a``
  while in it, so a stage's average GPU power is ``idle_w + (tdp_w - idle_w) * u`` with ``u`` the
  time-weighted activity of its parts. Every stage holds the same number of GPUs (tp x cp x dp), so the
  plan's average is the mean over stages: a bubble-heavy plan has idle GPUs on its non-critical stages,
  which the critical stage alone would hide.
- **Node share.** ``cluster.node_overhead_w`` (CPUs, memory, NICs, NVSwitches, fans, the node's share of
  the scale-out switches) is drawn whatever the GPUs do and is split over the node's GPUs.
- **Site.** IT power times ``cluster.pue`` is what the site draws from the grid.

``energy_kwh_per_iteration = gpus x (gpu power + node share) x iteration_time_s x pue / 3.6e6``, the
training's ``energy_kwh`` is that times the iterations, ``co2_kg = energy_kwh x grid_kg_co2_per_kwh`` and
``energy_cost_usd = energy_kwh x usd_per_kwh``.

Sources of the activities (the GPU's idle and TDP watts are per GPU config, with their provenance):

- kernels (forward, recompute, backward): 1.0, the board power limit. Tensor-core GEMMs of LLM training
  run at the power cap (it is why H100/H200 sustain less than their benchmarked GEMM rate,
  ``gpu.sustained_gemm_fraction``); Latif et al., "Empirical Measurements of AI Training Power Demand on
  a GPU-Accelerated Node" (arXiv:2412.08602, 2024) measured an 8 x H100 node training Llama2-13b at up to
  8.4 kW against its 10.2 kW rating, "with GPUs near full utilization". Memory-bound kernels inside the
  passes draw less, so this is an upper bound of the kernel share.
- optimizer step: 0.5, assumed (element-wise Adam is HBM-bandwidth bound: the memory system busy, the
  tensor cores idle).
- exposed communication: 0.25, assumed (NCCL kernels hold a few SMs and move data through HBM and the
  links while the rest of the GPU waits; Perseus, Chung et al., SOSP'24, likewise prices time blocked on
  communication at a constant power below that of computation).
- host overhead and pipeline bubble: 0.0, the GPU waits for the host or for other stages (idle_w).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from vtrain.report import StageBreakdown
from vtrain.workload.system import ClusterSpec, GpuSpec

J_PER_KWH = 3.6e6  # 1 kWh = 1,000 W x 3,600 s

KERNEL_ACTIVITY = 1.0  # forward/recompute/backward kernels: at the power limit (see the module docstring)
OPTIMIZER_ACTIVITY = 0.5  # assumed: HBM-bound element-wise optimizer step
EXPOSED_COMM_ACTIVITY = 0.25  # assumed: waiting on NCCL kernels that hold a few SMs
HOST_ACTIVITY = 0.0  # the GPU waits for kernels to be issued
BUBBLE_ACTIVITY = 0.0  # the GPU waits for other pipeline stages


@dataclass(frozen=True, slots=True)
class Energy:
    avg_power_w_per_gpu: float  # GPU + its node share, averaged over the iteration and the stages; no PUE
    energy_kwh_per_iteration: float  # at the site (with PUE)
    energy_kwh: float
    co2_kg: float
    energy_cost_usd: float


def stage_activity(st: StageBreakdown) -> float:
    """Time-weighted activity of one stage's iteration, in [0, 1] (0 for an empty breakdown)."""
    total = st.total_s
    if total <= 0:
        return 0.0
    busy = (KERNEL_ACTIVITY * st.compute_s + OPTIMIZER_ACTIVITY * st.optimizer_s
            + EXPOSED_COMM_ACTIVITY * st.exposed_comm_s + HOST_ACTIVITY * st.host_overhead_s
            + BUBBLE_ACTIVITY * st.bubble_s)
    return min(1.0, max(0.0, busy / total))


def gpu_power_w(gpu: GpuSpec, activity: float) -> float:
    """Board power of one GPU at ``activity`` (0: idle_w; 1: tdp_w)."""
    a = min(1.0, max(0.0, activity))
    return gpu.idle_w + (max(gpu.tdp_w, gpu.idle_w) - gpu.idle_w) * a


def node_share_w(cluster: ClusterSpec) -> float:
    """A GPU's share of its node's power besides the GPUs."""
    return cluster.node_overhead_w / cluster.gpus_per_node


def avg_power_w_per_gpu(stages: Sequence[StageBreakdown], cluster: ClusterSpec) -> float:
    """IT power per GPU used: mean over stages of the GPU's power, plus the node share."""
    if not stages:
        return gpu_power_w(cluster.gpu, 0.0) + node_share_w(cluster)
    gpu = sum(gpu_power_w(cluster.gpu, stage_activity(st)) for st in stages) / len(stages)
    return gpu + node_share_w(cluster)


def energy(stages: Sequence[StageBreakdown], iteration_time_s: float, iterations: float, gpus: int,
           cluster: ClusterSpec, usd_per_kwh: float, grid_kg_co2_per_kwh: float) -> Energy:
    power = avg_power_w_per_gpu(stages, cluster)
    per_iteration = gpus * power * iteration_time_s * cluster.pue / J_PER_KWH
    total = per_iteration * iterations
    return Energy(avg_power_w_per_gpu=power, energy_kwh_per_iteration=per_iteration, energy_kwh=total,
                  co2_kg=total * grid_kg_co2_per_kwh, energy_cost_usd=total * usd_per_kwh)
