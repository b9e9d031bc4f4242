"""CUDA graphs (graph.cuda_graphs, sim.launch.timed_ops): which ops each scope captures, their host time by hand,
and what the scopes do to a host-bound plan; bad scopes are one-line errors."""
import pytest

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.errors import ConfigError
from vtrain.graph.cuda_graphs import captured_ops
from vtrain.graph.ops import Collective, CollectiveKind, Gemm, Group, MemoryOp
from vtrain.sim.launch import timed_ops
from vtrain.sim.simulator import simulate_workload

SMALL = ["+model=gpt_1_7b", "+cluster=h100x1024", "parallelism.tp=2", "parallelism.pp=1", "parallelism.dp=8",
         "parallelism.sequence_parallel=true", "parallelism.micro_batch_size=1", "training.seq_len=1024",
         "training.global_batch_size=64"]


def names(scopes, component, ops):
    pred = captured_ops(scopes, component)
    return [n for n in ops if pred is not None and pred(MemoryOp(n, 1.0))]


def test_each_scope_captures_its_sub_block():
    layer = ["norm1", "qkv.ag", "qkv", "rope", "flash_attn", "proj", "proj.rs", "residual1", "norm2", "fc1", "swiglu",
             "fc2", "residual2", "flash_attn.bwd", "qkv.dgrad", "norm1.bwd", "fc1.wgrad", "norm2.bwd", "mla.q_down"]
    assert names(("attn",), "layer", layer) == ["norm1", "qkv.ag", "qkv", "rope", "flash_attn", "proj", "proj.rs",
                                                "residual1", "flash_attn.bwd", "qkv.dgrad", "norm1.bwd", "mla.q_down"]
    assert names(("mlp",), "layer", layer) == ["norm2", "fc1", "swiglu", "fc2", "residual2", "fc1.wgrad", "norm2.bwd"]
    moe = ["norm2", "moe.router", "moe.router.topk", "moe.permute", "moe.dispatch", "moe.expert.fc1", "moe.combine",
           "moe.unpermute", "residual2", "moe.permute.bwd", "moe.router.dgrad", "norm2.bwd"]
    assert names(("mlp",), "moe", moe) == []  # the mlp scope is a dense layer's
    assert names(("moe_router",), "moe", moe) == ["norm2", "moe.router", "moe.router.topk", "moe.router.dgrad",
                                                  "norm2.bwd"]
    assert names(("moe_preprocess",), "moe", moe) == ["moe.permute", "moe.permute.bwd"]
    assert names(("moe",), "moe", moe) == moe
    assert names(("attn", "mlp"), "head", ["final_norm", "logits"]) == []  # only full_iteration takes the rest
    assert names(("full_iteration",), "head", ["final_norm", "logits"]) == ["final_norm", "logits"]
    assert names(("attn",), "layer", ["residual1+norm2"]) == []  # a fused kernel across the boundary stays eager
    assert names(("attn", "mlp"), "layer", ["residual1+norm2"]) == ["residual1+norm2"]
    assert captured_ops((), "layer") is None


def test_a_captured_run_costs_the_host_one_launch():
    w = build_workload(compose(SMALL))
    cost = cost_model_for(w)

    class Where:
        def where(self, group):
            from vtrain.cost.collectives import GroupPlacement
            return GroupPlacement(2, 2)

    ops = [MemoryOp("norm1", 1e6), Gemm("qkv", m=1024, n=3072, k=2048), MemoryOp("residual1", 1e6),
           Collective("fc1.ag", CollectiveKind.ALL_GATHER, 1e6, Group.TP, 2), Gemm("fc1", m=1024, n=8192, k=2048),
           MemoryOp("norm1.bwd", 1e6)]
    eager = timed_ops(ops, cost, Where(), 0.0)
    graphed = timed_ops(ops, cost, Where(), 0.0, captured_ops(("attn",), "layer"))
    one = cost.host_time_s(1)
    assert [t[1] for t in graphed] == pytest.approx([one, 0.0, 0.0, eager[3][1], eager[4][1], one])
    assert [t[0] for t in graphed] == [t[0] for t in eager]  # the GPU runs the same kernels
    assert sum(t[1] for t in eager) > sum(t[1] for t in graphed)


def test_scopes_take_host_time_off_a_host_bound_plan():
    results = {}
    for scope in ("", "attn", "attn,mlp", "full_iteration"):
        w = build_workload(compose(SMALL + [f"training.cuda_graph_scope='{scope}'"]))
        results[scope] = simulate_workload(w, cost_model_for(w))[0]
    host = [results[s].breakdown.host_overhead_s for s in ("", "attn", "attn,mlp", "full_iteration")]
    times = [results[s].iteration_time_s for s in ("", "attn", "attn,mlp", "full_iteration")]
    assert host[0] > 0.05 * times[0]  # host-bound without graphs
    assert host == sorted(host, reverse=True) and host[-1] < 0.5 * host[0]
    assert times == sorted(times, reverse=True)
    assert results["full_iteration"].breakdown.compute_s == pytest.approx(results[""].breakdown.compute_s)
    assert results["attn"].peak_memory_bytes == results[""].peak_memory_bytes


@pytest.mark.parametrize("overrides,message", [
    (["training.cuda_graph_scope='attn,bogus'"], "training.cuda_graph_scope=attn,bogus: bogus is not one of attn, mlp"),
    (["+model=qwen3_235b_a22b", "parallelism.ep=8", "training.cuda_graph_scope=moe"],
     "training.cuda_graph_scope=moe needs model.capacity_factor with a mixture of experts"),
])
def test_bad_scopes_are_one_line_errors(overrides, message):
    base = [o for o in SMALL if not (o.startswith("+model") and any(x.startswith("+model") for x in overrides))]
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        build_workload(compose(base + overrides))
