"""The shipped sustained-GEMM fractions are what their fit gives under today's model: a change to a kernel the fit
subtracts (element-wise work, optimizer, communication of the decomposed DeepSpeed step) moves the fitted value,
and this fails until ``python bench/fit_sustained.py --write`` has refitted the configs."""
import pytest

from tests.bench_scripts import load_bench


def _fit_module():
    return load_bench("fit_sustained")


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_shipped_fraction_is_the_fit_of_the_current_model(gpu):
    fit = _fit_module()
    fitted = fit.fit(gpu)
    assert 0.3 < fitted < 1.0
    assert fit.shipped(gpu) == pytest.approx(fitted, abs=0.0015), (
        f"gpu/{gpu}.yaml ships sustained_gemm_fraction={fit.shipped(gpu)}, the fit now gives {fitted:.4f}: "
        "refit with python bench/fit_sustained.py --write")


def test_transfers_carry_the_fitted_value():
    fit = _fit_module()
    for gpu, transfers in fit.FITTED.items():
        for other in transfers:
            assert fit.shipped(other) == fit.shipped(gpu), other
