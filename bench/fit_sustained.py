"""A held-out check of the share of its benchmarked GEMM rate a GPU sustains inside a training step
(gpu.sustained_gemm_fraction, fitted end to end by ``python -m vtrain task=calibrate calibrate.scope=all`` on the
published runs of each architecture), from the one measured step decomposition we have: MLENG's Llama-3.1-8B,
8 GPUs, DeepSpeed ZeRO-2, bf16, micro-batch 1 x 8K, no checkpointing
(vtrain/data/modern_gpus/mleng_llama31_8b_deepspeed_h200_vs_b200.csv, table 8k_step_decomposition): the measured
TFLOP/s of "everything else" (all but attention) against what the benchmarked GEMM curves (bench/fit_gemm.py) and
the rest of the model predict for that part. One run of one stack per GPU: it is printed beside the calibrated
value, not written (a constant is fitted on >= 2 sources).

    python bench/fit_sustained.py            # the decomposition's fraction beside the shipped gpu/ configs

The fraction solves  measured other-time = GEMM time / f + the rest. The rest (element-wise kernels, optimizer,
exposed communication) is modelled with the eager PyTorch stack torchtitan_fsdp2, which runs the kernels that
Hugging Face's eager Llama runs under DeepSpeed: separate q/k/v and gate/up projections, the fp32-upcast loss,
fused multi-tensor Adam at its measured bandwidth (stack.optimizer_bandwidth_fraction), gradient buckets
reduced beside the backward; minus what differs: its attention factor (these runs used FlashAttention-3:
attention_kernel_efficiency 1) and its repeat_kv (flash-attn takes grouped K/V heads as they are:
attention_expands_kv false). A change to any of those kernels' model moves the fit: tests/unit/
test_sustained_fit.py prints the comparison. Other checks: the measured H200 steady/burst ratio (0.830 on one
GPU: profiles/measured/h200/sustained_gemm.csv), of which this fraction is the part a single GPU shows.
"""
from __future__ import annotations

import csv
import sys
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload, gpu_spec
from vtrain.config.compose import load_gpu_config
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import FlashAttention
from vtrain.io.args import ArgumentParser
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.partition import partition

DATA = (Path(__file__).resolve().parents[1] / "vtrain" / "data" / "modern_gpus"
        / "mleng_llama31_8b_deepspeed_h200_vs_b200.csv")


def measured_other_tflops(gpu: str) -> float:
    with DATA.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["table"] == "8k_step_decomposition" and r["gpu"].lower() == gpu and r["bucket"] == "everything else":
                return float(r["tflops_per_gpu"])
    raise SystemExit(f"no decomposition row for {gpu}")


def fit(gpu: str) -> float:
    cfg = compose(["+model=llama3_8b", "+cluster=h200x8", f"cluster.gpu={gpu}", "stack=torchtitan_fsdp2",
                   "stack.attention_kernel_efficiency=1.0",
                   "stack.attention_kernel_efficiency_by_architecture={}", "stack.attention_expands_kv=false",
                   "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
                   "parallelism.zero_stage=2", "parallelism.sequence_parallel=false", "parallelism.recompute=none",
                   "parallelism.distributed_optimizer=false", "training.seq_len=8192", "training.global_batch_size=8",
                   "parallelism.micro_batch_size=1"])
    w0 = build_workload(cfg)
    s, h, layers = w0.plan.seq_len, w0.model.hidden_size, w0.model.num_layers
    other_flops = w0.model.model_flops_per_iteration(1, s) - 3 * layers * 4 * s * s * h  # all but attention
    target_other_s = other_flops / (measured_other_tflops(gpu) * 1e12)

    def other_s(fraction: float) -> float:
        w = replace(w0, cluster=replace(w0.cluster, gpu=replace(w0.cluster.gpu, sustained_gemm_fraction=fraction)))
        cm = cost_model_for(w)
        report, _ = simulate_workload(w, cm)
        part = partition(w.model, w.plan)
        g = build_model_graph(w.model, w.plan, build_comm_plan(w, part).tp)
        att = sum(cm.compute_time_s(op) for ops in (g.layer.forward, g.layer.backward) for op in ops.ops
                  if isinstance(op, FlashAttention)) * layers
        return report.iteration_time_s - att

    lo, hi = 0.2, 1.0
    for _ in range(40):  # other time falls as the fraction grows: bisect
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if other_s(mid) > target_other_s else (lo, mid)
    return (lo + hi) / 2


FITTED = {"h200": ("h100_sxm", "h100_96gb_500w"), "b200": ("gb200", "b300")}  # each fit and its transfers


def shipped(gpu: str) -> float:
    return float(gpu_spec(load_gpu_config(gpu)).sustained_gemm_fraction)


def main(argv: Optional[List[str]] = None) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    for gpu, transfers in FITTED.items():
        f = round(fit(gpu), 3)
        print(f"{gpu}: the decomposition gives sustained_gemm_fraction = {f:.3f} (measured 'everything else' "
              f"{measured_other_tflops(gpu):.0f} TFLOP/s/GPU); shipped (one calibration) {shipped(gpu):.3f}, "
              f"{100 * (f / shipped(gpu) - 1):+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
