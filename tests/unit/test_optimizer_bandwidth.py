"""The optimizer step's own bandwidth fraction (stack.optimizer_bandwidth_fraction): torch's fused Adam measured on
the lent H200 moves its bytes at 0.567 of HBM, not at the element-wise kernels' memory_efficiency."""
import csv
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from vtrain import compose
from vtrain.config.build import build_workload
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
BASE = ["+model=llama3_8b", "+cluster=h200x8", "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
        "training.global_batch_size=8"]


def test_the_step_runs_at_the_stacks_fraction_else_at_the_gpus_memory_efficiency():
    w = build_workload(compose([*BASE, "stack=torchtitan_fsdp2"]))
    hbm = w.cluster.gpu.hbm_bandwidth_bytes_per_s
    assert w.stack.optimizer_bandwidth_fraction == 0.567 and "measured" in w.stack.provenance[
        "optimizer_bandwidth_fraction"]
    assert AnalyticalCostModel(w).optimizer_time_s(1e9) == pytest.approx(1e9 * 40.0 / (hbm * 0.567))
    plain = replace(w, stack=replace(w.stack, optimizer_bandwidth_fraction=None))
    assert AnalyticalCostModel(plain).optimizer_time_s(1e9) == pytest.approx(
        1e9 * 40.0 / (hbm * w.cluster.gpu.memory_efficiency))
    te = build_workload(compose([*BASE, "stack=megatron_core_te"]))
    assert te.stack.optimizer_bandwidth_fraction is None  # TE's FusedAdam: not measured


def test_the_shipped_value_is_the_median_of_the_measured_adam_rows():
    fractions = []
    for folder in ("h200", "h200-llama"):
        with (ROOT / "profiles" / "measured" / folder / "ops.csv").open() as fh:
            fractions += [14 * float(r["params"]) / float(r["median_s"]) / 4.8e12 for r in csv.DictReader(fh)
                          if r["op"] == "adam"]  # bf16 p, g, m, v read and p, m, v written: 14 B per parameter
    assert len(fractions) == 13 and round(statistics.median(fractions), 3) == 0.567


@pytest.mark.parametrize("value", ["0", "1.5", "x"])
def test_a_fraction_outside_its_range_is_one_line(value):
    with pytest.raises(ConfigError, match="stack.optimizer_bandwidth_fraction"):
        build_workload(compose([*BASE, f"stack.optimizer_bandwidth_fraction={value}"]))
