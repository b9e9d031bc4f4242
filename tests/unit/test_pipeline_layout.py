"""Megatron-Core's explicit pipeline layout (--pipeline-model-parallel-layout) and the embedding and loss
counted as pipeline layers: Llama 3.1 405B's 126 layers on PP16 x VP8."""
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.config.build import build_workload
from vtrain.config.validate import check_pipeline_split
from vtrain.errors import ConfigError
from vtrain.search.plans import canonical
from vtrain.workload.enums import Schedule
from vtrain.workload.partition import layer_split, partition
from vtrain.workload.pipeline_layout import layout_layers, parse_layout

_405B = ["+model=llama3_1_405b", "+cluster=h100x1024", "parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8",
         "parallelism.schedule=interleaved", "parallelism.virtual_stages=8", "training.global_batch_size=512",
         "training.seq_len=8192", "parallelism.recompute=full"]
_ONE_PER_POSITION = "parallelism.pipeline_layout='E|(t|)*126,L'"


@pytest.fixture(scope="module")
def w405():
    """The 405B plan with the one-layer-per-position layout."""
    return build_workload(compose([*_405B, _ONE_PER_POSITION]))


def test_the_string_unrolls_as_megatron_parses_it():
    """Megatron-Core's docstring example "Ettt|(tt|)*29,m|L": the embedding and 3 layers, 29 positions of 2,
    the MTP module alone, the loss alone (DeepSeek-V3's 61 layers on 32 positions)."""
    positions = parse_layout("Et*3|(tt|)*29,m|L")
    assert positions == ("Ettt", *(["tt"] * 29), "m", "L")
    assert layout_layers("Et*3|(tt|)*29,m|L", 61, 16, 2, mtp_layers=1) == (3, *([2] * 29), 0, 0)


def test_405b_on_pp16_vp8_refused_without_the_embedding_and_loss_slots():
    """126 layers over 128 positions leave two without a layer unless the embedding and the loss take them."""
    with pytest.raises(ConfigError, match="exceeds the layers=126"):
        simulate(compose(_405B))


def test_405b_on_pp16_vp8_layout_equals_the_account_for_flags(w405):
    """E|(t|)*126,L is what --account-for-embedding/loss-in-pipeline-split build for 126 + 2 = 128 = 16 x 8:
    one layer per position, none on the first and the last; the same split, the same simulated iteration."""
    flags = ["parallelism.account_for_embedding=true", "parallelism.account_for_loss=true"]
    w_layout = w405
    w_flags = build_workload(compose([*_405B, *flags]))
    expected = (0, *([1] * 126), 0)
    assert layer_split(126, w_layout.plan) == expected == layer_split(126, w_flags.plan)
    part = partition(w_layout.model, w_layout.plan)
    # stage 0 holds positions 0, 16, ..., 112: the embedding and 7 layers; stage 15 the loss and 7
    assert part.stage_layers(0) == 7 and part.stage_layers(15) == 7 and part.stage_layers(1) == 8
    r_layout, r_flags = simulate(compose([*_405B, _ONE_PER_POSITION])), simulate(compose([*_405B, *flags]))
    assert r_layout.fits and r_layout.iteration_time_s == r_flags.iteration_time_s


def test_an_uneven_layout_moves_layers_off_the_loss_stage():
    """pp=4, 32 layers: 'Et*7|t*9|t*9|t*7L' gives the first and last stages 7 layers and the middle two 9."""
    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=4",
                                "parallelism.dp=1", "parallelism.sequence_parallel=false",
                                "parallelism.pipeline_layout='Et*7|t*9|t*9|t*7L'"]))
    assert layer_split(32, w.plan) == (7, 9, 9, 7)
    part = partition(w.model, w.plan)
    assert [part.stage_layers(s) for s in range(4)] == [7, 9, 9, 7]
    # the embedding on stage 0, the final norm and the output layer on stage 3
    assert part.stage_params(0) == 7 * part.layer_params + part.embedding_params
    assert part.stage_params(3) == 7 * part.layer_params + part.head_params


@pytest.mark.parametrize("layout,message", [
    ("E|(t|)*125,|L", "125 transformer layers t, but the model has num_layers=126"),
    ("E|(t|)*127,L", "129 positions, but pp\\*virtual_stages=16\\*8=128"),
    ("t|(t|)*126,EL", "the embedding E must open the first position"),
    ("E|(t|)*126,t", "the embedding E and the loss L must each appear exactly once"),
    ("E|(t|)*126,X", "unknown layer character"),
    ("E|(t|)*126,mL", "1 MTP modules m, but the model has mtp_layers=0"),
])
def test_layouts_megatron_refuses(layout, message, w405):
    with pytest.raises(ConfigError, match=message):
        check_pipeline_split(w405.model, replace(w405.plan, pipeline_layout=layout))


def test_a_layout_is_alone_and_in_megatrons_order(w405):
    w = w405
    with pytest.raises(ConfigError, match="does not combine with first/last_stage_layers or account_for"):
        check_pipeline_split(w.model, replace(w.plan, account_for_loss=True))
    with pytest.raises(ConfigError, match="not schedule=dualpipev"):
        check_pipeline_split(w.model, replace(w.plan, schedule=Schedule.DUALPIPEV, virtual_stages=1))


def test_a_search_drops_a_layout_made_for_another_pipeline(w405):
    w = w405
    assert canonical(w.plan, w.model).pipeline_layout == "E|(t|)*126,L"
    assert canonical(replace(w.plan, pp=8, dp=16), w.model).pipeline_layout == ""
