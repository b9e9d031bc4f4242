"""Enumerations shared by the config schema and the simulator."""
from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """A string enum that OmegaConf accepts (subclass of ``Enum``) and compares to ``str``."""

    def __str__(self) -> str:  # pragma: no cover - trivial
        return str(self.value)


class Schedule(StrEnum):
    ONE_F_ONE_B = "1f1b"
    GPIPE = "gpipe"
    INTERLEAVED = "interleaved"
    ZERO_BUBBLE = "zero_bubble"  # ZB-H1 (Qi et al. 2024): 1F1B with the weight-gradient passes delayed
    ZBV = "zbv"  # ZB-V (Qi et al. 2024): two chunks per stage in a V, B/W split
    DUALPIPE = "dualpipe"  # DeepSeek-V3 report: two directions, overlapped forward & backward chunks
    DUALPIPEV = "dualpipev"  # DualPipe cut in half: V-shape, one model copy


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class Precision(StrEnum):
    FP16 = "fp16"
    BF16 = "bf16"
    FP32 = "fp32"


class NormType(StrEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class PositionEmbedding(StrEnum):
    LEARNED = "learned"
    ROPE = "rope"


class CostModelKind(StrEnum):
    ANALYTICAL = "analytical"
    PROFILE = "profile"
    AUTO = "auto"


class AttentionKind(StrEnum):
    MHA = "mha"  # multi-head: num_kv_heads = num_heads
    GQA = "gqa"  # grouped-query: num_kv_heads key/value heads (mha when they equal num_heads)
    MLA = "mla"  # multi-head latent attention (DeepSeek-V2/V3): low-rank compressed q and kv


class MoeRouter(StrEnum):
    SOFTMAX = "softmax"  # top-k of softmax scores (Mixtral, Qwen3)
    SIGMOID = "sigmoid"  # top-k of sigmoid scores with a bias for auxiliary-loss-free balancing (DeepSeek-V3)


class MoeDispatcher(StrEnum):
    ALLTOALL = "alltoall"  # NCCL all-to-all dispatch and combine around permute/unpermute kernels
    ALLGATHER = "allgather"  # all-gather every token over the EP group, reduce-scatter the outputs
    DEEPEP = "deepep"  # DeepEP-style fused permute + NVLink/RDMA all-to-all kernels holding SMs
