"""The system: one GPU type and the network tiers of a cluster, as data (after Calculon).

GPU specs hold datasheet values and GPU-side efficiency curves only; what the framework costs on the
host (per kernel, per collective, per micro-batch) is the software stack's (:mod:`vtrain.workload.stack`).
Binary prefixes for capacities (GiB = 2**30 bytes), SI prefixes for rates (GB/s = 1e9 bytes/s).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from vtrain.workload import bounds as B
from vtrain.workload.fields import FRACTION, NON_NEGATIVE, POSITIVE_INT, Domain, spec
from vtrain.workload.reliability import (
    CHECKPOINT_WRITE_GB_PER_S_PER_NODE,
    GPU_FAILURES_PER_H,
    NODE_FAILURES_PER_H,
    RESTART_S,
)

GIB = 2**30  # binary gibibyte, for capacities
GB = 10**9  # SI gigabyte, for bandwidths
TFLOPS = 10**12
# assumed: a modern purpose-built (AI) site; between hyperscale fleets (Google: 1.10, Q2 2021) and the
# industry average (Uptime Institute Global Data Center Survey 2023: 1.58)
DEFAULT_PUE = 1.2
USABLE_HBM_FRACTION = 0.95  # ClusterSpec.usable_hbm_fraction's default (its source there)
# Physical ranges (first principles: beyond them a prediction is meaningless and its arithmetic under- or
# overflows): rates from 1 GFLOP/s or 1 MB/s (a CPU core) up to 1 EFLOP/s or 1 PB/s per device, capacities up
# to 1 PiB, GEMM sizes up to 1e6 per dimension, fixed times up to 1 s per kernel or call, power up to 100 kW
PEAK_TFLOPS = Domain(lo=1.0e-3, hi=1.0e6, why="1 GFLOP/s (a CPU core) to 1 EFLOP/s per device")
RATE_GB_PER_S = Domain(lo=1.0e-3, hi=1.0e6, why="1 MB/s to 1 PB/s per device or link")
CAPACITY_GIB = Domain(lo=0.0, hi=2.0**20, lo_open=True, why="up to 1 PiB per device")
GEMM_DIM = Domain(lo=0.0, hi=1.0e6, why="a GEMM dimension up to 1e6")
FIXED_TIME_S = Domain(lo=0.0, hi=1.0, why="up to 1 s per kernel or call")
POWER_W = Domain(lo=0.0, hi=1.0e5, why="up to 100 kW per device or node")
FAILURE_RATE_PER_H = Domain(lo=0.0, hi=1.0, why="Llama 3 saw 1.2e-5 per GPU-hour; a part failing hourly is broken")
RESTART_S_RANGE = Domain(lo=0.0, hi=1.0e6, why="seconds; 10 minutes assumed by default, 11 days is no restart")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    name: str = spec(doc="gpu/ config name")
    architecture: str = spec("", doc="the GPU's architecture (volta, ampere, hopper, blackwell; cpu): what a "
                                     "stack's per-architecture measurements key on")
    peak_tflops: Dict[str, float] = spec(factory=dict, unit="TFLOP/s", domain=PEAK_TFLOPS,
                                         doc="datasheet dense peak per precision (no sparsity)")
    hbm_capacity_gib: float = spec(unit="GiB", domain=CAPACITY_GIB, doc="HBM capacity")
    hbm_bandwidth_gb_per_s: float = spec(unit="GB/s", domain=RATE_GB_PER_S, doc="HBM bandwidth (datasheet)")
    num_sms: int = spec(108, domain=POSITIVE_INT, doc="streaming multiprocessors: GEMM wave quantization")
    gemm_max_efficiency: float = spec(0.75, domain=FRACTION, doc="fraction of peak a large GEMM reaches")
    gemm_half_efficiency_dim: float = spec(64.0, domain=GEMM_DIM,
                                           doc="GEMM dimension at which its size factor d/(d+d_half) is 1/2 "
                                               "(0: no size factor)")
    gemm_misaligned_efficiency: float = spec(0.4, domain=FRACTION,
                                             doc="GEMM factor when no dimension is 16-byte aligned")
    attention_efficiency: float = spec(0.5, domain=FRACTION,
                                       doc="batched attention GEMMs and fused attention, relative to GEMMs")
    sustained_gemm_fraction: float = spec(
        1.0, domain=FRACTION,
        doc="share of its benchmarked GEMM rate a GPU sustains inside a training step (power and clock "
            "limits under continuous load); a stack whose own runs the GEMM curve was fitted to runs at 1 there "
            "(stack.gemm_curve_fitted_on: the A100's, vTrain's single-node runs)")
    block_scaled_gemm_ratio: float = spec(
        1.0, domain=FRACTION,
        doc="share of per-tensor FP8's large-GEMM efficiency that the block-scaled formats (mxfp8, nvfp4: scales "
            "per 32 / 16 elements) reach, their scale handling included, where no table measures their own "
            "GEMMs (gemm_efficiency_by_precision copies fp8's); fitted end to end on bf16/MXFP8 pairs")
    rowwise_cutlass_gemm_ratio: float = spec(
        1.0, domain=FRACTION,
        doc="share of per-tensor FP8's large-GEMM efficiency that PyTorch's CUTLASS rowwise-scaled FP8 kernel "
            "(aten RowwiseScaledMM.cu: a tile per CTA, no split-K, slow accumulation where fast accumulation is "
            "off) reaches; used where stack.cublas_rowwise_fp8 is false; fitted end to end on per-tensor/rowwise "
            "pairs")
    power_clock_fraction: float = spec(
        1.0, domain=FRACTION,
        doc="tensor-core clock of this part under its board power limit, relative to the part its GEMM and "
            "fused-attention constants were measured on (a power-capped SKU); scales GEMMs and fused attention, "
            "not memory-bound kernels")
    gemm_ceiling_by_precision: Dict[str, float] = spec(
        factory=dict, domain=FRACTION,
        doc="best achievable matmul per precision as a fraction of its peak (a brute-force shape search, "
            "MAMF): no GEMM runs faster, whatever the size terms extrapolate to")
    gemm_efficiency_by_precision: Dict[str, float] = spec(
        factory=dict, domain=FRACTION, doc="large-GEMM efficiency per precision (absent: gemm_max_efficiency)")
    gemm_half_efficiency_k: Optional[float] = spec(
        None, domain=GEMM_DIM, none_means="gemm_half_efficiency_dim for k too, at every precision",
        doc="k at which the k size factor is 1/2, at the bf16 (else fp16) rate; scales with peak per precision")
    gemm_fixed_time_s: float = spec(0.0, unit="s", domain=FIXED_TIME_S,
                                    doc="fixed time of one GEMM kernel (prologue, epilogue, tail) on top of its work")
    gemm_wave_exponent: float = spec(1.0, domain=Domain(lo=0.0, hi=1.0),
                                     doc="wave-quantization factor raised to this (1: full waves; <1: partly hidden)")
    flash_attention_efficiency: Optional[float] = spec(
        None, domain=FRACTION, none_means="gemm max efficiency x attention_efficiency",
        doc="fused attention (fwd and bwd) as a fraction of the bf16/fp16 peak, at 8K-token causal sequences "
            "(4,096 keys per query on average: the measurement's length)")
    flash_attention_k0_tokens: Optional[float] = spec(
        None, unit="tokens", domain=Domain(lo=0.0, hi=1.0e6, lo_open=True),
        none_means="one rate at every length",
        doc="keys per query at which a fused-attention kernel call spends as long on its fixed per-query-tile "
            "work (loading Q, rescaling and writing O and its log-sum-exp) as on its keys: the rate goes as "
            "k / (k + k0) in the mean keys k a query attends to in one call, scaled to flash_attention_efficiency "
            "at k = 4,096, below the 8K anchor and above it (up to flash_attention_max_length_factor; "
            "bench/fit_attention_length.py)")
    flash_attention_max_length_factor: Optional[float] = spec(
        None, domain=Domain(lo=1.0, hi=10.0),
        none_means="no cap: the k / (k + k0) curve at every length",
        doc="the most a long fused-attention call's rate gains over the 8K anchor's: kernels that stop "
            "speeding up past some length (bench/fit_attention_length.py)")
    flash_attention_exp_head_dim: Optional[float] = spec(
        None, domain=Domain(lo=0.0, hi=4096.0, lo_open=True), none_means="one rate at every head dimension",
        doc="head dimension at which a fused-attention forward spends as long on its softmax exponentials (one "
            "per score, on the special-function units) as on its matmuls (4 x head_dim FLOPs per score): the "
            "tensor-core FLOPs per clock and SM over 4 x the exp2 results per clock and SM; the rate goes as "
            "d / (d + this) (backward: d / (d + this / 2.5)), scaled to 1 at the anchor's head dimension 128")
    host_link_gb_per_s: Optional[float] = spec(
        None, unit="GB/s", domain=RATE_GB_PER_S, none_means="unknown: activation offloading is refused",
        doc="GPU-host copy bandwidth per direction and GPU with every GPU copying at once (PCIe, or NVLink-C2C "
            "shared by a superchip's GPUs; datasheet)")
    memory_efficiency: float = spec(0.7, domain=FRACTION, doc="fraction of HBM bandwidth of element-wise kernels")
    strided_gb_per_s_per_sm: Optional[float] = spec(
        None, unit="GB/s", domain=RATE_GB_PER_S, none_means="such kernels move at memory_efficiency",
        doc="HBM traffic per SM of PyTorch's non-vectorized element-wise kernels (an operand broadcast or sliced "
            "along its last dimension, MemoryOp.strided): one element per load, so a kernel is bound by its bytes "
            "in flight per SM over the memory latency; it moves at min(this x SMs, memory_efficiency x HBM)")
    kernel_time_s: float = spec(2.0e-6, unit="s", domain=FIXED_TIME_S, doc="minimum GPU time of one kernel")
    overlap_slowdown: float = spec(0.1, domain=Domain(lo=0.0, hi=1.0),
                                   doc="compute slowdown while a collective runs beside it (a TP collective "
                                       "pipelined with it, the FSDP side stream's gathers and reduce-scatters) "
                                       "(assumed, first principles: its communication kernels hold ~8-16 of the "
                                       "GPU's 108-148 SMs; not fitted, no table separates it)")
    tdp_w: float = spec(400.0, unit="W", domain=Domain(lo=0.0, hi=1.0e5, lo_open=True),
                         doc="board power limit (datasheet TDP)")
    idle_w: float = spec(60.0, unit="W", domain=POWER_W, doc="power drawn by an idle GPU (at most tdp_w)")
    provenance: Dict[str, str] = spec(factory=dict, doc="per constant: 'datasheet: ...', 'fitted: <data>' "
                                                        "or 'transferred from: <gpu>'")

    @property
    def hbm_capacity_bytes(self) -> float:
        return self.hbm_capacity_gib * GIB

    @property
    def hbm_bandwidth_bytes_per_s(self) -> float:
        return self.hbm_bandwidth_gb_per_s * GB

    def peak_flops_per_s(self, precision: str) -> float:
        return self.peak_tflops[precision] * TFLOPS


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkTier:
    """One network tier. Bandwidths are unidirectional, per GPU (intra-node) or per node (inter-node)."""

    bandwidth_gb_per_s: float = spec(unit="GB/s", domain=RATE_GB_PER_S, doc="link bandwidth per direction")
    latency_s: float = spec(30.0e-6, unit="s", domain=FIXED_TIME_S, doc="fixed cost of one collective call")
    step_latency_s: float = spec(2.0e-6, unit="s", domain=FIXED_TIME_S, doc="per algorithm step")
    efficiency: float = spec(0.75, domain=FRACTION, doc="achieved fraction of the link bandwidth")
    # per collective kind (all_reduce, all_gather, reduce_scatter, all_to_all, p2p): absent kinds use the
    # scalars above; ll_*: NCCL's low-latency protocol, priced alongside and the faster one taken (0: none)
    kind_latency_s: Dict[str, float] = spec(factory=dict, unit="s", domain=FIXED_TIME_S,
                                            doc="fixed cost per call by collective kind")
    kind_step_latency_s: Dict[str, float] = spec(factory=dict, unit="s", domain=FIXED_TIME_S,
                                                 doc="per algorithm step by collective kind")
    kind_efficiency: Dict[str, float] = spec(factory=dict, domain=FRACTION, doc="bandwidth efficiency by kind")
    kind_group_exponent: Dict[str, float] = spec(factory=dict, domain=Domain(lo=0.0, hi=1.0),
                                                 doc="bytes moved = ((n-1)/n)**x of the buffer (1: ring volume)")
    ll_latency_s: Dict[str, float] = spec(factory=dict, unit="s", domain=FIXED_TIME_S,
                                          doc="low-latency protocol: fixed cost per call by kind")
    ll_efficiency: Dict[str, float] = spec(factory=dict, domain=NON_NEGATIVE,
                                           doc="low-latency protocol: bandwidth efficiency by kind (0: not used)")
    nvls_latency_s: float = spec(0.0, unit="s", domain=FIXED_TIME_S, doc="NVLS (NVSwitch SHARP) all-reduce fixed cost")
    nvls_efficiency: float = spec(0.0, domain=NON_NEGATIVE,
                                  doc="NVLS all-reduce: buffer bytes / time as a fraction of the link (0: no NVLS)")
    all_to_all_gb_per_s: Optional[float] = spec(
        None, unit="GB/s", domain=RATE_GB_PER_S, none_means="no ceiling: the NIC share at the all-to-all efficiency",
        doc="scale-out only: the most NCCL's all-to-all moves across nodes per GPU and direction, whatever the NIC "
            "(grouped point-to-point sends, each remote peer on a fixed number of network channels driven by the "
            "GPU's proxy thread: ncclTopoGetNchannels); the NIC share still bounds it")

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gb_per_s * GB


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    name: str = spec(doc="cluster/ config name")
    gpu: GpuSpec = spec(doc="the cluster's GPU (a gpu/ config name in the config)")
    gpus_per_node: int = spec(8, domain=B.GPUS_PER_NODE, doc="GPUs per node (host)")
    num_nodes: int = spec(1, domain=B.NODES, doc="nodes")
    nvlink_domain: int = spec(0, domain=B.NVLINK_DOMAIN,
                              doc="GPUs sharing one NVLink/NVSwitch domain (0: one node; GB200 NVL72: 72)")
    intra_node: NetworkTier = spec(factory=lambda: NetworkTier(bandwidth_gb_per_s=300.0),
                                   doc="NVLink/NVSwitch inside the NVLink domain, per GPU")
    inter_node: NetworkTier = spec(factory=lambda: NetworkTier(bandwidth_gb_per_s=100.0),
                                   doc="scale-out network, per node (all NICs)")
    hierarchical_overlap: float = spec(0.0, domain=Domain(lo=0.0, hi=1.0, why="a share"),
                                       doc="share of the shorter phase of a multi-domain collective hidden "
                                           "under the longer (0: in sequence; 1: pipelined)")
    # energy (vtrain/sim/energy.py; README: Energy)
    node_overhead_w: float = spec(0.0, unit="W", domain=POWER_W,
                                  doc="power of a node besides its GPUs: CPUs, memory, NICs, NVSwitches, fans, and "
                                      "its share of the scale-out switches (0: GPUs only); shared by its GPUs")
    pue: float = spec(DEFAULT_PUE, domain=Domain(lo=1.0, hi=10.0, why="facility / IT power: 1.1-1.6 reported"),
                      doc="site power usage effectiveness: facility power / IT power (cooling, power delivery)")
    # reliability (vtrain/sim/goodput.py): defaults and their sources in vtrain/workload/reliability.py
    gpu_failures_per_h: float = spec(GPU_FAILURES_PER_H, unit="1/h", domain=FAILURE_RATE_PER_H,
                                     doc="job-interrupting failures per GPU-hour (Llama 3's GPU share)")
    node_failures_per_h: float = spec(NODE_FAILURES_PER_H, unit="1/h", domain=FAILURE_RATE_PER_H,
                                      doc="job-interrupting failures per node-hour besides its GPUs: host, "
                                          "network, software (Llama 3's other 41%)")
    restart_s: float = spec(RESTART_S, unit="s", domain=RESTART_S_RANGE,
                            doc="from a failure to training again, besides reading the checkpoint (assumed)")
    checkpoint_write_gb_per_s: float = spec(CHECKPOINT_WRITE_GB_PER_S_PER_NODE, unit="GB/s", domain=RATE_GB_PER_S,
                                            doc="storage write (and read) bandwidth per node for checkpoints")
    # fitted (docs/search.md "Memory margin"): the smallest whole percent that refuses none of the 1,501 measured
    # runs shipped (A100 single node, torchtitan, Megatron-Core Qwen3 H100/Blackwell): the fullest, torchtitan's
    # GB200 Llama 3 8B MXFP8 row, is predicted at 94.4% of HBM and reserved 97.6% (torchtitan nvfp4.md)
    usable_hbm_fraction: float = spec(USABLE_HBM_FRACTION, domain=Domain(lo=0.0, hi=1.0, lo_open=True),
                                      doc="share of HBM a plan's predicted peak may use: the rest is left to the "
                                          "allocator's fragmentation, NCCL and CUDA-graph buffers (a search "
                                          "prunes plans above it)")

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def domain_size(self) -> int:
        """GPUs that reach each other over NVLink: the node, or a multi-node NVLink domain (NVL72)."""
        return self.nvlink_domain or self.gpus_per_node

    @property
    def inter_node_bytes_per_s_per_gpu(self) -> float:
        """A node's network bandwidth shared by all its GPUs communicating at once."""
        return self.inter_node.bandwidth_bytes_per_s * self.inter_node.efficiency / self.gpus_per_node
