"""vtrain.sim.structure: the partition and the op graph are built once per shape, and the plan fields left
out of the shape key do not change what is built."""
import dataclasses

import pytest

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.sim import structure
from vtrain.sim.pipeline import clear_runs
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.partition import partition

# a value of each left-out field other than the plan's own (each plan below is valid with it)
OTHER = {"dp": 4, "global_batch_size": 2048, "tokens_to_train": 1e9, "zero_stage": 3, "fsdp_shard_size": 2,
         "reshard_after_forward": False, "overlap_param_gather": True, "distributed_optimizer": False,
         "overlap_grad_reduce": False, "grad_bucket_mib": 7.0}
PLANS = {
    "dense": ["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=8", "parallelism.dp=8"],
    "moe": ["+model=qwen3_30b_a3b", "+cluster=h100x1024", "parallelism.tp=2", "parallelism.pp=2",
            "parallelism.dp=8", "parallelism.ep=4", "parallelism.sequence_parallel=true",
            "training.global_batch_size=256", "training.seq_len=4096"],
}


def test_the_key_leaves_out_exactly_the_fields_listed():
    names = {f.name for f in dataclasses.fields(structure.ParallelPlan)}
    assert structure.NOT_SHAPING <= names and set(OTHER) == set(structure.NOT_SHAPING)


@pytest.mark.parametrize("name", sorted(PLANS))
@pytest.mark.parametrize("field", sorted(OTHER))
def test_left_out_fields_do_not_change_the_partition_or_the_graph(name, field):
    w = build_workload(compose(PLANS[name]))
    other = dataclasses.replace(w.plan, **{field: OTHER[field]})
    assert getattr(other, field) != getattr(w.plan, field)
    assert structure.shape_key(w.model, other) == structure.shape_key(w.model, w.plan)
    assert partition(w.model, other) == partition(w.model, w.plan)
    comm = build_comm_plan(w, partition(w.model, w.plan))
    assert build_model_graph(w.model, other, comm.tp, comm.cp, comm.ep) == \
        build_model_graph(w.model, w.plan, comm.tp, comm.cp, comm.ep)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_a_built_structure_gives_the_report_of_a_fresh_build(name):
    w = build_workload(compose(PLANS[name]))
    cost = cost_model_for(w)
    structure.clear_structures()
    clear_runs()
    fresh, _ = simulate_workload(w, cost)
    part = structure.stage_partition(w.model, w.plan)
    assert structure.stage_partition(w.model, dataclasses.replace(w.plan, dp=4)) is part  # reused across dp
    clear_runs()
    again, _ = simulate_workload(w, cost)
    assert again == fresh


def test_a_shape_change_builds_anew():
    w = build_workload(compose(PLANS["dense"]))
    a = structure.stage_partition(w.model, w.plan)
    b = structure.stage_partition(w.model, dataclasses.replace(w.plan, pp=4))
    assert a.p == 8 and b.p == 4


def test_the_communication_plan_is_kept_per_plan_object():
    from vtrain.sim.structure import comm_plan

    w = build_workload(compose(PLANS["dense"]))
    part = structure.stage_partition(w.model, w.plan)
    first = comm_plan(w, part)
    assert comm_plan(w, part) is first and first == build_comm_plan(w, part)
    other = dataclasses.replace(w, plan=dataclasses.replace(w.plan, dp=4))
    assert comm_plan(other, part) == build_comm_plan(other, part) != first  # dp changes the plan's groups
