"""The system: one GPU type and the two network tiers of a cluster (as data, after Calculon)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

GIB = 2**30  # binary gibibyte, for capacities
GB = 10**9  # SI gigabyte, for bandwidths
TFLOPS = 10**12


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    peak_tflops: Mapping[str, float]
    hbm_capacity_bytes: float
    hbm_bandwidth_bytes_per_s: float
    num_sms: int
    gemm_max_efficiency: float
    gemm_half_efficiency_dim: float
    gemm_misaligned_efficiency: float
    attention_efficiency: float
    memory_efficiency: float
    kernel_time_s: float
    host_time_per_kernel_s: float
    host_time_per_collective_s: float
    optimizer_bytes_per_param: float
    iteration_overhead_s: float
    microbatch_overhead_s: float
    memory_reserved_bytes: float

    def peak_flops_per_s(self, precision: str) -> float:
        return self.peak_tflops[precision] * TFLOPS


@dataclass(frozen=True, slots=True)
class NetworkTier:
    bandwidth_bytes_per_s: float  # unidirectional; per GPU (intra) or per node (inter)
    latency_s: float  # fixed per collective call
    step_latency_s: float  # per algorithm step
    efficiency: float


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    gpu: GpuSpec
    gpus_per_node: int
    num_nodes: int
    intra_node: NetworkTier
    inter_node: NetworkTier

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def inter_node_bytes_per_s_per_gpu(self) -> float:
        """A node's network bandwidth shared by all its GPUs communicating at once."""
        return self.inter_node.bandwidth_bytes_per_s * self.inter_node.efficiency / self.gpus_per_node
