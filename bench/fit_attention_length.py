"""How the fused-attention rate follows the keys a query attends to (gpu.flash_attention_k0_tokens), fitted on
the one measured sequence-length sweep we have: MLENG's Llama-3.1-8B on 8 H200 (FlashAttention-3) and 8 B200
(FlashAttention-4 beta), DeepSpeed ZeRO-3, full checkpointing, micro-batch 1, 8K-256K tokens
(vtrain/data/modern_gpus/mleng_llama31_8b_deepspeed_h200_vs_b200.csv, table seqlen_sweep).

    python bench/fit_attention_length.py [--write]

Model: per query tile a kernel call does fixed work (Q in, O and its log-sum-exp out) worth k0 keys beside the
work on its keys, so its rate goes as k / (k + k0) in the mean keys k per query (causal: half the sequence),
scaled to gpu.flash_attention_efficiency at the 8K anchor (k = 4,096; vtrain/cost/analytical.py). At 256K
tokens attention is 82% of the model FLOPs, at 8K 13%, so the sweep pins how the rate grows with length.

Each row is simulated as it ran (the `deepspeed` stack, ZeRO-3, full recompute) for every k0 on a grid. The runs
also offload AdamW to the CPU, which vtrain does not model: a per-step constant C per GPU (the CPU step and its
copies, the same at every length) is fitted beside k0, in closed form, as a nuisance. The fit is on these 12
rows only. Validated on other data (README, "Hopper and Blackwell"):
- Blackwell: the one long-context Blackwell row (Megatron-Core, GB200, 128K, Transformer Engine's kernels, held
  out) goes from +33.6% to +5.3% with B200's k0; ``--write`` sets it on every Blackwell part (b200, b300,
  gb200, gb300).
- Hopper: H200's k0 (FlashAttention-3) is printed, not written. Every Hopper row of the stacks with long-context
  data says otherwise: the H100 Megatron-Core long-context rows (cuDNN kernels, one per CP step) would move
  from -4..+1% to -11..-1% and torchtitan's CP rows (SDPA's FlashAttention-2) from 18.6% to 32.6% MAPE, so
  Hopper keeps one rate until a table times those kernels over lengths.
"""
from __future__ import annotations

import csv
import datetime
import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.calibration.yaml_write import provenance_path, update_yaml
from vtrain.cli.args import ArgumentParser
from vtrain.config.build import build_workload
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "vtrain" / "data" / "modern_gpus" / "mleng_llama31_8b_deepspeed_h200_vs_b200.csv"
CONF_GPU = ROOT / "vtrain" / "conf" / "gpu"
K0_GRID = [float(k) for k in range(0, 6001, 50)]
FITTED = ("h200", "b200")
WRITTEN = {"b200": ("b200", "b300", "gb200", "gb300")}  # Hopper: printed only (module docstring)


@dataclass(frozen=True)
class SweepRow:
    gpu: str
    seq_len: int
    measured_s: float


def causal_model_flops(w: Workload) -> float:
    """The source's FLOPs per GPU and step: Megatron's count with the attention scores halved (causal)."""
    s, h, layers = w.plan.seq_len, w.model.hidden_size, w.model.num_layers
    return w.model.model_flops_per_iteration(1, s) - 3 * layers * 4 * s * s * h / 2


@functools.lru_cache(maxsize=None)
def workload(gpu: str, seq_len: int) -> Workload:
    return build_workload(compose([
        "+model=llama3_8b", "+cluster=h200x8", f"cluster.gpu={gpu}", "stack=deepspeed", "parallelism.tp=1",
        "parallelism.pp=1", "parallelism.dp=8", "parallelism.zero_stage=3", "parallelism.sequence_parallel=false",
        "parallelism.recompute=full", "parallelism.distributed_optimizer=false", f"training.seq_len={seq_len}",
        "training.global_batch_size=8", "parallelism.micro_batch_size=1"]))


def read_rows() -> List[SweepRow]:
    out = []
    with DATA.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["table"] != "seqlen_sweep":
                continue
            gpu, s = r["gpu"].lower(), int(r["seq_len_tokens"])
            out.append(SweepRow(gpu, s, causal_model_flops(workload(gpu, s)) / (float(r["tflops_per_gpu"]) * 1e12)))
    return out


def predicted_s(gpu: str, seq_len: int, k0: float) -> float:
    w = workload(gpu, seq_len)
    w = replace(w, cluster=replace(w.cluster, gpu=replace(w.cluster.gpu, flash_attention_k0_tokens=k0 or None)))
    report, _ = simulate_workload(w, cost_model_for(w))
    return report.iteration_time_s


def offload_s(measured: Sequence[float], predicted: Sequence[float]) -> float:
    """The constant C minimising sum(((C + p) / m - 1)^2): C = sum((m - p) / m^2) / sum(1 / m^2), at least 0."""
    num = sum((m - p) / m ** 2 for m, p in zip(measured, predicted))
    return max(0.0, num / sum(1.0 / m ** 2 for m in measured))


def fit(rows: Sequence[SweepRow]) -> Tuple[float, float, List[float], List[float]]:
    """(k0, C, relative errors at the fit, relative errors with one rate at every length) for one GPU."""
    measured = [r.measured_s for r in rows]
    best: Tuple[float, float, float, List[float]] = (float("inf"), 0.0, 0.0, [])
    flat: List[float] = []
    for k0 in K0_GRID:
        pred = [predicted_s(r.gpu, r.seq_len, k0) for r in rows]
        c = offload_s(measured, pred)
        errs = [(c + p) / m - 1.0 for p, m in zip(pred, measured)]
        sse = sum(e * e for e in errs)
        if k0 == 0.0:
            flat = errs
        if sse < best[0]:
            best = (sse, k0, c, errs)
    return best[1], best[2], best[3], flat


def rms(errs: Sequence[float]) -> float:
    return (sum(e * e for e in errs) / len(errs)) ** 0.5


def main(argv: Sequence[str] | None = None) -> None:
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="set flash_attention_k0_tokens in the Blackwell gpu/ configs")
    args = ap.parse_args(argv)
    rows = read_rows()
    fitted: Dict[str, Tuple[float, float]] = {}
    for gpu in FITTED:
        mine = [r for r in rows if r.gpu == gpu]
        k0, c, errs, flat = fit(mine)
        fitted[gpu] = (k0, c)
        print(f"{gpu}: k0 = {k0:.0f} keys, offload C = {c:.2f} s; errors by length "
              + " ".join(f"{r.seq_len // 1024}K {e:+.1%}" for r, e in zip(mine, errs))
              + f"; rms {rms(errs):.1%} (one rate at every length, C refitted: rms {rms(flat):.1%})")
    if args.write:
        date = datetime.date.today().strftime("%Y-%m")
        for source, targets in WRITTEN.items():
            k0, c = fitted[source]
            for name in targets:
                how = "fitted" if name == source else "transferred from"
                update_yaml(CONF_GPU / f"{name}.yaml", {"flash_attention_k0_tokens": round(k0)}, {
                    "flash_attention_k0_tokens": (
                        f"{how}: {source.upper()} Llama-3.1-8B sequence-length sweep 8K-256K (DeepSpeed ZeRO-3, "
                        f"full checkpointing; CPU offload as a fitted constant C = {c:.2f} s), "
                        f"bench/fit_attention_length.py ({provenance_path(DATA)}), {date}")})
        print("wrote flash_attention_k0_tokens to " + ", ".join(n for t in WRITTEN.values() for n in t))


if __name__ == "__main__":
    main()
