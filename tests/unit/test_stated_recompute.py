"""A row whose recompute mode (stated, or its defaults') needs more than STATED_MODE_MEMORY_FACTOR x its GPU's
memory cannot have run so: task=validate runs the lightest heavier mode that fits and says so; a row out of memory
by less keeps its mode (an error of the memory model, or of the plan, reported as predicted out of memory)."""
import csv

import pytest

from vtrain import compose
from vtrain.cli.task_validate import write_csv
from vtrain.validation.csv_io import MeasuredRow, read_measurements
from vtrain.validation.datasets import resolve_dataset, shipped_defaults
from vtrain.validation.run import STATED_MODE_MEMORY_FACTOR, validate_rows


@pytest.fixture(scope="module")
def scout():
    """The torchtitan GB200 Llama 4 Scout rows (local batch 10 x 8K, activation checkpointing "none")."""
    rows = [r for r in read_measurements(resolve_dataset("torchtitan")) if r.get("model") == "llama4_scout"]
    assert len(rows) == 2 and all(r.get("recompute") == "none" for r in rows)
    return rows


def _validate(rows):
    return validate_rows(rows, compose(["+cluster=h100x1024"], require=False), shipped_defaults("torchtitan"))


def test_a_stated_mode_needing_several_times_the_memory_runs_the_lightest_mode_that_fits(scout, tmp_path):
    results = _validate(scout)
    for r in results:
        gib = r.ruled_out_recompute_peak_gib
        assert gib is not None and gib > STATED_MODE_MEMORY_FACTOR * 184  # GB200: 184 GiB visible
        assert r.recompute == "full" and r.fits and r.peak_memory_gib < gib  # per-op SAC does not fit either
        print(f"\nrow {r.row.index} ({r.row.get('precision')}): stated none needs {gib:.0f} GiB; full recompute "
              f"{r.peak_memory_gib:.0f} GiB, time error {(r.predicted_ms / r.measured_ms - 1) * 100:+.1f}%")
    write_csv(results, tmp_path / "v.csv")
    with (tmp_path / "v.csv").open() as fh:
        out = list(csv.DictReader(fh))
    assert [(o["recompute"], o["simulated_recompute"]) for o in out] == [("none", "full")] * 2
    assert all(float(o["ruled_out_recompute_peak_gib"]) > 2 * 184 for o in out)


def test_a_row_out_of_memory_by_less_keeps_its_stated_mode(scout):
    row = scout[0]
    smaller = MeasuredRow(row.index, {**row.values, "micro_batch": "5", "global_batch": "1280"})  # 363 GiB
    (r,) = _validate([smaller])
    assert r.recompute == "none" and r.ruled_out_recompute_peak_gib is None
    assert r.fits is False and r.peak_memory_gib < STATED_MODE_MEMORY_FACTOR * 184


def test_a_row_silent_on_its_mode_runs_the_lightest_that_fits_too(scout):
    """torchtitan's defaults run no recompute unless stated: ruled out the same way."""
    row = scout[0]
    silent = MeasuredRow(row.index, {k: v for k, v in row.values.items() if k != "recompute"})
    (r,) = _validate([silent])
    assert r.ruled_out_recompute_peak_gib is not None and r.fits and r.recompute == "full"
