"""A parallelization plan: how one model is spread over GPUs and how its batch is cut."""
from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Dict, Optional

from vtrain.workload import bounds as B
from vtrain.workload.chunks import chunks_of
from vtrain.workload.enums import CpComm, MoeDispatcher, Precision, Recompute, Schedule, parse_cuda_graph_scope
from vtrain.workload.fields import NON_NEGATIVE_INT, spec

PAR, TRAIN = "parallelism", "training"  # the config groups that hold a plan's fields


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelPlan:
    """The plan's fields live in two config groups: ``parallelism/`` (how the model is split) and
    ``training/`` (the batch, sequence, precision and length of the run)."""

    tp: int = spec(1, group=PAR, domain=B.DEGREE, doc="tensor-parallel degree")
    pp: int = spec(1, group=PAR, domain=B.DEGREE, doc="pipeline-parallel degree")
    dp: int = spec(0, group=PAR, domain=B.OPTIONAL_DEGREE,
                   doc="data-parallel degree (config: 0 derives it as cluster GPUs // (tp * cp * pp))")
    micro_batch_size: int = spec(1, group=PAR, domain=B.MICRO_BATCH, doc="sequences per micro-batch")
    schedule: Schedule = spec(Schedule.ONE_F_ONE_B, group=PAR, doc="pipeline schedule")
    virtual_stages: int = spec(1, group=PAR, domain=B.CHUNKS,
                               doc="model chunks per stage of the interleaved schedule")
    recompute: Recompute = spec(Recompute.NONE, group=PAR, doc="activation recomputation")
    sequence_parallel: bool = spec(False, group=PAR, doc="Megatron sequence parallelism (needs tp > 1)")
    distributed_optimizer: bool = spec(False, group=PAR,
                                       doc="Megatron's distributed optimizer = zero_stage 1 (kept for configs)")
    zero_stage: int = spec(0, group=PAR, domain=B.ZERO_STAGE,
                           doc="0: replicated; 1: optimizer states, 2: + gradients, 3: + parameters (FSDP) "
                               "sharded over the data-parallel group")
    fsdp_shard_size: int = spec(0, group=PAR, domain=B.OPTIONAL_DEGREE,
                                doc="hybrid sharding: shard within groups of this many DP ranks, replicate "
                                    "across them (0: the whole DP group)")
    reshard_after_forward: bool = spec(True, group=PAR,
                                       doc="ZeRO-3: free the gathered parameters after forward (gather again "
                                           "for backward)")
    overlap_param_gather: bool = spec(False, group=PAR,
                                      doc="ZeRO-1/2: the parameter all-gather overlaps the next forward "
                                          "(Megatron --overlap-param-gather)")
    cp: int = spec(1, group=PAR, domain=B.DEGREE, doc="context-parallel degree (sequence split)")
    cp_comm: CpComm = spec(CpComm.P2P, group=PAR, doc="context-parallel attention: p2p (ring, KV exchange "
                                                      "overlapped) | allgather (KV gathered before attention) | "
                                                      "a2a (all-to-all of Q, K, V and the output, heads split)")
    first_stage_layers: int = spec(0, group=PAR, domain=B.OPTIONAL_LAYERS,
                                   doc="layers of the first pipeline stage (0: even split)")
    last_stage_layers: int = spec(0, group=PAR, domain=B.OPTIONAL_LAYERS,
                                  doc="layers of the last pipeline stage (0: even split)")
    account_for_embedding: bool = spec(False, group=PAR,
                                       doc="the embedding counts as one layer of the first stage in the split")
    account_for_loss: bool = spec(False, group=PAR,
                                  doc="the output layer and loss count as one layer of the last stage")
    pipeline_layout: str = spec("", group=PAR, doc="layers per pipeline position in Megatron-Core's "
                                "--pipeline-model-parallel-layout syntax, e.g. 'Et*3|(tt|)*29,m|L' (E embedding, "
                                "t layer, m MTP, L loss, | next position, q = chunk*pp + stage; empty: even split)")
    microbatch_group_size_per_vp_stage: int = spec(
        0, group=PAR, domain=NON_NEGATIVE_INT,
        doc="interleaved 1F1B: micro-batches run per model chunk before the next chunk (Megatron-Core "
            "--microbatch-group-size-per-virtual-pipeline-stage; 0: pp, its default)")
    tp_comm_overlap: bool = spec(False, group=PAR,
                                 doc="TP all-gather/reduce-scatter split into chunks pipelined with their GEMMs "
                                     "(TE userbuffers, torchtitan async TP); needs sequence_parallel")
    overlap_grad_reduce: bool = spec(True, group=PAR,
                                     doc="bucketed DP gradient reduction overlapped with the backward pass")
    grad_bucket_mib: Optional[float] = spec(
        None, group=PAR, unit="MiB", domain=B.BUCKET_MIB,
        none_means="Megatron-Core's default: max(4e7, 1e6 x dp x cp) parameters' gradients per bucket "
                   "(distributed_data_parallel.py), one bucket when the reduction is not overlapped",
        doc="DP gradient bucket size (NCCL buckets below 100 KiB are latency, not a plan)")
    # --- mixture of experts (Megatron-Core: EP groups carved out of the tp*dp*cp ranks of a stage)
    ep: int = spec(1, group=PAR, domain=B.DEGREE, doc="expert-parallel degree (experts split over ep ranks)")
    etp: int = spec(0, group=PAR, domain=B.OPTIONAL_DEGREE, doc="expert tensor-parallel degree (0: tp)")
    moe_dispatcher: MoeDispatcher = spec(MoeDispatcher.ALLTOALL, group=PAR,
                                         doc="alltoall | allgather | deepep | hybridep")
    overlap_moe_comm: bool = spec(False, group=PAR, doc="steady forward/backward pairs run fused so each hides "
                                  "the other's EP all-to-alls (Megatron-Core --overlap-moe-expert-parallel-comm)")
    recompute_modules: str = spec("core_attn", group=PAR, doc="with recompute=selective: comma-separated "
                                  "core_attn, layernorm, moe_act, moe, mlp, shared_experts, mla_up_proj")
    recompute_num_layers: int = spec(0, group=PAR, domain=B.OPTIONAL_LAYERS,
                                     doc="with recompute=full: the first layers of each model chunk that keep only "
                                         "their input and run again before their backward, the rest keeping all "
                                         "of their activations (Megatron's --recompute-method block "
                                         "--recompute-num-layers); 0: every layer")
    offload_layers: int = spec(0, group=PAR, domain=B.OPTIONAL_LAYERS,
                               doc="activations of the first layers copied to host memory after their forward and "
                                   "back before their backward, on one copy stream beside compute (Megatron-Core "
                                   "--cpu-offloading-num-layers with Transformer Engine's offload; pp=1, no "
                                   "recompute, as Megatron-Core requires); 0: none")
    cuda_graph_scope: str = spec("", group=TRAIN, doc="parts replayed from CUDA graphs (one host launch each, "
                                 "no per-kernel launches), comma-separated: attn, mlp, moe, moe_router, "
                                 "moe_preprocess, full_iteration (Megatron-Core --cuda-graph-scope; empty: none)")
    global_batch_size: int = spec(1536, group=TRAIN, domain=B.BATCH, doc="sequences per iteration")
    seq_len: int = spec(2048, group=TRAIN, domain=B.SEQUENCE, doc="tokens per sequence")
    precision: Precision = spec(Precision.BF16, group=TRAIN, doc="GEMM and activation precision")
    optimizer: str = spec("adam", group=TRAIN, doc="Adam with fp32 master weights")
    fp32_grads: bool = spec(True, group=TRAIN, doc="with bf16, gradients are accumulated and reduced in fp32 "
                            "(Megatron-LM forces it for bf16; FSDP2's reduce_dtype); false: in bf16, 2 B per "
                            "parameter (NeMo's and Megatron-Bridge's performance recipes: grad_reduce_in_fp32=False)")
    optimizer_moments: str = spec("fp32", group=TRAIN, doc="dtype of Adam's m and v: fp32, or bf16 (DeepSeek-V3 "
                                  "Sec. 3.3.4; Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype "
                                  "bf16 --exp-avg-sq-dtype bf16)")
    flash_attention: bool = spec(True, group=TRAIN, doc="fused attention kernel (no s^2 score tensors in HBM)")
    fp8_attention: bool = spec(False, group=TRAIN, doc="attention in FP8 too (with a low precision)")
    # at most 1e18 tokens (~50,000x the largest published runs): beyond, days and dollars are no plan's
    tokens_to_train: float = spec(300e9, group=TRAIN, unit="tokens", domain=B.TOKENS,
                                  doc="tokens of the whole training run (time and cost to train)")

    @property
    def cuda_graph_scopes(self) -> tuple[str, ...]:
        """The scopes of ``cuda_graph_scope`` (checked by the config's validation)."""
        return parse_cuda_graph_scope(self.cuda_graph_scope)

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per replica per iteration; with pp=1 this is gradient accumulation."""
        return self.global_batch_size // (self.dp * self.micro_batch_size)

    @property
    def chunks(self) -> int:
        """Model chunks per pipeline stage (virtual stages of the interleaved schedule; 2 for the V-shaped
        schedules; DualPipe's two directions)."""
        return chunks_of(self.schedule, self.virtual_stages)

    @property
    def microbatch_group(self) -> int:
        """Micro-batches per model chunk before the next chunk of the interleaved schedule (0 in the config
        means pp, Megatron-Core's default)."""
        return self.microbatch_group_size_per_vp_stage or self.pp

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree: the stage's tp*dp*cp ranks over etp*ep (Megatron-Core's EDP)."""
        return max(1, self.tp * self.dp * self.cp // (self.expert_tp * self.ep))

    @property
    def grad_bytes(self) -> float:
        """Bytes per gradient element as DP reduces it: fp32 main gradients with bf16 (Megatron-LM accumulates
        them in fp32) unless ``fp32_grads`` is off (NeMo's performance recipes), else the dtype."""
        if self.precision == Precision.FP16:
            return 2.0
        return 4.0 if self.fp32_grads or self.precision == Precision.FP32 else 2.0

    @property
    def dtype_bytes(self) -> int:
        """Bytes per activation element (bf16 with the low-precision GEMM formats)."""
        return 4 if self.precision == Precision.FP32 else 2

    @property
    def sharding_stage(self) -> int:
        """The ZeRO stage in effect: ``zero_stage``, at least 1 with the distributed optimizer."""
        return max(self.zero_stage, 1 if self.distributed_optimizer else 0)

    @property
    def dp_shard(self) -> int:
        """Ranks the sharded states are split over: the DP group, or its hybrid-sharding subgroup."""
        return min(self.fsdp_shard_size, self.dp) if self.fsdp_shard_size else self.dp

    @property
    def tokens_per_rank(self) -> int:
        """Tokens of one micro-batch on one rank of a context-parallel group."""
        return self.micro_batch_size * self.seq_len // self.cp

    def as_dict(self) -> Dict[str, Any]:
        """Plain values (enums as their strings), with the derived micro-batch count: JSON, CSV, labels."""
        out: Dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for k, v in out.items():
            if isinstance(v, Enum):
                out[k] = v.value
        out["virtual_stages"] = self.chunks
        out["num_microbatches"] = self.num_microbatches
        return out
