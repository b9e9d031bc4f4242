"""build_workload reuses a group's typed value while the group's content is unchanged, and only then."""
import dataclasses

import pytest
from omegaconf import OmegaConf

from vtrain import compose, simulate
from vtrain.config import build
from vtrain.config.build import build_workload, content_key
from vtrain.errors import ConfigError

BASE = ["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8"]


def _uncached(cfg):
    build.clear_memo()
    return build_workload(cfg)


def test_a_changed_value_rebuilds_the_group_and_reuses_the_others():
    cfg = compose(BASE)
    first = build_workload(cfg)
    cfg.parallelism.micro_batch_size = 2
    second = build_workload(cfg)
    assert second.plan.micro_batch_size == 2 and first.plan.micro_batch_size == 1
    assert second.model is first.model and second.cluster is first.cluster  # unchanged groups: reused
    assert second == _uncached(cfg)
    assert simulate(cfg).iteration_time_s != simulate(compose(BASE)).iteration_time_s


def test_same_content_in_a_new_config_gives_an_equal_workload():
    a, b = build_workload(compose(BASE)), build_workload(compose(BASE))
    assert a is b
    assert a == _uncached(compose(BASE))


def test_a_bad_value_raises_on_every_call():
    cfg = compose(BASE)
    build_workload(cfg)
    cfg.parallelism.tp = 5
    for _ in range(2):
        with pytest.raises(ConfigError, match="tp"):
            build_workload(cfg)


def test_key_tells_bools_ints_and_floats_apart():
    assert content_key(OmegaConf.create({"x": True})) != content_key(OmegaConf.create({"x": 1}))
    assert content_key(OmegaConf.create({"x": 1})) != content_key(OmegaConf.create({"x": 1.0}))


def test_interpolated_groups_are_built_without_the_memo():
    cfg = compose(BASE)
    cfg.training.seq_len = "${model.max_seq_len}"
    w = build_workload(cfg)
    assert w.plan.seq_len == w.model.max_seq_len
    assert dataclasses.replace(w) == _uncached(cfg)


def test_tp_1_turns_sequence_parallelism_and_its_overlap_off_as_megatron_does():
    """parallelism/default.yaml's sequence_parallel=true suits tp=1 too: nothing to split, so it is off."""
    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
                                "parallelism.dp=8", "parallelism.tp_comm_overlap=true"]))
    assert (w.plan.tp, w.plan.sequence_parallel, w.plan.tp_comm_overlap) == (1, False, False)
    w2 = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=2", "parallelism.pp=1",
                                 "parallelism.dp=4"]))
    assert w2.plan.sequence_parallel


def test_dp_0_is_derived_over_tp_cp_and_pp():
    """dp=0 leaves the GPUs over tp*cp*pp to data parallelism (it ignored cp, so every cp>1 plan failed)."""
    w = build_workload(compose(["+model=llama3_8b", "+cluster=h200x8", "parallelism.tp=2", "parallelism.pp=1",
                                "parallelism.cp=2", "parallelism.dp=0", "training.global_batch_size=64"]))
    assert (w.plan.tp, w.plan.cp, w.plan.pp, w.plan.dp) == (2, 2, 1, 2)
