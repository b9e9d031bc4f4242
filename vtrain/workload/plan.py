"""A parallelization plan: how one model is spread over GPUs and how its batch is cut."""
from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Dict

from vtrain.workload.enums import Precision, Recompute, Schedule


@dataclass(frozen=True, slots=True)
class ParallelPlan:
    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    global_batch_size: int
    seq_len: int
    schedule: Schedule = Schedule.ONE_F_ONE_B
    virtual_stages: int = 1
    recompute: Recompute = Recompute.NONE
    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    overlap_grad_reduce: bool = True
    grad_bucket_bytes: int = 40 * 2**20
    precision: Precision = Precision.BF16
    flash_attention: bool = False

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per replica per iteration; with pp=1 this is gradient accumulation."""
        return self.global_batch_size // (self.dp * self.micro_batch_size)

    @property
    def chunks(self) -> int:
        """Model chunks per pipeline stage (virtual stages of the interleaved schedule)."""
        return self.virtual_stages if self.schedule == Schedule.INTERLEAVED else 1

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
