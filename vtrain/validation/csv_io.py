"""Read measured iteration-time tables in vtrain's schema or vTrain's original headers.

vtrain schema (required): global_batch, micro_batch, hidden_size, num_heads, num_layers (or a model column),
seq_len, tp, pp, dp (or num_gpus, or num_nodes: dp = GPUs / (tp*cp*pp)), and a measured time or throughput
(MEASURED). vTrain's headers (data/ground_truth_*.csv, VIA-Research/vTrain)
are mapped onto it; an optional leading "Parameters (billion)" column and a UTF-8 BOM are accepted. Other
headers as published tables write them ("#-GPUs", "Tokens / sec / GPU", "Step Time (ms)", "MicroBatchSize")
are read by :func:`normalise_header`; placeholder cells ("-", "N/A") are empty; cells beyond the header's
columns are dropped with one warning per file.
"""
from __future__ import annotations

import csv
import io
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List

from vtrain.errors import ConfigError

log = logging.getLogger(__name__)

REQUIRED = ("seq_len",)  # tp, pp: an absent column is 1, as an empty cell is
# the micro-batch (micro_batch, or torchtitan's per-rank local_batch) is not required: a row silent on it runs the
# fastest of 1-16 that fits and divides its per-replica batch (validation.run.UNSTATED_MICRO_BATCHES)
# at least one: sequences, or tokens (divided by seq_len), or what the global batch follows from: the gradient
# accumulation steps (micro_batch x grad_accum x dp) or torchtitan's per-rank batch (local_batch x dp)
BATCH = ("global_batch", "global_batch_tokens", "grad_accum", "local_batch")
GPUS = ("dp", "num_gpus", "num_nodes")  # at least one: dp, or the GPUs it follows from (tp*cp*pp*dp)
SHAPE = ("hidden_size", "num_heads", "num_layers")  # required unless a `model` column names a model/ config
# at least one: the iteration time (ms, or s as published tables often give it), the throughput (tokens per GPU
# or of the whole job, sequences of the job), Megatron-Core's model TFLOP/s per GPU, or the MFU (of the bf16
# peak, by the reporting stack's FLOP count: validation.run.reported_flops; read where none of the others is)
MEASURED = ("iteration_time_ms", "iteration_time_s", "step_time_s", "tokens_per_s_per_gpu", "tokens_per_s",
            "samples_per_s", "model_tflops_per_gpu", "mfu")
OPTIONAL = ("vocab_size", "vocab_divisible_by", "ffn_hidden_size", "num_kv_heads", "gated_mlp", "gpu", "gpus_per_node",
            "recompute",
            "sequence_parallel", "schedule", "virtual_stages", "layers_per_virtual_stage", "ddp_impl",
            "distributed_optimizer",
            "precision",
            "overlap_grad_reduce", "flash_attention", "params_billion", "name")
VTRAIN_HEADERS = {
    "# gpus": "num_gpus", "global batch": "global_batch", "micro batch": "micro_batch",
    "hidden size": "hidden_size", "attention heads": "num_heads", "# layers": "num_layers",
    "sequence length": "seq_len", "tensor parallelism": "tp", "data parallelism": "dp",
    "pipeline parallelism": "pp", "iteration time (ms)": "iteration_time_ms",
    "parameters (billion)": "params_billion",
}


# cells that published tables fill in for "not stated" or "not used": read as empty (the column's default)
PLACEHOLDERS = {"-", "--", "\u2013", "\u2014", "n/a", "na"}  # "\u2013", "\u2014": en and em dash


@dataclass(frozen=True)
class MeasuredRow:
    index: int  # 1-based data row number in the file
    values: Dict[str, str]

    def get(self, key: str, default: str | None = None) -> str | None:
        v = self.values.get(key)
        return default if v is None or v.strip().lower() in PLACEHOLDERS or not v.strip() else v.strip()


# what published tables call vtrain's columns (after normalise_header: lower case, words joined by "_", a rate's
# "/" as "_per_" with "sec" as "s", "# GPUs" as "num_gpus")
HEADER_ALIASES = {
    "global_batch_size": "global_batch", "gbs": "global_batch", "micro_batch_size": "micro_batch", "mbs": "micro_batch",
    # torchtitan's per-data-parallel-rank batch: the micro-batch, split into pp of them under a pipeline
    # (vtrain.validation.rows._batches)
    "local_batch_size": "local_batch",
    "seq_length": "seq_len", "sequence_length": "seq_len", "seqlen": "seq_len", "tp_size": "tp", "pp_size": "pp",
    "dp_size": "dp", "cp_size": "cp", "ep_size": "ep", "etp_size": "etp", "vp": "virtual_stages",
    "vpp": "virtual_stages", "vp_size": "virtual_stages", "vpp_size": "virtual_stages",
    "tensor_parallel": "tp", "pipeline_parallel": "pp", "data_parallel": "dp", "context_parallel": "cp",
    "expert_parallel": "ep", "tensor_parallelism": "tp", "pipeline_parallelism": "pp", "data_parallelism": "dp",
    "context_parallelism": "cp", "expert_parallelism": "ep", "virtual_pipeline_stages": "virtual_stages",
    "gpus": "num_gpus", "num_gpu": "num_gpus", "n_gpus": "num_gpus", "world_size": "num_gpus", "nodes": "num_nodes",
    "n_nodes": "num_nodes",
    "tokens_per_sec_per_gpu": "tokens_per_s_per_gpu", "tokens_per_second_per_gpu": "tokens_per_s_per_gpu",
    "tps_per_gpu": "tokens_per_s_per_gpu",  # torchtitan's "TPS/GPU"
    "step_time_ms": "iteration_time_ms", "iteration_time_sec": "iteration_time_s", "step_time_sec": "step_time_s",
    # Megatron's "throughput per GPU (TFLOP/s/GPU)" and tables' "TFLOPs/GPU": model FLOPs by Megatron's count
    "model_tflops_per_s_per_gpu": "model_tflops_per_gpu", "model_tflops_per_sec_per_gpu": "model_tflops_per_gpu",
    "tflops_per_s_per_gpu": "model_tflops_per_gpu", "tflops_per_gpu": "model_tflops_per_gpu",
    "activation_checkpointing": "recompute", "activation_checkpoint": "recompute", "ac": "recompute",
    "memory_gib": "peak_memory_gib", "memory_gb": "peak_memory_gb",
    # Megatron-LM's argument names and NeMo / Megatron-Bridge's spelled-out headers
    "tensor_parallel_size": "tp", "tensor_model_parallel_size": "tp", "pipeline_parallel_size": "pp",
    "pipeline_model_parallel_size": "pp", "data_parallel_size": "dp", "context_parallel_size": "cp",
    "expert_parallel_size": "ep", "expert_model_parallel_size": "ep", "expert_tensor_parallel": "etp",
    "expert_tensor_parallel_size": "etp", "expert_tensor_parallelism": "etp",
    "virtual_pipeline_parallel_size": "virtual_stages", "virtual_pipeline_model_parallel_size": "virtual_stages",
    "num_layers_per_virtual_pipeline_stage": "layers_per_virtual_stage",
    "layers_per_virtual_pipeline_stage": "layers_per_virtual_stage",
    "sp": "sequence_parallel", "sequence_parallelism": "sequence_parallel",
    # a "System" column ("DGX-B200", "GB200 NVL72", "Eos"): the GPU where no "GPU" column names it and the system
    # names a known one (vtrain.validation.rows.gpu_name), else kept and echoed as it is
    "system_name": "system", "platform": "system", "hardware_platform": "system",
    "gpu_type": "gpu", "gpu_model": "gpu", "hardware": "gpu", "accelerator": "gpu", "accelerator_type": "gpu",
    "num_accelerators": "num_gpus", "dtype": "precision", "data_type": "precision", "mixed_precision": "precision",
    "microbatch_size": "micro_batch", "micro_bs": "micro_batch", "global_bs": "global_batch",
    "model_name": "model", "context_length": "seq_len", "context_len": "seq_len",
    "time_per_step_ms": "iteration_time_ms", "time_per_iteration_ms": "iteration_time_ms",
    "time_per_iter_ms": "iteration_time_ms", "elapsed_time_per_iteration_ms": "iteration_time_ms",
    "time_per_step_s": "iteration_time_s", "time_per_iteration_s": "iteration_time_s",
    "tokens_per_gpu_per_s": "tokens_per_s_per_gpu", "peak_mem_gib": "peak_memory_gib", "peak_mem_gb": "peak_memory_gb",
    "max_memory_allocated_gib": "peak_memory_gib", "max_memory_allocated_gb": "peak_memory_gb",
    "max_memory_reserved_gib": "peak_memory_gib", "max_memory_reserved_gb": "peak_memory_gb",
    "zero": "zero_stage", "zero_stage_": "zero_stage", "fsdp_size": "fsdp", "fsdp_degree": "fsdp",
    "sharding": "sharding_strategy", "global_batch_size_tokens": "global_batch_tokens",
    "global_batch_tokens": "global_batch_tokens", "gbs_tokens": "global_batch_tokens",
    # Megatron / NeMo gradient and optimizer dtypes (ParallelPlan.fp32_grads, optimizer_moments)
    "grad_reduce_in_fp32": "fp32_grads", "accumulate_allreduce_grads_in_fp32": "fp32_grads",
    "exp_avg_dtype": "optimizer_moments", "adam_moments_dtype": "optimizer_moments",
    "fsdp_mixed_precision": "mp_mode", "mixed_precision_mode": "mp_mode",
    # gradient accumulation: micro-batches per data-parallel rank and step (NeMo's "GA", llm-foundry's "GradAccum")
    "ga": "grad_accum", "grad_accum_steps": "grad_accum", "gradient_accumulation": "grad_accum",
    "gradient_accumulation_steps": "grad_accum", "grad_acc": "grad_accum", "accumulation_steps": "grad_accum",
    # the MoE token dispatcher (Megatron-Core's --moe-token-dispatcher-type, the flex dispatcher's backend)
    "dispatcher": "moe_dispatcher", "token_dispatcher": "moe_dispatcher", "moe_token_dispatcher": "moe_dispatcher",
    "moe_token_dispatcher_type": "moe_dispatcher",  # (moe_flex_dispatcher_backend: its own column, rows.py)
    "ep_backend": "moe_dispatcher", "expert_parallel_comm_backend": "moe_dispatcher",
    # Megatron-LM's / Megatron-Bridge's argument names for plan and model fields
    "moe_a2a_overlap": "overlap_moe_comm", "a2a_overlap": "overlap_moe_comm",
    "overlap_moe_expert_parallel_comm": "overlap_moe_comm", "cpu_offloading_num_layers": "offload_layers",
    "account_for_embedding_in_pipeline_split": "account_for_embedding",
    "account_for_loss_in_pipeline_split": "account_for_loss",
    "decoder_first_pipeline_num_layers": "first_stage_layers", "decoder_last_pipeline_num_layers": "last_stage_layers",
    "use_distributed_optimizer": "distributed_optimizer", "recompute_granularity": "recompute",
    "activation_recompute": "recompute", "cp_comm_type": "cp_comm", "virtual_pipeline": "virtual_stages",
    "num_attention_heads": "num_heads", "num_query_groups": "num_kv_heads", "num_moe_experts": "num_experts",
    "moe_router_topk": "moe_top_k", "moe_shared_expert_intermediate_size": "shared_expert_ffn_hidden_size",
    # torchtitan's [parallelism] names (data_parallel_shard_degree: the FSDP degree)
    "tensor_parallel_degree": "tp", "pipeline_parallel_degree": "pp", "context_parallel_degree": "cp",
    "expert_parallel_degree": "ep", "expert_tensor_parallel_degree": "etp", "data_parallel_shard_degree": "fsdp",
    "compile": "torch_compile",
    # compiled tables' short shape, batch and time names ("layers", "hidden", "kv_heads", "global_batch_seqs")
    "layers": "num_layers", "n_layers": "num_layers", "hidden": "hidden_size", "d_model": "hidden_size",
    "heads": "num_heads", "n_heads": "num_heads", "kv_heads": "num_kv_heads", "ffn_hidden": "ffn_hidden_size",
    "vocab": "vocab_size", "global_batch_seqs": "global_batch", "global_batch_sequences": "global_batch",
    "iter_time_s": "iteration_time_s", "iter_time_ms": "iteration_time_ms", "params_b": "params_billion",
    "mfu_%": "mfu", "mfu_pct": "mfu", "mfu_percent": "mfu", "model_flops_utilization": "mfu",
    "model_flop_utilization": "mfu"}
# the words of a rate ("Tokens / sec / GPU", "TFLOP/s/GPU", "Tok/s/GPU") as HEADER_ALIASES spells them
RATE_WORDS = {"sec": "s", "second": "s", "seconds": "s", "tok": "tokens", "token": "tokens", "tflop": "tflops",
              "sample": "samples"}
# llm-foundry's one-letter rates: "Throughput (T/s/GPU)" is tokens, "(S/s)" samples (the first word of the rate)
RATE_COUNTS = {"t": "tokens", "s": "samples"}
# a batch column's unit: "GBS (tokens)", "GlobalBatchSize (T)" count tokens, not sequences
TOKEN_UNITS = ("tokens", "t", "tok")
# the units a header gives in parentheses ("Step time (s)", "Peak Memory (GB)"): part of the column's name;
# anything else in parentheses ("SeqLen (T)") is a label, dropped
UNITS = {"ms": "ms", "msec": "ms", "s": "s", "sec": "s", "seconds": "s", "gb": "gb", "gib": "gib"}
THROUGHPUT = ("throughput", "speed")  # "Throughput (tokens/s/GPU)": the unit is the column
THROUGHPUT_PER_GPU = ("throughput_per_gpu", "speed_per_gpu")  # "Throughput/GPU (tokens/s)": the unit per GPU


def _words(text: str) -> str:
    """``text`` in lower case, its words (camelCase too: "MicroBatchSize") joined by "_", a rate's "/" as "_per_"."""
    text = re.sub(r"(?<=[a-z])(?=[A-Z][a-z])", " ", text).lower()  # a capitalised word ("GiB" is none)
    text = re.sub(r"^(#|number\s+of|num\s+of|no\.\s*of)[\s\-_]*(of\s+)?", "num_", text)  # "# GPUs", "#-GPUs"
    parts = [re.sub(r"[\s\-.#_]+", "_", part.strip()).strip("_") for part in text.split("/")]
    if len(parts) > 1:
        parts = ["_".join(RATE_WORDS.get(w, w) for w in part.split("_")) for part in parts]
        parts[0] = RATE_COUNTS.get(parts[0], parts[0])
    return "_per_".join(parts)


def normalise_header(name: str) -> str:
    key = name.strip().lstrip("\ufeff").strip()
    if key.lower() in VTRAIN_HEADERS:
        return VTRAIN_HEADERS[key.lower()]
    bare, unit = key, ""
    paren = re.fullmatch(r"(.*?)\s*\(([^()]*)\)\s*", key)
    if paren:
        bare, unit = paren.group(1), _words(paren.group(2))
    norm = HEADER_ALIASES.get(_words(bare), _words(bare))
    if norm in THROUGHPUT and "_per_" in unit:
        norm = unit
    elif norm in THROUGHPUT_PER_GPU and "_per_" in unit:  # "Throughput/GPU (tokens/s)": a rate per GPU
        norm = unit if unit.endswith("_per_gpu") else f"{unit}_per_gpu"
    elif norm in ("global_batch", "global_batch_tokens") and unit in TOKEN_UNITS:
        norm = "global_batch_tokens"
    elif unit in UNITS:
        norm = f"{_words(bare)}_{UNITS[unit]}"
    return HEADER_ALIASES.get(norm, norm)


def read_measurements(path: str | Path, field: str = "validate.data") -> List[MeasuredRow]:
    """The rows of a measured-runs CSV (UTF-8, optionally with a BOM); a file that cannot be read as one is a
    one-line ConfigError naming ``field`` (the config key that gave the path)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{field}={path}: is a directory, not a CSV file")
    if not p.exists():
        raise ConfigError(f"{field}={path}: file not found")
    if not p.is_file():
        raise ConfigError(f"{field}={path}: is not a regular file")
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            text = fh.read()
        return _rows(_records(text), path, field)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{field}={path}: is not UTF-8 text (byte {err.start}: {err.reason})") from None
    except csv.Error as err:
        raise ConfigError(f"{field}={path}: is not a readable CSV ({err})") from None
    except OSError as err:
        raise ConfigError(f"{field}={path}: cannot be read ({err.strerror or err})") from None


# a Markdown table's rule line ("|---|:--:|"): no cells
_RULE = re.compile(r"\s*\|?(\s*:?-{3,}:?\s*\|)*\s*:?-{3,}:?\s*\|?\s*")


def _records(text: str) -> Iterator[List[str]]:
    """The cells of a table: comma-separated, or (where the header line has more of them than commas) tab-,
    semicolon- or pipe-separated as a table copied from a web page or a Markdown file is (a Markdown table's
    outer pipes and rule line dropped). Quoted cells may hold the delimiter and line breaks."""
    head = next((line for line in text.splitlines() if line.strip()), "")
    delimiter = max((",", "\t", ";", "|"), key=lambda d: (head.count(d), d == ","))
    if delimiter != "|":
        yield from csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
        return
    for line in text.splitlines():
        if _RULE.fullmatch(line):
            continue
        text = line.strip()
        text = text[1:] if text.startswith("|") else text
        text = text[:-1] if text.endswith("|") else text
        yield [cell.strip() for cell in text.split("|")] if text else []


def _rows(reader: Iterator[List[str]], path: str | Path, field: str) -> List[MeasuredRow]:
    try:
        first = next(reader)
        while not first or all(not x.strip() for x in first):  # blank lines before the header
            first = next(reader)
        header = [normalise_header(h) for h in first]
    except StopIteration:
        raise ConfigError(f"{field}={path}: the file is empty") from None
    repeated = sorted({h for h in header if header.count(h) > 1 and h})
    if repeated:
        raise ConfigError(f"{field}={path}: column(s) {', '.join(repeated)} appear more than once "
                          "(each column must be named once)")
    missing = [c for c in REQUIRED if c not in header]
    if not any(c in header for c in BATCH):
        missing.append(" or ".join(BATCH))
    if "model" not in header:
        missing += [c for c in SHAPE if c not in header]
    if not any(c in header for c in GPUS):
        missing.append(" or ".join(GPUS))
    if not any(c in header for c in MEASURED):
        missing.append(" or ".join(MEASURED))
    if missing:
        raise ConfigError(f"{field}={path}: missing required column(s) {', '.join(missing)}")
    rows = []
    longer = []  # rows with cells beyond the header's columns (dropped: they name no column)
    for i, rec in enumerate(reader, start=1):
        if not rec or all(not x.strip() for x in rec):
            continue
        if len(rec) > len(header) and any(x.strip() for x in rec[len(header):]):
            longer.append(i)
        rows.append(MeasuredRow(i, dict(zip(header, rec))))
    if longer:
        log.warning(f"{field}={path}: {len(longer)} row(s) (row {longer[0]} first) have more cells than the header's "
                    f"{len(header)} columns; the cells beyond them are ignored")
    if not rows:
        raise ConfigError(f"{field}={path}: no data rows")
    for row in rows:
        check_cells(row, f"{field}={path}")
    return rows


# cells checked in every row (where they hold a plain number: a unit, a placeholder or a spelling is the row
# reader's): counts are whole numbers >= 0, times finite and > 0, measured rates and sizes finite and >= 0
COUNT_COLUMNS = frozenset({
    "global_batch", "global_batch_tokens", "micro_batch", "local_batch", "grad_accum", "hidden_size", "num_heads",
    "num_kv_heads", "num_layers", "ffn_hidden_size", "vocab_size", "seq_len", "tp", "pp", "dp", "cp", "ep", "etp",
    "num_gpus", "num_nodes", "gpus_per_node", "virtual_stages", "layers_per_virtual_stage", "num_experts",
    "moe_top_k", "first_stage_layers", "last_stage_layers", "zero_stage", "fsdp", "recompute_num_layers",
    "offload_layers"})
# torchtitan's configs write -1 for "derived": the global batch (local batch x dp) and the FSDP degree (the GPUs
# left over the other degrees), torchtitan/config/job_config.py
DERIVED_MINUS_ONE = frozenset({"global_batch", "fsdp"})
TIME_COLUMNS = frozenset({"iteration_time_ms", "iteration_time_s", "step_time_s"})
AMOUNT_COLUMNS = frozenset({"tokens_per_s_per_gpu", "tokens_per_s", "samples_per_s", "model_tflops_per_gpu", "mfu",
                            "peak_memory_gib", "peak_memory_gb", "params_billion"})


def check_cells(row: MeasuredRow, source: str) -> None:
    """A non-finite, negative or fractional number where a count belongs, or a time that is not a finite number
    > 0, refuses the file: one line naming it (``source``: ``validate.data=<path>``), the row and the column."""
    for column, raw in row.values.items():
        if column not in COUNT_COLUMNS and column not in TIME_COLUMNS and column not in AMOUNT_COLUMNS:
            continue
        try:
            value = float(raw.strip())
        except (ValueError, AttributeError):
            continue  # empty, a placeholder, a unit ("8K") or a spelling: the row reader's to judge
        if column in TIME_COLUMNS:
            bad, rule = not (math.isfinite(value) and value > 0), "must be a finite number > 0 (a time)"
        elif column in COUNT_COLUMNS:
            bad = not (math.isfinite(value) and value == int(value) and (value >= 0 or (
                value == -1 and column in DERIVED_MINUS_ONE)))
            rule = "must be a whole number >= 0 (a count)"
        else:
            bad, rule = not (math.isfinite(value) and value >= 0), "must be a finite number >= 0"
        if bad:
            raise ConfigError(f"{source}: row {row.index}: {column}={raw.strip()}: {rule}")
