"""A row whose recompute mode (stated, or its defaults') needs more than RULED_OUT_MEMORY_FACTOR x its GPU's
memory cannot have run so: task=validate runs the lightest heavier mode that fits and says so; a row out of memory
by less keeps its mode (an error of the memory model, or of the plan, reported as predicted out of memory)."""
import csv

import pytest

from vtrain import compose
from vtrain.cli.task_validate import write_csv
from vtrain.validation.csv_io import MeasuredRow, read_measurements
from vtrain.validation.datasets import resolve_dataset, shipped_defaults
from vtrain.validation.run import RULED_OUT_MEMORY_FACTOR, validate_rows


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
        assert gib is not None and gib > RULED_OUT_MEMORY_FACTOR * 184  # GB200: 184 GiB visible
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
    assert r.fits is False and r.peak_memory_gib < RULED_OUT_MEMORY_FACTOR * 184


def test_a_row_silent_on_its_mode_runs_the_lightest_that_fits_too(scout):
    """torchtitan's defaults run no recompute unless stated: ruled out the same way."""
    row = scout[0]
    silent = MeasuredRow(row.index, {k: v for k, v in row.values.items() if k != "recompute"})
    (r,) = _validate([silent])
    assert r.ruled_out_recompute_peak_gib is not None and r.fits and r.recompute == "full"


def test_a_megatron_row_silent_on_recompute_takes_the_least_that_fits():
    """Megatron-Core's finer steps between the modes: after selective (the attention core) its wider module sets
    (the memory-bound ones, then MLA's up-projections), before full recompute of every layer that of the first k
    layers of each chunk, smallest k first."""
    from vtrain.sim.recompute_fit import BlockRun, recompute_steps
    from vtrain.validation.rows import MEGATRON_CORE_DEFAULTS
    from vtrain.workload.enums import Recompute

    cfg = compose(["+cluster=h100x1024"], require=False)
    head = "model,gpu,num_gpus,global_batch,micro_batch,seq_len,tp,pp,virtual_stages,ep,precision,iteration_time_ms\n"
    # DeepSeek-V3 on 1,024 H100 (PP16 x EP64, 4K): neither the attention core nor the memory-bound modules fit;
    # with MLA's up-projections recomputed too it does
    rows = [MeasuredRow(1, dict(zip(head.strip().split(","),
                                    "deepseek_v3,h100_sxm,1024,8192,1,4096,1,16,1,64,bf16,60000".split(","))))]
    (r,) = validate_rows(rows, cfg, None)
    assert r.fits and r.recompute == "selective (core_attn,layernorm,moe_act,mla_up_proj)", r.recompute
    w = row_workload_of(rows[0], cfg)
    steps = recompute_steps(MEGATRON_CORE_DEFAULTS.recompute_to_fit, w.model, w.plan)
    chunk = -(-w.model.num_layers // 16)
    assert steps[0] == {"recompute": Recompute.NONE} and steps[-1] == {"recompute": Recompute.FULL}
    assert steps[2:4] == [{"recompute": Recompute.SELECTIVE, "recompute_modules": "core_attn,layernorm,moe_act"},
                          {"recompute": Recompute.SELECTIVE,
                           "recompute_modules": "core_attn,layernorm,moe_act,mla_up_proj"}]
    assert steps[4:] == [BlockRun(1, chunk - 1), {"recompute": Recompute.FULL}]


def row_workload_of(row, cfg):
    from vtrain.config.compose import load_gpu_config, load_stack_config
    from vtrain.validation.rows import row_workload

    return row_workload(row, cfg.cluster, load_gpu_config, load_stack_config, defaults=None)


@pytest.mark.parametrize("column, value, simulated", [
    ("recompute_num_layers", "2", "full (2 layers per chunk)"),  # Megatron's --recompute-num-layers: full
    ("recompute_modules", "moe", "selective (moe)"),  # --recompute-modules: selective
])
def test_a_layer_count_or_module_list_implies_its_mode(column, value, simulated):
    """A row stating Megatron's layer count or modules but no mode ran the mode they belong to (was: the first
    step of the ladder, none, with a layer count: a skip reason)."""
    cfg = compose(["+cluster=h100x1024"], require=False)
    cells = dict(model="deepseek_v3", gpu="h100_sxm", num_gpus="1024", global_batch="8192", micro_batch="1",
                 seq_len="4096", tp="1", pp="16", ep="64", precision="bf16", iteration_time_ms="60000")
    (r,) = validate_rows([MeasuredRow(1, {**cells, column: value})], cfg, None)
    assert r.skipped_reason is None and r.recompute == simulated


def test_a_ruled_out_row_with_a_layer_count_is_not_skipped(scout):
    """Scout's stated 'none' replaced by a layer count (full recompute of 1 layer of 48): still far beyond its
    GPU, and the ladder's selective step, which the count rules out, is passed over, not a skip reason."""
    row = scout[0]
    cells = {k: v for k, v in row.values.items() if k != "recompute"}
    (r,) = _validate([MeasuredRow(row.index, {**cells, "recompute_num_layers": "1"})])
    assert r.skipped_reason is None and r.recompute == "full (1 layers per chunk)" and not r.fits  # run as stated
    (every,) = _validate([MeasuredRow(row.index, {**cells, "recompute": "full"})])
    assert r.predicted_ms < every.predicted_ms  # one layer recomputed, not all 48


def test_task_validate_says_which_rows_it_ruled_out(tmp_path, capfd):
    """One line names the rows, the stated mode, its predicted peak and the mode run instead; exit 0. (Eager, the
    same row fits in no mode: its fp32 loss alone holds 10 x 8K x 202K logits x 12 B, so it runs as stated.)"""
    from tests.clirun import validate_table

    head = "model,gpu,num_gpus,local_batch,seq_len,ep,precision,recompute,stack,torch_compile,tokens_per_s_per_gpu\n"
    res, rows = validate_table(head + "llama4_scout,gb200,256,10,8192,16,bf16,none,torchtitan,yes,6169\n", tmp_path,
                               capfd)
    assert res.code == 0, res.err
    line = next(x for x in res.out.splitlines() if x.startswith("recompute ruled out:"))
    assert "1 of 1 simulated rows (row 1 first: recompute=none needs" in line and "(full;" in line, line
    assert rows[0]["simulated_recompute"] == "full" and float(rows[0]["ruled_out_recompute_peak_gib"]) > 368
