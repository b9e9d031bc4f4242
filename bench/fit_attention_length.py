"""How the fused-attention rate follows the keys a query attends to (gpu.flash_attention_k0_tokens), fitted on
the two measured length tables we have:

- MLENG's Llama-3.1-8B on 8 H200 (FlashAttention-3) and 8 B200 (FlashAttention-4 beta), DeepSpeed ZeRO-3, full
  checkpointing, micro-batch 1, 8K-256K tokens (vtrain/data/modern_gpus/mleng_llama31_8b_deepspeed_h200_vs_b200.csv,
  table seqlen_sweep): whole training steps, so above the 8K anchor.
- SDPA's flash (FlashAttention-2) and cuDNN kernels timed alone on a lent H200 at 2K-128K causal sequences
  (profiles/measured/h200/attention_lengths.csv, ``python -m vtrain.profiler.attention_lengths``): below the anchor too.

    python bench/fit_attention_length.py [--write]

Model: per query tile a kernel call does fixed work (Q in, O and its log-sum-exp out) worth k0 keys beside the
work on its keys, so its rate goes as k / (k + k0) in the mean keys k per query (causal: half the sequence),
scaled to gpu.flash_attention_efficiency at the 8K anchor (k = 4,096; vtrain/cost/analytical.py), below the
anchor as above it; above it the gain is capped where the GPU says so (gpu.flash_attention_max_length_factor).

MLENG: each row is simulated as it ran (the `deepspeed` stack, ZeRO-3, full recompute) for every k0 on a grid.
The runs also offload AdamW to the CPU, which vtrain does not model: a per-step constant C per GPU (the CPU
step and its copies, the same at every length) is fitted beside k0, in closed form, as a nuisance. At 256K
tokens attention is 82% of the model FLOPs, at 8K 13%, so the sweep pins how the rate grows with length.
- Blackwell: B200's k0 is written to every Blackwell part (b200, b300, gb200, gb300), uncapped: FA4 keeps
  speeding up to 256K. Held out: the one long-context Blackwell row (Megatron-Core, GB200, 128K, Transformer
  Engine's kernels) goes from +33.6% to +6.5%.
- Hopper: H200's FA3 k0 (1,050) is printed, not written: the Hopper kernels the stacks run do not keep
  speeding up. On the H200 table, SDPA's flash kernel gains 9-11% over the anchor from 16K on and stays there,
  and cuDNN's gains 9% at 16K and falls back to 1.01, 0.99, 0.97 at 32K, 64K, 128K; the H100 Megatron-Core
  long-context rows (cuDNN, one call per CP step) went from -4..+1% to -11..-1% with FA3's curve. Below the
  anchor both kernels slow down alike, as the model says: k0 is fitted there (the 2K and 4K rows of both
  backends against each backend's 8K row), and the gain above the anchor is capped at 1.0 (HOPPER_CAP).
  ``--write`` sets both on h200 (fitted) and h100_sxm, h800 (same silicon: transferred).
"""
from __future__ import annotations

import csv
import datetime
import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.calibration.yaml_write import Value, provenance_path, update_yaml
from vtrain.config.build import build_workload
from vtrain.cost.analytical import FLASH_ANCHOR_KEYS, flash_length_factor
from vtrain.errors import VtrainError
from vtrain.io.args import ArgumentParser
from vtrain.profiler.attention_lengths import read_table
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "vtrain" / "data" / "modern_gpus" / "mleng_llama31_8b_deepspeed_h200_vs_b200.csv"
CONF_GPU = ROOT / "vtrain" / "conf" / "gpu"
K0_GRID = [float(k) for k in range(0, 6001, 50)]
FITTED = ("h200", "b200")
WRITTEN = {"b200": ("b200", "b300", "gb200", "gb300")}  # H200's FA3 fit: printed only (module docstring)
TABLE = ROOT / "profiles" / "measured" / "h200" / "attention_lengths.csv"
HOPPER = ("h200", ("h100_sxm", "h200", "h800"))  # the table's GPU and the parts its k0 and cap are written to
HOPPER_CAP = 1.0  # the long-length gain of the Hopper kernels the stacks run: cuDNN's is 0.97-1.01 from 32K on
ANCHOR_SEQ = int(2 * FLASH_ANCHOR_KEYS)  # the causal length of the anchor row


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
    spec = replace(w.cluster.gpu, flash_attention_k0_tokens=k0 or None, flash_attention_max_length_factor=None)
    w = replace(w, cluster=replace(w.cluster, gpu=spec))  # the FA3/FA4 sweep: its own curve, uncapped
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


@dataclass(frozen=True)
class KernelRow:
    backend: str
    seq_len: int
    rate_ratio: float  # the kernel's rate (fwd + bwd) over its rate at the 8K anchor


def read_kernel_rows(path: Path = TABLE) -> List[KernelRow]:
    """The causal rows of the SDPA table, each as its rate relative to the same backend's 8K row."""
    try:
        table = read_table(path)
    except VtrainError as exc:
        raise SystemExit(f"bench/fit_attention_length.py: {exc}") from None
    causal = [r for r in table if r["causal"] == "1" and r["q_len"] == r["kv_len"]]
    secs = {(r["backend"], int(r["q_len"])): float(r["fwd_s"]) + float(r["bwd_s"]) for r in causal}
    out = []
    for (backend, s), t in sorted(secs.items()):
        anchor = secs.get((backend, ANCHOR_SEQ))
        if anchor is not None:  # causal FLOPs go as s^2: rate ratio = (s^2 / t) / (8192^2 / t_anchor)
            out.append(KernelRow(backend, s, (s / ANCHOR_SEQ) ** 2 * anchor / t))
    return out


def fit_below_anchor(rows: Sequence[KernelRow]) -> Tuple[float, List[float]]:
    """(k0, relative errors of the rows below the anchor): least squares of the log rate ratio over the grid."""
    below = [r for r in rows if r.seq_len < ANCHOR_SEQ]
    if not below:
        raise SystemExit(f"bench/fit_attention_length.py: {TABLE}: no causal rows below {ANCHOR_SEQ} tokens beside an "
                         f"{ANCHOR_SEQ}-token row of the same backend: nothing to fit k0 on")
    best: Tuple[float, float, List[float]] = (float("inf"), 0.0, [])
    for k0 in K0_GRID[1:]:
        errs = [flash_length_factor(r.seq_len / 2, k0) / r.rate_ratio - 1.0 for r in below]
        sse = sum(math.log1p(e) ** 2 for e in errs)
        if sse < best[0]:
            best = (sse, k0, errs)
    return best[1], best[2]


def held_out(rows: Sequence[KernelRow]) -> str:
    """The below-anchor fit cross-validated: each row predicted from k0 fitted without it, and each backend's rows
    from k0 fitted on the other backend's."""
    below = [r for r in rows if r.seq_len < ANCHOR_SEQ]
    loo = [flash_length_factor(r.seq_len / 2, fit_below_anchor([o for o in rows if o is not r])[0]) / r.rate_ratio - 1
           for r in below]
    out = f"leave-one-row-out MAPE {100 * sum(abs(e) for e in loo) / len(loo):.1f}%"
    for backend in sorted({r.backend for r in below}):
        others = [r for r in rows if r.backend != backend]
        if not any(r.seq_len < ANCHOR_SEQ for r in others):
            continue
        k0 = fit_below_anchor(others)[0]
        errs = [flash_length_factor(r.seq_len / 2, k0) / r.rate_ratio - 1 for r in below if r.backend == backend]
        out += f"; {backend} from the others' k0 {k0:.0f}: " + " ".join(f"{e:+.1%}" for e in errs)
    return out


def rms(errs: Sequence[float]) -> float:
    return (sum(e * e for e in errs) / len(errs)) ** 0.5


def main(argv: Sequence[str] | None = None) -> None:
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true",
                    help="set flash_attention_k0_tokens (and Hopper's cap) in the Hopper and Blackwell gpu/ configs")
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
    kernel_rows = read_kernel_rows()
    hopper_k0, hopper_errs = fit_below_anchor(kernel_rows)
    below = [r for r in kernel_rows if r.seq_len < ANCHOR_SEQ]
    print(f"{HOPPER[0]} kernels ({provenance_path(TABLE)}): k0 = {hopper_k0:.0f} keys below the anchor; errors "
          + " ".join(f"{r.backend} {r.seq_len // 1024}K {e:+.1%}" for r, e in zip(below, hopper_errs))
          + f"; above it, capped at {HOPPER_CAP}: measured "
          + " ".join(f"{r.backend} {r.seq_len // 1024}K {r.rate_ratio:.3f}" for r in kernel_rows
                     if r.seq_len > ANCHOR_SEQ))
    print(f"{HOPPER[0]} kernels below the anchor, held out: {held_out(kernel_rows)}")
    if args.write:
        date = datetime.date.today().strftime("%Y-%m")
        hopper, parts = HOPPER
        for name in parts:
            how = "fitted" if name == hopper else "transferred from"
            values: Dict[str, Value] = {"flash_attention_k0_tokens": round(hopper_k0),
                                        "flash_attention_max_length_factor": HOPPER_CAP}
            update_yaml(CONF_GPU / f"{name}.yaml", values,
                        {"flash_attention_k0_tokens": (
                            f"{how}: {hopper.upper()} SDPA flash and cuDNN kernels at 2K-8K causal sequences, each "
                            f"backend's rate against its 8K row (profiles/measured/{hopper}/attention_lengths.csv), "
                            f"bench/fit_attention_length.py, {date}"),
                         "flash_attention_max_length_factor": (
                            f"{how}: {hopper.upper()} SDPA flash (1.09-1.11 from 16K on) and cuDNN (1.09 at 16K, "
                            "0.97-1.01 at 32K-128K) over their 8K rate "
                            f"(profiles/measured/{hopper}/attention_lengths.csv), "
                            "capped at the anchor's rate, where cuDNN's long calls run (Megatron-Core's kernels); "
                            f"bench/fit_attention_length.py, {date}")})
        for source, targets in WRITTEN.items():
            k0, c = fitted[source]
            for name in targets:
                how = "fitted" if name == source else "transferred from"
                update_yaml(CONF_GPU / f"{name}.yaml", {"flash_attention_k0_tokens": round(k0)}, {
                    "flash_attention_k0_tokens": (
                        f"{how}: {source.upper()} Llama-3.1-8B sequence-length sweep 8K-256K (DeepSpeed ZeRO-3, "
                        f"full checkpointing; CPU offload as a fitted constant C = {c:.2f} s), "
                        f"bench/fit_attention_length.py ({provenance_path(DATA)}), {date}")})
        print("wrote flash_attention_k0_tokens to " + ", ".join([*HOPPER[1], *(n for t in WRITTEN.values() for n in t)])
              + f" and flash_attention_max_length_factor {HOPPER_CAP} to " + ", ".join(HOPPER[1]))


if __name__ == "__main__":
    main()
