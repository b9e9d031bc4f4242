"""task=calibrate's per-constant table (issue 14 item 1): value, bounds, at-bound flag, sensitivity to
+-10%, spread over the cross-validation folds."""
import numpy as np
import pytest

from vtrain import compose


def test_calibrate_table_gives_bounds_sensitivity_and_fold_spread():
    """task=calibrate's per-constant table (item 1): on 24 of the A100 runs, the shipped constants."""
    from vtrain.calibration.fit import BOUNDS, Constants, Dataset, at_bound
    from vtrain.cli.task_calibrate import constant_table
    from vtrain.config.compose import load_gpu_config, load_stack_config
    from vtrain.validation.csv_io import read_measurements
    from vtrain.validation.datasets import data_path
    from vtrain.validation.rows import row_workload

    cluster = compose(["+cluster=vtrain_a100"], require=False).cluster
    rows = read_measurements(data_path("a100_single_node_iteration_times.csv"))[::60]
    ws = [row_workload(r, cluster, load_gpu_config, load_stack_config, stack="megatron_deepspeed_2022") for r in rows]
    ds = [Dataset("single_node", ws, np.array([float(r.get("iteration_time_ms")) / 1e3 for r in rows]))]
    c = Constants.of(ws[0])
    values = {k: c.value(k) for k in BOUNDS}
    folds = [{k: v * 0.95 for k, v in values.items()}, {k: v * 1.02 for k, v in values.items()}]
    table = constant_table(ds, c, values, folds)
    assert set(table) == set(BOUNDS)
    g = table["gemm_max_efficiency"]
    assert g["bounds"] == list(BOUNDS["gemm_max_efficiency"]) and g["value"] == values["gemm_max_efficiency"]
    # the GEMM efficiency drives compute time: moving it either way off the fit worsens the error
    assert g["delta_mape_pp_minus_10pct"] > 0 and g["delta_mape_pp_plus_10pct"] != 0
    assert g["cv_fold_min"] == pytest.approx(0.95 * g["value"]) and g["cv_fold_max"] == pytest.approx(1.02 * g["value"])
    lo, hi = BOUNDS["host_time_per_kernel_s"]
    assert at_bound("host_time_per_kernel_s", lo) == "lower" and at_bound("host_time_per_kernel_s", hi) == "upper"
    assert at_bound("host_time_per_kernel_s", (lo * hi) ** 0.5) == ""
