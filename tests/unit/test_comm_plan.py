"""The communication plan lists every communication of an iteration in one place."""
from collections import Counter

from vtrain import compose
from vtrain.comm.plan import Stream, build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import Collective
from vtrain.workload.partition import partition


def plan_of(*overrides):
    w = build_workload(compose(["+model=gpt175b", "+cluster=a100x1024", *overrides]))
    part = partition(w.model, w.plan)
    return w, part, build_comm_plan(w, part)


def test_megatron_plan_has_every_kind_of_communication():
    w, part, comm = plan_of("parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8",
                            "parallelism.sequence_parallel=false", "parallelism.distributed_optimizer=true",
                            "parallelism.recompute=full")
    entries = comm.entries()
    kinds = Counter((e.op.group.value, e.op.kind.value, e.stream.value) for e in entries)
    assert kinds[("tp", "all_reduce", "compute")] > 0
    assert kinds[("pp", "p2p", "pp_p2p")] == 15  # one per pipeline boundary
    assert kinds[("dp", "reduce_scatter", "dp_comm")] == 16  # one per stage (one chunk each)
    assert kinds[("dp", "all_gather", "dp_comm")] == 16  # parameter gather after the step
    assert kinds[("embedding", "all_reduce", "dp_comm")] == 1  # tied embeddings, pp > 1
    # per layer: 2 forward all-reduces (run again by the full recompute) and 2 backward ones
    m = w.plan.num_microbatches
    stage1 = [e for e in entries if e.stages == (1,) and e.op.group.value == "tp"]
    assert sum(e.count for e in stage1) == part.stage_layers(1) * m * (2 * 2 + 2)


def test_graph_places_the_plans_tp_collectives():
    w, part, comm = plan_of("parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8",
                            "parallelism.sequence_parallel=true")
    graph = build_model_graph(w.model, w.plan, comm.tp)
    in_graph = [op for op in graph.layer.forward.ops + graph.layer.backward.ops if isinstance(op, Collective)]
    assert tuple(in_graph) == comm.tp.attention.enter + comm.tp.attention.exit + comm.tp.mlp.enter + comm.tp.mlp.exit \
        + comm.tp.mlp.exit_backward + comm.tp.mlp.enter_backward + comm.tp.attention.exit_backward \
        + comm.tp.attention.enter_backward
    assert {op.kind.value for op in in_graph} == {"all_gather", "reduce_scatter"}


def test_no_tp_no_dp_means_only_pipeline_transfers():
    _, _, comm = plan_of("parallelism.tp=1", "parallelism.pp=4", "parallelism.dp=1",
                         "parallelism.sequence_parallel=false", "model.tied_embeddings=false")
    streams = {e.stream for e in comm.entries()}
    assert streams == {Stream.PIPELINE}


def _zero3_pipeline(stack, reshard):
    return plan_of(f"stack={stack}", "parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8",
                   "parallelism.zero_stage=3", "parallelism.distributed_optimizer=false",
                   f"parallelism.reshard_after_forward={str(reshard).lower()}")


def test_zero3_under_a_pipeline_reduces_per_layer_unless_the_stack_defers_it():
    """Megatron-style ZeRO-3 reduce-scatters each layer's gradients in every micro-batch's backward; FSDP2 under
    torch.distributed.pipelining (torchtitan) reduces a stage's gradients once, after its last backward, and
    gathers parameters kept between forward and backward once per iteration."""
    w, part, comm = _zero3_pipeline("megatron_core_te", reshard=False)
    kinds = Counter((e.op.kind.value, e.stream.value) for e in comm.entries())
    assert kinds[("reduce_scatter", "fsdp")] == 16 and comm.overlap_grad_reduce
    w, part, comm = _zero3_pipeline("torchtitan_fsdp2", reshard=False)
    entries = comm.entries()
    assert comm.fsdp is None and not comm.overlap_grad_reduce
    assert not [e for e in entries if e.stream == Stream.FSDP]
    grads = [e for e in entries if e.op.kind.value == "reduce_scatter" and e.stream == Stream.DATA_PARALLEL]
    assert len(grads) == 16 and all(e.count == 1 for e in grads)
    for s in range(16):  # the whole stage, in the fp32 reduce dtype
        assert comm.grad_reduce[s][0].bytes == part.position_params(part.position(s, 0)) * 4.0
        assert comm.param_gather[s] is not None
        assert comm.param_gather[s].bytes == part.position_params(part.position(s, 0)) * w.plan.dtype_bytes
    assert comm.prefetch_gather_bytes == part.layer_params * w.plan.dtype_bytes
    # parameters resharded after forward: gathered per layer and micro-batch, gradients still once
    w, part, comm = _zero3_pipeline("torchtitan_fsdp2", reshard=True)
    fsdp = Counter(e.op.kind.value for e in comm.entries() if e.stream == Stream.FSDP)
    assert fsdp == Counter({"all_gather": 16}) and comm.fsdp is not None and not comm.fsdp.reduce_per_layer
    for s in range(16):
        assert comm.grad_reduce[s][0].bytes == part.position_params(part.position(s, 0)) * 4.0
        layers = part.layers[part.position(s, 0)] * part.layer_params
        gathered = comm.param_gather[s].bytes if comm.param_gather[s] is not None else 0.0
        assert gathered == (part.position_params(part.position(s, 0)) - layers) * w.plan.dtype_bytes


def test_listing_places_each_communication_in_its_group():
    """Megatron without sequence parallelism scatters a boundary's activation over the TP ranks and all-gathers it
    on the receiver (p2p_communication's scatter-gather): that all-gather runs in the TP group, each way per
    micro-batch and boundary; the context-parallel K/V exchange in the CP group, per layer and micro-batch."""
    from vtrain.comm.plan import Cadence

    w, part, comm = plan_of("parallelism.tp=8", "parallelism.pp=4", "parallelism.dp=4", "parallelism.cp=2",
                            "parallelism.sequence_parallel=false")
    entries = comm.entries()
    gathers = [e for e in entries if e.op.name == "p2p.gather"]
    assert len(gathers) == 3 and all(e.where == comm.tp_where and e.cadence == Cadence.BOUNDARY for e in gathers)
    assert [e.count for e in gathers] == [2 * w.plan.num_microbatches] * 3
    cp = [e for e in entries if e.op.group.value == "cp"]
    assert cp and all(e.where == comm.cp_where and e.cadence == Cadence.LAYER for e in cp)
    assert comm.cp_where != comm.tp_where


def test_listing_syncs_the_tied_embedding_between_the_first_and_the_last_stage():
    """Megatron-LM's _allreduce_word_embedding_grads: with tied embeddings and pp > 1 the first and the last pipeline
    stage each hold the word embedding (V padded to a multiple of 128·tp, split over TP) and all-reduce its fp32
    gradient once per iteration, in the group of those two ranks (stage s's rank is s·tp·dp in Megatron's order)."""
    from vtrain.comm.placement import GroupPlacement
    from vtrain.comm.plan import Cadence

    for pp, tp, dp, per_node in ((16, 8, 8, 1), (4, 2, 1, 2)):  # 15·64 ranks apart: two nodes; 6 apart: one node
        w, _, comm = plan_of(f"parallelism.tp={tp}", f"parallelism.pp={pp}", f"parallelism.dp={dp}",
                             "parallelism.sequence_parallel=false", f"training.global_batch_size={16 * dp}")
        (sync,) = [e for e in comm.entries() if e.op.group.value == "embedding"]
        assert sync.stages == (0, pp - 1) and sync.count == 1 and sync.cadence == Cadence.ITERATION
        assert sync.where == GroupPlacement(2, per_node)
        padded = -(-50257 // (128 * tp)) * 128 * tp  # 51,200 at tp 8, 50,432 at tp 2
        assert sync.op.kind.value == "all_reduce" and sync.op.bytes == padded // tp * 12288 * 4.0
