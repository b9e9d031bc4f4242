"""Megatron-Bridge's Llama 3 70B MXFP8 presets on Blackwell Ultra (vtrain.validation.recipes): pipeline 4 x vp 5."""
from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.recipes import recipe_cells

ROW = {"framework": "Megatron-Bridge", "framework_release": "26.02.01", "model": "LLAMA3_70B", "gpu": "GB300 (NVL72)",
       "precision": "MXFP8", "num_gpus": "64", "tp": "1", "pp": "4", "micro_batch": "2", "global_batch": "256"}


def _row(**cells):
    return MeasuredRow(1, dict(cells))


def test_the_gb300_and_b300_mxfp8_presets_interleave_five_chunks():
    assert recipe_cells(_row(**ROW)) == {"virtual_stages": "5"}
    assert recipe_cells(_row(**{**ROW, "gpu": "B300 (DGX B300)"})) == {"virtual_stages": "5"}


def test_only_rows_of_that_gpu_precision_release_and_layout():
    assert recipe_cells(_row(**{**ROW, "virtual_stages": "2"})) == {}  # stated: the row's
    assert recipe_cells(_row(**{**ROW, "precision": "FP8"})) == {}  # the FP8-CS preset runs Megatron FSDP instead
    assert recipe_cells(_row(**{**ROW, "gpu": "GB200 (NVL72)"})) == {}  # GB200's preset is tensor 2
    assert recipe_cells(_row(**{**ROW, "pp": "1"})) == {}
    assert recipe_cells(_row(**{**ROW, "framework_release": "25.11"})) == {}
