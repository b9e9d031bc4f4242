"""The test session's compose (tests/composecache.py: Hydra's composition once per set of config-group choices,
the value overrides applied by Hydra's own function to a copy) gives what a fresh Hydra compose gives: the same
value for value, add, force-add and delete overrides, the same error for a bad one, a copy a test may change
without touching the next, and a failure raised afresh each time."""
import pytest
from omegaconf import OmegaConf

import vtrain.config.compose as composing
from vtrain import compose
from vtrain.errors import ConfigError

GPT3 = ["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8"]
LLAMA = ["+model=llama3_70b", "+cluster=h100x1024"]


def _fresh(overrides, require=True):
    return getattr(composing.compose, "real", composing.compose)(overrides, require)


def _same(overrides, require=True):
    """The memo's first compose and its second (a copy of what it kept) both equal a fresh compose."""
    fresh = OmegaConf.to_container(_fresh(overrides, require))
    assert OmegaConf.to_container(compose(overrides, require)) == fresh
    assert OmegaConf.to_container(compose(overrides, require)) == fresh


def _same_error(overrides):
    """The memo raises Hydra's error, and raises it again (a failure is never kept)."""
    with pytest.raises(ConfigError) as fresh:
        _fresh(overrides)
    for _ in range(2):
        with pytest.raises(ConfigError) as memo:
            compose(overrides)
        assert str(memo.value) == str(fresh.value)
    return str(memo.value)


def test_a_repeated_compose_is_a_fresh_composes_value():
    _same(GPT3)
    assert compose(GPT3).model.hidden_size == 12288 and compose(GPT3).parallelism.pp == 16


@pytest.mark.parametrize("overrides", [
    [*GPT3, "parallelism.micro_batch_size=2", "training.global_batch_size=512"],
    ["parallelism.tp=4", *LLAMA, "parallelism.sequence_parallel=false"],  # a value override before the groups
    [*LLAMA, "model.num_layers=40", "+model.note=x", "++training.seq_len=4096"],  # add and force-add
    [*LLAMA, "+extra.a=1", "+extra.b=2", "~extra.a"],  # delete
    [*LLAMA, "cluster.gpu=a100_80gb"],  # the GPU the resolve step loads follows the override
])
def test_value_overrides_give_a_fresh_composes_value(overrides):
    _same(overrides)


def test_without_require_it_is_a_fresh_composes_value():
    _same(["+cluster=h100x1024", "parallelism.tp=2", "cluster.num_nodes=4"], require=False)
    assert compose(["+cluster=h100x1024"], require=False).get("gpu") is None


def test_the_gpu_follows_a_cluster_gpu_override():
    assert compose([*LLAMA, "cluster.gpu=a100_80gb"]).gpu.name == _fresh([*LLAMA, "cluster.gpu=a100_80gb"]).gpu.name
    assert compose([*LLAMA, "cluster.gpu=a100_80gb"]).gpu.name != compose(LLAMA).gpu.name


@pytest.mark.parametrize("overrides", [
    [*GPT3, "parallelism.no_such_key=1"],  # a key the schema does not have
    [*GPT3, "parallelism.tp=eight"],  # a value of the wrong type
    [*GPT3, "+parallelism.tp=2"],  # adding a key that is there
    [*GPT3, "~parallelism.no_such_key"],  # deleting a key that is not
    [*GPT3, "~parallelism.tp"],  # deleting a key of the schema
    [*GPT3, "parallelism.tp=[1"],  # a line Hydra cannot parse
    ["+model=gpt9999", "+cluster=a100x1024"],  # an unknown config
    ["+cluster=a100x1024", "parallelism.tp=2"],  # no model
])
def test_a_bad_override_fails_as_hydra_fails(overrides):
    assert _same_error(overrides)


def test_a_change_to_one_copy_does_not_reach_the_next():
    first = compose(GPT3)
    first.parallelism.tp = 4
    first.model.hidden_size = 1
    again = compose(GPT3)
    assert (again.parallelism.tp, again.model.hidden_size) == (8, 12288)
    assert again is not first
    other = compose([*GPT3, "parallelism.tp=2"])
    assert (other.parallelism.tp, compose(GPT3).parallelism.tp) == (2, 8)


def test_a_failed_compose_fails_every_time():
    for _ in range(2):
        with pytest.raises(ConfigError, match="gpt9999"):
            compose(["+model=gpt9999", "+cluster=a100x1024"])
