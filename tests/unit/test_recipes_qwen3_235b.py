"""Megatron-Bridge's Qwen3-235B-A22B V2 presets on 256 GB300 / GB200 (vtrain.validation.recipes): HybridEP with TE
CUDA graphs of attention, router and dispatch preprocessing; B300 and B200 keep NCCL's all-to-all, ungraphed."""
from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.recipes import recipe_cells

ROW = {"framework": "Megatron-Bridge", "framework_release": "26.02.01", "model": "Qwen3_235B_a22B",
       "gpu": "GB300 (NVL72)", "precision": "MXFP8", "num_gpus": "256", "tp": "1", "pp": "4", "ep": "32",
       "micro_batch": "2", "global_batch": "8192"}
HYBRIDEP_GRAPHS = {"moe_dispatcher": "hybridep", "cuda_graph_scope": "attn,moe_router,moe_preprocess"}


def _row(**cells):
    return MeasuredRow(1, dict(cells))


def test_gb300_pp4_and_gb200_pp8_presets_run_hybridep_with_graphs():
    assert recipe_cells(_row(**ROW)) == HYBRIDEP_GRAPHS
    gb200 = {**ROW, "gpu": "GB200 (NVL72)", "pp": "8", "micro_batch": "1", "framework_release": "26.02"}
    assert recipe_cells(_row(**gb200)) == HYBRIDEP_GRAPHS


def test_not_b300_nor_another_layout_or_release():
    assert recipe_cells(_row(**{**ROW, "gpu": "B300 (DGX B300)", "pp": "8", "ep": "8"})) == {}
    assert recipe_cells(_row(**{**ROW, "ep": "16"})) == {}  # 25.11's GB300 row: EP16 PP4 VP12
    assert recipe_cells(_row(**{**ROW, "framework_release": "25.11"})) == {}
    assert recipe_cells(_row(**{**ROW, "moe_dispatcher": "alltoall"})) == {"cuda_graph_scope":
                                                                            "attn,moe_router,moe_preprocess"}
