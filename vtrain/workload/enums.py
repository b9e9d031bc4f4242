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
    SELECTIVE = "selective"  # Megatron: the attention core (Korthikanti et al. 2022)
    SELECTIVE_OP = "selective_op"  # torchtitan's per-op SAC: element-wise ops and every second matmul
    FULL = "full"


class Precision(StrEnum):
    """The GEMM precision of the linear layers. The low precisions keep activations, norms, softmax and
    (unless ``training.fp8_attention``) attention in bf16 and the optimizer in fp32 with master weights
    (Transformer Engine, torchao float8): only the linear layers' GEMMs run at the format's peak."""

    FP16 = "fp16"
    BF16 = "bf16"
    FP32 = "fp32"
    FP8 = "fp8"  # per-tensor scales, delayed or current (TE's default recipe, torchao tensorwise)
    FP8_ROWWISE = "fp8_rowwise"  # torchao rowwise: one scale per row
    FP8_BLOCKWISE = "fp8_blockwise"  # 1x128 activation / 128x128 weight blocks (DeepSeek-V3, TE Float8BlockScaling)
    MXFP8 = "mxfp8"  # OCP microscaling, 32-element blocks with E8M0 scales (Blackwell tensor cores)
    NVFP4 = "nvfp4"  # NVIDIA FP4, 16-element blocks with FP8 scales (Blackwell tensor cores)

    @property
    def low(self) -> bool:
        """An 8- or 4-bit GEMM format (activations stay bf16)."""
        return self.value not in ("fp16", "bf16", "fp32")

    @property
    def activation(self) -> "Precision":
        """The precision of activations, norms, softmax and attention."""
        return Precision.BF16 if self.low else self

    @property
    def peak_key(self) -> str:
        """The ``gpu.peak_tflops`` entry the GEMMs run at: per-tensor, rowwise and blockwise FP8 all run on
        the FP8 tensor cores; MXFP8 and NVFP4 need Blackwell's microscaling tensor cores."""
        return "fp8" if self.value.startswith("fp8") else self.value

    @property
    def gemm_is_aten_mm(self) -> bool:
        """Whether the linear layers' GEMM reaches the dispatcher as ``aten.mm`` (which torchtitan's per-op
        selective checkpointing saves): bf16 and torchao's float8 and MX linears multiply tensor subclasses with
        ``torch.mm``; torchao's NVFP4 linear is an autograd Function calling ``F.scaled_mm`` (``nvfp4_mm_triton``),
        an op that ``_op_sac_save_list`` does not name, so its outputs are recomputed."""
        return self is not Precision.NVFP4

    @property
    def gemm_operand_bytes(self) -> float:
        """Bytes per GEMM operand element (scales excluded)."""
        return {"fp32": 4.0, "nvfp4": 0.5}.get(self.value, 1.0 if self.low else 2.0)


class CpComm(StrEnum):
    P2P = "p2p"  # ring attention: KV blocks passed around the CP ring, overlapped with attention (Megatron-Core)
    ALLGATHER = "allgather"  # KV all-gathered before attention (Llama 3's CP)
    A2A = "a2a"  # all-to-all of Q, K, V and the output: each rank attends over the whole sequence for cp-th of the
    # heads (DeepSpeed-Ulysses; Megatron-Core's --cp-comm-type a2a)


class NormType(StrEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class PositionEmbedding(StrEnum):
    LEARNED = "learned"
    ROPE = "rope"
    ALIBI = "alibi"  # a per-head linear bias on the attention scores (Press et al. 2022): no parameters, no kernel
    # RoPE with YaRN's rescaled frequencies and attention temperature (Peng et al. 2023; gpt-oss): the same
    # rotation, which Megatron-Core applies in eager PyTorch ops (vtrain.graph.eager_paths)
    YARN = "yarn"


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


class MoeAuxLoss(StrEnum):
    """The router's load-balancing loss (Megatron-Core's moe_router_load_balancing_type with a non-zero
    moe_aux_loss_coeff): kernels of its own in every MoE layer's forward and backward (vtrain.graph.router)."""

    NONE = "none"  # no loss (coefficient 0, or balancing by expert bias alone: GPT-OSS's Megatron-Bridge recipe)
    AUX = "aux_loss"  # the micro-batch's Switch loss (Megatron-Bridge's Qwen3 recipes, coefficient 1e-3)
    SEQ = "seq_aux_loss"  # per sequence, divided by the batch (Megatron-Bridge's DeepSeek-V3, coefficient 1e-4)


class MoeDispatcher(StrEnum):
    ALLTOALL = "alltoall"  # NCCL all-to-all dispatch and combine around permute/unpermute kernels
    ALLGATHER = "allgather"  # all-gather every token over the EP group, reduce-scatter the outputs
    DEEPEP = "deepep"  # DeepEP-style fused permute + NVLink/RDMA all-to-all kernels holding SMs
    # HybridEP, the flex dispatcher's other backend: DeepEP's wire bytes with the permutations fused into its
    # dispatch and combine (Megatron-Core _HybridEPManager: dispatch_with_permute / combine_with_unpermute)
    HYBRIDEP = "hybridep"


# Megatron-Core's --recompute-modules names (graph/recompute.py says what each re-runs)
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mlp", "moe", "moe_act", "shared_experts", "mla_up_proj")


def parse_recompute_modules(spec: str) -> tuple[str, ...]:
    """The module names of a comma-separated ``recompute_modules`` (unknown names: ValueError naming them)."""
    names = tuple(x.strip() for x in spec.split(",") if x.strip())
    unknown = [n for n in names if n not in RECOMPUTE_MODULES]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} is not one of {', '.join(RECOMPUTE_MODULES)}")
    return names


# Megatron-Core's --cuda-graph-scope names (graph/cuda_graphs.py says what each captures)
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "full_iteration")


def parse_cuda_graph_scope(spec: str) -> tuple[str, ...]:
    """The scopes of a comma-separated ``cuda_graph_scope`` (unknown names: ValueError naming them)."""
    names = tuple(x.strip() for x in spec.split(",") if x.strip())
    unknown = [n for n in names if n not in CUDA_GRAPH_SCOPES]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} is not one of {', '.join(CUDA_GRAPH_SCOPES)}")
    return names
