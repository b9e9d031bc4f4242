"""The search space of issue 12: ZeRO stages, cp, precisions, ep/etp/dispatcher, the new schedules. New fields
appear only when their search.* list names more than one choice; MoE fields only for a model with experts;
canonical forms collapse equivalent plans; drawn infeasible plans are pruned with one line."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest

from vtrain.config.compose import compose
from vtrain.errors import ConfigError
from vtrain.search.encoding import choices, decode, trial_params
from vtrain.search.plans import canonical, plan_fields, plan_from_fields, plan_key
from vtrain.search.run import prepare, run_search
from vtrain.search.settings import check_search
from vtrain.search.space import Infeasible, enumerate_plans
from vtrain.workload.enums import MoeDispatcher, Precision, Schedule

DENSE = ["+model=tiny", "+cluster=h200x8", "training.seq_len=128", "training.global_batch_size=16",
         "search.progress_bar=false", "tracking.enabled=false", "search.micro_batch_sizes=[1,2]",
         "search.recompute=[none,full]"]
# a DeepSeek-V3-like tiny MoE: 8 experts of top-2, MLA-free; 4 layers so that pp 2 and 4 exist
MOE = [*DENSE, "model.num_layers=4", "model.num_experts=8", "model.moe_top_k=2", "model.moe_ffn_hidden_size=128",
       "model.first_dense_layers=1", "model.num_shared_experts=1"]


def space_of(*extra: str):
    return prepare(compose([*DENSE, *extra])).space


def moe_space(*extra: str):
    return prepare(compose([*MOE, *extra])).space


def test_new_fields_stay_at_their_base_value_unless_listed():
    space = space_of()
    assert not {"cp", "precision", "ep", "etp", "moe_dispatcher"} & set(choices(space))
    plans = enumerate_plans(space)
    assert plans and all(p.cp == 1 and p.ep == 1 and p.etp == 0 and p.precision == Precision.BF16 for p in plans)
    assert {p.sharding_stage for p in plans} == {0, 1}  # null zero_stages: from search.distributed_optimizer
    wide = space_of("search.cp=[1,2]", "search.zero_stages=[0,1,2,3]", "search.precisions=[bf16,fp8]",
                    "search.schedules=[1f1b,zero_bubble,zbv]")
    assert {"cp", "zero_stage", "precision"} <= set(choices(wide))
    plans = enumerate_plans(wide)
    assert {p.cp for p in plans} == {1, 2} and {p.sharding_stage for p in plans} == {0, 1, 2, 3}
    assert {p.precision for p in plans} == {Precision.BF16, Precision.FP8}
    assert {p.schedule for p in plans} == {Schedule.ONE_F_ONE_B, Schedule.ZERO_BUBBLE, Schedule.ZBV}
    assert all(p.num_gpus == p.tp * p.cp * p.pp * p.dp <= 8 for p in plans)


def test_moe_ep_choices_divide_the_experts_and_dp_cp():
    space = moe_space("search.cp=[1,2]", "search.moe_dispatchers=[alltoall,deepep]", "search.etp=[0,1]")
    assert set(choices(space)["ep"]) == {1, 2, 4, 8}
    plans = enumerate_plans(space)
    assert {p.ep for p in plans} == {1, 2, 4, 8}
    for p in plans:
        assert 8 % p.ep == 0 and (p.tp * p.dp * p.cp) % (p.expert_tp * p.ep) == 0
    assert {p.moe_dispatcher for p in plans} == {MoeDispatcher.ALLTOALL, MoeDispatcher.DEEPEP}


def test_dense_models_never_get_expert_parallelism():
    space = space_of("search.ep=[1,2,4]", "search.etp=[0,1]", "search.moe_dispatchers=[deepep]")
    assert space.ep_choices == (1,) and space.etp_choices == (0,)
    assert all(p.ep == 1 and p.moe_dispatcher == MoeDispatcher.ALLTOALL for p in enumerate_plans(space))


def test_canonical_collapses_equivalent_plans():
    space = moe_space()
    base = dataclasses.replace(space.base, tp=2, dp=4, sequence_parallel=True)
    same = [dataclasses.replace(base, distributed_optimizer=True, zero_stage=0),
            dataclasses.replace(base, distributed_optimizer=False, zero_stage=1),
            dataclasses.replace(base, distributed_optimizer=True, zero_stage=1, etp=2)]
    assert len({plan_key(canonical(p, space.model)) for p in same}) == 1
    assert canonical(dataclasses.replace(base, schedule=Schedule.DUALPIPE, virtual_stages=4)).virtual_stages == 1
    assert canonical(dataclasses.replace(base, dp=1, zero_stage=2)).sharding_stage == 0  # nothing to shard
    dense = space_of().model
    assert canonical(dataclasses.replace(base, ep=4, etp=1, moe_dispatcher=MoeDispatcher.DEEPEP), dense).ep == 1
    plans = enumerate_plans(space)
    assert len({plan_key(p) for p in plans}) == len(plans)
    for p in plans[::7]:  # stored fields and trial parameters give the plan back
        assert plan_from_fields(space.base, plan_fields(p)) == p
        assert decode(space, {**trial_params(space, p)}) == p


@pytest.mark.parametrize("extra,params,reason", [
    (["search.cp=[1,3]"], {"cp": 3}, "2*cp=2*3 must divide seq_len=128"),
    (["search.precisions=[bf16,nvfp4]"], {"precision": "nvfp4"}, "mxfp8 and nvfp4 need a Blackwell GPU"),
    (["search.schedules=[1f1b,dualpipe]"], {"schedule": "dualpipe"}, "schedule=dualpipe needs"),
])
def test_a_drawn_infeasible_plan_is_pruned_with_one_line(extra, params, reason):
    space = space_of(*extra)
    # 2 micro-batches on 2 stages (DualPipe needs >= 2*pp); cp=3 keeps the plan within the 8 GPUs
    plan = next(p for p in enumerate_plans(space) if p.tp == 1 and p.pp == 2 and p.dp == 1 and p.num_microbatches == 8)
    plan = dataclasses.replace(plan, dp=4, micro_batch_size=2) if "dualpipe" in str(params) else plan
    with pytest.raises(Infeasible) as err:
        decode(space, {**trial_params(space, plan), **params})
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_a_drawn_ep_that_does_not_divide_dp_cp_is_pruned():
    space = moe_space("search.gpus=2")
    plan = next(p for p in enumerate_plans(space) if p.tp == 1 and p.pp == 1 and p.dp == 2)
    with pytest.raises(Infeasible, match="ep=4 must divide dp\\*cp=2"):
        decode(space, {**trial_params(space, plan), "ep": 4})


def test_grid_is_capped_and_bad_lists_name_the_field():
    with pytest.raises(ConfigError, match="search.max_grid_plans=5"):
        enumerate_plans(space_of(), max_plans=5)
    for bad, field in (("search.zero_stages=[4]", "search.zero_stages=[4]"), ("search.cp=[0]", "search.cp=[0]"),
                       ("search.precisions=[fp9]", "search.precisions=[fp9]"),
                       ("search.moe_dispatchers=[nccl]", "search.moe_dispatchers=[nccl]"),
                       ("search.schedules=[zigzag]", "search.schedules=[zigzag]")):
        with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
            check_search(compose([*DENSE, bad]).search)


# an Optuna search (~2 s of CPU); the fast loop keeps test_search.py::test_five_trial_search_is_stored_in_optuna
@pytest.mark.slow
def test_small_deepseek_like_search_returns_a_pareto_front(tmp_path: Path):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    cfg = compose([*MOE, f"search.storage=sqlite:///{tmp_path / 'o.db'}", "search.n_trials=16",
                   "search.population_size=6", "search.schedules=[1f1b,zero_bubble,dualpipe]",
                   "search.zero_stages=[0,1,2]", "search.precisions=[bf16,fp8]", "search.cp=[1,2]",
                   "search.moe_dispatchers=[alltoall,deepep]", "search.local_search_rounds=1"])
    result = run_search(cfg, tmp_path)
    assert len(result.records) == 16 and result.front and all(r.feasible for r in result.front)
    for r in result.records:
        assert r.state == "COMPLETE" or (r.reason and "\n" not in r.reason)
    assert {"zero_stage", "cp", "precision", "ep", "etp", "moe_dispatcher"} <= set(result.front[0].plan or {})
