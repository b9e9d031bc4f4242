"""bench/gpu_pairs.py: one job on two GPUs, measured and predicted speed ratios."""
from types import SimpleNamespace

import pytest

from tests.bench_scripts import load_bench
from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.published_rows import PublishedRow


def _row(index, gpu, measured_s, model="llama3_8b", precision="fp8", gpus=8, source="megatron_bridge_25.11"):
    plan = SimpleNamespace(global_batch_size=128, seq_len=8192, num_gpus=gpus,
                           precision=SimpleNamespace(value=precision))
    w = SimpleNamespace(plan=plan, model=SimpleNamespace(name=model), cluster=SimpleNamespace(
        gpu=SimpleNamespace(name=gpu)))
    return PublishedRow(source, MeasuredRow(index, {}), w, measured_s)


def test_a_pair_is_one_job_on_two_gpus_and_its_ratios_are_speeds():
    gp = load_bench("gpu_pairs")
    rows = [_row(1, "gb300", 3.0), _row(2, "gb200", 3.6), _row(3, "gb200", 3.6, precision="mxfp8"),
            _row(4, "gb300", 3.0, source="megatron_bridge_26.02")]
    found = gp.pairs(rows, {1: 3.3, 2: 3.5, 3: 3.5, 4: 3.0}, ("gb300", "gb200"))
    assert len(found) == 1  # another precision or release is another job
    a, b, measured, predicted = found[0]
    assert (a.row.index, b.row.index) == (1, 2)  # the first GPU named first
    assert measured == pytest.approx(3.6 / 3.0) and predicted == pytest.approx(3.5 / 3.3)
    # the same pair named the other way round is the inverse
    _, _, back, _ = gp.pairs(rows, {1: 3.3, 2: 3.5, 3: 3.5, 4: 3.0}, ("gb200", "gb300"))[0]
    assert back == pytest.approx(3.0 / 3.6)
