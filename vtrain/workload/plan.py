"""A parallelization plan: how one model is spread over GPUs and how its batch is cut."""
from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Dict

from vtrain.workload.enums import MoeDispatcher, Precision, Recompute, Schedule
from vtrain.workload.fields import NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, spec

PAR, TRAIN = "parallelism", "training"  # the config groups that hold a plan's fields
_TWO_CHUNKS = frozenset((Schedule.ZBV, Schedule.DUALPIPEV, Schedule.DUALPIPE))  # V-shaped / two directions
_INTERLEAVED = Schedule.INTERLEAVED


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelPlan:
    """The plan's fields live in two config groups: ``parallelism/`` (how the model is split) and
    ``training/`` (the batch, sequence, precision and length of the run)."""

    tp: int = spec(1, group=PAR, domain=POSITIVE_INT, doc="tensor-parallel degree")
    pp: int = spec(1, group=PAR, domain=POSITIVE_INT, doc="pipeline-parallel degree")
    dp: int = spec(0, group=PAR, domain=NON_NEGATIVE_INT,
                   doc="data-parallel degree (config: 0 derives it as cluster GPUs // (tp * pp))")
    micro_batch_size: int = spec(1, group=PAR, domain=POSITIVE_INT, doc="sequences per micro-batch")
    schedule: Schedule = spec(Schedule.ONE_F_ONE_B, group=PAR, doc="pipeline schedule")
    virtual_stages: int = spec(1, group=PAR, domain=POSITIVE_INT,
                               doc="model chunks per stage of the interleaved schedule")
    recompute: Recompute = spec(Recompute.NONE, group=PAR, doc="activation recomputation")
    sequence_parallel: bool = spec(False, group=PAR, doc="Megatron sequence parallelism (needs tp > 1)")
    distributed_optimizer: bool = spec(False, group=PAR, doc="ZeRO-1: optimizer states sharded over dp")
    overlap_grad_reduce: bool = spec(True, group=PAR,
                                     doc="bucketed DP gradient reduction overlapped with the backward pass")
    grad_bucket_mib: float = spec(40.0, group=PAR, unit="MiB", domain=POSITIVE, doc="DP gradient bucket size")
    # --- mixture of experts (Megatron-Core: EP groups carved out of the tp*dp*cp ranks of a stage)
    ep: int = spec(1, group=PAR, domain=POSITIVE_INT, doc="expert-parallel degree (experts split over ep ranks)")
    etp: int = spec(0, group=PAR, domain=NON_NEGATIVE_INT, doc="expert tensor-parallel degree (0: tp)")
    moe_dispatcher: MoeDispatcher = spec(MoeDispatcher.ALLTOALL, group=PAR, doc="alltoall | allgather | deepep")
    overlap_moe_comm: bool = spec(False, group=PAR, doc="steady forward/backward pairs run fused so each hides "
                                  "the other's EP all-to-alls (Megatron-Core --overlap-moe-expert-parallel-comm)")
    recompute_modules: str = spec("core_attn", group=PAR, doc="with recompute=selective: comma-separated "
                                  "core_attn, layernorm, moe_act, moe, mlp, shared_experts, mla_up_proj")
    account_for_embedding_in_pipeline_split: bool = spec(False, group=PAR, doc="the embedding counts as a layer "
                                                         "when layers are split over pipeline positions")
    account_for_loss_in_pipeline_split: bool = spec(False, group=PAR, doc="the output layer and loss count as "
                                                    "a layer when layers are split over pipeline positions")
    global_batch_size: int = spec(1536, group=TRAIN, domain=POSITIVE_INT, doc="sequences per iteration")
    seq_len: int = spec(2048, group=TRAIN, domain=POSITIVE_INT, doc="tokens per sequence")
    precision: Precision = spec(Precision.BF16, group=TRAIN, doc="GEMM and activation precision")
    optimizer: str = spec("adam", group=TRAIN, doc="Adam with fp32 master weights")
    flash_attention: bool = spec(True, group=TRAIN, doc="fused attention kernel (no s^2 score tensors in HBM)")
    tokens_to_train: float = spec(300e9, group=TRAIN, unit="tokens", domain=POSITIVE,
                                  doc="tokens of the whole training run (time and cost to train)")

    @property
    def grad_bucket_bytes(self) -> float:
        return self.grad_bucket_mib * 2**20

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per replica per iteration; with pp=1 this is gradient accumulation."""
        return self.global_batch_size // (self.dp * self.micro_batch_size)

    @property
    def chunks(self) -> int:
        """Model chunks per pipeline stage (virtual stages of the interleaved schedule; 2 for the V-shaped
        schedules; DualPipe's two directions)."""
        if self.schedule in _TWO_CHUNKS:
            return 2
        return self.virtual_stages if self.schedule is _INTERLEAVED else 1

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel degree: the stage's tp*dp*cp ranks over etp*ep (Megatron-Core's EDP)."""
        return max(1, self.tp * self.dp * int(getattr(self, "cp", 1)) // (self.expert_tp * self.ep))

    @property
    def dtype_bytes(self) -> int:
        return 4 if self.precision == Precision.FP32 else 2

    def as_dict(self) -> Dict[str, Any]:
        """Plain values (enums as their strings), with the derived micro-batch count: JSON, CSV, labels."""
        out: Dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for k, v in out.items():
            if isinstance(v, Enum):
                out[k] = v.value
        out["virtual_stages"] = self.chunks
        out["num_microbatches"] = self.num_microbatches
        return out
