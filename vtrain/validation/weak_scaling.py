"""Compare predicted throughput with the published Megatron-LM weak-scaling table (Narayanan et al.,
SC'21, Table 1: GPT 1.7B–1T on 32–3,072 A100-80GB, TFLOP/s per GPU counted with their Eq. 3).

The table leaves the run configuration unstated; the authors' reproduction script
(NVIDIA/Megatron-LM examples/sc21/run_table_1.sh, vtrain/data/megatron_2021_weak_scaling_runs.csv) states,
per row, the micro-batch size, the layers per virtual pipeline stage (the interleaved schedule's chunks;
none: plain 1F1B) and the data-parallel implementation: PyTorch's DDP (``torch``: bucketed all-reduce of
25 MiB during the backward pass of the last micro-batch, Megatron's no_sync before it) for 1.7B–18.4B,
Megatron's own (``local``: one all-reduce after the backward pass) beyond. Common to all rows (its
CONFIG.sh): fp16, sequence 2,048, full activation recompute (their FLOP count includes it); no sequence
parallelism or distributed optimizer (both post-date the paper); vocabulary 51,200; DGX A100 nodes with
8 x 200 Gb/s HDR InfiniBand (a100x3360).

A table without the run-config file (another GPU's copy, a user's table) falls back to assumptions:
micro-batch 1 with pipelining (else the largest of 8/4/2/1 that divides the per-replica batch and fits),
2 chunks where layers and micro-batches allow, DP all-reduce not overlapped.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

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
    micro_batch: Optional[int] = None  # the run's, where its script states it (else assumed: module docstring)
    layers_per_virtual_stage: Optional[int] = None  # None with micro_batch stated: not interleaved
    ddp_impl: str = ""  # torch | local ("": unstated, not overlapped)


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


RUNS_SUFFIX = "_runs.csv"  # megatron_2021_weak_scaling.csv -> megatron_2021_weak_scaling_runs.csv


def _run_configs(path: Path) -> Dict[str, Dict[str, str]]:
    """The run configuration per model, from the file beside the table (empty when there is none)."""
    runs = path.with_name(path.stem + RUNS_SUFFIX)
    if not runs.is_file():
        return {}
    with runs.open(newline="", encoding="utf-8-sig") as fh:
        return {r["model"]: r for r in csv.DictReader(fh)}


def read_weak_scaling(path: Path) -> List[WeakScalingRow]:
    runs = _run_configs(path)
    out = []
    with path.open(newline="", encoding="utf-8-sig") as fh:
        for r in csv.DictReader(fh):
            run = runs.get(r["model"], {})
            out.append(WeakScalingRow(
                r["model"], int(r["layers"]), int(r["hidden"]), int(r["heads"]), int(r["vocab"]), int(r["seq_len"]),
                int(r["num_gpus"]), int(r["tp"]), int(r["pp"]), int(r["global_batch_seqs"]),
                float(r["tflops_per_gpu"]), int(run["micro_batch"]) if run.get("micro_batch") else None,
                int(run["layers_per_virtual_stage"]) if run.get("layers_per_virtual_stage") else None,
                run.get("ddp_impl", "")))
    return out


# What the table leaves unsaid (see the module docstring); Megatron-LM pads the vocabulary to 128 x t.
WEAK_SCALING_DEFAULTS = RowDefaults(
    model={**RowDefaults().model, "vocab_divisible_by": 128},
    plan={**RowDefaults().plan, "recompute": Recompute.FULL, "precision": Precision.FP16,
          "overlap_grad_reduce": False, "flash_attention": False},
    stack="megatron_lm_2021")


def measured_row(row: WeakScalingRow, index: int, micro_batch: Optional[int] = None) -> MeasuredRow:
    """The table row in the measured-row schema, with the run configuration its script states (else the
    assumptions of the module docstring)."""
    dp = row.num_gpus // (row.tp * row.pp)
    per_replica = row.global_batch // dp
    stated = micro_batch is None and row.micro_batch is not None
    if micro_batch is None:
        micro_batch = row.micro_batch
    if micro_batch is None:
        micro_batch = 1 if row.pp > 1 else next(b for b in (8, 4, 2, 1) if per_replica % b == 0)
    values: Dict[str, Any] = {
        "name": row.model, "num_layers": row.layers, "hidden_size": row.hidden, "num_heads": row.heads,
        "vocab_size": row.vocab, "seq_len": row.seq_len, "num_gpus": row.num_gpus, "tp": row.tp, "pp": row.pp,
        "dp": dp, "micro_batch": micro_batch, "global_batch": row.global_batch}
    if stated and row.layers_per_virtual_stage:  # the interleaved chunks follow from it (rows.row_workload)
        values["layers_per_virtual_stage"] = row.layers_per_virtual_stage
    else:
        m = per_replica // micro_batch
        chunks = 2 if not stated and row.pp > 1 and row.layers % (2 * row.pp) == 0 and m % row.pp == 0 else 1
        values.update(schedule="interleaved" if chunks > 1 else "1f1b", virtual_stages=chunks)
    if row.ddp_impl:
        values["ddp_impl"] = row.ddp_impl  # rows.DDP_IMPLS: torch overlaps in 25 MiB buckets, local does not
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
    # an assumed micro-batch (none stated) that does not fit: the largest that does
    if not report.fits and row.micro_batch is None and row.pp == 1 and w.plan.micro_batch_size > 1:
        for mb in (4, 2, 1):
            if mb < w.plan.micro_batch_size and (row.global_batch // w.plan.dp) % mb == 0:
                w = row_workload(row, cluster_cfg, micro_batch=mb, stack=stack)
                report, _ = simulate_workload(w, AnalyticalCostModel(w))
                if report.fits:
                    break
    flops = megatron_flops_per_iteration(row.global_batch, row.seq_len, row.layers, row.hidden, row.vocab, True)
    tflops = flops / (report.iteration_time_s * row.num_gpus) / 1e12
    return WeakScalingResult(row, w.plan.micro_batch_size, w.plan.chunks, report.iteration_time_s, tflops, report.fits)
