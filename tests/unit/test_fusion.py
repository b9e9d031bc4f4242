"""Kernel fusion of a compiling stack (graph/fusion.py) keeps every component of the model graph."""
from vtrain import compose, simulate
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.fusion import fuse_elementwise
from vtrain.workload.partition import partition

MIXTRAL = ["+model=mixtral_8x7b", "+cluster=h200x1024", "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=1",
           "training.global_batch_size=64"]


def test_fusion_keeps_the_moe_layer_and_fewer_bytes_move():
    w = build_workload(compose(MIXTRAL))
    graph = build_model_graph(w.model, w.plan, build_comm_plan(w, partition(w.model, w.plan)).tp)
    fused = fuse_elementwise(graph)
    assert graph.moe_layer is not None and fused.moe_layer is not None  # the experts survive compilation
    moved = [sum(getattr(op, "bytes", 0.0) for op in g.moe_layer.forward.ops) for g in (graph, fused)]
    assert 0 < moved[1] < moved[0]


def test_a_compiled_moe_model_is_faster_than_eager_but_below_100pct_mfu_on_every_schedule():
    """The fuzz found MFU 1472% for Mixtral on torchtitan_fsdp2_compile (the MoE layers were dropped)."""
    eager = simulate(compose([*MIXTRAL, "stack=torchtitan_fsdp2"]))
    for schedule in ("1f1b", "zero_bubble"):
        r = simulate(compose([*MIXTRAL, "stack=torchtitan_fsdp2_compile", f"parallelism.schedule={schedule}"]))
        assert 0.5 * eager.iteration_time_s < r.iteration_time_s < eager.iteration_time_s
        assert 0 < r.mfu < 1


def test_a_fused_loss_moves_the_logits_once_forward_and_twice_backward():
    """flash-attn's cross-entropy (llm-foundry's default loss) and a compiled loss are one kernel over the bf16
    logits: 2 B per logit forward, 2 + 2 B backward, against the 12 + 2 and 8 + 2 B of Megatron's fp32 loss."""
    from vtrain.graph.options import GraphOptions

    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
                                "parallelism.dp=8", "training.global_batch_size=8", "training.seq_len=1024"]))
    tp = build_comm_plan(w, partition(w.model, w.plan)).tp
    logits = w.plan.tokens_per_rank * w.model.vocab_shard(1)
    for fused, fwd_b, bwd_b, kernels in ((False, 14, 10, 4), (True, 2, 4, 1)):
        head = build_model_graph(w.model, w.plan, tp, opts=GraphOptions(fused_loss=fused)).head
        (ce,) = [op for op in head.forward.ops if getattr(op, "name", "") == "cross_entropy"]
        (ce_b,) = [op for op in head.backward.ops if getattr(op, "name", "") == "cross_entropy.bwd"]
        assert (ce.bytes, ce_b.bytes, ce.kernels) == (logits * fwd_b, logits * bwd_b, kernels)
    # loss_parallel's eager kernels apply only when TP splits the vocabulary
    head = build_model_graph(w.model, w.plan, tp, opts=GraphOptions(loss_parallel=True)).head
    assert [op.bytes for op in head.forward.ops if getattr(op, "name", "") == "cross_entropy"] == [logits * 14]
    mpt = ["+model=mpt_125m", "+cluster=a100x1024", "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
           "training.global_batch_size=64", "parallelism.zero_stage=3"]
    assert simulate(compose([*mpt, "stack=llm_foundry_fsdp"])).iteration_time_s > 0


def test_loss_parallel_runs_six_eager_kernels_forward_and_five_backward():
    """torch.distributed.tensor.parallel.loss: upcast, amax, subtract, exp, sum, subtract (dt + 36 B per logit);
    backward zeros, exp, add, multiply, downcast (36 + dt B); eager, so neither fused nor scaled."""
    from vtrain.graph.options import GraphOptions

    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=4", "parallelism.pp=1",
                                "parallelism.dp=2", "training.global_batch_size=8", "training.seq_len=1024"]))
    tp = build_comm_plan(w, partition(w.model, w.plan)).tp
    logits = w.plan.tokens_per_rank * w.model.vocab_shard(4)
    head = build_model_graph(w.model, w.plan, tp, opts=GraphOptions(loss_parallel=True)).head
    (ce,) = [op for op in head.forward.ops if getattr(op, "name", "") == "cross_entropy"]
    (ce_b,) = [op for op in head.backward.ops if getattr(op, "name", "") == "cross_entropy.bwd"]
    assert (ce.bytes, ce.kernels, ce.eager) == (logits * 38, 6, True)
    assert (ce_b.bytes, ce_b.kernels, ce_b.eager) == (logits * 38, 5, True)
    fused = build_model_graph(w.model, w.plan, tp, opts=GraphOptions(loss_parallel=True, fused_loss=True)).head
    assert [op.bytes for op in fused.forward.ops if getattr(op, "name", "") == "cross_entropy"] == [logits * 2]
