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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import List, Optional

from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.enums import NormType, PositionEmbedding, Precision, Recompute, Schedule
from vtrain.workload.model import ModelSpec, megatron_flops_per_iteration
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.system import ClusterSpec
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


def row_workload(row: WeakScalingRow, cluster: ClusterSpec, micro_batch: Optional[int] = None) -> Workload:
    model = ModelSpec(row.model, row.layers, row.hidden, row.heads, row.heads, 4 * row.hidden, False,
                      NormType.LAYERNORM, PositionEmbedding.LEARNED, True, 0.1, row.vocab, True, row.seq_len)
    dp = row.num_gpus // (row.tp * row.pp)
    per_replica = row.global_batch // dp
    if micro_batch is None:
        micro_batch = 1 if row.pp > 1 else next(b for b in (8, 4, 2, 1) if per_replica % b == 0)
    m = per_replica // micro_batch
    interleave = row.pp > 1 and row.layers % (2 * row.pp) == 0 and m % row.pp == 0
    plan = ParallelPlan(tp=row.tp, pp=row.pp, dp=dp, micro_batch_size=micro_batch, global_batch_size=row.global_batch,
                        seq_len=row.seq_len, schedule=Schedule.INTERLEAVED if interleave else Schedule.ONE_F_ONE_B,
                        virtual_stages=2 if interleave else 1, recompute=Recompute.FULL, precision=Precision.FP16,
                        overlap_grad_reduce=False, flash_attention=False)
    nodes = -(-row.num_gpus // cluster.gpus_per_node)
    return Workload(model, plan, replace(cluster, num_nodes=max(nodes, cluster.num_nodes)), 0.0, 1.0, "analytical")


def weak_scaling_cluster(gpu: str | None = None) -> ClusterSpec:
    """The DGX A100 cluster of the table (``cluster/a100x3360``), optionally with another ``gpu/``."""
    from vtrain.config.build import cluster_spec, gpu_spec
    from vtrain.config.compose import load_gpu_config, load_group_config
    from vtrain.config.schema import ClusterConfig

    cfg = load_group_config("cluster", "a100x3360", ClusterConfig)
    return cluster_spec(cfg, gpu_spec(load_gpu_config(gpu or str(cfg.gpu))))


def predict(row: WeakScalingRow, cluster: ClusterSpec) -> WeakScalingResult:
    w = row_workload(row, cluster)
    report, _ = simulate_workload(w, AnalyticalCostModel(w.cluster, "fp16"))
    if not report.fits and row.pp == 1 and w.plan.micro_batch_size > 1:  # largest micro-batch that fits
        for mb in (4, 2, 1):
            if mb < w.plan.micro_batch_size and (row.global_batch // w.plan.dp) % mb == 0:
                w = row_workload(row, cluster, mb)
                report, _ = simulate_workload(w, AnalyticalCostModel(w.cluster, "fp16"))
                if report.fits:
                    break
    flops = megatron_flops_per_iteration(row.global_batch, row.seq_len, row.layers, row.hidden, row.vocab, True)
    tflops = flops / (report.iteration_time_s * row.num_gpus) / 1e12
    return WeakScalingResult(row, w.plan.micro_batch_size, w.plan.chunks, report.iteration_time_s, tflops, report.fits)
