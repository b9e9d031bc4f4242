"""Megatron-Bridge's Llama 3 70B MXFP8 presets on Blackwell (vtrain.validation.recipes): pipeline 4 x vp 5 on
Blackwell Ultra, and the micro-batch each preset runs (1), simulated where a row states one that fits only by a
recompute the preset does not run (vtrain.validation.run.simulate_row)."""
import functools

import pytest

from vtrain import compose
from vtrain.config.compose import load_gpu_config, load_stack_config
from vtrain.validation.csv_io import MeasuredRow, read_measurements
from vtrain.validation.datasets import resolve_dataset
from vtrain.validation.published import pasted_row
from vtrain.validation.recipes import PRESET_MICRO_BATCH, recipe_cells
from vtrain.validation.run import simulate_row
from vtrain.workload.enums import Recompute

ROW = {"framework": "Megatron-Bridge", "framework_release": "26.02.01", "model": "LLAMA3_70B", "gpu": "GB300 (NVL72)",
       "precision": "MXFP8", "num_gpus": "64", "tp": "1", "pp": "4", "micro_batch": "2", "global_batch": "256"}
GB200_25_09 = {**ROW, "framework_release": "25.09", "gpu": "GB200 (NVL72)", "tp": "2", "virtual_stages": "5",
               "global_batch": "128"}


def _row(**cells):
    return MeasuredRow(1, dict(cells))


def test_the_gb300_and_b300_mxfp8_presets_interleave_five_chunks_at_micro_batch_1():
    preset = {"virtual_stages": "5", PRESET_MICRO_BATCH: "1"}
    assert recipe_cells(_row(**ROW)) == preset
    assert recipe_cells(_row(**{**ROW, "gpu": "B300 (DGX B300)"})) == preset


def test_the_gb200_mxfp8_preset_runs_micro_batch_1_in_every_release():
    assert recipe_cells(_row(**GB200_25_09)) == {PRESET_MICRO_BATCH: "1"}
    assert recipe_cells(_row(**{**GB200_25_09, "framework_release": "26.02"})) == {PRESET_MICRO_BATCH: "1"}
    assert recipe_cells(_row(**{**GB200_25_09, "precision": "FP8"})) == {}  # FP8-CS: Megatron FSDP at 2


def test_only_rows_of_that_gpu_precision_release_and_layout():
    assert recipe_cells(_row(**{**ROW, "virtual_stages": "2"})) == {PRESET_MICRO_BATCH: "1"}  # stated: the row's
    assert recipe_cells(_row(**{**ROW, "precision": "FP8"})) == {}  # the FP8-CS preset runs Megatron FSDP instead
    assert recipe_cells(_row(**{**ROW, "gpu": "GB200 (NVL72)"})) == {}  # GB200's preset is tensor 2
    assert recipe_cells(_row(**{**ROW, "pp": "1"})) == {}
    assert recipe_cells(_row(**{**ROW, "framework_release": "25.11"})) == {}


@pytest.fixture(scope="module")
def simulate():
    cfg = compose(["+cluster=h100x1024"], require=False)
    load_gpu, load_stack = functools.lru_cache(None)(load_gpu_config), functools.lru_cache(None)(load_stack_config)
    rows = list(read_measurements(resolve_dataset("published_runs")))

    def run(line: int, **cells: str):
        raw = rows[line - 1]
        row, _ = pasted_row(MeasuredRow(raw.index, {**raw.values, **cells}))
        w, report, _ = simulate_row(row, cfg, load_gpu, load_stack, None, None)
        return w.plan, report
    return run


def test_a_stated_micro_batch_that_fits_only_by_recompute_runs_the_presets(simulate):
    # row 43: 26.02.01, 64 GB300, MXFP8, TP1 PP4 (vp 5 from the preset), micro-batch 2 stated: 23 chunks of 4 layers
    # in flight hold ~330 GB of activations, so micro-batch 2 fits only by recomputing; the preset runs 1, no recompute
    plan, report = simulate(43)
    assert (plan.micro_batch_size, plan.recompute, plan.virtual_stages) == (1, Recompute.NONE, 5)
    assert report.fits
    # a row that states its recompute keeps its micro-batch (it says how it fitted)
    plan, _ = simulate(43, recompute="full")
    assert (plan.micro_batch_size, plan.recompute) == (2, Recompute.FULL)


def test_a_stated_micro_batch_that_fits_is_kept(simulate):
    plan, report = simulate(43, seq_len="2048")  # a quarter of the activations: micro-batch 2 fits as stated
    assert (plan.micro_batch_size, plan.recompute) == (2, Recompute.NONE) and report.fits


def test_the_gb200_rows_run_the_presets_micro_batch(simulate):
    # row 44 (26.02.01) states the preset's 1; row 145 (25.09) states 2, which fits only by recompute (its own
    # grad_accum 16 = global batch 128 / (dp 8 x micro-batch 1) says 1): both run 1 without recompute
    assert simulate(44)[0].micro_batch_size == 1
    plan, report = simulate(145)
    assert (plan.micro_batch_size, plan.recompute) == (1, Recompute.NONE) and report.fits
