"""Megatron-Bridge's DeepSeek-V3 performance presets (vtrain.validation.recipes): the pipeline layout of the recipe's
layout_map, the selective recompute each preset names, the flex dispatcher with HybridEP from the 26.02 releases,
and the H100 preset's DeepEP with the 1F1B all-to-all overlap; each only where the row states the preset's plan."""
from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.published import pasted_row
from vtrain.validation.recipes import recipe_cells
from vtrain.workload.pipeline_layout import layout_layers

B300 = {"framework": "Megatron-Bridge", "framework_release": "26.02.01", "model": "DeepSeekV3",
        "gpu": "B300 (DGX B300)", "precision": "MXFP8", "num_gpus": "256", "tp": "1", "pp": "16", "ep": "8",
        "global_batch": "4096"}
H100 = {"framework": "Megatron-Bridge", "framework_release": "25.09", "model": "DeepSeekV3 (dropless)",
        "gpu": "H100-SXM5-80GB (DGX H100)", "precision": "FP8", "num_gpus": "1024", "tp": "2", "pp": "8",
        "virtual_stages": "4", "ep": "64", "global_batch": "8192"}


def _cells(**cells):
    return recipe_cells(MeasuredRow(1, dict(cells)))


def test_pp16_runs_the_recipe_layout_with_mtp_and_loss_on_the_last_stage():
    got = _cells(**B300)
    assert got == {"optimizer_moments": "bf16", "pipeline_layout": "Et*4|(t*4|)*14tmL",
                   "recompute_modules": "mla_up_proj", "moe_dispatcher": "hybridep"}
    # [embedding + 4 layers], 14 x [4 layers], [1 layer + MTP + loss]: DeepSeek-V3's 61 layers
    assert layout_layers(got["pipeline_layout"], 61, 16, 1, mtp_layers=1) == (4,) * 15 + (1,)


def test_the_same_sixteen_positions_interleaved_and_without_mtp():
    gb200 = {**B300, "gpu": "GB200 (NVL72)", "pp": "4", "virtual_stages": "4", "ep": "64"}
    got = _cells(**gb200)
    assert got["pipeline_layout"] == "Et*4|(t*4|)*14tmL"
    assert got["cuda_graph_scope"] == "attn,moe_router,moe_preprocess"  # the 26.02 GB200 preset's TE graphs
    no_mtp = _cells(**{**gb200, "framework_release": "25.11", "mtp_layers": "0"})
    assert no_mtp["pipeline_layout"] == "Et*4|(t*4|)*14tL"
    assert layout_layers(no_mtp["pipeline_layout"], 61, 4, 4) == (4,) * 15 + (1,)


def test_releases_before_26_02_run_nccl_all_to_all_on_blackwell():
    got = _cells(**{**B300, "gpu": "B200 (DGX B200)", "framework_release": "25.09"})
    assert "moe_dispatcher" not in got and got["recompute_modules"] == "mla_up_proj"


def test_h100_runs_deepep_with_the_a2a_overlap_and_its_own_layout():
    got = _cells(**H100)
    assert got == {"optimizer_moments": "bf16", "pipeline_layout": "Et|(tt|)*30mL", "moe_dispatcher": "deepep",
                   "recompute_modules": "mla_up_proj,mlp", "overlap_moe_comm": "true", "overlap_grad_reduce": "false"}
    assert layout_layers(got["pipeline_layout"], 61, 8, 4, mtp_layers=1) == (1,) + (2,) * 30 + (0,)


def test_a_row_that_states_another_plan_or_setting_keeps_its_own():
    # no preset of that layout: the recipe's layout_map still applies (it is keyed by pp and vp alone)
    assert _cells(**{**B300, "ep": "16"}) == {"optimizer_moments": "bf16", "pipeline_layout": "Et*4|(t*4|)*14tmL"}
    assert _cells(**{**B300, "recompute_modules": "core_attn"}).get("recompute_modules") is None
    assert _cells(**{**B300, "framework": "torchtitan"}) == {}


def test_the_published_row_reads_the_preset_with_a_note():
    row, notes = pasted_row(MeasuredRow(1, {**B300, "framework": "Megatron-Bridge / Megatron-Core (NeMo 26.02.01)"}))
    assert row.get("pipeline_layout") == "Et*4|(t*4|)*14tmL" and row.get("moe_dispatcher") == "hybridep"
    assert any("recipe for the model" in n for n in notes)
