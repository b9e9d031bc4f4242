"""The measured peak memory of torchtitan's rows (vtrain/data/modern_gpus/torchtitan_rows.csv, torchtitan's
benchmarks: `torch.cuda` peak per GPU) against vtrain's predicted peak, each row read as
`python -m vtrain task=validate +cluster=h100x1024 validate.data=torchtitan` reads it. Not fitted: no constant of
vtrain is fitted on these memory figures (the calibration fits times only), so the figures are out of sample.

The bounds are the figures docs/validation.md states: H100 peak memory MAPE 9.9% over its 18 rows (the issue's
10%), every H100 row under-predicted by 4-18% (torchtitan reports the caching allocator's reserved peak, which
vtrain models only as a fixed reserve); all 31 rows with a measured peak: "peak memory: MAPE: 10.27% | ... | max
APE: 18.5%" as task=validate prints it."""
import functools
from typing import Dict, List, Tuple

import pytest

H100 = "h100_96gb_500w"
H100_MAPE_PCT = 10.0  # documented 9.9% (n=18): the 10% target
H100_WORST_UNDER_PCT = 18.5  # documented "under-predicted by 4-18%" (worst: 405B TP 8 PP 8, -18.3%)
H100_LEAST_UNDER_PCT = 3.5  # ... the least under-predicted: 8B FSDP at local batch 1, -3.8%
ALL_MAPE_PCT = 10.27 + 0.5  # task=validate's "peak memory: MAPE: 10.27%", + half a point for changes elsewhere
ALL_WORST_PCT = 18.5 + 0.5  # ... its "max APE: 18.5%" (the B200 rows: +17-18.5%, the B200's own power limit unknown)


@pytest.fixture(scope="module")
def memory_rows() -> List[Tuple[int, str, float, float]]:
    """(row, GPU, measured GiB, predicted GiB) of every row stating a measured peak memory."""
    from vtrain.calibration.sources import cluster_cfg
    from vtrain.config.compose import load_gpu_config, load_stack_config
    from vtrain.validation.csv_io import read_measurements
    from vtrain.validation.datasets import SHIPPED_STACK, resolve_dataset, shipped_defaults
    from vtrain.validation.run import simulate_row

    cfg = cluster_cfg("h100x1024")
    load_gpu = functools.lru_cache(maxsize=None)(load_gpu_config)
    load_stack = functools.lru_cache(maxsize=None)(load_stack_config)
    out = []
    for row in read_measurements(resolve_dataset("torchtitan")):
        measured = row.get("peak_memory_gib")
        if measured is None or measured == "":
            continue
        _, report, _ = simulate_row(row, cfg, load_gpu, load_stack, shipped_defaults("torchtitan"),
                                    SHIPPED_STACK["torchtitan"])
        out.append((row.index, str(row.get("gpu")), float(measured), report.peak_memory_bytes / 2**30))
    return out


def _signed_pct(rows: List[Tuple[int, str, float, float]]) -> Dict[int, float]:
    return {i: (pred - meas) / meas * 100.0 for i, _, meas, pred in rows}


def test_the_rows_with_a_measured_peak_are_the_documented_31_of_them_18_on_h100(memory_rows):
    assert len(memory_rows) == 31
    assert sum(gpu == H100 for _, gpu, _, _ in memory_rows) == 18
    assert all(25.0 < meas < 190.0 for _, _, meas, _ in memory_rows)  # per-GPU GiB, as the tables state them


def test_h100_peak_memory_within_its_documented_bound(memory_rows):
    h100 = [r for r in memory_rows if r[1] == H100]
    err = _signed_pct(h100)
    mape = sum(abs(e) for e in err.values()) / len(err)
    assert mape <= H100_MAPE_PCT, f"H100 peak memory MAPE {mape:.2f}% > {H100_MAPE_PCT}%"
    # every H100 row below its measured (reserved) peak, by the documented 4-18%
    for i, e in err.items():
        assert -H100_WORST_UNDER_PCT <= e <= -H100_LEAST_UNDER_PCT, (i, round(e, 2))


def test_every_measured_peak_within_the_figure_task_validate_prints(memory_rows):
    err = _signed_pct(memory_rows)
    mape = sum(abs(e) for e in err.values()) / len(err)
    worst = max(err, key=lambda i: abs(err[i]))
    assert mape <= ALL_MAPE_PCT, f"peak memory MAPE {mape:.2f}% over {len(err)} rows"
    assert abs(err[worst]) <= ALL_WORST_PCT, (worst, round(err[worst], 2))
    assert sum(abs(e) <= 10.0 for e in err.values()) >= 15  # task=validate: "within 10%: 48.4%" (15 of 31)
