"""Transformer Engine's casts (vtrain.graph.te_quant): the norm writes the QKV and FC1 inputs quantized
(LayerNormLinear) for per-tensor FP8 alone, per-tensor FP8 on Blackwell writes no transposed copy, and NVFP4 reads
each activation and gradient three times (amax, row-wise cast, column-wise Hadamard cast)."""
import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import MemoryOp
from vtrain.graph.options import graph_options
from vtrain.graph.te_quant import NONE, TeCasts, te_switches, with_te_quantization
from vtrain.workload.partition import partition

# Llama 3 8B, TP 8, one micro-batch of 1 x 8192
PLAN = ["+model=llama3_8b", "parallelism.tp=8", "parallelism.pp=1", "parallelism.dp=1",
        "parallelism.micro_batch_size=1", "training.global_batch_size=1", "training.seq_len=8192",
        "parallelism.recompute=none", "stack=megatron_core_te", "training.precision=fp8"]
TOKENS, H, QKV, FFN = 8192, 4096, (4096 + 2 * 1024) // 8, 2 * 14336 // 8


def _built(cluster, *extra):
    w = build_workload(compose([*PLAN, f"+cluster={cluster}", *extra]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    graph = build_model_graph(w.model, w.plan, comm.tp, comm.cp, opts=graph_options(w.stack))
    return w, graph


def _ops(graph, backward=False):
    ops = graph.layer.backward.ops if backward else graph.layer.forward.ops
    return {op.name: op for op in ops if isinstance(op, MemoryOp)}


@pytest.mark.parametrize("cluster,extra,switches", [
    ("h100x1024", (), (True, False, 1.0)),  # Hopper: FP8 columnwise tensors are transposed copies
    ("b200x1024", (), (True, True, 1.0)),
    # MX scales differ by layout: both written; TE's norm writes bf16 for an MXFP8 output (no cuDNN norm)
    ("b200x1024", ("training.precision=mxfp8",), (False, False, 1.0)),
    ("b200x1024", ("training.precision=nvfp4",), (False, False, 7.0 / 4.0)),  # amax, row-wise, Hadamard column-wise
    ("b200x1024", ("training.precision=bf16",), (False, False, 1.0)),
    ("b200x1024", ("stack=torchtitan_fsdp2",), (False, False, 1.0)),  # torchao casts as the graph prices them
])
def test_which_casts_run_as_transformer_engine_runs_them(cluster, extra, switches):
    w, _ = _built(cluster, *extra)
    assert te_switches(w.stack, w.plan, w.cluster.gpu.architecture) == switches


def test_the_norm_writes_the_qkv_and_fc1_inputs_quantized():
    """Hand-computed on Hopper: the QKV and FC1 casts keep only their weights' bytes (4 B per element) and one
    kernel; the casts of the attention output (proj) and the activation (fc2) stay whole."""
    _, graph = _built("h100x1024")
    after = _ops(with_te_quantization(graph, TeCasts(True, False)))
    assert after["qkv.quant"].bytes == 4.0 * H * QKV and after["qkv.quant"].kernels == 1
    assert after["fc1.quant"].bytes == 4.0 * H * FFN and after["fc1.quant"].kernels == 1
    before = _ops(graph)
    for name in ("proj.quant", "fc2.quant"):
        assert after[name] == before[name]
    assert _ops(with_te_quantization(graph, TeCasts(True, False)), True) == _ops(graph, True)  # gradients: as before


def test_per_tensor_fp8_on_blackwell_writes_no_transposed_copy():
    _, graph = _built("b200x1024")
    both = with_te_quantization(graph, TeCasts(True, True))
    fwd, bwd = _ops(both), _ops(both, True)
    assert fwd["proj.quant"].bytes == pytest.approx(3.0 * (TOKENS * H + H * H) / 8)  # read 2 B, write 1 B
    assert fwd["qkv.quant"].weight_bytes == pytest.approx(3.0 * H * QKV)
    assert bwd["fc1.quant.bwd"].bytes == pytest.approx(0.75 * _ops(graph, True)["fc1.quant.bwd"].bytes)
    assert with_te_quantization(graph, TeCasts(True, True)) is both  # built once per (graph, switches)
    assert with_te_quantization(graph, NONE) is graph


def test_nvfp4_reads_each_activation_and_gradient_three_times():
    """Hand-computed: TE's NVFP4 cast of the attention output (proj, TP 8) is an amax pass (2 B), a row-wise cast
    (2 + 0.5 B) and a column-wise cast with the Hadamard transform (2 + 0.5 B): 7 B per element and three kernels;
    the weight's cast and the norm's bf16 output are as the generic graph prices them (the input casts stay)."""
    _, graph = _built("b200x1024", "training.precision=nvfp4")
    rewritten = with_te_quantization(graph, TeCasts(False, False, 7.0 / 4.0))
    before, after = _ops(graph), _ops(rewritten)
    weight = 4.0 * H * H / 8
    assert before["proj.quant"].bytes == pytest.approx(4.0 * TOKENS * H / 8 + weight)
    assert after["proj.quant"].bytes == pytest.approx(7.0 * TOKENS * H / 8 + weight)
    assert after["proj.quant"].weight_bytes == before["proj.quant"].weight_bytes
    assert after["proj.quant"].kernels == before["proj.quant"].kernels + 2
    assert after["qkv.quant"].bytes > after["qkv.quant"].weight_bytes  # no norm fusion: the input's cast stays
    grad_before, grad_after = _ops(graph, True)["fc2.quant.bwd"], _ops(rewritten, True)["fc2.quant.bwd"]
    assert grad_after.bytes == pytest.approx(grad_before.bytes * 7.0 / 4.0) and grad_after.kernels == 3


def test_transformer_engines_casts_shorten_a_step():
    def step_s(cluster, *extra):
        return simulate(compose([*PLAN, f"+cluster={cluster}", *extra])).iteration_time_s

    off = "stack.te_quantization=false"
    for cluster in ("h100x1024", "b200x1024"):
        assert step_s(cluster) < step_s(cluster, off)
        assert step_s(cluster, "training.precision=bf16") == step_s(cluster, "training.precision=bf16", off)
    nvfp4 = "training.precision=nvfp4"  # NVFP4's amax pass and second cast lengthen it
    assert step_s("b200x1024", nvfp4) > step_s("b200x1024", nvfp4, off)
