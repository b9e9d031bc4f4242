"""The leave-one-source-out calibration machinery (issue 39 items 1 and 5) on small real subsets: which
constant applies to which row, the cached grid surrogate, a fit recovering known constants, the >= 2 sources
rule, and the interval table's nested coverage."""
from dataclasses import replace

import numpy as np
import pytest


@pytest.fixture(scope="module")
def two_sources():
    """12 A100 single-node runs (Megatron-DeepSpeed 2022) and the 10 weak-scaling rows (Megatron-LM 2021)."""
    from vtrain.calibration.sources import cluster_cfg, rows_source, weak_scaling_source
    from vtrain.validation.csv_io import read_measurements
    from vtrain.validation.datasets import data_path
    from vtrain.validation.rows import RowDefaults

    rows = read_measurements(data_path("a100_single_node_iteration_times.csv"))[::120]
    single = rows_source("a100_single_node", rows, cluster_cfg("vtrain_a100"), RowDefaults(), "megatron_deepspeed_2022")
    return [single, weak_scaling_source()]


def _synthetic(sources, params, values):
    """Each source with its measured times replaced by the simulation at ``values`` (a known truth)."""
    from vtrain.calibration.loso import predict_s

    return [replace(s, measured_s=predict_s(s.workloads, params, values)) for s in sources]


def test_params_apply_by_architecture_stack_and_curve(two_sources):
    from vtrain.calibration.loso import PARAMS, informing

    by = {p.key: names for p, names in zip(PARAMS, informing(PARAMS, two_sources))}
    # the single-node stack runs at the A100 GEMM curve (gemm_curve_fitted_on): the sustained share is the weak
    # scaling rows' alone; memory efficiency and the eager host time apply to both
    assert by["gpu:ampere.sustained_gemm_fraction"] == ["megatron_2021_weak_scaling"]
    assert by["gpu:all.memory_efficiency"] == ["a100_single_node", "megatron_2021_weak_scaling"]
    assert by["stack:eager_2022.host_time_per_kernel_s"] == ["a100_single_node", "megatron_2021_weak_scaling"]
    assert by["stack:megatron_core_te.host_time_per_kernel_s"] == []


def test_surrogate_is_exact_on_its_nodes_and_between_them_bounded_by_them(two_sources):
    from vtrain.calibration.loso import PARAMS, Surrogate, simulate_s, with_values

    host = next(p for p in PARAMS if p.key == "stack:eager_2022.host_time_per_kernel_s")
    i = PARAMS.index(host)
    sur = Surrogate(PARAMS, grid=5)
    w = two_sources[0].workloads[0]
    k = sur.row(w)
    u = np.zeros(len(PARAMS))
    for node in (1, 2):
        u[i] = node / 4
        exact = simulate_s(with_values(w, [host], [host.from_unit(node / 4)]))
        assert np.exp(sur.log_s(k, [i], u)) == pytest.approx(exact, rel=1e-12)
    u[i] = 0.375  # half way between nodes 1 and 2: the geometric mean of their times
    a, b = np.exp(sur.node(k, ((i, 1),))), np.exp(sur.node(k, ((i, 2),)))
    assert np.exp(sur.log_s(k, [i], u)) == pytest.approx((a * b) ** 0.5, rel=1e-12)
    assert len(sur.cache) == 2  # nodes are simulated once


def test_fit_recovers_known_constants_and_keeps_single_source_ones(two_sources):
    from vtrain.calibration.loso import PARAMS, Surrogate, fit, prior_value

    names = ["gpu:ampere.sustained_gemm_fraction", "gpu:all.memory_efficiency",
             "stack:eager_2022.host_time_per_kernel_s"]
    params = [p for p in PARAMS if p.key in names]
    truth = [prior_value(params[0], two_sources), 0.55, 4.0e-5]  # the one-source constant at its config value
    data = _synthetic(two_sources, params, truth)
    got = fit(data, Surrogate(params, grid=25), max_evals=300)
    by = dict(zip([p.key for p in params], got.values))
    assert by["gpu:all.memory_efficiency"] == pytest.approx(0.55, rel=0.08)
    assert by["stack:eager_2022.host_time_per_kernel_s"] == pytest.approx(4.0e-5, rel=0.08)
    # informed by one source only: not fitted (the config value is kept)
    assert by["gpu:ampere.sustained_gemm_fraction"] is None
    assert got.trained_on == ("a100_single_node", "megatron_2021_weak_scaling")


def test_loso_holds_each_source_out_and_predicts_it_from_the_others(two_sources):
    from vtrain.calibration.loso import PARAMS, loso

    params = [p for p in PARAMS if p.key in ("gpu:all.memory_efficiency", "stack:eager_2022.host_time_per_kernel_s")]
    data = _synthetic(two_sources, params, [0.6, 5.0e-5])
    full, results = loso(data, params, max_evals=200, grid=25)
    assert [r.name for r in results] == ["a100_single_node", "megatron_2021_weak_scaling"]
    for r in results:
        # one source left: no constant is fitted on it alone, so the held-out prediction is the config value's
        assert r.fold.values == (None, None) and r.fold.trained_on != (r.name,)
        assert r.loso_ape == pytest.approx(r.shipped_ape)
        assert r.in_sample_ape.mean() < 2.0  # both sources agree on the truth: the full fit finds it
        assert r.shipped_ape.mean() > 1.0  # the config values are not the truth: the figures differ


def test_interval_table_nested_coverage_holds_each_source_out():
    from vtrain.calibration.intervals_fit import Residual, fit_classes, nested_coverage

    rng = np.random.default_rng(0)
    rows = [Residual(f"s{j}", "fitted/dense/single_node/gpu_bound", "a100_80gb", "fp16", "1f1b", float(np.exp(e)), 1.0)
            for j in range(4) for e in rng.normal(0.0, 0.1, 40)]
    classes = fit_classes(rows)
    assert classes["fitted"]["n"] == 160 and classes["fitted/dense/single_node/gpu_bound"]["n"] == 160
    cov = nested_coverage(rows)
    assert {f"source:s{j}" for j in range(4)} <= set(cov) and cov["all"]["n"] == 160
    # residuals of one distribution: the table refitted on three sources covers the fourth near 80%
    assert 65.0 <= cov["all"]["coverage_pct"] <= 95.0
    # a source far off the others is covered less
    shifted = rows[:120] + [replace(r, measured_s=r.measured_s * 1.5) for r in rows[120:]]
    assert nested_coverage(shifted)["source:s3"]["coverage_pct"] < 30.0
