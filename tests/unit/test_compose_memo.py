"""tests/conftest.py gives a repeated compose a deep copy of the session's first result: the copy is the value a
fresh compose gives, a test may change its copy without touching the next one's, and a failure is raised afresh."""
import pytest
from omegaconf import OmegaConf

import vtrain.config.compose as composing
from vtrain import compose
from vtrain.errors import ConfigError

GPT3 = ["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8"]


def test_a_repeated_compose_is_a_fresh_composes_value():
    fresh = getattr(composing.compose, "real", composing.compose)(GPT3)
    assert OmegaConf.to_container(compose(GPT3)) == OmegaConf.to_container(fresh)
    assert OmegaConf.to_container(compose(GPT3)) == OmegaConf.to_container(fresh)
    assert compose(GPT3).model.hidden_size == 12288 and compose(GPT3).parallelism.pp == 16


def test_a_change_to_one_copy_does_not_reach_the_next():
    first = compose(GPT3)
    first.parallelism.tp = 4
    first.model.hidden_size = 1
    again = compose(GPT3)
    assert (again.parallelism.tp, again.model.hidden_size) == (8, 12288)
    assert again is not first


def test_a_failed_compose_fails_every_time():
    for _ in range(2):
        with pytest.raises(ConfigError, match="gpt9999"):
            compose(["+model=gpt9999", "+cluster=a100x1024"])
