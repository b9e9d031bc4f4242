"""Compare predicted throughput with the published Megatron-LM weak-scaling table (Narayanan et al.,
SC'21, Table 1: GPT 1.7B–1T on 32–3,072 A100-80GB, TFLOP/s per GPU counted with their Eq. 3).

What the table leaves unstated, and the assumptions made here (documented in the README):
- micro-batch size: not given. Assumed 1 with pipeline parallelism (their Fig. 14-16 sweeps favour
  small micro-batches at scale) and the largest of {8, 4, 2, 1} that divides the per-replica batch
  and fits memory without it.
- schedule: "interleaved 1F1B"; the number of model chunks is not given. Assumed 2 where the layers
  divide by 2·p and the micro-batch count by p (else non-interleaved 1F1B).
- full activation recompute (their FLOP count includes it), fp16, no sequence parallelism or
  distributed optimizer (both post-date the paper), DP all-reduce not overlapped with backward.
- vocabulary 51,200, sequence 2,048, DGX A100 nodes with 8 x 200 Gb/s HDR InfiniBand (a100x3360).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.sim.simulator import simulate_workload
from vtrain.validation import rows
from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.rows import RowDefaults
from vtrain.workload.enums import Precision, Recompute
from vtrain.workload.model import megatron_flops_per_iteration
from vtrain.workload.workload import Workload


@dataclass(frozen=True)
class WeakScalingRow:
    model: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    num_gpus: int
    tp: int
    pp: int
    global_batch: int
    published_tflops: float


@dataclass(frozen=True)
class WeakScalingResult:
    row: WeakScalingRow
    micro_batch: int
    chunks: int
    iteration_s: float
    predicted_tflops: float
    fits: bool

    @property
    def error_pct(self) -> float:
        return (self.predicted_tflops - self.row.published_tflops) / self.row.published_tflops * 100.0


def read_weak_scaling(path: Path) -> List[WeakScalingRow]:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        return [WeakScalingRow(r["model"], int(r["layers"]), int(r["hidden"]), int(r["heads"]), int(r["vocab"]),
                               int(r["seq_len"]), int(r["num_gpus"]), int(r["tp"]), int(r["pp"]),
                               int(r["global_batch_seqs"]), float(r["tflops_per_gpu"]))
                for r in csv.DictReader(fh)]


# What the table leaves unsaid (see the module docstring); Megatron-LM pads the vocabulary to 128 x t.
WEAK_SCALING_DEFAULTS = RowDefaults(
    model={**RowDefaults().model, "vocab_divisible_by": 128},
    plan={**RowDefaults().plan, "recompute": Recompute.FULL, "precision": Precision.FP16,
          "overlap_grad_reduce": False, "flash_attention": False},
    stack="megatron_deepspeed_2022")


def measured_row(row: WeakScalingRow, index: int, micro_batch: Optional[int] = None) -> MeasuredRow:
    """The table row in the measured-row schema, with the micro-batch and schedule assumed above."""
    dp = row.num_gpus // (row.tp * row.pp)
    per_replica = row.global_batch // dp
    if micro_batch is None:
        micro_batch = 1 if row.pp > 1 else next(b for b in (8, 4, 2, 1) if per_replica % b == 0)
    m = per_replica // micro_batch
    interleave = row.pp > 1 and row.layers % (2 * row.pp) == 0 and m % row.pp == 0
    values = {"name": row.model, "num_layers": row.layers, "hidden_size": row.hidden, "num_heads": row.heads,
              "vocab_size": row.vocab, "seq_len": row.seq_len, "num_gpus": row.num_gpus, "tp": row.tp,
              "pp": row.pp, "dp": dp, "micro_batch": micro_batch, "global_batch": row.global_batch,
              "schedule": "interleaved" if interleave else "1f1b", "virtual_stages": 2 if interleave else 1}
    return MeasuredRow(index, {k: str(v) for k, v in values.items()})


def row_workload(row: WeakScalingRow, cluster_cfg: Any, index: int = 0, micro_batch: Optional[int] = None,
                 stack: Optional[str] = None) -> Workload:
    from vtrain.config.compose import load_gpu_config, load_stack_config

    return rows.row_workload(measured_row(row, index, micro_batch), cluster_cfg, load_gpu_config,
                             load_stack_config, WEAK_SCALING_DEFAULTS, stack)


def weak_scaling_cluster(gpu: str | None = None) -> Any:
    """The DGX A100 cluster config of the table (``cluster/a100x3360``), optionally with another ``gpu/``."""
    from omegaconf import open_dict

    from vtrain.config.compose import load_group_config
    from vtrain.config.schema import ClusterConfig

    cfg = load_group_config("cluster", "a100x3360", ClusterConfig)
    if gpu:
        with open_dict(cfg):
            cfg.gpu = gpu
    return cfg


def predict(row: WeakScalingRow, cluster_cfg: Any, stack: Optional[str] = None) -> WeakScalingResult:
    w = row_workload(row, cluster_cfg, stack=stack)
    report, _ = simulate_workload(w, AnalyticalCostModel(w))
    if not report.fits and row.pp == 1 and w.plan.micro_batch_size > 1:  # largest micro-batch that fits
        for mb in (4, 2, 1):
            if mb < w.plan.micro_batch_size and (row.global_batch // w.plan.dp) % mb == 0:
                w = row_workload(row, cluster_cfg, micro_batch=mb, stack=stack)
                report, _ = simulate_workload(w, AnalyticalCostModel(w))
                if report.fits:
                    break
    flops = megatron_flops_per_iteration(row.global_batch, row.seq_len, row.layers, row.hidden, row.vocab, True)
    tflops = flops / (report.iteration_time_s * row.num_gpus) / 1e12
    return WeakScalingResult(row, w.plan.micro_batch_size, w.plan.chunks, report.iteration_time_s, tflops, report.fits)
