"""What a framework's own recipe for a model sets, for a row that names the framework and the model but not the
setting: the cells are the recipe's, read from the framework's code (each entry cites it), and apply only where
the row leaves that cell empty and, for a recipe tied to one layout, where the row states that layout.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Tuple

from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.names import cell_number, enum_key, gpu_key, model_name, table_key
from vtrain.workload.enums import Precision

# The micro-batch a preset runs, a cell no table prints: where a row states another one that fits only by a
# recompute the preset does not run (Megatron-Core recomputes nothing unless told, and runs out of memory rather
# than recompute unasked), vtrain.validation.run.simulate_row simulates the preset's micro-batch in its place
PRESET_MICRO_BATCH = "preset_micro_batch"


@dataclass(frozen=True)
class Recipe:
    framework: str  # the framework's leading name as table_key writes it (:func:`_framework`)
    model: str  # the model/ config
    cells: Mapping[str, str]  # what the recipe sets
    layout: Mapping[str, int] = field(default_factory=dict)  # the cells the row must state so (empty: any layout)
    # the GPU (gpu/ name), precision (its value) and framework releases the recipe is for (empty: any)
    gpu: str = ""
    precisions: Tuple[str, ...] = ()
    releases: Tuple[str, ...] = ()


# Megatron-Bridge scripts/performance/configs/qwen/qwen3_workload_base_configs.py (a version after 26.02.01; its
# presets are applied to the 26.02 releases' rows of the same layout): Qwen3 30B-A3B on 8 Blackwell GPUs, EP8,
# global batch 512, the flex dispatcher with HybridEP and TE CUDA graphs of the router and the dispatch
# preprocessing (and of attention where the preset names it)
_QWEN3_30B = {"num_gpus": 8, "tp": 1, "pp": 1, "ep": 8, "global_batch": 512}
_BRIDGE_26 = ("26.02", "26.02.01")
_ROUTER_GRAPHS = {"moe_dispatcher": "hybridep", "cuda_graph_scope": "moe_router,moe_preprocess"}
_GPT_OSS = {"num_gpus": 64, "tp": 1, "global_batch": 1280}
_ALL_GRAPHS = {"cuda_graph_scope": "attn,moe_router,moe_preprocess"}
_NORM_ACT = {"recompute_modules": "layernorm,moe_act"}  # Megatron-Bridge sets granularity selective with them


# DeepSeek-V3 in Megatron-Bridge's scripts/performance (NVIDIA-NeMo/Megatron-Bridge): every release's
# set_deepseek_v3_common_configs sets recompute_granularity "selective", moe_router_force_load_balancing and bf16
# gradient reduction; the recipe (src/megatron/bridge/recipes/deepseek/deepseek_v3.py, _deepseek_v3_common) keeps
# Adam's moments in bf16 (exp_avg_dtype, exp_avg_sq_dtype) and, for a script that passes layout=None, takes the
# pipeline layout from its layout_map by (pp, vp): 16 positions ((16,1), (8,2), (4,4), (2,8) on later versions)
# are [embedding + 4 layers], 14 x [4 layers], [1 layer + MTP + loss]. Blackwell presets recompute mla_up_proj
# (deepseek_llm_pretrain.py of 25.09, workload_base_configs.py of 25.11, deepseek_workload_base_configs.py V1/V2 of
# the 26.02 releases); the 26.02 presets run the flex dispatcher with HybridEP (moe_flex_dispatcher_backend,
# moe_a2a_overlap=False), the GB200 one with TE CUDA graphs of attention, router and dispatch preprocessing;
# 25.09 and 25.11 build the Blackwell recipes with enable_deepep=False (NCCL all-to-all, vtrain's default).
# H100 (1,024 GPUs, TP2 PP8 VP4 EP64): layout "Et|(tt|)*30mL", DeepEP, recompute mla_up_proj and mlp,
# set_moe_a2a_overlap_overrides (overlap_moe_expert_parallel_comm, delay_wgrad_compute), overlap_grad_reduce off.
_DSV3 = "deepseek_v3"
_DSV3_COMMON = {"optimizer_moments": "bf16"}
_DSV3_LAYOUT_16 = "Et*4|(t*4|)*14tmL"
_DSV3_16_POSITIONS = ({"pp": 16}, {"pp": 8, "virtual_stages": 2}, {"pp": 4, "virtual_stages": 4},
                      {"pp": 2, "virtual_stages": 8})
_BLACKWELL = ("b200", "b300", "gb200", "gb300")
_DSV3_BLACKWELL_PRESETS = ({"num_gpus": 256, "pp": 16, "ep": 8}, {"num_gpus": 256, "pp": 4, "virtual_stages": 4,
                           "ep": 64}, {"num_gpus": 256, "pp": 2, "virtual_stages": 8, "ep": 32, "micro_batch": 2})
_DSV3_H100 = {"num_gpus": 1024, "tp": 2, "pp": 8, "virtual_stages": 4, "ep": 64}
_DEEPSEEK_V3: Tuple[Recipe, ...] = (
    tuple(Recipe("megatron_bridge", _DSV3, {**_DSV3_COMMON, "pipeline_layout": _DSV3_LAYOUT_16}, positions)
          for positions in _DSV3_16_POSITIONS)
    # a row without the MTP module ("w/o MTP"): the same positions, the loss alone after the last layer
    + tuple(Recipe("megatron_bridge", _DSV3, {"pipeline_layout": _DSV3_LAYOUT_16.replace("m", "")},
                   {**positions, "mtp_layers": 0}) for positions in _DSV3_16_POSITIONS)
    + tuple(Recipe("megatron_bridge", _DSV3, {"recompute_modules": "mla_up_proj"}, preset, gpu)
            for preset in _DSV3_BLACKWELL_PRESETS for gpu in _BLACKWELL)
    + tuple(Recipe("megatron_bridge", _DSV3, {"moe_dispatcher": "hybridep"}, preset, gpu, releases=_BRIDGE_26)
            for preset in _DSV3_BLACKWELL_PRESETS for gpu in _BLACKWELL)
    + (Recipe("megatron_bridge", _DSV3, {"cuda_graph_scope": "attn,moe_router,moe_preprocess"},
              _DSV3_BLACKWELL_PRESETS[1], "gb200", releases=_BRIDGE_26),
       Recipe("megatron_bridge", _DSV3, {**_DSV3_COMMON, "pipeline_layout": "Et|(tt|)*30mL", "moe_dispatcher": "deepep",
              "recompute_modules": "mla_up_proj,mlp", "overlap_moe_comm": "true", "overlap_grad_reduce": "false"},
              _DSV3_H100, "h100_sxm"))
)

# Qwen3 30B-A3B as each release's scripts/performance ran it where the rows' layout is not the later presets' above
# (docs/moe.md "Qwen3-30B-A3B across Megatron-Bridge releases" gives each version read):
# - 25.09, scripts/performance/configs/qwen3/qwen3_30b_a3b_llm_pretrain.py (the 25.09 layout, version 4054233): every
#   preset token-drops by default (the rows' "(tokendrop)" label: capacity 1.0) and the GB200 / B200 ones replay the
#   whole iteration from a CUDA graph (scope "full_iteration"); the graph is not applied until the GPU work of this
#   model is priced right (docs/moe.md: applied, rows 150/151 read -22/-15% and the source goes above 10%);
# - 26.02, scripts/performance/configs/qwen/qwen3_workload_base_configs.py before PR #2499 (2026-02-23, in 26.02.01:
#   the B200 preset to HybridEP at micro-batch 4): QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_*_V1 at the default micro-batch
#   1, TE graphs of the router and the dispatch preprocessing, the B200 builder's NCCL all-to-all;
# - 26.02 and 26.02.01, H100 (PP2 VP12 EP8; global batch 1024 from PR #2280, 2026-02-09): the flex dispatcher with
#   the base config's DeepEP backend (PR #2499's account of the builders at 26.02); the HybridEP H100 preset (PR
#   #2500, for the r0.3.0 line) was closed unmerged, so both releases ran this one. The version read before #2280
#   also sets moe_a2a_overlap=True, not applied: docs/moe.md says why
_QWEN3_30B_RELEASES: Tuple[Recipe, ...] = (
    Recipe("megatron_bridge", "qwen3_30b_a3b", {"cuda_graph_scope": "moe_router,moe_preprocess"},
           {**_QWEN3_30B, "micro_batch": 1}, "b200", releases=("26.02",)),
    Recipe("megatron_bridge", "qwen3_30b_a3b", {"moe_dispatcher": "deepep"},
           {"num_gpus": 16, "tp": 1, "pp": 2, "virtual_stages": 12, "ep": 8, "global_batch": 1024}, "h100_sxm",
           releases=_BRIDGE_26),
)

RECIPES: Tuple[Recipe, ...] = (
    # Megatron-Bridge src/megatron/bridge/recipes/llama/llama3.py, llama31_405b_pretrain_config:
    # account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True (the embedding and
    # the loss each take a layer's slot of the pipeline split: 126 layers + 2 on PP16 x VP8 is one per chunk);
    # its scripts/performance configs build on this recipe, whatever their parallel sizes
    Recipe("megatron_bridge", "llama3_1_405b", {"account_for_embedding": "true", "account_for_loss": "true"}),
    # NeMo-Megatron-Launcher launcher_scripts/conf/training/gpt3/175b.yaml (NeMo 1.x, the launcher's own tables):
    # tensor 4 x pipeline 8, micro-batch 1, global batch 2048, virtual_pipeline_model_parallel_size 12
    # ("interleaved pipeline, set to maximum"), sequence parallelism on, no activation checkpointing
    Recipe("nemo", "gpt175b", {"virtual_stages": "12"},
           {"tp": 4, "pp": 8, "micro_batch": 1, "global_batch": 2048}),
    Recipe("megatron_bridge", "qwen3_30b_a3b", _ROUTER_GRAPHS, {**_QWEN3_30B, "micro_batch": 8}, "gb300",
           releases=_BRIDGE_26),  # QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_*_V1
    Recipe("megatron_bridge", "qwen3_30b_a3b", _ROUTER_GRAPHS, {**_QWEN3_30B, "micro_batch": 8}, "b300",
           releases=_BRIDGE_26),  # ..._B300_*_V1
    Recipe("megatron_bridge", "qwen3_30b_a3b", _ROUTER_GRAPHS, {**_QWEN3_30B, "micro_batch": 4}, "gb200",
           ("mxfp8",), _BRIDGE_26),  # ..._GB200_FP8_MX_V1
    Recipe("megatron_bridge", "qwen3_30b_a3b", {**_ROUTER_GRAPHS, "cuda_graph_scope": "attn,moe_router,moe_preprocess"},
           {**_QWEN3_30B, "micro_batch": 4}, "b200", releases=_BRIDGE_26),  # ..._B200_*_V1 (one preset for all)
) + _QWEN3_30B_RELEASES + (
    # the same file: Qwen3 235B-A22B on 256 H100 (TP2 PP8 VP4 EP32, global batch 8192: the V2 presets), the
    # all-to-all dispatcher with its communication overlapped by the paired micro-batch (moe_a2a_overlap=True)
    Recipe("megatron_bridge", "qwen3_235b_a22b", {"overlap_moe_comm": "true"},
           {"num_gpus": 256, "tp": 2, "pp": 8, "virtual_stages": 4, "ep": 32, "global_batch": 8192}, "h100_sxm",
           releases=_BRIDGE_26),  # QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_*_V2
    # ... and on 256 GB300 (PP4 EP32, micro-batch 2 from V1) and GB200 (PP8 EP32): the flex dispatcher with
    # HybridEP and TE CUDA graphs of attention, router and dispatch preprocessing (QWEN3_235B_A22B_PRETRAIN_CONFIG_
    # {GB300,GB200}_FP8_CS_V2; the B300 and B200 V2 presets keep NCCL's all-to-all without graphs, vtrain's default)
    Recipe("megatron_bridge", "qwen3_235b_a22b", {**_ROUTER_GRAPHS, **_ALL_GRAPHS},
           {"num_gpus": 256, "tp": 1, "pp": 4, "ep": 32, "global_batch": 8192}, "gb300", releases=_BRIDGE_26),
    Recipe("megatron_bridge", "qwen3_235b_a22b", {**_ROUTER_GRAPHS, **_ALL_GRAPHS},
           {"num_gpus": 256, "tp": 1, "pp": 8, "ep": 32, "global_batch": 8192}, "gb200", releases=_BRIDGE_26),
    # ... and on 256 B300 (PP8 VP4 EP8, the layout the 26.02 and 26.02.01 tables state): until PR #2669 (2026-03-05,
    # cherry-picked to the release branch as #2706: "disabling VP and moe_a2a_overlap" on B300 to match B200) the
    # B300 presets paired the virtual stages with the 1F1B all-to-all overlap (moe_a2a_overlap=True; Megatron-Core
    # runs it under a pipeline only with virtual stages); the later V1/V2 presets read above no longer do
    Recipe("megatron_bridge", "qwen3_235b_a22b", {"overlap_moe_comm": "true"},
           {"num_gpus": 256, "tp": 1, "pp": 8, "virtual_stages": 4, "ep": 8, "global_batch": 8192}, "b300",
           releases=_BRIDGE_26),
    # 25.11 on 64 B200 (PP8 VP2 EP8, global batch 1024): the overlap on, which PR #1760 (2025-12-17, after 25.11)
    # turned off for BF16 and MXFP8 "due to CPU overhead", with the virtual stages for MXFP8
    Recipe("megatron_bridge", "qwen3_235b_a22b", {"overlap_moe_comm": "true"},
           {"num_gpus": 64, "tp": 1, "pp": 8, "virtual_stages": 2, "ep": 8, "global_batch": 1024}, "b200",
           releases=("25.11",)),
    # every release's recipe (src/megatron/bridge/recipes/qwen/qwen3_moe.py, qwen3_235b_a22b_pretrain_config)
    # counts the embedding and the loss as pipeline-split slots: 94 layers + 2 over the stages and virtual stages
    Recipe("megatron_bridge", "qwen3_235b_a22b", {"account_for_embedding": "true", "account_for_loss": "true"}),
    # scripts/performance/configs/llama/llama3_workload_base_configs.py, LLAMA3_70B_PRETRAIN_CONFIG_{GB300,B300}_FP8_MX
    # (V1 and V2): pipeline 4 x virtual 5 on tensor 1 (GB200 and B200: tensor 2, their rows state vp 5), no
    # recompute, and the micro-batch WorkloadBaseConfig defaults to (micro_batch_size=1; the preset sets none)
    Recipe("megatron_bridge", "llama3_70b", {"virtual_stages": "5", PRESET_MICRO_BATCH: "1"},
           {"num_gpus": 64, "tp": 1, "pp": 4}, "gb300", ("mxfp8",), _BRIDGE_26),
    Recipe("megatron_bridge", "llama3_70b", {"virtual_stages": "5", PRESET_MICRO_BATCH: "1"},
           {"num_gpus": 64, "tp": 1, "pp": 4}, "b300", ("mxfp8",), _BRIDGE_26),
    # GB200's MXFP8 preset in every version read: tensor 2 x pipeline 4 x virtual 5, micro_batch_size=1, no recompute
    # (the 25.09 layout's llama3/llama3_70b_llm_pretrain.py, llama3_70b_gb200_fp8_config with fp8_recipe "mx", and
    # its parallelism_configs.py LLAMA3_70B_GB200_64GPUS_FP8_MX_PARALLEL_CONFIG; the FP8-CS preset beside it runs 2)
    Recipe("megatron_bridge", "llama3_70b", {PRESET_MICRO_BATCH: "1"},
           {"num_gpus": 64, "tp": 2, "pp": 4, "virtual_stages": 5}, "gb200", ("mxfp8",)),
    # scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py, GPT-OSS 120B BF16 V2 presets (64 GPUs,
    # global batch 1280, micro-batch 4; H100: PP4, micro-batch 1): TE CUDA graphs of attention, router and dispatch
    # preprocessing on GB300 and B300 (B300: EP8 with HybridEP), selective recompute of the norms and the expert
    # activation on GB200 (with the all-to-all overlapped), B200 and H100
    Recipe("megatron_bridge", "gpt_oss_120b", _ALL_GRAPHS, {**_GPT_OSS, "ep": 64, "micro_batch": 4}, "gb300",
           ("bf16",), _BRIDGE_26),
    Recipe("megatron_bridge", "gpt_oss_120b", {**_ALL_GRAPHS, "moe_dispatcher": "hybridep"},
           {**_GPT_OSS, "ep": 8, "micro_batch": 4}, "b300", ("bf16",), _BRIDGE_26),
    Recipe("megatron_bridge", "gpt_oss_120b", {**_NORM_ACT, "overlap_moe_comm": "true"},
           {**_GPT_OSS, "ep": 64, "micro_batch": 4}, "gb200", ("bf16",), _BRIDGE_26),
    Recipe("megatron_bridge", "gpt_oss_120b", _NORM_ACT, {**_GPT_OSS, "ep": 8, "micro_batch": 4}, "b200",
           ("bf16",), _BRIDGE_26),
    Recipe("megatron_bridge", "gpt_oss_120b", _NORM_ACT, {**_GPT_OSS, "pp": 4, "ep": 8, "micro_batch": 1},
           "h100_sxm", ("bf16",), _BRIDGE_26),
) + _DEEPSEEK_V3


def _framework(raw: str) -> str:
    """The framework's leading name as :class:`Recipe` keys it ("Megatron-Bridge / Megatron-Core (NeMo 26.02)" is
    megatron_bridge, "NeMo 24.05 (Megatron-Core)" nemo)."""
    words = table_key(raw.split("/")[0].split("(")[0]).split("_")
    return "_".join(w for w in words if not w.replace(".", "").isdigit())


def _states(row: MeasuredRow, layout: Mapping[str, int]) -> bool:
    """Whether the row states each cell of ``layout`` with that value."""
    for column, value in layout.items():
        raw = row.get(column)
        try:
            if raw is None or cell_number(column, raw) != value:
                return False
        except ValueError:
            return False
    return True


def _is_for(recipe: Recipe, row: MeasuredRow) -> bool:
    """Whether the row ran on the recipe's GPU, precision and release (each where the recipe names one)."""
    gpu, precision, release = row.get("gpu"), row.get("precision"), row.get("framework_release")
    if recipe.gpu and (gpu is None or gpu_key(gpu) != recipe.gpu):
        return False
    if recipe.precisions and (precision is None or enum_key(Precision, precision) not in recipe.precisions):
        return False
    return not recipe.releases or release in recipe.releases


def recipe_cells(row: MeasuredRow) -> Dict[str, str]:
    """The cells the recipe of the row's framework and model sets that the row leaves empty; {} for a row whose
    framework and model have no recipe here, or whose layout is not the recipe's."""
    framework, model = row.get("framework"), row.get("model")
    if framework is None or model is None:
        return {}
    key = (_framework(framework), model_name(model))
    out: Dict[str, str] = {}
    for recipe in RECIPES:
        if (recipe.framework, recipe.model) == key and _states(row, recipe.layout) and _is_for(recipe, row):
            out.update({column: value for column, value in recipe.cells.items() if row.get(column) is None})
    return out
