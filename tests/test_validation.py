"""Validation task: CSV parsing (both header styles, BOM, skipped rows) and error on measured data."""
import numpy as np
import pytest

from vtrain import compose
from vtrain.errors import ConfigError
from vtrain.validation.csv_io import read_measurements
from vtrain.validation.datasets import data_path
from vtrain.validation.run import summary_of, validate_rows

VTRAIN_HEADER = ("Parameters (billion),# GPUs,global batch,micro batch,hidden size,attention heads,# layers,"
                 "sequence length,tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")


@pytest.fixture(scope="module")
def cfg():
    return compose(["+cluster=vtrain_a100"], require=False)


def run(cfg, path):
    return validate_rows(read_measurements(path), cfg)


def test_vtrain_headers_with_bom_and_params_column(tmp_path, cfg):
    p = tmp_path / "multi.csv"
    p.write_text("\ufeff" + VTRAIN_HEADER + "\n3.6,8,16,2,3072,32,30,2048,2,2,2,1000.0\n", encoding="utf-8")
    (res,) = run(cfg, p)
    assert res.predicted_ms is not None and res.row.values["params_billion"] == "3.6"


def test_vtrain_schema_optional_columns(tmp_path, cfg):
    p = tmp_path / "rows.csv"
    p.write_text("num_gpus,global_batch,micro_batch,hidden_size,num_heads,num_layers,seq_len,tp,dp,pp,"
                 "iteration_time_ms,recompute,schedule,virtual_stages,gpu\n"
                 "16,64,1,4096,32,32,2048,8,1,2,900,selective,interleaved,2,a100_80gb\n"
                 "16,64,1,4096,32,32,2048,8,1,2,900,half,1f1b,1,a100_80gb\n"
                 "8,64,1,4096,32,32,2048,8,1,2,900,full,1f1b,1,a100_80gb\n"
                 "16,64,1,4096,32,32,2048,8,1,2,900,full,1f1b,1,tpu_v9\n")
    ok, bad_enum, bad_gpus, bad_gpu = run(cfg, p)
    assert ok.predicted_ms is not None
    assert bad_enum.predicted_ms is None and "recompute=half is not supported" in bad_enum.skipped_reason
    assert "differs from num_gpus=8" in bad_gpus.skipped_reason
    assert "gpu=tpu_v9 is unknown" in bad_gpu.skipped_reason
    assert summary_of([ok, bad_enum, bad_gpus, bad_gpu]).skipped == 3


def test_missing_required_column(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("num_gpus,tp\n1,1\n")
    with pytest.raises(ConfigError, match="missing required column"):
        read_measurements(p)


def test_single_node_error_within_recorded_bound(cfg):
    """A fixed 1-in-8 sample of the 1,440 A100 runs; bound recorded from the calibrated model."""
    rows = read_measurements(data_path("a100_single_node_iteration_times.csv"))[::8]
    results = validate_rows(rows, cfg)
    s = summary_of(results)
    print(s.line())
    assert s.n == 180 and s.skipped == 0
    assert s.mape_pct < 8.5  # recorded 7.33% on this sample: see README "Accuracy"


def test_summary_line_format(cfg):
    rows = read_measurements(data_path("a100_single_node_iteration_times.csv"))[:10]
    line = summary_of(validate_rows(rows, cfg)).line()
    import re

    assert re.fullmatch(r"MAPE: [\d.]+% \| median APE: [\d.]+% \| max APE: [\d.]+% \| within 10%: [\d.]+% \| "
                        r"n=10 \| skipped=0", line)
    assert np.isfinite(float(line.split("%")[0].split()[-1]))


def test_single_node_only_fit_trades_large_scale_accuracy():
    """gpu/a100_80gb_single_node holds the constants fitted to the single-node runs alone: better on them,
    but it over-predicts every published weak-scaling row (README "Accuracy": why it is not the default)."""
    from vtrain.validation.weak_scaling import predict, read_weak_scaling, weak_scaling_cluster

    cfg_single = compose(["+cluster=vtrain_a100", "cluster.gpu=a100_80gb_single_node"], require=False)
    rows = read_measurements(data_path("a100_single_node_iteration_times.csv"))[::8]
    s = summary_of(validate_rows(rows, cfg_single, stack="megatron_deepspeed_2022_single_node"))
    print(s.line())
    assert s.n == 180 and s.mape_pct < 6.5  # recorded 5.61% on this sample (7.33% with the default constants)
    cluster = weak_scaling_cluster("a100_80gb_single_node")
    table = read_weak_scaling(data_path("megatron_2021_weak_scaling.csv"))
    errors = [predict(r, cluster, "megatron_deepspeed_2022_single_node").error_pct for r in table]
    assert min(errors) > 5.0  # recorded +9.8% .. +23.5% TFLOP/s/GPU
