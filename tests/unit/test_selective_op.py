"""torchtitan's per-op selective checkpointing: what the backward runs again (graph.builder)."""
from vtrain import compose
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import Collective, Gemm
from vtrain.workload.partition import partition


def recompute_of(*overrides):
    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.pp=1", "parallelism.dp=8",
                                "parallelism.recompute=selective_op", "training.global_batch_size=64", *overrides]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    return w, build_model_graph(w.model, w.plan, comm.tp).layer


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
