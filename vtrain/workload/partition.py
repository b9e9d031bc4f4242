"""How the model's layers and parameters are split over pipeline stages and model chunks.

Pipeline position q = c·p + s holds model chunk c of stage s (Megatron's interleaved order: chunk c
of every stage before chunk c+1). Position 0 also holds the embedding, the last position the final norm
and output layer. Parameters per GPU follow Megatron's tensor parallelism: QKV/projection/MLP
matrices (and their biases) split over t ranks, norms replicated, the word embedding vocab-parallel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan


@dataclass(frozen=True, slots=True)
class StagePartition:
    p: int
    v: int
    layers: Tuple[int, ...]  # transformer layers per pipeline position q = c·p + s
    layer_params: float  # parameters of one transformer layer per GPU
    embedding_params: float  # word (vocab shard) + position embedding per GPU, on position 0
    head_params: float  # final norm + output matrix (when untied, or tied with pp > 1) on the last position
    word_embedding_params: float  # the vocab-shard word embedding per GPU (tied-embedding sync size)
    tied: bool  # the output layer shares the word embedding

    @property
    def positions(self) -> int:
        return self.p * self.v

    def position(self, stage: int, chunk: int) -> int:
        return chunk * self.p + stage

    def position_params(self, q: int) -> float:
        """Parameters per GPU of pipeline position ``q``."""
        n = self.layers[q] * self.layer_params
        if q == 0:
            n += self.embedding_params
        if q == self.positions - 1:
            n += self.head_params
        return n

    def chunk_params(self, stage: int, chunk: int) -> float:
        """Parameters per GPU of model chunk ``chunk`` on pipeline stage ``stage``."""
        return self.position_params(chunk * self.p + stage)

    def stage_params(self, stage: int) -> float:
        return sum(self.position_params(c * self.p + stage) for c in range(self.v))

    def stage_layers(self, stage: int) -> int:
        return sum(self.layers[c * self.p + stage] for c in range(self.v))

    @property
    def tied_sync_params(self) -> float:
        """Word-embedding gradient all-reduced between the first and last stage (tied embeddings, pp > 1:
        each holds a copy; Megatron-LM's _allreduce_word_embedding_grads)."""
        return self.word_embedding_params if self.tied and self.p > 1 else 0.0


def layer_split(num_layers: int, plan: ParallelPlan) -> Tuple[int, ...]:
    """Transformer layers per pipeline position q = c·p + s (length p·v).

    - ``first_stage_layers`` / ``last_stage_layers`` (Megatron-Core's --decoder-first/last-pipeline-num-layers):
      those stages hold that many, the other stages split the rest evenly (over their chunks);
    - otherwise, layers that do not divide by p·v are spread one per position from the first (DeepSpeed's
      uniform partition); ``account_for_embedding`` / ``account_for_loss`` (Megatron's
      --account-for-embedding/loss-in-pipeline-split) count the embedding as one layer of the first
      position and the output layer + loss as one of the last, so those positions get one transformer
      layer less.
    Rules (what divides what) are checked by :func:`vtrain.config.validate.check_plan`.
    """
    p, v = plan.pp, plan.chunks
    n = p * v
    if p == 1:
        return (num_layers,)
    first, last = plan.first_stage_layers, plan.last_stage_layers
    if first or last:
        counts = [0] * n
        fixed = {0: first, p - 1: last}
        middle = [s for s in range(p) if not fixed.get(s)]
        rest = num_layers - sum(fixed.values())
        per = rest // (len(middle) * v) if middle else 0
        for s in range(p):
            for c in range(v):
                stage_total = fixed.get(s) or per * v
                counts[c * p + s] = stage_total // v + (1 if c < stage_total % v else 0)
        return tuple(counts)
    extra = int(plan.account_for_embedding) + int(plan.account_for_loss)
    total = num_layers + extra
    base, rem = divmod(total, n)
    counts = [base + (1 if q < rem else 0) for q in range(n)]
    if plan.account_for_embedding:
        counts[0] -= 1
    if plan.account_for_loss:
        counts[-1] -= 1
    return tuple(counts)


def partition(model: ModelSpec, plan: ParallelPlan) -> StagePartition:
    """Layers per position (:func:`layer_split`) and parameters per GPU."""
    p, v, t = plan.pp, plan.chunks, plan.tp
    layer_params = (model.attention_params() + model.mlp_params()) / t + 2 * model.norm_params()
    word = float(model.vocab_shard(t) * model.hidden_size)
    emb = model.embedding_params() - model.vocab_shard(1) * model.hidden_size + word
    tied_split = model.tied_embeddings and p > 1  # the last stage holds its own copy of the tied matrix
    head = model.norm_params() + (word if (not model.tied_embeddings or tied_split) else 0.0)
    return StagePartition(p=p, v=v, layers=layer_split(model.num_layers, plan), layer_params=layer_params,
                          embedding_params=float(emb), head_params=float(head), word_embedding_params=word,
                          tied=model.tied_embeddings)
