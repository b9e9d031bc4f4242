"""The chunk-and-cat copies of a batch-first stack around its TP collectives (graph.layout), hand-computed."""
from vtrain import compose
from vtrain.api import simulate
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.layout import with_tp_layout_copies
from vtrain.graph.ops import Collective, MemoryOp
from vtrain.workload.partition import partition

PLAN = ["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=8", "parallelism.pp=1", "parallelism.dp=8",
        "parallelism.micro_batch_size=2", "training.global_batch_size=16", "training.seq_len=8192",
        "parallelism.recompute=none"]


def graph(*extra):
    w = build_workload(compose([*PLAN, *extra]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    return w, build_model_graph(w.model, w.plan, comm.tp, comm.cp)


def test_a_copy_follows_each_all_gather_and_precedes_each_reduce_scatter():
    w, g = graph()
    ops = with_tp_layout_copies(g).layer.forward.ops
    names = [op.name for op in ops]
    assert names[names.index("qkv.ag") + 1] == "qkv.ag.cat"
    assert names[names.index("proj.rs") - 1] == "proj.rs.cat"
    full = 2 * 8192 * w.model.hidden_size * 2  # [tokens, h] of the micro-batch, bf16
    cats = [op for op in ops if op.name.endswith(".cat")]
    assert len(cats) == 4 and all(isinstance(op, MemoryOp) and op.bytes == 2 * full for op in cats)
    back = [op.name for op in with_tp_layout_copies(g).layer.backward.ops if op.name.endswith(".cat")]
    assert len(back) == 4  # the backward's all-gathers and reduce-scatters mirror the forward's


def test_overlapped_collectives_and_tp1_get_none():
    _, g = graph("parallelism.tp_comm_overlap=true")
    assert not [op for op in with_tp_layout_copies(g).layer.forward.ops if op.name.endswith(".cat")]
    assert any(isinstance(op, Collective) and op.overlap for op in g.layer.forward.ops)


def test_only_the_batch_first_stack_pays_them():
    titan = simulate(compose([*PLAN, "stack=torchtitan_fsdp2"]))
    flat = simulate(compose([*PLAN, "stack=torchtitan_fsdp2", "stack.tp_layout_copies=false"]))
    megatron = simulate(compose(PLAN))  # megatron_core_te: sequence-first, no copies
    assert titan.iteration_time_s > flat.iteration_time_s
    assert simulate(compose([*PLAN, "stack.tp_layout_copies=false"])).iteration_time_s == megatron.iteration_time_s


# async TP on PyTorch's symmetric memory (stack.tp_overlap_symm_mem): the staging copy and the partial sum

def test_symm_mem_stages_each_gathered_shard_and_sums_each_scattered_product():
    from vtrain.graph.layout import with_symm_mem_copies

    w, g = graph("parallelism.tp_comm_overlap=true", "parallelism.sequence_parallel=true")
    fwd = with_symm_mem_copies(g).layer.forward.ops
    names = [op.name for op in fwd]
    full = 2 * 8192 * w.model.hidden_size * 2  # the gathered / scattered [tokens, h] of the micro-batch, bf16
    stage, reduce = fwd[names.index("qkv.ag") - 1], fwd[names.index("proj.rs") + 1]
    assert stage.name == "qkv.ag.stage" and stage.bytes == 2 * full / 8  # read + write the local 1/8 shard
    assert reduce.name == "proj.rs.reduce" and reduce.bytes == full + full / 8  # read 8 partials, write one
    assert isinstance(stage, MemoryOp) and stage.eager and reduce.eager  # exact traffic, not fused by compile
    assert sum(n.endswith(".stage") for n in names) == 2 and sum(n.endswith(".reduce") for n in names) == 2
    _, plain = graph("parallelism.sequence_parallel=true")  # no overlap: NCCL collectives, nothing added
    assert with_symm_mem_copies(plain).layer.forward.ops == plain.layer.forward.ops


def test_only_async_tp_on_symmetric_memory_pays_them():
    overlap = [*PLAN, "stack=torchtitan_fsdp2", "parallelism.tp_comm_overlap=true",
               "parallelism.sequence_parallel=true"]
    symm = simulate(compose(overlap)).iteration_time_s
    userbuffers = simulate(compose([*overlap, "stack.tp_overlap_symm_mem=false"])).iteration_time_s
    assert symm > userbuffers
    vanilla = [*PLAN, "stack=torchtitan_fsdp2", "parallelism.sequence_parallel=true"]
    assert simulate(compose(vanilla)).iteration_time_s == \
        simulate(compose([*vanilla, "stack.tp_overlap_symm_mem=false"])).iteration_time_s
