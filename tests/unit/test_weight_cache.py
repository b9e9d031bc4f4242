"""Transformer Engine keeps quantized weights across the micro-batches of a step (Megatron-Core's
set_is_first_microbatch): a weight's cast runs on the first micro-batch only (vtrain.graph.weight_cache)."""
import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import MemoryOp
from vtrain.graph.options import graph_options
from vtrain.graph.weight_cache import weight_cast_share, with_cached_weights
from vtrain.workload.partition import partition

# Llama 3 8B on one H100 node, TP 8, 8 micro-batches of 1 x 8192 per step (global batch 8, dp 1)
PLAN = ["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=8", "parallelism.pp=1", "parallelism.dp=1",
        "parallelism.micro_batch_size=1", "training.global_batch_size=8", "training.seq_len=8192",
        "parallelism.recompute=none", "stack=megatron_core_te", "training.precision=fp8"]
TOKENS, H, QKV = 8192, 4096, (4096 + 2 * 1024) // 8  # the fused QKV GEMM's local width at TP 8


def _graph(*extra):
    w = build_workload(compose([*PLAN, *extra]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    return w, build_model_graph(w.model, w.plan, comm.tp, comm.cp, opts=graph_options(w.stack))


def _quant(graph, name="qkv.quant"):
    (op,) = [op for op in graph.layer.forward.ops if op.name == name]
    assert isinstance(op, MemoryOp)
    return op


def test_a_linear_layer_marks_its_weight_cast():
    """Per-tensor FP8 (hand-computed): the input and the weight are read in bf16 and written in both layouts
    (4 B per element each); the weight's part is marked."""
    _, graph = _graph()
    op = _quant(graph)
    assert op.bytes == 4.0 * (TOKENS * H + H * QKV)
    assert op.weight_bytes == 4.0 * H * QKV
    assert op.kernels == 2


def test_torchaos_rowwise_recipe_casts_the_weight_for_each_gemm():
    _, graph = _graph("stack=torchtitan_fsdp2", "training.precision=fp8_rowwise")
    assert all(op.weight_bytes == 0.0 for op in graph.layer.forward.ops if isinstance(op, MemoryOp))


@pytest.mark.parametrize("extra,share", [
    ((), 1 / 8),  # TE: one micro-batch in 8 casts the weights
    (("training.global_batch_size=2",), 1 / 2),
    (("training.global_batch_size=1",), 1.0),  # one micro-batch: every step casts once, as before
    (("training.precision=bf16",), 1.0),  # nothing to quantize
    (("stack=torchtitan_fsdp2",), 1.0),  # torchao casts the weight in every forward
])
def test_the_share_of_micro_batches_that_cast_the_weights(extra, share):
    w, _ = _graph(*extra)
    assert weight_cast_share(w.stack, w.plan) == pytest.approx(share)


def test_a_cached_weight_is_priced_at_its_step_average():
    w, graph = _graph()
    cached = with_cached_weights(graph, weight_cast_share(w.stack, w.plan))
    op = _quant(cached)
    assert op.bytes == pytest.approx(4.0 * (TOKENS * H + H * QKV / 8))
    assert op.weight_bytes == pytest.approx(4.0 * H * QKV / 8)
    assert op.kernels == 1  # the input's cast; the weight's kernel runs on the first micro-batch only
    assert with_cached_weights(graph, 1 / 8) is cached  # built once per (graph, share)
    assert with_cached_weights(graph, 1.0) is graph
    gemms = [op for op in graph.layer.forward.ops if not isinstance(op, MemoryOp)]
    assert gemms == [op for op in cached.layer.forward.ops if not isinstance(op, MemoryOp)]


def test_the_cache_shortens_a_step_of_many_micro_batches_only():
    """The same step with and without the cache: shorter with it at 8 micro-batches, equal at 1 and in bf16."""
    def step_s(*extra):
        return simulate(compose([*PLAN, *extra])).iteration_time_s

    off = "stack.fp8_weight_cache=false"
    assert step_s() < step_s(off)
    assert step_s("training.global_batch_size=1") == step_s("training.global_batch_size=1", off)
    assert step_s("training.precision=bf16") == step_s("training.precision=bf16", off)
