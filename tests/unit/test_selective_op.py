"""torchtitan's per-op selective checkpointing: what the backward runs again (graph.builder)."""
from vtrain import compose
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import Collective, Gemm
from vtrain.graph.options import GraphOptions, graph_options
from vtrain.workload.partition import partition


def recompute_of(*overrides, cluster="h100x1024", stack_options=False):
    w = build_workload(compose(["+model=llama3_8b", f"+cluster={cluster}", "parallelism.pp=1", "parallelism.dp=8",
                                "parallelism.recompute=selective_op", "training.global_batch_size=64", *overrides]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    opts = graph_options(w.stack) if stack_options else GraphOptions()
    return w, build_model_graph(w.model, w.plan, comm.tp, opts=opts).layer


def test_it_replays_the_forward_but_the_saved_outputs_in_order():
    """Saved: matmuls but every second (wq, wv, w1, w2 kept; wk, wo, w3 again), attention, TP reduce-scatters;
    the sequence-parallel all-gathers are not in torchtitan's _save_list, so they run again."""
    w, layer = recompute_of("parallelism.tp=8", "parallelism.sequence_parallel=true")
    assert [op.name for op in layer.recompute.ops] == [
        "norm1", "qkv.ag", "wk.recompute", "rope", "wo.recompute", "residual1", "norm2", "fc1.ag", "w3.recompute",
        "swiglu", "residual2"]
    gathers = [op for op in layer.recompute.ops if isinstance(op, Collective)]
    assert all(op.kind.value == "all_gather" and op.group.value == "tp" for op in gathers)
    h, kv, f, t = w.model.hidden_size, w.model.kv_size, w.model.ffn_hidden_size, 8
    tokens = w.plan.tokens_per_rank
    gemms = {op.name: (op.m, op.n, op.k) for op in layer.recompute.ops if isinstance(op, Gemm)}
    assert gemms == {"wk.recompute": (tokens, kv // t, h), "wo.recompute": (tokens, h, h // t),
                     "w3.recompute": (tokens, f // t, h)}


def test_without_tensor_parallelism_nothing_is_gathered_again():
    _, layer = recompute_of("parallelism.tp=1", "parallelism.sequence_parallel=false")
    assert not [op for op in layer.recompute.ops if isinstance(op, Collective)]
    assert [op.name for op in layer.recompute.ops if isinstance(op, Gemm)] == [
        "wk.recompute", "wo.recompute", "w3.recompute"]


def test_nvfp4_saves_no_matmul_output_so_every_linear_runs_again():
    """torchao's NVFP4 linear is an autograd Function calling F.scaled_mm, not aten.mm: torchtitan's save list
    keeps none of its outputs, so the recompute runs all the layer's GEMMs (with their quantization kernels);
    torchao's MX linear multiplies MXTensors with torch.mm and keeps every second one's output."""
    base = ("parallelism.tp=1", "parallelism.sequence_parallel=false", "stack=torchtitan_fsdp2")
    for separate, n in ((True, 7), (False, 4)):  # torchtitan's wq, wk, wv, wo, w1, w3, w2 | fused qkv, proj, fc1, fc2
        _, nvfp4 = recompute_of(*base, "training.precision=nvfp4", cluster="gb200_nvl72x16", stack_options=separate)
        _, mxfp8 = recompute_of(*base, "training.precision=mxfp8", cluster="gb200_nvl72x16", stack_options=separate)
        forward_gemms = [op for op in nvfp4.forward.ops if isinstance(op, Gemm) and not op.attention]
        again = [op for op in nvfp4.recompute.ops if isinstance(op, Gemm)]
        assert len(forward_gemms) == n and again == forward_gemms  # in forward order
        assert len([op for op in mxfp8.recompute.ops if isinstance(op, Gemm)]) == 3  # wk, wo, w3


def test_nvfp4_per_op_sac_keeps_the_block_input_attention_output_and_lse_only():
    from vtrain.sim.memory import layer_activation_bytes

    base = ("parallelism.tp=1", "parallelism.sequence_parallel=false")
    w4, _ = recompute_of(*base, "training.precision=nvfp4", cluster="gb200_nvl72x16")
    w8, _ = recompute_of(*base, "training.precision=mxfp8", cluster="gb200_nvl72x16")
    m, p = w4.model, w4.plan
    tokens = p.seq_len * p.micro_batch_size
    dt = 2  # bf16 activations
    lse = 4.0 * m.num_heads * tokens
    assert layer_activation_bytes(m, p) == dt * 2 * tokens * m.hidden_size + lse
    # mxfp8 also keeps wq, wv, w1 and w2's outputs (h + kv + f + h per token)
    saved = dt * tokens * (2 * m.hidden_size + m.kv_size + m.ffn_hidden_size)
    assert layer_activation_bytes(w8.model, w8.plan) == dt * 2 * tokens * m.hidden_size + saved + lse
