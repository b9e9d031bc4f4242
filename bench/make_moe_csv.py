"""Write vtrain/data/modern_gpus/megatron_moe_qwen3_h100.csv and megatron_moe_qwen3_blackwell.csv from the shared
Megatron-MoE-ModelZoo table.

    python bench/make_moe_csv.py [TABLE]   # default: ../shared/data/modern_gpus/megatron_moe_modelzoo_qwen3.csv

H100 rows of Qwen3-235B-A22B (the Qwen3-Next-80B-A3B row needs gated delta-net attention, not modelled, and is
left out). Step times: the table's own, or (long-context rows, TFLOP/s only) Megatron's model FLOPs over the
reported TFLOP/s per GPU (vtrain.validation.megatron_flops, which reproduces the main table's TFLOP/s from its
step times within 0.5%). Plans from the table and the launch command (README beside the CSV).
"""
from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

from vtrain.config.build import model_spec
from vtrain.validation.megatron_flops import megatron_flops_per_iteration
from vtrain.validation.rows import model_config_fields
from vtrain.workload.model import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "vtrain" / "data" / "modern_gpus" / "megatron_moe_qwen3_h100.csv"
OUT_BLACKWELL = OUT.with_name("megatron_moe_qwen3_blackwell.csv")
GPU_OF = {"GB200": "gb200", "GB300": "gb300"}
GPUS_PER_TRAY = 4  # a GB200/GB300 NVL72 compute tray (node) holds 4 GPUs; the source gives NNODES only
# the shared data folder beside the project root (not shipped: this script only regenerates OUT from it)
SOURCE = ROOT.parent / "shared" / "data" / "modern_gpus" / "megatron_moe_modelzoo_qwen3.csv"
COLUMNS = ["name", "model", "gpu", "num_gpus", "gpus_per_node", "global_batch", "micro_batch", "seq_len", "tp", "cp",
           "pp", "dp", "ep", "etp", "zero_stage", "schedule", "virtual_stages", "moe_dispatcher", "overlap_moe_comm",
           "recompute", "recompute_modules", "cuda_graph_scope", "sequence_parallel", "fp32_grads",
           "distributed_optimizer", "overlap_grad_reduce", "tp_comm_overlap", "overlap_param_gather", "precision",
           "flash_attention", "account_for_embedding", "account_for_loss", "moe_imbalance", "hidden_size", "num_heads",
           "num_layers",
           "iteration_time_ms", "step_time_source", "routing", "table", "source_tflops_per_gpu"]
RECOMPUTE = {"norm, act": ("selective", "layernorm,moe_act"), "full": ("full", "core_attn"), "": ("none", "core_attn"),
             "selective: layernorm moe (from command)": ("selective", "layernorm,moe")}


# max/mean expert load of the dropless runs (no histogram published): fitted by bench/fit_moe_imbalance.py on
# the 4 dropless long-context rows (LOO MAPE 5.1%); used for them. Forced-balance rows keep 1.0.
DROPLESS_IMBALANCE = 1.60
# The H100 main table states no routing; the ModelZoo's H100 script for its plan (best_practice/qwen3/
# run_h100_235b.sh: DeepEP, A2A_OVERLAP=1, TP2 PP8 VPP4 EP32, GBS 2048, the table's rows 1-2) passes
# --moe-router-force-load-balancing, as does every 4K-sequence command of the same readme (GB200 BF16 and
# MXFP8, GB300); the one table that ran dropless (long context) says so beside each figure. The main table is
# read as forced balance (moe_imbalance 1.0).
MAIN_TABLE_ROUTING = "forced balance (ModelZoo H100 script, run_h100_235b.sh)"
# The FSDP row (Megatron-FSDP, experts sharded over 32 ranks one per node) reduces its gradients in bf16: fp32 ones
# cannot fit the measured step. Per micro-batch each GPU gathers its 94 layers' expert weights twice (forward,
# backward) and reduce-scatters their gradients over its own 50 GB/s NIC: 94 x (2 x 0.585 + 1.17) GB = 220 GB with
# fp32 gradients, 880 GB for the 4 micro-batches, 17.6 s at the NIC's full line rate before any dense weight or
# compute, which is the whole measured step (17.6 s); with bf16 gradients 660 GB. Megatron-FSDP's user guide
# (Megatron-LM docs/discussions/megatron-fsdp-user-guide) recommends --grad-reduce-in-bf16. Other rows keep
# Megatron-LM's fp32 reduction for bf16 (their one reduction per step barely moves them).
FSDP_FP32_GRADS = "false"

def main(src: str) -> None:
    model = model_spec(model_config_fields("qwen3_235b_a22b"))
    rows = []
    for i, r in enumerate(csv.DictReader(open(src)), start=1):
        if r["gpu"] != "H100" or r["model"] != "Qwen3-235B-A22B":
            continue
        gpus = int(r["num_gpus"] or 0) or int(r["nnodes"]) * 8
        tp, cp, pp = int(r["tp"]), int(r["cp"] or 1), int(r["pp"])
        dp = int(r["dp"]) if r["dp"] else gpus // (tp * cp * pp)
        gbs, seq, vpp = int(r["gbs"]), int(r["seq_len"]), int(r["vpp"] or 1)
        tflops = float(r["tflops_per_gpu"])
        if r["step_time_s"]:
            step_ms, source = float(r["step_time_s"]) * 1e3, "table"
        else:
            step_ms = megatron_flops_per_iteration(model, gbs, seq, tp) / (tflops * 1e12 * gpus) * 1e3
            source = "megatron model FLOPs / reported TFLOP/s"
        recompute, modules = RECOMPUTE[r["recompute"]]
        balance = r["tflops_variant"] or ""
        rows.append({
            "name": f"qwen3_235b_{r['table'].split(' ')[0].lower()}_{i}", "model": "qwen3_235b_a22b", "gpu": "h100_sxm",
            "num_gpus": gpus, "gpus_per_node": 8, "global_batch": gbs, "micro_batch": int(r["mbs"] or 1),
            "seq_len": seq, "tp": tp, "cp": cp, "pp": pp, "dp": dp, "ep": int(r["ep"]), "etp": int(r["etp"] or 1),
            "zero_stage": 3 if r["fsdp"] == "On" else 1, "schedule": "interleaved" if vpp > 1 else "1f1b",
            "virtual_stages": vpp, "moe_dispatcher": "deepep" if r["dispatcher"] == "DeepEP" else "alltoall",
            "overlap_moe_comm": "true" if "1f1b overlap" in r["notes"] else "false", "recompute": recompute,
            "recompute_modules": modules, "cuda_graph_scope": "", "sequence_parallel": "true",
            "fp32_grads": FSDP_FP32_GRADS if r["fsdp"] == "On" else "", "distributed_optimizer": "true",
            # the benchmark yaml sets --overlap-grad-reduce but neither --tp-comm-overlap nor --overlap-param-gather
            "overlap_grad_reduce": "true", "tp_comm_overlap": "false", "overlap_param_gather": "false",
            "precision": "bf16", "flash_attention": "true",
            "account_for_embedding": "true", "account_for_loss": "true",
            "moe_imbalance": DROPLESS_IMBALANCE if balance == "dropless" else 1.0,
            "hidden_size": "", "num_heads": "", "num_layers": "",
            "iteration_time_ms": f"{step_ms:.1f}", "step_time_source": source,
            "routing": "dropless (imbalance unknown)" if balance == "dropless" else
            ("forced balance" if balance else MAIN_TABLE_ROUTING),
            "table": r["table"], "source_tflops_per_gpu": tflops})
    write(OUT, rows)
    write(OUT_BLACKWELL, blackwell_rows(src, model))


def write(path: Path, rows: list) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} rows -> {path}")


def blackwell_rows(src: str, model: ModelSpec) -> list:
    """The GB200 / GB300 NVL72 rows (HybridEP: DeepEP-style NVLink kernels; TFLOP/s only, so the step time is
    Megatron's model FLOPs over them, as for the long-context rows). Left out: the MXFP8 row that needed
    activation offloading (not modelled). Routing, recompute and the dispatch/compute overlap come from the
    launch command (`launch_flags`); a recompute it does not set is left to Megatron-Core's row defaults (the
    first of none, selective, full that fits)."""
    rows = []
    for i, r in enumerate(csv.DictReader(open(src)), start=1):
        if r["gpu"] not in GPU_OF or r["model"] != "Qwen3-235B-A22B" or "offloading" in r["notes"]:
            continue
        gpus = int(r["nnodes"]) * GPUS_PER_TRAY
        tp, cp, pp, vpp = int(r["tp"]), int(r["cp"] or 1), int(r["pp"]), int(r["vpp"] or 1)
        gbs, seq, tflops = int(r["gbs"]), int(r["seq_len"]), float(r["tflops_per_gpu"])
        step_ms = megatron_flops_per_iteration(model, gbs, seq, tp) / (tflops * 1e12 * gpus) * 1e3
        flags = launch_flags(r["launch_command"])
        rows.append({
            "name": f"qwen3_235b_{r['table'].lower()}_{r['precision'].lower()}_{i}", "model": "qwen3_235b_a22b",
            "gpu": GPU_OF[r["gpu"]], "num_gpus": gpus, "gpus_per_node": GPUS_PER_TRAY, "global_batch": gbs,
            "micro_batch": int(r["mbs"] or 1), "seq_len": seq, "tp": tp, "cp": cp, "pp": pp,
            "dp": gpus // (tp * cp * pp), "ep": int(r["ep"]), "etp": int(r["etp"] or 1), "zero_stage": 1,
            "schedule": "interleaved" if vpp > 1 else "1f1b", "virtual_stages": vpp, "moe_dispatcher": "deepep",
            "overlap_moe_comm": flags["overlap_moe_comm"], "recompute": flags["recompute"],
            "recompute_modules": flags["recompute_modules"], "cuda_graph_scope": flags["cuda_graph_scope"],
            "sequence_parallel": "true" if tp > 1 else "false", "distributed_optimizer": "true",
            "overlap_grad_reduce": "true", "tp_comm_overlap": "false", "overlap_param_gather": "false",
            "precision": r["precision"].lower(), "flash_attention": "true",
            "account_for_embedding": "true", "account_for_loss": "true", "moe_imbalance": flags["moe_imbalance"],
            "hidden_size": "", "num_heads": "", "num_layers": "",
            "iteration_time_ms": f"{step_ms:.1f}", "step_time_source": "megatron model FLOPs / reported TFLOP/s",
            "routing": flags["routing"], "table": r["table"], "source_tflops_per_gpu": tflops})
    return rows


def launch_flags(command: str) -> dict:
    """What a Blackwell row's launch command states: `--moe-router-force-load-balancing` (forced balance:
    `moe_imbalance` 1.0; otherwise dropless, DROPLESS_IMBALANCE), `A2A_OVERLAP=1` (Megatron-Core's EP
    all-to-all overlapped with the other micro-batch's compute: `overlap_moe_comm`), and
    `--recompute-granularity` / `--recompute-modules` (empty when the command sets none), and
    `--cuda-graph-scope` with `--cuda-graph-impl transformer_engine` (the parts replayed from CUDA graphs)."""
    balanced = "--moe-router-force-load-balancing" in command
    granularity = re.search(r"--recompute-granularity\s+(\w+)", command)
    modules = re.search(r"--recompute-modules((?:\s+(?!--)\S+)+)", command)
    graphs = re.search(r"--cuda-graph-scope((?:\s+(?!--)\S+)+)", command)
    if graphs and not re.search(r"--cuda-graph-impl\s+transformer_engine", command):
        raise ValueError(f"--cuda-graph-scope without --cuda-graph-impl transformer_engine: {command[:80]}")
    return {"moe_imbalance": 1.0 if balanced else DROPLESS_IMBALANCE,
            "routing": "forced balance (launch command)" if balanced else "not stated",
            "overlap_moe_comm": "true" if re.search(r"\bA2A_OVERLAP=1\b", command) else "false",
            "recompute": granularity.group(1) if granularity else "",
            "recompute_modules": ",".join(modules.group(1).split()) if modules else "",
            "cuda_graph_scope": ",".join(graphs.group(1).split()) if graphs else ""}


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(SOURCE))
