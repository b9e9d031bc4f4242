"""Megatron-Bridge's Qwen3-235B-A22B V2 presets on 256 GB300 / GB200 (vtrain.validation.recipes): HybridEP with TE
CUDA graphs of attention, router and dispatch preprocessing; B300 and B200 keep NCCL's all-to-all, ungraphed. The
26.02 releases' B300 preset (PP8 VP4 EP8) and 25.11's B200 one (PP8 VP2 EP8) ran the 1F1B all-to-all overlap; every
release's recipe counts the embedding and the loss in the pipeline split."""
from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.recipes import recipe_cells

ROW = {"framework": "Megatron-Bridge", "framework_release": "26.02.01", "model": "Qwen3_235B_a22B",
       "gpu": "GB300 (NVL72)", "precision": "MXFP8", "num_gpus": "256", "tp": "1", "pp": "4", "ep": "32",
       "micro_batch": "2", "global_batch": "8192"}
ACCOUNT = {"account_for_embedding": "true", "account_for_loss": "true"}
HYBRIDEP_GRAPHS = {"moe_dispatcher": "hybridep", "cuda_graph_scope": "attn,moe_router,moe_preprocess", **ACCOUNT}


def _row(**cells):
    return MeasuredRow(1, dict(cells))


def test_gb300_pp4_and_gb200_pp8_presets_run_hybridep_with_graphs():
    assert recipe_cells(_row(**ROW)) == HYBRIDEP_GRAPHS
    gb200 = {**ROW, "gpu": "GB200 (NVL72)", "pp": "8", "micro_batch": "1", "framework_release": "26.02"}
    assert recipe_cells(_row(**gb200)) == HYBRIDEP_GRAPHS


def test_not_b300_nor_another_layout_or_release():
    assert recipe_cells(_row(**{**ROW, "gpu": "B300 (DGX B300)", "pp": "8", "ep": "8"})) == ACCOUNT
    assert recipe_cells(_row(**{**ROW, "ep": "16"})) == ACCOUNT  # 25.11's GB300 row: EP16 PP4 VP12
    assert recipe_cells(_row(**{**ROW, "framework_release": "25.11"})) == ACCOUNT
    assert recipe_cells(_row(**{**ROW, "moe_dispatcher": "alltoall"})) == {"cuda_graph_scope":
                                                                            "attn,moe_router,moe_preprocess",
                                                                            **ACCOUNT}


B300 = {**ROW, "gpu": "B300 (DGX B300)", "pp": "8", "virtual_stages": "4", "ep": "8", "micro_batch": "1"}
B200_25_11 = {**B300, "gpu": "B200 (DGX B200)", "framework_release": "25.11", "num_gpus": "64",
              "virtual_stages": "2", "global_batch": "1024"}


def test_the_b300_preset_of_the_26_02_releases_and_25_11s_b200_run_the_all_to_all_overlap():
    """PR #2669 / #2706 (2026-03) turned VP and moe_a2a_overlap off on B300 after both releases; PR #1760
    (2025-12) turned the overlap off on B200 after 25.11."""
    overlap = {"overlap_moe_comm": "true", **ACCOUNT}
    assert recipe_cells(_row(**B300)) == overlap
    assert recipe_cells(_row(**{**B300, "framework_release": "26.02"})) == overlap
    assert recipe_cells(_row(**B200_25_11)) == overlap
    assert recipe_cells(_row(**{**B300, "virtual_stages": ""})) == ACCOUNT  # 26.02's B200 row: no VP, no overlap
    assert recipe_cells(_row(**{**B300, "gpu": "B200 (DGX B200)"})) == ACCOUNT
    assert recipe_cells(_row(**{**B200_25_11, "framework_release": "25.09"})) == ACCOUNT
    assert recipe_cells(_row(**{**B300, "overlap_moe_comm": "false"})) == ACCOUNT  # a stated cell stays
