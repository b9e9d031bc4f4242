"""Operator dataclasses: the nodes of the per-layer graph, with the shapes after TP/SP sharding.

An op knows its FLOPs and HBM bytes; it does not know its time (that is the cost model's job).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Union


class CollectiveKind(str, Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    P2P = "p2p"


class Group(str, Enum):
    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"
    EMBEDDING = "embedding"
    EP = "ep"  # expert parallel: token dispatch and combine
    ETP = "etp"  # expert tensor parallel
    EDP = "edp"  # expert data parallel: expert gradient reduction


@dataclass(frozen=True, slots=True)
class Gemm:
    """C[m,n] = A[m,k] @ B[k,n], repeated ``batch`` times (batched GEMM for attention)."""

    name: str
    m: int
    n: int
    k: int
    batch: int = 1
    dtype_bytes: float = 2  # bytes per operand element
    attention: bool = False  # batched attention-score/context GEMM (lower efficiency)
    precision: str = ""  # the GEMM's format (a Precision value); "": the run's activation precision

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    @property
    def bytes(self) -> float:
        return float(self.batch * (self.m * self.k + self.k * self.n + self.m * self.n) * self.dtype_bytes)

    @property
    def kernels(self) -> int:
        return 1


@dataclass(frozen=True, slots=True)
class MemoryOp:
    """A memory-bound op (norm, softmax, activation, dropout, residual, cross-entropy, Adam)."""

    name: str
    bytes: float
    kernels: int = 1
    flops: float = 0.0
    # bytes and kernels are those of the eager kernels that run it outside any compiled region: neither fused
    # (vtrain.graph.fusion) nor scaled by the stack's elementwise_traffic
    eager: bool = False
    # the part of ``bytes`` that quantizes a weight (a low-precision linear layer's weight cast): a stack that keeps
    # quantized weights across the micro-batches of a step runs it on the first one only (vtrain.graph.weight_cache)
    weight_bytes: float = 0.0
    # the host waits for the GPU before issuing it (a blocking copy between host and device: PyTorch completes a
    # copy from pageable host memory with a stream synchronize)
    host_sync: bool = False
    # its kernels take PyTorch's non-vectorized element-wise path: an operand is a broadcast or a slice of the last
    # dimension (``chunk``), so each thread loads one element at a time and the kernel moves
    # ``GpuSpec.strided_gb_per_s_per_sm`` per SM (latency-bound), not ``memory_efficiency`` of the HBM
    strided: bool = False


def windowed_keys(window: int, keys: int) -> float:
    """Mean keys per query of a causal sliding window over a sequence of ``keys``: query i attends to
    min(i, window) keys before it and itself; the mean over i is (w + 1) - w (w + 1) / (2 s) for s > w."""
    if keys <= window:
        return (keys + 1) / 2.0
    return (window + 1) - window * (window + 1) / (2.0 * keys)


@dataclass(frozen=True, slots=True)
class FlashAttention:
    """Fused attention (FlashAttention-2 style): scores never leave on-chip memory.

    ``flops`` counts what the kernel executes: causal masking skips about half of the blocks.
    """

    name: str
    batch_heads: int
    seq_len: int  # queries on this rank
    head_dim: int
    backward: bool = False
    causal: bool = True
    dtype_bytes: float = 2
    precision: str = ""  # "": the run's activation precision (fp8 with training.fp8_attention)
    kv_len: int = 0  # keys attended to (0: seq_len); context parallelism: the whole sequence

    @property
    def keys(self) -> int:
        return self.kv_len or self.seq_len

    calls: int = 1  # kernels it runs as (PyTorch's ring attention: one per context-parallel step)
    call_keys: int = 0  # keys one kernel call holds per query before causal masking (0: keys / calls); a ring's
    # step sees one rank's block of s/cp keys
    window: int = 0  # a causal sliding window: each query attends to itself and the ``window`` keys before it

    @property
    def mean_call_keys(self) -> float:
        """The mean number of keys a query attends to within one kernel call (causal: half of its keys; a
        sliding window: :func:`windowed_keys`)."""
        if self.window:
            return windowed_keys(self.window, self.keys)
        keys = self.call_keys or self.keys / self.calls
        return keys * (0.5 if self.causal else 1.0)

    @property
    def flops(self) -> float:
        full = 4.0 * self.batch_heads * self.seq_len * self.keys * self.head_dim
        full *= 2.5 if self.backward else 1.0  # backward: 5 GEMMs vs 2 (Dao 2023, Sec. 3)
        if self.window:  # the kernel skips the blocks outside the band (cuDNN's sliding window, FlashAttention's)
            return full * windowed_keys(self.window, self.keys) / self.keys
        # causal: half the blocks are masked out (with CP's load balancing, on every rank)
        return full * (0.5 if self.causal else 1.0)

    @property
    def bytes(self) -> float:
        return 2.0 * self.batch_heads * (self.seq_len + self.keys) * self.head_dim * self.dtype_bytes

    @property
    def kernels(self) -> int:
        return self.calls


@dataclass(frozen=True, slots=True)
class Collective:
    """A collective or transfer. ``overlap`` pairs it with the compute op it is pipelined with on the
    compute stream: "next" (an all-gather or KV exchange feeding the next op) or "previous" (a
    reduce-scatter of the previous op's output), split into ``chunks`` pieces (TE userbuffers / async TP:
    tp chunks; ring attention: cp steps); "first": issued whole before the next op, which runs its first of
    ``chunks`` pieces beside it and needs it for the rest (PyTorch's context-parallel K/V all-gather, waited
    for at the second ring step); "" runs it alone in stream order."""

    name: str
    kind: CollectiveKind
    bytes: float  # message size per GPU (the full buffer for all-reduce)
    group: Group
    group_size: int
    overlap: str = ""
    chunks: int = 1
    host_sync: bool = False  # the host waits for the GPU before issuing it (a D2H copy of split sizes)

    @property
    def kernels(self) -> int:
        return 1

    @property
    def flops(self) -> float:
        return 0.0


ComputeOp = Union[Gemm, MemoryOp, FlashAttention]
Op = Union[Gemm, MemoryOp, FlashAttention, Collective]


def is_weight_grad(op: Op) -> bool:
    """A W pass op: a weight-gradient GEMM (``<name>.wgrad``, graph.builder) or the embedding's gradient
    accumulation."""
    return op.name.endswith(".wgrad") and isinstance(op, Gemm) or op.name == "embedding.grad"
