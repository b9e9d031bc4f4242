"""Model specification: shapes, parameter counts and FLOP counts of a decoder-only transformer.

Formulas:
- parameters: Narayanan et al. (SC'21), Sec. 5.1: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)) for
  GPT (LayerNorm + biases, learned positions, tied embeddings); generalised here to GQA, SwiGLU,
  RMSNorm and untied output layers by counting each matrix.
- FLOPs per iteration: Narayanan et al. (SC'21), Eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) with
  full recompute; without recompute the factor 96 -> 72 on the transformer part (the logit layer is
  never recomputed: 6 B s h V).
"""
from __future__ import annotations

from dataclasses import dataclass

from vtrain.workload.enums import NormType, PositionEmbedding
from vtrain.workload.fields import NON_NEGATIVE_INT, POSITIVE_INT, PROBABILITY, spec


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    name: str = spec(doc="model/ config name")
    num_layers: int = spec(domain=POSITIVE_INT, doc="transformer layers")
    hidden_size: int = spec(domain=POSITIVE_INT, doc="model width h")
    num_heads: int = spec(domain=POSITIVE_INT, doc="attention (query) heads")
    num_kv_heads: int = spec(domain=POSITIVE_INT, none_means="num_heads (multi-head attention)",
                             doc="key/value heads (GQA)")
    ffn_hidden_size: int = spec(domain=POSITIVE_INT, none_means="4 * hidden_size", doc="MLP width")
    gated_mlp: bool = spec(False, doc="SwiGLU: three FFN matrices instead of two")
    norm: NormType = spec(NormType.LAYERNORM, doc="layernorm | rmsnorm")
    position_embedding: PositionEmbedding = spec(PositionEmbedding.LEARNED, doc="learned | rope")
    use_bias: bool = spec(True, doc="biases in the linear layers")
    dropout: float = spec(0.1, domain=PROBABILITY, doc="hidden and attention dropout (0: no dropout kernels)")
    vocab_size: int = spec(50257, domain=POSITIVE_INT, doc="vocabulary")
    # Megatron-LM pads the vocabulary to a multiple of make_vocab_size_divisible_by (default 128) times
    # the TP degree, so every rank's shard fills aligned tensor-core tiles (Megatron-LM,
    # _vocab_size_with_padding). 0: no padding, each rank holds vocab_size // tp rows (the sharded model
    # of vTrain's measurements, VIA-Research/vTrain ShardedGptModel); the shard's alignment then sets the
    # logits GEMM's efficiency (cost.analytical).
    vocab_divisible_by: int = spec(128, domain=NON_NEGATIVE_INT,
                                   doc="pad the vocabulary to a multiple of this x tp (0: no padding)")
    tied_embeddings: bool = spec(True, doc="output layer shares the word-embedding matrix")
    max_seq_len: int = spec(2048, domain=POSITIVE_INT, doc="longest sequence (learned position table size)")

    def vocab_shard(self, tp: int) -> int:
        """Vocabulary rows held by one TP rank (see ``vocab_divisible_by``)."""
        if self.vocab_divisible_by == 0:
            return max(1, self.vocab_size // tp)
        multiple = self.vocab_divisible_by * tp
        return -(-self.vocab_size // multiple) * multiple // tp

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_size(self) -> int:
        """Width of the K (or V) projection: kv_heads * head_dim."""
        return self.num_kv_heads * self.head_dim

    # ---------------------------------------------------------------- parameters
    def attention_params(self) -> int:
        h = self.hidden_size
        qkv = h * (h + 2 * self.kv_size) + (h + 2 * self.kv_size if self.use_bias else 0)
        proj = h * h + (h if self.use_bias else 0)
        return qkv + proj

    def mlp_params(self) -> int:
        h, f = self.hidden_size, self.ffn_hidden_size
        if self.gated_mlp:
            return 3 * h * f + ((2 * f + h) if self.use_bias else 0)
        return 2 * h * f + ((f + h) if self.use_bias else 0)

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

    def total_params(self) -> int:
        return self.num_layers * self.layer_params() + self.embedding_params() + self.output_params()

    # ---------------------------------------------------------------- FLOPs
    def layer_matmul_params(self) -> int:
        """Weights that take part in a matrix multiply (biases and norms excluded)."""
        h = self.hidden_size
        attn = h * (h + 2 * self.kv_size) + h * h
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn_hidden_size
        return attn + mlp

    def forward_flops_per_sequence(self, seq_len: int) -> float:
        """Forward FLOPs of one sequence: 2 FLOPs per multiply-add of every GEMM.

        Attention scores and context: 2 * 2 * s^2 * h per layer (no causal discount, as Megatron counts).
        """
        s, h = seq_len, self.hidden_size
        layers = self.num_layers * (2 * s * self.layer_matmul_params() + 4 * s * s * h)
        logits = 2 * s * h * self.vocab_size
        return float(layers + logits)

    def model_flops_per_iteration(self, global_batch: int, seq_len: int) -> float:
        """Model FLOPs of one training iteration (forward + backward = 3x forward, no recompute)."""
        return 3.0 * global_batch * self.forward_flops_per_sequence(seq_len)

    def hardware_flops_per_iteration(self, global_batch: int, seq_len: int, recompute: str) -> float:
        """FLOPs the hardware executes, including the recompute forward pass.

        full: one extra forward of every layer (Narayanan et al. SC'21, Eq. 3); selective: the
        attention-score and context GEMMs again (Korthikanti et al. 2022, Sec. 5).
        """
        s, h = seq_len, self.hidden_size
        base = self.model_flops_per_iteration(global_batch, seq_len)
        if recompute == "full":
            per_seq = self.num_layers * (2 * s * self.layer_matmul_params() + 4 * s * s * h)
            return base + global_batch * per_seq
        if recompute == "selective":
            return base + global_batch * self.num_layers * 4 * s * s * h
        if recompute == "selective_op":  # every second matmul again (see graph.builder._every_second_matmul)
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
