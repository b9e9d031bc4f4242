"""Model specification: shapes, parameter counts and FLOP counts of a decoder-only transformer.

Formulas:
- parameters: Narayanan et al. (SC'21), Sec. 5.1: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)) for
  GPT (LayerNorm + biases, learned positions, tied embeddings); generalised here to GQA, SwiGLU,
  RMSNorm and untied output layers by counting each matrix.
- FLOPs per iteration: Narayanan et al. (SC'21), Eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) with
  full recompute; without recompute the factor 96 -> 72 on the transformer part (the logit layer is
  never recomputed: 6 B s h V).
- Mixture of experts (Shazeer et al. 2017; Fedus et al. 2022; DeepSeek-V3 report, Sec. 2.1.2): an MoE
  layer's MLP is a router (h x E), E routed experts (each an MLP of width moe_ffn_hidden_size) of which
  each token uses top-k, and shared experts every token uses. Total parameters count every expert, active
  parameters (per token) k routed + the shared ones; FLOPs follow the active parameters.
- Multi-head latent attention (DeepSeek-V2 report, Sec. 2.1): q = W_uq norm(W_dq x) (low rank
  q_lora_rank), [c_kv, k_rope] = W_dkv x (rank kv_lora_rank plus a shared RoPE key), [k_nope, v] =
  W_ukv norm(c_kv); per head qk_head_dim + qk_rope_head_dim query/key dims, v_head_dim value dims.
- Multi-token prediction (DeepSeek-V3 report, Sec. 2.2): each MTP module adds two norms, a 2h x h
  projection and one transformer layer, and shares the embedding and the output head; its logits and
  loss run again per module. Published totals exclude it (README_WEIGHTS.md of DeepSeek-V3).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from vtrain.workload import bounds as B
from vtrain.workload.enums import AttentionKind, MoeAuxLoss, MoeRouter, NormType, PositionEmbedding
from vtrain.workload.fields import spec


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    name: str = spec(doc="model/ config name")
    num_layers: int = spec(domain=B.LAYERS, doc="transformer layers")
    hidden_size: int = spec(domain=B.WIDTH, doc="model width h")
    num_heads: int = spec(domain=B.HEADS, doc="attention (query) heads")
    num_kv_heads: int = spec(domain=B.HEADS, none_means="num_heads (multi-head attention)",
                             doc="key/value heads (GQA)")
    ffn_hidden_size: int = spec(domain=B.FFN, none_means="4 * hidden_size", doc="MLP width")
    gated_mlp: bool = spec(False, doc="SwiGLU: three FFN matrices instead of two")
    norm: NormType = spec(NormType.LAYERNORM, doc="layernorm | rmsnorm")
    position_embedding: PositionEmbedding = spec(PositionEmbedding.LEARNED, doc="learned | rope | alibi | yarn")
    use_bias: bool = spec(True, doc="biases in the linear layers")
    dropout: float = spec(0.1, domain=B.PROBABILITY, doc="hidden and attention dropout (0: no dropout kernels)")
    vocab_size: int = spec(50257, domain=B.VOCAB, doc="vocabulary")
    # Megatron-LM pads the vocabulary to a multiple of make_vocab_size_divisible_by (default 128) times
    # the TP degree, so every rank's shard fills aligned tensor-core tiles (Megatron-LM,
    # _vocab_size_with_padding). 0: no padding, each rank holds vocab_size // tp rows (the sharded model
    # of vTrain's measurements, VIA-Research/vTrain ShardedGptModel); the shard's alignment then sets the
    # logits GEMM's efficiency (cost.analytical).
    vocab_divisible_by: int = spec(128, domain=B.VOCAB_MULTIPLE,
                                   doc="pad the vocabulary to a multiple of this x tp (0: no padding)")
    tied_embeddings: bool = spec(True, doc="output layer shares the word-embedding matrix")
    max_seq_len: int = spec(2048, domain=B.SEQUENCE, doc="longest sequence (learned position table size)")
    # --- attention variants
    kv_channels: int = spec(0, domain=B.HEAD_DIM, doc="per-head q/k/v dimension (0: hidden_size // "
                            "num_heads); Megatron's kv_channels, Hugging Face's head_dim")
    qk_norm: bool = spec(False, doc="RMSNorm on every query and key head (Qwen3)")
    attention: AttentionKind = spec(AttentionKind.GQA, doc="mha | gqa (num_kv_heads heads) | mla (latent)")
    q_lora_rank: int = spec(0, domain=B.LORA_RANK, doc="MLA query compression rank (0: no compression)")
    kv_lora_rank: int = spec(0, domain=B.LORA_RANK, doc="MLA key/value compression rank")
    qk_head_dim: int = spec(0, domain=B.HEAD_DIM, doc="MLA per-head query/key dims without RoPE "
                            "(Megatron's qk_head_dim, HF's qk_nope_head_dim)")
    qk_rope_head_dim: int = spec(0, domain=B.HEAD_DIM, doc="MLA per-head RoPE query/key dims (shared key)")
    v_head_dim: int = spec(0, domain=B.HEAD_DIM, doc="MLA per-head value dims")
    # gpt-oss (Megatron-Bridge GPTOSSProvider: window_size (128, 0), window_attn_skip_freq 2, softmax_type
    # "learnable"): causal sliding-window layers alternating with full ones, a learned sink logit per head
    sliding_window: int = spec(0, domain=B.WINDOW, doc="keys before a query that a sliding-window layer "
                               "attends to, besides itself (Megatron-Core's window_size[0]; 0: no window)")
    full_attention_every: int = spec(1, domain=B.LAYERS, doc="with sliding_window: every n-th layer attends "
                                     "to the whole sequence, the others to the window (Megatron-Core's "
                                     "window_attn_skip_freq; 1: every layer full)")
    attention_sinks: bool = spec(False, doc="a learned softmax sink logit per query head (gpt-oss; Megatron-Core "
                                 "softmax_type=learnable)")
    activation_clamp: float = spec(0.0, domain=B.CLAMP, doc="gated MLP inputs clamped to this value before the "
                                   "activation (gpt-oss: 7, Hugging Face's swiglu_limit, Megatron-Core's "
                                   "activation_func_clamp_value; 0: no clamp)")
    # --- mixture of experts
    num_experts: int = spec(0, domain=B.EXPERTS, doc="routed experts per MoE layer (0: a dense model)")
    moe_top_k: int = spec(2, domain=B.TOP_K, doc="routed experts per token")
    moe_ffn_hidden_size: int = spec(0, domain=B.OPTIONAL_FFN, doc="width of one expert (0: ffn_hidden_size)")
    num_shared_experts: int = spec(0, domain=B.SHARED_EXPERTS, doc="experts every token uses (DeepSeek, Llama 4)")
    shared_expert_ffn_hidden_size: int = spec(0, domain=B.OPTIONAL_FFN, doc="total width of the shared "
                                              "experts (0: num_shared_experts * moe_ffn_hidden_size)")
    moe_layer_freq: int = spec(1, domain=B.LAYERS, doc="every n-th layer after first_dense_layers is MoE")
    first_dense_layers: int = spec(0, domain=B.OPTIONAL_LAYERS, doc="leading dense layers (DeepSeek's first_k_dense)")
    moe_router: MoeRouter = spec(MoeRouter.SOFTMAX, doc="softmax | sigmoid top-k router")
    moe_aux_loss: MoeAuxLoss = spec(MoeAuxLoss.AUX, doc="the router's load-balancing loss: none | aux_loss | "
                                    "seq_aux_loss (its kernels: vtrain.graph.router)")
    capacity_factor: Optional[float] = spec(None, domain=B.CAPACITY, none_means="dropless",
                                            doc="expert capacity / mean tokens per expert (tokens padded to it)")
    moe_imbalance: float = spec(1.0, domain=B.LOAD_FACTOR, doc="routing imbalance: tokens of the busiest "
                                "expert-parallel rank / the mean (1: balanced; see docs/moe.md)")
    mtp_layers: int = spec(0, domain=B.MTP_LAYERS, doc="multi-token prediction modules (DeepSeek-V3: 1)")

    def vocab_shard(self, tp: int) -> int:
        """Vocabulary rows held by one TP rank (see ``vocab_divisible_by``)."""
        if self.vocab_divisible_by == 0:
            return max(1, self.vocab_size // tp)
        multiple = self.vocab_divisible_by * tp
        return -(-self.vocab_size // multiple) * multiple // tp

    @property
    def rotary(self) -> bool:
        """Whether queries and keys are rotated (RoPE, or YaRN's rescaled RoPE)."""
        return self.position_embedding in (PositionEmbedding.ROPE, PositionEmbedding.YARN)

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_heads

    @property
    def q_size(self) -> int:
        """Width of the query projection: heads * head_dim (= hidden_size unless kv_channels says otherwise)."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of the K (or V) projection: kv_heads * head_dim."""
        return self.num_kv_heads * self.head_dim

    @property
    def is_mla(self) -> bool:
        return self.attention == AttentionKind.MLA

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def shared_ffn(self) -> int:
        return self.shared_expert_ffn_hidden_size or self.num_shared_experts * self.expert_ffn

    def is_moe_layer(self, i: int) -> bool:
        """Layer ``i`` (0-based) has experts: after the first dense layers, every moe_layer_freq-th layer
        (the last of each group: Hugging Face Llama 4's interleave_moe_layer_step)."""
        f = self.moe_layer_freq
        return self.is_moe and i >= self.first_dense_layers and (i - self.first_dense_layers) % f == f - 1

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers)) if self.is_moe else 0

    @property
    def mtp_is_moe(self) -> bool:
        """An MTP module's layer has experts when the last layer has (Megatron-Core's rule)."""
        return self.is_moe_layer(self.num_layers - 1)

    @property
    def mla_qk_dim(self) -> int:
        """MLA's per-head query and key width: the non-RoPE part and the RoPE part (DeepSeek-V2 Sec. 2.1.3)."""
        return self.qk_head_dim + self.qk_rope_head_dim

    # ---------------------------------------------------------------- parameters
    def mla_matmul_params(self) -> int:
        h, n = self.hidden_size, self.num_heads
        qk = self.mla_qk_dim
        q = self.q_lora_rank * (h + n * qk) if self.q_lora_rank else h * n * qk
        kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * n * (self.qk_head_dim
                                                                                       + self.v_head_dim)
        return q + kv + n * self.v_head_dim * h

    def attention_params(self) -> int:
        h = self.hidden_size
        if self.is_mla:  # plus the norms of the compressed q and kv
            return self.mla_matmul_params() + self.q_lora_rank + self.kv_lora_rank
        qs = self.q_size
        qkv = h * (qs + 2 * self.kv_size) + (qs + 2 * self.kv_size if self.use_bias else 0)
        proj = qs * h + (h if self.use_bias else 0)
        sinks = self.num_heads if self.attention_sinks else 0
        return qkv + proj + (2 * self.head_dim if self.qk_norm else 0) + sinks

    def mlp_params(self, ffn: int = 0) -> int:
        """One MLP of width ``ffn`` (0: the dense ffn_hidden_size): FC1 (gate and up with SwiGLU), FC2."""
        h, f = self.hidden_size, ffn or self.ffn_hidden_size
        if self.gated_mlp:
            return 3 * h * f + ((2 * f + h) if self.use_bias else 0)
        return 2 * h * f + ((f + h) if self.use_bias else 0)

    def router_params(self) -> int:
        """The router's h x E matrix, plus a score bias (sigmoid routers: DeepSeek's e_score_correction_bias)."""
        e = self.num_experts
        return self.hidden_size * e + (e if self.use_bias or self.moe_router == MoeRouter.SIGMOID else 0)

    def expert_params(self) -> int:
        """One routed expert."""
        return self.mlp_params(self.expert_ffn)

    def shared_expert_params(self) -> int:
        return self.mlp_params(self.shared_ffn) if self.shared_ffn else 0

    def moe_mlp_params(self, active: bool = False) -> int:
        """The MoE branch of one layer: router, routed experts (all, or the top-k of one token), shared."""
        routed = (self.moe_top_k if active else self.num_experts) * self.expert_params()
        return self.router_params() + routed + self.shared_expert_params()

    def moe_layer_params(self, active: bool = False) -> int:
        return self.attention_params() + self.moe_mlp_params(active) + 2 * self.norm_params()

    def mtp_params(self) -> int:
        """The MTP modules' own parameters (embedding and output head are shared): enorm, hnorm, the
        2h x h projection, one transformer layer and a final norm each."""
        h = self.hidden_size
        layer = self.moe_layer_params() if self.mtp_is_moe else self.layer_params()
        return self.mtp_layers * (3 * self.norm_params() + 2 * h * h + layer)

    def norm_params(self) -> int:
        """Parameters of one norm layer (LayerNorm has a bias, RMSNorm does not)."""
        return 2 * self.hidden_size if self.norm == NormType.LAYERNORM else self.hidden_size

    def layer_params(self) -> int:
        return self.attention_params() + self.mlp_params() + 2 * self.norm_params()

    def embedding_params(self) -> int:
        pos = self.max_seq_len * self.hidden_size if self.position_embedding == PositionEmbedding.LEARNED else 0
        return self.vocab_shard(1) * self.hidden_size + pos  # padded rows, as Megatron allocates

    def output_params(self) -> int:
        """Final norm plus the output (logit) matrix when it is not tied to the embedding."""
        out = 0 if self.tied_embeddings else self.vocab_shard(1) * self.hidden_size
        return self.norm_params() + out

    def total_params(self, mtp: bool = True) -> int:
        """Every parameter trained; ``mtp=False``: the main model, as published totals count it."""
        n_moe = self.num_moe_layers
        layers = (self.num_layers - n_moe) * self.layer_params() + n_moe * self.moe_layer_params()
        return layers + self.embedding_params() + self.output_params() + (self.mtp_params() if mtp else 0)

    def active_params(self, embedding: bool = True) -> int:
        """Parameters one token of the main model uses: every dense layer, the top-k and shared experts of
        each MoE layer, the output layer; ``embedding``: also count the input embedding table (Mistral and
        Qwen count it, DeepSeek and OpenAI do not)."""
        n_moe = self.num_moe_layers
        layers = (self.num_layers - n_moe) * self.layer_params() + n_moe * self.moe_layer_params(active=True)
        tied_head = self.vocab_shard(1) * self.hidden_size if self.tied_embeddings else 0  # the shared matrix
        return layers + self.output_params() + (self.embedding_params() if embedding else tied_head)

    # ---------------------------------------------------------------- FLOPs
    def attention_matmul_params(self) -> int:
        h = self.hidden_size
        return self.mla_matmul_params() if self.is_mla else h * (self.q_size + 2 * self.kv_size) + self.q_size * h

    def layer_matmul_params(self) -> int:
        """Weights of a dense layer that take part in a matrix multiply (biases and norms excluded)."""
        mlp = (3 if self.gated_mlp else 2) * self.hidden_size * self.ffn_hidden_size
        return self.attention_matmul_params() + mlp

    def moe_layer_matmul_params(self) -> float:
        """Weights of an MoE layer one token multiplies with: attention, router, top-k and shared experts.
        A capacity factor c < 1 drops 1 - c of the routed tokens even under balanced routing (each expert
        takes c times its mean share; GShard, Lepikhin et al. 2020, Sec. 2.2): the experts compute c of them."""
        kept = min(1.0, self.capacity_factor) if self.capacity_factor is not None else 1.0
        width = kept * self.moe_top_k * self.expert_ffn + self.shared_ffn
        return (self.attention_matmul_params() + self.hidden_size * self.num_experts
                + (3 if self.gated_mlp else 2) * self.hidden_size * width)

    def recomputed_module_flops(self, seq_len: int, modules: Iterable[str]) -> float:
        """Matmul FLOPs of one sequence's forward that Megatron-Core's selective recompute of ``modules`` runs
        again (the attention core, ``core_attn``, is counted apart): ``mlp`` the dense layers' MLPs, ``moe``
        the MoE layers' router, routed and shared experts, ``shared_experts`` the shared ones alone,
        ``mla_up_proj`` MLA's q and kv up-projections; ``layernorm`` and ``moe_act`` have no matmul."""
        s, h, names = seq_len, self.hidden_size, set(modules)
        n_moe = self.num_moe_layers
        mats = 3 if self.gated_mlp else 2
        out = 0.0
        if "mlp" in names:
            out += (self.num_layers - n_moe) * 2.0 * s * mats * h * self.ffn_hidden_size
        if "moe" in names and n_moe:
            out += n_moe * 2.0 * s * (self.moe_layer_matmul_params() - self.attention_matmul_params())
        elif "shared_experts" in names and n_moe:
            out += n_moe * 2.0 * s * mats * h * self.shared_ffn
        if "mla_up_proj" in names and self.is_mla:
            n, qk = self.num_heads, self.mla_qk_dim
            up = self.q_lora_rank * n * qk + self.kv_lora_rank * n * (self.qk_head_dim + self.v_head_dim)
            out += self.num_layers * 2.0 * s * up
        return out

    def attention_core_flops(self, seq_len: int) -> int:
        """Scores (QK^T) and context (AV) of one sequence and layer: 2 s^2 per query/key and per value
        dimension (no causal discount, as Megatron's Eq. 3 counts)."""
        s, n = seq_len, self.num_heads
        if self.is_mla:
            return 2 * s * s * n * (self.mla_qk_dim + self.v_head_dim)
        return 4 * s * s * self.q_size

    def forward_flops_per_sequence(self, seq_len: int) -> float:
        """Forward FLOPs of one sequence: 2 FLOPs per multiply-add of every GEMM (routed experts: the top-k
        a token uses); attention scores and context per :meth:`attention_core_flops`; MTP modules add
        their projection, layer and logits."""
        s, h = seq_len, self.hidden_size
        n_moe = self.num_moe_layers
        core = self.attention_core_flops(s)
        dense_layer = 2 * s * self.layer_matmul_params() + core
        layers: float = (self.num_layers - n_moe) * dense_layer
        if n_moe:
            layers += n_moe * (2 * s * self.moe_layer_matmul_params() + core)
        logits = 2 * s * h * self.vocab_size
        if self.mtp_layers:
            mtp_layer: float = 2 * s * self.moe_layer_matmul_params() + core if self.mtp_is_moe else dense_layer
            layers += self.mtp_layers * (2 * s * 2 * h * h + mtp_layer + logits)
        return float(layers + logits)

    def model_flops_per_iteration(self, global_batch: int, seq_len: int) -> float:
        """Model FLOPs of one training iteration (forward + backward = 3x forward, no recompute)."""
        return 3.0 * global_batch * self.forward_flops_per_sequence(seq_len)

    def hardware_flops_per_iteration(self, global_batch: int, seq_len: int, recompute: str,
                                     causal_flash: bool = False) -> float:
        """FLOPs the hardware executes, including the recompute forward pass.

        full: one extra forward of every layer (Narayanan et al. SC'21, Eq. 3); selective: the
        attention-score and context GEMMs again (Korthikanti et al. 2022, Sec. 5). ``causal_flash``: the
        attention core runs as a causal fused kernel, which executes half of the s^2 blocks and recomputes the
        scores in its backward (graph.ops.FlashAttention: 0.5 x (1 + 2.5) cores per layer for forward and
        backward against the convention's 3): what the GPUs execute, below their peak; the default follows the
        convention MFU uses (Megatron's, torchtitan's: the whole score matrix), so that HFU >= MFU.
        """
        s = seq_len
        base = self.model_flops_per_iteration(global_batch, seq_len)
        n_moe = self.num_moe_layers
        core = self.attention_core_flops(s)
        # one recomputed attention core, and the core's executed share of forward + backward
        again_core, executed = (0.5 * core, 0.5 * 3.5 * core) if causal_flash else (float(core), 3.0 * core)
        base += global_batch * self.num_layers * (executed - 3.0 * core)
        if recompute == "full":
            per_seq: float = (self.num_layers - n_moe) * (2 * s * self.layer_matmul_params() + again_core)
            if n_moe:
                per_seq += n_moe * (2 * s * self.moe_layer_matmul_params() + again_core)
            return base + global_batch * per_seq
        if recompute == "selective":
            return base + global_batch * self.num_layers * again_core
        if recompute == "selective_op":  # every second matmul again (see graph.builder._every_second_matmul)
            h = self.hidden_size
            again = h * self.kv_size + h * h + h * self.ffn_hidden_size if self.gated_mlp else \
                h * h + h * self.ffn_hidden_size
            return base + global_batch * self.num_layers * 2 * s * again
        return base


def megatron_flops_per_iteration(
    batch: int, seq_len: int, layers: int, hidden: int, vocab: int, recompute: bool
) -> float:
    """Narayanan et al. (SC'21) Eq. 3 (with recompute) and its 72-factor form without it."""
    b, s, n_l, h, v = batch, seq_len, layers, hidden, vocab
    if recompute:
        return 96.0 * b * s * n_l * h * h * (1 + s / (6 * h) + v / (16 * n_l * h))
    return 72.0 * b * s * n_l * h * h * (1 + s / (6 * h) + v / (12 * n_l * h))
