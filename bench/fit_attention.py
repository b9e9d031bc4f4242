"""The fused-attention rate a measured SDPA table implies, against what the cost model prices it at.

    python bench/fit_attention.py                               # profiles/measured/h200/attention_lengths.csv
    python bench/fit_attention.py --table PATH [--stack torchtitan_fsdp2] [--backend flash|cudnn] [--write]
    python bench/fit_attention.py --backend cudnn --stack megatron_core_te      # TE's fused attention is cuDNN's

The table comes from ``python -m vtrain.profiler.attention_lengths`` (bench/gpu_run.sh runs it on the lent
GPU). Its kernels are timed in bursts (a few calls after a warm-up, at the boost clock), while the GPU's
``flash_attention_efficiency`` is a rate inside a training step (MLENG's step decomposition), where the power
cap holds the clock lower: the same folder's ``sustained_gemm.csv`` (the steady/burst ratio of a GEMM run back to
back, :func:`vtrain.cost.profile_io.sustained_fraction`) puts the measured rates on that footing, as the
profile-driven cost model does with the same table. For each row of one SDPA backend (``--backend``, flash by
default) it prints the efficiency the kernel reached in the burst (the model's FLOP count of
:class:`vtrain.graph.ops.FlashAttention`, causal half included, over time x the bf16 peak), forward, backward and
both, and the error of the model's time against the in-step time (measured / sustained fraction):
``flops / (peak x gpu.flash_attention_efficiency x the stack's factor on the GPU's architecture x
power_clock_fraction)``. The implied stack factor is the 8K causal row's in-step efficiency over the GPU's
fused-attention efficiency (where the GPU's rate was measured; without that row, the median over the causal rows,
each with the model's length curve applied); ``--write`` sets it as the stack's
``attention_kernel_efficiency_by_architecture`` entry for the GPU's architecture, with its provenance (other
architectures keep the stack's general ``attention_kernel_efficiency``). How the rate moves with length (the
ring-step blocks of context parallelism) is printed, not modelled here: one constant per
stack (``bench/fit_attention_length.py`` fits the length curve).
"""
from __future__ import annotations

import datetime
import sys
from pathlib import Path
from statistics import median
from typing import Any, Dict, List, Tuple

from vtrain.calibration.yaml_write import provenance_path, update_yaml
from vtrain.config.build import gpu_spec, stack_spec
from vtrain.config.compose import CONF_DIR, group_options, load_gpu_config, load_stack_config
from vtrain.cost.analytical import FLASH_ANCHOR_KEYS, flash_length_factor
from vtrain.cost.profile_io import ProfileError, default_profiles_root, sustained_fraction
from vtrain.errors import VtrainError
from vtrain.graph.ops import FlashAttention
from vtrain.io.args import ArgumentParser
from vtrain.profiler.attention_lengths import read_table

ANCHOR_SEQ = int(2 * FLASH_ANCHOR_KEYS)  # the causal length gpu.flash_attention_efficiency was measured at
PROVENANCE_SEP = " | "  # between the notes of a per-architecture map's entries
DEFAULT_TABLE = default_profiles_root() / "measured" / "h200" / "attention_lengths.csv"


def ops(r: Dict[str, str]) -> List[FlashAttention]:
    bh, q, kv, d, causal = int(r["batch_heads"]), int(r["q_len"]), int(r["kv_len"]), int(r["head_dim"]), r["causal"]
    return [FlashAttention("flash_attn", bh, q, d, causal=causal == "1", kv_len=kv),
            FlashAttention("flash_attn.bwd", bh, q, d, backward=True, causal=causal == "1", kv_len=kv)]


def _inputs(args: Any) -> Tuple[List[Dict[str, str]], str, float, Path]:
    """The table's rows of the chosen backend, their GPU config, and the sustained-clock ratio measured beside
    them; a VtrainError names what is missing."""
    stacks = group_options("stack")
    if args.stack not in stacks:
        raise VtrainError(f"--stack={args.stack} is not a stack/ config; one of: {', '.join(stacks)}")
    table = read_table(args.table)
    rows = [r for r in table if r["backend"] == args.backend]
    if not rows:
        raise VtrainError(f"{args.table}: no row of backend {args.backend}; it holds "
                          f"{', '.join(sorted({r['backend'] for r in table}))}")
    gpu_name = rows[0]["gpu"]
    if gpu_name not in group_options("gpu"):
        raise VtrainError(f"{args.table}: gpu={gpu_name} is not a gpu/ config")
    if not rows[0]["device"].startswith("NVIDIA"):  # CUDA's device names; a CPU table checks code only
        raise VtrainError(f"{args.table}: measured on {rows[0]['device']}, not an NVIDIA GPU")
    clock_table = args.table.parent / "sustained_gemm.csv"
    clock = sustained_fraction(clock_table, "bf16") if clock_table.is_file() else None
    if clock is None:
        raise VtrainError(f"{clock_table}: no bf16 steady/burst GEMM ratio beside the table (python -m "
                          "vtrain.profiler.sustained_gemm): a burst-timed kernel cannot be compared with an "
                          "in-step rate without it")
    return rows, gpu_name, clock, clock_table


def main(argv: List[str]) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, default=DEFAULT_TABLE)
    ap.add_argument("--stack", default="torchtitan_fsdp2", help="the stack whose attention factor to compare/set")
    ap.add_argument("--backend", default="flash", help="the SDPA backend's rows to read (flash: torchtitan's kernel)")
    ap.add_argument("--write", action="store_true", help="set the stack's factor for the GPU's architecture")
    args = ap.parse_args(argv)
    try:
        rows, gpu_name, clock, clock_table = _inputs(args)
    except (VtrainError, ProfileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    gpu = gpu_spec(load_gpu_config(gpu_name))
    stack = stack_spec(load_stack_config(args.stack))
    if gpu.flash_attention_efficiency is None:
        print(f"error: gpu={gpu_name} has no flash_attention_efficiency to compare with", file=sys.stderr)
        return 2
    peak = gpu.peak_tflops["bf16"] * 1e12
    factor_now = stack.attention_factor(gpu.architecture)
    rate = peak * gpu.flash_attention_efficiency * factor_now * gpu.power_clock_fraction
    print(f"{args.table}: {rows[0]['device']}, torch {rows[0]['torch']}, SDPA backend {rows[0]['backend']}; "
          f"model: gpu={gpu_name} flash {gpu.flash_attention_efficiency:.3f} x stack={args.stack} "
          f"{factor_now:.3f} of the {peak / 1e12:.0f} TFLOP/s bf16 peak; the kernels timed in "
          f"bursts, in a step at the sustained clock {clock:.3f} ({provenance_path(clock_table)})")
    print(f"{'case':>18} | {'fwd eff':>7} | {'bwd eff':>7} | {'both':>6} | model time error (in step)")
    factors: Dict[int, float] = {}  # causal length -> the stack factor its row implies, the length curve applied
    for r in rows:
        fwd, bwd = ops(r)
        t_fwd, t_bwd = float(r["fwd_s"]), float(r["bwd_s"])
        eff = (fwd.flops + bwd.flops) / ((t_fwd + t_bwd) * peak)
        length = flash_length_factor(fwd.mean_call_keys, gpu.flash_attention_k0_tokens,
                                     gpu.flash_attention_max_length_factor)
        model_s = (fwd.flops + bwd.flops) / (rate * length)
        case = f"{'causal' if r['causal'] == '1' else 'block'} {r['q_len']}x{r['kv_len']}"
        print(f"{case:>18} | {fwd.flops / (t_fwd * peak):7.3f} | {bwd.flops / (t_bwd * peak):7.3f} | {eff:6.3f} | "
              f"{model_s * clock / (t_fwd + t_bwd) - 1:+.1%}")
        if r["causal"] == "1":  # the in-step rate: the burst rate at the sustained clock
            factors[int(r["q_len"])] = eff * clock / (gpu.flash_attention_efficiency * gpu.power_clock_fraction
                                                      * length)
    if not factors:
        print("no causal rows: no stack factor implied")
        return 0
    # the factor is the kernel's rate at the anchor the GPU's efficiency was measured at (8K causal)
    at = f"the {ANCHOR_SEQ // 1024}K causal row" if ANCHOR_SEQ in factors else f"median of {len(factors)} causal rows"
    factor = round(factors[ANCHOR_SEQ] if ANCHOR_SEQ in factors else median(factors.values()), 3)
    arch = gpu.architecture
    print(f"implied {args.stack}.attention_kernel_efficiency_by_architecture.{arch}: {factor} ({at}; configured "
          f"{factor_now}, elsewhere {stack.attention_kernel_efficiency})")
    if args.write:
        date = datetime.date.today().strftime("%Y-%m")
        key = "attention_kernel_efficiency_by_architecture"
        note = (f"fitted ({arch}): SDPA ({rows[0]['backend']}) on {rows[0]['device']}, torch {rows[0]['torch']}, "
                f"{at} in a burst x the sustained clock {clock:.3f} ({provenance_path(clock_table)}) over "
                f"gpu={gpu_name}'s in-step flash_attention_efficiency ({provenance_path(args.table)}), "
                f"bench/fit_attention.py, {date}")
        # one note per architecture in the map's provenance: this one's replaced, the others' kept
        others = [part for part in stack.provenance.get(key, "").split(PROVENANCE_SEP)
                  if part and not part.startswith(f"fitted ({arch})")]
        update_yaml(CONF_DIR / "stack" / f"{args.stack}.yaml",
                    {key: {**stack.attention_kernel_efficiency_by_architecture, arch: factor}},
                    {key: PROVENANCE_SEP.join([*others, note])})
        print(f"wrote stack/{args.stack}.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
