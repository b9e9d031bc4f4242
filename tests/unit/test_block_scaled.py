"""Block-scaled GEMMs (MXFP8, NVFP4) where no table measures them: per-tensor FP8's efficiency times
``gpu.block_scaled_gemm_ratio``, fitted on the measured bf16 -> MXFP8 speedups of the dense torchtitan pairs
(bench/fit_block_scaled.py) and checked on pairs and rows it was not fitted on."""
import math
from dataclasses import replace

import pytest

from tests.bench_scripts import load_bench
from vtrain import compose, simulate
from vtrain.config.build import gpu_spec
from vtrain.config.compose import load_gpu_config
from vtrain.cost.gemm import GemmCurve, borrowed_efficiency


def _fit_module():
    return load_bench("fit_block_scaled")


@pytest.fixture(scope="module")
def fitted():
    fit = _fit_module()
    pairs, megatron = fit.load_pairs()
    dense, held = fit.split(pairs)
    return fit, dense, held, megatron


@pytest.mark.parametrize("precision", ["mxfp8", "nvfp4"])
def test_a_borrowed_block_scaled_efficiency_takes_the_ratio(precision):
    gpu = gpu_spec(load_gpu_config("gb200"))
    assert borrowed_efficiency(gpu, precision) == "fp8" and gpu.block_scaled_gemm_ratio < 1.0
    fp8 = gpu.gemm_efficiency_by_precision["fp8"]
    assert GemmCurve.for_gpu(gpu, precision).eta_max == pytest.approx(fp8 * gpu.block_scaled_gemm_ratio)
    assert GemmCurve.for_gpu(gpu, "fp8").eta_max == pytest.approx(fp8)  # per-tensor FP8 keeps its own
    assert GemmCurve.for_gpu(gpu, "fp8_blockwise").eta_max == pytest.approx(fp8)  # not a microscaling format


def test_a_measured_block_scaled_efficiency_is_not_scaled():
    gpu = gpu_spec(load_gpu_config("gb200"))
    effs = {**gpu.gemm_efficiency_by_precision, "mxfp8": 0.61}  # a value of its own: no longer fp8's copy
    own = replace(gpu, gemm_efficiency_by_precision=effs)
    assert borrowed_efficiency(own, "mxfp8") is None
    assert GemmCurve.for_gpu(own, "mxfp8").eta_max == pytest.approx(0.61)


def test_the_caution_note_names_the_ratio():
    cfg = compose(["+model=llama3_8b", "+cluster=gb200_nvl72x16", "training.precision=mxfp8",
                   "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8", "training.global_batch_size=8"])
    ratio = gpu_spec(load_gpu_config("gb200")).block_scaled_gemm_ratio
    assert (f"caution: mxfp8 GEMMs are priced at fp8's efficiency x {ratio:.3g} (gpu.block_scaled_gemm_ratio, "
            "fitted end to end): no table measures this GPU's mxfp8 kernels") in simulate(cfg).notes


def test_shipped_ratio_is_the_fit_of_the_current_model(fitted):
    fit, dense, _, _ = fitted
    assert len(dense) == 4
    ratio = fit.fit(dense)
    for gpu in fit.FITTED + fit.TRANSFERS:
        shipped = gpu_spec(load_gpu_config(gpu)).block_scaled_gemm_ratio
        assert shipped == pytest.approx(ratio, abs=0.0015), (
            f"gpu/{gpu}.yaml ships block_scaled_gemm_ratio={shipped}, the fit now gives {ratio:.4f}: "
            "refit with python bench/fit_block_scaled.py --write")


def test_held_out_speedups_and_rows_are_closer_with_the_ratio(fitted):
    """Not fitted on: the GB200 Llama 4 Scout MoE pair, the NVFP4 pairs (the ratio transferred) and Megatron-Core's
    GB300 MXFP8 row (Transformer Engine's kernels). Each moves toward its measurement; the errors are printed."""
    fit, dense, held, megatron = fitted
    ratio = gpu_spec(load_gpu_config("b200")).block_scaled_gemm_ratio
    for pair in held:
        before, after = (math.expm1(fit.speedup_error(pair, r)) for r in (1.0, ratio))
        print(f"\n{fit.label(pair)}: speedup error {before:+.1%} at 1.0, {after:+.1%} at {ratio}")
        assert abs(after) < abs(before)
    scout = [p for p in held if p[1][1].model.num_experts > 0]
    assert len(scout) == 1 and abs(fit.speedup_error(scout[0], ratio)) < 0.08
    (gb300,) = [m for m in megatron if m[0].get("gpu") == "gb300"]
    before, after = (fit.predicted_ms(gb300[1], r) / gb300[2] - 1 for r in (1.0, ratio))
    print(f"GB300 MXFP8 4K (Megatron-Core): {before:+.1%} at 1.0, {after:+.1%} at {ratio}")
    assert abs(after) < abs(before)
