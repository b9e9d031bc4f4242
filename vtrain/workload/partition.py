"""How the model's layers and parameters are split over pipeline stages and model chunks.

Pipeline position q = c·p + s holds model chunk c of stage s (Megatron's interleaved order: chunk c
of every stage before chunk c+1); the V-shaped schedules place chunk 1 of stage s at 2p-1-s, DualPipe's
second direction runs the positions p..2p-1 from stage p-1 back to stage 0 (:func:`vtrain.sim.schedule.
layout`). The first position of a chain also holds the embedding, its last the final norm, the MTP modules
and the output layer. Parameters per GPU follow Megatron's tensor parallelism: QKV/projection/MLP
matrices (and their biases) split over t ranks, norms replicated, the word embedding vocab-parallel; routed
experts split over ep ranks and their matrices over etp; MLA's down-projections replicated.

Layers per position: :func:`layer_split` (even, the remainder spread from the first position, explicit
first/last stage counts, the embedding and the loss counted as layers, or Megatron-Core's explicit
``pipeline_layout``). Which layers have experts
follows :meth:`ModelSpec.is_moe_layer` over the global order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Tuple

from vtrain.workload.chunks import layout
from vtrain.workload.enums import Schedule
from vtrain.workload.model import ModelSpec
from vtrain.workload.pipeline_layout import parse_layout
from vtrain.workload.plan import ParallelPlan

_MEGATRON_ORDER = frozenset((Schedule.ONE_F_ONE_B, Schedule.GPIPE, Schedule.INTERLEAVED))  # q = c·p + s, one chain


@dataclass(frozen=True, slots=True)
class StagePartition:
    p: int
    v: int
    layers: Tuple[int, ...]  # transformer layers per pipeline position q = c·p + s
    layer_params: float  # parameters of one (dense) transformer layer per GPU
    embedding_params: float  # word (vocab shard) + position embedding per GPU, on position 0
    head_params: float  # final norm + output matrix (when untied, or tied with pp > 1) on the last position
    word_embedding_params: float  # the vocab-shard word embedding per GPU (tied-embedding sync size)
    tied: bool  # the output layer shares the word embedding
    # --- mixture of experts, MTP and the schedule's layout (defaults: a dense model in Megatron's order)
    moe_layers: Tuple[int, ...] = ()  # of ``layers``, those with experts, per position (empty: none)
    moe_layer_params: float = 0.0  # parameters of one MoE layer per GPU (experts / (ep·etp))
    expert_layer_params: float = 0.0  # of those, the routed experts' (gradients reduced over edp)
    mtp_layers: int = 0  # MTP modules on the last position of each chain
    mtp_params: float = 0.0  # their parameters per GPU (their layers included)
    mtp_expert_params: float = 0.0  # of those, routed experts'
    pos: Tuple[Tuple[int, ...], ...] = ()  # position[stage][chunk] (empty: c·p + s)
    chain: int = 0  # positions per chain (0: all p·v)
    # per stage, computed once (every stage-level pass of the simulator reads them)
    _stage_layers: Tuple[int, ...] = field(init=False, repr=False, compare=False)
    _stage_params: Tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rows = [self.pos[s] if self.pos else tuple(c * self.p + s for c in range(self.v)) for s in range(self.p)]
        object.__setattr__(self, "_stage_layers", tuple(sum(self.layers[q] for q in row) for row in rows))
        object.__setattr__(self, "_stage_params", tuple(sum(self.position_params(q) for q in row) for row in rows))

    @property
    def positions(self) -> int:
        return self.p * self.v

    @property
    def chain_len(self) -> int:
        return self.chain or self.positions

    def position(self, stage: int, chunk: int) -> int:
        return self.pos[stage][chunk] if self.pos else chunk * self.p + stage

    def stage_of(self, q: int) -> int:
        if not self.pos:
            return q % self.p
        return next(s for s in range(self.p) if q in self.pos[s])

    def is_first(self, q: int) -> bool:
        return q % (self.chain or self.p * self.v) == 0

    def is_last(self, q: int) -> bool:
        chain = self.chain or self.p * self.v
        return q % chain == chain - 1

    def moe_at(self, q: int) -> int:
        return self.moe_layers[q] if self.moe_layers else 0

    def position_params(self, q: int) -> float:
        """Parameters per GPU of pipeline position ``q``."""
        if self.moe_layers:
            n_moe = self.moe_layers[q]
            n = (self.layers[q] - n_moe) * self.layer_params + n_moe * self.moe_layer_params
        else:
            n = self.layers[q] * self.layer_params
        chain = self.chain or self.p * self.v
        if q % chain == 0:
            n += self.embedding_params
        if q % chain == chain - 1:
            n += self.head_params + self.mtp_params
        return n

    def position_expert_params(self, q: int) -> float:
        """Of :meth:`position_params`, the routed experts' (reduced over the expert data-parallel group)."""
        return self.moe_at(q) * self.expert_layer_params + (self.mtp_expert_params if self.is_last(q) else 0.0)

    def chunk_params(self, stage: int, chunk: int) -> float:
        """Parameters per GPU of model chunk ``chunk`` on pipeline stage ``stage``."""
        return self.position_params(self.position(stage, chunk))

    def chunk_expert_params(self, stage: int, chunk: int) -> float:
        return self.position_expert_params(self.position(stage, chunk))

    def stage_params(self, stage: int) -> float:
        return self._stage_params[stage]

    def stage_expert_params(self, stage: int) -> float:
        return sum(self.position_expert_params(self.position(stage, c)) for c in range(self.v))

    def stage_layers(self, stage: int) -> int:
        return self._stage_layers[stage]

    def chunk_layers(self, stage: int) -> Tuple[int, ...]:
        """Transformer layers of each model chunk of ``stage``."""
        return tuple(self.layers[self.position(stage, c)] for c in range(self.v))

    @property
    def tied_sync_params(self) -> float:
        """Word-embedding gradient all-reduced between the first and last stage (tied embeddings, pp > 1:
        each holds a copy; Megatron-LM's _allreduce_word_embedding_grads)."""
        split = self.stage_of(0) != self.stage_of(self.chain_len - 1)
        return self.word_embedding_params if self.tied and self.p > 1 and split else 0.0


def _attention_params_per_gpu(model: ModelSpec, t: int) -> float:
    """MLA's down-projections and their norms are replicated over TP (Megatron-Core), the rest is split."""
    if not model.is_mla:
        return model.attention_params() / t
    h = model.hidden_size
    replicated = (model.q_lora_rank * (h + 1) if model.q_lora_rank else 0) + h * (
        model.kv_lora_rank + model.qk_rope_head_dim) + model.kv_lora_rank
    return replicated + (model.attention_params() - replicated) / t


def layer_split(num_layers: int, plan: ParallelPlan, chain: int = 0) -> Tuple[int, ...]:
    """Transformer layers per pipeline position q = c·p + s (length p·v; or per position of one chain of
    ``chain`` positions for DualPipe's copies and the V shapes).

    - ``first_stage_layers`` / ``last_stage_layers`` (Megatron-Core's --decoder-first/last-pipeline-num-layers):
      those stages hold that many, the other stages split the rest evenly (over their chunks); with
      DualPipe, the first and last position of each direction's chain (the rank holding the embedding and
      the output head holds the first of one chain and the last of the other);
    - otherwise, layers that do not divide by p·v are spread one per position from the first (DeepSpeed's
      uniform partition); ``account_for_embedding`` / ``account_for_loss`` (Megatron's
      --account-for-embedding/loss-in-pipeline-split) count the embedding as one layer of the first
      position and the output layer + loss as one of the last, so those positions get one transformer
      layer less;
    - ``pipeline_layout`` (Megatron-Core's --pipeline-model-parallel-layout): the ``t`` count of each position
      (:mod:`vtrain.workload.pipeline_layout`).
    Rules (what divides what) are checked by :func:`vtrain.config.validate.check_plan`.
    """
    p, v = plan.pp, plan.chunks
    n = chain or p * v
    if plan.pipeline_layout:  # Megatron-Core's explicit layout (checked by check_pipeline_split)
        return tuple(pos.count("t") for pos in parse_layout(plan.pipeline_layout))
    if n == 1:
        return (num_layers,)
    first, last = plan.first_stage_layers, plan.last_stage_layers
    if first or last:
        stages, per_stage = (p, v) if n == p * v else (n, 1)  # a chain's positions are its stages
        counts = [0] * n
        fixed = {0: first, stages - 1: last}
        middle = [s for s in range(stages) if not fixed.get(s)]
        rest = num_layers - sum(fixed.values())
        per = rest // (len(middle) * per_stage) if middle else 0
        for s in range(stages):
            for c in range(per_stage):
                stage_total = fixed.get(s) or per * per_stage
                counts[c * stages + s] = stage_total // per_stage + (1 if c < stage_total % per_stage else 0)
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
    """Layers per position of each chain (:func:`layer_split`) and parameters per GPU (see the module doc)."""
    p, v, t = plan.pp, plan.chunks, plan.tp
    pos, chain = layout(plan.schedule, p, v)
    per_chain = layer_split(model.num_layers, plan, chain)
    layers = per_chain * (p * v // chain)
    attn = _attention_params_per_gpu(model, t)
    norms = 2 * model.norm_params()
    layer_params = attn + model.mlp_params() / t + norms
    word = float(model.vocab_shard(t) * model.hidden_size)
    emb = model.embedding_params() - model.vocab_shard(1) * model.hidden_size + word
    last_stage = next(s for s in range(p) if chain - 1 in pos[s]) if chain != p * v else (p * v - 1) % p
    tied_split = model.tied_embeddings and last_stage != 0  # the last stage holds its own copy of the matrix
    head = model.norm_params() + (word if (not model.tied_embeddings or tied_split) else 0.0)
    default = plan.schedule in _MEGATRON_ORDER
    part = StagePartition(p=p, v=v, layers=layers, layer_params=layer_params, embedding_params=float(emb),
                          head_params=float(head), word_embedding_params=word, tied=model.tied_embeddings,
                          pos=() if default else pos, chain=0 if default else chain)
    if not model.is_moe and not model.mtp_layers:
        return part
    from dataclasses import replace

    experts = model.num_experts * model.expert_params() / (plan.ep * plan.expert_tp)
    moe_params = attn + norms + model.router_params() + model.shared_expert_params() / t + experts
    moe_counts, start = [], 0
    for n in per_chain:
        moe_counts.append(sum(model.is_moe_layer(i) for i in range(start, start + n)))
        start += n
    mtp_layer, mtp_experts = (moe_params, experts) if model.mtp_is_moe else (layer_params, 0.0)
    mtp = model.mtp_layers * (3 * model.norm_params() + 2 * model.hidden_size ** 2 / t + mtp_layer)
    return replace(part, moe_layers=tuple(moe_counts) * (p * v // chain), moe_layer_params=moe_params,
                   expert_layer_params=experts, mtp_layers=model.mtp_layers, mtp_params=mtp,
                   mtp_expert_params=model.mtp_layers * mtp_experts)
