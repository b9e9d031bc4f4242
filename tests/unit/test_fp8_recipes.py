"""FP8 recipes side by side: the kernel table (vtrain/profiler/scaled_gemm.py, run here on CPU with real
torch._scaled_mm), its fit (vtrain/calibration/fp8_recipes.py) and how a measured ratio reaches the configs."""
import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.clirun import run_main_inprocess
from tests.lazy import Lazy, needs_torch
from vtrain.calibration.fp8_recipes import (
    GEMM_FAST_ACCUM,
    ScaledTable,
    effective_eta,
    fit_recipes,
    read_scaled_table,
)
from vtrain.calibration.gemm_tables import GemmParams, GemmTable, Hardware, predict_s, read_mamf
from vtrain.calibration.gpu_derive import TRANSFERS, derive
from vtrain.config.build import gpu_spec
from vtrain.config.compose import load_gpu_config
from vtrain.cost.gemm import GemmCurve, borrowed_efficiency
from vtrain.errors import VtrainError
from vtrain.profiler.table_run import write_table

pytestmark = needs_torch()
torch = Lazy("torch")  # imported by the tests that run, not at collection (tests/lazy.py)
sg = Lazy("vtrain.profiler.scaled_gemm")

ROOT = Path(__file__).resolve().parents[2]
SHAPE = GemmParams(0.8, 29.74, 181.2, 5.15e-6, 0.348)  # the H100 curve shape (gpu/h100_sxm.yaml)
HW = Hardware(1979.0, 989.4, 132)


def test_grids_hold_the_xla_single_matrix_shapes_and_training_shapes():
    assert len(sg.shapes("xla")) == 125 and len(sg.shapes("training")) == 18
    assert len(sg.shapes("all")) == 143 and (4096, 4096, 4096) in sg.shapes("xla")
    with pytest.raises(VtrainError, match="--grid=big is not one of xla, training, all"):
        sg.shapes("big")


def test_block_scales_have_the_layouts_cublas_wants():
    """1x128 activation scales outer-dim-major; 128x128 weight scales with each row of k/128 padded to a
    multiple of 4 (PyTorch's tests pad them so: _pad_128x128_scales)."""
    a, b = sg._scales("fp8_blockwise", 256, 384, 640, torch.device("cpu"))
    assert a.shape == (256, 5) and a.stride() == (1, 256)
    assert b.shape == (5, 3) and b.stride() == (1, 8)


def test_each_recipe_multiplies_what_it_claims_on_cpu():
    """Layouts and scales as torchao hands them to _scaled_mm: the fp8 result is the product of the
    quantized operands times the scales (checked against a float reference)."""
    dev = torch.device("cpu")
    torch.manual_seed(0)
    for recipe in (sg.Recipe("fp8", True), sg.Recipe("fp8_rowwise", False)):
        ops = sg.operands(recipe, 32, 48, 64, dev)
        a8, b8, scale_a, scale_b = ops
        assert a8.dtype == b8.dtype == torch.float8_e4m3fn and b8.stride() == (1, 64)  # b column-major
        out = sg.run(recipe, ops)
        ref = (a8.float() * scale_a) @ (b8.float() * scale_b)
        assert out.shape == (32, 48) and out.dtype == torch.bfloat16
        assert torch.allclose(out.float(), ref, rtol=2e-2, atol=1e-1)


def test_measure_times_what_the_device_runs_and_names_what_it_cannot(tmp_path):
    dev = torch.device("cpu")
    recipes = (sg.Recipe("bf16", False), sg.Recipe("fp8", True), sg.Recipe("fp8_rowwise", True),
               sg.Recipe("fp8_blockwise", False))
    rows, skipped = sg.measure("h200", dev, [(32, 128, 128), (64, 128, 256)], recipes, warmup=0, repeats=1)
    assert {(r["recipe"], r["fast_accum"]) for r in rows} == {("bf16", 0), ("fp8", 1), ("fp8_rowwise", 1)}
    assert len(rows) == 6 and all(float(r["time_s"]) > 0 for r in rows)
    # the CPU kernels have no block scaling: each shape is tried, and one line says how many failed and why
    assert skipped == ["fp8_blockwise: 2 shape(s), from 32x128x128: Invalid scaling configuration."]
    r = rows[-1]
    assert float(r["tflops"]) == pytest.approx(2 * 64 * 128 * 256 / float(r["time_s"]) / 1e12, rel=1e-3)
    path = tmp_path / "t" / sg.TABLE_FILE
    write_table(path, rows, sg.COLUMNS)
    table = read_scaled_table(path)
    assert table.gpu == "h200" and table.torch_version == torch.__version__
    assert sorted(table.tables) == [("bf16", False), ("fp8", True), ("fp8_rowwise", True)]
    assert list(table.tables[("fp8", True)].k) == [128, 256]


def _synthetic(etas):
    """A table whose times follow the curve exactly at the given eta per (recipe, fast_accum)."""
    grid = np.array([(m, n, k) for m in (512, 4096, 8192) for n in (1024, 8192) for k in (512, 4096, 14336)], float)
    tables = {}
    for (recipe, fast), eta in etas.items():
        t = GemmTable("h200", recipe, np.ones(len(grid)), grid[:, 0], grid[:, 1], grid[:, 2], np.ones(len(grid)))
        t = GemmTable("h200", recipe, t.b, t.m, t.n, t.k, predict_s(GemmParams(eta, *SHAPE.as_vector()[1:3],
                                                                               SHAPE.fixed_time_s,
                                                                               SHAPE.wave_exponent), t, HW))
        tables[(recipe, fast)] = t
    return ScaledTable("h200", "NVIDIA H200", "2.13", tables)


def test_fit_recovers_each_recipe_and_weights_the_three_gemms_as_torchao_runs_them():
    etas = {("fp8", True): 0.80, ("fp8", False): 0.70, ("fp8_rowwise", True): 0.60, ("fp8_rowwise", False): 0.50,
            ("bf16", False): 0.9}
    fit = fit_recipes(_synthetic(etas), SHAPE, HW)
    for key, eta in etas.items():
        if key[0] != "bf16":
            assert fit.eta[key] == pytest.approx(eta, rel=1e-4) and fit.median_error_pct[key] < 1e-3
    assert ("bf16", False) not in fit.eta  # not an FP8 recipe
    # both recipes: a fast-accumulating output GEMM, precise gradient GEMMs (torchao/float8/config.py)
    tensorwise, rowwise = 3 / (1 / 0.80 + 2 / 0.70), 3 / (1 / 0.60 + 2 / 0.50)
    assert effective_eta(fit.eta, "fp8") == pytest.approx(tensorwise, rel=1e-4)
    assert fit.ratio == {"fp8_rowwise": pytest.approx(rowwise / tensorwise, rel=1e-4)}
    assert fit.shape_ratio["fp8_rowwise"] == pytest.approx(fit.ratio["fp8_rowwise"], rel=0.1)
    assert GEMM_FAST_ACCUM["fp8"] == GEMM_FAST_ACCUM["fp8_rowwise"] == (True, False, False)


def test_eta_is_the_large_gemm_rate_a_small_shape_penalty_stays_out_of_it():
    """A recipe as fast as per-tensor on large GEMMs but 3 us slower per call (rowwise on the H200 runs 25% slower
    at <= 1024^3 and 1.4% at training shapes): eta comes from the large shapes, the ratio stays 1, and the
    misfit shows in the error over all shapes instead."""
    etas = {("fp8", True): 0.80, ("fp8", False): 0.70, ("fp8_rowwise", True): 0.80, ("fp8_rowwise", False): 0.70}
    table = _synthetic(etas)
    for fast in (True, False):
        t = table.tables[("fp8_rowwise", fast)]
        table.tables[("fp8_rowwise", fast)] = GemmTable("h200", "fp8_rowwise", t.b, t.m, t.n, t.k, t.time_s + 3e-6)
    fit = fit_recipes(table, SHAPE, HW)
    assert fit.fitted_rows[("fp8_rowwise", True)] == 5  # (4096|8192) x 8192 x (4096|14336), 8192 x 1024 x 14336
    assert fit.ratio["fp8_rowwise"] == pytest.approx(1.0, abs=0.025)
    assert fit.median_error_pct[("fp8_rowwise", True)] > 5 * fit.median_error_pct[("fp8", True)]


def test_fit_without_both_per_tensor_settings_is_refused():
    with pytest.raises(VtrainError, match="no per-tensor fp8 rows"):
        fit_recipes(_synthetic({("fp8", True): 0.8, ("fp8_rowwise", True): 0.6}), SHAPE, HW)


def test_malformed_table_is_one_line(tmp_path):
    bad = tmp_path / "gemm_scaled.csv"
    bad.write_text("gpu,device,torch,recipe,fast_accum,m,n,k,flop_count,time_s\nh200,x,2,fp8,1,1,1,zz,2,1\n")
    with pytest.raises(VtrainError, match=r"gemm_scaled.csv:2: not a row of python -m vtrain.profiler.scaled_gemm"):
        read_scaled_table(bad)
    bad.write_text("gpu,recipe,fast_accum,m,n,k,flop_count,time_s\nh200,fp8,1,1,1,1,2,1\n")  # no device column
    with pytest.raises(VtrainError, match=r"gemm_scaled.csv:2: not a row of"):
        read_scaled_table(bad)
    bad.write_text("gpu,device,torch,recipe,fast_accum,m,n,k,flop_count,time_s\nh200,x,2,fp8,1,1,1,1,2,0\n")
    with pytest.raises(VtrainError, match=r"gemm_scaled.csv:2: m, n, k, flop_count and time_s must be finite"):
        read_scaled_table(bad)
    with pytest.raises(VtrainError, match="No such file"):
        read_scaled_table(tmp_path / "none.csv")


def _derived(gpu, ratios):
    tr = next(t for t in TRANSFERS if t.gpu == gpu)
    fitted = {"H100": {"bf16": SHAPE, "fp8": GemmParams(0.8, *SHAPE.as_vector()[1:3], SHAPE.fixed_time_s,
                                                        SHAPE.wave_exponent)},
              "B200": {"bf16": SHAPE, "fp8": SHAPE}}
    peaks = gpu_spec(load_gpu_config(gpu)).peak_tflops
    flash = {"H200": (300.0, "fa2"), "B200": (600.0, "fa2")}
    return derive(tr, fitted, read_mamf(), peaks, flash, {"H200": 989.4, "B200": 2250.0}, "2026-12",
                  {"H100": "h", "B200": "b"}, ratios)


def test_a_measured_ratio_sets_hopper_recipes_only_and_says_so():
    values, prov = _derived("h200", {"fp8_rowwise": (0.9, "measured on NVIDIA H200, t.csv")})
    eta = values["gemm_efficiency_by_precision"]
    assert eta["fp8_rowwise"] == pytest.approx(round(eta["fp8"] * 0.9, 4))
    assert eta["fp8_blockwise"] == eta["fp8"]  # not measured: copied, and the provenance says which
    assert "fp8_rowwise = fp8 x 0.900 (measured on NVIDIA H200, t.csv)" in prov["gemm_efficiency_by_precision"]
    assert "fp8_blockwise = fp8 (same tensor-core rate): copied" in prov["gemm_efficiency_by_precision"]
    values, _ = _derived("b200", {"fp8_rowwise": (0.9, "x")})
    assert "fp8_rowwise" not in values["gemm_efficiency_by_precision"]  # a Hopper kernel's ratio stays on Hopper
    values, prov = _derived("h100_sxm", {})
    assert values["gemm_efficiency_by_precision"]["fp8_rowwise"] == values["gemm_efficiency_by_precision"]["fp8"]
    assert "fp8_rowwise = fp8" in prov["gemm_efficiency_by_precision"]


def test_a_recipe_reaches_the_best_matmul_in_its_eta_ratio():
    g = gpu_spec(load_gpu_config("h100_sxm"))
    fp8 = GemmCurve.for_gpu(g, "fp8")
    rowwise = GemmCurve.for_gpu(g, "fp8_rowwise")
    ratio = g.gemm_efficiency_by_precision["fp8_rowwise"] / g.gemm_efficiency_by_precision["fp8"]  # measured: 0.986
    assert rowwise.ceiling == pytest.approx(ratio * fp8.ceiling) and fp8.ceiling == g.gemm_ceiling_by_precision["fp8"]
    assert 0.95 < ratio < 1
    assert rowwise.align == fp8.align == 16  # 1-byte operands: 16 elements per 16-byte load
    slower = dataclasses.replace(g, gemm_efficiency_by_precision={**g.gemm_efficiency_by_precision,
                                                                  "fp8_rowwise": 0.5 * fp8.eta_max})
    assert GemmCurve.for_gpu(slower, "fp8_rowwise").ceiling == pytest.approx(0.5 * fp8.ceiling)
    # a format's ceiling never rises above the measured best when per-tensor fp8's efficiency is set lower
    low_fp8 = dataclasses.replace(g, gemm_efficiency_by_precision={**g.gemm_efficiency_by_precision, "fp8": 0.4})
    assert GemmCurve.for_gpu(low_fp8, "fp8_rowwise").ceiling == pytest.approx(fp8.ceiling)
    assert GemmCurve.for_gpu(g, "bf16").ceiling == g.gemm_ceiling_by_precision["bf16"]
    # a config of one's own that lists no rowwise efficiency: per-tensor fp8's, not the bf16 default
    bare = dataclasses.replace(g, gemm_efficiency_by_precision={k: v for k, v in g.gemm_efficiency_by_precision.items()
                                                                if k != "fp8_rowwise"})
    assert GemmCurve.for_gpu(bare, "fp8_rowwise").eta_max == fp8.eta_max != g.gemm_max_efficiency


def test_cli_bad_arguments_are_one_line(tmp_path, capfd):
    """In this process (argument checks are logic; test_fit_gemm_refuses_a_table_not_measured_on_hopper runs a real
    process): each mistake exits 2 with one line and writes nothing."""
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    cpu = ["--device", "cpu"]
    for argv, msg in ((["--gpu", "h200", "--out", str(a_file / "sub"), *cpu], "cannot write there (Not a directory)"),
                      (["--gpu", "h200", "--out", str(a_file)], "is a file, not a folder"),
                      (["--gpu", "h200", "--out", str(tmp_path), "--device", "tpu"], "--device=tpu is not one of cpu"),
                      (["--gpu", "h999", "--out", str(tmp_path)], "--gpu=h999 is not a gpu/ config; one of: "),
                      (["--gpu", "h200"], "the following arguments are required: --out"),
                      (["--gpu", "h200", "--out", str(tmp_path), "--grid", "big"], "--grid=big is not one of"),
                      (["--gpu", "h200", "--out", str(tmp_path), "--repeats", "0"], "--repeats: 0 must be >= 1")):
        p = run_main_inprocess(sg.main, argv, capfd)
        assert p.code == 2 and p.out == "", (argv, p.out, p.err)
        assert len(p.err_lines) == 1 and msg in p.err, (argv, p.err)
    assert list(tmp_path.iterdir()) == [a_file]  # nothing written


def test_fit_gemm_refuses_a_table_not_measured_on_hopper(tmp_path):
    rows, _ = sg.measure("h200", torch.device("cpu"), [(32, 32, 32)], (sg.Recipe("fp8", True),), 0, 1)
    write_table(tmp_path / sg.TABLE_FILE, rows, sg.COLUMNS)
    p = subprocess.run([sys.executable, "bench/fit_gemm.py", "--scaled", str(tmp_path / sg.TABLE_FILE)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and "not a Hopper GPU" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_rowwise_plan_runs_at_the_rowwise_efficiency_and_only_it():
    from vtrain import compose, simulate

    base = ["+model=llama3_8b", "+cluster=h100x1024", "+gpu=h100_sxm", "stack=torchtitan_fsdp2_compile",
            "parallelism.dp=8", "training.global_batch_size=8", "parallelism.micro_batch_size=1",
            "parallelism.zero_stage=3", "stack.cublas_rowwise_fp8=true"]  # cuBLAS's kernel, the table's
    slow = "gpu.gemm_efficiency_by_precision.fp8_rowwise=0.4"
    rowwise = [simulate(compose([*base, "training.precision=fp8_rowwise", *x])).breakdown.compute_s
               for x in ([], [slow])]
    tensorwise = [simulate(compose([*base, "training.precision=fp8", *x])).breakdown.compute_s for x in ([], [slow])]
    assert rowwise[1] > 1.2 * rowwise[0] and tensorwise[1] == tensorwise[0]


def test_a_plan_whose_recipe_copies_another_formats_efficiency_says_so():
    from vtrain import compose, simulate

    base = ["+model=llama3_8b", "+cluster=b200x1024", "parallelism.dp=8", "training.global_batch_size=8"]
    notes = simulate(compose([*base, "training.precision=fp8_blockwise"])).notes
    assert ("caution: fp8_blockwise GEMMs are priced at fp8's efficiency: no table measures this GPU's "
            "fp8_blockwise kernels") in notes
    hopper = ["+model=llama3_8b", "+cluster=h100x1024", "parallelism.dp=8", "training.global_batch_size=8"]
    for measured in ("fp8_rowwise", "fp8_blockwise"):  # profiles/measured/h200/gemm_scaled.csv: their own efficiency
        assert not any("GEMMs are priced at" in n
                       for n in simulate(compose([*hopper, f"training.precision={measured}"])).notes)
    assert not any("GEMMs are priced at" in n for n in simulate(compose([*base, "training.precision=fp8"])).notes)
    assert not any("GEMMs are priced at" in n for n in simulate(compose([*base, "training.precision=fp16"])).notes)
    # a value of one's own is no copy; a config without the key borrows per-tensor fp8's (B200: no rowwise entry)
    own = [*base, "training.precision=fp8_blockwise", "+gpu=b200", "gpu.gemm_efficiency_by_precision.fp8_blockwise=0.4"]
    assert not any("GEMMs are priced at" in n for n in simulate(compose(own)).notes)
    b200 = ["+model=llama3_8b", "+cluster=b200x1024", "parallelism.dp=8", "training.global_batch_size=8",
            "training.precision=fp8_rowwise"]
    assert any(n.startswith("caution: fp8_rowwise GEMMs are priced at fp8's") for n in simulate(compose(b200)).notes)


def test_borrowed_efficiency_reads_what_was_priced():
    assert borrowed_efficiency(gpu_spec(load_gpu_config("h100_sxm")), "fp8_rowwise") is None  # measured (H200)
    g = gpu_spec(load_gpu_config("b200"))
    assert borrowed_efficiency(g, "fp8_blockwise") == "fp8" and borrowed_efficiency(g, "fp8") is None
    changed = dataclasses.replace(g, gemm_efficiency_by_precision={**g.gemm_efficiency_by_precision,
                                                                   "fp8_blockwise": 0.5})
    assert borrowed_efficiency(changed, "fp8_blockwise") is None  # changed from fp8's: the user's own value
    assert borrowed_efficiency(gpu_spec(load_gpu_config("b200")), "fp8_rowwise") == "fp8"  # no key at all
    assert borrowed_efficiency(gpu_spec(load_gpu_config("b200")), "mxfp8") == "fp8"
