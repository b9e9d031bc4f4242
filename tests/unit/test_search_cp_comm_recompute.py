"""The search varies the context-parallel communication (``search.cp_comms``) and the block-recompute depth
(``search.recompute_num_layers``) only where they change the run: cp_comm at cp > 1, the depth with
recompute=full and below a chunk's layers; drawn plans that break a rule are pruned with one line."""
from __future__ import annotations

import dataclasses

import pytest

from vtrain.config.compose import compose
from vtrain.errors import ConfigError
from vtrain.io.labels import plan_label
from vtrain.search.encoding import choices, decode, trial_params
from vtrain.search.plans import canonical, plan_fields, plan_from_fields, plan_key
from vtrain.search.run import prepare
from vtrain.search.settings import check_search
from vtrain.search.space import Infeasible, enumerate_plans
from vtrain.workload.enums import CpComm, Recompute

# 4 layers, 4 heads of which 2 K/V heads (GQA): cp=2 divides the K/V heads per rank at tp=1 only
BASE = ["+model=tiny", "+cluster=h200x8", "model.num_layers=4", "model.num_kv_heads=2", "training.seq_len=128",
        "training.global_batch_size=16", "search.progress_bar=false", "tracking.enabled=false",
        "search.micro_batch_sizes=[2]", "search.recompute=[none,full]", "search.sequence_parallel=[true]"]
WIDE = [*BASE, "search.cp=[1,2]", "search.cp_comms=[p2p,allgather,a2a]", "search.recompute_num_layers=[0,1,2,4]"]


def space_of(*args: str):
    return prepare(compose(list(args))).space


def test_the_fields_stay_at_their_base_value_unless_listed():
    space = space_of(*BASE, "search.cp=[1,2]")
    assert not {"cp_comm", "recompute_num_layers"} & set(choices(space))
    plans = enumerate_plans(space)
    assert {p.cp for p in plans} == {1, 2}
    assert all(p.cp_comm == CpComm.P2P and p.recompute_num_layers == 0 for p in plans)


def test_each_choice_appears_only_where_it_changes_the_run():
    space = space_of(*WIDE)
    assert set(choices(space)) >= {"cp_comm", "recompute_num_layers"}
    plans = enumerate_plans(space)
    assert len({plan_key(p) for p in plans}) == len(plans)
    assert {p.cp_comm for p in plans if p.cp == 2} == set(CpComm)
    assert all(p.cp_comm == CpComm.P2P for p in plans if p.cp == 1)
    # a2a splits the heads over cp: 2 K/V heads per rank at tp=1, 1 at tp=2 (cp=2 does not divide it)
    assert {p.tp for p in plans if p.cp_comm == CpComm.A2A} == {1}
    for p in plans:
        chunk = 4 // (p.pp * p.chunks)  # layers per model chunk (4 layers divide evenly here)
        assert p.recompute_num_layers == 0 or (p.recompute == Recompute.FULL and p.recompute_num_layers < chunk)
    assert {p.recompute_num_layers for p in plans if p.pp == 1 and p.recompute == Recompute.FULL} == {0, 1, 2}
    for p in plans[::5]:  # stored fields and trial parameters give the plan back
        assert plan_from_fields(space.base, plan_fields(p)) == p
        assert decode(space, trial_params(space, p)) == p


def test_canonical_collapses_settings_that_change_nothing():
    space = space_of(*WIDE)
    base = dataclasses.replace(space.base, tp=1, pp=2, dp=4, cp=1, recompute=Recompute.FULL)
    assert canonical(dataclasses.replace(base, cp_comm=CpComm.A2A), space.model).cp_comm == CpComm.P2P
    assert canonical(dataclasses.replace(base, cp=2, dp=2, cp_comm=CpComm.A2A), space.model).cp_comm == CpComm.A2A
    # 2 layers per stage: a depth of 2 or more reruns every layer, as 0 does; 1 keeps one layer's activations
    assert canonical(dataclasses.replace(base, recompute_num_layers=2), space.model).recompute_num_layers == 0
    assert canonical(dataclasses.replace(base, recompute_num_layers=1), space.model).recompute_num_layers == 1
    selective = dataclasses.replace(base, recompute=Recompute.SELECTIVE, recompute_num_layers=1)
    assert canonical(selective, space.model).recompute_num_layers == 0


def test_block_recompute_and_cp_comm_change_the_prediction_and_the_label():
    ctx = prepare(compose(WIDE))
    plans = enumerate_plans(ctx.space)
    full = next(p for p in plans if p.pp == 1 and p.tp == 1 and p.cp == 2 and p.dp == 4
                and p.recompute == Recompute.FULL and p.recompute_num_layers == 0 and p.cp_comm == CpComm.P2P)
    block = dataclasses.replace(full, recompute_num_layers=1)
    gather = dataclasses.replace(full, cp_comm=CpComm.ALLGATHER)
    times = {name: ctx.evaluator.simulate(p)[0].iteration_time_s for name, p in
             (("full", full), ("block", block), ("gather", gather))}
    assert times["block"] < times["full"]  # one layer of four no longer runs its forward again
    assert times["gather"] != times["full"]
    assert "rc=full(1)" in plan_label(block) and "cp=2 (allgather)" in plan_label(gather)
    assert "rc=full " in plan_label(full) + " "


def test_a_drawn_a2a_plan_whose_cp_does_not_divide_the_heads_is_pruned_with_one_line():
    space = space_of(*WIDE)
    plan = next(p for p in enumerate_plans(space) if p.tp == 2 and p.cp == 2 and p.pp == 1)
    with pytest.raises(Infeasible) as err:
        decode(space, {**trial_params(space, plan), "cp_comm": "a2a"})
    assert "cp_comm=a2a needs cp=2 to divide the kv heads per TP rank" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("bad", ["search.cp_comms=[ring]", "search.recompute_num_layers=[-1]",
                                 "search.recompute_num_layers=[]"])
def test_bad_lists_name_the_field(bad: str):
    with pytest.raises(ConfigError, match=bad.split("=")[0].replace(".", r"\.")):
        check_search(compose([*BASE, bad]).search)


# hybrid sharding (search.fsdp_shard_sizes) and FSDP's reshard_after_forward (search.reshard_after_forward)
SHARDED = [*BASE, "search.zero_stages=[0,1,3]", "search.fsdp_shard_sizes=[0,2,4]",
           "search.reshard_after_forward=[true,false]"]


def test_shard_groups_and_reshard_appear_only_where_they_apply():
    space = space_of(*SHARDED)
    assert {"fsdp_shard_size", "reshard_after_forward"} <= set(choices(space))
    plans = enumerate_plans(space)
    assert len({plan_key(p) for p in plans}) == len(plans)
    for p in plans:
        if p.fsdp_shard_size:  # a shard group below dp that divides it, with the states sharded
            assert p.sharding_stage >= 1 and p.fsdp_shard_size < p.dp and p.dp % p.fsdp_shard_size == 0
        assert p.reshard_after_forward or p.sharding_stage == 3
    assert {(p.fsdp_shard_size, p.reshard_after_forward) for p in plans if p.dp == 8 and p.sharding_stage == 3} \
        == {(0, True), (0, False), (2, True), (2, False), (4, True), (4, False)}
    assert {p.fsdp_shard_size for p in plans if p.dp == 4 and p.sharding_stage == 1} == {0, 2}
    for p in plans[::7]:
        assert plan_from_fields(space.base, plan_fields(p)) == p
        assert decode(space, trial_params(space, p)) == p


def test_hybrid_sharding_and_kept_parameters_change_the_prediction_and_the_label():
    ctx = prepare(compose(SHARDED))
    fsdp = next(p for p in enumerate_plans(ctx.space) if p.tp == 1 and p.pp == 1 and p.dp == 8
                and p.sharding_stage == 3 and p.fsdp_shard_size == 0 and p.reshard_after_forward)
    hybrid = dataclasses.replace(fsdp, fsdp_shard_size=2)
    kept = dataclasses.replace(fsdp, reshard_after_forward=False)
    runs = {name: ctx.evaluator.simulate(p)[0] for name, p in (("fsdp", fsdp), ("hybrid", hybrid), ("kept", kept))}
    # sharded over 2 ranks instead of 8: more of the states per GPU; kept parameters: gathered once per step
    assert runs["hybrid"].peak_memory_bytes > runs["fsdp"].peak_memory_bytes
    assert runs["kept"].peak_memory_bytes > runs["fsdp"].peak_memory_bytes
    assert "shard=2" in plan_label(hybrid) and "no-reshard" in plan_label(kept)
    assert "shard=" not in plan_label(fsdp) and "no-reshard" not in plan_label(fsdp)


def test_a_drawn_shard_group_that_does_not_divide_dp_is_pruned_with_one_line():
    space = space_of(*BASE, "search.zero_stages=[1]", "search.fsdp_shard_sizes=[0,3]")
    plan = next(p for p in enumerate_plans(space) if p.dp == 8 and p.tp == 1)
    with pytest.raises(Infeasible) as err:
        decode(space, {**trial_params(space, plan), "fsdp_shard_size": 3})
    assert "fsdp_shard_size=3 must divide dp=8" in str(err.value) and "\n" not in str(err.value)
    assert all(p.fsdp_shard_size != 3 for p in enumerate_plans(space))  # the grid leaves it out


@pytest.mark.parametrize("bad", ["search.fsdp_shard_sizes=[-2]", "search.reshard_after_forward=[maybe]"])
def test_bad_sharding_lists_name_the_field(bad: str):
    with pytest.raises(ConfigError, match=bad.split("=")[0].replace(".", r"\.")):
        check_search(compose([*BASE, bad]).search)


def test_a_plans_claim_key_leaves_the_later_fields_out_at_their_defaults():
    """Claim keys (and NSGA-II's plan order, hashed from them) of plans that do not use the later fields are
    what they were before those fields were searched: stored studies resume with their claims."""
    from vtrain.search.ledger import key_text

    space = space_of(*BASE)
    plan = dataclasses.replace(space.base, tp=2, pp=2, dp=2, micro_batch_size=2, recompute=Recompute.FULL)
    before = ("tp=2,pp=2,dp=2,micro_batch_size=2,schedule=1f1b,virtual_stages=1,recompute=full,"
              "sequence_parallel=false,distributed_optimizer=false,zero_stage=0,cp=1,precision=bf16,ep=1,etp=0,"
              "moe_dispatcher=alltoall")
    assert key_text(plan_fields(plan)) == before
    block = key_text(plan_fields(dataclasses.replace(plan, recompute_num_layers=1)))
    assert block == before + ",recompute_num_layers=1"
    kept = dataclasses.replace(plan, dp=4, zero_stage=3, reshard_after_forward=False, fsdp_shard_size=2)
    assert key_text(plan_fields(kept)).endswith(",fsdp_shard_size=2,reshard_after_forward=false")
