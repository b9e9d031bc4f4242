"""Names and numbers as published tables write them: GPUs, stacks, models, enum values (precision, schedule,
recompute, dispatcher, CP scheme), ZeRO stages and numeric cells, each as the config name or value vtrain uses.

Pure string functions over the ``gpu/``, ``stack/`` and ``model/`` config names; the row builder
(:mod:`vtrain.validation.rows`) and the pasted-table spellings (:mod:`vtrain.validation.spellings`) use them.
"""
from __future__ import annotations

import re
from typing import Dict, Tuple

from vtrain.workload.enums import CpComm, MoeDispatcher, Precision, Recompute, Schedule


def table_key(raw: str) -> str:
    """A name as a published table writes it, as the key of the alias tables below: case, "-", " " and
    parentheses aside ("FP8 (delayed)" is fp8_delayed)."""
    return re.sub(r"[\s\-()]+", "_", raw.strip().lower()).strip("_")


# what published tables call the GPUs of gpu/ (case, "-" and " " aside): the SXM part where a name leaves it
# open, the 80 GB A100 (the training part of DGX A100 / p4de), a rack name for its GPU
GPU_ALIASES = {"h100": "h100_sxm", "h100_80gb": "h100_sxm", "h100_sxm5": "h100_sxm", "h100_sxm5_80gb": "h100_sxm",
               "h100_sxm_80gb": "h100_sxm", "a100": "a100_80gb", "a100_sxm": "a100_80gb", "a100_sxm4_80gb": "a100_80gb",
               "a100_sxm4_40gb": "a100_40gb", "v100_32gb": "v100", "v100_sxm2": "v100", "h200_sxm": "h200",
               "h200_141gb": "h200", "b200_sxm": "b200", "dgx_b200": "b200", "hgx_b200": "b200", "b300_sxm": "b300",
               "gb200_nvl72": "gb200", "gb300_nvl72": "gb300", "h800_sxm": "h800", "h800_80gb": "h800",
               "b200_180gb": "b200", "b300_288gb": "b300",
               # NVIDIA's named SuperPODs: Selene (DGX A100 80GB), Eos (DGX H100)
               "selene": "a100_80gb", "eos": "h100_sxm"}
# what gpu_key drops from a GPU name: the vendor or system before it ("NVIDIA H100", "DGX H100", "Tesla V100"),
# the SXM form factor (the part of every gpu/ config) and the memory technology ("H100 80GB HBM3"); the memory
# size stays, since it tells parts apart (A100 40GB and 80GB)
GPU_PREFIXES = ("nvidia", "dgx", "hgx", "tesla", "grace", "hopper", "blackwell", "ampere")
GPU_NOISE = re.compile(r"^(sxm\d?|hbm\d?e?)$")
# what a name may add to a GPU that has one config only ("B200 (HGX)", "GB200 NVL72 (186GB)"): the system and
# the memory size, dropped where the name is no gpu/ config with them
GPU_SYSTEM = re.compile(r"^(hgx|dgx|nvl\d+|superchip|\d+(gb|gib))$")
# another part of a GPU than the one its gpu/ config models ("H100 PCIe", "H100 NVL", a MIG slice): never read as it
GPU_VARIANT = re.compile(r"^(pcie|nvl|mig|\d+g\.\d+gb)$")
# a count of GPUs joined to the name ("8xH100", "H100x8"); "8x H100" splits into words and loses it anyway
GPU_COUNT = re.compile(r"^\d+x(?=[a-z])|(?<=\d)x\d+$")


def gpu_key(raw: str) -> str:
    """A ``gpu`` cell as a gpu/ config name: :func:`table_key`, then the vendor, SXM and HBM words dropped
    (:data:`GPU_PREFIXES`, :data:`GPU_NOISE`) where the name is not an alias already, then :data:`GPU_ALIASES`
    ("NVIDIA A100-SXM4-80GB" is a100_80gb, "H100 80GB HBM3" h100_sxm, "H200 SXM 141GB" h200); a GPU count
    joined to the name ("8xH100", "H100x8": :data:`GPU_COUNT`) is dropped."""
    key = "_".join(GPU_COUNT.sub("", w) for w in table_key(raw).split("_"))
    if key in GPU_ALIASES:
        return GPU_ALIASES[key]
    words = key.split("_")
    while len(words) > 1 and words[0] in GPU_PREFIXES:
        words = words[1:]
    key = "_".join(w for i, w in enumerate(words) if i == 0 or not GPU_NOISE.match(w))
    key = GPU_ALIASES.get(key, key)
    if key not in _gpu_configs():
        bare = "_".join(w for i, w in enumerate(key.split("_")) if i == 0 or not GPU_SYSTEM.match(w))
        key = GPU_ALIASES.get(bare, bare) if GPU_ALIASES.get(bare, bare) in _gpu_configs() else key
    words = key.split("_")
    if key not in _gpu_configs() and not any(GPU_VARIANT.match(w) for w in words):
        # a system with its GPU among other words ("DGX H100 (8x H100 80GB)", "8x B200"): that GPU, if only one
        named = {GPU_ALIASES.get(w, w) for w in words} & set(_gpu_configs())
        key = named.pop() if len(named) == 1 else key
    return key


def _gpu_configs() -> Tuple[str, ...]:
    from vtrain.config.compose import group_options

    return tuple(group_options("gpu"))


# what published tables call the precisions, schedules and recompute modes (case, "-" and " " aside)
ENUM_ALIASES: Dict[type, Dict[str, str]] = {
    Precision: {"bf16_mixed": "bf16", "bfloat16": "bf16", "fp16_mixed": "fp16", "float16": "fp16",
                "fp8_delayed": "fp8", "fp8_current": "fp8", "fp8_tensorwise": "fp8", "fp8_hybrid": "fp8",
                "float8": "fp8", "fp8_cs": "fp8", "fp8_ds": "fp8", "fp8_mx": "mxfp8",
                "fp8_blockscaled": "fp8_blockwise", "fp8_block": "fp8_blockwise", "fp4": "nvfp4",
                "mx_fp8": "mxfp8", "nv_fp4": "nvfp4", "fp8_e4m3": "fp8", "fp8_hybrid_e4m3": "fp8",
                "mxfp8_e4m3": "mxfp8", "nvfp4_e2m1": "nvfp4", "fp8_subchannel": "fp8_blockwise",
                "fp8_sc": "fp8_blockwise", "fp8_bs": "fp8_blockwise", "16": "fp16", "32": "fp32"},
    # Megatron-Core's --cp-comm-type spellings, and what papers call the schemes
    CpComm: {"all_gather": "allgather", "ring": "p2p", "ring_attention": "p2p", "ulysses": "a2a",
             "all_to_all": "a2a", "alltoall": "a2a"},
    # Megatron-Core's dispatcher names and its flex dispatcher's backends (DeepEP, HybridEP: fused NVLink/RDMA
    # kernels holding SMs), torchtitan's expert_parallel_comm_backend ("standard": NCCL all-to-all)
    MoeDispatcher: {"a2a": "alltoall", "all_to_all": "alltoall", "alltoall_seq": "alltoall", "nccl": "alltoall",
                    "standard": "alltoall", "all_gather": "allgather", "deep_ep": "deepep", "hybrid_ep": "hybridep",
                    "flex": "deepep", "flex_deepep": "deepep", "flex_hybridep": "hybridep"},
    Schedule: {"interleaved_1f1b": "interleaved", "1f1b_interleaved": "interleaved", "vpp": "interleaved",
               "zb_h1": "zero_bubble", "zb": "zero_bubble", "zb_v": "zbv", "dualpipe_v": "dualpipev"},
    # an "Activation checkpointing" column holding a yes or a no: whole layers checkpointed (torch.utils.checkpoint
    # around each block, torchtitan's mode=full) or none
    Recompute: {"selective_recompute": "selective", "full_recompute": "full", "selective_ac": "selective",
                "full_ac": "full", "selective_core_attn": "selective",
                # torchtitan's SAC is per-op by default (activation_checkpoint.selective_ac_option = "op")
                "sac": "selective_op", "per_op_sac": "selective_op", "op_sac": "selective_op", "op": "selective_op",
                "selective_per_op_sac": "selective_op", "selective_per_op": "selective_op",
                "0": "none", "1": "full", "no": "none", "false": "none",
                "off": "none", "disabled": "none", "\u2717": "none", "\u2718": "none", "yes": "full", "true": "full",
                "on": "full", "enabled": "full", "\u2713": "full", "\u2714": "full"},
}
# the words of a precision that name the same format or say nothing of it (llm-foundry's "amp_bf16", "BF16
# (AMP)", TE's "FP8 (Delayed Scaling)", torchao's "float8 (rowwise)"), dropped or replaced before ENUM_ALIASES
PRECISION_WORDS = {"amp": "", "mixed": "", "scaling": "", "recipe": "", "te": "", "float8": "fp8", "bfloat16": "bf16",
                   "float16": "fp16", "float32": "fp32",
                   # torchao's MX recipe names: the GEMM backend and the scale rounding ("mxfp8_cublas_rceil")
                   "cublas": "", "cutlass": "", "rceil": "", "floor": "",
                   # the library ("torchao float8") and Lightning's "bf16-true" (bf16 without autocast)
                   "torchao": "", "true": ""}
# Megatron-Bridge's mixed-precision recipe names ("bf16_with_fp8_current_scaling_mixed"): the format after "with"
PRECISION_RECIPE = re.compile(r"^(bf16|fp16)_with_")


def enum_key(tp: type, raw: str) -> str:
    """A cell as the value of enum ``tp``: :func:`table_key`, the words of :data:`PRECISION_WORDS` for a
    precision, then :data:`ENUM_ALIASES`."""
    key = table_key(raw)
    if tp is Precision:
        key = PRECISION_RECIPE.sub("", key)
        key = "_".join(w for w in (PRECISION_WORDS.get(w, w) for w in key.split("_")) if w) or key
    key = ENUM_ALIASES.get(tp, {}).get(key, key)
    if tp is Recompute and key not in {r.value for r in Recompute}:
        # a mode with its details ("Full (uniform)", "selective (core_attn, moe_act)"): the mode
        key = next((m for m in ("full", "selective_op", "selective", "none") if key.startswith(m + "_")), key)
    return key


# what published tables call the software stacks of stack/ (a ``stack`` or ``framework`` column)
STACK_ALIASES = {"megatron": "megatron_core_te", "megatron_lm": "megatron_core_te", "megatron_core": "megatron_core_te",
                 "mcore": "megatron_core_te", "nemo": "megatron_core_te", "nemo_megatron": "megatron_core_te",
                 "megatron_bridge": "megatron_core_te", "transformer_engine": "megatron_core_te",
                 "megatron_deepspeed": "megatron_deepspeed_2022", "deepspeed_megatron": "megatron_deepspeed_2022",
                 "torchtitan": "torchtitan_fsdp2", "fsdp2": "torchtitan_fsdp2", "pytorch_fsdp": "torchtitan_fsdp2",
                 "fsdp": "torchtitan_fsdp2", "llm_foundry": "llm_foundry_fsdp", "composer": "llm_foundry_fsdp",
                 "mosaicml": "llm_foundry_fsdp", "torchtitan_compile": "torchtitan_fsdp2_compile",
                 "torchtitan_torch_compile": "torchtitan_fsdp2_compile",  # "torchtitan (torch.compile)"
                 "torchtitan_compiled": "torchtitan_fsdp2_compile"}
# Megatron-LM named on a GPU without FP8 tensor cores (A100, V100): the Megatron-LM of that era (SC'21 to 2022,
# before Megatron-Core and Transformer Engine), fp16 with fp32 master weights; a named Megatron-Core, NeMo or
# Megatron-Bridge stays megatron_core_te on any GPU
PRE_FP8_ALIASES = {"megatron": "megatron_lm_2021", "megatron_lm": "megatron_lm_2021"}
# what a framework's name carries besides the framework: a vendor before it ("MosaicML llm-foundry", "NVIDIA
# NeMo") and a version after it ("NeMo 24.09", "DeepSpeed 0.19.2", "Megatron-Bridge v0.2")
STACK_VENDORS = ("mosaicml", "nvidia", "microsoft", "meta", "pytorch")
STACK_VERSION = re.compile(r"(_v?\d+)+$")


def _stack_configs() -> Tuple[str, ...]:
    """The stack/ config names, read once (not a directory listing per row of a large CSV)."""
    from vtrain.config.compose import group_options

    return tuple(group_options("stack"))


def _stack_key(key: str, pre_fp8: bool = False) -> str:
    """A framework's name as a stack/ config name: itself or its alias (on a GPU without FP8 tensor cores
    :data:`PRE_FP8_ALIASES` first), else without its version, else also without its vendor
    (:data:`STACK_VERSION`, :data:`STACK_VENDORS`); unknown: the name as given."""
    aliases = {**STACK_ALIASES, **PRE_FP8_ALIASES} if pre_fp8 else STACK_ALIASES
    bare = STACK_VERSION.sub("", key)
    words = bare.split("_")
    unvended = "_".join(words[1:]) if len(words) > 1 and words[0] in STACK_VENDORS else bare
    for candidate in (key, bare, unvended):
        name = aliases.get(candidate, candidate)
        if name in _stack_configs():
            return name
    return aliases.get(key, key)


# what published tables call the models of model/ (after model_name's normalisation)
MODEL_ALIASES = {"gpt3_175b": "gpt175b", "gpt_175b": "gpt175b", "gpt3": "gpt175b", "gpt_1t": "gpt1t",
                 "mt_nlg_530b": "mtnlg530b", "megatron_turing_nlg_530b": "mtnlg530b", "llama3_1_8b": "llama3_8b",
                 "llama3_1_70b": "llama3_70b", "llama3_3_70b": "llama3_70b", "llama4_scout_17b_16e": "llama4_scout",
                 "llama4_maverick_17b_128e": "llama4_maverick",
                 "llama4_scout_17bx16e": "llama4_scout", "llama4_maverick_17bx128e": "llama4_maverick",
                 "qwen3_235b": "qwen3_235b_a22b",
                 "qwen3_30b": "qwen3_30b_a3b", "bloom": "bloom_176b", "bloom_7b": "bloom_7b1",
                 "llama1_65b": "llama_65b",
                 "deepseek_v3_671b": "deepseek_v3", "kimi_k2_1t": "kimi_k2"}


# what a Hugging Face model id carries after the model: the checkpoint's flavour ("Llama-2-7b-hf",
# "Llama3.1-70B-Instruct", "Kimi-K2-Instruct") and, after a parameter count, its revision ("Mixtral-8x7B-v0.1";
# not "DeepSeek-V3"): the same architecture
MODEL_FLAVOUR = re.compile(r"(_(hf|instruct|base|chat|pretrain|pretraining|pre_training))+$")
MODEL_SUFFIX = re.compile(r"(?<=\d[bmt])(_(hf|instruct|base|chat)|_v\d+(_\d+)*)+$")
# a context length after the model, as NeMo's tables name their long-context rows ("LLAMA3_8B_16k",
# "Llama3 70B 64K"): the same model, its sequence length in the row's seq_len
MODEL_CONTEXT = re.compile(r"_\d+k(_(context|ctx|seq|seqlen))?$")


# a model named by its size alone ("70b", "760m", llm-foundry's benchmark table): the family of the stack's own
# benchmark shapes, where the stack has one (llm-foundry: the MPT shapes of model/mpt_*.yaml)
BARE_SIZE = re.compile(r"\d+(\.\d+)?[mbt]")
STACK_MODEL_FAMILY = {"llm_foundry_fsdp": "mpt"}


def _model_configs() -> Tuple[str, ...]:
    """The model/ config names, read once."""
    from vtrain.config.compose import group_options

    return tuple(group_options("model"))


def model_name(raw: str) -> str:
    """A ``model`` cell as a model/ config name: a model/ name as it is (``gpt_1_7b``); else case, spaces,
    dashes and dots aside ("Llama-3.1-70B", "Nemotron-4 340B", "Mixtral 8x22B"), a Hugging Face
    organisation before "/" ("meta-llama/Llama-3.1-8B") and a checkpoint suffix (:data:`MODEL_SUFFIX`,
    :data:`MODEL_FLAVOUR`) dropped, a family's version joined to it (llama3, qwen3, nemotron4, gpt3;
    "DeepSeekV3" as deepseek_v3), a leading "meta_" dropped, then :data:`MODEL_ALIASES`; a context length
    after a known model (:data:`MODEL_CONTEXT`, "LLAMA3_8B_16k") is dropped."""
    label = re.sub(r"\s*\([^()]*\)\s*$", "", raw.strip()) or raw.strip()  # "Llama3 8B (16k)": a label after it
    key = re.sub(r"[\s.\-]+", "_", label.lower().rsplit("/", 1)[-1]).strip("_")
    if key in _model_configs():
        return key
    key = MODEL_FLAVOUR.sub("", MODEL_SUFFIX.sub("", key))
    key = re.sub(r"(?<=[a-z])v(?=\d)", "_v", key)
    key = re.sub(r"^meta_(llama)", r"\1", key)
    key = re.sub(r"^(llama|qwen|nemotron|gpt)_(\d)", r"\1\2", key)
    name = MODEL_ALIASES.get(key, key)
    if name not in _model_configs() and MODEL_CONTEXT.search(key):
        bare = MODEL_CONTEXT.sub("", key)
        name = MODEL_ALIASES.get(bare, bare) if MODEL_ALIASES.get(bare, bare) in _model_configs() else name
    return name


# numbers as tables write them: "14,123.5" (thousands grouped), "8K" (a multiple), "1200 ms" (a unit)
_GROUPED = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")
_SUFFIXED = re.compile(r"(.*?[\d.])\s*([a-z]+)")  # a number and the letters after it ("1e3" has none)
# K and M: binary for a sequence length (4K, 8K, 128K contexts are 4096, 8192, 131072 tokens), decimal for
# everything else (a rate of "14.1K tokens/s", a batch of "1K" sequences)
_MULTIPLES = {"k": 1e3, "m": 1e6}
_BINARY_MULTIPLES = {"k": 2.0 ** 10, "m": 2.0 ** 20}
_TOKEN_COUNTS = ("seq_len", "max_seq_len")
# a unit after a number, for a column whose name ends in a unit of the same quantity ("1.2 s" in
# iteration_time_ms is 1200): (quantity, size in the base unit)
_UNITS = {"ms": ("time", 1e-3), "msec": ("time", 1e-3), "s": ("time", 1.0), "sec": ("time", 1.0),
          "gib": ("bytes", 2.0 ** 30), "gb": ("bytes", 1e9)}


def cell_number(column: str, raw: str) -> float:
    """A numeric cell of ``column`` as a float (:data:`_GROUPED`, :data:`_MULTIPLES`, :data:`_UNITS`);
    ValueError when it is none."""
    text, suffix = raw.strip().lower(), ""
    if "_" in text:  # Python's float() reads "24_0" as 240; a table never means that
        raise ValueError(f"{raw!r} is not a number of {column}")
    suffixed = _SUFFIXED.fullmatch(text)
    if suffixed is not None and suffixed.group(2) != "e":
        text, suffix = suffixed.groups()
    value = float(text.replace(",", "") if _GROUPED.fullmatch(text) else text)
    if not suffix:
        return value
    if suffix in _MULTIPLES:
        return value * (_BINARY_MULTIPLES if column in _TOKEN_COUNTS else _MULTIPLES)[suffix]
    unit = _UNITS.get(column.rsplit("_", 1)[-1])
    given = _UNITS.get(suffix)
    if unit is None or given is None or unit[0] != given[0]:
        raise ValueError(f"{raw!r} is not a number of {column}")
    return value * given[1] / unit[1]


# what tables write for a ZeRO stage ("ZeRO-3", "zero3", "Stage 2") and PyTorch FSDP's sharding strategies
# (FULL_SHARD shards parameters, gradients and optimizer states: stage 3; SHARD_GRAD_OP keeps parameters
# whole: stage 2; the hybrid strategies shard within a node, `sharding_strategy`); a bare number as it is
SHARDING_STRATEGIES = {"full_shard": 3, "shard_grad_op": 2, "hybrid_shard": 3, "_hybrid_shard_zero2": 2,
                       "hybrid_shard_zero2": 2, "no_shard": 0}
_ZERO_WORDS = re.compile(r"(?:zero|stage|zero_stage)_?(\d)")


def zero_stage_cell(raw: str) -> str:
    """A ZeRO-stage cell as its number ("ZeRO-3", "zero3", "stage 2", "FULL_SHARD"); anything else as written."""
    key = table_key(raw)
    if key in SHARDING_STRATEGIES:
        return str(SHARDING_STRATEGIES[key])
    words = _ZERO_WORDS.fullmatch(key)
    return words.group(1) if words else raw
