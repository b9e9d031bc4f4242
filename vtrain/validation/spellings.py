"""Cells as published tables and users write them, turned into the values vtrain's row builder reads.

Each function takes one cell as pasted and returns the canonical cell(s) it stands for, or None when the cell
says nothing this module understands (the row builder then reads it as it is and names it in its one-line
error). Used by :func:`vtrain.validation.published.pasted_row` on every measured row.

- framework names with their release and the stack they run on ("Megatron-Bridge / Megatron-Core (NeMo
  26.02.01)", "NeMo 24.07 (Megatron-Core)", "Composer + llm-foundry (FSDP, FlashAttention)", "Megatron-LM
  (2020)"): the first named part that is a known framework, and the release (:func:`framework_cell`);
- precisions with their remarks ("fp16 mixed precision", "bf16 (MP mode PURE)", "FP8 (per-tensor; recipe not
  stated)", "FP8 blockwise (128x128 w / 1x128 act)", "FP8-CS", "FP8-MX"): :func:`precision_cells`;
- GPU names with the system in parentheses ("A100 (DGX-A100, 2020; 40GB assumed)", "V100-SXM3-32GB (DGX-2)"):
  the memory size a remark states picks the part (:func:`gpu_cell`);
- data-parallel modes ("DDP (FSDP=0; ...)", "PyTorch FSDP FULL_SHARD", "Megatron FSDP (FSDP=64)", "ZeRO-3"):
  :func:`sharding_cells`;
- a model's variant in parentheses ("DeepSeekV3 (w/o MTP)", "Qwen3_30B_a3B (tokendrop)"): :func:`model_variant_cells`.
"""
from __future__ import annotations

import re
from typing import Dict, Optional, Tuple

from vtrain.errors import ConfigError
from vtrain.validation.names import (
    SHARDING_STRATEGIES,
    _gpu_configs,
    _stack_configs,
    _stack_key,
    enum_key,
    gpu_key,
    table_key,
)
from vtrain.workload.enums import Precision

# what separates the frameworks a name lists ("Megatron-Bridge / Megatron-Core", "Composer + llm-foundry") and
# a remark in parentheses after them ("NeMo 24.07 (Megatron-Core)")
_FRAMEWORK_PARTS = re.compile(r"[/+(),;]|\band\b|\bon\b")
# a release as NVIDIA's containers number them (YY.MM, YY.MM.patch) or a year ("Megatron-LM (2020)")
_RELEASE = re.compile(r"\b(\d{2}\.\d{2}(?:\.\d+)?)\b")


def framework_cell(raw: str, pre_fp8: bool = False) -> Optional[Tuple[str, str]]:
    """(the framework's name as :func:`vtrain.validation.rows.stack_name` reads it, its release or "") of a
    ``framework`` cell naming several parts; None when the cell as a whole already names a stack (or none of its
    parts does). The first part that names a stack/ config wins: "Megatron-Bridge / Megatron-Core (NeMo 26.02)"
    is Megatron-Bridge (megatron_core_te), "Composer + llm-foundry (FSDP, FlashAttention)" Composer
    (llm_foundry_fsdp), "Megatron-LM (2020)" Megatron-LM (on a GPU without FP8 tensor cores the 2021 stack)."""
    whole = _stack_key(table_key(raw).replace(".", "_"), pre_fp8)
    release = _RELEASE.search(raw)
    found = release.group(1) if release else ""
    if whole in _stack_configs():
        return (raw, found) if found else None
    for part in _FRAMEWORK_PARTS.split(raw):
        key = table_key(part).replace(".", "_")
        if key and _stack_key(key, pre_fp8) in _stack_configs():
            return re.sub(r"\s+\d+(\.\d+)*$", "", part.strip()), found
    # a framework followed by its settings in words ("DeepSpeed ZeRO-3", "Megatron-LM with SP"): the longest
    # leading words that name one
    words = table_key(raw).replace(".", "_").split("_")
    for n in range(len(words) - 1, 0, -1):
        if _stack_key("_".join(words[:n]), pre_fp8) in _stack_configs():
            return "_".join(words[:n]), found
    return None


# the remarks a precision carries that name no other format: the kind of mixed precision, the scaling granularity
# of per-tensor FP8, what the source says it does not know; "MP mode" (Composer's FSDP mixed_precision) is a cell
_PRECISION_REMARKS = re.compile(r"\b(mixed|precision|per[-\s]?tensor|recipe|not|stated|unknown|amp|autocast)\b")
_MP_MODE = re.compile(r"\bMP\s*mode\s*[:=]?\s*(\w+)", re.IGNORECASE)
# a blockwise-scaled FP8 described by its blocks ("FP8 blockwise (128x128 w / 1x128 act)", TE Float8BlockScaling)
_BLOCKWISE = re.compile(r"\bblock(wise|[-\s]?scaled|[-\s]?scaling)?\b", re.IGNORECASE)


def _precision_value(text: str) -> Optional[str]:
    key = enum_key(Precision, text)
    return key if key in {p.value for p in Precision} else None


def precision_cells(raw: str) -> Optional[Dict[str, str]]:
    """The ``precision`` (and Composer's ``mp_mode``) a precision cell with remarks states, or None when the
    cell reads as a precision already (or as none at all): "bf16 (MP mode PURE)" is bf16 with mp_mode PURE,
    "fp16 mixed precision" fp16, "FP8 (per-tensor; recipe not stated)" per-tensor fp8 (delayed or current
    scaling, one format here), "FP8 blockwise (128x128 w / 1x128 act)" fp8_blockwise."""
    if _precision_value(raw) is not None:
        return None
    out: Dict[str, str] = {}
    mode = _MP_MODE.search(raw)
    if mode:
        out["mp_mode"] = mode.group(1).upper()
    head = re.split(r"[(\[]", _MP_MODE.sub("", raw), maxsplit=1)[0]
    if _BLOCKWISE.search(raw) and _precision_value(head.split()[0] if head.split() else "") == "fp8":
        out["precision"] = Precision.FP8_BLOCKWISE.value
        return out
    for text in (head, _PRECISION_REMARKS.sub(" ", head), _PRECISION_REMARKS.sub(" ", raw.replace("(", " "))):
        value = _precision_value(" ".join(text.replace(";", " ").split()))
        if value is not None:
            out["precision"] = value
            return out
    return None


# a memory size a GPU name or its remark states ("40GB assumed", "80 GB")
_MEMORY = re.compile(r"(\d+)\s*GB\b", re.IGNORECASE)


def gpu_cell(raw: str) -> Optional[str]:
    """A GPU name with a remark in parentheses as a gpu/ config name: the name before the remark, with the memory
    size the remark states where that picks a part ("A100 (DGX-A100, 2020; 40GB assumed)" is a100_40gb, not the
    80 GB part a bare "A100" is); None when the whole cell is a gpu/ name already or the name is none."""
    if gpu_key(raw) in _gpu_configs() and "(" not in raw:
        return None
    name, _, remark = raw.partition("(")
    if not name.strip():
        return None
    base = gpu_key(name)
    size = _MEMORY.search(remark) if not _MEMORY.search(name) else None
    if size is not None:
        sized = gpu_key(f"{name.strip()} {size.group(1)}GB")
        if sized in _gpu_configs():
            return sized
    return base if base in _gpu_configs() else None


# PyTorch DDP / Megatron's DDP (no sharding beyond the stack's distributed optimizer), and the FSDP families
_DDP = re.compile(r"^\s*(ddp|data[-\s]parallel|distributed\s+data\s+parallel)\b", re.IGNORECASE)
_FSDP_DEGREE = re.compile(r"\bfsdp\s*[=:]\s*(\d+)", re.IGNORECASE)
_ZERO = re.compile(r"\bzero[-_\s]?(?:stage[-_\s]?)?([0-3])\b", re.IGNORECASE)


def sharding_cells(raw: str) -> Dict[str, str]:
    """The sharding cells (``fsdp``, ``sharding_strategy``, ``zero_stage``) a data-parallel mode cell states:
    "DDP (FSDP=0; ...)" none (the stack's own optimizer sharding stays), "Megatron FSDP (FSDP=64)" parameters,
    gradients and optimizer states sharded over groups of 64 ranks, "PyTorch FSDP FULL_SHARD" (any PyTorch FSDP
    strategy name), "ZeRO-3"; a one-line error for a mode none of these names."""
    if _DDP.match(raw):
        return {}
    degree = _FSDP_DEGREE.search(raw)
    if degree is not None:
        return {"fsdp": degree.group(1)} if int(degree.group(1)) > 0 else {}
    for word in re.split(r"[\s,;()]+", raw):
        if table_key(word) in SHARDING_STRATEGIES:
            return {"sharding_strategy": word}
    zero = _ZERO.search(raw)
    if zero is not None:
        return {"zero_stage": zero.group(1)}
    if re.search(r"\bfsdp\b", raw, re.IGNORECASE):  # FSDP named without a strategy: PyTorch's default, FULL_SHARD
        return {"sharding_strategy": "FULL_SHARD"}
    raise ConfigError(f"zero_or_fsdp={raw}: names no data-parallel mode (DDP, FSDP=<n>, a PyTorch FSDP "
                      "sharding strategy such as FULL_SHARD, or ZeRO-<stage>)")


# a model's variant after its name, as NVIDIA's MoE tables write it: token dropping with Megatron-Core's capacity
# factor 1.0 (Megatron-Bridge's token-drop benchmarks: moe_expert_capacity_factor=1.0 with
# moe_pad_expert_input_to_capacity, the MoE model zoo's "Token Drop training" flags), dropless, with or without
# DeepSeek-V3's multi-token-prediction module
MODEL_VARIANTS = {"tokendrop": {"capacity_factor": "1.0"}, "token_drop": {"capacity_factor": "1.0"},
                  "dropless": {"capacity_factor": "none"}, "w_o_mtp": {"mtp_layers": "0"},
                  "without_mtp": {"mtp_layers": "0"}, "no_mtp": {"mtp_layers": "0"}, "w_mtp": {"mtp_layers": "1"},
                  "with_mtp": {"mtp_layers": "1"}}


def model_variant_cells(raw: str) -> Dict[str, str]:
    """The cells a model's parenthesised variant sets (:data:`MODEL_VARIANTS`); {} for none or another label."""
    match = re.search(r"\(([^()]*)\)\s*$", raw)
    if match is None:
        return {}
    return dict(MODEL_VARIANTS.get(re.sub(r"[^a-z0-9]+", "_", match.group(1).lower()).strip("_"), {}))
