"""How layers split over pipeline positions with explicit first/last stage counts, per schedule, and what
a search does with a split its plan cannot take."""
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.config.build import build_workload
from vtrain.config.validate import check_pipeline_split
from vtrain.errors import ConfigError
from vtrain.search.plans import canonical
from vtrain.sim.memory import state_bytes_per_param
from vtrain.workload.enums import Precision, Schedule
from vtrain.workload.partition import layer_split, partition


def _deepseek():
    return build_workload(compose(["+experiment=deepseek_v3_h800"]))


def test_megatron_order_gives_the_first_and_last_stage_their_counts():
    w = _deepseek()
    plan = replace(w.plan, schedule=Schedule.INTERLEAVED, virtual_stages=2, pp=4, dp=512,
                   first_stage_layers=13, last_stage_layers=16)
    check_pipeline_split(w.model, plan)
    counts = layer_split(61, plan)
    # positions q = c*p + s: stage 0 holds q=0,4 (7+6), stage 3 q=3,7 (8+8), stages 1, 2 16 each (8+8)
    assert counts == (7, 8, 8, 8, 6, 8, 8, 8)
    assert sum(counts) == 61


def test_dualpipe_applies_the_counts_to_each_directions_chain():
    """DualPipe's rank s holds stage s of one direction and stage p-1-s of the other: with 3 and 2 layers
    at the chain's ends, ranks 0 and p-1 (embedding, head, MTP) hold 5 layers and the others 4 + 4."""
    w = _deepseek()
    assert (w.plan.schedule, w.plan.pp, w.plan.first_stage_layers, w.plan.last_stage_layers) == \
        (Schedule.DUALPIPE, 16, 3, 2)
    chain = layer_split(61, w.plan, chain=16)
    assert chain == (3, *([4] * 14), 2) and sum(chain) == 61
    part = partition(w.model, w.plan)
    assert [part.stage_layers(s) for s in range(16)] == [5, *([8] * 14), 5]


@pytest.mark.parametrize("schedule", [Schedule.ZBV, Schedule.DUALPIPEV])
def test_v_shapes_refuse_first_and_last_stage_counts(schedule):
    w = _deepseek()
    with pytest.raises(ConfigError, match="V shape puts the first and the last layers on stage 0"):
        check_pipeline_split(w.model, replace(w.plan, schedule=schedule))


def test_a_search_drops_a_split_that_does_not_fit_its_plan():
    """The preset's 3 + 2 split is for pp=16; a searched pp=8 plan (56 layers over 6 stages does not divide)
    runs with the default spread, not pruned; pp=16 keeps it."""
    w = _deepseek()
    assert canonical(replace(w.plan, pp=8, dp=256), w.model).first_stage_layers == 0
    kept = canonical(w.plan, w.model)
    assert (kept.first_stage_layers, kept.last_stage_layers) == (3, 2)


def test_bf16_adam_moments_halve_m_and_v():
    """fp32 master (4) + m, v: 8 B in fp32, 4 B in bf16 (DeepSeek-V3 Sec. 3.3.4), per parameter, then ZeRO."""
    w = _deepseek()
    plan = replace(w.plan, zero_stage=0, distributed_optimizer=False)
    assert state_bytes_per_param(replace(plan, optimizer_moments="fp32"))[2] == 12.0
    assert state_bytes_per_param(plan)[2] == 8.0
    assert state_bytes_per_param(replace(plan, precision=Precision.FP32))[2] == 4.0
    sharded = replace(plan, distributed_optimizer=True)
    assert state_bytes_per_param(sharded)[2] == pytest.approx(8.0 / (sharded.dp * sharded.cp))


def test_the_published_deepseek_v3_layout_fits_an_h800():
    """With the report's memory measures (Sec. 3.2.3 recompute, 3.3.3 SwiGLU recompute, 3.3.4 BF16 moments)
    and the embedding/head rank holding fewer layers, PP16 x EP64 DualPipe fits in 80 GiB."""
    from vtrain.api import simulate

    report = simulate(compose(["+experiment=deepseek_v3_h800"]))
    assert report.fits and 0.85 < report.peak_memory_bytes / report.memory_capacity_bytes < 1.0
