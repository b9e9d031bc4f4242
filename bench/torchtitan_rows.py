"""Turn torchtitan's published benchmark tables (vtrain/data/modern_gpus/torchtitan_benchmarks.csv, parsed
from pytorch/torchtitan and pytorch/ao; see that folder's README) into vtrain's measured-row schema:
vtrain/data/modern_gpus/torchtitan_rows.csv, the `torchtitan` dataset of task=validate.

    python bench/torchtitan_rows.py            # rewrites the CSV; prints what each row became

The mapping is mechanical and stated here, one rule per column (nothing is tuned per row):
- model: "Llama 3.1 8B/70B/405B", "Llama3-8b", "Llama 3 8B" -> llama3_8b/70b/405b (Llama 3.1 has Llama 3's
  shapes); "Qwen3 8B" -> qwen3_8b; Llama 4 Scout (MoE) keeps its name and num_experts=16, ep, so that it
  is skipped as not modelled rather than simulated as something else.
- gpu: Grand Teton H100 96 GB HBM2e 500 W -> h100_96gb_500w; H200 -> h200; "power-limited B200" -> b200;
  the 4-GPU Blackwell of the nvfp4 runs (SKU not named; 179.94 GiB = 97.6% of device -> ~184 GiB) -> gb200.
- parallelism: fsdp -> dp with zero_stage=3 (FSDP2), tp, pp, cp as given (blank = 1); tp > 1 ->
  sequence_parallel=true (torchtitan's TP plan shards norms over the sequence); async TP -> tp_comm_overlap;
  pp_schedule "Interleaved 1F1B" -> interleaved with 2 stages per rank (torchtitan's default); PP ->
  reshard_after_forward=false (torchtitan's "default" policy) and as many micro-batches as pipeline stages
  (micro-batch = local batch / pp: at the benchmarked commit, 9dec370, an unset
  experimental.pipeline_parallel_microbatches defaults to parallel_dims.pp), else micro-batch = local batch;
  global batch = local batch x fsdp degree where the table leaves it blank.
- precision: bf16 / float8 tensorwise -> fp8 / float8 rowwise -> fp8_rowwise / mxfp8* -> mxfp8 / NVFP4 -> nvfp4.
- activation checkpointing: selective (torchtitan's per-op SAC) -> selective_op; full -> full; none -> none.
- CP: torchtitan's context parallelism all-gathers K/V (rotate method "allgather") -> cp_comm=allgather.
- stack: torch_compile yes -> torchtitan_fsdp2_compile (blocks and loss compiled), except for software of 2024
  (torchtitan 9dec370: only the blocks compiled, its train.py leaves the loss eager) ->
  torchtitan_fsdp2_compile_blocks; no -> torchtitan_fsdp2.
- measured: tokens_per_s_per_gpu; peak memory converted to GiB (GB = 1e9 bytes).
"""
from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

DATA = Path(__file__).resolve().parents[1] / "vtrain" / "data" / "modern_gpus"
SOURCE = DATA / "torchtitan_benchmarks.csv"
OUT = DATA / "torchtitan_rows.csv"
COLUMNS = ("table", "name", "model", "gpu", "gpus_per_node", "num_gpus", "tp", "cp", "pp", "dp", "zero_stage",
           "schedule", "virtual_stages", "micro_batch", "global_batch", "seq_len", "precision", "recompute",
           "sequence_parallel", "tp_comm_overlap", "reshard_after_forward", "cp_comm", "flash_attention", "stack",
           "num_experts", "ep", "tokens_per_s_per_gpu", "peak_memory_gib")


def _int(raw: str, default: int = 1) -> int:
    m = re.match(r"\s*(\d+)", raw or "")
    return int(m.group(1)) if m else default


def _model(name: str) -> str:
    n = name.lower()
    if "scout" in n:
        return "llama4_scout"
    if "qwen3" in n:
        return "qwen3_8b"
    for size in ("405b", "70b", "8b"):
        if size in n.replace(" ", "").replace("3.1", "3"):
            return f"llama3_{size}"
    raise ValueError(f"unknown model {name!r}")


def _first(text: str, table: Tuple[Tuple[str, str], ...]) -> Optional[str]:
    """The value of the first key of ``table`` found in ``text`` (order matters: "gb200" before "b200")."""
    return next((value for key, value in table if key in text), None)


_GPUS = (("h100", "h100_96gb_500w"), ("h200", "h200"), ("gb200", "gb200"), ("b200", "b200"), ("blackwell", "gb200"))
_PRECISIONS = (("nvfp4", "nvfp4"), ("mxfp8", "mxfp8"), ("rowwise", "fp8_rowwise"), ("float8", "fp8"), ("fp8", "fp8"))


def _gpu(r: Dict[str, str]) -> str:
    gpu = _first(r["gpu"].lower(), _GPUS)
    if gpu is None:
        raise ValueError(f"unknown gpu {r['gpu']!r} ({r['hardware_notes'].lower()})")
    return gpu


def _precision(raw: str) -> str:
    return _first(raw.lower(), _PRECISIONS) or "bf16"


def _recompute(raw: str) -> str:
    """Blank (the nvfp4 table does not say): the train config's default, selective per-op AC (the H200 row
    states it for llama3_8b.toml at e7c0cae: "selective op (llama3_8b.toml default)")."""
    a = raw.lower().strip()
    if not a:
        return "selective_op"
    return "full" if a.startswith("full") else "selective_op" if a.startswith("selective") else "none"


def _gib(value: str, unit: str) -> str:
    if not value:
        return ""
    v = float(value)
    return f"{v * 1e9 / 2**30:.2f}" if unit.strip().upper().startswith("GB") else f"{v:.2f}"


def _stack(r: Dict[str, str]) -> str:
    if not r["torch_compile"].lower().startswith("yes"):
        return "torchtitan_fsdp2"
    return "torchtitan_fsdp2_compile_blocks" if "(2024-" in r["sw_versions"] else "torchtitan_fsdp2_compile"


def convert(r: Dict[str, str]) -> Dict[str, str]:
    tp, cp, pp = _int(r["tp"]), _int(r["cp"]), _int(r["pp"])
    fsdp = _int(r["fsdp"])
    gpu = _gpu(r)
    num_gpus = _int(r["num_gpus"], 0) or tp * cp * pp * fsdp
    lbs = _int(r["local_batch_size"])
    gbs = _int(r["global_batch_size"], 0) or lbs * fsdp
    interleaved = "interleaved" in r["pp_schedule"].lower()
    model = _model(r["model"])
    moe = model == "llama4_scout"
    return {
        "table": r["table"], "name": f"{r['table']}: {r['model']}", "model": model, "gpu": gpu,
        "gpus_per_node": "4" if gpu == "gb200" else "8", "num_gpus": str(num_gpus), "tp": str(tp), "cp": str(cp),
        "pp": str(pp), "dp": str(fsdp), "zero_stage": "3" if fsdp > 1 or cp > 1 else "0",
        "schedule": "interleaved" if interleaved else "1f1b", "virtual_stages": "2" if interleaved else "1",
        "micro_batch": str(lbs // pp if pp > 1 else lbs), "global_batch": str(gbs), "seq_len": r["seq_len"],
        "precision": _precision(r["precision_recipe"]), "recompute": _recompute(r["activation_checkpointing"]),
        "sequence_parallel": str(tp > 1).lower(),
        "tp_comm_overlap": str(r["async_tp"].lower().startswith("yes")).lower(),
        "reshard_after_forward": str(pp == 1).lower(), "cp_comm": "allgather", "flash_attention": "true",
        "stack": _stack(r),
        "num_experts": "16" if moe else "", "ep": r["ep"] if moe else "",
        "tokens_per_s_per_gpu": r["tokens_per_sec_per_gpu"],
        "peak_memory_gib": _gib(r["peak_memory"], r["peak_memory_unit"]),
    }


def main() -> None:
    with SOURCE.open(newline="", encoding="utf-8") as fh:
        rows: List[Dict[str, str]] = [convert(r) for r in csv.DictReader(fh)]
    with OUT.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(f"{r['name'][:48]:48s} {r['gpu']:15s} tp{r['tp']} cp{r['cp']} pp{r['pp']} dp{r['dp']} "
              f"{r['precision']:11s} {r['recompute']:9s} {r['stack']}")
    print(f"wrote {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    main()
