"""torchao's rowwise FP8 on PyTorch's CUTLASS kernel (aten RowwiseScaledMM.cu) where PyTorch does not hand it to
cuBLASLt: per-tensor FP8's efficiency times ``gpu.rowwise_cutlass_gemm_ratio``, fitted on torchtitan's per-tensor /
rowwise pairs of one job (vtrain.calibration.rowwise_kernel), checked leave-one-job-out and on the held-out B200
pair."""
import math

import pytest

from vtrain import compose, simulate
from vtrain.calibration import rowwise_kernel as rk
from vtrain.config.build import build_workload, gpu_spec
from vtrain.config.compose import load_gpu_config
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.workload.stack import StackSpec

SHIPPED = 0.626  # gpu/h100_sxm.yaml and gpu/b200.yaml: python bench/fit_rowwise_kernel.py --write
ROWWISE = ["+model=llama3_8b", "+cluster=h100x1024", "stack=torchtitan_fsdp2_compile", "training.precision=fp8_rowwise",
           "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8", "training.global_batch_size=8"]


def test_pytorch_picks_cublas_only_on_hopper_with_a_new_enough_cublas():
    """Blas.cpp: cuBLASLt for rowwise scales on sm_90 with cuBLAS >= 12.9; CUTLASS otherwise, and on sm_100 (2-D
    row scales) with every build."""
    old, new = StackSpec(name="old"), StackSpec(name="new", cublas_rowwise_fp8=True)
    assert old.rowwise_fp8_on_cutlass("hopper") and old.rowwise_fp8_on_cutlass("blackwell")
    assert not new.rowwise_fp8_on_cutlass("hopper") and new.rowwise_fp8_on_cutlass("blackwell")
    assert not build_workload(compose(ROWWISE)).stack.cublas_rowwise_fp8  # torchtitan's stacks: CUTLASS


def test_the_cutlass_kernel_runs_at_fp8s_efficiency_times_the_ratio():
    gpu = gpu_spec(load_gpu_config("h100_96gb_500w"))
    assert gpu.rowwise_cutlass_gemm_ratio == pytest.approx(SHIPPED)
    cutlass = AnalyticalCostModel(build_workload(compose(ROWWISE))).curve
    cublas = AnalyticalCostModel(build_workload(compose([*ROWWISE, "stack.cublas_rowwise_fp8=true"]))).curve
    fp8 = gpu.gemm_efficiency_by_precision["fp8"]
    assert cutlass.eta_max == pytest.approx(fp8 * SHIPPED)
    assert cublas.eta_max == pytest.approx(gpu.gemm_efficiency_by_precision["fp8_rowwise"])  # the H200 table's
    assert simulate(compose(ROWWISE)).iteration_time_s > 1.1 * simulate(
        compose([*ROWWISE, "stack.cublas_rowwise_fp8=true"])).iteration_time_s


def test_a_per_tensor_plan_does_not_take_the_ratio():
    fp8 = [a.replace("fp8_rowwise", "fp8") for a in ROWWISE]
    gpu = gpu_spec(load_gpu_config("h100_96gb_500w"))
    assert AnalyticalCostModel(build_workload(compose(fp8))).curve.eta_max == pytest.approx(
        gpu.gemm_efficiency_by_precision["fp8"])


@pytest.mark.slow
def test_the_fit_reproduces_the_shipped_ratio_and_holds_out_of_sample():
    """Fitted on the four H100 pairs (Llama 3 70B and 8B, TP 8, with and without async TP): the shipped ratio;
    each job's ratio fitted on the other's alone within 0.02 of it (0.634, 0.622); every Hopper pair's step ratio
    within 4% (at 1.0 they were 9-20% fast), the held-out B200 pair from -14.7% to +6.2%."""
    pairs = rk.load_pairs()
    assert len(pairs) == 5 and sum(p.architecture == "hopper" for p in pairs) == 4
    hopper = [p for p in pairs if p.architecture == "hopper"]
    ratio = rk.fit(hopper)
    assert ratio == pytest.approx(SHIPPED, abs=0.002)
    for job in {p.job for p in hopper}:
        assert rk.fit([p for p in hopper if p.job != job]) == pytest.approx(ratio, abs=0.02)
    for p in hopper:
        assert math.expm1(rk.error(p, 1.0)) < -0.08 and abs(math.expm1(rk.error(p, ratio))) < 0.04, p.label
    (b200,) = [p for p in pairs if p.architecture != "hopper"]
    assert math.expm1(rk.error(b200, 1.0)) == pytest.approx(-0.147, abs=0.01)
    assert math.expm1(rk.error(b200, ratio)) == pytest.approx(0.062, abs=0.01)


def test_the_caution_note_names_the_kernel_and_the_switch():
    notes = simulate(compose(ROWWISE)).notes
    assert ("caution: fp8_rowwise GEMMs run on PyTorch's CUTLASS kernel, priced at fp8's efficiency x 0.626 "
            "(gpu.rowwise_cutlass_gemm_ratio, fitted end to end; stack.cublas_rowwise_fp8=true: a PyTorch on cuBLAS "
            ">= 12.9 runs cuBLAS's on Hopper)") in notes
    assert not any("CUTLASS" in n for n in simulate(compose([*ROWWISE, "stack.cublas_rowwise_fp8=true"])).notes)
