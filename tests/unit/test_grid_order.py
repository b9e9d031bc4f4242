"""The grid's workers enumerate their plan groups themselves: the rows must be those of enumerating every plan
in the parent (sorted by pipeline shape, the first of equal plans kept) and evaluating each, in that order,
with any number of workers."""
from __future__ import annotations

import dataclasses
import itertools

import pytest

from vtrain.config.compose import compose
from vtrain.search.grid import evaluate_grid, grid_tasks
from vtrain.search.plans import canonical, plan_key, plan_values
from vtrain.search.run import prepare
from vtrain.search.space import _rest_options, _schedule_options, check, enumerate_plans, pipeline_shape

SMALL = ["+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=32", "search=grid",
         "search.progress_bar=false", "tracking.enabled=false"]


def _loop_then_sort(space):
    """The grid's enumeration before plan groups: every candidate in loop order, de-duplicated, stably sorted."""
    seen, plans, gbs = set(), [], space.base.global_batch_size
    for pp, tp, cp in itertools.product(space.pp, space.tp, space.cp):
        for dp in space.dp_choices(tp, pp, cp):
            rest = _rest_options(space, tp, cp, dp)
            for mb in space.micro_batch_sizes:
                if gbs % (dp * mb):
                    continue
                for sched, v in _schedule_options(space, pp, gbs // (dp * mb)):
                    for (rc, nl), sp, (zs, fs, rf), prec, (ep, etp), disp, cpc in rest:
                        plan = canonical(dataclasses.replace(
                            space.base, tp=tp, cp=cp, pp=pp, dp=dp, micro_batch_size=mb, schedule=sched,
                            virtual_stages=v, recompute=rc, recompute_num_layers=nl, sequence_parallel=sp,
                            zero_stage=zs, distributed_optimizer=zs >= 1, fsdp_shard_size=fs,
                            reshard_after_forward=rf, precision=prec, ep=ep, etp=etp, moe_dispatcher=disp,
                            cp_comm=cpc), space.model)
                        if plan_key(plan) not in seen and check(space, plan) is None:
                            seen.add(plan_key(plan))
                            plans.append(plan)
    return sorted(plans, key=pipeline_shape)


def test_plan_groups_give_the_loop_order_even_with_repeated_choices():
    ctx = prepare(compose(SMALL))
    repeated = dataclasses.replace(ctx.space, tp=(2, 1, 2, 4), pp=(4, 1, 2, 4), recompute=ctx.space.recompute * 2,
                                   micro_batch_sizes=(4, 1, 2))
    for space in (ctx.space, repeated):
        assert [plan_key(p) for p in enumerate_plans(space)] == [plan_key(p) for p in _loop_then_sort(space)]


# grids in worker processes; the fast loop keeps test_plan_groups_give_the_loop_order_even_with_repeated_choices
@pytest.mark.slow
def test_rows_are_the_evaluated_plans_in_order_with_any_number_of_workers():
    ctx = prepare(compose(SMALL))
    groups, tasks = grid_tasks(ctx.space)
    assert sum(t.plans for t in tasks) >= 200  # enough for the forked workers
    serial = evaluate_grid(ctx.evaluator, groups, tasks, 1)
    forked = evaluate_grid(ctx.evaluator, groups, tasks, 2)
    assert forked == serial
    expected = []
    for plan in enumerate_plans(ctx.space):
        o = ctx.evaluator.evaluate(plan)
        expected.append((plan_values(plan), o.values, o.reason, o.metrics))
    assert serial == expected
